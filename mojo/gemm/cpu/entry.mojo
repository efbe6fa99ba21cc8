"""Registration of the CPU GEMM entries in the extension module, and the split of
one call into tasks (each task owns a rectangle of the output)."""
from std.python import Python, PythonObject
from std.python.bindings import PythonModuleBuilder
from max.algorithm import parallelize
from common.ptr import F32Ptr
from common.fpstate import enter_contract_mode, leave_contract_mode
from common.tasks import chunk_bounds
from gemm.cpu.blocking import MR, NR
from gemm.cpu.fp32_v1 import GemmArgs, f32_block


def _arg(args: PythonObject, i: Int) raises -> Int:
    return Int(py=args[i])


def gemm_f32(args: PythonObject) raises -> PythonObject:
    """Arguments: (a, b, c, m, n, k, trans_a, trans_b, a_bf16, b_bf16, tasks, sabotage)."""
    var g = GemmArgs(
        _arg(args, 0), _arg(args, 1), _arg(args, 2), _arg(args, 3), _arg(args, 4),
        _arg(args, 5), _arg(args, 6) != 0, _arg(args, 7) != 0, _arg(args, 8) != 0,
        _arg(args, 9) != 0, _arg(args, 11) != 0,
    )
    var tasks = max(1, _arg(args, 10))
    var m = g.m
    var n = g.n
    ref cpy = Python().cpython()
    var st = cpy.PyEval_SaveThread()
    if g.k == 0:
        var cz = F32Ptr(unsafe_from_address=g.c)
        for i in range(m * n):
            cz.unsafe_store(i, Float32(0))
    else:
        # split the columns when there are enough NR panels, else the rows
        var npan = (n + NR - 1) // NR
        var mpan = (m + MR - 1) // MR
        var split_n = npan >= 2 * tasks or npan >= mpan
        var units = npan if split_n else mpan
        var t_count = max(1, min(tasks, units))

        def work(t: Int) {imm g, imm t_count, imm split_n}:
            var old = enter_contract_mode()
            if split_n:
                var b = chunk_bounds(g.n, t_count, t, NR)
                f32_block(g, 0, g.m, b[0], b[1])
            else:
                var b = chunk_bounds(g.m, t_count, t, MR)
                f32_block(g, b[0], b[1], 0, g.n)
            leave_contract_mode(old)

        if t_count == 1:
            work(0)
        else:
            parallelize(work, t_count)
    cpy.PyEval_RestoreThread(st)
    return PythonObject(None)


def register_gemm(mut m: PythonModuleBuilder) raises:
    m.def_function[gemm_f32]("gemm_f32")

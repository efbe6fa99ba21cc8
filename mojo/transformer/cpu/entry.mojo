"""Registration of the transformer-op entries (plain integer arguments from the
Python layer, which has validated them). Each entry releases the GIL, splits its
rows over tasks and runs every task under the contract floating-point state."""
from std.python import PythonObject
from std.python.bindings import PythonModuleBuilder
from std.memory import bitcast
from std.memory.alloc import unsafe_alloc
from common.ptr import F32Ptr, I64Ptr, ptr_f32
from common.fpstate import enter_contract_mode, leave_contract_mode
from common.tasks import chunk_bounds, run_tasks
from transformer.cpu.ops import gather_rows, gather_panel_rows, rmsnorm_rows, rope_table_rows, rope_rows, silu_mul_rows, add_rows, elementwise, softmax_rows, mean_rows, sample_rows
from transformer.cpu.attention import AttnArgs, attn_unit, attn_ws_floats, attn_scale


def _arg(args: PythonObject, i: Int) raises -> Int:
    return Int(py=args[i])


def _f32(bits: Int) -> Float32:
    return bitcast[DType.float32, 1](SIMD[DType.uint32, 1](UInt32(bits)))[0]


def _tasks(units: Int, tasks: Int, grain: Int) -> Int:
    return max(1, min(tasks, units, (units + grain - 1) // grain))


def nn_gather(args: PythonObject) raises -> PythonObject:
    """(table f32, ids i64, out f32, rows, d, tasks)."""
    var table = ptr_f32(_arg(args, 0))
    var ids = I64Ptr(unsafe_from_address=_arg(args, 1))
    var out = ptr_f32(_arg(args, 2))
    var rows = _arg(args, 3)
    var d = _arg(args, 4)
    var t_count = _tasks(rows, _arg(args, 5), max(1, 16384 // max(1, d)))
    def work(t: Int) {imm table, imm ids, imm out, imm rows, imm d, imm t_count}:
        var b = chunk_bounds(rows, t_count, t, 1)
        gather_rows(table, ids, out, d, b[0], b[1])

    run_tasks(work, t_count)
    return PythonObject(None)


def nn_gather_panels(args: PythonObject) raises -> PythonObject:
    """(panels, fmt, scales, ids i64, out f32, rows, d, nr, tasks): nn_gather from a table
    held as prepared fp32.v1 panels of width nr (this build's NR) in panel format fmt (0
    float32, 1 bf16 bits, 2 int8 codes with scales: gemm/cpu/pack_lowbit.mojo)."""
    var panels = _arg(args, 0)
    var fmt = _arg(args, 1)
    var scales = _arg(args, 2)
    var ids = I64Ptr(unsafe_from_address=_arg(args, 3))
    var out = ptr_f32(_arg(args, 4))
    var rows = _arg(args, 5)
    var d = _arg(args, 6)
    var nr = _arg(args, 7)
    var t_count = _tasks(rows, _arg(args, 8), max(1, 16384 // max(1, d)))
    def work(t: Int) {imm panels, imm fmt, imm scales, imm ids, imm out, imm rows, imm d, imm nr, imm t_count}:
        var b = chunk_bounds(rows, t_count, t, 1)
        gather_panel_rows(panels, fmt, scales, ids, out, d, nr, b[0], b[1])

    run_tasks(work, t_count)
    return PythonObject(None)


def nn_rmsnorm(args: PythonObject) raises -> PythonObject:
    """(x, ldx, w, out, ldo, rows, d, eps f32 bits, tasks)."""
    var x = ptr_f32(_arg(args, 0))
    var ldx = _arg(args, 1)
    var w = ptr_f32(_arg(args, 2))
    var out = ptr_f32(_arg(args, 3))
    var ldo = _arg(args, 4)
    var rows = _arg(args, 5)
    var d = _arg(args, 6)
    var eps = _f32(_arg(args, 7))
    var t_count = _tasks(rows, _arg(args, 8), max(1, 8192 // max(1, d)))
    def work(t: Int) {imm x, imm ldx, imm w, imm out, imm ldo, imm rows, imm d, imm eps, imm t_count}:
        var b = chunk_bounds(rows, t_count, t, 1)
        rmsnorm_rows(x, ldx, w, out, ldo, d, eps, b[0], b[1])

    run_tasks(work, t_count)
    return PythonObject(None)


def nn_rope_table(args: PythonObject) raises -> PythonObject:
    """(cos f32, sin f32, positions, head_dim, theta f32 bits, tasks)."""
    var cos_t = ptr_f32(_arg(args, 0))
    var sin_t = ptr_f32(_arg(args, 1))
    var npos = _arg(args, 2)
    var hd = _arg(args, 3)
    var theta = _f32(_arg(args, 4))
    var t_count = _tasks(npos, _arg(args, 5), 256)
    def work(t: Int) {imm cos_t, imm sin_t, imm npos, imm hd, imm theta, imm t_count}:
        var b = chunk_bounds(npos, t_count, t, 1)
        rope_table_rows(cos_t, sin_t, hd, theta, b[0], b[1])

    run_tasks(work, t_count)
    return PythonObject(None)


def nn_rope(args: PythonObject) raises -> PythonObject:
    """(src, lds, dst, ldd, dst_head_stride, n_heads, head_dim, cos, sin, pos0, length,
    rows, transposed, tmax, tasks, rot_dim)."""
    var src = ptr_f32(_arg(args, 0))
    var lds = _arg(args, 1)
    var dst = ptr_f32(_arg(args, 2))
    var ldd = _arg(args, 3)
    var dhs = _arg(args, 4)
    var nh = _arg(args, 5)
    var hd = _arg(args, 6)
    var cos_t = ptr_f32(_arg(args, 7))
    var sin_t = ptr_f32(_arg(args, 8))
    var pos0 = _arg(args, 9)
    var length = _arg(args, 10)
    var rows = _arg(args, 11)
    var transposed = _arg(args, 12) != 0
    var tmax = _arg(args, 13)
    var t_count = _tasks(rows, _arg(args, 14), max(1, 4096 // max(1, nh * hd)))
    var rot = _arg(args, 15)
    if rot < 0 or rot > hd or rot % 2 != 0:
        raise Error(String("mojolearn: nn_rope: rot_dim ", rot, " is not an even count <= head_dim ", hd))
    def work(t: Int) {imm src, imm lds, imm dst, imm ldd, imm dhs, imm nh, imm hd, imm cos_t, imm sin_t, imm pos0, imm length, imm rows, imm transposed, imm tmax, imm t_count, imm rot}:
        var b = chunk_bounds(rows, t_count, t, 1)
        rope_rows(src, lds, dst, ldd, dhs, nh, hd, cos_t, sin_t, pos0, length, b[0], b[1], transposed, tmax, rot)

    run_tasks(work, t_count)
    return PythonObject(None)


def nn_silu_mul(args: PythonObject) raises -> PythonObject:
    """(g, u, ld_in, out, ld_out, n, rows, tasks)."""
    var g = ptr_f32(_arg(args, 0))
    var u = ptr_f32(_arg(args, 1))
    var ld_in = _arg(args, 2)
    var out = ptr_f32(_arg(args, 3))
    var ld_out = _arg(args, 4)
    var n = _arg(args, 5)
    var rows = _arg(args, 6)
    var t_count = _tasks(rows, _arg(args, 7), max(1, 8192 // max(1, n)))
    def work(t: Int) {imm g, imm u, imm ld_in, imm out, imm ld_out, imm n, imm rows, imm t_count}:
        var b = chunk_bounds(rows, t_count, t, 1)
        silu_mul_rows(g, u, ld_in, out, ld_out, n, b[0], b[1])

    run_tasks(work, t_count)
    return PythonObject(None)


def nn_add(args: PythonObject) raises -> PythonObject:
    """(x, ldx, y, ldy, out, ldo, n, rows, tasks): out = ftz(x + y) row by row; ldy = 0
    broadcasts one row of y (a bias)."""
    var x = ptr_f32(_arg(args, 0))
    var ldx = _arg(args, 1)
    var y = ptr_f32(_arg(args, 2))
    var ldy = _arg(args, 3)
    var o = ptr_f32(_arg(args, 4))
    var ldo = _arg(args, 5)
    var n = _arg(args, 6)
    var rows = _arg(args, 7)
    var t_count = _tasks(rows, _arg(args, 8), max(1, 32768 // max(1, n)))
    def work(t: Int) {imm x, imm ldx, imm y, imm ldy, imm o, imm ldo, imm n, imm rows, imm t_count}:
        var b = chunk_bounds(rows, t_count, t, 1)
        add_rows(x, ldx, y, ldy, o, ldo, n, b[0], b[1])

    run_tasks(work, t_count)
    return PythonObject(None)


def nn_attention(args: PythonObject) raises -> PythonObject:
    """(q, ldq, kt, v, out, batch, length, n_heads, n_kv, head_dim, pos0, tmax, fixed15, tasks)."""
    var tasks = max(1, _arg(args, 13))
    var length = _arg(args, 6)
    var batch = _arg(args, 5)
    var n_kv = _arg(args, 8)
    # query chunks so there are enough units for the tasks
    var groups = batch * n_kv
    var want = max(1, (4 * tasks + groups - 1) // groups)
    var qchunk = max(1, (length + want - 1) // want)
    var a = AttnArgs(
        _arg(args, 0), _arg(args, 1), _arg(args, 2), _arg(args, 3), _arg(args, 4), batch,
        length, _arg(args, 7), n_kv, _arg(args, 9), _arg(args, 10), _arg(args, 11),
        _arg(args, 12) != 0, qchunk,
    )
    var units = groups * ((length + qchunk - 1) // qchunk)
    var t_count = max(1, min(tasks, units))
    var per = attn_ws_floats(a)
    var ws = unsafe_alloc[Float32](per * t_count, alignment=64).unsafe_origin_cast[MutAnyOrigin]()

    def work(t: Int) {imm a, imm units, imm t_count, imm ws, imm per}:
        var b = chunk_bounds(units, t_count, t, 1)
        for u in range(b[0], b[1]):
            attn_unit(a, u, ws.unsafe_offset(t * per))

    run_tasks(work, t_count)
    ws.unsafe_free()
    return PythonObject(None)


def nn_elementwise(args: PythonObject) raises -> PythonObject:
    """(op, src, dst, n): the arithmetic layer's functions over an array (tests)."""
    var op = _arg(args, 0)
    var src = ptr_f32(_arg(args, 1))
    var dst = ptr_f32(_arg(args, 2))
    var n = _arg(args, 3)
    def work(t: Int) {imm op, imm src, imm dst, imm n}:
        elementwise(op, src, dst, 0, n)

    run_tasks(work, 1)
    return PythonObject(None)


def nn_attn_scale(args: PythonObject) raises -> PythonObject:
    """(head_dim,) -> the float32 bits of the attention scale (rule M-6)."""
    var old = enter_contract_mode()
    var s = attn_scale(_arg(args, 0))
    leave_contract_mode(old)
    return PythonObject(Int(bitcast[DType.uint32, 1](SIMD[DType.float32, 1](s))[0]))


def nn_softmax(args: PythonObject) raises -> PythonObject:
    """(x, out, rows, n, log, tasks): softmax (log = 0) or log_softmax (1) of each row."""
    var x = ptr_f32(_arg(args, 0))
    var o = ptr_f32(_arg(args, 1))
    var rows = _arg(args, 2)
    var n = _arg(args, 3)
    var log = _arg(args, 4) != 0
    var t_count = _tasks(rows, _arg(args, 5), max(1, 8192 // max(1, n)))
    def work(t: Int) {imm x, imm o, imm rows, imm n, imm log, imm t_count}:
        var b = chunk_bounds(rows, t_count, t, 1)
        softmax_rows(x, o, n, log, b[0], b[1])

    run_tasks(work, t_count)
    return PythonObject(None)


def nn_mean(args: PythonObject) raises -> PythonObject:
    """(x, out, rows, n, tasks): the mean of each row of n (a serial sum)."""
    var x = ptr_f32(_arg(args, 0))
    var o = ptr_f32(_arg(args, 1))
    var rows = _arg(args, 2)
    var n = _arg(args, 3)
    var t_count = _tasks(rows, _arg(args, 4), max(1, 8192 // max(1, n)))
    def work(t: Int) {imm x, imm o, imm rows, imm n, imm t_count}:
        var b = chunk_bounds(rows, t_count, t, 1)
        mean_rows(x, o, n, b[0], b[1])

    run_tasks(work, t_count)
    return PythonObject(None)


def nn_sample_rows(args: PythonObject) raises -> PythonObject:
    """(x, rows, n, r, out): M-32, the sampled token of each row of n float32 logits
    (n >= 1) with its float64 draw r[i], into out[i] (int64)."""
    var x = ptr_f32(_arg(args, 0))
    var rows = _arg(args, 1)
    var n = _arg(args, 2)
    var r = _arg(args, 3)
    var o = I64Ptr(unsafe_from_address=_arg(args, 4))
    var e = unsafe_alloc[Float32](max(1, n), alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    def work(t: Int) {imm x, imm rows, imm n, imm r, imm o, imm e}:
        sample_rows(x, n, r, o, e, 0, rows)

    run_tasks(work, 1)
    e.unsafe_free()
    return PythonObject(None)


def register_nn(mut m: PythonModuleBuilder) raises:
    m.def_function[nn_sample_rows]("nn_sample_rows")
    m.def_function[nn_softmax]("nn_softmax")
    m.def_function[nn_mean]("nn_mean")
    m.def_function[nn_gather]("nn_gather")
    m.def_function[nn_gather_panels]("nn_gather_panels")
    m.def_function[nn_rmsnorm]("nn_rmsnorm")
    m.def_function[nn_rope_table]("nn_rope_table")
    m.def_function[nn_rope]("nn_rope")
    m.def_function[nn_silu_mul]("nn_silu_mul")
    m.def_function[nn_add]("nn_add")
    m.def_function[nn_attention]("nn_attention")
    m.def_function[nn_elementwise]("nn_elementwise")
    m.def_function[nn_attn_scale]("nn_attn_scale")

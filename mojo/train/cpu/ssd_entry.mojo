"""Registration of the Mamba-2 SSD training entries (T-75 .. T-86): plain integer
arguments from the Python layer (python/mojolearn/_train/ssm/mamba2.py), which has
validated them. Each entry releases the GIL, splits its independent units ((batch row,
head) pairs, token rows, elements) over tasks and runs every task under the contract
floating-point state; no bit depends on the split."""
from std.python import PythonObject
from std.python.bindings import PythonModuleBuilder
from std.memory import bitcast
from std.memory.alloc import unsafe_alloc
from common.ptr import F32Ptr, ptr_f32
from common.tasks import chunk_bounds, run_tasks
from ssm.cpu.ops import Ssd2Args, ssd2_gram_range
from train.cpu.ssd_ops import SsdT, WS_FLOATS, Q, ssd_forward_unit
from train.cpu.ssd_bwd import ssd_backward_unit, ssd_join_rows, dt_clamp_bwd


def _arg(args: PythonObject, i: Int) raises -> Int:
    return Int(py=args[i])


def _f32(bits: Int) -> Float32:
    return bitcast[DType.float32, 1](SIMD[DType.uint32, 1](UInt32(bits)))[0]


def _tasks(units: Int, tasks: Int, grain: Int) -> Int:
    return max(1, min(tasks, units, (units + grain - 1) // grain))


def _falloc(n: Int) -> F32Ptr:
    return unsafe_alloc[Float32](max(1, n), alignment=64).unsafe_origin_cast[MutAnyOrigin]()


def _gram(s: SsdT, tasks: Int):
    """S-22's G = dot(k = 128) of C and B per (batch row, chunk), shared by the heads:
    the inference kernel's own routine (the same bits)."""
    var g = Ssd2Args(s.xbc, s.ldx, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, s.gmat, s.batch, s.L,
                     s.H, s.di, 0)
    var gu = s.batch * s.nch() * 16
    var tg = _tasks(gu, tasks, 1)
    def gram(t: Int) {imm g, imm gu, imm tg}:
        var b = chunk_bounds(gu, tg, t, 1)
        ssd2_gram_range(g, b[0], b[1])

    run_tasks(gram, tg)


def train_ssd_forward(args: PythonObject) raises -> PythonObject:
    """(xbc, ldx, dt, a, d, s, lds, hs, batch, length, heads, di, tasks): T-75, S-20 ..
    S-25 up to s = add(Y, mul(x, D)) from a fresh state. xbc (batch * length, ldx) the
    post-SiLU x, B, C columns; dt (batch * length, heads) after S-19; a, d (heads); s
    (batch * length, lds) the di columns written; hs (batch, heads, nchunks, 64, 128) the
    state entering every chunk, written."""
    var s = SsdT(_arg(args, 0), _arg(args, 1), _arg(args, 2), _arg(args, 3), _arg(args, 4),
                 _arg(args, 7), 0, _arg(args, 8), _arg(args, 9), _arg(args, 10), _arg(args, 11))
    var so = ptr_f32(_arg(args, 5))
    var lds = _arg(args, 6)
    var tasks = _arg(args, 12)
    var gm = _falloc(s.batch * s.nch() * Q * Q)
    s.gmat = Int(gm)
    _gram(s, tasks)
    var units = s.batch * s.H
    var tu = _tasks(units, tasks, 1)
    var ws = _falloc(tu * WS_FLOATS)
    var wsa = Int(ws)
    def work(t: Int) {imm s, imm so, imm lds, imm units, imm tu, imm wsa}:
        var b = chunk_bounds(units, tu, t, 1)
        var w = F32Ptr(unsafe_from_address=wsa).unsafe_offset(t * WS_FLOATS)
        for u in range(b[0], b[1]):
            ssd_forward_unit(s, so, lds, u // s.H, u % s.H, w)

    run_tasks(work, tu)
    ws.unsafe_free()
    gm.unsafe_free()
    return PythonObject(None)


def train_ssd_backward(args: PythonObject) raises -> PythonObject:
    """(xbc, ldx, dt, a, d, hs, ds, ldds, dxbc, lddx, ddt, ta, td, batch, length, heads,
    di, tasks): T-77 .. T-85 from dS (batch * length, ldds) at s: dxbc (batch * length,
    lddx) its x, B, C columns written (dx, dB, dC); ddt (batch * length, heads) the
    gradient at dt; ta, td (batch * length, heads) the per-token terms of A_log and D
    (their gradients are the folds over the tokens). hs: train_ssd_forward's."""
    var s = SsdT(_arg(args, 0), _arg(args, 1), _arg(args, 2), _arg(args, 3), _arg(args, 4),
                 _arg(args, 5), 0, _arg(args, 13), _arg(args, 14), _arg(args, 15), _arg(args, 16))
    var ds = ptr_f32(_arg(args, 6))
    var ldds = _arg(args, 7)
    var dxo = ptr_f32(_arg(args, 8))
    var lddx = _arg(args, 9)
    var ddt = ptr_f32(_arg(args, 10))
    var ta = ptr_f32(_arg(args, 11))
    var td = ptr_f32(_arg(args, 12))
    var tasks = _arg(args, 17)
    var gm = _falloc(s.batch * s.nch() * Q * Q)
    s.gmat = Int(gm)
    _gram(s, tasks)
    var wsb = _falloc(s.batch * s.H * s.L * 128)
    var wsc = _falloc(s.batch * s.H * s.L * 128)
    var units = s.batch * s.H
    var tu = _tasks(units, tasks, 1)
    var ws = _falloc(tu * WS_FLOATS)
    var wsa = Int(ws)
    var wba = Int(wsb)
    var wca = Int(wsc)
    def work(t: Int) {imm s, imm ds, imm ldds, imm dxo, imm lddx, imm ddt, imm ta, imm td, imm units, imm tu, imm wsa, imm wba, imm wca}:
        var b = chunk_bounds(units, tu, t, 1)
        var w = F32Ptr(unsafe_from_address=wsa).unsafe_offset(t * WS_FLOATS)
        for u in range(b[0], b[1]):
            ssd_backward_unit(s, ds, ldds, dxo, lddx, ddt, ta, td, F32Ptr(unsafe_from_address=wba),
                              F32Ptr(unsafe_from_address=wca), u // s.H, u % s.H, w)

    run_tasks(work, tu)
    var rows = s.batch * s.L
    var tr = _tasks(rows, tasks, 16)
    def join(t: Int) {imm s, imm dxo, imm lddx, imm rows, imm tr, imm wba, imm wca}:
        var b = chunk_bounds(rows, tr, t, 1)
        ssd_join_rows(s, F32Ptr(unsafe_from_address=wba), F32Ptr(unsafe_from_address=wca),
                      dxo, lddx, b[0], b[1])

    run_tasks(join, tr)
    ws.unsafe_free()
    wsb.unsafe_free()
    wsc.unsafe_free()
    gm.unsafe_free()
    return PythonObject(None)


def train_ssd_dt_clamp_bwd(args: PythonObject) raises -> PythonObject:
    """(g, v, out, n, lo_bits, hi_bits, tasks): T-76, out = g where S-19's clamp kept v
    (the softplus output), +0 where it replaced it."""
    var g = ptr_f32(_arg(args, 0))
    var v = ptr_f32(_arg(args, 1))
    var dst = ptr_f32(_arg(args, 2))
    var n = _arg(args, 3)
    var lo = _f32(_arg(args, 4))
    var hi = _f32(_arg(args, 5))
    var tc = _tasks(n, _arg(args, 6), 65536)
    def work(t: Int) {imm g, imm v, imm dst, imm n, imm lo, imm hi, imm tc}:
        var b = chunk_bounds(n, tc, t, 1)
        dt_clamp_bwd(g, v, dst, lo, hi, b[0], b[1])

    run_tasks(work, tc)
    return PythonObject(None)


def register_train_ssd(mut m: PythonModuleBuilder) raises:
    m.def_function[train_ssd_forward]("train_ssd_forward")
    m.def_function[train_ssd_backward]("train_ssd_backward")
    m.def_function[train_ssd_dt_clamp_bwd]("train_ssd_dt_clamp_bwd")

"""Registration of the state-space op entries (plain integer arguments from the Python
layer, which has validated them). Each entry releases the GIL, splits its independent
units over tasks and runs every task under the contract floating-point state."""
from std.python import PythonObject
from std.python.bindings import PythonModuleBuilder
from std.memory import bitcast
from std.memory.alloc import unsafe_alloc
from common.ptr import F32Ptr, ptr_f32
from common.tasks import chunk_bounds, run_tasks
from ssm.cpu.ops import (
    norm_lanes_rows, conv_range, softplus_rows, neg_exp, mamba1_scan_range, Ssd2Args,
    ssd2_gram_range, ssd2_unit_range, ssd2_store_open, W, Q,
)


def _arg(args: PythonObject, i: Int) raises -> Int:
    return Int(py=args[i])


def _f32(bits: Int) -> Float32:
    return bitcast[DType.float32, 1](SIMD[DType.uint32, 1](UInt32(bits)))[0]


def _tasks(units: Int, tasks: Int, grain: Int) -> Int:
    return max(1, min(tasks, units, (units + grain - 1) // grain))


def ssm_norm_lanes(args: PythonObject) raises -> PythonObject:
    """(x, ldx, w, out, ldo, rows, n, eps f32 bits, tasks): S-10."""
    var x = ptr_f32(_arg(args, 0))
    var ldx = _arg(args, 1)
    var w = ptr_f32(_arg(args, 2))
    var out = ptr_f32(_arg(args, 3))
    var ldo = _arg(args, 4)
    var rows = _arg(args, 5)
    var n = _arg(args, 6)
    var eps = _f32(_arg(args, 7))
    var t_count = _tasks(rows, _arg(args, 8), max(1, 8192 // max(1, n)))
    def work(t: Int) {imm x, imm ldx, imm w, imm out, imm ldo, imm rows, imm n, imm eps, imm t_count}:
        var b = chunk_bounds(rows, t_count, t, 1)
        norm_lanes_rows(x, ldx, w, out, ldo, n, eps, b[0], b[1])

    run_tasks(work, t_count)
    return PythonObject(None)


def ssm_conv(args: PythonObject) raises -> PythonObject:
    """(x, ldx, w, bias, window, out, ldo, batch, length, channels, silu, tasks): S-13
    over w (channels, 4), bias (channels) and the window (batch, channels, 4), read and
    advanced in place; then SiLU when silu != 0."""
    var x = ptr_f32(_arg(args, 0))
    var ldx = _arg(args, 1)
    var cw = ptr_f32(_arg(args, 2))
    var bias = ptr_f32(_arg(args, 3))
    var win = ptr_f32(_arg(args, 4))
    var out = ptr_f32(_arg(args, 5))
    var ldo = _arg(args, 6)
    var batch = _arg(args, 7)
    var L = _arg(args, 8)
    var C = _arg(args, 9)
    var act = _arg(args, 10) != 0
    var units = batch * ((C + W - 1) // W)
    var t_count = _tasks(units, _arg(args, 11), max(1, 4096 // max(1, L * W)))
    def work(t: Int) {imm x, imm ldx, imm cw, imm bias, imm win, imm out, imm ldo, imm batch, imm L, imm C, imm act, imm units, imm t_count}:
        var b = chunk_bounds(units, t_count, t, 1)
        conv_range(x, ldx, cw, bias, win, out, ldo, batch, L, C, act, b[0], b[1])

    run_tasks(work, t_count)
    return PythonObject(None)


def ssm_softplus(args: PythonObject) raises -> PythonObject:
    """(x, ldx, bias, out, ldo, rows, n, clamp, lo f32 bits, hi f32 bits, tasks):
    S-16 / S-19's softplus of x + bias, clamped to [lo, hi] when clamp != 0."""
    var x = ptr_f32(_arg(args, 0))
    var ldx = _arg(args, 1)
    var bias = ptr_f32(_arg(args, 2))
    var out = ptr_f32(_arg(args, 3))
    var ldo = _arg(args, 4)
    var rows = _arg(args, 5)
    var n = _arg(args, 6)
    var clamp = _arg(args, 7) != 0
    var lo = _f32(_arg(args, 8))
    var hi = _f32(_arg(args, 9))
    var t_count = _tasks(rows, _arg(args, 10), max(1, 4096 // max(1, n)))
    def work(t: Int) {imm x, imm ldx, imm bias, imm out, imm ldo, imm rows, imm n, imm clamp, imm lo, imm hi, imm t_count}:
        var b = chunk_bounds(rows, t_count, t, 1)
        softplus_rows(x, ldx, bias, out, ldo, n, clamp, lo, hi, b[0], b[1])

    run_tasks(work, t_count)
    return PythonObject(None)


def ssm_neg_exp(args: PythonObject) raises -> PythonObject:
    """(x, out, n): S-15's A = neg(expf(A_log))."""
    var x = ptr_f32(_arg(args, 0))
    var out = ptr_f32(_arg(args, 1))
    var n = _arg(args, 2)
    def work(t: Int) {imm x, imm out, imm n}:
        neg_exp(x, out, n)

    run_tasks(work, 1)
    return PythonObject(None)


def mamba1_scan(args: PythonObject) raises -> PythonObject:
    """(u, ldu, delta, ldd, a, bc, ldbc, b_off, c_off, d, z, ldz, h, out, ldo, batch,
    length, di, tasks): S-17, S-18 up to the gate; a the A (di, 16), d the D (di), h the
    state (batch, di, 16) read and written in place."""
    var u = ptr_f32(_arg(args, 0))
    var ldu = _arg(args, 1)
    var dl = ptr_f32(_arg(args, 2))
    var ldd = _arg(args, 3)
    var a = ptr_f32(_arg(args, 4))
    var bc = ptr_f32(_arg(args, 5))
    var ldbc = _arg(args, 6)
    var boff = _arg(args, 7)
    var coff = _arg(args, 8)
    var dv = ptr_f32(_arg(args, 9))
    var z = ptr_f32(_arg(args, 10))
    var ldz = _arg(args, 11)
    var h = ptr_f32(_arg(args, 12))
    var out = ptr_f32(_arg(args, 13))
    var ldo = _arg(args, 14)
    var batch = _arg(args, 15)
    var L = _arg(args, 16)
    var di = _arg(args, 17)
    var units = batch * ((di + W - 1) // W)
    var t_count = _tasks(units, _arg(args, 18), max(1, 2048 // max(1, L * W)))
    def work(t: Int) {imm u, imm ldu, imm dl, imm ldd, imm a, imm bc, imm ldbc, imm boff, imm coff, imm dv, imm z, imm ldz, imm h, imm out, imm ldo, imm L, imm di, imm units, imm t_count}:
        var b = chunk_bounds(units, t_count, t, 1)
        mamba1_scan_range(u, ldu, dl, ldd, a, bc, ldbc, boff, coff, dv, z, ldz, h, out, ldo, L,
                          di, b[0], b[1])

    run_tasks(work, t_count)
    return PythonObject(None)


def mamba2_ssd(args: PythonObject) raises -> PythonObject:
    """(xbc, ldx, dt, a, d, z, ldz, h, open_x, open_dt, seg, cs, out, ldo, batch, length,
    heads, di, q0, tasks): S-19 .. S-28 from the conv output to the gate. dt (batch *
    length, heads); a, d (heads); the state advanced in place: h (batch, heads, 64, 128),
    open_x (batch, 256, di + 256), open_dt (batch, 256, heads), seg (batch, heads, 256),
    cs (batch, heads)."""
    var s = Ssd2Args(
        _arg(args, 0), _arg(args, 1), _arg(args, 2), _arg(args, 3), _arg(args, 4), _arg(args, 5),
        _arg(args, 6), _arg(args, 7), _arg(args, 8), _arg(args, 9), _arg(args, 10),
        _arg(args, 11), _arg(args, 12), _arg(args, 13), 0, _arg(args, 14), _arg(args, 15),
        _arg(args, 16), _arg(args, 17), _arg(args, 18),
    )
    var tasks = _arg(args, 19)
    if s.q0 < 0 or s.q0 >= Q:
        raise Error(String("mojolearn: mamba2_ssd: q0 ", s.q0, " is not an open-row count < ", Q))
    var nch = s.nchunks()
    var gm = unsafe_alloc[Float32](max(1, s.batch * nch * Q * Q), alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    s.gmat = Int(gm)
    var gu = s.batch * nch * 16
    var tg = _tasks(gu, tasks, 1)
    def gram(t: Int) {imm s, imm gu, imm tg}:
        var b = chunk_bounds(gu, tg, t, 1)
        ssd2_gram_range(s, b[0], b[1])

    run_tasks(gram, tg)
    var units = s.batch * s.H
    var tu = _tasks(units, tasks, 1)
    def work(t: Int) {imm s, imm units, imm tu}:
        var b = chunk_bounds(units, tu, t, 1)
        ssd2_unit_range(s, b[0], b[1])

    run_tasks(work, tu)
    var nb = s.batch
    def store(t: Int) {imm s, imm nb}:
        for b in range(nb):
            ssd2_store_open(s, b)

    run_tasks(store, 1)
    gm.unsafe_free()
    return PythonObject(None)


def register_ssm(mut m: PythonModuleBuilder) raises:
    m.def_function[ssm_norm_lanes]("ssm_norm_lanes")
    m.def_function[ssm_conv]("ssm_conv")
    m.def_function[ssm_softplus]("ssm_softplus")
    m.def_function[ssm_neg_exp]("ssm_neg_exp")
    m.def_function[mamba1_scan]("mamba1_scan")
    m.def_function[mamba2_ssd]("mamba2_ssd")

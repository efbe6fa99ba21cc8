"""Registration of the state-space backward entries (rules T-63 .. T-71): plain integer
arguments from the Python layer (python/mojolearn/_train/kernels.py), which has
validated them. Each entry releases the GIL, splits its independent units (rows, or
(batch row, channel) pairs) over tasks and runs every task under the contract
floating-point state; no bit depends on the split."""
from std.python import PythonObject
from std.python.bindings import PythonModuleBuilder
from std.memory import bitcast
from common.ptr import ptr_f32
from common.tasks import chunk_bounds, run_tasks
from train.cpu.ssm_ops import (
    W, lane_norm_bwd_rows, silu_bwd_rows, softplus_bwd_rows, conv_bwd_range, ScanBwd,
    mamba1_scan_bwd_range,
)


def _arg(args: PythonObject, i: Int) raises -> Int:
    return Int(py=args[i])


def _f32(bits: Int) -> Float32:
    return bitcast[DType.float32, 1](SIMD[DType.uint32, 1](UInt32(bits)))[0]


def _tasks(units: Int, tasks: Int, grain: Int) -> Int:
    return max(1, min(tasks, units, (units + grain - 1) // grain))


def train_ssm_norm_backward(args: PythonObject) raises -> PythonObject:
    """(dy, ldy, x, ldx, w, dx, ldo, terms, ldt, rows, n, eps_bits, tasks): T-63, T-64."""
    var dy = ptr_f32(_arg(args, 0))
    var ldy = _arg(args, 1)
    var x = ptr_f32(_arg(args, 2))
    var ldx = _arg(args, 3)
    var w = ptr_f32(_arg(args, 4))
    var dx = ptr_f32(_arg(args, 5))
    var ldo = _arg(args, 6)
    var terms = ptr_f32(_arg(args, 7))
    var ldt = _arg(args, 8)
    var rows = _arg(args, 9)
    var n = _arg(args, 10)
    var eps = _f32(_arg(args, 11))
    var tc = _tasks(rows, _arg(args, 12), max(1, 2048 // max(1, n)))
    def work(t: Int) {imm dy, imm ldy, imm x, imm ldx, imm w, imm dx, imm ldo, imm terms, imm ldt, imm rows, imm n, imm eps, imm tc}:
        var b = chunk_bounds(rows, tc, t, 1)
        lane_norm_bwd_rows(dy, ldy, x, ldx, w, dx, ldo, terms, ldt, n, eps, b[0], b[1])

    run_tasks(work, tc)
    return PythonObject(None)


def train_ssm_silu_backward(args: PythonObject) raises -> PythonObject:
    """(x, ldx, dy, ldy, out, ldo, rows, n, tasks): T-66."""
    var x = ptr_f32(_arg(args, 0))
    var ldx = _arg(args, 1)
    var dy = ptr_f32(_arg(args, 2))
    var ldy = _arg(args, 3)
    var out = ptr_f32(_arg(args, 4))
    var ldo = _arg(args, 5)
    var rows = _arg(args, 6)
    var n = _arg(args, 7)
    var tc = _tasks(rows, _arg(args, 8), max(1, 2048 // max(1, n)))
    def work(t: Int) {imm x, imm ldx, imm dy, imm ldy, imm out, imm ldo, imm rows, imm n, imm tc}:
        var b = chunk_bounds(rows, tc, t, 1)
        silu_bwd_rows(x, ldx, dy, ldy, out, ldo, n, b[0], b[1])

    run_tasks(work, tc)
    return PythonObject(None)


def train_ssm_softplus_backward(args: PythonObject) raises -> PythonObject:
    """(raw, ldr, bias, dy, ldy, out, ldo, rows, n, clamp, lo_bits, hi_bits, tasks): T-67."""
    var raw = ptr_f32(_arg(args, 0))
    var ldr = _arg(args, 1)
    var bias = ptr_f32(_arg(args, 2))
    var dy = ptr_f32(_arg(args, 3))
    var ldy = _arg(args, 4)
    var out = ptr_f32(_arg(args, 5))
    var ldo = _arg(args, 6)
    var rows = _arg(args, 7)
    var n = _arg(args, 8)
    var clamp = _arg(args, 9) != 0
    var lo = _f32(_arg(args, 10))
    var hi = _f32(_arg(args, 11))
    var tc = _tasks(rows, _arg(args, 12), max(1, 2048 // max(1, n)))
    def work(t: Int) {imm raw, imm ldr, imm bias, imm dy, imm ldy, imm out, imm ldo, imm rows, imm n, imm clamp, imm lo, imm hi, imm tc}:
        var b = chunk_bounds(rows, tc, t, 1)
        softplus_bwd_rows(raw, ldr, bias, dy, ldy, out, ldo, n, clamp, lo, hi, b[0], b[1])

    run_tasks(work, tc)
    return PythonObject(None)


def train_ssm_conv_backward(args: PythonObject) raises -> PythonObject:
    """(x, ldx, w, dc, lddc, dx, lddx, terms, batch, length, channels, tasks): T-65."""
    var x = ptr_f32(_arg(args, 0))
    var ldx = _arg(args, 1)
    var cw = ptr_f32(_arg(args, 2))
    var dc = ptr_f32(_arg(args, 3))
    var lddc = _arg(args, 4)
    var dx = ptr_f32(_arg(args, 5))
    var lddx = _arg(args, 6)
    var terms = ptr_f32(_arg(args, 7))
    var batch = _arg(args, 8)
    var L = _arg(args, 9)
    var C = _arg(args, 10)
    var units = batch * C
    var tc = _tasks(units, _arg(args, 11), max(1, 1024 // max(1, L)))
    def work(t: Int) {imm x, imm ldx, imm cw, imm dc, imm lddc, imm dx, imm lddx, imm terms, imm L, imm C, imm units, imm tc}:
        var b = chunk_bounds(units, tc, t, 1)
        conv_bwd_range(x, ldx, cw, dc, lddc, dx, lddx, terms, L, C, b[0], b[1])

    run_tasks(work, tc)
    return PythonObject(None)


def train_mamba1_scan_backward(args: PythonObject) raises -> PythonObject:
    """(u, ldu, delta, ldd, a, xp, ldxp, b_off, c_off, d, z, ldz, dg, ldg, du, ddelta, dz,
    lddz, tb, tc, ta, td, batch, length, di, tasks): T-68 .. T-71."""
    var s = ScanBwd(
        _arg(args, 0), _arg(args, 1), _arg(args, 2), _arg(args, 3), _arg(args, 4), _arg(args, 5),
        _arg(args, 6), _arg(args, 7), _arg(args, 8), _arg(args, 9), _arg(args, 10),
        _arg(args, 11), _arg(args, 12), _arg(args, 13), _arg(args, 14), _arg(args, 15),
        _arg(args, 16), _arg(args, 17), _arg(args, 18), _arg(args, 19), _arg(args, 20),
        _arg(args, 21), _arg(args, 23), _arg(args, 24), _arg(args, 22) * _arg(args, 23),
    )
    var units = _arg(args, 22) * ((_arg(args, 24) + W - 1) // W)
    var tc = _tasks(units, _arg(args, 25), max(1, 8 // max(1, s.L)))
    def work(t: Int) {imm s, imm units, imm tc}:
        var b = chunk_bounds(units, tc, t, 1)
        mamba1_scan_bwd_range(s, b[0], b[1])

    run_tasks(work, tc)
    return PythonObject(None)


def register_train_ssm(mut m: PythonModuleBuilder) raises:
    m.def_function[train_ssm_norm_backward]("train_ssm_norm_backward")
    m.def_function[train_ssm_silu_backward]("train_ssm_silu_backward")
    m.def_function[train_ssm_softplus_backward]("train_ssm_softplus_backward")
    m.def_function[train_ssm_conv_backward]("train_ssm_conv_backward")
    m.def_function[train_mamba1_scan_backward]("train_mamba1_scan_backward")

"""Test support: the state-space ops' GPU bodies (threads.mojo) run on the CPU, the
gpu_ref_ssm_* entries of the CPU extension: the same bodies the device kernels
(kernels.mojo) call, in plain loops over the kernels' coordinates, under IEEE mode
(DAZ and FTZ off, as on a GPU), so tests/test_gpu_ssm.py checks their bits against
the CPU kernels (mojo/ssm/cpu) on a machine without a GPU.

ENTRIES (one tuple of ints each; the caller has validated every argument; the
argument tuples are the CPU entries' without `tasks`)
    gpu_ref_ssm_norm_lanes((x, ldx, w, out, ldo, rows, n, eps_bits))
    gpu_ref_ssm_conv((x, ldx, w, bias, window, out, ldo, batch, length, channels, silu))
    gpu_ref_ssm_softplus((x, ldx, bias, out, ldo, rows, n, clamp, lo_bits, hi_bits))
    gpu_ref_ssm_neg_exp((x, out, n))
    gpu_ref_ssm_mamba1_scan((u, ..., di, sabotage)): sabotage 1 runs S-17's y chain
        descending (the tests' proof that the comparison sees an order change)
    gpu_ref_ssm_mamba2_ssd((xbc, ..., q0)): the gram, unit and store_open bodies in
        the kernels' launch order
    gpu_ref_ssm_mamba2_ssd_ws((xbc, ..., q0, gmat, ws)): the same with the caller's
        Gram and per-thread scratch (the GPU model's program op: the Python driver
        allocates them, python/mojolearn/models/_ssm/gpu.py)
"""
from std.python import PythonObject
from std.python.bindings import PythonModuleBuilder
from std.memory import bitcast
from std.memory.alloc import unsafe_alloc
from common.ptr import ptr_f32
from common.fpstate import enter_ieee_mode, leave_ieee_mode
from ssm.gpu.threads import (
    norm_lanes_thread, conv_thread, softplus_thread, neg_exp_thread, mamba1_scan_thread,
    SsdCall, ssd_gram_thread, ssd_unit_thread, ssd_store_open_thread, SSD_WS_FLOATS, Q,
)


def _arg(args: PythonObject, i: Int) raises -> Int:
    return Int(py=args[i])


def _f32(bits: Int) -> Float32:
    return bitcast[DType.float32, 1](SIMD[DType.uint32, 1](UInt32(bits)))[0]


def gpu_ref_ssm_norm_lanes(args: PythonObject) raises -> PythonObject:
    """(x, ldx, w, out, ldo, rows, n, eps_bits): S-10, one body a row."""
    var x = ptr_f32(_arg(args, 0))
    var ldx = _arg(args, 1)
    var w = ptr_f32(_arg(args, 2))
    var out = ptr_f32(_arg(args, 3))
    var ldo = _arg(args, 4)
    var rows = _arg(args, 5)
    var n = _arg(args, 6)
    var eps = _f32(_arg(args, 7))
    var old = enter_ieee_mode()
    for r in range(rows):
        norm_lanes_thread(x, ldx, w, out, ldo, n, eps, r)
    leave_ieee_mode(old)
    return PythonObject(None)


def gpu_ref_ssm_conv(args: PythonObject) raises -> PythonObject:
    """(x, ldx, w, bias, window, out, ldo, batch, length, channels, silu): S-13, one body
    a (batch row, channel); the window advanced in place."""
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
    var old = enter_ieee_mode()
    for b in range(batch):
        for c in range(C):
            conv_thread(x, ldx, cw, bias, win, out, ldo, L, C, act, b, c)
    leave_ieee_mode(old)
    return PythonObject(None)


def gpu_ref_ssm_softplus(args: PythonObject) raises -> PythonObject:
    """(x, ldx, bias, out, ldo, rows, n, clamp, lo_bits, hi_bits): S-14 / S-19, one body
    an element."""
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
    var old = enter_ieee_mode()
    for r in range(rows):
        for j in range(n):
            softplus_thread(x, ldx, bias, out, ldo, clamp, lo, hi, r, j)
    leave_ieee_mode(old)
    return PythonObject(None)


def gpu_ref_ssm_neg_exp(args: PythonObject) raises -> PythonObject:
    """(x, out, n): S-15, one body an element."""
    var x = ptr_f32(_arg(args, 0))
    var out = ptr_f32(_arg(args, 1))
    var n = _arg(args, 2)
    var old = enter_ieee_mode()
    for j in range(n):
        neg_exp_thread(x, out, j)
    leave_ieee_mode(old)
    return PythonObject(None)


def gpu_ref_ssm_mamba1_scan(args: PythonObject) raises -> PythonObject:
    """(u, ldu, delta, ldd, a, bc, ldbc, b_off, c_off, d, z, ldz, h, out, ldo, batch,
    length, di, sabotage): S-17, S-18 up to the gate, one body a (batch row, channel); h
    in place; sabotage 1: the y chain descending (test support)."""
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
    var sabotage = _arg(args, 18) != 0
    var old = enter_ieee_mode()
    for b in range(batch):
        for c in range(di):
            if sabotage:
                mamba1_scan_thread[True](u, ldu, dl, ldd, a, bc, ldbc, boff, coff, dv, z, ldz, h,
                                         out, ldo, L, di, b, c)
            else:
                mamba1_scan_thread(u, ldu, dl, ldd, a, bc, ldbc, boff, coff, dv, z, ldz, h, out,
                                   ldo, L, di, b, c)
    leave_ieee_mode(old)
    return PythonObject(None)


def _ssd_call(args: PythonObject) raises -> SsdCall:
    var q0 = _arg(args, 18)
    if q0 < 0 or q0 >= Q:
        raise Error(String("mojolearn: gpu_ref_ssm_mamba2_ssd: q0 ", q0,
                           " is not an open-row count < ", Q))
    return SsdCall(
        _arg(args, 0), _arg(args, 1), _arg(args, 2), _arg(args, 3), _arg(args, 4),
        _arg(args, 5), _arg(args, 6), _arg(args, 7), _arg(args, 8), _arg(args, 9),
        _arg(args, 10), _arg(args, 11), _arg(args, 12), _arg(args, 13), 0, _arg(args, 14),
        _arg(args, 15), _arg(args, 16), _arg(args, 17), q0,
    )


def _ssd_run(mut s: SsdCall, gm: Int, ws: Int):
    """The three kernels' bodies in launch order over their coordinates; gm the Gram
    work (batch, nchunks, 256, 256), ws SSD_WS_FLOATS floats per (batch row, head)."""
    var nch = s.nchunks()
    s.gmat = gm
    var w = ptr_f32(ws)
    var old = enter_ieee_mode()
    for b in range(s.batch):
        for ch in range(nch):
            for i in range(Q):
                ssd_gram_thread(s, b, ch, i)
    for t in range(s.batch * s.H):
        ssd_unit_thread(s, w.unsafe_offset(t * SSD_WS_FLOATS), t // s.H, t % s.H)
    for b in range(s.batch):
        for i in range(Q):
            ssd_store_open_thread(s, b, i)
    leave_ieee_mode(old)


def gpu_ref_ssm_mamba2_ssd(args: PythonObject) raises -> PythonObject:
    """(xbc, ldx, dt, a, d, z, ldz, h, open_x, open_dt, seg, cs, out, ldo, batch, length,
    heads, di, q0): S-19 .. S-28 from the conv output to the gate, as the three
    kernels run it: gram (one body a (batch row, chunk, row)), unit (a (batch row,
    head)), store_open (a (batch row, open row)); the state in place."""
    var s = _ssd_call(args)
    var batch = s.batch
    var heads = s.H
    var nch = s.nchunks()
    var gm = unsafe_alloc[Float32](max(1, batch * nch * Q * Q), alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    var ws = unsafe_alloc[Float32](max(1, batch * heads * SSD_WS_FLOATS), alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    _ssd_run(s, Int(gm), Int(ws))
    gm.unsafe_free()
    ws.unsafe_free()
    return PythonObject(None)


def gpu_ref_ssm_mamba2_ssd_ws(args: PythonObject) raises -> PythonObject:
    """(xbc, ldx, dt, a, d, z, ldz, h, open_x, open_dt, seg, cs, out, ldo, batch, length,
    heads, di, q0, gmat, ws): gpu_ref_ssm_mamba2_ssd with the caller's scratch, as the
    GPU model's program op runs it (the driver allocates them as device buffers): gmat
    batch * nchunks * 256 * 256 floats (nchunks = (q0 + length + 255) // 256), ws
    batch * heads * SSD_WS_FLOATS floats."""
    var s = _ssd_call(args)
    _ssd_run(s, _arg(args, 19), _arg(args, 20))
    return PythonObject(None)


def register_ssm_gpu_reference(mut m: PythonModuleBuilder) raises:
    m.def_function[gpu_ref_ssm_norm_lanes]("gpu_ref_ssm_norm_lanes")
    m.def_function[gpu_ref_ssm_conv]("gpu_ref_ssm_conv")
    m.def_function[gpu_ref_ssm_softplus]("gpu_ref_ssm_softplus")
    m.def_function[gpu_ref_ssm_neg_exp]("gpu_ref_ssm_neg_exp")
    m.def_function[gpu_ref_ssm_mamba1_scan]("gpu_ref_ssm_mamba1_scan")
    m.def_function[gpu_ref_ssm_mamba2_ssd]("gpu_ref_ssm_mamba2_ssd")
    m.def_function[gpu_ref_ssm_mamba2_ssd_ws]("gpu_ref_ssm_mamba2_ssd_ws")

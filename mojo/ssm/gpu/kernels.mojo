"""Device kernels of the state-space ops (contracts/ops/IDENTICAL_SSM_CONTRACT.md): each
turns its thread index into the coordinates of one body in threads.mojo (grid-stride
loops, any size). Sizes arrive as Int32 (kernel arguments must be device-passable).

Launched by the GPU model's program runner (transformer/gpu/model_launch.mojo: the ops
ssm_norm_lanes, ssm_conv, ssm_softplus, ssm_neg_exp, ssm_mamba1_scan, ssm_mamba2_ssd_ws,
written by python/mojolearn/models/_ssm/gpu.py for a device="gpu" Mamba model);
compiled offline by mojo/compile_all_gpu.mojo, their bodies checked on the CPU
(cpu_run.mojo, tests/test_gpu_ssm.py, tests/test_gpu_mamba.py); never run on a GPU
yet. The SSD is three launches in order: gram, unit, store_open.
"""
from common.ptr import F32Ptr
from common.gpu import gid_x, stride_x
from ssm.gpu.threads import (
    norm_lanes_thread, conv_thread, softplus_thread, neg_exp_thread, mamba1_scan_thread,
    SsdCall, ssd_gram_thread, ssd_unit_thread, ssd_store_open_thread, SSD_WS_FLOATS, Q,
)


def ssm_norm_lanes_kernel(x: F32Ptr, ldx: Int32, w: F32Ptr, dst: F32Ptr, ldo: Int32, rows: Int32,
                          n: Int32, eps: Float32):
    """S-10: one thread a row."""
    var r = gid_x()
    while r < Int(rows):
        norm_lanes_thread(x, Int(ldx), w, dst, Int(ldo), Int(n), eps, r)
        r += stride_x()


def ssm_conv_kernel(x: F32Ptr, ldx: Int32, cw: F32Ptr, bias: F32Ptr, win: F32Ptr, dst: F32Ptr,
                    ldo: Int32, batch: Int32, length: Int32, channels: Int32, act: Int32):
    """S-13: one thread a (batch row, channel), the call's positions in order."""
    var C = Int(channels)
    var t = gid_x()
    while t < Int(batch) * C:
        conv_thread(x, Int(ldx), cw, bias, win, dst, Int(ldo), Int(length), C, act != 0,
                    t // C, t % C)
        t += stride_x()


def ssm_softplus_kernel(x: F32Ptr, ldx: Int32, bias: F32Ptr, dst: F32Ptr, ldo: Int32, rows: Int32,
                        n: Int32, clamp: Int32, lo: Float32, hi: Float32):
    """S-14 / S-19: one thread an element."""
    var t = gid_x()
    while t < Int(rows) * Int(n):
        softplus_thread(x, Int(ldx), bias, dst, Int(ldo), clamp != 0, lo, hi, t // Int(n),
                        t % Int(n))
        t += stride_x()


def ssm_neg_exp_kernel(x: F32Ptr, dst: F32Ptr, n: Int32):
    """S-15: one thread an element."""
    var t = gid_x()
    while t < Int(n):
        neg_exp_thread(x, dst, t)
        t += stride_x()


def mamba1_scan_kernel(
    u: F32Ptr, ldu: Int32, dl: F32Ptr, ldd: Int32, a: F32Ptr, bc: F32Ptr, ldbc: Int32,
    boff: Int32, coff: Int32, dv: F32Ptr, z: F32Ptr, ldz: Int32, h: F32Ptr, dst: F32Ptr,
    ldo: Int32, batch: Int32, length: Int32, di: Int32,
):
    """S-17, S-18 up to the gate: one thread a (batch row, channel), tokens in order."""
    var D = Int(di)
    var t = gid_x()
    while t < Int(batch) * D:
        mamba1_scan_thread(u, Int(ldu), dl, Int(ldd), a, bc, Int(ldbc), Int(boff), Int(coff),
                           dv, z, Int(ldz), h, dst, Int(ldo), Int(length), D, t // D, t % D)
        t += stride_x()


@always_inline
def _call(
    xbc: F32Ptr, ldx: Int32, dt: F32Ptr, a: F32Ptr, dv: F32Ptr, z: F32Ptr, ldz: Int32, h: F32Ptr,
    open_x: F32Ptr, open_dt: F32Ptr, seg: F32Ptr, cs: F32Ptr, g: F32Ptr, ldo: Int32,
    gmat: F32Ptr, batch: Int32, length: Int32, heads: Int32, di: Int32, q0: Int32,
) -> SsdCall:
    return SsdCall(Int(xbc), Int(ldx), Int(dt), Int(a), Int(dv), Int(z), Int(ldz), Int(h),
                   Int(open_x), Int(open_dt), Int(seg), Int(cs), Int(g), Int(ldo), Int(gmat),
                   Int(batch), Int(length), Int(heads), Int(di), Int(q0))


def ssd_gram_kernel(
    xbc: F32Ptr, ldx: Int32, dt: F32Ptr, a: F32Ptr, dv: F32Ptr, z: F32Ptr, ldz: Int32, h: F32Ptr,
    open_x: F32Ptr, open_dt: F32Ptr, seg: F32Ptr, cs: F32Ptr, g: F32Ptr, ldo: Int32,
    gmat: F32Ptr, batch: Int32, length: Int32, heads: Int32, di: Int32, q0: Int32,
):
    """S-22's G: one thread a (batch row, chunk, row)."""
    var s = _call(xbc, ldx, dt, a, dv, z, ldz, h, open_x, open_dt, seg, cs, g, ldo, gmat, batch,
                  length, heads, di, q0)
    var nch = s.nchunks()
    var t = gid_x()
    while t < s.batch * nch * Q:
        var bc = t // Q
        ssd_gram_thread(s, bc // nch, bc % nch, t % Q)
        t += stride_x()


def ssd_unit_kernel(
    xbc: F32Ptr, ldx: Int32, dt: F32Ptr, a: F32Ptr, dv: F32Ptr, z: F32Ptr, ldz: Int32, h: F32Ptr,
    open_x: F32Ptr, open_dt: F32Ptr, seg: F32Ptr, cs: F32Ptr, g: F32Ptr, ldo: Int32,
    gmat: F32Ptr, batch: Int32, length: Int32, heads: Int32, di: Int32, q0: Int32, ws: F32Ptr,
):
    """S-20 .. S-25, S-23's state pass: one thread a (batch row, head), every chunk in
    order; ws holds SSD_WS_FLOATS floats per thread (batch * heads of them)."""
    var s = _call(xbc, ldx, dt, a, dv, z, ldz, h, open_x, open_dt, seg, cs, g, ldo, gmat, batch,
                  length, heads, di, q0)
    var t = gid_x()
    while t < s.batch * s.H:
        ssd_unit_thread(s, ws.unsafe_offset(t * SSD_WS_FLOATS), t // s.H, t % s.H)
        t += stride_x()


def ssd_store_open_kernel(
    xbc: F32Ptr, ldx: Int32, dt: F32Ptr, a: F32Ptr, dv: F32Ptr, z: F32Ptr, ldz: Int32, h: F32Ptr,
    open_x: F32Ptr, open_dt: F32Ptr, seg: F32Ptr, cs: F32Ptr, g: F32Ptr, ldo: Int32,
    gmat: F32Ptr, batch: Int32, length: Int32, heads: Int32, di: Int32, q0: Int32,
):
    """S-27's open rows after the call: one thread a (batch row, open row); after the
    unit kernel (which reads the held rows)."""
    var s = _call(xbc, ldx, dt, a, dv, z, ldz, h, open_x, open_dt, seg, cs, g, ldo, gmat, batch,
                  length, heads, di, q0)
    var t = gid_x()
    while t < s.batch * Q:
        ssd_store_open_thread(s, t // Q, t % Q)
        t += stride_x()

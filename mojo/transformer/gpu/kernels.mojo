"""Device kernels of the transformer ops: each turns its thread index into the
coordinates of one body in threads.mojo (grid-stride loops, any size). Sizes arrive
as Int32 / Int64 (kernel arguments must be device-passable)."""
from max.gpu import block_idx, thread_idx, block_dim, grid_dim
from common.ptr import F32Ptr
from transformer.gpu.threads import (
    rmsnorm_thread, silu_mul_thread, add_thread, rope_table_thread, rope_thread, attention_thread,
)


@always_inline
def _gid() -> Int:
    return Int(block_idx.x) * Int(block_dim.x) + Int(thread_idx.x)


@always_inline
def _stride() -> Int:
    return Int(grid_dim.x) * Int(block_dim.x)


def rmsnorm_kernel(x: F32Ptr, w: F32Ptr, dst: F32Ptr, rows: Int32, d: Int32, eps: Float32):
    var r = _gid()
    while r < Int(rows):
        rmsnorm_thread(x, w, dst, Int(d), eps, r)
        r += _stride()


def silu_mul_kernel(g: F32Ptr, u: F32Ptr, ld_in: Int32, dst: F32Ptr, ld_out: Int32, rows: Int32, n: Int32):
    var t = _gid()
    while t < Int(rows) * Int(n):
        silu_mul_thread(g, u, Int(ld_in), dst, Int(ld_out), t // Int(n), t % Int(n))
        t += _stride()


def add_kernel(x: F32Ptr, ldx: Int32, y: F32Ptr, ldy: Int32, dst: F32Ptr, ldo: Int32, rows: Int32, n: Int32):
    var t = _gid()
    while t < Int(rows) * Int(n):
        add_thread(x, Int(ldx), y, Int(ldy), dst, Int(ldo), t // Int(n), t % Int(n))
        t += _stride()


def rope_table_kernel(cos_t: F32Ptr, sin_t: F32Ptr, npos: Int32, head_dim: Int32, log_theta: Float32):
    """log_theta: threads.rope_log_theta(theta), computed by the launcher."""
    var half = Int(head_dim) // 2
    var t = _gid()
    while t < Int(npos) * half:
        rope_table_thread(cos_t, sin_t, Int(head_dim), log_theta, t // half, t % half)
        t += _stride()


def rope_kernel(
    src: F32Ptr, lds: Int32, dst: F32Ptr, ldd: Int32, dhs: Int32, head_dim: Int32, cos_t: F32Ptr,
    sin_t: F32Ptr, pos0: Int32, length: Int32, transposed: Int32, n_heads: Int32, tmax: Int32,
    rows: Int32, rot_dim: Int32,
):
    var per_row = Int(n_heads) * Int(head_dim)
    var t = _gid()
    while t < Int(rows) * per_row:
        var r = t // per_row
        var rem = t % per_row
        rope_thread(src, Int(lds), dst, Int(ldd), Int(dhs), Int(head_dim), cos_t, sin_t, Int(pos0),
                    Int(length), transposed != 0, Int(n_heads), Int(tmax), r,
                    rem // Int(head_dim), rem % Int(head_dim), Int(rot_dim))
        t += _stride()


def attention_kernel(
    q: F32Ptr, ldq: Int32, kt: F32Ptr, v: F32Ptr, dst: F32Ptr, ws: F32Ptr, batch: Int32,
    length: Int32, n_heads: Int32, n_kv: Int32, head_dim: Int32, pos0: Int32, tmax: Int32,
    fixed15: Int32, scale: Float32,
):
    """One thread per (batch, head, query); ws holds one scratch row per thread; scale
    is threads.attention_scale(head_dim), computed by the launcher."""
    var nkeys = Int(pos0) + Int(length)
    var total = Int(batch) * Int(n_heads) * Int(length)
    var t = _gid()
    while t < total:
        var i = t % Int(length)
        var bh = t // Int(length)
        attention_thread(q, Int(ldq), kt, v, dst, ws.unsafe_offset(t * nkeys), Int(length),
                         Int(n_heads), Int(n_kv), Int(head_dim), Int(pos0), Int(tmax),
                         fixed15 != 0, scale, bh // Int(n_heads), bh % Int(n_heads), i)
        t += _stride()

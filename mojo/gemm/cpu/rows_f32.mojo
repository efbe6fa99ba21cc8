"""fp32.v1 for a few rows (m <= 4) against a row-major float32 B: the decode shape.

Same arithmetic as the micro-kernel path (contract 6.3/6.4): per output, one
sequential FMA chain per leaf from +0, leaves merged by the binary-counter tree.
Only the loop order differs: B is streamed row by row (kk outer, columns inner),
which is how B arrives in memory, and the per-output leaf accumulators live in a
small L1 buffer instead of registers. No packing of B at all.
"""
from std.math import fma
from std.memory import bitcast
from common.ptr import F32Ptr, U16Ptr
from gemm.cpu.blocking import W, leaf_size, bit_length, trailing_ones, round_up
from gemm.cpu.tree import ftz
from gemm.cpu.fp32_v1 import GemmArgs

comptime ROWS_MAX = 4


def rows_ws(g: GemmArgs, cols: Int) -> Int:
    var L = leaf_size(g.k)
    var nleaves = (g.k + L - 1) // L
    var per = round_up(cols, 16) * ROWS_MAX
    return per * (1 + max(bit_length(nleaves), 1)) + 16 * g.k


@always_inline
def _a_at(g: GemmArgs, i: Int, kk: Int) -> Float32:
    var idx = kk * g.m + i if g.trans_a else i * g.k + kk
    if g.a_bf16:
        var b = U16Ptr(unsafe_from_address=g.a).unsafe_load(idx)
        return bitcast[DType.float32, 1](SIMD[DType.uint32, 1](UInt32(b) << 16))[0]
    return F32Ptr(unsafe_from_address=g.a).unsafe_load(idx)


def _leaf_rows[R: Int](
    g: GemmArgs, i_lo: Int, j_lo: Int, nc: Int, k0: Int, lk: Int, acc: F32Ptr, stride: Int
):
    var b = F32Ptr(unsafe_from_address=g.b)
    var nvec = nc // W
    for q in range(R * stride):
        acc.unsafe_store(q, Float32(0))
    for kk in range(k0, k0 + lk):
        var av = SIMD[DType.float32, 4](0)
        comptime for i in range(R):
            av[i] = _a_at(g, i_lo + i, kk)
        var row = b.unsafe_offset(kk * g.n + j_lo)
        for v in range(nvec):
            var bv = row.unsafe_load[width=W](v * W)
            comptime for i in range(R):
                var p = acc.unsafe_offset(i * stride + v * W)
                p.unsafe_store(0, fma(SIMD[DType.float32, W](av[i]), bv, p.unsafe_load[width=W](0)))
        for j in range(nvec * W, nc):
            var bs = row.unsafe_load(j)
            comptime for i in range(R):
                var p = acc.unsafe_offset(i * stride + j)
                p.unsafe_store(0, fma(av[i], bs, p.unsafe_load(0)))


def split_point(nleaves: Int) -> Int:
    """The top split of the leaf tree: the largest power of two below nleaves. The
    tree over [0, P) and the tree over [P, nleaves) are exactly the two subtrees
    whose sum is the root (contract 6.4), so two tasks can each own one."""
    var p = 1
    while p * 2 < nleaves:
        p *= 2
    return p


def f32_rows(
    g: GemmArgs, i_lo: Int, i_hi: Int, j_lo: Int, j_hi: Int,
    p_lo: Int, p_hi: Int, dst: F32Ptr, ldo: Int, ws: F32Ptr,
):
    """Rows [i_lo, i_hi) x columns [j_lo, j_hi) over leaves [p_lo, p_hi): the subtree
    value (flushed) goes to dst[(i - i_lo) * ldo + (j - j_lo)]."""
    var rows = i_hi - i_lo
    var nc = j_hi - j_lo
    if rows <= 0 or nc <= 0:
        return
    var k = g.k
    var L = leaf_size(k)
    var nleaves = p_hi - p_lo
    var levels = max(bit_length(nleaves), 1)
    var stride = round_up(nc, 16)
    var per = stride * ROWS_MAX
    var acc = ws
    var slots = ws.unsafe_offset(per)
    for p in range(nleaves):
        var k0 = (p_lo + p) * L
        var lk = min(L, k - k0)
        if rows == 1:
            _leaf_rows[1](g, i_lo, j_lo, nc, k0, lk, acc, stride)
        elif rows == 2:
            _leaf_rows[2](g, i_lo, j_lo, nc, k0, lk, acc, stride)
        elif rows == 3:
            _leaf_rows[3](g, i_lo, j_lo, nc, k0, lk, acc, stride)
        else:
            _leaf_rows[4](g, i_lo, j_lo, nc, k0, lk, acc, stride)
        var t = trailing_ones(p)
        var last = p == nleaves - 1
        for i in range(rows):
            var ai = acc.unsafe_offset(i * stride)
            var crow = dst.unsafe_offset(i * ldo)
            var j = 0
            while j < nc:
                # stride is a multiple of 16 >= W, so a full vector is always in bounds
                var v = ftz[W](ai.unsafe_load[width=W](j))
                for lvl in range(t):
                    v = ftz[W](slots.unsafe_offset(lvl * per + i * stride).unsafe_load[width=W](j) + v)
                if last:
                    for lvl in range(t + 1, levels):
                        if (nleaves >> lvl) & 1:
                            v = ftz[W](slots.unsafe_offset(lvl * per + i * stride).unsafe_load[width=W](j) + v)
                    if j + W <= nc:
                        crow.unsafe_store(j, v)
                    else:
                        for l in range(nc - j):
                            crow.unsafe_store(j + l, v[l])
                else:
                    slots.unsafe_offset(t * per + i * stride).unsafe_store(j, v)
                j += W

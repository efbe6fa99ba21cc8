"""fp32.v1 for a few rows (m <= 4) against a float32 B: the decode shape.

Same arithmetic as the micro-kernel path (contract 6.3/6.4): per output, one
sequential chain of arith.tree.chain_step_daz per leaf from +0, leaves merged by
the binary-counter tree.
Only the loop order differs: B is streamed RKB rows at a time (kk outer, columns
inner), which is how B arrives in memory in the NN layout (no packing at all); in
the NT layout each leaf's B block is transposed in chunks of TCHUNK columns first,
or, for one row and leaves of 128, each output's leaves run in the lanes of a
vector while its row of B is read front to back (_rows_nt_lanes).
The per-output leaf accumulators live in a small L1 buffer instead of registers,
each loaded once, stepped RKB times in registers and stored once a pass.
"""
from common.ptr import F32Ptr, U16Ptr
from gemm.cpu.blocking import W, round_up, ROWS_MAX, RKB, TCHUNK
from arith.fp import ftz
from arith.bf16 import widen
from arith.tree import leaf_size, leaf_count, bit_length, trailing_ones, tree_add, chain_step_daz
from gemm.cpu.fp32_v1 import GemmArgs
from gemm.cpu.pack_f32 import transpose_sq, transpose_cols
from std.collections import Array
from std.sys.intrinsics import prefetch, PrefetchOptions



def rows_ws(g: GemmArgs, cols: Int) -> Int:
    var L = g.leaf
    var nleaves = g.nleaves()
    var per = round_up(cols, 16) * ROWS_MAX
    # the NT scratch: a transposed chunk (TCHUNK x L), or the leaves-in-lanes kernel's
    # step-major A row and its leaf values (_rows_nt_lanes)
    var lanes = (2 * L + W) * round_up(LANES_MAX, LANES_VW)
    return per * (1 + max(bit_length(nleaves), 1)) + max(TCHUNK * L, lanes)


@always_inline
def _a_at(g: GemmArgs, i: Int, kk: Int) -> Float32:
    var idx = kk * g.m + i if g.trans_a else i * g.k + kk
    if g.a_bf16:
        var b = U16Ptr(unsafe_from_address=g.a).unsafe_load(idx)
        return widen[1](b)[0]
    return F32Ptr(unsafe_from_address=g.a).unsafe_load(idx)


@always_inline
def _rows_steps[R: Int, U: Int](
    g: GemmArgs, i_lo: Int, nc: Int, kk: Int, acc: F32Ptr, stride: Int, row: F32Ptr, bld: Int
):
    """Steps kk .. kk + U - 1 (B row kk + u at row + u * bld) of every output's chain:
    each accumulator loaded once, stepped U times in ascending kk (one fma a step) and
    stored once."""
    var nvec = nc // W
    var av = SIMD[DType.float32, 4 * U](0)
    comptime for u in range(U):
        comptime for i in range(R):
            av[u * 4 + i] = _a_at(g, i_lo + i, kk + u)
    for v in range(nvec):
        var bv = Array[SIMD[DType.float32, W], U](fill=SIMD[DType.float32, W](0))
        comptime for u in range(U):
            bv[u] = row.unsafe_load[width=W](u * bld + v * W)
        comptime for i in range(R):
            var p = acc.unsafe_offset(i * stride + v * W)
            var x = p.unsafe_load[width=W](0)
            comptime for u in range(U):
                x = chain_step_daz[W](SIMD[DType.float32, W](av[u * 4 + i]), bv[u], x)
            p.unsafe_store(0, x)
    for j in range(nvec * W, nc):
        comptime for i in range(R):
            var p = acc.unsafe_offset(i * stride + j)
            var x = p.unsafe_load(0)
            comptime for u in range(U):
                x = chain_step_daz[1](av[u * 4 + i], row.unsafe_load(u * bld + j), x)
            p.unsafe_store(0, x)


def _leaf_rows[R: Int](
    g: GemmArgs, i_lo: Int, nc: Int, k0: Int, lk: Int, acc: F32Ptr, stride: Int,
    brows: F32Ptr, bld: Int,
):
    """acc[i][0:nc] (+)= the leaf's chains; B row kk (of this leaf) at brows + (kk-k0)*bld.
    acc is cleared first unless the caller continues a leaf over a column chunk.
    RKB rows of B a pass over the columns (_rows_steps), the last lk % RKB one at a
    time."""
    var kend = k0 + lk
    var kk = k0
    while kk + RKB <= kend:
        _rows_steps[R, RKB](g, i_lo, nc, kk, acc, stride, brows.unsafe_offset((kk - k0) * bld), bld)
        kk += RKB
    while kk < kend:
        _rows_steps[R, 1](g, i_lo, nc, kk, acc, stride, brows.unsafe_offset((kk - k0) * bld), bld)
        kk += 1


def split_point(nleaves: Int) -> Int:
    """The top split of the leaf tree: the largest power of two below nleaves. The
    tree over [0, P) and the tree over [P, nleaves) are exactly the two subtrees
    whose sum is the root (contract 6.4), so two tasks can each own one."""
    var p = 1
    while p * 2 < nleaves:
        p *= 2
    return p


def _transpose_chunk(g: GemmArgs, j0: Int, nc: Int, k0: Int, lk: Int, dst: F32Ptr, ld: Int):
    """dst[kk][j] = B_stored[j0 + j, k0 + kk] for the NT layout (B stored (n, k)):
    W x W blocks transposed in registers where they fit (W = 8 or 16, pack_f32's
    transpose_cols), element by element elsewhere."""
    var s = F32Ptr(unsafe_from_address=g.b)
    var jfull = 0
    var kfull = 0
    comptime if W == 8 or W == 16:
        jfull = nc // W * W
        kfull = transpose_cols[False](g.b, g.k, j0, nc // W, k0, lk, dst, ld)
    for j in range(nc):
        var kstart = kfull if j < jfull else 0
        for kk in range(kstart, lk):
            dst.unsafe_store(kk * ld + j, s.unsafe_load((j0 + j) * g.k + k0 + kk))


comptime NTGW = TCHUNK // W  # column groups of W lanes in one NT chunk


def _leaf_nt_fused[R: Int](
    g: GemmArgs, i_lo: Int, jcol: Int, k0: Int, lk: Int, acc_out: F32Ptr, stride: Int
):
    """NT layout, TCHUNK columns [jcol, jcol + TCHUNK), one leaf with lk % W == 0: W x W
    blocks of the stored B are transposed in registers and fed straight into the
    chains (kk ascending per output), the NTGW column groups interleaved so that many
    independent chains hide the FMA latency. acc_out[i * stride + c] gets the leaf
    value of column jcol + c (not yet flushed). W = 16: up to 4 rows; W = 8 (16
    registers): 1 row."""
    var s = F32Ptr(unsafe_from_address=g.b)
    var acc = Array[SIMD[DType.float32, W], ROWS_MAX * NTGW](fill=SIMD[DType.float32, W](0))
    var blk = Array[SIMD[DType.float32, W], W](fill=SIMD[DType.float32, W](0))
    var avec = Array[SIMD[DType.float32, W], ROWS_MAX](fill=SIMD[DType.float32, W](0))
    var ap = F32Ptr(unsafe_from_address=g.a)
    var kb = 0
    while kb < lk:
        # this block's W values of each A row, read once (the chains use them in order)
        comptime for i in range(R):
            # the NT layout excludes transpose_a, and a bf16 a comes only with a bf16 b,
            # which never takes this path: a is a float32 (m, k) row here
            avec[i] = ap.unsafe_load[width=W]((i_lo + i) * g.k + k0 + kb)
        comptime for gb in range(NTGW):
            comptime for r in range(W):
                blk[r] = s.unsafe_load[width=W]((jcol + gb * W + r) * g.k + k0 + kb)
            transpose_sq[DType.float32, W](blk)
            comptime for t in range(W):
                comptime for i in range(R):
                    acc[i * NTGW + gb] = chain_step_daz[W](
                        SIMD[DType.float32, W](avec[i][t]), blk[t], acc[i * NTGW + gb])
        kb += W
    comptime for i in range(R):
        comptime for gb in range(NTGW):
            acc_out.unsafe_store(i * stride + gb * W, acc[i * NTGW + gb])


comptime NTQ = 2  # leaves of one W-column group the one-row NT kernel runs side by side
# the one-row NT kernel (_rows_nt_one) serves k a multiple of this (f32_rows says why)
comptime NT_ONE_K = 256 if W == 8 else 1024


@always_inline
def _nt_leaves[NQ: Int, LC: Int = 0](
    g: GemmArgs, s: F32Ptr, arow: F32Ptr, j0: Int, k0: Int, L: Int, acc: F32Ptr, stride: Int
):
    """One row, NT layout: NQ consecutive whole leaves (L k-steps each, L % W == 0) from
    k0 of the W columns [j0, j0 + W), side by side: leaf q's chain starts from +0, takes
    kk ascending (each W x W block of the stored B transposed in registers) and its
    value (not yet flushed) goes to acc[q * stride]. The leaves' chains are independent,
    so they hide each other's FMA latency while the group's W rows stream front to back.
    LC > 0: the leaf size known at compile time (L == LC), so the leaves' offsets are
    constants in the addresses and the W row pointers stay in registers."""
    var c = Array[SIMD[DType.float32, W], NQ](fill=SIMD[DType.float32, W](0))
    var blk = Array[SIMD[DType.float32, W], W](fill=SIMD[DType.float32, W](0))
    var rp = Array[F32Ptr, W](fill=s)
    comptime for r in range(W):
        rp[r] = s.unsafe_offset((j0 + r) * g.k + k0)
    var ap = arow.unsafe_offset(k0)
    var t = 0
    while t < L:
        comptime for q in range(NQ):
            var off = t + q * (LC if LC > 0 else L)
            comptime for r in range(W):
                blk[r] = rp[r].unsafe_load[width=W](off)
            transpose_sq[DType.float32, W](blk)
            comptime for u in range(W):
                c[q] = chain_step_daz[W](SIMD[DType.float32, W](ap.unsafe_load(off + u)), blk[u], c[q])
        t += W
    comptime for q in range(NQ):
        acc.unsafe_store(q * stride, c[q])


def _rows_nt_one(
    g: GemmArgs, i_lo: Int, j_lo: Int, nc8: Int, p_lo: Int, nleaves: Int, levels: Int,
    acc: F32Ptr, stride: Int, per: Int, slots: F32Ptr, tbuf: F32Ptr, dst: F32Ptr, ldo: Int,
):
    """One row of the NT layout on AVX2 and AVX-512 (the leaf size a multiple of W), columns
    [0, nc8) of the task (nc8 a multiple of W): one W-column group at a time, its leaves
    NTQ at a time (_nt_leaves), each leaf then merged in ascending order
    (_merge_chunk); a leaf left over (a short last one) goes through the transposed
    chunk and _leaf_rows.
    The group's W rows of the stored B are each read front to back."""
    var s = F32Ptr(unsafe_from_address=g.b)
    var arow = F32Ptr(unsafe_from_address=g.a).unsafe_offset(i_lo * g.k)
    var L = g.leaf
    var k = g.k
    var jc = 0
    while jc < nc8:
        var p = 0
        while p < nleaves:
            var k0 = (p_lo + p) * L
            var ac = acc.unsafe_offset(jc)
            if p + NTQ <= nleaves and k0 + NTQ * L <= k:
                if L == 128:
                    _nt_leaves[NTQ, 128](g, s, arow, j_lo + jc, k0, L, ac, stride)
                else:
                    _nt_leaves[NTQ](g, s, arow, j_lo + jc, k0, L, ac, stride)
                comptime for q in range(NTQ):
                    _merge_chunk(acc.unsafe_offset(q * stride), slots, dst, ldo, 1, stride, per,
                                 jc, jc + W, p + q, nleaves, levels)
                p += NTQ
                continue
            # a leaf left over (the short last one): transposed, then the rows kernel
            var lk = min(L, k - k0)
            _transpose_chunk(g, j_lo + jc, W, k0, lk, tbuf, TCHUNK)
            for q in range(W):
                ac.unsafe_store(q, Float32(0))
            _leaf_rows[1](g, i_lo, W, k0, lk, ac, stride, tbuf, TCHUNK)
            _merge_chunk(acc, slots, dst, ldo, 1, stride, per, jc, jc + W, p, nleaves, levels)
            p += 1
        jc += W


# The leaves-in-lanes NT kernel (_rows_nt_lanes): one row of A, B stored (n, k), k made
# of LANES_MIN to LANES_MAX leaves of LANES_L steps (fp32.v1's leaf for k up to 131072),
# the last one possibly short by a multiple of LANES_VW steps. Each output's leaves are
# the lanes of LANES_VW-float vectors, so its row of B is read along its length, and the
# row PF_AHEAD floats on is prefetched. The paths it replaces there put W outputs in the
# lanes and read W rows of B at once, which the hardware prefetchers did not follow.
# AMD EPYC Zen 4, 2 threads, alternating processes, 4 weights in turn, ms: v4 1 x 4096 x
# 4096 2.9-3.2 -> 2.1-2.4, 1 x 8192 x 2048 2.9-3.1 -> 2.0, 1 x 3072 x 768 0.38-0.42 ->
# 0.26-0.28, 1 x 4096 x 512 0.33-0.40 -> 0.31-0.36, 1 x 4864 x 896 0.70-0.89 ->
# 0.40-0.51, 1 x 576 x 1536 0.11-0.13 -> 0.10; v3 1 x 4096 x 4096 2.7-2.9 -> 1.5-2.1,
# 1 x 8192 x 2048 2.7-2.8 -> 1.4-1.9, 1 x 576 x 1536 0.16-0.18 -> 0.12-0.14, 1 x 4864 x
# 896 0.78-0.84 -> 0.40-0.46. With a short last leaf (64 of k = 576's 5 leaves), v4 and
# v3: 1 x 49152 x 576 5.7-6.3 -> 3.8-4.0, 1 x 1536 x 576 0.17-0.21 -> 0.15-0.16, 1 x 4864
# x 960 0.82-0.94 -> 0.45-0.60; 1 x 576 x 576 0.04 -> 0.07 with 4 weights in turn (B in
# L3), 0.09-0.17 -> 0.07-0.10 with 64 (B from memory, as in a model's decode). Slower:
# 1 x 896 x 896 (7 leaves, B in L3) 0.07-0.08 -> 0.08-0.09 on both builds. Measured and
# not taken: 16-float vectors on AVX-512 (no faster: 16 x 16 transposes run at half rate
# on Zen 4), one row ahead only (short rows lost: 1 x 4096 x 512 v4 0.37 -> 0.56), 8192
# floats ahead (no better), 2 or 3 leaves (k = 256: 0.18-0.29 -> 0.29 on v4)
comptime LANES_L = 128
comptime LANES_MIN = 4
comptime LANES_MAX = 64
comptime LANES_VW = 8
comptime PF_AHEAD = 2048


@always_inline
def _nt_lanes_row[VW: Int](
    r0: F32Ptr, nl: Int, nvl: Int, lk_last: Int, at: F32Ptr, lb: F32Ptr, jj: Int, nxt: F32Ptr
):
    """One row of A against one row of the stored B at r0 (NT layout: one output), nl
    leaves of LANES_L steps (the last one lk_last): every leaf is a lane (leaf v * VW + r
    in lane r of vector v, nvl vectors). Per block of VW steps, the VW leaves' next VW values (one
    load each) are transposed in registers and stepped in ascending order: leaf l's
    chain is fma(a[l*L + s], b[l*L + s], acc) from +0, s ascending, as every other
    path computes it. at holds A step-major (at[s * nvl * VW + l] = a[l * L + s], +0
    past the last leaf); lanes past the last leaf read on past it (the caller makes
    sure that is memory it may read) against those zeros and are never stored. Leaf
    l's value goes to lb[l * W + jj] (not yet flushed). Each block also prefetches its
    share of the row at nxt (the next output's), in order: a block's loads are VW
    lines a leaf apart, too short a run for the hardware's stride prefetchers.
    The last leaf may be short (lk_last steps, a multiple of VW): from there on its
    lane keeps its value (a select; the other lanes step on)."""
    comptime PF = VW * VW // 16  # lines of the next row a block (its leaves over its blocks)
    var nlp = nvl * VW
    var vlast = (nl - 1) // VW
    var iota = SIMD[DType.int32, VW]()
    comptime for r in range(VW):
        iota[r] = Int32(r)
    var keep = iota.eq(SIMD[DType.int32, VW](Int32((nl - 1) % VW)))
    for v in range(nvl):
        var c = SIMD[DType.float32, VW](0)
        var blk = Array[SIMD[DType.float32, VW], VW](fill=SIMD[DType.float32, VW](0))
        var s0 = 0
        while s0 < LANES_L:
            var row = r0.unsafe_offset(v * VW * LANES_L + s0)
            var bi = v * (LANES_L // VW) + s0 // VW
            comptime for q in range(PF):
                var line = nxt.unsafe_offset((bi * PF + q) * 16)
                prefetch[PrefetchOptions().for_read().medium_locality()](line)
            comptime for r in range(VW):
                blk[r] = row.unsafe_load[width=VW](r * LANES_L)
            transpose_sq[DType.float32, VW](blk)
            var ap = at.unsafe_offset(s0 * nlp + v * VW)
            if v == vlast and s0 >= lk_last:
                comptime for t in range(VW):
                    var x = chain_step_daz[VW](ap.unsafe_load[width=VW](t * nlp), blk[t], c)
                    c = keep.select(c, x)
            else:
                comptime for t in range(VW):
                    c = chain_step_daz[VW](ap.unsafe_load[width=VW](t * nlp), blk[t], c)
            s0 += VW
        comptime for r in range(VW):
            if v * VW + r < nl:
                lb.unsafe_store((v * VW + r) * W + jj, c[r])


def _rows_nt_lanes(
    g: GemmArgs, i_lo: Int, j_lo: Int, nc8: Int, p_lo: Int, nleaves: Int, lk_last: Int,
    levels: Int, stride: Int, per: Int, slots: F32Ptr, tbuf: F32Ptr, dst: F32Ptr, ldo: Int,
):
    """One row of the NT layout, columns [0, nc8) of the task (nc8 a multiple of W),
    leaves [p_lo, p_lo + nleaves) of LANES_L steps but the last (lk_last steps, a
    multiple of LANES_VW), at most LANES_MAX: one output at a time, its leaves in the
    lanes of LANES_VW-float vectors (_nt_lanes_row), then per group of W outputs every
    leaf merged in ascending order (_merge_chunk). A row whose spare lanes would read
    past the end of B is first copied into a zero-padded row."""
    var s = F32Ptr(unsafe_from_address=g.b)
    var k = g.k
    var k0 = p_lo * LANES_L
    var nvl = (nleaves + LANES_VW - 1) // LANES_VW
    var nlp = nvl * LANES_VW
    var at = tbuf
    var lb = tbuf.unsafe_offset(LANES_L * nlp)
    var pad = lb.unsafe_offset(W * nlp)
    for st in range(LANES_L):
        for l in range(nlp):
            var x = Float32(0)
            if l < nleaves and (l < nleaves - 1 or st < lk_last):
                x = _a_at(g, i_lo, k0 + l * LANES_L + st)
            at.unsafe_store(st * nlp + l, x)
    # rows prefetched ahead: at least PF_AHEAD floats, so that a short row's lines are
    # asked for as early as a long one's
    var ahead = max(1, (PF_AHEAD + k - 1) // k)
    var jc = 0
    while jc < nc8:
        for jj in range(W):
            var j = j_lo + jc + jj
            var r0 = s.unsafe_offset(j * k + k0)
            if j * k + k0 + nlp * LANES_L > g.n * k:
                for q in range(nlp * LANES_L):
                    var inside = q < (nleaves - 1) * LANES_L + lk_last
                    pad.unsafe_store(q, r0.unsafe_load(q) if inside else Float32(0))
                r0 = pad
            var nxt = s.unsafe_offset((j + ahead) * k + k0) if j + ahead < g.n else r0
            _nt_lanes_row[LANES_VW](r0, nleaves, nvl, lk_last, at, lb, jj, nxt)
        for p in range(nleaves):
            _merge_chunk(lb.unsafe_offset(p * W - jc), slots, dst, ldo, 1, stride, per,
                         jc, jc + W, p, nleaves, levels)
        jc += W


@always_inline
def _merge_chunk(
    acc: F32Ptr, slots: F32Ptr, dst: F32Ptr, ldo: Int, rows: Int, stride: Int, per: Int,
    jc: Int, jend: Int, p: Int, nleaves: Int, levels: Int,
):
    """Leaf p of columns [jc, jend): flush, merge into the tree slots, and after the
    last leaf write the subtree value to dst (contract 6.3 exit flush, 6.4)."""
    var t = trailing_ones(p)
    var last = p == nleaves - 1
    for i in range(rows):
        var ai = acc.unsafe_offset(i * stride)
        var crow = dst.unsafe_offset(i * ldo)
        var j = jc
        while j < jend:
            # stride is a multiple of 16 >= W, so a full vector is always in bounds
            var v = ftz(ai.unsafe_load[width=W](j))
            for lvl in range(t):
                v = tree_add[W](slots.unsafe_offset(lvl * per + i * stride).unsafe_load[width=W](j), v)
            if last:
                for lvl in range(t + 1, levels):
                    if (nleaves >> lvl) & 1:
                        v = tree_add[W](slots.unsafe_offset(lvl * per + i * stride).unsafe_load[width=W](j), v)
                if j + W <= jend:
                    crow.unsafe_store(j, v)
                else:
                    for l in range(jend - j):
                        crow.unsafe_store(j + l, v[l])
            else:
                slots.unsafe_offset(t * per + i * stride).unsafe_store(j, v)
            j += W


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
    var L = g.leaf
    var nleaves = p_hi - p_lo
    var levels = max(bit_length(nleaves), 1)
    var stride = round_up(nc, 16)
    var per = stride * ROWS_MAX
    var acc = ws
    var slots = ws.unsafe_offset(per)
    var tbuf = slots.unsafe_offset(per * levels)
    var bsrc = F32Ptr(unsafe_from_address=g.b)
    # column chunks outer (NT: each chunk's rows of the stored B are then read along
    # all of k in turn, one long stream per row), leaves inner
    var jc = 0
    comptime if W == 8 or W == 16:
        # One row against B stored (n, k) made of LANES_MIN to LANES_MAX leaves of
        # LANES_L (the last one short by a multiple of LANES_VW at most): each output's
        # leaves in the lanes, its row of B read along its length (_rows_nt_lanes; the
        # measurements are at LANES_L). Otherwise:
        # AVX2 (v3), one row, rows of the stored B 4k bytes apart with 4k a multiple of 1 KiB:
        # the TCHUNK rows of a chunk would fall in at most 4 of the 64 L1 sets (x86's 4 KiB
        # set period), and the interleaved form of _leaf_nt_fused, which reads each line in
        # two halves NTGW groups apart, sees it evicted in between. Here one W-column
        # group at a time, NTQ of its leaves side by side (_rows_nt_one). AMD EPYC Zen 2
        # (v3), alternating processes, against the form it replaces (one group at a time,
        # one leaf, its rows prefetched): 1 x 4096 x 4096 1 thread 6.4-8.1 -> 5.2-6.8 ms,
        # 2 threads 3.6-6.3 -> 3.3-5.1 ms; 1 x 576 x 1536 (k = 1536) 1 thread 0.19-0.20
        # -> 0.145 ms. Other k keep the interleaved form: with k = 576
        # and B streaming from memory (1 x 49152 x 576) this one was 5-15% slower.
        # AVX-512 (v4, W = 16, 32 columns a chunk): when the rows are a multiple of 4 KiB
        # apart (k % 1024 == 0: every row of a chunk in one L1 set). AMD EPYC Zen 4, 2
        # threads, alternating processes: 1 x 4096 x 4096 9.5 -> 11.5-12.3 GFLOP/s,
        # 1 x 2048 x 2048 9.0 -> 10.6-11.1, 1 x 4096 x 1024 9.0 -> 10.1-10.5, 1 x 8192 x
        # 2048 9.4 -> 11.3-12.1; with k = 512 or 768 (rows 2 or 3 KiB apart) it was
        # slower (1 x 49152 x 512 10.8 -> 9.0-9.2, 1 x 4096 x 768 10.3-10.6 -> 9.2-9.4)
        var lk_last = min(L, k - (p_lo + nleaves - 1) * L)
        if (g.trans_b and rows == 1 and L == LANES_L and lk_last % LANES_VW == 0
                and LANES_MIN <= nleaves and nleaves <= LANES_MAX):
            jc = nc // W * W
            _rows_nt_lanes(g, i_lo, j_lo, jc, p_lo, nleaves, lk_last, levels, stride, per, slots,
                           tbuf, dst, ldo)
        elif g.trans_b and rows == 1 and L % W == 0 and k % NT_ONE_K == 0:
            jc = nc // W * W
            _rows_nt_one(g, i_lo, j_lo, jc, p_lo, nleaves, levels, acc, stride, per, slots,
                         tbuf, dst, ldo)
    while jc < nc:
        var ncc = nc if not g.trans_b else min(TCHUNK, nc - jc)
        var jend = jc + ncc
        for p in range(nleaves):
            var k0 = (p_lo + p) * L
            var lk = min(L, k - k0)
            for i in range(rows):
                for q in range(jc, min(jc + round_up(ncc, 16), stride)):
                    acc.unsafe_store(i * stride + q, Float32(0))
            var ac = acc.unsafe_offset(jc)
            comptime if (W == 16 or W == 8) and TCHUNK % W == 0:
                if g.trans_b and ncc == TCHUNK and lk % W == 0 and (W == 16 or rows == 1):
                    if rows == 1:
                        _leaf_nt_fused[1](g, i_lo, j_lo + jc, k0, lk, ac, stride)
                    else:
                        comptime if W == 16:
                            if rows == 2:
                                _leaf_nt_fused[2](g, i_lo, j_lo + jc, k0, lk, ac, stride)
                            elif rows == 3:
                                _leaf_nt_fused[3](g, i_lo, j_lo + jc, k0, lk, ac, stride)
                            else:
                                _leaf_nt_fused[4](g, i_lo, j_lo + jc, k0, lk, ac, stride)
                    _merge_chunk(acc, slots, dst, ldo, rows, stride, per, jc, jend, p, nleaves, levels)
                    continue
            # NN: B rows straight from the caller; NT: this leaf of the chunk, transposed
            var brows = bsrc.unsafe_offset(k0 * g.n + j_lo + jc)
            var bld = g.n
            if g.trans_b:
                _transpose_chunk(g, j_lo + jc, ncc, k0, lk, tbuf, TCHUNK)
                brows = tbuf
                bld = TCHUNK
            if rows == 1:
                _leaf_rows[1](g, i_lo, ncc, k0, lk, ac, stride, brows, bld)
            elif rows == 2:
                _leaf_rows[2](g, i_lo, ncc, k0, lk, ac, stride, brows, bld)
            elif rows == 3:
                _leaf_rows[3](g, i_lo, ncc, k0, lk, ac, stride, brows, bld)
            else:
                _leaf_rows[4](g, i_lo, ncc, k0, lk, ac, stride, brows, bld)
            _merge_chunk(acc, slots, dst, ldo, rows, stride, per, jc, jend, p, nleaves, levels)
        jc += ncc

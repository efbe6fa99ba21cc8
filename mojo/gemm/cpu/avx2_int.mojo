"""int8i32.v1 and int15i64.v1 with AVX2 (the v3 build: x86-64-v3, no AVX-512).
Lowbit contract L-5/L-7, W-3/W-4. Called by gemm/cpu/entry.mojo for each task's
rectangle when the build has AVX2 but not AVX-512.

THE EXACT ROUTE: vpmaddwd ON 16-BIT VALUES
    `vpmaddubsw` (u8 x s8) saturates its 16-bit pair sums, so it is not used. Every
    code is sign-extended to 16 bits and `vpmaddwd` multiplies 16-bit pairs and adds
    each pair into an int32 lane: |pair sum| <= 2 * 128 * 16512 < 2**31 for any int8
    code and any int15 code built from int8 planes (|hi * 128 + lo| <= 16512), so no
    pair sum ever wraps or saturates.
    int8: codes x codes, int32 sums (wrapping int32, like every other build; the
    true |S| < 2**31 by L-7).
    int15: both operands' whole 15-bit codes (hi * 128 + lo, 16 bits; |code| <= 16512
    for any int8 planes) in one vpmaddwd: a pair sum is at most 2 * 16512**2 < 2**29.03,
    so three of them (one t per AVX2_G15 = 3 k-pairs) stay below 2**31. Each t is
    folded into a split accumulator (arith.quant.fold_split_sum: the wrapping int32
    total and the total of t >> 16), read back exactly as int64 at the end of the tile
    (join_split_sum; at most 10923 t at k = 65536). Per 3 k-pairs and 8 outputs: 3
    vpmaddwd, 2 adds, 3 fold instructions, instead of 6 vpmaddwd and 6 adds over B's
    two planes. The tile is AVX2_MR15 rows x one 8-column half of a panel (the two
    halves in turn): 2 * 5 sums, the 3 k-pairs' B vectors, t, a product and a
    broadcast: 15 of the 16 registers. (A tile one register larger spills: the
    3-row x 16-column tile of the two-plane kernel kept one sum on the stack, and its
    store-reload on every k-pair held the loop to the store-forwarding latency.)

PACKING (k padded with zero codes to a multiple of 2)
    A panel (MR rows): for each k-pair p, MR words of two int16 (a[i, 2p], a[i, 2p+1]).
    B panel (NR columns): for each k-pair p, NR words of two int16 (int15: whole
    codes, as A).
    A whole panel is packed 8 k-pairs at a time: each row's (A) or column's (B) 16
    codes sign-extended in one vector (int15: hi * 128 + lo) are 8 words, and an
    8 x 8 in-register transpose (pack_f32.transpose8) turns 8 such vectors into 8
    k-pair rows of the panel. A partial panel, the last k % 16 codes and an odd k's
    last code go element by element. Copies of the codes: the same words either way.
"""
from std.sys import llvm_intrinsic
from std.sys.info import CompilationTarget
from std.collections import Array
from common.ptr import I8Ptr, I32Ptr, U32Ptr
from gemm.cpu.blocking import round_up
from gemm.cpu.blocking import AVX2_MR as AMR  # rows per register tile
from gemm.cpu.blocking import AVX2_MR15 as AMR15  # int15 keeps two sums per output
from gemm.cpu.blocking import AVX2_G15 as G15  # int15: k-pairs per exact int32 partial sum
from gemm.cpu.blocking import AVX2_NR as ANR  # columns per register tile (two 8-lane vectors)
from gemm.cpu.blocking import AVX2_V as AV  # int32 lanes per vector
from gemm.cpu.blocking import CachePlan  # blocks: the plan's avx2_a_block_bytes / avx2_b_chunk_bytes
from gemm.cpu.int_gemm import IntArgs, store_scaled
from arith.quant import join15_sums, fold_split_sum, join_split_sum
from gemm.cpu.pack_f32 import transpose8, store_first
from std.memory import bitcast

comptime A_ONCE_BYTES = 8 << 20  # a task's packed A up to this size is packed once, not per column chunk
comptime ACC15_WORDS = AMR15 * ANR * 2  # the int64 sums of one int15 tile, as words


@always_inline
def _pairs(k: Int) -> Int:
    return (k + 1) // 2


@always_inline
def _mr(int15: Bool) -> Int:
    """Rows of an A panel (and of the register tile): AMR (int8) or AMR15 (int15)."""
    return AMR15 if int15 else AMR


def avx2_mc(p: CachePlan, k: Int, rows: Int, mr: Int) -> Int:
    """Rows of A per block: a multiple of the panel's mr rows within the plan's
    avx2_a_block_bytes."""
    var mc = max(mr, (p.avx2_a_block_bytes // (_pairs(k) * 4)) // mr * mr)
    return min(mc, round_up(rows, mr))


def avx2_nc(g: IntArgs, cols: Int) -> Int:
    var nc = max(ANR, (g.plan.avx2_b_chunk_bytes // (_pairs(g.k) * 4)) // ANR * ANR)
    return min(nc, round_up(cols, ANR))


def _a_once(k: Int, rows: Int, mr: Int) -> Bool:
    """Whether a task's rows of A are packed once, before its column chunks (instead
    of once per chunk: the same copy, made fewer times)."""
    return round_up(rows, mr) * _pairs(k) * 4 <= A_ONCE_BYTES


def _a_words(p: CachePlan, k: Int, rows: Int, mr: Int) -> Int:
    """Words of the packed A: the task's rows (a_once) or one block, in mr-row panels."""
    var r = rows if _a_once(k, rows, mr) else avx2_mc(p, k, rows, mr)
    return round_up(r, mr) * _pairs(k)


def avx2_ws(g: IntArgs, rows: Int, cols: Int) -> Int:
    """Workspace (32-bit words) of one task."""
    var kp = _pairs(g.k)
    return _a_words(g.plan, g.k, rows, _mr(g.int15)) + avx2_nc(g, cols) * kp + ACC15_WORDS + 16


@always_inline
def _code(hi: I8Ptr, lo: I8Ptr, int15: Bool, off: Int) -> Int16:
    if int15:
        return join15_sums[DType.int16, 1](Int16(hi.unsafe_load(off)), Int16(lo.unsafe_load(off)))
    return Int16(hi.unsafe_load(off))


@always_inline
def _word(a: Int16, b: Int16) -> UInt32:
    return UInt32(UInt16(a)) | (UInt32(UInt16(b)) << 16)


@always_inline
def _words[int15: Bool](hi: I8Ptr, lo: I8Ptr, off: Int) -> SIMD[DType.uint32, AV]:
    """The AV k-pair words of the 2 * AV codes from off: each code sign-extended to 16
    bits (int15: hi * 128 + lo, W-2), two codes a word, the lower k in the low half
    (the words _word makes one at a time)."""
    var h = hi.unsafe_load[width=2 * AV](off).cast[DType.int16]()
    comptime if int15:
        h = join15_sums[DType.int16, 2 * AV](h, lo.unsafe_load[width=2 * AV](off).cast[DType.int16]())
    return bitcast[DType.uint32, AV](h)


def _pack_a_panel[R: Int, int15: Bool](hi: I8Ptr, lo: I8Ptr, base: Int, k: Int, d: U32Ptr) -> Int:
    """One full R-row panel (row r at codes base + r * k) for the k-pairs [0, pv),
    pv = AV * (k // (2 * AV)): per AV pairs, the rows' words transposed in registers
    (rows R..AV of the block are zero and never stored). Returns pv, where the
    caller's element loop takes over."""
    comptime assert R <= AV, "_pack_a_panel: a panel of more rows than a vector's lanes"
    var pv = (k // (2 * AV)) * AV
    var blk = Array[SIMD[DType.uint32, AV], AV](fill=SIMD[DType.uint32, AV](0))
    for p in range(0, pv, AV):
        comptime for r in range(R):
            blk[r] = _words[int15](hi, lo, base + r * k + 2 * p)
        comptime for r in range(R, AV):
            blk[r] = SIMD[DType.uint32, AV](0)
        transpose8(blk)
        comptime for q in range(AV):
            store_first[R, DType.uint32, AV](d.unsafe_offset((p + q) * R), blk[q])
    return pv


def pack_a_avx2(g: IntArgs, i0: Int, mc: Int, mr: Int, dst: U32Ptr):
    """Rows [i0, i0 + mc) into mr-row panels of k-pair words (int15: whole codes);
    rows past mc are zero. Full panels take _pack_a_panel for the pairs it covers."""
    var k = g.k
    var kp = _pairs(k)
    var hi = I8Ptr(unsafe_from_address=g.a_hi)
    var lo = I8Ptr(unsafe_from_address=g.a_lo)
    var rows = round_up(mc, mr)
    var full = (mc // mr) * mr
    var pv = 0
    for r in range(rows):
        var d = dst.unsafe_offset((r // mr) * mr * kp + r % mr)
        if r % mr == 0 and r < full and mr == _mr(g.int15):
            var panel = dst.unsafe_offset((r // mr) * mr * kp)
            if g.int15:
                pv = _pack_a_panel[AMR15, True](hi, lo, (i0 + r) * k, k, panel)
            else:
                pv = _pack_a_panel[AMR, False](hi, lo, (i0 + r) * k, k, panel)
        elif r % mr == 0:
            pv = 0  # a partial panel (or another mr): every pair by the loop below
        if r < mc:
            var base = (i0 + r) * k
            for p in range(pv, k // 2):
                d.unsafe_store(p * mr, _word(_code(hi, lo, g.int15, base + 2 * p),
                                             _code(hi, lo, g.int15, base + 2 * p + 1)))
            if k % 2 == 1:
                d.unsafe_store((kp - 1) * mr, _word(_code(hi, lo, g.int15, base + k - 1), 0))
        else:
            for p in range(kp):
                d.unsafe_store(p * mr, UInt32(0))


def pack_b_avx2[int15: Bool](hi: I8Ptr, lo: I8Ptr, k: Int, j0: Int, nc: Int, dst: U32Ptr):
    """Columns [j0, j0 + nc) (rows of the stored (n, k) codes; int15: of both planes,
    joined into whole codes) into ANR-column panels of k-pair words; columns past nc
    are zero. Full panels: per AV pairs and AV columns, the columns' words transposed
    in registers; the rest element by element."""
    var kp = _pairs(k)
    var cols = round_up(nc, ANR)
    var full = (nc // ANR) * ANR
    var pv = (k // (2 * AV)) * AV
    var blk = Array[SIMD[DType.uint32, AV], AV](fill=SIMD[DType.uint32, AV](0))
    for jb in range(0, full, ANR):
        var d = dst.unsafe_offset(jb * kp)
        for p in range(0, pv, AV):
            comptime for h in range(ANR // AV):
                comptime for r in range(AV):
                    blk[r] = _words[int15](hi, lo, (j0 + jb + h * AV + r) * k + 2 * p)
                transpose8(blk)
                comptime for q in range(AV):
                    d.unsafe_store((p + q) * ANR + h * AV, blk[q])
    for j in range(cols):
        var d = dst.unsafe_offset((j // ANR) * ANR * kp + j % ANR)
        if j < nc:
            var base = (j0 + j) * k
            for p in range(pv if j < full else 0, k // 2):
                d.unsafe_store(p * ANR, _word(_code(hi, lo, int15, base + 2 * p),
                                              _code(hi, lo, int15, base + 2 * p + 1)))
            if k % 2 == 1:
                d.unsafe_store((kp - 1) * ANR, _word(_code(hi, lo, int15, base + k - 1), 0))
        else:
            for p in range(kp):
                d.unsafe_store(p * ANR, UInt32(0))


@always_inline
def _madd(a: UInt32, b: SIMD[DType.uint32, AV]) -> SIMD[DType.int32, AV]:
    """Eight lanes of a.lo * b.lo + a.hi * b.hi (16-bit halves, exact in int32)."""
    var av = SIMD[DType.uint32, AV](a)
    comptime if CompilationTarget.has_avx2():
        return llvm_intrinsic["llvm.x86.avx2.pmadd.wd", SIMD[DType.int32, AV]](
            bitcast16(av), bitcast16(b)
        )
    else:
        var r = SIMD[DType.int32, AV](0)
        comptime for h in range(2):
            var sh = SIMD[DType.int32, AV](16 - 16 * h)
            var x = (bitcast_i32(av) << sh) >> 16
            var y = (bitcast_i32(b) << sh) >> 16
            r += x * y
        return r


@always_inline
def bitcast_i32(v: SIMD[DType.uint32, AV]) -> SIMD[DType.int32, AV]:
    return bitcast[DType.int32, AV](v)


@always_inline
def bitcast16(v: SIMD[DType.uint32, AV]) -> SIMD[DType.int16, 2 * AV]:
    return bitcast[DType.int16, 2 * AV](v)


@always_inline
def _tile_int8(a: U32Ptr, b: U32Ptr, kp: Int, mut acc: Array[SIMD[DType.int32, AV], 2 * AMR]):
    for p in range(kp):
        var b0 = b.unsafe_load[width=AV](p * ANR)
        var b1 = b.unsafe_load[width=AV](p * ANR + AV)
        comptime for i in range(AMR):
            var w = a.unsafe_load(p * AMR + i)
            acc[2 * i] += _madd(w, b0)
            acc[2 * i + 1] += _madd(w, b1)


@always_inline
def _tile_int15(a: U32Ptr, b: U32Ptr, kp: Int,
                mut lo: Array[SIMD[DType.int32, AV], AMR15], mut hi: Array[SIMD[DType.int32, AV], AMR15]):
    """All kp k-pairs of AMR15 rows x one AV-column half (b points at the half): per
    G15 k-pairs and row, t = the G15 pair sums (exact in int32), folded into the split
    sums (lo, hi) of that row; the last kp % G15 pairs one t each."""
    var p = 0
    while p + G15 <= kp:
        var bv = Array[SIMD[DType.uint32, AV], G15](fill=SIMD[DType.uint32, AV](0))
        comptime for q in range(G15):
            bv[q] = b.unsafe_load[width=AV]((p + q) * ANR)
        comptime for i in range(AMR15):
            var t = _madd(a.unsafe_load(p * AMR15 + i), bv[0])
            comptime for q in range(1, G15):
                t += _madd(a.unsafe_load((p + q) * AMR15 + i), bv[q])
            fold_split_sum[AV](lo[i], hi[i], t)
        p += G15
    while p < kp:
        var v = b.unsafe_load[width=AV](p * ANR)
        comptime for i in range(AMR15):
            fold_split_sum[AV](lo[i], hi[i], _madd(a.unsafe_load(p * AMR15 + i), v))
        p += 1


def avx2_packed_words(n: Int, k: Int, int15: Bool) -> Int:
    """32-bit words of B prepared for avx2_block: round_up(n, ANR) columns of k-pair
    words (int15: whole codes, one plane)."""
    return round_up(n, ANR) * _pairs(k)


def avx2_pack_all(b_hi: Int, b_lo: Int, n: Int, k: Int, int15: Bool, j0: Int, j1: Int, dst: U32Ptr):
    """Columns [j0, j1) (j0 a multiple of ANR) of B into the prepared layout."""
    var kp = _pairs(k)
    var hi = I8Ptr(unsafe_from_address=b_hi)
    if int15:
        pack_b_avx2[True](hi, I8Ptr(unsafe_from_address=b_lo), k, j0, j1 - j0, dst.unsafe_offset(j0 * kp))
    else:
        pack_b_avx2[False](hi, hi, k, j0, j1 - j0, dst.unsafe_offset(j0 * kp))


def avx2_block(g: IntArgs, i_lo: Int, i_hi: Int, j_lo: Int, j_hi: Int, ws: U32Ptr):
    """Output rows [i_lo, i_hi) x columns [j_lo, j_hi) with the vpmaddwd kernels."""
    if i_hi <= i_lo or j_hi <= j_lo:
        return
    var k = g.k
    var kp = _pairs(k)
    var mr = _mr(g.int15)
    var mc_max = avx2_mc(g.plan, k, i_hi - i_lo, mr)
    var nc_max = avx2_nc(g, j_hi - j_lo)
    var a_once = _a_once(k, i_hi - i_lo, mr)
    var a_words = _a_words(g.plan, k, i_hi - i_lo, mr)
    var b_words = nc_max * kp
    var a_p = ws
    var b_h = ws.unsafe_offset(a_words)
    var s64 = ws.unsafe_offset(a_words + b_words).unsafe_bitcast[Int64]()
    var bhp = I8Ptr(unsafe_from_address=g.b_hi)
    var blp = I8Ptr(unsafe_from_address=g.b_lo)
    var ea = I32Ptr(unsafe_from_address=g.ea)
    var eb = I32Ptr(unsafe_from_address=g.eb)
    if a_once:
        # every row block's panels where the block loop below would pack them (the
        # blocks start at multiples of mc_max, itself a multiple of mr)
        pack_a_avx2(g, i_lo, i_hi - i_lo, mr, a_p)
    var jc = j_lo
    while jc < j_hi:
        var nc = min(nc_max, j_hi - jc)
        if g.bpre != 0:
            # prepared (avx2_pack_all): the panels of all n columns
            b_h = U32Ptr(unsafe_from_address=g.bpre).unsafe_offset(jc * kp)
        elif g.int15:
            pack_b_avx2[True](bhp, blp, k, jc, nc, b_h)
        else:
            pack_b_avx2[False](bhp, bhp, k, jc, nc, b_h)
        var ic = i_lo
        while ic < i_hi:
            var mc = min(mc_max, i_hi - ic)
            var a_blk = a_p.unsafe_offset((ic - i_lo) * kp)
            if not a_once:
                a_blk = a_p
                pack_a_avx2(g, ic, mc, mr, a_p)
            for jp in range(0, nc, ANR):
                var bph = b_h.unsafe_offset(jp * kp)
                for ip in range(0, mc, mr):
                    var ap = a_blk.unsafe_offset(ip * kp)
                    var rows = min(mr, mc - ip)
                    if not g.int15:
                        var acc = Array[SIMD[DType.int32, AV], 2 * AMR](fill=SIMD[DType.int32, AV](0))
                        _tile_int8(ap, bph, kp, acc)
                        # rows indexed at compile time: a run-time index into acc would keep
                        # the accumulators in memory, stored after every vpmaddwd
                        comptime for i in range(AMR):
                            if i < rows:
                                var r = ic + ip + i
                                var s = acc[2 * i].join(acc[2 * i + 1])
                                store_scaled(g, s.cast[DType.float32](), ea.unsafe_load(r), eb, r, jc + jp, nc - jp)
                    else:
                        comptime for v in range(2):  # the panel's two AV-column halves
                            var lo = Array[SIMD[DType.int32, AV], AMR15](fill=SIMD[DType.int32, AV](0))
                            var hi = Array[SIMD[DType.int32, AV], AMR15](fill=SIMD[DType.int32, AV](0))
                            _tile_int15(ap, bph.unsafe_offset(v * AV), kp, lo, hi)
                            # row i's 16 exact sums at s64[i * ANR], this half's 8 at + v * AV
                            comptime for i in range(AMR15):
                                s64.unsafe_store(i * ANR + v * AV, join_split_sum[AV](lo[i], hi[i]))
                        for i in range(rows):
                            var r = ic + ip + i
                            var s = s64.unsafe_load[width=2 * AV](i * ANR)
                            store_scaled(g, s.cast[DType.float32](), ea.unsafe_load(r), eb, r, jc + jp, nc - jp)
            ic += mc_max
        jc += nc_max

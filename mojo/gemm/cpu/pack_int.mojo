"""Packing for the integer GEMMs (int8i32.v1, int15i64.v1).

The dot-product instruction (vpdpbusd) multiplies 4 unsigned bytes of A by 4
signed bytes of B and adds the 4 products into one int32 lane. So k is taken 4 at
a time ("k-groups", k padded with zero codes to a multiple of 4):
  B panel (NR columns): for each k-group, NR int32 words, word j = B[j, 4g:4g+4].
  A panel (MR rows):    for each k-group, MR int32 words, row i = A[i, 4g:4g+4]
                        with every byte XOR 0x80 when `offset` (= code + 128, an
                        unsigned byte); planes that are already unsigned (int15 lo)
                        are copied as they are.
The +128 offset is removed exactly afterwards with 128 * colsum(B[j, :]), which the
B packing also returns. Wrapping int32 arithmetic keeps every true sum exact: all
true sums lie inside the int32 range by the domain rules L-7 / W-4.
"""
from std.collections import Array
from std.sys import llvm_intrinsic
from std.sys.info import CompilationTarget
from std.memory import bitcast
from std.utils import IndexList
from common.ptr import I8Ptr, I32Ptr, U32Ptr
from gemm.cpu.blocking import round_up, IMR, INR, IW
from gemm.cpu.pack_f32 import transpose_sq


@always_inline
def kgroups(k: Int) -> Int:
    return (k + 3) // 4


@always_inline
def _word(src: I8Ptr, row: Int, ld: Int, g: Int, k: Int, xor: UInt32) -> UInt32:
    var base = src.unsafe_offset(row * ld + 4 * g)
    var w: UInt32 = 0
    if 4 * g + 4 <= k:
        w = base.unsafe_bitcast[UInt32]().unsafe_load(0)
    else:
        for q in range(k - 4 * g):
            w |= UInt32(UInt8(base.unsafe_load(q))) << UInt32(8 * q)
        # padding bytes must be code 0 after the offset: 0x80 ^ xor
        for q in range(k - 4 * g, 4):
            w |= (UInt32(0x80) & xor) << UInt32(8 * q)
    return w ^ xor


@always_inline
def _add_byte_sums(acc: SIMD[DType.int32, IW], w: SIMD[DType.uint32, IW]) -> SIMD[DType.int32, IW]:
    """acc plus, per lane, the sum of w's 4 bytes read as signed int8 codes (exact).
    With AVX512-VNNI one vpdpbusd does it (unsigned bytes 1, 1, 1, 1 times the 4
    signed bytes, added into the lane); otherwise each byte is sign-extended."""
    comptime if CompilationTarget.has_vnni() and CompilationTarget.has_avx512f() and IW == 16:
        return llvm_intrinsic["llvm.x86.avx512.vpdpbusd.512", SIMD[DType.int32, IW]](
            acc, bitcast[DType.uint8, 64](SIMD[DType.uint32, IW](0x01010101)), bitcast[DType.int8, 64](w)
        )
    else:
        var x = w.cast[DType.int32]()
        var s = acc + ((x << 24) >> 24)
        comptime for q in range(1, 4):
            s += (x << SIMD[DType.int32, IW](24 - 8 * q)) >> 24
        return s


def _rows_idx(o: Int, j: Int) -> IndexList[IW]:
    """Shuffle indices for _store_rows: lane l of output vector o is word IW*o + l of
    the packed panel, i.e. row (IW*o + l) % IMR of k-group (IW*o + l) // IMR; the lanes
    whose row is 2j or 2j + 1 are taken from that pair of rows (the others: any)."""
    var r = IndexList[IW]()
    for l in range(IW):
        var q = IW * o + l
        var row = q % IMR
        r[l] = q // IMR + IW * (row - 2 * j) if row // 2 == j else l
    return r


def _rows_mask(o: Int, j: Int) -> SIMD[DType.bool, IW]:
    """The lanes of output vector o whose row is 2j or 2j + 1."""
    var m = SIMD[DType.bool, IW](fill=False)
    for l in range(IW):
        m[l] = ((IW * o + l) % IMR) // 2 == j
    return m


@always_inline
def _store_rows(r: Array[SIMD[DType.uint32, IW], IMR], xor: UInt32, d: U32Ptr):
    """IW k-groups of an IMR-row panel: r[i] holds row i's words for the IW groups;
    d receives them group by group (IMR words each), IMR whole vectors. Each output
    vector takes its lanes from the row pairs (2j, 2j + 1) by one two-input shuffle
    per pair, merged by compile-time lane masks: 3 * IMR shuffles and whole-vector
    stores, where a 16 x 16 transpose of the IMR real rows took 64 shuffles and 2 * IW
    part-vector stores (on the 2-core Zen 5, int8 1024^3 with B packed per call took
    2.37-2.42 ms on one task against 2.57-2.65 ms).
    The indices and masks must be comptime values: built inside the loop body they
    were computed at run time, lane by lane."""
    comptime assert IMR % 2 == 0, "_store_rows pairs the panel's rows"
    comptime for o in range(IMR):
        var v = r[IMR - 2].shuffle[_rows_idx(o, IMR // 2 - 1)](r[IMR - 1])
        comptime for jj in range(IMR // 2 - 1):
            comptime j = IMR // 2 - 2 - jj
            comptime m = _rows_mask(o, j)
            v = m.select(r[2 * j].shuffle[_rows_idx(o, j)](r[2 * j + 1]), v)
        d.unsafe_store(o * IW, v ^ xor)


def pack_a_int(src: I8Ptr, ld: Int, i0: Int, mc: Int, k: Int, offset: Bool, dst: U32Ptr):
    """Rows [i0, i0+mc) over all of k into IMR-row panels (rows past mc are code 0)."""
    var kg = kgroups(k)
    var xor: UInt32 = 0x80808080 if offset else 0
    var panels = (mc + IMR - 1) // IMR
    for p in range(panels):
        var d = dst.unsafe_offset(p * IMR * kg)
        var rows = min(IMR, mc - p * IMR)
        var g0 = 0
        if rows == IMR:
            # whole k-groups, IW at a time: each row's IW words loaded as one vector,
            # then rearranged group by group into IMR whole vectors (_store_rows)
            var blk = Array[SIMD[DType.uint32, IW], IMR](fill=SIMD[DType.uint32, IW](0))
            var gfull = (k // 4) // IW * IW
            while g0 < gfull:
                comptime for r in range(IMR):
                    blk[r] = src.unsafe_offset((i0 + p * IMR + r) * ld + 4 * g0).unsafe_bitcast[UInt32]().unsafe_load[width=IW](0)
                _store_rows(blk, xor, d.unsafe_offset(g0 * IMR))
                g0 += IW
        for ii in range(rows):
            for g in range(g0, kg):
                d.unsafe_store(g * IMR + ii, _word(src, i0 + p * IMR + ii, ld, g, k, xor))
        for ii in range(rows, IMR):
            for g in range(kg):
                d.unsafe_store(g * IMR + ii, xor)


def pack_b_int(src: I8Ptr, ld: Int, j0: Int, nc: Int, k: Int, dst: U32Ptr, colsum: I32Ptr):
    """Columns [j0, j0+nc) (rows of the stored (n, k) array) into INR-column panels,
    and colsum[j - j0] = sum of the codes of column j (columns past nc: 0)."""
    var kg = kgroups(k)
    var panels = (nc + INR - 1) // INR
    for p in range(panels):
        var d = dst.unsafe_offset(p * INR * kg)
        var cols = min(INR, nc - p * INR)
        var g0 = 0
        if cols == INR:
            # whole k-groups, 16 at a time: 16 columns x 16 words transposed in
            # registers; the column sums of those groups summed from the same words
            var blk = Array[SIMD[DType.uint32, IW], IW](fill=SIMD[DType.uint32, IW](0))
            var gfull = (k // 4) // IW * IW
            comptime for h in range(INR // IW):
                var cs = SIMD[DType.int32, IW](0)
                var g = 0
                while g < gfull:
                    comptime for r in range(IW):
                        blk[r] = src.unsafe_offset((j0 + p * INR + h * IW + r) * ld + 4 * g).unsafe_bitcast[UInt32]().unsafe_load[width=IW](0)
                    transpose_sq[DType.uint32, IW](blk)
                    comptime for r in range(IW):
                        d.unsafe_store((g + r) * INR + h * IW, blk[r])
                        cs = _add_byte_sums(cs, blk[r])
                    g += IW
                colsum.unsafe_store(p * INR + h * IW, cs)
            g0 = gfull
        for jj in range(cols):
            var j = j0 + p * INR + jj
            for g in range(g0, kg):
                d.unsafe_store(g * INR + jj, _word(src, j, ld, g, k, 0))
            var s: Int32 = colsum.unsafe_load(p * INR + jj) if g0 > 0 else 0
            var row = src.unsafe_offset(j * ld)
            for kk in range(4 * g0, k):
                s += Int32(row.unsafe_load(kk))
            colsum.unsafe_store(p * INR + jj, s)
        for jj in range(cols, INR):
            for g in range(kg):
                d.unsafe_store(g * INR + jj, UInt32(0))
            colsum.unsafe_store(p * INR + jj, Int32(0))

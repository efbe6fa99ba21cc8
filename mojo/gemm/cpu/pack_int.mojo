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
from common.ptr import I8Ptr, I32Ptr, U32Ptr
from gemm.cpu.blocking import round_up, IMR, INR, IW
from gemm.cpu.pack_f32 import transpose_sq, store_first


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
def _byte_sums(w: SIMD[DType.uint32, IW]) -> SIMD[DType.int32, IW]:
    """Per lane, the sum of its 4 bytes read as signed int8 codes (exact)."""
    var x = w.cast[DType.int32]()
    var s = (x << 24) >> 24
    comptime for q in range(1, 4):
        s += (x << SIMD[DType.int32, IW](24 - 8 * q)) >> 24
    return s


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
            # whole k-groups, 16 at a time: 16 x 16 words transposed in registers
            # (rows IMR..16 of the block zero, never stored)
            var blk = Array[SIMD[DType.uint32, IW], IW](fill=SIMD[DType.uint32, IW](0))
            var gfull = (k // 4) // IW * IW
            while g0 < gfull:
                comptime for r in range(IMR):
                    blk[r] = src.unsafe_offset((i0 + p * IMR + r) * ld + 4 * g0).unsafe_bitcast[UInt32]().unsafe_load[width=IW](0)
                comptime for r in range(IMR, IW):
                    blk[r] = SIMD[DType.uint32, IW](0)
                transpose_sq[DType.uint32, IW](blk)
                comptime for r in range(IW):
                    store_first[IMR, DType.uint32, IW](d.unsafe_offset((g0 + r) * IMR), blk[r] ^ xor)
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
                        cs += _byte_sums(blk[r])
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

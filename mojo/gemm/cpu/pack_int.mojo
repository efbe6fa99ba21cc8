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
from common.ptr import I8Ptr, I32Ptr, U32Ptr
from gemm.cpu.blocking import round_up, IMR, INR


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


def pack_a_int(src: I8Ptr, ld: Int, i0: Int, mc: Int, k: Int, offset: Bool, dst: U32Ptr):
    """Rows [i0, i0+mc) over all of k into IMR-row panels (rows past mc are code 0)."""
    var kg = kgroups(k)
    var xor: UInt32 = 0x80808080 if offset else 0
    var panels = (mc + IMR - 1) // IMR
    for p in range(panels):
        var d = dst.unsafe_offset(p * IMR * kg)
        var rows = min(IMR, mc - p * IMR)
        for ii in range(rows):
            for g in range(kg):
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
        for jj in range(cols):
            var j = j0 + p * INR + jj
            for g in range(kg):
                d.unsafe_store(g * INR + jj, _word(src, j, ld, g, k, 0))
            var s: Int32 = 0
            var row = src.unsafe_offset(j * ld)
            for kk in range(k):
                s += Int32(row.unsafe_load(kk))
            colsum.unsafe_store(p * INR + jj, s)
        for jj in range(cols, INR):
            for g in range(kg):
                d.unsafe_store(g * INR + jj, UInt32(0))
            colsum.unsafe_store(p * INR + jj, Int32(0))

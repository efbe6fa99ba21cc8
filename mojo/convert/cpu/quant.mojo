"""float32 rows -> int8 / int15 codes with a power-of-two exponent per row, and
back (contract rules L-3, L-4, L-6; W-1..W-3 for int15).

The arithmetic is arith.quant (row_exponent, codes, split15 / join15, scale_pow2)
and arith.fp (pow2f); this file lays out the loops: one row at a time, SIMD width
then a scalar tail; the dispatch hands each task a range of rows.
"""
from std.sys import simd_width_of
from common.ptr import F32Ptr, U32Ptr, I8Ptr, I32Ptr
from arith.fp import pow2f
from arith.quant import (
    row_exponent, row_absmax_bits, absmax_step, exponent_of, quant_scale, codes, split15, join15, scale_pow2,
    INT8_SHIFT, INT15_SHIFT, INT8_CMAX, INT15_CMAX,
)

comptime W = simd_width_of[DType.float32]()


@always_inline
def _row_e(row: U32Ptr, k: Int, r: Int, given: Int, shift: Int) -> Int:
    """The row's exponent (L-3, W-1); given != 0: the address of one float32 per row,
    the absmax of whole rows of which this row holds some columns (the k-split, rule
    L-8), read as one more element of the row (absmax_step: its magnitude counts
    unless it is NaN or subnormal)."""
    var top = row_absmax_bits(row, k)
    if given != 0:
        top = absmax_step[1](SIMD[DType.uint32, 1](top),
                             SIMD[DType.uint32, 1](U32Ptr(unsafe_from_address=given).unsafe_load(r)))[0]
    return exponent_of(top, shift)


def row_absmax_rows(src: U32Ptr, k: Int, row_start: Int, row_end: Int, dst: U32Ptr):
    """The absmax bits of each row (arith.quant.row_absmax_bits)."""
    for r in range(row_start, row_end):
        dst.unsafe_store(r, row_absmax_bits(src.unsafe_offset(r * k), k))


def quantize_int8_rows(src: U32Ptr, k: Int, row_start: Int, row_end: Int, out_codes: I8Ptr, exps: I32Ptr,
                       given: Int = 0):
    for r in range(row_start, row_end):
        var row = src.unsafe_offset(r * k)
        var e = _row_e(row, k, r, given, INT8_SHIFT)
        exps.unsafe_store(r, Int32(e))
        var scale = quant_scale(e)
        var out = out_codes.unsafe_offset(r * k)
        var i = 0
        while i + W <= k:
            out.unsafe_store(i, codes[W, INT8_CMAX](row.unsafe_load[width=W](i), scale).cast[DType.int8]())
            i += W
        while i < k:
            out.unsafe_store(i, codes[1, INT8_CMAX](row.unsafe_load[width=1](i), scale).cast[DType.int8]())
            i += 1


def quantize_int15_rows(
    src: U32Ptr, k: Int, row_start: Int, row_end: Int, hi: I8Ptr, lo: I8Ptr, exps: I32Ptr,
    given: Int = 0,
):
    for r in range(row_start, row_end):
        var row = src.unsafe_offset(r * k)
        var e = _row_e(row, k, r, given, INT15_SHIFT)
        exps.unsafe_store(r, Int32(e))
        var scale = quant_scale(e)
        var h = hi.unsafe_offset(r * k)
        var l = lo.unsafe_offset(r * k)
        var i = 0
        while i + W <= k:
            var pl = split15[W](codes[W, INT15_CMAX](row.unsafe_load[width=W](i), scale))
            h.unsafe_store(i, pl[0])
            l.unsafe_store(i, pl[1])
            i += W
        while i < k:
            var pl = split15[1](codes[1, INT15_CMAX](row.unsafe_load[width=1](i), scale))
            h.unsafe_store(i, pl[0])
            l.unsafe_store(i, pl[1])
            i += 1


def dequantize_int8_rows(in_codes: I8Ptr, k: Int, row_start: Int, row_end: Int, exps: I32Ptr, dst: F32Ptr):
    for r in range(row_start, row_end):
        var p2 = pow2f(Int(exps.unsafe_load(r)))
        var c = in_codes.unsafe_offset(r * k)
        var o = dst.unsafe_offset(r * k)
        var i = 0
        while i + W <= k:
            o.unsafe_store(i, scale_pow2[W](c.unsafe_load[width=W](i).cast[DType.float32](), SIMD[DType.float32, W](p2)))
            i += W
        while i < k:
            o.unsafe_store(i, scale_pow2[1](c.unsafe_load[width=1](i).cast[DType.float32](), SIMD[DType.float32, 1](p2)))
            i += 1


def dequantize_int15_rows(
    hi: I8Ptr, lo: I8Ptr, k: Int, row_start: Int, row_end: Int, exps: I32Ptr, dst: F32Ptr
):
    for r in range(row_start, row_end):
        var p2 = pow2f(Int(exps.unsafe_load(r)))
        var h = hi.unsafe_offset(r * k)
        var l = lo.unsafe_offset(r * k)
        var o = dst.unsafe_offset(r * k)
        var i = 0
        while i + W <= k:
            var cd = join15[W](h.unsafe_load[width=W](i), l.unsafe_load[width=W](i))
            o.unsafe_store(i, scale_pow2[W](cd.cast[DType.float32](), SIMD[DType.float32, W](p2)))
            i += W
        while i < k:
            var cd = join15[1](h.unsafe_load[width=1](i), l.unsafe_load[width=1](i))
            o.unsafe_store(i, scale_pow2[1](cd.cast[DType.float32](), SIMD[DType.float32, 1](p2)))
            i += 1

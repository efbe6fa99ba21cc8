"""float32 rows -> int8 / int15 codes with a power-of-two exponent per row, and
back (contract rules L-3, L-4, L-6; W-1..W-3 for int15).

Per row: DAZ; absmax over |x| ignoring NaN (taken on the bit patterns, so the
floating-point state cannot change it); e = unbiased_exponent(absmax) - S
(S = 6 int8, 13 int15), e = 0 for a row with no nonzero finite-or-inf value;
code = clamp(rne(x * pow2f(-e)), -C, C), NaN -> 0. int15 codes are split as
hi = code >> 7 (arithmetic), lo = code & 127.
Dequantize: ftz(f32(code) * pow2f(e)).
One row at a time; the dispatch hands each task a range of rows.
"""
from std.sys import simd_width_of
from std.math import clamp
from std.sys import llvm_intrinsic
from std.memory import bitcast
from common.ptr import F32Ptr, U32Ptr, I8Ptr, I32Ptr

comptime W = simd_width_of[DType.float32]()


@always_inline
def pow2f_bits(e: Int) -> UInt32:
    """Bits of the float32 2**e: +inf above 127, +0 below -126."""
    if e > 127:
        return 0x7F800000
    if e < -126:
        return 0
    return UInt32(e + 127) << 23


@always_inline
def _daz[w: Int](b: SIMD[DType.uint32, w]) -> SIMD[DType.uint32, w]:
    return (b & 0x7FFFFFFF).lt(0x00800000).select(b & 0x80000000, b)


def row_exponent(src: U32Ptr, k: Int, s: Int) -> Int:
    """e for one row of k float32 values (as bits)."""
    var best = SIMD[DType.uint32, W](0)
    var i = 0
    while i + W <= k:
        var m = src.unsafe_load[width=W](i) & 0x7FFFFFFF
        var keep = m.le(0x7F800000) & m.ge(0x00800000)
        best = max(best, keep.select(m, SIMD[DType.uint32, W](0)))
        i += W
    var top = best.reduce_max()
    while i < k:
        var m = src.unsafe_load[width=1](i) & 0x7FFFFFFF
        if m <= 0x7F800000 and m >= 0x00800000 and m > top:
            top = m
        i += 1
    if top == 0:
        return 0
    return Int(top >> 23) - 127 - s


@always_inline
def _codes[w: Int, c: Int](bits: SIMD[DType.uint32, w], scale: Float32) -> SIMD[DType.int32, w]:
    var x = bitcast[DType.float32, w](_daz[w](bits))
    var v = x * scale
    var r = llvm_intrinsic["llvm.roundeven", SIMD[DType.float32, w]](v)
    var cl = clamp(r, Float32(-c), Float32(c))
    var is_nan = (bitcast[DType.uint32, w](v) & 0x7FFFFFFF).gt(0x7F800000)
    return is_nan.select(SIMD[DType.int32, w](0), cl.cast[DType.int32]())


def quantize_int8_rows(src: U32Ptr, k: Int, row_start: Int, row_end: Int, codes: I8Ptr, exps: I32Ptr):
    for r in range(row_start, row_end):
        var row = src.unsafe_offset(r * k)
        var e = row_exponent(row, k, 6)
        exps.unsafe_store(r, Int32(e))
        var scale = bitcast[DType.float32, 1](SIMD[DType.uint32, 1](pow2f_bits(-e)))[0]
        var out = codes.unsafe_offset(r * k)
        var i = 0
        while i + W <= k:
            out.unsafe_store(i, _codes[W, 127](row.unsafe_load[width=W](i), scale).cast[DType.int8]())
            i += W
        while i < k:
            out.unsafe_store(i, _codes[1, 127](row.unsafe_load[width=1](i), scale).cast[DType.int8]())
            i += 1


def quantize_int15_rows(
    src: U32Ptr, k: Int, row_start: Int, row_end: Int, hi: I8Ptr, lo: I8Ptr, exps: I32Ptr
):
    for r in range(row_start, row_end):
        var row = src.unsafe_offset(r * k)
        var e = row_exponent(row, k, 13)
        exps.unsafe_store(r, Int32(e))
        var scale = bitcast[DType.float32, 1](SIMD[DType.uint32, 1](pow2f_bits(-e)))[0]
        var h = hi.unsafe_offset(r * k)
        var l = lo.unsafe_offset(r * k)
        var i = 0
        while i + W <= k:
            var cd = _codes[W, 16383](row.unsafe_load[width=W](i), scale)
            h.unsafe_store(i, (cd >> 7).cast[DType.int8]())
            l.unsafe_store(i, (cd & 127).cast[DType.int8]())
            i += W
        while i < k:
            var cd = _codes[1, 16383](row.unsafe_load[width=1](i), scale)
            h.unsafe_store(i, (cd >> 7).cast[DType.int8]())
            l.unsafe_store(i, (cd & 127).cast[DType.int8]())
            i += 1


@always_inline
def _ftz[w: Int](x: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    var b = bitcast[DType.uint32, w](x)
    return bitcast[DType.float32, w](_daz[w](b))


def dequantize_int8_rows(codes: I8Ptr, k: Int, row_start: Int, row_end: Int, exps: I32Ptr, dst: F32Ptr):
    for r in range(row_start, row_end):
        var scale = bitcast[DType.float32, 1](SIMD[DType.uint32, 1](pow2f_bits(Int(exps.unsafe_load(r)))))[0]
        var c = codes.unsafe_offset(r * k)
        var o = dst.unsafe_offset(r * k)
        var i = 0
        while i + W <= k:
            o.unsafe_store(i, _ftz[W](c.unsafe_load[width=W](i).cast[DType.float32]() * scale))
            i += W
        while i < k:
            o.unsafe_store(i, _ftz[1](c.unsafe_load[width=1](i).cast[DType.float32]() * scale))
            i += 1


def dequantize_int15_rows(
    hi: I8Ptr, lo: I8Ptr, k: Int, row_start: Int, row_end: Int, exps: I32Ptr, dst: F32Ptr
):
    for r in range(row_start, row_end):
        var scale = bitcast[DType.float32, 1](SIMD[DType.uint32, 1](pow2f_bits(Int(exps.unsafe_load(r)))))[0]
        var h = hi.unsafe_offset(r * k)
        var l = lo.unsafe_offset(r * k)
        var o = dst.unsafe_offset(r * k)
        var i = 0
        while i + W <= k:
            var cd = h.unsafe_load[width=W](i).cast[DType.int32]() * 128 + l.unsafe_load[width=W](i).cast[DType.int32]()
            o.unsafe_store(i, _ftz[W](cd.cast[DType.float32]() * scale))
            i += W
        while i < k:
            var cd = h.unsafe_load[width=1](i).cast[DType.int32]() * 128 + l.unsafe_load[width=1](i).cast[DType.int32]()
            o.unsafe_store(i, _ftz[1](cd.cast[DType.float32]() * scale))
            i += 1

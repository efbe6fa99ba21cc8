"""Row quantization to int8 / int15 codes and the power-of-two epilogue
(contract rules L-3, L-4, L-5, L-6, W-1, W-2, W-3 in
contracts/gemm/IDENTICAL_LOWBIT_CONTRACT.md).

Width-generic: the converters call it at SIMD width, the GPU thread bodies and the
attention's int15 cell at width 1. The absmax and the exponent are taken on the
bit patterns, so the floating-point state cannot change them.
"""
from std.math import clamp
from std.sys import simd_width_of
from std.memory import bitcast
from std.sys import llvm_intrinsic
from common.ptr import U32Ptr
from arith.fp import daz_bits, is_nan_bits, _ftz, pow2f, pow2_in_range, MAG_BITS, INF_BITS, F32MIN_BITS

comptime INT8_SHIFT = 6
comptime INT15_SHIFT = 13
comptime INT8_CMAX = 127
comptime INT15_CMAX = 16383


@always_inline
def absmax_step[w: Int](best: SIMD[DType.uint32, w], b: SIMD[DType.uint32, w]) -> SIMD[DType.uint32, w]:
    """One element of the row absmax, on the bits: |x| of a normal or inf counts;
    NaN and (DAZ'd) subnormals and zeros do not. Order-free (a max)."""
    var m = b & MAG_BITS
    var keep = m.le(INF_BITS) & m.ge(F32MIN_BITS)
    return max(best, keep.select(m, SIMD[DType.uint32, w](0)))


@always_inline
def exponent_of(absmax_bits: UInt32, shift: Int) -> Int:
    """Rule: L-3, W-1
    e = unbiased_exponent(absmax) - S (S = 6 int8, 13 int15), 0 for a row with no
    counted value (zeros, NaNs, subnormals); an inf gives 255 - 127 - S."""
    if absmax_bits == 0:
        return 0
    return Int(absmax_bits >> 23) - 127 - shift


def row_exponent(src: U32Ptr, k: Int, shift: Int) -> Int:
    """The exponent of one contiguous row of k float32 values (as bits)."""
    return exponent_of(row_absmax_bits(src, k), shift)


def row_absmax_bits(src: U32Ptr, k: Int) -> UInt32:
    """The absmax of one contiguous row of k float32 values, as the bits of |x| (0 when
    no value counts: absmax_step). A max, so the absmax of a row split in pieces is the
    max of the pieces' (the k-split's quantization, rule L-8)."""
    comptime W = simd_width_of[DType.uint32]()
    var best = SIMD[DType.uint32, W](0)
    var i = 0
    while i + W <= k:
        best = absmax_step[W](best, src.unsafe_load[width=W](i))
        i += W
    var top = best.reduce_max()
    while i < k:
        top = absmax_step[1](SIMD[DType.uint32, 1](top), src.unsafe_load[width=1](i))[0]
        i += 1
    return top


def row_exponent_strided(src: U32Ptr, n: Int, stride: Int, shift: Int) -> Int:
    """The exponent of n values src[t * stride] (one thread, one value at a time)."""
    var top = SIMD[DType.uint32, 1](0)
    for t in range(n):
        top = absmax_step[1](top, src.unsafe_load(t * stride))
    return exponent_of(top[0], shift)


@always_inline
def quant_scale(e: Int) -> Float32:
    """pow2f(-e): the factor that brings the row's largest value to [2**S, 2**(S+1))."""
    return pow2f(-e)


@always_inline
def codes[w: Int, cmax: Int](bits: SIMD[DType.uint32, w], scale: Float32) -> SIMD[DType.int32, w]:
    """Rule: L-4
    code = clamp(rne(f32(daz(x) * pow2f(-e))), -C, C), C = 127 (int8) or 16383
    (int15, rule W-1); ties to even; NaN gives 0. (A subnormal product rounds to a
    zero code, so the flush of the contract's formula changes no code.)"""
    var x = bitcast[DType.float32, w](daz_bits[w](bits))
    var v = x * scale
    var r = llvm_intrinsic["llvm.roundeven", SIMD[DType.float32, w]](v)
    var cl = clamp(r, Float32(-cmax), Float32(cmax))
    return is_nan_bits[w](bitcast[DType.uint32, w](v)).select(SIMD[DType.int32, w](0), cl.cast[DType.int32]())


@always_inline
def split15[w: Int](code: SIMD[DType.int32, w]) -> Tuple[SIMD[DType.int8, w], SIMD[DType.int8, w]]:
    """Rule: W-2
    int15 planes: hi = code >> 7 (arithmetic), lo = code & 127, so code = hi*128 + lo."""
    return ((code >> 7).cast[DType.int8](), (code & 127).cast[DType.int8]())


@always_inline
def join15_sums[d: DType, w: Int](hi: SIMD[d, w], lo: SIMD[d, w]) -> SIMD[d, w]:
    """W-2 read back: hi * 128 + lo, exact in an integer type d wide enough. On one
    code's planes it is the code; on sums over k of x * hi and x * lo it is the sum of
    x * code (the int15 GEMMs that multiply B's planes separately join their sums so)."""
    return (hi << 7) + lo


@always_inline
def fold_split_sum[w: Int](mut lo32: SIMD[DType.int32, w], mut hi32: SIMD[DType.int32, w],
                           t: SIMD[DType.int32, w]):
    """One exact integer partial sum t (|t| < 2**31) added into a split accumulator:
    lo32 += t wrapping (the total mod 2**32), hi32 += t >> 16 (arithmetic). Two int32
    lanes then hold a sum far past int32: join_split_sum reads it back exactly while
    at most 2**15 such t were folded (the W-3 kernels fold one t per three k-pairs of
    15-bit codes: at most 10923 of them at k = 65536, W-4)."""
    lo32 = lo32 + t
    hi32 = hi32 + (t >> 16)


@always_inline
def join_split_sum[w: Int](lo32: SIMD[DType.int32, w], hi32: SIMD[DType.int32, w]) -> SIMD[DType.int64, w]:
    """The exact total of the t folded by fold_split_sum: sum(t) = hi * 2**16 + low,
    low = sum(t & 0xFFFF) in [0, 2**32) (at most 2**15 terms below 2**16), which is
    (lo32 - hi32 * 2**16) mod 2**32 read as unsigned: the one value of that residue
    in [0, 2**32). |hi| stays below 2**15 * 2**15, exact in int32."""
    var low = bitcast[DType.uint32, w](lo32 - (hi32 << 16)).cast[DType.int64]()
    return (hi32.cast[DType.int64]() << 16) + low


@always_inline
def join15[w: Int](hi: SIMD[DType.int8, w], lo: SIMD[DType.int8, w]) -> SIMD[DType.int32, w]:
    """The 15-bit code hi * 128 + lo (W-2 read back), as int32."""
    return join15_sums[DType.int32, w](hi.cast[DType.int32](), lo.cast[DType.int32]())


@always_inline
def join15_products[w: Int](
    hh: SIMD[DType.int64, w], hl: SIMD[DType.int64, w], lh: SIMD[DType.int64, w], ll: SIMD[DType.int64, w]
) -> SIMD[DType.int64, w]:
    """The int15 sum S = sum over k of (128 ah + al) * (128 bh + bl) from the sums of
    the four plane products (HH = sum ah * bh, HL = sum ah * bl, LH = sum al * bh,
    LL = sum al * bl): join15_sums applied to both operands,
    2**14 HH + 2**7 (HL + LH) + LL, exact in int64 (|S| < 2**45 in the W-4 domain)."""
    return (hh << 14) + ((hl + lh) << 7) + ll


@always_inline
def scale_pow2[w: Int](v: SIMD[DType.float32, w], p2: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    """Rule: L-5, L-6, W-3
    ftz(f32(S) * pow2f(e)): v is f32(S) (one rounding to nearest even of the exact
    integer: a code when dequantizing, the exact sum of code products in the integer
    GEMMs' epilogue with e = ea[i] + eb[j]), p2 is pow2f(e); one float32 multiply
    (0 * inf is NaN, as the formula says), flushed."""
    return _ftz[w](v * p2)


@always_inline
def scale_code_pow2[w: Int](code: SIMD[DType.float32, w], p2: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    """scale_pow2(code, pow2f(e)) (L-6, dequantization) for an integer code (int8 or
    int15): f32(code) * pow2f(e) is a signed zero, an infinity, NaN (0 * inf), or at
    least 2**-126 in magnitude (|code| >= 1 and pow2f(e) is +0, +inf or at least
    2**-126), never subnormal, so the flush changes nothing and is left out. The same
    bits as scale_pow2 for every code and exponent (the low-bit panels of
    gemm/cpu/pack_lowbit.mojo widen with it, tested against dequantize_int8)."""
    return code * p2


@always_inline
def scale_pow2_normal[w: Int](v: SIMD[DType.float32, w], e: SIMD[DType.int32, w]) -> SIMD[DType.float32, w]:
    """scale_pow2(v, pow2f(e)) (L-5, W-3) for the integer GEMMs' epilogue when every e
    lies in [-126, 127] (the caller checks it once per call: int_gemm.with_e32).
    There pow2f(e) is the normal 2**e, and v = f32(S) is an integer: +0, or at least 1
    in magnitude, so v * 2**e is +0 or at least 2**-126 in magnitude (inf where it
    overflows, as scale_pow2's multiply gives) and never subnormal: its flush changes
    nothing and is left out, and the in-range power needs no selects. The same bits as
    scale_pow2(v, pow2f_w(e)) for every such v and e."""
    return v * pow2_in_range[w](e)

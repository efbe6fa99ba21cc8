"""Float32 bit rules shared by every profile: the flush, DAZ, NaN on the bits, pow2f.

Each function is width-generic: the CPU kernels call it at SIMD width, the GPU
thread bodies at width 1. Everything is decided on the bit patterns, so the
floating-point state of the machine cannot change a result.

Notation of the contracts (contracts/gemm/IDENTICAL_FP32_CONTRACT.md,
contracts/gemm/IDENTICAL_LOWBIT_CONTRACT.md): ftz(x) replaces a float32 subnormal by
the zero of the same sign; pow2f(e) is the float32 2**e for -126 <= e <= 127, +inf
above, +0 below.
"""
from std.math import fma
from std.memory import bitcast
from common.fpstate import EXPLICIT_FLUSH

comptime SIGN_BITS: UInt32 = 0x80000000
comptime MAG_BITS: UInt32 = 0x7FFFFFFF
comptime INF_BITS: UInt32 = 0x7F800000
comptime F32MIN_BITS: UInt32 = 0x00800000
comptime NEG_FLT_MAX_BITS: UInt32 = 0xFF7FFFFF
comptime QNAN_BITS: UInt32 = 0x7FC00000


@always_inline
def daz_bits[w: Int](b: SIMD[DType.uint32, w]) -> SIMD[DType.uint32, w]:
    """Rule: 6.1
    Denormals are zero, on the bits: a subnormal pattern becomes the zero of the
    same sign; every other pattern (zeros, normals, inf, NaN) is kept. The same
    map is the notation ftz (applied to results instead of inputs)."""
    return (b & MAG_BITS).lt(F32MIN_BITS).select(b & SIGN_BITS, b)


@always_inline
def _ftz[w: Int](x: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    """ftz (notation): a subnormal result becomes the zero of the same sign."""
    return bitcast[DType.float32, w](daz_bits[w](bitcast[DType.uint32, w](x)))


@always_inline
def is_nan_bits[w: Int](b: SIMD[DType.uint32, w]) -> SIMD[DType.bool, w]:
    """NaN, decided on the bits (a float self-compare may be folded by the optimizer)."""
    return (b & MAG_BITS).gt(INF_BITS)


@always_inline
def _is_nan[w: Int](x: SIMD[DType.float32, w]) -> SIMD[DType.bool, w]:
    return is_nan_bits[w](bitcast[DType.uint32, w](x))


@always_inline
def _fmaz[w: Int](a: SIMD[DType.float32, w], b: SIMD[DType.float32, w], c: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    """One true fma (one rounding), its result flushed."""
    return _ftz[w](fma(a, b, c))


@always_inline
def pow2_in_range[w: Int](e: SIMD[DType.int32, w]) -> SIMD[DType.float32, w]:
    """float32 2**e for -126 <= e <= 127 (the caller keeps e inside)."""
    return bitcast[DType.float32, w](((e + 127).cast[DType.uint32]()) << 23)


@always_inline
def pow2f_w[w: Int](e: SIMD[DType.int32, w]) -> SIMD[DType.float32, w]:
    """pow2f (notation): 2**e, +inf for e > 127, +0 for e < -126."""
    var bits = bitcast[DType.uint32, w](pow2_in_range[w](e))
    bits = e.gt(127).select(SIMD[DType.uint32, w](INF_BITS), bits)
    bits = e.lt(-126).select(SIMD[DType.uint32, w](0), bits)
    return bitcast[DType.float32, w](bits)


@always_inline
def pow2f(e: Int) -> Float32:
    """pow2f of one exponent of any size (saturated before it is narrowed to int32)."""
    return pow2f_w[1](SIMD[DType.int32, 1](Int32(max(min(e, 1000), -1000))))[0]


@always_inline
def f32_of_bits[w: Int](b: SIMD[DType.uint32, w]) -> SIMD[DType.float32, w]:
    return bitcast[DType.float32, w](b)


# ---------------------------------------------------------------- width-generic entry points
@always_inline
def ftz(x: SIMD) -> type_of(x):
    comptime w = x.length
    return rebind[type_of(x)](_ftz[w](rebind[SIMD[DType.float32, w]](x)))


@always_inline
def daz_in(x: SIMD) -> type_of(x):
    """A float32 input of a contract operation as a CPU kernel reads it (rule 6.1's DAZ;
    the ops contract's "every operand is read flushed"), for code running under the
    contract state (common.fpstate.enter_contract_mode). With hardware DAZ (the default
    x86 build) the identity: every float operation reads a subnormal operand as the
    zero of its sign by itself. In the explicit-flush build (EXPLICIT_FLUSH: every
    non-x86 target, or -D MOJOLEARN_EXPLICIT_FLUSH=1) the flush itself. Bit operations
    (daz_bits, absmax_step, ...) need neither: they flush on the bits."""
    comptime if EXPLICIT_FLUSH:
        return ftz(x)
    else:
        return x


@always_inline
def is_nan(x: SIMD) -> SIMD[DType.bool, x.length]:
    comptime w = x.length
    return rebind[SIMD[DType.bool, x.length]](_is_nan[w](rebind[SIMD[DType.float32, w]](x)))


comptime F64_2M149_BITS: UInt64 = 874 << 52  # the float64 2**-149 (a float32 subnormal's step)


@always_inline
def widen_exact[w: Int](x: SIMD[DType.float32, w]) -> SIMD[DType.float64, w]:
    """The float64 of x, exact for every float32, subnormals included: a conversion
    instruction reads a subnormal as zero under DAZ, so a zero or subnormal lane is
    built from its significand instead (significand * 2**-149: an exact integer
    conversion and an exact product)."""
    var b = bitcast[DType.uint32, w](x)
    var step = bitcast[DType.float64, 1](SIMD[DType.uint64, 1](F64_2M149_BITS))[0]
    var m = (b & 0x007FFFFF).cast[DType.float64]() * step
    var small = (b & INF_BITS).eq(0)
    var neg = (b & SIGN_BITS).ne(0)
    return small.select(neg.select(-m, m), x.cast[DType.float64]())


@always_inline
def sub_unflushed[w: Int](a: SIMD[DType.float32, w], b: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    """Rule: M-32
    a - b as one IEEE float32 subtraction (round to nearest even) with subnormal
    operands and results kept, whatever the floating-point state: the float64
    difference of the exact widenings, rounded to float32. float64 carries more than
    2 * 24 + 2 bits, so its rounding never changes the float32 one (the double
    rounding of a sum is innocuous); the float64 difference of two float32s is never
    subnormal (DAZ cannot touch it), and FTZ is off under the contract state."""
    return (widen_exact[w](a) - widen_exact[w](b)).cast[DType.float32]()


@always_inline
def order_key[w: Int](x: SIMD[DType.float32, w]) -> SIMD[DType.int32, w]:
    """An int32 in the order of the float32 values (not NaN), subnormals by their
    value, +0 and -0 equal: the magnitude's bits, negated for a negative sign (M-32's
    exact maximum; the CPU kernel and the GPU body both use it)."""
    var b = bitcast[DType.uint32, w](x)
    var mag = (b & 0x7FFFFFFF).cast[DType.int32]()
    return (b >> 31).ne(0).select(-mag, mag)


@always_inline
def of_order_key(k: Int32) -> Float32:
    """The float32 whose order_key is k (a zero key gives +0)."""
    var b = UInt32(k) if k >= 0 else UInt32(0x80000000) | UInt32(-k)
    return bitcast[DType.float32, 1](SIMD[DType.uint32, 1](b))[0]

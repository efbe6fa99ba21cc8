"""Per-element arithmetic of the v1 profiles, written once for the GPU kernels and
for the CPU run of those kernels (cpu_run.mojo).

WHAT IT IS
    Plain scalar functions: no thread indices, no allocation, no floating-point
    mode. A GPU kernel calls them for its one output / element / row; the CPU run
    calls the very same functions in loops shaped like the GPU launch, so the
    tests can check the GPU arithmetic bit for bit on a machine without a GPU.

WHY EXPLICIT FLUSHES
    GPUs have no DAZ mode we can rely on across vendors, and a hardware
    flush-to-zero may decide on the unrounded result (x86 FTZ flushes
    fma(1 - 2**-24, 2**-126, +0), which fp32.v1 keeps as 2**-126). So every input
    is DAZ'd explicitly and every value the contract flushes is flushed
    explicitly, on the correctly rounded IEEE result (fma.rn.f32 / add.rn.f32
    without .ftz on NVIDIA; compile_all.mojo refuses PTX that has .ftz or
    .approx arithmetic). On the CPU the same code gives the same bits under any
    MXCSR with FTZ off (cpu_run sets that).

RULES (contract ids as in arithmetic-v1.md)
    fp32.v1 1   daz on every operand (bf16 operands widened first, then daz)
    fp32.v1 2   leaf size L = max(128, ceil(k / 1024))     (gemm.cpu.blocking)
    fp32.v1 3   leaf_dot: acc = +0; acc = ftz(fma(a, b, acc)) for kk ascending
    fp32.v1 4   tree_fold: balanced pairwise tree, odd last carried, ftz per sum
    L-1 / L-2   widen / narrow bf16                         (convert.cpu.bf16)
    L-3/L-4/W-*  quantize rows: exponent from the absmax, codes rne + clamp
    L-6         dequantize: ftz(f32(code) * pow2f(e))
    int8i32 / int15i64   exact integer sums, epilogue ftz(f32(S) * pow2f(ea + eb))
"""
from std.math import fma
from std.memory import bitcast
from common.ptr import F32Ptr, U16Ptr, U32Ptr, I8Ptr, I32Ptr
from convert.cpu.bf16 import narrow_bits
from convert.cpu.quant import pow2f_bits, _codes
from gemm.cpu.tree import ftz as _ftz_simd
from gemm.cpu.blocking import leaf_size, trailing_ones

# Levels of the binary-counter stack: nleaves <= 1024 by rule 2 needs 11; 16 is spare.
comptime TREE_LEVELS = 16
comptime INT8_SHIFT = 6
comptime INT15_SHIFT = 13
comptime INT8_CMAX = 127
comptime INT15_CMAX = 16383


# ------------------------------------------------------------------ scalars
@always_inline
def ftz(x: Float32) -> Float32:
    """A float32 subnormal becomes a zero of the same sign (the CPU kernels' ftz)."""
    return _ftz_simd[1](x)[0]


@always_inline
def daz(x: Float32) -> Float32:
    """DAZ on an input: the same map as ftz."""
    return _ftz_simd[1](x)[0]


@always_inline
def pow2f(e: Int) -> Float32:
    """float32 2**e for -126 <= e <= 127, +inf above, +0 below."""
    return bitcast[DType.float32, 1](SIMD[DType.uint32, 1](pow2f_bits(e)))[0]


@always_inline
def leaves_of(k: Int) -> Int:
    """Number of fp32.v1 leaves for k (at most 1024)."""
    var l = leaf_size(k)
    return (k + l - 1) // l


# ------------------------------------------------------------------ fp32.v1
@always_inline
def load_operand[dt: DType](p: Pointer[Scalar[dt], MutAnyOrigin], idx: Int) -> Float32:
    """One GEMM operand element as the float32 the contract multiplies: bf16 bits
    (uint16) widened exactly, then DAZ; float32 DAZ'd."""
    comptime if dt == DType.uint16:
        var w = UInt32(rebind[UInt16](p.unsafe_load(idx))) << 16
        return daz(bitcast[DType.float32, 1](SIMD[DType.uint32, 1](w))[0])
    else:
        comptime assert dt == DType.float32, "GEMM operands are float32 or bf16 bits"
        return daz(rebind[Float32](p.unsafe_load(idx)))


@always_inline
def leaf_dot[adt: DType, bdt: DType](
    a: Pointer[Scalar[adt], MutAnyOrigin], a_row: Int, a_step: Int,
    b: Pointer[Scalar[bdt], MutAnyOrigin], b_col: Int, b_step: Int,
    kk0: Int, kk1: Int,
) -> Float32:
    """fp32.v1 rule 3 for one output over the leaf [kk0, kk1).

    a(i, kk) is a[a_row + kk * a_step] and b(kk, j) is b[b_col + kk * b_step]; the
    caller picks these for its layout (a_strides / b_strides), which changes no bit.
    """
    var acc = Float32(0)
    var pa = a_row + kk0 * a_step
    var pb = b_col + kk0 * b_step
    for _ in range(kk0, kk1):
        acc = ftz(fma(load_operand[adt](a, pa), load_operand[bdt](b, pb), acc))
        pa += a_step
        pb += b_step
    return acc


@always_inline
def a_strides(m: Int, k: Int, trans_a: Bool) -> Tuple[Int, Int]:
    """(row stride, k stride) of a: a(i, kk) = a[i * rs + kk * ks].
    NN / NT: a is (m, k); TN: a is (k, m)."""
    if trans_a:
        return (1, m)
    return (k, 1)


@always_inline
def b_strides(n: Int, k: Int, trans_b: Bool) -> Tuple[Int, Int]:
    """(column stride, k stride) of b: b(kk, j) = b[j * cs + kk * ks].
    NN / TN: b is (k, n); NT: b is (n, k)."""
    if trans_b:
        return (k, 1)
    return (1, n)


@always_inline
def tree_fold(parts: F32Ptr, stride: Int, nleaves: Int) -> Float32:
    """fp32.v1 rule 4 for one output whose leaf results are parts[p * stride].

    The binary-counter form: leaf p first merges the levels given by its trailing
    one-bits, then waits on the next level; after the last leaf the waiting levels
    are folded from the lowest up. Equal, sum for sum, to the balanced pairwise
    tree with an odd last element carried (7 leaves: (p01 + p23) + (p45 + p6)).
    The stack lives in registers: every level index is a compile-time constant.
    """
    var slots = SIMD[DType.float32, TREE_LEVELS](0)
    var v = Float32(0)
    for p in range(nleaves):
        v = parts.unsafe_load(p * stride)
        var t = trailing_ones(p)
        comptime for lvl in range(TREE_LEVELS):
            if lvl < t:
                v = ftz(slots[lvl] + v)
        if p + 1 < nleaves:
            comptime for lvl in range(TREE_LEVELS):
                if lvl == t:
                    slots[lvl] = v
        else:
            comptime for lvl in range(TREE_LEVELS):
                if lvl > t and ((nleaves >> lvl) & 1) != 0:
                    v = ftz(slots[lvl] + v)
    return v


# ------------------------------------------------------------------ integer GEMMs
@always_inline
def dot_int8(a: I8Ptr, b: I8Ptr, k: Int) -> Int32:
    """Exact sum of code products over k (exact in int32 for |code| <= 127 and
    k <= 131072, the L-7 domain; the CPU kernels accumulate in int32 too)."""
    var s = Int32(0)
    for kk in range(k):
        s += Int32(a.unsafe_load(kk)) * Int32(b.unsafe_load(kk))
    return s


@always_inline
def code15(hi: I8Ptr, lo: I8Ptr, idx: Int) -> Int32:
    """The 15-bit code hi * 128 + lo."""
    return Int32(hi.unsafe_load(idx)) * 128 + Int32(lo.unsafe_load(idx))


@always_inline
def dot_int15(ahi: I8Ptr, alo: I8Ptr, bhi: I8Ptr, blo: I8Ptr, k: Int) -> Int64:
    """Exact int64 sum of (hi*128 + lo) products over k (each product fits int32)."""
    var s = Int64(0)
    for kk in range(k):
        s += Int64(code15(ahi, alo, kk) * code15(bhi, blo, kk))
    return s


@always_inline
def int_epilogue[dt: DType](s: Scalar[dt], ea: Int32, eb: Int32) -> Float32:
    """ftz(f32(S) * pow2f(ea + eb)): f32(S) one round to nearest even, one
    float32 multiply (0 * inf is NaN, as the formula says)."""
    comptime assert dt == DType.int32 or dt == DType.int64, "S is int32 or int64"
    return ftz(s.cast[DType.float32]() * pow2f(Int(ea) + Int(eb)))


# ------------------------------------------------------------------ bf16
@always_inline
def narrow_bf16(bits: UInt32) -> UInt16:
    """L-2: float32 bits -> bf16 bits (DAZ, round to nearest even, NaN quieted)."""
    return narrow_bits[1](bits)[0]


@always_inline
def widen_bf16(bits: UInt16) -> UInt32:
    """L-1: bf16 bits -> float32 bits, exactly, no flush."""
    return UInt32(bits) << 16


# ------------------------------------------------------------------ quantization
@always_inline
def absmax_step(best: UInt32, bits: UInt32) -> UInt32:
    """One element of the row absmax, on the bits: |x| of a normal or inf counts,
    NaN and (DAZ'd) subnormals and zeros do not. Order-free (a max)."""
    var mag = bits & 0x7FFFFFFF
    if mag <= 0x7F800000 and mag >= 0x00800000 and mag > best:
        return mag
    return best


@always_inline
def exponent_of(absmax_bits: UInt32, shift: Int) -> Int32:
    """e = unbiased_exponent(absmax) - shift, or 0 for a row with no counted value."""
    if absmax_bits == 0:
        return 0
    return Int32(Int(absmax_bits >> 23) - 127 - shift)


@always_inline
def row_exponent(src: U32Ptr, k: Int, shift: Int) -> Int32:
    """The exponent of one row of k float32 values (as bits)."""
    var best = UInt32(0)
    for i in range(k):
        best = absmax_step(best, src.unsafe_load(i))
    return exponent_of(best, shift)


@always_inline
def quant_scale(e: Int32) -> Float32:
    """pow2f(-e): the factor that brings the row's largest value to [2**S, 2**(S+1))."""
    return pow2f(-Int(e))


@always_inline
def quant_code[cmax: Int](bits: UInt32, scale: Float32) -> Int32:
    """clamp(rne(ftz(f32(daz(x) * scale))), -cmax, cmax), NaN -> 0 (the CPU's _codes)."""
    return _codes[1, cmax](SIMD[DType.uint32, 1](bits), scale)[0]


@always_inline
def split15(code: Int32) -> Tuple[Int8, Int8]:
    """int15 planes: hi = code >> 7 (arithmetic), lo = code & 127."""
    return (Int8(code >> 7), Int8(code & 127))


@always_inline
def dequant(code: Int32, e: Int32) -> Float32:
    """L-6: ftz(f32(code) * pow2f(e)) (|code| < 2**24, so f32(code) is exact)."""
    return ftz(code.cast[DType.float32]() * pow2f(Int(e)))

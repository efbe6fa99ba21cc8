"""Per-element arithmetic of the GEMM profiles for one GPU thread, shared by the GPU
kernels and by the CPU run of those kernels (cpu_run.mojo).

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
    without .ftz on NVIDIA; compile_all_gpu.mojo refuses PTX that has .ftz or
    .approx arithmetic). On the CPU the same code gives the same bits under any
    MXCSR with FTZ off (cpu_run sets that).

RULES: every rule is the arithmetic layer's (mojo/arith/), called at width 1;
this file only adapts it to one thread's view (pointers, indices, scalars)
    6.1         daz on every operand (bf16 operands widened first)   arith.fp.daz_bits
    6.2         leaf size                                             arith.tree.leaf_size
    6.3         the chain, kk ascending (f32_tiled.mojo)              arith.tree.chain_step
    6.4         tree_fold: the streaming pairwise tree                arith.tree.tree_add
    6.8         chain_step_exact: the step with its flush proven idle  (here: a GPU route)
    L-1         bf16 operands widened                                 arith.bf16.widen
    L-5/W-3     ftz(f32(S) * pow2f(ea + eb))                          arith.quant.scale_pow2
    (the converters' adapters are convert/gpu/arith.mojo)
"""
from std.math import fma
from std.memory import bitcast
from common.ptr import F32Ptr, U16Ptr, U32Ptr, I8Ptr, I32Ptr
from arith.fp import _ftz, daz_bits, f32_of_bits
from arith.fp import pow2f as _pow2f
from arith.bf16 import widen
from arith.tree import chain_step, tree_add, trailing_ones
from arith.quant import scale_pow2

# Levels of the binary-counter stack: nleaves <= 1024 by rule 6.2 needs 11; 16 is spare.
comptime TREE_LEVELS = 16


# ------------------------------------------------------------------ scalars
@always_inline
def ftz(x: Float32) -> Float32:
    return _ftz[1](x)[0]


@always_inline
def daz(x: Float32) -> Float32:
    """Rule 6.1 on one input."""
    return _ftz[1](x)[0]


@always_inline
def pow2f(e: Int) -> Float32:
    return _pow2f(e)


# ------------------------------------------------------------------ fp32.v1
@always_inline
def load_operand[dt: DType](p: Pointer[Scalar[dt], MutAnyOrigin], idx: Int) -> Float32:
    """One GEMM operand element as the float32 the contract multiplies: bf16 bits
    (uint16) widened exactly (L-1), then DAZ (6.1); float32 DAZ'd."""
    comptime if dt == DType.uint16:
        return daz(widen[1](rebind[SIMD[DType.uint16, 1]](p.unsafe_load(idx)))[0])
    else:
        comptime assert dt == DType.float32, "GEMM operands are float32 or bf16 bits"
        return daz(rebind[Float32](p.unsafe_load(idx)))


# ------------------------------------------------------------------ the flush-free route (6.8)
# A nonzero finite flushed float32 x is M * 2**(E - 23) with M an integer below 2**24
# (E = biased exponent - 127), so a product a * b is a multiple of 2**(Ea + Eb - 46).
# When Ea + Eb >= -80 for every pair a chain multiplies, every product, every exact
# sum and (rounded to float32) every accumulator is a multiple of 2**-126: a nonzero
# accumulator is then at least 2**-126 in magnitude, never subnormal, so the flush of
# chain_step never fires and the bare fma gives its bits. Checked per call on the
# least biased exponents: ea_min + eb_min >= 2 * 127 - 80.
comptime NO_EXPONENT = 255  # the "least exponent" of an operand with no nonzero finite element
comptime FAST_EXPONENT_SUM = 2 * 127 - 80


@always_inline
def operand_exponent(x: Float32) -> Int32:
    """The biased exponent (1..254) of an operand already flushed (6.1) when it is
    nonzero and finite; NO_EXPONENT for +-0, inf and NaN, which constrain nothing
    (a zero product is exact, inf and NaN never become subnormal)."""
    var e = Int32((bitcast[DType.uint32, 1](x)[0] >> 23) & 0xFF)
    if e == 0:
        return Int32(NO_EXPONENT)
    return e


@always_inline
def fast_route_ok(ea_min: Int32, eb_min: Int32) -> Bool:
    """Rule 6.8's test on the least biased exponents of A and B (each NO_EXPONENT
    where the operand has no nonzero finite element)."""
    return Int(ea_min) + Int(eb_min) >= FAST_EXPONENT_SUM


@always_inline
def chain_step_exact[w: Int](a: SIMD[DType.float32, w], b: SIMD[DType.float32, w], acc: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    """Rule 6.3's step without its flush, for chains whose operands passed
    fast_route_ok (rule 6.8): the flush provably never fires there, so this is
    chain_step bit for bit. One fused multiply-add (fma.rn.f32 on NVIDIA)."""
    return fma(a, b, acc)


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
                v = tree_add[1](slots[lvl], v)[0]
        if p + 1 < nleaves:
            comptime for lvl in range(TREE_LEVELS):
                if lvl == t:
                    slots[lvl] = v
        else:
            comptime for lvl in range(TREE_LEVELS):
                if lvl > t and ((nleaves >> lvl) & 1) != 0:
                    v = tree_add[1](slots[lvl], v)[0]
    return v


# ------------------------------------------------------------------ integer GEMMs
@always_inline
def int_epilogue[dt: DType](s: Scalar[dt], ea: Int32, eb: Int32) -> Float32:
    """ftz(f32(S) * pow2f(ea + eb)) (L-5, W-3): f32(S) one round to nearest even."""
    comptime assert dt == DType.int32 or dt == DType.int64, "S is int32 or int64"
    return scale_pow2[1](s.cast[DType.float32](), pow2f(Int(ea) + Int(eb)))[0]

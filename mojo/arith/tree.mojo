"""fp32.v1's reduction: the leaf size, the chain step and the tree step
(contract rules 6.2, 6.3, 6.4 in contracts/gemm/IDENTICAL_FP32_CONTRACT.md).

The CPU kernels run the chain with chain_step_daz under the hardware's DAZ (which
reads a subnormal accumulator as the signed zero the per-step flush would give) and
flush the value leaving the registers with ftz; the GPU bodies and the reference
loops call chain_step itself. Both give the bits of chain_step. In the explicit-flush
build (common.fpstate.EXPLICIT_FLUSH) chain_step_daz is chain_step on flushed inputs.
"""
from std.math import fma
from arith.fp import _ftz
from common.fpstate import EXPLICIT_FLUSH


@always_inline
def leaf_size(k: Int) -> Int:
    """Rule: 6.2
    L = max(128, ceil(k / 1024)): a function of k alone, at most 1024 leaves."""
    return max(128, (k + 1023) // 1024)


@always_inline
def leaf_count(k: Int) -> Int:
    """The number of fp32.v1 leaves over k (at most 1024)."""
    var l = leaf_size(k)
    return (k + l - 1) // l


@always_inline
def chain_step[w: Int](a: SIMD[DType.float32, w], b: SIMD[DType.float32, w], acc: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    """Rule: 6.3
    One step of a leaf's chain: acc = ftz(fma(a, b, acc)), from acc = +0, kk ascending."""
    return _ftz[w](fma(a, b, acc))


@always_inline
def chain_step_daz[w: Int](a: SIMD[DType.float32, w], b: SIMD[DType.float32, w], acc: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    """chain_step (rule 6.3) for a caller under the contract floating-point state
    (common.fpstate: DAZ on, FTZ off): the bare fma, flush deferred.

    Same bits: DAZ makes the next fma read a subnormal acc (and a, b) as the zero of
    the same sign, which is what chain_step's flush of the previous step gives, and
    FTZ off keeps a result that rounds up to 2**-126; so a chain of these steps, with
    ftz applied once to the value that leaves the registers, equals the chain of
    chain_step. Why the CPU kernels take this form: chain_step at SIMD width compiles
    to vfmadd231ps followed by vandps, vpcmpltd and a masked vandps, three more
    instructions on the chain's critical path per fma (the fp32 micro-kernel is
    fma-bound: 2-3x slower); this form is the vfmadd231ps alone.

    Explicit-flush build (EXPLICIT_FLUSH, no DAZ: AArch64, or x86 built with
    -D MOJOLEARN_EXPLICIT_FLUSH=1): chain_step(ftz(a), ftz(b), acc), the flushes
    done here, so every caller (any operand layout, packed or not) stays right.
    Callers hold a and b in registers across their unrolled steps, so the compiler
    computes each operand's flush once per load, not once per fma."""
    comptime if EXPLICIT_FLUSH:
        return chain_step[w](_ftz[w](a), _ftz[w](b), acc)
    else:
        return fma(a, b, acc)


@always_inline
def serial_add_daz[w: Int](acc: SIMD[DType.float32, w], x: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    """One step of a serial sum acc = ftz(acc + x) (the models' row sums: softmax's
    denominator M-14, the mean M-30) for a caller under the contract floating-point
    state, the flush deferred to the value that leaves the registers: DAZ reads a
    subnormal acc as the zero of its sign, which the step's flush would have given,
    and FTZ off keeps every other result; the caller applies ftz once at the end
    (the same argument as chain_step_daz). One vaddps on the chain instead of four
    instructions.

    Explicit-flush build (EXPLICIT_FLUSH): ftz(acc + ftz(x)), the step itself (the
    final ftz of the caller is then a no-op)."""
    comptime if EXPLICIT_FLUSH:
        return _ftz[w](acc + _ftz[w](x))
    else:
        return acc + x


@always_inline
def tree_add[w: Int](a: SIMD[DType.float32, w], b: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    """Rule: 6.4
    One sum of the balanced pairwise tree over the leaf results: ftz(a + b). The
    tree sums adjacent pairs, carries an odd last element, and repeats; the
    streaming form (trailing_ones) merges leaf p with the levels given by the
    trailing one-bits of p, and after the last leaf folds the waiting levels from
    the lowest up (7 leaves: (p01 + p23) + (p45 + p6))."""
    return _ftz[w](a + b)


@always_inline
def tree_add_daz[w: Int](a: SIMD[DType.float32, w], b: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    """tree_add (rule 6.4) for a caller under the contract floating-point state (DAZ
    on, FTZ off), the flush deferred: a sum that waits in the tree is read next by
    another tree_add_daz, whose vaddps reads a subnormal as the zero of its sign (what
    the flush would have given), and the root gets ftz once before it is stored (the
    same argument as chain_step_daz and serial_add_daz). The caller must flush the
    root; leaves enter unflushed. One vaddps instead of four instructions, on the
    ports the next leaf's fmas need.

    Explicit-flush build (EXPLICIT_FLUSH): tree_add(ftz(a), ftz(b)), the flushes done
    here (the caller's final ftz is then a no-op)."""
    comptime if EXPLICIT_FLUSH:
        return tree_add[w](_ftz[w](a), _ftz[w](b))
    else:
        return a + b


@always_inline
def trailing_ones(x: Int) -> Int:
    """How many levels of the streaming tree leaf x merges before it waits."""
    var n = 0
    var v = x
    while v & 1:
        n += 1
        v >>= 1
    return n


@always_inline
def bit_length(x: Int) -> Int:
    """Levels of the streaming tree over x leaves."""
    var n = 0
    var v = x
    while v > 0:
        n += 1
        v >>= 1
    return n

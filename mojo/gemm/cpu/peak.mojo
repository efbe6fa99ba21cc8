"""The float32 FMA peak this CPU build can reach: the yardstick of the GEMMs' GFLOP/s.

Each task runs `iters` rounds of the fp32.v1 micro-kernel's instruction at its
register tile's size: MR * NV independent accumulators of W lanes, one vector fused
multiply-add each per round (arith.tree.chain_step_daz, the micro-kernel's step, here
as acc = fma(acc, x, y): the accumulator is the multiplicand, so its chain still
carries the dependency), with no memory operand, so the only limit is how many FMAs
the core retires per cycle. x and y come from the caller
at run time (the compiler can fold neither the multiply nor the add away), and every
accumulator reaches the returned checksum (no round can be dropped). With x = y = 1
each lane counts its rounds exactly while they stay below 2**24, which is what the
tests check; the timing runs use the same values (no subnormal, no infinity: the
count stops growing at 2**24 and the FMAs keep their cost).
"""
from std.collections import Array
from arith.tree import chain_step_daz
from gemm.cpu.blocking import MR, NV, W

comptime PEAK_ACC = MR * NV  # the micro-kernel's accumulators (blocking.MR x NV vectors)


def fma_rounds(iters: Int, x: Float32, y: Float32) -> Float32:
    """`iters` rounds of PEAK_ACC independent W-lane FMAs; the sum of every lane of
    every accumulator (2 * W * PEAK_ACC floating-point operations a round)."""
    var acc = Array[SIMD[DType.float32, W], PEAK_ACC](fill=SIMD[DType.float32, W](0))
    var xv = SIMD[DType.float32, W](x)
    var yv = SIMD[DType.float32, W](y)
    for _ in range(iters):
        comptime for q in range(PEAK_ACC):
            acc[q] = chain_step_daz[W](acc[q], xv, yv)
    var s = SIMD[DType.float32, W](0)
    comptime for q in range(PEAK_ACC):
        s += acc[q]
    return s.reduce_add()


"""fp32.v1 micro-kernel: one leaf of one MR x NR register tile (contract 6.3).

For every output of the tile: acc = +0; for kk ascending over the leaf:
acc = fma(a[i, kk], b[kk, j], acc) - a true fused multiply-add. The caller runs
with DAZ on and FTZ off: a subnormal accumulator is read back as the signed zero
the contract's per-step flush would give, so no per-step compare is needed; the
value leaving the registers is flushed explicitly by the epilogue.
Reads packed panels only (pack_f32.mojo); never allocates, never loops over blocks.
"""
from std.math import fma
from std.collections import Array
from common.ptr import F32Ptr
from gemm.cpu.blocking import MR, NR, NV, W

comptime Acc = Array[SIMD[DType.float32, W], MR * NV]


@always_inline
def ukernel_leaf(a: F32Ptr, b: F32Ptr, lk: Int, mut acc: Acc):
    comptime for q in range(MR * NV):
        acc[q] = SIMD[DType.float32, W](0)
    for kk in range(lk):
        var bv = Array[SIMD[DType.float32, W], NV](fill=SIMD[DType.float32, W](0))
        comptime for v in range(NV):
            bv[v] = b.unsafe_load[width=W](kk * NR + v * W)
        comptime for i in range(MR):
            var av = SIMD[DType.float32, W](a.unsafe_load(kk * MR + i))
            comptime for v in range(NV):
                acc[i * NV + v] = fma(av, bv[v], acc[i * NV + v])


def ukernel_leaf_reversed(a: F32Ptr, b: F32Ptr, lk: Int, mut acc: Acc):
    """SABOTAGE ONLY: the same leaf summed in descending kk order. The conformance
    run's --sabotage uses it to prove the checks notice a changed order."""
    comptime for q in range(MR * NV):
        acc[q] = SIMD[DType.float32, W](0)
    var kk = lk - 1
    while kk >= 0:
        comptime for i in range(MR):
            var av = SIMD[DType.float32, W](a.unsafe_load(kk * MR + i))
            comptime for v in range(NV):
                acc[i * NV + v] = fma(av, b.unsafe_load[width=W](kk * NR + v * W), acc[i * NV + v])
        kk -= 1

"""fp32.v1 micro-kernel: one leaf of one MR x NR register tile (contract 6.3).

For every output of the tile: acc = +0; for kk ascending over the leaf:
acc = chain_step_daz(a[i, kk], b[kk, j], acc) (arith.tree: rule 6.3's step under the
contract floating-point state, DAZ on and FTZ off, one true fused multiply-add; the
per-step flush is left to DAZ, and the value leaving the registers is flushed
explicitly by the epilogue; in the explicit-flush build the step flushes its operands
and its result itself).
Reads packed panels only (pack_f32.mojo); never allocates, never loops over blocks.
"""
from std.collections import Array
from arith.tree import chain_step_daz
from common.ptr import F32Ptr
from gemm.cpu.blocking import MR, NR, NV, W, KU
from std.sys.intrinsics import prefetch, PrefetchOptions

comptime Acc = Array[SIMD[DType.float32, W], MR * NV]

# cache lines prefetched per k-step when a leaf prefetches: every line of an NR-float
# step on AVX2 (24 floats there: one line a step left a third of the stream
# unfetched); NR // 16 elsewhere
comptime PF_LINES = (NR + 15) // 16 if W == 8 else NR // 16


@always_inline
def ukernel_leaf[R: Int = MR, PF: Int = 0](a: F32Ptr, b: F32Ptr, lk: Int, ldb: Int, mut acc: Acc):
    """a: MR values per kk; b: NR values per kk, rows ldb apart (NR when packed).
    Only the first R rows are computed (R < MR for short edge tiles); the others
    are left at +0 and never stored. The loop body is KU steps (blocking.KU), each
    output's chain still one fma per kk in ascending order. PF > 0: every step also
    prefetches the b stream PF floats ahead (a leaf with few rows is too short for the
    hardware prefetcher alone to keep memory busy); the arithmetic is the same."""
    comptime for q in range(MR * NV):
        acc[q] = SIMD[DType.float32, W](0)
    var kk = 0
    while kk + KU <= lk:
        comptime for u in range(KU):
            comptime if PF > 0:
                _pf_step[PF](b, kk + u, ldb)
            _step[R](a, b, kk + u, ldb, acc)
        kk += KU
    while kk < lk:
        comptime if PF > 0:
            _pf_step[PF](b, kk, ldb)
        _step[R](a, b, kk, ldb, acc)
        kk += 1


@always_inline
def _pf_step[PF: Int](b: F32Ptr, kk: Int, ldb: Int):
    comptime for l in range(PF_LINES):
        prefetch[PrefetchOptions().for_read().high_locality()](b.unsafe_offset(kk * ldb + PF + l * 16))


@always_inline
def _step[R: Int](a: F32Ptr, b: F32Ptr, kk: Int, ldb: Int, mut acc: Acc):
    """Step kk of the leaf for the first R rows of the tile (rule 6.3's order: the
    caller runs kk ascending, KU steps per loop iteration)."""
    var bv = Array[SIMD[DType.float32, W], NV](fill=SIMD[DType.float32, W](0))
    comptime for v in range(NV):
        bv[v] = b.unsafe_load[width=W](kk * ldb + v * W)
    comptime for i in range(R):
        var av = SIMD[DType.float32, W](a.unsafe_load(kk * MR + i))
        comptime for v in range(NV):
            acc[i * NV + v] = chain_step_daz[W](av, bv[v], acc[i * NV + v])


def ukernel_leaf_reversed(a: F32Ptr, b: F32Ptr, lk: Int, ldb: Int, mut acc: Acc):
    """SABOTAGE ONLY: the same leaf summed in descending kk order. The conformance
    run's --sabotage uses it to prove the checks notice a changed order."""
    comptime for q in range(MR * NV):
        acc[q] = SIMD[DType.float32, W](0)
    var kk = lk - 1
    while kk >= 0:
        comptime for i in range(MR):
            var av = SIMD[DType.float32, W](a.unsafe_load(kk * MR + i))
            comptime for v in range(NV):
                acc[i * NV + v] = chain_step_daz[W](av, b.unsafe_load[width=W](kk * ldb + v * W), acc[i * NV + v])
        kk -= 1


@always_inline
def ukernel_rows(a: F32Ptr, b: F32Ptr, lk: Int, ldb: Int, rows: Int, mut acc: Acc):
    """The micro-kernel for a tile with `rows` valid rows (no wasted FMAs on tiny m)."""
    if rows >= MR:
        ukernel_leaf[MR](a, b, lk, ldb, acc)
    elif rows == 1:
        ukernel_leaf[1](a, b, lk, ldb, acc)
    elif rows == 2:
        ukernel_leaf[2](a, b, lk, ldb, acc)
    elif rows <= 4:
        ukernel_leaf[min(4, MR)](a, b, lk, ldb, acc)
    elif rows <= 6:
        ukernel_leaf[min(6, MR)](a, b, lk, ldb, acc)
    else:
        ukernel_leaf[MR](a, b, lk, ldb, acc)

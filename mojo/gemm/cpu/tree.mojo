"""Leaf combination for fp32.v1 (contract 6.4; its step is arith.tree.tree_add, taken
here in its form under DAZ, tree_add_daz).

Leaves are merged as they complete with a binary-counter stack (one slot per
level): leaf p first merges with the levels given by the trailing one-bits of p,
then lands on the next level; after the last leaf the occupied levels are folded
from the lowest (most recent) upward. This is exactly the balanced pairwise tree
with an odd last element carried, e.g. 7 leaves: (p01 + p23) + (p45 + p6). Every
sum is flushed (subnormal -> zero of the same sign): under the contract
floating-point state by the DAZ read of the next sum and one ftz of the root
(arith.tree.tree_add_daz), in the explicit-flush build at every step.
"""
from common.ptr import F32Ptr
from gemm.cpu.blocking import MR, NR, NV, W
from arith.fp import ftz
from arith.tree import tree_add_daz, trailing_ones
from gemm.cpu.ukernel_f32 import Acc


@always_inline
def finish_tile(
    mut acc: Acc, p: Int, nleaves: Int, levels: Int,
    slots: F32Ptr, level_stride: Int, tile_off: Int,
    c: F32Ptr, ldc: Int, mr: Int, nr: Int,
):
    """Merge leaf p of this tile (acc, unflushed) into the stack; after the last leaf
    write C[mr, nr] (the root, flushed)."""
    var t = trailing_ones(p)
    for lvl in range(t):
        var s = slots.unsafe_offset(lvl * level_stride + tile_off)
        comptime for q in range(MR * NV):
            acc[q] = tree_add_daz[W](s.unsafe_load[width=W](q * W), acc[q])
    if p == nleaves - 1:
        for lvl in range(t + 1, levels):
            if (nleaves >> lvl) & 1:
                var s = slots.unsafe_offset(lvl * level_stride + tile_off)
                comptime for q in range(MR * NV):
                    acc[q] = tree_add_daz[W](s.unsafe_load[width=W](q * W), acc[q])
        comptime for q in range(MR * NV):
            acc[q] = ftz(acc[q])
        store_tile(acc, c, ldc, mr, nr)
    else:
        var s = slots.unsafe_offset(t * level_stride + tile_off)
        comptime for q in range(MR * NV):
            s.unsafe_store(q * W, acc[q])


@always_inline
def store_tile(acc: Acc, c: F32Ptr, ldc: Int, mr: Int, nr: Int):
    if mr == MR and nr == NR:
        comptime for i in range(MR):
            comptime for v in range(NV):
                c.unsafe_store(i * ldc + v * W, acc[i * NV + v])
    else:
        # rows indexed at compile time: a run-time index into acc would keep the
        # accumulators in memory, and the micro-kernel loop would store them every step
        comptime for i in range(MR):
            if i < mr:
                comptime for v in range(NV):
                    var x = acc[i * NV + v]
                    for l in range(W):
                        if v * W + l < nr:
                            c.unsafe_store(i * ldc + v * W + l, x[l])

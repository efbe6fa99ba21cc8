"""Block sizes of the CPU GEMMs, in one place (BLIS names).

MR x NR is the register tile, KC is the fp32.v1 leaf (the contract fixes it as
arith.tree.leaf_size, rule 6.2, so the cache block over k IS the leaf), MC rows of A
are packed per block, and NC columns of B are packed per chunk, bounded so the
packed B chunk stays within PACK_B_BYTES.
"""
from std.sys import simd_width_of

comptime W = simd_width_of[DType.float32]()
comptime NV = 2
comptime NR = NV * W
comptime MR = 12 if W >= 16 else 6
comptime MC = 12 * MR
comptime NCS = 512
comptime PACK_B_BYTES = 16 * 1024 * 1024


@always_inline
def round_up(x: Int, m: Int) -> Int:
    return (x + m - 1) // m * m

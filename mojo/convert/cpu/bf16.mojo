"""float32 <-> bf16 bits on the CPU (contract rules L-1 widen, L-2 narrow).

The arithmetic is arith.bf16 (narrow_bits, widen_bits); this file lays out the loops:
one contiguous chunk per task, SIMD width then a scalar tail. Pure integer
arithmetic; the floating-point state does not matter here. Called by the entries
in mojo/_native.mojo (to_bf16, from_bf16).
"""
from std.sys import simd_width_of
from common.ptr import U32Ptr, U16Ptr
from arith.bf16 import narrow_bits, widen_bits

comptime W = simd_width_of[DType.uint32]()


def narrow_chunk(src: U32Ptr, dst: U16Ptr, start: Int, end: Int):
    var i = start
    while i + W <= end:
        dst.unsafe_store(i, narrow_bits[W](src.unsafe_load[width=W](i)))
        i += W
    while i < end:
        dst.unsafe_store(i, narrow_bits[1](src.unsafe_load[width=1](i)))
        i += 1


def widen_chunk(src: U16Ptr, dst: U32Ptr, start: Int, end: Int):
    var i = start
    while i + W <= end:
        dst.unsafe_store(i, widen_bits[W](src.unsafe_load[width=W](i)))
        i += W
    while i < end:
        dst.unsafe_store(i, widen_bits[1](src.unsafe_load[width=1](i)))
        i += 1

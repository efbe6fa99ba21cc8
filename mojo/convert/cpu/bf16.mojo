"""float32 <-> bf16 bits on the CPU (contract rules L-1 widen, L-2 narrow).

narrow: DAZ, then NaN -> (b >> 16) | 0x0040, else round to nearest even on the bits
        (b + 0x7FFF + ((b >> 16) & 1)) >> 16 (overflow rounds to inf).
widen:  bits << 16, exactly, no flush.
Pure integer SIMD; the floating-point state does not matter here. Called by the
entries in mojo/_native.mojo (to_bf16, from_bf16), one contiguous chunk per task.
"""
from std.sys import simd_width_of
from common.ptr import U32Ptr, U16Ptr

comptime W = simd_width_of[DType.uint32]()


@always_inline
def narrow_bits[w: Int](b: SIMD[DType.uint32, w]) -> SIMD[DType.uint16, w]:
    var mag = b & 0x7FFFFFFF
    var sub = mag.lt(0x00800000)
    # DAZ: a subnormal becomes a zero of the same sign.
    var x = sub.select(b & 0x80000000, b)
    var rounded = (x + 0x7FFF + ((x >> 16) & 1)) >> 16
    var quiet = (x >> 16) | 0x0040
    var is_nan = mag.gt(0x7F800000)
    return is_nan.select(quiet, rounded).cast[DType.uint16]()


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
        dst.unsafe_store(i, src.unsafe_load[width=W](i).cast[DType.uint32]() << 16)
        i += W
    while i < end:
        dst.unsafe_store(i, src.unsafe_load[width=1](i).cast[DType.uint32]() << 16)
        i += 1

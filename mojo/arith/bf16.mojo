"""bf16 <-> float32 on the bits (contract rules L-1 widen, L-2 narrow).

Pure integer arithmetic, width-generic: the converters and the GEMM packing call it
at SIMD width, the GPU thread bodies at width 1.
"""
from std.memory import bitcast
from arith.fp import daz_bits, is_nan_bits


@always_inline
def widen_bits[w: Int](h: SIMD[DType.uint16, w]) -> SIMD[DType.uint32, w]:
    """Rule: L-1
    bf16 bits -> float32 bits: bits << 16, exactly, no flush (a GEMM operand is
    DAZ'd afterwards by rule 6.1, like any float32 operand)."""
    return h.cast[DType.uint32]() << 16


@always_inline
def widen[w: Int](h: SIMD[DType.uint16, w]) -> SIMD[DType.float32, w]:
    """L-1 as a float32 value."""
    return bitcast[DType.float32, w](widen_bits[w](h))


@always_inline
def narrow_bits[w: Int](b: SIMD[DType.uint32, w]) -> SIMD[DType.uint16, w]:
    """Rule: L-2
    float32 bits -> bf16 bits: DAZ first; NaN becomes (b >> 16) | 0x0040 (quieted,
    top payload bits kept); else round to nearest even on the bits,
    (b + 0x7FFF + ((b >> 16) & 1)) >> 16 (overflow rounds to inf)."""
    var x = daz_bits[w](b)
    var rounded = (x + 0x7FFF + ((x >> 16) & 1)) >> 16
    var quiet = (x >> 16) | 0x0040
    return is_nan_bits[w](b).select(quiet, rounded).cast[DType.uint16]()

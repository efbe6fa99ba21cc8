"""Per-element arithmetic of the converters for one GPU thread (bf16 L-1 / L-2,
quantize L-3 / L-4 / W-1 / W-2, dequantize L-6 / W-3), shared by the GPU kernels and
the CPU run of those kernels (cpu_run.mojo). Thin width-1 adapters of the arithmetic
layer (mojo/arith/); no rule is written here.
"""
from common.ptr import U32Ptr
from arith.fp import pow2f
from arith.bf16 import narrow_bits, widen_bits
from arith.quant import (
    absmax_step as _absmax_step, exponent_of as _exponent_of, codes, split15 as _split15,
    scale_pow2, row_exponent_strided, INT8_SHIFT, INT15_SHIFT, INT8_CMAX, INT15_CMAX,
)
from arith.quant import quant_scale as _quant_scale


# ------------------------------------------------------------------ bf16
@always_inline
def narrow_bf16(bits: UInt32) -> UInt16:
    """L-2: float32 bits -> bf16 bits."""
    return narrow_bits[1](bits)[0]


@always_inline
def widen_bf16(bits: UInt16) -> UInt32:
    """L-1: bf16 bits -> float32 bits."""
    return widen_bits[1](bits)[0]


# ------------------------------------------------------------------ quantization
@always_inline
def absmax_step(best: UInt32, bits: UInt32) -> UInt32:
    return _absmax_step[1](best, bits)[0]


@always_inline
def exponent_of(absmax_bits: UInt32, shift: Int) -> Int32:
    return Int32(_exponent_of(absmax_bits, shift))


@always_inline
def row_exponent(src: U32Ptr, k: Int, shift: Int) -> Int32:
    """The exponent of one row of k float32 values (as bits), one value at a time."""
    return Int32(row_exponent_strided(src, k, 1, shift))


@always_inline
def quant_scale(e: Int32) -> Float32:
    return _quant_scale(Int(e))


@always_inline
def quant_code[cmax: Int](bits: UInt32, scale: Float32) -> Int32:
    return codes[1, cmax](SIMD[DType.uint32, 1](bits), scale)[0]


@always_inline
def split15(code: Int32) -> Tuple[Int8, Int8]:
    var p = _split15[1](code)
    return (p[0][0], p[1][0])


@always_inline
def dequant(code: Int32, e: Int32) -> Float32:
    """L-6 / W-3: ftz(f32(code) * pow2f(e))."""
    return scale_pow2[1](code.cast[DType.float32](), pow2f(Int(e)))[0]

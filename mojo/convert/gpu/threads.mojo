"""What ONE GPU thread of a converter computes, given its coordinates.

The device kernels (kernels.mojo) only turn block/thread indices into these
coordinates, check the bounds and call a body below; the CPU run (cpu_run.mojo)
calls the very same bodies in plain loops over the same coordinates, pass by
pass, with the same buffers. So a test of the CPU run is a test of the kernels'
arithmetic, not of a look-alike. Arguments are the kernels' own (Int32 / Int64
sizes widened to Int here).
"""
from common.ptr import F32Ptr, U16Ptr, U32Ptr, I8Ptr, I32Ptr
from convert.gpu.arith import (
    narrow_bf16,
    widen_bf16,
    row_exponent,
    quant_scale,
    quant_code,
    split15,
    dequant,
    INT8_CMAX,
    INT15_CMAX,
)
from arith.quant import join15


# ------------------------------------------------------------------ converters
@always_inline
def to_bf16_thread(src: U32Ptr, dst: U16Ptr, i: Int):
    dst.unsafe_store(i, narrow_bf16(src.unsafe_load(i)))


@always_inline
def from_bf16_thread(src: U16Ptr, dst: U32Ptr, i: Int):
    dst.unsafe_store(i, widen_bf16(src.unsafe_load(i)))


@always_inline
def row_exponent_thread(src: U32Ptr, exps: I32Ptr, k: Int, shift: Int, r: Int):
    exps.unsafe_store(r, row_exponent(src.unsafe_offset(r * k), k, shift))


@always_inline
def quantize_int8_thread(src: U32Ptr, exps: I32Ptr, codes: I8Ptr, k: Int, i: Int):
    var scale = quant_scale(exps.unsafe_load(i // k))
    codes.unsafe_store(i, Int8(quant_code[INT8_CMAX](src.unsafe_load(i), scale)))


@always_inline
def quantize_int15_thread(src: U32Ptr, exps: I32Ptr, hi: I8Ptr, lo: I8Ptr, k: Int, i: Int):
    var scale = quant_scale(exps.unsafe_load(i // k))
    var hl = split15(quant_code[INT15_CMAX](src.unsafe_load(i), scale))
    hi.unsafe_store(i, hl[0])
    lo.unsafe_store(i, hl[1])


@always_inline
def dequantize_int8_thread(codes: I8Ptr, exps: I32Ptr, dst: F32Ptr, k: Int, i: Int):
    dst.unsafe_store(i, dequant(Int32(codes.unsafe_load(i)), exps.unsafe_load(i // k)))


@always_inline
def dequantize_int15_thread(hi: I8Ptr, lo: I8Ptr, exps: I32Ptr, dst: F32Ptr, k: Int, i: Int):
    dst.unsafe_store(i, dequant(join15[1](hi.unsafe_load(i), lo.unsafe_load(i))[0], exps.unsafe_load(i // k)))

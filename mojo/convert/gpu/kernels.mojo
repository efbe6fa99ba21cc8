"""The converters' device kernels: grid-stride loops, any size, each thread calling
its body in convert/gpu/threads.mojo, the same body the CPU run
(convert/gpu/cpu_run.mojo) calls.

    to_bf16_kernel, from_bf16_kernel            one thread per element
    row_exponent_kernel                         one thread per row (shift 6 / 13)
    quantize_int8_kernel, quantize_int15_kernel one thread per element, exps given
    dequantize_int8_kernel, dequantize_int15_kernel  one thread per element

Launched by convert/gpu/launch.mojo. Sizes arrive as Int32 / Int64 (kernel
arguments must be device-passable); index arithmetic is done in Int (64-bit).
"""
from common.ptr import F32Ptr, U16Ptr, U32Ptr, I8Ptr, I32Ptr
from common.gpu import gid_x, stride_x
from convert.gpu.threads import (
    to_bf16_thread,
    from_bf16_thread,
    row_exponent_thread,
    quantize_int8_thread,
    quantize_int15_thread,
    dequantize_int8_thread,
    dequantize_int15_thread,
)


# ------------------------------------------------------------------ converters
def to_bf16_kernel(src: U32Ptr, dst: U16Ptr, n: Int64):
    var i = gid_x()
    while i < Int(n):
        to_bf16_thread(src, dst, i)
        i += stride_x()


def from_bf16_kernel(src: U16Ptr, dst: U32Ptr, n: Int64):
    var i = gid_x()
    while i < Int(n):
        from_bf16_thread(src, dst, i)
        i += stride_x()


def row_exponent_kernel(src: U32Ptr, exps: I32Ptr, m: Int32, k: Int32, shift: Int32):
    """exps[r] of each row r of the (m, k) float32 bits (shift 6 int8, 13 int15)."""
    var r = gid_x()
    while r < Int(m):
        row_exponent_thread(src, exps, Int(k), Int(shift), r)
        r += stride_x()


def quantize_int8_kernel(src: U32Ptr, exps: I32Ptr, codes: I8Ptr, m: Int32, k: Int32):
    var i = gid_x()
    var total = Int(m) * Int(k)
    while i < total:
        quantize_int8_thread(src, exps, codes, Int(k), i)
        i += stride_x()


def quantize_int15_kernel(src: U32Ptr, exps: I32Ptr, hi: I8Ptr, lo: I8Ptr, m: Int32, k: Int32):
    var i = gid_x()
    var total = Int(m) * Int(k)
    while i < total:
        quantize_int15_thread(src, exps, hi, lo, Int(k), i)
        i += stride_x()


def dequantize_int8_kernel(codes: I8Ptr, exps: I32Ptr, dst: F32Ptr, m: Int32, k: Int32):
    var i = gid_x()
    var total = Int(m) * Int(k)
    while i < total:
        dequantize_int8_thread(codes, exps, dst, Int(k), i)
        i += stride_x()


def dequantize_int15_kernel(hi: I8Ptr, lo: I8Ptr, exps: I32Ptr, dst: F32Ptr, m: Int32, k: Int32):
    var i = gid_x()
    var total = Int(m) * Int(k)
    while i < total:
        dequantize_int15_thread(hi, lo, exps, dst, Int(k), i)
        i += stride_x()

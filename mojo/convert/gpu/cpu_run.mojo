"""Test support: the converters' GPU kernels run on the CPU, the gpu_ref_* converter
entries of the CPU extension (the same per-thread bodies, convert/gpu/threads.mojo,
in plain loops shaped like convert/gpu/launch.mojo; the quantizers' row-exponent
pass runs before the per-element codes), under the GPU's IEEE mode (DAZ off).

ENTRIES (one tuple of ints each; Python has validated every argument)
    gpu_ref_to_bf16((src, dst, n))          gpu_ref_from_bf16((src, dst, n))
    gpu_ref_quantize_int8((src, codes, exps, m, k))
    gpu_ref_quantize_int15((src, hi, lo, exps, m, k))
    gpu_ref_dequantize_int8((codes, exps, dst, m, k))
    gpu_ref_dequantize_int15((hi, lo, exps, dst, m, k))
"""
from std.python import PythonObject
from std.python.bindings import PythonModuleBuilder
from common.ptr import F32Ptr, ptr_f32, ptr_u16, ptr_u32, ptr_i8, ptr_i32
from common.fpstate import enter_ieee_mode, leave_ieee_mode
from convert.gpu.arith import INT8_SHIFT, INT15_SHIFT
from convert.gpu.threads import (
    to_bf16_thread,
    from_bf16_thread,
    row_exponent_thread,
    quantize_int8_thread,
    quantize_int15_thread,
    dequantize_int8_thread,
    dequantize_int15_thread,
)


def _arg(args: PythonObject, i: Int) raises -> Int:
    return Int(py=args[i])


def gpu_ref_to_bf16(args: PythonObject) raises -> PythonObject:
    var src = ptr_u32(_arg(args, 0))
    var dst = ptr_u16(_arg(args, 1))
    for i in range(_arg(args, 2)):
        to_bf16_thread(src, dst, i)
    return PythonObject(None)


def gpu_ref_from_bf16(args: PythonObject) raises -> PythonObject:
    var src = ptr_u16(_arg(args, 0))
    var dst = ptr_u32(_arg(args, 1))
    for i in range(_arg(args, 2)):
        from_bf16_thread(src, dst, i)
    return PythonObject(None)


def gpu_ref_quantize_int8(args: PythonObject) raises -> PythonObject:
    var src = ptr_u32(_arg(args, 0))
    var codes = ptr_i8(_arg(args, 1))
    var exps = ptr_i32(_arg(args, 2))
    var m = _arg(args, 3)
    var k = _arg(args, 4)
    var old = enter_ieee_mode()
    for r in range(m):
        row_exponent_thread(src, exps, k, INT8_SHIFT, r)
    for i in range(m * k):
        quantize_int8_thread(src, exps, codes, k, i)
    leave_ieee_mode(old)
    return PythonObject(None)


def gpu_ref_quantize_int15(args: PythonObject) raises -> PythonObject:
    var src = ptr_u32(_arg(args, 0))
    var hi = ptr_i8(_arg(args, 1))
    var lo = ptr_i8(_arg(args, 2))
    var exps = ptr_i32(_arg(args, 3))
    var m = _arg(args, 4)
    var k = _arg(args, 5)
    var old = enter_ieee_mode()
    for r in range(m):
        row_exponent_thread(src, exps, k, INT15_SHIFT, r)
    for i in range(m * k):
        quantize_int15_thread(src, exps, hi, lo, k, i)
    leave_ieee_mode(old)
    return PythonObject(None)


def gpu_ref_dequantize_int8(args: PythonObject) raises -> PythonObject:
    var codes = ptr_i8(_arg(args, 0))
    var exps = ptr_i32(_arg(args, 1))
    var dst = ptr_f32(_arg(args, 2))
    var m = _arg(args, 3)
    var k = _arg(args, 4)
    var old = enter_ieee_mode()
    for i in range(m * k):
        dequantize_int8_thread(codes, exps, dst, k, i)
    leave_ieee_mode(old)
    return PythonObject(None)


def gpu_ref_dequantize_int15(args: PythonObject) raises -> PythonObject:
    var hi = ptr_i8(_arg(args, 0))
    var lo = ptr_i8(_arg(args, 1))
    var exps = ptr_i32(_arg(args, 2))
    var dst = ptr_f32(_arg(args, 3))
    var m = _arg(args, 4)
    var k = _arg(args, 5)
    var old = enter_ieee_mode()
    for i in range(m * k):
        dequantize_int15_thread(hi, lo, exps, dst, k, i)
    leave_ieee_mode(old)
    return PythonObject(None)


def register_convert_gpu_reference(mut m: PythonModuleBuilder) raises:
    """Add the converters' gpu_ref_* entries to the CPU extension module."""
    m.def_function[gpu_ref_to_bf16]("gpu_ref_to_bf16")
    m.def_function[gpu_ref_from_bf16]("gpu_ref_from_bf16")
    m.def_function[gpu_ref_quantize_int8]("gpu_ref_quantize_int8")
    m.def_function[gpu_ref_quantize_int15]("gpu_ref_quantize_int15")
    m.def_function[gpu_ref_dequantize_int8]("gpu_ref_dequantize_int8")
    m.def_function[gpu_ref_dequantize_int15]("gpu_ref_dequantize_int15")

"""Host side of the converters' GPU kernels: device buffers, launches, copies.

Each function takes host addresses (the Python layer has validated every
argument), copies the inputs to the device, runs the launches of kernels.mojo and
copies the result back before returning (synchronous): quantize is the
row-exponent launch, then the per-element codes launch; the others one
element-wise launch. Used by mojo/_native_gpu.mojo; cpu_run.mojo mirrors it.
"""
from max.gpu.host import DeviceContext
from common.ptr import F32Ptr, U16Ptr, U32Ptr, I8Ptr, I32Ptr
from common.gpu import B1, blocks_1d, host_ptr
from convert.gpu.arith import INT8_SHIFT, INT15_SHIFT
from convert.gpu.kernels import (
    to_bf16_kernel,
    from_bf16_kernel,
    row_exponent_kernel,
    quantize_int8_kernel,
    quantize_int15_kernel,
    dequantize_int8_kernel,
    dequantize_int15_kernel,
)


# ------------------------------------------------------------------ converters
def to_bf16(ctx: DeviceContext, src_addr: Int, dst_addr: Int, n: Int) raises:
    if n == 0:
        return
    var ds = ctx.enqueue_create_buffer[DType.uint32](n)
    var dd = ctx.enqueue_create_buffer[DType.uint16](n)
    ctx.enqueue_copy(ds, host_ptr[DType.uint32](src_addr))
    ctx.enqueue_function[to_bf16_kernel](
        ds.unsafe_ptr(), dd.unsafe_ptr(), Int64(n), grid_dim=blocks_1d(n), block_dim=B1
    )
    ctx.enqueue_copy(host_ptr[DType.uint16](dst_addr), dd)
    ctx.synchronize()


def from_bf16(ctx: DeviceContext, src_addr: Int, dst_addr: Int, n: Int) raises:
    if n == 0:
        return
    var ds = ctx.enqueue_create_buffer[DType.uint16](n)
    var dd = ctx.enqueue_create_buffer[DType.uint32](n)
    ctx.enqueue_copy(ds, host_ptr[DType.uint16](src_addr))
    ctx.enqueue_function[from_bf16_kernel](
        ds.unsafe_ptr(), dd.unsafe_ptr(), Int64(n), grid_dim=blocks_1d(n), block_dim=B1
    )
    ctx.enqueue_copy(host_ptr[DType.uint32](dst_addr), dd)
    ctx.synchronize()


def quantize_int8(ctx: DeviceContext, src_addr: Int, codes_addr: Int, exps_addr: Int, m: Int, k: Int) raises:
    if m == 0:
        return
    var ds = ctx.enqueue_create_buffer[DType.uint32](max(1, m * k))
    var dc = ctx.enqueue_create_buffer[DType.int8](max(1, m * k))
    var de = ctx.enqueue_create_buffer[DType.int32](m)
    if k > 0:
        ctx.enqueue_copy(ds, host_ptr[DType.uint32](src_addr))
    ctx.enqueue_function[row_exponent_kernel](
        ds.unsafe_ptr(), de.unsafe_ptr(), Int32(m), Int32(k), Int32(INT8_SHIFT),
        grid_dim=blocks_1d(m), block_dim=B1,
    )
    ctx.enqueue_function[quantize_int8_kernel](
        ds.unsafe_ptr(), de.unsafe_ptr(), dc.unsafe_ptr(), Int32(m), Int32(k),
        grid_dim=blocks_1d(m * k), block_dim=B1,
    )
    if k > 0:
        ctx.enqueue_copy(host_ptr[DType.int8](codes_addr), dc)
    ctx.enqueue_copy(host_ptr[DType.int32](exps_addr), de)
    ctx.synchronize()


def quantize_int15(
    ctx: DeviceContext, src_addr: Int, hi_addr: Int, lo_addr: Int, exps_addr: Int, m: Int, k: Int
) raises:
    if m == 0:
        return
    var ds = ctx.enqueue_create_buffer[DType.uint32](max(1, m * k))
    var dh = ctx.enqueue_create_buffer[DType.int8](max(1, m * k))
    var dl = ctx.enqueue_create_buffer[DType.int8](max(1, m * k))
    var de = ctx.enqueue_create_buffer[DType.int32](m)
    if k > 0:
        ctx.enqueue_copy(ds, host_ptr[DType.uint32](src_addr))
    ctx.enqueue_function[row_exponent_kernel](
        ds.unsafe_ptr(), de.unsafe_ptr(), Int32(m), Int32(k), Int32(INT15_SHIFT),
        grid_dim=blocks_1d(m), block_dim=B1,
    )
    ctx.enqueue_function[quantize_int15_kernel](
        ds.unsafe_ptr(), de.unsafe_ptr(), dh.unsafe_ptr(), dl.unsafe_ptr(), Int32(m), Int32(k),
        grid_dim=blocks_1d(m * k), block_dim=B1,
    )
    if k > 0:
        ctx.enqueue_copy(host_ptr[DType.int8](hi_addr), dh)
        ctx.enqueue_copy(host_ptr[DType.int8](lo_addr), dl)
    ctx.enqueue_copy(host_ptr[DType.int32](exps_addr), de)
    ctx.synchronize()


def dequantize_int8(ctx: DeviceContext, codes_addr: Int, exps_addr: Int, dst_addr: Int, m: Int, k: Int) raises:
    if m == 0 or k == 0:
        return
    var dc = ctx.enqueue_create_buffer[DType.int8](m * k)
    var de = ctx.enqueue_create_buffer[DType.int32](m)
    var dd = ctx.enqueue_create_buffer[DType.float32](m * k)
    ctx.enqueue_copy(dc, host_ptr[DType.int8](codes_addr))
    ctx.enqueue_copy(de, host_ptr[DType.int32](exps_addr))
    ctx.enqueue_function[dequantize_int8_kernel](
        dc.unsafe_ptr(), de.unsafe_ptr(), dd.unsafe_ptr(), Int32(m), Int32(k),
        grid_dim=blocks_1d(m * k), block_dim=B1,
    )
    ctx.enqueue_copy(host_ptr[DType.float32](dst_addr), dd)
    ctx.synchronize()


def dequantize_int15(
    ctx: DeviceContext, hi_addr: Int, lo_addr: Int, exps_addr: Int, dst_addr: Int, m: Int, k: Int
) raises:
    if m == 0 or k == 0:
        return
    var dh = ctx.enqueue_create_buffer[DType.int8](m * k)
    var dl = ctx.enqueue_create_buffer[DType.int8](m * k)
    var de = ctx.enqueue_create_buffer[DType.int32](m)
    var dd = ctx.enqueue_create_buffer[DType.float32](m * k)
    ctx.enqueue_copy(dh, host_ptr[DType.int8](hi_addr))
    ctx.enqueue_copy(dl, host_ptr[DType.int8](lo_addr))
    ctx.enqueue_copy(de, host_ptr[DType.int32](exps_addr))
    ctx.enqueue_function[dequantize_int15_kernel](
        dh.unsafe_ptr(), dl.unsafe_ptr(), de.unsafe_ptr(), dd.unsafe_ptr(), Int32(m), Int32(k),
        grid_dim=blocks_1d(m * k), block_dim=B1,
    )
    ctx.enqueue_copy(host_ptr[DType.float32](dst_addr), dd)
    ctx.synchronize()

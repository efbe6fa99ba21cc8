"""Host side of the GPU kernels: device buffers, launch shapes, copies.

Each function takes host addresses (the Python layer has validated every
argument), copies the inputs to the device, runs the launches of kernels.mojo
and copies the result back before returning (synchronous). The launch
structure is the one cpu_run.mojo mirrors on the CPU:

    fp32.v1     leaves launch into parts[leaf][i][j] (the register-tiled kernel
                when use_tiled(rows, n)), then the tree launch into C; rows are
                taken in chunks so parts stays under PARTS_BYTES
    int8/int15  one launch, one thread per output (row chunks of at most
                MAX_GRID_Y * BY rows)
    quantize    row-exponent launch, then the per-element codes launch
    others      one element-wise launch

Used by mojo/_native_gpu.mojo. Nothing here changes a bit of any result: chunk
and grid sizes only decide which thread computes which output.
"""
from max.gpu.host import DeviceContext
from common.ptr import F32Ptr, U16Ptr, U32Ptr, I8Ptr, I32Ptr
from arith.tree import leaf_size
from gpu.arith import a_strides, b_strides, leaves_of, INT8_SHIFT, INT15_SHIFT
from gpu.threads import BX, BY, TM, TN, B1, use_tiled
from gpu.kernels import (
    f32_leaves_tiled_kernel,
    f32_leaves_kernel,
    f32_tree_kernel,
    int8_gemm_kernel,
    int15_gemm_kernel,
    to_bf16_kernel,
    from_bf16_kernel,
    row_exponent_kernel,
    quantize_int8_kernel,
    quantize_int15_kernel,
    dequantize_int8_kernel,
    dequantize_int15_kernel,
)

comptime PARTS_BYTES = 1 << 30
comptime MAX_GRID_Y = 65535
comptime MAX_BLOCKS_1D = 1 << 20


@always_inline
def _cdiv(a: Int, b: Int) -> Int:
    return (a + b - 1) // b


def _blocks_1d(n: Int) -> Int:
    return max(1, min(_cdiv(n, B1), MAX_BLOCKS_1D))


def _host[dt: DType](addr: Int) -> Pointer[Scalar[dt], MutAnyOrigin]:
    return Pointer[Scalar[dt], MutAnyOrigin](unsafe_from_address=addr)


# ------------------------------------------------------------------ fp32.v1 / bf16f32.v1
def _gemm_f32[adt: DType, bdt: DType](
    ctx: DeviceContext, a_addr: Int, b_addr: Int, c_addr: Int,
    m: Int, n: Int, k: Int, trans_a: Bool, trans_b: Bool,
) raises:
    var leaf = leaf_size(k)
    var nleaves = leaves_of(k)
    var sa = a_strides(m, k, trans_a)
    var sb = b_strides(n, k, trans_b)
    var da = ctx.enqueue_create_buffer[adt](max(1, m * k))
    var db = ctx.enqueue_create_buffer[bdt](max(1, n * k))
    var dc = ctx.enqueue_create_buffer[DType.float32](m * n)
    if k > 0:
        ctx.enqueue_copy(da, _host[adt](a_addr))
        ctx.enqueue_copy(db, _host[bdt](b_addr))
    var rows = max(1, min(m, PARTS_BYTES // max(1, nleaves * n * 4), MAX_GRID_Y * BY))
    var dp = ctx.enqueue_create_buffer[DType.float32](max(1, nleaves * rows * n))
    var i0 = 0
    while i0 < m:
        var mr = min(rows, m - i0)
        var pa = da.unsafe_ptr().unsafe_offset(i0 * sa[0])
        var pc = dc.unsafe_ptr().unsafe_offset(i0 * n)
        if nleaves > 0 and use_tiled(mr, n):
            ctx.enqueue_function[f32_leaves_tiled_kernel[adt, bdt]](
                pa, db.unsafe_ptr(), dp.unsafe_ptr(),
                Int32(mr), Int32(n), Int32(k),
                Int64(sa[0]), Int64(sa[1]), Int64(sb[0]), Int64(sb[1]), Int32(leaf),
                grid_dim=(_cdiv(n, BX * TN), _cdiv(mr, BY * TM), nleaves), block_dim=(BX, BY),
            )
        elif nleaves > 0:
            ctx.enqueue_function[f32_leaves_kernel[adt, bdt]](
                pa, db.unsafe_ptr(), dp.unsafe_ptr(),
                Int32(mr), Int32(n), Int32(k),
                Int64(sa[0]), Int64(sa[1]), Int64(sb[0]), Int64(sb[1]), Int32(leaf),
                grid_dim=(_cdiv(n, BX), _cdiv(mr, BY), nleaves), block_dim=(BX, BY),
            )
        ctx.enqueue_function[f32_tree_kernel](
            dp.unsafe_ptr(), pc, Int32(mr), Int32(n), Int32(nleaves),
            grid_dim=(_cdiv(n, BX), _cdiv(mr, BY)), block_dim=(BX, BY),
        )
        i0 += mr
    ctx.enqueue_copy(_host[DType.float32](c_addr), dc)
    ctx.synchronize()


def gemm_f32(
    ctx: DeviceContext, a_addr: Int, b_addr: Int, c_addr: Int, m: Int, n: Int, k: Int,
    trans_a: Bool, trans_b: Bool, a_bf16: Bool, b_bf16: Bool,
) raises:
    """C (m, n) = fp32.v1 product; a (m, k) or (k, m) if trans_a, b (k, n) or (n, k)
    if trans_b; an operand flagged bf16 is uint16 bits."""
    if m == 0 or n == 0:
        return
    comptime F = DType.float32
    comptime H = DType.uint16
    if a_bf16 and b_bf16:
        _gemm_f32[H, H](ctx, a_addr, b_addr, c_addr, m, n, k, trans_a, trans_b)
    elif a_bf16:
        _gemm_f32[H, F](ctx, a_addr, b_addr, c_addr, m, n, k, trans_a, trans_b)
    elif b_bf16:
        _gemm_f32[F, H](ctx, a_addr, b_addr, c_addr, m, n, k, trans_a, trans_b)
    else:
        _gemm_f32[F, F](ctx, a_addr, b_addr, c_addr, m, n, k, trans_a, trans_b)


# ------------------------------------------------------------------ integer GEMMs
def gemm_int8(
    ctx: DeviceContext, a_addr: Int, ea_addr: Int, b_addr: Int, eb_addr: Int, c_addr: Int,
    m: Int, n: Int, k: Int,
) raises:
    """C = int8i32.v1 of a (m, k) and b (n, k) codes with exponents ea (m,), eb (n,)."""
    if m == 0 or n == 0:
        return
    var da = ctx.enqueue_create_buffer[DType.int8](max(1, m * k))
    var db = ctx.enqueue_create_buffer[DType.int8](max(1, n * k))
    var dea = ctx.enqueue_create_buffer[DType.int32](m)
    var deb = ctx.enqueue_create_buffer[DType.int32](n)
    var dc = ctx.enqueue_create_buffer[DType.float32](m * n)
    if k > 0:
        ctx.enqueue_copy(da, _host[DType.int8](a_addr))
        ctx.enqueue_copy(db, _host[DType.int8](b_addr))
    ctx.enqueue_copy(dea, _host[DType.int32](ea_addr))
    ctx.enqueue_copy(deb, _host[DType.int32](eb_addr))
    var rows = MAX_GRID_Y * BY
    var i0 = 0
    while i0 < m:
        var mr = min(rows, m - i0)
        ctx.enqueue_function[int8_gemm_kernel](
            da.unsafe_ptr().unsafe_offset(i0 * k), dea.unsafe_ptr().unsafe_offset(i0),
            db.unsafe_ptr(), deb.unsafe_ptr(), dc.unsafe_ptr().unsafe_offset(i0 * n),
            Int32(mr), Int32(n), Int32(k),
            grid_dim=(_cdiv(n, BX), _cdiv(mr, BY)), block_dim=(BX, BY),
        )
        i0 += mr
    ctx.enqueue_copy(_host[DType.float32](c_addr), dc)
    ctx.synchronize()


def gemm_int15(
    ctx: DeviceContext, ahi_addr: Int, alo_addr: Int, ea_addr: Int,
    bhi_addr: Int, blo_addr: Int, eb_addr: Int, c_addr: Int, m: Int, n: Int, k: Int,
) raises:
    """C = int15i64.v1 of the (hi, lo, exps) operands a (m, k) and b (n, k)."""
    if m == 0 or n == 0:
        return
    var dah = ctx.enqueue_create_buffer[DType.int8](max(1, m * k))
    var dal = ctx.enqueue_create_buffer[DType.int8](max(1, m * k))
    var dbh = ctx.enqueue_create_buffer[DType.int8](max(1, n * k))
    var dbl = ctx.enqueue_create_buffer[DType.int8](max(1, n * k))
    var dea = ctx.enqueue_create_buffer[DType.int32](m)
    var deb = ctx.enqueue_create_buffer[DType.int32](n)
    var dc = ctx.enqueue_create_buffer[DType.float32](m * n)
    if k > 0:
        ctx.enqueue_copy(dah, _host[DType.int8](ahi_addr))
        ctx.enqueue_copy(dal, _host[DType.int8](alo_addr))
        ctx.enqueue_copy(dbh, _host[DType.int8](bhi_addr))
        ctx.enqueue_copy(dbl, _host[DType.int8](blo_addr))
    ctx.enqueue_copy(dea, _host[DType.int32](ea_addr))
    ctx.enqueue_copy(deb, _host[DType.int32](eb_addr))
    var rows = MAX_GRID_Y * BY
    var i0 = 0
    while i0 < m:
        var mr = min(rows, m - i0)
        ctx.enqueue_function[int15_gemm_kernel](
            dah.unsafe_ptr().unsafe_offset(i0 * k), dal.unsafe_ptr().unsafe_offset(i0 * k),
            dea.unsafe_ptr().unsafe_offset(i0),
            dbh.unsafe_ptr(), dbl.unsafe_ptr(), deb.unsafe_ptr(),
            dc.unsafe_ptr().unsafe_offset(i0 * n),
            Int32(mr), Int32(n), Int32(k),
            grid_dim=(_cdiv(n, BX), _cdiv(mr, BY)), block_dim=(BX, BY),
        )
        i0 += mr
    ctx.enqueue_copy(_host[DType.float32](c_addr), dc)
    ctx.synchronize()


# ------------------------------------------------------------------ converters
def to_bf16(ctx: DeviceContext, src_addr: Int, dst_addr: Int, n: Int) raises:
    if n == 0:
        return
    var ds = ctx.enqueue_create_buffer[DType.uint32](n)
    var dd = ctx.enqueue_create_buffer[DType.uint16](n)
    ctx.enqueue_copy(ds, _host[DType.uint32](src_addr))
    ctx.enqueue_function[to_bf16_kernel](
        ds.unsafe_ptr(), dd.unsafe_ptr(), Int64(n), grid_dim=_blocks_1d(n), block_dim=B1
    )
    ctx.enqueue_copy(_host[DType.uint16](dst_addr), dd)
    ctx.synchronize()


def from_bf16(ctx: DeviceContext, src_addr: Int, dst_addr: Int, n: Int) raises:
    if n == 0:
        return
    var ds = ctx.enqueue_create_buffer[DType.uint16](n)
    var dd = ctx.enqueue_create_buffer[DType.uint32](n)
    ctx.enqueue_copy(ds, _host[DType.uint16](src_addr))
    ctx.enqueue_function[from_bf16_kernel](
        ds.unsafe_ptr(), dd.unsafe_ptr(), Int64(n), grid_dim=_blocks_1d(n), block_dim=B1
    )
    ctx.enqueue_copy(_host[DType.uint32](dst_addr), dd)
    ctx.synchronize()


def quantize_int8(ctx: DeviceContext, src_addr: Int, codes_addr: Int, exps_addr: Int, m: Int, k: Int) raises:
    if m == 0:
        return
    var ds = ctx.enqueue_create_buffer[DType.uint32](max(1, m * k))
    var dc = ctx.enqueue_create_buffer[DType.int8](max(1, m * k))
    var de = ctx.enqueue_create_buffer[DType.int32](m)
    if k > 0:
        ctx.enqueue_copy(ds, _host[DType.uint32](src_addr))
    ctx.enqueue_function[row_exponent_kernel](
        ds.unsafe_ptr(), de.unsafe_ptr(), Int32(m), Int32(k), Int32(INT8_SHIFT),
        grid_dim=_blocks_1d(m), block_dim=B1,
    )
    ctx.enqueue_function[quantize_int8_kernel](
        ds.unsafe_ptr(), de.unsafe_ptr(), dc.unsafe_ptr(), Int32(m), Int32(k),
        grid_dim=_blocks_1d(m * k), block_dim=B1,
    )
    if k > 0:
        ctx.enqueue_copy(_host[DType.int8](codes_addr), dc)
    ctx.enqueue_copy(_host[DType.int32](exps_addr), de)
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
        ctx.enqueue_copy(ds, _host[DType.uint32](src_addr))
    ctx.enqueue_function[row_exponent_kernel](
        ds.unsafe_ptr(), de.unsafe_ptr(), Int32(m), Int32(k), Int32(INT15_SHIFT),
        grid_dim=_blocks_1d(m), block_dim=B1,
    )
    ctx.enqueue_function[quantize_int15_kernel](
        ds.unsafe_ptr(), de.unsafe_ptr(), dh.unsafe_ptr(), dl.unsafe_ptr(), Int32(m), Int32(k),
        grid_dim=_blocks_1d(m * k), block_dim=B1,
    )
    if k > 0:
        ctx.enqueue_copy(_host[DType.int8](hi_addr), dh)
        ctx.enqueue_copy(_host[DType.int8](lo_addr), dl)
    ctx.enqueue_copy(_host[DType.int32](exps_addr), de)
    ctx.synchronize()


def dequantize_int8(ctx: DeviceContext, codes_addr: Int, exps_addr: Int, dst_addr: Int, m: Int, k: Int) raises:
    if m == 0 or k == 0:
        return
    var dc = ctx.enqueue_create_buffer[DType.int8](m * k)
    var de = ctx.enqueue_create_buffer[DType.int32](m)
    var dd = ctx.enqueue_create_buffer[DType.float32](m * k)
    ctx.enqueue_copy(dc, _host[DType.int8](codes_addr))
    ctx.enqueue_copy(de, _host[DType.int32](exps_addr))
    ctx.enqueue_function[dequantize_int8_kernel](
        dc.unsafe_ptr(), de.unsafe_ptr(), dd.unsafe_ptr(), Int32(m), Int32(k),
        grid_dim=_blocks_1d(m * k), block_dim=B1,
    )
    ctx.enqueue_copy(_host[DType.float32](dst_addr), dd)
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
    ctx.enqueue_copy(dh, _host[DType.int8](hi_addr))
    ctx.enqueue_copy(dl, _host[DType.int8](lo_addr))
    ctx.enqueue_copy(de, _host[DType.int32](exps_addr))
    ctx.enqueue_function[dequantize_int15_kernel](
        dh.unsafe_ptr(), dl.unsafe_ptr(), de.unsafe_ptr(), dd.unsafe_ptr(), Int32(m), Int32(k),
        grid_dim=_blocks_1d(m * k), block_dim=B1,
    )
    ctx.enqueue_copy(_host[DType.float32](dst_addr), dd)
    ctx.synchronize()

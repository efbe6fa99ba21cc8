"""Host side of the GEMM GPU kernels: device buffers, launch shapes, copies.

Each function takes host addresses (the Python layer has validated every
argument), copies the inputs to the device, runs the launches of kernels.mojo
and copies the result back before returning (synchronous). The launch
structure is the one cpu_run.mojo mirrors on the CPU:

    fp32.v1     leaves launch into parts[leaf][i][j] (the register-tiled kernel
                when use_tiled(rows, n)), then the tree launch into C; rows are
                taken in chunks so parts stays under PARTS_BYTES
    int8/int15  one launch, one thread per output (row chunks of at most
                MAX_GRID_Y * BY rows)

Used by mojo/_native_gpu.mojo. Nothing here changes a bit of any result: chunk
and grid sizes only decide which thread computes which output.
"""
from max.gpu.host import DeviceContext
from common.ptr import F32Ptr, U16Ptr, U32Ptr, I8Ptr, I32Ptr
from common.gpu import cdiv, host_ptr
from arith.tree import leaf_size
from gemm.gpu.arith import a_strides, b_strides, leaves_of
from gemm.gpu.threads import BX, BY, TM, TN, use_tiled
from gemm.gpu.kernels import (
    f32_leaves_tiled_kernel,
    f32_leaves_kernel,
    f32_tree_kernel,
    int8_gemm_kernel,
    int15_gemm_kernel,
    flip_low_bit_kernel,
)

comptime PARTS_BYTES = 1 << 30
comptime MAX_GRID_Y = 65535


# ------------------------------------------------------------------ fp32.v1 / bf16f32.v1
def _f32_launches[adt: DType, bdt: DType](
    ctx: DeviceContext,
    pa0: Pointer[Scalar[adt], MutAnyOrigin],
    pb: Pointer[Scalar[bdt], MutAnyOrigin],
    pc0: F32Ptr,
    m: Int, n: Int, k: Int, trans_a: Bool, trans_b: Bool,
) raises:
    """The launches of fp32.v1 on operands already in device memory (enqueued on
    ctx's stream; the caller synchronizes)."""
    var leaf = leaf_size(k)
    var nleaves = leaves_of(k)
    var sa = a_strides(m, k, trans_a)
    var sb = b_strides(n, k, trans_b)
    var rows = max(1, min(m, PARTS_BYTES // max(1, nleaves * n * 4), MAX_GRID_Y * BY))
    var dp = ctx.enqueue_create_buffer[DType.float32](max(1, nleaves * rows * n))
    var i0 = 0
    while i0 < m:
        var mr = min(rows, m - i0)
        var pa = pa0.unsafe_offset(i0 * sa[0])
        var pc = pc0.unsafe_offset(i0 * n)
        if nleaves > 0 and use_tiled(mr, n):
            ctx.enqueue_function[f32_leaves_tiled_kernel[adt, bdt]](
                pa, pb, dp.unsafe_ptr(),
                Int32(mr), Int32(n), Int32(k),
                Int64(sa[0]), Int64(sa[1]), Int64(sb[0]), Int64(sb[1]), Int32(leaf),
                grid_dim=(cdiv(n, BX * TN), cdiv(mr, BY * TM), nleaves), block_dim=(BX, BY),
            )
        elif nleaves > 0:
            ctx.enqueue_function[f32_leaves_kernel[adt, bdt]](
                pa, pb, dp.unsafe_ptr(),
                Int32(mr), Int32(n), Int32(k),
                Int64(sa[0]), Int64(sa[1]), Int64(sb[0]), Int64(sb[1]), Int32(leaf),
                grid_dim=(cdiv(n, BX), cdiv(mr, BY), nleaves), block_dim=(BX, BY),
            )
        ctx.enqueue_function[f32_tree_kernel](
            dp.unsafe_ptr(), pc, Int32(mr), Int32(n), Int32(nleaves),
            grid_dim=(cdiv(n, BX), cdiv(mr, BY)), block_dim=(BX, BY),
        )
        i0 += mr
    _ = len(dp)  # alive until every launch that reads it is enqueued


def _gemm_f32[adt: DType, bdt: DType](
    ctx: DeviceContext, a_addr: Int, b_addr: Int, c_addr: Int,
    m: Int, n: Int, k: Int, trans_a: Bool, trans_b: Bool,
) raises:
    """Host operands: copied in, launched, the result copied back."""
    var da = ctx.enqueue_create_buffer[adt](max(1, m * k))
    var db = ctx.enqueue_create_buffer[bdt](max(1, n * k))
    var dc = ctx.enqueue_create_buffer[DType.float32](m * n)
    if k > 0:
        ctx.enqueue_copy(da, host_ptr[adt](a_addr))
        ctx.enqueue_copy(db, host_ptr[bdt](b_addr))
    _f32_launches[adt, bdt](ctx, da.unsafe_ptr().as_unsafe_any_origin(),
                            db.unsafe_ptr().as_unsafe_any_origin(),
                            dc.unsafe_ptr().as_unsafe_any_origin(),
                            m, n, k, trans_a, trans_b)
    ctx.enqueue_copy(host_ptr[DType.float32](c_addr), dc)
    ctx.synchronize()
    _ = len(da)  # the launches above read them through raw pointers
    _ = len(db)


def _gemm_f32_resident[adt: DType, bdt: DType](
    ctx: DeviceContext, a_addr: Int, b_addr: Int, c_addr: Int,
    m: Int, n: Int, k: Int, trans_a: Bool, trans_b: Bool,
) raises:
    """Device operands (addresses in this device's memory): no copy either way."""
    _f32_launches[adt, bdt](ctx, host_ptr[adt](a_addr), host_ptr[bdt](b_addr),
                            host_ptr[DType.float32](c_addr), m, n, k, trans_a, trans_b)
    ctx.synchronize()


def gemm_f32_resident(
    ctx: DeviceContext, a_addr: Int, b_addr: Int, c_addr: Int, m: Int, n: Int, k: Int,
    trans_a: Bool, trans_b: Bool, a_bf16: Bool, b_bf16: Bool, sabotage: Bool,
) raises:
    """gemm_f32 on operands and result that already live in this device's memory
    (DLPack device tensors); synchronous. `sabotage` flips the low bit of C[0, 0]
    on the device (conformance --sabotage only)."""
    if m == 0 or n == 0:
        return
    comptime F = DType.float32
    comptime H = DType.uint16
    if a_bf16 and b_bf16:
        _gemm_f32_resident[H, H](ctx, a_addr, b_addr, c_addr, m, n, k, trans_a, trans_b)
    elif a_bf16:
        _gemm_f32_resident[H, F](ctx, a_addr, b_addr, c_addr, m, n, k, trans_a, trans_b)
    elif b_bf16:
        _gemm_f32_resident[F, H](ctx, a_addr, b_addr, c_addr, m, n, k, trans_a, trans_b)
    else:
        _gemm_f32_resident[F, F](ctx, a_addr, b_addr, c_addr, m, n, k, trans_a, trans_b)
    if sabotage:
        ctx.enqueue_function[flip_low_bit_kernel](
            host_ptr[DType.uint32](c_addr), grid_dim=1, block_dim=1
        )
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
        ctx.enqueue_copy(da, host_ptr[DType.int8](a_addr))
        ctx.enqueue_copy(db, host_ptr[DType.int8](b_addr))
    ctx.enqueue_copy(dea, host_ptr[DType.int32](ea_addr))
    ctx.enqueue_copy(deb, host_ptr[DType.int32](eb_addr))
    var rows = MAX_GRID_Y * BY
    var i0 = 0
    while i0 < m:
        var mr = min(rows, m - i0)
        ctx.enqueue_function[int8_gemm_kernel](
            da.unsafe_ptr().unsafe_offset(i0 * k), dea.unsafe_ptr().unsafe_offset(i0),
            db.unsafe_ptr(), deb.unsafe_ptr(), dc.unsafe_ptr().unsafe_offset(i0 * n),
            Int32(mr), Int32(n), Int32(k),
            grid_dim=(cdiv(n, BX), cdiv(mr, BY)), block_dim=(BX, BY),
        )
        i0 += mr
    ctx.enqueue_copy(host_ptr[DType.float32](c_addr), dc)
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
        ctx.enqueue_copy(dah, host_ptr[DType.int8](ahi_addr))
        ctx.enqueue_copy(dal, host_ptr[DType.int8](alo_addr))
        ctx.enqueue_copy(dbh, host_ptr[DType.int8](bhi_addr))
        ctx.enqueue_copy(dbl, host_ptr[DType.int8](blo_addr))
    ctx.enqueue_copy(dea, host_ptr[DType.int32](ea_addr))
    ctx.enqueue_copy(deb, host_ptr[DType.int32](eb_addr))
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
            grid_dim=(cdiv(n, BX), cdiv(mr, BY)), block_dim=(BX, BY),
        )
        i0 += mr
    ctx.enqueue_copy(host_ptr[DType.float32](c_addr), dc)
    ctx.synchronize()

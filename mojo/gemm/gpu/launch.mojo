"""Host side of the GEMM GPU kernels: device buffers, launch shapes, copies.

Each function takes host addresses (the Python layer has validated every
argument), copies the inputs to the device, runs the launches of kernels.mojo
and copies the result back before returning (synchronous). The launch
structure is the one cpu_run.mojo mirrors on the CPU:

    fp32.v1     the route pre-pass (exponent_min_kernel on A and on B, then
                route_kernel: rule 6.8; the decode shapes skip it and run the
                flushing chains: route_flushing_kernel), the tiled kernel in the shape f32_kernel_for
                picks (persistent blocks, BLOCKS_PER_SM a multiprocessor), writing C,
                or roots[run][i][j] when the plan splits k across blocks (rule 6.9),
                then the tree kernel over the roots
    int8/int15  one launch of the integer kernel for the device's vendor (NVIDIA
                tensor cores, AMD matrix cores, SIMT elsewhere), 64 x 64 outputs a
                block (row chunks of at most MAX_GRID_Y * 64 rows)

Used by mojo/_native_gpu.mojo. Nothing here changes a bit of any result: chunk
and grid sizes only decide which thread computes which output.
"""
from max.gpu.host import DeviceContext, DeviceAttribute
from common.ptr import F32Ptr, U16Ptr, U32Ptr, I8Ptr, I32Ptr
from common.gpu import B1, blocks_1d, cdiv, host_ptr
from convert.gpu.arith import INT15_SHIFT
from convert.gpu.kernels import row_exponent_kernel, quantize_int15_kernel
from gemm.gpu.arith import a_strides, b_strides
from gemm.gpu.threads import (
    BX,
    BY,
    F32_BIG,
    F32_SMALL,
    F32_THIN1,
    BIG_BM,
    BIG_BN,
    BIG_BK,
    BIG_TM,
    BIG_TN,
    SMALL_BM,
    SMALL_BN,
    SMALL_BK,
    SMALL_TM,
    SMALL_TN,
    THIN_BN,
    THIN_BK,
    BLOCKS_PER_SM,
    F32Plan,
    f32_plan,
    f32_kernel_for,
    f32_route_prepass,
)
from gemm.gpu.route import ROUTE_THREADS, ROUTE_MAX_BLOCKS, route_blocks
from gemm.gpu.f32_tiled import slab_floats
from gemm.gpu.kernels import (
    exponent_min_kernel,
    route_kernel,
    route_flushing_kernel,
    f32_tiled_kernel,
    f32_tree_kernel,
    int_simt_kernel,
    int_mma_kernel,
    int_mfma_kernel,
    flip_low_bit_kernel,
)
from gemm.gpu.int_tiled import INT_BM, INT_BN, SIMT_THREADS
from gemm.gpu.int_mma import MMA_THREADS
from gemm.gpu.int_mfma import MFMA_THREADS

comptime MAX_GRID_Y = 65535


# ------------------------------------------------------------------ fp32.v1 / bf16f32.v1
def _tiled_launch[adt: DType, bdt: DType, BM: Int, BN: Int, BK: Int, TM: Int, TN: Int](
    ctx: DeviceContext, pa: Pointer[Scalar[adt], MutAnyOrigin], pb: Pointer[Scalar[bdt], MutAnyOrigin],
    dst: F32Ptr, route: I32Ptr, plan: F32Plan, m: Int, n: Int, k: Int,
    sa: Tuple[Int, Int], sb: Tuple[Int, Int],
) raises:
    comptime NT = (BM // TM) * (BN // TN)
    var slab = ctx.enqueue_create_buffer[DType.float32](plan.grid * slab_floats(plan.nsl, TM * TN, NT))
    ctx.enqueue_function[f32_tiled_kernel[adt, bdt, BM, BN, BK, TM, TN]](
        pa, pb, dst, slab.unsafe_ptr(), route,
        Int32(m), Int32(n), Int32(k), Int64(sa[0]), Int64(sa[1]), Int64(sb[0]), Int64(sb[1]),
        Int32(plan.leaf), Int32(plan.nleaves), Int32(plan.run_leaves), Int32(plan.nruns), Int32(plan.nsl),
        grid_dim=plan.grid, block_dim=NT,
    )
    _ = len(slab)  # alive until the launch that uses it is enqueued


def _tree_launch(ctx: DeviceContext, parts: F32Ptr, c: F32Ptr, m: Int, n: Int, nparts: Int) raises:
    """f32_tree_kernel: c[i][j] = the tree over parts[.][i][j] (nparts = 0: +0)."""
    if nparts == 0:
        var i0 = 0
        while i0 < m:
            var mr = min(MAX_GRID_Y * BY, m - i0)
            var pc = c.unsafe_offset(i0 * n)
            ctx.enqueue_function[f32_tree_kernel](
                pc, pc, Int32(mr), Int32(n), Int32(0),
                grid_dim=(cdiv(n, BX), cdiv(mr, BY)), block_dim=(BX, BY),
            )
            i0 += mr
        return
    ctx.enqueue_function[f32_tree_kernel](
        parts, c, Int32(m), Int32(n), Int32(nparts),
        grid_dim=(cdiv(n, BX), cdiv(m, BY)), block_dim=(BX, BY),
    )


def _f32_launches[adt: DType, bdt: DType](
    ctx: DeviceContext,
    pa0: Pointer[Scalar[adt], MutAnyOrigin],
    pb: Pointer[Scalar[bdt], MutAnyOrigin],
    pc0: F32Ptr,
    m: Int, n: Int, k: Int, trans_a: Bool, trans_b: Bool,
) raises:
    """The launches of fp32.v1 on operands already in device memory (enqueued on
    ctx's stream; the caller synchronizes): the route pre-pass (rule 6.8), the tiled
    kernel (into C, or into roots when k is split across blocks, rule 6.9), the tree
    kernel over the roots. k = 0 writes +0 (rule 8)."""
    if m == 0 or n == 0:
        return
    var nsm = 64  # only the number of blocks depends on it, never a bit
    try:
        nsm = ctx.get_attribute(DeviceAttribute.MULTIPROCESSOR_COUNT)
    except:
        pass
    var small = String(ctx.api()) == "metal"
    var kernel = f32_kernel_for(m, small)
    var plan = f32_plan(m, n, k, kernel, BLOCKS_PER_SM * max(1, nsm))
    if plan.nruns == 0:
        _tree_launch(ctx, pc0, pc0, m, n, 0)
        return
    var sa = a_strides(m, k, trans_a)
    var sb = b_strides(n, k, trans_b)
    # rule 6.8: the route, decided on the device from both operands (decode shapes:
    # the flushing chains, so the weight is read once)
    var ga = route_blocks(m * k)
    var gb = route_blocks(k * n)
    var dr = ctx.enqueue_create_buffer[DType.int32](2 * ROUTE_MAX_BLOCKS + 1)
    var ppa = dr.unsafe_ptr().as_unsafe_any_origin()
    var ppb = ppa.unsafe_offset(ROUTE_MAX_BLOCKS)
    var route = ppa.unsafe_offset(2 * ROUTE_MAX_BLOCKS)
    if f32_route_prepass(kernel):
        ctx.enqueue_function[exponent_min_kernel[adt]](pa0, Int64(m * k), ppa, grid_dim=ga, block_dim=ROUTE_THREADS)
        ctx.enqueue_function[exponent_min_kernel[bdt]](pb, Int64(k * n), ppb, grid_dim=gb, block_dim=ROUTE_THREADS)
        ctx.enqueue_function[route_kernel](ppa, Int32(ga), ppb, Int32(gb), route, grid_dim=1, block_dim=1)
    else:
        ctx.enqueue_function[route_flushing_kernel](route, grid_dim=1, block_dim=1)
    var nroots = plan.nruns * m * n if plan.nruns > 1 else 1
    var droots = ctx.enqueue_create_buffer[DType.float32](nroots)
    var dst = pc0 if plan.nruns == 1 else droots.unsafe_ptr().as_unsafe_any_origin()
    if kernel == F32_BIG:
        _tiled_launch[adt, bdt, BIG_BM, BIG_BN, BIG_BK, BIG_TM, BIG_TN](ctx, pa0, pb, dst, route, plan, m, n, k, sa, sb)
    elif kernel == F32_SMALL:
        _tiled_launch[adt, bdt, SMALL_BM, SMALL_BN, SMALL_BK, SMALL_TM, SMALL_TN](ctx, pa0, pb, dst, route, plan, m, n, k, sa, sb)
    elif kernel == F32_THIN1:
        _tiled_launch[adt, bdt, 1, THIN_BN, THIN_BK, 1, 1](ctx, pa0, pb, dst, route, plan, m, n, k, sa, sb)
    else:
        _tiled_launch[adt, bdt, 16, THIN_BN, THIN_BK, 16, 1](ctx, pa0, pb, dst, route, plan, m, n, k, sa, sb)
    if plan.nruns > 1:
        _tree_launch(ctx, droots.unsafe_ptr().as_unsafe_any_origin(), pc0, m, n, plan.nruns)
    _ = len(dr)  # alive until every launch that reads them is enqueued
    _ = len(droots)


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
def _int_launches[planes: Int](
    ctx: DeviceContext, a_hi: I8Ptr, a_lo: I8Ptr, ea: I32Ptr, b_hi: I8Ptr, b_lo: I8Ptr, eb: I32Ptr,
    c: F32Ptr, m: Int, n: Int, k: Int,
) raises:
    """The integer kernel for this device: NVIDIA's tensor cores ("cuda"), AMD's matrix
    cores ("hip"), the SIMT kernel otherwise (Apple); rows in chunks of at most
    MAX_GRID_Y blocks."""
    var api = String(ctx.api())
    var rows = MAX_GRID_Y * INT_BM
    var i0 = 0
    while i0 < m:
        var mr = min(rows, m - i0)
        var pah = a_hi.unsafe_offset(i0 * k)
        var pal = a_lo.unsafe_offset(i0 * k)
        var pea = ea.unsafe_offset(i0)
        var pc = c.unsafe_offset(i0 * n)
        var grid = (cdiv(n, INT_BN), cdiv(mr, INT_BM))
        if api == "cuda":
            ctx.enqueue_function[int_mma_kernel[planes]](
                pah, pal, pea, b_hi, b_lo, eb, pc, Int32(mr), Int32(n), Int32(k),
                grid_dim=grid, block_dim=MMA_THREADS,
            )
        elif api == "hip":
            ctx.enqueue_function[int_mfma_kernel[planes]](
                pah, pal, pea, b_hi, b_lo, eb, pc, Int32(mr), Int32(n), Int32(k),
                grid_dim=grid, block_dim=MFMA_THREADS,
            )
        else:
            ctx.enqueue_function[int_simt_kernel[planes]](
                pah, pal, pea, b_hi, b_lo, eb, pc, Int32(mr), Int32(n), Int32(k),
                grid_dim=grid, block_dim=SIMT_THREADS,
            )
        i0 += mr


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
    var pa = da.unsafe_ptr().as_unsafe_any_origin()
    var pb = db.unsafe_ptr().as_unsafe_any_origin()
    _int_launches[1](ctx, pa, pa, dea.unsafe_ptr().as_unsafe_any_origin(), pb, pb,
                     deb.unsafe_ptr().as_unsafe_any_origin(), dc.unsafe_ptr().as_unsafe_any_origin(), m, n, k)
    ctx.enqueue_copy(host_ptr[DType.float32](c_addr), dc)
    ctx.synchronize()
    _ = len(da)  # the launches above read them through raw pointers
    _ = len(db)
    _ = len(dea)
    _ = len(deb)


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
    _int_launches[2](ctx, dah.unsafe_ptr().as_unsafe_any_origin(), dal.unsafe_ptr().as_unsafe_any_origin(),
                     dea.unsafe_ptr().as_unsafe_any_origin(), dbh.unsafe_ptr().as_unsafe_any_origin(),
                     dbl.unsafe_ptr().as_unsafe_any_origin(), deb.unsafe_ptr().as_unsafe_any_origin(),
                     dc.unsafe_ptr().as_unsafe_any_origin(), m, n, k)
    ctx.enqueue_copy(host_ptr[DType.float32](c_addr), dc)
    ctx.synchronize()
    _ = len(dah)  # the launches above read them through raw pointers
    _ = len(dal)
    _ = len(dbh)
    _ = len(dbl)
    _ = len(dea)
    _ = len(deb)


# ------------------------------------------------------------------ device-resident operands
def gemm_int_resident(
    ctx: DeviceContext, planes: Int, ahi_addr: Int, alo_addr: Int, ea_addr: Int,
    bhi_addr: Int, blo_addr: Int, eb_addr: Int, c_addr: Int, m: Int, n: Int, k: Int,
) raises:
    """int8i32.v1 (planes 1: the hi addresses are the codes) or int15i64.v1 (planes 2)
    on codes, exponents and result already in this device's memory; synchronous."""
    if m == 0 or n == 0:
        return
    if planes == 1:
        _int_launches[1](ctx, host_ptr[DType.int8](ahi_addr), host_ptr[DType.int8](ahi_addr),
                         host_ptr[DType.int32](ea_addr), host_ptr[DType.int8](bhi_addr),
                         host_ptr[DType.int8](bhi_addr), host_ptr[DType.int32](eb_addr),
                         host_ptr[DType.float32](c_addr), m, n, k)
    else:
        _int_launches[2](ctx, host_ptr[DType.int8](ahi_addr), host_ptr[DType.int8](alo_addr),
                         host_ptr[DType.int32](ea_addr), host_ptr[DType.int8](bhi_addr),
                         host_ptr[DType.int8](blo_addr), host_ptr[DType.int32](eb_addr),
                         host_ptr[DType.float32](c_addr), m, n, k)
    ctx.synchronize()


def gemm_int15_quantize_a_resident(
    ctx: DeviceContext, a_addr: Int, bhi_addr: Int, blo_addr: Int, eb_addr: Int, c_addr: Int,
    m: Int, n: Int, k: Int,
) raises:
    """fixed15_v1's projection on the device: float32 activations a (m, k) quantized
    there (W-1: row exponents, W-2: the hi / lo planes, by the converters' kernels)
    and multiplied with the int15 planes of b (n, k) (W-3, W-5); nothing crosses to
    the host. Every address is in this device's memory; synchronous."""
    if m == 0 or n == 0:
        return
    var dh = ctx.enqueue_create_buffer[DType.int8](max(1, m * k))
    var dl = ctx.enqueue_create_buffer[DType.int8](max(1, m * k))
    var de = ctx.enqueue_create_buffer[DType.int32](m)
    var src = host_ptr[DType.uint32](a_addr)
    ctx.enqueue_function[row_exponent_kernel](
        src, de.unsafe_ptr(), Int32(m), Int32(k), Int32(INT15_SHIFT), grid_dim=blocks_1d(m), block_dim=B1,
    )
    ctx.enqueue_function[quantize_int15_kernel](
        src, de.unsafe_ptr(), dh.unsafe_ptr(), dl.unsafe_ptr(), Int32(m), Int32(k),
        grid_dim=blocks_1d(m * k), block_dim=B1,
    )
    _int_launches[2](ctx, dh.unsafe_ptr().as_unsafe_any_origin(), dl.unsafe_ptr().as_unsafe_any_origin(),
                     de.unsafe_ptr().as_unsafe_any_origin(), host_ptr[DType.int8](bhi_addr),
                     host_ptr[DType.int8](blo_addr), host_ptr[DType.int32](eb_addr),
                     host_ptr[DType.float32](c_addr), m, n, k)
    ctx.synchronize()
    _ = len(dh)  # the launches above read them through raw pointers
    _ = len(dl)
    _ = len(de)

"""Test support: the GEMM GPU kernels' arithmetic run on the CPU, the gpu_ref_gemm_*
entries of the CPU extension, so the GPU bits are tested on every machine.

WHAT IT IS
    Each entry runs the SAME per-thread bodies (gemm/gpu/threads.mojo) as the device
    kernels, in plain single-threaded loops over the kernels' coordinates, pass by
    pass like the launches in gemm/gpu/launch.mojo: for fp32.v1 the leaves pass fills a
    partials buffer parts[leaf][i][j] (register-tiled threads when use_tiled(m, n),
    as on the GPU), then the tree pass folds it into C. Slow by design (a reference, not a kernel).

FLOATING-POINT STATE
    A GPU kernel runs with plain IEEE arithmetic (no DAZ, no FTZ; compile_all_gpu.mojo
    checks it), so every entry sets the same on the CPU: DAZ off, FTZ off, round to
    nearest, and restores the caller's MXCSR after. With DAZ on, a flush missing
    from the bodies would be hidden by the hardware here and show on the GPU.

ENTRIES (one tuple of ints each; Python has validated every argument)
    gpu_ref_gemm_f32((a, b, c, m, n, k, trans_a, trans_b, a_bf16, b_bf16))
    gpu_ref_gemm_int8((a, ea, b, eb, c, m, n, k))
    gpu_ref_gemm_int15((ahi, alo, ea, bhi, blo, eb, c, m, n, k))
"""
from std.python import Python, PythonObject
from std.python.bindings import PythonModuleBuilder
from std.memory.alloc import unsafe_alloc
from common.ptr import F32Ptr, I8Ptr, I32Ptr, I64Ptr, ptr_f32, ptr_u16, ptr_u32, ptr_i8, ptr_i32
from common.fpstate import enter_ieee_mode, leave_ieee_mode
from gemm.gpu.arith import a_strides, b_strides
from gemm.gpu.threads import (
    F32_BIG,
    F32_THIN1,
    F32_SMALL,
    SMALL_BM,
    SMALL_BN,
    SMALL_BK,
    SMALL_TM,
    SMALL_TN,
    BIG_BM,
    BIG_BN,
    BIG_BK,
    BIG_TM,
    BIG_TN,
    THIN_BN,
    THIN_BK,
    F32Plan,
    f32_plan,
    f32_kernel_for,
    f32_route_prepass,
    tree_thread,
)
from gemm.gpu.int_tiled import (
    INT_BM,
    INT_BN,
    INT_BK,
    SIMT_THREADS,
    IntCall,
    int_smem_bytes,
    int_sums,
    int_vec,
    int_tiles,
    int_fetch,
    int_stash,
    int_prologue_phase,
    simt_main_phase,
    simt_store,
)
from gemm.gpu.int_mma import MMA_THREADS, MMA_TILES, mma_emulated, mma_store
from gemm.gpu.int_mma import a_frag as mma_a_frag, b_frag as mma_b_frag, acc_at as mma_acc_at
from gemm.gpu.int_mfma import MFMA_THREADS, MFMA_TILES, mfma_emulated, mfma_store
from gemm.gpu.int_mfma import a_frag as mfma_a_frag, b_frag as mfma_b_frag, acc_at as mfma_acc_at
from gemm.gpu.f32_tiled import (
    F32Call,
    smem_floats,
    slab_floats,
    f32_items,
    f32_item,
    f32_prologue_phase,
    f32_main_phase,
)
from gemm.gpu.route import (
    ROUTE_THREADS,
    ROUTE_MAX_BLOCKS,
    route_blocks,
    exponent_min_phase1,
    exponent_min_phase2,
    route_thread,
    route_flushing_thread,
)

# Work items the CPU run's plan aims for (the GPU's: BLOCKS_PER_SM per multiprocessor):
# small, so that the split of k across blocks (rule 6.9) and blocks holding several
# items are both exercised by ordinary test shapes. No bit depends on it.
comptime CPU_BLOCKS = 8


def _arg(args: PythonObject, i: Int) raises -> Int:
    return Int(py=args[i])


# ------------------------------------------------------------------ fp32.v1
def _route_operand[dt: DType](x_addr: Int, count: Int, partial: I32Ptr, smem: I32Ptr) -> Int:
    """exponent_min_kernel over one operand: its blocks, each phase for every thread."""
    var x = Pointer[Scalar[dt], MutAnyOrigin](unsafe_from_address=x_addr)
    var g = route_blocks(count)
    for blk in range(g):
        for tid in range(ROUTE_THREADS):
            exponent_min_phase1[dt](x, count, smem, blk, g, tid)
        for tid in range(ROUTE_THREADS):
            exponent_min_phase2(smem, partial, blk, tid)
    return g


def _route_pass[adt: DType, bdt: DType](a_addr: Int, b_addr: Int, m: Int, n: Int, k: Int) -> Int:
    """The pre-pass launches (both operands, then route_kernel): 1 = flush-free."""
    var pa = unsafe_alloc[Int32](ROUTE_MAX_BLOCKS, alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    var pb = unsafe_alloc[Int32](ROUTE_MAX_BLOCKS, alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    var smem = unsafe_alloc[Int32](ROUTE_THREADS, alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    var route = unsafe_alloc[Int32](1, alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    var ga = _route_operand[adt](a_addr, m * k, pa, smem)
    var gb = _route_operand[bdt](b_addr, k * n, pb, smem)
    route_thread(pa, ga, pb, gb, route)
    var r = Int(route.unsafe_load(0))
    pa.unsafe_free()
    pb.unsafe_free()
    smem.unsafe_free()
    route.unsafe_free()
    return r


def _tiled_run[adt: DType, bdt: DType, BM: Int, BN: Int, BK: Int, TM: Int, TN: Int](
    a_addr: Int, b_addr: Int, dst: F32Ptr, call: F32Call, grid: Int, fast: Bool,
):
    """f32_tiled_kernel's launch: for each block, its items in turn; for each item the
    prologue phase of every thread, then each main phase of every thread (the order
    of the threads reversed on every other phase); shared memory a host buffer, each
    thread's accumulators (acc) kept between phases."""
    comptime NT = (BM // TM) * (BN // TN)
    comptime N = TM * TN
    var a = Pointer[Scalar[adt], MutAnyOrigin](unsafe_from_address=a_addr)
    var b = Pointer[Scalar[bdt], MutAnyOrigin](unsafe_from_address=b_addr)
    var smem = unsafe_alloc[Float32](smem_floats(BM, BN, BK), alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    var slab = unsafe_alloc[Float32](grid * slab_floats(call.nsl, N, NT), alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    var accs = unsafe_alloc[Float32](NT * N, alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    for i in range(grid * slab_floats(call.nsl, N, NT)):
        slab.unsafe_store(i, Float32(-9.0))  # stale slab: never read as data
    for i in range(smem_floats(BM, BN, BK)):
        smem.unsafe_store(i, Float32(-7.0))  # stale shared memory: never read as data
    var items = f32_items(BM, BN, call)
    for blk in range(grid):
        var slab_blk = slab.unsafe_offset(blk * slab_floats(call.nsl, N, NT))
        var item = blk
        while item < items:
            var it = f32_item(BM, BN, BK, call, item)
            for i in range(NT * N):
                accs.unsafe_store(i, Float32(0))
            for tid in range(NT):
                f32_prologue_phase[adt, bdt, BM, BN, BK, NT](a, b, smem, call, it, tid)
            for t in range(it.ntk):
                for q in range(NT):
                    var tid = NT - 1 - q if (blk + t) % 2 == 1 else q
                    var acc = accs.unsafe_load[width=N](tid * N)
                    f32_main_phase[adt, bdt, BM, BN, BK, TM, TN, NT](
                        a, b, smem, call, it, t, tid, fast, acc, slab_blk, dst
                    )
                    accs.unsafe_store(tid * N, acc)
            item += grid
    smem.unsafe_free()
    slab.unsafe_free()
    accs.unsafe_free()


def _tiled_shape[adt: DType, bdt: DType](
    a_addr: Int, b_addr: Int, dst: F32Ptr, call: F32Call, kernel: Int, grid: Int, fast: Bool
):
    if kernel == F32_BIG:
        _tiled_run[adt, bdt, BIG_BM, BIG_BN, BIG_BK, BIG_TM, BIG_TN](a_addr, b_addr, dst, call, grid, fast)
    elif kernel == F32_THIN1:
        _tiled_run[adt, bdt, 1, THIN_BN, THIN_BK, 1, 1](a_addr, b_addr, dst, call, grid, fast)
    elif kernel == F32_SMALL:
        _tiled_run[adt, bdt, SMALL_BM, SMALL_BN, SMALL_BK, SMALL_TM, SMALL_TN](a_addr, b_addr, dst, call, grid, fast)
    else:
        _tiled_run[adt, bdt, 16, THIN_BN, THIN_BK, 16, 1](a_addr, b_addr, dst, call, grid, fast)


def _f32_run[adt: DType, bdt: DType](
    a_addr: Int, b_addr: Int, c: F32Ptr, m: Int, n: Int, k: Int, trans_a: Bool, trans_b: Bool,
    kernel_in: Int, run_leaves: Int, grid_in: Int, route_in: Int,
) -> F32Plan:
    """launch.mojo's fp32.v1 launches, on the CPU: the route pre-pass (unless forced),
    the tiled kernel (into C, or into roots when the leaves are split), the tree
    kernel over the roots (or writing +0 when k = 0)."""
    var kernel = f32_kernel_for(m) if kernel_in < 0 else kernel_in
    var plan = f32_plan(m, n, k, kernel, CPU_BLOCKS, run_leaves)
    if grid_in > 0:
        plan.grid = grid_in
    var sa = a_strides(m, k, trans_a)
    var sb = b_strides(n, k, trans_b)
    if plan.nruns == 0:
        for i in range(m):
            for j in range(n):
                tree_thread(c, c, m, n, 0, i, j)
        return plan
    var route = route_in
    if route < 0 and f32_route_prepass(kernel):
        route = _route_pass[adt, bdt](a_addr, b_addr, m, n, k)
    elif route < 0:
        var flag = unsafe_alloc[Int32](1, alignment=64).unsafe_origin_cast[MutAnyOrigin]()
        route_flushing_thread(flag)
        route = Int(flag.unsafe_load(0))
        flag.unsafe_free()
    var call = F32Call(m, n, k, sa[0], sa[1], sb[0], sb[1], plan.leaf, plan.nleaves,
                       plan.run_leaves, plan.nruns, plan.nsl)
    if plan.nruns == 1:
        _tiled_shape[adt, bdt](a_addr, b_addr, c, call, kernel, plan.grid, route != 0)
    else:
        var roots = unsafe_alloc[Float32](plan.nruns * m * n, alignment=64).unsafe_origin_cast[MutAnyOrigin]()
        _tiled_shape[adt, bdt](a_addr, b_addr, roots, call, kernel, plan.grid, route != 0)
        for i in range(m):
            for j in range(n):
                tree_thread(roots, c, m, n, plan.nruns, i, j)
        roots.unsafe_free()
    plan.kernel = kernel
    plan.nsl = route  # reported back as the route taken (see gpu_ref_gemm_f32_route)
    return plan


def _f32_entry(args: PythonObject, kernel: Int, run_leaves: Int, grid: Int, route: Int) raises -> F32Plan:
    var a_addr = _arg(args, 0)
    var b_addr = _arg(args, 1)
    var c = ptr_f32(_arg(args, 2))
    var m = _arg(args, 3)
    var n = _arg(args, 4)
    var k = _arg(args, 5)
    var trans_a = _arg(args, 6) != 0
    var trans_b = _arg(args, 7) != 0
    var a_bf16 = _arg(args, 8) != 0
    var b_bf16 = _arg(args, 9) != 0
    var old = enter_ieee_mode()
    comptime F = DType.float32
    comptime H = DType.uint16
    var plan: F32Plan
    if a_bf16 and b_bf16:
        plan = _f32_run[H, H](a_addr, b_addr, c, m, n, k, trans_a, trans_b, kernel, run_leaves, grid, route)
    elif a_bf16:
        plan = _f32_run[H, F](a_addr, b_addr, c, m, n, k, trans_a, trans_b, kernel, run_leaves, grid, route)
    elif b_bf16:
        plan = _f32_run[F, H](a_addr, b_addr, c, m, n, k, trans_a, trans_b, kernel, run_leaves, grid, route)
    else:
        plan = _f32_run[F, F](a_addr, b_addr, c, m, n, k, trans_a, trans_b, kernel, run_leaves, grid, route)
    leave_ieee_mode(old)
    return plan


def gpu_ref_gemm_f32(args: PythonObject) raises -> PythonObject:
    """fp32.v1 / bf16f32.v1 as the GPU computes it (route pre-pass, tiled kernel,
    tree kernel when the leaves are split). Arguments: (a, b, c, m, n, k, trans_a,
    trans_b, a_bf16, b_bf16)."""
    _ = _f32_entry(args, -1, 0, 0, -1)
    return PythonObject(None)


def gpu_ref_gemm_f32_route(args: PythonObject) raises -> PythonObject:
    """Arguments: (a, b, c, m, n, k, trans_a, trans_b, a_bf16, b_bf16, kernel, run_leaves,
    grid, route): gpu_ref_gemm_f32 with the launch's choices forced where not -1 / 0:
    kernel (0 big, 1 thin1, 2 thin16, 3 small; -1 the dispatch's), run_leaves (a power of two;
    0 the plan's), grid (0 the plan's), route (0 flushing chains, 1 flush-free; -1 the
    launch's: the pre-pass for BIG / SMALL, flushing for THIN1 / THIN16). Returns (kernel, route, run_leaves, nruns, grid) as run."""
    var plan = _f32_entry(args, _arg(args, 10), _arg(args, 11), _arg(args, 12), _arg(args, 13))
    return Python.tuple(PythonObject(plan.kernel), PythonObject(plan.nsl), PythonObject(plan.run_leaves),
                        PythonObject(plan.nruns), PythonObject(plan.grid))


# ------------------------------------------------------------------ integer GEMMs
comptime INT_SIMT = 0
comptime INT_MMA = 1
comptime INT_MFMA = 2


def _int_simt_run[planes: Int](call: IntCall, ea: I32Ptr, eb: I32Ptr, c: F32Ptr):
    """int_simt_kernel's grid: per block, every thread's prologue, then each main
    phase of every thread (order reversed on every other phase), then the stores."""
    comptime NT = SIMT_THREADS
    comptime NS = 16 * int_sums(planes)
    var smem = unsafe_alloc[Int8](int_smem_bytes(planes), alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    var accs = unsafe_alloc[Int32](NT * NS, alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    for by in range((call.m + INT_BM - 1) // INT_BM):
        for bx in range((call.n + INT_BN - 1) // INT_BN):
            var i0 = by * INT_BM
            var j0 = bx * INT_BN
            for i in range(NT * NS):
                accs.unsafe_store(i, Int32(0))
            for tid in range(NT):
                int_prologue_phase[planes, NT](smem, call, i0, j0, tid)
            for t in range(int_tiles(call.k)):
                for q in range(NT):
                    var tid = NT - 1 - q if (bx + by + t) % 2 == 1 else q
                    var acc = accs.unsafe_load[width=NS](tid * NS)
                    simt_main_phase[planes](smem, call, i0, j0, t, tid, acc)
                    accs.unsafe_store(tid * NS, acc)
            for tid in range(NT):
                simt_store[planes](call, ea, eb, c, i0, j0, tid, accs.unsafe_load[width=NS](tid * NS))
    smem.unsafe_free()
    accs.unsafe_free()


def _warp_mma(
    smem: I8Ptr, planes: Int, buf: Int, warp: Int, mt: Int, nt: Int, pa: Int, pb: Int, s: Int,
    accs: I32Ptr, NS: Int, fa: I32Ptr, fb: I32Ptr, fc: I32Ptr, fd: I32Ptr,
):
    """One mma of a warp, emulated: every lane's fragments gathered by the kernel's
    own a_frag / b_frag, its accumulators of sum s, tile (mt, nt) updated."""
    var tile = mt * 4 + nt
    for lane in range(32):
        var tid = warp * 32 + lane
        fa.unsafe_store(lane * 4, mma_a_frag(smem, planes, buf, pa, warp, mt, lane))
        fb.unsafe_store(lane * 2, mma_b_frag(smem, planes, buf, pb, warp, nt, lane))
        for q in range(4):
            fc.unsafe_store(lane * 4 + q, accs.unsafe_load(tid * NS + mma_acc_at(planes, s, tile) + q))
    mma_emulated(fa, fb, fc, fd)
    for lane in range(32):
        var tid = warp * 32 + lane
        for q in range(4):
            accs.unsafe_store(tid * NS + mma_acc_at(planes, s, tile) + q, fd.unsafe_load(lane * 4 + q))


def _wave_mfma(
    smem: I8Ptr, planes: Int, buf: Int, wave: Int, mt: Int, nt: Int, pa: Int, pb: Int, s: Int,
    accs: I32Ptr, NS: Int, fa: I64Ptr, fb: I64Ptr, fc: I32Ptr, fd: I32Ptr,
):
    """One MFMA of a wave, emulated (as _warp_mma, 64 lanes)."""
    var tile = mt * 2 + nt
    for lane in range(64):
        var tid = wave * 64 + lane
        fa.unsafe_store(lane, mfma_a_frag(smem, planes, buf, pa, wave, mt, lane))
        fb.unsafe_store(lane, mfma_b_frag(smem, planes, buf, pb, wave, nt, lane))
        for q in range(4):
            fc.unsafe_store(lane * 4 + q, accs.unsafe_load(tid * NS + mfma_acc_at(s, tile) + q))
    mfma_emulated(fa, fb, fc, fd)
    for lane in range(64):
        var tid = wave * 64 + lane
        for q in range(4):
            accs.unsafe_store(tid * NS + mfma_acc_at(s, tile) + q, fd.unsafe_load(lane * 4 + q))


def _int_matrix_run[planes: Int, NT: Int, mfma: Bool](call: IntCall, ea: I32Ptr, eb: I32Ptr, c: F32Ptr):
    """int_mma_kernel (mfma False) or int_mfma_kernel's grid: per block the prologue of
    every thread; per k-tile every thread's fetch of the next tile, every warp's (wave's)
    matrix products over this one in the kernel's order (S or HH; X as Ah.Bl then
    Al.Bh; LL), every thread's stash; then the stores. (On the device one phase
    holds the three; they touch disjoint data, so the order is free.)"""
    comptime CH = INT_BM * INT_BK // NT
    comptime NS = (4 * MFMA_TILES if mfma else 4 * MMA_TILES) * int_sums(planes)
    comptime LANES = 64 if mfma else 32
    var smem = unsafe_alloc[Int8](int_smem_bytes(planes), alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    var accs = unsafe_alloc[Int32](NT * NS, alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    var pre = unsafe_alloc[Int8](NT * 4 * CH, alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    var fa = unsafe_alloc[Int32](32 * 4, alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    var fb = unsafe_alloc[Int32](32 * 2, alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    var ga = unsafe_alloc[Int64](64, alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    var gb = unsafe_alloc[Int64](64, alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    var fc = unsafe_alloc[Int32](64 * 4, alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    var fd = unsafe_alloc[Int32](64 * 4, alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    for by in range((call.m + INT_BM - 1) // INT_BM):
        for bx in range((call.n + INT_BN - 1) // INT_BN):
            var i0 = by * INT_BM
            var j0 = bx * INT_BN
            for i in range(NT * NS):
                accs.unsafe_store(i, Int32(0))
            for tid in range(NT):
                int_prologue_phase[planes, NT](smem, call, i0, j0, tid)
            var nt_tiles = int_tiles(call.k)
            for t in range(nt_tiles):
                var nxt = t + 1 < nt_tiles
                if nxt:
                    for tid in range(NT):
                        pre.unsafe_store(tid * 4 * CH, int_fetch[planes, NT](call, i0, j0, t + 1, tid))
                for w in range(NT // LANES):
                    comptime if mfma:
                        for mt in range(2):
                            for ntl in range(2):
                                _wave_mfma(smem, planes, t % 2, w, mt, ntl, 0, 0, 0, accs, NS, ga, gb, fc, fd)
                                comptime if planes == 2:
                                    _wave_mfma(smem, planes, t % 2, w, mt, ntl, 0, 1, 1, accs, NS, ga, gb, fc, fd)
                                    _wave_mfma(smem, planes, t % 2, w, mt, ntl, 1, 0, 1, accs, NS, ga, gb, fc, fd)
                                    _wave_mfma(smem, planes, t % 2, w, mt, ntl, 1, 1, 2, accs, NS, ga, gb, fc, fd)
                    else:
                        for mt in range(2):
                            for ntl in range(4):
                                _warp_mma(smem, planes, t % 2, w, mt, ntl, 0, 0, 0, accs, NS, fa, fb, fc, fd)
                                comptime if planes == 2:
                                    _warp_mma(smem, planes, t % 2, w, mt, ntl, 0, 1, 1, accs, NS, fa, fb, fc, fd)
                                    _warp_mma(smem, planes, t % 2, w, mt, ntl, 1, 0, 1, accs, NS, fa, fb, fc, fd)
                                    _warp_mma(smem, planes, t % 2, w, mt, ntl, 1, 1, 2, accs, NS, fa, fb, fc, fd)
                if nxt:
                    for tid in range(NT):
                        int_stash[planes, NT](smem, (t + 1) % 2, tid, pre.unsafe_load[width=4 * CH](tid * 4 * CH))
            for tid in range(NT):
                var acc = accs.unsafe_load[width=NS](tid * NS)
                comptime if mfma:
                    mfma_store[planes](call, ea, eb, c, i0, j0, tid, rebind[SIMD[DType.int32, 4 * MFMA_TILES * int_sums(planes)]](acc))
                else:
                    mma_store[planes](call, ea, eb, c, i0, j0, tid, rebind[SIMD[DType.int32, 4 * MMA_TILES * int_sums(planes)]](acc))
    smem.unsafe_free()
    accs.unsafe_free()
    pre.unsafe_free()
    fa.unsafe_free()
    fb.unsafe_free()
    ga.unsafe_free()
    gb.unsafe_free()
    fc.unsafe_free()
    fd.unsafe_free()


def _int_run(call: IntCall, ea: I32Ptr, eb: I32Ptr, c: F32Ptr, planes: Int, backend: Int):
    if backend == INT_MMA:
        if planes == 1:
            _int_matrix_run[1, MMA_THREADS, False](call, ea, eb, c)
        else:
            _int_matrix_run[2, MMA_THREADS, False](call, ea, eb, c)
    elif backend == INT_MFMA:
        if planes == 1:
            _int_matrix_run[1, MFMA_THREADS, True](call, ea, eb, c)
        else:
            _int_matrix_run[2, MFMA_THREADS, True](call, ea, eb, c)
    elif planes == 1:
        _int_simt_run[1](call, ea, eb, c)
    else:
        _int_simt_run[2](call, ea, eb, c)


def gpu_ref_gemm_int8(args: PythonObject) raises -> PythonObject:
    """int8i32.v1 as the SIMT kernel computes it. Arguments: (a, ea, b, eb, c, m, n, k)."""
    var a = _arg(args, 0)
    var b = _arg(args, 2)
    var k = _arg(args, 7)
    var old = enter_ieee_mode()
    _int_run(IntCall(a, a, b, b, _arg(args, 5), _arg(args, 6), k, int_vec(a, a, b, b, k)),
             ptr_i32(_arg(args, 1)), ptr_i32(_arg(args, 3)), ptr_f32(_arg(args, 4)), 1, INT_SIMT)
    leave_ieee_mode(old)
    return PythonObject(None)


def gpu_ref_gemm_int15(args: PythonObject) raises -> PythonObject:
    """int15i64.v1 as the SIMT kernel computes it. Arguments: (a_hi, a_lo, ea, b_hi,
    b_lo, eb, c, m, n, k)."""
    var k = _arg(args, 9)
    var old = enter_ieee_mode()
    _int_run(IntCall(_arg(args, 0), _arg(args, 1), _arg(args, 3), _arg(args, 4), _arg(args, 7), _arg(args, 8), k,
                     int_vec(_arg(args, 0), _arg(args, 1), _arg(args, 3), _arg(args, 4), k)),
             ptr_i32(_arg(args, 2)), ptr_i32(_arg(args, 5)), ptr_f32(_arg(args, 6)), 2, INT_SIMT)
    leave_ieee_mode(old)
    return PythonObject(None)


def gpu_ref_gemm_int(args: PythonObject) raises -> PythonObject:
    """Arguments: (a_hi, a_lo, ea, b_hi, b_lo, eb, c, m, n, k, planes, backend): the
    integer GEMM kernels run on the CPU; planes 1 (int8: the hi arguments are the
    codes, lo ignored) or 2 (int15); backend 0 SIMT, 1 NVIDIA mma, 2 AMD MFMA (the
    matrix instructions emulated from their fragment layouts)."""
    var k = _arg(args, 9)
    var planes = _arg(args, 10)
    var a_hi = _arg(args, 0)
    var b_hi = _arg(args, 3)
    var a_lo = _arg(args, 1) if planes == 2 else a_hi
    var b_lo = _arg(args, 4) if planes == 2 else b_hi
    var old = enter_ieee_mode()
    _int_run(IntCall(a_hi, a_lo, b_hi, b_lo, _arg(args, 7), _arg(args, 8), k, int_vec(a_hi, a_lo, b_hi, b_lo, k)),
             ptr_i32(_arg(args, 2)), ptr_i32(_arg(args, 5)), ptr_f32(_arg(args, 6)), planes, _arg(args, 11))
    leave_ieee_mode(old)
    return PythonObject(None)


def register_gemm_gpu_reference(mut m: PythonModuleBuilder) raises:
    """Add the gpu_ref_gemm_* entries to the CPU extension module."""
    m.def_function[gpu_ref_gemm_f32]("gpu_ref_gemm_f32")
    m.def_function[gpu_ref_gemm_f32_route]("gpu_ref_gemm_f32_route")
    m.def_function[gpu_ref_gemm_int8]("gpu_ref_gemm_int8")
    m.def_function[gpu_ref_gemm_int15]("gpu_ref_gemm_int15")
    m.def_function[gpu_ref_gemm_int]("gpu_ref_gemm_int")

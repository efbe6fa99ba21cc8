"""The device kernels: each thread computes one output, one element or one row by
calling its body in gemm/gpu/threads.mojo (built on gemm/gpu/arith.mojo), the same
body the CPU run (gemm/gpu/cpu_run.mojo) calls, so its bits are those of the CPU run and of the
contract. No TF32, no fast-math, no hardware flush: compile_all_gpu.mojo checks the
generated code for that.

fp32.v1 / bf16f32.v1:
    exponent_min_kernel, route_kernel   the per-call route (rule 6.8; route.mojo);
    route_flushing_kernel               the flushing route without a pre-pass (decode)
    f32_tiled_kernel    shared-memory, register-tiled, persistent blocks: each work
                        item an output tile and a run of leaves, the tree folded as
                        leaves finish (f32_tiled.mojo; four shapes, threads.mojo)
    f32_tree_kernel     thread (i, j) folds roots[.][i][j] -> c[i][j] (rule 6.4)
                        when k is split across blocks (rule 6.9), or writes +0 (k = 0)
int8i32.v1 / int15i64.v1 (one launch; planes 1 = int8 codes, 2 = int15 hi / lo):
    int_mma_kernel      NVIDIA integer tensor cores (int_mma.mojo)
    int_mfma_kernel     AMD matrix cores (int_mfma.mojo)
    int_simt_kernel     the same staging, SIMT multiply-adds (Apple; int_tiled.mojo)
(The converters' kernels, quantization included, are convert/gpu/kernels.mojo.)

Block and tile sizes live in gemm/gpu/threads.mojo; every launch is laid out by
gemm/gpu/launch.mojo. Sizes arrive as Int32 / Int64 (kernel arguments must be
device-passable); index arithmetic is done in Int (64-bit).
"""
from max.gpu import block_idx, thread_idx, grid_dim, barrier
from std.memory import stack_allocation, AddressSpace
from common.ptr import F32Ptr, U16Ptr, U32Ptr, I8Ptr, I32Ptr
from common.gpu import gid_x, gid_y, stride_x
from std.sys.info import is_nvidia_gpu, is_amd_gpu
from gemm.gpu.threads import tree_thread
from gemm.gpu.int_tiled import (
    INT_BM,
    INT_BN,
    SIMT_THREADS,
    IntCall,
    int_smem_bytes,
    int_sums,
    int_vec,
    int_tiles,
    int_prologue_phase,
    simt_main_phase,
    simt_store,
)
from gemm.gpu.int_mma import MMA_THREADS, MMA_TILES, mma_main_phase, mma_store
from gemm.gpu.int_mfma import MFMA_THREADS, MFMA_TILES, mfma_main_phase, mfma_store
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
    exponent_min_phase1,
    exponent_min_phase2,
    route_thread,
    route_flushing_thread,
)


# ------------------------------------------------------------------ sabotage
def flip_low_bit_kernel(c: U32Ptr):
    """conformance --sabotage only: C[0, 0] ^= 1 on a device-resident result."""
    if gid_x() == 0:
        c.unsafe_store(0, c.unsafe_load(0) ^ 1)


# ------------------------------------------------------------------ fp32.v1
def exponent_min_kernel[dt: DType](x: Pointer[Scalar[dt], MutAnyOrigin], count: Int64, partial: I32Ptr):
    """Rule 6.8's pre-pass over one operand: partial[block] = the least biased
    exponent of the block's grid-stride share (route.mojo). Block ROUTE_THREADS."""
    var smem = stack_allocation[
        ROUTE_THREADS, DType.int32, alignment=16, address_space=AddressSpace.SHARED
    ]().unsafe_origin_cast[MutAnyOrigin]()
    var blk = Int(block_idx.x)
    var tid = Int(thread_idx.x)
    exponent_min_phase1[dt](x, Int(count), smem, blk, Int(grid_dim.x), tid)
    barrier()
    exponent_min_phase2(smem, partial, blk, tid)


def route_kernel(pa: I32Ptr, ga: Int32, pb: I32Ptr, gb: Int32, route: I32Ptr):
    """One thread: route[0] = 1 for the flush-free chains (rule 6.8), else 0."""
    if gid_x() == 0:
        route_thread(pa, Int(ga), pb, Int(gb), route)


def route_flushing_kernel(route: I32Ptr):
    """One thread: route[0] = 0 (the launches that skip the pre-pass)."""
    if gid_x() == 0:
        route_flushing_thread(route)


def f32_tiled_kernel[adt: DType, bdt: DType, BM: Int, BN: Int, BK: Int, TM: Int, TN: Int](
    a: Pointer[Scalar[adt], MutAnyOrigin],
    b: Pointer[Scalar[bdt], MutAnyOrigin],
    dst: F32Ptr, slab: F32Ptr, route: I32Ptr,
    m: Int32, n: Int32, k: Int32,
    a_rs: Int64, a_ks: Int64, b_cs: Int64, b_ks: Int64,
    leaf: Int32, nleaves: Int32, run_leaves: Int32, nruns: Int32, nsl: Int32,
):
    """fp32.v1 rules 6.1-6.4, 6.8, 6.9 (f32_tiled.mojo): 1-D grid of persistent
    blocks of (BM / TM) * (BN / TN) threads, each block looping over the work items
    (output tile, run of leaves) block_idx.x, + grid_dim.x, ...; `dst` is C
    (nruns = 1) or roots[nruns][m][n]; `slab` holds tree levels 0 .. nsl per block."""
    comptime NT = (BM // TM) * (BN // TN)
    comptime N = TM * TN
    var smem = stack_allocation[
        smem_floats(BM, BN, BK), DType.float32, alignment=16, address_space=AddressSpace.SHARED
    ]().unsafe_origin_cast[MutAnyOrigin]()
    var call = F32Call(Int(m), Int(n), Int(k), Int(a_rs), Int(a_ks), Int(b_cs), Int(b_ks),
                       Int(leaf), Int(nleaves), Int(run_leaves), Int(nruns), Int(nsl))
    var tid = Int(thread_idx.x)
    var fast = route.unsafe_load(0) != 0
    var blk = Int(block_idx.x)
    var slab_blk = slab.unsafe_offset(blk * slab_floats(Int(nsl), N, NT))
    var items = f32_items(BM, BN, call)
    for item in range(blk, items, Int(grid_dim.x)):
        var it = f32_item(BM, BN, BK, call, item)
        var acc = SIMD[DType.float32, N](0)
        f32_prologue_phase[adt, bdt, BM, BN, BK, NT](a, b, smem, call, it, tid)
        barrier()
        for t in range(it.ntk):
            f32_main_phase[adt, bdt, BM, BN, BK, TM, TN, NT](
                a, b, smem, call, it, t, tid, fast, acc, slab_blk, dst
            )
            barrier()


def f32_tree_kernel(parts: F32Ptr, c: F32Ptr, m: Int32, n: Int32, nleaves: Int32):
    """Thread (j = x, i = y): c[i][j] from parts[.][i][j]."""
    var j = gid_x()
    var i = gid_y()
    if i >= Int(m) or j >= Int(n):
        return
    tree_thread(parts, c, Int(m), Int(n), Int(nleaves), i, j)


# ------------------------------------------------------------------ integer GEMMs
@always_inline
def _int_call(a_hi: I8Ptr, a_lo: I8Ptr, b_hi: I8Ptr, b_lo: I8Ptr, m: Int32, n: Int32, k: Int32) -> IntCall:
    return IntCall(Int(a_hi), Int(a_lo), Int(b_hi), Int(b_lo), Int(m), Int(n), Int(k),
                   int_vec(Int(a_hi), Int(a_lo), Int(b_hi), Int(b_lo), Int(k)))


def int_simt_kernel[planes: Int](
    a_hi: I8Ptr, a_lo: I8Ptr, ea: I32Ptr, b_hi: I8Ptr, b_lo: I8Ptr, eb: I32Ptr, c: F32Ptr,
    m: Int32, n: Int32, k: Int32,
):
    """L-5 / W-3 (int_tiled.mojo), planes 1 (int8 codes) or 2 (int15 hi, lo): block
    (bx, by) the 64 x 64 outputs at (64 by, 64 bx); SIMT_THREADS threads, 4 x 4
    outputs each. Grid (ceil(n / 64), ceil(m / 64))."""
    var smem = stack_allocation[
        int_smem_bytes(planes), DType.int8, alignment=16, address_space=AddressSpace.SHARED
    ]().unsafe_origin_cast[MutAnyOrigin]()
    var call = _int_call(a_hi, a_lo, b_hi, b_lo, m, n, k)
    var i0 = Int(block_idx.y) * INT_BM
    var j0 = Int(block_idx.x) * INT_BN
    var tid = Int(thread_idx.x)
    var acc = SIMD[DType.int32, 16 * int_sums(planes)](0)
    int_prologue_phase[planes, SIMT_THREADS](smem, call, i0, j0, tid)
    barrier()
    for t in range(int_tiles(call.k)):
        simt_main_phase[planes](smem, call, i0, j0, t, tid, acc)
        barrier()
    simt_store[planes](call, ea, eb, c, i0, j0, tid, acc)


def int_mma_kernel[planes: Int](
    a_hi: I8Ptr, a_lo: I8Ptr, ea: I32Ptr, b_hi: I8Ptr, b_lo: I8Ptr, eb: I32Ptr, c: F32Ptr,
    m: Int32, n: Int32, k: Int32,
):
    """As int_simt_kernel on NVIDIA's integer tensor cores (int_mma.mojo): MMA_THREADS
    threads. Compiled empty for other vendors (never launched there)."""
    comptime if is_nvidia_gpu():
        var smem = stack_allocation[
            int_smem_bytes(planes), DType.int8, alignment=16, address_space=AddressSpace.SHARED
        ]().unsafe_origin_cast[MutAnyOrigin]()
        var call = _int_call(a_hi, a_lo, b_hi, b_lo, m, n, k)
        var i0 = Int(block_idx.y) * INT_BM
        var j0 = Int(block_idx.x) * INT_BN
        var tid = Int(thread_idx.x)
        var acc = SIMD[DType.int32, 4 * MMA_TILES * int_sums(planes)](0)
        int_prologue_phase[planes, MMA_THREADS](smem, call, i0, j0, tid)
        barrier()
        for t in range(int_tiles(call.k)):
            mma_main_phase[planes](smem, call, i0, j0, t, tid, acc)
            barrier()
        mma_store[planes](call, ea, eb, c, i0, j0, tid, acc)


def int_mfma_kernel[planes: Int](
    a_hi: I8Ptr, a_lo: I8Ptr, ea: I32Ptr, b_hi: I8Ptr, b_lo: I8Ptr, eb: I32Ptr, c: F32Ptr,
    m: Int32, n: Int32, k: Int32,
):
    """As int_simt_kernel on AMD's matrix cores (int_mfma.mojo): MFMA_THREADS threads.
    Compiled empty for other vendors (never launched there)."""
    comptime if is_amd_gpu():
        var smem = stack_allocation[
            int_smem_bytes(planes), DType.int8, alignment=16, address_space=AddressSpace.SHARED
        ]().unsafe_origin_cast[MutAnyOrigin]()
        var call = _int_call(a_hi, a_lo, b_hi, b_lo, m, n, k)
        var i0 = Int(block_idx.y) * INT_BM
        var j0 = Int(block_idx.x) * INT_BN
        var tid = Int(thread_idx.x)
        var acc = SIMD[DType.int32, 4 * MFMA_TILES * int_sums(planes)](0)
        int_prologue_phase[planes, MFMA_THREADS](smem, call, i0, j0, tid)
        barrier()
        for t in range(int_tiles(call.k)):
            mfma_main_phase[planes](smem, call, i0, j0, t, tid, acc)
            barrier()
        mfma_store[planes](call, ea, eb, c, i0, j0, tid, acc)

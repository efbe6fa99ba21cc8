"""The device kernels: each thread computes one output, one element or one row by
calling its body in gemm/gpu/threads.mojo (built on gemm/gpu/arith.mojo), the same
body the CPU run (gemm/gpu/cpu_run.mojo) calls, so its bits are those of the CPU run and of the
contract. No TF32, no fast-math, no hardware flush: compile_all_gpu.mojo checks the
generated code for that.

fp32.v1 / bf16f32.v1:
    exponent_min_kernel, route_kernel   the per-call route (rule 6.7; route.mojo)
    f32_tiled_kernel    shared-memory, register-tiled, persistent blocks: each work
                        item an output tile and a run of leaves, the tree folded as
                        leaves finish (f32_tiled.mojo; four shapes, threads.mojo)
    f32_tree_kernel     thread (i, j) folds roots[.][i][j] -> c[i][j] (rule 6.4)
                        when k is split across blocks (rule 6.8), or writes +0 (k = 0)
int8i32.v1 / int15i64.v1 (one launch):
    int8_gemm_kernel, int15_gemm_kernel   thread (i, j) -> c[i][j] = a @ b.T
    row_exponent_kernel                         one thread per row (shift 6 / 13)
    quantize_int8_kernel, quantize_int15_kernel one thread per element, exps given
    dequantize_int8_kernel, dequantize_int15_kernel  one thread per element

Block and tile sizes live in gemm/gpu/threads.mojo; every launch is laid out by
gemm/gpu/launch.mojo. Sizes arrive as Int32 / Int64 (kernel arguments must be
device-passable); index arithmetic is done in Int (64-bit).
"""
from max.gpu import block_idx, thread_idx, grid_dim, barrier
from std.memory import stack_allocation, AddressSpace
from common.ptr import F32Ptr, U16Ptr, U32Ptr, I8Ptr, I32Ptr
from common.gpu import gid_x, gid_y, stride_x
from gemm.gpu.threads import tree_thread, int8_thread, int15_thread
from gemm.gpu.f32_tiled import (
    F32Call,
    smem_floats,
    f32_items,
    f32_item,
    f32_prologue_phase,
    f32_main_phase,
)
from gemm.gpu.route import ROUTE_THREADS, exponent_min_phase1, exponent_min_phase2, route_thread


# ------------------------------------------------------------------ sabotage
def flip_low_bit_kernel(c: U32Ptr):
    """conformance --sabotage only: C[0, 0] ^= 1 on a device-resident result."""
    if gid_x() == 0:
        c.unsafe_store(0, c.unsafe_load(0) ^ 1)


# ------------------------------------------------------------------ fp32.v1
def exponent_min_kernel[dt: DType](x: Pointer[Scalar[dt], MutAnyOrigin], count: Int64, partial: I32Ptr):
    """Rule 6.7's pre-pass over one operand: partial[block] = the least biased
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
    """One thread: route[0] = 1 for the flush-free chains (rule 6.7), else 0."""
    if gid_x() == 0:
        route_thread(pa, Int(ga), pb, Int(gb), route)


def f32_tiled_kernel[adt: DType, bdt: DType, BM: Int, BN: Int, BK: Int, TM: Int, TN: Int](
    a: Pointer[Scalar[adt], MutAnyOrigin],
    b: Pointer[Scalar[bdt], MutAnyOrigin],
    dst: F32Ptr, slab: F32Ptr, route: I32Ptr,
    m: Int32, n: Int32, k: Int32,
    a_rs: Int64, a_ks: Int64, b_cs: Int64, b_ks: Int64,
    leaf: Int32, nleaves: Int32, run_leaves: Int32, nruns: Int32, nsl: Int32,
):
    """fp32.v1 rules 6.1-6.4, 6.7, 6.8 (f32_tiled.mojo): 1-D grid of persistent
    blocks of (BM / TM) * (BN / TN) threads, each block looping over the work items
    (output tile, run of leaves) block_idx.x, + grid_dim.x, ...; `dst` is C
    (nruns = 1) or roots[nruns][m][n]; `slab` holds nsl tree levels per block."""
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
    var slab_blk = slab.unsafe_offset(blk * Int(nsl) * N * NT)
    var items = f32_items(BM, BN, call)
    for item in range(blk, items, Int(grid_dim.x)):
        var it = f32_item(BM, BN, BK, call, item)
        var acc = SIMD[DType.float32, N](0)
        var slot0 = SIMD[DType.float32, N](0)
        f32_prologue_phase[adt, bdt, BM, BN, BK, NT](a, b, smem, call, it, tid)
        barrier()
        for t in range(it.ntk):
            f32_main_phase[adt, bdt, BM, BN, BK, TM, TN, NT](
                a, b, smem, call, it, t, tid, fast, acc, slot0, slab_blk, dst
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
def int8_gemm_kernel(
    a: I8Ptr, ea: I32Ptr, b: I8Ptr, eb: I32Ptr, c: F32Ptr, m: Int32, n: Int32, k: Int32
):
    """Thread (j = x, i = y): c[i][j] of a @ b.T, a (m, k) and b (n, k) int8 codes."""
    var j = gid_x()
    var i = gid_y()
    if i >= Int(m) or j >= Int(n):
        return
    int8_thread(a, ea, b, eb, c, Int(n), Int(k), i, j)


def int15_gemm_kernel(
    ahi: I8Ptr, alo: I8Ptr, ea: I32Ptr, bhi: I8Ptr, blo: I8Ptr, eb: I32Ptr, c: F32Ptr,
    m: Int32, n: Int32, k: Int32,
):
    """Thread (j = x, i = y): c[i][j] of a @ b.T on the codes hi*128 + lo."""
    var j = gid_x()
    var i = gid_y()
    if i >= Int(m) or j >= Int(n):
        return
    int15_thread(ahi, alo, ea, bhi, blo, eb, c, Int(n), Int(k), i, j)

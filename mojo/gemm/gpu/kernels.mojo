"""The device kernels: each thread computes one output, one element or one row by
calling its body in gemm/gpu/threads.mojo (built on gemm/gpu/arith.mojo), the same
body the CPU run (gemm/gpu/cpu_run.mojo) calls, so its bits are those of the CPU run and of the
contract. No TF32, no fast-math, no hardware flush: compile_all_gpu.mojo checks the
generated code for that.

fp32.v1 / bf16f32.v1 (split-K over the leaves, two launches):
    f32_leaves_kernel   thread (i, j, leaf) -> parts[leaf][i][j]   (rules 1-3)
                        grid (ceil(n/BX), ceil(m/BY), nleaves), block (BX, BY)
    f32_leaves_tiled_kernel  the same, a TM x TN tile of outputs a thread
                        (used when use_tiled(m, n); same bits)
    f32_tree_kernel     thread (i, j) folds parts[.][i][j] -> c[i][j] (rule 4)
int8i32.v1 / int15i64.v1 (one launch):
    int8_gemm_kernel, int15_gemm_kernel   thread (i, j) -> c[i][j] = a @ b.T
    row_exponent_kernel                         one thread per row (shift 6 / 13)
    quantize_int8_kernel, quantize_int15_kernel one thread per element, exps given
    dequantize_int8_kernel, dequantize_int15_kernel  one thread per element

Block and tile sizes live in gemm/gpu/threads.mojo; every launch is laid out by
gemm/gpu/launch.mojo. Sizes arrive as Int32 / Int64 (kernel arguments must be
device-passable); index arithmetic is done in Int (64-bit).
"""
from max.gpu import block_idx, thread_idx
from common.ptr import F32Ptr, U16Ptr, U32Ptr, I8Ptr, I32Ptr
from common.gpu import gid_x, gid_y, stride_x
from gemm.gpu.threads import (
    tile_origin,
    leaves_tile_thread,
    leaves_thread,
    tree_thread,
    int8_thread,
    int15_thread,
)


# ------------------------------------------------------------------ sabotage
def flip_low_bit_kernel(c: U32Ptr):
    """conformance --sabotage only: C[0, 0] ^= 1 on a device-resident result."""
    if gid_x() == 0:
        c.unsafe_store(0, c.unsafe_load(0) ^ 1)


# ------------------------------------------------------------------ fp32.v1
def f32_leaves_kernel[adt: DType, bdt: DType](
    a: Pointer[Scalar[adt], MutAnyOrigin],
    b: Pointer[Scalar[bdt], MutAnyOrigin],
    parts: F32Ptr,
    m: Int32, n: Int32, k: Int32,
    a_rs: Int64, a_ks: Int64, b_cs: Int64, b_ks: Int64,
    leaf: Int32,
):
    """Thread (j = x, i = y, leaf = block z): parts[leaf][i][j]."""
    var j = gid_x()
    var i = gid_y()
    if i >= Int(m) or j >= Int(n):
        return
    leaves_thread[adt, bdt](
        a, b, parts, Int(m), Int(n), Int(k), Int(a_rs), Int(a_ks), Int(b_cs), Int(b_ks),
        Int(leaf), i, j, Int(block_idx.z),
    )


def f32_leaves_tiled_kernel[adt: DType, bdt: DType](
    a: Pointer[Scalar[adt], MutAnyOrigin],
    b: Pointer[Scalar[bdt], MutAnyOrigin],
    parts: F32Ptr,
    m: Int32, n: Int32, k: Int32,
    a_rs: Int64, a_ks: Int64, b_cs: Int64, b_ks: Int64,
    leaf: Int32,
):
    """As f32_leaves_kernel, each thread a TM x TN tile of outputs (register
    tiling: a step's TM + TN loads serve TM * TN chains; no shared memory).
    Grid (ceil(n / (BX*TN)), ceil(m / (BY*TM)), nleaves), block (BX, BY)."""
    var o = tile_origin(Int(block_idx.x), Int(block_idx.y), Int(thread_idx.x), Int(thread_idx.y))
    if o[0] >= Int(m) or o[1] >= Int(n):
        return
    leaves_tile_thread[adt, bdt](
        a, b, parts, Int(m), Int(n), Int(k), Int(a_rs), Int(a_ks), Int(b_cs), Int(b_ks),
        Int(leaf), o[0], o[1], Int(block_idx.z),
    )


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

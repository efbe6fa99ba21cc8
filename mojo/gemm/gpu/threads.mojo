"""What ONE GPU thread of a GEMM computes, given its coordinates.

The device kernels (kernels.mojo) only turn block/thread indices into these
coordinates, check the bounds and call a body below; the CPU run (cpu_run.mojo)
calls the very same bodies in plain loops over the same coordinates, pass by
pass, with the same buffers. So a test of the CPU run is a test of the kernels'
arithmetic, not of a look-alike. Arguments are the kernels' own (Int32 / Int64
sizes widened to Int here).
"""
from arith.tree import chain_step
from common.ptr import F32Ptr, U16Ptr, U32Ptr, I8Ptr, I32Ptr
from gemm.gpu.arith import (
    ftz,
    load_operand,
    leaf_dot,
    tree_fold,
    dot_int8,
    dot_int15,
    int_epilogue,
    code15,
)


# Launch shapes, in one place: 2-D thread blocks of BX x BY threads (x along n:
# coalesced C and NN B; y along m); the register-tiled leaves kernel gives each
# thread a TM x TN tile of outputs, rows BY apart and columns BX apart, so one
# block covers (BY * TM) x (BX * TN) outputs.
comptime BX = 32
comptime BY = 8
comptime TM = 4
comptime TN = 4


@always_inline
def use_tiled(m: Int, n: Int) -> Bool:
    """Which leaves kernel a launch uses (both give the same bits; the CPU run
    follows the same choice so both are tested)."""
    return m >= 2 * BY and n >= 2 * BX


@always_inline
def tile_origin(bx: Int, by: Int, tx: Int, ty: Int) -> Tuple[Int, Int]:
    """(i0, j0) of thread (tx, ty) of block (bx, by) of the tiled leaves kernel;
    its outputs are (i0 + r * BY, j0 + c * BX), r < TM, c < TN."""
    return (by * BY * TM + ty, bx * BX * TN + tx)


# ------------------------------------------------------------------ fp32.v1 / bf16f32.v1
@always_inline
def leaves_thread[adt: DType, bdt: DType](
    a: Pointer[Scalar[adt], MutAnyOrigin], b: Pointer[Scalar[bdt], MutAnyOrigin], parts: F32Ptr,
    m: Int, n: Int, k: Int, a_rs: Int, a_ks: Int, b_cs: Int, b_ks: Int, leaf: Int,
    i: Int, j: Int, l: Int,
):
    """parts[l][i][j] = leaf l of output (i, j) (fp32.v1 rules 1-3)."""
    var kk0 = l * leaf
    var kk1 = min(kk0 + leaf, k)
    parts.unsafe_store((l * m + i) * n + j, leaf_dot[adt, bdt](a, i * a_rs, a_ks, b, j * b_cs, b_ks, kk0, kk1))


@always_inline
def leaves_tile_thread[adt: DType, bdt: DType](
    a: Pointer[Scalar[adt], MutAnyOrigin], b: Pointer[Scalar[bdt], MutAnyOrigin], parts: F32Ptr,
    m: Int, n: Int, k: Int, a_rs: Int, a_ks: Int, b_cs: Int, b_ks: Int, leaf: Int,
    i0: Int, j0: Int, l: Int,
):
    """Leaf l of the TM x TN outputs (i0 + r * BY, j0 + c * BX) inside (m, n):
    for each of them exactly leaf_dot's chain (acc = +0; acc = ftz(fma(a, b, acc))
    for kk ascending), the TM + TN operand loads of a step shared by the tile.
    Rows / columns past the edge load row m-1 / column n-1 and are not stored."""
    var kk0 = l * leaf
    var kk1 = min(kk0 + leaf, k)
    var arow = SIMD[DType.int64, TM](0)
    var bcol = SIMD[DType.int64, TN](0)
    comptime for r in range(TM):
        arow[r] = Int64(min(i0 + r * BY, m - 1) * a_rs + kk0 * a_ks)
    comptime for c in range(TN):
        bcol[c] = Int64(min(j0 + c * BX, n - 1) * b_cs + kk0 * b_ks)
    var acc = SIMD[DType.float32, TM * TN](0)
    for _ in range(kk0, kk1):
        var av = SIMD[DType.float32, TM](0)
        var bv = SIMD[DType.float32, TN](0)
        comptime for r in range(TM):
            av[r] = load_operand[adt](a, Int(arow[r]))
        comptime for c in range(TN):
            bv[c] = load_operand[bdt](b, Int(bcol[c]))
        comptime for r in range(TM):
            comptime for c in range(TN):
                acc[r * TN + c] = chain_step[1](av[r], bv[c], acc[r * TN + c])[0]
        arow += Int64(a_ks)
        bcol += Int64(b_ks)
    comptime for r in range(TM):
        var i = i0 + r * BY
        comptime for c in range(TN):
            var j = j0 + c * BX
            if i < m and j < n:
                parts.unsafe_store((l * m + i) * n + j, acc[r * TN + c])


@always_inline
def tree_thread(parts: F32Ptr, c: F32Ptr, m: Int, n: Int, nleaves: Int, i: Int, j: Int):
    """c[i][j] = the balanced tree over parts[.][i][j] (fp32.v1 rule 4)."""
    var idx = i * n + j
    c.unsafe_store(idx, tree_fold(parts.unsafe_offset(idx), m * n, nleaves))


# ------------------------------------------------------------------ integer GEMMs
@always_inline
def int8_thread(a: I8Ptr, ea: I32Ptr, b: I8Ptr, eb: I32Ptr, c: F32Ptr, n: Int, k: Int, i: Int, j: Int):
    var s = dot_int8(a.unsafe_offset(i * k), b.unsafe_offset(j * k), k)
    c.unsafe_store(i * n + j, int_epilogue[DType.int32](s, ea.unsafe_load(i), eb.unsafe_load(j)))


@always_inline
def int15_thread(
    ahi: I8Ptr, alo: I8Ptr, ea: I32Ptr, bhi: I8Ptr, blo: I8Ptr, eb: I32Ptr, c: F32Ptr,
    n: Int, k: Int, i: Int, j: Int,
):
    var s = dot_int15(
        ahi.unsafe_offset(i * k), alo.unsafe_offset(i * k),
        bhi.unsafe_offset(j * k), blo.unsafe_offset(j * k), k,
    )
    c.unsafe_store(i * n + j, int_epilogue[DType.int64](s, ea.unsafe_load(i), eb.unsafe_load(j)))

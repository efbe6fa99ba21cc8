"""What ONE GPU thread computes, given its coordinates.

The device kernels (kernels.mojo) only turn block/thread indices into these
coordinates, check the bounds and call a body below; the CPU run (cpu_run.mojo)
calls the very same bodies in plain loops over the same coordinates, pass by
pass, with the same buffers. So a test of the CPU run is a test of the kernels'
arithmetic, not of a look-alike. Arguments are the kernels' own (Int32 / Int64
sizes widened to Int here).
"""
from common.ptr import F32Ptr, U16Ptr, U32Ptr, I8Ptr, I32Ptr
from gpu.arith import (
    leaf_dot,
    tree_fold,
    dot_int8,
    dot_int15,
    int_epilogue,
    narrow_bf16,
    widen_bf16,
    row_exponent,
    quant_scale,
    quant_code,
    split15,
    dequant,
    code15,
    INT8_CMAX,
    INT15_CMAX,
)


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


# ------------------------------------------------------------------ converters
@always_inline
def to_bf16_thread(src: U32Ptr, dst: U16Ptr, i: Int):
    dst.unsafe_store(i, narrow_bf16(src.unsafe_load(i)))


@always_inline
def from_bf16_thread(src: U16Ptr, dst: U32Ptr, i: Int):
    dst.unsafe_store(i, widen_bf16(src.unsafe_load(i)))


@always_inline
def row_exponent_thread(src: U32Ptr, exps: I32Ptr, k: Int, shift: Int, r: Int):
    exps.unsafe_store(r, row_exponent(src.unsafe_offset(r * k), k, shift))


@always_inline
def quantize_int8_thread(src: U32Ptr, exps: I32Ptr, codes: I8Ptr, k: Int, i: Int):
    var scale = quant_scale(exps.unsafe_load(i // k))
    codes.unsafe_store(i, Int8(quant_code[INT8_CMAX](src.unsafe_load(i), scale)))


@always_inline
def quantize_int15_thread(src: U32Ptr, exps: I32Ptr, hi: I8Ptr, lo: I8Ptr, k: Int, i: Int):
    var scale = quant_scale(exps.unsafe_load(i // k))
    var hl = split15(quant_code[INT15_CMAX](src.unsafe_load(i), scale))
    hi.unsafe_store(i, hl[0])
    lo.unsafe_store(i, hl[1])


@always_inline
def dequantize_int8_thread(codes: I8Ptr, exps: I32Ptr, dst: F32Ptr, k: Int, i: Int):
    dst.unsafe_store(i, dequant(Int32(codes.unsafe_load(i)), exps.unsafe_load(i // k)))


@always_inline
def dequantize_int15_thread(hi: I8Ptr, lo: I8Ptr, exps: I32Ptr, dst: F32Ptr, k: Int, i: Int):
    dst.unsafe_store(i, dequant(code15(hi, lo, i), exps.unsafe_load(i // k)))

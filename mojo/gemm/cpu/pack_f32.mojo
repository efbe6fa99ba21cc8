"""Packing for the fp32.v1 / bf16f32.v1 kernels (BLIS layout, edges zero-padded).

A block: for each MR-row panel, for kk in the leaf, MR values (row i of the panel).
B chunk: for each NR-column panel, for kk over all of k, NR values.
Sources are float32 or bf16 bits (widened exactly here by arith.bf16.widen, rule L-1), in any of the
three layouts: A row-major (m,k) or transposed (k,m); B row-major (k,n) or
transposed (n,k). Packing copies bits; it never rounds.
"""
from std.collections import Array
from common.ptr import F32Ptr, U16Ptr, U32Ptr
from gemm.cpu.blocking import MR, NR, W
from arith.bf16 import widen


@always_inline
def _get(src: Int, idx: Int, is_bf16: Bool) -> Float32:
    if is_bf16:
        var b = U16Ptr(unsafe_from_address=src).unsafe_load(idx)
        return widen[1](b)[0]
    return F32Ptr(unsafe_from_address=src).unsafe_load(idx)


def pack_a(
    src: Int, a_bf16: Bool, trans_a: Bool, lda: Int,
    i0: Int, mc: Int, k0: Int, lk: Int, dst: F32Ptr,
):
    """A[i0:i0+mc, k0:k0+lk] into MR-row panels. lda: row stride of the stored array."""
    var panels = (mc + MR - 1) // MR
    for p in range(panels):
        var d = dst.unsafe_offset(p * MR * lk)
        var rows = min(MR, mc - p * MR)
        if trans_a:
            # stored (k, m): for each kk the MR values are contiguous
            for kk in range(lk):
                var base = (k0 + kk) * lda + i0 + p * MR
                for ii in range(rows):
                    d.unsafe_store(kk * MR + ii, _get(src, base + ii, a_bf16))
                for ii in range(rows, MR):
                    d.unsafe_store(kk * MR + ii, Float32(0))
        else:
            # stored (m, k): walk each row contiguously, write with stride MR
            for ii in range(rows):
                var base = (i0 + p * MR + ii) * lda + k0
                for kk in range(lk):
                    d.unsafe_store(kk * MR + ii, _get(src, base + kk, a_bf16))
            for ii in range(rows, MR):
                for kk in range(lk):
                    d.unsafe_store(kk * MR + ii, Float32(0))


def pack_b(
    src: Int, b_bf16: Bool, trans_b: Bool, ldb: Int,
    j0: Int, nc: Int, k: Int, dst: F32Ptr,
):
    """B[0:k, j0:j0+nc] into NR-column panels of k rows each. ldb: row stride of the
    stored array ((k, n) when not transposed, (n, k) when transposed)."""
    var panels = (nc + NR - 1) // NR
    for p in range(panels):
        var d = dst.unsafe_offset(p * NR * k)
        var cols = min(NR, nc - p * NR)
        var jb = j0 + p * NR
        if not trans_b:
            if cols == NR and not b_bf16:
                var s = F32Ptr(unsafe_from_address=src)
                for kk in range(k):
                    var row = s.unsafe_offset(kk * ldb + jb)
                    comptime for v in range(NR // W):
                        d.unsafe_store(kk * NR + v * W, row.unsafe_load[width=W](v * W))
            elif cols == NR:
                var s = U16Ptr(unsafe_from_address=src)
                for kk in range(k):
                    var row = s.unsafe_offset(kk * ldb + jb)
                    comptime for v in range(NR // W):
                        d.unsafe_store(kk * NR + v * W, widen[W](row.unsafe_load[width=W](v * W)))
            else:
                for kk in range(k):
                    for jj in range(cols):
                        d.unsafe_store(kk * NR + jj, _get(src, kk * ldb + jb + jj, b_bf16))
                    for jj in range(cols, NR):
                        d.unsafe_store(kk * NR + jj, Float32(0))
        else:
            for jj in range(cols):
                var base = (jb + jj) * ldb
                for kk in range(k):
                    d.unsafe_store(kk * NR + jj, _get(src, base + kk, b_bf16))
            for jj in range(cols, NR):
                for kk in range(k):
                    d.unsafe_store(kk * NR + jj, Float32(0))


@always_inline
def transpose16[dt: DType](mut r: Array[SIMD[dt, 16], 16]):
    """In-register 16x16 transpose of 32-bit lanes (float32 here, the AMX kernels'
    4-byte k-groups in amx_int.mojo): four rounds of the perfect shuffle (row i and
    row i+8 interleaved into rows 2i and 2i+1); each round rotates the (row, column)
    index bits by one, so four rounds swap rows and columns."""
    comptime for _round in range(4):
        var t = Array[SIMD[dt, 16], 16](fill=SIMD[dt, 16](0))
        comptime for i in range(8):
            var z = r[i].interleave(r[i + 8])
            t[2 * i] = z.slice[16, offset=0]()
            t[2 * i + 1] = z.slice[16, offset=16]()
        comptime for i in range(16):
            r[i] = t[i]


def pack_b_rows_t16(src: Int, ldb: Int, j0: Int, k0: Int, lk: Int, dst: F32Ptr):
    """Fast path of pack_b_rows for a float32 B stored (n, k) (NT layout): one full
    NR = 32 panel, lk a multiple of 16; 16x16 blocks transposed in registers."""
    var s = F32Ptr(unsafe_from_address=src)
    var blk = Array[SIMD[DType.float32, 16], 16](fill=SIMD[DType.float32, 16](0))
    comptime for h in range(NR // 16):
        var kk = 0
        while kk < lk:
            comptime for r in range(16):
                blk[r] = s.unsafe_load[width=16]((j0 + h * 16 + r) * ldb + k0 + kk)
            transpose16(blk)
            comptime for r in range(16):
                dst.unsafe_store((kk + r) * NR + h * 16, blk[r])
            kk += 16


@always_inline
def panel_stride(lk: Int) -> Int:
    return lk * NR + 16


def pack_b_rows(
    src: Int, b_bf16: Bool, trans_b: Bool, ldb: Int,
    j0: Int, nc: Int, k0: Int, lk: Int, dst: F32Ptr,
):
    """B[k0:k0+lk, j0:j0+nc] into NR-column panels of lk rows each, panel p at
    p * panel_stride(lk) (padded so the panels do not alias in the L1 sets)."""
    var ps = panel_stride(lk)
    var panels = (nc + NR - 1) // NR
    if not trans_b and not b_bf16:
        var s = F32Ptr(unsafe_from_address=src)
        var full = nc // NR
        for kk in range(lk):
            var row = s.unsafe_offset((k0 + kk) * ldb + j0)
            for p in range(full):
                comptime for v in range(NR // W):
                    dst.unsafe_store(p * ps + kk * NR + v * W, row.unsafe_load[width=W](p * NR + v * W))
        if full < panels:
            var cols = nc - full * NR
            for kk in range(lk):
                var row = s.unsafe_offset((k0 + kk) * ldb + j0 + full * NR)
                for jj in range(cols):
                    dst.unsafe_store(full * ps + kk * NR + jj, row.unsafe_load(jj))
                for jj in range(cols, NR):
                    dst.unsafe_store(full * ps + kk * NR + jj, Float32(0))
        return
    for p in range(panels):
        var d = dst.unsafe_offset(p * ps)
        var cols = min(NR, nc - p * NR)
        var jb = j0 + p * NR
        comptime if W == 16 and NR % 16 == 0:
            if trans_b and not b_bf16 and cols == NR and lk % 16 == 0:
                pack_b_rows_t16(src, ldb, jb, k0, lk, d)
                continue
        if not trans_b:
            for kk in range(lk):
                var base = (k0 + kk) * ldb + jb
                for jj in range(cols):
                    d.unsafe_store(kk * NR + jj, _get(src, base + jj, b_bf16))
                for jj in range(cols, NR):
                    d.unsafe_store(kk * NR + jj, Float32(0))
        else:
            for jj in range(cols):
                var base = (jb + jj) * ldb + k0
                for kk in range(lk):
                    d.unsafe_store(kk * NR + jj, _get(src, base + kk, b_bf16))
            for jj in range(cols, NR):
                for kk in range(lk):
                    d.unsafe_store(kk * NR + jj, Float32(0))


def pack_b_all(
    src: Int, b_bf16: Bool, trans_b: Bool, ldb: Int, p_lo: Int, p_hi: Int, n: Int, k: Int,
    dst: F32Ptr,
):
    """Panels [p_lo, p_hi) of the whole of B (pack_b's layout over all n columns:
    panel q holds columns q*NR .. q*NR+NR-1 for kk in 0..k, at dst + q*NR*k, the
    columns past n zero). A prepared weight is this, made once: the kernels then read
    it where pack_b / pack_b_rows would have written it. Copies bits (bf16 widened
    exactly); never rounds."""
    for q in range(p_lo, p_hi):
        var d = dst.unsafe_offset(q * NR * k)
        var cols = min(NR, n - q * NR)
        comptime if W == 16 and NR % 16 == 0:
            if trans_b and not b_bf16 and cols == NR and k % 16 == 0:
                pack_b_rows_t16(src, ldb, q * NR, 0, k, d)
                continue
        pack_b(src, b_bf16, trans_b, ldb, q * NR, cols, k, d)

"""Packing for the fp32.v1 / bf16f32.v1 kernels (BLIS layout, edges zero-padded).

A block: for each MR-row panel, for kk in the leaf, MR values (row i of the panel).
B chunk: for each NR-column panel, for kk over all of k, NR values.
Sources are float32 or bf16 bits (widened exactly here by arith.bf16.widen, rule L-1), in any of the
three layouts: A row-major (m,k) or transposed (k,m); B row-major (k,n) or
transposed (n,k). Packing copies bits; it never rounds.
"""
from std.collections import Array
from common.ptr import F32Ptr, U16Ptr, U32Ptr
from gemm.cpu.blocking import MR, NR, W, PACK_ROWS
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
    var p_first = 0
    if trans_a and not a_bf16:
        # stored (k, m): the full panels a few rows of k at a time, each row of k read
        # across every panel before the next (not one panel's k rows, a page apart, at
        # a time)
        var full = mc // MR
        var s = F32Ptr(unsafe_from_address=src)
        var kb = 0
        while kb < lk:
            var ke = min(kb + PACK_ROWS, lk)
            for p in range(full):
                var d = dst.unsafe_offset(p * MR * lk)
                for kk in range(kb, ke):
                    var row = s.unsafe_offset((k0 + kk) * lda + i0 + p * MR)
                    comptime for c in range(MR // 4):
                        d.unsafe_store(kk * MR + 4 * c, row.unsafe_load[width=4](4 * c))
                    comptime for c in range(4 * (MR // 4), MR):
                        d.unsafe_store(kk * MR + c, row.unsafe_load(c))
            kb = ke
        p_first = full
    for p in range(p_first, panels):
        var d = dst.unsafe_offset(p * MR * lk)
        var rows = min(MR, mc - p * MR)
        if trans_a:
            # stored (k, m): for each kk the MR values are contiguous
            if rows == MR and not a_bf16:
                var s = F32Ptr(unsafe_from_address=src)
                for kk in range(lk):
                    var row = s.unsafe_offset((k0 + kk) * lda + i0 + p * MR)
                    comptime for c in range(MR // 4):
                        d.unsafe_store(kk * MR + 4 * c, row.unsafe_load[width=4](4 * c))
                    comptime for c in range(4 * (MR // 4), MR):
                        d.unsafe_store(kk * MR + c, row.unsafe_load(c))
                continue
            for kk in range(lk):
                var base = (k0 + kk) * lda + i0 + p * MR
                for ii in range(rows):
                    d.unsafe_store(kk * MR + ii, _get(src, base + ii, a_bf16))
                for ii in range(rows, MR):
                    d.unsafe_store(kk * MR + ii, Float32(0))
        else:
            # stored (m, k): W x W blocks transposed in registers for a full panel, then
            # the rest element by element: each row walked contiguously, written with
            # stride MR
            var kt = 0
            comptime if W == 8 or W == 16:
                if rows == MR:
                    var r0 = i0 + p * MR
                    kt = _pack_a_rows_t[True](src, lda, r0, k0, lk, d) if a_bf16 else _pack_a_rows_t[False](
                        src, lda, r0, k0, lk, d)
            for ii in range(rows):
                var base = (i0 + p * MR + ii) * lda + k0
                for kk in range(kt, lk):
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
    var p_first = 0
    if not trans_b and not b_bf16:
        # stored (k, n): the full panels a few rows of k at a time, each row read across
        # every panel before the next (not one panel's k rows, a page apart, at a time)
        var full = nc // NR
        var s = F32Ptr(unsafe_from_address=src)
        var kb = 0
        while kb < k:
            var ke = min(kb + PACK_ROWS, k)
            for p in range(full):
                var d = dst.unsafe_offset(p * NR * k)
                for kk in range(kb, ke):
                    var row = s.unsafe_offset(kk * ldb + j0 + p * NR)
                    comptime for v in range(NR // W):
                        d.unsafe_store(kk * NR + v * W, row.unsafe_load[width=W](v * W))
            kb = ke
        p_first = full
    for p in range(p_first, panels):
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
            var kt = 0
            comptime if W == 8 or W == 16:
                if cols == NR:
                    kt = transpose_cols[True](src, ldb, jb, NR // W, 0, k, d, NR) if b_bf16 else transpose_cols[
                        False](src, ldb, jb, NR // W, 0, k, d, NR)
            for jj in range(cols):
                var base = (jb + jj) * ldb
                for kk in range(kt, k):
                    d.unsafe_store(kk * NR + jj, _get(src, base + kk, b_bf16))
            for jj in range(cols, NR):
                for kk in range(k):
                    d.unsafe_store(kk * NR + jj, Float32(0))


@always_inline
def transpose_sq[dt: DType, w: Int](mut r: Array[SIMD[dt, w], w]):
    """In-register w x w transpose of 32-bit lanes (w = 4, 8 or 16). w = 16 and 8: the
    unpack / 128-bit-lane shuffle forms (transpose16, transpose8); w = 4: two rounds of
    the perfect shuffle (row i and row i + 2 interleaved into rows 2i and 2i+1; each
    round rotates the (row, column) index bits by one)."""
    comptime assert w == 4 or w == 8 or w == 16, "transpose_sq: w must be 4, 8 or 16"
    comptime if w == 16:
        transpose16(rebind[Array[SIMD[dt, 16], 16]](r))
    elif w == 8:
        transpose8(rebind[Array[SIMD[dt, 8], 8]](r))
    else:
        comptime rounds = 2
        comptime for _round in range(rounds):
            var t = Array[SIMD[dt, w], w](fill=SIMD[dt, w](0))
            comptime for i in range(w // 2):
                var z = r[i].interleave(r[i + w // 2])
                t[2 * i] = z.slice[w, offset=0]()
                t[2 * i + 1] = z.slice[w, offset=w]()
            comptime for i in range(w):
                r[i] = t[i]


@always_inline
def transpose8[dt: DType](mut r: Array[SIMD[dt, 8], 8]):
    """In-register 8 x 8 transpose of 32-bit lanes (AVX2): unpacklo/hi of 32-bit then
    64-bit pairs within 128-bit lanes (the 4 x 4 blocks of rows 0-3 and 4-7), then the
    two 128-bit halves exchanged; two-input shuffles that keep their inputs."""
    var t = Array[SIMD[dt, 8], 8](fill=SIMD[dt, 8](0))
    comptime for i in range(4):
        t[2 * i] = r[2 * i].shuffle[0, 8, 1, 9, 4, 12, 5, 13](r[2 * i + 1])
        t[2 * i + 1] = r[2 * i].shuffle[2, 10, 3, 11, 6, 14, 7, 15](r[2 * i + 1])
    # u[4g + c] lane L (4 values) = rows 4g..4g+3 of column 4L + c
    comptime for g in range(2):
        comptime for h in range(2):
            var a = t[4 * g + h]
            var b = t[4 * g + 2 + h]
            r[4 * g + 2 * h] = a.shuffle[0, 1, 8, 9, 4, 5, 12, 13](b)
            r[4 * g + 2 * h + 1] = a.shuffle[2, 3, 10, 11, 6, 7, 14, 15](b)
    comptime for c in range(4):
        t[c] = r[c].shuffle[0, 1, 2, 3, 8, 9, 10, 11](r[4 + c])
        t[4 + c] = r[c].shuffle[4, 5, 6, 7, 12, 13, 14, 15](r[4 + c])
    comptime for i in range(8):
        r[i] = t[i]


@always_inline
def transpose16[dt: DType](mut r: Array[SIMD[dt, 16], 16]):
    """In-register 16 x 16 transpose of 32-bit lanes (float32, or the AMX and VNNI
    kernels' 4-byte k-groups), in four stages of two-input shuffles that keep every
    input register (unpacklo/hi of 32-bit then 64-bit pairs within 128-bit lanes, then
    two rounds of 128-bit-lane shuffles): 16 live rows and one temporary, so a caller's
    accumulators stay in registers beside it. Stages 1-2 transpose the 4 x 4 blocks of
    each group of 4 rows; 3-4 transpose the 4 x 4 grid of 128-bit blocks."""
    var t = Array[SIMD[dt, 16], 16](fill=SIMD[dt, 16](0))
    # 1: 32-bit pairs of rows (2i, 2i+1), per 128-bit lane
    comptime for i in range(8):
        t[2 * i] = r[2 * i].shuffle[0, 16, 1, 17, 4, 20, 5, 21, 8, 24, 9, 25, 12, 28, 13, 29](r[2 * i + 1])
        t[2 * i + 1] = r[2 * i].shuffle[2, 18, 3, 19, 6, 22, 7, 23, 10, 26, 11, 27, 14, 30, 15, 31](r[2 * i + 1])
    # 2: 64-bit pairs; u[4g + c] lane L = rows 4g..4g+3 of column 4L + c
    comptime for g in range(4):
        comptime for h in range(2):
            var a = t[4 * g + h]
            var b = t[4 * g + 2 + h]
            r[4 * g + 2 * h] = a.shuffle[0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29](b)
            r[4 * g + 2 * h + 1] = a.shuffle[2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31](b)
    # 3: 128-bit lanes (0, 2) and (1, 3) of row groups (0, 1) and (2, 3)
    comptime for c in range(4):
        t[c] = r[c].shuffle[0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27](r[4 + c])
        t[4 + c] = r[c].shuffle[4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31](r[4 + c])
        t[8 + c] = r[8 + c].shuffle[0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27](r[12 + c])
        t[12 + c] = r[8 + c].shuffle[4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31](r[12 + c])
    # 4: column 4L + c gathers lane L of the four row groups
    comptime for c in range(4):
        r[c] = t[c].shuffle[0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27](t[8 + c])
        r[8 + c] = t[c].shuffle[4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31](t[8 + c])
        r[4 + c] = t[4 + c].shuffle[0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27](t[12 + c])
        r[12 + c] = t[4 + c].shuffle[4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31](t[12 + c])


@always_inline
def _load_w[bf16: Bool](src: Int, idx: Int) -> SIMD[DType.float32, W]:
    """W consecutive operand values from element idx, float32 (bf16 widened exactly)."""
    comptime if bf16:
        return widen[W](U16Ptr(unsafe_from_address=src).unsafe_load[width=W](idx))
    else:
        return F32Ptr(unsafe_from_address=src).unsafe_load[width=W](idx)


@always_inline
def store_first[n: Int, dt: DType, w: Int](d: Pointer[Scalar[dt], MutAnyOrigin], v: SIMD[dt, w]):
    """Lanes [0, n) of v to d[0:n] (n <= w), in pieces of 8, 4, 2 and 1 lanes: a panel
    row narrower than a vector (MR floats of A, IMR words of the integer A)."""
    comptime assert n <= w, "store_first: more lanes than the vector has"
    comptime n8 = (n // 8) * 8 if w >= 8 else 0
    comptime for c in range(n8 // 8):
        d.unsafe_store(8 * c, v.slice[8, offset=8 * c]())
    comptime n4 = n8 + ((n - n8) // 4) * 4
    comptime if n4 > n8:
        d.unsafe_store(n8, v.slice[4, offset=n8]())
    comptime n2 = n4 + ((n - n4) // 2) * 2
    comptime if n2 > n4:
        d.unsafe_store(n4, v.slice[2, offset=n4]())
    comptime if n > n2:
        d.unsafe_store(n2, v[n2])


def _pack_a_rows_t[bf16: Bool](src: Int, lda: Int, r0: Int, k0: Int, lk: Int, d: F32Ptr) -> Int:
    """Fast path of pack_a for A stored (m, k): one full MR-row panel (rows r0..r0+MR)
    for kk in [0, lk - lk % W), W x W blocks transposed in registers (rows MR..W of the
    block are zero and never stored). Returns the kk where the scalar tail starts."""
    var blk = Array[SIMD[DType.float32, W], W](fill=SIMD[DType.float32, W](0))
    var kk = 0
    while kk + W <= lk:
        comptime for r in range(MR):
            blk[r] = _load_w[bf16](src, (r0 + r) * lda + k0 + kk)
        comptime for r in range(MR, W):
            blk[r] = SIMD[DType.float32, W](0)
        transpose_sq(blk)
        comptime for r in range(W):
            store_first[MR, DType.float32, W](d.unsafe_offset((kk + r) * MR), blk[r])
        kk += W
    return kk


def transpose_cols[bf16: Bool](src: Int, ldb: Int, j0: Int, groups: Int, k0: Int, lk: Int,
                               dst: F32Ptr, ld: Int) -> Int:
    """For a B stored (n, k) (NT layout): dst[kk * ld + j] = B_stored[j0 + j, k0 + kk] for
    the first `groups` groups of W columns and kk in [0, lk - lk % W), W x W blocks
    transposed in registers (W = 8 or 16). Returns the kk where the caller's element
    loop takes over (the columns past the groups take it from kk = 0)."""
    var blk = Array[SIMD[DType.float32, W], W](fill=SIMD[DType.float32, W](0))
    var kend = lk - lk % W
    for h in range(groups):
        var kk = 0
        while kk < kend:
            comptime for r in range(W):
                blk[r] = _load_w[bf16](src, (j0 + h * W + r) * ldb + k0 + kk)
            transpose_sq(blk)
            comptime for r in range(W):
                dst.unsafe_store((kk + r) * ld + h * W, blk[r])
            kk += W
    return kend


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
        var kt = 0
        comptime if W == 8 or W == 16:
            if trans_b and cols == NR:
                kt = transpose_cols[True](src, ldb, jb, NR // W, k0, lk, d, NR) if b_bf16 else transpose_cols[
                    False](src, ldb, jb, NR // W, k0, lk, d, NR)
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
                for kk in range(kt, lk):
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
        pack_b(src, b_bf16, trans_b, ldb, q * NR, cols, k, d)

"""Prepared low-bit weights for fp32.v1: B kept in the format it is stored in, in the
NR-column panel layout of pack_f32.pack_b_all (panel q = columns [q*NR, q*NR+NR) for
kk in 0..k, the columns past n zero), and widened to float32 only as it is read.

FORMATS (b_fmt of gemm_f32_packed)
    PANELS_F32  float32 panels (pack_f32.pack_b_all): 4 bytes a weight.
    PANELS_BF16 bf16 bits (uint16) in the same layout: 2 bytes a weight. Widened by
                rule L-1 (arith.bf16.widen: bits << 16, exact, no flush; the kernels
                then read every operand under rule 6.1's DAZ, as they read any
                float32).
    PANELS_I8   int8 codes in the same layout, 1 byte a weight, plus one float32
                scale per column, pow2f(e) of its row exponent (columns past n: 1).
                Widened by rule L-6 (arith.quant.scale_code_pow2: ftz(f32(code) *
                pow2f(e)), whose flush never fires for a code), so the product reads exactly the
                float32 weights dequantize_int8 materializes (rule M-26's int8
                storage), one row exponent per column of B.

WHERE THEY ARE WIDENED
    Decode rows (m <= ROWS_MAX): in registers as the panels stream from memory
    (load_w; the product is bound by the weight stream, so fewer bytes are less time).
    Larger m: a column chunk (prepared.f32_block path) or a panel (the small-m path)
    is widened into float32 panels in the workspace (widen_panels), which the float32
    kernels then read as they read prepared float32 panels: each weight is widened
    once per call and reused by every row.
Packing and widening copy or convert bits exactly; neither rounds, so the bits of a
product are those of the float32 weight the format materializes (contract 6.5: the
order depends on k only).
"""
from std.collections import Array
from common.ptr import F32Ptr, I8Ptr, I32Ptr, U16Ptr
from gemm.cpu.blocking import NR, W
from arith.bf16 import widen
from arith.fp import pow2f
from arith.quant import scale_code_pow2

comptime PANELS_F32 = 0
comptime PANELS_BF16 = 1
comptime PANELS_I8 = 2


@always_inline
def elem_bytes(fmt: Int) -> Int:
    """Bytes of one stored weight in a panel format."""
    if fmt == PANELS_BF16:
        return 2
    if fmt == PANELS_I8:
        return 1
    return 4


def pack_bf16_panels(src: Int, trans_b: Bool, ldb: Int, q_lo: Int, q_hi: Int, n: Int, k: Int,
                     dst: U16Ptr):
    """Panels [q_lo, q_hi) of bf16 bits stored (n, k) (trans_b) or (k, n), row stride
    ldb, into the panel layout at dst (panel q at dst + q*NR*k). Copies bits."""
    var s = U16Ptr(unsafe_from_address=src)
    for q in range(q_lo, q_hi):
        var d = dst.unsafe_offset(q * NR * k)
        var j0 = q * NR
        var cols = min(NR, n - j0)
        if trans_b:
            # one stored row (a column of B) walked contiguously, written NR apart
            for jj in range(cols):
                var row = s.unsafe_offset((j0 + jj) * ldb)
                for kk in range(k):
                    d.unsafe_store(kk * NR + jj, row.unsafe_load(kk))
        else:
            for kk in range(k):
                var row = s.unsafe_offset(kk * ldb + j0)
                if cols == NR:
                    comptime for v in range(NR // W):
                        d.unsafe_store(kk * NR + v * W, row.unsafe_load[width=W](v * W))
                else:
                    for jj in range(cols):
                        d.unsafe_store(kk * NR + jj, row.unsafe_load(jj))
        for jj in range(cols, NR):
            for kk in range(k):
                d.unsafe_store(kk * NR + jj, UInt16(0))


def pack_i8_panels(src: Int, exps: Int, q_lo: Int, q_hi: Int, n: Int, k: Int,
                   dst: I8Ptr, scales: F32Ptr):
    """Panels [q_lo, q_hi) of int8 codes stored (n, k) (one row exponent per stored
    row, exps (n,) int32) into the panel layout at dst, and each column's pow2f(e)
    into scales[q*NR + jj] (1 past n; those columns' codes are 0). Copies codes."""
    var s = I8Ptr(unsafe_from_address=src)
    var e = I32Ptr(unsafe_from_address=exps)
    for q in range(q_lo, q_hi):
        var d = dst.unsafe_offset(q * NR * k)
        var j0 = q * NR
        var cols = min(NR, n - j0)
        for jj in range(cols):
            var row = s.unsafe_offset((j0 + jj) * k)
            for kk in range(k):
                d.unsafe_store(kk * NR + jj, row.unsafe_load(kk))
            scales.unsafe_store(j0 + jj, pow2f(Int(e.unsafe_load(j0 + jj))))
        for jj in range(cols, NR):
            for kk in range(k):
                d.unsafe_store(kk * NR + jj, Int8(0))
            scales.unsafe_store(j0 + jj, Float32(1))


@always_inline
def load_w[fmt: Int](b: Int, off: Int, scale: SIMD[DType.float32, W]) -> SIMD[DType.float32, W]:
    """W weights from element `off` of a panel buffer at address b, widened to
    float32: PANELS_F32 as stored, PANELS_BF16 by L-1, PANELS_I8 by L-6 with the
    lanes' scales (pow2f of their columns' exponents; unused otherwise)."""
    comptime if fmt == PANELS_BF16:
        return widen[W](U16Ptr(unsafe_from_address=b).unsafe_load[width=W](off))
    elif fmt == PANELS_I8:
        var c = I8Ptr(unsafe_from_address=b).unsafe_load[width=W](off)
        return scale_code_pow2[W](c.cast[DType.float32](), scale)
    else:
        return F32Ptr(unsafe_from_address=b).unsafe_load[width=W](off)


def widen_panels(fmt: Int, b: Int, scales: Int, q_lo: Int, q_hi: Int, k: Int, dst: F32Ptr):
    """Panels [q_lo, q_hi) of a low-bit panel buffer (b, with its scales for
    PANELS_I8) as float32 panels at dst (panel q_lo first, each NR*k floats)."""
    var sc = F32Ptr(unsafe_from_address=scales)
    for q in range(q_lo, q_hi):
        var d = dst.unsafe_offset((q - q_lo) * NR * k)
        var base = q * NR * k
        if fmt == PANELS_BF16:
            for kk in range(k):
                comptime for v in range(NR // W):
                    d.unsafe_store(kk * NR + v * W, load_w[PANELS_BF16](b, base + kk * NR + v * W,
                                                                        SIMD[DType.float32, W](1)))
        else:
            var s = Array[SIMD[DType.float32, W], NR // W](fill=SIMD[DType.float32, W](1))
            comptime for v in range(NR // W):
                s[v] = sc.unsafe_load[width=W](q * NR + v * W)
            for kk in range(k):
                comptime for v in range(NR // W):
                    d.unsafe_store(kk * NR + v * W, load_w[PANELS_I8](b, base + kk * NR + v * W, s[v]))


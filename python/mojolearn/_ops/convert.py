"""The converters (contract rules L-1, L-2, L-3, L-4, L-6, W-1..W-3).

Python checks the arguments and allocates the results; the Mojo extension does
every conversion. Non-float32 input to ``to_bf16`` or a quantizer is a TypeError:
there is no silent cast (the published release's silent float64 -> float32 cast
rounded twice).
"""
from __future__ import annotations

from .._data.array import Array, empty
from .._core.loader import cpu_native, native, require_cpu
from .._core.threads import tasks
from .._data.validate import buf, contiguous

__all__ = [
    "to_bf16", "from_bf16", "quantize_int8", "dequantize_int8",
    "quantize_int15", "dequantize_int15", "row_absmax",
]


def to_bf16(x) -> Array:
    """float32 (any rank) -> bf16 bits as uint16, same shape (rule L-2)."""
    b = buf(x, "to_bf16", "x", ("float32",))
    out = empty("uint16", b.shape, func="to_bf16", zero=False)
    if b.size:
        native().to_bf16((b.addr, out.address, b.size, tasks()))
    return out


def from_bf16(bits) -> Array:
    """bf16 bits (uint16, any rank) -> float32, exactly (rule L-1)."""
    b = buf(bits, "from_bf16", "bits", ("uint16",))
    out = empty("float32", b.shape, func="from_bf16", zero=False)
    if b.size:
        native().from_bf16((b.addr, out.address, b.size, tasks()))
    return out


def _absmax_arg(absmax, func, m):
    """``absmax=`` of a quantizer: float32 (m,), checked without touching data, or None."""
    if absmax is None:
        return None
    a = buf(absmax, func, "absmax", ("float32",), ndim=1, copy=False)
    if a.shape[0] != m:
        raise ValueError(
            f"mojolearn: {func}: absmax has length {a.shape[0]} but x has {m} rows; pass one "
            "absmax per row (row_absmax of each piece of the rows, max-reduced)")
    return a


def quantize_int8(x, *, absmax=None):
    """2-D float32 -> (int8 codes (m, k), int32 exponents (m,)) (rules L-3, L-4).

    ``absmax`` (float32 (m,)): x holds some columns of longer rows whose absmax is this
    (``row_absmax`` of every piece, max-reduced): each row's exponent is that of the
    whole row, so the codes are the whole rows' codes for these columns (rule L-8, the
    k-split). It is read as one more element of the row."""
    b = buf(x, "quantize_int8", "x", ("float32",), ndim=2, copy=False)
    m, k = b.shape
    am = _absmax_arg(absmax, "quantize_int8", m)
    b = contiguous(b, "quantize_int8", "x")
    codes = empty("int8", (m, k), func="quantize_int8")
    exps = empty("int32", (m,), func="quantize_int8")
    if m:
        if am is None:
            native().quantize_int8((b.addr, codes.address, exps.address, m, k, tasks()))
        else:
            am = contiguous(am, "quantize_int8", "absmax")
            _cpu_only("quantize_int8")
            cpu_native().quantize_int8_part((b.addr, am.addr, codes.address, exps.address, m,
                                             k, tasks()))
    return codes, exps


def quantize_int15(x, *, absmax=None):
    """2-D float32 -> (hi int8, lo int8, int32 exponents); code = hi*128 + lo (W-1..W-3).
    ``absmax`` as for ``quantize_int8`` (the k-split, rule L-8)."""
    b = buf(x, "quantize_int15", "x", ("float32",), ndim=2, copy=False)
    m, k = b.shape
    am = _absmax_arg(absmax, "quantize_int15", m)
    b = contiguous(b, "quantize_int15", "x")
    hi = empty("int8", (m, k), func="quantize_int15")
    lo = empty("int8", (m, k), func="quantize_int15")
    exps = empty("int32", (m,), func="quantize_int15")
    if m:
        if am is None:
            native().quantize_int15(
                (b.addr, hi.address, lo.address, exps.address, m, k, tasks())
            )
        else:
            am = contiguous(am, "quantize_int15", "absmax")
            _cpu_only("quantize_int15")
            cpu_native().quantize_int15_part((b.addr, am.addr, hi.address, lo.address,
                                              exps.address, m, k, tasks()))
    return hi, lo, exps


def row_absmax(x) -> Array:
    """float32 (m, k) -> float32 (m,): each row's absmax as the quantizers read it (rule
    L-3: the largest |x|; NaN and subnormal values do not count; 0 for a row with none).
    A max, so the absmax of rows split into column pieces is the max of the pieces'
    (reduce it across workers, e.g. all_reduce with MAX, and pass it as ``absmax=``)."""
    b = buf(x, "row_absmax", "x", ("float32",), ndim=2)
    m, k = b.shape
    out = empty("float32", (m,), func="row_absmax")
    if m and k:
        _cpu_only("row_absmax")
        cpu_native().row_absmax((b.addr, out.address, m, k, tasks()))
    return out


def _cpu_only(func):
    require_cpu(func, "absmax= and row_absmax (the k-split's quantization)")


def _exps_for(exponents, func, m):
    e = buf(exponents, func, "exponents", ("int32",), ndim=1, copy=False)
    if e.shape[0] != m:
        raise ValueError(
            f"mojolearn: {func}: exponents has length {e.shape[0]} but the codes have "
            f"{m} rows; pass the exponents returned with these codes"
        )
    return e


def dequantize_int8(codes, exponents) -> Array:
    """ftz(f32(code) * pow2f(e)) per row (rule L-6)."""
    c = buf(codes, "dequantize_int8", "codes", ("int8",), ndim=2, copy=False)
    m, k = c.shape
    e = _exps_for(exponents, "dequantize_int8", m)
    c = contiguous(c, "dequantize_int8", "codes")
    e = contiguous(e, "dequantize_int8", "exponents")
    out = empty("float32", (m, k), func="dequantize_int8")
    if m and k:
        native().dequantize_int8((c.addr, e.addr, out.address, m, k, tasks()))
    return out


def dequantize_int15(hi, lo, exponents) -> Array:
    """ftz(f32(hi*128 + lo) * pow2f(e)) per row (rule W-3)."""
    h = buf(hi, "dequantize_int15", "hi", ("int8",), ndim=2, copy=False)
    l = buf(lo, "dequantize_int15", "lo", ("int8",), ndim=2, copy=False)
    if h.shape != l.shape:
        raise ValueError(
            f"mojolearn: dequantize_int15: hi has shape {h.shape} but lo has {l.shape}; "
            "pass the two planes returned together by quantize_int15"
        )
    m, k = h.shape
    e = _exps_for(exponents, "dequantize_int15", m)
    h = contiguous(h, "dequantize_int15", "hi")
    l = contiguous(l, "dequantize_int15", "lo")
    e = contiguous(e, "dequantize_int15", "exponents")
    out = empty("float32", (m, k), func="dequantize_int15")
    if m and k:
        native().dequantize_int15(
            (h.addr, l.addr, e.addr, out.address, m, k, tasks())
        )
    return out

"""The GEMM operands' checks that need no data: the layout flags, the shapes they
give, a column-major operand seen as the row-major array it is the transpose of, a
quantized tuple read into its planes, and unexpected keywords refused by name. The
entries (gemm.py), prepared weights (prepared.py) and the k-split (ksplit.py) call
these where an argument enters; each returns the checked ``Buf`` views that travel
down, so no layer reads an argument twice."""
from __future__ import annotations

from .._data.buf import Buf
from .._data.validate import buf

__all__ = ["flag", "layout", "shapes", "stored_transposed", "int_operand", "no_extra"]


def flag(func, name, v):
    if isinstance(v, bool):
        return v
    if type(v).__name__ == "bool" and type(v).__module__ == "numpy":  # numpy.bool_
        return bool(v)
    raise TypeError(f"mojolearn: {func}: {name} must be bool, got {type(v).__name__}")


def layout(func, transpose_a, transpose_b):
    transpose_a = flag(func, "transpose_a", transpose_a)
    transpose_b = flag(func, "transpose_b", transpose_b)
    if transpose_a and transpose_b:
        raise ValueError(
            f"mojolearn: {func}: transpose_a and transpose_b together are not supported "
            "(fp32.v1 section 7); compute (b @ a).T instead or transpose one operand yourself"
        )
    return transpose_a, transpose_b


def shapes(func, ash, bsh, transpose_a, transpose_b):
    if transpose_a:
        k, m = ash
    else:
        m, k = ash
    if transpose_b:
        n, kb = bsh
    else:
        kb, n = bsh
    if k != kb:
        lay = "TN a.T @ b" if transpose_a else ("NT a @ b.T" if transpose_b else "NN a @ b")
        raise ValueError(
            f"mojolearn: {func}: inner dimensions differ for {lay}: a has shape {ash}, "
            f"b has shape {bsh} (k = {k} vs {kb})"
        )
    return m, n, k


def stored_transposed(b):
    """A host operand laid out column-major (numpy's ``x.T`` of a C-ordered array,
    torch's ``w.t()``) as the C-contiguous array it is the transpose of, or None."""
    if b.ndim != 2 or b.c_contiguous or not b.pinned or b.device is not None:
        return None
    t = Buf(b.addr, b.dtype, tuple(reversed(b.shape)), tuple(reversed(b.strides)),
            b.readonly, b.keep, b.pinned, b.device)
    return t if t.c_contiguous else None


def int_operand(func, x, arg, nplanes):
    """float32 2-D (quantized later) or the quantized tuple, checked without
    touching data -> (rows, k, named Bufs, is_tuple)."""
    if isinstance(x, tuple):
        want = "(codes, exponents)" if nplanes == 1 else "(hi, lo, exponents)"
        if len(x) != nplanes + 1:
            raise ValueError(
                f"mojolearn: {func}: {arg} as a quantized tuple must be {want}, "
                f"got a tuple of {len(x)}; pass a 2-D float32 matrix or the tuple "
                f"returned by the quantizer"
            )
        planes = [buf(p, func, f"{arg}[{i}]", ("int8",), ndim=2, copy=False)
                  for i, p in enumerate(x[:-1])]
        for p in planes[1:]:
            if p.shape != planes[0].shape:
                raise ValueError(
                    f"mojolearn: {func}: {arg}'s hi and lo planes differ in shape "
                    f"({planes[0].shape} vs {p.shape}); pass the planes returned "
                    f"together by quantize_int15"
                )
        e = buf(x[-1], func, f"{arg}[{nplanes}] (exponents)", ("int32",), ndim=1, copy=False)
        rows, k = planes[0].shape
        if e.shape[0] != rows:
            raise ValueError(
                f"mojolearn: {func}: {arg}'s exponents have length {e.shape[0]} but its "
                f"codes have {rows} rows; pass the exponents returned with these codes"
            )
        named = [(f"{arg}[{i}]", p) for i, p in enumerate(planes)]
        named.append((f"{arg}[{nplanes}] (exponents)", e))
        return rows, k, named, True
    xb = buf(x, func, arg, ("float32",), ndim=2, copy=False)
    return xb.shape[0], xb.shape[1], [(arg, xb)], False


def no_extra(func, extra, takes):
    """Refuse keywords a GEMM does not take, naming them and what it takes."""
    if not extra:
        return
    names = ", ".join(sorted(extra))
    why = ""
    if "transpose_a" in extra or "transpose_b" in extra:  # the integer GEMMs
        why = (" the product is always a @ b.T: a is (m, k) and b is (n, k), each a "
               "float32 matrix or its quantized tuple; transpose an operand yourself "
               "(e.g. numpy's b.T) before passing it;")
    raise TypeError(
        f"mojolearn: {func}: unexpected keyword argument(s) {names};{why} "
        f"{func} accepts {takes}"
    )

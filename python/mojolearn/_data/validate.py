"""Argument checks shared by the converters and the GEMMs. Every refusal is a
built-in exception whose text starts with ``mojolearn:`` and names the function,
the argument, what was refused and the way out. Nothing here touches data."""
from __future__ import annotations

from .buffers import Buf, copy_buf, read

_CAST_HINT = {
    "float32": "convert it yourself first (e.g. numpy's x.astype(np.float32)); "
    "mojolearn never casts silently",
    "uint16": "pass bf16 bits as a uint16 buffer (mojolearn.linalg.to_bf16 makes them)",
    "int8": "pass int8 codes (mojolearn.linalg.quantize_int8 / quantize_int15 make them)",
    "int32": "pass int32 exponents as returned by the quantizer",
}


def buf(obj, func: str, arg: str, dtypes: tuple, ndim: int | None = None, lists=False,
        copy: bool = True) -> Buf:
    """Read ``obj`` and check dtype / rank; a non-contiguous buffer is copied to a
    contiguous one (a byte copy: the bits are unchanged). With ``copy=False`` the
    caller's view comes back as it is: check everything that needs no data first,
    then call ``contiguous`` (so a refusal never costs a copy)."""
    b = read(obj, func=func, arg=arg, lists=lists)
    if b.dtype not in dtypes:
        want = " or ".join(dtypes)
        hint = _CAST_HINT.get(dtypes[0], "")
        raise TypeError(
            f"mojolearn: {func}: {arg} must be {want}, got {b.dtype}"
            + (f"; {hint}" if hint else "")
        )
    if ndim is not None and b.ndim != ndim:
        raise ValueError(
            f"mojolearn: {func}: {arg} must be {ndim}-D, got {b.ndim}-D with shape {b.shape}"
        )
    if copy:
        b = contiguous(b, func, arg)
    return b


def contiguous(b: Buf, func: str, arg: str) -> Buf:
    """``b`` itself when C-contiguous and pinned, else a C-contiguous byte copy of it
    (made while this thread holds the GIL, from the view already read: the caller's
    object is not read again)."""
    if b.device is not None and not b.c_contiguous and b.size:
        raise ValueError(
            f"mojolearn: {func}: {arg} is a non-contiguous tensor in device memory (shape "
            f"{b.shape}, byte strides {b.strides}); mojolearn never copies device memory: "
            "make it contiguous on the device first (e.g. torch's x.contiguous())"
        )
    if (not b.c_contiguous or not b.pinned) and b.size:
        b = read(copy_buf(b, func=func, arg=arg), func=func, arg=arg)
    return b


def out_buf(out, func: str, dtype: str, shape: tuple, device_ok: bool = False) -> Buf:
    """Check a caller-supplied ``out``: exact dtype and shape, C-contiguous, writable."""
    b = read(out, func=func, arg="out", device_ok=device_ok)
    if b.dtype != dtype:
        raise TypeError(f"mojolearn: {func}: out must be {dtype}, got {b.dtype}")
    if tuple(b.shape) != tuple(shape):
        raise ValueError(f"mojolearn: {func}: out must have shape {tuple(shape)}, got {tuple(b.shape)}")
    if not b.c_contiguous:
        raise ValueError(f"mojolearn: {func}: out must be C-contiguous (it is written in place)")
    if b.readonly:
        raise ValueError(f"mojolearn: {func}: out is read-only")

    return b

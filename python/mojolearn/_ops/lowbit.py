"""The implementation of ``mojolearn.lowbit``: what it computes and promises is
that public module's docstring (python/mojolearn/lowbit.py), which re-exports
this module's public names."""

from __future__ import annotations

import importlib

from .._data.array import Array
from .._data.buffers import copy_buf, read, to_array

__all__ = [
    "FORMATS", "BF16Weight", "Int8Weight", "is_packed", "pack_one", "pack",
    "unpack", "materialize", "materialize_one", "widen_bf16", "format_of",
]

FORMATS = ("float32", "bfloat16", "int8")
"""The weight formats: 'float32' (no packing), 'bfloat16' and 'int8'."""

_CONVERTERS = ("to_bf16", "from_bf16", "quantize_int8", "dequantize_int8")


# ---------------------------------------------------------------------------
# The converters (the Mojo extension, through mojolearn.linalg)
# ---------------------------------------------------------------------------


def _linalg(func: str):
    """The module holding the converters (convert.py, which mojolearn.linalg
    re-exports), or ImportError naming what is missing. Imported at call time so that
    the storage classes and the non-converting functions work in an install whose
    converters cannot be imported."""
    try:
        mod = importlib.import_module("mojolearn._ops.convert")
    except ImportError as e:
        raise ImportError(
            f"mojolearn: lowbit.{func}: converting weights needs mojolearn.linalg "
            f"and the compiled Mojo extension (mojolearn._native_<isa>), which could not "
            f"be imported ({e}); build the extension (`make build`) or install a "
            f"mojolearn wheel that includes it"
        ) from e
    missing = [n for n in _CONVERTERS if not hasattr(mod, n)]
    if missing:
        raise ImportError(
            f"mojolearn: lowbit.{func}: mojolearn.linalg has no {', '.join(missing)}; "
            f"this install is incomplete - reinstall mojolearn"
        )
    return mod


def _convert(func: str, conv: str, *args):
    """Run converter ``conv`` of mojolearn.linalg; a missing extension is an
    ImportError that says which lowbit function needed it."""
    fn = getattr(_linalg(func), conv)
    try:
        return fn(*args)
    except ImportError as e:
        raise ImportError(
            f"mojolearn: lowbit.{func}: the {conv} converter needs the compiled "
            f"Mojo extension (mojolearn._native_<isa>), which is missing ({e}); build it "
            f"(`make build`) or install a mojolearn wheel that includes it"
        ) from e


# ---------------------------------------------------------------------------
# The packed tensor types
# ---------------------------------------------------------------------------


def _hold(obj, func: str, arg: str, dtype: str, ndim: int, hint: str):
    """Check ``obj`` is a ``ndim``-D ``dtype`` buffer; return (object to keep, shape).

    A C-contiguous buffer with the buffer protocol is kept as it is (zero
    copy); anything else is copied, byte for byte, into a mojolearn.Array.
    """
    if isinstance(obj, (list, tuple)):
        raise TypeError(
            f"mojolearn: {func}: {arg} must be a {ndim}-D {dtype} buffer, got a "
            f"nested {type(obj).__name__}; {hint}"
        )
    b = read(obj, func=func, arg=arg)
    if b.dtype != dtype or b.ndim != ndim:
        raise TypeError(
            f"mojolearn: {func}: {arg} must be a {ndim}-D {dtype} buffer, got "
            f"{b.ndim}-D {b.dtype} with shape {tuple(b.shape)}; {hint}"
        )
    keep = obj
    if not b.c_contiguous or not _has_buffer(obj):
        keep = copy_buf(b, func=func, arg=arg)  # from the view read above
    return keep, tuple(int(d) for d in b.shape)


def _has_buffer(obj) -> bool:
    if isinstance(obj, Array):
        return True
    try:
        memoryview(obj).release()
    except TypeError:
        return False
    return True


class BF16Weight:
    """A 2-D weight stored as bf16 bits (uint16), widened exactly when used.

    ``bits`` is any 2-D uint16 buffer. A C-contiguous buffer is kept, not
    copied: ``.bits`` is the caller's object, so writing to it changes the
    weight. Anything else is copied into a mojolearn.Array.
    """

    __slots__ = ("_bits", "_shape")
    format = "bfloat16"

    def __init__(self, bits):
        self._bits, self._shape = _hold(
            bits, "BF16Weight", "bits", "uint16", 2,
            "make bf16 bits with mojolearn.lowbit.pack_one(x, 'bfloat16') or "
            "mojolearn.linalg.to_bf16 (a 2-D float32 matrix)",
        )

    @property
    def bits(self):
        """The uint16 bits (readable through memoryview / numpy.asarray)."""
        return self._bits

    @property
    def shape(self) -> tuple:
        """(rows, cols) of the weight."""
        return self._shape

    @property
    def nbytes(self) -> int:
        """Bytes of the stored bits (2 per weight)."""
        return 2 * self._shape[0] * self._shape[1]

    def __repr__(self) -> str:
        return f"mojolearn.lowbit.BF16Weight(shape={self._shape})"


class Int8Weight:
    """A 2-D weight stored as int8 codes and one int32 exponent per row.

    Row ``i`` is ``codes[i] * 2**exponents[i]``. ``codes`` is any 2-D int8
    buffer, ``exponents`` any int32 buffer of shape ``(rows,)``; C-contiguous
    buffers are kept, not copied.
    """

    __slots__ = ("_codes", "_exponents", "_shape")
    format = "int8"

    def __init__(self, codes, exponents):
        hint = ("make codes and exponents with mojolearn.lowbit.pack_one(x, 'int8') "
                "or mojolearn.linalg.quantize_int8 (a 2-D float32 matrix)")
        self._codes, self._shape = _hold(codes, "Int8Weight", "codes", "int8", 2, hint)
        self._exponents, eshape = _hold(
            exponents, "Int8Weight", "exponents", "int32", 1, hint)
        if eshape != (self._shape[0],):
            raise TypeError(
                f"mojolearn: Int8Weight: exponents must have shape "
                f"({self._shape[0]},), one per row of codes {self._shape}, got "
                f"{eshape}; pass the exponents made together with these codes"
            )

    @property
    def codes(self):
        """The int8 codes, shape (rows, cols)."""
        return self._codes

    @property
    def exponents(self):
        """The int32 power-of-two exponents, shape (rows,)."""
        return self._exponents

    @property
    def shape(self) -> tuple:
        """(rows, cols) of the weight."""
        return self._shape

    @property
    def nbytes(self) -> int:
        """Bytes of the codes plus the exponents (1 per weight, 4 per row)."""
        return self._shape[0] * self._shape[1] + 4 * self._shape[0]

    def __repr__(self) -> str:
        return f"mojolearn.lowbit.Int8Weight(shape={self._shape})"


def is_packed(v) -> bool:
    """True for a BF16Weight or an Int8Weight."""
    return isinstance(v, (BF16Weight, Int8Weight))


# ---------------------------------------------------------------------------
# One tensor
# ---------------------------------------------------------------------------


def _check_fmt(fmt, func: str) -> str:
    if not isinstance(fmt, str) or fmt not in FORMATS:
        raise ValueError(
            f"mojolearn: lowbit.{func}: fmt={fmt!r} is not a weight format; "
            f"choose one of {', '.join(FORMATS)}"
        )
    return fmt


def _copy_packed(v, func: str):
    """A bit-for-bit copy of a packed tensor (no float32 round trip)."""
    if isinstance(v, BF16Weight):
        return BF16Weight(to_array(v.bits, func=func, arg="bits"))
    return Int8Weight(to_array(v.codes, func=func, arg="codes"),
                      to_array(v.exponents, func=func, arg="exponents"))


def _float32(value, func: str, name: str, rank2: bool):
    """Read a float32 tensor (buffer or nested lists) or refuse it by name."""
    b = read(value, func=f"lowbit.{func}", arg=name, lists=True)
    if b.dtype != "float32":
        way = ("wrap bf16 bits in BF16Weight(bits)" if b.dtype == "uint16" else
               "wrap int8 codes in Int8Weight(codes, exponents)" if b.dtype == "int8" else
               "convert it to float32 first (e.g. numpy's x.astype(np.float32)); "
               "mojolearn never casts silently")
        raise TypeError(
            f"mojolearn: lowbit.{func}: {name} has dtype {b.dtype}; only float32 "
            f"tensors are packed or carried; {way}"
        )
    if rank2 and b.ndim != 2:
        raise ValueError(
            f"mojolearn: lowbit.{func}: {name} is {b.ndim}-D with shape "
            f"{tuple(b.shape)}; only 2-D matrices are packed; pass 1-D and 3-D "
            f"tensors through pack(weights, fmt), which keeps them as float32"
        )
    return b


def materialize_one(value, name: str = "weight") -> Array:
    """The float32 values of one tensor: a packed tensor widened exactly, a
    float32 tensor copied."""
    if isinstance(value, BF16Weight):
        return _convert("materialize_one", "from_bf16", value.bits)
    if isinstance(value, Int8Weight):
        return _convert("materialize_one", "dequantize_int8", value.codes, value.exponents)
    _float32(value, "materialize_one", name, rank2=False)
    return to_array(value, func="lowbit.materialize_one", arg=name, lists=True)


def pack_one(value, fmt, name: str = "weight"):
    """Pack one 2-D float32 matrix in ``fmt``.

    "float32" returns a float32 copy (an Array); "bfloat16" a BF16Weight;
    "int8" an Int8Weight. A packed value in the same format is copied bit for
    bit; in another format it is widened to float32 first.
    """
    fmt = _check_fmt(fmt, "pack_one")
    fresh = False  # True once ``value`` is an Array made here (no copy needed)
    if is_packed(value):
        if value.format == fmt:
            return _copy_packed(value, "lowbit.pack_one")
        value, fresh = materialize_one(value, name), True
    else:
        _float32(value, "pack_one", name, rank2=True)
        if isinstance(value, (list, tuple)):
            value = to_array(value, func="lowbit.pack_one", arg=name, lists=True)
            fresh = True
    if fmt == "float32":
        return value if fresh else to_array(value, func="lowbit.pack_one", arg=name)
    if fmt == "bfloat16":
        return BF16Weight(_convert("pack_one", "to_bf16", value))
    codes, exponents = _convert("pack_one", "quantize_int8", value)
    return Int8Weight(codes, exponents)


def widen_bf16(bits) -> Array:
    """bf16 bits (uint16, any rank, or a BF16Weight) -> float32, exactly."""
    if isinstance(bits, BF16Weight):
        bits = bits.bits
    b = read(bits, func="lowbit.widen_bf16", arg="bits")
    if b.dtype != "uint16":
        raise TypeError(
            f"mojolearn: lowbit.widen_bf16: bits has dtype {b.dtype}; bf16 bits "
            f"are uint16; make them with mojolearn.linalg.to_bf16 or pass the "
            f".bits of a BF16Weight"
        )
    return _convert("widen_bf16", "from_bf16", bits)


# ---------------------------------------------------------------------------
# Dicts of tensors
# ---------------------------------------------------------------------------


_ONE_TENSOR = {
    "pack": "pack_one(tensor, fmt)",
    "unpack": "materialize_one(tensor)",
    "format_of": "the tensor's .format (is_packed(tensor) tells if it has one)",
}


def _check_dict(weights, func: str, what: str) -> dict:
    if not isinstance(weights, dict):
        raise TypeError(
            f"mojolearn: lowbit.{func}: {what} must be a dict of name -> tensor, got "
            f"{type(weights).__name__}; pass {{name: tensor}}, or for one tensor use "
            f"{_ONE_TENSOR[func]}"
        )
    return weights


def format_of(weights) -> str:
    """The format a dict of weights is stored in: "bfloat16" or "int8" when
    its packed tensors are of that kind, "float32" when none is packed. A dict
    mixing bf16 and int8 tensors is a ValueError."""
    _check_dict(weights, "format_of", "weights")
    seen = {}
    for k, v in weights.items():
        if is_packed(v):
            seen.setdefault(v.format, k)
    if len(seen) > 1:
        listing = ", ".join(f"{k!r} is {f}" for f, k in seen.items())
        raise ValueError(
            f"mojolearn: lowbit.format_of: weights mixes packed formats ({listing}); "
            f"a dict has one format; make it uniform with pack(weights, fmt)"
        )
    return next(iter(seen), "float32")


def pack(weights, fmt) -> dict:
    """A new dict with every 2-D tensor packed in ``fmt`` (chosen by rank, not
    by name) and every other tensor a float32 copy. See the module docstring."""
    _check_dict(weights, "pack", "weights")
    fmt = _check_fmt(fmt, "pack")
    out = {}
    for k, v in weights.items():
        name = f"weights[{k!r}]"
        if is_packed(v):
            out[k] = pack_one(v, fmt, name)
            continue
        b = _float32(v, "pack", name, rank2=False)
        if b.ndim == 2:
            out[k] = pack_one(v, fmt, name)
        else:
            out[k] = to_array(v, func="lowbit.pack", arg=name, lists=True)
    return out


def unpack(weights, what: str = "weights"):
    """(dict of float32 Arrays, format): packed tensors widened exactly, float32
    tensors copied; ``format`` is ``format_of(weights)``."""
    _check_dict(weights, "unpack", what)
    fmt = format_of(weights)
    out = {}
    for k, v in weights.items():
        out[k] = materialize_one(v, f"{what}[{k!r}]")
    return out, fmt


materialize = unpack
"""The same function as ``unpack``: (dict of float32 Arrays, format)."""

"""Reading caller inputs without copying them.

WHAT IS ACCEPTED
    Any object with the buffer protocol (numpy arrays, memoryview, array.array,
    bytes, mojolearn.Array), any DLPack tensor or capsule (``__dlpack__``: torch,
    JAX, CuPy; see dlpack.py), any object with ``__array_interface__``, and - only
    where a function says so - nested lists of numbers (read as float32; at most
    64 levels deep; a list that contains itself is refused rather than followed).

WHAT COMES BACK
    A ``Buf``: the address, dtype string, shape, byte strides and the object that
    keeps the memory alive. Nothing is converted: a float64 input stays float64
    and the caller refuses it by name (no silent casts).
"""

from __future__ import annotations

import ctypes

from .._core import loader as _native_loader
from .array import DTYPES, Array, empty
from .buf import ITEMSIZE as _ITEMSIZE, Buf
from . import dlpack as _dlpack

__all__ = ["Buf", "read", "to_array", "copy_buf"]


class _PyBuffer(ctypes.Structure):
    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.c_void_p),
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.POINTER(ctypes.c_ssize_t)),
        ("strides", ctypes.POINTER(ctypes.c_ssize_t)),
        ("suboffsets", ctypes.POINTER(ctypes.c_ssize_t)),
        ("internal", ctypes.c_void_p),
    ]


_GetBuffer = ctypes.pythonapi.PyObject_GetBuffer
_GetBuffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_GetBuffer.restype = ctypes.c_int
_Release = ctypes.pythonapi.PyBuffer_Release
_Release.argtypes = [ctypes.POINTER(_PyBuffer)]
_Release.restype = None
_PyBUF_STRIDED_RO = 0x18

# struct format char -> (kind, signed)
_FMT = {
    "f": "float", "d": "float", "e": "float",
    "b": "int", "h": "int", "i": "int", "l": "int", "q": "int", "n": "int",
    "B": "uint", "H": "uint", "I": "uint", "L": "uint", "Q": "uint", "N": "uint",
    "?": "bool", "c": "uint",
}
_FLOAT_NAMES = {2: "float16", 4: "float32", 8: "float64"}

_TYPESTR_KIND = {"f": "float", "i": "int", "u": "uint", "b": "bool", "c": "complex"}


def _dtype_name(kind: str, size: int) -> str:
    if kind == "float":
        return _FLOAT_NAMES.get(size, f"float{8 * size}")
    if kind == "bool":
        return "bool"
    if kind == "complex":
        return f"complex{8 * size}"
    return f"{kind}{8 * size}"


_FORMAT_NAMES = {}  # (struct format, itemsize) -> _from_format's name, as met


def _from_format(fmt: str, itemsize: int) -> str:
    """A readable dtype name for a struct format: "float32", "complex64",
    "big-endian float32"; an unknown code is named with its format string."""
    f = fmt
    order = ""
    if f and f[0] in "@=<":
        f = f[1:]
    elif f and f[0] in ">!":
        f = f[1:]
        order = "big-endian "
    if len(f) == 2 and f[0] == "Z" and _FMT.get(f[1]) == "float":
        name = _dtype_name("complex", itemsize)
    else:
        kind = _FMT.get(f)
        if kind is None:
            return f"{order}an element format {fmt!r} (not a number type)"
        name = _dtype_name(kind, itemsize)
    if order and itemsize == 1:
        return name  # byte order means nothing for one-byte items
    return order + name


def _typestr_size(typestr) -> int:
    try:
        return int(typestr[2:])
    except (TypeError, ValueError):
        return 0


def _typestr_name(typestr) -> str:
    """A readable dtype name for an __array_interface__ typestr ("<f4" -> float32,
    ">f4" -> big-endian float32)."""
    if not isinstance(typestr, str) or len(typestr) < 3:
        return f"an unreadable typestr {typestr!r}"
    kind = _TYPESTR_KIND.get(typestr[1])
    size = _typestr_size(typestr)
    if kind is None or size <= 0:
        return f"an element type {typestr!r} (not a number type)"
    name = _dtype_name(kind, size)
    if typestr[0] == ">" and size > 1:
        return "big-endian " + name
    return name


def writable_address(obj):
    """The address of a writable C-contiguous, non-empty buffer through ctypes' own view
    of it (0.3 us on the 2-core Zen 5, against 1.1 us for numpy's ``x.ctypes.data`` and
    1.6 us for the PyObject_GetBuffer call in _address), or None for any other buffer
    (read-only, strided, empty), whose address the caller reads its slower way."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(obj))
    except (TypeError, ValueError, BufferError):
        return None


def _address(mv: memoryview) -> int:
    addr = writable_address(mv)
    if addr is not None:
        return addr
    view = _PyBuffer()
    if _GetBuffer(mv, ctypes.byref(view), _PyBUF_STRIDED_RO) != 0:  # pragma: no cover
        raise TypeError("mojolearn: cannot read the buffer's address")
    addr = view.buf or 0
    _Release(ctypes.byref(view))
    return addr


MAX_LIST_DEPTH = 64  # deeper nested lists are refused (numpy's limit on dimensions too)


def _nested_lists(obj, func, arg):
    """Nested lists/tuples of numbers -> a float32 Array. Bounded: the depth is at
    most MAX_LIST_DEPTH, a list that contains itself is refused (it would loop
    forever), and the walk is iterative (no RecursionError however deep)."""
    shape = []
    x = obj
    seen = set()
    while isinstance(x, (list, tuple)):
        if id(x) in seen:
            raise ValueError(
                f"mojolearn: {func}: {arg} is a nested list that contains itself "
                f"(at depth {len(shape)}); pass a finite nested list of numbers or a buffer"
            )
        if len(shape) >= MAX_LIST_DEPTH:
            raise ValueError(
                f"mojolearn: {func}: {arg} is a nested list more than {MAX_LIST_DEPTH} "
                f"levels deep; a tensor has at most {MAX_LIST_DEPTH} dimensions: pass "
                f"a buffer (e.g. a numpy array) or flatten the nesting"
            )
        seen.add(id(x))
        shape.append(len(x))
        if not x:
            break
        x = x[0]
    ndim = len(shape)
    flat = []
    ragged = (f"mojolearn: {func}: {arg} is a ragged nested list; every list at one "
              f"depth must have the same length (shape {tuple(shape)} from the first "
              f"elements); pad it or pass a buffer")
    stack = [(obj, 0)]
    while stack:
        o, depth = stack.pop()
        if depth == ndim:
            if isinstance(o, (list, tuple)):
                raise ValueError(ragged)
            if isinstance(o, bool) or not isinstance(o, (int, float)):
                raise TypeError(
                    f"mojolearn: {func}: {arg} holds {type(o).__name__}, expected "
                    f"numbers (int or float, read as float32)"
                )
            if isinstance(o, int):
                try:
                    o = float(o)
                except OverflowError:
                    raise ValueError(
                        f"mojolearn: {func}: {arg} holds an int of {o.bit_length()} bits, "
                        f"too large for any float; pass values within float32 range"
                    ) from None
            flat.append(o)
            continue
        if not isinstance(o, (list, tuple)) or len(o) != shape[depth]:
            raise ValueError(ragged)
        for e in reversed(o):
            stack.append((e, depth + 1))
    out = empty("float32", tuple(shape), func=func, what=f"float32 copy of {arg}")
    if flat:
        flat_view = (ctypes.c_float * len(flat)).from_address(ctypes.addressof(out))
        flat_view[:] = flat
    return out


def read(obj, *, func: str, arg: str, lists: bool = False, device_ok: bool = False) -> Buf:
    """Describe ``obj``'s memory without copying. See module docstring. A DLPack
    tensor in device memory is refused by name unless ``device_ok`` (the entries
    that compute on device-resident operands pass it; see _device.resident)."""
    if isinstance(obj, Buf):  # already read (e.g. a consumed DLPack capsule)
        return obj
    if isinstance(obj, Array):
        shape = obj._ml_shape
        isz = DTYPES[obj._ml_dtype][1]
        strides = []
        s = isz
        for d in reversed(shape):
            strides.append(s)
            s *= d
        return Buf(ctypes.addressof(obj), obj._ml_dtype, shape, tuple(reversed(strides)), False, obj)
    if lists and isinstance(obj, (list, tuple)):
        return read(_nested_lists(obj, func, arg), func=func, arg=arg)
    try:
        mv = memoryview(obj)
    except TypeError:
        mv = None
    if mv is not None:
        if mv.suboffsets:
            raise TypeError(f"mojolearn: {func}: {arg} is an indirect (PIL-style) buffer")
        fk = (mv.format, mv.itemsize)
        dtype = _FORMAT_NAMES.get(fk)
        if dtype is None:
            dtype = _FORMAT_NAMES.setdefault(fk, _from_format(*fk))
        shape = tuple(mv.shape) if mv.shape is not None else (mv.nbytes,)
        strides = tuple(mv.strides) if mv.strides is not None else (1,)
        addr = _address(mv) if mv.nbytes else 0
        return Buf(addr, dtype, shape, strides, mv.readonly, mv)
    if _is_dlpack(obj):
        return _read_dlpack(obj, func, arg, device_ok)
    ai = getattr(obj, "__array_interface__", None)
    if isinstance(ai, dict):
        typestr = ai["typestr"]
        dtype = _typestr_name(typestr)
        shape = tuple(int(d) for d in ai["shape"])
        data = ai.get("data")
        if data is None or not isinstance(data, tuple):
            raise TypeError(
                f"mojolearn: {func}: {arg}'s __array_interface__ has no data address"
            )
        isz = _ITEMSIZE.get(dtype) or _typestr_size(typestr)
        st = ai.get("strides")
        if st is None:
            strides, s = [], isz
            for d in reversed(shape):
                strides.append(s)
                s *= d
            st = tuple(reversed(strides))
        return Buf(int(data[0]), dtype, shape, tuple(int(s) for s in st), bool(data[1]), obj,
                   pinned=False)
    what = ("a buffer, a DLPack tensor or nested lists" if lists else
            "a buffer or DLPack tensor (numpy array, torch tensor, memoryview, array.array, mojolearn.Array)")
    raise TypeError(f"mojolearn: {func}: {arg} must be {what}, got {type(obj).__name__}")


def _is_dlpack(obj) -> bool:
    """A DLPack producer (``__dlpack__``) or a raw DLPack capsule."""
    return hasattr(type(obj), "__dlpack__") or type(obj).__name__ == "PyCapsule"


def _read_dlpack(obj, func, arg, device_ok=False) -> Buf:
    return _dlpack.read(obj, func=func, arg=arg, device_ok=device_ok)


def to_array(obj, *, func: str, arg: str, lists: bool = False) -> Array:
    """A C-contiguous mojolearn.Array copy of ``obj`` with the same dtype and shape."""
    b = read(obj, func=func, arg=arg, lists=lists)
    if isinstance(b.keep, Array) and lists and isinstance(obj, (list, tuple)):
        return b.keep
    return copy_buf(b, func=func, arg=arg)


def copy_buf(b: Buf, *, func: str, arg: str) -> Array:
    """A C-contiguous mojolearn.Array copy of the memory ``b`` views (a byte copy: the
    bits are unchanged), made from the view already read: the caller's object is not
    read a second time."""
    if b.device is not None:  # pragma: no cover - read() refuses device memory here
        raise ValueError(f"mojolearn: {func}: {arg} is in device memory; it is never copied")
    if b.dtype not in DTYPES:
        raise TypeError(f"mojolearn: {func}: {arg} has unsupported dtype {b.dtype}")
    out = empty(b.dtype, b.shape, func=func, what=f"contiguous copy of {arg}")
    if b.size:
        if b.c_contiguous:
            ctypes.memmove(ctypes.addressof(out), b.addr, out.nbytes)
        else:
            _native_loader.native().strided_copy((
                b.addr, ctypes.addressof(out), b.itemsize, len(b.shape),
                list(b.shape), list(b.strides),
            ))
    return out

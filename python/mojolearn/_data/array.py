"""mojolearn.Array: the result type of every kernel.

WHAT IT IS
    A C-contiguous block of memory with a dtype string and a shape. The memory is
    a ctypes array, so ``memoryview(arr)`` and ``numpy.asarray(arr)`` read it in
    place (no copy) through the buffer protocol, and the extension writes into it
    by address. NumPy is never required.

WHY CTYPES
    Python 3.11 has no way to give a pure-Python class the buffer protocol; a
    ctypes array type has it, with the right format and shape. Each (dtype, shape)
    gets a small subclass, cached.

INDEXING
    ``memoryview(arr)`` carries ctypes' explicit little-endian format ("<f"), which
    numpy and the buffer protocol read fine but Python's memoryview cannot index;
    ``arr.memoryview()`` is the same memory with the native format ("f"), indexable
    and sliceable (``arr.memoryview()[i, j]``), still without a copy.
"""

from __future__ import annotations

import ctypes

from .dlpack import export

__all__ = ["Array", "DTYPES", "empty", "itemsize"]

# dtype string -> (ctypes scalar, itemsize, memoryview cast code)
DTYPES = {
    "float32": (ctypes.c_float, 4, "f"),
    "float64": (ctypes.c_double, 8, "d"),
    "int8": (ctypes.c_int8, 1, "b"),
    "uint8": (ctypes.c_uint8, 1, "B"),
    "int16": (ctypes.c_int16, 2, "h"),
    "uint16": (ctypes.c_uint16, 2, "H"),
    "int32": (ctypes.c_int32, 4, "i"),
    "int64": (ctypes.c_int64, 8, "q"),
}

_RESULT_DTYPES = ("float32", "int8", "int32", "int64", "uint16")

_MAX_BYTES = (1 << 62)

_libc = ctypes.CDLL(None)
_calloc = _libc.calloc
_calloc.restype = ctypes.c_void_p
_calloc.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
_malloc = _libc.malloc
_malloc.restype = ctypes.c_void_p
_malloc.argtypes = [ctypes.c_size_t]
try:
    _madvise = _libc.madvise
    _madvise.restype = ctypes.c_int
    _madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
except AttributeError:  # pragma: no cover - not Linux
    _madvise = None
_MADV_HUGEPAGE = 14
_PAGE = 4096
_HUGE_MIN = 4 << 20
_free = _libc.free
_free.argtypes = [ctypes.c_void_p]
_free.restype = None


class _CBlock:
    """Owns one calloc'ed block; freed when the Array holding it is collected."""

    __slots__ = ("ptr",)

    def __init__(self, ptr):
        self.ptr = ptr

    def __del__(self, _free=_free):
        if self.ptr:
            _free(self.ptr)
            self.ptr = None
_MMAP_MIN = 1 << 20
# a result a kernel writes in full (zero=False) from this size comes from malloc, not a
# zero-filled ctypes block: the memset of a 768 x 256 float32 result took 6-7% of a
# 768 x 64 x 256 product's time on the calling thread (AMD EPYC Zen 2, perf)
_MALLOC_MIN = 64 << 10


def itemsize(dtype: str) -> int:
    return DTYPES[dtype][1]


class Array:
    """A C-contiguous n-d array owned by mojolearn (see module docstring)."""

    __slots__ = ()
    _ml_dtype = "float32"
    _ml_shape = ()

    @property
    def dtype(self) -> str:
        """The element type: 'float32', 'uint16', 'int8', 'int32', ... (a str)."""
        return self._ml_dtype

    @property
    def shape(self) -> tuple:
        """The shape, a tuple of ints."""
        return self._ml_shape

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return len(self._ml_shape)

    @property
    def size(self) -> int:
        """The number of elements (1 for a 0-d Array)."""
        n = 1
        for d in self._ml_shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        """The bytes the elements take (size times the item size)."""
        return self.size * itemsize(self._ml_dtype)

    @property
    def address(self) -> int:
        """The address of the first element (for ctypes and native calls)."""
        return ctypes.addressof(self)

    def memoryview(self) -> memoryview:
        """A zero-copy memoryview in the native struct format, indexable."""
        if self.size == 0:
            return memoryview(self)
        mv = memoryview(self).cast("B")
        code = DTYPES[self._ml_dtype][2]
        if not self._ml_shape:
            return mv.cast(code)
        return mv.cast(code, self._ml_shape)

    def tolist(self):
        """The elements as nested Python lists."""
        if self.size == 0:
            return _empty_nested(self._ml_shape)
        mv = memoryview(self).cast("B")
        code = DTYPES[self._ml_dtype][2]
        if not self._ml_shape:
            return mv.cast(code)[0]
        return mv.cast(code, self._ml_shape).tolist()

    def copy(self) -> "Array":
        """A new Array with the same shape, dtype and bytes."""
        out = empty(self._ml_dtype, self._ml_shape)
        ctypes.memmove(ctypes.addressof(out), ctypes.addressof(self), self.nbytes)
        return out

    def reshape(self, *shape) -> "Array":
        """A copy with a new shape (same number of elements)."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        n = 1
        for d in shape:
            n *= int(d)
        if n != self.size:
            raise ValueError(
                f"mojolearn: Array.reshape: cannot reshape {self.size} elements to {shape}"
            )
        out = empty(self._ml_dtype, tuple(int(d) for d in shape))
        ctypes.memmove(ctypes.addressof(out), ctypes.addressof(self), self.nbytes)
        return out

    def tobytes(self) -> bytes:
        """The elements' bytes in C order."""
        return ctypes.string_at(ctypes.addressof(self), self.nbytes)

    def __len__(self) -> int:
        if not self._ml_shape:
            raise TypeError("mojolearn: len() of a 0-d Array")
        return self._ml_shape[0]

    def __repr__(self) -> str:
        return f"mojolearn.Array(shape={self._ml_shape}, dtype={self._ml_dtype})"

    def __eq__(self, other):  # identity of bits, not numpy semantics
        return NotImplemented

    __hash__ = None

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """DLPack export: zero-copy; the Array stays alive while a consumer holds it."""
        return export(self, stream=stream, max_version=max_version, dl_device=dl_device,
                      copy=copy)

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU, device 0: results live in host memory

    @property
    def __array_interface__(self):
        return {
            "version": 3,
            "shape": self._ml_shape,
            "typestr": _TYPESTR[self._ml_dtype],
            "data": (ctypes.addressof(self), False),
            "strides": None,
        }


_TYPESTR = {
    "float32": "<f4", "float64": "<f8", "int8": "|i1", "uint8": "|u1",
    "int16": "<i2", "uint16": "<u2", "int32": "<i4", "int64": "<i8",
}


def _empty_nested(shape):
    if not shape:
        return []
    if shape[0] == 0:
        return []
    return [_empty_nested(shape[1:]) for _ in range(shape[0])]


_CLASS_CACHE: dict = {}


def _array_class(dtype: str, shape: tuple):
    key = (dtype, shape)
    cls = _CLASS_CACHE.get(key)
    if cls is None:
        t = DTYPES[dtype][0]
        for d in reversed(shape):
            t = t * d
        cls = type("Array", (Array, t), {"_ml_dtype": dtype, "_ml_shape": shape})
        if len(_CLASS_CACHE) > 512:
            _CLASS_CACHE.clear()
        _CLASS_CACHE[key] = cls
    return cls


def empty(dtype: str, shape, *, func: str = "Array", zero: bool = True,
          what: str = "result") -> Array:
    """A new Array, zero-filled unless ``zero=False`` (for results a kernel writes in
    full: large ones then skip the memset). An impossible size is a MemoryError
    naming ``what`` the block is for (the result, or a copy of an input)."""
    if dtype not in DTYPES:
        raise TypeError(f"mojolearn: {func}: unsupported dtype {dtype!r}")
    shape = tuple(int(d) for d in shape)
    n = itemsize(dtype)
    for d in shape:
        if d < 0:
            raise ValueError(f"mojolearn: {func}: negative dimension in shape {shape}")
        n *= d
    if n > _MAX_BYTES:
        raise MemoryError(
            f"mojolearn: {func}: cannot allocate a {dtype} {what} of shape {shape} "
            f"({n} bytes, over the {_MAX_BYTES} limit); pass smaller inputs"
        )
    try:
        cls = _array_class(dtype, shape)
        if n < (_MMAP_MIN if zero else _MALLOC_MIN):
            return cls()
        # Large results come from the C allocator (calloc), whose freed blocks are
        # reused by the next call of the same size: their pages are already mapped,
        # so the kernel's first write does not fault page by page.
        ptr = _calloc(1, n) if zero else _malloc(n)
        if not ptr:
            raise MemoryError("calloc returned NULL")
        if n >= _HUGE_MIN:
            # like numpy: ask for transparent huge pages on large blocks, so the first
            # touch faults once per 2 MiB instead of once per 4 KiB
            lo = (ptr + _PAGE - 1) // _PAGE * _PAGE
            hi = (ptr + n) // _PAGE * _PAGE
            if hi > lo and _madvise is not None:
                _madvise(lo, hi - lo, _MADV_HUGEPAGE)  # advice only: the result is ignored
        arr = cls.from_address(ptr)
        arr._ml_owner = _CBlock(ptr)
        return arr
    except (MemoryError, OverflowError, OSError) as e:
        raise MemoryError(
            f"mojolearn: {func}: cannot allocate a {dtype} {what} of shape {shape} "
            f"({n / 2**30:.1f} GiB): {type(e).__name__}; free memory or pass smaller inputs"
        ) from None

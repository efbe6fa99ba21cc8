"""DLPack both ways, without copies and without numpy.

IN  (``read``)
    Any object with ``__dlpack__`` / ``__dlpack_device__`` (torch, numpy >= 1.22,
    JAX, CuPy, mojolearn.Array) or a raw ``"dltensor"`` capsule. The capsule is
    consumed as the protocol says (renamed ``"used_dltensor"``; its deleter is
    called when the returned view is collected), its DLTensor is read through
    ctypes: device, dtype (code, bits, lanes), shape, strides in elements,
    byte_offset. The result is a ``Buf`` like every other input; strided tensors
    are honoured as for buffers (``_validate.buf`` copies them by bytes).
    Refused by name: a tensor that requires grad (these entries have no
    backward), a device other than the host, a capsule already consumed, vector
    lanes. Unknown dtypes are named and refused by the caller (no silent cast).

OUT (``export``)
    ``mojolearn.Array.__dlpack__`` builds a DLManagedTensor (or the versioned one
    when the consumer asks for DLPack >= 1.0) with ctypes, wrapped in a capsule.
    The Array is kept alive until the consumer calls the deleter (or until the
    capsule is collected unconsumed), so ``torch.from_dlpack(arr)`` and
    ``numpy.from_dlpack(arr)`` are zero-copy and safe after ``del arr``.
"""
from __future__ import annotations

import ctypes

from .buf import ITEMSIZE as _ITEMSIZE, Buf

__all__ = ["read", "export", "is_capsule", "Owner", "DEVICE_NAMES", "live_exports"]

KDLCPU = 1
DEVICE_NAMES = {
    1: "cpu", 2: "cuda", 3: "cuda_host", 4: "opencl", 7: "vulkan", 8: "metal", 9: "vpi",
    10: "rocm", 11: "rocm_host", 12: "ext_dev", 13: "cuda_managed", 14: "oneapi",
    15: "webgpu", 16: "hexagon", 17: "maia",
}

# (type code, bits) -> dtype name; codes: 0 int, 1 uint, 2 float, 4 bfloat, 5 complex, 6 bool
_DTYPE = {
    (0, 8): "int8", (0, 16): "int16", (0, 32): "int32", (0, 64): "int64",
    (1, 8): "uint8", (1, 16): "uint16", (1, 32): "uint32", (1, 64): "uint64",
    (2, 16): "float16", (2, 32): "float32", (2, 64): "float64",
    (4, 16): "bfloat16", (5, 64): "complex64", (5, 128): "complex128", (6, 8): "bool",
}
_CODE = {name: key for key, name in _DTYPE.items()}
_TYPESTR = {
    "int8": "|i1", "int16": "<i2", "int32": "<i4", "int64": "<i8", "uint8": "|u1",
    "uint16": "<u2", "uint32": "<u4", "uint64": "<u8", "float16": "<f2", "float32": "<f4",
    "float64": "<f8", "complex64": "<c8", "complex128": "<c16", "bool": "|b1",
}


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _Device),
        ("ndim", ctypes.c_int32),
        ("dtype", _DType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _Managed(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _ManagedVersioned(ctypes.Structure):
    _fields_ = [("version", _Version), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64),
                ("dl_tensor", _DLTensor)]


_FLAG_READ_ONLY = 1

_api = ctypes.pythonapi
_CapsuleNew = _api.PyCapsule_New
_CapsuleNew.restype = ctypes.py_object
_CapsuleNew.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_CapsuleGetName = _api.PyCapsule_GetName
_CapsuleGetName.restype = ctypes.c_char_p
_CapsuleGetName.argtypes = [ctypes.py_object]
_CapsuleGetPointer = _api.PyCapsule_GetPointer
_CapsuleGetPointer.restype = ctypes.c_void_p
_CapsuleGetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_CapsuleSetName = _api.PyCapsule_SetName
_CapsuleSetName.restype = ctypes.c_int
_CapsuleSetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
_CapsuleIsValid = _api.PyCapsule_IsValid
_CapsuleIsValid.restype = ctypes.c_int
_CapsuleIsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_CapsuleGetPointerRaw = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api))

# capsule names must outlive every capsule: module-level bytes, never freed
_NAME = b"dltensor"
_NAME_V = b"dltensor_versioned"
_USED = b"used_dltensor"
_USED_V = b"used_dltensor_versioned"


def is_capsule(obj) -> bool:
    return type(obj).__name__ == "PyCapsule"


def _device_name(dev) -> str:
    t, i = int(dev[0]), int(dev[1])
    return f"{DEVICE_NAMES.get(t, f'DLPack device type {t}')}:{i}"


def _refuse_device(func, arg, dev):
    raise ValueError(
        f"mojolearn: {func}: {arg} is on device {_device_name(dev)}; {func} reads host "
        "memory only and mojolearn never copies device memory silently (device tensors "
        "are computed in place by matmul and matmul_bf16 on a GPU build serving that "
        "device); move it to the CPU first (e.g. torch's x.cpu())"
    )


GPU_DEVICE_TYPES = (2, 10)  # kDLCUDA, kDLROCM: the devices a GPU build can compute on


def _refuse_unserved(func, arg, dev):
    """A device tensor that no backend of this process computes on is refused by name."""
    from .._core import device as _device

    why = _device.refusal((int(dev[0]), int(dev[1])))
    if why:
        raise ValueError(
            f"mojolearn: {func}: {arg} is on device {_device_name(dev)}; {why}, and "
            "mojolearn never copies device memory silently; move it to the CPU first "
            "(e.g. torch's x.cpu())"
        )


class Owner:
    """Owns one consumed DLPack tensor: calls its deleter when collected, and keeps
    the producer alive meanwhile. Exposes ``__array_interface__`` so that a Buf
    made from it can be read again (e.g. for the byte copy of a strided tensor)."""

    __slots__ = ("ptr", "deleter", "producer", "dtype", "shape", "strides", "addr",
                 "readonly", "__weakref__")

    def __init__(self, ptr, deleter, producer):
        self.ptr = ptr
        self.deleter = deleter
        self.producer = producer
        self.dtype = None
        self.shape = ()
        self.strides = ()
        self.addr = 0
        self.readonly = False

    def __del__(self):
        ptr, d = self.ptr, self.deleter
        self.ptr = None
        if ptr and d:
            _DELETER(d)(ptr)

    @property
    def __array_interface__(self):
        return {
            "version": 3,
            "shape": self.shape,
            "typestr": _TYPESTR.get(self.dtype, "|V1"),
            "data": (self.addr, self.readonly),
            "strides": self.strides,
        }


def _consume(cap, func, arg):
    name = _CapsuleGetName(cap)
    if name in (_USED, _USED_V):
        raise ValueError(
            f"mojolearn: {func}: {arg} is a DLPack capsule that was already consumed "
            f"(named {name.decode()!r}); a capsule can be read once: ask the producer for "
            "a new one (x.__dlpack__()) or pass the tensor itself"
        )
    if name not in (_NAME, _NAME_V):
        raise TypeError(
            f"mojolearn: {func}: {arg} is a capsule named {name!r}, not a DLPack tensor "
            "('dltensor' or 'dltensor_versioned')"
        )
    ptr = _CapsuleGetPointer(cap, name)
    versioned = name == _NAME_V
    if versioned:
        mt = _ManagedVersioned.from_address(ptr)
        if mt.version.major != 1:
            raise ValueError(
                f"mojolearn: {func}: {arg} is a DLPack {mt.version.major}.{mt.version.minor} "
                "capsule; this version reads DLPack 1.x"
            )
    else:
        mt = _Managed.from_address(ptr)
    _CapsuleSetName(cap, _USED_V if versioned else _USED)
    readonly = bool(versioned and (mt.flags & _FLAG_READ_ONLY))
    return Owner(ptr, mt.deleter, None), mt.dl_tensor, readonly


def read(obj, *, func: str, arg: str, device_ok: bool = False):
    """A ``Buf`` of a DLPack producer or capsule (see module docstring). With
    ``device_ok`` a CUDA / ROCm tensor is read too (``Buf.device`` says where): it is
    exported with ``stream=-1`` (no producer-side stream ordering), because the
    caller waits for all queued device work before computing (_device.resident)."""
    producer = None
    if is_capsule(obj):
        cap = obj
    else:
        if getattr(obj, "requires_grad", False) is True:
            raise ValueError(
                f"mojolearn: {func}: {arg} requires grad, and {func} has no backward; pass "
                f"{arg}.detach(), or run the torch model inside mojolearn.torch.identical() "
                "(its products have backwards)"
            )
        lazy = [nm for nm in ("is_neg", "is_conj")
                if callable(getattr(obj, nm, None)) and getattr(obj, nm)() is True]
        if lazy:
            # torch exports such a view's memory as it is stored, without the pending
            # negation / conjugation: its values would be read with the wrong sign
            fix = "resolve_neg()" if lazy[0] == "is_neg" else "resolve_conj()"
            raise ValueError(
                f"mojolearn: {func}: {arg} is a torch view with its lazy "
                f"{'negation' if lazy[0] == 'is_neg' else 'conjugation'} bit set, and its "
                f"memory holds the values before it; pass {arg}.{fix} (a materialized copy)"
            )
        dev_fn = getattr(obj, "__dlpack_device__", None)
        on_device = False
        if dev_fn is not None:
            dev = tuple(dev_fn())
            if int(dev[0]) != KDLCPU:
                if not (device_ok and int(dev[0]) in GPU_DEVICE_TYPES):
                    _refuse_device(func, arg, dev)
                _refuse_unserved(func, arg, dev)  # before the producer exports anything
                on_device = True
        kw = {"stream": -1} if on_device else {}
        try:
            cap = obj.__dlpack__(max_version=(1, 0), **kw)
        except TypeError:
            cap = obj.__dlpack__(**kw)
        except BufferError as e:
            raise TypeError(
                f"mojolearn: {func}: {arg} ({type(obj).__name__}) refused to export "
                f"through DLPack: {e}"
            ) from None
        producer = obj
    owner, t, readonly = _consume(cap, func, arg)
    owner.producer = producer
    dev = (t.device.device_type, t.device.device_id)
    if dev[0] != KDLCPU:
        if not (device_ok and dev[0] in GPU_DEVICE_TYPES):
            _refuse_device(func, arg, dev)
        _refuse_unserved(func, arg, dev)
    code, bits, lanes = t.dtype.code, t.dtype.bits, t.dtype.lanes
    dtype = _DTYPE.get((code, bits), f"DLPack dtype (code {code}, {bits} bits)")
    if lanes != 1:
        raise TypeError(
            f"mojolearn: {func}: {arg} has {lanes}-lane vector elements ({dtype}x{lanes}); "
            "only scalar elements are read"
        )
    ndim = t.ndim
    shape = tuple(int(t.shape[i]) for i in range(ndim))
    isz = _ITEMSIZE.get(dtype, max(1, bits // 8))
    if t.strides:
        strides = tuple(int(t.strides[i]) * isz for i in range(ndim))
    else:
        st, s = [], isz
        for d in reversed(shape):
            st.append(s)
            s *= d
        strides = tuple(reversed(st))
    addr = (t.data or 0) + int(t.byte_offset)
    owner.dtype, owner.shape, owner.strides = dtype, shape, strides
    owner.addr, owner.readonly = addr, readonly
    return Buf(addr, dtype, shape, strides, readonly, owner,
               device=None if dev[0] == KDLCPU else (int(dev[0]), int(dev[1])))


# ---------------------------------------------------------------- export

class _Export:
    __slots__ = ("arr", "mt", "shape", "strides")


_LIVE: dict = {}  # managed-tensor address -> _Export (holds the Array alive)


def _delete(ptr):
    _LIVE.pop(ptr, None)


_deleter_c = _DELETER(_delete)
_DELETER_ADDR = ctypes.cast(_deleter_c, ctypes.c_void_p).value


def _capsule_destructor(cap):
    # an unconsumed capsule is being collected: the producer frees it
    for name in (_NAME, _NAME_V):
        if _CapsuleIsValid(cap, name):
            _delete(_CapsuleGetPointerRaw(cap, name))
            return


_destructor_c = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(_capsule_destructor)
_DESTRUCTOR_ADDR = ctypes.cast(_destructor_c, ctypes.c_void_p).value


def live_exports() -> int:
    """How many exported tensors a consumer still holds (for the lifetime tests)."""
    return len(_LIVE)


def export(arr, *, stream=None, max_version=None, dl_device=None, copy=None):
    """The capsule behind ``Array.__dlpack__`` (see module docstring)."""
    if stream is not None:
        raise ValueError(
            "mojolearn: Array.__dlpack__: stream must be None for a host (CPU) array, "
            f"got {stream!r}"
        )
    if dl_device is not None and tuple(int(x) for x in dl_device) != (KDLCPU, 0):
        raise BufferError(
            f"mojolearn: Array.__dlpack__: cannot export to {_device_name(dl_device)}; a "
            "mojolearn.Array lives in host memory (cpu:0)"
        )
    if copy is True:
        arr = arr.copy()
    return capsule(arr, ctypes.addressof(arr), arr.shape, arr.dtype, (KDLCPU, 0), max_version)


def capsule(owner, addr: int, shape, dtype: str, device, max_version=None):
    """A DLPack capsule over ``addr`` (C-contiguous ``shape`` of ``dtype`` on ``device``,
    a (DLPack device type, id) pair), keeping ``owner`` alive until the consumer's
    deleter runs: versioned (DLPack 1.0) when max_version allows, legacy otherwise."""
    code, bits = _CODE[dtype]
    ndim = len(shape)
    ex = _Export()
    ex.arr = owner
    ex.shape = (ctypes.c_int64 * max(ndim, 1))(*shape)
    st, s = [], 1
    for d in reversed(shape):
        st.append(s)
        s *= d
    ex.strides = (ctypes.c_int64 * max(ndim, 1))(*reversed(st))
    versioned = max_version is not None and int(tuple(max_version)[0]) >= 1
    mt = _ManagedVersioned() if versioned else _Managed()
    t = mt.dl_tensor
    t.data = addr
    t.device.device_type, t.device.device_id = device
    t.ndim = ndim
    t.dtype.code, t.dtype.bits, t.dtype.lanes = code, bits, 1
    t.shape = ctypes.cast(ex.shape, ctypes.POINTER(ctypes.c_int64))
    t.strides = ctypes.cast(ex.strides, ctypes.POINTER(ctypes.c_int64))
    t.byte_offset = 0
    mt.manager_ctx = None
    mt.deleter = _DELETER_ADDR
    if versioned:
        mt.version.major, mt.version.minor = 1, 0
        mt.flags = 0
    ex.mt = mt
    ptr = ctypes.addressof(mt)
    _LIVE[ptr] = ex
    return _CapsuleNew(ptr, _NAME_V if versioned else _NAME, _DESTRUCTOR_ADDR)

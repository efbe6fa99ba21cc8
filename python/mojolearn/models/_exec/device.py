"""Where a GPU model's buffers live and who runs its ops: the device backends of the
GPU model driver (models/_gpu.py), and the device choice of the models.

TWO BACKENDS, ONE INTERFACE
    A backend allocates, fills, reads and frees buffers (``DevBuf``), tells its free
    memory, and RUNS A PROGRAM: a list of ops ``(name, *args)``, each the name of a
    ``gpu_ref_*`` entry of the CPU extension without its prefix and that entry's own
    argument tuple (addresses, sizes, flags; _core/api.py declares them).
      GpuBackend        the GPU build (mojolearn._native_gpu): device memory is
                        allocated, copied and freed by its dev_* entries (a MAX
                        DeviceContext, not the vendor API by ctypes); a program is
                        one nn_program_dev call: every op launched in order on one
                        device context (mojo/transformer/gpu/model_launch.mojo), waited
                        for before the call returns.
      ReferenceBackend  host memory (numpy buffers; new ones are filled with NaN
                        bytes, so a read of memory no op wrote shows); a program runs
                        op by op through the CPU extension's gpu_ref_* entries: the
                        same per-thread bodies as the device kernels, looped over the
                        kernels' coordinates under the GPU's IEEE mode. The tests run
                        whole models through it (CausalLM(..., _device_backend=...)):
                        the driver, its buffer bookkeeping and the kernels'
                        arithmetic are checked on every machine.
    Nothing here computes: Python moves buffers and names ops.

DEVICE CHOICE (``resolve``)
    device=None takes the process device (mojolearn.set_device / MOJOLEARN_DEVICE):
    "cpu" the CPU; "gpu" the GPU build or a refusal; "auto" the GPU when this install
    has a GPU build that runs here, else the CPU. device="cpu", "gpu" or "gpu:0" chooses
    for one model. A GPU asked for and not available is refused by name (RuntimeError)
    before anything is read or uploaded: never a silent CPU fallback; a device id other
    than 0, or a name that is not a device, is a ValueError.

DLPACK OUT (``DeviceTensor``)
    ``forward(..., output="device")`` returns the logits where they lie, as a DLPack
    producer (``__dlpack__`` / ``__dlpack_device__``): torch.from_dlpack / cupy.from_dlpack
    read them without a copy; the buffer lives until the consumer lets it go. The
    work that wrote it has finished when the model returns, so any consumer stream
    may read it.
"""
from __future__ import annotations

import ctypes
import weakref

import numpy as np

from ..._core import device as _device
from ..._data import dlpack as _dlpack

__all__ = ["DevBuf", "GpuBackend", "ReferenceBackend", "DeviceTensor", "resolve", "DEVICES"]

DEVICES = ("cpu", "gpu", "gpu:0", "auto")
"""The device names a model takes (besides None, the process device)."""

_DL_TYPE = {"cuda": 2, "hip": 10}  # the DLPack device type of each GPU API


class DevBuf:
    """One buffer of a backend: ``addr`` (device address, or host address for the
    reference backend), ``nbytes``, ``dtype`` (a numpy dtype) and ``shape``. Freed
    when collected (or by ``free()``)."""

    __slots__ = ("backend", "addr", "nbytes", "dtype", "shape", "_keep", "_fin", "__weakref__")

    def __init__(self, backend, addr, nbytes, dtype, shape, keep=None, fin=None):
        self.backend, self.addr, self.nbytes = backend, addr, nbytes
        self.dtype, self.shape = np.dtype(dtype), tuple(shape)
        self._keep, self._fin = keep, fin

    @property
    def alive(self) -> bool:
        return self.addr != 0

    def at(self, items: int) -> int:
        """The address of element ``items`` (flat index) of the buffer."""
        return self.addr + items * self.dtype.itemsize

    def free(self):
        if self._fin is not None:
            self._fin()
        self._keep = None
        self.addr = 0

    def __repr__(self):
        return f"DevBuf({self.dtype}, {self.shape}, {self.backend.name})"


def _shape_bytes(shape, dtype):
    n = 1
    for s in shape:
        n *= int(s)
    return n, n * np.dtype(dtype).itemsize


class ReferenceBackend:
    """Host buffers and the CPU run of the GPU bodies (see the module docstring).
    ``memory_bytes`` is the device memory it pretends to have (tests of the refusals)."""

    name = "cpu run of the GPU bodies"
    dl_device = (1, 0)  # kDLCPU: its buffers are host memory

    def __init__(self, memory_bytes: int = 1 << 40):
        from ..._core.loader import cpu_native

        self._mod = cpu_native()
        self.memory_bytes = memory_bytes
        self.used = 0
        self.ops_run = []  # the op names of every program, in order (the tests read it)

    def alloc(self, shape, dtype) -> DevBuf:
        n, nbytes = _shape_bytes(shape, dtype)
        raw = np.full(max(nbytes, 1), 0xFF, dtype=np.uint8)  # NaN bytes: unwritten memory shows
        self.used += nbytes
        fin = weakref.finalize(raw, _count_free, self, nbytes)
        return DevBuf(self, raw.ctypes.data, nbytes, dtype, shape, keep=raw, fin=fin)

    def memory(self):
        return max(self.memory_bytes - self.used, 0), self.memory_bytes

    def write(self, buf: DevBuf, host: np.ndarray):
        host = np.ascontiguousarray(host)
        assert host.nbytes == buf.nbytes, (host.nbytes, buf.nbytes)
        ctypes.memmove(buf.addr, host.ctypes.data, buf.nbytes)

    def read(self, buf: DevBuf) -> np.ndarray:
        out = np.empty(buf.shape, dtype=buf.dtype)
        ctypes.memmove(out.ctypes.data, buf.addr, buf.nbytes)
        return out

    def zero(self, buf: DevBuf):
        ctypes.memset(buf.addr, 0, buf.nbytes)

    def run(self, ops):
        for op in ops:
            self.ops_run.append(op[0])
            getattr(self._mod, "gpu_ref_" + op[0])(tuple(op[1:]))


def _count_free(backend, nbytes):
    backend.used -= nbytes


class GpuBackend:
    """The GPU build's device memory and programs (see the module docstring)."""

    def __init__(self, mod, api: str, device_name: str):
        self._mod = mod
        self.api = api
        self.name = f"{api} device 0 ({device_name})"
        self.dl_device = (_DL_TYPE.get(api, 0), 0)

    def alloc(self, shape, dtype) -> DevBuf:
        n, nbytes = _shape_bytes(shape, dtype)
        size = max(nbytes, 1)
        try:
            addr = int(self._mod.dev_alloc((size,)))
        except Exception as e:  # the runtime's refusal, e.g. out of memory
            raise MemoryError(f"mojolearn: the GPU could not allocate {size} bytes ({e}); "
                              f"free device memory or run the model with device='cpu'") from None
        buf = DevBuf(self, addr, nbytes, dtype, shape)
        buf._fin = weakref.finalize(buf, _dev_free, self._mod, addr, size)
        return buf

    def memory(self):
        free, total = self._mod.dev_memory(())
        return int(free), int(total)

    def write(self, buf: DevBuf, host: np.ndarray):
        host = np.ascontiguousarray(host)
        assert host.nbytes == buf.nbytes, (host.nbytes, buf.nbytes)
        if buf.nbytes:
            self._mod.dev_upload((buf.addr, host.ctypes.data, buf.nbytes))

    def read(self, buf: DevBuf) -> np.ndarray:
        out = np.empty(buf.shape, dtype=buf.dtype)
        if buf.nbytes:
            self._mod.dev_download((out.ctypes.data, buf.addr, buf.nbytes))
        return out

    def zero(self, buf: DevBuf):
        if buf.nbytes:
            self._mod.dev_zero((buf.addr, buf.nbytes))

    def run(self, ops):
        if ops:
            self._mod.nn_program_dev((list(ops),))


def _dev_free(mod, addr, size):
    try:
        mod.dev_free((addr, size))
    except Exception:  # pragma: no cover - interpreter shutdown: the device goes too
        pass


def upload(backend, host) -> DevBuf:
    host = np.ascontiguousarray(host)
    buf = backend.alloc(host.shape, host.dtype)
    backend.write(buf, host)
    return buf


# ---------------------------------------------------------------- device choice
def _gpu_backend(func, how):
    mod, api, why = _device.gpu_status()
    if mod is None:
        raise RuntimeError(
            f"mojolearn: {func}: {how} asks for the GPU, but no GPU backend works here: "
            f"{why}; pass device='cpu' to run the model on the CPU (the same bits)")
    if not hasattr(mod, "nn_program_dev"):
        raise RuntimeError(
            f"mojolearn: {func}: {how} asks for the GPU, but this install's GPU build "
            f"(mojolearn._native_gpu) predates the GPU models (no nn_program_dev); rebuild "
            f"it (bench/device_check.sh builds it) or pass device='cpu'")
    return GpuBackend(mod, api, gpu_status_name())


def gpu_status_name():
    return str(_device.gpu_status()[2])


def resolve(device, func: str, backend=None):
    """("cpu", None) or ("gpu", backend) for a model made with ``device`` (see the
    module docstring). ``backend``: a backend object the tests hand in (the reference
    backend); it is the GPU path, whatever the process device."""
    if backend is not None:
        if device not in (None, "gpu", "gpu:0"):
            raise ValueError(f"mojolearn: {func}: a device backend runs the GPU path; "
                             f"device={device!r} contradicts it")
        return "gpu", backend
    if device is None:
        choice = _device.get_device()
        if choice == "cpu":
            return "cpu", None
        if choice == "auto":
            return ("gpu", _gpu_backend(func, "auto")) if _device.gpu_status()[0] is not None \
                else ("cpu", None)
        return "gpu", _gpu_backend(func, f"the process device ({_device.ENV} / set_device: "
                                          f"'gpu')")
    if not isinstance(device, str):
        raise TypeError(f"mojolearn: {func}: device must be a str ('cpu', 'gpu', 'gpu:0' or "
                        f"'auto') or None (the process device), got {type(device).__name__}")
    v = device.strip().lower()
    if v == "cpu":
        return "cpu", None
    if v == "auto":
        return ("gpu", _gpu_backend(func, "device='auto'")) \
            if _device.gpu_status()[0] is not None else ("cpu", None)
    if v == "gpu" or v == "gpu:0":
        return "gpu", _gpu_backend(func, f"device={device!r}")
    if v.startswith("gpu:"):
        tail = v[4:]
        if tail.isdigit():
            raise ValueError(
                f"mojolearn: {func}: device={device!r}: this version's GPU build computes on "
                f"device 0 only; make that GPU visible as device 0 (e.g. "
                f"CUDA_VISIBLE_DEVICES={int(tail)} or HIP_VISIBLE_DEVICES={int(tail)}) and "
                f"pass device='gpu'")
    raise ValueError(f"mojolearn: {func}: device={device!r} is not a device; use 'cpu', 'gpu', "
                     f"'gpu:0', 'auto' or None (the process device)")


# ---------------------------------------------------------------- DLPack out
class DeviceTensor:
    """Logits left where the model computed them: a DLPack producer over a backend
    buffer (``torch.from_dlpack(t)``, ``cupy.from_dlpack(t)``; numpy for the reference
    backend, whose buffers are host memory). ``shape``, ``dtype`` ("float32"),
    ``device`` (the DLPack (type, id) pair); ``numpy()`` copies it to the host."""

    def __init__(self, buf: DevBuf, shape):
        self._buf = buf
        self.shape = tuple(shape)
        self.dtype = "float32"
        self.device = buf.backend.dl_device

    def __repr__(self):
        return f"DeviceTensor(shape={self.shape}, dtype=float32, on {self._buf.backend.name})"

    def numpy(self) -> np.ndarray:
        """A host copy (float32, ``shape``)."""
        return self._buf.backend.read(self._buf).reshape(self.shape)

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if dl_device is not None and tuple(int(x) for x in dl_device) != tuple(self.device):
            raise BufferError(f"mojolearn: DeviceTensor.__dlpack__: the logits lie on "
                              f"{self.device}, not {tuple(dl_device)}; no copy is made")
        if copy is True:
            raise BufferError("mojolearn: DeviceTensor.__dlpack__: copy=True is not offered; "
                              "the tensor is exported in place")
        # the work that wrote the buffer was waited for before the model returned: the
        # consumer's stream needs no ordering
        # self is the owner: it keeps the buffer alive until the consumer's deleter runs
        return _dlpack.capsule(self, self._buf.addr, self.shape, "float32", tuple(self.device),
                               max_version)

"""What every product call carries besides its operands: the kernels' mode argument
(the process's numeric mode, mojolearn.modes; the vendor-BLAS and TF32 checks of
numeric_mode fast on a GPU build), the sabotage argument of the conformance run
(read from the calling context only) and the packing workspace kept per Python
thread. Used by the GEMM entries, the k-split and the models' projections alike."""
from __future__ import annotations

import contextlib
import contextvars
import ctypes
import threading

from .._core import device as _device
from .._table import modes

__all__ = ["mode_code", "f32_mode_code", "sabotage_arg", "sabotaged", "release_workspace",
           "workspace", "workspace_fit", "WS_CACHE_MAX"]


# conformance --sabotage only: perturbs the kernels so the checks can be seen failing.
# A per-call argument of the kernels, read from the calling context: only the calls
# made inside `with sabotaged():` (the conformance run's own) carry it, so a sabotaged
# run never reaches another thread's products.
_sabotage = contextvars.ContextVar("mojolearn_sabotage", default=0)


def mode_code() -> int:
    """The kernels' mode argument for a linalg product: the process's numeric mode at
    the time of the call (mojolearn.modes)."""
    return modes.kernel_code(modes.numeric_mode())


def f32_mode_code(func: str, mod=None) -> int:
    """``mode_code()`` for a gemm_f32 / gemm_f32_resident call, which a GPU build may
    serve (``mod``, else the backend serving host operands): under fast there, the
    vendor BLAS must load (refused by name otherwise) and allow_tf32(True) gives the
    TF32 code (mojolearn.modes)."""
    mode = modes.numeric_mode()
    if mode != "fast":
        return modes.kernel_code(mode)
    gpu = mod if mod is not None else _device.backend_module()
    if gpu is None:
        return modes.kernel_code(mode)
    _device.require_vendor_blas(func, gpu)
    return modes.kernel_code(mode, tf32=modes.tf32_allowed())


def sabotage_arg() -> int:
    """The kernels' sabotage argument for a call made now, in this context: 0 or 1."""
    return _sabotage.get()


@contextlib.contextmanager
def sabotaged(on: bool = True):
    """Calls made inside (in this thread / context only) carry the sabotage argument."""
    token = _sabotage.set(1 if on else 0)
    try:
        yield
    finally:
        _sabotage.reset(token)


# Packing workspace, kept per Python thread and reused across calls (fresh buffers
# cost page faults on every call). The kernel reports the size it needed; a buffer
# that was too small is replaced for the next call (the kernel used a temporary one).
_tls = threading.local()


WS_CACHE_MAX = 64 * 1024 * 1024  # a call that needs more gets a temporary one


def release_workspace() -> int:
    """Free this thread's cached packing workspace; returns the bytes released. The
    next product allocates again (at most 64 MiB is ever kept per thread)."""
    w = getattr(_tls, "ws", None)
    _tls.ws = None
    return 0 if w is None else len(w)


def workspace():
    w = getattr(_tls, "ws", None)
    if w is None:
        return 0, 0
    return ctypes.addressof(w), len(w)


def workspace_fit(need: int):
    w = getattr(_tls, "ws", None)
    if need > (len(w) if w is not None else 0) and need <= WS_CACHE_MAX:
        _tls.ws = (ctypes.c_byte * need)()

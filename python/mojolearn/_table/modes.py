"""The implementation of ``mojolearn.modes``: what it computes and promises is
that public module's docstring (python/mojolearn/modes.py), which re-exports
this module's public names."""
from __future__ import annotations

import contextlib
import os
import threading

__all__ = ["MODES", "DEFAULT", "ENV", "STATE_KEY", "BACKENDS", "numeric_mode",
           "set_numeric_mode", "using", "resolve", "kernel_code", "check_resume",
           "allow_tf32", "tf32_allowed", "fast_route"]

MODES = ("identical", "deterministic", "fast")
"""The three promises, strictest first."""
DEFAULT = "identical"
"""The mode a process starts in when MOJOLEARN_NUMERIC_MODE is not set."""
ENV = "MOJOLEARN_NUMERIC_MODE"
"""The environment variable that sets the process mode, read once on first use."""
STATE_KEY = "numeric_mode"
"""The field a saved generation state carries its mode under."""
BACKENDS = {
    "cpu": {
        "identical": "the contracts' kernels (fp32.v1 leaves of max(128, ceil(k/1024)))",
        "deterministic": "fp32.v1 / bf16f32.v1 with leaves of FAST_KC k-steps, the same tree; "
                         "everything else the identical kernels",
        "fast": "as deterministic (this build has nothing faster that is not also fixed)",
    },
    "cuda": {
        "identical": "the contracts' kernels",
        "deterministic": "the identical kernels (cuBLAS promises run-to-run bits only under "
                         "conditions this library cannot check)",
        "fast": "float32 / bf16 products on cuBLAS sgemm with TF32 off (bf16 widened exactly "
                "first; TF32 only after allow_tf32(True)); k = 0, the integer profiles and "
                "the GPU model's programs the identical kernels",
    },
    "hip": {
        "identical": "the contracts' kernels",
        "deterministic": "the identical kernels (rocBLAS's default allows atomics: no "
                         "run-to-run promise)",
        "fast": "float32 / bf16 products on rocBLAS sgemm, float32 math (bf16 widened exactly "
                "first; no TF32 route); k = 0, the integer profiles and the GPU model's "
                "programs the identical kernels",
    },
    "metal": {
        "identical": "the contracts' kernels",
        "deterministic": "the identical kernels",
        "fast": "the identical kernels (no vendor BLAS on Apple GPUs)",
    },
}
"""What each mode runs on each backend, keyed like ``mojolearn.vendor()`` (plain data;
docs/modes.md's table says the same, cell for cell)."""

_CODES = {"identical": 0, "deterministic": 1, "fast": 2}
FAST_TF32_CODE = 3  # fast with TF32 allowed: the GPU build's cuBLAS TF32 route
_lock = threading.RLock()
_state = {"mode": None, "tf32": False}  # mode None: ENV unread
_local = threading.local()  # a thread's override (using())


def _check(mode, what: str) -> str:
    """The mode ``mode`` names (stripped), or a refusal by name."""
    listing = ", ".join(MODES)
    if not isinstance(mode, str):
        raise TypeError(f"mojolearn: {what} must be a str naming a numeric mode, got "
                        f"{type(mode).__name__} ({mode!r}); the modes are {listing}")
    key = mode.strip()
    if key in MODES:
        return key
    from .table import PROFILES, REJECTED

    if key in PROFILES or key in REJECTED:
        raise ValueError(
            f"mojolearn: {what}={key!r} names a numeric profile (the number format the "
            f"products compute in), not a numeric mode (the promise); pass it as "
            f"numeric_profile={key!r}. The modes are {listing}")
    raise ValueError(f"mojolearn: {what}={key!r} is not a numeric mode; the modes are "
                     f"{listing}")


def numeric_mode() -> str:
    """The numeric mode calls run under: this thread's ``using()`` mode inside one,
    else the process's (``MOJOLEARN_NUMERIC_MODE`` on first use, else ``identical``,
    until set_numeric_mode changes it)."""
    over = getattr(_local, "mode", None)
    if over is not None:
        return over
    with _lock:
        if _state["mode"] is None:
            raw = os.environ.get(ENV)
            _state["mode"] = DEFAULT if raw is None or not raw.strip() else _check(raw, ENV)
        return _state["mode"]


def set_numeric_mode(mode) -> str:
    """Set the process's numeric mode (checked at once); returns the previous one."""
    new = _check(mode, "numeric_mode")
    with _lock:
        old = numeric_mode()
        _state["mode"] = new
        return old


@contextlib.contextmanager
def using(mode):
    """``with mojolearn.modes.using("fast"):`` the calls of this thread inside run under
    ``mode`` (checked at once); other threads and the process mode are untouched.
    Nests; restores what it found."""
    new = _check(mode, "numeric_mode")
    old = getattr(_local, "mode", None)
    _local.mode = new
    try:
        yield new
    finally:
        _local.mode = old


def resolve(mode=None, what: str = "numeric_mode") -> str:
    """The mode an object or call runs under: the one named, else the process mode."""
    return numeric_mode() if mode is None else _check(mode, what)


def kernel_code(mode: str, tf32: bool = False) -> int:
    """The kernels' mode argument (0 identical, 1 deterministic, 2 fast; 3: fast with
    TF32 allowed, only when ``tf32`` and ``mode`` is fast)."""
    if tf32 and mode == "fast":
        return FAST_TF32_CODE
    return _CODES[mode]


def allow_tf32(on) -> bool:
    """Allow (True) or forbid (False, the default) TF32 in ``fast`` products on a CUDA
    GPU build, process-wide; returns the previous setting. Nothing but ``fast`` on
    cuBLAS is affected (see TF32 in the module docstring)."""
    if not isinstance(on, bool):
        raise TypeError(f"mojolearn: allow_tf32(on) takes True or False, got "
                        f"{type(on).__name__} ({on!r})")
    with _lock:
        old = _state["tf32"]
        _state["tf32"] = on
        return old


def tf32_allowed() -> bool:
    """Whether ``allow_tf32(True)`` is in force (False until a caller asks for it)."""
    return _state["tf32"]


def fast_route() -> str:
    """What a ``fast`` float32 product runs on the backend serving this process now:
    "cpu" (the CPU's longer leaves), "cuBLAS", "cuBLAS TF32" (allow_tf32(True)),
    "rocBLAS", or "identical" (a GPU build without a vendor BLAS: Apple)."""
    from .._core import device as _device

    v = _device.vendor()
    if v == "cpu":
        return "cpu"
    lib = _device.VENDOR_BLAS.get(v)
    if lib is None:
        return "identical"
    return f"{lib} TF32" if lib == "cuBLAS" and tf32_allowed() else lib


def check_resume(saved: str, mode: str, what: str = "state") -> None:
    """Refuse continuing a state made under a looser mode in a stricter one (identical,
    then deterministic, then fast): a state produced under fast or deterministic is
    refused by an identical object, a fast one by a deterministic object; the other
    way round is allowed."""
    if MODES.index(saved) > MODES.index(mode):
        raise ValueError(
            f"mojolearn: {what} was produced under numeric_mode={saved!r}, whose bits do "
            f"not keep the {mode!r} promise this object runs under; build the object with "
            f"numeric_mode={saved!r}, or start a new state")

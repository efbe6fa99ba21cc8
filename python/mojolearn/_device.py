"""Which backend serves the kernels, and which vendor's hardware that is.

DEVICE SELECTION
    ``MOJOLEARN_DEVICE`` (read once, at first use) or ``set_device(name)``:
      auto  (default) a GPU when one is present AND this install has a GPU build
            (``mojolearn._native_gpu``) that can drive it; else the CPU. If a GPU
            build exists but cannot run, the CPU serves the calls and a warning says
            so once: the bits are the same on every backend, so this is allowed.
      cpu   the CPU build, always.
      gpu   the GPU build or an error that says why (no GPU build installed, no
            driver, no device). Never a silent CPU fallback.

VENDOR
    ``vendor()`` names the backend in use: "cpu", or "cuda" / "hip" / "metal" on a
    GPU build. ``mojolearn.profiles`` asks it when deciding on speed warnings.
"""

from __future__ import annotations

import importlib
import os
import warnings

__all__ = ["vendor", "get_device", "set_device", "DEVICES", "ENV", "gpu_status"]

ENV = "MOJOLEARN_DEVICE"
DEVICES = ("auto", "cpu", "gpu")
_choice: str | None = None
_gpu: tuple | None = None  # (module or None, vendor or None, name or reason)
_warned = False


def _check(name, what):
    if not isinstance(name, str):
        raise TypeError(f"mojolearn: {what} must be a str, one of {DEVICES}; got {name!r}")
    v = name.strip().lower()
    if v not in DEVICES:
        raise ValueError(f"mojolearn: {what}={name!r} is not a device; use one of {DEVICES}")
    return v


def get_device() -> str:
    global _choice
    if _choice is None:
        raw = os.environ.get(ENV, "").strip()
        _choice = _check(raw, ENV) if raw else "auto"
    return _choice


def set_device(name: str) -> str:
    """Choose auto / cpu / gpu for later calls; returns the previous choice. Asking for
    "gpu" where no GPU backend works raises at once (RuntimeError with the reason)."""
    global _choice
    prev = get_device()
    v = _check(name, "set_device(name)")
    if v == "gpu":
        mod, _, why = gpu_status()
        if mod is None:
            raise RuntimeError(f"mojolearn: set_device('gpu'): no GPU backend: {why}")
    _choice = v
    return prev


def gpu_status():
    """(module, vendor, device name) when a GPU build works here, else (None, None, reason)."""
    global _gpu
    if _gpu is None:
        try:
            mod = importlib.import_module("mojolearn._native_gpu")
        except ImportError as e:
            _gpu = (None, None, f"this install has no GPU build (mojolearn._native_gpu: {e})")
            return _gpu
        try:
            vend, name = mod.device_info(())
            _gpu = (mod, str(vend), str(name))
        except Exception as e:  # noqa: BLE001 - the reason is reported, not hidden
            _gpu = (None, None, f"the GPU build cannot run here: {e}")
    return _gpu


def backend_module():
    """The GPU extension module when calls go to the GPU, else None (the CPU build)."""
    global _warned
    d = get_device()
    if d == "cpu":
        return None
    mod, _, why = gpu_status()
    if mod is not None:
        return mod
    if d == "gpu":
        raise RuntimeError(
            f"mojolearn: {ENV}=gpu but no GPU backend works: {why}; "
            f"set {ENV}=cpu (or auto) to compute on the CPU - the bits are the same"
        )
    if "no GPU build" not in why and not _warned:
        _warned = True
        warnings.warn(f"mojolearn: computing on the CPU: {why}", RuntimeWarning, stacklevel=3)
    return None


def vendor() -> str:
    """The vendor of the backend in use: "cpu", or "cuda" / "hip" / "metal"."""
    mod = backend_module()
    if mod is None:
        return "cpu"
    return gpu_status()[1]


def _reset_for_tests():
    global _choice, _gpu, _warned
    _choice, _gpu, _warned = None, None, False

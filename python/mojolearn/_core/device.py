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

DEVICE-RESIDENT OPERANDS
    ``resident(func, named)`` is where a call whose operands are DLPack tensors in
    device memory (CUDA / ROCm) gets its backend: the GPU build, when it serves this
    process (``MOJOLEARN_DEVICE`` auto or gpu), drives that vendor's device, and every
    operand lies on that one device (id 0, the device the build opens). Anything
    else is refused by name: mojolearn never copies device memory to the host (or
    back) on its own. Before it returns, all work already queued on the device (by
    torch, CuPy, ...) is waited for (``cuCtxSynchronize`` / ``hipDeviceSynchronize``,
    called through ctypes), because the producer's stream is not ours; the
    kernels then run and are waited for before the call returns. Host operands
    never reach this function: ``backend_module()`` decides for them.

VENDOR
    ``vendor()`` names the backend in use: "cpu", or "cuda" / "hip" / "metal" on a
    GPU build. ``mojolearn.profiles`` asks it when deciding on speed warnings.

VENDOR BLAS
    ``numeric_mode`` fast runs a GPU build's float32 products on the vendor's BLAS
    (``VENDOR_BLAS``: cuBLAS for "cuda", rocBLAS for "hip"; mojolearn.modes says
    what else). ``require_vendor_blas(func)`` asks the GPU build whether that library
    loads here (its ``vendor_blas`` entry, which opens it) and refuses by name, with
    the way out, when it does not; a success is remembered, a failure is asked again
    on the next call (a library loaded since, e.g. by torch, is then found).
"""

from __future__ import annotations

import importlib
import os
import warnings

__all__ = ["vendor", "get_device", "set_device", "DEVICES", "ENV", "gpu_status", "resident",
           "VENDOR_BLAS", "require_vendor_blas"]

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
    """The device choice for later calls: 'auto', 'cpu' or 'gpu' (MOJOLEARN_DEVICE,
    read on first use; 'auto' when unset), or what ``set_device`` chose.
    """
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


_DL_TYPE = {"cuda": 2, "hip": 10}  # the DLPack device type each GPU API computes on
_DL_NAME = {2: "cuda", 10: "rocm"}
_SYNC_LIBS = {"cuda": (("libcuda.so.1", "libcuda.so"), "cuCtxSynchronize", (0, 201)),
              "hip": (("libamdhip64.so", "libamdhip64.so.6"), "hipDeviceSynchronize", (0,))}
_sync_fn = {}


def _wait_for_device(api: str, func: str) -> None:
    """Wait for every operation already queued on the device by other libraries."""
    fn = _sync_fn.get(api)
    if fn is None:
        import ctypes

        names, sym, _ = _SYNC_LIBS[api]
        for lib in names:
            try:
                fn = getattr(ctypes.CDLL(lib), sym)
                break
            except (OSError, AttributeError):
                continue
        if fn is None:
            raise RuntimeError(
                f"mojolearn: {func}: cannot wait for the {api} device's queued work "
                f"({sym} not found in {', '.join(names)}); device tensors cannot be read safely"
            )
        fn.restype = ctypes.c_int
        _sync_fn[api] = fn
    rc = fn()
    if rc not in _SYNC_LIBS[api][2]:  # 201: no current context, so nothing queued here
        raise RuntimeError(f"mojolearn: {func}: {_SYNC_LIBS[api][1]} failed with error {rc}")


def refusal(dev):
    """Why no backend of this process computes on DLPack device ``dev`` ((type, id)),
    or None when the GPU build does (see module docstring)."""
    where = f"{_DL_NAME.get(dev[0], dev[0])}:{dev[1]}"
    if get_device() == "cpu":
        return f"{ENV}=cpu (or set_device('cpu')) sends calls to the CPU build"
    mod, api, why = gpu_status()
    if mod is None:
        return f"no GPU backend of this install computes there ({why})"
    if _DL_TYPE.get(api) != dev[0]:
        return f"this install's GPU build drives {api} devices, not {where}"
    if dev[1] != 0:
        return ("this version's GPU build computes on device 0 only (make the device "
                f"visible as 0, e.g. CUDA_VISIBLE_DEVICES={dev[1]})")
    return None


def resident(func: str, named):
    """The GPU module for a call whose operands ``named`` ((name, Buf.device) pairs,
    None for host memory) include device memory; refuses by name otherwise (see
    module docstring). Waits for the device's queued work before returning."""
    devs = [(n, d) for n, d in named if d is not None]
    hosts = [n for n, d in named if d is None]
    first = devs[0][1]
    where = f"{_DL_NAME.get(first[0], first[0])}:{first[1]}"
    if hosts:
        raise ValueError(
            f"mojolearn: {func}: {devs[0][0]} is on {where} but {', '.join(hosts)} "
            f"{'is' if len(hosts) == 1 else 'are'} in host memory; mojolearn never copies "
            "between host and device on its own: put every operand (and out) on one side"
        )
    for n, d in devs[1:]:
        if d != first:
            raise ValueError(
                f"mojolearn: {func}: {devs[0][0]} is on {where} but {n} is on "
                f"{_DL_NAME.get(d[0], d[0])}:{d[1]}; put every operand on one device"
            )
    why = refusal(first)
    if why:
        raise ValueError(
            f"mojolearn: {func}: the operands are on {where}; {why}; mojolearn never "
            "copies device memory silently: move them to the CPU (e.g. torch's x.cpu())"
        )
    mod, api, _ = gpu_status()
    _wait_for_device(api, func)
    return mod


def vendor() -> str:
    """The vendor of the backend in use: "cpu", or "cuda" / "hip" / "metal"."""
    mod = backend_module()
    if mod is None:
        return "cpu"
    return gpu_status()[1]


VENDOR_BLAS = {"cuda": "cuBLAS", "hip": "rocBLAS"}
"""The library numeric_mode fast runs float32 products on, by GPU API (none for "metal")."""
_blas_ok: dict = {}  # module -> the library file it loaded


def require_vendor_blas(func: str, mod) -> None:
    """Refuse, by name, a numeric_mode fast product on GPU module ``mod`` whose vendor
    BLAS cannot be loaded here (see VENDOR BLAS in the module docstring); returns
    quietly when it loads, or when the build has none (fast runs the identical
    kernels there)."""
    if mod in _blas_ok:
        return
    lib, path, why = (str(x) for x in mod.vendor_blas(()))
    if not lib:
        return
    if path:
        _blas_ok[mod] = path
        return
    raise RuntimeError(
        f"mojolearn: {func}: numeric_mode='fast' runs {lib} on this GPU build, and {lib} "
        f"cannot be loaded here ({why}); set numeric_mode='identical' "
        f"(mojolearn.set_numeric_mode('identical'), MOJOLEARN_NUMERIC_MODE=identical, or "
        f"numeric_mode='identical' on the model) to run the identical kernels, or make {lib} "
        "loadable (its directory on LD_LIBRARY_PATH)"
    )


def _reset_for_tests():
    global _choice, _gpu, _warned
    _choice, _gpu, _warned = None, None, False
    _blas_ok.clear()

"""Loads the compiled Mojo extension on first use: the CPU build that
mojolearn._core.cpu chooses for this CPU (``mojolearn._native_amx``, ``_native_v4`` or
``_native_v3``; ``MOJOLEARN_ISA`` forces one), decided BEFORE it is imported.

An install without it refuses by name with ImportError instead of computing
anything another way: there is no Python fallback for a kernel.
"""
from __future__ import annotations

import importlib
import os

from . import cpu as _cpu
from .device import backend_module

_mod = None


def native():
    """The extension module serving kernel calls: the GPU build when the device
    selection (mojolearn._core.device) sends calls there, else the CPU build."""
    gpu = backend_module()
    if gpu is not None:
        return gpu
    return cpu_native()


def blocking() -> dict:
    """The block-size table of the CPU build serving this process (its one home is
    mojo/gemm/cpu/blocking.mojo), as {name: int}; the tests place edge cases on it."""
    raw = str(cpu_native().blocking(()))
    return {k: int(v) for k, v in (item.split("=") for item in raw.split(";"))}


def require_cpu(func: str, what: str):
    """Refuse, by name, a call of an entry only the CPU build has while this process
    computes on the GPU (never a silent move to the CPU)."""
    if native() is not cpu_native():
        raise ValueError(
            f"mojolearn: {func}: {what} run on the CPU build in this version and this "
            "process computes on the GPU; call mojolearn.set_device('cpu') (the bits are "
            "the same)")


def cpu_native():
    global _mod
    if _mod is None:
        isa, name = _cpu.choose()  # raises ImportError naming what this CPU lacks
        try:
            m = importlib.import_module(f"mojolearn.{name}")
        except ImportError as e:
            raise ImportError(
                f"mojolearn: the compiled Mojo extension mojolearn.{name} (the {isa} build "
                f"this CPU runs) is missing or cannot load ({e}); build it with `make build` "
                "(or `pip install .`)"
            ) from e
        _restore_environment()
        l1d, l2, l3 = cache_sizes()
        m.set_cache_sizes((l1d, l2, l3))
        _mod = m
    return _mod


CACHES_ENV = "MOJOLEARN_CPU_CACHES"


def cache_sizes() -> tuple:
    """(L1d, L2, L3) in bytes, 0 where unknown, for the CPU build's cache plan
    (mojo/gemm/cpu/blocking.mojo: the blocks that stay in a cache scale with these;
    no size changes a bit). What sysfs reports for the first CPU, unless
    MOJOLEARN_CPU_CACHES gives them, e.g. ``L1d=32K,L2=512K,L3=32M`` (any of the three;
    the others still from sysfs): for a virtual machine whose hypervisor reports
    caches the CPU does not have."""
    from . import box as _box

    found = _box.caches()
    sizes = {"L1d": found.get("L1d", 0), "L2": found.get("L2", 0), "L3": found.get("L3", 0)}
    raw = os.environ.get(CACHES_ENV)
    if raw is not None:
        for item in raw.split(","):
            key, sep, value = item.strip().partition("=")
            size = _box._size_bytes(value) if sep and value.strip() else None
            if key not in sizes or size is None or size <= 0 or size > (1 << 40):
                raise ValueError(
                    f"mojolearn: {CACHES_ENV}={raw!r}: each item is L1d=, L2= or L3= with a "
                    f"size in bytes or K / M / G (e.g. L1d=32K,L2=512K,L3=32M); got {item!r}")
            sizes[key] = size
    return sizes["L1d"], sizes["L2"], sizes["L3"]


# Loading the Mojo runtime writes MOJO_PYTHON_LIBRARY, PYTHONEXECUTABLE and
# PYTHONPATH into the process's C environment. Child processes would inherit them
# (a child `python` then runs with another interpreter's paths), so the values the
# process started with are put back.
_TOUCHED = ("MOJO_PYTHON_LIBRARY", "PYTHONEXECUTABLE", "PYTHONPATH", "PYTHONHOME")


def _restore_environment():
    for key in _TOUCHED:
        if key in os.environ:
            os.putenv(key, os.environ[key])
        else:
            try:
                os.unsetenv(key)
            except OSError:  # pragma: no cover
                pass

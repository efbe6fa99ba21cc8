"""Loads the compiled Mojo extension on first use: the CPU build that
mojolearn._cpu chooses for this CPU (``mojolearn._native_amx``, ``_native_v4`` or
``_native_v3``; ``MOJOLEARN_ISA`` forces one), decided BEFORE it is imported.

An install without it refuses by name with ImportError instead of computing
anything another way: there is no Python fallback for a kernel.
"""
from __future__ import annotations

import importlib
import os

from . import _cpu
from ._device import backend_module

_mod = None


def native():
    """The extension module serving kernel calls: the GPU build when the device
    selection (mojolearn._device) sends calls there, else the CPU build."""
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
        _mod = m
    return _mod


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

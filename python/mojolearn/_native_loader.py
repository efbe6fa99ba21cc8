"""Loads the compiled Mojo extension (``mojolearn._native``) on first use.

An install without it refuses by name with ImportError instead of computing
anything another way: there is no Python fallback for a kernel.
"""
from __future__ import annotations

_mod = None


def native():
    global _mod
    if _mod is None:
        try:
            from . import _native as m  # type: ignore[attr-defined]
        except ImportError as e:
            raise ImportError(
                "mojolearn: the compiled Mojo extension mojolearn._native is missing or "
                f"cannot load ({e}); build it with `make build` (or `pip install .`)"
            ) from e
        _mod = m
    return _mod

"""How many tasks a kernel call is split into.

``MOJOLEARN_NUM_THREADS`` (read once, at first use) or ``set_num_threads(n)``;
the default is every core this process may run on. The count never changes a
result's bits, only how the work is divided.
"""
from __future__ import annotations

import os

ENV = "MOJOLEARN_NUM_THREADS"
_n: int | None = None


def _default() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover
        return max(1, os.cpu_count() or 1)


def _check(n, what):
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"mojolearn: {what} must be an int >= 1, got {n!r}")
    if n < 1:
        raise ValueError(f"mojolearn: {what} must be >= 1, got {n}")
    return n


def get_num_threads() -> int:
    global _n
    if _n is None:
        raw = os.environ.get(ENV, "").strip()
        if raw:
            try:
                v = int(raw)
            except ValueError:
                raise ValueError(
                    f"mojolearn: {ENV}={raw!r} is not an integer; set it to a thread count "
                    "such as 1 or 2, or unset it to use every core"
                ) from None
            _n = _check(v, ENV)
        else:
            _n = _default()
    return _n


def set_num_threads(n: int) -> int:
    """Set the task count for later calls; returns the previous one."""
    global _n
    v = _check(n, "set_num_threads(n)")
    try:
        prev = get_num_threads()
    except ValueError:  # a bad MOJOLEARN_NUM_THREADS is overridden by the call
        prev = None
    _n = v
    return prev

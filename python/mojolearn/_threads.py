"""How many tasks a kernel call is split into.

``MOJOLEARN_NUM_THREADS`` (read once, at first use) or ``set_num_threads(n)``;
the default is every core this process may run on. The count never changes a
result's bits, only how the work is divided. It is an int from 1 to
``MAX_THREADS`` (1024): a larger value is refused when it is set, not later by
the first kernel call.
"""
from __future__ import annotations

import os

ENV = "MOJOLEARN_NUM_THREADS"
MAX_THREADS = 1024
_n: int | None = None


def _default() -> int:
    try:
        return min(MAX_THREADS, max(1, len(os.sched_getaffinity(0))))
    except (AttributeError, OSError):  # pragma: no cover
        return min(MAX_THREADS, max(1, os.cpu_count() or 1))


def _check(n, what):
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(
            f"mojolearn: {what} must be an int from 1 to {MAX_THREADS}, got "
            f"{type(n).__name__} {n!r}; pass a thread count such as 1 or 2"
        )
    if n < 1 or n > MAX_THREADS:
        shown = n if abs(n) < 10 ** 30 else f"an int of {n.bit_length()} bits"
        raise ValueError(
            f"mojolearn: {what} must be from 1 to {MAX_THREADS}, got {shown}; pass "
            f"a thread count such as 1 or 2 (more tasks than cores gains nothing)"
        )
    return n


def get_num_threads() -> int:
    global _n
    if _n is None:
        raw = os.environ.get(ENV, "").strip()
        if raw:
            try:
                v = int(raw) if len(raw) <= 32 else None
            except ValueError:
                v = None
            if v is None:
                shown = raw if len(raw) <= 32 else raw[:32] + "..."
                raise ValueError(
                    f"mojolearn: {ENV}={shown!r} is not an integer from 1 to "
                    f"{MAX_THREADS}; set it to a thread count such as 1 or 2, or unset "
                    "it to use every core"
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

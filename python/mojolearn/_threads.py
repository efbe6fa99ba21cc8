"""How many tasks a kernel call is split into.

``MOJOLEARN_NUM_THREADS`` (read once, at first use) or ``set_num_threads(n)``;
the default is every core this process may run on. The count never changes a
result's bits, only how the work is divided. It is an int from 1 to
``MAX_THREADS`` (1024): a larger value is refused when it is set, not later by
the first kernel call. In a process forked from one that had already run a
multi-task kernel call, calls run as one task whatever the count (``tasks``, with
one warning): the runtime's worker threads are not inherited across a fork.
"""
from __future__ import annotations

import os

ENV = "MOJOLEARN_NUM_THREADS"
MAX_THREADS = 1024

# A call given more than one task starts the Mojo runtime's worker threads (once per
# process). A process forked after that inherits the runtime's state but not its
# threads, and a multi-task call there would wait for them forever. So a child forked
# after such a call runs every kernel as one task: the same bits (the task count never
# changes them), on one core, with one warning that says why.
_pool_may_run = False  # this process gave a kernel call more than one task
_fork_child_without_pool = False
_fork_warned = False
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


def tasks() -> int:
    """The task count a kernel call is given: ``get_num_threads()``, or 1 in a process
    forked from one that had started the kernel worker threads (see above)."""
    global _pool_may_run, _fork_warned
    n = get_num_threads()
    if n > 1:
        if _fork_child_without_pool:
            if not _fork_warned:
                _fork_warned = True
                import sys
                import warnings

                level, f, pkg = 2, sys._getframe(1), os.path.dirname(os.path.abspath(__file__))
                while f is not None and os.path.abspath(f.f_code.co_filename).startswith(pkg):
                    f, level = f.f_back, level + 1  # point at the first caller outside mojolearn
                warnings.warn(
                    f"mojolearn: this process was forked from one that had started the "
                    f"kernels' worker threads, which a forked process does not inherit; "
                    f"kernels here run as one task instead of {n} (the same bits, one "
                    f"core). For every core in a child process, start it with "
                    f"multiprocessing's 'spawn' or 'forkserver' method",
                    RuntimeWarning, stacklevel=level)
            return 1
        _pool_may_run = True
    return n


def _after_fork_in_child():
    global _fork_child_without_pool
    if _pool_may_run:
        _fork_child_without_pool = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

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
    """The task count the kernels use: MOJOLEARN_NUM_THREADS (1 to 1024, read on
    first use), what ``set_num_threads`` set, or by default every core. A bad value
    in the variable is refused with ValueError naming it. Never changes a bit.
    """
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

                level, f, pkg = 2, sys._getframe(1), os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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


# A product of little work gains nothing from more tasks: starting one on the runtime's
# workers and waiting for it costs the caller microseconds that such a product does not
# repay (on a 2-core AMD Zen 5 under KVM, products of 0.07-2.1 M multiply-adds split in
# two took 7-36 us longer than as one task). The blocked GEMMs (more rows than the
# decode paths take) therefore give each task at least this many multiply-adds, the
# integer kernels counted in int8 products (int15 is four of them); the decode paths
# (m up to the build's ROWS_MAX / INT_ROWS_MAX) keep their own split.
# MOJOLEARN_SPLIT_ALL=1 splits every product over all the tasks instead. Neither changes
# a bit (the task count never does).
MIN_TASK_MACS = {"fp32": 1 << 20, "int": 8 << 20}
_ROWS_KEY = {"fp32": "ROWS_MAX", "int": "INT_ROWS_MAX"}
_decode_rows: dict | None = None
SPLIT_ALL_ENV = "MOJOLEARN_SPLIT_ALL"
_split_all: bool | None = None


def _split_all_set() -> bool:
    global _split_all
    if _split_all is None:
        raw = os.environ.get(SPLIT_ALL_ENV, "").strip()
        if raw not in ("", "0", "1"):
            shown = raw if len(raw) <= 32 else raw[:32] + "..."
            raise ValueError(
                f"mojolearn: {SPLIT_ALL_ENV}={shown!r} is not 0 or 1; set it to 1 to split "
                "every product over all the threads, or unset it"
            )
        _split_all = raw == "1"
    return _split_all


def gemm_tasks(kind: str, m: int, n: int, k: int, products: int = 1) -> int:
    """The task count of one GEMM call on the CPU: ``tasks()``, capped for a blocked
    product (more rows than the build's decode path takes) so that each task gets at
    least MIN_TASK_MACS[kind] multiply-adds (m * n * k * products of them; products = 4
    for int15's four int8 products)."""
    global _decode_rows
    split_all = _split_all_set()  # a bad value is refused whatever the task count
    t = tasks()
    if t == 1 or split_all:
        return t
    if _decode_rows is None:
        from .loader import blocking

        table = blocking()
        _decode_rows = {kd: table[key] for kd, key in _ROWS_KEY.items()}
    if m <= _decode_rows[kind]:
        if kind == "fp32" and _rows_floor:
            return max(1, min(t, m * n * k // _rows_floor))
        return t
    return max(1, min(t, m * n * k * products // MIN_TASK_MACS[kind]))


# The fp32 decode path splits every product over all the tasks by default: in a decode
# loop (CausalLM.generate) the calls follow each other within microseconds, the
# runtime's workers are still awake, and the split pays (SmolLM2-135M greedy decode on a
# 2-core AMD Zen 5 VM: 22.5 ms a token split, 31.0 with products under 1 M multiply-adds
# as one task; v4 build 21.9 against 26.8). A caller whose products arrive between other
# work lets the workers fall asleep, and waking them cost 0.1-0.9 ms a call there, more
# than a 1 x 576 x 1536 product takes on one core (about 0.14 ms): the torch mode sets a
# floor with decode_split_floor while it is on (transformers' greedy decode of the same
# model inside it: 160 -> 129 ms a token, v4 137 -> 111). Never changes a bit.
_rows_floor = 0


def decode_split_floor(macs=None) -> int:
    """The multiply-adds (m * n * k) under which an fp32 product on the decode path
    runs as one task (0, the default: every such product is split). With ``macs``, sets
    it (an int >= 0); returns the value it had."""
    global _rows_floor
    prev = _rows_floor
    if macs is not None:
        if isinstance(macs, bool) or not isinstance(macs, int) or macs < 0:
            raise ValueError(f"mojolearn: decode_split_floor: macs must be an int >= 0, got {macs!r}")
        _rows_floor = macs
    return prev


def _after_fork_in_child():
    global _fork_child_without_pool
    if _pool_may_run:
        _fork_child_without_pool = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

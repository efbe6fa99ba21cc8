"""Numeric modes: the promise a call's bits are made under.

WHAT A MODE IS
    A numeric mode is the PROMISE about bits, separate from the numeric profile (the
    number format the products compute in) and from the weight format (storage):
      - ``identical`` (the default): the same bits on every vendor and machine, the
        contracts of contracts/ exactly (today's kernels, unchanged);
      - ``deterministic``: the same bits every run on this machine, CPU build and
        thread count; orders may be chosen per machine for speed, nothing is
        promised across machines;
      - ``fast``: the fastest kernels the backend has, no promise on bits.
    The two are independent in both directions: every mode accepts every profile,
    resolving one never changes the other, and objects report both.

WHAT EACH MODE RUNS (BACKENDS, plain data below)
    On the CPU, ``deterministic`` and ``fast`` run the fp32.v1 / bf16f32.v1 kernels
    with leaves of FAST_LEAF k-steps a chain (blocking.FAST_KC) instead of the
    contract's leaf size, folded by the same tree: fewer tree merges, an order that
    depends on the build's block table and k only, so both promises hold and the bits
    differ from ``identical`` wherever k exceeds the contract's leaf. Everything
    else (the integer profiles, whose sums are exact; the models' element-wise ops;
    P.V) has nothing faster than the identical kernels and runs them: there the
    looser modes give the identical bits. On a GPU build every mode runs the
    identical kernels in this version (the vendor library is not wired in); the
    table says so rather than inventing a difference.

THE PROCESS MODE
    ``MOJOLEARN_NUMERIC_MODE`` sets it, read once on first use (a bad value is refused
    with the words a bad name gets); ``set_numeric_mode(mode)`` checks at once and
    returns the previous one. ``linalg`` products run under the process mode at the
    time of the call; a model (``numeric_mode=`` on its constructor / ``load``) runs
    under the mode it was made with.

STATES
    A generation state records the mode it was produced under. A state produced under
    ``fast`` or ``deterministic`` is refused by an ``identical`` model (its bits were
    not identical ones); an ``identical`` state may be continued under any mode.

ERRORS
    Every message starts with ``mojolearn:`` and names the argument, the refused value,
    the three modes and the way out; a profile name given as a mode (and a mode given
    as a profile name) is refused saying which parameter it belongs to.
"""
from __future__ import annotations

import contextlib
import os
import threading

__all__ = ["MODES", "DEFAULT", "ENV", "STATE_KEY", "BACKENDS", "numeric_mode",
           "set_numeric_mode", "using", "resolve", "kernel_code", "check_resume"]

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
    "gpu": {
        "identical": "the contracts' kernels",
        "deterministic": "the identical kernels (no faster fixed order in this version)",
        "fast": "the identical kernels (the vendor library is not wired in this version)",
    },
}
"""What each mode runs on each backend (plain data; the README's table reads it)."""

_CODES = {"identical": 0, "deterministic": 1, "fast": 2}
_lock = threading.RLock()
_state = {"mode": None}  # None: ENV unread
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
    from ._profile_table import PROFILES, REJECTED

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


def kernel_code(mode: str) -> int:
    """The kernels' mode argument (0 identical, 1 deterministic, 2 fast)."""
    return _CODES[mode]


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

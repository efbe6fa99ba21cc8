"""The implementation of ``mojolearn.profiles``: what it computes and promises is
that public module's docstring (python/mojolearn/profiles.py), which re-exports
this module's public names."""

from __future__ import annotations

import copy
import os
import threading
import warnings

from .._core import device as _device
from .table import (
    BASELINE, DEFAULT, TRAINING_DEFAULT, FAMILIES, ENV, STATE_KEY, USES, PROFILES, REJECTED,
)
from .measured import MEASURED, _load_measured, _quality_rows, _results_dirs

__all__ = [
    "canonical",
    "default_profile",
    "set_default_profile",
    "BASELINE",
    "DEFAULT",
    "TRAINING_DEFAULT",
    "FAMILIES",
    "ENV",
    "STATE_KEY",
    "USES",
    "PROFILES",
    "REJECTED",
    "MEASURED",
    "NumericProfileSpeedWarning",
    "resolve",
    "require_training",
    "computes",
    "default_reaches",
    "set_numeric_profile",
    "numeric_profile",
    "profiles",
    "measured",
]

class NumericProfileSpeedWarning(UserWarning):
    """A profile was chosen that this project measured slower than fp32_v1 here."""


# ---------------------------------------------------------------------------
# Process state
# ---------------------------------------------------------------------------

_lock = threading.RLock()
_defaults = {"inference": None, "training": TRAINING_DEFAULT}  # None: ENV unread
_warned: set = set()


def _registered() -> str:
    return ", ".join(PROFILES)


def _check_str(value, what: str, kind: str, allowed) -> str:
    """Type-check and look up a use or family; return it."""
    listing = ", ".join(allowed)
    if not isinstance(value, str):
        raise TypeError(
            f"mojolearn: {what} must be a str naming a {kind}, got "
            f"{type(value).__name__} ({value!r}); allowed: {listing}"
        )
    if value not in allowed:
        raise ValueError(
            f"mojolearn: {what}={value!r} is not a known {kind}; "
            f"allowed: {listing}"
        )
    return value


def _check_use(use) -> str:
    return _check_str(use, "use", "use", USES)


def _check_family(family) -> str:
    return _check_str(family, "family", "model family", FAMILIES)


def _check_name(name, what: str) -> str:
    """Return the registered profile ``name`` (stripped) or refuse it by name."""
    if not isinstance(name, str):
        raise TypeError(
            f"mojolearn: {what} must be a str naming a numeric profile, got "
            f"{type(name).__name__} ({name!r}); registered names: {_registered()}"
        )
    key = str(name).strip()
    if key in PROFILES:
        return key
    if key in REJECTED:
        raise ValueError(
            f"mojolearn: {what}={key!r} is a rejected numeric profile and is not "
            f"offered: {REJECTED[key]}. Registered names: {_registered()}"
        )
    from .modes import MODES

    if key in MODES:
        raise ValueError(
            f"mojolearn: {what}={key!r} names a numeric mode (the promise: "
            f"{', '.join(MODES)}), not a numeric profile (the number format); pass it as "
            f"numeric_mode={key!r}. Registered profiles: {_registered()}"
        )
    raise ValueError(
        f"mojolearn: {what}={key!r} is not a registered numeric profile (every "
        f"name carries its version; there are no unversioned aliases). "
        f"Registered names: {_registered()}"
    )


def _refuse_use(name: str, what: str, use: str):
    raise NotImplementedError(
        f"mojolearn: {what}={name!r} is not available for {use}: {name} has "
        f"passed {_passed(name)} only. A named profile is never swapped: it is "
        f"never replaced by fp32_v1 silently. To {_verb(use)} in fp32_v1, pass "
        f"{what}='fp32_v1' (or name no profile: the {use} default is "
        f"{_default_for_use(use)})."
    )


def _passed(name: str) -> str:
    row = PROFILES[name]
    done = [u for u in USES if row[u]]
    return " and ".join(done) if done else "no use"


def _verb(use: str) -> str:
    return "train" if use == "training" else "run inference"


def _default_for_use(use: str) -> str:
    return TRAINING_DEFAULT if use == "training" else BASELINE


def _current_default(use: str) -> str:
    """The process default for ``use``; reads ENV on the first inference ask."""
    with _lock:
        if use == "inference" and _defaults["inference"] is None:
            raw = os.environ.get(ENV)
            if raw is None or not raw.strip():
                _defaults["inference"] = DEFAULT
            else:
                name = _check_name(raw, ENV)
                if not PROFILES[name]["inference"]:  # pragma: no cover - table
                    _refuse_use(name, ENV, "inference")
                _defaults["inference"] = name
        return _defaults[use]


# ---------------------------------------------------------------------------
# Questions about the table
# ---------------------------------------------------------------------------


def computes(profile, family) -> bool:
    """True when ``profile`` computes models of ``family`` (rule 3)."""
    name = _check_name(profile, "profile")
    family = _check_family(family)
    fams = PROFILES[name]["computes"]
    return fams is None or family in fams


def default_reaches(profile, family) -> bool:
    """True when ``profile``, as the process default, applies to ``family``.

    Both the row's ``computes`` and its ``default_for`` must include the family
    (None in either means every family) (rule 2).
    """
    name = _check_name(profile, "profile")
    family = _check_family(family)
    row = PROFILES[name]
    return computes(name, family) and (
        row["default_for"] is None or family in row["default_for"]
    )


def _describe_computes(name: str) -> str:
    fams = PROFILES[name]["computes"]
    return "every family" if fams is None else ", ".join(fams)


# ---------------------------------------------------------------------------
# Resolving the profile a call runs in
# ---------------------------------------------------------------------------


def resolve(name=None, what="numeric_profile", use="inference", family=None) -> str:
    """Return the profile a call runs in, or refuse by name (rules 1-3, 6).

    ``what`` is the caller's argument label, used in every message. With no
    name: training gets the training default; inference gets the process
    default where it reaches ``family`` and BASELINE elsewhere (with
    ``family=None`` the default applies only if its row is the default for every
    family). A named profile is returned as asked or refused: a use it has not
    passed or a family it does not compute raises NotImplementedError.
    """
    use = _check_use(use)
    if family is not None:
        family = _check_family(family)
    if name is None:
        chosen = _current_default(use)
        row = PROFILES[chosen]
        if family is None:
            reaches = row["computes"] is None and row["default_for"] is None
        else:
            reaches = default_reaches(chosen, family)
        if not reaches or not row[use]:
            chosen = BASELINE
    else:
        chosen = _check_name(name, what)
        row = PROFILES[chosen]
        if not row[use]:
            _refuse_use(chosen, what, use)
        if family is not None and not computes(chosen, family):
            raise NotImplementedError(
                f"mojolearn: {what}={chosen!r} does not compute family "
                f"{family!r}: {chosen} computes {_describe_computes(chosen)} only "
                f"and is never widened to other families. Pass {what}='fp32_v1' "
                f"(computes every family) or name no profile for {family!r}."
            )
    _maybe_warn_speed(chosen, what)
    return chosen


def require_training(what, name=None) -> str:
    """A trainer's one line: the profile to train in, or a refusal (rule 5)."""
    return resolve(name, what=what, use="training")


def set_numeric_profile(name, use="inference") -> str:
    """Set the process default for ``use``; return the previous one (rule 4).

    The name is checked at once. Only fp32_v1 is available for training.
    """
    use = _check_use(use)
    key = _check_name(name, "numeric_profile")
    if not PROFILES[key][use]:
        _refuse_use(key, "numeric_profile", use)
    with _lock:
        previous = _current_default(use)
        _defaults[use] = key
    return previous


def numeric_profile(use="inference") -> str:
    """The current process default for ``use`` (reads ENV on first use)."""
    return _current_default(_check_use(use))


# ---------------------------------------------------------------------------
# Records, measurements, speed warning
# ---------------------------------------------------------------------------


def profiles() -> tuple:
    """One record per profile, table order; copies, so the table cannot change.

    Each record: name, default, training_default, the row's fields (computes and
    default_for as tuples or None), quality, and ``measured`` (vendor -> row).
    """
    inference_default = _current_default("inference")
    training_default = _current_default("training")
    out = []
    for name, row in PROFILES.items():
        rec = {
            "name": name,
            "default": name == inference_default,
            "training_default": name == training_default,
        }
        rec.update(copy.deepcopy(row))
        rec["measured"] = copy.deepcopy(MEASURED.get(name, {}))
        rec["quality_measured"] = [dict(q) for q in _quality_rows() if q.get("profile") == name]
        out.append(rec)
    return tuple(out)


def measured(profile, vendor=None):
    """This project's measured row for ``profile`` on ``vendor`` (default: the
    vendor in use), as a copy; None when there is no such measurement."""
    name = _check_name(profile, "profile")
    if vendor is None:
        vendor = _device.vendor()
    if not isinstance(vendor, str):
        raise TypeError(
            f"mojolearn: vendor must be a str or None, got "
            f"{type(vendor).__name__} ({vendor!r})"
        )
    row = MEASURED.get(name, {}).get(vendor)
    return None if row is None else dict(row)


def _maybe_warn_speed(name: str, what: str) -> None:
    if name == BASELINE:
        return
    vendor = _device.vendor()
    row = MEASURED.get(name, {}).get(vendor)
    if row is None:
        return
    lo, hi = row["over"]
    if not lo > 1.0:  # warn only when every measured ratio is slower
        return
    with _lock:
        if (name, vendor) in _warned:
            return
        _warned.add((name, vendor))
    warnings.warn(
        f"mojolearn: {what}={name!r} was measured {lo:g}x to {hi:g}x the time of "
        f"fp32_v1 on this vendor ({vendor}, box: {row['box']}"
        + (f", isa: {row['isa']}" if row.get("isa") else "") + "); operation timed: "
        + f"{row['what']}; source: {row['source']}. It runs anyway, in {name} as "
        f"asked. For fp32_v1 speed pass {what}='fp32_v1' (or "
        f"set_numeric_profile('fp32_v1') / {ENV}=fp32_v1).",
        NumericProfileSpeedWarning,
        stacklevel=3,
    )


def _reset_for_tests(paths=None) -> None:
    """Forget the process defaults (ENV is read again), the warned set, and
    reload MEASURED from ``paths`` (default: the installed or checkout results)."""
    with _lock:
        _defaults["inference"] = None
        _defaults["training"] = TRAINING_DEFAULT
        _warned.clear()
    _load_measured(_results_dirs() if paths is None else paths)


# ---------------------------------------------------------------------------
# Checkpoints: the rules that build on this module live in checkpoint_rules.py
# (state_field, adopt_saved, check_saved; re-exported by mojolearn.profiles)
# ---------------------------------------------------------------------------


def canonical(name, what="numeric_profile") -> str:
    """The registered name ``name`` stands for (whitespace stripped), or a refusal by
    name (rule 1: no aliases)."""
    return _check_name(name, what)


def default_profile(use="inference") -> str:
    """The process default for ``use`` (the same as ``numeric_profile``)."""
    return numeric_profile(use)


def set_default_profile(name, use="inference") -> str:
    """Set the process default for ``use``; returns the previous one (the same as
    ``set_numeric_profile``)."""
    return set_numeric_profile(name, use)

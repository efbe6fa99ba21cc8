"""The checkpoint rules of the numeric profiles (contract rule 8), beside
checkpoint.py: a state written under fp32_v1 carries no profile field (its bytes
never change); other profiles add ``{"numeric_profile": name}``; loading adopts the
profile that wrote the state or refuses a different one by name. Re-exported by
mojolearn.profiles.
"""
from __future__ import annotations

from collections.abc import Mapping

from .table import BASELINE, PROFILES, STATE_KEY
from . import profiles as _p


def state_field(profile) -> dict:
    """The field a state written under ``profile`` carries (rule 8)."""
    name = _p._check_name(profile, "profile")
    return {} if name == BASELINE else {STATE_KEY: name}


def _saved_profile(state, what: str) -> str:
    if not isinstance(state, Mapping):
        raise TypeError(
            f"mojolearn: {what} must be a mapping (a saved state), got "
            f"{type(state).__name__}"
        )
    if STATE_KEY not in state:
        return BASELINE  # a state with no field was written under fp32_v1
    return _p._check_name(state[STATE_KEY], f"{what}[{STATE_KEY!r}]")


def adopt_saved(state, name=None, what="state", use="inference") -> str:
    """The profile to rebuild a saved state in (rule 8).

    Named nothing: the state's own profile, whatever the process default is.
    Named a different profile: ValueError saying which profile wrote the state.
    The adopted profile must still be available for ``use``.
    """
    use = _p._check_use(use)
    saved = _saved_profile(state, what)
    if name is not None:
        asked = _p._check_name(name, "numeric_profile")
        if asked != saved:
            raise ValueError(
                f"mojolearn: numeric_profile={asked!r} does not match {what}: it "
                f"was written under numeric profile {saved!r}. Build the object "
                f"with numeric_profile={saved!r} (or name no profile to adopt it)."
            )
    if not PROFILES[saved][use]:
        raise NotImplementedError(
            f"mojolearn: {what} was written under numeric profile {saved!r}, "
            f"which is not available for {use} ({saved} has passed "
            f"{_p._passed(saved)} only); it is never replaced by fp32_v1 silently. "
            f"To {_p._verb(use)} in fp32_v1, start from a state written under "
            f"fp32_v1."
        )
    return _p.resolve(saved, what="numeric_profile", use=use)


def check_saved(state, profile, what="state") -> str:
    """Refuse to load ``state`` into an object computing in ``profile`` unless
    the state was written under that same profile (rule 8)."""
    have = _p._check_name(profile, "profile")
    saved = _saved_profile(state, what)
    if saved != have:
        raise ValueError(
            f"mojolearn: {what} was written under numeric profile {saved!r} but "
            f"this object computes in {have!r}; the results of one arithmetic "
            f"are not loaded into another. Load it into an object built with "
            f"numeric_profile={saved!r}."
        )
    return saved

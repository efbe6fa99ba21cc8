"""Numeric profiles: the number format that the matrix products compute in.

WHAT A PROFILE IS
    A numeric profile names the ARITHMETIC of a model's matrix products, for
    example "every product on mojolearn.identical.gemm.fp32.v1". It is separate
    from ``numeric_mode`` (the promise of identical bits across vendors, which
    every profile keeps) and from ``weight_format`` (how weights are STORED;
    stored weights are widened exactly to float32 before any profile runs).

ONE NAME, ONE ARITHMETIC, FOREVER
    Every name carries its version (``fp32_v1``, ``fixed15_v1``). There are no
    unversioned aliases: ``"fixed15"`` is simply unknown. A changed arithmetic
    gets a new name, so a name written into a checkpoint or a paper keeps its
    meaning. Whitespace around a name is stripped; anything but a str is a
    TypeError.

DEFAULTS NEVER SURPRISE, NAMES NEVER WIDEN
    A caller who names nothing gets the process inference default only in a
    family that default reaches (its row both computes the family and is the
    default for it); everywhere else it gets BASELINE (fp32_v1), and the object
    reports fp32_v1. Training always defaults to TRAINING_DEFAULT. A caller who
    NAMES a profile gets exactly that profile or a refusal that says why: it is
    never swapped for fp32_v1, nor stretched to a family it does not compute.

THE PROCESS DEFAULT
    ``MOJOLEARN_NUMERIC_PROFILE`` sets the inference default. It is read once,
    on first use, and a bad value is refused with the same words as a bad name
    (an unset or empty variable means "not set"). ``set_numeric_profile``
    changes the default later and returns the previous one.

WHERE THINGS ARE
    The table is plain data in _table/table.py; _table/profiles.py resolves a
    profile (the environment, the defaults, the refusals); the measured rows are read
    by _table/measured.py on first use; the checkpoint rules build on them in
    _table/checkpoint_rules.py. All are re-exported here. ``mojolearn.linalg`` never
    reads the numeric profile: the model classes choose it and call its GEMMs.

SPEED IS MEASURED HERE, NOT ASSUMED
    MEASURED holds only this project's own benchmark results (the JSON files
    written by ``make bench``, read on first use, not at import), profile ->
    vendor -> row. A vendor without a row
    reads None: no figure is borrowed from another box, implementation or
    profile. When a profile resolves on a vendor where it was measured slower
    than fp32_v1 (the whole measured range above 1), a NumericProfileSpeedWarning is issued once per (profile,
    vendor) and the call still runs in the profile asked for.

CHECKPOINTS
    A state written under fp32_v1 carries no profile field, so fp32_v1 bytes
    never change; other profiles add ``{"numeric_profile": name}``. Loading a
    state adopts the profile that wrote it or refuses a different one by name.

ERRORS
    Every message starts with ``mojolearn:`` and names the argument, the refused
    value, the reason and the way out.
"""
from ._table.profiles import (
    canonical, default_profile, set_default_profile, BASELINE, DEFAULT, TRAINING_DEFAULT,
    FAMILIES, ENV, STATE_KEY, USES, PROFILES, REJECTED, MEASURED, NumericProfileSpeedWarning,
    resolve, require_training, computes, default_reaches, set_numeric_profile, numeric_profile,
    profiles, measured,
)
from ._table.checkpoint_rules import state_field, adopt_saved, check_saved

__all__ = [
    "canonical", "default_profile", "set_default_profile", "BASELINE", "DEFAULT",
    "TRAINING_DEFAULT", "FAMILIES", "ENV", "STATE_KEY", "USES", "PROFILES", "REJECTED",
    "MEASURED", "NumericProfileSpeedWarning", "resolve", "require_training", "computes",
    "default_reaches", "set_numeric_profile", "numeric_profile", "profiles", "measured",
    "state_field", "adopt_saved", "check_saved",
]


def __dir__():
    """dir() shows the public API (__all__), not the module's imports."""
    return sorted(__all__)

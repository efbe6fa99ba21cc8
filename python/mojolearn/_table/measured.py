"""This project's measured rows for the numeric profiles: the speed rows of
``make bench`` (profile -> vendor -> row) and the quality rows of
``python -m mojolearn quality``, read from the result files on FIRST USE (not at
import: importing mojolearn reads no result file).

MEASURED behaves as a dict; the first read loads the installed results
(mojolearn/_results) or the checkout's bench/results. A malformed file is skipped
with a warning. No figure is borrowed from another box, implementation or profile.
"""
from __future__ import annotations

import json
import math
import threading
import warnings
from collections.abc import Mapping
from pathlib import Path

from .table import PROFILES

_lock = threading.RLock()
_loaded = [False]


def _registered() -> str:
    return ", ".join(PROFILES)


class _Rows(dict):
    """profile -> vendor -> row; loaded from the result files on first read."""

    def _ensure(self):
        if not _loaded[0]:
            _load_measured(_results_dirs())


def _reading(name):
    base = getattr(dict, name)

    def method(self, *args, **kwargs):
        self._ensure()
        return base(self, *args, **kwargs)

    method.__name__ = name
    return method


for _name in ("__getitem__", "__contains__", "__iter__", "__len__", "__eq__", "__ne__",
              "__repr__", "get", "keys", "values", "items", "copy"):
    setattr(_Rows, _name, _reading(_name))

MEASURED: dict = _Rows()
"""This project's own measured speed rows, profile -> vendor -> row, read from the
``make bench`` result files on first use (not at import). A vendor without a row
has none: nothing is borrowed from another box or profile.
"""


def _results_dirs() -> list:
    here = Path(__file__).parents[1]  # the package folder
    packaged = here / "_results"
    if packaged.is_dir():
        return [packaged]
    return [Path(__file__).resolve().parents[3] / "bench" / "results"]


_QUALITY = None


def _quality_rows() -> list:
    """This project's own quality measurements (bench/results/quality-*.json, written by
    ``python -m mojolearn quality``), read on first use: model, text, date, change and
    its interval, beside the table's seed numbers."""
    global _QUALITY
    if _QUALITY is None:
        rows = []
        for d in _results_dirs():
            for p in sorted(Path(d).glob("quality-*.json")):
                try:
                    r = json.loads(p.read_text())
                    rows.append({k: r[k] for k in ("profile", "model", "text", "date", "change",
                                                   "interval", "windows", "tokens_scored")}
                                | {"source": f"bench/results/{p.name}"})
                except (OSError, ValueError, KeyError, TypeError):
                    continue
        _QUALITY = rows
    return _QUALITY


class _Malformed(Exception):
    pass


def _text(obj, key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value.strip():
        raise _Malformed(f"{where}{key!r} must be a non-empty str, got {value!r}")
    return value.strip()


def _parse_row(entry, where: str) -> dict:
    if not isinstance(entry, Mapping):
        raise _Malformed(f"{where} must be an object, got {type(entry).__name__}")
    over = entry.get("over")
    ok = (
        isinstance(over, (list, tuple))
        and len(over) == 2
        and all(
            isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(v) and v > 0
            for v in over
        )
        and over[0] <= over[1]
    )
    if not ok:
        raise _Malformed(
            f"{where}'over' must be [lo, hi], positive finite numbers with "
            f"lo <= hi, got {over!r}"
        )
    return {
        "over": (float(over[0]), float(over[1])),
        "what": _text(entry, "what", where),
        "source": _text(entry, "source", where),
    }


def _parse_file(path: Path):
    """Return [(profile, vendor, row), ...] for one results file, or None when
    the file has no 'profiles' key. Raises _Malformed."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise _Malformed(f"cannot read JSON ({exc})") from None
    if not isinstance(data, Mapping):
        raise _Malformed(f"top level must be an object, got {type(data).__name__}")
    if "profiles" not in data:
        return None
    vendor = _text(data, "vendor", "")
    box = _text(data, "box", "")
    table = data["profiles"]
    if not isinstance(table, Mapping):
        raise _Malformed(f"'profiles' must be an object, got {type(table).__name__}")
    rows = []
    for name, entry in table.items():
        if name not in PROFILES:
            raise _Malformed(
                f"profile {name!r} is not registered (registered names: "
                f"{_registered()})"
            )
        row = _parse_row(entry, f"profiles[{name!r}]: ")
        row["box"] = box
        isa = data.get("isa")
        if isinstance(isa, str) and isa:
            row["isa"] = isa  # the CPU build it was measured with (mojolearn.cpu_isa())
        rows.append((name, vendor, row))
    return rows


def _this_isa():
    """The CPU build this process runs, or None when that cannot be decided (the
    error then surfaces at the first kernel call, not here)."""
    try:
        from .._core.cpu import cpu_isa

        return cpu_isa()
    except ImportError:
        return None


def _this_box():
    from .._core.box import box

    return box()


def _rank(row, here):
    """How close a row's measurement is to this process: the same CPU build first,
    then the same machine."""
    return (row.get("isa") is not None and row.get("isa") == here[0],
            row.get("box") == here[1])


def _load_measured(paths) -> dict:
    """Rebuild MEASURED (in place) from ``paths``: result files or folders of
    ``*.json``. Files without 'profiles' are ignored; a malformed file is
    skipped with a warning. Files are read in sorted order within a folder;
    a later file's row replaces an earlier one for the same (profile, vendor),
    except that a row measured with the CPU build this process runs (its 'isa',
    mojolearn.cpu_isa()) is never replaced by one measured with another build, and
    among those a row measured on this machine (its 'box', mojolearn._core.box.box()) is
    never replaced by one from another machine."""
    files = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            files.extend(sorted(p.glob("*.json")))
        elif p.exists():
            files.append(p)
    table: dict = {}
    here = (_this_isa(), _this_box())
    for f in files:
        try:
            rows = _parse_file(f)
        except _Malformed as exc:
            warnings.warn(
                f"mojolearn: benchmark results file {str(f)!r} skipped: {exc}. "
                f"Fix or regenerate it with 'make bench'.",
                UserWarning,
                stacklevel=2,
            )
            continue
        for name, vendor, row in rows or ():
            old = table.setdefault(name, {}).get(vendor)
            if old is not None and _rank(old, here) > _rank(row, here):
                continue
            table[name][vendor] = row
    with _lock:
        _loaded[0] = True
        dict.clear(MEASURED)
        dict.update(MEASURED, table)
    return MEASURED

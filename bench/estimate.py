"""How long `make bench` will take on this machine, per CPU build it runs, from this
box's last result file of each build.

    python bench/estimate.py [--quick] ISA [ISA ...]

A result file written since the bench records its own elapsed time (`elapsed_s`) gives
that time. An older file gives the time its timed reps account for: every rep of every
contender, the untimed warm-up call of each, the warm calls before each short timed
call and the settle pauses after numpy's and torch's calls; model loading and the
memory rows are not in it, so it is a lower bound and says so. A build this box has no
file for is named as such. bench/run.py prints the same line for its own build when it
starts.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
# bench/run.py's timing rules (kept in step with its race())
SETTLE_S = 0.35
WARM_S = 0.05
WARM_MIN_S = 0.03
SETTLED = ("numpy", "torch", "torch_int_mm")


def slug(box: str) -> str:
    """The box part of a result file's name, as bench/run.py writes it."""
    return re.sub(r"[^a-z0-9]+", "-", box.lower()).strip("-")


def result_file(box: str, isa: str, quick: bool = False, results: Path = RESULTS):
    """This box's last result file for `isa` (the CPU run first, then a GPU run), or None."""
    tail = f"-{slug(box)}-{isa}{'-quick' if quick else ''}.json"
    found = sorted(results.glob(f"*{tail}"), key=lambda p: (not p.name.startswith("cpu-"), p.name))
    found = [p for p in found if quick or not p.stem.endswith("-quick")]
    return found[0] if found else None


def case_seconds(case: dict) -> float:
    """The seconds one case's reps, warm-up calls, warm calls and pauses took."""
    reps = case.get("reps_ms") or {}
    total = 0.0
    for name, times in reps.items():
        if not times:
            continue
        med = sorted(times)[len(times) // 2] / 1e3
        total += sum(times) / 1e3 + med  # the timed reps and the warm-up call
        if med < WARM_S:
            total += len(times) * max(WARM_MIN_S, med)
        if name in SETTLED and not case.get("case", "").endswith(";8;8;8"):
            total += (len(times) + 1) * SETTLE_S
    return total


def seconds(data: dict) -> tuple:
    """(seconds, exact): the file's recorded elapsed time, or the lower bound its cases
    account for."""
    if isinstance(data.get("elapsed_s"), (int, float)):
        return float(data["elapsed_s"]), True
    return sum(case_seconds(c) for c in data.get("cases", [])), False


def _minutes(s: float) -> str:
    return f"{s / 60:.0f} min" if s >= 90 else f"{s:.0f} s"


def line(box: str, isa: str, quick: bool = False, results: Path = RESULTS) -> tuple:
    """(text, seconds or None) of one build's estimate."""
    p = result_file(box, isa, quick, results)
    if p is None:
        return f"{isa}: no earlier {'quick ' if quick else ''}run of this build on this box", None
    try:
        s, exact = seconds(json.loads(p.read_text()))
    except ValueError:
        return f"{isa}: {p.name} is not valid JSON", None
    if exact:
        return f"{isa}: about {_minutes(s)} (the last run, {p.name})", s
    return (f"{isa}: at least {_minutes(s)} (the timed calls of the last run, {p.name}; "
            f"model loading not counted)"), s


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="make bench's estimate for this machine")
    ap.add_argument("isas", nargs="*")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--results", default=str(RESULTS))
    a = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "python"))
    from mojolearn._core import box as _box  # pure Python: reads /proc/cpuinfo

    box = _box.box()
    lines = [line(box, isa, a.quick, Path(a.results)) for isa in a.isas]
    known = [s for _, s in lines if s is not None]
    head = f"make bench{' QUICK=1' if a.quick else ''}: estimate on {box}"
    if len(lines) > 1 and known:
        head += f", about {_minutes(sum(known))} for the builds with an earlier run"
    print(head)
    for text, _ in lines:
        print(f"  {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The cache plan this CPU gets against the tuned one (docs/cpu.md, "Cache blocks follow
the CPU's caches"), in one process, interleaved: the same GEMMs timed under the plan
made for the caches this CPU reports and under the plan of the build's reference
machine (its tuned table), alternating every repetition; medians, and the ratio
reference time / this CPU's plan time (above 1: the CPU's own plan is faster).

    PYTHONPATH=python MOJOLEARN_ISA=v3 .venv/bin/python bench/cache_plan.py [--reps N]

Where the reported caches equal the build's reference (e.g. the v3 build on a Zen 3,
v4 on a Zen 4), the two plans are the same table and the ratios only show the noise.
Writes bench/results/cache-plan-<box>-<isa>.json.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import mojolearn
from mojolearn import linalg
from mojolearn._core import box as _box
from mojolearn._core.loader import blocking, cache_sizes, cpu_native

ROOT = Path(__file__).resolve().parents[1]


def cases():
    rng = np.random.default_rng(0)
    out = []
    for n in (1024, 2048):
        a = rng.standard_normal((n, n)).astype(np.float32)
        b = rng.standard_normal((n, n)).astype(np.float32)
        qa8, qb8 = linalg.quantize_int8(a), linalg.quantize_int8(b)
        qa15, qb15 = linalg.quantize_int15(a), linalg.quantize_int15(b)
        out += [
            (f"fp32.v1 NN {n}^3", lambda a=a, b=b: linalg.matmul(a, b)),
            (f"fp32.v1 NT {n}^3", lambda a=a, b=b: linalg.matmul(a, b, transpose_b=True)),
            (f"int8i32.v1 {n}^3", lambda a=qa8, b=qb8: linalg.matmul_int8(a, b)),
            (f"int15i64.v1 {n}^3", lambda a=qa15, b=qb15: linalg.matmul_int15(a, b)),
        ]
    return out


def _commit():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, timeout=30).stdout.strip() or None
    except OSError:
        return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=9)
    args = ap.parse_args(argv)
    native = cpu_native()
    system = cache_sizes()
    ref_table = blocking()
    reference = (32 * 1024, ref_table["REF_L2"], ref_table["REF_L3"])
    plans = {"this CPU": system, "reference": reference}
    tables = {}
    for name, sizes in plans.items():
        native.set_cache_sizes(sizes)
        tables[name] = blocking()
    box = _box.box()
    isa = mojolearn.cpu_isa()
    print(f"{box} ({isa} build, {mojolearn.get_num_threads()} threads); caches {system}")
    for name, t in tables.items():
        keys = [k for k in ("L2", "MC", "NCS", "PANEL_OUTER_A_BYTES", "INT_A_BLOCK_BYTES",
                            "AVX2_A_BLOCK_BYTES", "AMX_A_BLOCK_BYTES") if k in t]
        print(f"  plan {name}: " + ", ".join(f"{k}={t[k]}" for k in keys))
    rows = []
    for label, fn in cases():
        times = {name: [] for name in plans}
        for name, sizes in plans.items():  # warm-up under each plan
            native.set_cache_sizes(sizes)
            fn()
        for _ in range(args.reps):
            for name, sizes in plans.items():
                native.set_cache_sizes(sizes)
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
        med = {name: statistics.median(v) for name, v in times.items()}
        ratio = med["reference"] / med["this CPU"]
        rows.append({"case": label, "this_cpu_s": med["this CPU"], "reference_s": med["reference"],
                     "reference_over_this_cpu": ratio})
        print(f"  {label:22s} this CPU {med['this CPU'] * 1e3:8.2f} ms   reference "
              f"{med['reference'] * 1e3:8.2f} ms   ratio {ratio:.3f}", flush=True)
    native.set_cache_sizes(system)
    out = ROOT / "bench" / "results" / f"cache-plan-{re.sub(r'[^a-z0-9]+', '-', box.lower()).strip('-')}-{isa}.json"
    out.write_text(json.dumps({
        "box": box, "isa": isa, "threads": mojolearn.get_num_threads(), "reps": args.reps,
        "cpu_id": _box.identity(), "plans": {k: dict(v) for k, v in tables.items()},
        "rows": rows, "commit": _commit(), "date": time.strftime("%Y-%m-%d", time.gmtime()),
    }, indent=1) + "\n")
    print(f"written {out.relative_to(ROOT)}")


if __name__ == "__main__":
    sys.exit(main())

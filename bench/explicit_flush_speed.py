"""Speed of the explicit-flush test build against the shipped build of the same ISA.

    python bench/explicit_flush_speed.py [--isa amx] [--reps 15] [--threads 2] [--n 1024]

Builds the explicit-flush variant if needed (tests/flush_cases.py), then runs one child
process per build and alternates single timed calls between them (interleaved, so a
neighbour's load hits both alike); prints the median per case and the ratio. Cases:
fp32.v1 n^3 (NN) and int8i32.v1 n^3 on pre-quantized operands.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

CHILD = r"""
import json, sys, time
import numpy as np
import mojolearn
from mojolearn import linalg
from mojolearn._core.loader import blocking
n, threads = int(sys.argv[1]), int(sys.argv[2])
mojolearn.set_num_threads(threads)
rng = np.random.default_rng(0)
a = rng.standard_normal((n, n)).astype(np.float32)
b = rng.standard_normal((n, n)).astype(np.float32)
qa, qb = linalg.quantize_int8(a), linalg.quantize_int8(b)
cases = {"fp32.v1": lambda: linalg.matmul(a, b), "int8i32.v1": lambda: linalg.matmul_int8(qa, qb)}
for f in cases.values():
    f(); f()
print(json.dumps({"explicit_flush": blocking().get("EXPLICIT_FLUSH"), "isa": mojolearn.cpu_isa()}), flush=True)
for line in sys.stdin:
    f = cases[line.strip()]
    t = time.perf_counter(); f(); dt = time.perf_counter() - t
    print(dt, flush=True)
"""


def main():
    import flush_cases as FC

    ap = argparse.ArgumentParser()
    ap.add_argument("--isa", default=None)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n", type=int, default=1024)
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT / "python"))
    from mojolearn._core import cpu as _cpu

    isa = a.isa or _cpu.runnable()[0]
    folder = FC.variant_package(isa)
    kids = {}
    for name, first in (("shipped", ROOT / "python"), ("explicit-flush", folder)):
        p = subprocess.Popen([sys.executable, "-c", CHILD, str(a.n), str(a.threads)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             env=FC.child_env(isa, first))
        info = json.loads(p.stdout.readline())
        kids[name] = p
        print(f"{name}: {info}", flush=True)
    times = {(k, c): [] for k in kids for c in ("fp32.v1", "int8i32.v1")}
    for _ in range(a.reps):
        for case in ("fp32.v1", "int8i32.v1"):
            for name, p in kids.items():
                time.sleep(0.05)
                p.stdin.write(case + "\n")
                p.stdin.flush()
                times[(name, case)].append(float(p.stdout.readline()))
    for p in kids.values():
        p.stdin.close()
        p.wait()
    for case in ("fp32.v1", "int8i32.v1"):
        s = statistics.median(times[("shipped", case)])
        e = statistics.median(times[("explicit-flush", case)])
        print(f"{case} {a.n}^3, {a.threads} threads, isa {isa}: shipped {s * 1e3:.2f} ms, "
              f"explicit-flush {e * 1e3:.2f} ms (medians of {a.reps}, interleaved): "
              f"explicit-flush takes {e / s:.2f}x the time")


if __name__ == "__main__":
    main()

"""Resident memory stays flat over many product calls (issue 43, item 2): every GEMM
entry read the process's cache plan through the runtime's get-or-create lookup of a
named global, which kept about 66 bytes a call (300,000 calls: +19 MiB; a decode step of
SmolLM2-135M about 8 KB). Each entry here runs 10^5 calls in a fresh process after 10^4
warm-up calls; RSS may not grow by 1 MiB (before the fix: about 6.3 MiB). make fuzz
runs the same with 10^6 calls."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def run_memory(n, only=None, timeout=900):
    cmd = [sys.executable, str(HERE / "memory_run.py"), str(n)] + ([only] if only else [])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    return [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads RSS from /proc")
def test_rss_flat_over_many_product_calls():
    rows = run_memory(100_000)
    assert len(rows) == 5
    grown = {r["entry"]: round(r["rss_after"] - r["rss_warm"], 3) for r in rows}
    assert all(g < 1.0 for g in grown.values()), f"RSS growth (MiB) over 10^5 calls: {grown}"

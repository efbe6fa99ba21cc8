"""Every fast kernel on every CPU build this CPU can run (house style 4; README "CPU
builds"): the kernel test files against the oracle, once per build, each in a child
process with MOJOLEARN_ISA=<name> (the build is chosen once per process). The build
this process runs is covered by the same files in-process. A build this CPU cannot
run (e.g. amx without AMX, or v4 on an AVX2-only CPU) is skipped with the feature it
lacks.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import mojolearn
from mojolearn._core import cpu as _cpu

ROOT = Path(__file__).resolve().parents[1]
# the integer kernels have their own ISA paths (AVX2 widening, AVX512-VNNI, AMX tiles):
# all of their tests, domain edges included; the float kernels' quick tests
FILES = {
    "tests/test_gemm_int.py": None,
    "tests/test_gemm_fp32.py": "not slow",
    "tests/test_gemm_bf16.py": "not slow",
    "tests/test_convert.py": "not slow",
    "tests/test_prepared.py": "not slow",
    "tests/test_prepared_lowbit.py": None,
    "tests/test_cache_plan.py": None,
}


@pytest.mark.slow
@pytest.mark.parametrize("isa", ["amx", "v4", "v3"])
def test_kernels_match_the_oracle_on_every_build(isa):
    """6.5 L-5 L-7 W-3 W-4: the kernel test files pass on the `isa` build (AMX: the tile
    kernels of int8i32.v1 and int15i64.v1, bit for bit against the oracle)."""
    why = _cpu.refusal(isa)
    if why:
        pytest.skip(f"this CPU cannot run the {isa} build: {why}")
    if isa == mojolearn.cpu_isa():
        pytest.skip(f"{isa} is the build this process runs: the same files cover it in-process")
    env = {k: v for k, v in os.environ.items() if k not in ("MOJOLEARN_NATIVE", "MOJOLEARN_CPU_HIDE")}
    env["MOJOLEARN_ISA"] = isa
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python"), str(ROOT)])
    for f, marks in FILES.items():
        cmd = [sys.executable, "-m", "pytest", f, "-q", "-x", "-p", "no:cacheprovider"]
        if marks:
            cmd += ["-m", marks]
        r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
        assert r.returncode == 0, f"{f} on {isa}:\n" + r.stdout[-4000:] + r.stderr[-2000:]

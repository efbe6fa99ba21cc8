"""The training identity tests' one way to run a child script under every CPU build this
CPU runs (MOJOLEARN_ISA forces each, in its own process)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def outputs_of_every_build(code: str, *args: str, timeout: int = 300) -> dict:
    """{build: the child's stripped stdout} for ``python -c code *args`` under each
    runnable build; skips the calling test where this CPU runs one build only (nothing
    to compare)."""
    from mojolearn._core import cpu as _cpu

    builds = _cpu.runnable()
    if len(builds) < 2:
        pytest.skip(f"this CPU runs one build only ({builds[0]}): no second build to compare")
    outs = {}
    for name in builds:
        env = dict(os.environ, MOJOLEARN_ISA=name, PYTHONPATH=os.path.join(ROOT, "python"))
        env.pop("MOJOLEARN_NATIVE", None)
        r = subprocess.run([sys.executable, "-c", code, *args], env=env,
                           capture_output=True, text=True, timeout=timeout)
        assert r.returncode == 0, r.stderr[-2000:]
        outs[name] = r.stdout.strip()
    return outs

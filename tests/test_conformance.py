"""The conformance run (fp32 contract, section "Conformance"; rules 6.5 and H-1)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


def run_cli(*args, env_extra=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    env.update(env_extra or {})
    return subprocess.run([PY, "-m", "mojolearn", "conformance", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def test_conformance_run_matches_golden():
    """Conformance: every lane of this build matches contracts/golden/v1.json (exit 0)."""
    r = run_cli("--quiet")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 mismatch" in r.stdout
    assert "identity checks: 0 differ" in r.stdout


def test_conformance_sabotage_fails_and_names_lanes():
    """Conformance: --sabotage perturbs a leaf order / a low bit and the run MUST fail (exit 1)."""
    r = run_cli("--quiet", "--sabotage")
    assert r.returncode == 1, r.stdout + r.stderr
    # exit 1 is also what an uncaught exception gives: the run must end by itself
    assert "Traceback" not in r.stderr, r.stderr
    names = [ln for ln in r.stdout.splitlines() if ln.startswith("MISMATCH lane=")]
    lanes = {ln.split()[1] for ln in names}
    assert "lane=fp32.v1/NN" in lanes and "lane=int8i32.v1" in lanes and "lane=int15i64.v1" in lanes
    # the model lanes (M-18: logits of the tiny fixture model under both profiles) fail too
    assert "lane=model/fp32_v1/float32" in lanes and "lane=model/fixed15_v1/float32" in lanes
    assert all("fixture=" in ln for ln in names)
    # the identity checks inside the run (6.5: row alone vs batch) see the sabotage too
    assert any(ln.split()[1].startswith("lane=identity/") for ln in names)


def test_conformance_missing_golden_is_exit_2(tmp_path):
    """Conformance: an error (no golden file) exits 2 with a message, never a traceback."""
    r = run_cli("--golden", str(tmp_path / "nope.json"))
    assert r.returncode == 2
    assert "mojolearn: conformance" in r.stderr


def test_conformance_export_and_diff(tmp_path):
    """Conformance: --export writes this box's column; diff of equal columns is 0, of a tampered one 1."""
    a = tmp_path / "a.json"
    r = run_cli("--quiet", "--export", str(a))
    assert r.returncode == 0
    col = json.loads(a.read_text())
    assert col["vendor"] == "cpu" and col["box"] and col["versions"]["max"]
    b = tmp_path / "b.json"
    col["hashes"]["fp32.v1/NN:standard"] = "0" * 16
    b.write_text(json.dumps(col))
    assert run_cli("diff", str(a), str(a)).returncode == 0
    r2 = run_cli("diff", str(a), str(b))
    assert r2.returncode == 1 and "fp32.v1/NN:standard" in r2.stdout


def test_golden_is_the_oracles_answer():
    """Conformance: the committed golden hashes are what the independent oracle computes."""
    r = subprocess.run([PY, str(ROOT / "contracts" / "golden" / "make_golden.py"), "--check"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr


def test_lanes_cover_golden():
    """Conformance: the run's lanes and the golden file name exactly the same checks."""
    sys.path.insert(0, str(ROOT / "python"))
    from mojolearn import conformance as C

    keys = {f"{lane}:{fx}" for lane, fx, _ in C.lanes()}
    golden = json.loads((ROOT / "contracts" / "golden" / "v1.json").read_text())["hashes"]
    assert keys == set(golden)
    profiles = {k.split(":")[0].split("/")[0] for k in keys}
    assert {"fp32.v1", "bf16f32.v1", "int8i32.v1", "int15i64.v1", "convert"} <= profiles


@pytest.mark.slow
def test_every_cpu_build_passes_conformance():
    """6.5: `make conformance` (--every-isa) runs the whole conformance on every CPU
    build this CPU runs, in a child each, and names the builds it skipped and why."""
    sys.path.insert(0, str(ROOT / "python"))
    from mojolearn._core import cpu as _cpu

    r = run_cli("--quiet", "--every-isa")
    assert r.returncode == 0, r.stdout + r.stderr
    for name in _cpu.isa_names():
        why = _cpu.refusal(name)
        if why:
            assert f"SKIPPED isa={name}: {why}" in r.stdout
        else:
            assert f"_native_{name}, isa {name}," in r.stdout
            assert f"{name}:ok" in r.stdout


def test_every_isa_names_a_skipped_build():
    """6.5: a build this CPU cannot run (here: AMX hidden from the detection) is skipped
    by --every-isa with the feature it lacks; the others still run."""
    r = run_cli("--quiet", "--every-isa", env_extra={"MOJOLEARN_CPU_HIDE": "amx-tile,avx512f"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SKIPPED isa=amx: the CPU lacks avx512f (hidden by MOJOLEARN_CPU_HIDE)" in r.stdout
    assert "SKIPPED isa=v4: the CPU lacks avx512f (hidden by MOJOLEARN_CPU_HIDE)" in r.stdout
    assert "ran v3:ok; skipped amx, v4" in r.stdout


def test_sabotage_never_reaches_another_threads_products():
    """Conformance (6.3, L-5): the sabotage is a per-call argument of the conformance
    run's own calls, not a process-wide switch: while a sabotaged run is in progress
    in one thread (and fails, as it must), another thread's fp32.v1, int8i32.v1 and
    int15i64.v1 products keep the oracle's bits."""
    import threading

    import numpy as np

    from mojolearn import conformance, linalg
    from tests import oracle as O
    from tests.bits import assert_same_bits

    rng = np.random.default_rng(10)
    a = rng.standard_normal((7, 300)).astype(np.float32)
    b = rng.standard_normal((300, 40)).astype(np.float32)
    w = rng.standard_normal((40, 300)).astype(np.float32)
    exp = O.gemm_fp32_v1(a, b)
    exp8 = O.gemm_int8_f32(a, w)
    exp15 = O.gemm_int15_f32(a, w)
    done = threading.Event()
    out = {}

    def sabotaged_run():
        try:
            out["run"] = conformance.run(conformance.load_golden(None), quiet=True, sabotage=True)
        finally:
            done.set()

    t = threading.Thread(target=sabotaged_run)
    t.start()
    rounds = 0
    try:
        while not done.is_set() or rounds < 3:
            assert_same_bits(linalg.matmul(a, b), exp, f"fp32 round {rounds}")
            assert_same_bits(linalg.matmul_int8(a, w), exp8, f"int8 round {rounds}")
            assert_same_bits(linalg.matmul_int15(a, w), exp15, f"int15 round {rounds}")
            rounds += 1
    finally:
        t.join()
    results, mismatches = out["run"]
    assert mismatches, "the sabotaged run must fail"
    assert rounds >= 3
    # and the sabotage is gone for this thread's later calls too
    assert_same_bits(linalg.matmul(a, b), exp, "after the run")

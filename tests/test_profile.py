"""python -m mojolearn profile (issue 42): the per-op breakdown of a model call. The
timers see every kernel call the model makes (products by shape, attention,
elementwise kernels, the state-space scans), the categories sum to the wall time with
the rest counted as Python and copies, and the timers are removed after the run."""
import subprocess
import sys
from pathlib import Path

import numpy as np

from mojolearn._tools import profile as P
from mojolearn.models import CausalLM
from mojolearn.models._exec import kernels as K
from test_models import TINY, tiny_weights, write_model

ROOT = Path(__file__).resolve().parents[1]


def test_breakdown_sees_every_product_and_kernel(tmp_path):
    cfg = dict(TINY)
    lm = CausalLM.load(write_model(tmp_path / "m", cfg, tiny_weights(cfg)))
    ids = np.array([[1, 2, 3, 4, 5]])
    before = K.gemm_prepared
    b = P.breakdown(lambda: lm.forward(ids))
    assert K.gemm_prepared is before  # the timers are gone
    d, ff, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    hd = d // cfg["num_attention_heads"]
    nq, nk = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    shapes = {(m, n, k): c for (_, m, n, k, _, c, _) in b["products"]}
    # per layer: qkv, o, gate/up, down; then the head
    assert shapes[(5, nq + 2 * nk, d)] == L and shapes[(5, d, nq)] == L
    assert shapes[(5, 2 * ff, d)] == L and shapes[(5, d, ff)] == L
    assert shapes[(5, cfg["vocab_size"], d)] == 1
    assert b["kernels"]["attention"][1] == L and b["kernels"]["rmsnorm"][1] == 2 * L + 1
    cats = b["categories"]
    assert {"products", "attention", "elementwise kernels", "Python and copies"} <= set(cats)
    # the kernel timers never count a call twice: together they fit in the wall time
    assert sum(v for k, v in cats.items() if k != "Python and copies") <= b["wall_s"]
    assert abs(sum(cats.values()) - b["wall_s"]) < 1e-9
    assert "products by shape" in P.report("t", b)


def test_breakdown_counts_system_time_and_page_faults():
    """The operating system's share of a call: new memory first written faults its pages
    in (here 64 MiB written once: at least one fault a 2 MiB huge page), memory written
    again does not."""
    import resource  # noqa: F401  (the platforms mojolearn runs on have it)

    fresh = P.breakdown(lambda: np.ones(16 << 20, dtype=np.float32))
    assert fresh["page_faults"] >= 32 and fresh["system_s"] >= 0
    assert "page faults (new memory first written)" in P.report("t", fresh)
    kept = np.ones(16 << 20, dtype=np.float32)  # written: its pages are in
    again = P.breakdown(lambda: kept.fill(1.0))
    assert again["page_faults"] < fresh["page_faults"] // 4


def test_median_breakdown_warms_then_reports_the_median_run():
    """One untimed call first (a first call of a shape pays for growing workspaces), then
    reps timed runs; the breakdown is the median run's, whole (its categories sum to its
    own wall time), with every timed run's wall time."""
    import time

    import pytest

    waits = iter([0.1, 0.002, 0.08, 0.03])  # the untimed call, then three timed runs
    calls = []

    def call():
        calls.append(1)
        time.sleep(next(waits))

    b = P.median_breakdown(call, 3)
    assert len(calls) == 4
    assert len(b["runs_s"]) == 3
    assert b["runs_s"][0] < b["runs_s"][2] < b["runs_s"][1]
    assert b["wall_s"] == b["runs_s"][2]
    assert abs(sum(b["categories"].values()) - b["wall_s"]) < 1e-9
    assert "median of 3 timed runs" in P.report("t", b)
    with pytest.raises(ValueError, match="reps must be at least 1"):
        P.median_breakdown(call, 0)


def test_profile_command_runs(tmp_path):
    cfg = dict(TINY)
    path = write_model(tmp_path / "m", cfg, tiny_weights(cfg))
    r = subprocess.run([sys.executable, "-m", "mojolearn", "profile", path, "--tokens", "16",
                        "--decode", "3"], capture_output=True, text=True, timeout=300,
                       env={"PYTHONPATH": str(ROOT / "python"), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "CausalLM.forward, prefill 16" in r.stdout and "products" in r.stdout
    assert "CausalLM.generate, 3 tokens" in r.stdout


def test_timed_torch_mode_splits_the_kernels():
    """The torch mode's timers: products, and each native kernel by name (a causal sdpa is
    the fused attention, nn_attention); the mode's functions are restored after."""
    import pytest

    torch = pytest.importorskip("torch")
    import mojolearn.torch as mt
    from mojolearn._torch import mode as M

    q = torch.randn(1, 2, 6, 8)
    with mt.identical():
        with P.timed_torch_mode() as rec:
            torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
            q[0, 0] @ q[0, 1].T
    assert rec["products"] > 0 and set(rec["by_kernel"]) == {"nn_attention"}
    assert rec["kernels"] == pytest.approx(sum(rec["by_kernel"].values()))
    assert M._product.__name__ == "_product"


def _f32_bits(x: float) -> int:
    import struct

    return struct.unpack("<I", struct.pack("<f", x))[0]


def test_fma_peak_loop_runs_every_round_with_the_given_operands():
    """gemm/cpu/peak.mojo's loop: every task runs every round on every accumulator (with
    x = y = 1 each lane counts its rounds exactly), and x and y are the caller's
    (x = 1/2, y = 1: each lane settles at 2; y = 1/2: half the count), so the timed
    loop can be neither folded nor cut short by the compiler."""
    from mojolearn._core.loader import blocking, cpu_native

    nat, bt = cpu_native(), blocking()
    lanes = bt["W"] * bt["MR"] * bt["NV"]
    out = np.full(3, -1.0, np.float32)
    nat.fma_peak((1000, 3, _f32_bits(1.0), _f32_bits(1.0), out.ctypes.data))
    assert out.tolist() == [1000.0 * lanes] * 3
    nat.fma_peak((1000, 2, _f32_bits(0.5), _f32_bits(1.0), out.ctypes.data))
    assert out[:2].tolist() == [2.0 * lanes] * 2
    nat.fma_peak((1000, 1, _f32_bits(1.0), _f32_bits(0.5), out.ctypes.data))
    assert out[0] == 500.0 * lanes


def test_fma_peak_measures_and_refuses_bad_arguments():
    import pytest

    pk = P.fma_peak(tasks=2, runs=2, seconds=0.002)
    assert pk["tasks"] == 2 and len(pk["runs_gflops"]) == 2
    assert pk["gflops"] == max(pk["runs_gflops"]) > 0
    assert pk["per_task_gflops"] == pytest.approx(pk["gflops"] / 2)
    for bad in ({"tasks": 0}, {"runs": 0}, {"seconds": 0.0}):
        with pytest.raises(ValueError, match="mojolearn: fma_peak"):
            P.fma_peak(**bad)


def test_report_gives_each_shape_its_share_of_the_peak():
    b = {"wall_s": 1.0, "categories": {"products": 0.5, "Python and copies": 0.5},
         "kernels": {}, "products": [("gemm_prepared", 4, 8, 16, 0.5, 1, 50.0),
                                      ("gemm_int15", 4, 8, 16, 0.5, 1, 60.0)]}
    assert "% of the FMA peak" not in P.report("t", b)
    text = P.report("t", b, peak_gflops=200.0).splitlines()
    assert "% of the FMA peak" in text[-3] and text[-2].endswith(" 25.0%")
    assert text[-1].endswith("60.0")  # an integer product: no share of the float peak

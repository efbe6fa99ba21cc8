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

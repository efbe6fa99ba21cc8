"""The Mamba-2 SSD for training (rules T-75 .. T-86): the forward against the inference
kernel's bits, the backward against the independent oracle (tests/mamba2_train_oracle.py)
bit for bit on random and edge inputs, the oracle's sabotaged orders shown to move bits,
the gradients against torch autograd (float64) on the plain sequential recurrence, and the
identities: thread counts, every CPU build, a batch against its rows alone."""
from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import sys

import numpy as np
import pytest

from mojolearn._train.ssm import mamba2 as M2

pytestmark = pytest.mark.filterwarnings("ignore::mojolearn.profiles.NumericProfileSpeedWarning")

import mamba2_train_oracle as OR
import mamba_oracle as MO
from every_build import outputs_of_every_build
from pool_check import changing_calls, pooled_trainer_matches_fresh

P, N = 64, 128


def bits(a):
    return np.ascontiguousarray(a).view(np.uint32)


def same(a, b):
    return a.shape == b.shape and np.array_equal(bits(a), bits(b))


def make(b, L, H, seed=0, kind="random"):
    """(xbc, dt, A, D, ds) float32. kind "edge": +-0, subnormals and large values in x, B,
    C and ds; dt with +0, a subnormal and large values; A_log large and small."""
    rng = np.random.default_rng(seed)
    CD = P * H + 2 * N
    xbc = (rng.standard_normal((b, L, CD)) * 0.5).astype(np.float32)
    dt = (rng.random((b, L, H)) * 0.06 + 0.002).astype(np.float32)
    A_log = (rng.standard_normal(H) * 0.5).astype(np.float32)
    D = rng.standard_normal(H).astype(np.float32)
    ds = rng.standard_normal((b, L, P * H)).astype(np.float32)
    if kind == "edge":
        sub = np.float32(3e-39)
        for arr in (xbc, ds):
            flat = arr.reshape(-1)
            idx = rng.permutation(flat.size)
            k = flat.size // 12
            flat[idx[:k]] = 0.0
            flat[idx[k:2 * k]] = -0.0
            flat[idx[2 * k:3 * k]] = sub * np.sign(rng.standard_normal(k)).astype(np.float32)
            flat[idx[3 * k:3 * k + k // 4]] *= 60.0
        f = dt.reshape(-1)
        idx = rng.permutation(f.size)
        k = max(1, f.size // 10)
        f[idx[:k]] = 0.0
        f[idx[k:2 * k]] = np.float32(2e-39)
        f[idx[2 * k:3 * k]] = np.float32(4.0)
        f[idx[3 * k:3 * k + max(1, k // 3)]] = np.float32(90.0)
        A_log[0] = np.float32(3.0)                       # A = -20.1: exp underflows
        if H > 1:
            A_log[1] = np.float32(-8.0)                  # A = -3.4e-4: slow decay
        D[-1] = np.float32(-0.0)
    A = MO.neg(MO.expf(A_log))                           # S-15
    return xbc, dt, A, D, ds, A_log


CASES = {
    "L1": (1, 1, 1, 1, "random"),
    "batch3_heads3": (3, 37, 3, 2, "random"),
    "one_boundary": (1, 257, 2, 3, "random"),
    "two_boundaries": (1, 513, 1, 4, "random"),
    "edge_one_boundary": (2, 300, 3, 5, "edge"),
    "edge_short": (1, 130, 2, 6, "edge"),
}


@functools.lru_cache(maxsize=None)
def _oracle(name, variant=()):
    b, L, H, seed, kind = CASES[name]
    xbc, dt, A, D, ds, _ = make(b, L, H, seed, kind)
    return OR.ssd_backward(xbc, dt, A, D, ds, variant)


def _kernel(name):
    b, L, H, seed, kind = CASES[name]
    xbc, dt, A, D, ds, _ = make(b, L, H, seed, kind)
    s, saved = M2.ssd_forward(xbc, dt, A, D)
    return s, saved, M2.ssd_backward(saved, ds)


@pytest.mark.parametrize("L", [1, 255, 256, 257, 300, 513])
def test_T75_forward_is_the_inference_ssd(L):
    """T-75: the training forward's s, gated by S-25 (mul(s, silu(z)), here in numpy with
    the inference oracle's silu), equals the inference kernel mamba2_ssd's output bits
    (fresh state, q0 = 0), batch 2, 2 heads, L across one and two chunk boundaries."""
    from mojolearn.models._exec import kernels as K

    b, H = 2, 2
    di, CD = P * H, P * H + 2 * N
    xbc, dt, A, D, _, _ = make(b, L, H, seed=L)
    z = (np.random.default_rng(L + 1).standard_normal((b * L, di)) * 2).astype(np.float32)
    s, saved = M2.ssd_forward(xbc, dt, A, D)
    out = np.empty((b * L, di), dtype=np.float32)
    K.mamba2_ssd(np.ascontiguousarray(xbc.reshape(b * L, CD)), np.ascontiguousarray(dt.reshape(b * L, H)),
                 A, D, z, np.zeros((b, H, P, N), np.float32), np.zeros((b, 256, CD), np.float32),
                 np.zeros((b, 256, H), np.float32), np.zeros((b, H, 256), np.float32),
                 np.zeros((b, H), np.float32), out, b, L, H, di, 0)
    g = MO.mul(s.reshape(b * L, di), MO.silu(z))
    assert same(g, out)
    assert saved.hs.shape == (b, H, (L + 255) // 256, P, N)
    assert not np.any(saved.hs[:, :, 0])                 # h_0 = +0


def test_T75_saved_states_equal_the_oracle():
    """T-75: s and the states entering the chunks equal the oracle's forward bits (two
    chunk boundaries, edge inputs)."""
    xbc, dt, A, D, _, _ = make(1, 520, 2, seed=9, kind="edge")
    s, saved = M2.ssd_forward(xbc, dt, A, D)
    so, hs = OR.ssd_forward(xbc, dt, A, D)
    assert same(s, so)
    assert same(saved.hs, hs)


@pytest.mark.parametrize("name", list(CASES))
def test_T77_T85_backward_equals_the_oracle(name):
    """T-77 .. T-85 (T-78 diagonal block, T-79 off-diagonal output, T-80 state pass, T-81
    B and C per head, T-82 cumulative and segment sums, T-83 x and dt, T-84 the heads'
    join, T-85 the per-token terms): the kernel's dx, dB, dC, ddt and A_log / D terms
    equal the oracle's bits; random and edge inputs (+-0, subnormals, large values, large
    dt, A_log large and small), L 1 .. 513 (one and two chunk boundaries), batch 1 and 3,
    heads 1, 2, 3. The inputs exercise the cases the rules name (the check is not empty)."""
    _, _, got = _kernel(name)
    want = _oracle(name)
    for g, w, what in zip(got, want, ("dxbc", "ddt", "ta", "td")):
        assert g.shape == w.shape, what
        eq = bits(g) == bits(w)
        assert eq.all(), f"{name} {what}: {(~eq).sum()} of {eq.size} differ"
    if CASES[name][4] == "edge":
        dx = got[0]
        assert np.any(bits(dx) == 0x80000000) and np.any(bits(dx) == 0)
        assert np.all(np.isfinite(dx))


def test_T85_parameter_gradients_fold_the_terms():
    """T-85: ssd_param_grads gives fold(k = tokens) of the A_log and D terms (the oracle's
    fold, T-2), tokens in row order."""
    _, _, (_, _, ta, td) = _kernel("edge_one_boundary")
    dal, dd = M2.ssd_param_grads(ta, td)
    assert same(dal, OR.fold_tokens(ta))
    assert same(dd, OR.fold_tokens(td))


@pytest.mark.parametrize("variant", sorted(OR.VARIANTS))
def test_T78_T82_T84_sabotaged_orders_move_bits(variant):
    """T-78, T-81 (position leaves), T-82 (reverse chains, rebuilt segment sums), T-84
    (heads ascending): each sabotaged oracle (another order) changes bits on an input the
    bit test uses, so the conformance check can fail."""
    # one_leaf needs positions past 128; cs_forward a chunk with a successor (chunk 0's
    # Yo gradient is zero: h_0 = +0)
    name = {"one_leaf": "edge_short", "cs_forward": "one_boundary"}.get(variant, "batch3_heads3")
    want = _oracle(name)
    bad = _oracle(name, (variant,))
    moved = sum(int(np.sum(bits(a) != bits(b))) for a, b in zip(want, bad))
    assert moved > 0, variant
    _, _, got = _kernel(name)
    assert all(same(g, w) for g, w in zip(got, want))


def test_T76_dt_clamp_backward():
    """T-76: the gradient passes where S-19's clamp kept v (ties with lo or hi, zeros of
    the same sign), +0 where it replaced v (below lo, above hi, -0 against lo = +0, every
    v when lo > hi); a NaN v passes; operands read flushed. Kernel equals the oracle."""
    v = np.array([0.5, 0.1, 0.9, 1.0, 0.0, -0.0, 2.0, np.nan, 1e-39, 0.3], np.float32)
    g = np.array([1.0, -2.0, 3.0, -4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 2e-39], np.float32)
    for lo, hi in [(0.1, 0.9), (0.0, np.inf), (0.0, 1.0), (0.95, 0.2)]:
        got = M2.dt_clamp_backward(g, v, lo, hi)
        want = OR.dt_clamp_backward(g, v, lo, hi)
        assert same(got, want), (lo, hi)
    got = M2.dt_clamp_backward(g, v, 0.1, 0.9)
    assert got[1] == -2.0 and got[2] == 3.0               # ties pass
    assert bits(got)[3] == 0 and bits(got)[4] == 0        # above hi, below lo: +0
    assert bits(got)[9] == 0                              # a subnormal gradient flushes
    crossed = bits(M2.dt_clamp_backward(g, v, 0.95, 0.2))   # lo > hi: all replaced but NaN
    assert np.all(crossed[np.arange(10) != 7] == 0) and crossed[7] == bits(g)[7]
    lo0 = M2.dt_clamp_backward(g, v, 0.0, np.inf)
    assert lo0[4] == 5.0 and bits(lo0)[5] == 0            # -0 < +0 = lo: replaced


def _recurrence_grads(xbc, dt, A_log, D, ds, H):
    """Torch autograd (float64) on the sequential recurrence h_t = exp(dt_t A) h_{t-1} +
    dt_t x_t B_t^T, y_t = C_t . h_t + D x_t: independent of the chunked form."""
    torch = pytest.importorskip("torch")
    T = [torch.tensor(v.astype(np.float64), requires_grad=True) for v in (xbc, dt, A_log, D)]
    xb, dtt, al, dd = T
    b, L, _ = xbc.shape
    di = P * H
    x = xb[..., :di].reshape(b, L, H, P)
    Bm, Cm = xb[..., di:di + N], xb[..., di + N:]
    A = -torch.exp(al)
    h = torch.zeros(b, H, P, N, dtype=torch.float64)
    ys = []
    for t in range(L):
        h = torch.exp(dtt[:, t] * A)[:, :, None, None] * h + \
            (dtt[:, t][:, :, None, None] * x[:, t][:, :, :, None]) * Bm[:, t][:, None, None, :]
        ys.append(((h * Cm[:, t][:, None, None, :]).sum(-1) + dd[None, :, None] * x[:, t]).reshape(b, di))
    y = torch.stack(ys, 1)
    (y * torch.tensor(ds.astype(np.float64))).sum().backward()
    return y.detach().numpy(), [t.grad.numpy() for t in T]


@pytest.mark.parametrize("b,L,H", [(2, 300, 2), (1, 530, 1)])
def test_T86_gradients_match_torch_autograd(b, L, H):
    """T-86: x, B, C, dt, A_log and D gradients within 1e-5 relative (normwise per
    tensor) of torch autograd in float64 on the plain sequential recurrence; the forward
    within 1e-6."""
    xbc, dt, A, D, ds, A_log = make(b, L, H, seed=11 + L)
    s, saved = M2.ssd_forward(xbc, dt, A, D)
    dxbc, ddt, ta, td = M2.ssd_backward(saved, ds)
    dal, dd = M2.ssd_param_grads(ta, td)
    y, (gx, gdt, gal, gd) = _recurrence_grads(xbc, dt, A_log, D, ds, H)
    rel = lambda a, r: np.linalg.norm(a.astype(np.float64) - r) / np.linalg.norm(r)
    assert rel(s, y) < 1e-6
    di = P * H
    for what, mine, ref in [("x", dxbc[..., :di], gx[..., :di]),
                            ("B", dxbc[..., di:di + N], gx[..., di:di + N]),
                            ("C", dxbc[..., di + N:], gx[..., di + N:]),
                            ("dt", ddt, gdt), ("A_log", dal, gal), ("D", dd, gd)]:
        assert rel(mine, ref) < 1e-5, what


def test_T86_thread_count_and_rows_alone():
    """T-86: 1 and 2 threads give the same forward and backward bits, and a batch of 2
    rows equals each row alone (forward s, saved states, every gradient and term)."""
    from mojolearn._core import threads

    xbc, dt, A, D, ds, _ = make(2, 600, 3, seed=21)
    old = threads.get_num_threads()
    runs = []
    try:
        for n in (1, 2):
            threads.set_num_threads(n)
            s, saved = M2.ssd_forward(xbc, dt, A, D)
            runs.append((s, saved.hs) + M2.ssd_backward(saved, ds))
    finally:
        threads.set_num_threads(old)
    assert all(same(a, b) for a, b in zip(runs[0], runs[1]))
    whole = runs[0]
    for r in range(2):
        s, saved = M2.ssd_forward(xbc[r:r + 1], dt[r:r + 1], A, D)
        alone = (s, saved.hs) + M2.ssd_backward(saved, ds[r:r + 1])
        L = xbc.shape[1]
        assert same(alone[0], whole[0][r:r + 1]) and same(alone[1], whole[1][r:r + 1])
        assert same(alone[2], whole[2][r:r + 1]) and same(alone[3], whole[3][r:r + 1])
        assert same(alone[4], whole[4][r * L:(r + 1) * L]) and same(alone[5], whole[5][r * L:(r + 1) * L])


_ISA_CHILD = r"""
import hashlib, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
from test_training_mamba2 import make
from mojolearn._train.ssm import mamba2 as M2
xbc, dt, A, D, ds, _ = make(2, 300, 3, seed=31, kind="edge")
s, saved = M2.ssd_forward(xbc, dt, A, D)
out = (s, saved.hs) + M2.ssd_backward(saved, ds)
print(hashlib.sha256(b"".join(np.ascontiguousarray(o).tobytes() for o in out)).hexdigest()[:16])
"""


def test_T86_every_cpu_build_gives_the_same_bits():
    """T-86: every CPU build this CPU runs (MOJOLEARN_ISA forces each, in its own process;
    v3 among them) gives this process's forward and backward bits."""
    from mojolearn._core import cpu as _cpu

    xbc, dt, A, D, ds, _ = make(2, 300, 3, seed=31, kind="edge")
    s, saved = M2.ssd_forward(xbc, dt, A, D)
    out = (s, saved.hs) + M2.ssd_backward(saved, ds)
    want = hashlib.sha256(b"".join(np.ascontiguousarray(o).tobytes() for o in out)).hexdigest()[:16]
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    ok = _cpu.runnable()
    assert "v3" in ok
    for name in ok:
        env = dict(os.environ, MOJOLEARN_ISA=name, PYTHONPATH=os.path.join(root, "python"))
        env.pop("MOJOLEARN_NATIVE", None)
        r = subprocess.run([sys.executable, "-c", _ISA_CHILD, here], env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        assert r.stdout.split() == [want], f"isa {name}"


def test_T75_T83_refusals():
    """T-75, T-83: the wrappers refuse a non-float32 array (TypeError), a column count that
    is not 64 H + 256, a misshapen dt or ds (ValueError), messages starting mojolearn:."""
    xbc, dt, A, D, ds, _ = make(1, 4, 1)
    with pytest.raises(TypeError, match="^mojolearn: "):
        M2.ssd_forward(xbc, dt.astype(np.float64), A, D)
    with pytest.raises(ValueError, match="^mojolearn: "):
        M2.ssd_forward(xbc[..., :-1], dt, A, D)
    with pytest.raises(ValueError, match="^mojolearn: "):
        M2.ssd_forward(xbc, dt[:, :3], A, D)
    _, saved = M2.ssd_forward(xbc, dt, A, D)
    with pytest.raises(ValueError, match="^mojolearn: "):
        M2.ssd_backward(saved, ds[:, :3])


# ------------------------------------------------------------------ the trainer (phase 2)
M2_UNTIED = dict(model_type="mamba2", vocab_size=71, hidden_size=64, num_hidden_layers=2,
                 state_size=128, expand=2, conv_kernel=4, n_groups=1, head_dim=64, num_heads=2,
                 chunk_size=256, tie_word_embeddings=False)
M2_TIED = dict(M2_UNTIED, vocab_size=53, hidden_size=96, num_heads=3, num_hidden_layers=1,
               tie_word_embeddings=True, time_step_limit=[0.01, 0.08])


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    out = {}
    for i, (name, cfg) in enumerate((("untied", M2_UNTIED), ("tied", M2_TIED))):
        path = tmp_path_factory.mktemp("m2" + name)
        MO.write_checkpoint(str(path), cfg, MO.random_weights(cfg, seed=90 + i))
        out[name] = str(path)
    return out


def _batch(V, B, L, seed=0):
    return np.random.default_rng(seed).integers(0, V, size=(B, L)).astype(np.int64)


def _same_grads(g1, g2):
    assert list(g1) == list(g2)
    for n in g1:
        assert same(g1[n], g2[n]), n


@pytest.mark.parametrize("name", ["untied", "tied"])
def test_T75_T86_trainer_loss_is_the_inference_models_loss(models, name):
    """T-75, T-58: the Mamba-2 trainer's per-position losses are cross_entropy of the
    inference model's logits bit for bit (the mixer's forward is the inference one's)."""
    from mojolearn import training
    from mojolearn.models import CausalLM
    from mojolearn._train.ssm import model as SM

    tr = training.Trainer(models[name])
    V = tr.config.vocab_size
    ids = _batch(V, B=2, L=19)
    logits = CausalLM.load(models[name]).forward(ids).reshape(-1, V)
    _, targets, _ = tr._batch(ids, None, "loss")
    want = training.cross_entropy(logits, targets, reduction="none")
    got = SM.loss_and_grads(tr.params, ids, targets, 0, None, None)
    assert same(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize("name,L", [("untied", 21), ("tied", 270)])
def test_T75_T86_trainer_gradients_match_torch_autograd(models, name, L):
    """T-75 .. T-86 in the model: every gradient of a tiny Mamba-2 model within 1e-4
    (normwise, per tensor) of torch autograd on transformers' Mamba2ForCausalLM (float32,
    its torch path), the loss within 1e-5; L = 270 crosses a chunk boundary, the tied
    model clamps dt (time_step_limit)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from mojolearn import training

    tr = training.Trainer(models[name])
    ids = _batch(tr.config.vocab_size, B=2, L=L, seed=3)
    g = tr.gradients(ids)
    loss = tr.loss(ids)
    model = transformers.Mamba2ForCausalLM.from_pretrained(models[name], torch_dtype=torch.float32)
    t = torch.from_numpy(ids)
    out = model(input_ids=t, labels=t)
    out.loss.backward()
    ref = float(out.loss.detach())
    assert abs(loss - ref) <= 1e-5 * abs(ref)
    seen = 0
    for n, prm in model.named_parameters():
        if prm.grad is None:
            continue
        want = prm.grad.detach().numpy()
        assert n in g, f"no gradient for {n}"
        err = np.linalg.norm(g[n].astype(np.float64) - want.reshape(g[n].shape)) / \
            max(np.linalg.norm(want), 1e-30)
        assert err <= 1e-4, f"{name} {n}: relative error {err:.2e}"
        seen += 1
    assert seen == len(g)


def test_T86_trainer_threads_and_micro_batches(models):
    """T-86, T-59: the Mamba-2 trainer's gradients and 4 AdamW steps with clipping at 1
    and 2 threads give the same bits; 4 rows x 64 tokens as 2 micro-batches
    (accumulation=2) give the whole batch's gradients, loss and step."""
    from mojolearn import training
    from mojolearn._core import threads

    V = M2_TIED["vocab_size"]
    ids = _batch(V, B=2, L=24, seed=5)
    old = threads.get_num_threads()
    runs = []
    try:
        for n in (1, 2):
            threads.set_num_threads(n)
            tr = training.Trainer(models["tied"], max_norm=1.0, lr=2e-3)
            g = tr.gradients(ids)
            losses = [tr.step(ids[:, s % 3:s % 3 + 20]) for s in range(4)]
            runs.append((g, tr.weights(), bits(np.float32(losses)).tolist()))
    finally:
        threads.set_num_threads(old)
    _same_grads(runs[1][0], runs[0][0])
    _same_grads(runs[1][1], runs[0][1])
    assert runs[1][2] == runs[0][2]
    ids4 = _batch(M2_UNTIED["vocab_size"], B=4, L=64, seed=7)
    a = training.Trainer(models["untied"])
    b = training.Trainer(models["untied"])
    _same_grads(a.gradients(ids4), b.gradients(ids4, accumulation=2))
    la, lb = a.step(ids4), b.step(ids4, accumulation=2)
    assert same(np.float32(la), np.float32(lb))
    _same_grads(a.weights(), b.weights())


def test_T86_trainer_reused_step_arrays_change_no_bit(models):
    """T-86, T-59: the trainer keeps one call's arrays for the next (model.BufferPool,
    the mixers' arrays too): steps, gradients and losses of changing batch shapes give
    the bits of a trainer that makes every array new; a step takes again the arrays of
    the step before it, and within a call the arrays the code dropped."""
    from mojolearn import training

    V = M2_TIED["vocab_size"]
    a = training.Trainer(models["tied"], max_norm=1.0, lr=2e-3)
    b = training.Trainer(models["tied"], max_norm=1.0, lr=2e-3)
    b._pool = None  # every array new
    pooled_trainer_matches_fresh(a, b, changing_calls(_batch, V), _batch(V, B=2, L=24, seed=9), _same_grads)


def test_T86_trainer_save_resume(models, tmp_path):
    """T-86, T-39: 6 AdamW steps against 2 steps, save, resume, 4 more: the same losses and
    weights bit for bit (Mamba-2)."""
    from mojolearn import training

    path = models["tied"]
    V = M2_TIED["vocab_size"]
    data = [_batch(V, B=2, L=12, seed=100 + s) for s in range(6)]
    straight = training.Trainer(path, max_norm=0.5, lr=3e-3)
    losses = [straight.step(x) for x in data]
    first = training.Trainer(path, max_norm=0.5, lr=3e-3)
    got = [first.step(x) for x in data[:2]]
    f = tmp_path / "t2.safetensors"
    first.save(f)
    again = training.Trainer.resume(f)
    got += [again.step(x) for x in data[2:]]
    assert bits(np.float32(got)).tolist() == bits(np.float32(losses)).tolist()
    _same_grads(again.weights(), straight.weights())


def test_T86_trainer_save_model_reads_back(models, tmp_path):
    """T-86, T-74: after 2 steps save_model writes a Mamba2ForCausalLM folder (the clamp's
    time_step_limit kept) that CausalLM.load reads to the trainer model's logits and that
    transformers' Mamba2ForCausalLM reads (logits within 1e-5 of the largest)."""
    import json

    from mojolearn import training
    from mojolearn.models import CausalLM

    tr = training.Trainer(models["tied"], lr=5e-3)
    V = M2_TIED["vocab_size"]
    for s in range(2):
        tr.step(_batch(V, B=2, L=16, seed=40 + s))
    ids = _batch(V, B=2, L=16, seed=50)
    logits = tr.model.forward(ids)
    out = tmp_path / "saved"
    tr.save_model(out)
    cfg = json.load(open(out / "config.json"))
    assert cfg["model_type"] == "mamba2" and cfg["architectures"] == ["Mamba2ForCausalLM"]
    assert cfg["time_step_limit"] == [0.01, 0.08]
    assert same(CausalLM.load(out).forward(ids), logits)
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    m = transformers.Mamba2ForCausalLM.from_pretrained(out, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        ref = m(torch.from_numpy(ids)).logits.numpy()
    assert float(np.abs(ref - logits).max()) <= 1e-5 * float(np.abs(ref).max())


_TRAINER_ISA_CHILD = """
import hashlib, sys
import numpy as np
from mojolearn import training
tr = training.Trainer(sys.argv[1], max_norm=1.0, lr=2e-3)
ids = np.random.default_rng(9).integers(0, tr.config.vocab_size, size=(2, 24))
h = hashlib.sha256()
for s in range(3):
    h.update(np.float32(tr.step(ids[:, s % 3:s % 3 + 20])).tobytes())
for n, w in tr.weights().items():
    h.update(w.tobytes())
print(h.hexdigest()[:16])
"""


def test_T86_trainer_every_cpu_build_gives_the_same_steps(models):
    """T-86, T-59 (identity): 3 AdamW steps with clipping of the clamped Mamba-2 model give
    the same losses and weights on every CPU build this CPU runs (each in its own
    process, MOJOLEARN_ISA forcing it)."""
    outs = outputs_of_every_build(_TRAINER_ISA_CHILD, models["tied"])
    assert len(set(outs.values())) == 1, outs

"""Training Mamba-1 (rules T-63 .. T-74 of contracts/ops/IDENTICAL_TRAIN_CONTRACT.md): each
backward kernel against the independent oracle (tests/mamba1_train_oracle.py) bit for bit
on edge values, sabotaged orders seen, a whole mixer's backward against the oracle, the
loss equal to the inference model's, the gradients torch autograd's (transformers'
MambaForCausalLM) within float32 rounding, and the bits fixed under thread counts, CPU
builds, micro-batches and a save and resume."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

import mamba1_train_oracle as MO
import mamba_oracle as SO
from every_build import outputs_of_every_build
from pool_check import changing_calls, pooled_trainer_matches_fresh
from mojolearn import training
from mojolearn._train import kernels as TK
from mojolearn.models import CausalLM

pytestmark = pytest.mark.filterwarnings("ignore::mojolearn.profiles.NumericProfileSpeedWarning")

UNTIED = dict(model_type="mamba", vocab_size=67, hidden_size=48, num_hidden_layers=2,
              state_size=16, expand=2, conv_kernel=4, tie_word_embeddings=False)
# di = 160 > 128: the folds over the channels (T-69) take two leaves
TIED = dict(UNTIED, vocab_size=53, hidden_size=80, tie_word_embeddings=True)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    out = {}
    for i, (name, cfg) in enumerate((("untied", UNTIED), ("tied", TIED))):
        path = tmp_path_factory.mktemp(name)
        SO.write_checkpoint(str(path), cfg, SO.random_weights(cfg, seed=70 + i))
        out[name] = str(path)
    return out


def bits(a):
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def same(a, b, what=""):
    a, b = np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32)
    assert a.shape == b.shape, (what, a.shape, b.shape)
    diff = np.flatnonzero(bits(a).reshape(-1) != bits(b).reshape(-1))
    assert diff.size == 0, f"{what}: {diff.size} of {a.size} differ, first at {diff[0]}: " \
                           f"{a.reshape(-1)[diff[0]]!r} vs {b.reshape(-1)[diff[0]]!r}"


def same_grads(g1, g2):
    assert list(g1) == list(g2)
    for n in g1:
        same(g1[n], g2[n], n)


SUB = np.float32(3e-39)  # a subnormal


def edgy(rng, shape, scale=1.0, specials=True):
    """Random normal values with +-0, subnormals and large values mixed in."""
    x = (rng.standard_normal(shape) * scale).astype(np.float32)
    if specials:
        flat = x.reshape(-1)
        picks = rng.integers(0, flat.size, size=max(1, flat.size // 6))
        vals = np.array([0.0, -0.0, SUB, -SUB, 1e30, -3e25, 1e-30], dtype=np.float32)
        flat[picks] = vals[rng.integers(0, vals.size, size=picks.size)]
    return x


# ------------------------------------------------------------------ kernels vs the oracle
@pytest.mark.parametrize("rows, n", [(1, 1), (3, 33), (5, 48), (2, 97), (4, 160)])
def test_T63_T64_lane_norm_backward_equals_the_oracle(rows, n):
    """T-63, T-64: S-10's backward (dx and the weight's per-row terms) bit for bit, odd
    widths and widths past 32 lanes, with zeros, subnormals and large gradients."""
    rng = np.random.default_rng(rows * 100 + n)
    x = edgy(rng, (rows, n), specials=False)
    x[0, 0] = SUB
    if n > 2:
        x[0, 1] = -0.0
    dy = edgy(rng, (rows, n))
    w = (1 + 0.2 * rng.standard_normal(n)).astype(np.float32)
    dx, terms = np.empty_like(x), np.empty_like(x)
    TK.ssm_norm_backward(dy, x, w, TK.f32_bits(1e-5), dx, terms)
    want_dx, want_t = MO.lane_norm_backward(dy, x, w)
    same(dx, want_dx, "dx")
    same(terms, want_t, "terms")
    same(TK.fold_rows(terms), MO._fold_tokens(want_t[None]), "dw")


def test_T66_T67_silu_and_softplus_backward_equal_the_oracle():
    """T-66, T-67: the SiLU and softplus backward bit for bit on edge values: +-0,
    subnormals, large of both signs, softplus inputs at 20, just either side of it, past
    it, and where expf underflows."""
    rng = np.random.default_rng(5)
    special = np.array([0.0, -0.0, SUB, -SUB, 20.0, np.nextafter(np.float32(20), np.float32(0)),
                        np.nextafter(np.float32(20), np.float32(30)), 25.0, 88.0, 89.0, -87.5,
                        -104.0, -200.0, 1e30, -1e30, 1.0, -1.0, 1e-30], dtype=np.float32)
    v = np.concatenate([special, edgy(rng, (59,), scale=8)]).reshape(7, 11)
    dy = edgy(rng, v.shape, scale=2)
    out = np.empty_like(v)
    TK.ssm_silu_backward(v, dy, out)
    same(out, MO.silu_backward(v, dy), "silu")
    bias = edgy(rng, (11,), scale=0.5, specials=False)
    bias[0] = -0.0
    raw = np.ascontiguousarray(v - bias)  # add(raw, bias) lands on and about 20
    TK.ssm_softplus_backward(raw, bias, dy, out)
    same(out, MO.softplus_backward(raw, bias, dy), "softplus")
    # the branch: past 20 the gradient passes unchanged (at 20 the sigmoid form's
    # div(1, add(expf(-20), 1)) rounds to 1 in float32, so the two forms agree there)
    z = np.zeros(1, dtype=np.float32)
    g = np.full((1, 1), 0.75, dtype=np.float32)
    for x in (20.5, 1e30):
        o = np.empty((1, 1), dtype=np.float32)
        TK.ssm_softplus_backward(np.full((1, 1), x, np.float32), z, g, o)
        assert o[0, 0] == np.float32(0.75), (x, o)


def test_T67_softplus_backward_with_the_clamp_equals_the_oracle():
    """T-67 with S-19's clamp (Mamba-2's time_step_limit): +0 where the clamp replaced the
    value, the softplus gradient elsewhere; limits met exactly, either side of them, -0 and
    +0 limits, lo > hi (nothing passes), and an unclamped run unchanged."""
    rng = np.random.default_rng(9)
    raw = edgy(rng, (9, 13), scale=3)
    bias = np.zeros(13, dtype=np.float32)
    dy = edgy(rng, (9, 13))
    sp = SO.softplus(raw)  # land some values exactly on the limits
    lim = (float(sp[1, 2]), float(sp[3, 4]))
    lo, hi = min(lim), max(lim)
    for clamp in ((lo, hi), (0.0, float("inf")), (-0.0, 0.5), (0.3, 0.3), (2.0, 0.5)):
        bits_pair = (TK.f32_bits(clamp[0]), TK.f32_bits(clamp[1]))
        out = np.empty_like(raw)
        TK.ssm_softplus_backward(raw, bias, dy, out, bits_pair)
        same(out, MO.softplus_backward(raw, bias, dy, clamp), f"clamp {clamp}")
    assert not np.any(bits(out))  # lo > hi: every gradient +0
    plain = np.empty_like(raw)
    TK.ssm_softplus_backward(raw, bias, dy, plain)
    TK.ssm_softplus_backward(raw, bias, dy, out, (TK.f32_bits(0.0), TK.f32_bits(float("inf"))))
    same(out, plain, "the clamp (0, inf) changes nothing")


@pytest.mark.parametrize("B, L, C", [(1, 1, 3), (2, 3, 5), (2, 4, 17), (3, 9, 1), (1, 23, 33)])
def test_T65_conv_backward_equals_the_oracle(B, L, C):
    """T-65: the causal conv's dx (through the 4 taps, fewer near a row's end and at
    L < 4) and its per-token weight terms bit for bit; the weight and bias gradients are
    their folds over the tokens."""
    rng = np.random.default_rng(B * 1000 + L * 10 + C)
    x = edgy(rng, (B * L, 2 * C))[:, :C]  # a strided view, as in_proj's columns
    w = edgy(rng, (C, 4), specials=False)
    g = edgy(rng, (B * L, C))
    dx, terms = np.empty((B * L, C), np.float32), np.empty((B * L, 4 * C), np.float32)
    TK.ssm_conv_backward(x, w, g, dx, terms, B, L)
    want_dx, want_t = MO.conv_backward(x.reshape(B, L, C), w, g.reshape(B, L, C))
    same(dx.reshape(B, L, C), want_dx, "dx")
    same(terms.reshape(B, L, C, 4), want_t, "terms")
    same(TK.fold_rows(terms).reshape(C, 4), MO._fold_tokens(want_t), "dw")
    same(TK.fold_rows(g), MO._fold_tokens(g.reshape(B, L, C)), "dbias")


def _scan_inputs(B, L, di, seed):
    rng = np.random.default_rng(seed)
    r = 3
    u = edgy(rng, (B * L, di))
    delta = np.abs(rng.standard_normal((B * L, di))).astype(np.float32) * 0.5
    delta.reshape(-1)[::7] = 0.0
    a = -np.exp(rng.standard_normal((di, 16))).astype(np.float32)
    xp = edgy(rng, (B * L, r + 32))
    d = rng.standard_normal(di).astype(np.float32)
    xz = edgy(rng, (B * L, 2 * di), scale=2)
    dg = edgy(rng, (B * L, di))
    return r, u, delta, a, xp, d, xz, dg


def _scan_kernel(B, L, di, r, u, delta, a, xp, d, xz, dg):
    rows = B * L
    du, dd = np.empty((rows, di), np.float32), np.empty((rows, di), np.float32)
    dxz = np.empty((rows, 2 * di), np.float32)
    tb, tc = np.empty((di, rows * 16), np.float32), np.empty((di, rows * 16), np.float32)
    ta, td = np.empty((rows, di * 16), np.float32), np.empty((rows, di), np.float32)
    TK.mamba1_scan_backward(u, delta, a, xp, r, r + 16, d, xz[:, di:], dg, du, dd, dxz[:, di:],
                            tb, tc, ta, td, B, L)
    return dict(du_s=du, ddelta=dd, dz=dxz[:, di:], dB=TK.fold_rows(tb).reshape(rows, 16),
                dC=TK.fold_rows(tc).reshape(rows, 16), ta=ta, td=td)


def _scan_oracle(B, L, di, r, u, delta, a, xp, d, xz, dg, variant=()):
    def v(x, w):
        return np.ascontiguousarray(x).reshape(B, L, w)

    return MO.scan_backward(v(u, di), v(delta, di), a, v(xp[:, r:r + 16], 16),
                            v(xp[:, r + 16:], 16), d, v(xz[:, di:], di), v(dg, di), variant)


@pytest.mark.parametrize("B, L, di", [(1, 1, 3), (2, 3, 5), (2, 9, 17), (1, 4, 130)])
def test_T68_to_T71_scan_backward_equals_the_oracle(B, L, di):
    """T-68, T-69, T-70, T-71: the scan backward (u's and delta's gradients, z's through
    the gate, B and C folded over the channels, the per-token terms of A_log and D) bit
    for bit; L = 1, L < 4, odd channel counts and di = 130 (two leaves over channels)."""
    args = _scan_inputs(B, L, di, B * 100 + L * 7 + di)
    got = _scan_kernel(B, L, di, *args)
    want = _scan_oracle(B, L, di, *args)
    for k in ("du_s", "ddelta", "dz", "td"):
        same(got[k], want[k].reshape(B * L, di), k)
    same(got["dB"], want["dB"].reshape(B * L, 16), "dB")
    same(got["dC"], want["dC"].reshape(B * L, 16), "dC")
    same(got["ta"], want["ta"].reshape(B * L, di * 16), "ta")


def test_T68_T69_T70_sabotaged_orders_change_the_bits():
    """T-68, T-69, T-70: the checks above can fail: the oracle with dh by mul then add,
    with delta's A step before its B step, or with B and C summed over the channels by
    a descending chain, differs from the kernel on the same inputs."""
    B, L, di = 2, 9, 17
    args = _scan_inputs(B, L, di, 11)
    got = _scan_kernel(B, L, di, *args)
    for variant, keys in (("dh_mul_add", ("du_s", "ddelta", "ta")),
                          ("ddelta_a_first", ("ddelta",)), ("channels_chain_desc", ("dB", "dC"))):
        bad = _scan_oracle(B, L, di, *args, variant=(variant,))
        for k in keys:
            assert not np.array_equal(bits(got[k]).reshape(-1), bits(bad[k]).reshape(-1)), \
                (variant, k)


def test_T63_to_T71_kernels_give_the_same_bits_at_every_thread_count():
    """T-63, T-65, T-66, T-67, T-68 (identity): each backward kernel at 1, 2 and 3 threads
    (units split differently; 37 channels: two full lane blocks and a partial one) gives
    the same bits."""
    from mojolearn._core import threads

    B, L, di = 3, 11, 37
    args = _scan_inputs(B, L, di, 77)
    rng = np.random.default_rng(78)
    x, g = edgy(rng, (B * L, di)), edgy(rng, (B * L, di))
    w4 = edgy(rng, (di, 4), specials=False)
    nw = (1 + 0.1 * rng.standard_normal(di)).astype(np.float32)
    old = threads.get_num_threads()
    runs = []
    try:
        for n in (1, 2, 3):
            threads.set_num_threads(n)
            out = list(_scan_kernel(B, L, di, *args).values())
            dx, t = np.empty_like(x), np.empty_like(x)
            out += list(TK.ssm_norm_backward(g, x, nw, TK.f32_bits(1e-5), dx, t))
            out.append(TK.ssm_silu_backward(x, g, np.empty_like(x)))
            out.append(TK.ssm_softplus_backward(x, nw, g, np.empty_like(x)))
            dx2, t2 = np.empty_like(x), np.empty((B * L, 4 * di), np.float32)
            out += list(TK.ssm_conv_backward(x, w4, g, dx2, t2, B, L))
            runs.append([np.array(o, copy=True) for o in out])
    finally:
        threads.set_num_threads(old)
    for r in runs[1:]:
        for i, (a, b) in enumerate(zip(r, runs[0])):
            same(a, b, f"output {i}")


def _layer(path, i=0):
    from safetensors.numpy import load_file

    w = load_file(os.path.join(path, "model.safetensors"))
    p = f"backbone.layers.{i}.mixer."
    return {k[len(p):]: v for k, v in w.items() if k.startswith(p)}, w


def test_T72_T73_mixer_backward_equals_the_oracle(models):
    """T-65 .. T-73 together: the trainer's Mamba-1 mixer backward (ssm/mamba1.py on the
    kernels) against the oracle's whole mixer backward, every parameter gradient and the
    gradient at the block norm's output bit for bit (di = 160: two leaves over the
    channels)."""
    from mojolearn._train.ssm import mamba1

    path = models["tied"]
    p, _ = _layer(path)
    B, L, d = 2, 7, TIED["hidden_size"]
    rng = np.random.default_rng(3)
    xn = edgy(rng, (B * L, d), specials=False)
    dout = edgy(rng, (B * L, d), scale=0.1)
    params = {"backbone.layers.0.mixer." + k: np.ascontiguousarray(v) for k, v in p.items()}
    out, saved = mamba1.forward(params, "backbone.layers.0.", xn, B, L)
    grads = {k: np.zeros_like(v) for k, v in params.items()}
    dh = mamba1.backward(params, "backbone.layers.0.", saved, dout, grads)
    want_dh, want = MO.mixer_backward(p, xn.reshape(B, L, d), dout.reshape(B, L, d))
    same(dh, want_dh.reshape(B * L, d), "dh")
    for k, v in want.items():
        same(grads["backbone.layers.0.mixer." + k], v, k)


# ------------------------------------------------------------------ the model
def batch(V, B=4, L=32, seed=1):
    return np.random.default_rng(seed).integers(0, V, size=(B, L), dtype=np.int64)


@pytest.mark.parametrize("name", ["untied", "tied"])
def test_T73_loss_is_the_inference_models_loss(models, name):
    """T-73, T-58: the trainer's per-position losses are cross_entropy of the inference
    MambaLM's logits bit for bit, and the loss their mean."""
    from mojolearn._train.ssm import model as SM

    tr = training.Trainer(models[name])
    V = tr.config.vocab_size
    ids = batch(V, B=2, L=19)
    lm = CausalLM.load(models[name])
    logits = lm.forward(ids).reshape(-1, V)
    _, targets, _count = tr._batch(ids, None, "loss")
    want = training.cross_entropy(logits, targets, reduction="none")
    got = SM.loss_and_grads(tr.params, ids, targets, 0, None, None)
    same(got, want, "losses")
    mean = training.cross_entropy(logits, targets, reduction="mean")
    same(np.float32(tr.loss(ids)), np.float32(mean), "mean")


@pytest.mark.parametrize("name", ["untied", "tied"])
def test_T63_to_T73_gradients_match_torch_autograd(models, name):
    """T-63 .. T-73: every gradient within 1e-4 (normwise, per tensor) of torch autograd on
    transformers' MambaForCausalLM (float32, its torch path), the loss within 1e-5."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    tr = training.Trainer(models[name])
    ids = batch(tr.config.vocab_size, B=2, L=21, seed=3)
    g = tr.gradients(ids)
    loss = tr.loss(ids)
    model = transformers.MambaForCausalLM.from_pretrained(models[name], torch_dtype=torch.float32)
    t = torch.from_numpy(ids)
    out = model(input_ids=t, labels=t)
    out.loss.backward()
    assert abs(loss - float(out.loss.detach())) <= 1e-5 * abs(float(out.loss.detach()))
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


def test_T74_gradients_are_named_like_the_checkpoint(models):
    """T-74: gradients() keys are the checkpoint's names in the trainer's order, each the
    shape and dtype of its weight."""
    tr = training.Trainer(models["untied"])
    g = tr.gradients(batch(tr.config.vocab_size, B=1, L=6))
    w = tr.weights()
    assert list(g) == list(w)
    assert list(g)[:3] == ["backbone.embeddings.weight", "backbone.layers.0.norm.weight",
                           "backbone.layers.0.mixer.in_proj.weight"]
    assert list(g)[-2:] == ["backbone.norm_f.weight", "lm_head.weight"]
    assert all(g[n].shape == w[n].shape and g[n].dtype == np.float32 for n in g)
    assert g["backbone.layers.1.mixer.conv1d.weight"].shape == (96, 1, 4)


def test_T74_thread_count_changes_no_bit(models):
    """T-74, T-59 (identity): the gradients and 6 AdamW steps with clipping at 1 and 2
    threads: the same gradients, losses and weights."""
    from mojolearn._core import threads

    ids = batch(TIED["vocab_size"], B=2, L=24, seed=5)
    old = threads.get_num_threads()
    runs = []
    try:
        for n in (1, 2):
            threads.set_num_threads(n)
            tr = training.Trainer(models["tied"], max_norm=1.0, lr=2e-3)
            g = tr.gradients(ids)
            losses = [tr.step(ids[:, s % 3:s % 3 + 20]) for s in range(6)]
            runs.append((g, tr.weights(), bits(np.float32(losses)).tolist()))
    finally:
        threads.set_num_threads(old)
    same_grads(runs[1][0], runs[0][0])
    same_grads(runs[1][1], runs[0][1])
    assert runs[1][2] == runs[0][2]


def test_T74_reused_step_arrays_change_no_bit(models):
    """T-74, T-59: the trainer keeps one call's arrays for the next (model.BufferPool,
    the mixers' arrays too): steps, gradients and losses of changing batch shapes give
    the bits of a trainer that makes every array new; a step takes again the arrays of
    the step before it, and within a call the arrays the code dropped."""
    from mojolearn import training

    V = TIED["vocab_size"]
    a = training.Trainer(models["tied"], max_norm=1.0, lr=2e-3)
    b = training.Trainer(models["tied"], max_norm=1.0, lr=2e-3)
    b._pool = None  # every array new
    pooled_trainer_matches_fresh(a, b, changing_calls(batch, V), batch(V, B=2, L=24, seed=9), same_grads)


def test_T74_micro_batches_give_the_whole_batchs_bits(models):
    """T-74, T-59, T-27: 4 rows x 64 tokens (two leaves) as 2 micro-batches of 2 rows give
    the whole batch's gradients, loss and step bit for bit; accumulation=4 (not on the
    tree's nodes) and 3 are refused; a running sum instead of T-26's tree over 4
    micro-batches of 8 rows is seen."""
    from mojolearn._train import trainer as T

    ids = batch(UNTIED["vocab_size"], B=4, L=64, seed=7)
    a = training.Trainer(models["untied"])
    b = training.Trainer(models["untied"])
    same_grads(a.gradients(ids), b.gradients(ids, accumulation=2))
    la, lb = a.step(ids), b.step(ids, accumulation=2)
    same(np.float32(la), np.float32(lb), "loss")
    same_grads(a.weights(), b.weights())
    with pytest.raises(ValueError, match=r"accumulation=4 .*\[1, 2\]"):
        a.step(ids, accumulation=4)
    with pytest.raises(ValueError, match="accumulation=3"):
        a.step(ids, accumulation=3)
    ids8 = batch(UNTIED["vocab_size"], B=8, L=64, seed=8)
    whole = a.gradients(ids8)
    same_grads(whole, a.gradients(ids8, accumulation=4))

    def running(arrays):
        acc = arrays[0].copy()
        for x in arrays[1:]:
            acc = (acc + x).astype(np.float32)
        return acc

    orig = T.TK.tree_sum
    T.TK.tree_sum = running
    try:
        bad = a.gradients(ids8, accumulation=4)
    finally:
        T.TK.tree_sum = orig
    differ = [n for n in whole if not np.array_equal(bits(whole[n]), bits(bad[n]))]
    assert len(differ) >= len(whole) // 2, differ


def test_T74_save_resume_equals_an_uninterrupted_run(models, tmp_path):
    """T-74, T-39: 8 AdamW steps with a warmup-cosine schedule and clipping against 3
    steps, save, resume, 5 more: the same losses and weights bit for bit; the file holds
    the Mamba config."""
    sched = training.WarmupCosineLR(3e-3, warmup_steps=2, total_steps=8, min_lr=1e-4)
    path = models["tied"]
    V = TIED["vocab_size"]
    data = [batch(V, B=2, L=12, seed=100 + s) for s in range(8)]
    straight = training.Trainer(path, lr_schedule=sched, max_norm=0.5)
    losses = [straight.step(x) for x in data]
    assert losses[-1] < losses[0]
    first = training.Trainer(path, lr_schedule=sched, max_norm=0.5)
    got = [first.step(x) for x in data[:3]]
    f = tmp_path / "t3.safetensors"
    first.save(f)
    again = training.Trainer.resume(f)
    assert again.t == 3 and again.config == straight.config
    got += [again.step(x) for x in data[3:]]
    assert bits(np.float32(got)).tolist() == bits(np.float32(losses)).tolist()
    same_grads(again.weights(), straight.weights())


def test_T74_trained_model_runs_and_saves(models, tmp_path):
    """T-74: after 3 steps, ``model`` is a MambaLM whose logits give the trainer's loss;
    save_model writes a folder that CausalLM.load reads to the same logits and that
    transformers' MambaForCausalLM reads (logits within 1e-5 of the largest)."""
    tr = training.Trainer(models["untied"], lr=5e-3)
    V = UNTIED["vocab_size"]
    ids = batch(V, B=2, L=16, seed=21)
    for s in range(3):
        tr.step(batch(V, B=2, L=16, seed=30 + s))
    lm = tr.model
    assert type(lm).__name__ == "MambaLM"
    logits = lm.forward(ids)
    _, targets, _ = tr._batch(ids, None, "loss")
    same(np.float32(tr.loss(ids)),
         np.float32(training.cross_entropy(logits.reshape(-1, V), targets)), "loss")
    out = tmp_path / "saved"
    tr.save_model(out)
    cfg = json.load(open(out / "config.json"))
    assert cfg["model_type"] == "mamba" and cfg["architectures"] == ["MambaForCausalLM"]
    same(CausalLM.load(out).forward(ids), logits, "reloaded logits")
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    m = transformers.MambaForCausalLM.from_pretrained(out, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        ref = m(torch.from_numpy(ids)).logits.numpy()
    assert float(np.abs(ref - logits).max()) <= 1e-5 * float(np.abs(ref).max())
    again = training.Trainer(CausalLM.load(out))  # a MambaLM from CausalLM.load
    same_grads(again.weights(), tr.weights())


_ISA_CHILD = """
import hashlib, sys
import numpy as np
from mojolearn import training
tr = training.Trainer(sys.argv[1], max_norm=1.0, lr=2e-3)
ids = np.random.default_rng(9).integers(0, tr.config.vocab_size, size=(2, 24))
h = hashlib.sha256()
for s in range(5):
    h.update(np.float32(tr.step(ids[:, s % 3:s % 3 + 20])).tobytes())
for n, w in tr.weights().items():
    h.update(w.tobytes())
print(h.hexdigest()[:16])
"""


def test_T74_every_cpu_build_gives_the_same_steps(models):
    """T-74, T-59 (identity): 5 AdamW steps with clipping give the same losses and weights
    on every CPU build this CPU runs (MOJOLEARN_ISA forces each, in its own process)."""
    outs = outputs_of_every_build(_ISA_CHILD, models["tied"])
    assert len(set(outs.values())) == 1, outs


def test_T74_refusals_by_name(models, tmp_path):
    """T-74: device='gpu' with a Mamba model (Mamba-1 or Mamba-2; a mamba2 checkpoint
    itself is trained, T-75 .. T-86), and a MambaLM built from a weights dict or held
    low-bit are refused by name; group= is not refused for either family (its ranks run
    by T-61, tests/test_training_ranks.py): it reaches the ranks' own check that
    torch.distributed is initialized."""
    import importlib.util

    has_torch = importlib.util.find_spec("torch") is not None
    cfg2 = dict(model_type="mamba2", vocab_size=71, hidden_size=64, num_hidden_layers=1,
                state_size=128, expand=2, conv_kernel=4, n_groups=1, head_dim=64, num_heads=2,
                chunk_size=256, tie_word_embeddings=True)
    p2 = tmp_path / "m2"
    SO.write_checkpoint(str(p2), cfg2, SO.random_weights(cfg2, seed=1))
    # Mamba-2 is trained (T-75 .. T-86); its device='gpu' is refused like Mamba-1's
    assert training.Trainer(str(p2)).config.model_type == "mamba2"
    assert training.Trainer(CausalLM.load(p2)).config.model_type == "mamba2"
    with pytest.raises(NotImplementedError, match="^mojolearn: .*device='gpu'"):
        training.Trainer(str(p2), device="gpu", _device_backend=object())
    with pytest.raises(NotImplementedError, match="^mojolearn: .*device='gpu'"):
        training.Trainer(models["untied"], device="gpu", _device_backend=object())
    if has_torch:  # no process group here: the ranks' check, not a refusal of the family
        for path in (str(p2), models["untied"]):
            with pytest.raises(RuntimeError,
                               match="^mojolearn: Trainer: group= needs torch.distributed"):
                training.Trainer(path, group=object())
    lm = CausalLM.load(models["untied"], weight_format="bfloat16")
    with pytest.raises(ValueError, match="low-bit"):
        training.Trainer(lm)
    from mojolearn.models._ssm.model import MambaLM
    from mojolearn.models._ssm.config import MambaConfig

    w = SO.random_weights(UNTIED, seed=2)
    bare = MambaLM(MambaConfig.from_dict(UNTIED), w)
    with pytest.raises(ValueError, match="weights dict"):
        training.Trainer(bare)

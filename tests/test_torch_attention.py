"""mojolearn.torch: aten::scaled_dot_product_attention inside the mode. A causal prefill
or a one-query decode is the models' fused attention kernel (rules M-6, M-11..M-15 of
the ops contract: the bits of CausalLM's attention), its backward the training
contract's (T-47..T-51: the bits of the Trainer's attention backward); every other call
takes torch's math path, whose products and softmax are the mode's."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mojolearn  # noqa: E402
import mojolearn.torch as mt  # noqa: E402
from mojolearn._torch import mode as _mode  # noqa: E402
from tests import model_oracle as MO  # noqa: E402

F32 = np.float32
sdpa = torch.nn.functional.scaled_dot_product_attention


def u32(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().numpy()
    return np.ascontiguousarray(x).view(np.uint32)


@pytest.fixture(autouse=True)
def _mode_off():
    yield
    mt.disable()
    torch.set_num_threads(2)
    mojolearn.set_num_threads(2)


def _inputs(b, h, hk, length, nkeys, hd, seed=0, scale=1.0, edge=False, layout="hf"):
    """q (b, h, length, hd) as transformers lays it ((b, length, h, hd) memory, "hf")
    or contiguous; k, v (b, hk, nkeys, hd) contiguous."""
    rng = np.random.default_rng(seed)
    q = (rng.standard_normal((b, length, h, hd)) * scale).astype(F32)
    k = (rng.standard_normal((b, hk, nkeys, hd)) * scale).astype(F32)
    v = rng.standard_normal((b, hk, nkeys, hd)).astype(F32)
    if edge:  # zeros, signed zeros, subnormals, huge values, ties in the scores
        q[..., 0] = 0.0
        q[..., 1] = -0.0
        k[..., 2] = 1e-40
        v[..., 3] = -1e-42
        q[0, 0, 0, :] = 3e4
        k[0, 0, :2, :] = 1.0
        v[0, 0, 0, 4] = 0.0
    qt = torch.from_numpy(q).transpose(1, 2)
    if layout != "hf":
        qt = qt.contiguous()
    return qt, torch.from_numpy(k), torch.from_numpy(v)


def _oracle(q, k, v, pos0):
    b, h, length, hd = q.shape
    rep = h // k.shape[1]
    out = np.empty((b, h, length, hd), F32)
    for i in range(b):
        for j in range(h):
            out[i, j] = MO.attention(q[i, j].numpy(), k[i, j // rep].numpy(), v[i, j // rep].numpy(),
                                     pos0, "fp32_v1", hd)
    return out


CASES = [  # (b, h, hk, length, hd, edge, layout)
    (2, 4, 2, 9, 16, False, "hf"),
    (1, 3, 3, 37, 64, True, "hf"),
    (2, 6, 2, 5, 160, False, "contiguous"),   # head_dim over one leaf of 128
    (3, 2, 1, 1, 8, True, "contiguous"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:5])) + f"-{c[6]}")
def test_sdpa_prefill_is_the_models_attention(case):
    """M-6, M-11..M-15: a causal sdpa prefill (GQA by enable_gqa) inside the mode is one
    call of the fused kernel with the oracle's bits (the models' attention), for 1 and 2
    threads, with transformers' query layout read in place or a contiguous query."""
    b, h, hk, length, hd, edge, layout = case
    q, k, v = _inputs(b, h, hk, length, length, hd, edge=edge, layout=layout)
    want = _oracle(q, k, v, 0)
    for n in (1, 2):
        mojolearn.set_num_threads(n)
        with mt.identical():
            c0 = mt.calls()["mojolearn"]
            got = sdpa(q, k, v, is_causal=True, enable_gqa=h != hk)
            assert mt.calls()["mojolearn"] - c0 == 1   # the fused kernel, no bmm
        assert got.shape == (b, h, length, hd)
        assert (u32(got) == u32(want)).all()


@pytest.mark.parametrize("nkeys", [1, 7, 130])
def test_sdpa_decode_is_the_models_attention(nkeys):
    """M-11..M-15 with pos0 = keys - 1: one query over every key (transformers' decode
    step, is_causal False, no mask) is the fused kernel's bits, a batch of 2 equal to
    each row alone."""
    q, k, v = _inputs(2, 4, 2, 1, nkeys, 32, seed=nkeys)
    want = _oracle(q, k, v, nkeys - 1)
    with mt.identical():
        got = sdpa(q, k, v, enable_gqa=True)
        alone = sdpa(q[1:], k[1:], v[1:], enable_gqa=True)
    assert (u32(got) == u32(want)).all()
    assert (u32(alone[0]) == u32(got[1])).all()


def test_sdpa_check_fails_when_sabotaged(monkeypatch):
    """The oracle comparison above can fail: with the fused kernel switched off (the
    call then takes torch's math path, the mode's products and softmax) the bits differ
    from the oracle's on the same inputs."""
    q, k, v = _inputs(1, 3, 3, 37, 37, 64, edge=True)
    want = _oracle(q, k, v, 0)
    monkeypatch.setattr(_mode, "_sdpa_fused", lambda *a: None)
    with mt.identical():
        got = sdpa(q, k, v, is_causal=True)
    assert not (u32(got) == u32(want)).all()


def _math(q, k, v, **kw):
    mask = kw.get("attn_mask")
    return torch.ops.aten._scaled_dot_product_attention_math(
        q, k, v, mask, 0.0, kw.get("is_causal", False), None, scale=kw.get("scale"),
        enable_gqa=kw.get("enable_gqa", False))[0]


@pytest.mark.parametrize("what", ["mask", "scale", "causal-fewer-queries", "not-causal",
                                  "deterministic"])
def test_sdpa_other_calls_take_the_math_path(what):
    """Calls the fused kernel does not compute (a mask tensor, another scale, torch's
    top-left causal mask with fewer queries than keys, several queries without the causal
    flag, another numeric mode) are torch's math path inside the mode: its products are
    the mode's bmm calls, the bits those of the math path called directly."""
    q, k, v = _inputs(1, 2, 2, 4, 4 if what != "causal-fewer-queries" else 6, 16)
    kw = {"mask": {"attn_mask": torch.zeros(4, 4)}, "scale": {"scale": 0.3, "is_causal": True},
          "causal-fewer-queries": {"is_causal": True}, "not-causal": {},
          "deterministic": {"is_causal": True}}[what]
    nm = "deterministic" if what == "deterministic" else None
    with mt.identical(numeric_mode=nm):
        c0 = mt.calls()["mojolearn"]
        got = sdpa(q, k, v, **kw)
        assert mt.calls()["mojolearn"] - c0 >= 2    # two bmm at least
        want = _math(q, k, v, **kw)
        # with a gradient wanted the math path records its graph (torch's autograd)
        qg = q.detach().clone().requires_grad_()
        sdpa(qg, k, v, **kw).sum().backward()
        qw = q.detach().clone().requires_grad_()
        _math(qw, k, v, **kw).sum().backward()
    assert (u32(got) == u32(want)).all()
    assert (u32(qg.grad) == u32(qw.grad)).all()


def _trainer_backward(q, k, v, g):
    """The Trainer's attention backward (_train/model.py, T-47..T-51) on the same data."""
    from mojolearn._train import model as TM
    from mojolearn.models._exec import kernels as K

    b, h, length, hd = q.shape
    hk = k.shape[1]
    nq, nk = h * hd, hk * hd
    qn = q.detach().transpose(1, 2).contiguous().numpy().reshape(b * length, nq)
    kt = k.detach().transpose(2, 3).contiguous().numpy()
    p = np.empty((b, h, length, length), F32)
    K.native().train_attn_probs((K._a(qn), nq, K._a(kt), K._a(p), b, length, h, hk, hd, 1))
    s = SimpleNamespace(q=qn, p=p, kt=kt, vc=v.detach().contiguous().numpy())
    dctx = g.transpose(1, 2).contiguous().numpy().reshape(b * length, nq)
    dq, dk = np.empty((b * length, nq), F32), np.empty((b * length, nk), F32)
    dqkv = np.empty((b * length, nq + 2 * nk), F32)
    TM._attention_backward(s, dctx, dq, dk, dqkv, b, length, h, hk, hd, h // hk,
                           K.attn_scale_bits(hd), nq, nk)
    back = lambda x, n: x.reshape(b, length, n, hd).transpose(0, 2, 1, 3)  # noqa: E731
    return back(dq, h), back(dk, hk), back(dqkv[:, nq + nk:], hk)


def _grads(q, k, v, g, inside_backward=True):
    q, k, v = (x.detach().clone().requires_grad_() for x in (q, k, v))
    with mt.identical():
        out = sdpa(q, k, v, is_causal=True, enable_gqa=q.shape[1] != k.shape[1])
        if inside_backward:
            out.backward(g)
    if not inside_backward:
        out.backward(g)
    return out, (q.grad, k.grad, v.grad)


def test_sdpa_backward_is_the_training_contract():
    """T-47..T-51: with a gradient wanted, the fused prefill's backward gives the bits of
    the Trainer's attention backward (weights recomputed by the forward's functions,
    the softmax backward T-49, fp32.v1 products), whether backward() runs inside the
    block or after it, for 1 and 2 threads; within 1e-5 of torch autograd (mode off);
    the forward's bits are the no-grad call's."""
    q, k, v = _inputs(2, 6, 2, 11, 11, 16, seed=3)
    g = torch.from_numpy(np.random.default_rng(4).standard_normal((2, 6, 11, 16)).astype(F32))
    want = _trainer_backward(q, k, v, g)
    with mt.identical():
        plain = sdpa(q, k, v, is_causal=True, enable_gqa=True)
    for n, inside in ((1, True), (2, True), (2, False)):
        mojolearn.set_num_threads(n)
        out, got = _grads(q, k, v, g, inside)
        assert (u32(out) == u32(plain)).all()
        for a, w in zip(got, want):
            assert (u32(a) == u32(w)).all()
    ref = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    sdpa(*ref, is_causal=True, enable_gqa=True).backward(g)
    for a, r in zip(got, ref):
        assert float((a - r.grad).norm() / r.grad.norm()) < 1e-5


transformers = pytest.importorskip("transformers")


def test_transformers_sdpa_training_step_identical():
    """A transformers Llama (sdpa attention, GQA) trained one step inside the mode: the
    loss and every gradient have the same bits for 1 and 2 threads; a row's logits alone
    equal its logits in the batch; the gradients are within 1e-4 of torch's own."""
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=200, hidden_size=64, intermediate_size=96,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, attn_implementation="sdpa")
    model = transformers.LlamaForCausalLM(cfg)
    ids = torch.from_numpy(np.random.default_rng(0).integers(0, 200, size=(2, 13)))

    def step(threads):
        torch.set_num_threads(threads)
        mojolearn.set_num_threads(threads)
        model.zero_grad()
        loss = model(ids, labels=ids).loss
        loss.backward()
        return u32(loss), [u32(p.grad).copy() for p in model.parameters()]

    with mt.identical():
        c0 = mt.calls()["mojolearn"]
        one = step(1)
        assert mt.calls()["mojolearn"] > c0
        two = step(2)
        with torch.no_grad():
            alone = model(ids[1:]).logits
            both = model(ids).logits
    assert (one[0] == two[0]).all() and all((a == b).all() for a, b in zip(one[1], two[1]))
    assert (u32(alone[0]) == u32(both[1])).all()
    model.zero_grad()
    model(ids, labels=ids).loss.backward()
    for p, g in zip(model.parameters(), two[1]):
        ref = p.grad.numpy()
        assert np.linalg.norm(g.view(F32) - ref) <= 1e-4 * np.linalg.norm(ref) + 1e-12

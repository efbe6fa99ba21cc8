"""mojolearn.torch routes aten::rms_norm (torch.nn.functional.rms_norm, torch.nn.RMSNorm)
through the models' RMSNorm kernel: rule M-31 of the ops contract."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mojolearn  # noqa: E402
import mojolearn.torch as mt  # noqa: E402
import model_oracle as MO  # noqa: E402
from mojolearn.models._exec import kernels as K  # noqa: E402

F = torch.nn.functional
F32 = np.float32
TORCH_EPS = F32(2.0 ** -23)   # torch.finfo(torch.float32).eps, written out


def bits(x) -> bytes:
    if isinstance(x, torch.Tensor):
        x = x.detach().numpy()
    return np.ascontiguousarray(np.asarray(x, dtype=np.float32)).tobytes()


def t(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(autouse=True)
def _mode_off():
    yield
    mt.disable()
    mojolearn.set_num_threads(2)
    torch.set_num_threads(2)


def _oracle(x, d, w, eps):
    xs = x.detach().numpy().reshape(-1, d)
    ws = np.ones(d, F32) if w is None else w.detach().numpy().reshape(d)
    return MO.rmsnorm(xs, ws, F32(eps)).reshape(tuple(x.shape))


def _kernel(x, d, w, eps):
    xs = np.ascontiguousarray(x.detach().numpy().reshape(-1, d))
    ws = np.ones(d, F32) if w is None else np.ascontiguousarray(w.detach().numpy().reshape(d))
    out = np.empty_like(xs)
    K.rmsnorm(xs, ws, K.f32_bits(eps), out)
    return out.reshape(tuple(x.shape))


def test_rms_norm_is_the_models_kernel():
    """M-31 / M-4: F.rms_norm and nn.RMSNorm inside the mode have the bits of the
    independent oracle and of the models' own kernel: eps given or torch's default
    2^-23, with or without a weight, over one or two trailing dimensions; each call is
    one routed call (calls() counts it), and the bits are not torch's own."""
    x = t(3, 5, 72) * 3
    w, w2 = t(72, seed=1), t(5, 72, seed=2)
    rms = torch.nn.RMSNorm(72, eps=1e-6)
    with torch.no_grad():
        rms.weight.copy_(w)
    cases = [  # (call, d, weight, eps as the rule reads it)
        (lambda: F.rms_norm(x, (72,), w, 1e-5), 72, w, 1e-5),
        (lambda: F.rms_norm(x, [72]), 72, None, TORCH_EPS),
        (lambda: F.rms_norm(x, (72,), None, 0.25), 72, None, 0.25),
        (lambda: torch.nn.RMSNorm(72)(x), 72, torch.ones(72), TORCH_EPS),
        (lambda: rms(x), 72, w, 1e-6),
        (lambda: F.rms_norm(x, (5, 72), w2, 1e-5), 5 * 72, w2, 1e-5),
    ]
    theirs = [bits(call()) for call, *_ in cases]
    with mt.identical():
        for call, d, wt, eps in cases:
            before = mt.calls()
            got = call()
            after = mt.calls()
            assert after["mojolearn"] - before["mojolearn"] == 1
            assert after["fallthrough"] == before["fallthrough"]
            assert bits(got) == bits(_oracle(x, d, wt, eps)) == bits(_kernel(x, d, wt, eps))
        ours = [bits(call()) for call, *_ in cases]
    # sabotage: a perturbed expectation is told apart, and the mode is not torch's arithmetic
    assert ours[1] != bits(_oracle(x, 72, None, 1e-6))
    assert ours[0] != bits(_oracle(x, 72, torch.ones(72), 1e-5))
    assert ours != theirs


def test_rms_norm_threads_batch_grad_inference():
    """M-31 / M-18: the same bits for 1 and 2 threads (mojolearn's and torch's), for a
    row alone and in a batch, with autograd recording (the forward is still M-31; the
    gradient, also a double backward, is torch's composite's) and under inference_mode."""
    x, w = t(9, 200) * 2, t(200, seed=3)
    want = _oracle(x, 200, w, 1e-5)
    outs = []
    with mt.identical():
        for n in (1, 2):
            mojolearn.set_num_threads(n)
            torch.set_num_threads(n)
            outs.append(bits(F.rms_norm(x, (200,), w, 1e-5)))
        alone = [F.rms_norm(x[i:i + 1], (200,), w, 1e-5) for i in (0, 4, 8)]
        xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
        y = F.rms_norm(xg, (200,), wg, 1e-5)
        assert y.grad_fn is not None
        (y * t(9, 200, seed=4)).sum().backward()
        with torch.inference_mode():
            inf = F.rms_norm(x, (200,), w, 1e-5)
    assert outs[0] == outs[1] == bits(want) == bits(y) == bits(inf)
    assert [bits(a[0]) for a in alone] == [bits(want[i]) for i in (0, 4, 8)]
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    (F.rms_norm(xr, (200,), wr, 1e-5) * t(9, 200, seed=4)).sum().backward()
    assert torch.allclose(xg.grad, xr.grad, rtol=1e-4, atol=1e-5)
    assert torch.allclose(wg.grad, wr.grad, rtol=1e-4, atol=1e-4)

    def second(on):   # d/dw of |d(sum y^3)/dx|^2: a double backward through rms_norm
        xs, ws = x[:3].clone().requires_grad_(), w.clone().requires_grad_()
        with (mt.identical() if on else torch.enable_grad()):
            gx, = torch.autograd.grad((F.rms_norm(xs, (200,), ws, 1e-5) ** 3).sum(), xs,
                                      create_graph=True)
            return torch.autograd.grad(gx.pow(2).sum(), ws)[0]
    assert torch.allclose(second(True), second(False), rtol=1e-3, atol=1e-3)


def test_rms_norm_special_rows():
    """M-31 / M-4 / M-5: a zero row with eps = 0 is NaN (1 / sqrt(+0) = inf, 0 * inf),
    a row whose squares overflow is zeros (rstd = 1 / inf = 0), a row with a NaN is
    NaN: the oracle's values and torch's, NaN payloads aside."""
    x = torch.tensor([[0.0, 0.0, 0.0, 0.0], [3e20, 1.0, -2.0, 0.5], [float("nan"), 1.0, 2.0, 3.0],
                      [1.0, -2.0, 3.0, -4.0]])
    want = _oracle(x, 4, None, 0.0)
    theirs = F.rms_norm(x, (4,), None, 0.0).numpy()
    with mt.identical():
        n0 = mt.calls()["mojolearn"]
        got = F.rms_norm(x, (4,), None, 0.0).numpy()
        assert mt.calls()["mojolearn"] == n0 + 1
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all() and (np.isnan(theirs) == nan).all()
    assert nan[0].all() and nan[2].all() and (got[1] == 0).all()
    assert bits(got[~nan]) == bits(want[~nan])


def test_rms_norm_falls_through():
    """M-31 (what it does not cover): float64 and bfloat16 inputs and an empty input
    fall through to torch's composite with torch's bits; a float64 weight on a float32
    input falls through too (torch's composite, whose float32 mean over the last
    dimension is then the mode's M-30); an empty or mismatched normalized_shape or
    weight gets torch's own error."""
    x, w = t(4, 16), t(16, seed=1)
    cases = [lambda: F.rms_norm(x.double(), (16,), w.double(), 1e-5),
             lambda: F.rms_norm(x.bfloat16(), (16,), w.bfloat16()).float(),
             lambda: F.rms_norm(x[:0], (16,), w)]
    with warnings.catch_warnings():   # torch warns of the float64 weight, in and out
        warnings.simplefilter("ignore")
        theirs = [bits(c()) for c in cases]
        with mt.identical():
            n0 = mt.calls()
            ours = [bits(c()) for c in cases]
            n1 = mt.calls()
    assert ours == theirs
    assert n1["fallthrough"] >= n0["fallthrough"] + len(cases)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = F.rms_norm(x, (16,), w.double(), 1e-5)
        with mt.identical():
            n0 = mt.calls()
            ours = F.rms_norm(x, (16,), w.double(), 1e-5)
            n1 = mt.calls()
    assert ours.dtype == theirs.dtype and torch.allclose(ours, theirs, rtol=1e-6)
    assert n1["fallthrough"] > n0["fallthrough"] and n1["mojolearn"] == n0["mojolearn"] + 1
    with mt.identical():
        with pytest.raises(RuntimeError, match="normalized_shape"):
            F.rms_norm(x, (8,), t(8))
        with pytest.raises(RuntimeError, match="weight"):
            F.rms_norm(x, (16,), t(8))
        with pytest.raises(RuntimeError, match="normalized_shape"):
            torch.rms_norm(x, [], None, 1e-5)

"""mojolearn.torch on inputs and in settings the single-op tests do not reach (issue 43,
items 3-5): torch.compile'd code inside the mode, tensors with torch's lazy negation
or conjugation bit, and a changed default dtype."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mojolearn.torch as mt  # noqa: E402
from mojolearn._torch import mode as _mode  # noqa: E402

F = torch.nn.functional


def same(x, y) -> bool:
    """The same shape and the same bits (int32 views: NaN payloads count too)."""
    x, y = x.detach().contiguous(), y.detach().contiguous()
    return x.shape == y.shape and torch.equal(x.view(torch.int32), y.view(torch.int32))


def t(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(autouse=True)
def _mode_off():
    yield
    mt.disable()
    torch.set_num_threads(2)


def _f(x, w, g):
    h = F.silu(x @ w)
    return (torch.softmax(h, -1), torch.log_softmax(h, -1), h.mean(-1),
            F.rms_norm(h, (h.shape[-1],), g, 1e-5), F.linear(h, w[:7]))


def test_torch_compile_runs_eagerly_inside_the_mode():
    """Issue 43 item 4: a function compiled by torch.compile (Inductor) before the block
    and called inside it gives, bit for bit, what the same function gives uncompiled
    inside the mode (mm, silu, softmax, log_softmax, mean, rms_norm, linear), and
    nothing is compiled inside (force_eager; a function compiled inside runs eagerly
    too); after the block the compiled code runs again with its earlier bits and a new
    shape compiles. Inductor used to lower silu / softmax / mean itself (other bits) and
    fail on rms_norm. Switching the mode on inside a compiled function is refused by
    name, and the state stays clean."""
    from torch._inductor.compile_fx import compile_fx

    compiles = [0]

    def backend(gm, example_inputs):
        compiles[0] += 1
        return compile_fx(gm, example_inputs)

    x, w, g = t(6, 40) * 2, t(40, 33, seed=1), t(33, seed=2)
    mt.enable()   # the kernels registered (then off): compiling must still work
    mt.disable()
    compiled = torch.compile(_f, backend=backend)
    off = compiled(x, w, g)
    assert compiles[0] == 1
    with mt.identical():
        eager = _f(x, w, g)
        before = mt.calls()["mojolearn"]
        inside = compiled(x, w, g)
        assert mt.calls()["mojolearn"] - before == 7   # every op ran on the mode's kernels
        later = torch.compile(lambda v: F.silu(v) * 2, backend=backend)(x)
        assert same(later, F.silu(x) * 2)
    assert compiles[0] == 1
    assert all(same(a, b) for a, b in zip(inside, eager)), \
        [same(a, b) for a, b in zip(inside, eager)]
    assert all(same(a, b) for a, b in zip(compiled(x, w, g), off))
    compiled(t(9, 40, seed=3), w, g)
    assert compiles[0] == 2

    @torch.compile(backend="eager")
    def switches_inside(v):
        with mt.identical():
            return v @ v.T

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError, match=r"^mojolearn: .*torch.compile.*around the call"):
            switches_inside(x)
    assert not mt.is_enabled() and not _mode._blocks


def test_a_torch_without_set_stance_is_refused(monkeypatch):
    """Issue 43 item 4: on a torch without torch.compiler.set_stance (before 2.6) the
    mode can not keep compiled code eager, so switching it on is refused by name
    (naming the way out), and nothing stays switched on."""
    monkeypatch.delattr(torch.compiler, "set_stance")
    with pytest.raises(RuntimeError, match=r"^mojolearn: .*set_stance \(torch 2.6"):
        with mt.identical():
            pass
    assert not mt.is_enabled() and not _mode._blocks
    with pytest.raises(RuntimeError, match=r"^mojolearn: .*set_stance \(torch 2.6"):
        mt.enable()
    assert not mt.is_enabled()


def _views(x):
    """(name, view, its values materialized): views whose memory is not their values."""
    neg = torch._neg_view(x)                                    # is_neg(), contiguous
    imag = torch.complex(t(*x.shape, seed=9), x).conj().imag    # is_neg(), strided
    assert neg.is_neg() and imag.is_neg()
    return [("neg view", neg, -x), ("imag of a conj view", imag, -x),
            ("conj of a real tensor", x.conj(), x)]


KS = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
# (name, aten kernel of the mode called directly, the same through torch)
_DIRECT = [
    ("silu", lambda v: _mode._silu(KS, v), F.silu),
    ("softmax", lambda v: _mode._KERNELS["_softmax"](KS, v, -1, False),
     lambda v: torch.softmax(v, -1)),
    ("log_softmax", lambda v: _mode._KERNELS["_log_softmax"](KS, v, -1, False),
     lambda v: torch.log_softmax(v, -1)),
    ("mean", lambda v: _mode._mean_dim(KS, v, [-1]), lambda v: v.mean(-1)),
    ("rms_norm", lambda v: _mode._rms_norm(KS, v, [64], None, 1e-5),
     lambda v: F.rms_norm(v, (64,), None, 1e-5)),
    ("mm (left)", lambda v: _mode._mm(KS, v, _W), lambda v: v @ _W),
    ("mm (right, transposed)", lambda v: _mode._mm(KS, _W[:8], v.T), lambda v: _W[:8] @ v.T),
    ("addmm (bias)", lambda v: _mode._addmm(KS, v[0], _W[:4], _W),
     lambda v: torch.addmm(v[0], _W[:4], _W)),
    ("bmm", lambda v: _mode._bmm(KS, v[None], _W[None]), lambda v: torch.bmm(v[None], _W[None])),
    ("mv", lambda v: _mode._mv(KS, _W, v[1]), lambda v: torch.mv(_W, v[1])),
    ("dot", lambda v: _mode._dot(KS, v[0], _W[0]), lambda v: torch.dot(v[0], _W[0])),
]
_W = t(64, 64, seed=5)


@pytest.mark.parametrize("name,direct,op", _DIRECT, ids=[d[0] for d in _DIRECT])
def test_negative_and_conjugate_bits(name, direct, op):
    """Issue 43 item 5: every kernel of the mode that reads data_ptr() (silu, softmax,
    log_softmax, mean, rms_norm, the products' operands and addmm's bias) gives on a
    view with torch's negation bit (memory holding x, values -x) the bits it gives on
    the values materialized, called through torch inside the mode and called directly
    (where torch does not resolve the bit first); a conj() of a real tensor, which sets
    no bit, too. rms_norm (registered above torch's negation handling) used to read the
    un-negated memory; every kernel did when reached directly."""
    x = t(4, 64) * 2
    with mt.identical():
        for label, view, values in _views(x):
            assert same(op(view), op(values.clone())), f"{name} through torch, {label}"
            assert same(direct(view), op(values.clone())), f"{name} called directly, {label}"


def test_rms_norm_negative_bit_weight_and_autograd():
    """Issue 43 item 5: rms_norm with a negated-view weight, and with a negated view of
    an input that requires grad (the autograd path of M-31), has the bits of the
    materialized values; the gradient is torch's composite's on those values."""
    x, w = t(5, 64) * 2, t(64, seed=1)
    with mt.identical():
        assert same(F.rms_norm(x, (64,), torch._neg_view(w), 1e-5),
                    F.rms_norm(x, (64,), -w, 1e-5))
        xg = x.clone().requires_grad_()
        y = F.rms_norm(torch._neg_view(xg), (64,), w, 1e-5)
        assert same(y, F.rms_norm(-x, (64,), w, 1e-5))
        y.sum().backward()
    xr = x.clone().requires_grad_()
    F.rms_norm(-xr, (64,), w, 1e-5).sum().backward()
    assert torch.allclose(xg.grad, xr.grad, rtol=1e-5, atol=1e-6)


def test_complex_conjugate_views_fall_through():
    """Issue 43 item 5: products of complex tensors with the conjugation bit are not the
    mode's: they fall through to torch with torch's bits."""
    cz = torch.complex(t(3, 3), t(3, 3, seed=1))
    theirs = torch.mm(cz.conj(), cz)
    with mt.identical():
        assert same(torch.view_as_real(torch.mm(cz.conj(), cz)), torch.view_as_real(theirs))


def test_ones_buffer_is_float32_whatever_the_default_dtype():
    """Issue 43 item 3: the mode's buffer of ones (silu's u, rms_norm's weight when none
    is given) is float32 even when torch's default dtype is float64 at the moment it is
    grown: silu and rms_norm of an input larger than any before keep the models'
    kernels' bits (the buffer used to follow the default dtype, read as float32)."""
    from mojolearn.models._exec import kernels as K

    n = (1 << 21) + 7 * 64   # larger than the buffer grown by any other test
    x = t(n // 64, 64)
    xs = x.numpy()
    want = K.silu_mul(np.concatenate([xs, np.ones_like(xs)], axis=1), 64, np.empty_like(xs))
    v = x.reshape(1, -1)
    want_rms = K.rmsnorm(v.numpy(), np.ones(n, np.float32), K.f32_bits(1e-5),
                         np.empty((1, n), np.float32))
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with mt.identical():
            got = F.silu(x)
            got_rms = F.rms_norm(v, (n,), None, 1e-5)
    finally:
        torch.set_default_dtype(old)
    assert same(got, torch.from_numpy(want)) and same(got_rms, torch.from_numpy(want_rms))

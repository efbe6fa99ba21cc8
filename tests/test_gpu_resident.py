"""Device-resident operands (issue: torch tensors in and out): DLPack CUDA / ROCm
tensors handed to linalg.matmul / matmul_bf16 and to the torch mode's products on a
GPU build are computed where they lie, with the bits of the CPU build.

Two halves:

* HERE (any machine): a device tensor that no backend of this process computes on
  is refused by name before anything is exported or copied (no GPU build, a
  MOJOLEARN_DEVICE=cpu choice, another vendor's device, a device other than 0),
  and the torch mode lets device tensors fall through when no GPU build serves it.
* ON A GPU (skipped, with the reason, unless torch sees a CUDA/ROCm device and the
  GPU build mojolearn._native_gpu drives it; bench/device_check.sh runs them):
  the bits of matmul on device tensors equal the CPU build's (NN, NT, TN, batched,
  bf16 bits, edge values, odd shapes); the result is a torch tensor on the same
  device (or the given out); work queued by torch before the call is waited for;
  mixed host/device and non-contiguous device operands are refused by name; the
  sabotage arm changes the device result (so the comparison can fail); and inside
  mojolearn.torch.identical(), nn.Linear (addmm with a bias), bmm and a backward on
  CUDA give the CPU mode's bits.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from mojolearn._core import device as _device
from mojolearn._ops import calls as _calls
from mojolearn import linalg  # noqa: E402
import mojolearn.torch as mtorch  # noqa: E402


def _gpu_reason():
    if not torch.cuda.is_available():
        return "torch sees no CUDA/ROCm device on this machine"
    mod, api, why = _device.gpu_status()
    if mod is None:
        return f"no GPU build of mojolearn works here ({why})"
    want = "hip" if getattr(torch.version, "hip", None) else "cuda"
    if api != want:
        return f"the GPU build drives {api}, torch's device is {want}"
    return None


GPU_REASON = _gpu_reason()
needs_gpu = pytest.mark.skipif(GPU_REASON is not None, reason=str(GPU_REASON))


class FakeDevice:
    """A producer that claims a device (the refusal must come before any export)."""

    def __init__(self, dev):
        self.dev = dev
        self.exported = 0

    def __dlpack_device__(self):
        return self.dev

    def __dlpack__(self, **kw):
        self.exported += 1
        raise AssertionError("exported although the device tensor must be refused first")


def test_device_tensor_refused_by_name_without_a_backend(monkeypatch):
    """A device operand no backend computes on: refused by name, never exported."""
    w = np.ones((4, 3), np.float32)
    monkeypatch.setattr(_device, "_choice", "cpu")
    f = FakeDevice((2, 0))
    with pytest.raises(ValueError, match=r"mojolearn: matmul: b is on device cuda:0; "
                                         r"MOJOLEARN_DEVICE=cpu .*never copies device memory"):
        linalg.matmul(np.ones((2, 4), np.float32), f)
    assert f.exported == 0
    monkeypatch.setattr(_device, "_choice", "auto")
    monkeypatch.setattr(_device, "_gpu", (None, None, "this install has no GPU build (test)"))
    with pytest.raises(ValueError, match=r"b is on device cuda:0; no GPU backend of this "
                                         r"install computes there \(this install has no GPU build"):
        linalg.matmul(np.ones((2, 4), np.float32), f)
    # a GPU build of another vendor, and a device other than 0
    monkeypatch.setattr(_device, "_gpu", (object(), "hip", "a test device"))
    with pytest.raises(ValueError, match=r"a is on device cuda:0; this install's GPU build "
                                         r"drives hip devices"):
        linalg.matmul(FakeDevice((2, 0)), w)
    monkeypatch.setattr(_device, "_gpu", (object(), "cuda", "a test device"))
    with pytest.raises(ValueError, match=r"a is on device cuda:1; this version's GPU build "
                                         r"computes on device 0 only"):
        linalg.matmul(FakeDevice((2, 1)), w)
    # the other entries read host memory only, whatever the backend
    with pytest.raises(ValueError, match=r"mojolearn: matmul_int8: a is on device cuda:0; "
                                         r"matmul_int8 reads host memory only"):
        linalg.matmul_int8(FakeDevice((2, 0)), w.T.copy())
    with pytest.raises(ValueError, match=r"mojolearn: to_bf16: x is on device cuda:0"):
        linalg.to_bf16(FakeDevice((2, 0)))


def test_resident_refuses_mixed_and_foreign_devices():
    """_device.resident: every operand on one device, or refused by name."""
    with pytest.raises(ValueError, match=r"matmul: a is on cuda:0 but b is in host memory"):
        _device.resident("matmul", [("a", (2, 0)), ("b", None)])
    with pytest.raises(ValueError, match=r"matmul: a is on cuda:0 but out is on rocm:0"):
        _device.resident("matmul", [("a", (2, 0)), ("out", (10, 0))])


@pytest.mark.skipif(not hasattr(torch, "cuda") or torch.cuda.is_available(),
                    reason="this check is for machines where torch has no device")
def test_mode_without_gpu_build_registers_cpu_only():
    assert mtorch.gpu_covered() is False


# ------------------------------------------------------------------ on a GPU
def _bits(x):
    x = np.ascontiguousarray(x, dtype=np.float32)
    b = x.view(np.uint32).copy()
    b[np.isnan(x)] = 0x7FC00000  # NaN payloads are not promised (fp32.v1 rule 6)
    return b


def _host(fn, *args, **kw):
    """The CPU build's result for host copies of the operands."""
    prev = _device.set_device("cpu")
    try:
        return np.asarray(fn(*args, **kw))
    finally:
        _device.set_device(prev)


def _edge(rng, shape):
    x = rng.standard_normal(shape).astype(np.float32)
    p = rng.random(shape)
    sub = (rng.integers(1, 1 << 23, size=shape, dtype=np.uint32)
           | (rng.integers(0, 2, size=shape, dtype=np.uint32) << 31)).view(np.float32)
    x = np.where(p < 0.1, sub, x)
    x = np.where((p >= 0.1) & (p < 0.12), np.float32(np.inf), x)
    x = np.where((p >= 0.12) & (p < 0.13), np.float32(np.nan), x)
    x = np.where((p >= 0.13) & (p < 0.2), np.float32(-0.0), x)
    x = np.where((p >= 0.2) & (p < 0.4), x * np.float32(2.0 ** -70), x)
    return np.ascontiguousarray(x, dtype=np.float32)


@needs_gpu
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (3, 5, 128), (7, 4, 257), (67, 45, 300),
                                   (2, 3, 2049), (130, 260, 1000)])
@pytest.mark.parametrize("lay", ["NN", "NT", "TN"])
def test_device_bits_equal_cpu(m, n, k, lay):
    rng = np.random.default_rng(m * 1000 + n * 10 + k)
    ta, tb = lay == "TN", lay == "NT"
    a = _edge(rng, (k, m) if ta else (m, k))
    b = _edge(rng, (n, k) if tb else (k, n))
    want = _host(linalg.matmul, a, b, transpose_a=ta, transpose_b=tb)
    da, db = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    got = linalg.matmul(da, db, transpose_a=ta, transpose_b=tb)
    assert isinstance(got, torch.Tensor) and got.device == da.device and got.dtype == torch.float32
    assert np.array_equal(_bits(got.cpu().numpy()), _bits(want))
    out = torch.full((m, n), 7.0, device="cuda")
    r = linalg.matmul(da, db, transpose_a=ta, transpose_b=tb, out=out)
    assert r is out and np.array_equal(_bits(out.cpu().numpy()), _bits(want))


@needs_gpu
def test_device_batched_and_bf16():
    rng = np.random.default_rng(7)
    a = rng.standard_normal((3, 5, 33, 70)).astype(np.float32)
    w = rng.standard_normal((70, 19)).astype(np.float32)
    bw = rng.standard_normal((5, 70, 19)).astype(np.float32)
    for b in (w, bw):
        want = _host(linalg.matmul, a, b)
        got = linalg.matmul(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda())
        assert tuple(got.shape) == want.shape
        assert np.array_equal(_bits(got.cpu().numpy()), _bits(want))
    wb = _host(linalg.to_bf16, w)
    want = _host(linalg.matmul_bf16, a[0, 0], wb)
    got = linalg.matmul_bf16(torch.from_numpy(a[0, 0].copy()).cuda(),
                             torch.from_numpy(wb.view(np.int16).copy()).cuda().view(torch.uint16))
    assert np.array_equal(_bits(got.cpu().numpy()), _bits(want))


@needs_gpu
def test_queued_work_is_waited_for():
    """An operand still being written by torch's stream when the call is made."""
    w = torch.ones(64, 8, device="cuda")
    x = torch.zeros(16, 64, device="cuda")
    torch.cuda._sleep(200_000_000)   # keeps torch's stream busy (~0.1 s)
    x.add_(1.0)                       # queued behind the sleep
    got = linalg.matmul(x, w)
    assert torch.equal(got.cpu(), torch.full((16, 8), 64.0))


@needs_gpu
def test_device_refusals_by_name():
    da = torch.randn(4, 6, device="cuda")
    with pytest.raises(ValueError, match=r"matmul: a is on cuda:0 but b is in host memory"):
        linalg.matmul(da, np.ones((6, 2), np.float32))
    with pytest.raises(ValueError, match=r"non-contiguous tensor in device memory"):
        linalg.matmul(torch.randn(4, 12, device="cuda")[:, ::2], torch.randn(6, 2, device="cuda"))
    with pytest.raises(ValueError, match=r"matmul_int8: a is on device cuda:0; matmul_int8 "
                                         r"reads host memory only"):
        linalg.matmul_int8(da, da)
    with pytest.raises(TypeError, match=r"matmul: b must be float32, got float64"):
        linalg.matmul(da, torch.randn(6, 2, device="cuda", dtype=torch.float64))


@needs_gpu
def test_device_sabotage_changes_the_bits():
    a = torch.randn(8, 16, device="cuda")
    b = torch.randn(16, 4, device="cuda")
    good = linalg.matmul(a, b).cpu()
    with _calls.sabotaged():
        bad = linalg.matmul(a, b).cpu()
    diff = good.view(torch.int32) ^ bad.view(torch.int32)
    assert int(diff[0, 0]) == 1 and int(diff.abs().sum()) == 1


@needs_gpu
def test_torch_mode_on_cuda_gives_the_cpu_modes_bits():
    assert mtorch.gpu_covered()
    torch.manual_seed(0)
    lin = torch.nn.Linear(96, 40)
    x = torch.randn(2, 7, 96)
    q = torch.randn(3, 9, 16)
    kt = torch.randn(3, 16, 11)
    with mtorch.identical():
        want_lin = lin(x).detach()
        want_bmm = torch.bmm(q, kt)
        xg = x.clone().requires_grad_(True)
        lin(xg).sum().backward()
        want_grad = xg.grad.clone()
        before = mtorch.calls()["mojolearn"]
        lc = lin.cuda()
        got_lin = lc(x.cuda()).detach().cpu()
        got_bmm = torch.bmm(q.cuda(), kt.cuda()).cpu()
        xc = x.cuda().requires_grad_(True)
        lc(xc).sum().backward()
        got_grad = xc.grad.cpu()
        assert mtorch.calls()["mojolearn"] > before
    assert torch.equal(got_lin.view(torch.int32), want_lin.view(torch.int32))
    assert torch.equal(got_bmm.view(torch.int32), want_bmm.view(torch.int32))
    assert torch.equal(got_grad.view(torch.int32), want_grad.view(torch.int32))

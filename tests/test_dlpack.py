"""DLPack both ways (rule 7.2 of the fp32 contract): any __dlpack__ producer or raw
capsule in (zero-copy when contiguous, strides honoured), mojolearn.Array out
(torch.from_dlpack / numpy.from_dlpack share its memory; lifetime handled), and the
refusals by name."""
from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import mojolearn
from mojolearn._data import dlpack as _dlpack
from mojolearn import linalg

torch = pytest.importorskip("torch")

F32 = np.float32
RNG = np.random.default_rng(11)


def bits(x) -> bytes:
    return np.ascontiguousarray(np.asarray(x)).tobytes()


def rnd(*shape):
    return RNG.standard_normal(shape).astype(F32)


class OnlyDLPack:
    """Exposes its data only through __dlpack__ / __dlpack_device__ (the generic
    route: no buffer protocol, no __array_interface__)."""

    def __init__(self, x, device=(1, 0)):
        self._x = x
        self._device = device
        self.calls = 0

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        self.calls += 1
        if max_version is None:
            return self._x.__dlpack__()
        return self._x.__dlpack__(max_version=max_version)

    def __dlpack_device__(self):
        return self._device


class LegacyOnlyDLPack(OnlyDLPack):
    """A producer from before DLPack 1.0: __dlpack__ takes no max_version."""

    def __dlpack__(self, stream=None):
        self.calls += 1
        return self._x.__dlpack__()


def test_torch_tensors_in_same_bits_as_numpy():
    """7.2 / 6.5: torch tensors are read in place (contiguous) and give the bits of
    the same data as numpy arrays, in every layout and for matmul_bf16."""
    a, b = rnd(4, 300), rnd(300, 6)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    ref = linalg.matmul(a, b)
    assert bits(linalg.matmul(ta, tb)) == bits(ref)
    assert bits(linalg.matmul(ta, tb.T.contiguous(), transpose_b=True)) == bits(ref)
    assert bits(linalg.matmul(ta.T.contiguous(), tb, transpose_a=True)) == bits(ref)
    wb = linalg.to_bf16(b)
    assert bits(linalg.matmul_bf16(ta, torch.from_dlpack(wb))) == bits(linalg.matmul_bf16(a, wb))
    # converters and the integer GEMMs take tensors too
    assert bits(linalg.to_bf16(tb)) == bits(wb)
    assert bits(linalg.matmul_int15(ta, tb.T.contiguous())) == bits(linalg.matmul_int15(a, b.T.copy()))


def test_zero_copy_in():
    """7.2: a contiguous tensor is not copied: the Buf points at the tensor's memory
    and the producer stays alive while it is read."""
    from mojolearn._data.buffers import read

    t = torch.randn(3, 5)
    b = read(t, func="t", arg="a")
    assert b.addr == t.data_ptr() and b.shape == (3, 5) and b.dtype == "float32"
    assert b.strides == (20, 4) and b.keep.producer is t
    s = torch.randn(6, 10)[1:4, ::2]
    bs = read(s, func="t", arg="a")
    assert bs.addr == s.data_ptr() and bs.strides == (40, 8)


def test_generic_producer_route():
    """7.2: an object with only __dlpack__ / __dlpack_device__ (current and legacy
    signatures) is read through its capsule, with the bits of the numpy call."""
    a, b = rnd(5, 40), rnd(40, 3)
    ref = linalg.matmul(a, b)
    for cls in (OnlyDLPack, LegacyOnlyDLPack):
        pa, pb = cls(a), cls(b)
        assert bits(linalg.matmul(pa, pb)) == bits(ref)
        assert pa.calls == 1 and pb.calls == 1   # each operand read once
    cap = torch.utils.dlpack.to_dlpack(torch.from_numpy(a))   # a raw legacy capsule
    assert bits(linalg.matmul(cap, b)) == bits(ref)


def test_strided_tensors_honoured():
    """7.2 / 7: non-contiguous tensors (transposed, sliced, with a storage offset) give
    the bits of their contiguous copy."""
    base = torch.randn(9, 12)
    b = rnd(4, 5)
    for x in (base[1:5, ::3], base.T[2:6, 1:5], base[::2, 3:7]):
        assert not x.is_contiguous() or x.storage_offset()
        assert bits(linalg.matmul(x, b)) == bits(linalg.matmul(x.contiguous().numpy(), b))


def test_leading_batch_dims_from_torch():
    """7.1 / 7.2: (batch, tokens, features) activations as a torch tensor times a 2-D
    weight: the bits of the reshaped 2-D call."""
    x = torch.randn(2, 7, 48)
    w = torch.randn(48, 16)
    c = linalg.matmul(x, w)
    assert c.shape == (2, 7, 16)
    assert bits(c) == bits(linalg.matmul(x.reshape(14, 48), w))


def test_export_zero_copy_torch_and_numpy():
    """7.2: torch.from_dlpack / numpy.from_dlpack of a result share its memory."""
    c = linalg.matmul(rnd(3, 4), rnd(4, 5))
    t = torch.from_dlpack(c)
    n = np.from_dlpack(c)
    assert t.data_ptr() == c.address and n.ctypes.data == c.address
    assert t.shape == (3, 5) and t.dtype == torch.float32 and n.dtype == F32
    assert bits(t.numpy()) == bits(c) == bits(n)
    assert c.__dlpack_device__() == (1, 0)
    for arr, dt in ((linalg.to_bf16(rnd(2, 3)), torch.uint16), (linalg.quantize_int8(rnd(2, 3))[0], torch.int8)):
        assert torch.from_dlpack(arr).dtype == dt and torch.from_dlpack(arr).data_ptr() == arr.address


def test_export_lifetime():
    """7.2: the Array's memory stays valid while a consumer holds it, after the last
    Python reference to the Array is gone; released when the consumer lets go, and
    when an unconsumed capsule is collected."""
    gc.collect()
    base = _dlpack.live_exports()
    c = linalg.matmul(rnd(64, 32), rnd(32, 48))   # large enough for a malloc'ed block
    want = bits(c)
    t = torch.from_dlpack(c)
    n = np.from_dlpack(c)
    del c
    gc.collect()
    junk = [linalg.matmul(rnd(64, 32), rnd(32, 48)) for _ in range(4)]  # reuse freed blocks
    assert bits(t.numpy()) == want and bits(n) == want
    assert _dlpack.live_exports() == base + 2
    del t
    gc.collect()
    assert _dlpack.live_exports() == base + 1
    del n, junk
    gc.collect()
    assert _dlpack.live_exports() == base
    cap = linalg.matmul(rnd(2, 2), rnd(2, 2)).__dlpack__()
    assert _dlpack.live_exports() == base + 1
    del cap
    gc.collect()
    assert _dlpack.live_exports() == base


def test_export_held_at_exit_does_not_crash():
    """7.2: a consumer still holding an exported result at interpreter exit is fine."""
    code = ("import numpy as np, torch; from mojolearn import linalg\n"
            "c = linalg.matmul(np.ones((3, 3), np.float32), np.ones((3, 3), np.float32))\n"
            "t = torch.from_dlpack(c); n = np.from_dlpack(c); del c\n"
            "print(float(t.sum()), float(n.sum()))\n")
    env = dict(os.environ, PYTHONPATH=str(Path(mojolearn.__file__).resolve().parents[1]))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["27.0", "27.0"]


def test_export_arguments():
    """7.2: copy=True exports a copy; a device other than the host is a BufferError;
    a stream for a host array is refused by name."""
    c = linalg.matmul(rnd(2, 3), rnd(3, 2))
    t = torch.from_dlpack(c.__dlpack__(copy=True))
    assert t.data_ptr() != c.address and bits(t.numpy()) == bits(c)
    with pytest.raises(BufferError, match="mojolearn: Array.__dlpack__: cannot export to cuda:0"):
        c.__dlpack__(dl_device=(2, 0))
    with pytest.raises(ValueError, match="stream"):
        c.__dlpack__(stream=1)


def test_refusals_by_name():
    """7.2 / 7: a tensor that requires grad, a device tensor, a capsule consumed twice,
    unsupported dtypes (float64, complex, bfloat16, bool) and vector lanes are refused
    by name; nothing is computed and nothing crashes."""
    w = torch.randn(4, 3)
    with pytest.raises(ValueError, match=r"mojolearn: matmul: a requires grad.*detach"):
        linalg.matmul(torch.randn(2, 4, requires_grad=True), w)
    with pytest.raises(ValueError, match=r"mojolearn: matmul: b is on device cuda:0.*CPU"):
        linalg.matmul(w.T.contiguous(), OnlyDLPack(rnd(4, 3), device=(2, 0)))
    with pytest.raises(ValueError, match=r"mojolearn: matmul: a is on device rocm:1"):
        linalg.matmul(OnlyDLPack(rnd(2, 4), device=(10, 1)), w)
    cap = torch.utils.dlpack.to_dlpack(torch.randn(2, 4))
    linalg.matmul(cap, w)
    with pytest.raises(ValueError, match=r"mojolearn: matmul: a is a DLPack capsule that was already consumed"):
        linalg.matmul(cap, w)
    for dt, name in ((torch.float64, "float64"), (torch.complex64, "complex64"),
                     (torch.bfloat16, "bfloat16"), (torch.bool, "bool"), (torch.float16, "float16")):
        with pytest.raises(TypeError, match=rf"mojolearn: matmul: a must be float32, got {name}"):
            linalg.matmul(torch.zeros(2, 4, dtype=dt), w)
    ex = linalg.matmul(rnd(2, 2), rnd(2, 2))
    cap2 = ex.__dlpack__()
    torch.from_dlpack(cap2)
    with pytest.raises(Exception):
        torch.from_dlpack(cap2)          # torch's own refusal of a used capsule
    with pytest.raises(ValueError, match="already consumed"):
        linalg.matmul(cap2, rnd(2, 2))
    with pytest.raises(TypeError, match="not a DLPack tensor"):
        import ctypes
        bad = ctypes.pythonapi.PyCapsule_New
        bad.restype = ctypes.py_object
        bad.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        linalg.matmul(bad(1, b"something", None), w)
    with pytest.raises(TypeError, match="DLPack tensor"):
        linalg.matmul(object(), w)


def test_vector_lanes_refused():
    """7.2: a DLTensor with vector lanes is refused by name."""
    x = linalg.matmul(rnd(2, 2), rnd(2, 2))
    cap = x.__dlpack__()
    ptr = _dlpack._CapsuleGetPointer(cap, b"dltensor")
    _dlpack._Managed.from_address(ptr).dl_tensor.dtype.lanes = 4
    with pytest.raises(TypeError, match="4-lane"):
        linalg.matmul(cap, rnd(2, 2))
    del cap
    gc.collect()


def test_mojolearn_array_through_dlpack_is_itself():
    """7.2: a result handed back through its own DLPack export gives the same bits."""
    a = linalg.matmul(rnd(3, 40), rnd(40, 8))
    b = rnd(8, 2)
    assert bits(linalg.matmul(OnlyDLPack(a), b)) == bits(linalg.matmul(a, b))
    assert isinstance(mojolearn.Array, type)


def test_a_torch_negative_view_is_refused_not_read_unnegated():
    """Issue 43 item 11: a torch tensor with its lazy negation bit (torch._neg_view, the
    imaginary part of a conjugated complex tensor) exports its memory un-negated through
    DLPack, so linalg.matmul silently computed with the wrong sign; now refused by name,
    and its resolve_neg() copy gives the bits of the negated values."""
    torch = pytest.importorskip("torch")
    from mojolearn import linalg

    x = torch.randn(3, 4)
    w = torch.randn(4, 2)
    neg = torch._neg_view(x)
    assert neg.is_neg()
    with pytest.raises(ValueError, match="lazy negation bit.*resolve_neg"):
        linalg.matmul(neg, w)
    got = np.asarray(linalg.matmul(neg.resolve_neg(), w))
    want = np.asarray(linalg.matmul((-x).contiguous(), w))
    assert got.tobytes() == want.tobytes()

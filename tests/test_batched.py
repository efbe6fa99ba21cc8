"""Leading batch dimensions of matmul / matmul_bf16 (rule 7.1 of the fp32 contract)."""
from __future__ import annotations

import numpy as np
import pytest

from mojolearn import linalg
from tests import oracle as O

F32 = np.float32
RNG = np.random.default_rng(7)


def bits(x) -> bytes:
    return np.ascontiguousarray(np.asarray(x)).tobytes()


def rnd(*shape):
    return RNG.standard_normal(shape).astype(F32)


@pytest.mark.parametrize("lead", [(3,), (2, 3), (1, 4, 1)])
def test_leading_rows_equal_reshaped_call(lead):
    """7.1 / 6.5: a (..., m, k) @ 2-D b has the bits of the reshaped 2-D call, in NN
    and NT, for k spanning several leaves."""
    m, k, n = 5, 300, 7
    a = rnd(*lead, m, k)
    b = rnd(k, n)
    c = linalg.matmul(a, b)
    assert c.shape == lead + (m, n)
    assert bits(c) == bits(linalg.matmul(a.reshape(-1, k), b))
    bt = np.ascontiguousarray(b.T)
    assert bits(linalg.matmul(a, bt, transpose_b=True)) == bits(c)


def test_batched_b_equals_per_batch_calls():
    """7.1: b with leading dimensions multiplies batch by batch; every batch has the
    bits of its own 2-D call (and of the oracle)."""
    a = rnd(2, 3, 4, 130)
    b = rnd(2, 3, 130, 6)
    c = np.asarray(linalg.matmul(a, b))
    assert c.shape == (2, 3, 4, 6)
    for i in range(2):
        for j in range(3):
            assert bits(c[i, j]) == bits(linalg.matmul(a[i, j], b[i, j]))
            assert bits(c[i, j]) == bits(O.gemm_fp32_v1(a[i, j], b[i, j]))


@pytest.mark.parametrize("sa,sb", [((2, 1), (3,)), ((3,), (2, 1)), ((), (4,)), ((4,), ()),
                                   ((1,), (5,)), ((2, 3), (1, 3))])
def test_batch_broadcast_like_numpy(sa, sb):
    """7.1: batch shapes broadcast as numpy's matmul; the shape is numpy's and each
    batch equals the 2-D call on its broadcast operands."""
    a = rnd(*sa, 3, 9)
    b = rnd(*sb, 9, 4)
    c = np.asarray(linalg.matmul(a, b))
    ref = np.matmul(a, b)
    assert c.shape == ref.shape
    ab, bb = np.broadcast_arrays(a[..., :1, :1], b[..., :1, :1])
    shape = ab.shape[:-2]
    A = np.broadcast_to(a, shape + a.shape[-2:])
    B = np.broadcast_to(b, shape + b.shape[-2:])
    for idx in np.ndindex(*shape):
        assert bits(c[idx]) == bits(linalg.matmul(A[idx], B[idx]))


def test_batched_transpose_a_and_strided():
    """7.1 / 7: transpose_a applies to each batch's last two dimensions; a strided
    batched operand gives the bits of its contiguous copy."""
    a = rnd(3, 8, 5)          # (batch, k, m)
    b = rnd(3, 8, 4)
    c = linalg.matmul(a, b, transpose_a=True)
    for i in range(3):
        assert bits(np.asarray(c)[i]) == bits(linalg.matmul(a[i], b[i], transpose_a=True))
    big = rnd(3, 8, 10)
    s = big[:, :, ::2]
    assert bits(linalg.matmul(s, b, transpose_a=True)) == \
        bits(linalg.matmul(np.ascontiguousarray(s), b, transpose_a=True))


def test_batched_bf16():
    """7.1 / 9: matmul_bf16 with batch dimensions equals matmul on the widened operands."""
    a = rnd(2, 3, 40)
    b = O.to_bf16(rnd(2, 40, 5))
    c = linalg.matmul_bf16(a, b)
    assert bits(c) == bits(linalg.matmul(a, O.from_bf16(b)))


def test_batched_out_and_degenerate():
    """7.1 / 8: out of the full batched shape is written in place; empty batches and
    k = 0 give empty results and +0.0."""
    a, b = rnd(2, 3, 6), rnd(2, 6, 4)
    out = np.empty((2, 3, 4), F32)
    assert linalg.matmul(a, b, out=out) is out
    assert bits(out) == bits(linalg.matmul(a, b))
    assert linalg.matmul(np.zeros((0, 3, 6), F32), b[0]).shape == (0, 3, 4)
    z = np.asarray(linalg.matmul(np.zeros((2, 3, 0), F32), np.zeros((2, 0, 4), F32)))
    assert z.shape == (2, 3, 4) and not np.signbit(z).any() and not z.any()


@pytest.mark.parametrize("call,part", [
    (lambda: linalg.matmul(rnd(2, 3, 4), rnd(3, 4, 2)), "broadcast"),
    (lambda: linalg.matmul(rnd(4), rnd(2, 4, 2)), "2-D"),
    (lambda: linalg.matmul(rnd(2, 3, 4), rnd(5, 2)), "inner"),
    (lambda: linalg.matmul(rnd(2, 3, 4), rnd(4, 2), out=np.empty((6, 2), F32)), "shape"),
    (lambda: linalg.matmul(rnd(2, 3, 4).astype(np.float64), rnd(4, 2)), "float64"),
])
def test_batched_refusals(call, part):
    """7.1 / 7: batch shapes that do not broadcast, a 1-D operand beside a batched one,
    inner mismatch, a wrong out shape and non-float32 input are refused by name."""
    with pytest.raises((ValueError, TypeError)) as ei:
        call()
    assert str(ei.value).startswith("mojolearn: matmul:") and part in str(ei.value)


def test_batched_with_column_major_2d_operand_read_in_place(copies):
    """7.1 / 7 / 6.5: beside a batched operand, a 2-D column-major one (``x @ w.T`` with
    x (batch, m, k), a Linear layer's weight) is read in place with its flag flipped,
    not copied, and the bits are those of the contiguous call; where the flip would
    ask for both transposes it is copied."""
    x = rnd(2, 3, 5, 300)
    w = rnd(7, 300)                     # (n, k), as checkpoints store it
    ref = linalg.matmul(x, w, transpose_b=True)
    copies.clear()
    assert bits(linalg.matmul(x, w.T)) == bits(ref)
    assert copies == []
    wt = np.asfortranarray(w)           # (n, k) column-major, with transpose_b
    assert bits(linalg.matmul(x, wt, transpose_b=True)) == bits(ref)
    assert copies == []
    # a 2-D column-major a beside a batched b: flipped to TN
    a = rnd(5, 300)
    b = rnd(4, 300, 6)
    ref2 = linalg.matmul(a, b)
    copies.clear()
    assert bits(linalg.matmul(np.asfortranarray(a), b)) == bits(ref2)
    assert copies == []
    # transpose_a on the batched a and a column-major 2-D b: TT is not a layout, b is copied
    xt = np.ascontiguousarray(np.swapaxes(x, -1, -2))   # (2, 3, 300, 5)
    copies.clear()
    assert bits(linalg.matmul(xt, w.T, transpose_a=True)) == bits(ref)
    assert copies == ["b"]

"""Rule M-32 of the ops contract: CausalLM.generate(greedy=False)'s choice of a token,
in the kernel (nn_sample_rows), against a numpy oracle written from the rule."""
import numpy as np
import pytest

from mojolearn.models._exec import kernels as K
from mojolearn.models.causal_lm import CausalLM

TINY = np.float32(1e-40)  # a float32 subnormal


def oracle(row, r):
    """M-32 in numpy: numpy's float32 max and subtraction (no flush: numpy leaves the
    floating-point state alone), M-14's expf (tested against its own oracle in
    test_nn_elementary.py), a float64 running sum, and the first c_j above u."""
    with np.errstate(all="ignore"):
        mx = row.max()
        d = (row - mx).astype(np.float32)
        e = K.elementwise("expf", d)
        c = np.cumsum(e.astype(np.float64))
        u = r * c[-1]
    return int(min(np.searchsorted(c, u, side="right"), row.size - 1))


def _check(rows, rs):
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    rs = np.asarray(rs, dtype=np.float64)
    got = K.sample_rows(rows, rs)
    want = [oracle(row, r) for row, r in zip(rows, rs)]
    assert got.tolist() == want, (got.tolist(), want)
    return got


def test_random_rows_match_the_oracle():
    """M-32: random logits of many widths and scales, one draw per row."""
    g = np.random.default_rng(5)
    for n in (1, 2, 3, 7, 16, 17, 100, 1000, 49152):
        for scale in (1e-3, 1.0, 10.0, 80.0):
            rows = (g.standard_normal((3, n)) * scale).astype(np.float32)
            _check(rows, g.random(3))


def test_draw_edges_and_ties():
    """M-32: u equal to a running sum takes the next token (the first c_j above u); a
    draw of 0 takes the first token of nonzero weight; a draw just below 1 the last."""
    n = 8
    row = np.zeros((1, n), np.float32)  # e_j = 1, c_j = j + 1
    for j in range(n):
        assert _check(row, [j / n]).tolist() == [j]
    assert _check(row, [np.nextafter(1.0, 0.0)]).tolist() == [n - 1]
    # the first tokens have zero weight (expf of a difference below -104 is +0)
    row = np.array([[-1e4, -1e4, 0.0, -1e4, 0.5, -1e4]], np.float32)
    assert _check(row, [0.0]).tolist() == [2]
    assert _check(row, [np.nextafter(1.0, 0.0)]).tolist() == [4]


def test_nan_inf_and_empty_weight_rows():
    """M-32: a NaN anywhere, +inf (inf - inf is NaN) and rows of -inf give n - 1;
    -inf entries next to finite ones have weight 0."""
    n = 6
    rows = np.zeros((5, n), np.float32)
    rows[0, 2] = np.nan
    rows[1, 0] = np.inf
    rows[2, :] = -np.inf
    rows[3, :] = [-np.inf, 1.0, -np.inf, 2.0, -np.inf, -np.inf]
    rows[4, :] = [np.finfo(np.float32).max, -np.finfo(np.float32).max, 0, 1e30, -1e30, 3.0]
    got = _check(rows, [0.3, 0.3, 0.3, 0.99, 0.5])
    assert got.tolist()[:3] == [n - 1, n - 1, n - 1]
    assert got[3] in (1, 3)


def test_subnormal_logits():
    """M-32: rows of subnormals, signed zeros and tiny normals give the oracle's tokens.
    The kernel compares and subtracts them unflushed (sub_unflushed), as numpy does; a
    flushed subtraction would give the same tokens too (M-32: a subnormal changes no
    e_j that matters), so this checks the tokens, not the unflushed path itself."""
    f32min = np.finfo(np.float32).tiny
    rows = np.array([
        [TINY, -TINY, 0.0, -0.0, 5 * TINY],
        [-TINY, -2 * TINY, -0.0, -3 * TINY, -TINY],
        [f32min, -f32min, TINY, f32min / 2, -f32min / 4],
        [-1.5 * f32min, -TINY, -1.5 * f32min, -f32min, -2 * f32min],
    ], np.float32)
    g = np.random.default_rng(9)
    for _ in range(20):
        _check(rows, g.random(len(rows)))


def test_choose_draws_one_number_per_row_in_order():
    """M-32: CausalLM._choose takes one draw of the seeded generator per row, in row
    order, and agrees with the oracle fed the same draws; greedy is the first largest
    logit."""
    g = np.random.default_rng(4)
    logits = (g.standard_normal((4, 300)) * 3).astype(np.float32)
    got = CausalLM._choose(logits, np.random.default_rng(123))
    draws = np.random.default_rng(123)
    want = [oracle(row, draws.random()) for row in logits]
    assert got.tolist() == want
    assert got.dtype == np.int64
    assert CausalLM._choose(logits, None).tolist() == np.argmax(logits, axis=1).tolist()


def test_choose_refuses_what_is_not_float32_logits():
    """M-32: sampling takes (batch, vocab >= 1) float32 logits; anything else is refused
    by name, not cast."""
    rng = np.random.default_rng(0)
    with pytest.raises(TypeError, match="float32 logits, got float64"):
        CausalLM._choose(np.zeros((2, 5), np.float64), rng)
    with pytest.raises(ValueError, match=r"vocab >= 1\) float32 logits, got shape \(2, 0\)"):
        CausalLM._choose(np.zeros((2, 0), np.float32), rng)
    with pytest.raises(ValueError, match=r"got shape \(5,\)"):
        CausalLM._choose(np.zeros(5, np.float32), rng)

"""The attention backward's own kernels against the independent oracle: T-47 (the
weights recomputed by the forward's functions, model_oracle.attention_weights) and T-49
(the softmax backward, training_oracle.softmax_backward), bit for bit, at 1, 2 and 3
threads, on shapes that reach every path of the kernels (query heads of a key/value
head computed 1 .. 4 at a time, head_dim of one leaf and of two, rows cut at the query
when the values are small and whole otherwise) and on edge values: +-0, subnormals,
inf, NaN, huge rows (|q| or |k| >= 2**40 turns the cut off; finite, they still weigh the masked
keys +0), non-finite rows (every weight NaN, the masked ones too), masked keys."""
from __future__ import annotations

import numpy as np
import pytest

from mojolearn.models._exec import kernels as K
from tests import model_oracle as MO
from tests import training_oracle as TO

F32 = np.float32
EDGE = np.array([0.0, -0.0, 1e-40, -1e-40, np.inf, -np.inf, np.nan, 3e38, -3e38, 1e20],
                F32)


def u32(x):
    return np.ascontiguousarray(x, F32).view(np.uint32)


def same(got, want):
    """Bits equal; NaN payloads are not promised (rule 6.6), NaN-ness is."""
    g, w = np.asarray(got, F32), np.asarray(want, F32)
    ok = (u32(g) == u32(w)) | (np.isnan(g) & np.isnan(w))
    assert ok.all(), f"{(~ok).sum()} of {ok.size} differ, first at {np.argwhere(~ok)[0]}"


def _inputs(seed, B, L, nh, kvh, hd, kind):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B * L, nh * hd)).astype(F32)
    kt = rng.standard_normal((B, kvh, hd, L)).astype(F32)
    if kind == "huge_q":      # one query row of one head past 2**40: that row is whole
        q[L // 2, :hd] *= F32(3e12)
    elif kind == "huge_k":    # one key/value head's keys past 2**40: its rows are whole
        kt[0, kvh - 1] *= F32(3e12)
    elif kind == "inf_q":     # one query row of one head with an inf: its weights NaN
        q[L // 2, hd // 2] = np.inf
    elif kind == "edge":
        for x, every in ((q, 40), (kt, 60)):
            flat = x.reshape(-1)
            at = rng.integers(0, flat.size, max(1, flat.size // every))
            flat[at] = EDGE[rng.integers(0, EDGE.size, at.size)]
    return q, kt


def _oracle_probs(q, kt, B, L, nh, kvh, hd):
    p = np.empty((B, nh, L, L), F32)
    rep = nh // kvh
    for b in range(B):
        for h in range(nh):
            qh = q[b * L:(b + 1) * L, h * hd:(h + 1) * hd]
            kh = kt[b, h // rep].T
            p[b, h] = MO.attention_weights(qh, kh, 0, "fp32_v1", hd)
    return p


SHAPES = [  # B, L, n_heads, n_kv, head_dim
    (1, 1, 1, 1, 8),
    (2, 9, 4, 1, 16),     # 4 heads a key/value head: one group of HG = 4
    (1, 37, 9, 3, 64),    # 3 a head (SmolLM2's GQA)
    (1, 21, 5, 1, 32),    # 5: 4 then 1
    (2, 13, 6, 3, 24),    # 2 a head
    (1, 11, 3, 3, 160),   # head_dim past the 128-step leaf: two leaves, the tree
    (1, 130, 2, 1, 16),   # rows past 128 keys
]


@pytest.mark.parametrize("kind", ["plain", "huge_q", "huge_k", "inf_q", "edge"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_T47_attention_weights_match_the_oracle(shape, kind):
    B, L, nh, kvh, hd = shape
    q, kt = _inputs(sum(shape) + len(kind), B, L, nh, kvh, hd, kind)
    want = _oracle_probs(q, kt, B, L, nh, kvh, hd)
    for tasks in (1, 2, 3):
        got = np.full((B, nh, L, L), 7.0, F32)
        K.native().train_attn_probs((K._a(q), nh * hd, K._a(kt), K._a(got), B, L, nh, kvh,
                                     hd, tasks))
        same(got, want)
    if kind == "inf_q" and L > 1:
        # the inputs reach what the cut at the query must not touch: masked weights that
        # are not +0 (a kernel cutting every row there would store +0)
        masked = np.triu(np.ones((L, L), bool), 1)
        assert (u32(want[:, :, masked]) != 0).any()


@pytest.mark.parametrize("n", [1, 7, 8, 9, 64, 130, 300])
def test_T49_softmax_backward_matches_the_oracle(n):
    """Rows in groups of 8 side by side and one at a time (rows = 8 * 2 + 3); masked
    keys (w = +0), subnormal and -0 operands, a chain that overflows, NaN."""
    rng = np.random.default_rng(n)
    rows = 19
    w = np.abs(rng.standard_normal((rows, n))).astype(F32) * F32(0.1)
    w[0, n // 2:] = 0.0
    w[1, ::3] = F32(1e-40)
    dp = (rng.standard_normal((rows, n)) * 3).astype(F32)
    dp[2, ::2] = -0.0
    dp[3, ::5] = F32(-1e-39)
    dp[4, :] = F32(3e38)           # the chain overflows to inf: every ds of the row NaN / inf
    dp[5, n // 3] = np.nan
    dp[6, ::4] = F32(1e30)
    for hd in (64, 96):
        scale = F32(1) / np.sqrt(F32(hd))
        want = TO.softmax_backward(w, dp, scale)
        for tasks in (1, 2, 3):
            got = np.full_like(w, 7.0)
            K.native().train_softmax_bwd((K._a(w), K._a(dp), K._a(got), rows, n,
                                          K.f32_bits(scale), tasks))
            same(got, want)
    if n >= 8:
        # the order of the chain is seen on these rows (the oracle's own sabotage)
        desc = TO.softmax_backward(w, dp, F32(0.125), variant=("desc",))
        assert (u32(desc) != u32(TO.softmax_backward(w, dp, F32(0.125)))).any()

"""The GPU kernels of the training ops, run on the CPU: the very bodies the device kernels
call (mojo/train/gpu/threads.mojo), looped in the kernels' phases under IEEE mode (no
DAZ, as on a GPU: every flush is the body's own), give the bits of the CPU kernels
(mojo/train/cpu/, called through mojolearn._train.kernels or their native entries)
on random and edge inputs (contracts/ops/IDENTICAL_TRAIN_CONTRACT.md)."""
import numpy as np
import pytest

from bits import assert_same_bits
from mojolearn._core.loader import native
from mojolearn._core.threads import tasks
from mojolearn._train import kernels as K

SUB = np.float32(1e-40)  # a float32 subnormal


def a(x):
    return x.ctypes.data


def _edges(x, rng, big=1e15):
    """x (float32) with zeros of both signs, subnormals of both signs, the smallest
    subnormal and large values written at random places (kept finite)."""
    flat = x.reshape(-1)
    vals = np.array([0.0, -0.0, 1e-40, -1e-39, 1.4e-45, -1.4e-45, 3e-39, big, -big],
                    dtype=np.float32)
    k = min(flat.size, max(1, flat.size // 8))
    at = rng.choice(flat.size, size=k, replace=False)
    flat[at] = vals[rng.integers(0, vals.size, size=k)]
    return x


def _rand(rng, shape, scale=1.0, edges=True, big=1e15):
    x = (rng.standard_normal(shape) * scale).astype(np.float32)
    return _edges(x, rng, big) if edges and x.size else x


# ------------------------------------------------------------------ T-9 .. T-11, T-2
@pytest.mark.parametrize("rows,d", [(1, 1), (3, 17), (129, 40), (257, 7), (300, 33), (2, 300)])
def test_rms_norm_backward_body(rows, d):
    """T-9 T-10 T-11 (and T-2's fold for dw): dx by rows (both chains, rstd, dv) and
    dw = fold(k = rows) per column (leaves past 128 and 256 rows, the streamed tree),
    with zeros, -0, subnormals and large values in x, dy and w."""
    rng = np.random.default_rng(rows * 1000 + d)
    x = _rand(rng, (rows, d), big=1e18)
    dy = _rand(rng, (rows, d))
    w = _rand(rng, (d,), 0.3) + np.float32(1)
    w[0] = -0.0
    if rows > 2:
        x[1, 0] = 3e38  # the sum of squares overflows: rstd +0, inf * 0 in dx (NaN where both give NaN)
    for eps in (1e-5, 0.0):
        eb = K.f32_bits(eps)
        dx, dw = np.empty_like(x), np.empty((d,), np.float32)
        K.rms_norm_backward(dy, x, w, eb, dx, dw)
        gdx, gdw = np.full_like(x, 7.0), np.full((d,), 7.0, np.float32)
        native().gpu_ref_train_rms_norm_backward((a(dy), a(x), a(w), a(gdx), a(gdw), rows, d, eb))
        assert_same_bits(gdx, dx, f"dx eps={eps}")
        assert_same_bits(gdw, dw, f"dw eps={eps}")


@pytest.mark.parametrize("rows,n", [(0, 3), (1, 1), (128, 5), (129, 5), (256, 3), (257, 3),
                                    (1500, 2), (131073, 1)])
def test_fold_rows_body(rows, n):
    """T-2: fold(k = rows) per column: leaves of leaf_size(rows) (129 at 131,073 rows),
    each a chain of add from +0, then the balanced tree (odd carried)."""
    rng = np.random.default_rng(rows + n)
    x = _rand(rng, (rows, n), 1e3)
    leaf = max(128, -(-rows // 1024))
    x[::leaf, 0] = -SUB  # every leaf of column 0 starts from +0 with a negative subnormal: +0 read flushed
    want = K.fold_rows(x)
    got = np.full((n,), 7.0, np.float32)
    native().gpu_ref_train_fold_rows((a(x), a(got), rows, n))
    assert_same_bits(got, want, "fold_rows")


@pytest.mark.parametrize("rows,d", [(1, 1), (5, 130), (257, 9)])
def test_rmsnorm_terms_body(rows, d):
    """T-11's terms mul(dy, mul(x, rstd)) (the data-parallel parts, T-61), rstd by M-4."""
    rng = np.random.default_rng(rows * 7 + d)
    x = _rand(rng, (rows, d), big=1e18)
    dy = _rand(rng, (rows, d))
    eb = K.f32_bits(1e-6)
    want = np.empty_like(x)
    native().train_rmsnorm_terms((a(dy), a(x), a(want), rows, d, eb, tasks()))
    got = np.full_like(x, 7.0)
    native().gpu_ref_train_rmsnorm_terms((a(dy), a(x), a(got), rows, d, eb))
    assert_same_bits(got, want, "rmsnorm_terms")


# ------------------------------------------------------------------ T-13
@pytest.mark.parametrize("vocab,d,tokens", [(1, 1, 1), (11, 37, 300), (50, 3, 1000)])
def test_embedding_backward_body(vocab, d, tokens):
    """T-13: one chain per (vocab row, column) over the tokens in ascending order, from
    +0 or continued from the acc handed in (a second micro-batch); rows that never occur
    are left as they were (subnormals included), a lone -0 gives +0."""
    rng = np.random.default_rng(vocab + d + tokens)
    ids = rng.integers(0, max(1, vocab - 1), size=tokens).astype(np.int64)  # the last row never occurs
    if tokens > 1:
        ids[:4] = 0
    dy = _rand(rng, (tokens, d))
    dy[0, 0] = -0.0
    if vocab > 2 and tokens > 5:
        ids[ids == vocab - 2] = 0
        ids[5] = vocab - 2  # a row with one token: add(+0, -subnormal read as -0) = +0
        dy[5, :] = -SUB
    for start in ("zeros", "continued"):
        acc0 = np.zeros((vocab, d), np.float32) if start == "zeros" else _rand(rng, (vocab, d))
        acc0[-1, 0] = SUB  # an untouched row keeps its value
        want = K.embedding_backward_into(dy, ids, acc0.copy())
        got = acc0.copy()
        native().gpu_ref_train_embedding_backward((a(dy), a(ids), a(got), tokens, vocab, d))
        assert_same_bits(got, want, f"embedding backward ({start})")


# ------------------------------------------------------------------ T-14 .. T-18
@pytest.mark.parametrize("V", [1, 5, 129, 300, 1500])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_body(V, smoothing):
    """T-14 T-15 T-16 T-17 T-18: row losses (rowmax with -0 below +0, expf, den =
    fold(k = V), logf, neg; label smoothing's fold of the log-probabilities) and the
    gradient div(sub(div(e, den), t), D), ignored rows +0, with ties, -0, subnormal
    and large logits."""
    rng = np.random.default_rng(V * 10 + int(smoothing * 10))
    n = 9
    x = _rand(rng, (n, V), 4.0, big=80.0)
    x[1, :] = -0.0  # a row of negative zeros: m = -0
    x[2, : min(V, 3)] = 5.0  # ties at the maximum
    if V > 1:
        x[3, 0], x[3, 1] = SUB, -SUB
        x[5, 0], x[5, -1] = 3e38, -3e38  # sub(x, m) overflows to -inf: e = +0
    t = rng.integers(0, V, size=n).astype(np.int64)
    t[4] = -100  # ignored
    count = int((t != -100).sum())
    d_bits = K.f32_bits(count)
    sb = K.f32_bits(smoothing)
    rows, grad = np.empty(n, np.float32), np.empty((n, V), np.float32)
    K.ce_rows(x, t, -100, sb, d_bits, rows, grad)
    grows, ggrad = np.full(n, 7.0, np.float32), np.full((n, V), 7.0, np.float32)
    native().gpu_ref_train_ce_rows((a(x), a(t), a(grows), a(ggrad), n, V, -100, sb, d_bits))
    assert_same_bits(grows, rows, "ce rows")
    assert_same_bits(ggrad, grad, "ce grad")
    only = np.full(n, 7.0, np.float32)
    native().gpu_ref_train_ce_rows((a(x), a(t), a(only), 0, n, V, -100, sb, d_bits))
    assert_same_bits(only, rows, "ce rows without a gradient")


# ------------------------------------------------------------------ T-23 .. T-25
@pytest.mark.parametrize("max_norm", [0.5, 1e30])
def test_clip_body(max_norm):
    """T-23 T-24 T-25: per-tensor dot(k = size) of squares (leaves past 128 and 256,
    1022 leaves of 137 at 140,000), the total's dot over the norms, the coefficient
    (used when < 1, else exactly 1) and the rescale of every element."""
    rng = np.random.default_rng(int(max_norm) % 97)
    sizes = [1, 128, 129, 257, 300, 5000, 140000]
    grads = [_rand(rng, (s,), 1e-2, big=1e3) for s in sizes]
    grads.append(np.zeros((0,), np.float32))
    mb = K.f32_bits(max_norm)
    mine = [g.copy() for g in grads]
    norms, coef = K.clip(mine, mb)
    gg = [g.copy() for g in grads]
    addrs = np.array([a(g) for g in gg], np.int64)
    sz = np.array([g.size for g in gg], np.int64)
    gnorms = np.full(len(gg) + 1, 7.0, np.float32)
    gcoef = native().gpu_ref_train_clip((a(addrs), a(sz), len(gg), a(gnorms), mb))
    assert gcoef == coef, (hex(gcoef), hex(coef))
    assert_same_bits(gnorms, norms, "norms and total")
    for j, (x, y) in enumerate(zip(gg, mine)):
        assert_same_bits(x, y, f"rescaled tensor {j}")


def test_clip_body_nonfinite_total():
    """T-23 T-41: a total that overflows to inf: -1 and nothing rescaled, as the CPU kernel."""
    rng = np.random.default_rng(5)
    grads = [_rand(rng, (300,)), np.full((200,), 1e30, np.float32)]
    mine = [g.copy() for g in grads]
    norms, coef = K.clip(mine, K.f32_bits(1.0))
    gg = [g.copy() for g in grads]
    addrs = np.array([a(g) for g in gg], np.int64)
    sz = np.array([g.size for g in gg], np.int64)
    gnorms = np.full(3, 7.0, np.float32)
    assert native().gpu_ref_train_clip((a(addrs), a(sz), 2, a(gnorms), K.f32_bits(1.0))) == coef == -1
    assert_same_bits(gnorms, norms, "norms")
    for x, y in zip(gg, grads):
        assert_same_bits(x, y, "untouched")


# ------------------------------------------------------------------ T-26
@pytest.mark.parametrize("count", [1, 2, 4, 8])
def test_tree_sum_body(count):
    """T-26: the balanced pairwise tree over the micro-batches' arrays in ascending
    order, each read flushed (count 1 gives ftz(g0))."""
    rng = np.random.default_rng(count)
    arrays = [_rand(rng, (33, 31), 1e3) for _ in range(count)]
    want = K.tree_sum(arrays)
    out = np.full_like(arrays[0], 7.0)
    addrs = np.array([a(x) for x in arrays], np.int64)
    native().gpu_ref_train_tree_sum((a(addrs), count, a(out), out.size))
    assert_same_bits(out, want, "tree_sum")


# ------------------------------------------------------------------ T-29 .. T-34
def _tensors(rng, sizes, scale):
    return [_rand(rng, (s,), scale, big=1e3) for s in sizes]


@pytest.mark.parametrize("decoupled", [False, True])
@pytest.mark.parametrize("wd,maximize", [(0.0, False), (0.01, False), (0.1, True)])
def test_adam_body(decoupled, wd, maximize):
    """T-29 T-30 T-31 T-32 T-34 (T-39's flat state): three Adam / AdamW steps (the
    scalars bc1, bc2, step, rt, c1, c2, decay of each t, then every element), weight
    decay coupled or decoupled, maximize, with zeros, -0, subnormals in p, g, m, v."""
    rng = np.random.default_rng(int(wd * 100) + 2 * decoupled + maximize)
    sizes = [1, 37, 300]
    p0 = _tensors(rng, sizes, 1.0)
    gs = [_tensors(rng, sizes, 1e-2) for _ in range(3)]
    gs[1][2][:3] = [1e20, -1e20, 3e38]  # mul(g, g) overflows: v = inf, den = inf, q = 0
    ntot = sum(sizes)
    m0 = _rand(rng, (ntot,), 1e-3)
    v0 = np.abs(_rand(rng, (ntot,), 1e-4))
    bits = [K.f32_bits(x) for x in (1e-3, 0.9, 0.999, 1e-8, wd)]
    pc, mc, vc = [p.copy() for p in p0], m0.copy(), v0.copy()
    pg, mg, vg = [p.copy() for p in p0], m0.copy(), v0.copy()
    sz = np.array(sizes, np.int64)
    for step in range(1, 4):
        K.adam_step(pc, gs[step - 1], mc, vc, step, *bits, decoupled, maximize)
        pa = np.array([a(x) for x in pg], np.int64)
        ga = np.array([a(x) for x in gs[step - 1]], np.int64)
        native().gpu_ref_train_adam((a(pa), a(ga), a(sz), len(sizes), a(mg), a(vg), step, *bits,
                                     int(decoupled), int(maximize)))
        for j in range(len(sizes)):
            assert_same_bits(pg[j], pc[j], f"p[{j}] after step {step}")
        assert_same_bits(mg, mc, f"m after step {step}")
        assert_same_bits(vg, vc, f"v after step {step}")


@pytest.mark.parametrize("momentum,dampening,nesterov,wd,maximize", [
    (0.0, 0.0, False, 0.0, False), (0.9, 0.0, False, 0.0, False), (0.9, 0.1, False, 0.01, True),
    (0.9, 0.0, True, 0.01, False),
])
def test_sgd_body(momentum, dampening, nesterov, wd, maximize):
    """T-33 T-34: three SGD steps (the first momentum step b = g by the tensor's flag,
    then b = fma(sub(1, dampening), g, mul(mu, b)), nesterov, weight decay, maximize)."""
    rng = np.random.default_rng(int(momentum * 10) + int(wd * 100) + nesterov)
    sizes = [3, 129, 40]
    p0 = _tensors(rng, sizes, 1.0)
    gs = [_tensors(rng, sizes, 1e-2) for _ in range(3)]
    bits = [K.f32_bits(x) for x in (1e-2, momentum, dampening, wd)]
    pc, pg = [p.copy() for p in p0], [p.copy() for p in p0]
    bc, bg = np.zeros(sum(sizes), np.float32), np.zeros(sum(sizes), np.float32)
    flags = np.array([0, 0, 1], np.int32)  # the last tensor continues a momentum buffer
    bc[-40:] = bg[-40:] = _rand(rng, (40,), 1e-2)
    sz = np.array(sizes, np.int64)
    for step in range(3):
        K.sgd_step(pc, gs[step], bc, flags, *bits, nesterov, maximize)
        pa = np.array([a(x) for x in pg], np.int64)
        ga = np.array([a(x) for x in gs[step]], np.int64)
        native().gpu_ref_train_sgd((a(pa), a(ga), a(sz), len(sizes), a(bg), a(flags), *bits,
                                    int(nesterov), int(maximize)))
        for j in range(len(sizes)):
            assert_same_bits(pg[j], pc[j], f"p[{j}] after step {step}")
        assert_same_bits(bg, bc, f"momentum after step {step}")
        flags[:] = 1


# ------------------------------------------------------------------ T-47 .. T-52
@pytest.mark.parametrize("n", [1, 130, 300])
def test_softmax_backward_body(n):
    """T-49: c = chain of fma(w_j, dP_j, c) over all n keys, dS_j = mul(mul(w_j,
    sub(dP_j, c)), scale); masked keys (w = +0) keep sub(dP_j, c)'s sign."""
    rng = np.random.default_rng(n)
    rows = 6
    w = np.abs(_rand(rng, (rows, n), 0.1, big=1.0))
    w[0, n // 2:] = 0.0  # masked keys
    dp = _rand(rng, (rows, n), 1.0, big=1e6)
    sb = K.f32_bits(np.float32(1) / np.sqrt(np.float32(64)))
    want = np.empty_like(w)
    native().train_softmax_bwd((a(w), a(dp), a(want), rows, n, sb, tasks()))
    got = np.full_like(w, 7.0)
    native().gpu_ref_train_softmax_bwd((a(w), a(dp), a(got), rows, n, sb))
    assert_same_bits(got, want, "softmax backward")


@pytest.mark.parametrize("ff", [1, 17, 300])
def test_silu_mul_backward_body(ff):
    """T-52 (arith.elementary.silu_mul_bwd): dg = mul(mul(dp, u), ds), du = mul(dp, s),
    with saturating gates (+-100), zeros, -0 and subnormals."""
    rng = np.random.default_rng(ff)
    rows = 7
    gu = _rand(rng, (rows, 2 * ff), 4.0, big=100.0)
    dp = _rand(rng, (rows, ff))
    want = np.empty((rows, 2 * ff), np.float32)
    native().train_silu_mul_bwd((a(gu), 2 * ff, a(dp), ff, a(want), rows, ff, tasks()))
    got = np.full_like(want, 7.0)
    native().gpu_ref_train_silu_mul_bwd((a(gu), 2 * ff, a(dp), ff, a(got), rows, ff))
    assert_same_bits(got, want, "silu_mul backward")


@pytest.mark.parametrize("B,L,nh,kvh,hd", [(1, 1, 1, 1, 8), (2, 5, 4, 2, 32), (1, 130, 2, 1, 16),
                                           (1, 9, 3, 3, 160)])
def test_attention_probs_body(B, L, nh, kvh, hd):
    """T-47: the attention weights of every (batch row, head, query) over all L keys by
    the forward's own GPU body (M-11 scores by fp32.v1 over head_dim: two leaves at 160,
    M-6 scale, M-12 mask, M-13 / M-14 softmax), GQA, against the CPU kernel."""
    rng = np.random.default_rng(B * 100 + L + hd)
    q = _rand(rng, (B * L, nh * hd), 1.0, big=30.0)
    kt = _rand(rng, (B, kvh, hd, L), 1.0, big=30.0)
    want = np.empty((B, nh, L, L), np.float32)
    native().train_attn_probs((a(q), nh * hd, a(kt), a(want), B, L, nh, kvh, hd, tasks()))
    got = np.full_like(want, 7.0)
    native().gpu_ref_train_attn_probs((a(q), nh * hd, a(kt), a(got), B, L, nh, kvh, hd))
    assert_same_bits(got, want, "attention weights")


@pytest.mark.parametrize("n", [0, 1, 129, 1500, 140000])
def test_fold_div_body(n):
    """T-17 T-58: div(fold(k = n)(x), d), the loss total over the rows and its mean."""
    rng = np.random.default_rng(n)
    x = _rand(rng, (n,), 3.0)
    for d in (1.0, 3.0, float(max(n, 1))):
        db = K.f32_bits(d)
        assert native().gpu_ref_train_fold_div((a(x), n, db)) == native().train_fold_div((a(x), n, db))


# ------------------------------------------------------------------ the comparison can fail
def _fold_np(x, tree):
    """fold(k) of a float32 vector in numpy float32 (no subnormals in x): leaves of 128
    (k <= 131072), chains from +0; the leaves then by the balanced tree (tree=True) or by
    one chain from the first leaf (the sabotaged order)."""
    leaves = []
    for s in range(0, x.size, 128):
        acc = np.float32(0)
        for v in x[s:s + 128]:
            acc = np.float32(acc + v)
        leaves.append(acc)
    if not tree:
        acc = np.float32(0)
        for v in leaves:
            acc = np.float32(acc + v)
        return acc
    while len(leaves) > 1:
        nxt = [np.float32(leaves[i] + leaves[i + 1]) for i in range(0, len(leaves) - 1, 2)]
        if len(leaves) % 2:
            nxt.append(leaves[-1])
        leaves = nxt
    return leaves[0]


def test_sabotage_is_seen():
    """T-2: the bit comparison can fail. A numpy fold in the contract's order equals the
    GPU body's bits; the same leaves summed by one chain instead of the tree (a
    deliberately different order) differ, and assert_same_bits says so; so does a
    body output with one bit flipped."""
    rng = np.random.default_rng(42)
    x = (rng.standard_normal((1500, 1)) * 10.0 ** rng.integers(-3, 5, size=(1500, 1))).astype(np.float32)
    got = np.empty(1, np.float32)
    native().gpu_ref_train_fold_rows((a(x), a(got), 1500, 1))
    good = np.array([_fold_np(x[:, 0], tree=True)], np.float32)
    bad = np.array([_fold_np(x[:, 0], tree=False)], np.float32)
    assert_same_bits(got, good, "contract order in numpy")
    assert good.view(np.uint32)[0] != bad.view(np.uint32)[0], "the sabotaged order must differ here"
    with pytest.raises(AssertionError):
        assert_same_bits(got, bad, "sabotaged order")
    flipped = got.copy()
    flipped.view(np.uint32)[0] ^= 1
    with pytest.raises(AssertionError):
        assert_same_bits(flipped, got, "one bit flipped")

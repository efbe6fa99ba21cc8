"""The k-split of a product (contract rules 6.7 and L-8): the parts of ranges of k and
their fold give the one-call bits; the parts' values are the tree's nodes."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import oracle
from mojolearn import linalg, modes

RNG = np.random.default_rng(20261203)


def _f32(shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _bits(x):
    return np.ascontiguousarray(np.asarray(x)).view(np.uint32)


def _same(x, y):
    """Equal bits, NaN positions equal (payloads are not promised, 6.6)."""
    x, y = np.asarray(x), np.asarray(y)
    assert x.shape == y.shape
    nx, ny = np.isnan(x), np.isnan(y)
    assert np.array_equal(nx, ny)
    return np.array_equal(_bits(np.where(nx, 0, x).astype(np.float32)),
                          _bits(np.where(ny, 0, y).astype(np.float32)))


def _splits(nunits, parts):
    """Every way of cutting nunits units into `parts` non-empty runs (cut points)."""
    for cuts in itertools.combinations(range(1, nunits), parts - 1):
        yield (0,) + cuts + (nunits,)


def _check_k(a, b, k, parts_list, sample=None, rng=None):
    """Every split of k on leaf boundaries into each count of parts (or `sample` of them
    at random): the fold equals the unsplit matmul. Parts of every leaf range are made
    once and reused. Returns the number of splits checked."""
    full = np.asarray(linalg.matmul(a, b))
    L = linalg.leaf_size(k)
    n = -(-k // L)
    cache = {}

    def part(lo, hi):
        if (lo, hi) not in cache:
            s, e = lo * L, min(hi * L, k)
            cache[(lo, hi)] = linalg.matmul_part(a[:, s:e], b[s:e], k=k, k_start=s)
        return cache[(lo, hi)]

    checked = 0
    for p in parts_list:
        if p > n:
            continue
        cuts = list(_splits(n, p))
        if sample is not None and len(cuts) > sample:
            idx = rng.choice(len(cuts), sample, replace=False)
            cuts = [cuts[i] for i in idx]
        for c in cuts:
            pieces = [part(c[i], c[i + 1]) for i in range(p)]
            if rng is not None:
                pieces = [pieces[i] for i in rng.permutation(p)]
            got = np.asarray(linalg.fold_parts(pieces))
            assert _same(got, full), (k, c)
            checked += 1
    return checked


@pytest.mark.parametrize("k", [1, 2, 127, 128, 129, 255, 256, 257, 384, 640, 700, 1025,
                               1537, 2048, 2049, 3000])
def test_every_split_of_chosen_k(k):
    """6.7: every split of k on leaf boundaries into 2, 3 and 4 parts (the parts in a
    shuffled order) folds to the bits of the unsplit matmul (6.4's tree)."""
    rng = np.random.default_rng(k)
    a, b = _f32((3, k)), _f32((k, 5))
    _check_k(a, b, k, (1, 2, 3, 4), rng=rng)


@pytest.mark.slow
def test_every_k_to_3000():
    """6.7: every k from 1 to 3000, each split 2, 3 and 4 ways at random leaf boundaries;
    and for every leaf count 1..24 (k up to 3000, a whole and a short last leaf) EVERY
    split into 2, 3 and 4 parts: each folds to the bits of the unsplit matmul."""
    rng = np.random.default_rng(3000)
    total = 0
    for k in range(1, 3001):
        a, b = _f32((2, k)), _f32((k, 3))
        total += _check_k(a, b, k, (2, 3, 4), sample=1, rng=rng)
    for nleaves in range(1, 25):
        for k in {nleaves * 128 - 77, nleaves * 128} - {51}:
            if k > 3000:
                continue
            a, b = _f32((2, k)), _f32((k, 2))
            total += _check_k(a, b, k, (2, 3, 4), rng=rng)
    assert total > 12000


def test_part_values_are_the_tree_nodes():
    """6.7: a part's values are the nodes of the leaf tree over the whole k (the
    independent oracle's leaf partials folded over each node's leaves), left to right,
    the largest node that fits at each point."""
    k = 9 * 128 + 17  # 10 leaves
    a, b = _f32((4, k)), _f32((k, 6))
    leaves = oracle._leaf_partials(oracle.daz(a), oracle.daz(b))  # (m, n, 10)
    for s, e, want in [(0, k, [(0, 10)]), (128, 7 * 128, [(1, 2), (2, 4), (4, 6), (6, 7)]),
                       (3 * 128, k, [(3, 4), (4, 8), (8, 10)]), (8 * 128, 9 * 128, [(8, 9)])]:
        p = linalg.matmul_part(a[:, s:e], b[s:e], k=k, k_start=s)
        assert list(p.nodes) == want
        vals = np.asarray(p.values)
        for i, (lo, hi) in enumerate(want):
            assert _same(vals[i], oracle._tree_combine(leaves[:, :, lo:hi]))


@pytest.mark.parametrize("layout", ["NN", "NT", "TN"])
def test_layouts(layout):
    """6.7 with 6.5: NN, NT and TN parts (strided columns copied, rows read in place)
    fold to the bits of the unsplit call in that layout."""
    k, m, n = 1000, 5, 7
    a, b = _f32((m, k)), _f32((k, n))
    full = np.asarray(linalg.matmul(a, b))
    parts = []
    for s, e in linalg.k_split(k, 3):
        if layout == "NN":
            parts.append(linalg.matmul_part(a[:, s:e], b[s:e], k=k, k_start=s))
        elif layout == "NT":
            bt = np.ascontiguousarray(b.T)
            parts.append(linalg.matmul_part(a[:, s:e], bt[:, s:e], k=k, k_start=s,
                                            transpose_b=True))
        else:
            at = np.ascontiguousarray(a.T)
            parts.append(linalg.matmul_part(at[s:e], b[s:e], k=k, k_start=s, transpose_a=True))
    assert _same(linalg.fold_parts(parts), full)


def test_long_leaves_and_modes():
    """6.7 with 6.2: k = 131073 (leaves of 129 k-steps) and k = 262145 split 3 ways; and
    under numeric_mode deterministic (its own leaf, linalg.leaf_size) the parts fold to
    that mode's bits; parts of another leaf size are refused by fold_parts."""
    for k in (131073, 262145):
        a, b = _f32((1, k)), _f32((k, 2))
        assert linalg.leaf_size(k) == -(-k // 1024)
        parts = [linalg.matmul_part(a[:, s:e], b[s:e], k=k, k_start=s)
                 for s, e in linalg.k_split(k, 3)]
        assert _same(linalg.fold_parts(parts), linalg.matmul(a, b))
    k = 5000
    a, b = _f32((2, k)), _f32((k, 3))
    ident = linalg.matmul_part(a[:, :1024], b[:1024], k=k, k_start=0)
    with modes.using("deterministic"):
        L = linalg.leaf_size(k)
        assert L > 128
        parts = [linalg.matmul_part(a[:, s:e], b[s:e], k=k, k_start=s)
                 for s, e in linalg.k_split(k, 4)]
        want = np.asarray(linalg.matmul(a, b))
    assert _same(linalg.fold_parts(parts), want)
    with pytest.raises(ValueError, match="leaf"):
        linalg.fold_parts([ident] + parts[1:])


def test_edge_values():
    """6.7 with 6.3 and 6.6: node values that are subnormal before their flush, signed
    zeros, inf and NaN fold to the unsplit bits (NaN positions; payloads not promised)."""
    k = 6 * 128
    m, n = 6, 5
    a = _f32((m, k))
    b = _f32((k, n))
    a[0] *= np.float32(1e-20)          # products near 2**-126: subnormal sums flushed
    b[:, 0] *= np.float32(1e-19)
    a[1] = -np.float32(1e-25)          # row 1 x column 0: products below the subnormals,
    b[:128, 0] = np.abs(b[:128, 0])    # chains of signed zeros (-0 in leaf 0, both after)
    a[2, 5] = np.inf                   # inf in one leaf
    a[3, 300] = np.nan                 # NaN in another
    a[4, :128] = np.float32(3e38)      # overflow in leaf 0, -inf elsewhere
    a[4, 600] = -np.float32(3e38)
    b[:, 1] = np.abs(b[:, 1]) + 1
    a[5] = np.float32(1e-39)           # subnormal inputs (read as zero, 6.1)
    full = np.asarray(linalg.matmul(a, b))
    for p in (2, 3, 4, 6):
        parts = [linalg.matmul_part(a[:, s:e], b[s:e], k=k, k_start=s)
                 for s, e in linalg.k_split(k, p)]
        assert _same(linalg.fold_parts(parts), full)
    assert full[1, 0] == 0


def test_part_rebuilt_from_its_values():
    """6.7 and L-8: a part rebuilt from the values that travelled (PartialProduct(profile,
    values, k=, k_start=, k_stop=, ...)) folds like the original; a rebuilt part owns
    its values (the receive buffer may be reused)."""
    k = 900
    a, b = _f32((3, k)), _f32((k, 4))
    parts = [linalg.matmul_part(a[:, s:e], b[s:e], k=k, k_start=s)
             for s, e in linalg.k_split(k, 3)]
    again = []
    for p in parts:
        buf = np.array(np.asarray(p.values))
        again.append(linalg.PartialProduct("fp32.v1", buf, k=k, k_start=p.k_start,
                                           k_stop=p.k_stop, leaf=p.leaf))
        buf[...] = np.nan
    assert _same(linalg.fold_parts(again), linalg.matmul(a, b))
    bq = np.ascontiguousarray(b.T)
    qa, qb = linalg.quantize_int15(a), linalg.quantize_int15(bq)
    ip = linalg.matmul_int15_part(qa, qb, k=k, k_start=0)
    r = linalg.PartialProduct("int15i64.v1", np.asarray(ip.values), k=k, k_start=0, k_stop=k,
                              a_exps=np.asarray(qa[2]), b_exps=np.asarray(qb[2]))
    assert _same(linalg.fold_parts([r]), linalg.matmul_int15(a, bq))


def test_refusals():
    """6.7, L-8: ranges off the leaf boundaries, parts that overlap, leave a gap or stop
    short of k, mixed profiles, shapes or k, a float32 operand to an integer part, k
    past L-7 / W-4, and rebuilt parts whose values do not match are refused by name."""
    k = 700
    a, b = _f32((2, k)), _f32((k, 3))
    with pytest.raises(ValueError, match=r"leaf boundaries.*6\.7"):
        linalg.matmul_part(a[:, 100:300], b[100:300], k=k, k_start=100)
    with pytest.raises(ValueError, match=r"leaf boundaries"):
        linalg.matmul_part(a[:, :200], b[:200], k=k, k_start=0)
    with pytest.raises(ValueError, match="ends at or before"):
        linalg.matmul_part(a, b, k=600, k_start=0)
    p0 = linalg.matmul_part(a[:, :256], b[:256], k=k, k_start=0)
    p1 = linalg.matmul_part(a[:, 256:512], b[256:512], k=k, k_start=256)
    p2 = linalg.matmul_part(a[:, 128:], b[128:], k=k, k_start=128)
    with pytest.raises(ValueError, match="an overlap"):
        linalg.fold_parts([p0, p2])
    with pytest.raises(ValueError, match=r"cover \[0, 512\) of k = 700"):
        linalg.fold_parts([p0, p1])
    with pytest.raises(ValueError, match="a gap"):
        linalg.fold_parts([p0, linalg.matmul_part(a[:, 512:], b[512:], k=k, k_start=512)])
    with pytest.raises(ValueError, match="empty"):
        linalg.fold_parts([])
    with pytest.raises(TypeError, match="list or tuple"):
        linalg.fold_parts(p0)
    other = linalg.matmul_part(_f32((3, 444)), _f32((444, 3)), k=k, k_start=256)
    with pytest.raises(ValueError, match="has m 3 but parts"):
        linalg.fold_parts([p0, other])
    with pytest.raises(TypeError, match="quantized tuple"):
        linalg.matmul_int8_part(a, a, k=k, k_start=0)
    q = linalg.quantize_int8(a)
    with pytest.raises(ValueError, match="L-7"):
        linalg.matmul_int8_part(q, q, k=131073, k_start=0)
    q15 = linalg.quantize_int15(a)
    with pytest.raises(ValueError, match="W-4"):
        linalg.matmul_int15_part(q15, q15, k=65537, k_start=0)
    iq = linalg.matmul_int8_part(q, q, k=k, k_start=0)
    with pytest.raises(ValueError, match="profile"):
        linalg.fold_parts([iq, linalg.matmul_part(a, b, k=k, k_start=0)])
    with pytest.raises(ValueError, match="nodes"):
        linalg.PartialProduct("fp32.v1", np.zeros((1, 2, 3), np.float32), k=k, k_start=0,
                              k_stop=384, leaf=linalg.leaf_size(k))
    # issue 43 item 11: without leaf= a rebuilt part took the receiving process's mode
    with pytest.raises(ValueError, match="needs leaf=.*not guessed"):
        linalg.PartialProduct("fp32.v1", np.zeros((1, 2, 3), np.float32), k=k, k_start=0,
                              k_stop=k)
    with pytest.raises(ValueError, match="not one of"):
        linalg.PartialProduct("fp64", np.zeros((1, 2, 3), np.float32), k=k, k_start=0, k_stop=k)
    with pytest.raises(ValueError, match="at most 1 parts"):
        linalg.k_split(128, 2)


def _edge_rows(m, k, rng):
    x = (rng.standard_normal((m, k)) * 2.0 ** rng.integers(-30, 30, (m, 1))).astype(np.float32)
    x[0] = 0.0
    x[1, ::7] = np.nan
    x[2, min(3, k - 1)] = np.inf
    x[3] = np.float32(1e-40)           # subnormals only: e = 0
    x[3, k - 1] = np.float32(3e-38)    # one normal value in the last piece
    x[4] = np.float32(2.0 ** -125)     # tiny rows: codes saturate (pow2f(-e) = inf)
    return x


@pytest.mark.parametrize("profile", ["int8i32.v1", "int15i64.v1"])
def test_integer_any_split(profile):
    """L-8: the integer parts of ANY split of k (off leaf boundaries too, up to one step
    a part), with each piece quantized with the whole rows' absmax, fold to the bits of
    the unsplit product (and of the oracle); the pieces' codes are the whole rows'
    codes; edge rows (zeros, NaN, inf, subnormals, tiny) and edge codes included."""
    rng = np.random.default_rng(8 if profile.startswith("int8") else 15)
    int8 = profile.startswith("int8")
    q = linalg.quantize_int8 if int8 else linalg.quantize_int15
    mm = linalg.matmul_int8 if int8 else linalg.matmul_int15
    part = linalg.matmul_int8_part if int8 else linalg.matmul_int15_part
    for k in (1, 5, 131, 1000):
        a, b = _edge_rows(6, k, rng), _edge_rows(5, k, rng)
        full = np.asarray(mm(a, b))
        ref = (oracle.gemm_int8_f32(a, b) if int8 else oracle.gemm_int15_f32(a, b))
        assert _same(full, ref)
        qa, qb = q(a), q(b)
        for p in sorted({min(c, k) for c in (1, 2, 3, 7)} | ({k} if k <= 5 else {4})):
            cuts = np.sort(rng.choice(np.arange(1, k), p - 1, replace=False)) if p > 1 else []
            bounds = [0, *[int(c) for c in cuts], k]
            ranges = list(zip(bounds[:-1], bounds[1:]))
            am = np.max([np.asarray(linalg.row_absmax(a[:, s:e])) for s, e in ranges], axis=0)
            bm = np.max([np.asarray(linalg.row_absmax(b[:, s:e])) for s, e in ranges], axis=0)
            parts = []
            for s, e in ranges:
                pa, pb = q(a[:, s:e], absmax=am), q(b[:, s:e], absmax=bm)
                for x, y in zip(pa[:-1], qa[:-1]):
                    assert np.array_equal(np.asarray(x), np.asarray(y)[:, s:e])
                assert np.array_equal(np.asarray(pa[-1]), np.asarray(qa[-1]))
                parts.append(part(pa, pb, k=k, k_start=s))
            assert _same(linalg.fold_parts(parts[::-1]), full), (k, ranges)


def test_integer_sums_exact_at_the_limits():
    """L-8 with L-7 / W-4: the parts' int64 sums stay exact for codes of -128 / +-127 and
    +-16383 at k = 131072 (int8) and 65536 (int15) split in 3, against the unsplit
    product; mismatched exponents across parts are refused."""
    k = 131072
    codes = np.full((2, k), -128, np.int8)
    codes[1] = 127
    e = np.array([0, -5], np.int32)
    full = np.asarray(linalg.matmul_int8((codes, e), (codes, e)))
    parts = [linalg.matmul_int8_part((codes[:, s:t], e), (codes[:, s:t], e), k=k, k_start=s)
             for s, t in linalg.k_split(k, 3, profile="int8i32.v1")]
    assert np.array_equal(np.asarray(parts[0].values)[0, 0], (k // 3 + 1) * 16384)
    assert _same(linalg.fold_parts(parts), full)
    k = 65536
    x = np.full((2, k), -16383.0, np.float32)
    x[1] = 16383.0
    qx = linalg.quantize_int15(x)
    full = np.asarray(linalg.matmul_int15(qx, qx))
    parts = [linalg.matmul_int15_part(tuple(np.asarray(p)[:, s:t] for p in qx[:2]) + (qx[2],),
                                      tuple(np.asarray(p)[:, s:t] for p in qx[:2]) + (qx[2],),
                                      k=k, k_start=s)
             for s, t in linalg.k_split(k, 3, profile="int15i64.v1")]
    assert _same(linalg.fold_parts(parts), full)
    t0 = parts[1].k_start
    bad = linalg.matmul_int15_part(tuple(np.asarray(p)[:, :t0] for p in qx[:2])
                                   + (np.asarray(qx[2]) + 1,),
                                   tuple(np.asarray(p)[:, :t0] for p in qx[:2]) + (qx[2],),
                                   k=k, k_start=0)
    with pytest.raises(ValueError, match="exponents"):
        linalg.fold_parts([bad] + parts[1:])


def test_row_absmax_and_absmax_argument():
    """L-8 with L-3: row_absmax is the quantizers' absmax (NaN and subnormals do not count,
    inf does, 0 for a row with none); absmax= is read as one more element of the row:
    a NaN or subnormal absmax changes nothing, a larger one sets the exponent."""
    x = np.array([[1.0, -3.0, np.nan], [1e-40, 0.0, -0.0], [np.inf, 1.0, 2.0]], np.float32)
    r = np.asarray(linalg.row_absmax(x))
    assert _bits(r).tolist() == _bits(np.array([3.0, 0.0, np.inf], np.float32)).tolist()
    base = linalg.quantize_int8(x)
    same = linalg.quantize_int8(x, absmax=np.array([np.nan, 1e-41, 0.0], np.float32))
    for u, v in zip(base, same):
        assert np.array_equal(np.asarray(u), np.asarray(v))
    big = linalg.quantize_int8(x[:1], absmax=np.array([100.0], np.float32))
    want = oracle.quantize_int8(np.array([[1.0, -3.0, np.nan, 100.0]], np.float32))
    assert np.array_equal(np.asarray(big[0]), want[0][:, :3])
    assert np.array_equal(np.asarray(big[1]), want[1])
    with pytest.raises(ValueError, match="absmax has length"):
        linalg.quantize_int15(x, absmax=np.zeros(2, np.float32))
    with pytest.raises(TypeError, match="absmax must be float32"):
        linalg.quantize_int15(x, absmax=np.zeros(3, np.float64))

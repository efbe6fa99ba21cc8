"""int8i32.v1 (linalg.matmul_int8) and int15i64.v1 (linalg.matmul_int15) against
the oracle.

Both compute a @ b.T with a (m,k), b (n,k); each operand is float32 (quantized
inside, L-3/L-4 or W-1/W-2) or its quantized tuple. Output (L-5, W-3):
ftz(f32(S) * pow2f(ea[i] + eb[j])), S the exact integer sum. Domains: k <= 131072
(L-7) and k <= 65536 (W-4). Bits are compared exactly; where NaN can appear
(inf codes scale, 0 * inf) only "NaN in both" is required.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from mojolearn import linalg
from tests import oracle as O
from tests.bits import assert_same_bits, u32

F32 = np.float32
RNG = np.random.default_rng(815)


def o_int8(a, b):
    with np.errstate(all="ignore"):
        return O.gemm_int8_f32(np.ascontiguousarray(a), np.ascontiguousarray(b))


def o_int15(a, b):
    with np.errstate(all="ignore"):
        return O.gemm_int15_f32(np.ascontiguousarray(a), np.ascontiguousarray(b))


PROFILES = {
    "int8": (linalg.matmul_int8, o_int8, linalg.quantize_int8),
    "int15": (linalg.matmul_int15, o_int15, linalg.quantize_int15),
}


def edge_rows(k, rng=RNG):
    """Rows that exercise the quantizers: zeros, -0.0, all NaN, inf, subnormal only,
    tiny (absmax < 2**-121), huge, ties, NaN mixed in, plain normals."""
    with np.errstate(all="ignore"):
        rows = [
            np.zeros(k),
            np.where(np.arange(k) % 2 == 0, -0.0, 0.0),
            np.full(k, np.nan),
            np.concatenate([[np.inf], rng.standard_normal(k - 1)]),
            np.concatenate([rng.standard_normal(k - 1), [-np.inf]]),
            rng.standard_normal(k) * 2.0 ** -140,          # subnormal only
            rng.standard_normal(k) * 2.0 ** -124,          # tiny: codes saturate
            rng.standard_normal(k) * 2.0 ** -110,
            rng.standard_normal(k) * 1e37,
            np.full(k, 3.4e38),
            np.concatenate([[64.0], (np.arange(k - 1) % 7 - 3) * 0.5]),  # ties
            np.concatenate([[8192.0], (np.arange(k - 1) % 7 - 3) * 0.5]),  # int15 ties
            np.concatenate([[np.nan], rng.standard_normal(k - 1)]),
            rng.standard_normal(k),
            rng.standard_normal(k) * 2.0 ** rng.integers(-20, 20, size=k),
        ]
    return np.array(rows, dtype=F32)


# ---------------------------------------------------------------- vs the oracle
@pytest.mark.parametrize("profile", ["int8", "int15"])
@pytest.mark.parametrize("k", [1, 3, 4, 5, 127, 129, 1000])
def test_edge_rows_match_oracle(profile, k):
    """L-3 L-4 L-5 / W-1 W-2 W-3: edge rows (zeros, -0.0, NaN, inf, subnormal-only,
    tiny, huge, ties) times edge and random rows, float32 operands."""
    fn, ora, _ = PROFILES[profile]
    a = edge_rows(k)
    b = np.concatenate([edge_rows(k)[::-1], RNG.standard_normal((5, k)).astype(F32)])
    assert_same_bits(fn(a, b), ora(a, b), f"{profile} k={k}")


@pytest.mark.parametrize("profile", ["int8", "int15"])
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (6, 7, 32), (7, 33, 33), (13, 1000, 37),
                                   (61, 79, 73), (145, 67, 300), (49, 300, 65)], ids=str)
def test_random_shapes_match_oracle(profile, m, k, n):
    """L-5 / W-3: random rows with a per-row scale, odd shapes (tile edges of 6 x 32)."""
    fn, ora, _ = PROFILES[profile]
    a = (RNG.standard_normal((m, k)) * 2.0 ** RNG.integers(-30, 30, size=(m, 1))).astype(F32)
    b = (RNG.standard_normal((n, k)) * 2.0 ** RNG.integers(-30, 30, size=(n, 1))).astype(F32)
    assert_same_bits(fn(a, b), ora(a, b), f"{profile} {m}x{k}x{n}")


@pytest.mark.parametrize("profile", ["int8", "int15"])
def test_tile_edges(profile):
    """L-5 / W-3: every m from 1 to 13 and m at the 6-row panel / 48-row block edges
    against n at the 16/32-column edges, k at the 4-byte group edges."""
    fn, ora, _ = PROFILES[profile]
    ms = list(range(1, 14)) + [47, 48, 49, 97]
    ns = [1, 15, 16, 17, 31, 32, 33, 63, 64, 65]
    for k in (1, 2, 3, 4, 7, 8, 9):
        a = (RNG.standard_normal((max(ms), k)) * 2.0 ** RNG.integers(-9, 9, size=(max(ms), 1))).astype(F32)
        b = RNG.standard_normal((max(ns), k)).astype(F32)
        full = ora(a, b)
        for m in ms:
            for n in ns:
                assert_same_bits(fn(a[:m], b[:n]), full[:m, :n], f"{profile} m={m} k={k} n={n}")


@pytest.mark.parametrize("profile", ["int8", "int15"])
@pytest.mark.parametrize("k", [1, 5, 129, 1000])
def test_float_operand_equals_quantized_operand(profile, k):
    """L-5 / W-3: a float32 operand gives exactly the bits of passing its quantized
    form (from linalg's quantizer and from the oracle's), in any mix."""
    fn, _, quant = PROFILES[profile]
    a = np.concatenate([edge_rows(k), RNG.standard_normal((4, k)).astype(F32)])
    b = RNG.standard_normal((9, k)).astype(F32)
    ref = np.asarray(fn(a, b))
    qa, qb = quant(a), quant(b)
    oq = O.quantize_int8 if profile == "int8" else O.quantize_int15
    oqa, oqb = oq(a), oq(b)
    for xa, xb, what in ((qa, qb, "both"), (qa, b, "a quantized"), (a, qb, "b quantized"),
                         (tuple(oqa), tuple(oqb), "oracle codes")):
        assert_same_bits(fn(xa, xb), ref, f"{profile} {what}")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=st.integers(1, 14), k=st.integers(1, 200), n=st.integers(1, 40),
       seed=st.integers(0, 2 ** 32 - 1), profile=st.sampled_from(["int8", "int15"]),
       lo=st.integers(-140, 120))
def test_hypothesis_random(m, k, n, seed, profile, lo):
    """L-3..L-5 / W-1..W-3: random rows with scales from 2**-140 to 2**125 vs the oracle."""
    fn, ora, _ = PROFILES[profile]
    rng = np.random.default_rng(seed)
    with np.errstate(all="ignore"):
        a = (rng.standard_normal((m, k)) * 2.0 ** rng.integers(lo, lo + 8, size=(m, 1))).astype(F32)
        b = (rng.standard_normal((n, k)) * 2.0 ** rng.integers(-lo - 8, -lo + 8, size=(n, 1))).astype(F32)
    assert_same_bits(fn(a, b), ora(a, b), f"{profile}")


# ---------------------------------------------------------------- f32(S) rounding
def codes_for_sum(S, cmax):
    """Two code vectors (a, b), entries within [-cmax, cmax], with sum(a * b) == S."""
    sgn = 1 if S >= 0 else -1
    S = abs(S)
    a, b = [], []
    while S > 0:
        if S >= cmax * cmax:
            a.append(cmax), b.append(cmax)
            S -= cmax * cmax
        elif S >= cmax:
            q = S // cmax
            a.append(cmax), b.append(q)
            S -= cmax * q
        else:
            a.append(S), b.append(1)
            S = 0
    if not a:
        a, b = [0], [0]
    a, b = np.array(a, np.int64) * sgn, np.array(b, np.int64)
    return a, b


def split15(codes):
    codes = np.asarray(codes, np.int64)
    return (codes >> 7).astype(np.int8), (codes & 127).astype(np.int8)


S8_CASES = [
    (2 ** 24 + 1, 2 ** 24), (2 ** 24 + 3, 2 ** 24 + 4), (-(2 ** 24 + 1), -(2 ** 24)),
    (-(2 ** 24 + 3), -(2 ** 24 + 4)), (2 ** 24 - 1, 2 ** 24 - 1), (2 ** 25 + 2, 2 ** 25),
    (2 ** 25 + 6, 2 ** 25 + 8), (2 ** 25 + 3, 2 ** 25 + 4), (0, 0),
]


@pytest.mark.parametrize("S,want", S8_CASES)
def test_int8_sum_rounding(S, want):
    """L-5: f32(S) rounds the exact sum once, to nearest even (2**24+1 -> 2**24,
    2**24+3 -> 2**24+4), codes and exponents passed directly."""
    a, b = codes_for_sum(S, 127)
    k = len(a)
    A = np.zeros((2, k), np.int8)
    B = np.zeros((3, k), np.int8)
    A[0], A[1], B[0], B[2] = a, -a, b, b
    ea, eb = np.array([0, 5], np.int32), np.array([0, 0, -3], np.int32)
    got = linalg.matmul_int8((A, ea), (B, eb))
    assert_same_bits(got, O.gemm_int(A, ea, B, eb), f"S={S}")
    g = np.asarray(got)
    assert g[0, 0] == F32(want) and g[1, 0] == F32(-want) * 32
    assert g[0, 2] == F32(want) / 8 and g[1, 2] == F32(-want) * 4
    assert u32(g)[:, 1].tolist() == [0, 0]


S15_CASES = [
    (2 ** 24 + 1, 2 ** 24), (2 ** 24 + 3, 2 ** 24 + 4), (-(2 ** 24 + 3), -(2 ** 24 + 4)),
    (2 ** 40 + 2 ** 16, 2 ** 40), (2 ** 40 + 2 ** 16 + 1, 2 ** 40 + 2 ** 17),
    (2 ** 40 + 3 * 2 ** 16, 2 ** 40 + 2 ** 18), (-(2 ** 40 + 2 ** 16 + 1), -(2 ** 40 + 2 ** 17)),
    (2 ** 31 + 1, 2 ** 31), (2 ** 32 + 2 ** 8 + 1, 2 ** 32 + 2 ** 9),
]


@pytest.mark.parametrize("S,want", S15_CASES)
def test_int15_sum_rounding(S, want):
    """W-3: the exact int64 sum is rounded once to float32, nearest even, also past
    2**31 where int32 pieces would overflow (hi/lo planes passed directly)."""
    a, b = codes_for_sum(S, 16383)
    k = len(a)
    assert k <= 65536
    A = np.zeros((2, k), np.int64)
    B = np.zeros((3, k), np.int64)
    A[0], A[1], B[0], B[2] = a, -a, b, b
    ah, al = split15(A)
    bh, bl = split15(B)
    ea, eb = np.array([0, 1], np.int32), np.array([0, 0, -2], np.int32)
    got = linalg.matmul_int15((ah, al, ea), (bh, bl, eb))
    assert_same_bits(got, O.gemm_int15(ah, al, ea, bh, bl, eb), f"S={S}")
    g = np.asarray(got)
    assert g[0, 0] == F32(want) and g[1, 0] == F32(-want) * 2
    assert g[0, 2] == F32(want) / 4


@pytest.mark.parametrize("profile", ["int8", "int15"])
def test_exponents_near_pow2f_limits(profile):
    """L-5 / W-3: pow2f(ea + eb) is 2**e for -126 <= e <= 127, +inf above (S * inf,
    0 * inf = NaN), +0 below (so a negative S gives -0.0); no subnormal results."""
    codes = np.array([[3, 0, -2]], np.int64)
    bcodes = np.array([[1, 1, 1], [0, 0, 0], [-1, 0, 0], [1, 0, 0], [127, 0, 0]], np.int64)
    for ea in (127, 128, 0, -126, -127, -128, -200, 200, -63, 64, -64, 121, -132, 122):
        for eb in (0, 1, -1, -70, 70, 6, -6):
            A = (codes, np.array([ea], np.int32))
            B = (bcodes, np.array([eb] * 5, np.int32))
            with np.errstate(all="ignore"):
                exp = O.gemm_int(A[0], A[1], B[0], B[1])
            if profile == "int8":
                got = linalg.matmul_int8((A[0].astype(np.int8), A[1]), (B[0].astype(np.int8), B[1]))
            else:
                got = linalg.matmul_int15((*split15(A[0]), A[1]), (*split15(B[0]), B[1]))
            assert_same_bits(got, exp, f"{profile} ea={ea} eb={eb}")
    # spot values of the rule itself
    one = lambda e: np.array([e], np.int32)  # noqa: E731
    c = np.array([[1]], np.int8)
    m = np.array([[-1]], np.int8)
    z = np.array([[0]], np.int8)
    chk = {
        (1, 127): 0x7F000000, (1, 128): 0x7F800000, (-1, 128): 0xFF800000,
        (1, -126): 0x00800000, (1, -127): 0x00000000, (-1, -127): 0x80000000,
    }
    for (s, e), want in chk.items():
        got = linalg.matmul_int8((c if s > 0 else m, one(e)), (c, one(0)))
        assert int(u32(got)[0, 0]) == want, (s, e, hex(int(u32(got)[0, 0])))
    assert np.isnan(np.asarray(linalg.matmul_int8((z, one(100)), (c, one(100))))[0, 0])


@pytest.mark.parametrize("profile", ["int8", "int15"])
def test_exponent_sum_is_not_wrapped(profile):
    """L-5 / W-3: pow2f(ea[i] + eb[j]) is taken of the true sum of two int32 exponents
    (+inf above 127, +0 below -126). Accepted exponents must give the oracle's bits; a
    refusal (ValueError naming the exponents) would also honour the contract. A
    wrapped int32 sum silently gives a wrong number (e.g. 2**30 + 2**30 -> 0.0)."""
    A8, B8 = np.array([[3]], np.int8), np.array([[1]], np.int8)
    z = np.zeros((1, 1), np.int8)
    wrong = []
    for ea, eb in [(2 ** 30, 2 ** 30), (2 ** 31 - 1, 1), (2 ** 31 - 1, 2 ** 31 - 1),
                   (-(2 ** 31), -1), (-(2 ** 31), -(2 ** 31)), (2 ** 31 - 1, -(2 ** 31))]:
        ea_, eb_ = np.array([ea], np.int32), np.array([eb], np.int32)
        with np.errstate(all="ignore"):
            exp = O.gemm_int(A8, ea_, B8, eb_)
        try:
            if profile == "int8":
                got = linalg.matmul_int8((A8, ea_), (B8, eb_))
            else:
                got = linalg.matmul_int15((z, A8, ea_), (z, B8, eb_))
        except ValueError as e:
            assert str(e).startswith("mojolearn:") and "expon" in str(e), str(e)
            continue
        if int(u32(got)[0, 0]) != int(u32(exp)[0, 0]):
            wrong.append(f"codes 3*1, ea={ea}, eb={eb}: got {float(np.asarray(got)[0, 0])!r} "
                         f"expected {float(exp[0, 0])!r}")
    assert not wrong, f"matmul_{profile}: " + "; ".join(wrong)


@pytest.mark.parametrize("profile", ["int8", "int15"])
@pytest.mark.parametrize("edge", [2 ** 30 - 1, 2 ** 30, 2 ** 31 - 1])
@pytest.mark.parametrize("prepared", [False, True])
def test_blocked_epilogue_exponent_routes(profile, edge, prepared):
    """L-5 / W-3 on the blocked kernels (m > the decode rows): the epilogue adds
    ea[i] + eb[j] in int32 when every exponent lies inside (-2**30, 2**30) and in
    int64 otherwise. edge = 2**30 - 1 takes the int32 route at its limits, 2**30 just
    misses it, 2**31 - 1 is int32's end; rows and columns alternate between +edge - d
    and -edge + d, so the sums run from about -2**31 to 2**31 and the opposite pairs
    land back in pow2f's range (normal, subnormal and zero results)."""
    m, n, k = 45, 70, 130
    rng = np.random.default_rng(edge % 1000)
    d_a = rng.integers(-150, 150, size=m)
    d_b = rng.integers(-150, 150, size=n)
    ea = np.where(np.arange(m) % 2 == 0, edge - np.abs(d_a), -edge + np.abs(d_a)).astype(np.int32)
    eb = np.where(np.arange(n) % 3 == 0, edge - np.abs(d_b), -edge + np.abs(d_b)).astype(np.int32)
    ea[1], eb[2] = -edge, -edge  # the other end too (-2**31 + 1 for int32's end)
    ea[3] = 5  # a small exponent beside the extreme ones
    f = {"int8": linalg.matmul_int8, "int15": linalg.matmul_int15}[profile]
    if profile == "int8":
        A = rng.integers(-127, 128, size=(m, k)).astype(np.int8)
        B = rng.integers(-127, 128, size=(n, k)).astype(np.int8)
        a_op, b_op = (A, ea), (B, eb)
        with np.errstate(all="ignore"):
            exp = O.gemm_int(A, ea, B, eb)
    else:
        ah, al = rng.integers(-127, 128, size=(m, k)).astype(np.int8), rng.integers(0, 128, size=(m, k)).astype(np.int8)
        bh, bl = rng.integers(-127, 128, size=(n, k)).astype(np.int8), rng.integers(0, 128, size=(n, k)).astype(np.int8)
        a_op, b_op = (ah, al, ea), (bh, bl, eb)
        with np.errstate(all="ignore"):
            exp = O.gemm_int15(ah, al, ea, bh, bl, eb)
    if prepared:
        b_op = linalg.prepare(b_op)
    got = np.asarray(f(a_op, b_op))
    finite = np.isfinite(exp) & (exp != 0)
    assert finite.sum() > m * n // 10, "the opposite pairs must give ordinary numbers"
    assert_same_bits(got, exp, f"matmul_{profile}, exponents at +-{edge}")


@pytest.mark.parametrize("profile", ["int8", "int15"])
@pytest.mark.parametrize("prepared", [False, True])
@pytest.mark.parametrize("lo,hi", [(-126, 127), (-127, 127), (-126, 128), (-300, 300)])
def test_blocked_epilogue_normal_range(profile, prepared, lo, hi):
    """L-5 / W-3 on the blocked kernels: when every ea[i] + eb[j] lies in [-126, 127]
    the epilogue scales by the normal 2**e and skips the flush (a nonzero integer sum
    times such a power is never subnormal); one sum outside that range (lo = -127,
    hi = 128, or far outside) sends the call down the general route. The exponents
    reach lo and hi exactly: S = 1 at the sum lo (2**-126 itself when lo = -126), the
    largest sums at hi (inf past 2**128), zero rows and columns, against the oracle."""
    m, n, k = 13, 37, 70
    rng = np.random.default_rng(126 + hi)
    lo_a, hi_a = lo // 2, hi // 2
    ea = rng.integers(lo_a, hi_a + 1, size=m).astype(np.int32)
    eb = rng.integers(lo - lo_a, hi - hi_a + 1, size=n).astype(np.int32)
    ea[0], ea[1], eb[0], eb[1] = lo_a, hi_a, lo - lo_a, hi - hi_a
    if profile == "int8":
        A = _extreme_codes(m, k, -127, 127, rng)
        B = _extreme_codes(n, k, -127, 127, rng)
    else:
        A = _extreme_codes(m, k, -16383, 16383, rng)
        B = _extreme_codes(n, k, -16383, 16383, rng)
    A[0], B[0] = 0, 0
    A[0, 5], B[0, 5] = 1, 1  # S = 1 where the exponent sum is lo
    A[2], B[3] = 0, 0  # zero sums
    A[1], B[1] = A[1].max(), B[1].max()  # the largest sum where it is hi
    if profile == "int8":
        a_op, b_op = (A.astype(np.int8), ea), (B.astype(np.int8), eb)
        with np.errstate(all="ignore"):
            exp = O.gemm_int(*a_op, *b_op)
        f = linalg.matmul_int8
    else:
        a_op, b_op = (*split15(A), ea), (*split15(B), eb)
        with np.errstate(all="ignore"):
            exp = O.gemm_int15(*a_op, *b_op)
        f = linalg.matmul_int15
    if prepared:
        b_op = linalg.prepare(b_op)
    got = f(a_op, b_op)
    assert_same_bits(got, exp, f"matmul_{profile}, exponent sums in [{lo}, {hi}]")
    if lo == -126:
        assert int(u32(exp)[0, 0]) == 0x00800000  # 2**-126: the smallest normal
    if hi >= 127:
        assert np.isinf(exp[1, 1])


@pytest.mark.parametrize("prepared", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
def test_int8_tile_pairs(prepared, threads):
    """L-5 on the blocked int8 kernel, which runs IMR rows against two INR-column panels
    at once and stores a whole tile in one go when every exponent sum is in [-126, 127]:
    m either side of IMR and its multiples, n either side of 2 * INR and its multiples
    (a lone last panel, a partial second panel), distinct exponents per row and per
    column (a tile stored with another tile's row or column terms differs), with a
    far exponent that sends the same shapes down the per-vector route; 1 and 2 tasks
    (a task's columns may start at an odd panel)."""
    import mojolearn
    from mojolearn._core.loader import blocking

    t = blocking()
    mr, nr = t["IMR"], t["INR"]
    ms = [mr - 1, mr, mr + 1, 2 * mr + 1, 4 * mr]
    ns = [2 * nr - 1, 2 * nr, 2 * nr + 1, 3 * nr, 3 * nr + 1, 4 * nr, 4 * nr + nr // 2, 5 * nr + 3]
    rng = np.random.default_rng(6432)
    prev = mojolearn.get_num_threads()
    mojolearn.set_num_threads(threads)
    try:
        for k in (4, 67, 300):
            A = _extreme_codes(max(ms), k, -127, 127, rng).astype(np.int8)
            B = _extreme_codes(max(ns), k, -127, 127, rng).astype(np.int8)
            ea = rng.permutation(np.arange(-60, -60 + max(ms))).astype(np.int32)
            eb = rng.permutation(np.arange(-40, -40 + max(ns))).astype(np.int32)
            for far in (False, True):
                eb_k = eb.copy()
                if far:
                    eb_k[-1] = 200  # one sum past 127: the per-vector route
                with np.errstate(all="ignore"):
                    full = O.gemm_int(A, ea, B, eb_k)
                for m in ms:
                    for n in ns:
                        qb = (B[:n], eb_k[:n]) if not far else (B[max(ns) - n:], eb_k[max(ns) - n:])
                        exp = full[:m, :n] if not far else full[:m, max(ns) - n:]
                        b_op = linalg.prepare(qb) if prepared else qb
                        got = linalg.matmul_int8((A[:m], ea[:m]), b_op)
                        assert_same_bits(got, exp, f"m={m} k={k} n={n} far={far} threads={threads}")
    finally:
        mojolearn.set_num_threads(prev)


# ---------------------------------------------------------------- domains
def test_int8_domain_limit_accepted_and_exact():
    """L-7: k = 131072 is accepted and exact even at the largest |S| = 127*127*131072
    (codes +-127, float32 and tuple operands)."""
    k = 131072
    A = np.stack([np.full(k, 127), np.full(k, -127)]).astype(np.int8)
    B = np.stack([np.full(k, 127), np.where(np.arange(k) % 2 == 0, 127, -127)]).astype(np.int8)
    ea, eb = np.zeros(2, np.int32), np.array([0, -1], np.int32)
    got = linalg.matmul_int8((A, ea), (B, eb))
    exp = O.gemm_int(A, ea, B, eb)
    assert_same_bits(got, exp, "k=131072 codes")
    assert np.asarray(got)[0, 0] == F32(127 * 127 * k)
    a = RNG.standard_normal((2, k)).astype(F32)
    b = RNG.standard_normal((1, k)).astype(F32)
    assert_same_bits(linalg.matmul_int8(a, b), o_int8(a, b), "k=131072 float")


def test_int15_domain_limit_accepted_and_exact():
    """W-4: k = 65536 is accepted and exact at the largest |S| = 16383**2 * 65536
    (codes +-16383 as hi/lo planes, and float32 operands)."""
    k = 65536
    C = np.stack([np.full(k, 16383), np.full(k, -16383)]).astype(np.int64)
    D = np.stack([np.full(k, 16383), np.where(np.arange(k) % 3 == 0, -16383, 16383)])
    ah, al = split15(C)
    bh, bl = split15(D)
    ea, eb = np.zeros(2, np.int32), np.array([0, 3], np.int32)
    got = linalg.matmul_int15((ah, al, ea), (bh, bl, eb))
    assert_same_bits(got, O.gemm_int15(ah, al, ea, bh, bl, eb), "k=65536 planes")
    assert np.asarray(got)[0, 0] == F32(16383 * 16383 * k)
    a = RNG.standard_normal((2, k)).astype(F32)
    b = RNG.standard_normal((2, k)).astype(F32)
    assert_same_bits(linalg.matmul_int15(a, b), o_int15(a, b), "k=65536 float")


@pytest.mark.parametrize("profile,m,k,n", [("int8", 2, 131072, 70), ("int15", 3, 65536, 130)])
def test_largest_k_across_column_chunks(profile, m, k, n):
    """L-5 L-7 / W-3 W-4: at the largest k the kernels pack B in chunks of 64 (int8) /
    128 (int15) columns; a wider n crosses them and still gives the oracle's bits."""
    fn, ora, _ = PROFILES[profile]
    a = RNG.standard_normal((m, k)).astype(F32)
    b = (RNG.standard_normal((n, k)) * 2.0 ** RNG.integers(-3, 3, size=(n, 1))).astype(F32)
    assert_same_bits(fn(a, b), ora(a, b), f"{profile} {m}x{k}x{n}")


@pytest.mark.parametrize("profile,k,rule", [("int8", 131073, "L-7"), ("int15", 65537, "W-4")])
def test_domain_refused(profile, k, rule):
    """L-7 / W-4: one past the domain is a ValueError that names the rule, for float32
    operands and for quantized tuples."""
    fn = linalg.matmul_int8 if profile == "int8" else linalg.matmul_int15
    a = np.zeros((1, k), F32)
    with pytest.raises(ValueError) as ei:
        fn(a, a)
    msg = str(ei.value)
    assert msg.startswith("mojolearn:") and rule in msg and f"matmul_{profile}" in msg, msg
    z = np.zeros((1, k), np.int8)
    e = np.zeros(1, np.int32)
    q = (z, e) if profile == "int8" else (z, z, e)
    with pytest.raises(ValueError) as ei:
        fn(q, q)
    assert str(ei.value).startswith("mojolearn:") and rule in str(ei.value)


# ---------------------------------------------------------------- API pieces
@pytest.mark.parametrize("profile", ["int8", "int15"])
def test_degenerate_shapes(profile):
    """8 (applied to the integer profiles): m = 0 / n = 0 give empty results; k = 0
    gives the oracle's +0.0 (S = 0, exponents 0)."""
    fn, ora, _ = PROFILES[profile]
    assert fn(np.zeros((0, 5), F32), np.ones((3, 5), F32)).shape == (0, 3)
    assert fn(np.ones((2, 5), F32), np.zeros((0, 5), F32)).shape == (2, 0)
    a, b = np.zeros((2, 0), F32), np.zeros((3, 0), F32)
    got = fn(a, b)
    assert got.shape == (2, 3)
    assert_same_bits(got, ora(a, b), "k=0")
    assert np.all(u32(got) == 0)


@pytest.mark.parametrize("profile", ["int8", "int15"])
def test_out_and_noncontiguous(profile):
    """7 (integer profiles): out is written in place and returned; strided float32
    operands, strided codes and strided exponents give the contiguous bits."""
    fn, ora, quant = PROFILES[profile]
    A = RNG.standard_normal((14, 90)).astype(F32)
    B = RNG.standard_normal((70, 90)).astype(F32)
    a, b = A[::2, ::3], B[1::2, ::3]
    exp = ora(a, b)
    out = np.full(exp.shape, np.nan, F32)
    r = fn(a, b, out=out)
    assert r is out
    assert_same_bits(out, exp, "out")
    qa = [np.asarray(x) for x in quant(np.ascontiguousarray(a))]
    spread = []
    for x in qa:  # the same values behind a stride
        big = np.zeros((x.shape[0], 2 * x.shape[1]) if x.ndim == 2 else (2 * x.shape[0],), x.dtype)
        if x.ndim == 2:
            big[:, ::2] = x
            spread.append(big[:, ::2])
        else:
            big[::2] = x
            spread.append(big[::2])
    assert_same_bits(fn(tuple(spread), b), exp, "strided codes/exponents")
    assert_same_bits(fn(a[::-1], b), exp[::-1], "negative steps")


@pytest.mark.parametrize("m", [1, 2, 4, 5])
def test_decode_rows_extreme_codes(m):
    """W-2 W-4: the decode-rows path (m <= 4 streams B unpacked) with every code at
    +-16383 (planes hi=-128, lo=1 and hi=127, lo=127): the exact sum across the
    int32-to-int64 flush points, for k up to the domain edge; m = 5 takes the packed
    path for comparison."""
    for k in (16 * 7, 16 * 8 + 1, 16 * 9 + 5, 65536):
        ah = np.full((m, k), -128, np.int8)
        al = np.full((m, k), 1, np.int8)
        bh = np.full((3, k), -128, np.int8)
        bl = np.full((3, k), 1, np.int8)
        bh[1, ::2], bl[1, ::2] = 127, 127
        ea, eb = np.zeros(m, np.int32), np.array([0, -2, 1], np.int32)
        got = linalg.matmul_int15((ah, al, ea), (bh, bl, eb))
        assert_same_bits(got, O.gemm_int15(ah, al, ea, bh, bl, eb), f"m={m} k={k}")


# ---------------------------------------------------------------- tile-unit edges
def _extreme_codes(rows, k, lo, hi, rng):
    """Codes drawn from the ends of the range and a few middles (the sums' worst cases)."""
    pool = np.array([lo, lo + 1, -1, 0, 1, hi - 1, hi], np.int64)
    return pool[rng.integers(0, len(pool), size=(rows, k))]


@pytest.mark.parametrize("profile", ["int8", "int15"])
def test_tile_unit_edges(profile):
    """L-5 / W-3: the AMX kernels' edges (16 x 16 x 64-byte tiles in 2 x 2 blocks of
    32 x 32; every other build runs the same cases): m and n either side of 16 and 32,
    k either side of the 64-byte k-blocks, extreme codes as tuples."""
    rng = np.random.default_rng(64)
    ms, ns = [1, 15, 16, 17, 31, 32, 33, 48, 63, 65], [1, 15, 16, 17, 31, 32, 33, 47, 64, 65]
    for k in (1, 63, 64, 65, 127, 128, 129, 191, 257):
        if profile == "int8":
            A, B = _extreme_codes(max(ms), k, -127, 127, rng), _extreme_codes(max(ns), k, -127, 127, rng)
            qa = (A.astype(np.int8), rng.integers(-3, 3, size=max(ms)).astype(np.int32))
            qb = (B.astype(np.int8), rng.integers(-3, 3, size=max(ns)).astype(np.int32))
            full = O.gemm_int(*qa, *qb)
            fn = linalg.matmul_int8
        else:
            A, B = _extreme_codes(max(ms), k, -16383, 16383, rng), _extreme_codes(max(ns), k, -16383, 16383, rng)
            qa = (*split15(A), rng.integers(-3, 3, size=max(ms)).astype(np.int32))
            qb = (*split15(B), rng.integers(-3, 3, size=max(ns)).astype(np.int32))
            full = O.gemm_int15(*qa, *qb)
            fn = linalg.matmul_int15
        for m in ms:
            for n in ns:
                got = fn(tuple(x[:m] for x in qa), tuple(x[:n] for x in qb))
                assert_same_bits(got, full[:m, :n], f"{profile} m={m} k={k} n={n}")


@pytest.mark.parametrize("profile", ["int8", "int15"])
@pytest.mark.parametrize("prepared", [False, True])
def test_whole_panel_and_element_packing(profile, prepared):
    """L-5 / W-3: the v3 build packs whole panels (6 rows of A, 16 columns of B) 8
    k-pairs at a time, transposed in registers, and the rest (a partial panel, the
    last k % 16 codes, an odd k's last code) element by element; every build runs the
    same cases: k either side of 16 and 32 codes, m either side of 6 and 12, n either
    side of 16 and 32, codes from the ends of the range (int15: hi planes of -128), raw
    and prepared, against the oracle."""
    rng = np.random.default_rng(616)
    for k in (1, 2, 15, 16, 17, 31, 32, 33, 47, 49):
        for m, n in ((5, 15), (6, 16), (7, 17), (12, 32), (13, 33), (19, 47)):
            ea = rng.integers(-3, 3, size=m).astype(np.int32)
            eb = rng.integers(-3, 3, size=n).astype(np.int32)
            if profile == "int8":
                qa = (_extreme_codes(m, k, -127, 127, rng).astype(np.int8), ea)
                qb = (_extreme_codes(n, k, -127, 127, rng).astype(np.int8), eb)
                want = O.gemm_int(*qa, *qb)
                fn = linalg.matmul_int8
            else:
                qa = (*split15(_extreme_codes(m, k, -16383, 16383, rng)), ea)
                qb = (*split15(_extreme_codes(n, k, -16383, 16383, rng)), eb)
                want = O.gemm_int15(*qa, *qb)
                fn = linalg.matmul_int15
            got = fn(qa, linalg.prepare(qb) if prepared else qb)
            assert_same_bits(got, want, f"{profile} prepared={prepared} m={m} k={k} n={n}")


@pytest.mark.parametrize("profile,m,k,n", [("int8", 65, 16384, 257), ("int15", 65, 16384, 257)])
def test_packing_block_edges(profile, m, k, n):
    """L-5 / W-3: at k = 16384 the AMX kernels pack A in blocks of 64 rows (int8; 32 for
    int15, whose units carry both planes) and B in chunks of 256 columns (128 for
    int15): 1 MiB / 4 MiB; m = 65 and n = 257 cross both. The AVX-512 VNNI kernels'
    A blocks are 48 rows there (imc_for: INT_A_BLOCK_BYTES of k-group words)."""
    fn, ora, _ = PROFILES[profile]
    a = (RNG.standard_normal((m, k)) * 2.0 ** RNG.integers(-3, 3, size=(m, 1))).astype(F32)
    b = (RNG.standard_normal((n, k)) * 2.0 ** RNG.integers(-3, 3, size=(n, 1))).astype(F32)
    assert_same_bits(fn(a, b), ora(a, b), f"{profile} {m}x{k}x{n}")


def _k_chunk_cases():
    """k values around the AMX kernels' k-chunks (AMX_KC_BLOCKS blocks of 64 bytes) in
    the build this process runs; on other builds, the same values for KC = 8."""
    from mojolearn._core.loader import blocking
    kc = blocking().get("AMX_KC_BLOCKS", 8) * 64
    return [kc - 1, kc, kc + 1, 2 * kc + 64 * 3 + 7, 3 * kc]


@pytest.mark.parametrize("profile", ["int8", "int15"])
@pytest.mark.parametrize("k", _k_chunk_cases())
def test_k_chunks(profile, k):
    """L-5 / W-3: the AMX kernels keep the sums of a k-chunk in a buffer and add the
    next chunk to them; k either side of one and two chunks and a partial last chunk,
    extreme codes (every piece sum near its int32 limit), against the oracle."""
    rng = np.random.default_rng(k)
    m, n = 45, 70
    if profile == "int8":
        A, B = _extreme_codes(m, k, -127, 127, rng), _extreme_codes(n, k, -127, 127, rng)
        qa = (A.astype(np.int8), rng.integers(-4, 4, size=m).astype(np.int32))
        qb = (B.astype(np.int8), rng.integers(-4, 4, size=n).astype(np.int32))
        assert_same_bits(linalg.matmul_int8(qa, qb), O.gemm_int(*qa, *qb), f"int8 k={k}")
    else:
        A, B = _extreme_codes(m, k, -16383, 16383, rng), _extreme_codes(n, k, -16383, 16383, rng)
        qa = (*split15(A), rng.integers(-4, 4, size=m).astype(np.int32))
        qb = (*split15(B), rng.integers(-4, 4, size=n).astype(np.int32))
        assert_same_bits(linalg.matmul_int15(qa, qb), O.gemm_int15(*qa, *qb), f"int15 k={k}")


@pytest.mark.parametrize("k", [5, 6, 7, 511, 512, 513, 1025, 65535, 65536])
def test_int15_sums_exact_for_any_planes(k):
    """W-3 W-4: int15 sums are exact for any int8 planes (codes hi * 128 + lo down to
    -16512) up to k = 65536 on every build, on the blocked kernels (more rows than the
    decode rows take): the AVX2 kernel's int32 sums of three k-pairs of whole-code
    products (up to 6 * 16512**2, under 2**31: the all-(-16512) row) and its split
    accumulator read back in int64 (k = 5..7: one, two and three k-pairs past a whole
    group; 65536: the most groups), the int8-piece kernels' pieces summed in int32."""
    rng = np.random.default_rng(k)
    hi_pool = np.array([-128, -128, 127, 127, 0, -1], np.int8)
    lo_pool = np.array([-128, 127, 127, 0, -128, 5], np.int8)
    rows = 7 if k >= 65535 else 9
    ah, al = hi_pool[rng.integers(0, 6, (rows, k))], lo_pool[rng.integers(0, 6, (rows, k))]
    bh, bl = hi_pool[rng.integers(0, 6, (rows + 1, k))], lo_pool[rng.integers(0, 6, (rows + 1, k))]
    # the extremes on every product: (-16512)**2 and 16383 * -16512 in whole rows
    ah[0], al[0], bh[0], bl[0] = -128, -128, -128, -128
    bh[1], bl[1] = 127, 127
    ea, eb = np.zeros(rows, np.int32), np.zeros(rows + 1, np.int32)
    got = linalg.matmul_int15((ah, al, ea), (bh, bl, eb))
    # the oracle takes quantizer-range codes only; here S is computed directly (exact
    # in int64, |S| <= 65536 * 16512**2 < 2**53) and rounded once (exponents 0)
    A = ah.astype(np.int64) * 128 + al.astype(np.int64)
    B = bh.astype(np.int64) * 128 + bl.astype(np.int64)
    want = (A @ B.T).astype(np.float64).astype(F32)
    assert_same_bits(got, want, f"k={k}")

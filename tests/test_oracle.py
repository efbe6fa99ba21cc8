"""Self-tests of tests/oracle.py against hand-checked facts of
the v1 arithmetic reference and against an independent scalar
reference built here on exact rational arithmetic (fractions.Fraction).

Nothing here imports mojolearn.
"""

from __future__ import annotations

import hashlib
import os
import random
import sys
import time
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle as O  # noqa: E402

F32 = np.float32
TWO126 = 2.0 ** -126


# ---------------------------------------------------------------------------
# independent exact scalar reference (Fraction based)
# ---------------------------------------------------------------------------

def bits(x) -> int:
    return int(np.asarray(x, dtype=F32).reshape(()).view(np.uint32))


def f32_from_bits(b: int) -> np.float32:
    return np.array([b], dtype=np.uint32).view(F32)[0]


def same_bits(x, y) -> bool:
    x = np.asarray(x, dtype=F32)
    y = np.asarray(y, dtype=F32)
    if x.shape != y.shape:
        return False
    nx, ny = np.isnan(x), np.isnan(y)
    # NaN payloads are not promised (fp32.v1 rule 6): compare NaN-ness only
    return bool(np.array_equal(nx, ny)
                and np.array_equal(x.view(np.uint32)[~nx], y.view(np.uint32)[~ny]))


def round_fraction_f32(q: Fraction, negative_zero: bool) -> np.float32:
    """Exact value q rounded to float32, nearest-even, overflow to inf.

    negative_zero: sign to give a zero result (exact zero or underflow).
    """
    if q == 0:
        return F32(-0.0) if negative_zero else F32(0.0)
    neg = q < 0
    mag = -q if neg else q
    e = mag.numerator.bit_length() - mag.denominator.bit_length()
    if Fraction(2) ** e > mag:
        e -= 1
    assert Fraction(2) ** e <= mag < Fraction(2) ** (e + 1)
    E = max(e, -126)  # below 2**-126 the spacing stays 2**-149
    quantum = Fraction(2) ** (E - 23)
    n = round(mag / quantum)  # Fraction.__round__: half to even
    val = n * quantum
    if val >= Fraction(2) ** 128:
        out = F32(np.inf)
    else:
        out = F32(float(val))  # val is a float32 value: exact conversions
        assert Fraction(float(out)) == val
    if out == 0:
        return F32(-0.0) if neg else F32(0.0)
    return F32(-out) if neg else out


def ref_fma(a, b, c) -> np.float32:
    """f32(a*b + c) with a single rounding; IEEE sign rules for zeros."""
    a, b, c = F32(a), F32(b), F32(c)
    if not (np.isfinite(a) and np.isfinite(b) and np.isfinite(c)):
        with np.errstate(all="ignore"):
            return F32(np.float64(a) * np.float64(b) + np.float64(c))
    pa, pb, pc = Fraction(float(a)), Fraction(float(b)), Fraction(float(c))
    exact = pa * pb + pc
    if exact == 0:
        prod_neg = bool(np.signbit(a)) != bool(np.signbit(b))
        if pa * pb == 0 and pc == 0:
            neg_zero = prod_neg and bool(np.signbit(c))
        else:
            neg_zero = False  # x + (-x) is +0 in round-to-nearest
        return round_fraction_f32(exact, neg_zero)
    return round_fraction_f32(exact, exact < 0)


def ref_ftz(x) -> np.float32:
    x = F32(x)
    if x != 0 and np.isfinite(x) and abs(float(x)) < TWO126:
        return F32(-0.0) if np.signbit(x) else F32(0.0)
    return x


def ref_add(x, y) -> np.float32:
    return ref_fma(x, F32(1.0), y)


def ref_tree_stack(parts):
    """Streaming form of fp32.v1 rule 4: binary-counter stack, then fold from
    the top. Written independently of the oracle's level-by-level loop."""
    stack = []  # (value, size)
    for p in parts:
        stack.append((p, 1))
        while len(stack) >= 2 and stack[-1][1] == stack[-2][1]:
            (x, s), (y, _) = stack[-2], stack.pop()
            stack[-1] = (ref_ftz(ref_add(x, y)), 2 * s)
    acc = stack[-1][0]
    for v, _ in reversed(stack[:-1]):
        acc = ref_ftz(ref_add(v, acc))
    return acc


def ref_gemm(a, b):
    """Scalar fp32.v1 reference: a (m,k) @ b (k,n), Fraction fma."""
    m, k = a.shape
    n = b.shape[1]
    L = max(128, -(-k // 1024))
    out = np.zeros((m, n), dtype=F32)
    for i in range(m):
        for j in range(n):
            parts = []
            for start in range(0, k, L):
                acc = F32(0.0)
                for kk in range(start, min(start + L, k)):
                    acc = ref_ftz(ref_fma(ref_ftz(a[i, kk]), ref_ftz(b[kk, j]), acc))
                parts.append(acc)
            out[i, j] = ref_tree_stack(parts)
    return out


def leaf_inputs(values, L=128):
    """a (1, len*L), b (len*L, 1): leaf j holds only values[j] (at its start)."""
    k = len(values) * L
    a = np.zeros((1, k), dtype=F32)
    b = np.ones((k, 1), dtype=F32)
    for j, v in enumerate(values):
        a[0, j * L] = v
    return a, b


def random_f32_array(rng, shape, lo=-20, hi=20, special=0.1):
    """Random float32 with mixed exponents, signs, some zeros and subnormals."""
    mant = rng.uniform(1.0, 2.0, size=shape)
    ex = rng.integers(lo, hi, size=shape)
    sign = rng.choice([-1.0, 1.0], size=shape)
    x = (sign * mant * np.exp2(ex)).astype(F32)
    r = rng.random(size=shape)
    x[r < special / 3] = F32(0.0)
    x[(r >= special / 3) & (r < 2 * special / 3)] = F32(-0.0)
    sub = (r >= 2 * special / 3) & (r < special)
    x[sub] = (sign[sub] * 1e-40).astype(F32)
    return x


finite_f32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


# ---------------------------------------------------------------------------
# notation: ftz, daz, pow2f
# ---------------------------------------------------------------------------

def test_ftz_daz_notation():
    """Notation `ftz(x)` / fp32.v1 rule 1 (DAZ): a float32 subnormal becomes a
    zero of the same sign; normals (incl. 2**-126), zeros, inf, NaN unchanged."""
    x = np.array([1e-40, -1e-40, 2.0 ** -149, -(2.0 ** -149), TWO126, -TWO126,
                  0.0, -0.0, np.inf, -np.inf, 1.5], dtype=F32)
    for f in (O.ftz, O.daz):
        y = f(x)
        assert y.dtype == F32 and y.shape == x.shape
        assert [bits(v) for v in y[:4]] == [0, 0x80000000, 0, 0x80000000]
        assert same_bits(y[4:], x[4:])
        assert np.isnan(f(np.array([np.nan], dtype=F32)))[0]
    # input not modified
    assert bits(x[0]) != 0
    with pytest.raises(TypeError):
        O.ftz(np.array([1.0]))


def test_pow2f():
    """Notation `pow2f(e)`: float32 2**e for -126..127, +inf above, +0 below."""
    e = np.array([-200, -127, -126, -1, 0, 1, 127, 128, 500])
    got = O.pow2f(e)
    assert got.dtype == F32
    exp = [0.0, 0.0, TWO126, 0.5, 1.0, 2.0, 2.0 ** 127, np.inf, np.inf]
    assert same_bits(got, np.array(exp, dtype=F32))
    assert bits(got[0]) == 0 and bits(got[1]) == 0  # +0, not -0
    assert O.pow2f(3) == F32(8.0)


def test_fp_environment_has_gradual_underflow():
    """fp32.v1 rule 4 note: the oracle needs IEEE subnormal results from numpy
    float32 arithmetic (no hardware FTZ mode in this process)."""
    O._check_fp_environment()
    assert F32(TWO126) / F32(2.0) == F32(2.0 ** -127)


# ---------------------------------------------------------------------------
# fp32.v1
# ---------------------------------------------------------------------------

def test_leaf_size_values():
    """fp32.v1 rule 2: L = max(128, ceil(k/1024)); k = 129..131072 -> 128,
    131073 -> 129, 262144 -> 256; at most 1024 leaves."""
    assert O.leaf_size(1) == 128
    assert O.leaf_size(128) == 128
    for k in (129, 1000, 65536, 131071, 131072):
        assert O.leaf_size(k) == 128
    assert O.leaf_size(131073) == 129
    assert O.leaf_size(262144) == 256
    assert O.leaf_size(262145) == 257
    for k in (1, 131072, 131073, 262145, 10 ** 6 + 7):
        L = O.leaf_size(k)
        assert -(-k // L) <= 1024


def test_leaf_size_131073_used_by_gemm():
    """fp32.v1 rules 2-3: at k=131073 the leaf is 129 long, so position 128
    belongs to leaf 0 (with L=128 the result would be 2**24+2)."""
    k = 131073
    a = np.zeros((1, k), dtype=F32)
    b = np.ones((k, 1), dtype=F32)
    a[0, 0] = 2.0 ** 24
    a[0, 128] = 1.0   # L=129: in leaf 0, 2**24+1 ties to even -> 2**24
    a[0, 129] = 1.0   # L=129: alone in leaf 1 -> 1; 2**24+1 -> 2**24
    got = O.gemm_fp32_v1(a, b)
    assert bits(got[0, 0]) == bits(F32(2.0 ** 24))
    # under the wrong leaf size 128 these two ones would share a leaf:
    assert F32(2.0 ** 24) + F32(2.0) == F32(2.0 ** 24 + 2)


def test_fma_rounds_up_to_min_normal_is_kept():
    """fp32.v1 rules 3-4: fma(1-2**-24, 2**-126, +0) rounds (tie to even) up
    to 2**-126, which is normal and kept (x86 hardware FTZ would give 0)."""
    a = np.array([[1.0 - 2.0 ** -24]], dtype=F32)
    b = np.array([[TWO126]], dtype=F32)
    assert bits(O.gemm_fp32_v1(a, b)[0, 0]) == bits(F32(TWO126))
    assert bits(O.fma_f32(a, b, F32(0.0))[0, 0]) == bits(F32(TWO126))


def test_signed_zero_rules():
    """fp32.v1 rule 3: -1e-20*1e-20 from +0 gives -0.0 (flushed, sign kept);
    (-1)*0 + (+0) gives +0; -0.0 + (-1)*0 stays -0.0."""
    r = O.gemm_fp32_v1(np.array([[-1e-20]], dtype=F32), np.array([[1e-20]], dtype=F32))
    assert bits(r[0, 0]) == 0x80000000
    r = O.gemm_fp32_v1(np.array([[-1.0]], dtype=F32), np.array([[0.0]], dtype=F32))
    assert bits(r[0, 0]) == 0
    r = O.gemm_fp32_v1(np.array([[-1e-20, -1.0]], dtype=F32),
                       np.array([[1e-20], [0.0]], dtype=F32))
    assert bits(r[0, 0]) == 0x80000000
    # the unused tail of a short last leaf must not turn -0.0 into +0.0:
    # leaf 0 ends with -0.0, leaf 1 (one element) is -0.0, -0 + -0 = -0
    a = np.zeros((1, 129), dtype=F32)
    a[0, 127] = -1e-20
    a[0, 128] = -1e-20
    r = O.gemm_fp32_v1(a, np.full((129, 1), 1e-20, dtype=F32))
    assert bits(r[0, 0]) == 0x80000000


def test_daz_on_inputs():
    """fp32.v1 rule 1: subnormal inputs read as signed zeros (1e-40*1e30 is 0,
    not 1e-10)."""
    a = np.array([[1e-40, 2.0]], dtype=F32)
    b = np.array([[1e30], [3.0]], dtype=F32)
    assert O.gemm_fp32_v1(a, b)[0, 0] == F32(6.0)


def test_seven_leaves_tree_order():
    """fp32.v1 rule 4: 7 leaves combine as (p01+p23)+(p45+p6); other orders
    give other bits for these leaves."""
    p = [2.0 ** 24, 1.0, 1.0, 1.0, -(2.0 ** 24), -1.0, -1.0]
    a, b = leaf_inputs(p)
    got = O.gemm_fp32_v1(a, b)[0, 0]
    v = [F32(x) for x in p]
    tree = ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + v[6])
    assert tree == F32(2.0) and got == F32(2.0)
    seq = v[0]
    for x in v[1:]:
        seq = seq + x
    alt = ((v[0] + v[1]) + (v[2] + v[3]) + (v[4] + v[5])) + v[6]
    assert seq != got and alt != got


def test_tree_matches_streaming_stack():
    """fp32.v1 rule 4: the level-by-level tree equals the binary-counter
    stack folded from the top, for 1..40 leaves."""
    rng = np.random.default_rng(4)
    for count in range(1, 41):
        vals = random_f32_array(rng, (count,), lo=-3, hi=26, special=0.0)
        a, b = leaf_inputs(list(vals))
        got = O.gemm_fp32_v1(a, b)[0, 0]
        want = ref_tree_stack([F32(v) for v in vals])
        assert same_bits(got, want), count


def test_fused_differs_from_unfused():
    """fp32.v1 rule 3: one rounding per fma. acc = 1+2**-23,
    a*b = 2**-24*(1-2**-36): exact sum is just below a midpoint, fused gives
    1+2**-23; rounding the product first (or rounding the float64 sum) gives
    1+2**-22."""
    acc = F32(1.0 + 2.0 ** -23)
    x = F32(1.0 + 2.0 ** -18)
    y = F32((1.0 - 2.0 ** -18) * 2.0 ** -24)
    fused = O.fma_f32(x, y, acc)
    assert fused == acc
    assert F32(x * y) + acc == F32(1.0 + 2.0 ** -22)  # unfused
    assert F32(np.float64(x) * np.float64(y) + np.float64(acc)) == F32(1.0 + 2.0 ** -22)
    g = O.gemm_fp32_v1(np.array([[acc, x]], dtype=F32), np.array([[1.0], [y]], dtype=F32))
    assert g[0, 0] == acc


def _subnormal_midpoint_factors():
    """m1*m2 = 2**47 + r, 0 < r < 2**14, m1, m2 24-bit significands."""
    for m1 in range(2 ** 23 + 1, 2 ** 24):
        m2 = -(-(2 ** 47) // m1)
        r = m1 * m2 - 2 ** 47
        if m2 < 2 ** 24 and 0 < r < 2 ** 14:
            return m1, m2
    raise AssertionError("no factors found")


def test_midpoint_near_min_normal_then_flush():
    """fp32.v1 rules 3-4: exact -2**-126 + 2**-150 + tiny rounds to the
    subnormal -(2**-126 - 2**-149) which is flushed to -0.0; the float64 sum
    sits on the midpoint, and double rounding would give -2**-126."""
    m1, m2 = _subnormal_midpoint_factors()
    x = F32(m1 * 2.0 ** -98)   # in [2**-75, 2**-74)
    y = F32(m2 * 2.0 ** -99)
    assert float(x) == m1 * 2.0 ** -98 and float(y) == m2 * 2.0 ** -99
    for sign in (1.0, -1.0):
        acc = F32(-sign * TWO126)
        xs = F32(sign * x)
        s64 = np.float64(xs) * np.float64(y) + np.float64(acc)
        assert s64 == -sign * (TWO126 - 2.0 ** -150)  # float64 hit the midpoint
        assert abs(F32(s64)) == F32(TWO126)            # double rounding
        raw = O.fma_f32(xs, y, acc)
        assert same_bits(raw, ref_fma(xs, y, acc))
        assert abs(float(raw)) == TWO126 - 2.0 ** -149
        g = O.gemm_fp32_v1(np.array([[acc, xs]], dtype=F32),
                           np.array([[1.0], [y]], dtype=F32))
        assert bits(g[0, 0]) == (0x80000000 if sign > 0 else 0)


@settings(max_examples=400, deadline=None)
@given(finite_f32, finite_f32, finite_f32)
def test_fma_matches_exact_rational(a, b, c):
    """fp32.v1 rule 3: fma is a single round-to-nearest-even of the exact
    a*b + c (checked against Fraction arithmetic)."""
    got = O.fma_f32(F32(a), F32(b), F32(c))
    assert same_bits(got, ref_fma(a, b, c))


@settings(max_examples=200, deadline=None)
@given(finite_f32, finite_f32, finite_f32)
def test_gemm_two_step_matches_reference(c, a, b):
    """fp32.v1 rules 1, 3: a 2-long leaf gives ftz(fma(a, b, ftz(c*1)))."""
    got = O.gemm_fp32_v1(np.array([[c, a]], dtype=F32), np.array([[1.0], [b]], dtype=F32))
    acc = ref_ftz(ref_fma(ref_ftz(c), F32(1.0), F32(0.0)))
    want = ref_ftz(ref_fma(ref_ftz(a), ref_ftz(b), acc))
    assert same_bits(got[0, 0], want)


def test_fma_midpoint_constructions():
    """fp32.v1 rule 3: single rounding on constructed near-midpoint sums
    (acc + half-ulp*(1-2**-2j)), where the float64 sum lands exactly on a
    float32 midpoint; compared with Fraction arithmetic."""
    rng = random.Random(12345)
    hit = 0
    for _ in range(400):
        E = rng.randint(-90, 100)
        m = rng.randint(2 ** 23, 2 ** 24 - 1)
        acc = F32(rng.choice([1.0, -1.0]) * m * 2.0 ** (E - 23))  # ulp 2**(E-23)
        j = rng.randint(15, 23)
        u = 2.0 ** -j
        t = rng.randint(-10, 10)
        # x*y = +-2**(E-24) * (1 - u*u): half an ulp of acc, minus a tail far
        # below the float64 ulp of the sum
        x = F32(rng.choice([1.0, -1.0]) * (1.0 + u) * 2.0 ** t)
        y = F32((1.0 - u) * 2.0 ** (E - 24 - t))
        if rng.random() < 0.5:
            x, y = y, x
        s64 = np.float64(x) * np.float64(y) + np.float64(acc)
        if (F32(np.nextafter(s64, np.inf)) != F32(np.nextafter(s64, -np.inf))
                and F32(s64) != s64):
            hit += 1
        got = O.fma_f32(x, y, acc)
        assert same_bits(got, ref_fma(x, y, acc)), (x, y, acc)
    assert hit > 50  # the construction really exercises the midpoint path


def test_fma_one_float64_ulp_beside_a_midpoint():
    """fp32.v1 rule 3 (issue 11): fma(3.0, 0x2314FAAF, 0x091076A2). 3*b is a
    float32 midpoint and the tiny c puts the float64 sum one float64 ulp ABOVE
    it; the exact sum rounds up to 0x23DF7807. The first oracle took the
    neighbouring float64 value for a midpoint, nudged the sum onto it and
    ties-to-even gave 0x23DF7806."""
    b, c = f32_from_bits(0x2314FAAF), f32_from_bits(0x091076A2)
    assert bits(ref_fma(F32(3.0), b, c)) == 0x23DF7807
    assert bits(O.fma_f32(F32(3.0), b, c)) == 0x23DF7807
    # the same sum inside a GEMM (k = 3, one leaf); the kernel's bits are 0x23DF7A59
    a = np.array([[-7.0, 3.0, -7.0]], dtype=F32)
    bm = np.array([0x87A519DE, 0x2314FAAF, 0x9B29CF1D], dtype=np.uint32).view(F32).reshape(3, 1)
    assert bits(O.gemm_fp32_v1(a, bm)[0, 0]) == 0x23DF7A59
    assert bits(ref_gemm(a, bm)[0, 0]) == 0x23DF7A59


def _midpoint_products(rng: np.random.Generator, n: int):
    """(a, b) float32 pairs whose exact product a*b is a float32 rounding midpoint:
    a a small odd integer, b a random float32, kept when the product's bits
    below float32 precision are exactly one half ulp."""
    a = (rng.integers(1, 8, size=n) * 2 + 1).astype(F32) * rng.choice([-1, 1], size=n).astype(F32)
    mant = rng.integers(2 ** 23, 2 ** 24, size=n).astype(np.float64)
    ex = rng.integers(-60, 60, size=n)
    b = (mant * np.exp2(ex - 23.0)).astype(F32)
    p = a.astype(np.float64) * b.astype(np.float64)
    r = p.astype(F32).astype(np.float64)
    up = np.nextafter(p.astype(F32), np.where(p > r, np.inf, -np.inf).astype(F32)).astype(np.float64)
    keep = (p != r) & (p == (r + up) / 2)
    return a[keep], b[keep], p[keep]


def test_fma_constructed_midpoint_sweep():
    """fp32.v1 rule 3 (issue 11): 20,000 sums a*b + c where a*b is exactly a
    float32 midpoint and c is a float32 a few float64 ulps of the product in
    size, so the float64 sum lands ON the midpoint or one or two float64 ulps
    beside it, on either side. Every result is compared with exact rational
    arithmetic (Fraction)."""
    rng = np.random.default_rng(20000)
    a, b, p = _midpoint_products(rng, 160000)
    a, b, p = a[:20000], b[:20000], p[:20000]
    assert len(a) == 20000
    # |c| between 1/4 and 4 float64 ulps of p (2**-52 relative), either sign
    scale = np.exp2(rng.uniform(-2.0, 2.0, size=len(p)) - 52.0)
    c = (p * scale * rng.choice([-1, 1], size=len(p))).astype(F32)
    got = O.fma_f32(a, b, c)
    s64 = a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)
    beside = int(np.count_nonzero((s64 != p) & (
        (np.nextafter(s64, np.inf) == p) | (np.nextafter(s64, -np.inf) == p))))
    on = int(np.count_nonzero((s64 == p) & (c != 0)))
    assert beside > 500 and on > 500, (beside, on)  # both hazards exercised
    bad = [(float(a[i]), float(b[i]), float(c[i]))
           for i in range(len(a)) if not same_bits(got[i], ref_fma(a[i], b[i], c[i]))]
    assert not bad, f"{len(bad)} of {len(a)} differ from exact arithmetic, e.g. {bad[:3]}"


def test_overflow_and_nonfinite():
    """fp32.v1 rule 6: overflow gives inf; inf*0 is NaN; inf - inf is NaN."""
    big = F32(2.0 ** 100)
    r = O.gemm_fp32_v1(np.array([[big]], dtype=F32), np.array([[big]], dtype=F32))
    assert r[0, 0] == np.inf
    r = O.gemm_fp32_v1(np.array([[-big]], dtype=F32), np.array([[big]], dtype=F32))
    assert r[0, 0] == -np.inf
    r = O.gemm_fp32_v1(np.array([[np.inf]], dtype=F32), np.array([[0.0]], dtype=F32))
    assert np.isnan(r[0, 0])
    r = O.gemm_fp32_v1(np.array([[np.inf, -np.inf]], dtype=F32),
                       np.array([[1.0], [1.0]], dtype=F32))
    assert np.isnan(r[0, 0])
    # largest finite + half its ulp: midpoint, ties to even -> inf
    mx = F32(np.finfo(F32).max)
    r = O.gemm_fp32_v1(np.array([[mx, 2.0 ** 103]], dtype=F32),
                       np.array([[1.0], [1.0]], dtype=F32))
    assert r[0, 0] == np.inf
    # overflow in the tree
    a, b = leaf_inputs([mx, mx])
    assert O.gemm_fp32_v1(a, b)[0, 0] == np.inf


def test_gemm_matches_scalar_reference():
    """fp32.v1 rules 1-4 end to end: oracle equals a scalar Fraction-based
    reference on random inputs, across leaf counts (k = 1 .. 1100)."""
    rng = np.random.default_rng(7)
    for (m, n, k) in [(2, 3, 1), (3, 2, 7), (2, 2, 128), (2, 2, 129),
                      (1, 2, 300), (1, 1, 1100)]:
        a = random_f32_array(rng, (m, k))
        b = random_f32_array(rng, (k, n))
        assert same_bits(O.gemm_fp32_v1(a, b), ref_gemm(a, b)), (m, n, k)
    # cancellation-heavy: many terms of similar magnitude and both signs
    a = random_f32_array(rng, (2, 260), lo=-1, hi=2, special=0.0)
    b = random_f32_array(rng, (260, 2), lo=-1, hi=2, special=0.0)
    assert same_bits(O.gemm_fp32_v1(a, b), ref_gemm(a, b))


def test_layouts_and_batch_independence():
    """fp32.v1 rule 5: NN, NT, TN give the same bits; one row alone equals
    that row inside the batch; one column alone likewise."""
    rng = np.random.default_rng(11)
    a = random_f32_array(rng, (5, 300))
    b = random_f32_array(rng, (300, 4))
    nn = O.gemm_fp32_v1(a, b)
    assert same_bits(O.gemm_fp32_v1_nt(a, np.ascontiguousarray(b.T)), nn)
    assert same_bits(O.gemm_fp32_v1_tn(np.ascontiguousarray(a.T), b), nn)
    for i in range(5):
        assert same_bits(O.gemm_fp32_v1(a[i:i + 1], b), nn[i:i + 1])
    assert same_bits(O.gemm_fp32_v1(a, b[:, 2:3]), nn[:, 2:3])


def test_api_refusals():
    """fp32.v1 rule 7: non-float32 is a TypeError (no silent cast); empty or
    non-2-D is a ValueError."""
    with pytest.raises(TypeError):
        O.gemm_fp32_v1(np.ones((2, 2)), np.ones((2, 2), dtype=F32))
    with pytest.raises(ValueError):
        O.gemm_fp32_v1(np.ones((2, 0), dtype=F32), np.ones((0, 2), dtype=F32))
    with pytest.raises(ValueError):
        O.gemm_fp32_v1(np.ones(3, dtype=F32), np.ones((3, 1), dtype=F32))


def test_large_k_speed_and_value():
    """fp32.v1 rules 2-4 at k = 262145 (L = 257, 1021 leaves, last leaf 5):
    leaf 0 = 2**24 (each +1 ties back to even), others 257 and 5, combined by
    the tree; runs well under 20 s. Also 64x64x300 is quick."""
    k = 262145
    a = np.ones((2, k), dtype=F32)
    a[:, 0] = 2.0 ** 24
    a[1, :] *= -1
    b = np.ones((k, 3), dtype=F32)
    b[:, 2] = 0.5
    t0 = time.time()
    got = O.gemm_fp32_v1(a, b)
    assert time.time() - t0 < 20
    L = 257
    assert O.leaf_size(k) == L
    parts = [F32(2.0 ** 24)] + [F32(257.0)] * 1019 + [F32(5.0)]
    assert 1 + 1019 + 1 == -(-k // L) and k - 1020 * L == 5
    want = ref_tree_stack(parts)
    assert got[0, 0] == want and got[0, 1] == want and got[1, 0] == -want
    # half-weight column: leaf 0 = 2**23 (each +0.5 ties back to even 2**23)
    parts2 = [F32(2.0 ** 23)] + [F32(128.5)] * 1019 + [F32(2.5)]
    assert got[0, 2] == ref_tree_stack(parts2)
    rng = np.random.default_rng(3)
    t0 = time.time()
    O.gemm_fp32_v1(rng.standard_normal((64, 300)).astype(F32),
                   rng.standard_normal((300, 64)).astype(F32))
    assert time.time() - t0 < 5


# ---------------------------------------------------------------------------
# bf16 (L-1 widen, L-2 narrow)
# ---------------------------------------------------------------------------

def ref_to_bf16(b: int) -> int:
    """Independent narrow: DAZ, NaN quieting, value-level RNE to 8 significant
    bits with overflow to inf."""
    x = f32_from_bits(b)
    if np.isnan(x):
        return (b >> 16) | 0x0040
    if (b & 0x7F800000) == 0:
        return (b & 0x80000000) >> 16  # DAZ: subnormal/zero -> signed zero
    if np.isinf(x):
        return b >> 16
    q = Fraction(float(x))
    neg = q < 0
    mag = -q if neg else q
    e = mag.numerator.bit_length() - mag.denominator.bit_length()
    if Fraction(2) ** e > mag:
        e -= 1
    quantum = Fraction(2) ** (e - 7)
    val = round(mag / quantum) * quantum
    if val >= Fraction(2) ** 128:
        out = 0x7F80
    else:
        out = bits(F32(float(val))) >> 16
        assert bits(F32(float(val))) & 0xFFFF == 0
    return out | (0x8000 if neg else 0)


def test_to_bf16_examples():
    """L-2: 0x7F7FFFFF -> 0x7F80 (overflow to inf); NaN -> (b>>16)|0x0040;
    ties to even; subnormal -> signed zero; any rank, same shape."""
    cases = {
        0x7F7FFFFF: 0x7F80, 0xFF7FFFFF: 0xFF80,
        0x7F800000: 0x7F80, 0xFF800000: 0xFF80,
        0x7FA00001: 0x7FE0, 0xFF800001: 0xFFC0, 0x7FC00000: 0x7FC0,
        0x3F808000: 0x3F80,  # tie, 0x3F80 even: down
        0x3F818000: 0x3F82,  # tie, 0x3F81 odd: up
        0x3F808001: 0x3F81,  # above tie: up
        0x3F807FFF: 0x3F80,  # below tie: down
        0x80000001: 0x8000, 0x00400000: 0x0000, 0x807FFFFF: 0x8000,
        0x00000000: 0x0000, 0x80000000: 0x8000,
        0x00800000: 0x0080, 0x3F800000: 0x3F80,
    }
    src = np.array(list(cases), dtype=np.uint32).view(F32)
    got = O.to_bf16(src)
    assert got.dtype == np.uint16
    assert [int(v) for v in got] == list(cases.values())
    x3 = src[:12].reshape(2, 3, 2)
    g3 = O.to_bf16(x3)
    assert g3.shape == (2, 3, 2) and np.array_equal(g3.ravel(), got[:12])
    with pytest.raises(TypeError):
        O.to_bf16(np.ones(3, dtype=np.float64))


def test_to_bf16_against_value_rounding():
    """L-2: the bit formula equals value-level RNE on random patterns."""
    rng = np.random.default_rng(99)
    pats = rng.integers(0, 2 ** 32, size=6000, dtype=np.uint64).astype(np.uint32)
    # add patterns near ties and near the top of each binade
    hi = rng.integers(0, 2 ** 16, size=1000, dtype=np.uint64).astype(np.uint32) << 16
    extra = np.concatenate([hi | 0x8000, hi | 0x7FFF, hi | 0x8001, hi | 0xFFFF])
    pats = np.concatenate([pats, extra.astype(np.uint32)])
    got = O.to_bf16(pats.view(F32))
    for p, g in zip(pats.tolist(), got.tolist()):
        assert g == ref_to_bf16(p), hex(p)


def test_from_bf16_all_patterns():
    """L-1: from_bf16 is float32 with bits << 16 exactly, no flush (all 65536
    patterns); to_bf16(from_bf16(h)) == h for non-NaN, non-subnormal h."""
    h = np.arange(2 ** 16, dtype=np.uint32).astype(np.uint16)
    w = O.from_bf16(h)
    assert w.dtype == F32
    assert np.array_equal(w.view(np.uint32), h.astype(np.uint32) << 16)
    back = O.to_bf16(w)
    expo = h & 0x7F80
    mant = h & 0x007F
    normal_like = (expo != 0) & ~((expo == 0x7F80) & (mant != 0))
    assert np.array_equal(back[normal_like], h[normal_like])
    sub = (expo == 0) & (mant != 0)
    assert np.array_equal(back[sub], h[sub] & 0x8000)  # DAZ on narrow
    nan = (expo == 0x7F80) & (mant != 0)
    assert np.array_equal(back[nan], h[nan] | 0x0040)
    with pytest.raises(TypeError):
        O.from_bf16(np.zeros(3, dtype=np.int16))


def test_gemm_bf16f32():
    """bf16f32.v1: bits equal fp32.v1 on the exactly widened operands; a may be
    float32 or bits; float32 b is a TypeError."""
    rng = np.random.default_rng(5)
    a = random_f32_array(rng, (3, 200))
    b = random_f32_array(rng, (200, 2))
    ab, bb = O.to_bf16(a), O.to_bf16(b)
    want = O.gemm_fp32_v1(O.from_bf16(ab), O.from_bf16(bb))
    assert same_bits(O.gemm_bf16f32_v1(ab, bb), want)
    assert same_bits(O.gemm_bf16f32_v1(a, bb), O.gemm_fp32_v1(a, O.from_bf16(bb)))
    with pytest.raises(TypeError):
        O.gemm_bf16f32_v1(ab, b)


# ---------------------------------------------------------------------------
# quantization (L-3/L-4, L-6, W-1..W-4)
# ---------------------------------------------------------------------------

def ref_quantize_row(row, S, C):
    """Independent scalar quantizer built on Fraction and frexp."""
    vals = [ref_ftz(v) for v in row]
    finite_or_inf = [abs(float(v)) for v in vals if not np.isnan(v)]
    absmax = max(finite_or_inf, default=0.0)
    if absmax == 0:
        e = 0
    elif absmax == float("inf"):
        e = 128 - S
    else:
        e = int(np.frexp(absmax)[1]) - 1 - S
    scale_exp = -e
    codes = []
    for v in vals:
        if np.isnan(v):
            codes.append(0)
            continue
        if scale_exp > 127:  # pow2f = inf
            codes.append(0 if v == 0 else (C if v > 0 else -C))
            continue
        if np.isinf(v):
            codes.append(C if v > 0 else -C)
            continue
        y = round_fraction_f32(Fraction(float(v)) * Fraction(2) ** scale_exp, v < 0)
        y = ref_ftz(y)
        if np.isinf(y):
            codes.append(C if y > 0 else -C)
            continue
        c = round(Fraction(float(y)))  # half to even
        codes.append(max(-C, min(C, c)))
    return codes, e


def test_quantize_ties_to_even():
    """L-3 step 3: rne ties to even: 0.5->0, 1.5->2, 2.5->2 (and negatives)."""
    row = np.array([[64.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5]], dtype=F32)
    c, e = O.quantize_int8(row)
    assert c.dtype == np.int8 and e.dtype == np.int32 and e.shape == (1,)
    assert e[0] == 0
    assert c[0].tolist() == [64, 0, 2, 2, 0, -2, -2, 4]
    row15 = np.array([[8192.0, 0.5, 1.5, 2.5, -2.5]], dtype=F32)
    hi, lo, e15 = O.quantize_int15(row15)
    assert e15[0] == 0
    code = hi.astype(np.int64) * 128 + lo
    assert code[0].tolist() == [8192, 0, 2, 2, -2]


def test_quantize_exponent_rule():
    """L-3 step 2: e = unbiased_exponent(absmax) - S (S=6 int8, 13 int15):
    the largest value lands in [64,128) / [8192,16384); NaN ignored."""
    x = np.array([[3.0, np.nan, -1.0]], dtype=F32)
    c, e = O.quantize_int8(x)
    assert e[0] == 1 - 6 and c[0].tolist() == [96, 0, -32]
    hi, lo, e15 = O.quantize_int15(x)
    assert e15[0] == 1 - 13
    assert (hi.astype(np.int64) * 128 + lo)[0].tolist() == [12288, 0, -4096]
    x = np.array([[-127.9, 1.0]], dtype=F32)
    c, e = O.quantize_int8(x)
    assert e[0] == 0 and c[0].tolist() == [-127, 1]  # 127.9 rounds to 128 -> clamp


def test_quantize_degenerate_rows():
    """L-3 step 2: e = 0 for rows of zeros, NaNs or subnormals (codes 0); an
    inf row gives e = 122 (int8) / 115 (int15), inf codes +-C."""
    x = np.array([[0.0, -0.0, 0.0],
                  [np.nan, np.nan, np.nan],
                  [1e-40, -1e-40, 0.0],
                  [np.inf, 1.0, -np.inf]], dtype=F32)
    c, e = O.quantize_int8(x)
    assert e.tolist() == [0, 0, 0, 122]
    assert c[:3].tolist() == [[0, 0, 0]] * 3
    assert c[3].tolist() == [127, 0, -127]
    hi, lo, e15 = O.quantize_int15(x)
    assert e15.tolist() == [0, 0, 0, 115]
    code = hi.astype(np.int64) * 128 + lo
    assert code[:3].tolist() == [[0, 0, 0]] * 3
    assert code[3].tolist() == [16383, 0, -16383]


def test_quantize_tiny_row_saturates():
    """L-3 step 3 note: absmax < 2**-121 (int8) makes e <= -128 so pow2f(-e)
    is inf: nonzero codes saturate to +-C, zeros give 0 (0*inf -> NaN -> 0)."""
    x = np.array([[2.0 ** -125, -(2.0 ** -126), 0.0, -0.0, 1e-40]], dtype=F32)
    c, e = O.quantize_int8(x)
    assert e[0] == -125 - 6
    assert c[0].tolist() == [127, -127, 0, 0, 0]
    # just above the threshold: 2**-121 -> e = -127, pow2f(127) finite
    x = np.array([[2.0 ** -121, 2.0 ** -126]], dtype=F32)
    c, e = O.quantize_int8(x)
    assert e[0] == -127 and c[0].tolist() == [64, 2]
    # int15 threshold is absmax < 2**-114
    x = np.array([[2.0 ** -115, -(2.0 ** -120), 0.0]], dtype=F32)
    hi, lo, e15 = O.quantize_int15(x)
    assert e15[0] == -128
    assert (hi.astype(np.int64) * 128 + lo)[0].tolist() == [16383, -16383, 0]


def test_int15_planes():
    """L-4 / W-1: hi = code >> 7 (arithmetic), lo = code & 127, code ==
    hi*128 + lo; -16383 -> (-128, 1), 16383 -> (127, 127), -1 -> (-1, 127)."""
    x = np.array([[-16383.0, 16383.0, -1.0, 1.0, 0.0, -128.0, 127.0, 8192.0]], dtype=F32)
    hi, lo, e = O.quantize_int15(x)
    assert e[0] == 0 and hi.dtype == np.int8 and lo.dtype == np.int8
    assert hi[0].tolist() == [-128, 127, -1, 0, 0, -1, 0, 64]
    assert lo[0].tolist() == [1, 127, 127, 1, 0, 0, 127, 0]


def test_quantize_matches_scalar_reference():
    """L-3/L-4 steps 1-3 on random rows (mixed magnitudes, NaN, inf,
    subnormals) against an independent scalar quantizer."""
    rng = np.random.default_rng(21)
    rows = []
    for lo, hi in [(-10, 10), (-140, -110), (100, 127), (-30, 30)]:
        rows.append(random_f32_array(rng, (1, 40), lo=lo, hi=hi, special=0.2))
    x = np.concatenate(rows + [random_f32_array(rng, (4, 40))], axis=0)
    x[0, 3] = np.nan
    x[3, 5] = np.inf
    x[4, :] = 1e-40
    for S, C, q in [(6, 127, "int8"), (13, 16383, "int15")]:
        if q == "int8":
            codes, e = O.quantize_int8(x)
            codes = codes.astype(np.int64)
        else:
            hi, lo, e = O.quantize_int15(x)
            codes = hi.astype(np.int64) * 128 + lo
        for i in range(x.shape[0]):
            want_c, want_e = ref_quantize_row(list(x[i]), S, C)
            assert e[i] == want_e, (q, i)
            assert codes[i].tolist() == want_c, (q, i)


def test_dequantize():
    """L-6: ftz(f32(code * pow2f(e))); an exponent below -126 gives 0."""
    codes = np.array([[127, -3, 0], [127, -1, 5], [1, 100, -100]], dtype=np.int8)
    exps = np.array([-130, 1, -126], dtype=np.int32)
    d = O.dequantize_int8(codes, exps)
    assert d.dtype == F32
    assert d[0, 0] == 0 and d[1].tolist() == [254.0, -2.0, 10.0]
    assert d[2, 0] == F32(TWO126) and d[2, 1] == F32(100 * TWO126)
    hi = np.array([[-128, 127]], dtype=np.int8)
    lo = np.array([[1, 127]], dtype=np.int8)
    d15 = O.dequantize_int15(hi, lo, np.array([-13], dtype=np.int32))
    assert d15[0].tolist() == [-16383 / 8192, 16383 / 8192]
    # round trip of values already on the grid
    x = np.array([[96.0, -32.0, 1.0, 0.0]], dtype=F32)
    c, e = O.quantize_int8(x)
    assert np.array_equal(O.dequantize_int8(c, e), x)


# ---------------------------------------------------------------------------
# int8i32.v1 / int15i64.v1
# ---------------------------------------------------------------------------

def test_int_sum_rounds_to_even():
    """int8i32.v1 output: f32(S) rounds to nearest even: S = 2**24+1 ->
    2**24, S = 2**24+3 -> 2**24+4 (no double rounding)."""
    a = np.array([[127] * 1040 + [127, 9]], dtype=np.int8)
    b = np.array([[127] * 1040 + [24, 1]], dtype=np.int8)
    z1 = np.zeros(1, dtype=np.int32)
    assert int((a.astype(np.int64) @ b.astype(np.int64).T)[0, 0]) == 2 ** 24 + 1
    assert O.gemm_int(a, z1, b, z1)[0, 0] == F32(2.0 ** 24)
    a[0, -1] = 11
    assert int((a.astype(np.int64) @ b.astype(np.int64).T)[0, 0]) == 2 ** 24 + 3
    assert O.gemm_int(a, z1, b, z1)[0, 0] == F32(2.0 ** 24 + 4)
    # int15 as well: S = 16383*1024 + 1 + ... construct 2**24+1 and 2**24+3
    for extra, want in [(1, 2.0 ** 24), (3, 2.0 ** 24 + 4)]:
        ca = np.array([[16384 - 1] * 1024 + [1, extra]], dtype=np.int64)
        cb = np.array([[1] * 1024 + [1024, 1]], dtype=np.int64)
        S = int((ca @ cb.T)[0, 0])
        assert S == 2 ** 24 + extra
        r = O.gemm_int15(ca >> 7, ca & 127, z1, cb >> 7, cb & 127, z1)
        assert r[0, 0] == F32(want)


def test_int_scaling_and_flush():
    """int8i32.v1 output: ftz(f32(S) * pow2f(ea[i] + eb[j])); pow2f is +0
    below -126 and inf above 127."""
    a = np.array([[1], [3], [127]], dtype=np.int8)
    b = np.array([[1], [127]], dtype=np.int8)
    ea = np.array([-70, -60, 60], dtype=np.int32)
    eb = np.array([-57, 67], dtype=np.int32)
    r = O.gemm_int(a, ea, b, eb)
    assert r.dtype == F32 and r.shape == (3, 2)
    assert r[0, 0] == 0 and not np.signbit(r[0, 0])         # 2**-127 -> pow2f = +0
    assert r[0, 1] == F32(127 * 2.0 ** -3)
    assert r[1, 0] == F32(3 * 2.0 ** -117)
    assert r[2, 0] == F32(127 * 2.0 ** 3)
    assert r[2, 1] == np.inf                                 # pow2f(127) * 16129
    neg = O.gemm_int(np.array([[-1]], dtype=np.int8), np.array([-70], dtype=np.int32),
                     np.array([[1]], dtype=np.int8), np.array([-57], dtype=np.int32))
    assert neg[0, 0] == 0  # (-1) * (+0) = -0 per the literal formula
    assert np.signbit(neg[0, 0])


def test_int_gemm_against_python_ints():
    """int8i32.v1 / int15i64.v1: exact integer sum (any order), then
    f32 nearest-even and the power-of-two scale, vs Python int + Fraction."""
    rng = np.random.default_rng(8)
    for C, fn in [(127, "int8"), (16383, "int15")]:
        m, n, k = 3, 4, 500
        ca = rng.integers(-C, C + 1, size=(m, k))
        cb = rng.integers(-C, C + 1, size=(n, k))
        ea = rng.integers(-40, 40, size=m).astype(np.int32)
        eb = rng.integers(-40, 40, size=n).astype(np.int32)
        if fn == "int8":
            r = O.gemm_int(ca.astype(np.int8), ea, cb.astype(np.int8), eb)
        else:
            r = O.gemm_int15((ca >> 7).astype(np.int8), (ca & 127).astype(np.int8), ea,
                             (cb >> 7).astype(np.int8), (cb & 127).astype(np.int8), eb)
        for i in range(m):
            for j in range(n):
                S = sum(int(x) * int(y) for x, y in zip(ca[i], cb[j]))
                fS = round_fraction_f32(Fraction(S), False)
                want = ref_ftz(round_fraction_f32(
                    Fraction(float(fS)) * Fraction(2) ** (int(ea[i]) + int(eb[j])), fS < 0))
                assert same_bits(r[i, j], want)


def test_int_domains():
    """L-7 / W-4: int8i32.v1 accepts k <= 131072, int15i64.v1 k <= 65536;
    larger k is a ValueError naming the rule."""
    z = np.zeros(1, dtype=np.int32)
    ok = np.zeros((1, 131072), dtype=np.int8)
    assert O.gemm_int(ok, z, ok, z)[0, 0] == 0
    bad = np.zeros((1, 131073), dtype=np.int8)
    with pytest.raises(ValueError, match="L-7"):
        O.gemm_int(bad, z, bad, z)
    ok15 = np.zeros((1, 65536), dtype=np.int8)
    assert O.gemm_int15(ok15, ok15, z, ok15, ok15, z)[0, 0] == 0
    bad15 = np.zeros((1, 65537), dtype=np.int8)
    with pytest.raises(ValueError, match="W-4"):
        O.gemm_int15(bad15, bad15, z, bad15, bad15, z)


def test_int_float_entry_equals_quantized_entry():
    """int GEMM operands: float32 input is quantized internally, bit-identical
    to passing the quantized form."""
    rng = np.random.default_rng(9)
    a = random_f32_array(rng, (3, 64))
    b = random_f32_array(rng, (2, 64))
    ca, ea = O.quantize_int8(a)
    cb, eb = O.quantize_int8(b)
    assert same_bits(O.gemm_int8_f32(a, b), O.gemm_int(ca, ea, cb, eb))
    ha, la, ea15 = O.quantize_int15(a)
    hb, lb, eb15 = O.quantize_int15(b)
    assert same_bits(O.gemm_int15_f32(a, b), O.gemm_int15(ha, la, ea15, hb, lb, eb15))


# ---------------------------------------------------------------------------
# hashing
# ---------------------------------------------------------------------------

def test_part_hash_convention():
    """Hashing convention: first 16 hex of sha256 over str(dtype), str(shape),
    C-order bytes, per array in order."""
    x = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=F32)
    y = np.array([7], dtype=np.int32)
    want = hashlib.sha256(
        b"float32" + b"(2, 2)" + x.tobytes() + b"int32" + b"(1,)" + y.tobytes()
    ).hexdigest()[:16]
    got = O.part_hash(x, y)
    assert got == want and len(got) == 16
    assert O.part_hash(y, x) != got
    # a non-contiguous view hashes as its C-order copy
    assert O.part_hash(x.T) == O.part_hash(np.ascontiguousarray(x.T))
    assert O.part_hash(x.T) != O.part_hash(x)
    # dtype and shape are part of the hash, not just the bytes
    assert O.part_hash(x.reshape(4)) != O.part_hash(x)
    assert O.part_hash(x.view(np.uint32)) != O.part_hash(x)

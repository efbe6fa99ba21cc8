"""The converters against the oracle: to_bf16 (L-2), from_bf16 (L-1), quantize_int8
(L-3, L-4), dequantize_int8 (L-6), quantize_int15 (W-1, W-2), dequantize_int15 (W-3).

to_bf16 is checked on all 2**32 float32 patterns (marked slow); a fast test covers
every high half with the rounding-relevant low halves. Float32 results are compared
bit for bit (at NaN positions both must be NaN: dequantize can give 0 * inf).
"""
from __future__ import annotations

import numpy as np
import pytest

from mojolearn import linalg
from tests import oracle as O
from tests.bits import assert_same_bits, u32

F32 = np.float32
RNG = np.random.default_rng(4242)


def assert_equal_ints(got, exp, what=""):
    g = np.asarray(got)
    e = np.asarray(exp)
    assert g.dtype == e.dtype and g.shape == e.shape, (what, g.dtype, e.dtype, g.shape, e.shape)
    bad = g != e
    if bad.any():
        idx = [tuple(int(v) for v in ix) for ix in np.argwhere(bad)[:6]]
        detail = "; ".join(f"{ix}: got {g[ix]!r} expected {e[ix]!r}" for ix in idx)
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.size} differ; first: {detail}")


def as_f32(bits):
    return np.asarray(bits, dtype=np.uint32).view(F32)


# ---------------------------------------------------------------- to_bf16 (L-2)
def _check_to_bf16_bits(bits_u32, what):
    got = np.asarray(linalg.to_bf16(bits_u32.view(F32)))
    assert got.dtype == np.uint16 and got.shape == bits_u32.shape
    sub = 1 << 16
    for s in range(0, bits_u32.size, sub):  # the oracle is fastest on small pieces
        exp = O.to_bf16(bits_u32[s:s + sub].view(F32))
        if not np.array_equal(got[s:s + sub], exp):
            i = s + int(np.argmax(got[s:s + sub] != exp))
            raise AssertionError(
                f"{what}: to_bf16({int(bits_u32[i]):#010x}) = {int(got[i]):#06x}, "
                f"expected {int(O.to_bf16(bits_u32[i:i + 1].view(F32))[0]):#06x}"
            )


@pytest.mark.slow
def test_to_bf16_all_2_32_patterns():
    """L-2: to_bf16 on every one of the 2**32 float32 patterns, 2**22 per call, equals
    the oracle (DAZ, round to nearest even on the bits, NaN quieted, overflow to inf)."""
    chunk = 1 << 22
    base = np.arange(chunk, dtype=np.uint32)
    buf = np.empty(chunk, np.uint32)  # reused: fresh 16 MiB arrays cost page faults
    for c in range((1 << 32) // chunk):
        np.add(base, np.uint32(c * chunk), out=buf)
        _check_to_bf16_bits(buf, f"chunk starting {c * chunk:#010x}")


def test_to_bf16_every_high_half_with_rounding_low_halves():
    """L-2: all 65536 high halves, each with the low halves that decide rounding
    (0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF and a random one): every sign, exponent,
    NaN, inf, subnormal and tie class."""
    hi = np.arange(1 << 16, dtype=np.uint32) << np.uint32(16)
    lows = [0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF]
    parts = [hi | np.uint32(lo) for lo in lows]
    parts.append(hi | RNG.integers(0, 1 << 16, size=1 << 16, dtype=np.uint32))
    _check_to_bf16_bits(np.concatenate(parts), "high halves")


def test_to_bf16_random_sample_and_edges():
    """L-2: a random 2**20 sample of patterns plus named edges."""
    x = RNG.integers(0, 1 << 32, size=1 << 20, dtype=np.uint64).astype(np.uint32)
    _check_to_bf16_bits(x, "random")
    edges = {
        0x00000000: 0x0000, 0x80000000: 0x8000,  # +-0
        0x00000001: 0x0000, 0x807FFFFF: 0x8000,  # subnormals -> signed zero (DAZ)
        0x007FFFFF: 0x0000, 0x00800000: 0x0080,  # DAZ, smallest normal
        0x3F800000: 0x3F80, 0x3F808000: 0x3F80,  # exact, tie to even (down)
        0x3F818000: 0x3F82, 0x3F808001: 0x3F81,  # tie to even (up), above tie
        0x3F807FFF: 0x3F80,                      # below tie
        0x7F7FFFFF: 0x7F80, 0xFF7FFFFF: 0xFF80,  # overflow rounds to inf
        0x7F7F7FFF: 0x7F7F,                      # largest finite stays
        0x7F800000: 0x7F80, 0xFF800000: 0xFF80,  # inf
        0x7F800001: 0x7FC0, 0x7FC00000: 0x7FC0,  # NaN quieted, payload top kept
        0xFF812345: 0xFFC1, 0x7FFFFFFF: 0x7FFF, 0x7FBF0000: 0x7FFF,
    }
    src = np.array(list(edges), np.uint32)
    got = np.asarray(linalg.to_bf16(src.view(F32)))
    want = np.array(list(edges.values()), np.uint16)
    assert_equal_ints(got, want, "named edges")
    assert_equal_ints(got, O.to_bf16(src.view(F32)), "named edges vs oracle")


@pytest.mark.parametrize("shape", [(), (1,), (7,), (3, 5), (2, 3, 4), (2, 1, 3, 5), (0,), (2, 0, 3)])
def test_to_bf16_any_rank(shape):
    """L-2: any rank (0-d included), same shape, uint16 result, element-wise bits."""
    x = np.asarray(RNG.standard_normal(shape), dtype=F32)
    got = linalg.to_bf16(x)
    assert got.shape == shape and got.dtype == "uint16" and got.ndim == len(shape)
    assert_equal_ints(np.asarray(got), O.to_bf16(x), f"shape {shape}")


def test_to_bf16_noncontiguous_input():
    """L-2: strided and transposed inputs convert like their contiguous copies."""
    X = RNG.standard_normal((30, 40, 6)).astype(F32)
    for v in (X[::2, ::3, ::-1], X.transpose(2, 0, 1), X[:, 5]):
        assert_equal_ints(np.asarray(linalg.to_bf16(v)), O.to_bf16(np.ascontiguousarray(v)), "strided")


# ---------------------------------------------------------------- from_bf16 (L-1)
def test_from_bf16_all_65536_patterns():
    """L-1: from_bf16 is bits << 16 exactly on all 65536 patterns (no flush of
    subnormals, NaN bits kept as they are)."""
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    got = np.asarray(linalg.from_bf16(bits))
    assert got.dtype == F32 and got.shape == (1 << 16,)
    assert np.array_equal(got.view(np.uint32), bits.astype(np.uint32) << np.uint32(16))
    assert np.array_equal(got.view(np.uint32), O.from_bf16(bits).view(np.uint32))
    # any rank
    for shape in ((), (4, 4, 4), (2, 0)):
        b = RNG.integers(0, 1 << 16, size=shape, dtype=np.uint16)
        r = linalg.from_bf16(np.asarray(b, np.uint16))
        assert r.shape == shape and r.dtype == "float32"
        assert np.array_equal(np.asarray(r).view(np.uint32), np.asarray(b, np.uint32) << np.uint32(16))


def test_bf16_round_trips():
    """L-1 L-2: from_bf16(to_bf16(x)) == oracle; to_bf16(from_bf16(b)) == b except
    subnormal patterns (-> signed zero) and signalling NaNs (-> quieted)."""
    x = RNG.integers(0, 1 << 32, size=1 << 16, dtype=np.uint64).astype(np.uint32).view(F32)
    rt = np.asarray(linalg.from_bf16(linalg.to_bf16(x)))
    assert_same_bits(rt, O.from_bf16(O.to_bf16(x)), "f32 round trip")
    b = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    back = np.asarray(linalg.to_bf16(linalg.from_bf16(b)))
    assert_equal_ints(back, O.to_bf16(O.from_bf16(b)), "bf16 round trip")
    mag = b & 0x7FFF
    plain = (mag >= 0x0080) & (mag <= 0x7F80) | (mag == 0) | (mag >= 0x7FC0)
    assert np.array_equal(back[plain], b[plain])


# ---------------------------------------------------------------- quantizers
def edge_rows(k, rng=RNG):
    with np.errstate(all="ignore"):
        rows = [
            np.zeros(k),
            np.where(np.arange(k) % 2 == 0, -0.0, 0.0),
            np.full(k, np.nan),
            np.concatenate([[np.inf], rng.standard_normal(k - 1)]),
            np.concatenate([rng.standard_normal(k - 1), [-np.inf]]),
            np.concatenate([[np.nan, -np.inf], rng.standard_normal(k)])[:k],
            rng.standard_normal(k) * 2.0 ** -140,   # subnormal only
            rng.standard_normal(k) * 2.0 ** -124,   # tiny, absmax < 2**-121
            rng.standard_normal(k) * 2.0 ** -120,
            rng.standard_normal(k) * 2.0 ** -112,   # int15 exponent near -126
            rng.standard_normal(k) * 1e37,
            np.full(k, -3.4e38),
            np.concatenate([[64.0], (np.arange(k - 1) % 11 - 5) * 0.5]),     # int8 ties
            np.concatenate([[8192.0], (np.arange(k - 1) % 11 - 5) * 0.5]),   # int15 ties
            np.concatenate([[127.5], rng.standard_normal(k - 1)]),           # clamp edge
            np.concatenate([[np.nan], rng.standard_normal(k - 1)]),
            rng.standard_normal(k),
            rng.standard_normal(k) * 2.0 ** rng.integers(-60, 60, size=k),
        ]
    return np.array(rows, dtype=F32)


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 15, 16, 17, 127, 129, 1000])
def test_quantize_int8_edge_rows(k):
    """L-3 L-4: per-row exponents and codes of edge rows equal the oracle's."""
    x = edge_rows(k)
    codes, exps = linalg.quantize_int8(x)
    oc, oe = O.quantize_int8(x)
    assert codes.shape == (x.shape[0], k) and codes.dtype == "int8"
    assert exps.shape == (x.shape[0],) and exps.dtype == "int32"
    assert_equal_ints(np.asarray(exps), oe, f"exps k={k}")
    assert_equal_ints(np.asarray(codes), oc, f"codes k={k}")


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 15, 16, 17, 127, 129, 1000])
def test_quantize_int15_edge_rows(k):
    """W-1 W-2: exponents and the hi/lo planes of edge rows equal the oracle's;
    code = hi*128 + lo with 0 <= lo <= 127."""
    x = edge_rows(k)
    hi, lo, exps = linalg.quantize_int15(x)
    oh, ol, oe = O.quantize_int15(x)
    assert hi.dtype == lo.dtype == "int8" and exps.dtype == "int32"
    assert_equal_ints(np.asarray(exps), oe, f"exps k={k}")
    assert_equal_ints(np.asarray(hi), oh, f"hi k={k}")
    assert_equal_ints(np.asarray(lo), ol, f"lo k={k}")
    lo_ = np.asarray(lo)
    assert lo_.min() >= 0 and lo_.max() <= 127
    code = np.asarray(hi).astype(np.int64) * 128 + lo_
    assert np.abs(code).max() <= 16383


@pytest.mark.parametrize("m,k", [(1, 1), (64, 33), (300, 257), (7, 4096)])
def test_quantize_random_rows(m, k):
    """L-3 L-4 W-1 W-2: random rows with per-row scales over the float32 range."""
    x = (RNG.standard_normal((m, k)) * 2.0 ** RNG.integers(-125, 120, size=(m, 1))).astype(F32)
    c, e = linalg.quantize_int8(x)
    oc, oe = O.quantize_int8(x)
    assert_equal_ints(np.asarray(e), oe, "int8 exps")
    assert_equal_ints(np.asarray(c), oc, "int8 codes")
    h, l, e = linalg.quantize_int15(x)
    oh, ol, oe = O.quantize_int15(x)
    assert_equal_ints(np.asarray(e), oe, "int15 exps")
    assert_equal_ints(np.asarray(h), oh, "int15 hi")
    assert_equal_ints(np.asarray(l), ol, "int15 lo")


def test_quantize_rule_spot_values():
    """L-3 L-4 W-1: spot values of the rules themselves: ties to even, NaN -> 0,
    zero/NaN/subnormal rows get e = 0, inf rows e = 122 / 115, tiny rows saturate,
    -0.0 gives code 0."""
    row = np.array([[64.0, 0.5, 1.5, 2.5, -0.5, -2.5, -0.0, np.nan, 3.5]], F32)
    c, e = linalg.quantize_int8(row)
    assert np.asarray(e).tolist() == [0]
    assert np.asarray(c).tolist() == [[64, 0, 2, 2, 0, -2, 0, 0, 4]]
    for r, e8, e15 in (
        ([0.0, -0.0], 0, 0), ([np.nan, np.nan], 0, 0), ([1e-40, -1e-45], 0, 0),
        ([np.inf, 1.0], 122, 115), ([1.0, -np.inf], 122, 115), ([1.0, 0.5], -6, -13),
        ([3.4e38, 1.0], 121, 114), ([2.0 ** -126, 0.0], -132, -139),
    ):
        x = np.array([r], F32)
        assert np.asarray(linalg.quantize_int8(x)[1]).tolist() == [e8], r
        assert np.asarray(linalg.quantize_int15(x)[2]).tolist() == [e15], r
    # inf rows: inf -> +-C, finite values -> tiny * 2**-122 -> 0
    c, _ = linalg.quantize_int8(np.array([[np.inf, -np.inf, 1e30, np.nan]], F32))
    assert np.asarray(c).tolist() == [[127, -127, 0, 0]]
    # absmax < 2**-121: pow2f(-e) is inf, every nonzero code saturates
    x = np.array([[2.0 ** -125, -(2.0 ** -124), 0.0, -0.0, 2.0 ** -126, 2.0 ** -130]], F32)
    c, e = linalg.quantize_int8(x)
    assert np.asarray(e).tolist() == [-130]
    assert np.asarray(c).tolist() == [[127, -127, 0, 0, 127, 0]]  # 2**-130: DAZ -> 0
    # the pow2f(-e) limit: e = -127 still scales by the finite 2**127, e = -128 by inf
    c, e = linalg.quantize_int8(np.array([[2.0 ** -121, 1.5 * 2.0 ** -122, 0.0]], F32))
    assert np.asarray(e).tolist() == [-127] and np.asarray(c).tolist() == [[64, 48, 0]]
    c, e = linalg.quantize_int8(np.array([[1.5 * 2.0 ** -122, -(2.0 ** -125), 0.0]], F32))
    assert np.asarray(e).tolist() == [-128] and np.asarray(c).tolist() == [[127, -127, 0]]
    h, l, e = linalg.quantize_int15(np.array([[2.0 ** -114, -(2.0 ** -120)]], F32))
    assert np.asarray(e).tolist() == [-127]
    assert (np.asarray(h).astype(np.int64) * 128 + np.asarray(l)).tolist() == [[8192, -128]]
    h, l, e = linalg.quantize_int15(np.array([[2.0 ** -115, -(2.0 ** -120)]], F32))
    assert np.asarray(e).tolist() == [-128]
    assert (np.asarray(h).astype(np.int64) * 128 + np.asarray(l)).tolist() == [[16383, -16383]]
    # int15: 8192 -> e = 0, ties to even, clamp to 16383, split hi/lo
    x = np.array([[8192.0, 0.5, 1.5, -2.5, -16383.0, 16383.49, -1.0]], F32)
    hi, lo, e = linalg.quantize_int15(x)
    code = np.asarray(hi).astype(np.int64) * 128 + np.asarray(lo)
    assert np.asarray(e).tolist() == [0]
    assert code.tolist() == [[8192, 0, 2, -2, -16383, 16383, -1]]
    assert np.asarray(hi).tolist()[0][-1] == -1 and np.asarray(lo).tolist()[0][-1] == 127


def test_quantize_degenerate_shapes():
    """L-3 W-1 (shapes): (m, 0) rows quantize to empty codes and e = 0; (0, k) gives
    empty results."""
    c, e = linalg.quantize_int8(np.zeros((3, 0), F32))
    assert c.shape == (3, 0) and np.asarray(e).tolist() == [0, 0, 0]
    h, l, e = linalg.quantize_int15(np.zeros((2, 0), F32))
    assert h.shape == l.shape == (2, 0) and np.asarray(e).tolist() == [0, 0]
    c, e = linalg.quantize_int8(np.zeros((0, 4), F32))
    assert c.shape == (0, 4) and e.shape == (0,)
    assert linalg.dequantize_int8(np.zeros((2, 0), np.int8), np.zeros(2, np.int32)).shape == (2, 0)
    assert linalg.dequantize_int15(np.zeros((0, 3), np.int8), np.zeros((0, 3), np.int8),
                                   np.zeros(0, np.int32)).shape == (0, 3)


def test_quantize_noncontiguous_input():
    """L-3 W-1: a strided input quantizes like its contiguous copy."""
    X = RNG.standard_normal((40, 90)).astype(F32)
    v = X[::3, ::-2]
    c, e = linalg.quantize_int8(v)
    oc, oe = O.quantize_int8(np.ascontiguousarray(v))
    assert_equal_ints(np.asarray(c), oc, "codes")
    assert_equal_ints(np.asarray(e), oe, "exps")
    h, l, e = linalg.quantize_int15(v.T)
    oh, ol, oe = O.quantize_int15(np.ascontiguousarray(v.T))
    assert_equal_ints(np.asarray(h), oh, "hi")
    assert_equal_ints(np.asarray(l), ol, "lo")


# ---------------------------------------------------------------- dequantize (L-6, W-3)
@pytest.mark.parametrize("k", [1, 3, 16, 17, 129])
def test_dequantize_round_trip(k):
    """L-6 W-3: dequantize(quantize(x)) equals the oracle's round trip, edge rows."""
    x = edge_rows(k)
    c, e = linalg.quantize_int8(x)
    assert_same_bits(linalg.dequantize_int8(c, e), O.dequantize_int8(*O.quantize_int8(x)), "int8")
    h, l, e = linalg.quantize_int15(x)
    assert_same_bits(linalg.dequantize_int15(h, l, e), O.dequantize_int15(*O.quantize_int15(x)), "int15")


def test_dequantize_direct_codes_and_exponents():
    """L-6 W-3: ftz(f32(code) * pow2f(e)) for all codes and exponents around the
    pow2f limits (e <= -127 gives signed zero, e >= 128 gives +-inf and 0 * inf = NaN)
    and at the int32 extremes."""
    exps_list = [-(2 ** 31), -1000, -140, -133, -127, -126, -125, -1, 0, 1, 100, 120,
                 121, 122, 126, 127, 128, 129, 1000, 2 ** 31 - 1]
    exps = np.array(exps_list, np.int32)
    codes = np.tile(np.arange(-128, 128, dtype=np.int64), (len(exps), 1))
    with np.errstate(all="ignore"):
        exp8 = O.dequantize_int8(codes, exps)
    assert_same_bits(linalg.dequantize_int8(codes.astype(np.int8), exps), exp8, "int8")
    # int15: every hi with a few lo values, and every lo with a few hi values
    hi = np.concatenate([np.arange(-128, 128), np.full(256, -128), np.full(256, 127), np.zeros(256)])
    lo = np.concatenate([np.full(256, 127), np.arange(-128, 128), np.arange(-128, 128),
                         np.arange(-128, 128)])  # lo < 0 is outside quantizer output, same formula
    H = np.tile(hi, (len(exps), 1)).astype(np.int8)
    L = np.tile(lo, (len(exps), 1)).astype(np.int8)
    with np.errstate(all="ignore"):
        exp15 = O.dequantize_int15(H, L, exps)
    assert_same_bits(linalg.dequantize_int15(H, L, exps), exp15, "int15")
    # spot values
    d = np.asarray(linalg.dequantize_int8(np.array([[1, -1, 0]], np.int8), np.array([-127], np.int32)))
    assert u32(d).tolist() == [[0, 0x80000000, 0]]
    d = np.asarray(linalg.dequantize_int8(np.array([[1, -1, 0]], np.int8), np.array([128], np.int32)))
    assert d[0, 0] == np.inf and d[0, 1] == -np.inf and np.isnan(d[0, 2])


def test_dequantize_noncontiguous_inputs():
    """L-6 W-3: strided codes / planes / exponents dequantize like contiguous copies."""
    C = RNG.integers(-127, 128, size=(20, 60)).astype(np.int8)
    E = RNG.integers(-130, 130, size=40).astype(np.int32)
    c, e = C[::2, ::3], E[::4]
    with np.errstate(all="ignore"):
        assert_same_bits(linalg.dequantize_int8(c, e), O.dequantize_int8(c, e), "int8")
        Lo = RNG.integers(0, 128, size=(20, 60)).astype(np.int8)
        assert_same_bits(linalg.dequantize_int15(c, Lo[1::2, ::3], e),
                         O.dequantize_int15(c, Lo[1::2, ::3], e), "int15")

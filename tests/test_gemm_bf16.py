"""mojolearn.identical.gemm.bf16f32.v1 (linalg.matmul_bf16) against the oracle.

Rule 9: b is uint16 bf16 bits, a is float32 (used as is) or bf16 bits; both are
widened exactly (bits << 16, no flush, L-1) and the product is fp32.v1 (so DAZ then
reads a widened subnormal as a signed zero). Bits are compared exactly; at NaN
positions both must be NaN (payloads are not promised).
"""
from __future__ import annotations

import numpy as np
import pytest

from mojolearn import linalg
from tests import oracle as O
from tests.bits import assert_same_bits, u32

F32 = np.float32
RNG = np.random.default_rng(9)


def oracle(a, b_bits):
    with np.errstate(all="ignore"):
        return O.gemm_bf16f32_v1(np.ascontiguousarray(a), np.ascontiguousarray(b_bits))


def layouts(a, b):
    at = np.ascontiguousarray(a.T)
    bt = np.ascontiguousarray(b.T)
    return {
        "NN": linalg.matmul_bf16(a, b),
        "NT": linalg.matmul_bf16(a, bt, transpose_b=True),
        "TN": linalg.matmul_bf16(at, b, transpose_a=True),
    }


def check_all_layouts(a, b, what=""):
    exp = oracle(a, b)
    for lay, got in layouts(a, b).items():
        assert got.shape == exp.shape and got.dtype == "float32", lay
        assert_same_bits(got, exp, f"{what} {lay}")
    return exp


SPECIAL_BITS = np.array([
    0x7FC0, 0xFFC0, 0x7F81, 0xFFC1,  # NaNs (quiet and signalling patterns)
    0x7F80, 0xFF80,                  # +-inf
    0x0001, 0x8001, 0x007F, 0x807F, 0x0040,  # subnormal bf16 patterns
    0x0080, 0x8080,                  # smallest normals
    0x0000, 0x8000,                  # +-0
    0x7F7F, 0xFF7F,                  # largest finite
    0x3F80, 0xBF80,                  # +-1
], dtype=np.uint16)


def bf16_matrix(shape, frac=0.0):
    """bf16 bits of random normals, a fraction replaced by special patterns."""
    x = O.to_bf16(RNG.standard_normal(shape).astype(F32))
    if frac:
        mask = RNG.random(shape) < frac
        x[mask] = RNG.choice(SPECIAL_BITS, size=int(mask.sum()))
    return x


SHAPES = [
    (1, 1, 1), (2, 3, 5), (4, 129, 32), (3, 300, 33), (5, 257, 31), (15, 16, 17),
    (13, 1000, 64), (61, 73, 79), (145, 300, 67), (150, 130, 40), (2, 2049, 3),
    (7, 129, 530),
]


@pytest.mark.parametrize("m,k,n", SHAPES, ids=str)
@pytest.mark.parametrize("a_kind", ["float32", "bits"])
@pytest.mark.parametrize("frac", [0.0, 0.15])
def test_matches_oracle(m, k, n, a_kind, frac):
    """9: bits equal fp32.v1 on the exactly widened operands, a as float32 and as
    bf16 bits, NN/NT/TN, with and without special patterns (NaN, inf, subnormal
    bf16, +-0, largest finite)."""
    b = bf16_matrix((k, n), frac)
    if a_kind == "bits":
        a = bf16_matrix((m, k), frac)
    else:
        a = RNG.standard_normal((m, k)).astype(F32)
        if frac:
            mask = RNG.random((m, k)) < frac
            a[mask] = O.from_bf16(RNG.choice(SPECIAL_BITS, size=int(mask.sum())))
    check_all_layouts(a, b, f"bf16 {a_kind} {frac}")


@pytest.mark.parametrize("m,k,n", [(2, 131073, 3), (5, 131073, 33), (1, 262145, 2)], ids=str)
def test_large_k(m, k, n):
    """9 + 6.2: bf16 operands at the leaf-size changes (L = 129, 257)."""
    a = bf16_matrix((m, k))
    b = bf16_matrix((k, n))
    check_all_layouts(a, b, "large k bits")
    check_all_layouts(O.from_bf16(a).copy(), b, "large k f32")


@pytest.mark.parametrize("m,n", [(1, 1), (3, 5), (5, 33), (150, 40)])
def test_widened_subnormals_are_read_as_zero(m, n):
    """9 + L-1 + 6.1: widening does not flush (from_bf16(0x0040) is the subnormal
    2**-128) but fp32.v1 then reads it as zero: 0x0040 * 2**100 gives +0, not 2**-28;
    0x8040 * 2**100 + 1 gives 1."""
    big = O.to_bf16(np.array([2.0 ** 100], F32))[0]
    assert np.asarray(linalg.from_bf16(np.array([0x0040], np.uint16))).view(np.uint32)[0] == 0x00400000
    for bits_a, want in ((0x0040, 0.0), (0x8040, 0.0)):
        a = np.full((m, 1), bits_a, np.uint16)
        b = np.full((1, n), big, np.uint16)
        exp = check_all_layouts(a, b, "subnormal bits")
        assert np.all(u32(exp) == 0)
    a = np.tile(np.array([0x8040, 0x3F80], np.uint16), (m, 1))
    b = np.tile(np.array([[big], [0x3F80]], np.uint16), (1, n))
    assert np.all(check_all_layouts(a, b, "subnormal + 1") == 1.0)


@pytest.mark.parametrize("m,n", [(1, 1), (3, 5), (5, 33), (150, 40)])
def test_float32_a_is_not_narrowed(m, n):
    """9: a float32 a is used as is: (1 + 2**-20) * 1 stays 1 + 2**-20 (to_bf16 would
    give 1.0), and 1 + 2**-20 times bf16 1.5 is f32((1 + 2**-20) * 1.5)."""
    a = np.full((m, 1), 1 + 2.0 ** -20, F32)
    b = np.full((1, n), 0x3F80, np.uint16)
    assert np.all(check_all_layouts(a, b, "not narrowed") == F32(1 + 2.0 ** -20))
    b = np.full((1, n), 0x3FC0, np.uint16)
    assert np.all(check_all_layouts(a, b, "times 1.5") == F32((1 + 2.0 ** -20) * 1.5))


@pytest.mark.parametrize("m,n", [(1, 1), (3, 5), (150, 40)])
def test_specials(m, n):
    """9 + 6.6: bf16 inf * 0 is NaN, NaN bits propagate as NaN, inf stays inf."""
    inf, zero, nan, one = 0x7F80, 0x0000, 0x7FC1, 0x3F80
    for xa, xb, want in ((inf, zero, "nan"), (nan, one, "nan"), (inf, one, np.inf),
                         (0xFF80, one, -np.inf), (0x7F7F, 0x4000, np.inf)):
        a = np.full((m, 1), xa, np.uint16)
        b = np.full((1, n), xb, np.uint16)
        exp = check_all_layouts(a, b, f"special {xa:#x}*{xb:#x}")
        assert np.all(np.isnan(exp)) if want == "nan" else np.all(exp == want)


@pytest.mark.parametrize("m,k,n", [(1, 300, 5), (3, 40, 33), (9, 129, 40), (150, 257, 33)])
def test_equals_matmul_on_widened_operands(m, k, n):
    """9: matmul_bf16(a, b) == matmul(from_bf16(a), from_bf16(b)) bit for bit (both
    implementations' own widening and fp32.v1)."""
    a = bf16_matrix((m, k), 0.05)
    b = bf16_matrix((k, n), 0.05)
    wa, wb = linalg.from_bf16(a), linalg.from_bf16(b)
    assert_same_bits(linalg.matmul_bf16(a, b), np.asarray(linalg.matmul(wa, wb)), "bits")
    af = np.asarray(wa).copy()
    assert_same_bits(linalg.matmul_bf16(af, b), np.asarray(linalg.matmul(af, wb)), "f32 a")


def test_degenerate_shapes():
    """8 for bf16f32.v1: k = 0 gives +0.0, m = 0 / n = 0 give empty (m, n) results."""
    for a in (np.zeros((3, 0), np.uint16), np.zeros((3, 0), F32)):
        for lay, got in layouts(a, np.zeros((0, 4), np.uint16)).items():
            assert got.shape == (3, 4) and np.all(u32(got) == 0), lay
    for m, n in ((0, 4), (3, 0)):
        for lay, got in layouts(np.zeros((m, 5), np.uint16), np.zeros((5, n), np.uint16)).items():
            assert got.shape == (m, n) and got.dtype == "float32", lay


def test_out_and_noncontiguous():
    """7 for bf16f32.v1: out is written in place and returned; non-contiguous bf16
    operands give the bits of contiguous copies."""
    A = bf16_matrix((10, 80), 0.05)
    B = bf16_matrix((80, 66), 0.05)
    a, b = A[::2, ::2], B[::2, ::2]
    exp = oracle(a, b)
    out = np.full((5, 33), np.nan, F32)
    r = linalg.matmul_bf16(a, b, out=out)
    assert r is out
    assert_same_bits(out, exp, "out strided")
    assert_same_bits(linalg.matmul_bf16(a, np.ascontiguousarray(b).T, transpose_b=True), exp, "NT view")
    assert_same_bits(linalg.matmul_bf16(np.ascontiguousarray(a).T, b, transpose_a=True), exp, "TN view")
    af = O.from_bf16(np.ascontiguousarray(A)).copy()[::2, ::2]
    assert_same_bits(linalg.matmul_bf16(af, b), exp, "f32 strided a")

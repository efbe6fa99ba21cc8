"""linalg.prepare of a weight kept low-bit: the panels hold the bf16 bits or the int8
codes as stored (mojo/gemm/cpu/pack_lowbit.mojo) and the kernels widen them as they
read them, with the bits of fp32.v1 on the float32 weight the format materializes
(bf16: rule L-1, int8: rule L-6 with one exponent per stored row), against the
independent oracle.

Every path of the prepared product is covered: the decode rows (m <= ROWS_MAX,
widened in registers), the few-rows nest (m <= SMALL_M, one panel widened into the
workspace at a time) and the blocked nest (m > SMALL_M, a column chunk widened at a time),
1 and 2 threads. Edge values: int8 codes -128 and +-127, exponents at and past the
ends of pow2f's range (127, 128: inf scales, so 0 * inf = NaN; -126, -127: zero
scales), bf16 subnormals (read as signed zeros by rule 6.1), +-0, +-inf and NaN.
tests/test_isa_kernels.py runs this file on every CPU build this CPU can run.
"""
from __future__ import annotations

import pickle

import numpy as np
import pytest

import mojolearn
from mojolearn import linalg, lowbit
from mojolearn._core.loader import blocking
from tests import oracle as O
from tests.bits import assert_same_bits

F32 = np.float32
B = blocking()
NR, MR, SMALL_M, ROWS_MAX = B["NR"], B["MR"], B["SMALL_M"], B["ROWS_MAX"]
MS = (1, 2, 3, ROWS_MAX, ROWS_MAX + 1, 2 * MR + 1, SMALL_M + 1)
NK = ((1, 1), (NR - 1, 7), (NR + 1, 129), (3 * NR + 5, 300))


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    old = mojolearn.get_num_threads()
    mojolearn.set_num_threads(request.param)
    yield request.param
    mojolearn.set_num_threads(old)


def rnd(seed, *shape):
    return np.random.default_rng(seed).standard_normal(shape).astype(F32)


def int8_weight(seed, n, k):
    """Codes over the whole int8 range (-128 included) and exponents at the ends of
    pow2f's range on the first rows, ordinary ones elsewhere."""
    rng = np.random.default_rng(seed)
    codes = rng.integers(-128, 128, size=(n, k)).astype(np.int8)
    codes[0, : min(k, 3)] = (-128, 127, 0)[: min(k, 3)]
    edges = np.array([127, 128, -126, -127, 200, -200, 0, -6], np.int32)
    exps = rng.integers(-12, 4, size=n).astype(np.int32)
    exps[: min(n, len(edges))] = edges[: min(n, len(edges))]
    return codes, exps


@pytest.mark.parametrize("m", MS)
def test_int8_panels_match_the_oracle(m, threads):
    """L-6 6.1-6.6: matmul(a, prepare(Int8Weight(codes, e))) == fp32.v1 on
    dequantize_int8(codes, e), a @ w.T, on every kernel path."""
    for i, (n, k) in enumerate(NK):
        codes, exps = int8_weight(10 + i, n, k)
        a = rnd(20 + i, m, k)
        p = linalg.prepare(lowbit.Int8Weight(codes, exps), transpose_b=True)
        assert p.format == "int8" and p.profile == "mojolearn.identical.gemm.fp32.v1"
        with np.errstate(all="ignore"):
            exp = O.gemm_fp32_v1_nt(a, O.dequantize_int8(codes, exps))
        assert_same_bits(linalg.matmul(a, p, transpose_b=True), exp,
                         f"int8 m={m} n={n} k={k} threads={threads}")


def bf16_bits_with_edges(seed, n, k):
    rng = np.random.default_rng(seed)
    bits = np.asarray(linalg.to_bf16(rng.standard_normal((n, k)).astype(F32))).copy()
    specials = np.array([0x0001, 0x807F, 0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0x0080],
                        np.uint16)  # subnormals, +-0, +-inf, NaN, the smallest normal
    flat = bits.reshape(-1)
    pos = rng.choice(flat.size, size=min(flat.size, 3 * len(specials)), replace=False)
    flat[pos] = np.resize(specials, pos.size)
    return bits


@pytest.mark.parametrize("m", MS)
def test_bf16_panels_match_the_oracle(m, threads):
    """L-1 6.1-6.6: matmul_bf16(a, prepare(bits)) == fp32.v1 on from_bf16(bits), both
    stored layouts, float32 and bf16 a; the panels hold 2 bytes a weight."""
    for i, (n, k) in enumerate(NK):
        bits = bf16_bits_with_edges(30 + i, n, k)
        a = rnd(40 + i, m, k)
        exp = O.gemm_fp32_v1_nt(a, O.from_bf16(bits))
        for tb, stored in ((True, bits), (False, np.ascontiguousarray(bits.T))):
            p = linalg.prepare(stored, transpose_b=tb)
            assert p.format == "bfloat16"
            assert_same_bits(linalg.matmul_bf16(a, p, transpose_b=tb), exp,
                             f"bf16 tb={tb} m={m} n={n} k={k} threads={threads}")
        pw = linalg.prepare(lowbit.BF16Weight(bits), transpose_b=True)
        ab = np.asarray(linalg.to_bf16(a))
        assert_same_bits(linalg.matmul_bf16(ab, pw, transpose_b=True),
                         O.gemm_bf16f32_v1(ab, np.ascontiguousarray(bits.T)), "BF16Weight, bf16 a")


def test_many_leaves_and_column_chunks():
    """6.2 6.4: k of several leaves (an odd tree) and more columns than one chunk of the
    blocked nest, both formats, m on the blocked path: the raw float32 product's bits."""
    n, k, m = 600, 1000, SMALL_M + 3
    codes, exps = int8_weight(50, n, k)
    exps[:] = np.clip(exps, -12, 4)
    a = rnd(51, m, k)
    w8 = np.asarray(linalg.dequantize_int8(codes, exps))
    p8 = linalg.prepare(lowbit.Int8Weight(codes, exps), transpose_b=True)
    assert_same_bits(linalg.matmul(a, p8, transpose_b=True),
                     linalg.matmul(a, w8, transpose_b=True), "int8 chunks")
    bits = np.asarray(linalg.to_bf16(rnd(52, n, k)))
    pb = linalg.prepare(bits, transpose_b=True)
    assert_same_bits(linalg.matmul_bf16(a, pb, transpose_b=True),
                     linalg.matmul_bf16(a, bits, transpose_b=True), "bf16 chunks")


def test_sizes_records_and_pickle():
    """The panels are the stored format's bytes (n padded to NR): 1 a weight and a
    float32 scale a padded row for int8, 2 a weight for bf16; a pickle gives the same
    bits; the object names its format and layout."""
    n, k = NR + 3, 70
    codes, exps = int8_weight(60, n, k)
    pad = (n + NR - 1) // NR * NR
    p8 = linalg.prepare(lowbit.Int8Weight(codes, exps), transpose_b=True)
    code_bytes = (pad * k + 63) // 64 * 64
    assert p8.nbytes == code_bytes + 4 * pad
    assert p8.layout == "nr-panels-i8/1" and p8.shape == (n, k) and p8.transpose_b is True
    bits = np.asarray(linalg.to_bf16(rnd(61, n, k)))
    pb = linalg.prepare(bits, transpose_b=True)
    assert pb.nbytes == (pad * k * 2 + 3) // 4 * 4 and pb.layout == "nr-panels-bf16/1"
    a = rnd(62, 5, k)
    for p, f in ((p8, linalg.matmul), (pb, linalg.matmul_bf16)):
        q = pickle.loads(pickle.dumps(p))
        assert q.format == p.format and q.layout == p.layout
        assert_same_bits(f(a, q, transpose_b=True), f(a, p, transpose_b=True), f"pickle {p.format}")


def test_refusals():
    """Uses a low-bit prepared weight was not made for are refused by name."""
    codes, exps = int8_weight(70, 20, 30)
    w = lowbit.Int8Weight(codes, exps)
    with pytest.raises(ValueError, match="Int8Weight is stored .n, k."):
        linalg.prepare(w, transpose_b=False)
    p8 = linalg.prepare(w)  # transpose_b left unset: (n, k)
    a = rnd(71, 2, 30)
    with pytest.raises(TypeError, match="prepared for matmul "):
        linalg.matmul_bf16(a, p8, transpose_b=True)
    with pytest.raises(ValueError, match="prepared with transpose_b=True"):
        linalg.matmul(a, p8)
    pb = linalg.prepare(lowbit.BF16Weight(np.asarray(linalg.to_bf16(rnd(72, 20, 30)))),
                        transpose_b=True)
    with pytest.raises(TypeError, match="prepared for matmul_bf16"):
        linalg.matmul(a, pb, transpose_b=True)
    # a block recorded with another layout (e.g. made by an older version) is stale
    meta, data = p8.__reduce__()[1]
    stale = pickle.loads(pickle.dumps(p8))
    object.__setattr__(stale, "layout", "nr-panels-i8/0")
    with pytest.raises(ValueError, match="stale"):
        linalg.matmul(a, stale, transpose_b=True)
    assert p8.release() > 0
    with pytest.raises(ValueError, match="released"):
        linalg.matmul(a, p8, transpose_b=True)


def test_gather_reads_a_table_held_as_panels():
    """M-2: the models' gather from a table held as prepared float32 panels (a tied
    head's one copy) is an exact copy of the table's rows, rows past the last full
    panel included."""
    from mojolearn.models._exec import kernels as K

    vocab, d = 3 * NR + 5, 37
    table = rnd(80, vocab, d)
    table[3, :4] = (np.float32(1e-40), np.float32(-0.0), np.inf, np.nan)
    p = linalg.prepare(table, transpose_b=True)
    ids = np.array([0, vocab - 1, 3, NR, NR - 1, 2 * NR + 1, 3, 0], np.int64)
    got = K.gather_panels(p, ids, np.empty((ids.size, d), F32))
    want = K.gather(table, ids, np.empty((ids.size, d), F32))
    assert_same_bits(got.view(np.uint32), want.view(np.uint32), "panel gather")
    assert np.array_equal(got.view(np.uint32), table[ids].view(np.uint32))

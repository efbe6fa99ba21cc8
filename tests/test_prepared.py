"""linalg.prepare: a weight packed once gives the bits of the raw call (fp32.v1 6.5: the
order depends on k only, never on how B reaches the kernel), and every use it was not
made for is refused by name.

Shapes sit on this build's block table (tests/test_isa_kernels.py runs this file on
every CPU build this CPU can run): m on both sides of ROWS_MAX, MR and SMALL_M (the
prepared product has a few-rows nest for m <= SMALL_M and the blocked nest above), n on
both sides of the panel width NR, k across several leaves.
"""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import mojolearn
from mojolearn._core import cpu as _cpu
from mojolearn import linalg
from mojolearn._core.loader import blocking
from tests import oracle as O
from tests.bits import assert_same_bits

F32 = np.float32
ROOT = Path(__file__).resolve().parents[1]
B = blocking()
NR, MR, SMALL_M = B["NR"], B["MR"], B["SMALL_M"]
BLOCK_MC = B["MC"]  # rows per A block of the blocked nest (the cache plan's)
MS = (1, 2, 3, 17, MR + 1, SMALL_M + 1)
NS = (1, NR - 1, NR + 1, 3 * NR + 5)
KS = (1, 7, 129, 1000)  # 1000: eight leaves (an odd tree)


def rnd(seed, *shape):
    return np.random.default_rng(seed).standard_normal(shape).astype(F32)


def both(a, w, *, transpose_b, transpose_a=False, f=linalg.matmul):
    p = linalg.prepare(w, transpose_b=transpose_b)
    got = f(a, p, transpose_a=transpose_a, transpose_b=transpose_b)
    exp = f(a, w, transpose_a=transpose_a, transpose_b=transpose_b)
    return got, exp


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    old = mojolearn.get_num_threads()
    mojolearn.set_num_threads(request.param)
    yield request.param
    mojolearn.set_num_threads(old)


@pytest.mark.parametrize("lay", ["NN", "NT"])
@pytest.mark.parametrize("m", MS)
def test_same_bits_as_raw(m, lay, threads):
    """6.5: matmul(a, prepare(w)) == matmul(a, w) bit for bit, NN and NT, odd n and k."""
    tb = lay == "NT"
    for i, (n, k) in enumerate((n, k) for n in NS for k in KS):
        a = rnd(i, m, k)
        w = rnd(100 + i, n, k) if tb else rnd(100 + i, k, n)
        got, exp = both(a, w, transpose_b=tb)
        assert_same_bits(got, exp, f"{lay} m={m} n={n} k={k} threads={threads}")


@pytest.mark.parametrize("m", (1, 4, 17))
def test_same_bits_as_oracle(m):
    """6.3 6.4: the prepared product against the independent oracle (not only the raw call)."""
    a, w = rnd(1, m, 1000), rnd(2, 1000, NR + 3)
    exp = O.gemm_fp32_v1(a, w)
    assert_same_bits(linalg.matmul(a, linalg.prepare(w)), exp, "NN")
    assert_same_bits(linalg.matmul(a, linalg.prepare(np.ascontiguousarray(w.T), transpose_b=True),
                                   transpose_b=True), exp, "NT")


@pytest.mark.parametrize("m", (1, 3, 17, SMALL_M + 1))
def test_edge_values(m, threads):
    """6.1 6.6: subnormals (read as signed zeros), +-0, +-inf and NaN in both operands."""
    k, n = 300, NR + 7
    rng = np.random.default_rng(m)
    specials = np.array([0.0, -0.0, 1e-40, -1e-40, 1.2e-38, np.inf, -np.inf, np.nan,
                         1e30, -1e30, 1.0, -1.0], dtype=F32)
    a = rnd(3, m, k)
    mask = rng.random(a.shape) < 0.2
    a[mask] = rng.choice(specials, size=int(mask.sum()))
    w = rnd(4, n, k)
    mask = rng.random(w.shape) < 0.2
    w[mask] = rng.choice(specials, size=int(mask.sum()))
    # some rows / columns entirely subnormal, a leaf of tiny products that flush
    a[0, :128] = F32(1e-20)
    w[0, :128] = F32(-1e-20)
    w[1] = F32(1e-40)
    for tb in (False, True):
        wt = w if tb else np.ascontiguousarray(w.T)
        got, exp = both(a, wt, transpose_b=tb)
        assert_same_bits(got, exp, f"specials tb={tb} m={m}")


def test_large_k_many_leaves(threads):
    """6.2 6.4: k = 5000 (40 leaves of 128: a tree with carried odd levels)."""
    a, w = rnd(5, 2, 5000), rnd(6, 2 * NR + 1, 5000)
    got, exp = both(a, w, transpose_b=True)
    assert_same_bits(got, exp, "k=5000")


@pytest.mark.slow
@pytest.mark.parametrize("lay", ["NN", "NT"])
def test_a_packed_once_across_column_chunks(lay, threads):
    """With B prepared, A is packed once (every row block and leaf) and read by every
    column chunk: more than one chunk (n past 4096 columns), more than one row block,
    a partial last leaf; and a task whose copy of A would pass the bound (A packed per
    chunk as in the raw call). Same bits as the raw call either way."""
    a = rnd(21, SMALL_M + 5, 300)
    w = rnd(22, *((4096 + NR + 3, 300) if lay == "NT" else (300, 4096 + NR + 3)))
    got, exp = both(a, w, transpose_b=lay == "NT")
    assert_same_bits(got, exp, f"a once {lay}")
    a = rnd(23, 2100, 2100)  # 2100 x 2100 float32 > 16 MiB (A_ONCE_BYTES): not packed once
    w = rnd(24, *((40, 2100) if lay == "NT" else (2100, 40)))
    got, exp = both(a, w, transpose_b=lay == "NT")
    assert_same_bits(got, exp, f"a per chunk {lay}")


def test_leaf_past_128():
    """6.2: k = 131073 + 5 (leaf 129): prepared equals raw, m = 1 and m = 5, NN and NT."""
    k = 131078
    for m in (1, 5):
        a = rnd(7, m, k)
        w = rnd(8, 37, k)
        for tb in (True, False):
            wt = w if tb else np.ascontiguousarray(w.T)
            got, exp = both(a, wt, transpose_b=tb)
            assert_same_bits(got, exp, f"k={k} m={m} tb={tb}")


@pytest.mark.slow
@pytest.mark.parametrize("m", sorted({1, 2, 3, 4, 5, MR, 2 * MR + 1, SMALL_M, SMALL_M + 1, 2 * SMALL_M + 3,
                                      BLOCK_MC + 1, 2 * BLOCK_MC + 3, 600}))
def test_exhaustive_shapes(m, threads):
    """6.5: every m across the nests, n and k around the panel width and the leaf."""
    for n in (1, NR - 1, NR, NR + 1, 2 * NR, 513, 1100):
        for k in (1, 127, 128, 129, 257, 2049):
            for tb in (False, True):
                a = rnd(m * 7 + n + k, m, k)
                w = rnd(n + k, n, k) if tb else rnd(n + k, k, n)
                got, exp = both(a, w, transpose_b=tb)
                assert_same_bits(got, exp, f"m={m} n={n} k={k} tb={tb}")


def test_batched_tn_and_out():
    """7.1: a with batch dimensions (rows of one product), TN (transpose_a), and out=."""
    w = rnd(9, 40, 130)
    p = linalg.prepare(w, transpose_b=True)
    a3 = rnd(10, 3, 5, 130)
    assert_same_bits(linalg.matmul(a3, p, transpose_b=True), linalg.matmul(a3, w, transpose_b=True), "batched")
    wn = rnd(11, 130, 40)
    pn = linalg.prepare(wn)
    at = rnd(12, 130, 6)
    assert_same_bits(linalg.matmul(at, pn, transpose_a=True), linalg.matmul(at, wn, transpose_a=True), "TN")
    at3 = rnd(13, 2, 130, 6)
    assert_same_bits(linalg.matmul(at3, pn, transpose_a=True), linalg.matmul(at3, wn, transpose_a=True), "TN batched")
    out = np.full((6, 40), 7, F32)
    r = linalg.matmul(at, pn, transpose_a=True, out=out)
    assert r is out
    assert_same_bits(out, linalg.matmul(at, wn, transpose_a=True), "out")
    # k = 0: +0 everywhere; m = 0: an empty result
    z = linalg.prepare(np.zeros((0, 5), F32))
    assert_same_bits(linalg.matmul(np.ones((3, 0), F32), z), np.zeros((3, 5), F32), "k=0")
    assert linalg.matmul(np.ones((0, 130), F32), pn).shape == (0, 40)


def test_bf16():
    """bf16f32.v1: matmul_bf16(a, prepare(bits)) == matmul_bf16(a, bits), a float32 or bits."""
    w = rnd(14, NR + 9, 300)
    bits = np.asarray(linalg.to_bf16(w))
    for tb in (True, False):
        wb = bits if tb else np.ascontiguousarray(bits.T)
        p = linalg.prepare(wb, transpose_b=tb)
        assert p.profile == "mojolearn.identical.gemm.bf16f32.v1"
        for m in (1, 5, SMALL_M + 2):
            a = rnd(15 + m, m, 300)
            ab = np.asarray(linalg.to_bf16(a))
            for aa in (a, ab):
                assert_same_bits(linalg.matmul_bf16(aa, p, transpose_b=tb),
                                 linalg.matmul_bf16(aa, wb, transpose_b=tb), f"bf16 m={m} tb={tb}")


def test_record_and_pickle():
    """The object records build, panel width, profile, shape and layout; a pickle made
    and read in a process running the same build gives the same bits."""
    w = rnd(16, 33, 70)
    p = linalg.prepare(w, transpose_b=True)
    assert p.isa == mojolearn.cpu_isa() and p.nr == NR and p.shape == (33, 70)
    assert p.transpose_b is True and p.profile == "mojolearn.identical.gemm.fp32.v1"
    assert p.nbytes == ((33 + NR - 1) // NR) * NR * 70 * 4
    assert "PreparedWeight" in repr(p)
    q = pickle.loads(pickle.dumps(p))
    a = rnd(17, 4, 70)
    assert_same_bits(linalg.matmul(a, q, transpose_b=True), linalg.matmul(a, w, transpose_b=True), "pickle")
    # a copy: later changes to w do not reach it
    w[:] = 0
    assert_same_bits(linalg.matmul(a, p, transpose_b=True), linalg.matmul(a, q, transpose_b=True), "copy")


# ---------------------------------------------------------------- refusals by name


def test_refusals():
    w = rnd(18, 20, 30)
    p = linalg.prepare(w, transpose_b=True)
    a = rnd(19, 2, 30)
    with pytest.raises(ValueError, match="prepared with transpose_b=True"):
        linalg.matmul(a, p)
    with pytest.raises(ValueError, match="inner dimensions differ"):
        linalg.matmul(rnd(20, 2, 31), p, transpose_b=True)
    with pytest.raises(TypeError, match="prepared for matmul "):
        linalg.matmul_bf16(a, p, transpose_b=True)
    pb = linalg.prepare(np.asarray(linalg.to_bf16(w)), transpose_b=True)
    with pytest.raises(TypeError, match="prepared for matmul_bf16"):
        linalg.matmul(a, pb, transpose_b=True)
    with pytest.raises(ValueError, match="transpose_a and transpose_b together"):
        linalg.matmul(a, p, transpose_a=True, transpose_b=True)
    with pytest.raises(TypeError, match="a must be float32"):
        linalg.matmul(a.astype(np.float64), p, transpose_b=True)
    with pytest.raises(ValueError, match="a must be at least 2-D"):
        linalg.matmul(np.ones(30, F32), p, transpose_b=True)
    with pytest.raises(TypeError, match="unexpected keyword"):
        linalg.matmul(a, p, transpose_b=True, bogus=1)
    # prepare's own arguments
    with pytest.raises(TypeError, match="b must be float32 or uint16"):
        linalg.prepare(w.astype(np.float64))
    with pytest.raises(ValueError, match="must be 2-D"):
        linalg.prepare(np.ones(5, F32))
    with pytest.raises(TypeError, match="transpose_b must be bool"):
        linalg.prepare(w, transpose_b=1)
    with pytest.raises(TypeError, match="unexpected keyword"):
        linalg.prepare(w, transpose_a=True)
    with pytest.raises(TypeError, match="linalg.prepare"):
        linalg.PreparedWeight()


def test_refuses_another_build_stale_and_released():
    w = rnd(21, 20, 30)
    a = rnd(22, 2, 30)
    p = linalg.prepare(w, transpose_b=True)
    other = "v3" if mojolearn.cpu_isa() != "v3" else "amx"
    forged = pickle.loads(pickle.dumps(p))
    forged.isa = other
    with pytest.raises(ValueError, match=f"prepared for the {other} CPU build"):
        linalg.matmul(a, forged, transpose_b=True)
    forged = pickle.loads(pickle.dumps(p))
    forged.nr = NR * 2
    with pytest.raises(ValueError, match="CPU build"):
        linalg.matmul(a, forged, transpose_b=True)
    stale = pickle.loads(pickle.dumps(p))
    stale.layout = "nr-panels/0"
    with pytest.raises(ValueError, match="stale"):
        linalg.matmul(a, stale, transpose_b=True)
    assert p.release() > 0 and p.released and p.nbytes == 0
    with pytest.raises(ValueError, match="released"):
        linalg.matmul(a, p, transpose_b=True)
    with pytest.raises(ValueError, match="released"):
        pickle.dumps(p)


def test_refused_by_a_process_running_another_build(tmp_path):
    """A prepared weight pickled here and used in a process that runs another CPU build
    (MOJOLEARN_ISA) is refused there, naming both builds."""
    others = [i for i in _cpu.runnable() if i != mojolearn.cpu_isa()]
    if not others:
        pytest.skip("this CPU runs only one build")
    f = tmp_path / "w.pkl"
    f.write_bytes(pickle.dumps(linalg.prepare(rnd(23, 20, 30), transpose_b=True)))
    env = {k: v for k, v in os.environ.items() if k not in ("MOJOLEARN_NATIVE", "MOJOLEARN_CPU_HIDE")}
    env["MOJOLEARN_ISA"] = others[-1]
    env["PYTHONPATH"] = str(ROOT / "python")
    code = ("import pickle, sys, numpy as np; from mojolearn import linalg\n"
            f"p = pickle.loads(open({str(f)!r}, 'rb').read())\n"
            "try:\n    linalg.matmul(np.ones((2, 30), np.float32), p, transpose_b=True)\n"
            "except ValueError as e:\n    print(e); sys.exit(0)\nsys.exit(3)\n")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"prepared for the {mojolearn.cpu_isa()} CPU build" in r.stdout
    assert f"runs the {others[-1]} build" in r.stdout


# ---------------------------------------------------------------- quantized weights (int8i32.v1, int15i64.v1)
INT_MS = (1, 2, 4, 5, 17, 33, 70)  # the decode rows (m <= 4) read the codes as stored
INT_NS = (1, 15, 16, 17, 31, 33, 70)
INT_KS = (1, 63, 65, 129, 600)  # 600: k-blocks past one AMX k-chunk, a partial last one


def _extreme(rng, rows, k, lo, hi):
    pool = np.array([lo, lo + 1, -1, 0, 1, hi - 1, hi], np.int64)
    return pool[rng.integers(0, len(pool), size=(rows, k))]


def _int_pair(profile, seed, m, n, k):
    """(a, b) quantized tuples with codes at the ends of the range (every sum's worst case)."""
    rng = np.random.default_rng(seed)
    if profile == "int8":
        qa = (_extreme(rng, m, k, -127, 127).astype(np.int8), rng.integers(-4, 4, m).astype(np.int32))
        qb = (_extreme(rng, n, k, -127, 127).astype(np.int8), rng.integers(-4, 4, n).astype(np.int32))
        return qa, qb, linalg.matmul_int8
    a, b = _extreme(rng, m, k, -16383, 16383), _extreme(rng, n, k, -16383, 16383)
    split = lambda c: ((c >> 7).astype(np.int8), (c & 127).astype(np.int8))  # noqa: E731
    qa = (*split(a), rng.integers(-4, 4, m).astype(np.int32))
    qb = (*split(b), rng.integers(-4, 4, n).astype(np.int32))
    return qa, qb, linalg.matmul_int15


@pytest.mark.parametrize("profile", ["int8", "int15"])
@pytest.mark.parametrize("m", INT_MS)
def test_int_same_bits_as_raw(profile, m, threads):
    """L-5 / W-3: matmul_int8 / matmul_int15 with a prepared b give the raw call's bits
    (odd n and k across the kernels' units, panels and k-chunks; extreme codes)."""
    for i, (n, k) in enumerate((n, k) for n in INT_NS for k in INT_KS):
        qa, qb, f = _int_pair(profile, 1000 * m + i, m, n, k)
        p = linalg.prepare(qb)
        assert_same_bits(f(qa, p), f(qa, qb), f"{profile} m={m} n={n} k={k} threads={threads}")


@pytest.mark.parametrize("profile", ["int8", "int15"])
def test_int_oracle_float_a_and_blocks(profile):
    """L-5 / W-3: a float32 a (quantized by the call) against a prepared b, against the
    oracle; then a product large enough to cross the kernels' row blocks and column
    chunks (m = 300, n = 700, k = 1500)."""
    a, w = rnd(30, 37, 300), rnd(31, 45, 300)
    if profile == "int8":
        qw, f = linalg.quantize_int8(w), linalg.matmul_int8
        exp = O.gemm_int(*O.quantize_int8(a), *O.quantize_int8(w))
    else:
        qw, f = linalg.quantize_int15(w), linalg.matmul_int15
        exp = O.gemm_int15(*O.quantize_int15(a), *O.quantize_int15(w))
    assert_same_bits(f(a, linalg.prepare(qw)), exp, f"{profile} oracle")
    qa, qb, f = _int_pair(profile, 6, 300, 700, 1500)
    assert_same_bits(f(qa, linalg.prepare(qb)), f(qa, qb), f"{profile} 300x700x1500")


def test_int_record_pickle_copy_and_refusals():
    """A prepared quantized weight records its profile and shape, pickles within a
    build, is a copy, and is refused by name where it does not belong."""
    qa, qb, f = _int_pair("int8", 7, 5, 40, 130)
    p = linalg.prepare(qb)
    assert p.profile == "mojolearn.identical.gemm.int8i32.v1" and p.shape == (40, 130)
    assert p.transpose_b is True and p.isa == mojolearn.cpu_isa() and p.nbytes > 2 * 40 * 130
    q = pickle.loads(pickle.dumps(p))
    exp = f(qa, qb)
    codes = qb[0].copy()
    qb[0][:] = 0  # a copy: later changes to the codes do not reach it
    assert_same_bits(f(qa, p), exp, "copy")
    assert_same_bits(f(qa, q), exp, "pickle")
    qb[0][:] = codes
    ha, hb, f15 = _int_pair("int15", 8, 3, 20, 70)
    p15 = linalg.prepare(hb)
    assert p15.profile == "mojolearn.identical.gemm.int15i64.v1"
    with pytest.raises(TypeError, match="prepared for matmul_int8 "):
        linalg.matmul_int15(ha, p)
    with pytest.raises(TypeError, match="prepared for matmul_int15"):
        linalg.matmul_int8(qa, p15)
    with pytest.raises(TypeError, match="prepared for matmul_int8 "):
        linalg.matmul(rnd(9, 2, 130), p, transpose_b=True)
    with pytest.raises(TypeError, match="prepared for matmul "):
        linalg.matmul_int8(qa, linalg.prepare(rnd(10, 40, 130), transpose_b=True))
    with pytest.raises(ValueError, match="same k"):
        linalg.matmul_int8(_int_pair("int8", 9, 2, 3, 131)[0], p)
    with pytest.raises(TypeError, match="right-hand operand"):
        linalg.matmul_int8(p, qb)
    with pytest.raises(ValueError, match="drop transpose_b=False"):
        linalg.prepare(qb, transpose_b=False)
    with pytest.raises(ValueError, match="tuple of 4"):
        linalg.prepare((qb[0], qb[0], qb[0], qb[1]))
    with pytest.raises(ValueError, match="exponents have length"):
        linalg.prepare((qb[0], qb[1][:3]))
    forged = pickle.loads(pickle.dumps(p))
    forged.isa = "v3" if mojolearn.cpu_isa() != "v3" else "amx"
    with pytest.raises(ValueError, match="CPU build"):
        f(qa, forged)
    assert p.release() > 0
    with pytest.raises(ValueError, match="released"):
        f(qa, p)


@pytest.mark.parametrize("profile", ["int8", "int15"])
def test_int_kernel_reads_the_prepared_panels(profile):
    """The products of m > 4 rows read the packed panels, not the codes kept beside
    them: with the panels zeroed in place the result changes (to exact zeros), while
    the decode rows (m <= 4), which read the codes as stored, do not."""
    import ctypes

    qa, qb, f = _int_pair(profile, 11, 40, 50, 200)
    p = linalg.prepare(qb)
    exp = f(qa, qb)
    ctypes.memset(p._int["packed"], 0, 4 * p._int["words"])
    got = np.asarray(f(qa, p))
    assert np.all(got == 0) and not np.all(np.asarray(exp) == 0)
    few = tuple(x[:4] for x in qa)
    assert_same_bits(f(few, p), f(few, qb), "decode rows")


def _mapping_of(addr):
    """The /proc/self/smaps entry holding addr: (permissions, {field: value})."""
    head, fields = None, {}
    with open("/proc/self/smaps") as f:
        for line in f:
            parts = line.split()
            if "-" in parts[0] and len(parts) >= 5 and ":" not in parts[0]:
                if head is not None:
                    break
                lo, hi = (int(v, 16) for v in parts[0].split("-"))
                if lo <= addr < hi:
                    head = parts[1]
            elif head is not None and parts[0].endswith(":"):
                fields[parts[0][:-1]] = parts[1]
    return head, fields


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="no /proc/self/smaps "
                    "(not Linux): the page size of the panels cannot be read here")
def test_panels_are_private_memory_that_may_get_huge_pages():
    """The panels of a large weight sit in PRIVATE anonymous memory advised for huge
    pages. A shared mapping (Python's mmap default) never gets transparent huge pages
    under the usual shmem setting, whatever madvise asks: that was the case until this
    test, and the 64 MiB decode weight was streamed through 4 KiB pages."""
    w = rnd(3, 1024, 1024)  # 4 MiB of panels: above the 2 MiB huge-page threshold
    p = linalg.prepare(w, transpose_b=True)
    perms, fields = _mapping_of(p._addr)
    assert perms is not None, "the panels' address is in no mapping of this process"
    assert perms.endswith("p"), f"the panels are mapped {perms!r}, not private"
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    mode = thp.read_text() if thp.exists() else ""
    if "THPeligible" in fields and ("[always]" in mode or "[madvise]" in mode):
        assert fields["THPeligible"] == "1", (
            f"THP mode {mode.strip()!r}, yet the panels' mapping is not eligible for huge pages")
    x = rnd(4, 1, 1024)
    assert_same_bits(linalg.matmul(x, p, transpose_b=True), linalg.matmul(x, w, transpose_b=True))


@pytest.mark.parametrize("n,k", [(1, 70), (NR - 1, 129), (3 * NR + 5, 300)])
def test_column_major_weight_packed_where_it_lies(n, k, copies):
    """6.5 / 7: prepare of a column-major weight (numpy's w.T, float32 or bf16 bits)
    packs it from where it lies, without a copy: the panels (pickled bytes) and the
    products equal those of its contiguous copy, and the record keeps the shape and
    flag the caller passed."""
    w = rnd(31, n, k)                                      # (n, k) C-ordered
    a = rnd(32, 5, k)
    for view, tb in ((w.T, False), (np.asfortranarray(w), True)):
        ref = linalg.prepare(np.ascontiguousarray(view), transpose_b=tb)
        copies.clear()
        p = linalg.prepare(view, transpose_b=tb)
        assert copies == []
        assert p.shape == view.shape and p.transpose_b is tb
        assert pickle.dumps(p) == pickle.dumps(ref)
        assert_same_bits(linalg.matmul(a, p, transpose_b=tb),
                         linalg.matmul(a, np.ascontiguousarray(view), transpose_b=tb), f"tb={tb}")
    wb = linalg.to_bf16(w)
    pb = linalg.prepare(np.asarray(wb).T, transpose_b=False)
    assert pickle.dumps(pb) == pickle.dumps(linalg.prepare(np.ascontiguousarray(np.asarray(wb).T)))

"""The integer GEMM GPU kernels (mojo/gemm/gpu/int_tiled.mojo, int_mma.mojo,
int_mfma.mojo), checked on a machine without a GPU.

gpu_ref_gemm_int runs a kernel's own phases on the CPU: the staging of the code
tiles in shared memory (double buffered, 16-byte chunks when k % 16 == 0, bytes
otherwise), then the multiply of each backend: SIMT (Apple: int32 multiply-adds),
NVIDIA's mma.m16n8k32 s8 and AMD's 16x16x32 i8 MFMA, each emulated from its
documented fragment layout while the fragments themselves are gathered by the
kernel's own functions; then the epilogue's placement. Results are compared bit for
bit with the independent oracle (tests/oracle.py).
"""
from __future__ import annotations

import numpy as np
import pytest

from tests import oracle as O
from tests.bits import assert_same_bits
from tests.test_gpu import ref, addr, codes_summing_to  # noqa: F401

F32 = np.float32
BACKENDS = [0, 1, 2]
BACKEND_IDS = ["simt", "nvidia_mma", "amd_mfma"]


def _run_int(ref, ah, al, ea, bh, bl, eb, nplanes, backend):
    """C (m, n) of A (m, k) and B (n, k) through gpu_ref_gemm_int: one plane of int8
    codes (the same buffer passed as both) or the two planes of int15."""
    m, k = ah.shape
    n = bh.shape[0]
    c = np.full((m, n), np.nan, dtype=F32)
    ref.gpu_ref_gemm_int((addr(ah), addr(al), addr(ea), addr(bh), addr(bl), addr(eb), addr(c),
                          m, n, k, nplanes, backend))
    return c


def run_int8(ref, a, ea, b, eb, backend):
    return _run_int(ref, a, a, ea, b, b, eb, 1, backend)


def run_int15(ref, ah, al, ea, bh, bl, eb, backend):
    return _run_int(ref, ah, al, ea, bh, bl, eb, 2, backend)


def planes(codes):
    return (codes >> 7).astype(np.int8), (codes & 127).astype(np.int8)


SHAPES = [(1, 1, 1), (15, 16, 17), (61, 73, 79), (64, 64, 32), (65, 63, 33), (70, 130, 64),
          (3, 5, 31), (2, 66, 160), (129, 2, 47)]


@pytest.mark.parametrize("backend", BACKENDS, ids=BACKEND_IDS)
@pytest.mark.parametrize("shape", SHAPES)
def test_int8_tiled(ref, backend, shape):
    """L-5: the exact sum of code products and ftz(f32(S) * pow2f(ea + eb)), on every
    backend's tiles: shapes either side of the 64 x 64 block, the 32-deep k-tile and
    the 16-byte chunks (k % 16 == 0 or not); codes over [-127, 127]; exponents from
    underflow to overflow."""
    m, n, k = shape
    rng = np.random.default_rng(m * 1000 + n * 10 + k + backend)
    a = rng.integers(-127, 128, size=(m, k), dtype=np.int8)
    b = rng.integers(-127, 128, size=(n, k), dtype=np.int8)
    for lo, hi in ((-10, 10), (-140, -60), (60, 140)):
        ea = rng.integers(lo, hi, size=m).astype(np.int32)
        eb = rng.integers(lo, hi, size=n).astype(np.int32)
        assert_same_bits(run_int8(ref, a, ea, b, eb, backend), O.gemm_int(a, ea, b, eb),
                         f"{shape} {lo}..{hi}")


@pytest.mark.parametrize("backend", BACKENDS, ids=BACKEND_IDS)
@pytest.mark.parametrize("shape", SHAPES)
def test_int15_tiled(ref, backend, shape):
    """W-2, W-3, W-5: 15-bit codes as their int8 planes (hi = code >> 7, lo = code & 127),
    multiplied plane by plane (HH, X = Ah.Bl + Al.Bh, LL) and joined exactly in int64;
    every backend, the same shapes as int8."""
    m, n, k = shape
    rng = np.random.default_rng(m * 999 + n * 7 + k + backend)
    ca = rng.integers(-16383, 16384, size=(m, k))
    cb = rng.integers(-16383, 16384, size=(n, k))
    ah, al = planes(ca)
    bh, bl = planes(cb)
    for lo, hi in ((-10, 10), (-170, -100), (60, 140)):
        ea = rng.integers(lo, hi, size=m).astype(np.int32)
        eb = rng.integers(lo, hi, size=n).astype(np.int32)
        assert_same_bits(run_int15(ref, ah, al, ea, bh, bl, eb, backend),
                         O.gemm_int15(ah, al, ea, bh, bl, eb), f"{shape} {lo}..{hi}")


@pytest.mark.parametrize("backend", BACKENDS, ids=BACKEND_IDS)
def test_int_sum_limits(ref, backend):
    """L-7, W-4 and W-5 at the largest k: int8 with k = 131072 and every product
    127 * 127 (|S| just below 2**31), int15 with k = 65536 at the code limit (S far
    past int32: HH, X and LL each exact in int32, joined in int64); the f32(S)
    rounding at 2**24 + 1 and 2**24 + 3."""
    k = 131072
    a = np.full((1, k), 127, dtype=np.int8)
    b = np.full((2, k), 127, dtype=np.int8)
    b[1] = -127
    ea = np.array([-3], np.int32)
    eb = np.array([1, 2], np.int32)
    assert_same_bits(run_int8(ref, a, ea, b, eb, backend), O.gemm_int(a, ea, b, eb), "max |S| int8")
    k = 65536
    ca = np.full((1, k), 16383)
    cb = np.stack([np.full(k, 16383), np.full(k, -16383), np.arange(k) % 32767 - 16383])
    ah, al = planes(ca)
    bh, bl = planes(cb)
    ea = np.array([-20], np.int32)
    eb = np.array([0, 1, -2], np.int32)
    assert_same_bits(run_int15(ref, ah, al, ea, bh, bl, eb, backend),
                     O.gemm_int15(ah, al, ea, bh, bl, eb), "large S int15")
    for target in (2 ** 24 + 1, 2 ** 24 + 3):
        ar, br = codes_summing_to(target, 127)
        a = np.array([ar], dtype=np.int8)
        b = np.array([br], dtype=np.int8)
        e0 = np.zeros(1, np.int32)
        got = run_int8(ref, a, e0, b, e0, backend)
        assert got[0, 0] == np.float32(target), (target, got)


@pytest.mark.parametrize("backend", BACKENDS, ids=BACKEND_IDS)
def test_int_zero_k_and_nan(ref, backend):
    """L-5: k = 0 is S = 0 (times pow2f: +0, or NaN where the scale is inf, as the
    formula says)."""
    a = np.zeros((3, 0), np.int8)
    b = np.zeros((2, 0), np.int8)
    ea = np.array([0, 100, -5], np.int32)
    eb = np.array([0, 100], np.int32)
    assert_same_bits(run_int8(ref, a, ea, b, eb, backend),
                     O.gemm_int(np.zeros((3, 1), np.int8), ea, np.zeros((2, 1), np.int8), eb), "k=0")


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS, ids=BACKEND_IDS)
def test_int_random_sweep(ref, backend):
    """L-5, W-3 on random shapes and k (slow sweep)."""
    rng = np.random.default_rng(500 + backend)
    for _ in range(10):
        m, n, k = (int(x) for x in rng.integers(1, 200, size=3))
        a = rng.integers(-127, 128, size=(m, k), dtype=np.int8)
        b = rng.integers(-127, 128, size=(n, k), dtype=np.int8)
        ea = rng.integers(-150, 150, size=m).astype(np.int32)
        eb = rng.integers(-150, 150, size=n).astype(np.int32)
        assert_same_bits(run_int8(ref, a, ea, b, eb, backend), O.gemm_int(a, ea, b, eb), f"{m}x{n}x{k}")
        ah, al = planes(rng.integers(-16383, 16384, size=(m, k)))
        bh, bl = planes(rng.integers(-16383, 16384, size=(n, k)))
        assert_same_bits(run_int15(ref, ah, al, ea, bh, bl, eb, backend),
                         O.gemm_int15(ah, al, ea, bh, bl, eb), f"int15 {m}x{n}x{k}")


@pytest.mark.parametrize("backend", BACKENDS, ids=BACKEND_IDS)
def test_int_unaligned_codes(ref, backend):
    """L-5, W-3: codes whose rows are 16-byte multiples but whose arrays start off a
    16-byte boundary give the same bits (the kernels stage them byte by byte, int_vec:
    a 16-byte load there would fault on a GPU; on the CPU this checks the byte path
    at k % 16 == 0)."""
    rng = np.random.default_rng(40 + backend)
    m, n, k = 37, 45, 96

    def shifted(x):
        buf = np.empty(x.size + 1, dtype=np.int8)
        v = buf[1:].reshape(x.shape)
        v[...] = x
        assert v.ctypes.data % 16 != 0
        return v

    a = shifted(rng.integers(-127, 128, size=(m, k), dtype=np.int8))
    b = shifted(rng.integers(-127, 128, size=(n, k), dtype=np.int8))
    ea = rng.integers(-30, 30, size=m).astype(np.int32)
    eb = rng.integers(-30, 30, size=n).astype(np.int32)
    assert_same_bits(run_int8(ref, a, ea, b, eb, backend), O.gemm_int(a, ea, b, eb), "unaligned int8")
    ah, al = (shifted(p) for p in planes(rng.integers(-16383, 16384, size=(m, k))))
    bh, bl = (shifted(p) for p in planes(rng.integers(-16383, 16384, size=(n, k))))
    assert_same_bits(run_int15(ref, ah, al, ea, bh, bl, eb, backend),
                     O.gemm_int15(ah, al, ea, bh, bl, eb), "unaligned int15")

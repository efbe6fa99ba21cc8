"""The GEMM and converter GPU kernels (mojo/gemm/gpu/, mojo/convert/gpu/), checked on
a machine without a GPU.

Two halves:

* COMPILE (slow, runs in CI): `mojo/compile_all_gpu.mojo` compiles every kernel
  offline for sm_80, sm_90 (PTX), gfx942 (AMDGCN) and apple-m3 (LLVM IR) and
  checks the code for hardware flush / approximate / TF32 arithmetic.
* ARITHMETIC: the gpu_ref_* entries of the CPU extension run the kernels' own
  per-thread bodies (mojo/{gemm,convert}/gpu/threads.mojo) in CPU loops shaped like the launches
  (leaves pass into parts[leaf][i][j], then the tree pass; the register-tiled
  leaves kernel for m >= 16 and n >= 64, as on the GPU). They are compared with
  the independent oracle (tests/oracle.py) bit for bit: fp32.v1 rules 6.1 6.2 6.3 6.4 6.5 6.6 in NN,
  NT and TN, bf16f32.v1, int8i32.v1, int15i64.v1, L-1/L-2 (bf16), L-3/L-4/W-1..W-3
  (quantize), L-6 (dequantize). Where NaN can appear only "NaN in both" is
  required for the GEMMs (payloads are not promised, fp32.v1 rule 6); the bf16
  narrowing fixes NaN bits, so those are compared exactly.

These tests are SKIPPED, with the reason, while the CPU extension does not
register the gpu_ref_* entries (mojo/_native.mojo: register_gemm_gpu_reference(m),
register_convert_gpu_reference(m)).
MOJOLEARN_GPU_REF_SO=/path/to/_name.so runs them against a separately built
module exporting the same entries (a scratch build of
mojo/gemm/gpu/cpu_run.mojo and mojo/convert/gpu/cpu_run.mojo).
What runs on real GPUs is checked by bench/device_check.sh on a GPU machine.
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from tests import oracle as O
from tests.bits import assert_same_bits, u32

ROOT = Path(__file__).resolve().parents[1]
F32 = np.float32


# ---------------------------------------------------------------- the module
_MOD = None


def _load():
    path = os.environ.get("MOJOLEARN_GPU_REF_SO", "").strip()
    if path:
        name = Path(path).name.split(".")[0]
        loader = importlib.machinery.ExtensionFileLoader(name, path)
        spec = importlib.util.spec_from_file_location(name, path, loader=loader)
        mod = importlib.util.module_from_spec(spec)
        loader.exec_module(mod)
        return mod
    from mojolearn._core.loader import native

    return native()


@pytest.fixture(scope="module")
def ref():
    global _MOD
    if _MOD is None:
        try:
            _MOD = _load()
        except ImportError as e:
            if os.environ.get("MOJOLEARN_GPU_REF_SO", "").strip():
                raise  # a module named on purpose must load
            pytest.skip(f"the CPU extension is not built ({e})")
    if not hasattr(_MOD, "gpu_ref_gemm_f32"):
        pytest.skip(
            f"{_MOD.__name__} has no gpu_ref_gemm_f32: the CPU run of the GPU kernels is "
            "not registered yet (add register_gpu_reference(m) to mojo/_native.mojo)"
        )
    return _MOD


# ---------------------------------------------------------------- helpers
def addr(x):
    assert x.flags["C_CONTIGUOUS"]
    return x.ctypes.data


def f32_bits(bits):
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def gemm_operands(a, b, trans_a, trans_b):
    """(a, b, c, m, n, k): contiguous operands as stored, (m, n, k) from their shapes and
    flags, and a NaN-filled float32 C for a kernel to overwrite."""
    a = np.ascontiguousarray(a)
    b = np.ascontiguousarray(b)
    k, m = a.shape if trans_a else a.shape[::-1]
    n = b.shape[0] if trans_b else b.shape[1]
    return a, b, np.full((m, n), np.nan, dtype=F32), m, n, k


def gpu_gemm_f32(ref, a, b, trans_a=False, trans_b=False):
    """C through gpu_ref_gemm_f32; a and b as stored (float32 or uint16 bf16 bits)."""
    a, b, c, m, n, k = gemm_operands(a, b, trans_a, trans_b)
    ref.gpu_ref_gemm_f32((addr(a), addr(b), addr(c), m, n, k, int(trans_a), int(trans_b),
                          int(a.dtype == np.uint16), int(b.dtype == np.uint16)))
    return c


def widen(x):
    return O.from_bf16(x) if x.dtype == np.uint16 else x


def oracle_gemm(a, b, trans_a=False, trans_b=False):
    a, b = widen(a), widen(b)
    if trans_a:
        return O.gemm_fp32_v1_tn(a, b)
    if trans_b:
        return O.gemm_fp32_v1_nt(a, b)
    return O.gemm_fp32_v1(a, b)


def edge_matrix(rng, rows, cols, kind):
    """float32 data with the values fp32.v1 treats specially."""
    if kind == "normal":
        return rng.standard_normal((rows, cols)).astype(F32)
    if kind == "subnormal":
        # products near 2**-126: both sides of the flush, subnormal inputs, +-0
        mant = rng.integers(0x00800000, 0x01000000, size=(rows, cols), dtype=np.uint64)
        exp = rng.integers(-70, -56, size=(rows, cols))
        x = (mant.astype(np.float64) / 2.0 ** 23 * 2.0 ** exp).astype(F32)
        x *= rng.choice([-1, 1], size=(rows, cols)).astype(F32)
        pick = rng.random((rows, cols))
        sub = f32_bits(rng.integers(1, 0x00800000, size=(rows, cols), dtype=np.uint32)
                       | (rng.integers(0, 2, size=(rows, cols), dtype=np.uint32) << 31))
        x = np.where(pick < 0.15, sub, x)
        x = np.where((pick >= 0.15) & (pick < 0.22), F32(0.0), x)
        x = np.where((pick >= 0.22) & (pick < 0.27), F32(-0.0), x)
        return x.astype(F32)
    if kind == "special":
        x = rng.standard_normal((rows, cols)).astype(F32)
        pick = rng.random((rows, cols))
        x = np.where(pick < 0.03, F32(np.inf), x)
        x = np.where((pick >= 0.03) & (pick < 0.06), F32(-np.inf), x)
        x = np.where((pick >= 0.06) & (pick < 0.08), F32(np.nan), x)
        x = np.where((pick >= 0.08) & (pick < 0.15), F32(0.0), x)
        x = np.where((pick >= 0.15) & (pick < 0.2), F32(3e38), x)
        return x.astype(F32)
    raise ValueError(kind)


def operands(rng, m, n, k, kind, trans_a, trans_b):
    a = edge_matrix(rng, k, m, kind) if trans_a else edge_matrix(rng, m, k, kind)
    b = edge_matrix(rng, n, k, kind) if trans_b else edge_matrix(rng, k, n, kind)
    return a, b


LAYOUTS = [(False, False), (False, True), (True, False)]
LAYOUT_IDS = ["NN", "NT", "TN"]


# ---------------------------------------------------------------- compile (CI)
def _mojo():
    for c in (Path(sys.executable).parent / "mojo", ROOT / ".venv" / "bin" / "mojo"):
        if c.exists():
            return str(c)
    w = shutil.which("mojo")
    if w:
        return w
    pytest.skip("the mojo compiler is not installed (pip install max==26.7.0)")


def _clean_env():
    """The environment for a child process. Loading a Mojo extension module sets
    PYTHONPATH=":" (and MOJO_PYTHON_LIBRARY, PYTHONEXECUTABLE) in the C-level
    environment, which a child would inherit: its empty entry puts the cwd (this
    repository, with its mojo/ folder) first on sys.path of the `mojo` launcher
    script, which then fails with "No module named 'mojo._entrypoints'".
    os.environ still holds the environment as it was at start-up."""
    return dict(os.environ)


@pytest.mark.slow
def test_compile_all_targets():
    """Every kernel compiles offline for NVIDIA (sm_80, sm_90), AMD (gfx942) and
    Apple (apple-m3), without .ftz / .approx / tf32 in the PTX and with f32
    denormals preserved in every AMD kernel (checks in compile_all_gpu.mojo)."""
    r = subprocess.run(
        [_mojo(), "run", "-I", "mojo", "mojo/compile_all_gpu.mojo"],
        cwd=ROOT, capture_output=True, text=True, timeout=900, env=_clean_env(),
    )
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    for tgt, kind in (("sm_80", "PTX"), ("sm_90", "PTX"), ("gfx942", "AMDGCN"),
                      ("apple-m3", "LLVM IR")):
        mt = re.search(rf"^{re.escape(tgt)}: (\d+) kernels ok \({kind}, (\d+) bytes\)$",
                       r.stdout, re.M)
        assert mt, f"no ok line for {tgt}:\n{out}"
        assert int(mt.group(1)) >= 14 and int(mt.group(2)) > 0, mt.group(0)


# ---------------------------------------------------------------- fp32.v1
@pytest.mark.parametrize("layout", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("k", [1, 2, 127, 128, 129, 255, 256, 257, 1000, 2049])
def test_f32_leaf_boundaries(ref, layout, k):
    """Rules 2-4 on either side of every leaf and tree boundary (tiny m, n)."""
    rng = np.random.default_rng(1000 + k)
    for m, n in ((1, 1), (2, 3), (3, 2)):
        a, b = operands(rng, m, n, k, "normal", *layout)
        assert_same_bits(gpu_gemm_f32(ref, a, b, *layout), oracle_gemm(a, b, *layout),
                         f"k={k} {m}x{n}")


@pytest.mark.parametrize("k", [131072, 131073])
def test_f32_leaf_size_grows(ref, k):
    """Rule 2: k = 131073 is the first k with L = 129 (1017 leaves); 131072 has 1024."""
    rng = np.random.default_rng(k)
    for layout in LAYOUTS:
        a, b = operands(rng, 1, 2, k, "normal", *layout)
        assert_same_bits(gpu_gemm_f32(ref, a, b, *layout), oracle_gemm(a, b, *layout),
                         f"k={k} {layout}")


@pytest.mark.parametrize("layout", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("kind", ["subnormal", "special"])
@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 5, 7), (7, 4, 129), (5, 9, 300), (2, 3, 1500)])
def test_f32_edge_values(ref, layout, kind, shape):
    """Rules 1, 3, 6: DAZ on inputs, the per-step flush (products around 2**-126),
    +-0, inf, NaN and overflow."""
    m, n, k = shape
    rng = np.random.default_rng(zlib.crc32(f"{kind}{shape}{layout}".encode()))
    a, b = operands(rng, m, n, k, kind, *layout)
    assert_same_bits(gpu_gemm_f32(ref, a, b, *layout), oracle_gemm(a, b, *layout),
                     f"{kind} {shape}")


@pytest.mark.parametrize("layout", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("shape", [(16, 64, 129), (37, 70, 300), (33, 129, 257), (40, 97, 1)])
def test_f32_tiled_kernel(ref, layout, shape):
    """The register-tiled leaves kernel (m >= 16 and n >= 64; 4 x 4 outputs a
    thread, edge tiles partly outside C) gives the simple kernel's bits: rules 6.1 6.2 6.3 6.4 6.5 6.6
    on edge values, float32 and bf16 operands."""
    m, n, k = shape
    rng = np.random.default_rng(zlib.crc32(f"tiled{shape}{layout}".encode()))
    for kind in ("subnormal", "special", "normal"):
        a, b = operands(rng, m, n, k, kind, *layout)
        assert_same_bits(gpu_gemm_f32(ref, a, b, *layout), oracle_gemm(a, b, *layout),
                         f"{kind} {shape}")
    a, b = operands(rng, m, n, k, "subnormal", *layout)
    a, b = O.to_bf16(a), O.to_bf16(b)
    assert_same_bits(gpu_gemm_f32(ref, a, b, *layout), oracle_gemm(a, b, *layout), "bf16")


def test_f32_flush_boundary_cases(ref):
    """Rules 1 and 3 on single products (k = 1): fma(1 - 2**-24, 2**-126, +0) is
    2**-126 (x86 hardware FTZ would give 0), -1e-20 * 1e-20 from +0 is -0.0,
    (-1) * 0 + (+0) is +0.0, a subnormal input reads as a zero of its sign."""
    cases = [
        (1 - 2.0 ** -24, 2.0 ** -126, 0x00800000),
        (-(1 - 2.0 ** -24), 2.0 ** -126, 0x80800000),
        (-1e-20, 1e-20, 0x80000000),
        (-1.0, 0.0, 0x00000000),
        (1.0, 2.0 ** -127, 0x00000000),
        (-1.0, 2.0 ** -127, 0x00000000),
        (2.0 ** -63, 2.0 ** -64, 0x00000000),
        (2.0 ** -63, -(2.0 ** -64), 0x80000000),
        (2.0 ** -63, 2.0 ** -63, 0x00800000),
        (np.inf, 0.0, None),
        (3e38, 3e38, 0x7F800000),
    ]
    for av, bv, want_bits in cases:
        a = np.array([[av]], dtype=F32)
        b = np.array([[bv]], dtype=F32)
        want = O.gemm_fp32_v1(a, b)
        got = gpu_gemm_f32(ref, a, b)
        assert_same_bits(got, want, f"{av} * {bv}")
        if want_bits is None:
            assert np.isnan(got[0, 0])
        else:
            assert u32(got)[0, 0] == want_bits, (av, bv, hex(u32(got)[0, 0]))


@pytest.mark.parametrize("b1, want_bits", [(1.25, 0x80000000), (1.5, 0x80800000)])
def test_f32_tree_flush(ref, b1, want_bits):
    """Rule 4: a tree sum is flushed: leaves 2**-125 and -b1 * 2**-125 sum to
    -2**-127 (subnormal: -0.0) for b1 = 1.25 and to -2**-126 (kept) for 1.5."""
    k = 256
    a = np.zeros((1, k), dtype=F32)
    b = np.zeros((k, 1), dtype=F32)
    a[0, 0], b[0, 0] = 2.0 ** -63, 2.0 ** -62
    a[0, 128], b[128, 0] = -(2.0 ** -63), b1 * 2.0 ** -62
    got = gpu_gemm_f32(ref, a, b)
    assert_same_bits(got, O.gemm_fp32_v1(a, b), "tree flush")
    assert u32(got)[0, 0] == want_bits


def one_product_per_leaf(rng, nleaves):
    """a (1, k), b (k, 2) with k = 128 nleaves and one nonzero product in each leaf of
    128 k-steps, values spread over 40 binary orders of magnitude: any other pairing of
    the leaves' sums changes the rounding."""
    k = nleaves * 128
    a = np.zeros((1, k), dtype=F32)
    b = np.zeros((k, 2), dtype=F32)
    pos = np.arange(nleaves) * 128 + rng.integers(0, 128, size=nleaves)
    a[0, pos] = (rng.standard_normal(nleaves) * 2.0 ** rng.integers(-20, 20, nleaves)).astype(F32)
    b[pos, :] = rng.standard_normal((nleaves, 2)).astype(F32)
    return a, b


def test_f32_tree_shapes(ref):
    """Rule 4 for every leaf count 1..40 and a few large ones: leaf j holds the
    single product 2**j-ish, so any other pairing order changes the rounding."""
    rng = np.random.default_rng(7)
    for nleaves in list(range(1, 41)) + [63, 64, 65, 127, 1000]:
        a, b = one_product_per_leaf(rng, nleaves)
        assert_same_bits(gpu_gemm_f32(ref, a, b), O.gemm_fp32_v1(a, b), f"{nleaves} leaves")


def test_f32_rows_independent(ref):
    """Rule 5: one row alone gives the bits it has inside a larger product."""
    rng = np.random.default_rng(11)
    a, b = operands(rng, 6, 5, 300, "normal", False, False)
    full = gpu_gemm_f32(ref, a, b)
    for i in range(6):
        assert_same_bits(gpu_gemm_f32(ref, a[i:i + 1], b), full[i:i + 1], f"row {i}")


# ---------------------------------------------------------------- bf16f32.v1
@pytest.mark.parametrize("layout", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("a_bits", [False, True], ids=["a_f32", "a_bf16"])
@pytest.mark.parametrize("k", [1, 129, 257])
def test_bf16_operands(ref, layout, a_bits, k):
    """bf16f32.v1: bf16 bits widened exactly (then DAZ) and fp32.v1 on them."""
    rng = np.random.default_rng(k * 2 + a_bits)
    for kind in ("normal", "subnormal", "special"):
        a, b = operands(rng, 3, 4, k, kind, *layout)
        b = O.to_bf16(b)
        if a_bits:
            a = O.to_bf16(a)
        assert_same_bits(gpu_gemm_f32(ref, a, b, *layout), oracle_gemm(a, b, *layout),
                         f"{kind} k={k}")
    # bf16 bit patterns that are subnormal after widening are read as zeros
    a = np.array([[1.0, 1.0]], dtype=F32)
    b = np.array([[0x0001], [0x807F]], dtype=np.uint16)
    assert u32(gpu_gemm_f32(ref, a, b))[0, 0] == 0


# ---------------------------------------------------------------- int8 / int15
def codes_summing_to(target, cmax):
    """Two code rows a, b with sum(a * b) == target exactly (target >= 0)."""
    a, b = [], []
    q, r = divmod(target, cmax * cmax)
    a += [cmax] * q
    b += [cmax] * q
    q2, r2 = divmod(r, cmax)
    a += [cmax] * q2
    b += [1] * q2
    if r2:
        a.append(r2)
        b.append(1)
    return a, b


def int8_call(ref, a, ea, b, eb):
    m, k = a.shape
    n = b.shape[0]
    c = np.full((m, n), np.nan, dtype=F32)
    ref.gpu_ref_gemm_int8((addr(a), addr(ea), addr(b), addr(eb), addr(c), m, n, k))
    return c


def int15_call(ref, ah, al, ea, bh, bl, eb):
    m, k = ah.shape
    n = bh.shape[0]
    c = np.full((m, n), np.nan, dtype=F32)
    ref.gpu_ref_gemm_int15((addr(ah), addr(al), addr(ea), addr(bh), addr(bl), addr(eb),
                            addr(c), m, n, k))
    return c


@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 5, 7), (4, 3, 129), (2, 2, 4099)])
def test_int8_gemm_random(ref, shape):
    """int8i32.v1: exact integer sum, epilogue ftz(f32(S) * pow2f(ea + eb)),
    exponents spanning underflow (-> 0 / flushed), normal and overflow (-> inf)."""
    m, n, k = shape
    rng = np.random.default_rng(k)
    a = rng.integers(-127, 128, size=(m, k), dtype=np.int8)
    b = rng.integers(-127, 128, size=(n, k), dtype=np.int8)
    for lo, hi in ((-10, 10), (-140, -60), (60, 140), (-200, 200)):
        ea = rng.integers(lo, hi, size=m).astype(np.int32)
        eb = rng.integers(lo, hi, size=n).astype(np.int32)
        assert_same_bits(int8_call(ref, a, ea, b, eb), O.gemm_int(a, ea, b, eb),
                         f"{shape} exps {lo}..{hi}")


def test_int8_gemm_edges(ref):
    """f32(S) rounds to nearest even (2**24 + 1 -> 2**24, 2**24 + 3 -> 2**24 + 4),
    the largest sum of the L-7 domain (k = 131072, all codes 127) is exact, and
    S = 0 times an infinite scale is NaN as the formula says."""
    for target in (2 ** 24 + 1, 2 ** 24 + 3, 2 ** 24 - 1, 2 ** 25 + 5):
        ar, br = codes_summing_to(target, 127)
        for sign in (1, -1):
            a = np.array([ar], dtype=np.int8) * np.int8(sign)
            b = np.array([br], dtype=np.int8)
            e0 = np.zeros(1, dtype=np.int32)
            got = int8_call(ref, a, e0, b, e0)
            assert_same_bits(got, O.gemm_int(a, e0, b, e0), f"S={sign * target}")
            assert got[0, 0] == np.float32(sign * target)
    k = 131072
    a = np.full((1, k), 127, dtype=np.int8)
    b = np.full((2, k), 127, dtype=np.int8)
    b[1] = -127
    e = np.array([-3], dtype=np.int32)
    eb = np.array([1, 2], dtype=np.int32)
    assert_same_bits(int8_call(ref, a, e, b, eb), O.gemm_int(a, e, b, eb), "max |S|")
    a = np.zeros((1, 3), dtype=np.int8)
    got = int8_call(ref, a, np.array([100], np.int32), a, np.array([100], np.int32))
    assert np.isnan(got[0, 0])


@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 5, 7), (4, 3, 129), (2, 2, 3001)])
def test_int15_gemm_random(ref, shape):
    """int15i64.v1: codes hi*128 + lo, exact int64 sum, the same epilogue."""
    m, n, k = shape
    rng = np.random.default_rng(k + 1)
    ca = rng.integers(-16383, 16384, size=(m, k))
    cb = rng.integers(-16383, 16384, size=(n, k))
    ah, al = (ca >> 7).astype(np.int8), (ca & 127).astype(np.int8)
    bh, bl = (cb >> 7).astype(np.int8), (cb & 127).astype(np.int8)
    for lo, hi in ((-10, 10), (-170, -100), (60, 140)):
        ea = rng.integers(lo, hi, size=m).astype(np.int32)
        eb = rng.integers(lo, hi, size=n).astype(np.int32)
        assert_same_bits(int15_call(ref, ah, al, ea, bh, bl, eb),
                         O.gemm_int15(ah, al, ea, bh, bl, eb), f"{shape} {lo}..{hi}")


def test_int15_gemm_edges(ref):
    """Sums beyond int32 (k = 65536 at the code limit, W-4's largest), and the
    f32(S) rounding at 2**24 + 1 / + 3 built from 15-bit codes."""
    k = 65536
    ca = np.full((1, k), 16383)
    cb = np.stack([np.full(k, 16383), np.full(k, -16383), np.arange(k) % 32767 - 16383])
    ah, al = (ca >> 7).astype(np.int8), (ca & 127).astype(np.int8)
    bh, bl = (cb >> 7).astype(np.int8), (cb & 127).astype(np.int8)
    ea = np.array([-20], dtype=np.int32)
    eb = np.array([0, 1, -2], dtype=np.int32)
    assert_same_bits(int15_call(ref, ah, al, ea, bh, bl, eb),
                     O.gemm_int15(ah, al, ea, bh, bl, eb), "large S")
    for target in (2 ** 24 + 1, 2 ** 24 + 3, 2 ** 31 + 7):
        ar, br = codes_summing_to(target, 16383)
        ca, cb = np.array([ar]), np.array([br])
        ah, al = (ca >> 7).astype(np.int8), (ca & 127).astype(np.int8)
        bh, bl = (cb >> 7).astype(np.int8), (cb & 127).astype(np.int8)
        e0 = np.zeros(1, dtype=np.int32)
        got = int15_call(ref, ah, al, e0, bh, bl, e0)
        assert_same_bits(got, O.gemm_int15(ah, al, e0, bh, bl, e0), f"S={target}")
        assert got[0, 0] == np.float32(target)


# ---------------------------------------------------------------- converters
EDGE_BITS = np.array([
    0x00000000, 0x80000000, 0x00000001, 0x007FFFFF, 0x807FFFFF, 0x80000001,
    0x00800000, 0x80800000, 0x3F800000, 0xBF800000, 0x7F7FFFFF, 0xFF7FFFFF,
    0x7F7F8000, 0x7F7F7FFF, 0x7F800000, 0xFF800000, 0x7F800001, 0x7FC00000,
    0xFFC00000, 0x7FBFFFFF, 0xFFFFFFFF, 0x7F8000FF, 0x3F808000, 0x3F818000,
    0x3F807FFF, 0x3F808001, 0x3F80FFFF, 0x00FF8000, 0x0080FFFF,
], dtype=np.uint32)


def test_to_bf16_edges_and_random(ref):
    """L-2: DAZ, round to nearest even on the bits, overflow to inf, NaN quieted
    with its top payload bits kept (NaN bits are promised here: compared exactly)."""
    rng = np.random.default_rng(5)
    bits = np.concatenate([EDGE_BITS, rng.integers(0, 2 ** 32, size=200_000, dtype=np.uint32)])
    x = bits.view(F32)
    out = np.zeros(bits.size, dtype=np.uint16)
    ref.gpu_ref_to_bf16((addr(x), addr(out), x.size))
    want = O.to_bf16(x)
    bad = np.nonzero(out != want)[0]
    assert bad.size == 0, f"{bad.size} differ, first {bits[bad[0]]:#010x}: {out[bad[0]]:#06x} vs {want[bad[0]]:#06x}"


def test_from_bf16_all_patterns(ref):
    """L-1: bits << 16 for all 65536 patterns, no flush."""
    src = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    out = np.zeros(65536, dtype=F32)
    ref.gpu_ref_from_bf16((addr(src), addr(out), 65536))
    assert np.array_equal(u32(out), u32(O.from_bf16(src)))


def quant_rows(rng, k):
    """Rows that hit every quantizer rule."""
    rows = [
        np.zeros(k),
        np.full(k, np.nan),
        f32_bits(rng.integers(1, 0x00800000, size=k, dtype=np.uint32)),   # subnormals only
        np.where(np.arange(k) % 3 == 0, np.inf, 1.0),
        np.where(np.arange(k) % 2 == 0, -np.inf, np.nan),
        rng.standard_normal(k) * 3e38,
        rng.standard_normal(k) * 2.0 ** -122,                            # pow2f(-e) = inf
        rng.standard_normal(k) * 2.0 ** -110,
        (np.arange(k) % 8 - 4) * 0.5 + 64.0 * (np.arange(k) == 0),       # ties: rne
        rng.standard_normal(k),
        rng.standard_normal(k) * 2.0 ** rng.integers(-30, 30, size=k),
    ]
    with np.errstate(over="ignore"):
        x = np.stack([np.asarray(r, dtype=np.float64).astype(F32) for r in rows])
    pick = rng.random(x.shape)
    x[9] = np.where(pick[9] < 0.2, F32(np.nan), x[9])
    x[9] = np.where((pick[9] > 0.2) & (pick[9] < 0.3), F32(-0.0), x[9])
    return np.ascontiguousarray(x)


@pytest.mark.parametrize("k", [1, 7, 64, 300])
def test_quantize_int8(ref, k):
    """L-3/L-4: per-row exponent from the absmax (NaN ignored, DAZ, inf -> 122, empty
    -> 0), codes rne + clamp to +-127, NaN -> 0; and L-6 dequantize back."""
    x = quant_rows(np.random.default_rng(k), k)
    m = x.shape[0]
    codes = np.full((m, k), 99, dtype=np.int8)
    exps = np.full(m, 12345, dtype=np.int32)
    ref.gpu_ref_quantize_int8((addr(x), addr(codes), addr(exps), m, k))
    wc, we = O.quantize_int8(x)
    assert np.array_equal(exps, we), (exps, we)
    assert np.array_equal(codes, wc)
    out = np.zeros((m, k), dtype=F32)
    ref.gpu_ref_dequantize_int8((addr(codes), addr(exps), addr(out), m, k))
    assert_same_bits(out, O.dequantize_int8(wc, we), "dequantize_int8")


@pytest.mark.parametrize("k", [1, 7, 64, 300])
def test_quantize_int15(ref, k):
    """W-1..W-3: exponent shift 13, codes clamp to +-16383, hi = code >> 7,
    lo = code & 127; and L-6 dequantize back."""
    x = quant_rows(np.random.default_rng(100 + k), k)
    m = x.shape[0]
    hi = np.full((m, k), 99, dtype=np.int8)
    lo = np.full((m, k), 99, dtype=np.int8)
    exps = np.full(m, 12345, dtype=np.int32)
    ref.gpu_ref_quantize_int15((addr(x), addr(hi), addr(lo), addr(exps), m, k))
    wh, wl, we = O.quantize_int15(x)
    assert np.array_equal(exps, we), (exps, we)
    assert np.array_equal(hi, wh)
    assert np.array_equal(lo, wl)
    out = np.zeros((m, k), dtype=F32)
    ref.gpu_ref_dequantize_int15((addr(hi), addr(lo), addr(exps), addr(out), m, k))
    assert_same_bits(out, O.dequantize_int15(wh, wl, we), "dequantize_int15")


def test_dequantize_extreme_exponents(ref):
    """L-6: exponents below -126 give zeros (flushed), above 127 infinities."""
    codes = np.array([[1, -1, 127, 0], [3, -5, 0, 64], [1, 2, 3, 4]], dtype=np.int8)
    exps = np.array([-140, 130, -133], dtype=np.int32)
    out = np.zeros((3, 4), dtype=F32)
    ref.gpu_ref_dequantize_int8((addr(codes), addr(exps), addr(out), 3, 4))
    assert_same_bits(out, O.dequantize_int8(codes, exps), "extreme exponents")


# ---------------------------------------------------------------- device check script
@pytest.mark.slow
def test_device_check_cpu_half():
    """bench/device_check.sh --cpu-half: the CPU-side steps of the GPU machine check
    (the GPU host module compiles for sm_90, CPU conformance passes)."""
    if not (ROOT / "python" / "mojolearn" / "_native_v3.so").exists():
        pytest.skip("the CPU builds are not built (make build)")
    r = subprocess.run(["bash", "bench/device_check.sh", "--cpu-half"], cwd=ROOT,
                       capture_output=True, text=True, timeout=1200, env=_clean_env())
    assert r.returncode == 0, r.stdout + r.stderr
    assert "device_check: cpu half ok" in r.stdout, r.stdout

"""The GPU kernels (mojo/gpu/), checked on a machine without a GPU.

Two halves:

* COMPILE (slow, runs in CI): `mojo/gpu/compile_all.mojo` compiles every kernel
  offline for sm_80, sm_90 (PTX), gfx942 (AMDGCN) and apple-m3 (LLVM IR) and
  checks the code for hardware flush / approximate / TF32 arithmetic.
* ARITHMETIC: the gpu_ref_* entries of the CPU extension run the kernels' own
  per-thread bodies (mojo/gpu/threads.mojo) in CPU loops shaped like the launches
  (leaves pass into parts[leaf][i][j], then the tree pass). They are compared with
  the independent oracle (tests/oracle.py) bit for bit: fp32.v1 rules 1-6 in NN,
  NT and TN, bf16f32.v1, int8i32.v1, int15i64.v1, L-1/L-2 (bf16), L-3/L-4/W-1..W-3
  (quantize), L-6 (dequantize). Where NaN can appear only "NaN in both" is
  required for the GEMMs (payloads are not promised, fp32.v1 rule 6); the bf16
  narrowing fixes NaN bits, so those are compared exactly.

These tests are SKIPPED, with the reason, while the CPU extension does not
register the gpu_ref_* entries (mojo/_native.mojo: register_gpu_reference(m)).
MOJOLEARN_GPU_REF_SO=/path/to/_name.so runs them against a separately built
module exporting the same entries (a scratch build of mojo/gpu/cpu_run.mojo).
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
from pathlib import Path

import numpy as np
import pytest

from tests import oracle as O

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
    from mojolearn._native_loader import native

    return native()


@pytest.fixture(scope="module")
def ref():
    global _MOD
    if _MOD is None:
        try:
            _MOD = _load()
        except ImportError as e:
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


def u32(x):
    return np.ascontiguousarray(x).view(np.uint32)


def f32_bits(bits):
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def assert_same_bits(got, exp, what=""):
    """float32 bit equality; at NaN positions both must be NaN (payload free)."""
    assert got.dtype == F32 and exp.dtype == F32, what
    assert got.shape == exp.shape, (what, got.shape, exp.shape)
    gn, en = np.isnan(got), np.isnan(exp)
    assert np.array_equal(gn, en), f"{what}: NaN positions differ"
    bad = np.nonzero((u32(got) != u32(exp)) & ~en)
    if bad[0].size:
        idx = tuple(b[0] for b in bad)
        raise AssertionError(
            f"{what}: {bad[0].size} elements differ, first at {idx}: "
            f"got {u32(got)[idx]:#010x} want {u32(exp)[idx]:#010x}"
        )


def gpu_gemm_f32(ref, a, b, trans_a=False, trans_b=False):
    """C through gpu_ref_gemm_f32; a and b as stored (float32 or uint16 bf16 bits)."""
    a = np.ascontiguousarray(a)
    b = np.ascontiguousarray(b)
    k, m = a.shape if trans_a else a.shape[::-1]
    if not trans_a:
        m, k = a.shape
    n = b.shape[0] if trans_b else b.shape[1]
    c = np.full((m, n), np.nan, dtype=F32)
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


@pytest.mark.slow
def test_compile_all_targets():
    """Every kernel compiles offline for NVIDIA (sm_80, sm_90), AMD (gfx942) and
    Apple (apple-m3), without .ftz / .approx / tf32 in the PTX and with f32
    denormals preserved in every AMD kernel (checks in compile_all.mojo)."""
    r = subprocess.run(
        [_mojo(), "run", "-I", "mojo", "mojo/gpu/compile_all.mojo"],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
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
    rng = np.random.default_rng(hash((kind, shape)) & 0xFFFF)
    a, b = operands(rng, m, n, k, kind, *layout)
    assert_same_bits(gpu_gemm_f32(ref, a, b, *layout), oracle_gemm(a, b, *layout),
                     f"{kind} {shape}")


def test_f32_flush_boundary_cases(ref):
    """Rule 3: fma(1 - 2**-24, 2**-126, +0) is 2**-126 (x86 hardware FTZ gives 0);
    -1e-20 * 1e-20 from +0 is -0.0; (-1) * 0 + (+0) is +0.0; subnormal inputs read as 0."""
    cases = [
        (1 - 2.0 ** -24, 2.0 ** -126, 0x00800000),
        (-(1 - 2.0 ** -24), 2.0 ** -126, 0x80800000),
        (-1e-20, 1e-20, 0x80000000),
        (-1.0, 0.0, 0x00000000),
        (1.0, 2.0 ** -127, 0x00000000),       # subnormal b: DAZ -> +0
        (-1.0, 2.0 ** -127, 0x80000000),      # -1 * +0 + +0 -> hmm: fma gives +0
        (2.0 ** -63, 2.0 ** -64, 0x00000000),  # 2**-127 exact: flushed
        (2.0 ** -63, 2.0 ** -63, 0x00800000),  # 2**-126 exact: kept
    ]
    for av, bv, _ in cases:
        a = np.array([[av]], dtype=F32)
        b = np.array([[bv]], dtype=F32)
        want = O.gemm_fp32_v1(a, b)
        assert_same_bits(gpu_gemm_f32(ref, a, b), want, f"{av} * {bv}")
    a = np.array([[1 - 2.0 ** -24]], dtype=F32)
    b = np.array([[2.0 ** -126]], dtype=F32)
    assert u32(gpu_gemm_f32(ref, a, b))[0, 0] == 0x00800000
    a = np.array([[-1e-20]], dtype=F32)
    b = np.array([[1e-20]], dtype=F32)
    assert u32(gpu_gemm_f32(ref, a, b))[0, 0] == 0x80000000
    a = np.array([[-1.0]], dtype=F32)
    b = np.array([[0.0]], dtype=F32)
    assert u32(gpu_gemm_f32(ref, a, b))[0, 0] == 0x00000000


def test_f32_tree_flush(ref):
    """Rule 4: the tree sums are flushed: two leaves whose sum is subnormal give a
    signed zero, and a leaf of exactly 2**-126 survives."""
    k = 256
    a = np.zeros((1, k), dtype=F32)
    b = np.zeros((k, 1), dtype=F32)
    a[0, 0], b[0, 0] = 2.0 ** -63, 2.0 ** -62          # leaf 0: 2**-125
    a[0, 128], b[128, 0] = -(2.0 ** -63), 1.5 * 2.0 ** -62  # leaf 1: -1.5 * 2**-125
    got = gpu_gemm_f32(ref, a, b)
    assert_same_bits(got, O.gemm_fp32_v1(a, b), "tree flush")
    assert u32(got)[0, 0] == 0x80000000  # -2**-126 ... exact sum -0.5*2**-125 = -2**-126?

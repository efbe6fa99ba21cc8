"""numeric_mode fast's vendor route, host side (mojo/gemm/gpu/vendor.mojo), without a
GPU: tests/vendor_blas_driver.mojo, built for sm_90 and gfx942, runs against stand-ins
for cuBLAS and rocBLAS (tests/fake_blas.c, a naive column-major GEMM that records what it
was asked) found through LD_LIBRARY_PATH.

* Every layout (NN, NT, TN) of several shapes gives A B through the row-major to
  column-major mapping, and cuBLAS is asked for CUBLAS_COMPUTE_32F (68) with
  CUBLAS_DEFAULT_MATH (0), or with TF32 allowed CUBLAS_COMPUTE_32F_FAST_TF32 (77) with
  CUBLAS_TF32_TENSOR_OP_MATH (3): the values of cublas_api.h, so MAX's binding passes them.
* No library, and a library that opens first but lacks a symbol the route calls, are
  refusals naming the library and the way out; the process does not abort (MAX's
  binding alone would: "symbol not found").
The device check (bench/device_check.sh step 6d) runs the real libraries on a GPU.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.test_gpu import _clean_env, _mojo

ROOT = Path(__file__).resolve().parents[1]
CASE = re.compile(r"^case (\d+) (\d+) (\d+) (\d) (\d) (\d): (\w+) compute=(-?\d+) math=(-?\d+) calls=(\d+)$")

pytestmark = pytest.mark.slow

NAMES = {"cuBLAS": ("libcublas.so.13", "/usr/local/cuda-13.1/lib64/libcublas.so.13",
                    "/usr/local/cuda-13.0/lib64/libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so.13",
                    "libcublas.so.12", "/usr/local/cuda-12.8/lib64/libcublas.so.12",
                    "/usr/local/cuda/lib64/libcublas.so.12"),
         "rocBLAS": ("librocblas.so.4", "librocblas.so.5", "/opt/rocm/lib/librocblas.so.4",
                     "/opt/rocm/lib/librocblas.so.5")}


def _installed(lib):
    """Whether this machine has the real library under a name the route looks for (the
    stand-ins would then not be the ones found)."""
    import ctypes

    for name in NAMES[lib]:
        try:
            ctypes.CDLL(name)
            return True
        except OSError:
            continue
    return False


def _need_absent(lib):
    if _installed(lib):
        pytest.skip(f"this machine has {lib} installed: the stand-in would not be the one found")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """{"sm_90": driver, "gfx942": driver, "nv": dir, "nvbad": dir, "amd": dir}."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler for the stand-in libraries")
    out = tmp_path_factory.mktemp("vendor_blas")
    src = ROOT / "tests" / "fake_blas.c"
    libs = {"nv": ("libcublas.so.12", ["-DFAKE_CUBLAS"]),
            "nvbad": ("libcublas.so.13", ["-DFAKE_CUBLAS", "-DFAKE_NO_GEMMEX"]),
            "amd": ("librocblas.so.4", [])}
    got = {}
    for key, (name, flags) in libs.items():
        (out / key).mkdir()
        subprocess.run([cc, "-shared", "-fPIC", "-O1", *flags, str(src), "-o",
                        str(out / key / name)], check=True)
        got[key] = out / key
    for tgt in ("sm_90", "gfx942"):
        exe = out / f"driver_{tgt}"
        r = subprocess.run([_mojo(), "build", "-I", "mojo", "--target-accelerator", tgt,
                            "tests/vendor_blas_driver.mojo", "-o", str(exe)],
                           cwd=ROOT, capture_output=True, text=True, timeout=900, env=_clean_env())
        assert r.returncode == 0 and exe.exists(), r.stdout + r.stderr
        got[tgt] = exe
    return got


def _run(exe, *dirs):
    env = _clean_env()
    env["LD_LIBRARY_PATH"] = os.pathsep.join([str(d) for d in dirs] + [
        p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p])
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300, env=env)
    return r.returncode, r.stdout, r.stderr


def _cases(out):
    return [CASE.match(line).groups() for line in out.splitlines() if line.startswith("case ")]


def test_cublas_mapping_and_math_mode(built):
    _need_absent("cuBLAS")
    rc, out, err = _run(built["sm_90"], built["nv"])
    assert rc == 0, out + err
    assert "library: cuBLAS | libcublas.so.12 | " in out and "require: ok" in out
    cases = _cases(out)
    assert len(cases) == 6 * 3 * 2, out
    for c in cases:
        tf32 = c[5] == "1"
        assert c[6] == "ok", c
        assert (int(c[7]), int(c[8])) == ((77, 3) if tf32 else (68, 0)), c
    assert {(c[3], c[4]) for c in cases} == {("0", "0"), ("0", "1"), ("1", "0")}
    assert int(cases[-1][9]) == len(cases)  # every case reached the library


def test_rocblas_mapping(built):
    _need_absent("rocBLAS")
    rc, out, err = _run(built["gfx942"], built["amd"])
    assert rc == 0, out + err
    assert "library: rocBLAS | librocblas.so.4 | " in out and "require: ok" in out
    cases = _cases(out)
    assert len(cases) == 6 * 3 and all(c[6] == "ok" for c in cases), out
    assert int(cases[-1][9]) == len(cases)


@pytest.mark.parametrize("tgt,lib,names", [
    ("sm_90", "cuBLAS", "none of libcublas.so.13, /usr/local/cuda-13.1/lib64/libcublas.so.13"),
    ("gfx942", "rocBLAS", "none of librocblas.so.4, librocblas.so.5"),
])
def test_missing_library_is_a_refusal_not_an_abort(built, tgt, lib, names):
    _need_absent(lib)
    rc, out, err = _run(built[tgt])
    assert rc == 0, out + err
    assert f"library: {lib} |  | {names}" in out, out
    assert (f"require: mojolearn._native_gpu: numeric_mode fast runs {lib} on this GPU build "
            f"and {lib} cannot be loaded here: none of") in out
    assert "set numeric_mode identical to run the identical kernels" in out
    assert "case " not in out


def test_first_library_without_a_symbol_is_refused(built):
    """libcublas.so.13 opens first but lacks cublasGemmEx: the binding would take it and
    abort on the symbol, so the route refuses it, even with a good .so.12 behind it."""
    _need_absent("cuBLAS")
    rc, out, err = _run(built["sm_90"], built["nvbad"], built["nv"])
    assert rc == 0, out + err
    assert ("library: cuBLAS |  | libcublas.so.13 opens but lacks the symbol cublasGemmEx that "
            "this route calls") in out, out
    assert "require: mojolearn._native_gpu: numeric_mode fast runs cuBLAS" in out
    assert "ABORT" not in out + err and "case " not in out

"""Support for tests/test_explicit_flush.py: the explicit-flush test build and the
edge-value cases run on it and on the shipped build.

The explicit-flush build (build_native.py --explicit-flush; mojo/common/fpstate.mojo)
runs the kernels with DAZ off and flushes every input in code, as every non-x86
target must. It is built for one ISA as ``_native_<isa>`` into a copy of the package
under ``.build/explicit-flush/``, so a child process with that folder first on its
path and ``MOJOLEARN_ISA=<isa>`` loads it through the ordinary loader.

    python tests/flush_cases.py          # prints {case: hash} of this process's build

The cases are chosen to tell the two ways of reading subnormal inputs apart: chains
whose accumulator turns subnormal and would grow back to normal without the
per-step flush, products that round up to 2**-126 (kept: FTZ is off in both), and
subnormal operands of every kernel (GEMMs in every layout and path, bf16, the
quantizers, and the models' ops: RMSNorm, RoPE, SiLU, add, softmax, mean, the
elementary functions, attention under both profiles).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VARIANT_ROOT = ROOT / ".build" / "explicit-flush"


# The ARM64 stand-in: the explicit-flush build for baseline x86-64-v2 (SSE4.2: 4 float32
# lanes as NEON, no AVX2, so the integer GEMMs take their portable multiply-add, as on
# ARM), built under the v3 module name so the ordinary loader (MOJOLEARN_ISA=v3) loads it.
W4 = ("v3", "x86-64-v2", "", ROOT / ".build" / "explicit-flush-w4")


def variant_package(isa: str, force: bool = False, cpu: str | None = None,
                    features: str | None = None, root: Path = VARIANT_ROOT) -> Path:
    """Build (when its sources changed) the explicit-flush `isa` build (for the ISA's
    own target, or for `cpu` / `features` under the ISA's module name) into a copy of
    the package under `root`; returns `root`, the folder to put first on PYTHONPATH."""
    sys.path.insert(0, str(ROOT))
    try:
        import build_native as bn
    finally:
        sys.path.pop(0)
    table = bn.isa_table()
    row = next(r for r in table.ISAS if r[0] == isa)
    pkg = root / "mojolearn"
    src = ROOT / "python" / "mojolearn"
    # the Python files are copied fresh every time (cheap); the extension only when stale
    for p in src.rglob("*"):
        rel = p.relative_to(src)
        if "__pycache__" in rel.parts or "_results" in rel.parts or p.suffix == ".so":
            continue
        dst = pkg / rel
        if p.is_dir():
            dst.mkdir(parents=True, exist_ok=True)
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, dst)
    probe = table.PROBE[0] + ".so"
    if not (src / probe).exists():
        bn.build(src, table.PROBE[2], table.PROBE[0], entry=bn.SRC / table.PROBE[1], quiet=True)
    shutil.copy2(src / probe, pkg / probe)
    bn.build(pkg, cpu or row[2], row[1], force=force, quiet=True,
             features=row[3] if features is None else features,
             defines=bn.EXPLICIT_FLUSH_DEFINES)
    return root


def child_env(isa: str, first: Path) -> dict:
    """The environment of a child that loads the `isa` build found under `first`."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("MOJOLEARN_NATIVE", "MOJOLEARN_CPU_HIDE", "MOJOLEARN_DEVICE")}
    env["MOJOLEARN_ISA"] = isa
    env["MOJOLEARN_DEVICE"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join([str(first), str(ROOT / "tests"), str(ROOT)])
    return env


# ------------------------------------------------------------------ the cases
def _h(*arrays) -> str:
    import numpy as np

    d = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(np.asarray(a))
        d.update(str(a.dtype).encode())
        d.update(str(a.shape).encode())
        d.update(a.tobytes())
    return d.hexdigest()[:16]


def edge_matrix(rng, shape, kind: str):
    """float32 values that separate DAZ from no DAZ.
    tiny:   |x| near 2**-63, so products lie around 2**-126 (subnormal or just normal)
            and a chain of them turns subnormal and would grow back without the flush;
    mixed:  normals, subnormals of both signs, signed zeros, 2**-126 and its neighbours,
            values a step below 1 (fma(1 - 2**-24, 2**-126, +0) rounds up to 2**-126)."""
    import numpy as np

    n = int(np.prod(shape))
    if kind == "tiny":
        x = (rng.uniform(0.5, 1.5, n) * 2.0 ** -63).astype(np.float32)
        x *= rng.choice(np.array([1, -1], np.float32), n, p=[0.8, 0.2])
        return x.reshape(shape)
    pick = rng.integers(0, 8, n)
    normal = rng.standard_normal(n).astype(np.float32)
    sub = rng.integers(1, 1 << 23, n, dtype=np.int64).astype(np.uint32).view(np.float32)
    sub = sub * rng.choice(np.array([1, -1], np.float32), n)
    fmin = np.float32(2.0 ** -126)
    near = np.array([fmin, -fmin, np.nextafter(fmin, np.float32(1)), 1 - 2.0 ** -24,
                     -(1 - 2.0 ** -24), 2.0 ** -63, 0.0, -0.0], np.float32)
    x = np.where(pick < 3, normal, np.where(pick < 6, sub, near[rng.integers(0, 8, n)]))
    return x.astype(np.float32).reshape(shape)


def cases() -> dict:
    import numpy as np

    import mojolearn
    from mojolearn import linalg
    from mojolearn.models._exec import kernels as K

    rng = np.random.default_rng(2024)
    out = {}
    F = np.float32
    # fp32.v1 / bf16f32.v1: the rows path (m <= 4: NN, the NT fused and chunked paths),
    # the packed paths (small and large m), several leaves, TN, 1 and 2 threads
    shapes = [(1, 70, 300), (3, 64, 256), (4, 33, 129), (37, 45, 300), (150, 40, 130),
              (13, 96, 2100), (2, 200, 1024)]
    for threads in (1, 2):
        mojolearn.set_num_threads(threads)
        for m, n, k in shapes:
            for kind in ("tiny", "mixed"):
                a = edge_matrix(rng, (m, k), kind)
                b = edge_matrix(rng, (k, n), kind)
                bt = np.ascontiguousarray(b.T)
                at = np.ascontiguousarray(a.T)
                key = f"t{threads}/{m}x{n}x{k}/{kind}"
                out[f"fp32/NN/{key}"] = _h(linalg.matmul(a, b))
                out[f"fp32/NT/{key}"] = _h(linalg.matmul(a, bt, transpose_b=True))
                out[f"fp32/TN/{key}"] = _h(linalg.matmul(at, b, transpose_a=True))
                out[f"bf16/NT/{key}"] = _h(linalg.matmul_bf16(a, linalg.to_bf16(bt),
                                                              transpose_b=True))
                if k <= 65536:
                    out[f"int8/{key}"] = _h(linalg.matmul_int8(a, bt))
                    out[f"int15/{key}"] = _h(linalg.matmul_int15(a, bt))
    mojolearn.set_num_threads(2)
    x = edge_matrix(rng, (9, 131), "mixed")
    out["to_bf16"] = _h(linalg.to_bf16(x))
    q8 = linalg.quantize_int8(x)
    out["quantize_int8"] = _h(*q8)
    out["dequantize_int8"] = _h(linalg.dequantize_int8(*q8))
    q15 = linalg.quantize_int15(x)
    out["quantize_int15"] = _h(*q15)
    out["dequantize_int15"] = _h(linalg.dequantize_int15(*q15))
    # the models' ops
    for kind in ("tiny", "mixed"):
        x = edge_matrix(rng, (5, 96), kind)
        w = edge_matrix(rng, (96,), "mixed")
        for eps in (F(1e-5), F(1e-40), F(0)):
            eps_bits = int(np.array(eps, F).view(np.uint32))
            out[f"rmsnorm/{kind}/{eps_bits:#x}"] = _h(K.rmsnorm(x, w, eps_bits, np.empty_like(x)))
        gu = edge_matrix(rng, (4, 2 * 40), kind)
        out[f"silu_mul/{kind}"] = _h(K.silu_mul(gu, 40, np.empty((4, 40), F)))
        y = edge_matrix(rng, (5, 96), kind)
        out[f"add/{kind}"] = _h(K.add(x, y, np.empty_like(x)))
        out[f"add_bias/{kind}"] = _h(K.add(x, w, np.empty_like(x)))
        v = edge_matrix(rng, (3, 77), kind)
        out[f"softmax/{kind}"] = _h(K.softmax_rows(v))
        out[f"log_softmax/{kind}"] = _h(K.softmax_rows(v, log=True))
        out[f"mean/{kind}"] = _h(K.mean_rows(v))
        for op in K.ELEMENTWISE:
            out[f"elementwise/{op}/{kind}"] = _h(K.elementwise(op, edge_matrix(rng, (333,), kind)))
    special = np.array([0.0, -0.0, 1e-40, -1e-40, 2.0 ** -126, -(2.0 ** -126), np.inf, -np.inf,
                        np.nan, 1.0, -1.0, 88.0, -88.0, 100.0, -100.0], F)
    for op in K.ELEMENTWISE:
        out[f"elementwise/{op}/special"] = _h(K.elementwise(op, special))
    hd, nh, npos = 64, 3, 12
    theta_bits = int(np.array(F(10000.0), F).view(np.uint32))
    cos, sin = K.rope_table(npos, hd, theta_bits)
    out["rope_table"] = _h(cos, sin)
    cos2 = cos.copy()
    sin2 = sin.copy()
    cos2[:, ::5] = F(1e-39)
    sin2[:, 1::7] = F(-2e-40)
    for kind in ("tiny", "mixed"):
        src = edge_matrix(rng, (npos, nh * hd), kind)
        for name, (c, s) in (("table", (cos, sin)), ("subnormal_table", (cos2, sin2))):
            dst = np.empty_like(src)
            K.rope(src, 0, nh * hd, dst, nh * hd, hd, nh, hd, c, s, 0, npos, npos)
            out[f"rope/{kind}/{name}"] = _h(dst)
    # attention: one leaf with shared heads (64), a head alone (32), two leaves (160)
    for B, L, nhq, kvh, hdd, pos0 in ((2, 6, 4, 2, 32, 0), (1, 9, 8, 2, 64, 3),
                                      (1, 5, 2, 1, 160, 0)):
        T = pos0 + L
        for kind in ("tiny", "mixed"):
            q = edge_matrix(rng, (B * L, nhq * hdd), kind)
            k = edge_matrix(rng, (B, kvh, T, hdd), kind)
            v = edge_matrix(rng, (B, kvh, T, hdd), kind)
            if kind == "mixed":
                q *= F(4)  # keep the scores away from all-NaN rows
                np.nan_to_num(q, copy=False)
                np.nan_to_num(k, copy=False)
            kt = np.ascontiguousarray(k.transpose(0, 1, 3, 2))
            for fixed15 in (False, True):
                o = np.empty((B * L, nhq * hdd), F)
                K.attention(q, nhq * hdd, kt, v, o, B, L, nhq, kvh, hdd, pos0, T, fixed15)
                out[f"attention/{B}x{L}x{nhq}x{kvh}x{hdd}+{pos0}/{kind}/fixed15={fixed15}"] = _h(o)
    return out


def build_info() -> dict:
    import mojolearn
    from mojolearn._core.loader import blocking, cpu_native

    t = blocking()
    return {"module": cpu_native().__file__, "isa": mojolearn.cpu_isa(),
            "explicit_flush": t.get("EXPLICIT_FLUSH"), "width": t["W"],
            # the AVX2 table without AVX2 registers: avx2_int's portable multiply-add
            "portable_int": "AVX2_MR" in t and t["W"] < 8}


if __name__ == "__main__":
    json.dump({"info": build_info(), "cases": cases()}, sys.stdout)

"""numeric_mode fast on a GPU build (bench/device_check.sh step 6d): the vendor BLAS's
products checked against the identical kernels, then timed against torch.mm.

    python bench/fast_check.py --arch sm_90 --out DIR   a GPU machine (NVIDIA or AMD)
    python bench/fast_check.py --self-test              any machine: the checker seen
                                                        passing and failing on CPU data
    python bench/fast_check.py --cpu-dry-run            any machine: the GPU steps on the
                                                        CPU backend, small shapes (a smoke
                                                        test of this script; no figures)

CLOSENESS (fatal)
    Every fast product of a set of shapes, layouts and operand types (host operands and
    torch device tensors) is compared with the identical product of the same operands:
      finite     every element of the fast product is finite (the data is finite);
      elementwise  |fast - identical| <= 2 gamma_k (|A| |B|), gamma_k = k u / (1 - k u),
                 u = 2**-24: each of the two is within gamma_k (|A| |B|) of the exact
                 product, whatever order it sums in, as long as every step is a float32
                 operation (no subnormals occur in this data);
      normwise   ||fast - identical||_F <= 1e-5 ||identical||_F. Float32 sgemm at
                 k = 4096 on normal data is about 4e-7 from the identical product;
                 TF32 (10-bit mantissas) about 3e-4, so this is what tells strict float32
                 from TF32 (the elementwise bound is loose enough to let TF32 through).
    On NVIDIA the TF32 route (modes.allow_tf32(True)) must FAIL the normwise bound: the
    control that shows the check can fail, and that the permission reaches cuBLAS.
TIMING (reported; the bar is printed and written, not fatal)
    fp32 on torch device tensors, 1024^3, 4096^3 and 1 x 4096 x 4096 (m x n x k): each
    call timed alone (median of REPS after a warm-up, synchronized), linalg.matmul under
    numeric_mode fast against torch.mm with torch.backends.cuda.matmul.allow_tf32 =
    False. The issue's bar: fast within 5% of torch.mm (torch_s / fast_s >= 0.95). Host
    operands (copies included) at 1024^3 and 4096^3 are reported beside, and 1 x 1 x 1
    first: the per-call floor of each (validation, synchronization, launch), which the
    small shapes' ratios should be read against (it is not part of the bar).
Results: DIR/fast-gpu-<arch>.json (device_check copies it to bench/results/).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from gpu_gemm_check import synced_median  # bench/ is the script's folder

U = 2.0 ** -24
NORM_BOUND = 1e-5
BAR = 0.95
REPS = 15


def gamma(k: int) -> float:
    return k * U / (1 - k * U)


def closeness(fast, ident, abs_prod, k: int) -> dict:
    """The three checks on float64 copies: fast and identical products of the same
    operands, abs_prod = |A| |B| (float64); k the length of the sums."""
    fast = np.asarray(fast, dtype=np.float64)
    ident = np.asarray(ident, dtype=np.float64)
    finite = bool(np.isfinite(fast).all())
    d = np.abs(fast - ident)
    bound = 2 * gamma(k) * np.asarray(abs_prod, dtype=np.float64) * (1 + 1e-9)
    worst = float(np.max(d / np.where(bound > 0, bound, 1))) if d.size else 0.0
    elementwise = bool(finite and np.all(d <= bound))
    den = float(np.linalg.norm(ident))
    rel = float(np.linalg.norm(d)) / den if den > 0 else float(np.linalg.norm(d))
    return {"finite": finite, "elementwise": elementwise, "worst_over_bound": worst,
            "normwise_rel": rel, "normwise": bool(finite and rel <= NORM_BOUND),
            "ok": bool(finite and elementwise and rel <= NORM_BOUND)}


def _tf32(x):
    """float32 rounded to TF32's 10-bit mantissa (nearest, ties to even): the self-test's
    model of a TF32 product's operands."""
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0xFFF + ((b >> 13) & 1)) & ~np.uint64(0x1FFF)
    return (b & 0xFFFFFFFF).astype(np.uint32).view(np.float32)


def self_test() -> int:
    """The checker on CPU data: a float32 product in another order passes; a NaN, one
    element far off, and a TF32-rounded product each fail the check meant to catch it."""
    from mojolearn import linalg

    rng = np.random.default_rng(7)
    m, n, k = 96, 80, 4096
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    ident = np.asarray(linalg.matmul(a, b))
    absp = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    other = a @ b  # numpy's float32 BLAS: another summation order
    nan = other.copy()
    nan[3, 4] = np.nan
    far = other.copy()
    far[5, 6] += np.float32(4 * gamma(k) * absp[5, 6])
    tf = _tf32(a) @ _tf32(b)
    cases = [("float32, another order", other, True, None),
             ("a NaN", nan, False, "finite"),
             ("one element past the bound", far, False, "elementwise"),
             ("TF32 operands", tf, False, "normwise")]
    bad = 0
    for name, c, want, which in cases:
        r = closeness(c, ident, absp, k)
        good = r["ok"] == want and (which is None or not r[which])
        bad += not good
        print(f"  {name:<28} ok={r['ok']!s:<5} normwise {r['normwise_rel']:.2e} "
              f"worst/bound {r['worst_over_bound']:.2e}  {'as expected' if good else 'WRONG'}")
    print(f"fast_check self-test: {len(cases) - bad} of {len(cases)} as expected")
    return 1 if bad else 0


# ---------------------------------------------------------------- on a GPU
def _bits_bf16(x):
    """bf16 bits of float32 x by mojolearn's own converter (rule L-2)."""
    from mojolearn import linalg

    return np.asarray(linalg.to_bf16(x))


def _np(x):
    """A result as a numpy array (torch tensors are copied from their device)."""
    return x.cpu().numpy() if hasattr(x, "cpu") else np.asarray(x)


def _widened(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def gpu_check(arch: str, out_dir: str, dry: bool = False) -> int:
    """The GPU run; ``dry``: the same steps on the CPU backend, with torch CPU tensors for
    the device ones and small shapes (a smoke test of this script: nothing is measured)."""
    import torch  # first: a cuBLAS torch has loaded is then found under its name

    import mojolearn
    from mojolearn._core import device as _device
    from mojolearn import linalg, modes

    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cpu" if dry else "cuda")
    sync = (lambda: None) if dry else torch.cuda.synchronize

    def S(m, n, k):
        return (min(m, 40), min(n, 40), min(k, 700)) if dry else (m, n, k)

    vend = mojolearn.vendor()
    lib, path = "none (dry run)", ""
    print(f"backend {vend}; fast runs {modes.fast_route()}")
    if not dry:
        mod, api, name = _device.gpu_status()
        print(f"device {name}")
        if vend not in _device.VENDOR_BLAS:
            print(f"fast_check: the process does not compute on a CUDA / HIP GPU build ({vend})",
                  file=sys.stderr)
            return 1
        lib, path, why = mod.vendor_blas(())
        print(f"vendor BLAS: {lib}: {path or 'NOT LOADED: ' + why}")
        if not path:
            return 1
    rng = np.random.default_rng(int(os.environ.get("DEVICE_CHECK_SEED", "5")))
    rows, bad = [], 0

    def record(name, shape, fast, ident, absp, k):
        nonlocal bad
        r = closeness(fast, ident, absp, k)
        bad += not r["ok"]
        rows.append(dict(case=name, shape=shape, **r))
        print(f"  {name:<34} {shape:>16}  normwise {r['normwise_rel']:.2e}  worst/bound "
              f"{r['worst_over_bound']:.2e}  {'ok' if r['ok'] else 'FAILED'}")

    def host_case(name, m, n, k, ta=False, tb=False, a16=False, b16=False, batch=()):
        m, n, k = S(m, n, k)
        a = rng.standard_normal(batch + ((k, m) if ta else (m, k))).astype(np.float32)
        b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
        fa, fb = a, b
        if a16:
            a = _bits_bf16(a)
            fa = _widened(a)
        if b16:
            b = _bits_bf16(b)
            fb = _widened(b)
        f = linalg.matmul_bf16 if b16 else linalg.matmul
        kw = dict(transpose_a=ta, transpose_b=tb)
        with modes.using("identical"):
            ident = np.asarray(f(a, b, **kw))
        with modes.using("fast"):
            fast = np.asarray(f(a, b, **kw))
        oa = np.swapaxes(fa, -1, -2) if ta else fa
        ob = fb.T if tb else fb
        absp = np.abs(oa).astype(np.float64) @ np.abs(ob).astype(np.float64)
        shape = "x".join(map(str, batch + (m, n, k)))
        record(name, shape, fast, ident, absp, k)

    print("closeness: fast against identical (host operands)")
    host_case("NN f32", 1, 4096, 4096)
    host_case("NN f32", 512, 512, 4096)
    host_case("NT f32", 512, 512, 4096, tb=True)
    host_case("TN f32", 512, 512, 4096, ta=True)
    host_case("NN f32 (odd sizes)", 300, 257, 4099)
    host_case("NN f32 (short k)", 7, 5, 3)
    host_case("NT a f32, b bf16", 64, 4096, 4096, tb=True, b16=True)
    host_case("NN a bf16, b bf16", 33, 65, 4096, a16=True, b16=True)
    host_case("NN f32, a batched", 128, 256, 4096, batch=(2,))
    with modes.using("fast"):
        z = np.asarray(linalg.matmul(np.ones((3, 0), np.float32), np.ones((0, 4), np.float32)))
    zero_ok = z.shape == (3, 4) and not np.any(z.view(np.uint32))
    bad += not zero_ok
    print(f"  {'k = 0 gives +0.0':<34} {'3x4x0':>16}  {'ok' if zero_ok else 'FAILED'}")

    print("closeness: fast against identical (device tensors)")
    for m, n, k, tb in ((512, 512, 4096, False), (4096, 4096, 4096, False), (256, 4096, 4096, True)):
        m, n, k = S(m, n, k)
        a = torch.randn(m, k, device=dev)
        b = torch.randn(n, k, device=dev) if tb else torch.randn(k, n, device=dev)
        with modes.using("identical"):
            ident = linalg.matmul(a, b, transpose_b=tb)
        with modes.using("fast"):
            fast = linalg.matmul(a, b, transpose_b=tb)
        ob = b.t() if tb else b
        absp = (a.abs().double() @ ob.abs().double()).cpu().numpy()
        record(f"resident {'NT' if tb else 'NN'} f32", f"{m}x{n}x{k}", _np(fast), _np(ident),
               absp, k)

    control = None
    if vend == "cuda":
        print("control: allow_tf32(True) must fail the normwise bound (TF32 reached cuBLAS)")
        a = rng.standard_normal((512, 4096)).astype(np.float32)
        b = rng.standard_normal((4096, 512)).astype(np.float32)
        with modes.using("identical"):
            ident = np.asarray(linalg.matmul(a, b))
        old = modes.allow_tf32(True)
        try:
            with modes.using("fast"):
                tf = np.asarray(linalg.matmul(a, b))
        finally:
            modes.allow_tf32(old)
        absp = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
        r = closeness(tf, ident, absp, 4096)
        seen = r["finite"] and not r["normwise"]
        bad += not seen
        control = dict(case="TF32 512x512x4096", seen_failing=seen, **r)
        print(f"  TF32 normwise {r['normwise_rel']:.2e} (bound {NORM_BOUND:.0e}): "
              f"{'fails as it must' if seen else 'PASSED: TF32 not seen'}")
    elif vend == "hip":
        print("control: no TF32 route on AMD (rocBLAS stays float32); skipped")
    else:
        print(f"control: TF32 exists on CUDA builds only ({vend}); skipped")

    print(f"timing: fast (fp32, device tensors) against torch.mm fp32, TF32 off; median of {REPS}")

    def med(fn, reps=REPS):
        return synced_median(fn, sync, reps)

    timing = []
    for m, n, k in ((1, 1, 1), (1024, 1024, 1024), (4096, 4096, 4096), (1, 4096, 4096)):
        m, n, k = S(m, n, k)
        a = torch.randn(m, k, device=dev)
        b = torch.randn(k, n, device=dev)
        c = torch.empty(m, n, device=dev)
        t_th = med(lambda: torch.mm(a, b, out=c))
        with modes.using("fast"):
            t_fast = med(lambda: linalg.matmul(a, b, out=c))
        row = {"case": f"fp32 NN {m}x{n}x{k}", "fast_resident_s": t_fast, "torch_mm_fp32_s": t_th,
               "torch_over_fast": t_th / t_fast, "within_5pct": t_th / t_fast >= BAR,
               "fast_gflops": 2 * m * n * k / t_fast / 1e9}
        if m > 1 and k > 1:
            ah, bh = a.cpu().numpy(), b.cpu().numpy()
            with modes.using("fast"):
                row["fast_host_operands_s"] = med(lambda: linalg.matmul(ah, bh), reps=3)
        timing.append(row)
        host = row.get("fast_host_operands_s")
        print(f"  {row['case']:<22} fast {t_fast * 1e3:8.3f} ms ({row['fast_gflops']:8.0f} GFLOP/s)"
              f"  torch.mm {t_th * 1e3:8.3f} ms  torch/fast {row['torch_over_fast']:.3f}"
              f"  {'within 5%' if row['within_5pct'] else 'BAR MISSED'}"
              + (f"  host operands {host * 1e3:8.2f} ms" if host else ""))

    if dry:
        print(f"fast_check dry run: {'ok' if not bad else f'{bad} FAILED'} (nothing written)")
        return 1 if bad else 0
    res = {"device": torch.cuda.get_device_name(0), "arch": arch, "api": vend, "library": lib,
           "library_file": path, "norm_bound": NORM_BOUND, "bar": "torch_s / fast_s >= 0.95",
           "closeness": rows, "k0_zero": zero_ok, "tf32_control": control, "timing": timing}
    os.makedirs(out_dir, exist_ok=True)
    out = os.path.join(out_dir, f"fast-gpu-{arch}.json")
    with open(out, "w") as fh:
        json.dump(res, fh, indent=1)
    missed = [r["case"] for r in timing[1:] if not r["within_5pct"]]
    print(f"fast_check: closeness {'ok' if not bad else f'{bad} FAILED'}; "
          f"bar {'met in every case' if not missed else 'missed: ' + ', '.join(missed)}; "
          f"written {out}")
    return 1 if bad else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--self-test", action="store_true")
    p.add_argument("--cpu-dry-run", action="store_true",
                   help="the GPU steps on the CPU backend at small shapes (a smoke test)")
    p.add_argument("--arch", default="unknown")
    p.add_argument("--out", default="bench/results")
    args = p.parse_args(argv)
    if args.self_test:
        return self_test()
    return gpu_check(args.arch, args.out, dry=args.cpu_dry_run)


if __name__ == "__main__":
    sys.exit(main())

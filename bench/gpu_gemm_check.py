"""The GPU GEMM routes on a GPU machine: bits first, then the timing bars.

    python bench/gpu_gemm_check.py bits [--seed S]             GPU vs CPU bits
    python bench/gpu_gemm_check.py time --out FILE             timing rows (JSON)
    ... --cpu-half                                             the same code on the CPU

Run by bench/device_check.sh (steps 6c and 6d). `bits` runs fresh random cases
chosen to reach every route of the fp32.v1 GPU kernel (the BIG tile, the THIN1 /
THIN16 decode shapes, k split across blocks, L = 129, both the flush-free and the
flushing chains of rule 6.8, bf16 operands, NN / NT / TN) and of the integer kernels
(16-byte and byte staging, int8 and int15, quantization of A on the device), on host
operands and on device-resident torch tensors, and compares each with the CPU build
bit for bit (NaN positions must agree; payloads are not promised). The route a case
takes is computed here (rule 6.8 from its data; the decode shapes always flush) and
printed, so the table shows both routes were run. `time` writes the rows of the GPU GEMM bars: fp32.v1 NN / NT at
2048^3 and 4096^3 against torch.mm in float32 (TF32 off) on device tensors, the
decode shapes 1 x 4096 x 4096 and 16 x 4096 x 4096 with the weight resident, and
int8i32.v1 / int15i64.v1 at 4096^3 on pre-quantized resident codes over fp32.v1.

--cpu-half runs the same Python with the CPU build standing in for the GPU module and
torch on the CPU, at smaller sizes: it proves this script runs (a test does it on
machines without a GPU); its numbers mean nothing and are not written to results.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

F32 = np.float32


def A(x):
    return x.ctypes.data


def scale(n, cpu_half):
    """Sizes of the GPU run, divided for the CPU stand-in."""
    return max(1, n // 8) if cpu_half else n


def synced_median(fn, sync, reps):
    """Median seconds of reps calls of fn, each followed by sync() (the device's queue
    drained), after one warm-up call. bench/fast_check.py times with it too."""
    fn()
    sync()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def data(rng, shape, kind):
    """normal: N(0, 1) (the flush-free route); edge: subnormals, inf, NaN, -0 and
    values near 2**-63 whose products straddle 2**-126 (the flushing route)."""
    x = rng.standard_normal(shape).astype(F32)
    if kind == "edge":
        p = rng.random(shape)
        sub = (rng.integers(1, 1 << 23, size=shape, dtype=np.uint32)
               | (rng.integers(0, 2, size=shape, dtype=np.uint32) << 31)).view(F32)
        x = np.where(p < 0.1, sub, x)
        x = np.where((p >= 0.1) & (p < 0.12), F32(np.inf), x)
        x = np.where((p >= 0.12) & (p < 0.13), F32(np.nan), x)
        x = np.where((p >= 0.13) & (p < 0.2), F32(-0.0), x)
        x = np.where((p >= 0.2) & (p < 0.6), x * F32(2.0 ** -63), x)
    return np.ascontiguousarray(x, dtype=F32)


def widen_bits(x):
    return (x.astype(np.uint32) << 16).view(F32) if x.dtype == np.uint16 else x


def route_of(a, b, m):
    """The route the launch takes: the decode shapes (m <= 16) run the flushing chains
    without a pre-pass; the others decide rule 6.8 from the data: 'flush-free' when the
    least exponents of the nonzero finite (flushed) elements of A and B sum to at least
    -80, else 'flushing'."""
    if m <= 16:
        return "flushing"
    def least(x):
        e = (widen_bits(x).view(np.uint32).astype(np.int64) >> 23) & 0xFF
        e = e[(e > 0) & (e < 255)]
        return int(e.min()) if e.size else 255
    return "flush-free" if least(a) + least(b) >= 2 * 127 - 80 else "flushing"


def same(g, c):
    if g.dtype == F32:
        gn, cn = np.isnan(g), np.isnan(c)
        return bool(np.array_equal(gn, cn) and np.array_equal(g.view(np.uint32)[~cn], c.view(np.uint32)[~cn]))
    return bool(np.array_equal(g, c))


def modules(cpu_half):
    from mojolearn._core.loader import cpu_native
    cpu = cpu_native()
    if cpu_half:
        return cpu, cpu
    from mojolearn import _native_gpu as gpu
    return cpu, gpu


# ---------------------------------------------------------------- bits
F32_CASES = [
    # name, m, n, k, layout, kind, bf16 (a, b)
    ("BIG", 640, 384, 1536, "NN", "normal", (0, 0)),
    ("BIG", 300, 200, 1500, "NN", "edge", (0, 0)),
    ("BIG", 257, 130, 1029, "NT", "normal", (0, 0)),
    ("BIG", 129, 257, 700, "TN", "edge", (0, 0)),
    ("BIG", 256, 320, 1000, "NN", "normal", (0, 1)),
    ("BIG", 200, 100, 600, "NT", "edge", (1, 1)),
    ("THIN1 decode", 1, 4096, 4096, "NT", "normal", (0, 0)),
    ("THIN1 decode", 1, 4096, 4096, "NN", "edge", (0, 0)),
    ("THIN16 decode", 16, 4096, 4096, "NT", "normal", (0, 0)),
    ("THIN16 decode", 9, 4096, 4096, "NT", "edge", (0, 1)),
    ("split k", 40, 48, 20000, "NN", "normal", (0, 0)),
    ("split k", 3, 5, 9000, "TN", "edge", (0, 0)),
    ("L = 129", 2, 3, 131073, "NT", "edge", (0, 0)),
    ("L = 129", 1, 70, 131073, "NN", "normal", (0, 0)),
    ("k = 1", 129, 130, 1, "NN", "edge", (0, 0)),
]


def f32_case(rng, cpu, gpu, m, n, k, layout, kind, bf, cpu_half):
    if cpu_half:
        m, n, k = (min(x, 96) for x in (m, n, k))
    ta, tb = layout == "TN", layout == "NT"
    a = data(rng, (k, m) if ta else (m, k), kind)
    b = data(rng, (n, k) if tb else (k, n), kind)
    if bf[0]:
        a = to_bf16(cpu, a)
    if bf[1]:
        b = to_bf16(cpu, b)
    cg = np.full((m, n), 7, F32)
    cc = np.full((m, n), 9, F32)
    args = (A(a), A(b), None, m, n, k, int(ta), int(tb), bf[0], bf[1], 0, 2, 0, 0, 0)
    gpu.gemm_f32(args[:2] + (A(cg),) + args[3:])
    cpu.gemm_f32(args[:2] + (A(cc),) + args[3:])
    return (m, n, k), route_of(a, b, m), same(cg, cc), (a, b, cc)


def to_bf16(cpu, x):
    o = np.empty(x.shape, np.uint16)
    cpu.to_bf16((A(x), A(o), x.size, 1))
    return o


def int_case(rng, cpu, gpu, m, n, k, planes):
    ea = rng.integers(-140, 140, size=m).astype(np.int32)
    eb = rng.integers(-140, 140, size=n).astype(np.int32)
    cg, cc = np.full((m, n), 7, F32), np.full((m, n), 9, F32)
    if planes == 1:
        a = rng.integers(-127, 128, size=(m, k), dtype=np.int8)
        b = rng.integers(-127, 128, size=(n, k), dtype=np.int8)
        gpu.gemm_int8((A(a), A(ea), A(b), A(eb), A(cg), m, n, k, 2, 0, 0, 0))
        cpu.gemm_int8((A(a), A(ea), A(b), A(eb), A(cc), m, n, k, 2, 0, 0, 0))
    else:
        ca = rng.integers(-16383, 16384, size=(m, k))
        cb = rng.integers(-16383, 16384, size=(n, k))
        ah, al = (ca >> 7).astype(np.int8), (ca & 127).astype(np.int8)
        bh, bl = (cb >> 7).astype(np.int8), (cb & 127).astype(np.int8)
        gpu.gemm_int15((A(ah), A(al), A(ea), A(bh), A(bl), A(eb), A(cg), m, n, k, 2, 0, 0, 0))
        cpu.gemm_int15((A(ah), A(al), A(ea), A(bh), A(bl), A(eb), A(cc), m, n, k, 2, 0, 0, 0))
    return same(cg, cc)


def resident_cases(rng, cpu, cpu_half, record):
    """The same kernels on device-resident torch tensors (the models' way), and the
    int15 projection with A quantized on the device (fixed15_v1)."""
    import torch
    from mojolearn import linalg
    if cpu_half:
        print("  (--cpu-half: resident cases run on CPU tensors through linalg.matmul)")
    dev = "cpu" if cpu_half else "cuda"
    for name, m, n, k, tb, kind in (("resident THIN16", 16, 4096, 4096, True, "normal"),
                                    ("resident THIN1", 1, 4096, 4096, True, "edge"),
                                    ("resident BIG", 512, 384, 2048, False, "edge")):
        if cpu_half:
            m, n, k = (min(x, 96) for x in (m, n, k))
        a = data(rng, (m, k), kind)
        b = data(rng, (n, k) if tb else (k, n), kind)
        got = linalg.matmul(torch.from_numpy(a).to(dev), torch.from_numpy(b).to(dev), transpose_b=tb)
        got = got.cpu().numpy() if hasattr(got, "cpu") else np.asarray(got)
        want = np.empty((m, n), F32)
        cpu.gemm_f32((A(a), A(b), A(want), m, n, k, 0, int(tb), 0, 0, 0, 2, 0, 0, 0))
        record(name, (m, n, k), route_of(a, b, m), same(np.ascontiguousarray(got, dtype=F32), want))
    if cpu_half:
        return
    from mojolearn import _native_gpu as gpu
    for m, n, k in ((16, 4096, 4096), (77, 300, 1001)):
        x = data(rng, (m, k), "normal")
        x[0, :5] = 0
        cb = rng.integers(-16383, 16384, size=(n, k))
        bh, bl = (cb >> 7).astype(np.int8), (cb & 127).astype(np.int8)
        eb = rng.integers(-20, 20, size=n).astype(np.int32)
        ah, al = np.empty((m, k), np.int8), np.empty((m, k), np.int8)
        ea = np.empty(m, np.int32)
        cpu.quantize_int15((A(x), A(ah), A(al), A(ea), m, k, 2))
        want = np.empty((m, n), F32)
        cpu.gemm_int15((A(ah), A(al), A(ea), A(bh), A(bl), A(eb), A(want), m, n, k, 2, 0, 0, 0))
        t = {nm: torch.from_numpy(v).cuda() for nm, v in (("x", x), ("bh", bh), ("bl", bl), ("eb", eb))}
        c = torch.empty((m, n), dtype=torch.float32, device="cuda")
        gpu.gemm_int15_quant_a_resident((t["x"].data_ptr(), t["bh"].data_ptr(), t["bl"].data_ptr(),
                                         t["eb"].data_ptr(), c.data_ptr(), m, n, k))
        record("int15, A quantized on device", (m, n, k), "exact", same(c.cpu().numpy(), want))


def bits(args):
    cpu, gpu = modules(args.cpu_half)
    seed = args.seed if args.seed is not None else time.time_ns() % 2 ** 32
    rng = np.random.default_rng(seed)
    print(f"CPU build: {cpu.__name__}; seed {seed} (--seed {seed} repeats this run)")
    if args.cpu_half:
        print("--cpu-half: the CPU build stands in for the GPU module (sizes capped at 96)")
    rows, bad = [], 0

    def record(name, shape, route, ok):
        nonlocal bad
        bad += not ok
        rows.append((name, "x".join(map(str, shape)), route, "same bits" if ok else "DIFFER"))

    for name, m, n, k, layout, kind, bf in F32_CASES:
        shape, route, ok, _ = f32_case(rng, cpu, gpu, m, n, k, layout, kind, bf, args.cpu_half)
        record(f"fp32.v1 {name} {layout}" + (" bf16" if any(bf) else ""), shape, route, ok)
    for m, n, k in ((2048, 2048, 4096), (1000, 1000, 4099), (5, 7, 129), (1, 4096, 4096), (130, 70, 1)):
        if args.cpu_half:
            m, n, k = (min(x, 96) for x in (m, n, k))
        for planes in (1, 2):
            record(f"int{8 if planes == 1 else 15} {'16-byte' if k % 16 == 0 else 'byte'} staging",
                   (m, n, k), "exact", int_case(rng, cpu, gpu, m, n, k, planes))
    try:
        resident_cases(rng, cpu, args.cpu_half, record)
    except ImportError as e:
        print(f"  resident cases skipped: {e}")
    routes = {r[2] for r in rows}
    w = max(len(r[0]) for r in rows)
    for name, shape, route, res in rows:
        print(f"  {name:<{w}}  {shape:>16}  {route:<10}  {res}")
    print(f"{len(rows) - bad} of {len(rows)} cases give the CPU's bits; routes run: {sorted(routes)}")
    if not {"flush-free", "flushing"} <= routes:
        print("gpu_gemm_check: a route of rule 6.8 was not reached", file=sys.stderr)
        return 1
    return 1 if bad else 0


# ---------------------------------------------------------------- timing
def timing(args):
    import torch
    from mojolearn import linalg
    cpu, gpu = modules(args.cpu_half)
    dev = "cpu" if args.cpu_half else "cuda"
    if not args.cpu_half:
        torch.backends.cuda.matmul.allow_tf32 = False  # torch's float32 GEMM, not TF32

    def sync():
        if not args.cpu_half:
            torch.cuda.synchronize()

    def med(fn, reps):
        return synced_median(fn, sync, reps)

    rows = []

    def row(case, m, n, k, t_ml, t_peer, peer):
        r = {"case": case, "m": m, "n": n, "k": k, "mojolearn_s": t_ml, f"{peer}_s": t_peer,
             "ratio_vs_peer": t_peer / t_ml, "mojolearn_tflops": 2 * m * n * k / t_ml / 1e12}
        rows.append(r)
        print(f"  {case:<42} {t_ml * 1e3:9.3f} ms {r['mojolearn_tflops']:7.2f} TFLOP/s   {peer} "
              f"{t_peer * 1e3:9.3f} ms   ratio {r['ratio_vs_peer']:.3f}x")
        return r

    g = torch.Generator(device="cpu").manual_seed(1)
    reps = 3 if args.cpu_half else 10
    f32_time = {}
    for size in (2048, 4096):
        s = scale(size, args.cpu_half)
        a = torch.randn(s, s, generator=g).to(dev)
        b = torch.randn(s, s, generator=g).to(dev)
        for lay in ("NN", "NT"):
            tb = lay == "NT"
            t_ml = med(lambda: linalg.matmul(a, b, transpose_b=tb), reps)
            t_th = med(lambda: torch.mm(a, b.t() if tb else b), reps)
            r = row(f"fp32.v1 {lay} {size}^3", s, s, s, t_ml, t_th, "torch_mm_fp32")
            f32_time[(size, lay)] = t_ml
    for m in (1, 16):
        k = n = scale(4096, args.cpu_half)
        w = torch.randn(n, k, generator=g).to(dev)  # the resident weight, (out, in)
        x = torch.randn(m, k, generator=g).to(dev)
        t_ml = med(lambda: linalg.matmul(x, w, transpose_b=True), reps * 3)
        t_th = med(lambda: torch.mm(x, w.t()), reps * 3)
        row(f"fp32.v1 decode {m}x4096x4096 (W resident)", m, n, k, t_ml, t_th, "torch_mm_fp32")
    s = scale(4096, args.cpu_half)
    rng = np.random.default_rng(2)
    ca = rng.integers(-16383, 16384, size=(s, s))
    cb = rng.integers(-16383, 16384, size=(s, s))
    ea = rng.integers(-20, 20, size=s).astype(np.int32)
    eb = rng.integers(-20, 20, size=s).astype(np.int32)
    host = {"a8": rng.integers(-127, 128, size=(s, s), dtype=np.int8),
            "b8": rng.integers(-127, 128, size=(s, s), dtype=np.int8),
            "ah": (ca >> 7).astype(np.int8), "al": (ca & 127).astype(np.int8),
            "bh": (cb >> 7).astype(np.int8), "bl": (cb & 127).astype(np.int8), "ea": ea, "eb": eb}
    c = np.empty((s, s), F32)
    if args.cpu_half:
        p = {kk: A(v) for kk, v in host.items()}
        pc = A(c)
        run8 = lambda: cpu.gemm_int8((p["a8"], p["ea"], p["b8"], p["eb"], pc, s, s, s, 2, 0, 0, 0))
        run15 = lambda: cpu.gemm_int15((p["ah"], p["al"], p["ea"], p["bh"], p["bl"], p["eb"], pc, s, s, s,
                                        2, 0, 0, 0))
    else:
        d = {kk: torch.from_numpy(v).cuda() for kk, v in host.items()}
        p = {kk: v.data_ptr() for kk, v in d.items()}
        dc = torch.empty((s, s), dtype=torch.float32, device="cuda")
        pc = dc.data_ptr()
        run8 = lambda: gpu.gemm_int8_resident((p["a8"], p["ea"], p["b8"], p["eb"], pc, s, s, s))
        run15 = lambda: gpu.gemm_int15_resident((p["ah"], p["al"], p["ea"], p["bh"], p["bl"], p["eb"], pc,
                                                 s, s, s))
    base = f32_time[(4096, "NT")]
    for name, fn in (("int8i32.v1 4096^3 (pre-quantized)", run8), ("int15i64.v1 4096^3 (pre-quantized)", run15)):
        t = med(fn, reps)
        row(name, s, s, s, t, base, "fp32_v1_NT")
    out = {"device": "cpu stand-in" if args.cpu_half else torch.cuda.get_device_name(0),
           "command": "python bench/gpu_gemm_check.py time", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
           "commit": os.environ.get("DEVICE_CHECK_COMMIT", ""), "rows": rows,
           "note": "ratio_vs_peer: the peer's time over mojolearn's (above 1: mojolearn faster); the "
                   "integer rows' peer is fp32.v1 NT at 4096^3 (their speed-up over it)"}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("bits", "time"))
    ap.add_argument("--cpu-half", action="store_true")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    return bits(args) if args.what == "bits" else timing(args)


if __name__ == "__main__":
    sys.exit(main())

"""make bench: every operation timed against its baseline, in one process.

Each case runs mojolearn and its peer(s) interleaved (ours, peer, ours, peer, ...)
and reports medians. numpy and torch run with their own threading defaults, as a
user gets them (their worker threads busy-wait for a while after a call; torch's
OpenMP is not set to passive waiting, which would make every short torch call wake
sleeping workers first while ours run warm); after a numpy/torch call the run sleeps
SETTLE seconds so those busy-waiting workers park before the next contender is timed
(otherwise they steal a core), and a call shorter than WARM_S is timed warm (untimed
calls of the same contender for at least WARM_MIN_S right before each timed one), so
no contender is timed cold because of the pause before it. Results are checked after timing. The table is
printed and written to bench/results/<vendor>-<box>-<isa>.json (the CPU build that
ran: mojolearn.cpu_isa(); `make bench` runs once per build this CPU can run) with a
header (machine, CPU model, ISA, versions, commit, command, date) and a PNG plot
beside it. The fixed15_v1 row of mojolearn.profiles.MEASURED is read from those
files (the row of the build a process runs is preferred, then the row of its machine).

    PYTHONPATH=python .venv/bin/python bench/run.py [--quick] [--reps N] [--only SUBSTR]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

from mojolearn._core import box as _box, cpu as _cpu  # noqa: E402  (no numpy: the peers are pinned before it loads)

# The peers run at the ISA of the build being timed. On a CPU wider than the build
# (the v3 = AVX2 build on an AVX-512 box, the v4 build on an AMX box), numpy's OpenBLAS,
# MKL, ATen and oneDNN (torch._int_mm) would use wider kernels than ours; pinned to the
# build's ISA, the rows are the ones a machine of that ISA shows. Set before numpy and
# torch load (they read these once); recorded in the results.
PEER_PIN_ISA = {
    "v3": {"OPENBLAS_CORETYPE": "Haswell", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
           "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "v4": {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI"},
}
PEER_PIN = {}
_isa = _cpu.choose()[0]
_names = _cpu.isa_names()  # best first
_wider = [i for i in _names[:_names.index(_isa)] if _cpu.refusal(i) is None]
if _wider:
    for _k, _v in PEER_PIN_ISA.get(_isa, {}).items():
        PEER_PIN[_k] = os.environ.setdefault(_k, _v)

import numpy as np  # noqa: E402

import mojolearn  # noqa: E402
from mojolearn import linalg  # noqa: E402
from mojolearn.conformance import box  # noqa: E402

try:
    import torch  # noqa: F401

    torch.set_num_threads(mojolearn.get_num_threads())
except Exception:  # torch is an optional peer
    torch = None

SETTLE = 0.35
RESULTS = ROOT / "bench" / "results"


def now():
    return time.perf_counter()


def timed(fn):
    t = now()
    r = fn()
    return now() - t, r


# a call shorter than WARM_S is timed warm: untimed calls of the same contender run for
# at least WARM_MIN_S right before each timed one (see race)
WARM_S = 0.05
WARM_MIN_S = 0.03


def race(contenders, reps, settle_after):
    """contenders: {name: fn}. Interleaved reps; returns {name: (median_s, all)}.
    A thread-pool peer whose workers busy-wait after a call (numpy's OpenBLAS, torch)
    is followed by a SETTLE pause so it does not steal a core from the next one.
    Every contender is timed in the same state: one whose call takes under WARM_S makes
    untimed calls for at least WARM_MIN_S right before each timed one, so its threads
    are awake, the cores clocked up and its operands cached, whoever ran (or paused)
    before it. Without this the contender after a SETTLE pause was always timed cold and
    the one after it always warm: on a 2-core AMD Zen 5, a 1x4096x4096 product took
    2.40 ms cold and 2.06 ms warm (ours), 2.27 and 1.77 ms (numpy), so the order alone
    moved that ratio from 0.86x to 0.70x. One warm call was not enough after the pause:
    there, in two runs of 9 reps, the prepared 1x4096x4096 NT product took 1.96-1.98 ms
    (ours) and 1.38-1.73 ms (numpy) after one untimed call, 1.12-1.67 and 1.26-1.80 ms
    after 10 ms of them, 1.07-1.20 and 1.12-1.22 ms after 30 ms (medians), as in a run of
    back-to-back calls."""
    times = {k: [] for k in contenders}
    warm = set()
    for name, fn in contenders.items():  # warm-up (page faults, caches)
        dt, _ = timed(fn)
        if dt < WARM_S:
            warm.add(name)
        if name in settle_after:
            time.sleep(SETTLE)
    for _ in range(reps):
        for name, fn in contenders.items():
            if name in warm:
                t0 = now()
                fn()
                while now() - t0 < WARM_MIN_S:
                    fn()
            dt, _ = timed(fn)
            times[name].append(dt)
            if name in settle_after:
                time.sleep(SETTLE)
    return {k: (statistics.median(v), v) for k, v in times.items()}


def _under(mode, f):
    """f() with this thread's numeric mode set to ``mode`` (mojolearn.modes.using)."""
    with mojolearn.modes.using(mode):
        return f()


def numpy_quantize(x, s, c):
    """A numpy-written quantizer (the baseline; not the contract's oracle): codes of
    |value| < 2**(s+1) with a power-of-two exponent per row."""
    absmax = np.nanmax(np.abs(x), axis=1)
    e = np.where(absmax > 0, np.frexp(absmax)[1] - 1 - s, 0).astype(np.int32)
    codes = np.clip(np.rint(x * np.ldexp(np.float32(1), -e)[:, None]), -c, c)
    return np.nan_to_num(codes), e


def numpy_quantize_int8(x):
    codes, e = numpy_quantize(x, 6, 127)
    return codes.astype(np.int8), e


def numpy_quantize_int15(x):
    codes, e = numpy_quantize(x, 13, 16383)
    codes = codes.astype(np.int32)
    return (codes >> 7).astype(np.int8), (codes & 127).astype(np.int8), e


def rel_err(got, ref):
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    return float(np.max(np.abs(got - ref)) / max(np.max(np.abs(ref)), 1e-30))


class Bench:
    def __init__(self, reps, only):
        self.reps = reps
        self.only = only
        self.rows = []
        self.t0 = now()
        self.peak = None  # this CPU build's FMA peak, GFLOP/s (main measures it)

    def case(self, name, op, profile, shape, contenders, ours="mojolearn", peer=None,
             settle=("numpy", "torch"), check=None, flops=None, extra=None, reps=None):
        """One row: the contenders timed interleaved, ``reps`` times (None: the run's
        --reps; a row whose peer takes many seconds a call names fewer)."""
        if self.only and self.only not in name:
            return None
        print(f"  [{now() - self.t0:6.1f}s] {name} ...", end="", flush=True)
        res = race(contenders, min(reps or self.reps, self.reps), set(settle))
        row = {"case": name, "op": op, "profile": profile, "shape": list(shape),
               "median_ms": {k: v[0] * 1e3 for k, v in res.items()},
               "reps_ms": {k: [round(t * 1e3, 4) for t in v[1]] for k, v in res.items()}}
        if peer and peer in res:
            row["peer"] = peer
            row["ratio"] = res[peer][0] / res[ours][0]  # > 1: mojolearn faster
        # every other contender against ours, by medians and by fastest reps: on a shared
        # host one side's stalls move a median, and the fastest reps show what each side
        # does when neither is stalled
        row["ratios"] = {k: {"median": v[0] / res[ours][0], "best": min(v[1]) / min(res[ours][1])}
                         for k, v in res.items() if k != ours}
        if flops:
            row["gflops"] = {k: flops / v[0] / 1e9 for k, v in res.items()}
            if self.peak and profile in FLOAT_FMA_PROFILES:
                # against this CPU build's float32 FMA peak (measured at the start of the
                # run); the integer profiles run other instructions, so they get none
                row["pct_fma_peak"] = {k: 100 * g / self.peak for k, g in row["gflops"].items()}
        if check is not None:
            row["check"] = check()
        if extra:
            row.update(extra)
        from mojolearn._ops import calls as _calls

        ws = _calls.workspace()[1]
        if ws and op.startswith("matmul"):
            # packing workspace held by this thread (the only memory beyond the output)
            row["workspace_bytes"] = ws
        self.rows.append(row)
        msg = f" {res[ours][0] * 1e3:9.3f} ms"
        if "pct_fma_peak" in row:
            msg += f" ({row['gflops'][ours]:.0f} GFLOP/s, {row['pct_fma_peak'][ours]:.0f}% of the FMA peak)"
        if "ratio" in row:
            msg += f"  {row['ratio']:.2f}x vs {peer} (fastest reps {row['ratios'][peer]['best']:.2f}x)"
        print(msg, flush=True)
        return row


# the profiles whose products are float32 FMAs (bf16f32.v1 widens its operands exactly
# and runs the fp32.v1 kernels): their rows are also given as a share of the FMA peak
FLOAT_FMA_PROFILES = ("fp32.v1", "bf16f32.v1")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--quick", action="store_true", help="small shapes, 3 reps (smoke test)")
    ap.add_argument("--only", default=None)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    t_start = now()
    reps = 3 if a.quick else a.reps
    B = Bench(reps, a.only)
    rng = np.random.default_rng(0)
    threads = mojolearn.get_num_threads()
    ident = _box.identity()
    cache_txt = ", ".join(f"{k} {v // 1024} KiB" for k, v in ident["caches"].items()) or "caches not reported"
    print(f"mojolearn bench: {box()}, isa {mojolearn.cpu_isa()}, {threads} threads, {reps} interleaved reps, "
          f"torch {'yes' if torch else 'not installed'}")
    print(f"  cpu: {ident['vendor']} family {ident['family']} model {ident['model']} "
          f"({ident['core']}); {cache_txt}")
    from estimate import line as estimate_line

    if not a.only:
        print(f"  estimate: {estimate_line(box(), mojolearn.cpu_isa(), a.quick)[0]}", flush=True)
    from mojolearn._tools import profile as _prof

    peak = _prof.fma_peak()
    B.peak = peak["gflops"]
    print(f"  FMA peak of this build, measured (best of {len(peak['runs_gflops'])} runs of the "
          f"micro-kernel's FMAs): {peak['gflops']:.1f} GFLOP/s on {peak['tasks']} threads")
    if PEER_PIN:
        print(f"  peers pinned to the {mojolearn.cpu_isa()} build's ISA (this CPU also runs "
              f"{', '.join(_wider)}): " + " ".join(f"{k}={v}" for k, v in PEER_PIN.items()))

    # ------------------------------------------------ converters, 16 Mi elements
    side = 1024 if a.quick else 4096
    x = rng.standard_normal((side, side)).astype(np.float32)
    bits = np.asarray(linalg.to_bf16(x))
    print("converters")
    B.case(f"to_bf16;{side}x{side}", "to_bf16", "L-2", (side, side),
           {"mojolearn": lambda: linalg.to_bf16(x), "numpy": lambda: x.astype(np.float16)},
           peer="numpy", check=lambda: "exact vs oracle in tests")
    B.case(f"from_bf16;{side}x{side}", "from_bf16", "L-1", (side, side),
           {"mojolearn": lambda: linalg.from_bf16(bits),
            "numpy": lambda: (bits.astype(np.uint32) << 16).view(np.float32)},
           peer="numpy")
    B.case(f"quantize_int8;{side}x{side}", "quantize_int8", "L-3/L-4", (side, side),
           {"mojolearn": lambda: linalg.quantize_int8(x), "numpy": lambda: numpy_quantize_int8(x)},
           peer="numpy")
    B.case(f"quantize_int15;{side}x{side}", "quantize_int15", "W-1/W-2", (side, side),
           {"mojolearn": lambda: linalg.quantize_int15(x), "numpy": lambda: numpy_quantize_int15(x)},
           peer="numpy")
    q8 = linalg.quantize_int8(x)
    B.case(f"dequantize_int8;{side}x{side}", "dequantize_int8", "L-6", (side, side),
           {"mojolearn": lambda: linalg.dequantize_int8(*q8),
            "numpy": lambda: np.asarray(q8[0]).astype(np.float32) * np.ldexp(np.float32(1), np.asarray(q8[1]))[:, None]},
           peer="numpy")

    # ------------------------------------------------ fp32.v1
    print("fp32.v1 (numpy = OpenBLAS sgemm)")
    sizes = [256, 512] if a.quick else [1024, 2048]
    for s in sizes:
        A = rng.standard_normal((s, s)).astype(np.float32)
        Bm = rng.standard_normal((s, s)).astype(np.float32)
        for lay in ("NN", "NT", "TN"):
            ta, tb = lay == "TN", lay == "NT"
            ref = (A.T if ta else A) @ (Bm.T if tb else Bm)
            f = lambda A=A, Bm=Bm, ta=ta, tb=tb: linalg.matmul(A, Bm, transpose_a=ta, transpose_b=tb)
            cont = {"mojolearn": f, "numpy": lambda A=A, Bm=Bm, ta=ta, tb=tb: (A.T if ta else A) @ (Bm.T if tb else Bm)}
            if lay != "TN":
                # the price of the promise: the same call under numeric_mode fast
                cont["fast"] = lambda f=f: _under("fast", f)
            if torch is not None:
                tA, tB = torch.from_numpy(A), torch.from_numpy(Bm)
                cont["torch"] = lambda tA=tA, tB=tB, ta=ta, tb=tb: torch.mm(tA.t() if ta else tA, tB.t() if tb else tB)
            B.case(f"matmul;fp32.v1;{lay};{s};{s};{s}", "matmul", "fp32.v1", (s, s, s), cont,
                   peer="numpy", flops=2 * s ** 3,
                   check=lambda f=f, ref=ref: {"max_rel_err_vs_numpy": rel_err(f(), ref)})
    print("decode shapes (a @ b with b (k, n) for NN; (n, k) for NT)")
    dn = 1024 if a.quick else 4096
    W_kn = rng.standard_normal((dn, dn)).astype(np.float32)
    W_nk = np.ascontiguousarray(W_kn.T)
    for m in (1, 16):
        X = rng.standard_normal((m, dn)).astype(np.float32)
        for lay, Wt in (("NN", W_kn), ("NT", W_nk)):
            tb = lay == "NT"
            cont = {"mojolearn": lambda X=X, Wt=Wt, tb=tb: linalg.matmul(X, Wt, transpose_b=tb),
                    "numpy": lambda X=X, Wt=Wt, tb=tb: X @ (Wt.T if tb else Wt)}
            B.case(f"matmul;fp32.v1;{lay};{m};{dn};{dn}", "matmul", "fp32.v1", (m, dn, dn), cont,
                   peer="numpy", flops=2 * m * dn * dn)
            # the same product with the weight prepared once (linalg.prepare); the raw
            # call runs beside it so the row also says what preparing saves. Prepared
            # weights are a CPU layout: a GPU backend refuses them, so no row there
            if mojolearn.vendor() != "cpu":
                print(f"  matmul;fp32.v1;prepared;{lay};{m}: skipped (prepared weights are "
                      f"CPU-only; this run computes on {mojolearn.vendor()})")
                continue
            P = linalg.prepare(Wt, transpose_b=tb)
            cont = {"mojolearn": lambda X=X, P=P, tb=tb: linalg.matmul(X, P, transpose_b=tb),
                    "fast": lambda X=X, P=P, tb=tb: _under("fast", lambda: linalg.matmul(X, P, transpose_b=tb)),
                    "raw": lambda X=X, Wt=Wt, tb=tb: linalg.matmul(X, Wt, transpose_b=tb),
                    "numpy": lambda X=X, Wt=Wt, tb=tb: X @ (Wt.T if tb else Wt)}
            B.case(f"matmul;fp32.v1;prepared;{lay};{m};{dn};{dn}", "matmul(a, prepare(b))", "fp32.v1",
                   (m, dn, dn), cont, peer="numpy", flops=2 * m * dn * dn,
                   extra={"prepared_bytes": P.nbytes})
    print("call overhead")
    t8 = np.ones((8, 8), np.float32)
    B.case("matmul;fp32.v1;NN;8;8;8", "matmul", "fp32.v1", (8, 8, 8),
           {"mojolearn": lambda: linalg.matmul(t8, t8), "numpy": lambda: t8 @ t8}, peer="numpy",
           settle=())  # single-threaded on both sides: no pause (an idle core clocks down)

    # ------------------------------------------------ profiles vs fp32.v1
    print("bf16f32.v1 / int8i32.v1 / int15i64.v1 vs fp32.v1 (a @ b.T)")
    for s in sizes:
        A = rng.standard_normal((s, s)).astype(np.float32)
        Wn = rng.standard_normal((s, s)).astype(np.float32)
        Wb = linalg.to_bf16(Wn)
        qa, qw = linalg.quantize_int8(A), linalg.quantize_int8(Wn)
        ha, hw = linalg.quantize_int15(A), linalg.quantize_int15(Wn)
        fp = lambda A=A, Wn=Wn: linalg.matmul(A, Wn, transpose_b=True)
        B.case(f"matmul_bf16;bf16f32.v1;NT;{s};{s};{s}", "matmul_bf16", "bf16f32.v1", (s, s, s),
               {"fp32.v1": fp, "mojolearn": lambda A=A, Wb=Wb: linalg.matmul_bf16(A, Wb, transpose_b=True)},
               peer="fp32.v1", settle=(), flops=2 * s ** 3)
        cont = {"fp32.v1": fp, "mojolearn": lambda qa=qa, qw=qw: linalg.matmul_int8(qa, qw)}
        if torch is not None:
            ta8 = torch.from_numpy(np.asarray(qa[0]).copy())
            tw8 = torch.from_numpy(np.asarray(qw[0]).copy()).t()
            try:
                torch._int_mm(ta8, tw8)
                cont["torch_int_mm"] = lambda ta8=ta8, tw8=tw8: torch._int_mm(ta8, tw8)
            except Exception as e:  # noqa: BLE001
                print(f"    (torch._int_mm unavailable here: {type(e).__name__})")
        B.case(f"matmul_int8;int8i32.v1;prequantized;{s};{s};{s}", "matmul_int8", "int8i32.v1",
               (s, s, s), cont, peer="fp32.v1", settle=("torch_int_mm",), flops=2 * s ** 3)
        B.case(f"matmul_int15;int15i64.v1;prequantized;{s};{s};{s}", "matmul_int15", "int15i64.v1",
               (s, s, s), {"fp32.v1": fp, "mojolearn": lambda ha=ha, hw=hw: linalg.matmul_int15(ha, hw)},
               peer="fp32.v1", settle=(), flops=2 * s ** 3)
        if linalg.backend() == "cpu":
            # weights prepared once (linalg.prepare) on both sides: no per-call packing of B
            pf, p8, p15 = (linalg.prepare(Wn, transpose_b=True), linalg.prepare(qw),
                           linalg.prepare(hw))
            fpp = lambda A=A, pf=pf: linalg.matmul(A, pf, transpose_b=True)
            B.case(f"matmul_int8;int8i32.v1;prepared;{s};{s};{s}", "matmul_int8", "int8i32.v1",
                   (s, s, s), {"fp32.v1": fpp, "mojolearn": lambda qa=qa, p8=p8: linalg.matmul_int8(qa, p8)},
                   peer="fp32.v1", settle=(), flops=2 * s ** 3)
            B.case(f"matmul_int15;int15i64.v1;prepared;{s};{s};{s}", "matmul_int15", "int15i64.v1",
                   (s, s, s), {"fp32.v1": fpp, "mojolearn": lambda ha=ha, p15=p15: linalg.matmul_int15(ha, p15)},
                   peer="fp32.v1", settle=(), flops=2 * s ** 3)

    # ------------------------------------------------ fixed15_v1 at SmolLM2-360M's products
    print("fixed15_v1 vs fp32_v1 at SmolLM2-360M's four 512-token products")
    shapes = [("qkv", 512, 1600, 960), ("mlp_up", 512, 5120, 960),
              ("mlp_down", 512, 960, 2560), ("lm_head", 512, 49152, 960)]
    if a.quick:
        shapes = [(n_, 64, n // 8, k) for (n_, m, n, k) in shapes]
    ratios, tot = [], {"fp32_v1": 0.0, "fixed15_v1": 0.0}
    for nm, m, n, k in shapes:
        X = rng.standard_normal((m, k)).astype(np.float32)
        Wt = (rng.standard_normal((n, k)) * 0.05).astype(np.float32)
        hw = linalg.quantize_int15(Wt)
        row = B.case(f"fixed15_v1;{nm};{m};{n};{k}", "matmul_int15(x float32, w quantized)",
                     "fixed15_v1", (m, n, k),
                     {"fp32_v1": lambda X=X, Wt=Wt: linalg.matmul(X, Wt, transpose_b=True),
                      "fixed15_v1": lambda X=X, hw=hw: linalg.matmul_int15(X, hw)},
                     ours="fixed15_v1", peer="fp32_v1", settle=(), flops=2 * m * n * k)
        if row:
            # median of the paired (interleaved) per-rep ratios: robust to drifts of a
            # shared machine's speed between reps
            pairs = zip(row["reps_ms"]["fixed15_v1"], row["reps_ms"]["fp32_v1"])
            over = statistics.median(f / p for f, p in pairs)
            row["over"] = over
            ratios.append(over)
            tot["fp32_v1"] += row["median_ms"]["fp32_v1"]
            tot["fixed15_v1"] += row["median_ms"]["fixed15_v1"]

    # ------------------------------------------------ whole model (SmolLM2-135M)
    from model_bench import run_models

    model_over = run_models(B, threads, a.quick, torch)

    # ------------------------------------------------ the Mamba families
    from mamba_bench import run_mamba

    run_mamba(B, threads, a.quick, torch)

    # ------------------------------------------------ training
    from train_bench import run_training

    run_training(B, threads, a.quick, torch, _smollm2_dir())

    # ------------------------------------------------ write results
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip() or None
    vend = mojolearn.vendor()
    bx = box()
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    slug = re.sub(r"[^a-z0-9]+", "-", bx.lower()).strip("-")
    isa = mojolearn.cpu_isa()
    out = Path(a.out) if a.out else RESULTS / f"{vend}-{slug}-{isa}{'-quick' if a.quick else ''}.json"
    import importlib.metadata as md

    def ver(p):
        try:
            return md.version(p)
        except md.PackageNotFoundError:
            return None

    data = {
        "vendor": vend, "box": bx, "isa": isa, "date": stamp, "commit": commit,
        "command": (f"make bench (MOJOLEARN_ISA={isa})" if not a.quick else "bench/run.py --quick"),
        "machine": {"cpu": bx, "cpu_model": _cpu.brand(), "isa": isa, "cores_used": threads,
                    "platform": platform.platform(), "cpu_id": _box.identity()},
        "versions": {"mojolearn": mojolearn.__version__, "max": ver("max"), "numpy": np.__version__,
                     "torch": ver("torch"), "python": platform.python_version()},
        "method": f"medians of {reps} interleaved reps after one warm-up; numpy and torch at their threading defaults; {SETTLE}s settle after numpy/torch calls; "
                  f"calls under {WARM_S * 1e3:.0f} ms timed warm (untimed calls of the same contender for at least {WARM_MIN_S * 1e3:.0f} ms right before each timed one); ratio = peer time / mojolearn time (>1: mojolearn faster); ratios[c] = the same for every other contender c, by medians and by fastest reps (best = c's fastest rep / mojolearn's fastest rep)",
        "peers_pinned": ({"env": PEER_PIN, "why": f"the {isa} build on a CPU that runs a wider build "
                          f"({', '.join(_wider)}): numpy/torch pinned to the {isa} build's ISA, as "
                          "on a machine of that ISA"} if PEER_PIN else None),
        "fma_peak": {"gflops": round(peak["gflops"], 2), "tasks": peak["tasks"],
                     "runs_gflops": [round(r, 2) for r in peak["runs_gflops"]],
                     "what": "the fp32.v1 micro-kernel's FMAs on its register tile, no memory "
                             "operand (gemm/cpu/peak.mojo); best of the runs; fp32.v1 and "
                             "bf16f32.v1 rows give pct_fma_peak against it"},
        "cases": B.rows,
        # the whole run, from the start of main to the results (model loading included):
        # the next run's estimate on this box (bench/estimate.py)
        "elapsed_s": round(now() - t_start, 1),
    }
    if model_over and not a.quick and not a.only:
        data["profiles"] = {"fixed15_v1": {
            "over": [round(model_over["lo"], 3), round(model_over["hi"], 3)],
            "box": bx, "isa": isa,
            "what": "CausalLM.forward, prefill of 512 tokens at batch 1, SmolLM2-135M, fixed15_v1 "
                    "over fp32_v1 (weights prepared at load, activation quantization counted), "
                    f"{threads} threads; range of the paired per-rep ratios, median "
                    f"{model_over['median']:.3f}",
            "source": f"bench/results/{out.name} (make bench, commit {commit}, {stamp})",
        }}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1) + "\n")

    # ------------------------------------------------ table
    print()
    print(f"{'case':52s} {'mojolearn ms':>13s} {'peer':>14s} {'peer ms':>10s} {'ratio':>7s} {'best':>6s}  torch ms (ratio, best)")
    for r in B.rows:
        ours = r["median_ms"].get("mojolearn", r["median_ms"].get("fixed15_v1", float("nan")))
        peer = r.get("peer", "")
        pm = r["median_ms"].get(peer, float("nan"))
        tt = r["median_ms"].get("torch", r["median_ms"].get("torch_int_mm"))
        best = r.get("ratios", {}).get(peer, {}).get("best", float("nan"))
        tk = "torch" if "torch" in r["median_ms"] else "torch_int_mm"
        tr = r.get("ratios", {}).get(tk) if tk != peer else None
        print(f"{r['case']:52s} {ours:13.3f} {peer:>14s} {pm:10.3f} {r.get('ratio', float('nan')):7.2f} {best:6.2f}"
              + (f"  {tt:.3f}" if tt is not None else "")
              + (f" ({tr['median']:.2f}x, {tr['best']:.2f}x)" if tr else ""))
    if "profiles" in data:
        p = data["profiles"]["fixed15_v1"]
        print(f"\nfixed15_v1 over fp32_v1 on {vend} ({bx}): {p['over'][0]:.3f} .. {p['over'][1]:.3f} (<1: faster)")
    print(f"\ndone in {now() - t_start:.0f} s")
    print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    try:
        plot(data, out.with_suffix(".png"))
        print(f"wrote {out.with_suffix('.png').relative_to(ROOT) if out.is_relative_to(ROOT) else out.with_suffix('.png')}")
    except ImportError:
        print("(matplotlib not installed: no plot)")
    return 0


def _smollm2_dir():
    """SmolLM2-135M as a Hugging Face folder (exported once from the GGUF), or None."""
    if os.environ.get("MOJOLEARN_BENCH_NO_MODELS"):
        return None
    from fetch_model import fetch
    from hf_export import export_hf

    try:
        gguf_path = fetch()
    except Exception:  # noqa: BLE001 - run_models said why
        return None
    return export_hf(gguf_path, os.path.join(os.path.dirname(gguf_path), "smollm2-135m-hf"))


def plot(data, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in data["cases"] if "ratio" in r]
    fig, ax = plt.subplots(figsize=(10, 0.32 * len(rows) + 1.5))
    names = [r["case"] for r in rows]
    vals = [r["ratio"] for r in rows]
    ax.barh(range(len(rows)), vals, color=["tab:green" if v >= 1 else "tab:orange" for v in vals])
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_yticks(range(len(rows)), names, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("speed ratio (peer time / mojolearn time; > 1 = mojolearn faster)")
    isa = f", isa {data['isa']}" if data.get("isa") else ""
    ax.set_title(f"mojolearn {data['versions']['mojolearn']} on {data['box']} ({data['vendor']}{isa}), "
                 f"{data['machine']['cores_used']} threads, commit {data['commit']}, {data['date']}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())

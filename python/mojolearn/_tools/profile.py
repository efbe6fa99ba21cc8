"""Where the time of a model call goes: ``python -m mojolearn profile MODEL``.

Times every kernel call a CausalLM makes (the products by shape, with GFLOP/s; the
attention; the elementwise kernels; the state-space scans) during a prefill and a
greedy decode, and counts the rest of the wall time as Python, dispatch and copies.
With ``--torch``, the same prefill in transformers (torch's own profiler, its top ops
by self time) and inside ``mojolearn.torch.identical()`` (time in mojolearn's products
and kernels against the whole forward). Each CausalLM call runs once untimed, then
``--reps`` times under the timers, and the breakdown shown is the run with the median
wall time. The timers wrap the kernel calls for the run only and add their own small
cost to the "Python and copies" line.

    python -m mojolearn profile SmolLM2-135M-Instruct.Q4_1.gguf --tokens 512 --decode 32
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import time

PRODUCTS = {"gemm_prepared", "gemm_int15", "gemm_nt", "quantize15"}
FLOAT_PRODUCTS = {"gemm_prepared", "gemm_nt"}  # float32 FMAs: measured against the FMA peak
ATTENTION = {"attention"}
SCANS = {"mamba1_scan", "mamba2_ssd"}
ELEMENTWISE = {"rmsnorm", "rope", "silu_mul", "add", "gather", "gather_panels",
               "ssm_norm_lanes", "ssm_conv", "ssm_softplus", "softmax_rows", "sample_rows"}
_TIMED = sorted(PRODUCTS | ATTENTION | SCANS | ELEMENTWISE)


def fma_peak(tasks=None, runs: int = 9, seconds: float = 0.02) -> dict:
    """This CPU build's float32 FMA peak, measured: the best of ``runs`` timed runs of
    gemm/cpu/peak.mojo's loop (the fp32.v1 micro-kernel's FMAs on its register tile, no
    memory operand) on ``tasks`` threads (default: the kernels' thread count), each
    about ``seconds`` long. The best run, because a busy host only ever slows a run
    down. Returns {"gflops", "tasks", "per_task_gflops", "runs_gflops"}."""
    import struct

    import numpy as np

    from .._core import threads as _threads
    from .._core.loader import blocking, cpu_native

    t = _threads.tasks() if tasks is None else int(tasks)
    if t < 1 or runs < 1 or not seconds > 0:
        raise ValueError(f"mojolearn: fma_peak: tasks, runs and seconds must be positive "
                         f"(got {t}, {runs}, {seconds})")
    nat, bt = cpu_native(), blocking()
    flops_round = 2 * bt["W"] * bt["MR"] * bt["NV"]
    one = struct.unpack("<I", struct.pack("<f", 1.0))[0]
    out = np.zeros(t, np.float32)

    def run(iters):
        t0 = time.perf_counter()
        nat.fma_peak((iters, t, one, one, out.ctypes.data))
        return time.perf_counter() - t0

    iters = 100_000
    while True:  # calibrate: a run of about `seconds`
        dt = run(iters)
        if dt >= seconds / 4 or iters >= 1 << 40:
            break
        iters *= 4
    iters = max(1, int(iters * seconds / max(dt, 1e-9)))
    rates = [flops_round * iters * t / run(iters) / 1e9 for _ in range(runs)]
    best = max(rates)
    return {"gflops": best, "tasks": t, "per_task_gflops": best / t, "runs_gflops": rates}


def _category(name: str) -> str:
    if name in PRODUCTS:
        return "products"
    if name in ATTENTION:
        return "attention"
    if name in SCANS:
        return "state-space scans"
    return "elementwise kernels"


def _shape(name, args):
    """(m, n, k) of a product call, from its arguments (None when not a product)."""
    try:
        if name == "gemm_prepared":
            return (int(args[1]), int(args[2].n), int(args[2].k))
        if name == "gemm_int15":
            return (int(args[3]), int(args[4]), int(args[5]))
        if name == "gemm_nt":
            return (int(args[1]), int(args[2].shape[0]), int(args[0].shape[-1]))
    except (AttributeError, IndexError, TypeError, ValueError):
        return None
    return None


@contextlib.contextmanager
def timed_kernels():
    """Wrap the model kernels (models/_exec/kernels.py) with timers for the block;
    yields the record: {name: [seconds, calls]} and {(name, m, n, k): [seconds, calls]}."""
    from ..models._exec import kernels as K

    rec = {"by_name": {}, "by_shape": {}}
    orig = {}
    for name in _TIMED:
        fn = getattr(K, name, None)
        if fn is None:
            continue
        orig[name] = fn

        def wrap(*args, _fn=fn, _name=name, **kw):
            t0 = time.perf_counter()
            try:
                return _fn(*args, **kw)
            finally:
                dt = time.perf_counter() - t0
                r = rec["by_name"].setdefault(_name, [0.0, 0])
                r[0] += dt
                r[1] += 1
                sh = _shape(_name, args)
                if sh is not None:
                    s = rec["by_shape"].setdefault((_name,) + sh, [0.0, 0])
                    s[0] += dt
                    s[1] += 1

        setattr(K, name, wrap)
    try:
        yield rec
    finally:
        for name, fn in orig.items():
            setattr(K, name, fn)


def _usage():
    """(system CPU seconds, page faults) of this process so far; None where the
    platform has no getrusage."""
    try:
        import resource
    except ImportError:
        return None
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_stime, r.ru_minflt + r.ru_majflt


def breakdown(call) -> dict:
    """Run ``call()`` once under the timers: {"wall_s", "categories": {cat: s},
    "kernels": {name: (s, calls)}, "products": [(name, m, n, k, s, calls, gflops)],
    "system_s", "page_faults"}: the last two over the whole call, every thread (the
    operating system's time, mostly clearing and mapping the pages of new memory as
    it is first written: part of the categories' times, not beside them); None where
    the platform does not say."""
    with timed_kernels() as rec:
        u0 = _usage()
        t0 = time.perf_counter()
        call()
        wall = time.perf_counter() - t0
        u1 = _usage()
    cats = {}
    for name, (s, _) in rec["by_name"].items():
        cats[_category(name)] = cats.get(_category(name), 0.0) + s
    cats["Python and copies"] = max(0.0, wall - sum(cats.values()))
    prods = []
    for (name, m, n, k), (s, c) in rec["by_shape"].items():
        fl = 2.0 * m * n * k * c
        prods.append((name, m, n, k, s, c, fl / s / 1e9 if s > 0 else 0.0))
    prods.sort(key=lambda r: -r[4])
    return {"wall_s": wall, "categories": cats,
            "kernels": {k: tuple(v) for k, v in rec["by_name"].items()}, "products": prods,
            "system_s": None if u0 is None else u1[0] - u0[0],
            "page_faults": None if u0 is None else u1[1] - u0[1]}


def median_breakdown(call, reps: int = 3) -> dict:
    """``call()`` once untimed (the first call of a shape pays what later ones do not:
    workspaces and caches growing to it, fresh pages; on SmolLM2-135M a first 512-token
    prefill took 1.37 s against 1.12 s for the next ones, AMD EPYC Zen 2, 2 threads),
    then ``reps`` runs under the
    timers. Returns the breakdown of the run with the median wall time (a whole run, so
    its categories still sum to its wall time), with "runs_s": every timed run's wall
    time in the order run."""
    if reps < 1:
        raise ValueError(f"mojolearn: median_breakdown: reps must be at least 1 (got {reps})")
    call()
    runs = [breakdown(call) for _ in range(reps)]
    order = sorted(range(reps), key=lambda i: runs[i]["wall_s"])
    b = dict(runs[order[(reps - 1) // 2]])
    b["runs_s"] = [r["wall_s"] for r in runs]
    return b


def report(title: str, b: dict, top: int = 8, peak_gflops=None) -> str:
    """The breakdown as text; with ``peak_gflops`` (fma_peak's) each product shape also
    gets its share of this CPU build's FMA peak (the float32 products only: the int15
    products of fixed15_v1 run integer instructions)."""
    head = f"{title}: {b['wall_s'] * 1e3:.1f} ms"
    if len(b.get("runs_s", ())) > 1:
        rs = b["runs_s"]
        head += (f" (the median of {len(rs)} timed runs, {min(rs) * 1e3:.1f}-{max(rs) * 1e3:.1f} ms, "
                 f"after an untimed one)")
    lines = [head]
    for cat, s in sorted(b["categories"].items(), key=lambda kv: -kv[1]):
        lines.append(f"  {cat:<22} {s * 1e3:9.1f} ms  {100 * s / b['wall_s']:5.1f}%")
    if b.get("system_s") is not None:
        lines.append(f"  within them: {b['system_s'] * 1e3:.1f} ms of system CPU time, all threads, "
                     f"and {b['page_faults']} page faults (new memory first written)")
    if b["products"]:
        head = "  products by shape (m x n x k): ms, calls, GFLOP/s"
        lines.append(head + (", % of the FMA peak" if peak_gflops else ""))
        for name, m, n, k, s, c, g in b["products"][:top]:
            row = (f"    {name:<14} {m:>5} x {n:>6} x {k:>5}  {s * 1e3:8.1f} ms  "
                   f"{c:>5}  {g:7.1f}")
            if peak_gflops and name in FLOAT_PRODUCTS:
                row += f"  {100 * g / peak_gflops:5.1f}%"
            lines.append(row)
    return "\n".join(lines)


def torch_profile(fn, top: int = 10) -> str:
    """torch's own profiler over fn(): its top ops by self CPU time."""
    import torch

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=top)


@contextlib.contextmanager
def timed_torch_mode():
    """Times, inside mojolearn.torch.identical(), the products (fp32.v1 through linalg)
    and the mode's kernel calls; yields {"products": s, "kernels": s, "by_kernel":
    {native entry: s}} (the fused attention is "nn_attention")."""
    from .._torch import mode as M

    rec = {"products": 0.0, "kernels": 0.0, "by_kernel": {}}
    prod, nat = M._product, M._native

    def product(*a, **kw):
        t0 = time.perf_counter()
        try:
            return prod(*a, **kw)
        finally:
            rec["products"] += time.perf_counter() - t0

    class _Timed:
        def __init__(self, mod):
            self._mod = mod

        def __getattr__(self, name):
            f = getattr(self._mod, name)

            def call(*a, **kw):
                t0 = time.perf_counter()
                try:
                    return f(*a, **kw)
                finally:
                    dt = time.perf_counter() - t0
                    rec["kernels"] += dt
                    rec["by_kernel"][name] = rec["by_kernel"].get(name, 0.0) + dt
            return call

    M._product = product
    M._native = lambda: _Timed(nat())
    try:
        yield rec
    finally:
        M._product, M._native = prod, nat


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mojolearn profile",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="a Hugging Face folder or a .gguf file")
    ap.add_argument("--tokens", type=int, default=512, help="prefill length (default 512)")
    ap.add_argument("--decode", type=int, default=32, help="greedy tokens after a 32-token "
                    "prompt (default 32; 0: none)")
    ap.add_argument("--profile", default=None, help="numeric_profile (default: the model's)")
    ap.add_argument("--reps", type=int, default=3, help="timed runs of each call after an "
                    "untimed one: the breakdowns are of the median run; --torch's two sides "
                    "interleaved (default 3)")
    ap.add_argument("--torch", action="store_true", help="also transformers' forward: torch's "
                    "own profile, and inside mojolearn.torch.identical()")
    a = ap.parse_args(argv)
    if a.reps < 1:
        ap.error(f"--reps must be at least 1 (got {a.reps})")
    import numpy as np

    from ..models import CausalLM

    from .._core.cpu import cpu_isa

    lm = CausalLM.load(a.model, numeric_profile=a.profile)
    v = lm.config.vocab_size
    ids = (np.arange(a.tokens, dtype=np.int64)[None, :] * 7919) % v
    pk = fma_peak()
    print(f"FMA peak of this CPU build ({cpu_isa()}), measured: {pk['gflops']:.1f} GFLOP/s on "
          f"{pk['tasks']} threads ({pk['per_task_gflops']:.1f} a thread)")
    print(report(f"CausalLM.forward, prefill {a.tokens} ({lm.numeric_profile})",
                 median_breakdown(lambda: lm.forward(ids), a.reps), peak_gflops=pk["gflops"]),
          flush=True)
    if a.decode:
        p = ids[:, :32]
        print(report(f"CausalLM.generate, {a.decode} tokens after 32",
                     median_breakdown(lambda: lm.generate(p, a.decode), a.reps),
                     peak_gflops=pk["gflops"]), flush=True)
    if a.torch:
        import os
        import tempfile

        import torch
        import transformers

        path = a.model
        if path.endswith(".gguf"):
            sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
                os.path.dirname(os.path.dirname(os.path.abspath(__file__))))), "bench"))
            from hf_export import export_hf

            path = export_hf(a.model, tempfile.mkdtemp(prefix="mojolearn-profile-"))
        hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        tids = torch.from_numpy(ids)

        def fwd():
            with torch.no_grad():
                return hf(tids).logits

        import mojolearn.torch as mtorch

        def timed(f):
            t0 = time.perf_counter()
            f()
            return time.perf_counter() - t0

        def on():
            with mtorch.identical():
                fwd()

        fwd()
        on()  # warm both
        plain, mode = [], []
        for _ in range(a.reps):  # interleaved: a busy host slows both sides alike
            plain.append(timed(fwd))
            mode.append(timed(on))
        med = lambda xs: sorted(xs)[len(xs) // 2]
        print(f"transformers forward, prefill {a.tokens}: {med(plain) * 1e3:.1f} ms (median of "
              f"{a.reps}); torch's profile:")
        print(torch_profile(fwd))
        with mtorch.identical():
            with timed_torch_mode() as rec:
                wall = timed(fwd)
        rest = max(0.0, wall - rec["products"] - rec["kernels"])
        print(f"inside mojolearn.torch.identical(): {med(mode) * 1e3:.1f} ms (median of {a.reps}; "
              f"torch alone / mode = {med(plain) / med(mode):.2f}x, > 1: the mode faster)")
        print(f"  one timed run, {wall * 1e3:.1f} ms: products {rec['products'] * 1e3:.1f} ms, "
              f"the mode's kernels {rec['kernels'] * 1e3:.1f} ms, torch's ops, dispatch and "
              f"copies {rest * 1e3:.1f} ms")
        by = sorted(rec["by_kernel"].items(), key=lambda kv: -kv[1])
        print("  the mode's kernels: " + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in by))
    return 0


__all__ = ["fma_peak", "breakdown", "median_breakdown", "report", "timed_kernels", "torch_profile", "timed_torch_mode", "main"]

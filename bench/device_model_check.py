"""The models on the GPU, on a GPU machine: bits first, then time (step 8 of
bench/device_check.sh).

    PYTHONPATH=python python bench/device_model_check.py [--model GGUF] [--out DIR]
    PYTHONPATH=python python bench/device_model_check.py --reference   (no GPU: the tiny
        arms only, through the CPU run of the GPU bodies; device_check --cpu-half; with
        --model a small checkpoint, every arm of the script, no result file)

ARMS, in order (any bit that differs fails the run; the timings come after the bits)
  1 tiny    a tiny random checkpoint (written here) on the GPU vs the CPU model: fp32_v1
            and fixed15_v1 x float32 / bfloat16 / int8 weights, tied and untied heads;
            batch 3 prefill, prefill then 3 steps, greedy and sampled generation (seed)
  1b mamba  tiny Mamba-1 and Mamba-2 checkpoints on the GPU vs the CPU MambaLM: a
            300-token batch-2 prefill, prefill then steps, greedy and sampled generation,
            float32 / bfloat16 / int8 projections
  2 sabotage  the tiny model on the GPU with one bit of its final norm weight flipped in
            device memory: its logits MUST differ from the CPU's (the comparison is
            seen failing), then the bit is put back and they must agree again
  3 model   SmolLM2-135M (the GGUF the tests fetch: --model, or the MOJOLEARN_MODEL_CACHE
            copy, or bench/fetch_model.py) on the GPU vs the CPU: logits of a 512-token
            prefill and of 16 decode steps fed the CPU's greedy tokens, fp32_v1 and
            fixed15_v1, bit for bit; and the sabotage arm again on it
  4 time    CausalLM.forward prefill of 512 tokens at batch 1 and decode per token
            (CausalLM.step of one token after a 32-token prompt), fp32_v1 and fixed15_v1
            interleaved, medians of --reps; transformers' LlamaForCausalLM on torch CUDA
            (float32, TF32 off) on the same weights beside it. Written to
            bench/results/model-gpu-<device>-<arch>.json with the MEASURED row of the
            vendor ("cuda" or "hip"): fixed15_v1 over fp32_v1, the range of the paired
            per-rep prefill ratios (python/mojolearn/_profile_measured.py reads it).
Exit status: 0 all arms ran and agreed; 1 a bit differed or the sabotage was not seen;
3 the bits agreed but SmolLM2-135M was not available here (its figures are owed).
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
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "bench"))

import numpy as np  # noqa: E402

from mojolearn.models import CausalLM  # noqa: E402
from mojolearn.models._exec.device import ReferenceBackend  # noqa: E402

PROFILES = ("fp32_v1", "fixed15_v1")
FORMATS = ("float32", "bfloat16", "int8")
BAD = []


def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(
        a.view(np.uint32) if a.dtype == np.float32 else a, b.view(np.uint32) if b.dtype == np.float32 else b)


def report(name, ok, expect=True):
    print(f"  {name:<58} {'same bits' if ok else 'DIFFER'}"
          f"{'' if ok == expect else '   <-- UNEXPECTED'}", flush=True)
    if ok != expect:
        BAD.append(name)


def gpu_kw(args):
    return {"_device_backend": ReferenceBackend()} if args.reference else {"device": "gpu"}


# ---------------------------------------------------------------- 1 tiny
def tiny_checkpoint(folder, tied, seed):
    from safetensors.numpy import save_file

    cfg = dict(model_type="llama", vocab_size=97, hidden_size=64, intermediate_size=96,
               num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
               rms_norm_eps=1e-5, rope_theta=10000.0, max_position_embeddings=64,
               tie_word_embeddings=tied, hidden_act="silu")
    rng = np.random.default_rng(seed)
    f = lambda *s: (rng.standard_normal(s) * 0.2).astype(np.float32)  # noqa: E731
    d, ff, V = 64, 96, 97
    w = {"model.embed_tokens.weight": f(V, d), "model.norm.weight": 1 + f(d)}
    if not tied:
        w["lm_head.weight"] = f(V, d)
    for i in range(2):
        p = f"model.layers.{i}."
        w.update({p + "input_layernorm.weight": 1 + f(d), p + "post_attention_layernorm.weight": 1 + f(d),
                  p + "self_attn.q_proj.weight": f(d, d), p + "self_attn.k_proj.weight": f(32, d),
                  p + "self_attn.v_proj.weight": f(32, d), p + "self_attn.o_proj.weight": f(d, d),
                  p + "mlp.gate_proj.weight": f(ff, d), p + "mlp.up_proj.weight": f(ff, d),
                  p + "mlp.down_proj.weight": f(d, ff)})
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as fh:
        json.dump(cfg, fh)
    save_file(w, os.path.join(folder, "model.safetensors"))
    return folder, cfg


def tiny_arm(args, tmp):
    print("== 1 tiny model: GPU vs CPU", flush=True)
    for tied in (False, True):
        path, cfg = tiny_checkpoint(os.path.join(tmp, f"tiny-{tied}"), tied, 3 + tied)
        ids = np.random.default_rng(9).integers(0, cfg["vocab_size"], size=(3, 8))
        for prof in PROFILES:
            for fmt in FORMATS:
                cpu = CausalLM.load(path, numeric_profile=prof, weight_format=fmt, device="cpu")
                gpu = CausalLM.load(path, numeric_profile=prof, weight_format=fmt, **gpu_kw(args))
                ok = same(gpu.forward(ids), cpu.forward(ids))
                sc, sg = cpu.allocate_state(3, 8), gpu.allocate_state(3, 8)
                ok &= same(gpu.forward(ids[:, :5], sg), cpu.forward(ids[:, :5], sc))
                for t in range(5, 8):
                    ok &= same(gpu.step(ids[:, t:t + 1], sg), cpu.step(ids[:, t:t + 1], sc))
                ok &= same(gpu.generate(ids[:, :3], 4), cpu.generate(ids[:, :3], 4))
                ok &= same(gpu.generate(ids[:, :3], 4, greedy=False, seed=5),
                           cpu.generate(ids[:, :3], 4, greedy=False, seed=5))
                report(f"tiny {'tied' if tied else 'untied'} {prof} {fmt}", ok)
    return path, cfg, ids


def mamba_arm(args, tmp):
    """1b: tiny Mamba-1 and Mamba-2 checkpoints (tests/mamba_oracle.py writes them) on the
    GPU vs the CPU MambaLM: batch 2 prefill of 300 tokens (past one Mamba-2 chunk),
    prefill then 4 steps, greedy and sampled generation, float32 / bfloat16 / int8."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import mamba_oracle as SO
    from test_models_mamba import M1, M2

    print("== 1b tiny Mamba models: GPU vs CPU", flush=True)
    for name, cfg in (("mamba1", M1), ("mamba2", M2)):
        path = os.path.join(tmp, name)
        SO.write_checkpoint(path, dict(cfg), SO.random_weights(dict(cfg), seed=31))
        ids = np.random.default_rng(4).integers(0, cfg["vocab_size"], size=(2, 300))
        for fmt in FORMATS:
            cpu = CausalLM.load(path, weight_format=fmt, device="cpu")
            gpu = CausalLM.load(path, weight_format=fmt, **gpu_kw(args))
            ok = same(gpu.forward(ids), cpu.forward(ids))
            sc, sg = cpu.allocate_state(2, 304), gpu.allocate_state(2, 304)
            ok &= same(gpu.forward(ids[:, :260], sg), cpu.forward(ids[:, :260], sc))
            for t in range(260, 264):
                ok &= same(gpu.step(ids[:, t:t + 1], sg), cpu.step(ids[:, t:t + 1], sc))
            ok &= same(gpu.generate(ids[:, :5], 4), cpu.generate(ids[:, :5], 4))
            ok &= same(gpu.generate(ids[:, :5], 4, greedy=False, seed=5),
                       cpu.generate(ids[:, :5], 4, greedy=False, seed=5))
            report(f"tiny {name} {fmt}", ok)


def flip_norm_bit(lm):
    """Sabotage: flip one bit (mantissa bit 20: the value moves by about 1/8) of the
    first element of the final norm weight in the model's device memory (the lowest bit
    can vanish in fixed15_v1's head quantization); returns the original weight."""
    g = lm._gpu
    w = g.backend.read(g.norm)
    bad = w.copy()
    bad.view(np.uint32)[0] ^= 1 << 20
    g.backend.write(g.norm, bad)
    return w


def sabotage_arm(name, path, ids, args, **kw):
    cpu = CausalLM.load(path, device="cpu", **kw)
    gpu = CausalLM.load(path, **gpu_kw(args), **kw)
    want = cpu.forward(ids)
    good = flip_norm_bit(gpu)
    report(f"{name}: sabotaged (one norm bit flipped on the device)", same(gpu.forward(ids), want),
           expect=False)
    gpu._gpu.backend.write(gpu._gpu.norm, good)
    report(f"{name}: the bit put back", same(gpu.forward(ids), want))


# ---------------------------------------------------------------- 3 SmolLM2-135M
def find_model(args):
    if args.model:
        return args.model
    try:
        from fetch_model import fetch

        return fetch()
    except Exception as e:  # no network on the machine, no cached copy
        print(f"SmolLM2-135M is not available here ({type(e).__name__}: {e})")
        return None


def model_arm(path, args):
    n, steps = args.prefill, args.steps
    print(f"== 3 SmolLM2-135M: GPU vs CPU, {n}-token prefill and {steps} decode steps", flush=True)
    models = {}
    for prof in PROFILES:
        t0 = time.perf_counter()
        cpu = CausalLM.load(path, numeric_profile=prof, device="cpu")
        gpu = CausalLM.load(path, numeric_profile=prof, **gpu_kw(args))
        print(f"  loaded {prof} on the CPU and the GPU in {time.perf_counter() - t0:.1f} s",
              flush=True)
        V = cpu.config.vocab_size
        ids = (np.arange(n, dtype=np.int64)[None, :] * 7919) % V
        report(f"SmolLM2 {prof} prefill {n}", same(gpu.forward(ids), cpu.forward(ids)))
        sc, sg = cpu.allocate_state(1, n + steps), gpu.allocate_state(1, n + steps)
        lc, lg = cpu.step(ids, sc), gpu.step(ids, sg)
        ok = same(lg, lc)
        for _ in range(steps):
            nxt = np.argmax(lc, axis=1)[:, None]
            lc, lg = cpu.step(nxt, sc), gpu.step(nxt, sg)
            ok &= same(lg, lc)
        report(f"SmolLM2 {prof} prefill {n} then {steps} decode steps", ok)
        models[prof] = gpu
        if prof == "fp32_v1":  # the sabotage arm's reference, while the CPU model is here
            sab_ids = ids[:, :64]
            sab_want = cpu.forward(sab_ids)
        del cpu
    gpu = models["fp32_v1"]
    good = flip_norm_bit(gpu)
    report("SmolLM2 fp32_v1: sabotaged (one norm bit flipped on the device)",
           same(gpu.forward(sab_ids), sab_want), expect=False)
    gpu._gpu.backend.write(gpu._gpu.norm, good)
    report("SmolLM2 fp32_v1: the bit put back", same(gpu.forward(sab_ids), sab_want))
    return models


# ---------------------------------------------------------------- 4 timings
def med(fn, reps, sync=None):
    fn()
    if sync:
        sync()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        if sync:
            sync()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts), ts


def time_arm(models, path, args):
    print("== 4 whole-model time (after the bits)", flush=True)
    n, reps = args.prefill, args.reps
    f32, f15 = models["fp32_v1"], models["fixed15_v1"]
    V = f32.config.vocab_size
    ids = (np.arange(n, dtype=np.int64)[None, :] * 7919) % V
    pre = {"fp32_v1": [], "fixed15_v1": []}
    for _ in range(reps):  # interleaved, so a drift of the machine hits both alike
        for prof, lm in (("fp32_v1", f32), ("fixed15_v1", f15)):
            t = time.perf_counter()
            lm.forward(ids)
            pre[prof].append(time.perf_counter() - t)
    dec = {}
    dids = (np.arange(32 + args.steps, dtype=np.int64)[None, :] * 7919) % V
    for prof, lm in (("fp32_v1", f32), ("fixed15_v1", f15)):
        st = lm.allocate_state(1, 32 + args.steps)
        lm.step(dids[:, :32], st)
        ts = []
        for t in range(args.steps):
            t0 = time.perf_counter()
            lm.step(dids[:, 32 + t:33 + t], st)
            ts.append(time.perf_counter() - t0)
        dec[prof] = ts
    ratios = [b / a for a, b in zip(pre["fp32_v1"], pre["fixed15_v1"])]
    rows = {"prefill": {p: {"median_ms": 1e3 * statistics.median(v), "reps_ms": [1e3 * x for x in v]}
                        for p, v in pre.items()},
            "decode_per_token": {p: {"median_ms": 1e3 * statistics.median(v),
                                     "reps_ms": [1e3 * x for x in v]} for p, v in dec.items()},
            "fixed15_over_fp32_prefill": {"lo": min(ratios), "hi": max(ratios),
                                          "median": statistics.median(ratios)}}
    for what in ("prefill", "decode_per_token"):
        for p in PROFILES:
            print(f"  mojolearn {what:<17} {p:<11} {rows[what][p]['median_ms']:9.2f} ms", flush=True)
    rows["torch"] = torch_rows(path, ids, args)
    return rows


def torch_rows(gguf, ids, args):
    """transformers LlamaForCausalLM on torch CUDA, float32 with TF32 off, same weights."""
    try:
        import torch
        import transformers
        from hf_export import export_hf
    except ImportError as e:
        print(f"  torch / transformers not available ({e}): no torch rows")
        return None
    if not torch.cuda.is_available():
        print("  torch sees no CUDA device: no torch rows")
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    hf_dir = export_hf(gguf, os.path.join(os.path.dirname(gguf), "smollm2-135m-hf"))
    hf = transformers.LlamaForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float32).cuda().eval()
    tids = torch.from_numpy(ids).cuda()
    sync = torch.cuda.synchronize

    def prefill():
        with torch.no_grad():
            return hf(tids).logits

    p_med, p_all = med(prefill, args.reps, sync)
    new = args.steps

    def gen():
        with torch.no_grad():
            return hf.generate(tids[:, :32], max_new_tokens=new, min_new_tokens=new, do_sample=False)

    g_med, g_all = med(gen, max(1, args.reps // 2), sync)
    out = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "transformers": transformers.__version__, "tf32": False,
           "prefill": {"median_ms": 1e3 * p_med, "reps_ms": [1e3 * x for x in p_all]},
           "decode_per_token": {"median_ms": 1e3 * g_med / new,
                                "what": f"generate({new} tokens after 32, greedy) / {new}"}}
    print(f"  torch CUDA fp32    prefill           {out['prefill']['median_ms']:9.2f} ms; "
          f"decode {out['decode_per_token']['median_ms']:.2f} ms/token", flush=True)
    return out


def write_results(rows, gguf, args):
    from mojolearn._core import device as _device, box as _box

    mod, api, name = _device.gpu_status()
    gpu_name = str(name)
    slug = re.sub(r"[^a-z0-9]+", "-", gpu_name.lower()).strip("-")
    out_dir = Path(args.out or ROOT / "bench" / "results")
    out = out_dir / f"model-gpu-{slug}-{args.arch or 'gpu'}.json"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or None
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    o = rows["fixed15_over_fp32_prefill"]
    data = {
        "vendor": api, "box": gpu_name, "arch": args.arch, "date": stamp, "commit": commit,
        "command": "bench/device_check.sh (step 8, bench/device_model_check.py)",
        "machine": {"gpu": gpu_name, "cpu": _box.box(), "platform": platform.platform()},
        "model": os.path.basename(gguf),
        "method": (f"bits first (tiny models, SmolLM2-135M prefill {args.prefill} + {args.steps} "
                   f"steps, GPU vs CPU, all equal), then CausalLM.forward prefill of "
                   f"{args.prefill} tokens at batch 1, fp32_v1 and fixed15_v1 interleaved, "
                   f"{args.reps} reps after one untimed call; decode: CausalLM.step of one token "
                   f"after a 32-token prompt, {args.steps} steps; medians"),
        "rows": rows,
        "profiles": {"fixed15_v1": {
            "over": [round(o["lo"], 3), round(o["hi"], 3)],
            "what": (f"CausalLM.forward on the GPU ({gpu_name}), prefill of {args.prefill} tokens "
                     f"at batch 1, SmolLM2-135M, fixed15_v1 over fp32_v1; range of the paired "
                     f"per-rep ratios, median {o['median']:.3f}"),
            "source": f"bench/results/{out.name} (bench/device_check.sh, commit {commit}, {stamp})",
        }},
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {out}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reference", action="store_true",
                    help="no GPU: the GPU path through the CPU run of its bodies (tiny arms)")
    ap.add_argument("--model", help="the SmolLM2-135M GGUF (default: the cache or a fetch)")
    ap.add_argument("--out", help="folder of the result file (default bench/results)")
    ap.add_argument("--arch", default=os.environ.get("DEVICE_CHECK_ARCH", ""))
    ap.add_argument("--prefill", type=int, default=512)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        path, cfg, ids = tiny_arm(args, tmp)
        mamba_arm(args, tmp)
        print("== 2 sabotage arm (tiny)", flush=True)
        sabotage_arm("tiny fp32_v1", path, ids, args, numeric_profile="fp32_v1")
        sabotage_arm("tiny fixed15_v1", path, ids, args, numeric_profile="fixed15_v1")
    if BAD:
        print(f"device_model_check: FAILED: {BAD}")
        return 1
    if args.reference and not args.model:
        print(f"device_model_check: reference arms ok ({time.perf_counter() - t0:.0f} s)")
        return 0
    gguf = find_model(args)
    if gguf is None:
        print("device_model_check: the tiny arms agree; OWED (SmolLM2-135M not available): "
              "the 512-token prefill and 16-step decode bits on the GPU, the sabotage arm on "
              "it, the whole-model timings and the MEASURED row; pass --model GGUF")
        return 3
    models = model_arm(gguf, args)
    if BAD:
        print(f"device_model_check: FAILED: {BAD}")
        return 1
    rows = time_arm(models, gguf, args)
    if args.reference:  # a run of the script's own path: no result file, no MEASURED row
        print(f"device_model_check: reference run of every arm ok ({time.perf_counter() - t0:.0f} s)")
        return 0
    write_results(rows, gguf, args)
    print(f"device_model_check: all arms ok ({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

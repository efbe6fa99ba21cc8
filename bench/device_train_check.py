"""The training step on the GPU, on a GPU machine: 20 AdamW steps of a tiny model on the
GPU path against the CPU Trainer, bit for bit, then the time of a step (step 8b of
bench/device_check.sh).

    PYTHONPATH=python python bench/device_train_check.py [--steps 20] [--out DIR]
    PYTHONPATH=python python bench/device_train_check.py --reference   (no GPU: the same
        arms through the CPU run of the GPU bodies; device_check --cpu-half; no result file)

ARMS, in order (any bit that differs fails the run; the timings come after the bits)
  1 bits      tiny llama (GQA 4:2, untied head) and qwen2 (q/k/v biases, GQA 4:1, tied head)
              checkpoints written here: --steps AdamW steps with a warmup-cosine schedule
              and the clip (max_norm 0.5), a new batch each step (3 x 50 tokens: every
              token sum crosses a 128 leaf); after EVERY step the loss, every weight and
              both moments must be the CPU Trainer's bits
  2 sabotage  one step with the clip's coefficient skipped (its max_norm raised to the
              largest float32 in the program): the weights MUST differ from the CPU's
  3 time      the median wall time of a GPU step and of a CPU step of the llama model
              (after the bits; the tiny model measures the launch overhead, not the
              kernels)
Written to bench/results/train-gpu-<device>-<arch>.json with the commit, the date and the
command. Without a GPU (and without --reference) it prints why and exits 0 with nothing
written: the figures are owed to a GPU machine.
Exit status: 0 every arm agreed (or no GPU here); 1 a bit differed or the sabotage was not seen.
"""
from __future__ import annotations

import argparse
import datetime
import json
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
sys.path.insert(0, str(ROOT / "tests"))

import numpy as np  # noqa: E402

from mojolearn import training  # noqa: E402
from mojolearn._core import device as _device  # noqa: E402
from mojolearn.models._exec.device import ReferenceBackend  # noqa: E402

BAD = []


def gpu_kw(args):
    return {"_device_backend": ReferenceBackend()} if args.reference else {"device": "gpu"}


def sched():
    return training.WarmupCosineLR(3e-3, warmup_steps=3, total_steps=20, min_lr=1e-4)


def same_state(cpu, dev):
    """(ok, first differing item or '')."""
    wc, wd = cpu.weights(), dev.weights()
    for n in wc:
        if not np.array_equal(wc[n].view(np.uint32), wd[n].view(np.uint32)):
            return False, n
    sc, sd = cpu.optimizer.state_dict(), dev.optimizer.state_dict()
    for k in ("exp_avg", "exp_avg_sq"):
        if not np.array_equal(sc[k].view(np.uint32), sd[k].view(np.uint32)):
            return False, k
    return sc["t"] == sd["t"], "t"


def report(name, ok, expect=True, note=""):
    print(f"  {name:<52} {'same bits' if ok else 'DIFFER'}{note}"
          f"{'' if ok == expect else '   <-- UNEXPECTED'}", flush=True)
    if ok != expect:
        BAD.append(name)


def bits_arm(args, paths):
    print(f"== 1 training steps: GPU vs CPU ({args.steps} AdamW steps, cosine, clip)", flush=True)
    from test_training_model import SHAPES

    for arch, path in paths.items():
        cpu = training.Trainer(path, max_norm=0.5, lr_schedule=sched(), weight_decay=0.05)
        dev = training.Trainer(path, max_norm=0.5, lr_schedule=sched(), weight_decay=0.05,
                               **gpu_kw(args))
        V = SHAPES[arch]["vocab_size"]
        ok, where = True, ""
        for s in range(args.steps):
            ids = np.random.default_rng(100 + s).integers(0, V, size=(3, 50))
            lc, ld = cpu.step(ids), dev.step(ids)
            if np.float32(lc).view(np.uint32) != np.float32(ld).view(np.uint32):
                ok, where = False, f"loss of step {s + 1}"
                break
            good, item = same_state(cpu, dev)
            if not good:
                ok, where = False, f"{item} after step {s + 1}"
                break
        report(f"{arch}: {args.steps} steps, losses, weights, moments", ok,
               note=f" (first: {where})" if where else f" (last loss {ld:.6g})")


def sabotage_arm(args, path):
    print("== 2 sabotage: the clip's coefficient skipped must differ", flush=True)
    cpu = training.Trainer(path, max_norm=0.05, lr=2e-3)
    dev = training.Trainer(path, max_norm=0.05, lr=2e-3, **gpu_kw(args))
    dev._dev.sabotage = lambda ops: [op[:5] + (0x7F7FFFFF,) if op[0] == "train_clip" else op
                                     for op in ops]
    ids = np.random.default_rng(7).integers(0, 300, size=(2, 20))
    cpu.step(ids)
    dev.step(ids)
    report("llama: one step without the clip's rescale", same_state(cpu, dev)[0], expect=False)


def time_arm(args, path, reps=5):
    print("== 3 time of a step (llama, 3 x 50 tokens)", flush=True)
    out = {}
    for name, kw in (("gpu", gpu_kw(args)), ("cpu", {})):
        tr = training.Trainer(path, max_norm=0.5, lr=1e-3, **kw)
        ids = np.random.default_rng(1).integers(0, 300, size=(3, 50))
        tr.step(ids)
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            tr.step(ids)
            ts.append(time.perf_counter() - t)
        out[name] = statistics.median(ts)
        print(f"  {name}: {out[name] * 1e3:9.2f} ms a step (median of {reps})", flush=True)
    return out


def write_results(args, times):
    mod, api, name = _device.gpu_status()
    box = re.sub(r"[^a-z0-9]+", "-", str(name).lower()).strip("-") or "gpu"
    out_dir = Path(args.out or ROOT / "bench" / "results")
    out_dir.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    res = {"machine": platform.node(), "vendor": api, "device": str(name), "arch": args.arch,
           "date": stamp, "commit": commit, "command": " ".join(sys.argv),
           "steps": args.steps, "bits": "same" if not BAD else "DIFFER", "failed": BAD,
           "step_seconds": times}
    out = out_dir / f"train-gpu-{box}-{args.arch or 'unknown'}.json"
    out.write_text(json.dumps(res, indent=1) + "\n")
    print(f"wrote {out}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reference", action="store_true",
                    help="no GPU: run the arms through the CPU run of the GPU bodies")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--arch", default="")
    ap.add_argument("--out", help="folder of the result file (default bench/results)")
    args = ap.parse_args(argv)
    if not args.reference:
        mod, _api, why = _device.gpu_status()
        if mod is None or not hasattr(mod, "nn_program_dev"):
            print(f"device_train_check: skipped, no GPU build runs here ({why}); the GPU "
                  f"figures are owed to a GPU machine (--reference runs the arms on the CPU)")
            return 0
    from test_training_model import write_model

    with tempfile.TemporaryDirectory() as tmp:
        paths = {a: write_model(str(Path(tmp) / a), a, seed=5) for a in ("llama", "qwen2")}
        bits_arm(args, paths)
        sabotage_arm(args, paths["llama"])
        times = time_arm(args, paths["llama"])
    if not args.reference:
        write_results(args, times)
    print(f"device_train_check: {'all arms agree' if not BAD else 'FAILED: ' + ', '.join(BAD)}")
    return 1 if BAD else 0


if __name__ == "__main__":
    sys.exit(main())

"""The implementation of ``mojolearn.drift``: what it computes and promises is
that public module's docstring (python/mojolearn/drift.py), which re-exports
this module's public names."""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
import time
from pathlib import Path


def logit_drift(a, b) -> dict:
    """max |a - b|, the largest difference in units in the last place of the larger of
    the two magnitudes (float32 spacing), and the bit-identical fraction of two float32
    arrays (positions where either is NaN are not counted), with the median and 99th
    percentile of the ulps (a logit near zero can be many of its own ulps away)."""
    import numpy as np

    a = np.ascontiguousarray(a, dtype=np.float32)
    b = np.ascontiguousarray(b, dtype=np.float32)
    ok = ~(np.isnan(a) | np.isnan(b))
    if not ok.any():
        return {"max_abs": 0.0, "max_ulps": 0.0, "median_ulps": 0.0, "p99_ulps": 0.0,
                "identical_fraction": 1.0}
    x, y = a[ok], b[ok]
    big = np.maximum(np.abs(x), np.abs(y))
    gap = np.abs(x.astype(np.float64) - y)
    ulps = gap / np.spacing(big).astype(np.float64)  # in the larger magnitude's ulps
    return {"max_abs": float(np.max(gap)), "max_ulps": float(np.max(ulps)),
            "median_ulps": float(np.median(ulps)), "p99_ulps": float(np.percentile(ulps, 99)),
            "identical_fraction": float(np.mean(a.view(np.uint32)[ok] == b.view(np.uint32)[ok]))}


def measure(model_path, mode, *, profile="fp32_v1", text=None, ids=None, windows=8,
            window_tokens=256, prompts=4, new_tokens=32, bootstrap=2000, seed=0,
            progress=None) -> dict:
    """The drift of ``mode`` against identical (see the module docstring). The tokens
    come from ``text`` (with the model's tokenizer) or are given as ``ids`` (1-D)."""
    import numpy as np

    from .._table import modes
    from ..models import CausalLM, Tokenizer
    from .quality import _nll

    mode = modes.resolve(mode, what="mode")
    if ids is None:
        tok = Tokenizer.load(model_path if str(model_path).endswith(".gguf")
                             else os.path.join(model_path, "tokenizer.json"))
        ids = np.array(tok.encode(text), dtype=np.int64)
    ids = np.asarray(ids, dtype=np.int64)
    n_all = len(ids) // window_tokens
    if n_all == 0:
        raise ValueError(f"mojolearn: drift: {len(ids)} tokens, fewer than one window of "
                         f"{window_tokens}")
    pick = np.unique(np.linspace(0, n_all - 1, min(windows, n_all)).round().astype(int))
    base = CausalLM.load(model_path, numeric_profile=profile, numeric_mode="identical")
    other = CausalLM.load(model_path, numeric_profile=profile, numeric_mode=mode)
    worst = {"max_abs": 0.0, "max_ulps": 0.0, "median_ulps": 0.0, "p99_ulps": 0.0}
    same, diffs, t0 = [], [], time.time()
    for i, w in enumerate(pick):
        x = ids[w * window_tokens:(w + 1) * window_tokens]
        la, lb = base.forward(x[None, :]), other.forward(x[None, :])
        d = logit_drift(la, lb)
        worst = {key: max(worst[key], d[key]) for key in worst}  # the worst window
        same.append(d["identical_fraction"])
        diffs.append(float((_nll(lb, x) - _nll(la, x)).mean()))
        if progress:
            progress(f"  window {i + 1}/{len(pick)} ({time.time() - t0:.0f}s): max |diff| "
                     f"{worst['max_abs']:.3g}, {worst['max_ulps']:.0f} ulps")
    dd = np.array(diffs)
    rng = np.random.default_rng(seed)
    boots = np.exp(dd[rng.integers(0, len(dd), size=(bootstrap, len(dd)))].mean(axis=1)) - 1
    lo, hi = np.percentile(boots, [2.5, 97.5])
    agree, first = [], []
    plen = min(32, window_tokens)
    for w in pick[:prompts]:
        p = ids[w * window_tokens:w * window_tokens + plen][None, :]
        ga = base.generate(p, new_tokens)[0, plen:]
        gb = other.generate(p, new_tokens)[0, plen:]
        eq = ga == gb
        agree.append(float(eq.mean()) if eq.size else 1.0)
        first.append(int(np.argmin(eq)) if not eq.all() else None)
        if progress:
            progress(f"  generation {len(agree)}/{min(prompts, len(pick))}: "
                     f"{agree[-1]:.3f} of the new tokens agree")
    return {
        "mode": mode, "against": "identical", "numeric_profile": profile,
        "windows": int(len(pick)), "window_tokens": window_tokens,
        "logits": {**worst, "identical_fraction": float(np.mean(same))},
        "perplexity": {"change": float(math.exp(dd.mean()) - 1),
                       "interval": [float(lo), float(hi)], "bootstrap": bootstrap, "seed": seed},
        "greedy": {"prompts": len(agree), "prompt_tokens": plen, "new_tokens": new_tokens,
                   "agreement": float(np.mean(agree)) if agree else None,
                   "first_disagreement": first},
    }


def main(argv=None) -> int:
    """The command line (``python -m mojolearn drift ...``); returns the exit status."""
    ap = argparse.ArgumentParser(prog="python -m mojolearn drift")
    ap.add_argument("model")
    ap.add_argument("--mode", required=True, help="deterministic or fast (against identical)")
    ap.add_argument("--profile", default="fp32_v1")
    ap.add_argument("--text", default=None, help="a text file (default: the built-in prose)")
    ap.add_argument("--builtin", default="prose", choices=("prose", "code"))
    ap.add_argument("--windows", type=int, default=8)
    ap.add_argument("--window-tokens", type=int, default=256)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--bootstrap", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="results folder (default bench/results)")
    ap.add_argument("--model-name", default=None)
    a = ap.parse_args(argv)
    from .quality import builtin_text

    text = Path(a.text).read_text(encoding="utf-8") if a.text else builtin_text(a.builtin)
    name = a.model_name or Path(a.model).name.split(".")[0]
    print(f"drift: {name}, numeric_mode {a.mode} vs identical, profile {a.profile}", flush=True)
    r = measure(a.model, a.mode, profile=a.profile, text=text, windows=a.windows,
                window_tokens=a.window_tokens, prompts=a.prompts, new_tokens=a.new_tokens,
                bootstrap=a.bootstrap, seed=a.seed, progress=lambda m: print(m, flush=True))
    from .._core.box import box
    from .._core.cpu import cpu_isa

    r.update(model=name, text=Path(a.text).stem if a.text else a.builtin, box=box(),
             isa=cpu_isa(), date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
             command="python -m mojolearn drift " + " ".join(argv if argv is not None else sys.argv[2:]))
    out_dir = Path(a.out) if a.out else Path(__file__).resolve().parents[3] / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    slug = "".join(c if c.isalnum() else "-" for c in name.lower())
    out = out_dir / f"drift-{slug}-{r['mode']}-{a.profile}.json"
    out.write_text(json.dumps(r, indent=1) + "\n")
    lg, pp, g = r["logits"], r["perplexity"], r["greedy"]
    print(f"  logits: max |diff| {lg['max_abs']:.3g}; ulps median {lg['median_ulps']:.1f}, 99th "
          f"percentile {lg['p99_ulps']:.1f}, max {lg['max_ulps']:.0f} (near-zero logits); "
          f"{lg['identical_fraction']:.4f} bit-identical")
    print(f"  perplexity change {pp['change']:+.6f} (95% interval {pp['interval'][0]:+.6f} .. "
          f"{pp['interval'][1]:+.6f})")
    print(f"  greedy: {g['agreement']:.3f} of {g['new_tokens']} new tokens agree "
          f"(first disagreement at {g['first_disagreement']})")
    print(f"wrote {out}")
    return 0

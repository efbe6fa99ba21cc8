"""The implementation of ``mojolearn.quality``: what it computes and promises is
that public module's docstring (python/mojolearn/quality.py), which re-exports
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

CODE_FILES = ("argparse.py", "ast.py", "collections/__init__.py", "dataclasses.py",
              "difflib.py", "email/message.py", "enum.py", "functools.py", "inspect.py",
              "json/decoder.py", "logging/__init__.py", "pathlib.py", "pickle.py",
              "pydoc.py", "re/_parser.py", "shutil.py", "socket.py", "subprocess.py",
              "tarfile.py", "threading.py", "typing.py", "unittest/case.py", "zipfile.py")
"""The standard-library modules (paths under the stdlib folder) whose text, joined in this
order, makes the built-in 'code' text (its last 1 MB)."""


def builtin_text(name: str) -> str:
    """The built-in text ``name``: 'prose' (pydoc_data's topics) or 'code' (the last
    1 MB of CODE_FILES from the standard library).
    """
    lib = os.path.dirname(os.__file__)
    if name == "prose":
        from pydoc_data import topics

        return "\n\n".join(topics.topics[k] for k in sorted(topics.topics))
    if name == "code":
        parts = []
        for f in CODE_FILES:
            p = os.path.join(lib, f)
            if os.path.isfile(p):
                with open(p, encoding="utf-8") as fh:
                    parts.append(fh.read())
        data = "\n".join(parts).encode("utf-8")[-(1 << 20):]
        return data.decode("utf-8", errors="ignore")
    raise ValueError(f"mojolearn: quality: unknown built-in text {name!r}; choose prose or code")


def _nll(logits, ids):
    """Per-token negative log likelihood of ids[1:] given logits[:-1] (float64)."""
    import numpy as np

    lg = np.asarray(logits[0, :-1, :], dtype=np.float64)
    mx = lg.max(axis=1, keepdims=True)
    lse = np.log(np.exp(lg - mx).sum(axis=1)) + mx[:, 0]
    tgt = ids[1:]
    return lse - lg[np.arange(len(tgt)), tgt]


def measure(model_path, profile, text, *, windows=32, window_tokens=512, bootstrap=2000,
            seed=0, progress=None):
    """The quality measurement of ``profile`` on ``text`` against fp32_v1 (see the
    module docstring); returns the result dict written to the JSON file.
    """
    import numpy as np

    from ..models import CausalLM, Tokenizer

    tok = Tokenizer.load(model_path if str(model_path).endswith(".gguf")
                         else os.path.join(model_path, "tokenizer.json"))
    ids = np.array(tok.encode(text), dtype=np.int64)
    n_all = len(ids) // window_tokens
    if n_all == 0:
        raise ValueError(f"mojolearn: quality: the text has {len(ids)} tokens, fewer than one "
                         f"window of {window_tokens}")
    pick = np.unique(np.linspace(0, n_all - 1, min(windows, n_all)).round().astype(int))
    base = CausalLM.load(model_path, numeric_profile="fp32_v1")
    other = CausalLM.load(model_path, numeric_profile=profile)
    diffs, nll_b, nll_o = [], [], []
    t0 = time.time()
    for i, w in enumerate(pick):
        x = ids[w * window_tokens:(w + 1) * window_tokens]
        a = _nll(base.forward(x[None, :]), x)
        b = _nll(other.forward(x[None, :]), x)
        nll_b.append(a.mean())
        nll_o.append(b.mean())
        diffs.append(float((b - a).mean()))
        if progress:
            progress(f"  window {i + 1}/{len(pick)} ({time.time() - t0:.0f}s): "
                     f"running change {math.exp(np.mean(diffs)) - 1:+.6f}")
    d = np.array(diffs)
    rng = np.random.default_rng(seed)
    boots = np.exp(d[rng.integers(0, len(d), size=(bootstrap, len(d)))].mean(axis=1)) - 1
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return {
        "profile": profile, "baseline": "fp32_v1", "windows": int(len(pick)),
        "window_tokens": window_tokens, "tokens_scored": int(len(pick) * (window_tokens - 1)),
        "text_tokens": int(len(ids)),
        "ppl_baseline": float(math.exp(np.mean(nll_b))),
        "ppl_profile": float(math.exp(np.mean(nll_o))),
        "change": float(math.exp(d.mean()) - 1), "interval": [float(lo), float(hi)],
        "bootstrap": bootstrap, "seed": seed,
    }


def main(argv=None) -> int:
    """The command line (``python -m mojolearn quality ...``); returns the exit status."""
    ap = argparse.ArgumentParser(prog="python -m mojolearn quality")
    ap.add_argument("model")
    ap.add_argument("--profile", default="fixed15_v1")
    ap.add_argument("--text", action="append", default=[], help="a text file (repeatable)")
    ap.add_argument("--builtin", action="append", default=[], choices=("prose", "code"))
    ap.add_argument("--windows", type=int, default=32)
    ap.add_argument("--window-tokens", type=int, default=512)
    ap.add_argument("--bootstrap", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="results folder (default bench/results)")
    ap.add_argument("--model-name", default=None)
    a = ap.parse_args(argv)
    texts = [(Path(t).stem, Path(t).read_text(encoding="utf-8")) for t in a.text]
    texts += [(b, builtin_text(b)) for b in a.builtin]
    if not texts:
        print("mojolearn: quality: give --text FILE or --builtin prose|code", file=sys.stderr)
        return 2
    out_dir = Path(a.out) if a.out else Path(__file__).resolve().parents[3] / "bench" / "results"
    model_name = a.model_name or Path(a.model).name.split(".")[0]
    for name, text in texts:
        print(f"quality: {model_name}, text {name!r}, {a.profile} vs fp32_v1", flush=True)
        r = measure(a.model, a.profile, text, windows=a.windows, window_tokens=a.window_tokens,
                    bootstrap=a.bootstrap, seed=a.seed, progress=lambda m: print(m, flush=True))
        r.update(model=model_name, text=name,
                 date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
                 command="python -m mojolearn quality " + " ".join(
                     Path(x).name if x == a.model else x
                     for x in (argv if argv is not None else sys.argv[2:])))
        slug = f"quality-{model_name}-{name}".lower().replace(" ", "-")
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / f"{slug}.json").write_text(json.dumps(r, indent=1) + "\n")
        print(f"  change {r['change']:+.6f} (95% interval {r['interval'][0]:+.6f} .. "
              f"{r['interval'][1]:+.6f}); perplexity {r['ppl_baseline']:.4f} -> "
              f"{r['ppl_profile']:.4f}; wrote {slug}.json", flush=True)
    return 0

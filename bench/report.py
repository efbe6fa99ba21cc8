"""The performance tables, written from the result files in bench/results/.

    python bench/report.py                  # print the tables (Markdown)
    python bench/report.py --write-readme   # rewrite the README's table region
    python bench/report.py --check          # exit 1 when the README's region differs

Every figure comes from a file that `make bench` (cpu-*.json, gpu-*.json),
`make device-check` (resident-gpu-*.json) or `make quality` (quality-*.json) wrote;
nothing is typed by hand. A case a file lacks is shown as a dash, never filled in.
Each column (or row, for the GPU and quality tables) names the box, the CPU build
(ISA), the commit and the date of its run, as the file records them; a file that does
not record one says so.

The README holds the output between the lines README_BEGIN and README_END;
tests/test_report.py fails when that region differs from what this script writes from
the committed results.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
README = ROOT / "README.md"
README_BEGIN = "<!-- performance table: written by `python bench/report.py --write-readme`; do not edit -->"
README_END = "<!-- end of performance table -->"
ISA_ORDER = {"amx": 0, "v4": 1, "v3": 2}
NOT_RECORDED = "not recorded"
DASH = "—"

# (row label, [case names]): each case is one part of the cell, " / " between parts.
# The ratio is the file's `ratio`: the peer's median time over mojolearn's (> 1:
# mojolearn faster; for the integer profiles the peer is fp32.v1 on the same box).
CPU_ROWS = [
    ("fp32.v1 vs numpy, 1024³ (NN / NT / TN)",
     [f"matmul;fp32.v1;{lay};1024;1024;1024" for lay in ("NN", "NT", "TN")]),
    ("fp32.v1 vs numpy, 2048³ (NN / NT / TN)",
     [f"matmul;fp32.v1;{lay};2048;2048;2048" for lay in ("NN", "NT", "TN")]),
    ("int8i32.v1 over fp32.v1, 1024³ / 2048³",
     [f"matmul_int8;int8i32.v1;prequantized;{s};{s};{s}" for s in (1024, 2048)]),
    ("int8i32.v1 over fp32.v1, both prepared, 1024³ / 2048³",
     [f"matmul_int8;int8i32.v1;prepared;{s};{s};{s}" for s in (1024, 2048)]),
    ("int15i64.v1 over fp32.v1, 1024³ / 2048³",
     [f"matmul_int15;int15i64.v1;prequantized;{s};{s};{s}" for s in (1024, 2048)]),
    ("int15i64.v1 over fp32.v1, both prepared, 1024³ / 2048³",
     [f"matmul_int15;int15i64.v1;prepared;{s};{s};{s}" for s in (1024, 2048)]),
    ("decode 1×4096×4096, prepared, vs numpy (NN / NT)",
     [f"matmul;fp32.v1;prepared;{lay};1;4096;4096" for lay in ("NN", "NT")]),
    ("decode 16×4096×4096, prepared, vs numpy (NN / NT)",
     [f"matmul;fp32.v1;prepared;{lay};16;4096;4096" for lay in ("NN", "NT")]),
    ("SmolLM2-135M prefill, 512 tokens, vs torch",
     ["causallm;smollm2-135m;prefill;512"]),
    ("SmolLM2-135M greedy decode, 32 tokens, vs torch",
     ["causallm;smollm2-135m;decode;32"]),
    ("`mojolearn.torch` mode on vs off, transformers SmolLM2-135M prefill",
     ["torch-identical;smollm2-135m;prefill;512"]),
    ("`mojolearn.torch` mode on vs off, transformers SmolLM2-135M AdamW step, 256 tokens",
     ["torch-identical;smollm2-135m;adamw-step;256"]),
    ("numeric_mode fast over identical: fp32.v1 1024³ / 2048³ NN, SmolLM2 prefill / decode",
     [("matmul;fp32.v1;NN;1024;1024;1024", "fast"), ("matmul;fp32.v1;NN;2048;2048;2048", "fast"),
      ("causallm;smollm2-135m;prefill;512", "fast"), ("causallm;smollm2-135m;decode;32", "fast")]),
    ("SmolLM2 int8 / bf16 weights over float32 (fp32_v1): prefill",
     [("causallm;smollm2-135m;prefill;512", "lowbit:int8"),
      ("causallm;smollm2-135m;prefill;512", "lowbit:bfloat16")]),
    ("SmolLM2 int8 / bf16 weights over float32 (fp32_v1): greedy decode",
     [("causallm;smollm2-135m;decode;32", "lowbit:int8"),
      ("causallm;smollm2-135m;decode;32", "lowbit:bfloat16")]),
    ("SmolLM2 prefill on 2 ranks over 1 process (ParallelCausalLM pipeline / tensor)",
     ["parallel;smollm2-135m;prefill;512;pipeline", "parallel;smollm2-135m;prefill;512;tensor"]),
    ("Training: SmolLM2-135M AdamW step, 1 × 256 tokens, vs transformers + torch.optim.AdamW",
     ["training;smollm2-135m;adamw-step;256"]),
    ("Training: AdamW alone on 10M parameters vs torch.optim.AdamW",
     ["training;adamw;10000000"]),
    ("Training: SmolLM2-135M on 2 ranks over 1 process (same bits)",
     ["training;smollm2-135m;2-ranks;256"]),
    ("SmolLM2 stored int8 / bf16 (checkpoint), held over float32 bytes: fp32_v1 int8 / bf16, fixed15_v1 int8",
     [("causallm;smollm2-135m;prefill;512", "held:fp32_v1:int8:int8"),
      ("causallm;smollm2-135m;prefill;512", "held:fp32_v1:bfloat16:bfloat16"),
      ("causallm;smollm2-135m;prefill;512", "held:fixed15_v1:int8:int8")]),
    ("SmolLM2 held after load over float32 bytes: fp32_v1 int8 / bf16, fixed15_v1",
     [("causallm;smollm2-135m;prefill;512", "held:fp32_v1:int8"),
      ("causallm;smollm2-135m;prefill;512", "held:fp32_v1:bfloat16"),
      ("causallm;smollm2-135m;prefill;512", "held:fixed15_v1:float32")]),
]

# the GPU bench (host operands copied to the device and back): (label, cases)
GPU_ROWS = [
    ("fp32.v1, host operands, vs numpy on the host CPU, 1024³ / 2048³ NN",
     [f"matmul;fp32.v1;NN;{s};{s};{s}" for s in (1024, 2048)]),
    ("int8i32.v1 over fp32.v1, 1024³ / 2048³",
     [f"matmul_int8;int8i32.v1;prequantized;{s};{s};{s}" for s in (1024, 2048)]),
    ("int15i64.v1 over fp32.v1, 1024³ / 2048³",
     [f"matmul_int15;int15i64.v1;prequantized;{s};{s};{s}" for s in (1024, 2048)]),
]


def load(results: Path = RESULTS) -> dict:
    """Every committed result file, by kind: {"cpu": [...], "gpu": [...], "resident": [...],
    "quality": [...]}; each entry is (file name, parsed JSON). Files of the -quick smoke
    run are left out (they are not committed)."""
    out = {"cpu": [], "gpu": [], "resident": [], "quality": [], "drift": [], "cache": []}
    for p in sorted(results.glob("*.json")):
        if p.stem.endswith("-quick"):
            continue
        kind = p.name.split("-", 1)[0]
        if kind in out:
            try:
                out[kind].append((p.name, json.loads(p.read_text())))
            except ValueError as e:
                raise SystemExit(f"mojolearn: {p.name} is not valid JSON ({e}); rerun the command "
                                 "that wrote it") from None
    return out


def _field(data: dict, key: str) -> str:
    v = data.get(key)
    return str(v) if v not in (None, "") else NOT_RECORDED


def _ratio(cases: dict, name) -> str:
    """A case's figure: its ``ratio``, or for (case, key): "fast" the identical time over
    the fast contender's (> 1: fast is faster), "lowbit:<fmt>" the model row's low-bit
    speed over float32, "held:<profile>:<fmt>" a memory row's held bytes over the float32
    weight bytes."""
    name, key = (name, None) if isinstance(name, str) else name
    c = cases.get(name)
    if c is None:
        return DASH
    v = None
    if key is None:
        v = c.get("ratio")
    elif key == "fast":
        r = c.get("ratios", {}).get("fp32_v1_fast") or c.get("ratios", {}).get("fast")
        v = None if not r or not r.get("median") else 1 / r["median"]
    elif key.startswith("lowbit:"):
        v = (c.get("lowbit_over_float32") or {}).get(key.split(":", 1)[1])
    elif key.startswith("held:"):
        _, prof, fmt, *st = key.split(":")
        stored = st[0] if st else "float32"
        for m in c.get("memory") or []:
            if m.get("profile") == prof and m.get("weight_format") == fmt \
                    and m.get("stored", "float32") == stored:
                v = m.get("held_over_f32_weight_bytes")
    if v is None:
        return DASH
    return f"{v:.2f}" if not (key or "").startswith("held:") else f"{v:.3f}"


def _cell(cases: dict, names: list) -> str:
    parts = [_ratio(cases, n) for n in names]
    if all(p == DASH for p in parts):
        return DASH
    return " / ".join(parts) + "x"


def _short_box(box: str) -> str:
    """'AMD EPYC (Zen 3)' -> 'AMD EPYC Zen 3', 'Intel(R) Xeon(R) Processor' -> 'Intel Xeon'."""
    b = box.replace("(R)", "").replace("(TM)", "").replace(" Processor", "")
    return " ".join(b.replace("(", "").replace(")", "").split())


def _cpu_order(entry):
    name, d = entry
    # newest first; then box, then the widest build first
    date = str(d.get("date") or "")
    stamp = int(date.replace("-", "")) if date.replace("-", "").isdigit() else 0
    return (-stamp, str(d.get("box")),
            ISA_ORDER.get(d.get("isa"), 9), name)


def cpu_table(files: list) -> list:
    """The CPU table: one column per result file (box and ISA), one row per case."""
    files = sorted(files, key=_cpu_order)
    if not files:
        return ["(no CPU result files in bench/results/)"]
    cols = [f"{_short_box(_field(d, 'box'))}, {_field(d, 'isa')}" for _, d in files]
    lines = ["| case | " + " | ".join(cols) + " |",
             "| --- |" + " --- |" * len(cols)]
    for label, names in CPU_ROWS:
        cells = []
        for _, d in files:
            cases = {c.get("case"): c for c in d.get("cases", [])}
            cells.append(_cell(cases, names))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("| threads | " + " | ".join(
        str(d.get("machine", {}).get("cores_used", NOT_RECORDED)) for _, d in files) + " |")
    lines.append("| commit, date | " + " | ".join(
        f"{_field(d, 'commit')}, {_field(d, 'date')}" for _, d in files) + " |")
    lines.append("| file | " + " | ".join(f"`{n}`" for n, _ in files) + " |")
    return lines


def gpu_table(gpu: list, resident: list) -> list:
    """The GPU rows: one row per case and file, with the file's device, host, commit, date."""
    lines = ["| case | ratio | GPU, host CPU (build) | commit, date | file |",
             "| --- | --- | --- | --- | --- |"]
    for name, d in gpu:
        cases = {c.get("case"): c for c in d.get("cases", [])}
        dev = Path(name).stem.split("-", 1)[1]
        where = f"{dev} ({_field(d, 'vendor')}), {_short_box(_field(d, 'box'))} ({_field(d, 'isa')})"
        for label, names in GPU_ROWS:
            cell = _cell(cases, names)
            if cell != DASH:
                lines.append(f"| {label} | {cell} | {where} | {_field(d, 'commit')}, "
                             f"{_field(d, 'date')} | `{name}` |")
    for name, d in resident:
        rows = d.get("rows", [])
        if not rows:
            continue
        sizes = " / ".join(r.get("case", "?").split()[-1] for r in rows)
        ratio = " / ".join(f"{r['resident_vs_torch']:.3f}" if "resident_vs_torch" in r else DASH
                           for r in rows) + "x"
        tflops = " / ".join(f"{r['resident_gflops'] / 1e3:.1f}" if "resident_gflops" in r else DASH
                            for r in rows)
        where = _field(d, "device")
        src = (f"{_field(d, 'commit')}, {_field(d, 'date')}"
               if d.get("commit") or d.get("date") else NOT_RECORDED)
        lines.append(f"| fp32.v1 on device-resident torch tensors vs torch.mm fp32, {sizes} | "
                     f"{ratio} | {where} | {src} | `{name}` |")
        lines.append(f"| fp32.v1 on device-resident torch tensors, TFLOP/s, {sizes} | "
                     f"{tflops} | {where} | {src} | `{name}` |")
    if len(lines) == 2:
        return ["(no GPU result files in bench/results/)"]
    return lines


def quality_table(files: list) -> list:
    """The quality gate: relative change in held-out perplexity, profile against baseline."""
    lines = ["| model, text | profile vs baseline | perplexity change (95% interval) | date | file |",
             "| --- | --- | --- | --- | --- |"]
    for name, d in files:
        ch, iv = d.get("change"), d.get("interval")
        if ch is None:
            continue
        span = (f" ({iv[0] * 100:+.4f}% .. {iv[1] * 100:+.4f}%)"
                if isinstance(iv, list) and len(iv) == 2 else "")
        lines.append(f"| {_field(d, 'model')}, {_field(d, 'text')} | {_field(d, 'profile')} vs "
                     f"{_field(d, 'baseline')} | {ch * 100:+.4f}%{span} | {_field(d, 'date')} | `{name}` |")
    if len(lines) == 2:
        return ["(no quality result files in bench/results/)"]
    return lines


def drift_table(files: list) -> list:
    """The drift rows (`python -m mojolearn drift`): what a looser numeric mode does to a
    model's outputs against identical, one row per file."""
    if not files:
        return ["(no drift result files in bench/results/)"]
    lines = ["| model, profile | mode | max abs diff | ulps: median / 99% | bit-identical logits | "
             "perplexity change (95% interval) | greedy agreement | box, date | file |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, d in files:
        lg, pp, g = d.get("logits", {}), d.get("perplexity", {}), d.get("greedy", {})
        iv = pp.get("interval") or [None, None]
        cells = [f"{_field(d, 'model')}, {_field(d, 'numeric_profile')}", _field(d, "mode"),
                 f"{lg['max_abs']:.2g}" if "max_abs" in lg else DASH,
                 (f"{lg['median_ulps']:.0f} / {lg['p99_ulps']:.0f}" if "p99_ulps" in lg else DASH),
                 f"{lg['identical_fraction']:.3f}" if "identical_fraction" in lg else DASH,
                 (f"{pp['change']:+.2e} ({iv[0]:+.1e} .. {iv[1]:+.1e})"
                  if "change" in pp and None not in iv else DASH),
                 (f"{g['agreement']:.3f} of {g.get('prompts')} x {g.get('new_tokens')}"
                  if g.get("agreement") is not None else DASH),
                 f"{_short_box(_field(d, 'box'))} ({_field(d, 'isa')}), {_field(d, 'date')}",
                 f"`{name}`"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def cache_table(files: list) -> list:
    """The cache-plan rows (`bench/cache_plan.py`): each case's time under the build's
    tuned plan over its time under the plan made for this CPU's caches, one row per file."""
    if not files:
        return ["(no cache-plan result files in bench/results/)"]
    lines = ["| box (build) | caches: this CPU / tuned for | A block rows (MC): this CPU / tuned | "
             "tuned plan time / this CPU's plan time | commit, date | file |",
             "| --- | --- | --- | --- | --- | --- |"]
    for name, d in files:
        plans = d.get("plans", {})
        mine, ref = plans.get("this CPU", {}), plans.get("reference", {})

        def kib(t, key="L2"):
            return f"L2 {t[key] // 1024} KiB" if key in t else DASH

        ratios = "; ".join(f"{r['case']} {r['reference_over_this_cpu']:.2f}"
                           for r in d.get("rows", []) if "reference_over_this_cpu" in r) or DASH
        cells = [f"{_short_box(_field(d, 'box'))} ({_field(d, 'isa')})",
                 f"{kib(mine)} / {kib(ref)}",
                 f"{mine.get('MC', DASH)} / {ref.get('MC', DASH)}", ratios,
                 f"{_field(d, 'commit')}, {_field(d, 'date')}", f"`{name}`"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def render(results: Path = RESULTS, readme: bool = False) -> str:
    """The whole report (Markdown); with readme, what the README holds between its
    markers (all but the cache-plan diagnostics, which `python bench/report.py` prints)."""
    r = load(results)
    out = ["Speed ratios from `make bench`: the peer's median time over mojolearn's, over "
           "interleaved reps (> 1: mojolearn faster; the integer rows are over fp32.v1 on the "
           "same box). Each column is one CPU build on one box; the last rows name the run.",
           ""]
    out += cpu_table(r["cpu"])
    out += ["", "GPU (`make device-check`):", ""]
    out += gpu_table(r["gpu"], r["resident"])
    out += ["", "Quality gate (`make quality`): what `fixed15_v1` does to held-out perplexity.", ""]
    out += quality_table(r["quality"])
    out += ["", "Drift (`python -m mojolearn drift`): what a looser `numeric_mode` does to a "
            "model's outputs against `identical`.", ""]
    out += drift_table(r["drift"])
    if readme:
        return "\n".join(out) + "\n"
    out += ["", "Cache plans (`bench/cache_plan.py`): the GEMMs under the build's tuned cache "
            "blocks over the blocks made for this CPU's caches (> 1: this CPU's plan faster).", ""]
    out += cache_table(r["cache"])
    return "\n".join(out) + "\n"


def readme_region(text: str) -> tuple:
    """(before, region, after) of the README text around its marker lines."""
    try:
        i = text.index(README_BEGIN) + len(README_BEGIN)
        j = text.index(README_END, i)
    except ValueError:
        raise SystemExit(f"mojolearn: README.md has no performance-table markers; put the lines "
                         f"{README_BEGIN!r} and {README_END!r} where the table goes") from None
    return text[:i], text[i:j], text[j:]


def readme_with(text: str, table: str) -> str:
    """The README text with its region replaced by `table`."""
    before, _, after = readme_region(text)
    return before + "\n" + table + after


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="The performance tables from bench/results/*.json.")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--write-readme", action="store_true", help="rewrite README.md's table region")
    g.add_argument("--check", action="store_true",
                   help="exit 1 when README.md's table region differs from the results")
    ap.add_argument("--results", default=str(RESULTS), help="the folder of result files")
    ap.add_argument("--readme", default=str(README))
    a = ap.parse_args(argv)
    if not (a.write_readme or a.check):
        sys.stdout.write(render(Path(a.results)))
        return 0
    table = render(Path(a.results), readme=True)
    path = Path(a.readme)
    text = path.read_text()
    new = readme_with(text, table)
    if a.check:
        if new != text:
            print("mojolearn: README.md's performance table differs from bench/results/; run "
                  "`python bench/report.py --write-readme`", file=sys.stderr)
            return 1
        print("README.md's performance table matches bench/results/")
        return 0
    if new != text:
        path.write_text(new)
        print(f"rewrote the performance table in {path.name}")
    else:
        print(f"{path.name}'s performance table is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())

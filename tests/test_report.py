"""bench/report.py: the README's performance table is what the report writes from the
committed results, and the report shows only what the files hold."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import report  # noqa: E402

sys.path.pop(0)


def test_readme_table_is_what_the_report_writes():
    """The region between the README's markers equals what `python bench/report.py
    --write-readme` writes from the committed bench/results/ (rerun it after a new make
    bench): the report without its cache-plan diagnostics."""
    text = (ROOT / "README.md").read_text()
    _, region, _ = report.readme_region(text)
    want = "\n" + report.render(report.RESULTS, readme=True)
    assert "Cache plans" in report.render(report.RESULTS) and "Cache plans" not in want
    assert region == want, ("README.md's performance table differs from bench/results/; run "
                            "`python bench/report.py --write-readme`")


def test_check_command_agrees():
    """`bench/report.py --check` exits 0 on the committed README and results."""
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "report.py"), "--check"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def _cpu_file(box="Test Box (Zen 9)", isa="v3", commit="abc1234", date="2026-01-02",
              cases=None):
    return {"vendor": "cpu", "box": box, "isa": isa, "commit": commit, "date": date,
            "machine": {"cores_used": 2}, "cases": cases or []}


def test_every_committed_file_is_read_and_named():
    """Each committed CPU, GPU and quality file appears in the report by name, with the
    commit and date it records."""
    out = report.render(report.RESULTS)
    for p in sorted(report.RESULTS.glob("*.json")):
        if p.stem.endswith("-quick"):
            continue
        assert f"`{p.name}`" in out, p.name
        d = json.loads(p.read_text())
        for key in ("commit", "date"):
            if d.get(key):
                assert str(d[key]) in out, (p.name, key)


def test_a_missing_case_is_a_dash_never_a_number(tmp_path):
    """A file without a case shows a dash there; a case without a ratio too; nothing is
    borrowed from another file."""
    full = _cpu_file(box="Box A", cases=[
        {"case": "matmul;fp32.v1;NN;1024;1024;1024", "ratio": 1.234},
        {"case": "matmul;fp32.v1;NT;1024;1024;1024", "ratio": 0.5},
        {"case": "causallm;smollm2-135m;prefill;512"},  # no torch: no ratio
    ])
    empty = _cpu_file(box="Box B", date="2026-01-01", cases=[])
    (tmp_path / "cpu-box-a-v3.json").write_text(json.dumps(full))
    (tmp_path / "cpu-box-b-v3.json").write_text(json.dumps(empty))
    (tmp_path / "cpu-box-a-v3-quick.json").write_text(json.dumps(_cpu_file(box="Quick")))
    out = report.render(tmp_path)
    row = next(l for l in out.splitlines() if l.startswith("| fp32.v1 vs numpy, 1024³"))
    cells = [c.strip() for c in row.strip("|").split("|")][1:]
    assert cells == ["1.23 / 0.50 / —x", "—"], cells
    prefill = next(l for l in out.splitlines() if l.startswith("| SmolLM2-135M prefill"))
    assert prefill.count("—") == 2, prefill
    assert "Quick" not in out  # smoke-run files are not part of the report
    assert "abc1234, 2026-01-02" in out and "2026-01-01" in out
    assert "no GPU result files" in out and "no quality result files" in out


def test_a_file_without_commit_or_date_says_so(tmp_path):
    """A header field the file lacks is 'not recorded', not guessed."""
    (tmp_path / "cpu-x-v3.json").write_text(json.dumps(_cpu_file(commit=None, date=None)))
    (tmp_path / "resident-gpu-x.json").write_text(json.dumps(
        {"device": "Some GPU", "rows": [{"case": "fp32.v1 NN 64^3", "resident_vs_torch": 0.5,
                                         "resident_gflops": 100.0}]}))
    out = report.render(tmp_path)
    assert "not recorded, not recorded" in out
    gpu = [l for l in out.splitlines() if "resident-gpu-x.json" in l]
    assert gpu and all("| not recorded |" in l for l in gpu), gpu


def test_write_readme_rewrites_only_the_region(tmp_path):
    """--write-readme replaces what lies between the markers and nothing else; --check
    then passes, and fails on a hand-edited figure."""
    readme = tmp_path / "README.md"
    readme.write_text(f"# top\n\n{report.README_BEGIN}\nold table\n{report.README_END}\n\ntail\n")
    args = [sys.executable, str(ROOT / "bench" / "report.py"), "--readme", str(readme)]
    assert subprocess.run(args + ["--write-readme"], capture_output=True, timeout=60).returncode == 0
    text = readme.read_text()
    assert text.startswith("# top\n\n") and text.endswith(f"{report.README_END}\n\ntail\n")
    assert "old table" not in text and "| case |" in text
    assert subprocess.run(args + ["--check"], capture_output=True, timeout=60).returncode == 0
    readme.write_text(text.replace("x |", "1x |", 1))
    r = subprocess.run(args + ["--check"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stderr.startswith("mojolearn:"), r.stderr


def test_markers_missing_is_an_error(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# no markers\n")
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "report.py"), "--readme", str(readme),
                        "--check"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "mojolearn:" in r.stderr


@pytest.mark.parametrize("name", ["cpu-amd-epyc-zen-3-v3.json"])
def test_the_newest_cpu_file_is_in_the_readme(name):
    """The README shows the results of this box's latest run."""
    assert f"`{name}`" in (ROOT / "README.md").read_text()


sys.path.insert(0, str(ROOT / "bench"))
import estimate  # noqa: E402

sys.path.pop(0)


def test_bench_estimate_reads_this_box_s_last_run(tmp_path):
    """make bench's up-front estimate: a file's recorded elapsed time; for an older file
    the time its reps and pauses account for, said to be a lower bound; a build without
    a file on this box is named; the -quick file serves QUICK=1 only."""
    box = "Test Box (Zen 9)"
    rec = dict(_cpu_file(box=box, isa="v4"), elapsed_s=754.0)
    old = _cpu_file(box=box, isa="v3", cases=[
        {"case": "matmul;fp32.v1;NN;2048;2048;2048",
         "reps_ms": {"mojolearn": [100.0] * 9, "numpy": [100.0] * 9}}])
    (tmp_path / "cpu-test-box-zen-9-v4.json").write_text(json.dumps(rec))
    (tmp_path / "cpu-test-box-zen-9-v3.json").write_text(json.dumps(old))
    (tmp_path / "cpu-test-box-zen-9-v3-quick.json").write_text(json.dumps(dict(old, elapsed_s=95.0)))
    text, s = estimate.line(box, "v4", results=tmp_path)
    assert s == 754.0 and "about 13 min" in text and "cpu-test-box-zen-9-v4.json" in text
    text, s = estimate.line(box, "v3", results=tmp_path)
    # 9 + 1 calls of 0.1 s on each side, and numpy's 10 settle pauses of 0.35 s
    assert s == pytest.approx(2.0 + 3.5) and text.startswith("v3: at least") and "not counted" in text
    text, s = estimate.line(box, "v3", quick=True, results=tmp_path)
    assert s == 95.0 and "-quick.json" in text
    text, s = estimate.line(box, "amx", results=tmp_path)
    assert s is None and "no earlier run" in text
    assert estimate.slug(box) == "test-box-zen-9"

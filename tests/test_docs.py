"""The README and the docs: their examples run, their links resolve, and every public
name has a docstring for the API reference to render.

Examples are the ```python blocks of README.md and docs/**/*.md. Each runs in a fresh
namespace, in a child process whose working folder is a temporary one. A block may be
marked by an HTML comment on the line before it:

    <!-- example: needs smollm2 -->          runs with SmolLM2-135M-Instruct.Q4_1.gguf
                                             in its working folder (from the model cache
                                             that the Makefile exports as
                                             MOJOLEARN_MODEL_CACHE), skipped without it
    <!-- example: skip REASON -->            not run (a GPU, several processes, ...);
                                             the reason is required and is reported
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1.gguf"
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))
BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
MARK = re.compile(r"<!--\s*example:\s*(.*?)\s*-->\s*$")

# the modules whose __all__ is the public API (and the API reference's pages)
PUBLIC_MODULES = ["mojolearn", "mojolearn.linalg", "mojolearn.profiles", "mojolearn.lowbit",
                  "mojolearn.checkpoint", "mojolearn.torch", "mojolearn.models",
                  "mojolearn.training", "mojolearn.conformance", "mojolearn.quality", "mojolearn.modes",
                  "mojolearn.drift"]


def examples(path: Path) -> list:
    """[(line, marker or "", code)] of the ```python blocks of one page."""
    text = path.read_text()
    out = []
    for m in BLOCK.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = MARK.search(before)
        out.append((line, mark.group(1) if mark else "", m.group(1)))
    return out


def _model_path():
    cache = os.environ.get("MOJOLEARN_MODEL_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "mojolearn")
    p = Path(cache) / SMOLLM2
    return p if p.is_file() else None


_RUNNER = r"""
import json, sys, traceback
failed = []
for name, code in json.loads(sys.stdin.read()):
    try:
        exec(compile(code, name, "exec"), {"__name__": "__example__"})
    except BaseException:
        failed.append(name + "\n" + traceback.format_exc(limit=-3))
print(json.dumps(failed))
"""


def _run(blocks: list, cwd: Path) -> list:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python")] + [
        p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    r = subprocess.run([sys.executable, "-c", _RUNNER], input=json.dumps(blocks), cwd=cwd,
                       env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("kind", ["plain", "smollm2"])
def test_examples_run(kind, tmp_path):
    """Every example of the README and the docs runs without an error: the plain ones in
    one child process (each block in a fresh namespace, so torch and numpy are imported
    once), the SmolLM2 ones in another, with the model in the working folder."""
    blocks = [(f"{page.relative_to(ROOT)}:{line}", code) for page in PAGES
              for line, mark, code in examples(page)
              if not mark.startswith("skip") and (("smollm2" in mark) == (kind == "smollm2"))]
    assert blocks, f"no {kind} examples found"
    if kind == "smollm2":
        model = _model_path()
        if model is None:
            pytest.skip(f"{SMOLLM2} is not in the model cache (make model fetches it)")
        (tmp_path / SMOLLM2).symlink_to(model)
    failed = _run(blocks, tmp_path)
    assert not failed, f"{len(failed)} of {len(blocks)} examples failed:\n\n" + "\n\n".join(failed)


def test_example_markers_are_known_and_skips_give_a_reason():
    """A marker is `needs smollm2` or `skip REASON`; a typo would silently run or skip."""
    bad = []
    for page in PAGES:
        for line, mark, _ in examples(page):
            if mark and mark != "needs smollm2" and not re.fullmatch(r"skip\s+\S.*", mark):
                bad.append(f"{page.relative_to(ROOT)}:{line}: {mark!r}")
    assert not bad, bad


def test_every_page_with_examples_is_found():
    """The extraction sees the README's three first examples (a broken fence would hide
    them from the test above)."""
    code = "\n".join(c for _, _, c in examples(ROOT / "README.md"))
    for needle in ("linalg.matmul(", "CausalLM.load(", "mojolearn.torch.identical()"):
        assert needle in code, needle


LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    """Every relative link of the README and the docs names a file that exists (the
    strict docs build checks the docs' links too; the README is not part of the site)."""
    bad = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#", 1)[0]).resolve()
        if not path.exists():
            bad.append(target)
    assert not bad, f"{page.relative_to(ROOT)}: links to missing files: {bad}"


def test_readme_is_short():
    """The README is a front page: at most about 200 lines."""
    n = len((ROOT / "README.md").read_text().splitlines())
    assert n <= 210, f"README.md has {n} lines"


def test_api_reference_has_a_page_per_public_module():
    """docs/api/ renders every public module (a `::: module` directive each)."""
    text = "\n".join(p.read_text() for p in (ROOT / "docs" / "api").glob("*.md"))
    missing = [m for m in PUBLIC_MODULES if not re.search(rf"^::: {re.escape(m)}\s*$", text, re.M)]
    assert not missing, missing


def _griffe_package():
    griffe = pytest.importorskip("griffe", reason="the docs tools (requirements-docs.txt) are "
                                 "not installed; make docs installs them")
    return griffe.load("mojolearn", search_paths=[str(ROOT / "python")],
                       resolve_aliases=True, resolve_external=False, allow_inspection=False)


def _public_names(gmod) -> list:
    """The module's __all__ as the docs loader reads it (statically: nothing imported), or
    for a module without one, what it defines without a leading underscore."""
    if gmod.exports is not None:
        return [e if isinstance(e, str) else e.name for e in gmod.exports]
    return [n for n, m in gmod.members.items() if not n.startswith("_") and not m.is_alias]


def test_every_public_name_has_a_docstring():
    """Every name in each public module's __all__, and every public method and property
    of its public classes, has a docstring as the API reference reads it (griffe, the
    loader mkdocstrings uses; constants take an attribute docstring, the string literal
    on the line after them). The strict docs build does not fail on a missing one."""
    pkg = _griffe_package()
    missing = []
    for modname in PUBLIC_MODULES:
        gmod = pkg if modname == "mojolearn" else pkg[modname[len("mojolearn."):]]
        if not (gmod.docstring and gmod.docstring.value.strip()):
            missing.append(modname)
        for name in _public_names(gmod):
            if name not in gmod.members:
                missing.append(f"{modname}.{name} (not found by the docs loader)")
                continue
            obj = gmod.members[name]
            target = obj.final_target if obj.is_alias else obj
            if not (target.docstring and target.docstring.value.strip()):
                missing.append(f"{modname}.{name}")
            if target.is_class:
                for mname, m in target.members.items():
                    if mname.startswith("_"):
                        continue
                    m = m.final_target if m.is_alias else m
                    if m.is_function or getattr(m, "is_attribute", False) and "property" in m.labels:
                        if not (m.docstring and m.docstring.value.strip()):
                            missing.append(f"{modname}.{name}.{mname}")
    assert not missing, f"{len(missing)} public names without a docstring: {missing}"


"""The declared native interface (python/mojolearn/_native_api.py): every CPU build and
the GPU module's source register exactly the declared entries, the shared entries
take the same arguments on both backends, and the .pyi stubs are rendered from the
table (house style 5 and 11: nothing unregistered is reachable)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import mojolearn
from mojolearn._core import cpu as _cpu, api
from mojolearn._core.loader import cpu_native

ROOT = Path(__file__).resolve().parents[1]
MOJO = ROOT / "mojo"
GPU_SRC = MOJO / "_native_gpu.mojo"
# the GPU module's entry sources: its own file and the GPU model's entries it registers
GPU_SRCS = [GPU_SRC, MOJO / "transformer" / "gpu" / "model_entry.mojo"]


def _mojo_files(kind):
    if kind == "gpu":
        return GPU_SRCS
    return [p for p in sorted(MOJO.rglob("*.mojo")) if p not in GPU_SRCS]


def _registrations(kind):
    """{entry name: Mojo function} as the module's registration calls say."""
    out = {}
    for f in _mojo_files(kind):
        for m in re.finditer(r'def_function\[(\w+)\]\("(\w+)"\)', f.read_text()):
            assert m.group(2) not in out, f"{m.group(2)} registered twice"
            out[m.group(2)] = m.group(1)
    return out


def _doc_arg_count(kind, fn):
    """The number of tuple items the Mojo docstring of `fn` states, or None."""
    for f in _mojo_files(kind):
        m = re.search(rf'^def {fn}\(args: PythonObject\)[^\n]*\n\s*"""(?:Arguments:\s*)?\((.*?)\)',
                      f.read_text(), re.M | re.S)
        if m:
            inner = " ".join(m.group(1).split())
            return len([x for x in inner.split(",") if x.strip()])
    return None


def _exported(mod):
    return {n for n in dir(mod) if not n.startswith("_") and callable(getattr(mod, n))}


def test_cpu_build_registers_the_declared_entries():
    """The CPU build this process runs exports exactly the declared CPU entries."""
    declared = {e.name for e in api.entries("cpu")}
    got = _exported(cpu_native())
    assert got == declared, f"undeclared: {sorted(got - declared)}; missing: {sorted(declared - got)}"


@pytest.mark.parametrize("isa", ["amx", "v4", "v3"])
def test_every_cpu_build_registers_the_same_entries(isa):
    """Every CPU build this CPU can run (each in a child process) exports the same
    declared entries (the builds are one source; a build-specific entry would be a bug)."""
    why = _cpu.refusal(isa)
    if why:
        pytest.skip(f"this CPU cannot run the {isa} build: {why}")
    if isa == mojolearn.cpu_isa():
        got = _exported(cpu_native())
    else:
        env = {k: v for k, v in os.environ.items() if k not in ("MOJOLEARN_NATIVE", "MOJOLEARN_CPU_HIDE")}
        env["MOJOLEARN_ISA"] = isa
        env["PYTHONPATH"] = str(ROOT / "python")
        code = ("from mojolearn._core.loader import cpu_native as c; m = c(); "
                "print(' '.join(sorted(n for n in dir(m) if not n.startswith('_') "
                "and callable(getattr(m, n)))))")
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        got = set(r.stdout.split())
    assert got == {e.name for e in api.entries("cpu")}


@pytest.mark.parametrize("kind", ["cpu", "gpu"])
def test_sources_register_the_declared_entries(kind):
    """The registration lists (mojo/_native.mojo and the op registrations it calls;
    mojo/_native_gpu.mojo) name exactly the declared entries of that kind."""
    declared = {e.name for e in api.entries(kind)}
    got = set(_registrations(kind))
    assert got == declared, f"undeclared: {sorted(got - declared)}; missing: {sorted(declared - got)}"


def test_entries_take_the_declared_arguments_on_both_backends():
    """Every entry whose Mojo docstring states its argument tuple states as many items
    as the table; the shared entries state them on the CPU and on the GPU side."""
    bad = []
    for kind in ("cpu", "gpu"):
        regs = _registrations(kind)
        for e in api.entries(kind):
            n = _doc_arg_count(kind, regs[e.name])
            if n is None:
                assert e.where != "both" or e.name == "mxcsr", f"{kind} {e.name}: no argument docstring"
                continue
            if n != len(e.args):
                bad.append(f"{kind} {e.name}: docstring {n}, table {len(e.args)}")
    assert not bad, bad


def test_stubs_are_rendered_from_the_table():
    """The .pyi stub of each native module equals the table's rendering (not stale:
    `python -m mojolearn._core.api --write-stubs` rewrites them)."""
    for path, kind in api.stub_paths().items():
        assert path.exists(), f"{path.name} is missing"
        assert path.read_text() == api.render_stub(kind), f"{path.name} is stale"


def test_table_is_well_formed():
    """Entry names are unique, arguments are identifiers, and `where` is known."""
    names = [e.name for e in api.ENTRIES]
    assert len(names) == len(set(names))
    for e in api.ENTRIES:
        assert e.where in ("both", "cpu", "gpu"), e
        assert all(a.isidentifier() for a in e.args), e
        assert len(set(e.args)) == len(e.args), e


def test_one_helper_runs_every_cpu_entry():
    """Every CPU entry computes through common/tasks.mojo's run_tasks, the one place that
    releases the GIL, sets the contract floating-point state and runs the worker pool:
    no other CPU source calls PyEval_SaveThread or starts tasks (parallelize, TaskGroup)."""
    helper = MOJO / "common" / "tasks.mojo"
    pat = re.compile(r"PyEval_SaveThread|\bparallelize\(|\bTaskGroup\(")
    code = lambda t: re.sub(r"#[^\n]*", "", re.sub(r'"""(.*?)"""', "", t, flags=re.S))
    others = [str(p.relative_to(ROOT)) for p in _mojo_files("cpu")
              if p != helper and pat.search(code(p.read_text()))]
    assert not others, f"CPU sources that release the GIL or run tasks themselves: {others}"
    assert pat.search(code(helper.read_text()))

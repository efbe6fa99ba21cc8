"""The CPU dispatch (mojolearn._core.cpu, _isa.py; README "CPU builds"): the probe reads
the features, the best runnable build is loaded, MOJOLEARN_ISA forces one, and a
build this CPU cannot run is refused by name before it is imported.

Forcing and refusing happen in child processes: the choice is made once per process.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mojolearn._core import cpu as _cpu
import mojolearn

ROOT = Path(__file__).resolve().parents[1]

_CHILD = textwrap.dedent("""
    import array
    import mojolearn
    from mojolearn import linalg
    from mojolearn._core import loader as _native_loader
    a = memoryview(array.array("f", [1.0, 2.0])).cast("B").cast("f", (1, 2))
    b = memoryview(array.array("f", [3.0, 4.0])).cast("B").cast("f", (1, 2))
    try:
        isa = mojolearn.cpu_isa()
        m = _native_loader.native()
        c = linalg.matmul_int8(a, b)
        print("OK|" + isa + "|" + m.__name__ + "|" + m.isa(()) + "|" + repr(c.tolist()))
    except Exception as e:
        print(type(e).__name__ + "|" + str(e))
""")

BUILD_ISA = {"v3": "avx2", "v4": "avx512vnni", "amx": "amx-int8+avx512vnni"}


def child(**env_extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("MOJOLEARN_ISA", "MOJOLEARN_NATIVE", "MOJOLEARN_CPU_HIDE")}
    env.update(env_extra)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python"), str(ROOT)])
    p = subprocess.run([sys.executable, "-c", _CHILD], env=env, cwd=str(ROOT),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    return p.stdout.strip().split("|")


def _proc_flags():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


# Linux's names for the flags the probe reads
PROC_NAME = {"sse3": "pni", "sse4.1": "sse4_1", "sse4.2": "sse4_2", "lahf": "lahf_lm",
             "lzcnt": "abm", "amx-tile": "amx_tile", "amx-int8": "amx_int8",
             "amx-bf16": "amx_bf16", "avx512vnni": "avx512_vnni"}


def test_probe_agrees_with_the_kernel():
    """The cpuid probe reads the same features Linux reports in /proc/cpuinfo."""
    flags = _proc_flags()
    if flags is None:
        pytest.skip("no /proc/cpuinfo flags on this system")
    have = _cpu.features()
    for name in _cpu.FEATURES:
        if name == "osxsave":  # Linux does not list it
            continue
        assert (name in have) == (PROC_NAME.get(name, name) in flags), name


def test_cpu_isa_is_the_best_runnable_build():
    """The best build this CPU runs is chosen; v3 (the floor) runs on every CI machine."""
    ok = _cpu.runnable()
    assert "v3" in ok
    assert ok == [n for n in _cpu.isa_names() if n in ok]
    r = child()
    assert r[0] == "OK", r
    assert r[1] == ok[0] and r[2] == f"mojolearn._native_{ok[0]}"
    assert r[3] == BUILD_ISA[ok[0]]
    assert r[4] == "[[11.0]]"


@pytest.mark.parametrize("name", ["v3", "v4", "amx"])
def test_forced_isa_loads_that_build(name):
    """MOJOLEARN_ISA=<name> loads exactly that build (its kernels compiled for that ISA)."""
    why = _cpu.refusal(name)
    if why:
        pytest.skip(f"this CPU cannot run the {name} build: {why}")
    r = child(MOJOLEARN_ISA=name)
    assert r == ["OK", name, f"mojolearn._native_{name}", BUILD_ISA[name], "[[11.0]]"], r
    assert child(MOJOLEARN_ISA=f" {name.upper()} ")[1] == name


def test_native_switch_is_refused_by_name():
    """One switch per choice: the older MOJOLEARN_NATIVE is refused, naming the two
    that replace it (MOJOLEARN_ISA for the CPU build, MOJOLEARN_DEVICE for the backend)."""
    r = child(MOJOLEARN_NATIVE="_native_v3")
    text = "|".join(r)  # the child joins its fields with "|"
    assert r[0] == "ImportError" and "MOJOLEARN_NATIVE='_native_v3' is no longer read" in text, r
    assert "MOJOLEARN_ISA=amx|v4|v3" in text and "MOJOLEARN_DEVICE=auto|cpu|gpu" in text, r


def test_hidden_features_move_the_choice_down():
    """Without AMX (hidden) the v4 build is chosen; without AVX-512 the v3 build."""
    if "v4" in _cpu.runnable():
        assert child(MOJOLEARN_CPU_HIDE="amx-int8")[1] == "v4"
        assert child(MOJOLEARN_CPU_HIDE="amx-permission")[1] == "v4"
    assert child(MOJOLEARN_CPU_HIDE="avx512vnni")[1] == "v3"


def test_cpu_isa_is_exported():
    assert mojolearn.cpu_isa() in _cpu.isa_names()
    assert "cpu_isa" in mojolearn.__all__


def test_choice_is_made_once_per_process():
    """The build is chosen at the first use; a later change of MOJOLEARN_ISA does not
    make cpu_isa() name a build other than the one serving the calls."""
    code = textwrap.dedent("""
        import os, mojolearn
        from mojolearn._core import loader as _native_loader
        first = mojolearn.cpu_isa()
        _native_loader.native()
        os.environ["MOJOLEARN_ISA"] = "bogus"
        print(first, mojolearn.cpu_isa(), _native_loader.native().__name__)
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("MOJOLEARN_ISA", "MOJOLEARN_NATIVE")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python"), str(ROOT)])
    env["MOJOLEARN_ISA"] = "v3"
    p = subprocess.run([sys.executable, "-c", code], env=env, cwd=str(ROOT),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split() == ["v3", "v3", "mojolearn._native_v3"]


def test_box_names_the_core_family():
    """Results files are named after the box: a generic brand ("AMD EPYC" on a Zen 3 and
    on a Zen 5) gets the core family cpuid reports, so two boxes never share a file."""
    from mojolearn._core.box import box, core_family, cpuinfo
    assert core_family("AuthenticAMD", 25, 1) == "Zen 3"
    assert core_family("AuthenticAMD", 25, 0x11) == "Zen 4"
    assert core_family("AuthenticAMD", 26, 2) == "Zen 5"
    assert core_family("GenuineIntel", 6, 0x8F) == "Sapphire Rapids"
    assert core_family("GenuineIntel", 6, 0x3C) == "family 6 model 60"
    name = box()
    assert name
    fields = cpuinfo()
    try:
        core = core_family(fields["vendor_id"], int(fields["cpu family"]), int(fields["model"]))
    except (KeyError, ValueError):
        pytest.skip("no /proc/cpuinfo family and model to read")
    assert name.startswith(fields["model name"])
    assert core.lower() in name.lower()


def test_cache_sizes_and_cpu_identity(tmp_path):
    """make bench records what tells two CPUs of one brand apart (a Zen 3's 512 KiB L2
    from a Zen 5's 1 MiB): the sysfs cache sizes in bytes by level and type, and the
    cpuid family / model. A fake sysfs tree is read exactly; a missing one gives {}."""
    from mojolearn._core.box import caches, identity
    for i, (level, kind, size) in enumerate([(1, "Data", "32K"), (1, "Instruction", "32K"),
                                             (2, "Unified", "512K"), (3, "Unified", "32768K")]):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    assert caches(str(tmp_path)) == {"L1d": 32 << 10, "L1i": 32 << 10, "L2": 512 << 10,
                                     "L3": 32 << 20}
    assert caches(str(tmp_path / "missing")) == {}
    ident = identity()
    assert set(ident) == {"vendor", "family", "model", "stepping", "core", "caches"}
    if ident["family"] is not None:
        assert isinstance(ident["model"], int) and ident["core"]

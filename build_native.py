"""Build the Mojo extension modules of mojolearn: one per CPU target, plus the probe.

Used by the Makefile (in-place development build) and by setup.py (wheel / pip
install). The targets are a fixed set, never the build machine: the rows of
python/mojolearn/_core/isa.py (v3 = x86-64-v3, v4 = x86-64-v4 + AVX512-VNNI, amx = v4 +
AMX), each ``mojo/_native.mojo`` built as ``mojolearn._native_<isa>``, and the CPU
probe (``_cpuprobe.so``, baseline x86-64) the loader asks before importing any of
them. Each runs ``mojo build --emit shared-lib``, links with an ``$ORIGIN`` run path,
and the Mojo runtime libraries are copied next to them (shared by all builds), so an
installed package imports without the build environment. Builds run in parallel
(MOJOLEARN_BUILD_JOBS, default: the number of CPUs, at most one per target); a
build whose sources are unchanged is skipped.

    python build_native.py [--out DIR] [--isa NAME ...] [--force]
    python build_native.py --target-cpu CPU [--target-features F] --name NAME   (one ad-hoc build)
        [--explicit-flush] [--out DIR]
    python build_native.py --cross [aarch64-linux|arm64-macos ...]   (objects only, below)

--explicit-flush compiles with ``-D MOJOLEARN_EXPLICIT_FLUSH=1``: the kernels run with
DAZ off and flush every input in code (mojo/common/fpstate.mojo), the mode every
non-x86 target uses. It is not shipped; it proves on x86 that the explicit path gives
the bits of the hardware-DAZ path (tests/test_explicit_flush.py builds it into
``.build/explicit-flush/``).

--cross compiles the CPU extension for the ARM64 targets of CROSS_TARGETS to object
files under build/cross/ (``mojo build --emit object``): the toolchain cannot link
an ARM library on an x86 machine, so this is a compile check (`make arm-compile`,
tests/test_explicit_flush.py), not a package. Those targets always use the explicit
flush (there is no DAZ-only mode on AArch64).
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
SRC = ROOT / "mojo"
ENTRY = SRC / "_native.mojo"
EXPLICIT_FLUSH_DEFINES = ("MOJOLEARN_EXPLICIT_FLUSH=1",)
# ARM64 compile checks: name -> (--target-triple, --target-cpu)
CROSS_TARGETS = {
    "aarch64-linux": ("aarch64-unknown-linux-gnu", "neoverse-v1"),
    "arm64-macos": ("aarch64-apple-darwin", "apple-m1"),
}
RUNTIME_LIBS = (
    "libKGENCompilerRTShared.so",
    "libAsyncRTMojoBindings.so",
    "libAsyncRTRuntimeGlobals.so",
    "libMSupportGlobals.so",
)


def isa_table():
    """python/mojolearn/_core/isa.py, read without importing the package."""
    spec = importlib.util.spec_from_file_location("_mojolearn_isa", ROOT / "python" / "mojolearn" / "_core" / "isa.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def find_mojo() -> Path:
    cands = [Path(sys.executable).parent / "mojo"]
    w = shutil.which("mojo")
    if w:
        cands.append(Path(w))
    for c in cands:
        if c.exists():
            return c
    raise SystemExit(
        "mojolearn build: the `mojo` compiler was not found; install the pinned "
        "toolchain with `pip install max==26.7.0` (make build does this)"
    )


def runtime_dir() -> Path:
    try:
        import modular  # noqa: F401  (the max wheel's library folder)
        for p in modular.__path__:
            d = Path(p) / "lib"
            if (d / RUNTIME_LIBS[0]).exists():
                return d
    except ImportError:
        pass
    d = find_mojo().resolve().parent.parent / "lib"
    if (d / RUNTIME_LIBS[0]).exists():
        return d
    raise SystemExit("mojolearn build: Mojo runtime libraries not found next to the compiler")


def sources():
    return sorted(SRC.rglob("*.mojo"))


def up_to_date(target: Path, extra: tuple = ()) -> bool:
    if not target.exists():
        return False
    t = target.stat().st_mtime
    deps = list(sources()) + [Path(__file__), ROOT / "python" / "mojolearn" / "_core" / "isa.py"] + list(extra)
    return all(p.stat().st_mtime <= t for p in deps)


def build(out_dir: Path, target_cpu: str | None = None, name: str = "_native",
          force: bool = False, quiet: bool = False, features: str = "",
          entry: Path | None = None, defines: tuple = ()) -> Path:
    """One library; `defines` are ``NAME=VALUE`` compile-time switches (``-D``)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    so = out_dir / f"{name}.so"
    if not force and up_to_date(so):
        if not quiet:
            print(f"mojolearn build: {so.relative_to(ROOT) if so.is_relative_to(ROOT) else so} is up to date")
        return so
    tmpdir = None
    if entry is None and name == "_native":
        entry = ENTRY
    elif entry is None:
        # the module name is the file name: compile a renamed copy of the entry
        # one folder per set of switches, so a variant never rewrites another's entry
        tmpdir = ROOT / ".build" / ("-".join(d.replace("=", "_") for d in defines) or "entries")
        tmpdir.mkdir(parents=True, exist_ok=True)
        entry = tmpdir / f"{name}.mojo"
        entry.write_text(ENTRY.read_text().replace("PyInit__native", f"PyInit_{name}")
                         .replace('PythonModuleBuilder("_native")', f'PythonModuleBuilder("{name}")'))
    cmd = [str(find_mojo()), "build", str(entry), "-I", str(SRC), "--emit", "shared-lib",
           "-o", str(so), "-Xlinker", "-rpath=$ORIGIN"]
    if target_cpu:
        cmd += ["--target-cpu", target_cpu]
    if features:
        cmd += ["--target-features", features]
    for d in defines:
        cmd += ["-D", d]
    if not quiet:
        print("mojolearn build:", " ".join(cmd[1:]), flush=True)
    t0 = time.time()
    # a process that loaded a Mojo extension has PYTHONPATH=":" in its C environment,
    # which breaks the compiler's own Python; give it a clean one
    env = dict(os.environ)
    pp = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if pp:
        env["PYTHONPATH"] = os.pathsep.join(pp)
    else:
        env.pop("PYTHONPATH", None)
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    msgs = [ln for ln in (r.stdout + r.stderr).splitlines() if "Crashpad" not in ln]
    if r.returncode != 0:
        print("\n".join(msgs), file=sys.stderr)
        raise SystemExit(f"mojolearn build: mojo build failed (exit {r.returncode})")
    if msgs:  # compiler warnings are shown even for quiet (parallel) builds
        print(f"mojolearn build: {name}:\n" + "\n".join(msgs), flush=True)
    rt = runtime_dir()
    for lib in RUNTIME_LIBS:
        dst = out_dir / lib
        if not dst.exists() or dst.stat().st_size != (rt / lib).stat().st_size:
            shutil.copy2(rt / lib, dst)
    if not quiet:
        print(f"mojolearn build: built {so.name} in {time.time() - t0:.1f} s", flush=True)
    return so


def cross_object(name: str, out_dir: Path | None = None, quiet: bool = False) -> Path:
    """The CPU extension compiled for CROSS_TARGETS[name] to an object file (no link)."""
    triple, cpu = CROSS_TARGETS[name]
    out_dir = out_dir or ROOT / "build" / "cross"
    out_dir.mkdir(parents=True, exist_ok=True)
    obj = out_dir / f"_native-{name}.o"
    if up_to_date(obj):  # the sources are older than the object: nothing to compile
        return obj
    cmd = [str(find_mojo()), "build", str(ENTRY), "-I", str(SRC), "--emit", "object",
           "--target-triple", triple, "--target-cpu", cpu, "-o", str(obj)]
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    t0 = time.time()
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    msgs = [ln for ln in (r.stdout + r.stderr).splitlines() if "Crashpad" not in ln]
    if r.returncode != 0 or not obj.exists():
        print("\n".join(msgs), file=sys.stderr)
        raise SystemExit(f"mojolearn build: {name} ({triple}, {cpu}) failed (exit {r.returncode})")
    if msgs:
        print(f"mojolearn build: {name}:\n" + "\n".join(msgs), flush=True)
    if not quiet:
        print(f"mojolearn build: {obj.relative_to(ROOT) if obj.is_relative_to(ROOT) else obj} "
              f"({triple}, {cpu}) {obj.stat().st_size / 1e6:.2f} MB in {time.time() - t0:.1f} s",
              flush=True)
    return obj


def build_all(out_dir: Path, force: bool = False, isas=None, jobs: int | None = None,
              quiet: bool = False) -> list:
    """The probe and every CPU build (or those named in `isas`), in parallel.
    Returns the paths; prints each build's time and size and the total."""
    from concurrent.futures import ThreadPoolExecutor

    table = isa_table()
    rows = [r for r in table.ISAS if isas is None or r[0] in isas]
    unknown = set(isas or ()) - {r[0] for r in table.ISAS}
    if unknown:
        raise SystemExit(f"mojolearn build: unknown ISA {sorted(unknown)}; known: "
                         f"{[r[0] for r in table.ISAS]}")
    pname, psrc, pcpu = table.PROBE
    tasks = [(pname, pcpu, "", SRC / psrc)] + [(r[1], r[2], r[3], None) for r in rows]
    if jobs is None:
        jobs = int(os.environ.get("MOJOLEARN_BUILD_JOBS", "0") or 0) or (os.cpu_count() or 1)
    jobs = max(1, min(jobs, len(tasks)))
    t0 = time.time()

    def one(t):
        name, cpu, feats, entry = t
        s = time.time()
        so = build(out_dir, cpu, name, force, quiet=True, features=feats, entry=entry)
        return so, time.time() - s

    with ThreadPoolExecutor(jobs) as ex:
        done = list(ex.map(one, tasks))
    if not quiet:
        for (name, cpu, feats, _), (so, dt) in zip(tasks, done):
            what = cpu + (f" {feats}" if feats else "")
            print(f"mojolearn build: {so.name:18s} {what:58s} {dt:6.1f} s "
                  f"{so.stat().st_size / 1e6:6.2f} MB", flush=True)
        rt = sum((out_dir / lib).stat().st_size for lib in RUNTIME_LIBS)
        print(f"mojolearn build: {len(tasks)} libraries in {time.time() - t0:.1f} s "
              f"({jobs} in parallel); Mojo runtime {rt / 1e6:.2f} MB shared", flush=True)
    return [so for so, _ in done]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "python" / "mojolearn"))
    ap.add_argument("--isa", action="append", default=None,
                    help="build only this CPU target (repeatable); default: all")
    ap.add_argument("--target-cpu", default=None, help="one ad-hoc build (with --name)")
    ap.add_argument("--target-features", default="")
    ap.add_argument("--name", default=None)
    ap.add_argument("--cross", nargs="*", default=None, metavar="TARGET",
                    help=f"compile-only object builds for {', '.join(CROSS_TARGETS)} "
                         "(default: all of them)")
    ap.add_argument("--explicit-flush", action="store_true",
                    help="an ad-hoc build with -D MOJOLEARN_EXPLICIT_FLUSH=1 (DAZ off, inputs "
                         "flushed in code): a test variant, never shipped")
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--force", action="store_true")
    a = ap.parse_args(argv)
    if a.cross is not None:
        unknown = sorted(set(a.cross) - set(CROSS_TARGETS))
        if unknown:
            ap.error(f"unknown --cross target {unknown}; known: {list(CROSS_TARGETS)}")
        for name in a.cross or CROSS_TARGETS:
            cross_object(name)
        return
    if a.explicit_flush and not (a.target_cpu or a.name):
        ap.error("--explicit-flush is for one ad-hoc build: give --target-cpu and --name")
    if a.target_cpu or a.name:
        build(Path(a.out), a.target_cpu, a.name or "_native", a.force, features=a.target_features,
              defines=EXPLICIT_FLUSH_DEFINES if a.explicit_flush else ())
    else:
        build_all(Path(a.out), a.force, a.isa, a.jobs)


if __name__ == "__main__":
    main()

"""Build the Mojo extension module(s) of mojolearn.

Used by the Makefile (in-place development build) and by setup.py (wheel / pip
install). It runs ``mojo build --emit shared-lib`` on ``mojo/_native.mojo``, links
the result with an ``$ORIGIN`` run path and copies the Mojo runtime libraries next
to it, so an installed package imports without the build environment.

    python build_native.py [--out DIR] [--target-cpu CPU] [--name NAME] [--force]
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
SRC = ROOT / "mojo"
ENTRY = SRC / "_native.mojo"
RUNTIME_LIBS = (
    "libKGENCompilerRTShared.so",
    "libAsyncRTMojoBindings.so",
    "libAsyncRTRuntimeGlobals.so",
    "libMSupportGlobals.so",
)


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
    deps = list(sources()) + [Path(__file__)] + list(extra)
    return all(p.stat().st_mtime <= t for p in deps)


def build(out_dir: Path, target_cpu: str | None = None, name: str = "_native",
          force: bool = False, quiet: bool = False) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    so = out_dir / f"{name}.so"
    if not force and up_to_date(so):
        if not quiet:
            print(f"mojolearn build: {so.relative_to(ROOT) if so.is_relative_to(ROOT) else so} is up to date")
        return so
    entry = ENTRY
    tmpdir = None
    if name != "_native":
        # the module name is the file name: compile a renamed copy of the entry
        tmpdir = ROOT / ".build"
        tmpdir.mkdir(exist_ok=True)
        entry = tmpdir / f"{name}.mojo"
        entry.write_text(ENTRY.read_text().replace("PyInit__native", f"PyInit_{name}")
                         .replace('PythonModuleBuilder("_native")', f'PythonModuleBuilder("{name}")'))
    cmd = [str(find_mojo()), "build", str(entry), "-I", str(SRC), "--emit", "shared-lib",
           "-o", str(so), "-Xlinker", "-rpath=$ORIGIN"]
    if target_cpu:
        cmd += ["--target-cpu", target_cpu]
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
    if msgs and not quiet:
        print("\n".join(msgs))
    rt = runtime_dir()
    for lib in RUNTIME_LIBS:
        dst = out_dir / lib
        if not dst.exists() or dst.stat().st_size != (rt / lib).stat().st_size:
            shutil.copy2(rt / lib, dst)
    if not quiet:
        print(f"mojolearn build: built {so.name} in {time.time() - t0:.1f} s", flush=True)
    return so


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "python" / "mojolearn"))
    ap.add_argument("--target-cpu", default=None)
    ap.add_argument("--name", default="_native")
    ap.add_argument("--force", action="store_true")
    a = ap.parse_args(argv)
    build(Path(a.out), a.target_cpu, a.name, a.force)


if __name__ == "__main__":
    main()

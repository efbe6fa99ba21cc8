"""Packaging: a wheel built here installs into a fresh venv and imports without the
build environment (the extension finds its Mojo runtime through $ORIGIN)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SMOKE = r"""
import array, sys
import mojolearn
from mojolearn import linalg
assert "site-packages" in mojolearn.__file__, mojolearn.__file__
a = array.array("f", [1.0, 2.0, 3.0, 4.0])
m = memoryview(a).cast("B").cast("f", (2, 2))
c = linalg.matmul(m, m)
assert c.tolist() == [[7.0, 10.0], [15.0, 22.0]], c.tolist()
print("ok", mojolearn.vendor())
try:
    import numpy
    has_numpy = True
except ImportError:
    has_numpy = False
try:
    import mojolearn.models
    print("models", mojolearn.models.CausalLM.__name__, has_numpy)
except ImportError as e:
    assert not has_numpy, e
    assert 'mojolearn[models]' in str(e), e
    print("models refused without numpy")
"""


def test_wheel_carries_the_native_stubs(monkeypatch):
    """Packaging: the build configuration (pyproject.toml read by setuptools, as a wheel
    build reads it) copies the .pyi stub of every native module into the package, so
    an installed mojolearn is typed. Resolved by setuptools' build_py without building;
    pyproject.toml declares them as package data, and a stub left out or excluded fails."""
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    from mojolearn._core import api

    monkeypatch.chdir(ROOT)
    dist = Distribution()
    apply_configuration(dist, ROOT / "pyproject.toml")
    cmd = dist.get_command_obj("build_py")
    cmd.ensure_finalized()
    shipped = {f for pkg, _src, _dst, files in cmd.data_files if pkg == "mojolearn" for f in files}
    stubs = {p.name for p in api.stub_paths()}
    assert stubs == {p.name for p in (ROOT / "python" / "mojolearn").glob("*.pyi")}
    assert stubs <= shipped, f"stubs left out of the wheel: {sorted(stubs - shipped)}"


def test_wheel_carries_every_subpackage(monkeypatch):
    """Packaging: every Python package under python/mojolearn (the models among them)
    is declared, so the wheel is not missing mojolearn.models."""
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    monkeypatch.chdir(ROOT)
    dist = Distribution()
    apply_configuration(dist, ROOT / "pyproject.toml")
    found = {".".join(p.parent.relative_to(ROOT / "python").parts)
             for p in (ROOT / "python" / "mojolearn").rglob("__init__.py")}
    assert found <= set(dist.packages), f"left out of the wheel: {sorted(found - set(dist.packages))}"


@pytest.mark.slow
def test_wheel_installs_and_imports_in_fresh_venv(tmp_path):
    """Packaging: pip wheel . -> fresh venv -> import mojolearn and run a kernel."""
    dist = tmp_path / "dist"
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                        "-w", str(dist), str(ROOT)], capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    wheels = list(dist.glob("mojolearn-*.whl"))
    assert len(wheels) == 1
    assert "py3-none-any" not in wheels[0].name  # a binary wheel
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    vpy = venv / "bin" / "python"
    r = subprocess.run([str(vpy), "-m", "pip", "install", "--no-deps", "-q", str(wheels[0])],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}
    r = subprocess.run([str(vpy), "-c", SMOKE], capture_output=True, text=True, timeout=300,
                       cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok cpu" in r.stdout
    # the core needs no numpy; the models name the extra that brings it
    assert "models refused without numpy" in r.stdout, r.stdout
    # with the models' extra's numpy (the pinned version) the models import
    import numpy
    r = subprocess.run([str(vpy), "-m", "pip", "install", "-q", f"numpy=={numpy.__version__}"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    r = subprocess.run([str(vpy), "-c", SMOKE], capture_output=True, text=True, timeout=300,
                       cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "models CausalLM True" in r.stdout, r.stdout

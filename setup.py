"""setuptools glue: build the Mojo extension into the wheel (see build_native.py)."""
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
import build_native  # noqa: E402


class BuildWithMojo(build_py):
    def run(self):
        super().run()
        pkg = Path(self.build_lib) / "mojolearn"
        build_native.build_all(pkg, force=True)
        results = ROOT / "bench" / "results"
        dst = pkg / "_results"
        dst.mkdir(parents=True, exist_ok=True)
        for f in sorted(results.glob("*.json")):
            shutil.copy2(f, dst / f.name)


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildWithMojo}, distclass=BinaryDistribution)

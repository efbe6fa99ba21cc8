"""The public API of every public module: __all__ names what it exports and dir()
shows that API, not the module's imports."""
from __future__ import annotations

import importlib

import pytest

PUBLIC = ["mojolearn", "mojolearn.linalg", "mojolearn.profiles", "mojolearn.lowbit",
          "mojolearn.checkpoint", "mojolearn.conformance", "mojolearn.models",
          "mojolearn.models.block", "mojolearn.models.causal_lm", "mojolearn.models.config",
          "mojolearn.models.loader", "mojolearn.models.tokenizer", "mojolearn.torch",
          "mojolearn.training"]
DIR_IS_ALL = ["mojolearn", "mojolearn.linalg", "mojolearn.profiles", "mojolearn.lowbit",
              "mojolearn.checkpoint", "mojolearn.conformance", "mojolearn.models",
              "mojolearn.torch", "mojolearn.training"]


@pytest.mark.parametrize("name", PUBLIC)
def test_all_names_exist(name):
    """API: every public module has __all__ and every name in it resolves."""
    if name == "mojolearn.torch":
        pytest.importorskip("torch")
    mod = importlib.import_module(name)
    assert isinstance(mod.__all__, (list, tuple)) and mod.__all__
    missing = [n for n in mod.__all__ if not hasattr(mod, n)]
    assert not missing, missing
    assert len(set(mod.__all__)) == len(mod.__all__)


@pytest.mark.parametrize("name", DIR_IS_ALL)
def test_dir_shows_the_api(name):
    """API: dir(module) is its __all__ (e.g. dir(mojolearn.lowbit) has no `ctypes`)."""
    if name == "mojolearn.torch":
        pytest.importorskip("torch")
    mod = importlib.import_module(name)
    assert dir(mod) == sorted(mod.__all__)
    assert "annotations" not in dir(mod) and "ctypes" not in dir(mod)

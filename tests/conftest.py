"""Fixtures shared by the test files.

The suite runs with MOJOLEARN_SPLIT_ALL=1 (set here, before mojolearn is imported, so
child processes inherit it): every product is split over all the configured tasks, as
the thread-count and identity tests need on their small shapes. The default, which
gives a small blocked product fewer tasks, is tested in tests/test_threads_split.py with
the variable unset.
"""
from __future__ import annotations

import os

import pytest

os.environ["MOJOLEARN_SPLIT_ALL"] = "1"


@pytest.fixture
def copies(monkeypatch):
    """A list that receives the argument name of every contiguous copy mojolearn makes
    of an input (mojolearn._data.validate.copy_buf, counted) while the test runs."""
    from mojolearn._data import validate as _validate

    made = []
    real = _validate.copy_buf
    monkeypatch.setattr(_validate, "copy_buf", lambda b, **kw: made.append(kw["arg"]) or real(b, **kw))
    return made

"""Fixtures shared by the test files."""
from __future__ import annotations

import pytest


@pytest.fixture
def copies(monkeypatch):
    """A list that receives the argument name of every contiguous copy mojolearn makes
    of an input (mojolearn._validate.to_array, counted) while the test runs."""
    from mojolearn import _validate

    made = []
    real = _validate.to_array
    monkeypatch.setattr(_validate, "to_array", lambda obj, **kw: made.append(kw["arg"]) or real(obj, **kw))
    return made

"""Bit comparisons shared by the kernel tests (no arithmetic: views and equality)."""
from __future__ import annotations

import numpy as np


def u32(x):
    """float32 data as its uint32 bit patterns (C-contiguous view)."""
    return np.ascontiguousarray(np.asarray(x)).view(np.uint32)


def assert_same_bits(got, exp, what=""):
    """Exact equality of bits. For float32, at NaN positions both must be NaN
    (payloads are not promised by the contracts); other dtypes: identical values."""
    g = np.asarray(got)
    e = np.asarray(exp)
    if g.dtype != np.float32 or e.dtype != np.float32:
        assert g.dtype == e.dtype, (what, g.dtype, e.dtype)
        assert g.shape == e.shape, (what, g.shape, e.shape)
        bad = g != e
        assert not bad.any(), (
            f"{what}: {int(bad.sum())} of {bad.size} differ; first at "
            f"{[tuple(int(v) for v in ix) for ix in np.argwhere(bad)[:6]]}"
        )
        return
    assert g.shape == e.shape, (what, g.shape, e.shape)
    gn, en = np.isnan(g), np.isnan(e)
    gb, eb = u32(g), u32(e)
    bad = (gn != en) | (~gn & (gb != eb))
    if bad.any():
        idx = [tuple(int(v) for v in ix) for ix in np.argwhere(bad)[:6]]
        detail = "; ".join(
            f"{ix}: got {int(gb[ix]):#010x} ({float(g[ix])!r}) expected "
            f"{int(eb[ix]):#010x} ({float(e[ix])!r})" for ix in idx
        )
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {bad.size} outputs differ; first: {detail}"
        )

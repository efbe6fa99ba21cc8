"""Mamba-2's chunked SSD for training: the forward up to the skip and its backward.

WHAT IT COMPUTES
    `ssd_forward` runs S-20 .. S-25 of the Mamba-2 mixer (contracts/ops/
    IDENTICAL_SSM_CONTRACT.md) from a fresh state up to `s = add(Y, mul(x, D))`, the
    value the gate multiplies: the inference kernel's bits (rule T-75 of
    contracts/ops/IDENTICAL_TRAIN_CONTRACT.md), keeping the state entering every chunk
    (one 64 x 128 state per batch row, head and chunk) for the backward.
    `ssd_backward` is T-77 .. T-85: from the gradient at s, the gradients at the
    post-SiLU x, B and C (written into one array laid out as the conv output's xBC
    columns, so the conv backward reads it as is), at dt (after S-19's clamp), and one
    term per token and head for A_log and for D. `ssd_param_grads` folds those terms
    over the tokens (T-85: fold(k = tokens), the split rule every token sum keeps).
    `dt_clamp_backward` is T-76 (the gradient passes where the clamp kept the value).

THE INTERFACE (what the SSM trainer model calls)
    s, saved = ssd_forward(xbc, dt, A, D)
        xbc (batch, L, CD) float32: the post-SiLU conv output, x [0, di), B [di, di+128),
        C [di+128, di+256), CD = di + 256; dt (batch, L, H) after S-19; A (H,) =
        neg(expf(A_log)) (S-15); D (H,). Returns s (batch, L, di) and `saved`.
    dxbc, ddt, ta, td = ssd_backward(saved, ds)
        ds (batch, L, di): the gradient at s. dxbc (batch, L, CD); ddt (batch, L, H);
        ta, td (batch * L, H): per token, the A_log and D terms.
    dA_log, dD = ssd_param_grads(ta, td)      (H,) each, fold(k = tokens) per column.
    dv = dt_clamp_backward(ddt, v, lo, hi)
        v: softplus's output before the clamp (batch, L, H); lo, hi float32 bounds.
    The softplus backward and dt_bias' gradient (the fold of the gradient at the raw dt
    over the tokens) are the Mamba-1 rules' (the shared SSM pieces).

WHY SO
    Every sum over tokens or batch rows is a fold with k the token count (the terms
    are returned, not summed here), so micro-batches and ranks split on leaf boundaries
    fold back to the whole batch's bits; the sums inside one row's sequence have fixed
    orders (T-78 .. T-84) and never split. Python only validates and passes addresses;
    the arithmetic is in mojo/train/cpu/ssd_ops.mojo.
"""
from __future__ import annotations

import numpy as np

from ..._core.loader import cpu_native as native
from ..._core.threads import tasks
from .. import kernels as _k

__all__ = ["ssd_forward", "ssd_backward", "ssd_param_grads", "dt_clamp_backward", "SsdSaved"]

P = 64
N = 128
Q = 256


class SsdSaved:
    """What `ssd_forward` keeps for `ssd_backward`: its inputs and the state entering
    every chunk, hs (batch, H, nchunks, 64, 128)."""

    __slots__ = ("xbc", "dt", "A", "D", "hs", "batch", "length", "heads", "di")

    def __init__(self, xbc, dt, A, D, hs, batch, length, heads, di):
        self.xbc, self.dt, self.A, self.D, self.hs = xbc, dt, A, D, hs
        self.batch, self.length, self.heads, self.di = batch, length, heads, di


def _f32c(x, name, shape):
    if not isinstance(x, np.ndarray) or x.dtype != np.float32:
        raise TypeError(f"mojolearn: mamba2 SSD: {name} must be a float32 numpy array")
    if x.shape != shape:
        raise ValueError(f"mojolearn: mamba2 SSD: {name} has shape {x.shape}, expected {shape}")
    return np.ascontiguousarray(x)


def ssd_forward(xbc, dt, A, D):
    """T-75: s (batch, L, di) = S-20 .. S-25's add(Y, mul(x, D)) from a fresh state, and
    the `SsdSaved` the backward needs. xbc (batch, L, di + 256), dt (batch, L, H),
    A, D (H,), every one float32; di = 64 H."""
    if not isinstance(xbc, np.ndarray) or xbc.ndim != 3:
        raise ValueError("mojolearn: mamba2 SSD: xbc must be a (batch, L, di + 256) array")
    batch, length, cd = xbc.shape
    heads = (cd - 2 * N) // P
    if heads < 1 or cd != heads * P + 2 * N:
        raise ValueError(f"mojolearn: mamba2 SSD: xbc has {cd} columns, not 64 H + 256")
    if batch < 1 or length < 1:
        raise ValueError("mojolearn: mamba2 SSD: an empty batch or sequence")
    di = heads * P
    xbc = _f32c(xbc, "xbc", (batch, length, cd))
    dt = _f32c(dt, "dt", (batch, length, heads))
    A = _f32c(A, "A", (heads,))
    D = _f32c(D, "D", (heads,))
    nch = (length + Q - 1) // Q
    s = np.empty((batch, length, di), dtype=np.float32)
    hs = np.empty((batch, heads, nch, P, N), dtype=np.float32)
    native().train_ssd_forward((xbc.ctypes.data, cd, dt.ctypes.data, A.ctypes.data, D.ctypes.data,
                                s.ctypes.data, di, hs.ctypes.data, batch, length, heads, di,
                                tasks()))
    return s, SsdSaved(xbc, dt, A, D, hs, batch, length, heads, di)


def ssd_backward(saved, ds):
    """T-77 .. T-85 from ds (batch, L, di), the gradient at s: (dxbc (batch, L, di + 256)
    the gradients at x, B, C; ddt (batch, L, H); ta, td (batch * L, H) the per-token
    terms of A_log's and D's gradients)."""
    if not isinstance(saved, SsdSaved):
        raise TypeError("mojolearn: mamba2 SSD: saved must be what ssd_forward returned")
    b, L, H, di = saved.batch, saved.length, saved.heads, saved.di
    ds = _f32c(ds, "ds", (b, L, di))
    cd = di + 2 * N
    dxbc = np.empty((b, L, cd), dtype=np.float32)
    ddt = np.empty((b, L, H), dtype=np.float32)
    ta = np.empty((b * L, H), dtype=np.float32)
    td = np.empty((b * L, H), dtype=np.float32)
    native().train_ssd_backward((saved.xbc.ctypes.data, cd, saved.dt.ctypes.data,
                                 saved.A.ctypes.data, saved.D.ctypes.data, saved.hs.ctypes.data,
                                 ds.ctypes.data, di, dxbc.ctypes.data, cd, ddt.ctypes.data,
                                 ta.ctypes.data, td.ctypes.data, b, L, H, di, tasks()))
    return dxbc, ddt, ta, td


def ssd_param_grads(ta, td):
    """T-85: (dA_log, dD), each (H,) = fold(k = tokens) of a column of the terms."""
    return _k.fold_rows(np.ascontiguousarray(ta)), _k.fold_rows(np.ascontiguousarray(td))


def dt_clamp_backward(g, v, lo, hi):
    """T-76: g where S-19's clamp kept v (v = softplus's output; ties with a bound pass),
    +0 where it replaced it. g, v float32 of one shape; lo, hi rounded to float32."""
    if not isinstance(g, np.ndarray) or g.dtype != np.float32:
        raise TypeError("mojolearn: mamba2 dt clamp backward: g must be a float32 numpy array")
    v = _f32c(v, "v", g.shape)
    g = np.ascontiguousarray(g)
    out = np.empty_like(g)
    if g.size:
        native().train_ssd_dt_clamp_bwd((g.ctypes.data, v.ctypes.data, out.ctypes.data, g.size,
                                         _k.f32_bits(lo), _k.f32_bits(hi), tasks()))
    return out

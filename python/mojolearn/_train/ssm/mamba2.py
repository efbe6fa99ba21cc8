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
    over the tokens) are the Mamba-1 rules' (T-67, the shared SSM pieces).

THE MIXER (the trainer's; ssm/model.py calls every family through it)
    ``forward(p, layer, h, B, L, cfg) -> (out, saved)`` and ``backward(p, layer, saved,
    dout, grads, ts=None) -> dh`` as mamba1.py's: S-19 .. S-25 with the inference model's kernels
    (in_proj, the conv over the CD channels and its SiLU, the dt path, this SSD, the
    gate mul(s, silu(z)) as M-17's silu_mul on [z | s], S-10's gated norm, out_proj),
    and the backward by T-4 .. T-6, T-63 / T-64, T-52, T-75 .. T-85, T-67 (with S-19's
    clamp), T-66, T-65.

WHY SO
    Every sum over tokens or batch rows is a fold with k the token count (the terms
    are returned, not summed here), so micro-batches and ranks split on leaf boundaries
    fold back to the whole batch's bits; the sums inside one row's sequence have fixed
    orders (T-78 .. T-84) and never split. Python only validates and passes addresses;
    the arithmetic is in mojo/train/cpu/ssd_ops.mojo and ssd_bwd.mojo.
"""
from __future__ import annotations

import numpy as np

from ..._core.loader import cpu_native as native
from ..._core.threads import tasks
from ...models._exec import kernels as K
from ...models._ssm.config import EPS
from .. import kernels as _k
from ..model import TokenSums, _empty, _mm

__all__ = ["ssd_forward", "ssd_backward", "ssd_param_grads", "dt_clamp_backward", "SsdSaved",
           "PARAMS", "forward", "backward"]
_EPS_BITS = K.f32_bits(EPS)

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
    s = _empty(batch, length, di)
    hs = _empty(batch, heads, nch, P, N)
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
    dxbc = _empty(b, L, cd)
    ddt = _empty(b, L, H)
    ta = _empty(b * L, H)
    td = _empty(b * L, H)
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


# ------------------------------------------------------------------ the mixer (the trainer's)
PARAMS = ("in_proj.weight", "conv1d.weight", "conv1d.bias", "dt_bias", "A_log", "D",
          "norm.weight", "out_proj.weight")
"""The mixer's parameters under ``backbone.layers.{i}.mixer.``, in the trainer's order
(the checkpoint's; ``norm.weight`` is the gated norm)."""


class Saved:
    """What the mixer's backward reads of one forward call."""
    __slots__ = ("h", "zx", "cv", "v", "ssd", "zs", "g", "gn", "B", "L", "lim")


def forward(p: dict, layer: str, h, B: int, L: int, cfg=None):
    """S-19 .. S-25 of the rows h (B * L, d) from a zero state: (out, saved). cfg gives
    S-7's time_step_limit (None: no clamp)."""
    m = layer + "mixer."
    win = p[m + "in_proj.weight"]
    d = win.shape[1]
    H = p[m + "A_log"].shape[0]
    di = 64 * H
    cd = di + 2 * N
    rows = B * L
    cw = p[m + "conv1d.weight"].reshape(cd, 4)
    s = Saved()
    s.B, s.L, s.h = B, L, h
    lim = getattr(cfg, "time_step_limit", None)
    s.lim = lim
    s.zx = zx = K.gemm_nt(h, rows, win, _empty(rows, di + cd + H))  # z, xBC, dt (S-19)
    s.cv = K.ssm_conv(zx, di, cd, cw, p[m + "conv1d.bias"], np.zeros((B, cd, 4), np.float32),
                      _empty(rows, cd), B, L, False)
    xbc = K.ssm_conv(zx, di, cd, cw, p[m + "conv1d.bias"], np.zeros((B, cd, 4), np.float32),
                     _empty(rows, cd), B, L, True)
    s.v = K.ssm_softplus(zx, di + cd, H, p[m + "dt_bias"], _empty(rows, H))  # before the clamp
    clamp = None if lim is None else (_k.f32_bits(lim[0]), _k.f32_bits(lim[1]))
    dt = K.ssm_softplus(zx, di + cd, H, p[m + "dt_bias"], _empty(rows, H), clamp)  # S-19
    a = K.ssm_neg_exp(p[m + "A_log"])  # S-15
    y, s.ssd = ssd_forward(xbc.reshape(B, L, cd), dt.reshape(B, L, H), a, p[m + "D"])
    # S-25: the gate before the norm, g = mul(s, silu(z)) (M-17's silu_mul on [z | s])
    s.zs = zs = _empty(rows, 2 * di)
    zs[:, :di] = zx[:, :di]
    zs[:, di:] = y.reshape(rows, di)
    s.g = g = K.silu_mul(zs, di, _empty(rows, di))
    s.gn = gn = K.ssm_norm_lanes(g, p[m + "norm.weight"], _EPS_BITS, _empty(rows, di))  # S-10
    out = K.gemm_nt(gn, rows, p[m + "out_proj.weight"], _empty(rows, d))
    return out, s


def backward(p: dict, layer: str, s: Saved, dout, grads: dict, ts=None):
    """The mixer's backward (T-4 .. T-6 products, T-63 / T-64 gated norm, T-52 gate,
    T-75 .. T-85 SSD, T-76 dt path, T-65 / T-66 conv and SiLU); the gradient at h.
    ``ts``: the _train/model.py TokenSums that computes every sum over the tokens (the
    whole fold / dot into ``grads``, or a rank's part); None: the whole sums."""
    m = layer + "mixer."
    win = p[m + "in_proj.weight"]
    d = win.shape[1]
    H = p[m + "A_log"].shape[0]
    di = 64 * H
    cd = di + 2 * N
    B, L = s.B, s.L
    rows = B * L
    G = grads
    if ts is None:
        ts = TokenSums(None)
    dgn = _mm(dout, p[m + "out_proj.weight"], _empty(rows, di), rows, di, d)
    ts.dot(m + "out_proj.weight", G[m + "out_proj.weight"], dout, s.gn)
    dg, terms = _empty(rows, di), _empty(rows, di)
    _k.ssm_norm_backward(dgn, s.g, p[m + "norm.weight"], _EPS_BITS, dg, terms)  # T-63, T-64
    ts.fold(m + "norm.weight", G[m + "norm.weight"], terms)
    del dgn, terms
    dzs = _empty(rows, 2 * di)
    native().train_silu_mul_bwd((s.zs.ctypes.data, 2 * di, dg.ctypes.data, di, dzs.ctypes.data,
                                 rows, di, tasks()))  # T-52: (dz, ds)
    del dg
    dzx = _empty(rows, di + cd + H)
    dzx[:, :di] = dzs[:, :di]
    dxbc, ddt, ta, td = ssd_backward(s.ssd, np.ascontiguousarray(dzs[:, di:]).reshape(B, L, di))
    del dzs
    ts.fold(m + "A_log", G[m + "A_log"], ta)  # T-85: over the tokens
    ts.fold(m + "D", G[m + "D"], td)
    del ta, td
    lim = s.lim
    ddt = ddt.reshape(rows, H)
    dv = ddt if lim is None else dt_clamp_backward(ddt, s.v, lim[0], lim[1])  # T-76
    draw = _k.ssm_softplus_backward(s.zx[:, di + cd:], p[m + "dt_bias"], dv, _empty(rows, H))
    ts.fold(m + "dt_bias", G[m + "dt_bias"], draw)
    dzx[:, di + cd:] = draw
    del draw, dv, ddt
    dcv = _k.ssm_silu_backward(s.cv, dxbc.reshape(rows, cd), _empty(rows, cd))  # T-66
    del dxbc
    cterms = _empty(rows, 4 * cd)
    _k.ssm_conv_backward(s.zx[:, di:di + cd], p[m + "conv1d.weight"].reshape(cd, 4), dcv,
                         dzx[:, di:di + cd], cterms, B, L)  # T-65
    ts.fold(m + "conv1d.weight", G[m + "conv1d.weight"], cterms)
    ts.fold(m + "conv1d.bias", G[m + "conv1d.bias"], dcv)
    del cterms, dcv
    dh = _mm(dzx, win, _empty(rows, d), rows, d, di + cd + H)
    ts.dot(m + "in_proj.weight", G[m + "in_proj.weight"], dzx, s.h)
    return dh

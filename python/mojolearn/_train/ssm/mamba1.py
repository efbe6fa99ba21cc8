"""The Mamba-1 mixer for training: its forward (S-13 .. S-18 with the inference model's
own kernels, from a fresh zero state) keeping what the backward reads, and its backward
(rules T-63 .. T-72 of contracts/ops/IDENTICAL_TRAIN_CONTRACT.md).

THE INTERFACE (ssm/model.py calls every mixer family through it):
``forward(p, layer, h, B, L, cfg) -> (out, saved)``: ``p`` the model's parameter dict by
checkpoint name, ``layer`` the prefix ``backbone.layers.{i}.``, ``h`` the block norm's
output (B * L, d) float32; ``out`` (B * L, d) the mixer's output before S-9's residual.
``backward(p, layer, saved, dout, grads, ts=None) -> dh``: ``dout`` the gradient at
``out``; writes every parameter gradient of the mixer into ``grads`` (a dict by
checkpoint name of zeroed arrays of the parameters' shapes; each entry is written whole)
and returns the gradient at ``h``. Sums over tokens are T-2 folds / T-6 dots over this
call's tokens, each made by ``ts`` (_train/model.py's TokenSums: the whole sum into
``grads``, or with data-parallel ranks this rank's part, keyed by the parameter's name),
so micro-batches and ranks of whole rows on leaf boundaries join by T-26's tree.

Python only names kernels and copies columns; every value is computed by the Mojo
kernels (mojo/ssm/cpu for the forward, mojo/train/cpu/ssm_ops.mojo for the backward).
"""
from __future__ import annotations

import numpy as np

from ...models._exec import kernels as K
from .. import kernels as TK
from ..model import TokenSums, _empty, _mm

PARAMS = ("in_proj.weight", "conv1d.weight", "conv1d.bias", "x_proj.weight", "dt_proj.weight",
          "dt_proj.bias", "A_log", "D", "out_proj.weight")
"""The mixer's parameters under ``backbone.layers.{i}.mixer.``, in the trainer's order."""


class Saved:
    """What the backward reads of one mixer call."""
    __slots__ = ("h", "xz", "cv", "u", "xp", "dt", "delta", "a", "g", "B", "L")


def forward(p: dict, layer: str, h, B: int, L: int, cfg=None):
    """S-16 .. S-18 of the rows h (B * L, d) from a zero state; (out, saved). cfg (the
    model config) is not read: Mamba-1 has no clamp."""
    m = layer + "mixer."
    win = p[m + "in_proj.weight"]
    di = win.shape[0] // 2
    rows = B * L
    r = p[m + "dt_proj.weight"].shape[1]
    cw = p[m + "conv1d.weight"].reshape(di, 4)
    s = Saved()
    s.B, s.L, s.h = B, L, h
    s.xz = xz = K.gemm_nt(h, rows, win, _empty(rows, 2 * di))  # [0, di) conv input, [di, 2di) z
    # S-13: the conv before the SiLU (its backward reads it) and after (the forward's bits)
    s.cv = K.ssm_conv(xz, 0, di, cw, p[m + "conv1d.bias"], np.zeros((B, di, 4), np.float32),
                      _empty(rows, di), B, L, False)
    s.u = u = K.ssm_conv(xz, 0, di, cw, p[m + "conv1d.bias"], np.zeros((B, di, 4), np.float32),
                         _empty(rows, di), B, L, True)
    s.xp = xp = K.gemm_nt(u, rows, p[m + "x_proj.weight"], _empty(rows, r + 32))
    s.dt = dt = K.gemm_nt(np.ascontiguousarray(xp[:, :r]), rows, p[m + "dt_proj.weight"],
                          _empty(rows, di))
    s.delta = delta = K.ssm_softplus(dt, 0, di, p[m + "dt_proj.bias"], _empty(rows, di))
    s.a = a = K.ssm_neg_exp(p[m + "A_log"])  # S-15
    s.g = g = K.mamba1_scan(u, delta, a, xp, r, r + 16, p[m + "D"], xz, di,
                            np.zeros((B, di, 16), np.float32), _empty(rows, di), B, L)
    out = K.gemm_nt(g, rows, p[m + "out_proj.weight"], _empty(rows, win.shape[1]))
    return out, s


def backward(p: dict, layer: str, s: Saved, dout, grads: dict, ts=None):
    """T-63 .. T-72 for one mixer call; the gradient at h (B * L, d). ``ts``: the
    _train/model.py TokenSums that computes every sum over the tokens (the whole fold / dot
    into ``grads``, or a rank's part); None: the whole sums into ``grads``."""
    m = layer + "mixer."
    win = p[m + "in_proj.weight"]
    di, d = win.shape[0] // 2, win.shape[1]
    B, L = s.B, s.L
    rows = B * L
    r = p[m + "dt_proj.weight"].shape[1]
    G = grads
    if ts is None:
        ts = TokenSums(None)
    # out_proj (T-4 .. T-6)
    dg = _mm(dout, p[m + "out_proj.weight"], _empty(rows, di), rows, di, d)
    ts.dot(m + "out_proj.weight", G[m + "out_proj.weight"], dout, s.g)
    # the scan, skip and gate (T-68 .. T-71)
    dxz = _empty(rows, 2 * di)
    du_s, ddelta = _empty(rows, di), _empty(rows, di)
    tb, tc = _empty(di, rows * 16), _empty(di, rows * 16)
    ta, td = _empty(rows, di * 16), _empty(rows, di)
    TK.mamba1_scan_backward(s.u, s.delta, s.a, s.xp, r, r + 16, p[m + "D"], s.xz[:, di:], dg,
                            du_s, ddelta, dxz[:, di:], tb, tc, ta, td, B, L)
    del dg
    ts.fold(m + "A_log", G[m + "A_log"], ta)  # over the tokens
    ts.fold(m + "D", G[m + "D"], td)
    del ta, td
    dxp = _empty(rows, r + 32)
    dxp[:, r:r + 16] = TK.fold_rows(tb).reshape(rows, 16)  # T-69: the channels' fold
    dxp[:, r + 16:] = TK.fold_rows(tc).reshape(rows, 16)
    del tb, tc
    # softplus and dt_proj (T-67, T-72)
    ddt = TK.ssm_softplus_backward(s.dt, p[m + "dt_proj.bias"], ddelta, _empty(rows, di))
    del ddelta
    ts.fold(m + "dt_proj.bias", G[m + "dt_proj.bias"], ddt)
    dt_low = np.ascontiguousarray(s.xp[:, :r])
    ts.dot(m + "dt_proj.weight", G[m + "dt_proj.weight"], ddt, dt_low)
    dxp[:, :r] = _mm(ddt, p[m + "dt_proj.weight"], _empty(rows, r), rows, r, di)
    del ddt, dt_low
    # x_proj (T-4 .. T-6), the join into u (T-55), the SiLU and the conv (T-65, T-66)
    ts.dot(m + "x_proj.weight", G[m + "x_proj.weight"], dxp, s.u)
    du = _mm(dxp, p[m + "x_proj.weight"], _empty(rows, di), rows, di, r + 32)
    del dxp
    K.add(du, du_s, du)
    del du_s
    dcv = TK.ssm_silu_backward(s.cv, du, _empty(rows, di))
    del du
    terms = _empty(rows, 4 * di)
    TK.ssm_conv_backward(s.xz[:, :di], p[m + "conv1d.weight"].reshape(di, 4), dcv, dxz[:, :di],
                         terms, B, L)
    ts.fold(m + "conv1d.weight", G[m + "conv1d.weight"], terms)
    ts.fold(m + "conv1d.bias", G[m + "conv1d.bias"], dcv)
    del terms, dcv
    # in_proj (T-4 .. T-6)
    dh = _mm(dxz, win, _empty(rows, d), rows, d, 2 * di)
    ts.dot(m + "in_proj.weight", G[m + "in_proj.weight"], dxz, s.h)
    return dh

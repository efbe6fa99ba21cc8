"""Thin calls into the training kernels (mojo/train/cpu/): numpy buffers in, addresses out.

Every function takes C-contiguous arrays of the stated dtypes that its caller
(primitives.py, optim.py, the model trainer) has validated, and only passes their
addresses and sizes; all arithmetic runs in the Mojo kernels (rules T-* of
training-arithmetic-v1). Outputs are preallocated by the caller unless a function
says it returns a new array.
"""
from __future__ import annotations

import struct

import numpy as np

from .._core.loader import cpu_native as native
from .._core.threads import gemm_tasks, tasks
from .._ops import calls as _calls

__all__ = [
    "f32_bits", "bits_f32", "rms_norm_forward", "rms_norm_backward", "head_norm_backward", "gather",
    "embedding_backward_into", "ce_rows", "fold_rows", "scalar_div", "clip", "tree_sum",
    "adam_step", "sgd_step", "first_nonfinite", "neg", "gemm", "bias_backward", "lm_head",
    "ssm_norm_backward", "ssm_silu_backward", "ssm_softplus_backward", "ssm_conv_backward",
    "mamba1_scan_backward",
]


def _a(x) -> int:
    return x.ctypes.data


def f32_bits(x) -> int:
    """The bit pattern of the float32 nearest to x (a float32 value is kept exactly)."""
    return struct.unpack("<I", struct.pack("<f", float(x)))[0]


def bits_f32(b: int) -> np.float32:
    """The float32 whose bit pattern is b."""
    return np.array([b], dtype=np.uint32).view(np.float32)[0]


def _addr_table(arrays):
    """(addresses int64, sizes int64) of a list of arrays (kept alive by the caller)."""
    addrs = np.array([_a(x) for x in arrays], dtype=np.int64)
    sizes = np.array([x.size for x in arrays], dtype=np.int64)
    return addrs, sizes


def gemm(a, b, c, m: int, n: int, k: int, trans_a: int, trans_b: int):
    """c (m, n) = op(a) @ op(b) under fp32.v1 (the existing gemm_f32 entry)."""
    if m == 0 or n == 0:
        return c
    wa, wn = _calls.workspace()
    need = native().gemm_f32((
        _a(a), _a(b), _a(c), m, n, k, trans_a, trans_b, 0, 0, 0, gemm_tasks("fp32", m, n, k),
        _calls.sabotage_arg(), wa, wn,
    ))
    if need > wn:
        _calls.workspace_fit(need)
    return c


def rms_norm_forward(x, w, eps_bits: int, out):
    """M-4 (T-8) of the rows of x (rows, d) into out (the existing nn_rmsnorm entry)."""
    rows, d = x.shape
    if rows and d:
        native().nn_rmsnorm((_a(x), d, _a(w), _a(out), d, rows, d, eps_bits, tasks()))
    return out


def rms_norm_backward(dy, x, w, eps_bits: int, dx, dw):
    """T-9 .. T-11: dx (rows, d) and dw (d,) = fold(k = rows) per column, both written."""
    rows, d = x.shape
    if d:
        native().train_rms_norm_backward((_a(dy), _a(x), _a(w), _a(dx), _a(dw), rows, d, eps_bits,
                                          tasks()))
    return dx, dw


def head_norm_backward(dy, x, w, eps_bits: int, heads: int, dx, terms):
    """T-62 (qwen3's per-head q / k norm): x, dy, dx (tokens, heads * hd), each (token,
    head) a row of hd, w (hd,); dx by T-9, T-10 per row and terms (tokens, hd) = per token
    the chain over the heads ascending of T-11's terms, both written. The weight
    gradient is fold(k = tokens) of the terms (fold_rows, or a rank's part)."""
    tokens = x.shape[0]
    hd = w.shape[0]
    if tokens and hd:
        native().train_head_norm_backward((_a(dy), _a(x), _a(w), _a(dx), _a(terms), tokens, heads,
                                           hd, eps_bits, tasks()))
    return dx, terms


def gather(table, ids, out):
    """T-12: out[r] = ftz(table[ids[r]]); ids int64, every id checked by the caller."""
    if ids.size and table.shape[1]:
        native().train_gather((_a(table), _a(ids), _a(out), ids.size, table.shape[1], tasks()))
    return out


def embedding_backward_into(dy, ids, acc):
    """T-13: acc[ids[t]] = add(acc[ids[t]], dy[t]) for t ascending (dy (T, d), ids int64
    (T,), acc (V, d) float32 updated in place: a zeroed acc for a fresh call, the previous
    micro-batch's acc to continue the chains). Returns acc."""
    d = acc.shape[1]
    if ids.size and d:
        native().train_embedding_backward((_a(dy), _a(ids), _a(acc), ids.size, d, tasks()))
    return acc


def ce_rows(logits, targets, ignore_index: int, smoothing_bits: int, d_bits: int, rows_out,
            grad_out):
    """T-14 .. T-16 row losses of logits (N, V) with int64 targets (N,) into rows_out (N,),
    ignored rows +0; when grad_out (N, V) is not None, T-18's gradient divided by the
    float32 D of d_bits (ignored rows +0). Returns (rows_out, grad_out)."""
    n, v = logits.shape
    if n:
        native().train_ce_rows((
            _a(logits), _a(targets), _a(rows_out), 0 if grad_out is None else _a(grad_out), n, v,
            int(ignore_index), smoothing_bits, d_bits, tasks(),
        ))
    return rows_out, grad_out


def fold_rows(x):
    """T-2: a new (n,) array, out[c] = fold(k = rows) of column c of x (rows, n)."""
    rows, n = x.shape
    out = np.empty((n,), dtype=np.float32)
    if n:
        native().train_fold_rows((_a(x), _a(out), rows, n, tasks()))
    return out


def scalar_div(a_bits: int, b_bits: int) -> int:
    """div(a, b) on float32 bits, operands and result flushed (T-17's loss)."""
    return native().train_scalar((0, a_bits, b_bits))


def clip(grads, max_norm_bits: int):
    """T-23 .. T-25 over a list of float32 arrays (rescaled in place when the total is
    finite). Returns (norms (J + 1,) with the total last, coefficient bits or -1)."""
    addrs, sizes = _addr_table(grads)
    norms = np.empty((len(grads) + 1,), dtype=np.float32)
    coef = native().train_clip((_a(addrs), _a(sizes), len(grads), _a(norms), max_norm_bits, tasks()))
    return norms, coef


def tree_sum(arrays):
    """T-26: a new array, the balanced pairwise tree over same-shape float32 arrays (a
    power of two of them); one array gives ftz(g0)."""
    addrs, _ = _addr_table(arrays)
    out = np.empty(arrays[0].shape, dtype=np.float32)
    if out.size:
        native().train_tree_sum((_a(addrs), len(arrays), _a(out), out.size, tasks()))
    return out


def adam_step(params, grads, m_flat, v_flat, t: int, lr_bits: int, b1_bits: int, b2_bits: int,
              eps_bits: int, wd_bits: int, decoupled: bool, maximize: bool):
    """One Adam (decoupled False) / AdamW step of every tensor in place (T-29 .. T-34)."""
    pa, sizes = _addr_table(params)
    ga, _ = _addr_table(grads)
    native().train_adam((
        _a(pa), _a(ga), _a(sizes), len(params), _a(m_flat), _a(v_flat), int(t), lr_bits, b1_bits,
        b2_bits, eps_bits, wd_bits, int(bool(decoupled)), int(bool(maximize)), tasks(),
    ))


def sgd_step(params, grads, buf_flat, flags, lr_bits: int, momentum_bits: int, dampening_bits: int,
             wd_bits: int, nesterov: bool, maximize: bool):
    """One SGD step of every tensor in place (T-33, T-34); flags int32 (one a tensor, 0:
    the first momentum step), read only (the caller sets them after)."""
    pa, sizes = _addr_table(params)
    ga, _ = _addr_table(grads)
    native().train_sgd((
        _a(pa), _a(ga), _a(sizes), len(params), _a(buf_flat), _a(flags), lr_bits, momentum_bits,
        dampening_bits, wd_bits, int(bool(nesterov)), int(bool(maximize)), tasks(),
    ))


def first_nonfinite(x) -> int:
    """The flat index of the first NaN or +-inf of the float32 array x, or -1."""
    if x.size == 0:
        return -1
    return native().train_first_nonfinite((_a(x), x.size, tasks()))


def neg(x):
    """A new array: x with every sign bit flipped (exact; neg(+0) = -0)."""
    out = np.empty(x.shape, dtype=np.float32)
    if x.size:
        native().train_neg((_a(x), _a(out), x.size, tasks()))
    return out


def bias_backward(dy):
    """T-7: a new (n,) array, out[c] = the chain over rows ascending from +0 of
    add(acc, dy[r, c]) (dy (rows, n))."""
    rows, n = dy.shape
    out = np.empty((n,), dtype=np.float32)
    if n:
        native().train_bias_backward((_a(dy), _a(out), rows, n, tasks()))
    return out


def lm_head(h, weight, targets, return_grad: bool):
    """T-19 .. T-21 of h (rows, width), weight (V, width), int64 targets (rows,) (checked
    by the caller: rows >= 1, V >= 2, every target in [0, V)). Returns (loss float32,
    dh, dweight), the gradients None without return_grad."""
    rows, width = h.shape
    v = weight.shape[0]
    dh = np.zeros((rows, width), dtype=np.float32) if return_grad else None
    dw = np.zeros((v, width), dtype=np.float32) if return_grad else None
    bits = native().train_lm_head((
        _a(h), _a(weight), _a(targets), 0 if dh is None else _a(dh), 0 if dw is None else _a(dw),
        rows, width, v, tasks(),
    ))
    return bits_f32(bits), dh, dw


# ------------------------------------------------------------------ the state-space backward
def ssm_norm_backward(dy, x, w, eps_bits: int, dx, terms):
    """T-63, T-64 (S-10's lane norm backward) over the rows of x (rows, n) (row strides
    read from the arrays): dx (rows, n) and terms (rows, n), T-11's term a row, both
    written. The weight gradient is fold(k = rows) of the terms (fold_rows)."""
    rows, n = x.shape
    if rows and n:
        native().train_ssm_norm_backward((
            _a(dy), dy.strides[0] // 4, _a(x), x.strides[0] // 4, _a(w), _a(dx),
            dx.strides[0] // 4, _a(terms), terms.strides[0] // 4, rows, n, eps_bits, tasks()))
    return dx, terms


def ssm_silu_backward(x, dy, out):
    """T-66: out = mul(dy, silu'(x)) elementwise over (rows, n) views with row strides."""
    rows, n = x.shape
    if rows and n:
        native().train_ssm_silu_backward((_a(x), x.strides[0] // 4, _a(dy), dy.strides[0] // 4,
                                          _a(out), out.strides[0] // 4, rows, n, tasks()))
    return out


def ssm_softplus_backward(raw, bias, dy, out, clamp=None):
    """T-67: the softplus backward at add(raw, bias) (raw, dy, out (rows, n) views with
    row strides, bias (n,)); clamp = (lo bits, hi bits) of S-19's clamp (Mamba-2's
    time_step_limit): +0 where the clamp replaced the value."""
    rows, n = raw.shape
    lo, hi = (0, 0) if clamp is None else clamp
    if rows and n:
        native().train_ssm_softplus_backward((
            _a(raw), raw.strides[0] // 4, _a(bias), _a(dy), dy.strides[0] // 4, _a(out),
            out.strides[0] // 4, rows, n, int(clamp is not None), int(lo), int(hi), tasks()))
    return out


def ssm_conv_backward(x, w, dc, dx, terms, batch: int, length: int):
    """T-65 over C channels: x (batch * length, C) the conv's input (a view with a row
    stride), w (C, 4), dc the gradient at the conv's output (pre-activation), dx (rows, C)
    and terms (rows, 4C) written (the weight gradient is fold_rows(terms), the bias's
    fold_rows(dc))."""
    C = w.shape[0]
    if batch and length and C:
        native().train_ssm_conv_backward((
            _a(x), x.strides[0] // 4, _a(w), _a(dc), dc.strides[0] // 4, _a(dx),
            dx.strides[0] // 4, _a(terms), batch, length, C, tasks()))
    return dx, terms


def mamba1_scan_backward(u, delta, a, xp, b_off: int, c_off: int, d, z, dg, du, ddelta, dz,
                         tb, tc, ta, td, batch: int, length: int):
    """T-68 .. T-71: the Mamba-1 scan backward from the gradient dg at the gated output.
    u, delta, dg, du, ddelta (rows, di); z and dz (rows, di) views with row strides;
    xp (rows, r + 32) with B at b_off and C at c_off; a (di, 16); d (di,). Writes du (the
    scan's and skip's part), ddelta, dz, and the terms tb, tc (di, rows, 16), ta (rows,
    di * 16), td (rows, di)."""
    di = a.shape[0]
    if batch and length and di:
        native().train_mamba1_scan_backward((
            _a(u), u.strides[0] // 4, _a(delta), delta.strides[0] // 4, _a(a), _a(xp),
            xp.strides[0] // 4, b_off, c_off, _a(d), _a(z), z.strides[0] // 4, _a(dg),
            dg.strides[0] // 4, _a(du), _a(ddelta), _a(dz), dz.strides[0] // 4, _a(tb), _a(tc),
            _a(ta), _a(td), batch, length, di, tasks()))
    return du, ddelta, dz

"""Thin calls into the extension for the models: numpy buffers in, addresses out.

Every function here only checks shapes it was handed by the model code and passes
addresses; all arithmetic runs in the Mojo kernels (contracts/ops/ and
contracts/gemm/).
"""
from __future__ import annotations

import struct

import numpy as np

from ..._core.loader import cpu_native as native  # the models run on the CPU in this version
from ..._core.threads import gemm_tasks, tasks
from ..._ops import calls as _calls
from ..._data.buffers import writable_address


def _a(x) -> int:
    """The address of x's first element: a writable C-contiguous array (every buffer the
    models hand a kernel; a greedy decode step makes about a thousand of these calls)
    through _buffers.writable_address, anything else through ``x.ctypes.data``."""
    addr = writable_address(x)
    return addr if addr is not None else x.ctypes.data


def f32_bits(x: float) -> int:
    """The float32 nearest to a config value (eps, theta), as its bit pattern."""
    return struct.unpack("<I", struct.pack("<f", float(x)))[0]


def gemm_nt(x, ldx_rows: int, w, out, *, w_bf16: bool = False, mode: int = 0):
    """out (m, n) = x (m, k) @ w.T under fp32.v1 (mode: the numeric mode's kernel code,
    0 identical); w (n, k) float32 or bf16 bits."""
    m, k = ldx_rows, x.shape[-1]
    n = w.shape[0]
    if m == 0 or n == 0:
        return out
    wa, wn = _calls.workspace()
    need = native().gemm_f32((
        _a(x), _a(w), _a(out), m, n, k, 0, 1, 0, int(w_bf16), mode, gemm_tasks("fp32", m, n, k),
        _calls.sabotage_arg(), wa, wn,
    ))
    if need > wn:
        _calls.workspace_fit(need)
    return out


def prepare_nt(w):
    """w (n, k) float32 packed once for the fp32.v1 kernel of this CPU build
    (linalg.prepare with transpose_b=True)."""
    from ..._ops import prepared as _prepared

    return _prepared.prepare(w, transpose_b=True)


def gemm_prepared(x, ldx_rows: int, p, out, mode: int = 0):
    """out (m, n) = x (m, k) @ w.T under fp32.v1, w prepared by prepare_nt (the bits of
    gemm_nt on the raw w). The model made p in this process for this build."""
    m, k, n = ldx_rows, p.k, p.n
    if m == 0 or n == 0:
        return out
    wa, wn = _calls.workspace()
    bp, bfmt, bsc = p._kernel_args()
    need = native().gemm_f32_packed((
        _a(x), bp, _a(out), m, n, k, 0, 0, bfmt, bsc, mode, gemm_tasks("fp32", m, n, k),
        _calls.sabotage_arg(), wa, wn,
    ))
    if need > wn:
        _calls.workspace_fit(need)
    return out


def quantize15(x, m: int, k: int):
    """(hi, lo, exps) of the rows of x (m, k) under the int15 quantizer (W-1..W-3)."""
    hi = np.empty((m, k), dtype=np.int8)
    lo = np.empty((m, k), dtype=np.int8)
    e = np.empty((m,), dtype=np.int32)
    if m and k:
        native().quantize_int15((_a(x), _a(hi), _a(lo), _a(e), m, k, tasks()))
    return hi, lo, e


def prepare_nt_int8(codes, e):
    """int8 codes (n, k) and row exponents of a weight, prepared once as this CPU build's
    int8 panels for fp32.v1 (linalg.prepare of a lowbit.Int8Weight: the kernels widen
    them by rule L-6, the bits of the product with dequantize_int8's float32)."""
    from ..._ops import prepared as _prepared, lowbit

    return _prepared.prepare(lowbit.Int8Weight(codes, e), transpose_b=True)


def gemm_int15(xq, wq, out, m: int, n: int, k: int):
    """out (m, n) = int15i64.v1 of the quantized activations xq and the weight's int15
    codes wq (hi, lo, exps), both as stored (the kernel packs the weight per call; the
    decode rows read it in place)."""
    if m == 0 or n == 0:
        return out
    wa, wn = _calls.workspace()
    need = native().gemm_int15((
        _a(xq[0]), _a(xq[1]), _a(xq[2]), _a(wq[0]), _a(wq[1]), _a(wq[2]), _a(out),
        m, n, k, gemm_tasks("int", m, n, k, 4), _calls.sabotage_arg(), wa, wn,
    ))
    if need > wn:
        _calls.workspace_fit(need)
    return out


def to_bf16(w):
    out = np.empty(w.shape, dtype=np.uint16)
    native().to_bf16((_a(w), _a(out), w.size, tasks()))
    return out


def from_bf16(bits):
    out = np.empty(bits.shape, dtype=np.float32)
    native().from_bf16((_a(bits), _a(out), bits.size, tasks()))
    return out


def quantize8(w):
    """(codes, exps) of the rows of w (m, k) under the int8 quantizer (L-3, L-4)."""
    m, k = w.shape
    codes = np.empty((m, k), dtype=np.int8)
    e = np.empty((m,), dtype=np.int32)
    native().quantize_int8((_a(w), _a(codes), _a(e), m, k, tasks()))
    return codes, e


def dequantize8(codes, e):
    """dequantize_int8 (L-6): the float32 an int8-stored weight materializes."""
    m, k = codes.shape
    out = np.empty((m, k), dtype=np.float32)
    native().dequantize_int8((_a(codes), _a(e), _a(out), m, k, tasks()))
    return out


def int8_roundtrip(w):
    """dequantize_int8(quantize_int8(w)): the float32 an int8-stored weight holds."""
    return dequantize8(*quantize8(w))


def gather(table, ids, out):
    rows = ids.size
    native().nn_gather((_a(table), _a(ids), _a(out), rows, table.shape[1], tasks()))
    return out


def gather_panels(p, ids, out):
    """gather (M-2) from a table held as prepared fp32.v1 panels p in any panel format
    (float32, bf16 bits, int8 codes: each row widened as the format materializes it):
    a tied head's panels serve the embedding too, and a table stored low-bit is held
    in its bytes."""
    rows = ids.size
    if not p.transpose_b:
        raise ValueError("mojolearn: gather_panels needs a table prepared with "
                         "transpose_b=True")  # pragma: no cover - the models' own use
    addr, fmt, scales = p._kernel_args()
    native().nn_gather_panels((addr, fmt, scales, _a(ids), _a(out), rows, p.k, p.nr, tasks()))
    return out


def rmsnorm(x, w, eps_bits: int, out):
    rows, d = x.shape
    native().nn_rmsnorm((_a(x), d, _a(w), _a(out), d, rows, d, eps_bits, tasks()))
    return out


def rope_table(npos: int, head_dim: int, theta_bits: int):
    half = head_dim // 2
    cos = np.empty((npos, half), dtype=np.float32)
    sin = np.empty((npos, half), dtype=np.float32)
    native().nn_rope_table((_a(cos), _a(sin), npos, head_dim, theta_bits, tasks()))
    return cos, sin


def rope(src, src_off: int, lds: int, dst, ldd: int, dhs: int, n_heads: int, head_dim: int,
         cos, sin, pos0: int, length: int, rows: int, *, transposed: bool = False, tmax: int = 0,
         rot_dim: int | None = None):
    """Rotate n_heads heads starting at column src_off of each row of src: the first
    rot_dim (default head_dim) elements of each head by the table (cos, sin of rot_dim / 2
    columns), the rest copied (M-10, M-34)."""
    native().nn_rope((
        _a(src) + 4 * src_off, lds, _a(dst), ldd, dhs, n_heads, head_dim, _a(cos), _a(sin),
        pos0, length, rows, int(transposed), tmax, tasks(),
        head_dim if rot_dim is None else rot_dim,
    ))


def silu_mul(gu, ff: int, out):
    rows = gu.shape[0]
    native().nn_silu_mul((_a(gu), _a(gu) + 4 * ff, gu.shape[1], _a(out), ff, ff, rows,
                          tasks()))
    return out


def add(x, y, out):
    """out = x + y (same shapes), or y a 1-D row added to every row of x."""
    rows, n = x.shape
    ldy = 0 if y.ndim == 1 else y.shape[1]
    native().nn_add((_a(x), n, _a(y), ldy, _a(out), n, n, rows, tasks()))
    return out


def attention(q, ldq: int, kt, v, out, batch: int, length: int, n_heads: int, n_kv: int,
              head_dim: int, pos0: int, tmax: int, fixed15: bool):
    native().nn_attention((
        _a(q), ldq, _a(kt), _a(v), _a(out), batch, length, n_heads, n_kv, head_dim, pos0,
        tmax, int(fixed15), tasks(),
    ))
    return out


ELEMENTWISE = {"expf": 0, "logf": 1, "sin": 2, "cos": 3, "sqrt": 4, "expf_daz": 5}


def elementwise(op: str, x):
    """The arithmetic layer's function `op` over a float32 array (for the tests)."""
    if np.asarray(x).dtype != np.float32:
        raise TypeError(f"mojolearn: elementwise: x must be float32, got {np.asarray(x).dtype}")
    x = np.ascontiguousarray(x)
    out = np.empty_like(x)
    native().nn_elementwise((ELEMENTWISE[op], _a(x), _a(out), x.size))
    return out


def attn_scale_bits(head_dim: int) -> int:
    return native().nn_attn_scale((head_dim,))


def softmax_rows(x, *, log: bool = False):
    """Softmax (M-28) or log_softmax (M-29) over the last axis of a C-contiguous float32
    array."""
    n = x.shape[-1]
    rows = x.size // n if n else 0
    out = np.empty_like(x)
    if rows and n:
        native().nn_softmax((_a(x), _a(out), rows, n, int(log), tasks()))
    return out


def sample_rows(logits, r):
    """M-32: one sampled token per row of a C-contiguous float32 (rows, n) array, n >= 1;
    r the float64 draw of each row. Returns int64 token ids."""
    rows, n = logits.shape
    out = np.empty(rows, dtype=np.int64)
    if rows:
        native().nn_sample_rows((_a(logits), rows, n, _a(r), _a(out)))
    return out


def mean_rows(x):
    """The mean over the last axis (M-30) of a C-contiguous float32 array."""
    n = x.shape[-1]
    rows = x.size // n if n else 0
    out = np.empty(x.shape[:-1], dtype=np.float32)
    if rows and n:
        native().nn_mean((_a(x), _a(out), rows, n, tasks()))
    return out


# ------------------------------------------------------------------ the k-split (6.7, L-8)
def row_absmax(x):
    """The quantizers' absmax of each row of x (rows, k) float32, as float32 (L-3)."""
    m, k = x.shape
    out = np.zeros((m,), dtype=np.float32)
    if m and k:
        native().row_absmax((_a(x), _a(out), m, k, tasks()))
    return out


def quantize8_part(x, absmax):
    """quantize8 of rows that are columns of longer rows whose absmax is given (L-8)."""
    m, k = x.shape
    codes = np.empty((m, k), dtype=np.int8)
    e = np.empty((m,), dtype=np.int32)
    if m:
        native().quantize_int8_part((_a(x), _a(absmax), _a(codes), _a(e), m, k, tasks()))
    return codes, e


def quantize15_part(x, absmax):
    """quantize15 of rows that are columns of longer rows whose absmax is given (L-8)."""
    m, k = x.shape
    hi = np.empty((m, k), dtype=np.int8)
    lo = np.empty((m, k), dtype=np.int8)
    e = np.empty((m,), dtype=np.int32)
    if m:
        native().quantize_int15_part((_a(x), _a(absmax), _a(hi), _a(lo), _a(e), m, k, tasks()))
    return hi, lo, e


def int_sums(xq, wq, m: int, n: int, k: int):
    """The exact int64 sums (m, n) of the int15 code products of xq (hi, lo, exps) and
    wq (hi, lo, exps) over their k columns (L-8)."""
    out = np.empty((m, n), dtype=np.int64)
    if m and n:
        native().int_sums((_a(xq[0]), _a(xq[1]), _a(wq[0]), _a(wq[1]), _a(out), m, n, k, 1,
                           tasks()))
    return out


# ------------------------------------------------------------------ the state-space ops (S-*)
def ssm_norm_lanes(x, w, eps_bits: int, out):
    """S-10 over the rows of x (rows, n): 32 lanes, a pairwise tree, M-4's scaling."""
    rows, n = x.shape
    if rows:
        native().ssm_norm_lanes((_a(x), x.shape[1], _a(w), _a(out), out.shape[1], rows, n,
                                 eps_bits, tasks()))
    return out


def ssm_conv(x, col0: int, channels: int, w, bias, window, out, batch: int, length: int,
             silu: bool):
    """S-13 over columns [col0, col0 + channels) of the rows of x (batch * length, ldx),
    the window (batch, channels, 4) read and advanced in place; SiLU after when silu."""
    if batch and length and channels:
        native().ssm_conv((_a(x) + 4 * col0, x.shape[1], _a(w), _a(bias), _a(window), _a(out),
                           out.shape[1], batch, length, channels, int(silu), tasks()))
    return out


def ssm_softplus(x, col0: int, n: int, bias, out, clamp=None):
    """S-14 / S-19: softplus(add(x[:, col0:col0 + n], bias)), clamped to clamp = (lo
    bits, hi bits) when given."""
    rows = x.shape[0]
    lo, hi = clamp if clamp is not None else (0, 0)
    if rows and n:
        native().ssm_softplus((_a(x) + 4 * col0, x.shape[1], _a(bias), _a(out), out.shape[1],
                               rows, n, int(clamp is not None), lo, hi, tasks()))
    return out


def ssm_neg_exp(a_log):
    """S-15: A = neg(expf(A_log)), float32 of A_log's shape."""
    x = np.ascontiguousarray(a_log)
    out = np.empty_like(x)
    if x.size:
        native().ssm_neg_exp((_a(x), _a(out), x.size))
    return out


def mamba1_scan(u, delta, a, xp, b_off: int, c_off: int, d, xz, z_off: int, h, out,
                batch: int, length: int):
    """S-17 / S-18 up to the gate: out (batch * length, di) = mul(add(y, mul(u, D)),
    silu(z)); h (batch, di, 16) advanced in place. z: columns [z_off, z_off + di) of xz."""
    di = u.shape[1]
    if batch and length:
        native().mamba1_scan((
            _a(u), u.shape[1], _a(delta), delta.shape[1], _a(a), _a(xp), xp.shape[1], b_off,
            c_off, _a(d), _a(xz) + 4 * z_off, xz.shape[1], _a(h), _a(out), out.shape[1], batch,
            length, di, tasks()))
    return out


def mamba2_ssd(xbc, dt, a, d, zx, h, open_x, open_dt, seg, cs, out, batch: int, length: int,
               heads: int, di: int, q0: int):
    """S-19 .. S-28 from the conv output to the gate: out (batch * length, di); z is
    columns [0, di) of zx; the state (h, open rows, their caches) advanced in place."""
    if batch and length:
        native().mamba2_ssd((
            _a(xbc), xbc.shape[1], _a(dt), _a(a), _a(d), _a(zx), zx.shape[1], _a(h),
            _a(open_x), _a(open_dt), _a(seg), _a(cs), _a(out), out.shape[1], batch, length,
            heads, di, q0, tasks()))
    return out

"""The training primitives under fp32_v1 (training-arithmetic-v1, rules T-1 .. T-46):
linear, RMSNorm and embedding forward / backward, cross entropy, gradient clipping and
gradient accumulation, on float32 numpy arrays.

WHAT THEY COMPUTE
    The bits of the published release's primitives (T-4 .. T-28): every sum over
    tokens or rows is fp32.v1's `dot` / `fold` (leaves of L(k), a chain per leaf, the
    balanced tree), so micro-batches split on leaf boundaries reassemble one batch's
    bits; the embedding's gradient is one chain per vocab row in token order.

REFUSALS (T-40 .. T-46), each by name before anything is written
    A non-float32 array is a TypeError, never a cast; a NaN or inf in an input is a
    ValueError with its flat index; float or bool ids are a TypeError; ids and targets
    outside their range are a ValueError (never clamped).

Python only checks arguments and hands addresses to the kernels (kernels.py); all
arithmetic on data runs in Mojo (mojo/train/cpu/).
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from .._table import profiles as _profiles
from . import kernels as K

__all__ = [
    "linear_forward", "linear_backward", "rms_norm_forward", "rms_norm_backward",
    "embedding_forward", "embedding_backward", "cross_entropy", "clip_grad_norm_",
    "accumulate_grads", "aligned_split", "splits_that_work", "bias_backward",
    "chunked_lm_head_loss",
]


# ---------------------------------------------------------------------------- checks
def _f32(x, fn: str, name: str):
    """x as a C-contiguous float32 array (a contiguous copy of a strided one: no dtype
    change), or a TypeError (T-40)."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"mojolearn: {fn}: {name} must be a float32 numpy array, got "
                        f"{type(x).__name__} (T-40: no silent cast; np.asarray(x, np.float32))")
    if x.dtype != np.float32:
        raise TypeError(f"mojolearn: {fn}: {name} has dtype {x.dtype}, not float32 (T-40: "
                        f"never cast silently; convert it yourself with .astype(np.float32))")
    return x if x.flags.c_contiguous else np.ascontiguousarray(x)


def _inplace(x, fn: str, name: str):
    """A float32 array the call writes in place: C-contiguous and writable (T-43)."""
    if not isinstance(x, np.ndarray) or x.dtype != np.float32:
        _f32(x, fn, name)
    if not x.flags.c_contiguous:
        raise ValueError(f"mojolearn: {fn}: {name} is strided (not C-contiguous); it is "
                         f"updated in place, so pass a contiguous array (np.ascontiguousarray)")
    if not x.flags.writeable:
        raise ValueError(f"mojolearn: {fn}: {name} is read-only; it is updated in place, so "
                         f"pass a writable array (a copy)")
    return x


def _finite(x, fn: str, name: str):
    """T-41: a NaN or inf in x is refused with its flat index."""
    i = K.first_nonfinite(x)
    if i >= 0:
        v = x.reshape(-1)[i]
        raise ValueError(f"mojolearn: {fn}: {name} holds a non-finite value ({v}) at flat "
                         f"index {i} (T-41: NaN and inf inputs are refused; nothing was written)")


def _ids(ids, fn: str, name: str, vocab: int):
    """Integer ids as a C-contiguous int64 array, every id in [0, vocab) (T-44, T-46)."""
    if not isinstance(ids, np.ndarray):
        ids = np.asarray(ids)
    if ids.dtype == np.bool_ or not np.issubdtype(ids.dtype, np.integer):
        raise TypeError(f"mojolearn: {fn}: {name} has dtype {ids.dtype}; ids must be integers "
                        f"(T-46: float and bool ids are refused, never truncated)")
    if ids.dtype.kind == "u" and ids.size and int(ids.max()) > np.iinfo(np.int64).max:
        raise ValueError(f"mojolearn: {fn}: {name} holds an id outside [0, {vocab})")
    ids64 = np.ascontiguousarray(ids, dtype=np.int64)
    if ids64.size:
        lo, hi = int(ids64.min()), int(ids64.max())
        if lo < 0 or hi >= vocab:
            bad = int(np.flatnonzero((ids64.reshape(-1) < 0) | (ids64.reshape(-1) >= vocab))[0])
            raise ValueError(f"mojolearn: {fn}: {name} holds the id {int(ids64.reshape(-1)[bad])} at "
                             f"flat index {bad}, outside the vocab range [0, {vocab}) (T-44: ids "
                             f"are never clamped)")
    return ids64


def _eps(eps, fn: str):
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"mojolearn: {fn}: eps must be a real number, got {type(eps).__name__}")
    e = float(eps)
    if not math.isfinite(e) or e < 0:
        raise ValueError(f"mojolearn: {fn}: eps={e!r} must be finite and >= 0 (T-8, T-44)")
    return K.f32_bits(e)


def _training_profile(fn: str):
    """T-45: training runs fp32_v1 only (a fixed15_v1 training default is refused)."""
    p = _profiles.require_training(f"{fn}: numeric_profile")
    if p != "fp32_v1":
        raise NotImplementedError(f"mojolearn: {fn}: training runs the fp32_v1 profile only; "
                                  f"{p} is refused for training (T-45), never replaced")


def _is_pow2(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def _leaf(k: int) -> int:
    return max(128, -(-k // 1024))


# ---------------------------------------------------------------------------- linear
def linear_forward(a, weight):
    """y = a @ weight.T under fp32.v1 (T-4): dot(k = K) per output; a (..., K) keeps its
    leading dims, weight (N, K) as stored (no bias). Returns a new float32 array."""
    fn = "linear_forward"
    a = _f32(a, fn, "a")
    weight = _f32(weight, fn, "weight")
    if a.ndim < 1 or weight.ndim != 2:
        raise ValueError(f"mojolearn: {fn}: a must be (..., K) and weight (N, K); got "
                         f"{a.shape} and {weight.shape}")
    k = a.shape[-1]
    if weight.shape[1] != k:
        raise ValueError(f"mojolearn: {fn}: K mismatch: a has {k} features, weight "
                         f"{weight.shape} has {weight.shape[1]} (T-44)")
    _training_profile(fn)
    _finite(a, fn, "a")
    _finite(weight, fn, "weight")
    n = weight.shape[0]
    m = a.size // k if k else int(np.prod(a.shape[:-1]))
    out = np.zeros(a.shape[:-1] + (n,), dtype=np.float32)
    if k:
        K.gemm(a, weight, out, m, n, k, 0, 1)
    return out


def linear_backward(dc, a, weight):
    """(da, dweight) of y = a @ weight.T: da = dc @ weight with dot(k = N) (T-5), dweight
    = dc^T @ a with dot(k = M), M the rows (tokens) (T-6). dc (..., N) and a (..., K) share
    their leading dims. Returns new float32 arrays da (shape of a) and dweight (N, K)."""
    fn = "linear_backward"
    dc = _f32(dc, fn, "dc")
    a = _f32(a, fn, "a")
    weight = _f32(weight, fn, "weight")
    if weight.ndim != 2 or a.ndim < 1 or dc.ndim < 1:
        raise ValueError(f"mojolearn: {fn}: weight must be (N, K), a (..., K), dc (..., N)")
    n, k = weight.shape
    if a.shape[-1] != k:
        raise ValueError(f"mojolearn: {fn}: K mismatch: a has {a.shape[-1]} features, weight "
                         f"{weight.shape} has {k} (T-44)")
    if dc.shape[-1] != n or dc.shape[:-1] != a.shape[:-1]:
        raise ValueError(f"mojolearn: {fn}: dc {dc.shape} must be a's leading dims "
                         f"{a.shape[:-1]} by N = {n}")
    _training_profile(fn)
    for x, nm in ((dc, "dc"), (a, "a"), (weight, "weight")):
        _finite(x, fn, nm)
    m = int(np.prod(a.shape[:-1]))
    da = np.zeros(a.shape, dtype=np.float32)
    dw = np.zeros((n, k), dtype=np.float32)
    if m and k and n:
        K.gemm(dc, weight, da, m, k, n, 0, 0)
        K.gemm(dc, a, dw, n, k, m, 1, 0)
    return da, dw


def bias_backward(dy):
    """The bias gradient of the release's small trainer (T-7): per output column the chain
    over rows ascending from +0, acc = add(acc, dy[r]) (every operand and step flushed),
    not a fold. dy (..., n), its leading dims flattened to rows (a 1-D dy is one row).
    Returns a new float32 array (n,). The models' q/k/v projection bias (qwen2) uses
    T-56's fold(k = tokens) instead, never this chain."""
    fn = "bias_backward"
    dy = _f32(dy, fn, "dy")
    if dy.ndim < 1:
        raise ValueError(f"mojolearn: {fn}: dy must be (..., n), got a 0-d array")
    _training_profile(fn)
    _finite(dy, fn, "dy")
    n = dy.shape[-1]
    return K.bias_backward(dy.reshape(-1, n))


# ---------------------------------------------------------------------------- RMSNorm
def _rows_of(x, d):
    return x.reshape(-1, d) if x.ndim != 1 else x.reshape(1, d)


def rms_norm_forward(x, weight, eps):
    """M-4 with the caller's eps (finite, >= 0) per row of x (..., d); a 1-D x is one row
    (T-8). Returns a new float32 array of x's shape."""
    fn = "rms_norm_forward"
    x = _f32(x, fn, "x")
    weight = _f32(weight, fn, "weight")
    eb = _eps(eps, fn)
    if x.ndim < 1 or weight.ndim != 1 or weight.shape[0] != x.shape[-1]:
        raise ValueError(f"mojolearn: {fn}: weight {weight.shape} must be (d,) with d = x's "
                         f"last dim ({x.shape})")
    _finite(x, fn, "x")
    _finite(weight, fn, "weight")
    d = x.shape[-1]
    out = np.empty(x.shape, dtype=np.float32)
    if x.size:
        K.rms_norm_forward(_rows_of(x, d), weight, eb, _rows_of(out, d))
    return out


def rms_norm_backward(dy, x, weight, eps):
    """(dx, dweight) of RMSNorm (T-9 .. T-11): per row c = the chain of fma(mul(dy, w), x);
    dx by T-10's two rounded products and one add; dweight = fold(k = rows) per column of
    mul(dy, mul(x, rstd)). Returns new float32 arrays (x's shape, (d,))."""
    fn = "rms_norm_backward"
    dy = _f32(dy, fn, "dy")
    x = _f32(x, fn, "x")
    weight = _f32(weight, fn, "weight")
    eb = _eps(eps, fn)
    if dy.shape != x.shape or x.ndim < 1 or weight.ndim != 1 or weight.shape[0] != x.shape[-1]:
        raise ValueError(f"mojolearn: {fn}: dy {dy.shape} must match x {x.shape} and weight "
                         f"{weight.shape} be (d,)")
    for a, nm in ((dy, "dy"), (x, "x"), (weight, "weight")):
        _finite(a, fn, nm)
    d = x.shape[-1]
    dx = np.zeros(x.shape, dtype=np.float32)
    dw = np.zeros((d,), dtype=np.float32)
    if x.size:
        K.rms_norm_backward(_rows_of(dy, d), _rows_of(x, d), weight, eb, _rows_of(dx, d), dw)
    return dx, dw


# ---------------------------------------------------------------------------- embedding
def embedding_forward(weight, ids):
    """weight[ids] with every value flushed (T-12): weight (V, d), integer ids of any
    shape in [0, V). Returns a new float32 array (*ids.shape, d)."""
    fn = "embedding_forward"
    weight = _f32(weight, fn, "weight")
    if weight.ndim != 2:
        raise ValueError(f"mojolearn: {fn}: weight must be (V, d), got {weight.shape}")
    ids64 = _ids(ids, fn, "ids", weight.shape[0])
    _finite(weight, fn, "weight")
    out = np.empty(ids64.shape + (weight.shape[1],), dtype=np.float32)
    K.gather(weight, ids64.reshape(-1), out.reshape(-1, weight.shape[1]) if out.size else out)
    return out


def embedding_backward(dy, ids, vocab):
    """The embedding's weight gradient (vocab, d) (T-13): per vocab row one chain from +0,
    acc = add(acc, dy[t]) over the positions t with ids[t] = v, t ascending in the
    flattened order; rows that do not occur are +0. dy (*ids.shape, d)."""
    fn = "embedding_backward"
    dy = _f32(dy, fn, "dy")
    if isinstance(vocab, bool) or not isinstance(vocab, numbers.Integral) or vocab < 1:
        raise ValueError(f"mojolearn: {fn}: vocab must be a positive int, got {vocab!r}")
    vocab = int(vocab)
    ids64 = _ids(ids, fn, "ids", vocab)
    if dy.ndim < 1 or dy.shape[:-1] != ids64.shape:
        raise ValueError(f"mojolearn: {fn}: dy {dy.shape} must be ids' shape {ids64.shape} by d")
    _finite(dy, fn, "dy")
    d = dy.shape[-1]
    acc = np.zeros((vocab, d), dtype=np.float32)
    K.embedding_backward_into(dy.reshape(-1, d), ids64.reshape(-1), acc)
    return acc


# ---------------------------------------------------------------------------- cross entropy
_CE_REFUSED = ("weight", "size_average", "reduce")


def cross_entropy(logits, targets, ignore_index=-100, reduction="mean", label_smoothing=0.0,
                  num_items=None, return_grad=False, **refused):
    """Cross entropy of logits (N, V) with integer class targets (N,) (T-14 .. T-18).

    reduction "mean" divides the fold(k = N) of the row losses by the count of rows not
    equal to ignore_index; "sum" by num_items when it is > 0, else by 1; "none" returns
    the (N,) row losses (ignored rows +0). label_smoothing in [0, 1). Returns a float32
    scalar, or (loss, grad) with return_grad (grad (N, V): T-18, ignored rows +0).
    Refused by name: weight=, size_average=, reduce=, soft targets, "none" with
    return_grad, a mean over zero counted rows (T-42)."""
    fn = "cross_entropy"
    for name in refused:
        if name in _CE_REFUSED:
            raise TypeError(f"mojolearn: {fn}: {name}= is not supported (T-42: the published "
                            f"primitive has no {name}; use reduction= and ignore_index=)")
        raise TypeError(f"mojolearn: {fn}: unexpected keyword argument {name!r}")
    logits = _f32(logits, fn, "logits")
    if logits.ndim != 2 or logits.shape[1] < 1:
        raise ValueError(f"mojolearn: {fn}: logits must be (N, V) with V >= 1, got {logits.shape}")
    n, v = logits.shape
    if not isinstance(targets, np.ndarray):
        targets = np.asarray(targets)
    if targets.dtype == np.bool_ or not np.issubdtype(targets.dtype, np.integer):
        raise TypeError(f"mojolearn: {fn}: targets has dtype {targets.dtype}; only integer class "
                        f"indices are supported (T-42: soft targets are refused)")
    if targets.shape != (n,):
        raise ValueError(f"mojolearn: {fn}: targets {targets.shape} must be (N,) = ({n},) class "
                         f"indices (T-42: soft targets are refused)")
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"mojolearn: {fn}: reduction={reduction!r} is not 'mean', 'sum' or 'none'")
    if reduction == "none" and return_grad:
        raise ValueError(f"mojolearn: {fn}: reduction='none' with return_grad=True is refused "
                         f"(T-42): the gradient is defined for 'mean' and 'sum'")
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, numbers.Integral):
        raise TypeError(f"mojolearn: {fn}: ignore_index must be an int, got {ignore_index!r}")
    ignore_index = int(ignore_index)
    if isinstance(label_smoothing, bool) or not isinstance(label_smoothing, numbers.Real):
        raise TypeError(f"mojolearn: {fn}: label_smoothing must be a real number")
    ls = float(label_smoothing)
    sb = K.f32_bits(ls)
    if not (0.0 <= ls < 1.0) or not (0.0 <= float(K.bits_f32(sb)) < 1.0):
        raise ValueError(f"mojolearn: {fn}: label_smoothing={ls!r} must be in [0, 1) (T-15, T-42)")
    if num_items is not None and (isinstance(num_items, bool)
                                  or not isinstance(num_items, numbers.Integral)):
        raise TypeError(f"mojolearn: {fn}: num_items must be an int or None, got {num_items!r}")
    t64 = np.ascontiguousarray(targets, dtype=np.int64)
    keep = t64 != ignore_index
    bad = keep & ((t64 < 0) | (t64 >= v))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"mojolearn: {fn}: target {int(t64[i])} at row {i} is neither "
                         f"ignore_index ({ignore_index}) nor a class in range [0, {v}) (T-42)")
    count = int(keep.sum())
    if reduction == "mean" and count == 0:
        raise ValueError(f"mojolearn: {fn}: a mean over zero counted rows (every target is "
                         f"ignore_index {ignore_index}) is refused (T-42); use reduction='sum'")
    _finite(logits, fn, "logits")
    if reduction == "mean":
        d = np.float32(count)
    elif reduction == "sum":
        d = np.float32(num_items) if num_items is not None and num_items > 0 else np.float32(1)
    else:
        d = np.float32(1)
    db = K.f32_bits(d)
    rows = np.empty((n,), dtype=np.float32)
    grad = np.empty((n, v), dtype=np.float32) if return_grad else None
    K.ce_rows(logits, t64, ignore_index, sb, db, rows, grad)
    if reduction == "none":
        return rows
    total = K.fold_rows(rows.reshape(n, 1))[0] if n else np.float32(0)
    loss = K.bits_f32(K.scalar_div(K.f32_bits(total), db))
    return (loss, grad) if return_grad else loss


# ---------------------------------------------------------------------------- chunked LM head
_LMH_REFUSED = ("ignore_index", "label_smoothing", "reduction", "num_items")  # weight: the head


def chunked_lm_head_loss(h, weight, targets, return_grad=False, **refused):
    """The release's chunked LM-head loss (T-19 .. T-22): the mean cross entropy of the
    logits z = h . weight^T with integer targets, never materialised as linear_forward.

    h (rows, width), weight (V, width) as stored, targets (rows,) integers in [0, V).
    T-19 per row: z[r, v] = the chain over features of fma(h_rf, W_vf, acc) (not dot's
    leaves); m = rowmax; s = sub(z, m); e = expf(s); den = the chain over v = 0 .. V-1 of
    add(den, e_v) (not T-14's fold); row = neg(sub(s_y, logf(den))). T-20: the rows in
    parts of 256 (chains from +0), the parts by the balanced tree, div(total, f32(rows)).
    T-21 (return_grad): dl = div(sub(div(e, den), onehot), f32(rows)); dh[r, f] = the
    chain over v ascending of fma(dl_rv, W_vf, acc); dweight[v, f] = the chain over rows
    ascending of fma(dl_rv, h_rf, acc); every operand and step flushed.

    T-22: this equals cross_entropy(linear_forward(h, weight), targets) while width, V
    and rows are all <= 128 and may differ beyond. Mean only: no ignore_index, no label
    smoothing, no reduction= (refused by name, T-42); V < 2 is refused (T-42).
    Returns the float32 loss, or (loss, dh, dweight) with return_grad."""
    fn = "chunked_lm_head_loss"
    for name in refused:
        if name in _LMH_REFUSED:
            raise TypeError(f"mojolearn: {fn}: {name}= is not supported (T-22, T-42: the chunked "
                            f"head is the mean over every row, with no ignore_index, smoothing, "
                            f"weights or other reduction; use cross_entropy for those)")
        raise TypeError(f"mojolearn: {fn}: unexpected keyword argument {name!r}")
    h = _f32(h, fn, "h")
    weight = _f32(weight, fn, "weight")
    if h.ndim != 2 or weight.ndim != 2:
        raise ValueError(f"mojolearn: {fn}: h must be (rows, width) and weight (V, width); got "
                         f"{h.shape} and {weight.shape}")
    rows, width = h.shape
    v = weight.shape[0]
    if weight.shape[1] != width:
        raise ValueError(f"mojolearn: {fn}: K mismatch: h has {width} features, weight "
                         f"{weight.shape} has {weight.shape[1]} (T-44)")
    if v < 2:
        raise ValueError(f"mojolearn: {fn}: V = {v}: the chunked LM-head loss needs V >= 2 "
                         f"classes (T-22, T-42)")
    if rows < 1:
        raise ValueError(f"mojolearn: {fn}: h has no rows: a mean over zero rows is refused "
                         f"(T-20, T-42)")
    if not isinstance(return_grad, bool):
        raise TypeError(f"mojolearn: {fn}: return_grad must be a bool, got {return_grad!r}")
    if not isinstance(targets, np.ndarray):
        targets = np.asarray(targets)
    if targets.dtype == np.bool_ or not np.issubdtype(targets.dtype, np.integer):
        raise TypeError(f"mojolearn: {fn}: targets has dtype {targets.dtype}; only integer class "
                        f"indices are supported (T-42: soft targets are refused)")
    if targets.shape != (rows,):
        raise ValueError(f"mojolearn: {fn}: targets {targets.shape} must be (rows,) = ({rows},) "
                         f"class indices (T-42: soft targets are refused)")
    if targets.dtype.kind == "u" and int(targets.max()) > np.iinfo(np.int64).max:
        raise ValueError(f"mojolearn: {fn}: targets hold a class outside [0, {v}) (T-42)")
    t64 = np.ascontiguousarray(targets, dtype=np.int64)
    bad = (t64 < 0) | (t64 >= v)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"mojolearn: {fn}: target {int(t64[i])} at row {i} is not a class in "
                         f"range [0, {v}) (T-42: no ignore_index here, never clamped)")
    _training_profile(fn)
    _finite(h, fn, "h")
    _finite(weight, fn, "weight")
    loss, dh, dw = K.lm_head(h, weight, t64, return_grad)
    return (loss, dh, dw) if return_grad else loss


# ---------------------------------------------------------------------------- clipping
def _check_grads(grads, fn: str, writable: bool, name: str = "grads"):
    if isinstance(grads, np.ndarray) or not isinstance(grads, (list, tuple)):
        raise TypeError(f"mojolearn: {fn}: {name} must be a list of float32 arrays")
    out = []
    for j, g in enumerate(grads):
        nm = f"{name}[{j}]"
        if writable:
            out.append(_inplace(g, fn, nm))
        else:
            g = _f32(g, fn, nm)
            if not g.flags.c_contiguous:
                raise ValueError(f"mojolearn: {fn}: {nm} is strided (not C-contiguous)")
            out.append(g)
    return out


def _max_norm_bits(max_norm, fn: str) -> int:
    if isinstance(max_norm, bool) or not isinstance(max_norm, numbers.Real):
        raise TypeError(f"mojolearn: {fn}: max_norm must be a real number, got {max_norm!r}")
    mx = float(max_norm)
    if not (mx > 0):
        raise ValueError(f"mojolearn: {fn}: max_norm={mx!r} must be > 0 (T-43)")
    return K.f32_bits(mx)


def _clip(grads, mb: int, fn: str):
    norms, coef = K.clip(grads, mb)
    if coef == -1:
        raise ValueError(f"mojolearn: {fn}: the total gradient norm is not finite "
                         f"({norms[-1]}): overflow, refused with the gradients untouched (T-41)")
    return norms[-1]


def clip_grad_norm_(grads, max_norm, norm_type=2.0, error_if_nonfinite=True, **refused):
    """Clip a list of float32 gradient arrays in place by their total L2 norm (T-23 ..
    T-25): n_j = sqrt(dot(g_j, g_j)) per tensor, total = sqrt(dot(n, n)), coef =
    max_norm / (total + 1e-6) when < 1, else 1; every gradient becomes mul(coef, ftz(g))
    (also at coef 1). Returns the pre-clip total as a float32 scalar. A non-finite input
    or total is refused with the gradients untouched (T-41)."""
    fn = "clip_grad_norm_"
    for name in refused:
        raise TypeError(f"mojolearn: {fn}: {name}= is not supported (T-43: one L2 clip in "
                        f"fp32.v1's order; torch's foreach / fused paths are not another arithmetic "
                        f"here)" if name in ("foreach", "fused") else
                        f"mojolearn: {fn}: unexpected keyword argument {name!r}")
    if norm_type != 2.0 and norm_type != 2:
        raise ValueError(f"mojolearn: {fn}: norm_type={norm_type!r} is refused: L2 (2.0) only (T-43)")
    if error_if_nonfinite is not True:
        raise ValueError(f"mojolearn: {fn}: error_if_nonfinite={error_if_nonfinite!r} is refused "
                         f"(T-41, T-43): a non-finite total is always an error")
    mb = _max_norm_bits(max_norm, fn)
    grads = _check_grads(grads, fn, True)
    for j, g in enumerate(grads):
        _finite(g, fn, f"grads[{j}]")
    return _clip(grads, mb, fn)


# ---------------------------------------------------------------------------- accumulation
def _count(v, fn: str, name: str) -> None:
    """An int count (a numpy integer too), never a float, bool or str."""
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise TypeError(f"mojolearn: {fn}: {name} must be an int, got {type(v).__name__} ({v!r})")


def aligned_split(tokens: int, a: int) -> bool:
    """T-27 with our stricter condition: A a power of two, L = L(T) divides T, A divides
    P = T / L, L(T / A) = L, and P / A a power of two."""
    _count(tokens, "aligned_split", "tokens")
    _count(a, "aligned_split", "a")
    if not _is_pow2(a) or tokens < 1:
        return False
    L = _leaf(tokens)
    if tokens % L:
        return False
    p = tokens // L
    if p % a or tokens % a:
        return False
    return _leaf(tokens // a) == L and _is_pow2(p // a)


def splits_that_work(tokens: int) -> list:
    """The micro-batch counts A for which aligned_split(tokens, A) holds."""
    _count(tokens, "splits_that_work", "tokens")
    out, a = [], 1
    while a <= max(1, tokens):
        if aligned_split(tokens, a):
            out.append(a)
        a *= 2
    return out


def _check_tokens(tokens, a: int, fn: str):
    if isinstance(tokens, bool) or not isinstance(tokens, numbers.Integral) or tokens < 1:
        raise ValueError(f"mojolearn: {fn}: tokens must be a positive int, got {tokens!r}")
    if not _is_pow2(a):
        raise ValueError(f"mojolearn: {fn}: {a} micro-batches: the count must be a power of two "
                         f"(T-26, T-44)")
    if not aligned_split(int(tokens), a):
        raise ValueError(f"mojolearn: {fn}: {a} micro-batches of {tokens} tokens is not an aligned "
                         f"split (T-27: the leaf L({tokens}) = {_leaf(int(tokens))} must divide the "
                         f"tokens, A must divide the P leaves with P / A a power of two, and each "
                         f"piece keep the leaf); splits that work for {tokens} tokens: A in "
                         f"{splits_that_work(int(tokens))}")


def accumulate_grads(microbatch_grads, tokens):
    """The balanced pairwise tree over A micro-batches' gradients (T-26): microbatch_grads
    a list of A lists of float32 arrays (the same shapes in each), A a power of two and
    an aligned split of `tokens` (T-27). Returns a new list of arrays; A = 1 gives
    ftz(g0)."""
    fn = "accumulate_grads"
    if not isinstance(microbatch_grads, (list, tuple)) or not microbatch_grads:
        raise ValueError(f"mojolearn: {fn}: microbatch_grads must be a non-empty list of lists")
    a = len(microbatch_grads)
    mg = [_check_grads(m, fn, False, f"microbatch_grads[{i}]") for i, m in enumerate(microbatch_grads)]
    _check_tokens(tokens, a, fn)
    J = len(mg[0])
    for i, m in enumerate(mg):
        if len(m) != J:
            raise ValueError(f"mojolearn: {fn}: microbatch_grads[{i}] has {len(m)} arrays, "
                             f"microbatch_grads[0] {J}")
        for j in range(J):
            if m[j].shape != mg[0][j].shape:
                raise ValueError(f"mojolearn: {fn}: microbatch_grads[{i}][{j}] has shape "
                                 f"{m[j].shape}, microbatch_grads[0][{j}] {mg[0][j].shape}")
    for i, m in enumerate(mg):
        for j, g in enumerate(m):
            _finite(g, fn, f"microbatch_grads[{i}][{j}]")
    return [K.tree_sum([m[j] for m in mg]) for j in range(J)]

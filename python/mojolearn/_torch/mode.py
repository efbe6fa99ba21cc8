"""The implementation of ``mojolearn.torch``: what it computes and promises is
that public module's docstring (python/mojolearn/torch.py), which re-exports
this module's public names."""
from __future__ import annotations

import contextlib
import threading
import warnings

import torch as _torch

from .. import linalg as _linalg
from .._ops import gemm as _gemm
from .._ops import operands as _operands
from .._core.loader import cpu_native as _native  # the nn_* entries are the CPU build's
from .._core.threads import tasks as _threads
from .._core.threads import decode_split_floor as _split_floor

__all__ = ["identical", "enable", "disable", "is_enabled", "COVERED", "REFUSED",
           "ELEMENTWISE_COVERED", "calls", "gpu_covered", "numeric_mode"]

COVERED = ("aten::mm", "aten::mm.out", "aten::addmm", "aten::addmm.out", "aten::bmm",
           "aten::bmm.out", "aten::baddbmm", "aten::mv", "aten::dot")
"""The aten products the mode computes on fp32.v1 (float32 CPU tensors; on CUDA too
where ``gpu_covered()``).
"""
REFUSED = ("aten::addmv", "aten::addbmm", "aten::addr",
           "aten::_scaled_dot_product_flash_attention_for_cpu")
"""Float32 aten products without a kernel here: refused by name while the mode is on."""
ELEMENTWISE_COVERED = ("aten::silu", "aten::_softmax (last dim)",
                       "aten::_log_softmax (last dim)", "aten::mean.dim (last dim)",
                       "aten::rms_norm", "aten::scaled_dot_product_attention (causal)")
"""The elementwise and reduction ops the mode runs on the contract's kernels
(float32 CPU tensors; other dimensions and dtypes fall through).
"""

_lock = threading.RLock()  # guards the state below (not read by the kernels)
_lib = None          # the registration: made on the first switch-on, never destroyed
_orig: dict = {}     # (op, dispatch key) -> torch's own kernel
_on = False          # the mode is on: every registered kernel reads this first
_explicit = [False, None]  # enable() in force, and the numeric mode it was given
_blocks: dict = {}   # thread id -> the numeric modes of its open identical() blocks
# the multiply-adds under which a decode-shape product runs as one task while the mode
# is on (see _update and _core/threads.py's decode_split_floor)
DECODE_SPLIT_FLOOR = 1 << 20
_saved: dict = {}    # what switching on changed: the SDP flags, the compiler's stance
_step_hooks: list = []  # torch.optim's global step hooks (_register): made once, never removed
_calls = {"mojolearn": 0, "fallthrough": 0}


def calls() -> dict:
    """How many product calls the mode computed and let fall through (for tests)."""
    return dict(_calls)


_gpu_ok = None  # the GPU build serves this process and drives torch's "cuda" device


def gpu_covered() -> bool:
    """True when float32 products of torch's "cuda" tensors (device 0) run on the GPU
    inside the mode (fp32.v1, or the vendor's sgemm under numeric_mode fast): a GPU build serves this process (``MOJOLEARN_DEVICE``
    auto or gpu) and drives the device torch calls "cuda" (CUDA or ROCm)."""
    global _gpu_ok
    if _gpu_ok is None:
        from .._core import device as _device

        ok = False
        if _torch.cuda.is_available() and _device.get_device() != "cpu":
            mod, api, _ = _device.gpu_status()
            want = "hip" if getattr(_torch.version, "hip", None) else "cuda"
            ok = mod is not None and api == want
        _gpu_ok = ok
    return _gpu_ok


def _ours(*ts) -> bool:
    """float32 strided tensors, all on the CPU, or all on cuda:0 when gpu_covered()."""
    dev = None
    for t in ts:
        if not isinstance(t, _torch.Tensor):
            return False
        if t.dtype != _torch.float32 or t.layout != _torch.strided:
            return False
        if dev is None:
            dev = t.device
        elif t.device != dev:
            return False
    if dev is None or dev.type == "cpu":
        return True
    return dev.type == "cuda" and (dev.index or 0) == 0 and gpu_covered()


def _cpu_only(*ts) -> bool:
    """The elementwise kernels are the CPU's: device tensors stay torch's."""
    return _ours(*ts) and all(t.device.type == "cpu" for t in ts)


def _operand(x):
    """(tensor, transposed): a batch of transposed contiguous matrices is passed as
    its contiguous transpose with the flag (no copy; same bits by rule 6.5)."""
    x = _resolved(x)
    if x.dim() >= 2 and not x.is_contiguous():
        xt = x.transpose(-1, -2)
        if xt.is_contiguous():
            return xt, True
    if x.device.type != "cpu" and not x.is_contiguous():
        # device memory is never copied by mojolearn itself: torch makes the byte copy
        # (e.g. the stride-0 gradient of a sum reaching aten::mm in a backward)
        x = x.contiguous()
    return x, False


def _product(a, b, mode=None):
    """fp32.v1 of a @ b (2-D or batched) under ``mode`` (default: the numeric mode in
    force): a torch tensor where _host_product takes the operands, else a
    mojolearn.Array (linalg.matmul: the same kernel call, the same bits)."""
    a, ta = _operand(a)
    b, tb = _operand(b)
    if ta and tb:  # one flag at a time (rule 7): the other operand is byte-copied
        a, ta = a.transpose(-1, -2), False
    from .._table import modes

    with modes.using(mode or numeric_mode()):
        c = _host_product(a, b, ta, tb)
        if c is not None:
            return c
        return _linalg.matmul(a, b, transpose_a=ta, transpose_b=tb)


def _host_product(a, b, ta, tb):
    """The product of contiguous float32 CPU tensors, 2-D by 2-D or batch by batch (3-D,
    equal batches), none of m, n, k zero, into a fresh torch tensor: the kernel reads
    the tensors' memory where it lies (through linalg.matmul each operand would be
    exported and read through DLPack: about 0.1 ms a call). Anything else: None, for
    linalg.matmul."""
    if a.device.type != "cpu" or b.device.type != "cpu":
        return None
    if not (a.is_contiguous() and b.is_contiguous()):
        return None
    if a.dim() == 2 and b.dim() == 2:
        count = 1
    elif a.dim() == 3 and b.dim() == 3 and a.shape[0] == b.shape[0]:
        count = a.shape[0]
    else:
        return None
    # linalg.matmul's own shape check (the same refusal when the inner dimensions differ)
    m, n, k = _operands.shapes("matmul", tuple(a.shape[-2:]), tuple(b.shape[-2:]), ta, tb)
    if not (m and n and k and count):
        return None   # degenerate shapes: linalg.matmul's
    c = _torch.empty(tuple(a.shape[:-2]) + (m, n), dtype=_torch.float32)
    _gemm.f32_at("matmul", a.data_ptr(), b.data_ptr(), c.data_ptr(), m, n, k, ta, tb, count)
    return c


def _tensor(arr):
    if isinstance(arr, _torch.Tensor):  # allocated by torch already (_host_product, device)
        return arr
    return _torch.from_dlpack(arr)


def _key_of(args, kwargs) -> str:
    for x in list(args) + list(kwargs.values()):
        if isinstance(x, _torch.Tensor) and x.device.type == "cuda":
            return "CUDA"
    return "CPU"


def _resolved(x):
    """x detached, with torch's lazy negation and conjugation bits applied: a tensor
    whose is_neg() (or is_conj()) is True keeps the un-negated values in memory, which
    is what data_ptr() reads (a copy only when a bit is set)."""
    return x.detach().resolve_conj().resolve_neg()


def _dense(x):
    """The contiguous memory holding x's values (see _resolved)."""
    return _resolved(x).contiguous()


def _fall(name, ks, *args, **kwargs):
    _calls["fallthrough"] += 1
    return _orig[(name, _key_of(args, kwargs))].call_boxed(ks, *args, **kwargs)


def _bias_add(c, bias, op):
    """c (an Array (..., m, n), or a torch tensor) += bias, in place: ftz(c + bias) by
    the nn_add kernel (nn_add_resident on the GPU build for device tensors)."""
    shape = tuple(c.shape)
    n = shape[-1]
    size = c.numel() if isinstance(c, _torch.Tensor) else c.size
    rows = size // n if n else 0
    b = _resolved(bias)
    try:
        if b.dim() >= 1 and b.shape[-1] == n and b.stride(-1) == 1 and b.numel() == n:
            y, ldy = b, 0          # one row added to every row
        else:
            y, ldy = b.expand(shape).contiguous(), n  # a byte copy of the broadcast
    except RuntimeError:
        raise ValueError(
            f"mojolearn.torch: {op}: the bias of shape {tuple(bias.shape)} does not broadcast "
            f"to the product's shape {shape}"
        ) from None
    if rows and n:
        if isinstance(c, _torch.Tensor) and c.device.type != "cpu":  # see _product
            from .._core import device as _device

            mod = _device.resident(op, [("out", tuple(int(x) for x in c.__dlpack_device__())),
                                        ("bias", tuple(int(x) for x in y.__dlpack_device__()))])
            mod.nn_add_resident((c.data_ptr(), n, y.data_ptr(), ldy, c.data_ptr(), n, n, rows))
        else:
            at = c.data_ptr() if isinstance(c, _torch.Tensor) else c.address
            _native().nn_add((at, n, y.data_ptr(), ldy, at, n, n, rows, _threads()))
    return c


def _factors(op, beta, alpha):
    if alpha != 1 or beta not in (0, 1) or isinstance(beta, complex) or isinstance(alpha, complex):
        raise ValueError(
            f"mojolearn.torch: {op} with beta={beta!r}, alpha={alpha!r}: under fp32.v1 only "
            "alpha = 1 with beta = 0 or 1 is computed (rule 10.2); scale the operands "
            "yourself, or call it outside mojolearn.torch.identical()"
        )


def _mm(ks, a, b):
    if not _ours(a, b) or a.dim() != 2 or b.dim() != 2:
        return _fall("mm", ks, a, b)
    _calls["mojolearn"] += 1
    return _tensor(_product(a, b))


def _bmm(ks, a, b):
    if not _ours(a, b) or a.dim() != 3 or b.dim() != 3 or a.shape[0] != b.shape[0]:
        return _fall("bmm", ks, a, b)
    _calls["mojolearn"] += 1
    return _tensor(_product(a, b))


def _biased(name, ndim):
    """aten::addmm (ndim 2) / aten::baddbmm (ndim 3): the product, then the bias add
    of rule 10.2 when beta is 1."""
    op = f"aten::{name}"

    def kernel(ks, bias, a, b, *, beta=1, alpha=1):
        if (not _ours(bias, a, b) or a.dim() != ndim or b.dim() != ndim
                or (ndim == 3 and a.shape[0] != b.shape[0])):
            return _fall(name, ks, bias, a, b, beta=beta, alpha=alpha)
        _factors(op, beta, alpha)
        _calls["mojolearn"] += 1
        c = _product(a, b)
        if beta == 1:
            _bias_add(c, bias, op)
        return _tensor(c)
    return kernel


_addmm = _biased("addmm", 2)
_baddbmm = _biased("baddbmm", 3)


def _mv(ks, a, v):
    if not _ours(a, v) or a.dim() != 2 or v.dim() != 1:
        return _fall("mv", ks, a, v)
    _calls["mojolearn"] += 1
    return _tensor(_product(a, v.unsqueeze(1))).reshape(a.shape[0])


def _dot(ks, a, b):
    if not _ours(a, b) or a.dim() != 1 or b.dim() != 1 or a.shape != b.shape:
        return _fall("dot", ks, a, b)
    _calls["mojolearn"] += 1
    return _tensor(_product(a.unsqueeze(0), b.unsqueeze(1))).reshape(())


_ones = [None]
_ones_lock = threading.Lock()


def _ones_for(n: int):
    """A float32 CPU tensor of at least n ones. Shared and grown (never shrunk) under
    a lock; the caller keeps the reference it got while its kernel reads it, so another
    thread growing the buffer never frees memory a kernel is reading."""
    with _ones_lock:
        buf = _ones[0]
        if buf is None or buf.numel() < n:
            buf = _torch.ones(max(n, 1 << 16), dtype=_torch.float32)
            _ones[0] = buf
        return buf


def _silu(ks, x):
    """silu(x) by the models' SiLU kernel (rule M-17: silu_mul with u = 1, and
    mul(s, 1) = s exactly): bits independent of thread count and batch."""
    if not _cpu_only(x) or x.dim() == 0:
        return _fall("silu", ks, x)
    _calls["mojolearn"] += 1
    x = _dense(x)
    out = _torch.empty_like(x)
    n = x.shape[-1]
    rows = x.numel() // n if n else 0
    if rows and n:
        ones = _ones_for(x.numel())
        _native().nn_silu_mul((x.data_ptr(), ones.data_ptr(), n, out.data_ptr(), n, n, rows,
                               _threads()))
    return out


def _last_dim(x, dim) -> bool:
    return x.dim() >= 1 and dim in (-1, x.dim() - 1)


def _softmax_like(name, log):
    def kernel(ks, x, dim, half_to_float):
        if not _cpu_only(x) or half_to_float or not _last_dim(x, dim) or x.numel() == 0:
            return _fall(name, ks, x, dim, half_to_float)
        _calls["mojolearn"] += 1
        x = _dense(x)
        out = _torch.empty_like(x)
        n = x.shape[-1]
        _native().nn_softmax((x.data_ptr(), out.data_ptr(), x.numel() // n, n, int(log),
                              _threads()))
        return out
    return kernel


def _mean_dim(ks, x, dim=None, keepdim=False, *, dtype=None):
    dims = list(dim) if dim is not None else None
    if (not _cpu_only(x) or dtype is not None or dims is None or len(dims) != 1
            or not _last_dim(x, dims[0]) or x.numel() == 0):
        return _fall("mean.dim", ks, x, dim, keepdim, dtype=dtype)
    _calls["mojolearn"] += 1
    x = _dense(x)
    n = x.shape[-1]
    out = _torch.empty(x.shape[:-1], dtype=_torch.float32)
    _native().nn_mean((x.data_ptr(), out.data_ptr(), x.numel() // n, n, _threads()))
    return out.unsqueeze(-1) if keepdim else out


def _rms_norm_covered(x, normalized_shape, weight) -> bool:
    """Float32 CPU input whose last len(normalized_shape) >= 1 dimensions are
    normalized_shape, a float32 CPU weight of that shape (or none), no empty row.
    Anything else goes to torch's composite, which computes or raises as torch does."""
    if not _cpu_only(x) or (weight is not None and not _cpu_only(x, weight)):
        return False
    shape = tuple(int(s) for s in normalized_shape)
    k = len(shape)
    if k == 0 or k > x.dim() or tuple(x.shape[x.dim() - k:]) != shape or x.numel() == 0:
        return False
    return weight is None or tuple(weight.shape) == shape


def _f32_bits(eps) -> int:
    """Rule M-31's eps: the float32 of eps (torch's default 2^-23 when None), read
    flushed (a subnormal eps is the zero of its sign)."""
    e = _torch.finfo(_torch.float32).eps if eps is None else float(eps)
    b = int(_torch.tensor([e], dtype=_torch.float32).view(_torch.int32)[0]) & 0xFFFFFFFF
    return b & 0x80000000 if (b & 0x7FFFFFFF) < 0x00800000 else b


def _rms_norm_compute(x, normalized_shape, weight, eps):
    """M-31: the models' RMSNorm kernel (M-4) over rows of the normalized elements."""
    x = _dense(x)
    d = 1
    for s in normalized_shape:
        d *= int(s)
    if weight is None:          # w_j = 1: mul(1, t) = t exactly
        w = _ones_for(d)
    else:
        w = _dense(weight)
    out = _torch.empty_like(x)
    _native().nn_rmsnorm((x.data_ptr(), d, w.data_ptr(), out.data_ptr(), d, x.numel() // d, d,
                          _f32_bits(eps), _threads()))
    return out


class _RMSNormGrad(_torch.autograd.Function):
    """Forward by M-31; backward is torch's: the gradient of torch's own composite
    (pow, mean, add, rsqrt, mul), recomputed from the saved inputs (with
    create_graph, on the inputs themselves, so higher derivatives are torch's too)."""

    @staticmethod
    def forward(ctx, x, weight, normalized_shape, eps, ks):
        ctx.save_for_backward(x, weight)
        ctx.args = (list(normalized_shape), eps, ks)
        return _rms_norm_compute(x, normalized_shape, weight, eps)

    @staticmethod
    def backward(ctx, g):
        x, weight = ctx.saved_tensors
        shape, eps, ks = ctx.args
        need = ctx.needs_input_grad[:2]
        create = _torch.is_grad_enabled()
        with _torch.enable_grad():
            ins = [x, weight]
            if not create:
                ins = [None if t is None else t.detach().requires_grad_(n)
                       for t, n in zip(ins, need)]
            y = _orig[("rms_norm", "CPU")].call_boxed(ks, ins[0], shape, ins[1], eps)
            wanted = [t for t, n in zip(ins, need) if n and t is not None]
            got = iter(_torch.autograd.grad(y, wanted, g, create_graph=create)
                       if wanted else ())
        return tuple(next(got) if n and t is not None else None
                     for t, n in zip(ins, need)) + (None, None, None)


def _rms_norm(ks, x, normalized_shape, weight=None, eps=None):
    """aten::rms_norm (torch.nn.functional.rms_norm, torch.nn.RMSNorm) by rule M-31.
    Registered at CPU and AutogradCPU: torch's kernel is a composite that would
    otherwise be decomposed before any CPU kernel is reached."""
    if not _rms_norm_covered(x, normalized_shape, weight):
        return _fall("rms_norm", ks, x, normalized_shape, weight, eps)
    _calls["mojolearn"] += 1
    if _torch.is_grad_enabled() and (x.requires_grad
                                     or (weight is not None and weight.requires_grad)):
        return _RMSNormGrad.apply(x, weight, normalized_shape, eps, ks)
    return _rms_norm_compute(x, normalized_shape, weight, eps)


def _sdpa_fused(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa):
    """The (pos0, ...) of the models' attention kernel (M-6, M-11..M-15) when this
    sdpa call is one it computes, else None (the call takes torch's math path, whose
    products and softmax are the mode's): float32 CPU 4-D (batch, heads, length,
    head_dim) tensors, no mask tensor, no dropout, under numeric mode identical, the
    scale M-6's (the float32 of 1/sqrt(head_dim) equal to div(1, sqrt(head_dim))),
    and a causal pattern the kernel's mask is: ``is_causal`` with as many queries as
    keys (pos0 = 0), or one query over all the keys (decode, pos0 = keys - 1)."""
    if not _cpu_only(q, k, v) or attn_mask is not None or dropout_p != 0.0:
        return None
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4 or numeric_mode() != "identical":
        return None
    b, h, length, hd = q.shape
    bk, hk, nkeys, hdk = k.shape
    if tuple(v.shape) != (bk, hk, nkeys, hd) or bk != b or hdk != hd or hd == 0 or hd > 1024:
        return None
    if length == 0 or nkeys == 0 or b == 0 or hk == 0 or h % hk or (h != hk and not enable_gqa):
        return None
    if is_causal and length == nkeys:
        pos0 = 0
    elif not is_causal and length == 1:
        pos0 = nkeys - 1
    else:
        return None
    if scale is not None and _f32_bits(scale) != _native().nn_attn_scale((hd,)):
        return None
    return pos0


def _sdpa_compute(q, k, v, pos0):
    """out (batch, heads, length, head_dim), a transposed view of (batch, length, heads *
    head_dim) memory, by the models' attention kernel. q is read in place when it lies
    as (batch, length, heads, head_dim) rows (transformers' layout), else copied so;
    the keys are copied transposed (batch, kv_heads, head_dim, keys) and the values
    contiguous: byte copies."""
    b, h, length, hd = q.shape
    hk, nkeys = k.shape[1], k.shape[2]
    q = _resolved(q)
    qs = q.stride()
    # the kernel reads head j of query i of sequence s at (s * length + i) * ldq + j * hd
    ldq = qs[0] if length == 1 else qs[2]
    if not (qs[3] == 1 and qs[1] == hd and (b == 1 or qs[0] == length * ldq)
            and ldq >= h * hd):
        q, ldq = q.transpose(1, 2).contiguous(), h * hd
    kt = _resolved(k).transpose(2, 3).contiguous()
    vc = _dense(v)
    out = _torch.empty((b, length, h * hd), dtype=_torch.float32)
    _native().nn_attention((q.data_ptr(), ldq, kt.data_ptr(), vc.data_ptr(), out.data_ptr(),
                            b, length, h, hk, hd, pos0, nkeys, 0, _threads()))
    return out.view(b, length, h, hd).transpose(1, 2)


class _SdpaGrad(_torch.autograd.Function):
    """The fused causal attention (pos0 = 0) with the training contract's backward
    (T-47 .. T-51 of contracts/ops/IDENTICAL_TRAIN_CONTRACT.md, the trainer's): the
    weights P recomputed by the forward's functions (T-47); per (batch row, key/value
    head), its query heads stacked head after head (rows r * L + i): dP = dO V^T (T-48),
    dS = the softmax backward times the scale (T-49), dQ = dS K (T-50), dK = dS^T Q
    and dV = P^T dO (T-51), every product fp32.v1 under numeric mode identical
    wherever backward() is called."""

    @staticmethod
    def forward(ctx, q, k, v):
        ctx.save_for_backward(q, k, v)
        return _sdpa_compute(q, k, v, 0)

    @staticmethod
    def backward(ctx, g):
        q, k, v = ctx.saved_tensors
        b, h, length, hd = q.shape
        hk = k.shape[1]
        rep = h // hk
        n = rep * length
        qm = _resolved(q).transpose(1, 2).contiguous()       # (b, length, h, hd)
        kt = _resolved(k).transpose(2, 3).contiguous()       # (b, hk, hd, length)
        p = _torch.empty((b, h, length, length), dtype=_torch.float32)
        _native().train_attn_probs((qm.data_ptr(), h * hd, kt.data_ptr(), p.data_ptr(), b,
                                    length, h, hk, hd, _threads()))
        qs = _resolved(q).contiguous().view(b * hk, n, hd)  # heads of a group stacked
        do = _dense(g).view(b * hk, n, hd)
        vv = _dense(v).view(b * hk, length, hd)
        kk = _dense(k).view(b * hk, length, hd)
        ps = p.view(b * hk, n, length)
        dp = _tensor(_product(do, vv.transpose(1, 2), "identical"))          # T-48
        ds = _torch.empty_like(dp)
        _native().train_softmax_bwd((p.data_ptr(), dp.data_ptr(), ds.data_ptr(),
                                     b * h * length, length,
                                     _native().nn_attn_scale((hd,)), _threads()))  # T-49
        dq = _tensor(_product(ds, kk, "identical"))                            # T-50
        dk = _tensor(_product(ds.transpose(1, 2), qs, "identical"))            # T-51
        dv = _tensor(_product(ps.transpose(1, 2), do, "identical"))
        return (dq.view(b, h, length, hd), dk.view(b, hk, length, hd),
                dv.view(b, hk, length, hd))


def _sdpa(ks, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *,
          scale=None, enable_gqa=False):
    """aten::scaled_dot_product_attention: the models' fused causal attention kernel
    (M-6, M-11..M-15: fp32.v1 scores, M-6's scale, the mask, the serial softmax, P.V
    chains) where ``_sdpa_fused`` says it applies; with a gradient wanted (a causal
    prefill, pos0 = 0) its backward is the training contract's (``_SdpaGrad``).
    Anything else takes torch's math path (products bmm, softmax M-28: the mode's
    kernels). Registered at CPU and AutogradCPU (torch's is a composite)."""
    pos0 = _sdpa_fused(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    grad = _torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
    if pos0 is None or (grad and pos0 != 0):
        return _torch.ops.aten._scaled_dot_product_attention_math(
            query, key, value, attn_mask, dropout_p, is_causal, None, scale=scale,
            enable_gqa=enable_gqa)[0]
    _calls["mojolearn"] += 1
    if grad:
        return _SdpaGrad.apply(query, key, value)
    return _sdpa_compute(query, key, value, pos0)


def _out_variant(name, compute):
    def kernel(ks, *args, out, **kwargs):
        if not _ours(out, *[x for x in args if isinstance(x, _torch.Tensor)]):
            return _fall(name, ks, *args, out=out, **kwargs)
        r = compute(ks, *args, **kwargs)   # a fresh result, so out may alias an input
        if out.shape != r.shape:
            out.resize_(r.shape)
        out.copy_(r)                      # float32 to float32: a byte copy
        return out
    return kernel


def _refuse(name):
    def kernel(ks, *args, **kwargs):
        ts = [x for x in args if isinstance(x, _torch.Tensor)]
        if not any(t.dtype == _torch.float32 for t in ts):
            return _fall(name, ks, *args, **kwargs)
        raise ValueError(
            f"mojolearn.torch: aten::{name} on float32 has no fp32.v1 kernel in this "
            "version, and the mode never computes a product in another arithmetic; "
            + ("use attn_implementation='eager' (or sdpa's math path) for the model"
               if "attention" in name else
               "write it with mm/bmm/addmm, or call it outside mojolearn.torch.identical()")
        )
    return kernel


# ops whose torch kernel is a CompositeImplicitAutograd composite: also registered at
# AutogradCPU, where torch would otherwise decompose them before reaching a CPU kernel
_AUTOGRAD_TOO = ("rms_norm", "scaled_dot_product_attention")

_KERNELS = {
    "mm": _mm,
    "mm.out": _out_variant("mm.out", _mm),
    "bmm": _bmm,
    "bmm.out": _out_variant("bmm.out", _bmm),
    "addmm": _addmm,
    "addmm.out": _out_variant("addmm.out", _addmm),
    "baddbmm": _baddbmm,
    "mv": _mv,
    "dot": _dot,
    "silu": _silu,
    "_softmax": _softmax_like("_softmax", False),
    "_log_softmax": _softmax_like("_log_softmax", True),
    "mean.dim": _mean_dim,
    "rms_norm": _rms_norm,
    "scaled_dot_product_attention": _sdpa,
    "addmv": _refuse("addmv"),
    "addbmm": _refuse("addbmm"),
    "addr": _refuse("addr"),
    "_scaled_dot_product_flash_attention_for_cpu":
        _refuse("_scaled_dot_product_flash_attention_for_cpu"),
}


_GPU_KERNELS = ("mm", "mm.out", "bmm", "bmm.out", "addmm", "addmm.out", "baddbmm", "mv", "dot",
                "addmv", "addbmm", "addr")  # registered for CUDA when gpu_covered()
_SDP = ("flash", "mem_efficient", "cudnn")


def _sdp_state():
    b = _torch.backends.cuda
    return {k: getattr(b, f"{k}_sdp_enabled")() for k in _SDP if hasattr(b, f"{k}_sdp_enabled")}


def _sdp_set(state):
    b = _torch.backends.cuda
    for k, v in state.items():
        getattr(b, f"enable_{k}_sdp")(v)


_mode = [None]  # the numeric mode in force (None: the calling thread's process mode per call)


def is_enabled() -> bool:
    """True while the mode is on: an ``identical()`` block is open in some thread, or
    ``enable()`` was called and not ``disable()``d."""
    return _on


def numeric_mode() -> str:
    """The numeric mode the products run under now: while ``identical()`` blocks are
    open, theirs (one for every open block, see ``identical``); else the one ``enable``
    was given; else the process mode (``mojolearn.numeric_mode()``) at the time of each
    call."""
    from .._table import modes

    return _mode[0] or modes.numeric_mode()


def _gated(name, key, kernel):
    """What is registered for (op, dispatch key): torch's own kernel while the mode is
    off (one check of a flag: the registration stays for the rest of the process), the
    mode's kernel while it is on."""
    own = (name, key)

    def gated(ks, *args, **kwargs):
        if not _on:
            return _orig[own].call_boxed(ks, *args, **kwargs)
        return kernel(ks, *args, **kwargs)
    return gated


def _register():
    """Register the kernels once (torch.library), for the rest of the process: taking a
    registration out while other threads dispatch to it is not safe in torch, so it is
    never taken out; off, every kernel calls torch's own."""
    global _lib
    if _lib is not None:
        return
    keys = [("CPU", tuple(_KERNELS))]
    if gpu_covered():
        keys.append(("CUDA", _GPU_KERNELS))
    for key, names in keys:
        for name in names:
            if (name, key) not in _orig:
                _orig[(name, key)] = _torch.library.get_kernel(f"aten::{name}", key)
    lib = _torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for key, names in keys:
            for name in names:
                lib.impl(name, _gated(name, key, _KERNELS[name]), key, with_keyset=True)
        for name in _AUTOGRAD_TOO:   # torch's kernel there is the CPU one's composite
            lib.impl(name, _gated(name, "CPU", _KERNELS[name]), "AutogradCPU",
                     with_keyset=True)
    _lib = lib
    from torch.optim.optimizer import (register_optimizer_step_post_hook,
                                       register_optimizer_step_pre_hook)

    _step_hooks.append(register_optimizer_step_pre_hook(_step_threads_on))
    _step_hooks.append(register_optimizer_step_post_hook(_step_threads_off))


def _step_threads_on(opt, args, kwargs):
    """Before any torch.optim step while the mode is on: torch's intra-op count found
    when the mode went on. A step is torch's elementwise ops alone (no product the mode
    computes); on one thread AdamW's step on SmolLM2-135M took 1.6-1.8x as long. A
    count changed while the mode was on is left alone."""
    with _lock:
        t = _saved.get("threads")
        if _on and t and (_torch.get_num_threads() == 1 or _saved.get("in_step")):
            _torch.set_num_threads(t)
            _saved["in_step"] = True   # a step that raised is caught up with by the next


def _step_threads_off(opt, args, kwargs):
    """After the step: torch's ops back to one thread while the mode is on (_update)."""
    with _lock:
        if _saved.pop("in_step", False) and _on:
            _torch.set_num_threads(1)


def _force_eager():
    """Set torch.compile's stance to force_eager (compiled functions run eagerly, so
    every op reaches the mode's kernels); returns what restores the stance found."""
    set_stance = getattr(getattr(_torch, "compiler", None), "set_stance", None)
    if set_stance is None:
        raise RuntimeError(
            f"mojolearn: mojolearn.torch needs torch.compiler.set_stance (torch 2.6 or "
            f"later) to run torch.compile'd code eagerly while the mode is on; this torch "
            f"is {_torch.__version__}: upgrade torch to use the mode")
    refusal = ("mojolearn: mojolearn.torch can not be switched on inside a function that "
               "torch.compile traces or runs (torch does not let the compiler's stance "
               "change there); enter mojolearn.torch.identical() around the call of the "
               "compiled function")
    if _torch.compiler.is_compiling():
        raise RuntimeError(refusal)
    try:
        return set_stance("force_eager")
    except RuntimeError:
        raise RuntimeError(refusal) from None


def _update():
    """Bring the process-wide state in line with the open blocks and enable(): the
    numeric mode in force, and the switch (registering on first use; saving the SDP
    flags and the compiler's stance when the mode goes on, restoring them when it goes
    off; torch's intra-op thread count set to 1 while on, except during a torch.optim
    step (_step_threads_on), the count found restored when it goes off unless it was
    changed meanwhile). Called with _lock held; raises before
    changing anything when the mode can not go on."""
    global _on
    on = bool(_blocks) or _explicit[0]
    if on and not _on:
        stance = _force_eager()
        try:
            _register()
            flags = _sdp_state()
            # sdpa's other calls then take its math path (bmm): on the CPU the flash
            # switch decides, on a GPU the memory-efficient and cuDNN kernels too
            _sdp_set({k: False for k in flags if k == "flash" or gpu_covered()})
        except BaseException:
            stance.__exit__(None, None, None)
            raise
        # torch's own ops on one thread: its intra-op workers spin for a while after
        # each parallel region, on the cores the mode's kernels then need (a prefill of
        # SmolLM2-135M on 2 cores ran 1.2-1.4x slower with them spinning)
        threads = _torch.get_num_threads()
        _torch.set_num_threads(1)
        # torch's ops between the products let the kernels' workers fall asleep: the
        # small decode-shape products run as one task instead of waking them
        # (_core/threads.py, decode_split_floor)
        floor = _split_floor(DECODE_SPLIT_FLOOR)
        _saved.update(flags=flags, stance=stance, threads=threads, floor=floor)
    # one thread's blocks: its innermost; several threads': all the same mode (_admit)
    _mode[0] = next(iter(_blocks.values()))[-1] if _blocks else _explicit[1]
    if _on and not on:
        _on = False
        _sdp_set(_saved.pop("flags"))
        _saved.pop("stance").__exit__(None, None, None)
        threads = _saved.pop("threads")
        in_step = _saved.pop("in_step", False)  # a step that raised: its count is ours
        if _torch.get_num_threads() == 1 or in_step:   # unless changed while the mode was on
            _torch.set_num_threads(threads)
        floor = _saved.pop("floor")
        if _split_floor() == DECODE_SPLIT_FLOOR:  # likewise
            _split_floor(floor)
    _on = on


def _held() -> list:
    """The numeric modes of every open block (sorted, once each)."""
    return sorted({m for stack in _blocks.values() for m in stack})


def _admit(me, mode, asked) -> None:
    """Refuse a block of thread ``me`` under ``mode`` that would change the mode of
    other threads' open blocks (now, or when a nested block closes)."""
    others = [s for tid, s in _blocks.items() if tid != me]
    if not others or _held() == [mode]:
        return
    now = _mode[0]
    later = [m for m in _held() if m != now]
    call = "mojolearn.torch.identical(" + ("" if asked is None else f"numeric_mode={asked!r}") + ")"
    why = "" if asked is not None else " (the mode in force in this thread at entry)"
    raise RuntimeError(
        f"mojolearn: {call} asks for numeric mode {mode!r}{why} while blocks of other "
        f"threads are open under numeric mode {now!r}"
        + (f" (and {', '.join(map(repr, later))} once nested blocks close)" if later else "")
        + "; the torch mode is one state for the whole process, so this block would "
        "change the arithmetic of theirs. Run every concurrent block under the same "
        "numeric_mode, or enter this one after theirs have closed")


def enable(numeric_mode=None) -> None:
    """Switch the mode on for the whole process (every thread) until ``disable()``.
    ``numeric_mode``: the promise the products run under (``identical`` by default
    through the process mode; ``deterministic`` / ``fast`` run the looser fixed orders
    of ``mojolearn.modes``); checked at once. While ``identical()`` blocks are open
    their numeric mode holds: a different ``numeric_mode`` is refused by name. The
    first switch-on registers the kernels for the rest of the process."""
    from .._table import modes

    asked = None if numeric_mode is None else modes.resolve(numeric_mode)
    with _lock:
        if asked is not None and _blocks and _held() != [asked]:
            raise RuntimeError(
                f"mojolearn: mojolearn.torch.enable(numeric_mode={asked!r}) while "
                f"identical() blocks are open under numeric mode "
                f"{', '.join(map(repr, _held()))}: it would change their arithmetic. Call "
                "it once they have closed, or give the blocks the numeric_mode")
        old = list(_explicit)
        _explicit[0] = True
        if asked is not None:
            _explicit[1] = asked
        try:
            _update()
        except BaseException:
            _explicit[:] = old
            raise


def disable() -> None:
    """End what ``enable()`` switched on. The mode stays on while ``identical()``
    blocks are open (this thread's or other threads': ``disable()`` never turns off a
    block), and goes off when the last closes. Off, torch's own kernels compute: the
    registered kernels stay, each calling torch's after one check."""
    with _lock:
        _explicit[:] = [False, None]
        _update()


@contextlib.contextmanager
def identical(numeric_mode=None):
    """``with mojolearn.torch.identical():`` every float32 CPU product inside runs
    fp32.v1, including the products of a ``backward()`` called inside. The mode is one
    state for the process: on while any thread has a block open (or ``enable()`` is in
    force), and a block's products run under its promise whatever other threads do.
    ``numeric_mode`` (checked at once) runs the products under that promise instead
    (see ``enable``); naming none, a block runs under the mode in force at its entry:
    its enclosing block's in this thread, else ``enable()``'s, else this thread's
    ``mojolearn.numeric_mode()``. Nests in a thread (a nested block may change the
    numeric mode while no other thread has a block open, and restores it at exit). A
    block whose numeric mode differs from that of other threads' open blocks is refused
    by name (RuntimeError)."""
    from .._table import modes

    asked = None if numeric_mode is None else modes.resolve(numeric_mode)
    me = threading.get_ident()   # the thread that entered: its block ends at exit
    with _lock:
        mine = _blocks.get(me)
        mode = asked or (mine[-1] if mine else (_explicit[1] or modes.numeric_mode()))
        _admit(me, mode, asked)
        _blocks.setdefault(me, []).append(mode)
        try:
            _update()
        except BaseException:
            _close(me)
            raise
    try:
        yield
    finally:
        with _lock:
            _close(me)
            _update()


def _close(me) -> None:
    stack = _blocks[me]
    stack.pop()
    if not stack:
        del _blocks[me]

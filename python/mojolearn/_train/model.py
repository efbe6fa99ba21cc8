"""The forward and backward of a transformer CausalLM for training (rules T-47 .. T-62 of
contracts/ops/IDENTICAL_TRAIN_CONTRACT.md; the forward is M-1 .. M-18, qwen3's M-33 and
phi3's M-34 with the same kernels the inference model calls, so the loss is the
inference logits' loss, bit for bit).

The parameters are float32 arrays by checkpoint name. q/k/v and gate/up are views of
one stacked array per layer (row blocks), as their gradients are: one product gives
the stacked matrix's gradient (each output element its own dot over the tokens, so
the bits of the separate products) and one product takes the gradient back through
all of them (T-54). Every product is fp32.v1; every sum over tokens is a dot / fold
over the call's tokens, so micro-batches split on leaf boundaries reassemble by the
tree (T-59); qwen3's per-head norm weights join each token's heads first, one term a
token, then fold over the tokens (T-62). This module checks nothing the trainer has not checked: it is handed
int64 ids of the right range and float32 parameters.
"""
from __future__ import annotations

import contextvars
import sys
import threading

import numpy as np

from ..models._exec import kernels as K
from ..models._exec.kernels import _a, native
from .._core.threads import gemm_tasks, tasks
from .._ops import calls as _calls
from . import kernels as TK

IGNORE = -100
TRAINED_TYPES = ("llama", "mistral", "qwen2", "qwen3", "phi3")
QK_NORMS = ("self_attn.q_norm.weight", "self_attn.k_norm.weight")


def _mm(a, b, out, m, n, k, ta=0, tb=0):
    """out (m, n) = op(a) @ op(b) under fp32.v1 (op: transposed when the flag is set; a
    stored (m, k) or (k, m), b (k, n) or (n, k)), C-contiguous float32 arrays."""
    if m == 0 or n == 0:
        return out
    if k == 0:
        out[...] = 0
        return out
    wa, wn = _calls.workspace()
    need = native().gemm_f32((
        _a(a), _a(b), _a(out), m, n, k, int(ta), int(tb), 0, 0, 0, gemm_tasks("fp32", m, n, k),
        _calls.sabotage_arg(), wa, wn,
    ))
    if need > wn:
        _calls.workspace_fit(need)
        native().gemm_f32((
            _a(a), _a(b), _a(out), m, n, k, int(ta), int(tb), 0, 0, 0,
            gemm_tasks("fp32", m, n, k), _calls.sabotage_arg(), *_calls.workspace(),
        ))
    return out


class BufferPool:
    """The float32 arrays one loss_and_grads call takes (activations, their gradients,
    logits), kept for the next call: release() makes the last call's arrays free to take
    again, take(shape) gives one of that shape the call took and has dropped (no
    reference left but the pool's), else a free one, else a new one: so the pool holds
    about the most the call holds at once, as fresh arrays would. Fresh arrays every
    step cost the kernels page faults on every page they first write (SmolLM2-135M, 256
    tokens: about 105,000 a step). Arrays a call did not take again are dropped at the
    next release, so the pool holds one call's arrays. A call that finds the pool in use
    (another thread's call on the same trainer) runs on fresh arrays instead."""

    def __init__(self):
        self._free, self._used = {}, {}
        self.busy = threading.Lock()

    def release(self):
        self._free, self._used = self._used, {}

    def take(self, shape):
        used = self._used.setdefault(shape, [])
        for i in range(len(used)):
            # an array this call took and no longer holds (the list's reference and the
            # argument's are the only ones: no name, no view, no saved activation)
            if sys.getrefcount(used[i]) == 2:
                return used[i]
        free = self._free.get(shape)
        a = free.pop() if free else np.empty(shape, dtype=np.float32)
        used.append(a)
        return a


_POOL = contextvars.ContextVar("mojolearn_train_pool", default=None)


def _empty(*shape):
    """A float32 array of this shape: from the running call's BufferPool when it has one
    (never an array taken earlier in the same call), else a new one."""
    pool = _POOL.get()
    if pool is None:
        return np.empty(shape, dtype=np.float32)
    return pool.take(shape)


def layer_names(cfg, i: int) -> list:
    """The checkpoint names of layer i's parameters, in the trainer's order."""
    p = f"model.layers.{i}."
    if cfg.model_type == "phi3":  # the checkpoint's stacked q/k/v and gate/up (M-34)
        return [p + "input_layernorm.weight", p + "self_attn.qkv_proj.weight",
                p + "self_attn.o_proj.weight", p + "post_attention_layernorm.weight",
                p + "mlp.gate_up_proj.weight", p + "mlp.down_proj.weight"]
    names = [p + "input_layernorm.weight"]
    for w in ("q", "k", "v"):
        names.append(p + f"self_attn.{w}_proj.weight")
    if cfg.qkv_bias:
        for w in ("q", "k", "v"):
            names.append(p + f"self_attn.{w}_proj.bias")
    if cfg.qk_norm:  # qwen3's per-head norms (M-33, T-62)
        names += [p + n for n in QK_NORMS]
    names += [p + "self_attn.o_proj.weight", p + "post_attention_layernorm.weight",
              p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight", p + "mlp.down_proj.weight"]
    return names


def param_names(cfg) -> list:
    """Every trained parameter's checkpoint name, in the order the optimizer and the
    saved file hold them: the embedding, the layers, the final norm, the head (untied)."""
    names = ["model.embed_tokens.weight"]
    for i in range(cfg.num_hidden_layers):
        names += layer_names(cfg, i)
    names.append("model.norm.weight")
    if not cfg.tie_word_embeddings:
        names.append("lm_head.weight")
    return names


def _own_arrays(cfg) -> tuple:
    """A layer's parameters held as arrays of their own (not views of a stacked one)."""
    own = ("input_layernorm.weight", "post_attention_layernorm.weight",
           "self_attn.o_proj.weight", "mlp.down_proj.weight")
    return own + QK_NORMS if cfg.qk_norm else own


class Params:
    """The float32 parameters of one model by checkpoint name, q/k/v and gate/up (and
    qwen2's q/k/v biases) views of one stacked array a layer; ``grads_like()`` makes
    gradient buffers of the same layout."""

    def __init__(self, cfg, weights: dict):
        self.cfg = cfg
        self.arrays = {}
        self.stacked = []  # per layer: (qkv, gu, bias or None)
        nq, nk = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
        for name in ("model.embed_tokens.weight", "model.norm.weight"):
            self.arrays[name] = np.array(weights[name], dtype=np.float32, order="C", copy=True)
        if not cfg.tie_word_embeddings:
            self.arrays["lm_head.weight"] = np.array(weights["lm_head.weight"], dtype=np.float32,
                                                     order="C", copy=True)
        for i in range(cfg.num_hidden_layers):
            p = f"model.layers.{i}."
            qkv = np.concatenate([weights[p + f"self_attn.{w}_proj.weight"] for w in "qkv"], axis=0)
            gu = np.concatenate([weights[p + "mlp.gate_proj.weight"],
                                 weights[p + "mlp.up_proj.weight"]], axis=0)
            qkv, gu = np.ascontiguousarray(qkv, np.float32), np.ascontiguousarray(gu, np.float32)
            bias = None
            if cfg.qkv_bias:
                bias = np.ascontiguousarray(np.concatenate(
                    [weights[p + f"self_attn.{w}_proj.bias"] for w in "qkv"]), np.float32)
            self._views(i, qkv, gu, bias, nq, nk)
            for n in _own_arrays(cfg):
                self.arrays[p + n] = np.array(weights[p + n], dtype=np.float32, order="C", copy=True)
            self.stacked.append((qkv, gu, bias))
        self.names = param_names(cfg)

    def _views(self, i, qkv, gu, bias, nq, nk):
        p = f"model.layers.{i}."
        ff = gu.shape[0] // 2
        if self.cfg.model_type == "phi3":
            self.arrays[p + "self_attn.qkv_proj.weight"] = qkv
            self.arrays[p + "mlp.gate_up_proj.weight"] = gu
            return
        self.arrays[p + "self_attn.q_proj.weight"] = qkv[:nq]
        self.arrays[p + "self_attn.k_proj.weight"] = qkv[nq:nq + nk]
        self.arrays[p + "self_attn.v_proj.weight"] = qkv[nq + nk:]
        self.arrays[p + "mlp.gate_proj.weight"] = gu[:ff]
        self.arrays[p + "mlp.up_proj.weight"] = gu[ff:]
        if bias is not None:
            self.arrays[p + "self_attn.q_proj.bias"] = bias[:nq]
            self.arrays[p + "self_attn.k_proj.bias"] = bias[nq:nq + nk]
            self.arrays[p + "self_attn.v_proj.bias"] = bias[nq + nk:]

    def grads_like(self):
        """Zeroed gradient buffers: (dict by name, stacked per layer) in this layout."""
        g = Params.__new__(Params)
        g.cfg, g.names, g.arrays, g.stacked = self.cfg, self.names, {}, []
        cfg = self.cfg
        nq, nk = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
        for name in ("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"):
            if name in self.arrays:
                g.arrays[name] = np.zeros_like(self.arrays[name])
        for i, (qkv, gu, bias) in enumerate(self.stacked):
            q2, g2 = np.zeros_like(qkv), np.zeros_like(gu)
            b2 = None if bias is None else np.zeros_like(bias)
            g._views(i, q2, g2, b2, nq, nk)
            p = f"model.layers.{i}."
            for n in _own_arrays(cfg):
                g.arrays[p + n] = np.zeros_like(self.arrays[p + n])
            g.stacked.append((q2, g2, b2))
        return g

    def list(self) -> list:
        return [self.arrays[n] for n in self.names]


class _LayerSaved:
    __slots__ = ("x", "h", "q", "kt", "vc", "p", "ctx", "x1", "h2", "gu", "pm", "qr", "kr")


def pooled(pool: BufferPool | None, fn, *args, **kwargs):
    """fn(*args, **kwargs) with the arrays it takes through _empty from ``pool``
    (released first: the arrays of the pool's previous call are overwritten), or fresh
    ones when there is no pool or another call holds it. fn's results must be arrays
    of their own (never _empty's)."""
    if pool is None or not pool.busy.acquire(blocking=False):
        return fn(*args, **kwargs)
    pool.release()
    token = _POOL.set(pool)
    try:
        return fn(*args, **kwargs)
    finally:
        _POOL.reset(token)
        pool.busy.release()


def loss_and_grads(params: Params, ids, targets, d_bits: int, grads: Params | None, emb_acc,
                   rope, sums=None, pool: BufferPool | None = None):
    """_loss_and_grads with its arrays from ``pool`` when one is given (pooled). What it
    returns, and ``sums.dx``, are arrays of their own."""
    return pooled(pool, _loss_and_grads, params, ids, targets, d_bits, grads, emb_acc, rope, sums)


def _loss_and_grads(params: Params, ids, targets, d_bits: int, grads: Params | None, emb_acc,
                    rope, sums=None):
    """One micro-batch: ids (B, L) int64, targets (B * L,) int64 (IGNORE where a position has
    no target). Returns the per-position losses (B * L,) (T-14, T-16). With ``grads``,
    writes into it every token-sum gradient of this micro-batch (its dot / fold over these
    tokens, T-6 / T-11 / T-56), the head's T-6 dW into lm_head (untied) or into the
    embedding's slot (tied; the trainer adds the chain after, T-57), and continues the
    embedding's chain in ``emb_acc`` (T-13). d_bits: the float32 bits of the whole batch's
    counted positions (T-18's D).

    ``sums`` (data-parallel ranks): a PartSums; every token-sum gradient is then computed
    as its part over this rank's range of the batch's tokens (contract 6.7) into
    ``sums.parts`` instead of ``grads`` (whose arrays serve as scratch), and the
    embedding's chain is left to the caller: ``sums.dx`` holds the gradient at the
    embedding's output."""
    cfg = params.cfg
    A = params.arrays
    B, L = ids.shape
    rows = B * L
    d = cfg.hidden_size
    nh, kvh, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    nq, nk = nh * hd, kvh * hd
    ldq = nq + 2 * nk
    ff = cfg.intermediate_size
    eps = K.f32_bits(cfg.rms_norm_eps)
    cos, sin, nsin = rope
    rot = cfg.rotary_dim
    flat = np.ascontiguousarray(ids.reshape(-1))
    embed = A["model.embed_tokens.weight"]
    head = embed if cfg.tie_word_embeddings else A["lm_head.weight"]
    want = grads is not None
    x = K.gather(embed, flat, _empty(rows, d))  # M-2
    saved = []
    for i, (wqkv, wgu, bias) in enumerate(params.stacked):
        p = f"model.layers.{i}."
        s = _LayerSaved()
        s.x = x
        s.h = h = K.rmsnorm(x, A[p + "input_layernorm.weight"], eps, _empty(rows, d))
        qkv = K.gemm_nt(h, rows, wqkv, _empty(rows, ldq))
        if bias is not None:
            K.add(qkv, bias, qkv)
        s.q = q = _empty(rows, nq)
        qs, q0, lq, ks, k0, lk = qkv, 0, ldq, qkv, nq, ldq
        if cfg.qk_norm:  # M-33: every head's q and k a row of M-4, before RoPE
            s.qr = np.ascontiguousarray(qkv[:, :nq])
            s.kr = np.ascontiguousarray(qkv[:, nq:nq + nk])
            qs = K.rmsnorm(s.qr.reshape(rows * nh, hd), A[p + QK_NORMS[0]], eps,
                           _empty(rows * nh, hd)).reshape(rows, nq)
            ks = K.rmsnorm(s.kr.reshape(rows * kvh, hd), A[p + QK_NORMS[1]], eps,
                           _empty(rows * kvh, hd)).reshape(rows, nk)
            q0, lq, k0, lk = 0, nq, 0, nk
        K.rope(qs, q0, lq, q, nq, hd, nh, hd, cos, sin, 0, L, rows, rot_dim=rot)
        s.kt = kt = _empty(B, kvh, hd, L)
        K.rope(ks, k0, lk, kt, 0, 0, kvh, hd, cos, sin, 0, L, rows, transposed=True, tmax=L,
               rot_dim=rot)
        del qs, ks
        s.vc = vc = np.ascontiguousarray(
            qkv[:, nq + nk:].reshape(B, L, kvh, hd).transpose(0, 2, 1, 3))
        s.ctx = ctx = K.attention(q, nq, kt, vc, _empty(rows, nq), B, L, nh, kvh, hd, 0, L, False)
        if want:
            s.p = _empty(B, nh, L, L)
            native().train_attn_probs((_a(q), nq, _a(kt), _a(s.p), B, L, nh, kvh, hd, tasks()))
        o = K.gemm_nt(ctx, rows, A[p + "self_attn.o_proj.weight"], _empty(rows, d))
        s.x1 = x1 = K.add(x, o, _empty(rows, d))
        s.h2 = h2 = K.rmsnorm(x1, A[p + "post_attention_layernorm.weight"], eps, _empty(rows, d))
        s.gu = gu = K.gemm_nt(h2, rows, wgu, _empty(rows, 2 * ff))
        s.pm = pm = K.silu_mul(gu, ff, _empty(rows, ff))
        dn = K.gemm_nt(pm, rows, A[p + "mlp.down_proj.weight"], _empty(rows, d))
        x = K.add(x1, dn, _empty(rows, d))
        saved.append(s)
    xf = K.rmsnorm(x, A["model.norm.weight"], eps, _empty(rows, d))
    logits = K.gemm_nt(xf, rows, head, _empty(rows, cfg.vocab_size))
    losses = np.empty(rows, dtype=np.float32)  # returned: never a pool's
    dlog = _empty(rows, cfg.vocab_size) if want else None
    TK.ce_rows(logits, targets, IGNORE, 0, d_bits, losses, dlog)
    del logits
    if not want:
        return losses
    G = grads.arrays
    V = cfg.vocab_size
    # the head (T-5, T-6) and the final norm (T-9 .. T-11)
    dxf = _mm(dlog, head, _empty(rows, d), rows, d, V)
    dhead = G["model.embed_tokens.weight"] if cfg.tie_word_embeddings else G["lm_head.weight"]

    def wsum(key, out, a, b):  # out = a^T b over this call's tokens (T-6)
        if sums is None:
            _mm(a, b, out, out.shape[0], out.shape[1], rows, ta=1)
        else:
            sums.product(key, a, b)

    def nsum(key, dy, xin):  # a norm weight's fold over the tokens (T-11), in parts
        if sums is not None:
            t = _empty(rows, d)
            native().train_rmsnorm_terms((_a(dy), _a(xin), _a(t), rows, d, eps, tasks()))
            sums.fold(key, t)

    wsum("head", dhead, dlog, xf)
    del dlog
    dx = _empty(rows, d)
    TK.rms_norm_backward(dxf, x, A["model.norm.weight"], eps, dx, G["model.norm.weight"])
    nsum("model.norm.weight", dxf, x)
    scale = K.attn_scale_bits(hd)
    rep = nh // kvh
    for i in reversed(range(len(params.stacked))):
        p = f"model.layers.{i}."
        s = saved[i]
        wqkv, wgu, _bias = params.stacked[i]
        gqkv, ggu, gbias = grads.stacked[i]
        # the MLP (T-52, T-54) and its residual (T-55)
        dpm = _mm(dx, A[p + "mlp.down_proj.weight"], _empty(rows, ff), rows, ff, d)
        wsum(p + "mlp.down_proj.weight", G[p + "mlp.down_proj.weight"], dx, s.pm)
        dgu = _empty(rows, 2 * ff)
        native().train_silu_mul_bwd((_a(s.gu), 2 * ff, _a(dpm), ff, _a(dgu), rows, ff, tasks()))
        del dpm
        dh2 = _mm(dgu, wgu, _empty(rows, d), rows, d, 2 * ff)
        wsum(p + "gu", ggu, dgu, s.h2)
        del dgu
        dxn = _empty(rows, d)
        TK.rms_norm_backward(dh2, s.x1, A[p + "post_attention_layernorm.weight"], eps, dxn,
                             G[p + "post_attention_layernorm.weight"])
        nsum(p + "post_attention_layernorm.weight", dh2, s.x1)
        dx1 = K.add(dx, dxn, dxn)
        # attention (T-48 .. T-51), o_proj (T-5, T-6)
        dctx = _mm(dx1, A[p + "self_attn.o_proj.weight"], _empty(rows, nq), rows, nq, d)
        wsum(p + "self_attn.o_proj.weight", G[p + "self_attn.o_proj.weight"], dx1, s.ctx)
        dq = _empty(rows, nq)
        dk = _empty(rows, nk)
        dqkv = _empty(rows, ldq)
        _attention_backward(s, dctx, dq, dk, dqkv, B, L, nh, kvh, hd, rep, scale, nq, nk)
        del dctx
        # RoPE backward (T-53): the forward's rotation with the sine negated
        if cfg.qk_norm:
            _head_norms_backward(s, p, A, G, sums, dq, dk, dqkv, rows, nh, kvh, hd, eps, rope, L,
                                 rot)
        else:
            K.rope(dq, 0, nq, dqkv, ldq, hd, nh, hd, cos, nsin, 0, L, rows, rot_dim=rot)
            K.rope(dk, 0, nk, dqkv[:, nq:], ldq, hd, kvh, hd, cos, nsin, 0, L, rows, rot_dim=rot)
        del dq, dk
        if gbias is not None:  # T-56
            if sums is None:
                gbias[...] = TK.fold_rows(dqkv)
            else:
                sums.fold(p + "bias", dqkv)
        dh = _mm(dqkv, wqkv, _empty(rows, d), rows, d, ldq)
        wsum(p + "qkv", gqkv, dqkv, s.h)
        del dqkv
        dxn = _empty(rows, d)
        TK.rms_norm_backward(dh, s.x, A[p + "input_layernorm.weight"], eps, dxn,
                             G[p + "input_layernorm.weight"])
        nsum(p + "input_layernorm.weight", dh, s.x)
        dx = K.add(dx1, dxn, dxn)
        saved[i] = None
    if sums is not None:
        # the caller runs the chain over every rank's tokens in order (a copy: dx may be
        # a pool's array)
        sums.dx = np.array(dx, copy=True)
        return losses
    TK.embedding_backward_into(dx, flat, emb_acc)  # T-13, carried across micro-batches
    return losses


class PartSums:
    """The token-sum gradients of one rank as parts over its range [t0, t0 + rows) of
    the batch's T tokens (contract 6.7: linalg.matmul_part; a fold is the product with a
    column of ones, whose chain steps fma(1, x, acc) are add(acc, x)), keyed in the order
    the backward makes them (the same on every rank)."""

    def __init__(self, T: int, t0: int):
        self.T, self.t0, self.parts, self.dx = T, t0, {}, None

    def product(self, key, a, b):
        from .._ops import ksplit as _ksplit

        self.parts[key] = _ksplit.matmul_part(a, b, k=self.T, k_start=self.t0, transpose_a=True)

    def fold(self, key, terms):
        ones = np.ones((terms.shape[0], 1), dtype=np.float32)
        self.product(key, ones, terms)


class TokenSums:
    """Every gradient that is a sum over the call's tokens, by a unique key (a parameter's
    checkpoint name, or "head" for the head's T-6 dW): with ``sums`` None the whole fold
    (T-2) or dot (T-6) over the call's tokens written into the gradient buffer, as one
    process computes it; with a PartSums (data-parallel ranks, T-61) this rank's part
    over its range of the batch's tokens, the buffer left alone."""

    def __init__(self, sums):
        self.sums = sums

    def dot(self, key, out, a, b):
        """out (m, n) = a^T b, a (rows, m) and b (rows, n) over the tokens (T-6)."""
        if self.sums is None:
            _mm(a, b, out, out.shape[0], out.shape[1], a.shape[0], ta=1)
        else:
            self.sums.product(key, np.ascontiguousarray(a), np.ascontiguousarray(b))

    def fold(self, key, out, terms):
        """out = fold(k = tokens) of terms (rows, out.size), reshaped to out's shape."""
        if self.sums is None:
            out[...] = TK.fold_rows(terms).reshape(out.shape)
        else:
            self.sums.fold(key, np.ascontiguousarray(terms))


def _head_norms_backward(s, p, A, G, sums, dq, dk, dqkv, rows, nh, kvh, hd, eps, rope, L, rot):
    """qwen3 (M-33): the RoPE backward (T-53) into the normalized q / k, then T-62 per
    head back to the projection's q / k columns of dqkv; each norm weight's gradient is
    fold(k = tokens) of the per-token terms (or this rank's part of that fold)."""
    cos, _sin, nsin = rope
    nq, nk = nh * hd, kvh * hd
    for (heads, n, x, d, c0), name in zip(((nh, nq, s.qr, dq, 0), (kvh, nk, s.kr, dk, nq)),
                                          QK_NORMS):
        dn = _empty(rows, n)
        K.rope(d, 0, n, dn, n, hd, heads, hd, cos, nsin, 0, L, rows, rot_dim=rot)
        dxn = _empty(rows, n)
        terms = _empty(rows, hd)
        TK.head_norm_backward(dn, x, A[p + name], eps, heads, dxn, terms)
        dqkv[:, c0:c0 + n] = dxn
        if sums is None:
            G[p + name][...] = TK.fold_rows(terms)
        else:
            sums.fold(p + name, terms)


def _attention_backward(s, dctx, dq, dk, dqkv, B, L, nh, kvh, hd, rep, scale, nq, nk):
    """T-48 .. T-51 per (batch row, key/value head): the rep query heads that read it
    stacked head after head (rows r * L + i)."""
    n = rep * L
    q4 = s.q.reshape(B, L, nh, hd)
    d4 = dctx.reshape(B, L, nh, hd)
    dq4 = dq.reshape(B, L, nh, hd)
    dk4 = dk.reshape(B, L, kvh, hd)
    dv4 = dqkv[:, nq + nk:].reshape(B, L, kvh, hd)
    qs, dos = _empty(n, hd), _empty(n, hd)
    dp, ds, dqs = _empty(n, L), _empty(n, L), _empty(n, hd)
    dkg, dvg = _empty(L, hd), _empty(L, hd)
    for b in range(B):
        for g in range(kvh):
            h0 = g * rep
            qs.reshape(rep, L, hd)[...] = q4[b, :, h0:h0 + rep].transpose(1, 0, 2)
            dos.reshape(rep, L, hd)[...] = d4[b, :, h0:h0 + rep].transpose(1, 0, 2)
            ps = s.p[b, h0:h0 + rep].reshape(n, L)
            vg = s.vc[b, g]
            ktg = s.kt[b, g]
            _mm(dos, vg, dp, n, L, hd, tb=1)  # T-48
            native().train_softmax_bwd((_a(ps), _a(dp), _a(ds), n, L, scale, tasks()))  # T-49
            _mm(ds, ktg, dqs, n, hd, L, tb=1)  # T-50: the key rows are kt's columns
            _mm(ds, qs, dkg, L, hd, n, ta=1)  # T-51
            _mm(ps, dos, dvg, L, hd, n, ta=1)
            dq4[b, :, h0:h0 + rep] = dqs.reshape(rep, L, hd).transpose(1, 0, 2)
            dk4[b, :, g] = dkg
            dv4[b, :, g] = dvg

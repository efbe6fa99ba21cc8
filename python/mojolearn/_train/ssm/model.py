"""The forward and backward of a state-space CausalLM for training (Mamba-1, rules
T-63 .. T-74 of contracts/ops/IDENTICAL_TRAIN_CONTRACT.md; Mamba-2, T-75 .. T-86): the embedding (T-12,
T-13), the blocks (S-9: x + mixer(norm(x)), the block norm by S-10 and its backward
T-63 / T-64, the residual T-55), the final norm (S-11 = M-4, so T-9 .. T-11), the head
(tied: T-57) and the next-token loss (T-58). The forward uses the inference model's
kernels, so the per-position losses are the inference logits' cross entropy, bit for
bit.

The mixer of each family is a module with ``PARAMS``, ``forward(p, layer, h, B, L, cfg)
-> (out, saved)`` and ``backward(p, layer, saved, dout, grads, ts) -> dh`` (see mamba1.py);
``MIXERS`` maps the model_type to it. Every parameter is its own float32 array by
checkpoint name; every sum over tokens is a T-2 fold / dot over the call's tokens, so
micro-batches of whole rows on leaf boundaries reassemble by T-26's tree (T-59), and
data-parallel ranks (T-61) compute each as their parts (``TokenSums`` with a PartSums).
"""
from __future__ import annotations

import numpy as np

from ...models._exec import kernels as K
from ...models._ssm.config import EPS
from .. import kernels as TK
from ..._core.threads import tasks
from ...models._exec.kernels import _a, native
from ..model import IGNORE, TokenSums, _empty, _mm, pooled
from . import mamba1, mamba2

MIXERS = {"mamba": mamba1, "mamba2": mamba2}
"""model_type -> the mixer module the trainer computes."""
EMBED = "backbone.embeddings.weight"
_EPS_BITS = K.f32_bits(EPS)


def param_names(cfg) -> list:
    """Every trained parameter's checkpoint name in the optimizer's and the saved file's
    order: the embedding; per layer the block norm, then the mixer's (mamba1.PARAMS);
    the final norm; the head (untied)."""
    mix = MIXERS[cfg.model_type]
    names = [EMBED]
    for i in range(cfg.num_hidden_layers):
        p = f"backbone.layers.{i}."
        names.append(p + "norm.weight")
        names += [p + "mixer." + n for n in mix.PARAMS]
    names.append("backbone.norm_f.weight")
    if not cfg.tie_word_embeddings:
        names.append("lm_head.weight")
    return names


class Params:
    """The float32 parameters of a state-space model by checkpoint name (each its own
    C-contiguous array); ``grads_like()`` makes zeroed gradient buffers alike."""

    embed_name = EMBED

    def __init__(self, cfg, weights: dict):
        self.cfg = cfg
        self.names = param_names(cfg)
        self.arrays = {n: np.array(weights[n], dtype=np.float32, order="C", copy=True)
                       for n in self.names}

    def grads_like(self):
        """Zeroed gradient buffers of the same names and shapes."""
        g = Params.__new__(Params)
        g.cfg, g.names = self.cfg, self.names
        g.arrays = {n: np.zeros_like(a) for n, a in self.arrays.items()}
        return g

    def list(self) -> list:
        return [self.arrays[n] for n in self.names]


def loss_and_grads(params: Params, ids, targets, d_bits: int, grads, emb_acc, sums=None,
                   pool=None):
    """_loss_and_grads with its arrays (the mixers' too) from ``pool`` (a
    model.BufferPool) when one is given; what it returns, and ``sums.dx``, are arrays
    of their own."""
    return pooled(pool, _loss_and_grads, params, ids, targets, d_bits, grads, emb_acc, sums)


def _loss_and_grads(params: Params, ids, targets, d_bits: int, grads, emb_acc, sums=None):
    """One micro-batch: ids (B, L) int64, targets (B * L,) int64 (IGNORE where none).
    Returns the per-position losses (T-14, T-16). With ``grads`` (a Params of zeroed
    buffers), writes every token-sum gradient of this micro-batch (its fold / dot over
    these tokens), the head's T-6 dW into lm_head (untied) or the embedding's slot (tied;
    the trainer adds the chain, T-57), and continues the embedding's chain in emb_acc
    (T-13). d_bits: the float32 bits of the whole batch's counted positions (T-18).

    ``sums`` (data-parallel ranks, T-61): a PartSums; every token-sum gradient is then
    this rank's part over its range of the batch's tokens (contract 6.7) in
    ``sums.parts`` (keyed by parameter name; "head" for the head's dW) instead of
    ``grads`` (whose arrays serve as scratch), and the embedding's chain is left to the
    caller: ``sums.dx`` holds the gradient at the embedding's output."""
    cfg = params.cfg
    A = params.arrays
    mix = MIXERS[cfg.model_type]
    B, L = ids.shape
    rows = B * L
    d = cfg.hidden_size
    flat = np.ascontiguousarray(ids.reshape(-1))
    embed = A[EMBED]
    head = embed if cfg.tie_word_embeddings else A["lm_head.weight"]
    want = grads is not None
    x = K.gather(embed, flat, _empty(rows, d))  # T-12 / M-2
    saved = []
    for i in range(cfg.num_hidden_layers):
        p = f"backbone.layers.{i}."
        h = K.ssm_norm_lanes(x, A[p + "norm.weight"], _EPS_BITS, _empty(rows, d))  # S-10
        out, s = mix.forward(A, p, h, B, L, cfg)
        saved.append((x, s))
        x = K.add(x, out, _empty(rows, d))  # S-9
        del out
    xf = K.rmsnorm(x, A["backbone.norm_f.weight"], _EPS_BITS, _empty(rows, d))  # S-11
    logits = K.gemm_nt(xf, rows, head, _empty(rows, cfg.vocab_size))
    losses = np.empty(rows, dtype=np.float32)  # returned: never a pool's
    dlog = _empty(rows, cfg.vocab_size) if want else None
    TK.ce_rows(logits, targets, IGNORE, 0, d_bits, losses, dlog)
    del logits
    if not want:
        return losses
    G = grads.arrays
    V = cfg.vocab_size
    dxf = _mm(dlog, head, _empty(rows, d), rows, d, V)
    dhead = G[EMBED] if cfg.tie_word_embeddings else G["lm_head.weight"]
    ts = TokenSums(sums)
    ts.dot("head", dhead, dlog, xf)  # T-6
    del dlog
    dx = _empty(rows, d)
    TK.rms_norm_backward(dxf, x, A["backbone.norm_f.weight"], _EPS_BITS, dx,
                         G["backbone.norm_f.weight"])  # T-9 .. T-11
    if sums is not None:  # the final norm's fold over the tokens (T-11), in parts
        t = _empty(rows, d)
        native().train_rmsnorm_terms((_a(dxf), _a(x), _a(t), rows, d, _EPS_BITS, tasks()))
        sums.fold("backbone.norm_f.weight", t)
    for i in reversed(range(cfg.num_hidden_layers)):
        p = f"backbone.layers.{i}."
        xin, s = saved[i]
        dh = mix.backward(A, p, s, dx, G, ts)
        dxn, terms = _empty(rows, d), _empty(rows, d)
        TK.ssm_norm_backward(dh, xin, A[p + "norm.weight"], _EPS_BITS, dxn, terms)  # T-63, T-64
        ts.fold(p + "norm.weight", G[p + "norm.weight"], terms)
        dx = K.add(dx, dxn, dxn)  # T-55
        saved[i] = None
    if sums is not None:
        # the caller runs the chain over every rank's tokens in order (a copy: dx may be
        # a pool's array)
        sums.dx = np.array(dx, copy=True)
        return losses
    TK.embedding_backward_into(dx, flat, emb_acc)  # T-13, carried across micro-batches
    return losses

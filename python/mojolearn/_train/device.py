"""The training step on the GPU path: a Trainer's parameters, gradients and optimizer
state in a device backend's memory (models/_exec/device.py: the GPU build, or the CPU
run of the same GPU bodies in the tests), and one optimizer step written as device
PROGRAMS of named ops (contracts/ops/IDENTICAL_TRAIN_CONTRACT.md; the CPU trainer's
model.loss_and_grads and optim step, op for op, so the bits are the CPU trainer's).

TWO PROGRAMS A STEP, ONE HOST READ BETWEEN THEM
    (1) gather -> per layer the forward with its activations saved (rmsnorm, q/k/v
        product, bias add, RoPE of q and of k, the values copied out, attention, the
        attention weights for T-47, o product, residual, rmsnorm, gate/up product, SiLU
        gate product, down product, residual) -> final rmsnorm -> head product -> row
        losses and T-18's gradient (train_ce_rows) -> the loss (T-17, train_fold_div_into)
        -> the head and final norm backward -> per layer in reverse the MLP (T-52, T-54),
        norm (T-9 .. T-11), residual (T-55), o_proj, attention (T-48 .. T-51 per batch
        row and key/value head, the rep query heads stacked), RoPE backward (T-53, the
        sine negated on the device), bias (T-56), q/k/v and the input norm -> the
        embedding's chain (T-13; tied: plus the head's gradient, T-57) -> the clip
        (train_clip, T-23 .. T-25).
        The CLIP'S COEFFICIENT IS A HOST VALUE: the device launcher of train_clip runs
        the leaf and norm kernels, reads the J norms back, computes T-23's total and
        T-24's coefficient on the host (threads.clip_total, the CPU run's code) and
        launches the rescale (T-25) only when the total is finite (T-41).
    The driver then reads the loss and the total back: a non-finite total is refused by
    name with the weights and the optimizer state untouched (T-41), as on the CPU.
    (2) the optimizer: train_adam (Adam / AdamW, T-29 .. T-32, T-34) or train_sgd (T-33),
        with t, the schedule's lr of step t (the host scalar the CPU optimizer uses) and
        the hyperparameters as float32 bits.
    After (2) the weights and the moments are read back into the Trainer's host arrays,
    so every host-side method (save, weights, model, save_model) sees the step.

COPIES
    The attention backward's per-(batch row, kv head) stacks of q and dO are gathered by
    nn_kv_append (a bit copy); its results dQ, dK, dV (fp32.v1 products, flushed as they
    are stored) are put back in the token layout by nn_add with a -0 row: x + (-0) is x
    for every flushed value, so those copies are exact.

SCOPE (refused by name, never run on the CPU instead)
    llama, mistral and qwen2 shapes (GQA, tied and untied heads, q/k/v biases); one
    process (no group=); accumulation=1; max_norm given (its total norm is the step's
    finiteness check); the step only (loss() and gradients() are the CPU trainer's).
    phi3 (its stacked projections and partial rotary) and qwen3 (per-head norms) are
    refused.

Python validates, keeps the bookkeeping (addresses, sizes, layouts) and names the ops;
every value is computed by a kernel.
"""
from __future__ import annotations

import numpy as np

from ..models._exec import kernels as K
from ..models._exec.device import upload
from . import model as M

__all__ = ["DeviceTrainStep", "DEVICE_TYPES", "refuse"]

DEVICE_TYPES = ("llama", "mistral", "qwen2")
"""The model types whose training step runs on the GPU path in this version."""

_IGNORE = M.IGNORE


def refuse(cfg, func: str, max_norm=None, group=None):
    """Raise by name when this configuration's step is not covered on the GPU path."""
    if cfg.model_type not in DEVICE_TYPES:
        raise NotImplementedError(
            f"mojolearn: {func}: model_type {cfg.model_type!r} is not trained on the GPU path "
            f"in this version (it trains {', '.join(DEVICE_TYPES)}); pass device='cpu' to "
            f"train it on the CPU (the contract's bits)")
    if cfg.qk_norm:
        raise NotImplementedError(
            f"mojolearn: {func}: per-head q/k norms (M-33) are not trained on the GPU path; "
            f"pass device='cpu'")
    if group is not None:
        raise NotImplementedError(
            f"mojolearn: {func}: group= (data-parallel ranks, T-61) is not trained on the GPU "
            f"path in this version; pass device='cpu' with group=")
    if max_norm is None:
        raise ValueError(
            f"mojolearn: {func}: the GPU path needs max_norm: its total gradient norm (T-23) is "
            f"the step's finiteness check (T-41), read back between the backward and the "
            f"optimizer; pass max_norm= or device='cpu'")


class _Bufs:
    """The device buffers one program names (kept alive until it has run)."""

    def __init__(self, backend):
        self.backend = backend
        self.keep = []

    def f32(self, *shape):
        b = self.backend.alloc(shape, np.float32)
        self.keep.append(b)
        return b

    def host(self, arr):
        b = upload(self.backend, arr)
        self.keep.append(b)
        return b


class DeviceTrainStep:
    """The device half of a Trainer on the GPU path: its parameters, gradients, moments
    and address tables in ``backend``'s memory; ``step(ids, targets, count)`` runs one
    optimizer step as two programs (see the module docstring) and returns the loss."""

    def __init__(self, trainer, backend):
        self.tr = trainer
        self.backend = backend
        cfg = trainer.config
        refuse(cfg, "Trainer", trainer.max_norm, trainer._comm)
        self.cfg = cfg
        P = trainer.params
        self.names = P.names
        be = backend
        # the parameters in the host layout: q/k/v, gate/up (and the biases) one stacked
        # buffer a layer, the named tensors addresses inside it
        self.pbuf = {}
        self.paddr = {}
        for n in ("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"):
            if n in P.arrays:
                self.pbuf[n] = upload(be, P.arrays[n])
        self.stacked = []
        for i, (qkv, gu, bias) in enumerate(P.stacked):
            p = f"model.layers.{i}."
            s = (upload(be, qkv), upload(be, gu), None if bias is None else upload(be, bias))
            self.stacked.append(s)
            for n in ("input_layernorm.weight", "post_attention_layernorm.weight",
                      "self_attn.o_proj.weight", "mlp.down_proj.weight"):
                self.pbuf[p + n] = upload(be, P.arrays[p + n])
        self.paddr = self._addresses(self.pbuf, self.stacked, P)
        # gradient buffers in the same layout
        G = P.grads_like()
        self.gbuf = {n: be.alloc(G.arrays[n].shape, np.float32) for n in self.pbuf}
        self.gstacked = [tuple(None if a is None else be.alloc(a.shape, np.float32) for a in s)
                         for s in G.stacked]
        self.gaddr = self._addresses(self.gbuf, self.gstacked, G)
        self.sizes = [P.arrays[n].size for n in self.names]
        self.t_sizes = upload(be, np.array(self.sizes, dtype=np.int64))
        self.t_p = upload(be, np.array([self.paddr[n] for n in self.names], dtype=np.int64))
        self.t_g = upload(be, np.array([self.gaddr[n] for n in self.names], dtype=np.int64))
        opt = trainer.optimizer
        self.m = upload(be, opt._m)
        self.v = upload(be, opt._v)
        self.flags = upload(be, opt._flags)
        self.norms = be.alloc((len(self.names) + 1,), np.float32)
        self.loss = be.alloc((1,), np.float32)
        self.negzero = upload(be, np.full((cfg.head_dim,), -0.0, dtype=np.float32))  # a -0 row
        self.emb_acc = be.alloc(P.arrays["model.embed_tokens.weight"].shape, np.float32) \
            if cfg.tie_word_embeddings else None
        self.rope = None
        self.rope_len = 0
        self.eps = K.f32_bits(cfg.rms_norm_eps)
        self.scale = K.attn_scale_bits(cfg.head_dim)
        self.sabotage = None  # tests only: a callable that edits program 1's op list

    def _addresses(self, bufs, stacked, P):
        cfg = self.cfg
        hd = cfg.head_dim
        nq, nk = cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd
        out = {n: b.addr for n, b in bufs.items()}
        for i, (qkv, gu, bias) in enumerate(stacked):
            p = f"model.layers.{i}."
            d, ff = qkv.shape[1], gu.shape[0] // 2
            out[p + "self_attn.q_proj.weight"] = qkv.addr
            out[p + "self_attn.k_proj.weight"] = qkv.at(nq * d)
            out[p + "self_attn.v_proj.weight"] = qkv.at((nq + nk) * d)
            out[p + "mlp.gate_proj.weight"] = gu.addr
            out[p + "mlp.up_proj.weight"] = gu.at(ff * d)
            if bias is not None:
                out[p + "self_attn.q_proj.bias"] = bias.addr
                out[p + "self_attn.k_proj.bias"] = bias.at(nq)
                out[p + "self_attn.v_proj.bias"] = bias.at(nq + nk)
        return out

    # ------------------------------------------------------------------ RoPE tables
    def _rope_ops(self, ops, bufs, L):
        """The tables on the device (M-7 by nn_rope_table; the negated sine by train_neg),
        made again when a longer sequence comes."""
        if self.rope is not None and self.rope_len >= L:
            return self.rope
        cfg = self.cfg
        n = max(L, self.rope_len)
        half = cfg.rotary_dim // 2
        cos = self.backend.alloc((n, half), np.float32)
        sin = self.backend.alloc((n, half), np.float32)
        nsin = self.backend.alloc((n, half), np.float32)
        ops.append(("nn_rope_table", cos.addr, sin.addr, n, cfg.rotary_dim,
                    K.f32_bits(cfg.rope_theta)))
        ops.append(("train_neg", sin.addr, nsin.addr, n * half))
        self.rope, self.rope_len = (cos, sin, nsin), n
        return self.rope

    # ------------------------------------------------------------------ program 1
    def _program(self, ids_buf, tgt_buf, B, L, d_bits):
        cfg = self.cfg
        be = self.backend
        bufs = _Bufs(be)
        ops = []
        rows = B * L
        d, V = cfg.hidden_size, cfg.vocab_size
        nh, kvh, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        nq, nk = nh * hd, kvh * hd
        ldq = nq + 2 * nk
        ff = cfg.intermediate_size
        rot = cfg.rotary_dim
        eps = self.eps
        cos, sin, nsin = (b.addr for b in self._rope_ops(ops, bufs, L))
        P = self.pbuf
        embed = P["model.embed_tokens.weight"].addr
        head = embed if cfg.tie_word_embeddings else P["lm_head.weight"].addr

        def mm(a, b, c, m, n, k, ta=0, tb=0):
            ops.append(("gemm_f32", a, b, c, m, n, k, ta, tb, 0, 0))

        x = bufs.f32(rows, d)
        ops.append(("nn_gather", embed, ids_buf.addr, x.addr, rows, d))
        saved = []
        ws = bufs.f32(B * nh * L * L)
        for i, (wqkv, wgu, bias) in enumerate(self.stacked):
            p = f"model.layers.{i}."
            s = {"x": x}
            s["h"] = h = bufs.f32(rows, d)
            ops.append(("nn_rmsnorm", x.addr, P[p + "input_layernorm.weight"].addr, h.addr, rows, d,
                        eps))
            qkv = bufs.f32(rows, ldq)
            mm(h.addr, wqkv.addr, qkv.addr, rows, ldq, d, 0, 1)
            if bias is not None:
                ops.append(("nn_add", qkv.addr, ldq, bias.addr, 0, qkv.addr, ldq, rows, ldq))
            s["q"] = q = bufs.f32(rows, nq)
            ops.append(("nn_rope", qkv.addr, ldq, q.addr, nq, hd, nh, hd, cos, sin, 0, L, rows, 0,
                        0, rot))
            s["kt"] = kt = bufs.f32(B, kvh, hd, L)
            ops.append(("nn_rope", qkv.at(nq), ldq, kt.addr, 0, 0, kvh, hd, cos, sin, 0, L, rows, 1,
                        L, rot))
            s["vc"] = vc = bufs.f32(B, kvh, L, hd)
            ops.append(("nn_kv_append", qkv.at(nq + nk), ldq, vc.addr, kvh, hd, 0, L, rows, L))
            s["ctx"] = ctx = bufs.f32(rows, nq)
            ops.append(("nn_attention", q.addr, nq, kt.addr, vc.addr, ctx.addr, ws.addr, B, L, nh,
                        kvh, hd, 0, L, 0))
            s["p"] = pr = bufs.f32(B, nh, L, L)
            ops.append(("train_attn_probs", q.addr, nq, kt.addr, pr.addr, B, L, nh, kvh, hd))
            o = bufs.f32(rows, d)
            mm(ctx.addr, P[p + "self_attn.o_proj.weight"].addr, o.addr, rows, d, nq, 0, 1)
            s["x1"] = x1 = bufs.f32(rows, d)
            ops.append(("nn_add", x.addr, d, o.addr, d, x1.addr, d, rows, d))
            s["h2"] = h2 = bufs.f32(rows, d)
            ops.append(("nn_rmsnorm", x1.addr, P[p + "post_attention_layernorm.weight"].addr,
                        h2.addr, rows, d, eps))
            s["gu"] = gu = bufs.f32(rows, 2 * ff)
            mm(h2.addr, wgu.addr, gu.addr, rows, 2 * ff, d, 0, 1)
            s["pm"] = pm = bufs.f32(rows, ff)
            ops.append(("nn_silu_mul", gu.addr, gu.at(ff), 2 * ff, pm.addr, ff, rows, ff))
            dn = bufs.f32(rows, d)
            mm(pm.addr, P[p + "mlp.down_proj.weight"].addr, dn.addr, rows, d, ff, 0, 1)
            x = bufs.f32(rows, d)
            ops.append(("nn_add", x1.addr, d, dn.addr, d, x.addr, d, rows, d))
            saved.append(s)
        xf = bufs.f32(rows, d)
        ops.append(("nn_rmsnorm", x.addr, P["model.norm.weight"].addr, xf.addr, rows, d, eps))
        logits = bufs.f32(rows, V)
        mm(xf.addr, head, logits.addr, rows, V, d, 0, 1)
        losses = bufs.f32(rows)
        dlog = bufs.f32(rows, V)
        ops.append(("train_ce_rows", logits.addr, tgt_buf.addr, losses.addr, dlog.addr, rows, V,
                    _IGNORE, 0, d_bits))
        ops.append(("train_fold_div_into", losses.addr, rows, d_bits, self.loss.addr))
        # the head (T-5, T-6) and the final norm (T-9 .. T-11)
        G = self.gbuf
        dxf = bufs.f32(rows, d)
        mm(dlog.addr, head, dxf.addr, rows, d, V)
        dhead = G["model.embed_tokens.weight"] if cfg.tie_word_embeddings else G["lm_head.weight"]
        mm(dlog.addr, xf.addr, dhead.addr, V, d, rows, 1, 0)
        dx = bufs.f32(rows, d)
        ops.append(("train_rms_norm_backward", dxf.addr, x.addr, P["model.norm.weight"].addr,
                    dx.addr, G["model.norm.weight"].addr, rows, d, eps))
        rep = nh // kvh
        n = rep * L
        qs, dos = bufs.f32(n, hd), bufs.f32(n, hd)
        dp, ds, dqs = bufs.f32(n, L), bufs.f32(n, L), bufs.f32(n, hd)
        dkg, dvg = bufs.f32(L, hd), bufs.f32(L, hd)
        nz = self.negzero.addr

        def norm_back(dy, x, wname, dres):
            """A block norm's backward (T-9 .. T-11) joined to the residual's gradient
            (T-55): a new buffer dres + dx."""
            dxn = bufs.f32(rows, d)
            ops.append(("train_rms_norm_backward", dy.addr, x.addr, P[wname].addr, dxn.addr,
                        G[wname].addr, rows, d, eps))
            ops.append(("nn_add", dres.addr, d, dxn.addr, d, dxn.addr, d, rows, d))
            return dxn

        for i in reversed(range(len(self.stacked))):
            p = f"model.layers.{i}."
            s = saved[i]
            wqkv, wgu, _bias = self.stacked[i]
            gqkv, ggu, gbias = self.gstacked[i]
            # the MLP (T-52, T-54) and its residual (T-55)
            dpm = bufs.f32(rows, ff)
            mm(dx.addr, P[p + "mlp.down_proj.weight"].addr, dpm.addr, rows, ff, d)
            mm(dx.addr, s["pm"].addr, G[p + "mlp.down_proj.weight"].addr, d, ff, rows, 1, 0)
            dgu = bufs.f32(rows, 2 * ff)
            ops.append(("train_silu_mul_bwd", s["gu"].addr, 2 * ff, dpm.addr, ff, dgu.addr, rows, ff))
            dh2 = bufs.f32(rows, d)
            mm(dgu.addr, wgu.addr, dh2.addr, rows, d, 2 * ff)
            mm(dgu.addr, s["h2"].addr, ggu.addr, 2 * ff, d, rows, 1, 0)
            dx1 = norm_back(dh2, s["x1"], p + "post_attention_layernorm.weight", dx)
            # attention (T-48 .. T-51), o_proj (T-5, T-6)
            dctx = bufs.f32(rows, nq)
            mm(dx1.addr, P[p + "self_attn.o_proj.weight"].addr, dctx.addr, rows, nq, d)
            mm(dx1.addr, s["ctx"].addr, G[p + "self_attn.o_proj.weight"].addr, d, nq, rows, 1, 0)
            dq, dk = bufs.f32(rows, nq), bufs.f32(rows, nk)
            dqkv = bufs.f32(rows, ldq)
            for b in range(B):
                for g in range(kvh):
                    h0 = g * rep
                    src = (b * L * nq + h0 * hd)
                    ops.append(("nn_kv_append", s["q"].at(src), nq, qs.addr, rep, hd, 0, L, L, L))
                    ops.append(("nn_kv_append", dctx.at(src), nq, dos.addr, rep, hd, 0, L, L, L))
                    ps = s["p"].at((b * nh + h0) * L * L)
                    vg = s["vc"].at((b * kvh + g) * L * hd)
                    ktg = s["kt"].at((b * kvh + g) * hd * L)
                    mm(dos.addr, vg, dp.addr, n, L, hd, 0, 1)  # T-48
                    ops.append(("train_softmax_bwd", ps, dp.addr, ds.addr, n, L, self.scale))  # T-49
                    mm(ds.addr, ktg, dqs.addr, n, hd, L, 0, 1)  # T-50
                    mm(ds.addr, qs.addr, dkg.addr, L, hd, n, 1, 0)  # T-51
                    mm(ps, dos.addr, dvg.addr, L, hd, n, 1, 0)
                    for r in range(rep):
                        ops.append(("nn_add", dqs.at(r * L * hd), hd, nz, 0,
                                    dq.at(b * L * nq + (h0 + r) * hd), nq, L, hd))
                    ops.append(("nn_add", dkg.addr, hd, nz, 0, dk.at(b * L * nk + g * hd), nk, L, hd))
                    ops.append(("nn_add", dvg.addr, hd, nz, 0, dqkv.at(b * L * ldq + nq + nk + g * hd),
                                ldq, L, hd))
            # RoPE backward (T-53): the forward's rotation with the sine negated
            ops.append(("nn_rope", dq.addr, nq, dqkv.addr, ldq, hd, nh, hd, cos, nsin, 0, L, rows, 0,
                        0, rot))
            ops.append(("nn_rope", dk.addr, nk, dqkv.at(nq), ldq, hd, kvh, hd, cos, nsin, 0, L, rows,
                        0, 0, rot))
            if gbias is not None:  # T-56
                ops.append(("train_fold_rows", dqkv.addr, gbias.addr, rows, ldq))
            dh = bufs.f32(rows, d)
            mm(dqkv.addr, wqkv.addr, dh.addr, rows, d, ldq)
            mm(dqkv.addr, s["h"].addr, gqkv.addr, ldq, d, rows, 1, 0)
            dx = norm_back(dh, s["x"], p + "input_layernorm.weight", dx1)
        # the embedding's chain (T-13); tied: the head's gradient plus the chain (T-57)
        emb = G["model.embed_tokens.weight"]
        if cfg.tie_word_embeddings:
            self.backend.zero(self.emb_acc)
            ops.append(("train_embedding_backward", dx.addr, ids_buf.addr, self.emb_acc.addr, rows,
                        V, d))
            ops.append(("nn_add", emb.addr, d, self.emb_acc.addr, d, emb.addr, d, V, d))
        else:
            self.backend.zero(emb)
            ops.append(("train_embedding_backward", dx.addr, ids_buf.addr, emb.addr, rows, V, d))
        # the clip (T-23 .. T-25): the launcher reads the norms back for the coefficient
        ops.append(("train_clip", self.t_g.addr, self.t_sizes.addr, len(self.names),
                    self.norms.addr, K.f32_bits(self.tr.max_norm)))
        return ops, bufs

    # ------------------------------------------------------------------ the step
    def step(self, ids, targets, count) -> float:
        """One optimizer step on ids (B, L) int64 with targets (B * L,) int64 (IGNORE: no
        target) over ``count`` counted positions; returns the loss (float32 value)."""
        be = self.backend
        B, L = ids.shape
        d_bits = K.f32_bits(float(count))
        ids_buf = upload(be, np.ascontiguousarray(ids.reshape(-1), dtype=np.int64))
        tgt_buf = upload(be, np.ascontiguousarray(targets, dtype=np.int64))
        ops, bufs = self._program(ids_buf, tgt_buf, B, L, d_bits)
        if self.sabotage is not None:
            ops = self.sabotage(ops)
        be.run(ops)
        del bufs
        loss = float(be.read(self.loss)[0])
        total = be.read(self.norms)[-1]
        if not np.isfinite(total):
            raise ValueError(f"mojolearn: Trainer.step: the total gradient norm is not finite "
                             f"({total}): overflow, refused with the weights and the optimizer "
                             f"state untouched (T-41)")
        opt = self.tr.optimizer
        t = opt.t + 1
        lr = opt._schedule.lr_at(t) if opt._schedule is not None else opt._lr
        lr_bits = K.f32_bits(lr)
        if self.tr._opt_kind == "sgd":
            mu, damp, wd = opt._hb
            be.write(self.flags, opt._flags)
            prog = [("train_sgd", self.t_p.addr, self.t_g.addr, self.t_sizes.addr, len(self.names),
                     self.m.addr, self.flags.addr, lr_bits, mu, damp, wd, int(opt._nesterov),
                     int(opt._maximize))]
        else:
            b1, b2, e, wd = opt._hb
            prog = [("train_adam", self.t_p.addr, self.t_g.addr, self.t_sizes.addr, len(self.names),
                     self.m.addr, self.v.addr, t, lr_bits, b1, b2, e, wd, int(opt._decoupled),
                     int(opt._maximize))]
        be.run(prog)
        opt.t = t
        if self.tr._opt_kind != "sgd" or opt._has_mu:
            opt._flags[...] = 1
        self._pull()
        return loss

    def _pull(self):
        """The device's weights and moments into the Trainer's host arrays."""
        be = self.backend
        P = self.tr.params
        for n, b in self.pbuf.items():
            P.arrays[n][...] = be.read(b)
        for (qkv, gu, bias), (hq, hg, hb) in zip(self.stacked, P.stacked):
            hq[...] = be.read(qkv)
            hg[...] = be.read(gu)
            if bias is not None:
                hb[...] = be.read(bias)
        opt = self.tr.optimizer
        opt._m[...] = be.read(self.m)
        opt._v[...] = be.read(self.v)

    def gradients(self) -> dict:
        """The last step's (clipped) gradients by checkpoint name, read back (tests)."""
        be = self.backend
        out = {}
        flat = {}
        for n, b in self.gbuf.items():
            flat[n] = be.read(b)
        cfg = self.cfg
        hd = cfg.head_dim
        nq, nk = cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd
        for i, (q, g, bias) in enumerate(self.gstacked):
            p = f"model.layers.{i}."
            qa, ga = be.read(q), be.read(g)
            ff = ga.shape[0] // 2
            flat[p + "self_attn.q_proj.weight"] = qa[:nq]
            flat[p + "self_attn.k_proj.weight"] = qa[nq:nq + nk]
            flat[p + "self_attn.v_proj.weight"] = qa[nq + nk:]
            flat[p + "mlp.gate_proj.weight"] = ga[:ff]
            flat[p + "mlp.up_proj.weight"] = ga[ff:]
            if bias is not None:
                ba = be.read(bias)
                flat[p + "self_attn.q_proj.bias"] = ba[:nq]
                flat[p + "self_attn.k_proj.bias"] = ba[nq:nq + nk]
                flat[p + "self_attn.v_proj.bias"] = ba[nq + nk:]
        for n in self.names:
            out[n] = np.ascontiguousarray(flat[n])
        return out

"""The trainer: a CausalLM's parameters, an optimizer from optim.py, the gradients of
model.py (transformers) or ssm/model.py (Mamba-1), checkpoints that resume bit for bit
(T-58 .. T-60, T-74)."""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

from .._core.loader import cpu_native as native
from .._table import profiles as _profiles
from .._table import checkpoint_rules as _rules
from .._io import checkpoint as _ckpt
from ..models._base.config import ModelConfig
from ..models._base.inputs import token_ids
from ..models._exec.kernels import _a, f32_bits
from ..models._exec import kernels as K
from ..models._transformer.causal_lm import CausalLM
from . import kernels as TK
from . import model as M
from .ssm import model as SM
from . import optim as _optim
from . import schedule as _schedule
from .primitives import splits_that_work

FORMAT = "mojolearn.trainer.v1"
OPTIMIZERS = {"adamw": "AdamW", "adam": "Adam", "sgd": "SGD"}


def _bits_f32(bits: int) -> float:
    return float(np.array([bits], dtype=np.uint32).view(np.float32)[0])


class Trainer:
    """Fine-tune a transformer ``CausalLM`` (llama, mistral, qwen2, qwen3, phi3) or a Mamba-1 /
    Mamba-2 ``MambaLM`` (model_type "mamba", T-63 .. T-74; "mamba2", T-75 .. T-86) with the
    same bits on every CPU build and thread count (contracts/ops/IDENTICAL_TRAIN_CONTRACT.md,
    rules T-*). For a Mamba model ``device="gpu"`` is refused by name (its ``group=``
    ranks run by T-61 like a transformer's); ``model`` is then a ``MambaLM`` and
    ``save_model`` writes a ``MambaForCausalLM`` /
    ``Mamba2ForCausalLM`` folder.

    ``Trainer(lm, optimizer="adamw", lr=1e-3, weight_decay=None, betas=None, eps=None,
    momentum=None, lr_schedule=None, max_norm=None, numeric_profile=None, progress=False,
    group=None, timeout=300.0)``: ``lm`` a ``CausalLM`` loaded from a checkpoint with
    ``weight_format="float32"`` (its float32 weights are read again from that
    checkpoint) or the path of one. None means the optimizer's default (weight_decay:
    AdamW 0.01, Adam and SGD 0; betas (0.9, 0.999) and eps 1e-8 for Adam / AdamW;
    momentum 0 for SGD); an argument the optimizer does not take is refused. ``group``:
    a torch.distributed group to train on its ranks (T-61; docs/training.md). ``device``:
    None (the default: the CPU, whatever the process device), "cpu", "gpu" / "gpu:0" or
    "auto" (the GPU when this install has a GPU build that runs here): on the
    GPU path each ``step`` runs as device programs (_train/device.py: llama, mistral,
    qwen2; one process; accumulation=1; max_norm given; the CPU trainer's bits), and
    what it does not cover is refused by name. The profile is resolved for training: fp32_v1, whatever
    the process inference default is; a profile that has not passed for training is
    refused by name.

    ``step(ids, labels=None, accumulation=1)`` runs one optimizer step on the next-token
    loss of ``ids`` (batch, length) and returns the loss (a float32 value); labels of the
    same shape (-100: no target) replace ids as targets. ``accumulation`` splits the batch
    into that many micro-batches of whole rows (a power of two that splits the batch's
    tokens on leaf boundaries): the same bits as one batch, in less memory.
    ``gradients(ids, labels=None)`` returns the gradients by checkpoint name without a
    step; ``loss(ids, labels=None)`` the loss alone. ``model`` is a ``CausalLM`` holding
    the current weights. ``save(path)`` writes everything ``Trainer.resume(path)`` needs to
    continue with the bits of an uninterrupted run; ``save_model(directory)`` writes a
    Hugging Face folder (config.json + model.safetensors, float32).
    """

    def __init__(self, lm, optimizer="adamw", lr=1e-3, weight_decay=None, betas=None,
                 eps=None, momentum=None, lr_schedule=None, max_norm=None, numeric_profile=None,
                 progress=False, group=None, timeout=300.0, device=None,
                 _device_backend=None, **unexpected):
        if unexpected:
            name = sorted(unexpected)[0]
            raise TypeError(f"mojolearn: Trainer: unexpected argument {name!r}")
        self.numeric_profile = _profiles.require_training("numeric_profile", numeric_profile)
        where, backend = "cpu", None
        if device is not None or _device_backend is not None:
            from ..models._exec.device import resolve

            where, backend = resolve(device, "Trainer", _device_backend)
        cfg, weights = _weights_of(lm)
        if cfg.model_type in SSM_TYPES:
            _refuse_ssm(cfg, where)
        if where == "gpu":
            from . import device as _device_step

            _device_step.refuse(cfg, "Trainer", max_norm, group)
        self._setup(cfg, weights, optimizer, lr, weight_decay, betas, eps, momentum,
                    lr_schedule, max_norm, progress, group, timeout)
        if where == "gpu":
            self._dev = _device_step.DeviceTrainStep(self, backend)

    def _setup(self, cfg, weights, optimizer, lr, weight_decay, betas, eps, momentum,
               lr_schedule, max_norm, progress, group=None, timeout=300.0):
        if cfg.model_type in SSM_TYPES:
            _refuse_ssm(cfg, "cpu")
        if cfg.model_type not in M.TRAINED_TYPES + tuple(SM.MIXERS):
            raise NotImplementedError(
                f"mojolearn: Trainer: model_type {cfg.model_type!r} is not trained in this "
                f"version; the trainer computes {', '.join(M.TRAINED_TYPES + tuple(SM.MIXERS))}")
        if not isinstance(optimizer, str) or optimizer.lower() not in OPTIMIZERS:
            raise ValueError(f"mojolearn: Trainer: optimizer={optimizer!r}; use one of "
                             f"{', '.join(repr(k) for k in OPTIMIZERS)}")
        if isinstance(progress, bool):
            self._progress = 1 if progress else 0
        elif isinstance(progress, int) and progress >= 0:
            self._progress = progress
        else:
            raise TypeError(f"mojolearn: Trainer: progress must be a bool or a step interval "
                            f"(int >= 0), got {progress!r}")
        if max_norm is not None:
            if isinstance(max_norm, bool) or not isinstance(max_norm, (int, float)) \
                    or not np.isfinite(max_norm) or max_norm <= 0:
                raise ValueError(f"mojolearn: Trainer: max_norm must be a positive finite "
                                 f"number or None, got {max_norm!r}")
            max_norm = float(max_norm)
        self.config = cfg
        self.max_norm = max_norm
        self._ssm = cfg.model_type in SM.MIXERS
        self.params = (SM.Params if self._ssm else M.Params)(cfg, weights)
        del weights
        kind = optimizer.lower()
        kw = {"lr": lr, "lr_schedule": lr_schedule}
        given = {"betas": betas, "eps": eps, "momentum": momentum}
        takes = ("betas", "eps") if kind in ("adam", "adamw") else ("momentum",)
        for name, v in given.items():
            if v is None:
                continue
            if name not in takes:
                raise ValueError(f"mojolearn: Trainer: {name}= does not apply to "
                                 f"optimizer={optimizer!r} (it takes {', '.join(takes)})")
            kw[name] = tuple(v) if name == "betas" and isinstance(v, list) else v
        if weight_decay is not None:
            kw["weight_decay"] = weight_decay
        self._opt_kind = kind
        self._opt_args = {k: v for k, v in kw.items() if k != "lr_schedule"}
        self.optimizer = getattr(_optim, OPTIMIZERS[kind])(self.params.list(), **kw)
        self._schedule = lr_schedule
        self._grads = None
        self._model = None
        self._model_t = None
        self.last_loss = None
        self._rope_len = 0
        self._rope = None
        self._comm = None
        self._scratch = None
        # one step's activations and their gradients, kept for the next step (fresh
        # arrays every step faulted in their pages inside the kernels: SmolLM2-135M, 256
        # tokens, about 105,000 page faults and a fifth of the step)
        self._pool = M.BufferPool()
        self._dev = None  # the GPU path's device half (_train/device.py), when chosen
        if group is not None:
            from . import ranks as _ranks

            self._comm = _ranks.Ranks(group, timeout)
            self._comm.same_weights(self.params, self._opt_kind, self._opt_args, max_norm)

    # ------------------------------------------------------------------ inputs
    def _batch(self, ids, labels, func):
        V = self.config.vocab_size
        ids = token_ids(ids, f"Trainer.{func}: ids", V)
        B, L = ids.shape
        if B == 0 or L < 2:
            raise ValueError(f"mojolearn: Trainer.{func}: ids of shape {ids.shape}: each row "
                             f"needs at least 2 tokens (a token and its next)")
        window = getattr(self.config, "sliding_window", None)
        if window is not None and L > window:
            raise ValueError(f"mojolearn: Trainer.{func}: {L} tokens are past the model's "
                             f"sliding_window {window}, where its attention would mask; rows "
                             f"of at most {window} tokens are trained")
        if not self._ssm and L > self.config.max_position_embeddings:
            raise ValueError(f"mojolearn: Trainer.{func}: {L} tokens are past the model's "
                             f"max_position_embeddings {self.config.max_position_embeddings}")
        if labels is None:
            lab = ids
        else:
            if isinstance(labels, np.ndarray) and labels.dtype.kind not in "iu":
                raise TypeError(f"mojolearn: Trainer.{func}: labels must be integers, got "
                                f"dtype {labels.dtype}")
            arr = np.asarray(labels)
            if arr.dtype.kind not in "iu":
                raise TypeError(f"mojolearn: Trainer.{func}: labels must be integers, got "
                                f"dtype {arr.dtype}")
            if arr.ndim == 1:
                arr = arr[None, :]
            if arr.shape != ids.shape:
                raise ValueError(f"mojolearn: Trainer.{func}: labels of shape {arr.shape} "
                                 f"do not match ids of shape {ids.shape}")
            bad = (arr != M.IGNORE) & ((arr < 0) | (arr >= V))
            if bad.any():
                raise ValueError(f"mojolearn: Trainer.{func}: labels hold "
                                 f"{int(arr[bad].flat[0])}, neither -100 (ignored) nor a "
                                 f"token id in [0, {V})")
            lab = arr.astype(np.int64)
        targets = np.full((B, L), M.IGNORE, dtype=np.int64)
        targets[:, :-1] = lab[:, 1:]  # T-58
        count = int((targets != M.IGNORE).sum())
        if count == 0:
            raise ValueError(f"mojolearn: Trainer.{func}: no position has a target (every "
                             f"label is -100); the mean loss over zero tokens is undefined")
        return ids, targets.reshape(-1), count

    def _rope_for(self, L):
        if self._rope is None or self._rope_len < L:
            n = max(L, self._rope_len)
            cos, sin = K.rope_table(n, self.config.rotary_dim, f32_bits(self.config.rope_theta))
            self._rope = (cos, sin, TK.neg(sin))
            self._rope_len = n
        return self._rope

    def _check_accumulation(self, accumulation, B, L, func):
        if isinstance(accumulation, bool) or not isinstance(accumulation, (int, np.integer)) \
                or accumulation < 1:
            raise ValueError(f"mojolearn: Trainer.{func}: accumulation must be a positive int, "
                             f"got {accumulation!r}")
        A = int(accumulation)
        if A == 1:
            return 1
        ok = [a for a in splits_that_work(B * L) if B % a == 0] or [1]
        if A not in ok:
            raise ValueError(
                f"mojolearn: Trainer.{func}: accumulation={A} does not split a batch of {B} "
                f"rows x {L} tokens into micro-batches of whole rows on fp32.v1 leaf "
                f"boundaries (T-27); the counts that do: {ok}")
        return A

    # ------------------------------------------------------------------ gradients
    def _compute(self, ids, targets, count, A, want=True, func="step"):
        """(loss, gradient list in parameter order or None)."""
        if self._comm is not None:
            if A != 1:
                raise ValueError(f"mojolearn: Trainer.{func}: accumulation={A} with group=: "
                                 f"the ranks already split the batch; give each rank fewer "
                                 f"rows instead")
            return self._compute_group(ids, targets, count, func)
        B, L = ids.shape
        cfg = self.config
        emb = SM.EMBED if self._ssm else "model.embed_tokens.weight"
        if self._ssm:
            def run(params, i, t, d_bits, g, acc):
                return SM.loss_and_grads(params, i, t, d_bits, g, acc, pool=self._pool)
        else:
            rope = self._rope_for(L)

            def run(params, i, t, d_bits, g, acc):
                return M.loss_and_grads(params, i, t, d_bits, g, acc, rope, pool=self._pool)
        d_bits = f32_bits(float(count))
        tied = cfg.tie_word_embeddings
        emb_acc = self._emb_zeros(emb) if want else None
        parts = []
        losses = []
        rb = B // A
        for a in range(A):
            g = self._grad_buffer(a) if want else None
            losses.append(run(self.params, ids[a * rb:(a + 1) * rb],
                              targets[a * rb * L:(a + 1) * rb * L], d_bits, g, emb_acc))
            if want:
                parts.append(g)
        rows = np.ascontiguousarray(np.concatenate(losses))
        loss = _bits_f32(native().train_fold_div((_a(rows), rows.size, d_bits)))
        if not want:
            return loss, None
        names = self.params.names
        out = []
        for n in names:
            if n == emb and not tied:
                out.append(emb_acc)
                continue
            g = parts[0].arrays[n] if A == 1 else TK.tree_sum([p.arrays[n] for p in parts])
            if n == emb:  # T-57, into g: a gradient buffer the next backward writes whole
                g = K.add(g, emb_acc, g)
            out.append(np.ascontiguousarray(g))
        return loss, out

    def _compute_group(self, ids, targets, count, func):
        """T-61: this rank's rows as parts over its range of the batch's tokens, folded with
        every other rank's on every rank; (loss, gradient list), the same on every rank."""
        comm = self._comm
        B, L = ids.shape
        T, t0, rows, total = comm.layout(B, L, count, func)
        starts, o = [], 0
        for r in rows:
            starts.append((o * L, (o + r) * L))
            o += r
        cfg = self.config
        d = cfg.hidden_size
        d_bits = f32_bits(float(total))
        if self._scratch is None:
            self._scratch = self.params.grads_like()
        sums = M.PartSums(T, t0)
        if self._ssm:
            losses = SM.loss_and_grads(self.params, ids, targets, d_bits, self._scratch, None,
                                       sums=sums, pool=self._pool)
        else:
            losses = M.loss_and_grads(self.params, ids, targets, d_bits, self._scratch, None,
                                      self._rope_for(L), sums=sums, pool=self._pool)
        folded, all_losses, all_dy, all_ids = comm.fold(
            sums, T, starts, losses, sums.dx, np.ascontiguousarray(ids.reshape(-1)), d)
        loss = _bits_f32(native().train_fold_div((_a(all_losses), all_losses.size, d_bits)))
        emb = self._emb_zeros(SM.EMBED if self._ssm else "model.embed_tokens.weight")
        TK.embedding_backward_into(all_dy, all_ids, emb)  # T-13 in the batch's order
        out = []
        for n in self.params.names:
            out.append(self._folded_grad(n, folded, emb))
        return loss, out

    def _folded_grad(self, n, folded, emb):
        cfg = self.config
        if self._ssm:  # every key is a parameter's name, but the head's ("head")
            if n == SM.EMBED:
                if not cfg.tie_word_embeddings:
                    return emb
                return K.add(np.ascontiguousarray(folded["head"]), emb,
                             np.empty_like(emb))  # T-57
            if n == "lm_head.weight":
                return np.ascontiguousarray(folded["head"])
            return np.ascontiguousarray(folded[n].reshape(self.params.arrays[n].shape))
        nq = cfg.num_attention_heads * cfg.head_dim
        nk = cfg.num_key_value_heads * cfg.head_dim
        ff = cfg.intermediate_size
        if n == "model.embed_tokens.weight":
            if not cfg.tie_word_embeddings:
                return emb
            return K.add(np.ascontiguousarray(folded["head"]), emb, np.empty_like(emb))  # T-57
        if n == "lm_head.weight":
            return np.ascontiguousarray(folded["head"])
        if n.endswith(("layernorm.weight", "_norm.weight")) or n == "model.norm.weight":
            return np.ascontiguousarray(folded[n].reshape(-1))
        p, _, rest = n.rpartition("self_attn.") if "self_attn." in n else n.rpartition("mlp.")
        if rest in ("q_proj.weight", "k_proj.weight", "v_proj.weight"):
            g = folded[p + "qkv"]
            lo, hi = {"q": (0, nq), "k": (nq, nq + nk), "v": (nq + nk, nq + 2 * nk)}[rest[0]]
            return np.ascontiguousarray(g[lo:hi])
        if rest in ("q_proj.bias", "k_proj.bias", "v_proj.bias"):
            g = folded[p + "bias"].reshape(-1)
            lo, hi = {"q": (0, nq), "k": (nq, nq + nk), "v": (nq + nk, nq + 2 * nk)}[rest[0]]
            return np.ascontiguousarray(g[lo:hi])
        if rest == "qkv_proj.weight":
            return np.ascontiguousarray(folded[p + "qkv"])
        if rest == "gate_up_proj.weight":
            return np.ascontiguousarray(folded[p + "gu"])
        if rest in ("gate_proj.weight", "up_proj.weight"):
            g = folded[p + "gu"]
            return np.ascontiguousarray(g[:ff] if rest.startswith("gate") else g[ff:])
        return np.ascontiguousarray(folded[n])

    def _emb_zeros(self, emb):
        """The embedding's gradient accumulator (T-13's chain runs into it), made once
        and zeroed for each call, as the gradient buffers are reused (_grad_buffer; what
        gradients() returns are copies). A fresh one every step was a new array of the
        embedding's size (154 MB for a 50280 x 768 embedding) whose pages the zeroing
        faulted in: 6-16 ms a step, but 180-340 ms when the step came right after a
        transformers + torch step in the same process (the bench's interleaved peer;
        AMD EPYC Zen 4, Mamba-1 2-layer d768 step 574-604 -> 798-924 ms)."""
        buf = self.__dict__.get("_emb_buf")
        if buf is None:
            buf = self._emb_buf = np.zeros_like(self.params.arrays[emb])
        else:
            buf.fill(0)
        return buf

    def _grad_buffer(self, a):
        """Micro-batch a's gradient buffers, made once and reused (every entry is written
        whole by each backward)."""
        bufs = self.__dict__.setdefault("_bufs", [])
        while len(bufs) <= a:
            bufs.append(self.params.grads_like())
        return bufs[a]

    def _cpu_only(self, func):
        if self._dev is not None:
            raise NotImplementedError(
                f"mojolearn: Trainer.{func}: the GPU path runs step() only in this version; "
                f"make a Trainer with device='cpu' (the same bits) for {func}()")

    def gradients(self, ids, labels=None, accumulation=1):
        """The gradients of the mean next-token loss by checkpoint name (new arrays), no
        step taken."""
        self._cpu_only("gradients")
        ids, targets, count = self._batch(ids, labels, "gradients")
        A = self._check_accumulation(accumulation, *ids.shape, "gradients")
        _loss, grads = self._compute(ids, targets, count, A, func="gradients")
        return {n: np.array(g, copy=True) for n, g in zip(self.params.names, grads)}

    def loss(self, ids, labels=None):
        """The mean next-token loss of ids under the current weights (a float32 value)."""
        self._cpu_only("loss")
        ids, targets, count = self._batch(ids, labels, "loss")
        return self._compute(ids, targets, count, 1, want=False, func="loss")[0]

    def step(self, ids, labels=None, accumulation=1):
        """One optimizer step on the next-token loss of ids; returns that loss (before the
        step). Non-finite gradients or weights are refused by name and no step is taken."""
        t0 = time.perf_counter()
        ids, targets, count = self._batch(ids, labels, "step")
        A = self._check_accumulation(accumulation, *ids.shape, "step")
        if self._dev is not None:
            if A != 1:
                raise NotImplementedError(
                    f"mojolearn: Trainer.step: accumulation={A} is not run on the GPU path in "
                    f"this version (one batch a step); pass accumulation=1 or train with "
                    f"device='cpu'")
            loss = self._dev.step(ids, targets, count)
        else:
            loss, grads = self._compute(ids, targets, count, A)
            self.optimizer.step(grads, max_norm=self.max_norm)
        self.last_loss = loss
        self._model = None
        if self._progress and self.optimizer.t % self._progress == 0:
            dt = time.perf_counter() - t0
            print(f"mojolearn: step {self.optimizer.t}: loss {loss:.6g}, "
                  f"{ids.size / dt:.0f} tokens/s", file=sys.stderr, flush=True)
        return loss

    @property
    def t(self) -> int:
        """Optimizer steps taken."""
        return self.optimizer.t

    def weights(self) -> dict:
        """The current weights by checkpoint name (copies, float32)."""
        return {n: np.array(self.params.arrays[n], copy=True) for n in self.params.names}

    @property
    def model(self):
        """A CausalLM holding the current weights (made again after each step)."""
        if self._model is None or self._model_t != self.optimizer.t:
            w = self.weights()
            if self._ssm:
                from ..models._ssm.model import MambaLM

                self._model = MambaLM(self.config, w, numeric_profile=self.numeric_profile,
                                      source="Trainer weights", _owned=True)
            else:
                self._model = CausalLM(self.config, w, numeric_profile=self.numeric_profile,
                                       source="Trainer weights", _owned=True)
            self._model_t = self.optimizer.t
        return self._model

    # ------------------------------------------------------------------ files
    def save(self, path):
        """Write the weights, the optimizer state and settings, the step and the profile to
        a safetensors file, atomically; the same state gives the same bytes."""
        sd = self.optimizer.state_dict()
        tensors = {"weight." + n: self.params.arrays[n] for n in self.params.names}
        tensors["optimizer.exp_avg"] = np.ascontiguousarray(sd["exp_avg"], dtype=np.float32)
        tensors["optimizer.exp_avg_sq"] = np.ascontiguousarray(sd["exp_avg_sq"], dtype=np.float32)
        meta = {
            "format": FORMAT,
            "config": json.dumps(_config_dict(self.config), sort_keys=True),
            "optimizer": json.dumps({"kind": self._opt_kind, "args": _jsonable(self._opt_args),
                                     "t": int(sd["t"]),
                                     "buf_initialized": [int(v) for v in np.asarray(
                                         sd["buf_initialized"]).reshape(-1)]}, sort_keys=True),
            "schedule": json.dumps(None if self._schedule is None else self._schedule.to_dict(),
                                   sort_keys=True),
            "max_norm": json.dumps(self.max_norm),
        }
        if self._comm is None or self._comm.rank == 0:  # every rank holds the same state
            _ckpt._save(path, tensors, self.numeric_profile, meta)
        if self._comm is not None:
            self._comm.barrier("the checkpoint's write")

    @classmethod
    def resume(cls, path, numeric_profile=None, progress=False, group=None, timeout=300.0):
        """A trainer continuing from a file ``save`` wrote: its next steps equal an
        uninterrupted run's bit for bit. A file of another profile, or one that is not a
        trainer file, is refused by name."""
        ckpt, meta = _ckpt._load(path)
        if meta.get("format") != FORMAT:
            raise ValueError(f"mojolearn: Trainer.resume: {os.fspath(path)!r} is not a trainer "
                             f"file (Trainer.save writes one); to start from model weights use "
                             f"Trainer(CausalLM.load(...)) or Trainer(path)")
        profile = _rules.adopt_saved(meta, numeric_profile, what="Trainer.resume: file",
                                     use="training")
        raw = json.loads(meta["config"])
        if raw.get("model_type") in SSM_TYPES:
            from ..models._ssm.config import MambaConfig

            cfg = MambaConfig.from_dict(raw)
        else:
            cfg = ModelConfig.from_dict(raw)
        o = json.loads(meta["optimizer"])
        weights = {}
        for name, arr in ckpt.weights.items():
            if name.startswith("weight."):
                weights[name[len("weight."):]] = np.asarray(arr)
        from ..models._load.loader import split_fused

        names = SM.param_names(cfg) if cfg.model_type in SM.MIXERS else M.param_names(cfg)
        missing = [n for n in names if "weight." + n not in ckpt.weights]
        if missing:
            raise ValueError(f"mojolearn: Trainer.resume: the file lacks weight {missing[0]!r}; "
                             f"it was not written by Trainer.save for this model")
        if cfg.model_type not in SSM_TYPES:
            weights = split_fused(cfg, weights)  # phi3's stacked q/k/v and gate/up: their rows
        sched = json.loads(meta["schedule"])
        sched = None if sched is None else _schedule.schedule_from_dict(sched)
        self = cls.__new__(cls)
        self.numeric_profile = profile
        args = dict(o["args"])
        if "betas" in args:
            args["betas"] = tuple(args["betas"])
        lr = args.pop("lr")
        wd = args.pop("weight_decay", None)
        self._setup(cfg, weights, o["kind"], lr, wd, args.get("betas"), args.get("eps"),
                    args.get("momentum"), sched,
                    json.loads(meta["max_norm"]), progress, group, timeout)
        self.optimizer.load_state_dict({
            "t": o["t"], "exp_avg": np.asarray(ckpt.weights["optimizer.exp_avg"]),
            "exp_avg_sq": np.asarray(ckpt.weights["optimizer.exp_avg_sq"]),
            "buf_initialized": np.asarray(o["buf_initialized"], dtype=np.int32)})
        return self

    def save_model(self, directory):
        """A Hugging Face folder: config.json and model.safetensors (float32), which
        CausalLM.load and transformers read (with group=, rank 0 writes it and every rank
        returns once it is written)."""
        directory = os.fspath(directory)
        if self._comm is None or self._comm.rank == 0:  # with group=: rank 0 writes
            os.makedirs(directory, exist_ok=True)
            cfg = _config_dict(self.config)
            with open(os.path.join(directory, "config.json"), "w") as f:
                json.dump(cfg, f, indent=2, sort_keys=True)
            _ckpt._save(os.path.join(directory, "model.safetensors"),
                        {n: self.params.arrays[n] for n in self.params.names}, None,
                        {"format": "pt"})
        if self._comm is not None:
            self._comm.barrier("the model folder's write")


ARCH = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
        "qwen3": "Qwen3ForCausalLM", "phi3": "Phi3ForCausalLM", "mamba": "MambaForCausalLM",
        "mamba2": "Mamba2ForCausalLM"}
SSM_TYPES = ("mamba", "mamba2")


def _refuse_ssm(cfg, where):
    """What the trainer does not compute for the state-space families, refused by name
    (their data-parallel ranks, group=, run by T-61 like the transformers')."""
    if where == "gpu":
        raise NotImplementedError(
            f"mojolearn: Trainer: device='gpu' does not train a {cfg.model_type!r} model in "
            f"this version (the GPU step covers llama, mistral, qwen2); use device='cpu'")


def _config_dict(cfg) -> dict:
    if cfg.model_type == "mamba2":
        d = {
            "model_type": "mamba2", "architectures": [ARCH["mamba2"]],
            "vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size,
            "num_hidden_layers": cfg.num_hidden_layers, "state_size": 128, "expand": 2,
            "conv_kernel": 4, "n_groups": 1, "head_dim": 64, "num_heads": cfg.num_heads,
            "chunk_size": 256, "layer_norm_epsilon": 1e-5, "hidden_act": "silu",
            "use_bias": False, "use_conv_bias": True, "rms_norm": True,
            "norm_before_gate": False, "tie_word_embeddings": cfg.tie_word_embeddings,
            "torch_dtype": "float32",
        }
        if cfg.time_step_limit is not None:
            d["time_step_limit"] = list(cfg.time_step_limit)
        return d
    if cfg.model_type in SSM_TYPES:
        return {
            "model_type": cfg.model_type, "architectures": [ARCH[cfg.model_type]],
            "vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size,
            "num_hidden_layers": cfg.num_hidden_layers, "state_size": cfg.state_size,
            "expand": 2, "intermediate_size": cfg.intermediate_size, "conv_kernel": 4,
            "time_step_rank": cfg.time_step_rank, "layer_norm_epsilon": 1e-5,
            "hidden_act": "silu", "use_bias": False, "use_conv_bias": True,
            "tie_word_embeddings": cfg.tie_word_embeddings, "torch_dtype": "float32",
        }
    d = {
        "model_type": cfg.model_type, "architectures": [ARCH.get(cfg.model_type, "")],
        "vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size, "num_hidden_layers": cfg.num_hidden_layers,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads, "head_dim": cfg.head_dim,
        "rms_norm_eps": cfg.rms_norm_eps, "rope_theta": cfg.rope_theta,
        "max_position_embeddings": cfg.max_position_embeddings,
        "tie_word_embeddings": cfg.tie_word_embeddings, "hidden_act": "silu",
        "torch_dtype": "float32",
    }
    if cfg.model_type in ("qwen2", "qwen3"):
        d["use_sliding_window"] = False
    if cfg.model_type == "phi3":
        d["partial_rotary_factor"] = cfg.rotary_dim / cfg.head_dim
        d["sliding_window"] = cfg.sliding_window
        d["rope_scaling"] = None
    return d


def _jsonable(d: dict) -> dict:
    out = {}
    for k, v in d.items():
        out[k] = list(v) if isinstance(v, tuple) else v
    return out


def _source_path(lm):
    """The checkpoint a float32 model was loaded from (its weights are read again from
    there), or a refusal: low-bit weights are not trained, and a model built from a
    weights dict no longer holds its float32 values."""
    if lm.weight_format != "float32":
        raise ValueError(f"mojolearn: Trainer: the model holds its weights as "
                         f"{lm.weight_format!r}; weights stored low-bit are not trained "
                         f"(train in float32, pack after)")
    path = getattr(lm, "_source_path", None)
    if path is None:
        raise ValueError(f"mojolearn: Trainer: this {type(lm).__name__} was built from a "
                         f"weights dict, whose float32 values it no longer holds; pass the "
                         f"checkpoint's path, or build it with CausalLM.load")
    return path


def _weights_of(lm):
    """(config, float32 weights) of a CausalLM loaded from a checkpoint, or of a path."""
    from ..models._load.loader import read_model, split_fused, check_weights

    from ..models._ssm.model import MambaLM

    if isinstance(lm, (str, os.PathLike)):
        path = lm
        cfg_path = os.path.join(os.fspath(path), "config.json")
        if os.path.isdir(os.fspath(path)) and os.path.isfile(cfg_path):
            with open(cfg_path, "r", encoding="utf-8") as f:
                try:
                    mt = json.load(f).get("model_type")
                except ValueError:
                    mt = None
            if mt in SSM_TYPES:
                return _ssm_weights_of(path)
    elif isinstance(lm, MambaLM):
        return _ssm_weights_of(_source_path(lm))
    elif isinstance(lm, CausalLM):
        if type(lm) is not CausalLM:
            raise NotImplementedError(f"mojolearn: Trainer: a {type(lm).__name__} is not "
                                      f"trained in this version; the trainer computes the "
                                      f"transformer families {', '.join(M.TRAINED_TYPES)}")
        path = _source_path(lm)
    else:
        raise TypeError(f"mojolearn: Trainer: lm must be a CausalLM or a checkpoint path, got "
                        f"{type(lm).__name__}")
    cfg, weights = read_model(path, lazy=True)
    from .._ops.lowbit import BF16Weight, Int8Weight

    weights = split_fused(cfg, weights)
    check_weights(cfg, weights, f"Trainer: model {os.fspath(path)!r}")
    out = {}
    for name in list(weights):
        w = weights.pop_stored(name)
        if isinstance(w, (BF16Weight, Int8Weight)):
            raise ValueError(f"mojolearn: Trainer: tensor {name!r} is stored low-bit "
                             f"({type(w).__name__}); weights stored low-bit are not trained "
                             f"(train in float32, pack after)")
        out[name] = np.ascontiguousarray(w, dtype=np.float32)
    return cfg, out


def _ssm_weights_of(path):
    """(MambaConfig, float32 weights) of a Hugging Face mamba / mamba2 folder, every tensor
    checked as the inference model checks it (S-4, S-33); low-bit storage refused."""
    from ..models._load.loader import LazyWeights, _hf_entries, check_weights
    from ..models._ssm.config import MambaConfig
    from ..models._ssm.model import expected_shapes
    from .._ops.lowbit import BF16Weight, Int8Weight

    src = f"model {os.fspath(path)!r}"
    cfg = MambaConfig.from_file(os.path.join(os.fspath(path), "config.json"))
    weights = LazyWeights(_hf_entries(os.fspath(path)), src)
    want = expected_shapes(cfg)
    check_weights(cfg, weights, f"Trainer: {src}", want.items())
    extra = sorted(set(weights.names()) - set(want))
    if extra:
        raise ValueError(f"mojolearn: Trainer: {src}: tensor {extra[0]!r} is not read by a "
                         f"{cfg.model_type} model of this config")
    out = {}
    for name in want:
        w = weights.pop_stored(name)
        if isinstance(w, (BF16Weight, Int8Weight)):
            raise ValueError(f"mojolearn: Trainer: tensor {name!r} is stored low-bit "
                             f"({type(w).__name__}); weights stored low-bit are not trained "
                             f"(train in float32, pack after)")
        a = np.asarray(w)
        if a.dtype != np.float32:
            raise TypeError(f"mojolearn: Trainer: {src}: tensor {name!r} has dtype {a.dtype}; "
                            f"weights are float32 (mojolearn never casts silently)")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"mojolearn: Trainer: {src}: tensor {name!r} holds a NaN or "
                             f"infinite value")
        out[name] = np.ascontiguousarray(a)
    return cfg, out

"""The implementation of ``mojolearn.models.parallel``: what it computes and promises is
that public module's docstring (python/mojolearn/models/parallel.py), which re-exports
this module's public names."""
from __future__ import annotations

import atexit
import datetime
import hashlib
import os

import numpy as np

from ..._table import modes as _modes
from ..._table import profiles as _profiles
from ..._ops import ksplit as _ksplit
from ..._core.loader import cpu_native
from ..._core.threads import tasks as _tasks
from .._exec import kernels as K
from .._base.inputs import count, flag, state_size, token_ids
from .block import Layer, Proj, check_max_positions, check_weight_format
from .causal_lm import CausalLM, GenerationState
from .._base.config import ModelConfig
from .._load.loader import LazyWeights, check_weights, model_digest, read_model

LAYOUTS = ("pipeline", "tensor", "pipeline+tensor")
"""The ways ParallelCausalLM splits a model over ranks."""


TIMEOUT_MIN, TIMEOUT_MAX = 0.001, 365 * 86400.0


def _torch_dist():
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:  # pragma: no cover - torch is a test dependency here
        raise ImportError("mojolearn: ParallelCausalLM runs on torch.distributed: install torch "
                          "(pip install torch)") from e
    return torch, dist


# ----------------------------------------------------------------------------- the plan
def _split_units(units: int, parts: int):
    """parts runs of [0, units) as even as can be: [(lo, hi), ...]."""
    per, extra = divmod(units, parts)
    out, at = [], 0
    for i in range(parts):
        e = at + per + (1 if i < extra else 0)
        out.append((at, e))
        at = e
    return out


def _leaf_for(profile: str, k: int, mode: str) -> int:
    """The step the k of a split product can be cut at: fp32.v1's leaf of the whole k
    under the mode (6.7); 1 for int15i64.v1 (L-8: any split)."""
    if profile == "fixed15_v1":
        return 1
    return int(cpu_native().f32_leaf((k, _modes.kernel_code(mode))))


class _Plan:
    """Which layers, heads, key/value heads, MLP columns and vocabulary rows each rank
    holds. The same on every rank (a function of the config, the layout, the rank
    counts, the profile and the mode)."""

    def __init__(self, cfg: ModelConfig, layout, world, tensor_size, profile, mode):
        self.world = world
        if layout == "pipeline":
            T = 1
        elif layout == "tensor":
            T = world
        else:
            if tensor_size is None:
                raise ValueError("mojolearn: ParallelCausalLM: layout 'pipeline+tensor' needs "
                                 "tensor_size= (the ranks of each pipeline stage)")
            T = count(tensor_size, "ParallelCausalLM: tensor_size")
            if T < 2 or world % T or world // T < 2:
                raise ValueError(
                    f"mojolearn: ParallelCausalLM: layout 'pipeline+tensor' with {world} ranks "
                    f"needs tensor_size dividing {world} into at least 2 stages of at least 2 "
                    f"ranks; got tensor_size={T}")
        if layout != "pipeline+tensor" and tensor_size is not None and tensor_size != T:
            raise ValueError(f"mojolearn: ParallelCausalLM: tensor_size={tensor_size!r} goes "
                             f"with layout 'pipeline+tensor' only (layout {layout!r} with "
                             f"{world} ranks has {T} per stage)")
        S = world // T
        self.T, self.S = T, S
        n_layers = cfg.num_hidden_layers
        if S > n_layers:
            raise ValueError(
                f"mojolearn: ParallelCausalLM: {S} pipeline stages for a model of {n_layers} "
                f"layers: a stage holds at least one layer; use at most {n_layers} stages")
        self.layers = _split_units(n_layers, S)
        nh, nkv, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.group = nh // nkv
        nq, ff = nh * hd, cfg.intermediate_size
        self.o_leaf = _leaf_for(profile, nq, mode)
        self.down_leaf = _leaf_for(profile, ff, mode)
        # heads: boundaries h * hd on o_proj's leaf; units of `hu` heads (the last shorter)
        hu = 1
        while (hu * hd) % self.o_leaf:
            hu += 1
        h_units = -(-nh // hu)
        f_units = -(-ff // self.down_leaf)
        if T > min(h_units, f_units):
            why = (f"its {nh} attention heads of {hd} split only every {hu} heads ({hu * hd} "
                   f"columns of o_proj's k = {nq}, whose leaf is {self.o_leaf}): {h_units} "
                   f"pieces" if h_units < T else
                   f"its MLP of {ff} columns splits only every {self.down_leaf} (down_proj's "
                   f"leaf): {f_units} pieces")
            raise ValueError(
                f"mojolearn: ParallelCausalLM: this model cannot be split over {T} tensor ranks "
                f"on whole subtrees of its products (contract rule 6.7): {why}; tensor ranks "
                f"that work: 1 to {min(h_units, f_units)}")
        self.heads = [(lo * hu, min(hi * hu, nh)) for lo, hi in _split_units(h_units, T)]
        self.kv = [(h0 // self.group, (h1 - 1) // self.group + 1) for h0, h1 in self.heads]
        self.ff = [(lo * self.down_leaf, min(hi * self.down_leaf, ff))
                   for lo, hi in _split_units(f_units, T)]
        self.vocab = _split_units(cfg.vocab_size, T)

    def stage_of(self, rank):
        return rank // self.T, rank % self.T


# ----------------------------------------------------------------------------- comms
class _Comm:
    """The collectives ParallelCausalLM runs, each with the timeout and a RuntimeError
    naming the operation and this rank when it fails. numpy arrays travel as torch
    tensors sharing their memory. Made with one group of its own, ``all`` (gloo, every
    rank of the group load was given, whatever the backend of that group), which every
    rank creates alike whatever its arguments: load compares the ranks' arguments on it
    (``same_everywhere``) before ``make_groups`` makes the groups that depend on them
    (ranks that would make different groups wait on each other until the timeout)."""

    def __init__(self, group, timeout):
        torch, dist = _torch_dist()
        self.torch, self.dist = torch, dist
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError(
                "mojolearn: ParallelCausalLM.load: torch.distributed is not initialized in this "
                "process: start the program with torchrun (torchrun --nproc-per-node N run.py) "
                "and call torch.distributed.init_process_group('gloo') first")
        self.timeout = float(timeout)
        self.td = datetime.timedelta(seconds=self.timeout)
        world_group = group if group is not None else dist.group.WORLD
        self.ranks = list(dist.get_process_group_ranks(world_group))
        self.world = len(self.ranks)
        self.rank = self.ranks.index(dist.get_rank())
        self.bytes_sent = 0
        # our own groups, every rank creating every group in the same order
        self.all = dist.new_group(ranks=self.ranks, backend="gloo", timeout=self.td)
        self._groups = [self.all]
        self.closed = False
        self.stage_group = None
        # torch's gloo groups left alive at exit can abort the process (seen with torch
        # 2.13: "terminate called without an active exception" on a rank that ends while
        # another still runs); ours are destroyed first
        atexit.register(self.close)

    def make_groups(self, T):
        """The groups of the pipeline stages of T ranks (none when T is 1), every rank
        creating every group in the same order: made once the ranks are known to agree
        on T."""
        dist = self.dist
        for s in range(self.world // T):
            members = self.ranks[s * T:(s + 1) * T]
            g = dist.new_group(ranks=members, backend="gloo", timeout=self.td) if T > 1 else None
            if self.rank // T == s:
                self.stage_group = g
            if g is not None:
                self._groups.append(g)

    def close(self):
        """Destroy this model's process groups (at exit, or when the caller is done)."""
        self.closed = True
        groups, self._groups = self._groups, []
        for g in groups:
            try:
                if self.dist.is_initialized():
                    self.dist.destroy_process_group(g)
            except Exception:  # noqa: BLE001 - already gone with the default group
                pass

    def _fail(self, what, e):
        return RuntimeError(
            f"mojolearn: ParallelCausalLM rank {self.rank} of {self.world}: {what} failed "
            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}): another rank "
            f"died, hung past the timeout of {self.timeout:g} s, or ran another operation")

    def _run(self, what, start):
        if self.closed:
            raise RuntimeError(f"mojolearn: ParallelCausalLM rank {self.rank}: {what}: the model "
                               f"was closed (its process groups are released); load it again")
        try:
            work = start()
            if work is not None:
                work.wait(self.td)
        except Exception as e:  # noqa: BLE001 - every backend failure is named the same way
            if isinstance(e, RuntimeError) and str(e).startswith("mojolearn:"):
                raise
            raise self._fail(what, e) from None

    def _t(self, a):
        return self.torch.from_numpy(a)

    def all_gather(self, a, group, n, what):
        """n arrays like a (C-contiguous), rank order of the group."""
        out = [np.empty_like(a) for _ in range(n)]
        self.bytes_sent += a.nbytes
        self._run(what, lambda: self.dist.all_gather([self._t(o) for o in out], self._t(a),
                                                      group=group, async_op=True))
        return out

    def max_(self, a, group, what):
        """a <- the elementwise max over the group (exact, any order)."""
        self.bytes_sent += a.nbytes
        self._run(what, lambda: self.dist.all_reduce(self._t(a), op=self.dist.ReduceOp.MAX,
                                                      group=group, async_op=True))
        return a

    def send(self, a, rank, what):
        self.bytes_sent += a.nbytes
        self._run(what, lambda: self.dist.isend(self._t(a), self.ranks[rank], group=self.all))

    def recv(self, a, rank, what):
        self._run(what, lambda: self.dist.irecv(self._t(a), self.ranks[rank], group=self.all))
        return a

    def broadcast(self, a, src, what):
        if self.rank == src:
            self.bytes_sent += a.nbytes
        self._run(what, lambda: self.dist.broadcast(self._t(a), self.ranks[src], group=self.all,
                                                     async_op=True))
        return a

    def barrier(self, what):
        self._run(what, lambda: self.dist.barrier(group=self.all, async_op=True))

    def same_everywhere(self, text: str, what: str, fields=None,
                        way_out="every rank must do the same"):
        """Refuse unless every rank passed the same text; names the ranks that differ
        (and, with fields, the "|"-separated fields that differ)."""
        raw = text.encode()[:4096]
        buf = np.zeros(4096 + 8, dtype=np.uint8)
        buf[:8] = np.frombuffer(np.int64(len(raw)).tobytes(), dtype=np.uint8)
        buf[8:8 + len(raw)] = np.frombuffer(raw, dtype=np.uint8)
        got = self.all_gather(buf, self.all, self.world, what)
        texts = [bytes(g[8:8 + int(np.frombuffer(g[:8].tobytes(), np.int64)[0])]).decode(
            errors="replace") for g in got]
        bad = [r for r, t in enumerate(texts) if t != texts[0]]
        if bad:
            r = bad[0]
            diff = ""
            if fields:
                a, b = texts[0].split("|"), texts[r].split("|")
                diff = "; ".join(f"{f}: rank 0 {x!r}, rank {r} {y!r}"
                                 for f, x, y in zip(fields, a, b) if x != y)
            raise ValueError(f"mojolearn: ParallelCausalLM: {what}: rank {r} differs from rank "
                             f"0 ({diff or texts[r][:200]}); {way_out}")


def _ids_text(a):
    """What ranks compare of token ids (an int64 array): shape and sha256 of the bytes."""
    return f"{a.shape}:{hashlib.sha256(a.tobytes()).hexdigest()}"


# ----------------------------------------------------------------------------- weights
def _part(weights, name, rows=None, cols=None):
    """Rows and / or columns of a checkpoint tensor as a C-contiguous float32 array:
    read as a part where the reader can (LazyWeights.part), else read and sliced."""
    if isinstance(weights, LazyWeights):
        return weights.part(name, rows, cols)
    w = np.asarray(weights[name])
    if rows is not None:
        w = w[rows[0]:rows[1]]
    if cols is not None:
        w = w[:, cols[0]:cols[1]]
    return np.ascontiguousarray(w, dtype=np.float32) if w.dtype == np.float32 else w


class _KSplitProj:
    """A weight (n, k) of which this rank holds the columns [k0, k1): its part of x @ w.T
    for x's columns [k0, k1), the parts of the stage's ranks all-gathered and folded by
    every rank (contract 6.7 / L-8). Weights held as Proj would hold them, quantized with
    the whole rows' exponents (row_absmax all-reduced with MAX at load)."""

    def __init__(self, w, k0, k1, k, profile, weight_format, mode, comm, plan_ranges):
        self.n = w.shape[0]
        self.k0, self.k1, self.k = k0, k1, k
        self.comm = comm
        self.ranges = plan_ranges  # [(k0, k1)] of every rank of the stage
        self.fixed15 = profile == "fixed15_v1"
        self.kernel_mode = _modes.kernel_code(mode)
        g = comm.stage_group
        T = len(plan_ranges)

        def whole_row_absmax(x):
            return comm.max_(np.asarray(K.row_absmax(x)), g, "load: the weight's row absmax")

        if weight_format == "bfloat16":
            bits = K.to_bf16(w)
            if not self.fixed15:
                self._prep(bits, "bfloat16")
                return
            w = K.from_bf16(bits)
        elif weight_format == "int8":
            codes, e = K.quantize8_part(w, whole_row_absmax(w))
            if not self.fixed15:
                self._prep((codes, e), "int8")
                return
            w = K.dequantize8(codes, e)
        if self.fixed15:
            self.format = "int15"
            self.wq = K.quantize15_part(w, whole_row_absmax(w))
        else:
            self._prep(w, "float32")
        del T

    def _prep(self, w, fmt):
        """fp32_v1: one prepared weight per tree node of [k0, k1) (6.7), read by the
        kernel with the whole product's leaf (mode -leaf)."""
        self.format = fmt
        self.leaf = int(cpu_native().f32_leaf((self.k, self.kernel_mode)))
        n_leaves = -(-self.k // self.leaf)
        self.nodes = _ksplit._nodes(self.k0 // self.leaf, -(-self.k1 // self.leaf), n_leaves)
        self.cols = [(lo * self.leaf - self.k0, min(hi * self.leaf, self.k) - self.k0)
                     for lo, hi in self.nodes]
        self.panels = []
        for c0, c1 in self.cols:
            if fmt == "int8":
                codes, e = w
                self.panels.append(K.prepare_nt_int8(np.ascontiguousarray(codes[:, c0:c1]), e))
            else:
                self.panels.append(K.prepare_nt(np.ascontiguousarray(w[:, c0:c1])))
        # the node count of every rank's range (the gathered parts are padded to the most)
        self.counts = [len(_ksplit._nodes(a // self.leaf, -(-b // self.leaf), n_leaves))
                       for a, b in self.ranges]

    def nbytes(self):
        if self.fixed15:
            return sum(a.nbytes for a in self.wq)
        return sum(p.nbytes for p in self.panels)

    def __call__(self, x):
        """x (rows, k1 - k0) float32 -> the whole product (rows, n), the same on every
        rank of the stage."""
        rows = x.shape[0]
        comm = self.comm
        g = comm.stage_group
        T = len(self.ranges)
        if self.fixed15:
            am = comm.max_(np.asarray(K.row_absmax(x)), g, "the activations' row absmax")
            xq = K.quantize15_part(x, am)
            sums = K.int_sums(xq, self.wq, rows, self.n, self.k1 - self.k0)
            got = comm.all_gather(sums, g, T, "the parts of a split product")
            parts = [_ksplit.PartialProduct._made("int15i64.v1", got[r], self.k, a, b, 0, (),
                                                  rows, self.n, xq[2], self.wq[2])
                     for r, (a, b) in enumerate(self.ranges)]
            return np.asarray(_ksplit.fold_parts(parts))
        mx = max(self.counts)
        vals = np.empty((mx, rows, self.n), dtype=np.float32)
        whole = len(self.cols) == 1
        for i, (c0, c1) in enumerate(self.cols):
            xs = x if whole else np.ascontiguousarray(x[:, c0:c1])
            K.gemm_prepared(xs, rows, self.panels[i], vals[i], -self.leaf)
        if len(self.cols) < mx:
            vals[len(self.cols):] = 0  # padding, never read
        got = comm.all_gather(vals, g, T, "the parts of a split product")
        parts = [_ksplit.PartialProduct._made(
            "fp32.v1", got[r][:self.counts[r]], self.k, a, b, self.leaf,
            _ksplit._nodes(a // self.leaf, -(-b // self.leaf), -(-self.k // self.leaf)),
            rows, self.n) for r, (a, b) in enumerate(self.ranges)]
        return np.asarray(_ksplit.fold_parts(parts))


class _TensorLayer(Layer):
    """One block's part on a tensor rank: its heads (and the key/value heads they read),
    its MLP columns; o_proj and down_proj folded across the stage (see module doc).
    Layer.forward's steps, with these weights, _KSplitProj for o / down and the
    attention of this rank's heads."""

    def __init__(self, weights, prefix, cfg, plan, t, profile, weight_format, mode, comm):
        p = prefix
        hd = cfg.head_dim
        self.hd = hd
        self.rot = cfg.rotary_dim
        self.qn = self.kn = None
        if cfg.qk_norm:  # one weight of head_dim each, shared by every head (M-33)
            self.qn = np.ascontiguousarray(_part(weights, p + "self_attn.q_norm.weight"))
            self.kn = np.ascontiguousarray(_part(weights, p + "self_attn.k_norm.weight"))
        self.h0, self.h1 = plan.heads[t]
        self.kv0, self.kv1 = plan.kv[t]
        self.group = plan.group
        self.nh, self.kvh = self.h1 - self.h0, self.kv1 - self.kv0
        self.fixed15 = profile == "fixed15_v1"
        self.eps_bits = K.f32_bits(cfg.rms_norm_eps)
        self.ln1 = np.ascontiguousarray(_part(weights, p + "input_layernorm.weight"))
        self.ln2 = np.ascontiguousarray(_part(weights, p + "post_attention_layernorm.weight"))
        qr, kr = (self.h0 * hd, self.h1 * hd), (self.kv0 * hd, self.kv1 * hd)
        qkv = np.concatenate([_part(weights, p + "self_attn.q_proj.weight", rows=qr),
                              _part(weights, p + "self_attn.k_proj.weight", rows=kr),
                              _part(weights, p + "self_attn.v_proj.weight", rows=kr)], axis=0)
        self.qkv = Proj(qkv, profile, weight_format, mode)
        del qkv
        self.bias = None
        if cfg.qkv_bias:
            self.bias = np.ascontiguousarray(np.concatenate([
                np.asarray(weights[p + "self_attn.q_proj.bias"])[qr[0]:qr[1]],
                np.asarray(weights[p + "self_attn.k_proj.bias"])[kr[0]:kr[1]],
                np.asarray(weights[p + "self_attn.v_proj.bias"])[kr[0]:kr[1]]]))
        nq = cfg.num_attention_heads * hd
        self.o = _KSplitProj(_part(weights, p + "self_attn.o_proj.weight", cols=qr), qr[0], qr[1],
                             nq, profile, weight_format, mode, comm,
                             [(a * hd, b * hd) for a, b in plan.heads])
        f0, f1 = plan.ff[t]
        self.ff = f1 - f0
        gu = np.concatenate([_part(weights, p + "mlp.gate_proj.weight", rows=(f0, f1)),
                             _part(weights, p + "mlp.up_proj.weight", rows=(f0, f1))], axis=0)
        self.gu = Proj(gu, profile, weight_format, mode)
        del gu
        self.down = _KSplitProj(_part(weights, p + "mlp.down_proj.weight", cols=(f0, f1)), f0, f1,
                                cfg.intermediate_size, profile, weight_format, mode, comm,
                                plan.ff)

    def _attention(self, q, kt, vc, B, L, pos0, tmax):
        """Rule M-11 .. M-15 for this rank's heads: head h reads key/value head h // group;
        one kernel call when the heads are whole groups, else one per run of heads
        sharing a key/value head and per sequence (the same per-head arithmetic)."""
        hd, nq = self.hd, self.nh * self.hd
        rows = B * L
        ctx = np.empty((rows, nq), dtype=np.float32)
        if self.h0 % self.group == 0 and self.nh % self.group == 0:  # whole groups
            return K.attention(q, nq, kt, vc, ctx, B, L, self.nh, self.kvh, hd, pos0, tmax,
                               self.fixed15)
        runs = []
        for i in range(self.nh):
            j = (self.h0 + i) // self.group - self.kv0
            if runs and runs[-1][0] == j:
                runs[-1][2] = i + 1
            else:
                runs.append([j, i, i + 1])
        nat = cpu_native()
        qa, kta, va = K._a(q), K._a(kt), K._a(vc)
        for j, i0, i1 in runs:
            run = i1 - i0
            tmp = np.empty((L, run * hd), dtype=np.float32)
            for b in range(B):
                nat.nn_attention((
                    qa + 4 * (b * L * nq + i0 * hd), nq,
                    kta + 4 * (b * self.kvh + j) * hd * tmax,
                    va + 4 * (b * self.kvh + j) * tmax * hd,
                    K._a(tmp), 1, L, run, 1, hd, pos0, tmax, int(self.fixed15), _tasks()))
                ctx[b * L:(b + 1) * L, i0 * hd:i1 * hd] = tmp
        return ctx

# ----------------------------------------------------------------------------- states
class ParallelGenerationState:
    """This rank's part of a KV cache: the keys and values of its layers and key/value
    heads, float32 as GenerationState lays them out, and the number of tokens cached.
    Made by ``ParallelCausalLM.allocate_state`` / ``resume``; refused by any other
    model or rank."""

    def __init__(self, key, numeric_profile, batch, max_tokens, layers, kv_heads, head_dim):
        self.model_key = key
        self.numeric_profile = numeric_profile
        self.numeric_mode = "identical"
        self.batch_size = batch
        self.max_tokens = max_tokens
        self.length = 0
        self.kt = np.zeros((layers, batch, kv_heads, head_dim, max_tokens), dtype=np.float32)
        self.v = np.zeros((layers, batch, kv_heads, max_tokens, head_dim), dtype=np.float32)

    def __repr__(self):
        return (f"ParallelGenerationState(batch_size={self.batch_size}, length={self.length}, "
                f"max_tokens={self.max_tokens}, numeric_profile={self.numeric_profile!r}, "
                f"numeric_mode={self.numeric_mode!r})")


class _StateFile:
    """CausalLM's state file, written and read with CausalLM's own code (the same format
    and checks), for a model known by its config, profile, format, mode and limit."""

    _check_state = CausalLM._check_state
    save_state = CausalLM.save_state
    resume = CausalLM.resume

    device = "cpu"  # the whole state is assembled in host memory
    _gpu = None

    def __init__(self, lm):
        self.config = lm.config
        self.numeric_profile = lm.numeric_profile
        self.numeric_mode = lm.numeric_mode
        self.weight_format = lm.weight_format
        self.max_positions = lm.max_positions
        self._key = f"{lm.config.fingerprint()}:{lm.numeric_profile}:{lm.weight_format}"


# ----------------------------------------------------------------------------- the model
class ParallelCausalLM:
    """A Llama-family causal LM split over the ranks of a torch.distributed process group
    (family ``transformer``), with ``CausalLM``'s logits bit for bit (see the module
    docstring for the layouts and why).

    ``ParallelCausalLM.load(path, *, layout="tensor", tensor_size=None,
    numeric_profile=None, weight_format="float32", max_positions=None,
    numeric_mode=None, group=None, timeout=300.0)``, called on every rank of ``group``
    (default: the whole world) after ``torch.distributed.init_process_group``. The API
    is CausalLM's: ``forward``, ``allocate_state``, ``step``, ``generate``,
    ``generate_text``, ``save_state`` / ``resume``; every rank passes the same
    arguments and gets the same result. ``bytes_sent`` counts what this rank sent.
    """

    device = "cpu"  # the ranks compute on the CPU build in this version
    _gpu = None

    def __init__(self, *a, **kw):
        raise TypeError("mojolearn: ParallelCausalLM is made by ParallelCausalLM.load(path, ...) "
                        "on every rank of a torch.distributed process group")

    @classmethod
    def load(cls, path, *, layout="tensor", tensor_size=None, numeric_profile=None,
             weight_format="float32", max_positions=None, numeric_mode=None, group=None,
             timeout=300.0):
        """Load this rank's part of a Hugging Face directory or a .gguf file (see the class
        docstring). Refused by name before any tensor is read: a bad layout or timeout,
        a process group that is not initialized, a model that cannot be split so. Every
        rank hashes every file of its checkpoint (model_digest: the checkpoint is read
        once more, in 4 MiB chunks) and the ranks compare, before any group that depends
        on the arguments is made, that digest, the model's shape, the profile, weight
        format, mode, layout, tensor_size and max_positions: ranks that differ are
        refused on every rank, naming the fields."""
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"mojolearn: ParallelCausalLM.load: path must be a str or "
                            f"os.PathLike, got {type(path).__name__}")
        if not isinstance(layout, str) or layout not in LAYOUTS:
            raise ValueError(f"mojolearn: ParallelCausalLM.load: layout={layout!r} is not one of "
                             f"{', '.join(LAYOUTS)}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise ValueError(f"mojolearn: ParallelCausalLM.load: timeout must be a number of "
                             f"seconds, got {timeout!r}")
        # torch.distributed keeps whole milliseconds (below one it waits forever) and a
        # datetime.timedelta at most 10^9 days: refused by name rather than rounded to 0
        # or raised as a bare OverflowError
        try:
            ok = TIMEOUT_MIN <= float(timeout) <= TIMEOUT_MAX
        except OverflowError:  # an int past float's range
            ok = False
        if not ok:
            raise ValueError(f"mojolearn: ParallelCausalLM.load: timeout must be a finite "
                             f"number of seconds in [{TIMEOUT_MIN:g}, {TIMEOUT_MAX:g}] (a "
                             f"millisecond to a year), got {timeout!r}")
        mode = _modes.resolve(numeric_mode)
        profile = _profiles.resolve(numeric_profile, what="numeric_profile", use="inference",
                                    family="transformer")
        check_weight_format(weight_format)
        self = object.__new__(cls)
        self.numeric_mode, self.numeric_profile, self.weight_format = mode, profile, weight_format
        self.layout = layout
        comm = _Comm(group, timeout)  # refuses a process that is not in a process group
        self.comm = comm
        self.rank, self.world_size = comm.rank, comm.world
        self.path = os.fspath(path)
        try:
            self._agree_and_build(path, tensor_size, max_positions)
        except BaseException:
            comm.close()  # a refused or failed load keeps no process group
            raise
        return self

    def _agree_and_build(self, path, tensor_size, max_positions):
        """load's work once this model's first group is made: the ranks' agreement on
        what to load, then the plan, the stage groups and this rank's weights."""
        comm, layout, mode = self.comm, self.layout, self.numeric_mode
        profile, weight_format = self.numeric_profile, self.weight_format
        # what this rank would load, compared across ranks on the one group every rank
        # makes alike, before the groups that depend on the arguments (ranks making
        # different groups would wait on each other until the timeout). A rank that
        # cannot read its checkpoint or whose max_positions is refused still takes part,
        # so the others name it at once; it raises its own error after.
        local = None
        try:
            cfg, weights = read_model(path, lazy=True)
            shape_text, digest = cfg.fingerprint(), model_digest(path)
        except Exception as e:  # noqa: BLE001 - raised below, after the others are told
            local, cfg = e, None
            shape_text = digest = f"unreadable ({type(e).__name__})"
        limit_text = str(max_positions)
        if cfg is not None:
            try:
                self.max_positions = check_max_positions(
                    max_positions, cfg.max_position_embeddings, cfg.sliding_window)
                limit_text = str(self.max_positions)
            except Exception as e:  # noqa: BLE001 - as above
                local, limit_text = e, f"refused ({type(e).__name__})"
        fields = ["model shape", "weights", "numeric_profile", "weight_format", "numeric_mode",
                  "layout", "tensor_size", "max_positions"]
        try:
            comm.same_everywhere(
                "|".join([shape_text, digest, profile, weight_format, mode, layout,
                          str(tensor_size), limit_text]), "load", fields,
                "every rank must pass the same arguments and load the same checkpoint files "
                "(weights: a sha256 of every file the model is read from; 'unreadable' or "
                "'refused': that rank raised its own error)")
        except (ValueError, RuntimeError):
            if local is None:
                raise
        if local is not None:
            raise local
        self.config = cfg
        plan = _Plan(cfg, layout, comm.world, tensor_size, profile, mode)
        self.plan = plan
        self.tensor_size, self.pipeline_size = plan.T, plan.S
        self.stage, self.tensor_rank = plan.stage_of(comm.rank)
        check_weights(cfg, weights, f"model {os.fspath(path)!r}")
        comm.make_groups(plan.T)
        self._build(weights)
        self._key = (f"{cfg.fingerprint()}:{profile}:{weight_format}:{layout}:{plan.T}:"
                     f"{comm.rank}")
        comm.barrier("load")

    def _build(self, weights):
        cfg, plan, t = self.config, self.plan, self.tensor_rank
        prof, fmt, mode = self.numeric_profile, self.weight_format, self.numeric_mode
        l0, l1 = plan.layers[self.stage]
        self.first, self.last = self.stage == 0, self.stage == plan.S - 1
        self.layer_range = (l0, l1)
        self.embed = self.head = self.norm = None
        if self.first:
            self.embed = np.ascontiguousarray(_part(weights, "model.embed_tokens.weight"))
        if self.last:
            self.norm = np.ascontiguousarray(_part(weights, "model.norm.weight"))
            v0, v1 = plan.vocab[t]
            name = "model.embed_tokens.weight" if cfg.tie_word_embeddings else "lm_head.weight"
            self.vocab_range = (v0, v1)
            self.head = Proj(_part(weights, name, rows=(v0, v1)), prof, "float32", mode)
        self.layers = []
        for i in range(l0, l1):
            p = f"model.layers.{i}."
            if plan.T == 1:
                self.layers.append(Layer(
                    lambda n: np.asarray(weights[n]), p, n_heads=cfg.num_attention_heads,
                    n_kv_heads=cfg.num_key_value_heads, head_dim=cfg.head_dim,
                    eps=cfg.rms_norm_eps, profile=prof, weight_format=fmt, numeric_mode=mode,
                    qkv_bias=cfg.qkv_bias, qk_norm=cfg.qk_norm, rot_dim=cfg.rotary_dim))
            else:
                self.layers.append(_TensorLayer(weights, p, cfg, plan, t, prof, fmt, mode, self.comm))
        self.kv_range = plan.kv[t] if plan.T > 1 else (0, cfg.num_key_value_heads)
        self.eps_bits = K.f32_bits(cfg.rms_norm_eps)
        self._rope = K.rope_table(self.max_positions, cfg.rotary_dim, K.f32_bits(cfg.rope_theta))

    def held(self) -> dict:
        """Bytes this rank holds, by format (as CausalLM.held)."""
        out = {"float32": 0}
        if self.embed is not None:
            out["float32"] += self.embed.nbytes
        if self.norm is not None:
            out["float32"] += self.norm.nbytes
        if self.head is not None:
            out[self.head.format] = out.get(self.head.format, 0) + self.head.nbytes()
        for layer in self.layers:
            for f, n in layer.held().items():
                out[f] = out.get(f, 0) + n
        return out

    def close(self):
        """Release this model's process groups (they are released at exit otherwise);
        the model cannot compute after it."""
        self.comm.close()

    @property
    def bytes_sent(self) -> int:
        """Bytes this rank has sent to the others since load (parts, activations, logits,
        checks)."""
        return self.comm.bytes_sent

    def __repr__(self):
        return (f"ParallelCausalLM(layout={self.layout!r}, rank={self.rank} of "
                f"{self.world_size}, stage {self.stage} of {self.pipeline_size} (layers "
                f"{self.layer_range[0]}..{self.layer_range[1] - 1}), tensor rank "
                f"{self.tensor_rank} of {self.tensor_size}, numeric_profile="
                f"{self.numeric_profile!r}, numeric_mode={self.numeric_mode!r})")

    # --------------------------------------------------------------- inputs and states
    _checked_ids = None  # generate's ids, compared already with its other arguments

    def _ids(self, ids, what="ids"):
        if ids is not None and ids is self._checked_ids:
            return ids
        a = token_ids(ids, what, self.config.vocab_size)
        self.comm.same_everywhere(_ids_text(a), f"{what.split(':')[0]}: the ids")
        return a

    def allocate_state(self, batch_size, max_tokens):
        """This rank's part of a new KV cache for batch_size sequences of up to max_tokens."""
        batch_size, max_tokens = state_size(batch_size, max_tokens, self.max_positions,
                                            "ParallelCausalLM.allocate_state")
        c = self.config
        return ParallelGenerationState(self._key, self.numeric_profile, batch_size, max_tokens,
                                       len(self.layers), self.kv_range[1] - self.kv_range[0],
                                       c.head_dim)

    def _check_state(self, state, B, L, func):
        if not isinstance(state, ParallelGenerationState):
            raise TypeError(f"mojolearn: {func}: state must come from this model's "
                            f"allocate_state or resume, got {type(state).__name__}")
        if state.model_key != self._key:
            raise ValueError(f"mojolearn: {func}: state was made for another model, profile, "
                             f"layout or rank ({state.model_key!r}); this rank's model is "
                             f"{self._key!r}")
        want = (len(self.layers), state.batch_size, self.kv_range[1] - self.kv_range[0],
                self.config.head_dim, state.max_tokens)
        if (not isinstance(state.kt, np.ndarray) or state.kt.shape != want
                or state.kt.dtype != np.float32 or not isinstance(state.length, int)
                or not 0 <= state.length <= state.max_tokens):
            raise ValueError(f"mojolearn: {func}: state was changed from outside; only the model "
                             f"writes a state")
        _modes.check_resume(state.numeric_mode, self.numeric_mode, f"{func}: state")
        if B is not None and B != state.batch_size:
            raise ValueError(f"mojolearn: {func}: ids have batch {B} but the state holds "
                             f"{state.batch_size} sequences")
        if state.length + L > state.max_tokens:
            raise ValueError(f"mojolearn: {func}: {L} more tokens would make "
                             f"{state.length + L}, past the state's max_tokens {state.max_tokens}")

    # --------------------------------------------------------------- compute
    _state_for = CausalLM._state_for  # this model's allocate_state / _check_state

    def _run(self, ids, state, last_only, func):
        B, L = ids.shape
        state = self._state_for(ids, state, func)
        c, comm, plan = self.config, self.comm, self.plan
        d, vocab, T = c.hidden_size, c.vocab_size, plan.T
        pos0 = state.length
        rows = B * L
        x = np.empty((rows, d), dtype=np.float32)
        if self.first:
            K.gather(self.embed, ids.reshape(-1), x)
        else:
            comm.recv(x, self.rank - T, "receiving the residual stream")
        for i, layer in enumerate(self.layers):
            layer.forward(x, B, L, pos0, state.kt[i], state.v[i], self._rope)
        if not self.last:
            comm.send(x, self.rank + T, "sending the residual stream")
        state.length = pos0 + L
        if _modes.MODES.index(self.numeric_mode) > _modes.MODES.index(state.numeric_mode):
            state.numeric_mode = self.numeric_mode
        out_rows = B if last_only else rows
        logits = np.empty((out_rows, vocab), dtype=np.float32)
        if self.last:
            if last_only:
                x = np.ascontiguousarray(x.reshape(B, L, d)[:, -1, :])
            h = K.rmsnorm(x, self.norm, self.eps_bits, np.empty_like(x))
            part = self.head(h)
            if T == 1:
                logits = part
            else:
                width = max(b - a for a, b in plan.vocab)
                pad = np.zeros((out_rows, width), dtype=np.float32)
                pad[:, :part.shape[1]] = part
                got = comm.all_gather(pad, comm.stage_group, T, "the logits' columns")
                for (a, b), g in zip(plan.vocab, got):
                    logits[:, a:b] = g[:, :b - a]
        if plan.S > 1:
            comm.broadcast(logits, (plan.S - 1) * T, "the logits")
        return logits.reshape(B, 1 if last_only else L, vocab)

    def forward(self, ids, state=None):
        """Logits (batch, length, vocab) float32 of every position, CausalLM.forward's
        bits, on every rank."""
        return self._run(self._ids(ids, "ParallelCausalLM.forward: ids"), state, False,
                         "ParallelCausalLM.forward")

    __call__ = forward

    def step(self, ids, state):
        """Append ids (batch, n) to the state; logits (batch, vocab) of the last one."""
        ids = self._ids(ids, "ParallelCausalLM.step: ids")
        if state is None:
            raise ValueError("mojolearn: ParallelCausalLM.step needs a state (allocate_state)")
        return self._run(ids, state, True, "ParallelCausalLM.step")[:, -1, :]

    def generate(self, ids, max_new_tokens, *, greedy=True, seed=None, eos_token_id=None):
        """CausalLM.generate on every rank (its loop, run by every rank on the same logits:
        the same draws). The ids and the arguments are compared across ranks first, in one
        exchange: a rank given another prompt, max_new_tokens, greedy, seed or
        eos_token_id is refused on every rank, by name; a rank whose own argument is
        refused raises its error and the others name the argument."""
        func = "ParallelCausalLM.generate"
        vocab = self.config.vocab_size
        checks = [
            ("ids", ids, lambda v: token_ids(v, f"{func}: ids", vocab)),
            ("max_new_tokens", max_new_tokens,
             lambda v: count(v, f"{func}: max_new_tokens", 0)),
            ("greedy", greedy, lambda v: flag(v, f"{func}: greedy")),
            ("seed", seed, lambda v: None if v is None else count(v, f"{func}: seed", 0)),
            ("eos_token_id", eos_token_id,
             lambda v: None if v is None else count(v, f"{func}: eos_token_id", 0)),
        ]
        local, values, texts = None, [], []
        for name, v, check in checks:
            try:
                v = check(v)
            except (TypeError, ValueError) as e:
                local = local or e
                values.append(None)
                texts.append(f"refused ({type(e).__name__})")
                continue
            values.append(v)
            texts.append(_ids_text(v) if name == "ids" else repr(v))
        try:
            self.comm.same_everywhere(
                "|".join(texts), "generate", [c[0] for c in checks],
                "every rank must call generate with the same ids and arguments ('refused': "
                "that rank raised its own error)")
        except (ValueError, RuntimeError):
            if local is None:
                raise
        if local is not None:
            raise local
        a, n, greedy, seed, eos = values
        self._checked_ids = a
        try:
            return CausalLM.generate(self, a, n, greedy=greedy, seed=seed, eos_token_id=eos)
        finally:
            self._checked_ids = None

    generate_text = CausalLM.generate_text
    _choose = staticmethod(CausalLM._choose)

    # --------------------------------------------------------------- saved states
    def save_state(self, path, state):
        """Write the whole state to one file in CausalLM's format (rank 0 writes; every
        rank returns once it is written): CausalLM.resume reads it in one process."""
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"mojolearn: ParallelCausalLM.save_state: path must be a str or "
                            f"os.PathLike, got {type(path).__name__}")
        self._check_state(state, None, 0, "ParallelCausalLM.save_state")
        c, plan, comm = self.config, self.plan, self.comm
        comm.same_everywhere(f"{os.fspath(path)}:{state.length}:{state.batch_size}:"
                             f"{state.max_tokens}:{state.numeric_mode}",
                             "save_state: the path and state")
        if self.rank == 0:
            io = _StateFile(self)
            full = GenerationState(io._key, self.numeric_profile, state.batch_size,
                                   state.max_tokens, c.num_hidden_layers,
                                   c.num_key_value_heads, c.head_dim)
            for r in range(self.world_size):
                s, t = plan.stage_of(r)
                l0, l1 = plan.layers[s]
                kv0, kv1 = plan.kv[t] if plan.T > 1 else (0, c.num_key_value_heads)
                if r == 0:
                    kt, v = state.kt, state.v
                else:
                    kt = comm.recv(np.empty((l1 - l0, state.batch_size, kv1 - kv0, c.head_dim,
                                             state.max_tokens), np.float32), r, "save_state")
                    v = comm.recv(np.empty((l1 - l0, state.batch_size, kv1 - kv0,
                                            state.max_tokens, c.head_dim), np.float32), r,
                                  "save_state")
                full.kt[l0:l1, :, kv0:kv1] = kt
                full.v[l0:l1, :, kv0:kv1] = v
            full.length = state.length
            full.numeric_mode = state.numeric_mode
            io.save_state(path, full)
        else:
            comm.send(np.ascontiguousarray(state.kt), 0, "save_state")
            comm.send(np.ascontiguousarray(state.v), 0, "save_state")
        comm.barrier("save_state")

    def resume(self, path):
        """This rank's part of a state file written by CausalLM.save_state or
        ParallelCausalLM.save_state (CausalLM.resume's checks, on every rank)."""
        full = _StateFile(self).resume(path)
        l0, l1 = self.layer_range
        kv0, kv1 = self.kv_range
        st = self.allocate_state(full.batch_size, full.max_tokens)
        st.kt[...] = full.kt[l0:l1, :, kv0:kv1]
        st.v[...] = full.v[l0:l1, :, kv0:kv1]
        st.length = full.length
        st.numeric_mode = full.numeric_mode
        self.comm.barrier("resume")
        return st


__all__ = ["ParallelCausalLM", "ParallelGenerationState", "LAYOUTS"]

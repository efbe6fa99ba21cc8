"""The implementation of ``mojolearn.models.causal_lm``: what it computes and promises is
that public module's docstring (python/mojolearn/models/causal_lm.py), which re-exports
this module's public names."""
from __future__ import annotations

import os

import numpy as np

from ..._data.recycle import Recycler
from ..._table import modes as _modes
from ..._table import profiles as _profiles
from .._exec import kernels as K
from .._base.inputs import count, flag, state_size, token_ids
from .._base.state import GenerationState
from .block import Layer, Proj, check_max_positions, check_weight_format
from .._exec.device import resolve as _resolve_device
from .._base.config import ModelConfig
from .._load.loader import LazyWeights, check_weights, model_type_of, read_model, split_fused


# the metadata save_state writes beside the profile's field (resume checks each)
STATE_KIND_KEY, STATE_KIND = "mojolearn.kind", "generation_state.v1"
STATE_MODEL_KEY, STATE_FORMAT_KEY = "mojolearn.model", "mojolearn.weight_format"
STATE_MODE_KEY = "mojolearn.numeric_mode"  # the loosest mode the state was computed under
_STATE_TENSORS = ("state.kt", "state.meta", "state.v")
FAMILY_LOADERS: dict = {}
"""model_type -> the load of a model of another family (filled by models/_ssm: the
Mamba types), so CausalLM.load takes every checkpoint the package computes."""


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class CausalLM:
    """A Llama-family causal language model computing under a numeric profile.

    ``CausalLM.load(path, weight_format="float32", numeric_profile=None, max_positions=None,
    numeric_mode=None, device=None)``. ``numeric_profile`` is the number format of the products,
    ``numeric_mode`` the promise they keep (``identical`` by default through the process
    mode; ``deterministic`` / ``fast`` run mojolearn.modes' looser fixed orders); the
    object reports both. A state carries the loosest mode it was computed under and is
    refused by a stricter model.
    ``forward(ids, state=None)`` -> float32 logits (batch, length, vocab);
    ``allocate_state(batch_size, max_tokens)``, ``step(ids, state)``,
    ``generate(ids, max_new_tokens, greedy=True, seed=None)``,
    ``generate_text(text, max_new_tokens, tokenizer=...)``, ``save_state`` / ``resume``.

    ``device``: None (the process device: mojolearn.set_device / MOJOLEARN_DEVICE, "auto"
    meaning the GPU when this install's GPU build runs here), "cpu", "gpu" or "gpu:0";
    ``lm.device`` says where it runs ("cpu" or "gpu"). On the GPU the weights are
    uploaded once (in their stored format), the KV cache lives in device memory and
    the logits are the CPU model's bits; ``forward(..., output="device")`` leaves them
    there as a DLPack tensor. A GPU asked for and not available is refused by name,
    never replaced by the CPU. States move between devices through save_state /
    resume (the same file either way).

    Token ids (every entry that takes them, and the ids a tokenizer returns) are ints:
    Python ints and numpy integers in lists / tuples / 1-D rows, or an array of any
    integer dtype (widened exactly to int64), inside [0, vocab_size). Floats (never
    truncated), bools, complex numbers, strings, objects and ints past int64 (never
    wrapped) are refused by name. A refused call changes nothing: the model and the
    state it was handed give the same bits as before on the next valid call.
    """

    def __init__(self, config: ModelConfig, weights: dict, *, weight_format="float32",
                 numeric_profile=None, max_positions=None, source="weights", _owned=False,
                 numeric_mode=None, device=None, _device_backend=None):
        self.numeric_mode = _modes.resolve(numeric_mode)
        self.numeric_profile = _profiles.resolve(numeric_profile, what="numeric_profile",
                                                 use="inference", family="transformer")
        self.weight_format = check_weight_format(weight_format)
        if not isinstance(config, ModelConfig):
            raise TypeError(f"mojolearn: CausalLM: config must be a ModelConfig, got "
                            f"{type(config).__name__}; make one with ModelConfig.from_dict "
                            f"(or load a model with CausalLM.load)")
        if not isinstance(weights, (dict, LazyWeights)):
            raise TypeError(f"mojolearn: CausalLM: weights must be a dict of name -> float32 "
                            f"array, got {type(weights).__name__}")
        if not isinstance(source, str):
            raise TypeError(f"mojolearn: CausalLM: source must be a str, got {type(source).__name__}")
        self.config = cfg = config
        self.max_positions = check_max_positions(max_positions, cfg.max_position_embeddings,
                                                 cfg.sliding_window)
        if not _owned and not isinstance(weights, LazyWeights):
            weights = dict(weights)  # the tensors are taken from a copy: the caller's dict stays whole
        weights = split_fused(cfg, weights)  # phi3's stacked q/k/v and gate/up: their rows
        for name in weights:
            if not isinstance(name, str):
                raise TypeError(f"mojolearn: {source}: weight names must be str, got "
                                f"{type(name).__name__} ({name!r})")
        self.device, backend = _resolve_device(device, "CausalLM", _device_backend)
        check_weights(cfg, weights, source)
        if not isinstance(weights, LazyWeights):  # a LazyWeights yields float32 only
            for name, w in weights.items():
                if np.asarray(w).dtype != np.float32:
                    raise TypeError(f"mojolearn: {source}: tensor {name!r} has dtype "
                                    f"{np.asarray(w).dtype}; weights are float32 after loading")
        self._key = f"{cfg.fingerprint()}:{self.numeric_profile}:{self.weight_format}"
        self._gpu = None
        self._logits = Recycler()  # large logits arrays, handed out again once let go
        if backend is not None:
            from .._gpu import program as _gpu

            _gpu.check_fits(cfg, self, backend, source)  # before anything is uploaded
            self._gpu = _gpu.GpuModel(self, backend, weights)
            self.norm = self.head = self.embed = self._rope = None
            self.layers = []
            self.eps_bits = K.f32_bits(cfg.rms_norm_eps)
            return
        # each tensor is read (a LazyWeights) or taken when its holder is made and let go
        # after, the table first: the load never holds the checkpoint as float32 at once
        pop = weights.pop

        def stored(name):
            # a LazyWeights gives the tensor as the file stores it (float32, or the bf16 /
            # int8 of a mojolearn.checkpoint file); a dict holds float32
            if isinstance(weights, LazyWeights):
                w = weights.pop_stored(name)
                return w if isinstance(w, (BF16Weight, Int8Weight)) else np.ascontiguousarray(w)
            return np.ascontiguousarray(pop(name))

        from ..._ops.lowbit import BF16Weight, Int8Weight

        embed = stored("model.embed_tokens.weight")
        self.norm = np.ascontiguousarray(weights["model.norm.weight"])
        # the head and the embedding stay the checkpoint's float32 (rule M-26), held in the
        # bytes the checkpoint stores them in (float32; bf16 or int8 from a low-bit
        # mojolearn checkpoint, whose materialized float32 they are). A tied head under
        # fp32_v1 is the one copy of the table: its prepared panels, which the gather reads
        # too (exact copies of the rows, M-2); otherwise the gather reads the table (as
        # stored, or as panels of its low-bit form) and the head holds its own form
        head = embed if cfg.tie_word_embeddings else stored("lm_head.weight")
        self.head = Proj.stored(head, self.numeric_profile, self.numeric_mode)
        del head
        if cfg.tie_word_embeddings and not self.head.fixed15:
            self.embed = None
        elif isinstance(embed, Int8Weight):
            self.embed = K.prepare_nt_int8(np.ascontiguousarray(embed.codes),
                                           np.ascontiguousarray(embed.exponents))
        elif isinstance(embed, BF16Weight):
            self.embed = K.prepare_nt(np.ascontiguousarray(embed.bits))
        else:
            self.embed = embed
        del embed
        self.layers = []
        for i in range(cfg.num_hidden_layers):
            p = f"model.layers.{i}."
            self.layers.append(Layer(
                lambda n: np.asarray(pop(n)), p, n_heads=cfg.num_attention_heads,
                n_kv_heads=cfg.num_key_value_heads, head_dim=cfg.head_dim, eps=cfg.rms_norm_eps,
                profile=self.numeric_profile, weight_format=self.weight_format,
                numeric_mode=self.numeric_mode,
                qkv_bias=cfg.qkv_bias, qk_norm=cfg.qk_norm, rot_dim=cfg.rotary_dim))
        self.eps_bits = K.f32_bits(cfg.rms_norm_eps)
        self._rope = K.rope_table(self.max_positions, cfg.rotary_dim, K.f32_bits(cfg.rope_theta))

    # ------------------------------------------------------------------ loading
    @classmethod
    def load(cls, path, *, weight_format="float32", numeric_profile=None, max_positions=None,
             numeric_mode=None, device=None, _device_backend=None):
        """A Hugging Face directory (config.json + safetensors, F32/BF16/F16) or a .gguf
        file; ``device`` as for the constructor (a GPU that is not available is refused
        before the file is read)."""
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"mojolearn: CausalLM.load: path must be a str or os.PathLike, got "
                            f"{type(path).__name__}")
        family_load = FAMILY_LOADERS.get(model_type_of(path)) if cls is CausalLM else None
        if family_load is not None:  # another family's model (the Mamba types)
            return family_load(path, weight_format=weight_format,
                               numeric_profile=numeric_profile, max_positions=max_positions,
                               numeric_mode=numeric_mode, device=device,
                               _device_backend=_device_backend)
        # refuse a bad profile or format before reading a large file
        _profiles.resolve(numeric_profile, what="numeric_profile", use="inference",
                          family="transformer")
        check_weight_format(weight_format)
        check_max_positions(max_positions, 1)
        _resolve_device(device, "CausalLM.load", _device_backend)
        cfg, weights = read_model(path, lazy=True)
        lm = cls(cfg, weights, weight_format=weight_format, numeric_profile=numeric_profile,
                 max_positions=max_positions, source=f"model {os.fspath(path)!r}", _owned=True,
                 numeric_mode=numeric_mode, device=device, _device_backend=_device_backend)
        lm._source_path = os.fspath(path)  # where a trainer reads the float32 weights again
        return lm

    def nbytes(self):
        """Bytes held by the weights (embedding, head, norms, blocks): sum of held()."""
        return sum(self.held().values())

    def kept_bytes(self) -> int:
        """Bytes of the logits arrays the model keeps to write later logits into (see
        forward); not in nbytes()."""
        return self._logits.kept_bytes()

    def release_buffers(self):
        """Let go of the logits arrays the model keeps (see forward); those still in use
        stay with their users."""
        self._logits.clear()

    def held(self) -> dict:
        """Bytes held by format: "float32" (the embedding the gather reads, a float32
        head's panels, the norms), and the projections' (and an int15 head's) format:
        "bfloat16" or "int8" panels under fp32_v1, "int15" codes under fixed15_v1. A
        tied fp32_v1 head and the embedding are one copy (a table stored low-bit is held
        in its format). On the GPU: the bytes held in device memory by the same parts."""
        if self._gpu is not None:
            return self._gpu.held()
        out = {"float32": self.norm.nbytes}
        if isinstance(self.embed, np.ndarray):
            out["float32"] += self.embed.nbytes
        elif self.embed is not None:  # a low-bit table's panels
            out[self.embed.format] = out.get(self.embed.format, 0) + self.embed.nbytes
        out[self.head.format] = out.get(self.head.format, 0) + self.head.nbytes()
        for layer in self.layers:
            for f, n in layer.held().items():
                out[f] = out.get(f, 0) + n
        return out

    # ------------------------------------------------------------------ inputs
    def _ids(self, ids, what="ids"):
        return token_ids(ids, what, self.config.vocab_size)

    def _check_state(self, state, B=None, L=0, func="CausalLM"):
        """Refuse a state that is not this model's, is not intact, holds another batch or
        has no room for L more tokens. Reads nothing but the state's fields."""
        if not isinstance(state, GenerationState):
            raise TypeError(f"mojolearn: {func}: state must come from allocate_state or resume, "
                            f"got {type(state).__name__}")
        if state.device != self.device:
            where = "host memory (a CPU model's)" if state.device == "cpu" else "GPU memory"
            raise ValueError(
                f"mojolearn: {func}: state lives in {where}, but this model runs on "
                f"{self.device!r}; a state is never copied between host and device on its own: "
                f"save_state it with its model and resume it on this one (the same file on "
                f"either device), or allocate_state on this model")
        if state.model_key != self._key:
            theirs = str(state.model_key).rsplit(":", 2)
            ours = self._key.rsplit(":", 2)
            why = ("another model" if theirs[0] != ours[0] else
                   f"another numeric profile ({theirs[1]})" if len(theirs) > 1 and theirs[1] != ours[1]
                   else f"another weight_format ({theirs[-1]})")
            raise ValueError(
                f"mojolearn: {func}: state was made for another model or profile "
                f"({state.model_key!r}: {why}); this model is {self._key!r}: allocate a state "
                f"with this model's allocate_state")
        c = self.config
        n, tmax = state.batch_size, state.max_tokens
        broken = None
        if not (_is_int(n) and _is_int(tmax) and n > 0 and 0 < tmax <= self.max_positions):
            broken = f"batch_size={n!r}, max_tokens={tmax!r}"
        elif not (_is_int(state.length) and 0 <= state.length <= tmax):
            broken = f"length={state.length!r} (max_tokens {tmax})"
        else:
            want = {"kt": (c.num_hidden_layers, n, c.num_key_value_heads, c.head_dim, tmax),
                    "v": (c.num_hidden_layers, n, c.num_key_value_heads, tmax, c.head_dim)}
            for nm, shape in want.items():
                a = getattr(state, nm)
                if self._gpu is not None:
                    if not self._gpu.state_array_ok(a, shape):
                        broken = (f"state.{nm} is {a!r}, not this model's device buffer "
                                  f"float32 {shape}")
                        break
                elif not (isinstance(a, np.ndarray) and a.dtype == np.float32 and a.shape == shape
                          and a.flags.c_contiguous and a.flags.writeable):
                    got = (f"{a.dtype} {a.shape}" if isinstance(a, np.ndarray)
                           else type(a).__name__)
                    broken = f"state.{nm} is {got}, not a writable C-contiguous float32 {shape}"
                    break
        if broken is not None:
            raise ValueError(f"mojolearn: {func}: state was changed from outside ({broken}); "
                             f"only the model writes a state: allocate a new one or resume a "
                             f"saved one")
        if state.numeric_mode not in _modes.MODES:
            raise ValueError(f"mojolearn: {func}: state was changed from outside "
                             f"(numeric_mode={state.numeric_mode!r}); only the model writes a "
                             f"state: allocate a new one or resume a saved one")
        _modes.check_resume(state.numeric_mode, self.numeric_mode, f"{func}: state")
        if B is not None and B != n:
            raise ValueError(f"mojolearn: {func}: ids have batch {B} but the state holds "
                             f"{n} sequences")
        if state.length + L > tmax:
            raise ValueError(f"mojolearn: {func}: {L} more tokens would make "
                             f"{state.length + L}, past the state's max_tokens {tmax}")

    # ------------------------------------------------------------------ compute
    def allocate_state(self, batch_size, max_tokens):
        """A new GenerationState (the KV cache) for ``batch_size`` sequences of up to
        ``max_tokens`` tokens (at most max_positions), for ``forward(ids, state)`` and
        ``step``; refused by a model of another shape or profile."""
        batch_size, max_tokens = state_size(batch_size, max_tokens, self.max_positions,
                                            "CausalLM.allocate_state")
        c = self.config
        if self._gpu is not None:
            return self._gpu.new_state(self._key, batch_size, max_tokens)
        nbytes = 2 * 4 * c.num_hidden_layers * batch_size * c.num_key_value_heads * c.head_dim \
            * max_tokens
        try:
            return GenerationState(self._key, self.numeric_profile, batch_size, max_tokens,
                                   c.num_hidden_layers, c.num_key_value_heads, c.head_dim)
        except (MemoryError, ValueError) as e:  # numpy's own subclass, or "array is too big"
            if str(e).startswith("mojolearn"):
                raise
            raise MemoryError(f"mojolearn: CausalLM.allocate_state: a state of batch_size "
                              f"{batch_size} and max_tokens {max_tokens} needs {nbytes} bytes, "
                              f"which could not be allocated; use a smaller batch") from None

    def _state_for(self, ids, state, func):
        """The state a call of ids (batch, length) runs on: the one given (checked), or a
        new one of exactly that length; refuses ids that hold no token."""
        B, L = ids.shape
        if B == 0 or L == 0:
            raise ValueError(f"mojolearn: {func}: ids of shape {ids.shape} hold no token; pass "
                             f"at least one sequence of at least one token")
        if state is None:
            if L > self.max_positions:
                raise ValueError(f"mojolearn: {func}: {L} tokens are past max_positions "
                                 f"{self.max_positions}")
            return self.allocate_state(B, L)
        self._check_state(state, B, L, func)
        return state

    def _run(self, ids, state, last_only, func, output="host"):
        B, L = ids.shape
        state = self._state_for(ids, state, func)
        vocab = self.config.vocab_size
        pos0 = state.length
        if self._gpu is not None:
            logits = self._gpu.forward(ids, state, last_only)
            self._advance(state, L)
            if output == "buffer":  # generate: the tokens are chosen on the device
                return logits
            return self._gpu.result(logits, (B, 1 if last_only else L, vocab), output)
        d = self.config.hidden_size
        rows = np.empty((B * L, d), dtype=np.float32)
        if self.embed is None:
            x = K.gather_panels(self.head.w, ids.reshape(-1), rows)
        elif isinstance(self.embed, np.ndarray):
            x = K.gather(self.embed, ids.reshape(-1), rows)
        else:
            x = K.gather_panels(self.embed, ids.reshape(-1), rows)
        for i, layer in enumerate(self.layers):
            layer.forward(x, B, L, pos0, state.kt[i], state.v[i], self._rope)
        self._advance(state, L)
        if last_only:
            x = np.ascontiguousarray(x.reshape(B, L, d)[:, -1, :])
            L = 1
        h = K.rmsnorm(x, self.norm, self.eps_bits, np.empty_like(x))
        return self.head(h, out=self._logits.empty((B * L, vocab))).reshape(B, L, vocab)

    def _advance(self, state, L):
        state.length += L
        if _modes.MODES.index(self.numeric_mode) > _modes.MODES.index(state.numeric_mode):
            state.numeric_mode = self.numeric_mode  # its cache now holds looser bits

    def _output(self, output, func):
        if output not in ("host", "device"):
            raise ValueError(f"mojolearn: {func}: output={output!r}; use 'host' (a numpy array, "
                             f"the default) or 'device' (a DLPack tensor left in GPU memory)")
        if output == "device" and self._gpu is None:
            raise ValueError(f"mojolearn: {func}: output='device' but this model runs on the "
                             f"CPU: its logits are host memory; load it with device='gpu' for "
                             f"logits left on the GPU")
        return output

    def forward(self, ids, state=None, *, output="host"):
        """Logits (batch, length, vocab) float32 of every position; with a state, the
        tokens continue the cached ones (their positions follow) and are cached.
        ids: ints (a list, a list of rows, or an integer array; 1-D is one sequence).
        output: "host" (a numpy array) or, on the GPU, "device": a DeviceTensor left in
        device memory (a DLPack producer: torch.from_dlpack / cupy.from_dlpack, no copy).
        Logits of 32 MiB or more are written into memory the model keeps: the last two
        such arrays it returned, once nothing refers to one of them any more (no
        variable, view or wrapper of it), else new memory (mojolearn._data.recycle:
        fresh pages cost every call system time, on some virtual machines hundreds of
        ms). kept_bytes() says how much it keeps, release_buffers() lets it go."""
        output = self._output(output, "CausalLM.forward")
        return self._run(self._ids(ids, "CausalLM.forward: ids"), state, False,
                         "CausalLM.forward", output)

    __call__ = forward

    def step(self, ids, state, *, output="host"):
        """Append ids (batch, n) to the state; logits (batch, vocab) of the last one
        (output as for forward)."""
        output = self._output(output, "CausalLM.step")
        ids = self._ids(ids, "CausalLM.step: ids")
        if state is None:
            raise ValueError("mojolearn: CausalLM.step needs a state (allocate_state)")
        if self._gpu is not None:
            out = self._run(ids, state, True, "CausalLM.step", output)
            if output == "device":
                out.shape = (ids.shape[0], self.config.vocab_size)
                return out
            return out[:, -1, :]
        return self._run(ids, state, True, "CausalLM.step")[:, -1, :]

    def generate(self, ids, max_new_tokens, *, greedy=True, seed=None, eos_token_id=None):
        """Continue ids (batch, length) by max_new_tokens tokens (fewer if every sequence
        reached eos_token_id). greedy: the first largest logit; else sampling with
        numpy's generator seeded with ``seed`` over the model's softmax of the logits
        (a seed with greedy=True is refused: greedy decoding draws nothing). Returns
        the int64 ids (batch, length + new); max_new_tokens=0 returns a copy of ids."""
        ids = self._ids(ids, "CausalLM.generate: ids")
        max_new_tokens = count(max_new_tokens, "CausalLM.generate: max_new_tokens", 0)
        greedy = flag(greedy, "CausalLM.generate: greedy")
        if seed is not None:
            if greedy:
                raise ValueError(f"mojolearn: CausalLM.generate: seed={seed!r} with greedy=True: "
                                 f"greedy decoding draws nothing, so the seed would be "
                                 f"ignored; pass greedy=False to sample, or no seed")
            seed = count(seed, "CausalLM.generate: seed", 0)
        if eos_token_id is not None:
            eos_token_id = count(eos_token_id, "CausalLM.generate: eos_token_id", 0)
            if eos_token_id >= self.config.vocab_size:
                raise ValueError(f"mojolearn: CausalLM.generate: eos_token_id {eos_token_id} is "
                                 f"outside the vocabulary [0, {self.config.vocab_size})")
        B, L = ids.shape
        if B == 0 or L == 0:
            raise ValueError(f"mojolearn: CausalLM.generate: ids of shape {ids.shape} hold no "
                             f"token; generate needs at least one prompt token per sequence")
        total = L + max_new_tokens
        if total > self.max_positions:
            raise ValueError(f"mojolearn: CausalLM.generate: {L} prompt + {max_new_tokens} new "
                             f"tokens are past max_positions {self.max_positions}")
        if max_new_tokens == 0:
            return ids.copy()
        rng = None if greedy else np.random.default_rng(seed)
        state = self.allocate_state(B, total - 1)
        out = [ids]
        if self._gpu is not None:  # chosen on the device: only the tokens come back
            def pick(x):
                return self._gpu.choose(self._run(x, state, True, "CausalLM.generate", "buffer"),
                                        rng)
        else:
            def pick(x):
                return self._choose(self.step(x, state), rng)
        nxt = pick(ids)
        done = np.zeros(B, dtype=bool)
        for t in range(max_new_tokens):
            if eos_token_id is not None:
                nxt = np.where(done, np.int64(eos_token_id), nxt)
                done |= nxt == eos_token_id
            out.append(nxt[:, None])
            if t + 1 == max_new_tokens or done.all():
                break
            nxt = pick(nxt[:, None])
        return np.concatenate(out, axis=1)

    @staticmethod
    def _choose(logits, rng):
        if rng is None:
            return np.argmax(logits, axis=1).astype(np.int64)
        # rule M-32, in the kernel: one draw of numpy's generator per row, in row order
        logits = np.ascontiguousarray(logits)
        if logits.dtype != np.float32:
            raise TypeError(f"mojolearn: sampling needs float32 logits, got {logits.dtype}")
        if logits.ndim != 2 or logits.shape[1] == 0:
            raise ValueError(f"mojolearn: sampling needs (batch, vocab >= 1) float32 logits, "
                             f"got shape {logits.shape}")
        r = np.array([rng.random() for _ in range(logits.shape[0])], dtype=np.float64)
        return K.sample_rows(logits, r)

    def generate_text(self, text, max_new_tokens, *, tokenizer, greedy=True, seed=None,
                      eos_token_id=None):
        """Encode text with tokenizer (a Tokenizer, or any object with encode(str) -> list
        of ints and decode(ids) -> str), generate, decode the new tokens. The ids the
        tokenizer returns are held to generate's rules (ints inside the vocabulary)."""
        if not isinstance(text, str):
            raise TypeError(f"mojolearn: CausalLM.generate_text: text must be a str, got "
                            f"{type(text).__name__}")
        if not (callable(getattr(tokenizer, "encode", None))
                and callable(getattr(tokenizer, "decode", None))):
            raise TypeError(f"mojolearn: CausalLM.generate_text: tokenizer must have encode and "
                            f"decode methods (a mojolearn.models.Tokenizer), got "
                            f"{type(tokenizer).__name__}")
        if callable(getattr(tokenizer, "check_model", None)):
            tokenizer.check_model(self)
        raw = tokenizer.encode(text)
        what = "CausalLM.generate_text: the ids tokenizer.encode returned"
        ids, ndim = token_ids(raw, what, self.config.vocab_size, want_ndim=True)
        if ndim != 1:
            raise ValueError(f"mojolearn: {what} must be one sequence (1-D), got shape "
                             f"{np.shape(raw) if ndim != 2 else ids.shape}")
        if ids.size == 0:
            raise ValueError(f"mojolearn: CausalLM.generate_text: text {text[:40]!r} encodes "
                             f"to no token; generate needs at least one prompt token")
        out = self.generate(ids, max_new_tokens, greedy=greedy, seed=seed,
                            eos_token_id=eos_token_id)
        return tokenizer.decode(out[0, ids.shape[1]:].tolist())

    # ------------------------------------------------------------------ saved states
    def save_state(self, path, state):
        """Write a generation state to a safetensors file, atomically (checkpoint.save:
        a temporary file renamed over the target; a failure part-way leaves an old file
        whole). The file carries the numeric profile, the model and the weight format."""
        from ..._io import checkpoint
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"mojolearn: CausalLM.save_state: path must be a str or "
                            f"os.PathLike, got {type(path).__name__}")
        self._check_state(state, None, 0, "CausalLM.save_state")
        c = self.config
        kt, v = self._gpu.state_to_host(state) if self._gpu is not None else (state.kt, state.v)
        meta = np.array([state.length, state.batch_size, state.max_tokens, c.num_hidden_layers,
                         c.num_key_value_heads, c.head_dim, c.hidden_size, c.vocab_size],
                        dtype=np.float32)
        checkpoint._save(path, {"state.kt": kt, "state.v": v, "state.meta": meta},
                         self.numeric_profile,
                         {STATE_KIND_KEY: STATE_KIND, STATE_MODEL_KEY: c.fingerprint(),
                          STATE_FORMAT_KEY: self.weight_format,
                          STATE_MODE_KEY: state.numeric_mode})

    def resume(self, path):
        """Read a state written by save_state. A state written under another profile,
        for another model or weight format, or one whose file was edited into something
        save_state does not write, is refused by name."""
        from ..._io import checkpoint
        from ..._ops.lowbit import BF16Weight, Int8Weight
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"mojolearn: CausalLM.resume: path must be a str or os.PathLike, "
                            f"got {type(path).__name__}")
        ck, info = checkpoint._load(path, numeric_profile=self.numeric_profile)
        where = f"CausalLM.resume: {os.fspath(path)!r}"
        if info.get(STATE_KIND_KEY) != STATE_KIND:
            raise ValueError(f"mojolearn: {where} is not a generation state written by "
                             f"save_state (its metadata {STATE_KIND_KEY!r} is "
                             f"{info.get(STATE_KIND_KEY)!r}, not {STATE_KIND!r}); pass a file "
                             f"save_state wrote")
        w = ck.weights
        if sorted(w) != list(_STATE_TENSORS):
            raise ValueError(f"mojolearn: {where} holds the tensors {sorted(w)[:6]}; a "
                             f"generation state holds {list(_STATE_TENSORS)}")
        arrays = {}
        for nm in _STATE_TENSORS:
            if isinstance(w[nm], (BF16Weight, Int8Weight)) or np.asarray(w[nm]).dtype != np.float32:
                raise ValueError(f"mojolearn: {where}: tensor {nm!r} is "
                                 f"{type(w[nm]).__name__}, not float32; the file was edited")
            arrays[nm] = np.asarray(w[nm])
        c = self.config
        model, fmt = info.get(STATE_MODEL_KEY), info.get(STATE_FORMAT_KEY)
        if model != c.fingerprint():
            raise ValueError(f"mojolearn: {where}: the state was made by another model "
                             f"({model!r}); this model is {c.fingerprint()!r}")
        if fmt != self.weight_format:
            raise ValueError(f"mojolearn: {where}: the state was made under weight_format "
                             f"{fmt!r}; this model computes with weight_format "
                             f"{self.weight_format!r}: load the model with weight_format={fmt!r}")
        saved_mode = info.get(STATE_MODE_KEY)
        if saved_mode not in _modes.MODES:
            raise ValueError(f"mojolearn: {where}: the state's {STATE_MODE_KEY!r} is "
                             f"{saved_mode!r}, not one of {', '.join(_modes.MODES)}; the file "
                             f"was edited or written before states recorded their mode")
        _modes.check_resume(saved_mode, self.numeric_mode, where)
        m = arrays["state.meta"]
        ok = m.shape == (8,) and bool(np.all(np.isfinite(m))) and bool(np.all(np.floor(m) == m)) \
            and bool(np.all((m >= 0) & (m <= 2 ** 24)))
        meta = [int(v) for v in m.tolist()] if ok else None
        if not ok or meta[3:] != [c.num_hidden_layers, c.num_key_value_heads, c.head_dim,
                                  c.hidden_size, c.vocab_size]:
            raise ValueError(f"mojolearn: {where}: tensor 'state.meta' is {m.shape} "
                             f"{m.tolist()[:8]}, not the state of this model (length, batch, "
                             f"max_tokens, then layers {c.num_hidden_layers}, kv heads "
                             f"{c.num_key_value_heads}, head_dim {c.head_dim}, hidden "
                             f"{c.hidden_size}, vocab {c.vocab_size}); the file was edited or "
                             f"made by another model")
        length, batch, tmax = meta[:3]
        if batch < 1 or tmax < 1 or not 0 <= length <= tmax:
            raise ValueError(f"mojolearn: {where}: the state says length {length}, batch "
                             f"{batch}, max_tokens {tmax}: not a state save_state writes; the "
                             f"file was edited")
        if tmax > self.max_positions:
            raise ValueError(f"mojolearn: {where}: the state holds max_tokens {tmax}, past this "
                             f"model's max_positions {self.max_positions}: load the model with "
                             f"max_positions >= {tmax}")
        want = {"state.kt": (c.num_hidden_layers, batch, c.num_key_value_heads, c.head_dim, tmax),
                "state.v": (c.num_hidden_layers, batch, c.num_key_value_heads, tmax, c.head_dim)}
        for nm, shape in want.items():
            if arrays[nm].shape != shape:
                raise ValueError(f"mojolearn: {where}: tensor {nm!r} has shape "
                                 f"{arrays[nm].shape}, the state's meta needs {shape}; the "
                                 f"file was edited")
        if self._gpu is not None:
            st = self._gpu.state_from_host(self._key, batch, tmax, arrays["state.kt"],
                                           arrays["state.v"])
        else:
            st = GenerationState(self._key, self.numeric_profile, batch, tmax, c.num_hidden_layers,
                                 c.num_key_value_heads, c.head_dim)
            st.kt[...] = arrays["state.kt"]
            st.v[...] = arrays["state.v"]
        st.length = length
        st.numeric_mode = saved_mode
        return st

__all__ = ["CausalLM", "GenerationState"]

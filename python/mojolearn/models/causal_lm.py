"""CausalLM (family ``transformer``): embedding, the blocks, the final RMSNorm and the
head, under a numeric profile, with a KV cache for generation."""
from __future__ import annotations

import os

import numpy as np

from .. import profiles as _profiles
from . import _kernels as K
from .block import Layer, Proj, check_max_positions, check_weight_format
from .config import ModelConfig
from .loader import LazyWeights, check_weights, read_model


class GenerationState:
    """The KV cache of a batch: rotated keys (layers, batch, kv_heads, head_dim, tmax)
    and raw values (layers, batch, kv_heads, tmax, head_dim), float32 (never codes),
    and the number of tokens cached. Made by ``CausalLM.allocate_state``."""

    def __init__(self, model_key, numeric_profile, batch, max_tokens, layers, kv_heads, head_dim):
        self.model_key = model_key
        self.numeric_profile = numeric_profile
        self.batch_size = batch
        self.max_tokens = max_tokens
        self.length = 0
        self.kt = np.zeros((layers, batch, kv_heads, head_dim, max_tokens), dtype=np.float32)
        self.v = np.zeros((layers, batch, kv_heads, max_tokens, head_dim), dtype=np.float32)

    def __repr__(self):
        return (f"GenerationState(batch_size={self.batch_size}, length={self.length}, "
                f"max_tokens={self.max_tokens}, numeric_profile={self.numeric_profile!r})")


class CausalLM:
    """A Llama-family causal language model computing under a numeric profile.

    ``CausalLM.load(path, weight_format="float32", numeric_profile=None, max_positions=None)``.
    ``forward(ids, state=None)`` -> float32 logits (batch, length, vocab);
    ``allocate_state(batch_size, max_tokens)``, ``step(ids, state)``,
    ``generate(ids, max_new_tokens, greedy=True, seed=None)``,
    ``generate_text(text, max_new_tokens, tokenizer=...)``, ``save_state`` / ``resume``.
    """

    def __init__(self, config: ModelConfig, weights: dict, *, weight_format="float32",
                 numeric_profile=None, max_positions=None, source="weights"):
        self.numeric_profile = _profiles.resolve(numeric_profile, what="numeric_profile",
                                                 use="inference", family="transformer")
        self.weight_format = check_weight_format(weight_format)
        self.config = cfg = config
        self.max_positions = check_max_positions(max_positions, cfg.max_position_embeddings)
        check_weights(cfg, weights, source)
        if not isinstance(weights, LazyWeights):  # a LazyWeights yields float32 only
            for name, w in weights.items():
                if np.asarray(w).dtype != np.float32:
                    raise TypeError(f"mojolearn: {source}: tensor {name!r} has dtype "
                                    f"{np.asarray(w).dtype}; weights are float32 after loading")
            weights = dict(weights)  # the tensors are taken out of it as they are held
        # each tensor is read (a LazyWeights) or taken when its holder is made and let go
        # after, the table first: the load never holds the checkpoint as float32 at once
        pop = weights.pop
        embed = np.ascontiguousarray(pop("model.embed_tokens.weight"))
        self.norm = np.ascontiguousarray(weights["model.norm.weight"])
        # the head and the embedding stay the checkpoint's float32 (rule M-26). A tied head
        # under fp32_v1 is the one copy of the table: its prepared float32 panels, which
        # the gather reads too (exact copies of the rows, M-2); otherwise the gather reads
        # the table as stored and the head holds its own form (panels, or int15 codes)
        head = embed if cfg.tie_word_embeddings else np.ascontiguousarray(pop("lm_head.weight"))
        self.head = Proj(head, self.numeric_profile, "float32")
        del head
        self.embed = None if (cfg.tie_word_embeddings and not self.head.fixed15) else embed
        del embed
        self.layers = []
        for i in range(cfg.num_hidden_layers):
            p = f"model.layers.{i}."
            self.layers.append(Layer(
                lambda n: np.asarray(pop(n)), p, n_heads=cfg.num_attention_heads,
                n_kv_heads=cfg.num_key_value_heads, head_dim=cfg.head_dim, eps=cfg.rms_norm_eps,
                profile=self.numeric_profile, weight_format=self.weight_format,
                qkv_bias=cfg.qkv_bias))
        self.eps_bits = K.f32_bits(cfg.rms_norm_eps)
        self._rope = K.rope_table(self.max_positions, cfg.head_dim, K.f32_bits(cfg.rope_theta))
        self._key = f"{cfg.fingerprint()}:{self.numeric_profile}:{self.weight_format}"

    # ------------------------------------------------------------------ loading
    @classmethod
    def load(cls, path, *, weight_format="float32", numeric_profile=None, max_positions=None):
        """A Hugging Face directory (config.json + safetensors, F32/BF16/F16) or a .gguf file."""
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"mojolearn: CausalLM.load: path must be a str or os.PathLike, got "
                            f"{type(path).__name__}")
        # refuse a bad profile or format before reading a large file
        _profiles.resolve(numeric_profile, what="numeric_profile", use="inference",
                          family="transformer")
        check_weight_format(weight_format)
        cfg, weights = read_model(path, lazy=True)
        return cls(cfg, weights, weight_format=weight_format, numeric_profile=numeric_profile,
                   max_positions=max_positions, source=f"model {os.fspath(path)!r}")

    def nbytes(self):
        """Bytes held by the weights (embedding, head, norms, blocks): sum of held()."""
        return sum(self.held().values())

    def held(self) -> dict:
        """Bytes held by format: "float32" (the embedding the gather reads, a float32
        head's panels, the norms), and the projections' (and an int15 head's) format:
        "bfloat16" or "int8" panels under fp32_v1, "int15" codes under fixed15_v1. A
        tied fp32_v1 head and the embedding are one copy."""
        out = {"float32": self.norm.nbytes + (self.embed.nbytes if self.embed is not None else 0)}
        out[self.head.format] = out.get(self.head.format, 0) + self.head.nbytes()
        for layer in self.layers:
            for f, n in layer.held().items():
                out[f] = out.get(f, 0) + n
        return out

    # ------------------------------------------------------------------ inputs
    def _ids(self, ids, what="ids"):
        if isinstance(ids, (list, tuple)):
            try:
                ids = np.array(ids, dtype=np.int64)
            except (ValueError, OverflowError, TypeError) as e:
                raise ValueError(f"mojolearn: {what} must be integers, got a list that is not "
                                 f"a rectangle of ints ({e})") from None
            if ids.ndim == 1:
                ids = ids[None, :]
        ids = np.asarray(ids)
        if ids.dtype.kind not in "iu":
            raise TypeError(f"mojolearn: {what} must be an integer array (int32/int64), got "
                            f"dtype {ids.dtype}; token ids are never cast")
        if ids.ndim == 1:
            ids = ids[None, :]
        if ids.ndim != 2:
            raise ValueError(f"mojolearn: {what} must be 2-D (batch, length), got shape {ids.shape}")
        if ids.size:
            lo, hi = int(ids.min()), int(ids.max())
            if lo < 0 or hi >= self.config.vocab_size:
                bad = lo if lo < 0 else hi
                raise ValueError(f"mojolearn: {what} holds token id {bad}, outside the "
                                 f"vocabulary [0, {self.config.vocab_size})")
        return np.ascontiguousarray(ids, dtype=np.int64)

    def _check_state(self, state, B, L):
        if not isinstance(state, GenerationState):
            raise TypeError(f"mojolearn: state must come from allocate_state or resume, got "
                            f"{type(state).__name__}")
        if state.model_key != self._key:
            raise ValueError(
                f"mojolearn: state was made for another model or profile "
                f"({state.model_key!r}); this model is {self._key!r}: allocate a state with "
                f"this model's allocate_state")
        if B != state.batch_size:
            raise ValueError(f"mojolearn: ids have batch {B} but the state holds "
                             f"{state.batch_size} sequences")
        if state.length + L > state.max_tokens:
            raise ValueError(f"mojolearn: {L} more tokens would make {state.length + L}, past "
                             f"the state's max_tokens {state.max_tokens}")

    # ------------------------------------------------------------------ compute
    def allocate_state(self, batch_size, max_tokens):
        """A new GenerationState (the KV cache) for ``batch_size`` sequences of up to
        ``max_tokens`` tokens (at most max_positions), for ``forward(ids, state)`` and
        ``step``; refused by a model of another shape or profile.
        """
        for nm, v in (("batch_size", batch_size), ("max_tokens", max_tokens)):
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ValueError(f"mojolearn: allocate_state: {nm} must be a positive int, got {v!r}")
        if max_tokens > self.max_positions:
            raise ValueError(f"mojolearn: allocate_state: max_tokens {max_tokens} is past "
                             f"max_positions {self.max_positions}")
        c = self.config
        return GenerationState(self._key, self.numeric_profile, batch_size, max_tokens,
                               c.num_hidden_layers, c.num_key_value_heads, c.head_dim)

    def _run(self, ids, state, last_only):
        B, L = ids.shape
        if B == 0 or L == 0:
            raise ValueError(f"mojolearn: ids of shape {ids.shape} hold no token; pass at "
                             f"least one sequence of at least one token")
        if state is None:
            if L > self.max_positions:
                raise ValueError(f"mojolearn: {L} tokens are past max_positions "
                                 f"{self.max_positions}")
            state = self.allocate_state(B, L)
        else:
            self._check_state(state, B, L)
        vocab = self.config.vocab_size
        pos0 = state.length
        d = self.config.hidden_size
        rows = np.empty((B * L, d), dtype=np.float32)
        if self.embed is None:
            x = K.gather_panels(self.head.w, ids.reshape(-1), rows)
        else:
            x = K.gather(self.embed, ids.reshape(-1), rows)
        for i, layer in enumerate(self.layers):
            layer.forward(x, B, L, pos0, state.kt[i], state.v[i], self._rope)
        state.length = pos0 + L
        if last_only:
            x = np.ascontiguousarray(x.reshape(B, L, d)[:, -1, :])
            L = 1
        h = K.rmsnorm(x, self.norm, self.eps_bits, np.empty_like(x))
        return self.head(h).reshape(B, L, vocab)

    def forward(self, ids, state=None):
        """Logits (batch, length, vocab) float32 of every position; with a state, the
        tokens continue the cached ones (their positions follow) and are cached."""
        return self._run(self._ids(ids), state, False)

    __call__ = forward

    def step(self, ids, state):
        """Append ids (batch, n) to the state; logits (batch, vocab) of the last one."""
        if state is None:
            raise ValueError("mojolearn: step needs a state (allocate_state)")
        return self._run(self._ids(ids), state, True)[:, -1, :]

    def generate(self, ids, max_new_tokens, *, greedy=True, seed=None, eos_token_id=None):
        """Continue ids (batch, length) by max_new_tokens tokens (fewer if every sequence
        reached eos_token_id). greedy: the first largest logit; else sampling with
        numpy's seeded generator over the model's softmax of the logits. Returns the
        int64 ids (batch, length + new)."""
        ids = self._ids(ids)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
            raise ValueError(f"mojolearn: max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
        if not isinstance(greedy, bool):
            raise TypeError(f"mojolearn: greedy must be bool, got {type(greedy).__name__}")
        B, L = ids.shape
        if L == 0:
            raise ValueError("mojolearn: generate needs at least one prompt token")
        total = L + max_new_tokens
        if total > self.max_positions:
            raise ValueError(f"mojolearn: {L} prompt + {max_new_tokens} new tokens are past "
                             f"max_positions {self.max_positions}")
        rng = None if greedy else np.random.default_rng(seed)
        state = self.allocate_state(B, max(total - 1, 1))
        out = [ids]
        logits = self.step(ids, state)
        done = np.zeros(B, dtype=bool)
        for t in range(max_new_tokens):
            nxt = self._choose(logits, rng)
            if eos_token_id is not None:
                nxt = np.where(done, eos_token_id, nxt)
                done |= nxt == eos_token_id
            out.append(nxt[:, None])
            if t + 1 == max_new_tokens or done.all():
                break
            logits = self.step(nxt[:, None], state)
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

    def generate_text(self, text, max_new_tokens, *, tokenizer, **kw):
        """Encode text, generate, decode the new tokens."""
        if not isinstance(text, str):
            raise TypeError(f"mojolearn: text must be a str, got {type(text).__name__}")
        tokenizer.check_model(self)
        ids = tokenizer.encode(text)
        out = self.generate([ids], max_new_tokens, **kw)
        return tokenizer.decode(out[0, len(ids):].tolist())

    # ------------------------------------------------------------------ saved states
    def save_state(self, path, state):
        """Write a generation state (checkpoint file carrying its numeric profile)."""
        from .. import checkpoint
        self._check_state(state, state.batch_size, 0)
        c = self.config
        meta = np.array([state.length, state.batch_size, state.max_tokens, c.num_hidden_layers,
                         c.num_key_value_heads, c.head_dim, c.hidden_size, c.vocab_size],
                        dtype=np.float32)
        checkpoint.save(path, {"state.kt": state.kt, "state.v": state.v, "state.meta": meta},
                        numeric_profile=self.numeric_profile)

    def resume(self, path):
        """Read a state written by save_state. A state written under another profile is
        refused (check_saved); the weight file itself carries no profile."""
        from .. import checkpoint
        ck = checkpoint.load(path, numeric_profile=self.numeric_profile)
        w = ck.weights
        try:
            meta = [int(v) for v in np.asarray(w["state.meta"]).tolist()]
            kt, v = np.asarray(w["state.kt"]), np.asarray(w["state.v"])
        except KeyError as e:
            raise ValueError(f"mojolearn: resume: {os.fspath(path)!r} is not a generation state "
                             f"(no {e.args[0]!r})") from None
        length, batch, tmax = meta[:3]
        c = self.config
        if meta[3:] != [c.num_hidden_layers, c.num_key_value_heads, c.head_dim, c.hidden_size,
                        c.vocab_size] or kt.shape != (c.num_hidden_layers, batch, c.num_key_value_heads,
                                                      c.head_dim, tmax):
            raise ValueError(f"mojolearn: resume: the state in {os.fspath(path)!r} was made by "
                             f"another model")
        st = GenerationState(self._key, self.numeric_profile, batch, tmax, c.num_hidden_layers,
                             c.num_key_value_heads, c.head_dim)
        st.kt[...] = kt
        st.v[...] = v
        st.length = length
        return st

__all__ = ["CausalLM", "GenerationState"]

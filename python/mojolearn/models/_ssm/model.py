"""Mamba-1 and Mamba-2 causal language models under fp32_v1 (rules S-1 .. S-35 of
contracts/ops/IDENTICAL_SSM_CONTRACT.md): the blocks, the decode state, and the
CausalLM of the two families (``CausalLM.load`` hands a mamba / mamba2 checkpoint to
``MambaLM``, a CausalLM with the same calls).

Python checks arguments, holds the weights and the state, and names the kernels;
every value is computed by the Mojo kernels (models/_exec/kernels.py)."""
from __future__ import annotations

import os

import numpy as np

from ..._data.recycle import Recycler
from ..._table import modes as _modes
from ..._table import profiles as _profiles
from .._exec import kernels as K
from .._exec.device import resolve as _resolve_device
from .._base.inputs import count, state_size
from .._load.loader import LazyWeights, _hf_entries, check_weights
from .._transformer.block import Proj, check_weight_format
from .._transformer.causal_lm import FAMILY_LOADERS, CausalLM
from . import gpu as _gpu
from .config import EPS, Q, MambaConfig, state_shapes
MAX_TOKENS = 1 << 24  # a state's largest token count (no position table bounds a Mamba)
STATE_KIND = "mamba_state.v1"
_EPS_BITS = K.f32_bits(EPS)


def _f32(w, name, where):
    a = np.asarray(w)
    if a.dtype != np.float32:
        raise TypeError(f"mojolearn: {where}: tensor {name!r} has dtype {a.dtype}; weights are "
                        f"float32 (mojolearn never casts silently)")
    if not np.all(np.isfinite(a)):
        bad = int(np.flatnonzero(~np.isfinite(a.reshape(-1)))[0])
        raise ValueError(f"mojolearn: {where}: tensor {name!r} holds a NaN or infinite value at "
                         f"flat index {bad} (rule S-33)")
    return np.ascontiguousarray(a)


def expected_shapes(cfg: MambaConfig) -> dict:
    """name -> shape of every tensor a checkpoint of this config holds (S-4, S-5)."""
    d, di, V = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    out = {"backbone.embeddings.weight": (V, d), "backbone.norm_f.weight": (d,)}
    if not cfg.tie_word_embeddings:
        out["lm_head.weight"] = (V, d)
    for i in range(cfg.num_hidden_layers):
        p = f"backbone.layers.{i}."
        out[p + "norm.weight"] = (d,)
        m = p + "mixer."
        if cfg.family == "mamba1":
            r = cfg.time_step_rank
            out.update({m + "in_proj.weight": (2 * di, d), m + "conv1d.weight": (di, 1, 4),
                        m + "conv1d.bias": (di,), m + "x_proj.weight": (r + 32, di),
                        m + "dt_proj.weight": (di, r), m + "dt_proj.bias": (di,),
                        m + "A_log": (di, 16), m + "D": (di,), m + "out_proj.weight": (d, di)})
        else:
            H, cd = cfg.num_heads, cfg.conv_channels
            out.update({m + "in_proj.weight": (2 * di + 256 + H, d), m + "conv1d.weight": (cd, 1, 4),
                        m + "conv1d.bias": (cd,), m + "dt_bias": (H,), m + "A_log": (H,),
                        m + "D": (H,), m + "norm.weight": (di,), m + "out_proj.weight": (d, di)})
    return out


class _Layer:
    """One block's weights (S-4 / S-5) and its forward over a state's layer."""

    def __init__(self, get, prefix, cfg: MambaConfig, weight_format, mode):
        p, m = prefix, prefix + "mixer."
        self.cfg = cfg
        self.norm = get(p + "norm.weight")
        self.in_proj = Proj(get(m + "in_proj.weight"), "fp32_v1", weight_format, mode)
        self.conv_w = np.ascontiguousarray(get(m + "conv1d.weight").reshape(-1, 4))
        self.conv_b = get(m + "conv1d.bias")
        self.a = K.ssm_neg_exp(get(m + "A_log"))  # S-15, from the A_log held
        self.d = get(m + "D")
        self.out_proj = Proj(get(m + "out_proj.weight"), "fp32_v1", weight_format, mode)
        if cfg.family == "mamba1":
            self.x_proj = Proj(get(m + "x_proj.weight"), "fp32_v1", weight_format, mode)
            self.dt_proj = Proj(get(m + "dt_proj.weight"), "fp32_v1", weight_format, mode)
            self.dt_bias = get(m + "dt_proj.bias")
        else:
            self.dt_bias = get(m + "dt_bias")
            self.gnorm = get(m + "norm.weight")
            lim = cfg.time_step_limit
            self.clamp = None if lim is None else (K.f32_bits(lim[0]), K.f32_bits(lim[1]))

    def held(self, out):
        f32 = [self.norm, self.conv_w, self.conv_b, self.a, self.d, self.dt_bias]
        projs = [self.in_proj, self.out_proj]
        if self.cfg.family == "mamba1":
            projs += [self.x_proj, self.dt_proj]
        else:
            f32.append(self.gnorm)
        out["float32"] = out.get("float32", 0) + sum(a.nbytes for a in f32)
        for pr in projs:
            out[pr.format] = out.get(pr.format, 0) + pr.nbytes()

    def forward(self, x, B, L, st, i, q0):
        """x (B * L, d) updated in place (S-9: x + mixer(norm(x))); st the state, i this
        layer's index in it; q0 the Mamba-2 open rows before the call."""
        cfg = self.cfg
        rows, di = B * L, cfg.intermediate_size
        h = K.ssm_norm_lanes(x, self.norm, _EPS_BITS, np.empty_like(x))
        if cfg.family == "mamba1":
            r = cfg.time_step_rank
            xz = self.in_proj(h)  # [0, di): the conv's input, [di, 2di): z
            u = K.ssm_conv(xz, 0, di, self.conv_w, self.conv_b, st.conv[i],
                           np.empty((rows, di), dtype=np.float32), B, L, True)
            xp = self.x_proj(u)  # dt_low [0, r), B [r, r + 16), C [r + 16, r + 32)
            dt = self.dt_proj(np.ascontiguousarray(xp[:, :r]))
            delta = K.ssm_softplus(dt, 0, di, self.dt_bias, dt)
            g = K.mamba1_scan(u, delta, self.a, xp, r, r + 16, self.d, xz, di, st.h[i],
                              np.empty((rows, di), dtype=np.float32), B, L)
        else:
            H, cd = cfg.num_heads, cfg.conv_channels
            zx = self.in_proj(h)  # z [0, di), xBC [di, di + cd), dt [di + cd, + H)
            xbc = K.ssm_conv(zx, di, cd, self.conv_w, self.conv_b, st.conv[i],
                             np.empty((rows, cd), dtype=np.float32), B, L, True)
            dt = K.ssm_softplus(zx, di + cd, H, self.dt_bias, np.empty((rows, H), dtype=np.float32),
                                self.clamp)
            g = K.mamba2_ssd(xbc, dt, self.a, self.d, zx, st.h[i], st.open_x[i], st.open_dt[i],
                             st.seg[i], st.cs[i], np.empty((rows, di), dtype=np.float32), B, L,
                             H, di, q0)
            g = K.ssm_norm_lanes(g, self.gnorm, _EPS_BITS, g)
        K.add(x, self.out_proj(g), x)
        return x


class MambaState:
    """The decode state of a Mamba model (S-26, S-27): per layer the conv window (batch,
    channels, 4) and the SSM state h (Mamba-1: (batch, di, 16); Mamba-2: (batch, H, 64,
    128) after the last completed chunk), and for Mamba-2 the open chunk's rows
    (post-SiLU xBC (batch, 256, di + 256) and dt (batch, 256, H)) with the segment-sum
    row (batch, H, 256) and cumulative sum (batch, H) of its last row; ``length``
    tokens so far (the open rows are ``length % 256``). Made by allocate_state /
    resume; only the model writes it."""

    device = "cpu"

    def __init__(self, key, profile, cfg: MambaConfig, batch, max_tokens):
        self.model_key, self.numeric_profile = key, profile
        self.batch_size, self.max_tokens, self.length = batch, max_tokens, 0
        self.numeric_mode = "identical"
        self.family = cfg.family
        self.open_x = self.open_dt = self.seg = self.cs = None
        for name, shape in state_shapes(cfg, batch).items():
            setattr(self, name[len("state."):], np.zeros(shape, dtype=np.float32))

    def arrays(self) -> dict:
        """name -> array of every part of the state (the tensors save_state writes)."""
        out = {"state.conv": self.conv, "state.h": self.h}
        if self.family == "mamba2":
            out.update({"state.open_x": self.open_x, "state.open_dt": self.open_dt,
                        "state.seg": self.seg, "state.cs": self.cs})
        return out

    def __repr__(self):
        return (f"MambaState(family={self.family!r}, batch_size={self.batch_size}, "
                f"length={self.length}, max_tokens={self.max_tokens})")


class MambaLM(CausalLM):
    """A Mamba-1 or Mamba-2 causal language model (``lm.family``: "mamba1" / "mamba2"),
    computing fp32_v1 whatever the process inference default (the default never reaches
    these families; naming fixed15_v1 is refused by name). The calls of CausalLM:
    forward, allocate_state, step, generate, generate_text, save_state, resume, held,
    nbytes; prefill and token-by-token decode give the same bits (S-29).
    ``weight_format`` packs the block projection matrices (S-30). ``device`` as for the
    transformer CausalLM: with "gpu" the weights are uploaded once, the decode state
    lives in device memory and every call is one program of the GPU kernels
    (_ssm/gpu.py), with the CPU model's bits; a GPU asked for and not available is
    refused by name (RuntimeError) before anything is read or uploaded;
    ``forward(..., output="device")`` leaves the logits there (a DLPack tensor); a
    state moves between devices by save_state / resume (the same file)."""

    def __init__(self, config: MambaConfig, weights, *, weight_format="float32",
                 numeric_profile=None, max_positions=None, source="weights", _owned=False,
                 numeric_mode=None, device=None, _device_backend=None):
        if not isinstance(config, MambaConfig):
            raise TypeError(f"mojolearn: MambaLM: config must be a MambaConfig, got "
                            f"{type(config).__name__}")
        self.family = config.family
        self.numeric_mode = _modes.resolve(numeric_mode)
        self.numeric_profile = _profiles.resolve(numeric_profile, what="numeric_profile",
                                                 use="inference", family=config.family)
        self.weight_format = check_weight_format(weight_format)
        self.device, backend = _resolve_device(device, "CausalLM", _device_backend)
        self._gpu = None
        self._logits = Recycler()  # large logits arrays, handed out again once let go
        self.config = cfg = config
        if max_positions is None:
            max_positions = MAX_TOKENS
        self.max_positions = count(max_positions, "CausalLM: max_positions")
        if not isinstance(weights, (dict, LazyWeights)):
            raise TypeError(f"mojolearn: CausalLM: weights must be a dict of name -> float32 "
                            f"array, got {type(weights).__name__}")
        if not _owned and not isinstance(weights, LazyWeights):
            weights = dict(weights)
        want = expected_shapes(cfg)
        lazy = isinstance(weights, LazyWeights)
        check_weights(cfg, weights, source, want.items())
        extra = sorted(set(weights.names() if lazy else weights) - set(want))
        if extra:
            raise ValueError(f"mojolearn: {source}: tensor {extra[0]!r} is not read by a "
                             f"{cfg.model_type} model of this config; nothing is dropped silently")
        get = lambda n: _f32(weights.pop(n), n, source)  # noqa: E731
        self._key = f"{cfg.fingerprint()}:{self.numeric_profile}:{self.weight_format}"
        self.eps_bits = _EPS_BITS
        self._rope = None
        if backend is not None:
            _gpu.check_fits(want, self, backend, source)  # before anything is uploaded
            self._gpu = _gpu.GpuMamba(self, backend, get)
            self.embed = self.head = self.norm = None
            self.layers = []
            return
        self.embed = get("backbone.embeddings.weight")
        head = self.embed if cfg.tie_word_embeddings else get("lm_head.weight")
        self.head = Proj(head, "fp32_v1", "float32", self.numeric_mode)
        del head
        self.norm = get("backbone.norm_f.weight")
        self.layers = [_Layer(get, f"backbone.layers.{i}.", cfg, self.weight_format,
                              self.numeric_mode) for i in range(cfg.num_hidden_layers)]

    @classmethod
    def load(cls, path, *, weight_format="float32", numeric_profile=None, max_positions=None,
             numeric_mode=None, device=None, _device_backend=None):
        """A Hugging Face mamba / mamba2 folder (config.json + safetensors); ``device`` as
        for the constructor (a GPU that is not available is refused before the folder is
        read)."""
        _resolve_device(device, "CausalLM.load", _device_backend)
        cfg = MambaConfig.from_file(os.path.join(os.fspath(path), "config.json"))
        _profiles.resolve(numeric_profile, what="numeric_profile", use="inference",
                          family=cfg.family)
        check_weight_format(weight_format)
        weights = LazyWeights(_hf_entries(os.fspath(path)), f"model {os.fspath(path)!r}")
        lm = cls(cfg, weights, weight_format=weight_format, numeric_profile=numeric_profile,
                 max_positions=max_positions, source=f"model {os.fspath(path)!r}", _owned=True,
                 numeric_mode=numeric_mode, device=device, _device_backend=_device_backend)
        lm._source_path = os.fspath(path)  # where a trainer reads the float32 weights again
        return lm

    def __repr__(self):
        c = self.config
        return (f"CausalLM(family={self.family!r}, d_model={c.hidden_size}, "
                f"layers={c.num_hidden_layers}, vocab={c.vocab_size}, "
                f"numeric_profile={self.numeric_profile!r}, weight_format={self.weight_format!r})")

    def held(self) -> dict:
        """Bytes held by format: "float32" (embedding, head, norms, conv, A, D, biases) and
        the projections' format. On the GPU: the bytes held in device memory by the same
        parts (a tied head shares the embedding's buffer)."""
        if self._gpu is not None:
            return self._gpu.held()
        out = {"float32": self.embed.nbytes + self.norm.nbytes}
        out[self.head.format] = out.get(self.head.format, 0) + self.head.nbytes()
        for layer in self.layers:
            layer.held(out)
        return out

    # ------------------------------------------------------------------ state
    def allocate_state(self, batch_size, max_tokens):
        """A new MambaState for batch_size sequences of up to max_tokens tokens."""
        batch_size, max_tokens = state_size(batch_size, max_tokens, self.max_positions,
                                            "CausalLM.allocate_state")
        if self._gpu is not None:
            return self._gpu.new_state(self._key, batch_size, max_tokens)
        return MambaState(self._key, self.numeric_profile, self.config, batch_size, max_tokens)

    def _check_state(self, state, B=None, L=0, func="CausalLM"):
        if not isinstance(state, (MambaState, _gpu.DeviceMambaState)):
            raise TypeError(f"mojolearn: {func}: state must come from allocate_state or resume "
                            f"of this model, got {type(state).__name__}")
        if state.device != self.device:
            where = "host memory (a CPU model's)" if state.device == "cpu" else "GPU memory"
            raise ValueError(
                f"mojolearn: {func}: state lives in {where}, but this model runs on "
                f"{self.device!r}; a state is never copied between host and device on its own: "
                f"save_state it with its model and resume it on this one (the same file on "
                f"either device), or allocate_state on this model")
        if state.model_key != self._key:
            raise ValueError(f"mojolearn: {func}: state was made for another model or profile "
                             f"({state.model_key!r}); this model is {self._key!r}")
        n = state.batch_size
        for nm, shape in state_shapes(self.config, n).items():
            a = state.arrays().get(nm)
            if self._gpu is not None:
                ok = self._gpu.state_array_ok(a, shape)
            else:
                ok = (isinstance(a, np.ndarray) and a.dtype == np.float32 and a.shape == shape
                      and a.flags.c_contiguous and a.flags.writeable)
            if not ok:
                raise ValueError(f"mojolearn: {func}: state was changed from outside ({nm}); "
                                 f"only the model writes a state")
        _modes.check_resume(state.numeric_mode, self.numeric_mode, f"{func}: state")
        if B is not None and B != n:
            raise ValueError(f"mojolearn: {func}: ids have batch {B} but the state holds {n} "
                             f"sequences")
        if state.length + L > state.max_tokens:
            raise ValueError(f"mojolearn: {func}: {L} more tokens would make "
                             f"{state.length + L}, past the state's max_tokens {state.max_tokens}")

    # ------------------------------------------------------------------ compute
    def _run(self, ids, state, last_only, func, output="host"):
        B, L = ids.shape
        state = self._state_for(ids, state, func)
        d, vocab = self.config.hidden_size, self.config.vocab_size
        if self._gpu is not None:
            logits = self._gpu.forward(ids, state, last_only)
            self._advance(state, L)
            if output == "buffer":  # generate: the tokens are chosen on the device
                return logits
            return self._gpu.result(logits, (B, 1 if last_only else L, vocab), output)
        x = K.gather(self.embed, ids.reshape(-1), np.empty((B * L, d), dtype=np.float32))
        q0 = state.length % Q
        for i, layer in enumerate(self.layers):
            layer.forward(x, B, L, state, i, q0)
        self._advance(state, L)
        if last_only:
            x = np.ascontiguousarray(x.reshape(B, L, d)[:, -1, :])
            L = 1
        h = K.rmsnorm(x, self.norm, self.eps_bits, np.empty_like(x))  # S-11: M-4
        return self.head(h, out=self._logits.empty((B * L, vocab))).reshape(B, L, vocab)

    # ------------------------------------------------------------------ saved states
    def save_state(self, path, state):
        """Write the state to a safetensors file, atomically, with the profile, the model,
        the weight format and the mode in its metadata."""
        from ..._io import checkpoint
        self._check_state(state, None, 0, "CausalLM.save_state")
        c = self.config
        meta = np.array([state.length, state.batch_size, state.max_tokens, c.num_hidden_layers,
                         c.hidden_size, c.vocab_size], dtype=np.float64).astype(np.float32)
        if state.length > 1 << 24 or state.max_tokens > 1 << 24:
            raise ValueError("mojolearn: CausalLM.save_state: a state past 2**24 tokens is not "
                             "saved (its counts would not be exact in the file)")
        t = self._gpu.state_to_host(state) if self._gpu is not None else dict(state.arrays())
        t["state.meta"] = meta
        checkpoint._save(path, t, self.numeric_profile,
                         {"mojolearn.kind": STATE_KIND, "mojolearn.model": c.fingerprint(),
                          "mojolearn.weight_format": self.weight_format,
                          "mojolearn.numeric_mode": state.numeric_mode})

    def resume(self, path):
        """Read a state written by save_state of a model of this config, profile and
        weight format; anything else is refused by name."""
        from ..._io import checkpoint
        ck, info = checkpoint._load(path, numeric_profile=self.numeric_profile)
        where = f"CausalLM.resume: {os.fspath(path)!r}"
        if info.get("mojolearn.kind") != STATE_KIND:
            raise ValueError(f"mojolearn: {where} is not a Mamba state written by save_state "
                             f"(kind {info.get('mojolearn.kind')!r})")
        c = self.config
        if info.get("mojolearn.model") != c.fingerprint():
            raise ValueError(f"mojolearn: {where}: the state was made by another model "
                             f"({info.get('mojolearn.model')!r}); this model is "
                             f"{c.fingerprint()!r}")
        if info.get("mojolearn.weight_format") != self.weight_format:
            raise ValueError(f"mojolearn: {where}: the state was made under weight_format "
                             f"{info.get('mojolearn.weight_format')!r}; this model computes "
                             f"with {self.weight_format!r}")
        mode = info.get("mojolearn.numeric_mode")
        if mode not in _modes.MODES:
            raise ValueError(f"mojolearn: {where}: numeric_mode {mode!r} is not a mode")
        _modes.check_resume(mode, self.numeric_mode, where)
        w = ck.weights
        m = np.asarray(w.get("state.meta", np.zeros(0, np.float32)))
        if m.shape != (6,) or [int(v) for v in m[3:]] != [c.num_hidden_layers, c.hidden_size,
                                                           c.vocab_size]:
            raise ValueError(f"mojolearn: {where}: tensor 'state.meta' does not describe a "
                             f"state of this model; the file was edited or made by another")
        length, batch, tmax = (int(v) for v in m[:3])
        if not (batch >= 1 and 0 <= length <= tmax):
            raise ValueError(f"mojolearn: {where}: the state says length {length}, batch "
                             f"{batch}, max_tokens {tmax}; the file was edited")
        shapes = state_shapes(c, batch)
        if sorted(w) != sorted(list(shapes) + ["state.meta"]):
            raise ValueError(f"mojolearn: {where} holds the tensors {sorted(w)}; a "
                             f"{self.family} state holds {sorted(list(shapes) + ['state.meta'])}")
        for nm, shape in shapes.items():
            v = np.asarray(w[nm])
            if v.dtype != np.float32 or v.shape != shape:
                raise ValueError(f"mojolearn: {where}: tensor {nm!r} is {v.dtype} {v.shape}, "
                                 f"not float32 {shape}; the file was edited")
        if self._gpu is not None:
            st = self._gpu.state_from_host(self._key, batch, tmax,
                                           {nm: np.asarray(w[nm]) for nm in shapes})
        else:
            st = MambaState(self._key, self.numeric_profile, c, batch, tmax)
            for nm, a in st.arrays().items():
                a[...] = np.asarray(w[nm])
        st.length = length
        st.numeric_mode = mode
        return st


class _MambaBlock:
    """One Mamba block as a module of its own (S-9: x + mixer(norm(x))), from a zero
    state at position 0. ``weights``: the layer's tensors as a checkpoint names them
    under ``backbone.layers.{i}.`` (``norm.weight``, ``mixer.in_proj.weight``, ...),
    float32. With no profile named it computes fp32_v1 whatever the process default;
    naming fixed15_v1 is refused (S-32). ``weight_format`` packs the projections (S-30)."""

    _model_type = ""

    def __init__(self, weights, *, d_model, weight_format="float32", numeric_profile=None,
                 numeric_mode=None, time_step_limit=None):
        f = type(self).__name__
        d_model = count(d_model, f"{f}: d_model")
        raw = {"model_type": self._model_type, "hidden_size": d_model, "num_hidden_layers": 1,
               "vocab_size": 1}
        if time_step_limit is not None:
            raw["time_step_limit"] = list(time_step_limit)
        self.config = cfg = MambaConfig.from_dict(raw)
        self.family = cfg.family
        self.numeric_mode = _modes.resolve(numeric_mode)
        self.numeric_profile = _profiles.resolve(numeric_profile, what="numeric_profile",
                                                 use="inference", family=cfg.family)
        self.weight_format = check_weight_format(weight_format)
        if not isinstance(weights, dict):
            raise TypeError(f"mojolearn: {f}: weights must be a dict, got "
                            f"{type(weights).__name__}")
        want = {k[len("backbone.layers.0."):]: v for k, v in expected_shapes(cfg).items()
                if k.startswith("backbone.layers.0.")}
        for name, shape in want.items():
            if name not in weights:
                raise ValueError(f"mojolearn: {f}: weights lack {name!r}")
            if tuple(np.asarray(weights[name]).shape) != shape:
                raise ValueError(f"mojolearn: {f}: {name!r} has shape "
                                 f"{tuple(np.asarray(weights[name]).shape)}, expected {shape}")
        extra = sorted(set(weights) - set(want))
        if extra:
            raise ValueError(f"mojolearn: {f}: weights hold {extra[0]!r}, which this block does "
                             f"not read; it reads {sorted(want)}")
        self._layer = _Layer(lambda n: _f32(weights[n], n, f), "", cfg, weight_format,
                             self.numeric_mode)
        self.d = d_model

    def __call__(self, x):
        return self.forward(x)

    def forward(self, x):
        """x (batch, length, d_model) float32 -> the block's output, same shape."""
        f = type(self).__name__
        x = np.asarray(x)
        if x.dtype != np.float32:
            raise TypeError(f"mojolearn: {f}.forward: x must be float32, got {x.dtype} "
                            f"(mojolearn never casts silently)")
        if x.ndim != 3 or x.shape[2] != self.d:
            raise ValueError(f"mojolearn: {f}.forward: x must be (batch, length, {self.d}), got "
                             f"{x.shape}")
        B, L, _ = x.shape
        xs = np.array(x.reshape(B * L, self.d), dtype=np.float32, order="C")
        if B and L:
            st = MambaState("block", self.numeric_profile, self.config, B, L)
            self._layer.forward(xs, B, L, st, 0, 0)
        return xs.reshape(B, L, self.d)


class Mamba1Block(_MambaBlock):
    """One Mamba-1 block alone (S-9, S-16 .. S-18): ``Mamba1Block(weights, d_model=...,
    weight_format="float32", numeric_profile=None, numeric_mode=None)``; weights named as
    under ``backbone.layers.{i}.`` of a checkpoint; ``forward(x)`` (batch, length,
    d_model) from a zero state. fp32_v1 only (S-32)."""
    _model_type = "mamba"


class Mamba2Block(_MambaBlock):
    """One Mamba-2 block alone (S-9, S-19 .. S-25): ``Mamba2Block(weights, d_model=...,
    weight_format="float32", numeric_profile=None, numeric_mode=None,
    time_step_limit=None)``; weights named as under ``backbone.layers.{i}.`` of a
    checkpoint; ``forward(x)`` (batch, length, d_model) from a zero state. fp32_v1 only
    (S-32)."""
    _model_type = "mamba2"


# CausalLM.load hands these model types to MambaLM.load
FAMILY_LOADERS.update({"mamba": MambaLM.load, "mamba2": MambaLM.load})

__all__ = ["MambaLM", "MambaState", "MambaConfig", "Mamba1Block", "Mamba2Block",
           "expected_shapes"]

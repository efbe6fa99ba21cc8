"""The GPU model: a CausalLM's weights, KV cache and activations in a backend's memory,
and its forward pass written ONCE as a program of device ops (models/_gpu_backend.py
runs it: the GPU build, or the CPU run of the same GPU bodies in the tests).

WHAT LIVES ON THE DEVICE
    Uploaded once at load, in the form the kernels read (rule M-26: only the seven
    block projections are packed; the embedding, the head and the norms stay float32):
      fp32_v1    float32, bf16 bits (the fp32.v1 kernels widen them as they read:
                 bf16f32.v1) or int8 codes with a row exponent each (widened by the
                 dequantize kernel into one float32 scratch panel per product, rule
                 L-6: the materialized weights, exactly);
      fixed15_v1 the int15 planes (hi, lo) and row exponents of the materialized
                 weights (M-22), the head's too (a tied head: codes of the table, the
                 gather reading the float32 table beside them).
    The conversions run once on the host by the CPU kernels (the same bits as the GPU
    converters: contracts/gemm); the host copies are let go tensor by tensor.
    The RoPE table is computed on the device by the GPU body (M-7). A generation state
    on the device (``DeviceGenerationState``) holds the KV cache in the CPU state's
    layout: rotated keys (layers, batch, kv_heads, head_dim, tmax), raw values
    (layers, batch, kv_heads, tmax, head_dim), float32, zeroed at allocation, so a
    state saved from either side is the same file.

THE PROGRAM (one per call; the CPU model's Layer.forward, op for op)
    gather -> per layer: rmsnorm; q/k/v product (+ bias add; qwen3: q and k copied out
    by an add of -0 and RMS-normalized per head, M-33); RoPE of q; RoPE of k into
    the key cache; values into the value cache; attention over the cache (scores,
    mask, softmax, P.V); o product; residual add; rmsnorm; gate/up product; SiLU gate
    product; down product; residual add -> (the last row of each sequence for step) ->
    final rmsnorm -> head product. Products: fp32_v1 "gemm_f32" (int8 weights after
    "dequantize_int8"), fixed15_v1 "quantize_int15" of the activations then
    "gemm_int15". Greedy and sampled generation choose on the device ("nn_argmax",
    "nn_sample" with the host generator's float64 draws) and read back the tokens only.

Python validates, holds the bookkeeping (addresses, positions, layouts) and names the
ops; every value is computed by a kernel.
"""
from __future__ import annotations

import numpy as np

from .._exec import kernels as K
from .._exec.device import DevBuf, DeviceTensor, upload
from .._base.state import GenerationState

__all__ = ["GpuModel", "DeviceGenerationState", "DeviceOutputs", "DevProj", "plan_bytes"]


def _proj_shapes(cfg):
    d, hd = cfg.hidden_size, cfg.head_dim
    nq, nk, ff = cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd, cfg.intermediate_size
    return {"qkv": (nq + 2 * nk, d), "o": (d, nq), "gu": (2 * ff, d), "down": (d, ff)}


def _stored_bytes(kind, n, k):
    return {"float32": 4 * n * k, "bfloat16": 2 * n * k, "int8": n * k + 4 * n,
            "int15": 2 * n * k + 4 * n}[kind]


def plan_bytes(cfg, profile, weight_format, max_positions) -> dict:
    """Device bytes a model holds, by part, computed from its config before anything is
    read or uploaded (the memory check of the load)."""
    fixed15 = profile == "fixed15_v1"
    kind = "int15" if fixed15 else weight_format
    d, V, L = cfg.hidden_size, cfg.vocab_size, cfg.num_hidden_layers
    shapes = _proj_shapes(cfg)
    out = {"embedding": 4 * V * d, "norms": 4 * d * (2 * L + 1)}
    if fixed15:
        out["head"] = _stored_bytes("int15", V, d)
    elif not cfg.tie_word_embeddings:
        out["head"] = 4 * V * d
    out["projections"] = L * sum(_stored_bytes(kind, n, k) for n, k in shapes.values())
    if cfg.qkv_bias:
        out["bias"] = 4 * L * shapes["qkv"][0]
    if cfg.qk_norm:
        out["norms"] += 4 * L * 2 * cfg.head_dim + 4 * cfg.num_attention_heads * cfg.head_dim
    out["rope"] = 8 * max_positions * (cfg.rotary_dim // 2)
    if kind == "int8":
        out["int8 widening panel"] = 4 * max(n * k for n, k in shapes.values())
    return out


class _Scratch:
    """Named work buffers of a backend, grown when a call needs more (never shrunk);
    a program runs its ops in order, so one buffer serves every op that needs it. A
    buffer replaced while a program is being written stays alive until ``done()``
    (the ops written before still name it)."""

    def __init__(self, backend):
        self.backend = backend
        self.bufs = {}
        self._retired = []

    def get(self, name, count, dtype=np.float32) -> DevBuf:
        b = self.bufs.get(name)
        if b is None or b.nbytes < count * np.dtype(dtype).itemsize or b.dtype != np.dtype(dtype):
            if b is not None:
                self._retired.append(b)
            b = self.bufs[name] = self.backend.alloc((max(count, 1),), dtype)
        return b

    def done(self):
        """The program that named the retired buffers has run: let them go."""
        self._retired.clear()


class DevProj:
    """One weight matrix (n, k), products ``x (rows, k) @ W.T``, held on the device in
    its stored form (see the module docstring): ``kind`` is "float32", "bfloat16",
    "int8" or "int15"."""

    def __init__(self, backend, w, profile, weight_format, shared=None):
        self.n, self.k = w.shape if w is not None else shared.shape
        self.fixed15 = profile == "fixed15_v1"
        self.bufs = {}
        if self.fixed15:
            if weight_format == "bfloat16":
                w = K.from_bf16(K.to_bf16(w))
            elif weight_format == "int8":
                w = K.dequantize8(*K.quantize8(w))
            hi, lo, e = K.quantize15(np.ascontiguousarray(w), self.n, self.k)
            self.kind = "int15"
            self.bufs = {"hi": upload(backend, hi), "lo": upload(backend, lo), "e": upload(backend, e)}
        elif shared is not None:
            self.kind, self.bufs = "float32", {"w": shared}
            self.shared = True
        elif weight_format == "bfloat16":
            self.kind, self.bufs = "bfloat16", {"w": upload(backend, K.to_bf16(w))}
        elif weight_format == "int8":
            codes, e = K.quantize8(w)
            self.kind, self.bufs = "int8", {"codes": upload(backend, codes), "e": upload(backend, e)}
        else:
            self.kind, self.bufs = "float32", {"w": upload(backend, w)}
        self.shared = shared is not None

    def nbytes(self):
        return 0 if self.shared else sum(b.nbytes for b in self.bufs.values())

    def ops(self, ops, x: int, rows: int, out: int, scratch: _Scratch):
        """Append the product's ops: out (rows, n) = x (rows, k) @ W.T (addresses)."""
        n, k, b = self.n, self.k, self.bufs
        if self.kind == "int15":
            hi = scratch.get("xq_hi", rows * k, np.int8)
            lo = scratch.get("xq_lo", rows * k, np.int8)
            e = scratch.get("xq_e", rows, np.int32)
            ops.append(("quantize_int15", x, hi.addr, lo.addr, e.addr, rows, k))
            ops.append(("gemm_int15", hi.addr, lo.addr, e.addr, b["hi"].addr, b["lo"].addr,
                        b["e"].addr, out, rows, n, k))
        elif self.kind == "int8":
            w = scratch.get("w8", n * k)
            ops.append(("dequantize_int8", b["codes"].addr, b["e"].addr, w.addr, n, k))
            ops.append(("gemm_f32", x, w.addr, out, rows, n, k, 0, 1, 0, 0))
        else:
            ops.append(("gemm_f32", x, b["w"].addr, out, rows, n, k, 0, 1, 0,
                        int(self.kind == "bfloat16")))


class _DevLayer:
    def __init__(self, backend, get, prefix, cfg, profile, weight_format):
        p = prefix
        self.ln1 = upload(backend, np.asarray(get(p + "input_layernorm.weight"), dtype=np.float32))
        self.ln2 = upload(backend, np.asarray(get(p + "post_attention_layernorm.weight"),
                                              dtype=np.float32))
        qkv = np.concatenate([get(p + "self_attn.q_proj.weight"), get(p + "self_attn.k_proj.weight"),
                              get(p + "self_attn.v_proj.weight")], axis=0)
        self.qkv = DevProj(backend, qkv, profile, weight_format)
        del qkv
        self.bias = None
        if cfg.qkv_bias:
            self.bias = upload(backend, np.concatenate([
                get(p + "self_attn.q_proj.bias"), get(p + "self_attn.k_proj.bias"),
                get(p + "self_attn.v_proj.bias")]).astype(np.float32, copy=False))
        self.o = DevProj(backend, np.ascontiguousarray(get(p + "self_attn.o_proj.weight")), profile,
                         weight_format)
        gu = np.concatenate([get(p + "mlp.gate_proj.weight"), get(p + "mlp.up_proj.weight")], axis=0)
        self.gu = DevProj(backend, gu, profile, weight_format)
        del gu
        self.down = DevProj(backend, np.ascontiguousarray(get(p + "mlp.down_proj.weight")), profile,
                            weight_format)
        self.qn = self.kn = self.negzero = None
        if getattr(cfg, "qk_norm", False):
            self.qn = upload(backend, np.asarray(get(p + "self_attn.q_norm.weight"), dtype=np.float32))
            self.kn = upload(backend, np.asarray(get(p + "self_attn.k_norm.weight"), dtype=np.float32))
            # a row of -0.0: add(x, -0) is x exactly (+0 stays +0, -0 stays -0), so an
            # nn_add with it copies the q and k parts of the product out to the contiguous
            # rows of head_dim the per-head RMSNorm reads
            self.negzero = upload(backend, np.full(cfg.num_attention_heads * cfg.head_dim, -0.0,
                                                   dtype=np.float32))

    def held(self, out):
        out["float32"] = out.get("float32", 0) + self.ln1.nbytes + self.ln2.nbytes + (
            self.bias.nbytes if self.bias is not None else 0) + (
            self.qn.nbytes + self.kn.nbytes + self.negzero.nbytes if self.qn is not None else 0)
        for pr in (self.qkv, self.o, self.gu, self.down):
            out[pr.kind] = out.get(pr.kind, 0) + pr.nbytes()


def layer_ops(ops, layer, x, B, L, pos0, kt, vc, tmax, rows, c, eps_bits, fixed15, rope, sc):
    """Append one block's ops (CausalLM's Layer.forward, op for op) to the program: x
    (rows, d) the residual stream, updated in place; kt / vc this layer's key and value
    caches (addresses); c the dimensions (a ModelConfig or the like); rope the (cos,
    sin) table addresses; sc the scratch buffers."""
    nh, kvh, hd, d = c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.hidden_size
    nq, nk, ff = nh * hd, kvh * hd, c.intermediate_size
    ld = nq + 2 * nk
    h = sc.get("h", rows * d)
    qkv = sc.get("qkv", rows * ld)
    q = sc.get("q", rows * nq)
    ctx = sc.get("ctx", rows * nq)
    o = sc.get("o", rows * d)
    gu = sc.get("gu", rows * 2 * ff)
    pm = sc.get("pm", rows * ff)
    ws = sc.get("attn_ws", B * nh * L * (pos0 + L))
    cos, sin = rope
    ops.append(("nn_rmsnorm", x, layer.ln1.addr, h.addr, rows, d, eps_bits))
    layer.qkv.ops(ops, h.addr, rows, qkv.addr, sc)
    if layer.bias is not None:
        ops.append(("nn_add", qkv.addr, ld, layer.bias.addr, 0, qkv.addr, ld, rows, ld))
    rot = getattr(c, "rotary_dim", hd)
    qs, lq, ks, lk = qkv.addr, ld, qkv.at(nq), ld
    if layer.qn is not None:  # M-33: per-head RMSNorm of q and k before RoPE
        raw = sc.get("qk_raw", rows * (nq + nk))
        qs, ks = sc.get("qn", rows * nq).addr, sc.get("kn", rows * nk).addr
        ops.append(("nn_add", qkv.addr, ld, layer.negzero.addr, 0, raw.addr, nq, rows, nq))
        ops.append(("nn_add", qkv.at(nq), ld, layer.negzero.addr, 0, raw.at(rows * nq), nk, rows,
                    nk))
        ops.append(("nn_rmsnorm", raw.addr, layer.qn.addr, qs, rows * nh, hd, eps_bits))
        ops.append(("nn_rmsnorm", raw.at(rows * nq), layer.kn.addr, ks, rows * kvh, hd, eps_bits))
        lq, lk = nq, nk
    ops.append(("nn_rope", qs, lq, q.addr, nq, hd, nh, hd, cos, sin, pos0, L, rows, 0, 0, rot))
    ops.append(("nn_rope", ks, lk, kt, 0, 0, kvh, hd, cos, sin, pos0, L, rows, 1, tmax, rot))
    ops.append(("nn_kv_append", qkv.at(nq + nk), ld, vc, kvh, hd, pos0, L, rows, tmax))
    ops.append(("nn_attention", q.addr, nq, kt, vc, ctx.addr, ws.addr, B, L, nh, kvh, hd, pos0,
                tmax, int(fixed15)))
    layer.o.ops(ops, ctx.addr, rows, o.addr, sc)
    ops.append(("nn_add", x, d, o.addr, d, x, d, rows, d))
    ops.append(("nn_rmsnorm", x, layer.ln2.addr, h.addr, rows, d, eps_bits))
    layer.gu.ops(ops, h.addr, rows, gu.addr, sc)
    ops.append(("nn_silu_mul", gu.addr, gu.at(ff), 2 * ff, pm.addr, ff, rows, ff))
    layer.down.ops(ops, pm.addr, rows, o.addr, sc)
    ops.append(("nn_add", x, d, o.addr, d, x, d, rows, d))


class DeviceGenerationState(GenerationState):
    """A GenerationState whose KV cache lies in a GPU model's device memory (kt and v
    are device buffers in the CPU state's layout; see GenerationState). Made by
    ``allocate_state`` / ``resume`` of a model on the GPU; refused by a CPU model
    (save_state, then resume on the other model, moves a state across)."""

    device = "gpu"

    def __init__(self, backend, *args):
        self._backend = backend
        super().__init__(*args)

    def _allocate(self, layers, batch, kv_heads, head_dim, max_tokens):
        be = self._backend
        kt = be.alloc((layers, batch, kv_heads, head_dim, max_tokens), np.float32)
        v = be.alloc((layers, batch, kv_heads, max_tokens, head_dim), np.float32)
        be.zero(kt)
        be.zero(v)
        return kt, v

    def __repr__(self):
        return super().__repr__()[:-1] + f", device='gpu')"


class DeviceOutputs:
    """What a device model does with its logits buffer (the transformer's GpuModel and
    the Mamba model's GpuMamba share it): the program's tail (the last rows, the final
    norm, the head, the run), then choose the next tokens on the device, or hand the
    logits back (host) or leave them there (a DeviceTensor). Needs ``self.backend``,
    ``self.scratch``, ``self.norm`` and ``self.head``."""

    def _finish(self, ops, x, B, L, d, V, last_only, eps_bits):
        """Append the tail to ops (x: the residual stream of B x L rows of d), run the
        program and return the new logits buffer ((B, V) when last_only)."""
        be, sc = self.backend, self.scratch
        rows = B * L
        src, n = x, rows
        if last_only and L > 1:
            sel = upload(be, np.arange(L - 1, rows, L, dtype=np.int64))
            xl = sc.get("x_last", B * d)
            ops.append(("nn_gather", x.addr, sel.addr, xl.addr, B, d))
            src, n = xl, B
        elif last_only:
            n = B
        hn = sc.get("hn", n * d)
        ops.append(("nn_rmsnorm", src.addr, self.norm.addr, hn.addr, n, d, eps_bits))
        logits = be.alloc((n, V), np.float32)  # a new buffer: a DeviceTensor may keep it
        self.head.ops(ops, hn.addr, n, logits.addr, sc)
        try:
            be.run(ops)
        finally:
            sc.done()
        return logits

    def choose(self, logits: DevBuf, rng) -> np.ndarray:
        """The next token of each row of the logits, chosen on the device: greedy (rng
        None: the first largest logit) or sampled (M-32, one draw of rng per row in row
        order, as the CPU model draws them)."""
        be = self.backend
        rows, n = logits.shape
        picks = be.alloc((rows,), np.int64)
        if rng is None:
            be.run([("nn_argmax", logits.addr, rows, n, picks.addr)])
            return be.read(picks)
        r = np.array([rng.random() for _ in range(rows)], dtype=np.float64)
        if getattr(be, "api", None) == "metal":
            # M-32 sums in float64, which Metal lacks: the logits come back and the CPU
            # kernel of the same rule samples them (the same tokens)
            return K.sample_rows(be.read(logits), r)
        rd = upload(be, r)
        be.run([("nn_sample", logits.addr, rows, n, rd.addr, picks.addr)])
        out = be.read(picks)
        if (out < 0).any():  # pragma: no cover - the kernel's Metal build, never launched
            raise RuntimeError("mojolearn: the GPU sampling kernel did not run (Metal build)")
        return out

    def result(self, logits: DevBuf, shape, output):
        if output == "device":
            return DeviceTensor(logits, shape)
        return self.backend.read(logits).reshape(shape)


class GpuModel(DeviceOutputs):
    """The device half of a CausalLM made with device='gpu' (see the module docstring)."""

    def __init__(self, lm, backend, weights):
        cfg = lm.config
        self.backend = backend
        self.cfg = cfg
        self.profile = lm.numeric_profile
        self.fixed15 = self.profile == "fixed15_v1"
        self.weight_format = lm.weight_format
        self.max_positions = lm.max_positions
        self.eps_bits = K.f32_bits(cfg.rms_norm_eps)
        self.scratch = _Scratch(backend)
        pop = weights.pop
        embed = np.ascontiguousarray(pop("model.embed_tokens.weight"), dtype=np.float32)
        self.embed = upload(backend, embed)
        self.norm = upload(backend, np.asarray(weights["model.norm.weight"], dtype=np.float32))
        if cfg.tie_word_embeddings:
            head = embed
        else:
            head = np.ascontiguousarray(pop("lm_head.weight"), dtype=np.float32)
        # the head stays the checkpoint's float32 (M-26): float32 rows, or their int15 codes
        if self.fixed15:
            self.head = DevProj(backend, head, self.profile, "float32")
        elif cfg.tie_word_embeddings:
            self.head = DevProj(backend, None, self.profile, "float32", shared=self.embed)
        else:
            self.head = DevProj(backend, head, self.profile, "float32")
        del head, embed
        self.layers = [_DevLayer(backend, lambda n: np.asarray(pop(n)), f"model.layers.{i}.", cfg,
                                 self.profile, self.weight_format)
                       for i in range(cfg.num_hidden_layers)]
        half = cfg.rotary_dim // 2
        self.cos = backend.alloc((self.max_positions, half), np.float32)
        self.sin = backend.alloc((self.max_positions, half), np.float32)
        backend.run([("nn_rope_table", self.cos.addr, self.sin.addr, self.max_positions,
                      cfg.rotary_dim, K.f32_bits(cfg.rope_theta))])

    # ------------------------------------------------------------ bookkeeping
    def held(self) -> dict:
        out = {"float32": self.norm.nbytes + self.embed.nbytes}
        out[self.head.kind] = out.get(self.head.kind, 0) + self.head.nbytes()
        for layer in self.layers:
            layer.held(out)
        return out

    def new_state(self, model_key, batch, max_tokens) -> DeviceGenerationState:
        c = self.cfg
        need = 2 * 4 * c.num_hidden_layers * batch * c.num_key_value_heads * c.head_dim * max_tokens
        free, total = self.backend.memory()
        if need > free:
            raise MemoryError(
                f"mojolearn: CausalLM.allocate_state: a state of batch_size {batch} and "
                f"max_tokens {max_tokens} needs {need} bytes of GPU memory; the device has "
                f"{free} free of {total}: use a smaller batch or max_tokens")
        return DeviceGenerationState(self.backend, model_key, self.profile, batch, max_tokens,
                                     c.num_hidden_layers, c.num_key_value_heads, c.head_dim)

    def state_array_ok(self, a, shape) -> bool:
        """A device state's kt / v as this model's allocate_state made them."""
        return (isinstance(a, DevBuf) and a.alive and a.backend is self.backend
                and a.dtype == np.float32 and a.shape == shape)

    def state_to_host(self, state):
        return self.backend.read(state.kt), self.backend.read(state.v)

    def state_from_host(self, model_key, batch, tmax, kt, v):
        st = self.new_state(model_key, batch, tmax)
        self.backend.write(st.kt, kt)
        self.backend.write(st.v, v)
        return st

    # ------------------------------------------------------------ the forward program
    def _layer_ops(self, ops, layer, x, B, L, pos0, kt, vc, tmax, rows):
        layer_ops(ops, layer, x, B, L, pos0, kt, vc, tmax, rows, self.cfg, self.eps_bits,
                  self.fixed15, (self.cos.addr, self.sin.addr), self.scratch)

    def forward(self, ids, state, last_only) -> DevBuf:
        """Run ids (B, L) after the state's cached tokens (the caller checked the state
        and moves its length); returns the logits buffer (B * L or B rows, vocab)."""
        c, be, sc = self.cfg, self.backend, self.scratch
        B, L = ids.shape
        rows, d, V = B * L, c.hidden_size, c.vocab_size
        pos0, tmax = state.length, state.max_tokens
        ids_buf = upload(be, ids)
        x = sc.get("x", rows * d)
        ops = [("nn_gather", self.embed.addr, ids_buf.addr, x.addr, rows, d)]
        per_kt = B * c.num_key_value_heads * c.head_dim * tmax  # floats of one layer's cache
        for i, layer in enumerate(self.layers):
            self._layer_ops(ops, layer, x.addr, B, L, pos0, state.kt.at(i * per_kt),
                            state.v.at(i * per_kt), tmax, rows)
        return self._finish(ops, x, B, L, d, V, last_only, self.eps_bits)


def check_fits(cfg, lm, backend, source):
    """Refuse, before anything is read or uploaded, a model whose weights (in their
    stored format, plan_bytes) do not fit the device's free memory."""
    plan = plan_bytes(cfg, lm.numeric_profile, lm.weight_format, lm.max_positions)
    need = sum(plan.values())
    free, total = backend.memory()
    if need > free:
        parts = ", ".join(f"{k} {v}" for k, v in plan.items())
        raise MemoryError(
            f"mojolearn: CausalLM: {source} needs {need} bytes of GPU memory for its weights "
            f"({parts}; weight_format={lm.weight_format!r}, numeric_profile="
            f"{lm.numeric_profile!r}), and the device ({backend.name}) has {free} free of "
            f"{total}; nothing was uploaded: use weight_format='int8' or 'bfloat16' (fp32_v1), "
            f"a smaller max_positions, free device memory, or device='cpu'")


class _BlockDims:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class GpuBlock:
    """The device half of a TransformerBlock made with device='gpu': one block's weights
    (as GpuModel's layers) and RoPE table on the device; forward uploads x, runs the
    block's program at positions 0.. with a cache of this call's length, and reads x
    back."""

    def __init__(self, backend, get, *, d, n_heads, n_kv_heads, head_dim, intermediate, eps,
                 rope_theta, max_positions, profile, weight_format, qkv_bias, qk_norm=False,
                 rotary_dim=None):
        self.backend = backend
        rotary_dim = head_dim if rotary_dim is None else rotary_dim
        self.dims = _BlockDims(num_attention_heads=n_heads, num_key_value_heads=n_kv_heads,
                               head_dim=head_dim, hidden_size=d, intermediate_size=intermediate,
                               qkv_bias=qkv_bias, qk_norm=qk_norm, rotary_dim=rotary_dim)
        self.fixed15 = profile == "fixed15_v1"
        self.eps_bits = K.f32_bits(eps)
        self.scratch = _Scratch(backend)
        self.layer = _DevLayer(backend, get, "", self.dims, profile, weight_format)
        half = rotary_dim // 2
        self.cos = backend.alloc((max_positions, half), np.float32)
        self.sin = backend.alloc((max_positions, half), np.float32)
        backend.run([("nn_rope_table", self.cos.addr, self.sin.addr, max_positions, rotary_dim,
                      K.f32_bits(rope_theta))])

    def forward(self, xs, B, L):
        """xs (B * L, d) float32 on the host -> the block's output, (B * L, d) host."""
        be, c = self.backend, self.dims
        x = upload(be, xs)
        kt = be.alloc((B, c.num_key_value_heads, c.head_dim, L), np.float32)
        vc = be.alloc((B, c.num_key_value_heads, L, c.head_dim), np.float32)
        ops = []
        layer_ops(ops, self.layer, x.addr, B, L, 0, kt.addr, vc.addr, L, B * L, c, self.eps_bits,
                  self.fixed15, (self.cos.addr, self.sin.addr), self.scratch)
        try:
            be.run(ops)
        finally:
            self.scratch.done()
        return be.read(x)

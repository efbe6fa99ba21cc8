"""The implementation of ``mojolearn.models.block``: what it computes and promises is
that public module's docstring (python/mojolearn/models/block.py), which re-exports
this module's public names."""
from __future__ import annotations

import numpy as np

from ..._table import modes as _modes
from ..._table import profiles as _profiles
from .._exec import kernels as K

WEIGHT_FORMATS = ("float32", "bfloat16", "int8")
"""The weight formats a model stores its projections in: 'float32', 'bfloat16', 'int8'."""
MAX_POSITIONS = 8192  # rule M-7: RoPE angles >= 8192 are refused


_BLOCK_TENSORS = ("input_layernorm.weight", "post_attention_layernorm.weight",
                  "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                  "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
                  "mlp.down_proj.weight")
_BIAS_TENSORS = ("self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias")
_QK_NORM_TENSORS = ("self_attn.q_norm.weight", "self_attn.k_norm.weight")


def check_weight_format(weight_format):
    if not isinstance(weight_format, str):
        raise TypeError(f"mojolearn: weight_format must be a str, got {type(weight_format).__name__}")
    if weight_format not in WEIGHT_FORMATS:
        raise ValueError(
            f"mojolearn: weight_format={weight_format!r} is unknown; the formats are "
            f"{', '.join(WEIGHT_FORMATS)}"
        )
    return weight_format


def check_max_positions(max_positions, default, window=None):
    """The positions a model computes: max_positions, or by default the config's up to
    M-7's bound and the checkpoint's attention window (a model whose keys all lie inside
    its window computes what the windowed model does; past it, the window would mask
    keys, which is not computed: refused by name)."""
    if max_positions is None:
        return min(default, MAX_POSITIONS, window or MAX_POSITIONS)
    if isinstance(max_positions, bool) or not isinstance(max_positions, int) or max_positions <= 0:
        raise ValueError(f"mojolearn: max_positions must be a positive int, got {max_positions!r}")
    if max_positions > MAX_POSITIONS:
        raise ValueError(
            f"mojolearn: max_positions={max_positions} is refused: the RoPE rule (M-7) "
            f"computes angles below {MAX_POSITIONS} only; pass max_positions <= {MAX_POSITIONS}"
        )
    if window is not None and max_positions > window:
        raise NotImplementedError(
            f"mojolearn: max_positions={max_positions} is refused: the checkpoint's "
            f"sliding_window is {window}, and past it the window masks keys, which is not "
            f"computed; pass max_positions <= {window}"
        )
    return max_positions


def _f32_2d(w, name):
    w = np.asarray(w)
    if w.dtype != np.float32:
        raise TypeError(f"mojolearn: TransformerBlock: weight {name!r} has dtype {w.dtype}; weights are float32 "
                        f"(mojolearn never casts silently)")
    return np.ascontiguousarray(w)


class Proj:
    """One weight matrix (out, in), possibly several stacked by rows, held for the
    profile in the bytes of its storage format (rule M-26 materializes the format; the
    held form has exactly that float32's bits):
      - fp32_v1: prepared once for this CPU build (linalg.prepare: the fp32.v1 kernel
        reads its panels, never packs per call) in the stored format: float32 panels,
        bf16 panels (2 bytes a weight) or int8 panels with a scale per row (1 byte a
        weight), widened by the kernels as they read them;
      - fixed15_v1: the int15 codes of the materialized float32 (rule M-22: under int8
        storage they come from the int8-materialized weights), held once as the two
        int8 planes and the row exponents (2 bytes a weight); the int15 kernel packs
        them per call (decode rows read them as stored).
    ``format`` says which of "float32", "bfloat16", "int8" (fp32_v1) or "int15"
    (fixed15_v1) is held."""

    def __init__(self, w, profile: str, weight_format: str = "float32",
                 numeric_mode: str = "identical"):
        self.n, self.k = w.shape
        self.fixed15 = profile == "fixed15_v1"
        # the kernels' mode argument (fp32.v1's leaves; the int15 sums are exact in every mode)
        self.mode = _modes.kernel_code(numeric_mode)
        if weight_format == "bfloat16":
            bits = K.to_bf16(w)
            if not self.fixed15:
                self.format, self.w = "bfloat16", K.prepare_nt(bits)
                return
            w = K.from_bf16(bits)
        elif weight_format == "int8":
            codes, e = K.quantize8(w)
            if not self.fixed15:
                self.format, self.w = "int8", K.prepare_nt_int8(codes, e)
                return
            w = K.dequantize8(codes, e)
        if self.fixed15:
            self.format, self.w = "int15", K.quantize15(w, self.n, self.k)
        else:
            self.format, self.w = "float32", K.prepare_nt(w)

    @classmethod
    def stored(cls, w, profile: str, numeric_mode: str = "identical"):
        """The head (rule M-26: not a weight_format matrix) held as the checkpoint stores
        it: a float32 array as Proj(w, profile, "float32"); a lowbit.Int8Weight or
        BF16Weight (a checkpoint written by mojolearn.checkpoint) kept in those bytes
        under fp32_v1 (int8 / bf16 panels: the product reads exactly its materialized
        float32, L-6 / L-1), and under fixed15_v1 the int15 codes of that float32."""
        from ..._ops.lowbit import BF16Weight, Int8Weight

        if not isinstance(w, (BF16Weight, Int8Weight)):
            return cls(w, profile, "float32", numeric_mode)
        self = cls.__new__(cls)
        self.n, self.k = w.shape
        self.fixed15 = profile == "fixed15_v1"
        self.mode = _modes.kernel_code(numeric_mode)
        if isinstance(w, Int8Weight):
            codes, e = np.ascontiguousarray(w.codes), np.ascontiguousarray(w.exponents)
            if not self.fixed15:
                self.format, self.w = "int8", K.prepare_nt_int8(codes, e)
                return self
            f32 = K.dequantize8(codes, e)
        else:
            bits = np.ascontiguousarray(w.bits)
            if not self.fixed15:
                self.format, self.w = "bfloat16", K.prepare_nt(bits)
                return self
            f32 = K.from_bf16(bits)
        self.format, self.w = "int15", K.quantize15(f32, self.n, self.k)
        return self

    def nbytes(self):
        if self.fixed15:
            return sum(a.nbytes for a in self.w)
        return self.w.nbytes

    def __call__(self, x, xq=None, out=None):
        """x (rows, k) float32 -> (rows, n); xq: x's int15 codes when already made; out: a
        C-contiguous float32 (rows, n) to write, or None for a new one."""
        rows = x.shape[0]
        if out is None:
            out = np.empty((rows, self.n), dtype=np.float32)
        if self.fixed15:
            if xq is None:
                xq = K.quantize15(x, rows, self.k)
            return K.gemm_int15(xq, self.w, out, rows, self.n, self.k)
        return K.gemm_prepared(x, rows, self.w, out, self.mode)


class Layer:
    """The prepared weights of one block and its forward over a cache slice."""

    def __init__(self, get, prefix, *, n_heads, n_kv_heads, head_dim, eps, profile,
                 weight_format, qkv_bias, numeric_mode="identical", qk_norm=False, rot_dim=None):
        self.nh, self.kvh, self.hd = n_heads, n_kv_heads, head_dim
        self.rot = head_dim if rot_dim is None else rot_dim
        self.eps_bits = K.f32_bits(eps)
        self.fixed15 = profile == "fixed15_v1"
        p = prefix
        self.ln1 = np.ascontiguousarray(get(p + "input_layernorm.weight"))
        self.ln2 = np.ascontiguousarray(get(p + "post_attention_layernorm.weight"))
        qkv = np.concatenate([get(p + "self_attn.q_proj.weight"), get(p + "self_attn.k_proj.weight"),
                              get(p + "self_attn.v_proj.weight")], axis=0)
        self.qkv = Proj(qkv, profile, weight_format, numeric_mode)
        del qkv
        self.bias = None
        if qkv_bias:
            self.bias = np.ascontiguousarray(np.concatenate([
                get(p + "self_attn.q_proj.bias"), get(p + "self_attn.k_proj.bias"),
                get(p + "self_attn.v_proj.bias")]))
        self.o = Proj(np.ascontiguousarray(get(p + "self_attn.o_proj.weight")), profile, weight_format,
                      numeric_mode)
        gu = np.concatenate([get(p + "mlp.gate_proj.weight"), get(p + "mlp.up_proj.weight")], axis=0)
        self.gu = Proj(gu, profile, weight_format, numeric_mode)
        del gu
        self.ff = self.gu.n // 2
        self.down = Proj(np.ascontiguousarray(get(p + "mlp.down_proj.weight")), profile, weight_format,
                         numeric_mode)
        self.qn = self.kn = None
        if qk_norm:
            self.qn = np.ascontiguousarray(get(p + "self_attn.q_norm.weight"))
            self.kn = np.ascontiguousarray(get(p + "self_attn.k_norm.weight"))

    def nbytes(self):
        return sum(self.held().values())

    def held(self) -> dict:
        """Bytes held by format: {"float32": norms and bias, <the projections' format>: ...}."""
        out = {"float32": self.ln1.nbytes + self.ln2.nbytes
               + (self.bias.nbytes if self.bias is not None else 0)
               + (self.qn.nbytes + self.kn.nbytes if self.qn is not None else 0)}
        for p in (self.qkv, self.o, self.gu, self.down):
            out[p.format] = out.get(p.format, 0) + p.nbytes()
        return out

    def _attention(self, q, kt, vc, B, L, pos0, tmax):
        """Rules M-11 .. M-15 over the cache: the context (B*L, nh * hd)."""
        nq = self.nh * self.hd
        return K.attention(q, nq, kt, vc, np.empty((B * L, nq), dtype=np.float32), B, L,
                           self.nh, self.kvh, self.hd, pos0, tmax, self.fixed15)

    def _head_norm(self, part, heads, w):
        """M-33: the rows (rows, heads * hd) of a product, each head normalized by M-4 with
        weight w (hd,) and the model's eps; a new (rows, heads * hd) array."""
        rows = part.shape[0]
        x = np.ascontiguousarray(part).reshape(rows * heads, self.hd)
        return K.rmsnorm(x, w, self.eps_bits, np.empty_like(x)).reshape(rows, heads * self.hd)

    def forward(self, x, B, L, pos0, kt, vc, rope):
        """x (B*L, d) float32, updated in place (the residual stream). kt/vc: this
        layer's key (B, kvh, hd, tmax) and value (B, kvh, tmax, hd) caches. A subclass
        may hold o / down as other callables of the same shapes (the tensor-parallel
        layer: k-split parts folded across ranks) and its own _attention."""
        rows = B * L
        nq, nk, hd = self.nh * self.hd, self.kvh * self.hd, self.hd
        tmax = kt.shape[-1]
        cos, sin = rope
        h = K.rmsnorm(x, self.ln1, self.eps_bits, np.empty_like(x))
        qkv = self.qkv(h)
        if self.bias is not None:
            K.add(qkv, self.bias, qkv)
        ld = qkv.shape[1]
        q = np.empty((rows, nq), dtype=np.float32)
        qs, q0, lq, ks, k0, lk = qkv, 0, ld, qkv, nq, ld
        if self.qn is not None:
            # M-33: each head's q and k RMS-normalized over head_dim (rows of hd: the
            # heads are copied out of the product, then normalized), before RoPE
            qs = self._head_norm(qkv[:, :nq], self.nh, self.qn)
            ks = self._head_norm(qkv[:, nq:nq + nk], self.kvh, self.kn)
            q0, lq, k0, lk = 0, nq, 0, nk
        K.rope(qs, q0, lq, q, nq, hd, self.nh, hd, cos, sin, pos0, L, rows, rot_dim=self.rot)
        K.rope(ks, k0, lk, kt, 0, 0, self.kvh, hd, cos, sin, pos0, L, rows,
               transposed=True, tmax=tmax, rot_dim=self.rot)
        vc[:, :, pos0:pos0 + L, :] = qkv[:, nq + nk:].reshape(B, L, self.kvh, hd).transpose(0, 2, 1, 3)
        ctx = self._attention(q, kt, vc, B, L, pos0, tmax)
        K.add(x, self.o(ctx), x)
        h2 = K.rmsnorm(x, self.ln2, self.eps_bits, h)
        gu = self.gu(h2)
        pm = K.silu_mul(gu, self.ff, np.empty((rows, self.ff), dtype=np.float32))
        K.add(x, self.down(pm), x)
        return x


class TransformerBlock:
    """One Llama-style block as a module of its own (family ``transformer_block``).

    ``weights``: dict with ``input_layernorm.weight``, ``post_attention_layernorm.weight``,
    ``self_attn.{q,k,v,o}_proj.weight``, ``mlp.{gate,up,down}_proj.weight`` (float32,
    stored (out, in)), ``self_attn.{q,k,v}_proj.bias`` when ``qkv_bias`` (qwen2) and
    ``self_attn.{q,k}_norm.weight`` (head_dim each) when ``qk_norm`` (qwen3: q and k
    RMS-normalized per head before RoPE). ``rotary_dim`` (default head_dim; even, <=
    head_dim): the leading elements of each head that RoPE rotates (phi3's partial
    rotary), the rest pass unrotated.
    A call naming no profile gets ``fp32_v1`` even when the process inference default
    is ``fixed15_v1`` (that default reaches the ``transformer`` family only).
    ``numeric_mode`` (default: the process mode) is the promise its products keep.
    ``device``: None (the process device), "cpu", "gpu" or "gpu:0", as for CausalLM
    (``block.device`` says where it runs; on the GPU forward still takes and returns
    host arrays).
    """

    def __init__(self, weights, *, n_heads, n_kv_heads=None, head_dim=None, rms_norm_eps=1e-6,
                 rope_theta=10000.0, max_positions=2048, qkv_bias=False, weight_format="float32",
                 numeric_profile=None, numeric_mode=None, device=None, _device_backend=None,
                 qk_norm=False, rotary_dim=None):
        from .._base.inputs import count, flag, positive_number
        from .._exec.device import resolve

        f = "TransformerBlock"
        self.numeric_mode = _modes.resolve(numeric_mode)
        self.numeric_profile = _profiles.resolve(numeric_profile, what="numeric_profile",
                                                 use="inference", family="transformer_block")
        if not isinstance(weights, dict):
            raise TypeError(f"mojolearn: TransformerBlock: weights must be a dict, got "
                            f"{type(weights).__name__}")
        check_weight_format(weight_format)
        self.device, backend = resolve(device, f, _device_backend)
        n_heads = count(n_heads, f"{f}: n_heads")
        n_kv_heads = n_heads if n_kv_heads is None else count(n_kv_heads, f"{f}: n_kv_heads")
        if head_dim is not None:
            head_dim = count(head_dim, f"{f}: head_dim")
        rms_norm_eps = positive_number(rms_norm_eps, f"{f}: rms_norm_eps")
        rope_theta = positive_number(rope_theta, f"{f}: rope_theta")
        qkv_bias = flag(qkv_bias, f"{f}: qkv_bias")
        qk_norm = flag(qk_norm, f"{f}: qk_norm")
        if rotary_dim is not None:
            rotary_dim = count(rotary_dim, f"{f}: rotary_dim")
        known = (set(_BLOCK_TENSORS) | (set(_BIAS_TENSORS) if qkv_bias else set())
                 | (set(_QK_NORM_TENSORS) if qk_norm else set()))
        for name in weights:
            if name not in known:
                extra = (" (a bias is read only with qkv_bias=True)"
                         if name in _BIAS_TENSORS else
                         " (q/k norms are read only with qk_norm=True)"
                         if name in _QK_NORM_TENSORS else "")
                raise ValueError(f"mojolearn: {f}: weights hold {name!r}, which this block "
                                 f"does not read{extra}; it reads {sorted(known)}; nothing is "
                                 f"dropped silently")

        def get(name):
            w = weights.get(name)
            if w is None:
                raise ValueError(f"mojolearn: {f}: weights lack {name!r}")
            return _f32_2d(w, name)

        q = get("self_attn.q_proj.weight")
        if q.ndim != 2 or 0 in q.shape:
            raise ValueError(f"mojolearn: {f}: 'self_attn.q_proj.weight' has shape {q.shape}; "
                             f"it is (n_heads * head_dim, d), d > 0")
        d = q.shape[1]
        if head_dim is None:
            if q.shape[0] % n_heads:
                raise ValueError(f"mojolearn: {f}: 'self_attn.q_proj.weight' has {q.shape[0]} "
                                 f"rows, not a multiple of n_heads {n_heads}")
            head_dim = q.shape[0] // n_heads
        if head_dim % 2 or head_dim > 1024 or n_heads % n_kv_heads:
            raise ValueError(f"mojolearn: {f}: head_dim {head_dim} must be even and <= 1024 and "
                             f"n_heads {n_heads} a multiple of n_kv_heads {n_kv_heads}")
        if rotary_dim is None:
            rotary_dim = head_dim
        if rotary_dim % 2 or rotary_dim > head_dim:
            raise ValueError(f"mojolearn: {f}: rotary_dim {rotary_dim} must be even and <= "
                             f"head_dim {head_dim}")
        self.d, self.n_heads, self.n_kv_heads, self.head_dim = d, n_heads, n_kv_heads, head_dim
        self.rotary_dim = rotary_dim
        self.max_positions = check_max_positions(max_positions, 2048)
        nq, nk = n_heads * head_dim, n_kv_heads * head_dim
        gate = get("mlp.gate_proj.weight")
        if gate.ndim != 2 or gate.shape[0] == 0:
            raise ValueError(f"mojolearn: {f}: 'mlp.gate_proj.weight' has shape {gate.shape}; "
                             f"it is (intermediate, d), intermediate > 0")
        ff = gate.shape[0]
        want = {"self_attn.q_proj.weight": (nq, d), "self_attn.k_proj.weight": (nk, d),
                "self_attn.v_proj.weight": (nk, d), "self_attn.o_proj.weight": (d, nq),
                "input_layernorm.weight": (d,), "post_attention_layernorm.weight": (d,),
                "mlp.gate_proj.weight": (ff, d), "mlp.up_proj.weight": (ff, d),
                "mlp.down_proj.weight": (d, ff)}
        if qkv_bias:
            want.update({"self_attn.q_proj.bias": (nq,), "self_attn.k_proj.bias": (nk,),
                         "self_attn.v_proj.bias": (nk,)})
        if qk_norm:
            want.update({n: (head_dim,) for n in _QK_NORM_TENSORS})
        for name, shape in want.items():
            if tuple(get(name).shape) != shape:
                raise ValueError(f"mojolearn: {f}: {name!r} has shape "
                                 f"{tuple(get(name).shape)}, expected {shape}")
        self._gpu = None
        if backend is not None:
            from .._gpu.program import GpuBlock

            self._gpu = GpuBlock(backend, get, d=d, n_heads=n_heads, n_kv_heads=n_kv_heads,
                                 head_dim=head_dim, intermediate=ff, eps=rms_norm_eps,
                                 rope_theta=rope_theta, max_positions=self.max_positions,
                                 profile=self.numeric_profile, weight_format=weight_format,
                                 qkv_bias=qkv_bias, qk_norm=qk_norm, rotary_dim=rotary_dim)
            return
        self._layer = Layer(get, "", n_heads=n_heads, n_kv_heads=n_kv_heads, head_dim=head_dim,
                            eps=rms_norm_eps, profile=self.numeric_profile,
                            weight_format=weight_format, qkv_bias=qkv_bias,
                            numeric_mode=self.numeric_mode, qk_norm=qk_norm, rot_dim=rotary_dim)
        self._rope = K.rope_table(self.max_positions, rotary_dim, K.f32_bits(rope_theta))

    def __call__(self, x):
        return self.forward(x)

    def forward(self, x):
        """x (batch, length, d) float32 -> (batch, length, d): the block at positions 0.."""
        try:
            x = np.asarray(x)
        except Exception as e:
            raise TypeError(f"mojolearn: TransformerBlock.forward: x must be a float32 array, "
                            f"got {type(x).__name__}, which numpy cannot read ({e})") from e
        if x.dtype != np.float32:
            raise TypeError(f"mojolearn: TransformerBlock.forward: x must be float32 of shape "
                            f"(batch, length, {self.d}), got dtype {x.dtype}; convert it "
                            f"yourself (mojolearn never casts silently)")
        if x.ndim != 3 or x.shape[2] != self.d:
            raise ValueError(f"mojolearn: TransformerBlock.forward: x must be float32 of shape "
                             f"(batch, length, {self.d}), got shape {x.shape}")
        B, L, _ = x.shape
        if L > self.max_positions:
            raise ValueError(f"mojolearn: TransformerBlock: length {L} is past max_positions "
                             f"{self.max_positions}")
        xs = np.array(x.reshape(B * L, self.d), dtype=np.float32, order="C")
        if self._gpu is not None:
            return (self._gpu.forward(xs, B, L) if B and L else xs).reshape(B, L, self.d)
        kt = np.zeros((B, self.n_kv_heads, self.head_dim, max(L, 1)), dtype=np.float32)
        vc = np.zeros((B, self.n_kv_heads, max(L, 1), self.head_dim), dtype=np.float32)
        if B and L:
            self._layer.forward(xs, B, L, 0, kt, vc, self._rope)
        return xs.reshape(B, L, self.d)

__all__ = ["TransformerBlock", "Layer", "Proj", "WEIGHT_FORMATS", "MAX_POSITIONS",
           "check_weight_format", "check_max_positions"]

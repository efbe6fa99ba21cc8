"""Reading a model's weights: a Hugging Face directory (``config.json`` +
``model.safetensors`` or a sharded ``model.safetensors.index.json``; tensors stored
F32, BF16 or F16, widened exactly to float32) or a ``.gguf`` file (dequantized to
float32 by the ``gguf`` package). Returns ``(ModelConfig, {hf_name: float32 array})``.

A truncated or corrupt file, a missing tensor or one of the wrong shape is refused by
name; nothing is guessed.
"""
from __future__ import annotations

import json
import math
import os
import struct

import numpy as np

from .config import ModelConfig
from . import _kernels as K

_ST_DTYPES = {"F32": (np.float32, 4), "BF16": (np.uint16, 2), "F16": (np.float16, 2)}


def _corrupt(path, why):
    return ValueError(f"mojolearn: model file {os.fspath(path)!r} is truncated or corrupt: {why}")


def read_safetensors(path) -> dict:
    """name -> float32 array of one safetensors file (F32, BF16, F16 widened exactly)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise _corrupt(path, "shorter than the 8-byte header length")
        (n,) = struct.unpack("<Q", head)
        if n > size - 8 or n > 100 * 1024 * 1024:
            raise _corrupt(path, f"header of {n} bytes does not fit a file of {size} bytes")
        try:
            header = json.loads(f.read(n))
        except (ValueError, UnicodeDecodeError, RecursionError) as e:
            raise _corrupt(path, f"header is not JSON ({e})") from None
    if not isinstance(header, dict):
        raise _corrupt(path, "header is not a JSON object")
    base = 8 + n
    out = {}
    with open(path, "rb") as f:
        for name, t in header.items():
            if name == "__metadata__":
                continue
            try:
                dt, shape, (lo, hi) = t["dtype"], list(t["shape"]), t["data_offsets"]
            except (KeyError, TypeError, ValueError):
                raise _corrupt(path, f"tensor {name!r} has a malformed entry {str(t)[:200]}") from None
            if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                       for v in shape + [lo, hi]):
                raise _corrupt(path, f"tensor {name!r} has shape {shape} and data_offsets "
                                     f"{[lo, hi]}: not non-negative ints")
            if dt not in _ST_DTYPES:
                raise ValueError(
                    f"mojolearn: model file {os.fspath(path)!r}: tensor {name!r} has dtype {dt}; "
                    f"model weights are read from F32, BF16 or F16 tensors only"
                )
            npdt, isz = _ST_DTYPES[dt]
            count = math.prod(shape)  # Python ints: no wrap-around
            if not (0 <= lo <= hi and base + hi <= size) or hi - lo != count * isz:
                raise _corrupt(path, f"tensor {name!r} ({dt}, shape {shape}) lies at bytes "
                                     f"[{lo}, {hi}) of a data section of {size - base} bytes")
            # read straight into the array (no mapping of the file: its pages would be
            # resident beside the copy and double the load's peak memory)
            raw = np.empty(shape, dtype=npdt)
            f.seek(base + lo)
            if raw.nbytes and f.readinto(memoryview(raw).cast("B")) != raw.nbytes:
                raise _corrupt(path, f"tensor {name!r} is cut short")
            if dt == "F32":
                out[name] = raw
            elif dt == "BF16":
                out[name] = K.from_bf16(raw)
            else:
                out[name] = raw.astype(np.float32)  # float16 -> float32 is exact
    return out


def read_hf_dir(path):
    cfg = ModelConfig.from_file(os.path.join(path, "config.json"))
    single = os.path.join(path, "model.safetensors")
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.isfile(single):
        return cfg, read_safetensors(single)
    if os.path.isfile(index):
        try:
            with open(index, "r", encoding="utf-8") as f:
                wm = json.load(f)["weight_map"]
        except (ValueError, KeyError, TypeError, UnicodeDecodeError, RecursionError) as e:
            raise _corrupt(index, f"no weight_map ({e})") from None
        if not isinstance(wm, dict) or not all(isinstance(v, str) for v in wm.values()):
            raise _corrupt(index, "its weight_map is not a mapping of tensor name -> shard "
                                  "file name")
        weights = {}
        for shard in sorted(set(wm.values())):
            if not shard or os.path.basename(shard) != shard or shard in (".", "..") \
                    or "\0" in shard:
                raise ValueError(
                    f"mojolearn: model directory {os.fspath(path)!r}: "
                    f"model.safetensors.index.json names the shard {shard[:200]!r}, which is "
                    f"not a file name inside the directory; shards lie beside the index"
                )
            part = os.path.join(path, shard)
            if not os.path.isfile(part):
                raise FileNotFoundError(
                    f"mojolearn: model directory {os.fspath(path)!r}: shard {shard!r} named "
                    f"by model.safetensors.index.json is missing"
                )
            got = read_safetensors(part)
            twice = sorted(set(got) & set(weights))
            if twice:
                raise ValueError(
                    f"mojolearn: model directory {os.fspath(path)!r}: tensor {twice[0]!r} is in "
                    f"more than one shard (again in {shard!r}); which one to use is not guessed"
                )
            weights.update(got)
        return cfg, weights
    raise FileNotFoundError(
        f"mojolearn: model directory {os.fspath(path)!r} has no model.safetensors or "
        f"model.safetensors.index.json"
    )


# ---------------------------------------------------------------------------- GGUF
_GGUF_NAMES = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def _gguf_value(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def _unpermute(w, n_head):
    """GGUF stores each head's q/k rows interleaved (pair i at rows 2i, 2i+1) for its
    RoPE; put them back in halves (pair i at rows i and i + head_dim/2)."""
    rows = w.shape[0]
    if w.ndim != 2 or rows % (2 * n_head):
        raise ValueError(f"mojolearn: GGUF q/k tensor of shape {w.shape} does not split into "
                         f"{n_head} heads of row pairs; the file does not match its metadata")
    return np.ascontiguousarray(
        w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
    )


def gguf_config(reader) -> ModelConfig:
    arch = _gguf_value(reader, "general.architecture")
    if arch not in ("llama", "qwen2"):
        raise NotImplementedError(
            f"mojolearn: GGUF general.architecture {arch!r} is not supported; "
            f"mojolearn.models reads llama and qwen2 GGUF files"
        )
    g = lambda k, d=None: _gguf_value(reader, f"{arch}.{k}", d)  # noqa: E731
    scaling = g("rope.scaling.type")
    if scaling not in (None, "none"):
        raise NotImplementedError(
            f"mojolearn: GGUF {arch}.rope.scaling.type = {scaling!r} is refused: RoPE "
            f"scaling is not computed"
        )
    heads = int(g("attention.head_count"))
    d = {
        "model_type": arch,
        "vocab_size": None,
        "hidden_size": int(g("embedding_length")),
        "intermediate_size": int(g("feed_forward_length")),
        "num_hidden_layers": int(g("block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(g("attention.head_count_kv", heads)),
        "rms_norm_eps": float(g("attention.layer_norm_rms_epsilon", 1e-6)),
        "rope_theta": float(g("rope.freq_base", 10000.0)),
        "max_position_embeddings": int(g("context_length", 2048)),
    }
    rd = g("rope.dimension_count")
    if rd is not None and int(rd) != d["hidden_size"] // heads:
        d["head_dim"] = int(rd)
    names = {t.name for t in reader.tensors}
    d["tie_word_embeddings"] = "output.weight" not in names
    emb = next(t for t in reader.tensors if t.name == "token_embd.weight")
    d["vocab_size"] = int(_gguf_value(reader, f"{arch}.vocab_size", emb.shape[-1]))
    return ModelConfig.from_dict(d)


def read_gguf(path):
    try:
        import gguf
    except ImportError:
        raise ImportError("mojolearn: reading a .gguf model needs the 'gguf' package "
                          "(pip install gguf)") from None
    try:
        reader = gguf.GGUFReader(os.fspath(path))
    except Exception as e:  # the package's refusal of a malformed file
        raise _corrupt(path, f"{type(e).__name__}: {e}") from None
    try:
        cfg = gguf_config(reader)
    except StopIteration:
        raise _corrupt(path, "no token_embd.weight tensor") from None
    except Exception as e:  # the package's reading of malformed metadata
        if str(e).startswith("mojolearn"):
            raise
        raise _corrupt(path, f"metadata unreadable ({type(e).__name__}: {e})") from None
    weights = {}
    for t in reader.tensors:
        parts = t.name.split(".")
        if parts[0] == "blk":
            kind = _GGUF_NAMES.get(parts[2])
            if kind is None:
                continue
            name = f"model.layers.{parts[1]}.{kind}.{parts[-1]}"
        elif t.name == "token_embd.weight":
            name = "model.embed_tokens.weight"
        elif t.name == "output_norm.weight":
            name = "model.norm.weight"
        elif t.name == "output.weight":
            name = "lm_head.weight"
        else:
            continue
        try:
            w = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
        except Exception as e:
            raise _corrupt(path, f"tensor {t.name!r} cannot be dequantized ({e})") from None
        if kind_is(parts, "attn_q"):
            w = _unpermute(w, cfg.num_attention_heads)
        elif kind_is(parts, "attn_k"):
            w = _unpermute(w, cfg.num_key_value_heads)
        weights[name] = np.ascontiguousarray(w, dtype=np.float32)
    return cfg, weights


def kind_is(parts, kind):
    return parts[0] == "blk" and len(parts) > 2 and parts[2] == kind


def read_model(path):
    p = os.fspath(path)
    if not isinstance(p, str):
        raise TypeError(f"mojolearn: CausalLM.load: path must be a str, got "
                        f"{type(p).__name__} ({p!r}); decode it first (os.fsdecode(path))")
    if "\0" in p:
        raise ValueError(f"mojolearn: CausalLM.load: path {p!r} holds a NUL byte, which no file "
                         f"name can contain")
    if os.path.isdir(p):
        return read_hf_dir(p)
    if p.endswith(".gguf") and os.path.isfile(p):
        return read_gguf(p)
    if not os.path.exists(p):
        raise FileNotFoundError(f"mojolearn: no model at {p!r}; pass a Hugging Face model "
                                f"directory or a .gguf file")
    raise ValueError(f"mojolearn: {p!r} is neither a Hugging Face model directory nor a "
                     f".gguf file")


def expected_shapes(cfg: ModelConfig) -> dict:
    return dict(_expected(cfg))


def _expected(cfg: ModelConfig):
    """(name, shape) of every tensor the config needs, one layer at a time (so a config
    naming 10**9 layers costs nothing before its first missing tensor)."""
    d, hd = cfg.hidden_size, cfg.head_dim
    nq, nk, ff = cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd, cfg.intermediate_size
    yield "model.embed_tokens.weight", (cfg.vocab_size, d)
    yield "model.norm.weight", (d,)
    if not cfg.tie_word_embeddings:
        yield "lm_head.weight", (cfg.vocab_size, d)
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        shapes = {
            p + "input_layernorm.weight": (d,), p + "post_attention_layernorm.weight": (d,),
            p + "self_attn.q_proj.weight": (nq, d), p + "self_attn.k_proj.weight": (nk, d),
            p + "self_attn.v_proj.weight": (nk, d), p + "self_attn.o_proj.weight": (d, nq),
            p + "mlp.gate_proj.weight": (ff, d), p + "mlp.up_proj.weight": (ff, d),
            p + "mlp.down_proj.weight": (d, ff),
        }
        if cfg.qkv_bias:
            shapes.update({p + "self_attn.q_proj.bias": (nq,), p + "self_attn.k_proj.bias": (nk,),
                           p + "self_attn.v_proj.bias": (nk,)})
        yield from shapes.items()


def check_weights(cfg: ModelConfig, weights: dict, where: str):
    for name, shape in _expected(cfg):
        w = weights.get(name)
        if w is None:
            raise ValueError(f"mojolearn: {where}: tensor {name!r} is missing (the config "
                             f"{cfg.model_type} with {cfg.num_hidden_layers} layers needs it)")
        w = np.asarray(w)
        if tuple(w.shape) != shape:
            raise ValueError(f"mojolearn: {where}: tensor {name!r} has shape {tuple(w.shape)}, "
                             f"the config needs {shape}")

__all__ = ["read_model", "read_hf_dir", "read_gguf", "read_safetensors", "gguf_config",
           "expected_shapes", "check_weights", "kind_is"]

"""The implementation of ``mojolearn.models.loader``: what it computes and promises is
that public module's docstring (python/mojolearn/models/loader.py), which re-exports
this module's public names."""
from __future__ import annotations

import dataclasses
import json
import os

import numpy as np

from ..._io.layout import LayoutError, read_layout
from .._base.config import ModelConfig
from .._exec import kernels as K

_ST_DTYPES = {"F32": (np.float32, 4), "BF16": (np.uint16, 2), "F16": (np.float16, 2),
              "I8": (np.int8, 1), "I32": (np.int32, 4)}
# mojolearn.checkpoint's int8 storage: I8 codes under the weight's name and I32 row
# exponents under <name> + this suffix (checkpoint.EXPONENTS_SUFFIX)
_EXPS = ".int8_exponents"


def _corrupt(path, why):
    return ValueError(f"mojolearn: model file {os.fspath(path)!r} is truncated or corrupt: {why}")


class LazyWeights:
    """name -> float32 array, read from the checkpoint when asked for (``w[name]``,
    ``w.pop(name)``) and not kept: each access reads the tensor anew. ``shape(name)``
    and ``names()`` read nothing. Made by ``read_model(path, lazy=True)``; every
    tensor it yields is float32 (F32 as stored, BF16 / F16 widened exactly, GGUF
    dequantized)."""

    def __init__(self, entries: dict, source: str):
        self._entries = dict(entries)  # name -> (shape, read)
        self.source = source

    def names(self):
        return list(self._entries)

    def shape(self, name):
        return self._entries[name][0]

    def __contains__(self, name):
        return name in self._entries

    def __len__(self):
        return len(self._entries)

    def __iter__(self):
        return iter(self._entries)

    def __getitem__(self, name):
        return self._entries[name][1]()

    def get(self, name, default=None):
        return self[name] if name in self._entries else default

    def pop(self, name):
        _, read = self._entries.pop(name)
        return read()

    def part(self, name, rows=None, cols=None):
        """Rows [r0, r1) and / or columns [c0, c1) of a 2-D tensor (rows=(r0, r1),
        cols=(c0, c1)) as a new C-contiguous float32 array: read from the file alone
        where the format allows (safetensors: those bytes only), else the tensor read
        and sliced (GGUF: dequantized whole). A 1-D tensor takes rows= only."""
        return _read_part(self._entries[name][1], rows, cols)

    def pop_stored(self, name):
        """``stored(name)``, and the entry let go (as ``pop``)."""
        v = self.stored(name)
        self._entries.pop(name)
        return v

    def stored(self, name):
        """The tensor as the checkpoint stores it, read now: a float32 array, or (from a
        safetensors file written by mojolearn.checkpoint) a lowbit.BF16Weight or
        lowbit.Int8Weight, whose materialized float32 is what ``w[name]`` gives."""
        read = self._entries[name][1]
        fn = getattr(read, "stored", None)
        return fn() if fn is not None else read()

    def load_all(self) -> dict:
        """Every tensor read now: the plain dict read_model(path) returns."""
        return {name: read() for name, (_, read) in self._entries.items()}


def _read_part(read, rows=None, cols=None):
    fn = getattr(read, "part", None)
    if fn is not None:
        return fn(rows, cols)
    w = read()
    if rows is not None:
        w = w[rows[0]:rows[1]]
    if cols is not None:
        w = w[:, cols[0]:cols[1]]
    return np.ascontiguousarray(w)


def read_safetensors(path) -> dict:
    """name -> float32 array of one safetensors file (F32, BF16, F16 widened exactly)."""
    return {name: read() for name, (_, read) in _safetensors_entries(path).items()}


def _safetensors_entries(path) -> dict:
    """name -> (shape, read()) of one safetensors file: the header is read and every
    tensor's place checked now; read() reads one tensor into a new float32 array."""
    try:
        layout = read_layout(path)
    except LayoutError as e:
        raise _corrupt(path, e.why) from None
    out = {}
    places = {}
    for name, t in layout.tensors.items():
        dt, shape = t.dtype, list(t.shape)
        if dt not in _ST_DTYPES or (dt == "I32") != name.endswith(_EXPS):
            raise ValueError(
                f"mojolearn: model file {os.fspath(path)!r}: tensor {name!r} has dtype {dt}; "
                f"model weights are read from F32, BF16 or F16 tensors, or I8 codes with their "
                f"I32 row exponents named <name>{_EXPS} (mojolearn.checkpoint's int8 storage)"
            )
        places[name] = (dt, tuple(shape), t.offset)
    for name, (dt, shape, at) in places.items():
        if dt == "I32":
            if places.get(name[:-len(_EXPS)], ("",))[0] != "I8":
                raise ValueError(f"mojolearn: model file {os.fspath(path)!r}: tensor {name!r} "
                                 f"holds int8 exponents but no I8 tensor "
                                 f"{name[:-len(_EXPS)]!r} goes with it")
            continue
        exps = None
        if dt == "I8":
            e = places.get(name + _EXPS)
            if e is None or len(shape) != 2 or e[1] != (shape[0],):
                raise ValueError(
                    f"mojolearn: model file {os.fspath(path)!r}: I8 tensor {name!r} of shape "
                    f"{shape} needs its row exponents {name + _EXPS!r} (I32, shape "
                    f"({shape[0] if shape else '?'},)); "
                    + ("they are missing" if e is None else f"they have shape {e[1]}"))
            exps = e[2]
        out[name] = (shape, _st_reader(path, name, dt, shape, at, exps))
    return out


def _st_reader(path, name, dt, shape, at, exps_at=None):
    """read() -> the tensor as float32 (F32 as stored; BF16, F16 widened exactly; I8 codes
    dequantized with their row exponents, rule L-6: the float32 the int8 storage
    materializes); read.part(rows, cols) -> rows / columns of it, reading those bytes
    only; read.stored() -> the tensor as stored: a float32 array, a lowbit.BF16Weight
    (a 2-D BF16 tensor) or a lowbit.Int8Weight (I8 codes and their exponents)."""
    npdt = _ST_DTYPES[dt][0]

    def raw_read(shape_, at_, dtype_):
        # read straight into the array (no mapping of the file: its pages would be
        # resident beside the copy and double the load's peak memory)
        raw = np.empty(shape_, dtype=dtype_)
        with open(path, "rb") as f:
            f.seek(at_)
            if raw.nbytes and f.readinto(memoryview(raw).cast("B")) != raw.nbytes:
                raise _corrupt(path, f"tensor {name!r} is cut short")
        return raw

    def exponents(rows=None):
        e = raw_read((shape[0],), exps_at, np.int32)
        return np.ascontiguousarray(e[rows[0]:rows[1]]) if rows is not None else e

    def read():
        return widen(raw_read(shape, at, npdt))

    def widen(raw, rows=None):
        if dt == "F32":
            return raw
        if dt == "BF16":
            return K.from_bf16(raw)
        if dt == "I8":
            return K.dequantize8(np.ascontiguousarray(raw), exponents(rows))
        return raw.astype(np.float32)  # float16 -> float32 is exact

    def stored():
        from ..._ops.lowbit import BF16Weight, Int8Weight

        raw = raw_read(shape, at, npdt)
        if dt == "I8":
            return Int8Weight(raw, exponents())
        if dt == "BF16" and len(shape) == 2:
            return BF16Weight(raw)
        return widen(raw)

    def part(rows=None, cols=None):
        # the bytes of those rows (one read) or of those columns of each row
        r0, r1 = rows if rows is not None else (0, shape[0])
        if len(shape) == 1:
            c0, c1, width = 0, 1, 1
        else:
            c0, c1 = cols if cols is not None else (0, shape[1])
            width = shape[1]
        if not (0 <= r0 <= r1 <= shape[0] and 0 <= c0 <= c1 <= width):
            raise ValueError(f"mojolearn: tensor {name!r} of shape {shape} has no part "
                             f"rows={rows}, cols={cols}")
        isz = np.dtype(npdt).itemsize
        raw = np.empty((r1 - r0,) if len(shape) == 1 else (r1 - r0, c1 - c0), dtype=npdt)
        with open(path, "rb") as f:
            if c0 == 0 and c1 == width:
                f.seek(at + r0 * width * isz)
                if raw.nbytes and f.readinto(memoryview(raw).cast("B")) != raw.nbytes:
                    raise _corrupt(path, f"tensor {name!r} is cut short")
            else:
                for r in range(r0, r1):
                    f.seek(at + (r * width + c0) * isz)
                    row = raw[r - r0]
                    if row.nbytes and f.readinto(memoryview(row).cast("B")) != row.nbytes:
                        raise _corrupt(path, f"tensor {name!r} is cut short")
        return widen(raw, (r0, r1))

    read.part = part
    read.stored = stored
    return read


def read_hf_dir(path, lazy=False):
    cfg = ModelConfig.from_file(os.path.join(path, "config.json"))
    weights = split_fused(cfg, LazyWeights(_hf_entries(path), f"model {os.fspath(path)!r}"))
    return cfg, (weights if lazy else weights.load_all())


# phi3 stores q/k/v and gate/up stacked by rows; each output element of fp32.v1 (and
# int15i64.v1) is its own chain over k, so rows of the stacked weight are the separate
# weights and their products the separate products, bit for bit (M-34)
_FUSED = {
    "self_attn.qkv_proj.weight": ("self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                  "self_attn.v_proj.weight"),
    "mlp.gate_up_proj.weight": ("mlp.gate_proj.weight", "mlp.up_proj.weight"),
}


def _fused_rows(cfg: ModelConfig, fused: str):
    hd = cfg.head_dim
    if fused.startswith("self_attn"):
        nq, nk = cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd
        return [(0, nq), (nq, nq + nk), (nq + nk, nq + 2 * nk)]
    ff = cfg.intermediate_size
    return [(0, ff), (ff, 2 * ff)]


def _row_entry(whole, fused: str, r0: int, r1: int, shape):
    """The entry of rows [r0, r1) of the stored tensor ``fused`` whose reader is
    ``whole``: read and part as the whole tensor's, those rows only (a safetensors file
    reads their bytes alone); stored() gives the float32 of those rows."""
    def read():
        return _read_part(whole, (r0, r1))

    def part(rows=None, cols=None):
        a, b = rows if rows is not None else (0, r1 - r0)
        if not 0 <= a <= b <= r1 - r0:
            raise ValueError(f"mojolearn: tensor {fused!r} rows [{r0}, {r1}) have no part "
                             f"rows={rows}")
        return _read_part(whole, (r0 + a, r0 + b), cols)

    read.part, read.stored = part, read
    return (tuple(shape), read)


def split_fused(cfg: ModelConfig, weights):
    """The weights under the names the models read: a phi3 checkpoint's stacked
    ``qkv_proj`` / ``gate_up_proj`` become their row blocks under the q/k/v and
    gate/up names (a LazyWeights: entries that read those rows when asked; a dict:
    contiguous copies of the rows). Other types, and a dict already split, pass as they
    are; a dict holding both a stacked tensor and its parts is refused."""
    if cfg.model_type != "phi3":
        return weights
    lazy = isinstance(weights, LazyWeights)
    for name in list(weights if not lazy else weights.names()):
        if not isinstance(name, str):
            continue
        for fused, parts in _FUSED.items():
            if not name.endswith("." + fused):
                continue
            prefix = name[:-len(fused)]
            shape = tuple(weights.shape(name)) if lazy else tuple(np.asarray(weights[name]).shape)
            rows = _fused_rows(cfg, fused)
            if len(shape) != 2 or shape[0] != rows[-1][1]:
                raise ValueError(f"mojolearn: {getattr(weights, 'source', 'weights')}: tensor "
                                 f"{name!r} has shape {shape}; the config stacks "
                                 f"{rows[-1][1]} rows ({', '.join(parts)})")
            twice = [prefix + p for p in parts if prefix + p in weights]
            if twice:
                raise ValueError(f"mojolearn: {getattr(weights, 'source', 'weights')}: both "
                                 f"{name!r} and {twice[0]!r} are given; which to use is not "
                                 f"guessed")
            if lazy:
                whole = weights._entries.pop(name)[1]
                for part_name, (r0, r1) in zip(parts, rows):
                    weights._entries[prefix + part_name] = _row_entry(
                        whole, name, r0, r1, (r1 - r0, shape[1]))
            else:
                w = weights.pop(name)
                for part_name, (r0, r1) in zip(parts, rows):
                    weights[prefix + part_name] = np.ascontiguousarray(np.asarray(w)[r0:r1])
    return weights


def _hf_entries(path) -> dict:
    single = os.path.join(path, "model.safetensors")
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.isfile(single):
        return _safetensors_entries(single)
    if os.path.isfile(index):
        try:
            with open(index, "r", encoding="utf-8") as f:
                wm = json.load(f)["weight_map"]
        except (ValueError, KeyError, TypeError, UnicodeDecodeError, RecursionError) as e:
            raise _corrupt(index, f"no weight_map ({e})") from None
        if not isinstance(wm, dict) or not all(isinstance(v, str) for v in wm.values()):
            raise _corrupt(index, "its weight_map is not a mapping of tensor name -> shard "
                                  "file name")
        entries = {}
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
            got = _safetensors_entries(part)
            twice = sorted(set(got) & set(entries))
            if twice:
                raise ValueError(
                    f"mojolearn: model directory {os.fspath(path)!r}: tensor {twice[0]!r} is in "
                    f"more than one shard (again in {shard!r}); which one to use is not guessed"
                )
            entries.update(got)
        return entries
    raise FileNotFoundError(
        f"mojolearn: model directory {os.fspath(path)!r} has no model.safetensors or "
        f"model.safetensors.index.json"
    )


# ---------------------------------------------------------------------------- GGUF
_GGUF_NAMES = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
    "attn_qkv": "self_attn.qkv_proj",
}
# llama.cpp writes phi3's stacked gate_up_proj as ffn_up (2 * intermediate rows)
_GGUF_PHI3 = dict(_GGUF_NAMES, ffn_up="mlp.gate_up_proj")
GGUF_ARCHS = ("llama", "qwen2", "qwen3", "phi3")
"""The GGUF ``general.architecture`` values read (llama.cpp writes mistral as llama)."""


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
    if arch in ("mamba", "mamba2"):
        raise NotImplementedError(
            f"mojolearn: GGUF general.architecture {arch!r} is refused: llama.cpp's converter "
            f"stores A = -exp(A_log) computed by torch, not A_log, so the model could not "
            f"compute A by rule S-15 (its bits would be another model's); load the Hugging "
            f"Face folder instead")
    if arch not in GGUF_ARCHS:
        raise NotImplementedError(
            f"mojolearn: GGUF general.architecture {arch!r} is not supported; "
            f"mojolearn.models reads {', '.join(GGUF_ARCHS)} GGUF files"
        )
    g = lambda k, d=None: _gguf_value(reader, f"{arch}.{k}", d)  # noqa: E731
    scaling = g("rope.scaling.type")
    if scaling not in (None, "none"):
        raise NotImplementedError(
            f"mojolearn: GGUF {arch}.rope.scaling.type = {scaling!r} is refused: RoPE "
            f"scaling is not computed"
        )
    names = {t.name for t in reader.tensors}
    if "rope_factors_long.weight" in names or "rope_factors_short.weight" in names \
            or "rope_freqs.weight" in names:
        raise NotImplementedError(
            "mojolearn: GGUF file holds RoPE frequency factors (rope_factors_* / "
            "rope_freqs): scaled RoPE (longrope, llama3) is refused, not computed"
        )
    heads = int(g("attention.head_count"))
    hidden = int(g("embedding_length"))
    d = {
        "model_type": arch,
        "vocab_size": None,
        "hidden_size": hidden,
        "intermediate_size": int(g("feed_forward_length")),
        "num_hidden_layers": int(g("block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(g("attention.head_count_kv", heads)),
        "rms_norm_eps": float(g("attention.layer_norm_rms_epsilon", 1e-6)),
        "rope_theta": float(g("rope.freq_base", 10000.0)),
        "max_position_embeddings": int(g("context_length", 2048)),
    }
    rd = g("rope.dimension_count")
    kl = g("attention.key_length")
    if arch == "phi3":
        # head_dim is hidden / heads; rope.dimension_count is the rotated part of a head
        hd = hidden // heads if heads else 0
        window = g("attention.sliding_window")
        if window is not None and int(window) > 0:
            d["sliding_window"] = int(window)
    else:
        hd = int(kl) if kl is not None else (int(rd) if rd is not None else None)
        if hd is not None and hd != (hidden // heads if heads else 0):
            d["head_dim"] = hd
        elif arch == "qwen3":
            d["head_dim"] = hidden // heads
        hd = d.get("head_dim", hidden // heads if heads else 0)
        if rd is not None and int(rd) != hd:
            raise NotImplementedError(
                f"mojolearn: GGUF {arch}.rope.dimension_count = {int(rd)} with heads of "
                f"{hd}: rotary on part of a head is computed for phi3 only")
    d["tie_word_embeddings"] = "output.weight" not in names
    emb = next(t for t in reader.tensors if t.name == "token_embd.weight")
    d["vocab_size"] = int(_gguf_value(reader, f"{arch}.vocab_size", emb.shape[-1]))
    cfg = ModelConfig.from_dict(d)
    if arch == "phi3" and rd is not None and int(rd) != cfg.head_dim:
        rot = int(rd)
        if rot <= 0 or rot % 2 or rot > cfg.head_dim:
            raise NotImplementedError(
                f"mojolearn: GGUF phi3.rope.dimension_count = {rot} with heads of "
                f"{cfg.head_dim}: the rotated part of a head must be a positive even count "
                f"<= head_dim")
        cfg = dataclasses.replace(cfg, rotary_dim=rot)
    return cfg


def read_gguf(path, lazy=False):
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
    # the metadata is read (the config above; a tokenizer opens the file itself): the
    # reader's parsed fields, the vocabulary among them, are about 100 MB of Python
    # objects for SmolLM2-135M that would otherwise live as long as the tensors' readers
    reader.fields.clear()
    entries = {}
    names = _GGUF_PHI3 if cfg.model_type == "phi3" else _GGUF_NAMES
    for t in reader.tensors:
        parts = t.name.split(".")
        if parts[0] == "blk":
            kind = names.get(parts[2])
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
        # llama.cpp interleaves the q/k rows of llama-architecture files only (its
        # LlamaModel converter; qwen2 / qwen3 / phi3 are written as they are)
        heads = None
        if cfg.model_type in ("llama", "mistral") and parts[-1] == "weight":
            heads = (cfg.num_attention_heads if kind_is(parts, "attn_q") else
                     cfg.num_key_value_heads if kind_is(parts, "attn_k") else None)
        shape = tuple(int(v) for v in reversed(t.shape)) if len(t.shape) > 1 else (int(t.shape[0]),)
        entries[name] = (shape, _gguf_reader(gguf, reader, t, path, heads))
    weights = split_fused(cfg, LazyWeights(entries, f"model {os.fspath(path)!r}"))
    return cfg, (weights if lazy else weights.load_all())


_GGUF_ROWS = 4096  # rows dequantized at a time


def _gguf_reader(gguf, reader, t, path, heads):
    def read():
        try:
            data = t.data
            if data.ndim == 2 and data.shape[0] > _GGUF_ROWS:
                # row blocks: the package's dequantization makes several temporaries the
                # size of its input's float32, which for a whole embedding table would
                # double the load's peak memory
                w = np.empty((data.shape[0], int(t.shape[0])), dtype=np.float32)
                for r in range(0, data.shape[0], _GGUF_ROWS):
                    w[r:r + _GGUF_ROWS] = gguf.quants.dequantize(data[r:r + _GGUF_ROWS],
                                                                 t.tensor_type)
            else:
                w = np.asarray(gguf.quants.dequantize(data, t.tensor_type), dtype=np.float32)
        except Exception as e:
            raise _corrupt(path, f"tensor {t.name!r} cannot be dequantized ({e})") from None
        if heads is not None:
            w = _unpermute(w, heads)
        _drop_pages(reader, t)
        return np.ascontiguousarray(w, dtype=np.float32)

    return read


def _drop_pages(reader, t):
    """Let the kernel drop the file pages one tensor's read touched from this process
    (they stay in the page cache): the file is mapped, and its pages would otherwise
    count against the load's peak memory beside the float32 copies."""
    import mmap

    mm = getattr(reader.data, "_mmap", None)
    if mm is None or not hasattr(mm, "madvise"):
        return
    page = mmap.PAGESIZE
    lo = int(t.data_offset) // page * page
    hi = int(t.data_offset) + int(t.n_bytes)
    try:
        mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
    except (OSError, ValueError):  # pragma: no cover - a kernel that refuses: more RSS only
        pass


def kind_is(parts, kind):
    return parts[0] == "blk" and len(parts) > 2 and parts[2] == kind


def model_type_of(path):
    """The model_type of a Hugging Face folder's config.json, None when it has none or
    it cannot be read (the folder's reader then reports why)."""
    try:
        p = os.fspath(path)
        if not isinstance(p, str) or not os.path.isdir(p):
            return None
        with open(os.path.join(p, "config.json"), "r", encoding="utf-8") as f:
            d = json.load(f)
    except (OSError, ValueError, TypeError, UnicodeDecodeError, RecursionError):
        return None
    mt = d.get("model_type") if isinstance(d, dict) else None
    return mt if isinstance(mt, str) else None


def read_model(path, lazy=False):
    """(ModelConfig, weights): a dict of float32 arrays, or a LazyWeights (lazy=True)."""
    p = os.fspath(path)
    if not isinstance(p, str):
        raise TypeError(f"mojolearn: CausalLM.load: path must be a str, got "
                        f"{type(p).__name__} ({p!r}); decode it first (os.fsdecode(path))")
    if "\0" in p:
        raise ValueError(f"mojolearn: CausalLM.load: path {p!r} holds a NUL byte, which no file "
                         f"name can contain")
    if os.path.isdir(p):
        return read_hf_dir(p, lazy=lazy)
    if p.endswith(".gguf") and os.path.isfile(p):
        return read_gguf(p, lazy=lazy)
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
        if cfg.qk_norm:
            shapes.update({p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,)})
        yield from shapes.items()


def check_weights(cfg, weights, where: str, expected=None):
    """Every tensor the config needs is there with its shape (a LazyWeights is checked
    from the checkpoint's header, nothing read). ``expected``: the (name, shape) pairs
    to check, by default those of a transformer config; another family passes its own."""
    lazy = isinstance(weights, LazyWeights)
    for name, shape in (_expected(cfg) if expected is None else expected):
        if name not in weights:
            raise ValueError(f"mojolearn: {where}: tensor {name!r} is missing (the config "
                             f"{cfg.model_type} with {cfg.num_hidden_layers} layers needs it)")
        got = tuple(weights.shape(name)) if lazy else tuple(np.asarray(weights[name]).shape)
        if got != shape:
            raise ValueError(f"mojolearn: {where}: tensor {name!r} has shape {got}, "
                             f"the config needs {shape}")


_DIGEST_CHUNK = 4 * 1024 * 1024  # bytes hashed at a time


def model_digest(path) -> str:
    """sha256 (64 hex digits) of every file the model at ``path`` is read from, each as
    its name, its size and its bytes, streamed 4 MiB at a time: a Hugging Face folder's
    ``config.json``, then ``model.safetensors``, or (without it) the
    ``model.safetensors.index.json`` and every shard it names, in sorted order; a
    ``.gguf`` file's bytes (its own name is not part of the digest). A copy of the same
    files in another folder has the same digest, any other byte another one. It reads
    the whole checkpoint (ParallelCausalLM.load compares it across ranks)."""
    import hashlib

    p = os.fspath(path)
    if os.path.isdir(p):
        files = [("config.json", os.path.join(p, "config.json"))]
        index = os.path.join(p, "model.safetensors.index.json")
        if os.path.isfile(os.path.join(p, "model.safetensors")) or not os.path.isfile(index):
            files.append(("model.safetensors", os.path.join(p, "model.safetensors")))
        else:
            try:
                with open(index, "r", encoding="utf-8") as f:
                    wm = json.load(f)["weight_map"]
                shards = sorted(set(wm.values()))
            except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError,
                    RecursionError) as e:
                raise _corrupt(index, f"no weight_map of tensor name -> shard file name "
                                      f"({e})") from None
            files.append(("model.safetensors.index.json", index))
            for shard in shards:
                if not isinstance(shard, str) or os.path.basename(shard) != shard \
                        or shard in ("", ".", "..") or "\0" in shard:
                    raise ValueError(
                        f"mojolearn: model directory {p!r}: model.safetensors.index.json names "
                        f"the shard {str(shard)[:200]!r}, which is not a file name inside the "
                        f"directory; shards lie beside the index")
                files.append((shard, os.path.join(p, shard)))
    else:
        files = [(".gguf", p)]
    h = hashlib.sha256()
    buf = bytearray(_DIGEST_CHUNK)
    view = memoryview(buf)
    for name, file in files:
        with open(file, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            raw = name.encode("utf-8", "surrogateescape")
            h.update(b"%d:%s:%d:" % (len(raw), raw, size))
            done = 0
            while True:
                n = f.readinto(view)
                if not n:
                    break
                h.update(view[:n])
                done += n
        if done != size:
            raise ValueError(f"mojolearn: model file {file!r} changed while it was read "
                             f"({done} bytes of {size}); load it again once it is written")
    return h.hexdigest()

__all__ = ["read_model", "read_hf_dir", "read_gguf", "read_safetensors", "gguf_config",
           "expected_shapes", "check_weights", "kind_is", "LazyWeights"]

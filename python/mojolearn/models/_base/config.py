"""The implementation of ``mojolearn.models.config``: what it computes and promises is
that public module's docstring (python/mojolearn/models/config.py), which re-exports
this module's public names."""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

from .inputs import check_f32_normal

SUPPORTED = ("llama", "mistral", "qwen2", "qwen3", "phi3")
"""The ``model_type`` values the models compute."""
MAX_ROPE_POSITIONS = 8192  # rule M-7: angles >= 8192 are refused
MAX_HEAD_DIM = 1024

# fields that must hold these values (anything else changes the model)
_MUST = {
    "hidden_act": ("silu",),
    "rope_scaling": (None,),
    "attn_logit_softcapping": (None,),
    "final_logit_softcapping": (None,),
    "logit_softcapping": (None,),
    "mlp_bias": (False, None),
    "pretraining_tp": (1, None),
    "quantization_config": (None,),
    "use_qk_norm": (False, None),
}


def _refuse(model_type, field, value, why="it is not computed by mojolearn.models"):
    raise NotImplementedError(
        f"mojolearn: model config: model_type {model_type!r} with {field} = {value!r} is "
        f"refused: {why}; loading it anyway would compute another model"
    )


def _int(d, key, model_type, default=None):
    v = d.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ValueError(
            f"mojolearn: model config: model_type {model_type!r}: {key} must be a positive "
            f"int, got {v!r}"
        )
    return v


def _float(d, key, model_type, default=None):
    v = d.get(key, default)
    try:
        finite = isinstance(v, (int, float)) and math.isfinite(v)
    except OverflowError:  # an int past float's range
        finite = False
    if isinstance(v, bool) or not finite or v <= 0:
        raise ValueError(
            f"mojolearn: model config: model_type {model_type!r}: {key} must be a positive "
            f"finite number, got {v!r}"
        )
    check_f32_normal(float(v), f"model config: model_type {model_type!r}: {key}")
    return float(v)


def _partial_rotary(d, mt):
    """The partial_rotary_factor of a config (top level or inside rope_parameters, as
    transformers 5 writes it); 1.0 when absent. Refused when the two disagree."""
    top = d.get("partial_rotary_factor")
    rp = d.get("rope_parameters")
    inner = rp.get("partial_rotary_factor") if isinstance(rp, dict) else None
    vals = [v for v in (top, inner) if v is not None]
    for v in vals:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 < v <= 1):
            raise ValueError(f"mojolearn: model config: model_type {mt!r}: partial_rotary_factor "
                             f"must be a number in (0, 1], got {v!r}")
    if len(vals) == 2 and float(vals[0]) != float(vals[1]):
        _refuse(mt, "rope_parameters.partial_rotary_factor", inner,
                f"it disagrees with partial_rotary_factor = {top!r}")
    return float(vals[0]) if vals else 1.0


@dataclass(frozen=True)
class ModelConfig:
    """The fields of a model's config.json that the computation reads (frozen).
    Made by ``from_dict`` / ``from_file``, which refuse by name every field that
    would change the computation and is not honoured.
    """
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    qkv_bias: bool
    qk_norm: bool = False
    """qwen3: q and k RMS-normalized per head (weights of head_dim) before RoPE (M-33)."""
    rotary_dim: int = 0
    """The leading elements of each head that RoPE rotates (M-34; phi3's
    partial_rotary_factor); 0 in a config made by hand means head_dim."""
    sliding_window: int | None = None
    """phi3: the attention window of the checkpoint; a model computes only while every
    key is inside it (max_positions <= sliding_window), so the window never masks."""

    def __post_init__(self):
        if self.rotary_dim == 0:
            object.__setattr__(self, "rotary_dim", self.head_dim)

    @classmethod
    def from_dict(cls, d: dict) -> "ModelConfig":
        """The config of a parsed config.json dict; refuses an unsupported model type or
        field by name.
        """
        if not isinstance(d, dict):
            raise TypeError(f"mojolearn: model config must be a dict, got {type(d).__name__}")
        mt = d.get("model_type")
        if mt not in SUPPORTED:
            raise NotImplementedError(
                f"mojolearn: model config: model_type {mt!r} is not supported; "
                f"mojolearn.models computes {', '.join(SUPPORTED)}"
            )
        for field, ok in _MUST.items():
            if field in d and d[field] not in ok:
                _refuse(mt, field, d[field])
        # rope: both spellings, refused when they disagree or name a scaling
        theta = d.get("rope_theta")
        rp = d.get("rope_parameters")
        if rp is not None:
            if not isinstance(rp, dict):
                _refuse(mt, "rope_parameters", rp, "it must be a dict")
            rtype = rp.get("rope_type", rp.get("type", "default"))
            if rtype != "default":
                _refuse(mt, "rope_parameters.rope_type", rtype, "only the default RoPE is computed")
            extra = sorted(set(rp) - {"rope_theta", "rope_type", "type", "partial_rotary_factor"})
            if extra:
                _refuse(mt, "rope_parameters." + extra[0], rp[extra[0]],
                        "RoPE scaling parameters are not computed")
            if "rope_theta" in rp:
                inner = _float({"rope_parameters.rope_theta": rp["rope_theta"]},
                               "rope_parameters.rope_theta", mt)
                if theta is not None and _float(d, "rope_theta", mt) != inner:
                    _refuse(mt, "rope_parameters.rope_theta", rp["rope_theta"],
                            f"it disagrees with rope_theta = {theta!r}")
                theta = rp["rope_theta"]
        if theta is None:
            theta = 10000.0
        theta = _float({"rope_theta": theta}, "rope_theta", mt)
        if mt in ("llama", "mistral", "qwen3", "phi3") and d.get("attention_bias", False):
            _refuse(mt, "attention_bias", d["attention_bias"], "q/k/v/o biases are not computed for this type")
        prf = _partial_rotary(d, mt)
        if prf != 1.0 and mt != "phi3":
            _refuse(mt, "partial_rotary_factor", prf,
                    "rotary on part of each head is computed for phi3 only (this type's "
                    "transformers model rotates the whole head)")
        if mt in ("qwen2", "qwen3"):
            if d.get("use_sliding_window", False):
                _refuse(mt, "use_sliding_window", d["use_sliding_window"],
                        "sliding-window attention is not computed")
            lt = d.get("layer_types")
            if lt is not None:
                if not isinstance(lt, list) or not all(isinstance(v, str) for v in lt):
                    raise ValueError(f"mojolearn: model config: model_type {mt!r}: layer_types "
                                     f"must be a list of str, got {lt!r}")
                other = sorted(set(lt) - {"full_attention"})
                if other:
                    _refuse(mt, "layer_types", other[0],
                            "only full-attention layers are computed")
        if mt == "mistral" and d.get("sliding_window") is not None:
            _refuse(mt, "sliding_window", d["sliding_window"], "sliding-window attention is not computed")
        window = None
        if mt == "phi3" and d.get("sliding_window") is not None:
            window = _int(d, "sliding_window", mt)
        hidden = _int(d, "hidden_size", mt)
        heads = _int(d, "num_attention_heads", mt)
        kv = _int(d, "num_key_value_heads", mt, heads)
        hd = d.get("head_dim")
        if hd is None and mt == "qwen3":
            hd = 128  # transformers' Qwen3Config default: not hidden_size / heads
        if mt == "phi3" and hd is not None and hd * heads != hidden:
            _refuse(mt, "head_dim", hd, f"phi3 computes head_dim = hidden_size / "
                    f"num_attention_heads = {hidden / heads:g}")
        if hd is None:
            if hidden % heads:
                raise ValueError(
                    f"mojolearn: model config: hidden_size {hidden} is not a multiple of "
                    f"num_attention_heads {heads} and no head_dim is given"
                )
            hd = hidden // heads
        hd = _int({"head_dim": hd}, "head_dim", mt)
        if hd % 2 or hd > MAX_HEAD_DIM:
            _refuse(mt, "head_dim", hd, f"RoPE needs an even head_dim <= {MAX_HEAD_DIM}")
        rot = int(hd * prf)  # transformers: int(head_dim * partial_rotary_factor)
        if rot <= 0 or rot % 2:
            _refuse(mt, "partial_rotary_factor", prf, f"it rotates {rot} of the {hd} elements of "
                    f"a head, which is not a positive even count")
        if heads % kv:
            raise ValueError(
                f"mojolearn: model config: num_attention_heads {heads} is not a multiple of "
                f"num_key_value_heads {kv}"
            )
        tie = d.get("tie_word_embeddings", False)
        if not isinstance(tie, bool):
            raise ValueError(f"mojolearn: model config: tie_word_embeddings must be bool, got {tie!r}")
        return cls(
            model_type=mt,
            vocab_size=_int(d, "vocab_size", mt),
            hidden_size=hidden,
            intermediate_size=_int(d, "intermediate_size", mt),
            num_hidden_layers=_int(d, "num_hidden_layers", mt),
            num_attention_heads=heads,
            num_key_value_heads=kv,
            head_dim=hd,
            rms_norm_eps=_float(d, "rms_norm_eps", mt, 1e-6),
            rope_theta=theta,
            max_position_embeddings=_int(d, "max_position_embeddings", mt, 2048),
            tie_word_embeddings=tie,
            qkv_bias=(mt == "qwen2"),
            qk_norm=(mt == "qwen3"),
            rotary_dim=rot,
            sliding_window=window,
        )

    @classmethod
    def from_file(cls, path) -> "ModelConfig":
        """The config read from a config.json file (see ``from_dict``)."""
        if not isinstance(path, (str, os.PathLike)) or not isinstance(os.fspath(path), str):
            raise TypeError(f"mojolearn: ModelConfig.from_file: path must be a str or "
                            f"os.PathLike giving a str, got {type(path).__name__}")
        if "\0" in os.fspath(path):
            raise ValueError(f"mojolearn: ModelConfig.from_file: path {os.fspath(path)!r} holds "
                             f"a NUL byte, which no file name can contain")
        try:
            with open(path, "r", encoding="utf-8") as f:
                d = json.load(f)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"mojolearn: model config: no config.json at {os.fspath(path)!r}; a Hugging "
                f"Face model directory holds config.json beside its weights"
            ) from None
        except (ValueError, UnicodeDecodeError, RecursionError) as e:
            raise ValueError(f"mojolearn: model config: {os.fspath(path)!r} is not valid JSON: {e}") from None
        except OSError as e:  # a directory, no permission, ...
            raise type(e)(f"mojolearn: model config: cannot read {os.fspath(path)!r} "
                          f"({e.strerror or e}); pass the path of a config.json file") from None
        return cls.from_dict(d)

    def fingerprint(self) -> str:
        """Identifies the model shape (a state from another model is refused)."""
        fp = (f"{self.model_type}:{self.vocab_size}:{self.hidden_size}:{self.intermediate_size}:"
              f"{self.num_hidden_layers}:{self.num_attention_heads}:{self.num_key_value_heads}:"
              f"{self.head_dim}")
        return fp if self.rotary_dim == self.head_dim else f"{fp}:rot{self.rotary_dim}"

__all__ = ["ModelConfig", "SUPPORTED", "MAX_ROPE_POSITIONS", "MAX_HEAD_DIM"]

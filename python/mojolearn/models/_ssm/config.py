"""The config of a Hugging Face ``mamba`` / ``mamba2`` checkpoint, read strictly (rules
S-6, S-7 of contracts/ops/IDENTICAL_SSM_CONTRACT.md): the fields the arithmetic honours,
and a refusal by name of every value it does not compute."""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

from .._base.config import _int
from .._base.inputs import check_f32_normal

FAMILIES = {"mamba": "mamba1", "mamba2": "mamba2"}
"""model_type -> the numeric-profile table's family."""
EPS = 1e-5  # every norm's eps (S-3)


def _refuse(mt, field, value, want):
    raise NotImplementedError(
        f"mojolearn: model config: model_type {mt!r} with {field} = {value!r} is refused: "
        f"mojolearn.models computes {field} = {want} only (rule S-6); loading it anyway would "
        f"compute another model")


def _inf_spelling(v):
    """+inf however a config spells it (S-7): Infinity / 1e999 (json -> float inf),
    {"__float__": "Infinity"} (transformers' save_pretrained), "inf" / "Infinity"."""
    if isinstance(v, dict) and set(v) == {"__float__"}:
        v = v["__float__"]
    if isinstance(v, str):
        if v.strip().lower() in ("inf", "+inf", "infinity", "+infinity"):
            return math.inf
        try:
            return float(v)
        except ValueError:
            return v
    return v


@dataclass(frozen=True)
class MambaConfig:
    """The fields of a mamba / mamba2 config.json the computation reads (frozen)."""
    model_type: str
    family: str
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    tie_word_embeddings: bool
    intermediate_size: int  # di = 2 d
    state_size: int  # N: 16 (Mamba-1) or 128 (Mamba-2)
    time_step_rank: int  # r (Mamba-1); 0 for Mamba-2
    num_heads: int  # H (Mamba-2); 0 for Mamba-1
    time_step_limit: tuple | None  # (lo, hi) as float32-representable floats, or None

    @property
    def conv_channels(self) -> int:
        return self.intermediate_size if self.family == "mamba1" else self.intermediate_size + 256

    @classmethod
    def from_dict(cls, d: dict) -> "MambaConfig":
        if not isinstance(d, dict):
            raise TypeError(f"mojolearn: model config must be a dict, got {type(d).__name__}")
        mt = d.get("model_type")
        if mt not in FAMILIES:
            raise NotImplementedError(f"mojolearn: model config: model_type {mt!r} is not a "
                                      f"Mamba type; the Mamba types are mamba, mamba2")
        fam = FAMILIES[mt]
        hidden = _int(d, "hidden_size", mt)
        layers = _int(d, "num_hidden_layers", mt)
        vocab = _int(d, "vocab_size", mt)
        di = 2 * hidden
        n = 16 if fam == "mamba1" else 128
        fixed = {"state_size": (n,), "expand": (2,), "intermediate_size": (di,),
                 "conv_kernel": (4,), "hidden_act": ("silu",), "use_bias": (False,),
                 "use_conv_bias": (True,)}
        if fam == "mamba2":
            fixed.update({"n_groups": (1,), "head_dim": (64,), "num_heads": (di // 64,),
                          "chunk_size": (256,), "rms_norm": (True,),
                          "norm_before_gate": (False,)})
        for field, ok in fixed.items():
            if field in d and (d[field] not in ok or isinstance(d[field], bool) !=
                               isinstance(ok[0], bool)):
                _refuse(mt, field, d[field], repr(ok[0]))
        eps = d.get("layer_norm_epsilon", EPS)
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or float(eps) != EPS:
            _refuse(mt, "layer_norm_epsilon", eps, repr(EPS))
        if fam == "mamba2" and hidden % 32:
            raise ValueError(f"mojolearn: model config: model_type {mt!r}: hidden_size {hidden} "
                             f"is not a multiple of 32 (Mamba-2's heads of 64 over 2 * "
                             f"hidden_size, rule S-6)")
        r = 0
        if fam == "mamba1":
            auto = -(-hidden // 16)
            tr = d.get("time_step_rank", "auto")
            if tr != "auto" and (isinstance(tr, bool) or tr != auto):
                _refuse(mt, "time_step_rank", tr, f"'auto' or ceil(hidden_size / 16) = {auto}")
            r = auto
        tie = d.get("tie_word_embeddings", True)
        if not isinstance(tie, bool):
            raise ValueError(f"mojolearn: model config: tie_word_embeddings must be bool, got "
                             f"{tie!r}")
        limit = None
        if fam == "mamba2" and "time_step_limit" in d:
            raw = d["time_step_limit"]
            if not isinstance(raw, (list, tuple)) or len(raw) != 2:
                raise ValueError(f"mojolearn: model config: model_type {mt!r}: time_step_limit "
                                 f"must be a pair (lo, hi), got {raw!r}")
            pair = []
            for v in raw:
                v = _inf_spelling(v)
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    raise ValueError(f"mojolearn: model config: model_type {mt!r}: "
                                     f"time_step_limit holds {v!r}, not a number")
                v = float(v)
                if math.isnan(v):
                    raise ValueError(f"mojolearn: model config: model_type {mt!r}: "
                                     f"time_step_limit {raw!r} holds NaN; a NaN bound would "
                                     f"make every output NaN (rule S-35): refused")
                if math.isfinite(v) and v != 0:
                    check_f32_normal(abs(v), f"model config: model_type {mt!r}: "
                                     f"time_step_limit bound")
                pair.append(v)
            limit = (pair[0], pair[1])
        return cls(model_type=mt, family=fam, vocab_size=vocab, hidden_size=hidden,
                   num_hidden_layers=layers, tie_word_embeddings=tie, intermediate_size=di,
                   state_size=n, time_step_rank=r,
                   num_heads=di // 64 if fam == "mamba2" else 0, time_step_limit=limit)

    @classmethod
    def from_file(cls, path) -> "MambaConfig":
        try:
            with open(path, "r", encoding="utf-8") as f:
                d = json.load(f)
        except (ValueError, UnicodeDecodeError) as e:
            raise ValueError(f"mojolearn: model config: {os.fspath(path)!r} is not valid JSON: "
                             f"{e}") from None
        return cls.from_dict(d)

    def fingerprint(self) -> str:
        return (f"{self.model_type}:{self.vocab_size}:{self.hidden_size}:"
                f"{self.num_hidden_layers}:{self.time_step_limit}")


Q = 256  # Mamba-2 chunk rows (S-3)


def state_shapes(cfg: MambaConfig, batch: int) -> dict:
    """name -> shape of every part of a decode state of ``batch`` sequences (S-26, S-27),
    float32, in the layout the CPU state (MambaState) and the device state
    (DeviceMambaState) share, so a saved state is the same file from either side:
    per layer the conv window (batch, channels, 4) and h (Mamba-1 (batch, di, 16),
    Mamba-2 (batch, H, 64, 128)); Mamba-2's open chunk: post-SiLU xBC rows (batch,
    256, channels), dt (batch, 256, H), the segment-sum row (batch, H, 256) and the
    cumulative sum (batch, H)."""
    nl, di = cfg.num_hidden_layers, cfg.intermediate_size
    out = {"state.conv": (nl, batch, cfg.conv_channels, 4)}
    if cfg.family == "mamba1":
        out["state.h"] = (nl, batch, di, 16)
    else:
        H = cfg.num_heads
        out.update({"state.h": (nl, batch, H, 64, 128), "state.open_x": (nl, batch, Q, cfg.conv_channels),
                    "state.open_dt": (nl, batch, Q, H), "state.seg": (nl, batch, H, Q),
                    "state.cs": (nl, batch, H)})
    return out


__all__ = ["MambaConfig", "FAMILIES", "EPS", "Q", "state_shapes"]

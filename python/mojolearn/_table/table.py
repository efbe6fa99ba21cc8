"""The numeric-profile table, as plain data: names, defaults, families, each
profile's row (what it computes, where it is the default, quality), and the
profiles measured and rejected. Read by mojolearn.profiles (resolution, refusals)
and by the measured rows (_profile_measured); nothing here runs any code.
"""
from __future__ import annotations

BASELINE = "fp32_v1"
"""The profile every other is measured against, and the fallback of a call naming
no profile where the process default does not reach: ``fp32_v1``.
"""
DEFAULT = "fp32_v1"
"""The inference default before MOJOLEARN_NUMERIC_PROFILE or ``set_numeric_profile``."""
TRAINING_DEFAULT = "fp32_v1"
"""The profile training runs in when none is named (the only one that trains)."""

# transformer: the CausalLM-style models; transformer_block: a bare block, also
# the building block of the trainers.
FAMILIES = ("transformer", "mamba1", "mamba2", "transformer_block")
"""The model families a profile row may compute or be the default for."""

ENV = "MOJOLEARN_NUMERIC_PROFILE"
"""The environment variable that sets the process inference default."""
STATE_KEY = "numeric_profile"
"""The metadata key under which a non-baseline checkpoint records its profile."""
USES = ("inference", "training")
"""What a profile may be asked for: inference or training."""

_GEMM_FP32 = "mojolearn.identical.gemm.fp32.v1"
_GEMM_INT15 = "mojolearn.identical.gemm.int15i64.v1"

PROFILES = {
    "fp32_v1": {
        "status": "baseline",
        "products": {"projections": _GEMM_FP32, "attention": _GEMM_FP32},
        "inference": True,
        "training": True,
        "computes": None,  # every family
        "default_for": None,  # every family
        "quality": {},  # it is the baseline the others are measured against
        "note": (
            "The baseline: every matrix product (projections, the head and both "
            "attention products) on mojolearn.identical.gemm.fp32.v1."
        ),
    },
    "fixed15_v1": {
        "status": "experimental",
        "products": {
            "projections": _GEMM_INT15,
            "attention": (
                f"{_GEMM_INT15} for Q.K^T; P.V stays on {_GEMM_FP32}"
            ),
        },
        "inference": True,
        "training": False,
        "computes": ("transformer", "transformer_block"),
        "default_for": ("transformer",),
        "quality": {
            "metric": (
                "relative change in held-out perplexity against fp32_v1, "
                "whole model at once"
            ),
            "unit": "fraction (0.01 = 1%)",
            "model": "SmolLM2-360M",
            "source": (
                "published measurement on SmolLM2-360M from the published "
                "numeric-profile table; kept because fixed15_v1 here is the same "
                "arithmetic bit for bit (not re-measured by this project)"
            ),
            "results": {
                "enwik8 last 1 MB": {
                    "change": 0.000006,
                    "interval": (-0.000044, 0.000055),
                },
                "pile_github": {
                    "change": 0.000033,
                    "interval": (-0.000010, 0.000076),
                },
            },
        },
        "note": (
            "Projections and the head, and the Q.K^T attention product, run as "
            "15-bit codes with an exact integer sum "
            "(mojolearn.identical.gemm.int15i64.v1); the P.V attention product "
            "stays on mojolearn.identical.gemm.fp32.v1. Inference only."
        ),
    },
}
"""The table: profile name -> its row (status, the GEMM profile of each product,
inference / training, the families it computes and is the default for, quality,
a note).
"""

REJECTED = {
    "int8_v1": (
        "measured and rejected: int8 codes on both operands of every product "
        "raised held-out perplexity by 32.2% on enwik8 and by 28.9% on "
        "pile_github, against a bar of 1%; nearly all of that comes from the int8 "
        "codes of the activations"
    ),
    "fixed15_int8_attention_v1": (
        "dropped before its whole configuration was measured: int8 on the "
        "attention products alone already read +0.6% held-out perplexity on "
        "enwik8"
    ),
}
"""Profiles measured and dropped: name -> why. Asking for one is refused with this reason."""

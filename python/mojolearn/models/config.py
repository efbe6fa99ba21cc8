"""Model configuration: what a checkpoint's config says, read strictly.

Supported ``model_type``: ``llama`` (Llama 2/3, TinyLlama, SmolLM, SmolLM2),
``mistral`` (without a sliding window), ``qwen2`` (q/k/v bias, rule M-27), ``qwen3``
(per-head q/k RMSNorm, rule M-33; ``head_dim`` defaults to 128 as transformers'
Qwen3Config) and ``phi3`` (stacked q/k/v and gate/up weights, ``partial_rotary_factor``
honoured, rule M-34; its ``sliding_window`` bounds ``max_positions``).
Every field that would change the computation and is not honoured here is refused
by name with the model type, the field and its value; it is never ignored. The
RoPE base is read from either spelling in the wild: ``rope_theta`` at the top level
(transformers 4) or ``rope_parameters["rope_theta"]`` (transformers 5).
"""
from ._base.config import ModelConfig, SUPPORTED, MAX_ROPE_POSITIONS, MAX_HEAD_DIM

__all__ = ["ModelConfig", "SUPPORTED", "MAX_ROPE_POSITIONS", "MAX_HEAD_DIM"]

"""Reading a model's weights: a Hugging Face directory (``config.json`` +
``model.safetensors`` or a sharded ``model.safetensors.index.json``; tensors stored
F32, BF16 or F16, widened exactly to float32) or a ``.gguf`` file (dequantized to
float32 by the ``gguf`` package). Returns ``(ModelConfig, {hf_name: float32 array})``,
or with ``lazy=True`` ``(ModelConfig, LazyWeights)``: the same names, each tensor
read from the file when it is asked for and not kept, so a model that packs its
weights as it builds itself never holds the whole checkpoint as float32 at once.

A truncated or corrupt file, a missing tensor or one of the wrong shape is refused by
name; nothing is guessed.
"""
from ._load.loader import (
    read_model, read_hf_dir, read_gguf, read_safetensors, gguf_config, expected_shapes,
    check_weights, kind_is, LazyWeights,
)

__all__ = [
    "read_model", "read_hf_dir", "read_gguf", "read_safetensors", "gguf_config",
    "expected_shapes", "check_weights", "kind_is", "LazyWeights",
]

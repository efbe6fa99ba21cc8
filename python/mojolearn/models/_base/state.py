"""``GenerationState``: the KV cache of a batch, the object a model's ``step`` /
``generate`` carry from call to call and ``save_state`` / ``resume`` write. It sits
below the models that fill it (the CPU model and the GPU program, whose
``DeviceGenerationState`` keeps the cache in device memory) so that both can make
one without importing each other."""
from __future__ import annotations

import numpy as np

from .inputs import count

__all__ = ["GenerationState"]


class GenerationState:
    """The KV cache of a batch: rotated keys (layers, batch, kv_heads, head_dim, tmax)
    and raw values (layers, batch, kv_heads, tmax, head_dim), float32 (never codes),
    and the number of tokens cached. Made by ``CausalLM.allocate_state`` (or
    ``CausalLM.resume``); only the model writes it: a state whose fields were changed
    from outside is refused by the next call, never read. ``device``: "cpu" (numpy
    arrays) or "gpu" (the cache in a GPU model's memory, models/_gpu.py)."""

    device = "cpu"

    def __init__(self, model_key, numeric_profile, batch, max_tokens, layers, kv_heads, head_dim):
        for nm, v in (("model_key", model_key), ("numeric_profile", numeric_profile)):
            if not isinstance(v, str):
                raise TypeError(f"mojolearn: GenerationState: {nm} must be a str, got "
                                f"{type(v).__name__}; make states with CausalLM.allocate_state")
        dims = [count(v, f"GenerationState: {nm}") for nm, v in (
            ("batch", batch), ("max_tokens", max_tokens), ("layers", layers),
            ("kv_heads", kv_heads), ("head_dim", head_dim))]
        batch, max_tokens, layers, kv_heads, head_dim = dims
        self.model_key = model_key
        self.numeric_profile = numeric_profile
        self.numeric_mode = "identical"  # the loosest mode any of its tokens was computed under
        self.batch_size = batch
        self.max_tokens = max_tokens
        self.length = 0
        self.kt, self.v = self._allocate(layers, batch, kv_heads, head_dim, max_tokens)

    def _allocate(self, layers, batch, kv_heads, head_dim, max_tokens):
        return (np.zeros((layers, batch, kv_heads, head_dim, max_tokens), dtype=np.float32),
                np.zeros((layers, batch, kv_heads, max_tokens, head_dim), dtype=np.float32))

    def __repr__(self):
        return (f"GenerationState(batch_size={self.batch_size}, length={self.length}, "
                f"max_tokens={self.max_tokens}, numeric_profile={self.numeric_profile!r}, "
                f"numeric_mode={self.numeric_mode!r})")

"""CausalLM (family ``transformer``): embedding, the blocks, the final RMSNorm and the
head, under a numeric profile, with a KV cache for generation."""
from ._transformer.causal_lm import CausalLM, GenerationState
from ._transformer.causal_lm import (  # noqa: F401  (public names outside __all__)
    STATE_KIND_KEY, STATE_KIND, STATE_MODEL_KEY, STATE_FORMAT_KEY, STATE_MODE_KEY,
)

__all__ = ["CausalLM", "GenerationState"]

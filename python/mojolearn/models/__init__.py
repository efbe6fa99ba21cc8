"""mojolearn.models: transformer and Mamba models that compute under a numeric profile.

    from mojolearn.models import CausalLM, Tokenizer
    lm = CausalLM.load("SmolLM2-135M-Instruct.Q4_1.gguf", numeric_profile="fp32_v1")
    tok = Tokenizer.load("SmolLM2-135M-Instruct.Q4_1.gguf")
    print(lm.generate_text("The capital of France is", 8, tokenizer=tok))

Every product runs the profile's GEMM; everything between the products (gather,
RMSNorm, RoPE, attention scale, mask, softmax, P.V, SiLU, residuals) is a Mojo kernel
whose arithmetic is contracts/ops/IDENTICAL_NN_CONTRACT.md. The logits do not depend
on thread count, batch composition, prefill versus decode or CPU ISA.

On the CPU the models hold their weights and states in numpy arrays (with
``device="gpu"`` in device memory: docs/gpu.md), so they need numpy (and
`tokenizers` / `gguf` for tokenizers and GGUF files): `pip install "mojolearn[models]"`.
"""
try:
    import numpy as _np  # noqa: F401  (the models' one hard dependency beyond the core)
except ImportError as e:  # pragma: no cover - exercised by the fresh-venv install test
    raise ImportError("mojolearn.models needs numpy, which is not installed: "
                      "pip install \"mojolearn[models]\" (mojolearn.linalg works without it)") from e

from ._transformer.block import TransformerBlock, WEIGHT_FORMATS
from ._transformer.causal_lm import CausalLM, GenerationState
from ._exec.device import DeviceTensor
from ._base.config import ModelConfig, SUPPORTED
from ._text.tokenizer import Tokenizer
from ._transformer.parallel import ParallelCausalLM, ParallelGenerationState, LAYOUTS
from ._ssm.model import MambaState, Mamba1Block, Mamba2Block  # also registers the Mamba types with CausalLM.load

__all__ = ["CausalLM", "TransformerBlock", "GenerationState", "ModelConfig", "Tokenizer",
           "SUPPORTED", "WEIGHT_FORMATS", "DeviceTensor", "ParallelCausalLM",
           "ParallelGenerationState", "LAYOUTS", "MambaState", "Mamba1Block", "Mamba2Block"]


def __dir__():
    """dir() shows the public API (__all__), not the module's imports."""
    return sorted(__all__)

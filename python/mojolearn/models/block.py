"""The transformer block (family ``transformer_block``) and the prepared weights
both model classes use. Arithmetic: contracts/ops/IDENTICAL_NN_CONTRACT.md."""
from ._transformer.block import (
    TransformerBlock, Layer, Proj, WEIGHT_FORMATS, MAX_POSITIONS, check_weight_format,
    check_max_positions,
)

__all__ = [
    "TransformerBlock", "Layer", "Proj", "WEIGHT_FORMATS", "MAX_POSITIONS",
    "check_weight_format", "check_max_positions",
]

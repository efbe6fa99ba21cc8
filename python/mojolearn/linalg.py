"""mojolearn.linalg: identical matrix products and the converters.

THE PROFILES (contracts/gemm/)
    matmul        mojolearn.identical.gemm.fp32.v1     float32, one fixed order
    matmul_bf16   mojolearn.identical.gemm.bf16f32.v1  bf16 widened exactly, then fp32.v1
    matmul_int8   mojolearn.identical.gemm.int8i32.v1  int8 codes, exact integer sum
    matmul_int15  mojolearn.identical.gemm.int15i64.v1 15-bit codes, exact integer sum

The numeric profile (mojolearn.profiles) is never read here: these functions always
compute the profile their name says. The model classes (mojolearn.models) choose a
profile and call the matching function.

PREPARED WEIGHTS
    prepare(b, transpose_b=...) packs a weight once for this CPU build; matmul /
    matmul_bf16 take the result in place of b (same bits, no packing per call).
    prepare(quantized tuple) does the same for matmul_int8 / matmul_int15.

THE K-SPLIT (contract 6.7, L-8)
    matmul_part / matmul_int8_part / matmul_int15_part compute the part of a product
    that a range of k contributes (a worker holding some columns of k);
    fold_parts joins the parts of every range with the one-call bits; k_split gives
    ranges that fp32.v1 can split on (whole leaves), leaf_size the leaf.

THE CONVERTERS
    to_bf16 / from_bf16, quantize_int8 / dequantize_int8, quantize_int15 /
    dequantize_int15; row_absmax and the quantizers' absmax= quantize rows split
    into column pieces as whole rows.

Every function computes in the Mojo extension; Python only checks arguments.
Results are mojolearn.Array (zero-copy through memoryview / numpy.asarray).
"""
from ._ops.convert import (dequantize_int8, dequantize_int15, from_bf16, quantize_int8, quantize_int15, row_absmax, to_bf16)
from ._ops.ksplit import (PartialProduct, fold_parts, k_split, leaf_size, matmul_int8_part, matmul_int15_part, matmul_part)
from ._ops.calls import release_workspace
from ._ops.prepared import PreparedWeight, prepare
from ._ops.gemm import INT8_MAX_K, INT15_MAX_K, matmul, matmul_bf16, matmul_int8, matmul_int15

PROFILE_NAMES = {
    "matmul": "mojolearn.identical.gemm.fp32.v1",
    "matmul_bf16": "mojolearn.identical.gemm.bf16f32.v1",
    "matmul_int8": "mojolearn.identical.gemm.int8i32.v1",
    "matmul_int15": "mojolearn.identical.gemm.int15i64.v1",
}
"""Function name -> the GEMM profile it computes (always that one)."""


def backend() -> str:
    """Which backend serves these calls: "cpu", or on a GPU build with a GPU in use
    "cuda", "hip" or "metal" (see mojolearn.set_device; never a silent fallback)."""
    from ._core.device import vendor

    return vendor()


__all__ = [
    "matmul", "matmul_bf16", "matmul_int8", "matmul_int15",
    "to_bf16", "from_bf16", "quantize_int8", "dequantize_int8",
    "quantize_int15", "dequantize_int15", "INT8_MAX_K", "INT15_MAX_K",
    "PROFILE_NAMES", "backend", "release_workspace", "prepare", "PreparedWeight",
    "matmul_part", "matmul_int8_part", "matmul_int15_part", "fold_parts", "PartialProduct",
    "k_split", "leaf_size", "row_absmax",
]


def __dir__():
    """dir() shows the public API (__all__), not the module's imports."""
    return sorted(__all__)

"""Low-bit weight storage: bf16 bits and int8 codes kept in memory.

WHAT IT IS
    A way to STORE 2-D weight matrices in fewer bytes: ``"bfloat16"`` keeps the
    top 16 bits of each float32 (``BF16Weight``), ``"int8"`` keeps one int8 code
    per weight plus one power-of-two exponent per row (``Int8Weight``, where
    ``row = codes * 2**exponent``). ``"float32"`` is no packing at all.

STORAGE, NOT ARITHMETIC
    A weight format is not a numeric profile. Packed weights are widened
    exactly to float32 (``unpack`` / ``materialize``) and the float32 path runs
    in whatever numeric profile the model computes in. Choosing a format never
    changes which arithmetic a profile names.

WHAT GETS PACKED
    ``pack`` chooses tensors by RANK, never by name: every 2-D tensor is packed,
    every other rank (biases, norms, 3-D stacks, scalars) passes through as a
    float32 copy. A tensor that is already packed in the requested format is
    copied bit for bit (no float32 round trip, so no 4-bytes-per-weight spike);
    packed in another format, it is widened to float32 and then packed.

ROUND TRIP
    ``unpack(pack(unpack(p)[0], fmt)) == unpack(p)``, bit for bit, for every
    ``p`` that ``pack`` made, with two edges that the v1 arithmetic fixes and
    Python does not paper over:
    - bf16 bits that ``to_bf16`` never produces (subnormal bits, signalling
      NaNs) are flushed or quieted when packed again;
    - an int8 row whose exponent is below -126 (every |x| under about 2**-120)
      dequantizes to signed zeros, which pack again as +0.0: equal as values,
      not as bits.

WHERE THE WORK IS DONE
    Python here only checks arguments and moves buffers. Every conversion runs
    in the Mojo extension through ``mojolearn.linalg`` (``to_bf16``,
    ``from_bf16``, ``quantize_int8``, ``dequantize_int8``). An install without
    the extension refuses the converting functions with ImportError naming
    what is missing; nothing is computed another way. NumPy is not used:
    results are ``mojolearn.Array`` and inputs may be any buffer (numpy arrays,
    memoryview, array.array, mojolearn.Array) or, where a tensor is float32,
    nested lists.

ERRORS
    Every message starts with ``mojolearn:`` and names the function, the
    argument, the refused value, the reason and the way out.
"""
from ._ops.lowbit import (
    FORMATS, BF16Weight, Int8Weight, is_packed, pack_one, pack, unpack, materialize,
    materialize_one, widen_bf16, format_of,
)

__all__ = [
    "FORMATS", "BF16Weight", "Int8Weight", "is_packed", "pack_one", "pack", "unpack",
    "materialize", "materialize_one", "widen_bf16", "format_of",
]


def __dir__():
    """dir() shows the public API (__all__), not the module's imports."""
    return sorted(__all__)

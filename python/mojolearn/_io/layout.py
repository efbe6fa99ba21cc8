"""The layout of a safetensors file, read strictly: the one reader of the format's
header that both ``checkpoint.load`` and the model loader use (they differ only in
which dtypes they accept afterwards).

A file is: 8 bytes, the little-endian length n of the header; n bytes of a JSON
object (trailing spaces allowed: the format pads the header); then the data section.
Every entry other than ``__metadata__`` (a mapping of str to str) is a tensor
``{"dtype", "shape", "data_offsets": [begin, end]}``. The format requires the tensors
to tile the data section exactly: sorted by offset, the first begins at 0, each begins
where the one before ends (no hole, no overlap, no two names on the same bytes), the
last ends at the end of the file, and each spans exactly its shape's bytes. A header
length a few bytes short, an aliased or overlapping tensor, a hole or trailing bytes
are refused by name: each would be read as tensors whose bytes are not theirs.
"""
from __future__ import annotations

import json
import math
import os
import struct
from typing import NamedTuple

ITEM_SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
              "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}
"""Bytes per element of the safetensors dtypes this reader knows."""
MAX_HEADER = 100 * 1024 * 1024


class Tensor(NamedTuple):
    dtype: str
    shape: tuple
    offset: int  # absolute, from the start of the file
    nbytes: int


class Layout(NamedTuple):
    tensors: dict  # name -> Tensor, in the header's order
    metadata: dict  # str -> str ({} when the header has none)
    data_start: int  # 8 + n
    size: int  # the file's size in bytes


class LayoutError(ValueError):
    """The file is not a well-formed safetensors file; ``why`` says what is wrong."""

    def __init__(self, why: str):
        super().__init__(why)
        self.why = why


def read_layout(path) -> Layout:
    """The checked layout of the safetensors file at ``path`` (the header is read, no
    tensor data). Raises LayoutError (a ValueError) naming what is malformed; OSError
    as the system reports it."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) == 8:
            (n,) = struct.unpack("<Q", head)
            if n <= min(size - 8, MAX_HEADER):
                head += f.read(n)
    return parse_layout(head, size)


def parse_layout(head: bytes, size: int) -> Layout:
    """The checked layout from the file's first bytes (at least 8 + n of them, or the
    whole file) and its size."""
    if len(head) < 8:
        raise LayoutError(f"shorter than the 8-byte header length ({len(head)} bytes)")
    (n,) = struct.unpack("<Q", head[:8])
    if n > size - 8 or n > MAX_HEADER:
        raise LayoutError(f"a header of {n} bytes does not fit a file of {size} bytes")
    raw = head[8:8 + n]
    if len(raw) != n:
        raise LayoutError(f"the header of {n} bytes is cut short")
    if not raw.startswith(b"{"):
        raise LayoutError("the header does not begin with '{'")
    try:
        header = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise LayoutError(f"the header is not JSON ({e})") from None
    if not isinstance(header, dict):
        raise LayoutError("the header is not a JSON object")
    meta = header.get("__metadata__", {})
    if meta is None:
        meta = {}
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                             for k, v in meta.items()):
        raise LayoutError("the header's __metadata__ is not a mapping of str to str")
    base = 8 + n
    data = size - base
    tensors = {}
    spans = []
    for name, t in header.items():
        if name == "__metadata__":
            continue
        try:
            dt, shape, offs = t["dtype"], t["shape"], t["data_offsets"]
            shape, (lo, hi) = list(shape), offs
        except (KeyError, TypeError, ValueError):
            raise LayoutError(f"tensor {name!r} has a malformed entry {str(t)[:200]}") from None
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                   for v in shape + [lo, hi]):
            raise LayoutError(f"tensor {name!r} has shape {shape} and data_offsets "
                              f"{[lo, hi]}: not non-negative ints")
        if dt not in ITEM_SIZES:
            raise LayoutError(f"tensor {name!r} has dtype {dt!r}, which is not a safetensors "
                              f"dtype ({', '.join(ITEM_SIZES)})")
        nbytes = math.prod(shape) * ITEM_SIZES[dt]  # Python ints: no wrap-around
        if hi < lo or hi - lo != nbytes:
            raise LayoutError(f"tensor {name!r} ({dt}, shape {shape}) has data_offsets "
                              f"[{lo}, {hi}], not its {nbytes} bytes")
        spans.append((lo, hi, name))
        tensors[name] = Tensor(dt, tuple(shape), base + lo, nbytes)
    at, prev = 0, None
    for lo, hi, name in sorted(spans, key=lambda s: (s[0], s[1])):
        if lo != at:
            if lo < at:
                raise LayoutError(f"tensor {name!r} at bytes [{lo}, {hi}) overlaps "
                                  f"{prev!r}, which ends at {at}")
            raise LayoutError(f"bytes [{at}, {lo}) of the data section belong to no tensor "
                              f"(a hole before {name!r})")
        at, prev = hi, name
    if at != data:
        if at > data:
            raise LayoutError(f"tensor {prev!r} ends at byte {at} of a data section of "
                              f"{data} bytes")
        raise LayoutError(f"the data section holds {data} bytes but its tensors end at "
                          f"{at}: {data - at} trailing bytes (a header length "
                          f"{'short' if spans else 'wrong'}, or bytes appended)")
    return Layout(tensors, dict(meta), base, size)


__all__ = ["read_layout", "parse_layout", "Layout", "Tensor", "LayoutError", "ITEM_SIZES",
           "MAX_HEADER"]

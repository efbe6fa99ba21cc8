"""``Buf``: the read view of a caller's memory that every reader in this layer
returns (``buffers.read`` for the buffer protocol, ``dlpack.read`` for DLPack) and
every layer above takes, checked once where an argument enters; and the item size of
each dtype name. The lowest module of the data layer: it imports nothing."""
from __future__ import annotations

__all__ = ["Buf", "ITEMSIZE"]


class Buf:
    """A read view of a caller's memory (see module docstring)."""

    __slots__ = ("addr", "dtype", "shape", "strides", "readonly", "keep", "pinned", "device", "_cc")

    def __init__(self, addr, dtype, shape, strides, readonly, keep, pinned=True, device=None):
        self.addr = addr
        self.dtype = dtype
        self.shape = shape
        self.strides = strides
        self.readonly = readonly
        self.keep = keep
        # False for memory known only through __array_interface__: nothing stops its
        # owner from freeing it while a kernel runs without the GIL, so the kernels
        # read a copy made under the GIL (and never write such memory as out)
        self.pinned = pinned
        # None for host memory; (DLPack device type, device id) for a device tensor
        # read with device_ok=True (its address is only valid on that device)
        self.device = device
        self._cc = None  # c_contiguous, computed on first use (shape and strides are fixed)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def itemsize(self) -> int:
        return ITEMSIZE.get(self.dtype, 0)

    @property
    def c_contiguous(self) -> bool:
        if self._cc is None:
            cc = True
            expect = self.itemsize
            for d, s in zip(reversed(self.shape), reversed(self.strides)):
                if d != 1 and s != expect:
                    cc = False
                    break
                expect *= d
            self._cc = cc
        return self._cc


ITEMSIZE = {
    "float16": 2, "float32": 4, "float64": 8, "int8": 1, "uint8": 1, "int16": 2,
    "uint16": 2, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "bool": 1,
}

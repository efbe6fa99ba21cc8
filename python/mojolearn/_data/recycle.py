"""Large output arrays handed out again once their user has let go of them.

A model's logits are its one large output (a 512-token prefill of a 49152-word
vocabulary: 100 MB). Fresh memory of that size comes from the operating system on
every call and is first written inside the head's product: the kernel clears every
page as it is touched, and on a virtual machine whose host takes back freed guest
memory (free page reporting: a 2-core AMD EPYC Zen 4 KVM guest did it about 2 s after
a free) the host must also map each page again. SmolLM2-135M's prefill measured
0-43 ms of system time in its head product right after the previous forward, and
140-507 ms after a 3 s pause (the head then took 211-413 ms instead of about 150).

A ``Recycler`` keeps the last ``keep`` arrays it handed out (each at least
``min_bytes``) and hands one out again, for a request of the same byte size, when
nothing outside it refers to that array any more: no caller variable, no view of it,
no object that wraps its memory (a view, ``torch.from_numpy`` and ``memoryview``
each hold a reference to the array that owns the memory). Like a fresh ``np.empty``,
what it hands out holds whatever was there: the caller writes all of it.
The kept arrays belong to the object that owns the recycler (a model): they go when
it goes, or at ``clear()``. The reference check reads CPython's reference counts;
elsewhere nothing is reused."""
from __future__ import annotations

import sys
import threading

import numpy as np

__all__ = ["Recycler"]


def _refs(kept: list, i: int) -> int:
    """CPython's reference count of kept[i] as this module reads it."""
    return sys.getrefcount(kept[i])


def _free_count():
    """What _refs reads for an object nothing but its list refers to (the list's
    reference, plus whatever the interpreter adds while reading it: measured, not
    assumed, so a version that counts differently reuses nothing in use); None where
    reference counts are not CPython's."""
    if sys.implementation.name != "cpython":
        return None
    probe = [np.empty(1, dtype=np.uint8)]
    return _refs(probe, 0)


_FREE = _free_count()


class Recycler:
    """Hands out arrays as np.empty does, reusing one of the last ``keep`` it handed
    out (each at least ``min_bytes``) that nothing else refers to any more. A copy or
    a pickle keeps nothing (its owner's arrays stay with the owner)."""

    def __init__(self, keep: int = 2, min_bytes: int = 32 << 20):
        if keep < 0 or min_bytes < 1:
            raise ValueError(f"mojolearn: Recycler: keep must be >= 0 and min_bytes >= 1 "
                             f"(got {keep}, {min_bytes})")
        self.keep = int(keep)
        self.min_bytes = int(min_bytes)
        self._kept = []  # uint8 owners, the most recently handed out first
        self._lock = threading.Lock()

    def empty(self, shape, dtype=np.float32) -> np.ndarray:
        """An uninitialized C-contiguous array of ``shape`` and ``dtype``, as
        ``np.empty`` gives, from a kept owner nobody else refers to when one of exactly
        its byte size is free."""
        dt = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        if nbytes < self.min_bytes or self.keep == 0:
            return np.empty(shape, dtype=dt)
        with self._lock:
            owner = None
            for i in range(len(self._kept)):
                if (_FREE is not None and self._kept[i].nbytes == nbytes
                        and _refs(self._kept, i) == _FREE):
                    owner = self._kept.pop(i)
                    break
            if owner is None:
                owner = np.empty(nbytes, dtype=np.uint8)
            self._kept.insert(0, owner)
            del self._kept[self.keep:]
            return owner.view(dt).reshape(shape)

    def clear(self):
        """Let go of every kept array (those still in use stay with their users)."""
        with self._lock:
            self._kept.clear()

    def kept_bytes(self) -> int:
        """Bytes of the arrays kept (free or in use)."""
        with self._lock:
            return sum(a.nbytes for a in self._kept)

    def __getstate__(self):
        return {"keep": self.keep, "min_bytes": self.min_bytes}

    def __setstate__(self, st):
        self.__init__(st["keep"], st["min_bytes"])

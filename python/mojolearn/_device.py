"""Which vendor's hardware this build of mojolearn computes on.

WHAT IT IS
    One function, ``vendor()``, that names the backend serving the kernels:
    ``"cpu"`` for the host build. A GPU build replaces the answer with the
    vendor of the device it was built for.

WHO ASKS
    ``mojolearn.profiles`` asks at the moment it decides whether to warn that a
    numeric profile was measured slower than fp32_v1 on this vendor, so the
    answer is looked up each time rather than remembered.
"""

from __future__ import annotations

__all__ = ["vendor"]


def vendor() -> str:
    """Return the vendor name of the backend in use (``"cpu"`` in this build)."""
    return "cpu"

"""mojolearn: identical matrix-product arithmetic, the same bits on every vendor.

    import mojolearn
    from mojolearn import linalg
    c = linalg.matmul(a, b)            # fp32.v1: one fixed reduction order
    q = linalg.quantize_int15(w)       # 15-bit codes + a power-of-two exponent per row
    y = linalg.matmul_int15(x, q)      # int15i64.v1: exact integer sums

Modules: linalg (kernels), profiles (the numeric-profile table), modes (the
numeric_mode switch: identical, deterministic, fast), lowbit (weight
storage), checkpoint (safetensors files), torch (torch's products under fp32.v1).
The contracts live in contracts/.
mojolearn.cpu_isa() names the CPU build serving the kernels ('amx', 'v4', 'v3'):
the best this CPU runs, or the one MOJOLEARN_ISA forces; all give the same bits.
"""
from ._data.array import Array
from ._core.cpu import cpu_isa
from ._core.device import get_device, set_device, vendor
from ._core.threads import get_num_threads, set_num_threads
from . import linalg, modes, profiles
from .modes import numeric_mode, set_numeric_mode
from .profiles import NumericProfileSpeedWarning, numeric_profile, set_numeric_profile
from .profiles import measured as numeric_profile_measured
from .profiles import profiles as numeric_profiles

__version__ = "0.1.0"


def __getattr__(name):
    # lowbit, checkpoint and torch are imported on first use (checkpoint needs
    # safetensors, torch needs torch)
    if name in ("lowbit", "checkpoint", "torch"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'mojolearn' has no attribute {name!r}")


__all__ = [
    "Array", "cpu_isa", "vendor", "get_device", "set_device", "get_num_threads", "set_num_threads", "linalg", "profiles",
    "lowbit", "checkpoint", "torch", "NumericProfileSpeedWarning", "numeric_profile",
    "set_numeric_profile", "numeric_profiles", "numeric_profile_measured", "modes",
    "numeric_mode", "set_numeric_mode",
]


def __dir__():
    """dir() shows the public API (__all__), not the module's imports."""
    return sorted(__all__)

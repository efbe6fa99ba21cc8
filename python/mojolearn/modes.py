"""Numeric modes: the promise a call's bits are made under.

WHAT A MODE IS
    A numeric mode is the PROMISE about bits, separate from the numeric profile (the
    number format the products compute in) and from the weight format (storage):
      - ``identical`` (the default): the same bits on every vendor and machine, the
        contracts of contracts/ exactly (today's kernels, unchanged);
      - ``deterministic``: the same bits every run on this machine, CPU build and
        thread count; orders may be chosen per machine for speed, nothing is
        promised across machines;
      - ``fast``: the fastest kernels the backend has, no promise on bits.
    The two are independent in both directions: every mode accepts every profile,
    resolving one never changes the other, and objects report both.

WHAT EACH MODE RUNS (BACKENDS, plain data below; keyed like mojolearn.vendor())
    On the CPU, ``deterministic`` and ``fast`` run the fp32.v1 / bf16f32.v1 kernels
    with leaves of FAST_LEAF k-steps a chain (blocking.FAST_KC) instead of the
    contract's leaf size, folded by the same tree: fewer tree merges, an order that
    depends on the build's block table and k only, so both promises hold and the bits
    differ from ``identical`` wherever k exceeds the contract's leaf. Everything
    else (the integer profiles, whose sums are exact; the models' element-wise ops;
    P.V) has nothing faster than the identical kernels and runs them: there the
    looser modes give the identical bits.
    On an NVIDIA or AMD GPU build, ``fast`` runs the float32 products (linalg.matmul /
    matmul_bf16 on host operands, copied per call, and on device-resident DLPack
    tensors; the torch mode's products on CUDA / ROCm tensors) on the vendor's BLAS
    sgemm: cuBLAS with TF32 off (CUBLAS_COMPUTE_32F, CUBLAS_DEFAULT_MATH), rocBLAS's
    float32 sgemm; a bf16 operand is widened exactly on the device first. k = 0, the
    integer profiles (exact in every mode), the converters and the GPU model's
    programs run the identical kernels. ``deterministic`` runs the identical kernels
    on every GPU: the vendors promise the same bits run to run only under conditions
    (cuBLAS: the same toolkit version, architecture and SM count, one stream; rocBLAS:
    atomics off, which is not its default) that this library cannot check, and
    which library file the loader finds depends on the environment. An Apple (Metal)
    build has no vendor BLAS: every mode runs the identical kernels there.
    A GPU build whose vendor library cannot be loaded refuses ``fast`` products by
    name (never a quiet switch to other kernels).

TF32 (NVIDIA only, asked for by name)
    ``allow_tf32(True)`` lets ``fast`` products on a CUDA GPU build run cuBLAS with
    TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32: operands rounded to 10-bit
    mantissas); ``tf32_allowed()`` reports it. It is a process-wide permission, off
    by default, and changes nothing else: not ``identical`` or ``deterministic``,
    not the CPU (no TF32 there), not AMD (MAX's rocBLAS binding cannot set rocBLAS's
    XF32 math mode, so rocBLAS stays float32), not the models' own projections
    (a model's products use its mode's plain code). ``fast_route()`` says what a
    ``fast`` product runs on the backend serving this process.

THE PROCESS MODE
    ``MOJOLEARN_NUMERIC_MODE`` sets it, read once on first use (a bad value is refused
    with the words a bad name gets); ``set_numeric_mode(mode)`` checks at once and
    returns the previous one. ``linalg`` products run under the process mode at the
    time of the call; a model (``numeric_mode=`` on its constructor / ``load``) runs
    under the mode it was made with.

STATES
    A generation state records the mode it was produced under. A state produced under
    ``fast`` or ``deterministic`` is refused by an ``identical`` model (its bits were
    not identical ones); an ``identical`` state may be continued under any mode.

ERRORS
    Every message starts with ``mojolearn:`` and names the argument, the refused value,
    the three modes and the way out; a profile name given as a mode (and a mode given
    as a profile name) is refused saying which parameter it belongs to.
"""
from ._table.modes import (
    MODES, DEFAULT, ENV, STATE_KEY, BACKENDS, numeric_mode, set_numeric_mode, using, resolve,
    kernel_code, check_resume, allow_tf32, tf32_allowed, fast_route,
)
from ._table.modes import FAST_TF32_CODE  # noqa: F401  (public names outside __all__)

__all__ = [
    "MODES", "DEFAULT", "ENV", "STATE_KEY", "BACKENDS", "numeric_mode", "set_numeric_mode",
    "using", "resolve", "kernel_code", "check_resume", "allow_tf32", "tf32_allowed",
    "fast_route",
]


def __dir__():
    """dir() shows the public API (__all__), not the module's imports."""
    return sorted(__all__)

"""Which CPU build of the kernels this process runs (the ISA dispatch).

DETECTION, BEFORE ANY BUILD IS IMPORTED
    A build for a wider ISA than the CPU has dies with SIGILL inside its own import,
    where no ``except`` helps. So the choice is made first, from the probe
    (``mojolearn/_cpuprobe.so``: cpuid and xgetbv, a C library built for baseline
    x86-64 that loads anywhere): the cpuid feature bits, the register state the OS
    enables (XCR0), and for AMX the kernel's permission to use tile data
    (``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``, asked once per process).

CHOICE
    The builds are the rows of mojolearn._core.isa.ISAS, best first; the first one this
    CPU can run is loaded. ``MOJOLEARN_ISA=<name>`` forces one; a build this CPU
    cannot run is refused by name with the features it lacks (ImportError), never
    loaded to crash. ``MOJOLEARN_NATIVE`` (an older second switch) is refused by
    name if set: the backend (CPU or GPU) is mojolearn._core.device's one choice
    (``MOJOLEARN_DEVICE``), the CPU build this module's. ``MOJOLEARN_CPU_HIDE=feat,...`` makes the
    detection pretend the CPU lacks those features (``amx-permission`` pretends the
    kernel refused AMX): it exists to test this dispatch on a big machine.
    Every build gives the same bits; only the speed differs.
"""
from __future__ import annotations

import ctypes
import os
from pathlib import Path

from .isa import ISAS, PROBE

__all__ = ["cpu_isa", "features", "isa_names", "runnable", "refusal", "choose", "brand"]

ENV = "MOJOLEARN_ISA"
NATIVE_ENV = "MOJOLEARN_NATIVE"
HIDE_ENV = "MOJOLEARN_CPU_HIDE"
AMX_PERMISSION = "amx-permission"

# feature name -> (cpuid leaf, subleaf, register index eax=0 ebx=1 ecx=2 edx=3, bit)
FEATURES = {
    "sse3": (1, 0, 2, 0), "ssse3": (1, 0, 2, 9), "fma": (1, 0, 2, 12), "cx16": (1, 0, 2, 13),
    "sse4.1": (1, 0, 2, 19), "sse4.2": (1, 0, 2, 20), "movbe": (1, 0, 2, 22),
    "popcnt": (1, 0, 2, 23), "xsave": (1, 0, 2, 26), "osxsave": (1, 0, 2, 27),
    "avx": (1, 0, 2, 28), "f16c": (1, 0, 2, 29),
    "bmi1": (7, 0, 1, 3), "avx2": (7, 0, 1, 5), "bmi2": (7, 0, 1, 8),
    "avx512f": (7, 0, 1, 16), "avx512dq": (7, 0, 1, 17), "avx512cd": (7, 0, 1, 28),
    "avx512bw": (7, 0, 1, 30), "avx512vl": (7, 0, 1, 31),
    "avx512vnni": (7, 0, 2, 11),
    "amx-bf16": (7, 0, 3, 22), "amx-tile": (7, 0, 3, 24), "amx-int8": (7, 0, 3, 25),
    "lahf": (0x80000001, 0, 2, 0), "lzcnt": (0x80000001, 0, 2, 5),
}

_probe = None
_cache: dict = {}


def _lib():
    global _probe
    if _probe is None:
        path = Path(__file__).resolve().parents[1] / f"{PROBE[0]}.so"  # the package folder
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as e:
            raise ImportError(
                f"mojolearn: the CPU probe {path.name} is missing or cannot load ({e}); "
                "build it with `make build` (or `pip install .`)"
            ) from e
        lib.mojolearn_cpuid.argtypes = (ctypes.c_uint32, ctypes.c_uint32, ctypes.c_void_p)
        lib.mojolearn_cpuid.restype = None
        lib.mojolearn_xgetbv0.argtypes = ()
        lib.mojolearn_xgetbv0.restype = ctypes.c_uint64
        _probe = lib
    return _probe


def cpuid(leaf: int, subleaf: int = 0) -> tuple:
    """(eax, ebx, ecx, edx) of cpuid(leaf, subleaf); zeros above the highest leaf."""
    key = (leaf, subleaf)
    if key not in _cache:
        lib = _lib()
        top = leaf & 0x80000000
        out = (ctypes.c_uint32 * 4)()
        lib.mojolearn_cpuid(top, 0, ctypes.addressof(out))
        if leaf > out[0]:
            _cache[key] = (0, 0, 0, 0)
        else:
            lib.mojolearn_cpuid(leaf, subleaf, ctypes.addressof(out))
            _cache[key] = tuple(out)
    return _cache[key]


def _hidden() -> set:
    raw = os.environ.get(HIDE_ENV, "")
    names = {s.strip().lower() for s in raw.split(",") if s.strip()}
    unknown = sorted(names - set(FEATURES) - {AMX_PERMISSION})
    if unknown:
        raise ImportError(
            f"mojolearn: {HIDE_ENV} names unknown CPU features {unknown}; known: "
            f"{', '.join(sorted(FEATURES))}, {AMX_PERMISSION}"
        )
    return names


def features() -> frozenset:
    """The cpuid features of this CPU that mojolearn's builds care about."""
    have = set()
    for name, (leaf, sub, reg, bit) in FEATURES.items():
        if cpuid(leaf, sub)[reg] >> bit & 1:
            have.add(name)
    return frozenset(have - _hidden())


def xcr0(feats=None) -> int:
    """The register state the OS saves (0 when the OS did not enable XSAVE)."""
    feats = features() if feats is None else feats
    if "osxsave" not in feats:
        return 0
    return int(_lib().mojolearn_xgetbv0())


_perm = None


def amx_permission() -> str | None:
    """Ask Linux (once per process) for AMX tile data; None when granted, else why not."""
    global _perm
    if AMX_PERMISSION in _hidden():
        return f"permission hidden by {HIDE_ENV}"
    if _perm is None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        # syscall(SYS_arch_prctl = 158, ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18)
        r = libc.syscall(ctypes.c_long(158), ctypes.c_long(0x1023), ctypes.c_long(18))
        if r == 0:
            _perm = ""
        else:
            _perm = (f"the kernel refused arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) "
                     f"({os.strerror(ctypes.get_errno())})")
    return _perm or None


def isa_names() -> list:
    return [row[0] for row in ISAS]


def _row(name):
    for row in ISAS:
        if row[0] == name:
            return row
    return None


def refusal(name: str) -> str | None:
    """None when this CPU (and OS) can run build `name`, else what it lacks."""
    row = _row(name)
    if row is None:
        raise ValueError(f"unknown ISA {name!r}")
    _, _, _, _, need, xbits, perm = row
    feats = features()
    hidden = _hidden()
    missing = [f + (f" (hidden by {HIDE_ENV})" if f in hidden else "") for f in need
               if f not in feats]
    why = []
    if missing:
        why.append("the CPU lacks " + ", ".join(missing))
    else:
        x = xcr0(feats)
        if x & xbits != xbits:
            why.append(f"the OS does not enable the register state (XCR0 = {x:#x}, "
                       f"needs bits {xbits:#x})")
        elif perm:
            p = amx_permission()
            if p:
                why.append(p)
    return "; ".join(why) or None


def runnable() -> list:
    """The builds this CPU can run, best first."""
    return [n for n in isa_names() if refusal(n) is None]


def _forced():
    raw = os.environ.get(ENV, "").strip()
    if raw:
        return raw, ENV
    raw = os.environ.get(NATIVE_ENV, "").strip()
    if raw:
        raise ImportError(
            f"mojolearn: {NATIVE_ENV}={raw!r} is no longer read (one switch per choice): "
            f"the CPU build is chosen by {ENV}=amx|v4|v3 and the backend by "
            f"MOJOLEARN_DEVICE=auto|cpu|gpu; unset {NATIVE_ENV}"
        )
    return None, None


_chosen = None


def choose() -> tuple:
    """(ISA name, module name) this process loads: forced by MOJOLEARN_ISA, else the
    best build this CPU can run; decided once per process (like MOJOLEARN_DEVICE, the
    variables are read at the first use). Raises ImportError (naming what is missing)
    when the forced build cannot run here or when no build can."""
    global _chosen
    if _chosen is None:
        _chosen = _choose()
    return _chosen


def _choose() -> tuple:
    name, var = _forced()
    if name is not None:
        key = name.lower()
        if _row(key) is None:
            raise ImportError(
                f"mojolearn: {var}={os.environ.get(var)!r} is not a CPU build; "
                f"use one of {', '.join(isa_names())}"
            )
        why = refusal(key)
        if why:
            ok = runnable()
            raise ImportError(
                f"mojolearn: {var}={key} cannot run on this CPU: {why}; builds this CPU "
                f"runs: {', '.join(ok) if ok else 'none'} (unset {var} to pick the best)"
            )
        return key, _row(key)[1]
    for row in ISAS:
        if refusal(row[0]) is None:
            return row[0], row[1]
    raise ImportError(
        "mojolearn: this CPU cannot run any build of the kernels: "
        + "; ".join(f"{n}: {refusal(n)}" for n in isa_names())
        + " (x86-64-v3, i.e. AVX2 + FMA, is the floor)"
    )


def cpu_isa() -> str:
    """The CPU build serving kernel calls in this process: 'amx', 'v4' or 'v3'
    (MOJOLEARN_ISA forces one). Decided without importing any build."""
    return choose()[0]


def brand() -> str:
    """The CPU's brand string (cpuid 0x80000002..4), e.g. 'Intel(R) Xeon(R) ...'."""
    raw = b"".join(
        int(r).to_bytes(4, "little") for leaf in (0x80000002, 0x80000003, 0x80000004)
        for r in cpuid(leaf)
    )
    return raw.split(b"\0", 1)[0].decode("ascii", "replace").strip()

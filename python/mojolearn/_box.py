"""The name of the machine a result was measured on: the CPU's brand string, with the
core family cpuid reports where the brand does not say it. Standard library only (the
numeric-profile table reads it without loading numpy or a kernel build)."""
from __future__ import annotations

import platform


# Core families by (vendor, cpu family, model range): a virtual machine's brand string
# is often generic ("AMD EPYC" on a Zen 3 and on a Zen 5), so the box's name adds the
# family it reads from cpuid (as /proc/cpuinfo gives it). Unknown ones add the numbers.
_CORES = (
    ("AuthenticAMD", 23, range(0x00, 0x30), "Zen"),
    ("AuthenticAMD", 23, range(0x30, 0x100), "Zen 2"),
    ("AuthenticAMD", 25, range(0x00, 0x10), "Zen 3"),
    ("AuthenticAMD", 25, range(0x10, 0x20), "Zen 4"),
    ("AuthenticAMD", 25, range(0x20, 0x60), "Zen 3"),
    ("AuthenticAMD", 25, range(0x60, 0xB0), "Zen 4"),
    ("AuthenticAMD", 26, range(0x00, 0x100), "Zen 5"),
    ("GenuineIntel", 6, range(0x55, 0x56), "Skylake-SP/Cascade Lake"),
    ("GenuineIntel", 6, range(0x6A, 0x6B), "Ice Lake-SP"),
    ("GenuineIntel", 6, range(0x8F, 0x90), "Sapphire Rapids"),
    ("GenuineIntel", 6, range(0xCF, 0xD0), "Emerald Rapids"),
    ("GenuineIntel", 6, range(0xAD, 0xAE), "Granite Rapids"),
)


def core_family(vendor_id: str, family: int, model: int) -> str:
    for v, f, models, name in _CORES:
        if v == vendor_id and f == family and model in models:
            return name
    return f"family {family} model {model}"


def cpuinfo() -> dict:
    """The first processor's fields of /proc/cpuinfo ({} where there is none)."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break                      # the first processor is enough
                key, _, val = line.partition(":")
                fields.setdefault(key.strip(), val.strip())
    except OSError:
        pass
    return fields


def box() -> str:
    """The CPU's brand string, with its core family where the brand does not say it."""
    fields = cpuinfo()
    name = fields.get("model name", platform.processor() or platform.machine())
    try:
        core = core_family(fields.get("vendor_id", ""), int(fields["cpu family"]),
                           int(fields["model"]))
    except (KeyError, ValueError):
        return name
    if core.lower() not in name.lower():
        name = f"{name} ({core})"
    return name

"""The name of the machine a result was measured on: the CPU's brand string, with the
core family cpuid reports where the brand does not say it. Standard library only (the
numeric-profile table reads it without loading numpy or a kernel build)."""
from __future__ import annotations

import os
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


def _size_bytes(text: str):
    """sysfs cache sizes read '32K', '512K', '32768K', '1M'; None when unreadable."""
    text = text.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    try:
        return int(text.rstrip("KMG")) * mult
    except ValueError:
        return None


def caches(root: str = "/sys/devices/system/cpu/cpu0/cache") -> dict:
    """The caches of the first CPU as the kernel reports them (sysfs), in bytes:
    {"L1d": .., "L1i": .., "L2": .., "L3": ..} ({} where sysfs has none). On a VM
    these are what the hypervisor exposes."""
    out = {}
    try:
        names = sorted(n for n in os.listdir(root) if n.startswith("index"))
    except OSError:
        return out
    for n in names:
        try:
            with open(os.path.join(root, n, "level")) as f:
                level = f.read().strip()
            with open(os.path.join(root, n, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(root, n, "size")) as f:
                size = _size_bytes(f.read())
        except OSError:
            continue
        key = f"L{level}" + {"Data": "d", "Instruction": "i"}.get(kind, "")
        if size is not None:
            out[key] = size
    return out


def identity() -> dict:
    """What tells two CPUs of one brand string apart in a result file: vendor, cpu
    family, model and stepping (as /proc/cpuinfo gives cpuid's), the core family
    name, and the cache sizes (caches())."""
    fields = cpuinfo()
    out = {"vendor": fields.get("vendor_id")}
    for key, name in (("cpu family", "family"), ("model", "model"), ("stepping", "stepping")):
        try:
            out[name] = int(fields[key])
        except (KeyError, ValueError):
            out[name] = None
    out["core"] = (core_family(out["vendor"] or "", out["family"], out["model"])
                   if out["family"] is not None and out["model"] is not None else None)
    out["caches"] = caches()
    return out

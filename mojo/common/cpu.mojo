"""What a build was compiled for, and the AMX permission request.

Every CPU build (python/mojolearn/_isa.py) is the same source compiled for another
target; `build_isa()` lets the Python side and the tests see which one is loaded.
"""
from std.sys.info import CompilationTarget
from std.ffi import external_call


def build_isa() -> String:
    """The instruction sets the kernels of this build were compiled to use."""
    comptime if CompilationTarget.has_intel_amx():
        return "amx-int8+avx512vnni"
    elif CompilationTarget.has_vnni() and CompilationTarget.has_avx512f():
        return "avx512vnni"
    elif CompilationTarget.has_avx512f():
        return "avx512f"
    elif CompilationTarget.has_avx2():
        return "avx2"
    else:
        return "baseline"


def request_amx_permission() -> Bool:
    """Linux lets a process use AMX tile data only after
    arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA); asking again is harmless.
    The loader asked before importing this build; the module init asks again so a
    direct import never reaches a tile instruction without it."""
    comptime if CompilationTarget.has_intel_amx():
        return external_call["syscall", Int64](Int64(158), Int64(0x1023), Int64(18)) == 0
    else:
        return True

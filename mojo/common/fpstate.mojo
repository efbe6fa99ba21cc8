"""The x86 floating-point state every CPU kernel runs under.

The v1 contracts want denormal inputs read as signed zeros (DAZ) but results
rounded normally (FTZ off): x86's FTZ flushes results that round up to 2**-126,
which the contract keeps. Every worker sets this state on entry and restores the
previous MXCSR on exit, so the kernels never depend on what a thread pool left.
"""
from std.sys import llvm_intrinsic, CompilationTarget

comptime MXCSR_DAZ: Int32 = 0x40
comptime MXCSR_FTZ: Int32 = 0x8000
comptime MXCSR_RC_MASK: Int32 = 0x6000
comptime MXCSR_EXC_MASKS: Int32 = 0x1F80  # invalid, denormal, /0, overflow, underflow, inexact


@always_inline
def read_mxcsr() -> Int32:
    var v: Int32 = 0
    comptime if CompilationTarget.is_x86():
        llvm_intrinsic["llvm.x86.sse.stmxcsr", NoneType](Pointer(to=v))
    return v


@always_inline
def write_mxcsr(v: Int32):
    var x = v
    comptime if CompilationTarget.is_x86():
        llvm_intrinsic["llvm.x86.sse.ldmxcsr", NoneType](Pointer(to=x))
    _ = x


@always_inline
def enter_contract_mode() -> Int32:
    """Set DAZ on, FTZ off, round-to-nearest, every exception masked (inf and NaN
    are results here, never traps); return the old MXCSR. The kernels' bits need DAZ:
    a build for a target without this state is refused at compile time."""
    comptime assert CompilationTarget.is_x86(), (
        "mojolearn's CPU kernels need x86 MXCSR (DAZ on, FTZ off); this target has no "
        "implementation of that state yet"
    )
    var old = read_mxcsr()
    write_mxcsr((((old | MXCSR_DAZ) & ~MXCSR_FTZ) & ~MXCSR_RC_MASK) | MXCSR_EXC_MASKS)
    return old


@always_inline
def leave_contract_mode(old: Int32):
    write_mxcsr(old)


def enter_ieee_mode() -> Int32:
    """DAZ off, FTZ off, round to nearest: what the GPU kernels run under (for the
    CPU run of their bodies, the test support in */gpu/cpu_run.mojo); returns the
    old MXCSR."""
    var old = read_mxcsr()
    write_mxcsr(old & ~(MXCSR_DAZ | MXCSR_FTZ | MXCSR_RC_MASK))
    return old


def leave_ieee_mode(old: Int32):
    write_mxcsr(old)

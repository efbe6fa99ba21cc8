"""The floating-point state every CPU kernel runs under, and the build switch that
decides how subnormal inputs are read.

The v1 contracts want denormal inputs read as signed zeros (rule 6.1, the ops
contract's "every operand is read flushed") but results rounded normally, then
flushed explicitly where the contracts say: x86's FTZ flushes results that round up
to 2**-126, which the contract keeps, so FTZ stays off everywhere. Two ways to read
the inputs give the same bits:

  hardware DAZ (the default on x86): MXCSR DAZ on, FTZ off. Every float operation
      reads a subnormal operand as the zero of its sign by itself, so the kernels'
      inner loops need no per-step flush (arith.tree.chain_step_daz is the bare fma).
  explicit flush (EXPLICIT_FLUSH): DAZ off, FTZ off, and every input is flushed by
      the code (arith.fp.daz_in, arith.tree.chain_step_daz's explicit form). This is
      the only way on AArch64, whose FPCR.FZ flushes inputs AND results (and decides
      tininess its own way): there FZ stays off. On x86 it is built with
      `-D MOJOLEARN_EXPLICIT_FLUSH=1` (build_native.py --explicit-flush) to prove
      on x86 that the explicit path gives the hardware-DAZ path's bits.

EXPLICIT_FLUSH is on for every target that is not x86 (whatever the define says),
so no build can silently run without the DAZ its code relies on.

Every worker sets the state on entry and restores the previous one on exit, so the
kernels never depend on what a thread pool left.
"""
from std.sys import llvm_intrinsic, CompilationTarget, get_defined_int

comptime EXPLICIT_FLUSH: Bool = (
    get_defined_int["MOJOLEARN_EXPLICIT_FLUSH", 0]() != 0 or not CompilationTarget.is_x86()
)

# AArch64 (the 64-bit ARM targets: every one has NEON; 32-bit ARM is not a target)
comptime AARCH64: Bool = CompilationTarget.has_neon() and not CompilationTarget.is_x86()

comptime MXCSR_DAZ: Int32 = 0x40
comptime MXCSR_FTZ: Int32 = 0x8000
comptime MXCSR_RC_MASK: Int32 = 0x6000
comptime MXCSR_EXC_MASKS: Int32 = 0x1F80  # invalid, denormal, /0, overflow, underflow, inexact

# AArch64 FPCR: FIZ (bit 0) and AH (bit 1) of FEAT_AFP (flush inputs only, alternate
# handling; RES0 without it), trap enables IOE DZE OFE UFE IXE (bits 8-12) and IDE
# (bit 15), RMode (bits 22-23, 0 = to nearest), FZ (bit 24), DN (bit 25)
comptime FPCR_FIZ_AH: Int64 = 0x3
comptime FPCR_TRAPS: Int64 = 0x9F00
comptime FPCR_RMODE: Int64 = 0xC00000
comptime FPCR_FZ: Int64 = 0x1000000
comptime FPCR_DN: Int64 = 0x2000000


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
def _read_fpcr() -> Int64:
    comptime if AARCH64:
        return llvm_intrinsic["llvm.aarch64.get.fpcr", Int64]()
    return 0


@always_inline
def _write_fpcr(v: Int64):
    comptime if AARCH64:
        llvm_intrinsic["llvm.aarch64.set.fpcr", NoneType](v)


@always_inline
def _read_state() -> Int64:
    comptime if CompilationTarget.is_x86():
        return Int64(read_mxcsr())
    return _read_fpcr()


@always_inline
def _write_state(v: Int64):
    comptime if CompilationTarget.is_x86():
        write_mxcsr(Int32(v))
    else:
        _write_fpcr(v)


@always_inline
def enter_contract_mode() -> Int64:
    """The contract state; returns the old one (for leave_contract_mode).
    x86: DAZ on (off under EXPLICIT_FLUSH), FTZ off, round to nearest, every
    exception masked (inf and NaN are results here, never traps).
    AArch64 (always EXPLICIT_FLUSH): FZ off, FIZ and AH off, round to nearest, no
    exception traps, DN off (NaNs propagate, as on x86).
    A target that is neither is refused at compile time."""
    comptime assert CompilationTarget.is_x86() or AARCH64, (
        "mojolearn's CPU kernels set the floating-point state of x86 (MXCSR) or "
        "AArch64 (FPCR) only; this target has no implementation of it"
    )
    var old = _read_state()
    comptime if CompilationTarget.is_x86():
        var m = Int32(old)
        comptime if EXPLICIT_FLUSH:
            m = m & ~MXCSR_DAZ
        else:
            m = m | MXCSR_DAZ
        write_mxcsr(((m & ~MXCSR_FTZ) & ~MXCSR_RC_MASK) | MXCSR_EXC_MASKS)
    else:
        _write_fpcr(old & ~(FPCR_FIZ_AH | FPCR_TRAPS | FPCR_RMODE | FPCR_FZ | FPCR_DN))
    return old


@always_inline
def leave_contract_mode(old: Int64):
    _write_state(old)


def enter_ieee_mode() -> Int64:
    """DAZ off, FTZ off, round to nearest (AArch64: FZ, FIZ, AH off, RN): what the
    GPU kernels run under (for the CPU run of their bodies, the test support in
    */gpu/cpu_run.mojo); returns the old state."""
    var old = _read_state()
    comptime if CompilationTarget.is_x86():
        write_mxcsr(Int32(old) & ~(MXCSR_DAZ | MXCSR_FTZ | MXCSR_RC_MASK))
    else:
        _write_fpcr(old & ~(FPCR_FIZ_AH | FPCR_RMODE | FPCR_FZ))
    return old


def leave_ieee_mode(old: Int64):
    _write_state(old)

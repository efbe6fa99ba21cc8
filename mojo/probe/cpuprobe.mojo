"""The CPU probe: a tiny C-ABI library built for baseline x86-64 (SSE2 only), so it
loads on every x86-64 CPU. Python (mojolearn._cpu) asks it for cpuid and xgetbv
before choosing which kernel build to import: a build for a wider ISA would die
with SIGILL inside its own import, where no `except` can help.
"""
from std.sys import inlined_assembly
from common.ptr import U32Ptr


@export
def mojolearn_cpuid(leaf: UInt32, subleaf: UInt32, out_addr: Int) abi("C"):
    """Stores eax, ebx, ecx, edx of cpuid(leaf, subleaf) at out[0..4]."""
    var o = U32Ptr(unsafe_from_address=out_addr)
    # each asm block loads eax/ecx itself and declares every register cpuid writes
    comptime ASM = "movl $1, %eax\n\tmovl $2, %ecx\n\tcpuid"
    o.unsafe_store(0, inlined_assembly[ASM, UInt32, constraints="={eax},{edi},{esi},~{ebx},~{ecx},~{edx}"](leaf, subleaf))
    o.unsafe_store(1, inlined_assembly[ASM, UInt32, constraints="={ebx},{edi},{esi},~{eax},~{ecx},~{edx}"](leaf, subleaf))
    o.unsafe_store(2, inlined_assembly[ASM, UInt32, constraints="={ecx},{edi},{esi},~{eax},~{ebx},~{edx}"](leaf, subleaf))
    o.unsafe_store(3, inlined_assembly[ASM, UInt32, constraints="={edx},{edi},{esi},~{eax},~{ebx},~{ecx}"](leaf, subleaf))


@export
def mojolearn_xgetbv0() abi("C") -> UInt64:
    """XCR0 (the register state the OS saves); only call when cpuid says OSXSAVE."""
    var lo = inlined_assembly["xgetbv", UInt32, constraints="={eax},{ecx},~{edx}"](UInt32(0))
    var hi = inlined_assembly["xgetbv", UInt32, constraints="={edx},{ecx},~{eax}"](UInt32(0))
    return (UInt64(hi) << 32) | UInt64(lo)

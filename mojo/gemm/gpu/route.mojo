"""The per-call route decision of the fp32.v1 GPU kernels (rule 6.8): the exponent
pre-pass, as the phases ONE thread runs.

WHAT IT COMPUTES
    route[0] = 1 when (least biased exponent over the nonzero finite elements of A,
    flushed as the kernel reads them) + (the same over B) >= 2 * 127 - 80, else 0.
    With 1 the tiled kernel runs its chains without the per-step flush (the flush
    provably never fires: gemm/gpu/arith.mojo, fast_route_ok); with 0 it runs the
    flushing chain. Either way the bits are rule 6.3's.

HOW IT IS RUN
    exponent_min_kernel (one launch per operand, grid-stride over its elements):
    phase 1 every thread folds its elements into its slot of shared memory, barrier,
    phase 2 thread 0 folds the block's slots into partial[block]. Then route_kernel
    (one thread) folds both operands' partials into the decision. A minimum is
    exact in any order, so the grid shape changes nothing. cpu_run.mojo runs the same
    phases in loops. The decode shapes skip the pre-pass (threads.f32_route_prepass):
    route_flushing_kernel sets route[0] = 0.
"""
from std.memory import AddressSpace
from common.ptr import I32Ptr
from gemm.gpu.arith import load_operand, operand_exponent, fast_route_ok, NO_EXPONENT

comptime ROUTE_THREADS = 256
comptime ROUTE_MAX_BLOCKS = 256


@always_inline
def route_blocks(count: Int) -> Int:
    """Blocks of the pre-pass over `count` elements (at least 16 elements a thread)."""
    return max(1, min((count + ROUTE_THREADS * 16 - 1) // (ROUTE_THREADS * 16), ROUTE_MAX_BLOCKS))


@always_inline
def exponent_min_phase1[dt: DType, AS: AddressSpace](
    x: Pointer[Scalar[dt], MutAnyOrigin], count: Int,
    smem: Pointer[Int32, MutAnyOrigin, address_space=AS], block: Int, nblocks: Int, tid: Int,
):
    """smem[tid] = the least operand_exponent over elements block * T + tid,
    stepping by the whole grid (T threads a block)."""
    var e = Int32(NO_EXPONENT)
    var idx = block * ROUTE_THREADS + tid
    var stride = nblocks * ROUTE_THREADS
    while idx < count:
        e = min(e, operand_exponent(load_operand[dt](x, idx)))
        idx += stride
    smem.unsafe_store(tid, e)


@always_inline
def exponent_min_phase2[AS: AddressSpace](
    smem: Pointer[Int32, MutAnyOrigin, address_space=AS], partial: I32Ptr, block: Int, tid: Int
):
    """Thread 0: partial[block] = the least of the block's slots."""
    if tid != 0:
        return
    var e = Int32(NO_EXPONENT)
    for t in range(ROUTE_THREADS):
        e = min(e, smem.unsafe_load(t))
    partial.unsafe_store(block, e)


@always_inline
def route_flushing_thread(route: I32Ptr):
    """route[0] = 0: the flushing chains, without a pre-pass (always right)."""
    route.unsafe_store(0, Int32(0))


@always_inline
def route_thread(pa: I32Ptr, ga: Int, pb: I32Ptr, gb: Int, route: I32Ptr):
    """route[0] = 1 (flush-free chains, rule 6.8) or 0 (flushing chains)."""
    var ea = Int32(NO_EXPONENT)
    var eb = Int32(NO_EXPONENT)
    for g in range(ga):
        ea = min(ea, pa.unsafe_load(g))
    for g in range(gb):
        eb = min(eb, pb.unsafe_load(g))
    route.unsafe_store(0, Int32(1) if fast_route_ok(ea, eb) else Int32(0))

"""Block sizes of the CPU GEMMs: the one table (BLIS's cntx_init idea), per ISA build.

Every register tile, cache block and chunk size of gemm/cpu/ is defined here and
nowhere else; the kernels import them, and `block_table()` hands the table of the
build that is loaded to Python (`_native_<isa>.blocking(())`), so the tests place
their edge cases on this build's boundaries instead of hard-coding them. None of
these numbers can change a bit: fp32.v1's order depends on k only (6.5), and the
integer sums are exact.

fp32.v1 / bf16f32.v1 (fp32_v1.mojo, ukernel_f32.mojo, pack_f32.mojo)
    W       float32 lanes of a vector (16 with AVX-512: builds v4, amx; 8 with AVX2: v3)
    MR x NR the register tile (NR = NV vectors); KU k steps per micro-kernel loop
            iteration; KC is the leaf itself
            (arith.tree.leaf_size, rule 6.2), so the cache block over k IS the leaf
    MC      rows of A packed per block; NCS columns of B per chunk of the small-m
            path; the packed B chunk stays within PACK_B_BYTES; a row block whose A over
            all of k fits in PANEL_OUTER_A_BYTES is visited column panel by column panel
            (its tree slots stay in L2), a larger one leaf by leaf; PACK_ROWS rows of k
            are packed across every panel at a time (A stored (k, m), B stored (k, n))
rows_f32.mojo (m <= ROWS_MAX, decode shapes)
    TCHUNK  NT columns transposed per chunk (NTG groups of 16; the fused NT leaf holds
            TCHUNK / W register groups of W lanes); RKB rows of B a pass of the
            rows kernel over the columns
integer GEMMs (int_gemm.mojo, ukernel_int.mojo, pack_int.mojo: the VNNI path)
    IMR x INR a B panel's tile (INV vectors of IW int32 lanes); int8 runs two panels
            at once (IMR x 2 * INR), int15 both planes of one; at most IMC rows per A
            block and within INT_A_BLOCK_BYTES (the block stays in L2 while B streams past),
    INT_PACK_B_BYTES for the packed B chunk
int_rows.mojo: INT_ROWS_MAX rows, LW int32 lanes a step
avx2_int.mojo (v3): AVX2_MR x AVX2_NR tile of AVX2_V lanes (int15: AVX2_MR15 x AVX2_V, both
            halves of a panel in turn), blocks
amx_int.mojo (amx): AMX_KB k-bytes a tile row, AMX_KC_BLOCKS k-blocks a k-chunk, blocks
EXPLICIT_FLUSH (not a size): 1 when this build reads subnormal inputs by explicit flushes
    instead of the hardware's DAZ (common/fpstate.mojo); the same bits either way

The cache plan (CachePlan, below): the blocks meant to stay in a cache are not
constants but a function of the cache sizes this CPU reports. Each build's constants
are taken as tuned for one machine's caches (REF_L2 / REF_L3 below: v3 for the AMD
Zen 3 it was tuned on, 512 KiB of L2; v4 for the AMD Zen 4 / Zen 5 it was last
measured on, 1 MiB; amx for the Intel Sapphire Rapids, 2 MiB),
and plan_for keeps the share of the cache they were tuned to use: an L2-resident
block scales with L2 / REF_L2 (within a quarter and four times the tuned value), an
L3-resident chunk shrinks with L3 / REF_L3 when the L3 is smaller (never grows: a
larger L3 needs no larger chunk). On the reference machines the plan IS the tuned
table. mojolearn's loader hands the sysfs sizes over once per process
(set_cache_plan); until then, and where sysfs reports none, the reference plan
serves. Every entry reads the plan once per call (GemmArgs.plan, IntArgs.plan), so a
call's workspace size and its blocks always agree. No block size can change a bit
(the same reason as above); tests/test_cache_plan.py checks that on extreme plans.
"""
from std.sys import simd_width_of
from std.sys.info import CompilationTarget
from std.ffi import external_call, _get_global_or_null
from std.memory.alloc import unsafe_alloc
from common.fpstate import EXPLICIT_FLUSH

# ---------------------------------------------------------------- fp32.v1 / bf16f32.v1
comptime W = simd_width_of[DType.float32]()
# AVX2 (v3): a 4 x 24 tile (12 accumulators, 3 B vectors and 1 broadcast: the 16 ymm
# registers), 7 loads per 12 fmas instead of the 6 x 16 tile's 8. On the AMD EPYC Zen 2
# (2 threads, A/B builds in alternating processes) it took 1024^3 from 13.7 to 12.5 ms,
# the 256- to 1536-row products of a SmolLM2 training step 1-29% faster, CausalLM greedy
# decode 10% and prefill 2%; 2048^3 within the noise. Prepared decode rows lost (make
# bench vs numpy, 1 x 4096^2 NN / NT: 0.92 / 0.83 -> 0.83 / 0.83x; 16 x 4096^2: 1.46 /
# 1.85 -> 1.27 / 1.41x). Not measured on the Zen 3 the rest was tuned on
# (AVX-512 builds: 12 x 32; the NEON build (W = 4, 32 registers): 6 x 8 as before)
comptime NV = 3 if W == 8 else 2
comptime NR = NV * W
comptime MR = 12 if W >= 16 else (4 if W == 8 else 6)
# AVX2 (v3): 224 rows. On Zen 3 (512 KiB L2), with the 6 x 16 tile, 72 rows left 2
# threads at 0.80-0.90x numpy on 1024^3 / 2048^3 and 0.72x at m = 144; 216 rows (each
# packed B leaf slice reused by 36 tiles instead of 12) gave 0.93-1.0x in the same
# runs. With the 4-row tile: 56 panels (a multiple of 4, so the smallest cache plan's
# quarter is a whole number of panels too)
comptime MC = 12 * MR if W >= 16 else (56 * MR if W == 8 else 36 * MR)  # reference plan's mc
# the few-rows path (f32_block_small_m, f32_small_prepared) serves m <= SMALL_M: a
# choice of loop nest, not a cache block, so it stays fixed (the tuned MC)
comptime SMALL_M = MC
comptime NCS = 512 // NR * NR  # a whole number of NR panels (504 columns on v3)
# k steps per iteration of the micro-kernel loop. AVX2 (v3): 4. On the AMD EPYC Zen 3
# (2 cores) the one-step loop left the blocked kernel at 57-73 GF/s a core against
# 89 for the bare FMAs; four steps an iteration gave 0.95-1.02x numpy at 1024^3 and
# 2048^3, NN and NT, 2 threads, against 0.85-0.93x (in-process A/B of the two builds);
# two steps gave 0.90-0.94x, eight the same as four. AVX-512 builds: 1, as measured
# before (not re-measured: this was tuned on an AVX2-only CPU)
comptime KU = 4 if W == 8 else 1
# numeric_mode deterministic / fast: leaves of at least FAST_KC k-steps (not fp32.v1's
# order: fewer tree merges per output; see fp32_v1.mode_leaf)
comptime FAST_KC = 512
# rows of k that pack_a (A stored (k, m)) and pack_b (B stored (k, n)) copy across every
# full panel before the next rows: each row is read along its length instead of one
# panel's rows, a row stride apart, at a time (a loop order, not a cache block)
comptime PACK_ROWS = 8
comptime PACK_B_BYTES = 16 * 1024 * 1024
# leaf outer (fp32_v1.f32_block_kouter): a task whose B over all of k is more than one
# packed chunk, visited leaf by leaf over all of its output, when the tree slots of that
# output stay within KOUTER_SLOT_BYTES (a long k and a small output: 256 x 49152 x 576,
# the gradient through an LM head, would otherwise pack its A once per column chunk)
comptime KOUTER_SLOT_BYTES = 8 * 1024 * 1024
# AVX2 (v3): 256 KiB. Once the leaf-by-leaf order prefetched the next column panel's
# B (fp32_v1.f32_block), it beat the panel-outer order wherever A over all of k spills
# L2 (AMD EPYC Zen 2, alternating processes: 1 thread, M = N = 1024, k = 1024 90 -> 94
# and k = 2048 87 -> 93 GFLOP/s; 2 threads, 2048^3 168-170 -> 178-181 GFLOP/s, NN, NT
# and TN). AVX-512 builds keep 2 MiB (not measured: no such CPU here)
comptime PANEL_OUTER_A_BYTES = 256 * 1024 if W == 8 else 2 * 1024 * 1024
# rows_f32 (decode shapes)
comptime ROWS_MAX = 4
# rows of B one pass of rows_f32._leaf_rows takes over the columns: every accumulator
# is loaded and stored once per RKB steps instead of once per step, and nothing is
# prefetched (a prefetch of the next rows made it slower). AMD EPYC Zen 2 (v3),
# alternating processes, B stored (k, n), 1 thread: 1 x 4096 x 4096 6.0-6.7 -> 3.6-4.1
# ms, 4 x 4096 x 4096 7.5-9.0 -> 4.8-5.5 ms, 1 x 49152 x 576 10.0-12.0 -> 6.0-7.6 ms
comptime RKB = 4
comptime NTG = 2
comptime TCHUNK = 16 * NTG

# ---------------------------------------------------------------- integer GEMMs
comptime IMR = 6
comptime INR = 32
comptime IW = 16
comptime INV = INR // IW
comptime IMC = 64 * IMR
comptime INT_A_BLOCK_BYTES = 768 * 1024
comptime INT_PACK_B_BYTES = 8 * 1024 * 1024
comptime INT_ROWS_MAX = 4
comptime LW = 16
# AVX2 (v3)
comptime AVX2_MR = 6
comptime AVX2_MR15 = 5
comptime AVX2_G15 = 3  # k-pairs per exact int32 partial sum of 15-bit codes (3 * 2 * 16512**2 < 2**31)
comptime AVX2_NR = 16
comptime AVX2_V = 8
comptime AVX2_A_BLOCK_BYTES = 256 * 1024
comptime AVX2_B_CHUNK_BYTES = 2 * 1024 * 1024
# AMX (amx)
comptime AMX_KB = 64
comptime AMX_TILE_BYTES = 1024
comptime AMX_A_BLOCK_BYTES = 1024 * 1024
comptime AMX_B_CHUNK_BYTES = 4 * 1024 * 1024
comptime AMX_KC_BLOCKS = 8
comptime AMX_PF_BYTES = 4096


@always_inline
def round_up(x: Int, m: Int) -> Int:
    return (x + m - 1) // m * m


# ---------------------------------------------------------------- the cache plan
# the caches each build's table was tuned against (see the module docstring)
comptime REF_L1D = 32 * 1024
comptime REF_L2 = 2048 * 1024 if CompilationTarget.has_intel_amx() else (
    1024 * 1024 if CompilationTarget.has_avx512f() else 512 * 1024)
comptime REF_L3 = 32 * 1024 * 1024
comptime PLAN_MIN_DIV = 4  # an L2 block is at least its tuned value / 4 ...
comptime PLAN_MAX_MUL = 4  # ... and at most 4 times it
comptime PLAN_GLOBAL = "mojolearn_cpu_cache_plan_" + (
    "amx" if CompilationTarget.has_intel_amx() else ("v4" if CompilationTarget.has_avx512f() else "v3"))


@fieldwise_init
struct CachePlan(ImplicitlyCopyable, Movable):
    """The cache blocks of one process (see the module docstring); sizes in bytes,
    mc and ncs in rows / columns."""
    var l1d: Int  # the sizes this plan was made for
    var l2: Int
    var l3: Int
    var from_system: Bool  # made from the sizes the system reported (not the reference)
    var mc: Int  # fp32.v1 rows of A per block (a multiple of MR)
    var ncs: Int  # fp32.v1 small-m path: columns of B per chunk (a multiple of NR)
    var pack_b_bytes: Int
    var panel_outer_a_bytes: Int
    var int_a_block_bytes: Int
    var int_pack_b_bytes: Int
    var avx2_a_block_bytes: Int
    var avx2_b_chunk_bytes: Int
    var amx_a_block_bytes: Int
    var amx_b_chunk_bytes: Int


def _scale_l2(tuned: Int, l2: Int, unit: Int) -> Int:
    """tuned * l2 / REF_L2, a multiple of unit, within [tuned / 4, 4 * tuned]."""
    var v = tuned * l2 // REF_L2
    v = max(tuned // PLAN_MIN_DIV, min(tuned * PLAN_MAX_MUL, v))
    return max(unit, v // unit * unit)


def _scale_l3(tuned: Int, l3: Int, unit: Int) -> Int:
    """tuned * min(l3, REF_L3) / REF_L3, a multiple of unit, at least tuned / 4."""
    var v = tuned * min(l3, REF_L3) // REF_L3
    v = max(tuned // PLAN_MIN_DIV, v)
    return max(unit, v // unit * unit)


def plan_for(l1d: Int, l2: Int, l3: Int, from_system: Bool) -> CachePlan:
    """The plan for these cache sizes (bytes; 0 where unknown: that level's reference
    size serves). On the reference sizes it is the tuned table."""
    var c1 = l1d if l1d > 0 else REF_L1D
    var c2 = l2 if l2 > 0 else REF_L2
    var c3 = l3 if l3 > 0 else REF_L3
    return CachePlan(
        c1, c2, c3, from_system,
        _scale_l2(MC, c2, MR),
        _scale_l2(NCS, c2, NR),
        _scale_l3(PACK_B_BYTES, c3, 64 * 1024),
        _scale_l2(PANEL_OUTER_A_BYTES, c2, 4096),
        _scale_l2(INT_A_BLOCK_BYTES, c2, 4096),
        _scale_l3(INT_PACK_B_BYTES, c3, 64 * 1024),
        _scale_l2(AVX2_A_BLOCK_BYTES, c2, 4096),
        _scale_l3(AVX2_B_CHUNK_BYTES, c3, 64 * 1024),
        _scale_l2(AMX_A_BLOCK_BYTES, c2, 4096),
        _scale_l3(AMX_B_CHUNK_BYTES, c3, 64 * 1024),
    )


def reference_plan() -> CachePlan:
    return plan_for(0, 0, 0, False)


def cache_plan() raises -> CachePlan:
    """This process's plan (the reference plan until set_cache_plan is called). Read
    on every product call with a lookup that allocates nothing (the runtime's
    get-or-create lookup of a named global kept about 66 bytes per call: a long decode
    loop's resident memory grew without bound)."""
    var got = _get_global_or_null(PLAN_GLOBAL)
    if got:
        return got.value().unsafe_bitcast[CachePlan]()[]
    return reference_plan()


def set_cache_plan(l1d: Int, l2: Int, l3: Int) raises -> CachePlan:
    """Make this process's plan for the sizes the system reports (0: unknown). Called
    by the loader, under the GIL, before any kernel runs; tests call it to run the
    kernels on other plans. The plan's one cell is made on the first call and kept
    for the process; later calls overwrite it."""
    var p = plan_for(l1d, l2, l3, l1d > 0 or l2 > 0 or l3 > 0)
    var got = _get_global_or_null(PLAN_GLOBAL)
    if got:
        got.value().unsafe_bitcast[CachePlan]()[] = p
    else:
        var cell = unsafe_alloc[CachePlan](1)
        cell.unsafe_write(p)
        external_call["KGEN_CompilerRT_InsertGlobal", NoneType](
            StringSlice(PLAN_GLOBAL), cell.unsafe_bitcast[NoneType]()
        )
    return p


def block_table(p: CachePlan) -> List[Tuple[String, Int]]:
    """This build's table as (name, value) pairs, for the tests and the docs, with the
    cache blocks of plan p (the process's: cache_plan()). The integer kernel that
    serves a build: AMX (amx), AVX2 (v3) or AVX-512 (v4)."""
    var t = List[Tuple[String, Int]]()
    t.append(("L1D", p.l1d))
    t.append(("L2", p.l2))
    t.append(("L3", p.l3))
    t.append(("REF_L2", REF_L2))
    t.append(("REF_L3", REF_L3))
    t.append(("PLAN_FROM_SYSTEM", 1 if p.from_system else 0))
    t.append(("W", W))
    t.append(("NV", NV))
    t.append(("NR", NR))
    t.append(("MR", MR))
    t.append(("MC", p.mc))
    t.append(("SMALL_M", SMALL_M))
    t.append(("NCS", p.ncs))
    t.append(("KU", KU))
    t.append(("FAST_KC", FAST_KC))
    t.append(("PACK_B_BYTES", p.pack_b_bytes))
    t.append(("PANEL_OUTER_A_BYTES", p.panel_outer_a_bytes))
    t.append(("KOUTER_SLOT_BYTES", KOUTER_SLOT_BYTES))
    t.append(("ROWS_MAX", ROWS_MAX))
    t.append(("TCHUNK", TCHUNK))
    t.append(("INT_ROWS_MAX", INT_ROWS_MAX))
    t.append(("IMR", IMR))  # the integer GEMMs' task split, every build
    t.append(("INR", INR))
    t.append(("EXPLICIT_FLUSH", 1 if EXPLICIT_FLUSH else 0))
    comptime if CompilationTarget.has_intel_amx():
        t.append(("AMX_KB", AMX_KB))
        t.append(("AMX_KC_BLOCKS", AMX_KC_BLOCKS))
        t.append(("AMX_A_BLOCK_BYTES", p.amx_a_block_bytes))
        t.append(("AMX_B_CHUNK_BYTES", p.amx_b_chunk_bytes))
        t.append(("AMX_PF_BYTES", AMX_PF_BYTES))
    elif not CompilationTarget.has_avx512f():
        t.append(("AVX2_MR", AVX2_MR))
        t.append(("AVX2_MR15", AVX2_MR15))
        t.append(("AVX2_G15", AVX2_G15))
        t.append(("AVX2_NR", AVX2_NR))
        t.append(("AVX2_A_BLOCK_BYTES", p.avx2_a_block_bytes))
        t.append(("AVX2_B_CHUNK_BYTES", p.avx2_b_chunk_bytes))
    else:
        t.append(("IMC", IMC))
        t.append(("INT_A_BLOCK_BYTES", p.int_a_block_bytes))
        t.append(("INT_PACK_B_BYTES", p.int_pack_b_bytes))
    return t^

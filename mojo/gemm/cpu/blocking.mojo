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
            (its tree slots stay in L2), a larger one leaf by leaf
rows_f32.mojo (m <= ROWS_MAX, decode shapes)
    TCHUNK  NT columns transposed per chunk (NTG groups of 16; the fused NT leaf holds
            TCHUNK / W register groups of W lanes); PF_ROWS rows prefetched
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
"""
from std.sys import simd_width_of
from std.sys.info import CompilationTarget
from common.fpstate import EXPLICIT_FLUSH

# ---------------------------------------------------------------- fp32.v1 / bf16f32.v1
comptime W = simd_width_of[DType.float32]()
comptime NV = 2
comptime NR = NV * W
comptime MR = 12 if W >= 16 else 6
# AVX2 (v3): 216 rows. On Zen 3 (512 KiB L2), 72 rows left 2 threads at 0.80-0.90x
# numpy on 1024^3 / 2048^3 and 0.72x at m = 144; 216 rows (each packed B leaf slice
# reused by 36 tiles instead of 12) gave 0.93-1.0x in the same runs
comptime MC = 12 * MR if W >= 16 else 36 * MR
comptime NCS = 512
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
comptime PACK_B_BYTES = 16 * 1024 * 1024
comptime PANEL_OUTER_A_BYTES = 2 * 1024 * 1024
# rows_f32 (decode shapes)
comptime ROWS_MAX = 4
comptime PF_ROWS = 1
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


def block_table() -> List[Tuple[String, Int]]:
    """This build's table as (name, value) pairs, for the tests and the docs. The
    integer kernel that serves a build: AMX (amx), AVX2 (v3) or AVX-512 (v4)."""
    var t = List[Tuple[String, Int]]()
    t.append(("W", W))
    t.append(("NV", NV))
    t.append(("NR", NR))
    t.append(("MR", MR))
    t.append(("MC", MC))
    t.append(("NCS", NCS))
    t.append(("KU", KU))
    t.append(("FAST_KC", FAST_KC))
    t.append(("PACK_B_BYTES", PACK_B_BYTES))
    t.append(("PANEL_OUTER_A_BYTES", PANEL_OUTER_A_BYTES))
    t.append(("ROWS_MAX", ROWS_MAX))
    t.append(("TCHUNK", TCHUNK))
    t.append(("INT_ROWS_MAX", INT_ROWS_MAX))
    t.append(("IMR", IMR))  # the integer GEMMs' task split, every build
    t.append(("INR", INR))
    t.append(("EXPLICIT_FLUSH", 1 if EXPLICIT_FLUSH else 0))
    comptime if CompilationTarget.has_intel_amx():
        t.append(("AMX_KB", AMX_KB))
        t.append(("AMX_KC_BLOCKS", AMX_KC_BLOCKS))
        t.append(("AMX_A_BLOCK_BYTES", AMX_A_BLOCK_BYTES))
        t.append(("AMX_B_CHUNK_BYTES", AMX_B_CHUNK_BYTES))
        t.append(("AMX_PF_BYTES", AMX_PF_BYTES))
    elif not CompilationTarget.has_avx512f():
        t.append(("AVX2_MR", AVX2_MR))
        t.append(("AVX2_MR15", AVX2_MR15))
        t.append(("AVX2_G15", AVX2_G15))
        t.append(("AVX2_NR", AVX2_NR))
        t.append(("AVX2_A_BLOCK_BYTES", AVX2_A_BLOCK_BYTES))
        t.append(("AVX2_B_CHUNK_BYTES", AVX2_B_CHUNK_BYTES))
    else:
        t.append(("IMC", IMC))
        t.append(("INT_A_BLOCK_BYTES", INT_A_BLOCK_BYTES))
        t.append(("INT_PACK_B_BYTES", INT_PACK_B_BYTES))
    return t^

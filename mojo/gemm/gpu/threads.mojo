"""What ONE GPU thread of a GEMM computes, given its coordinates.

The device kernels (kernels.mojo) only turn block/thread indices into these
coordinates, check the bounds and call a body below; the CPU run (cpu_run.mojo)
calls the very same bodies in plain loops over the same coordinates, pass by
pass, with the same buffers. So a test of the CPU run is a test of the kernels'
arithmetic, not of a look-alike. Arguments are the kernels' own (Int32 / Int64
sizes widened to Int here).
"""
from arith.tree import leaf_size, leaf_count
from common.ptr import F32Ptr, U16Ptr, U32Ptr, I8Ptr, I32Ptr
from gemm.gpu.arith import tree_fold
from gemm.gpu.f32_tiled import slab_levels


# Launch shapes, in one place.
# 2-D thread blocks of BX x BY threads (x along n) for the one-output-a-thread
# kernels (the tree fold, the integer SIMT fallback).
comptime BX = 32
comptime BY = 8

# The fp32.v1 tiled kernel (f32_tiled.mojo), four shapes. BIG: 128 x 128 outputs a
# block, 16-deep k-tiles, 256 threads of 8 x 8 outputs (2 x 2 groups of 4 x 4).
# THIN1 / THIN16 (decode: m = 1, m <= 16): one row or 16 rows by 128 columns, 16-deep
# k-tiles, 128 threads of one column each, so the weight is read once and the run of
# leaves split across blocks fills the machine (rule 6.9). 17 / 19 KB of shared memory
# (within Apple's 32 KB; 32-deep tiles would not be).
comptime F32_BIG = 0
comptime F32_THIN1 = 1
comptime F32_THIN16 = 2
comptime F32_SMALL = 3
comptime BIG_BM = 128
comptime BIG_BN = 128
comptime BIG_BK = 16
comptime BIG_TM = 8
comptime BIG_TN = 8
comptime THIN_BN = 128
comptime THIN_BK = 16
# SMALL: 64 x 64 outputs, 16-deep k-tiles, 256 threads of 4 x 4 outputs (17 KB of
# shared memory and 32 accumulator registers a thread: Apple's threadgroup memory
# is 32 KB, which BIG's 33 KB exceeds).
comptime SMALL_BM = 64
comptime SMALL_BN = 64
comptime SMALL_BK = 16
comptime SMALL_TM = 4
comptime SMALL_TN = 4
# blocks a launch aims for, per multiprocessor (persistent blocks: also the grid)
comptime BLOCKS_PER_SM = 2


@always_inline
def f32_shape(kernel: Int) -> Tuple[Int, Int]:
    """(BM, BN) of a tiled kernel shape."""
    if kernel == F32_BIG:
        return (BIG_BM, BIG_BN)
    if kernel == F32_THIN1:
        return (1, THIN_BN)
    if kernel == F32_THIN16:
        return (16, THIN_BN)
    return (SMALL_BM, SMALL_BN)


@always_inline
def f32_kernel_for(m: Int, small: Bool = False) -> Int:
    """The shape the dispatch picks (all give the same bits); `small` for devices
    with 32 KB of shared memory a block (Apple)."""
    if m == 1:
        return F32_THIN1
    if m <= 16:
        return F32_THIN16
    return F32_SMALL if small else F32_BIG


@always_inline
def f32_route_prepass(kernel: Int) -> Bool:
    """Whether a launch decides rule 6.8's route by the exponent pre-pass. The decode
    shapes (THIN1, THIN16) do not: the pre-pass would read the weight a second time,
    and a decode product is bound by that read; they run the flushing chains, which
    are always right (the same bits)."""
    return kernel == F32_BIG or kernel == F32_SMALL


@fieldwise_init
struct F32Plan(ImplicitlyCopyable, Movable):
    """How one fp32.v1 product is laid out on the tiled kernel."""
    var kernel: Int
    var leaf: Int
    var nleaves: Int
    var run_leaves: Int
    var nruns: Int
    var nsl: Int
    var items: Int
    var grid: Int


def f32_plan(m: Int, n: Int, k: Int, kernel: Int, blocks: Int, run_leaves: Int = 0) -> F32Plan:
    """Tiles of the kernel shape, and the run of leaves a block folds: all of them,
    or (when the tiles alone give fewer than `blocks` work items) the smallest
    power of two 2**s whose runs still give at least `blocks` / tiles items, the
    runs being aligned subtrees (rule 6.9). run_leaves > 0 forces the run (a power
    of two; tests). The grid is min(items, blocks): persistent blocks loop over the
    items. Nothing here changes a bit of the result."""
    var leaf = leaf_size(k)
    var nleaves = leaf_count(k)
    var sh = f32_shape(kernel)
    var tiles = ((m + sh[0] - 1) // sh[0]) * ((n + sh[1] - 1) // sh[1])
    var run = run_leaves
    if run <= 0:
        var want = max(1, blocks // max(1, tiles))
        run = 1
        while (nleaves + run - 1) // run > want:
            run *= 2
    var nruns = (nleaves + run - 1) // run
    if nruns <= 1:
        run = max(nleaves, 1)
        nruns = 1 if nleaves > 0 else 0
    var items = tiles * nruns
    return F32Plan(kernel, leaf, nleaves, run, nruns, slab_levels(min(run, nleaves)),
                   items, max(1, min(items, blocks)))


@always_inline
def tree_thread(parts: F32Ptr, c: F32Ptr, m: Int, n: Int, nleaves: Int, i: Int, j: Int):
    """c[i][j] = the balanced tree over parts[.][i][j] (fp32.v1 rule 6.4): the roots
    of the runs of a split (rule 6.9), or +0 when there are none (k = 0)."""
    var idx = i * n + j
    c.unsafe_store(idx, tree_fold(parts.unsafe_offset(idx), m * n, nleaves))

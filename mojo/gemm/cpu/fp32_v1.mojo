"""The fp32.v1 / bf16f32.v1 loop nest on the CPU (BLIS order, kc = the leaf).

One task computes C[i_lo:i_hi, j_lo:j_hi] alone, so any split of the output over
tasks gives the same bits (contract 6.5). Per task:
  for each NC chunk of columns: pack B (all of k)
    for each block of mc rows (the process's cache plan: blocking.CachePlan):
      panel outer (the block's A over all of k within the plan's panel_outer_a_bytes):
        pack A (mc x k); for each NR panel, each leaf p, each MR panel:
          micro-kernel (one leaf) + tree merge; tree slots of one column panel (L2)
      else:
        for each leaf p (k0 = p*L): pack A (mc x L)
          for each NR panel, each MR panel: micro-kernel (one leaf) + tree merge;
          tree slots of the whole mc x NC block
A task whose B over all of k exceeds one chunk and whose output's tree slots are small
(kouter_fits: a long k, a small output) runs f32_block_kouter instead:
  for each leaf p: pack B's leaf rows for all the task's columns
    for each block of mc rows: pack A (mc x L); every tile's leaf + tree merge;
    tree slots of the task's whole block
Every tile sees its leaves in ascending order in each order: the visit order of tiles is
all that differs, which no output can see.
Workspace: the packed B chunk, the packed A block and the tree slots - packing panels
only, bounded by the plan's pack_b_bytes. When the columns are split over several tasks
and all of A fits A_ONCE_BYTES, A is packed once for all of them (pack_a_shared: each
task a share of the rows, in a first parallel step) and every task reads that copy;
the panels left over when their count is not a multiple of the tasks' are then split
by rows at A-block edges (f32_block_shared_a, common.tasks.panel_share), each task
calling f32_block a second time on its rows of them.
"""
from std.memory.alloc import unsafe_alloc
from std.sys.intrinsics import prefetch, PrefetchOptions
from common.ptr import F32Ptr
from common.tasks import panel_share
from gemm.cpu.blocking import MR, NR, NV, W, FAST_KC, KOUTER_SLOT_BYTES, CachePlan, round_up
from arith.tree import leaf_size, leaf_count, bit_length
from gemm.cpu.pack_f32 import pack_a, pack_b, pack_b_rows, panel_stride
from gemm.cpu.ukernel_f32 import Acc, ukernel_leaf, ukernel_leaf_reversed, ukernel_rows
from gemm.cpu.tree import finish_tile
from gemm.cpu.pack_lowbit import PANELS_F32, widen_panels


@fieldwise_init
struct GemmArgs(ImplicitlyCopyable, Movable):
    var a: Int
    var b: Int
    var c: Int
    var m: Int
    var n: Int
    var k: Int
    var trans_a: Bool
    var trans_b: Bool
    var a_bf16: Bool
    var b_bf16: Bool
    var sabotage: Bool
    var leaf: Int  # k-steps a leaf chain: the contract's leaf_size(k), or mode_leaf's
    var plan: CachePlan  # the process's cache blocks (blocking.cache_plan), read once per call

    @always_inline
    def nleaves(self) -> Int:
        """Leaves over k at this call's leaf size."""
        return (self.k + self.leaf - 1) // self.leaf


def mode_leaf(mode: Int, k: Int) -> Int:
    """The leaf a call runs: rule 6.2's leaf_size(k) under numeric_mode identical (0);
    under deterministic (1) and fast (2) leaves of at least FAST_KC k-steps (a fixed
    order chosen for this build: fewer tree merges), folded by the same tree.
    A negative mode -L asks for leaves of exactly L k-steps: a node of a longer
    product's tree (rule 6.7: the k-split's pieces, mojolearn._ksplit), computed on the
    node's columns of k with the whole product's leaf size."""
    if mode < 0:
        return -mode
    if mode == 0:
        return leaf_size(k)
    return max(leaf_size(k), FAST_KC)


def nc_for(p: CachePlan, k: Int, ncols: Int) -> Int:
    var nc = (p.pack_b_bytes // (4 * max(k, 1))) // NR * NR
    nc = max(NR, min(nc, 4096 // NR * NR))  # whole panels: chunks start on panel edges
    return min(nc, round_up(ncols, NR))


# 16 MiB: A of a 2048^3 product is packed once for both tasks of a column split instead
# of once by each (AMD EPYC Zen 2, v3, 2 threads, alternating processes: TN 108.6 ->
# 104.2 ms, NN unchanged; A stored (k, m) packs in MR-float pieces)
comptime A_ONCE_BYTES = 16 << 20


def a_once_fits(k: Int, i_rows: Int) -> Bool:
    """With B prepared, A is packed once for all of a task's rows and leaves (instead
    of once per column chunk) when that copy stays under A_ONCE_BYTES."""
    return round_up(i_rows, MR) * k * 4 <= A_ONCE_BYTES


def panel_outer(p: CachePlan, k: Int, i_rows: Int) -> Bool:
    """Whether f32_block visits a row block panel by panel (every leaf of one column
    panel before the next, A packed over all of k, the tree slots of one column panel
    only: they stay in L2) rather than leaf by leaf (A packed one leaf at a time, the
    slots of a whole mc x NC block: megabytes, in L3). The first needs the block's A
    over all of k to stay within the plan's panel_outer_a_bytes."""
    return round_up(min(p.mc, i_rows), MR) * k * 4 <= p.panel_outer_a_bytes


def _a_part(p: CachePlan, k: Int, i_rows: Int, L: Int, a_once: Bool) -> Int:
    if a_once:
        return round_up(round_up(i_rows, MR) * k, 16)
    if panel_outer(p, k, i_rows):
        return round_up(round_up(min(p.mc, i_rows), MR) * k, 16)
    return round_up(round_up(min(p.mc, i_rows), MR) * L, 16)


def kouter_fits(g: GemmArgs, i_rows: Int, j_cols: Int) -> Bool:
    """Whether a task of at most i_rows x j_cols (B packed here, A not packed once) runs
    f32_block_kouter: its B over all of k is more than one packed chunk (the blocked
    order would pack its A again for every chunk), it is visited leaf by leaf anyway
    (not panel outer), and the tree slots of all its output stay within
    KOUTER_SLOT_BYTES."""
    var nleaves = g.nleaves()
    if nleaves < 2 or panel_outer(g.plan, g.k, i_rows):
        return False
    if nc_for(g.plan, g.k, j_cols) >= round_up(j_cols, NR):
        return False
    return _kouter_slots(i_rows, j_cols, nleaves) * 4 <= KOUTER_SLOT_BYTES


def _kouter_slots(i_rows: Int, j_cols: Int, nleaves: Int) -> Int:
    return round_up(i_rows, MR) * round_up(j_cols, NR) * bit_length(nleaves)


def f32_block_ws(g: GemmArgs, i_rows: Int, j_cols: Int, prepared: Bool = False,
                 a_once: Bool = False, a_shared: Bool = False, kouter: Bool = False) -> Int:
    """Workspace floats f32_block needs for a block of i_rows x j_cols (no packed B
    chunk when B comes prepared; A over all of k when a_once; no A at all when
    a_shared: the tasks read one copy, a_shared_ws, made by pack_a_shared). kouter
    (kouter_fits(g, i_rows, j_cols)): f32_block_kouter's, for any block up to that."""
    if kouter:
        var L = g.leaf
        var bleaf = round_up(round_up(j_cols, NR) // NR * panel_stride(L), 16)
        var apart = round_up(round_up(min(g.plan.mc, i_rows), MR) * L, 16)
        return bleaf + apart + round_up(_kouter_slots(i_rows, j_cols, g.nleaves()), 16)
    var L = g.leaf
    var nleaves = g.nleaves()
    var nc_max = nc_for(g.plan, g.k, j_cols)
    var mc_pad = round_up(min(g.plan.mc, i_rows), MR)
    var slot_cols = NR if panel_outer(g.plan, g.k, i_rows) else nc_max
    var nslots = mc_pad * slot_cols * bit_length(nleaves) if nleaves > 1 else NR
    var bpart = 0 if prepared else round_up(nc_max * g.k, 16)
    var apart = 0 if a_shared else _a_part(g.plan, g.k, i_rows, L, a_once)
    return bpart + apart + round_up(nslots, 16)


def a_shared_ws(g: GemmArgs) -> Int:
    """Floats of the one packed copy of A (all m rows, all of k, f32_block's a_once
    layout) that the tasks of a column split share (pack_a_shared)."""
    return _a_part(g.plan, g.k, g.m, g.leaf, True)


def pack_a_shared(g: GemmArgs, r_lo: Int, r_hi: Int, dst: F32Ptr):
    """Rows [r_lo, r_hi) (multiples of MR, or r_hi = m) of A into the one copy that
    the tasks of a column split read (f32_block's a_once layout for i_lo = 0: row
    block ib's leaf p at ib * k + round_up(mcb, MR) * k0, panel ip of that leaf
    ip * MR * lk further). The tasks of a first parallel step each pack a share of the
    rows, so no task packs all of A. Packing is a copy: the bits do not depend on who
    packs what."""
    var k = g.k
    var MC = g.plan.mc
    var lda = g.m if g.trans_a else k
    var ib = (r_lo // MC) * MC
    while ib < r_hi:
        var mcb = min(MC, g.m - ib)
        var lo = max(ib, r_lo)
        var hi = min(ib + mcb, r_hi)
        if hi > lo:
            _pack_a_panels(g, lda, lo, hi - lo, dst.unsafe_offset(ib * k), round_up(mcb, MR), (lo - ib) // MR)
        ib += MC


def leftover_ws(g: GemmArgs, tasks: Int, prepared: Bool = False) -> Int:
    """Workspace floats of f32_block_shared_a's second block, the leftover panels (over
    all m rows at most; 0 when the panels divide evenly): a task's part is the larger of
    this and its whole panels' block. prepared as f32_block_ws's (B's float32 panels
    read where they lie)."""
    var ps = panel_share(g.n, g.m, tasks, 0, NR, g.plan.mc)
    if ps.j_left >= g.n:
        return 0
    return f32_block_ws(g, g.m, g.n - ps.j_left, prepared, True, True)


def f32_block_shared_a(g: GemmArgs, t: Int, tasks: Int, ws: F32Ptr, apre: Int, bpre: Int = 0,
                       bfmt: Int = PANELS_F32, bscales: Int = 0):
    """Task t of a column split over `tasks` tasks that read one packed A at apre
    (pack_a_shared): f32_block over its whole panels and every row, then over its rows
    of the leftover panels (common.tasks.panel_share), whose A lies r_lo * k floats on
    (r_lo a multiple of the plan's mc, as pack_a_shared lays the blocks out). bpre,
    bfmt, bscales as f32_block's."""
    var ps = panel_share(g.n, g.m, tasks, t, NR, g.plan.mc)
    f32_block(g, 0, g.m, ps.j_lo, ps.j_hi, ws, bpre, True, bfmt, bscales, apre)
    if ps.r_hi > ps.r_lo:
        f32_block(g, ps.r_lo, ps.r_hi, ps.j_left, g.n, ws, bpre, True, bfmt, bscales,
                  apre + ps.r_lo * g.k * 4)


def _pack_a_panels(g: GemmArgs, lda: Int, i0: Int, rows: Int, blk: F32Ptr, mc_pad: Int, ip0: Int):
    """Rows [i0, i0 + rows) of A (panels ip0.. of a row block whose leaves lie at
    blk + mc_pad * k0), every leaf. A stored (m, k): one MR-row panel at a time, its
    leaves in ascending k, so each row is read front to back; stored (k, m): leaf by
    leaf (pack_a walks its rows of k)."""
    var k = g.k
    var L = g.leaf
    var nleaves = g.nleaves()
    if g.trans_a:
        for p in range(nleaves):
            var k0 = p * L
            pack_a(g.a, g.a_bf16, g.trans_a, lda, i0, rows, k0, min(L, k - k0),
                   blk.unsafe_offset(mc_pad * k0 + ip0 * MR * min(L, k - k0)))
        return
    var npan = (rows + MR - 1) // MR
    for q in range(npan):
        var r = min(MR, rows - q * MR)
        for p in range(nleaves):
            var k0 = p * L
            var lk = min(L, k - k0)
            pack_a(g.a, g.a_bf16, g.trans_a, lda, i0 + q * MR, r, k0, lk,
                   blk.unsafe_offset(mc_pad * k0 + (ip0 + q) * MR * lk))


def f32_block(g: GemmArgs, i_lo: Int, i_hi: Int, j_lo: Int, j_hi: Int, ws: F32Ptr, bpre: Int = 0,
              a_once: Bool = False, bfmt: Int = PANELS_F32, bscales: Int = 0, apre: Int = 0):
    """bpre: 0, or the address of B prepared in pack_b's layout over all n
    (pack_f32.pack_b_all): nothing is packed, chunk jc is read at bpre + jc * k
    (j_lo is then a multiple of NR). With a low-bit bfmt (gemm/cpu/pack_lowbit.mojo)
    the prepared panels of chunk jc are widened into the workspace's packed B chunk
    instead (the workspace sized by f32_block_ws with prepared=False). a_once (the workspace sized by f32_block_ws with
    the same flag): A is packed once, every row block and leaf, before the column
    chunks, which then read it where it lies. apre: 0, or the address of A already
    packed so for all m rows (pack_a_shared; i_lo = 0, a_once, the workspace sized by
    f32_block_ws with a_shared): nothing of A is packed here. Packing is a copy: the
    bits do not depend on when it happens."""
    var m = g.m
    var n = g.n
    var k = g.k
    if i_hi <= i_lo or j_hi <= j_lo:
        return
    var cptr = F32Ptr(unsafe_from_address=g.c)
    var lda = m if g.trans_a else k
    var ldb = k if g.trans_b else n
    var L = g.leaf
    var nleaves = g.nleaves()
    var levels = bit_length(nleaves)
    var MC = g.plan.mc
    var nc_max = nc_for(g.plan, k, j_hi - j_lo)
    var mc_pad = round_up(min(MC, i_hi - i_lo), MR)
    var bpack = ws
    var own_b = bpre == 0 or bfmt != PANELS_F32  # a packed B chunk in the workspace
    var apack = ws.unsafe_offset(round_up(nc_max * k, 16)) if own_b else ws
    var outer = panel_outer(g.plan, k, i_hi - i_lo)
    var level_stride = mc_pad * (NR if outer else nc_max)
    var slots = apack.unsafe_offset(_a_part(g.plan, k, i_hi - i_lo, L, a_once))
    if apre != 0:
        slots = apack
        apack = F32Ptr(unsafe_from_address=apre)
    elif a_once:
        # block ic's leaf p at (ic - i_lo) * k + round_up(mc, MR) * k0
        var ib = i_lo
        while ib < i_hi:
            var mcb = min(MC, i_hi - ib)
            _pack_a_panels(g, lda, ib, mcb, apack.unsafe_offset((ib - i_lo) * k), round_up(mcb, MR), 0)
            ib += MC
    var acc = Acc(fill=SIMD[DType.float32, W](0))
    var jc = j_lo
    while jc < j_hi:
        var nc = min(nc_max, j_hi - jc)
        if bpre == 0:
            pack_b(g.b, g.b_bf16, g.trans_b, ldb, jc, nc, k, bpack)
        elif bfmt == PANELS_F32:
            bpack = F32Ptr(unsafe_from_address=bpre).unsafe_offset(jc * k)
        else:
            widen_panels(bfmt, bpre, bscales, jc // NR, (jc + nc + NR - 1) // NR, k, bpack)
        var npan = (nc + NR - 1) // NR
        var ic = i_lo
        while ic < i_hi:
            var mc = min(MC, i_hi - ic)
            var mpan = (mc + MR - 1) // MR
            if outer:
                # A over all of k (leaf p's panels at round_up(mc, MR) * k0), then per
                # column panel every leaf in ascending order; the slots of one panel
                var ablk0 = apack
                if a_once:
                    ablk0 = apack.unsafe_offset((ic - i_lo) * k)
                else:
                    _pack_a_panels(g, lda, ic, mc, apack, round_up(mc, MR), 0)
                for jp in range(npan):
                    var nr = min(NR, nc - jp * NR)
                    for p in range(nleaves):
                        var k0 = p * L
                        var lk = min(L, k - k0)
                        var bp = bpack.unsafe_offset(jp * NR * k + k0 * NR)
                        var ablk = ablk0.unsafe_offset(round_up(mc, MR) * k0)
                        for ip in range(mpan):
                            var mr = min(MR, mc - ip * MR)
                            _tile_leaf(g, ablk.unsafe_offset(ip * MR * lk), bp, lk, p, nleaves, acc)
                            var cp = cptr.unsafe_offset((ic + ip * MR) * n + jc + jp * NR)
                            finish_tile(acc, p, nleaves, levels, slots, level_stride, ip * MR * NR, cp, n, mr, nr)
                ic += MC
                continue
            for p in range(nleaves):
                var k0 = p * L
                var lk = min(L, k - k0)
                var ablk = apack
                if a_once:
                    ablk = apack.unsafe_offset((ic - i_lo) * k + round_up(mc, MR) * k0)
                else:
                    pack_a(g.a, g.a_bf16, g.trans_a, lda, ic, mc, k0, lk, apack)
                # the next column panel's rows of this leaf lie NR * k floats on, so no
                # stream prefetcher follows them there: the first tile of each panel
                # waited for them from memory (a long k's packed B chunk is megabytes).
                # Each tile of this panel asks for its share of them into L2 (a hint:
                # no value changes). AMD EPYC Zen 2, 1 thread, 1024 x 4096 x 1024:
                # 86 -> 91.5 GFLOP/s, alternating processes
                var pf_lines = (lk * NR + 15) // 16
                var pf_per_tile = (pf_lines + mpan - 1) // mpan
                for jp in range(npan):
                    var nr = min(NR, nc - jp * NR)
                    var bp = bpack.unsafe_offset(jp * NR * k + k0 * NR)
                    var bnext = bp.unsafe_offset(NR * k)
                    var pf_on = jp + 1 < npan
                    for ip in range(mpan):
                        var mr = min(MR, mc - ip * MR)
                        if pf_on:
                            var l0 = ip * pf_per_tile
                            for l in range(l0, min(l0 + pf_per_tile, pf_lines)):
                                prefetch[PrefetchOptions().for_read().medium_locality()](bnext.unsafe_offset(l * 16))
                        _tile_leaf(g, ablk.unsafe_offset(ip * MR * lk), bp, lk, p, nleaves, acc)
                        var tile_off = (jp * mpan + ip) * MR * NR
                        var cp = cptr.unsafe_offset((ic + ip * MR) * n + jc + jp * NR)
                        finish_tile(acc, p, nleaves, levels, slots, level_stride, tile_off, cp, n, mr, nr)
            ic += MC
        jc += nc_max


def f32_block_kouter(g: GemmArgs, i_lo: Int, i_hi: Int, j_lo: Int, j_hi: Int, ws: F32Ptr):
    """f32_block's arithmetic visited leaf by leaf over the whole block (kouter_fits; the
    workspace sized by f32_block_ws with kouter for a block at least this large): per
    leaf, B's rows of that leaf packed once for all the block's columns, then per row
    block A's leaf packed and every tile's leaf computed and merged; the tree slots
    cover the whole block. A and B are each packed once; every tile still sees its
    leaves in ascending order."""
    var n = g.n
    var k = g.k
    if i_hi <= i_lo or j_hi <= j_lo:
        return
    var cptr = F32Ptr(unsafe_from_address=g.c)
    var lda = g.m if g.trans_a else k
    var ldb = k if g.trans_b else n
    var L = g.leaf
    var nleaves = g.nleaves()
    var levels = bit_length(nleaves)
    var MC = g.plan.mc
    var ncols = j_hi - j_lo
    var npan = (ncols + NR - 1) // NR
    var mpan_all = (i_hi - i_lo + MR - 1) // MR
    var bleaf = ws
    var apack = ws.unsafe_offset(round_up(npan * panel_stride(L), 16))
    var slots = apack.unsafe_offset(round_up(round_up(min(MC, i_hi - i_lo), MR) * L, 16))
    var level_stride = mpan_all * MR * npan * NR
    var acc = Acc(fill=SIMD[DType.float32, W](0))
    for p in range(nleaves):
        var k0 = p * L
        var lk = min(L, k - k0)
        pack_b_rows(g.b, g.b_bf16, g.trans_b, ldb, j_lo, ncols, k0, lk, bleaf)
        var ic = i_lo
        while ic < i_hi:
            var mc = min(MC, i_hi - ic)
            var mpan = (mc + MR - 1) // MR
            var ip0 = (ic - i_lo) // MR
            pack_a(g.a, g.a_bf16, g.trans_a, lda, ic, mc, k0, lk, apack)
            for jp in range(npan):
                var nr = min(NR, ncols - jp * NR)
                var bp = bleaf.unsafe_offset(jp * panel_stride(lk))
                for ip in range(mpan):
                    var mr = min(MR, mc - ip * MR)
                    _tile_leaf(g, apack.unsafe_offset(ip * MR * lk), bp, lk, p, nleaves, acc)
                    var tile_off = (jp * mpan_all + ip0 + ip) * MR * NR
                    var cp = cptr.unsafe_offset((ic + ip * MR) * n + j_lo + jp * NR)
                    finish_tile(acc, p, nleaves, levels, slots, level_stride, tile_off, cp, n, mr, nr)
            ic += MC


@always_inline
def _tile_leaf(g: GemmArgs, ap: F32Ptr, bp: F32Ptr, lk: Int, p: Int, nleaves: Int, mut acc: Acc):
    """One leaf of one MR x NR tile from packed panels (contract 6.3)."""
    if g.sabotage and p == nleaves - 1:
        # a separate accumulator: passing acc itself to this out-of-line call would
        # let its address escape, and the hot loop would store acc on every FMA
        var racc = Acc(fill=SIMD[DType.float32, W](0))
        ukernel_leaf_reversed(ap, bp, lk, NR, racc)
        acc = racc^
    else:
        ukernel_leaf(ap, bp, lk, NR, acc)


def f32_small_ws(g: GemmArgs, i_rows: Int, j_cols: Int) -> Int:
    """Workspace floats f32_block_small_m needs for a block of i_rows x j_cols."""
    var L = g.leaf
    var nleaves = g.nleaves()
    var mpan = (i_rows + MR - 1) // MR
    var ncs = min(g.plan.ncs, round_up(j_cols, NR))
    var slots = mpan * MR * ncs * max(bit_length(nleaves), 1)
    return round_up(mpan * MR * g.k, 16) + round_up((ncs // NR) * panel_stride(L), 16) + round_up(slots, 16)


def f32_block_small_m(g: GemmArgs, i_lo: Int, i_hi: Int, j_lo: Int, j_hi: Int, ws: F32Ptr):
    """The same arithmetic for few rows (i_hi - i_lo <= SMALL_M): A is packed once over all
    of k; B is packed one leaf at a time for a chunk of the plan's ncs columns (a block that
    stays in L2), so B streams from memory once, row segments read contiguously.
    Tree slots cover one chunk."""
    var n = g.n
    var k = g.k
    if i_hi <= i_lo or j_hi <= j_lo:
        return
    var cptr = F32Ptr(unsafe_from_address=g.c)
    var lda = g.m if g.trans_a else k
    var ldb = k if g.trans_b else n
    var L = g.leaf
    var nleaves = g.nleaves()
    var levels = bit_length(nleaves)
    var mc = i_hi - i_lo
    var mpan = (mc + MR - 1) // MR
    var ncs = min(g.plan.ncs, round_up(j_hi - j_lo, NR))
    var apack = ws
    var bleaf = ws.unsafe_offset(round_up(mpan * MR * k, 16))
    var level_stride = mpan * MR * ncs
    var slots = bleaf.unsafe_offset(round_up((ncs // NR) * panel_stride(L), 16))
    # A over all of k, leaf by leaf: panel ip of leaf p at (p*L*mpan + ip*lk)*MR
    for p in range(nleaves):
        var k0 = p * L
        var lk = min(L, k - k0)
        pack_a(g.a, g.a_bf16, g.trans_a, lda, i_lo, mc, k0, lk, apack.unsafe_offset(k0 * mpan * MR))
    var acc = Acc(fill=SIMD[DType.float32, W](0))
    var jc = j_lo
    while jc < j_hi:
        var nc = min(ncs, j_hi - jc)
        var npan = (nc + NR - 1) // NR
        for p in range(nleaves):
            var k0 = p * L
            var lk = min(L, k - k0)
            pack_b_rows(g.b, g.b_bf16, g.trans_b, ldb, jc, nc, k0, lk, bleaf)
            for jp in range(npan):
                var nr = min(NR, nc - jp * NR)
                var bp = bleaf.unsafe_offset(jp * panel_stride(lk))
                for ip in range(mpan):
                    var mr = min(MR, mc - ip * MR)
                    var ap = apack.unsafe_offset((k0 * mpan + ip * lk) * MR)
                    if g.sabotage and p == nleaves - 1:
                        # a separate accumulator: passing acc itself to this out-of-line call would
                        # let its address escape, and the hot loop would store acc on every FMA
                        var racc = Acc(fill=SIMD[DType.float32, W](0))
                        ukernel_leaf_reversed(ap, bp, lk, NR, racc)
                        acc = racc^
                    else:
                        ukernel_rows(ap, bp, lk, NR, mr, acc)
                    var cp = cptr.unsafe_offset((i_lo + ip * MR) * n + jc + jp * NR)
                    var tile_off = (jp * mpan + ip) * MR * NR
                    finish_tile(acc, p, nleaves, levels, slots, level_stride, tile_off, cp, n, mr, nr)
        jc += ncs

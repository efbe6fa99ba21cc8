"""fp32.v1 / bf16f32.v1 on a GPU: the shared-memory, register-tiled kernel, as the
phases ONE thread runs between two barriers.

WHAT IT COMPUTES
    A block owns a BM x BN tile of C and a run of leaves (all of them, or an aligned
    run of 2**s leaves when k is split across blocks, rule 6.9). Its threads stage
    BK-deep k-tiles of A and B in shared memory (double buffered: the next tile is
    fetched into registers while the current one is multiplied, then stored into the
    other buffer), each thread holding a TM x TN tile of outputs. For each output the
    thread runs exactly rule 6.3's chain: acc = +0, then for kk ascending
    acc = ftz(fma(a, b, acc)) (chain_step), or the bare fma where rule 6.8 proved the
    flush idle (chain_step_exact; `fast`, uniform over the launch). When a leaf ends
    (at a multiple of L, possibly inside a k-tile when L is not a multiple of BK) the
    leaf value enters the streaming pairwise tree (rule 6.4): the waiting levels live
    in this thread's own entries of a per-block slab in global memory (level j is
    touched once every 2**(j+1) leaves; keeping level 0 in registers instead cost 64
    registers a thread and made the BIG shape spill: ptxas -v, sm_90a). After the run's last leaf
    the waiting levels are folded and the value is stored: into C, or into
    roots[run][i][j] for the tree kernel to fold (rule 6.9).

    Operands are flushed (and bf16 widened) as they are fetched from global memory,
    so shared memory holds exactly the float32 values the contract multiplies. Rows,
    columns and k positions outside the operands are staged as +0 and never enter a
    chain: every chain runs its exact trip count (no zero padding on either route).

HOW IT IS RUN
    kernels.mojo: f32_tiled_kernel calls f32_prologue_phase, barrier, then per k-tile
    f32_main_phase, barrier, for each work item of its block (persistent blocks).
    cpu_run.mojo: the same phases for every thread of a block in turn, the shared
    memory a host buffer, each thread's accumulators kept between phases.
    Thread order alternates between blocks, so a phase that read what another thread
    wrote in the same phase would give different bits and fail the tests.

Block shapes live in gemm/gpu/threads.mojo (F32_BIG, F32_SMALL, F32_THIN1, F32_THIN16).
"""
from std.memory import AddressSpace
from common.ptr import F32Ptr
from arith.tree import chain_step, tree_add, trailing_ones
from gemm.gpu.arith import load_operand, chain_step_exact


@always_inline
def cdiv(a: Int, b: Int) -> Int:
    return (a + b - 1) // b


# ------------------------------------------------------------------ geometry
@always_inline
def pad4(x: Int) -> Int:
    """A shared-memory row of x floats, padded so k-consecutive stores of one warp
    fall in different banks (x >= 4) and 128-bit reads stay aligned."""
    return x + 4 if x >= 4 else x


@always_inline
def smem_floats(BM: Int, BN: Int, BK: Int) -> Int:
    """Two buffers, each A as [BK][pad4(BM)] (A transposed) and B as [BK][pad4(BN)]:
    33 KB for BIG, 17 KB for SMALL, 17 / 19 KB for THIN1 / THIN16."""
    return 2 * BK * (pad4(BM) + pad4(BN))


@always_inline
def tile_pos(B: Int, T: Int, t: Int, r: Int) -> Int:
    """Row (or column) inside the block tile of a thread's r-th row (column): groups
    of min(4, T) adjacent rows, the groups B / (T / g) apart (a 128-bit shared read
    per group; a warp's reads of one group are contiguous)."""
    var g = min(4, T)
    var gs = B // (T // g)
    return (r // g) * gs + t * g + r % g


@fieldwise_init
struct F32Call(ImplicitlyCopyable, Movable):
    """What every block of one launch shares."""
    var m: Int
    var n: Int
    var k: Int
    var a_rs: Int  # a(i, kk) = a[i * a_rs + kk * a_ks]
    var a_ks: Int
    var b_cs: Int  # b(kk, j) = b[j * b_cs + kk * b_ks]
    var b_ks: Int
    var leaf: Int  # L, rule 6.2
    var nleaves: Int
    var run_leaves: Int  # leaves one block folds: a power of two when nruns > 1 (6.9)
    var nruns: Int  # ceil(nleaves / run_leaves); > 1: roots[run][i][j], then the tree kernel
    var nsl: Int  # the highest tree level that waits: a block's slab holds levels 0 .. nsl


@fieldwise_init
struct F32Item(ImplicitlyCopyable, Movable):
    """One work item: a BM x BN output tile and one run of leaves."""
    var i0: Int
    var j0: Int
    var run: Int
    var l0: Int  # first leaf
    var nloc: Int  # leaves in the run
    var kbeg: Int
    var kend: Int
    var ntk: Int  # k-tiles


@always_inline
def f32_items(BM: Int, BN: Int, call: F32Call) -> Int:
    return cdiv(call.m, BM) * cdiv(call.n, BN) * call.nruns


@always_inline
def f32_item(BM: Int, BN: Int, BK: Int, call: F32Call, item: Int) -> F32Item:
    var ntn = cdiv(call.n, BN)
    var ntiles = cdiv(call.m, BM) * ntn
    var run = item // ntiles
    var tile = item % ntiles
    var l0 = run * call.run_leaves
    var l1 = min(l0 + call.run_leaves, call.nleaves)
    var kbeg = l0 * call.leaf
    var kend = min(l1 * call.leaf, call.k)
    return F32Item((tile // ntn) * BM, (tile % ntn) * BN, run, l0, l1 - l0, kbeg, kend,
                   cdiv(kend - kbeg, BK))


@always_inline
def slab_levels(run_leaves: Int) -> Int:
    """The highest tree level that waits while one run of this many leaves is
    folded: the largest trailing-ones count of a leaf index before the last (a
    block's slab holds levels 0 .. this one)."""
    var n = 0
    var v = max(run_leaves - 1, 0)
    while v > 1:
        n += 1
        v >>= 1
    return n


# ------------------------------------------------------------------ staging
@always_inline
def _a_elem(BM: Int, BK: Int, a_ks: Int, e: Int) -> Tuple[Int, Int]:
    """(row, kk) of the e-th A element of a k-tile: k fastest when A's rows are
    k-contiguous (NN, NT), rows fastest otherwise (TN): coalesced either way."""
    if a_ks == 1:
        return (e // BK, e % BK)
    return (e % BM, e // BM)


@always_inline
def _b_elem(BN: Int, BK: Int, b_cs: Int, e: Int) -> Tuple[Int, Int]:
    """(column, kk) of the e-th B element of a k-tile (columns fastest when B is
    n-contiguous: NN, TN; k fastest for NT)."""
    if b_cs == 1:
        return (e % BN, e // BN)
    return (e // BK, e % BK)


@always_inline
def _a_step(BM: Int, BK: Int, NT: Int, a_ks: Int) -> Tuple[Int, Int]:
    """(row, kk) step from a thread's A element e to e + NT: _a_elem is linear in e
    by NT steps when NT is a multiple of BK and of BM (checked where it matters)."""
    if a_ks == 1:
        return (NT // BK, 0)
    return (0, NT // BM)


@always_inline
def _b_step(BN: Int, BK: Int, NT: Int, b_cs: Int) -> Tuple[Int, Int]:
    if b_cs == 1:
        return (0, NT // BN)
    return (NT // BK, 0)


@always_inline
def f32_fetch[adt: DType, bdt: DType, BM: Int, BN: Int, BK: Int, NT: Int](
    a: Pointer[Scalar[adt], MutAnyOrigin], b: Pointer[Scalar[bdt], MutAnyOrigin],
    call: F32Call, it: F32Item, t: Int, tid: Int,
) -> Tuple[SIMD[DType.float32, cdiv(BM * BK, NT)], SIMD[DType.float32, cdiv(BN * BK, NT)]]:
    """This thread's share of k-tile t, read from global memory as the contract's
    float32 operands (bf16 widened, DAZ: rule 6.1); +0 outside A, B or the run."""
    comptime APT = cdiv(BM * BK, NT)
    comptime BPT = cdiv(BN * BK, NT)
    comptime assert APT == 1 or (NT % BK == 0 and NT % BM == 0), "A staging steps"
    comptime assert BPT == 1 or (NT % BK == 0 and NT % BN == 0), "B staging steps"
    var kt0 = it.kbeg + t * BK
    var va = SIMD[DType.float32, APT](0)
    var vb = SIMD[DType.float32, BPT](0)
    # element q of the thread is element tid + q * NT: its (row, kk) is the first's
    # plus q times a fixed step (NT is a multiple of BK, BM and BN where q > 0)
    var pa = _a_elem(BM, BK, call.a_ks, tid)
    var sa = _a_step(BM, BK, NT, call.a_ks)
    var i = it.i0 + pa[0]
    var kk = kt0 + pa[1]
    var off = i * call.a_rs + kk * call.a_ks
    var doff = sa[0] * call.a_rs + sa[1] * call.a_ks
    comptime for q in range(APT):
        if tid + q * NT < BM * BK and i < call.m and kk < it.kend:
            va[q] = load_operand[adt](a, off)
        i += sa[0]
        kk += sa[1]
        off += doff
    var pb = _b_elem(BN, BK, call.b_cs, tid)
    var sb = _b_step(BN, BK, NT, call.b_cs)
    var j = it.j0 + pb[0]
    var kb = kt0 + pb[1]
    var offb = j * call.b_cs + kb * call.b_ks
    var doffb = sb[0] * call.b_cs + sb[1] * call.b_ks
    comptime for q in range(BPT):
        if tid + q * NT < BN * BK and j < call.n and kb < it.kend:
            vb[q] = load_operand[bdt](b, offb)
        j += sb[0]
        kb += sb[1]
        offb += doffb
    return (va, vb)


@always_inline
def f32_stash[BM: Int, BN: Int, BK: Int, NT: Int, AS: AddressSpace](
    smem: Pointer[Float32, MutAnyOrigin, address_space=AS], buf: Int, call: F32Call, tid: Int,
    va: SIMD[DType.float32, cdiv(BM * BK, NT)], vb: SIMD[DType.float32, cdiv(BN * BK, NT)],
):
    """Store f32_fetch's values into shared buffer `buf`: A at [kk][row], B at [kk][col]."""
    comptime APT = cdiv(BM * BK, NT)
    comptime BPT = cdiv(BN * BK, NT)
    comptime BMP = pad4(BM)
    comptime BNP = pad4(BN)
    var base = buf * BK * (BMP + BNP)
    var pa = _a_elem(BM, BK, call.a_ks, tid)
    var sa = _a_step(BM, BK, NT, call.a_ks)
    var at = base + pa[1] * BMP + pa[0]
    var dat = sa[1] * BMP + sa[0]
    comptime for q in range(APT):
        if tid + q * NT < BM * BK:
            smem.unsafe_store(at, va[q])
        at += dat
    var pb = _b_elem(BN, BK, call.b_cs, tid)
    var sb = _b_step(BN, BK, NT, call.b_cs)
    var bt = base + BK * BMP + pb[1] * BNP + pb[0]
    var dbt = sb[1] * BNP + sb[0]
    comptime for q in range(BPT):
        if tid + q * NT < BN * BK:
            smem.unsafe_store(bt, vb[q])
        bt += dbt


# ------------------------------------------------------------------ the chains
@always_inline
def _step[BM: Int, BN: Int, BK: Int, TM: Int, TN: Int, exact: Bool, AS: AddressSpace](
    smem: Pointer[Float32, MutAnyOrigin, address_space=AS], abase: Int, bbase: Int, kk: Int,
    tx: Int, ty: Int, mut acc: SIMD[DType.float32, TM * TN],
):
    """One k step of the thread's TM x TN chains (rule 6.3, or 6.8 when exact)."""
    comptime GM = min(4, TM)
    comptime GN = min(4, TN)
    comptime BMP = pad4(BM)
    comptime BNP = pad4(BN)
    var av = SIMD[DType.float32, TM](0)
    var bv = SIMD[DType.float32, TN](0)
    comptime for g in range(TM // GM):
        var v = smem.unsafe_load[width=GM, alignment=4 * GM](abase + kk * BMP + tile_pos(BM, TM, ty, g * GM))
        comptime for q in range(GM):
            av[g * GM + q] = v[q]
    comptime for g in range(TN // GN):
        var v = smem.unsafe_load[width=GN, alignment=4 * GN](bbase + kk * BNP + tile_pos(BN, TN, tx, g * GN))
        comptime for q in range(GN):
            bv[g * GN + q] = v[q]
    comptime for r in range(TM):
        comptime for c in range(TN):
            comptime if exact:
                acc[r * TN + c] = chain_step_exact[1](av[r], bv[c], acc[r * TN + c])[0]
            else:
                acc[r * TN + c] = chain_step[1](av[r], bv[c], acc[r * TN + c])[0]


@always_inline
def _steps[BM: Int, BN: Int, BK: Int, TM: Int, TN: Int, exact: Bool, AS: AddressSpace](
    smem: Pointer[Float32, MutAnyOrigin, address_space=AS], abase: Int, bbase: Int,
    s: Int, e: Int, tx: Int, ty: Int, mut acc: SIMD[DType.float32, TM * TN],
):
    """Steps kk = s .. e-1 of the staged tile, ascending; a whole tile unrolled."""
    if s == 0 and e == BK:
        comptime for kk in range(BK):
            _step[BM, BN, BK, TM, TN, exact](smem, abase, bbase, kk, tx, ty, acc)
    else:
        for kk in range(s, e):
            _step[BM, BN, BK, TM, TN, exact](smem, abase, bbase, kk, tx, ty, acc)


@always_inline
def slab_floats(nsl: Int, N: Int, NT: Int) -> Int:
    """A block's slab: levels 0 .. nsl of N outputs for each of NT threads."""
    return (nsl + 1) * N * NT


@always_inline
def _slab_at(NT: Int, N: Int, lvl: Int, e: Int, tid: Int) -> Int:
    """This thread's entry for output e at tree level lvl (coalesced over tid)."""
    return (lvl * N + e) * NT + tid


@always_inline
def _slab_merge[N: Int](slab: F32Ptr, NT: Int, lvl: Int, tid: Int, mut v: SIMD[DType.float32, N]):
    """v = tree_add(slab level lvl, v), output by output (one slab value live at a time)."""
    comptime for e in range(N):
        v[e] = tree_add[1](slab.unsafe_load(_slab_at(NT, N, lvl, e, tid)), v[e])[0]


@always_inline
def _slab_store[N: Int](slab: F32Ptr, NT: Int, lvl: Int, tid: Int, v: SIMD[DType.float32, N]):
    comptime for e in range(N):
        slab.unsafe_store(_slab_at(NT, N, lvl, e, tid), v[e])


@always_inline
def f32_store[BM: Int, BN: Int, TM: Int, TN: Int](
    dst: F32Ptr, call: F32Call, it: F32Item, tx: Int, ty: Int, v: SIMD[DType.float32, TM * TN]
):
    """The thread's outputs inside C: out[(run * m + i) * n + j] (run 0 is C itself
    when the launch has one run)."""
    comptime for r in range(TM):
        var i = it.i0 + tile_pos(BM, TM, ty, r)
        if i < call.m:
            comptime for c in range(TN):
                var j = it.j0 + tile_pos(BN, TN, tx, c)
                if j < call.n:
                    dst.unsafe_store((it.run * call.m + i) * call.n + j, v[r * TN + c])


@always_inline
def _leaf_done[BM: Int, BN: Int, TM: Int, TN: Int, NT: Int](
    call: F32Call, it: F32Item, p: Int, tid: Int, tx: Int, ty: Int,
    acc: SIMD[DType.float32, TM * TN], slab: F32Ptr, dst: F32Ptr,
):
    """Leaf p (counted from the run's first leaf) enters the streaming tree (6.4):
    merged with the levels below its trailing one-bits (each waiting in the slab),
    then parked at the next level; after the run's last leaf the waiting levels are
    folded from the lowest up and the value stored."""
    comptime N = TM * TN
    var t = trailing_ones(p)
    var v = acc
    for lvl in range(t):
        _slab_merge[N](slab, NT, lvl, tid, v)
    if p + 1 < it.nloc:
        _slab_store[N](slab, NT, t, tid, v)
        return
    var lvl = t + 1
    while (it.nloc >> lvl) > 0:
        if ((it.nloc >> lvl) & 1) != 0:
            _slab_merge[N](slab, NT, lvl, tid, v)
        lvl += 1
    f32_store[BM, BN, TM, TN](dst, call, it, tx, ty, v)


@always_inline
def f32_compute[BM: Int, BN: Int, BK: Int, TM: Int, TN: Int, NT: Int, AS: AddressSpace](
    smem: Pointer[Float32, MutAnyOrigin, address_space=AS], call: F32Call, it: F32Item,
    t: Int, tid: Int, fast: Bool, mut acc: SIMD[DType.float32, TM * TN], slab: F32Ptr, dst: F32Ptr,
):
    """Multiply staged k-tile t (buffer t % 2) into the chains, splitting it where a
    leaf ends (rule 6.2: leaf j ends at (j + 1) * L or at k)."""
    comptime BMP = pad4(BM)
    comptime BNP = pad4(BN)
    var tx = tid % (BN // TN)
    var ty = tid // (BN // TN)
    var abase = (t % 2) * BK * (BMP + BNP)
    var bbase = abase + BK * BMP
    var kt0 = it.kbeg + t * BK
    var kt1 = min(kt0 + BK, it.kend)
    var pos = kt0
    while pos < kt1:
        var lf = pos // call.leaf
        var leaf_end = min((lf + 1) * call.leaf, it.kend)
        var seg_end = min(kt1, leaf_end)
        if fast:
            _steps[BM, BN, BK, TM, TN, True](smem, abase, bbase, pos - kt0, seg_end - kt0, tx, ty, acc)
        else:
            _steps[BM, BN, BK, TM, TN, False](smem, abase, bbase, pos - kt0, seg_end - kt0, tx, ty, acc)
        if seg_end == leaf_end:
            _leaf_done[BM, BN, TM, TN, NT](call, it, lf - it.l0, tid, tx, ty, acc, slab, dst)
            acc = SIMD[DType.float32, TM * TN](0)
        pos = seg_end


# ------------------------------------------------------------------ the phases
@always_inline
def f32_prologue_phase[adt: DType, bdt: DType, BM: Int, BN: Int, BK: Int, NT: Int, AS: AddressSpace](
    a: Pointer[Scalar[adt], MutAnyOrigin], b: Pointer[Scalar[bdt], MutAnyOrigin],
    smem: Pointer[Float32, MutAnyOrigin, address_space=AS], call: F32Call, it: F32Item, tid: Int,
):
    """Before the first barrier of an item: k-tile 0 into buffer 0."""
    if it.ntk > 0:
        var v = f32_fetch[adt, bdt, BM, BN, BK, NT](a, b, call, it, 0, tid)
        f32_stash[BM, BN, BK, NT](smem, 0, call, tid, v[0], v[1])


@always_inline
def f32_main_phase[adt: DType, bdt: DType, BM: Int, BN: Int, BK: Int, TM: Int, TN: Int, NT: Int, AS: AddressSpace](
    a: Pointer[Scalar[adt], MutAnyOrigin], b: Pointer[Scalar[bdt], MutAnyOrigin],
    smem: Pointer[Float32, MutAnyOrigin, address_space=AS], call: F32Call, it: F32Item,
    t: Int, tid: Int, fast: Bool, mut acc: SIMD[DType.float32, TM * TN], slab: F32Ptr, dst: F32Ptr,
):
    """Between barriers t and t + 1: fetch k-tile t + 1 into registers, multiply
    tile t from buffer t % 2, store tile t + 1 into the other buffer."""
    var nxt = t + 1 < it.ntk
    var v = (SIMD[DType.float32, cdiv(BM * BK, NT)](0), SIMD[DType.float32, cdiv(BN * BK, NT)](0))
    if nxt:
        v = f32_fetch[adt, bdt, BM, BN, BK, NT](a, b, call, it, t + 1, tid)
    f32_compute[BM, BN, BK, TM, TN, NT](smem, call, it, t, tid, fast, acc, slab, dst)
    if nxt:
        f32_stash[BM, BN, BK, NT](smem, (t + 1) % 2, call, tid, v[0], v[1])

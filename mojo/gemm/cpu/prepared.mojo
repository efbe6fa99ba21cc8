"""Prepared weights for fp32.v1 / bf16f32.v1: B packed once (pack_f32.pack_b_all),
then multiplied many times without packing it again.

The products run the same loop nests as gemm_f32 (fp32_v1.f32_block and
f32_block_small_m), which read B's panels where they lie instead of packing them:
per output the same leaves, the same FMA chains in the same order, the same tree,
so the bits are those of the raw call (contract 6.5: the order depends on k only).
Few rows (m <= SMALL_M, decode included) take f32_small_prepared below (f32_block_small_m's
arithmetic, panel by panel: each task streams its panels once, front to back), columns
split over tasks; more rows take the blocked nest, split as gemm_f32 splits them.
The panels may also hold a low-bit format (gemm/cpu/pack_lowbit.mojo: bf16 bits, or
int8 codes with a pow2f scale per column): the decode rows widen them in registers,
the other paths widen a panel or a column chunk into float32 panels in the workspace
first; either way the kernels see the float32 weights the format materializes.
"""
from std.python import PythonObject
from std.python.bindings import PythonModuleBuilder
from common.ptr import F32Ptr
from common.workspace import ws_take, ws_request
from common.tasks import chunk_bounds, run_tasks
from std.collections import Array
from gemm.cpu.blocking import MR, NR, NV, SMALL_M, W, ROWS_MAX, round_up, cache_plan
from gemm.cpu.pack_f32 import pack_a, pack_b_all
from gemm.cpu.pack_lowbit import (PANELS_F32, PANELS_BF16, PANELS_I8, elem_bytes, load_w, widen_panels,
                                  pack_bf16_panels, pack_i8_panels)
from common.ptr import I8Ptr, U16Ptr
from gemm.cpu.fp32_v1 import (GemmArgs, mode_leaf, f32_block, f32_block_ws, a_once_fits, a_shared_ws, pack_a_shared,
                              f32_block_shared_a, leftover_ws)
from gemm.cpu.ukernel_f32 import Acc, ukernel_leaf, ukernel_leaf_reversed, ukernel_rows
from gemm.cpu.tree import finish_tile
from arith.tree import leaf_size, leaf_count, bit_length, trailing_ones, tree_add, chain_step_daz
from arith.fp import ftz
from std.sys.intrinsics import prefetch, PrefetchOptions
from std.memory.alloc import unsafe_alloc


def _arg(args: PythonObject, i: Int) raises -> Int:
    return Int(py=args[i])


comptime PF_FLOATS = 1024  # software prefetch distance into the panel stream (4 KiB)


def small_prepared_ws(g: GemmArgs, i_rows: Int, bfmt: Int = PANELS_F32) -> Int:
    """Workspace floats f32_small_prepared needs: A packed over all of k, and the tree
    slots of one column panel (and one widened float32 panel for a low-bit format)."""
    var nleaves = g.nleaves()
    var mpan = (i_rows + MR - 1) // MR
    var wpanel = 0 if bfmt == PANELS_F32 else round_up(NR * g.k, 16)
    return round_up(mpan * MR * g.k, 16) + round_up(mpan * MR * NR * max(bit_length(nleaves), 1), 16) + wpanel


def f32_small_prepared(g: GemmArgs, i_lo: Int, i_hi: Int, j_lo: Int, j_hi: Int, ws: F32Ptr, bpre: Int,
                       bfmt: Int = PANELS_F32, bscales: Int = 0):
    """Rows [i_lo, i_hi) (at most SMALL_M) x columns [j_lo, j_hi) (j_lo a multiple of NR)
    against the prepared panels at bpre. Per MR x NR tile: the leaves in ascending
    order, each one micro-kernel chain (contract 6.3), merged by finish_tile (6.4):
    the arithmetic of f32_block_small_m; only the order in which tiles are visited
    differs (panel outer, leaf inner), which no output can see. A low-bit bfmt: each
    panel is widened into the workspace (pack_lowbit.widen_panels) before its tiles."""
    var n = g.n
    var k = g.k
    if i_hi <= i_lo or j_hi <= j_lo:
        return
    var cptr = F32Ptr(unsafe_from_address=g.c)
    var lda = g.m if g.trans_a else k
    var L = g.leaf
    var nleaves = g.nleaves()
    var levels = bit_length(nleaves)
    var mc = i_hi - i_lo
    var mpan = (mc + MR - 1) // MR
    var apack = ws
    var slots = ws.unsafe_offset(round_up(mpan * MR * k, 16))
    var level_stride = mpan * MR * NR
    var wpanel = slots.unsafe_offset(round_up(mpan * MR * NR * max(levels, 1), 16))
    for p in range(nleaves):
        var k0 = p * L
        var lk = min(L, k - k0)
        pack_a(g.a, g.a_bf16, g.trans_a, lda, i_lo, mc, k0, lk, apack.unsafe_offset(k0 * mpan * MR))
    var acc = Acc(fill=SIMD[DType.float32, W](0))
    var bsrc = F32Ptr(unsafe_from_address=bpre)
    for q in range(j_lo // NR, (j_hi + NR - 1) // NR):
        var nr = min(NR, j_hi - q * NR)
        var panel = bsrc.unsafe_offset(q * NR * k)
        if bfmt != PANELS_F32:
            widen_panels(bfmt, bpre, bscales, q, q + 1, k, wpanel)
            panel = wpanel
        for p in range(nleaves):
            var k0 = p * L
            var lk = min(L, k - k0)
            var bp = panel.unsafe_offset(k0 * NR)
            for ip in range(mpan):
                var mr = min(MR, mc - ip * MR)
                var ap = apack.unsafe_offset((k0 * mpan + ip * lk) * MR)
                if g.sabotage and p == nleaves - 1:
                    # a separate accumulator: passing acc itself to this out-of-line call would
                    # let its address escape, and the hot loop would store acc on every FMA
                    var racc = Acc(fill=SIMD[DType.float32, W](0))
                    ukernel_leaf_reversed(ap, bp, lk, NR, racc)
                    acc = racc^
                elif ip > 0:
                    ukernel_rows(ap, bp, lk, NR, mr, acc)
                elif mr > 4:
                    ukernel_leaf[MR, PF_FLOATS](ap, bp, lk, NR, acc)
                elif mr == 1:
                    ukernel_leaf[1, PF_FLOATS](ap, bp, lk, NR, acc)
                elif mr == 2:
                    ukernel_leaf[2, PF_FLOATS](ap, bp, lk, NR, acc)
                else:
                    ukernel_leaf[4, PF_FLOATS](ap, bp, lk, NR, acc)
                var cp = cptr.unsafe_offset((i_lo + ip * MR) * n + q * NR)
                finish_tile(acc, p, nleaves, levels, slots, level_stride, ip * MR * NR, cp, n, mr, nr)


# ---------------------------------------------------------------- decode rows (m <= ROWS_MAX)
comptime RP = 2 if W >= 16 else 1  # panels a decode step reads side by side (more chains in
# flight; AVX2 has 16 registers, too few for 4 rows x 2 panels); RP2 for 2 rows
# for 1 row: four panel streams side by side, or on AVX2 (three vectors a panel) two:
# 1 x 4 x 3 accumulators and 12 panel vectors would not fit its 16 registers
comptime RP1 = 2 if NV == 3 else 4
comptime RP2 = 1 if NV == 3 else 2 * RP  # for 2 rows (AVX2: 2 x 2 x 3 + 6 would not fit)
comptime RACC = max(ROWS_MAX * RP, RP1, 2 * RP2) * NV
comptime SCV = max(RP1, RP2) * NV  # column-scale vectors of the most panels a decode step reads
comptime RAcc = Array[SIMD[DType.float32, W], RACC]
comptime RSLOT = RACC * W  # floats of one tree level


def rows_prepared_ws(g: GemmArgs) -> Int:
    """Workspace floats f32_rows_prepared needs: A packed over all of k, and one tree
    slot per level for RP panels of ROWS_MAX rows."""
    var nleaves = g.nleaves()
    return round_up(MR * g.k, 16) + RSLOT * max(bit_length(nleaves), 1)


# whether a decode leaf of float32 panels prefetches its panel streams PF_FLOATS ahead
# (a hint: no value changes), as the low-bit panels' leaves do. Not on AVX2 (three vectors a
# step): there the hardware prefetcher alone streams them faster. AMD EPYC Zen 2, v3,
# 1 x 4096 x 4096 prepared, alternating processes: 1 thread 4.1-4.3 -> 3.4-3.6 ms,
# 2 threads 2.2-2.9 -> 1.9-2.5 ms; the int8 panels (1 thread 1.20 against 1.30 ms)
# keep it, the bf16 panels were the same either way and keep it
comptime PF_ROWS_F32 = W != 8


@always_inline
def _rows_leaf[R: Int, P: Int, FMT: Int = PANELS_F32](
    a: F32Ptr, b: Int, pstride: Int, lk: Int, sc: Array[SIMD[DType.float32, W], SCV], mut acc: RAcc
):
    """One leaf of R rows against P panels (panel pp at element pp * pstride of the panel
    buffer at address b, whose leaf starts at element 0): per output acc = +0, then
    fma(a[i, kk], b[kk, j], acc) for kk ascending (contract 6.3), the chains of
    ukernel_leaf; the P panels only give more independent chains. FMT: the panels'
    format, widened as they are loaded (pack_lowbit.load_w; sc holds the int8 panels'
    column scales, vector pp * NV + v)."""
    comptime EB = 4 if FMT == PANELS_F32 else (2 if FMT == PANELS_BF16 else 1)
    comptime PF = PF_FLOATS * 4 // EB  # the same distance in bytes ahead
    comptime for q in range(R * P * NV):
        acc[q] = SIMD[DType.float32, W](0)
    for kk in range(lk):
        comptime if FMT != PANELS_F32 or PF_ROWS_F32:
            comptime for pp in range(P):
                comptime for l in range(max(1, NR * EB // 64)):
                    prefetch[PrefetchOptions().for_read().high_locality()](
                        Pointer[UInt8, MutAnyOrigin](unsafe_from_address=b).unsafe_offset(
                            (pp * pstride + kk * NR + PF) * EB + l * 64))
        var bv = Array[SIMD[DType.float32, W], P * NV](fill=SIMD[DType.float32, W](0))
        comptime for pp in range(P):
            comptime for v in range(NV):
                bv[pp * NV + v] = load_w[FMT](b, pp * pstride + kk * NR + v * W, sc[pp * NV + v])
        comptime for i in range(R):
            var av = SIMD[DType.float32, W](a.unsafe_load(kk * MR + i))
            comptime for pp in range(P):
                comptime for v in range(NV):
                    acc[(i * P + pp) * NV + v] = chain_step_daz[W](
                        av, bv[pp * NV + v], acc[(i * P + pp) * NV + v])


@always_inline
def _rows_finish[R: Int, P: Int](
    mut acc: RAcc, p: Int, nleaves: Int, levels: Int, slots: F32Ptr, c: F32Ptr, ldc: Int,
    ncols: Int,
):
    """gemm.cpu.tree.finish_tile for these R x (P * NR) outputs: flush the leaf, merge
    it with the levels given by the trailing one-bits of p (6.4), after the last leaf
    fold the waiting levels and store columns [0, ncols) of each row."""
    comptime Q = R * P * NV
    comptime for q in range(Q):
        acc[q] = ftz(acc[q])
    var t = trailing_ones(p)
    for lvl in range(t):
        var s = slots.unsafe_offset(lvl * RSLOT)
        comptime for q in range(Q):
            acc[q] = tree_add[W](s.unsafe_load[width=W](q * W), acc[q])
    if p == nleaves - 1:
        for lvl in range(t + 1, levels):
            if (nleaves >> lvl) & 1:
                var s = slots.unsafe_offset(lvl * RSLOT)
                comptime for q in range(Q):
                    acc[q] = tree_add[W](s.unsafe_load[width=W](q * W), acc[q])
        comptime for i in range(R):
            comptime for pp in range(P):
                comptime for v in range(NV):
                    var c0 = pp * NR + v * W
                    var x = acc[(i * P + pp) * NV + v]
                    if c0 + W <= ncols:
                        c.unsafe_store(i * ldc + c0, x)
                    else:
                        for l in range(max(0, ncols - c0)):
                            c.unsafe_store(i * ldc + c0 + l, x[l])
    else:
        var s = slots.unsafe_offset(t * RSLOT)
        comptime for q in range(Q):
            s.unsafe_store(q * W, acc[q])


def f32_rows_prepared[R: Int, P: Int, FMT: Int = PANELS_F32](g: GemmArgs, j_lo: Int, j_hi: Int, ws: F32Ptr,
                                                            bpre: Int, bscales: Int = 0):
    """All R = m rows (m <= ROWS_MAX) x columns [j_lo, j_hi) (j_lo a multiple of NR):
    P panels at a time, every leaf in ascending order, the accumulators in registers;
    panels of format FMT widened in registers as they stream."""
    var n = g.n
    var k = g.k
    if j_hi <= j_lo:
        return
    var cptr = F32Ptr(unsafe_from_address=g.c)
    var lda = g.m if g.trans_a else k
    var L = g.leaf
    var nleaves = g.nleaves()
    var levels = bit_length(nleaves)
    var apack = ws
    var slots = ws.unsafe_offset(round_up(MR * k, 16))
    for p in range(nleaves):
        var k0 = p * L
        var lk = min(L, k - k0)
        pack_a(g.a, g.a_bf16, g.trans_a, lda, 0, R, k0, lk, apack.unsafe_offset(k0 * MR))
    var acc = RAcc(fill=SIMD[DType.float32, W](0))
    comptime EB = 4 if FMT == PANELS_F32 else (2 if FMT == PANELS_BF16 else 1)
    var scp = F32Ptr(unsafe_from_address=bscales)
    var q = j_lo // NR
    var qend = (j_hi + NR - 1) // NR
    while q < qend:
        var group = q + P <= qend
        var panel = bpre + q * NR * k * EB
        var cp = cptr.unsafe_offset(q * NR)
        var ncols = min(P * NR, j_hi - q * NR)
        var sc = Array[SIMD[DType.float32, W], SCV](fill=SIMD[DType.float32, W](1))
        comptime if FMT == PANELS_I8:
            comptime for pp in range(P):
                comptime for v in range(NV):
                    if group or pp == 0:
                        sc[pp * NV + v] = scp.unsafe_load[width=W]((q + pp) * NR + v * W)
        for p in range(nleaves):
            var k0 = p * L
            var lk = min(L, k - k0)
            var ap = apack.unsafe_offset(k0 * MR)
            var bp = panel + k0 * NR * EB
            if group:
                _rows_leaf[R, P, FMT](ap, bp, NR * k, lk, sc, acc)
                _rows_finish[R, P](acc, p, nleaves, levels, slots, cp, n, ncols)
            else:
                _rows_leaf[R, 1, FMT](ap, bp, NR * k, lk, sc, acc)
                _rows_finish[R, 1](acc, p, nleaves, levels, slots, cp, n, ncols)
        q += P if group else 1


def gemm_f32_pack(args: PythonObject) raises -> PythonObject:
    """Arguments: (b, dst, n, k, trans_b, b_bf16, tasks). dst holds
    ceil(n / NR) * NR * k float32 (NR: this build's block table)."""
    var src = _arg(args, 0)
    var dst = F32Ptr(unsafe_from_address=_arg(args, 1))
    var n = _arg(args, 2)
    var k = _arg(args, 3)
    var trans_b = _arg(args, 4) != 0
    var b_bf16 = _arg(args, 5) != 0
    var npan = (n + NR - 1) // NR
    var tasks = max(1, min(_arg(args, 6), npan))
    var ldb = k if trans_b else n

    def work(t: Int) {imm src, imm dst, imm n, imm k, imm trans_b, imm b_bf16, imm npan, imm tasks, imm ldb}:
        var b = chunk_bounds(npan, tasks, t, 1)
        pack_b_all(src, b_bf16, trans_b, ldb, b[0], b[1], n, k, dst)

    if npan > 0 and k > 0:
        run_tasks(work, tasks)
    return PythonObject(None)


def gemm_f32_pack_lowbit(args: PythonObject) raises -> PythonObject:
    """Arguments: (b, exps, dst, scales, n, k, trans_b, fmt, tasks). fmt 1: b bf16 bits
    (uint16) stored (n, k) when trans_b, else (k, n); fmt 2: b int8 codes stored (n, k)
    with exps (n,) int32 row exponents (trans_b only). dst holds ceil(n / NR) * NR * k
    stored weights (2 or 1 bytes each); scales (fmt 2) ceil(n / NR) * NR float32."""
    var src = _arg(args, 0)
    var exps = _arg(args, 1)
    var dst = _arg(args, 2)
    var scales = _arg(args, 3)
    var n = _arg(args, 4)
    var k = _arg(args, 5)
    var trans_b = _arg(args, 6) != 0
    var fmt = _arg(args, 7)
    var npan = (n + NR - 1) // NR
    var tasks = max(1, min(_arg(args, 8), npan))
    var ldb = k if trans_b else n

    def work(t: Int) {imm src, imm exps, imm dst, imm scales, imm n, imm k, imm trans_b, imm fmt, imm npan, imm tasks, imm ldb}:
        var b = chunk_bounds(npan, tasks, t, 1)
        if fmt == PANELS_BF16:
            pack_bf16_panels(src, trans_b, ldb, b[0], b[1], n, k, U16Ptr(unsafe_from_address=dst))
        else:
            pack_i8_panels(src, exps, b[0], b[1], n, k, I8Ptr(unsafe_from_address=dst),
                           F32Ptr(unsafe_from_address=scales))

    if npan > 0 and k > 0:
        run_tasks(work, tasks)
    return PythonObject(None)


def gemm_f32_packed(args: PythonObject) raises -> PythonObject:
    """Arguments: (a, b_packed, c, m, n, k, trans_a, a_bf16, b_fmt, b_scales, mode, tasks,
    sabotage, workspace address, workspace bytes). mode as gemm_f32's. b_fmt: the panels' format (0 float32,
    1 bf16 bits, 2 int8 codes with b_scales, a float32 pow2f per column). Returns the
    workspace bytes this call needed."""
    var bpre = _arg(args, 1)
    var g = GemmArgs(
        _arg(args, 0), bpre, _arg(args, 2), _arg(args, 3), _arg(args, 4), _arg(args, 5),
        _arg(args, 6) != 0, False, _arg(args, 7) != 0, False, _arg(args, 12) != 0,
        mode_leaf(_arg(args, 10), _arg(args, 5)), cache_plan(),
    )
    var bfmt = _arg(args, 8)
    var bscales = _arg(args, 9)
    var tasks = max(1, _arg(args, 11))
    var m = g.m
    if g.k == 0:
        def zero(t: Int) {imm g}:
            var cz = F32Ptr(unsafe_from_address=g.c)
            for i in range(g.m * g.n):
                cz.unsafe_store(i, Float32(0))

        run_tasks(zero, 1)
        return PythonObject(0)
    var ws_addr = _arg(args, 13)
    var ws_bytes = _arg(args, 14)
    var n = g.n
    var npan = (n + NR - 1) // NR
    var mpan = (m + MR - 1) // MR
    var small_m = m <= SMALL_M
    var rows_path = m <= ROWS_MAX and not g.sabotage
    var split_n = small_m or npan >= 2 * tasks or npan >= mpan
    var units = npan if split_n else mpan
    var t_count = max(1, min(tasks, units))
    var rows = m
    var cols = n
    if split_n:
        cols = chunk_bounds(n, t_count, 0, NR)[1]
    else:
        rows = chunk_bounds(m, t_count, 0, MR)[1]
    var a_once = a_once_fits(g.k, rows)
    # a low-bit format on the blocked path widens each column chunk into the workspace
    # (the packed B chunk of the raw path): its workspace is the raw path's
    var f32_panels = bfmt == PANELS_F32
    # a column split of the blocked path: A packed once, shared by the tasks (as gemm_f32)
    var a_shared = split_n and not small_m and t_count > 1 and a_once
    var per_task = small_prepared_ws(g, rows, bfmt) if small_m else f32_block_ws(g, rows, cols, f32_panels, a_once,
                                                                                  a_shared)
    if a_shared:
        per_task = max(per_task, leftover_ws(g, t_count, f32_panels))
    if rows_path:
        per_task = rows_prepared_ws(g)
    per_task = round_up(per_task, 16)  # every task's part starts on a 64-byte boundary
    var a_part = round_up(a_shared_ws(g), 16) if a_shared else 0
    var need_total = (a_part + per_task * t_count) * 4
    var ws_at = ws_take(ws_addr, ws_bytes, need_total)
    var own = ws_at == 0
    var ws0 = F32Ptr(unsafe_from_address=ws_at) if not own else unsafe_alloc[Float32](
        a_part + per_task * t_count, alignment=64
    ).unsafe_origin_cast[MutAnyOrigin]()
    var ws = ws0.unsafe_offset(a_part)  # the tasks' parts, after the shared A
    var apre = Int(ws0) if a_shared else 0

    def pack_shared(t: Int) {imm g, imm t_count, imm ws0}:
        var b = chunk_bounds(g.m, t_count, t, MR)
        pack_a_shared(g, b[0], b[1], ws0)

    if a_shared:
        run_tasks(pack_shared, t_count)

    def work(t: Int) {imm g, imm t_count, imm split_n, imm small_m, imm rows_path, imm ws, imm per_task, imm bpre, imm a_once, imm bfmt, imm bscales, imm apre}:
        var w = ws.unsafe_offset(t * per_task)
        if rows_path:
            var b = chunk_bounds(g.n, t_count, t, NR)
            if bfmt == PANELS_BF16:
                _rows_dispatch[PANELS_BF16](g, b[0], b[1], w, bpre, bscales)
            elif bfmt == PANELS_I8:
                _rows_dispatch[PANELS_I8](g, b[0], b[1], w, bpre, bscales)
            else:
                _rows_dispatch[PANELS_F32](g, b[0], b[1], w, bpre, bscales)
        elif split_n:
            var b = chunk_bounds(g.n, t_count, t, NR)
            if small_m:
                f32_small_prepared(g, 0, g.m, b[0], b[1], w, bpre, bfmt, bscales)
            elif apre != 0:
                f32_block_shared_a(g, t, t_count, w, apre, bpre, bfmt, bscales)
            else:
                f32_block(g, 0, g.m, b[0], b[1], w, bpre, a_once, bfmt, bscales)
        else:
            var b = chunk_bounds(g.m, t_count, t, MR)
            f32_block(g, b[0], b[1], 0, g.n, w, bpre, a_once, bfmt, bscales)

    run_tasks(work, t_count)
    if own:
        ws0.unsafe_free()
    return PythonObject(ws_request(need_total))


@always_inline
def _rows_dispatch[FMT: Int](g: GemmArgs, j_lo: Int, j_hi: Int, w: F32Ptr, bpre: Int, bscales: Int):
    """The decode rows kernel for m = 1..ROWS_MAX rows and panels of format FMT."""
    if g.m == 1:
        f32_rows_prepared[1, RP1, FMT](g, j_lo, j_hi, w, bpre, bscales)
    elif g.m == 2:
        f32_rows_prepared[2, RP2, FMT](g, j_lo, j_hi, w, bpre, bscales)
    elif g.m == 3:
        f32_rows_prepared[3, RP, FMT](g, j_lo, j_hi, w, bpre, bscales)
    else:
        f32_rows_prepared[4, RP, FMT](g, j_lo, j_hi, w, bpre, bscales)


def register_prepared(mut m: PythonModuleBuilder) raises:
    m.def_function[gemm_f32_pack]("gemm_f32_pack")
    m.def_function[gemm_f32_packed]("gemm_f32_packed")
    m.def_function[gemm_f32_pack_lowbit]("gemm_f32_pack_lowbit")

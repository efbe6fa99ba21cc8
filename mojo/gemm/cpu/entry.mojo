"""Registration of the CPU GEMM entries in the extension module, and the split of
one call into tasks (each task owns a rectangle of the output). Every entry runs its
kernels through common.tasks.run_tasks (GIL, floating-point state, worker pool)."""
from std.python import PythonObject
from std.python.bindings import PythonModuleBuilder
from common.ptr import F32Ptr
from common.tasks import chunk_bounds, run_tasks, nothing
from gemm.cpu.blocking import MR, NR, SMALL_M, round_up, cache_plan
from arith.tree import tree_add
from gemm.cpu.rows_f32 import f32_rows, rows_ws, ROWS_MAX, split_point
from gemm.cpu.int_gemm import with_e32, IntArgs, int_block, int_ws, vnni_packed_words, vnni_pack_all
from gemm.cpu.int_rows import INT_ROWS_MAX, a_codes, int_rows
from gemm.cpu.amx_int import amx_block, amx_ws, amx_packed_words, amx_pack_all
from gemm.cpu.avx2_int import avx2_block, avx2_ws, avx2_packed_words, avx2_pack_all
from std.sys.info import CompilationTarget
from gemm.cpu.pack_int import IMR, INR
from common.ptr import U32Ptr
from common.workspace import ws_take, ws_request
from std.memory.alloc import unsafe_alloc
from gemm.cpu.peak import fma_rounds
from std.memory import bitcast
from gemm.cpu.fp32_v1 import (GemmArgs, mode_leaf, f32_block, f32_block_small_m, f32_block_ws, f32_small_ws,
                              f32_block_kouter, kouter_fits, a_once_fits, a_shared_ws, pack_a_shared,
                              f32_block_shared_a, leftover_ws)


def _arg(args: PythonObject, i: Int) raises -> Int:
    return Int(py=args[i])


def gemm_f32(args: PythonObject) raises -> PythonObject:
    """Arguments: (a, b, c, m, n, k, trans_a, trans_b, a_bf16, b_bf16, mode, tasks,
    sabotage, workspace address, workspace bytes). mode: the numeric mode (0 identical:
    fp32.v1; 1 deterministic, 2 fast: fp32_v1.mode_leaf's leaves; -L: leaves of exactly
    L, a piece of a k-split product, rule 6.7). Returns the workspace bytes this call
    needed: the caller keeps a buffer that large for the next call (a workspace
    that is too small is replaced by a temporary one)."""
    var g = GemmArgs(
        _arg(args, 0), _arg(args, 1), _arg(args, 2), _arg(args, 3), _arg(args, 4),
        _arg(args, 5), _arg(args, 6) != 0, _arg(args, 7) != 0, _arg(args, 8) != 0,
        _arg(args, 9) != 0, _arg(args, 12) != 0, mode_leaf(_arg(args, 10), _arg(args, 5)),
        cache_plan(),
    )
    var tasks = max(1, _arg(args, 11))
    if g.k == 0:
        def zero(t: Int) {imm g}:
            var cz = F32Ptr(unsafe_from_address=g.c)
            for i in range(g.m * g.n):
                cz.unsafe_store(i, Float32(0))

        run_tasks(zero, 1)
        return PythonObject(0)
    var ws_addr = _arg(args, 13)
    var ws_bytes = _arg(args, 14)
    var m = g.m
    var n = g.n
    # split the columns when there are enough NR panels and the product is not twice as
    # tall as it is wide, else the rows. A column split's tasks each read all of A (packed
    # once for all of them, in a step of its own, when it fits A_ONCE_BYTES), a row
    # split's all of B; for a tall product B is the small one. On the AMD EPYC Zen 2
    # (v3, 2 threads, alternating processes): 768 x 64 x 256 0.43-0.53 -> 0.33-0.36 ms,
    # 1536 x 256 x 576 3.1-3.3 -> 2.6-3.0 ms with rows
    var npan = (n + NR - 1) // NR
    var mpan = (m + MR - 1) // MR
    var small_m = m <= SMALL_M
    var rows_path = m <= ROWS_MAX and not g.b_bf16
    var split_n = small_m or npan >= mpan or (npan >= 2 * tasks and m < 2 * n)
    var units = npan if split_n else mpan
    var t_count = max(1, min(tasks, units))
    var rows = m
    var cols = n
    if split_n:
        cols = chunk_bounds(n, t_count, 0, NR)[1]
    else:
        rows = chunk_bounds(m, t_count, 0, MR)[1]
    # a column split of the blocked path: every task reads all of A, so A is packed once,
    # each task packing a share of its rows in a first parallel step, instead of once
    # per task (on a 2-core AMD EPYC Zen 5, v3 build: 1024^3 NN / NT / TN at 2 threads
    # spent about 3-5% of each task's time packing the whole of A)
    var a_shared = split_n and not small_m and t_count > 1 and a_once_fits(g.k, m)
    # a long k and a small output: leaf by leaf over the task's whole block (f32_block_kouter)
    var kouter = not small_m and not a_shared and kouter_fits(g, rows, cols)
    var per_task = f32_small_ws(g, rows, cols) if small_m else f32_block_ws(g, rows, cols, False, False,
                                                                             a_shared, kouter)
    if a_shared:
        per_task = max(per_task, leftover_ws(g, t_count))
    var kparts = 1
    var nleaves = g.nleaves()
    var psplit = split_point(nleaves)
    if rows_path:
        # decode shapes, NN layout (B stored (k, n)): split the leaf tree at its root
        # between two tasks so each streams whole rows of B, when the two subtrees hold
        # the same number of leaves; other tasks split the columns. Otherwise the columns
        # alone: the NT layout's column split already streams whole rows of the stored B,
        # and an unequal root split (k = 576: 4 leaves and 1) leaves one task most of
        # the work. On a 2-core AMD EPYC Zen 2 (v3), against the root split everywhere:
        # 1x49152x576 NN 8.2 -> 5.1 ms, NT 13.0 -> 7.3 ms; 4x49152x576 NN 13.0 -> 6.7,
        # NT 23.5 -> 13.2; 1x4096x4096 NN (16 + 16 leaves) 2.8 ms with the root split,
        # 3.2 ms with columns, so it keeps the root split
        if tasks >= 2 and nleaves >= 2 and not g.trans_b and 2 * psplit == nleaves:
            kparts = 2
        t_count = kparts * max(1, min(tasks // kparts, npan))
        cols = chunk_bounds(n, t_count // kparts, 0, NR)[1]
        per_task = rows_ws(g, cols) + round_up(m * cols, 16)
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

    def work(t: Int) {imm g, imm t_count, imm split_n, imm small_m, imm rows_path, imm ws, imm per_task, imm kparts, imm nleaves, imm psplit, imm apre, imm kouter}:
        var w = ws.unsafe_offset(t * per_task)
        if rows_path:
            var kp = t % kparts
            var b = chunk_bounds(g.n, t_count // kparts, t // kparts, NR)
            var cptr = F32Ptr(unsafe_from_address=g.c)
            if kparts == 1:
                f32_rows(g, 0, g.m, b[0], b[1], 0, nleaves, cptr.unsafe_offset(b[0]), g.n, w)
            elif kp == 0:
                f32_rows(g, 0, g.m, b[0], b[1], 0, psplit, cptr.unsafe_offset(b[0]), g.n, w)
            else:
                var tmp = w.unsafe_offset(per_task - round_up(g.m * (b[1] - b[0]), 16))
                f32_rows(g, 0, g.m, b[0], b[1], psplit, nleaves, tmp, b[1] - b[0], w)
        elif split_n:
            var b = chunk_bounds(g.n, t_count, t, NR)
            if small_m:
                f32_block_small_m(g, 0, g.m, b[0], b[1], w)
            elif apre != 0:
                f32_block_shared_a(g, t, t_count, w, apre)
            elif kouter:
                f32_block_kouter(g, 0, g.m, b[0], b[1], w)
            else:
                f32_block(g, 0, g.m, b[0], b[1], w)
        else:
            var b = chunk_bounds(g.m, t_count, t, MR)
            if kouter:
                f32_block_kouter(g, b[0], b[1], 0, g.n, w)
            else:
                f32_block(g, b[0], b[1], 0, g.n, w)

    def root() {imm g, imm t_count, imm ws, imm per_task, imm kparts}:
        # the root of the tree when two tasks split it: C = ftz(left + right), the
        # right subtree having been left by task (2c + 1) at the end of its workspace
        if kparts != 2:
            return
        var cptr = F32Ptr(unsafe_from_address=g.c)
        for cp in range(t_count // 2):
            var b = chunk_bounds(g.n, t_count // 2, cp, NR)
            var w1 = ws.unsafe_offset((2 * cp + 1) * per_task)
            var nc = b[1] - b[0]
            var tmp = w1.unsafe_offset(per_task - round_up(g.m * nc, 16))
            for i in range(g.m):
                for j in range(nc):
                    var x = tree_add[1](cptr.unsafe_load(i * g.n + b[0] + j), tmp.unsafe_load(i * nc + j))
                    cptr.unsafe_store(i * g.n + b[0] + j, x[0])

    run_tasks(nothing, work, t_count, root)
    if own:
        ws0.unsafe_free()
    if g.sabotage and rows_path:
        # SABOTAGE ONLY (conformance --sabotage): the rows path flips C[0, 0]'s low bit
        var cb = U32Ptr(unsafe_from_address=g.c)
        cb.unsafe_store(0, cb.unsafe_load(0) ^ 1)
    return PythonObject(ws_request(need_total))


def _sabotage(g: IntArgs):
    """SABOTAGE ONLY (conformance --sabotage): flip the low bit of C[0, 0]."""
    if g.sabotage:
        var c = U32Ptr(unsafe_from_address=g.c)
        c.unsafe_store(0, c.unsafe_load(0) ^ 1)


def _int_rows_call(g: IntArgs, tasks: Int):
    """Decode shapes (m <= INT_ROWS_MAX): B streamed as stored, columns split over tasks;
    A's codes are made once, before the tasks."""
    var ac = unsafe_alloc[Int32](max(1, g.m * g.k), alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    var t_count = max(1, min(tasks, (g.n + 63) // 64))

    def prepare() {imm g, imm ac}:
        a_codes(g, ac)

    def work(t: Int) {imm g, imm ac, imm t_count}:
        var b = chunk_bounds(g.n, t_count, t, 16)
        int_rows(g, ac, b[0], b[1])

    run_tasks(prepare, work, t_count, nothing)
    ac.unsafe_free()
    _sabotage(g)


def _int_call(g0: IntArgs, tasks: Int, ws_addr: Int, ws_bytes: Int) -> Int:
    """Split the output over tasks (columns when there are enough panels, else rows)."""
    if g0.m <= INT_ROWS_MAX:
        _int_rows_call(g0, tasks)
        return 0
    var g = with_e32(g0)
    var npan = (g.n + INR - 1) // INR
    var mpan = (g.m + IMR - 1) // IMR
    var split_n = npan >= 2 * tasks or npan >= mpan
    var units = npan if split_n else mpan
    var t_count = max(1, min(tasks, units))
    var rows = g.m
    var cols = g.n
    if split_n:
        cols = chunk_bounds(g.n, t_count, 0, INR)[1]
    else:
        rows = chunk_bounds(g.m, t_count, 0, IMR)[1]
    var per_task = int_ws(g, rows, cols)
    comptime if CompilationTarget.has_intel_amx():
        per_task = round_up(amx_ws(g, rows, cols), 16)
    elif not CompilationTarget.has_avx512f():
        per_task = round_up(avx2_ws(g, rows, cols), 16)
    var need = per_task * t_count * 4
    var ws_at = ws_take(ws_addr, ws_bytes, need)
    var own = ws_at == 0
    var ws = U32Ptr(unsafe_from_address=ws_at) if not own else unsafe_alloc[UInt32](
        per_task * t_count, alignment=64
    ).unsafe_origin_cast[MutAnyOrigin]()

    def work(t: Int) {imm g, imm t_count, imm split_n, imm ws, imm per_task}:
        var w = ws.unsafe_offset(t * per_task)
        var b = chunk_bounds(g.n, t_count, t, INR) if split_n else chunk_bounds(g.m, t_count, t, IMR)
        var i_lo = 0 if split_n else b[0]
        var i_hi = g.m if split_n else b[1]
        var j_lo = b[0] if split_n else 0
        var j_hi = b[1] if split_n else g.n
        comptime if CompilationTarget.has_intel_amx():
            amx_block(g, i_lo, i_hi, j_lo, j_hi, w)
        elif not CompilationTarget.has_avx512f():
            avx2_block(g, i_lo, i_hi, j_lo, j_hi, w)
        else:
            int_block(g, i_lo, i_hi, j_lo, j_hi, w)

    run_tasks(work, t_count)
    if own:
        ws.unsafe_free()
    _sabotage(g)
    return ws_request(need)


def gemm_int8(args: PythonObject) raises -> PythonObject:
    """Arguments: (a codes, a exps, b codes, b exps, c, m, n, k, tasks, sabotage, ws, ws bytes)."""
    var g = IntArgs(
        _arg(args, 0), 0, _arg(args, 1), _arg(args, 2), 0, _arg(args, 3), _arg(args, 4),
        _arg(args, 5), _arg(args, 6), _arg(args, 7), False, _arg(args, 9) != 0, 0, False, False, cache_plan(),
    )
    return PythonObject(_int_call(g, max(1, _arg(args, 8)), _arg(args, 10), _arg(args, 11)))


def gemm_int15(args: PythonObject) raises -> PythonObject:
    """Arguments: (a hi, a lo, a exps, b hi, b lo, b exps, c, m, n, k, tasks, sabotage, ws, ws bytes)."""
    var g = IntArgs(
        _arg(args, 0), _arg(args, 1), _arg(args, 2), _arg(args, 3), _arg(args, 4),
        _arg(args, 5), _arg(args, 6), _arg(args, 7), _arg(args, 8), _arg(args, 9), True,
        _arg(args, 11) != 0, 0, False, False, cache_plan(),
    )
    return PythonObject(_int_call(g, max(1, _arg(args, 10)), _arg(args, 12), _arg(args, 13)))


# ---------------------------------------------------------------- prepared integer weights
def _int_packed_words(n: Int, k: Int, int15: Bool) -> Int:
    comptime if CompilationTarget.has_intel_amx():
        return amx_packed_words(n, k, int15)
    elif not CompilationTarget.has_avx512f():
        return avx2_packed_words(n, k, int15)
    else:
        return vnni_packed_words(n, k, int15)


def gemm_int_pack_words(args: PythonObject) raises -> PythonObject:
    """Arguments: (n, k, int15). The 32-bit words gemm_int_pack writes for a B of n
    rows of k codes on this build (its integer kernel's own layout)."""
    return PythonObject(_int_packed_words(_arg(args, 0), _arg(args, 1), _arg(args, 2) != 0))


def gemm_int_pack(args: PythonObject) raises -> PythonObject:
    """Arguments: (b_hi, b_lo, n, k, int15, dst, tasks). B's codes ((n, k) int8 planes;
    b_lo unused for int8) packed once over all n into dst (gemm_int_pack_words words,
    64-byte aligned), as the integer kernel of this build packs each column chunk."""
    var b_hi = _arg(args, 0)
    var b_lo = _arg(args, 1)
    var n = _arg(args, 2)
    var k = _arg(args, 3)
    var int15 = _arg(args, 4) != 0
    var dst = U32Ptr(unsafe_from_address=_arg(args, 5))
    var units = (n + 31) // 32
    var tasks = max(1, min(_arg(args, 6), units))

    def work(t: Int) {imm b_hi, imm b_lo, imm n, imm k, imm int15, imm dst, imm tasks}:
        var b = chunk_bounds(n, tasks, t, 32)
        if b[1] <= b[0]:
            return
        comptime if CompilationTarget.has_intel_amx():
            amx_pack_all(b_hi, b_lo, n, k, int15, b[0], b[1], dst)
        elif not CompilationTarget.has_avx512f():
            avx2_pack_all(b_hi, b_lo, n, k, int15, b[0], b[1], dst)
        else:
            vnni_pack_all(b_hi, b_lo, n, k, int15, b[0], b[1], dst)

    if n > 0 and k > 0:
        run_tasks(work, tasks)
    return PythonObject(None)


def gemm_int8_packed(args: PythonObject) raises -> PythonObject:
    """Arguments: (a codes, a exps, b codes, b exps, b packed, c, m, n, k, tasks,
    sabotage, ws, ws bytes). As gemm_int8, B's codes also prepared by gemm_int_pack
    (the decode rows read the codes as stored)."""
    var g = IntArgs(
        _arg(args, 0), 0, _arg(args, 1), _arg(args, 2), 0, _arg(args, 3), _arg(args, 5),
        _arg(args, 6), _arg(args, 7), _arg(args, 8), False, _arg(args, 10) != 0, _arg(args, 4), False, False, cache_plan(),
    )
    return PythonObject(_int_call(g, max(1, _arg(args, 9)), _arg(args, 11), _arg(args, 12)))


def gemm_int15_packed(args: PythonObject) raises -> PythonObject:
    """Arguments: (a hi, a lo, a exps, b hi, b lo, b exps, b packed, c, m, n, k, tasks,
    sabotage, ws, ws bytes). As gemm_int15, B's planes also prepared by gemm_int_pack."""
    var g = IntArgs(
        _arg(args, 0), _arg(args, 1), _arg(args, 2), _arg(args, 3), _arg(args, 4),
        _arg(args, 5), _arg(args, 7), _arg(args, 8), _arg(args, 9), _arg(args, 10), True,
        _arg(args, 12) != 0, _arg(args, 6), False, False, cache_plan(),
    )
    return PythonObject(_int_call(g, max(1, _arg(args, 11)), _arg(args, 13), _arg(args, 14)))


def fma_peak(args: PythonObject) raises -> PythonObject:
    """Arguments: (iters, tasks, x bits, y bits, out f32 addr). Each of `tasks` tasks
    runs gemm/cpu/peak.mojo's fma_rounds(iters, x, y) (x, y: the float32 of these bit
    patterns) and writes its checksum to out[t]; the caller times the call."""
    var iters = _arg(args, 0)
    var tasks = max(1, _arg(args, 1))
    var x = _bits_f32(_arg(args, 2))
    var y = _bits_f32(_arg(args, 3))
    var out = F32Ptr(unsafe_from_address=_arg(args, 4))

    def work(t: Int) {imm iters, imm x, imm y, imm out}:
        out.unsafe_store(t, fma_rounds(iters, x, y))

    run_tasks(work, tasks)
    return PythonObject(None)


@always_inline
def _bits_f32(v: Int) -> Float32:
    """The float32 whose bit pattern is the low 32 bits of v."""
    return bitcast[DType.float32, 1](SIMD[DType.uint32, 1](UInt32(v & 0xFFFFFFFF)))[0]


def register_gemm(mut m: PythonModuleBuilder) raises:
    m.def_function[fma_peak]("fma_peak")
    m.def_function[gemm_f32]("gemm_f32")
    m.def_function[gemm_int8]("gemm_int8")
    m.def_function[gemm_int15]("gemm_int15")
    m.def_function[gemm_int_pack_words]("gemm_int_pack_words")
    m.def_function[gemm_int_pack]("gemm_int_pack")
    m.def_function[gemm_int8_packed]("gemm_int8_packed")
    m.def_function[gemm_int15_packed]("gemm_int15_packed")

"""Registration of the training primitives' entries (plain integer arguments from the
Python layer, which has validated them: shapes, dtypes, ids and targets in range,
finite inputs). Each entry releases the GIL, splits its independent units over tasks
and runs every task under the contract floating-point state (common.tasks.run_tasks).
Lists of tensors arrive as the addresses of int64 arrays of addresses and sizes."""
from std.python import PythonObject
from std.python.bindings import PythonModuleBuilder
from std.memory.alloc import unsafe_alloc
from common.ptr import F32Ptr, I64Ptr, I32Ptr, ptr_f32, ptr_i64, ptr_i32
from common.tasks import chunk_bounds, run_tasks
from common.fpstate import enter_contract_mode, leave_contract_mode
from arith.fp import ftz, daz_in
from arith.elementary import sqrt_rn
from train.cpu.ops import (
    W, F1, MAX_LEAVES, f32_of, bits_of, leaf_partials, tree_buf, reduce_contig, fold_cols_range,
    rms_backward_rows, gather_flush_rows, embedding_backward_cols, ce_rows, scale_range,
    tree_sum_range, AdamScalars, adam_range, SgdScalars, sgd_range, first_nonfinite_range,
    neg_range, bias_backward_cols, transpose_rows, lm_head_rows, chain_cols_rows, lm_head_mean,
    LMH_ROWS_PER_PART,
)
from arith.tree import leaf_count


def _arg(args: PythonObject, i: Int) raises -> Int:
    return Int(py=args[i])


def _tasks(units: Int, tasks: Int, grain: Int) -> Int:
    return max(1, min(tasks, units, (units + grain - 1) // grain))


def _falloc(n: Int) -> F32Ptr:
    return unsafe_alloc[Float32](max(1, n), alignment=64).unsafe_origin_cast[MutAnyOrigin]()


def train_rms_norm_backward(args: PythonObject) raises -> PythonObject:
    """(dy, x, w, dx, dw, rows, d, eps_bits, tasks): T-9, T-10 (dx (rows, d)) and T-11
    (dw (d,) = fold(k = rows) per column)."""
    var dy = ptr_f32(_arg(args, 0))
    var x = ptr_f32(_arg(args, 1))
    var w = ptr_f32(_arg(args, 2))
    var dx = ptr_f32(_arg(args, 3))
    var dw = ptr_f32(_arg(args, 4))
    var rows = _arg(args, 5)
    var d = _arg(args, 6)
    var eps = f32_of(_arg(args, 7))
    var tasks = _arg(args, 8)
    var rstd = _falloc(rows)
    var tr = _tasks((rows + W - 1) // W, tasks, max(1, 4096 // max(1, d * W)))
    def rowwork(t: Int) {imm dy, imm x, imm w, imm dx, imm rstd, imm rows, imm d, imm eps, imm tr}:
        var b = chunk_bounds(rows, tr, t, W)
        rms_backward_rows(dy, x, w, dx, rstd, d, eps, b[0], b[1])

    run_tasks(rowwork, tr)
    var nb = (d + W - 1) // W
    var tc = _tasks(nb, tasks, max(1, 4096 // max(1, rows * W)))
    def colwork(t: Int) {imm dy, imm x, imm dw, imm rstd, imm rows, imm d, imm nb, imm tc}:
        var b = chunk_bounds(nb, tc, t, 1)
        var buf = _falloc(MAX_LEAVES * W)
        fold_cols_range[True](x, d, dy, rstd, dw, rows, d, b[0], b[1], buf)
        buf.unsafe_free()

    run_tasks(colwork, tc)
    rstd.unsafe_free()
    return PythonObject(None)


def train_fold_rows(args: PythonObject) raises -> PythonObject:
    """(x, out, rows, n, tasks): out[c] = fold(k = rows) of column c of x (rows, n) (T-2)."""
    var x = ptr_f32(_arg(args, 0))
    var out = ptr_f32(_arg(args, 1))
    var rows = _arg(args, 2)
    var n = _arg(args, 3)
    var nb = (n + W - 1) // W
    var tc = _tasks(nb, _arg(args, 4), max(1, 4096 // max(1, rows * W)))
    def work(t: Int) {imm x, imm out, imm rows, imm n, imm nb, imm tc}:
        var b = chunk_bounds(nb, tc, t, 1)
        var buf = _falloc(MAX_LEAVES * W)
        fold_cols_range[False](x, n, x, x, out, rows, n, b[0], b[1], buf)
        buf.unsafe_free()

    run_tasks(work, tc)
    return PythonObject(None)


def train_gather(args: PythonObject) raises -> PythonObject:
    """(table, ids_i64, out, rows, d, tasks): T-12, out[r] = ftz(table[ids[r]])."""
    var table = ptr_f32(_arg(args, 0))
    var ids = ptr_i64(_arg(args, 1))
    var out = ptr_f32(_arg(args, 2))
    var rows = _arg(args, 3)
    var d = _arg(args, 4)
    var tc = _tasks(rows, _arg(args, 5), max(1, 16384 // max(1, d)))
    def work(t: Int) {imm table, imm ids, imm out, imm rows, imm d, imm tc}:
        var b = chunk_bounds(rows, tc, t, 1)
        gather_flush_rows(table, ids, out, d, b[0], b[1])

    run_tasks(work, tc)
    return PythonObject(None)


def train_embedding_backward(args: PythonObject) raises -> PythonObject:
    """(dy, ids_i64, acc, tokens, d, tasks): T-13 into acc (V, d) in place, t ascending,
    the columns split over tasks (never the tokens)."""
    var dy = ptr_f32(_arg(args, 0))
    var ids = ptr_i64(_arg(args, 1))
    var acc = ptr_f32(_arg(args, 2))
    var tokens = _arg(args, 3)
    var d = _arg(args, 4)
    var nb = (d + W - 1) // W
    var tc = _tasks(nb, _arg(args, 5), max(1, 8192 // max(1, tokens * W)))
    def work(t: Int) {imm dy, imm ids, imm acc, imm tokens, imm d, imm nb, imm tc}:
        var b = chunk_bounds(nb, tc, t, 1)
        embedding_backward_cols(dy, ids, acc, tokens, d, b[0], b[1])

    run_tasks(work, tc)
    return PythonObject(None)


def train_ce_rows(args: PythonObject) raises -> PythonObject:
    """(logits, targets_i64, rows_out, grad_out, n, v, ignore_index, smoothing_bits, d_bits,
    tasks): T-14 .. T-16 row losses (ignored rows +0) and, when grad_out != 0, T-18's
    gradient divided by D (ignored rows +0)."""
    var logits = ptr_f32(_arg(args, 0))
    var targets = ptr_i64(_arg(args, 1))
    var rows_out = ptr_f32(_arg(args, 2))
    var gaddr = _arg(args, 3)
    var n = _arg(args, 4)
    var V = _arg(args, 5)
    var ignore = _arg(args, 6)
    var eps = f32_of(_arg(args, 7))
    var D = f32_of(_arg(args, 8))
    var has_grad = gaddr != 0
    var grad = ptr_f32(gaddr if has_grad else _arg(args, 2))
    var tc = _tasks(n, _arg(args, 9), max(1, 8192 // max(1, V)))
    def work(t: Int) {imm logits, imm targets, imm rows_out, imm grad, imm has_grad, imm n, imm V, imm ignore, imm eps, imm D, imm tc}:
        var b = chunk_bounds(n, tc, t, 1)
        var e = _falloc(2 * V)
        var buf = _falloc(MAX_LEAVES)
        ce_rows(logits, targets, rows_out, grad, has_grad, V, ignore, eps, D, b[0], b[1], e, buf)
        e.unsafe_free()
        buf.unsafe_free()

    run_tasks(work, tc)
    return PythonObject(None)


def train_scalar(args: PythonObject) raises -> PythonObject:
    """(op, a_bits, b_bits): one float32 operation on flushed operands, its result flushed,
    as bits: op 0 div(a, b) (T-17's loss), 1 add, 2 sub, 3 mul."""
    var op = _arg(args, 0)
    var a = daz_in(F1(f32_of(_arg(args, 1))))
    var b = daz_in(F1(f32_of(_arg(args, 2))))
    var old = enter_contract_mode()
    var r = F1(0)
    if op == 0:
        r = ftz(a / b)
    elif op == 1:
        r = ftz(a + b)
    elif op == 2:
        r = ftz(a - b)
    elif op == 3:
        r = ftz(a * b)
    leave_contract_mode(old)
    if op < 0 or op > 3:
        raise Error(String("mojolearn: train_scalar: op ", op, " is not 0 .. 3"))
    return PythonObject(bits_of(r[0]))


def train_clip(args: PythonObject) raises -> PythonObject:
    """(addrs_i64, sizes_i64, count, norms_out, max_norm_bits, tasks): T-23 per-tensor norms
    into norms_out[0 .. count) and the total into norms_out[count]; when the total is
    finite, T-24's coefficient and T-25's rescale of every tensor in place, returning the
    coefficient's bits; -1 (nothing rescaled) when the total is not finite."""
    var addrs = ptr_i64(_arg(args, 0))
    var sizes = ptr_i64(_arg(args, 1))
    var count = _arg(args, 2)
    var norms = ptr_f32(_arg(args, 3))
    var max_norm = f32_of(_arg(args, 4))
    var tasks = _arg(args, 5)
    # leaf partials of every tensor: offsets into one buffer
    var loff = List[Int](length=count + 1, fill=0)
    for j in range(count):
        loff[j + 1] = loff[j] + leaf_count(Int(sizes.unsafe_load(j)))
    var nleaf = loff[count]
    var parts = _falloc(nleaf + MAX_LEAVES)
    var loffp = unsafe_alloc[Int](count + 1).unsafe_origin_cast[MutAnyOrigin]()
    for j in range(count + 1):
        loffp.unsafe_store(j, loff[j])
    # units: groups of 4 * W leaves of one tensor
    comptime G = 4 * W
    var ucount = List[Int](length=count + 1, fill=0)
    for j in range(count):
        ucount[j + 1] = ucount[j] + (loff[j + 1] - loff[j] + G - 1) // G
    var units = ucount[count]
    var up = unsafe_alloc[Int](count + 1).unsafe_origin_cast[MutAnyOrigin]()
    for j in range(count + 1):
        up.unsafe_store(j, ucount[j])
    var tc = _tasks(units, tasks, 1)
    def work(t: Int) {imm addrs, imm sizes, imm count, imm parts, imm loffp, imm up, imm units, imm tc}:
        var b = chunk_bounds(units, tc, t, 1)
        var j = 0
        for u in range(b[0], b[1]):
            while up.unsafe_load(j + 1) <= u:
                j += 1
            var k = Int(sizes.unsafe_load(j))
            var nl = loffp.unsafe_load(j + 1) - loffp.unsafe_load(j)
            var l0 = (u - up.unsafe_load(j)) * G
            var l1 = min(nl, l0 + G)
            leaf_partials[True](ptr_f32(Int(addrs.unsafe_load(j))), k, l0, l1,
                                parts.unsafe_offset(loffp.unsafe_load(j)))

    if units > 0:
        run_tasks(work, tc)
    var old = enter_contract_mode()
    for j in range(count):
        var s = tree_buf[1](parts.unsafe_offset(loff[j]), loff[j + 1] - loff[j])
        norms.unsafe_store(j, sqrt_rn(s)[0])
    var scratch = _falloc(MAX_LEAVES)
    var total = sqrt_rn(reduce_contig[True](norms, count, scratch))
    scratch.unsafe_free()
    parts.unsafe_free()
    loffp.unsafe_free()
    up.unsafe_free()
    norms.unsafe_store(count, total[0])
    var tb = bits_of(total[0])
    if tb & 0x7F800000 == 0x7F800000:
        leave_contract_mode(old)
        return PythonObject(-1)
    var coef = ftz(daz_in(F1(max_norm)) / ftz(total + F1(Float32(1e-6))))
    if not (coef[0] < 1):
        coef = F1(1)
    var c = coef[0]
    leave_contract_mode(old)
    # the rescale, split over element ranges of the concatenation
    var offs = unsafe_alloc[Int](count + 1).unsafe_origin_cast[MutAnyOrigin]()
    offs.unsafe_store(0, 0)
    for j in range(count):
        offs.unsafe_store(j + 1, offs.unsafe_load(j) + Int(sizes.unsafe_load(j)))
    var ntot = offs.unsafe_load(count)
    var ts = _tasks(ntot, tasks, 1 << 16)
    def scale(t: Int) {imm addrs, imm offs, imm count, imm ntot, imm ts, imm c}:
        var b = chunk_bounds(ntot, ts, t, 64)
        for j in range(count):
            var s = max(b[0], offs.unsafe_load(j))
            var e = min(b[1], offs.unsafe_load(j + 1))
            if s < e:
                scale_range(ptr_f32(Int(addrs.unsafe_load(j))).unsafe_offset(s - offs.unsafe_load(j)), e - s, c)

    if ntot > 0:
        run_tasks(scale, ts)
    offs.unsafe_free()
    return PythonObject(bits_of(c))


def train_tree_sum(args: PythonObject) raises -> PythonObject:
    """(addrs_i64, count, out, n, tasks): T-26, out = the balanced pairwise tree over count
    (a power of two) arrays of n floats; count = 1 gives ftz(g0)."""
    var addrs = ptr_i64(_arg(args, 0))
    var count = _arg(args, 1)
    var out = ptr_f32(_arg(args, 2))
    var n = _arg(args, 3)
    var tc = _tasks(n, _arg(args, 4), 1 << 15)
    def work(t: Int) {imm addrs, imm count, imm out, imm n, imm tc}:
        var b = chunk_bounds(n, tc, t, 64 * W)
        var buf = _falloc(count * W)
        tree_sum_range(addrs, count, out, b[0], b[1], buf)
        buf.unsafe_free()

    run_tasks(work, tc)
    return PythonObject(None)


def train_adam(args: PythonObject) raises -> PythonObject:
    """(p_addrs, g_addrs, sizes, count, m_flat, v_flat, t, lr_bits, b1_bits, b2_bits,
    eps_bits, wd_bits, decoupled, maximize, tasks): one Adam (decoupled 0) or AdamW
    (decoupled 1) step (T-29 (4), (5); T-30 .. T-32, T-34) of count tensors in place;
    m, v the flat states over the tensors in list order."""
    var pa = ptr_i64(_arg(args, 0))
    var ga = ptr_i64(_arg(args, 1))
    var sizes = ptr_i64(_arg(args, 2))
    var count = _arg(args, 3)
    var mf = ptr_f32(_arg(args, 4))
    var vf = ptr_f32(_arg(args, 5))
    var old = enter_contract_mode()
    var s = AdamScalars(_arg(args, 6), f32_of(_arg(args, 7)), f32_of(_arg(args, 8)),
                        f32_of(_arg(args, 9)), f32_of(_arg(args, 10)), f32_of(_arg(args, 11)),
                        _arg(args, 12) != 0, _arg(args, 13) != 0)
    leave_contract_mode(old)
    var offs = unsafe_alloc[Int](count + 1).unsafe_origin_cast[MutAnyOrigin]()
    offs.unsafe_store(0, 0)
    for j in range(count):
        offs.unsafe_store(j + 1, offs.unsafe_load(j) + Int(sizes.unsafe_load(j)))
    var ntot = offs.unsafe_load(count)
    var tc = _tasks(ntot, _arg(args, 14), 1 << 15)
    def work(t: Int) {imm pa, imm ga, imm mf, imm vf, imm s, imm offs, imm count, imm ntot, imm tc}:
        var b = chunk_bounds(ntot, tc, t, 64)
        for j in range(count):
            var o = offs.unsafe_load(j)
            var st = max(b[0], o)
            var en = min(b[1], offs.unsafe_load(j + 1))
            if st < en:
                adam_range(ptr_f32(Int(pa.unsafe_load(j))).unsafe_offset(st - o),
                           ptr_f32(Int(ga.unsafe_load(j))).unsafe_offset(st - o),
                           mf.unsafe_offset(st), vf.unsafe_offset(st), en - st, s)

    if ntot > 0:
        run_tasks(work, tc)
    offs.unsafe_free()
    return PythonObject(None)


def train_sgd(args: PythonObject) raises -> PythonObject:
    """(p_addrs, g_addrs, sizes, count, buf_flat, flags_i32, lr_bits, momentum_bits,
    dampening_bits, wd_bits, nesterov, maximize, tasks): one SGD step (T-33, T-34) of count
    tensors in place; buf the flat momentum over the tensors in list order; a tensor whose
    flag is 0 takes its first momentum step (b = g); the caller sets the flags after."""
    var pa = ptr_i64(_arg(args, 0))
    var ga = ptr_i64(_arg(args, 1))
    var sizes = ptr_i64(_arg(args, 2))
    var count = _arg(args, 3)
    var bf = ptr_f32(_arg(args, 4))
    var flags = ptr_i32(_arg(args, 5))
    var old = enter_contract_mode()
    var s = SgdScalars(f32_of(_arg(args, 6)), f32_of(_arg(args, 7)), f32_of(_arg(args, 8)),
                       f32_of(_arg(args, 9)), _arg(args, 10) != 0, _arg(args, 11) != 0)
    leave_contract_mode(old)
    var offs = unsafe_alloc[Int](count + 1).unsafe_origin_cast[MutAnyOrigin]()
    offs.unsafe_store(0, 0)
    for j in range(count):
        offs.unsafe_store(j + 1, offs.unsafe_load(j) + Int(sizes.unsafe_load(j)))
    var ntot = offs.unsafe_load(count)
    var tc = _tasks(ntot, _arg(args, 12), 1 << 15)
    def work(t: Int) {imm pa, imm ga, imm bf, imm flags, imm s, imm offs, imm count, imm ntot, imm tc}:
        var b = chunk_bounds(ntot, tc, t, 64)
        for j in range(count):
            var o = offs.unsafe_load(j)
            var st = max(b[0], o)
            var en = min(b[1], offs.unsafe_load(j + 1))
            if st < en:
                sgd_range(ptr_f32(Int(pa.unsafe_load(j))).unsafe_offset(st - o),
                          ptr_f32(Int(ga.unsafe_load(j))).unsafe_offset(st - o),
                          bf.unsafe_offset(st), en - st, flags.unsafe_load(j) == 0, s)

    if ntot > 0:
        run_tasks(work, tc)
    offs.unsafe_free()
    return PythonObject(None)


def train_first_nonfinite(args: PythonObject) raises -> PythonObject:
    """(x, n, tasks): the flat index of the first NaN or +-inf of x (n floats), or -1."""
    var x = ptr_f32(_arg(args, 0))
    var n = _arg(args, 1)
    var tc = _tasks(n, _arg(args, 2), 1 << 16)
    var res = unsafe_alloc[Int](tc).unsafe_origin_cast[MutAnyOrigin]()
    def work(t: Int) {imm x, imm n, imm tc, imm res}:
        var b = chunk_bounds(n, tc, t, 64)
        res.unsafe_store(t, first_nonfinite_range(x, b[0], b[1]))

    if n > 0:
        run_tasks(work, tc)
    var first = -1
    if n > 0:
        for t in range(tc):
            var r = res.unsafe_load(t)
            if r >= 0:
                first = r
                break
    res.unsafe_free()
    return PythonObject(first)


def train_neg(args: PythonObject) raises -> PythonObject:
    """(x, out, n, tasks): out = x with every sign bit flipped (T-1's neg, exact)."""
    var x = ptr_f32(_arg(args, 0))
    var out = ptr_f32(_arg(args, 1))
    var n = _arg(args, 2)
    var tc = _tasks(n, _arg(args, 3), 1 << 16)
    def work(t: Int) {imm x, imm out, imm n, imm tc}:
        var b = chunk_bounds(n, tc, t, 64)
        neg_range(x, out, b[0], b[1])

    if n > 0:
        run_tasks(work, tc)
    return PythonObject(None)


def train_bias_backward(args: PythonObject) raises -> PythonObject:
    """(dy, out, rows, n, tasks): T-7, out[c] = the chain over rows ascending from +0 of
    add(acc, dy[r, c]) (dy (rows, n)), the columns split over tasks (never the rows)."""
    var dy = ptr_f32(_arg(args, 0))
    var out = ptr_f32(_arg(args, 1))
    var rows = _arg(args, 2)
    var n = _arg(args, 3)
    var nb = (n + W - 1) // W
    var tc = _tasks(nb, _arg(args, 4), max(1, 8192 // max(1, rows * W)))
    def work(t: Int) {imm dy, imm out, imm rows, imm n, imm nb, imm tc}:
        var b = chunk_bounds(nb, tc, t, 1)
        bias_backward_cols(dy, out, rows, n, b[0], b[1])

    if nb > 0:
        run_tasks(work, tc)
    return PythonObject(None)


def train_lm_head(args: PythonObject) raises -> PythonObject:
    """(h, w, targets_i64, dh, dw, rows, width, v, tasks): the chunked LM-head loss
    (T-19 .. T-21) of h (rows, width), W (v, width) and targets (rows,) in [0, v); returns
    the bits of T-20's mean loss. When dh != 0, dh (rows, width) and dw (v, width) get
    T-21's gradients (chains over v and over rows). rows >= 1, v >= 2 (checked by the
    caller)."""
    var h = ptr_f32(_arg(args, 0))
    var w = ptr_f32(_arg(args, 1))
    var targets = ptr_i64(_arg(args, 2))
    var dha = _arg(args, 3)
    var dwa = _arg(args, 4)
    var rows = _arg(args, 5)
    var width = _arg(args, 6)
    var V = _arg(args, 7)
    var tasks = _arg(args, 8)
    var has_grad = dha != 0
    var wt = _falloc(width * V)
    var rows_out = _falloc(rows)
    var dl = _falloc(rows * V if has_grad else 1)
    # W transposed (width, V): vocab rows in the lanes of T-19's chains (a copy)
    var tt = _tasks(V, tasks, max(1, 16384 // max(1, width)))
    def twork(t: Int) {imm w, imm wt, imm V, imm width, imm tt}:
        var b = chunk_bounds(V, tt, t, 1)
        transpose_rows(w, wt, V, width, b[0], b[1])

    if width > 0:
        run_tasks(twork, tt)
    var tr = _tasks(rows, tasks, max(1, 4096 // max(1, V * max(1, width))))
    def rwork(t: Int) {imm h, imm wt, imm targets, imm rows_out, imm dl, imm has_grad, imm rows, imm V, imm width, imm tr}:
        var b = chunk_bounds(rows, tr, t, 1)
        var z = _falloc(V)
        lm_head_rows(h, wt, targets, rows_out, dl, has_grad, rows, V, width, b[0], b[1], z)
        z.unsafe_free()

    run_tasks(rwork, tr)
    wt.unsafe_free()
    if has_grad and width > 0:
        var dh = ptr_f32(dha)
        var dw = ptr_f32(dwa)
        # dH[r, f]: the chain over v ascending of fma(dl[r, v], W[v, f], acc)
        def hwork(t: Int) {imm dl, imm w, imm dh, imm rows, imm V, imm width, imm tr}:
            var b = chunk_bounds(rows, tr, t, 1)
            chain_cols_rows(dl, 1, V, w, V, width, dh, b[0], b[1])

        run_tasks(hwork, tr)
        # dW[v, f]: the chain over rows ascending of fma(dl[r, v], h[r, f], acc)
        var tv = _tasks(V, tasks, max(1, 4096 // max(1, rows * width)))
        def wwork(t: Int) {imm dl, imm h, imm dw, imm rows, imm V, imm width, imm tv}:
            var b = chunk_bounds(V, tv, t, 1)
            chain_cols_rows(dl, V, 1, h, rows, width, dw, b[0], b[1])

        run_tasks(wwork, tv)
    dl.unsafe_free()
    var old = enter_contract_mode()
    var buf = _falloc((rows + LMH_ROWS_PER_PART - 1) // LMH_ROWS_PER_PART)
    var loss = lm_head_mean(rows_out, rows, buf)
    leave_contract_mode(old)
    buf.unsafe_free()
    rows_out.unsafe_free()
    return PythonObject(bits_of(loss[0]))


def register_train(mut m: PythonModuleBuilder) raises:
    m.def_function[train_rms_norm_backward]("train_rms_norm_backward")
    m.def_function[train_fold_rows]("train_fold_rows")
    m.def_function[train_gather]("train_gather")
    m.def_function[train_embedding_backward]("train_embedding_backward")
    m.def_function[train_ce_rows]("train_ce_rows")
    m.def_function[train_scalar]("train_scalar")
    m.def_function[train_clip]("train_clip")
    m.def_function[train_tree_sum]("train_tree_sum")
    m.def_function[train_adam]("train_adam")
    m.def_function[train_sgd]("train_sgd")
    m.def_function[train_first_nonfinite]("train_first_nonfinite")
    m.def_function[train_neg]("train_neg")
    m.def_function[train_bias_backward]("train_bias_backward")
    m.def_function[train_lm_head]("train_lm_head")

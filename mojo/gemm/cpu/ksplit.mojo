"""The k-split of a product over several workers (contract rules 6.7 and L-8): the
pieces a partial product is made of, and the folds that join them.

fp32.v1 (rule 6.7). A run of whole leaves that is a node of the leaf tree (an aligned
block of 2**s leaves, or the last, shorter block of a level) has a value that the
one-call product computes on its way to the root. Such a node is computed by the
ordinary fp32.v1 kernels on the node's columns of k with the leaf size of the WHOLE
product (gemm_f32 / gemm_f32_packed take it as a negative mode: fp32_v1.mode_leaf),
so the pairwise tree those kernels fold over the node's leaves is the node's own
subtree. The fold of pieces is tree_add (rule 6.4) in the tree's order, which the
Python layer walks (mojolearn._ksplit) calling f32_tree_add below on whole arrays.

int8i32.v1 / int15i64.v1 (rule L-8). The sum S of code products is exact, so any split
of k gives the one-call S once the pieces' sums are added (in int64, exact): int_sums
computes a piece's exact S, int_sums_add adds two pieces, int_epilogue applies the
contract's ftz(f32(S) * pow2f(ea[i] + eb[j])) once to the total.
"""
from std.python import PythonObject
from std.python.bindings import PythonModuleBuilder
from std.sys import simd_width_of
from std.collections import Array
from common.ptr import F32Ptr, I8Ptr, I32Ptr, I64Ptr, ptr_f32, ptr_i8, ptr_i32, ptr_i64
from common.tasks import chunk_bounds, run_tasks
from arith.tree import tree_add
from arith.fp import pow2f
from arith.quant import scale_pow2, join15_products
from gemm.cpu.fp32_v1 import mode_leaf

comptime W = simd_width_of[DType.int32]()
comptime JB = 4  # columns of B a row of A meets per pass (register blocking)


def _arg(args: PythonObject, i: Int) raises -> Int:
    return Int(py=args[i])


def f32_leaf(args: PythonObject) raises -> PythonObject:
    """Arguments: (k, mode). The leaf a product over k runs under the numeric mode
    (0 identical: rule 6.2's leaf_size(k); 1, 2: the looser modes' leaf)."""
    return PythonObject(mode_leaf(_arg(args, 1), _arg(args, 0)))


def f32_tree_add(args: PythonObject) raises -> PythonObject:
    """Arguments: (x f32, y f32, out f32, count, tasks). out = ftz(x + y) element by
    element (rule 6.4's tree sum; out may be x or y)."""
    var x = ptr_f32(_arg(args, 0))
    var y = ptr_f32(_arg(args, 1))
    var dst = ptr_f32(_arg(args, 2))
    var n = _arg(args, 3)
    var tasks = max(1, min(_arg(args, 4), (n + 65535) // 65536))
    comptime FW = simd_width_of[DType.float32]()

    def work(t: Int) {imm x, imm y, imm dst, imm n, imm tasks}:
        var b = chunk_bounds(n, tasks, t, 64)
        var i = b[0]
        while i + FW <= b[1]:
            dst.unsafe_store(i, tree_add[FW](x.unsafe_load[width=FW](i), y.unsafe_load[width=FW](i)))
            i += FW
        while i < b[1]:
            dst.unsafe_store(i, tree_add[1](x.unsafe_load[width=1](i), y.unsafe_load[width=1](i)))
            i += 1

    run_tasks(work, tasks)
    return PythonObject(None)


@always_inline
def _dot_block[int15: Bool](
    ahi: I8Ptr, alo: I8Ptr, bhi: I8Ptr, blo: I8Ptr, k: Int, i: Int, j0: Int, nb: Int, dst: I64Ptr, n: Int
):
    """S[i, j0 .. j0 + nb) for nb <= JB: the exact sums of code products over k.
    int8: each lane sums at most k / W products below 2**14 in int32 (k <= 131072,
    L-7: exact). int15: the four plane products (H = hi, L = lo) summed apart, each in
    int32 (|product| <= 2**14, k <= 65536, W-4: exact), joined in int64 as
    2**14 HH + 2**7 (HL + LH) + LL (join15_products)."""
    var acc_hh = Array[SIMD[DType.int32, W], JB](fill=SIMD[DType.int32, W](0))
    var acc_hl = Array[SIMD[DType.int32, W], JB](fill=SIMD[DType.int32, W](0))
    var acc_lh = Array[SIMD[DType.int32, W], JB](fill=SIMD[DType.int32, W](0))
    var acc_ll = Array[SIMD[DType.int32, W], JB](fill=SIMD[DType.int32, W](0))
    var arow = i * k
    var kk = 0
    while kk + W <= k:
        var ah = ahi.unsafe_load[width=W](arow + kk).cast[DType.int32]()
        var al = SIMD[DType.int32, W](0)
        comptime if int15:
            al = alo.unsafe_load[width=W](arow + kk).cast[DType.int32]()
        for c in range(nb):
            var brow = (j0 + c) * k + kk
            var bh = bhi.unsafe_load[width=W](brow).cast[DType.int32]()
            acc_hh[c] = acc_hh[c] + ah * bh
            comptime if int15:
                var bl = blo.unsafe_load[width=W](brow).cast[DType.int32]()
                acc_hl[c] = acc_hl[c] + ah * bl
                acc_lh[c] = acc_lh[c] + al * bh
                acc_ll[c] = acc_ll[c] + al * bl
        kk += W
    for c in range(nb):
        var s_hh = Int64(acc_hh[c].cast[DType.int64]().reduce_add())
        var s_hl = Int64(acc_hl[c].cast[DType.int64]().reduce_add())
        var s_lh = Int64(acc_lh[c].cast[DType.int64]().reduce_add())
        var s_ll = Int64(acc_ll[c].cast[DType.int64]().reduce_add())
        var brow0 = (j0 + c) * k
        for t in range(kk, k):
            var a1 = ahi.unsafe_load(arow + t).cast[DType.int64]()
            var b1 = bhi.unsafe_load(brow0 + t).cast[DType.int64]()
            s_hh += a1 * b1
            comptime if int15:
                var a0 = alo.unsafe_load(arow + t).cast[DType.int64]()
                var b0 = blo.unsafe_load(brow0 + t).cast[DType.int64]()
                s_hl += a1 * b0
                s_lh += a0 * b1
                s_ll += a0 * b0
        var s = s_hh
        comptime if int15:
            s = join15_products[1](SIMD[DType.int64, 1](s_hh), SIMD[DType.int64, 1](s_hl),
                                   SIMD[DType.int64, 1](s_lh), SIMD[DType.int64, 1](s_ll))[0]
        dst.unsafe_store(i * n + j0 + c, s)


def int_sums(args: PythonObject) raises -> PythonObject:
    """Arguments: (a_hi i8, a_lo i8, b_hi i8, b_lo i8, out i64, m, n, k, int15, tasks).
    out[i, j] = the exact integer sum over k of a_code[i, kk] * b_code[j, kk] (a (m, k),
    b (n, k): the NT layout of the integer GEMMs; int8: the codes in a_hi / b_hi, the
    lo pointers unused; int15: code = 128 * hi + lo, rule W-2)."""
    var ahi = ptr_i8(_arg(args, 0))
    var alo = ptr_i8(_arg(args, 1))
    var bhi = ptr_i8(_arg(args, 2))
    var blo = ptr_i8(_arg(args, 3))
    var dst = ptr_i64(_arg(args, 4))
    var m = _arg(args, 5)
    var n = _arg(args, 6)
    var k = _arg(args, 7)
    var int15 = _arg(args, 8) != 0
    var work_items = m * n * max(k, 1)
    var tasks = max(1, min(_arg(args, 9), max(m, (n + JB - 1) // JB), (work_items + 262143) // 262144))
    var by_rows = m >= tasks

    def work(t: Int) {imm ahi, imm alo, imm bhi, imm blo, imm dst, imm m, imm n, imm k, imm int15, imm tasks, imm by_rows}:
        var r = chunk_bounds(m, tasks, t, 1) if by_rows else (0, m)
        var c = (0, n) if by_rows else chunk_bounds(n, tasks, t, JB)
        for i in range(r[0], r[1]):
            var j = c[0]
            while j < c[1]:
                var nb = min(JB, c[1] - j)
                if int15:
                    _dot_block[True](ahi, alo, bhi, blo, k, i, j, nb, dst, n)
                else:
                    _dot_block[False](ahi, alo, bhi, blo, k, i, j, nb, dst, n)
                j += nb

    run_tasks(work, tasks)
    return PythonObject(None)


def int_sums_add(args: PythonObject) raises -> PythonObject:
    """Arguments: (x i64, y i64, out i64, count). out = x + y (exact: the pieces of one
    product's sum, whose total the contract's k limits keep far inside int64)."""
    var x = ptr_i64(_arg(args, 0))
    var y = ptr_i64(_arg(args, 1))
    var dst = ptr_i64(_arg(args, 2))
    var n = _arg(args, 3)

    def work(t: Int) {imm x, imm y, imm dst, imm n}:
        for i in range(n):
            dst.unsafe_store(i, x.unsafe_load(i) + y.unsafe_load(i))

    run_tasks(work, 1)
    return PythonObject(None)


def int_epilogue(args: PythonObject) raises -> PythonObject:
    """Arguments: (s i64, ea i32, eb i32, c f32, m, n, tasks). c[i, j] =
    ftz(f32(S[i, j]) * pow2f(ea[i] + eb[j])) (rules L-5, W-3): f32 rounds the exact sum
    to nearest even once; the exponent sum is taken in 64 bits (pow2f saturates)."""
    var s = ptr_i64(_arg(args, 0))
    var ea = ptr_i32(_arg(args, 1))
    var eb = ptr_i32(_arg(args, 2))
    var c = ptr_f32(_arg(args, 3))
    var m = _arg(args, 4)
    var n = _arg(args, 5)
    var tasks = max(1, min(_arg(args, 6), m, (m * n + 65535) // 65536))

    def work(t: Int) {imm s, imm ea, imm eb, imm c, imm m, imm n, imm tasks}:
        var r = chunk_bounds(m, tasks, t, 1)
        for i in range(r[0], r[1]):
            var e_i = Int(ea.unsafe_load(i))
            for j in range(n):
                var v = SIMD[DType.float32, 1](s.unsafe_load(i * n + j).cast[DType.float32]())
                var p2 = SIMD[DType.float32, 1](pow2f(e_i + Int(eb.unsafe_load(j))))
                c.unsafe_store(i * n + j, scale_pow2[1](v, p2)[0])

    run_tasks(work, tasks)
    return PythonObject(None)


def register_ksplit(mut m: PythonModuleBuilder) raises:
    m.def_function[f32_leaf]("f32_leaf")
    m.def_function[f32_tree_add]("f32_tree_add")
    m.def_function[int_sums]("int_sums")
    m.def_function[int_sums_add]("int_sums_add")
    m.def_function[int_epilogue]("int_epilogue")

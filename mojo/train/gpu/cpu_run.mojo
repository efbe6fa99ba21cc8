"""The CPU run of the training GPU bodies (for the tests): the same bodies the device
kernels call (threads.mojo), looped over the same coordinates in the same phases as
the kernels (kernels.mojo), under IEEE mode (DAZ and FTZ off, as on a GPU), so their
bits can be checked against the CPU kernels on a machine without a GPU
(tests/test_gpu_train.py). Scratch the kernels keep in device memory (rstd rows, the
cross entropy's row statistics, the clip's leaf partials and offsets, the softmax
backward's c) is allocated here. The tuples follow the CPU entries' (train_*), without
`tasks`.

ENTRIES (one tuple of ints each; Python has validated every argument)
    gpu_ref_train_rms_norm_backward((dy, x, w, dx, dw, rows, d, eps_bits))
    gpu_ref_train_fold_rows((x, out, rows, n))
    gpu_ref_train_rmsnorm_terms((dy, x, out, rows, d, eps_bits))
    gpu_ref_train_embedding_backward((dy, ids_i64, acc, tokens, vocab, d))
    gpu_ref_train_ce_rows((logits, targets_i64, rows_out, grad_out, n, v, ignore_index,
                           smoothing_bits, d_bits))
    gpu_ref_train_clip((addrs_i64, sizes_i64, count, norms_out, max_norm_bits)) -> coef bits or -1
    gpu_ref_train_tree_sum((addrs_i64, count, out, n))
    gpu_ref_train_adam((p_addrs, g_addrs, sizes, count, m_flat, v_flat, t, lr_bits, b1_bits,
                        b2_bits, eps_bits, wd_bits, decoupled, maximize))
    gpu_ref_train_sgd((p_addrs, g_addrs, sizes, count, buf_flat, flags_i32, lr_bits,
                       momentum_bits, dampening_bits, wd_bits, nesterov, maximize))
    gpu_ref_train_softmax_bwd((p, dp, ds, rows, n, scale_bits))
    gpu_ref_train_silu_mul_bwd((gu, ldgu, dp, ldp, dgu, rows, ff))
    gpu_ref_train_attn_probs((q, ldq, kt, p, batch, length, n_heads, n_kv, head_dim))
    gpu_ref_train_fold_div((x, n, d_bits)) -> bits
    gpu_ref_train_fold_div_into((x, n, d_bits, dst)): the same into dst[0] (a program's op:
                           the loss stays in device memory until the driver reads it)
    gpu_ref_train_neg((x, out, n)): T-1's neg by elements
"""
from std.python import PythonObject
from std.python.bindings import PythonModuleBuilder
from std.memory import bitcast
from std.memory.alloc import unsafe_alloc
from common.ptr import F32Ptr, I64Ptr, ptr_f32, ptr_i64, ptr_i32
from common.fpstate import enter_ieee_mode, leave_ieee_mode
from arith.tree import leaf_count
from transformer.gpu.threads import attention_scale
from train.gpu.threads import (
    F1, adam_scalars, rms_rows_thread, rms_dw_thread, fold_col_thread, rmsnorm_terms_thread,
    embedding_bwd_thread, ce_row_thread, ce_grad_thread, clip_leaf_thread, clip_norm_thread,
    clip_total, clip_scale_thread, tree_sum_thread, adam_thread, sgd_thread,
    softmax_bwd_c_thread, softmax_bwd_thread, silu_mul_bwd_thread, attn_probs_thread,
    fold_div_thread, neg_thread, is_finite,
)


def _arg(args: PythonObject, i: Int) raises -> Int:
    return Int(py=args[i])


def _f32(bits: Int) -> Float32:
    return bitcast[DType.float32, 1](SIMD[DType.uint32, 1](UInt32(bits)))[0]


def _bits(x: Float32) -> Int:
    return Int(bitcast[DType.uint32, 1](F1(x))[0])


def _falloc(n: Int) -> F32Ptr:
    return unsafe_alloc[Float32](max(1, n), alignment=64).unsafe_origin_cast[MutAnyOrigin]()


def _ialloc(n: Int) -> I64Ptr:
    return unsafe_alloc[Int64](max(1, n), alignment=64).unsafe_origin_cast[MutAnyOrigin]()


def _offsets(sizes: I64Ptr, count: Int) -> I64Ptr:
    """Each tensor's first element in the concatenation (count + 1 entries)."""
    var offs = _ialloc(count + 1)
    offs.unsafe_store(0, 0)
    for j in range(count):
        offs.unsafe_store(j + 1, offs.unsafe_load(j) + sizes.unsafe_load(j))
    return offs


def gpu_ref_train_rms_norm_backward(args: PythonObject) raises -> PythonObject:
    """(dy, x, w, dx, dw, rows, d, eps_bits): T-9, T-10 by rows, then T-11 by columns."""
    var rows = _arg(args, 5)
    var d = _arg(args, 6)
    var rstd = _falloc(rows)
    var old = enter_ieee_mode()
    for r in range(rows):
        rms_rows_thread(ptr_f32(_arg(args, 0)), ptr_f32(_arg(args, 1)), ptr_f32(_arg(args, 2)),
                        ptr_f32(_arg(args, 3)), rstd, d, _f32(_arg(args, 7)), r)
    for c in range(d):
        rms_dw_thread(ptr_f32(_arg(args, 1)), ptr_f32(_arg(args, 0)), rstd, ptr_f32(_arg(args, 4)),
                      rows, d, c)
    leave_ieee_mode(old)
    rstd.unsafe_free()
    return PythonObject(None)


def gpu_ref_train_fold_rows(args: PythonObject) raises -> PythonObject:
    """(x, out, rows, n): T-2, one fold per column."""
    var old = enter_ieee_mode()
    for c in range(_arg(args, 3)):
        fold_col_thread(ptr_f32(_arg(args, 0)), ptr_f32(_arg(args, 1)), _arg(args, 2), _arg(args, 3), c)
    leave_ieee_mode(old)
    return PythonObject(None)


def gpu_ref_train_rmsnorm_terms(args: PythonObject) raises -> PythonObject:
    """(dy, x, out, rows, d, eps_bits): T-11's terms by rows."""
    var old = enter_ieee_mode()
    for r in range(_arg(args, 3)):
        rmsnorm_terms_thread(ptr_f32(_arg(args, 0)), ptr_f32(_arg(args, 1)), ptr_f32(_arg(args, 2)),
                             _arg(args, 4), _f32(_arg(args, 5)), r)
    leave_ieee_mode(old)
    return PythonObject(None)


def gpu_ref_train_embedding_backward(args: PythonObject) raises -> PythonObject:
    """(dy, ids_i64, acc, tokens, vocab, d): T-13, one chain per (vocab row, column)."""
    var d = _arg(args, 5)
    var old = enter_ieee_mode()
    for v in range(_arg(args, 4)):
        for c in range(d):
            embedding_bwd_thread(ptr_f32(_arg(args, 0)), ptr_i64(_arg(args, 1)), ptr_f32(_arg(args, 2)),
                                 _arg(args, 3), d, v, c)
    leave_ieee_mode(old)
    return PythonObject(None)


def gpu_ref_train_ce_rows(args: PythonObject) raises -> PythonObject:
    """(logits, targets_i64, rows_out, grad_out, n, v, ignore_index, smoothing_bits, d_bits):
    T-14 .. T-16 by rows, then (grad_out != 0) T-18 by elements."""
    var logits = ptr_f32(_arg(args, 0))
    var targets = ptr_i64(_arg(args, 1))
    var gaddr = _arg(args, 3)
    var n = _arg(args, 4)
    var V = _arg(args, 5)
    var ignore = _arg(args, 6)
    var eps = _f32(_arg(args, 7))
    var stats = _falloc(2 * n)
    var old = enter_ieee_mode()
    for r in range(n):
        ce_row_thread(logits, targets, ptr_f32(_arg(args, 2)), stats, V, ignore, eps, r)
    if gaddr != 0:
        for r in range(n):
            for v in range(V):
                ce_grad_thread(logits, targets, stats, ptr_f32(gaddr), V, ignore, eps,
                               _f32(_arg(args, 8)), r, v)
    leave_ieee_mode(old)
    stats.unsafe_free()
    return PythonObject(None)


def gpu_ref_train_clip(args: PythonObject) raises -> PythonObject:
    """(addrs_i64, sizes_i64, count, norms_out, max_norm_bits): T-23 .. T-25 in the kernels'
    phases (leaves, norms, the host's total, rescale); the coefficient's bits, or -1 when the
    total is not finite (nothing rescaled)."""
    var addrs = ptr_i64(_arg(args, 0))
    var sizes = ptr_i64(_arg(args, 1))
    var count = _arg(args, 2)
    var norms = ptr_f32(_arg(args, 3))
    var loff = _ialloc(count + 1)
    loff.unsafe_store(0, 0)
    for j in range(count):
        loff.unsafe_store(j + 1, loff.unsafe_load(j) + Int64(leaf_count(Int(sizes.unsafe_load(j)))))
    var nleaf = Int(loff.unsafe_load(count))
    var offs = _offsets(sizes, count)
    var parts = _falloc(nleaf)
    var old = enter_ieee_mode()
    for u in range(nleaf):
        clip_leaf_thread(addrs, sizes, loff, count, parts, u)
    for j in range(count):
        clip_norm_thread(loff, parts, norms, j)
    var coef = clip_total(norms, count, _f32(_arg(args, 4)))[0]
    var finite = is_finite(F1(norms.unsafe_load(count)))
    if finite:
        for e in range(Int(offs.unsafe_load(count))):
            clip_scale_thread(addrs, offs, count, coef, e)
    leave_ieee_mode(old)
    loff.unsafe_free()
    offs.unsafe_free()
    parts.unsafe_free()
    return PythonObject(_bits(coef) if finite else -1)


def gpu_ref_train_tree_sum(args: PythonObject) raises -> PythonObject:
    """(addrs_i64, count, out, n): T-26 by elements."""
    var old = enter_ieee_mode()
    for e in range(_arg(args, 3)):
        tree_sum_thread(ptr_i64(_arg(args, 0)), _arg(args, 1), ptr_f32(_arg(args, 2)), e)
    leave_ieee_mode(old)
    return PythonObject(None)


def gpu_ref_train_adam(args: PythonObject) raises -> PythonObject:
    """(p_addrs, g_addrs, sizes, count, m_flat, v_flat, t, lr_bits, b1_bits, b2_bits, eps_bits,
    wd_bits, decoupled, maximize): T-29 .. T-32, T-34 by elements."""
    var count = _arg(args, 3)
    var offs = _offsets(ptr_i64(_arg(args, 2)), count)
    var old = enter_ieee_mode()
    var s = adam_scalars(_arg(args, 6), _f32(_arg(args, 7)), _f32(_arg(args, 8)), _f32(_arg(args, 9)),
                         _f32(_arg(args, 10)), _f32(_arg(args, 11)))
    for e in range(Int(offs.unsafe_load(count))):
        adam_thread(ptr_i64(_arg(args, 0)), ptr_i64(_arg(args, 1)), offs, count, ptr_f32(_arg(args, 4)),
                    ptr_f32(_arg(args, 5)), s, _arg(args, 12) != 0, _arg(args, 13) != 0, e)
    leave_ieee_mode(old)
    offs.unsafe_free()
    return PythonObject(None)


def gpu_ref_train_sgd(args: PythonObject) raises -> PythonObject:
    """(p_addrs, g_addrs, sizes, count, buf_flat, flags_i32, lr_bits, momentum_bits,
    dampening_bits, wd_bits, nesterov, maximize): T-33, T-34 by elements."""
    var count = _arg(args, 3)
    var offs = _offsets(ptr_i64(_arg(args, 2)), count)
    var old = enter_ieee_mode()
    for e in range(Int(offs.unsafe_load(count))):
        sgd_thread(ptr_i64(_arg(args, 0)), ptr_i64(_arg(args, 1)), offs, ptr_i32(_arg(args, 5)), count,
                   ptr_f32(_arg(args, 4)), _f32(_arg(args, 6)), _f32(_arg(args, 7)), _f32(_arg(args, 8)),
                   _f32(_arg(args, 9)), _arg(args, 10) != 0, _arg(args, 11) != 0, e)
    leave_ieee_mode(old)
    offs.unsafe_free()
    return PythonObject(None)


def gpu_ref_train_softmax_bwd(args: PythonObject) raises -> PythonObject:
    """(p, dp, ds, rows, n, scale_bits): T-49's c by rows, then dS by elements."""
    var rows = _arg(args, 3)
    var n = _arg(args, 4)
    var c = _falloc(rows)
    var old = enter_ieee_mode()
    for r in range(rows):
        softmax_bwd_c_thread(ptr_f32(_arg(args, 0)), ptr_f32(_arg(args, 1)), c, n, r)
    for r in range(rows):
        for j in range(n):
            softmax_bwd_thread(ptr_f32(_arg(args, 0)), ptr_f32(_arg(args, 1)), c, ptr_f32(_arg(args, 2)),
                               n, _f32(_arg(args, 5)), r, j)
    leave_ieee_mode(old)
    c.unsafe_free()
    return PythonObject(None)


def gpu_ref_train_silu_mul_bwd(args: PythonObject) raises -> PythonObject:
    """(gu, ldgu, dp, ldp, dgu, rows, ff): T-52 by elements."""
    var old = enter_ieee_mode()
    for r in range(_arg(args, 5)):
        for j in range(_arg(args, 6)):
            silu_mul_bwd_thread(ptr_f32(_arg(args, 0)), _arg(args, 1), ptr_f32(_arg(args, 2)), _arg(args, 3),
                                ptr_f32(_arg(args, 4)), _arg(args, 6), r, j)
    leave_ieee_mode(old)
    return PythonObject(None)


def gpu_ref_train_attn_probs(args: PythonObject) raises -> PythonObject:
    """(q, ldq, kt, p, batch, length, n_heads, n_kv, head_dim): T-47 by (batch, head, query)."""
    var L = _arg(args, 5)
    var nh = _arg(args, 6)
    var hd = _arg(args, 8)
    var old = enter_ieee_mode()
    var scale = attention_scale(hd)
    for u in range(_arg(args, 4) * nh * L):
        attn_probs_thread(ptr_f32(_arg(args, 0)), _arg(args, 1), ptr_f32(_arg(args, 2)),
                          ptr_f32(_arg(args, 3)), L, nh, _arg(args, 7), hd, scale, u)
    leave_ieee_mode(old)
    return PythonObject(None)


def gpu_ref_train_fold_div(args: PythonObject) raises -> PythonObject:
    """(x, n, d_bits): T-17, T-58; the float32 bits of div(fold(k = n)(x), d)."""
    var out = _falloc(1)
    var old = enter_ieee_mode()
    fold_div_thread(ptr_f32(_arg(args, 0)), _arg(args, 1), _f32(_arg(args, 2)), out)
    leave_ieee_mode(old)
    var r = _bits(out.unsafe_load(0))
    out.unsafe_free()
    return PythonObject(r)


def gpu_ref_train_fold_div_into(args: PythonObject) raises -> PythonObject:
    """(x, n, d_bits, dst): T-17, T-58; dst[0] = div(fold(k = n)(x), d)."""
    var old = enter_ieee_mode()
    fold_div_thread(ptr_f32(_arg(args, 0)), _arg(args, 1), _f32(_arg(args, 2)), ptr_f32(_arg(args, 3)))
    leave_ieee_mode(old)
    return PythonObject(None)


def gpu_ref_train_neg(args: PythonObject) raises -> PythonObject:
    """(x, out, n): T-1's neg by elements (the sign bit flipped, exact)."""
    var old = enter_ieee_mode()
    for e in range(_arg(args, 2)):
        neg_thread(ptr_f32(_arg(args, 0)), ptr_f32(_arg(args, 1)), e)
    leave_ieee_mode(old)
    return PythonObject(None)


def register_train_gpu_reference(mut m: PythonModuleBuilder) raises:
    m.def_function[gpu_ref_train_rms_norm_backward]("gpu_ref_train_rms_norm_backward")
    m.def_function[gpu_ref_train_fold_rows]("gpu_ref_train_fold_rows")
    m.def_function[gpu_ref_train_rmsnorm_terms]("gpu_ref_train_rmsnorm_terms")
    m.def_function[gpu_ref_train_embedding_backward]("gpu_ref_train_embedding_backward")
    m.def_function[gpu_ref_train_ce_rows]("gpu_ref_train_ce_rows")
    m.def_function[gpu_ref_train_clip]("gpu_ref_train_clip")
    m.def_function[gpu_ref_train_tree_sum]("gpu_ref_train_tree_sum")
    m.def_function[gpu_ref_train_adam]("gpu_ref_train_adam")
    m.def_function[gpu_ref_train_sgd]("gpu_ref_train_sgd")
    m.def_function[gpu_ref_train_softmax_bwd]("gpu_ref_train_softmax_bwd")
    m.def_function[gpu_ref_train_silu_mul_bwd]("gpu_ref_train_silu_mul_bwd")
    m.def_function[gpu_ref_train_attn_probs]("gpu_ref_train_attn_probs")
    m.def_function[gpu_ref_train_fold_div]("gpu_ref_train_fold_div")
    m.def_function[gpu_ref_train_fold_div_into]("gpu_ref_train_fold_div_into")
    m.def_function[gpu_ref_train_neg]("gpu_ref_train_neg")

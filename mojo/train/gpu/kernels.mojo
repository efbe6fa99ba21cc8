"""Device kernels of the training ops (contracts/ops/IDENTICAL_TRAIN_CONTRACT.md): each
turns its thread index into the coordinates of one body in threads.mojo (grid-stride
loops, any size). Sizes arrive as Int32 / Int64, flags as Int32 (kernel arguments
must be device-passable); index arithmetic is Int (64-bit). Compiled offline for
every target by mojo/compile_all_gpu.mojo; the CPU run of the same bodies is
cpu_run.mojo. Nothing here changes a bit: the grid only decides which thread
computes which unit, and every unit (a row, a column's fold, an element, a vocab
row's chain) belongs to one thread.

    rms_rows_kernel          one thread per row (T-9, T-10; rstd for T-11)
    rms_dw_kernel            one thread per column (T-11), after rms_rows_kernel
    fold_rows_kernel         one thread per column (T-2)
    rmsnorm_terms_kernel     one thread per row (T-11's terms)
    embedding_bwd_kernel     one thread per (vocab row, column) (T-13), tokens in order
    ce_row_kernel            one thread per row (T-14 .. T-16)
    ce_grad_kernel           one thread per element (T-18), after ce_row_kernel
    clip_leaf_kernel         one thread per leaf of every tensor (T-23)
    clip_norm_kernel         one thread per tensor (T-23)
    (T-23's total and T-24's coefficient: threads.clip_total on the host side)
    clip_scale_kernel        one thread per element (T-25)
    tree_sum_kernel          one thread per element (T-26)
    adam_kernel              one thread per element (T-31, T-32, T-34)
    sgd_kernel               one thread per element (T-33, T-34)
    softmax_bwd_c_kernel     one thread per row (T-49's c)
    softmax_bwd_kernel       one thread per element (T-49's dS), after softmax_bwd_c_kernel
    silu_mul_bwd_kernel      one thread per element (T-52)
    attn_probs_kernel        one thread per (batch, head, query) (T-47)
    fold_div_kernel          one thread (T-17, T-58)
    neg_kernel               one thread per element (T-1's neg)
"""
from common.ptr import F32Ptr, I64Ptr, I32Ptr
from common.gpu import gid_x, stride_x
from train.gpu.threads import (
    AdamScalars, rms_rows_thread, rms_dw_thread, fold_col_thread, rmsnorm_terms_thread,
    embedding_bwd_thread, ce_row_thread, ce_grad_thread, clip_leaf_thread, clip_norm_thread,
    clip_scale_thread, tree_sum_thread, adam_thread, sgd_thread,
    softmax_bwd_c_thread, softmax_bwd_thread, silu_mul_bwd_thread, attn_probs_thread,
    fold_div_thread, neg_thread,
)


def rms_rows_kernel(dy: F32Ptr, x: F32Ptr, w: F32Ptr, dx: F32Ptr, rstd: F32Ptr, rows: Int32, d: Int32,
                    eps: Float32):
    var r = gid_x()
    while r < Int(rows):
        rms_rows_thread(dy, x, w, dx, rstd, Int(d), eps, r)
        r += stride_x()


def rms_dw_kernel(x: F32Ptr, dy: F32Ptr, rstd: F32Ptr, dw: F32Ptr, rows: Int32, n: Int32):
    var c = gid_x()
    while c < Int(n):
        rms_dw_thread(x, dy, rstd, dw, Int(rows), Int(n), c)
        c += stride_x()


def fold_rows_kernel(x: F32Ptr, dst: F32Ptr, rows: Int32, n: Int32):
    var c = gid_x()
    while c < Int(n):
        fold_col_thread(x, dst, Int(rows), Int(n), c)
        c += stride_x()


def rmsnorm_terms_kernel(dy: F32Ptr, x: F32Ptr, dst: F32Ptr, rows: Int32, d: Int32, eps: Float32):
    var r = gid_x()
    while r < Int(rows):
        rmsnorm_terms_thread(dy, x, dst, Int(d), eps, r)
        r += stride_x()


def embedding_bwd_kernel(dy: F32Ptr, ids: I64Ptr, acc: F32Ptr, tokens: Int32, vocab: Int32, d: Int32):
    var t = gid_x()
    var total = Int(vocab) * Int(d)
    while t < total:
        embedding_bwd_thread(dy, ids, acc, Int(tokens), Int(d), t // Int(d), t % Int(d))
        t += stride_x()


def ce_row_kernel(logits: F32Ptr, targets: I64Ptr, rows_out: F32Ptr, stats: F32Ptr, n: Int32, V: Int32,
                  ignore_index: Int64, eps: Float32):
    var r = gid_x()
    while r < Int(n):
        ce_row_thread(logits, targets, rows_out, stats, Int(V), Int(ignore_index), eps, r)
        r += stride_x()


def ce_grad_kernel(logits: F32Ptr, targets: I64Ptr, stats: F32Ptr, grad: F32Ptr, n: Int32, V: Int32,
                   ignore_index: Int64, eps: Float32, D: Float32):
    var t = gid_x()
    var total = Int(n) * Int(V)
    while t < total:
        ce_grad_thread(logits, targets, stats, grad, Int(V), Int(ignore_index), eps, D,
                       t // Int(V), t % Int(V))
        t += stride_x()


def clip_leaf_kernel(addrs: I64Ptr, sizes: I64Ptr, loff: I64Ptr, count: Int32, parts: F32Ptr,
                     nleaf: Int64):
    var u = gid_x()
    while u < Int(nleaf):
        clip_leaf_thread(addrs, sizes, loff, Int(count), parts, u)
        u += stride_x()


def clip_norm_kernel(loff: I64Ptr, parts: F32Ptr, norms: F32Ptr, count: Int32):
    var j = gid_x()
    while j < Int(count):
        clip_norm_thread(loff, parts, norms, j)
        j += stride_x()


def clip_scale_kernel(addrs: I64Ptr, offs: I64Ptr, count: Int32, coef: Float32, ntot: Int64):
    """coef: threads.clip_total, computed by the launcher from the norms read back;
    launched only when the total is finite."""
    var e = gid_x()
    while e < Int(ntot):
        clip_scale_thread(addrs, offs, Int(count), coef, e)
        e += stride_x()


def tree_sum_kernel(addrs: I64Ptr, count: Int32, dst: F32Ptr, n: Int64):
    var e = gid_x()
    while e < Int(n):
        tree_sum_thread(addrs, Int(count), dst, e)
        e += stride_x()


def adam_kernel(
    pa: I64Ptr, ga: I64Ptr, offs: I64Ptr, count: Int32, m: F32Ptr, v: F32Ptr, ntot: Int64,
    b1: Float32, b2: Float32, eps: Float32, wd: Float32, step: Float32, rt: Float32, c1: Float32,
    c2: Float32, decay: Float32, decoupled: Int32, maximize: Int32,
):
    """The scalars: train.gpu.threads.adam_scalars, computed by the launcher."""
    var s = AdamScalars(b1, b2, eps, wd, step, rt, c1, c2, decay)
    var e = gid_x()
    while e < Int(ntot):
        adam_thread(pa, ga, offs, Int(count), m, v, s, decoupled != 0, maximize != 0, e)
        e += stride_x()


def sgd_kernel(
    pa: I64Ptr, ga: I64Ptr, offs: I64Ptr, flags: I32Ptr, count: Int32, b: F32Ptr, ntot: Int64,
    lr: Float32, mu: Float32, dampening: Float32, wd: Float32, nesterov: Int32, maximize: Int32,
):
    var e = gid_x()
    while e < Int(ntot):
        sgd_thread(pa, ga, offs, flags, Int(count), b, lr, mu, dampening, wd, nesterov != 0,
                   maximize != 0, e)
        e += stride_x()


def softmax_bwd_c_kernel(p: F32Ptr, dp: F32Ptr, c: F32Ptr, rows: Int32, n: Int32):
    var r = gid_x()
    while r < Int(rows):
        softmax_bwd_c_thread(p, dp, c, Int(n), r)
        r += stride_x()


def softmax_bwd_kernel(p: F32Ptr, dp: F32Ptr, c: F32Ptr, ds: F32Ptr, rows: Int32, n: Int32,
                       scale: Float32):
    var t = gid_x()
    var total = Int(rows) * Int(n)
    while t < total:
        softmax_bwd_thread(p, dp, c, ds, Int(n), scale, t // Int(n), t % Int(n))
        t += stride_x()


def silu_mul_bwd_kernel(gu: F32Ptr, ldgu: Int32, dp: F32Ptr, ldp: Int32, dgu: F32Ptr, rows: Int32,
                        ff: Int32):
    var t = gid_x()
    var total = Int(rows) * Int(ff)
    while t < total:
        silu_mul_bwd_thread(gu, Int(ldgu), dp, Int(ldp), dgu, Int(ff), t // Int(ff), t % Int(ff))
        t += stride_x()


def attn_probs_kernel(q: F32Ptr, ldq: Int32, kt: F32Ptr, p: F32Ptr, batch: Int32, length: Int32,
                      n_heads: Int32, n_kv: Int32, head_dim: Int32, scale: Float32):
    """scale: transformer.gpu.threads.attention_scale(head_dim), computed by the launcher."""
    var u = gid_x()
    var total = Int(batch) * Int(n_heads) * Int(length)
    while u < total:
        attn_probs_thread(q, Int(ldq), kt, p, Int(length), Int(n_heads), Int(n_kv), Int(head_dim),
                          scale, u)
        u += stride_x()


def fold_div_kernel(x: F32Ptr, n: Int64, d: Float32, dst: F32Ptr):
    if gid_x() == 0:
        fold_div_thread(x, Int(n), d, dst)


def neg_kernel(x: F32Ptr, dst: F32Ptr, n: Int64):
    var e = gid_x()
    while e < Int(n):
        neg_thread(x, dst, e)
        e += stride_x()

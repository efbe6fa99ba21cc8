"""Host side of the training ops in a device PROGRAM: the launches of every train_* op
of the training step (python/mojolearn/_train/device.py) on operands that live in the
device's memory. The program entry (transformer/gpu/model_entry.mojo, nn_program_dev)
sends every op whose code is at least TRAIN_BASE here; the CPU run of the same bodies
is cpu_run.mojo (the gpu_ref_train_* entries), with the same argument tuples, looped
over the same coordinates in the same phases.

OPS (arguments as the gpu_ref_* entry of the same name; every address device memory)
    train_rms_norm_backward   rms_rows_kernel, then rms_dw_kernel (rstd scratch)
    train_fold_rows           fold_rows_kernel
    train_rmsnorm_terms       rmsnorm_terms_kernel
    train_embedding_backward  embedding_bwd_kernel
    train_ce_rows             ce_row_kernel, then ce_grad_kernel (row statistics scratch)
    train_clip                clip_leaf_kernel, clip_norm_kernel, a HOST READ of the
                              norms, threads.clip_total on the host (T-23's total, T-24's
                              coefficient, written to norms[count]), then clip_scale_kernel
                              when the total is finite (T-25, T-41)
    train_tree_sum            tree_sum_kernel
    train_adam                adam_kernel (threads.adam_scalars on the host)
    train_sgd                 sgd_kernel
    train_softmax_bwd         softmax_bwd_c_kernel, then softmax_bwd_kernel (c scratch)
    train_silu_mul_bwd        silu_mul_bwd_kernel
    train_attn_probs          attn_probs_kernel (attention_scale on the host)
    train_fold_div_into       fold_div_kernel (one thread)
    train_neg                 neg_kernel

HOST WORK AND WAITS
    The clip and the optimizers read the size table (count int64, device memory) back to
    make the offsets their kernels search; the clip also reads its norms back between
    its launches. The host scalars (clip_total, adam_scalars, attention_scale) run under
    IEEE mode, as in the CPU run. Scratch of an op is device memory allocated here and
    waited for before it is let go. None of this changes a bit: the grids only decide
    which thread computes which unit.
"""
from std.memory import bitcast
from std.memory.alloc import unsafe_alloc
from max.gpu.host import DeviceContext, DeviceBuffer
from common.gpu import B1, blocks_1d, host_ptr
from common.ptr import I64Ptr
from common.fpstate import enter_ieee_mode, leave_ieee_mode
from arith.tree import leaf_count
from transformer.gpu.threads import attention_scale
from train.gpu.threads import F1, AdamScalars, adam_scalars, clip_total, is_finite
from train.gpu.kernels import (
    rms_rows_kernel, rms_dw_kernel, fold_rows_kernel, rmsnorm_terms_kernel, embedding_bwd_kernel,
    ce_row_kernel, ce_grad_kernel, clip_leaf_kernel, clip_norm_kernel, clip_scale_kernel,
    tree_sum_kernel, adam_kernel, sgd_kernel, softmax_bwd_c_kernel, softmax_bwd_kernel,
    silu_mul_bwd_kernel, attn_probs_kernel, fold_div_kernel, neg_kernel,
)

comptime F = DType.float32
comptime I32 = DType.int32
comptime I64 = DType.int64
comptime U8 = DType.uint8

# op codes (transformer/gpu/model_entry.op_code gives them from the names)
comptime TRAIN_BASE = 100
comptime OP_RMS_NORM_BACKWARD = 100
comptime OP_FOLD_ROWS = 101
comptime OP_RMSNORM_TERMS = 102
comptime OP_EMBEDDING_BACKWARD = 103
comptime OP_CE_ROWS = 104
comptime OP_CLIP = 105
comptime OP_TREE_SUM = 106
comptime OP_ADAM = 107
comptime OP_SGD = 108
comptime OP_SOFTMAX_BWD = 109
comptime OP_SILU_MUL_BWD = 110
comptime OP_ATTN_PROBS = 111
comptime OP_FOLD_DIV_INTO = 112
comptime OP_NEG = 113


def train_op_code(name: String) -> Int:
    """The code of a training op from its name, or -1 when it is not one."""
    if name == "train_rms_norm_backward":
        return OP_RMS_NORM_BACKWARD
    if name == "train_fold_rows":
        return OP_FOLD_ROWS
    if name == "train_rmsnorm_terms":
        return OP_RMSNORM_TERMS
    if name == "train_embedding_backward":
        return OP_EMBEDDING_BACKWARD
    if name == "train_ce_rows":
        return OP_CE_ROWS
    if name == "train_clip":
        return OP_CLIP
    if name == "train_tree_sum":
        return OP_TREE_SUM
    if name == "train_adam":
        return OP_ADAM
    if name == "train_sgd":
        return OP_SGD
    if name == "train_softmax_bwd":
        return OP_SOFTMAX_BWD
    if name == "train_silu_mul_bwd":
        return OP_SILU_MUL_BWD
    if name == "train_attn_probs":
        return OP_ATTN_PROBS
    if name == "train_fold_div_into":
        return OP_FOLD_DIV_INTO
    if name == "train_neg":
        return OP_NEG
    return -1


def _f32(bits: Int) -> Float32:
    return bitcast[DType.float32, 1](SIMD[DType.uint32, 1](UInt32(bits)))[0]


def _fbuf(ctx: DeviceContext, n: Int) raises -> DeviceBuffer[F]:
    return ctx.enqueue_create_buffer[F](max(1, n))


def _download(ctx: DeviceContext, dst: Int, src: Int, nbytes: Int) raises:
    """nbytes from device address src to host address dst, after everything enqueued."""
    var b = DeviceBuffer[U8](ctx, host_ptr[U8](src), nbytes, owning=False)
    ctx.enqueue_copy(host_ptr[U8](dst), b)
    ctx.synchronize()


def _upload(ctx: DeviceContext, dst: Int, src: Int, nbytes: Int) raises:
    var b = DeviceBuffer[U8](ctx, host_ptr[U8](dst), nbytes, owning=False)
    ctx.enqueue_copy(b, host_ptr[U8](src))
    ctx.synchronize()


def _host_offsets(ctx: DeviceContext, sizes_dev: Int, count: Int, leaves: Bool) raises -> I64Ptr:
    """count + 1 host int64: each tensor's first element (leaves: first leaf) in the
    concatenation, from the device's size table."""
    var sizes = unsafe_alloc[Int64](max(1, count), alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    if count > 0:
        _download(ctx, Int(sizes), sizes_dev, 8 * count)
    var offs = unsafe_alloc[Int64](count + 1, alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    offs.unsafe_store(0, 0)
    for j in range(count):
        var s = Int(sizes.unsafe_load(j))
        var step = leaf_count(s) if leaves else s
        offs.unsafe_store(j + 1, offs.unsafe_load(j) + Int64(step))
    sizes.unsafe_free()
    return offs


def _to_device(ctx: DeviceContext, host: I64Ptr, n: Int) raises -> DeviceBuffer[I64]:
    var b = ctx.enqueue_create_buffer[I64](max(1, n))
    _upload(ctx, Int(b.unsafe_ptr()), Int(host), 8 * n)
    return b^


def run_train_op(ctx: DeviceContext, op: Int, a: List[Int], at: Int) raises:
    """Enqueue the launches of training op `op`, its arguments a[at], a[at + 1], ... in
    the order of the gpu_ref_* entry of the same name."""
    if op == OP_RMS_NORM_BACKWARD:  # (dy, x, w, dx, dw, rows, d, eps_bits)
        var rows = a[at + 5]
        var d = a[at + 6]
        if rows > 0 and d > 0:
            var rstd = _fbuf(ctx, rows)
            ctx.enqueue_function[rms_rows_kernel](
                host_ptr[F](a[at]), host_ptr[F](a[at + 1]), host_ptr[F](a[at + 2]),
                host_ptr[F](a[at + 3]), rstd.unsafe_ptr(), Int32(rows), Int32(d), _f32(a[at + 7]),
                grid_dim=blocks_1d(rows), block_dim=B1,
            )
            ctx.enqueue_function[rms_dw_kernel](
                host_ptr[F](a[at + 1]), host_ptr[F](a[at]), rstd.unsafe_ptr(), host_ptr[F](a[at + 4]),
                Int32(rows), Int32(d), grid_dim=blocks_1d(d), block_dim=B1,
            )
            ctx.synchronize()
    elif op == OP_FOLD_ROWS:  # (x, out, rows, n)
        var n = a[at + 3]
        if n > 0:
            ctx.enqueue_function[fold_rows_kernel](
                host_ptr[F](a[at]), host_ptr[F](a[at + 1]), Int32(a[at + 2]), Int32(n),
                grid_dim=blocks_1d(n), block_dim=B1,
            )
    elif op == OP_RMSNORM_TERMS:  # (dy, x, out, rows, d, eps_bits)
        var rows = a[at + 3]
        if rows > 0:
            ctx.enqueue_function[rmsnorm_terms_kernel](
                host_ptr[F](a[at]), host_ptr[F](a[at + 1]), host_ptr[F](a[at + 2]), Int32(rows),
                Int32(a[at + 4]), _f32(a[at + 5]), grid_dim=blocks_1d(rows), block_dim=B1,
            )
    elif op == OP_EMBEDDING_BACKWARD:  # (dy, ids_i64, acc, tokens, vocab, d)
        var total = a[at + 4] * a[at + 5]
        if total > 0:
            ctx.enqueue_function[embedding_bwd_kernel](
                host_ptr[F](a[at]), host_ptr[I64](a[at + 1]), host_ptr[F](a[at + 2]),
                Int32(a[at + 3]), Int32(a[at + 4]), Int32(a[at + 5]),
                grid_dim=blocks_1d(total), block_dim=B1,
            )
    elif op == OP_CE_ROWS:
        # (logits, targets_i64, rows_out, grad_out, n, v, ignore_index, smoothing_bits, d_bits)
        var n = a[at + 4]
        var V = a[at + 5]
        if n > 0:
            var stats = _fbuf(ctx, 2 * n)
            ctx.enqueue_function[ce_row_kernel](
                host_ptr[F](a[at]), host_ptr[I64](a[at + 1]), host_ptr[F](a[at + 2]),
                stats.unsafe_ptr(), Int32(n), Int32(V), Int64(a[at + 6]), _f32(a[at + 7]),
                grid_dim=blocks_1d(n), block_dim=B1,
            )
            if a[at + 3] != 0:
                ctx.enqueue_function[ce_grad_kernel](
                    host_ptr[F](a[at]), host_ptr[I64](a[at + 1]), stats.unsafe_ptr(),
                    host_ptr[F](a[at + 3]), Int32(n), Int32(V), Int64(a[at + 6]), _f32(a[at + 7]),
                    _f32(a[at + 8]), grid_dim=blocks_1d(n * V), block_dim=B1,
                )
            ctx.synchronize()
    elif op == OP_CLIP:  # (addrs_i64, sizes_i64, count, norms_out, max_norm_bits)
        _clip(ctx, a[at], a[at + 1], a[at + 2], a[at + 3], a[at + 4])
    elif op == OP_TREE_SUM:  # (addrs_i64, count, out, n)
        var n = a[at + 3]
        if n > 0:
            ctx.enqueue_function[tree_sum_kernel](
                host_ptr[I64](a[at]), Int32(a[at + 1]), host_ptr[F](a[at + 2]), Int64(n),
                grid_dim=blocks_1d(n), block_dim=B1,
            )
    elif op == OP_ADAM:
        # (p_addrs, g_addrs, sizes, count, m, v, t, lr, b1, b2, eps, wd, decoupled, maximize)
        var count = a[at + 3]
        var offs = _host_offsets(ctx, a[at + 2], count, False)
        var ntot = Int(offs.unsafe_load(count))
        var old = enter_ieee_mode()
        var s = adam_scalars(a[at + 6], _f32(a[at + 7]), _f32(a[at + 8]), _f32(a[at + 9]),
                             _f32(a[at + 10]), _f32(a[at + 11]))
        leave_ieee_mode(old)
        var doffs = _to_device(ctx, offs, count + 1)
        offs.unsafe_free()
        if ntot > 0:
            ctx.enqueue_function[adam_kernel](
                host_ptr[I64](a[at]), host_ptr[I64](a[at + 1]), doffs.unsafe_ptr(), Int32(count),
                host_ptr[F](a[at + 4]), host_ptr[F](a[at + 5]), Int64(ntot), s.b1, s.b2, s.eps,
                s.wd, s.step, s.rt, s.c1, s.c2, s.decay, Int32(a[at + 12]), Int32(a[at + 13]),
                grid_dim=blocks_1d(ntot), block_dim=B1,
            )
        ctx.synchronize()
    elif op == OP_SGD:
        # (p_addrs, g_addrs, sizes, count, buf, flags_i32, lr, momentum, dampening, wd, nesterov, maximize)
        var count = a[at + 3]
        var offs = _host_offsets(ctx, a[at + 2], count, False)
        var ntot = Int(offs.unsafe_load(count))
        var doffs = _to_device(ctx, offs, count + 1)
        offs.unsafe_free()
        if ntot > 0:
            ctx.enqueue_function[sgd_kernel](
                host_ptr[I64](a[at]), host_ptr[I64](a[at + 1]), doffs.unsafe_ptr(),
                host_ptr[I32](a[at + 5]), Int32(count), host_ptr[F](a[at + 4]), Int64(ntot),
                _f32(a[at + 6]), _f32(a[at + 7]), _f32(a[at + 8]), _f32(a[at + 9]),
                Int32(a[at + 10]), Int32(a[at + 11]), grid_dim=blocks_1d(ntot), block_dim=B1,
            )
        ctx.synchronize()
    elif op == OP_SOFTMAX_BWD:  # (p, dp, ds, rows, n, scale_bits)
        var rows = a[at + 3]
        var n = a[at + 4]
        if rows > 0 and n > 0:
            var c = _fbuf(ctx, rows)
            ctx.enqueue_function[softmax_bwd_c_kernel](
                host_ptr[F](a[at]), host_ptr[F](a[at + 1]), c.unsafe_ptr(), Int32(rows), Int32(n),
                grid_dim=blocks_1d(rows), block_dim=B1,
            )
            ctx.enqueue_function[softmax_bwd_kernel](
                host_ptr[F](a[at]), host_ptr[F](a[at + 1]), c.unsafe_ptr(), host_ptr[F](a[at + 2]),
                Int32(rows), Int32(n), _f32(a[at + 5]), grid_dim=blocks_1d(rows * n), block_dim=B1,
            )
            ctx.synchronize()
    elif op == OP_SILU_MUL_BWD:  # (gu, ldgu, dp, ldp, dgu, rows, ff)
        var total = a[at + 5] * a[at + 6]
        if total > 0:
            ctx.enqueue_function[silu_mul_bwd_kernel](
                host_ptr[F](a[at]), Int32(a[at + 1]), host_ptr[F](a[at + 2]), Int32(a[at + 3]),
                host_ptr[F](a[at + 4]), Int32(a[at + 5]), Int32(a[at + 6]),
                grid_dim=blocks_1d(total), block_dim=B1,
            )
    elif op == OP_ATTN_PROBS:  # (q, ldq, kt, p, batch, length, n_heads, n_kv, head_dim)
        var total = a[at + 4] * a[at + 6] * a[at + 5]
        if total > 0:
            var old = enter_ieee_mode()
            var scale = attention_scale(a[at + 8])
            leave_ieee_mode(old)
            ctx.enqueue_function[attn_probs_kernel](
                host_ptr[F](a[at]), Int32(a[at + 1]), host_ptr[F](a[at + 2]), host_ptr[F](a[at + 3]),
                Int32(a[at + 4]), Int32(a[at + 5]), Int32(a[at + 6]), Int32(a[at + 7]),
                Int32(a[at + 8]), scale, grid_dim=blocks_1d(total), block_dim=B1,
            )
    elif op == OP_FOLD_DIV_INTO:  # (x, n, d_bits, dst)
        ctx.enqueue_function[fold_div_kernel](
            host_ptr[F](a[at]), Int64(a[at + 1]), _f32(a[at + 2]), host_ptr[F](a[at + 3]),
            grid_dim=1, block_dim=1,
        )
    elif op == OP_NEG:  # (x, out, n)
        var n = a[at + 2]
        if n > 0:
            ctx.enqueue_function[neg_kernel](
                host_ptr[F](a[at]), host_ptr[F](a[at + 1]), Int64(n),
                grid_dim=blocks_1d(n), block_dim=B1,
            )
    else:
        raise Error(String("mojolearn._native_gpu: nn_program_dev: unknown training op code ", op))


def _clip(ctx: DeviceContext, addrs: Int, sizes: Int, count: Int, norms: Int, max_bits: Int) raises:
    """T-23 .. T-25 in the CPU run's phases: leaves, norms, the host's total and
    coefficient (the norms read back), the rescale when the total is finite."""
    var loff = _host_offsets(ctx, sizes, count, True)
    var offs = _host_offsets(ctx, sizes, count, False)
    var nleaf = Int(loff.unsafe_load(count))
    var ntot = Int(offs.unsafe_load(count))
    var dloff = _to_device(ctx, loff, count + 1)
    var doffs = _to_device(ctx, offs, count + 1)
    loff.unsafe_free()
    offs.unsafe_free()
    var parts = _fbuf(ctx, nleaf)
    if nleaf > 0:
        ctx.enqueue_function[clip_leaf_kernel](
            host_ptr[I64](addrs), host_ptr[I64](sizes), dloff.unsafe_ptr(), Int32(count),
            parts.unsafe_ptr(), Int64(nleaf), grid_dim=blocks_1d(nleaf), block_dim=B1,
        )
    if count > 0:
        ctx.enqueue_function[clip_norm_kernel](
            dloff.unsafe_ptr(), parts.unsafe_ptr(), host_ptr[F](norms), Int32(count),
            grid_dim=blocks_1d(count), block_dim=B1,
        )
    var hn = unsafe_alloc[Float32](count + 1, alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    if count > 0:
        _download(ctx, Int(hn), norms, 4 * count)
    var old = enter_ieee_mode()
    var coef = clip_total(hn, count, _f32(max_bits))[0]
    leave_ieee_mode(old)
    var finite = is_finite(F1(hn.unsafe_load(count)))
    _upload(ctx, norms + 4 * count, Int(hn) + 4 * count, 4)  # the total, T-23
    hn.unsafe_free()
    if finite and ntot > 0:
        ctx.enqueue_function[clip_scale_kernel](
            host_ptr[I64](addrs), doffs.unsafe_ptr(), Int32(count), coef, Int64(ntot),
            grid_dim=blocks_1d(ntot), block_dim=B1,
        )
    ctx.synchronize()

"""Host side of the GPU model: device memory and the launches of every op of the
forward on operands that live in the device's memory (no copies).

WHAT IT IS
    The GPU model driver (python/mojolearn/models/_gpu.py) keeps the weights, the
    KV cache and the activations in device memory and sends a forward pass as one
    PROGRAM: a list of ops, each the name of a gpu_ref_* entry of the CPU extension
    without its prefix plus that entry's own argument tuple (addresses, sizes, flags).
    `run_op` here launches the device kernels of one op with those arguments; the CPU
    run (the gpu_ref_* entries) loops the same bodies over the same coordinates. So
    the reference backend of the tests and this backend execute one program, op by
    op, with the same arguments.

OPS (arguments as the gpu_ref_* entry of the same name, see _native_api.py)
    nn_gather, nn_rmsnorm, nn_rope_table, nn_rope, nn_kv_append, nn_attention,
    nn_silu_mul, nn_add, nn_sample, nn_argmax       transformer/gpu kernels
    gemm_f32                                        gemm.gpu.launch.gemm_f32_resident
    gemm_int15                                      gemm.gpu.launch._int_launches[2]
    quantize_int15, dequantize_int8                 convert.gpu kernels
    ssm_norm_lanes, ssm_conv, ssm_softplus,         ssm.gpu kernels (the Mamba model,
    ssm_neg_exp, ssm_mamba1_scan,                   python/mojolearn/models/_ssm/gpu.py)
    ssm_mamba2_ssd_ws
    The SSM kernels are launched with one thread a coordinate of the CPU run's loops
    (mojo/ssm/gpu/cpu_run.mojo): a row (norm_lanes), a (batch row, channel) (conv, the
    Mamba-1 scan), an element (softplus, neg_exp); the SSD is three launches in
    order, gram (a (batch row, chunk, row)), unit (a (batch row, head)), store_open
    (a (batch row, open row)), on the Gram and per-thread scratch the Python driver
    allocated as device buffers (the op's last two arguments).
    The int8-stored weights of fp32_v1 are widened by the existing dequantize kernel
    into a scratch float32 panel (rule L-6, exact: the materialized weights of M-26)
    that the fp32.v1 kernels then read; bf16 weights are read as bits by the fp32.v1
    kernels themselves (bf16f32.v1).

ORDER
    Every launch is enqueued on the one context's stream in program order (the GEMM
    launcher synchronizes after its launches); the caller synchronizes once at the
    end. Grids only decide which thread computes which element: no bit depends on
    them.
"""
from std.memory import bitcast
from max.gpu.host import DeviceContext, DeviceBuffer
from common.gpu import B1, blocks_1d, cdiv, host_ptr
from convert.gpu.arith import INT15_SHIFT
from convert.gpu.kernels import row_exponent_kernel, quantize_int15_kernel, dequantize_int8_kernel
from gemm.gpu.launch import gemm_f32_resident, _int_launches
from transformer.gpu.kernels import (
    rmsnorm_kernel, silu_mul_kernel, add_kernel, rope_table_kernel, rope_kernel, attention_kernel,
)
from transformer.gpu.threads import attention_scale, rope_log_theta
from transformer.gpu.model_kernels import gather_kernel, kv_append_kernel, sample_kernel, argmax_kernel
from ssm.gpu.kernels import (
    ssm_norm_lanes_kernel, ssm_conv_kernel, ssm_softplus_kernel, ssm_neg_exp_kernel,
    mamba1_scan_kernel, ssd_gram_kernel, ssd_unit_kernel, ssd_store_open_kernel,
)
from ssm.gpu.threads import Q as SSD_Q

comptime F = DType.float32
comptime U32 = DType.uint32
comptime I8 = DType.int8
comptime I32 = DType.int32
comptime I64 = DType.int64

# op codes of a parsed program (model_entry.op_code gives them from the names)
comptime OP_GATHER = 0
comptime OP_RMSNORM = 1
comptime OP_ROPE_TABLE = 2
comptime OP_ROPE = 3
comptime OP_KV_APPEND = 4
comptime OP_ATTENTION = 5
comptime OP_SILU_MUL = 6
comptime OP_ADD = 7
comptime OP_SAMPLE = 8
comptime OP_ARGMAX = 9
comptime OP_GEMM_F32 = 10
comptime OP_GEMM_INT15 = 11
comptime OP_QUANTIZE_INT15 = 12
comptime OP_DEQUANTIZE_INT8 = 13
comptime OP_SSM_NORM_LANES = 14
comptime OP_SSM_CONV = 15
comptime OP_SSM_SOFTPLUS = 16
comptime OP_SSM_NEG_EXP = 17
comptime OP_SSM_MAMBA1_SCAN = 18
comptime OP_SSM_MAMBA2_SSD_WS = 19


def _f32(bits: Int) -> Float32:
    return bitcast[DType.float32, 1](SIMD[DType.uint32, 1](UInt32(bits)))[0]


# ------------------------------------------------------------------ device memory
def dev_alloc(ctx: DeviceContext, nbytes: Int) raises -> Int:
    """A new device allocation of nbytes (> 0); its address. Freed by dev_free."""
    var b = ctx.enqueue_create_buffer[DType.uint8](nbytes)
    var p = b.take_ptr()
    ctx.synchronize()
    return Int(p)


def dev_free(ctx: DeviceContext, addr: Int, nbytes: Int) raises:
    var b = DeviceBuffer[DType.uint8](ctx, host_ptr[DType.uint8](addr), nbytes, owning=True)
    _ = b^
    ctx.synchronize()


def dev_upload(ctx: DeviceContext, dst: Int, src: Int, nbytes: Int) raises:
    """nbytes from host address src to device address dst."""
    var b = DeviceBuffer[DType.uint8](ctx, host_ptr[DType.uint8](dst), nbytes, owning=False)
    ctx.enqueue_copy(b, host_ptr[DType.uint8](src))
    ctx.synchronize()


def dev_download(ctx: DeviceContext, dst: Int, src: Int, nbytes: Int) raises:
    """nbytes from device address src to host address dst."""
    var b = DeviceBuffer[DType.uint8](ctx, host_ptr[DType.uint8](src), nbytes, owning=False)
    ctx.enqueue_copy(host_ptr[DType.uint8](dst), b)
    ctx.synchronize()


def dev_zero(ctx: DeviceContext, addr: Int, nbytes: Int) raises:
    var b = DeviceBuffer[DType.uint8](ctx, host_ptr[DType.uint8](addr), nbytes, owning=False)
    ctx.enqueue_memset(b, UInt8(0))
    ctx.synchronize()


def dev_memory(ctx: DeviceContext) raises -> Tuple[Int, Int]:
    """(free, total) bytes of the device's memory."""
    var fm = ctx.get_memory_info()
    return (Int(fm[0]), Int(fm[1]))


# ------------------------------------------------------------------ one op
def run_op(ctx: DeviceContext, op: Int, a: List[Int], at: Int) raises:
    """Enqueue the launches of op `op`, its arguments a[at], a[at + 1], ... in the
    order of the gpu_ref_* entry of the same name."""
    if op == OP_GATHER:  # (table, ids, out, rows, d)
        var rows = a[at + 3]
        var d = a[at + 4]
        if rows > 0 and d > 0:
            ctx.enqueue_function[gather_kernel](
                host_ptr[U32](a[at]), host_ptr[I64](a[at + 1]), host_ptr[U32](a[at + 2]),
                Int32(rows), Int32(d), grid_dim=blocks_1d(rows * d), block_dim=B1,
            )
    elif op == OP_RMSNORM:  # (x, w, out, rows, d, eps_bits)
        var rows = a[at + 3]
        if rows > 0:
            ctx.enqueue_function[rmsnorm_kernel](
                host_ptr[F](a[at]), host_ptr[F](a[at + 1]), host_ptr[F](a[at + 2]),
                Int32(rows), Int32(a[at + 4]), _f32(a[at + 5]),
                grid_dim=blocks_1d(rows), block_dim=B1,
            )
    elif op == OP_ROPE_TABLE:  # (cos, sin, npos, head_dim, theta_bits)
        var npos = a[at + 2]
        var hd = a[at + 3]
        if npos > 0 and hd > 1:
            ctx.enqueue_function[rope_table_kernel](
                host_ptr[F](a[at]), host_ptr[F](a[at + 1]), Int32(npos), Int32(hd),
                rope_log_theta(_f32(a[at + 4])),
                grid_dim=blocks_1d(npos * (hd // 2)), block_dim=B1,
            )
    elif op == OP_ROPE:
        # (src, lds, dst, ldd, dhs, n_heads, head_dim, cos, sin, pos0, length, rows, transposed, tmax, rot_dim)
        var nh = a[at + 5]
        var hd = a[at + 6]
        var rows = a[at + 11]
        if rows > 0 and nh > 0 and hd > 0:
            ctx.enqueue_function[rope_kernel](
                host_ptr[F](a[at]), Int32(a[at + 1]), host_ptr[F](a[at + 2]), Int32(a[at + 3]),
                Int32(a[at + 4]), Int32(hd), host_ptr[F](a[at + 7]), host_ptr[F](a[at + 8]),
                Int32(a[at + 9]), Int32(a[at + 10]), Int32(a[at + 12]), Int32(nh), Int32(a[at + 13]),
                Int32(rows), Int32(a[at + 14]), grid_dim=blocks_1d(rows * nh * hd), block_dim=B1,
            )
    elif op == OP_KV_APPEND:  # (src, lds, dst, n_heads, head_dim, pos0, length, rows, tmax)
        var nh = a[at + 3]
        var hd = a[at + 4]
        var rows = a[at + 7]
        if rows > 0 and nh > 0 and hd > 0:
            ctx.enqueue_function[kv_append_kernel](
                host_ptr[U32](a[at]), Int32(a[at + 1]), host_ptr[U32](a[at + 2]), Int32(nh),
                Int32(hd), Int32(a[at + 5]), Int32(a[at + 6]), Int32(rows), Int32(a[at + 8]),
                grid_dim=blocks_1d(rows * nh * hd), block_dim=B1,
            )
    elif op == OP_ATTENTION:
        # (q, ldq, kt, v, out, ws, batch, length, n_heads, n_kv, head_dim, pos0, tmax, fixed15)
        var total = a[at + 6] * a[at + 8] * a[at + 7]
        if total > 0:
            ctx.enqueue_function[attention_kernel](
                host_ptr[F](a[at]), Int32(a[at + 1]), host_ptr[F](a[at + 2]), host_ptr[F](a[at + 3]),
                host_ptr[F](a[at + 4]), host_ptr[F](a[at + 5]), Int32(a[at + 6]), Int32(a[at + 7]),
                Int32(a[at + 8]), Int32(a[at + 9]), Int32(a[at + 10]), Int32(a[at + 11]),
                Int32(a[at + 12]), Int32(a[at + 13]), attention_scale(a[at + 10]),
                grid_dim=blocks_1d(total), block_dim=B1,
            )
    elif op == OP_SILU_MUL:  # (g, u, ld_in, out, ld_out, rows, n)
        var total = a[at + 5] * a[at + 6]
        if total > 0:
            ctx.enqueue_function[silu_mul_kernel](
                host_ptr[F](a[at]), host_ptr[F](a[at + 1]), Int32(a[at + 2]), host_ptr[F](a[at + 3]),
                Int32(a[at + 4]), Int32(a[at + 5]), Int32(a[at + 6]),
                grid_dim=blocks_1d(total), block_dim=B1,
            )
    elif op == OP_ADD:  # (x, ldx, y, ldy, out, ldo, rows, n)
        var total = a[at + 6] * a[at + 7]
        if total > 0:
            ctx.enqueue_function[add_kernel](
                host_ptr[F](a[at]), Int32(a[at + 1]), host_ptr[F](a[at + 2]), Int32(a[at + 3]),
                host_ptr[F](a[at + 4]), Int32(a[at + 5]), Int32(a[at + 6]), Int32(a[at + 7]),
                grid_dim=blocks_1d(total), block_dim=B1,
            )
    elif op == OP_SAMPLE:  # (x, rows, n, r, out)
        var rows = a[at + 1]
        if rows > 0:
            ctx.enqueue_function[sample_kernel](
                host_ptr[F](a[at]), Int32(rows), Int32(a[at + 2]), host_ptr[DType.float64](a[at + 3]),
                host_ptr[I64](a[at + 4]), grid_dim=blocks_1d(rows), block_dim=B1,
            )
    elif op == OP_ARGMAX:  # (x, rows, n, out)
        var rows = a[at + 1]
        if rows > 0:
            ctx.enqueue_function[argmax_kernel](
                host_ptr[F](a[at]), Int32(rows), Int32(a[at + 2]), host_ptr[I64](a[at + 3]),
                grid_dim=blocks_1d(rows), block_dim=B1,
            )
    elif op == OP_GEMM_F32:  # (a, b, c, m, n, k, trans_a, trans_b, a_bf16, b_bf16)
        # the GEMM launcher waits for the stream itself, so the ops before it are done
        gemm_f32_resident(ctx, a[at], a[at + 1], a[at + 2], a[at + 3], a[at + 4], a[at + 5],
                          a[at + 6] != 0, a[at + 7] != 0, a[at + 8] != 0, a[at + 9] != 0, False)
    elif op == OP_GEMM_INT15:  # (a_hi, a_lo, a_exps, b_hi, b_lo, b_exps, c, m, n, k)
        _gemm_int15(ctx, a[at], a[at + 1], a[at + 2], a[at + 3], a[at + 4], a[at + 5], a[at + 6],
                    a[at + 7], a[at + 8], a[at + 9])
    elif op == OP_QUANTIZE_INT15:  # (src, hi, lo, exps, m, k)
        var m = a[at + 4]
        var k = a[at + 5]
        if m > 0:
            ctx.enqueue_function[row_exponent_kernel](
                host_ptr[U32](a[at]), host_ptr[I32](a[at + 3]), Int32(m), Int32(k), Int32(INT15_SHIFT),
                grid_dim=blocks_1d(m), block_dim=B1,
            )
        if m > 0 and k > 0:
            ctx.enqueue_function[quantize_int15_kernel](
                host_ptr[U32](a[at]), host_ptr[I32](a[at + 3]), host_ptr[I8](a[at + 1]),
                host_ptr[I8](a[at + 2]), Int32(m), Int32(k), grid_dim=blocks_1d(m * k), block_dim=B1,
            )
    elif op == OP_DEQUANTIZE_INT8:  # (codes, exps, dst, m, k)
        var total = a[at + 3] * a[at + 4]
        if total > 0:
            ctx.enqueue_function[dequantize_int8_kernel](
                host_ptr[I8](a[at]), host_ptr[I32](a[at + 1]), host_ptr[F](a[at + 2]),
                Int32(a[at + 3]), Int32(a[at + 4]), grid_dim=blocks_1d(total), block_dim=B1,
            )
    elif op == OP_SSM_NORM_LANES:  # (x, ldx, w, out, ldo, rows, n, eps_bits)
        var rows = a[at + 5]
        if rows > 0:
            ctx.enqueue_function[ssm_norm_lanes_kernel](
                host_ptr[F](a[at]), Int32(a[at + 1]), host_ptr[F](a[at + 2]), host_ptr[F](a[at + 3]),
                Int32(a[at + 4]), Int32(rows), Int32(a[at + 6]), _f32(a[at + 7]),
                grid_dim=blocks_1d(rows), block_dim=B1,
            )
    elif op == OP_SSM_CONV:  # (x, ldx, w, bias, window, out, ldo, batch, length, channels, silu)
        var total = a[at + 7] * a[at + 9]
        if total > 0 and a[at + 8] > 0:
            ctx.enqueue_function[ssm_conv_kernel](
                host_ptr[F](a[at]), Int32(a[at + 1]), host_ptr[F](a[at + 2]), host_ptr[F](a[at + 3]),
                host_ptr[F](a[at + 4]), host_ptr[F](a[at + 5]), Int32(a[at + 6]), Int32(a[at + 7]),
                Int32(a[at + 8]), Int32(a[at + 9]), Int32(a[at + 10]),
                grid_dim=blocks_1d(total), block_dim=B1,
            )
    elif op == OP_SSM_SOFTPLUS:  # (x, ldx, bias, out, ldo, rows, n, clamp, lo_bits, hi_bits)
        var total = a[at + 5] * a[at + 6]
        if total > 0:
            ctx.enqueue_function[ssm_softplus_kernel](
                host_ptr[F](a[at]), Int32(a[at + 1]), host_ptr[F](a[at + 2]), host_ptr[F](a[at + 3]),
                Int32(a[at + 4]), Int32(a[at + 5]), Int32(a[at + 6]), Int32(a[at + 7]),
                _f32(a[at + 8]), _f32(a[at + 9]), grid_dim=blocks_1d(total), block_dim=B1,
            )
    elif op == OP_SSM_NEG_EXP:  # (x, out, n)
        var n = a[at + 2]
        if n > 0:
            ctx.enqueue_function[ssm_neg_exp_kernel](
                host_ptr[F](a[at]), host_ptr[F](a[at + 1]), Int32(n),
                grid_dim=blocks_1d(n), block_dim=B1,
            )
    elif op == OP_SSM_MAMBA1_SCAN:  # (u, ldu, delta, ldd, a, bc, ldbc, b_off, c_off, d, z, ldz, h, out, ldo, batch, length, di, sabotage)
        if a[at + 18] != 0:
            raise Error("mojolearn._native_gpu: nn_program_dev: ssm_mamba1_scan's sabotage is "
                        "test support of the CPU run only; the device kernel has none")
        var total = a[at + 15] * a[at + 17]
        if total > 0 and a[at + 16] > 0:
            ctx.enqueue_function[mamba1_scan_kernel](
                host_ptr[F](a[at]), Int32(a[at + 1]), host_ptr[F](a[at + 2]), Int32(a[at + 3]),
                host_ptr[F](a[at + 4]), host_ptr[F](a[at + 5]), Int32(a[at + 6]), Int32(a[at + 7]),
                Int32(a[at + 8]), host_ptr[F](a[at + 9]), host_ptr[F](a[at + 10]),
                Int32(a[at + 11]), host_ptr[F](a[at + 12]), host_ptr[F](a[at + 13]),
                Int32(a[at + 14]), Int32(a[at + 15]), Int32(a[at + 16]), Int32(a[at + 17]),
                grid_dim=blocks_1d(total), block_dim=B1,
            )
    elif op == OP_SSM_MAMBA2_SSD_WS:  # (xbc, ldx, dt, a, d, z, ldz, h, open_x, open_dt, seg, cs, out, ldo, batch, length, heads, di, q0, gmat, ws)
        _ssd(ctx, a, at)
    else:
        raise Error(String("mojolearn._native_gpu: nn_program_dev: unknown op code ", op))


def _ssd(ctx: DeviceContext, a: List[Int], at: Int) raises:
    """The SSD's three launches in order (gram, unit, store_open), the Gram work and
    the per-thread scratch the driver's device buffers a[at + 19], a[at + 20]."""
    var batch = a[at + 14]
    var length = a[at + 15]
    var heads = a[at + 16]
    var q0 = a[at + 18]
    if q0 < 0 or q0 >= SSD_Q:
        raise Error(String("mojolearn._native_gpu: nn_program_dev: ssm_mamba2_ssd_ws: q0 ", q0,
                           " is not an open-row count < ", SSD_Q))
    if batch <= 0 or length <= 0:
        return
    var nch = (q0 + length + SSD_Q - 1) // SSD_Q
    var xbc = host_ptr[F](a[at])
    var ldx = Int32(a[at + 1])
    var dt = host_ptr[F](a[at + 2])
    var av = host_ptr[F](a[at + 3])
    var dv = host_ptr[F](a[at + 4])
    var z = host_ptr[F](a[at + 5])
    var ldz = Int32(a[at + 6])
    var h = host_ptr[F](a[at + 7])
    var ox = host_ptr[F](a[at + 8])
    var odt = host_ptr[F](a[at + 9])
    var seg = host_ptr[F](a[at + 10])
    var cs = host_ptr[F](a[at + 11])
    var g = host_ptr[F](a[at + 12])
    var ldo = Int32(a[at + 13])
    var gm = host_ptr[F](a[at + 19])
    var ws = host_ptr[F](a[at + 20])
    var di = Int32(a[at + 17])
    ctx.enqueue_function[ssd_gram_kernel](
        xbc, ldx, dt, av, dv, z, ldz, h, ox, odt, seg, cs, g, ldo, gm, Int32(batch), Int32(length),
        Int32(heads), di, Int32(q0), grid_dim=blocks_1d(batch * nch * SSD_Q), block_dim=B1,
    )
    if heads > 0:
        ctx.enqueue_function[ssd_unit_kernel](
            xbc, ldx, dt, av, dv, z, ldz, h, ox, odt, seg, cs, g, ldo, gm, Int32(batch),
            Int32(length), Int32(heads), di, Int32(q0), ws,
            grid_dim=blocks_1d(batch * heads), block_dim=B1,
        )
    ctx.enqueue_function[ssd_store_open_kernel](
        xbc, ldx, dt, av, dv, z, ldz, h, ox, odt, seg, cs, g, ldo, gm, Int32(batch), Int32(length),
        Int32(heads), di, Int32(q0), grid_dim=blocks_1d(batch * SSD_Q), block_dim=B1,
    )


def _gemm_int15(
    ctx: DeviceContext, ahi: Int, alo: Int, ea: Int, bhi: Int, blo: Int, eb: Int, c: Int,
    m: Int, n: Int, k: Int,
) raises:
    """int15i64.v1 on device-resident operands: gemm/gpu's integer kernels for this
    device (launch._int_launches: NVIDIA mma, AMD MFMA, the SIMT kernel elsewhere),
    enqueued on the program's context without copies or a wait."""
    if m == 0 or n == 0:
        return
    _int_launches[2](ctx, host_ptr[I8](ahi), host_ptr[I8](alo), host_ptr[I32](ea),
                     host_ptr[I8](bhi), host_ptr[I8](blo), host_ptr[I32](eb), host_ptr[F](c),
                     m, n, k)

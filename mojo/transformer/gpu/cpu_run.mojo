"""The CPU run of the transformer GPU bodies (for the tests): the same bodies the
device kernels call, looped over the same coordinates under IEEE mode (DAZ and FTZ
off), so their bits can be checked on a machine without a GPU."""
from std.python import Python, PythonObject
from std.python.bindings import PythonModuleBuilder
from std.memory import bitcast
from common.ptr import F32Ptr, ptr_f32
from common.fpstate import enter_ieee_mode, leave_ieee_mode
from transformer.gpu.threads import (
    rmsnorm_thread, silu_mul_thread, add_thread, rope_table_thread, rope_thread, attention_thread,
    attention_scale, rope_log_theta,
)


def _arg(args: PythonObject, i: Int) raises -> Int:
    return Int(py=args[i])


def _f32(bits: Int) -> Float32:
    return bitcast[DType.float32, 1](SIMD[DType.uint32, 1](UInt32(bits)))[0]


def gpu_ref_nn_rmsnorm(args: PythonObject) raises -> PythonObject:
    """(x, w, out, rows, d, eps bits)."""
    var old = enter_ieee_mode()
    for r in range(_arg(args, 3)):
        rmsnorm_thread(ptr_f32(_arg(args, 0)), ptr_f32(_arg(args, 1)), ptr_f32(_arg(args, 2)),
                       _arg(args, 4), _f32(_arg(args, 5)), r)
    leave_ieee_mode(old)
    return PythonObject(None)


def gpu_ref_nn_silu_mul(args: PythonObject) raises -> PythonObject:
    """(g, u, ld_in, out, ld_out, rows, n)."""
    var old = enter_ieee_mode()
    for r in range(_arg(args, 5)):
        for j in range(_arg(args, 6)):
            silu_mul_thread(ptr_f32(_arg(args, 0)), ptr_f32(_arg(args, 1)), _arg(args, 2),
                            ptr_f32(_arg(args, 3)), _arg(args, 4), r, j)
    leave_ieee_mode(old)
    return PythonObject(None)


def gpu_ref_nn_add(args: PythonObject) raises -> PythonObject:
    """(x, ldx, y, ldy, out, ldo, rows, n)."""
    var old = enter_ieee_mode()
    for r in range(_arg(args, 6)):
        for j in range(_arg(args, 7)):
            add_thread(ptr_f32(_arg(args, 0)), _arg(args, 1), ptr_f32(_arg(args, 2)), _arg(args, 3),
                       ptr_f32(_arg(args, 4)), _arg(args, 5), r, j)
    leave_ieee_mode(old)
    return PythonObject(None)


def gpu_ref_nn_rope_table(args: PythonObject) raises -> PythonObject:
    """(cos, sin, npos, head_dim, theta bits)."""
    var old = enter_ieee_mode()
    var log_theta = rope_log_theta(_f32(_arg(args, 4)))
    for p in range(_arg(args, 2)):
        for i in range(_arg(args, 3) // 2):
            rope_table_thread(ptr_f32(_arg(args, 0)), ptr_f32(_arg(args, 1)), _arg(args, 3),
                              log_theta, p, i)
    leave_ieee_mode(old)
    return PythonObject(None)


def gpu_ref_nn_rope(args: PythonObject) raises -> PythonObject:
    """(src, lds, dst, ldd, dhs, n_heads, head_dim, cos, sin, pos0, length, rows, transposed, tmax,
    rot_dim)."""
    var old = enter_ieee_mode()
    var nh = _arg(args, 5)
    var hd = _arg(args, 6)
    for r in range(_arg(args, 11)):
        for h in range(nh):
            for j in range(hd):
                rope_thread(ptr_f32(_arg(args, 0)), _arg(args, 1), ptr_f32(_arg(args, 2)),
                            _arg(args, 3), _arg(args, 4), hd, ptr_f32(_arg(args, 7)),
                            ptr_f32(_arg(args, 8)), _arg(args, 9), _arg(args, 10),
                            _arg(args, 12) != 0, nh, _arg(args, 13), r, h, j, _arg(args, 14))
    leave_ieee_mode(old)
    return PythonObject(None)


def gpu_ref_nn_attention(args: PythonObject) raises -> PythonObject:
    """(q, ldq, kt, v, out, ws, batch, length, n_heads, n_kv, head_dim, pos0, tmax, fixed15)."""
    var old = enter_ieee_mode()
    var batch = _arg(args, 6)
    var length = _arg(args, 7)
    var nh = _arg(args, 8)
    var nkeys = _arg(args, 11) + length
    var scale = attention_scale(_arg(args, 10))
    var t = 0
    for b in range(batch):
        for h in range(nh):
            for i in range(length):
                attention_thread(ptr_f32(_arg(args, 0)), _arg(args, 1), ptr_f32(_arg(args, 2)),
                                 ptr_f32(_arg(args, 3)), ptr_f32(_arg(args, 4)),
                                 ptr_f32(_arg(args, 5)).unsafe_offset(t * nkeys), length, nh,
                                 _arg(args, 9), _arg(args, 10), _arg(args, 11), _arg(args, 12),
                                 _arg(args, 13) != 0, scale, b, h, i)
                t += 1
    leave_ieee_mode(old)
    return PythonObject(None)


def register_nn_gpu_reference(mut m: PythonModuleBuilder) raises:
    m.def_function[gpu_ref_nn_rmsnorm]("gpu_ref_nn_rmsnorm")
    m.def_function[gpu_ref_nn_silu_mul]("gpu_ref_nn_silu_mul")
    m.def_function[gpu_ref_nn_add]("gpu_ref_nn_add")
    m.def_function[gpu_ref_nn_rope_table]("gpu_ref_nn_rope_table")
    m.def_function[gpu_ref_nn_rope]("gpu_ref_nn_rope")
    m.def_function[gpu_ref_nn_attention]("gpu_ref_nn_attention")

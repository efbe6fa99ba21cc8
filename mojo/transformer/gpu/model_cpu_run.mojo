"""Test support: the model ops' GPU bodies (model_threads.mojo) run on the CPU, the
gpu_ref_nn_gather / kv_append / sample / argmax entries of the CPU extension: the same
bodies the device kernels call, in plain loops over the kernels' coordinates, under
IEEE mode (DAZ and FTZ off, as on a GPU). With the other gpu_ref_* entries they are
the reference backend of the GPU model driver (python/mojolearn/models/_gpu.py),
so a whole model runs through the GPU bodies on a machine without a GPU.

ENTRIES (one tuple of ints each; Python has validated every argument)
    gpu_ref_nn_gather((table, ids, out, rows, d))
    gpu_ref_nn_kv_append((src, lds, dst, n_heads, head_dim, pos0, length, rows, tmax))
    gpu_ref_nn_sample((x, rows, n, r, out))
    gpu_ref_nn_argmax((x, rows, n, out))
"""
from std.python import PythonObject
from std.python.bindings import PythonModuleBuilder
from common.ptr import ptr_f32, ptr_u32, ptr_i64
from common.fpstate import enter_ieee_mode, leave_ieee_mode
from transformer.gpu.model_threads import (
    F64Ptr, gather_thread, kv_append_thread, sample_thread, argmax_thread,
)


def _arg(args: PythonObject, i: Int) raises -> Int:
    return Int(py=args[i])


def gpu_ref_nn_gather(args: PythonObject) raises -> PythonObject:
    """(table, ids, out, rows, d): M-2, table rows ids[r] copied into out (bits)."""
    var table = ptr_u32(_arg(args, 0))
    var ids = ptr_i64(_arg(args, 1))
    var out = ptr_u32(_arg(args, 2))
    var rows = _arg(args, 3)
    var d = _arg(args, 4)
    for r in range(rows):
        for j in range(d):
            gather_thread(table, ids, out, d, r, j)
    return PythonObject(None)


def gpu_ref_nn_kv_append(args: PythonObject) raises -> PythonObject:
    """(src, lds, dst, n_heads, head_dim, pos0, length, rows, tmax): the values of a
    call into the value cache (bits)."""
    var src = ptr_u32(_arg(args, 0))
    var lds = _arg(args, 1)
    var dst = ptr_u32(_arg(args, 2))
    var nh = _arg(args, 3)
    var hd = _arg(args, 4)
    var pos0 = _arg(args, 5)
    var length = _arg(args, 6)
    var rows = _arg(args, 7)
    var tmax = _arg(args, 8)
    for r in range(rows):
        for h in range(nh):
            for j in range(hd):
                kv_append_thread(src, lds, dst, nh, hd, pos0, length, tmax, r, h, j)
    return PythonObject(None)


def gpu_ref_nn_sample(args: PythonObject) raises -> PythonObject:
    """(x, rows, n, r, out): M-32, one token per row (float64 draws r, int64 out)."""
    var x = ptr_f32(_arg(args, 0))
    var rows = _arg(args, 1)
    var n = _arg(args, 2)
    var r = F64Ptr(unsafe_from_address=_arg(args, 3))
    var out = ptr_i64(_arg(args, 4))
    var old = enter_ieee_mode()
    for i in range(rows):
        sample_thread(x, n, r, out, i)
    leave_ieee_mode(old)
    return PythonObject(None)


def gpu_ref_nn_argmax(args: PythonObject) raises -> PythonObject:
    """(x, rows, n, out): the first largest logit of each row (int64 out)."""
    var x = ptr_f32(_arg(args, 0))
    var rows = _arg(args, 1)
    var n = _arg(args, 2)
    var out = ptr_i64(_arg(args, 3))
    var old = enter_ieee_mode()
    for i in range(rows):
        argmax_thread(x, n, out, i)
    leave_ieee_mode(old)
    return PythonObject(None)


def register_model_gpu_reference(mut m: PythonModuleBuilder) raises:
    """Add the model ops' gpu_ref_* entries to the CPU extension module."""
    m.def_function[gpu_ref_nn_gather]("gpu_ref_nn_gather")
    m.def_function[gpu_ref_nn_kv_append]("gpu_ref_nn_kv_append")
    m.def_function[gpu_ref_nn_sample]("gpu_ref_nn_sample")
    m.def_function[gpu_ref_nn_argmax]("gpu_ref_nn_argmax")

"""The GPU build's entries for the GPU model (registered by mojo/_native_gpu.mojo):
device memory, and one PROGRAM of ops run on one device context.

ENTRIES (one tuple each; the Python driver, python/mojolearn/models/_gpu.py, has
validated every argument; addresses of device memory come from dev_alloc)
    dev_alloc((nbytes,)) -> address          dev_free((address, nbytes))
    dev_upload((dst_dev, src_host, nbytes))  dev_download((dst_host, src_dev, nbytes))
    dev_zero((address, nbytes))              dev_memory(()) -> (free, total)
    nn_program_dev((ops,)): ops a list of tuples (name, arg, ...): the name of a
        gpu_ref_* entry of the CPU extension without its prefix and that entry's
        arguments (model_launch.mojo; the training step's train_* ops:
        train/gpu/launch.mojo). The list is read first (names to codes), then
        the GIL is released and every op is enqueued in order on one context, which
        is waited for before the call returns.

ERRORS
    No driver or device, an unknown op name and any failing launch raise an Exception
    whose text starts "mojolearn._native_gpu:"; nothing falls back to the CPU.
"""
from std.python import Python, PythonObject
from max.gpu.host import DeviceContext
import transformer.gpu.model_launch as M
import train.gpu.launch as TL


def _arg(args: PythonObject, i: Int) raises -> Int:
    return Int(py=args[i])


def _first_line(e: Error) -> String:
    var s = String(e)
    var nl = s.find("\n")
    if nl >= 0:
        return String(s[byte=0:nl])
    return s


def _context() raises -> DeviceContext:
    try:
        return DeviceContext()
    except e:
        raise Error(String("mojolearn._native_gpu: no usable GPU (", _first_line(e), ")"))


def _fail(what: String, e: Error) -> Error:
    var msg = String(e)
    if msg.startswith("mojolearn._native_gpu:"):
        return Error(msg)
    return Error(String("mojolearn._native_gpu: ", what, " failed: ", _first_line(e)))


def op_code(name: String) raises -> Int:
    """The code of a program op from its name (the gpu_ref_* entry's name without
    the prefix)."""
    if name == "nn_gather":
        return M.OP_GATHER
    if name == "nn_rmsnorm":
        return M.OP_RMSNORM
    if name == "nn_rope_table":
        return M.OP_ROPE_TABLE
    if name == "nn_rope":
        return M.OP_ROPE
    if name == "nn_kv_append":
        return M.OP_KV_APPEND
    if name == "nn_attention":
        return M.OP_ATTENTION
    if name == "nn_silu_mul":
        return M.OP_SILU_MUL
    if name == "nn_add":
        return M.OP_ADD
    if name == "nn_sample":
        return M.OP_SAMPLE
    if name == "nn_argmax":
        return M.OP_ARGMAX
    if name == "gemm_f32":
        return M.OP_GEMM_F32
    if name == "gemm_int15":
        return M.OP_GEMM_INT15
    if name == "quantize_int15":
        return M.OP_QUANTIZE_INT15
    if name == "dequantize_int8":
        return M.OP_DEQUANTIZE_INT8
    if name == "ssm_norm_lanes":
        return M.OP_SSM_NORM_LANES
    if name == "ssm_conv":
        return M.OP_SSM_CONV
    if name == "ssm_softplus":
        return M.OP_SSM_SOFTPLUS
    if name == "ssm_neg_exp":
        return M.OP_SSM_NEG_EXP
    if name == "ssm_mamba1_scan":
        return M.OP_SSM_MAMBA1_SCAN
    if name == "ssm_mamba2_ssd_ws":
        return M.OP_SSM_MAMBA2_SSD_WS
    var t = TL.train_op_code(name)
    if t >= 0:
        return t
    raise Error(String("mojolearn._native_gpu: nn_program_dev: unknown op ", name))


def dev_alloc(args: PythonObject) raises -> PythonObject:
    """(nbytes): a new device allocation; returns its address."""
    var n = _arg(args, 0)
    var out = 0
    ref c = Python().cpython()
    var st = c.PyEval_SaveThread()
    var err = String()
    try:
        out = M.dev_alloc(_context(), n)
    except e:
        err = String(_fail("dev_alloc", e))
    c.PyEval_RestoreThread(st)
    if err:
        raise Error(err)
    return PythonObject(out)


def dev_free(args: PythonObject) raises -> PythonObject:
    """(address, nbytes): free an allocation of dev_alloc."""
    var a = _arg(args, 0)
    var n = _arg(args, 1)
    ref c = Python().cpython()
    var st = c.PyEval_SaveThread()
    var err = String()
    try:
        M.dev_free(_context(), a, n)
    except e:
        err = String(_fail("dev_free", e))
    c.PyEval_RestoreThread(st)
    if err:
        raise Error(err)
    return PythonObject(None)


def dev_upload(args: PythonObject) raises -> PythonObject:
    """(dst_dev, src_host, nbytes): host to device copy, waited for."""
    var d = _arg(args, 0)
    var s = _arg(args, 1)
    var n = _arg(args, 2)
    ref c = Python().cpython()
    var st = c.PyEval_SaveThread()
    var err = String()
    try:
        M.dev_upload(_context(), d, s, n)
    except e:
        err = String(_fail("dev_upload", e))
    c.PyEval_RestoreThread(st)
    if err:
        raise Error(err)
    return PythonObject(None)


def dev_download(args: PythonObject) raises -> PythonObject:
    """(dst_host, src_dev, nbytes): device to host copy, waited for."""
    var d = _arg(args, 0)
    var s = _arg(args, 1)
    var n = _arg(args, 2)
    ref c = Python().cpython()
    var st = c.PyEval_SaveThread()
    var err = String()
    try:
        M.dev_download(_context(), d, s, n)
    except e:
        err = String(_fail("dev_download", e))
    c.PyEval_RestoreThread(st)
    if err:
        raise Error(err)
    return PythonObject(None)


def dev_zero(args: PythonObject) raises -> PythonObject:
    """(address, nbytes): set device memory to zero bytes."""
    var a = _arg(args, 0)
    var n = _arg(args, 1)
    ref c = Python().cpython()
    var st = c.PyEval_SaveThread()
    var err = String()
    try:
        M.dev_zero(_context(), a, n)
    except e:
        err = String(_fail("dev_zero", e))
    c.PyEval_RestoreThread(st)
    if err:
        raise Error(err)
    return PythonObject(None)


def dev_memory(args: PythonObject) raises -> PythonObject:
    """(): (free, total) bytes of the device's memory."""
    var fm = M.dev_memory(_context())
    return Python.tuple(PythonObject(fm[0]), PythonObject(fm[1]))


def nn_program_dev(args: PythonObject) raises -> PythonObject:
    """(ops): run a program of ops (see the module docstring) on one context."""
    var ops = args[0]
    var n = Int(py=len(ops))
    var flat = List[Int]()  # per op: code, argument count, then the arguments
    for i in range(n):
        var op = ops[i]
        var k = Int(py=len(op))
        flat.append(op_code(String(py=op[0])))
        flat.append(k - 1)
        for j in range(1, k):
            flat.append(Int(py=op[j]))
    ref c = Python().cpython()
    var st = c.PyEval_SaveThread()
    var err = String()
    try:
        var ctx = _context()
        var at = 0
        while at < len(flat):
            if flat[at] >= TL.TRAIN_BASE:
                TL.run_train_op(ctx, flat[at], flat, at + 2)
            else:
                M.run_op(ctx, flat[at], flat, at + 2)
            at += 2 + flat[at + 1]
        ctx.synchronize()
    except e:
        err = String(_fail("nn_program_dev", e))
    c.PyEval_RestoreThread(st)
    if err:
        raise Error(err)
    return PythonObject(None)

"""The GPU build of the mojolearn extension: module `mojolearn._native_gpu`.

    mojo build mojo/_native_gpu.mojo -I mojo --emit shared-lib \\
        --target-accelerator sm_90 -o python/mojolearn/_native_gpu.so -Xlinker '-rpath=$ORIGIN'

(sm_80 / sm_90 for NVIDIA, gfx942 for AMD; see bench/device_check.sh.)

WHAT IT IS
    The same entries, with the same tuple-of-ints arguments, as the CPU module
    mojolearn._native (to_bf16, from_bf16, quantize_int8, quantize_int15,
    dequantize_int8, dequantize_int15, gemm_f32, gemm_int8, gemm_int15,
    strided_copy, mxcsr), so MOJOLEARN_NATIVE=_native_gpu serves mojolearn from
    the GPU; plus device_info(()) -> (api, device name), api being "cuda", "hip"
    or "metal"; vendor_blas(()) -> (library, file, reason), the vendor BLAS that
    numeric_mode fast runs here (mojo/gemm/gpu/vendor.mojo); and the GPU model's entries (dev_alloc, dev_free, dev_upload,
    dev_download, dev_zero, dev_memory, nn_program_dev: device memory and one
    program of ops on device-resident operands, transformer/gpu/model_entry.mojo).
    The kernels are mojo/gemm/gpu/kernels.mojo and
    mojo/convert/gpu/kernels.mojo, each launched by the launch.mojo beside it:
    every call copies its inputs to the device, launches, and copies the result
    back before it returns.

NUMERIC MODES
    gemm_f32 and gemm_f32_resident take the mode code (mojolearn.modes.kernel_code):
    0 identical and 1 deterministic run the identical kernels; 2 fast runs the
    vendor's sgemm (cuBLAS / rocBLAS, strict float32) on NVIDIA and AMD builds, and
    3 (fast with TF32 allowed by the caller) cuBLAS with TF32 on NVIDIA, rocBLAS's
    float32 on AMD. A build without a vendor BLAS (Apple) and every product with
    k = 0 run the identical kernels in every mode. A vendor library that cannot be
    loaded is an error naming it, never a quiet switch to other kernels.

ARGUMENTS THE GPU IGNORES
    `tasks` (a CPU thread count) and the workspace address / size of the GEMMs
    (the GEMM entries return 0 bytes needed). `sabotage` (conformance
    --sabotage only) flips the low bit of C[0, 0] so that run must fail.

ERRORS
    No driver, no device, or a failing launch raise an Exception whose text
    starts "mojolearn._native_gpu:" and gives the runtime's reason; nothing
    falls back to the CPU silently.
"""
from std.python import Python, PythonObject
from std.python.bindings import PythonModuleBuilder
from std.os import abort
from max.gpu.host import DeviceContext
from common.ptr import ptr_u8, ptr_u32
from common.fpstate import read_mxcsr
import gemm.gpu.launch as G
import convert.gpu.launch as C
import transformer.gpu.launch as T
import gemm.gpu.vendor as V
from transformer.gpu.model_entry import (
    dev_alloc, dev_free, dev_upload, dev_download, dev_zero, dev_memory, nn_program_dev,
)


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


def _flip_low_bit(c_addr: Int):
    """conformance --sabotage only."""
    var c = ptr_u32(c_addr)
    c.unsafe_store(0, c.unsafe_load(0) ^ 1)


# ---------------------------------------------------------------- device
def device_info(args: PythonObject) raises -> PythonObject:
    """() -> (api, device name); raises with the runtime's reason when no GPU can
    be opened (no driver, no device, wrong vendor for this build)."""
    var ctx = _context()
    var api = String(ctx.api())
    var name = String(ctx.name())
    return Python.tuple(PythonObject(api), PythonObject(name))


# ---------------------------------------------------------------- converters
def to_bf16(args: PythonObject) raises -> PythonObject:
    """Arguments: (src f32 addr, dst u16 addr, n, tasks)."""
    var src = _arg(args, 0)
    var dst = _arg(args, 1)
    var n = _arg(args, 2)
    ref c = Python().cpython()
    var st = c.PyEval_SaveThread()
    var err = String()
    try:
        C.to_bf16(_context(), src, dst, n)
    except e:
        err = String(_fail("to_bf16", e))
    c.PyEval_RestoreThread(st)
    if err:
        raise Error(err)
    return PythonObject(None)


def from_bf16(args: PythonObject) raises -> PythonObject:
    """Arguments: (src u16 addr, dst f32 addr, n, tasks)."""
    var src = _arg(args, 0)
    var dst = _arg(args, 1)
    var n = _arg(args, 2)
    ref c = Python().cpython()
    var st = c.PyEval_SaveThread()
    var err = String()
    try:
        C.from_bf16(_context(), src, dst, n)
    except e:
        err = String(_fail("from_bf16", e))
    c.PyEval_RestoreThread(st)
    if err:
        raise Error(err)
    return PythonObject(None)


def quantize_int8(args: PythonObject) raises -> PythonObject:
    """Arguments: (src f32, codes i8, exps i32, m, k, tasks)."""
    var src = _arg(args, 0)
    var codes = _arg(args, 1)
    var exps = _arg(args, 2)
    var m = _arg(args, 3)
    var k = _arg(args, 4)
    ref c = Python().cpython()
    var st = c.PyEval_SaveThread()
    var err = String()
    try:
        C.quantize_int8(_context(), src, codes, exps, m, k)
    except e:
        err = String(_fail("quantize_int8", e))
    c.PyEval_RestoreThread(st)
    if err:
        raise Error(err)
    return PythonObject(None)


def quantize_int15(args: PythonObject) raises -> PythonObject:
    """Arguments: (src f32, hi i8, lo i8, exps i32, m, k, tasks)."""
    var src = _arg(args, 0)
    var hi = _arg(args, 1)
    var lo = _arg(args, 2)
    var exps = _arg(args, 3)
    var m = _arg(args, 4)
    var k = _arg(args, 5)
    ref c = Python().cpython()
    var st = c.PyEval_SaveThread()
    var err = String()
    try:
        C.quantize_int15(_context(), src, hi, lo, exps, m, k)
    except e:
        err = String(_fail("quantize_int15", e))
    c.PyEval_RestoreThread(st)
    if err:
        raise Error(err)
    return PythonObject(None)


def dequantize_int8(args: PythonObject) raises -> PythonObject:
    """Arguments: (codes i8, exps i32, dst f32, m, k, tasks)."""
    var codes = _arg(args, 0)
    var exps = _arg(args, 1)
    var dst = _arg(args, 2)
    var m = _arg(args, 3)
    var k = _arg(args, 4)
    ref c = Python().cpython()
    var st = c.PyEval_SaveThread()
    var err = String()
    try:
        C.dequantize_int8(_context(), codes, exps, dst, m, k)
    except e:
        err = String(_fail("dequantize_int8", e))
    c.PyEval_RestoreThread(st)
    if err:
        raise Error(err)
    return PythonObject(None)


def dequantize_int15(args: PythonObject) raises -> PythonObject:
    """Arguments: (hi i8, lo i8, exps i32, dst f32, m, k, tasks)."""
    var hi = _arg(args, 0)
    var lo = _arg(args, 1)
    var exps = _arg(args, 2)
    var dst = _arg(args, 3)
    var m = _arg(args, 4)
    var k = _arg(args, 5)
    ref c = Python().cpython()
    var st = c.PyEval_SaveThread()
    var err = String()
    try:
        C.dequantize_int15(_context(), hi, lo, exps, dst, m, k)
    except e:
        err = String(_fail("dequantize_int15", e))
    c.PyEval_RestoreThread(st)
    if err:
        raise Error(err)
    return PythonObject(None)


# ---------------------------------------------------------------- GEMMs
def _vendor_route(mode: Int, m: Int, n: Int, k: Int) -> Bool:
    """Whether a float32 product runs the vendor BLAS: numeric_mode fast (2, or 3 with
    TF32 allowed) on a build that has one, and a product with something to sum (k = 0
    and empty results stay with the identical kernels, which write +0.0)."""
    return (mode == 2 or mode == 3) and V.available() and m > 0 and n > 0 and k > 0


def vendor_blas(args: PythonObject) raises -> PythonObject:
    """() -> (library, file, reason): the vendor BLAS numeric_mode fast runs on this build
    ("cuBLAS", "rocBLAS", or "" where there is none) and the file it loaded, or "" and
    why it cannot be loaded here. Opens the library (once a success) and never aborts."""
    var got = V.library()
    return Python.tuple(PythonObject(got[0]), PythonObject(got[1]), PythonObject(got[2]))


def gemm_f32(args: PythonObject) raises -> PythonObject:
    """Arguments: (a, b, c, m, n, k, trans_a, trans_b, a_bf16, b_bf16, mode, tasks,
    sabotage, workspace address, workspace bytes). Returns 0 (no host workspace needed).
    mode 2 or 3 (fast): the vendor BLAS where this build has one (NUMERIC MODES)."""
    var a = _arg(args, 0)
    var b = _arg(args, 1)
    var cc = _arg(args, 2)
    var m = _arg(args, 3)
    var n = _arg(args, 4)
    var k = _arg(args, 5)
    var ta = _arg(args, 6) != 0
    var tb = _arg(args, 7) != 0
    var abf = _arg(args, 8) != 0
    var bbf = _arg(args, 9) != 0
    var vendor = _vendor_route(_arg(args, 10), m, n, k)
    var tf32 = _arg(args, 10) == 3
    var sabotage = _arg(args, 12) != 0
    if vendor:
        V.require()  # with the GIL held: the first look-up is never made by two threads
    ref c = Python().cpython()
    var st = c.PyEval_SaveThread()
    var err = String()
    try:
        if vendor:
            V.gemm_f32_host(_context(), a, b, cc, m, n, k, ta, tb, abf, bbf, tf32)
        else:
            G.gemm_f32(_context(), a, b, cc, m, n, k, ta, tb, abf, bbf)
    except e:
        err = String(_fail("gemm_f32", e))
    c.PyEval_RestoreThread(st)
    if err:
        raise Error(err)
    if sabotage and m > 0 and n > 0:
        _flip_low_bit(cc)
    return PythonObject(0)


def gemm_int8(args: PythonObject) raises -> PythonObject:
    """Arguments: (a codes, a exps, b codes, b exps, c, m, n, k, tasks, sabotage, ws, ws bytes)."""
    var a = _arg(args, 0)
    var ea = _arg(args, 1)
    var b = _arg(args, 2)
    var eb = _arg(args, 3)
    var cc = _arg(args, 4)
    var m = _arg(args, 5)
    var n = _arg(args, 6)
    var k = _arg(args, 7)
    var sabotage = _arg(args, 9) != 0
    ref c = Python().cpython()
    var st = c.PyEval_SaveThread()
    var err = String()
    try:
        G.gemm_int8(_context(), a, ea, b, eb, cc, m, n, k)
    except e:
        err = String(_fail("gemm_int8", e))
    c.PyEval_RestoreThread(st)
    if err:
        raise Error(err)
    if sabotage and m > 0 and n > 0:
        _flip_low_bit(cc)
    return PythonObject(0)


def gemm_int15(args: PythonObject) raises -> PythonObject:
    """Arguments: (a hi, a lo, a exps, b hi, b lo, b exps, c, m, n, k, tasks, sabotage, ws, ws bytes)."""
    var ahi = _arg(args, 0)
    var alo = _arg(args, 1)
    var ea = _arg(args, 2)
    var bhi = _arg(args, 3)
    var blo = _arg(args, 4)
    var eb = _arg(args, 5)
    var cc = _arg(args, 6)
    var m = _arg(args, 7)
    var n = _arg(args, 8)
    var k = _arg(args, 9)
    var sabotage = _arg(args, 11) != 0
    ref c = Python().cpython()
    var st = c.PyEval_SaveThread()
    var err = String()
    try:
        G.gemm_int15(_context(), ahi, alo, ea, bhi, blo, eb, cc, m, n, k)
    except e:
        err = String(_fail("gemm_int15", e))
    c.PyEval_RestoreThread(st)
    if err:
        raise Error(err)
    if sabotage and m > 0 and n > 0:
        _flip_low_bit(cc)
    return PythonObject(0)


# ---------------------------------------------------------------- device-resident operands
def gemm_f32_resident(args: PythonObject) raises -> PythonObject:
    """Arguments: (a, b, c, m, n, k, trans_a, trans_b, a_bf16, b_bf16, mode, sabotage),
    every address in this device's memory (DLPack device tensors, checked by the Python
    layer): gemm_f32 with no copy either way (mode as gemm_f32's); returns when C is
    written."""
    var a = _arg(args, 0)
    var b = _arg(args, 1)
    var cc = _arg(args, 2)
    var m = _arg(args, 3)
    var n = _arg(args, 4)
    var k = _arg(args, 5)
    var ta = _arg(args, 6) != 0
    var tb = _arg(args, 7) != 0
    var abf = _arg(args, 8) != 0
    var bbf = _arg(args, 9) != 0
    var vendor = _vendor_route(_arg(args, 10), m, n, k)
    var tf32 = _arg(args, 10) == 3
    var sabotage = _arg(args, 11) != 0
    if vendor:
        V.require()  # with the GIL held, as in gemm_f32
    ref c = Python().cpython()
    var st = c.PyEval_SaveThread()
    var err = String()
    try:
        if vendor:
            var ctx = _context()
            V.gemm_f32_device(ctx, a, b, cc, m, n, k, ta, tb, abf, bbf, tf32)
            if sabotage:
                V.flip_low_bit_device(ctx, cc)
        else:
            G.gemm_f32_resident(_context(), a, b, cc, m, n, k, ta, tb, abf, bbf, sabotage)
    except e:
        err = String(_fail("gemm_f32_resident", e))
    c.PyEval_RestoreThread(st)
    if err:
        raise Error(err)
    return PythonObject(0)


def gemm_int8_resident(args: PythonObject) raises -> PythonObject:
    """Arguments: (a codes, a exps, b codes, b exps, c, m, n, k), every address in this
    device's memory: int8i32.v1 with no copy either way; returns when C is written."""
    var cc = _arg(args, 4)
    ref c = Python().cpython()
    var st = c.PyEval_SaveThread()
    var err = String()
    try:
        G.gemm_int_resident(_context(), 1, _arg(args, 0), _arg(args, 0), _arg(args, 1), _arg(args, 2),
                            _arg(args, 2), _arg(args, 3), cc, _arg(args, 5), _arg(args, 6), _arg(args, 7))
    except e:
        err = String(_fail("gemm_int8_resident", e))
    c.PyEval_RestoreThread(st)
    if err:
        raise Error(err)
    return PythonObject(None)


def gemm_int15_resident(args: PythonObject) raises -> PythonObject:
    """Arguments: (a hi, a lo, a exps, b hi, b lo, b exps, c, m, n, k), every address in
    this device's memory: int15i64.v1 with no copy either way."""
    ref c = Python().cpython()
    var st = c.PyEval_SaveThread()
    var err = String()
    try:
        G.gemm_int_resident(_context(), 2, _arg(args, 0), _arg(args, 1), _arg(args, 2), _arg(args, 3),
                            _arg(args, 4), _arg(args, 5), _arg(args, 6), _arg(args, 7), _arg(args, 8),
                            _arg(args, 9))
    except e:
        err = String(_fail("gemm_int15_resident", e))
    c.PyEval_RestoreThread(st)
    if err:
        raise Error(err)
    return PythonObject(None)


def gemm_int15_quant_a_resident(args: PythonObject) raises -> PythonObject:
    """Arguments: (a f32, b hi, b lo, b exps, c, m, n, k), every address in this device's
    memory: a quantized to int15 on the device (W-1, W-2), then int15i64.v1 with b."""
    ref c = Python().cpython()
    var st = c.PyEval_SaveThread()
    var err = String()
    try:
        G.gemm_int15_quantize_a_resident(_context(), _arg(args, 0), _arg(args, 1), _arg(args, 2),
                                         _arg(args, 3), _arg(args, 4), _arg(args, 5), _arg(args, 6),
                                         _arg(args, 7))
    except e:
        err = String(_fail("gemm_int15_quant_a_resident", e))
    c.PyEval_RestoreThread(st)
    if err:
        raise Error(err)
    return PythonObject(None)


def nn_add_resident(args: PythonObject) raises -> PythonObject:
    """Arguments: (x, ldx, y, ldy, out, ldo, n, rows), addresses in this device's
    memory: out = ftz(x + y) row by row (ldy 0: one row y added to every row)."""
    var x = _arg(args, 0)
    var ldx = _arg(args, 1)
    var y = _arg(args, 2)
    var ldy = _arg(args, 3)
    var o = _arg(args, 4)
    var ldo = _arg(args, 5)
    var n = _arg(args, 6)
    var rows = _arg(args, 7)
    ref c = Python().cpython()
    var st = c.PyEval_SaveThread()
    var err = String()
    try:
        T.add_resident(_context(), x, ldx, y, ldy, o, ldo, n, rows)
    except e:
        err = String(_fail("nn_add_resident", e))
    c.PyEval_RestoreThread(st)
    if err:
        raise Error(err)
    return PythonObject(None)


# ---------------------------------------------------------------- host helpers
def strided_copy(args: PythonObject) raises -> PythonObject:
    """(src, dst, itemsize, ndim, shape list, byte strides list): gather a strided
    array into C order on the host (the CPU module's entry of the same name)."""
    var src = _arg(args, 0)
    var dst = ptr_u8(_arg(args, 1))
    var isz = _arg(args, 2)
    var nd = _arg(args, 3)
    var shape = List[Int]()
    var strides = List[Int]()
    var total = 1
    for d in range(nd):
        shape.append(Int(py=args[4][d]))
        strides.append(Int(py=args[5][d]))
        total *= shape[d]
    var pos = List[Int](length=nd, fill=0)
    var off = 0
    for o in range(total):
        var s = ptr_u8(src + off)
        for t in range(isz):
            dst.unsafe_store(o * isz + t, s.unsafe_load(t))
        # odometer step over the index, last axis fastest
        var d = nd - 1
        while d >= 0:
            pos[d] += 1
            off += strides[d]
            if pos[d] < shape[d]:
                break
            off -= pos[d] * strides[d]
            pos[d] = 0
            d -= 1
    return PythonObject(None)


def mxcsr(args: PythonObject) raises -> PythonObject:
    """The calling thread's MXCSR (the host side never changes it)."""
    return PythonObject(Int(read_mxcsr()))


@export
def PyInit__native_gpu() abi("C") -> PythonObject:
    try:
        var m = PythonModuleBuilder("_native_gpu")
        m.def_function[device_info]("device_info")
        m.def_function[vendor_blas]("vendor_blas")
        m.def_function[to_bf16]("to_bf16")
        m.def_function[from_bf16]("from_bf16")
        m.def_function[quantize_int8]("quantize_int8")
        m.def_function[quantize_int15]("quantize_int15")
        m.def_function[dequantize_int8]("dequantize_int8")
        m.def_function[dequantize_int15]("dequantize_int15")
        m.def_function[gemm_f32]("gemm_f32")
        m.def_function[gemm_int8]("gemm_int8")
        m.def_function[gemm_int15]("gemm_int15")
        m.def_function[gemm_f32_resident]("gemm_f32_resident")
        m.def_function[gemm_int8_resident]("gemm_int8_resident")
        m.def_function[gemm_int15_resident]("gemm_int15_resident")
        m.def_function[gemm_int15_quant_a_resident]("gemm_int15_quant_a_resident")
        m.def_function[nn_add_resident]("nn_add_resident")
        # the GPU model (transformer/gpu/model_entry.mojo): device memory and programs
        m.def_function[dev_alloc]("dev_alloc")
        m.def_function[dev_free]("dev_free")
        m.def_function[dev_upload]("dev_upload")
        m.def_function[dev_download]("dev_download")
        m.def_function[dev_zero]("dev_zero")
        m.def_function[dev_memory]("dev_memory")
        m.def_function[nn_program_dev]("nn_program_dev")
        m.def_function[strided_copy]("strided_copy")
        m.def_function[mxcsr]("mxcsr")
        return m.finalize()
    except e:
        abort(String("mojolearn._native_gpu: module init failed: ", e))

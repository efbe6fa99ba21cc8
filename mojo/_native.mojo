"""The mojolearn extension module: one entry per kernel, taking plain integers
(addresses, sizes, task count) from the Python layer, which has already
validated every argument. Each entry computes through common.tasks.run_tasks,
the one helper that releases the GIL, runs the tasks on the Mojo runtime's worker pool and sets
the contract floating-point state (DAZ on, FTZ off, round to nearest) around every
step, restoring the previous one.
"""
from std.python import PythonObject
from std.python.bindings import PythonModuleBuilder
from std.os import abort

from common.ptr import ptr_f32, ptr_u16, ptr_u32, ptr_i8, ptr_i32, ptr_i64, ptr_u8
from common.fpstate import read_mxcsr, write_mxcsr
from common.tasks import chunk_bounds, run_tasks
from convert.cpu.bf16 import narrow_chunk, widen_chunk
from convert.cpu.quant import (
    quantize_int8_rows,
    quantize_int15_rows,
    row_absmax_rows,
    dequantize_int8_rows,
    dequantize_int15_rows,
)
from gemm.cpu.entry import register_gemm
from gemm.cpu.prepared import register_prepared
from gemm.cpu.ksplit import register_ksplit
from gemm.cpu.blocking import block_table, W, cache_plan, set_cache_plan
from gemm.cpu.pack_f32 import transpose_sq
from std.collections import Array
from transformer.cpu.entry import register_nn
from ssm.cpu.entry import register_ssm
from train.cpu.entry import register_train
from train.cpu.model_entry import register_train_model
from train.cpu.ssm_entry import register_train_ssm
from train.cpu.ssd_entry import register_train_ssd
from transformer.gpu.cpu_run import register_nn_gpu_reference
from transformer.gpu.model_cpu_run import register_model_gpu_reference
from train.gpu.cpu_run import register_train_gpu_reference
from gemm.gpu.cpu_run import register_gemm_gpu_reference
from convert.gpu.cpu_run import register_convert_gpu_reference
from ssm.gpu.cpu_run import register_ssm_gpu_reference
from common.cpu import build_isa, request_amx_permission


def _arg(args: PythonObject, i: Int) raises -> Int:
    return Int(py=args[i])


# ---------------------------------------------------------------- converters
def to_bf16(args: PythonObject) raises -> PythonObject:
    """Arguments: (src f32 addr, dst u16 addr, n, tasks)."""
    var src = ptr_u32(_arg(args, 0))
    var dst = ptr_u16(_arg(args, 1))
    var n = _arg(args, 2)
    var tasks = max(1, min(_arg(args, 3), (n + 65535) // 65536))

    def work(t: Int) {imm src, imm dst, imm n, imm tasks}:
        var b = chunk_bounds(n, tasks, t, 64)
        narrow_chunk(src, dst, b[0], b[1])

    run_tasks(work, tasks)
    return PythonObject(None)


def from_bf16(args: PythonObject) raises -> PythonObject:
    """Arguments: (src u16 addr, dst f32 addr, n, tasks)."""
    var src = ptr_u16(_arg(args, 0))
    var dst = ptr_u32(_arg(args, 1))
    var n = _arg(args, 2)
    var tasks = max(1, min(_arg(args, 3), (n + 65535) // 65536))

    def work(t: Int) {imm src, imm dst, imm n, imm tasks}:
        var b = chunk_bounds(n, tasks, t, 64)
        widen_chunk(src, dst, b[0], b[1])

    run_tasks(work, tasks)
    return PythonObject(None)


def _row_tasks(m: Int, k: Int, tasks: Int) -> Int:
    return max(1, min(tasks, m, (m * k + 32767) // 32768))


def quantize_int8(args: PythonObject) raises -> PythonObject:
    """Arguments: (src f32, codes i8, exps i32, m, k, tasks)."""
    var src = ptr_u32(_arg(args, 0))
    var codes = ptr_i8(_arg(args, 1))
    var exps = ptr_i32(_arg(args, 2))
    var m = _arg(args, 3)
    var k = _arg(args, 4)
    var tasks = _row_tasks(m, k, _arg(args, 5))

    def work(t: Int) {imm src, imm codes, imm exps, imm m, imm k, imm tasks}:
        var b = chunk_bounds(m, tasks, t, 1)
        quantize_int8_rows(src, k, b[0], b[1], codes, exps)

    run_tasks(work, tasks)
    return PythonObject(None)


def quantize_int15(args: PythonObject) raises -> PythonObject:
    """Arguments: (src f32, hi i8, lo i8, exps i32, m, k, tasks)."""
    var src = ptr_u32(_arg(args, 0))
    var hi = ptr_i8(_arg(args, 1))
    var lo = ptr_i8(_arg(args, 2))
    var exps = ptr_i32(_arg(args, 3))
    var m = _arg(args, 4)
    var k = _arg(args, 5)
    var tasks = _row_tasks(m, k, _arg(args, 6))

    def work(t: Int) {imm src, imm hi, imm lo, imm exps, imm m, imm k, imm tasks}:
        var b = chunk_bounds(m, tasks, t, 1)
        quantize_int15_rows(src, k, b[0], b[1], hi, lo, exps)

    run_tasks(work, tasks)
    return PythonObject(None)


def row_absmax(args: PythonObject) raises -> PythonObject:
    """Arguments: (src f32, out u32, m, k, tasks). The absmax of each row as the
    quantizers read it (L-3: NaN and subnormals do not count), as the bits of |x|."""
    var src = ptr_u32(_arg(args, 0))
    var dst = ptr_u32(_arg(args, 1))
    var m = _arg(args, 2)
    var k = _arg(args, 3)
    var tasks = _row_tasks(m, k, _arg(args, 4))

    def work(t: Int) {imm src, imm dst, imm m, imm k, imm tasks}:
        var b = chunk_bounds(m, tasks, t, 1)
        row_absmax_rows(src, k, b[0], b[1], dst)

    run_tasks(work, tasks)
    return PythonObject(None)


def quantize_int8_part(args: PythonObject) raises -> PythonObject:
    """Arguments: (src f32, absmax u32, codes i8, exps i32, m, k, tasks). quantize_int8
    of rows that are columns of longer rows whose absmax bits are given (rule L-8)."""
    var src = ptr_u32(_arg(args, 0))
    var given = _arg(args, 1)
    var codes = ptr_i8(_arg(args, 2))
    var exps = ptr_i32(_arg(args, 3))
    var m = _arg(args, 4)
    var k = _arg(args, 5)
    var tasks = _row_tasks(m, k, _arg(args, 6))

    def work(t: Int) {imm src, imm given, imm codes, imm exps, imm m, imm k, imm tasks}:
        var b = chunk_bounds(m, tasks, t, 1)
        quantize_int8_rows(src, k, b[0], b[1], codes, exps, given)

    run_tasks(work, tasks)
    return PythonObject(None)


def quantize_int15_part(args: PythonObject) raises -> PythonObject:
    """Arguments: (src f32, absmax u32, hi i8, lo i8, exps i32, m, k, tasks).
    quantize_int15 of rows that are columns of longer rows (rule L-8)."""
    var src = ptr_u32(_arg(args, 0))
    var given = _arg(args, 1)
    var hi = ptr_i8(_arg(args, 2))
    var lo = ptr_i8(_arg(args, 3))
    var exps = ptr_i32(_arg(args, 4))
    var m = _arg(args, 5)
    var k = _arg(args, 6)
    var tasks = _row_tasks(m, k, _arg(args, 7))

    def work(t: Int) {imm src, imm given, imm hi, imm lo, imm exps, imm m, imm k, imm tasks}:
        var b = chunk_bounds(m, tasks, t, 1)
        quantize_int15_rows(src, k, b[0], b[1], hi, lo, exps, given)

    run_tasks(work, tasks)
    return PythonObject(None)


def dequantize_int8(args: PythonObject) raises -> PythonObject:
    """Arguments: (codes i8, exps i32, dst f32, m, k, tasks)."""
    var codes = ptr_i8(_arg(args, 0))
    var exps = ptr_i32(_arg(args, 1))
    var dst = ptr_f32(_arg(args, 2))
    var m = _arg(args, 3)
    var k = _arg(args, 4)
    var tasks = _row_tasks(m, k, _arg(args, 5))

    def work(t: Int) {imm codes, imm exps, imm dst, imm m, imm k, imm tasks}:
        var b = chunk_bounds(m, tasks, t, 1)
        dequantize_int8_rows(codes, k, b[0], b[1], exps, dst)

    run_tasks(work, tasks)
    return PythonObject(None)


def dequantize_int15(args: PythonObject) raises -> PythonObject:
    """Arguments: (hi i8, lo i8, exps i32, dst f32, m, k, tasks)."""
    var hi = ptr_i8(_arg(args, 0))
    var lo = ptr_i8(_arg(args, 1))
    var exps = ptr_i32(_arg(args, 2))
    var dst = ptr_f32(_arg(args, 3))
    var m = _arg(args, 4)
    var k = _arg(args, 5)
    var tasks = _row_tasks(m, k, _arg(args, 6))

    def work(t: Int) {imm hi, imm lo, imm exps, imm dst, imm m, imm k, imm tasks}:
        var b = chunk_bounds(m, tasks, t, 1)
        dequantize_int15_rows(hi, lo, k, b[0], b[1], exps, dst)

    run_tasks(work, tasks)
    return PythonObject(None)


@always_inline
def _copy2d[T: DType](src: Int, dst: Int, rows: Int, cols: Int, s0: Int, s1: Int):
    """dst (C-order rows x cols) = src with byte strides s0, s1 (a pure bit copy)."""
    var d = Pointer[Scalar[T], MutAnyOrigin](unsafe_from_address=dst)
    comptime TB = 32  # 32 x 32 tiles keep a transposed read inside the cache
    var i0 = 0
    while i0 < rows:
        var j0 = 0
        while j0 < cols:
            for j in range(j0, min(j0 + TB, cols)):
                for i in range(i0, min(i0 + TB, rows)):
                    var s = Pointer[Scalar[T], MutAnyOrigin](unsafe_from_address=src + i * s0 + j * s1)
                    d.unsafe_store(i * cols + j, s.unsafe_load(0))
            j0 += TB
        i0 += TB


def _copy2d_colmajor32(src: Int, dst: Int, rows: Int, cols: Int, s1: Int):
    """_copy2d for 4-byte elements stored column by column (element (i, j) at
    src + 4 i + j s1: numpy's x.T of a C-ordered array): W x W blocks, each read as W
    contiguous column pieces, transposed in registers and written as W contiguous row
    pieces; the edges element by element. The element-wise tiles of _copy2d touch a
    cache line per element on one side, and with a power-of-two stride all of them
    fall in one cache set."""
    var d = Pointer[Scalar[DType.uint32], MutAnyOrigin](unsafe_from_address=dst)
    var i0 = 0
    while i0 + W <= rows:
        var j0 = 0
        while j0 + W <= cols:
            var r = Array[SIMD[DType.uint32, W], W](fill=SIMD[DType.uint32, W](0))
            comptime for jj in range(W):
                r[jj] = Pointer[Scalar[DType.uint32], MutAnyOrigin](
                    unsafe_from_address=src + 4 * i0 + (j0 + jj) * s1).unsafe_load[width=W](0)
            transpose_sq(r)
            comptime for ii in range(W):
                d.unsafe_store((i0 + ii) * cols + j0, r[ii])
            j0 += W
        for i in range(i0, i0 + W):
            for j in range(j0, cols):
                var s = Pointer[Scalar[DType.uint32], MutAnyOrigin](unsafe_from_address=src + 4 * i + j * s1)
                d.unsafe_store(i * cols + j, s.unsafe_load(0))
        i0 += W
    for i in range(i0, rows):
        for j in range(cols):
            var s = Pointer[Scalar[DType.uint32], MutAnyOrigin](unsafe_from_address=src + 4 * i + j * s1)
            d.unsafe_store(i * cols + j, s.unsafe_load(0))


def _copy2d_any(src: Int, dst: Int, rows: Int, cols: Int, s0: Int, s1: Int, isz: Int):
    """One C-order rows x cols copy of items of isz bytes (1, 2, 4 or 8)."""
    if isz == 4 and s0 == 4 and rows > 1:
        _copy2d_colmajor32(src, dst, rows, cols, s1)
    elif isz == 4:
        _copy2d[DType.uint32](src, dst, rows, cols, s0, s1)
    elif isz == 2:
        _copy2d[DType.uint16](src, dst, rows, cols, s0, s1)
    elif isz == 1:
        _copy2d[DType.uint8](src, dst, rows, cols, s0, s1)
    else:
        _copy2d[DType.uint64](src, dst, rows, cols, s0, s1)


def strided_copy(args: PythonObject) raises -> PythonObject:
    """Arguments: (src, dst, itemsize, ndim, shape list, byte strides list): C-order gather."""
    var src = _arg(args, 0)
    var dst_addr = _arg(args, 1)
    var dst = ptr_u8(dst_addr)
    var isz = _arg(args, 2)
    var nd = _arg(args, 3)
    var shape = List[Int]()
    var strides = List[Int]()
    var total = 1
    for d in range(nd):
        shape.append(Int(py=args[4][d]))
        strides.append(Int(py=args[5][d]))
        total *= shape[d]
    if (nd >= 1) and (isz == 1 or isz == 2 or isz == 4 or isz == 8):
        # the last two dimensions as one 2-D copy per index of the leading ones
        var rows = shape[nd - 2] if nd >= 2 else 1
        var cols = shape[nd - 1]
        var s0 = strides[nd - 2] if nd >= 2 else 0
        var s1 = strides[nd - 1]
        var lead = List[Int](length=max(nd - 2, 0), fill=0)
        var mats = total // (rows * cols) if rows * cols > 0 else 0
        for t in range(mats):
            var off = 0
            for d in range(nd - 2):
                off += lead[d] * strides[d]
            _copy2d_any(src + off, dst_addr + t * rows * cols * isz, rows, cols, s0, s1, isz)
            var d = nd - 3
            while d >= 0:
                lead[d] += 1
                if lead[d] < shape[d]:
                    break
                lead[d] = 0
                d -= 1
        return PythonObject(None)
    var idx = List[Int](length=nd, fill=0)
    var o = 0
    for _ in range(total):
        var off = 0
        for d in range(nd):
            off += idx[d] * strides[d]
        var s = ptr_u8(src + off)
        for b in range(isz):
            dst.unsafe_store(o + b, s.unsafe_load(b))
        o += isz
        var d = nd - 1
        while d >= 0:
            idx[d] += 1
            if idx[d] < shape[d]:
                break
            idx[d] = 0
            d -= 1
    return PythonObject(None)


def mxcsr(args: PythonObject) raises -> PythonObject:
    """The calling thread's MXCSR (tests check the kernels restore it)."""
    return PythonObject(Int(read_mxcsr()))


def mxcsr_set(args: PythonObject) raises -> PythonObject:
    """Tests only: set the calling thread's MXCSR (e.g. with traps unmasked) and
    return the previous value."""
    var old = read_mxcsr()
    write_mxcsr(Int32(_arg(args, 0)))
    return PythonObject(Int(old))


def blocking(args: PythonObject) raises -> PythonObject:
    """This build's block-size table (gemm/cpu/blocking.mojo) as "NAME=value;..."
    (mojolearn._native_info.blocking() turns it into a dict)."""
    var out = String()
    for e in block_table(cache_plan()):
        if out.byte_length() > 0:
            out += ";"
        out += e[0] + "=" + String(e[1])
    return PythonObject(out)


def set_cache_sizes(args: PythonObject) raises -> PythonObject:
    """Arguments: (L1d, L2, L3) in bytes, 0 where unknown. Makes this process's cache
    plan for them (gemm/cpu/blocking.mojo: plan_for) and returns nothing; blocking()
    then reports it. The loader calls it once with the sizes sysfs reports; the tests
    call it to run the kernels on other plans (no plan can change a bit)."""
    var sizes = List[Int]()
    for i in range(3):
        var v = _arg(args, i)
        if v < 0 or v > (1 << 40):
            raise Error("set_cache_sizes: a cache size outside [0, 2**40] bytes: " + String(v))
        sizes.append(v)
    _ = set_cache_plan(sizes[0], sizes[1], sizes[2])
    return PythonObject(None)


def isa(args: PythonObject) raises -> PythonObject:
    """The instruction sets this build's kernels use (e.g. 'avx2', 'avx512vnni')."""
    return PythonObject(build_isa())


@export
def PyInit__native() abi("C") -> PythonObject:
    try:
        if not request_amx_permission():
            abort("mojolearn._native: Linux refused AMX tile data to this process "
                  "(arch_prctl ARCH_REQ_XCOMP_PERM); use MOJOLEARN_ISA=v4")
        var m = PythonModuleBuilder("_native")
        m.def_function[to_bf16]("to_bf16")
        m.def_function[from_bf16]("from_bf16")
        m.def_function[quantize_int8]("quantize_int8")
        m.def_function[quantize_int15]("quantize_int15")
        m.def_function[row_absmax]("row_absmax")
        m.def_function[quantize_int8_part]("quantize_int8_part")
        m.def_function[quantize_int15_part]("quantize_int15_part")
        m.def_function[dequantize_int8]("dequantize_int8")
        m.def_function[dequantize_int15]("dequantize_int15")
        m.def_function[strided_copy]("strided_copy")
        m.def_function[mxcsr]("mxcsr")
        m.def_function[mxcsr_set]("mxcsr_set")
        m.def_function[isa]("isa")
        m.def_function[blocking]("blocking")
        m.def_function[set_cache_sizes]("set_cache_sizes")
        register_gemm(m)
        register_prepared(m)
        register_ksplit(m)
        register_nn(m)
        register_ssm(m)
        register_train(m)
        register_train_model(m)
        register_train_ssm(m)
        register_train_ssd(m)
        register_nn_gpu_reference(m)
        register_model_gpu_reference(m)
        register_train_gpu_reference(m)
        register_gemm_gpu_reference(m)
        register_convert_gpu_reference(m)
        register_ssm_gpu_reference(m)
        return m.finalize()
    except e:
        abort(String("mojolearn._native: module init failed: ", e))

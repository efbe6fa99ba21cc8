"""numeric_mode fast on the GPU build: float32 products on the vendor's BLAS.

WHAT RUNS
    NVIDIA  cuBLAS `cublasGemmEx` on float32 A, B and C with `CUBLAS_COMPUTE_32F` and
            the handle's math mode `CUBLAS_DEFAULT_MATH`: strict float32 (the SIMT
            sgemm kernels; what `cublasSgemm` runs and what torch.mm runs with
            `allow_tf32 = False`). Only when the caller allowed TF32 (kernel mode 3,
            mojolearn.modes.allow_tf32) is it `CUBLAS_COMPUTE_32F_FAST_TF32` with
            `CUBLAS_TF32_TENSOR_OP_MATH`.
    AMD     rocBLAS `rocblas_sgemm`. rocBLAS computes float32 in float32 unless
            `rocblas_set_math_mode` asks for XF32; MAX's binding has no such call and
            nothing here makes one, so the TF32 permission changes nothing on AMD.
    other   (Apple / Metal) no vendor BLAS: `available()` is False and the caller
            runs the identical kernels.
    A bf16 operand (uint16 bits) is widened exactly on the device (rule L-1, the
    converters' from_bf16_kernel) into a temporary float32 buffer first, so a bf16
    product is the vendor's sgemm on the widened values. k = 0 is never sent here
    (the caller runs the identical kernels, which write +0.0).

LAYOUT
    The BLAS is column-major; a row-major (m, n) C = A B is the column-major (n, m)
    C^T = B^T A^T, so the call is gemm(op_b, op_a, n, m, k, B, ldb, A, lda, C, n):
    B (k, n) row-major is B^T column-major with ld n (op N); B (n, k) (trans_b) is
    op T with ld k; A (m, k) is A^T with ld k (op N); A (k, m) (trans_a) is op T with
    ld m. Sizes and leading dimensions are 32-bit: anything larger is refused.

THE LIBRARY
    MAX's bindings (packages _cublas and _rocblas) open the library themselves on
    first use, but a library or symbol they cannot find ABORTS the process (seen:
    "ABORT: ... symbol not found: cublasCreate_v2"). So `library()` first opens it
    here under the names the binding tries, in its order, taking the first file that
    opens as the binding does, and checks that it has every symbol this route calls
    (a file that opens but lacks one is refused, not skipped: the binding would stop
    at it too); only then are the bindings used. That file is kept open for the
    process (never closed), so the binding finds the same one.
    The outcome of a success is remembered in the Mojo runtime's global table; a
    failure is looked for again on the next call (a library loaded later, e.g. by
    torch, is then found).

HANDLES
    One BLAS handle per host thread (neither vendor promises a shared handle across
    threads), created on the thread's first call, kept for the process in the Mojo
    runtime's global table, and bound to the call's stream on every call.

Nothing here is an identical kernel: the bits are the vendor's, with no promise
across vendors, versions or runs (numeric_mode fast).
"""
from std.ffi import OwnedDLHandle, external_call, _get_global_or_null
from std.memory.alloc import unsafe_alloc
from std.sys.info import _accelerator_arch
from max.gpu.host import DeviceContext, DeviceBuffer
from common.ptr import F32Ptr, U16Ptr, U32Ptr
from common.gpu import host_ptr, blocks_1d, B1
from convert.gpu.kernels import from_bf16_kernel
from gemm.gpu.kernels import flip_low_bit_kernel

from max.gpu.host._nvidia_cuda import CUDA
from _cublas.cublas import (
    cublasCreate,
    cublasSetStream,
    cublasSetMathMode,
    cublasGemmEx,
    cublasMath_t,
    cublasOperation_t,
    ComputeType,
    Algorithm,
    check_cublas_error,
)
from _cublas.dtype import DataType as CuDataType

from max.gpu.host._amdgpu_hip import HIP
import _rocblas
from _rocblas.rocblas import rocblas_create_handle, rocblas_set_stream, rocblas_sgemm
from _rocblas.types import Handle as RocHandle, Operation as RocOperation

comptime ARCH = _accelerator_arch()
comptime IS_NVIDIA = ARCH.startswith("sm_") or ARCH.startswith("nvidia")
comptime IS_AMD = ARCH.startswith("gfx") or ARCH.startswith("amdgpu")

comptime CuHandle = Optional[Pointer[NoneType, MutAnyOrigin]]
comptime INT32_MAX = 2147483647
comptime OK_KEY = "MOJOLEARN_VENDOR_BLAS_OK"


def available() -> Bool:
    """Whether this build has a vendor BLAS route at all (NVIDIA or AMD targets)."""
    return IS_NVIDIA or IS_AMD


def library_label() -> String:
    """The library fast runs on this build's vendor, or "" (none: Apple)."""
    comptime if IS_NVIDIA:
        return "cuBLAS"
    elif IS_AMD:
        return "rocBLAS"
    return ""


def _names() -> List[String]:
    """The file names MAX's binding tries, in its order (its _cublas / _rocblas
    library lists in max 26.7)."""
    var out = List[String]()
    comptime if IS_NVIDIA:
        out.append("libcublas.so.13")
        out.append("/usr/local/cuda-13.1/lib64/libcublas.so.13")
        out.append("/usr/local/cuda-13.0/lib64/libcublas.so.13")
        out.append("/usr/local/cuda/lib64/libcublas.so.13")
        out.append("libcublas.so.12")
        out.append("/usr/local/cuda-12.8/lib64/libcublas.so.12")
        out.append("/usr/local/cuda/lib64/libcublas.so.12")
    elif IS_AMD:
        out.append("librocblas.so.4")
        out.append("librocblas.so.5")
        out.append("/opt/rocm/lib/librocblas.so.4")
        out.append("/opt/rocm/lib/librocblas.so.5")
    return out^


def _symbols() -> List[String]:
    """Every symbol this route makes the binding look up."""
    var out = List[String]()
    comptime if IS_NVIDIA:
        out.append("cublasCreate_v2")
        out.append("cublasSetStream_v2")
        out.append("cublasSetMathMode")
        out.append("cublasGemmEx")
    elif IS_AMD:
        out.append("rocblas_create_handle")
        out.append("rocblas_set_stream")
        out.append("rocblas_sgemm")
    return out^


def library() -> Tuple[String, String, String]:
    """(library, the file opened, "") when this build's vendor BLAS loads here with
    every symbol the route calls, else (library, "", the reason). Never aborts."""
    var label = library_label()
    if not available():
        return (label, String(), String("this build's GPU has no vendor BLAS route"))
    var names = _names()
    var kept = _get_global_or_null(OK_KEY)
    if kept:
        return (label, names[kept.value().unsafe_bitcast[Int]()[]], String())
    var reasons = List[String]()
    for i in range(len(names)):
        try:
            var h = OwnedDLHandle(names[i])
            var missing = String()
            for sym in _symbols():
                if not h.check_symbol(sym):
                    missing = sym
                    break
            if missing:
                # the binding takes the first file that opens, as here, and would abort
                # on this symbol: refuse rather than look further
                return (label, String(), String(
                    names[i], " opens but lacks the symbol ", missing, " that this route calls"
                ))
            # the handle is never dropped: the file stays loaded for the process, so
            # the binding's own lookup finds this same library
            var keep = unsafe_alloc[OwnedDLHandle](1)
            keep.unsafe_write(h^)
            var cell = unsafe_alloc[Int](1)
            cell.unsafe_write(i)
            external_call["KGEN_CompilerRT_InsertGlobal", NoneType](
                StringSlice(OK_KEY), cell.unsafe_bitcast[NoneType]()
            )
            return (label, names[i], String())
        except e:
            reasons.append(String(e))
    var why = String("none of ")
    for i in range(len(names)):
        why += String(", " if i else "", names[i])
    why += " could be opened"
    if len(reasons):
        why += String(" (first: ", reasons[0], ")")
    return (label, String(), why)


def require() raises:
    """Raise, naming the library and the way out, unless `library()` loads."""
    var got = library()
    if not got[1]:
        raise Error(String(
            "mojolearn._native_gpu: numeric_mode fast runs ", got[0], " on this GPU build and ",
            got[0], " cannot be loaded here: ", got[2],
            "; set numeric_mode identical to run the identical kernels",
        ))


def _thread_key(prefix: StaticString, ctx: DeviceContext) raises -> String:
    var tid = external_call["pthread_self", UInt64]()
    return String(prefix, "_", ctx.id(), "_", tid)


# ------------------------------------------------------------------ NVIDIA
def _cublas_handle(ctx: DeviceContext) raises -> CuHandle:
    var key = _thread_key("MOJOLEARN_CUBLAS", ctx)
    var got = _get_global_or_null(key)
    if got:
        return got.value().unsafe_bitcast[CuHandle]()[]
    var h = CuHandle(None)
    check_cublas_error(cublasCreate(Pointer(to=h)), "cublasCreate")
    var cell = unsafe_alloc[CuHandle](1)
    cell.unsafe_write(h)
    external_call["KGEN_CompilerRT_InsertGlobal", NoneType](
        StringSlice(key), cell.unsafe_bitcast[NoneType]()
    )
    return h


def _cublas_gemm(
    h: CuHandle, a: Int, b: Int, c: Int, m: Int, n: Int, k: Int,
    trans_a: Bool, trans_b: Bool, tf32: Bool,
) raises:
    """The math mode and the cublasGemmEx call (see LAYOUT) on handle h, whose stream
    is already set; alpha and beta are host values (the default pointer mode)."""
    var math = cublasMath_t.CUBLAS_TF32_TENSOR_OP_MATH if tf32 else cublasMath_t.CUBLAS_DEFAULT_MATH
    check_cublas_error(cublasSetMathMode(h, math), "cublasSetMathMode")
    var compute = ComputeType.COMPUTE_32F_FAST_TF32 if tf32 else ComputeType.COMPUTE_32F
    var alpha = Float32(1)
    var beta = Float32(0)
    var op_b = cublasOperation_t.CUBLAS_OP_T if trans_b else cublasOperation_t.CUBLAS_OP_N
    var op_a = cublasOperation_t.CUBLAS_OP_T if trans_a else cublasOperation_t.CUBLAS_OP_N
    check_cublas_error(
        cublasGemmEx(
            h, op_b, op_a, Int32(n), Int32(m), Int32(k),
            Pointer(to=alpha).unsafe_bitcast[NoneType]().as_unsafe_any_origin(),
            Pointer[NoneType, ImmutAnyOrigin](unsafe_from_address=b),
            CuDataType.R_32F, Int32(k if trans_b else n),
            Pointer[NoneType, ImmutAnyOrigin](unsafe_from_address=a),
            CuDataType.R_32F, Int32(m if trans_a else k),
            Pointer(to=beta).unsafe_bitcast[NoneType]().as_unsafe_any_origin(),
            Pointer[NoneType, MutAnyOrigin](unsafe_from_address=c),
            CuDataType.R_32F, Int32(n),
            compute, Algorithm.DEFAULT,
        ),
        "cublasGemmEx",
    )
    _ = alpha
    _ = beta


def _cublas_sgemm(
    ctx: DeviceContext, a: Int, b: Int, c: Int, m: Int, n: Int, k: Int,
    trans_a: Bool, trans_b: Bool, tf32: Bool,
) raises:
    with ctx.push_context():
        var h = _cublas_handle(ctx)
        check_cublas_error(cublasSetStream(h, CUDA(ctx.stream())), "cublasSetStream")
        _cublas_gemm(h, a, b, c, m, n, k, trans_a, trans_b, tf32)


# ------------------------------------------------------------------ AMD
def _rocblas_handle(ctx: DeviceContext) raises -> RocHandle:
    var key = _thread_key("MOJOLEARN_ROCBLAS", ctx)
    var got = _get_global_or_null(key)
    if got:
        return got.value().unsafe_bitcast[RocHandle]()[]
    var h = RocHandle()
    _rocblas.check_error(rocblas_create_handle(Pointer(to=h)))
    var cell = unsafe_alloc[RocHandle](1)
    cell.unsafe_write(h)
    external_call["KGEN_CompilerRT_InsertGlobal", NoneType](
        StringSlice(key), cell.unsafe_bitcast[NoneType]()
    )
    return h


def _rocblas_gemm(
    h: RocHandle, a: Int, b: Int, c: Int, m: Int, n: Int, k: Int, trans_a: Bool, trans_b: Bool,
) raises:
    """The rocblas_sgemm call (see LAYOUT) on handle h, whose stream is already set;
    alpha and beta are host values (the default pointer mode)."""
    var alpha = Float32(1)
    var beta = Float32(0)
    var op_b = RocOperation.TRANSPOSE if trans_b else RocOperation.NONE
    var op_a = RocOperation.TRANSPOSE if trans_a else RocOperation.NONE
    _rocblas.check_error(rocblas_sgemm(
        h, op_b, op_a, Int32(n), Int32(m), Int32(k),
        Pointer(to=alpha), F32Ptr(unsafe_from_address=b), Int32(k if trans_b else n),
        F32Ptr(unsafe_from_address=a), Int32(m if trans_a else k),
        Pointer(to=beta), F32Ptr(unsafe_from_address=c), Int32(n),
    ))
    _ = alpha
    _ = beta


def _rocblas_sgemm(
    ctx: DeviceContext, a: Int, b: Int, c: Int, m: Int, n: Int, k: Int,
    trans_a: Bool, trans_b: Bool,
) raises:
    var h = _rocblas_handle(ctx)
    _rocblas.check_error(rocblas_set_stream(h, HIP(ctx.stream())))
    _rocblas_gemm(h, a, b, c, m, n, k, trans_a, trans_b)


# ------------------------------------------------------------------ the route
def _sgemm(
    ctx: DeviceContext, a: Int, b: Int, c: Int, m: Int, n: Int, k: Int,
    trans_a: Bool, trans_b: Bool, tf32: Bool,
) raises:
    """C = A B on float32 operands in device memory, enqueued on ctx's stream."""
    if m > INT32_MAX or n > INT32_MAX or k > INT32_MAX:
        raise Error(String(
            "mojolearn._native_gpu: numeric_mode fast: m, n and k must be below 2**31 for ",
            library_label(), " (got ", m, ", ", n, ", ", k, ")",
        ))
    comptime if IS_NVIDIA:
        _cublas_sgemm(ctx, a, b, c, m, n, k, trans_a, trans_b, tf32)
    elif IS_AMD:
        _rocblas_sgemm(ctx, a, b, c, m, n, k, trans_a, trans_b)
    else:
        raise Error("mojolearn._native_gpu: numeric_mode fast: this build has no vendor BLAS")


def _widen(ctx: DeviceContext, src: Int, dst: DeviceBuffer[DType.uint32], count: Int) raises:
    """dst[0:count] = the exact float32 widening (rule L-1) of the bf16 bits at device
    address src; enqueued."""
    ctx.enqueue_function[from_bf16_kernel](
        U16Ptr(unsafe_from_address=src), dst.unsafe_ptr(), Int64(count),
        grid_dim=blocks_1d(count), block_dim=B1,
    )


def gemm_f32_device(
    ctx: DeviceContext, a: Int, b: Int, c: Int, m: Int, n: Int, k: Int,
    trans_a: Bool, trans_b: Bool, a_bf16: Bool, b_bf16: Bool, tf32: Bool,
) raises:
    """C (m, n) = A B by the vendor's sgemm, every address in this device's memory
    (a bf16 operand widened into a temporary first); synchronous. Needs m, n, k > 0
    and `require()` passed."""
    var wa = ctx.enqueue_create_buffer[DType.uint32](m * k if a_bf16 else 1)
    var wb = ctx.enqueue_create_buffer[DType.uint32](n * k if b_bf16 else 1)
    var pa = a
    var pb = b
    if a_bf16:
        _widen(ctx, a, wa, m * k)
        pa = Int(wa.unsafe_ptr())
    if b_bf16:
        _widen(ctx, b, wb, n * k)
        pb = Int(wb.unsafe_ptr())
    _sgemm(ctx, pa, pb, c, m, n, k, trans_a, trans_b, tf32)
    ctx.synchronize()
    _ = len(wa)  # alive until the launches that read them are done
    _ = len(wb)


def gemm_f32_host(
    ctx: DeviceContext, a: Int, b: Int, c: Int, m: Int, n: Int, k: Int,
    trans_a: Bool, trans_b: Bool, a_bf16: Bool, b_bf16: Bool, tf32: Bool,
) raises:
    """gemm_f32_device on host operands: A and B copied in, C copied back; synchronous."""
    var da = ctx.enqueue_create_buffer[DType.uint8](m * k * (2 if a_bf16 else 4))
    var db = ctx.enqueue_create_buffer[DType.uint8](n * k * (2 if b_bf16 else 4))
    var dc = ctx.enqueue_create_buffer[DType.float32](m * n)
    ctx.enqueue_copy(da, host_ptr[DType.uint8](a))
    ctx.enqueue_copy(db, host_ptr[DType.uint8](b))
    gemm_f32_device(ctx, Int(da.unsafe_ptr()), Int(db.unsafe_ptr()), Int(dc.unsafe_ptr()),
                    m, n, k, trans_a, trans_b, a_bf16, b_bf16, tf32)
    ctx.enqueue_copy(host_ptr[DType.float32](c), dc)
    ctx.synchronize()
    _ = len(da)
    _ = len(db)


def flip_low_bit_device(ctx: DeviceContext, c: Int) raises:
    """conformance --sabotage only: C[0, 0] ^= 1 on a device-resident result."""
    ctx.enqueue_function[flip_low_bit_kernel](
        U32Ptr(unsafe_from_address=c), grid_dim=1, block_dim=1
    )
    ctx.synchronize()

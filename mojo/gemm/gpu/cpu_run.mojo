"""Test support: the GEMM GPU kernels' arithmetic run on the CPU, the gpu_ref_gemm_*
entries of the CPU extension, so the GPU bits are tested on every machine.

WHAT IT IS
    Each entry runs the SAME per-thread bodies (gemm/gpu/threads.mojo) as the device
    kernels, in plain single-threaded loops over the kernels' coordinates, pass by
    pass like the launches in gemm/gpu/launch.mojo: for fp32.v1 the leaves pass fills a
    partials buffer parts[leaf][i][j] (register-tiled threads when use_tiled(m, n),
    as on the GPU), then the tree pass folds it into C. Slow by design (a reference, not a kernel).

FLOATING-POINT STATE
    A GPU kernel runs with plain IEEE arithmetic (no DAZ, no FTZ; compile_all_gpu.mojo
    checks it), so every entry sets the same on the CPU: DAZ off, FTZ off, round to
    nearest, and restores the caller's MXCSR after. With DAZ on, a flush missing
    from the bodies would be hidden by the hardware here and show on the GPU.

ENTRIES (one tuple of ints each; Python has validated every argument)
    gpu_ref_gemm_f32((a, b, c, m, n, k, trans_a, trans_b, a_bf16, b_bf16))
    gpu_ref_gemm_int8((a, ea, b, eb, c, m, n, k))
    gpu_ref_gemm_int15((ahi, alo, ea, bhi, blo, eb, c, m, n, k))
"""
from std.python import PythonObject
from std.python.bindings import PythonModuleBuilder
from std.memory.alloc import unsafe_alloc
from common.ptr import F32Ptr, ptr_f32, ptr_u16, ptr_u32, ptr_i8, ptr_i32
from common.fpstate import enter_ieee_mode, leave_ieee_mode
from arith.tree import leaf_size
from gemm.gpu.arith import a_strides, b_strides, leaves_of
from gemm.gpu.threads import (
    BX,
    BY,
    TM,
    TN,
    use_tiled,
    tile_origin,
    leaves_tile_thread,
    leaves_thread,
    tree_thread,
    int8_thread,
    int15_thread,
)


def _arg(args: PythonObject, i: Int) raises -> Int:
    return Int(py=args[i])


def _leaves_pass[adt: DType, bdt: DType](
    a_addr: Int, b_addr: Int, parts: F32Ptr, m: Int, n: Int, k: Int,
    a_rs: Int, a_ks: Int, b_cs: Int, b_ks: Int, leaf: Int, nleaves: Int,
):
    """The leaves launch as loops over its grid and blocks, each point one thread:
    the tiled kernel's grid when use_tiled(m, n) (as launch.mojo), else one
    thread per (i, j, leaf)."""
    var a = Pointer[Scalar[adt], MutAnyOrigin](unsafe_from_address=a_addr)
    var b = Pointer[Scalar[bdt], MutAnyOrigin](unsafe_from_address=b_addr)
    if use_tiled(m, n):
        var gx = (n + BX * TN - 1) // (BX * TN)
        var gy = (m + BY * TM - 1) // (BY * TM)
        for l in range(nleaves):
            for by in range(gy):
                for bx in range(gx):
                    for ty in range(BY):
                        for tx in range(BX):
                            var o = tile_origin(bx, by, tx, ty)
                            if o[0] < m and o[1] < n:
                                leaves_tile_thread[adt, bdt](
                                    a, b, parts, m, n, k, a_rs, a_ks, b_cs, b_ks, leaf, o[0], o[1], l
                                )
        return
    for l in range(nleaves):
        for i in range(m):
            for j in range(n):
                leaves_thread[adt, bdt](a, b, parts, m, n, k, a_rs, a_ks, b_cs, b_ks, leaf, i, j, l)


def gpu_ref_gemm_f32(args: PythonObject) raises -> PythonObject:
    """fp32.v1 / bf16f32.v1 as the GPU computes it (leaves pass, then tree pass)."""
    var a_addr = _arg(args, 0)
    var b_addr = _arg(args, 1)
    var c = ptr_f32(_arg(args, 2))
    var m = _arg(args, 3)
    var n = _arg(args, 4)
    var k = _arg(args, 5)
    var trans_a = _arg(args, 6) != 0
    var trans_b = _arg(args, 7) != 0
    var a_bf16 = _arg(args, 8) != 0
    var b_bf16 = _arg(args, 9) != 0
    var leaf = leaf_size(k)
    var nleaves = leaves_of(k)
    var sa = a_strides(m, k, trans_a)
    var sb = b_strides(n, k, trans_b)
    var parts = unsafe_alloc[Float32](max(1, nleaves * m * n), alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    var old = enter_ieee_mode()
    comptime F = DType.float32
    comptime H = DType.uint16
    if a_bf16 and b_bf16:
        _leaves_pass[H, H](a_addr, b_addr, parts, m, n, k, sa[0], sa[1], sb[0], sb[1], leaf, nleaves)
    elif a_bf16:
        _leaves_pass[H, F](a_addr, b_addr, parts, m, n, k, sa[0], sa[1], sb[0], sb[1], leaf, nleaves)
    elif b_bf16:
        _leaves_pass[F, H](a_addr, b_addr, parts, m, n, k, sa[0], sa[1], sb[0], sb[1], leaf, nleaves)
    else:
        _leaves_pass[F, F](a_addr, b_addr, parts, m, n, k, sa[0], sa[1], sb[0], sb[1], leaf, nleaves)
    for i in range(m):
        for j in range(n):
            tree_thread(parts, c, m, n, nleaves, i, j)
    leave_ieee_mode(old)
    parts.unsafe_free()
    return PythonObject(None)


def gpu_ref_gemm_int8(args: PythonObject) raises -> PythonObject:
    var a = ptr_i8(_arg(args, 0))
    var ea = ptr_i32(_arg(args, 1))
    var b = ptr_i8(_arg(args, 2))
    var eb = ptr_i32(_arg(args, 3))
    var c = ptr_f32(_arg(args, 4))
    var m = _arg(args, 5)
    var n = _arg(args, 6)
    var k = _arg(args, 7)
    var old = enter_ieee_mode()
    for i in range(m):
        for j in range(n):
            int8_thread(a, ea, b, eb, c, n, k, i, j)
    leave_ieee_mode(old)
    return PythonObject(None)


def gpu_ref_gemm_int15(args: PythonObject) raises -> PythonObject:
    var ahi = ptr_i8(_arg(args, 0))
    var alo = ptr_i8(_arg(args, 1))
    var ea = ptr_i32(_arg(args, 2))
    var bhi = ptr_i8(_arg(args, 3))
    var blo = ptr_i8(_arg(args, 4))
    var eb = ptr_i32(_arg(args, 5))
    var c = ptr_f32(_arg(args, 6))
    var m = _arg(args, 7)
    var n = _arg(args, 8)
    var k = _arg(args, 9)
    var old = enter_ieee_mode()
    for i in range(m):
        for j in range(n):
            int15_thread(ahi, alo, ea, bhi, blo, eb, c, n, k, i, j)
    leave_ieee_mode(old)
    return PythonObject(None)


def register_gemm_gpu_reference(mut m: PythonModuleBuilder) raises:
    """Add the gpu_ref_gemm_* entries to the CPU extension module."""
    m.def_function[gpu_ref_gemm_f32]("gpu_ref_gemm_f32")
    m.def_function[gpu_ref_gemm_int8]("gpu_ref_gemm_int8")
    m.def_function[gpu_ref_gemm_int15]("gpu_ref_gemm_int15")

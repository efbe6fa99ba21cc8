"""Device kernels of the model ops in model_threads.mojo: grid-stride loops (any size),
each thread turning its index into the coordinates of one body. Launched by
model_launch.mojo; compiled offline by compile_all_gpu.mojo. Sizes arrive as Int32 /
Int64 (kernel arguments must be device-passable); index arithmetic is Int (64-bit).

    gather_kernel      one thread per element of the (rows, d) result
    kv_append_kernel   one thread per element of the call's (rows, n_heads, head_dim) values
    sample_kernel      one thread per row (M-32 is one serial chain per row). M-32 sums
                       in float64, which Metal does not have: compiled for an Apple GPU
                       the kernel computes nothing and marks every row -1; the driver
                       never launches it there (it samples the logits read back on the
                       host, by the CPU kernel of the same rule)
    argmax_kernel      one thread per row
"""
from std.sys.info import is_apple_gpu
from common.ptr import F32Ptr, U32Ptr, I64Ptr
from common.gpu import gid_x, stride_x
from transformer.gpu.model_threads import (
    F64Ptr, gather_thread, kv_append_thread, sample_thread, argmax_thread,
)


def gather_kernel(table: U32Ptr, ids: I64Ptr, dst: U32Ptr, rows: Int32, d: Int32):
    var t = gid_x()
    var total = Int(rows) * Int(d)
    while t < total:
        gather_thread(table, ids, dst, Int(d), t // Int(d), t % Int(d))
        t += stride_x()


def kv_append_kernel(
    src: U32Ptr, lds: Int32, dst: U32Ptr, n_heads: Int32, head_dim: Int32, pos0: Int32,
    length: Int32, rows: Int32, tmax: Int32,
):
    var per_row = Int(n_heads) * Int(head_dim)
    var t = gid_x()
    while t < Int(rows) * per_row:
        var rem = t % per_row
        kv_append_thread(src, Int(lds), dst, Int(n_heads), Int(head_dim), Int(pos0), Int(length),
                         Int(tmax), t // per_row, rem // Int(head_dim), rem % Int(head_dim))
        t += stride_x()


def sample_kernel(x: F32Ptr, rows: Int32, n: Int32, r: F64Ptr, picks: I64Ptr):
    var i = gid_x()
    while i < Int(rows):
        comptime if is_apple_gpu():
            picks.unsafe_store(i, -1)  # no float64 on Metal: not computed here
        else:
            sample_thread(x, Int(n), r, picks, i)
        i += stride_x()


def argmax_kernel(x: F32Ptr, rows: Int32, n: Int32, picks: I64Ptr):
    var i = gid_x()
    while i < Int(rows):
        argmax_thread(x, Int(n), picks, i)
        i += stride_x()

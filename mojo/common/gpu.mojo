"""Shared pieces of the GPU backends (gemm/gpu, convert/gpu, transformer/gpu).

Host side: the 1-D launch shape (B1 threads a block, at most MAX_BLOCKS_1D blocks,
grid-stride loops cover the rest) and host pointers. Device side: a thread's
global index and the grid stride. Nothing here changes a bit of any result.
"""
from max.gpu import block_idx, thread_idx, block_dim, grid_dim

comptime B1 = 256
comptime MAX_BLOCKS_1D = 1 << 20


@always_inline
def cdiv(a: Int, b: Int) -> Int:
    return (a + b - 1) // b


def blocks_1d(n: Int) -> Int:
    return max(1, min(cdiv(n, B1), MAX_BLOCKS_1D))


def host_ptr[dt: DType](addr: Int) -> Pointer[Scalar[dt], MutAnyOrigin]:
    return Pointer[Scalar[dt], MutAnyOrigin](unsafe_from_address=addr)


@always_inline
def gid_x() -> Int:
    return Int(block_idx.x) * Int(block_dim.x) + Int(thread_idx.x)


@always_inline
def gid_y() -> Int:
    return Int(block_idx.y) * Int(block_dim.y) + Int(thread_idx.y)


@always_inline
def stride_x() -> Int:
    return Int(grid_dim.x) * Int(block_dim.x)

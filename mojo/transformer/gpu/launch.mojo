"""Host side of the transformer ops' GPU kernels, for operands that already live in
the device's memory (DLPack device tensors): launch shapes only, no copies.

Used by mojo/_native_gpu.mojo (the torch mode's bias add of aten::addmm /
aten::baddbmm on a GPU build, rule 10.2 of the fp32 contract: ftz(C + bias)).
Nothing here changes a bit of any result: the grid only decides which thread
computes which element.
"""
from max.gpu.host import DeviceContext
from common.gpu import B1, blocks_1d, host_ptr
from transformer.gpu.kernels import add_kernel


def add_resident(
    ctx: DeviceContext, x: Int, ldx: Int, y: Int, ldy: Int, dst: Int, ldo: Int, n: Int, rows: Int,
) raises:
    """dst[r][j] = ftz(x[r][j] + y[r][j]) (rows of n; ldy 0 adds one row to every row);
    synchronous."""
    if rows == 0 or n == 0:
        return
    comptime F = DType.float32
    ctx.enqueue_function[add_kernel](
        host_ptr[F](x), Int32(ldx), host_ptr[F](y), Int32(ldy), host_ptr[F](dst), Int32(ldo),
        Int32(rows), Int32(n), grid_dim=blocks_1d(rows * n), block_dim=B1,
    )
    ctx.synchronize()

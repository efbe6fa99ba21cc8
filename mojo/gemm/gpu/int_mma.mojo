"""int8i32.v1 / int15i64.v1 on NVIDIA's integer tensor cores (sm_80 and newer):
mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32, s8 codes in, exact s32 sums out.

WHAT IT COMPUTES
    The staging of int_tiled.mojo (64 x 64 outputs a block, 32-deep k-tiles of codes
    in shared memory), 128 threads = 4 warps, warp w owning the 32 x 32 outputs at
    rows 32 * (w // 2), columns 32 * (w % 2): 2 x 4 tiles of 16 x 8, one mma each per
    k-tile and plane product. int8: S += A . B. int15 (W-2 planes): HH += Ah . Bh,
    X += Ah . Bl then X += Al . Bh, LL += Al . Bl, joined in int64 by the epilogue
    (int_tiled.int_result). Every sum is exact in int32 inside the contract's k
    limits (L-7, W-4), so the hardware's summation order is free.

FRAGMENTS (PTX ISA, "Matrix Fragments for mma.m16n8k32", .s8)
    lane = 4 * g + t (g = groupID, t = threadID_in_group).
    A (16 x 32, row major), 16 codes in 4 registers, code i of the lane at
        row g for i in 0..3 and 8..11, g + 8 otherwise; column 4 t + (i & 3), + 16 for i >= 8.
    B (32 x 8, column major: our B rows are k-contiguous), 8 codes in 2 registers,
        code i at row (k) 4 t + (i & 3), + 16 for i >= 4; column g.
    C, D (16 x 8 int32), 4 registers: row g (c0, c1) or g + 8 (c2, c3), column 2 t + (i & 1).
    Codes are packed low byte first, as they lie in shared memory.

The CPU run (cpu_run.mojo) gathers every lane's fragments with a_frag / b_frag below
and multiplies them with mma_emulated, written from the layout above independently
of the gathers, so the tests check the gathers, the tile bookkeeping and the
epilogue's placement; what the hardware itself does is checked on a GPU by
bench/device_check.sh.
"""
from std.memory import AddressSpace, bitcast
from std.sys.intrinsics import _RegisterPackType, llvm_intrinsic
from common.ptr import F32Ptr, I32Ptr
from gemm.gpu.int_tiled import (
    INT_BM,
    INT_BN,
    INT_BK,
    INT_BKP,
    IntCall,
    int_sums,
    int_tiles,
    int_fetch,
    int_stash,
    int_result,
    word,
)

comptime MMA_THREADS = 128
comptime MMA_TILES = 8  # 2 (16-row) x 4 (8-column) tiles a warp


@always_inline
def _pbase(planes: Int, buf: Int, p: Int) -> Int:
    return (buf * planes + p) * (INT_BM + INT_BN) * INT_BKP


@always_inline
def warp_origin(warp: Int) -> Tuple[Int, Int]:
    """(row, column) of a warp's 32 x 32 outputs inside the block tile."""
    return ((warp // 2) * 32, (warp % 2) * 32)


@always_inline
def a_frag[AS: AddressSpace](
    smem: Pointer[Int8, MutAnyOrigin, address_space=AS], planes: Int, buf: Int, p: Int,
    warp: Int, mt: Int, lane: Int,
) -> SIMD[DType.int32, 4]:
    """Lane's A registers of plane p for the warp's 16-row tile mt (one k-tile)."""
    var g = lane >> 2
    var t = lane & 3
    var row = _pbase(planes, buf, p) + (warp_origin(warp)[0] + mt * 16 + g) * INT_BKP + 4 * t
    var v = SIMD[DType.int32, 4](0)
    v[0] = word(smem.unsafe_load[width=4, alignment=4](row))
    v[1] = word(smem.unsafe_load[width=4, alignment=4](row + 8 * INT_BKP))
    v[2] = word(smem.unsafe_load[width=4, alignment=4](row + 16))
    v[3] = word(smem.unsafe_load[width=4, alignment=4](row + 8 * INT_BKP + 16))
    return v


@always_inline
def b_frag[AS: AddressSpace](
    smem: Pointer[Int8, MutAnyOrigin, address_space=AS], planes: Int, buf: Int, p: Int,
    warp: Int, nt: Int, lane: Int,
) -> SIMD[DType.int32, 2]:
    """Lane's B registers of plane p for the warp's 8-column tile nt (one k-tile)."""
    var g = lane >> 2
    var t = lane & 3
    var col = _pbase(planes, buf, p) + INT_BM * INT_BKP + (warp_origin(warp)[1] + nt * 8 + g) * INT_BKP + 4 * t
    var v = SIMD[DType.int32, 2](0)
    v[0] = word(smem.unsafe_load[width=4, alignment=4](col))
    v[1] = word(smem.unsafe_load[width=4, alignment=4](col + 16))
    return v


@always_inline
def acc_at(planes: Int, s: Int, tile: Int) -> Int:
    """First of the 4 accumulators of sum s (0: S or HH, 1: X, 2: LL) of tile
    mt * 4 + nt in a lane's array."""
    return (s * MMA_TILES + tile) * 4


@always_inline
def mma_s8(a: SIMD[DType.int32, 4], b: SIMD[DType.int32, 2], c: SIMD[DType.int32, 4]) -> SIMD[DType.int32, 4]:
    """d = A . B + C on one warp's fragments (device only: NVIDIA sm_80+)."""
    var r = llvm_intrinsic["llvm.nvvm.mma.m16n8k32.row.col.s8", _RegisterPackType[Int32, Int32, Int32, Int32]](
        a[0], a[1], a[2], a[3], b[0], b[1], c[0], c[1], c[2], c[3]
    )
    return SIMD[DType.int32, 4](r[0], r[1], r[2], r[3])


@always_inline
def _sub4(v: SIMD, at: Int) -> SIMD[v.dtype, 4]:
    var o = SIMD[v.dtype, 4](0)
    comptime for q in range(4):
        o[q] = v[at + q]
    return o


@always_inline
def _put4(mut v: SIMD, at: Int, x: SIMD[v.dtype, 4]):
    comptime for q in range(4):
        v[at + q] = x[q]


@always_inline
def mma_main_phase[planes: Int, AS: AddressSpace](
    smem: Pointer[Int8, MutAnyOrigin, address_space=AS], call: IntCall, i0: Int, j0: Int,
    t: Int, tid: Int, mut acc: SIMD[DType.int32, 4 * MMA_TILES * int_sums(planes)],
):
    """Device only. Between barriers t and t + 1: fetch k-tile t + 1, the warp's
    mma over tile t, stash t + 1 into the other buffer."""
    var nxt = t + 1 < int_tiles(call.k)
    var v = int_fetch[planes, MMA_THREADS](call, i0, j0, t + 1, tid)  # all 0 past k
    var warp = tid // 32
    var lane = tid % 32
    var buf = t % 2
    comptime for mt in range(2):
        var ah = a_frag(smem, planes, buf, 0, warp, mt, lane)
        var al = ah
        comptime if planes == 2:
            al = a_frag(smem, planes, buf, 1, warp, mt, lane)
        comptime for nt in range(4):
            var tile = mt * 4 + nt
            var bh = b_frag(smem, planes, buf, 0, warp, nt, lane)
            _put4(acc, acc_at(planes, 0, tile), mma_s8(ah, bh, _sub4(acc, acc_at(planes, 0, tile))))
            comptime if planes == 2:
                var bl = b_frag(smem, planes, buf, 1, warp, nt, lane)
                var x = mma_s8(ah, bl, _sub4(acc, acc_at(planes, 1, tile)))
                _put4(acc, acc_at(planes, 1, tile), mma_s8(al, bh, x))
                _put4(acc, acc_at(planes, 2, tile), mma_s8(al, bl, _sub4(acc, acc_at(planes, 2, tile))))
    if nxt:
        int_stash[planes, MMA_THREADS](smem, (t + 1) % 2, tid, v)


@always_inline
def mma_store[planes: Int](
    call: IntCall, ea: I32Ptr, eb: I32Ptr, c: F32Ptr, i0: Int, j0: Int, tid: Int,
    acc: SIMD[DType.int32, 4 * MMA_TILES * int_sums(planes)],
):
    """The lane's outputs (accumulator layout above) inside C."""
    var warp = tid // 32
    var lane = tid % 32
    var g = lane >> 2
    var t = lane & 3
    var o = warp_origin(warp)
    comptime for tile in range(MMA_TILES):
        comptime for q in range(4):
            var i = i0 + o[0] + (tile // 4) * 16 + g + (8 if q >= 2 else 0)
            var j = j0 + o[1] + (tile % 4) * 8 + 2 * t + (q & 1)
            if i < call.m and j < call.n:
                var x = Int32(0)
                var ll = Int32(0)
                comptime if planes == 2:
                    x = acc[acc_at(planes, 1, tile) + q]
                    ll = acc[acc_at(planes, 2, tile) + q]
                c.unsafe_store(i * call.n + j, int_result(planes, acc[acc_at(planes, 0, tile) + q], x, ll,
                                                          ea.unsafe_load(i), eb.unsafe_load(j)))


# ------------------------------------------------------------------ the CPU run
def mma_emulated(a: I32Ptr, b: I32Ptr, c: I32Ptr, d: I32Ptr):
    """One warp's mma.m16n8k32 s8 on the CPU, from the documented fragment layout:
    a[lane * 4 + r], b[lane * 2 + r], c[lane * 4 + r] in, d[lane * 4 + r] out."""
    var A = List[Int32](length=16 * 32, fill=0)
    var B = List[Int32](length=32 * 8, fill=0)
    for lane in range(32):
        var g = lane >> 2
        var t = lane & 3
        for i in range(16):
            var byte = Int32(bitcast[DType.int8, 4](a.unsafe_load(lane * 4 + i // 4))[i % 4])
            var row = g if (i < 4 or (i >= 8 and i < 12)) else g + 8
            var col = 4 * t + (i & 3) + (16 if i >= 8 else 0)
            A[row * 32 + col] = byte
        for i in range(8):
            var byte = Int32(bitcast[DType.int8, 4](b.unsafe_load(lane * 2 + i // 4))[i % 4])
            var krow = 4 * t + (i & 3) + (16 if i >= 4 else 0)
            B[krow * 8 + g] = byte
    for lane in range(32):
        var g = lane >> 2
        var t = lane & 3
        for i in range(4):
            var row = g + (8 if i >= 2 else 0)
            var col = 2 * t + (i & 1)
            var s = c.unsafe_load(lane * 4 + i)
            for kk in range(32):
                s += A[row * 32 + kk] * B[kk * 8 + col]
            d.unsafe_store(lane * 4 + i, s)

"""int8i32.v1 / int15i64.v1 on AMD's matrix cores (CDNA3, gfx942):
v_mfma_i32_16x16x32_i8, i8 codes in, exact i32 sums out.

WHAT IT COMPUTES
    The staging of int_tiled.mojo (64 x 64 outputs a block, 32-deep k-tiles of codes
    in shared memory), 256 threads = 4 wavefronts of 64, wave w owning the 32 x 32
    outputs at rows 32 * (w // 2), columns 32 * (w % 2): 2 x 2 tiles of 16 x 16, one
    MFMA each per k-tile and plane product; the plane products and their exactness
    as in int_mma.mojo (HH, X = Ah.Bl + Al.Bh, LL, joined in int64 by the epilogue).

FRAGMENTS (AMD matrix instruction layout of the 16 x 16 x 32 i8 MFMA)
    A (16 x 32): element (i, kk) in lane i + 16 * (kk // 8), byte kk % 8 of the
        lane's 64-bit operand.
    B (32 x 16): element (kk, j) in lane j + 16 * (kk // 8), byte kk % 8.
    C, D (16 x 16 int32): element (i, j) in lane j + 16 * (i // 4), register i % 4.

As for NVIDIA, the CPU run gathers every lane's operands with a_frag / b_frag and
multiplies them with mfma_emulated (written from the layout above); the hardware is
checked by bench/device_check.sh on an AMD GPU.
"""
from std.memory import AddressSpace, bitcast
from std.sys.intrinsics import llvm_intrinsic
from common.ptr import F32Ptr, I32Ptr, I64Ptr
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
)

comptime MFMA_THREADS = 256
comptime MFMA_TILES = 4  # 2 x 2 tiles of 16 x 16 a wave


@always_inline
def _pbase(planes: Int, buf: Int, p: Int) -> Int:
    return (buf * planes + p) * (INT_BM + INT_BN) * INT_BKP


@always_inline
def wave_origin(wave: Int) -> Tuple[Int, Int]:
    return ((wave // 2) * 32, (wave % 2) * 32)


@always_inline
def _eight[AS: AddressSpace](smem: Pointer[Int8, MutAnyOrigin, address_space=AS], at: Int) -> Int64:
    return bitcast[DType.int64, 1](smem.unsafe_load[width=8, alignment=8](at))[0]


@always_inline
def a_frag[AS: AddressSpace](
    smem: Pointer[Int8, MutAnyOrigin, address_space=AS], planes: Int, buf: Int, p: Int,
    wave: Int, mt: Int, lane: Int,
) -> Int64:
    """Lane's A operand of plane p for the wave's 16-row tile mt: 8 codes of row
    lane % 16, k from 8 * (lane // 16)."""
    var row = wave_origin(wave)[0] + mt * 16 + lane % 16
    return _eight(smem, _pbase(planes, buf, p) + row * INT_BKP + 8 * (lane // 16))


@always_inline
def b_frag[AS: AddressSpace](
    smem: Pointer[Int8, MutAnyOrigin, address_space=AS], planes: Int, buf: Int, p: Int,
    wave: Int, nt: Int, lane: Int,
) -> Int64:
    """Lane's B operand of plane p for the wave's 16-column tile nt."""
    var col = wave_origin(wave)[1] + nt * 16 + lane % 16
    return _eight(smem, _pbase(planes, buf, p) + INT_BM * INT_BKP + col * INT_BKP + 8 * (lane // 16))


@always_inline
def acc_at(s: Int, tile: Int) -> Int:
    return (s * MFMA_TILES + tile) * 4


@always_inline
def mfma_i8(a: Int64, b: Int64, c: SIMD[DType.int32, 4]) -> SIMD[DType.int32, 4]:
    """d = A . B + C on one wave's operands (device only: AMD gfx942)."""
    return llvm_intrinsic["llvm.amdgcn.mfma.i32.16x16x32.i8", SIMD[DType.int32, 4]](
        a, b, c, Int32(0), Int32(0), Int32(0)
    )


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
def mfma_main_phase[planes: Int, AS: AddressSpace](
    smem: Pointer[Int8, MutAnyOrigin, address_space=AS], call: IntCall, i0: Int, j0: Int,
    t: Int, tid: Int, mut acc: SIMD[DType.int32, 4 * MFMA_TILES * int_sums(planes)],
):
    """Device only. Between barriers t and t + 1: fetch k-tile t + 1, the wave's
    MFMAs over tile t, stash t + 1 into the other buffer."""
    var nxt = t + 1 < int_tiles(call.k)
    var v = int_fetch[planes, MFMA_THREADS](call, i0, j0, t + 1, tid)  # all 0 past k
    var wave = tid // 64
    var lane = tid % 64
    var buf = t % 2
    comptime for mt in range(2):
        var ah = a_frag(smem, planes, buf, 0, wave, mt, lane)
        var al = ah
        comptime if planes == 2:
            al = a_frag(smem, planes, buf, 1, wave, mt, lane)
        comptime for nt in range(2):
            var tile = mt * 2 + nt
            var bh = b_frag(smem, planes, buf, 0, wave, nt, lane)
            _put4(acc, acc_at(0, tile), mfma_i8(ah, bh, _sub4(acc, acc_at(0, tile))))
            comptime if planes == 2:
                var bl = b_frag(smem, planes, buf, 1, wave, nt, lane)
                var x = mfma_i8(ah, bl, _sub4(acc, acc_at(1, tile)))
                _put4(acc, acc_at(1, tile), mfma_i8(al, bh, x))
                _put4(acc, acc_at(2, tile), mfma_i8(al, bl, _sub4(acc, acc_at(2, tile))))
    if nxt:
        int_stash[planes, MFMA_THREADS](smem, (t + 1) % 2, tid, v)


@always_inline
def mfma_store[planes: Int](
    call: IntCall, ea: I32Ptr, eb: I32Ptr, c: F32Ptr, i0: Int, j0: Int, tid: Int,
    acc: SIMD[DType.int32, 4 * MFMA_TILES * int_sums(planes)],
):
    """The lane's outputs inside C: register q of tile (mt, nt) is row
    4 * (lane // 16) + q, column lane % 16 of that tile."""
    var wave = tid // 64
    var lane = tid % 64
    var o = wave_origin(wave)
    comptime for tile in range(MFMA_TILES):
        comptime for q in range(4):
            var i = i0 + o[0] + (tile // 2) * 16 + 4 * (lane // 16) + q
            var j = j0 + o[1] + (tile % 2) * 16 + lane % 16
            if i < call.m and j < call.n:
                var x = Int32(0)
                var ll = Int32(0)
                comptime if planes == 2:
                    x = acc[acc_at(1, tile) + q]
                    ll = acc[acc_at(2, tile) + q]
                c.unsafe_store(i * call.n + j, int_result(planes, acc[acc_at(0, tile) + q], x, ll,
                                                          ea.unsafe_load(i), eb.unsafe_load(j)))


# ------------------------------------------------------------------ the CPU run
def mfma_emulated(a: I64Ptr, b: I64Ptr, c: I32Ptr, d: I32Ptr):
    """One wave's 16 x 16 x 32 i8 MFMA on the CPU, from the layout above: a[lane],
    b[lane], c[lane * 4 + r] in, d[lane * 4 + r] out."""
    var A = List[Int32](length=16 * 32, fill=0)
    var B = List[Int32](length=32 * 16, fill=0)
    for lane in range(64):
        var av = bitcast[DType.int8, 8](a.unsafe_load(lane))
        var bv = bitcast[DType.int8, 8](b.unsafe_load(lane))
        for e in range(8):
            var kk = 8 * (lane // 16) + e
            A[(lane % 16) * 32 + kk] = Int32(av[e])
            B[kk * 16 + lane % 16] = Int32(bv[e])
    for lane in range(64):
        for r in range(4):
            var i = 4 * (lane // 16) + r
            var j = lane % 16
            var s = c.unsafe_load(lane * 4 + r)
            for kk in range(32):
                s += A[i * 32 + kk] * B[kk * 16 + j]
            d.unsafe_store(lane * 4 + r, s)

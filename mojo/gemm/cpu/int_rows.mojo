"""int8i32.v1 and int15i64.v1 for a few rows of A (decode shapes, m <= INT_ROWS_MAX):
B's code planes are streamed row by row as stored, with no packing, so a weight
matrix is read once per call and never rewritten (lowbit contract L-5/L-7, W-2/W-4).

S[i, j] is the exact integer sum of code products (any order gives it): per row of B,
the codes of 16 columns of k at a time (int15: hi * 128 + lo) times A's codes in int32
lanes. Planes passed by a caller may hold any int8 values, so a code lies in
[-16512, 16383] and |product| <= 16512**2; at most 7 steps per lane before the lane is
moved into an int64 sum (7 * 16512**2 < 2**31). Output ftz(f32(S) * pow2f(ea + eb)),
the int GEMM's epilogue.
"""
from std.memory.alloc import unsafe_alloc
from std.sys import simd_width_of
from std.collections import Array
from common.ptr import F32Ptr, I8Ptr, I32Ptr
from arith.fp import pow2f
from arith.quant import join15, scale_pow2
from gemm.cpu.int_gemm import IntArgs
from gemm.cpu.blocking import INT_ROWS_MAX, LW

comptime FLUSH = 7  # steps before an int32 lane could overflow (any int8 planes)


@always_inline
def _codes_b(g: IntArgs, j: Int, kk: Int) -> SIMD[DType.int32, LW]:
    var hi = I8Ptr(unsafe_from_address=g.b_hi).unsafe_load[width=LW](j * g.k + kk)
    if not g.int15:
        return hi.cast[DType.int32]()
    return join15[LW](hi, I8Ptr(unsafe_from_address=g.b_lo).unsafe_load[width=LW](j * g.k + kk))


@always_inline
def _code_b1(g: IntArgs, j: Int, kk: Int) -> Int64:
    var hi = I8Ptr(unsafe_from_address=g.b_hi).unsafe_load(j * g.k + kk)
    if not g.int15:
        return Int64(hi)
    return Int64(join15[1](hi, I8Ptr(unsafe_from_address=g.b_lo).unsafe_load(j * g.k + kk))[0])


def a_codes(g: IntArgs, dst: Pointer[Int32, MutAnyOrigin]):
    """A's codes as int32 (m x k), once per call."""
    var ah = I8Ptr(unsafe_from_address=g.a_hi)
    var al = I8Ptr(unsafe_from_address=g.a_lo)
    for t in range(g.m * g.k):
        var c = Int32(ah.unsafe_load(t))
        if g.int15:
            c = join15[1](ah.unsafe_load(t), al.unsafe_load(t))[0]
        dst.unsafe_store(t, c)


def _rows_m[M: Int](g: IntArgs, ac: Pointer[Int32, MutAnyOrigin], j_lo: Int, j_hi: Int):
    """C[0:M, j_lo:j_hi]: each B row read once for the M rows of A. Per row of A one
    int32 lane group, moved into an int64 lane group every FLUSH steps (no horizontal
    sum until the row of B ends)."""
    var c = F32Ptr(unsafe_from_address=g.c)
    var ea = I32Ptr(unsafe_from_address=g.ea)
    var eb = I32Ptr(unsafe_from_address=g.eb)
    var kv = g.k // LW * LW
    for j in range(j_lo, j_hi):
        var acc = Array[SIMD[DType.int32, LW], M](fill=SIMD[DType.int32, LW](0))
        var wide = Array[SIMD[DType.int64, LW], M](fill=SIMD[DType.int64, LW](0))
        var kk = 0
        while kk < kv:
            var stop = min(kv, kk + FLUSH * LW)
            while kk < stop:
                var bv = _codes_b(g, j, kk)
                comptime for i in range(M):
                    acc[i] += ac.unsafe_load[width=LW](i * g.k + kk) * bv
                kk += LW
            comptime for i in range(M):
                wide[i] += acc[i].cast[DType.int64]()
                acc[i] = SIMD[DType.int32, LW](0)
        comptime for i in range(M):
            var s = wide[i].reduce_add()
            for t in range(kv, g.k):
                s += Int64(ac.unsafe_load(i * g.k + t)) * _code_b1(g, j, t)
            var e = Int(ea.unsafe_load(i)) + Int(eb.unsafe_load(j))
            var out = scale_pow2[1](SIMD[DType.float32, 1](s.cast[DType.float32]()), pow2f(e))
            c.unsafe_store(i * g.n + j, out[0])


def int_rows(g: IntArgs, ac: Pointer[Int32, MutAnyOrigin], j_lo: Int, j_hi: Int):
    """C[:, j_lo:j_hi] for all m (<= INT_ROWS_MAX) rows."""
    if g.m == 1:
        _rows_m[1](g, ac, j_lo, j_hi)
    elif g.m == 2:
        _rows_m[2](g, ac, j_lo, j_hi)
    elif g.m == 3:
        _rows_m[3](g, ac, j_lo, j_hi)
    else:
        _rows_m[4](g, ac, j_lo, j_hi)

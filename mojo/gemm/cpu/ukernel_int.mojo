"""Integer micro-kernel: IMR x INR int32 dot products over k-groups, from packed
panels (pack_int.mojo). acc[i][j] += sum over the 4 bytes of ua[i] * sb[j]
(unsigned A byte x signed B byte), wrapping int32.

AVX512-VNNI: one vpdpbusd per (row, 16 columns, k-group) - the non-saturating
form (vpdpbusds saturates and would change results). Other CPUs (e.g. an
x86-64-v3 build): the same sums from byte lanes widened to int32.
"""
from std.sys import llvm_intrinsic
from std.sys.info import CompilationTarget
from std.collections import Array
from std.memory import bitcast
from common.ptr import U32Ptr
from gemm.cpu.blocking import IMR, INR, IW, INV

comptime IAcc = Array[SIMD[DType.int32, IW], IMR * INV]


@always_inline
def _dp(acc: SIMD[DType.int32, IW], ua: SIMD[DType.int32, IW], sb: SIMD[DType.int32, IW]) -> SIMD[DType.int32, IW]:
    comptime if CompilationTarget.has_vnni() and CompilationTarget.has_avx512f():
        return llvm_intrinsic["llvm.x86.avx512.vpdpbusd.512", SIMD[DType.int32, IW]](
            acc, bitcast[DType.uint8, 64](ua), bitcast[DType.int8, 64](sb)
        )
    else:
        var r = acc
        comptime for q in range(4):
            var a_q = (ua >> SIMD[DType.int32, IW](8 * q)) & 0xFF
            var b_q = (sb << SIMD[DType.int32, IW](24 - 8 * q)) >> 24
            r += a_q * b_q
        return r


@always_inline
def ukernel_int(a: U32Ptr, b: U32Ptr, kg: Int, mut acc: IAcc):
    """acc += A_panel . B_panel over kg k-groups (acc is NOT cleared here)."""
    for g in range(kg):
        var bv = Array[SIMD[DType.int32, IW], INV](fill=SIMD[DType.int32, IW](0))
        comptime for v in range(INV):
            bv[v] = b.unsafe_load[width=IW](g * INR + v * IW).cast[DType.int32]()
        comptime for i in range(IMR):
            var av = SIMD[DType.int32, IW](Int32(a.unsafe_load(g * IMR + i)))
            comptime for v in range(INV):
                acc[i * INV + v] = _dp(acc[i * INV + v], av, bv[v])


@always_inline
def ukernel_int_2b(a: U32Ptr, b1: U32Ptr, b2: U32Ptr, kg: Int, mut acc1: IAcc, mut acc2: IAcc):
    """acc1 += A . B1 and acc2 += A . B2 in one sweep (one A broadcast feeds both):
    two adjacent column panels of the int8 profile, or the int15 hi/lo planes of B
    against one plane of A."""
    for g in range(kg):
        var bv1 = Array[SIMD[DType.int32, IW], INV](fill=SIMD[DType.int32, IW](0))
        var bv2 = Array[SIMD[DType.int32, IW], INV](fill=SIMD[DType.int32, IW](0))
        comptime for v in range(INV):
            bv1[v] = b1.unsafe_load[width=IW](g * INR + v * IW).cast[DType.int32]()
            bv2[v] = b2.unsafe_load[width=IW](g * INR + v * IW).cast[DType.int32]()
        comptime for i in range(IMR):
            var av = SIMD[DType.int32, IW](Int32(a.unsafe_load(g * IMR + i)))
            comptime for v in range(INV):
                acc1[i * INV + v] = _dp(acc1[i * INV + v], av, bv1[v])
                acc2[i * INV + v] = _dp(acc2[i * INV + v], av, bv2[v])

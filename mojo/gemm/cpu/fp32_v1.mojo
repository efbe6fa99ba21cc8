"""The fp32.v1 / bf16f32.v1 loop nest on the CPU (BLIS order, kc = the leaf).

One task computes C[i_lo:i_hi, j_lo:j_hi] alone, so any split of the output over
tasks gives the same bits (contract 6.5). Per task:
  for each NC chunk of columns: pack B (all of k)
    for each MC block of rows:
      for each leaf p (k0 = p*L):  pack A (MC x L)
        for each NR panel, each MR panel: micro-kernel (one leaf) + tree merge
Workspace: the packed B chunk, the packed A block and the tree slots of one
MC x NC block - packing panels only, bounded by PACK_B_BYTES.
"""
from std.memory.alloc import unsafe_alloc
from common.ptr import F32Ptr
from gemm.cpu.blocking import MR, NR, NV, W, MC, PACK_B_BYTES, leaf_size, round_up, bit_length
from gemm.cpu.pack_f32 import pack_a, pack_b
from gemm.cpu.ukernel_f32 import Acc, ukernel_leaf, ukernel_leaf_reversed
from gemm.cpu.tree import finish_tile


@fieldwise_init
struct GemmArgs(ImplicitlyCopyable, Movable):
    var a: Int
    var b: Int
    var c: Int
    var m: Int
    var n: Int
    var k: Int
    var trans_a: Bool
    var trans_b: Bool
    var a_bf16: Bool
    var b_bf16: Bool
    var sabotage: Bool


def nc_for(k: Int, ncols: Int) -> Int:
    var nc = (PACK_B_BYTES // (4 * max(k, 1))) // NR * NR
    nc = max(NR, min(nc, 4096))
    return min(nc, round_up(ncols, NR))


def f32_block(g: GemmArgs, i_lo: Int, i_hi: Int, j_lo: Int, j_hi: Int):
    var m = g.m
    var n = g.n
    var k = g.k
    if i_hi <= i_lo or j_hi <= j_lo:
        return
    var cptr = F32Ptr(unsafe_from_address=g.c)
    var lda = m if g.trans_a else k
    var ldb = k if g.trans_b else n
    var L = leaf_size(k)
    var nleaves = (k + L - 1) // L
    var levels = bit_length(nleaves)
    var nc_max = nc_for(k, j_hi - j_lo)
    var mc_pad = round_up(min(MC, i_hi - i_lo), MR)
    var bpack = unsafe_alloc[Float32](nc_max * k, alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    var apack = unsafe_alloc[Float32](mc_pad * L, alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    var level_stride = mc_pad * nc_max
    var nslots = level_stride * levels if nleaves > 1 else NR
    var slots = unsafe_alloc[Float32](nslots, alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    var acc = Acc(fill=SIMD[DType.float32, W](0))
    var jc = j_lo
    while jc < j_hi:
        var nc = min(nc_max, j_hi - jc)
        pack_b(g.b, g.b_bf16, g.trans_b, ldb, jc, nc, k, bpack)
        var npan = (nc + NR - 1) // NR
        var ic = i_lo
        while ic < i_hi:
            var mc = min(MC, i_hi - ic)
            var mpan = (mc + MR - 1) // MR
            for p in range(nleaves):
                var k0 = p * L
                var lk = min(L, k - k0)
                pack_a(g.a, g.a_bf16, g.trans_a, lda, ic, mc, k0, lk, apack)
                for jp in range(npan):
                    var nr = min(NR, nc - jp * NR)
                    var bp = bpack.unsafe_offset(jp * NR * k + k0 * NR)
                    for ip in range(mpan):
                        var mr = min(MR, mc - ip * MR)
                        var ap = apack.unsafe_offset(ip * MR * lk)
                        if g.sabotage and p == nleaves - 1:
                            ukernel_leaf_reversed(ap, bp, lk, acc)
                        else:
                            ukernel_leaf(ap, bp, lk, acc)
                        var tile_off = (jp * mpan + ip) * MR * NR
                        var cp = cptr.unsafe_offset((ic + ip * MR) * n + jc + jp * NR)
                        finish_tile(acc, p, nleaves, levels, slots, level_stride, tile_off, cp, n, mr, nr)
            ic += MC
        jc += nc_max
    bpack.unsafe_free()
    apack.unsafe_free()
    slots.unsafe_free()

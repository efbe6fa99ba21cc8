"""int8i32.v1 and int15i64.v1 on the CPU: loop nest and epilogue (lowbit contract
L-5/L-7, W-2/W-4).

S[i, j] is the exact integer sum of code products; any order gives the same S,
so the loop nest is free: per task, for each chunk of columns pack B (all of k),
for each block of rows pack A, then one micro-kernel run over all of k per tile
(int8: IMR rows x two B panels; int15: IMR rows x one panel, both planes).
int15 runs its 15-bit codes as four int8-piece products
  S = HH * 2**14 + (HL + LH) * 2**7 + LL   (H = hi plane, L = lo plane)
each an int32 sum (exact for k <= 65536), combined in int64.
Output: ftz(f32(S) * pow2f(ea[i] + eb[j])), f32 rounding to nearest even.
"""
from std.collections import Array
from common.ptr import F32Ptr, I8Ptr, I32Ptr, U32Ptr
from gemm.cpu.blocking import round_up, IMC, CachePlan
from gemm.cpu.pack_int import IMR, INR, kgroups, pack_a_int, pack_b_int
from gemm.cpu.ukernel_int import IW, INV, IAcc, ukernel_int, ukernel_int_2b
from arith.fp import pow2f_w
from arith.quant import scale_pow2, scale_pow2_normal, join15_products



@fieldwise_init
struct IntArgs(ImplicitlyCopyable, Movable):
    var a_hi: Int  # int8 codes (int8 profile) or the hi plane (int15)
    var a_lo: Int  # lo plane (int15 only)
    var ea: Int
    var b_hi: Int
    var b_lo: Int
    var eb: Int
    var c: Int
    var m: Int
    var n: Int
    var k: Int
    var int15: Bool
    var sabotage: Bool
    var bpre: Int  # 0, or B prepared over all n in this build's layout (int_pack_all)
    var e32: Bool  # every exponent of ea and eb inside (-2**30, 2**30): see with_e32
    var e_norm: Bool  # every sum ea[i] + eb[j] inside [-126, 127]: see with_e32
    var plan: CachePlan  # the process's cache blocks (blocking.cache_plan), read once per call


def with_e32(g: IntArgs) -> IntArgs:
    """g with e32 set when every exponent of ea (m) and eb (n) lies in (-2**30, 2**30):
    then each sum ea[i] + eb[j] is exact in int32 and the epilogue adds in int32;
    otherwise it adds in int64 and clamps. Both give pow2f of the true sum (L-5).
    And with e_norm set when every sum ea[i] + eb[j] lies in [-126, 127] (the sum of
    the two smallest exponents and of the two largest): then the epilogue scales with
    arith.quant.scale_pow2_normal, the same bits without the selects and the flush."""
    comptime LIM = 1 << 30
    var ok = True
    var ea = I32Ptr(unsafe_from_address=g.ea)
    var eb = I32Ptr(unsafe_from_address=g.eb)
    var lo_a = Int.MAX
    var hi_a = Int.MIN
    var lo_b = Int.MAX
    var hi_b = Int.MIN
    for i in range(g.m):
        var e = Int(ea.unsafe_load(i))
        ok = ok and (-LIM < e < LIM)
        lo_a = min(lo_a, e)
        hi_a = max(hi_a, e)
    for j in range(g.n):
        var e = Int(eb.unsafe_load(j))
        ok = ok and (-LIM < e < LIM)
        lo_b = min(lo_b, e)
        hi_b = max(hi_b, e)
    var r = g
    r.e32 = ok
    r.e_norm = ok and g.m > 0 and g.n > 0 and lo_a + lo_b >= -126 and hi_a + hi_b <= 127
    return r


def nc_int(p: CachePlan, k: Int, ncols: Int) -> Int:
    var per_col = (kgroups(k) * 4 + 4)
    var nc = (p.int_pack_b_bytes // per_col) // INR * INR
    nc = max(INR, min(nc, 4096))
    return min(nc, round_up(ncols, INR))


def imc_for(p: CachePlan, k: Int) -> Int:
    """Rows of A per block: a multiple of IMR, at most IMC, the packed block within
    the plan's int_a_block_bytes."""
    var mc = (p.int_a_block_bytes // (kgroups(k) * 4)) // IMR * IMR
    return max(IMR, min(IMC, mc))


def int_ws(g: IntArgs, rows: Int, cols: Int) -> Int:
    """Workspace (32-bit words) for one task's block."""
    var kg = kgroups(g.k)
    var planes = 2 if g.int15 else 1
    var nc = nc_int(g.plan, g.k, cols)
    var mc = round_up(min(imc_for(g.plan, g.k), rows), IMR)
    return planes * (round_up(nc * kg, 16) + round_up(nc, 16) + round_up(mc * kg, 16))


@always_inline
def store_scaled(
    g: IntArgs, s: SIMD[DType.float32, IW], ea_i: Int32, eb: I32Ptr, i: Int, j: Int, nr: Int
):
    # every exponent sum inside [-126, 127] (g.e_norm, the usual case): the normal
    # power and no flush; otherwise pow2f of the true sum and the flush
    var c = F32Ptr(unsafe_from_address=g.c).unsafe_offset(i * g.n + j)
    var out: SIMD[DType.float32, IW]
    if g.e_norm:
        out = scale_pow2_normal[IW](s, SIMD[DType.int32, IW](ea_i) + _load_eb(eb, j, nr))
    else:
        out = _scale_any(g, s, ea_i, eb, j, nr)
    if nr >= IW:
        c.unsafe_store(0, out)
    else:
        for l in range(nr):
            c.unsafe_store(l, out[l])


@always_inline
def _scale_any(g: IntArgs, s: SIMD[DType.float32, IW], ea_i: Int32, eb: I32Ptr, j: Int, nr: Int) -> SIMD[DType.float32, IW]:
    # the true exponent sum: in int32 when every exponent is inside (-2**30, 2**30)
    # (g.e32), else in int64 (no wrap-around) clamped to a range where pow2f is
    # already saturated (inf above 127, 0 below -126)
    var e: SIMD[DType.int32, IW]
    if g.e32:
        e = SIMD[DType.int32, IW](ea_i) + _load_eb(eb, j, nr)
    else:
        var e64 = SIMD[DType.int64, IW](Int64(ea_i)) + _load_eb(eb, j, nr).cast[DType.int64]()
        e = max(min(e64, SIMD[DType.int64, IW](1000)), SIMD[DType.int64, IW](-1000)).cast[DType.int32]()
    return scale_pow2[IW](s, pow2f_w[IW](e))


@always_inline
def _load_eb(eb: I32Ptr, j: Int, nr: Int) -> SIMD[DType.int32, IW]:
    if nr >= IW:
        return eb.unsafe_load[width=IW](j)
    var v = SIMD[DType.int32, IW](0)
    for l in range(nr):
        v[l] = eb.unsafe_load(j + l)
    return v


def vnni_packed_words(n: Int, k: Int, int15: Bool) -> Int:
    """32-bit words of B prepared for int_block: per plane round_up(n, INR) columns of
    k-group words, then per plane round_up(n, INR) column sums."""
    var planes = 2 if int15 else 1
    var npad = round_up(n, INR)
    return planes * npad * kgroups(k) + planes * npad


def vnni_pack_all(b_hi: Int, b_lo: Int, n: Int, k: Int, int15: Bool, j0: Int, j1: Int, dst: U32Ptr):
    """Columns [j0, j1) (j0 a multiple of INR) of B into the prepared layout."""
    var kg = kgroups(k)
    var npad = round_up(n, INR)
    var planes = 2 if int15 else 1
    var cs = dst.unsafe_offset(planes * npad * kg).unsafe_bitcast[Int32]()
    pack_b_int(I8Ptr(unsafe_from_address=b_hi), k, j0, j1 - j0, k, dst.unsafe_offset(j0 * kg), cs.unsafe_offset(j0))
    if int15:
        pack_b_int(I8Ptr(unsafe_from_address=b_lo), k, j0, j1 - j0, k, dst.unsafe_offset(npad * kg + j0 * kg),
                   cs.unsafe_offset(npad + j0))


def _int8_block(g: IntArgs, a: U32Ptr, b: U32Ptr, cs: I32Ptr, ic: Int, mc: Int, jc: Int, nc: Int, kg: Int):
    """int8: rows [ic, ic + mc) (packed A at a) times columns [jc, jc + nc) (packed B at
    b, column sums cs), per tile of IMR rows x 2 * INR columns: two adjacent B panels
    share every broadcast of A (4 vector loads and IMR broadcasts feed 4 * IMR
    vpdpbusd). Column-panel pairs outside, row panels inside, so a pair of B panels
    is reused down the whole A block."""
    var npan = (nc + INR - 1) // INR
    var mpan = (mc + IMR - 1) // IMR
    var ea = I32Ptr(unsafe_from_address=g.ea)
    var eb = I32Ptr(unsafe_from_address=g.eb)
    var acc = IAcc(fill=SIMD[DType.int32, IW](0))
    var acc2 = IAcc(fill=SIMD[DType.int32, IW](0))
    var jp = 0
    while jp < npan:
        var bp = b.unsafe_offset(jp * INR * kg)
        var two = jp + 1 < npan
        for ip in range(mpan):
            var mr = min(IMR, mc - ip * IMR)
            var ap = a.unsafe_offset(ip * IMR * kg)
            comptime for q in range(IMR * INV):
                acc[q] = SIMD[DType.int32, IW](0)
                acc2[q] = SIMD[DType.int32, IW](0)
            if two:
                ukernel_int_2b(ap, bp, bp.unsafe_offset(INR * kg), kg, acc, acc2)
            else:
                ukernel_int(ap, bp, kg, acc)
            if g.e_norm and two and mr == IMR and (jp + 2) * INR <= nc:
                _store_tile_normal(g, acc, acc2, cs.unsafe_offset(jp * INR), ea, eb, ic + ip * IMR, jc + jp * INR)
                continue
            # edge tiles, or exponent sums outside [-126, 127]: per vector. Rows and
            # halves indexed at compile time: a run-time index into acc would keep the
            # accumulators in memory, and the kernel loop would store them after every
            # vpdpbusd
            comptime for half in range(2):
                if half == 0 or two:
                    comptime for i in range(IMR):
                        if i < mr:
                            var r = ic + ip * IMR + i
                            comptime for v in range(INV):
                                var jj = (jp + half) * INR + v * IW
                                if jj < nc:
                                    var a32 = acc[i * INV + v] if half == 0 else acc2[i * INV + v]
                                    var f = (a32 - cs.unsafe_load[width=IW](jj) * 128).cast[DType.float32]()
                                    store_scaled(g, f, ea.unsafe_load(r), eb, r, jc + jj, nc - jj)
        jp += 2


@always_inline
def _store_tile_normal(g: IntArgs, acc: IAcc, acc2: IAcc, cs: I32Ptr, ea: I32Ptr, eb: I32Ptr, r0: Int, j0: Int):
    """A whole int8 tile, rows r0 .. r0 + IMR, columns j0 .. j0 + 2 * INR (acc holds the
    first INR, acc2 the next), when g.e_norm: the same values as store_scaled,
    ftz(f32(S) * pow2f(ea[r] + eb[j])) with S = acc - 128 * cs[j] by
    arith.quant.scale_pow2_normal, with the column terms loaded once per tile and no
    per-vector branches (with the per-vector route, 28% of the blocked kernel's time
    at k = 256 went outside its vpdpbusd loop)."""
    comptime NT = 2 * INV
    var cs128 = Array[SIMD[DType.int32, IW], NT](fill=SIMD[DType.int32, IW](0))
    var ebv = Array[SIMD[DType.int32, IW], NT](fill=SIMD[DType.int32, IW](0))
    comptime for v in range(NT):
        cs128[v] = cs.unsafe_load[width=IW](v * IW) * 128
        ebv[v] = eb.unsafe_load[width=IW](j0 + v * IW)
    comptime for i in range(IMR):
        var r = r0 + i
        var ea_r = SIMD[DType.int32, IW](ea.unsafe_load(r))
        var c = F32Ptr(unsafe_from_address=g.c).unsafe_offset(r * g.n + j0)
        comptime for v in range(NT):
            var a32 = acc[i * INV + v] if v < INV else acc2[i * INV + v - INV]
            var f = (a32 - cs128[v]).cast[DType.float32]()
            c.unsafe_store(v * IW, scale_pow2_normal[IW](f, ea_r + ebv[v]))


def int_block(g: IntArgs, i_lo: Int, i_hi: Int, j_lo: Int, j_hi: Int, ws: U32Ptr):
    if i_hi <= i_lo or j_hi <= j_lo:
        return
    var k = g.k
    var kg = kgroups(k)
    var nc_max = nc_int(g.plan, k, j_hi - j_lo)
    var imc = imc_for(g.plan, k)
    var mc_pad = round_up(min(imc, i_hi - i_lo), IMR)
    var bsz = round_up(nc_max * kg, 16)
    var csz = round_up(nc_max, 16)
    var asz = round_up(mc_pad * kg, 16)
    var b_h = ws
    var cs_h = ws.unsafe_offset(bsz).unsafe_bitcast[Int32]()
    var a_h = ws.unsafe_offset(bsz + csz)
    var base2 = bsz + csz + asz
    var b_l = ws.unsafe_offset(base2)
    var cs_l = ws.unsafe_offset(base2 + bsz).unsafe_bitcast[Int32]()
    var a_l = ws.unsafe_offset(base2 + bsz + csz)
    var ahp = I8Ptr(unsafe_from_address=g.a_hi)
    var alp = I8Ptr(unsafe_from_address=g.a_lo)
    var bhp = I8Ptr(unsafe_from_address=g.b_hi)
    var blp = I8Ptr(unsafe_from_address=g.b_lo)
    var ea = I32Ptr(unsafe_from_address=g.ea)
    var eb = I32Ptr(unsafe_from_address=g.eb)
    var acc = IAcc(fill=SIMD[DType.int32, IW](0))
    var acc2 = IAcc(fill=SIMD[DType.int32, IW](0))
    var jc = j_lo
    while jc < j_hi:
        var nc = min(nc_max, j_hi - jc)
        if g.bpre != 0:
            # prepared (vnni_pack_all): hi panels, lo panels, hi column sums, lo sums
            var npad = round_up(g.n, INR)
            var pre = U32Ptr(unsafe_from_address=g.bpre)
            var planes = 2 if g.int15 else 1
            b_h = pre.unsafe_offset(jc * kg)
            b_l = pre.unsafe_offset(npad * kg + jc * kg)
            cs_h = pre.unsafe_offset(planes * npad * kg + jc).unsafe_bitcast[Int32]()
            cs_l = pre.unsafe_offset(planes * npad * kg + npad + jc).unsafe_bitcast[Int32]()
        else:
            pack_b_int(bhp, k, jc, nc, k, b_h, cs_h)
            if g.int15:
                pack_b_int(blp, k, jc, nc, k, b_l, cs_l)
        var npan = (nc + INR - 1) // INR
        var ic = i_lo
        while ic < i_hi:
            var mc = min(imc, i_hi - ic)
            var mpan = (mc + IMR - 1) // IMR
            pack_a_int(ahp, k, ic, mc, k, True, a_h)
            if g.int15:
                pack_a_int(alp, k, ic, mc, k, True, a_l)
            if not g.int15:
                _int8_block(g, a_h, b_h, cs_h, ic, mc, jc, nc, kg)
                ic += imc
                continue
            # int15: per IMR x INR tile, four int8-piece products
            for jp in range(npan):
                var bph = b_h.unsafe_offset(jp * INR * kg)
                var bpl = b_l.unsafe_offset(jp * INR * kg)
                for ip in range(mpan):
                    var mr = min(IMR, mc - ip * IMR)
                    var aph = a_h.unsafe_offset(ip * IMR * kg)
                    var apl = a_l.unsafe_offset(ip * IMR * kg)
                    # HH' and HL' (A hi offset by +128)
                    comptime for q in range(IMR * INV):
                        acc[q] = SIMD[DType.int32, IW](0)
                        acc2[q] = SIMD[DType.int32, IW](0)
                    ukernel_int_2b(aph, bph, bpl, kg, acc, acc2)
                    var hh = Array[SIMD[DType.int64, IW], IMR * INV](fill=SIMD[DType.int64, IW](0))
                    var mid = Array[SIMD[DType.int64, IW], IMR * INV](fill=SIMD[DType.int64, IW](0))
                    comptime for i in range(IMR):
                        comptime for v in range(INV):
                            var ch = cs_h.unsafe_load[width=IW](jp * INR + v * IW)
                            var cl = cs_l.unsafe_load[width=IW](jp * INR + v * IW)
                            hh[i * INV + v] = (acc[i * INV + v] - ch * 128).cast[DType.int64]()
                            mid[i * INV + v] = (acc2[i * INV + v] - cl * 128).cast[DType.int64]()
                    # LH' and LL' (A lo offset by +128)
                    comptime for q in range(IMR * INV):
                        acc[q] = SIMD[DType.int32, IW](0)
                        acc2[q] = SIMD[DType.int32, IW](0)
                    ukernel_int_2b(apl, bph, bpl, kg, acc, acc2)
                    comptime for i in range(IMR):
                        if i < mr:
                            comptime for v in range(INV):
                                var jj = jp * INR + v * IW
                                if jj < nc:
                                    var ch = cs_h.unsafe_load[width=IW](jj)
                                    var cl = cs_l.unsafe_load[width=IW](jj)
                                    var lh = (acc[i * INV + v] - ch * 128).cast[DType.int64]()
                                    var ll = (acc2[i * INV + v] - cl * 128).cast[DType.int64]()
                                    var s = join15_products[IW](hh[i * INV + v], mid[i * INV + v], lh, ll)
                                    var f = s.cast[DType.float32]()
                                    store_scaled(g, f, ea.unsafe_load(ic + ip * IMR + i), eb, ic + ip * IMR + i, jc + jj, nc - jj)
            ic += imc
        jc += nc_max

"""The backward of the state-space forward steps (contracts/ops/IDENTICAL_TRAIN_CONTRACT.md,
rules T-63 .. T-74): S-10's lane norm backward, the SiLU and softplus backward, the
causal depthwise conv backward (S-13) and the Mamba-1 selective scan backward (S-17,
S-18, S-15's A_log). Called by train.cpu.ssm_entry; the elementwise and conv kernels
are generic over rows x width (Mamba-2 reuses them).

Every function covers a range of independent units (rows, or (batch row, channel)
pairs) and writes only its units' outputs, so no result depends on how an entry splits
a call into tasks. Sums over tokens or channels are not taken here: the kernels store
one term per (token, ...) and the caller folds them (T-2's fold, train_fold_rows).
The elementwise, norm and conv kernels run one element at a time; the scan backward
puts W channels in the SIMD lanes, each lane running exactly the scalar rule. Every
operand is read flushed (daz_in) and every value flushed (ftz) as it is made, products
by arith.elementary.mul (never fused into an add), fmas by std.math.fma where a rule
names one.
"""
from std.math import fma
from std.memory.alloc import unsafe_alloc
from std.sys import simd_width_of
from std.collections import Array
from common.ptr import F32Ptr
from arith.fp import ftz, daz_in
from arith.elementary import mul, sqrt_rn, expf, silu, softplus
from ssm.cpu.ops import _gt_total

comptime F1 = SIMD[DType.float32, 1]
comptime W = simd_width_of[DType.float32]()


@always_inline
def _ld(p: F32Ptr, i: Int) -> F1:
    return daz_in(F1(p.unsafe_load(i)))


@always_inline
def _add(a: F1, b: F1) -> F1:
    return ftz(a + b)


@always_inline
def _sub(a: F1, b: F1) -> F1:
    return ftz(a - b)


@always_inline
def _mul(a: F1, b: F1) -> F1:
    return ftz(mul(a, b))


@always_inline
def _div(a: F1, b: F1) -> F1:
    return ftz(a / b)


@always_inline
def _fma(a: F1, b: F1, c: F1) -> F1:
    return ftz(fma(a, b, c))


@always_inline
def _dsilu(x: F1) -> F1:
    """T-66: silu's derivative at x (read flushed): den = add(expf(neg(x)), 1);
    sg = div(1, den); ds = mul(sg, add(1, mul(x, sub(1, sg))))."""
    var den = _add(ftz(expf(-x)), F1(1))
    var sg = _div(F1(1), den)
    return _mul(sg, _add(F1(1), _mul(x, _sub(F1(1), sg))))


# ------------------------------------------------------------------ T-63 / T-64 S-10 backward
def lane_rstd(xr: F32Ptr, n: Int, eps: Float32) -> F1:
    """S-10's rstd of one row of n values: 32 lanes of fma chains (lane k over j = k,
    k + 32, ...), folded pairwise in lane order, then M-4's mean and rstd."""
    var lanes = SIMD[DType.float32, 32](0)
    for j in range(n):
        var v = _ld(xr, j)
        var k = j % 32
        lanes[k] = _fma(v, v, F1(lanes[k]))[0]
    var m = 32
    while m > 1:
        var half = m // 2
        for k in range(half):
            lanes[k] = _add(F1(lanes[2 * k]), F1(lanes[2 * k + 1]))[0]
        m = half
    var mean = _div(F1(lanes[0]), F1(Float32(n)))
    return _div(F1(1), ftz(sqrt_rn(_add(mean, daz_in(F1(eps))))))


def lane_norm_bwd_rows(dy: F32Ptr, ldy: Int, x: F32Ptr, ldx: Int, w: F32Ptr, dx: F32Ptr, ldo: Int,
                       terms: F32Ptr, ldt: Int, n: Int, eps: Float32, r0: Int, r1: Int):
    """T-63, T-64 for rows r0 .. r1 of width n: rstd by S-10; c = chain over j ascending
    of fma(dh_j, x_j, c) with dh_j = mul(dy_j, w_j) (T-9's order); dx by T-10;
    terms[r, j] = mul(dy_j, mul(x_j, rstd)) (T-11's term, folded over the tokens by the
    caller)."""
    for r in range(r0, r1):
        var xr = x.unsafe_offset(r * ldx)
        var dr = dy.unsafe_offset(r * ldy)
        var rstd = lane_rstd(xr, n, eps)
        var c = F1(0)
        for j in range(n):
            c = _fma(_mul(_ld(dr, j), _ld(w, j)), _ld(xr, j), c)
        var r3 = _mul(_mul(rstd, rstd), rstd)
        var dv = _div(_mul(F1(-0.5), _mul(c, r3)), F1(Float32(n)))
        var o = dx.unsafe_offset(r * ldo)
        var t = terms.unsafe_offset(r * ldt)
        for j in range(n):
            var xj = _ld(xr, j)
            var dyj = _ld(dr, j)
            var dh = _mul(dyj, _ld(w, j))
            o.unsafe_store(j, _add(_mul(dh, rstd), _mul(dv, _mul(F1(2), xj)))[0])
            t.unsafe_store(j, _mul(dyj, _mul(xj, rstd))[0])


# ------------------------------------------------------------------ T-66 SiLU backward
def silu_bwd_rows(x: F32Ptr, ldx: Int, dy: F32Ptr, ldy: Int, dst: F32Ptr, ldo: Int, n: Int,
                  r0: Int, r1: Int):
    """T-66: dst[r, j] = mul(dy, dsilu(x)) for the pre-activation x."""
    for r in range(r0, r1):
        for j in range(n):
            var g = _mul(_ld(dy, r * ldy + j), _dsilu(_ld(x, r * ldx + j)))
            dst.unsafe_store(r * ldo + j, g[0])


# ------------------------------------------------------------------ T-67 softplus backward
def softplus_bwd_rows(raw: F32Ptr, ldr: Int, bias: F32Ptr, dy: F32Ptr, ldy: Int, dst: F32Ptr,
                      ldo: Int, n: Int, clamp: Bool, lo: Float32, hi: Float32, r0: Int, r1: Int):
    """T-67: v = add(raw[r, j], bias[j]) (S-16's / S-19's input to softplus); with the
    clamp (S-19), dst = +0 where the clamp replaced softplus(v); otherwise dst = dy
    (flushed) where v > 20, else mul(dy, div(1, add(expf(neg(v)), 1)))."""
    var vlo = daz_in(F1(lo))
    var vhi = daz_in(F1(hi))
    for r in range(r0, r1):
        for j in range(n):
            var v = _add(_ld(raw, r * ldr + j), _ld(bias, j))
            var g = _ld(dy, r * ldy + j)
            if not (v[0] > 20):
                var sg = _div(F1(1), _add(ftz(expf(-v)), F1(1)))
                g = _mul(g, sg)
            if clamp:
                var c = ftz(softplus(v))
                var hit = False
                if _gt_total(vlo, c):
                    c = vlo
                    hit = True
                if _gt_total(c, vhi):
                    hit = True
                if hit:
                    g = F1(0)
            dst.unsafe_store(r * ldo + j, g[0])


# ------------------------------------------------------------------ T-65 conv backward
def conv_bwd_range(x: F32Ptr, ldx: Int, cw: F32Ptr, dc: F32Ptr, lddc: Int, dx: F32Ptr, lddx: Int,
                   terms: F32Ptr, L: Int, C: Int, u0: Int, u1: Int):
    """T-65 for units u0 .. u1 of (batch row b, channel c): dc the gradient at the
    conv's output (before the SiLU), x its input (a fresh zero window: positions < 0
    are +0). dx[l] = chain over j = l .. min(l + 3, L - 1) ascending of
    fma(dc[j], w[c, 3 - (j - l)], acc) from +0; terms[b * L + l, 4c + k] =
    mul(dc[l], x[l - 3 + k]) (x = +0 before the row), folded over the tokens by the
    caller into the weight's gradient (the bias's is the fold of dc itself)."""
    for u in range(u0, u1):
        var b = u // C
        var c = u % C
        for l in range(L):
            var acc = F1(0)
            for j in range(l, min(l + 4, L)):
                acc = _fma(_ld(dc, (b * L + j) * lddc + c), _ld(cw, c * 4 + 3 - (j - l)), acc)
            dx.unsafe_store((b * L + l) * lddx + c, acc[0])
            var g = _ld(dc, (b * L + l) * lddc + c)
            var t = terms.unsafe_offset((b * L + l) * 4 * C + 4 * c)
            for k in range(4):
                var p = l - 3 + k
                var xv = F1(0)
                if p >= 0:
                    xv = _ld(x, (b * L + p) * ldx + c)
                t.unsafe_store(k, _mul(g, xv)[0])


# ------------------------------------------------------------------ T-68 .. T-71 Mamba-1 scan
struct ScanBwd(ImplicitlyCopyable, Movable):
    """One call of the Mamba-1 scan backward (addresses, leading dims and sizes)."""
    var u: Int  # (rows, ldu) post-SiLU conv output
    var ldu: Int
    var dl: Int  # (rows, ldd) delta
    var ldd: Int
    var a: Int  # (di, 16) A = neg(expf(A_log))
    var bc: Int  # (rows, ldbc) x_proj output: B at boff, C at coff
    var ldbc: Int
    var boff: Int
    var coff: Int
    var dv: Int  # (di,) D
    var z: Int  # (rows, ldz) z
    var ldz: Int
    var dg: Int  # (rows, ldg) the gradient at the gated output
    var ldg: Int
    var du: Int  # out (rows, ldg): the scan's and skip's part of u's gradient
    var ddelta: Int  # out (rows, ldg)
    var dz: Int  # out (rows, lddz) z's gradient
    var lddz: Int
    var tb: Int  # out (di, rows, 16): B's per-channel terms
    var tc: Int  # out (di, rows, 16): C's per-channel terms
    var ta: Int  # out (rows, di * 16): A_log's per-token terms
    var td: Int  # out (rows, di): D's per-token terms
    var L: Int
    var di: Int
    var rows: Int

    def __init__(out self, u: Int, ldu: Int, dl: Int, ldd: Int, a: Int, bc: Int, ldbc: Int,
                  boff: Int, coff: Int, dv: Int, z: Int, ldz: Int, dg: Int, ldg: Int, du: Int,
                  ddelta: Int, dz: Int, lddz: Int, tb: Int, tc: Int, ta: Int, td: Int, L: Int,
                  di: Int, rows: Int):
        self.u = u
        self.ldu = ldu
        self.dl = dl
        self.ldd = ldd
        self.a = a
        self.bc = bc
        self.ldbc = ldbc
        self.boff = boff
        self.coff = coff
        self.dv = dv
        self.z = z
        self.ldz = ldz
        self.dg = dg
        self.ldg = ldg
        self.du = du
        self.ddelta = ddelta
        self.dz = dz
        self.lddz = lddz
        self.tb = tb
        self.tc = tc
        self.ta = ta
        self.td = td
        self.L = L
        self.di = di
        self.rows = rows


@always_inline
def _scan_bwd_cols[w: Int](s: ScanBwd, b: Int, c0: Int, hist: F32Ptr, das: F32Ptr, ys: F32Ptr,
                          ab: F32Ptr):
    """Channels c0 .. c0 + w of batch row b, one channel a lane (each lane runs the scalar
    rule alone: the bits of one channel at a time). hist: (L + 1) * 16 * w floats (h
    after each token, state-major, lanes innermost), das: L * 16 * w (the forward's da,
    kept: the same value T-68 recomputes), ys: L * w, ab: 16 * w (A)."""
    comptime V = SIMD[DType.float32, w]
    var L = s.L
    var di = s.di
    var u = F32Ptr(unsafe_from_address=s.u)
    var dl = F32Ptr(unsafe_from_address=s.dl)
    var ap = F32Ptr(unsafe_from_address=s.a)
    var bc = F32Ptr(unsafe_from_address=s.bc)
    var zp = F32Ptr(unsafe_from_address=s.z)
    var dgp = F32Ptr(unsafe_from_address=s.dg)
    var dup = F32Ptr(unsafe_from_address=s.du)
    var ddp = F32Ptr(unsafe_from_address=s.ddelta)
    var dzp = F32Ptr(unsafe_from_address=s.dz)
    var tbp = F32Ptr(unsafe_from_address=s.tb)
    var tcp = F32Ptr(unsafe_from_address=s.tc)
    var tap = F32Ptr(unsafe_from_address=s.ta)
    var tdp = F32Ptr(unsafe_from_address=s.td)
    for i in range(w):
        for nn in range(16):
            ab.unsafe_store(nn * w + i, _ld(ap, (c0 + i) * 16 + nn)[0])
    var dc = daz_in(F32Ptr(unsafe_from_address=s.dv).unsafe_offset(c0).unsafe_load[width=w](0))
    for nn in range(16):
        hist.unsafe_offset(nn * w).unsafe_store(0, V(0))
    # the forward (S-17): h after token t at hist[(t + 1) * 16 * w ..]
    for t in range(L):
        var row = b * L + t
        var delta = daz_in(dl.unsafe_offset(row * s.ldd + c0).unsafe_load[width=w](0))
        var uu = daz_in(u.unsafe_offset(row * s.ldu + c0).unsafe_load[width=w](0))
        var y = V(0)
        for nn in range(16):
            var av = ab.unsafe_offset(nn * w).unsafe_load[width=w](0)
            var da = ftz(expf(ftz(mul(delta, av))))
            var db = ftz(mul(delta, V(_ld(bc, row * s.ldbc + s.boff + nn)[0])))
            var dbu = ftz(mul(db, uu))
            var hp = hist.unsafe_offset((t * 16 + nn) * w).unsafe_load[width=w](0)
            var hv = ftz(fma(da, hp, dbu))
            hist.unsafe_offset(((t + 1) * 16 + nn) * w).unsafe_store(0, hv)
            das.unsafe_offset((t * 16 + nn) * w).unsafe_store(0, da)
            y = ftz(fma(V(_ld(bc, row * s.ldbc + s.coff + nn)[0]), hv, y))
        ys.unsafe_offset(t * w).unsafe_store(0, y)
    # the backward, tokens in reverse; the carried gradient of h starts at +0
    var carry = Array[V, 16](fill=V(0))
    var t = L - 1
    while t >= 0:
        var row = b * L + t
        var delta = daz_in(dl.unsafe_offset(row * s.ldd + c0).unsafe_load[width=w](0))
        var uu = daz_in(u.unsafe_offset(row * s.ldu + c0).unsafe_load[width=w](0))
        var zz = daz_in(zp.unsafe_offset(row * s.ldz + c0).unsafe_load[width=w](0))
        var g = daz_in(dgp.unsafe_offset(row * s.ldg + c0).unsafe_load[width=w](0))
        var sk = ftz(ys.unsafe_offset(t * w).unsafe_load[width=w](0) + ftz(mul(uu, dc)))
        var ds = ftz(mul(g, silu(zz)))
        dzp.unsafe_offset(row * s.lddz + c0).unsafe_store(0, ftz(mul(ftz(mul(g, sk)), _dsilu_w[w](zz))))
        tdp.unsafe_offset(row * di + c0).unsafe_store(0, ftz(mul(ds, uu)))
        var dua = V(0)
        var dda = V(0)
        var tbs = Array[V, 16](fill=V(0))
        var tcs = Array[V, 16](fill=V(0))
        var tas = Array[V, 16](fill=V(0))
        for nn in range(16):
            var an = ab.unsafe_offset(nn * w).unsafe_load[width=w](0)
            var bn = V(_ld(bc, row * s.ldbc + s.boff + nn)[0])
            var cn = V(_ld(bc, row * s.ldbc + s.coff + nn)[0])
            var hn = hist.unsafe_offset(((t + 1) * 16 + nn) * w).unsafe_load[width=w](0)
            var hp = hist.unsafe_offset((t * 16 + nn) * w).unsafe_load[width=w](0)
            var dh = ftz(fma(ds, cn, carry[nn]))
            var da = das.unsafe_offset((t * 16 + nn) * w).unsafe_load[width=w](0)
            var db = ftz(mul(delta, bn))
            carry[nn] = ftz(mul(dh, da))
            var ddb = ftz(mul(dh, uu))
            dua = ftz(fma(dh, db, dua))
            var dp = ftz(mul(ftz(mul(dh, hp)), da))
            dda = ftz(fma(ddb, bn, dda))
            dda = ftz(fma(dp, an, dda))
            tbs[nn] = ftz(mul(ddb, delta))
            tcs[nn] = ftz(mul(ds, hn))
            tas[nn] = ftz(mul(ftz(mul(dp, delta)), an))
        for i in range(w):  # each channel's 16 terms are contiguous
            var c = c0 + i
            var ob = tbp.unsafe_offset((c * s.rows + row) * 16)
            var oc = tcp.unsafe_offset((c * s.rows + row) * 16)
            var oa = tap.unsafe_offset(row * di * 16 + c * 16)
            for nn in range(16):
                ob.unsafe_store(nn, tbs[nn][i])
                oc.unsafe_store(nn, tcs[nn][i])
                oa.unsafe_store(nn, tas[nn][i])
        dup.unsafe_offset(row * s.ldg + c0).unsafe_store(0, ftz(dua + ftz(mul(ds, dc))))
        ddp.unsafe_offset(row * s.ldg + c0).unsafe_store(0, dda)
        t -= 1


@always_inline
def _dsilu_w[w: Int](x: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    """T-66's ds lane by lane (each lane the scalar steps of _dsilu)."""
    comptime V = SIMD[DType.float32, w]
    var den = ftz(ftz(expf(-x)) + V(1))
    var sg = ftz(V(1) / den)
    return ftz(mul(sg, ftz(V(1) + ftz(mul(x, ftz(V(1) - sg))))))


def mamba1_scan_bwd_range(s: ScanBwd, u0: Int, u1: Int):
    """T-68 .. T-71 for units u0 .. u1 of (batch row b, block of W channels): the forward
    scan recomputed with S-17's steps (h after every token kept, y kept), then the tokens
    in reverse with the gradient of h carried (see the rules for every step). W channels
    a step in the lanes; a last partial block one channel at a time."""
    var L = s.L
    var di = s.di
    var nblk = (di + W - 1) // W
    var hist = unsafe_alloc[Float32]((L + 1) * 16 * W, alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    var ys = unsafe_alloc[Float32](max(1, L) * W, alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    var ab = unsafe_alloc[Float32](16 * W, alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    var das = unsafe_alloc[Float32](max(1, L) * 16 * W, alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    for unit in range(u0, u1):
        var b = unit // nblk
        var c0 = (unit % nblk) * W
        if c0 + W <= di:
            _scan_bwd_cols[W](s, b, c0, hist, das, ys, ab)
        else:
            for c in range(c0, di):
                _scan_bwd_cols[1](s, b, c, hist, das, ys, ab)
    das.unsafe_free()
    hist.unsafe_free()
    ys.unsafe_free()
    ab.unsafe_free()

"""Causal attention over the cache (contract rules M-6, M-11..M-15, M-21, M-24).

A unit is (batch b, key/value head g, a chunk of queries); it serves every query head
that reads g. For each query (absolute position p) and head:
  scores   s_j over all keys 0 .. nkeys-1 (cached keys first, then this call's):
           fp32.v1 dot over head_dim (leaves of 128, pairwise tree), or under
           fixed15_v1 the int15i64.v1 cell of the rotated q row and k row, both
           quantized here on every call;
  scale    s_j = mul(s_j, scale), scale = div(1, sqrt(f32(head_dim)));
  mask     s_j = add(s_j, m_j), m_j = +0 for j <= p, else -FLT_MAX;
  softmax  mx over the row (NaN -> quiet NaN), e_j = expf(add(s_j, -mx)),
           den = serial sum of e_j ascending, w_j = div(e_j, den);
  P.V      out_c = serial fma chain over j ascending from +0: fma(w_j, v_jc, acc).
The key cache is (batch, kv_heads, head_dim, tmax) (keys are columns, so a dot is
vectorized across keys), the value cache (batch, kv_heads, tmax, head_dim).
"""
from std.math import fma
from std.memory import bitcast
from std.memory.alloc import unsafe_alloc
from std.sys import simd_width_of
from std.collections import Array
from common.ptr import F32Ptr, U32Ptr, I32Ptr, I64Ptr
from arith.fp import ftz, is_nan, pow2f, NEG_FLT_MAX_BITS, QNAN_BITS
from arith.elementary import mul, sqrt_rn_pos, expf
from arith.quant import row_exponent, quant_scale, codes, INT15_SHIFT, INT15_CMAX
from arith.tree import tree_add

comptime W = simd_width_of[DType.float32]()
comptime F1 = SIMD[DType.float32, 1]
comptime FW = SIMD[DType.float32, W]
comptime LEAF = 128  # = arith.tree.leaf_size(head_dim) for every head_dim <= 131072 (rule 6.2)
comptime MAX_LEAVES = 8
comptime KB = 4  # key blocks of W lanes in flight


@fieldwise_init
struct AttnArgs(Copyable, ImplicitlyCopyable, Movable):
    var q: Int          # (batch, length, ldq) rotated queries, head h at h * head_dim
    var ldq: Int
    var kt: Int         # key cache
    var v: Int          # value cache
    var out: Int        # (batch, length, n_heads * head_dim)
    var batch: Int
    var length: Int
    var n_heads: Int
    var n_kv: Int
    var head_dim: Int
    var pos0: Int
    var tmax: Int
    var fixed15: Bool
    var qchunk: Int


@always_inline
def attn_scale(head_dim: Int) -> Float32:
    """M-6: div(1, sqrt(f32(head_dim))): two roundings."""
    return ftz(F1(1) / sqrt_rn_pos(F1(Float32(head_dim))))[0]


def attn_ws_floats(a: AttnArgs) -> Int:
    """Per-unit workspace (float32 words): scores row, and under fixed15 the key
    codes (int32), their exponents and the query codes."""
    var nkeys = a.pos0 + a.length
    var n = nkeys + 16
    if a.fixed15:
        n += nkeys * a.head_dim + nkeys + a.head_dim + 16 + nkeys * a.head_dim
    return (n + 15) // 16 * 16


def attn_unit(a: AttnArgs, unit: Int, ws: F32Ptr):
    var nchunks = (a.length + a.qchunk - 1) // a.qchunk
    var b = unit // (a.n_kv * nchunks)
    var rem = unit % (a.n_kv * nchunks)
    var g = rem // nchunks
    var ch = rem % nchunks
    var i0 = ch * a.qchunk
    var i1 = min(a.length, i0 + a.qchunk)
    var hd = a.head_dim
    var nkeys = a.pos0 + a.length
    var group = a.n_heads // a.n_kv
    var scale = attn_scale(hd)
    var kt = F32Ptr(unsafe_from_address=a.kt).unsafe_offset((b * a.n_kv + g) * hd * a.tmax)
    var vc = F32Ptr(unsafe_from_address=a.v).unsafe_offset((b * a.n_kv + g) * a.tmax * hd)
    var qb = F32Ptr(unsafe_from_address=a.q)
    var ob = F32Ptr(unsafe_from_address=a.out)
    var s = ws
    # fixed15: quantize every key row (rotated, float32 in the cache) once per unit
    var kcodes = I32Ptr(unsafe_from_address=Int(ws.unsafe_offset(nkeys + 16)))
    var kexp = kcodes.unsafe_offset(nkeys * hd)
    var qcodes = kexp.unsafe_offset(nkeys + 16)
    var krow = F32Ptr(unsafe_from_address=Int(qcodes.unsafe_offset(hd)))
    if a.fixed15:
        for j in range(nkeys):
            for kk in range(hd):
                krow.unsafe_store(j * hd + kk, kt.unsafe_load(kk * a.tmax + j))
        var kbits = U32Ptr(unsafe_from_address=Int(krow))
        for j in range(nkeys):
            var e = row_exponent(kbits.unsafe_offset(j * hd), hd, INT15_SHIFT)
            kexp.unsafe_store(j, Int32(e))
            var sc = quant_scale(e)
            for kk in range(hd):
                kcodes.unsafe_store(j * hd + kk, codes[1, INT15_CMAX](kbits.unsafe_load(j * hd + kk), sc)[0])
    var nleaves = (hd + LEAF - 1) // LEAF
    # Masked keys (position > the query's) add exactly nothing when every q, k and v
    # value is finite and small: their score is a finite |dot| < 2**100, the mask makes
    # it exactly -FLT_MAX, expf gives +0, the weight is +0 and fma(+0, v, acc) = acc.
    # Then the row stops at the query's own key; otherwise every key is computed.
    var kv_small = _all_small(kt, hd, a.tmax, nkeys) and _all_finite_rows(vc, nkeys, hd)
    for i in range(i0, i1):
        var p = a.pos0 + i
        for hh in range(group):
            var h = g * group + hh
            var qr = qb.unsafe_offset((b * a.length + i) * a.ldq + h * hd)
            var n_eff = nkeys
            if kv_small and _all_small(qr, hd, 1, 1):
                n_eff = p + 1
            # ---- scores
            if a.fixed15:
                var qe = row_exponent(U32Ptr(unsafe_from_address=Int(qr)), hd, INT15_SHIFT)
                var qsc = quant_scale(qe)
                var qbits = U32Ptr(unsafe_from_address=Int(qr))
                for kk in range(hd):
                    qcodes.unsafe_store(kk, codes[1, INT15_CMAX](qbits.unsafe_load(kk), qsc)[0])
                for j in range(n_eff):
                    var acc = SIMD[DType.int64, 8](0)
                    var kr = kcodes.unsafe_offset(j * hd)
                    var kk = 0
                    while kk + 8 <= hd:
                        acc += qcodes.unsafe_load[width=8](kk).cast[DType.int64]() * kr.unsafe_load[width=8](kk).cast[DType.int64]()
                        kk += 8
                    var sum = acc.reduce_add()
                    while kk < hd:
                        sum += Int64(qcodes.unsafe_load(kk)) * Int64(kr.unsafe_load(kk))
                        kk += 1
                    var e = qe + Int(kexp.unsafe_load(j))
                    var p2 = F1(pow2f(e))
                    var c = ftz(mul(F1(sum.cast[DType.float32]()), p2))
                    s.unsafe_store(j, ftz(mul(c, F1(scale)))[0])
            else:
                _scores_f32(qr, kt, a.tmax, hd, nleaves, n_eff, scale, s)
            _softmax_row(s, n_eff, p)
            # ---- P.V: one serial fma chain per output element, vectorized across it
            var orow = ob.unsafe_offset((b * a.length + i) * a.n_heads * hd + h * hd)
            var c = 0
            # four column blocks at once: four independent chains in flight, each
            # output element still one chain over the keys in ascending order
            while c + 4 * W <= hd:
                var acc0 = FW(0)
                var acc1 = FW(0)
                var acc2 = FW(0)
                var acc3 = FW(0)
                for j in range(n_eff):
                    var wv = FW(s.unsafe_load(j))
                    var vrow = vc.unsafe_offset(j * hd + c)
                    acc0 = fma(wv, vrow.unsafe_load[width=W](0), acc0)
                    acc1 = fma(wv, vrow.unsafe_load[width=W](W), acc1)
                    acc2 = fma(wv, vrow.unsafe_load[width=W](2 * W), acc2)
                    acc3 = fma(wv, vrow.unsafe_load[width=W](3 * W), acc3)
                orow.unsafe_store(c, ftz(acc0))
                orow.unsafe_store(c + W, ftz(acc1))
                orow.unsafe_store(c + 2 * W, ftz(acc2))
                orow.unsafe_store(c + 3 * W, ftz(acc3))
                c += 4 * W
            while c + W <= hd:
                var acc = FW(0)
                for j in range(n_eff):
                    acc = fma(FW(s.unsafe_load(j)), vc.unsafe_load[width=W](j * hd + c), acc)
                orow.unsafe_store(c, ftz(acc))
                c += W
            while c < hd:
                var acc = F1(0)
                for j in range(n_eff):
                    acc = fma(F1(s.unsafe_load(j)), F1(vc.unsafe_load(j * hd + c)), acc)
                orow.unsafe_store(c, ftz(acc)[0])
                c += 1


@always_inline
def _all_small(x: F32Ptr, rows: Int, ld: Int, cols: Int) -> Bool:
    """Every x[r * ld + c] (r < rows, c < cols) finite with |x| < 2**40."""
    var lim = SIMD[DType.uint32, W](0x53800000)  # 2**40
    for r in range(rows):
        var row = U32Ptr(unsafe_from_address=Int(x.unsafe_offset(r * ld)))
        var c = 0
        while c + W <= cols:
            if ((row.unsafe_load[width=W](c) & 0x7FFFFFFF).ge(lim)).reduce_or():
                return False
            c += W
        while c < cols:
            if (row.unsafe_load(c) & 0x7FFFFFFF) >= 0x53800000:
                return False
            c += 1
    return True


@always_inline
def _all_finite_rows(v: F32Ptr, rows: Int, hd: Int) -> Bool:
    var n = rows * hd
    var u = U32Ptr(unsafe_from_address=Int(v))
    var c = 0
    var inf = SIMD[DType.uint32, W](0x7F800000)
    while c + W <= n:
        if ((u.unsafe_load[width=W](c) & 0x7FFFFFFF).ge(inf)).reduce_or():
            return False
        c += W
    while c < n:
        if (u.unsafe_load(c) & 0x7FFFFFFF) >= 0x7F800000:
            return False
        c += 1
    return True


def _scores_f32(qr: F32Ptr, kt: F32Ptr, tmax: Int, hd: Int, nleaves: Int, n: Int, scale: Float32, s: F32Ptr):
    """s[j] = mul(fp32.v1 dot(q, key j), scale) for j < n (M-11, M-6), keys as columns."""
    var j = 0
    while j + KB * W <= n:
        var parts = Array[SIMD[DType.float32, W], KB * MAX_LEAVES](fill=FW(0))
        for lf in range(nleaves):
            var acc0 = FW(0)
            var acc1 = FW(0)
            var acc2 = FW(0)
            var acc3 = FW(0)
            for kk in range(lf * LEAF, min(hd, (lf + 1) * LEAF)):
                var qv = FW(qr.unsafe_load(kk))
                var row = kt.unsafe_offset(kk * tmax + j)
                acc0 = fma(qv, row.unsafe_load[width=W](0), acc0)
                acc1 = fma(qv, row.unsafe_load[width=W](W), acc1)
                acc2 = fma(qv, row.unsafe_load[width=W](2 * W), acc2)
                acc3 = fma(qv, row.unsafe_load[width=W](3 * W), acc3)
            parts[lf * KB + 0] = ftz(acc0)
            parts[lf * KB + 1] = ftz(acc1)
            parts[lf * KB + 2] = ftz(acc2)
            parts[lf * KB + 3] = ftz(acc3)
        _tree[KB](parts, nleaves)
        comptime for q in range(KB):
            s.unsafe_store(j + q * W, ftz(mul(parts[q], FW(scale))))
        j += KB * W
    while j + W <= n:
        var parts = Array[SIMD[DType.float32, W], KB * MAX_LEAVES](fill=FW(0))
        for lf in range(nleaves):
            var acc = FW(0)
            for kk in range(lf * LEAF, min(hd, (lf + 1) * LEAF)):
                acc = fma(FW(qr.unsafe_load(kk)), kt.unsafe_load[width=W](kk * tmax + j), acc)
            parts[lf * KB] = ftz(acc)
        _tree[KB](parts, nleaves)
        s.unsafe_store(j, ftz(mul(parts[0], FW(scale))))
        j += W
    while j < n:
        var partsn = Array[Float32, MAX_LEAVES](fill=0)
        for lf in range(nleaves):
            var acc = F1(0)
            for kk in range(lf * LEAF, min(hd, (lf + 1) * LEAF)):
                acc = fma(F1(qr.unsafe_load(kk)), F1(kt.unsafe_load(kk * tmax + j)), acc)
            partsn[lf] = ftz(acc)[0]
        var nl = nleaves
        while nl > 1:
            var half = nl // 2
            for t in range(half):
                partsn[t] = tree_add[1](F1(partsn[2 * t]), F1(partsn[2 * t + 1]))[0]
            if nl % 2 == 1:
                partsn[half] = partsn[nl - 1]
            nl = half + nl % 2
        s.unsafe_store(j, ftz(mul(F1(partsn[0]), F1(scale)))[0])
        j += 1


@always_inline
def _tree[kb: Int](mut parts: Array[SIMD[DType.float32, W], KB * MAX_LEAVES], nleaves: Int):
    """fp32.v1's balanced pairwise tree over leaf partials (odd last carried), kb lanes-groups."""
    var n = nleaves
    while n > 1:
        var half = n // 2
        for t in range(half):
            comptime for q in range(kb):
                parts[t * KB + q] = tree_add[W](parts[2 * t * KB + q], parts[(2 * t + 1) * KB + q])
        if n % 2 == 1:
            comptime for q in range(kb):
                parts[half * KB + q] = parts[(n - 1) * KB + q]
        n = half + n % 2


def _softmax_row(s: F32Ptr, n: Int, p: Int):
    """M-12, M-13, M-14 on s[0..n): mask (add +0 or -FLT_MAX), row max (NaN -> quiet NaN),
    e_j = expf(add(s_j, -mx)), den a serial sum ascending, w_j = div(e_j, den)."""
    var negw = FW(bitcast[DType.float32, 1](SIMD[DType.uint32, 1](NEG_FLT_MAX_BITS))[0])
    var ninf = bitcast[DType.float32, 1](SIMD[DType.uint32, 1](0xFF800000))[0]
    var mxv = FW(ninf)
    var nanv = SIMD[DType.bool, W](fill=False)
    var j = 0
    while j + W <= n:
        var idx = SIMD[DType.int32, W](Int32(j)) + _iota()
        var m = idx.gt(SIMD[DType.int32, W](Int32(p))).select(negw, FW(0))
        var x = ftz(s.unsafe_load[width=W](j) + m)
        s.unsafe_store(j, x)
        nanv = nanv | is_nan(x)
        mxv = max(mxv, x)
        j += W
    var mx = F1(mxv.reduce_max())
    var any_nan = nanv.reduce_or()
    while j < n:
        var x = F1(s.unsafe_load(j))
        x = ftz(x + F1(negw[0])) if j > p else ftz(x + F1(0))
        s.unsafe_store(j, x[0])
        if is_nan(x)[0]:
            any_nan = True
        elif x > mx:
            mx = x
        j += 1
    if any_nan:
        mx = bitcast[DType.float32, 1](SIMD[DType.uint32, 1](QNAN_BITS))
    var negmx = FW(-mx[0])
    j = 0
    while j + W <= n:
        s.unsafe_store(j, ftz(expf(ftz(s.unsafe_load[width=W](j) + negmx))))
        j += W
    while j < n:
        s.unsafe_store(j, ftz(expf(ftz(F1(s.unsafe_load(j)) + F1(negmx[0]))))[0])
        j += 1
    var den = F1(0)
    for jj in range(n):
        den = ftz(den + F1(s.unsafe_load(jj)))
    var dw = FW(den[0])
    j = 0
    while j + W <= n:
        s.unsafe_store(j, ftz(s.unsafe_load[width=W](j) / dw))
        j += W
    while j < n:
        s.unsafe_store(j, ftz(F1(s.unsafe_load(j)) / den)[0])
        j += 1


@always_inline
def _iota() -> SIMD[DType.int32, W]:
    var v = SIMD[DType.int32, W](0)
    comptime for i in range(W):
        v[i] = Int32(i)
    return v

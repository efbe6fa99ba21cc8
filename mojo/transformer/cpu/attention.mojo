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
  P.V      out_c = serial fma chain over j ascending from +0: fma(w_j, v_jc, acc)
           (arith.tree.chain_step_daz: flushed per step by DAZ, or explicitly).
The key cache is (batch, kv_heads, head_dim, tmax) (keys are columns, so a dot is
vectorized across keys), the value cache (batch, kv_heads, tmax, head_dim).
"""
from std.memory import bitcast
from std.memory.alloc import unsafe_alloc
from std.sys import simd_width_of
from std.collections import Array
from common.ptr import F32Ptr, U32Ptr, I32Ptr, I64Ptr
from arith.fp import ftz, is_nan, pow2f, NEG_FLT_MAX_BITS, QNAN_BITS
from arith.elementary import mul, sqrt_rn_pos, expf_daz
from arith.quant import row_exponent, quant_scale, codes, INT15_SHIFT, INT15_CMAX
from arith.tree import leaf_size, leaf_count, chain_step_daz, serial_add_daz, tree_add

comptime W = simd_width_of[DType.float32]()
comptime F1 = SIMD[DType.float32, 1]
comptime FW = SIMD[DType.float32, W]
comptime MAX_LEAVES = 8  # leaf_count(head_dim) for head_dim <= 1024
comptime KB = 4  # key blocks of W lanes in flight
comptime HG = 4  # query heads of one key/value head computed together (they share K, V)
# key / column blocks in flight when HG heads share them: fewer on 16-register AVX2
comptime KBM = 4 if W >= 16 else 2


def kn_heads[G: Int]() -> Int:
    """Key / column blocks in flight for G heads sharing them. AVX2 (16 registers): as
    many as keep the G * KN chains, the KN loaded vectors and one broadcast in
    registers (1 head 6, 2 heads 4, 3 heads 3), where KBM kept 2, 4 and 6 chains in
    flight: too few for two fmas a cycle at a 5-cycle latency (Zen 2), which wants 10.
    4 heads keep KBM (8 chains; 3 blocks measured the same). AVX-512 (32 registers):
    1 or 2 heads 8 blocks (8 or 16 chains), 3 and 4 heads KBM (12 and 16 chains; 6
    blocks measured the same or slower on a Zen 4). One head's P.V does not use it
    (_pv_head's 4 chains: 6 blocks there were slower on AVX2)."""
    comptime if W >= 16:
        if G <= 2:
            return 8
        return KBM
    if G == 1:
        return 6
    if G == 2:
        return 4
    if G == 3:
        return 3
    return KBM


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


def _srow(nkeys: Int) -> Int:
    """Floats between the score rows of the heads computed together."""
    return (nkeys + 16 + 15) // 16 * 16


def attn_ws_floats(a: AttnArgs) -> Int:
    """Per-unit workspace (float32 words): HG score rows, and under fixed15 the key
    codes (int32), their exponents and the query codes."""
    var nkeys = a.pos0 + a.length
    var n = HG * _srow(nkeys)
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
    var srow = _srow(nkeys)
    # fixed15: quantize every key row (rotated, float32 in the cache) once per unit
    var kcodes = I32Ptr(unsafe_from_address=Int(ws.unsafe_offset(HG * srow)))
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
    # Masked keys (position > the query's) add exactly nothing when every q, k and v
    # value is finite and small: their score is a finite |dot| < 2**100, the mask makes
    # it exactly -FLT_MAX, expf gives +0, the weight is +0 and fma(+0, v, acc) = acc.
    # Then the row stops at the query's own key; otherwise every key is computed.
    var kv_small = _all_small(kt, hd, a.tmax, nkeys) and _all_finite_rows(vc, nkeys, hd)
    for i in range(i0, i1):
        var p = a.pos0 + i
        var hh0 = 0
        while hh0 < group:
            # up to HG query heads of this key/value head at once: every K and V load
            # feeds each of them; each (head, key) and (head, column) chain is the one
            # a head alone computes
            var gn = min(HG, group - hh0)
            var h0 = g * group + hh0
            var q0 = qb.unsafe_offset((b * a.length + i) * a.ldq + h0 * hd)
            var o0 = ob.unsafe_offset((b * a.length + i) * a.n_heads * hd + h0 * hd)
            var n_eff = group_row_len(q0, gn, hd, kv_small, nkeys, p)
            if a.fixed15:
                for t in range(gn):
                    _scores_fixed15(q0.unsafe_offset(t * hd), hd, kcodes, kexp, qcodes, n_eff,
                                    scale, ws.unsafe_offset(t * srow))
            else:
                group_scores_f32(q0, kt, a.tmax, hd, gn, n_eff, scale, ws, srow)
            group_softmax(ws, srow, gn, n_eff, p)
            # ---- P.V: one serial fma chain per output element, vectorized across it
            var c_done = 0
            if gn == 4:
                c_done = _pv_heads[4](ws, srow, vc, hd, n_eff, o0)
            elif gn == 3:
                c_done = _pv_heads[3](ws, srow, vc, hd, n_eff, o0)
            elif gn == 2:
                c_done = _pv_heads[2](ws, srow, vc, hd, n_eff, o0)
            for t in range(gn):
                _pv_head(ws.unsafe_offset(t * srow), vc, hd, n_eff, o0.unsafe_offset(t * hd), c_done)
            hh0 += gn


def group_row_len(q0: F32Ptr, gn: Int, hd: Int, keys_small: Bool, nkeys: Int, p: Int) -> Int:
    """The keys the gn query heads at q0 (rows q0 + t * hd) compute for the query at
    absolute position p: keys past the query add nothing for a head whose values are
    small (keys_small: the caller's check of its keys, and values where they are
    used; and the head's own row finite with |q| < 2**40): their score is a finite
    |dot| < 2**100, the mask makes it exactly -FLT_MAX, expf gives +0, the weight is
    +0. Computing them anyway gives the same bits, so the heads computed together
    take the longest row any of them needs."""
    if not keys_small:
        return nkeys
    for t in range(gn):
        if not _all_small(q0.unsafe_offset(t * hd), hd, 1, 1):
            return nkeys
    return p + 1


def group_scores_f32(q0: F32Ptr, kt: F32Ptr, tmax: Int, hd: Int, gn: Int, n_eff: Int,
                     scale: Float32, ws: F32Ptr, srow: Int):
    """M-11 scores by fp32.v1 over head_dim, M-6 scale, for gn <= HG query heads (rows
    q0 + t * hd) that read the same keys (kt: head_dim rows of tmax), into
    ws + t * srow. One leaf: the heads side by side (every key vector loaded once
    feeds each head's chains); each (head, key) chain is the one the head alone
    computes."""
    var nleaves = leaf_count(hd)
    var j_done = 0
    if nleaves == 1:
        if gn == 4:
            j_done = _scores_heads[4](q0, kt, tmax, hd, n_eff, scale, ws, srow)
        elif gn == 3:
            j_done = _scores_heads[3](q0, kt, tmax, hd, n_eff, scale, ws, srow)
        elif gn == 2:
            j_done = _scores_heads[2](q0, kt, tmax, hd, n_eff, scale, ws, srow)
        else:
            j_done = _scores_heads[1](q0, kt, tmax, hd, n_eff, scale, ws, srow)
    for t in range(gn):
        _scores_f32(q0.unsafe_offset(t * hd), kt, tmax, hd, nleaves, n_eff, scale,
                    ws.unsafe_offset(t * srow), j_done)


def group_softmax(ws: F32Ptr, srow: Int, gn: Int, n_eff: Int, p: Int):
    """M-12 mask and M-13 softmax of gn score rows (ws + t * srow, n_eff keys, query at
    absolute position p), in place: the heads' serial denominators side by side
    (independent chains in flight)."""
    for t in range(gn):
        _softmax_exp(ws.unsafe_offset(t * srow), n_eff, p)
    var den = _serial_sums(ws, srow, gn, n_eff)
    for t in range(gn):
        _softmax_div(ws.unsafe_offset(t * srow), n_eff, den[t])


def _scores_fixed15(qr: F32Ptr, hd: Int, kcodes: I32Ptr, kexp: I32Ptr, qcodes: I32Ptr,
                    n_eff: Int, scale: Float32, s: F32Ptr):
    """M-21: s[j] = mul(int15i64.v1 cell of q and key j, scale), keys quantized."""
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


def _scores_heads[G: Int](q0: F32Ptr, kt: F32Ptr, tmax: Int, hd: Int, n: Int, scale: Float32,
                          s0: F32Ptr, srow: Int) -> Int:
    """_scores_f32 for G heads (rows q0 + t * hd, scores s0 + t * srow) that read the
    same keys, one leaf (hd <= leaf size): every key vector loaded once feeds G chains.
    Keys in blocks of kn_heads[G]() * W, then of KBM * W, then of W, then the last
    partial W while it stays inside the cache's rows (its lanes past n land in the
    rows' slack, never read).
    Returns the keys done; the caller finishes the row."""
    comptime KN = kn_heads[G]()
    var j = 0
    while j + KN * W <= n:
        _score_block[G, KN](q0, kt, tmax, hd, scale, s0, srow, j)
        j += KN * W
    comptime if KN > KBM:
        while j + KBM * W <= n:
            _score_block[G, KBM](q0, kt, tmax, hd, scale, s0, srow, j)
            j += KBM * W
    while j < n and j + W <= tmax:
        _score_block[G, 1](q0, kt, tmax, hd, scale, s0, srow, j)
        j += W
    return min(j, n)


@always_inline
def _score_block[G: Int, KN: Int](q0: F32Ptr, kt: F32Ptr, tmax: Int, hd: Int, scale: Float32,
                                  s0: F32Ptr, srow: Int, j: Int):
    var acc = Array[FW, G * KN](fill=FW(0))
    for kk in range(hd):
        var row = kt.unsafe_offset(kk * tmax + j)
        var kv = Array[FW, KN](fill=FW(0))
        comptime for q in range(KN):
            kv[q] = row.unsafe_load[width=W](q * W)
        comptime for t in range(G):
            var qv = FW(q0.unsafe_load(t * hd + kk))
            comptime for q in range(KN):
                acc[t * KN + q] = chain_step_daz[W](qv, kv[q], acc[t * KN + q])
    comptime for t in range(G):
        comptime for q in range(KN):
            s0.unsafe_store(t * srow + j + q * W, ftz(mul(ftz(acc[t * KN + q]), FW(scale))))


def _pv_heads[G: Int](s0: F32Ptr, srow: Int, vc: F32Ptr, hd: Int, n: Int, o0: F32Ptr) -> Int:
    """P.V for G heads (weights s0 + t * srow, outputs o0 + t * hd) over the same values:
    every value vector loaded once feeds G chains. Column blocks of kn_heads[G]() * W,
    then of KBM * W. Returns the columns done (a multiple of W); the caller finishes
    the row."""
    comptime KN = kn_heads[G]()
    var c = 0
    while c + KN * W <= hd:
        _pv_block[G, KN](s0, srow, vc, hd, n, o0, c)
        c += KN * W
    comptime if KN > KBM:
        while c + KBM * W <= hd:
            _pv_block[G, KBM](s0, srow, vc, hd, n, o0, c)
            c += KBM * W
    return c


@always_inline
def _pv_block[G: Int, KN: Int](s0: F32Ptr, srow: Int, vc: F32Ptr, hd: Int, n: Int, o0: F32Ptr, c: Int):
    """Columns [c, c + KN * W) of P.V for G heads: one serial fma chain per (head,
    column) over the keys in ascending order (M-15)."""
    var acc = Array[FW, G * KN](fill=FW(0))
    for j in range(n):
        var vrow = vc.unsafe_offset(j * hd + c)
        var vv = Array[FW, KN](fill=FW(0))
        comptime for q in range(KN):
            vv[q] = vrow.unsafe_load[width=W](q * W)
        comptime for t in range(G):
            var wv = FW(s0.unsafe_load(t * srow + j))
            comptime for q in range(KN):
                acc[t * KN + q] = chain_step_daz[W](wv, vv[q], acc[t * KN + q])
    comptime for t in range(G):
        comptime for q in range(KN):
            o0.unsafe_store(t * hd + c + q * W, ftz(acc[t * KN + q]))


def _pv_head(s: F32Ptr, vc: F32Ptr, hd: Int, n_eff: Int, orow: F32Ptr, c0: Int):
    """M-15 for one head from column c0: out_c = serial fma chain over the keys."""
    var c = c0
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
            acc0 = chain_step_daz[W](wv, vrow.unsafe_load[width=W](0), acc0)
            acc1 = chain_step_daz[W](wv, vrow.unsafe_load[width=W](W), acc1)
            acc2 = chain_step_daz[W](wv, vrow.unsafe_load[width=W](2 * W), acc2)
            acc3 = chain_step_daz[W](wv, vrow.unsafe_load[width=W](3 * W), acc3)
        orow.unsafe_store(c, ftz(acc0))
        orow.unsafe_store(c + W, ftz(acc1))
        orow.unsafe_store(c + 2 * W, ftz(acc2))
        orow.unsafe_store(c + 3 * W, ftz(acc3))
        c += 4 * W
    while c + W <= hd:
        var acc = FW(0)
        for j in range(n_eff):
            acc = chain_step_daz[W](FW(s.unsafe_load(j)), vc.unsafe_load[width=W](j * hd + c), acc)
        orow.unsafe_store(c, ftz(acc))
        c += W
    while c < hd:
        var acc = F1(0)
        for j in range(n_eff):
            acc = chain_step_daz[1](F1(s.unsafe_load(j)), F1(vc.unsafe_load(j * hd + c)), acc)
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


def _scores_f32(qr: F32Ptr, kt: F32Ptr, tmax: Int, hd: Int, nleaves: Int, n: Int, scale: Float32,
                s: F32Ptr, j0: Int):
    """s[j] = mul(fp32.v1 dot(q, key j), scale) for j0 <= j < n (M-11, M-6), keys as
    columns: leaves of arith.tree.leaf_size(hd) (128 for every head_dim <= 131072), each
    one chain of chain_step_daz, then the pairwise tree."""
    var leaf = leaf_size(hd)
    var j = j0
    while j + KB * W <= n:
        var parts = Array[SIMD[DType.float32, W], KB * MAX_LEAVES](fill=FW(0))
        for lf in range(nleaves):
            var acc0 = FW(0)
            var acc1 = FW(0)
            var acc2 = FW(0)
            var acc3 = FW(0)
            for kk in range(lf * leaf, min(hd, (lf + 1) * leaf)):
                var qv = FW(qr.unsafe_load(kk))
                var row = kt.unsafe_offset(kk * tmax + j)
                acc0 = chain_step_daz[W](qv, row.unsafe_load[width=W](0), acc0)
                acc1 = chain_step_daz[W](qv, row.unsafe_load[width=W](W), acc1)
                acc2 = chain_step_daz[W](qv, row.unsafe_load[width=W](2 * W), acc2)
                acc3 = chain_step_daz[W](qv, row.unsafe_load[width=W](3 * W), acc3)
            parts[lf * KB + 0] = ftz(acc0)
            parts[lf * KB + 1] = ftz(acc1)
            parts[lf * KB + 2] = ftz(acc2)
            parts[lf * KB + 3] = ftz(acc3)
        _tree[KB](parts, nleaves)
        comptime for q in range(KB):
            s.unsafe_store(j + q * W, ftz(mul(parts[q], FW(scale))))
        j += KB * W
    # W keys at a time; the last partial group too while it stays inside the cache's
    # rows (j + W <= tmax): the lanes past n are computed on whatever the cache holds
    # there and land in the scores row's slack (16 floats past nkeys), never read
    while j < n and j + W <= tmax:
        var parts = Array[SIMD[DType.float32, W], KB * MAX_LEAVES](fill=FW(0))
        for lf in range(nleaves):
            var acc = FW(0)
            for kk in range(lf * leaf, min(hd, (lf + 1) * leaf)):
                acc = chain_step_daz[W](FW(qr.unsafe_load(kk)), kt.unsafe_load[width=W](kk * tmax + j), acc)
            parts[lf * KB] = ftz(acc)
        _tree[KB](parts, nleaves)
        s.unsafe_store(j, ftz(mul(parts[0], FW(scale))))
        j += W
    while j < n:
        var partsn = Array[Float32, MAX_LEAVES](fill=0)
        for lf in range(nleaves):
            var acc = F1(0)
            for kk in range(lf * leaf, min(hd, (lf + 1) * leaf)):
                acc = chain_step_daz[1](F1(qr.unsafe_load(kk)), F1(kt.unsafe_load(kk * tmax + j)), acc)
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


def _softmax_exp(s: F32Ptr, n: Int, p: Int):
    """M-12, M-13 on s[0..n): mask (add +0 or -FLT_MAX), row max (NaN -> quiet NaN),
    e_j = expf(add(s_j, -mx)) (expf_daz: this runs under the contract floating-point
    state); _serial_sums and _softmax_div finish M-14."""
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
        s.unsafe_store(j, expf_daz(ftz(s.unsafe_load[width=W](j) + negmx)))
        j += W
    while j < n:
        s.unsafe_store(j, expf_daz(ftz(F1(s.unsafe_load(j)) + F1(negmx[0])))[0])
        j += 1


def _serial_sums(s0: F32Ptr, srow: Int, g: Int, n: Int) -> SIMD[DType.float32, HG]:
    """M-14's denominators of g <= HG rows (s0 + t * srow): each a serial sum over
    j ascending from +0, ftz at every step; the rows' chains run side by side."""
    var den = SIMD[DType.float32, HG](0)
    var lanes = SIMD[DType.float32, HG](0)
    for j in range(n):
        comptime for t in range(HG):
            lanes[t] = s0.unsafe_load(t * srow + j) if t < g else Float32(0)
        den = serial_add_daz[HG](den, lanes)
    return ftz(den)


def _softmax_div(s: F32Ptr, n: Int, den: Float32):
    """M-14: w_j = div(e_j, den)."""
    var dw = FW(den)
    var j = 0
    while j + W <= n:
        s.unsafe_store(j, ftz(s.unsafe_load[width=W](j) / dw))
        j += W
    while j < n:
        s.unsafe_store(j, ftz(F1(s.unsafe_load(j)) / F1(den))[0])
        j += 1


@always_inline
def _iota() -> SIMD[DType.int32, W]:
    var v = SIMD[DType.int32, W](0)
    comptime for i in range(W):
        v[i] = Int32(i)
    return v

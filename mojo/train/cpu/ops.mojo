"""CPU kernels of the training primitives under fp32_v1 (training-arithmetic-v1, rules
T-*; contracts/ops/IDENTICAL_TRAIN_CONTRACT.md).

Each function covers a range of independent units (rows, column blocks, leaves,
element ranges) so an entry can split a call into tasks; no result depends on the
split. Vector code puts independent units in the SIMD lanes (columns, rows or leaves),
each lane running exactly the scalar rule, so the bits are those of one unit at a
time. Callers run under the contract state (common.fpstate: DAZ on, FTZ off); every
operand is read through daz_in and every stored value is flushed. Products that feed
an add go through arith.elementary.mul (never contracted into an fma).

Reductions (T-2): `dot(k)` / `fold(k)` are fp32.v1's leaves of L(k) (arith.tree),
a chain per leaf from +0, then the balanced tree with odd carry; `chain` is one
serial loop from +0.
"""
from std.math import fma
from std.memory import bitcast
from std.sys import simd_width_of
from std.collections import Array
from common.ptr import F32Ptr, I64Ptr, I32Ptr
from arith.fp import ftz, daz_in, daz_bits
from arith.tree import leaf_size, leaf_count, chain_step, chain_step_daz, serial_add_daz
from arith.elementary import mul, sqrt_rn, sqrt_nonneg_cpu, expf_daz, logf
from gemm.cpu.pack_f32 import transpose_sq

comptime W = simd_width_of[DType.float32]()
comptime F1 = SIMD[DType.float32, 1]
comptime FW = SIMD[DType.float32, W]
comptime MAX_LEAVES = 1024


@always_inline
def f32_of(bits: Int) -> Float32:
    return bitcast[DType.float32, 1](SIMD[DType.uint32, 1](UInt32(bits)))[0]


@always_inline
def bits_of(x: Float32) -> Int:
    return Int(bitcast[DType.uint32, 1](F1(x))[0])


@always_inline
def _gather[w: Int](p: F32Ptr, base: Int, stride: Int) -> SIMD[DType.float32, w]:
    """Lane l: p[base + l * stride], read flushed."""
    var v = SIMD[DType.float32, w](0)
    comptime for l in range(w):
        v[l] = p.unsafe_load(base + l * stride)
    return daz_in(v)


# ------------------------------------------------------------------ T-2 reductions
@always_inline
def _leaves[w: Int, DOT: Bool](p: F32Ptr, first: Int, L: Int, n: Int) -> SIMD[DType.float32, w]:
    """w leaves at once (lane l: the leaf starting at first + l * L), n steps each:
    DOT acc = ftz(fma(x, x, acc)) (T-23's fused squares), else acc = ftz(add(acc, x)),
    from +0 ascending; the flush deferred to the end (arith.tree's DAZ argument)."""
    var acc = SIMD[DType.float32, w](0)
    for i in range(n):
        var a = _gather[w](p, first + i, L)
        comptime if DOT:
            acc = chain_step_daz[w](a, a, acc)
        else:
            acc = serial_add_daz[w](acc, a)
    return ftz(acc)


@always_inline
def _leaves_t[DOT: Bool](p: F32Ptr, first: Int, L: Int, n: Int) -> FW:
    """_leaves[W, DOT] by blocks: W contiguous values of each of the W leaves loaded as
    rows and transposed in registers (gemm.cpu.pack_f32.transpose_sq), so step s of
    every leaf is one vector; the same steps in the same order (the same bits), without
    W scalar loads a step. The last n % W steps gather."""
    var acc = FW(0)
    var i = 0
    while i + W <= n:
        var r = Array[FW, W](fill=FW(0))
        comptime for l in range(W):
            r[l] = daz_in(p.unsafe_offset(first + l * L + i).unsafe_load[width=W](0))
        transpose_sq[DType.float32, W](r)
        comptime for st in range(W):
            comptime if DOT:
                acc = chain_step_daz[W](r[st], r[st], acc)
            else:
                acc = serial_add_daz[W](acc, r[st])
        i += W
    while i < n:
        var a = _gather[W](p, first + i, L)
        comptime if DOT:
            acc = chain_step_daz[W](a, a, acc)
        else:
            acc = serial_add_daz[W](acc, a)
        i += 1
    return ftz(acc)


def leaf_partials[DOT: Bool](p: F32Ptr, k: Int, l0: Int, l1: Int, dst: F32Ptr):
    """dst[j] = leaf j of the k contiguous values at p (leaves of L(k)), j in [l0, l1):
    W full leaves a step in the lanes, the rest one at a time."""
    var L = leaf_size(k)
    var nfull = k // L
    var j = l0
    while j + W <= min(l1, nfull):
        dst.unsafe_offset(j).unsafe_store(0, _leaves_t[DOT](p, j * L, L, L))
        j += W
    while j + 4 <= min(l1, nfull):
        dst.unsafe_offset(j).unsafe_store(0, _leaves[4, DOT](p, j * L, L, L))
        j += 4
    while j < l1:
        dst.unsafe_store(j, _leaves[1, DOT](p, j * L, L, min(L, k - j * L))[0])
        j += 1


def tree_buf[w: Int](buf: F32Ptr, n: Int) -> SIMD[DType.float32, w]:
    """fp32.v1's balanced tree (rule 6.4) over n partials of w lanes stored at buf
    (partial i at buf + i * w): adjacent pairs summed and flushed, an odd last one
    carried, level by level, in place. n = 0 gives +0."""
    comptime V = SIMD[DType.float32, w]
    if n == 0:
        return V(0)
    var m = n
    while m > 1:
        var h = m // 2
        for i in range(h):
            var a = buf.unsafe_offset(2 * i * w).unsafe_load[width=w](0)
            var b = buf.unsafe_offset((2 * i + 1) * w).unsafe_load[width=w](0)
            buf.unsafe_offset(i * w).unsafe_store(0, ftz(a + b))
        if m & 1:
            buf.unsafe_offset(h * w).unsafe_store(0, buf.unsafe_offset((m - 1) * w).unsafe_load[width=w](0))
        m = h + (m & 1)
    return buf.unsafe_load[width=w](0)


def reduce_contig[DOT: Bool](p: F32Ptr, k: Int, buf: F32Ptr) -> F1:
    """fold(k) (DOT false) or dot(k)(x, x) of k contiguous values; buf: MAX_LEAVES floats."""
    if k == 0:
        return F1(0)
    var n = leaf_count(k)
    leaf_partials[DOT](p, k, 0, n, buf)
    return tree_buf[1](buf, n)


@always_inline
def _fold_cols[w: Int, DW: Bool](x: F32Ptr, ldx: Int, dy: F32Ptr, rstd: F32Ptr, rows: Int, c0: Int,
                                 buf: F32Ptr) -> SIMD[DType.float32, w]:
    """fold(k = rows) down columns c0 .. c0 + w of x (rows, ldx), one column a lane:
    DW the terms mul(dy, mul(x, rstd_r)) (T-11), else x itself (T-2)."""
    comptime V = SIMD[DType.float32, w]
    if rows == 0:
        return V(0)
    var L = leaf_size(rows)
    var nl = leaf_count(rows)
    for j in range(nl):
        var acc = V(0)
        for r in range(j * L, min(rows, (j + 1) * L)):
            var xv = daz_in(x.unsafe_offset(r * ldx + c0).unsafe_load[width=w](0))
            comptime if DW:
                var dv = daz_in(dy.unsafe_offset(r * ldx + c0).unsafe_load[width=w](0))
                var t = mul(dv, mul(xv, V(rstd.unsafe_load(r))))
                acc = serial_add_daz[w](acc, t)
            else:
                acc = serial_add_daz[w](acc, xv)
        buf.unsafe_offset(j * w).unsafe_store(0, ftz(acc))
    return tree_buf[w](buf, nl)


def fold_cols_range[DW: Bool](x: F32Ptr, ldx: Int, dy: F32Ptr, rstd: F32Ptr, dst: F32Ptr, rows: Int,
                              n: Int, b0: Int, b1: Int, buf: F32Ptr):
    """Column blocks b0 .. b1 (of W columns) of fold_cols; buf: MAX_LEAVES * W floats."""
    for blk in range(b0, b1):
        var c0 = blk * W
        if c0 + W <= n:
            dst.unsafe_offset(c0).unsafe_store(0, _fold_cols[W, DW](x, ldx, dy, rstd, rows, c0, buf))
        else:
            for c in range(c0, n):
                dst.unsafe_store(c, _fold_cols[1, DW](x, ldx, dy, rstd, rows, c, buf)[0])


# ------------------------------------------------------------------ T-9 .. T-11 RMSNorm backward
@always_inline
def _rms_rows[w: Int](dy: F32Ptr, x: F32Ptr, wt: F32Ptr, dx: F32Ptr, rstd_out: F32Ptr, d: Int,
                      eps: Float32, r0: Int):
    """Rows r0 .. r0 + w, one row a lane for the two chains (M-4's sum of squares and
    T-9's c), then each row's dx W columns a step (T-10)."""
    comptime V = SIMD[DType.float32, w]
    var acc = V(0)
    var c = V(0)
    for j in range(d):
        var xv = _gather[w](x, r0 * d + j, d)
        var dyv = _gather[w](dy, r0 * d + j, d)
        var dh = mul(dyv, V(daz_in(F1(wt.unsafe_load(j)))[0]))
        acc = chain_step_daz[w](xv, xv, acc)
        c = chain_step_daz[w](dh, xv, c)
    acc = ftz(acc)
    c = ftz(c)
    var mean = ftz(acc / V(Float32(d)))
    var rstd = ftz(V(1) / sqrt_rn(ftz(mean + V(daz_in(F1(eps))[0]))))
    var r3 = mul(mul(rstd, rstd), rstd)
    var dv = ftz(mul(V(-0.5), mul(c, r3)) / V(Float32(d)))
    for l in range(w):
        var r = r0 + l
        rstd_out.unsafe_store(r, rstd[l])
        var rs = FW(rstd[l])
        var dvw = FW(dv[l])
        var xr = x.unsafe_offset(r * d)
        var dyr = dy.unsafe_offset(r * d)
        var o = dx.unsafe_offset(r * d)
        var j = 0
        while j + W <= d:
            var xj = daz_in(xr.unsafe_load[width=W](j))
            var dh = mul(daz_in(dyr.unsafe_load[width=W](j)), daz_in(wt.unsafe_load[width=W](j)))
            o.unsafe_store(j, ftz(mul(dh, rs) + mul(dvw, mul(FW(2), xj))))
            j += W
        while j < d:
            var xj = daz_in(F1(xr.unsafe_load(j)))
            var dh = mul(daz_in(F1(dyr.unsafe_load(j))), daz_in(F1(wt.unsafe_load(j))))
            o.unsafe_store(j, ftz(mul(dh, F1(rstd[l])) + mul(F1(dv[l]), mul(F1(2), xj)))[0])
            j += 1


def rms_backward_rows(dy: F32Ptr, x: F32Ptr, wt: F32Ptr, dx: F32Ptr, rstd_out: F32Ptr, d: Int,
                      eps: Float32, r0: Int, r1: Int):
    """T-9, T-10 for rows r0 .. r1; rstd_out[r] = the row's rstd (M-4) for T-11."""
    var r = r0
    while r + W <= r1:
        _rms_rows[W](dy, x, wt, dx, rstd_out, d, eps, r)
        r += W
    while r < r1:
        _rms_rows[1](dy, x, wt, dx, rstd_out, d, eps, r)
        r += 1


# ------------------------------------------------------------------ T-12 / T-13 embedding
def gather_flush_rows(table: F32Ptr, ids: I64Ptr, dst: F32Ptr, d: Int, r0: Int, r1: Int):
    """T-12: out[r] = ftz(table[ids[r]])."""
    for r in range(r0, r1):
        var src = table.unsafe_offset(Int(ids.unsafe_load(r)) * d)
        var o = dst.unsafe_offset(r * d)
        var j = 0
        while j + W <= d:
            o.unsafe_store(j, ftz(src.unsafe_load[width=W](j)))
            j += W
        while j < d:
            o.unsafe_store(j, ftz(F1(src.unsafe_load(j)))[0])
            j += 1


@always_inline
def _emb_cols[w: Int](dy: F32Ptr, ids: I64Ptr, acc: F32Ptr, tokens: Int, d: Int, c0: Int):
    for t in range(tokens):
        var v = Int(ids.unsafe_load(t))
        var a = acc.unsafe_offset(v * d + c0)
        var g = daz_in(dy.unsafe_offset(t * d + c0).unsafe_load[width=w](0))
        a.unsafe_store(0, ftz(daz_in(a.unsafe_load[width=w](0)) + g))


def embedding_backward_cols(dy: F32Ptr, ids: I64Ptr, acc: F32Ptr, tokens: Int, d: Int, b0: Int, b1: Int):
    """T-13 over column blocks b0 .. b1 (W columns each): for t ascending,
    acc[ids[t]] = add(acc[ids[t]], dy[t]): one chain per (row, column), continued from
    the acc handed in."""
    for blk in range(b0, b1):
        var c0 = blk * W
        if c0 + W <= d:
            _emb_cols[W](dy, ids, acc, tokens, d, c0)
        else:
            for c in range(c0, d):
                _emb_cols[1](dy, ids, acc, tokens, d, c)


# ------------------------------------------------------------------ T-14 .. T-18 cross entropy
@always_inline
def _key[w: Int](v: SIMD[DType.float32, w]) -> SIMD[DType.int32, w]:
    """An int32 in the total order of flushed non-NaN floats, -0 below +0."""
    var i = bitcast[DType.int32, w](daz_bits[w](bitcast[DType.uint32, w](v)))
    return i.lt(0).select(i ^ 0x7FFFFFFF, i)


@always_inline
def _of_key(k: Int32) -> F1:
    var i = k if k >= 0 else k ^ 0x7FFFFFFF
    return bitcast[DType.float32, 1](SIMD[DType.int32, 1](i))


def ce_rows(logits: F32Ptr, targets: I64Ptr, rows_out: F32Ptr, grad: F32Ptr, has_grad: Bool, V: Int,
            ignore_index: Int, eps: Float32, D: Float32, r0: Int, r1: Int, e: F32Ptr, buf: F32Ptr):
    """Rows r0 .. r1 of T-14 .. T-16 and (has_grad) T-18; e: 2 * V floats of scratch,
    buf MAX_LEAVES floats. The caller has checked every target."""
    var smooth_on = bitcast[DType.uint32, 1](F1(eps))[0] & 0x7FFFFFFF != 0
    var epsv = daz_in(F1(eps))
    var fV = F1(Float32(V))
    var one_m = ftz(F1(1) - epsv)
    var t_o = ftz(epsv / fV)
    var t_y = ftz(one_m + t_o)
    var Dv = daz_in(F1(D))
    var lp = e.unsafe_offset(V)
    for r in range(r0, r1):
        var y = Int(targets.unsafe_load(r))
        var xr = logits.unsafe_offset(r * V)
        var g = grad.unsafe_offset(r * V)
        if y == ignore_index:
            rows_out.unsafe_store(r, 0)
            if has_grad:
                var j = 0
                while j + W <= V:
                    g.unsafe_store(j, FW(0))
                    j += W
                while j < V:
                    g.unsafe_store(j, 0)
                    j += 1
            continue
        # m = rowmax (-0 below +0)
        var kv = SIMD[DType.int32, W](Int32.MIN)
        var j = 0
        while j + W <= V:
            kv = max(kv, _key[W](xr.unsafe_load[width=W](j)))
            j += W
        var km = kv.reduce_max()
        while j < V:
            km = max(km, _key[1](F1(xr.unsafe_load(j)))[0])
            j += 1
        var m = _of_key(km)
        var mw = FW(m[0])
        # s_v = sub(x_v, m), e_v = expf(s_v)
        j = 0
        while j + W <= V:
            e.unsafe_store(j, expf_daz(ftz(daz_in(xr.unsafe_load[width=W](j)) - mw)))
            j += W
        while j < V:
            e.unsafe_store(j, expf_daz(ftz(daz_in(F1(xr.unsafe_load(j))) - m))[0])
            j += 1
        var den = reduce_contig[False](e, V, buf)
        var lden = ftz(logf(den))
        var s_y = ftz(daz_in(F1(xr.unsafe_load(y))) - m)
        var nll = -ftz(s_y - lden)
        var row = nll
        if smooth_on:
            var lw = FW(lden[0])
            j = 0
            while j + W <= V:
                lp.unsafe_store(j, ftz(ftz(daz_in(xr.unsafe_load[width=W](j)) - mw) - lw))
                j += W
            while j < V:
                lp.unsafe_store(j, ftz(ftz(daz_in(F1(xr.unsafe_load(j))) - m) - lden)[0])
                j += 1
            var sm = reduce_contig[False](lp, V, buf)
            var smooth = -ftz(sm / fV)
            row = ftz(mul(one_m, nll) + mul(epsv, smooth))
        rows_out.unsafe_store(r, row[0])
        if has_grad:
            var dw = FW(den[0])
            var tow = FW(t_o[0])
            var Dw = FW(Dv[0])
            j = 0
            while j + W <= V:
                var wv = ftz(e.unsafe_load[width=W](j) / dw)
                g.unsafe_store(j, ftz(ftz(wv - tow) / Dw))
                j += W
            while j < V:
                var wv = ftz(F1(e.unsafe_load(j)) / den)
                g.unsafe_store(j, ftz(ftz(wv - t_o) / Dv)[0])
                j += 1
            var wy = ftz(F1(e.unsafe_load(y)) / den)
            g.unsafe_store(y, ftz(ftz(wy - t_y) / Dv)[0])


# ------------------------------------------------------------------ T-7 bias
def bias_backward_cols(dy: F32Ptr, dst: F32Ptr, rows: Int, n: Int, b0: Int, b1: Int):
    """T-7 over column blocks b0 .. b1 (W columns each, one column a lane): out[c] = the
    chain over rows ascending from +0 of acc = add(acc, dy[r, c]) (dst[c]), every operand read
    flushed and every step flushed."""
    for blk in range(b0, b1):
        var c0 = blk * W
        if c0 + W <= n:
            var acc = FW(0)
            for r in range(rows):
                acc = ftz(acc + daz_in(dy.unsafe_offset(r * n + c0).unsafe_load[width=W](0)))
            dst.unsafe_offset(c0).unsafe_store(0, acc)
        else:
            for c in range(c0, n):
                var acc = F1(0)
                for r in range(rows):
                    acc = ftz(acc + daz_in(F1(dy.unsafe_load(r * n + c))))
                dst.unsafe_store(c, acc[0])


# ------------------------------------------------------------------ T-19 .. T-21 chunked LM head
comptime LMH_ROWS_PER_PART = 256  # T-20: the mean's rows in parts of 256 (not fp32.v1's L(k))


def transpose_rows(src: F32Ptr, dst: F32Ptr, n_rows: Int, n_cols: Int, r0: Int, r1: Int):
    """dst (n_cols, n_rows) = src (n_rows, n_cols) transposed, for source rows r0 .. r1
    (a copy: no arithmetic)."""
    for r in range(r0, r1):
        for c in range(n_cols):
            dst.unsafe_store(c * n_rows + r, src.unsafe_load(r * n_cols + c))


@always_inline
def _lmh_z[w: Int](hr: F32Ptr, wt: F32Ptr, V: Int, width: Int, v0: Int) -> SIMD[DType.float32, w]:
    """T-19's z for vocab rows v0 .. v0 + w of one row of h (one vocab row a lane):
    the chain over features f ascending of acc = ftz(fma(h_f, W_vf, acc)) from +0
    (arith.tree.chain_step), wt the (width, V) transpose of W."""
    comptime V_ = SIMD[DType.float32, w]
    var acc = V_(0)
    for f in range(width):
        var hf = V_(daz_in(F1(hr.unsafe_load(f)))[0])
        acc = chain_step[w](hf, daz_in(wt.unsafe_offset(f * V + v0).unsafe_load[width=w](0)), acc)
    return acc


@always_inline
def _lmh_z4(hr: F32Ptr, wt: F32Ptr, V: Int, width: Int, v0: Int, z: F32Ptr):
    """_lmh_z[W] for four consecutive blocks of W vocab rows at once (four independent
    chains in flight; each lane's steps as in _lmh_z)."""
    var a0 = FW(0)
    var a1 = FW(0)
    var a2 = FW(0)
    var a3 = FW(0)
    for f in range(width):
        var hf = FW(daz_in(F1(hr.unsafe_load(f)))[0])
        var p = wt.unsafe_offset(f * V + v0)
        a0 = chain_step[W](hf, daz_in(p.unsafe_load[width=W](0)), a0)
        a1 = chain_step[W](hf, daz_in(p.unsafe_load[width=W](W)), a1)
        a2 = chain_step[W](hf, daz_in(p.unsafe_load[width=W](2 * W)), a2)
        a3 = chain_step[W](hf, daz_in(p.unsafe_load[width=W](3 * W)), a3)
    z.unsafe_store(v0, a0)
    z.unsafe_store(v0 + W, a1)
    z.unsafe_store(v0 + 2 * W, a2)
    z.unsafe_store(v0 + 3 * W, a3)


def lm_head_rows(h: F32Ptr, wt: F32Ptr, targets: I64Ptr, rows_out: F32Ptr, dl: F32Ptr, has_grad: Bool,
                 rows: Int, V: Int, width: Int, r0: Int, r1: Int, z: F32Ptr):
    """Rows r0 .. r1 of T-19 (row losses into rows_out) and, when has_grad, T-21's
    dl = div(sub(div(e, den), onehot), f32(rows)) into dl (rows, V). wt: W transposed
    (width, V); z: V floats of scratch. Per row: z by T-19's chains (vocab rows in the
    lanes), m = rowmax (-0 below +0), s = sub(z, m), e = expf(s), den = the chain over
    v = 0 .. V-1 of add(den, e_v) from +0 (every step flushed), row =
    neg(sub(s_y, logf(den))). The caller has checked every target."""
    var fR = F1(Float32(rows))
    for r in range(r0, r1):
        var hr = h.unsafe_offset(r * width)
        var y = Int(targets.unsafe_load(r))
        var v = 0
        while v + 4 * W <= V:
            _lmh_z4(hr, wt, V, width, v, z)
            v += 4 * W
        while v + W <= V:
            z.unsafe_store(v, _lmh_z[W](hr, wt, V, width, v))
            v += W
        while v < V:
            z.unsafe_store(v, _lmh_z[1](hr, wt, V, width, v)[0])
            v += 1
        # m = rowmax (-0 below +0)
        var kv = SIMD[DType.int32, W](Int32.MIN)
        var j = 0
        while j + W <= V:
            kv = max(kv, _key[W](z.unsafe_load[width=W](j)))
            j += W
        var km = kv.reduce_max()
        while j < V:
            km = max(km, _key[1](F1(z.unsafe_load(j)))[0])
            j += 1
        var m = _of_key(km)
        var mw = FW(m[0])
        var s_y = ftz(daz_in(F1(z.unsafe_load(y))) - m)
        # s = sub(z, m), e = expf(s), in place
        j = 0
        while j + W <= V:
            z.unsafe_store(j, expf_daz(ftz(daz_in(z.unsafe_load[width=W](j)) - mw)))
            j += W
        while j < V:
            z.unsafe_store(j, expf_daz(ftz(daz_in(F1(z.unsafe_load(j))) - m))[0])
            j += 1
        # den: one chain over v ascending (T-19), not T-14's fold
        var den = F1(0)
        for i in range(V):
            den = ftz(den + daz_in(F1(z.unsafe_load(i))))
        var lden = ftz(logf(den))
        rows_out.unsafe_store(r, (-ftz(s_y - lden))[0])
        if has_grad:
            var g = dl.unsafe_offset(r * V)
            var dw = FW(den[0])
            var rw = FW(fR[0])
            j = 0
            while j + W <= V:
                var wv = ftz(z.unsafe_load[width=W](j) / dw)
                g.unsafe_store(j, ftz(ftz(wv - FW(0)) / rw))
                j += W
            while j < V:
                var wv = ftz(F1(z.unsafe_load(j)) / den)
                g.unsafe_store(j, ftz(ftz(wv - F1(0)) / fR)[0])
                j += 1
            var wy = ftz(F1(z.unsafe_load(y)) / den)
            g.unsafe_store(y, ftz(ftz(wy - F1(1)) / fR)[0])


@always_inline
def _chain_cols[w: Int](coef: F32Ptr, cstride: Int, src: F32Ptr, n: Int, ld: Int, c0: Int) -> SIMD[DType.float32, w]:
    """Columns c0 .. c0 + w (one a lane) of the chain over i = 0 .. n-1 ascending from +0
    of acc = ftz(fma(coef[i * cstride], src[i * ld + c], acc)) (arith.tree.chain_step;
    T-21's dH and dW)."""
    comptime V_ = SIMD[DType.float32, w]
    var acc = V_(0)
    for i in range(n):
        var a = V_(daz_in(F1(coef.unsafe_load(i * cstride)))[0])
        acc = chain_step[w](a, daz_in(src.unsafe_offset(i * ld + c0).unsafe_load[width=w](0)), acc)
    return acc


def chain_cols_rows(coef: F32Ptr, cstride: Int, crow: Int, src: F32Ptr, n: Int, width: Int, dst: F32Ptr,
                    o0: Int, o1: Int):
    """T-21: for outputs o in o0 .. o1, dst[o, f] (width columns) = the chain over
    i = 0 .. n-1 ascending of fma(coef[o * crow + i * cstride], src[i, f], acc), W
    columns a step. dH: o a row of h, coef = dl (crow V, cstride 1), src = W (V, width);
    dW: o a vocab row, coef = dl (crow 1, cstride V), src = h (rows, width)."""
    for o in range(o0, o1):
        var c = coef.unsafe_offset(o * crow)
        var d = dst.unsafe_offset(o * width)
        var f = 0
        while f + W <= width:
            d.unsafe_store(f, _chain_cols[W](c, cstride, src, n, width, f))
            f += W
        while f < width:
            d.unsafe_store(f, _chain_cols[1](c, cstride, src, n, width, f)[0])
            f += 1


def lm_head_mean(rows_out: F32Ptr, rows: Int, buf: F32Ptr) -> F1:
    """T-20: the row losses in parts of 256 rows, each a chain from +0 ascending (every
    step flushed), the parts by fp32.v1's balanced tree (odd carry), then
    div(total, f32(rows)); buf: one float a part."""
    var nparts = (rows + LMH_ROWS_PER_PART - 1) // LMH_ROWS_PER_PART
    for p in range(nparts):
        var acc = F1(0)
        for r in range(p * LMH_ROWS_PER_PART, min(rows, (p + 1) * LMH_ROWS_PER_PART)):
            acc = ftz(acc + daz_in(F1(rows_out.unsafe_load(r))))
        buf.unsafe_store(p, acc[0])
    var total = tree_buf[1](buf, nparts)
    return ftz(total / F1(Float32(rows)))


# ------------------------------------------------------------------ T-23 .. T-26
def scale_range(g: F32Ptr, n: Int, coef: Float32):
    """T-25: g = mul(coef, ftz(g)) in place."""
    var cw = FW(daz_in(F1(coef))[0])
    var j = 0
    while j + W <= n:
        g.unsafe_store(j, mul(cw, daz_in(g.unsafe_load[width=W](j))))
        j += W
    while j < n:
        g.unsafe_store(j, mul(F1(cw[0]), daz_in(F1(g.unsafe_load(j))))[0])
        j += 1


def tree_sum_range(addrs: I64Ptr, count: Int, dst: F32Ptr, e0: Int, e1: Int, buf: F32Ptr):
    """T-26 over elements e0 .. e1: the balanced pairwise tree over count arrays (a
    power of two), adjacent pairs first, W elements a step (buf: count * W floats);
    count = 1 gives ftz(g0)."""
    var j = e0
    while j + W <= e1:
        for a in range(count):
            var p = F32Ptr(unsafe_from_address=Int(addrs.unsafe_load(a)))
            buf.unsafe_offset(a * W).unsafe_store(0, daz_in(p.unsafe_load[width=W](j)))
        var m = count
        while m > 1:
            var h = m // 2
            for i in range(h):
                var x = buf.unsafe_offset(2 * i * W).unsafe_load[width=W](0)
                var y = buf.unsafe_offset((2 * i + 1) * W).unsafe_load[width=W](0)
                buf.unsafe_offset(i * W).unsafe_store(0, ftz(x + y))
            m = h
        dst.unsafe_store(j, ftz(buf.unsafe_load[width=W](0)))
        j += W
    while j < e1:
        for a in range(count):
            var p = F32Ptr(unsafe_from_address=Int(addrs.unsafe_load(a)))
            buf.unsafe_store(a, daz_in(F1(p.unsafe_load(j)))[0])
        var m = count
        while m > 1:
            var h = m // 2
            for i in range(h):
                buf.unsafe_store(i, ftz(F1(buf.unsafe_load(2 * i)) + F1(buf.unsafe_load(2 * i + 1)))[0])
            m = h
        dst.unsafe_store(j, ftz(F1(buf.unsafe_load(0)))[0])
        j += 1


# ------------------------------------------------------------------ T-29 .. T-34 optimizers
@always_inline
def pw(b: Float32, t: Int) -> F1:
    """T-30: binary exponentiation from the lowest bit, products by mul."""
    var acc = F1(1)
    var x = daz_in(F1(b))
    var e = t
    while e:
        if e & 1:
            acc = mul(acc, x)
        x = mul(x, x)
        e >>= 1
    return acc


struct AdamScalars(ImplicitlyCopyable, Movable):
    """T-29 (4): the scalar part of one Adam / AdamW step."""
    var b1: Float32
    var b2: Float32
    var eps: Float32
    var wd: Float32
    var step: Float32
    var rt: Float32
    var c1: Float32
    var c2: Float32
    var decay: Float32
    var decoupled: Bool
    var maximize: Bool
    var has_wd: Bool

    def __init__(out self, t: Int, lr: Float32, b1: Float32, b2: Float32, eps: Float32, wd: Float32,
                  decoupled: Bool, maximize: Bool):
        var lrv = daz_in(F1(lr))
        self.b1 = daz_in(F1(b1))[0]
        self.b2 = daz_in(F1(b2))[0]
        self.eps = daz_in(F1(eps))[0]
        self.wd = daz_in(F1(wd))[0]
        var bc1 = ftz(F1(1) - pw(b1, t))
        var bc2 = ftz(F1(1) - pw(b2, t))
        self.step = ftz(lrv / bc1)[0]
        self.rt = sqrt_rn(bc2)[0]
        self.c1 = ftz(F1(1) - F1(self.b1))[0]
        self.c2 = ftz(F1(1) - F1(self.b2))[0]
        self.decay = ftz(F1(1) - mul(lrv, F1(self.wd)))[0]
        self.decoupled = decoupled
        self.maximize = maximize
        self.has_wd = bitcast[DType.uint32, 1](F1(self.wd))[0] & 0x7FFFFFFF != 0


@always_inline
def _adam_el[w: Int](p: F32Ptr, g: F32Ptr, m: F32Ptr, v: F32Ptr, j: Int, s: AdamScalars):
    """T-31, T-32, T-34 for elements j .. j + w."""
    comptime V = SIMD[DType.float32, w]
    var gv = ftz(g.unsafe_offset(j).unsafe_load[width=w](0))
    var pv = ftz(p.unsafe_offset(j).unsafe_load[width=w](0))
    var mv = daz_in(m.unsafe_offset(j).unsafe_load[width=w](0))
    var vv = daz_in(v.unsafe_offset(j).unsafe_load[width=w](0))
    if s.maximize:
        gv = -gv
    if s.has_wd:
        if s.decoupled:
            pv = mul(V(s.decay), pv)
        else:
            gv = ftz(fma(V(s.wd), pv, gv))
    mv = ftz(fma(V(s.c1), gv, mul(V(s.b1), mv)))
    vv = ftz(fma(V(s.c2), mul(gv, gv), mul(V(s.b2), vv)))
    var den = ftz(ftz(sqrt_nonneg_cpu[w](vv) / V(s.rt)) + V(s.eps))  # vv >= +0 (T-31)
    var q = ftz(mv / den)
    pv = ftz(fma(V(-s.step), q, pv))
    m.unsafe_offset(j).unsafe_store(0, mv)
    v.unsafe_offset(j).unsafe_store(0, vv)
    p.unsafe_offset(j).unsafe_store(0, pv)


def adam_range(p: F32Ptr, g: F32Ptr, m: F32Ptr, v: F32Ptr, n: Int, s: AdamScalars):
    """T-31 .. T-34 over n elements: 4 * W lanes a step (four independent vectors in
    flight: the square root's Newton chain is long), then W, then one at a time."""
    var j = 0
    while j + 4 * W <= n:
        _adam_el[4 * W](p, g, m, v, j, s)
        j += 4 * W
    while j + W <= n:
        _adam_el[W](p, g, m, v, j, s)
        j += W
    while j < n:
        _adam_el[1](p, g, m, v, j, s)
        j += 1


struct SgdScalars(ImplicitlyCopyable, Movable):
    """T-29 (4) / T-33: the scalars of one SGD step."""
    var lr: Float32
    var mu: Float32
    var c_damp: Float32
    var wd: Float32
    var has_mu: Bool
    var has_wd: Bool
    var nesterov: Bool
    var maximize: Bool

    def __init__(out self, lr: Float32, mu: Float32, dampening: Float32, wd: Float32, nesterov: Bool,
                  maximize: Bool):
        self.lr = daz_in(F1(lr))[0]
        self.mu = daz_in(F1(mu))[0]
        self.c_damp = ftz(F1(1) - daz_in(F1(dampening)))[0]
        self.wd = daz_in(F1(wd))[0]
        self.has_mu = bitcast[DType.uint32, 1](F1(self.mu))[0] & 0x7FFFFFFF != 0
        self.has_wd = bitcast[DType.uint32, 1](F1(self.wd))[0] & 0x7FFFFFFF != 0
        self.nesterov = nesterov
        self.maximize = maximize


@always_inline
def _sgd_el[w: Int](p: F32Ptr, g: F32Ptr, b: F32Ptr, j: Int, first: Bool, s: SgdScalars):
    comptime V = SIMD[DType.float32, w]
    var gv = ftz(g.unsafe_offset(j).unsafe_load[width=w](0))
    var pv = ftz(p.unsafe_offset(j).unsafe_load[width=w](0))
    if s.maximize:
        gv = -gv
    if s.has_wd:
        gv = ftz(fma(V(s.wd), pv, gv))
    if s.has_mu:
        var bv: V
        if first:
            bv = gv
        else:
            bv = ftz(fma(V(s.c_damp), gv, mul(V(s.mu), daz_in(b.unsafe_offset(j).unsafe_load[width=w](0)))))
        b.unsafe_offset(j).unsafe_store(0, bv)
        if s.nesterov:
            gv = ftz(fma(V(s.mu), bv, gv))
        else:
            gv = bv
    pv = ftz(fma(V(-s.lr), gv, pv))
    p.unsafe_offset(j).unsafe_store(0, pv)


def sgd_range(p: F32Ptr, g: F32Ptr, b: F32Ptr, n: Int, first: Bool, s: SgdScalars):
    var j = 0
    while j + W <= n:
        _sgd_el[W](p, g, b, j, first, s)
        j += W
    while j < n:
        _sgd_el[1](p, g, b, j, first, s)
        j += 1


# ------------------------------------------------------------------ checks and sign flips
def first_nonfinite_range(x: F32Ptr, e0: Int, e1: Int) -> Int:
    """The first index in [e0, e1) whose value is NaN or +-inf, or -1."""
    comptime B = 4 * W
    var j = e0
    while j + B <= e1:
        var hit = SIMD[DType.bool, W](fill=False)
        comptime for q in range(4):
            var b = bitcast[DType.uint32, W](x.unsafe_load[width=W](j + q * W))
            hit = hit | (b & 0x7F800000).eq(0x7F800000)
        if hit.reduce_or():
            break
        j += B
    while j < e1:
        var b = bitcast[DType.uint32, 1](F1(x.unsafe_load(j)))[0]
        if b & 0x7F800000 == 0x7F800000:
            return j
        j += 1
    return -1


def neg_range(x: F32Ptr, dst: F32Ptr, e0: Int, e1: Int):
    """dst = x with every sign bit flipped (exact; neg(+0) = -0)."""
    var j = e0
    while j + W <= e1:
        var b = bitcast[DType.uint32, W](x.unsafe_load[width=W](j))
        dst.unsafe_store(j, bitcast[DType.float32, W](b ^ 0x80000000))
        j += W
    while j < e1:
        var b = bitcast[DType.uint32, 1](F1(x.unsafe_load(j)))
        dst.unsafe_store(j, bitcast[DType.float32, 1](b ^ 0x80000000)[0])
        j += 1

"""What ONE GPU thread of a training kernel computes (contracts/ops/IDENTICAL_TRAIN_CONTRACT.md,
rules T-2, T-9 .. T-18, T-23 .. T-26, T-29 .. T-34, T-47, T-49, T-52).

Width-1 calls of the same per-element rules the CPU kernels use (arith.fp, arith.tree,
arith.elementary); every operand is flushed as it is loaded (`ld`) and every result as
it is stored, because a GPU has no DAZ mode to rely on (the CPU kernels lean on DAZ for
the operands: under the contract state a subnormal operand reads as its signed zero,
which is what the explicit flush here gives). The CPU run (cpu_run.mojo) calls these
bodies in loops under IEEE mode, so the tests (tests/test_gpu_train.py) check the
kernels' own arithmetic against the CPU kernels, bit for bit.

REDUCTIONS (T-2)
    fold(k) / dot(k): leaves of arith.tree.leaf_size(k), each one chain from +0 in
    ascending order (add, or chain_step's fma), then fp32.v1's balanced pairwise tree
    (odd one carried), taken in its streaming form (tree_push: a binary counter of
    waiting levels, at most bit_length(1024) = 11 of them; the same sums in the same
    order as the CPU kernels' level-by-level tree, the earlier operand on the left).
    One thread runs a whole fold (a column of rows, a row of logits, a tensor's
    leaves): no reduction is ever split across threads, no atomics.

LAYOUT OF THE BODIES
    rms_rows_thread         row r: T-9, T-10 (dx) and the row's rstd for T-11
    rms_dw_thread           column c: T-11's fold over the rows
    fold_col_thread         column c: T-2's fold over the rows (fold_rows)
    rmsnorm_terms_thread    row r: T-11's terms (the data-parallel parts)
    embedding_bwd_thread    (vocab row v, column c): T-13's chain over the tokens t ascending
    ce_row_thread           row r: T-14 .. T-16 (the row loss; m and den kept for the gradient)
    ce_grad_thread          element (r, v): T-18
    clip_leaf_thread        leaf u of the concatenated leaves: T-23's chains of squares
    clip_norm_thread        tensor j: the tree over its leaves, n_j = sqrt
    clip_total              host side of the launch: T-23's total, T-24's coefficient
    clip_scale_thread       element e of the concatenation: T-25
    tree_sum_thread         element e: T-26
    adam_thread             element e: T-31, T-32, T-34 (scalars: adam_scalars, host side)
    sgd_thread              element e: T-33, T-34
    softmax_bwd_c_thread    row r: T-49's c
    softmax_bwd_thread      element (r, j): T-49's dS
    silu_mul_bwd_thread     element (r, j): T-52 (arith.elementary.silu_mul_bwd)
    attn_probs_thread       unit (b, h, i): T-47 through the forward's own body
                            (transformer.gpu.threads.attention_weights)
    fold_div_thread         one thread: T-17 / T-58, div(fold(k = n)(x), d)
    neg_thread              element e: T-1's neg, the sign bit flipped (exact, no flush)
"""
from std.math import fma
from std.memory import bitcast
from std.collections import Array
from common.ptr import F32Ptr, I64Ptr, I32Ptr
from arith.fp import ftz, daz_bits
from arith.elementary import mul, sqrt_rn, expf, logf, silu_mul_bwd
from arith.tree import leaf_size, leaf_count, chain_step, tree_add, trailing_ones, bit_length
from transformer.gpu.threads import attention_weights

comptime F1 = SIMD[DType.float32, 1]
comptime TREE_LEVELS = 12  # bit_length(1024) = 11 waiting levels at most, and one spare


@always_inline
def ld(p: F32Ptr, i: Int) -> F1:
    """An operand as the contract reads it: flushed."""
    return ftz(F1(p.unsafe_load(i)))


@always_inline
def fz(x: Float32) -> F1:
    """A scalar argument read flushed."""
    return ftz(F1(x))


@always_inline
def f32_bits(x: F1) -> UInt32:
    return bitcast[DType.uint32, 1](x)[0]


@always_inline
def is_finite(x: F1) -> Bool:
    return (f32_bits(x) & 0x7F800000) != 0x7F800000


# ------------------------------------------------------------------ T-2 the tree, streamed
@always_inline
def tree_push(mut slots: Array[Float32, TREE_LEVELS], leaf: F1, p: Int, n: Int) -> F1:
    """Leaf p (flushed) of n into the binary-counter stack of fp32.v1's balanced tree
    (contract 6.4 by arith.tree.tree_add): it first merges with the levels given by the
    trailing one-bits of p (the waiting, earlier sum on the left), then waits on the
    next level; after the last leaf the waiting levels are folded from the lowest up.
    Returns the root after leaf n - 1 (else +0). 7 leaves: (p01 + p23) + (p45 + p6)."""
    var acc = leaf
    var t = trailing_ones(p)
    for lvl in range(t):
        acc = tree_add[1](F1(slots[lvl]), acc)
    if p == n - 1:
        for lvl in range(t + 1, bit_length(n)):
            if (n >> lvl) & 1:
                acc = tree_add[1](F1(slots[lvl]), acc)
        return acc
    slots[t] = acc[0]
    return F1(0)


@always_inline
def tree_of(parts: F32Ptr, n: Int) -> F1:
    """The balanced tree over n stored (flushed) partials; n = 0 gives +0."""
    var slots = Array[Float32, TREE_LEVELS](fill=0)
    var root = F1(0)
    for p in range(n):
        root = tree_push(slots, F1(parts.unsafe_load(p)), p, n)
    return root


@always_inline
def _find(offs: I64Ptr, count: Int, e: Int) -> Int:
    """The j in [0, count) with offs[j] <= e < offs[j + 1] (offs ascending, count + 1
    entries; an empty range is never chosen)."""
    var lo = 0
    var hi = count - 1
    while lo < hi:
        var mid = (lo + hi + 1) // 2
        if Int(offs.unsafe_load(mid)) <= e:
            lo = mid
        else:
            hi = mid - 1
    return lo


# ------------------------------------------------------------------ T-9 .. T-11 RMSNorm backward
@always_inline
def _rstd(sumsq: F1, d: Int, eps: Float32) -> F1:
    """M-4's rstd from the row's chain of squares: ftz(1 / sqrt(ftz(ftz(sum / d) + eps)))."""
    var mean = ftz(sumsq / F1(Float32(d)))
    return ftz(F1(1) / sqrt_rn(ftz(mean + fz(eps))))


def rms_rows_thread(dy: F32Ptr, x: F32Ptr, w: F32Ptr, dx: F32Ptr, rstd_out: F32Ptr, d: Int,
                    eps: Float32, r: Int):
    """T-9, T-10, row r: the chains of x_j * x_j (M-4) and of dh_j * x_j (T-9, dh_j =
    mul(dy_j, w_j)), then dx_j = add(mul(dh_j, rstd), mul(dv, mul(2, x_j))); the row's
    rstd into rstd_out[r] for T-11."""
    var xr = x.unsafe_offset(r * d)
    var dyr = dy.unsafe_offset(r * d)
    var acc = F1(0)
    var c = F1(0)
    for j in range(d):
        var xv = ld(xr, j)
        var dh = mul(ld(dyr, j), ld(w, j))
        acc = chain_step[1](xv, xv, acc)
        c = chain_step[1](dh, xv, c)
    var rstd = _rstd(acc, d, eps)
    var r3 = mul(mul(rstd, rstd), rstd)
    var dv = ftz(mul(F1(-0.5), mul(c, r3)) / F1(Float32(d)))
    rstd_out.unsafe_store(r, rstd[0])
    var o = dx.unsafe_offset(r * d)
    for j in range(d):
        var dh = mul(ld(dyr, j), ld(w, j))
        o.unsafe_store(j, ftz(mul(dh, rstd) + mul(dv, mul(F1(2), ld(xr, j))))[0])


def rms_dw_thread(x: F32Ptr, dy: F32Ptr, rstd: F32Ptr, dw: F32Ptr, rows: Int, n: Int, c: Int):
    """T-11, column c: dw_c = fold(k = rows) of mul(dy_rc, mul(x_rc, rstd_r)), rows
    ascending (rstd from rms_rows_thread)."""
    var L = leaf_size(rows)
    var nl = leaf_count(rows)
    var slots = Array[Float32, TREE_LEVELS](fill=0)
    var root = F1(0)
    for lf in range(nl):
        var acc = F1(0)
        for r in range(lf * L, min(rows, (lf + 1) * L)):
            var t = mul(ld(dy, r * n + c), mul(ld(x, r * n + c), ld(rstd, r)))
            acc = ftz(acc + t)
        root = tree_push(slots, acc, lf, nl)
    dw.unsafe_store(c, root[0])


def fold_col_thread(x: F32Ptr, dst: F32Ptr, rows: Int, n: Int, c: Int):
    """T-2, column c of x (rows, n): out_c = fold(k = rows), acc = add(acc, x_rc)."""
    var L = leaf_size(rows)
    var nl = leaf_count(rows)
    var slots = Array[Float32, TREE_LEVELS](fill=0)
    var root = F1(0)
    for lf in range(nl):
        var acc = F1(0)
        for r in range(lf * L, min(rows, (lf + 1) * L)):
            acc = ftz(acc + ld(x, r * n + c))
        root = tree_push(slots, acc, lf, nl)
    dst.unsafe_store(c, root[0])


def rmsnorm_terms_thread(dy: F32Ptr, x: F32Ptr, dst: F32Ptr, d: Int, eps: Float32, r: Int):
    """T-11's terms, row r: out_rj = mul(dy_rj, mul(x_rj, rstd_r)), rstd by M-4."""
    var xr = x.unsafe_offset(r * d)
    var acc = F1(0)
    for j in range(d):
        var v = ld(xr, j)
        acc = chain_step[1](v, v, acc)
    var rstd = _rstd(acc, d, eps)
    var dr = dy.unsafe_offset(r * d)
    var o = dst.unsafe_offset(r * d)
    for j in range(d):
        o.unsafe_store(j, mul(ld(dr, j), mul(ld(xr, j), rstd))[0])


# ------------------------------------------------------------------ T-13 embedding backward
def embedding_bwd_thread(dy: F32Ptr, ids: I64Ptr, acc: F32Ptr, tokens: Int, d: Int, v: Int, c: Int):
    """T-13, (vocab row v, column c): for t ascending with ids[t] == v,
    acc = add(acc, dy[t][c]), continued from the value handed in; an element whose row
    never occurs is left as it was (the CPU kernel's chains touch only rows that occur).
    One thread owns the element: no atomics, no tree."""
    var a = F1(0)
    var touched = False
    for t in range(tokens):
        if Int(ids.unsafe_load(t)) == v:
            if not touched:
                a = ld(acc, v * d + c)
                touched = True
            a = ftz(a + ld(dy, t * d + c))
    if touched:
        acc.unsafe_store(v * d + c, a[0])


# ------------------------------------------------------------------ T-14 .. T-18 cross entropy
@always_inline
def _key(x: F1) -> Int32:
    """An int32 in the total order of flushed non-NaN floats, -0 below +0 (T-1's rowmax)."""
    var i = bitcast[DType.int32, 1](daz_bits[1](bitcast[DType.uint32, 1](x)))[0]
    return i ^ 0x7FFFFFFF if i < 0 else i


@always_inline
def _of_key(k: Int32) -> F1:
    var i = k ^ 0x7FFFFFFF if k < 0 else k
    return bitcast[DType.float32, 1](SIMD[DType.int32, 1](i))


def ce_row_thread(logits: F32Ptr, targets: I64Ptr, rows_out: F32Ptr, stats: F32Ptr, V: Int,
                  ignore_index: Int, eps: Float32, r: Int):
    """T-14 .. T-16, row r: m = rowmax, e_v = expf(sub(x_v, m)), den = fold(k = V) of e,
    nll = neg(sub(s_y, logf(den))), label smoothing when eps != 0; an ignored row is +0.
    stats[2r], stats[2r + 1] = m, den for ce_grad_thread (+0, +0 for an ignored row).
    e_v is computed again where it is needed (the same bits), no scratch row."""
    var y = Int(targets.unsafe_load(r))
    if y == ignore_index:
        rows_out.unsafe_store(r, 0)
        stats.unsafe_store(2 * r, 0)
        stats.unsafe_store(2 * r + 1, 0)
        return
    var xr = logits.unsafe_offset(r * V)
    var km = Int32.MIN
    for j in range(V):
        km = max(km, _key(F1(xr.unsafe_load(j))))
    var m = _of_key(km)
    var L = leaf_size(V)
    var nl = leaf_count(V)
    var slots = Array[Float32, TREE_LEVELS](fill=0)
    var den = F1(0)
    for lf in range(nl):
        var acc = F1(0)
        for j in range(lf * L, min(V, (lf + 1) * L)):
            acc = ftz(acc + ftz(expf(ftz(ld(xr, j) - m))))
        den = tree_push(slots, acc, lf, nl)
    var lden = ftz(logf(den))
    var s_y = ftz(ld(xr, y) - m)
    var nll = -ftz(s_y - lden)
    var row = nll
    var epsv = fz(eps)
    if (f32_bits(epsv) & 0x7FFFFFFF) != 0:
        var fV = F1(Float32(V))
        var one_m = ftz(F1(1) - epsv)
        var slots2 = Array[Float32, TREE_LEVELS](fill=0)
        var sm = F1(0)
        for lf in range(nl):
            var acc = F1(0)
            for j in range(lf * L, min(V, (lf + 1) * L)):
                acc = ftz(acc + ftz(ftz(ld(xr, j) - m) - lden))
            sm = tree_push(slots2, acc, lf, nl)
        var smooth = -ftz(sm / fV)
        row = ftz(mul(one_m, nll) + mul(epsv, smooth))
    rows_out.unsafe_store(r, row[0])
    stats.unsafe_store(2 * r, m[0])
    stats.unsafe_store(2 * r + 1, den[0])


def ce_grad_thread(logits: F32Ptr, targets: I64Ptr, stats: F32Ptr, grad: F32Ptr, V: Int,
                   ignore_index: Int, eps: Float32, D: Float32, r: Int, v: Int):
    """T-18, element (r, v): w_v = div(e_v, den); dl_v = div(sub(w_v, t_v), D) with
    t_y = add(sub(1, eps), t_o) at the target and t_o = div(eps, f32(V)) elsewhere;
    +0 in an ignored row. m and den from ce_row_thread."""
    var y = Int(targets.unsafe_load(r))
    if y == ignore_index:
        grad.unsafe_store(r * V + v, 0)
        return
    var m = F1(stats.unsafe_load(2 * r))
    var den = F1(stats.unsafe_load(2 * r + 1))
    var epsv = fz(eps)
    var t_o = ftz(epsv / F1(Float32(V)))
    var t = ftz(ftz(F1(1) - epsv) + t_o) if v == y else t_o
    var e = ftz(expf(ftz(ld(logits, r * V + v) - m)))
    var wv = ftz(e / den)
    grad.unsafe_store(r * V + v, ftz(ftz(wv - t) / fz(D))[0])


# ------------------------------------------------------------------ T-23 .. T-25 clip
def clip_leaf_thread(addrs: I64Ptr, sizes: I64Ptr, loff: I64Ptr, count: Int, parts: F32Ptr, u: Int):
    """T-23, leaf u of the concatenated leaves of every tensor (loff: each tensor's first
    leaf, count + 1 entries): the chain acc = fma(g_i, g_i, acc) from +0 over the leaf."""
    var j = _find(loff, count, u)
    var k = Int(sizes.unsafe_load(j))
    var lf = u - Int(loff.unsafe_load(j))
    var L = leaf_size(k)
    var g = F32Ptr(unsafe_from_address=Int(addrs.unsafe_load(j)))
    var acc = F1(0)
    for i in range(lf * L, min(k, (lf + 1) * L)):
        var a = ld(g, i)
        acc = chain_step[1](a, a, acc)
    parts.unsafe_store(u, acc[0])


def clip_norm_thread(loff: I64Ptr, parts: F32Ptr, norms: F32Ptr, j: Int):
    """T-23, tensor j: n_j = sqrt(the tree over its leaves)."""
    var l0 = Int(loff.unsafe_load(j))
    var s = tree_of(parts.unsafe_offset(l0), Int(loff.unsafe_load(j + 1)) - l0)
    norms.unsafe_store(j, sqrt_rn(s)[0])


def clip_total(norms: F32Ptr, count: Int, max_norm: Float32) -> F1:
    """T-23, T-24, on the HOST side of a launch (and in the CPU run): total =
    sqrt(dot(k = count)(n, n)) into norms[count]; returns coef = div(max_norm,
    add(total, f32(1e-6))) when < 1, else exactly 1. The launcher reads the count norms
    back, calls this, and launches the rescale only when the total is finite (T-41);
    inside a kernel the AMD backend cannot build this uniform code (illegal VGPR to
    SGPR copy on gfx942, as transformer.gpu.threads.attention_scale)."""
    var L = leaf_size(count)
    var nl = leaf_count(count)
    var slots = Array[Float32, TREE_LEVELS](fill=0)
    var s = F1(0)
    for lf in range(nl):
        var acc = F1(0)
        for i in range(lf * L, min(count, (lf + 1) * L)):
            var a = ld(norms, i)
            acc = chain_step[1](a, a, acc)
        s = tree_push(slots, acc, lf, nl)
    var total = sqrt_rn(s)
    norms.unsafe_store(count, total[0])
    var coef = ftz(fz(max_norm) / ftz(total + F1(Float32(1e-6))))
    if not (coef[0] < 1):
        coef = F1(1)
    return coef


def clip_scale_thread(addrs: I64Ptr, offs: I64Ptr, count: Int, coef: Float32, e: Int):
    """T-25, element e of the concatenation (offs: each tensor's first element):
    g = mul(coef, ftz(g)) in place (launched only when the total is finite)."""
    var j = _find(offs, count, e)
    var g = F32Ptr(unsafe_from_address=Int(addrs.unsafe_load(j)))
    var i = e - Int(offs.unsafe_load(j))
    g.unsafe_store(i, mul(fz(coef), ld(g, i))[0])


# ------------------------------------------------------------------ T-26 tree_sum
def tree_sum_thread(addrs: I64Ptr, count: Int, dst: F32Ptr, e: Int):
    """T-26, element e: the balanced pairwise tree over the count (a power of two) arrays
    in ascending order, each read flushed; count = 1 gives ftz(g0)."""
    var slots = Array[Float32, TREE_LEVELS](fill=0)
    var root = F1(0)
    for a in range(count):
        var p = F32Ptr(unsafe_from_address=Int(addrs.unsafe_load(a)))
        root = tree_push(slots, ld(p, e), a, count)
    dst.unsafe_store(e, root[0])


# ------------------------------------------------------------------ T-29 .. T-34 optimizers
@always_inline
def pw(b: Float32, t: Int) -> F1:
    """T-30: binary exponentiation from the lowest bit, products by mul."""
    var acc = F1(1)
    var x = fz(b)
    var e = t
    while e:
        if e & 1:
            acc = mul(acc, x)
        x = mul(x, x)
        e >>= 1
    return acc


@fieldwise_init
struct AdamScalars(ImplicitlyCopyable, Movable):
    """T-29 (4): the scalars of one Adam / AdamW step, computed once by the host side of
    a launch (adam_scalars) and handed to every thread."""
    var b1: Float32
    var b2: Float32
    var eps: Float32
    var wd: Float32
    var step: Float32
    var rt: Float32
    var c1: Float32
    var c2: Float32
    var decay: Float32


def adam_scalars(t: Int, lr: Float32, b1: Float32, b2: Float32, eps: Float32, wd: Float32) -> AdamScalars:
    """T-29, T-30: bc1 = sub(1, pw(b1, t)), bc2 = sub(1, pw(b2, t)), step = div(lr, bc1),
    rt = sqrt(bc2), c1 = sub(1, b1), c2 = sub(1, b2), decay = sub(1, mul(lr, wd))."""
    var lrv = fz(lr)
    var b1v = fz(b1)
    var b2v = fz(b2)
    var wdv = fz(wd)
    var bc1 = ftz(F1(1) - pw(b1, t))
    var bc2 = ftz(F1(1) - pw(b2, t))
    return AdamScalars(
        b1v[0], b2v[0], fz(eps)[0], wdv[0], ftz(lrv / bc1)[0], sqrt_rn(bc2)[0],
        ftz(F1(1) - b1v)[0], ftz(F1(1) - b2v)[0], ftz(F1(1) - mul(lrv, wdv))[0],
    )


def adam_thread(pa: I64Ptr, ga: I64Ptr, offs: I64Ptr, count: Int, m: F32Ptr, v: F32Ptr,
                s: AdamScalars, decoupled: Bool, maximize: Bool, e: Int):
    """T-31, T-32, T-34, element e of the flat state (offs: each tensor's first element):
    maximize flips g's sign; wd != 0: AdamW p = mul(decay, p), Adam g = fma(wd, p, g);
    m = fma(c1, g, mul(b1, m)); v = fma(c2, mul(g, g), mul(b2, v));
    den = add(div(sqrt(v), rt), eps); p = fma(neg(step), div(m, den), p)."""
    var j = _find(offs, count, e)
    var i = e - Int(offs.unsafe_load(j))
    var p = F32Ptr(unsafe_from_address=Int(pa.unsafe_load(j)))
    var g = F32Ptr(unsafe_from_address=Int(ga.unsafe_load(j)))
    var gv = ld(g, i)
    var pv = ld(p, i)
    var mv = ld(m, e)
    var vv = ld(v, e)
    if maximize:
        gv = -gv
    if (f32_bits(F1(s.wd)) & 0x7FFFFFFF) != 0:
        if decoupled:
            pv = mul(F1(s.decay), pv)
        else:
            gv = ftz(fma(F1(s.wd), pv, gv))
    mv = ftz(fma(F1(s.c1), gv, mul(F1(s.b1), mv)))
    vv = ftz(fma(F1(s.c2), mul(gv, gv), mul(F1(s.b2), vv)))
    var den = ftz(ftz(sqrt_rn(vv) / F1(s.rt)) + F1(s.eps))
    var q = ftz(mv / den)
    pv = ftz(fma(F1(-s.step), q, pv))
    m.unsafe_store(e, mv[0])
    v.unsafe_store(e, vv[0])
    p.unsafe_store(i, pv[0])


def sgd_thread(pa: I64Ptr, ga: I64Ptr, offs: I64Ptr, flags: I32Ptr, count: Int, b: F32Ptr,
               lr: Float32, mu: Float32, dampening: Float32, wd: Float32, nesterov: Bool,
               maximize: Bool, e: Int):
    """T-33, T-34, element e: g = fma(wd, p, g) when wd != 0; momentum (mu != 0): the
    first step (the tensor's flag 0) b = g, later b = fma(sub(1, dampening), g, mul(mu, b));
    nesterov g = fma(mu, b, g), else g = b; p = fma(neg(lr), g, p)."""
    var j = _find(offs, count, e)
    var i = e - Int(offs.unsafe_load(j))
    var p = F32Ptr(unsafe_from_address=Int(pa.unsafe_load(j)))
    var g = F32Ptr(unsafe_from_address=Int(ga.unsafe_load(j)))
    var gv = ld(g, i)
    var pv = ld(p, i)
    var muv = fz(mu)
    var wdv = fz(wd)
    if maximize:
        gv = -gv
    if (f32_bits(wdv) & 0x7FFFFFFF) != 0:
        gv = ftz(fma(wdv, pv, gv))
    if (f32_bits(muv) & 0x7FFFFFFF) != 0:
        var bv: F1
        if flags.unsafe_load(j) == 0:
            bv = gv
        else:
            var c_damp = ftz(F1(1) - fz(dampening))
            bv = ftz(fma(c_damp, gv, mul(muv, ld(b, e))))
        b.unsafe_store(e, bv[0])
        if nesterov:
            gv = ftz(fma(muv, bv, gv))
        else:
            gv = bv
    pv = ftz(fma(-fz(lr), gv, pv))
    p.unsafe_store(i, pv[0])


# ------------------------------------------------------------------ T-47 .. T-52 model backward
def softmax_bwd_c_thread(p: F32Ptr, dp: F32Ptr, c_out: F32Ptr, n: Int, r: Int):
    """T-49, row r: c = chain over j ascending (all n keys) of fma(w_j, dP_j, c) from +0."""
    var c = F1(0)
    for j in range(n):
        c = chain_step[1](ld(p, r * n + j), ld(dp, r * n + j), c)
    c_out.unsafe_store(r, c[0])


def softmax_bwd_thread(p: F32Ptr, dp: F32Ptr, c_in: F32Ptr, ds: F32Ptr, n: Int, scale: Float32,
                       r: Int, j: Int):
    """T-49, element (r, j): dS_j = mul(mul(w_j, sub(dP_j, c)), scale) (c from
    softmax_bwd_c_thread; scale M-6's, the forward's)."""
    var d = ftz(ld(dp, r * n + j) - ld(c_in, r))
    ds.unsafe_store(r * n + j, mul(mul(ld(p, r * n + j), d), fz(scale))[0])


def silu_mul_bwd_thread(gu: F32Ptr, ldgu: Int, dp: F32Ptr, ldp: Int, dgu: F32Ptr, ff: Int, r: Int,
                        j: Int):
    """T-52, element (r, j) of p = mul(silu(g), u): g = gu[r][j], u = gu[r][ff + j];
    (dg, du) by arith.elementary.silu_mul_bwd into dgu[r][j], dgu[r][ff + j]."""
    var res = silu_mul_bwd[1](F1(gu.unsafe_load(r * ldgu + j)), F1(gu.unsafe_load(r * ldgu + ff + j)),
                              F1(dp.unsafe_load(r * ldp + j)))
    dgu.unsafe_store(r * 2 * ff + j, res[0][0])
    dgu.unsafe_store(r * 2 * ff + ff + j, res[1][0])


def attn_probs_thread(q: F32Ptr, ldq: Int, kt: F32Ptr, p: F32Ptr, L: Int, nh: Int, kvh: Int,
                      hd: Int, scale: Float32, u: Int):
    """T-47, unit u = (b, h, i) (query i of head h in batch row b): the weights over all
    L keys as the forward computes them (M-11 scores by fp32.v1 over head_dim, M-6, the
    M-12 mask, M-13 / M-14), by the forward's own body
    (transformer.gpu.threads.attention_weights) into p[u * L ..]; kt (batch, kvh, hd, L);
    scale: transformer.gpu.threads.attention_scale(hd)."""
    var i = u % L
    var bh = u // L
    attention_weights(q, ldq, kt, p.unsafe_offset(u * L), L, nh, kvh, hd, 0, L, False, scale,
                      bh // nh, bh % nh, i)


def fold_div_thread(x: F32Ptr, n: Int, d: Float32, dst: F32Ptr):
    """T-17, T-58 (one thread): out[0] = div(fold(k = n) of x, d)."""
    var L = leaf_size(n)
    var nl = leaf_count(n)
    var slots = Array[Float32, TREE_LEVELS](fill=0)
    var root = F1(0)
    for lf in range(nl):
        var acc = F1(0)
        for i in range(lf * L, min(n, (lf + 1) * L)):
            acc = ftz(acc + ld(x, i))
        root = tree_push(slots, acc, lf, nl)
    dst.unsafe_store(0, ftz(root / fz(d))[0])


def neg_thread(x: F32Ptr, dst: F32Ptr, e: Int):
    """T-1's neg, element e: dst[e] = x[e] with its sign bit flipped (exact; neg(+0) = -0;
    nothing flushed, as the CPU's train_neg): the RoPE backward's negated sine table."""
    var b = bitcast[DType.uint32, 1](F1(x.unsafe_load(e)))[0] ^ UInt32(0x80000000)
    dst.unsafe_store(e, bitcast[DType.float32, 1](SIMD[DType.uint32, 1](b))[0])

"""CPU kernels of the transformer ops (contracts/ops/IDENTICAL_NN_CONTRACT.md).

Each function covers a range of rows (or of attention units) so the entry can split
a call into tasks; no result depends on the split. The arithmetic of each rule is
the arithmetic layer's (arith.elementary); this file only lays out loops. Callers run
under the contract state (common.fpstate: FTZ off; DAZ on, or off in the explicit-flush
build), every operand is read through arith.fp.daz_in (free under DAZ) and every
stored value is flushed.
"""
from std.memory import bitcast
from std.memory.alloc import unsafe_alloc
from std.sys import simd_width_of
from std.collections import Array
from common.ptr import F32Ptr, I64Ptr, I32Ptr
from arith.fp import ftz, is_nan, daz_in, widen_exact, sub_unflushed, order_key, of_order_key
from arith.tree import chain_step_daz, serial_add_daz
from arith.elementary import mul, sqrt_rn, expf, expf_daz, logf, powf, sin_cos
from common.ptr import U32Ptr, U16Ptr, I8Ptr
from arith.bf16 import widen
from arith.quant import scale_code_pow2
from gemm.cpu.pack_lowbit import PANELS_BF16, PANELS_I8

comptime W = simd_width_of[DType.float32]()
comptime F1 = SIMD[DType.float32, 1]
comptime FW = SIMD[DType.float32, W]


# ------------------------------------------------------------------ M-2 gather
def gather_rows(table: F32Ptr, ids: I64Ptr, dst: F32Ptr, d: Int, r0: Int, r1: Int):
    """out[r] = table[ids[r]]: an exact copy of each row."""
    for r in range(r0, r1):
        var src = table.unsafe_offset(Int(ids.unsafe_load(r)) * d)
        var dst = dst.unsafe_offset(r * d)
        var j = 0
        while j + W <= d:
            dst.unsafe_store(j, src.unsafe_load[width=W](j))
            j += W
        while j < d:
            dst.unsafe_store(j, src.unsafe_load(j))
            j += 1


def gather_panel_rows(panels: Int, fmt: Int, scales: Int, ids: I64Ptr, dst: F32Ptr, d: Int, nr: Int,
                      r0: Int, r1: Int):
    """out[r] = row ids[r] of a table of d columns held as fp32.v1's prepared B panels
    (gemm/cpu/pack_f32.pack_b_all of the table stored (vocab, d), transposed: panel q
    holds rows [q*nr, q*nr+nr), element (v, j) at (v // nr) * nr * d + j * nr + v % nr),
    in the panel format fmt (gemm/cpu/pack_lowbit.mojo: float32, bf16 bits, or int8 codes
    with scales[v] = pow2f of row v's exponent): each row widened exactly as the format
    materializes it (L-1, L-6) and copied (M-2), so a tied head and the gather read one
    table, in the bytes it is stored in."""
    for r in range(r0, r1):
        var v = Int(ids.unsafe_load(r))
        var at = (v // nr) * nr * d + v % nr
        var out = dst.unsafe_offset(r * d)
        if fmt == PANELS_BF16:
            var src = U16Ptr(unsafe_from_address=panels).unsafe_offset(at)
            for j in range(d):
                out.unsafe_store(j, widen[1](src.unsafe_load[width=1](j * nr))[0])
        elif fmt == PANELS_I8:
            var src = I8Ptr(unsafe_from_address=panels).unsafe_offset(at)
            var sc = F1(F32Ptr(unsafe_from_address=scales).unsafe_load(v))
            for j in range(d):
                var c = src.unsafe_load[width=1](j * nr).cast[DType.float32]()
                out.unsafe_store(j, scale_code_pow2[1](c, sc)[0])
        else:
            var src = F32Ptr(unsafe_from_address=panels).unsafe_offset(at)
            for j in range(d):
                out.unsafe_store(j, src.unsafe_load(j * nr))


# ------------------------------------------------------------------ M-4 RMSNorm
comptime RMS_ROWS = 8  # rows whose sum-of-squares chains run side by side


def rmsnorm_rows(x: F32Ptr, ldx: Int, w: F32Ptr, dst: F32Ptr, ldo: Int, d: Int, eps: Float32, r0: Int, r1: Int):
    """M-4 on rows r0..r1: each row's sum of squares one serial fma chain over j
    ascending (flushed at the end: the same bits as a flush per step), then its mean,
    rstd and the scaled row. RMS_ROWS rows' chains run side by side, each its own
    (a single row's chain waits on the fma latency at every step)."""
    var r = r0
    while r + RMS_ROWS <= r1:
        _rms_block[RMS_ROWS](x, ldx, w, dst, ldo, d, eps, r)
        r += RMS_ROWS
    while r < r1:
        _rms_block[1](x, ldx, w, dst, ldo, d, eps, r)
        r += 1


@always_inline
def _rms_block[R: Int](x: F32Ptr, ldx: Int, w: F32Ptr, dst: F32Ptr, ldo: Int, d: Int, eps: Float32, r: Int):
    """M-4 on rows r .. r + R: their chains side by side, then each row scaled."""
    var acc = Array[F1, R](fill=F1(0))
    for j in range(d):
        comptime for i in range(R):
            var v = F1(x.unsafe_load((r + i) * ldx + j))
            acc[i] = chain_step_daz[1](v, v, acc[i])  # acc = ftz(fma(x_j, x_j, acc))
    comptime for i in range(R):
        _rms_scale(x.unsafe_offset((r + i) * ldx), w, dst.unsafe_offset((r + i) * ldo), d, eps, acc[i])


@always_inline
def _rms_scale(xr: F32Ptr, w: F32Ptr, o: F32Ptr, d: Int, eps: Float32, sum_sq: F1):
    """M-4 after the sum of squares: mean, rstd, o_j = mul(w_j, mul(x_j, rstd))."""
    var acc = ftz(sum_sq)
    var mean = ftz(acc / F1(Float32(d)))
    var rstd = ftz(F1(1) / sqrt_rn(ftz(mean + daz_in(F1(eps)))))
    var rs = FW(rstd[0])
    var j = 0
    while j + W <= d:
        var t = ftz(mul(daz_in(xr.unsafe_load[width=W](j)), rs))
        o.unsafe_store(j, ftz(mul(daz_in(w.unsafe_load[width=W](j)), t)))
        j += W
    while j < d:
        var t = ftz(mul(daz_in(xr.unsafe_load[width=1](j)), rstd))
        o.unsafe_store(j, ftz(mul(daz_in(w.unsafe_load[width=1](j)), t)))
        j += 1


# ------------------------------------------------------------------ M-7 RoPE table
def rope_table_rows(cos_t: F32Ptr, sin_t: F32Ptr, head_dim: Int, theta: Float32, p0: Int, p1: Int):
    """Rows p0..p1 of the (positions, head_dim / 2) cos and sin tables."""
    var half = head_dim // 2
    var inv = List[Float32](length=half, fill=0)
    for i in range(half):
        var e = ftz(F1(Float32(2 * i)) / F1(Float32(head_dim)))
        inv[i] = ftz(F1(1) / powf(daz_in(F1(theta)), e))[0]
    for p in range(p0, p1):
        for i in range(half):
            var ang = mul(F1(Float32(p)), F1(inv[i]))
            var sc = sin_cos(ang)
            sin_t.unsafe_store(p * half + i, ftz(sc[0]))
            cos_t.unsafe_store(p * half + i, ftz(sc[1]))


# ------------------------------------------------------------------ M-10 RoPE rotation
def rope_rows(
    src: F32Ptr, lds: Int, dst: F32Ptr, ldd: Int, dst_head_stride: Int, n_heads: Int, head_dim: Int,
    cos_t: F32Ptr, sin_t: F32Ptr, pos0: Int, length: Int, r0: Int, r1: Int, transposed: Bool, tmax: Int,
    rot_dim: Int,
):
    """Rotate the heads of rows r0..r1 (row r is token r % length at position
    pos0 + r % length). Source head h lives at src[r * lds + h * head_dim].
    transposed=False: dst[r * ldd + h * dst_head_stride + j].
    transposed=True (the key cache, (batch, kv_heads, head_dim, tmax)): row r of batch
    b = r // length goes to column pos of dst[((b * n_heads + h) * head_dim + j) * tmax + pos].
    rot_dim (even, <= head_dim; M-34): the first rot_dim elements of each head rotate in
    halves of rot_dim / 2 (the table's rows are rot_dim / 2 wide); the rest are copied
    (flushed, as every value written between steps)."""
    var half = rot_dim // 2
    for r in range(r0, r1):
        var pos = pos0 + r % length
        var b = r // length
        var c = cos_t.unsafe_offset(pos * half)
        var s = sin_t.unsafe_offset(pos * half)
        for h in range(n_heads):
            var x = src.unsafe_offset(r * lds + h * head_dim)
            if transposed:
                # the key cache's elements lie tmax apart: one at a time, in order (the
                # vector path below, its lanes taken apart for the stores, was slower:
                # AMD EPYC Zen 4, v4, SmolLM2's 512 keys, 108 -> 123-133 us)
                var at = ((b * n_heads + h) * head_dim) * tmax + pos
                for j in range(head_dim):
                    var y: F1
                    if j < rot_dim:
                        var i = j if j < half else j - half
                        var xj = daz_in(F1(x.unsafe_load(j)))
                        var other = daz_in(F1(-x.unsafe_load(j + half)) if j < half else F1(x.unsafe_load(j - half)))
                        y = ftz(mul(xj, daz_in(F1(c.unsafe_load(i)))) + mul(other, daz_in(F1(s.unsafe_load(i)))))
                    else:
                        y = ftz(daz_in(F1(x.unsafe_load(j))))
                    dst.unsafe_store(at + j * tmax, y[0])
                continue
            # element i of the first half and i + half of the second, W at a time, then
            # one at a time: each element's own mul, mul, add (not fused)
            var i = 0
            while i + W <= half:
                _rope_pair[W](x, c, s, dst, ldd, dst_head_stride, r, h, i, half)
                i += W
            while i < half:
                _rope_pair[1](x, c, s, dst, ldd, dst_head_stride, r, h, i, half)
                i += 1
            for j in range(rot_dim, head_dim):
                _rope_put[1](dst, ldd, dst_head_stride, r, h, j,
                             ftz(daz_in(F1(x.unsafe_load(j)))))


@always_inline
def _rope_pair[w: Int](x: F32Ptr, c: F32Ptr, s: F32Ptr, dst: F32Ptr, ldd: Int, dst_head_stride: Int, r: Int,
                       h: Int, i: Int, half: Int):
    """M-10 on elements i .. i + w of a head's first half and i + half .. of its second."""
    var lo = daz_in(x.unsafe_load[width=w](i))
    var hi = daz_in(x.unsafe_load[width=w](i + half))
    var nhi = daz_in(-x.unsafe_load[width=w](i + half))
    var cv = daz_in(c.unsafe_load[width=w](i))
    var sv = daz_in(s.unsafe_load[width=w](i))
    _rope_put[w](dst, ldd, dst_head_stride, r, h, i, ftz(mul(lo, cv) + mul(nhi, sv)))
    _rope_put[w](dst, ldd, dst_head_stride, r, h, i + half, ftz(mul(hi, cv) + mul(lo, sv)))


@always_inline
def _rope_put[w: Int](dst: F32Ptr, ldd: Int, dst_head_stride: Int, r: Int, h: Int, j: Int,
                      y: SIMD[DType.float32, w]):
    """Elements j .. j + w of head h of row r of a row-major rope_rows output."""
    dst.unsafe_store(r * ldd + h * dst_head_stride + j, y)


# ------------------------------------------------------------------ M-17 SiLU gate product
def silu_mul_rows(g: F32Ptr, u: F32Ptr, ld_in: Int, dst: F32Ptr, ld_out: Int, n: Int, r0: Int, r1: Int):
    """M-17: dst = mul(silu(g), u), silu(x) = div(x, add(expf(neg(x)), 1)); expf in its
    DAZ form (expf_daz: run_tasks holds the contract floating-point state), as in the
    softmaxes below."""
    for r in range(r0, r1):
        var gr = g.unsafe_offset(r * ld_in)
        var ur = u.unsafe_offset(r * ld_in)
        var o = dst.unsafe_offset(r * ld_out)
        var j = 0
        # four vectors a step: independent chains in flight (each element's bits are
        # its own, whatever the step)
        comptime W4 = 4 * W
        while j + W4 <= n:
            var x = daz_in(gr.unsafe_load[width=W4](j))
            var s = ftz(x / ftz(expf_daz(-x) + SIMD[DType.float32, W4](1)))
            o.unsafe_store(j, ftz(mul(s, daz_in(ur.unsafe_load[width=W4](j)))))
            j += W4
        while j + W <= n:
            var x = daz_in(gr.unsafe_load[width=W](j))
            var s = ftz(x / ftz(expf_daz(-x) + FW(1)))
            o.unsafe_store(j, ftz(mul(s, daz_in(ur.unsafe_load[width=W](j)))))
            j += W
        while j < n:
            var x = daz_in(gr.unsafe_load[width=1](j))
            var s = ftz(x / ftz(expf_daz(-x) + F1(1)))
            o.unsafe_store(j, ftz(mul(s, daz_in(ur.unsafe_load[width=1](j)))))
            j += 1


# ------------------------------------------------------------------ M-16 residual add, bias add
def add_rows(x: F32Ptr, ldx: Int, y: F32Ptr, ldy: Int, dst: F32Ptr, ldo: Int, n: Int, r0: Int, r1: Int):
    """dst[r, j] = ftz(x[r, j] + y[r, j]); ldy = 0 adds one row (a bias) to every row."""
    for r in range(r0, r1):
        var xr = x.unsafe_offset(r * ldx)
        var yr = y.unsafe_offset(r * ldy)
        var o = dst.unsafe_offset(r * ldo)
        var j = 0
        while j + W <= n:
            o.unsafe_store(j, ftz(daz_in(xr.unsafe_load[width=W](j)) + daz_in(yr.unsafe_load[width=W](j))))
            j += W
        while j < n:
            o.unsafe_store(j, ftz(daz_in(xr.unsafe_load[width=1](j)) + daz_in(yr.unsafe_load[width=1](j))))
            j += 1


# ------------------------------------------------------------------ M-5 .. M-14 elementwise (tests)
def elementwise(op: Int, src: F32Ptr, dst: F32Ptr, n0: Int, n1: Int):
    """The arithmetic layer's functions over an array (the tests check each against
    its oracle): 0 expf, 1 logf, 2 sin, 3 cos, 4 sqrt, 5 expf_daz (the form of the CPU
    kernels under the contract floating-point state, which run_tasks holds; returned
    bare, as its callers store it)."""
    for j in range(n0, n1):
        var x = daz_in(F1(src.unsafe_load(j)))
        var y: F1
        if op == 0:
            y = expf(x)
        elif op == 1:
            y = logf(x)
        elif op == 2:
            y = sin_cos(x)[0]
        elif op == 3:
            y = sin_cos(x)[1]
        elif op == 5:
            y = expf_daz(x)
        else:
            y = sqrt_rn(x)
        dst.unsafe_store(j, y[0])


# ------------------------------------------------------------------ M-28 .. M-30 (torch mode)
def softmax_rows(x: F32Ptr, dst: F32Ptr, n: Int, log: Bool, r0: Int, r1: Int):
    """M-28 softmax / M-29 log_softmax of each row of n: mx the row maximum (a NaN
    anywhere gives NaN), e_j = expf(add(x_j, -mx)), den a serial sum ascending;
    softmax w_j = div(e_j, den); log_softmax y_j = add(add(x_j, -mx), -logf(den)).
    W lanes a step for the maximum, expf and the division; den is one chain per row
    (serial_add_daz, flushed once at the end: the same bits as a flush per step).
    Which zero a row maximum of +0 and -0 together is does not matter: e_j is then 1
    for both zeros (den >= 2, so logf(den) != 0) and x_j + -mx is x_j for every other
    x_j, so the lane-wise maximum gives the bits of a scan in order."""
    var ninf = bitcast[DType.float32, 1](SIMD[DType.uint32, 1](0xFF800000))[0]
    for r in range(r0, r1):
        var xr = x.unsafe_offset(r * n)
        var o = dst.unsafe_offset(r * n)
        var mxv = FW(ninf)
        var nanv = SIMD[DType.bool, W](fill=False)
        var j = 0
        while j + W <= n:
            var v = ftz(xr.unsafe_load[width=W](j))
            nanv = nanv | is_nan(v)
            mxv = max(mxv, v)
            j += W
        var mx = F1(mxv.reduce_max())
        var nan = nanv.reduce_or()
        while j < n:
            var v = ftz(F1(xr.unsafe_load(j)))
            if is_nan(v)[0]:
                nan = True
            elif v > mx:
                mx = v
            j += 1
        if nan:
            mx = F1(bitcast[DType.float32, 1](SIMD[DType.uint32, 1](0x7FC00000))[0])
        var negmx = FW(-mx[0])
        # e_j into dst (overwritten again below for log_softmax), den in order
        var den = F1(0)
        j = 0
        while j + W <= n:
            var e = expf_daz(ftz(ftz(xr.unsafe_load[width=W](j)) + negmx))
            o.unsafe_store(j, e)
            comptime for l in range(W):
                den = serial_add_daz[1](den, F1(e[l]))
            j += W
        while j < n:
            var e = expf_daz(ftz(ftz(F1(xr.unsafe_load(j))) + F1(negmx[0])))
            o.unsafe_store(j, e[0])
            den = serial_add_daz[1](den, e)
            j += 1
        den = ftz(den)
        if log:
            var nlse = FW(-logf(den)[0])
            j = 0
            while j + W <= n:
                o.unsafe_store(j, ftz(ftz(ftz(xr.unsafe_load[width=W](j)) + negmx) + nlse))
                j += W
            while j < n:
                o.unsafe_store(j, ftz(ftz(ftz(F1(xr.unsafe_load(j))) + F1(negmx[0])) + F1(nlse[0]))[0])
                j += 1
        else:
            var dv = FW(den[0])
            j = 0
            while j + W <= n:
                o.unsafe_store(j, ftz(o.unsafe_load[width=W](j) / dv))
                j += W
            while j < n:
                o.unsafe_store(j, ftz(F1(o.unsafe_load(j)) / den)[0])
                j += 1


comptime MR = 8  # rows whose serial sums run side by side in one vector's lanes


def mean_rows(x: F32Ptr, dst: F32Ptr, n: Int, r0: Int, r1: Int):
    """M-30: acc = +0; acc = add(acc, x_j) for j ascending; mean = div(acc, f32(n)).
    MR rows at a time, one row a lane: each lane is that row's own chain, in order."""
    comptime FR = SIMD[DType.float32, MR]
    var r = r0
    while r + MR <= r1:
        var acc = FR(0)
        for j in range(n):
            var v = FR(0)
            comptime for i in range(MR):
                v[i] = x.unsafe_load((r + i) * n + j)
            acc = ftz(acc + ftz(v))
        var m = ftz(acc / FR(Float32(n)))
        comptime for i in range(MR):
            dst.unsafe_store(r + i, m[i])
        r += MR
    for r in range(r, r1):
        var acc = F1(0)
        for j in range(n):
            acc = ftz(acc + ftz(F1(x.unsafe_load(r * n + j))))
        dst.unsafe_store(r, ftz(acc / F1(Float32(n)))[0])


# ------------------------------------------------------------------ M-32 (sampling)
def sample_rows(x: F32Ptr, n: Int, r: Int, picks: I64Ptr, e: F32Ptr, r0: Int, r1: Int):
    """M-32: the sampled token of rows [r0, r1) of x (rows of n >= 1), with the
    float64 draw r[i] of row i (r the address of the float64 draws); e holds n floats
    of scratch. mx the row maximum compared exactly (subnormals as they are; a NaN
    anywhere makes it NaN), e_j = expf(sub_unflushed(x_j, mx)), c_j the float64
    running sum of the e_j ascending (each widened exactly), u = r * c_{n-1}; the
    token is the first j with u < c_j, or n - 1 when there is none or u is NaN.
    The maximum, the differences and expf run W lanes a step; the running sums are
    one float64 chain, in order."""
    var rp = Pointer[Float64, MutAnyOrigin](unsafe_from_address=r)
    var nv = n // W * W
    for i in range(r0, r1):
        var row = x.unsafe_offset(i * n)
        var kmax = SIMD[DType.int32, W](Int32.MIN)
        var any_nan = False
        for j in range(0, nv, W):
            var v = row.unsafe_load[width=W](j)
            any_nan = any_nan or is_nan(v).reduce_or()
            kmax = max(kmax, order_key[W](v))
        var km = kmax.reduce_max()
        for j in range(nv, n):
            var v = F1(row.unsafe_load(j))
            any_nan = any_nan or is_nan(v)[0]
            km = max(km, order_key[1](v)[0])
        var pick = n - 1
        if not any_nan:
            var mx = of_order_key(km)
            var mxw = FW(mx)
            for j in range(0, nv, W):
                e.unsafe_store(j, expf_daz(daz_in(sub_unflushed[W](row.unsafe_load[width=W](j), mxw))))
            for j in range(nv, n):
                e.unsafe_store(j, expf_daz(daz_in(sub_unflushed[1](F1(row.unsafe_load(j)), F1(mx))))[0])
            var total = Float64(0)
            for j in range(n):
                total = total + widen_exact[1](F1(e.unsafe_load(j)))[0]
            var u = rp.unsafe_offset(i)[] * total
            if u == u:  # not NaN
                var c = Float64(0)
                for j in range(n):
                    c = c + widen_exact[1](F1(e.unsafe_load(j)))[0]
                    if u < c:
                        pick = j
                        break
        picks.unsafe_store(i, Int64(pick))

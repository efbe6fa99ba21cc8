"""What ONE GPU thread of a transformer op computes (contracts/ops, M-2 .. M-27).

Width-1 calls of the same per-element rules the CPU kernels use (arith.elementary);
every operand is flushed as it is loaded and every result as it is stored, because a
GPU has no DAZ mode to rely on. The CPU run (cpu_run.mojo) calls these bodies in
loops under IEEE mode, so the tests check the kernels' own arithmetic.
"""
from std.math import fma
from std.memory import bitcast
from std.collections import Array
from common.ptr import F32Ptr, U32Ptr
from arith.fp import ftz, is_nan, pow2f, NEG_FLT_MAX_BITS, QNAN_BITS
from arith.elementary import mul, sqrt_rn, sqrt_rn_pos, expf, logf, pow_of_log, sin_cos
from arith.quant import row_exponent_strided, quant_scale, codes, INT15_SHIFT, INT15_CMAX
from arith.tree import leaf_size, leaf_count, chain_step, tree_add

comptime F1 = SIMD[DType.float32, 1]


@always_inline
def ld(p: F32Ptr, i: Int) -> F1:
    """An operand as the contract reads it: flushed."""
    return ftz(F1(p.unsafe_load(i)))


def rmsnorm_thread(x: F32Ptr, w: F32Ptr, dst: F32Ptr, d: Int, eps: Float32, r: Int):
    """M-4, row r."""
    var acc = F1(0)
    for j in range(d):
        var v = ld(x, r * d + j)
        acc = ftz(fma(v, v, acc))
    var mean = ftz(acc / F1(Float32(d)))
    var rstd = ftz(F1(1) / sqrt_rn(ftz(mean + F1(eps))))
    for j in range(d):
        dst.unsafe_store(r * d + j, mul(ld(w, j), mul(ld(x, r * d + j), rstd))[0])


def silu_mul_thread(g: F32Ptr, u: F32Ptr, ld_in: Int, dst: F32Ptr, ld_out: Int, r: Int, j: Int):
    """M-17, element (r, j)."""
    var x = ld(g, r * ld_in + j)
    var s = ftz(x / ftz(expf(-x) + F1(1)))
    dst.unsafe_store(r * ld_out + j, mul(s, ld(u, r * ld_in + j))[0])


def add_thread(x: F32Ptr, ldx: Int, y: F32Ptr, ldy: Int, dst: F32Ptr, ldo: Int, r: Int, j: Int):
    """M-16 / M-27, element (r, j); ldy = 0 broadcasts a bias row."""
    dst.unsafe_store(r * ldo + j, ftz(ld(x, r * ldx + j) + ld(y, r * ldy + j))[0])


def rope_log_theta(theta: Float32) -> Float32:
    """logf(theta) (M-8) of the RoPE base, read flushed: computed once by the host side
    of a launch (and of the CPU run) and handed to every thread: inside the kernel the
    AMD backend cannot build logf of a uniform value (illegal VGPR to SGPR copy in a
    gfx942 shared library)."""
    return logf(ftz(F1(theta)))[0]


def rope_table_thread(cos_t: F32Ptr, sin_t: F32Ptr, head_dim: Int, log_theta: Float32, p: Int, i: Int):
    """M-7, M-8, M-9, M-14: table entry (position p, pair i); log_theta is
    rope_log_theta(theta), so inv_i = div(1, powf(theta, e_i)) exactly."""
    var half = head_dim // 2
    var e = ftz(F1(Float32(2 * i)) / F1(Float32(head_dim)))
    var inv = ftz(F1(1) / pow_of_log(F1(log_theta), e))
    var sc = sin_cos(mul(F1(Float32(p)), inv))
    sin_t.unsafe_store(p * half + i, ftz(sc[0])[0])
    cos_t.unsafe_store(p * half + i, ftz(sc[1])[0])


def rope_thread(
    src: F32Ptr, lds: Int, dst: F32Ptr, ldd: Int, dhs: Int, head_dim: Int, cos_t: F32Ptr,
    sin_t: F32Ptr, pos0: Int, length: Int, transposed: Bool, n_heads: Int, tmax: Int,
    r: Int, h: Int, j: Int, rot_dim: Int,
):
    """M-10 / M-34, element j of head h of row r (layouts as the CPU kernel's): the first
    rot_dim elements of a head rotate in halves of rot_dim / 2, the rest are copied."""
    var half = rot_dim // 2
    var pos = pos0 + r % length
    var b = r // length
    var x = src.unsafe_offset(r * lds + h * head_dim)
    var y: F1
    if j < rot_dim:
        var i = j if j < half else j - half
        var other = -ld(x, j + half) if j < half else ld(x, j - half)
        y = ftz(mul(ld(x, j), ld(cos_t, pos * half + i)) + mul(other, ld(sin_t, pos * half + i)))
    else:
        y = ftz(ld(x, j))
    if transposed:
        dst.unsafe_store(((b * n_heads + h) * head_dim + j) * tmax + pos, y[0])
    else:
        dst.unsafe_store(r * ldd + h * dhs + j, y[0])


@always_inline
def _exp15_strided(x: F32Ptr, n: Int, stride: Int) -> Int:
    """The int15 row exponent (W-1) of n values x[t * stride]: DAZ, absmax ignoring
    NaN (inf counts), e = exponent(absmax) - 13, 0 for a row without such values."""
    return row_exponent_strided(U32Ptr(unsafe_from_address=Int(x)), n, stride, INT15_SHIFT)


@always_inline
def _code15(x: F32Ptr, i: Int, e: Int) -> Int64:
    var u = U32Ptr(unsafe_from_address=Int(x))
    return Int64(codes[1, INT15_CMAX](u.unsafe_load(i), quant_scale(e))[0])


def attention_scale(head_dim: Int) -> Float32:
    """M-6: div(1, sqrt(head_dim)), two roundings. Computed once by the host side of a
    launch (and of the CPU run) and handed to every thread: inside the kernel the AMD
    backend cannot build it as uniform code (illegal VGPR to SGPR copy in a
    gfx942 shared library)."""
    return ftz(F1(1) / sqrt_rn_pos(F1(Float32(head_dim))))[0]


def attention_weights(
    q: F32Ptr, ldq: Int, kt: F32Ptr, s: F32Ptr, length: Int, n_heads: Int, n_kv: Int,
    head_dim: Int, pos0: Int, tmax: Int, fixed15: Bool, scale_in: Float32, b: Int, h: Int, i: Int,
):
    """M-6, M-11 .. M-14, M-21, M-23, M-24: the attention weights of query i of head h in
    batch b over every key, into s[0 .. pos0 + length) (scale_in: attention_scale(head_dim)).
    The forward's attention_thread multiplies them by V; the training backward (T-47,
    train/gpu/threads.mojo) stores them."""
    var hd = head_dim
    var nkeys = pos0 + length
    var p = pos0 + i
    var g = h // (n_heads // n_kv)
    var kb = kt.unsafe_offset((b * n_kv + g) * hd * tmax)
    var qr = q.unsafe_offset((b * length + i) * ldq + h * hd)
    var scale = F1(scale_in)
    var qe = _exp15_strided(qr, hd, 1)
    for j in range(nkeys):
        var c = F1(0)
        if fixed15:
            var ke = _exp15_strided(kb.unsafe_offset(j), hd, tmax)
            var sum = Int64(0)
            for kk in range(hd):
                sum += _code15(qr, kk, qe) * _code15(kb, kk * tmax + j, ke)
            var p2 = F1(pow2f(qe + ke))
            c = mul(F1(sum.cast[DType.float32]()), p2)
        else:
            # fp32.v1: leaves of leaf_size(hd) (128 here), each one chain, then the pairwise tree
            var leaf = leaf_size(hd)
            var nleaves = leaf_count(hd)
            var parts = Array[Float32, 8](fill=0)  # head_dim <= 1024
            for lf in range(nleaves):
                var acc = F1(0)
                for kk in range(lf * leaf, min(hd, (lf + 1) * leaf)):
                    acc = chain_step[1](ld(qr, kk), ld(kb, kk * tmax + j), acc)
                parts[lf] = acc[0]
            var n = nleaves
            while n > 1:
                var half = n // 2
                for t in range(half):
                    parts[t] = tree_add[1](F1(parts[2 * t]), F1(parts[2 * t + 1]))[0]
                if n % 2 == 1:
                    parts[half] = parts[n - 1]
                n = half + n % 2
            c = F1(parts[0])
        var m = F1(0) if j <= p else bitcast[DType.float32, 1](SIMD[DType.uint32, 1](NEG_FLT_MAX_BITS))
        s.unsafe_store(j, ftz(mul(c, scale) + m)[0])
    var mx = bitcast[DType.float32, 1](SIMD[DType.uint32, 1](0xFF800000))
    var any_nan = False
    for j in range(nkeys):
        var x = F1(s.unsafe_load(j))
        if is_nan(x)[0]:
            any_nan = True
        elif x > mx:
            mx = x
    if any_nan:
        mx = bitcast[DType.float32, 1](SIMD[DType.uint32, 1](QNAN_BITS))
    var den = F1(0)
    for j in range(nkeys):
        var e = ftz(expf(ftz(F1(s.unsafe_load(j)) + (-mx))))
        s.unsafe_store(j, e[0])
        den = ftz(den + e)
    for j in range(nkeys):
        s.unsafe_store(j, ftz(F1(s.unsafe_load(j)) / den)[0])


def attention_thread(
    q: F32Ptr, ldq: Int, kt: F32Ptr, v: F32Ptr, dst: F32Ptr, s: F32Ptr, length: Int,
    n_heads: Int, n_kv: Int, head_dim: Int, pos0: Int, tmax: Int, fixed15: Bool,
    scale_in: Float32, b: Int, h: Int, i: Int,
):
    """M-6, M-11 .. M-15, M-21, M-23, M-24: query i of head h in batch b, every key
    computed (s: this thread's scratch row of pos0 + length floats; scale_in:
    attention_scale(head_dim)): attention_weights, then P.V."""
    var hd = head_dim
    var nkeys = pos0 + length
    var g = h // (n_heads // n_kv)
    var vb = v.unsafe_offset((b * n_kv + g) * tmax * hd)
    attention_weights(q, ldq, kt, s, length, n_heads, n_kv, head_dim, pos0, tmax, fixed15,
                      scale_in, b, h, i)
    var orow = dst.unsafe_offset((b * length + i) * n_heads * hd + h * hd)
    for c in range(hd):
        var acc = F1(0)
        for j in range(nkeys):
            acc = ftz(fma(F1(s.unsafe_load(j)), ld(vb, j * hd + c), acc))
        orow.unsafe_store(c, acc[0])

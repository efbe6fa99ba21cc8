"""Elementary float32 rules of the model contract (contracts/ops/IDENTICAL_NN_CONTRACT.md).

Every function is width-generic (SIMD lanes are independent) and is built only from
single IEEE float32 operations: mul, add, div, a true fma, floor, and bit operations.
No libm, no float64, no hardware approximation instructions. A product that feeds an
add is fenced so the compiler never contracts the two into an FMA, and every
intermediate result is flushed explicitly, so the functions give the same bits with or
without the CPU's DAZ mode (the GPU kernels run them without it).

Rule ids: M-0 operations, M-5 sqrt, M-8 logf, M-9 sin/cos, M-14 expf, M-7 powf.
"""
from std.math import fma, floor, sqrt as _hw_sqrt
from std.memory import bitcast
from std.sys import llvm_intrinsic
from arith.fp import _ftz, _fmaz, _is_nan, is_nan_bits, pow2_in_range, F32MIN_BITS, INF_BITS, QNAN_BITS, MAG_BITS, SIGN_BITS
from common.fpstate import EXPLICIT_FLUSH



@always_inline
def _mul[w: Int](a: SIMD[DType.float32, w], b: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    """M-0: one correctly rounded product, never contracted into a later add."""
    return _ftz[w](llvm_intrinsic["llvm.arithmetic.fence", SIMD[DType.float32, w]](a * b))


@always_inline
def _sqrt_rn_pos[w: Int](x: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    """M-5 on a positive normal x (the whole of M-5 is _sqrt_rn below): the correctly
    rounded square root, computed portably. x = m * 4**k with m in [1, 4) (exact, on the bits); sqrt(m) by three
    Newton steps from a bit-trick seed, then of the five float32 neighbours c-2u..c+2u
    the one with the smallest |fma(-c, c, m)|; the result is that times 2**k (exact).
    Any other input gives a meaningless value."""
    var xb = bitcast[DType.uint32, w](x)
    var e = ((xb >> 23) & 0xFF).cast[DType.int32]() - 127
    var k = e >> 1  # floor(e / 2)
    var mb = (xb & 0x007FFFFF) | ((e - 2 * k + 127).cast[DType.uint32]() << 23)
    var m = bitcast[DType.float32, w](mb)
    var y = bitcast[DType.float32, w]((mb >> 1) + 0x1FBD1DF5)
    comptime for _ in range(3):
        y = _mul[w](SIMD[DType.float32, w](0.5), y + m / y)
    var yb = bitcast[DType.uint32, w](y)
    var best = y
    var best_r = abs(fma(-y, y, m))
    comptime for d in range(-2, 3):
        comptime if d != 0:
            var c = bitcast[DType.float32, w](
                (yb.cast[DType.int32]() + Int32(d)).cast[DType.uint32]()
            )
            var r = abs(fma(-c, c, m))
            var better = r.lt(best_r)
            best = better.select(c, best)
            best_r = better.select(r, best_r)
    var rb = bitcast[DType.uint32, w](best).cast[DType.int32]() + (k << 23)
    return bitcast[DType.float32, w](rb.cast[DType.uint32]())


@always_inline
def sqrt_nonneg_cpu[w: Int](x: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    """M-5's value for x >= +0 (or +inf), read flushed, from the CPU's IEEE square root
    instruction (correctly rounded: the value _sqrt_rn_pos computes portably, which was
    checked equal to IEEE sqrt on every input of [1, 4)). For CPU kernels whose operand
    cannot be negative or NaN (Adam's second moment, T-31); a NaN or negative x gives a
    NaN whose payload is the hardware's (not promised). GPU bodies use sqrt_rn."""
    return _hw_sqrt(_ftz[w](x))


@always_inline
def _sqrt_rn[w: Int](x: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    """Rule: M-5
    The correctly rounded square root: _sqrt_rn_pos on the positive normals; outside
    them IEEE's values: a zero (a subnormal is read as the zero of its sign) -> that
    zero, +inf -> +inf, NaN or x < 0 -> the quiet NaN (an RMSNorm row whose mean + eps
    overflows, is NaN, or is +0 with eps = 0)."""
    var xb = bitcast[DType.uint32, w](x)
    var r = bitcast[DType.uint32, w](_sqrt_rn_pos[w](x))
    var mag = xb & MAG_BITS
    r = xb.gt(INF_BITS).select(SIMD[DType.uint32, w](QNAN_BITS), r)  # NaN, any sign bit
    r = mag.lt(F32MIN_BITS).select(xb & SIGN_BITS, r)  # +-0 and subnormals: signed zero
    r = xb.eq(INF_BITS).select(xb, r)
    return bitcast[DType.float32, w](r)


@always_inline
def _fma_step[w: Int, LEAVE: Bool](a: SIMD[DType.float32, w], b: SIMD[DType.float32, w], c: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    """An intermediate fma: _fmaz, or with LEAVE the bare fma, its flush left to DAZ
    under the contract floating-point state (the next operation reads a subnormal as
    the zero of its sign, which the flush would have given; FTZ off keeps every other
    result)."""
    comptime if LEAVE:
        return fma(a, b, c)
    else:
        return _fmaz[w](a, b, c)


@always_inline
def _expf[w: Int, DAZ: Bool = False](x: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    """Rule: M-14
    Cephes expf with the ln2 split, two exact scalings, +0 below FLT_MIN. DAZ: the form
    for a CPU kernel under the contract floating-point state (expf_daz): the flushes of
    the intermediates that only feed float operations left to DAZ (_fma_step; the
    product r * r still fenced, never contracted), the same bits there; the
    explicit-flush build flushes them anyway. Never DAZ on the GPU."""
    comptime F = SIMD[DType.float32, w]
    comptime LEAVE = DAZ and not EXPLICIT_FLUSH
    var zf = floor(_fma_step[w, LEAVE](x, F(1.4426950408889634), F(0.5)))
    # keep zf in range for the lanes the tests below replace anyway
    zf = min(max(zf, F(-127)), F(128))
    var r = _fma_step[w, LEAVE](zf, F(-0.693359375), x)
    r = _fma_step[w, LEAVE](zf, F(2.12194440e-4), r)
    var q = F(1.9875691500e-4)
    q = _fma_step[w, LEAVE](q, r, F(1.3981999507e-3))
    q = _fma_step[w, LEAVE](q, r, F(8.3334519073e-3))
    q = _fma_step[w, LEAVE](q, r, F(4.1665795894e-2))
    q = _fma_step[w, LEAVE](q, r, F(1.6666665459e-1))
    q = _fma_step[w, LEAVE](q, r, F(5.0000001201e-1))
    var rr: F
    comptime if LEAVE:
        rr = llvm_intrinsic["llvm.arithmetic.fence", F](r * r)
    else:
        rr = _mul[w](r, r)
    var y = _fma_step[w, LEAVE](q, rr, r)
    comptime if LEAVE:
        y = y + F(1)
    else:
        y = _ftz[w](y + F(1))
    var k = zf.cast[DType.int32]()
    var k1 = k >> 1
    y = _mul[w](y, pow2_in_range[w](k1))
    y = _mul[w](y, pow2_in_range[w](k - k1))
    var yb = bitcast[DType.uint32, w](y)
    y = (yb & MAG_BITS).lt(F32MIN_BITS).select(F(0), y)
    y = x.gt(F(88.722835)).select(F(bitcast[DType.float32, 1](INF_BITS)[0]), y)
    y = x.lt(F(-87.33655)).select(F(0), y)
    var nan = _is_nan[w](x)
    return nan.select(x, y)


@always_inline
def _logf[w: Int](x: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    """Rule: M-8
    Cephes logf for a positive normal x; NaN -> NaN, +inf -> +inf, 0 -> -inf,
    x < 0 -> NaN (inputs are flushed first by the caller)."""
    comptime F = SIMD[DType.float32, w]
    var xb = bitcast[DType.uint32, w](x)
    var e = ((xb >> 23) & 0xFF).cast[DType.int32]() - 126
    var m = bitcast[DType.float32, w]((xb & 0x007FFFFF) | 0x3F000000)  # [0.5, 1)
    var small = m.lt(F(0.707106781186547524))
    e = small.select(e - 1, e)
    m = small.select(m + m, m)
    var t = m - F(1)
    var z = _mul[w](t, t)
    var p = F(7.0376836292e-2)
    p = _fmaz[w](p, t, F(-1.1514610310e-1))
    p = _fmaz[w](p, t, F(1.1676998740e-1))
    p = _fmaz[w](p, t, F(-1.2420140846e-1))
    p = _fmaz[w](p, t, F(1.4249322787e-1))
    p = _fmaz[w](p, t, F(-1.6668057665e-1))
    p = _fmaz[w](p, t, F(2.0000714765e-1))
    p = _fmaz[w](p, t, F(-2.4999993993e-1))
    p = _fmaz[w](p, t, F(3.3333331174e-1))
    var y = _mul[w](_mul[w](t, z), p)
    var fe = e.cast[DType.float32]()
    y = _fmaz[w](fe, F(-2.12194440e-4), y)
    y = _fmaz[w](F(-0.5), z, y)
    var r = _ftz[w](t + y)
    var y2 = _fmaz[w](fe, F(0.693359375), r)
    # outside the positive normals: NaN stays, +inf -> +inf, +-0 -> -inf, x < 0 -> NaN
    var inf = F(bitcast[DType.float32, 1](INF_BITS)[0])
    var qnan = F(bitcast[DType.float32, 1](QNAN_BITS)[0])
    y2 = x.eq(inf).select(inf, y2)
    y2 = x.eq(F(0)).select(-inf, y2)
    y2 = x.lt(F(0)).select(qnan, y2)
    return is_nan_bits[w](xb).select(x, y2)  # NaN, tested on the bits


@always_inline
def _powf[w: Int](x: SIMD[DType.float32, w], y: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    """M-7's powf: _pow_of_log of _logf(x)."""
    return _pow_of_log[w](_logf[w](x), y)


@always_inline
def _pow_of_log[w: Int](logx: SIMD[DType.float32, w], y: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    """Rule: M-7
    _expf[w](_mul[w](y, logx)), and 1 when y = 0: powf(x, y) given logx = _logf(x)
    (_powf calls it with the logarithm; a caller that raises one base to many
    exponents and takes its logarithm once (the GPU RoPE table: the AMD backend
    cannot build logf of a value uniform across threads inside a kernel)."""
    comptime F = SIMD[DType.float32, w]
    var r = _expf[w](_mul[w](y, logx))
    return y.eq(F(0)).select(F(1), r)


@always_inline
def _sincosf[w: Int](x: SIMD[DType.float32, w]) -> Tuple[SIMD[DType.float32, w], SIMD[DType.float32, w]]:
    """Rule: M-9
    Cephes sinf and cosf of x (returned as (sin, cos))."""
    comptime F = SIMD[DType.float32, w]
    comptime I = SIMD[DType.int32, w]
    var a = abs(x)
    var j = floor(_mul[w](a, F(1.27323954473516))).cast[DType.int32]()
    var y = j.cast[DType.float32]()
    var odd = (j & 1).ne(0)
    j = odd.select(j + 1, j)
    y = odd.select(y + F(1), y)
    j = j & 7
    var r = _fmaz[w](y, F(-0.78515625), a)
    r = _fmaz[w](y, F(-2.4187564849853515625e-4), r)
    r = _fmaz[w](y, F(-3.77489497744594108e-8), r)
    var sgn_s = x.lt(F(0)).select(F(-1), F(1))
    var sgn_c = F(1)
    var big = j.gt(I(3))
    j = big.select(j - 4, j)
    sgn_s = big.select(-sgn_s, sgn_s)
    sgn_c = big.select(-sgn_c, sgn_c)
    sgn_c = j.gt(I(1)).select(-sgn_c, sgn_c)
    var z = _mul[w](r, r)
    var ps = _fmaz[w](_fmaz[w](F(-1.9515295891e-4), z, F(8.3321608736e-3)), z, F(-1.6666654611e-1))
    var ys = _fmaz[w](_mul[w](r, z), ps, r)
    var pc = _fmaz[w](_fmaz[w](F(2.443315711809948e-5), z, F(-1.388731625493765e-3)), z, F(4.166664568298827e-2))
    var yc = _fmaz[w](_mul[w](z, z), pc, _fmaz[w](F(-0.5), z, F(1)))
    var swap = j.eq(I(1)) | j.eq(I(2))
    var s = swap.select(yc, ys)
    var c = swap.select(ys, yc)
    return (_mul[w](sgn_s, s), _mul[w](sgn_c, c))


# ---------------------------------------------------------------- width-generic entry points
@always_inline
def mul(a: SIMD, b: type_of(a)) -> type_of(a):
    comptime w = a.length
    return rebind[type_of(a)](_mul[w](rebind[SIMD[DType.float32, w]](a), rebind[SIMD[DType.float32, w]](b)))


@always_inline
def sqrt_rn(x: SIMD) -> type_of(x):
    comptime w = x.length
    return rebind[type_of(x)](_sqrt_rn[w](rebind[SIMD[DType.float32, w]](x)))


@always_inline
def sqrt_rn_pos(x: SIMD) -> type_of(x):
    """M-5 for an argument known to be a positive normal (the attention scale's
    head_dim): no special-value selects (on AMDGPU they break the attention kernel's
    uniform code: illegal VGPR to SGPR copy)."""
    comptime w = x.length
    return rebind[type_of(x)](_sqrt_rn_pos[w](rebind[SIMD[DType.float32, w]](x)))


@always_inline
def expf(x: SIMD) -> type_of(x):
    comptime w = x.length
    return rebind[type_of(x)](_expf[w](rebind[SIMD[DType.float32, w]](x)))


@always_inline
def expf_daz(x: SIMD) -> type_of(x):
    """expf (M-14) for a CPU kernel under the contract floating-point state (_expf's
    DAZ form)."""
    comptime w = x.length
    return rebind[type_of(x)](_expf[w, True](rebind[SIMD[DType.float32, w]](x)))


@always_inline
def logf(x: SIMD) -> type_of(x):
    comptime w = x.length
    return rebind[type_of(x)](_logf[w](rebind[SIMD[DType.float32, w]](x)))


@always_inline
def powf(x: SIMD, y: type_of(x)) -> type_of(x):
    comptime w = x.length
    return rebind[type_of(x)](_powf[w](rebind[SIMD[DType.float32, w]](x), rebind[SIMD[DType.float32, w]](y)))


@always_inline
def pow_of_log(logx: SIMD, y: type_of(logx)) -> type_of(logx):
    """powf(x, y) given logx = logf(x) (M-7)."""
    comptime w = logx.length
    return rebind[type_of(logx)](_pow_of_log[w](rebind[SIMD[DType.float32, w]](logx), rebind[SIMD[DType.float32, w]](y)))


@always_inline
def sin_cos(x: SIMD) -> Tuple[type_of(x), type_of(x)]:
    """(sin, cos) of x by rule M-9."""
    comptime w = x.length
    var r = _sincosf[w](rebind[SIMD[DType.float32, w]](x))
    return (rebind[type_of(x)](r[0]), rebind[type_of(x)](r[1]))



# ---------------------------------------------------------------- the state-space models
@always_inline
def _silu[w: Int](x: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    """Rule: S-1
    silu(x) = div(x, add(expf(neg(x)), 1)): one division (M-17's SiLU), x read
    flushed, every step flushed."""
    comptime F = SIMD[DType.float32, w]
    var z = _ftz[w](x)
    return _ftz[w](z / _ftz[w](_expf[w](-z) + F(1)))


@always_inline
def _log1p_s14[w: Int](e: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    """Rule: S-14
    log1p(e) for e >= 0 (an expf result, read flushed): +0 for e = +0; for
    e <= 0x3ED413CD (sqrt(2) - 1) M-8's polynomial and recombination on t = e with
    exponent 0; otherwise logf(add(e, 1)) by M-8."""
    comptime F = SIMD[DType.float32, w]
    var t = _ftz[w](e)
    var z = _mul[w](t, t)
    var p = F(7.0376836292e-2)
    p = _fmaz[w](p, t, F(-1.1514610310e-1))
    p = _fmaz[w](p, t, F(1.1676998740e-1))
    p = _fmaz[w](p, t, F(-1.2420140846e-1))
    p = _fmaz[w](p, t, F(1.4249322787e-1))
    p = _fmaz[w](p, t, F(-1.6668057665e-1))
    p = _fmaz[w](p, t, F(2.0000714765e-1))
    p = _fmaz[w](p, t, F(-2.4999993993e-1))
    p = _fmaz[w](p, t, F(3.3333331174e-1))
    var y = _mul[w](_mul[w](t, z), p)
    var fe = F(0)
    y = _fmaz[w](fe, F(-2.12194440e-4), y)
    y = _fmaz[w](F(-0.5), z, y)
    var r = _ftz[w](t + y)
    var small = _fmaz[w](fe, F(0.693359375), r)
    var big = _logf[w](_ftz[w](t + F(1)))
    var tb = bitcast[DType.uint32, w](t)
    var out = tb.le(SIMD[DType.uint32, w](0x3ED413CD)).select(small, big)
    return t.eq(F(0)).select(F(0), out)


@always_inline
def _softplus[w: Int](x: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    """Rule: S-14
    softplus(x) = x if x > 20, else log1p(expf(x)) (S-14's log1p), x read flushed."""
    comptime F = SIMD[DType.float32, w]
    var v = _ftz[w](x)
    return v.gt(F(20)).select(v, _log1p_s14[w](_expf[w](v)))


@always_inline
def silu(x: SIMD) -> type_of(x):
    comptime w = x.length
    return rebind[type_of(x)](_silu[w](rebind[SIMD[DType.float32, w]](x)))


@always_inline
def softplus(x: SIMD) -> type_of(x):
    comptime w = x.length
    return rebind[type_of(x)](_softplus[w](rebind[SIMD[DType.float32, w]](x)))


# ---------------------------------------------------------------- training
@always_inline
def silu_mul_bwd[w: Int, DAZ: Bool = False](g: SIMD[DType.float32, w], u: SIMD[DType.float32, w],
                         dp: SIMD[DType.float32, w]) -> Tuple[SIMD[DType.float32, w], SIMD[DType.float32, w]]:
    """T-52 (contracts/ops/IDENTICAL_TRAIN_CONTRACT.md): the backward of p = mul(silu(g), u)
    for the gradient dp, operands read flushed, every step flushed:
    den = add(expf(neg(g)), 1); s = div(g, den) (the forward's SiLU); sg = div(1, den);
    ds = mul(sg, add(1, mul(g, sub(1, sg)))); dg = mul(mul(dp, u), ds); du = mul(dp, s).
    Returns (dg, du). DAZ: expf in its DAZ form (expf_daz), for a CPU kernel under the
    contract floating-point state."""
    comptime F = SIMD[DType.float32, w]
    var gz = _ftz[w](g)
    var uz = _ftz[w](u)
    var dz = _ftz[w](dp)
    var den = _ftz[w](_expf[w, DAZ](-gz) + F(1))
    var s = _ftz[w](gz / den)
    var sg = _ftz[w](F(1) / den)
    var ds = _mul[w](sg, _ftz[w](F(1) + _mul[w](gz, _ftz[w](F(1) - sg))))
    return (_mul[w](_mul[w](dz, uz), ds), _mul[w](dz, s))

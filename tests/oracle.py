"""Independent test oracle for the v1 arithmetic.

Written from the v1 arithmetic reference (the contracts in contracts/gemm/) alone. It imports nothing
from ``mojolearn`` and shares no code with the kernels. Everything here is slow
but exact and meant to be read: vectorised across output elements, sequential
where the specification fixes an order.

Notation follows the specification:

* ``f32(x)``   round to float32, nearest-even.
* ``ftz(x)``   a float32 subnormal becomes a zero of the same sign.
* ``daz(x)``   the same map applied to inputs ("denormals are zero").
* ``pow2f(e)`` float32 ``2**e`` for -126 <= e <= 127, +inf above, +0 below.

Public functions
----------------
daz, ftz, pow2f, leaf_size, fma_f32,
to_bf16, from_bf16,
quantize_int8, quantize_int15, dequantize_int8, dequantize_int15,
gemm_fp32_v1, gemm_fp32_v1_nt, gemm_fp32_v1_tn, gemm_bf16f32_v1,
gemm_int, gemm_int15, gemm_int8_f32, gemm_int15_f32,
part_hash.
"""

from __future__ import annotations

import hashlib

import numpy as np

__all__ = [
    "daz",
    "ftz",
    "pow2f",
    "leaf_size",
    "fma_f32",
    "to_bf16",
    "from_bf16",
    "quantize_int8",
    "quantize_int15",
    "dequantize_int8",
    "dequantize_int15",
    "gemm_fp32_v1",
    "gemm_fp32_v1_nt",
    "gemm_fp32_v1_tn",
    "gemm_bf16f32_v1",
    "gemm_int",
    "gemm_int15",
    "gemm_int8_f32",
    "gemm_int15_f32",
    "part_hash",
    "INT8_MAX_K",
    "INT15_MAX_K",
]

_SIGN = np.uint32(0x80000000)
_EXP = np.uint32(0x7F800000)
_MANT = np.uint32(0x007FFFFF)

INT8_MAX_K = 131072  # L-7
INT15_MAX_K = 65536  # W-4


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------

def _require_f32(x, name="x"):
    x = np.asarray(x)
    if x.dtype != np.float32:
        raise TypeError(f"{name} must be float32, got {x.dtype} (no silent cast)")
    return x


def _check_fp_environment():
    """The oracle relies on numpy float32 arithmetic producing subnormals.

    If some library switched the CPU into flush-to-zero / denormals-are-zero
    mode, float32 arithmetic here would no longer be IEEE and the oracle would
    silently lie, so refuse to run instead.
    """
    tiny = np.array([2.0 ** -126], dtype=np.float32)
    half = tiny / np.float32(2.0)
    if half[0] == 0 or half.astype(np.float64)[0] != 2.0 ** -127:
        raise RuntimeError("float32 subnormals are flushed by the FP environment;"
                           " the oracle needs IEEE gradual underflow")


def _subnormal_to_signed_zero(x):
    x = np.array(x, dtype=np.float32, copy=True)
    bits = x.view(np.uint32)
    sub = ((bits & _EXP) == 0) & ((bits & _MANT) != 0)
    bits[sub] &= _SIGN
    return x


# ---------------------------------------------------------------------------
# notation
# ---------------------------------------------------------------------------

def ftz(x):
    """ftz: every float32 subnormal becomes a zero of the same sign (copy)."""
    return _subnormal_to_signed_zero(_require_f32(x))


def daz(x):
    """DAZ on input: identical map to ftz, applied to operands (copy)."""
    return _subnormal_to_signed_zero(_require_f32(x))


def pow2f(e):
    """float32 2**e for -126 <= e <= 127, +inf for e > 127, +0 for e < -126.

    Accepts a Python int or an integer array; returns a float32 array of the
    same shape (a 0-d array for a scalar).
    """
    e = np.asarray(e, dtype=np.int64)
    inrange = (e >= -126) & (e <= 127)
    biased = np.where(inrange, e + 127, 0).astype(np.uint32)
    out = (biased << np.uint32(23)).view(np.float32).copy()
    out = np.where(inrange, out, np.float32(0.0)).astype(np.float32)
    out = np.where(e > 127, np.float32(np.inf), out).astype(np.float32)
    return out


def leaf_size(k: int) -> int:
    """fp32.v1 rule 2: L = max(128, ceil(k / 1024))."""
    k = int(k)
    return max(128, -(-k // 1024))


# ---------------------------------------------------------------------------
# exact fused multiply-add in float32
# ---------------------------------------------------------------------------

def fma_f32(a, b, c):
    """Correctly rounded float32 fma(a, b, c) = f32(a*b + c), one rounding.

    No DAZ and no flush are applied here (callers do that). Arrays broadcast.

    Method: the product of two float32 values is exact in float64 (at most 48
    significant bits, exponent range well inside float64). The sum s = p + c in
    float64 may be inexact; TwoSum gives the exact error err with
    p + c == s + err. Every float32 rounding midpoint is a float64 value and
    float64 rounding is monotonic, so f32(s) is the correctly rounded result
    of the exact sum except when s lies EXACTLY on a float32 midpoint while
    err != 0 (the one double-rounding hazard). A float32 midpoint carries at most
    25 significant bits (one past the 24 of float32; fewer for subnormal float32
    spacing), so its float64 significand ends in 28 zero bits: only the elements
    with err != 0 and those low bits zero (or s not finite) can be one, and only
    they go through the exact check (_round_midpoints).
    """
    a = np.asarray(a, dtype=np.float32)
    b = np.asarray(b, dtype=np.float32)
    c = np.asarray(c, dtype=np.float32)
    with np.errstate(all="ignore"):
        p = a.astype(np.float64) * b.astype(np.float64)  # exact (or inf/NaN)
        c64 = c.astype(np.float64)
        s = np.asarray(p + c64)
        # Knuth TwoSum, branch-free: p + c == s + err exactly (finite case).
        bv = s - p
        err = np.asarray((p - (s - bv)) + (c64 - bv))
        r = np.array(s.astype(np.float32))
        low = s.view(np.uint64) & np.uint64(0x0FFFFFFF)
        check = ((err != 0) & (low == 0)) | ~np.isfinite(s)
    if check.any():
        r[check] = _round_midpoints(s[check], err[check])
    return r


def _round_midpoints(s, err):
    """f32 of the exact sum s + err (s the float64 sum, err its TwoSum error; 1-D),
    the double-rounding hazard checked on every element. That test is an exact
    equality: r = f32(s) and its float32 neighbour on s's side bracket s, and s is
    the midpoint iff s == (r + neighbour) / 2 in float64 (exact: both are float32
    values; an overflowed r counts as 2**128). On the midpoint the sign of err picks
    the side; no float64 value is nudged, so a sum one float64 ulp off a midpoint is
    never mistaken for one (an earlier version did that and rounded 48 of 20,000
    constructed cases the wrong way).
    """
    with np.errstate(all="ignore"):
        finite = np.isfinite(s)
        r = s.astype(np.float32)
        r64 = r.astype(np.float64)
        r64 = np.where(np.isinf(r) & finite, np.copysign(2.0 ** 128, s), r64)
        # the float32 neighbour of r on the side of s (r itself when s == r)
        side = np.where(s > r64, np.float32(np.inf), np.float32(-np.inf))
        other = np.nextafter(np.where(np.isinf(r), np.copysign(np.float32(3.4028235e38), r), r),
                             side.astype(np.float32))
        other = np.where(np.isinf(r), np.copysign(np.float32(3.4028235e38), r), other)
        mid = (r64 + other.astype(np.float64)) * 0.5
        midpoint = finite & (s != r64) & (s == mid) & (err != 0)
        hi = np.maximum(r, other)
        lo = np.minimum(r, other)
        out = np.where(midpoint, np.where(err > 0, hi, lo), r).astype(np.float32)
    return out


# ---------------------------------------------------------------------------
# bf16 conversion (L-1 widen, L-2 narrow)
# ---------------------------------------------------------------------------

def to_bf16(x):
    """float32 -> bf16 bits (uint16), any rank.

    DAZ, then NaN -> (b >> 16) | 0x0040, else (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    on the float32 bits (round to nearest even, overflow to inf).
    """
    x = daz(_require_f32(x, "x"))
    b = x.view(np.uint32).astype(np.uint64)
    is_nan = np.isnan(x)
    rounded = (b + np.uint64(0x7FFF) + ((b >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)
    quiet = (b >> np.uint64(16)) | np.uint64(0x0040)
    out = np.where(is_nan, quiet, rounded)
    assert np.all(out <= 0xFFFF)
    return out.astype(np.uint16)


def from_bf16(bits):
    """bf16 bits (uint16) -> float32 with bits << 16 exactly, no flush."""
    bits = np.asarray(bits)
    if bits.dtype != np.uint16:
        raise TypeError(f"bf16 bits must be uint16, got {bits.dtype}")
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


# ---------------------------------------------------------------------------
# int8 / int15 quantization (L-3/L-4, L-6, W-1..W-4)
# ---------------------------------------------------------------------------

def _quantize_codes(x2d, shift, cmax):
    x = _require_f32(x2d, "x")
    if x.ndim != 2:
        raise ValueError("quantize expects a 2-D array")
    x = daz(x)
    m, _ = x.shape
    with np.errstate(all="ignore"):
        mag = np.abs(x)
        mag = np.where(np.isnan(mag), np.float32(0.0), mag).astype(np.float32)
        if x.shape[1] == 0:
            absmax = np.zeros(m, dtype=np.float32)
        else:
            absmax = mag.max(axis=1).astype(np.float32)
        biased = ((absmax.view(np.uint32) >> np.uint32(23)) & np.uint32(0xFF)).astype(np.int64)
        # after DAZ absmax is +0, a normal, or +inf (biased exponent 255)
        e = np.where(absmax == 0, 0, biased - 127 - shift).astype(np.int64)
        scale = pow2f(-e)  # (m,), may be +inf when -e > 127
        y = (x * scale[:, None]).astype(np.float32)  # f32 product; 0*inf = NaN
        y = ftz(y)
        y = np.rint(y)  # round half to even
        y = np.where(np.isnan(y), np.float32(0.0), y)
        y = np.clip(y, -cmax, cmax)
    codes = y.astype(np.int64)
    return codes, e.astype(np.int32)


def quantize_int8(x2d):
    """Per-row int8 quantization: returns (codes int8 (m,k), exps int32 (m,))."""
    codes, e = _quantize_codes(x2d, 6, 127)
    return codes.astype(np.int8), e


def quantize_int15(x2d):
    """Per-row int15 quantization: returns (hi int8, lo int8, exps int32).

    code = clamp(...) in [-16383, 16383]; hi = code >> 7 (arithmetic),
    lo = code & 127, so code == hi*128 + lo.
    """
    codes, e = _quantize_codes(x2d, 13, 16383)
    hi = codes >> 7
    lo = codes & 127
    assert np.all(hi * 128 + lo == codes)
    return hi.astype(np.int8), lo.astype(np.int8), e


def _dequantize(codes, exps):
    codes = np.asarray(codes).astype(np.int64)
    exps = np.asarray(exps).astype(np.int64)
    if codes.ndim != 2 or exps.shape != (codes.shape[0],):
        raise ValueError("codes must be (m,k) with exps (m,)")
    assert np.all(np.abs(codes) < 2 ** 24)  # exact in float32
    with np.errstate(all="ignore"):
        out = codes.astype(np.float32) * pow2f(exps)[:, None]
    return ftz(out.astype(np.float32))


def dequantize_int8(codes, exps):
    """L-6: ftz(f32(code * pow2f(e))) per row."""
    return _dequantize(codes, exps)


def dequantize_int15(hi, lo, exps):
    """L-6 for int15: code = hi*128 + lo, then ftz(f32(code * pow2f(e)))."""
    code = np.asarray(hi).astype(np.int64) * 128 + np.asarray(lo).astype(np.int64)
    return _dequantize(code, exps)


# ---------------------------------------------------------------------------
# fp32.v1 GEMM
# ---------------------------------------------------------------------------

def _leaf_partials(a, b, leaf=None):
    """Leaf results for every output: float32 array (m, n, nleaves). leaf: another
    leaf size than rule 2's (the looser numeric modes' order), else leaf_size(k)."""
    m, k = a.shape
    n = b.shape[1]
    L = leaf_size(k) if leaf is None else leaf
    nleaves = -(-k // L)
    assert leaf is not None or nleaves <= 1024
    padded = nleaves * L
    # Lay the k axis out as (leaf, position in leaf); padding is masked below
    # (padding with zeros would turn an accumulated -0.0 into +0.0).
    a_pad = np.zeros((m, padded), dtype=np.float32)
    a_pad[:, :k] = a
    b_pad = np.zeros((padded, n), dtype=np.float32)
    b_pad[:k, :] = b
    a3 = a_pad.reshape(m, nleaves, L)          # a3[i, leaf, t] = a[i, leaf*L+t]
    b3 = b_pad.reshape(nleaves, L, n)          # b3[leaf, t, j] = b[leaf*L+t, j]
    leaf_start = np.arange(nleaves, dtype=np.int64) * L
    acc = np.zeros((m, n, nleaves), dtype=np.float32)  # +0.0
    for t in range(L):  # kk ascending inside every leaf, all leaves at once
        valid = (leaf_start + t) < k  # (nleaves,)
        at = a3[:, :, t][:, None, :]            # (m, 1, nleaves)
        bt = b3[:, t, :].T[None, :, :]          # (1, n, nleaves)
        new = ftz(fma_f32(at, bt, acc))
        acc = np.where(valid[None, None, :], new, acc).astype(np.float32)
    return acc


def _tree_combine(parts):
    """fp32.v1 rule 4: pairwise levels ftz(p0+p1), ftz(p2+p3), ..., odd carried."""
    level = parts
    with np.errstate(all="ignore"):
        while level.shape[-1] > 1:
            cnt = level.shape[-1]
            half = cnt // 2
            sums = ftz((daz(level[..., 0:2 * half:2]) + daz(level[..., 1:2 * half:2])).astype(np.float32))
            if cnt % 2:
                sums = np.concatenate([sums, level[..., cnt - 1:cnt]], axis=-1)
            level = sums
    return level[..., 0]


def gemm_fp32_leaves(a, b, leaf):
    """fp32.v1's arithmetic with leaves of ``leaf`` k-steps instead of rule 2's (what
    numeric_mode deterministic / fast compute on the CPU: not a contract, a fixed
    order): the same chains, flushes and tree."""
    a = _require_f32(a, "a")
    b = _require_f32(b, "b")
    _check_fp_environment()
    return _tree_combine(_leaf_partials(daz(a), daz(b), leaf)).astype(np.float32)


def gemm_fp32_v1(a, b):
    """fp32.v1: a (m,k) float32 @ b (k,n) float32 -> (m,n) float32, exact bits.

    DAZ inputs; leaves of L = max(128, ceil(k/1024)); inside a leaf
    acc = +0, acc = ftz(fma(a, b, acc)) for kk ascending; leaves combined by
    the balanced pairwise tree. Empty dimensions raise ValueError (the
    published API refuses empty input; the empty-k result is not promised).
    """
    a = _require_f32(a, "a")
    b = _require_f32(b, "b")
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError("gemm_fp32_v1 expects 2-D operands")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"inner dimensions differ: {a.shape} @ {b.shape}")
    if 0 in a.shape or 0 in b.shape:
        raise ValueError("empty operand")
    _check_fp_environment()
    a = daz(a)
    b = daz(b)
    parts = _leaf_partials(a, b)
    return _tree_combine(parts).astype(np.float32)


def gemm_fp32_v1_nt(a, b):
    """fp32.v1 for a @ b.T with a (m,k), b (n,k)."""
    b = _require_f32(b, "b")
    if b.ndim != 2:
        raise ValueError("expects 2-D operands")
    return gemm_fp32_v1(a, np.ascontiguousarray(b.T))


def gemm_fp32_v1_tn(a, b):
    """fp32.v1 for a.T @ b with a (k,m), b (k,n)."""
    a = _require_f32(a, "a")
    if a.ndim != 2:
        raise ValueError("expects 2-D operands")
    return gemm_fp32_v1(np.ascontiguousarray(a.T), b)


def gemm_bf16f32_v1(a_bits_or_f32, b_bits):
    """bf16f32.v1: fp32.v1 on the exactly widened operands.

    b must be uint16 bf16 bits (float32 b is a TypeError); a is uint16 bits or
    float32 (used as is).
    """
    b_bits = np.asarray(b_bits)
    if b_bits.dtype != np.uint16:
        raise TypeError(f"b must be uint16 bf16 bits, got {b_bits.dtype}")
    a = np.asarray(a_bits_or_f32)
    if a.dtype == np.uint16:
        a = from_bf16(a)
    elif a.dtype != np.float32:
        raise TypeError(f"a must be float32 or uint16 bf16 bits, got {a.dtype}")
    return gemm_fp32_v1(a, from_bf16(b_bits))


# ---------------------------------------------------------------------------
# int8i32.v1 / int15i64.v1 GEMM
# ---------------------------------------------------------------------------

def _int_to_f32_exact(S):
    """f32(S) with one round-to-nearest-even, for an int64 array S.

    int64 -> float64 is exact while |S| <= 2**53; float64 -> float32 is then a
    single rounding. Asserted, never assumed.
    """
    S = np.asarray(S, dtype=np.int64)
    assert np.all(np.abs(S) <= 2 ** 53), "integer sum too large for the exact path"
    return S.astype(np.float64).astype(np.float32)


def _int_gemm_core(a_codes, a_exps, b_codes, b_exps, cmax, max_k, rule, check_domain):
    a_codes = np.asarray(a_codes).astype(np.int64)
    b_codes = np.asarray(b_codes).astype(np.int64)
    a_exps = np.asarray(a_exps).astype(np.int64)
    b_exps = np.asarray(b_exps).astype(np.int64)
    if a_codes.ndim != 2 or b_codes.ndim != 2 or a_codes.shape[1] != b_codes.shape[1]:
        raise ValueError("expects a (m,k) and b (n,k)")
    m, k = a_codes.shape
    n = b_codes.shape[0]
    if a_exps.shape != (m,) or b_exps.shape != (n,):
        raise ValueError("exponents must be (m,) and (n,)")
    if check_domain and k > max_k:
        raise ValueError(f"{rule}: k={k} exceeds the domain k <= {max_k}")
    assert np.all(np.abs(a_codes) <= cmax) and np.all(np.abs(b_codes) <= cmax)
    # bound on |S| so the int64 sum cannot wrap and float64 holds it exactly
    assert k * cmax * cmax <= 2 ** 53
    S = a_codes @ b_codes.T  # exact in int64
    fS = _int_to_f32_exact(S)
    scale = pow2f(a_exps[:, None] + b_exps[None, :])
    with np.errstate(all="ignore"):
        out = (fS * scale).astype(np.float32)  # one float32 rounding
    return ftz(out)


def gemm_int(a_codes, a_exps, b_codes, b_exps, *, check_domain=True):
    """int8i32.v1: a (m,k) int8 codes, b (n,k) int8 codes -> (m,n) float32.

    out[i,j] = ftz(f32(S) * pow2f(ea[i] + eb[j])), S the exact integer sum.
    k > 131072 is refused (L-7) unless check_domain=False.
    """
    return _int_gemm_core(a_codes, a_exps, b_codes, b_exps, 127,
                          INT8_MAX_K, "L-7", check_domain)


def gemm_int15(a_hi, a_lo, a_exps, b_hi, b_lo, b_exps, *, check_domain=True):
    """int15i64.v1: codes rebuilt as hi*128 + lo, then as gemm_int.

    k > 65536 is refused (W-4) unless check_domain=False.
    """
    a = np.asarray(a_hi).astype(np.int64) * 128 + np.asarray(a_lo).astype(np.int64)
    b = np.asarray(b_hi).astype(np.int64) * 128 + np.asarray(b_lo).astype(np.int64)
    return _int_gemm_core(a, a_exps, b, b_exps, 16383, INT15_MAX_K, "W-4", check_domain)


def gemm_int8_f32(a, b, *, check_domain=True):
    """int8i32.v1 on float32 a (m,k), b (n,k): quantize both, then gemm_int."""
    ca, ea = quantize_int8(a)
    cb, eb = quantize_int8(b)
    return gemm_int(ca, ea, cb, eb, check_domain=check_domain)


def gemm_int15_f32(a, b, *, check_domain=True):
    """int15i64.v1 on float32 a (m,k), b (n,k): quantize both, then gemm_int15."""
    ha, la, ea = quantize_int15(a)
    hb, lb, eb = quantize_int15(b)
    return gemm_int15(ha, la, ea, hb, lb, eb, check_domain=check_domain)


# ---------------------------------------------------------------------------
# hashing
# ---------------------------------------------------------------------------

def part_hash(*arrays) -> str:
    """First 16 hex digits of sha256 over, per array in order: str(dtype),
    str(shape), then the C-order bytes (strings UTF-8 encoded)."""
    h = hashlib.sha256()
    for arr in arrays:
        arr = np.asarray(arr)
        h.update(str(arr.dtype).encode("utf-8"))
        h.update(str(arr.shape).encode("utf-8"))
        h.update(np.ascontiguousarray(arr).tobytes(order="C"))
    return h.hexdigest()[:16]


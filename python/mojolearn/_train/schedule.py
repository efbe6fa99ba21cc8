"""Learning-rate schedules (training-arithmetic-v1, T-36 .. T-38): ConstantLR,
WarmupLinearLR, WarmupCosineLR.

WHAT lr_at(t) IS
    t is one-based (the optimizer's step t uses lr_at(t)). The value is the float32
    nearest (ties to even) the exact real value computed from P = f32(peak_lr) and
    m = f32(min_lr), rounded once at the end (T-36): warmup `t <= W`: P t / W; then
    ConstantLR P; WarmupLinearLR P + (m - P)(t - W)/(T - W) for W < t < T; WarmupCosineLR
    m + (P - m)(1 + cos(pi p))/2 with p = (t - W)/(T - W); m from t >= T (T-37).

WHY EXACT ARITHMETIC
    A scalar per step, so exact rationals cost nothing and leave no float64 rounding
    between the rules and the float32 result. The cosine is enclosed (T-38): pi between
    60-digit bounds, Taylor sums of 24, 32, 48 and 64 terms with their remainders, until
    both ends of the enclosure round to one float32; a straddle at 64 terms raises,
    never guesses. p in {1/3, 1/2, 2/3} is exact.
"""
from __future__ import annotations

import math
import numbers
from fractions import Fraction

__all__ = ["ConstantLR", "WarmupLinearLR", "WarmupCosineLR", "round_f32", "schedule_from_dict"]


def _machin_pi(digits: int) -> int:
    """floor(pi * 10**digits) - (0 or 1): pi by Machin's formula on integers with guard digits."""
    guard = 10
    scale = 10 ** (digits + guard)

    def arctan_inv(x):
        total, term, n, sign, x2 = 0, scale // x, 1, 1, x * x
        while term:
            total += sign * (term // n)
            term //= x2
            n += 2
            sign = -sign
        return total

    pi = 4 * (4 * arctan_inv(5) - arctan_inv(239))
    return pi // 10 ** guard


_PI60 = _machin_pi(60)
# pi lies in [PI_LO, PI_HI] (the truncation error of the series is far below 10**-60)
PI_LO = Fraction(_PI60 - 1, 10 ** 60)
PI_HI = Fraction(_PI60 + 1, 10 ** 60)
_TERMS = (24, 32, 48, 64)


def round_f32(q) -> float:
    """The float32 nearest (ties to even) the exact rational q, as a Python float holding
    a float32 value (+inf beyond the float32 range; subnormals rounded exactly)."""
    q = Fraction(q)
    if q == 0:
        return 0.0
    sign = -1.0 if q < 0 else 1.0
    q = abs(q)
    e = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** e > q:
        e -= 1
    e = max(e, -126)
    scaled = q / Fraction(2) ** (e - 23)
    n = scaled.numerator // scaled.denominator
    rem = scaled - n
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and n % 2 == 1):
        n += 1
    if n >= 2 ** 24 and e + 1 > 127 or e > 127:
        return sign * math.inf
    return sign * math.ldexp(n, e - 23)


def _f32_exact(x, what: str, cls: str) -> Fraction:
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError(f"mojolearn: {cls}: {what} must be a real number, got {x!r}")
    v = float(x)
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"mojolearn: {cls}: {what}={v!r} must be finite and >= 0 (T-44)")
    r = round_f32(Fraction(v))
    if not math.isfinite(r):
        raise ValueError(f"mojolearn: {cls}: {what}={v!r} overflows float32 (T-3)")
    return Fraction(r)


def _steps(x, what: str, cls: str) -> int:
    if isinstance(x, bool) or not isinstance(x, numbers.Integral) or x < 0:
        raise ValueError(f"mojolearn: {cls}: {what} must be an int >= 0, got {x!r}")
    return int(x)


def _cos_sum(x: Fraction, n: int) -> Fraction:
    """sum_{k < n} (-1)^k x^(2k) / (2k)!"""
    total, term, x2 = Fraction(0), Fraction(1), x * x
    for k in range(n):
        total += term if k % 2 == 0 else -term
        term = term * x2 / ((2 * k + 1) * (2 * k + 2))
    return total


def _cos_bounds(x_lo: Fraction, x_hi: Fraction, n: int):
    """An enclosure [lo, hi] of cos(x) for every x in [x_lo, x_hi] within [0, pi]
    (cos decreasing there), by n Taylor terms and the remainder x^(2n) / (2n)!."""
    r_hi = x_hi ** (2 * n) / math.factorial(2 * n)
    r_lo = x_lo ** (2 * n) / math.factorial(2 * n)
    lo = _cos_sum(x_hi, n) - r_hi
    hi = _cos_sum(x_lo, n) + r_lo
    return max(lo, Fraction(-1)), min(hi, Fraction(1))


_EXACT_HALF_ONE_PLUS_COS = {Fraction(0): Fraction(1), Fraction(1, 3): Fraction(3, 4),
                            Fraction(1, 2): Fraction(1, 2), Fraction(2, 3): Fraction(1, 4),
                            Fraction(1): Fraction(0)}


def _cosine_value(P: Fraction, m: Fraction, p: Fraction) -> float:
    ex = _EXACT_HALF_ONE_PLUS_COS.get(p)
    if ex is not None:
        return round_f32(m + (P - m) * ex)
    for n in _TERMS:
        c_lo, c_hi = _cos_bounds(PI_LO * p, PI_HI * p, n)
        a = m + (P - m) * (1 + c_lo) / 2
        b = m + (P - m) * (1 + c_hi) / 2
        ra, rb = round_f32(a), round_f32(b)
        if ra == rb and math.copysign(1.0, ra) == math.copysign(1.0, rb):
            return ra
    raise ArithmeticError(f"mojolearn: WarmupCosineLR: the value at p = {p} straddles a float32 "
                          f"rounding boundary after {_TERMS[-1]} Taylor terms (T-38: never guessed)")


class _Schedule:
    """Shared by the three schedules: P, m as exact float32 values, W, T as ints."""
    kind = ""

    def __init__(self, peak_lr, warmup_steps=0, total_steps=None, min_lr=0.0):
        cls = type(self).__name__
        self._P = _f32_exact(peak_lr, "peak_lr", cls)
        self._m = _f32_exact(min_lr, "min_lr", cls)
        self._W = _steps(warmup_steps, "warmup_steps", cls)
        self._T = None
        if total_steps is not None:
            self._T = _steps(total_steps, "total_steps", cls)
            if self._T < max(1, self._W):
                raise ValueError(f"mojolearn: {cls}: total_steps={self._T} is below "
                                 f"max(1, warmup_steps={self._W}) (T-44)")

    @property
    def peak_lr(self) -> float:
        """f32(peak_lr) as a Python float."""
        return float(self._P)

    @property
    def min_lr(self) -> float:
        return float(self._m)

    @property
    def warmup_steps(self) -> int:
        return self._W

    @property
    def total_steps(self):
        return self._T

    def lr_at(self, t) -> float:
        """The float32 learning rate of one-based step t (T-36 .. T-38), as a Python float."""
        if isinstance(t, bool) or not isinstance(t, numbers.Integral) or t < 1:
            raise ValueError(f"mojolearn: {type(self).__name__}.lr_at: t={t!r} must be an int "
                             f">= 1 (steps are one-based, T-44)")
        t = int(t)
        P, m, W, T = self._P, self._m, self._W, self._T
        if t <= W:
            return round_f32(P * t / W)
        if self.kind == "constant":
            return round_f32(P)
        if t >= T:
            return round_f32(m)
        p = Fraction(t - W, T - W)
        if self.kind == "linear":
            return round_f32(P + (m - P) * p)
        return _cosine_value(P, m, p)

    def to_dict(self) -> dict:
        """Plain data that schedule_from_dict turns back into an equal schedule."""
        d = {"kind": type(self).__name__, "peak_lr": self.peak_lr, "warmup_steps": self._W}
        if self.kind != "constant":
            d["total_steps"] = self._T
            d["min_lr"] = self.min_lr
        return d

    @classmethod
    def from_dict(cls, d: dict):
        """The schedule of a to_dict() result (of this class or, on _Schedule, any)."""
        return schedule_from_dict(d)

    def __eq__(self, other):
        return type(self) is type(other) and self.to_dict() == other.to_dict()

    def __hash__(self):
        return hash(tuple(sorted(self.to_dict().items())))

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items() if k != "kind")
        return f"{type(self).__name__}({args})"


class ConstantLR(_Schedule):
    """P t / W for t <= W (linear warmup), then P: the float32 of the exact value (T-37)."""
    kind = "constant"

    def __init__(self, peak_lr, warmup_steps=0):
        super().__init__(peak_lr, warmup_steps)


class WarmupLinearLR(_Schedule):
    """Linear warmup to P over W steps, then linear decay to min_lr at total_steps (T-37)."""
    kind = "linear"

    def __init__(self, peak_lr, warmup_steps, total_steps, min_lr=0.0):
        super().__init__(peak_lr, warmup_steps, total_steps, min_lr)


class WarmupCosineLR(_Schedule):
    """Linear warmup to P over W steps, then cosine decay to min_lr at total_steps (T-37,
    T-38: the cosine enclosed exactly, never guessed)."""
    kind = "cosine"

    def __init__(self, peak_lr, warmup_steps, total_steps, min_lr=0.0):
        super().__init__(peak_lr, warmup_steps, total_steps, min_lr)


_KINDS = {"ConstantLR": ConstantLR, "WarmupLinearLR": WarmupLinearLR,
          "WarmupCosineLR": WarmupCosineLR}


def schedule_from_dict(d: dict):
    """The schedule described by a to_dict() result."""
    if not isinstance(d, dict) or d.get("kind") not in _KINDS:
        raise ValueError(f"mojolearn: schedule_from_dict: {d!r} is not a schedule's to_dict() "
                         f"(kind one of {sorted(_KINDS)})")
    kw = {k: v for k, v in d.items() if k != "kind"}
    import inspect

    cls = _KINDS[d["kind"]]
    params = inspect.signature(cls.__init__).parameters
    need = [n for n, p in params.items() if n != "self" and p.default is inspect.Parameter.empty]
    missing = [n for n in need if n not in kw]
    extra = sorted(set(kw) - set(params) - {"self"})
    if missing or extra:
        raise ValueError(f"mojolearn: schedule_from_dict: a {d['kind']} needs "
                         f"{', '.join(n for n in params if n != 'self')}; "
                         + (f"missing {missing}" if missing else f"unknown keys {extra}"))
    return cls(**kw)

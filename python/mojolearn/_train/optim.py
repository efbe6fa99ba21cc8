"""Optimizers under fp32_v1 (training-arithmetic-v1, T-29 .. T-35, T-39, T-43): SGD,
Adam, AdamW over a list of float32 numpy parameters updated in place.

A STEP (T-29)
    (1) clip when max_norm is given (T-23 .. T-25; the scaled gradients are written back
    into the caller's arrays); (2) t += 1; (3) lr = lr_schedule.lr_at(t) with a schedule;
    (4) the scalars (bias corrections by T-30's binary powering, step, rt, c1, c2, decay,
    c_damp) from float32 hyperparameters (T-3); (5) every element by T-31 .. T-34. The
    scalars and elements run in the Mojo kernels; nothing is computed here.

STATE (T-39)
    state_dict() = {t, exp_avg, exp_avg_sq, buf_initialized}: the moments flat float32
    over all parameters in list order (SGD's momentum in exp_avg), one int32 flag a
    tensor; no hyperparameters and no schedule. Load, then k steps, equals the straight
    run bit for bit.

REFUSALS (T-41, T-43, T-44), by name and before anything is written
    non-float32 parameters or gradients; a NaN or inf in a gradient or parameter (with
    its flat index; no step taken); a non-finite clip total; foreach, amsgrad, fused,
    capturable, differentiable, param groups; nesterov without momentum or with
    dampening; a beta outside [0, 1); a callable lr_schedule; a non-bool maximize; a
    wrong gradient count.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from . import kernels as K
from .primitives import (
    _check_grads, _clip, _f32, _finite, _inplace, _max_norm_bits, _training_profile,
    accumulate_grads,
)
from .schedule import _Schedule

__all__ = ["SGD", "Adam", "AdamW"]

_TORCH_ONLY = ("foreach", "amsgrad", "fused", "capturable", "differentiable")


def _real(x, what: str, cls: str, lo=None, hi_open=None, allow_neg=True) -> float:
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError(f"mojolearn: {cls}: {what} must be a real number, got {x!r}")
    v = float(x)
    if not math.isfinite(v):
        raise ValueError(f"mojolearn: {cls}: {what}={v!r} must be finite")
    if lo is not None and v < lo:
        raise ValueError(f"mojolearn: {cls}: {what}={v!r} must be >= {lo}")
    if hi_open is not None and not (float(K.bits_f32(K.f32_bits(v))) < hi_open):
        raise ValueError(f"mojolearn: {cls}: {what}={v!r} must be < {hi_open} (as float32)")
    return v


class _Optimizer:
    """Shared by SGD, Adam, AdamW: parameters, state, the checks and the step's frame."""

    def __init__(self, params, lr, lr_schedule, maximize, refused):
        cls = type(self).__name__
        for name in refused:
            if name in _TORCH_ONLY:
                raise ValueError(f"mojolearn: {cls}: {name}= is not supported (T-43): one "
                                 f"kernel serves every step; drop the argument")
            raise TypeError(f"mojolearn: {cls}: unexpected keyword argument {name!r}")
        if isinstance(params, np.ndarray) or not isinstance(params, (list, tuple)):
            raise TypeError(f"mojolearn: {cls}: params must be a list of float32 arrays")
        for j, p in enumerate(params):
            if isinstance(p, dict):
                raise TypeError(f"mojolearn: {cls}: params[{j}] is a dict: param_groups are not "
                                f"supported (T-43); pass one list of arrays and one set of "
                                f"hyperparameters")
        self._params = [_inplace(p, cls, f"params[{j}]") for j, p in enumerate(params)]
        if lr_schedule is not None and not isinstance(lr_schedule, _Schedule):
            raise TypeError(f"mojolearn: {cls}: lr_schedule must be ConstantLR, WarmupLinearLR or "
                            f"WarmupCosineLR (T-43: a callable schedule is refused), got "
                            f"{type(lr_schedule).__name__}")
        if not isinstance(maximize, bool):
            raise TypeError(f"mojolearn: {cls}: maximize must be a bool, got {maximize!r} (T-43)")
        _training_profile(cls)
        self._lr = _real(lr, "lr", cls)  # T-46: a negative lr is accepted
        self._schedule = lr_schedule
        self._maximize = maximize
        n = sum(p.size for p in self._params)
        self._m = np.zeros((n,), dtype=np.float32)
        self._v = np.zeros((n,), dtype=np.float32)
        self._flags = np.zeros((len(self._params),), dtype=np.int32)
        self.t = 0

    @property
    def params(self) -> list:
        """The parameter arrays (updated in place by step)."""
        return list(self._params)

    @property
    def lr_schedule(self):
        return self._schedule

    def _check_step(self, grads, max_norm, fn):
        cls = f"{type(self).__name__}.{fn}"
        if isinstance(grads, np.ndarray) or not isinstance(grads, (list, tuple)):
            raise TypeError(f"mojolearn: {cls}: grads must be a list of float32 arrays")
        if len(grads) != len(self._params):
            raise ValueError(f"mojolearn: {cls}: {len(grads)} gradients for {len(self._params)} "
                             f"parameters: the gradient count must match (T-43)")
        mb = None if max_norm is None else _max_norm_bits(max_norm, cls)
        grads = _check_grads(grads, cls, mb is not None)
        for j, (g, p) in enumerate(zip(grads, self._params)):
            if g.shape != p.shape:
                raise ValueError(f"mojolearn: {cls}: grads[{j}] has shape {g.shape}, params[{j}] "
                                 f"{p.shape}")
        for j, g in enumerate(grads):
            _finite(g, cls, f"grads[{j}]")
        for j, p in enumerate(self._params):
            _finite(p, cls, f"params[{j}]")
        return grads, mb

    def step(self, grads, max_norm=None):
        """One step (T-29) with these gradients (a list matching the parameters); with
        max_norm, clip first and write the scaled gradients back."""
        grads, mb = self._check_step(grads, max_norm, "step")
        if mb is not None:
            _clip(grads, mb, f"{type(self).__name__}.step")
        self.t += 1
        lr = self._schedule.lr_at(self.t) if self._schedule is not None else self._lr
        self._kernel(grads, K.f32_bits(lr))

    def step_accumulated(self, microbatch_grads, tokens, max_norm=None):
        """accumulate_grads(microbatch_grads, tokens) (T-26, T-27), then step (T-29)."""
        grads = accumulate_grads(microbatch_grads, tokens)
        self.step(grads, max_norm=max_norm)

    def state_dict(self) -> dict:
        """{t, exp_avg, exp_avg_sq, buf_initialized} (T-39), copies."""
        return {"t": int(self.t), "exp_avg": self._m.copy(), "exp_avg_sq": self._v.copy(),
                "buf_initialized": self._flags.copy()}

    def load_state_dict(self, sd: dict):
        """Restore a state_dict() of an optimizer over parameters of the same sizes."""
        cls = f"{type(self).__name__}.load_state_dict"
        if not isinstance(sd, dict):
            raise TypeError(f"mojolearn: {cls}: sd must be a dict")
        missing = [k for k in ("t", "exp_avg", "exp_avg_sq", "buf_initialized") if k not in sd]
        if missing:
            raise ValueError(f"mojolearn: {cls}: missing {missing} (T-39)")
        t = sd["t"]
        if isinstance(t, np.ndarray):
            t = t.reshape(-1)[0] if t.size == 1 else t
        if isinstance(t, (bool, np.bool_)) or not isinstance(t, numbers.Integral) or int(t) < 0:
            raise ValueError(f"mojolearn: {cls}: t must be an int >= 0, got {t!r}")
        m = _f32(np.asarray(sd["exp_avg"]), cls, "exp_avg").reshape(-1)
        v = _f32(np.asarray(sd["exp_avg_sq"]), cls, "exp_avg_sq").reshape(-1)
        f = np.asarray(sd["buf_initialized"])
        if f.dtype != np.int32:
            raise TypeError(f"mojolearn: {cls}: buf_initialized has dtype {f.dtype}, not int32")
        f = f.reshape(-1)
        if m.size != self._m.size or v.size != self._v.size or f.size != self._flags.size:
            raise ValueError(f"mojolearn: {cls}: sizes {m.size}, {v.size}, {f.size} do not match "
                             f"this optimizer's {self._m.size}, {self._v.size}, {self._flags.size}")
        _finite(m, cls, "exp_avg")
        _finite(v, cls, "exp_avg_sq")
        self._m[...] = m
        self._v[...] = v
        self._flags[...] = f
        self.t = int(t)


class SGD(_Optimizer):
    """SGD (T-33, T-34): g = fma(wd, p, g) when weight_decay != 0; with momentum mu a
    tensor's first step b = g, later b = fma(1 - dampening, g, mul(mu, b)); nesterov
    g = fma(mu, b, g), else g = b; p = fma(-lr, g, p). Defaults (T-35): lr 1e-3,
    momentum 0, dampening 0, weight_decay 0, nesterov off."""

    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0,
                 nesterov=False, maximize=False, lr_schedule=None, **refused):
        cls = "SGD"
        mu = _real(momentum, "momentum", cls)
        damp = _real(dampening, "dampening", cls)
        wd = _real(weight_decay, "weight_decay", cls)
        if not isinstance(nesterov, bool):
            raise TypeError(f"mojolearn: SGD: nesterov must be a bool, got {nesterov!r}")
        if nesterov and (K.f32_bits(mu) & 0x7FFFFFFF == 0 or K.f32_bits(damp) & 0x7FFFFFFF != 0):
            raise ValueError("mojolearn: SGD: nesterov=True needs momentum > 0 and dampening = 0 "
                             "(T-43)")
        super().__init__(params, lr, lr_schedule, maximize, refused)
        self._hb = (K.f32_bits(mu), K.f32_bits(damp), K.f32_bits(wd))
        self._nesterov = nesterov
        self._has_mu = K.f32_bits(mu) & 0x7FFFFFFF != 0

    def _kernel(self, grads, lr_bits):
        mu, damp, wd = self._hb
        K.sgd_step(self._params, grads, self._m, self._flags, lr_bits, mu, damp, wd,
                   self._nesterov, self._maximize)
        if self._has_mu:
            self._flags[...] = 1


class Adam(_Optimizer):
    """Adam (T-31, T-32 coupled): g = fma(wd, p, g) when weight_decay != 0;
    m = fma(1 - b1, g, mul(b1, m)); v = fma(1 - b2, mul(g, g), mul(b2, v));
    den = add(div(sqrt(v), sqrt(1 - b2^t)), eps); p = fma(-lr / (1 - b1^t), div(m, den), p).
    Defaults (T-35): lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0."""
    _decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 maximize=False, lr_schedule=None, **refused):
        cls = type(self).__name__
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise ValueError(f"mojolearn: {cls}: betas must be a pair (beta1, beta2)")
        b1, b2 = betas
        for name, b in (("beta1", b1), ("beta2", b2)):
            if isinstance(b, bool) or not isinstance(b, numbers.Real) or not (0.0 <= float(b) < 1.0) \
                    or not (float(K.bits_f32(K.f32_bits(float(b)))) < 1.0):
                raise ValueError(f"mojolearn: {cls}: {name}={b!r} must be in [0, 1) (T-43)")
        e = _real(eps, "eps", cls, lo=0.0)
        wd = _real(weight_decay, "weight_decay", cls)
        super().__init__(params, lr, lr_schedule, maximize, refused)
        self._hb = (K.f32_bits(float(b1)), K.f32_bits(float(b2)), K.f32_bits(e), K.f32_bits(wd))

    def _kernel(self, grads, lr_bits):
        b1, b2, e, wd = self._hb
        K.adam_step(self._params, grads, self._m, self._v, self.t, lr_bits, b1, b2, e, wd,
                    self._decoupled, self._maximize)
        self._flags[...] = 1


class AdamW(Adam):
    """AdamW (T-31, T-32 decoupled): Adam's moments and update with p = mul(1 - lr * wd, p)
    before the update instead of the coupled decay. Defaults as Adam but weight_decay
    0.01 (T-35)."""
    _decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01,
                 maximize=False, lr_schedule=None, **refused):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         maximize=maximize, lr_schedule=lr_schedule, **refused)

"""The fuzz suite's table: one (entry name, case generator) pair per public entry.

A generator takes a numpy ``Generator`` (seeded from the case seed, so every case
is reproducible from ``(entry, seed)``) and a scratch directory, and returns a
``Case``: a call to make and what must come of it.

    expect "ok"     valid input: the call must return the right bits (``check``,
                    comparing with the independent oracle in tests/oracle.py)
    expect "error"  bad input: the call must raise a built-in exception (never a
                    bare Exception) whose message starts with "mojolearn" and
                    names the argument (one of ``names``)
    expect "any"    either of the two (hostile files, env values, free-form names)

ADDING AN ENTRY (e.g. mojolearn.models when it exists): write ``def gen_x(rng,
tmp) -> Case`` below and add ``("models.x", gen_x)`` to ``ENTRIES``; the runner
and the tests pick it up from the table.
"""
from __future__ import annotations

import array
import os
import stat
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from tests import oracle as O

F32 = np.float32


@dataclass
class Case:
    label: str
    call: Callable
    expect: str = "ok"  # "ok", "error" or "any"
    check: Callable | None = None  # check(result) raises AssertionError when wrong
    names: tuple = ()  # for "error"/"any": the message names one of these
    cleanup: Callable | None = None
    keep: list = field(default_factory=list)


# ---------------------------------------------------------------- values and views


def rand_f32(rng, shape):
    """float32 data: normals, integers, wide range, and specials sprinkled in."""
    kind = rng.integers(0, 4)
    n = int(np.prod(shape)) if shape else 1
    if kind == 0:
        x = rng.standard_normal(n)
    elif kind == 1:
        x = rng.integers(-8, 9, size=n).astype(np.float64)
    elif kind == 2:
        x = rng.standard_normal(n) * np.exp2(rng.integers(-140, 120, size=n))
    else:
        x = rng.standard_normal(n)
        specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-41,
                             2.0 ** -126, 3.4028235e38], dtype=np.float64)
        pick = rng.random(n) < 0.3
        x[pick] = rng.choice(specials, size=int(pick.sum()))
    with np.errstate(all="ignore"):
        return x.astype(F32).reshape(shape)


def layout(rng, x):
    """The same logical values as ``x`` in a random memory layout/object kind."""
    k = int(rng.integers(0, 8))
    if k == 0 or x.ndim == 0:
        return np.array(x, order="C", copy=True), "C"  # (ascontiguousarray makes 0-d 1-d)
    if k == 1:
        return np.asfortranarray(x), "F"
    if k == 2:  # every other element of a bigger array
        big = np.zeros(tuple(2 * d for d in x.shape), x.dtype)
        sl = tuple(slice(None, None, 2) for _ in x.shape)
        big[sl] = x
        return big[sl], "strided"
    if k == 3:  # negative strides
        flipped = np.ascontiguousarray(x[tuple(slice(None, None, -1) for _ in x.shape)])
        return flipped[tuple(slice(None, None, -1) for _ in x.shape)], "reversed"
    if k == 4:
        return memoryview(np.ascontiguousarray(x)), "memoryview"
    if k == 5:
        from mojolearn._array import empty

        a = empty(x.dtype.name, x.shape)
        if x.size:
            np.asarray(a)[...] = x
        return a, "mojolearn.Array"
    if k == 6 and x.ndim == 1 and x.dtype == F32:
        return array.array("f", x.tobytes()), "array.array"
    if k == 7:  # __array_interface__ only
        class AI:
            def __init__(self, arr):
                self._a = arr
                self.__array_interface__ = arr.__array_interface__

        return AI(np.ascontiguousarray(x)), "array_interface"
    return np.array(x, order="C", copy=True), "C"


BAD_DTYPES = [np.float64, np.float16, np.int32, np.int8, np.uint16, np.complex64, ">f4",
              np.bool_, np.int64]
NOT_BUFFERS = [None, "abc", 3, 2.5, {"a": 1}, object(), b"", [[1.0, 2.0]]]


def bad_dtype(rng, x, avoid):
    choices = [d for d in BAD_DTYPES if np.dtype(d) not in [np.dtype(a) for a in avoid]]
    d = choices[int(rng.integers(0, len(choices)))]
    with np.errstate(all="ignore"):
        return x.astype(d)


def same_bits(got, exp, what=""):
    from tests.bits import assert_same_bits

    assert_same_bits(np.asarray(got), np.asarray(exp), what)


def dims(rng, lo=0, hi=9):
    v = int(rng.integers(lo, hi))
    return v if rng.random() > 0.05 else int(rng.integers(hi, 40))


# ---------------------------------------------------------------- linalg GEMMs


def _gemm_fp32(rng, tmp, func):
    from mojolearn import linalg

    bf = func == "matmul_bf16"
    m, k, n = dims(rng, 1), dims(rng, 0), dims(rng, 1)
    a = rand_f32(rng, (m, k))
    b = rand_f32(rng, (k, n))
    a_bits = bf and rng.random() < 0.5
    ops = {"a": O.to_bf16(a) if a_bits else a, "b": O.to_bf16(b) if bf else b}
    ta = tb = False
    lay = int(rng.integers(0, 3))
    if lay == 1:
        tb = True
    elif lay == 2:
        ta = True
    phys = {"a": ops["a"].T if ta else ops["a"], "b": ops["b"].T if tb else ops["b"]}
    args = {}
    descr = []
    for name in ("a", "b"):
        v = np.ascontiguousarray(phys[name])
        if rng.random() < 0.1 and v.size:
            v = np.broadcast_to(v[:1], v.shape)  # stride 0: the first row repeated
            descr.append(f"{name}:broadcast")
            logical = np.array(v)
            ops[name] = logical.T if (ta if name == "a" else tb) else logical
        else:
            v, how = layout(rng, v)
            descr.append(f"{name}:{how}")
        args[name] = v
    kw = {}
    if ta:
        kw["transpose_a"] = True
    if tb:
        kw["transpose_b"] = True
    fault = int(rng.integers(0, 14))
    expect, names = "ok", ()
    out = None
    if fault == 1:
        which = "a" if rng.random() < 0.5 else "b"
        allowed = [F32, np.uint16] if (bf and which == "a") else ([np.uint16] if bf else [F32])
        args[which] = bad_dtype(rng, np.asarray(phys[which]), allowed)
        expect, names = "error", (which,)
    elif fault == 2:
        which = "a" if rng.random() < 0.5 else "b"
        # 1-D or 0-D (a leading batch dimension is valid since rule 7.1)
        flat = np.asarray(phys[which]).reshape(-1)
        args[which] = flat if rng.random() < 0.5 or flat.size == 0 else flat[:1].reshape(())
        expect, names = "error", (which,)
    elif fault == 3:
        which = "a" if rng.random() < 0.5 else "b"
        args[which] = NOT_BUFFERS[int(rng.integers(0, len(NOT_BUFFERS)))]
        expect, names = "error", (which,)
    elif fault == 4:  # inner dimensions differ
        extra = np.zeros((1, phys["b"].shape[1]) if not tb else (phys["b"].shape[0], 1),
                         phys["b"].dtype)
        args["b"] = np.concatenate([phys["b"], extra], axis=0 if not tb else 1)
        expect, names = "error", ("inner dimensions", "k =")
    elif fault == 5:
        kw = {"transpose_a": True, "transpose_b": True}
        expect, names = "error", ("transpose_a",)
    elif fault == 6:
        kw[["transpose_a", "transpose_b"][int(rng.integers(0, 2))]] = [1, "yes", None, 0][
            int(rng.integers(0, 4))]
        expect, names = "error", ("transpose_a", "transpose_b")
    elif 7 <= fault <= 11:
        good = np.zeros((m, n), F32)
        if fault == 7:
            out = good
        elif fault == 8:
            out = np.zeros((m, n), np.float64)
            expect, names = "error", ("out",)
        elif fault == 9:
            out = np.zeros((m + 1, n), F32)
            expect, names = "error", ("out",)
        elif fault == 10:
            out = np.zeros((n, m), F32).T if m > 1 and n > 1 else good.copy()
            out.setflags(write=False)
            expect, names = "error", ("out",)
        else:  # out is one of the inputs (overlap) when shapes allow
            if not bf and phys["a"].shape == (m, n) and k:
                out = np.ascontiguousarray(phys["a"])
                args["a"] = out
                expect, names = "error", ("out",)
            else:
                out = good
        kw["out"] = out
    elif fault == 12:
        kw["alpha"] = 2.0
        expect, names = "error", ("alpha",)

    def call():
        return getattr(linalg, func)(args["a"], args["b"], **kw)

    def check(res):
        with np.errstate(all="ignore"):
            if k == 0:  # fp32.v1 section 8: k = 0 gives +0.0 (the oracle refuses it)
                exp = np.zeros((m, n), F32)
            elif bf:
                exp = O.gemm_bf16f32_v1(np.ascontiguousarray(ops["a"]),
                                        np.ascontiguousarray(ops["b"]))
            else:
                exp = O.gemm_fp32_v1(np.ascontiguousarray(ops["a"]),
                                     np.ascontiguousarray(ops["b"]))
        if out is not None:
            assert res is out, "out= was not returned"
        same_bits(res, exp, f"{func} {descr}")

    label = f"{func} m,k,n={m},{k},{n} ta={ta} tb={tb} {descr} fault={fault}"
    return Case(label, call, expect, check, names)


def gen_matmul(rng, tmp):
    return _gemm_fp32(rng, tmp, "matmul")


def gen_matmul_bf16(rng, tmp):
    return _gemm_fp32(rng, tmp, "matmul_bf16")


def gen_prepare(rng, tmp):
    """linalg.prepare then matmul / matmul_bf16 with the prepared b: the raw call's
    bits (the oracle's), or a refusal by name of a use it was not made for."""
    from mojolearn import linalg

    bf = rng.random() < 0.3
    func = "matmul_bf16" if bf else "matmul"
    m, k, n = dims(rng, 1), dims(rng, 0), dims(rng, 1)
    a = rand_f32(rng, (m, k))
    b = rand_f32(rng, (k, n))
    ops = {"a": a, "b": O.to_bf16(b) if bf else b}
    lay = int(rng.integers(0, 3))
    ta, tb = lay == 2, lay == 1
    pa = np.ascontiguousarray(ops["a"].T) if ta else ops["a"]
    pb = np.ascontiguousarray(ops["b"].T) if tb else ops["b"]
    src, how = layout(rng, pb)
    kw = {"transpose_a": True} if ta else {}
    use_tb = tb
    fault = int(rng.integers(0, 16))  # 9..15: valid
    expect, names = "ok", ()
    prep_kw = {"transpose_b": tb}
    if fault == 1:
        src = bad_dtype(rng, np.asarray(pb), [F32, np.uint16])
        expect, names = "error", ("b",)
    elif fault == 2:
        src = np.asarray(pb).reshape(-1)
        expect, names = "error", ("b",)
    elif fault == 3:
        prep_kw["transpose_b"] = [1, "yes", None][int(rng.integers(0, 3))]
        expect, names = "error", ("transpose_b",)
    elif fault == 4:
        prep_kw["transpose_a"] = True
        expect, names = "error", ("transpose_a",)
    elif fault == 5 and not ta:
        use_tb = not tb
        expect, names = "error", ("transpose_b",)
    elif fault == 6:
        func = "matmul" if bf else "matmul_bf16"
        expect, names = "error", ("prepared for",)
    elif fault == 7:
        pa = np.concatenate([np.asarray(pa), np.zeros((np.asarray(pa).shape[0], 1), F32)], axis=1) \
            if not ta else np.concatenate([np.asarray(pa), np.zeros((1, m), F32)], axis=0)
        expect, names = "error", ("inner dimensions", "k =")
    elif fault == 8:
        expect, names = "error", ("released",)
    if use_tb:
        kw["transpose_b"] = True

    def call():
        p = linalg.prepare(src, **prep_kw)
        if fault == 8:
            p.release()
        return getattr(linalg, func)(pa, p, **kw)

    def check(res):
        with np.errstate(all="ignore"):
            if k == 0:
                exp = np.zeros((m, n), F32)
            elif bf:
                exp = O.gemm_bf16f32_v1(np.ascontiguousarray(ops["a"]), np.ascontiguousarray(ops["b"]))
            else:
                exp = O.gemm_fp32_v1(np.ascontiguousarray(ops["a"]), np.ascontiguousarray(ops["b"]))
        same_bits(res, exp, f"prepare+{func} {how}")

    label = f"prepare+{func} m,k,n={m},{k},{n} ta={ta} tb={tb} b:{how} fault={fault}"
    return Case(label, call, expect, check, names)


def _gemm_int(rng, tmp, func):
    from mojolearn import linalg

    p15 = func == "matmul_int15"
    quant = O.quantize_int15 if p15 else O.quantize_int8
    m, k, n = dims(rng, 1), dims(rng, 1), dims(rng, 1)
    a = rand_f32(rng, (m, k))
    b = rand_f32(rng, (n, k))
    with np.errstate(all="ignore"):
        a[~np.isfinite(a)] = 1.0  # the quantizer's domain is finite values
        b[~np.isfinite(b)] = -2.0
    ops, descr = {}, []
    for name, x in (("a", a), ("b", b)):
        if rng.random() < 0.5:
            parts = [layout(rng, np.ascontiguousarray(p))[0] for p in quant(x)]
            ops[name] = tuple(parts)
            descr.append(f"{name}:tuple")
        else:
            v, how = layout(rng, x)
            ops[name] = v
            descr.append(f"{name}:{how}")
    kw = {}
    fault = int(rng.integers(0, 12))
    expect, names = "ok", ()
    which = "a" if rng.random() < 0.5 else "b"
    x = a if which == "a" else b
    if fault == 1:  # wrong tuple length
        q = list(quant(x))
        ops[which] = tuple(q[:-1]) if rng.random() < 0.5 else tuple(q + [q[-1]])
        expect, names = "error", (which,)
    elif fault == 2:  # a plane of the wrong dtype
        q = list(quant(x))
        q[0] = q[0].astype([np.int16, np.uint8, F32][int(rng.integers(0, 3))])
        ops[which] = tuple(q)
        expect, names = "error", (f"{which}[0]",)
    elif fault == 3:  # exponents of the wrong length / dtype / rank
        q = list(quant(x))
        e = q[-1]
        q[-1] = [np.concatenate([e, e[:1]]), e.astype(np.int64), e[None], e.astype(F32)][
            int(rng.integers(0, 4))]
        ops[which] = tuple(q)
        expect, names = "error", (which,)
    elif fault == 4 and p15:  # hi and lo planes differ
        hi, lo, e = quant(x)
        ops[which] = (hi, np.zeros((hi.shape[0], hi.shape[1] + 1), np.int8), e)
        expect, names = "error", (which,)
    elif fault == 5:  # k differs
        other = "b" if which == "a" else "a"
        x2 = rand_f32(rng, ((m if other == "a" else n), k + 1))
        with np.errstate(all="ignore"):
            x2[~np.isfinite(x2)] = 0.0
        ops[other] = x2
        expect, names = "error", ("k",)
    elif fault == 6:  # k over the domain, as a broadcast operand (no copy may happen)
        kbig = O.INT15_MAX_K + 1 if p15 else O.INT8_MAX_K + 1
        big = np.broadcast_to(F32(1.0), (2, kbig))
        ops = {"a": big, "b": big}
        expect, names = "error", ("rule",)
    elif fault == 7:
        ops[which] = NOT_BUFFERS[int(rng.integers(0, len(NOT_BUFFERS)))]
        expect, names = "error", (which,)
    elif fault == 8:
        ops[which] = bad_dtype(rng, x, [F32])
        expect, names = "error", (which,)
    elif fault == 9:
        kw["transpose_b"] = True
        expect, names = "error", ("transpose_b",)
    elif fault == 10:
        kw["out"] = [np.zeros((m, n), np.float64), np.zeros((m, n + 1), F32),
                     np.zeros((n, m), F32).T][int(rng.integers(0, 3))]
        expect, names = "error", ("out",)
        if kw["out"].flags.c_contiguous and kw["out"].shape == (m, n) and \
                kw["out"].dtype == F32:  # a (1, 1) transpose is still contiguous
            expect = "ok"
    elif fault == 11:
        kw["out"] = np.full((m, n), np.nan, F32)

    def call():
        return getattr(linalg, func)(ops["a"], ops["b"], **kw)

    def check(res):
        with np.errstate(all="ignore"):
            exp = O.gemm_int15_f32(a, b) if p15 else O.gemm_int8_f32(a, b)
        if "out" in kw:
            assert res is kw["out"]
        same_bits(res, exp, f"{func} {descr}")

    label = f"{func} m,k,n={m},{k},{n} {descr} fault={fault} on {which}"
    return Case(label, call, expect, check, names)


def gen_matmul_int8(rng, tmp):
    return _gemm_int(rng, tmp, "matmul_int8")


def gen_matmul_int15(rng, tmp):
    return _gemm_int(rng, tmp, "matmul_int15")


# ---------------------------------------------------------------- linalg converters


def _any_shape(rng, rank=None):
    r = int(rng.integers(0, 4)) if rank is None else rank
    return tuple(dims(rng, 0, 6) for _ in range(r))


def _converter(rng, func, arg, make, allowed, oracle_fn, rank=None, extra=()):
    """A one-input converter: valid input in a random layout, or a fault."""
    from mojolearn import linalg

    x = make(rng, _any_shape(rng, rank))
    v, how = layout(rng, x)
    fault = int(rng.integers(0, 6))
    expect, names = "ok", ()
    if fault == 1:
        v = bad_dtype(rng, x, allowed)
        expect, names = "error", (arg,)
    elif fault == 2:
        v = NOT_BUFFERS[int(rng.integers(0, len(NOT_BUFFERS)))]
        expect, names = "error", (arg,)
    elif fault == 3 and rank is not None:
        v = x.reshape(-1) if rank != 1 else x[None]
        expect, names = "error", (arg,)
    elif fault == 4 and x.ndim and x.size:
        v = np.broadcast_to(x.reshape(-1)[:1].reshape((1,) * x.ndim), x.shape)
        x = np.array(v)
        how = "broadcast"

    def call():
        return getattr(linalg, func)(v, *extra)

    def check(res):
        exp = oracle_fn(x)
        if isinstance(exp, tuple):
            assert isinstance(res, tuple) and len(res) == len(exp)
            for r, e in zip(res, exp):
                same_bits(r, e, func)
        else:
            same_bits(res, exp, func)

    return Case(f"{func} shape={x.shape} {how} fault={fault}", call, expect, check, names)


def _u16(rng, shape):
    return rng.integers(0, 1 << 16, size=shape).astype(np.uint16)


def gen_to_bf16(rng, tmp):
    return _converter(rng, "to_bf16", "x", rand_f32, [F32], O.to_bf16)


def gen_from_bf16(rng, tmp):
    return _converter(rng, "from_bf16", "bits", _u16, [np.uint16], O.from_bf16)


def _finite(rng, shape):
    x = rand_f32(rng, shape)
    x[~np.isfinite(x)] = 0.5
    return x


def gen_quantize_int8(rng, tmp):
    return _converter(rng, "quantize_int8", "x", _finite, [F32], O.quantize_int8, rank=2)


def gen_quantize_int15(rng, tmp):
    return _converter(rng, "quantize_int15", "x", _finite, [F32], O.quantize_int15, rank=2)


def _dequant(rng, tmp, p15):
    from mojolearn import linalg

    func = "dequantize_int15" if p15 else "dequantize_int8"
    m, k = dims(rng, 0, 6), dims(rng, 0, 6)
    q = list((O.quantize_int15 if p15 else O.quantize_int8)(_finite(rng, (m, k))))
    q[-1] = q[-1] + rng.integers(-140, 140, size=q[-1].shape).astype(np.int32)  # any exponent
    pnames = ["hi", "lo", "exponents"] if p15 else ["codes", "exponents"]
    vals = [layout(rng, p)[0] for p in q]
    fault = int(rng.integers(0, 5))
    expect, names = "ok", ()
    i = int(rng.integers(0, len(q)))
    if fault == 1:
        vals[i] = bad_dtype(rng, q[i], [q[i].dtype])
        expect, names = "error", (pnames[i],)
    elif fault == 2:
        vals[i] = q[i].reshape(-1) if q[i].ndim == 2 else q[i][None]
        expect, names = "error", (pnames[i],)
    elif fault == 3:
        e = q[-1]
        vals[-1] = np.concatenate([e, np.zeros(1, np.int32)])
        expect, names = "error", ("exponents",)
    elif fault == 4 and p15:
        vals[1] = np.zeros((m, k + 1), np.int8)
        expect, names = "error", ("hi", "lo")

    def call():
        return getattr(linalg, func)(*vals)

    def check(res):
        same_bits(res, (O.dequantize_int15 if p15 else O.dequantize_int8)(*q), func)

    return Case(f"{func} m,k={m},{k} fault={fault} on {pnames[i]}", call, expect, check, names)


def gen_dequantize_int8(rng, tmp):
    return _dequant(rng, tmp, False)


def gen_dequantize_int15(rng, tmp):
    return _dequant(rng, tmp, True)


# ---------------------------------------------------------------- lowbit


def _cyclic():
    l = []
    l.append(l)
    return l


def _deep(n=200):
    d = [1.0]
    for _ in range(n):
        d = [d]
    return d


HOSTILE_TENSORS = [
    ("cyclic list", _cyclic),
    ("deep list", _deep),
    ("ragged list", lambda: [[1.0, 2.0], [3.0]]),
    ("huge int", lambda: [[10 ** 400]]),
    ("strings", lambda: [["a", "b"]]),
    ("bools", lambda: [[True, False]]),
    ("float64", lambda: np.ones((2, 2))),
    ("None", lambda: None),
    ("object", lambda: object()),
]


def _weight_value(rng, shape=None):
    """A valid float32 tensor (random rank and layout, sometimes nested lists)
    and its logical values."""
    shape = _any_shape(rng) if shape is None else shape
    x = rand_f32(rng, shape)
    if rng.random() < 0.15 and x.ndim >= 1 and x.size:  # (lists of nothing lose dims)
        x = _finite(rng, shape)
        return x.tolist(), x, "lists"
    v, how = layout(rng, x)
    return v, x, how


def _packed_expect(x, fmt):
    with np.errstate(all="ignore"):
        if fmt == "bfloat16":
            return ("bfloat16", O.to_bf16(x))
        if fmt == "int8":
            return ("int8",) + tuple(O.quantize_int8(x))
    return ("float32", x)


def _check_packed(res, exp):
    from mojolearn import lowbit

    fmt = exp[0]
    if fmt == "float32":
        assert not lowbit.is_packed(res)
        same_bits(res, exp[1], "float32 copy")
    elif fmt == "bfloat16":
        assert isinstance(res, lowbit.BF16Weight)
        same_bits(res.bits, exp[1], "bf16 bits")
    else:
        assert isinstance(res, lowbit.Int8Weight)
        same_bits(res.codes, exp[1], "int8 codes")
        same_bits(res.exponents, exp[2], "int8 exponents")


def gen_pack_one(rng, tmp):
    from mojolearn import lowbit

    fmt = lowbit.FORMATS[int(rng.integers(0, 3))]
    v, x, how = _weight_value(rng, (dims(rng, 0, 6), dims(rng, 0, 6)))
    if fmt == "int8":
        x[~np.isfinite(x)] = 0.25
        v = x.tolist() if how == "lists" else layout(rng, x)[0]
    fault = int(rng.integers(0, 6))
    expect, names = "ok", ()
    if fault == 1:
        label, mk = HOSTILE_TENSORS[int(rng.integers(0, len(HOSTILE_TENSORS)))]
        v, how = mk(), label
        expect, names = "error", ("weight",)
    elif fault == 2:
        fmt = ["int4", None, 8, "Float32", ""][int(rng.integers(0, 5))]
        expect, names = "error", ("fmt",)
    elif fault == 3:
        v = rand_f32(rng, (3,)) if rng.random() < 0.5 else rand_f32(rng, (2, 2, 2))
        expect, names = "error", ("weight",)

    def call():
        return lowbit.pack_one(v, fmt)

    return Case(f"pack_one {fmt} {how} shape={x.shape} fault={fault}", call, expect,
                lambda r: _check_packed(r, _packed_expect(x, fmt)), names)


def _packed(rng, fmt, shape):
    from mojolearn import lowbit

    x = _finite(rng, shape)
    if fmt == "bfloat16":
        return lowbit.BF16Weight(layout(rng, O.to_bf16(x))[0]), O.from_bf16(O.to_bf16(x))
    c, e = O.quantize_int8(x)
    return lowbit.Int8Weight(layout(rng, c)[0], layout(rng, e)[0]), O.dequantize_int8(c, e)


def gen_materialize_one(rng, tmp):
    from mojolearn import lowbit

    r = rng.random()
    expect, names = "ok", ()
    if r < 0.4:
        fmt = ["bfloat16", "int8"][int(rng.integers(0, 2))]
        v, exp = _packed(rng, fmt, (dims(rng, 0, 6), dims(rng, 0, 6)))
        how = fmt
    elif r < 0.8:
        v, exp, how = _weight_value(rng)
    else:
        label, mk = HOSTILE_TENSORS[int(rng.integers(0, len(HOSTILE_TENSORS)))]
        v, exp, how = mk(), None, label
        expect, names = "error", ("weight",)

    return Case(f"materialize_one {how}", lambda: lowbit.materialize_one(v), expect,
                lambda res: same_bits(res, exp, "materialize_one"), names)


def _weights_dict(rng, n=None):
    """{name: tensor} with random ranks and kinds, and the expected float32 values."""
    n = int(rng.integers(0, 4)) if n is None else n
    d, exp = {}, {}
    for i in range(n):
        name = ["w", "bias", "layer.0.q", "é", " ", "a/b"][i % 6] + str(i)
        r = rng.random()
        if r < 0.2:
            d[name], exp[name] = _packed(rng, "bfloat16", (dims(rng, 0, 5), dims(rng, 0, 5)))
        elif r < 0.4:
            d[name], exp[name] = _packed(rng, "int8", (dims(rng, 0, 5), dims(rng, 0, 5)))
        else:
            v, x, _ = _weight_value(rng)
            d[name], exp[name] = v, x
    return d, exp


def gen_pack(rng, tmp):
    from mojolearn import lowbit

    fmt = lowbit.FORMATS[int(rng.integers(0, 3))]
    d, exp = _weights_dict(rng)
    # int8 packing is checked on finite values only (as pack_one above)
    for k in list(d):
        if fmt == "int8" and not lowbit.is_packed(d[k]) and np.asarray(exp[k]).ndim == 2:
            x = np.asarray(exp[k]).copy()
            x[~np.isfinite(x)] = 0.25
            d[k], exp[k] = layout(rng, x)[0], x
    fault = int(rng.integers(0, 5))
    expect, names = "ok", ()
    if fault == 1:
        label, mk = HOSTILE_TENSORS[int(rng.integers(0, len(HOSTILE_TENSORS)))]
        d["bad"] = mk()
        expect, names = "error", ("weights['bad']",)
    elif fault == 2:
        d = [list(d.items()), None, "w", 3][int(rng.integers(0, 4))]
        expect, names = "error", ("weights",)
    elif fault == 3:
        fmt = ["int4", None, "BF16"][int(rng.integers(0, 3))]
        expect, names = "error", ("fmt",)

    def check(res):
        assert isinstance(res, dict) and list(res) == list(d)
        for k, v in res.items():
            x = np.asarray(exp[k])
            if lowbit.is_packed(d[k]) and d[k].format == fmt:
                want = ("bfloat16", np.asarray(d[k].bits)) if fmt == "bfloat16" else \
                    ("int8", np.asarray(d[k].codes), np.asarray(d[k].exponents))
                _check_packed(v, want)
            elif x.ndim == 2:
                _check_packed(v, _packed_expect(x, fmt))
            else:
                same_bits(v, x, f"pack passes {k!r} through")

    return Case(f"pack {fmt} fault={fault} n={len(d) if isinstance(d, dict) else d!r}",
                lambda: lowbit.pack(d, fmt), expect, check, names)


def gen_unpack(rng, tmp):
    from mojolearn import lowbit

    d, exp = _weights_dict(rng)
    kinds = {v.format for v in d.values() if lowbit.is_packed(v)}
    expect, names = "ok", ()
    if len(kinds) > 1:
        expect, names = "error", ("format",)
    fault = int(rng.integers(0, 4))
    if fault == 1:
        label, mk = HOSTILE_TENSORS[int(rng.integers(0, len(HOSTILE_TENSORS)))]
        d["bad"] = mk()
        expect, names = "error", ("weights['bad']", "mixes")
    elif fault == 2:
        d = [None, [1, 2], "w"][int(rng.integers(0, 3))]
        expect, names = "error", ("weights",)
    entry = ["unpack", "materialize"][int(rng.integers(0, 2))]

    def check(res):
        out, fmt = res
        assert fmt == (kinds.pop() if kinds else "float32")
        for k, v in out.items():
            same_bits(v, exp[k], f"unpack {k!r}")

    return Case(f"{entry} kinds={sorted(kinds)} fault={fault}",
                lambda: getattr(lowbit, entry)(d), expect, check, names)


def gen_format_of(rng, tmp):
    from mojolearn import lowbit

    d, _ = _weights_dict(rng)
    kinds = {v.format for v in d.values() if lowbit.is_packed(v)}
    expect, names = ("error", ("weights",)) if len(kinds) > 1 else ("ok", ())
    if rng.random() < 0.2:
        d, expect, names = [None, 3, [("w", 1)]][int(rng.integers(0, 3))], "error", ("weights",)

    def check(res):
        assert res == (next(iter(kinds)) if kinds else "float32")
        assert lowbit.is_packed(res) is False

    return Case(f"format_of kinds={sorted(kinds)}", lambda: lowbit.format_of(d), expect, check,
                names)


def gen_widen_bf16(rng, tmp):
    from mojolearn import lowbit

    bits = _u16(rng, _any_shape(rng))
    v, how = layout(rng, bits)
    expect, names = "ok", ()
    r = rng.random()
    if r < 0.2:
        v, how = lowbit.BF16Weight(np.ascontiguousarray(bits.reshape(bits.size, 1))), "weight"
        bits = bits.reshape(bits.size, 1)
    elif r < 0.4:
        v, how, expect, names = bad_dtype(rng, bits, [np.uint16]), "bad dtype", "error", ("bits",)
    elif r < 0.5:
        v, how, expect, names = NOT_BUFFERS[int(rng.integers(0, len(NOT_BUFFERS)))], "junk", \
            "error", ("bits",)
    return Case(f"widen_bf16 {how} shape={bits.shape}", lambda: lowbit.widen_bf16(v), expect,
                lambda res: same_bits(res, O.from_bf16(bits), "widen_bf16"), names)


def gen_weight_types(rng, tmp):
    from mojolearn import lowbit

    m, k = dims(rng, 0, 6), dims(rng, 0, 6)
    codes = rng.integers(-127, 128, size=(m, k)).astype(np.int8)
    exps = rng.integers(-20, 20, size=m).astype(np.int32)
    bits = _u16(rng, (m, k))
    r = int(rng.integers(0, 8))
    expect, names = "ok", ()
    if r == 0:
        args, cls = (layout(rng, bits)[0],), lowbit.BF16Weight
    elif r == 1:
        args, cls = (layout(rng, codes)[0], layout(rng, exps)[0]), lowbit.Int8Weight
    elif r == 2:
        args, cls = (bad_dtype(rng, bits, [np.uint16]),), lowbit.BF16Weight
        expect, names = "error", ("bits",)
    elif r == 3:
        args, cls = (bits.reshape(-1),), lowbit.BF16Weight
        expect, names = "error", ("bits",)
    elif r == 4:
        args, cls = (codes, np.concatenate([exps, np.zeros(1, np.int32)])), lowbit.Int8Weight
        expect, names = "error", ("exponents",)
    elif r == 5:
        args, cls = (codes.astype(np.int16), exps), lowbit.Int8Weight
        expect, names = "error", ("codes",)
    elif r == 6:
        args, cls = (codes, exps.astype(np.int64)), lowbit.Int8Weight
        expect, names = "error", ("exponents",)
    else:
        args, cls = (codes.tolist(), exps), lowbit.Int8Weight
        expect, names = "error", ("codes",)

    def check(w):
        assert w.shape == (m, k)
        if cls is lowbit.BF16Weight:
            same_bits(w.bits, bits)
        else:
            same_bits(w.codes, codes)
            same_bits(w.exponents, exps)
        assert lowbit.is_packed(w)

    return Case(f"{cls.__name__} case={r} m,k={m},{k}", lambda: cls(*args), expect, check, names)


# ---------------------------------------------------------------- checkpoint


def _special_file(rng, tmp):
    """A FIFO, a socket-free special file, or (as root) a device node made in tmp.
    Never a real device: a broken save would replace it."""
    p = os.path.join(tmp, f"special{int(rng.integers(1 << 30))}")
    if os.geteuid() == 0 and rng.random() < 0.5:
        try:
            os.mknod(p, stat.S_IFCHR | 0o666, os.makedev(1, 3))
            return p, "char device"
        except OSError:
            pass
    os.mkfifo(p)
    return p, "FIFO"


def _hostile_path(rng, tmp, for_save):
    """(path, label, expect) for a hostile or unusual path."""
    good = os.path.join(tmp, f"c{int(rng.integers(1 << 30))}.safetensors")
    k = int(rng.integers(0, 12))
    if k == 0:
        return good.encode(), "bytes", "error"
    if k == 1:
        return [None, 1.5, 3, ["x"]][int(rng.integers(0, 4))], "not a path", "error"
    if k == 2:
        return "", "empty", "error"
    if k == 3:
        return good[:-3] + "\0x", "NUL", "error"
    if k == 4:
        return tmp, "directory", "error"
    if k == 5:
        return os.path.join(tmp, "missing", "dir", "c.safetensors"), "missing folder", "error"
    if k == 6:
        p, what = _special_file(rng, tmp)
        return p, what, "error"
    if k == 7:
        a, b = good + ".l1", good + ".l2"
        os.symlink(b, a)
        os.symlink(a, b)
        return a, "link loop", "error"
    if k == 8:
        link = good + ".link"
        os.symlink(good, link)
        return link, "dangling link", ("ok" if for_save else "error")
    if k == 9:
        return os.path.join(tmp, "x" * 300 + ".safetensors"), "name too long", "error"
    if k == 10:
        f = good + ".file"
        open(f, "wb").close()
        return os.path.join(f, "c.safetensors"), "under a file", "error"
    from pathlib import Path

    return Path(good), "pathlib", ("ok" if for_save else "error")


def _expected_load(d, exp):
    from mojolearn import lowbit

    def check(ck):
        assert set(ck.weights) == set(d)
        for k, v in ck.weights.items():
            src = d[k]
            if isinstance(src, lowbit.BF16Weight):
                assert isinstance(v, lowbit.BF16Weight)
                same_bits(v.bits, np.asarray(src.bits))
            elif isinstance(src, lowbit.Int8Weight):
                assert isinstance(v, lowbit.Int8Weight)
                same_bits(v.codes, np.asarray(src.codes))
                same_bits(v.exponents, np.asarray(src.exponents))
            else:
                same_bits(v, np.asarray(exp[k], F32), f"tensor {k!r}")
    return check


def gen_checkpoint_save(rng, tmp):
    from mojolearn import checkpoint

    d, exp = _weights_dict(rng, int(rng.integers(1, 4)))
    path = os.path.join(tmp, f"c{int(rng.integers(1 << 30))}.safetensors")
    label, expect, names = "plain", "ok", ()
    profile = [None, "fp32_v1", "fixed15_v1"][int(rng.integers(0, 3))]
    r = int(rng.integers(0, 10))
    if r < 4:
        path, label, expect = _hostile_path(rng, tmp, True)
        names = ("path",) if label in ("bytes", "not a path", "empty", "NUL") else \
            (repr(os.fspath(path)) if isinstance(path, (str, os.PathLike)) else "path",)
    elif r == 4:
        hl, mk = HOSTILE_TENSORS[int(rng.integers(0, len(HOSTILE_TENSORS)))]
        d["bad"], label, expect, names = mk(), hl, "error", ("weights['bad']",)
    elif r == 5:
        d["x.int8_exponents"], label, expect, names = np.ones(2, F32), "reserved name", "error", (
            "x.int8_exponents",)
    elif r == 6:
        profile, label, expect, names = ["int8_v1", "fp32", 3][int(rng.integers(0, 3))], \
            "bad profile", "error", ("profile",)
    elif r == 7:
        d, label, expect, names = [[("w", 1)], None][int(rng.integers(0, 2))], "not a dict", \
            "error", ("weights",)
    elif r == 8:  # an existing file is replaced; a failed save keeps it
        checkpoint.save(path, {"old": np.zeros(2, F32)})
        label = "over an old file"

    def call():
        return checkpoint.save(path, d, numeric_profile=profile)

    def check(res):
        assert res is None
        ck = checkpoint.load(path)
        _expected_load(d, exp)(ck)
        assert ck.numeric_profile == (profile or "fp32_v1")

    return Case(f"checkpoint.save {label} profile={profile}", call, expect, check, names)


def _valid_file(rng, tmp):
    from mojolearn import checkpoint

    d, exp = _weights_dict(rng, int(rng.integers(1, 4)))
    path = os.path.join(tmp, f"c{int(rng.integers(1 << 30))}.safetensors")
    checkpoint.save(path, d)
    return path, d, exp


def gen_checkpoint_load(rng, tmp):
    from mojolearn import checkpoint

    r = int(rng.integers(0, 9))
    expect, names, check = "ok", (), None
    if r < 2:
        path, d, exp = _valid_file(rng, tmp)
        label, check = "valid", _expected_load(d, exp)
    elif r == 2:
        path, label, expect = _hostile_path(rng, tmp, False)
        names = ("path",) if label in ("bytes", "not a path", "empty", "NUL") else \
            (repr(os.fspath(path)) if isinstance(path, (str, os.PathLike)) else "path",)
    else:
        path, d, exp = _valid_file(rng, tmp)
        data = bytearray(open(path, "rb").read())
        hlen = int.from_bytes(data[:8], "little")
        if r == 3:
            cut = int(rng.integers(0, len(data)))
            data = data[:cut]
            label, expect = f"truncated at {cut}/{len(data)}", "error" if cut < 8 + hlen else "any"
        elif r == 4:
            for _ in range(int(rng.integers(1, 6))):
                i = int(rng.integers(0, len(data)))
                data[i] = int(rng.integers(0, 256))
            label, expect = "bytes flipped", "any"
        elif r == 5:
            big = [2 ** 63 - 1, 2 ** 40, len(data), 2 ** 64 - 1][int(rng.integers(0, 4))]
            data[:8] = big.to_bytes(8, "little")
            label, expect = f"huge header length {big}", "error"
        elif r == 6:
            hdr = [b"{", b"[]", b'{"w": 3}', b'{"w": {"dtype": "F64", "shape": [1], '
                   b'"data_offsets": [0, 8]}}', b'{"__metadata__": {"numeric_profile": "nope"}}',
                   b'{"w": {"dtype": "I8", "shape": [1, 1], "data_offsets": [0, 1]}}'][
                int(rng.integers(0, 6))]
            body = b"\0" * 8
            hdr = hdr + b" " * (-len(hdr) % 8)
            data = bytearray(len(hdr).to_bytes(8, "little") + hdr + body)
            label, expect = f"crafted header {bytes(hdr)[:40]!r}", "error"
        elif r == 7:
            data = bytearray(rng.integers(0, 256, size=int(rng.integers(0, 64))).astype(
                np.uint8).tobytes())
            label, expect = "random bytes", "error"
        else:
            data = bytearray()
            label, expect = "empty file", "error"
        with open(path, "wb") as f:
            f.write(bytes(data))
        names = (repr(path),)
    profile = None if rng.random() < 0.8 else ["fp32_v1", "fixed15_v1", "zzz"][
        int(rng.integers(0, 3))]
    if profile == "zzz":
        expect, names = "error", names + ("numeric_profile", "profile")
    elif profile == "fixed15_v1" and expect == "ok":
        expect, names = "error", ("fp32_v1",)

    def call():
        return checkpoint.load(path, numeric_profile=profile)

    return Case(f"checkpoint.load {label} profile={profile}", call, expect, check, names)


# ---------------------------------------------------------------- profiles, threads, env

HOSTILE_NAMES = ["fp32_v1", "fixed15_v1", " fp32_v1 ", "int8_v1", "fixed15_int8_attention_v1",
                 "FP32_V1", "", "x" * 5000, "\0", "é", None, 3, 2.5, b"fp32_v1", ["fp32_v1"],
                 {"a": 1}, "fp32_v1\n", "transformer", "inference", "training"]


def _pick(rng, seq):
    return seq[int(rng.integers(0, len(seq)))]


def gen_profiles(rng, tmp):
    """Every entry of mojolearn.profiles with hostile strings and types."""
    from mojolearn import profiles as P

    fam = _pick(rng, list(P.FAMILIES) + HOSTILE_NAMES)
    use = _pick(rng, list(P.USES) + HOSTILE_NAMES)
    name = _pick(rng, HOSTILE_NAMES)
    state = _pick(rng, [{}, {"numeric_profile": name}, None, [1], {"numeric_profile": 3}, "s"])
    what = "state"
    entries = {
        "resolve": (lambda: P.resolve(name, use=use, family=_pick(rng, [None, fam]))),
        "set_numeric_profile": (lambda: P.set_numeric_profile(name, use=use)),
        "numeric_profile": (lambda: P.numeric_profile(use)),
        "computes": (lambda: P.computes(name, fam)),
        "default_reaches": (lambda: P.default_reaches(name, fam)),
        "require_training": (lambda: P.require_training(what, name)),
        "measured": (lambda: P.measured(name, _pick(rng, [None, "cpu", "cuda", 3, "zz"]))),
        "state_field": (lambda: P.state_field(name)),
        "adopt_saved": (lambda: P.adopt_saved(state, _pick(rng, [None, name]), what, use)),
        "check_saved": (lambda: P.check_saved(state, name, what)),
        "profiles": (lambda: P.profiles()),
    }
    entry = _pick(rng, sorted(entries))
    f = entries[entry]

    def call():
        try:
            return f()
        finally:
            P._reset_for_tests()

    # any refusal names what it refused: the argument, its value or the table's names
    names = ("profile", "use", "family", "vendor", "state", "numeric_profile", "name", "what")
    return Case(f"profiles.{entry} name={name!r:.40} use={use!r:.20} fam={fam!r:.20}", call,
                "any", None, names)


def gen_threads(rng, tmp):
    import mojolearn

    n = _pick(rng, [1, 2, 3, 1024, 1025, 0, -1, 2 ** 31, 2 ** 63, 2 ** 64, 10 ** 400, 1.0,
                    True, "2", None, np.int64(2)])
    ok = isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= 1024

    def call():
        prev = mojolearn.get_num_threads()
        try:
            mojolearn.set_num_threads(n)
            c = mojolearn.linalg.matmul(np.ones((3, 5), F32), np.ones((5, 2), F32))
            return np.asarray(c).copy()
        finally:
            mojolearn.set_num_threads(prev)

    def check(res):
        assert (res == 5.0).all()

    return Case(f"set_num_threads({n!r:.30})", call, "ok" if ok else "error", check,
                ("set_num_threads",))


ENV_VALUES = ["1", "2", " 3 ", "0", "-1", "1025", "9223372036854775808", "9" * 5000, "abc",
              "2.5", "", "\t", "cpu", "gpu", "auto", "fp32_v1", "fixed15_v1", "int8_v1", "é",
              "1e3", "0x10"]


def gen_env(rng, tmp):
    """MOJOLEARN_NUM_THREADS / MOJOLEARN_DEVICE / MOJOLEARN_NUMERIC_PROFILE with
    hostile values; each is read once per process, so the module state is reset."""
    import mojolearn
    from mojolearn import _device, _threads, profiles as P

    var = _pick(rng, ["MOJOLEARN_NUM_THREADS", "MOJOLEARN_DEVICE", "MOJOLEARN_NUMERIC_PROFILE"])
    val = _pick(rng, ENV_VALUES)

    def call():
        old = os.environ.get(var)
        saved_n = _threads._n
        os.environ[var] = val
        _threads._n = None
        _device._reset_for_tests()
        P._reset_for_tests()
        try:
            c = mojolearn.linalg.matmul(np.ones((2, 3), F32), np.ones((3, 2), F32))
            if var == "MOJOLEARN_DEVICE":
                mojolearn.get_device()
            if var == "MOJOLEARN_NUMERIC_PROFILE":
                P.numeric_profile()
            return np.asarray(c).copy()
        finally:
            if old is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = old
            _threads._n = saved_n
            _device._reset_for_tests()
            P._reset_for_tests()

    def check(res):
        assert (res == 3.0).all()

    return Case(f"env {var}={val!r:.30}", call, "any", check, (var,))


# ---------------------------------------------------------------- the table

_TINY = {}


def _tiny_model(tmp):
    """A tiny random llama checkpoint written once per process (HF layout)."""
    if "path" not in _TINY:
        import json

        from safetensors.numpy import save_file
        cfg = dict(model_type="llama", vocab_size=23, hidden_size=16, intermediate_size=24,
                   num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                   rms_norm_eps=1e-5, rope_theta=10000.0, max_position_embeddings=16,
                   tie_word_embeddings=True, hidden_act="silu")
        r = np.random.default_rng(0)
        f = lambda *sh: (r.standard_normal(sh) * 0.3).astype(F32)  # noqa: E731
        w = {"model.embed_tokens.weight": f(23, 16), "model.norm.weight": 1 + f(16),
             "model.layers.0.input_layernorm.weight": 1 + f(16),
             "model.layers.0.post_attention_layernorm.weight": 1 + f(16),
             "model.layers.0.self_attn.q_proj.weight": f(16, 16),
             "model.layers.0.self_attn.k_proj.weight": f(8, 16),
             "model.layers.0.self_attn.v_proj.weight": f(8, 16),
             "model.layers.0.self_attn.o_proj.weight": f(16, 16),
             "model.layers.0.mlp.gate_proj.weight": f(24, 16),
             "model.layers.0.mlp.up_proj.weight": f(24, 16),
             "model.layers.0.mlp.down_proj.weight": f(16, 24)}
        import atexit
        import shutil
        import tempfile

        d = tempfile.mkdtemp(prefix="mlfuzz-model-")  # per process (a case's tmp is removed)
        atexit.register(shutil.rmtree, d, True)
        with open(os.path.join(d, "config.json"), "w") as fh:
            json.dump(cfg, fh)
        save_file(w, os.path.join(d, "model.safetensors"))
        _TINY.update(path=d, cfg=cfg, w=w)
    return _TINY


def gen_models_forward(rng, tmp):
    """CausalLM.forward / step under both profiles: valid ids give the oracle's logits,
    hostile ids (floats, bools, out of the vocabulary, wrong ranks, empty, huge ints,
    positions past max_positions, a foreign state) a refusal by name."""
    from mojolearn.models import CausalLM

    t = _tiny_model(tmp)
    prof = _pick(rng, ["fp32_v1", "fixed15_v1"])
    kind = int(rng.integers(0, 9))
    B, L = int(rng.integers(1, 4)), int(rng.integers(1, 9))
    ids = rng.integers(0, 23, size=(B, L))
    bad = {1: ids.astype(F32), 2: ids.astype(bool), 3: ids + 23, 4: -ids - 1,
           5: ids[None], 6: np.zeros((B, 0), np.int64), 7: [[2 ** 70]],
           8: rng.integers(0, 23, size=(1, 17))}

    def call():
        lm = CausalLM.load(t["path"], numeric_profile=prof)
        return lm.forward(bad.get(kind, ids))

    if kind == 0:
        from tests import model_oracle as MO

        def check(got):
            want = MO.forward(t["w"], t["cfg"], ids, prof)
            assert np.array_equal(np.asarray(got).view(np.uint32), want.view(np.uint32)) or \
                np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(
                    np.where(np.isnan(got), 0, got), np.where(np.isnan(want), 0, want))
        return Case(f"models.forward {prof} ids {B}x{L}", call, "ok", check)
    return Case(f"models.forward {prof} hostile ids kind={kind}", call, "error", None,
                ("ids", "token", "max_positions", "vocabulary", "integer"))


def gen_models_load(rng, tmp):
    """CausalLM.load on hostile paths, configs and files: a refusal by name or a model."""
    import json

    from mojolearn.models import CausalLM

    t = _tiny_model(tmp)
    d = os.path.join(str(tmp), f"m{int(rng.integers(0, 1 << 30))}")
    os.makedirs(d, exist_ok=True)
    cfg = dict(t["cfg"])
    kind = int(rng.integers(0, 8))
    if kind == 1:
        cfg[_pick(rng, ["rope_scaling", "sliding_window", "hidden_act", "model_type",
                        "num_key_value_heads", "head_dim", "rope_parameters"])] = _pick(
            rng, [{"type": "linear"}, 3, "gelu", "gpt2", 0, -1, None, {"rope_type": "yarn"}])
    with open(os.path.join(d, "config.json"), "w") as fh:
        fh.write("{broken" if kind == 2 else json.dumps(cfg))
    data = open(os.path.join(t["path"], "model.safetensors"), "rb").read()
    if kind == 3:
        data = data[: int(rng.integers(0, len(data)))]
    elif kind == 4:
        b = bytearray(data)
        for _ in range(8):
            b[int(rng.integers(0, len(b)))] = int(rng.integers(0, 256))
        data = bytes(b)
    elif kind == 5:
        data = (10 ** 15).to_bytes(8, "little") + data[8:]
    with open(os.path.join(d, "model.safetensors"), "wb") as fh:
        fh.write(data)
    path = {6: os.path.join(d, "missing"), 7: _pick(rng, [None, 3, b"x", ""])}.get(kind, d)
    return Case(f"models.load kind={kind}", lambda: CausalLM.load(path), "any", None,
                ("model", "config", "path", "tensor", "file", "rope", "model_type", "head",
                 "safetensors"))


ENTRIES = [
    ("linalg.matmul", gen_matmul),
    ("linalg.matmul_bf16", gen_matmul_bf16),
    ("linalg.prepare", gen_prepare),
    ("linalg.matmul_int8", gen_matmul_int8),
    ("linalg.matmul_int15", gen_matmul_int15),
    ("linalg.to_bf16", gen_to_bf16),
    ("linalg.from_bf16", gen_from_bf16),
    ("linalg.quantize_int8", gen_quantize_int8),
    ("linalg.quantize_int15", gen_quantize_int15),
    ("linalg.dequantize_int8", gen_dequantize_int8),
    ("linalg.dequantize_int15", gen_dequantize_int15),
    ("lowbit.pack_one", gen_pack_one),
    ("lowbit.pack", gen_pack),
    ("lowbit.unpack", gen_unpack),
    ("lowbit.materialize_one", gen_materialize_one),
    ("lowbit.format_of", gen_format_of),
    ("lowbit.widen_bf16", gen_widen_bf16),
    ("lowbit.BF16Weight/Int8Weight", gen_weight_types),
    ("checkpoint.save", gen_checkpoint_save),
    ("checkpoint.load", gen_checkpoint_load),
    ("profiles", gen_profiles),
    ("set_num_threads", gen_threads),
    ("env", gen_env),
    ("models.forward", gen_models_forward),
    ("models.load", gen_models_load),
]


# ---------------------------------------------------------------- the runner's self-test
# Only with MOJOLEARN_FUZZ_SELFTEST=1 (tests/test_fuzz.py): a case that kills the
# interpreter and entries whose answers break the rules, to see the runner catch them.


def _gen_crash(rng, tmp):
    import signal

    return Case("selftest crash", lambda: os.kill(os.getpid(), signal.SIGSEGV), "ok")


def _gen_wrong(rng, tmp):
    return Case("selftest bare Exception", lambda: (_ for _ in ()).throw(Exception("boom")),
                "error", None, ("x",))


def _gen_fine(rng, tmp):
    return Case("selftest fine", lambda: 1, "ok", lambda r: None)


SELFTEST_ENTRIES = [
    ("selftest.fine", _gen_fine),
    ("selftest.wrong", _gen_wrong),
    ("selftest.crash", _gen_crash),
    ("selftest.after_crash", _gen_fine),
]

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

    after           optional: called once the outcome passed (e.g. after a refusal: the
                    model and its state still give a fresh model's bits)

ADDING AN ENTRY: write ``def gen_x(rng, tmp) -> Case`` below and add
``("area.x", gen_x)`` to ``ENTRIES``; the runner and the tests pick it up from
the table (tests/test_fuzz.py checks that every public entry of linalg, lowbit,
checkpoint, mojolearn.models and mojolearn.training has one).
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
    # after(): run once the call's outcome passed; raises AssertionError when the object
    # the call was handed (a model, a state, a file) is not as a fresh one would be
    after: Callable | None = None


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
        from mojolearn._data.array import empty

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


def _ksplit_valid(rng, k, prof):
    """(start, stop) ranges covering [0, k): leaf-aligned for fp32.v1, anywhere for the
    integer profiles."""
    from mojolearn import linalg

    if prof == "fp32.v1":
        L = linalg.leaf_size(k)
        n = -(-k // L)
        p = int(rng.integers(1, min(n, 5) + 1))
        cuts = sorted(int(c) for c in rng.choice(np.arange(1, n), p - 1, replace=False)) if p > 1 else []
        b = [0] + [c * L for c in cuts] + [k]
    else:
        p = int(rng.integers(1, min(k, 5) + 1))
        cuts = sorted(int(c) for c in rng.choice(np.arange(1, k), p - 1, replace=False)) if p > 1 else []
        b = [0] + cuts + [k]
    return list(zip(b[:-1], b[1:]))


def gen_ksplit(rng, tmp):
    """linalg.matmul_part / matmul_int8_part / matmul_int15_part, fold_parts,
    PartialProduct, k_split and leaf_size: parts of random valid splits in random
    layouts fold to the oracle's bits (rules 6.7, L-8); faults (ranges off the leaf
    boundaries, bad k / k_start, overlaps, gaps, mixed parts, hostile values) are
    refused by name."""
    from mojolearn import linalg

    prof = _pick(rng, ["fp32.v1", "int8i32.v1", "int15i64.v1"])
    m, n = dims(rng, 1, 5), dims(rng, 1, 5)
    k = int(_pick(rng, [1, 2, 100, 128, 129, 300, 513, 700]))
    a, b = rand_f32(rng, (m, k)), rand_f32(rng, (n, k))
    if prof != "fp32.v1":
        with np.errstate(all="ignore"):
            a[~np.isfinite(a)] = 1.0
            b[~np.isfinite(b)] = -2.0
    ranges = _ksplit_valid(rng, k, prof)
    p15 = prof == "int15i64.v1"
    q = linalg.quantize_int15 if p15 else linalg.quantize_int8
    fn = {"fp32.v1": linalg.matmul_part, "int8i32.v1": linalg.matmul_int8_part,
          "int15i64.v1": linalg.matmul_int15_part}[prof]

    def make(s, e, kk=k):
        if prof == "fp32.v1":
            return fn(layout(rng, a[:, s:e])[0], layout(rng, np.ascontiguousarray(b[:, s:e].T))[0],
                      k=kk, k_start=s)
        am = np.max([np.asarray(linalg.row_absmax(a[:, x:y])) for x, y in ranges], axis=0)
        bm = np.max([np.asarray(linalg.row_absmax(b[:, x:y])) for x, y in ranges], axis=0)
        return fn(q(a[:, s:e], absmax=am), q(b[:, s:e], absmax=bm), k=kk, k_start=s)

    def exp():
        with np.errstate(all="ignore"):
            if prof == "fp32.v1":
                return O.gemm_fp32_v1(a, np.ascontiguousarray(b.T))
            return O.gemm_int15_f32(a, b) if p15 else O.gemm_int8_f32(a, b)

    fault = int(rng.integers(0, 10))
    label = f"{prof} m,n,k={m},{n},{k} ranges={ranges} fault={fault}"
    if fault <= 3:
        def call():
            parts = [make(s, e) for s, e in ranges]
            if rng.random() < 0.3:  # travelled: rebuilt from the values
                parts = [linalg.PartialProduct(p.profile, np.asarray(p.values), k=p.k,
                                               k_start=p.k_start, k_stop=p.k_stop,
                                               **({"leaf": p.leaf} if p.leaf else
                                                  {"a_exps": p.a_exps, "b_exps": p.b_exps}))
                         for p in parts]
            return linalg.fold_parts([parts[i] for i in rng.permutation(len(parts))])
        return Case(label, call, "ok", lambda r: same_bits(r, exp(), label))
    if fault == 4:  # k, k_start of the wrong type or value
        bad = _pick(rng, [True, 2.0, -1, None, "3", 10 ** 30])
        which = _pick(rng, ["k", "k_start"])
        kw = {"k": k, "k_start": 0, which: bad}
        ops = (a, np.ascontiguousarray(b.T)) if prof == "fp32.v1" else (q(a), q(b))
        return Case(label + f" {which}={bad!r}", lambda: fn(*ops, **kw), "error", None,
                    (which, "k"))
    if fault == 5:  # a range the operands do not fit / off the leaf boundaries
        if prof == "fp32.v1" and k > 128:
            s = int(rng.integers(1, 128))
            return Case(label + f" start {s}", lambda: make(s, k), "error", None,
                        ("leaf boundaries",))
        ops = (a, np.ascontiguousarray(b.T)) if prof == "fp32.v1" else (q(a), q(b))
        return Case(label + " past k", lambda: fn(*ops, k=k, k_start=1), "error", None,
                    ("k",))
    if fault == 6:  # a gap or an overlap
        if len(ranges) < 2:
            return Case(label + " short", lambda: linalg.fold_parts([make(*ranges[0])][:0]),
                        "error", None, ("parts",))
        i = int(rng.integers(0, len(ranges)))
        lst = ranges[:i] + ranges[i + 1:] if rng.random() < 0.5 else ranges + [ranges[i]]
        return Case(label + f" parts {lst}", lambda: linalg.fold_parts([make(*r) for r in lst]),
                    "error", None, ("parts",))
    if fault == 7:  # not parts
        obj = _pick(rng, [None, 3, "parts", [None], [a], {"a": 1}])
        return Case(label + f" parts={type(obj).__name__}", lambda: linalg.fold_parts(obj),
                    "error", None, ("parts",))
    if fault == 8:  # values that do not match
        v = _pick(rng, [np.zeros((7, m, n), F32), np.zeros((m, n), np.float64), "x",
                        np.zeros((m, n, 2), np.int64)])
        kw = {"leaf": linalg.leaf_size(k)} if prof == "fp32.v1" else {"a_exps": np.zeros(m, np.int32),
                                                       "b_exps": np.zeros(n, np.int32)}
        kw = {x: y for x, y in kw.items() if y is not None}
        return Case(label + " values", lambda: linalg.PartialProduct(prof, v, k=k, k_start=0,
                                                                     k_stop=k, **kw),
                    "error", None, ("values", "nodes"))
    # k_split / leaf_size with hostile arguments or too many parts
    bad = _pick(rng, [0, -3, 1.5, None, True])
    f = _pick(rng, ["k_split", "leaf_size", "k_split parts"])
    if f == "leaf_size":
        return Case(label + f" leaf_size({bad!r})", lambda: linalg.leaf_size(bad), "error", None,
                    ("k",))
    if f == "k_split":
        return Case(label + f" k_split({bad!r}, 2)", lambda: linalg.k_split(bad, 2), "error",
                    None, ("k",))
    return Case(label + " k_split too many", lambda: linalg.k_split(k, k + 1, profile=prof),
                "error", None, ("parts",))


def gen_row_absmax(rng, tmp):
    """linalg.row_absmax and the quantizers' absmax=: the quantizers' absmax of each row
    (NaN, subnormals not counted); with absmax= the codes of the row with that value
    appended (rule L-8), by the oracle; hostile absmax refused by name."""
    from mojolearn import linalg

    m, k = dims(rng, 1, 6), dims(rng, 1, 30)
    x = rand_f32(rng, (m, k))
    p15 = rng.random() < 0.5
    qf = linalg.quantize_int15 if p15 else linalg.quantize_int8
    oq = O.quantize_int15 if p15 else O.quantize_int8
    fault = int(rng.integers(0, 6))
    label = f"m,k={m},{k} int{'15' if p15 else '8'} fault={fault}"
    if fault == 0:
        def check(r):
            with np.errstate(all="ignore"):
                d = O.daz(x)
                mag = np.abs(d)
                mag[np.isnan(mag) | (mag == 0)] = 0
                want = mag.max(axis=1).astype(F32)
            same_bits(r, want, label)
        return Case(label + " row_absmax", lambda: linalg.row_absmax(layout(rng, x)[0]), "ok",
                    check)
    if fault <= 3:
        am = rand_f32(rng, (m,))
        ext = np.concatenate([x, am[:, None]], axis=1)

        def check(r):
            want = oq(ext)
            for got, w in zip(r[:-1], want[:-1]):
                assert np.array_equal(np.asarray(got), np.asarray(w)[:, :k]), label
            assert np.array_equal(np.asarray(r[-1]), np.asarray(want[-1])), label
        return Case(label + " absmax=", lambda: qf(layout(rng, x)[0], absmax=layout(rng, am)[0]),
                    "ok", check)
    if fault == 4:
        am = _pick(rng, [np.zeros(m + 1, F32), np.zeros(m, np.float64), np.zeros((m, 1), F32),
                         "x"])
        return Case(label + " bad absmax", lambda: qf(x, absmax=am), "error", None, ("absmax",))
    return Case(label + " bad x", lambda: linalg.row_absmax(bad_dtype(rng, x, [F32])), "error",
                None, ("x",))


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
    from mojolearn._table import profiles as PT

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
            PT._reset_for_tests()

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
    from mojolearn._core import device as _device, threads as _threads
    from mojolearn import profiles as P
    from mojolearn._table import profiles as PT

    var = _pick(rng, ["MOJOLEARN_NUM_THREADS", "MOJOLEARN_DEVICE", "MOJOLEARN_NUMERIC_PROFILE"])
    val = _pick(rng, ENV_VALUES)

    def call():
        old = os.environ.get(var)
        saved_n = _threads._n
        os.environ[var] = val
        _threads._n = None
        _device._reset_for_tests()
        PT._reset_for_tests()
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
            PT._reset_for_tests()

    def check(res):
        assert (res == 3.0).all()

    return Case(f"env {var}={val!r:.30}", call, "any", check, (var,))


# ---------------------------------------------------------------- mojolearn.models
# Every public entry of mojolearn.models on tiny random models written here (one per
# process and variant). Valid input: the oracle's bits (tests/model_oracle.py) or a
# fresh model's bits for the same call. Bad input: a refusal by name, and then (the
# case's ``after``) the model and the state it was handed still give a fresh model's
# bits on the next valid call.

_MODEL_CFGS = {
    "a": dict(model_type="llama", vocab_size=23, hidden_size=16, intermediate_size=24,
              num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
              rms_norm_eps=1e-5, rope_theta=10000.0, max_position_embeddings=16,
              tie_word_embeddings=True, hidden_act="silu"),
    "b": dict(model_type="llama", vocab_size=29, hidden_size=16, intermediate_size=20,
              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              rms_norm_eps=1e-6, rope_theta=500.0, max_position_embeddings=16,
              tie_word_embeddings=False, hidden_act="silu"),
}
MAXPOS = 16  # both variants' max_position_embeddings
PROFILES = ("fp32_v1", "fixed15_v1")
FORMATS = ("float32", "bfloat16", "int8")
_TINY = {}


def _model_weights(cfg, seed):
    r = np.random.default_rng(seed)
    d, ff, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = d // cfg["num_attention_heads"]
    nq, nk = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    f = lambda *sh: (r.standard_normal(sh) * 0.3).astype(F32)  # noqa: E731
    w = {"model.embed_tokens.weight": f(v, d), "model.norm.weight": 1 + f(d)}
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = f(v, d)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w.update({p + "input_layernorm.weight": 1 + f(d),
                  p + "post_attention_layernorm.weight": 1 + f(d),
                  p + "self_attn.q_proj.weight": f(nq, d), p + "self_attn.k_proj.weight": f(nk, d),
                  p + "self_attn.v_proj.weight": f(nk, d), p + "self_attn.o_proj.weight": f(d, nq),
                  p + "mlp.gate_proj.weight": f(ff, d), p + "mlp.up_proj.weight": f(ff, d),
                  p + "mlp.down_proj.weight": f(d, ff)})
    return w


def _tiny(variant="a"):
    """A tiny random llama checkpoint (HF layout) written once per process and variant;
    variant "a" also gets a tokenizer.json (a word-level "w0".."w22") and a GGUF copy."""
    if variant not in _TINY:
        import atexit
        import json
        import shutil
        import tempfile

        from safetensors.numpy import save_file

        cfg = dict(_MODEL_CFGS[variant])
        w = _model_weights(cfg, {"a": 0, "b": 1}[variant])
        d = tempfile.mkdtemp(prefix=f"mlfuzz-model-{variant}-")  # per process (a case's tmp is removed)
        atexit.register(shutil.rmtree, d, True)
        with open(os.path.join(d, "config.json"), "w") as fh:
            json.dump(cfg, fh)
        save_file(w, os.path.join(d, "model.safetensors"))
        t = dict(path=d, cfg=cfg, w=w)
        if variant == "a":
            from tokenizers import Tokenizer as T, models as tm, pre_tokenizers

            tk = T(tm.WordLevel({f"w{i}": i for i in range(cfg["vocab_size"])}, unk_token="w0"))
            tk.pre_tokenizer = pre_tokenizers.Whitespace()
            t["tokenizer"] = os.path.join(d, "tokenizer.json")
            tk.save(t["tokenizer"])
            t["gguf"] = _write_gguf(os.path.join(d, "tiny.gguf"), cfg, w)
        _TINY[variant] = t
    return _TINY[variant]


def _tiny_model(tmp=None):
    return _tiny("a")


_GGUF_KIND = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
              "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
              "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
              "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}


def _write_gguf(path, cfg, w):
    """The model as llama.cpp's converter writes it: F32 tensors, q/k rows of each head
    interleaved in pairs."""
    import gguf

    def interleave(t, heads):
        half = t.shape[0] // heads // 2
        return t.reshape(heads, 2, half, t.shape[1]).swapaxes(1, 2).reshape(t.shape)

    wr = gguf.GGUFWriter(path, "llama")
    wr.add_block_count(cfg["num_hidden_layers"])
    wr.add_context_length(cfg["max_position_embeddings"])
    wr.add_embedding_length(cfg["hidden_size"])
    wr.add_feed_forward_length(cfg["intermediate_size"])
    wr.add_head_count(cfg["num_attention_heads"])
    wr.add_head_count_kv(cfg["num_key_value_heads"])
    wr.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    wr.add_rope_freq_base(cfg["rope_theta"])
    wr.add_vocab_size(cfg["vocab_size"])
    top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
           "lm_head.weight": "output.weight"}
    for name, t in w.items():
        if name in top:
            wr.add_tensor(top[name], np.ascontiguousarray(t))
            continue
        parts = name.split(".")
        kind = ".".join(parts[3:-1])
        if kind == "self_attn.q_proj":
            t = interleave(t, cfg["num_attention_heads"])
        elif kind == "self_attn.k_proj":
            t = interleave(t, cfg["num_key_value_heads"])
        wr.add_tensor(f"blk.{parts[2]}.{_GGUF_KIND[kind]}.weight", np.ascontiguousarray(t))
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    return path


def _lm(variant="a", prof="fp32_v1", fmt="float32", **kw):
    from mojolearn.models import CausalLM

    return CausalLM.load(_tiny(variant)["path"], numeric_profile=prof, weight_format=fmt, **kw)


def _same_logits(got, want, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype == F32 and got.shape == want.shape, \
        f"{what}: got {got.dtype} {got.shape}, want {want.dtype} {want.shape}"
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), f"{what}: the bits differ"


def _same_as_oracle(got, want, what):
    """The oracle's bits; a NaN where the oracle has a NaN (the oracle, numpy, does not
    pin a NaN's payload)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype == F32 and got.shape == want.shape, \
        f"{what}: got {got.dtype} {got.shape}, want {want.dtype} {want.shape}"
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), f"{what}: the NaNs differ"
    assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32)), \
        f"{what}: the bits differ"


def _model_ok(lm, variant, prof, fmt, what="the model"):
    """An ``after`` check: lm's next valid forward gives a fresh model's bits."""
    ids = np.array([[1, 5, 2], [7, 0, 3]], np.int64)[:, :min(3, lm.max_positions)]

    def after():
        _same_logits(lm.forward(ids), _lm(variant, prof, fmt, max_positions=lm.max_positions)
                     .forward(ids),
                     f"{what} after the refusal vs a fresh model")
    return after


_INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
               np.uint64, ">i8", ">u2"]


def _ids_form(rng, ids):
    """The same ids in a random accepted form: (object, description)."""
    k = int(rng.integers(0, 10))
    if k == 1:
        d = np.dtype(_pick(rng, _INT_DTYPES))
        return ids.astype(d), f"dtype {d}"
    if k == 2:
        return ids.tolist(), "list"
    if k == 3:
        return tuple(tuple(r) for r in ids.tolist()), "tuples"
    if k == 4:
        return [np.asarray(r, dtype=_pick(rng, _INT_DTYPES)) for r in ids], "list of arrays"
    if k == 5:
        return [[np.int64(v) if rng.random() < 0.5 else int(v) for v in r] for r in ids], \
            "numpy ints"
    if k == 6:
        return np.asfortranarray(ids), "F"
    if k == 7:
        big = np.zeros((ids.shape[0], 2 * ids.shape[1]), np.int32)
        big[:, ::2] = ids
        return big[:, ::2], "strided int32"
    if k == 8 and ids.shape[0] == 1:
        return (ids[0].tolist(), "1-D list") if rng.random() < 0.5 else (ids[0].copy(), "1-D")
    if k == 9:
        return memoryview(np.ascontiguousarray(ids)), "memoryview"
    return ids.copy(), "int64"


_SCALARS = [np.int64(3), 3, 3.0, None, "3", b"3", True, np.array(3), np.float32(2.0)]


def _ids_bad(rng, ids, vocab, base=0):
    """Hostile ids near ``ids`` (batch, length): (object, label, names). The names are
    what a refusal must say about what it got; ``base``: tokens already in the state."""
    B, L = ids.shape
    lst = ids.tolist()
    i, j = int(rng.integers(0, B)), int(rng.integers(0, L))
    k = int(rng.integers(0, 20))
    if k == 0:
        d = np.dtype(_pick(rng, [np.float16, np.float32, np.float64]))
        return ids.astype(d), f"dtype {d}", (str(d),)
    if k == 1:
        return ids.astype(bool), "bool array", ("bool",)
    if k == 2:
        return ids.astype(np.complex64), "complex array", ("complex64",)
    if k == 3:
        a = ids.astype(str)
        return a, f"string array {a.dtype}", (str(a.dtype),)
    if k == 4:
        return ids.astype(object), "object array", ("object",)
    if k == 5:
        v = _pick(rng, [1.9, 2.0, -0.0, float("nan"), float("inf"), np.float32(3.0),
                        np.float64(1.5)])
        lst[i][j] = v
        return lst, f"float {v!r} in a list", (repr(v) if type(v) is float else type(v).__name__,)
    if k == 6:
        v = _pick(rng, [True, False, np.True_, np.bool_(False)])
        lst[i][j] = v
        return lst, f"bool {v!r} in a list", (repr(v),)
    if k == 7:
        v = _pick(rng, ["1", None, b"1", 1 + 0j, object(), [1], {"a": 1}])
        lst[i][j] = v
        return lst, f"{type(v).__name__} in a list", (type(v).__name__,)
    if k == 8:
        v = vocab + int(rng.integers(0, 5))
        lst[i][j] = v
        return (lst if rng.random() < 0.5 else np.array(lst)), f"id {v} (vocab {vocab})", (str(v),)
    if k == 9:
        v = -1 - int(rng.integers(0, 5))
        lst[i][j] = v
        return (lst if rng.random() < 0.5 else np.array(lst, np.int32)), f"id {v}", (str(v),)
    if k == 10:
        v = _pick(rng, [2 ** 63, 2 ** 64 - 1, 2 ** 70, -(2 ** 63) - 1, 10 ** 30])
        lst[i][j] = v
        return lst, f"int {v} past int64", (str(v),)
    if k == 11:
        a = ids.astype(np.uint64)
        a[i, j] = np.uint64(2 ** 63 + int(rng.integers(0, 1000)))
        return a, "uint64 past int64", (str(int(a[i, j])),)
    if k == 12:
        a = ids.copy()
        a[i, j] = np.iinfo(np.int64).min
        return a, "int64 min", (str(np.iinfo(np.int64).min),)
    if k == 13:
        bad = [lst[0], lst[0] + [1]] if B == 1 else [r + [0] * (n == 1) for n, r in enumerate(lst)]
        return bad, "ragged rows", ("rectangle",)
    if k == 14:
        return [lst[0], 3], "ids mixed with rows", ("rectangle",)
    if k == 15:
        return ids[None], "3-D", (str(ids[None].shape),)
    if k == 16:
        v = _pick(rng, _SCALARS)
        names = ("()",) if isinstance(v, np.ndarray) else (type(v).__name__,)
        return v, f"scalar {v!r}", names
    if k == 17:
        v, shape = _pick(rng, [(np.zeros((B, 0), np.int64), (B, 0)),
                               (np.zeros((0, L), np.int64), (0, L)), ([], (1, 0)),
                               ([[]], (1, 0))])
        return v, f"empty {shape}", (str(shape),)
    if k == 18:
        n = MAXPOS + 1 - base + int(rng.integers(0, 3))
        return rng.integers(0, vocab, size=(B, n)), f"{n} tokens", (f"{n} tokens", f"{n} more tokens")
    v = _pick(rng, [object(), {"a": 1}, {1, 2}, (x for x in range(3))])
    return v, f"not ids: {type(v).__name__}", ("object", type(v).__name__)


def gen_models_forward(rng, tmp):
    """CausalLM.forward (and __call__) under both profiles and the three weight formats:
    ids of every accepted form give the oracle's logits; hostile ids a refusal naming
    what they were, after which the model still gives a fresh model's bits."""
    prof, fmt = _pick(rng, PROFILES), _pick(rng, FORMATS)
    t = _tiny("a")
    vocab = t["cfg"]["vocab_size"]
    B = int(rng.integers(1, 4))
    L = int(rng.integers(1, 9)) if rng.random() < 0.9 else MAXPOS
    ids = rng.integers(0, vocab, size=(B, L))
    lm = _lm("a", prof, fmt)
    via = _pick(rng, ["forward", "__call__"])
    if rng.random() < 0.4:
        obj, how = _ids_form(rng, ids)

        def check(got):
            from tests import model_oracle as MO

            _same_as_oracle(got, MO.forward(t["w"], t["cfg"], ids, prof, fmt), "forward vs oracle")
        return Case(f"models.forward {prof} {fmt} ids {B}x{L} as {how} via {via}",
                    lambda: getattr(lm, via)(obj), "ok", check)
    obj, label, names = _ids_bad(rng, ids, vocab)
    return Case(f"models.forward {prof} {fmt} {label}", lambda: getattr(lm, via)(obj), "error",
                None, names, after=_model_ok(lm, "a", prof, fmt))


def _state_after(lm, st, variant, prof, fmt, prefix):
    """An ``after`` check: the state (holding ``prefix``) continues as a fresh model's
    fresh state does, bit for bit."""
    def after():
        assert st.length == prefix.shape[1], f"the state's length moved: {st.length}"
        nxt = np.full((prefix.shape[0], 1), 4, np.int64)
        ref = _lm(variant, prof, fmt)
        rs = ref.allocate_state(st.batch_size, st.max_tokens)
        if prefix.shape[1]:
            ref.forward(prefix, rs)
        _same_logits(lm.step(nxt, st), ref.step(nxt, rs), "a step of the state after the refusal")
    return after


def gen_models_step(rng, tmp):
    """CausalLM.step / forward with a state: hostile ids, a state of another model,
    profile, weight format or batch, one past its max_tokens, one whose fields were
    changed, no state at all, and a state after a failed call; a refusal by name, then
    the state continues with a fresh model's bits."""
    from mojolearn.models import GenerationState

    prof, fmt = _pick(rng, PROFILES), _pick(rng, FORMATS)
    vocab = _MODEL_CFGS["a"]["vocab_size"]
    B = int(rng.integers(1, 4))
    T = int(rng.integers(2, MAXPOS + 1))
    P = int(rng.integers(0, T))
    n = int(rng.integers(1, T - P + 1))
    lm = _lm("a", prof, fmt)
    st = lm.allocate_state(B, T)
    prefix = rng.integers(0, vocab, size=(B, P))
    if P:
        lm.forward(prefix, st)
    ids = rng.integers(0, vocab, size=(B, n))
    via = _pick(rng, ["step", "forward"])
    fault = int(rng.integers(0, 12))
    state, obj, names, label = st, ids, (), "valid"
    restore = None
    if fault == 1:
        obj, label, names = _ids_bad(rng, ids, vocab, base=P)
        if label.endswith(" tokens"):
            names = names + (f"{P + obj.shape[1]}",)
    elif fault == 2:
        extra = T - P + 1 + int(rng.integers(0, 3))
        obj, label, names = rng.integers(0, vocab, size=(B, extra)), f"{extra} past max_tokens", \
            (f"{extra} more tokens",)
    elif fault == 3:
        b2 = B + int(rng.integers(1, 3))
        obj, label, names = rng.integers(0, vocab, size=(b2, 1)), f"batch {b2}", (f"batch {b2}",)
    elif fault == 4:
        state = _pick(rng, [None, {"length": 0}, np.zeros(3, F32), "state"])
        label = f"state {type(state).__name__}"
        names = ("state",) if state is None else (type(state).__name__,)
        if state is None and via == "forward":  # forward(ids, None) is a stateless forward
            state, names, label = "state", ("str",), "state str"
    elif fault == 5:
        other = _pick(rng, [("b", prof, fmt), ("a", [p for p in PROFILES if p != prof][0], fmt),
                            ("a", prof, [f for f in FORMATS if f != fmt][0])])
        state = _lm(*other).allocate_state(B, T)
        obj = rng.integers(0, vocab, size=(B, 1))
        label = f"state of {other}"
        names = ("another model",) if other[0] == "b" else \
            (f"another numeric profile ({other[1]})",) if other[1] != prof else \
            (f"another weight_format ({other[2]})",)
    elif fault in (6, 7):
        field_, value = _pick(rng, [("length", -1), ("length", T + 1), ("length", 2.5),
                                    ("length", True), ("length", None), ("batch_size", B + 1),
                                    ("max_tokens", T + 1), ("max_tokens", 0),
                                    ("kt", st.kt.astype(np.float64)), ("kt", st.kt[..., :-1]),
                                    ("v", np.asfortranarray(st.v)), ("v", "cache"),
                                    ("kt", "readonly")])
        old = getattr(st, field_)
        if isinstance(value, str) and value == "readonly":
            value = st.kt.copy()
            value.setflags(write=False)
        setattr(st, field_, value)

        def restore(st=st, field_=field_, old=old):
            setattr(st, field_, old)
        label = f"state.{field_} changed to {type(value).__name__}"
        names = ("changed from outside",)
    elif fault == 8:  # a failed call first, then a valid one
        try:
            lm.step(np.full((B, 1), vocab, np.int64), st)
        except ValueError:
            pass
        label = "valid after a refused call"
    expect = "ok" if fault in (0, 8, 9, 10, 11) else "error"

    def call():
        return lm.step(obj, state) if via == "step" else lm.forward(obj, state)

    def check(got):
        ref = _lm("a", prof, fmt)
        rs = ref.allocate_state(B, T)
        if P:
            ref.forward(prefix, rs)
        want = ref.step(ids, rs) if via == "step" else ref.forward(ids, rs)
        _same_logits(got, want, f"{via} with a state vs a fresh model's")
        assert st.length == P + n, f"state length {st.length}, want {P + n}"

    base_after = _state_after(lm, st, "a", prof, fmt, prefix)

    def after():
        if restore is not None:
            restore()
        base_after()

    return Case(f"models.{via} {prof} {fmt} B={B} T={T} P={P} n={n} {label}", call, expect,
                check, names, after=None if expect == "ok" else after)


def gen_models_generate(rng, tmp):
    """CausalLM.generate: hostile ids, max_new_tokens, greedy, seed and eos_token_id
    (outside the vocabulary, negative, floats, bools); valid calls: greedy tokens are
    the argmax of a fresh model's forward of each prefix, sampled ones repeat with the
    seed, eos ends a row; zero new tokens returns the prompt."""
    prof = _pick(rng, PROFILES)
    vocab = _MODEL_CFGS["a"]["vocab_size"]
    B, L = int(rng.integers(1, 3)), int(rng.integers(1, 6))
    new = int(rng.integers(0, 5))
    ids = rng.integers(0, vocab, size=(B, L))
    kw = {}
    if rng.random() < 0.4:
        kw["greedy"] = False
        if rng.random() < 0.8:
            kw["seed"] = _pick(rng, [0, 1, 12345, 2 ** 70, np.int64(7)])
    elif rng.random() < 0.3:
        kw["greedy"] = True
    if rng.random() < 0.3:
        kw["eos_token_id"] = _pick(rng, [int(rng.integers(0, vocab)), np.int32(2)])
    lm = _lm("a", prof)
    obj, arg_new, names, label = ids, new, (), "valid"
    fault = int(rng.integers(0, 10))
    if fault == 1:
        obj, label, names = _ids_bad(rng, ids, vocab)
        if label.endswith(" tokens"):
            names = names + (" prompt + ",)
    elif fault == 2:
        arg_new = _pick(rng, [-1, 1.5, True, "3", None, 10 ** 30, MAXPOS - L + 1])
        label = f"max_new_tokens={arg_new!r}"
        names = (repr(arg_new) if isinstance(arg_new, (int, str)) and not isinstance(arg_new, bool)
                 else type(arg_new).__name__,)
        if arg_new == MAXPOS - L + 1:
            names = (f"{arg_new} new tokens",)
    elif fault == 3:
        kw["greedy"] = _pick(rng, [1, 0, "yes", None, np.bool_(True)])
        label, names = f"greedy={kw['greedy']!r}", ("greedy",)
    elif fault == 4:
        kw["greedy"] = True
        kw["seed"] = _pick(rng, [0, 3])
        label, names = f"seed={kw['seed']} with greedy", (f"seed={kw['seed']}",)
    elif fault == 5:
        kw["greedy"] = False
        kw["seed"] = _pick(rng, [-1, 1.5, "x", True, [1, 2], None])
        if kw["seed"] is None:
            fault = 0  # seed=None samples from fresh entropy: valid, not repeatable
        label = f"seed={kw['seed']!r}"
        names = (repr(kw["seed"]) if isinstance(kw["seed"], int) and not isinstance(kw["seed"], bool)
                 else type(kw["seed"]).__name__,)
    elif fault == 6:
        kw["eos_token_id"] = _pick(rng, [vocab, vocab + 7, -1, 1.5, True, "1", 2 ** 70])
        label = f"eos_token_id={kw['eos_token_id']!r}"
        v = kw["eos_token_id"]
        names = (str(v) if isinstance(v, int) and not isinstance(v, bool) else type(v).__name__,)
    expect = "ok" if fault in (0, 7, 8, 9) else "error"
    repeatable = not (kw.get("greedy") is False and kw.get("seed") is None)

    def call():
        return lm.generate(obj, arg_new, **kw)

    def check(out):
        assert isinstance(out, np.ndarray) and out.dtype == np.int64 and out.ndim == 2, repr(out)[:200]
        assert out.shape[0] == B and L <= out.shape[1] <= L + new, out.shape
        assert np.array_equal(out[:, :L], ids), "the prompt changed"
        if new == 0:
            assert out.shape[1] == L
        assert out.min() >= 0 and out.max() < vocab, "a token outside the vocabulary"
        eos = kw.get("eos_token_id")
        if out.shape[1] < L + new:
            assert eos is not None and (out[:, -1] == eos).all(), "stopped early without eos"
        if eos is not None:
            for row in out[:, L:]:
                hit = np.flatnonzero(row == eos)
                if hit.size:
                    assert (row[hit[0]:] == eos).all(), "a row went on past eos"
        ref = _lm("a", prof)
        if kw.get("greedy", True):
            for t_ in range(L, out.shape[1]):
                want = np.argmax(ref.forward(out[:, :t_])[:, -1, :], axis=1)
                done = np.zeros(B, bool) if eos is None else (out[:, L:t_] == eos).any(axis=1)
                assert np.array_equal(out[~done, t_], want[~done]), f"token {t_} is not the argmax"
        elif repeatable:
            assert np.array_equal(out, ref.generate(ids, new, **kw)), "a seeded sample did not repeat"

    def after():
        want = _lm("a", prof).generate(ids[:, :2], 2)
        assert np.array_equal(lm.generate(ids[:, :2], 2), want), "generate after the refusal"

    return Case(f"models.generate {prof} {B}x{L} new={new} {kw} {label}", call, expect, check,
                names, after=None if expect == "ok" else after)


class _FakeTokenizer:
    """A tokenizer whose encode returns a chosen object (the duck-typed kind
    generate_text takes)."""

    def __init__(self, out):
        self.out = out

    def encode(self, text):
        return self.out

    def decode(self, ids):
        return " ".join(f"w{i}" for i in ids)


def gen_models_generate_text(rng, tmp):
    """CausalLM.generate_text: a real Tokenizer, one of another vocabulary, no tokenizer,
    and tokenizers whose encode returns floats, bools, strings, nested lists, ids outside
    the vocabulary or past int64, nothing; every id the tokenizer gives is held to
    generate's rules."""
    from mojolearn.models import Tokenizer

    t = _tiny("a")
    vocab = t["cfg"]["vocab_size"]
    lm = _lm("a", "fp32_v1")
    tok = Tokenizer.load(t["tokenizer"])
    n = int(rng.integers(1, 6))
    words = [int(v) for v in rng.integers(0, vocab, size=n)]
    text = " ".join(f"w{i}" for i in words)
    new = int(rng.integers(0, 4))
    kw = {}
    fault = int(rng.integers(0, 10))
    names, label = (), "valid"
    tk = tok
    if fault == 1:
        text = _pick(rng, [None, 3, b"w1", ["w1"]])
        label, names = f"text {type(text).__name__}", ("text",)
    elif fault == 2:
        tk = _pick(rng, [None, "tok", object(), {"encode": 1}])
        label, names = f"tokenizer {type(tk).__name__}", ("tokenizer",)
    elif fault == 3:
        from tokenizers import Tokenizer as T, models as tm

        big = int(rng.integers(vocab + 1, 100))
        tk = Tokenizer(T(tm.WordLevel({f"w{i}": i for i in range(big)}, unk_token="w0")),
                       source="big")
        label, names = f"tokenizer of {big} tokens", (str(big),)
    elif fault in (4, 5, 6):
        out, what, names = _ids_bad(rng, np.array([words]), vocab)
        if isinstance(out, list) and len(out) == 1 and isinstance(out[0], list):
            out = out[0]  # one sequence, as an encoder returns it
        elif isinstance(out, np.ndarray) and out.ndim == 2 and out.shape[0] == 1:
            out = out[0]
        if what.startswith("empty"):
            out, names = [], ("no token",)
        elif what.endswith(" tokens"):  # the length rule is generate's (tested there)
            out, names = np.array([[1, 2]]), ("(1, 2)",)
        if isinstance(out, list) and out and all(isinstance(r, list) for r in out):
            names = names + ("shape (1, 1)",)  # [[1]] left after the one id became [1]
        tk = _FakeTokenizer(out)
        label = f"encode returns {what}"
    elif fault == 7:
        kw = _pick(rng, [{"greedy": True, "seed": 1}, {"eos_token_id": vocab},
                         {"greedy": "no"}])
        label, names = f"{kw}", tuple(kw)
    expect = "ok" if fault in (0, 8, 9) else "error"

    def call():
        return lm.generate_text(text, new, tokenizer=tk, **kw)

    def check(got):
        assert isinstance(got, str)
        out = _lm("a", "fp32_v1").generate([tok.encode(text)], new)
        assert got == tok.decode(out[0, n:].tolist()), (got, out)

    def after():
        ref = _lm("a", "fp32_v1").generate_text("w1 w2", 2, tokenizer=tok)
        assert lm.generate_text("w1 w2", 2, tokenizer=tok) == ref

    return Case(f"models.generate_text new={new} {label}", call, expect, check, names,
                after=None if expect == "ok" else after)


def _bad_count(a, hi):
    if isinstance(a, (bool, np.bool_)) or not isinstance(a, (int, np.integer)):
        return True
    return int(a) < 1 or (hi is not None and int(a) > hi)


def _state_file(path, lm, st, *, tensors=None, extra=None, drop=(), profile=None):
    """Write the file save_state would write for (lm, st), edited: tensors replaced,
    metadata fields changed (None drops one), tensors dropped."""
    from mojolearn._io import checkpoint as _ckpt
    from mojolearn.models._transformer import causal_lm as C

    c = lm.config
    meta = np.array([st.length, st.batch_size, st.max_tokens, c.num_hidden_layers,
                     c.num_key_value_heads, c.head_dim, c.hidden_size, c.vocab_size], F32)
    ts = {"state.kt": st.kt, "state.v": st.v, "state.meta": meta}
    ts.update(tensors or {})
    for d in drop:
        ts.pop(d)
    info = {C.STATE_KIND_KEY: C.STATE_KIND, C.STATE_MODEL_KEY: c.fingerprint(),
            C.STATE_FORMAT_KEY: lm.weight_format, C.STATE_MODE_KEY: "identical"}
    for k, v in (extra or {}).items():
        if v is None:
            info.pop(k)
        else:
            info[k] = v
    _ckpt._save(path, ts, profile or lm.numeric_profile, info)


def gen_models_state(rng, tmp):
    """allocate_state, save_state and resume: hostile counts and paths, states of other
    models, profiles and weight formats, files truncated, with bytes flipped, with the
    meta, a tensor's shape or dtype or the metadata edited, tensors missing or added;
    a good file resumes to the bits of the state it saved. A failed save leaves the old
    file byte for byte; a failed call leaves the model a fresh model's."""
    from mojolearn import checkpoint
    from mojolearn.lowbit import BF16Weight
    from mojolearn.models._transformer import causal_lm as C

    prof, fmt = _pick(rng, PROFILES), _pick(rng, FORMATS)
    vocab = _MODEL_CFGS["a"]["vocab_size"]
    lm = _lm("a", prof, fmt)
    B, T = int(rng.integers(1, 3)), int(rng.integers(2, MAXPOS + 1))
    P = int(rng.integers(0, T))
    st = lm.allocate_state(B, T)
    prefix = rng.integers(0, vocab, size=(B, P))
    if P:
        lm.forward(prefix, st)
    path = os.path.join(tmp, f"s{int(rng.integers(1 << 30))}.safetensors")
    kind = int(rng.integers(0, 14))
    expect, names, label, check, old = "error", (), "", None, None
    after = _model_ok(lm, "a", prof, fmt)
    if kind == 0:  # allocate_state
        args = [_pick(rng, [B, 0, -1, 1.5, True, "2", None, np.int64(2)]),
                _pick(rng, [T, 0, MAXPOS + 1, 2.5, False, np.int32(3)])]
        bad = [(a, hi) for a, hi in zip(args, (None, MAXPOS)) if _bad_count(a, hi)]
        expect = "error" if bad else "ok"
        if bad:
            a, _ = bad[0]
            names = (type(a).__name__,) if isinstance(a, (bool, np.bool_)) or not isinstance(
                a, (int, np.integer)) else (str(int(a)),)
        label = f"allocate_state{tuple(args)!r}"

        def call():
            return lm.allocate_state(*args)

        def check(s):
            assert s.length == 0 and s.kt.shape[1] == int(args[0]) and s.max_tokens == int(args[1])
            assert not s.kt.any() and not s.v.any()
    elif kind in (1, 2):  # save_state: a good save, or a hostile path / state over an old file
        checkpoint.save(path, {"old": np.arange(3, dtype=F32)})
        old = open(path, "rb").read()
        what = int(rng.integers(0, 3)) if kind == 2 else 0
        target, state = path, st
        if what == 1:
            target, lab, exp = _hostile_path(rng, tmp, True)
            expect = exp
            names = ("path",) if lab in ("bytes", "not a path", "empty", "NUL") else \
                (repr(os.fspath(target)) if isinstance(target, (str, os.PathLike)) else "path",)
            label = f"save_state to {lab}"
        elif what == 2:
            state = _pick(rng, [None, "s", _lm("b", prof, fmt).allocate_state(1, 2)])
            names = (type(state).__name__,) if not hasattr(state, "kt") else ("another model",)
            label = f"save_state of {type(state).__name__}"
        else:
            expect, label = "ok", "save_state over an old file"

        def call():
            return lm.save_state(target, state)

        def check(res):
            if target is path:
                s2 = lm.resume(path)
                assert s2.length == st.length and np.array_equal(s2.kt.view(np.uint32),
                                                                 st.kt.view(np.uint32))

        def after():
            if target is not path or expect != "ok":
                assert open(path, "rb").read() == old, "a failed save_state changed the old file"
            _model_ok(lm, "a", prof, fmt)()
    else:  # resume
        lm.save_state(path, st)
        resumer = lm
        if kind == 3:
            expect, label = "ok", "resume a good file"
        elif kind == 4:
            data = open(path, "rb").read()
            cut = int(rng.integers(0, len(data)))
            open(path, "wb").write(data[:cut])
            label, names = f"truncated at {cut}/{len(data)}", (repr(path),)
        elif kind == 5:
            data = bytearray(open(path, "rb").read())
            for _ in range(int(rng.integers(1, 4))):
                data[int(rng.integers(0, len(data)))] = int(rng.integers(0, 256))
            open(path, "wb").write(bytes(data))
            expect, label, names = "any", "bytes flipped", (repr(path),)
        elif kind == 6:
            c = lm.config
            m = np.array([st.length, B, T, c.num_hidden_layers, c.num_key_value_heads,
                          c.head_dim, c.hidden_size, c.vocab_size], F32)
            i, v = _pick(rng, [(0, -1), (0, T + 1), (0, 1.5), (0, np.nan), (1, 0), (2, 0),
                               (1, np.inf), (3, 2), (7, 99), (2, 1e30), (0, 2 ** 25)])
            m[i] = v
            if rng.random() < 0.2:
                m = m[:-1]
            _state_file(path, lm, st, tensors={"state.meta": m})
            label, names = f"meta[{i}] = {v}", ("state.meta", "the state says length")
        elif kind == 7:
            nm = _pick(rng, ["state.kt", "state.v"])
            a = getattr(st, nm[6:])
            edit = _pick(rng, ["shape", "bf16", "rank"])
            rep = {"shape": lambda: np.zeros(a.shape[:-1] + (a.shape[-1] + 1,), F32),
                   "bf16": lambda: BF16Weight(np.zeros((3, 4), np.uint16)),
                   "rank": lambda: np.zeros(a.shape[1:], F32)}[edit]()
            _state_file(path, lm, st, tensors={nm: rep})
            label, names = f"{nm} {edit}", (nm,)
        elif kind == 8:
            how = _pick(rng, ["drop", "extra", "plain"])
            if how == "drop":
                nm = _pick(rng, list(C._STATE_TENSORS))
                _state_file(path, lm, st, drop=(nm,))
                names = ("tensors",)
            elif how == "extra":
                _state_file(path, lm, st, tensors={"state.extra": np.zeros(2, F32)})
                names = ("state.extra",)
            else:  # the same tensors saved as a plain checkpoint: no state metadata
                checkpoint.save(path, {"state.kt": st.kt, "state.v": st.v,
                                       "state.meta": np.zeros(8, F32)}, numeric_profile=prof)
                names = ("generation state",)
            label = f"tensors {how}"
        elif kind == 9:
            key, val = _pick(rng, [(C.STATE_MODEL_KEY, "llama:1:2:3:4:5:6:7"),
                                   (C.STATE_MODEL_KEY, None),
                                   (C.STATE_FORMAT_KEY, [f for f in FORMATS if f != fmt][0]),
                                   (C.STATE_FORMAT_KEY, None), (C.STATE_KIND_KEY, "v0"),
                                   (C.STATE_KIND_KEY, None), (C.STATE_MODE_KEY, "fastest"),
                                   (C.STATE_MODE_KEY, None)])
            _state_file(path, lm, st, extra={key: val})
            label = f"metadata {key}={val!r}"
            names = (repr(val),)
        elif kind == 10:
            other = _pick(rng, [("b", prof, fmt), ("a", [p for p in PROFILES if p != prof][0], fmt),
                                ("a", prof, [f for f in FORMATS if f != fmt][0])])
            olm = _lm(*other)
            olm.save_state(path, olm.allocate_state(1, 3))
            label = f"a state of {other}"
            names = ("another model",) if other[0] == "b" else (other[1],) if other[1] != prof \
                else (other[2],)
        elif kind == 11:
            resumer = _lm("a", prof, fmt, max_positions=max(1, T - 1))
            label, names = f"into max_positions {T - 1}", ("max_positions",)
            after = _model_ok(resumer, "a", prof, fmt)
        elif kind == 12:
            path = _pick(rng, [os.path.join(_tiny("a")["path"], "model.safetensors"),
                               os.path.join(tmp, "missing.safetensors"), tmp, None, 3])
            label = f"resume {path if not isinstance(path, str) else os.path.basename(path)!r}"
            names = (repr(path),) if isinstance(path, str) else ("path",)
        else:
            expect, label = "ok", "resume, then a refused step, then resume again"

        def call():
            s = resumer.resume(path)
            if kind == 13:
                try:
                    resumer.step(np.full((B, 1), -1), s)
                except ValueError:
                    pass
                s = resumer.resume(path)
            return s

        def check(s):
            assert s.length == P and s.batch_size == B and s.max_tokens == T, repr(s)
            if P < T:
                nxt = np.full((B, 1), 3, np.int64)
                _same_logits(lm.step(nxt, s), lm.step(nxt, st), "a step of the resumed state")
        if expect != "ok":
            check = None
    return Case(f"models.state {prof} {fmt} B={B} T={T} P={P} {label}", call, expect, check,
                names, after=None if expect == "ok" else after)


def _write_dir(d, cfg_text, tensors, shards=None):
    """A model directory: config.json as given, the tensors in model.safetensors or, with
    ``shards`` (name -> shard file), in shards named by model.safetensors.index.json."""
    import json

    from safetensors.numpy import save_file

    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as fh:
        fh.write(cfg_text)
    if shards is None:
        save_file(tensors, os.path.join(d, "model.safetensors"))
        return
    by = {}
    for name, t in tensors.items():
        by.setdefault(shards[name], {})[name] = t
    for shard, ts in by.items():
        save_file(ts, os.path.join(d, shard))
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as fh:
        json.dump({"metadata": {}, "weight_map": shards}, fh)


_CONFIG_FAULTS = [
    ("vocab_size", 0), ("vocab_size", -1), ("vocab_size", 1.5), ("vocab_size", "23"),
    ("vocab_size", True), ("vocab_size", 10 ** 30), ("hidden_size", 0), ("hidden_size", 15),
    ("num_hidden_layers", 10 ** 9), ("num_hidden_layers", 0), ("num_attention_heads", 3),
    ("num_key_value_heads", 3), ("num_key_value_heads", 0), ("head_dim", 7), ("head_dim", 2048),
    ("head_dim", 4), ("intermediate_size", 23), ("rms_norm_eps", -1.0), ("rms_norm_eps", 0),
    ("rms_norm_eps", float("nan")), ("rope_theta", 0), ("rope_theta", "x"),
    ("rope_theta", 10 ** 400), ("max_position_embeddings", 0), ("tie_word_embeddings", "yes"),
    ("tie_word_embeddings", False), ("rope_scaling", {"type": "linear", "factor": 2.0}),
    ("hidden_act", "gelu"), ("model_type", "gpt2"), ("model_type", None),
    ("rope_parameters", {"rope_type": "default", "rope_theta": "x"}),
    ("rope_parameters", {"rope_type": "yarn"}), ("rope_parameters", 3),
    ("quantization_config", {"quant_method": "gptq"}), ("mlp_bias", True),
]


def _ref_forward(lm_or_path, variant="a"):
    from mojolearn.models import CausalLM

    ids = np.array([[0, 3, 9, 22], [5, 5, 1, 2]], np.int64)
    lm = CausalLM.load(lm_or_path) if isinstance(lm_or_path, str) else lm_or_path
    return lm.forward(ids), _lm(variant).forward(ids)


def gen_models_load(rng, tmp):
    """CausalLM.load: config fields out of range or not computed, config.json that is not
    JSON, safetensors truncated or flipped, a tensor of the wrong shape or dtype, missing
    or extra tensors, sharded indexes naming a missing shard (or escaping the directory,
    or a tensor twice), GGUF files truncated, empty or flipped, hostile paths and load
    arguments; a good directory or GGUF loads to the reference model's bits."""
    import json

    from mojolearn.models import CausalLM

    t = _tiny("a")
    d = os.path.join(str(tmp), f"m{int(rng.integers(0, 1 << 30))}")
    cfg = dict(t["cfg"])
    w = dict(t["w"])
    kind = int(rng.integers(0, 16))
    expect, names, path, shards, kw = "error", (), d, None, {}
    cfg_text = None
    label = ""
    write = kind < 9 or kind == 15  # kinds 9..14 write their own files
    if kind == 0:
        expect, label = "ok", "good directory"
    elif kind == 1:
        field_, v = _pick(rng, _CONFIG_FAULTS)
        cfg[field_] = v
        label = f"config {field_}={v!r:.30}"
        names = (field_, "tensor")  # a computable config the tensors do not fit: a tensor's shape
        if (field_, v) == ("tie_word_embeddings", False):
            names = ("lm_head.weight",)  # an untied config needs the head
        elif field_ == "num_hidden_layers" and v == 10 ** 9:
            names = ("model.layers.1.",)  # refused at the first missing layer, at once
    elif kind == 2:
        cfg_text = _pick(rng, ["{broken", "", "[1, 2]", "null", '{"model_type": "llama"}',
                               "[" * 100000])
        label, names = f"config.json {cfg_text[:12]!r}", ("config",)
    elif kind == 3:
        name = _pick(rng, sorted(w))
        sh = w[name].shape
        w[name] = _pick(rng, [np.zeros(sh[:-1] + (sh[-1] + 1,), F32), np.zeros(sh[::-1] + (1,), F32),
                              np.zeros((2,), F32)])
        label, names = f"{name} shape {w[name].shape}", (name,)
    elif kind == 4:
        name = _pick(rng, sorted(w))
        w[name] = w[name].astype(_pick(rng, [np.int32, np.float64, np.int8]))
        label, names = f"{name} dtype {w[name].dtype}", (name,)
    elif kind == 5:
        name = _pick(rng, sorted(w))
        del w[name]
        label, names = f"missing {name}", (name,)
    elif kind == 6:
        w["model.extra.weight"] = np.zeros(3, F32)
        expect, label = "ok", "an extra tensor"
    elif kind in (7, 8):
        names_ = sorted(w)
        shards = {n: f"model-0000{1 + i % 2}-of-00002.safetensors" for i, n in enumerate(names_)}
        label = "sharded"
        if kind == 7:
            expect = "ok"
        else:
            fault = int(rng.integers(0, 5))
            if fault == 0:
                gone = "model-00002-of-00002.safetensors"
                label, names = "an index naming a missing shard", (gone,)
            elif fault == 1:
                label, names = "an index that is not JSON", ("model.safetensors.index.json",)
            elif fault == 2:
                label, names = "weight_map a list", ("weight_map",)
            elif fault == 3:
                shards[names_[0]] = "../escape.safetensors"
                label, names = "a shard outside the directory", ("../escape.safetensors",)
            else:
                label, names = "a tensor in two shards", ("more than one shard",)
    elif kind in (9, 10, 11):
        data = open(os.path.join(t["path"], "model.safetensors"), "rb").read()
        if kind == 9:
            cut = int(rng.integers(0, len(data)))
            data, label = data[:cut], f"safetensors cut at {cut}"
            names = ("model.safetensors",)
        elif kind == 10:
            b = bytearray(data)
            for _ in range(int(rng.integers(1, 9))):
                b[int(rng.integers(0, len(b)))] = int(rng.integers(0, 256))
            data, expect, label = bytes(b), "any", "safetensors bytes flipped"
            names = ("model", "tensor", "config")
        else:
            hdr = _pick(rng, [b'{"x": {"dtype": "F32", "shape": [-1, 2], "data_offsets": [0, 8]}}',
                              b'{"x": {"dtype": "F32", "shape": [2.5], "data_offsets": [0, 8]}}',
                              b'{"x": {"dtype": "F32", "shape": [4294967296, 4294967296], '
                              b'"data_offsets": [0, 0]}}',
                              b'{"x": {"dtype": "F32", "shape": [2], "data_offsets": ["0", 8]}}',
                              b'{"x": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}}',
                              b"[" * 5000])
            data = len(hdr).to_bytes(8, "little") + hdr + b"\0" * 8
            label, names = f"crafted header {hdr[:30]!r}", ("model.safetensors",)
        _write_dir(d, json.dumps(cfg), {})
        with open(os.path.join(d, "model.safetensors"), "wb") as fh:
            fh.write(data)
    elif kind in (12, 13):
        data = open(t["gguf"], "rb").read()
        path = os.path.join(str(tmp), "m.gguf")
        if kind == 12:
            expect, label = "ok", "GGUF"
        else:
            how = int(rng.integers(0, 3))
            if how == 0:
                cut = int(rng.integers(0, len(data)))
                data, label = data[:cut], f"GGUF cut at {cut}/{len(data)}"
            elif how == 1:
                data, label = b"", "empty GGUF"
            else:
                b = bytearray(data)
                for _ in range(int(rng.integers(1, 9))):
                    b[int(rng.integers(0, len(b)))] = int(rng.integers(0, 256))
                data, label, expect = bytes(b), "GGUF bytes flipped", "any"
            names = ("m.gguf",)
        with open(path, "wb") as fh:
            fh.write(data)
    elif kind == 14:
        path = _pick(rng, [os.path.join(d, "missing"), None, 3, b"x", "", "a\0b",
                           os.path.join(t["path"], "config.json")])
        label = f"path {path!r:.40}"
        names = ("path", "model") if not isinstance(path, str) or not path or "\0" in path \
            else (repr(path),)
    else:
        k, v = _pick(rng, [("weight_format", "int4"), ("weight_format", None),
                           ("numeric_profile", "int8_v1"), ("numeric_profile", "nope"),
                           ("max_positions", 0), ("max_positions", 8193), ("max_positions", 1.5),
                           ("max_positions", True), ("max_positions", 8)])
        kw = {k: v}
        expect = "ok" if v == 8 else "error"
        label = f"{k}={v!r}"
        names = (k, repr(v)) if not isinstance(v, str) else (repr(v), k)
        if k == "numeric_profile":
            names = (repr(v), v)
    if write:
        _write_dir(d, json.dumps(cfg) if cfg_text is None else cfg_text, w, shards)
        if kind == 8:
            idx = os.path.join(d, "model.safetensors.index.json")
            if fault == 0:
                os.unlink(os.path.join(d, "model-00002-of-00002.safetensors"))
            elif fault == 1:
                open(idx, "w").write("{no")
            elif fault == 2:
                open(idx, "w").write(json.dumps({"weight_map": list(shards)}))
            elif fault == 4:
                from safetensors.numpy import save_file

                n0 = [n for n, s in shards.items() if s.endswith("1-of-00002.safetensors")][0]
                part1 = os.path.join(d, "model-00001-of-00002.safetensors")
                mine = {n: t["w"][n] for n, s in shards.items() if s == os.path.basename(part1)}
                save_file(mine, part1)
                part2 = os.path.join(d, "model-00002-of-00002.safetensors")
                theirs = {n: t["w"][n] for n, s in shards.items() if s == os.path.basename(part2)}
                theirs[n0] = t["w"][n0]
                save_file(theirs, part2)

    def call():
        return CausalLM.load(path, **kw)

    def check(lm):
        ids = np.array([[0, 3, 9, 22], [5, 5, 1, 2]], np.int64)
        _same_logits(lm.forward(ids), _lm("a").forward(ids), f"{label} vs the reference model")

    return Case(f"models.load {label}", call, expect, check if expect == "ok" else None, names)


def gen_models_constructor(rng, tmp):
    """ModelConfig.from_dict / from_file and the CausalLM constructor: config fields out
    of range, weights that are not float32 arrays, of the wrong shape, missing, under a
    non-str name, not a dict; a good call gives the reference model's bits and leaves the
    caller's dict as it was."""
    import json

    from mojolearn.models import CausalLM, ModelConfig

    t = _tiny("a")
    cfg = dict(t["cfg"])
    w = dict(t["w"])
    prof, fmt = _pick(rng, PROFILES), _pick(rng, FORMATS)
    kind = int(rng.integers(0, 9))
    expect, names, label = "error", (), ""
    config_arg = _FROM_DICT = object()
    if kind == 0:
        expect, label = "ok", "valid"
    elif kind == 1:
        field_, v = _pick(rng, _CONFIG_FAULTS)
        cfg[field_] = v
        label, names = f"config {field_}={v!r:.30}", (field_, "tensor")
        if (field_, v) == ("tie_word_embeddings", False):
            names = ("lm_head.weight",)
        elif field_ == "num_hidden_layers" and v == 10 ** 9:
            names = ("model.layers.1.",)
    elif kind == 2:
        name = _pick(rng, sorted(w))
        v = _pick(rng, ["f64", "list", "int", "none", "str"])
        w[name] = {"f64": w[name].astype(np.float64), "list": w[name].tolist(),
                   "int": w[name].astype(np.int32), "none": None, "str": "w"}[v]
        label, names = f"{name} as {v}", (name,)
    elif kind == 3:
        name = _pick(rng, sorted(w))
        w[name] = w[name][..., :-1]
        label, names = f"{name} cut", (name,)
    elif kind == 4:
        w[_pick(rng, [3, None, b"x", ("a",)])] = np.zeros(2, F32)
        label, names = "a non-str name", ("str",)
    elif kind == 5:
        config_arg = _pick(rng, [dict(cfg), None, "cfg", 3])
        label, names = f"config {type(config_arg).__name__}", ("ModelConfig",)
    elif kind == 6:
        w = _pick(rng, [list(w.items()), None, "w"])
        label, names = f"weights {type(w).__name__}", ("dict",)
    elif kind == 7:  # from_file
        p = _pick(rng, [os.path.join(tmp, "none.json"), tmp, None, 3, b"x", "a\0b",
                        os.path.join(t["path"], "model.safetensors")])
        label = f"from_file {p!r:.40}"
        names = ("path",) if not isinstance(p, str) or "\0" in p else (repr(p),)

        def call():
            return ModelConfig.from_file(p)
        return Case(f"models.ModelConfig {label}", call, "error", None, names)
    else:
        p = os.path.join(tmp, "config.json")
        with open(p, "w") as fh:
            json.dump(cfg, fh)

        def call():
            return ModelConfig.from_file(p)

        def check(c):
            assert c == ModelConfig.from_dict(cfg)
        return Case("models.ModelConfig from_file valid", call, "ok", check)
    keep = dict(w) if isinstance(w, dict) else None

    def call():
        c = ModelConfig.from_dict(cfg) if config_arg is _FROM_DICT else config_arg
        return CausalLM(c, w, numeric_profile=prof, weight_format=fmt)

    def check(lm):
        ids = np.array([[0, 3, 9, 22], [5, 5, 1, 2]], np.int64)
        _same_logits(lm.forward(ids), _lm("a", prof, fmt).forward(ids), "constructed vs loaded")

    def after():
        assert keep is None or (w.keys() == keep.keys() and all(w[k] is keep[k] for k in keep)), \
            "the constructor changed the caller's weights dict"

    return Case(f"models.CausalLM {prof} {fmt} {label}", call, expect, check, names, after=after)


def _block_oracle(bw, nh, kvh, eps, theta, x, prof):
    """One Llama block at positions 0.. in the oracle's arithmetic (tests/model_oracle.py)."""
    from tests import model_oracle as MO

    B, L, d = x.shape
    hd = bw["self_attn.q_proj.weight"].shape[0] // nh
    xs = x.reshape(B * L, d).astype(F32)
    cos, sin = MO.rope_table(max(L, 1), hd, F32(theta))
    h = MO.rmsnorm(xs, bw["input_layernorm.weight"], F32(eps))
    q, k, v = (MO.proj(h, bw[f"self_attn.{n}_proj.weight"], prof) for n in "qkv")
    ctx = np.empty((B * L, nh * hd), F32)
    pos = np.tile(np.arange(L), B)
    for b in range(B):
        r = slice(b * L, (b + 1) * L)
        for hh in range(nh):
            g = hh // (nh // kvh)
            qh = MO.rope(q[r, hh * hd:(hh + 1) * hd], cos, sin, pos[r])
            kh = MO.rope(k[r, g * hd:(g + 1) * hd], cos, sin, pos[r])
            ctx[r, hh * hd:(hh + 1) * hd] = MO.attention(qh, kh, v[r, g * hd:(g + 1) * hd], 0,
                                                         prof, hd)
    xs = MO.add(xs, MO.proj(ctx, bw["self_attn.o_proj.weight"], prof))
    h2 = MO.rmsnorm(xs, bw["post_attention_layernorm.weight"], F32(eps))
    gg = MO.proj(h2, bw["mlp.gate_proj.weight"], prof)
    uu = MO.proj(h2, bw["mlp.up_proj.weight"], prof)
    xs = MO.add(xs, MO.proj(MO.silu_mul(gg, uu), bw["mlp.down_proj.weight"], prof))
    return xs.reshape(B, L, d)


def gen_models_block(rng, tmp):
    """TransformerBlock: hostile head counts, head_dim, eps, theta, max_positions,
    qkv_bias, weights (a bias without qkv_bias, unknown names, wrong shapes or dtypes,
    missing), profile and format; forward on hostile x; a good block gives the oracle's
    bits, and after a refused forward a fresh block's."""
    from mojolearn.models import TransformerBlock

    t = _tiny("a")
    cfg = t["cfg"]
    bw = {k[len("model.layers.0."):]: v for k, v in t["w"].items() if k.startswith("model.layers.0.")}
    prof = _pick(rng, PROFILES)
    kw = dict(n_heads=2, n_kv_heads=1, rms_norm_eps=1e-5, rope_theta=10000.0, max_positions=16,
              numeric_profile=prof)
    d = cfg["hidden_size"]
    B, L = int(rng.integers(0, 3)), int(rng.integers(0, 6))
    x = rand_f32(rng, (B, L, d)) if rng.random() < 0.2 else \
        rng.standard_normal((B, L, d)).astype(F32)
    kind = int(rng.integers(0, 12))
    expect, names, label, xin = "error", (), "", x
    if kind in (0, 1, 2):
        expect, label = "ok", "valid"
    elif kind == 3:
        k, v = _pick(rng, [("n_heads", 0), ("n_heads", -1), ("n_heads", 1.5), ("n_heads", True),
                           ("n_heads", "2"), ("n_heads", None), ("n_heads", 3), ("n_kv_heads", 0),
                           ("n_kv_heads", 3), ("head_dim", 0), ("head_dim", 3), ("head_dim", 2048),
                           ("head_dim", 6)])
        kw[k] = v
        label = f"{k}={v!r}"
        names = (k, "head_dim", "rows") if k != "head_dim" or v != 6 else ("shape",)
    elif kind == 4:
        k, v = _pick(rng, [("rms_norm_eps", 0), ("rms_norm_eps", -1e-5), ("rms_norm_eps", np.nan),
                           ("rms_norm_eps", np.inf), ("rms_norm_eps", "x"), ("rms_norm_eps", True),
                           ("rope_theta", 0), ("rope_theta", 10 ** 400), ("rope_theta", None),
                           ("max_positions", 0), ("max_positions", 8193), ("max_positions", 1.5),
                           ("qkv_bias", 1), ("qkv_bias", "no"), ("weight_format", "int4"),
                           ("numeric_profile", "int8_v1")])
        kw[k] = v
        label, names = f"{k}={v!r}", (k, repr(v))
        if k == "numeric_profile":
            names = ("int8_v1",)
    elif kind == 5:
        bw = dict(bw)
        how = _pick(rng, ["bias", "unknown", "missing"])
        if how == "bias":
            bw["self_attn.q_proj.bias"] = np.zeros(16, F32)
            names = ("self_attn.q_proj.bias",)
        elif how == "unknown":
            bw["mlp.extra.weight"] = np.zeros(2, F32)
            names = ("mlp.extra.weight",)
        else:
            n = _pick(rng, sorted(bw))
            del bw[n]
            names = (n,)
        label = f"weights {how}"
    elif kind == 6:
        bw = dict(bw)
        n = _pick(rng, sorted(bw))
        sh = bw[n].shape
        bw[n] = _pick(rng, [np.zeros(sh[:-1] + (sh[-1] + 2,), F32), np.zeros(sh[::-1] + (1,), F32),
                            bw[n].astype(np.float64), np.zeros((0,) + sh[1:], F32)])
        label, names = f"{n} {bw[n].dtype} {bw[n].shape}", (n, "expected")
    elif kind == 7:
        bw = _pick(rng, [None, list(bw.items()), "w"])
        label, names = f"weights {type(bw).__name__}", ("dict",)
    else:
        xin = _pick(rng, [x.astype(np.float64), x.astype(np.float16), x[..., :-1],
                          x.reshape(-1, d) if x.size else np.zeros((1, d), F32), None, "x",
                          rng.standard_normal((1, 17, d)).astype(F32), x.astype(np.int32)])
        a = np.asarray(xin) if xin is not None and not isinstance(xin, str) else None
        label = f"x {type(xin).__name__} {getattr(a, 'dtype', '')} {getattr(a, 'shape', '')}"
        if a is None:
            names = ("dtype",)
        elif a.dtype != F32:
            names = (str(a.dtype),)
        elif a.ndim == 3 and a.shape[1] == 17:
            names = ("length 17",)
        else:
            names = (str(a.shape),)

    def build():
        return TransformerBlock(bw, **kw)

    if kind <= 7:
        def call():
            blk = build()
            return blk, blk(xin)
    else:
        blk = build()

        def call():
            return blk(xin)

    def check(res):
        blk_, out = res
        assert out.dtype == F32 and out.shape == x.shape
        if x.size:
            _same_as_oracle(out, _block_oracle(bw, 2, 1, 1e-5, 10000.0, x, prof), "block vs oracle")

    def after():
        x2 = rng.standard_normal((1, 3, d)).astype(F32)
        _same_logits(blk(x2), build()(x2), "the block after a refused forward vs a fresh one")

    return Case(f"models.block {prof} {B}x{L} {label}", call, expect, check, names,
                after=after if kind > 7 else None)


_MAMBA_CFG = {
    "mamba1": dict(model_type="mamba", vocab_size=29, hidden_size=32, num_hidden_layers=1,
                   tie_word_embeddings=True),
    "mamba2": dict(model_type="mamba2", vocab_size=29, hidden_size=64, num_hidden_layers=1,
                   n_groups=1, head_dim=64, num_heads=2, chunk_size=256,
                   tie_word_embeddings=True),
}


def gen_models_mamba(rng, tmp):
    """Mamba1Block / Mamba2Block and a Mamba CausalLM's state (MambaState): hostile
    d_model, profile, format, weights (unknown, missing, misshapen, float64, NaN), x
    (dtype, shape), and steps on a state changed from outside; a good block gives the
    oracle's bits (tests/mamba_oracle.py), a good state's arrays() its own arrays."""
    from tests import mamba_oracle as SO
    from mojolearn.models import CausalLM, Mamba1Block, Mamba2Block

    fam = _pick(rng, ["mamba1", "mamba2"])
    cfg = _MAMBA_CFG[fam]
    w = SO.random_weights(cfg, seed=int(rng.integers(0, 1000)))
    bw = {k[len("backbone.layers.0."):]: v for k, v in w.items()
          if k.startswith("backbone.layers.0.")}
    cls = Mamba1Block if fam == "mamba1" else Mamba2Block
    d = cfg["hidden_size"]
    kw = dict(d_model=d)
    B, L = int(rng.integers(0, 3)), int(rng.integers(0, 5))
    x = rng.standard_normal((B, L, d)).astype(F32)
    kind = int(rng.integers(0, 9))
    expect, names, label, xin = "error", (), "", x
    if kind in (0, 1, 2):
        expect, label = "ok", "valid"
    elif kind == 3:
        k, v = _pick(rng, [("d_model", 0), ("d_model", -1), ("d_model", 1.5), ("d_model", True),
                           ("d_model", "8"), ("d_model", None), ("weight_format", "int4"),
                           ("numeric_profile", "fixed15_v1"), ("numeric_profile", "int8_v1")])
        kw[k] = v
        label, names = f"{k}={v!r}", (k, repr(v), "family", "int8_v1")
    elif kind == 4:
        bw = dict(bw)
        how = _pick(rng, ["unknown", "missing", "shape", "f64", "nan"])
        n = _pick(rng, sorted(bw))
        if how == "unknown":
            bw["mixer.extra"] = np.zeros(2, F32)
            n = "mixer.extra"
        elif how == "missing":
            del bw[n]
        elif how == "shape":
            bw[n] = np.zeros(bw[n].shape + (1,), F32)
        elif how == "f64":
            bw[n] = bw[n].astype(np.float64)
        else:
            a = bw[n].copy()
            a.reshape(-1)[0] = np.nan
            bw[n] = a
        label, names = f"weights {how} {n}", (n,)
    elif kind == 5:
        bw = _pick(rng, [None, list(bw.items()), "w"])
        label, names = f"weights {type(bw).__name__}", ("dict",)
    elif kind == 6:
        xin = _pick(rng, [x.astype(np.float64), x[..., :-1], None, "x", x.reshape(-1, d)])
        label, names = f"x {type(xin).__name__}", ("float32", "batch", "x")
    else:
        # a model's state changed from outside, then stepped: refused, and the state is
        # the model's own arrays (arrays()) when left alone
        path = os.path.join(tmp, f"mamba-{fam}")
        if not os.path.exists(path):
            SO.write_checkpoint(path, dict(cfg), w)
        lm = CausalLM.load(path)
        st = lm.allocate_state(1, 4)
        how = _pick(rng, ["h dtype", "conv shape", "none"])
        if how == "h dtype":
            st.h = st.h.astype(np.float64)
        elif how == "conv shape":
            st.conv = st.conv[:, :, :-1]

        def call_state():
            if how == "none":
                out = lm.step([[1]], st)
                assert set(st.arrays()) >= {"state.conv", "state.h"}
                assert st.arrays()["state.h"] is st.h
                return out
            return lm.step([[1]], st)

        return Case(f"models.mamba {fam} state {how}", call_state,
                    "ok" if how == "none" else "error", None, ("changed from outside",))

    def call():
        blk = cls(bw, **kw)
        return blk, blk(xin)

    def check(res):
        blk_, out = res
        assert out.dtype == F32 and out.shape == x.shape
        if x.size:
            oc = SO.load_config(dict(cfg))
            p = {k[len("mixer."):]: v for k, v in bw.items() if k.startswith("mixer.")}
            xn = SO.rmsnorm_lanes(x, bw["norm.weight"])
            mixer = SO.mamba1_mixer if fam == "mamba1" else SO.mamba2_mixer
            want, _ = mixer(p, oc, xn, SO.init_state(oc, B)[0])
            _same_as_oracle(out, SO.add(x, want), "mamba block vs oracle")

    return Case(f"models.mamba {fam} {B}x{L} {label}", call, expect, check, names)


def gen_models_tokenizer(rng, tmp):
    """Tokenizer.load / encode / decode / check_model: hostile paths, texts and ids
    (floats, bools, outside the vocabulary, 2-D); good calls give the tokenizers
    package's own answers."""
    from mojolearn.models import Tokenizer

    t = _tiny("a")
    vocab = t["cfg"]["vocab_size"]
    tok = Tokenizer.load(t["tokenizer"])
    n = int(rng.integers(1, 6))
    ids = rng.integers(0, vocab, size=(1, n))
    kind = int(rng.integers(0, 8))
    if kind == 0:
        p = _pick(rng, [None, 3, b"x", "", "a\0b", os.path.join(tmp, "none.json"), tmp,
                        os.path.join(t["path"], "config.json"),
                        os.path.join(t["path"], "model.safetensors")])
        if p in (os.path.join(t["path"], "config.json"), os.path.join(t["path"], "model.safetensors")):
            names = (repr(p),)
        elif not isinstance(p, str) or "\0" in p:
            names = ("path",)
        else:
            names = (repr(os.path.join(p, "tokenizer.json") if p == tmp else p),)
        return Case(f"models.Tokenizer.load {p!r:.40}", lambda: Tokenizer.load(p), "error",
                    None, names)
    if kind == 1:
        v = _pick(rng, [None, 3, b"w1", ["w1"]])
        return Case(f"models.Tokenizer.encode {type(v).__name__}", lambda: tok.encode(v),
                    "error", None, ("text",))
    if kind == 2:
        text = " ".join(f"w{i}" for i in ids[0])

        def check(got):
            assert got == ids[0].tolist(), (got, ids)
        return Case("models.Tokenizer.encode valid", lambda: tok.encode(text), "ok", check)
    if kind == 3:
        obj, how = _ids_form(rng, ids)
        if np.ndim(obj) == 2:  # one sequence of the same form
            obj = list(obj[0]) if isinstance(obj, (list, tuple)) else np.asarray(obj)[0]

        def check(got):
            assert got == tok._tk.decode(ids[0].tolist(), skip_special_tokens=False)
        return Case(f"models.Tokenizer.decode {how}", lambda: tok.decode(obj), "ok", check)
    if kind in (4, 5):
        obj, label, names = _ids_bad(rng, ids, vocab)
        if label.endswith(" tokens"):  # long is fine for a tokenizer: make it 2-D
            obj, label, names = ids.reshape(1, 1, -1)[0], "2-D", (str((1, n)),)
            obj = np.vstack([obj, obj])
            names = (str(obj.shape),)
        elif label.startswith("empty"):  # no id is a valid text (""): make it 2-D
            obj, names = np.zeros((2, 0), np.int64), ("(2, 0)",)
        elif isinstance(obj, list) and len(obj) == 1 and isinstance(obj[0], list):
            obj = obj[0]
        elif isinstance(obj, np.ndarray) and obj.ndim == 2 and obj.shape[0] == 1:
            obj = obj[0]
        if isinstance(obj, list) and obj and all(isinstance(r, list) for r in obj):
            names = names + ("shape (1, 1)",)  # [[1]] left after the one id became [1]
        return Case(f"models.Tokenizer.decode {label}", lambda: tok.decode(obj), "error",
                    None, names)
    if kind == 6:
        m = _pick(rng, [None, "lm", object()])
        return Case(f"models.Tokenizer.check_model {type(m).__name__}",
                    lambda: tok.check_model(m), "error", None, ("CausalLM",))
    return Case("models.Tokenizer.check_model of the model", lambda: tok.check_model(_lm("a")),
                "ok", lambda r: None)



# ---------------------------------------------------------------- the table

def _one_rank_group():
    """A torch.distributed process group of this process alone (gloo, an in-memory
    store): ParallelCausalLM runs in it as on one rank of torchrun."""
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)


def gen_models_parallel(rng, tmp):
    """ParallelCausalLM on a process group of one rank (every layout that allows one):
    forward / step / generate with ids of every accepted form give CausalLM's bits,
    states saved by either model resume in the other; hostile ids, states of another
    model, and bad load arguments are refused by name. The group is made and the
    models loaded when the case runs (in the fuzz child), not when it is drawn."""
    from mojolearn.models import ParallelCausalLM

    prof, fmt = _pick(rng, PROFILES), _pick(rng, FORMATS)
    t = _tiny("a")
    vocab = t["cfg"]["vocab_size"]
    layout_ = _pick(rng, ["pipeline", "tensor"])
    B, L = int(rng.integers(1, 3)), int(rng.integers(1, 6))
    ids = rng.integers(0, vocab, size=(B, L))
    fault = int(rng.integers(0, 9))
    label = f"models.parallel {layout_} {prof} {fmt} ids {B}x{L} fault={fault}"
    models = {}

    def lm():
        if "p" not in models:
            _one_rank_group()
            models["p"] = ParallelCausalLM.load(t["path"], layout=layout_, numeric_profile=prof,
                                                weight_format=fmt)
            models["ref"] = _lm("a", prof, fmt)
        return models["p"]

    def ref():
        lm()
        return models["ref"]

    if fault == 1:  # a bad load argument
        kw = _pick(rng, [{"layout": "rows"}, {"layout": 3}, {"timeout": 0}, {"timeout": "5"},
                         {"tensor_size": 2}, {"numeric_profile": "fp64"},
                         {"weight_format": "int4"}, {"layout": "pipeline+tensor"}])
        names = tuple(kw) + ("tensor_size",)

        def call():
            _one_rank_group()
            return ParallelCausalLM.load(t["path"], **dict({"layout": layout_}, **kw))
        return Case(label + f" load {kw}", call, "error", None, names)
    if fault == 2:
        bad = _pick(rng, [3, None, b"x"])
        return Case(label + f" path {bad!r}", lambda: ParallelCausalLM.load(bad), "error", None,
                    ("path",))
    if fault == 3:  # hostile ids
        obj, lab, names = _ids_bad(rng, ids, vocab)
        return Case(label + " " + lab, lambda: lm().forward(obj), "error", None, names)
    if fault == 4:  # a CausalLM state, or no state at all
        which = _pick(rng, ["causal", "dict", "none"])

        def call():
            st = {"causal": lambda: ref().allocate_state(B, 8), "dict": lambda: {"length": 0},
                  "none": lambda: None}[which]()
            return lm().step(ids, st)
        return Case(label + f" state {which}", call, "error", None, ("state",))
    if fault == 5:  # states across the two models
        path = os.path.join(tmp, "st.safetensors")

        def call():
            st = lm().allocate_state(B, 12)
            lm().forward(ids, st)
            lm().save_state(path, st)
            rs = ref().resume(path)
            return ref().step(ids[:, :1], rs), lm().step(ids[:, :1], lm().resume(path))
        return Case(label + " states", call, "ok",
                    lambda r: _same_logits(r[1], r[0], "resumed parallel vs CausalLM"))
    if fault == 6:
        seed = int(rng.integers(0, 100))
        return Case(label + f" sampled seed {seed}",
                    lambda: lm().generate(ids, 3, greedy=False, seed=seed), "ok",
                    lambda r: np.testing.assert_array_equal(
                        r, ref().generate(ids, 3, greedy=False, seed=seed)))
    obj, how = _ids_form(rng, ids)
    via = _pick(rng, ["forward", "__call__"])
    return Case(label + f" as {how} via {via}", lambda: getattr(lm(), via)(obj), "ok",
                lambda r: _same_logits(r, ref().forward(ids), "parallel vs CausalLM"))



# ---------------------------------------------------------------- mojolearn.training
# The training face (python/mojolearn/training.py) under fp32_v1. Valid calls on small
# shapes give the bits of the independent oracle tests/training_oracle.py (the trainer:
# the model oracle's logits through the oracle's cross entropy, and the bits of a fresh
# trainer for splits, saves and resumes). Bad calls (wrong dtypes, ranks and shapes,
# NaN/inf, strided or read-only arrays written in place, out-of-range ids and targets,
# torch-only keywords, misaligned splits, bad schedules) are refused by name, and then
# (the case's ``after``) whatever the call was handed is as it was.


def _tr_vals(rng, shape, scale=1.0, edges=0.1):
    """Finite float32 values of varied magnitude, some -0, +0 and subnormals (flushed)."""
    x = rng.standard_normal(shape) * scale * np.exp2(rng.integers(-3, 4, shape))
    x = np.asarray(x, dtype=F32)
    if edges and x.size:
        mask = rng.random(shape) < edges
        sub = np.array([0x00000123], np.uint32).view(F32)[0]
        x[mask] = rng.choice(np.array([0.0, -0.0, sub, -sub, 1.0, -1.0], F32), int(mask.sum()))
    return np.asarray(x, dtype=F32)


def _tr_same(got, want, what):
    from tests.bits import assert_same_bits

    got = np.asarray(got)
    assert got.dtype == F32, f"{what}: got dtype {got.dtype}"
    assert_same_bits(got, np.asarray(want, dtype=F32), what)


def _tr_scalar(got, want, what):
    g = np.asarray(got)
    assert g.dtype in (np.float32, np.float64) and g.size == 1, f"{what}: got {got!r}"
    if g.dtype == np.float64:
        assert float(np.float32(g)) == float(g) or np.isnan(g), f"{what}: not a float32 value"
    _tr_same(np.asarray(g, F32).reshape(()), np.asarray(want, F32).reshape(()), what)


def _tr_unchanged(arrays, what):
    """An ``after`` check: the arrays (a list) still hold the bits they held now."""
    keep = [np.array(a, copy=True) for a in arrays]

    def after():
        for j, (a, k) in enumerate(zip(arrays, keep)):
            a = np.asarray(a)
            assert a.dtype == k.dtype and a.shape == k.shape and a.tobytes() == k.tobytes(), \
                f"{what}[{j}] changed by the call"
    return after


def _tr_hostile(rng, x, name, fn, shapes=True):
    """A hostile stand-in for the float32 input ``x`` called ``name``: (object, label,
    names the refusal must use). ``shapes``: also a wrong rank or shape (named by
    ``fn``); off where another shape is a valid input."""
    k = int(rng.integers(0, 6 if shapes else 4))
    if k == 0:
        d = np.dtype(_pick(rng, [np.float64, np.float16, np.int32, np.int64, np.bool_,
                                 np.uint8, ">f4", np.complex64]))
        with np.errstate(all="ignore"):
            return x.astype(d), f"{name} {d}", (f"{name} has dtype {d}",)
    if k == 1:
        v = _pick(rng, [x.tolist(), None, 3.0, "x", memoryview(np.ascontiguousarray(x))])
        return v, f"{name} as {type(v).__name__}", (f"{name} must be a float32 numpy array",)
    if k in (2, 3) and x.size:
        y = x.copy()
        i = int(rng.integers(0, y.size))
        v = F32(_pick(rng, [np.nan, np.inf, -np.inf]))
        y.reshape(-1)[i] = v
        return y, f"{name} {v} at {i}", (f"{name} holds a non-finite value ({v}) at flat "
                                          f"index {i}",)
    if k in (2, 3):  # empty: a wrong dtype instead
        return x.astype(np.float64), f"{name} float64", (f"{name} has dtype float64",)
    # a wrong rank or shape (a trailing axis of 1 only where the last dim is not 1)
    opts = [np.asarray(x.reshape(-1)[0] if x.size else F32(0), dtype=F32).reshape(()),
            np.concatenate([x, x[..., :1]], axis=-1)]
    if x.shape[-1] != 1:
        opts.append(x[..., None])
    y = _pick(rng, opts)
    return y, f"{name} shape {y.shape}", (fn,)


def _tr_dims(rng, lo=1, hi=7):
    return int(rng.integers(lo, hi)) if rng.random() > 0.1 else int(rng.integers(hi, 140))


def gen_training_primitives(rng, tmp):
    """linear, RMSNorm, embedding forward/backward, cross entropy, the chunked LM head,
    bias_backward, clip_grad_norm_, accumulate_grads, aligned_split and splits_that_work:
    the oracle's bits on valid calls (inputs in any layout: strided and read-only inputs
    are read, never written); hostile arrays, ids, targets and keywords refused by name
    with nothing written."""
    from mojolearn import training as T
    from tests import training_oracle as TO

    op = _pick(rng, ["linear_forward", "linear_backward", "rms_norm_forward",
                     "rms_norm_backward", "embedding_forward", "embedding_backward",
                     "cross_entropy", "chunked_lm_head_loss", "bias_backward",
                     "clip_grad_norm_", "accumulate_grads", "aligned_split"])
    fault = rng.random() < 0.55
    fn = getattr(T, op)

    def view(x):  # an accepted input layout (never written): strided, F, read-only
        k = int(rng.integers(0, 5))
        if k == 1 and x.ndim:
            big = np.zeros(x.shape[:-1] + (2 * x.shape[-1],), F32)
            big[..., ::2] = x
            return big[..., ::2]
        if k == 2:
            return np.asfortranarray(x)
        if k == 3:
            y = x.copy()
            y.setflags(write=False)
            return y
        return x.copy()

    def case(label, args, kw, want_fn, check_fn, names=(), expect=None, inputs=()):
        exp = expect or ("error" if names else "ok")
        inputs = [a for a in list(args) + list(kw.values()) if isinstance(a, np.ndarray)] \
            if not inputs else inputs
        after = _tr_unchanged(inputs, f"{op} inputs")
        return Case(f"training.{op} {label}", lambda: fn(*args, **kw), exp,
                    None if exp != "ok" else (lambda r: check_fn(r, want_fn())), names,
                    after=after)

    def bad_arg(args, names_, shape_msg, shapes=True):
        j = int(rng.integers(0, len(args)))
        obj, lab, nm = _tr_hostile(rng, args[j], names_[j], shape_msg, shapes)
        out = list(args)
        out[j] = obj
        return out, lab, nm

    if op in ("linear_forward", "linear_backward"):
        lead = (_tr_dims(rng),) if rng.random() < 0.7 else (_tr_dims(rng, 1, 3), _tr_dims(rng, 1, 4))
        K_, N = _tr_dims(rng), _tr_dims(rng)
        a, w = _tr_vals(rng, lead + (K_,)), _tr_vals(rng, (N, K_))
        if op == "linear_forward":
            args, nm = [a, w], ["a", "weight"]
            want = lambda: TO.linear_forward(a, w)  # noqa: E731
            chk = lambda r, e: _tr_same(r, e, "linear_forward vs oracle")  # noqa: E731
        else:
            dc = _tr_vals(rng, lead + (N,))
            args, nm = [dc, a, w], ["dc", "a", "weight"]
            want = lambda: TO.linear_backward(dc, a, w)  # noqa: E731

            def chk(r, e):
                _tr_same(r[0], e[0], "da vs oracle")
                _tr_same(r[1], e[1], "dweight vs oracle")
        label = f"{lead}x{K_} -> {N}"
        if not fault:
            return case(label, [view(x) for x in args], {}, want, chk)
        bad, lab, names = bad_arg(args, nm, "mismatch")
        if " shape (" in lab:
            names = ("mismatch", "must be")
        return case(f"{label} {lab}", bad, {}, want, chk, names)

    if op in ("rms_norm_forward", "rms_norm_backward"):
        lead = (_tr_dims(rng),) if rng.random() < 0.7 else ()
        d = _tr_dims(rng)
        x, w = _tr_vals(rng, lead + (d,)), _tr_vals(rng, (d,))
        eps = _pick(rng, [1e-5, 1e-6, 0.0, 0.5, np.float32(1e-5), 1])
        if op == "rms_norm_forward":
            args, nm = [x, w], ["x", "weight"]
            want = lambda: TO.rms_norm_forward(x, w, eps)  # noqa: E731
            chk = lambda r, e: _tr_same(r, e, "rms_norm_forward vs oracle")  # noqa: E731
        else:
            dy = _tr_vals(rng, lead + (d,))
            args, nm = [dy, x, w], ["dy", "x", "weight"]
            want = lambda: TO.rms_norm_backward(dy, x, w, eps)  # noqa: E731

            def chk(r, e):
                _tr_same(r[0], e[0], "dx vs oracle")
                _tr_same(r[1], e[1], "dweight vs oracle")
        label = f"{lead}x{d} eps={eps!r}"
        if not fault:
            return case(label, [view(a) for a in args] + [eps], {}, want, chk)
        if rng.random() < 0.3:
            e = _pick(rng, [-1e-5, float("nan"), float("inf"), "1e-5", None, True])
            nms = ("eps",)
            return case(f"{label} eps={e!r}", list(args) + [e], {}, want, chk, nms)
        bad, lab, names = bad_arg(args, nm, "must")
        return case(f"{label} {lab}", bad + [eps], {}, want, chk, names)

    if op in ("embedding_forward", "embedding_backward"):
        V, d = int(rng.integers(1, 12)), _tr_dims(rng, 1, 6)
        # (0-d ids: the oracle answers (1, d), the API (d,); not compared)
        shape = _pick(rng, [(int(rng.integers(0, 7)),),
                            (int(rng.integers(1, 3)), int(rng.integers(1, 5)))])
        ids = rng.integers(0, V, size=shape)
        ids_in = ids.astype(_pick(rng, [np.int64, np.int32, np.uint8, np.int16])) \
            if rng.random() < 0.7 or not ids.size else ids.tolist()  # ([] reads as float64)
        if op == "embedding_forward":
            weight = _tr_vals(rng, (V, d))
            want = lambda: TO.embedding_forward(weight, ids)  # noqa: E731
            chk = lambda r, e: _tr_same(r, e, "embedding_forward vs oracle")  # noqa: E731
            args = [weight, ids_in]
        else:
            dy = _tr_vals(rng, shape + (d,))
            want = lambda: TO.embedding_backward(dy, ids, V)  # noqa: E731
            chk = lambda r, e: _tr_same(r, e, "embedding_backward vs oracle")  # noqa: E731
            args = [dy, ids_in, V]
        label = f"V={V} d={d} ids {shape}"
        if not fault:
            args[0] = view(args[0])
            return case(label, args, {}, want, chk)
        k = int(rng.integers(0, 4)) if ids.size else 0
        if k == 0:
            bad, lab, names = bad_arg(args[:1], ["weight" if op == "embedding_forward" else "dy"],
                                      "must", shapes=False)
            return case(f"{label} {lab}", bad + args[1:], {}, want, chk, names)
        flat = ids.reshape(-1).copy()
        i = int(rng.integers(0, flat.size))
        if k == 1:
            v = _pick(rng, [V, V + 3, -1, -7])
            flat[i] = v
            return case(f"{label} id {v} at {i}", [args[0], flat.reshape(shape)] + args[2:], {},
                        want, chk, (f"holds the id {v} at flat index",))
        if k == 2:
            d_ = np.dtype(_pick(rng, [np.float32, np.float64, np.bool_]))
            return case(f"{label} ids {d_}", [args[0], ids.astype(d_)] + args[2:], {}, want, chk,
                        (f"ids has dtype {d_}",))
        if op == "embedding_backward":
            v = _pick(rng, [0, -1, True, 2.0, "5", None])
            return case(f"{label} vocab={v!r}", args[:2] + [v], {}, want, chk, ("vocab",))
        u = ids.astype(np.uint64)
        u.reshape(-1)[i] = np.uint64(2 ** 63 + 5)
        return case(f"{label} uint64 past int64", [args[0], u], {}, want, chk,
                    ("holds an id outside",))

    if op == "cross_entropy":
        N, V = _tr_dims(rng, 1, 6), _tr_dims(rng, 1, 9)
        logits = _tr_vals(rng, (N, V), scale=2.0)
        tg = rng.integers(0, V, size=N)
        ign = _pick(rng, [-100, -100, V + 1, 0])
        drop = rng.random(N) < 0.3
        tg[drop] = ign
        red = _pick(rng, ["mean", "sum", "none"])
        if red == "mean" and not (tg != ign).any():
            tg[0] = V - 1 if ign != V - 1 else 0
            if tg[0] == ign:
                red = "sum"
        kw = dict(ignore_index=ign, reduction=red,
                  label_smoothing=_pick(rng, [0.0, 0.0, 0.1, 0.5, 0.9]),
                  num_items=_pick(rng, [None, None, 3, 0]) if red == "sum" else None,
                  return_grad=bool(rng.random() < 0.5) and red != "none")
        want = lambda: TO.cross_entropy(logits, tg, **kw)  # noqa: E731

        def chk(r, e):
            if kw["return_grad"]:
                _tr_scalar(r[0], e[0], "loss vs oracle")
                _tr_same(r[1], e[1], "grad vs oracle")
            elif red == "none":
                _tr_same(r, e, "row losses vs oracle")
            else:
                _tr_scalar(r, e, "loss vs oracle")
        label = f"{N}x{V} {kw}"
        if not fault:
            return case(label, [view(logits), tg.astype(_pick(rng, [np.int64, np.int32, np.int8]))],
                        kw, want, chk)
        k = int(rng.integers(0, 7))
        if k == 0:
            bad, lab, names = bad_arg([logits], ["logits"], "logits", shapes=False)
            return case(f"{label} {lab}", bad + [tg], kw, want, chk, names)
        if k == 1:
            t2 = tg.copy()
            i = int(rng.integers(0, N))
            v = _pick(rng, [V, V + 5, -1, -3])
            t2[i] = v
            if v == ign:
                v = t2[i] = V + 7
            return case(f"{label} target {v} at {i}", [logits, t2], kw, want, chk,
                        (f"target {v} at row", "zero counted rows"))
        if k == 2:
            t2 = _pick(rng, [tg.astype(np.float32), tg.astype(bool), logits.copy()])
            return case(f"{label} targets {t2.dtype} {t2.shape}", [logits, t2], kw, want, chk,
                        ("targets",))
        if k == 3:
            name = _pick(rng, ["weight", "size_average", "reduce", "pos_weight", "foreach"])
            kw2 = dict(kw, **{name: _pick(rng, [None, np.ones(V, F32), True])})
            return case(f"{label} {name}=", [logits, tg], kw2, want, chk, (f"{name}=", repr(name)))
        if k == 4:
            key, v, nms = _pick(rng, [("reduction", "avg", ("reduction",)),
                                      ("reduction", None, ("reduction",)),
                                      ("label_smoothing", 1.0, ("label_smoothing",)),
                                      ("label_smoothing", -0.1, ("label_smoothing",)),
                                      ("label_smoothing", float("nan"), ("label_smoothing",)),
                                      ("label_smoothing", "0.1", ("label_smoothing",)),
                                      ("ignore_index", 1.5, ("ignore_index",)),
                                      ("ignore_index", True, ("ignore_index",)),
                                      ("num_items", 2.0, ("num_items",)),
                                      ("num_items", True, ("num_items",))])
            if key == "num_items" and red != "sum":
                return case(f"{label} return_grad with none", [logits, tg],
                            dict(kw, reduction="none", return_grad=True), want, chk,
                            ("reduction='none'",))
            return case(f"{label} {key}={v!r}", [logits, tg], dict(kw, **{key: v}), want, chk, nms)
        if k == 5:
            return case(f"{label} all ignored, mean", [logits, np.full(N, ign)],
                        dict(kw, reduction="mean"), want, chk, ("zero counted rows",))
        return case(f"{label} targets {N + 1} rows", [logits, rng.integers(0, V, N + 1)], kw,
                    want, chk, ("targets",))

    if op == "chunked_lm_head_loss":
        R, W, V = _tr_dims(rng, 1, 6), _tr_dims(rng, 1, 6), int(rng.integers(2, 9))
        h, w = _tr_vals(rng, (R, W)), _tr_vals(rng, (V, W))
        tg = rng.integers(0, V, size=R)
        rg = bool(rng.random() < 0.5)
        want = lambda: TO.chunked_lm_head_loss(h, w, tg, return_grad=rg)  # noqa: E731

        def chk(r, e):
            if rg:
                _tr_scalar(r[0], e[0], "loss vs oracle")
                _tr_same(r[1], e[1], "dh vs oracle")
                _tr_same(r[2], e[2], "dweight vs oracle")
            else:
                _tr_scalar(r, e, "loss vs oracle")
        label = f"{R}x{W} V={V} grad={rg}"
        if not fault:
            return case(label, [view(h), view(w), tg.astype(_pick(rng, [np.int64, np.uint8]))],
                        {"return_grad": rg}, want, chk)
        k = int(rng.integers(0, 6))
        if k == 0:
            bad, lab, names = bad_arg([h, w], ["h", "weight"], "must be")
            if " shape (" in lab:
                names = ("must be", "mismatch")
            return case(f"{label} {lab}", bad + [tg], {"return_grad": rg}, want, chk, names)
        if k == 1:
            t2 = tg.copy()
            i = int(rng.integers(0, R))
            v = _pick(rng, [V, -1, -100])
            t2[i] = v
            return case(f"{label} target {v}", [h, w, t2], {}, want, chk, (f"target {v} at row",))
        if k == 2:
            # (weight= is not fuzzed: here it names the head matrix, a positional parameter)
            name = _pick(rng, ["ignore_index", "label_smoothing", "reduction",
                               "num_items", "foreach"])
            return case(f"{label} {name}=", [h, w, tg], {name: 0}, want, chk,
                        (f"{name}=", repr(name)))
        if k == 3:
            return case(f"{label} V=1", [h, w[:1], np.zeros(R, np.int64)], {}, want, chk,
                        ("V >= 2",))
        if k == 4:
            return case(f"{label} return_grad=1", [h, w, tg], {"return_grad": 1}, want, chk,
                        ("return_grad",))
        t2 = _pick(rng, [tg.astype(np.float64), tg[:-1] if R > 1 else tg[:0], tg.astype(bool)])
        return case(f"{label} targets {t2.dtype} {t2.shape}", [h, w, t2], {}, want, chk,
                    ("targets",))

    if op == "bias_backward":
        shape = _pick(rng, [(_tr_dims(rng),), (_tr_dims(rng), _tr_dims(rng)),
                            (2, _tr_dims(rng, 1, 4), _tr_dims(rng))])
        dy = _tr_vals(rng, shape)
        want = lambda: TO.bias_backward(dy.reshape(-1, shape[-1]))  # noqa: E731
        chk = lambda r, e: _tr_same(r, e, "bias_backward vs oracle")  # noqa: E731
        if not fault:
            return case(f"{shape}", [view(dy)], {}, want, chk)
        if rng.random() < 0.15:
            return case(f"{shape} 0-d", [np.array(dy.reshape(-1)[0], F32).reshape(())], {}, want,
                        chk, ("0-d",))
        bad, lab, names = bad_arg([dy], ["dy"], "dy", shapes=False)
        return case(f"{shape} {lab}", bad, {}, want, chk, names)

    if op == "clip_grad_norm_":
        n = int(rng.integers(1, 4))
        grads = [_tr_vals(rng, (_tr_dims(rng),) if rng.random() < 0.5 else
                          (_tr_dims(rng, 1, 4), _tr_dims(rng, 1, 5)),
                          scale=float(_pick(rng, [1e-3, 1.0, 100.0]))) for _ in range(n)]
        orig = [g.copy() for g in grads]
        mx = _pick(rng, [1.0, 0.5, 1e-3, 1e6, 2, np.float32(0.25)])
        label = f"{n} grads {[g.shape for g in grads]} max_norm={mx!r}"
        if not fault:
            def chk(r, e):
                _tr_scalar(r, e[0], "total vs oracle")
                for j, (g, ge) in enumerate(zip(grads, e[1])):
                    _tr_same(g, ge, f"clipped grads[{j}] vs oracle")
            return case(label, [grads, mx], {}, lambda: TO.clip_grad_norm(orig, mx), chk,
                        inputs=[np.zeros(1)])
        k = int(rng.integers(0, 5))
        j = int(rng.integers(0, n))
        after_inputs = list(grads)
        if k == 0:
            obj, lab, names = _tr_hostile(rng, grads[j], f"grads[{j}]", "x", shapes=False)
            if rng.random() < 0.3 and grads[j].size > 1:  # written in place: strided refused
                # (a size-1 view is C-contiguous for numpy)
                big = np.zeros(grads[j].shape + (2,), F32)
                big[..., 0] = grads[j]
                obj, lab, names = big[..., 0], f"grads[{j}] strided", (f"grads[{j}] is strided",)
            gl = list(grads)
            gl[j] = obj
            return case(f"{label} {lab}", [gl, mx], {}, None, None, names, inputs=after_inputs)
        if k == 1:
            gl = list(grads)
            ro = grads[j].copy()
            ro.setflags(write=False)
            gl[j] = ro
            return case(f"{label} grads[{j}] read-only", [gl, mx], {}, None, None,
                        (f"grads[{j}] is read-only",), inputs=after_inputs + [ro])
        if k == 2:
            v = _pick(rng, [0, -1.0, float("nan"), "1", None, True])
            return case(f"{label} max_norm={v!r}", [grads, v], {}, None, None, ("max_norm",),
                        inputs=after_inputs)
        if k == 3:
            key, v = _pick(rng, [("norm_type", 1.0), ("norm_type", float("inf")),
                                 ("error_if_nonfinite", False), ("foreach", True),
                                 ("fused", True)])
            return case(f"{label} {key}={v!r}", [grads, mx], {key: v}, None, None,
                        (key,), inputs=after_inputs)
        big = [g.copy() for g in grads]  # finite, but the total overflows
        big[j].reshape(-1)[0] = F32(3e38)
        if big[j].size == 1 and n == 1:
            big.append(np.full((2,), 3e38, F32))
        else:
            big[j].reshape(-1)[-1] = F32(-3e38) if big[j].size > 1 else big[j].reshape(-1)[-1]
            big.append(np.full((2,), 3e38, F32))
        return case(f"{label} total overflows", [big, mx], {}, None, None,
                    ("not finite",), inputs=big)

    if op == "accumulate_grads":
        tokens = _pick(rng, [128, 256, 512, 1024, 2048])
        ok = T.splits_that_work(tokens)
        A = _pick(rng, ok)
        shapes = [(_tr_dims(rng, 1, 5),) if rng.random() < 0.5 else
                  (_tr_dims(rng, 1, 3), _tr_dims(rng, 1, 4)) for _ in range(int(rng.integers(1, 4)))]
        mg = [[_tr_vals(rng, s) for s in shapes] for _ in range(A)]
        label = f"tokens={tokens} A={A} shapes={shapes}"

        def chk(r, e):
            assert len(r) == len(e), f"{len(r)} arrays, want {len(e)}"
            for j, (g, ge) in enumerate(zip(r, e)):
                _tr_same(g, ge, f"accumulated[{j}] vs oracle")
        want = lambda: TO.accumulate_grads(mg)  # noqa: E731
        flat = [g for m in mg for g in m]
        if not fault:
            return case(label, [[list(m) for m in mg], tokens], {}, want, chk, inputs=flat)
        k = int(rng.integers(0, 5))
        if k == 0:  # not an aligned split: A not a power of two, or misaligned
            bad_a = _pick(rng, [a for a in (2, 3, 4, 5, 6, 8, 16, 32) if a not in ok])
            mg2 = [[_tr_vals(rng, s) for s in shapes] for _ in range(bad_a)]
            return case(f"tokens={tokens} A={bad_a}", [mg2, tokens], {}, want, chk,
                        ("micro-batches",), inputs=[g for m in mg2 for g in m])
        if k == 1:
            v = _pick(rng, [0, -128, True, 256.0, "256", None])
            return case(f"{label} tokens={v!r}", [mg, v], {}, want, chk, ("tokens",), inputs=flat)
        if k == 2:
            i, j = int(rng.integers(0, A)), int(rng.integers(0, len(shapes)))
            obj, lab, names = _tr_hostile(rng, mg[i][j], f"microbatch_grads[{i}][{j}]",
                                          "microbatch_grads", shapes=A > 1 and i > 0)
            mg2 = [[obj if (ii, jj) == (i, j) else g for jj, g in enumerate(m)]
                   for ii, m in enumerate(mg)]
            return case(f"{label} {lab}", [mg2, tokens], {}, want, chk, names, inputs=flat)
        if k == 3:
            v = _pick(rng, [[], np.zeros((2, 3), F32), "grads", None])
            return case(f"{label} microbatch_grads {type(v).__name__}", [v, tokens], {}, want,
                        chk, ("microbatch_grads",), inputs=flat)
        if A == 1:
            return case(f"{label} list of arrays", [mg[0], tokens], {}, want, chk,
                        ("microbatch_grads",), inputs=flat)
        mg2 = [list(m) for m in mg]
        mg2[-1] = mg2[-1][:-1] if len(shapes) > 1 else [np.zeros(shapes[0] + (1,), F32)]
        return case(f"{label} ragged", [mg2, tokens], {}, want, chk, ("microbatch_grads",),
                    inputs=flat)

    # aligned_split and splits_that_work: the oracle's predicate
    tokens = int(_pick(rng, [1, 64, 127, 128, 129, 256, 300, 384, 512, 768, 1024, 4096,
                             131072, 131200, 262144, int(rng.integers(1, 5000))]))
    A = int(_pick(rng, [1, 2, 3, 4, 8, 16, 64, 0, -2]))
    if rng.random() < 0.5:
        want = [a for a in (2 ** i for i in range(20)) if a <= max(1, tokens)
                and TO.aligned_split(tokens, a)]
        return Case(f"training.splits_that_work({tokens})", lambda: T.splits_that_work(tokens),
                    "ok", lambda r: _check_eq(list(r), want, "splits_that_work vs oracle"))
    if rng.random() < 0.2:  # a count that is not an int: refused by name
        bad = _pick(rng, ["x", 2.0, 256.0, True, None])
        if rng.random() < 0.5:
            return Case(f"training.splits_that_work({bad!r})", lambda: T.splits_that_work(bad),
                        "error", None, ("tokens",))
        return Case(f"training.aligned_split(256, {bad!r})", lambda: T.aligned_split(256, bad),
                    "error", None, ("must be an int",))
    want = bool(TO.aligned_split(tokens, A)) if A >= 1 else False
    return Case(f"training.aligned_split({tokens}, {A})", lambda: T.aligned_split(tokens, A), "ok",
                lambda r: _check_eq(r, want, "aligned_split vs oracle"))


def _check_eq(got, want, what):
    assert got == want and type(got) is type(want), f"{what}: got {got!r}, want {want!r}"


_SCHEDS = ("ConstantLR", "WarmupLinearLR", "WarmupCosineLR")


def _tr_schedule(rng, mod):
    """(a schedule of ``mod`` (mojolearn.training or the oracle), its arguments)."""
    kind = _pick(rng, _SCHEDS)
    peak = float(_pick(rng, [0.1, 1e-3, 3e-4, 0.05, 1.0]))
    W = int(rng.integers(0, 4))
    if kind == "ConstantLR":
        args = (peak, W)
    else:
        args = (peak, W, W + int(rng.integers(1, 8)), float(_pick(rng, [0.0, 1e-5, 0.01])))
    return kind, args


def gen_training_optimizers(rng, tmp):
    """SGD, Adam, AdamW (step, step_accumulated, state_dict, load_state_dict) and the
    schedules (lr_at, to_dict, from_dict, schedule_from_dict): a few steps give the
    oracle's parameters bit for bit; a state_dict loaded into a new optimizer continues
    with the same bits; hostile hyperparameters, torch-only keywords, gradients,
    parameters and state dicts are refused by name with the parameters, gradients and
    state untouched."""
    from mojolearn import training as T
    from tests import training_oracle as TO

    kind = _pick(rng, ["SGD", "Adam", "AdamW"])
    shapes = [(int(rng.integers(1, 6)),) if rng.random() < 0.5 else
              (int(rng.integers(1, 4)), int(rng.integers(1, 5))) for _ in range(int(rng.integers(1, 4)))]
    p0 = [_tr_vals(rng, s) for s in shapes]
    if kind == "SGD":
        mu = float(_pick(rng, [0.0, 0.9, 0.5]))
        nest = bool(mu and rng.random() < 0.3)
        kw = dict(lr=float(_pick(rng, [0.1, 1e-3, 0.5])), momentum=mu,
                  dampening=0.0 if nest else float(_pick(rng, [0.0, 0.1])),
                  weight_decay=float(_pick(rng, [0.0, 0.01])), nesterov=nest,
                  maximize=bool(rng.random() < 0.2))
    else:
        kw = dict(lr=float(_pick(rng, [1e-3, 0.01, 0.1])),
                  betas=_pick(rng, [(0.9, 0.999), (0.8, 0.99), (0.0, 0.5)]),
                  # (eps 0 with a zero gradient: 0/0, a NaN parameter the next step refuses)
                  eps=float(_pick(rng, [1e-8, 1e-6, 0.5])),
                  weight_decay=float(_pick(rng, [0.0, 0.01, 0.1])),
                  maximize=bool(rng.random() < 0.2))
    sched = None
    if rng.random() < 0.4:
        sk, sargs = _tr_schedule(rng, T)
        sched = (sk, sargs)
    nsteps = int(rng.integers(1, 4))
    grads = [[_tr_vals(rng, s) for s in shapes] for _ in range(nsteps + 1)]
    max_norm = _pick(rng, [None, None, 1.0, 0.1])
    label = f"training.{kind} {kw} sched={sched} shapes={shapes} steps={nsteps} max_norm={max_norm}"

    def make(mod, params, **over):
        s = None if sched is None else getattr(mod, sched[0])(*sched[1])
        return getattr(mod, kind)(params, **dict(kw, lr_schedule=s, **over))

    def oracle_after(n, steps=None):
        o = make(TO, [p.copy() for p in p0])
        for g in (steps or grads)[:n]:
            ps, _ = o.step([x.copy() for x in g], max_norm)
        return o, ps

    what = int(rng.integers(0, 12))
    if what == 0:  # straight steps vs the oracle
        params = [p.copy() for p in p0]

        def call():
            opt = make(T, params)
            for g in grads[:nsteps]:
                opt.step([x.copy() for x in g], max_norm=max_norm)
            return opt

        def check(opt):
            o, ps = oracle_after(nsteps)
            for j, (p, q) in enumerate(zip(params, ps)):
                _tr_same(p, q, f"params[{j}] after {nsteps} steps vs oracle")
            assert opt.t == nsteps
            sd, osd = opt.state_dict(), o.state_dict()
            if kind != "SGD" or kw["momentum"]:
                _tr_same(sd["exp_avg"], osd["exp_avg"], "exp_avg vs oracle")
            if kind != "SGD":
                _tr_same(sd["exp_avg_sq"], osd["exp_avg_sq"], "exp_avg_sq vs oracle")
            np.testing.assert_array_equal(sd["buf_initialized"], osd["buf_initialized"])
        return Case(label, call, "ok", check)
    if what == 1:  # state_dict round trip: load into a fresh optimizer, then one step
        params = [p.copy() for p in p0]

        def call():
            opt = make(T, params)
            for g in grads[:nsteps]:
                opt.step([x.copy() for x in g], max_norm=max_norm)
            sd = opt.state_dict()
            sd2 = dict(sd)
            if rng_list:  # other accepted forms: t as a numpy int, moments 2-D
                sd2.update(t=np.int64(sd["t"]), exp_avg=sd["exp_avg"].reshape(1, -1))
            other = make(T, [p.copy() for p in params])
            other.load_state_dict(sd2)
            opt.step([x.copy() for x in grads[nsteps]], max_norm=max_norm)
            other.step([x.copy() for x in grads[nsteps]], max_norm=max_norm)
            return opt, other
        rng_list = bool(rng.random() < 0.3)

        def check(r):
            opt, other = r
            assert other.t == opt.t == nsteps + 1
            for j, (p, q) in enumerate(zip(opt.params, other.params)):
                _tr_same(q, p, f"params[{j}] after load_state_dict + a step vs straight")
            _, ps = oracle_after(nsteps + 1)
            for j, (p, q) in enumerate(zip(opt.params, ps)):
                _tr_same(p, q, f"params[{j}] vs oracle")
        return Case(label + f" state_dict round trip (numpy forms {rng_list})", call, "ok", check)
    if what == 2:  # step_accumulated vs the oracle's tree then step
        tokens = _pick(rng, [128, 256, 512, 1024])
        A = _pick(rng, T.splits_that_work(tokens))
        mg = [[_tr_vals(rng, s) for s in shapes] for _ in range(A)]
        params = [p.copy() for p in p0]

        def call():
            opt = make(T, params)
            opt.step_accumulated([[x.copy() for x in m] for m in mg], tokens, max_norm=max_norm)
            return opt

        def check(opt):
            o = make(TO, [p.copy() for p in p0])
            ps, _ = o.step_accumulated([[x.copy() for x in m] for m in mg], max_norm)
            for j, (p, q) in enumerate(zip(params, ps)):
                _tr_same(p, q, f"params[{j}] after step_accumulated vs oracle")
        return Case(label + f" step_accumulated tokens={tokens} A={A}", call, "ok", check)
    if what == 3:  # schedules: lr_at vs the oracle, to_dict / from_dict round trips
        sk, sargs = _tr_schedule(rng, T)
        ts = [int(t) for t in rng.integers(1, 14, size=4)]

        def call():
            s = getattr(T, sk)(*sargs)
            d = s.to_dict()
            via = _pick(rng, ["from_dict", "schedule_from_dict", "class"])
            s2 = (T.schedule_from_dict(d) if via == "schedule_from_dict" else
                  getattr(T, sk).from_dict(d) if via == "class" else
                  getattr(T, _pick(rng, _SCHEDS)).from_dict(d))
            return s, s2, [s.lr_at(t) for t in ts], [s2.lr_at(t) for t in ts]

        def check(r):
            s, s2, got, got2 = r
            assert type(s2) is type(s) and s2 == s and s2.to_dict() == s.to_dict(), (s, s2)
            o = getattr(TO, sk)(*sargs)
            for t, g, g2 in zip(ts, got, got2):
                want = o.lr_at(t)
                _tr_scalar(g, want, f"{sk}{sargs}.lr_at({t}) vs oracle")
                _tr_scalar(g2, want, f"round-tripped {sk}.lr_at({t})")
        return Case(f"training.{sk}{tuple(sargs)} lr_at {ts}", call, "ok", check)
    if what == 4:  # bad schedules
        sk = _pick(rng, _SCHEDS)
        bad = _pick(rng, [("peak_lr", -0.1), ("peak_lr", float("nan")), ("peak_lr", "0.1"),
                          ("peak_lr", 1e39), ("peak_lr", True), ("warmup_steps", -1),
                          ("warmup_steps", 1.5), ("warmup_steps", True), ("min_lr", -1e-3),
                          ("total_steps", 0), ("total_steps", "total"), ("lr_at", 0),
                          ("lr_at", 1.5), ("lr_at", True), ("lr_at", -2), ("dict", None),
                          ("dict", {"kind": "StepLR", "peak_lr": 0.1}), ("dict", "ConstantLR"),
                          ("dict", {"kind": "WarmupLinearLR", "peak_lr": 0.1}),
                          ("dict", {"kind": "ConstantLR", "peak_lr": 0.1, "x": 1})])
        base = dict(peak_lr=0.1, warmup_steps=2, total_steps=10, min_lr=0.0)
        if sk == "ConstantLR":
            base = dict(peak_lr=0.1, warmup_steps=2)
            if bad[0] in ("total_steps", "min_lr"):
                bad = ("warmup_steps", -3)
        if bad[0] == "total_steps" and bad[1] == 0:
            base["warmup_steps"], names = 3, ("total_steps",)
        names = (bad[0],) if bad[0] not in ("lr_at", "dict") else \
            (("t=",) if bad[0] == "lr_at" else ("schedule_from_dict",))
        if bad[0] == "lr_at":
            return Case(f"training.{sk}.lr_at({bad[1]!r})",
                        lambda: getattr(T, sk)(**base).lr_at(bad[1]), "error", None, names)
        if bad[0] == "dict":
            return Case(f"training.schedule_from_dict({bad[1]!r})",
                        lambda: T.schedule_from_dict(bad[1]), "error", None, names)
        return Case(f"training.{sk}({bad[0]}={bad[1]!r})",
                    lambda: getattr(T, sk)(**dict(base, **{bad[0]: bad[1]})), "error", None,
                    names)
    if what == 5:  # bad constructor arguments
        key, v, names = _pick(rng, [
            ("foreach", True, ("foreach=",)), ("amsgrad", True, ("amsgrad=",)),
            ("fused", False, ("fused=",)), ("capturable", True, ("capturable=",)),
            ("differentiable", True, ("differentiable=",)), ("momentun", 0.9, ("'momentun'",)),
            ("lr", float("nan"), ("lr",)), ("lr", "1e-3", ("lr",)), ("lr", None, ("lr",)),
            ("maximize", 1, ("maximize",)), ("lr_schedule", lambda t: 0.1, ("lr_schedule",)),
            ("lr_schedule", {"kind": "ConstantLR", "peak_lr": 0.1}, ("lr_schedule",)),
            ("weight_decay", float("inf"), ("weight_decay",)), ("weight_decay", "0", ("weight_decay",))]
            + ([("momentum", True, ("momentum",)), ("nesterov", 1, ("nesterov",)),
                ("nesterov", True, ("nesterov",)), ("dampening", float("nan"), ("dampening",))]
               if kind == "SGD" else
               [("betas", (1.0, 0.999), ("beta1",)), ("betas", (0.9, 1.0), ("beta2",)),
                ("betas", (0.9, 0.99999999), ("beta2",)), ("betas", (-0.1, 0.9), ("beta1",)),
                ("betas", (0.9,), ("betas",)), ("betas", 0.9, ("betas",)),
                ("eps", -1e-8, ("eps",)), ("eps", True, ("eps",))]))
        over = {key: v}
        if key == "nesterov" and v is True:
            over["momentum"] = 0.0
        params = [p.copy() for p in p0]
        return Case(label + f" {key}={v!r}", lambda: make(T, params, **over) if key !=
                    "lr_schedule" else getattr(T, kind)(params, **dict(kw, lr_schedule=v)),
                    "error", None, names, after=_tr_unchanged(params, "params"))
    if what == 6:  # bad params
        j = int(rng.integers(0, len(p0)))
        k = int(rng.integers(0, 5))
        params = [p.copy() for p in p0]
        if k == 0:
            obj, lab, names = _tr_hostile(rng, p0[j], f"params[{j}]", "x", shapes=False)
            if "non-finite" in names[0]:  # accepted at construction, refused at the step
                params[j] = obj
                opt = make(T, params)
                g = [x.copy() for x in grads[0]]
                return Case(label + f" {lab}, then a step", lambda: opt.step(g), "error", None,
                            names, after=_tr_unchanged(params + g, "params and grads"))
            params[j] = obj
        elif k == 1 and p0[j].size > 1:  # (a size-1 view is C-contiguous)
            big = np.zeros(p0[j].shape + (2,), F32)
            big[..., 0] = p0[j]
            params[j], lab, names = big[..., 0], f"params[{j}] strided", (f"params[{j}] is strided",)
        elif k in (1, 2):
            params[j] = p0[j].copy()
            params[j].setflags(write=False)
            lab, names = f"params[{j}] read-only", (f"params[{j}] is read-only",)
        elif k == 3:
            params = [{"params": params, "lr": 0.1}]
            j, lab, names = 0, "param groups", ("param_groups",)
        else:
            params = _pick(rng, [p0[0].copy(), None, "params", (x for x in p0)])
            lab, names = f"params {type(params).__name__}", ("params must be",)
        return Case(label + f" {lab}", lambda: make(T, params), "error", None, names)
    if what in (7, 8, 9):  # bad gradients / max_norm at a step (after good steps)
        params = [p.copy() for p in p0]
        opt = make(T, params)
        for g in grads[:nsteps - 1]:
            opt.step([x.copy() for x in g], max_norm=max_norm)
        g = [x.copy() for x in grads[nsteps - 1]]
        j = int(rng.integers(0, len(g)))
        k = int(rng.integers(0, 6))
        mx = max_norm
        if k == 0:
            obj, lab, names = _tr_hostile(rng, g[j], f"grads[{j}]", f"grads[{j}] has shape",
                                          shapes=True)
            if " shape (" in lab:
                names = (f"grads[{j}] has shape", f"grads[{j}] has dtype")
            g[j] = obj
        elif k == 1:
            g = g[:-1] if rng.random() < 0.5 else g + [g[0].copy()]
            lab, names = f"{len(g)} grads", (f"{len(g)} gradients",)
        elif k == 2:
            mx = _pick(rng, [0.0, -1.0, float("nan"), "1", True])
            lab, names = f"max_norm={mx!r}", ("max_norm",)
        elif k == 3:  # strided or read-only gradient with max_norm (written back)
            mx = 1.0
            if rng.random() < 0.5 and g[j].size > 1:
                big = np.zeros(g[j].shape + (2,), F32)
                big[..., 0] = g[j]
                g[j], lab, names = big[..., 0], f"grads[{j}] strided", (f"grads[{j}] is strided",)
            else:
                g[j].setflags(write=False)
                lab, names = f"grads[{j}] read-only", (f"grads[{j}] is read-only",)
        elif k == 4:
            g = _pick(rng, [g[0], None, {"g": g[0]}])
            lab, names = f"grads {type(g).__name__}", ("grads must be",)
        else:  # finite gradients whose total norm overflows: refused with max_norm
            mx = 1.0
            g = [np.full(x.shape, 3e38, F32) for x in g]
            lab, names = "total overflows", ("not finite",)
        t0 = opt.t
        sd0 = opt.state_dict()
        held = [x for x in (g if isinstance(g, list) else []) if isinstance(x, np.ndarray)]
        unchanged = _tr_unchanged(params + held, "params and grads")

        def after():
            unchanged()
            assert opt.t == t0, f"t moved to {opt.t}"
            sd = opt.state_dict()
            for key in ("exp_avg", "exp_avg_sq", "buf_initialized"):
                assert np.array_equal(sd[key].view(np.uint8), sd0[key].view(np.uint8)), key
        via = _pick(rng, ["step", "step_accumulated"])
        if via == "step_accumulated" and k in (0, 2):  # (accumulate copies: no k = 3)
            return Case(label + f" step_accumulated(A=1) {lab}",
                        lambda: opt.step_accumulated([g], 128, max_norm=mx), "error", None,
                        names + tuple(n.replace("grads", "microbatch_grads[0]") for n in names)
                        + (("max_norm",) if k == 2 else ()), after=after) \

        return Case(label + f" step {lab}", lambda: opt.step(g, max_norm=mx), "error", None,
                    names, after=after)
    if what == 10:  # bad state dicts
        params = [p.copy() for p in p0]
        opt = make(T, params)
        opt.step([x.copy() for x in grads[0]])
        sd = opt.state_dict()
        n = sum(p.size for p in p0)
        key, v, names = _pick(rng, [
            ("t", -1, ("t must be",)), ("t", 1.5, ("t must be",)), ("t", True, ("t must be",)),
            ("t", None, ("t must be",)), ("exp_avg", np.zeros(n + 1, F32), ("sizes",)),
            ("exp_avg", np.zeros(n, np.float64), ("exp_avg has dtype",)),
            ("exp_avg_sq", np.full(n, np.nan, F32), ("exp_avg_sq holds a non-finite",)),
            ("buf_initialized", np.ones(len(p0), np.int64), ("buf_initialized",)),
            ("buf_initialized", np.ones(len(p0) + 1, np.int32), ("sizes",)),
            ("missing", None, ("missing",)), ("not a dict", None, ("sd must be a dict",))])
        if key == "missing":
            bad = dict(sd)
            del bad[_pick(rng, sorted(bad))]
        elif key == "not a dict":
            bad = list(sd.items())
        else:
            bad = dict(sd, **{key: v})
        sd0 = opt.state_dict()
        unchanged = _tr_unchanged(params, "params")

        def after():
            unchanged()
            s = opt.state_dict()
            assert s["t"] == sd0["t"]
            for k2 in ("exp_avg", "exp_avg_sq", "buf_initialized"):
                assert np.array_equal(s[k2].view(np.uint8), sd0[k2].view(np.uint8)), k2
        return Case(label + f" load_state_dict {key}={type(v).__name__}",
                    lambda: opt.load_state_dict(bad), "error", None, names, after=after)
    # bad accumulation at a step
    params = [p.copy() for p in p0]
    opt = make(T, params)
    tokens, A = _pick(rng, [(384, 2), (300, 2), (256, 3), (256, 4), (128, 2), (512, 8)])
    mg = [[_tr_vals(rng, s) for s in shapes] for _ in range(A)]
    return Case(label + f" step_accumulated tokens={tokens} A={A}",
                lambda: opt.step_accumulated(mg, tokens), "error", None, ("micro-batches",),
                after=_tr_unchanged(params, "params"))


_TRAIN_CFGS = {
    "untied": dict(model_type="llama", vocab_size=31, hidden_size=16, intermediate_size=24,
                   num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                   rms_norm_eps=1e-5, rope_theta=10000.0, max_position_embeddings=256,
                   tie_word_embeddings=False, hidden_act="silu"),
    "tied": dict(model_type="llama", vocab_size=29, hidden_size=16, intermediate_size=20,
                 num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                 rms_norm_eps=1e-6, rope_theta=500.0, max_position_embeddings=256,
                 tie_word_embeddings=True, hidden_act="silu"),
}
_TRAIN_TINY = {}


def _train_tiny(variant):
    """A tiny llama checkpoint for the trainer, written once per process and variant
    (a case's tmp is removed after the case)."""
    if variant not in _TRAIN_TINY:
        import atexit
        import json
        import shutil
        import tempfile

        from safetensors.numpy import save_file

        cfg = dict(_TRAIN_CFGS[variant])
        w = _model_weights(cfg, {"untied": 5, "tied": 6}[variant])
        d = tempfile.mkdtemp(prefix=f"mlfuzz-train-{variant}-")
        atexit.register(shutil.rmtree, d, True)
        with open(os.path.join(d, "config.json"), "w") as fh:
            json.dump(cfg, fh)
        save_file(w, os.path.join(d, "model.safetensors"))
        _TRAIN_TINY[variant] = dict(path=d, cfg=cfg, w=w)
    return _TRAIN_TINY[variant]


def _tr_state(tr):
    """(t, weights, optimizer state) of a trainer, copies."""
    return tr.t, tr.weights(), tr.optimizer.state_dict()


def _tr_same_state(tr, st, what):
    t, w, sd = st
    assert tr.t == t, f"{what}: t {tr.t}, want {t}"
    now = tr.weights()
    assert list(now) == list(w)
    for n in w:
        _tr_same(now[n], w[n], f"{what}: weight {n}")
    s = tr.optimizer.state_dict()
    for k in ("exp_avg", "exp_avg_sq"):
        _tr_same(s[k], sd[k], f"{what}: optimizer {k}")
    np.testing.assert_array_equal(s["buf_initialized"], sd["buf_initialized"])


def gen_training_trainer(rng, tmp):
    """Trainer on tiny llama checkpoints (tied and untied heads): the loss of a batch is
    the model oracle's logits through the training oracle's cross entropy, bit for bit;
    a split into micro-batches, gradients(), a save and resume, save_model and model
    give a fresh trainer's bits; hostile ids, labels, accumulation, constructor
    arguments and files are refused by name, with the weights, the step count and the
    optimizer state unchanged."""
    from mojolearn import training as T
    from mojolearn.models import CausalLM

    variant = _pick(rng, ["untied", "tied"])
    t = _train_tiny(variant)
    cfg, V = t["cfg"], t["cfg"]["vocab_size"]
    opt = _pick(rng, ["adamw", "adam", "sgd"])
    kw = {"optimizer": opt, "lr": float(_pick(rng, [1e-3, 0.01])),
          "max_norm": _pick(rng, [None, 1.0])}
    if rng.random() < 0.3:
        kw["lr_schedule"] = T.WarmupCosineLR(kw["lr"], 1, 5)
    if opt == "sgd" and rng.random() < 0.5:
        kw["momentum"] = 0.9
    B, L = int(rng.integers(1, 4)), int(rng.integers(2, 9))
    ids = rng.integers(0, V, size=(B, L))
    labels = None
    if rng.random() < 0.3:
        labels = ids.copy()
        labels[rng.random((B, L)) < 0.3] = -100
        labels[0, 1] = ids[0, 1]  # at least one target
    pre = int(rng.integers(0, 3))  # steps taken before the call
    warm = [rng.integers(0, V, size=(B, L)) for _ in range(pre)]
    label = f"training.Trainer {variant} {kw} B={B} L={L} labels={labels is not None} pre={pre}"

    def trainer():
        tr = T.Trainer(t["path"], **kw)
        for x in warm:
            tr.step(x)
        return tr

    what = int(rng.integers(0, 16))
    if what == 0:  # loss and step's loss vs the oracle (no steps before: the file's weights)
        via = _pick(rng, ["loss", "step"])

        def check(got):
            from tests import model_oracle as MO
            from tests import training_oracle as TO

            logits = MO.forward(t["w"], cfg, ids, "fp32_v1", "float32").reshape(-1, V)
            lab = ids if labels is None else labels
            tg = np.full((B, L), -100, np.int64)
            tg[:, :-1] = lab[:, 1:]
            _tr_scalar(got, TO.cross_entropy(logits, tg.reshape(-1)),
                       f"Trainer.{via} vs the oracle's cross entropy of the oracle's logits")
        return Case(label + f" {via} vs oracle",
                    lambda: getattr(T.Trainer(t["path"], **kw), via)(ids, labels), "ok", check)
    if what == 1:  # a split into micro-batches: one batch's bits
        B2, L2 = _pick(rng, [(2, 128), (4, 64), (4, 128), (8, 64)])
        ids2 = rng.integers(0, V, size=(B2, L2))
        ok = [a for a in T.splits_that_work(B2 * L2) if B2 % a == 0]
        A = _pick(rng, ok)
        tr = trainer()

        def check(loss):
            ref = trainer()
            _tr_scalar(loss, ref.step(ids2), f"loss with accumulation={A} vs one batch")
            _tr_same_state(tr, _tr_state(ref), f"after a step with accumulation={A}")
        return Case(label + f" step {B2}x{L2} accumulation={A}",
                    lambda: tr.step(ids2, accumulation=A), "ok", check)
    if what == 2:  # gradients (no step), split or not
        B2, L2 = _pick(rng, [(B, L), (2, 128), (4, 64)])
        ids2 = rng.integers(0, V, size=(B2, L2))
        A = _pick(rng, [a for a in T.splits_that_work(B2 * L2) if B2 % a == 0] or [1])
        tr = trainer()
        st = _tr_state(tr)

        def check(g):
            _tr_same_state(tr, st, "after gradients()")
            want = trainer().gradients(ids2)
            assert list(g) == list(want) == list(st[1])
            for n in g:
                _tr_same(g[n], want[n], f"gradient {n} with accumulation={A}")
        return Case(label + f" gradients {B2}x{L2} accumulation={A}",
                    lambda: tr.gradients(ids2, accumulation=A), "ok", check)
    if what == 3:  # save, resume, one more step: an uninterrupted run's bits
        path = os.path.join(tmp, "trainer.safetensors")

        def call():
            tr = trainer()
            tr.save(path)
            with open(path, "rb") as fh:
                first = fh.read()
            tr.save(path)
            with open(path, "rb") as fh:
                assert fh.read() == first, "two saves of one state differ"
            back = T.Trainer.resume(path)
            return tr, back, back.step(ids, labels), tr.step(ids, labels)

        def check(r):
            tr, back, l1, l2 = r
            _tr_scalar(l1, l2, "the resumed trainer's loss")
            _tr_same_state(back, _tr_state(tr), "resumed then a step vs straight")
        return Case(label + " save/resume", call, "ok", check)
    if what == 4:  # save_model, model, weights
        d = os.path.join(tmp, "hf")

        def call():
            tr = trainer()
            tr.save_model(d)
            return tr, CausalLM.load(d).forward(ids), tr.model.forward(ids)

        def check(r):
            tr, from_dir, held = r
            _tr_same(from_dir, held, "save_model's folder vs Trainer.model")
            if not pre:
                _tr_same(held, CausalLM.load(t["path"]).forward(ids),
                         "a fresh Trainer.model vs CausalLM.load")
            w = tr.weights()
            assert set(w) == set(t["w"]), sorted(set(w) ^ set(t["w"]))
            if not pre:
                for n in w:
                    _tr_same(w[n], t["w"][n], f"a fresh trainer's weight {n}")
        return Case(label + " save_model / model / weights", call, "ok", check)
    if what == 5:  # from a CausalLM
        return Case(label + " from CausalLM.load",
                    lambda: T.Trainer(CausalLM.load(t["path"]), **kw).step(ids, labels), "ok",
                    lambda r: _tr_scalar(r, T.Trainer(t["path"], **kw).step(ids, labels),
                                         "a trainer from a CausalLM vs from its path"))
    # refusals: the trainer (after warm steps) is left as it was
    tr = trainer()
    st = _tr_state(tr)

    def after():
        _tr_same_state(tr, st, "after the refusal")
    via = _pick(rng, ["step", "gradients", "loss"])
    if what in (6, 7, 8):
        while True:
            obj, lab, names = _ids_bad(rng, ids, V)
            if not lab.endswith(" tokens"):  # (models' max_positions; this one has 256)
                break
        return Case(label + f" {via} ids {lab}", lambda: getattr(tr, via)(obj), "error", None,
                    names, after=after)
    if what == 9:
        k = int(rng.integers(0, 2))
        bad = rng.integers(0, V, size=(B, 1)) if k == 0 else rng.integers(0, V, size=(1, 257))
        names = ("at least 2 tokens",) if k == 0 else ("max_position_embeddings",)
        return Case(label + f" {via} ids {bad.shape}", lambda: getattr(tr, via)(bad), "error",
                    None, names, after=after)
    if what == 10:
        k = int(rng.integers(0, 5))
        if k == 0:
            bad = ids.astype(_pick(rng, [np.float32, np.float64, np.bool_]))
            names = ("labels must be integers",)
        elif k == 1:
            bad = _pick(rng, [ids[:, :-1], ids[None], np.concatenate([ids, ids])])
            names = ("labels of shape",)
        elif k == 2:
            bad = ids.copy()
            v = _pick(rng, [V, V + 9, -1, -99, -101])
            bad.reshape(-1)[int(rng.integers(0, bad.size))] = v
            names = (f"labels hold {v}",)
        elif k == 3:
            bad = np.full(ids.shape, -100)
            names = ("no position has a target",)
        else:
            bad = [[float(v) for v in r] for r in ids.tolist()]
            names = ("labels must be integers",)
        return Case(label + f" {via} labels {k}", lambda: getattr(tr, via)(ids, bad), "error",
                    None, names, after=after)
    if what == 11:
        a = _pick(rng, [0, -2, True, 2.0, "2", None, 3, 2, 4, 16])
        names = ("accumulation",)
        if isinstance(a, int) and not isinstance(a, bool) and a in (2, 4, 16):
            B2, L2 = _pick(rng, [(B, L), (2, 96), (1, 256), (2, 64)])
            bad_ids = rng.integers(0, V, size=(B2, L2))
        else:
            bad_ids = ids
        fn = _pick(rng, ["step", "gradients"])
        return Case(label + f" {fn} {bad_ids.shape} accumulation={a!r}",
                    lambda: getattr(tr, fn)(bad_ids, accumulation=a), "error", None, names,
                    after=after)
    if what in (12, 13):  # constructor arguments
        key, v, names = _pick(rng, [
            ("optimizer", "lamb", ("optimizer=",)), ("optimizer", None, ("optimizer=",)),
            ("max_norm", -1.0, ("max_norm",)), ("max_norm", float("nan"), ("max_norm",)),
            ("max_norm", True, ("max_norm",)), ("progress", "yes", ("progress",)),
            ("progress", -1, ("progress",)), ("foreach", True, ("'foreach'",)),
            ("amsgrad", True, ("'amsgrad'",)), ("lr", "1e-3", ("lr",)),
            ("lr", float("inf"), ("lr",)), ("betas", (1.0, 0.9), ("beta1",)),
            ("eps", -1.0, ("eps",)), ("weight_decay", float("nan"), ("weight_decay",)),
            ("lr_schedule", lambda s: 1e-3, ("lr_schedule",)),
            ("numeric_profile", "fixed15_v1", ("fixed15_v1",)),
            ("numeric_profile", "fp64", ("fp64",)), ("lm", 3, ("lm must be",)),
            ("lm", None, ("lm must be",))])
        if key in ("betas", "eps") and opt == "sgd":  # (sgd takes neither: not passed on)
            key, v, names = "momentum", float("nan"), ("momentum",)
        if key == "lm":
            return Case(label + f" Trainer({v!r})", lambda: T.Trainer(v, **kw), "error", None,
                        names)
        return Case(label + f" Trainer {key}={v!r}",
                    lambda: T.Trainer(t["path"], **dict(kw, **{key: v})), "error", None, names)
    if what == 14:  # files that are not trainer files
        k = int(rng.integers(0, 3))
        if k == 0:
            p, names = os.path.join(t["path"], "model.safetensors"), ("not a trainer file",)
        elif k == 1:
            p = os.path.join(tmp, "missing.safetensors")
            names = (p,)
        else:
            p = os.path.join(tmp, "junk.safetensors")
            with open(p, "wb") as fh:
                fh.write(bytes(rng.integers(0, 256, size=int(rng.integers(0, 64)), dtype=np.uint8)))
            names = (p,)
        return Case(label + f" resume file {k}", lambda: T.Trainer.resume(p), "error", None,
                    names)
    # a trainer file of another profile or with a changed format: refused by name
    path = os.path.join(tmp, "trainer.safetensors")
    tr.save(path)
    return Case(label + " resume numeric_profile=fixed15_v1",
                lambda: T.Trainer.resume(path, numeric_profile="fixed15_v1"), "error", None,
                ("fixed15_v1",), after=after)


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
    ("linalg.k-split", gen_ksplit),
    ("linalg.row_absmax", gen_row_absmax),
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
    ("models.step", gen_models_step),
    ("models.generate", gen_models_generate),
    ("models.generate_text", gen_models_generate_text),
    ("models.state", gen_models_state),
    ("models.load", gen_models_load),
    ("models.CausalLM/ModelConfig", gen_models_constructor),
    ("models.TransformerBlock", gen_models_block),
    ("models.mamba", gen_models_mamba),
    ("models.Tokenizer", gen_models_tokenizer),
    ("models.ParallelCausalLM", gen_models_parallel),
    ("training.primitives", gen_training_primitives),
    ("training.optimizers", gen_training_optimizers),
    ("training.Trainer", gen_training_trainer),
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

"""The k-split of a product over several workers with the one-call bits (contract
rules 6.7 and L-8): ``matmul_part`` / ``matmul_int8_part`` / ``matmul_int15_part``
compute the part of ``a @ b`` that a range of k contributes, ``fold_parts`` joins
the parts of all ranges into the product.

WHY IT GIVES THE ONE-CALL BITS
    fp32.v1 sums each leaf of L k-steps as one chain and folds the leaves by a fixed
    pairwise tree (rules 6.2-6.4). Every node of that tree (an aligned block of 2**s
    leaves, or the shorter last block of a level) has a value the one-call product
    computes on its way to the root. A range of whole leaves is a union of such
    nodes, so a part holds one value per node (its "roots"), computed by the usual
    kernels with the whole product's leaf size, and the fold adds them in the tree's
    own order. A part must therefore start and end on leaf boundaries: multiples of
    L, or k itself (``k_split`` gives such ranges).
    The integer profiles sum code products exactly: any split of k gives the same
    exact sum, which the fold adds (int64) before the one epilogue (rule L-8). Their
    codes must come from whole rows: quantize a row's columns with the absmax of the
    whole row (``row_absmax`` of each piece, max-reduced, passed to ``quantize_int8`` /
    ``quantize_int15`` as ``absmax=``), or quantize whole rows and slice the codes.

WHERE
    Parts are computed on the CPU build (a GPU build serving the process refuses by
    name). Under numeric_mode deterministic / fast the same holds with that mode's
    leaf (``PartialProduct.leaf``); parts of different modes do not fold together.

Python here decides which kernel calls make which node and walks the tree; every
value is computed by the Mojo kernels (gemm_f32 with the part's leaf, f32_tree_add,
int_sums, int_sums_add, int_epilogue).
"""
from __future__ import annotations

import ctypes

from .._data.array import Array, empty
from .._data.buffers import Buf, read
from .._core.loader import cpu_native, require_cpu
from .._core.threads import gemm_tasks, tasks
from .._data.validate import buf, contiguous, out_buf
from . import calls as _calls, operands as _operands

__all__ = ["PartialProduct", "matmul_part", "matmul_int8_part", "matmul_int15_part",
           "fold_parts", "k_split", "leaf_size"]

PROFILES = ("fp32.v1", "int8i32.v1", "int15i64.v1")
_LIMITS = {"int8i32.v1": (131072, "L-7"), "int15i64.v1": (65536, "W-4")}


def _int(v, func, name, lo=0):
    if isinstance(v, bool) or not isinstance(v, int):
        if type(v).__module__ == "numpy" and "int" in type(v).__name__:
            v = int(v)
        else:
            raise TypeError(f"mojolearn: {func}: {name} must be an int, got {type(v).__name__}")
    if v < lo or v >= 2 ** 62:
        raise ValueError(f"mojolearn: {func}: {name} must be an int from {lo} to below 2**62, "
                         f"got {v}")
    return v


def leaf_size(k: int) -> int:
    """The leaf size (in k-steps) of an fp32.v1 product over ``k`` under the process's
    numeric mode (rule 6.2 under ``identical``: max(128, ceil(k / 1024))). A part of a
    k-split starts and ends on multiples of it (or at k)."""
    k = _int(k, "leaf_size", "k", 1)
    return int(cpu_native().f32_leaf((k, _calls.mode_code())))


def _nodes(lo: int, hi: int, nleaves: int) -> tuple:
    """The leaf range [lo, hi) as nodes of the tree over nleaves leaves, left to right:
    each (a, b) is an aligned block of 2**s leaves, or the shorter last block [a,
    nleaves) of a level (a a multiple of 2**s), the largest that fits at each step."""
    out = []
    s = lo
    while s < hi:
        size = 1
        while s % (2 * size) == 0 and min(s + 2 * size, nleaves) <= hi and 2 * size < 2 * nleaves:
            size *= 2
        e = min(s + size, nleaves)
        out.append((s, e))
        s = e
    return tuple(out)


class PartialProduct:
    """The part of one product that a range of k contributes (rules 6.7 and L-8).

    Made by ``matmul_part`` / ``matmul_int8_part`` / ``matmul_int15_part``, or rebuilt
    from its pieces after they travelled between processes:
    ``PartialProduct(profile, values, k=, k_start=, k_stop=, leaf=)`` for fp32.v1
    (``values`` float32 (len(nodes), m, n); ``leaf`` is required: it is the part's) or ``PartialProduct(profile, values, k=,
    k_start=, k_stop=, a_exps=, b_exps=)`` for the integer profiles (``values`` the
    exact int64 sums (m, n), the exponents those of the whole rows). Attributes:
    ``profile``, ``k``, ``k_start``, ``k_stop``, ``leaf`` (fp32.v1; 0 otherwise),
    ``nodes`` (the leaf ranges of the tree nodes, fp32.v1), ``values``, ``a_exps``,
    ``b_exps``, ``m``, ``n``. ``fold_parts`` joins the parts of every range."""

    __slots__ = ("profile", "k", "k_start", "k_stop", "leaf", "nodes", "values", "a_exps",
                 "b_exps", "m", "n")

    def __init__(self, profile, values, *, k, k_start, k_stop, leaf=None, a_exps=None,
                 b_exps=None):
        f = "PartialProduct"
        if profile not in PROFILES:
            raise ValueError(f"mojolearn: {f}: profile {profile!r} is not one of {PROFILES}")
        k = _int(k, f, "k", 1)
        k_start = _int(k_start, f, "k_start")
        k_stop = _int(k_stop, f, "k_stop")
        if not k_start < k_stop <= k:
            raise ValueError(f"mojolearn: {f}: the range [k_start, k_stop) = [{k_start}, "
                             f"{k_stop}) is not a non-empty range inside [0, k = {k})")
        self.profile, self.k, self.k_start, self.k_stop = profile, k, k_start, k_stop
        if profile == "fp32.v1":
            if a_exps is not None or b_exps is not None:
                raise ValueError(f"mojolearn: {f}: a fp32.v1 part has no exponents")
            if leaf is None:
                raise ValueError(
                    f"mojolearn: {f}: a fp32.v1 part needs leaf= (the part's own "
                    f"PartialProduct.leaf, which records the numeric mode it was computed "
                    f"under); the receiving process's mode is not guessed")
            leaf = _int(leaf, f, "leaf", 1)
            _check_bounds(f, k, k_start, k_stop, leaf)
            self.leaf = leaf
            nleaves = -(-k // leaf)
            self.nodes = _nodes(k_start // leaf, -(-k_stop // leaf), nleaves)
            v = buf(values, f, "values", ("float32",), ndim=3)
            if v.shape[0] != len(self.nodes):
                raise ValueError(
                    f"mojolearn: {f}: values has {v.shape[0]} node values but the range "
                    f"[{k_start}, {k_stop}) of k = {k} (leaf {leaf}) is {len(self.nodes)} "
                    f"nodes {list(self.nodes)}; pass the part's own values")
            self.m, self.n = int(v.shape[1]), int(v.shape[2])
            self.a_exps = self.b_exps = None
        else:
            lim, rule = _LIMITS[profile]
            if k > lim:
                raise ValueError(f"mojolearn: {f}: k = {k} is outside the domain of rule "
                                 f"{rule} (k <= {lim})")
            self.leaf, self.nodes = 0, ()
            v = buf(values, f, "values", ("int64",), ndim=2)
            self.m, self.n = int(v.shape[0]), int(v.shape[1])
            if a_exps is None or b_exps is None:
                raise ValueError(f"mojolearn: {f}: an integer part needs a_exps and b_exps "
                                 f"(the exponents of the whole rows)")
            self.a_exps = _own(buf(a_exps, f, "a_exps", ("int32",), ndim=1), f)
            self.b_exps = _own(buf(b_exps, f, "b_exps", ("int32",), ndim=1), f)
            if self.a_exps.shape != (self.m,) or self.b_exps.shape != (self.n,):
                raise ValueError(f"mojolearn: {f}: a_exps {self.a_exps.shape} and b_exps "
                                 f"{self.b_exps.shape} must be ({self.m},) and ({self.n},) "
                                 f"for values of shape {(self.m, self.n)}")
        self.values = _own(v, f)

    def __repr__(self):
        return (f"PartialProduct({self.profile!r}, k={self.k}, k_start={self.k_start}, "
                f"k_stop={self.k_stop}, shape=({self.m}, {self.n})"
                + (f", leaf={self.leaf}, nodes={list(self.nodes)})" if self.leaf else ")"))


def _own(b: Buf, func) -> Array:
    """The part's own C-contiguous copy of a value buffer (a byte move): a part never
    aliases the caller's memory, which may be a receive buffer reused right after."""
    out = empty(b.dtype, b.shape, func=func, zero=False)
    if b.size:
        ctypes.memmove(out.address, b.addr, out.nbytes)
    return out


def _addr(v) -> int:
    """The address of a part's C-contiguous buffer (an Array, or any buffer a caller of
    PartialProduct._made passed: the models hand numpy arrays)."""
    a = getattr(v, "address", None)
    return a if a is not None else read(v, func="fold_parts", arg="values").addr


def _check_bounds(func, k, k_start, k_stop, leaf):
    ok_start = k_start % leaf == 0
    ok_stop = k_stop == k or k_stop % leaf == 0
    if not (ok_start and ok_stop):
        bad = k_start if not ok_start else k_stop
        raise ValueError(
            f"mojolearn: {func}: the range [{k_start}, {k_stop}) of k = {k} does not start "
            f"and end on leaf boundaries ({bad} is not a multiple of the leaf {leaf}, rule "
            f"6.7): a part of an fp32.v1 product is a run of whole leaves of the whole "
            f"product's tree, so it starts at a multiple of {leaf} and ends at one or at k; "
            f"linalg.k_split(k, parts) gives such ranges")


def _cpu_only(func):
    require_cpu(func, "the parts of a k-split")


def _sub(b: Buf, axis: int, lo: int, hi: int, func: str, arg: str) -> Buf:
    """Rows (axis 0) or columns (axis 1) [lo, hi) of a C-contiguous 2-D Buf, as a
    C-contiguous Buf: a view for rows or the whole width, else a byte copy made by the
    strided-copy kernel."""
    rows, cols = b.shape
    isz = b.itemsize
    if axis == 0:
        return Buf(b.addr + lo * cols * isz, b.dtype, (hi - lo, cols), (cols * isz, isz),
                   b.readonly, b.keep, b.pinned)
    if lo == 0 and hi == cols:
        return b
    out = empty(b.dtype, (rows, hi - lo), func=func, zero=False, what=f"columns of {arg}")
    if rows and hi > lo:
        cpu_native().strided_copy((b.addr + lo * isz, out.address, isz, 2, [rows, hi - lo],
                               [cols * isz, isz]))
    return read(out, func=func, arg=arg)


def matmul_part(a, b, *, k, k_start, transpose_a=False, transpose_b=False) -> PartialProduct:
    """The part of an fp32.v1 product ``a @ b`` over k that the range [k_start, k_start
    + kp) contributes, where ``a`` and ``b`` hold just that range's kp columns / rows of
    k (NN: a (m, kp), b (kp, n); NT: b (n, kp); TN: a (kp, m)). ``k`` is the whole
    product's k: the range must start and end on its leaf boundaries (rule 6.7;
    ``k_split`` gives such ranges). ``fold_parts`` of the parts of every range has the
    bits of ``matmul`` on the whole operands."""
    func = "matmul_part"
    transpose_a, transpose_b = _operands.layout(func, transpose_a, transpose_b)
    ab = buf(a, func, "a", ("float32",), ndim=2, copy=False)
    bb = buf(b, func, "b", ("float32",), ndim=2, copy=False)
    m, n, kp = _operands.shapes(func, ab.shape, bb.shape, transpose_a, transpose_b)
    k = _int(k, func, "k", 1)
    k_start = _int(k_start, func, "k_start")
    if kp == 0 or k_start + kp > k:
        raise ValueError(f"mojolearn: {func}: the operands hold {kp} steps of k from k_start "
                         f"{k_start}: a part holds at least one step and ends at or before "
                         f"k = {k}")
    leaf = leaf_size(k)
    _check_bounds(func, k, k_start, k_start + kp, leaf)
    _cpu_only(func)
    nodes = _nodes(k_start // leaf, -(-(k_start + kp) // leaf), -(-k // leaf))
    vals = empty("float32", (len(nodes), m, n), func=func, zero=False)
    if m and n:
        ab = contiguous(ab, func, "a")
        bb = contiguous(bb, func, "b")
        # the axis of each operand that runs along k
        a_axis, b_axis = (0 if transpose_a else 1), (1 if transpose_b else 0)
        for i, (lo, hi) in enumerate(nodes):
            c0, c1 = lo * leaf - k_start, min(hi * leaf, k) - k_start
            pa = _sub(ab, a_axis, c0, c1, func, "a")
            pb = _sub(bb, b_axis, c0, c1, func, "b")
            _gemm_node(pa.addr, pb.addr, vals.address + 4 * i * m * n, m, n, c1 - c0,
                       transpose_a, transpose_b, leaf)
            del pa, pb
    return PartialProduct._made("fp32.v1", vals, k, k_start, k_start + kp, leaf, nodes, m, n)


def _gemm_node(a, b, c, m, n, kn, transpose_a, transpose_b, leaf):
    """One node: the fp32.v1 kernel over kn steps with leaves of the whole product's
    leaf size (mode -leaf: fp32_v1.mode_leaf)."""
    wa, wn = _calls.workspace()
    need = cpu_native().gemm_f32((
        a, b, c, m, n, kn, int(transpose_a), int(transpose_b), 0, 0, -leaf,
        gemm_tasks("fp32", m, n, kn), _calls.sabotage_arg(), wa, wn,
    ))
    if need > wn:
        _calls.workspace_fit(need)


def _made(cls, profile, values, k, k_start, k_stop, leaf, nodes, m, n, a_exps=None, b_exps=None):
    """A part made by this module (nothing to check)."""
    p = cls.__new__(cls)
    p.profile, p.values, p.k, p.k_start, p.k_stop = profile, values, k, k_start, k_stop
    p.leaf, p.nodes, p.m, p.n, p.a_exps, p.b_exps = leaf, nodes, m, n, a_exps, b_exps
    return p


PartialProduct._made = classmethod(_made)


def _int_part(func, a, b, k, k_start, nplanes, profile):
    lim, rule = _LIMITS[profile]
    for name, x in (("a", a), ("b", b)):
        if not isinstance(x, tuple):
            want = "(codes, exponents)" if nplanes == 1 else "(hi, lo, exponents)"
            raise TypeError(
                f"mojolearn: {func}: {name} must be the quantized tuple {want} of this range's "
                f"columns, quantized with the exponents of the whole rows (quantize_int8 / "
                f"quantize_int15 with absmax=, rule L-8); got {type(x).__name__}")
    m, kp, anamed, _ = _operands.int_operand(func, a, "a", nplanes)
    n, kb, bnamed, _ = _operands.int_operand(func, b, "b", nplanes)
    if kp != kb:
        raise ValueError(f"mojolearn: {func}: a holds {kp} steps of k and b {kb}; both hold "
                         f"the same range")
    k = _int(k, func, "k", 1)
    k_start = _int(k_start, func, "k_start")
    if k > lim:
        raise ValueError(f"mojolearn: {func}: k = {k} is outside the domain of rule {rule} "
                         f"(k <= {lim}): the whole product's sums must stay exact")
    if kp == 0 or k_start + kp > k:
        raise ValueError(f"mojolearn: {func}: the operands hold {kp} steps of k from k_start "
                         f"{k_start}: a part holds at least one step and ends at or before "
                         f"k = {k}")
    _cpu_only(func)
    bufs_a = [contiguous(x, func, nm) for nm, x in anamed]
    bufs_b = [contiguous(x, func, nm) for nm, x in bnamed]
    sums = empty("int64", (m, n), func=func, zero=False)
    if m and n:
        ah, al = bufs_a[0].addr, bufs_a[1].addr if nplanes == 2 else 0
        bh, bl = bufs_b[0].addr, bufs_b[1].addr if nplanes == 2 else 0
        cpu_native().int_sums((ah, al, bh, bl, sums.address, m, n, kp, int(nplanes == 2),
                               tasks()))
    ea = _own(bufs_a[-1], func)
    eb = _own(bufs_b[-1], func)
    return PartialProduct._made(profile, sums, k, k_start, k_start + kp, 0, (), m, n, ea, eb)


def matmul_int8_part(a, b, *, k, k_start) -> PartialProduct:
    """The part of an int8i32.v1 product ``a @ b.T`` that the range [k_start, k_start +
    kp) of k contributes: a = (codes (m, kp), exponents (m,)), b = (codes (n, kp),
    exponents (n,)), the codes of this range's columns with the exponents of the whole
    rows (rule L-8). Any split of k works; ``fold_parts`` adds the exact sums and
    applies the epilogue once: the bits of ``matmul_int8`` on the whole rows."""
    return _int_part("matmul_int8_part", a, b, k, k_start, 1, "int8i32.v1")


def matmul_int15_part(a, b, *, k, k_start) -> PartialProduct:
    """``matmul_int8_part`` for int15i64.v1: a = (hi, lo, exponents) of this range's
    columns, b likewise (rule L-8)."""
    return _int_part("matmul_int15_part", a, b, k, k_start, 2, "int15i64.v1")


def fold_parts(parts, *, out=None) -> Array:
    """The product from the parts of every range of k (any order; they must cover
    [0, k) once, all of one profile, k, leaf and shape): fp32.v1 parts are added in the
    leaf tree's order (rule 6.4's ftz(left + right)), integer parts summed exactly and
    scaled once (L-8). ``out`` (float32 (m, n), C-contiguous) is written and returned."""
    func = "fold_parts"
    if isinstance(parts, PartialProduct) or not isinstance(parts, (list, tuple)):
        raise TypeError(f"mojolearn: {func}: parts must be a list or tuple of PartialProduct, "
                        f"got {type(parts).__name__}")
    if not parts:
        raise ValueError(f"mojolearn: {func}: parts is empty; pass the part of every range of k")
    for i, p in enumerate(parts):
        if not isinstance(p, PartialProduct):
            raise TypeError(f"mojolearn: {func}: parts[{i}] is {type(p).__name__}, not a "
                            f"PartialProduct")
    p0 = parts[0]
    for i, p in enumerate(parts):
        for attr in ("profile", "k", "leaf", "m", "n"):
            if getattr(p, attr) != getattr(p0, attr):
                raise ValueError(
                    f"mojolearn: {func}: parts[{i}] has {attr} {getattr(p, attr)!r} but parts[0] "
                    f"has {getattr(p0, attr)!r}: parts of one product share profile, k, leaf "
                    f"(numeric mode) and shape")
    order = sorted(range(len(parts)), key=lambda i: parts[i].k_start)
    at = 0
    for i in order:
        p = parts[i]
        if p.k_start != at:
            what = "an overlap" if p.k_start < at else "a gap"
            raise ValueError(
                f"mojolearn: {func}: parts[{i}] covers [{p.k_start}, {p.k_stop}) but the "
                f"ranges before it reach {at}: {what}; the parts must cover [0, {p0.k}) once")
        at = p.k_stop
    if at != p0.k:
        raise ValueError(f"mojolearn: {func}: the parts cover [0, {at}) of k = {p0.k}; pass "
                         f"the part of every range")
    m, n = p0.m, p0.n
    ob = None if out is None else out_buf(out, func, "float32", (m, n))
    res = out if ob is not None else empty("float32", (m, n), func=func, zero=False)
    caddr = ob.addr if ob is not None else res.address
    if not (m and n):
        return res
    if p0.profile == "fp32.v1":
        _fold_tree(parts, caddr, m, n)
    else:
        for i, p in enumerate(parts[1:], 1):
            if bytes(p.a_exps) != bytes(p0.a_exps) or bytes(p.b_exps) != bytes(p0.b_exps):
                raise ValueError(
                    f"mojolearn: {func}: parts[{i}] carries other exponents than parts[0]; the "
                    f"codes of every range must be quantized with the exponents of the whole "
                    f"rows (rule L-8: row_absmax of each range, max-reduced, as absmax=)")
        nat = cpu_native()
        total = empty("int64", (m, n), func=func, zero=False)
        ctypes.memmove(total.address, _addr(p0.values), total.nbytes)
        for p in parts[1:]:
            nat.int_sums_add((total.address, _addr(p.values), total.address, m * n))
        nat.int_epilogue((total.address, _addr(p0.a_exps), _addr(p0.b_exps), caddr, m, n,
                          tasks()))
    return res


def _fold_tree(parts, caddr, m, n):
    """Walk the leaf tree from its root: a node held by a part is read where it lies,
    any other is ftz(left + right) of its children (a child past the last leaf: the
    left child carried unchanged, rule 6.4)."""
    leaf, k = parts[0].leaf, parts[0].k
    nleaves = -(-k // leaf)
    have = {}
    for p in parts:
        for i, node in enumerate(p.nodes):
            have[node] = _addr(p.values) + 4 * i * m * n
    keep = []  # temporaries alive until the root is written
    nat = cpu_native()
    t = tasks()

    def value(lo, size, dst):
        node = (lo, min(lo + size, nleaves))
        if node in have:
            return have[node]
        if size == 1:  # pragma: no cover - the coverage check makes every leaf reachable
            raise AssertionError(f"leaf {lo} held by no part")
        half = size // 2
        if lo + half >= nleaves:
            return value(lo, half, dst)
        left = value(lo, half, None)
        right = value(lo + half, half, None)
        if dst is None:
            tmp = empty("float32", (m, n), func="fold_parts", zero=False)
            keep.append(tmp)
            dst = tmp.address
        nat.f32_tree_add((left, right, dst, m * n, t))
        return dst

    size = 1
    while size < nleaves:
        size *= 2
    root = value(0, size, caddr)
    if root != caddr:
        ctypes.memmove(caddr, root, 4 * m * n)
    del keep


def k_split(k, parts, *, profile="fp32.v1") -> tuple:
    """``parts`` ranges (start, stop) covering [0, k) as evenly as the profile allows:
    for fp32.v1 whole runs of leaves (rule 6.7: at most as many parts as leaves), for
    the integer profiles any split (rule L-8)."""
    func = "k_split"
    k = _int(k, func, "k", 1)
    parts = _int(parts, func, "parts", 1)
    if profile not in PROFILES:
        raise ValueError(f"mojolearn: {func}: profile {profile!r} is not one of {PROFILES}")
    if profile == "fp32.v1":
        leaf = leaf_size(k)
        units, step = -(-k // leaf), leaf
    else:
        units, step = k, 1
    if parts > units:
        what = f"{units} leaves of {step}" if step > 1 else f"{units} steps"
        raise ValueError(f"mojolearn: {func}: k = {k} is {what}: it splits into at most "
                         f"{units} parts, not {parts}")
    per, extra = divmod(units, parts)
    out, at = [], 0
    for i in range(parts):
        u = at + per + (1 if i < extra else 0)
        out.append((min(at * step, k), min(u * step, k)))
        at = u
    return tuple(out)

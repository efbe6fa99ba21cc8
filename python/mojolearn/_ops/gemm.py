"""The GEMM entries of ``mojolearn.linalg`` (contracts: IDENTICAL_FP32_CONTRACT.md,
IDENTICAL_LOWBIT_CONTRACT.md).

Python checks every argument, allocates the result and hands plain addresses to
the Mojo kernels; it never touches the data. Results are ``mojolearn.Array``.
"""
from __future__ import annotations

import ctypes

from .._data.array import Array, empty
from .._core.loader import native
from .._core.threads import gemm_tasks
from .._data.buffers import read
from .._data.validate import buf, contiguous, out_buf
from . import convert as _convert
from .calls import f32_mode_code, mode_code, sabotage_arg, workspace, workspace_fit
from .operands import int_operand, layout, no_extra, shapes, stored_transposed
from .prepared import PreparedWeight

__all__ = ["matmul", "matmul_bf16", "matmul_int8", "matmul_int15"]

INT8_MAX_K = 131072  # rule L-7
"""The largest k ``matmul_int8`` takes (rule L-7): int8i32.v1's sums stay exact in int32."""
INT15_MAX_K = 65536  # rule W-4
"""The largest k ``matmul_int15`` takes (rule W-4): int15i64.v1's sums stay exact in int64."""


def _span(b):
    """[first byte, one past the last byte) that a Buf's elements occupy."""
    lo = hi = b.addr
    for d, st in zip(b.shape, b.strides):
        if d == 0:
            return b.addr, b.addr
        if st >= 0:
            hi += (d - 1) * st
        else:
            lo += (d - 1) * st
    return lo, hi + b.itemsize


def _overlaps(x, y) -> bool:
    """Whether two Bufs' spans of memory share a byte."""
    xlo, xhi = _span(x)
    ylo, yhi = _span(y)
    return xlo < yhi and ylo < xhi


def _no_overlap(func, ob, inputs):
    """`out` is written while the inputs are still being read: refuse any overlap."""
    if ob is None:
        return
    for name, b in inputs:
        if b is None:
            continue
        if _overlaps(b, ob):
            raise ValueError(
                f"mojolearn: {func}: out overlaps the memory of {name}; the product is "
                "written while its inputs are read, so pass a separate out (or none)"
            )


def _out(func, out, m, n):
    """The caller's ``out`` checked (no data touched), or None."""
    if out is None:
        return None
    return out_buf(out, func, "float32", (m, n))


def _staged_out(func, out, compute):
    """An ``out`` known only through __array_interface__ cannot be held while the kernel
    writes it without the GIL: the product goes to a fresh result, checked against
    ``out`` and copied into it afterwards, under the GIL. Any other out is passed on."""
    if out is None:
        return compute(None)
    o = read(out, func=func, arg="out", device_ok=True)
    if o.pinned or o.device is not None:
        return compute(out)
    res = compute(None)
    ob = out_buf(out, func, "float32", tuple(res.shape))
    if res.size:
        ctypes.memmove(ob.addr, res.address, res.nbytes)
    return out


def _result(func, out, ob, m, n):
    """The Array to return and the address the kernel writes."""
    if ob is not None:
        return out, ob.addr
    res = empty("float32", (m, n), func=func, zero=False)
    return res, res.address


def _in_place(named):
    """The (name, Buf) pairs the kernel will read where they are (C-contiguous):
    only those can overlap ``out``; the others are copied first."""
    return tuple((n, b) for n, b in named if b is not None and b.c_contiguous)


def _read_transposed(ab, bb, transpose_a, transpose_b, ob):
    """A column-major operand is read where it lies, as its C-contiguous transpose with
    its transpose flag flipped (``matmul(x, w.T)`` runs as ``matmul(x, w,
    transpose_b=True)``), instead of being copied: the same bits (fp32.v1's order
    depends on k only, 6.5). Not where that would ask for both transposes (section 7)
    or where the operand overlaps ``out`` (the copy keeps such a call right)."""
    if ab.c_contiguous and bb.c_contiguous:  # the usual call: nothing to read otherwise
        return ab, bb, transpose_a, transpose_b
    for _ in range(2):  # flipping one operand can free the other's flip
        for which in ("a", "b"):
            x = ab if which == "a" else bb
            t = stored_transposed(x)
            if t is None:
                continue
            ta, tb = (not transpose_a, transpose_b) if which == "a" else (transpose_a, not transpose_b)
            if ta and tb:
                continue
            if ob is not None and _overlaps(x, ob):
                continue
            if which == "a":
                ab, transpose_a = t, ta
            else:
                bb, transpose_b = t, tb
    return ab, bb, transpose_a, transpose_b


def _run_f32(func, a, b, transpose_a, transpose_b, out, a_dtypes, b_dtypes, extra):
    no_extra(func, extra, "(a, b, *, transpose_a=False, transpose_b=False, out=None)")
    # every refusal first (no copy, no allocation), then copies, then the result
    transpose_a, transpose_b = layout(func, transpose_a, transpose_b)
    ab = buf(a, func, "a", a_dtypes, ndim=2, copy=False)
    bb = buf(b, func, "b", b_dtypes, ndim=2, copy=False)
    m, n, k = shapes(func, ab.shape, bb.shape, transpose_a, transpose_b)
    ob = _out(func, out, m, n)
    ab, bb, transpose_a, transpose_b = _read_transposed(ab, bb, transpose_a, transpose_b, ob)
    _no_overlap(func, ob, _in_place((("a", ab), ("b", bb))))
    if not (m and n):
        return _result(func, out, ob, m, n)[0]
    ab = contiguous(ab, func, "a")
    bb = contiguous(bb, func, "b")
    res, caddr = _result(func, out, ob, m, n)
    _gemm_f32(func, ab.addr, bb.addr, caddr, m, n, k, transpose_a, transpose_b,
              ab.dtype == "uint16", bb.dtype == "uint16")
    return res


def _gemm_f32(func, a, b, c, m, n, k, transpose_a, transpose_b, a_bf16=False, b_bf16=False):
    """One gemm_f32 kernel call on checked addresses (m, n, k >= 1; C-contiguous
    operands; c overlapping neither), with what every call carries (calls.py)."""
    wa, wn = workspace()
    need = native().gemm_f32((
        a, b, c, m, n, k, int(transpose_a), int(transpose_b), int(a_bf16), int(b_bf16),
        f32_mode_code(func), gemm_tasks("fp32", m, n, k), sabotage_arg(), wa, wn,
    ))
    if need > wn:
        workspace_fit(need)


def f32_at(func, a, b, c, m, n, k, transpose_a, transpose_b, count=1):
    """fp32.v1 on host memory whose owner has checked it (the torch mode's CPU
    tensors): ``count`` products, product i reading a + i * m * k * 4 and
    b + i * k * n * 4 and writing c + i * m * n * 4 (byte addresses; float32,
    C-contiguous, each operand (m, k) / (k, m) under transpose_a and (k, n) / (n, k)
    under transpose_b; m, n, k >= 1; c fresh memory). The bits of ``matmul`` on the same
    operands (it runs the same kernel call); no buffer protocol or DLPack on the way."""
    for i in range(count):
        _gemm_f32(func, a + i * m * k * 4, b + i * k * n * 4, c + i * m * n * 4, m, n, k,
                  transpose_a, transpose_b)


def matmul(a, b, *, transpose_a=False, transpose_b=False, out=None, **unexpected):
    """float32 GEMM under mojolearn.identical.gemm.fp32.v1.

    NN ``a @ b`` with a (m,k), b (k,n); NT (transpose_b) ``a @ b.T`` with b (n,k);
    TN (transpose_a) ``a.T @ b`` with a (k,m). ``out`` (float32, (m,n),
    C-contiguous) is written in place and returned. k = 0 gives +0.0 everywhere.

    Leading dimensions are batches (rule 7.1): ``a`` (..., m, k) with a 2-D ``b``
    gives (..., m, n) with the bits of the reshaped 2-D call; a ``b`` with leading
    dimensions multiplies batch by batch, broadcasting as numpy's ``matmul``.
    Inputs: buffers, ``__array_interface__`` or DLPack tensors (torch, JAX, ...). A
    column-major 2-D operand (``matmul(x, w.T)``) is read in place as the transpose
    of a C-contiguous array (the same bits); other strided operands are copied."""
    return _staged_out("matmul", out, lambda o: _run_f32_nd(
        "matmul", a, b, transpose_a, transpose_b, o, ("float32",), ("float32",), unexpected))


def matmul_bf16(a, b, *, transpose_a=False, transpose_b=False, out=None, **unexpected):
    """bf16f32.v1: b is bf16 bits (uint16), a is float32 or bf16 bits; the bits equal
    ``matmul`` on the exactly widened operands (widening happens in the packing)."""
    return _staged_out("matmul_bf16", out, lambda o: _run_f32_nd(
        "matmul_bf16", a, b, transpose_a, transpose_b, o, ("float32", "uint16"), ("uint16",),
        unexpected))


def _broadcast(func, sa, sb):
    """numpy's broadcast of two batch shapes, or a ValueError naming both."""
    n = max(len(sa), len(sb))
    pa = (1,) * (n - len(sa)) + tuple(sa)
    pb = (1,) * (n - len(sb)) + tuple(sb)
    out = []
    for x, y in zip(pa, pb):
        if x != y and x != 1 and y != 1:
            raise ValueError(
                f"mojolearn: {func}: the batch dimensions of a {tuple(sa)} and b {tuple(sb)} "
                "do not broadcast (numpy's rule: equal, or one of them 1)"
            )
        out.append(max(x, y) if x and y else 0)
    return tuple(out), pa, pb


def _batch_offsets(batch, pshape):
    """For every batch index (C order), the matrix index in an operand of batch shape
    ``pshape`` (1 where it broadcasts)."""
    strides, s = [], 1
    for d in reversed(pshape):
        strides.append(s if d != 1 else 0)
        s *= d
    strides.reverse()
    idx = [0]
    for d, st in zip(batch, strides):
        idx = [i + j * st for i in idx for j in range(d)]
    return idx


def _nd_plan(func, ab, bb, transpose_a, transpose_b, why=""):
    """Shapes of a product with leading batch dimensions (rule 7.1): (m, n, k, batch,
    a's and b's padded batch shapes, the result's shape). Refusals by name."""
    for name, x in (("a", ab), ("b", bb)):
        if x.ndim < 2:
            raise ValueError(
                f"mojolearn: {func}: {name} must be at least 2-D{why}, got {x.ndim}-D with "
                f"shape {x.shape}"
            )
    m, n, k = shapes(func, ab.shape[-2:], bb.shape[-2:], transpose_a, transpose_b)
    batch, pa, pb = _broadcast(func, ab.shape[:-2], bb.shape[:-2])
    return m, n, k, batch, pa, pb, batch + (m, n)


def _nd_calls(ab, bb, caddr, m, n, k, batch, pa, pb, transpose_a):
    """The 2-D products of a batched call as (a, b, c addresses, rows): one call when
    every batch's rows are rows of one (batch*m, k) product (the same bits, 6.5),
    else one per batch (a broadcast operand's matrix reused)."""
    nb = 1
    for d in batch:
        nb *= d
    if not (m and n and nb):
        return []
    if bb.ndim == 2 and not transpose_a:
        return [(ab.addr, bb.addr, caddr, nb * m)]
    sa, sb = m * k * ab.itemsize, k * n * bb.itemsize
    ia, ib = _batch_offsets(batch, pa), _batch_offsets(batch, pb)
    return [(ab.addr + i * sa, bb.addr + j * sb, caddr + t * m * n * 4, m)
            for t, (i, j) in enumerate(zip(ia, ib))]


def _run_f32_nd(func, a, b, transpose_a, transpose_b, out, a_dtypes, b_dtypes, extra):
    """``_run_f32`` with leading batch dimensions (rule 7.1); 2-D calls go straight
    through. Each operand is read once (a DLPack capsule can only be consumed once)."""
    no_extra(func, extra, "(a, b, *, transpose_a=False, transpose_b=False, out=None)")
    if isinstance(b, PreparedWeight):
        return _run_prepared(func, a, b, transpose_a, transpose_b, out, a_dtypes)

    ra = read(a, func=func, arg="a", device_ok=True)
    rb = read(b, func=func, arg="b", device_ok=True)
    if ra.device is not None or rb.device is not None:
        return _run_f32_resident(func, ra, rb, transpose_a, transpose_b, out,
                                 a_dtypes, b_dtypes)
    if ra.ndim <= 2 and rb.ndim <= 2:
        return _run_f32(func, ra, rb, transpose_a, transpose_b, out, a_dtypes, b_dtypes, {})
    transpose_a, transpose_b = layout(func, transpose_a, transpose_b)
    ab = buf(ra, func, "a", a_dtypes, copy=False)
    bb = buf(rb, func, "b", b_dtypes, copy=False)
    m, n, k, batch, pa, pb, shape = _nd_plan(
        func, ab, bb, transpose_a, transpose_b, " when the other operand has batch dimensions")
    ob = None if out is None else out_buf(out, func, "float32", shape)
    # a 2-D column-major operand (x @ w.T with x batched) is read in place, as in _run_f32
    ab, bb, transpose_a, transpose_b = _read_transposed(ab, bb, transpose_a, transpose_b, ob)
    _no_overlap(func, ob, _in_place((("a", ab), ("b", bb))))
    ab = contiguous(ab, func, "a")
    bb = contiguous(bb, func, "b")
    res = empty("float32", shape, func=func, zero=False) if out is None else out
    caddr = ob.addr if ob is not None else res.address
    a16, b16 = int(ab.dtype == "uint16"), int(bb.dtype == "uint16")
    calls = _nd_calls(ab, bb, caddr, m, n, k, batch, pa, pb, transpose_a)
    code = f32_mode_code(func) if calls else 0
    for pa_, pb_, pc_, rows in calls:
        wa, wn = workspace()
        need = native().gemm_f32((
            pa_, pb_, pc_, rows, n, k, int(transpose_a), int(transpose_b), a16, b16,
            code, gemm_tasks("fp32", rows, n, k), sabotage_arg(), wa, wn,
        ))
        if need > wn:
            workspace_fit(need)
    return res


def _device_result(func, protos, shape):
    """A float32 result of ``shape`` in the operands' device memory, allocated by the
    operands' own library (torch or CuPy; found from the producer's type, never
    imported here); other producers must pass ``out``."""
    import sys

    for x in protos:
        top = type(x).__module__.split(".")[0]
        lib = sys.modules.get(top)
        if top == "torch" and lib is not None:
            return lib.empty(shape, dtype=lib.float32, device=x.device)
        if top == "cupy" and lib is not None:
            with x.device:
                return lib.empty(shape, dtype=lib.float32)
    names = ", ".join(sorted({type(x).__name__ for x in protos}))
    raise TypeError(
        f"mojolearn: {func}: the operands are in device memory ({names}) and mojolearn "
        "allocates device results only through torch or CuPy; pass out= (a float32 "
        f"device tensor of shape {tuple(shape)}) to receive the product"
    )


def _run_f32_resident(func, ra, rb, transpose_a, transpose_b, out, a_dtypes, b_dtypes):
    """fp32.v1 / bf16f32.v1 on device-resident operands (any batch dimensions, rule
    7.1): the GPU build computes where the data is, with no copy either way. The
    result is ``out`` or a new tensor of the operands' library on their device."""
    from .._core import device as _device

    transpose_a, transpose_b = layout(func, transpose_a, transpose_b)
    ab = buf(ra, func, "a", a_dtypes, copy=False)
    bb = buf(rb, func, "b", b_dtypes, copy=False)
    m, n, k, batch, pa, pb, shape = _nd_plan(func, ab, bb, transpose_a, transpose_b)
    ob = None if out is None else out_buf(out, func, "float32", shape, device_ok=True)
    named = [("a", ab.device), ("b", bb.device)] + ([("out", ob.device)] if ob else [])
    mod = _device.resident(func, named)  # refusals by name; waits for queued work
    ab = contiguous(ab, func, "a")       # device memory: refused unless contiguous
    bb = contiguous(bb, func, "b")
    _no_overlap(func, ob, (("a", ab), ("b", bb)))
    if ob is None:
        protos = [getattr(x.keep, "producer", None) for x in (ra, rb)]
        res = _device_result(func, [p for p in protos if p is not None], shape)
        ob = out_buf(res, func, "float32", shape, device_ok=True)
        if ob.device != ab.device:  # pragma: no cover - the library put it elsewhere
            raise RuntimeError(f"mojolearn: {func}: the result was allocated on {ob.device}, "
                               f"not on the operands' device {ab.device}")
    else:
        res = out
    a16, b16 = int(ab.dtype == "uint16"), int(bb.dtype == "uint16")
    calls = _nd_calls(ab, bb, ob.addr, m, n, k, batch, pa, pb, transpose_a)
    code = f32_mode_code(func, mod) if calls else 0
    for pa_, pb_, pc_, rows in calls:
        mod.gemm_f32_resident((pa_, pb_, pc_, rows, n, k, int(transpose_a), int(transpose_b),
                               a16, b16, code, sabotage_arg()))
    return res


def _run_prepared(func, a, p, transpose_a, transpose_b, out, a_dtypes):
    """``b`` prepared (linalg.prepare): checked against what it was made for, then the
    packed-B kernel; ``a`` 2-D or with leading batch dimensions (rule 7.1)."""
    transpose_a, transpose_b = layout(func, transpose_a, transpose_b)
    p.check(func, transpose_b)
    ab = buf(a, func, "a", a_dtypes, copy=False)
    if ab.ndim < 2:
        raise ValueError(
            f"mojolearn: {func}: a must be at least 2-D, got {ab.ndim}-D with shape {ab.shape}")
    m, n, k = shapes(func, ab.shape[-2:], p.shape, transpose_a, transpose_b)
    batch = tuple(ab.shape[:-2])
    shape = batch + (m, n)
    if out is None:
        ob = None
    else:
        ob = out_buf(out, func, "float32", shape)
        _no_overlap(func, ob, _in_place((("a", ab),)))
    nb = 1
    for d in batch:
        nb *= d
    if not (m and n and nb):
        return out if ob is not None else empty("float32", shape, func=func)
    ab = contiguous(ab, func, "a")
    if ob is not None:
        res, caddr = out, ob.addr
    else:
        res = empty("float32", shape, func=func, zero=False)
        caddr = res.address
    a16 = int(ab.dtype == "uint16")
    if not transpose_a:
        # rows of every batch are rows of one (batch*m, k) product: the same bits (6.5)
        calls = [(ab.addr, caddr, nb * m)]
    else:
        sa = m * k * ab.itemsize
        calls = [(ab.addr + t * sa, caddr + t * m * n * 4, m) for t in range(nb)]
    nat = native()
    # the numeric mode and the sabotage flag are read once: every batch element of one
    # call runs under the same mode, whatever another thread switches meanwhile
    code, sab = mode_code(), sabotage_arg()
    bp, bfmt, bsc = p._kernel_args()
    for pa_, pc_, rows in calls:
        wa, wn = workspace()
        need = nat.gemm_f32_packed((pa_, bp, pc_, rows, n, k, int(transpose_a), a16, bfmt, bsc,
                                    code, gemm_tasks("fp32", rows, n, k), sab, wa, wn))
        if need > wn:
            workspace_fit(need)
    return res


def _int_ready(func, named, is_tuple, nplanes):
    """Plane addresses, exponents address and the objects to keep alive: the
    tuple's parts made contiguous, or a float32 operand quantized here."""
    bufs = [contiguous(b, func, n) for n, b in named]
    if is_tuple:
        return [b.addr for b in bufs[:-1]], bufs[-1].addr, bufs
    quant = _convert.quantize_int8 if nplanes == 1 else _convert.quantize_int15
    q = quant(bufs[0].keep)
    return [p.address for p in q[:-1]], q[-1].address, q


def _int_gemm(func, a, b, out, nplanes, max_k, rule, extra):
    no_extra(func, extra, "(a, b, *, out=None)")
    # every refusal first (no copy, no quantization, no allocation)
    if isinstance(a, PreparedWeight):
        raise TypeError(
            f"mojolearn: {func}: a is a prepared weight; prepared weights are the right-hand "
            "operand b (a @ b.T); pass the left operand as float32 or its quantized tuple")
    m, k, anamed, atup = int_operand(func, a, "a", nplanes)
    pre = b if isinstance(b, PreparedWeight) else None
    if pre is not None:
        pre.check(func, True)
        n, kb, bnamed, btup = pre.n, pre.k, [], True
    else:
        n, kb, bnamed, btup = int_operand(func, b, "b", nplanes)
    if k != kb:
        raise ValueError(
            f"mojolearn: {func}: a is (m={m}, k={k}) and b is (n={n}, k={kb}): "
            "the product is a @ b.T, so both need the same k"
        )
    if k > max_k:
        raise ValueError(
            f"mojolearn: {func}: k = {k} is outside the domain of rule {rule} "
            f"(k <= {max_k}); split the product along k yourself or use matmul (fp32.v1)"
        )
    ob = _out(func, out, m, n)
    _no_overlap(func, ob, _in_place(anamed + bnamed))
    ap, ae, akeep = _int_ready(func, anamed, atup, nplanes)
    if pre is not None:
        parts = pre._int
        bp, be, bkeep = parts["planes"], parts["exps"], pre
    else:
        bp, be, bkeep = _int_ready(func, bnamed, btup, nplanes)
    res, caddr = _result(func, out, ob, m, n)
    if m and n:
        wa, wn = workspace()
        tail = (gemm_tasks("int", m, n, k, nplanes * nplanes), sabotage_arg(), wa, wn)
        if pre is not None:
            bpk = pre._int["packed"]
            if nplanes == 1:
                need = native().gemm_int8_packed((ap[0], ae, bp[0], be, bpk, caddr, m, n, k) + tail)
            else:
                need = native().gemm_int15_packed((ap[0], ap[1], ae, bp[0], bp[1], be, bpk, caddr,
                                                   m, n, k) + tail)
        elif nplanes == 1:
            need = native().gemm_int8((ap[0], ae, bp[0], be, caddr, m, n, k) + tail)
        else:
            need = native().gemm_int15((ap[0], ap[1], ae, bp[0], bp[1], be, caddr, m, n, k) + tail)
        if need > wn:
            workspace_fit(need)
    del akeep, bkeep  # alive until the kernel returned
    return res


def matmul_int8(a, b, *, out=None, **unexpected):
    """int8i32.v1: ``a @ b.T``; each operand float32 (m,k)/(n,k) or (codes, exponents);
    b may also be ``linalg.prepare((codes, exponents))``.
    Output ftz(f32(S) * pow2f(ea[i] + eb[j])) with S the exact integer sum; k <= 131072 (L-7)."""
    return _staged_out("matmul_int8", out, lambda o: _int_gemm(
        "matmul_int8", a, b, o, 1, INT8_MAX_K, "L-7", unexpected))


def matmul_int15(a, b, *, out=None, **unexpected):
    """int15i64.v1: ``a @ b.T``; each operand float32 or (hi, lo, exponents); b may also
    be ``linalg.prepare((hi, lo, exponents))``.
    Output as int8i32.v1 with 15-bit codes; k <= 65536 (W-4)."""
    return _staged_out("matmul_int15", out, lambda o: _int_gemm(
        "matmul_int15", a, b, o, 2, INT15_MAX_K, "W-4", unexpected))

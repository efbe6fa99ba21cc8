"""mojolearn.Array (the result type, rule 7 of the API) and the input protocols.

Results carry .shape, .dtype (a string), .ndim, .tolist(), .copy(); numpy.asarray
and memoryview read them in place (no copy). Inputs may be any buffer (numpy,
memoryview, array.array, mojolearn.Array) or an object exposing only
__array_interface__; all give the same bits as the equivalent numpy array.
"""
from __future__ import annotations

import array

import numpy as np
import pytest

import mojolearn
from mojolearn import linalg
from tests import oracle as O
from tests.bits import u32

F32 = np.float32
RNG = np.random.default_rng(31)


class OnlyArrayInterface:
    """Exposes its data only through __array_interface__ (no buffer protocol)."""

    def __init__(self, x):
        self._keep = x
        self.__array_interface__ = dict(x.__array_interface__)


def results():
    """One result of every kind, with its expected dtype and shape."""
    a = RNG.standard_normal((3, 5)).astype(F32)
    b = RNG.standard_normal((5, 4)).astype(F32)
    c, e = linalg.quantize_int8(a)
    h, lo, e15 = linalg.quantize_int15(a)
    return [
        ("matmul", linalg.matmul(a, b), "float32", (3, 4)),
        ("matmul_bf16", linalg.matmul_bf16(a, O.to_bf16(b)), "float32", (3, 4)),
        ("matmul_int8", linalg.matmul_int8(a, b.T.copy()), "float32", (3, 4)),
        ("matmul_int15", linalg.matmul_int15(a, b.T.copy()), "float32", (3, 4)),
        ("to_bf16", linalg.to_bf16(a), "uint16", (3, 5)),
        ("from_bf16", linalg.from_bf16(O.to_bf16(a)), "float32", (3, 5)),
        ("codes", c, "int8", (3, 5)),
        ("exps", e, "int32", (3,)),
        ("hi", h, "int8", (3, 5)),
        ("lo", lo, "int8", (3, 5)),
        ("exps15", e15, "int32", (3,)),
        ("dequantize_int8", linalg.dequantize_int8(c, e), "float32", (3, 5)),
        ("dequantize_int15", linalg.dequantize_int15(h, lo, e15), "float32", (3, 5)),
    ]


NP_DTYPE = {"float32": np.float32, "uint16": np.uint16, "int8": np.int8, "int32": np.int32}
MV_FORMAT = {"float32": "f", "uint16": "H", "int8": "b", "int32": "i"}


@pytest.mark.parametrize("idx", range(13))
def test_result_attributes(idx):
    """7 (Array): every result is a mojolearn.Array with shape, dtype string, ndim,
    size; tolist() matches numpy's; copy() is an independent Array with equal bits."""
    name, r, dtype, shape = results()[idx]
    assert isinstance(r, mojolearn.Array), name
    assert r.shape == shape and r.dtype == dtype and r.ndim == len(shape), name
    n = np.asarray(r)
    assert n.dtype == NP_DTYPE[dtype] and n.shape == shape
    assert r.tolist() == n.tolist()
    c = r.copy()
    assert isinstance(c, mojolearn.Array) and c.shape == shape and c.dtype == dtype
    assert np.asarray(c).tobytes() == n.tobytes()
    assert not np.shares_memory(np.asarray(c), n)
    n.view(np.uint8)[...] ^= 0xFF  # change the original: the copy keeps its bits
    assert np.asarray(c).tobytes() != n.tobytes()


@pytest.mark.parametrize("idx", range(13))
def test_zero_copy_views(idx):
    """7 (Array): numpy.asarray and memoryview read the result in place: writes through
    np.asarray(arr) show in arr.tolist() and in a memoryview; memoryview format,
    shape, itemsize and writability are right."""
    name, r, dtype, shape = results()[idx]
    n = np.asarray(r)
    n2 = np.asarray(r)
    assert np.shares_memory(n, n2), name
    mv = memoryview(r)
    assert mv.format.lstrip("<=@") == MV_FORMAT[dtype], (name, mv.format)
    assert mv.shape == shape and mv.itemsize == n.itemsize and not mv.readonly
    assert mv.c_contiguous and mv.nbytes == n.nbytes
    assert np.shares_memory(np.asarray(mv), n)
    flat_idx = (0,) * len(shape)
    n[flat_idx] = 7
    assert r.tolist()[0] == 7 if len(shape) == 1 else r.tolist()[0][0] == 7
    # ctypes reports an explicit byte order ("<f"); Python's memoryview cannot index
    # that format directly, so read it through a byte cast (still no copy)
    typed = mv.cast("B").cast(MV_FORMAT[dtype], shape) if shape else mv.cast("B").cast(MV_FORMAT[dtype])
    assert (typed[flat_idx] if shape else typed[0]) == 7


def test_zero_and_empty_shapes():
    """7 / 8 (Array): 0-d and empty results have the right shape and tolist()."""
    z = linalg.to_bf16(np.array(1.5, F32))
    assert z.shape == () and z.ndim == 0 and z.tolist() == 0x3FC0
    assert np.asarray(z).shape == () and int(np.asarray(z)) == 0x3FC0
    e = linalg.matmul(np.ones((0, 3), F32), np.ones((3, 4), F32))
    assert e.shape == (0, 4) and e.tolist() == [] and np.asarray(e).shape == (0, 4)
    e = linalg.matmul(np.ones((2, 3), F32), np.ones((3, 0), F32))
    assert e.shape == (2, 0) and e.tolist() == [[], []]
    e = linalg.to_bf16(np.zeros((2, 0, 3), F32))
    assert e.shape == (2, 0, 3) and e.tolist() == np.zeros((2, 0, 3)).tolist()


def test_results_feed_back_as_inputs():
    """7: Arrays are accepted as inputs (the same bits as their numpy views)."""
    a = RNG.standard_normal((6, 40)).astype(F32)
    b = RNG.standard_normal((40, 5)).astype(F32)
    ra = linalg.from_bf16(linalg.to_bf16(a))
    rb = linalg.matmul(b, np.eye(5, dtype=F32))
    assert u32(rb).tobytes() == u32(b).tobytes()
    got = linalg.matmul(ra, rb)
    assert u32(got).tobytes() == u32(O.gemm_fp32_v1(np.asarray(ra), b)).tobytes()
    codes, exps = linalg.quantize_int8(a)
    assert u32(linalg.matmul_int8((codes, exps), (codes, exps))).tobytes() == \
        u32(linalg.matmul_int8(a, a)).tobytes()
    r = linalg.matmul(ra, rb, out=linalg.matmul(a, b))
    assert u32(r).tobytes() == u32(got).tobytes()


def test_memoryview_and_array_array_inputs():
    """7: memoryview and array.array inputs (1-D for the converters, cast to 2-D for
    the GEMMs) give the bits of the equivalent numpy arrays."""
    a = RNG.standard_normal((4, 30)).astype(F32)
    b = RNG.standard_normal((30, 6)).astype(F32)
    exp = O.gemm_fp32_v1(a, b)
    aa = array.array("f", a.ravel().tolist())
    ba = array.array("f", b.ravel().tolist())
    ma = memoryview(aa).cast("B").cast("f", (4, 30))
    mb = memoryview(ba).cast("B").cast("f", (30, 6))
    assert u32(linalg.matmul(ma, mb)).tobytes() == u32(exp).tobytes()
    assert u32(linalg.matmul(memoryview(a), memoryview(b))).tobytes() == u32(exp).tobytes()
    # a read-only buffer is a fine input
    ro = bytes(a.tobytes())
    mro = memoryview(ro).cast("f", (4, 30))
    assert mro.readonly
    assert u32(linalg.matmul(mro, b)).tobytes() == u32(exp).tobytes()
    # converters on array.array (any rank: 1-D here)
    assert np.array_equal(np.asarray(linalg.to_bf16(aa)), O.to_bf16(a.ravel()))
    bits = array.array("H", O.to_bf16(a.ravel()).tolist())
    assert np.array_equal(np.asarray(linalg.from_bf16(bits)).view(np.uint32),
                          O.from_bf16(O.to_bf16(a.ravel())).view(np.uint32))
    c8 = array.array("b", [1, -2, 3, 127])
    e8 = array.array("i", [0, 1])
    d = linalg.dequantize_int8(memoryview(c8).cast("B").cast("b", (2, 2)), e8)
    assert d.tolist() == [[1.0, -2.0], [6.0, 254.0]]
    # an array.array of the wrong type is refused by name, not cast
    with pytest.raises(TypeError, match="^mojolearn: matmul: a must be float32"):
        linalg.matmul(memoryview(array.array("d", [1.0] * 4)).cast("B").cast("d", (2, 2)), b[:2])


def test_array_interface_only_inputs():
    """7: objects exposing only __array_interface__ (contiguous and strided) give the
    bits of the equivalent numpy arrays; their dtype is still checked."""
    A = RNG.standard_normal((12, 80)).astype(F32)
    B = RNG.standard_normal((80, 9)).astype(F32)
    for a in (A, A[::3, ::2], A[:, 40:], A[::-1]):
        k = a.shape[1]
        b = B[:k]
        exp = O.gemm_fp32_v1(np.ascontiguousarray(a), b)
        with pytest.raises(TypeError):
            memoryview(OnlyArrayInterface(a))
        got = linalg.matmul(OnlyArrayInterface(a), OnlyArrayInterface(b))
        assert u32(got).tobytes() == u32(exp).tobytes(), a.strides
        got = linalg.matmul(OnlyArrayInterface(a), OnlyArrayInterface(np.ascontiguousarray(b.T)),
                            transpose_b=True)
        assert u32(got).tobytes() == u32(exp).tobytes()
    x = A[::2, ::3]
    assert np.array_equal(np.asarray(linalg.to_bf16(OnlyArrayInterface(x))), O.to_bf16(np.ascontiguousarray(x)))
    c, e = linalg.quantize_int8(OnlyArrayInterface(x))
    oc, oe = O.quantize_int8(np.ascontiguousarray(x))
    assert np.array_equal(np.asarray(c), oc) and np.array_equal(np.asarray(e), oe)
    with pytest.raises(TypeError, match="^mojolearn: matmul: a must be float32, got float64"):
        linalg.matmul(OnlyArrayInterface(A.astype(np.float64)), B)
    out = np.zeros((12, 9), F32)
    r = linalg.matmul(A, B, out=OnlyArrayInterface(out))
    assert u32(out).tobytes() == u32(O.gemm_fp32_v1(A, B)).tobytes()
    assert isinstance(r, OnlyArrayInterface)


def test_broadcast_and_zero_stride_inputs():
    """7: zero-stride (broadcast, read-only) inputs give the bits of a materialised copy."""
    row = RNG.standard_normal((1, 300)).astype(F32)
    a = np.broadcast_to(row, (5, 300))
    b = RNG.standard_normal((300, 7)).astype(F32)
    exp = O.gemm_fp32_v1(np.ascontiguousarray(a), b)
    assert u32(linalg.matmul(a, b)).tobytes() == u32(exp).tobytes()
    col = np.broadcast_to(row.T, (300, 4))
    exp = O.gemm_fp32_v1(b.T.copy(), np.ascontiguousarray(col))
    assert u32(linalg.matmul(b.T, col)).tobytes() == u32(exp).tobytes()
    assert np.array_equal(np.asarray(linalg.to_bf16(a)), O.to_bf16(np.ascontiguousarray(a)))
    c, e = linalg.quantize_int8(a)
    assert np.asarray(e).tolist() == [O.quantize_int8(row)[1][0]] * 5


def test_inputs_are_not_modified():
    """7: the kernels never write into their inputs (including strided ones)."""
    a = RNG.standard_normal((7, 50)).astype(F32)
    a[0, :5] = [np.nan, np.inf, 1e-40, -0.0, 3.4e38]
    b = RNG.standard_normal((50, 9)).astype(F32)
    snap = [a.tobytes(), b.tobytes()]
    linalg.matmul(a, b)
    linalg.matmul(a[:, ::2], b[::2])
    linalg.matmul_bf16(a, O.to_bf16(b))
    linalg.matmul_int8(a, b.T)
    linalg.matmul_int15(a, b.T)
    linalg.to_bf16(a)
    linalg.quantize_int8(a)
    linalg.quantize_int15(a[:, ::3])
    assert [a.tobytes(), b.tobytes()] == snap


def test_native_memoryview_indexes_without_copy():
    """Foundation (Array): arr.memoryview() is an indexable native-format view of the
    same memory (writes through it are seen by the Array)."""
    import numpy as np

    a = linalg.from_bf16(np.array([[0x3F80, 0x4000], [0x4040, 0x4080]], np.uint16))
    mv = a.memoryview()
    assert mv.format == "f" and mv.shape == (2, 2)
    assert mv[1, 0] == 3.0
    mv[0, 1] = 7.5
    assert a.tolist() == [[1.0, 7.5], [3.0, 4.0]]


def test_array_interface_only_input_is_read_from_a_copy():
    """6.5: memory known only through __array_interface__ cannot be pinned while the
    kernel runs without the GIL, so the kernel reads a copy made under the GIL: another
    thread overwriting (or freeing) the source during the product changes nothing. As
    out, such an object receives the finished product (copied under the GIL)."""
    import ctypes
    import threading
    import time

    rng = np.random.default_rng(0)
    n = 1200
    src = rng.standard_normal((n, n)).astype(np.float32)
    raw = (ctypes.c_float * (n * n))()
    ctypes.memmove(raw, src.ctypes.data, src.nbytes)

    class Iface:
        def __init__(self):
            self.__array_interface__ = {"version": 3, "shape": (n, n), "typestr": "<f4",
                                        "data": (ctypes.addressof(raw), False)}

    b = rng.standard_normal((n, n)).astype(np.float32)
    want = np.asarray(linalg.matmul(src, b)).copy()
    started = threading.Event()

    def scribble():
        started.wait()
        time.sleep(0.005)
        ctypes.memset(raw, 0x7F, ctypes.sizeof(raw))  # the owner reuses its memory

    t = threading.Thread(target=scribble)
    t.start()
    started.set()
    got = np.asarray(linalg.matmul(Iface(), b))
    t.join()
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    o = Iface2()
    r = linalg.matmul(src[:2, :2].copy(), b[:2, :2].copy(), out=o)
    assert r is o
    assert np.array_equal(o._a.view(np.uint32),
                          np.asarray(linalg.matmul(src[:2, :2].copy(), b[:2, :2].copy())).view(np.uint32))


class Iface2:
    def __init__(self):
        self._a = np.zeros((2, 2), dtype=np.float32)
        self.__array_interface__ = dict(self._a.__array_interface__)


@pytest.mark.parametrize("rows,cols", [(1, 1), (1, 40), (40, 1), (7, 9), (8, 8), (15, 17), (16, 16),
                                       (17, 33), (31, 64), (64, 31), (100, 70), (257, 129)])
def test_strided_copy_of_column_major_and_strided_views(rows, cols):
    """7: every copy made of a strided input (mojolearn._data.buffers.to_array, the Mojo
    strided_copy) holds the bits of numpy's copy: column-major 4-byte views (the
    in-register block transpose; shapes on both sides of its 8 / 16 blocks), with a
    padded column stride, other strides and other item sizes (NaN payloads, -0.0 and
    subnormals kept)."""
    from mojolearn._data.buffers import to_array

    base = RNG.integers(0, 2**32, size=(cols + 3, rows + 5), dtype=np.uint32)
    base[0, : min(rows, 4)] = [0x7FC01234, 0x80000000, 0x00000001, 0xFF800000][: min(rows, 4)]
    base = base.view(np.int32)
    views = {
        "F-order int32": np.asfortranarray(base[:cols, :rows].T),
        "x.T with a padded column stride": base[:cols, :rows].T,
        "float32 bits, x.T": base[:cols, :rows].view(np.float32).T,
        "every other column": base[:cols, : rows + 5 : 2].T,
        "negative steps": base[:cols, :rows][::-1, ::-1].T,
        "int16 x.T": base.view(np.int16)[:cols, :rows].T,
        "int8 x.T": base.view(np.int8)[:cols, :rows].T,
        "float64 x.T": RNG.standard_normal((cols + 3, rows + 5))[:cols, :rows].T,
    }
    for what, v in views.items():
        got = to_array(v, func="test", arg="x")
        assert got.shape == v.shape, what
        assert np.ascontiguousarray(v).tobytes() == bytes(memoryview(got).cast("B")), what


@pytest.mark.parametrize("shape,perm", [((3, 40, 17), (0, 2, 1)), ((2, 3, 33, 16), (0, 2, 1, 3)),
                                        ((2, 3, 16, 33), (1, 0, 3, 2)), ((4, 1, 9), (2, 1, 0)),
                                        ((2, 0, 5), (0, 2, 1)), ((5,), (0,))])
def test_strided_copy_of_batched_views(shape, perm):
    """7: the copy of an n-D strided input (one 2-D copy per index of the leading
    dimensions: torch's attention layouts, permuted, sliced, reversed, broadcast) holds
    numpy's bytes for 1-, 2-, 4- and 8-byte items."""
    from mojolearn._data.buffers import to_array

    for dt in (np.int8, np.int16, np.float32, np.int32, np.float64):
        base = RNG.integers(-100, 100, size=shape).astype(dt)
        views = {"permuted": base.transpose(perm), "reversed": base.transpose(perm)[..., ::-1],
                 "every other": base.transpose(perm)[..., ::2]}
        if len(shape) >= 2:
            views["broadcast"] = np.broadcast_to(base.transpose(perm)[..., :1], base.transpose(perm).shape)
        for what, v in views.items():
            got = to_array(v, func="test", arg="x")
            assert got.shape == v.shape, (dt, what)
            assert np.ascontiguousarray(v).tobytes() == np.asarray(got).tobytes(), (dt, what)

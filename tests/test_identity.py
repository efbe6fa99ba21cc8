"""Identity of bits across everything that must not matter (fp32.v1 rule 6.5 and its
counterparts for the other profiles and the converters): thread counts (set at run
time and through MOJOLEARN_NUM_THREADS, read once per process), layouts NN/NT/TN,
a row alone vs the same row in a batch of 300, a column alone vs the same column in
a wide product, and the instruction set where a second build exists.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import mojolearn
from mojolearn import linalg
from tests import oracle as O
from tests.bits import assert_same_bits, u32

F32 = np.float32
ROOT = Path(__file__).resolve().parent.parent
THREADS = [1, 2, 3, 7]


@pytest.fixture
def threads():
    """Run a test body under several thread counts, restoring the count after."""
    prev = mojolearn.get_num_threads()
    yield
    mojolearn.set_num_threads(prev)


def rng(seed):
    return np.random.default_rng(seed)


def normal(r, *shape):
    return r.standard_normal(shape).astype(F32)


def fp32_layouts(a, b):
    return [
        ("NN", lambda: linalg.matmul(a, b)),
        ("NT", lambda bt=np.ascontiguousarray(b.T): linalg.matmul(a, bt, transpose_b=True)),
        ("TN", lambda at=np.ascontiguousarray(a.T): linalg.matmul(at, b, transpose_a=True)),
    ]


# ---------------------------------------------------------------- thread counts
FP32_THREAD_SHAPES = [(1, 300, 70), (2, 1000, 530), (4, 2049, 40), (3, 129, 33),
                      (7, 300, 100), (150, 257, 130), (300, 129, 33), (13, 40, 1)]


@pytest.mark.parametrize("m,k,n", FP32_THREAD_SHAPES, ids=str)
def test_fp32_thread_counts(threads, m, k, n):
    """6.5: matmul gives the oracle's bits with 1, 2, 3 and 7 threads in NN, NT and TN
    (m <= 4: NN splits the leaf tree at its root between two tasks where its two
    subtrees have as many leaves (k = 1000, 129 here), else the columns, as NT always
    does; large m splits rows or columns)."""
    r = rng(m * 1000 + k)
    a, b = normal(r, m, k), normal(r, k, n)
    exp = O.gemm_fp32_v1(a, b)
    for t in THREADS:
        mojolearn.set_num_threads(t)
        for lay, run in fp32_layouts(a, b):
            assert_same_bits(run(), exp, f"threads={t} {lay}")


@pytest.mark.parametrize("m,k,n", [(1, 300, 70), (3, 1000, 64), (150, 257, 130)], ids=str)
def test_bf16_thread_counts(threads, m, k, n):
    """9 + 6.5: matmul_bf16 is identical for 1, 2, 3, 7 threads (a as bits and float32)."""
    r = rng(k)
    a = O.to_bf16(normal(r, m, k))
    b = O.to_bf16(normal(r, k, n))
    exp = O.gemm_bf16f32_v1(a, b)
    for t in THREADS:
        mojolearn.set_num_threads(t)
        assert_same_bits(linalg.matmul_bf16(a, b), exp, f"bits threads={t}")
        assert_same_bits(linalg.matmul_bf16(O.from_bf16(a).copy(), np.ascontiguousarray(b.T),
                                            transpose_b=True), exp, f"f32 NT threads={t}")


@pytest.mark.parametrize("m,k,n", [(1, 100, 70), (50, 300, 100), (300, 129, 33), (7, 1000, 200)], ids=str)
def test_int_thread_counts(threads, m, k, n):
    """L-5 W-3: matmul_int8 / matmul_int15 identical for 1, 2, 3, 7 threads."""
    r = rng(n)
    a, b = normal(r, m, k), normal(r, n, k)
    e8, e15 = O.gemm_int8_f32(a, b), O.gemm_int15_f32(a, b)
    for t in THREADS:
        mojolearn.set_num_threads(t)
        assert_same_bits(linalg.matmul_int8(a, b), e8, f"int8 threads={t}")
        assert_same_bits(linalg.matmul_int15(a, b), e15, f"int15 threads={t}")


def test_converter_thread_counts(threads):
    """L-1 L-2 L-3 L-4 L-6 W-1 W-2 W-3: the converters give the same output for 1, 2,
    3, 7 threads on inputs large enough to be split (and not evenly)."""
    r = rng(7)
    x = r.integers(0, 1 << 32, size=(613, 1009), dtype=np.uint64).astype(np.uint32).view(F32)
    bits = r.integers(0, 1 << 16, size=600_007, dtype=np.uint32).astype(np.uint16)
    q = (r.standard_normal((301, 1000)) * 2.0 ** r.integers(-100, 100, size=(301, 1))).astype(F32)
    ref_bf = O.to_bf16(x)
    ref_w = O.from_bf16(bits)
    oc, oe = O.quantize_int8(q)
    oh, ol, o15 = O.quantize_int15(q)
    for t in THREADS:
        mojolearn.set_num_threads(t)
        assert_same_bits(np.asarray(linalg.to_bf16(x)), ref_bf, f"to_bf16 t={t}")
        assert_same_bits(np.asarray(linalg.from_bf16(bits)), ref_w, f"from_bf16 t={t}")
        c, e = linalg.quantize_int8(q)
        assert_same_bits(np.asarray(c), oc, f"q8 t={t}")
        assert_same_bits(np.asarray(e), oe, f"q8 e t={t}")
        h, l, e = linalg.quantize_int15(q)
        assert_same_bits(np.asarray(h), oh, f"q15 hi t={t}")
        assert_same_bits(np.asarray(l), ol, f"q15 lo t={t}")
        assert_same_bits(np.asarray(e), o15, f"q15 e t={t}")
        assert_same_bits(linalg.dequantize_int8(oc, oe), O.dequantize_int8(oc, oe), f"dq8 t={t}")
        assert_same_bits(linalg.dequantize_int15(oh, ol, o15), O.dequantize_int15(oh, ol, o15),
                         f"dq15 t={t}")


def test_set_num_threads_returns_previous(threads):
    """7 (threads API): set_num_threads(n) returns the previous count and
    get_num_threads reports the new one."""
    mojolearn.set_num_threads(3)
    assert mojolearn.set_num_threads(5) == 3
    assert mojolearn.get_num_threads() == 5
    assert mojolearn.set_num_threads(1) == 5


_CHILD = textwrap.dedent("""
    import hashlib, os, sys
    import numpy as np
    import mojolearn
    from mojolearn import linalg
    n = mojolearn.get_num_threads()
    os.environ["MOJOLEARN_NUM_THREADS"] = "5"   # read once: a later change is ignored
    assert mojolearn.get_num_threads() == n
    r = np.random.default_rng(99)
    a = r.standard_normal((3, 1000)).astype(np.float32)
    b = r.standard_normal((1000, 70)).astype(np.float32)
    c = r.standard_normal((150, 300)).astype(np.float32)
    d = r.standard_normal((300, 130)).astype(np.float32)
    x = r.standard_normal((301, 1000)).astype(np.float32)
    outs = [
        linalg.matmul(a, b), linalg.matmul(c, d), linalg.matmul(c, np.ascontiguousarray(d.T), transpose_b=True),
        linalg.matmul_bf16(a, linalg.to_bf16(b)), linalg.matmul_int8(x[:40], x[40:]),
        linalg.matmul_int15(x[:40], x[40:]), linalg.to_bf16(x), *linalg.quantize_int8(x),
        *linalg.quantize_int15(x),
    ]
    # edge values (no inf/NaN into the GEMMs: NaN payloads are not promised)
    s = r.choice(np.array([0.0, -0.0, 1e-40, -1e-40, 1e30, -1e30, 1e-30, 2.0 ** -126,
                           1 - 2.0 ** -24, 3.0, -1e-20, 1e-20], np.float32), size=(6, 300))
    y = r.choice(np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, 3.4e38, -3e-39,
                           2.0 ** -125, 1.5], np.float32), size=(7, 129))
    outs += [linalg.matmul(s, np.ascontiguousarray(s.T)), linalg.matmul(s[:2], np.ascontiguousarray(s.T)),
             linalg.matmul_int8(s, s), linalg.matmul_int15(s, s), linalg.to_bf16(y),
             *linalg.quantize_int8(y), *linalg.quantize_int15(y)]
    print(n, *[hashlib.sha256(bytes(memoryview(o).cast("B"))).hexdigest()[:16] for o in outs])
""")


def _child(env_threads):
    env = dict(os.environ)
    env["MOJOLEARN_NUM_THREADS"] = str(env_threads)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python"), str(ROOT)] +
                                        ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    p = subprocess.run([sys.executable, "-c", _CHILD], env=env, cwd=str(ROOT),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout.split()


def test_env_thread_count_in_subprocesses():
    """6.5 + threads API: MOJOLEARN_NUM_THREADS=1, 2, 3 (read once per process) are
    honoured and give the same bits for every profile and converter."""
    runs = {t: _child(t) for t in (1, 2, 3)}
    for t, out in runs.items():
        assert out[0] == str(t), (t, out[0])
    assert runs[1][1:] == runs[2][1:] == runs[3][1:]


def test_concurrent_python_threads():
    """6.5: calls made at the same time from several Python threads (each kernel
    releases the GIL and keeps a per-thread workspace) give the same bits as alone."""
    from concurrent.futures import ThreadPoolExecutor

    r = rng(23)
    cases = []
    for i in range(12):
        m, k, n = [(1, 300, 70), (7, 129, 40), (150, 257, 33), (3, 2049, 530)][i % 4]
        a, b = normal(r, m, k), normal(r, k, n)
        cases.append((a, b, O.gemm_fp32_v1(a, b), O.gemm_int15_f32(a, np.ascontiguousarray(b.T))))

    def job(case):
        a, b, e32, e15 = case
        bt = np.ascontiguousarray(b.T)
        for _ in range(4):
            assert_same_bits(linalg.matmul(a, b), e32, "concurrent matmul")
            assert_same_bits(linalg.matmul(a, bt, transpose_b=True), e32, "concurrent NT")
            assert_same_bits(linalg.matmul_int15(a, bt), e15, "concurrent int15")
        return True

    with ThreadPoolExecutor(4) as ex:
        assert all(ex.map(job, cases))


_FORK = textwrap.dedent("""
    import os, sys, warnings
    import numpy as np
    import mojolearn
    from mojolearn import linalg

    mojolearn.set_num_threads(2)
    r = np.random.default_rng(5)
    a = r.standard_normal((300, 257)).astype(np.float32)
    b = r.standard_normal((257, 190)).astype(np.float32)
    bt = np.ascontiguousarray(b.T)

    def products():
        p = linalg.prepare(bt, transpose_b=True)
        outs = (linalg.matmul(a, b), linalg.matmul(a[:1], p, transpose_b=True),
                linalg.matmul_int8(a, bt), linalg.to_bf16(a))
        return [np.asarray(o).tobytes() for o in outs]

    def child(expect_warning, ref):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            got = products()
            got2 = products()
        forked = [x for x in w if "forked" in str(x.message)]
        ok = (ref is None or got == ref) and got == got2
        ok = ok and len(forked) == (1 if expect_warning else 0)
        ok = ok and mojolearn.get_num_threads() == 2
        os._exit(0 if ok else 3)

    def fork_and_wait(expect_warning, ref):
        pid = os.fork()
        if pid == 0:
            child(expect_warning, ref)
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])

    # before any multi-task call: the child starts worker threads of its own
    print(fork_and_wait(False, None))
    ref = products()  # starts this process's worker threads
    # after it: the child has none; its calls must run as one task, not wait forever
    print(fork_and_wait(True, ref))
""")


def test_forked_child_runs_with_the_same_bits():
    """A process forked after a multi-task call inherits the Mojo runtime's state but
    not its worker threads: a multi-task call there used to wait forever. Such a child
    now runs every kernel as one task (6.5: the same bits), warns once, and still
    reports the configured thread count; a child forked before any such call keeps
    its threads and stays silent. The whole run has a time limit, so a hang fails."""
    env = dict(os.environ)
    env.pop("MOJOLEARN_NUM_THREADS", None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python"), str(ROOT)] +
                                        ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    try:
        p = subprocess.run([sys.executable, "-c", _FORK], env=env, cwd=str(ROOT),
                           capture_output=True, text=True, timeout=180)
    except subprocess.TimeoutExpired:
        pytest.fail("a forked child's kernel call did not return within 180 s")
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.split() == ["0", "0"], (p.stdout, p.stderr[-3000:])


# ---------------------------------------------------------------- layouts (identity only)
@pytest.mark.parametrize("m,k,n", [(4, 5000, 300), (200, 3000, 150), (33, 20000, 65)], ids=str)
def test_layouts_identical_on_larger_shapes(m, k, n):
    """6.5: NN, NT and TN give the same bits (shapes too big for the oracle; the
    oracle is checked on a sample of rows)."""
    r = rng(m + n)
    a, b = normal(r, m, k), normal(r, k, n)
    res = {lay: np.asarray(run()) for lay, run in fp32_layouts(a, b)}
    assert_same_bits(res["NT"], res["NN"], "NT vs NN")
    assert_same_bits(res["TN"], res["NN"], "TN vs NN")
    bits = O.to_bf16(b)
    ab = O.to_bf16(a)
    rb = {lay: np.asarray(fn()) for lay, fn in (
        ("NN", lambda: linalg.matmul_bf16(ab, bits)),
        ("NT", lambda: linalg.matmul_bf16(ab, np.ascontiguousarray(bits.T), transpose_b=True)),
        ("TN", lambda: linalg.matmul_bf16(np.ascontiguousarray(ab.T), bits, transpose_a=True)),
    )}
    assert_same_bits(rb["NT"], rb["NN"], "bf16 NT vs NN")
    assert_same_bits(rb["TN"], rb["NN"], "bf16 TN vs NN")
    rows = [0, m - 1]
    assert_same_bits(res["NN"][rows], O.gemm_fp32_v1(a[rows], b), "oracle rows")


# ---------------------------------------------------------------- row alone vs batch
@pytest.mark.parametrize("k", [1, 129, 1000, 20000])
def test_fp32_row_alone_equals_row_in_batch(k):
    """6.5: a row computed alone (and in sub-batches of 2, 3, 4, 5, 13, 144, 145 rows,
    which take different kernels) equals the same row inside a batch of 300, in
    every layout."""
    r = rng(k)
    a, b = normal(r, 300, k), normal(r, k, 70)
    full = {lay: np.asarray(run()) for lay, run in fp32_layouts(a, b)}
    for lay in ("NT", "TN"):
        assert_same_bits(full[lay], full["NN"], f"batch {lay}")
    for s in (1, 2, 3, 4, 5, 13, 144, 145):
        for r0 in (0, 299 - s + 1, 77):
            part = a[r0:r0 + s]
            for lay, run in fp32_layouts(part, b):
                assert_same_bits(run(), full["NN"][r0:r0 + s], f"rows {r0}:{r0 + s} {lay}")
    assert_same_bits(full["NN"][[0, 150, 299]], O.gemm_fp32_v1(a[[0, 150, 299]], b), "oracle")


def test_fp32_row_alone_equals_row_in_batch_large_k():
    """6.5 + 6.2: the same at k = 131073 (L = 129): one row, four rows and five rows
    of a 146-row batch (blocked path) agree."""
    k = 131073
    r = rng(5)
    a, b = normal(r, 146, k), normal(r, k, 3)
    full = np.asarray(linalg.matmul(a, b))
    for s in (1, 4, 5):
        for r0 in (0, 141):
            assert_same_bits(linalg.matmul(a[r0:r0 + s], b), full[r0:r0 + s], f"rows {r0}+{s}")
    assert_same_bits(full[[0, 145]], O.gemm_fp32_v1(a[[0, 145]], b), "oracle")


@pytest.mark.parametrize("k", [1, 300, 2049])
def test_fp32_column_alone_equals_column_in_wide_product(k):
    """6.5: a column computed alone (and in blocks of 31, 32, 33, 512, 513 columns)
    equals the same column in a product with n = 600, for m = 1, 3, 7, 150."""
    r = rng(k + 1)
    b = normal(r, k, 600)
    for m in (1, 3, 7, 150):
        a = normal(r, m, k)
        full = np.asarray(linalg.matmul(a, b))
        for w in (1, 31, 32, 33, 512, 513):
            for j0 in (0, 600 - w, 45):
                part = b[:, j0:j0 + w]
                for lay, run in fp32_layouts(a, np.ascontiguousarray(part)):
                    assert_same_bits(run(), full[:, j0:j0 + w], f"m={m} cols {j0}+{w} {lay}")
        assert_same_bits(full[:, [0, 599]], O.gemm_fp32_v1(a, b[:, [0, 599]]), "oracle")


def test_bf16_row_and_column_identity():
    """9 + 6.5: matmul_bf16 row alone == row in a batch of 300; column alone == column
    in n = 600."""
    r = rng(11)
    a = O.to_bf16(normal(r, 300, 700))
    b = O.to_bf16(normal(r, 700, 600))
    full = np.asarray(linalg.matmul_bf16(a, b))
    for s in (1, 3, 5, 145):
        assert_same_bits(linalg.matmul_bf16(a[10:10 + s], b), full[10:10 + s], f"rows {s}")
        assert_same_bits(linalg.matmul_bf16(O.from_bf16(a[10:10 + s]).copy(), b), full[10:10 + s],
                         f"f32 rows {s}")
    for w in (1, 33, 513):
        assert_same_bits(linalg.matmul_bf16(a, np.ascontiguousarray(b[:, 40:40 + w])),
                         full[:, 40:40 + w], f"cols {w}")


@pytest.mark.parametrize("profile", ["int8", "int15"])
def test_int_row_and_column_identity(profile):
    """L-5 W-3: a row of a alone == the row in a batch of 300 and a row of b alone ==
    the column in n = 600, as float32 operands and as quantized tuples."""
    fn = linalg.matmul_int8 if profile == "int8" else linalg.matmul_int15
    quant = linalg.quantize_int8 if profile == "int8" else linalg.quantize_int15
    r = rng(13)
    a = (r.standard_normal((300, 257)) * 2.0 ** r.integers(-40, 40, size=(300, 1))).astype(F32)
    b = (r.standard_normal((600, 257)) * 2.0 ** r.integers(-40, 40, size=(600, 1))).astype(F32)
    full = np.asarray(fn(a, b))
    qa = [np.asarray(x) for x in quant(a)]
    qb = [np.asarray(x) for x in quant(b)]
    for s in (1, 5, 6, 7, 145):
        assert_same_bits(fn(a[20:20 + s], b), full[20:20 + s], f"rows {s}")
        assert_same_bits(fn(tuple(x[20:20 + s] for x in qa), tuple(qb)), full[20:20 + s], f"q rows {s}")
    for w in (1, 31, 32, 33, 513):
        assert_same_bits(fn(a, b[50:50 + w]), full[:, 50:50 + w], f"cols {w}")
        assert_same_bits(fn(tuple(qa), tuple(x[50:50 + w] for x in qb)), full[:, 50:50 + w], f"q cols {w}")
    ora = O.gemm_int8_f32 if profile == "int8" else O.gemm_int15_f32
    assert_same_bits(full, ora(a, b), "oracle")


def test_converter_slices_equal_whole():
    """L-2 L-3 W-1: converting a slice gives the same bits as slicing the conversion
    (to_bf16 elementwise; quantizers row by row)."""
    r = rng(17)
    x = (r.standard_normal((300, 513)) * 2.0 ** r.integers(-100, 100, size=(300, 1))).astype(F32)
    whole = np.asarray(linalg.to_bf16(x))
    assert_same_bits(np.asarray(linalg.to_bf16(x[7:9, 3:200])), whole[7:9, 3:200], "to_bf16 slice")
    assert_same_bits(np.asarray(linalg.to_bf16(x[123, 5])), whole[123, 5], "to_bf16 0-d")
    c, e = (np.asarray(v) for v in linalg.quantize_int8(x))
    h, l, e15 = (np.asarray(v) for v in linalg.quantize_int15(x))
    for r0 in (0, 150, 299):
        c1, e1 = linalg.quantize_int8(x[r0:r0 + 1])
        assert_same_bits(np.asarray(c1), c[r0:r0 + 1], "q8 row")
        assert_same_bits(np.asarray(e1), e[r0:r0 + 1], "q8 exp")
        h1, l1, f1 = linalg.quantize_int15(x[r0:r0 + 1])
        assert_same_bits(np.asarray(h1), h[r0:r0 + 1], "q15 hi")
        assert_same_bits(np.asarray(l1), l[r0:r0 + 1], "q15 lo")
        assert_same_bits(np.asarray(f1), e15[r0:r0 + 1], "q15 exp")


# ---------------------------------------------------------------- ISA / FP state
def test_instruction_set_builds_identical():
    """6.5 (ISA): every CPU build this CPU can run (amx, v4, v3: MOJOLEARN_ISA forces
    each, in its own process) gives the same bits on a set of GEMM and converter cases;
    a build this CPU cannot run is skipped with the reason (at least v3 always runs)."""
    from mojolearn._core import cpu as _cpu

    ok = _cpu.runnable()
    for name in _cpu.isa_names():
        if name not in ok:
            print(f"isa {name} skipped: {_cpu.refusal(name)}")
    assert "v3" in ok
    outs = {name: _child_isa(name) for name in ok}
    for name in ok[1:]:
        assert outs[name] == outs[ok[0]], f"{name} differs from {ok[0]}"


def _child_isa(name):
    env = dict(os.environ)
    env.pop("MOJOLEARN_NATIVE", None)
    env["MOJOLEARN_ISA"] = name
    env.pop("MOJOLEARN_NUM_THREADS", None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python"), str(ROOT)])
    p = subprocess.run([sys.executable, "-c", _CHILD], env=env, cwd=str(ROOT),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout.split()[1:]


def test_kernels_restore_the_callers_fp_control_state(threads):
    """6.1 (FP state): every kernel restores the calling thread's MXCSR control bits
    (DAZ/FTZ/rounding), so numpy (and the oracle) keep IEEE subnormals afterwards."""
    from mojolearn._core.loader import native

    def ctrl():
        return int(native().mxcsr(())) & 0xFFC0  # control bits only (not the flags)

    before = ctrl()
    r = rng(3)
    a = normal(r, 5, 300)
    for t in (1, 2):
        mojolearn.set_num_threads(t)
        linalg.matmul(a, a.T.copy())
        linalg.matmul(a[:1], a.T.copy())
        linalg.matmul_bf16(a, O.to_bf16(a.T.copy()))
        linalg.matmul_int8(a, a)
        linalg.matmul_int15(a, a)
        linalg.dequantize_int8(*linalg.quantize_int8(a))
        linalg.dequantize_int15(*linalg.quantize_int15(a))
        linalg.from_bf16(linalg.to_bf16(a))
        assert ctrl() == before
    tiny = np.array([2.0 ** -126], F32)
    assert (tiny / F32(2))[0] != 0  # numpy still produces subnormals

"""mojolearn.identical.gemm.fp32.v1 (linalg.matmul) against the independent oracle.

Every comparison is bit for bit on the float32 patterns; where NaN can appear only
"NaN in both" is required at those positions (NaN payloads are not promised, 6.6).
Each test's docstring names the rule(s) of the fp32.v1 contract it checks:
6.1 DAZ, 6.2 leaf size, 6.3 FMA chain inside a leaf, 6.4 tree over leaves,
6.5 order depends on k only, 6.6 specials, 7 API, 8 degenerate shapes.

Kernel paths covered on purpose (the CPU build has three): m <= ROWS_MAX with a
float32 row-major B (the "rows" decode path; NT goes elsewhere), m up to SMALL_M
(the small-m path) and m > SMALL_M (the blocked path, in A blocks of MC rows); n < 32,
n a multiple of 32, odd n, and n > 512 (the column chunking of the small-m path). MR,
MC, SMALL_M and ROWS_MAX are read from the block table of the build this process runs
(mojo/gemm/cpu/blocking.mojo; MC from the process's cache plan, so it differs between
CPUs; tests/test_cache_plan.py runs the kernels on other plans);
tests/test_isa_kernels.py runs this file on every build.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from mojolearn import linalg
from mojolearn._core.loader import blocking
from tests import oracle as O
from tests.bits import assert_same_bits, u32

F32 = np.float32
BLOCKS = blocking()
MR, MC, ROWS_MAX = BLOCKS["MR"], BLOCKS["MC"], BLOCKS["ROWS_MAX"]
SMALL_M = BLOCKS["SMALL_M"]
# the fewest rows on the blocked path that still fill more than one A block
BLOCKED_M = max(MC, SMALL_M) + 1
# every m to 14, then both sides of two register tiles (2 MR), half an A block (where
# two tasks split m), the A block (MC), the small-m path's edge (SMALL_M) and two blocks
EDGE_MS = sorted(set(range(1, 15)) | {ROWS_MAX, ROWS_MAX + 1}
                 | {e + d for e in (2 * MR, MC // 2, MC, SMALL_M) for d in (-1, 0, 1)}
                 | {2 * MC + 1, BLOCKED_M + MC})


# ---------------------------------------------------------------- helpers


def oracle(a, b):
    with np.errstate(all="ignore"):
        return O.gemm_fp32_v1(np.ascontiguousarray(a), np.ascontiguousarray(b))


def layouts(a, b):
    """The same logical product a @ b through NN, NT and TN."""
    at = np.ascontiguousarray(a.T)
    bt = np.ascontiguousarray(b.T)
    return {
        "NN": linalg.matmul(a, b),
        "NT": linalg.matmul(a, bt, transpose_b=True),
        "TN": linalg.matmul(at, b, transpose_a=True),
    }


def check_all_layouts(a, b, what="", exp=None):
    if exp is None:
        exp = oracle(a, b)
    for lay, got in layouts(a, b).items():
        assert got.shape == exp.shape and got.dtype == "float32"
        assert_same_bits(got, exp, f"{what} {lay} m,k,n={a.shape[0]},{a.shape[1]},{b.shape[1]}")
    return exp


def one_product(xs, ys, m=1, n=1):
    """a (m, k) whose every row is xs and b (k, n) whose every column is ys."""
    xs = np.asarray(xs, dtype=F32)
    ys = np.asarray(ys, dtype=F32)
    return np.tile(xs, (m, 1)), np.tile(ys[:, None], (1, n))


RNG = np.random.default_rng(20240611)


def normal(*shape):
    return RNG.standard_normal(shape).astype(F32)


# Shapes: (m, n) pairs that reach every kernel path, and k at every leaf boundary.
SMALL_K = [1, 2, 127, 128, 129, 255, 256, 257, 1000, 2049]
MN_ALL = [(1, 1), (3, 31), (4, 32), (5, 33), (13, 64), (72, 7), (73, 2)]
MN_SOME = [(144, 3), (145, 67)]
SHAPES = [(m, k, n) for k in SMALL_K for (m, n) in MN_ALL]
SHAPES += [(m, k, n) for k in (1, 129, 257, 2049) for (m, n) in MN_SOME]
SHAPES += [
    # odd sizes (both readings of m x k x n / m x n x k where cheap)
    (1, 1, 1), (15, 16, 17), (15, 17, 16), (61, 73, 79), (61, 79, 73),
    (145, 67, 300), (145, 300, 67), (150, 40, 130), (150, 130, 40),
    # n past the small-m column chunk (512) and the rows path with a wide n
    (2, 300, 530), (7, 129, 530), (150, 257, 545),
]
LARGE_K = [
    (2, 131072, 3), (5, 131072, 33), (1, 131072, 64),
    (2, 131073, 3), (5, 131073, 33), (145, 131073, 2),
    (2, 262145, 3), (5, 262145, 32), (1, 262145, 1),
]


# ---------------------------------------------------------------- random data, all shapes
@pytest.mark.parametrize("m,k,n", SHAPES, ids=lambda v: str(v))
def test_random_shapes_all_layouts(m, k, n):
    """6.2 6.3 6.4 6.5: random normals at every leaf boundary and kernel path; NN, NT
    and TN all give the oracle's bits."""
    a, b = normal(m, k), normal(k, n)
    check_all_layouts(a, b, "random")


@pytest.mark.parametrize("m,k,n", LARGE_K, ids=lambda v: str(v))
def test_random_large_k(m, k, n):
    """6.2 6.4: k = 131072 (1024 leaves of 128), 131073 (L = 129, 1017 leaves) and
    262145 (L = 257, 1021 leaves, a short last leaf) on every kernel path."""
    a, b = normal(m, k), normal(k, n)
    exp = oracle(a, b)
    if m > 4:
        # TN (a transposed 76 MB copy of a) only for the smaller of these m
        assert_same_bits(linalg.matmul(a, b), exp, "NN")
        assert_same_bits(linalg.matmul(a, np.ascontiguousarray(b.T), transpose_b=True), exp, "NT")
        if m <= 5:
            assert_same_bits(linalg.matmul(np.ascontiguousarray(a.T), b, transpose_a=True), exp, "TN")
    else:
        check_all_layouts(a, b, "large k", exp=exp)


def nt_decode_operands(k, n, seed):
    """One row x (1, k) and B stored (n, k) for the NT decode tests: subnormal and -0
    entries of x, subnormal entries of B, an inf in column 1 (6e38), a NaN at the start
    of row 2 (column 2 NaN) and a last row of zeros."""
    r = np.random.default_rng(seed)
    x = r.standard_normal((1, k)).astype(F32)
    bt = r.standard_normal((n, k)).astype(F32)
    x[0, ::7] = F32(1e-39)
    x[0, 1::13] = F32(-0.0)
    bt[:, 3::11] = F32(-1e-40)
    x[0, 5] = F32(2.0)
    bt[1, 5] = F32(3e38)       # 6e38: inf in column 1 only
    bt[2, 0] = np.nan          # column 2 is NaN
    bt[n - 1] = 0.0            # the last column: signed zeros only
    return x, bt


def nt_decode_matches_oracle(x, bt):
    """x @ bt.T through transpose_b on 1 and 2 threads: the oracle's bits. Returns them."""
    import mojolearn

    exp = oracle(x, bt.T)
    prev = mojolearn.get_num_threads()
    try:
        for t in (1, 2):
            mojolearn.set_num_threads(t)
            assert_same_bits(linalg.matmul(x, bt, transpose_b=True), exp,
                             f"k={x.shape[1]} n={bt.shape[0]} threads={t}")
    finally:
        mojolearn.set_num_threads(prev)
    return exp


@pytest.mark.parametrize("k,n", [(256, 32), (1024, 100), (1536, 64), (2048, 16), (3072, 47),
                                 (4096, 33), (16384, 24), (139264, 32), (138752, 17)],
                         ids=lambda v: str(v))
def test_decode_nt_rows_on_the_l1_set_period(k, n):
    """6.1 6.3 6.4 6.5: one row against B stored (n, k) with k a multiple of 256 (rows
    4k bytes apart, a multiple of 1 KiB) gives the oracle's bits with 1 and 2 threads:
    full chunks of columns and a short one, with subnormal, zero, huge and NaN entries.
    k = 1024 to 4096 (8 to 32 leaves of 128) take the leaves-in-lanes rows
    (mojo/gemm/cpu/rows_f32.mojo _rows_nt_lanes). The others take the one-row kernel
    where the rows fall in few L1 sets (_rows_nt_one: one W-column group at a time, two
    of its leaves side by side, a short last leaf through the transposed chunk; AVX2
    for k a multiple of 256, AVX-512 of 1024): k = 256 (2 leaves), 16384 (128 leaves),
    139264 (L = 136: every leaf ends on a half line) and 138752 (L = 136, a short last
    leaf of 32 k-steps)."""
    x, bt = nt_decode_operands(k, n, seed=k + n)
    nt_decode_matches_oracle(x, bt)


@pytest.mark.parametrize("k,n", [(512, 100), (640, 17), (1024, 16), (1152, 40), (1920, 33),
                                 (8064, 24), (8192, 9), (8320, 16), (448, 33), (576, 40),
                                 (960, 24), (1000, 17), (580, 16)],
                         ids=lambda v: str(v))
def test_decode_nt_leaves_in_lanes(k, n):
    """6.1 6.3 6.4 6.5: one row against B stored (n, k) made of 4 to 64 leaves of 128, the
    last one possibly short by a multiple of 8 steps (the decode rows then put each
    output's leaves in the lanes of a vector and read its row of B front to back,
    mojo/gemm/cpu/rows_f32.mojo _rows_nt_lanes; 65 leaves, k = 8320, and a last leaf of 68
    steps, k = 580, go the other way) gives the oracle's bits with 1 and 2 threads: 4, 5,
    8, 9, 15, 63 and 64 whole leaves; short last leaves of 64 and 104 steps (k = 448, 576,
    960, 1000); fewer columns than a group of the vector width, a short last group and a
    second task's columns; lanes past the last leaf, and the short leaf's lane past its
    end, reading the next row's first values (NaN at the start of row 2, inf at the start
    of row 4: outputs 1 and 3 must not see them) and the last row copied into a
    zero-padded one; subnormal, signed-zero and huge entries."""
    x, bt = nt_decode_operands(k, n, seed=k * 7 + n)  # NaN at the start of row 2
    bt[4, 0] = np.inf          # column 4 is inf or NaN; row 3's spare lanes read it
    bt[n - 1, 1::3] = F32(-0.0)
    exp = nt_decode_matches_oracle(x, bt)
    assert np.isfinite(exp[0, 3]) and not np.isnan(exp[0, 1])


def test_blocked_path_column_chunks_large_k():
    """6.4 6.5: m > MC, SMALL_M with k = 131073: the blocked path packs B in 32-column
    chunks at this k, so n = 70 crosses chunk boundaries (sampled rows vs the oracle)."""
    m, k, n = BLOCKED_M, 131073, 70
    a, b = normal(m, k), normal(k, n)
    got = np.asarray(linalg.matmul(a, b))
    rows = sorted({0, 1, MR - 1, MR, MC // 2 - 1, MC // 2, MC - 1, MC, m - 1})
    assert_same_bits(got[rows], oracle(a[rows], b), f"blocked {m}x131073x70")


@pytest.mark.parametrize("tasks,panels", [(2, 5), (3, 7), (3, 8), (8, 19)])
def test_column_split_leftover_panels_split_by_rows(tasks, panels):
    """6.5: a column split whose NR panels do not divide evenly over the tasks (A packed
    once and shared) gives each task its whole panels over every row and a share of the
    leftover panels' rows, cut at A-block edges (panel_share in mojo/common/tasks.mojo):
    2 tasks and 5 panels, 3 and 7; where the shares would not save an eighth of a panel
    (3 tasks and 8 panels, 8 and 19, with the reference cache plans) whole panels as
    before. The last panel narrower, m over several A blocks and not a multiple of MR;
    NN, NT, TN and the prepared weight (NT) against the oracle on 1 and `tasks` threads."""
    import mojolearn

    m, n, k = 2 * MC + MR + 3, panels * BLOCKS["NR"] - 5, 300
    a, b = normal(m, k), normal(k, n)
    exp = oracle(a, b)
    w = linalg.prepare(np.ascontiguousarray(b.T), transpose_b=True)
    old = mojolearn.get_num_threads()
    try:
        for t in (1, tasks):
            mojolearn.set_num_threads(t)
            check_all_layouts(a, b, f"{t} tasks, {panels} panels", exp=exp)
            assert_same_bits(linalg.matmul(a, w, transpose_b=True), exp, f"prepared, {t} tasks, {panels} panels")
    finally:
        mojolearn.set_num_threads(old)


def _visit_order_ks():
    """k either side of where the blocked path stops visiting a row block panel by panel
    (its A over all of k within PANEL_OUTER_A_BYTES) and goes leaf by leaf."""
    kt = BLOCKS["PANEL_OUTER_A_BYTES"] // (4 * MC)
    return [kt, kt + 1]


@pytest.mark.parametrize("k", _visit_order_ks())
def test_blocked_path_both_visit_orders(k):
    """6.4 6.5: m > MC, SMALL_M on both tile visit orders of the blocked path (column
    panel outer with one panel's tree slots, or leaf outer with a whole block's slots);
    NN, NT and TN against the oracle, with a second row block and an odd last panel."""
    m, n = BLOCKED_M + 6, 70
    a, b = normal(m, k), normal(k, n)
    check_all_layouts(a, b, f"blocked k={k}")


TILE_NS = [1, 2, 15, 16, 17, 31, 32, 33, 47, 48, 63, 64, 65, 97]


KU = BLOCKS["KU"]
# leaf lengths of every residue mod KU, on a whole leaf and on a short last leaf
UNROLL_KS = sorted({r for r in range(1, 2 * KU + 2)} | {128 + r for r in range(1, KU + 1)})


@pytest.mark.parametrize("m", [2 * MR + 1, BLOCKED_M])
@pytest.mark.parametrize("k", UNROLL_KS)
def test_micro_kernel_unrolled_steps_and_tail(m, k):
    """6.3 6.5: the micro-kernel runs KU steps a loop iteration, then the leaf's last
    lk % KU steps one by one: every residue, on the small-m and the blocked path, all
    layouts, against the oracle (a tail step out of order or left out changes bits)."""
    a, b = normal(m, k), normal(k, 33)
    check_all_layouts(a, b, f"KU={KU}")


@pytest.mark.parametrize("m", EDGE_MS)
def test_tile_edges(m):
    """6.3 6.4 6.5: every m from 1 to 14 and the register/panel/block edges of this
    build's table (2 MR, MC / 2, MC, SMALL_M, 2 MC + 1) against n at the 16/32-column edges, k = 257
    (three leaves), all layouts."""
    k = 257
    a = normal(m, k)
    b = normal(k, max(TILE_NS))
    full = oracle(a, b)  # columns are independent: slice the oracle's result
    for n in TILE_NS:
        check_all_layouts(a, np.ascontiguousarray(b[:, :n]), f"tile m={m} n={n}",
                          exp=np.ascontiguousarray(full[:, :n]))


# ---------------------------------------------------------------- hand-built cases
PATH_MN = [(1, 1), (3, 5), (5, 33), (150, 40)]


@pytest.mark.parametrize("m,n", PATH_MN)
def test_daz_inputs(m, n):
    """6.1: a subnormal input is read as a zero of the same sign: 2**-130 * 2**120
    gives +0 (not 2**-10), on either operand, and -2**-130 * 2**120 + 1 gives 1."""
    tiny, big = F32(2.0 ** -130), F32(2.0 ** 120)
    cases = [
        ([tiny], [big], 0.0),
        ([big], [tiny], 0.0),
        ([-tiny], [big], 0.0),  # -0 * big + (+0) = +0
        ([tiny, F32(1)], [big, F32(1)], 1.0),
        ([F32(2.0 ** -149)] * 3, [big] * 3, 0.0),
    ]
    for xs, ys, want in cases:
        a, b = one_product(xs, ys, m, n)
        exp = check_all_layouts(a, b, f"daz {xs}")
        assert np.all(u32(exp) == u32(np.array(want, F32))), (xs, ys, exp)


@pytest.mark.parametrize("m,n", PATH_MN)
def test_fma_single_rounding(m, n):
    """6.3: a true fused multiply-add: -(1+2**-19) + (1+2**-20)**2 is 2**-40 exactly
    (a separate multiply would round the square and give 0)."""
    x = F32(1 + 2.0 ** -20)
    a, b = one_product([-(1 + 2.0 ** -19), x], [1.0, x], m, n)
    exp = check_all_layouts(a, b, "fma")
    assert np.all(exp == F32(2.0 ** -40))


@pytest.mark.parametrize("m,n", PATH_MN)
def test_fma_sum_one_float64_ulp_beside_a_float32_midpoint(m, n):
    """6.3 (issue 11): a = [-7, 3, -7], b bits [0x87A519DE, 0x2314FAAF, 0x9B29CF1D].
    The second step's float64 sum sits one float64 ulp above a float32 midpoint;
    exact arithmetic gives 0x23DF7A59 (the kernel always did; the first oracle
    said 0x23DF7A58)."""
    bv = np.array([0x87A519DE, 0x2314FAAF, 0x9B29CF1D], dtype=np.uint32).view(F32)
    a, b = one_product([-7.0, 3.0, -7.0], list(bv), m, n)
    exp = check_all_layouts(a, b, "midpoint neighbour")
    assert np.all(u32(exp) == 0x23DF7A59)


@pytest.mark.parametrize("m,n", PATH_MN)
def test_sequential_order_inside_leaf(m, n):
    """6.3: kk ascending inside a leaf: 2**24 + 1 rounds to 2**24 (tie to even), then
    - 2**24 gives +0; any other order gives 1."""
    a, b = one_product([2.0 ** 24, 1.0, -(2.0 ** 24)], [1.0, 1.0, 1.0], m, n)
    exp = check_all_layouts(a, b, "order")
    assert np.all(u32(exp) == 0)
    # and the reverse gives 1 (so the rule is visible in the data)
    a, b = one_product([-(2.0 ** 24), 1.0, 2.0 ** 24], [1.0, 1.0, 1.0], m, n)
    exp = check_all_layouts(a, b, "order reversed")
    assert np.all(exp == 1.0)


@pytest.mark.parametrize("m,n", PATH_MN)
def test_every_step_flushed(m, n):
    """6.3: every FMA result is flushed: 2**-70 * 2**-60 = 2**-130 is flushed to +0,
    so adding 2**-100 * 2**-26 gives exactly 2**-126 (not 1.0625 * 2**-126)."""
    a, b = one_product([2.0 ** -70, 2.0 ** -100], [2.0 ** -60, 2.0 ** -26], m, n)
    exp = check_all_layouts(a, b, "flush step")
    assert np.all(exp == F32(2.0 ** -126))


@pytest.mark.parametrize("m,n", PATH_MN)
def test_flush_keeps_sign(m, n):
    """6.3: flushes keep the sign: -1e-20 * 1e-20 from +0 gives -0.0; (-1) * 0 + (+0)
    gives +0; a whole multi-leaf row of negative tiny products stays -0.0 through
    the tree (6.4 sums -0 + -0)."""
    cases = [
        ([-1e-20], [1e-20], 0x80000000),
        ([1e-20], [-1e-20], 0x80000000),
        ([-1.0], [0.0], 0x00000000),
        ([-1e-20, -1e-20], [1e-20, 1e-20], 0x80000000),
        ([-1e-20] * 300, [1e-20] * 300, 0x80000000),  # 3 leaves, all -0
    ]
    for xs, ys, want in cases:
        a, b = one_product(xs, ys, m, n)
        exp = check_all_layouts(a, b, f"sign {xs[:2]} k={len(xs)}")
        assert np.all(u32(exp) == want), (len(xs), hex(int(u32(exp).flat[0])))
    # a leaf ending on +0 * x: fma(+0, 1e-20, -0) = +0 + -0 = +0 (round to nearest)
    xs = [-1e-20] * 129 + [0.0] * 171
    a, b = one_product(xs, [1e-20] * 300, m, n)
    exp = check_all_layouts(a, b, "sign leaf tail")
    # leaf 0: 128 x -0 = -0; leaf 1: -0 then +0*... = +0; leaf 2: +0 -> -0 + +0 + +0 = +0
    assert np.all(u32(exp) == 0)


@pytest.mark.parametrize("m,n", PATH_MN)
def test_fma_rounding_up_to_smallest_normal_is_kept(m, n):
    """6.3 (and the x86 FTZ note): fma(1 - 2**-24, 2**-126, +0) rounds up to 2**-126,
    a normal, which is kept (x86 FTZ mode would flush it)."""
    a, b = one_product([1 - 2.0 ** -24], [2.0 ** -126], m, n)
    exp = check_all_layouts(a, b, "round up to 2**-126")
    assert np.all(u32(exp) == 0x00800000)
    a, b = one_product([-(1 - 2.0 ** -24)], [2.0 ** -126], m, n)
    exp = check_all_layouts(a, b, "round up to -2**-126")
    assert np.all(u32(exp) == 0x80800000)


@pytest.mark.parametrize("m,n", PATH_MN)
def test_tree_sums_flushed_with_sign(m, n):
    """6.4: every tree sum is flushed: leaves 1.5*2**-126 and -1.25*2**-126 sum to a
    subnormal, flushed to +0; with the signs swapped to -0.0."""
    for s, want in ((1.0, 0x00000000), (-1.0, 0x80000000)):
        xs = np.zeros(256, F32)
        xs[0] = s * 1.5 * 2.0 ** -126
        xs[128] = -s * 1.25 * 2.0 ** -126
        a, b = one_product(xs, np.ones(256, F32), m, n)
        exp = check_all_layouts(a, b, "tree flush")
        assert np.all(u32(exp) == want)


@pytest.mark.parametrize("m,n", PATH_MN)
def test_tree_shape(m, n):
    """6.4: balanced pairwise tree, odd last element carried: with 4 leaves
    (2**24 + 0) + (1 + 1) = 2**24 + 2 (a left fold gives 2**24); with 7 leaves
    (p01 + p23) + (p45 + p6) = 2**24 + (1 + 1) = 2**24 + 2."""
    xs = np.zeros(512, F32)
    xs[0], xs[256], xs[384] = 2.0 ** 24, 1.0, 1.0
    a, b = one_product(xs, np.ones(512, F32), m, n)
    exp = check_all_layouts(a, b, "4 leaves")
    assert np.all(exp == F32(2 ** 24 + 2))
    xs = np.zeros(7 * 128, F32)
    xs[0], xs[4 * 128], xs[6 * 128] = 2.0 ** 24, 1.0, 1.0
    a, b = one_product(xs, np.ones(7 * 128, F32), m, n)
    exp = check_all_layouts(a, b, "7 leaves")
    assert np.all(exp == F32(2 ** 24 + 2))


@pytest.mark.parametrize("k,L", [(1000, 128), (131072, 128), (131073, 129),
                                 (262144, 256), (262145, 257)])
@pytest.mark.parametrize("m,n", [(1, 1), (2, 3), (5, 33)])
def test_leaf_size_rule(k, L, m, n):
    """6.2: L = max(128, ceil(k/1024)). 2**24 at 0, 1 at L-1 (same leaf: absorbed),
    1 at L and L+1 (next leaf: 2) gives 2**24 + 2 only for the right L
    (L-1 gives 2**24 + 4, L+1 gives 2**24)."""
    assert O.leaf_size(k) == L
    xs = np.zeros(k, F32)
    xs[0] = 2.0 ** 24
    xs[L - 1] = xs[L] = xs[L + 1] = 1.0
    a, b = one_product(xs, np.ones(k, F32), m, n)
    exp = check_all_layouts(a, b, f"leaf size k={k}")
    assert np.all(exp == F32(2 ** 24 + 2))


def test_leaf_size_rule_blocked_path():
    """6.2: the same discriminating row on the blocked path (m > 144), k = 131073."""
    k, L, m = 131073, 129, 145
    a = np.zeros((m, k), F32)
    a[:, 0] = 2.0 ** 24
    a[:, L - 1] = a[:, L] = a[:, L + 1] = 1.0
    b = np.ones((k, 2), F32)
    got = linalg.matmul(a, b)
    assert_same_bits(got, np.full((m, 2), 2 ** 24 + 2, F32), "blocked leaf size")


@pytest.mark.parametrize("m,n", PATH_MN)
def test_specials(m, n):
    """6.6: inf * 0 is NaN; inf + -inf (also across leaves) is NaN; NaN propagates;
    overflow inside a leaf and in the tree gives +-inf."""
    big = F32(3e38)
    cases = [
        ([np.inf], [0.0], "nan"),
        ([0.0], [-np.inf], "nan"),
        ([np.nan, 1.0], [1.0, 1.0], "nan"),
        ([np.inf, -np.inf], [1.0, 1.0], "nan"),
        ([np.inf, 1.0], [1.0, 2.0], np.inf),
        ([-np.inf, 1.0], [1.0, 1e30], -np.inf),
        ([big, big], [1.0, 1.0], np.inf),
        ([-big, -big], [1.0, 1.0], -np.inf),
        ([big, big, -big], [1.0, 1.0, 1.0], np.inf),  # inf does not come back
        ([1e30], [1e30], np.inf),
    ]
    for xs, ys, want in cases:
        a, b = one_product(xs, ys, m, n)
        exp = check_all_layouts(a, b, f"special {xs}")
        if want == "nan":
            assert np.all(np.isnan(exp))
        else:
            assert np.all(exp == want), (xs, exp)
    # across leaves: big in leaf 0 and leaf 1 overflow only in the tree
    xs = np.zeros(256, F32)
    xs[0] = xs[128] = big
    a, b = one_product(xs, np.ones(256, F32), m, n)
    assert np.all(check_all_layouts(a, b, "tree overflow") == np.inf)
    xs[128] = -np.inf
    xs[0] = np.inf
    a, b = one_product(xs, np.ones(256, F32), m, n)
    assert np.all(np.isnan(check_all_layouts(a, b, "tree inf-inf")))


@pytest.mark.parametrize("m,n", PATH_MN)
def test_dynamic_range_and_cancellation(m, n):
    """6.3: 1e30 + 1e-30 - 1e30 is +0 in order (1e30 - 1e30 + 1e-30 is 1e-30); x and
    -x cancel exactly; products that land in the subnormal range are flushed with
    their sign (vs the oracle)."""
    a, b = one_product([1e30, 1e-30, -1e30], [1.0, 1.0, 1.0], m, n)
    assert np.all(u32(check_all_layouts(a, b, "range")) == 0)
    a, b = one_product([1e30, -1e30, 1e-30], [1.0, 1.0, 1.0], m, n)
    assert np.all(check_all_layouts(a, b, "range 2") == F32(1e-30))
    x = normal(1000)
    xs = np.concatenate([x, -x])
    ys = np.concatenate([np.ones(1000, F32), np.ones(1000, F32)])
    a, b = one_product(xs, ys, m, n)
    check_all_layouts(a, b, "cancellation")
    # mixed: big and tiny values, some products subnormal
    k = 700
    rows = np.stack([
        normal(k) * F32(1e30), normal(k) * F32(1e-30), normal(k) * F32(1e-20),
        np.where(np.arange(k) % 2 == 0, F32(1e30), F32(1e-30)).astype(F32),
    ])
    a = np.tile(rows, (max(1, m // 4 + 1), 1))[:max(m, 4)]
    b = np.stack([normal(k) * F32(1e-20), normal(k), normal(k) * F32(1e10)], axis=1)
    b = np.tile(b, (1, n // 3 + 1))[:, :max(n, 3)]
    check_all_layouts(a, b, "mixed range")


def _edge_matrix(shape, frac=0.3):
    vals = np.array([
        0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e30, -1e30, 1e-30, -1e-30,
        2.0 ** -126, -(2.0 ** -126), 2.0 ** -149, -(2.0 ** -140), 1 - 2.0 ** -24,
        3.4e38, 1e-20, -1e-20, 2.0 ** 24, 1.0 + 2.0 ** -23,
    ], dtype=F32)
    x = normal(*shape)
    mask = RNG.random(shape) < frac
    x[mask] = RNG.choice(vals, size=int(mask.sum()))
    return x


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (2, 3, 5), (4, 300, 7), (5, 129, 33),
                                   (13, 1000, 32), (150, 257, 40), (3, 2049, 2)])
@pytest.mark.parametrize("frac", [0.02, 0.3])
def test_edge_value_matrices(m, k, n, frac):
    """6.1 6.3 6.4 6.6: matrices sprinkled with +-0, +-inf, NaN, subnormals, huge and
    tiny values on every kernel path and layout."""
    a, b = _edge_matrix((m, k), frac), _edge_matrix((k, n), frac)
    check_all_layouts(a, b, f"edges {frac}")


# ---------------------------------------------------------------- hypothesis
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    m=st.integers(1, 12), k=st.integers(1, 400), n=st.integers(1, 40),
    seed=st.integers(0, 2 ** 32 - 1), scale=st.sampled_from([1.0, 1e-19, 1e18, 2.0 ** -63]),
)
def test_hypothesis_random_normals(m, k, n, seed, scale):
    """6.3 6.4 6.5: random normals (scaled to reach the flush and overflow ranges),
    small shapes, all layouts, vs the oracle."""
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal((m, k)) * scale).astype(F32)
    b = (rng.standard_normal((k, n)) * scale).astype(F32)
    check_all_layouts(a, b, "hypothesis")


_f32_any = st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), m=st.integers(1, 6), k=st.integers(1, 300), n=st.integers(1, 35))
def test_hypothesis_any_floats(data, m, k, n):
    """6.1 6.3 6.6: any float32 values (subnormals, infinities, NaN) vs the oracle."""
    a = data.draw(hnp.arrays(F32, (m, k), elements=_f32_any))
    b = data.draw(hnp.arrays(F32, (k, n), elements=_f32_any))
    check_all_layouts(a, b, "hypothesis floats")


# ---------------------------------------------------------------- API pieces of rule 7 / 8
@pytest.mark.parametrize("m,n", [(0, 3), (3, 0), (0, 0)])
def test_degenerate_empty_m_or_n(m, n):
    """8: m = 0 or n = 0 gives an empty (m, n) float32 result in every layout."""
    k = 5
    a, b = np.ones((m, k), F32), np.ones((k, n), F32)
    for lay, got in layouts(a, b).items():
        assert got.shape == (m, n) and got.dtype == "float32", lay
        assert np.asarray(got).shape == (m, n)
        assert got.tolist() == ([] if m == 0 else [[] for _ in range(m)])


@pytest.mark.parametrize("m,n", [(1, 1), (3, 5), (5, 33), (150, 40)])
def test_degenerate_k_zero(m, n):
    """8: k = 0 gives +0.0 everywhere (also overwriting a prefilled out)."""
    a, b = np.ones((m, 0), F32), np.ones((0, n), F32)
    for lay, got in layouts(a, b).items():
        assert got.shape == (m, n)
        assert np.all(u32(got) == 0), lay
    out = np.full((m, n), -7.0, F32)
    r = linalg.matmul(a, b, out=out)
    assert np.all(u32(out) == 0)
    assert np.all(u32(r) == 0)


@pytest.mark.parametrize("m,k,n", [(1, 300, 5), (7, 129, 33), (150, 257, 40)])
def test_out_written_in_place(m, k, n):
    """7: out (float32, (m,n), C-contiguous) is written in place and returned, with
    the same bits as a fresh result, in every layout."""
    a, b = normal(m, k), normal(k, n)
    exp = oracle(a, b)
    for kw, aa, bb in (({}, a, b), ({"transpose_b": True}, a, np.ascontiguousarray(b.T)),
                       ({"transpose_a": True}, np.ascontiguousarray(a.T), b)):
        out = np.full((m, n), np.nan, F32)
        r = linalg.matmul(aa, bb, out=out, **kw)
        assert r is out
        assert_same_bits(out, exp, f"out {kw}")
    # a mojolearn.Array as out
    out = linalg.matmul(a, b)
    ctrl = np.asarray(out).copy()
    np.asarray(out)[...] = 0
    r = linalg.matmul(a, b, out=out)
    assert r is out
    assert_same_bits(out, ctrl, "Array out")


@pytest.mark.parametrize("m,k,n", [(3, 40, 5), (8, 300, 33), (150, 130, 40)])
def test_noncontiguous_inputs_same_bits(m, k, n):
    """7: non-contiguous inputs (slices with steps, negative steps, transposed views)
    are accepted and give the bits of a contiguous copy."""
    A = normal(2 * m, 2 * k)
    B = normal(2 * k, 3 * n)
    a = A[::2, ::2]
    b = B[1::2, ::3]
    exp = oracle(a, b)
    assert_same_bits(linalg.matmul(a, b), exp, "NN strided")
    assert_same_bits(linalg.matmul(a[::-1], b[:, ::-1]), exp[::-1, ::-1], "NN negative steps")
    # b.T (a view of the (k, n) data read as (n, k)) for NT, a.T for TN
    bt = np.ascontiguousarray(b).T  # (n, k), a non-C-contiguous view
    assert not bt.flags["C_CONTIGUOUS"]
    assert_same_bits(linalg.matmul(a, bt, transpose_b=True), exp, "NT on a transposed view")
    at = np.ascontiguousarray(a).T  # (k, m), a non-C-contiguous view
    assert not at.flags["C_CONTIGUOUS"]
    assert_same_bits(linalg.matmul(at, b, transpose_a=True), exp, "TN on a transposed view")
    # numpy's transposed views as plain NN operands
    assert_same_bits(linalg.matmul(np.asfortranarray(a), np.asfortranarray(b)), exp, "F-order")
    assert_same_bits(linalg.matmul(a, np.ascontiguousarray(b.T).T), exp, "b as a .T view")


def test_sabotage_is_detected():
    """6.3 (meta): with the kernels' sabotage switch on (last leaf summed in reverse)
    the bit comparison used throughout this file fails, so it can fail."""
    from mojolearn._ops import calls as _calls

    a, b = normal(7, 300), normal(300, 40)
    exp = oracle(a, b)
    assert_same_bits(linalg.matmul(a, b), exp, "before sabotage")
    with _calls.sabotaged():
        got = linalg.matmul(a, b)
        with pytest.raises(AssertionError):
            assert_same_bits(got, exp, "sabotaged")
        assert int((u32(got) != u32(exp)).sum()) > 0
    assert_same_bits(linalg.matmul(a, b), exp, "after sabotage")


def test_block_table_is_consistent():
    """6.5: the build's block table (mojo/gemm/cpu/blocking.mojo) is what the kernels
    assume: NR = NV * W, MC a multiple of MR, the integer task split IMR x INR, and
    the tests' edge cases sit on it."""
    t = BLOCKS
    # W: 16 (AVX-512), 8 (AVX2), 4 (NEON, and its x86 stand-in in test_explicit_flush.py)
    assert t["NR"] == t["NV"] * t["W"] and t["W"] in (4, 8, 16)
    assert t["MC"] % t["MR"] == 0 and t["MC"] > t["MR"] >= 1
    assert t["SMALL_M"] % t["MR"] == 0 and t["NCS"] % t["NR"] == 0
    assert t["IMR"] >= 1 and t["INR"] % 16 == 0
    assert {MC - 1, MC, MC + 1, SMALL_M, SMALL_M + 1, 2 * MR} <= set(EDGE_MS)


@pytest.mark.parametrize("m,k,n", [(1, 300, 7), (5, 129, 33), (150, 257, 40)])
def test_column_major_operands_read_in_place(m, k, n, copies):
    """7, 6.5: an operand laid out column-major (numpy's ``x.T`` of a C-ordered array,
    what ``matmul(x, w.T)`` passes) is read where it lies as the transpose of a
    C-contiguous array, its flag flipped, with the bits of the copied call; copied
    only where the flip would ask for both transposes or where it overlaps ``out``."""
    a, b = normal(m, k), normal(k, n)
    exp = oracle(a, b)
    af = np.asfortranarray(a)  # (m, k), column-major
    bf = np.asfortranarray(b)
    cases = [
        ("a F-order, NN", (af, b), {}, []),
        ("b F-order, NN", (a, bf), {}, []),
        ("b.T of (n,k) data, NN", (a, np.ascontiguousarray(b.T).T), {}, []),
        ("a.T view, TN", (np.ascontiguousarray(a).T, b), {"transpose_a": True}, []),
        ("b F-order (n,k), NT", (a, np.asfortranarray(b.T)), {"transpose_b": True}, []),
        ("a F-order (k,m), TN", (np.asfortranarray(a.T), b), {"transpose_a": True}, []),
        # both flips would be TT (section 7): one operand is copied
        ("both F-order, NN", (af, bf), {}, ["b"]),
        ("a F-order, NT", (af, np.ascontiguousarray(b.T)), {"transpose_b": True}, ["a"]),
        # a flipped NT operand frees the other's flip: no copy
        ("a F-order, b F-order (n,k), NT", (af, np.asfortranarray(b.T)), {"transpose_b": True}, []),
    ]
    for what, (x, y), kw, copied in cases:
        copies.clear()
        if m == 1:  # a (1, k) is C-contiguous in either order: b's flip is free
            copied = []
        assert_same_bits(linalg.matmul(x, y, **kw), exp, what)
        assert copies == copied, (what, copies)
    # bf16f32.v1 takes the same route
    bb = linalg.to_bf16(b)
    exp16 = np.asarray(linalg.matmul_bf16(a, np.ascontiguousarray(bb)))
    copies.clear()
    assert_same_bits(linalg.matmul_bf16(af, np.asfortranarray(np.asarray(bb))), exp16, "bf16 both F-order")
    assert copies == ([] if m == 1 else ["b"])
    copies.clear()
    assert_same_bits(linalg.matmul_bf16(a, np.asarray(bb).T.copy().T), exp16, "bf16 b.T view")
    assert copies == []


def test_column_major_operand_overlapping_out_is_copied():
    """7: an out that shares memory with a column-major operand: that operand is
    copied first (as before), so the product is the one of the inputs as passed."""
    k = 37
    store = normal(k, k)
    b = normal(k, k)
    a = store.T  # column-major view of the memory out will receive
    exp = oracle(np.ascontiguousarray(a), b)
    r = linalg.matmul(a, b, out=store)
    assert r is store
    assert_same_bits(store, exp, "out over a's memory")
    store2 = normal(k, k)
    a2 = normal(k, k)
    exp2 = oracle(a2, np.ascontiguousarray(store2.T))
    linalg.matmul(a2, store2.T, out=store2)
    assert_same_bits(store2, exp2, "out over b's memory")

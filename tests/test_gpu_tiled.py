"""The fp32.v1 / bf16f32.v1 GPU kernel (mojo/gemm/gpu/f32_tiled.mojo, route.mojo),
checked on a machine without a GPU.

gpu_ref_gemm_f32_route runs the kernel's own per-thread phases the way a block runs
them (every thread's phase, then the next phase; shared memory a host buffer, the
order of the threads reversed on every other phase), with the launch's choices
forced where a test asks: the tile shape (BIG 128 x 128, SMALL 64 x 64, THIN1,
THIN16), the run of leaves a block folds (rule 6.9), the number of persistent
blocks, the route (rule 6.8). It returns what ran: (kernel, route, run_leaves,
nruns, grid). Every result is compared bit for bit with the independent oracle
(tests/oracle.py); NaN positions must agree, NaN payloads are not promised (6.6).
"""
from __future__ import annotations

import zlib

import numpy as np
import pytest

from tests import oracle as O
from tests.bits import assert_same_bits, u32
from tests.test_gpu import ref, addr, gemm_operands, one_product_per_leaf, edge_matrix, oracle_gemm, LAYOUTS, LAYOUT_IDS  # noqa: F401

F32 = np.float32
BIG, THIN1, THIN16, SMALL = 0, 1, 2, 3
KERNELS = [BIG, SMALL, THIN1, THIN16]
KERNEL_IDS = ["big", "small", "thin1", "thin16"]
FLUSHING, EXACT = 0, 1


def run(ref, a, b, trans_a=False, trans_b=False, kernel=-1, run_leaves=0, grid=0, route=-1):
    """C through the tiled kernel's CPU run, and what ran."""
    a, b, c, m, n, k = gemm_operands(a, b, trans_a, trans_b)
    info = ref.gpu_ref_gemm_f32_route((
        addr(a), addr(b), addr(c), m, n, k, int(trans_a), int(trans_b),
        int(a.dtype == np.uint16), int(b.dtype == np.uint16), kernel, run_leaves, grid, route))
    return c, dict(zip(("kernel", "route", "run_leaves", "nruns", "grid"), info))


def scaled(rng, shape, lo, hi):
    """Normal float32 values with exponents in [lo, hi], random signs and mantissas."""
    mant = rng.integers(0x00800000, 0x01000000, size=shape).astype(np.float64) / 2.0 ** 23
    e = rng.integers(lo, hi + 1, size=shape)
    return (mant * 2.0 ** e * rng.choice([-1.0, 1.0], size=shape)).astype(F32)


def fast_matrix(rng, rows, cols, special=False):
    """Data the flush-free route takes: every nonzero |x| in [2**-40, 2**20), plus
    +-0 and (special) inf and NaN, which constrain nothing."""
    x = scaled(rng, (rows, cols), -40, 19)
    pick = rng.random((rows, cols))
    x = np.where(pick < 0.05, F32(0.0), x)
    x = np.where((pick >= 0.05) & (pick < 0.08), F32(-0.0), x)
    if special:
        x = np.where((pick >= 0.08) & (pick < 0.1), F32(np.inf), x)
        x = np.where((pick >= 0.1) & (pick < 0.11), F32(-np.inf), x)
        x = np.where((pick >= 0.11) & (pick < 0.12), F32(np.nan), x)
    return x.astype(F32)


def make(rng, m, n, k, kind, trans_a, trans_b):
    def one(r, c):
        if kind == "fast":
            return fast_matrix(rng, r, c)
        if kind == "fast_special":
            return fast_matrix(rng, r, c, special=True)
        return edge_matrix(rng, r, c, kind)
    a = one(k, m) if trans_a else one(m, k)
    b = one(n, k) if trans_b else one(k, n)
    return a, b


def least_exponent(x):
    """The least biased exponent over the nonzero finite elements of x as the kernel
    multiplies them (bf16 widened, DAZ), 255 when there are none."""
    x = O.daz(O.from_bf16(x) if x.dtype == np.uint16 else np.asarray(x, dtype=F32))
    e = (u32(x).astype(np.int64) >> 23) & 0xFF
    e = e[(e > 0) & (e < 255)]
    return int(e.min()) if e.size else 255


def expected_route(a, b, kernel=BIG):
    """Rule 6.8, computed here from the data: flush-free when the least exponents of A
    and B sum to at least -80 (biased: 2 * 127 - 80). The decode shapes (THIN1,
    THIN16) skip the pre-pass, so as not to read the weight twice: flushing."""
    if kernel in (THIN1, THIN16):
        return FLUSHING
    return EXACT if least_exponent(a) + least_exponent(b) >= 2 * 127 - 80 else FLUSHING


def check(ref, a, b, layout, what, **kw):
    got, info = run(ref, a, b, *layout, **kw)
    assert_same_bits(got, oracle_gemm(a, b, *layout), f"{what} {info}")
    if kw.get("route", -1) < 0:
        assert info["route"] == expected_route(a, b, info["kernel"]), (what, info)
    return info


# ---------------------------------------------------------------- tiles, leaves, layouts
@pytest.mark.parametrize("layout", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("kernel", KERNELS, ids=KERNEL_IDS)
@pytest.mark.parametrize("shape", [(1, 1, 1), (15, 16, 17), (61, 73, 79), (17, 129, 33),
                                   (130, 65, 20), (2, 3, 129)])
def test_tiled_shapes(ref, layout, kernel, shape):
    """Rules 6.1-6.4 and 6.5 through every tile shape of the kernel, shapes either side
    of the 16-row, 64- and 128-wide tiles and of the 16-deep k-tiles (edge tiles partly
    outside C, k-tails), both routes (fast data, subnormal data)."""
    m, n, k = shape
    rng = np.random.default_rng(zlib.crc32(f"shape{shape}{layout}{kernel}".encode()))
    for kind, want in (("fast", EXACT), ("subnormal", FLUSHING)):
        a, b = make(rng, m, n, k, kind, *layout)
        info = check(ref, a, b, layout, f"{kind} {shape}", kernel=kernel)
        assert info["kernel"] == kernel
        if kernel in (BIG, SMALL):
            assert info["route"] == want or m * n * k < 100, (kind, info)
        if want == EXACT:  # the flush-free chains of this shape, where the data allows them
            check(ref, a, b, layout, f"{kind} {shape} flush-free", kernel=kernel,
                  route=expected_route(a, b))


@pytest.mark.parametrize("layout", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("k", [127, 128, 129, 255, 256, 257, 1025])
def test_tiled_leaf_boundaries(ref, layout, k):
    """Rules 6.2-6.4 either side of every leaf and tree boundary, on the BIG and THIN16
    shapes, both routes; the whole k in one block (no split: run_leaves >= leaves)."""
    rng = np.random.default_rng(7000 + k)
    for kernel, (m, n) in ((BIG, (19, 35)), (THIN16, (16, 129))):
        for kind in ("fast", "subnormal", "special"):
            a, b = make(rng, m, n, k, kind, *layout)
            info = check(ref, a, b, layout, f"{kind} k={k}", kernel=kernel, run_leaves=1024)
            assert info["nruns"] == 1
            if kernel == THIN16 and expected_route(a, b) == EXACT:
                check(ref, a, b, layout, f"{kind} k={k} flush-free", kernel=kernel, run_leaves=1024,
                      route=EXACT)


@pytest.mark.parametrize("kernel", [BIG, THIN1], ids=["big", "thin1"])
def test_tiled_leaf_not_multiple_of_tile(ref, kernel):
    """Rule 6.2 at k = 131073 (L = 129: leaves end inside 16-deep k-tiles), a thin
    shape, flushing and flush-free chains, NN and NT; split and not split."""
    k = 131073
    rng = np.random.default_rng(131073 + kernel)
    for layout in ((False, False), (False, True)):
        for kind, run_leaves in (("fast", 0), ("subnormal", 1024), ("fast", 64)):
            a, b = make(rng, 1, 3, k, kind, *layout)
            info = check(ref, a, b, layout, f"{kind}", kernel=kernel, run_leaves=run_leaves)
            assert info["run_leaves"] * info["nruns"] >= 1017
            if expected_route(a, b) == EXACT:
                check(ref, a, b, layout, f"{kind} flush-free", kernel=kernel, run_leaves=run_leaves,
                      route=EXACT)


# ---------------------------------------------------------------- the routes (6.8)
@pytest.mark.parametrize("layout", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("kernel", [BIG, THIN16], ids=["big", "thin16"])
def test_route_decision_and_bits(ref, layout, kernel):
    """Rule 6.8: on BIG, data with every nonzero |x| >= 2**-40 (with +-0, inf, NaN)
    takes the flush-free chains and subnormal, near-subnormal and -0 data the flushing
    chains; THIN16 (decode) runs the flushing chains without a pre-pass; all give the
    oracle's bits. Forced the other way where the data allows it (flushing on fast
    data, flush-free on THIN16), they give them too."""
    m, n, k = (37, 70, 300) if kernel == BIG else (9, 40, 300)
    rng = np.random.default_rng(zlib.crc32(f"route{layout}{kernel}".encode()))
    for kind, want in (("fast", EXACT), ("fast_special", EXACT), ("subnormal", FLUSHING),
                       ("special", EXACT), ("normal", EXACT)):
        a, b = make(rng, m, n, k, kind, *layout)
        info = check(ref, a, b, layout, kind, kernel=kernel)
        assert info["route"] == (want if kernel == BIG else FLUSHING), (kind, info)
        if want == EXACT:
            other = FLUSHING if kernel == BIG else EXACT
            check(ref, a, b, layout, f"{kind} forced route {other}", kernel=kernel, route=other)


def bound_operands(rng, m, n, k, ea, eb):
    """A with least exponent ea, B with least exponent eb (each reached), the rest of
    the values just above, in cancelling pairs so that the chains run close to their
    smallest products."""
    a = scaled(rng, (m, k), ea, ea + 2)
    b = scaled(rng, (k, n), eb, eb + 2)
    a[0, 0] = F32(2.0 ** ea)
    b[0, 0] = F32(2.0 ** eb)
    b[1::2, :] = -b[0::2, :][: b[1::2, :].shape[0]]
    return a, b


@pytest.mark.parametrize("total, want", [(-80, EXACT), (-81, FLUSHING), (-120, FLUSHING), (-40, EXACT)])
def test_route_exponent_bound(ref, total, want):
    """Rule 6.8's test is (least exponent of A) + (least exponent of B) >= -80: at -80
    the flush-free chains run (and give the oracle's bits with products as small as
    2**-80 cancelling), at -81 the flushing chains. Subnormal inputs do not count
    (they are read as zeros): adding them to fast data keeps the flush-free route."""
    rng = np.random.default_rng(abs(total))
    ea = total // 2
    eb = total - ea
    a, b = bound_operands(rng, 6, 5, 260, ea, eb)
    info = check(ref, a, b, (False, False), f"sum {total}", kernel=BIG)
    assert info["route"] == want, info
    if want == EXACT:
        a2 = a.copy()
        a2[1, ::3] = np.array([0x00000001], np.uint32).view(F32)[0]
        a2[2, ::5] = np.array([0x807FFFFF], np.uint32).view(F32)[0]
        info = check(ref, a2, b, (False, False), "with subnormal inputs", kernel=BIG)
        assert info["route"] == EXACT, info


def test_forced_flush_free_route_can_differ(ref):
    """Rule 6.8 matters: the flush-free chains forced on data whose exponents fail the
    test (products near 2**-126) do NOT give the oracle's bits, so the route tests
    above can fail. (The launch never forces it; this is a check of the check.)"""
    rng = np.random.default_rng(99)
    a, b = make(rng, 20, 40, 300, "subnormal", False, False)
    want = oracle_gemm(a, b)
    got, info = run(ref, a, b, kernel=BIG, route=EXACT)
    assert info["route"] == EXACT
    differ = (u32(got) != u32(want)) & ~(np.isnan(got) & np.isnan(want))
    assert differ.sum() > 0


@pytest.mark.parametrize("layout", LAYOUTS, ids=LAYOUT_IDS)
def test_bf16_operands_both_routes(ref, layout):
    """bf16f32.v1 (rule 9) on the tiled kernel: bf16 bits widened (L-1) and flushed as
    they are staged, both routes, one or both operands bf16."""
    rng = np.random.default_rng(zlib.crc32(f"bf16{layout}".encode()))
    for kind, want in (("fast", EXACT), ("subnormal", FLUSHING)):
        for both in (False, True):
            a, b = make(rng, 21, 67, 140, kind, *layout)
            b = O.to_bf16(b)
            if both:
                a = O.to_bf16(a)
            info = check(ref, a, b, layout, f"{kind} both={both}", kernel=BIG)
            assert info["route"] == want, info


# ---------------------------------------------------------------- k split across blocks (6.9)
@pytest.mark.parametrize("layout", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("run_leaves", [1, 2, 4, 8])
def test_split_runs(ref, layout, run_leaves):
    """Rule 6.9: k split across blocks on aligned runs of 2**s leaves (the last run
    partial), each run's root folded by the tree kernel, equals the whole tree: leaf
    counts 1..13, 31, 33, both routes, THIN16 and BIG."""
    rng = np.random.default_rng(zlib.crc32(f"split{layout}{run_leaves}".encode()))
    for nleaves in list(range(1, 14)) + [31, 33]:
        k = nleaves * 128 - int(rng.integers(0, 100))
        for kernel, (m, n), kind in ((THIN16, (3, 5), "fast"), (BIG, (2, 3), "subnormal")):
            a, b = make(rng, m, n, k, kind, *layout)
            info = check(ref, a, b, layout, f"{kind} leaves={nleaves}", kernel=kernel,
                         run_leaves=run_leaves)
            assert info["nruns"] == -(-nleaves // run_leaves) or info["nruns"] == 1


def test_split_tree_order(ref):
    """Rules 6.4 and 6.9: one product a leaf, values spread over 40 binary orders of
    magnitude, so any other pairing of the runs' roots changes the rounding; every
    run length against the oracle."""
    rng = np.random.default_rng(8)
    for nleaves in (3, 5, 7, 12, 21, 40):
        a, b = one_product_per_leaf(rng, nleaves)
        for run_leaves in (1, 2, 4, 8, 16, 64):
            check(ref, a, b, (False, False), f"{nleaves} leaves run {run_leaves}", kernel=THIN1,
                  run_leaves=run_leaves)


def test_auto_plan_splits_small_outputs(ref):
    """The plan splits k for a small output (rule 6.9: fewer tiles than blocks) and not
    for one with enough tiles; both give the oracle's bits."""
    rng = np.random.default_rng(3)
    a, b = make(rng, 1, 40, 2000, "fast", False, True)
    info = check(ref, a, b, (False, True), "decode m=1")
    assert info["kernel"] == THIN1 and info["nruns"] > 1, info
    a, b = make(rng, 16, 40, 2000, "subnormal", False, True)
    info = check(ref, a, b, (False, True), "decode m=16")
    assert info["kernel"] == THIN16 and info["nruns"] > 1, info
    a, b = make(rng, 300, 300, 300, "fast", False, False)
    info = check(ref, a, b, (False, False), "big")
    assert info["kernel"] == BIG and info["nruns"] == 1, info


# ---------------------------------------------------------------- persistent blocks
@pytest.mark.parametrize("grid", [1, 2, 3, 7])
def test_persistent_blocks(ref, grid):
    """Rule 6.5: blocks that loop over several work items (output tiles and runs)
    reuse their shared memory and tree slab; any grid gives the same bits."""
    rng = np.random.default_rng(grid)
    for kernel, (m, n, k), kind in ((SMALL, (130, 70, 700), "fast"), (BIG, (140, 131, 300), "subnormal"),
                                    (THIN16, (40, 300, 520), "special")):
        a, b = make(rng, m, n, k, kind, False, False)
        info = check(ref, a, b, (False, False), f"{kind} grid={grid}", kernel=kernel, grid=grid,
                     run_leaves=2)
        assert info["grid"] == grid


def test_degenerate_k(ref):
    """Rule 8: k = 0 writes +0 everywhere (no leaves, no kernel but the tree's)."""
    a = np.zeros((3, 0), dtype=F32)
    b = np.zeros((0, 4), dtype=F32)
    got, info = run(ref, a, b)
    assert info["nruns"] == 0
    assert (u32(got) == 0).all()


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
def test_random_sweep(ref, seed):
    """Rules 6.1-6.9 on random shapes, layouts, kernels, runs, grids and data kinds
    (slow sweep)."""
    rng = np.random.default_rng(1000 + seed)
    for _ in range(12):
        m, n = int(rng.integers(1, 150)), int(rng.integers(1, 150))
        k = int(rng.integers(1, 1500))
        layout = LAYOUTS[int(rng.integers(0, 3))]
        kind = ["fast", "fast_special", "subnormal", "special", "normal"][int(rng.integers(0, 5))]
        kernel = int(rng.integers(-1, 4))
        run_leaves = [0, 1, 2, 4, 1024][int(rng.integers(0, 5))]
        grid = int(rng.integers(0, 5))
        a, b = make(rng, m, n, k, kind, *layout)
        if rng.random() < 0.3:
            b = O.to_bf16(b)
        check(ref, a, b, layout, f"{m}x{n}x{k} {kind}", kernel=kernel, run_leaves=run_leaves, grid=grid)

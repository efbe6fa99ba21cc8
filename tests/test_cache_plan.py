"""The CPU build's cache plan (mojo/gemm/cpu/blocking.mojo: CachePlan, plan_for): the
blocks meant to stay in a cache are a function of the cache sizes this CPU reports,
and no plan changes a bit (6.5: fp32.v1's order depends on k only; L-5: the integer
sums are exact).

- The plan's rule, from its docstring: an L2 block is its tuned value scaled by
  L2 / REF_L2 within [tuned / 4, 4 tuned]; an L3 chunk shrinks with L3 / REF_L3 (never
  grows), at least tuned / 4; the reference sizes give the tuned table. Checked here
  by an independent statement of that rule against the table the extension reports.
- Identity: fp32.v1 (NN, NT, TN, prepared weights), bf16f32.v1, int8i32.v1 and
  int15i64.v1 products on 1 and 2 threads give the same bits under the smallest plan
  (L2 and L3 far below any CPU's: every block at a quarter of its tuned size), the
  reference plan, and the largest (every L2 block four times its tuned size), on shapes
  that cross the blocks of each, and the smallest plan's fp32.v1 against the oracle.
- The loader: sysfs sizes (or MOJOLEARN_CPU_CACHES) reach the extension once; a bad
  value of the variable, or a negative size, is refused by name.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import mojolearn
from mojolearn import linalg
from mojolearn._core import box as _box
from mojolearn._core.loader import blocking, cache_sizes, cpu_native
from tests import oracle as O
from tests.bits import assert_same_bits

ROOT = Path(__file__).resolve().parents[1]
F32 = np.float32
KIB, MIB = 1 << 10, 1 << 20

# (L1d, L2, L3): below any real CPU (every block at its floor), the reference, and an
# L2 far above any real CPU's (every L2 block at its ceiling)
TINY = (4 * KIB, 16 * KIB, 1 * MIB)
HUGE = (64 * KIB, 1 << 30, 1 << 30)


@pytest.fixture
def restore_plan():
    """Put the process's plan back (the loader's sizes) after a test that changes it."""
    yield
    cpu_native().set_cache_sizes(cache_sizes())


def set_plan(sizes):
    cpu_native().set_cache_sizes(tuple(sizes))
    return blocking()


def reference_sizes():
    t = blocking()
    return (32 * KIB, t["REF_L2"], t["REF_L3"])


# names of the L2 blocks, L3 chunks and their units, per build (as the table names them)
L2_BLOCKS = ("MC", "NCS", "PANEL_OUTER_A_BYTES", "INT_A_BLOCK_BYTES", "AVX2_A_BLOCK_BYTES",
             "AMX_A_BLOCK_BYTES")
L3_CHUNKS = ("PACK_B_BYTES", "INT_PACK_B_BYTES", "AVX2_B_CHUNK_BYTES", "AMX_B_CHUNK_BYTES")


def _units(t):
    return {"MC": t["MR"], "NCS": t["NR"], "PACK_B_BYTES": 64 * KIB, "INT_PACK_B_BYTES": 64 * KIB,
            "AVX2_B_CHUNK_BYTES": 64 * KIB, "AMX_B_CHUNK_BYTES": 64 * KIB}


def expected_plan(tuned, ref_l2, ref_l3, l2, l3, units):
    """The plan's rule restated: tuned values scaled as the module docstring says."""
    out = {}
    for name, v in tuned.items():
        unit = units.get(name, 4096)
        if name in L2_BLOCKS:
            x = min(4 * v, max(v // 4, v * l2 // ref_l2))
        else:
            x = max(v // 4, v * min(l3, ref_l3) // ref_l3)
        out[name] = max(unit, x // unit * unit)
    return out


def test_reference_sizes_give_the_tuned_table_and_the_rule_holds(restore_plan):
    """The reference sizes reproduce the tuned table (the plan of the machine each build
    was tuned on); other sizes follow the rule: L2 blocks scale with L2 within
    [1/4, 4] of the tuned value, L3 chunks only shrink; the rest of the table (register
    tiles, SMALL_M, the leaf) never moves."""
    ref = set_plan(reference_sizes())
    assert ref["PLAN_FROM_SYSTEM"] == 1 and ref["L2"] == ref["REF_L2"]
    names = [n for n in L2_BLOCKS + L3_CHUNKS if n in ref]
    assert {"MC", "NCS", "PANEL_OUTER_A_BYTES", "PACK_B_BYTES"} <= set(names)
    assert ref["MC"] == ref["SMALL_M"]  # the tuned MC is the small-m path's edge
    tuned = {n: ref[n] for n in names}
    fixed = {n: v for n, v in ref.items() if n not in names and n not in ("L1D", "L2", "L3")}
    for l2 in (16 * KIB, ref["REF_L2"] // 2, 3 * ref["REF_L2"] // 2, 2 * ref["REF_L2"], 1 << 30):
        for l3 in (1 * MIB, 8 * MIB, ref["REF_L3"], 256 * MIB):
            t = set_plan((48 * KIB, l2, l3))
            assert (t["L1D"], t["L2"], t["L3"]) == (48 * KIB, l2, l3)
            want = expected_plan(tuned, ref["REF_L2"], ref["REF_L3"], l2, l3, _units(ref))
            assert {n: t[n] for n in names} == want, (l2, l3)
            assert {n: t[n] for n in fixed} == fixed
            assert t["MC"] % t["MR"] == 0 and t["NCS"] % t["NR"] == 0


def test_unknown_sizes_serve_the_reference_plan(restore_plan, monkeypatch):
    """Where sysfs reports no caches the loader passes zeros and the reference plan
    serves, marked as not from the system."""
    monkeypatch.setattr(_box, "caches", lambda *a, **k: {})
    monkeypatch.delenv("MOJOLEARN_CPU_CACHES", raising=False)
    assert cache_sizes() == (0, 0, 0)
    t = set_plan((0, 0, 0))
    assert t["PLAN_FROM_SYSTEM"] == 0
    assert (t["L2"], t["L3"]) == (t["REF_L2"], t["REF_L3"]) and t["MC"] == t["SMALL_M"]


def test_bad_sizes_refused(restore_plan):
    for bad in ((-1, 0, 0), (0, -512, 0), (0, 0, 1 << 41)):
        with pytest.raises(Exception, match="cache size outside"):
            cpu_native().set_cache_sizes(bad)


def _child(env_extra, code):
    env = {k: v for k, v in os.environ.items() if k != "MOJOLEARN_CPU_CACHES"}
    env.update(env_extra)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python"), str(ROOT)])
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_loader_hands_sysfs_or_the_variable_to_the_extension():
    """A fresh process's table is the plan for what sysfs reports; MOJOLEARN_CPU_CACHES
    overrides the levels it names; a malformed value is refused by name at the first
    kernel call (never a silent default)."""
    code = ("from mojolearn._core.loader import blocking; t = blocking(); "
            "print(t['L1D'], t['L2'], t['L3'], t['PLAN_FROM_SYSTEM'])")
    sysfs = _box.caches()
    r = _child({}, code)
    assert r.returncode == 0, r.stderr
    l1d, l2, l3, src = map(int, r.stdout.split())
    if sysfs.get("L2"):
        assert (l2, src) == (sysfs["L2"], 1)
    r = _child({"MOJOLEARN_CPU_CACHES": "L2=384K, L3=6M"}, code)
    assert r.returncode == 0, r.stderr
    assert list(map(int, r.stdout.split()))[1:] == [384 * KIB, 6 * MIB, 1]
    for bad in ("L2=", "L2=big", "L4=1M", "L2=-5K", "512K"):
        r = _child({"MOJOLEARN_CPU_CACHES": bad}, code)
        assert r.returncode != 0 and "MOJOLEARN_CPU_CACHES" in r.stderr, (bad, r.stderr[-500:])


# ---------------------------------------------------------------- identity


def _rnd(seed, *shape):
    return np.random.default_rng(seed).standard_normal(shape).astype(F32)


def _products():
    """Products that cross the blocks of every plan: m above SMALL_M (the blocked path)
    and above the largest plan's A block; k of several leaves and past the smallest
    plan's panel-outer limit; n past the smallest plan's column chunks."""
    t = blocking()
    m = max(4 * t["MC"], t["SMALL_M"]) + 7  # above the largest plan's A block and SMALL_M
    a = _rnd(1, m, 2300)
    b = _rnd(2, 2300, 301)
    bt = np.ascontiguousarray(b.T)
    at = np.ascontiguousarray(a.T)
    few = _rnd(3, 9, 2300)  # the small-m path: its NCS column chunks
    wide = _rnd(4, 2300, 1100)
    # k past every plan's panel-outer limit (the limit scales with mc: the same k)
    long_a = _rnd(5, t["SMALL_M"] + 30, 4000)
    long_b = _rnd(6, 4000, 64)
    # B over all of k more than the smallest plan's packed chunk for each task's columns
    # (1 or 2 tasks), its output's tree slots small: the leaf-outer-over-the-task order
    # (f32_block_kouter) under the smallest plan, the blocked order under the others
    ka = _rnd(7, t["SMALL_M"] + 7, 4500)
    kb = _rnd(8, 4500, 500)
    out = {
        "fp32 NN": lambda: linalg.matmul(a, b),
        "fp32 NT": lambda: linalg.matmul(a, bt, transpose_b=True),
        "fp32 TN": lambda: linalg.matmul(at, b, transpose_a=True),
        "fp32 small-m": lambda: linalg.matmul(few, wide),
        "fp32 leaf-outer": lambda: linalg.matmul(long_a, long_b),
        "fp32 k-outer": lambda: linalg.matmul(ka, kb),
        "fp32 k-outer TN": lambda: linalg.matmul(np.ascontiguousarray(ka.T), kb, transpose_a=True),
        "fp32 prepared": lambda: linalg.matmul(a, linalg.prepare(bt, transpose_b=True),
                                               transpose_b=True),
        "fp32 prepared small-m": lambda: linalg.matmul(few, linalg.prepare(wide)),
        "bf16f32": lambda: linalg.matmul_bf16(linalg.to_bf16(a), linalg.to_bf16(b)),
        "int8": lambda: linalg.matmul_int8(a, bt),
        "int15": lambda: linalg.matmul_int15(a, bt),
    }
    return out, (a, b, few, wide, ka, kb)


@pytest.mark.parametrize("threads", [1, 2])
def test_every_plan_gives_the_same_bits(threads, restore_plan):
    """6.5 L-5: every product under the smallest, the reference and the largest plan,
    on 1 and 2 threads, bit for bit the same; the smallest plan's fp32.v1 against the
    oracle."""
    old = mojolearn.get_num_threads()
    mojolearn.set_num_threads(threads)
    try:
        set_plan(reference_sizes())
        prods, (a, b, few, wide, ka, kb) = _products()
        ref = {name: np.asarray(f()).copy() for name, f in prods.items()}
        seen = set()
        for sizes in (TINY, HUGE):
            t = set_plan(sizes)
            seen.add((t["MC"], t["NCS"], t["PANEL_OUTER_A_BYTES"], t["PACK_B_BYTES"]))
            for name, f in prods.items():
                assert_same_bits(np.asarray(f()), ref[name], f"{name} under plan {sizes}")
        assert len(seen) == 2  # the two plans differ from each other (and the reference)
        set_plan(TINY)
        rows = [0, 1, blocking()["MC"] - 1, blocking()["MC"], a.shape[0] - 1]
        assert_same_bits(np.asarray(linalg.matmul(a[rows], b)), O.gemm_fp32_v1(a[rows], b),
                         "fp32 smallest plan vs oracle (blocked rows)")
        assert_same_bits(ref["fp32 NN"][rows], O.gemm_fp32_v1(a[rows], b), "reference vs oracle")
        krows = [0, 3, blocking()["MC"] - 1, blocking()["MC"] + 1, ka.shape[0] - 1]
        want = O.gemm_fp32_v1(ka[krows], kb)
        assert_same_bits(np.asarray(linalg.matmul(ka, kb))[krows], want, "fp32 k-outer vs oracle")
        assert_same_bits(ref["fp32 k-outer"][krows], want, "reference (blocked) vs oracle")
    finally:
        mojolearn.set_num_threads(old)


def test_the_plans_move_the_blocks(restore_plan):
    """The identity test above runs blocks that differ: the products' rows span several
    A blocks under every plan (more under the smallest), the small-m product several
    column chunks, and the long-k product leaves the panel-outer order under each."""
    ref = set_plan(reference_sizes())
    prods, (a, b, few, wide, ka, kb) = _products()
    m = a.shape[0]
    for sizes in (TINY, reference_sizes(), HUGE):
        t = set_plan(sizes)
        assert m > t["MC"] and m > t["SMALL_M"]
        assert wide.shape[1] > t["NCS"] or sizes is HUGE
        assert round_up(t["MC"], t["MR"]) * 4000 * 4 > t["PANEL_OUTER_A_BYTES"]
        # the k-outer product: that order under the smallest plan only, on 1 and 2 tasks
        for tasks in (1, 2):
            assert _kouter(t, ka.shape[0], kb.shape[0], kb.shape[1], tasks) == (sizes is TINY), (sizes, tasks)
    tiny, huge = set_plan(TINY), set_plan(HUGE)
    assert tiny["MC"] * 4 == ref["MC"] == huge["MC"] // 4
    assert tiny["NCS"] < ref["NCS"] < huge["NCS"]


def round_up(x, u):
    return (x + u - 1) // u * u


def _kouter(t, m, k, n, tasks):
    """fp32_v1.kouter_fits for the blocked path's task (a column split here: n spans at
    least 2 * tasks panels), restated from its docstring: several leaves, not panel
    outer, B over all of k more than one packed chunk of the task's columns (chunks of
    whole panels, at most 4096 columns), the slots of the task's output within
    KOUTER_SLOT_BYTES."""
    nr, mr = t["NR"], t["MR"]
    npan = -(-n // nr)
    assert m > t["SMALL_M"] and npan >= 2 * tasks
    cols = -(-npan // tasks) * nr
    leaf = max(128, -(-k // 1024))
    nleaves = -(-k // leaf)
    if nleaves < 2 or round_up(min(t["MC"], m), mr) * k * 4 <= t["PANEL_OUTER_A_BYTES"]:
        return False
    nc = max(nr, min(t["PACK_B_BYTES"] // (4 * k) // nr * nr, 4096 // nr * nr))
    if nc >= cols:
        return False
    return round_up(m, mr) * cols * nleaves.bit_length() * 4 <= t["KOUTER_SLOT_BYTES"]

"""The GEMM micro-kernels keep their accumulators in registers, in every CPU build.

A kernel's bits do not depend on where its sums live, but its speed does: when an
accumulator is indexed at run time (a tile-edge loop over `range(rows)` instead of a
compile-time one, say), LLVM keeps the whole accumulator array in memory and the
kernel loop stores every accumulator after every multiply-add. That once made the
AVX-512 VNNI int8 kernel 2x slower without changing a single bit, so no other test
could notice it.

This test reads the machine code of each built CPU library (amx, v4, v3; the code is
only read, so a build this CPU cannot run is checked too) with `objdump`, finds the
innermost loops of the GEMM entries' kernels that carry at least 12 multiply-adds
(vfmadd231ps for fp32.v1 / bf16f32.v1, vpdpbusd for the VNNI integer kernels,
vpmaddwd for the AVX2 ones) and checks that such loops exist in every entry and store
no vector register to memory. A single spilled sum is enough to cost: the AVX2 int15
tile once held 3 rows x 16 columns (12 sums, 4 B vectors and the broadcasts, one
register more than AVX2 has), LLVM kept one sum on the stack, and the store-reload on
every k-pair made int15i64.v1 1.4x slower on Zen 3. Not checked: the decode-rows kernels of rows_f32.mojo, whose
per-output sums live in an L1 buffer by design. The AMX build's k-block loop is
checked apart: four tile products per iteration and no tile store.
"""
from __future__ import annotations

import bisect
import re
import shutil
import subprocess
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "python" / "mojolearn"
MAC = re.compile(r"\b(vfmadd231ps|vpdpbusd|vpmaddwd)\b")
# a vector register stored to a memory operand (a spill or a store of a sum)
VSTORE = re.compile(r"\bv?mov(?:dqu64|dqu32|dqu16|dqu8|dqa64|dqa32|dqu|dqa|ups|aps)\s+%[xyz]mm\d+,\s*[^%\s,]*\(")
BRANCH = re.compile(r"(j[a-z]+)\s+([0-9a-f]+)\b")
# the functions that hold the GEMM micro-kernel loops (Mojo symbol prefixes; where
# LLVM may or may not inline a block function into its entry, either name)
KERNEL_FUNCS = {
    "fp32.v1 blocked (f32_block)": ("gemm::cpu::fp32_v1::f32_block(",),
    "fp32.v1 entry (gemm_f32)": ("gemm::cpu::entry::closure$gemm_f32(",),
    "fp32.v1 prepared (gemm_f32_packed)": ("gemm::cpu::prepared::closure$gemm_f32_packed(",),
    "integer (int8i32.v1 / int15i64.v1)": ("gemm::cpu::entry::closure$_int_call(",
                                           "gemm::cpu::int_gemm::int_block(",
                                           "gemm::cpu::avx2_int::avx2_block("),
}
# builds whose integer GEMMs run vector kernels (AMX's are tile instructions)
INT_VECTOR_BUILDS = ("v4", "v3")
MIN_MACS = 12
MAX_STORES = 0


def _instructions(lib: Path):
    """[(address, text, function)] of the library's code, in address order."""
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(lib)], capture_output=True,
                         text=True, check=True).stdout
    ins, fn = [], ""
    for line in out.splitlines():
        m = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
        if m:
            fn = m.group(1)
            continue
        m = re.match(r"\s*([0-9a-f]+):\s+(.*)", line)
        if m:
            ins.append((int(m.group(1), 16), m.group(2), fn))
    return ins


def innermost_loops(lib: Path, count):
    """The innermost loops (a backward conditional branch and the code it jumps back
    over, with no other such loop inside): [(function, first address, count(body))],
    body the loop's instruction texts."""
    ins = _instructions(lib)
    addrs = [a for a, _, _ in ins]
    loops = []
    for i, (a, text, fn) in enumerate(ins):
        m = BRANCH.match(text)
        if not m or m.group(1) == "jmp":
            continue
        target = int(m.group(2), 16)
        if target < a:
            lo = bisect.bisect_left(addrs, target)
            loops.append((target, a, fn, count([t for _, t, _ in ins[lo:i + 1]])))
    return [(fn, lo, c) for lo, hi, fn, c in loops
            if not any(y[0] >= lo and y[1] <= hi and y[:2] != (lo, hi) for y in loops)]


def kernel_loops(lib: Path):
    """The innermost loops that carry >= MIN_MACS multiply-adds:
    [(function, first address, multiply-adds, vector stores)]."""
    def count(body):
        return (sum(1 for t in body if MAC.search(t)), sum(1 for t in body if VSTORE.search(t)))
    return [(fn, lo, macs, stores) for fn, lo, (macs, stores) in innermost_loops(lib, count)
            if macs >= MIN_MACS]


def _check(lib: Path, isa: str):
    loops = kernel_loops(lib)
    problems = []
    for what, prefix in KERNEL_FUNCS.items():
        if "integer" in what and isa not in INT_VECTOR_BUILDS:
            continue
        mine = [x for x in loops if x[0].startswith(prefix)]  # prefix: a tuple of names
        if not mine:
            problems.append(f"{what}: no loop with >= {MIN_MACS} multiply-adds found (renamed? "
                            f"then update KERNEL_FUNCS)")
        for fn, lo, macs, stores in mine:
            if stores > MAX_STORES:
                problems.append(f"{what}: the loop at {lo:#x} stores {stores} vectors per iteration "
                                f"({macs} multiply-adds): accumulators kept in memory")
    return problems


@pytest.mark.skipif(shutil.which("objdump") is None,
                    reason="objdump (binutils) is not installed: the machine code cannot be read")
@pytest.mark.parametrize("isa", ["amx", "v4", "v3"])
def test_micro_kernels_keep_accumulators_in_registers(isa):
    lib = PKG / f"_native_{isa}.so"
    if not lib.exists():
        pytest.fail(f"{lib.name} is not built (make build builds amx, v4 and v3 on any x86-64 box)")
    problems = _check(lib, isa)
    assert not problems, f"{isa} build:\n  " + "\n  ".join(problems)


TDP = re.compile(r"\btdpbssd\b")
TSTORE = re.compile(r"\btilestored\b")


def amx_k_loops(lib: Path):
    """The innermost loops of the integer entry that carry tile products (tdpbssd):
    [(first address, products, tile stores)]."""
    def count(body):
        return (sum(1 for t in body if TDP.search(t)), sum(1 for t in body if TSTORE.search(t)))
    entry = KERNEL_FUNCS["integer (int8i32.v1 / int15i64.v1)"]
    return [(lo, tdp, st) for fn, lo, (tdp, st) in innermost_loops(lib, count)
            if fn.startswith(entry) and tdp > 0]


@pytest.mark.skipif(shutil.which("objdump") is None,
                    reason="objdump (binutils) is not installed: the machine code cannot be read")
def test_amx_k_block_loop_keeps_sums_in_tiles():
    """The AMX build's k-block loop (gemm/cpu/amx_int.mojo, _kblock): four tdpbssd per
    iteration into the four sums tiles and no tile store; the sums leave the tiles only
    between A units (the pipelined boundary), never inside the k loop."""
    lib = PKG / "_native_amx.so"
    if not lib.exists():
        pytest.fail(f"{lib.name} is not built (make build builds amx, v4 and v3 on any x86-64 box)")
    loops = amx_k_loops(lib)
    assert loops, "no loop with tile products found in the amx build's integer entry"
    bad = [f"loop at {lo:#x}: {tdp} tdpbssd, {st} tilestored" for lo, tdp, st in loops
           if tdp != 4 or st != 0]
    assert not bad, "amx build: " + "; ".join(bad)


def test_the_check_sees_a_spilling_loop(tmp_path):
    """The loop finder itself: a hand-written loop with 12 multiply-adds and a store per
    iteration is found and counted; without the store it is clean."""
    if shutil.which("as") is None or shutil.which("objdump") is None:
        pytest.skip("binutils (as, objdump) is not installed")
    body = "\n".join(f"vfmadd231ps %zmm{i % 8}, %zmm30, %zmm{8 + i}" for i in range(12))
    for store, want in (("vmovups %zmm8, 64(%rsp)", 1), ("", 0)):
        src = tmp_path / "k.s"
        src.write_text(f".text\n.globl k\nk:\n.L1:\n{body}\n{store}\ndec %rcx\njne .L1\nret\n")
        obj = tmp_path / "k.o"
        subprocess.run(["as", "-o", str(obj), str(src)], check=True)
        loops = kernel_loops(obj)
        assert [(m, s) for _, _, m, s in loops] == [(12, want)], loops

"""Refusals (fp32.v1 section 7 and the matching rules of the other profiles and the
converters): every refusal is a built-in exception whose text starts with
"mojolearn:" and names the function and the argument (or rule) at fault. Also: an
impossible allocation is a MemoryError (never a crash) and repeated calls do not
grow the process.
"""
from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import mojolearn
from mojolearn import linalg

F32 = np.float32
ROOT = Path(__file__).resolve().parent.parent

f23 = np.ones((2, 3), F32)
f34 = np.ones((3, 4), F32)
f43 = np.ones((4, 3), F32)
u34 = np.ones((3, 4), np.uint16)
a25 = np.ones((2, 5), F32)
b35 = np.ones((3, 5), F32)
c25 = np.ones((2, 5), np.int8)
e2 = np.zeros(2, np.int32)


def _ro(x):
    x = x.copy()
    x.setflags(write=False)
    return x


# (id, call, exception type, substrings the message must contain)
REFUSALS = [
    # ---- matmul (fp32.v1 section 7)
    ("mm-both-flags", lambda: linalg.matmul(f23, f34, transpose_a=True, transpose_b=True),
     ValueError, ["matmul", "transpose_a", "transpose_b"]),
    ("mm-flag-not-bool", lambda: linalg.matmul(f23, f34, transpose_a=1), TypeError,
     ["matmul", "transpose_a"]),
    ("mm-a-float64", lambda: linalg.matmul(f23.astype(np.float64), f34), TypeError,
     ["matmul", "a", "float32", "float64"]),
    ("mm-b-float16", lambda: linalg.matmul(f23, f34.astype(np.float16)), TypeError,
     ["matmul", "b", "float32", "float16"]),
    ("mm-a-int32", lambda: linalg.matmul(f23.astype(np.int32), f34), TypeError, ["matmul", "a", "int32"]),
    ("mm-b-uint16", lambda: linalg.matmul(f23, u34), TypeError, ["matmul", "b", "uint16"]),
    ("mm-big-endian", lambda: linalg.matmul(f23.astype(">f4"), f34), TypeError, ["matmul", "a"]),
    ("mm-a-1d", lambda: linalg.matmul(f23[0], f34), ValueError, ["matmul", "a", "2-D"]),
    ("mm-a-1d-b-3d", lambda: linalg.matmul(f23[0], f34[None]), ValueError, ["matmul", "a", "2-D"]),
    ("mm-batch-mismatch", lambda: linalg.matmul(np.ones((2, 2, 3), F32), np.ones((3, 3, 4), F32)),
     ValueError, ["matmul", "batch", "broadcast"]),
    ("mm-a-0d", lambda: linalg.matmul(np.array(1, F32), f34), ValueError, ["matmul", "a", "2-D"]),
    ("mm-inner-NN", lambda: linalg.matmul(f23, f43), ValueError, ["matmul", "(2, 3)", "(4, 3)"]),
    ("mm-inner-NT", lambda: linalg.matmul(f23, f34, transpose_b=True), ValueError,
     ["matmul", "(2, 3)", "(3, 4)"]),
    ("mm-inner-TN", lambda: linalg.matmul(f23, f34, transpose_a=True), ValueError,
     ["matmul", "(2, 3)", "(3, 4)"]),
    ("mm-list", lambda: linalg.matmul([[1.0]], [[1.0]]), TypeError, ["matmul", "a"]),
    ("mm-none", lambda: linalg.matmul(f23, None), TypeError, ["matmul", "b"]),
    ("mm-out-dtype", lambda: linalg.matmul(f23, f34, out=np.zeros((2, 4))), TypeError,
     ["matmul", "out", "float32"]),
    ("mm-out-shape", lambda: linalg.matmul(f23, f34, out=np.zeros((4, 2), F32)), ValueError,
     ["matmul", "out", "shape"]),
    ("mm-out-noncontig", lambda: linalg.matmul(f23, f34, out=np.zeros((2, 8), F32)[:, ::2]),
     ValueError, ["matmul", "out", "contiguous"]),
    ("mm-out-fortran", lambda: linalg.matmul(f23, f34, out=np.zeros((2, 4), F32, order="F")),
     ValueError, ["matmul", "out", "contiguous"]),
    ("mm-out-readonly", lambda: linalg.matmul(f23, f34, out=_ro(np.zeros((2, 4), F32))), ValueError,
     ["matmul", "out", "read-only"]),
    # ---- matmul_bf16 (rule 9)
    ("bf-b-float32", lambda: linalg.matmul_bf16(f23, f34), TypeError, ["matmul_bf16", "b", "uint16"]),
    ("bf-a-float64", lambda: linalg.matmul_bf16(f23.astype(np.float64), u34), TypeError,
     ["matmul_bf16", "a", "float64"]),
    ("bf-a-int16", lambda: linalg.matmul_bf16(f23.astype(np.int16), u34), TypeError,
     ["matmul_bf16", "a", "int16"]),
    ("bf-both-flags", lambda: linalg.matmul_bf16(f23, u34, transpose_a=True, transpose_b=True),
     ValueError, ["matmul_bf16", "transpose_a", "transpose_b"]),
    ("bf-b-1d", lambda: linalg.matmul_bf16(f23, u34[0]), ValueError, ["matmul_bf16", "b", "2-D"]),
    ("bf-inner", lambda: linalg.matmul_bf16(f23, np.ones((4, 3), np.uint16)), ValueError,
     ["matmul_bf16", "(2, 3)", "(4, 3)"]),
    ("bf-out-dtype", lambda: linalg.matmul_bf16(f23, u34, out=np.zeros((2, 4), np.uint16)),
     TypeError, ["matmul_bf16", "out"]),
    # ---- matmul_int8 / matmul_int15 (L-7, W-4 and argument checks)
    ("i8-k-mismatch", lambda: linalg.matmul_int8(a25, np.ones((3, 4), F32)), ValueError,
     ["matmul_int8", "k"]),
    ("i8-float64", lambda: linalg.matmul_int8(a25.astype(np.float64), b35), TypeError,
     ["matmul_int8", "a", "float32"]),
    ("i8-b-float16", lambda: linalg.matmul_int8(a25, b35.astype(np.float16)), TypeError,
     ["matmul_int8", "b", "float32"]),
    ("i8-codes-int16", lambda: linalg.matmul_int8((c25.astype(np.int16), e2), b35), TypeError,
     ["matmul_int8", "a[0]", "int8"]),
    ("i8-codes-uint8", lambda: linalg.matmul_int8(a25, (b35.astype(np.uint8), np.zeros(3, np.int32))),
     TypeError, ["matmul_int8", "b[0]", "int8"]),
    ("i8-exps-int64", lambda: linalg.matmul_int8((c25, np.zeros(2, np.int64)), b35), TypeError,
     ["matmul_int8", "exponents", "int32"]),
    ("i8-exps-length", lambda: linalg.matmul_int8((c25, np.zeros(3, np.int32)), b35), ValueError,
     ["matmul_int8", "exponents", "3", "2"]),
    ("i8-exps-2d", lambda: linalg.matmul_int8((c25, np.zeros((2, 1), np.int32)), b35), ValueError,
     ["matmul_int8", "exponents"]),
    ("i8-tuple-3", lambda: linalg.matmul_int8((c25, c25, e2), b35), ValueError, ["matmul_int8", "a"]),
    ("i8-1d", lambda: linalg.matmul_int8(a25[0], b35), ValueError, ["matmul_int8", "a", "2-D"]),
    ("i8-domain", lambda: linalg.matmul_int8(np.zeros((1, 131073), F32), np.zeros((1, 131073), F32)),
     ValueError, ["matmul_int8", "L-7", "131073"]),
    ("i8-out-dtype", lambda: linalg.matmul_int8(a25, b35, out=np.zeros((2, 3), np.int32)), TypeError,
     ["matmul_int8", "out", "float32"]),
    ("i8-out-shape", lambda: linalg.matmul_int8(a25, b35, out=np.zeros((3, 2), F32)), ValueError,
     ["matmul_int8", "out"]),
    ("i8-out-readonly", lambda: linalg.matmul_int8(a25, b35, out=_ro(np.zeros((2, 3), F32))),
     ValueError, ["matmul_int8", "out", "read-only"]),
    ("i15-k-mismatch", lambda: linalg.matmul_int15(a25, np.ones((3, 4), F32)), ValueError,
     ["matmul_int15", "k"]),
    ("i15-float64", lambda: linalg.matmul_int15(a25, b35.astype(np.float64)), TypeError,
     ["matmul_int15", "b", "float32"]),
    ("i15-tuple-2", lambda: linalg.matmul_int15((c25, e2), b35), ValueError, ["matmul_int15", "a"]),
    ("i15-planes-shape", lambda: linalg.matmul_int15((c25, np.ones((2, 4), np.int8), e2), b35),
     ValueError, ["matmul_int15", "hi", "lo"]),
    ("i15-lo-int16", lambda: linalg.matmul_int15((c25, c25.astype(np.int16), e2), b35), TypeError,
     ["matmul_int15", "a[1]", "int8"]),
    ("i15-exps-length", lambda: linalg.matmul_int15((c25, c25, np.zeros(1, np.int32)), b35),
     ValueError, ["matmul_int15", "exponents"]),
    ("i15-domain", lambda: linalg.matmul_int15(np.zeros((1, 65537), F32), np.zeros((2, 65537), F32)),
     ValueError, ["matmul_int15", "W-4", "65537"]),
    ("i15-out-noncontig", lambda: linalg.matmul_int15(a25, b35, out=np.zeros((2, 6), F32)[:, ::2]),
     ValueError, ["matmul_int15", "out", "contiguous"]),
    # ---- converters (L-1, L-2, L-3, W-1, L-6, W-3)
    ("bf16-float64", lambda: linalg.to_bf16(np.ones(3)), TypeError, ["to_bf16", "x", "float32", "float64"]),
    ("bf16-float16", lambda: linalg.to_bf16(np.ones(3, np.float16)), TypeError, ["to_bf16", "float16"]),
    ("bf16-uint16", lambda: linalg.to_bf16(np.ones(3, np.uint16)), TypeError, ["to_bf16", "uint16"]),
    ("bf16-list", lambda: linalg.to_bf16([1.0, 2.0]), TypeError, ["to_bf16", "x"]),
    ("wide-float32", lambda: linalg.from_bf16(np.ones(3, F32)), TypeError, ["from_bf16", "bits", "uint16"]),
    ("wide-int16", lambda: linalg.from_bf16(np.ones(3, np.int16)), TypeError, ["from_bf16", "int16"]),
    ("wide-uint32", lambda: linalg.from_bf16(np.ones(3, np.uint32)), TypeError, ["from_bf16", "uint32"]),
    ("q8-float64", lambda: linalg.quantize_int8(np.ones((2, 2))), TypeError, ["quantize_int8", "x", "float32"]),
    ("q8-1d", lambda: linalg.quantize_int8(np.ones(2, F32)), ValueError, ["quantize_int8", "x", "2-D"]),
    ("q8-3d", lambda: linalg.quantize_int8(np.ones((1, 2, 2), F32)), ValueError, ["quantize_int8", "2-D"]),
    ("q15-int32", lambda: linalg.quantize_int15(np.ones((2, 2), np.int32)), TypeError,
     ["quantize_int15", "x", "float32"]),
    ("q15-1d", lambda: linalg.quantize_int15(np.ones(2, F32)), ValueError, ["quantize_int15", "2-D"]),
    ("dq8-int16", lambda: linalg.dequantize_int8(np.ones((2, 2), np.int16), e2), TypeError,
     ["dequantize_int8", "codes", "int8"]),
    ("dq8-exps-int64", lambda: linalg.dequantize_int8(np.ones((2, 2), np.int8), np.zeros(2, np.int64)),
     TypeError, ["dequantize_int8", "exponents", "int32"]),
    ("dq8-exps-length", lambda: linalg.dequantize_int8(np.ones((2, 2), np.int8), np.zeros(3, np.int32)),
     ValueError, ["dequantize_int8", "exponents", "3"]),
    ("dq8-1d", lambda: linalg.dequantize_int8(np.ones(2, np.int8), e2), ValueError,
     ["dequantize_int8", "codes", "2-D"]),
    ("dq15-planes", lambda: linalg.dequantize_int15(np.ones((2, 2), np.int8), np.ones((2, 3), np.int8), e2),
     ValueError, ["dequantize_int15", "hi", "lo"]),
    ("dq15-lo-uint8", lambda: linalg.dequantize_int15(np.ones((2, 2), np.int8), np.ones((2, 2), np.uint8), e2),
     TypeError, ["dequantize_int15", "lo", "int8"]),
    ("dq15-exps-length", lambda: linalg.dequantize_int15(np.ones((2, 2), np.int8), np.ones((2, 2), np.int8),
                                                         np.zeros(1, np.int32)),
     ValueError, ["dequantize_int15", "exponents"]),
    # ---- threads
    ("threads-0", lambda: mojolearn.set_num_threads(0), ValueError, ["set_num_threads", "0"]),
    ("threads-neg", lambda: mojolearn.set_num_threads(-2), ValueError, ["set_num_threads"]),
    ("threads-float", lambda: mojolearn.set_num_threads(1.5), TypeError, ["set_num_threads"]),
    ("threads-bool", lambda: mojolearn.set_num_threads(True), TypeError, ["set_num_threads"]),
    ("threads-str", lambda: mojolearn.set_num_threads("2"), TypeError, ["set_num_threads"]),
]


@pytest.mark.parametrize("call,exc,parts", [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS])
def test_refusal(call, exc, parts):
    """7 / L-7 / W-4 (refusals): the right built-in exception, text starting with
    "mojolearn:" and naming the function and the argument or rule."""
    prev = mojolearn.get_num_threads()
    try:
        with pytest.raises(exc) as ei:
            call()
    finally:
        mojolearn.set_num_threads(prev)
    assert type(ei.value) is exc, type(ei.value)
    msg = str(ei.value)
    assert msg.startswith("mojolearn:"), msg
    for p in parts:
        assert p in msg, (p, msg)


def test_refused_call_leaves_out_untouched():
    """7: a refused call writes nothing into a caller's out."""
    out = np.full((2, 4), 7.0, F32)
    with pytest.raises(ValueError):
        linalg.matmul(f23, f43, out=out)
    with pytest.raises(TypeError):
        linalg.matmul(f23.astype(np.float64), f34, out=out)
    with pytest.raises(ValueError):
        linalg.matmul(f23, f34, transpose_a=True, transpose_b=True, out=out)
    assert np.all(out == 7.0)


_ENV_CHILD = textwrap.dedent("""
    import numpy as np, mojolearn
    from mojolearn import linalg
    try:
        linalg.matmul(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32))
    except Exception as e:
        print(type(e).__name__ + "|" + str(e))
    else:
        print("OK|" + str(mojolearn.get_num_threads()))
""")


@pytest.mark.parametrize("value,exc", [("abc", "ValueError"), ("0", "ValueError"), ("-3", "ValueError"),
                                       ("2.5", "ValueError"), (" 2 ", "OK"),
                                       ("9223372036854775808", "ValueError"), ("1025", "ValueError"),
                                       ("9" * 5000, "ValueError")])
def test_env_thread_count_refusals(value, exc):
    """7 (threads API): a bad MOJOLEARN_NUM_THREADS is a ValueError naming the variable
    (in a fresh process; the variable is read once per process)."""
    env = dict(os.environ, MOJOLEARN_NUM_THREADS=value,
               PYTHONPATH=os.pathsep.join([str(ROOT / "python"), str(ROOT)]))
    p = subprocess.run([sys.executable, "-c", _ENV_CHILD], env=env, cwd=str(ROOT),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    kind, _, msg = p.stdout.strip().partition("|")
    assert kind == exc, p.stdout
    if exc == "OK":
        assert msg == "2"
    else:
        assert msg.startswith("mojolearn:") and "MOJOLEARN_NUM_THREADS" in msg, msg


_ISA_CHILD = textwrap.dedent("""
    import mojolearn
    from mojolearn import linalg
    import array
    a = memoryview(array.array("f", [1.0])).cast("B").cast("f", (1, 1))
    try:
        linalg.matmul(a, a)
        print("OK|" + mojolearn.cpu_isa())
    except Exception as e:
        print(type(e).__name__ + "|" + str(e))
""")


@pytest.mark.parametrize("env,msg", [
    ({"MOJOLEARN_ISA": "avx9000"},
     "mojolearn: MOJOLEARN_ISA='avx9000' is not a CPU build; use one of amx, v4, v3"),
    ({"MOJOLEARN_ISA": "_native_v3"},
     "mojolearn: MOJOLEARN_ISA='_native_v3' is not a CPU build; use one of amx, v4, v3"),
    ({"MOJOLEARN_NATIVE": "_native_zen9"},
     "mojolearn: MOJOLEARN_NATIVE='_native_zen9' is no longer read (one switch per choice): "
     "the CPU build is chosen by MOJOLEARN_ISA=amx|v4|v3 and the backend by "
     "MOJOLEARN_DEVICE=auto|cpu|gpu; unset MOJOLEARN_NATIVE"),
    ({"MOJOLEARN_ISA": "amx", "MOJOLEARN_CPU_HIDE": "amx-int8"},
     "mojolearn: MOJOLEARN_ISA=amx cannot run on this CPU: the CPU lacks amx-int8 (hidden by "
     "MOJOLEARN_CPU_HIDE); builds this CPU runs: "),
    ({"MOJOLEARN_ISA": "amx", "MOJOLEARN_CPU_HIDE": "amx-permission"},
     "mojolearn: MOJOLEARN_ISA=amx cannot run on this CPU: "),
    ({"MOJOLEARN_ISA": "v4", "MOJOLEARN_CPU_HIDE": "avx512bw"},
     "mojolearn: MOJOLEARN_ISA=v4 cannot run on this CPU: the CPU lacks avx512bw (hidden by "
     "MOJOLEARN_CPU_HIDE); builds this CPU runs: v3 (unset MOJOLEARN_ISA to pick the best)"),
    ({"MOJOLEARN_CPU_HIDE": "avx2"},
     "mojolearn: this CPU cannot run any build of the kernels: amx: the CPU lacks avx2"),
    ({"MOJOLEARN_CPU_HIDE": "sse9"}, "mojolearn: MOJOLEARN_CPU_HIDE names unknown CPU features ['sse9']"),
])
def test_isa_refusals(env, msg):
    """7 (CPU builds): a MOJOLEARN_ISA that names no build, or a build this CPU cannot run (here by hiding
    a feature it has), is an ImportError naming the variable and the missing feature:
    the build is never imported (it would die with SIGILL in its import)."""
    from mojolearn._core import cpu as _cpu

    hidden = env.get("MOJOLEARN_CPU_HIDE", "")
    amx_here = _cpu.refusal("amx")  # None on a CPU that runs amx
    if env.get("MOJOLEARN_ISA") == "amx" and amx_here:
        # on a CPU without AMX the refusal names what it really lacks, and the hidden
        # feature among them (so the whole text is not the unhidden one)
        msg = "mojolearn: MOJOLEARN_ISA=amx cannot run on this CPU: "
        if "lacks" in amx_here:
            msg += "the CPU lacks "
    if env.get("MOJOLEARN_ISA") == "v4" and _cpu.refusal("v4"):
        msg = f"mojolearn: MOJOLEARN_ISA=v4 cannot run on this CPU: the CPU lacks "
    full = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "python"), str(ROOT)]))
    for k in ("MOJOLEARN_ISA", "MOJOLEARN_NATIVE", "MOJOLEARN_CPU_HIDE"):
        full.pop(k, None)
    full.update(env)
    p = subprocess.run([sys.executable, "-c", _ISA_CHILD], env=full, cwd=str(ROOT),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    kind, _, text = p.stdout.strip().partition("|")
    assert kind == "ImportError", p.stdout
    assert text.startswith(msg), text
    if hidden and hidden != "amx-permission" and "unknown CPU features" not in msg:
        assert f"{hidden} (hidden by MOJOLEARN_CPU_HIDE)" in text, text
    if hidden == "amx-permission" and not (amx_here and "lacks" in amx_here):
        # the permission is what stops a CPU that has the AMX features
        assert "permission" in text, text


_MEM_CHILD = textwrap.dedent("""
    import numpy as np
    from mojolearn import linalg
    col = np.ones((200000, 1), np.float32)
    row = np.ones((1, 200000), np.float32)
    calls = {
        "matmul": lambda: linalg.matmul(col, row),
        "matmul_NT": lambda: linalg.matmul(col, col, transpose_b=True),
        "matmul_bf16": lambda: linalg.matmul_bf16(col, np.ones((1, 200000), np.uint16)),
        "matmul_int8": lambda: linalg.matmul_int8(col, col),
        "matmul_int15": lambda: linalg.matmul_int15(col, col),
    }
    for name, call in calls.items():
        try:
            call()
        except BaseException as e:
            print(name + "|" + type(e).__name__ + "|" + str(e))
        else:
            print(name + "|no error|")
    r = linalg.matmul(np.ones((2, 3), np.float32), np.ones((3, 2), np.float32))
    print("after|" + repr(r.tolist()))
""")


def test_impossible_allocation_is_memory_error():
    """7: a result that cannot be allocated ((200000, 1) @ (1, 200000) float32, 160 GB)
    is a MemoryError whose text starts with "mojolearn:" and names the function; the
    process survives and keeps working (run in a child so a crash cannot hide)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "python"), str(ROOT)]))
    p = subprocess.run([sys.executable, "-c", _MEM_CHILD], env=env, cwd=str(ROOT),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, (p.returncode, p.stderr[-2000:])
    lines = p.stdout.strip().splitlines()
    assert lines[-1] == "after|[[3.0, 3.0], [3.0, 3.0]]", lines
    for line in lines[:-1]:
        name, kind, msg = line.split("|", 2)
        assert kind == "MemoryError", line
        assert msg.startswith("mojolearn:") and name.split("_NT")[0] in msg, line


def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_repeated_calls_keep_rss_flat():
    """7 (resources): 1000 rounds of small calls to every entry point (and refusals)
    keep the resident set flat (a few MiB of slack)."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((8, 40)).astype(F32)
    b = rng.standard_normal((40, 9)).astype(F32)
    bt = np.ascontiguousarray(b.T)
    bb = np.asarray(linalg.to_bf16(b))
    out = np.empty((8, 9), F32)

    def one_round():
        linalg.matmul(a, b)
        linalg.matmul(a[:2], b)
        linalg.matmul(a, bt, transpose_b=True, out=out)
        linalg.matmul(np.ascontiguousarray(a.T), b, transpose_a=True)
        linalg.matmul_bf16(a, bb)
        linalg.matmul_int8(a, bt)
        linalg.matmul_int15(a, bt)
        c, e = linalg.quantize_int8(a)
        linalg.dequantize_int8(c, e)
        h, lo, e = linalg.quantize_int15(a)
        linalg.dequantize_int15(h, lo, e)
        linalg.from_bf16(linalg.to_bf16(a))
        try:
            linalg.matmul(a.astype(np.float64), b)
        except TypeError:
            pass
        try:
            linalg.matmul_int8(a, b)
        except ValueError:
            pass

    for _ in range(100):
        one_round()
    gc.collect()
    before = _rss_bytes()
    for _ in range(1000):
        one_round()
    gc.collect()
    grown = _rss_bytes() - before
    assert grown < 4 * 1024 * 1024, f"RSS grew by {grown / 2**20:.1f} MiB over 1000 rounds"


def test_out_overlapping_an_input_is_refused():
    """7: `out` may not share memory with an input (it is written while they are
    read): ValueError naming the overlap, for every GEMM entry."""
    import numpy as np

    a = np.ones((4, 4), np.float32)
    b = np.ones((4, 4), np.float32)
    for call in (
        lambda: linalg.matmul(a, b, out=a),
        lambda: linalg.matmul(a, b, out=b),
        lambda: linalg.matmul_bf16(a, linalg.to_bf16(b), out=a),
        lambda: linalg.matmul_int8(a, b, out=a),
        lambda: linalg.matmul_int15(a, b, out=b),
    ):
        with pytest.raises(ValueError, match=r"^mojolearn: .*out overlaps"):
            call()
    big = np.zeros((8, 4), np.float32)
    with pytest.raises(ValueError, match="out overlaps"):
        linalg.matmul(big[:4], b, out=big[2:6])
    c = linalg.matmul(a, b, out=big[4:])  # adjacent, not overlapping: fine
    assert np.asarray(c).sum() == 64.0


def test_kernels_mask_fp_traps_of_the_calling_thread():
    """8: a host thread with floating-point traps unmasked (invalid, overflow, divide)
    gets inf/NaN results from the kernels, not SIGFPE, and its MXCSR back unchanged."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import math
        import mojolearn
        from mojolearn import linalg
        from mojolearn._core.loader import native
        mojolearn.set_num_threads(1)
        inf = float("inf")
        import array
        a = array.array("f", [inf, 0.0, 3e38, 1.0])
        b = array.array("f", [0.0, 1.0, 3e38, 1.0])
        m = memoryview(a).cast("B").cast("f", (2, 2))
        n = memoryview(b).cast("B").cast("f", (2, 2))
        old = native().mxcsr(())
        trapping = old & ~(0x80 | 0x200 | 0x400)  # unmask invalid, divide-by-zero, overflow
        native().mxcsr_set((trapping,))
        c = linalg.matmul(m, n)
        after = native().mxcsr(())
        native().mxcsr_set((old,))
        vals = c.tolist()
        assert math.isnan(vals[0][0]) and math.isinf(vals[0][1]), vals
        assert after & 0xFFC0 == trapping & 0xFFC0, (hex(after), hex(trapping))
        print("ok")
    """)
    import os
    from pathlib import Path

    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1] / "python"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=env)
    assert r.returncode == 0 and "ok" in r.stdout, (r.returncode, r.stdout, r.stderr[-2000:])


def test_release_workspace_frees_and_bounds():
    """6.5: the per-thread packing workspace is bounded (64 MiB) and released on request;
    products after a release give the same bits."""
    import numpy as np
    from mojolearn import linalg
    from mojolearn._ops import calls as _calls

    rng = np.random.default_rng(0)
    a = rng.standard_normal((300, 700)).astype(np.float32)
    b = rng.standard_normal((700, 500)).astype(np.float32)
    c1 = np.asarray(linalg.matmul(a, b)).copy()
    assert _calls.workspace()[1] > 0
    assert linalg.release_workspace() > 0
    assert _calls.workspace() == (0, 0)
    assert linalg.release_workspace() == 0
    assert np.array_equal(np.asarray(linalg.matmul(a, b)).view(np.uint32), c1.view(np.uint32))
    _calls.workspace_fit(_calls.WS_CACHE_MAX + 1)  # larger than the bound: not kept
    assert _calls.workspace()[1] <= _calls.WS_CACHE_MAX

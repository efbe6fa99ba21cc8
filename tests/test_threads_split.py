"""How many tasks a GEMM call gets (mojolearn._core.threads.gemm_tasks): a blocked product
gives each task at least MIN_TASK_MACS multiply-adds (int15 counted as four int8
products), the decode paths keep every task, MOJOLEARN_SPLIT_ALL=1 splits every product
over all of them; the bits are the same either way (compared between two children).

The rest of the suite runs with MOJOLEARN_SPLIT_ALL=1 (tests/conftest.py), so these
tests run their calls in child processes with the variable unset.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = textwrap.dedent("""
    import hashlib, json, sys
    import numpy as np
    import mojolearn
    from mojolearn import linalg
    from mojolearn._core import threads as _threads
    from mojolearn._core.loader import blocking, cpu_native

    mojolearn.set_num_threads(int(sys.argv[2]))
    mod = cpu_native()
    seen = {}
    for name, at in (("gemm_f32", 11), ("gemm_f32_packed", 11), ("gemm_int8", 8),
                     ("gemm_int15", 10)):
        real = getattr(mod, name)
        def spy(args, real=real, name=name, at=at):
            seen.setdefault(name, []).append(int(args[at]))
            return real(args)
        setattr(mod, name, spy)
    out = {"table": _threads.MIN_TASK_MACS, "rows": blocking()["ROWS_MAX"],
           "int_rows": blocking()["INT_ROWS_MAX"], "hash": {}, "tasks": {}}
    rng = np.random.default_rng(5)
    for m, n, k in json.loads(sys.argv[1]):
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((n, k)).astype(np.float32)
        qa, qb = linalg.quantize_int8(a), linalg.quantize_int8(b)
        ha, hb = linalg.quantize_int15(a), linalg.quantize_int15(b)
        key = f"{m}x{n}x{k}"
        seen.clear()
        res = [linalg.matmul(a, b, transpose_b=True),
               linalg.matmul(a, linalg.prepare(b, transpose_b=True), transpose_b=True),
               linalg.matmul_int8(qa, qb), linalg.matmul_int15(ha, hb)]
        out["tasks"][key] = {k_: v for k_, v in seen.items()}
        out["hash"][key] = hashlib.sha256(b"".join(np.asarray(r).tobytes() for r in res)).hexdigest()
    print(json.dumps(out))
""")

SHAPES = [(5, 64, 64), (64, 64, 64), (96, 96, 96), (128, 128, 128), (192, 192, 192),
          (256, 256, 256), (160, 160, 160), (2, 4096, 512)]


def _child(extra_env, threads=2):
    """CHILD with `threads` tasks, MOJOLEARN_SPLIT_ALL unset unless extra_env sets it."""
    env = {k: v for k, v in os.environ.items() if k != "MOJOLEARN_SPLIT_ALL"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python"), str(ROOT)] +
                                        ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update(extra_env)
    return subprocess.run([sys.executable, "-c", CHILD, json.dumps(SHAPES), str(threads)],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)


def _run(extra_env):
    r = _child(extra_env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _expected_tasks(m, n, k, table, rows, int_rows):
    def cap(kind, products, decode_rows):
        if m <= decode_rows:
            return 2
        return max(1, min(2, m * n * k * products // table[kind]))
    return {"gemm_f32": cap("fp32", 1, rows), "gemm_f32_packed": cap("fp32", 1, rows),
            "gemm_int8": cap("int", 1, int_rows), "gemm_int15": cap("int", 4, int_rows)}


def test_small_blocked_products_get_fewer_tasks_with_the_same_bits():
    """With 2 threads and the variable unset: the task count each GEMM entry is given
    follows MIN_TASK_MACS (small products one task, larger ones two, decode rows two),
    and every product's bits equal those of the same product split over 2 tasks."""
    got = _run({})
    table, rows, int_rows = got["table"], got["rows"], got["int_rows"]
    ones = twos = 0
    for m, n, k in SHAPES:
        key = f"{m}x{n}x{k}"
        want = _expected_tasks(m, n, k, table, rows, int_rows)
        seen = got["tasks"][key]
        for entry, t in want.items():
            assert seen.get(entry) == [t], f"{key}: {entry} was given {seen.get(entry)} tasks, want [{t}]"
            ones += t == 1
            twos += t == 2
    assert ones >= 8 and twos >= 8  # both sides of every threshold are exercised
    assert got["hash"] == _run({"MOJOLEARN_SPLIT_ALL": "1"})["hash"]


def test_split_all_gives_every_product_all_tasks():
    """MOJOLEARN_SPLIT_ALL=1: every entry is given the 2 configured tasks."""
    got = _run({"MOJOLEARN_SPLIT_ALL": "1"})
    for key, seen in got["tasks"].items():
        assert all(v == [2] for v in seen.values()), (key, seen)


def test_split_all_refuses_other_values():
    """A value other than 0 or 1 is refused by name at the first product, with 2
    threads and with 1."""
    for bad, threads in (("2", 2), ("yes", 2), ("x" * 40, 2), ("2", 1)):
        r = _child({"MOJOLEARN_SPLIT_ALL": bad}, threads)
        assert r.returncode != 0
        assert "MOJOLEARN_SPLIT_ALL" in r.stderr and "is not 0 or 1" in r.stderr, r.stderr[-2000:]


MODE_CHILD = textwrap.dedent("""
    import hashlib, json
    import numpy as np
    import torch
    import mojolearn
    import mojolearn.torch as mt
    from mojolearn import linalg
    from mojolearn._core import threads as _threads
    from mojolearn._core.loader import cpu_native
    from mojolearn._torch import mode as M

    mojolearn.set_num_threads(2)
    mod = cpu_native()
    seen = []
    real = mod.gemm_f32
    def spy(args):
        seen.append((int(args[3]), int(args[4]), int(args[5]), int(args[11])))
        return real(args)
    mod.gemm_f32 = spy
    rng = np.random.default_rng(9)
    small = torch.from_numpy(rng.standard_normal((576, 576)).astype(np.float32))
    big = torch.from_numpy(rng.standard_normal((2048, 1024)).astype(np.float32))
    x = torch.from_numpy(rng.standard_normal((1, 1024)).astype(np.float32))
    out, h = {}, {}
    def run(tag, mode):
        seen.clear()
        if mode:   # torch's own calls, served by the mode
            r = [(x[:, :576] @ small.T).numpy(), (x @ big.T).numpy()]
        else:
            xn = x.numpy()
            r = [np.asarray(linalg.matmul(xn[:, :576], small.numpy(), transpose_b=True)),
                 np.asarray(linalg.matmul(xn, big.numpy(), transpose_b=True))]
        out[tag] = list(seen)
        h[tag] = hashlib.sha256(b"".join(a.tobytes() for a in r)).hexdigest()
    run("before", False)
    with mt.identical():
        out["floor_on"] = _threads.decode_split_floor()
        run("on", True)
        run("on_linalg", False)
    out["floor_after"] = _threads.decode_split_floor()
    mt.enable()
    _threads.decode_split_floor(7)   # the user's own choice while the mode is on is kept
    mt.disable()
    out["kept"] = _threads.decode_split_floor()
    try:
        _threads.decode_split_floor(-1)
    except ValueError as e:
        out["refused"] = str(e)
    out["DECODE_SPLIT_FLOOR"] = M.DECODE_SPLIT_FLOOR
    out["same_bits"] = h["before"] == h["on"] == h["on_linalg"]
    print(json.dumps(out))
""")


def test_torch_mode_runs_small_decode_products_as_one_task():
    """While the torch mode is on, decode-shape products under its floor run as one task
    (torch's ops between them let the workers fall asleep); larger ones and every
    product outside the mode are split over the 2 tasks; the floor found comes back when
    the mode goes off (unless set meanwhile); the bits do not change."""
    import pytest

    pytest.importorskip("torch")
    env = {k: v for k, v in os.environ.items() if k != "MOJOLEARN_SPLIT_ALL"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python")] +
                                        ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    r = subprocess.run([sys.executable, "-c", MODE_CHILD], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    floor = got["DECODE_SPLIT_FLOOR"]
    assert 576 * 576 < floor < 2048 * 1024
    assert got["before"] == [[1, 576, 576, 2], [1, 2048, 1024, 2]]
    assert got["on"] == got["on_linalg"] == [[1, 576, 576, 1], [1, 2048, 1024, 2]]
    assert got["floor_on"] == floor and got["floor_after"] == 0 and got["kept"] == 7
    assert "mojolearn: decode_split_floor" in got["refused"]
    assert got["same_bits"]

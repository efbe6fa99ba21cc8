"""mojolearn.torch across threads (issue 43, items 1-3): the mode is one process-wide
state with a count of open blocks; switching it is safe at any time from any thread,
and a block's products keep the block's promise whatever other threads do."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mojolearn.torch as mt  # noqa: E402

HERE = Path(__file__).resolve().parent
SECONDS = 5   # per threaded check (make fuzz runs them for longer: tests/fuzz_run.py)


def bits(x) -> bytes:
    return np.ascontiguousarray(x.detach().numpy()).tobytes()


def t(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(autouse=True)
def _mode_off():
    yield
    mt.disable()
    torch.set_num_threads(2)


def battery(check, seconds=SECONDS, seed=0):
    """Run one check of tests/fuzz_threads.py in a fresh process; its JSON line."""
    r = subprocess.run([sys.executable, str(HERE / "fuzz_threads.py"), str(seconds), check,
                        "--seed", str(seed)], capture_output=True, text=True, timeout=300)
    lines = [json.loads(s) for s in r.stdout.splitlines() if s.startswith("{")]
    assert r.returncode in (0, 1) and lines, \
        f"the {check} run died (exit {r.returncode}):\n{r.stderr[-3000:]}"
    line = lines[0]
    assert line["n_failures"] == 0, json.dumps(line, indent=1)[:4000]
    return line


def run_threads(*bodies, timeout=60):
    errors = []

    def guard(body):
        def run():
            try:
                body()
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)
        return run
    threads = [threading.Thread(target=guard(b)) for b in bodies]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout)
    assert not any(th.is_alive() for th in threads), "a thread hung"
    if errors:
        raise errors[0]


def test_switching_while_other_threads_run_products():
    """Issue 43 item 1: one thread enters and leaves identical() blocks (tens of
    thousands of times) while three others run mm, addmm, F.linear, bmm, mv, silu,
    softmax, rms_norm and mean outside any block, in a fresh process: no crash, no
    exception, every result torch's bits or the mode's, and the mode off at the end.
    Leaving the outermost block used to take the kernels out of torch while other
    threads were dispatching to them (wrong kernels called, torch INTERNAL ASSERTs,
    segfaults)."""
    line = battery("switch")
    assert line["counts"]["blocks"] > 100 and line["counts"]["products"] > 100


def test_a_block_stays_on_when_another_thread_leaves_or_disables():
    """Issue 43 item 2: thread B opens a block, thread A opens one, B leaves its block
    and calls disable(): A's block is still on (is_enabled(), numeric_mode()) and its
    product has the mode's bits, not torch's; the mode goes off when A leaves."""
    a, w = t(8, 300), t(32, 300, seed=1)
    theirs = bits(a @ w.T)
    with mt.identical():
        ours = bits(a @ w.T)
    assert ours != theirs   # the check can tell the two apart
    b_in, a_in, b_out = threading.Event(), threading.Event(), threading.Event()
    got = {}

    def thread_a():
        assert b_in.wait(10)
        with mt.identical():
            a_in.set()
            assert b_out.wait(10)
            got.update(on=mt.is_enabled(), mode=mt.numeric_mode(), bits=bits(a @ w.T))

    def thread_b():
        with mt.identical():
            b_in.set()
            assert a_in.wait(10)
        mt.disable()
        b_out.set()

    run_threads(thread_a, thread_b)
    assert got == {"on": True, "mode": "identical", "bits": ours}
    assert not mt.is_enabled() and bits(a @ w.T) == theirs


def test_another_threads_block_can_not_change_the_numeric_mode():
    """Issue 43 item 2: while thread A's block is open under one numeric mode, a block
    of thread B under another (named, or naming none: B's own mode) is refused by name
    (RuntimeError naming both modes), as is enable() with another numeric_mode; A's
    products keep their mode's bits (k = 700: fast and identical differ). A block of
    B under A's mode is admitted and runs that mode."""
    a, w = t(5, 700), t(700, 6, seed=1)
    ref = {}
    for m in ("identical", "fast"):
        with mt.identical(numeric_mode=m):
            ref[m] = bits(a @ w)
    assert ref["identical"] != ref["fast"]
    for held, other in (("identical", "fast"), ("fast", "identical")):
        a_in, b_done = threading.Event(), threading.Event()
        got = {}

        def thread_a():
            with mt.identical(numeric_mode=held):
                a_in.set()
                assert b_done.wait(10)
                got["a"] = (mt.numeric_mode(), bits(a @ w))

        def thread_b():
            assert a_in.wait(10)
            try:
                for asked in (other,) + ((None,) if other == "identical" else ()):
                    with pytest.raises(RuntimeError,
                                       match=rf"^mojolearn: .*{other!r}.*{held!r}"):
                        with mt.identical(numeric_mode=asked):
                            got["b ran"] = bits(a @ w)
                with pytest.raises(RuntimeError,
                                   match=rf"^mojolearn: mojolearn.torch.enable\(numeric_mode="
                                         rf"{other!r}\).*{held!r}"):
                    mt.enable(numeric_mode=other)
                with mt.identical(numeric_mode=held):
                    got["b"] = (mt.numeric_mode(), bits(a @ w))
            finally:
                b_done.set()

        run_threads(thread_a, thread_b)
        assert "b ran" not in got
        assert got["a"] == got["b"] == (held, ref[held])
        assert not mt.is_enabled()


def test_nested_blocks_and_the_last_block_restores():
    """Issue 43 item 2: nesting in one thread keeps its behaviour (a nested block may
    change the numeric mode while no other thread has a block open, and restores it);
    with other threads' blocks open, a nested block of another mode is refused, and a
    block is refused when a thread's nested block would later bring back another mode.
    The SDP flash flag and torch.compile's stance stay switched until the last block of
    any thread closes, and are restored then."""
    from torch._dynamo import eval_frame

    flash0, stance0 = torch.backends.cuda.flash_sdp_enabled(), eval_frame._stance
    with mt.identical(numeric_mode="fast"):
        with mt.identical():
            assert mt.numeric_mode() == "fast"
            with mt.identical(numeric_mode="identical"):
                assert mt.numeric_mode() == "identical"
            assert mt.numeric_mode() == "fast"
    assert not mt.is_enabled()

    step = [threading.Event() for _ in range(4)]
    seen = {}

    def thread_a():
        with mt.identical(numeric_mode="fast"):
            with mt.identical(numeric_mode="identical"):   # only this thread's blocks
                step[0].set()
                assert step[1].wait(10)
            step[2].set()
            assert step[3].wait(10)
        seen["a closed"] = (mt.is_enabled(), torch.backends.cuda.flash_sdp_enabled(),
                            eval_frame._stance.stance)

    def thread_b():
        assert step[0].wait(10)
        try:   # A's nested block closes back to 'fast': an 'identical' block is refused
            with pytest.raises(RuntimeError, match=r"^mojolearn: .*'identical'.*'fast'"):
                with mt.identical(numeric_mode="identical"):
                    pass
        finally:
            step[1].set()
        assert step[2].wait(10)
        with mt.identical(numeric_mode="fast"):
            try:
                with pytest.raises(RuntimeError, match=r"^mojolearn: .*'identical'.*'fast'"):
                    with mt.identical(numeric_mode="identical"):   # nested, another mode
                        pass
            finally:
                step[3].set()
            while "a closed" not in seen:
                time.sleep(0.01)
            seen["b open"] = (mt.is_enabled(), torch.backends.cuda.flash_sdp_enabled(),
                              eval_frame._stance.stance, mt.numeric_mode())

    run_threads(thread_a, thread_b)
    assert seen["a closed"] == (True, False, "force_eager")
    assert seen["b open"] == (True, False, "force_eager", "fast")
    assert not mt.is_enabled()
    assert torch.backends.cuda.flash_sdp_enabled() == flash0 and eval_frame._stance == stance0


def test_threads_battery():
    """Issue 43 item 2: three threads enter and leave blocks under random numeric
    modes (refusals by name allowed), a fourth switches enable() / disable(), two run
    products outside any block, for a few seconds in a fresh process: inside every
    admitted block each result has that mode's single-thread bits and numeric_mode() is
    the block's; at the end the mode is off, the SDP flags and the compiler's stance
    restored (make fuzz runs the same for longer)."""
    line = battery("blocks")
    c = line["counts"]
    assert all(c.get(f"{m} blocks", 0) > 0 for m in ("identical", "deterministic", "fast")), c
    assert c.get("admitted beside another thread's block", 0) > 0, c


def test_shared_ones_buffer_under_threads():
    """Issue 43 item 3: with the mode on, three threads run silu and rms_norm (no
    weight) on ever larger inputs for a few seconds in a fresh process, so the mode's
    shared buffer of ones keeps growing: every result has the bits of the models'
    kernels on the same input. A thread used to read the buffer after another had
    replaced (and freed) it or swapped in a smaller one."""
    line = battery("ones")
    assert line["counts"]["silu"] > 50 and line["counts"]["rms_norm"] > 50


_PASSTHROUGH = r'''
import json, sys
import torch
F = torch.nn.functional
torch.set_num_threads(1)


def t(*s, seed=0):
    return torch.randn(*s, generator=torch.Generator().manual_seed(seed))


def run():
    a, w, b = t(8, 300), t(32, 300, seed=1), t(32, seed=2)
    s, g = t(4, 300, seed=3) * 3, t(300, seed=4)
    out = [torch.mm(a, w.t()), torch.addmm(b, a, w.t()), F.linear(a, w, b),
           torch.bmm(a[None], w.t()[None]), torch.mv(w, a[0]), torch.dot(a[0], a[1]),
           torch.mm(a, w.t(), out=torch.empty(8, 32)), F.silu(s), torch.softmax(s, -1),
           torch.log_softmax(s, -1), s.mean(-1), F.rms_norm(s, (300,), g, 1e-5),
           F.rms_norm(s, (300,))]
    xg, wg = s.clone().requires_grad_(), g.clone().requires_grad_()
    (F.rms_norm(xg, (300,), wg, 1e-5) * t(4, 300, seed=5)).sum().backward()
    lg = a.clone().requires_grad_()
    F.silu(F.linear(lg, w, b)).sum().backward()
    out += [xg.grad, wg.grad, lg.grad]
    return [o.detach().contiguous().view(torch.int32).numpy().tobytes().hex() for o in out]


before = run()
import mojolearn.torch as mt
with mt.identical():
    inside = run()
print(json.dumps({"before": before, "inside": inside, "after": run(),
                  "on": mt.is_enabled()}))
'''


def test_after_the_first_use_off_is_torch():
    """Issue 43 item 1: the kernels stay registered after the first block; off, every
    covered op (the products, out=, silu, softmax, log_softmax, mean, rms_norm with and
    without a weight) and the gradients of rms_norm and of a linear layer have, in a
    fresh process, exactly the bits torch gave before the first use (and the mode's
    own differ from them)."""
    r = subprocess.run([sys.executable, "-c", _PASSTHROUGH], capture_output=True, text=True,
                       timeout=300, cwd=str(HERE.parent),
                       env={**os.environ, "PYTHONPATH": str(HERE.parent / "python")})
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["after"] == got["before"] and not got["on"]
    assert sum(x != y for x, y in zip(got["before"], got["inside"])) >= 10

"""The torch mode across threads (issue 43, items 1-3): threaded checks run as a script
in a fresh process, so a crash (a segfault, an abort in torch) fails the caller instead
of killing it.

    python tests/fuzz_threads.py SECONDS [CHECK,...] [--seed S]

Each check runs about SECONDS seconds and prints one JSON line (check, counts,
failures); the exit status is 1 when any check failed. The checks:

  switch  one thread enters and leaves identical() blocks while three others run torch
          products and the covered elementwise ops outside any block: every result must
          have torch's bits or the mode's, and nothing may raise.
  blocks  three threads enter and leave blocks under random numeric modes (refusals by
          name are allowed), a fourth switches enable() / disable(), two run the ops
          outside any block: inside an admitted block every result has the bits the
          block's mode gives in one thread, and numeric_mode() is the block's; outside,
          torch's bits or one of the modes'. At the end the mode is off and the SDP
          flags and the compiler's stance are what they were.
  ones    with the mode on, three threads run silu and rms_norm (no weight) on ever
          larger inputs, so the mode's shared buffer of ones keeps growing: every result
          has the bits of the models' kernels on the same input.

tests/test_torch_threads.py runs them for a few seconds each (make test);
tests/fuzz_run.py for longer (make fuzz).
"""
from __future__ import annotations

import itertools
import json
import os
import random
import sys
import threading
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import mojolearn.torch as mt  # noqa: E402

F = torch.nn.functional
MODES = ("identical", "deterministic", "fast")
KEEP = 10   # failures described per check (all are counted)


def _t(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _ops():
    """(name, call) pairs: the covered products (k = 300 and, where the looser modes
    change bits, 700) and elementwise ops, on fixed inputs."""
    a, w, b = _t(8, 300, seed=1), _t(32, 300, seed=2), _t(32, seed=3)
    x3 = _t(2, 4, 300, seed=4)
    q, k = _t(2, 6, 40, seed=5), _t(2, 40, 6, seed=6)
    a7, w7 = _t(5, 700, seed=7), _t(700, 6, seed=8)
    s, g = _t(4, 300, seed=9) * 3, _t(300, seed=10)
    return [
        ("mm", lambda: torch.mm(a, w.t())),
        ("addmm", lambda: torch.addmm(b, a, w.t())),
        ("linear", lambda: F.linear(x3, w, b)),
        ("bmm", lambda: torch.bmm(q, k)),
        ("matmul k=700", lambda: a7 @ w7),
        ("mv", lambda: torch.mv(w, a[0])),
        ("silu", lambda: F.silu(s)),
        ("softmax", lambda: torch.softmax(s, -1)),
        ("rms_norm", lambda: F.rms_norm(s, (300,), g, 1e-5)),
        ("mean", lambda: s.mean(-1)),
    ]


def _bits(x) -> bytes:
    return x.detach().contiguous().view(torch.int32).numpy().tobytes()


class Run:
    """Counts and failures of one check, shared by its threads."""

    def __init__(self, check, seconds):
        self.check, self.stop = check, time.time() + seconds
        self.lock = threading.Lock()
        self.counts: dict = {}
        self.failures: list = []
        self.n_failures = 0

    def going(self) -> bool:
        return time.time() < self.stop

    def count(self, key, n=1):
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + n

    def fail(self, what):
        with self.lock:
            self.n_failures += 1
            if len(self.failures) < KEEP:
                self.failures.append(what)

    def guarded(self, body):
        def run():
            try:
                body()
            except BaseException:  # noqa: BLE001 - reported
                self.fail(f"a thread raised:\n{traceback.format_exc()[-1500:]}")
        return threading.Thread(target=run)

    def go(self, bodies):
        threads = [self.guarded(b) for b in bodies]
        for th in threads:
            th.start()
        for th in threads:
            th.join()

    def line(self) -> dict:
        return {"check": self.check, "counts": self.counts, "n_failures": self.n_failures,
                "failures": self.failures}


def references(ops):
    """{'torch': [bits], mode: [bits]}: each op in one thread, the mode off and then
    inside a block of each numeric mode."""
    ref = {"torch": [_bits(f()) for _, f in ops]}
    for m in MODES:
        with mt.identical(numeric_mode=m):
            ref[m] = [_bits(f()) for _, f in ops]
    return ref


def _stance():
    from torch._dynamo import eval_frame

    return eval_frame._stance


def _flags():
    b = torch.backends.cuda
    return [b.flash_sdp_enabled(), b.mem_efficient_sdp_enabled()]


def check_switch(seconds, seed):
    ops = _ops()
    ref = references(ops)
    allowed = [{ref["torch"][i], ref["identical"][i]} for i in range(len(ops))]
    run = Run("switch", seconds)

    def work(wid):
        rng = random.Random(seed * 100 + wid)
        while run.going():
            i = rng.randrange(len(ops))
            got = _bits(ops[i][1]())
            if got not in allowed[i]:
                run.fail(f"{ops[i][0]} outside any block: neither torch's bits nor the mode's")
            run.count("products")

    def toggle():
        rng = random.Random(seed)
        while run.going():
            with mt.identical():
                if rng.random() < 0.2:
                    i = rng.randrange(len(ops))
                    if _bits(ops[i][1]()) != ref["identical"][i]:
                        run.fail(f"{ops[i][0]} inside a block: not the mode's bits")
            run.count("blocks")

    run.go([lambda w=w: work(w) for w in range(3)] + [toggle])
    if mt.is_enabled():
        run.fail("the mode is still on after the last block closed")
    return run.line()


def check_blocks(seconds, seed):
    ops = _ops()
    stance0, flags0 = _stance(), _flags()
    ref = references(ops)
    any_bits = [{ref[k][i] for k in ref} for i in range(len(ops))]
    run = Run("blocks", seconds)
    inside = [0]
    inside_lock = threading.Lock()

    def blocks(wid):
        rng = random.Random(seed * 100 + wid)
        while run.going():
            asked = rng.choice((None,) + MODES)
            want = asked or "identical"
            try:
                with mt.identical(numeric_mode=asked):
                    with inside_lock:
                        inside[0] += 1
                        if inside[0] > 1:
                            run.count("admitted beside another thread's block")
                    try:
                        if mt.numeric_mode() != want or not mt.is_enabled():
                            run.fail(f"in a block of {want!r}: numeric_mode() "
                                     f"{mt.numeric_mode()!r}, is_enabled() {mt.is_enabled()}")
                        for i in rng.sample(range(len(ops)), 4):
                            if _bits(ops[i][1]()) != ref[want][i]:
                                run.fail(f"{ops[i][0]} in a block of {want!r}: not that "
                                         f"mode's bits")
                            run.count(f"products in {want} blocks")
                        if rng.random() < 0.3:   # a nested block of this thread
                            with mt.identical():
                                i = rng.randrange(len(ops))
                                if _bits(ops[i][1]()) != ref[want][i]:
                                    run.fail(f"{ops[i][0]} nested in {want!r}: not its bits")
                    finally:
                        with inside_lock:
                            inside[0] -= 1
                run.count(f"{want} blocks")
            except RuntimeError as e:
                msg = str(e)
                if not (msg.startswith("mojolearn: ") and repr(want) in msg):
                    run.fail(f"a refusal without the prefix or the mode's name: {msg[:300]}")
                run.count("refused")
            time.sleep(rng.uniform(0, 0.004))  # gaps, so that every mode gets its turn

    def outside(wid):
        rng = random.Random(seed * 100 + wid)
        while run.going():
            i = rng.randrange(len(ops))
            if _bits(ops[i][1]()) not in any_bits[i]:
                run.fail(f"{ops[i][0]} outside any block: neither torch's bits nor a mode's")
            run.count("products outside")

    def switch():
        while run.going():
            mt.enable()
            time.sleep(0.001)
            mt.disable()
            time.sleep(0.002)
            run.count("enable/disable")

    run.go([lambda w=w: blocks(w) for w in range(3)]
           + [lambda w=w: outside(w) for w in (10, 11)] + [switch])
    if mt.is_enabled():
        run.fail("the mode is still on after every block closed and disable()")
    if _stance() != stance0 or _flags() != flags0:
        run.fail(f"not restored: stance {_stance()} (was {stance0}), SDP flags {_flags()} "
                 f"(were {flags0})")
    return run.line()


def check_ones(seconds, seed):
    from mojolearn.models._exec import kernels as K

    run = Run("ones", seconds)
    step = itertools.count()
    cols = 512

    def work(wid):
        rng = np.random.default_rng(seed * 100 + wid)
        while run.going():
            j = next(step) % 4000            # every call larger than the ones before
            x = torch.from_numpy(rng.standard_normal((128 + j, cols), dtype=np.float32))
            if j % 2 == 0:
                got = F.silu(x)
                xs = x.numpy()
                want = K.silu_mul(np.concatenate([xs, np.ones_like(xs)], axis=1), cols,
                                  np.empty_like(xs))
                name = "silu"
            else:
                v = x.reshape(1, -1)
                got = F.rms_norm(v, (v.shape[1],), None, 1e-5)
                xs = v.numpy()
                want = K.rmsnorm(xs, np.ones(xs.shape[1], np.float32), K.f32_bits(1e-5),
                                 np.empty_like(xs))
                name = "rms_norm"
            if _bits(got) != want.view(np.int32).tobytes():
                diff = float(np.abs(got.numpy() - want).max())
                run.fail(f"{name} of {tuple(x.shape)}: not the kernel's bits (max diff {diff})")
            run.count(name)

    mt.enable()
    try:
        run.go([lambda w=w: work(w) for w in range(3)])
    finally:
        mt.disable()
    return run.line()


CHECKS = {"switch": check_switch, "blocks": check_blocks, "ones": check_ones}


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    seed = 0
    if "--seed" in argv:
        i = argv.index("--seed")
        seed = int(argv[i + 1])
        del argv[i:i + 2]
    seconds = float(argv[0])
    names = argv[1].split(",") if len(argv) > 1 else list(CHECKS)
    torch.set_num_threads(1)   # torch's own bits (the references) from one thread
    bad = 0
    for name in names:
        line = CHECKS[name](seconds, seed)
        bad += line["n_failures"]
        print(json.dumps(line), flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

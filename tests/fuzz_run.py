"""Runs the fuzz table (tests/fuzz_cases.py) in child processes.

    python -m tests.fuzz_run [--examples N] [--seed S] [--entries a,b] [--batches B]
    python -m tests.fuzz_run --replay ENTRY SEED     # one case, in this process

The entries are split into a few batches; each batch runs in one child
interpreter, where hypothesis (fixed seed, no database, no shrinking) draws a
case seed per example and the entry's generator builds the case from it. Before
each case the child writes "entry<TAB>seed" to a progress file, so a crash (a
signal, an abort in native code) or a hang (faulthandler ends the child after
CASE_TIMEOUT_S seconds in one case) fails the run naming the case, and the run
goes on with the next batch. Prints the number of cases tried per entry. A full run
(no --entries) then checks resident memory over many calls (tests/memory_run.py) and
the torch mode, shared models and per-thread modes across threads
(tests/fuzz_threads.py, tests/threads_battery.py; FUZZ_THREADS_SECONDS per check, 60 by
default).
"""
from __future__ import annotations

import argparse
import builtins
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASE_TIMEOUT_S = 60
_BUILTIN_EXC = {v for v in vars(builtins).values()
                if isinstance(v, type) and issubclass(v, BaseException)}


def _entries():
    from tests.fuzz_cases import ENTRIES, SELFTEST_ENTRIES

    if os.environ.get("MOJOLEARN_FUZZ_SELFTEST") == "1":
        return dict(SELFTEST_ENTRIES)
    return dict(ENTRIES)


def judge(case, exc, result) -> str | None:
    """None when the outcome is allowed, else why not."""
    if exc is None:
        if case.expect == "error":
            return "accepted bad input (expected a mojolearn refusal)"
        if case.check is not None:
            try:
                case.check(result)
            except AssertionError as e:
                return f"wrong result: {str(e)[:1500]}"
            except Exception:
                return f"checking the result failed:\n{traceback.format_exc()[-1500:]}"
        return None
    msg = str(exc)
    kind = type(exc)
    if case.expect == "ok":
        return f"valid input raised {kind.__name__}: {msg[:600]}"
    if kind is Exception or kind not in _BUILTIN_EXC:
        return f"raised {kind.__module__}.{kind.__name__} (want a built-in type): {msg[:600]}"
    if not msg.startswith("mojolearn"):
        return f"{kind.__name__} without the mojolearn prefix: {msg[:600]}"
    if case.names and not any(n in msg for n in case.names):
        return f"{kind.__name__} does not name any of {case.names}: {msg[:600]}"
    return None


def run_case(entry, seed, tmp):
    """(label, outcome kind, failure or None) for one case, in this process."""
    import numpy as np

    gen = _entries()[entry]
    rng = np.random.default_rng(seed)
    try:
        case = gen(rng, tmp)
    except Exception:
        return "?", "generator", f"the case generator failed:\n{traceback.format_exc()[-1500:]}"
    exc = result = None
    try:
        result = case.call()
    except BaseException as e:  # noqa: BLE001 - judged below
        if isinstance(e, KeyboardInterrupt):
            raise
        exc = e
    why = judge(case, exc, result)
    if why is None and case.after is not None:
        try:
            case.after()
        except AssertionError as e:
            why = f"after the call: {str(e)[:1500]}"
        except Exception:
            why = f"after the call, the check failed:\n{traceback.format_exc()[-1500:]}"
    return case.label, ("raised" if exc is not None else "returned"), why


def _worker(args):
    import faulthandler

    from hypothesis import HealthCheck, Phase, given, seed, settings, strategies as st

    entries = args.entries.split(",")
    progress = open(args.progress, "a", buffering=1)
    out = {}
    for entry in entries:
        stats = {"cases": 0, "returned": 0, "raised": 0, "failures": []}
        tmp_root = tempfile.mkdtemp(prefix="mlfuzz-")

        @seed(args.seed)
        @settings(max_examples=args.examples, database=None, deadline=None,
                  phases=[Phase.generate], suppress_health_check=list(HealthCheck))
        @given(st.integers(0, 2 ** 63 - 1))
        def one(case_seed):
            progress.write(f"{entry}\t{case_seed}\n")
            tmp = tempfile.mkdtemp(dir=tmp_root)
            faulthandler.dump_traceback_later(CASE_TIMEOUT_S, exit=True)
            try:
                label, kind, why = run_case(entry, case_seed, tmp)
            finally:
                faulthandler.cancel_dump_traceback_later()
                shutil.rmtree(tmp, ignore_errors=True)
            stats["cases"] += 1
            stats[kind] = stats.get(kind, 0) + 1
            if why is not None:
                stats["failures"].append({"seed": case_seed, "label": label, "why": why})

        try:
            one()
        finally:
            shutil.rmtree(tmp_root, ignore_errors=True)
        out[entry] = stats
        tmp_res = args.result + ".part"
        Path(tmp_res).write_text(json.dumps(out))  # after each entry: kept if a later one crashes
        os.replace(tmp_res, args.result)
    Path(args.result + ".done").write_text("")


def run(examples=8, seed=11, entries=None, batches=3, timeout=600, echo=None):
    """Run every entry (or ``entries``) in child processes; returns
    ({entry: stats}, [crash descriptions]). ``echo`` gets progress lines."""
    names = list(_entries()) if entries is None else list(entries)
    groups = [names[i::batches] for i in range(min(batches, len(names)))]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "python"), str(ROOT)]),
               PYTHONFAULTHANDLER="1")
    results, crashes = {}, []
    work = tempfile.mkdtemp(prefix="mlfuzz-run-")
    try:
        for gi, group in enumerate(groups):
            todo = list(group)
            while todo:  # after a crash, go on with the entries the child did not reach
                prog = os.path.join(work, f"progress{gi}.txt")
                res = os.path.join(work, f"result{gi}.json")
                for p in (prog, res, res + ".done"):
                    if os.path.exists(p):
                        os.unlink(p)
                cmd = [sys.executable, "-m", "tests.fuzz_run", "--worker", "--entries",
                       ",".join(todo), "--examples", str(examples), "--seed", str(seed),
                       "--progress", prog, "--result", res]
                t0 = time.time()
                try:
                    p = subprocess.run(cmd, cwd=str(ROOT), env=env, capture_output=True,
                                       text=True, timeout=timeout)
                    rc, err = p.returncode, p.stderr
                except subprocess.TimeoutExpired as e:
                    rc, err = "timeout", (e.stderr or b"").decode("utf-8", "replace") \
                        if isinstance(e.stderr, bytes) else (e.stderr or "")
                if os.path.exists(res):
                    results.update(json.loads(Path(res).read_text()))
                if rc == 0 and os.path.exists(res + ".done"):
                    if echo:
                        echo(f"batch {gi}: {len(todo)} entries in {time.time() - t0:.1f} s")
                    break
                last = Path(prog).read_text().strip().splitlines() if os.path.exists(prog) else []
                where = last[-1].split("\t") if last else [todo[0], "?"]
                crashes.append(
                    f"the child died (exit {rc}) in case entry={where[0]!r} seed={where[1]} "
                    f"(replay: python -m tests.fuzz_run --replay {where[0]!r} {where[1]}); "
                    f"stderr tail:\n{err[-3000:]}"
                )
                dead = where[0]
                results.setdefault(dead, {"cases": 0, "failures": []})
                todo = todo[todo.index(dead) + 1:] if dead in todo else []
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return results, crashes


def report(results) -> str:
    lines = [f"{'entry':32} {'cases':>6} {'returned':>9} {'raised':>7} {'failures':>9}"]
    total = 0
    for name, s in results.items():
        total += s.get("cases", 0)
        lines.append(f"{name:32} {s.get('cases', 0):6d} {s.get('returned', 0):9d} "
                     f"{s.get('raised', 0):7d} {len(s.get('failures', [])):9d}")
    lines.append(f"{'total':32} {total:6d}")
    return "\n".join(lines)


def failures(results, crashes) -> list:
    out = list(crashes)
    for name, s in results.items():
        for f in s.get("failures", []):
            out.append(f"{name} seed={f['seed']} [{f['label']}]: {f['why']}"
                       f"\n  replay: python -m tests.fuzz_run --replay {name!r} {f['seed']}")
    return out


def memory_check(n, echo=print):
    """Resident memory over n small calls of each product entry (tests/memory_run.py, a
    fresh process): more than 1 MiB of growth after the 10^4 warm-up calls is a
    failure (a native leak per call)."""
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "memory_run.py"), str(n)],
                       capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        return [f"memory check: the run failed: {r.stderr[-2000:]}"]
    out = []
    for line in r.stdout.splitlines():
        row = json.loads(line)
        grown = row["rss_after"] - row["rss_warm"]
        echo(f"memory: {row['entry']}: {n} calls, RSS {row['rss_warm']:.2f} -> "
             f"{row['rss_after']:.2f} MiB")
        if grown >= 1.0:
            out.append(f"memory check: {row['entry']} grew {grown:.2f} MiB over {n} calls")
    return out


THREADS_SECONDS = float(os.environ.get("FUZZ_THREADS_SECONDS", 60))


def threads_check(seconds, seed=0, echo=print):
    """The torch mode across threads (tests/fuzz_threads.py: switch, blocks, ones), each
    check in a fresh process for ``seconds`` seconds: a wrong result, an exception in a
    thread, a crash or a hang is a failure. Skipped without torch."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        echo("threads: torch is not installed: skipped")
        return []
    out = []
    for check in ("switch", "blocks", "ones"):
        cmd = [sys.executable, str(ROOT / "tests" / "fuzz_threads.py"), str(seconds), check,
               "--seed", str(seed)]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=4 * seconds + 600)
        except subprocess.TimeoutExpired:
            out.append(f"threads check {check}: hung (no end after {4 * seconds + 600:.0f} s)")
            continue
        rows = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
        if not rows:
            out.append(f"threads check {check}: the child died (exit {r.returncode}); "
                       f"stderr tail:\n{r.stderr[-3000:]}")
            continue
        row = rows[0]
        if r.returncode not in (0, 1):
            out.append(f"threads check {check}: the child ended with exit {r.returncode}; "
                       f"stderr tail:\n{r.stderr[-3000:]}")
        echo(f"threads: {check}: {seconds:g} s, {row['n_failures']} failures, {row['counts']}")
        out += [f"threads check {check}: {f}" for f in row["failures"]]
        if row["n_failures"] > len(row["failures"]):
            out.append(f"threads check {check}: {row['n_failures'] - len(row['failures'])} "
                       "more failures")
    return out


def models_threads_check(seconds, echo=print):
    """Threads sharing one CausalLM and threads switching their own numeric mode
    (tests/threads_battery.py) for ``seconds`` seconds in a fresh process."""
    cmd = [sys.executable, str(ROOT / "tests" / "threads_battery.py"), str(seconds)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=4 * seconds + 600)
    except subprocess.TimeoutExpired:
        return [f"threads battery (models, modes): hung past {4 * seconds + 600:.0f} s"]
    echo(r.stdout.strip().splitlines()[0] if r.stdout.strip() else "threads battery: no output")
    if r.returncode != 0:
        return [f"threads battery (models, modes): exit {r.returncode}: "
                f"{(r.stdout + r.stderr)[-3000:]}"]
    return []


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--examples", type=int, default=int(os.environ.get("FUZZ_EXAMPLES", 400)))
    ap.add_argument("--seed", type=int, default=int(os.environ.get("FUZZ_SEED", 11)))
    ap.add_argument("--entries", default=None)
    ap.add_argument("--batches", type=int, default=3)
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--progress")
    ap.add_argument("--result")
    ap.add_argument("--replay", nargs=2, metavar=("ENTRY", "SEED"))
    args = ap.parse_args(argv)
    if args.worker:
        _worker(args)
        return 0
    if args.replay:
        sys.path[:0] = [str(ROOT / "python"), str(ROOT)]  # as the children have it
        tmp = tempfile.mkdtemp(prefix="mlfuzz-replay-")
        try:
            label, kind, why = run_case(args.replay[0], int(args.replay[1]), tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print(f"{label}: {kind}; {'OK' if why is None else why}")
        return 0 if why is None else 1
    entries = args.entries.split(",") if args.entries else None
    t0 = time.time()
    results, crashes = run(args.examples, args.seed, entries, args.batches,
                           timeout=max(600, 2 * args.examples), echo=print)
    print(report(results))
    bad = failures(results, crashes)
    if not entries:
        bad += memory_check(10 ** 6, echo=print)
        bad += threads_check(THREADS_SECONDS, seed=args.seed, echo=print)
        bad += models_threads_check(THREADS_SECONDS, echo=print)
    for b in bad:
        print("FAIL", b)
    print(f"fuzz: {sum(s.get('cases', 0) for s in results.values())} cases, "
          f"{len(bad)} failures, {time.time() - t0:.1f} s (seed {args.seed})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

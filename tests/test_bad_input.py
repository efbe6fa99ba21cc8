"""Hostile input found by fuzzing (issue 11), one test per finding; each failed
before its fix. The fuzz suite that keeps them fixed is tests/test_fuzz.py.

Findings: 1 checkpoint.save replaced whatever was at the path (a symlink became a
regular file, /dev/null a regular file when run as root); 2 the oracle's fma (in
test_oracle.py / test_gemm_fp32.py); 3 a self-containing list hung the nested-list
reader, deep nesting raised RecursionError, a huge int a bare OverflowError;
4 errors without the mojolearn prefix or of type Exception; 5 copies and
allocations made before a refusal that needs no data.
"""
from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import mojolearn
from mojolearn import checkpoint, linalg, lowbit

ROOT = Path(__file__).resolve().parent.parent
F32 = np.float32


def _refused(exc_type, fn, *words):
    with pytest.raises(exc_type) as ei:
        fn()
    msg = str(ei.value)
    assert type(ei.value) is not Exception
    assert msg.startswith("mojolearn"), msg
    for w in words:
        assert w in msg, (w, msg)
    return msg


W = {"w": np.arange(6, dtype=F32).reshape(2, 3)}
W2 = {"w": np.full((3, 3), 7.0, F32)}


def _tensor(path, name="w"):
    return np.asarray(checkpoint.load(path).weights[name])


# ------------------------------------------------------------ 1: checkpoint.save targets


def test_save_through_a_symlink_replaces_the_target_and_keeps_the_link(tmp_path):
    """A link is followed: its target gets the new checkpoint (atomically), the
    link stays a link (before: the link became a regular file, the target stale)."""
    real = tmp_path / "sub" / "real.safetensors"
    real.parent.mkdir()
    checkpoint.save(real, W)
    link = tmp_path / "link.safetensors"
    link.symlink_to(real)
    checkpoint.save(link, W2)
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert np.array_equal(_tensor(real), W2["w"])
    assert np.array_equal(_tensor(link), W2["w"])
    assert sorted(p.name for p in real.parent.iterdir()) == ["real.safetensors"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.safetensors", "sub"]


def test_save_through_a_dangling_symlink_creates_the_target(tmp_path):
    link = tmp_path / "link.safetensors"
    link.symlink_to("target.safetensors")
    checkpoint.save(link, W)
    assert link.is_symlink() and (tmp_path / "target.safetensors").is_file()
    assert np.array_equal(_tensor(tmp_path / "target.safetensors"), W["w"])


def test_save_refuses_a_symlink_loop(tmp_path):
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    _refused(ValueError, lambda: checkpoint.save(tmp_path / "a", W), "checkpoint.save", "loop")
    assert (tmp_path / "a").is_symlink() and (tmp_path / "b").is_symlink()


def char_device(tmp_path):
    """A character device to save onto that a regression cannot damage: run as
    root, a null device node made in tmp_path (the real /dev/null would be
    replaced by a broken save); otherwise /dev/null itself, which only root
    could replace."""
    if os.geteuid() != 0:
        return "/dev/null" if os.path.exists("/dev/null") else None
    node = tmp_path / "null"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (OSError, AttributeError):
        return None
    return str(node)


def test_save_refuses_a_character_device_and_leaves_it_one(tmp_path):
    """Run as root, the old save turned /dev/null into a regular file. Never
    pointed at the real /dev/null as root (see char_device)."""
    dev = char_device(tmp_path)
    if dev is None:  # pragma: no cover
        pytest.skip("no character device can be made or used here")
    _refused(ValueError, lambda: checkpoint.save(dev, W),
             "checkpoint.save", repr(dev), "character device")
    assert stat.S_ISCHR(os.stat(dev).st_mode)
    link = tmp_path / "to-device"
    link.symlink_to(dev)
    _refused(ValueError, lambda: checkpoint.save(link, W), "checkpoint.save", "character device")
    assert link.is_symlink() and stat.S_ISCHR(os.stat(dev).st_mode)
    _refused(ValueError, lambda: checkpoint.load(dev), "checkpoint.load", "character device")


def test_save_refuses_a_fifo_and_a_symlink_to_one(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    _refused(ValueError, lambda: checkpoint.save(fifo, W), "checkpoint.save", "FIFO")
    link = tmp_path / "link"
    link.symlink_to(fifo)
    _refused(ValueError, lambda: checkpoint.save(link, W), "checkpoint.save", "FIFO")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "pipe"]


def test_load_refuses_a_fifo_instead_of_blocking(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    _refused(ValueError, lambda: checkpoint.load(fifo), "checkpoint.load", "FIFO")


def test_save_failure_at_the_rename_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "w.safetensors"
    checkpoint.save(path, W)
    before = path.read_bytes()

    def fail(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    _refused(OSError, lambda: checkpoint.save(path, W2), "checkpoint.save", repr(str(path)))
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["w.safetensors"]


def test_save_refusal_of_a_tensor_keeps_the_old_file(tmp_path):
    path = tmp_path / "w.safetensors"
    checkpoint.save(path, W)
    before = path.read_bytes()
    l = []
    l.append(l)
    for bad in ({"w": np.ones((2, 2))}, {"w": l}, {"w": [[1.0], [2.0, 3.0]]}):
        with pytest.raises((TypeError, ValueError)):
            checkpoint.save(path, bad)
        assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["w.safetensors"]


# ------------------------------------------------------------ 3: the nested-list reader

_HANG_CHILD = textwrap.dedent("""
    import os, sys, tempfile
    from mojolearn import checkpoint, lowbit
    l = []
    l.append(l)
    deep = [1.0]
    for _ in range(3000):
        deep = [deep]
    d = tempfile.mkdtemp()
    calls = {
        "pack_one": lambda x: lowbit.pack_one(x, "int8"),
        "pack": lambda x: lowbit.pack({"w": x}, "int8"),
        "materialize_one": lambda x: lowbit.materialize_one(x),
        "save": lambda x: checkpoint.save(os.path.join(d, "c.safetensors"), {"w": x}),
    }
    for name, f in calls.items():
        for what, x in (("cycle", l), ("deep", deep), ("cycle-inside", [[1.0, 2.0], l]),
                        ("huge-int", [[10 ** 400]])):
            try:
                f(x)
                print(name, what, "OK", "")
            except BaseException as e:
                print(name, what, type(e).__name__, str(e).replace(chr(10), " "))
""")


def test_nested_list_cycles_depth_and_huge_ints_are_refused():
    """A self-containing list looped forever (memory growing); 3,000 levels raised
    RecursionError; [[10**400]] a bare OverflowError. Run in a child so a
    regression fails on the timeout instead of hanging the suite."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "python"), str(ROOT)]))
    p = subprocess.run([sys.executable, "-c", _HANG_CHILD], env=env, cwd=str(ROOT),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 16, p.stdout
    for line in lines:
        name, what, kind, msg = line.split(" ", 3)
        assert kind in ("ValueError", "TypeError"), line
        assert msg.startswith("mojolearn:"), line
        assert ("weights['w']" if name in ("pack", "save") else "weight") in msg, line


def test_nested_lists_still_read_exactly():
    got = lowbit.materialize_one([[1.5, -2], (3, 0.25)])
    assert got.tolist() == [[1.5, -2.0], [3.0, 0.25]]
    got = lowbit.materialize_one([[[1.0]]] * 2)
    assert got.shape == (2, 1, 1)


# ------------------------------------------------------------ 4: unclear errors


def test_thread_count_is_bounded():
    prev = mojolearn.get_num_threads()
    try:
        for n in (2 ** 63, 2 ** 31, 10 ** 100, 1025):
            _refused(ValueError, lambda: mojolearn.set_num_threads(n), "set_num_threads", "1024")
        assert mojolearn.get_num_threads() == prev
        mojolearn.set_num_threads(1024)
        c = linalg.matmul(np.ones((2, 2), F32), np.ones((2, 2), F32))
        assert np.asarray(c).tolist() == [[2.0, 2.0], [2.0, 2.0]]
    finally:
        mojolearn.set_num_threads(prev)


@pytest.mark.parametrize("path,exc,words", [
    (b"w.safetensors", TypeError, ["path", "bytes", "os.fsdecode"]),
    (None, TypeError, ["path", "NoneType"]),
    (1.5, TypeError, ["path", "float"]),
    ("", ValueError, ["path is empty"]),
    ("a\0b.safetensors", ValueError, ["path", "NUL"]),
])
def test_checkpoint_path_types(path, exc, words, tmp_path):
    _refused(exc, lambda: checkpoint.save(path, W), "checkpoint.save", *words)
    _refused(exc, lambda: checkpoint.load(path), "checkpoint.load", *words)


def test_checkpoint_directories_and_missing_folders(tmp_path):
    _refused(IsADirectoryError, lambda: checkpoint.load(tmp_path), "checkpoint.load",
             "directory", repr(str(tmp_path)))
    _refused(IsADirectoryError, lambda: checkpoint.save(tmp_path, W), "checkpoint.save",
             "directory", repr(str(tmp_path)))
    missing = tmp_path / "no" / "w.safetensors"
    _refused(FileNotFoundError, lambda: checkpoint.save(missing, W), "checkpoint.save",
             "does not exist", "create")
    (tmp_path / "file").write_bytes(b"x")
    _refused(NotADirectoryError, lambda: checkpoint.save(tmp_path / "file" / "w", W),
             "checkpoint.save", "not a directory")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


@pytest.mark.parametrize("func", ["matmul_int8", "matmul_int15"])
@pytest.mark.parametrize("kw", ["transpose_b", "transpose_a", "bias"])
def test_int_gemm_unknown_keywords(func, kw):
    a = np.ones((2, 3), F32)
    _refused(TypeError, lambda: getattr(linalg, func)(a, a, **{kw: True}), func, kw,
             "(a, b, *, out=None)")


# ------------------------------------------------------------ 5: no work before a refusal


def _no_copies(monkeypatch):
    def forbidden(*a, **k):
        raise AssertionError("a copy was made before the refusal")

    import mojolearn._data.validate as V
    monkeypatch.setattr(V, "copy_buf", forbidden)


def test_int8_domain_is_checked_before_any_copy(monkeypatch):
    """k = 2**31 as a broadcast (stride 0) operand: the old code copied 4 GiB
    before rule L-7 refused k."""
    _no_copies(monkeypatch)
    z = np.broadcast_to(np.int8(1), (1, 2 ** 31))
    e = np.zeros(1, np.int32)
    _refused(ValueError, lambda: linalg.matmul_int8((z, e), (z, e)), "matmul_int8",
             "rule L-7", "2147483648")
    zf = np.broadcast_to(F32(1), (1, 2 ** 31))
    _refused(ValueError, lambda: linalg.matmul_int8(zf, zf), "matmul_int8", "rule L-7")
    _refused(ValueError, lambda: linalg.matmul_int15(zf, zf), "matmul_int15", "rule W-4")


def test_other_data_free_refusals_come_before_copies(monkeypatch):
    _no_copies(monkeypatch)
    big = np.broadcast_to(F32(1), (4, 1 << 20))
    bad_out = np.zeros((3, 3), F32)
    _refused(ValueError, lambda: linalg.matmul(big, big, transpose_b=True, out=bad_out),
             "matmul", "out", "shape")
    _refused(ValueError, lambda: linalg.matmul(big, big), "matmul", "inner dimensions")
    codes = np.broadcast_to(np.int8(1), (4, 1 << 20))
    _refused(ValueError, lambda: linalg.dequantize_int8(codes, np.zeros(3, np.int32)),
             "dequantize_int8", "exponents")
    _refused(ValueError, lambda: linalg.dequantize_int15(codes, codes, np.zeros(3, np.int32)),
             "dequantize_int15", "exponents")
    _refused(ValueError, lambda: linalg.matmul_int8((codes, np.zeros(3, np.int32)), big),
             "matmul_int8", "exponents")


def test_failed_input_copy_is_named_as_the_copy():
    huge = np.broadcast_to(F32(1), (1 << 40,))
    msg = _refused(MemoryError, lambda: linalg.to_bf16(huge), "to_bf16", "copy of x")
    assert "result" not in msg


@pytest.mark.parametrize("make,name", [
    (lambda: np.ones((2, 2), np.complex64), "complex64"),
    (lambda: memoryview(np.ones((2, 2), np.complex64)), "complex64"),
    (lambda: memoryview(np.ones((2, 2), np.complex128)), "complex128"),
    (lambda: np.ones((2, 2), ">f4"), "big-endian float32"),
    (lambda: memoryview(np.ones((2, 2), ">f4")), "big-endian float32"),
    (lambda: memoryview(np.ones((2, 2), ">i2")), "big-endian int16"),
])
def test_dtype_names_in_errors(make, name):
    msg = _refused(TypeError, lambda: linalg.matmul(make(), np.ones((2, 2), F32)), "matmul",
                   f"a must be float32, got {name};")
    assert "format" not in msg

"""The implementation of ``mojolearn.checkpoint``: what it computes and promises is
that public module's docstring (python/mojolearn/checkpoint.py), which re-exports
this module's public names."""

from __future__ import annotations

import ctypes
import errno
import json
import struct
import os
import re
import socket
import stat
import tempfile
from typing import NamedTuple

import safetensors

from .._table import checkpoint_rules
from .._data.array import empty
from .._data.buffers import read, to_array
from .layout import LayoutError, parse_layout
from .._ops.lowbit import BF16Weight, Int8Weight, widen_bf16

__all__ = ["save", "load", "Checkpoint", "EXPONENTS_SUFFIX"]

EXPONENTS_SUFFIX = ".int8_exponents"
"""Appended to an int8 tensor's name for its I32 tensor of per-row exponents;
reserved: ``save`` refuses weight names ending in it.
"""

# mojolearn dtype -> (safetensors constructor name, header code)
_ST_DTYPE = {
    "float32": ("float32", "F32"),
    "uint16": ("bfloat16", "BF16"),
    "int8": ("int8", "I8"),
    "int32": ("int32", "I32"),
}
_ITEMSIZE = {"float32": 4, "uint16": 2, "int8": 1, "int32": 4}


class Checkpoint(NamedTuple):
    """What ``load`` returns: the weights dict and the numeric profile name."""

    weights: dict
    numeric_profile: str


# ---------------------------------------------------------------------------
# save
# ---------------------------------------------------------------------------


def _spec(specs: dict, keep: list, key: str, obj, dtype: str, arg: str):
    """Add a TensorSpec for ``obj`` (a ``dtype`` buffer) under ``key``."""
    b = read(obj, func="checkpoint.save", arg=arg, lists=True)
    if not b.c_contiguous or isinstance(obj, (list, tuple)):
        obj = to_array(obj, func="checkpoint.save", arg=arg, lists=True)
        b = read(obj, func="checkpoint.save", arg=arg)
    keep.append(b.keep)
    keep.append(obj)
    specs[key] = safetensors.TensorSpec(
        dtype=_ST_DTYPE[dtype][0],
        shape=[int(d) for d in b.shape],
        data_ptr=int(b.addr) if b.size else 0,
        data_len=b.size * _ITEMSIZE[dtype],
    )


def _specs(weights: dict):
    specs, keep = {}, []
    for name, v in weights.items():
        if not isinstance(name, str):
            raise TypeError(
                f"mojolearn: checkpoint.save: weight names must be str, got "
                f"{type(name).__name__} ({name!r}); name every tensor with a str"
            )
        if name.endswith(EXPONENTS_SUFFIX):
            raise ValueError(
                f"mojolearn: checkpoint.save: weight name {name!r} ends with "
                f"{EXPONENTS_SUFFIX!r}, which is reserved for the exponents of int8 "
                f"weights; rename the tensor"
            )
        arg = f"weights[{name!r}]"
        if isinstance(v, BF16Weight):
            _spec(specs, keep, name, v.bits, "uint16", arg)
        elif isinstance(v, Int8Weight):
            _spec(specs, keep, name, v.codes, "int8", arg)
            _spec(specs, keep, name + EXPONENTS_SUFFIX, v.exponents, "int32", arg)
        else:
            b = read(v, func="checkpoint.save", arg=arg, lists=True)
            if b.dtype != "float32":
                raise TypeError(
                    f"mojolearn: checkpoint.save: {arg} has dtype {b.dtype}; a "
                    f"checkpoint holds float32 tensors, BF16Weight and Int8Weight; "
                    f"wrap bf16 bits in BF16Weight, int8 codes in Int8Weight, or "
                    f"convert the tensor to float32 (mojolearn never casts silently)"
                )
            _spec(specs, keep, name, v, "float32", arg)
    return specs, keep


def _new_file_mode(path: str) -> int:
    """Permission bits for the written file: the old file's, or what a plain
    open() would give (0o666 less the umask)."""
    try:
        return os.stat(path).st_mode & 0o7777
    except OSError:
        pass
    umask = None
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    umask = int(line.split()[1], 8)
                    break
    except (OSError, ValueError):
        pass
    if umask is None:  # pragma: no cover - systems without /proc
        umask = os.umask(0o022)
        os.umask(umask)
    return 0o666 & ~umask


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def _path(path, func: str) -> str:
    """``path`` as a str, or a refusal naming it (before any file is touched)."""
    try:
        p = os.fspath(path)
    except TypeError:
        raise TypeError(
            f"mojolearn: checkpoint.{func}: path must be a str or os.PathLike, got "
            f"{type(path).__name__} ({path!r}); pass the file name as a str"
        ) from None
    if isinstance(p, bytes):
        raise TypeError(
            f"mojolearn: checkpoint.{func}: path must be a str, got bytes ({p!r}); "
            f"decode it first (os.fsdecode(path))"
        )
    if not isinstance(p, str):  # pragma: no cover - os.fspath returns str or bytes
        raise TypeError(f"mojolearn: checkpoint.{func}: path must be a str, got {type(p).__name__}")
    if not p:
        raise ValueError(
            f"mojolearn: checkpoint.{func}: path is empty; pass the checkpoint's file "
            f"name (e.g. 'model.safetensors')"
        )
    if "\0" in p:
        raise ValueError(
            f"mojolearn: checkpoint.{func}: path {p!r} holds a NUL byte, which no file "
            f"name can contain; remove it"
        )
    return p


def _kind(mode: int) -> str | None:
    """A name for a file type that is not a regular file or a directory."""
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):  # pragma: no cover
        return "a special file"
    return None


def _target(path: str) -> str:
    """The file ``save`` replaces: ``path`` itself, or the file a symbolic link
    (chain) names. Refuses directories, special files and link loops."""
    real = path
    if os.path.islink(path):
        try:
            real = os.path.realpath(path, strict=False)
        except OSError as e:  # pragma: no cover - realpath(strict=False) rarely raises
            raise ValueError(f"mojolearn: checkpoint.save: cannot follow the link {path!r} ({e})") from None
        try:
            os.stat(path)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise ValueError(
                    f"mojolearn: checkpoint.save: path {path!r} is a symbolic link loop; "
                    f"point the link at a file or remove it"
                ) from None
            # dangling: create the file the link names (below, its directory is checked)
    try:
        st = os.stat(real)
    except FileNotFoundError:
        st = None
    except NotADirectoryError:
        st = None  # reported below, with the directory
    except OSError as e:
        raise _os_error("save", path, e) from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(
                f"mojolearn: checkpoint.save: path {path!r} is a directory; name a file "
                f"inside it (e.g. {os.path.join(path, 'model.safetensors')!r})",
            )
        kind = _kind(st.st_mode)
        if kind is not None:
            raise ValueError(
                f"mojolearn: checkpoint.save: path {path!r} is {kind}, not a regular "
                f"file; save writes a new file and renames it into place, and never "
                f"writes into or replaces a special file; pass a path to a regular file"
            )
    directory = os.path.dirname(os.path.abspath(real))
    if not os.path.isdir(directory):
        if os.path.exists(directory):
            raise NotADirectoryError(
                f"mojolearn: checkpoint.save: the parent {directory!r} of {path!r} is not "
                f"a directory; choose a path inside a directory",
            )
        raise FileNotFoundError(
            f"mojolearn: checkpoint.save: the directory of {path!r} does not exist; "
            f"create {directory!r} first",
        )
    return real


def _os_error(func: str, path: str, e: OSError) -> OSError:
    """The same kind of OSError, with a message naming the path and a way out."""
    why = e.strerror or str(e)
    way = {
        errno.EACCES: "check the file's and directory's permissions",
        errno.EPERM: "check the file's and directory's permissions",
        errno.ENOSPC: "free disk space",
        errno.EROFS: "choose a writable file system",
        errno.ENAMETOOLONG: "use a shorter path",
        errno.EFBIG: "raise the file-size limit (ulimit -f) or save smaller files",
        errno.EDQUOT: "free space in your disk quota",
    }.get(e.errno, "check the path")
    out = type(e)(
        f"mojolearn: checkpoint.{func}: cannot {'write' if func == 'save' else 'read'} "
        f"{path!r} ({why}); {way}",
    )
    out.errno = e.errno
    return out


def save(path, weights, numeric_profile=None) -> None:
    """Write ``weights`` to the safetensors file ``path``, atomically.

    ``weights``: dict of name -> float32 tensor (any buffer or nested lists),
    BF16Weight or Int8Weight. ``numeric_profile``: the profile the weights were
    computed in; its ``state_field`` goes into the metadata (see the module
    docstring).
    """
    _save(path, weights, numeric_profile, None)


_HOST = socket.gethostname().replace(os.sep, "_") or "host"


def _remove_stale(directory: str, stem: str) -> None:
    """Remove the temporary files earlier saves of this target left when their process
    was killed (kill -9, a power cut before the rename): those named by this host and a
    process id that no longer runs. Files of live processes and of other hosts (a
    shared file system) are left alone."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if not (name.startswith(stem) and name.endswith(".tmp")):
            continue
        parts = name[len(stem):-len(".tmp")].rsplit(".", 2)
        if len(parts) != 3 or parts[0] != _HOST or not parts[1].isdigit():
            continue
        pid = int(parts[1])
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, 0)
            continue  # that process still runs: its save may be under way
        except ProcessLookupError:
            pass
        except OSError:  # no permission to signal it: it exists
            continue
        try:
            os.unlink(os.path.join(directory, name))
        except OSError:
            pass


def _sort_metadata(tmp) -> None:
    """The same file for the same tensors and metadata: safetensors writes the
    metadata's keys in its hash map's order, which changes from call to call; put them
    in sorted order in place (the same keys and values, the same length: the header is
    rewritten over itself, its padding kept)."""
    with open(tmp, "r+b") as f:
        head = f.read(8)
        if len(head) < 8:
            return
        (n,) = struct.unpack("<Q", head)
        raw = f.read(n)
        header = json.loads(raw)
        meta = header.get("__metadata__")
        if not isinstance(meta, dict) or list(meta) == sorted(meta):
            return
        header["__metadata__"] = {k: meta[k] for k in sorted(meta)}
        new = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        if len(new) > n:  # pragma: no cover - the library's JSON is as compact as this
            raise RuntimeError(f"mojolearn: checkpoint.save: the sorted header of {len(new)} "
                               f"bytes does not fit the {n} written")
        f.seek(8)
        f.write(new + b" " * (n - len(new)))


def _save(path, weights, numeric_profile, extra) -> None:
    """save, with ``extra`` (str -> str, or None) added to the file's metadata
    beside the profile's field (mojolearn.models' generation states use it)."""
    path = _path(path, "save")
    target = _target(path)
    if not isinstance(weights, dict):
        raise TypeError(
            f"mojolearn: checkpoint.save: weights must be a dict of name -> tensor, "
            f"got {type(weights).__name__}; pass e.g. {{'w': tensor}}"
        )
    metadata = None
    if numeric_profile is not None:
        metadata = dict(checkpoint_rules.state_field(numeric_profile)) or None
    if extra:
        metadata = dict(metadata or {}, **extra)
    specs, keep = _specs(weights)

    directory = os.path.dirname(os.path.abspath(target))
    mode = _new_file_mode(target)
    stem = "." + os.path.basename(target)[:100] + "."
    _remove_stale(directory, stem)
    try:
        fd, tmp = tempfile.mkstemp(
            prefix=f"{stem}{_HOST}.{os.getpid()}.", suffix=".tmp", dir=directory)
    except OSError as e:
        raise _os_error("save", path, e) from None
    os.close(fd)
    try:
        try:
            safetensors.serialize_file(specs, tmp, metadata=metadata)
        except safetensors.SafetensorError as e:
            code = re.search(r"os error (\d+)", str(e))
            if code:  # the disk filled, a size limit, ...: the system's error, by name
                n = int(code.group(1))
                raise _os_error("save", path, OSError(n, os.strerror(n))) from None
            raise ValueError(
                f"mojolearn: checkpoint.save: safetensors refused to write {path!r} "
                f"({e}); check the tensors' shapes and names"
            ) from e
        except OSError as e:  # e.g. the disk filled part-way
            raise _os_error("save", path, e) from None
        try:
            _sort_metadata(tmp)
            os.chmod(tmp, mode)  # after writing: the library may recreate the file
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            _target(path)  # still a regular file (or nothing) where we rename to
            os.replace(tmp, target)
        except OSError as e:
            if str(e).startswith("mojolearn:"):
                raise
            raise _os_error("save", path, e) from None
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    finally:
        del keep  # the buffers behind the TensorSpec pointers lived until here
    _fsync_dir(directory)


# ---------------------------------------------------------------------------
# load
# ---------------------------------------------------------------------------


def _corrupt(path: str, why: str) -> ValueError:
    return ValueError(
        f"mojolearn: checkpoint.load: {path!r} is not a readable safetensors "
        f"checkpoint ({why}); the file is truncated, corrupt or of another kind; "
        f"restore it from a good copy or save it again"
    )


def _array(dtype: str, t: dict):
    """A mojolearn.Array holding the bytes of one deserialized tensor."""
    data = t["data"]
    out = empty(dtype, tuple(int(d) for d in t["shape"]), func="checkpoint.load")
    if out.nbytes != len(data):  # pragma: no cover - the library checks this
        raise ValueError(
            f"mojolearn: checkpoint.load: tensor of shape {t['shape']} has "
            f"{len(data)} bytes, expected {out.nbytes}; the file is corrupt"
        )
    if out.nbytes:
        src = read(data, func="checkpoint.load", arg="tensor data")
        ctypes.memmove(out.address, src.addr, out.nbytes)
    return out


def _metadata(path: str, data: bytes) -> dict:
    try:
        n = int.from_bytes(data[:8], "little")
        header = json.loads(data[8:8 + n])
        meta = header.get("__metadata__") or {}
    except (ValueError, AttributeError) as e:  # pragma: no cover - validated already
        raise _corrupt(path, f"unreadable header: {e}") from None
    if not isinstance(meta, dict):  # pragma: no cover - validated already
        raise _corrupt(path, "the header's __metadata__ is not a mapping")
    return meta


def load(path, numeric_profile=None) -> Checkpoint:
    """Read a checkpoint written by ``save`` (or any safetensors file of F32,
    BF16 and I8 + I32-exponent tensors). Returns ``Checkpoint(weights,
    numeric_profile)``; see the module docstring."""
    return _load(path, numeric_profile)[0]


def _load(path, numeric_profile=None):
    """load, and the file's metadata (a dict) beside the Checkpoint."""
    path = _path(path, "load")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise FileNotFoundError(
            f"mojolearn: checkpoint.load: no file at {path!r}; check the path "
            f"(checkpoint.save writes one)",
        ) from None
    except OSError as e:
        raise _os_error("load", path, e) from None
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(
            f"mojolearn: checkpoint.load: path {path!r} is a directory, not a "
            f"checkpoint file; name the .safetensors file inside it",
        )
    kind = _kind(st.st_mode)
    if kind is not None:
        raise ValueError(
            f"mojolearn: checkpoint.load: path {path!r} is {kind}, not a regular file; "
            f"load reads checkpoint files only; pass the path of a file save wrote"
        )
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise _os_error("load", path, e) from None
    try:  # the one reader of the format's layout (the model loader's too)
        parse_layout(data, len(data))
    except LayoutError as e:
        raise _corrupt(path, e.why) from None
    try:
        items = safetensors.deserialize(data)
    except MemoryError:
        raise
    except Exception as e:  # the library's refusal of a malformed file
        raise _corrupt(path, str(e)) from None
    state = _metadata(path, data)
    del data

    what = f"checkpoint {path!r}"
    if numeric_profile is None:
        profile = checkpoint_rules.adopt_saved(state, None, what=what, use="inference")
    else:
        profile = checkpoint_rules.check_saved(state, numeric_profile, what)

    tensors = dict(items)
    del items
    weights = {}
    for name in sorted(tensors):
        t = tensors.pop(name, None)
        if t is None:  # an exponents tensor, already taken with its codes
            continue
        dt, shape = t["dtype"], list(t["shape"])
        if dt == "F32":
            weights[name] = _array("float32", t)
        elif dt == "BF16":
            bits = _array("uint16", t)
            weights[name] = BF16Weight(bits) if len(shape) == 2 else widen_bf16(bits)
        elif dt == "I8":
            e = tensors.pop(name + EXPONENTS_SUFFIX, None)
            if len(shape) != 2 or e is None or e["dtype"] != "I32" \
                    or list(e["shape"]) != shape[:1]:
                got = "missing" if e is None else f"{e['dtype']} of shape {e['shape']}"
                raise _corrupt(
                    path,
                    f"int8 tensor {name!r} of shape {shape} needs an I32 tensor "
                    f"{name + EXPONENTS_SUFFIX!r} of shape {shape[:1]}, found {got}",
                )
            weights[name] = Int8Weight(_array("int8", t), _array("int32", e))
        elif dt == "I32" and name.endswith(EXPONENTS_SUFFIX):
            raise _corrupt(
                path,
                f"exponents tensor {name!r} has no I8 codes tensor "
                f"{name[:-len(EXPONENTS_SUFFIX)]!r}",
            )
        else:
            raise ValueError(
                f"mojolearn: checkpoint.load: tensor {name!r} in {path!r} has dtype "
                f"{dt}; a checkpoint holds F32, BF16 and I8 (with I32 exponents) "
                f"tensors only; convert the file's tensors to one of these first"
            )
    return Checkpoint(weights, profile), dict(state)

"""Argument checks of mojolearn.models: token ids, counts, seeds and config numbers.

Token ids are int64 inside the models. What is accepted: Python ints and numpy
integers (in lists, tuples or 1-D numpy rows of them), and arrays of any integer
dtype (widened exactly to int64). What is refused by name, never converted: floats
(a float id is not truncated), bools (``True`` is an int to Python, not a token
id), complex numbers, strings, other objects, and integers that do not fit int64.
Nothing here touches data beyond reading it.
"""
from __future__ import annotations

import math

import numpy as np

INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1

_KIND_HINT = {
    "f": "a float token id is never truncated or rounded; if the values are whole "
         "numbers, convert them yourself (e.g. np.rint(x).astype(np.int64))",
    "b": "a bool is not a token id; pass the ids as ints",
    "c": "a complex number is not a token id",
    "U": "a string is not a token id; encode text with a Tokenizer first",
    "S": "bytes are not token ids; encode text with a Tokenizer first",
    "O": "pass an integer array or a list of ints",
    "V": "pass an integer array or a list of ints",
    "M": "a datetime is not a token id",
    "m": "a timedelta is not a token id",
}


def _what_is(v) -> str:
    r = repr(v)
    return f"{type(v).__name__} {r[:40] + '...' if len(r) > 40 else r}"


def _leaf(v, what: str, where: str) -> int:
    """One id of a list: a Python int or numpy integer that fits int64."""
    if isinstance(v, (bool, np.bool_)):
        raise TypeError(f"mojolearn: {what} holds the bool {v!r} at {where}; a bool is not a "
                        f"token id (True is an int to Python, but mojolearn does not read it "
                        f"as 1): pass ints")
    if not isinstance(v, (int, np.integer)):
        hint = "a float token id is never truncated or rounded" \
            if isinstance(v, (float, np.floating)) else "token ids are ints"
        raise TypeError(f"mojolearn: {what} must hold ints, got {_what_is(v)} at {where}; "
                        f"{hint}")
    iv = int(v)
    if not INT64_MIN <= iv <= INT64_MAX:
        raise ValueError(f"mojolearn: {what} holds {iv} at {where}, which does not fit int64 "
                         f"(the token id type); it is never wrapped: pass ids inside the "
                         f"vocabulary")
    return iv


def _row(r, what: str, where: str) -> list:
    if isinstance(r, np.ndarray):
        if r.ndim != 1:
            raise ValueError(f"mojolearn: {what}: row {where} is a {r.ndim}-D array of shape "
                             f"{r.shape}; each row of a list of ids is 1-D")
        _check_dtype(r, what, f"row {where}")
        r = r.tolist()
    return [_leaf(v, what, f"{where}[{j}]") for j, v in enumerate(r)]


def _from_list(ids, what: str):
    """(int64 array, ndim) of a list/tuple of ints or of rows of ints."""
    seqs = [isinstance(r, (list, tuple, np.ndarray)) for r in ids]
    if ids and all(seqs):
        rows = [_row(r, what, f"[{i}]") for i, r in enumerate(ids)]
        lens = {len(r) for r in rows}
        if len(lens) > 1:
            raise ValueError(f"mojolearn: {what} is not a rectangle of ints: its rows have "
                             f"lengths {sorted(lens)[:8]}; pad or split the batch so every "
                             f"row has the same length")
        return np.array(rows, dtype=np.int64).reshape(len(rows), lens.pop()), 2
    if any(seqs):
        i = seqs.index(True)
        raise ValueError(f"mojolearn: {what} mixes ids and rows (item [{i}] is a "
                         f"{type(ids[i]).__name__}, item [{seqs.index(False)}] is not): it is "
                         f"not a rectangle of ints; pass a list of ints or a list of rows")
    return np.array(_row(ids, what, ""), dtype=np.int64), 1


def _check_dtype(a, what: str, part: str = ""):
    if a.dtype.kind not in "iu":
        kind = a.dtype.kind
        raise TypeError(f"mojolearn: {what}{' ' + part if part else ''} must be an integer "
                        f"array (any int or uint dtype), got dtype {a.dtype}; token ids are "
                        f"never cast: {_KIND_HINT.get(kind, 'pass ints')}")


def token_ids(ids, what: str, vocab: int, *, want_ndim: bool = False):
    """ids as a C-contiguous int64 (batch, length) array: a 1-D input is one sequence.
    Refuses every non-integer input, integers past int64 and ids outside [0, vocab)."""
    if isinstance(ids, (list, tuple)):
        a, ndim = _from_list(ids, what)
    else:
        if isinstance(ids, (bool, np.bool_, int, np.integer, float, np.floating, complex, str,
                            bytes)) or ids is None:
            raise TypeError(f"mojolearn: {what} must be a sequence of token ids (a list of "
                            f"ints, a list of rows or an integer array), got {_what_is(ids)}; "
                            f"wrap a single id in a list: [[id]]")
        try:
            a = np.asarray(ids)
        except Exception as e:  # an object numpy cannot read as an array
            raise TypeError(f"mojolearn: {what} must be an integer array or a list of ints, "
                            f"got {type(ids).__name__}, which numpy cannot read ({e})") from e
        _check_dtype(a, what)
        ndim = a.ndim
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2:
        raise ValueError(f"mojolearn: {what} must be 1-D (length,) or 2-D (batch, length), "
                         f"got shape {a.shape}")
    if a.size:
        lo, hi = int(a.min()), int(a.max())
        if hi > INT64_MAX:
            raise ValueError(f"mojolearn: {what} holds {hi} (dtype {a.dtype}), which does not "
                             f"fit int64 (the token id type); it is never wrapped: pass ids "
                             f"inside the vocabulary")
        if lo < 0 or hi >= vocab:
            bad = lo if lo < 0 else hi
            raise ValueError(f"mojolearn: {what} holds token id {bad}, outside the "
                             f"vocabulary [0, {vocab})")
    a = np.ascontiguousarray(a, dtype=np.int64)  # an exact widening: every value fits
    return (a, ndim) if want_ndim else a


def count(v, what: str, minimum: int = 1) -> int:
    """A Python int or numpy integer >= minimum (never a bool, a float or a str)."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"mojolearn: {what} must be an int, got {_what_is(v)}")
    if v < minimum:
        raise ValueError(f"mojolearn: {what} must be an int >= {minimum}, got {int(v)}")
    return int(v)


def state_size(batch_size, max_tokens, max_positions: int, where: str) -> tuple:
    """(batch_size, max_tokens) of a new KV cache, checked: ints >= 1, max_tokens at
    most the model's max_positions. where: the caller's name, e.g. CausalLM.allocate_state."""
    batch_size = count(batch_size, f"{where}: batch_size")
    max_tokens = count(max_tokens, f"{where}: max_tokens")
    if max_tokens > max_positions:
        raise ValueError(f"mojolearn: {where}: max_tokens {max_tokens} is past "
                         f"max_positions {max_positions}")
    return batch_size, max_tokens


def positive_number(v, what: str) -> float:
    """A finite number > 0 (an int or float, never a bool or a str)."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise TypeError(f"mojolearn: {what} must be a positive finite number, got {_what_is(v)}")
    try:
        f = float(v)
    except OverflowError:
        f = math.inf
    if not math.isfinite(f) or f <= 0:
        raise ValueError(f"mojolearn: {what} must be a positive finite number, got {v!r}")
    check_f32_normal(f, what)
    return f


FLT_MIN, FLT_MAX = 2.0 ** -126, float.fromhex("0x1.fffffep127")


def check_f32_normal(f: float, what: str) -> None:
    """A config value the kernels read as float32 (eps, RoPE base): its float32 must be a
    normal number. Past FLT_MAX it has no float32; below FLT_MIN it is subnormal, which
    every kernel reads flushed to zero (a RoPE base of 1e-45 would give NaN logits)."""
    if f > FLT_MAX or np.float32(f) > FLT_MAX:
        raise ValueError(f"mojolearn: {what} = {f!r} is past float32's largest value "
                         f"{FLT_MAX!r}; the kernels read it as float32")
    if np.float32(f) < FLT_MIN:
        raise ValueError(f"mojolearn: {what} = {f!r} is below float32's smallest normal value "
                         f"{FLT_MIN!r}; the kernels read it as float32, flushed to zero")


def flag(v, what: str) -> bool:
    if not isinstance(v, bool):
        raise TypeError(f"mojolearn: {what} must be True or False, got {_what_is(v)}")
    return v

__all__ = ["token_ids", "count", "positive_number", "flag", "INT64_MAX"]

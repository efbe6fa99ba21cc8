"""Issue 43 item 7: one reader of the safetensors layout (mojolearn/_io/layout.py) for
checkpoint.load and the model loader. The model loader accepted files that
checkpoint.load refused: a header length 1-7 bytes short (every tensor read shifted,
logits off by up to 3.7), aliased or overlapping offsets, holes, trailing bytes. Now
both refuse each by name: the tensors must tile the data section exactly."""
import json
import os
import struct

import numpy as np
import pytest

from mojolearn import checkpoint
from mojolearn.models import CausalLM
from test_models import TINY, tiny_weights, write_model


def _write(path, entries, data, pad=0, short=0, extra=b""):
    """A safetensors file by hand: entries name -> (dtype, shape, [lo, hi]); the header
    padded with `pad` spaces, its stated length `short` bytes less than written."""
    head = json.dumps({k: {"dtype": d, "shape": s, "data_offsets": o}
                       for k, (d, s, o) in entries.items()}, separators=(",", ":")).encode()
    head += b" " * pad
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head) - short) + head + data + extra)
    return path


def _tiled(names, arrays):
    ent, at, data = {}, 0, b""
    for n, a in zip(names, arrays):
        b = a.tobytes()
        ent[n] = ("F32", list(a.shape), [at, at + len(b)])
        at += len(b)
        data += b
    return ent, data


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    cfg = dict(TINY)
    w = tiny_weights(cfg, seed=31)
    return write_model(tmp_path_factory.mktemp("m"), cfg, w), cfg, w


def _cases(w):
    names = sorted(w)
    arrays = [np.ascontiguousarray(w[n]) for n in names]
    ent, data = _tiled(names, arrays)
    b = names[1]
    out = {}
    for k in range(1, 8):  # header length k bytes short (the padding absorbs it)
        out[f"header {k} short"] = (dict(ent), data, dict(pad=8, short=k), "trailing bytes")
    over = dict(ent)
    lo, hi = ent[b][2]
    over[b] = (ent[b][0], ent[b][1], [lo - 4, hi - 4])
    out["overlap"] = (over, data, {}, "overlaps")
    hole = {n: (d, s, [o[0] + 8, o[1] + 8]) for n, (d, s, o) in ent.items()}
    out["hole"] = (hole, b"\0" * 8 + data, {}, "belong to no tensor")
    out["trailing"] = (dict(ent), data, dict(extra=b"\0" * 4), "trailing bytes")
    return out


CASES = ["header 1 short", "header 4 short", "header 7 short", "overlap", "hole", "trailing"]


@pytest.mark.parametrize("case", CASES)
def test_model_loader_and_checkpoint_refuse_the_same_malformed_files(model, tmp_path, case):
    path, cfg, w = model
    ent, data, kw, why = _cases(w)[case]
    d = tmp_path / "bad"
    os.makedirs(d)
    with open(d / "config.json", "w") as f:
        json.dump(cfg, f)
    _write(d / "model.safetensors", ent, data, **kw)
    with pytest.raises(ValueError, match=f"truncated or corrupt.*({why})"):
        CausalLM.load(d)
    with pytest.raises(ValueError, match=f"not a readable safetensors.*({why})"):
        checkpoint.load(d / "model.safetensors")


def test_aliased_tensors_are_refused(tmp_path):
    """Two names on the same bytes: refused by both readers."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    ent = {"a": ("F32", [2, 3], [0, 24]), "b": ("F32", [2, 3], [0, 24])}
    p = _write(tmp_path / "t.safetensors", ent, x.tobytes())
    with pytest.raises(ValueError, match="overlaps"):
        checkpoint.load(p)
    from mojolearn.models._load.loader import read_safetensors

    with pytest.raises(ValueError, match="overlaps"):
        read_safetensors(p)


def test_a_well_formed_padded_file_still_loads(model, tmp_path):
    """The same tensors, tiled, with a padded header: loaded, the same values."""
    path, cfg, w = model
    names = sorted(w)
    ent, data = _tiled(names, [np.ascontiguousarray(w[n]) for n in names])
    d = tmp_path / "ok"
    os.makedirs(d)
    with open(d / "config.json", "w") as f:
        json.dump(cfg, f)
    _write(d / "model.safetensors", ent, data, pad=5)
    ids = np.array([[1, 2, 3]])
    a = CausalLM.load(d).forward(ids)
    b = CausalLM.load(path).forward(ids)
    assert a.tobytes() == b.tobytes()
    got = checkpoint.load(d / "model.safetensors").weights
    assert all(np.asarray(got[n]).tobytes() == w[n].tobytes() for n in names)

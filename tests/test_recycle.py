"""The recycler of large output arrays (mojolearn._data.recycle): an array is handed out
again only once nothing outside the recycler refers to it."""
from __future__ import annotations

import numpy as np
import pytest

from mojolearn._data.recycle import Recycler

SHAPE = (64, 1000)  # 256000 bytes of float32


def addr(a):
    return a.__array_interface__["data"][0]


def test_reused_once_let_go():
    r = Recycler(keep=2, min_bytes=1)
    a = r.empty(SHAPE)
    assert a.shape == SHAPE and a.dtype == np.float32 and a.flags.c_contiguous and a.flags.writeable
    where = addr(a)
    del a
    b = r.empty(SHAPE)
    assert addr(b) == where
    assert r.kept_bytes() == 4 * SHAPE[0] * SHAPE[1]


def _holders():
    """Ways a caller keeps an array's memory alive without the array's own name."""
    out = {
        "the array": lambda a: a,
        "a row view": lambda a: a[3],
        "a reshaped view": lambda a: a.reshape(-1),
        "a dtype view": lambda a: a.view(np.int32),
        "a memoryview": lambda a: memoryview(a),
        "np.asarray": lambda a: np.asarray(a),
    }
    try:
        import torch

        out["torch.from_numpy"] = lambda a: torch.from_numpy(a)
    except ImportError:
        pass
    return out


@pytest.mark.parametrize("how", list(_holders()))
def test_held_memory_is_never_handed_out(how):
    r = Recycler(keep=2, min_bytes=1)
    a = r.empty(SHAPE)
    a[...] = 7.0
    held = _holders()[how](a)
    where = addr(a)
    del a
    for _ in range(4):  # every kept slot asked for again
        b = r.empty(SHAPE)
        assert addr(b) != where, f"memory held through {how} was handed out again"
        b[...] = -1.0
    # and what the holder sees is still what was written (7.0 is 0x40E00000)
    assert np.all(np.asarray(held).view(np.uint32) == 0x40E00000)


def test_keep_bounds_what_is_kept_and_clear_lets_go():
    r = Recycler(keep=2, min_bytes=1)
    arrays = [r.empty(SHAPE) for _ in range(5)]  # all held: five different arrays
    assert len({addr(a) for a in arrays}) == 5
    assert r.kept_bytes() == 2 * arrays[0].nbytes
    del arrays
    r.clear()
    assert r.kept_bytes() == 0


def test_small_requests_and_other_sizes_get_new_memory():
    r = Recycler(keep=2, min_bytes=1 << 20)
    a = r.empty(SHAPE)  # under min_bytes: a plain np.empty, not kept
    assert r.kept_bytes() == 0
    del a
    r2 = Recycler(keep=2, min_bytes=1)
    a = r2.empty(SHAPE)
    where = addr(a)
    del a
    b = r2.empty((SHAPE[0], SHAPE[1] - 1))  # another byte size: never the kept one
    assert addr(b) != where
    c = r2.empty((SHAPE[1], SHAPE[0]))  # the same byte size, another shape: reused
    assert addr(c) == where and c.shape == (SHAPE[1], SHAPE[0])


def test_a_copy_or_pickle_keeps_nothing():
    import copy
    import pickle

    r = Recycler(keep=3, min_bytes=1)
    a = r.empty(SHAPE)
    for twin in (copy.deepcopy(r), pickle.loads(pickle.dumps(r))):
        assert (twin.keep, twin.min_bytes, twin.kept_bytes()) == (3, 1, 0)
        assert addr(twin.empty(SHAPE)) != addr(a)
    assert r.kept_bytes() == a.nbytes


def test_keep_zero_keeps_nothing():
    r = Recycler(keep=0, min_bytes=1)
    a = r.empty(SHAPE)
    del a
    assert r.kept_bytes() == 0


def test_bad_arguments_refused():
    with pytest.raises(ValueError, match="mojolearn: Recycler"):
        Recycler(keep=-1)
    with pytest.raises(ValueError, match="mojolearn: Recycler"):
        Recycler(min_bytes=0)


# ------------------------------------------------------------------ in the models
@pytest.mark.parametrize("profile", ["fp32_v1", "fixed15_v1"])
def test_causal_lm_never_writes_logits_a_caller_holds(tmp_path, profile):
    """CausalLM's large logits go into kept memory: logits a caller holds, or holds a
    view of, keep their bits through later forwards; logits let go are written again
    in place, with the bits of a fresh model's forward. The threshold is lowered so the
    tiny model's logits count as large."""
    from bits import assert_same_bits
    from test_models import TINY, ids_for, tiny_weights, write_model

    from mojolearn.models import CausalLM

    cfg = dict(TINY)
    path = write_model(tmp_path / "m", cfg, tiny_weights(cfg))
    lm = CausalLM.load(path, numeric_profile=profile)
    lm._logits = Recycler(min_bytes=1)
    ids, other = ids_for(cfg, 2, 7, seed=5), ids_for(cfg, 2, 7, seed=6)
    fresh = CausalLM.load(path, numeric_profile=profile)
    ref, ref_other = fresh.forward(ids), fresh.forward(other)
    first = lm.forward(ids)
    a = addr(first)
    last_row = first[:, -1]  # a view: the whole array stays held
    del first
    second = lm.forward(other)
    b = addr(second)
    assert b != a
    del second  # let go: written again by the next call
    third = lm.forward(other)
    assert addr(third) == b
    assert_same_bits(third, ref_other)
    assert_same_bits(last_row, ref[:, -1])  # held through the view: untouched
    assert lm.kept_bytes() == 2 * ref.nbytes
    del last_row  # the first array let go: its memory takes the next logits
    fourth = lm.forward(other)
    assert addr(fourth) == a
    assert_same_bits(fourth, ref_other)
    assert_same_bits(third, ref_other)
    lm.release_buffers()
    assert lm.kept_bytes() == 0


@pytest.mark.parametrize("fam", ["m1", "m2"])
def test_mamba_never_writes_logits_a_caller_holds(tmp_path, fam):
    """A Mamba model's large logits go into kept memory as CausalLM's do: never into
    logits a caller holds, and let-go logits are written again in place with the
    oracle's bits (threshold lowered for the tiny model)."""
    import mamba_oracle as SO
    from bits import assert_same_bits
    from test_models_mamba import M1, M2, _write

    from mojolearn.models import CausalLM

    cfg = {"m1": M1, "m2": M2}[fam]
    path, w = _write(tmp_path, cfg, 70)
    lm = CausalLM.load(path)
    lm._logits = Recycler(min_bytes=1)
    rng = np.random.default_rng(21)
    ids, other = (rng.integers(0, cfg["vocab_size"], size=(2, 5)) for _ in range(2))
    want, _ = SO.forward(w, cfg, ids)
    want_other, _ = SO.forward(w, cfg, other)
    held = lm.forward(ids)
    let_go = lm.forward(other)
    b = addr(let_go)
    assert b != addr(held)
    del let_go
    again = lm.forward(other)
    assert addr(again) == b
    assert_same_bits(np.asarray(again), np.asarray(want_other))
    assert_same_bits(np.asarray(held), np.asarray(want))

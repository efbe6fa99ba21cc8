"""Issue 33: what mojolearn.models accepts, what it refuses by name, and that nothing it
accepts is converted behind the caller's back. Token ids are ints (Python ints, numpy
integers, integer arrays); floats, bools, complex numbers, strings, objects and ints
past int64 are refused for forward, step, generate, generate_text's tokenizer output
and Tokenizer.decode. A refused call leaves the model and its state as they were (the
next valid call gives a fresh model's bits); save_state replaces a file atomically."""
import json
import os

import numpy as np
import pytest

from bits import assert_same_bits
from mojolearn.models import CausalLM, GenerationState, ModelConfig, Tokenizer, TransformerBlock
from test_models import TINY, tiny_weights, write_model

V = TINY["vocab_size"]  # 61


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    return write_model(tmp_path_factory.mktemp("m"), dict(TINY), tiny_weights(TINY))


@pytest.fixture(scope="module")
def lm(path):
    return CausalLM.load(path)


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    from tokenizers import Tokenizer as T, models, pre_tokenizers

    tk = T(models.WordLevel({f"w{i}": i for i in range(V)}, unk_token="w0"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    p = str(tmp_path_factory.mktemp("tok") / "tokenizer.json")
    tk.save(p)
    return Tokenizer.load(p)


IDS = np.array([[1, 2, 3]], np.int64)

# (ids, exception, a part of the message naming what was passed)
BAD_IDS = [
    ([[1.9]], TypeError, "got float 1.9 at [0][0]"),  # the case: was token 1
    ([[1, 2.0]], TypeError, "float 2.0 at [0][1]"),
    ([np.float64(1.5)], TypeError, "float64"),
    ([[1, np.float32(3.0)]], TypeError, "float32"),
    ([[True]], TypeError, "the bool True"),
    ([[1, True]], TypeError, "the bool True at [0][1]"),  # numpy would make it 1
    ([np.bool_(False), 1], TypeError, "bool"),
    ([["1"]], TypeError, "str '1'"),  # numpy would parse it
    ([[None]], TypeError, "NoneType"),
    ([[1 + 0j]], TypeError, "complex"),
    ([[2 ** 70]], ValueError, str(2 ** 70)),
    ([[-(2 ** 63) - 1]], ValueError, "does not fit int64"),
    (np.array([[2 ** 64 - 1]], np.uint64), ValueError, "18446744073709551615"),
    (np.array([[np.iinfo(np.int64).min]]), ValueError, str(np.iinfo(np.int64).min)),
    (np.array([[1.0, 2.0]], np.float32), TypeError, "dtype float32"),
    (np.array([[1, 2]], np.float16), TypeError, "dtype float16"),
    (np.array([[1, 0]], bool), TypeError, "dtype bool"),
    (np.array([[1, 2]], np.complex64), TypeError, "dtype complex64"),
    (np.array([["1", "2"]]), TypeError, "dtype <U1"),
    (np.array([[1, 2]], object), TypeError, "dtype object"),
    ([np.array([1.0, 2.0])], TypeError, "row [0]"),
    ([[1, 2], 3], ValueError, "rectangle"),
    (3, TypeError, "got int 3"),
    (np.int64(3), TypeError, "int64"),
    (None, TypeError, "NoneType"),
    ("1 2", TypeError, "str"),
    (np.array(3), ValueError, "shape ()"),
    ({"a": 1}, TypeError, "dtype object"),
]


@pytest.mark.parametrize("ids,exc,match", BAD_IDS, ids=[str(i) for i in range(len(BAD_IDS))])
def test_forward_refuses_non_integer_ids_by_name(lm, ids, exc, match):
    with pytest.raises(exc) as ei:
        lm.forward(ids)
    msg = str(ei.value)
    assert msg.startswith("mojolearn: CausalLM.forward: ids"), msg
    assert match in msg, msg


@pytest.mark.parametrize("entry", ["step", "generate", "generate_text", "decode"])
def test_every_ids_entry_refuses_float_and_bool_ids(lm, tok, entry):
    """The same rules reach step, generate, the ids a tokenizer returns and decode."""
    class Enc:
        def __init__(self, out):
            self.out = out

        def encode(self, text):
            return self.out

        def decode(self, ids):
            return ""

    for bad, exc, part in (([1.9, 2], TypeError, "float 1.9"), ([True, 2], TypeError, "bool True"),
                           ([2 ** 70], ValueError, str(2 ** 70)), ([V], ValueError, "vocabulary")):
        call = {"step": lambda: lm.step([bad], lm.allocate_state(1, 4)),
                "generate": lambda: lm.generate([bad], 1),
                "generate_text": lambda: lm.generate_text("x", 1, tokenizer=Enc(bad)),
                "decode": lambda: tok.decode(bad)}[entry]
        with pytest.raises(exc, match=r"^mojolearn: .*") as ei:
            call()
        assert part in str(ei.value), str(ei.value)
        name = {"step": "CausalLM.step", "generate": "CausalLM.generate",
                "generate_text": "tokenizer.encode returned", "decode": "Tokenizer.decode"}[entry]
        assert name in str(ei.value), str(ei.value)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                                   np.uint32, np.uint64, ">i8", "<u2"])
def test_every_integer_dtype_is_widened_exactly(lm, dtype):
    ids = np.array([[0, 5, 60], [59, 1, 2]], np.int64)
    assert_same_bits(lm.forward(ids.astype(dtype)), lm.forward(ids))


def test_lists_tuples_rows_and_numpy_ints_are_ints(lm):
    ids = np.array([[0, 5, 60], [59, 1, 2]], np.int64)
    want = lm.forward(ids)
    for form in (ids.tolist(), tuple(map(tuple, ids.tolist())), [r.astype(np.int16) for r in ids],
                 [[np.int64(v) for v in r] for r in ids.tolist()], np.asfortranarray(ids),
                 memoryview(ids)):
        assert_same_bits(lm.forward(form), want)
    assert_same_bits(lm.forward([0, 5, 60]), lm.forward(ids[:1]))


def test_generate_zero_new_tokens_returns_the_prompt(lm):
    """Before: a prompt of 2+ tokens with max_new_tokens=0 overflowed its own state."""
    ids = np.array([[4, 5, 6, 7]], np.int64)
    out = lm.generate(ids, 0)
    assert out.dtype == np.int64 and np.array_equal(out, ids) and out is not ids


@pytest.mark.parametrize("kw,exc,part", [
    ({"max_new_tokens": -1}, ValueError, "max_new_tokens must be an int >= 0, got -1"),
    ({"max_new_tokens": 2.0}, TypeError, "max_new_tokens must be an int, got float"),
    ({"max_new_tokens": True}, TypeError, "max_new_tokens must be an int, got bool"),
    ({"eos_token_id": V}, ValueError, f"eos_token_id {V} is outside the vocabulary"),
    ({"eos_token_id": -1}, ValueError, "eos_token_id must be an int >= 0, got -1"),
    ({"eos_token_id": 1.0}, TypeError, "eos_token_id must be an int, got float"),
    ({"eos_token_id": True}, TypeError, "eos_token_id must be an int, got bool"),
    ({"greedy": 1}, TypeError, "greedy must be True or False, got int"),
    ({"seed": 3}, ValueError, "seed=3 with greedy=True"),
    ({"greedy": False, "seed": -1}, ValueError, "seed must be an int >= 0, got -1"),
    ({"greedy": False, "seed": 1.5}, TypeError, "seed must be an int, got float"),
    ({"greedy": False, "seed": True}, TypeError, "seed must be an int, got bool"),
])
def test_generation_arguments_refused_by_name(lm, kw, exc, part):
    kw = dict(kw)
    n = kw.pop("max_new_tokens", 2)
    with pytest.raises(exc) as ei:
        lm.generate(IDS, n, **kw)
    assert str(ei.value).startswith("mojolearn: CausalLM.generate: ") and part in str(ei.value)


def test_generate_accepts_numpy_int_seed_and_eos(lm):
    a = lm.generate(IDS, 3, greedy=False, seed=np.int64(5), eos_token_id=np.int32(2))
    b = lm.generate(IDS, 3, greedy=False, seed=5, eos_token_id=2)
    assert np.array_equal(a, b)


def test_generate_text_checks_its_arguments(lm, tok):
    assert isinstance(lm.generate_text("w1 w2", 2, tokenizer=tok), str)
    with pytest.raises(TypeError, match="tokenizer must have encode and decode"):
        lm.generate_text("w1", 1, tokenizer=object())
    with pytest.raises(ValueError, match="encodes to no token"):
        lm.generate_text("", 1, tokenizer=tok)
    with pytest.raises(ValueError, match="seed=1 with greedy=True"):
        lm.generate_text("w1", 1, tokenizer=tok, seed=1)

    class TwoD:
        def encode(self, text):
            return [[1, 2]]

        def decode(self, ids):
            return ""
    with pytest.raises(ValueError, match=r"one sequence \(1-D\), got shape \(1, 2\)"):
        lm.generate_text("w1", 1, tokenizer=TwoD())


def test_tokenizer_checks(tok):
    assert tok.decode(np.array([1, 2], np.uint8)) == tok.decode([1, 2])
    with pytest.raises(TypeError, match="Tokenizer.check_model: model must be a CausalLM"):
        tok.check_model("lm")
    with pytest.raises(TypeError, match="Tokenizer.load: path must be"):
        Tokenizer.load(3)


# ---------------------------------------------------------------- states


def _fresh_continuation(path, prefix, nxt, tmax):
    ref = CausalLM.load(path)
    st = ref.allocate_state(prefix.shape[0], tmax)
    ref.forward(prefix, st)
    return ref.step(nxt, st)


def test_refused_calls_leave_the_model_and_state_unchanged(path, lm):
    """After a run of refusals (bad ids, overflow, other batch, bad state fields), the
    state's next valid step gives a fresh model's fresh state's bits."""
    prefix = np.array([[3, 4, 5], [6, 7, 8]], np.int64)
    st = lm.allocate_state(2, 6)
    lm.forward(prefix, st)
    for bad in ([[1.9], [2]], [[V], [0]], np.zeros((2, 4), np.int64), np.zeros((3, 1), np.int64)):
        with pytest.raises((TypeError, ValueError), match="^mojolearn: "):
            lm.step(bad, st)
    assert st.length == 3
    nxt = np.array([[9], [10]], np.int64)
    assert_same_bits(lm.step(nxt, st), _fresh_continuation(path, prefix, nxt, 6))


@pytest.mark.parametrize("field,value", [
    ("length", -3), ("length", 2.5), ("length", True), ("length", 7), ("batch_size", 3),
    ("max_tokens", 9), ("kt", "float64"), ("v", "fortran"), ("kt", "readonly")])
def test_a_state_changed_from_outside_is_refused(lm, field, value):
    """Before: length -3 reached the kernels (positions -3..), and 2.5 raised numpy's
    TypeError."""
    st = lm.allocate_state(2, 6)
    lm.forward(np.array([[3, 4], [5, 6]]), st)
    if value == "float64":
        value = st.kt.astype(np.float64)
    elif value == "fortran":
        value = np.asfortranarray(st.v)
    elif value == "readonly":
        value = st.kt.copy()
        value.setflags(write=False)
    setattr(st, field, value)
    with pytest.raises(ValueError, match="state was changed from outside"):
        lm.step(np.array([[1], [2]]), st)


def test_state_of_another_weight_format_or_profile(path, lm):
    other = CausalLM.load(path, weight_format="int8")
    with pytest.raises(ValueError, match=r"another weight_format \(int8\)"):
        lm.step([[1]], other.allocate_state(1, 2))
    f15 = CausalLM.load(path, numeric_profile="fixed15_v1")
    with pytest.raises(ValueError, match=r"another numeric profile \(fixed15_v1\)"):
        lm.step([[1]], f15.allocate_state(1, 2))


def test_allocate_state_and_generation_state_check_their_counts(lm):
    with pytest.raises(TypeError, match="batch_size must be an int, got float"):
        lm.allocate_state(1.0, 2)
    with pytest.raises(ValueError, match="max_tokens must be an int >= 1, got 0"):
        lm.allocate_state(1, 0)
    with pytest.raises(ValueError, match="max_tokens 65 is past max_positions 64"):
        lm.allocate_state(1, 65)
    with pytest.raises(ValueError, match="GenerationState: batch must be an int >= 1"):
        GenerationState("k", "fp32_v1", -1, 2, 1, 1, 2)
    assert lm.allocate_state(np.int64(2), 3).kt.shape[1] == 2
    with pytest.raises(MemoryError, match="mojolearn: CausalLM.allocate_state: a state of "
                                          "batch_size 1000000000000 .* needs"):
        lm.allocate_state(10 ** 12, 4)


def test_save_state_refuses_a_non_state_by_name(lm, tmp_path):
    """Before: AttributeError ('NoneType' object has no attribute 'batch_size')."""
    with pytest.raises(TypeError, match="CausalLM.save_state: state must come from"):
        lm.save_state(tmp_path / "s.safetensors", None)
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize("error", ["safetensors", "disk full"])
def test_save_state_is_atomic(lm, tmp_path, monkeypatch, error):
    """A writer that fails after writing part of the file leaves the old state file
    byte for byte, and no temporary file behind."""
    import safetensors

    f = tmp_path / "s.safetensors"
    st = lm.allocate_state(1, 4)
    lm.forward(IDS, st)
    lm.save_state(f, st)
    old = f.read_bytes()
    lm.forward([[7]], st)
    real = safetensors.serialize_file

    def half(specs, out, metadata=None):
        real(specs, out, metadata=metadata)
        data = open(out, "rb").read()
        with open(out, "wb") as fh:
            fh.write(data[: len(data) // 2])
        if error == "safetensors":
            raise safetensors.SafetensorError("writer stopped")
        import errno

        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(safetensors, "serialize_file", half)
    with pytest.raises((ValueError, OSError), match="^mojolearn: checkpoint.save"):
        lm.save_state(f, st)
    assert f.read_bytes() == old
    assert os.listdir(tmp_path) == ["s.safetensors"]
    monkeypatch.setattr(safetensors, "serialize_file", real)
    assert lm.resume(f).length == 3


def _edited_state_file(lm, st, f, tensors=None, info=None):
    from mojolearn._io import checkpoint as _ckpt
    from mojolearn.models._transformer import causal_lm as C

    c = lm.config
    meta = np.array([st.length, st.batch_size, st.max_tokens, c.num_hidden_layers,
                     c.num_key_value_heads, c.head_dim, c.hidden_size, c.vocab_size], np.float32)
    ts = {"state.kt": st.kt, "state.v": st.v, "state.meta": meta}
    ts.update(tensors or {})
    md = {C.STATE_KIND_KEY: C.STATE_KIND, C.STATE_MODEL_KEY: c.fingerprint(),
          C.STATE_FORMAT_KEY: lm.weight_format, C.STATE_MODE_KEY: "identical"}
    md.update(info or {})
    _ckpt._save(f, ts, lm.numeric_profile, md)


def test_resume_refuses_edited_and_foreign_files(path, lm, tmp_path):
    from mojolearn import checkpoint

    st = lm.allocate_state(1, 4)
    lm.forward(IDS, st)
    f = str(tmp_path / "s.safetensors")
    c = lm.config
    good = [3, 1, 4, c.num_hidden_layers, c.num_key_value_heads, c.head_dim, c.hidden_size, V]
    cases = [
        ({"state.meta": np.array([-1] + good[1:], np.float32)}, None, "state.meta"),
        ({"state.meta": np.array([2.5] + good[1:], np.float32)}, None, "state.meta"),
        ({"state.meta": np.array([np.nan] + good[1:], np.float32)}, None, "state.meta"),
        ({"state.meta": np.array([5] + good[1:], np.float32)}, None, "the state says length 5"),
        ({"state.v": np.zeros(3, np.float32)}, None, "tensor 'state.v' has shape (3,)"),
        ({"state.extra": np.zeros(1, np.float32)}, None, "'state.extra'"),
        (None, {"mojolearn.weight_format": "int8"}, "weight_format 'int8'"),
        (None, {"mojolearn.model": "llama:1:2:3:4:5:6:7"}, "another model"),
        (None, {"mojolearn.kind": "x"}, "not a generation state"),
    ]
    for tensors, info, part in cases:
        _edited_state_file(lm, st, f, tensors, info)
        with pytest.raises(ValueError) as ei:
            lm.resume(f)
        assert str(ei.value).startswith("mojolearn: CausalLM.resume: ") and part in str(ei.value), \
            (part, str(ei.value))
    checkpoint.save(f, {"state.kt": st.kt, "state.v": st.v, "state.meta": np.zeros(8, np.float32)})
    with pytest.raises(ValueError, match="not a generation state written by save_state"):
        lm.resume(f)
    lm.save_state(f, st)
    with pytest.raises(ValueError, match=r"made under weight_format 'float32'.*weight_format='float32'"):
        CausalLM.load(path, weight_format="bfloat16").resume(f)
    with pytest.raises(ValueError, match="max_positions >= 4"):
        CausalLM.load(path, max_positions=3).resume(f)
    with pytest.raises(TypeError, match="CausalLM.resume: path must be"):
        lm.resume(3)
    nxt = np.array([[9]])
    assert_same_bits(lm.step(nxt, lm.resume(f)), _fresh_continuation(path, IDS, nxt, 4))


# ---------------------------------------------------------------- block, constructor, loader


def _block_weights():
    w = tiny_weights(TINY)
    return {k[len("model.layers.0."):]: v for k, v in w.items() if k.startswith("model.layers.0.")}


@pytest.mark.parametrize("edit,exc,part", [
    ({"n_heads": 0}, ValueError, "n_heads must be an int >= 1, got 0"),  # was ZeroDivisionError
    ({"n_kv_heads": 0}, ValueError, "n_kv_heads must be an int >= 1"),
    ({"n_heads": 4.0}, TypeError, "n_heads must be an int, got float"),
    ({"head_dim": 0}, ValueError, "head_dim must be an int >= 1"),
    ({"rope_theta": "x"}, TypeError, "rope_theta must be a positive finite number"),
    ({"rms_norm_eps": float("nan")}, ValueError, "rms_norm_eps must be a positive finite"),
    ({"qkv_bias": 1}, TypeError, "qkv_bias must be True or False"),
    ({"w:mlp.down_proj.weight": (48, 90)}, ValueError, "'mlp.down_proj.weight' has shape (48, 90)"),
    ({"w:mlp.up_proj.weight": (81, 48)}, ValueError, "'mlp.up_proj.weight' has shape (81, 48)"),
    ({"w:self_attn.q_proj.bias": (48,)}, ValueError, "a bias is read only with qkv_bias=True"),
    ({"w:mlp.extra": (2,)}, ValueError, "'mlp.extra', which this block does not read"),
])
def test_block_refusals(edit, exc, part):
    """Before: n_heads=0 raised ZeroDivisionError and a down_proj of the wrong shape was
    read past its end (an answer, no error)."""
    bw = _block_weights()
    kw = dict(n_heads=4, n_kv_heads=2, rms_norm_eps=1e-5)
    for k, v in edit.items():
        if k.startswith("w:"):
            bw[k[2:]] = np.zeros(v, np.float32)
        else:
            kw[k] = v
    with pytest.raises(exc) as ei:
        TransformerBlock(bw, **kw)
    assert str(ei.value).startswith("mojolearn: TransformerBlock") and part in str(ei.value), \
        str(ei.value)


def test_block_forward_dtype_is_a_type_error():
    blk = TransformerBlock(_block_weights(), n_heads=4, n_kv_heads=2, rms_norm_eps=1e-5)
    with pytest.raises(TypeError, match="got dtype float64"):
        blk(np.zeros((1, 2, 48)))
    with pytest.raises(ValueError, match=r"got shape \(1, 2, 47\)"):
        blk(np.zeros((1, 2, 47), np.float32))


def test_constructor_leaves_the_callers_weights_whole():
    """Before: CausalLM(config, weights) popped every layer tensor out of the caller's
    dict (21 entries -> 3)."""
    w = tiny_weights(TINY)
    keep = dict(w)
    CausalLM(ModelConfig.from_dict(TINY), w)
    assert w.keys() == keep.keys() and all(w[k] is keep[k] for k in keep)
    with pytest.raises(TypeError, match="config must be a ModelConfig, got dict"):
        CausalLM(dict(TINY), w)
    with pytest.raises(TypeError, match="weights must be a dict"):
        CausalLM(ModelConfig.from_dict(TINY), list(w.items()))
    with pytest.raises(TypeError, match="weight names must be str, got int"):
        CausalLM(ModelConfig.from_dict(TINY), dict(w, **{}) | {3: np.zeros(1, np.float32)})


def test_config_edges():
    with pytest.raises(TypeError, match="ModelConfig.from_file: path must be"):
        ModelConfig.from_file(3)  # open(3) would have read file descriptor 3
    with pytest.raises(ValueError, match="rope_parameters.rope_theta must be a positive"):
        ModelConfig.from_dict(dict(TINY, rope_parameters={"rope_theta": "x"}))
    with pytest.raises(ValueError, match="rope_theta must be a positive finite"):
        ModelConfig.from_dict(dict(TINY, rope_theta=10 ** 400))  # was OverflowError


def test_loader_edges(tmp_path):
    import time

    from safetensors.numpy import save_file

    w = tiny_weights(TINY)
    d = write_model(tmp_path / "big", dict(TINY, num_hidden_layers=10 ** 9), w)
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="model.layers.2.input_layernorm.weight' is missing"):
        CausalLM.load(d)
    assert time.perf_counter() - t0 < 5  # refused at the first missing layer, not after 9e9 names
    d = tmp_path / "sh"
    os.makedirs(d)
    (d / "config.json").write_text(json.dumps(TINY))
    names = sorted(w)
    save_file({n: w[n] for n in names[:5]}, str(d / "a.safetensors"))
    save_file({n: w[n] for n in names[4:]}, str(d / "b.safetensors"))
    idx = d / "model.safetensors.index.json"
    wm = {n: ("a.safetensors" if i < 5 else "b.safetensors") for i, n in enumerate(names)}
    idx.write_text(json.dumps({"weight_map": wm}))
    with pytest.raises(ValueError, match=f"tensor {names[4]!r} is in more than one shard"):
        CausalLM.load(d)
    idx.write_text(json.dumps({"weight_map": list(wm)}))
    with pytest.raises(ValueError, match="weight_map is not a mapping"):
        CausalLM.load(d)
    idx.write_text(json.dumps({"weight_map": dict(wm, **{names[0]: "../x.safetensors"})}))
    with pytest.raises(ValueError, match="names the shard '../x.safetensors'"):
        CausalLM.load(d)
    e = tmp_path / "neg"
    os.makedirs(e)
    (e / "config.json").write_text(json.dumps(TINY))
    hdr = b'{"x": {"dtype": "F32", "shape": [-1, -2], "data_offsets": [0, 8]}}'
    (e / "model.safetensors").write_bytes(len(hdr).to_bytes(8, "little") + hdr + b"\0" * 8)
    with pytest.raises(ValueError, match=r"shape \[-1, -2\].*not non-negative ints"):
        CausalLM.load(e)
    with pytest.raises(ValueError, match="NUL byte"):
        CausalLM.load("a\0b")

"""Bad input to mojolearn.models: every case is refused by name (a 'mojolearn:'
message), nothing crashes, nothing changes silently."""
import json
import os

import numpy as np
import pytest

from mojolearn.models import CausalLM, ModelConfig
from test_models import TINY, tiny_weights, write_model


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = write_model(tmp_path_factory.mktemp("m"), dict(TINY), tiny_weights(TINY))
    return path, CausalLM.load(path)


@pytest.mark.parametrize("ids,exc,match", [
    ([[0, 61]], ValueError, "outside the vocabulary"),
    ([[-1, 2]], ValueError, "outside the vocabulary"),
    (np.array([[1.0, 2.0]]), TypeError, "integer array"),
    (np.array([[True, False]]), TypeError, "integer array"),
    (np.zeros((1, 2, 3), dtype=np.int64), ValueError, "2-D"),
    (np.zeros((1, 0), dtype=np.int64), ValueError, "no token"),
    ([[1, 2], [3]], ValueError, "rectangle"),
])
def test_bad_token_ids(model, ids, exc, match):
    """M-18: token ids out of range or of the wrong dtype or shape are refused."""
    with pytest.raises(exc, match=f"mojolearn: .*{match}"):
        model[1].forward(ids)


def test_positions_past_max(model):
    """M-7 M-18: positions past max_positions, and max_positions past 8192, are refused."""
    path, lm = model
    with pytest.raises(ValueError, match="max_positions"):
        lm.forward(np.zeros((1, 65), dtype=np.int64))
    st = lm.allocate_state(1, 4)
    lm.forward(np.zeros((1, 3), dtype=np.int64), st)
    with pytest.raises(ValueError, match="max_tokens"):
        lm.forward(np.zeros((1, 2), dtype=np.int64), st)
    with pytest.raises(ValueError, match="8192"):
        CausalLM.load(path, max_positions=8193)
    with pytest.raises(ValueError, match="batch"):
        lm.step(np.zeros((2, 1), dtype=np.int64), st)


@pytest.mark.parametrize("field,value", [
    ("model_type", "gpt2"), ("rope_scaling", {"type": "linear", "factor": 2.0}),
    ("hidden_act", "gelu"), ("attn_logit_softcapping", 30.0), ("mlp_bias", True),
    ("attention_bias", True), ("rope_parameters", {"rope_type": "yarn", "rope_theta": 1e4}),
    ("quantization_config", {"quant_method": "gptq"}),
])
def test_unsupported_config_refused_by_name(field, value):
    """M-1: a model type or config field that is not computed is refused by name."""
    with pytest.raises(NotImplementedError, match=f"mojolearn: .*{field}"):
        ModelConfig.from_dict(dict(TINY, **{field: value}))


def test_mistral_sliding_window_refused_and_rope_disagreement():
    """M-7: a sliding window, or two rope_theta spellings that disagree, are refused."""
    with pytest.raises(NotImplementedError, match="sliding_window"):
        ModelConfig.from_dict(dict(TINY, model_type="mistral", sliding_window=4096))
    ModelConfig.from_dict(dict(TINY, model_type="mistral", sliding_window=None))
    with pytest.raises(NotImplementedError, match="disagrees"):
        ModelConfig.from_dict(dict(TINY, rope_parameters={"rope_theta": 5.0, "rope_type": "default"}))


def test_missing_and_misshapen_tensors(tmp_path):
    """M-1: a missing tensor or one of the wrong shape is named."""
    w = tiny_weights(TINY)
    del w["model.layers.1.mlp.up_proj.weight"]
    with pytest.raises(ValueError, match="model.layers.1.mlp.up_proj.weight.*missing"):
        CausalLM.load(write_model(tmp_path / "a", dict(TINY), w))
    w = tiny_weights(TINY)
    w["model.norm.weight"] = np.ones(47, dtype=np.float32)
    with pytest.raises(ValueError, match="model.norm.weight.*shape"):
        CausalLM.load(write_model(tmp_path / "b", dict(TINY), w))


def test_truncated_and_corrupt_files(tmp_path):
    """M-1: a truncated or corrupt safetensors or GGUF file is refused by name."""
    path = write_model(tmp_path / "t", dict(TINY), tiny_weights(TINY))
    f = os.path.join(path, "model.safetensors")
    data = open(f, "rb").read()
    open(f, "wb").write(data[: len(data) // 2])
    with pytest.raises(ValueError, match="truncated or corrupt"):
        CausalLM.load(path)
    open(f, "wb").write(b"\xff" * 64)
    with pytest.raises(ValueError, match="truncated or corrupt"):
        CausalLM.load(path)
    g = tmp_path / "bad.gguf"
    g.write_bytes(b"GGUF" + b"\x00" * 20)
    with pytest.raises(ValueError, match="truncated or corrupt"):
        CausalLM.load(g)
    with pytest.raises(FileNotFoundError, match="mojolearn: no model"):
        CausalLM.load(tmp_path / "nothing")
    with pytest.raises(TypeError, match="path must be"):
        CausalLM.load(3)
    with open(os.path.join(path, "config.json"), "w") as fh:
        fh.write("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        CausalLM.load(path)


def test_profile_and_format_refusals(model):
    """M-19 M-26: an unknown or rejected profile, an unknown weight format: by name."""
    path, _ = model
    with pytest.raises(ValueError, match="int8_v1"):
        CausalLM.load(path, numeric_profile="int8_v1")
    with pytest.raises(ValueError, match="fixed15"):
        CausalLM.load(path, numeric_profile="fixed15")
    with pytest.raises(ValueError, match="weight_format"):
        CausalLM.load(path, weight_format="int4")


def test_tokenizer_of_another_vocabulary(model):
    """M-1: a tokenizer whose vocabulary does not fit the model is refused."""
    from mojolearn.models import Tokenizer
    from tokenizers import Tokenizer as T, models

    tk = T(models.WordLevel({f"w{i}": i for i in range(100)}, unk_token="w0"))
    with pytest.raises(ValueError, match="do not belong together"):
        model[1].generate_text("w1 w2", 2, tokenizer=Tokenizer(tk, source="x"))


def test_profile_compat_names():
    """M-19: profiles.canonical, default_profile, set_default_profile and check_saved's
    default label, as the published profile module has them."""
    from mojolearn import profiles as P

    assert P.canonical(" fixed15_v1 ") == "fixed15_v1"
    with pytest.raises(ValueError, match="fixed15"):
        P.canonical("fixed15")
    old = P.set_default_profile("fixed15_v1")
    try:
        assert P.default_profile() == "fixed15_v1"
    finally:
        P.set_default_profile(old)
    with pytest.raises(ValueError, match="state was written"):
        P.check_saved({"numeric_profile": "fixed15_v1"}, "fp32_v1")


@pytest.mark.parametrize("field, value, match", [
    ("rope_theta", 1e39, "past float32's largest"),
    ("rope_theta", 10 ** 40, "past float32's largest"),
    ("rope_theta", 1e-45, "below float32's smallest normal"),
    ("rms_norm_eps", 1e-40, "below float32's smallest normal"),
    ("rms_norm_eps", 3.5e38, "past float32's largest"),
])
def test_config_values_outside_float32_are_refused_by_name(field, value, match):
    """Issue 43 item 11: config values the kernels read as float32 and that have no
    normal float32 raised a bare OverflowError (past FLT_MAX) or computed silently
    flushed to zero (a rope_theta of 1e-45: all-NaN logits); now refused by name, from
    a config and from TransformerBlock."""
    with pytest.raises(ValueError, match=f"{field} = .*{match}"):
        ModelConfig.from_dict(dict(TINY, **{field: value}))
    from mojolearn.models import TransformerBlock
    from test_models import tiny_weights

    w = tiny_weights(dict(TINY, num_hidden_layers=1))
    bw = {k[len("model.layers.0."):]: v for k, v in w.items() if k.startswith("model.layers.0.")}
    with pytest.raises(ValueError, match=f"{field} = .*{match}"):
        TransformerBlock(bw, n_heads=4, n_kv_heads=2, **{field: value})

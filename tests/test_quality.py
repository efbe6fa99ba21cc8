"""The quality gate (python -m mojolearn quality) on a tiny model written here."""
import json
import os

import numpy as np
import pytest

from mojolearn import quality
from test_models import TINY, tiny_weights, write_model


@pytest.fixture(scope="module")
def tiny_with_tokenizer(tmp_path_factory):
    from tokenizers import Tokenizer, models, pre_tokenizers

    path = write_model(tmp_path_factory.mktemp("q"), dict(TINY), tiny_weights(TINY))
    tk = Tokenizer(models.WordLevel({f"w{i}": i for i in range(TINY["vocab_size"])}, unk_token="w0"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tk.save(os.path.join(path, "tokenizer.json"))
    rng = np.random.default_rng(0)
    text = " ".join(f"w{i}" for i in rng.integers(0, TINY["vocab_size"], 200))
    return path, text


def test_quality_measures_and_baseline_is_zero(tiny_with_tokenizer, tmp_path):
    """The relative perplexity change of fp32_v1 against itself is exactly 0; fixed15_v1's
    is a number with an interval around it; the CLI writes the result file."""
    path, text = tiny_with_tokenizer
    same = quality.measure(path, "fp32_v1", text, windows=4, window_tokens=16, bootstrap=50)
    assert same["change"] == 0.0 and same["interval"] == [0.0, 0.0]
    assert same["windows"] == 4 and same["tokens_scored"] == 4 * 15
    r = quality.measure(path, "fixed15_v1", text, windows=4, window_tokens=16, bootstrap=50)
    assert r["interval"][0] <= r["change"] <= r["interval"][1]
    assert r["change"] != 0.0
    f = tmp_path / "t.txt"
    f.write_text(text)
    assert quality.main([path, "--profile", "fixed15_v1", "--text", str(f), "--windows", "2",
                         "--window-tokens", "16", "--out", str(tmp_path), "--model-name", "tiny"]) == 0
    out = json.loads((tmp_path / "quality-tiny-t.json").read_text())
    assert out["model"] == "tiny" and out["text"] == "t" and out["profile"] == "fixed15_v1"


def test_builtin_texts_exist():
    """Both built-in texts come with every Python install; code is the last 1 MB."""
    assert len(quality.builtin_text("prose")) > 100_000
    assert len(quality.builtin_text("code").encode()) >= (1 << 20) - 4
    with pytest.raises(ValueError, match="unknown built-in"):
        quality.builtin_text("poetry")

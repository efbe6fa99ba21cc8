"""mojolearn.models against Hugging Face transformers (a reference no one here wrote):
a tiny random LlamaForCausalLM written with save_pretrained in every run, and
SmolLM2-135M (slow)."""
import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from mojolearn.models import CausalLM, Tokenizer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _close(ours, theirs, rel=1e-5):
    scale = float(np.abs(theirs).max())
    err = float(np.abs(ours - theirs).max())
    assert err <= rel * scale, f"max |diff| {err} > {rel} * {scale}"


def test_tiny_save_pretrained_matches_transformers(tmp_path):
    """M-1 M-4 M-7 M-10 M-13 M-17: logits of a random tiny Llama saved by transformers
    itself agree with transformers' own forward within 1e-5 of the largest logit."""
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=96,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=128,
                                   rms_norm_eps=1e-5, tie_word_embeddings=False)
    model = transformers.LlamaForCausalLM(cfg).eval()
    model.save_pretrained(tmp_path)
    ids = np.random.default_rng(0).integers(0, 97, size=(2, 23))
    with torch.no_grad():
        ref = model(torch.from_numpy(ids)).logits.float().numpy()
    ours = CausalLM.load(tmp_path).forward(ids)
    _close(ours, ref)


def _smollm2_dir(tmp_path_factory):
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from fetch_model import fetch
    from hf_export import export_hf

    gguf_path = fetch()
    return gguf_path, export_hf(gguf_path, str(tmp_path_factory.mktemp("smollm2")))


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    return _smollm2_dir(tmp_path_factory)


@pytest.mark.slow
def test_smollm2_logits_and_greedy_match_transformers(smollm2):
    """M-1 M-3 M-18: SmolLM2-135M (dequantized GGUF written as a Hugging Face directory):
    logits within 1e-5 of the largest for prompts of 1, 7 and 300 tokens, and
    greedy generation of 32 tokens from three prompts gives transformers' tokens."""
    gguf_path, hf_dir = smollm2
    model = transformers.LlamaForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float32).eval()
    ours = CausalLM.load(hf_dir)
    tok = Tokenizer.load(gguf_path)
    text = open(os.path.join(os.path.dirname(os.__file__), "pydoc_data", "topics.py")).read()
    base = tok.encode(text[:20000])
    for n in (1, 7, 300):
        ids = np.array([base[:n]])
        with torch.no_grad():
            ref = model(torch.from_numpy(ids)).logits.float().numpy()
        _close(ours.forward(ids), ref)
    # Greedy tokens equal transformers' greedy choice step by step (each step the first
    # largest of transformers' logits for the sequence so far; its generate() would also
    # suppress the end-of-text token until min_new_tokens, which ours does not).
    for prompt in ("The capital of France is", "def fibonacci(n):", "Once upon a time"):
        ids = tok.encode(prompt)
        ref = list(ids)
        with torch.no_grad():
            for _ in range(32):
                lg = model(torch.tensor([ref])).logits[0, -1]
                ref.append(int(torch.argmax(lg)))
        got = ours.generate([ids], 32)
        assert got[0].tolist() == ref, (prompt, tok.decode(got[0]), tok.decode(ref))


@pytest.mark.slow
def test_smollm2_gguf_equals_its_hf_export(smollm2):
    """M-2 M-26: the GGUF loader (q/k rows unpermuted) and the HF directory give the same
    bits, under both profiles."""
    gguf_path, hf_dir = smollm2
    ids = np.array([[1, 504, 3575, 282, 4649, 314]])
    for prof in ("fp32_v1", "fixed15_v1"):
        a = CausalLM.load(gguf_path, numeric_profile=prof).forward(ids)
        b = CausalLM.load(hf_dir, numeric_profile=prof).forward(ids)
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))

"""The quality gate: what a numeric profile does to a model's held-out perplexity.

    python -m mojolearn quality MODEL --profile fixed15_v1 --text FILE [--text FILE ...]
        [--builtin prose|code] [--windows 32] [--window-tokens 512] [--bootstrap 2000]
        [--seed 0] [--out DIR]

For each text: the text is tokenized with the model's own tokenizer, cut into
non-overlapping windows of ``window_tokens`` tokens (``windows`` of them, evenly spaced
over the text when it holds more), and every window is run through the model twice,
under fp32_v1 and under the profile, whole configuration at once. The result is the
relative change in perplexity, ``exp(mean(nll_profile - nll_fp32)) - 1``, with a 95%
bootstrap interval over windows (resampled with a seeded generator). The negative log
likelihoods are a measurement taken in float64 from the models' float32 logits; they
are not part of any profile's arithmetic.

Two texts every Python install ships are built in: ``prose`` (the reference text in
``pydoc_data/topics.py``) and ``code`` (a fixed list of standard-library modules, the
last 1 MB of them). Each result goes to ``bench/results/quality-<model>-<text>.json`` and
is shown by ``mojolearn.numeric_profiles()`` beside the table's own numbers.
"""
from ._tools.quality import CODE_FILES, builtin_text, measure, main

__all__ = ["CODE_FILES", "builtin_text", "measure", "main"]


def __dir__():
    """dir() shows the public API (__all__), not the module's imports."""
    return sorted(__all__)

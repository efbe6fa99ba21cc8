"""What a looser numeric mode costs in bits, measured: the drift of a model's outputs.

    python -m mojolearn drift MODEL --mode fast [--profile fp32_v1] [--builtin prose]
        [--text FILE] [--windows 8] [--window-tokens 256] [--prompts 4]
        [--new-tokens 32] [--bootstrap 2000] [--seed 0] [--out DIR] [--model-name NAME]

The same model is loaded twice, under ``numeric_mode="identical"`` and under the mode
asked for (the same numeric profile and weights), and run on the same inputs:
  - logits: ``windows`` windows of ``window_tokens`` tokens of the text (evenly spaced),
    prefill each under both; the largest absolute difference, the largest difference in
    units in the last place (the float32 spacing of the larger magnitude), and the
    fraction of logits that are bit-identical;
  - perplexity: the relative change ``exp(mean(nll_mode - nll_identical)) - 1`` with a
    95% bootstrap interval over windows (the quality tool's method);
  - greedy generation: ``prompts`` prompts (the first 32 tokens of windows), ``new_tokens``
    new tokens under each mode; the fraction of new tokens that agree position by
    position and where the first disagreement falls.
The differences, ulps and log likelihoods are measurements taken in float64 / integers
from the models' float32 outputs, not part of any arithmetic. The result goes to
``bench/results/drift-<model>-<mode>-<profile>.json``.
"""
from ._tools.drift import logit_drift, measure, main

__all__ = ["logit_drift", "measure", "main"]


def __dir__():
    """dir() shows the public API (__all__), not the module's imports."""
    return sorted(__all__)

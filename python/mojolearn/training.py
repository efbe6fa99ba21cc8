"""mojolearn.training: training primitives, optimizers and schedules under fp32_v1.

    import numpy as np
    from mojolearn import training as T
    y = T.linear_forward(x, w)                        # fp32.v1, dot(k = K)
    loss, dlogits = T.cross_entropy(logits, targets, return_grad=True)
    dx, dw = T.linear_backward(dy, x, w)              # dot(k = N), dot(k = tokens)
    loss, dh, dW = T.chunked_lm_head_loss(h, W, targets, return_grad=True)  # T-19 .. T-21
    db = T.bias_backward(dy)                          # T-7: a chain over rows
    opt = T.AdamW(params, lr=3e-4, lr_schedule=T.WarmupCosineLR(3e-4, 100, 10_000))
    opt.step(grads, max_norm=1.0)                     # clip, then one AdamW step in place

WHAT IS PROMISED
    The bits of the published release's training primitives (training-arithmetic-v1,
    rules T-1 .. T-46) on every input they accept: every sum over tokens or rows runs
    fp32.v1's leaves and balanced tree, so micro-batches split on leaf boundaries
    (accumulate_grads, aligned_split) give one batch's bits, and the result does not
    depend on thread count or CPU ISA.

WHAT IS REFUSED, by name and before anything is written
    non-float32 arrays (TypeError, never a cast); NaN or inf inputs (ValueError with
    the flat index); float or bool ids; out-of-range ids and targets (never clamped);
    torch options this arithmetic does not have (weight=, foreach=, amsgrad=, ...).

Arrays are C-contiguous float32 numpy arrays; parameters and clipped gradients are
updated in place. All arithmetic runs in the Mojo extension.
"""
from ._train.primitives import (
    accumulate_grads, aligned_split, bias_backward, chunked_lm_head_loss, clip_grad_norm_,
    cross_entropy, embedding_backward,
    embedding_forward, linear_backward, linear_forward, rms_norm_backward, rms_norm_forward,
    splits_that_work,
)
from ._train.schedule import ConstantLR, WarmupCosineLR, WarmupLinearLR, schedule_from_dict
from ._train.optim import SGD, Adam, AdamW
from ._train.trainer import Trainer

__all__ = [
    "linear_forward", "linear_backward", "rms_norm_forward", "rms_norm_backward",
    "embedding_forward", "embedding_backward", "cross_entropy", "clip_grad_norm_",
    "accumulate_grads", "aligned_split", "splits_that_work", "bias_backward",
    "chunked_lm_head_loss", "ConstantLR", "WarmupLinearLR",
    "WarmupCosineLR", "schedule_from_dict", "SGD", "Adam", "AdamW", "Trainer",
]


def __dir__():
    """dir() shows the public API (__all__), not the module's imports."""
    return sorted(__all__)

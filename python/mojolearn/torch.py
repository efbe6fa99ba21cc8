"""mojolearn.torch: torch's matrix products under fp32.v1, with one line.

    import mojolearn.torch
    with mojolearn.torch.identical():        # or enable() / disable()
        logits = model(ids).logits           # every float32 CPU product is fp32.v1

WHAT IT DOES
    Registers, through ``torch.library``, CPU kernels for the aten products
    (``COVERED``). ``nn.Linear``, ``torch.matmul`` (its 2-D and batched paths) and
    ``@`` decompose into them, so any ``nn.Module`` computes its products under
    ``mojolearn.identical.gemm.fp32.v1``. The backward products of autograd are the
    same kernels (dA = dC @ B^T and dB = A^T @ dC are ``aten::mm`` / ``aten::bmm``
    calls), so a training step's products are identical too. Operands are read
    through DLPack without a copy (a transposed operand, such as ``weight.t()``, is
    passed as the transpose flag: same bits, rule 6.5); results come back as torch
    tensors sharing the result's memory.

ADDMM / BADDBMM (rule 10.2 of the fp32 contract)
    ``beta * bias + alpha * (A @ B)`` is computed for ``alpha = 1`` and
    ``beta`` 0 (the bias is ignored, as torch does) or 1 (the bias add is one more
    rounding: ``ftz(C + bias)``, a Mojo kernel). Other factors have no kernel in
    this version and are refused by name: nothing is computed in torch's arithmetic.

WHAT FALLS THROUGH, WHAT IS REFUSED
    Tensors that are not float32 (float64, complex, bfloat16, integers) fall through
    to torch's own kernels unchanged. Float32 products this version does not compute
    (``REFUSED``: ``addmv``, ``addbmm``, ``addr``, torch's fused CPU attention
    kernel) raise ValueError by name. While the mode is on, torch's CPU
    ``scaled_dot_product_attention`` takes its math path, whose products are
    ``aten::bmm``.

ELEMENTWISE
    ``aten::silu`` (float32) runs the models' SiLU kernel (rule M-17 of the ops
    contract), whose bits do not depend on how torch splits the work between
    threads (torch's own vectorised silu does). ``aten::_softmax`` and
    ``aten::_log_softmax`` over the last dimension run rules M-28 / M-29 (a serial
    sum, the contract's expf and logf), and ``aten::mean.dim`` over the last
    dimension runs M-30 (a serial sum, one division): the reductions of a
    transformers Llama forward (attention softmax, RMSNorm's mean) then have one
    order whatever the threads or batch. Other dimensions stay torch's.

RMSNORM (rule M-31 of the ops contract)
    ``aten::rms_norm`` (``torch.nn.functional.rms_norm``, ``torch.rms_norm``,
    ``torch.nn.RMSNorm``) on a float32 CPU input runs the models' RMSNorm kernel
    (M-4): each row is the ``normalized_shape`` trailing dimensions (one or more), eps
    the float32 of ``eps`` or, when None, torch's default ``finfo(float32).eps`` =
    2^-23; with no weight the kernel multiplies by 1 (exact). The op is registered at
    AutogradCPU as well as CPU (torch's kernel is a composite, decomposed above the
    CPU key otherwise); under autograd the forward is still M-31 and the backward is
    torch's (the gradient of its composite, recomputed from the saved inputs; higher
    derivatives too). Falling through to torch's composite: other dtypes and
    devices, a weight of another dtype or device, an empty input, and a
    ``normalized_shape`` or weight that does not match (torch raises its own
    error). A float32 composite that falls through still routes its mean (M-30).
    transformers' ``LlamaRMSNorm`` (and its Mistral/Qwen2 copies) is not covered: in
    the transformers versions that write it by hand (``pow(2).mean(-1,
    keepdim=True)``, ``rsqrt``, two ``mul``; 5.x included) only its mean is routed
    (M-30); pow, the eps add, rsqrt and the muls stay torch's (one rounding per
    element, bits independent of threads and batch, but torch's arithmetic, not the
    contract's). A version whose RMSNorm calls ``F.rms_norm`` is covered by M-31.

SCOPE
    The registration is process-wide (every thread), like any ``torch.library``
    kernel; ``disable()`` restores torch's kernels.

CUDA / ROCm TENSORS
    Where this install's GPU build serves the process (``mojolearn.vendor()`` is
    "cuda" or "hip") and drives the tensors' device, the products (``COVERED``) of
    float32 tensors on that device run fp32.v1 on the GPU where the data lies (no host
    copy; ``linalg.matmul`` on device-resident operands; under numeric_mode fast the
    vendor's sgemm instead, as ``mojolearn.modes`` says), and so does the bias add
    of addmm / baddbmm (rule 10.2); torch's fused attention kernels (flash,
    memory-efficient, cuDNN) are switched off while the mode is on, so
    ``scaled_dot_product_attention`` takes its math path (bmm). The elementwise ops
    above are covered on the CPU only: on a device they stay torch's. Without a
    working GPU build, device tensors run torch's own kernels, as outside the mode
    (``gpu_covered()`` says which applies).
"""
from ._torch.mode import (
    identical, enable, disable, is_enabled, COVERED, REFUSED, ELEMENTWISE_COVERED, calls,
    gpu_covered, numeric_mode,
)

__all__ = [
    "identical", "enable", "disable", "is_enabled", "COVERED", "REFUSED", "ELEMENTWISE_COVERED",
    "calls", "gpu_covered", "numeric_mode",
]


def __dir__():
    """dir() shows the public API (__all__), not the module's imports."""
    return sorted(__all__)

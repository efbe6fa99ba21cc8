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
    passed as the transpose flag: same bits, rule 6.5; a view with torch's lazy
    negation bit, such as the ``imag`` of a ``conj()`` view, is materialized first);
    results come back as torch tensors sharing the result's memory.

ADDMM / BADDBMM (rule 10.2 of the fp32 contract)
    ``beta * bias + alpha * (A @ B)`` is computed for ``alpha = 1`` and
    ``beta`` 0 (the bias is ignored, as torch does) or 1 (the bias add is one more
    rounding: ``ftz(C + bias)``, a Mojo kernel). Other factors have no kernel in
    this version and are refused by name: nothing is computed in torch's arithmetic.

WHAT FALLS THROUGH, WHAT IS REFUSED
    Tensors that are not float32 (float64, complex, bfloat16, integers) fall through
    to torch's own kernels unchanged. Float32 products this version does not compute
    (``REFUSED``: ``addmv``, ``addbmm``, ``addr``, torch's fused CPU attention
    kernel) raise ValueError by name.

ATTENTION (rules M-6, M-11..M-15; backward T-47..T-51)
    ``aten::scaled_dot_product_attention`` (registered at CPU and AutogradCPU, as
    torch's is a composite) on float32 CPU tensors (batch, heads, length, head_dim)
    runs the models' fused causal attention kernel, the bits of ``CausalLM``'s
    attention, when the call is a causal prefill (``is_causal`` with as many queries
    as keys) or one query over all the keys (a decode step), with no mask tensor, no
    dropout, the query heads an even multiple of the key/value heads
    (``enable_gqa``), the default scale or one whose float32 is M-6's
    ``div(1, sqrt(head_dim))``, under numeric mode identical. With a gradient wanted
    (a causal prefill), the backward is the training contract's attention backward
    (the bits of ``mojolearn.training.Trainer``'s): the weights recomputed by the
    forward's functions, the softmax backward T-49, every product fp32.v1 under
    numeric mode identical wherever ``backward()`` is called. Every other call takes
    torch's math path, whose products (``aten::bmm``) and softmax are the mode's.

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

SCOPE AND THREADS
    The mode is one state for the whole process (every thread), like any
    ``torch.library`` kernel: it is on while any thread has an ``identical()`` block
    open, or ``enable()`` was called and not ``disable()``d. Switching it is safe at
    any time from any thread, also while other threads run torch ops. A block keeps
    its promise whatever other threads do: another thread leaving its block, or
    calling ``disable()``, does not turn it off (``disable()`` ends only what
    ``enable()`` started; the mode goes off when the last block closes), and a block
    whose numeric mode differs from that of other threads' open blocks is refused by
    name (RuntimeError), as is ``enable(numeric_mode=...)`` with another mode while
    blocks are open. Within one thread blocks nest: a nested block may change the
    numeric mode while no other thread has a block open, and restores it at exit. A
    block naming no numeric mode runs under the one in force at its entry (its
    enclosing block's in this thread, else ``enable()``'s, else this thread's
    ``mojolearn.numeric_mode()``). Threads without a block of their own run the
    mode's kernels while it is on, under the numeric mode in force.

    While the mode is on, torch's own ops run on one intra-op thread
    (``torch.set_num_threads(1)``; the count found is restored when the mode goes
    off, unless it was changed meanwhile): torch's workers spin for a while after each
    parallel region, on the cores the mode's kernels use next (on 2 cores a
    transformers prefill in the mode ran 1.2-1.4x faster with torch on one thread). The mode's kernels use
    ``mojolearn.get_num_threads()`` threads; ``torch.set_num_threads(n)`` inside a
    block gives torch its threads back.

    The first use registers the kernels, and they stay registered for the rest of
    the process (taking them out while other threads dispatch to them is not safe in
    torch): off, each covered op passes through a cheap Python check on its way to
    torch's own kernel, with torch's bits (of the order of a microsecond a call;
    rms_norm, registered above autograd, a few more).

TORCH.COMPILE
    While the mode is on, torch.compile's stance is ``force_eager``
    (``torch.compiler.set_stance``; the stance found is restored when the mode goes
    off): functions compiled before or inside the block run eagerly, so every op of
    compiled code reaches the mode's kernels (Inductor would otherwise compute silu,
    softmax and mean in its own arithmetic, and fails on rms_norm). Nothing is
    compiled while the mode is on; after it, compiled code runs compiled again. The
    stance is process-wide too. Switching the mode on inside a function that
    torch.compile traces or runs is refused by name (enter the block around the call
    of the compiled function), and so is switching it on with a torch without
    ``set_stance`` (before 2.6). Code compiled ahead of time (AOTInductor packages) is
    not torch.compile and is not covered.

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

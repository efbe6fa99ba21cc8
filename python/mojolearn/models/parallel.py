"""ParallelCausalLM: one model over several processes (torch.distributed), with the
logits of ``CausalLM`` in one process, bit for bit.

    torchrun --nproc-per-node 2 run.py        # run.py, on every rank:
        import torch.distributed as dist
        from mojolearn.models import ParallelCausalLM
        dist.init_process_group("gloo")
        lm = ParallelCausalLM.load(path, layout="tensor")
        logits = lm.forward([[1, 504, 3575]])  # the same on every rank

LAYOUTS
    pipeline          consecutive layers per rank; the residual stream is sent from
                      one rank to the next (point to point).
    tensor            every layer on every rank, split by attention heads and MLP
                      columns: q/k/v and gate/up by output rows (each rank its heads'
                      rows, and the key/value heads those heads read), o_proj and
                      down_proj by k (each rank its heads' / columns' part of k). The
                      head by vocabulary rows.
    pipeline+tensor   pipeline stages of ``tensor_size`` ranks each.

WHY THE BITS ARE THE ONE-PROCESS BITS
    A product split by output rows or columns has the same bits by contract rule 6.5.
    A product split along k (o_proj, down_proj) never goes through all_reduce(sum),
    whose order depends on the rank count and the collective's algorithm: each rank
    computes its part with the k-split primitive (contract 6.7 for fp32.v1: the tree
    nodes over its whole leaves; L-8 for int15i64.v1: exact sums), the parts are
    all-gathered and every rank folds them in the tree's order (linalg.fold_parts).
    Under fixed15_v1 a row split across ranks is quantized with the exponent of the
    whole row (row_absmax all-reduced with MAX: exact in any order), weights at load
    and activations per call. Everything else a rank computes (norms, RoPE,
    attention of its heads, SiLU, residuals) is the same kernel on the same values.
    So the split rules are: each rank's heads start and end where o_proj's k can be
    split (multiples of its leaf under fp32_v1), and its MLP columns likewise for
    down_proj; a shape that cannot be split so for the rank count asked is refused
    by name, with the counts that work.

WHAT EVERY RANK DOES
    Every rank runs the same program: ``load`` (each rank keeps only its layers and,
    from a safetensors checkpoint, reads only the rows / columns it holds; a GGUF
    tensor is dequantized whole and sliced; and every rank hashes every file of its
    checkpoint, so the checkpoint is read once more, see FAILURES), ``forward`` /
    ``step`` / ``generate`` with the same ids and arguments (checked: a rank given
    other ids, or another max_new_tokens, greedy, seed or eos_token_id to
    ``generate``, is refused on every rank, naming it), and gets the same logits.
    ``allocate_state`` gives each rank its part of the KV cache; ``save_state`` writes
    one file in ``CausalLM``'s format (rank 0 writes, every rank returns when it is
    written), which ``CausalLM.resume`` reads, and ``resume`` reads a file
    ``CausalLM.save_state`` wrote.

FAILURES
    Every collective runs with a timeout (``timeout`` seconds, default 300): a rank
    that died, hung or called something else makes the others raise a RuntimeError
    naming the operation and the rank, never hang. ``load`` refuses ranks that were
    given another checkpoint, profile, weight format, mode, layout, tensor_size or
    max_positions, on every rank, naming them: the checkpoint as ``weights``, a
    sha256 over the names, sizes and bytes of every file it is read from
    (config.json, model.safetensors or the index and every shard, or the .gguf file),
    which every rank computes by reading the whole checkpoint once more (about as
    long as reading it at sha256's speed, 0.5 to 2 GB/s). They are compared before
    the model makes the groups that depend on them (its pipeline stages), so a
    mismatch is refused at once, not after the timeout; a rank that cannot read its
    checkpoint raises its own error and the others name it as unreadable.
"""
from ._transformer.parallel import ParallelCausalLM, ParallelGenerationState, LAYOUTS

__all__ = ["ParallelCausalLM", "ParallelGenerationState", "LAYOUTS"]

"""The transformer itself: a block (block.py: TransformerBlock and its
layers), the causal language model (causal_lm.py: CausalLM with its KV cache,
generation and state files) and the same model over several ranks
(parallel.py: ParallelCausalLM on torch.distributed, pipeline and tensor layouts).

Order inside: block < causal_lm < parallel. May import every lower models layer
(``_gpu`` only where a model runs on the GPU) and the package's private layers.
"""

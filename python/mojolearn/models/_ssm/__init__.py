"""The state-space families (Mamba-1, Mamba-2): their config (config.py), the GPU
program of the model (gpu.py: weights and decode state in device memory, every call
one program of the GPU kernels) and the model, blocks and decode state (model.py), a
CausalLM that CausalLM.load hands a mamba / mamba2 checkpoint to.

May import: ``_core``, ``_data``, ``_table``, ``_ops``, ``_io``, ``models._base``,
``models._exec``, ``models._load``, ``models._gpu``, ``models._transformer``.
"""

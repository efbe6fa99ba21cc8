"""The state-space families (Mamba-1, Mamba-2): their config (config.py) and the
model, blocks and decode state (model.py), a CausalLM that CausalLM.load hands a
mamba / mamba2 checkpoint to.

May import: ``_core``, ``_data``, ``_table``, ``_ops``, ``_io``, ``models._base``,
``models._exec``, ``models._load``, ``models._transformer``.
"""

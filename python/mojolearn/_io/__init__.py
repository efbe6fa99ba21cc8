"""Files: the safetensors layout read strictly (layout.py: the one reader of the
format's header, for checkpoints and model files), the checkpoint format
(checkpoint.py: safetensors with the profile's metadata, low-bit tensors as stored,
atomic writes), re-exported by ``mojolearn.checkpoint``.

May import: ``_core``, ``_data``, ``_table``, ``_ops``.
"""

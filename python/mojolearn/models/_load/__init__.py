"""Reading checkpoints into a model's weights: Hugging Face folders
(safetensors, sharded), GGUF files and mojolearn checkpoints, lazily and with the
weights checked against the config (loader.py).

May import: ``models._base``, ``models._exec`` and the package's private layers.
"""

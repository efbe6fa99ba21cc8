"""What a model is, before any arithmetic: the config read from a checkpoint
(config.py: ModelConfig, the architectures computed, refusals by name), the checks of
a model call's inputs (inputs.py: token ids, counts, flags, state sizes) and the KV
cache a generation carries (state.py: GenerationState).

The lowest models layer. May import: the package's private layers (``_core`` to
``_io``) and numpy.
"""

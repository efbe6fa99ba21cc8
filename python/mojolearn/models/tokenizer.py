"""Tokenizers for the models: a Hugging Face ``tokenizer.json`` (the ``tokenizers``
package) or the byte-level BPE tokenizer stored in a GGUF file."""
from ._text.tokenizer import Tokenizer

__all__ = ["Tokenizer"]

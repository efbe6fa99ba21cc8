"""Text in and out (tokenizer.py: Tokenizer, from a tokenizer.json or a GGUF
file's vocabulary), above the models whose vocabulary it checks.

The top models layer: may import every layer below it.
"""

"""Converters: float32 <-> bf16 bits, float32 <-> int8 / int15 codes."""

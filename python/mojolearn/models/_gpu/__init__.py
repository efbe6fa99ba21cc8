"""The GPU program of a model (program.py): the weights uploaded once, the KV
cache in device memory and every op enqueued on the device, with the CPU model's
bits. The CPU model hands work to it; it never imports the CPU model.

May import: ``models._base``, ``models._exec``, ``models._load`` and the package's
private layers.
"""

"""The torch mode (mode.py): every float32 product of a torch model, and its
backward, computed by fp32.v1 through ``torch.library``; re-exported by
``mojolearn.torch``. Imports torch.

May import: every private layer below it and the public faces ``linalg``,
``lowbit``, ``profiles``, ``modes``, ``checkpoint``; not ``models``.
"""

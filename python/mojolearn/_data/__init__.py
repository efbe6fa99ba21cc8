"""Data in and out: the result type and the reading of every caller input, before
any product runs. ``Buf`` (buf.py) is the checked, read-only view of a caller's memory
that travels down; dlpack.py reads and exports DLPack; array.py is
``mojolearn.Array`` (the result type, exported through DLPack and the buffer
protocol); buffers.py reads buffers, ``__array_interface__`` and nested lists into a
``Buf`` without copying; validate.py checks dtype, rank, contiguity and ``out``,
refusing by name. An argument is read here once, where it enters; the layers above
pass the ``Buf`` on instead of reading the object again.

Order inside: buf < dlpack < array < buffers < validate. May import: ``_core``.
"""

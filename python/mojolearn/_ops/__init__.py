"""The products and converters: every call that hands addresses to the Mojo
kernels. calls.py (what each product call carries: the mode code, the conformance
sabotage argument, the per-thread workspace), operands.py (the operands' checks that
need no data), convert.py (float32 <-> bf16, the int8 / int15 codes), lowbit.py
(weights stored low-bit: BF16Weight, Int8Weight, pack / materialize), prepared.py
(weights packed once per CPU build), gemm.py (the four GEMM profiles) and ksplit.py
(a product split over k and folded in the tree's order). ``mojolearn.linalg`` and
``mojolearn.lowbit`` re-export them.

Order inside: calls, operands < convert < lowbit < prepared < gemm < ksplit. May
import: ``_core``, ``_data``, ``_table``.
"""

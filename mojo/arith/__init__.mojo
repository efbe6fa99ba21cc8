"""The arithmetic layer: one definition of each per-element rule of the contracts,
width-generic so the CPU kernels call it at SIMD width and the GPU thread bodies at
width 1. Each rule's defining function carries a `Rule: <id>` line in its docstring
(tests/test_contracts.py checks that each id has exactly one).

fp.mojo          ftz, DAZ (6.1), daz_in (an operand as the CPU kernels read it: free
                 under hardware DAZ, flushed in the explicit-flush build), NaN on
                 the bits, pow2f
tree.mojo        leaf size (6.2), chain step (6.3), tree step (6.4)
bf16.mojo        widen (L-1), narrow (L-2)
quant.mojo       row exponent (L-3, W-1), codes (L-4), int15 planes (W-2),
                 the power-of-two scaling of dequantize and the integer GEMMs'
                 epilogue (L-5, L-6, W-3)
elementary.mojo  the models' sqrt (M-5), powf (M-7), logf (M-8), sin/cos (M-9),
                 expf (M-14)
"""

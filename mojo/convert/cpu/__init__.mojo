"""CPU converter kernels."""

"""CPU kernels of the state-space ops."""

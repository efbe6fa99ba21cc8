"""CPU kernels of the transformer ops."""

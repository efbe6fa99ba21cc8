"""CPU kernels of the training ops."""

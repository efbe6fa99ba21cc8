"""Shared pieces of the CPU kernels: pointers from addresses, the floating-point
state, and the worker pool."""

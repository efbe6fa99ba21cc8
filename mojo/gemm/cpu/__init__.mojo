"""CPU GEMM kernels."""

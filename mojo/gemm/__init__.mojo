"""GEMM profiles."""

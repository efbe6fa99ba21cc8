"""The arithmetic layer: one definition of each per-element rule of the model
contract (contracts/ops/IDENTICAL_NN_CONTRACT.md), width-generic so the CPU
kernels call it at SIMD width and GPU kernel bodies at width 1."""

"""GPU kernels (NVIDIA, AMD, Apple) for the v1 profiles, with the CPU's exact bits.

arith.mojo        per-element arithmetic (leaf chain, tree fold, integer dots and
                  epilogue, bf16, quantize / dequantize), plain scalar functions
threads.mojo      what ONE thread computes given its coordinates, and the launch
                  shapes (block and tile sizes) in one place
kernels.mojo      the device kernels: indices -> coordinates -> a threads.mojo body
launch.mojo       host side: device buffers, launches, copies (for _native_gpu.mojo)
cpu_run.mojo      the same launches as plain CPU loops over the same bodies,
                  registered in the CPU extension as gpu_ref_* for the tests
compile_all.mojo  offline compile of every kernel for sm_80, sm_90, gfx942, apple-m3

The extension module itself is mojo/_native_gpu.mojo; bench/device_check.sh
builds and checks it on a GPU machine.
"""

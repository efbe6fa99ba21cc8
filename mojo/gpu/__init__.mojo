"""GPU kernels (NVIDIA, AMD, Apple) for the v1 profiles, with the CPU's exact bits.

arith.mojo     per-element arithmetic: plain functions used by the GPU kernels AND
               by the CPU run of them (cpu_run.mojo), so both compute one thing
kernels.mojo   the device kernels (one thread per output / element / row)
launch.mojo    host side: device buffers, launches, copies (used by _native_gpu.mojo)
cpu_run.mojo   the same launches as plain CPU loops, registered in the CPU extension
               as gpu_ref_* so the tests check the GPU arithmetic without a GPU
compile_all.mojo  offline compile of every kernel for sm_80, sm_90, gfx942, apple-m3
"""

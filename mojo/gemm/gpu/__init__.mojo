"""The GEMM profiles on GPUs (NVIDIA, AMD, Apple), with the CPU's exact bits.

arith.mojo     one thread's view of the arithmetic layer (leaf chain, tree fold,
               integer dots and epilogue), width-1 adapters only
threads.mojo   what ONE thread computes given its coordinates; the launch shapes
               (block and tile sizes) in one place
kernels.mojo   the device kernels: indices -> coordinates -> a threads.mojo body
launch.mojo    host side: device buffers, launches, copies (for _native_gpu.mojo)
cpu_run.mojo   test support: the same launches as plain CPU loops over the same
               bodies, registered in the CPU extension as gpu_ref_gemm_*
The converters are convert/gpu/, the models' ops transformer/gpu/; every kernel is
compiled offline by mojo/compile_all_gpu.mojo (make gpu-compile).
"""

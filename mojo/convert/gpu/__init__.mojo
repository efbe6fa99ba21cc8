"""The converters (bf16, int8 / int15 quantize and dequantize) on GPUs.

arith.mojo     one thread's view of the arithmetic layer, width-1 adapters only
threads.mojo   what ONE thread computes given its coordinates
kernels.mojo   the device kernels (grid-stride loops)
launch.mojo    host side: device buffers, launches, copies (for _native_gpu.mojo)
cpu_run.mojo   test support: the same launches as plain CPU loops over the same
               bodies, registered in the CPU extension as gpu_ref_*
"""

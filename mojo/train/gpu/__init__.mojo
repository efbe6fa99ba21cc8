"""GPU kernels of the training ops: thread bodies (threads.mojo), device kernels
(kernels.mojo) and the CPU run of the bodies for the tests (cpu_run.mojo)."""

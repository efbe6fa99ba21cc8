"""GPU backend of the state-space ops: per-thread bodies, kernels, their CPU run."""

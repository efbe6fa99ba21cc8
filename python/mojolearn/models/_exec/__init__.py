"""How a model's ops run: the kernel calls of every op on the CPU build
(kernels.py: projections, RMSNorm, RoPE, attention, SiLU, packed weights) and the
device side (device.py: choosing the device, device buffers, DeviceTensor, uploads).

May import: ``models._base`` and the package's private layers.
"""

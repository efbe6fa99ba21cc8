"""The native core, the lowest layer: which compiled build serves a call and how
it runs. The CPU builds and their ISA probe (isa.py: the builds; cpu.py: the probe and
the choice, MOJOLEARN_ISA), this machine's caches and name (box.py), the device choice
and the GPU build (device.py: set_device, vendor, MOJOLEARN_DEVICE), loading a build
(loader.py: native, cpu_native, the cache plan, the block table), the kernels' thread
count and task splits (threads.py) and the declared interface of every native entry
(api.py, from which the ``_native_*.pyi`` stubs are rendered).

May import: the standard library and the compiled modules (``mojolearn._native_*``,
which import nothing of this package). Nothing above it.
"""

"""Registration of the CPU GEMM entries in the extension module."""
from std.python import PythonObject
from std.python.bindings import PythonModuleBuilder


def register_gemm(mut m: PythonModuleBuilder) raises:
    pass

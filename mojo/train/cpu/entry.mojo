"""Registration of the training primitives' entries (plain integer arguments from the
Python layer, which has validated them)."""
from std.python import PythonObject
from std.python.bindings import PythonModuleBuilder


def register_train(mut m: PythonModuleBuilder) raises:
    pass

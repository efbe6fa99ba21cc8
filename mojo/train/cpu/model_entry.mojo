"""Registration of the model-backward entries (attention, the gated MLP, RoPE):
plain integer arguments from the Python layer, which has validated them."""
from std.python import PythonObject
from std.python.bindings import PythonModuleBuilder


def register_train_model(mut m: PythonModuleBuilder) raises:
    pass

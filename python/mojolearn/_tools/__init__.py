"""The command-line tools (``python -m mojolearn conformance | quality | drift``):
the conformance run against the golden bits (conformance.py), the quality gate of a
profile on a real model (quality.py) and the drift report between profiles
(drift.py); re-exported by the public modules of the same names.

The top layer: may import everything below it, the models included.
"""

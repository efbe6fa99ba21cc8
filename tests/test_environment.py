"""Foundation: loading the extension leaves the process environment as it was, so
child processes (pip, python, mojo) see the caller's interpreter and paths."""
import os
import subprocess
import sys

import numpy as np

from mojolearn import linalg


def test_child_process_sees_the_same_interpreter():
    """Foundation: after kernel calls a child `python` still runs this interpreter's
    environment (the Mojo runtime's PYTHONEXECUTABLE / PYTHONPATH edits are undone)."""
    linalg.matmul(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32))
    out = subprocess.run(
        [sys.executable, "-c", "import os, sys; print(sys.prefix); print(os.environ.get('PYTHONEXECUTABLE'))"],
        capture_output=True, text=True, timeout=60, env=None,
    )
    prefix, exe = out.stdout.split()
    assert prefix == sys.prefix
    assert exe == str(os.environ.get("PYTHONEXECUTABLE"))

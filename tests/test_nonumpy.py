"""Foundation: `import mojolearn` and every kernel work with numpy absent (inputs as
buffers or nested lists, results as mojolearn.Array)."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CODE = r"""
import sys
sys.modules["numpy"] = None  # any import of numpy now fails
import array
import mojolearn
from mojolearn import linalg, lowbit
a = memoryview(array.array("f", [1.0, -2.0, 0.5, 4.0, 3.0, 1.5])).cast("B").cast("f", (2, 3))
b = memoryview(array.array("f", [1.0, 0.0, 2.0, 1.0, 0.0, 3.0])).cast("B").cast("f", (3, 2))
c = linalg.matmul(a, b)
assert c.tolist() == [[-3.0, -0.5], [10.0, 7.5]], c.tolist()
bits = linalg.to_bf16(a)
assert bits.dtype == "uint16" and linalg.from_bf16(bits).tolist() == a.tolist()
q = linalg.quantize_int8(a)
assert q[0].dtype == "int8" and q[1].dtype == "int32"
assert linalg.matmul_int8(a, a).shape == (2, 2)
assert linalg.matmul_int15(a, a).shape == (2, 2)
assert linalg.matmul_bf16(a, linalg.to_bf16(b)).tolist() == c.tolist()
w = lowbit.pack({"w": [[1.0, 2.0], [3.0, 4.0]]}, "int8")
assert lowbit.format_of(w) == "int8"
mv = memoryview(c)
assert mv.shape == (2, 2)
assert "numpy" not in sys.modules or sys.modules["numpy"] is None
print("ok")
"""


def test_everything_works_without_numpy():
    """Foundation: no numpy import anywhere in the package path (kernels, lowbit)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    r = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().endswith("ok")

"""contracts/ is the authority: every rule id in the contracts is checked by at least
one test that names it, and every test in the kernel test files names its rule."""
import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FP32 = ROOT / "contracts" / "gemm" / "IDENTICAL_FP32_CONTRACT.md"
LOWBIT = ROOT / "contracts" / "gemm" / "IDENTICAL_LOWBIT_CONTRACT.md"
OPS = ROOT / "contracts" / "ops" / "IDENTICAL_NN_CONTRACT.md"
OPS_TESTS = ["test_models.py", "test_nn_elementary.py"]
KERNEL_TESTS = ["test_convert.py", "test_gemm_fp32.py", "test_gemm_bf16.py",
                "test_gemm_int.py", "test_identity.py", "test_errors.py"]


def rule_ids():
    fp = re.findall(r"^###? (\d+(?:\.\d+)?)\b", FP32.read_text(), re.M)
    lb = re.findall(r"^## ([LW]-\d)\b", LOWBIT.read_text(), re.M)
    return fp, lb


def _docstrings():
    out = {}
    for f in sorted((ROOT / "tests").glob("test_*.py")):
        tree = ast.parse(f.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
                out[(f.name, node.name)] = ast.get_docstring(node) or ""
    return out


def test_every_rule_has_a_test():
    """Contracts: no rule without a test (each id appears in some test's docstring)."""
    fp, lb = rule_ids()
    assert {"6.1", "6.2", "6.3", "6.4", "6.5", "6.6", "7", "8", "9"} <= set(fp)
    assert {f"L-{i}" for i in range(1, 8)} | {f"W-{i}" for i in range(1, 5)} <= set(lb)
    docs = " ".join(_docstrings().values())
    missing = [r for r in fp if not re.search(rf"(?<![\d.]){re.escape(r)}(?![\d])", docs)]
    missing += [r for r in lb if r not in docs]
    assert not missing, f"rules with no test naming them: {missing}"


def test_every_kernel_test_names_its_rule():
    """Contracts: each kernel test's docstring names the rule it checks."""
    pat = re.compile(r"(?<![\d.])(6\.[1-6]|[789])(?![\d])|[LW]-\d")
    bad = [f"{f}::{n}" for (f, n), d in _docstrings().items()
           if f in KERNEL_TESTS and not pat.search(d)]
    assert not bad, f"tests without a rule id in their docstring: {bad}"


def test_every_ops_rule_has_a_test():
    """Contracts: every M-n rule of the ops contract is named by a test, and every test
    of the ops test files names an M-n rule."""
    ids = re.findall(r"^## (M-\d+)\b", OPS.read_text(), re.M)
    assert [f"M-{i}" for i in range(1, 31)] == ids
    docs = _docstrings()
    alltext = " ".join(docs.values())
    missing = [r for r in ids if not re.search(rf"{r}(?!\d)", alltext)]
    assert not missing, f"ops rules with no test naming them: {missing}"
    bad = [f"{f}::{n}" for (f, n), d in docs.items() if f in OPS_TESTS
           and not re.search(r"M-\d+", d)]
    assert not bad, f"ops tests without a rule id in their docstring: {bad}"


def test_contract_test_files_exist():
    """Contracts: every test file a rule cites exists."""
    for p in (FP32, LOWBIT, OPS):
        for name in set(re.findall(r"tests/(test_\w+\.py)", p.read_text())):
            assert (ROOT / "tests" / name).exists(), name

"""contracts/ is the authority: every rule id in the contracts is checked by at least
one test that names it, every test in the kernel test files names its rule, and every
per-element rule has exactly one defining home in the arithmetic layer (mojo/arith/)."""
import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FP32 = ROOT / "contracts" / "gemm" / "IDENTICAL_FP32_CONTRACT.md"
LOWBIT = ROOT / "contracts" / "gemm" / "IDENTICAL_LOWBIT_CONTRACT.md"
OPS = ROOT / "contracts" / "ops" / "IDENTICAL_NN_CONTRACT.md"
OPS_TESTS = ["test_models.py", "test_nn_elementary.py"]
SSM = ROOT / "contracts" / "ops" / "IDENTICAL_SSM_CONTRACT.md"
SSM_TESTS = ["test_models_mamba.py", "test_gpu_ssm.py", "test_gpu_mamba.py"]
TRAIN = ROOT / "contracts" / "ops" / "IDENTICAL_TRAIN_CONTRACT.md"
TRAIN_TESTS = ["test_training_primitives.py", "test_training_model.py", "test_training_ranks.py",
                "test_training_mamba1.py", "test_training_mamba2.py"]
ARITH = ROOT / "mojo" / "arith"
KERNEL_TESTS = ["test_convert.py", "test_gemm_fp32.py", "test_gemm_bf16.py",
                "test_gemm_int.py", "test_identity.py", "test_errors.py"]


# A rule id of the fp32 contract as a test names it: a dotted id (6.3, 7.1) on its own,
# a bare section number (7, 8, 9) only after "rule(s)" / "section(s)", as one of its
# subsections (7.1 names section 7), or heading a docstring ("7: ...", "8 (...)",
# "9 for ..."), so that "7 leaves" or "k = 8" is never read as a rule.
_LIST = r"(?:[\d.]+(?:,\s*|\s+and\s+|\s*/\s*|\s+or\s+))*"


def _fp_id_pattern(r):
    if "." in r:
        return rf"(?<![\d.]){re.escape(r)}(?![\d])"
    return (rf"\b(?:[Rr]ules?|[Ss]ections?)\s+{_LIST}{re.escape(r)}(?![\d.])"
            rf"|(?<![\d.]){re.escape(r)}\.\d+(?![\d.])"
            rf"|^{re.escape(r)}(?=:| \(| for )")


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
    missing = [r for r in fp if not re.search(_fp_id_pattern(r), docs)]
    missing += [r for r in lb if r not in docs]
    assert not missing, f"rules with no test naming them: {missing}"


def test_every_kernel_test_names_its_rule():
    """Contracts: each kernel test's docstring names the rule it checks."""
    pat = re.compile("|".join([_fp_id_pattern(r) for r in ("6.1", "6.2", "6.3", "6.4", "6.5",
                                                            "6.6", "7", "8", "9")]
                              + [r"[LW]-\d"]))
    bad = [f"{f}::{n}" for (f, n), d in _docstrings().items()
           if f in KERNEL_TESTS and not pat.search(d)]
    assert not bad, f"tests without a rule id in their docstring: {bad}"


def test_every_ops_rule_has_a_test():
    """Contracts: every M-n rule of the ops contract is named by a test, and every test
    of the ops test files names an M-n rule."""
    ids = re.findall(r"^## (M-\d+)\b", OPS.read_text(), re.M)
    assert [f"M-{i}" for i in range(1, 35)] == ids
    docs = _docstrings()
    alltext = " ".join(docs.values())
    missing = [r for r in ids if not re.search(rf"{r}(?!\d)", alltext)]
    assert not missing, f"ops rules with no test naming them: {missing}"
    bad = [f"{f}::{n}" for (f, n), d in docs.items() if f in OPS_TESTS
           and not re.search(r"M-\d+", d)]
    assert not bad, f"ops tests without a rule id in their docstring: {bad}"


def test_every_ssm_rule_has_a_test():
    """Contracts: every S-n rule of the state-space contract is named by a test, and every
    test of the Mamba model tests names an S-n rule."""
    ids = re.findall(r"^## (S-\d+)\b", SSM.read_text(), re.M)
    assert [f"S-{i}" for i in range(1, 36)] == ids
    docs = _docstrings()
    alltext = " ".join(docs.values())
    missing = [r for r in ids if not re.search(rf"{r}(?!\d)", alltext)]
    assert not missing, f"state-space rules with no test naming them: {missing}"
    bad = [f"{f}::{n}" for (f, n), d in docs.items() if f in SSM_TESTS
           and not re.search(r"S-\d+", d)]
    assert not bad, f"Mamba tests without a rule id in their docstring: {bad}"


def _train_ids_named(name, doc):
    """The T-n rules a test names: "T-n" in its docstring, or a `_T<n>_` / `_T<n>` token
    in its function name (test_T5_T6_linear_backward names T-5 and T-6)."""
    ids = {f"T-{n}" for n in re.findall(r"(?<![\w-])T-(\d+)(?!\d)", doc)}
    ids |= {f"T-{n}" for n in re.findall(r"_T(\d+)(?=_|$)", name)}
    return ids


def _check_training_rules(contract_text, docs):
    """The failures of test_every_training_rule_has_a_test for a contract text and the
    tests' docstrings (a list of messages; empty when it holds)."""
    errs = []
    ids = re.findall(r"^## (T-\d+)\b", contract_text, re.M)
    if ids != [f"T-{i}" for i in range(1, 87)]:
        errs.append(f"the T-n headings are not exactly T-1 .. T-86 in order: {ids}")
    named = set()
    for (f, n), d in docs.items():
        named |= _train_ids_named(n, d)
    missing = [r for r in ids if r not in named]
    if missing:
        errs.append(f"training rules with no test naming them: {missing}")
    bad = [f"{f}::{n}" for (f, n), d in docs.items() if f in TRAIN_TESTS
           and not _train_ids_named(n, d)]
    if bad:
        errs.append(f"training tests naming no T-n rule: {bad}")
    return errs


def test_every_training_rule_has_a_test():
    """Contracts: the ## T-n headings of the training contract are exactly T-1 .. T-86 in
    order, every T-n is named by a test (docstring "T-n" or a _T<n>_ token in its name),
    and every test of the training test files names a T rule. The check itself fails on a
    copy with a heading deleted, on a rule no test names, and on an unnamed test."""
    text = TRAIN.read_text()
    docs = _docstrings()
    errs = _check_training_rules(text, docs)
    assert not errs, "\n".join(errs)
    # the check can fail: a deleted heading, a rule nobody names, a test naming nothing
    broken = re.sub(r"^## T-19\b[^\n]*\n", "", text, count=1, flags=re.M)
    assert broken != text and _check_training_rules(broken, docs)
    renamed = re.sub(r"^## T-62\b", "## T-63", text, count=1, flags=re.M)
    assert any("not exactly" in e for e in _check_training_rules(renamed, docs))
    unnamed = {k: ("" if "T-22" in v or re.search(r"_T22(?=_|$)", k[1]) else v)
               for k, v in docs.items()}
    unnamed = {(f, n.replace("_T22", "_x")): d for (f, n), d in unnamed.items()}
    assert any("T-22" in e for e in _check_training_rules(text, unnamed))
    extra = dict(docs)
    extra[("test_training_primitives.py", "test_something")] = "no rule here"
    assert any("test_something" in e for e in _check_training_rules(text, extra))


def test_contract_test_files_exist():
    """Contracts: every test file a rule cites exists."""
    for p in (FP32, LOWBIT, OPS, SSM, TRAIN):
        for name in set(re.findall(r"tests/(test_\w+\.py)", p.read_text())):
            assert (ROOT / "tests" / name).exists(), name


# ------------------------------------------------------------------ one home per rule
# The per-element rules, each defined by one function of mojo/arith/ whose docstring
# has a line `Rule: <id>[, <id>...]`.
ARITH_RULES = {"6.1", "6.2", "6.3", "6.4", "L-1", "L-2", "L-3", "L-4", "L-5", "L-6",
               "W-1", "W-2", "W-3", "M-5", "M-7", "M-8", "M-9", "M-14", "M-32"}
_ID = r"(?:[LWM]-\d+|\d+\.\d+)"
RULE_TAG = re.compile(rf"^\s*(?:\"\"\")?Rule: ({_ID}(?:, {_ID})*)\s*$", re.M)
# The constants of a rule, each written in exactly one file, under mojo/arith/
# (searched in code, not in docstrings or comments).
RULE_CONSTANTS = {
    "bf16 rounding bias (L-2)": r"0x7FFF\b(?!F)",
    "bf16 NaN quieting bit (L-2)": r"0x0040\b",
    "leaf size (6.2)": r"max\(\s*128\b",
    "int15 clamp (W-1)": r"\b16383\b",
    "round to nearest even of the codes (L-4)": r"roundeven",
    "smallest normal, for DAZ / ftz (6.1)": r"0x00800000",
    "int15 planes joined by shifts, hi << 7 and HH << 14 (W-2)": r"<<\s*(?:7|14)\b",
}
# Second spellings of a rule that must not appear in code anywhere under mojo/ outside
# mojo/arith/ (files: a glob under mojo/): the rule's function is called instead.
FORBIDDEN_OUTSIDE_ARITH = {
    "a leaf-size constant instead of arith.tree.leaf_size (6.2)":
        ("**/*.mojo", r"\bcomptime\s+\w*LEAF\w*\s*="),
    "a leaf count spelled (k + L - 1) // L instead of arith.tree.leaf_count (6.2)":
        ("**/*.mojo", r"\+\s*(?:leaf|LEAF|L|l)\s*-\s*1\s*\)\s*//\s*(?:leaf|LEAF|L|l)\b"),
    "fp32.v1's chain step as a bare fma instead of arith.tree.chain_step(_daz) (6.3)":
        ("gemm/cpu/*.mojo", r"\bfma\("),
    # a bare fma chain leans on the hardware's DAZ for its per-step flush, which the
    # explicit-flush build (every non-x86 target) does not have
    "a serial fma chain (RMSNorm, P.V) as a bare fma instead of arith.tree.chain_step_daz (6.3)":
        ("transformer/cpu/*.mojo", r"\bfma\("),
    "an int15 code joined as hi * 128 + lo instead of arith.quant.join15* (W-2)":
        ("**/*.mojo", r"\)\s*\*\s*128\s*\+"),
}


def _code_only(text):
    text = re.sub(r'"""(.*?)"""', "", text, flags=re.S)
    return re.sub(r"#[^\n]*", "", text)


def _mojo_files():
    return sorted((ROOT / "mojo").rglob("*.mojo"))


def test_every_arith_rule_has_one_home():
    """Contracts 6.1-6.4, L-1..L-6, W-1..W-3, M-5, M-7, M-8, M-9, M-14, M-32: each per-element
    rule has exactly one defining function in mojo/arith/ (a `Rule:` line in its
    docstring), every tag names a contract rule, and no file outside mojo/arith/
    claims to define one."""
    fp, lb = rule_ids()
    ops = re.findall(r"^## (M-\d+)\b", OPS.read_text(), re.M)
    homes = {}
    for f in _mojo_files():
        for m in RULE_TAG.finditer(f.read_text()):
            for rid in m.group(1).split(", "):
                homes.setdefault(rid, []).append(str(f.relative_to(ROOT)))
    outside = {r: fs for r, fs in homes.items() if any(not x.startswith("mojo/arith/") for x in fs)}
    assert not outside, f"rule homes outside mojo/arith/: {outside}"
    twice = {r: fs for r, fs in homes.items() if len(fs) != 1}
    assert not twice, f"rules defined more than once: {twice}"
    assert ARITH_RULES <= set(homes), f"rules without a home: {sorted(ARITH_RULES - set(homes))}"
    unknown = set(homes) - set(fp) - set(lb) - set(ops)
    assert not unknown, f"tags naming no contract rule: {sorted(unknown)}"


def test_rule_constants_have_one_home():
    """Contracts 6.1, 6.2, L-2, L-4, W-1: a search for a rule's constant (the bf16
    rounding bias, the int15 clamp, the leaf size, ...) finds one file, in mojo/arith/."""
    bad = {}
    for name, pat in RULE_CONSTANTS.items():
        files = [str(f.relative_to(ROOT)) for f in _mojo_files()
                 if re.search(pat, _code_only(f.read_text()))]
        if len(files) != 1 or not files[0].startswith("mojo/arith/"):
            bad[name] = files
    assert not bad, f"rule constants not in exactly one arith file: {bad}"


def test_rule_id_pattern_is_strict():
    """Contracts 7: a count such as "7 leaves" is not read as rule 7; "rule 7",
    "rules 6.2 and 8" and "7.1" are."""
    assert not re.search(_fp_id_pattern("7"), "7 leaves give (p01 + p23) + (p45 + p6)")
    assert re.search(_fp_id_pattern("7"), "refused by rule 7")
    assert re.search(_fp_id_pattern("8"), "rules 6.2 and 8")
    assert re.search(_fp_id_pattern("7.1"), "broadcast as numpy (7.1)")
    assert re.search(_fp_id_pattern("8"), "8: k = 0 gives +0.0")
    assert not re.search(_fp_id_pattern("8"), "k = 8 gives one leaf")
    assert not re.search(_fp_id_pattern("6.1"), "version 16.1")


def test_no_second_spelling_outside_arith():
    """Contracts 6.2, 6.3, W-2: no kernel spells a rule the arithmetic layer defines
    (a leaf-size constant, a leaf count of its own, the fp32.v1 chain step as a bare fma
    in the GEMM kernels, an int15 join by hand); each calls the rule's one home."""
    bad = {}
    for name, (glob, pat) in FORBIDDEN_OUTSIDE_ARITH.items():
        files = [str(f.relative_to(ROOT)) for f in sorted((ROOT / "mojo").glob(glob))
                 if ARITH not in f.parents and re.search(pat, _code_only(f.read_text()))]
        if files:
            bad[name] = files
    assert not bad, f"second spellings of a rule outside mojo/arith/: {bad}"
    # the patterns do find the homes' own spellings (a pattern that matches nothing
    # anywhere would pass vacuously)
    arith = " ".join(_code_only(f.read_text()) for f in sorted(ARITH.glob("*.mojo")))
    for name in ("a leaf count spelled (k + L - 1) // L instead of arith.tree.leaf_count (6.2)",
                 "fp32.v1's chain step as a bare fma instead of arith.tree.chain_step(_daz) (6.3)"):
        assert re.search(FORBIDDEN_OUTSIDE_ARITH[name][1], arith), name

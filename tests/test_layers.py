"""The Python package in layers: every import of the package's own modules goes down.

The order below is the one the layer packages' ``__init__`` docstrings declare, lowest
first. Every import statement of a module of ``python/mojolearn`` (at module level or
inside a function alike) and every ``importlib.import_module("mojolearn...")`` with a
literal name is read from the sources (nothing is imported) and resolved to the module
it loads; the target must stand strictly earlier in the order than the importer. So
there is no circle (a circle needs an import that goes up) and no function-level
import can hide one. A module that is not placed in the order fails too: a new file
has to be given its layer.
"""
from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "python" / "mojolearn"

# lowest first; a name ending in ".*" places every module under that package (in the
# order given after it, if listed, else unordered among themselves and checked for
# circles only)
ORDER = [
    # the native core
    "mojolearn._core", "mojolearn._core.isa", "mojolearn._core.box", "mojolearn._core.cpu",
    "mojolearn._core.device", "mojolearn._core.loader", "mojolearn._core.threads",
    "mojolearn._core.api",
    # data in and out
    "mojolearn._data", "mojolearn._data.buf", "mojolearn._data.dlpack", "mojolearn._data.array",
    "mojolearn._data.buffers", "mojolearn._data.validate", "mojolearn._data.recycle",
    # the profile table, modes and checkpoint rules
    "mojolearn._table", "mojolearn._table.table", "mojolearn._table.measured",
    "mojolearn._table.modes", "mojolearn._table.profiles", "mojolearn._table.checkpoint_rules",
    # the products
    "mojolearn._ops", "mojolearn._ops.calls", "mojolearn._ops.operands", "mojolearn._ops.convert",
    "mojolearn._ops.lowbit", "mojolearn._ops.prepared", "mojolearn._ops.gemm",
    "mojolearn._ops.ksplit",
    # files
    "mojolearn._io", "mojolearn._io.layout", "mojolearn._io.checkpoint",
    # the public faces of the layers above (re-exports only)
    "mojolearn.linalg", "mojolearn.lowbit", "mojolearn.modes", "mojolearn.profiles",
    "mojolearn.checkpoint",
    # the models, by sub-layer
    "mojolearn.models._base", "mojolearn.models._base.inputs", "mojolearn.models._base.config",
    "mojolearn.models._base.state",
    "mojolearn.models._exec", "mojolearn.models._exec.kernels", "mojolearn.models._exec.device",
    "mojolearn.models._load", "mojolearn.models._load.loader",
    "mojolearn.models._gpu", "mojolearn.models._gpu.program",
    "mojolearn.models._transformer", "mojolearn.models._transformer.block",
    "mojolearn.models._transformer.causal_lm", "mojolearn.models._transformer.parallel",
    "mojolearn.models._ssm", "mojolearn.models._ssm.config", "mojolearn.models._ssm.gpu",
    "mojolearn.models._ssm.model",
    "mojolearn.models._text", "mojolearn.models._text.tokenizer",
    "mojolearn.models.config", "mojolearn.models.loader", "mojolearn.models.block",
    "mojolearn.models.causal_lm", "mojolearn.models.parallel", "mojolearn.models.tokenizer",
    "mojolearn.models",
    # training
    "mojolearn._train", "mojolearn._train.kernels", "mojolearn._train.primitives",
    "mojolearn._train.schedule", "mojolearn._train.optim", "mojolearn._train.model",
    "mojolearn._train.ranks",
    "mojolearn._train.ssm",
    "mojolearn._train.ssm.mamba2",
    "mojolearn._train.ssm.mamba1",
    "mojolearn._train.ssm.model",
    "mojolearn._train.device", "mojolearn._train.trainer",
    "mojolearn.training",
    # the torch mode
    "mojolearn._torch", "mojolearn._torch.mode", "mojolearn.torch",
    # the tools
    "mojolearn._tools", "mojolearn._tools.quality", "mojolearn._tools.drift",
    "mojolearn._tools.conformance", "mojolearn._tools.profile",
    "mojolearn.quality", "mojolearn.drift", "mojolearn.conformance",
    # the package and its command line
    "mojolearn", "mojolearn.__main__",
]
# compiled modules: they import nothing of the package, so they stand below everything
NATIVE_PREFIX = "mojolearn._native_"
MAX_FILES = 12  # Python files a folder (about ten: a folder is one layer, not a heap)


def _modname(pkg_root: Path, path: Path) -> str:
    parts = list(path.relative_to(pkg_root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _resolve(importer: str, is_pkg: bool, level: int, module: str | None) -> str:
    if not level:
        return module or ""
    base = importer.split(".") if is_pkg else importer.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def imports_of(pkg_root: Path) -> dict:
    """{module: [(target module, line)]} for every import of a package module."""
    modules = {}
    for path in sorted(pkg_root.rglob("*.py")):
        modules[_modname(pkg_root, path)] = path
    known = set(modules)
    edges = {}
    for name, path in modules.items():
        is_pkg = path.name == "__init__.py"
        out = []
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.ImportFrom):
                base = _resolve(name, is_pkg, node.level, node.module)
                if not (base == "mojolearn" or base.startswith("mojolearn.")):
                    continue
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    # `from pkg import sub` loads the submodule; `from mod import name` the module
                    targets.append(sub if (sub in known or sub.startswith(NATIVE_PREFIX)) else base)
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names
                           if a.name == "mojolearn" or a.name.startswith("mojolearn.")]
            elif (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module"
                  and node.args and isinstance(node.args[0], ast.Constant)
                  and str(node.args[0].value).startswith("mojolearn")):
                targets = [node.args[0].value]
            out += [(t, node.lineno) for t in targets]
        edges[name] = out
    return edges


def violations(pkg_root: Path, order=ORDER) -> list:
    """Each import that is not strictly downward, as a readable line; [] when clean."""
    rank = {m: i for i, m in enumerate(order)}
    edges = imports_of(pkg_root)
    bad = []
    for mod in sorted(edges):
        if mod not in rank:
            bad.append(f"{mod} has no place in the layer order (tests/test_layers.py ORDER)")
            continue
        for target, line in edges[mod]:
            if target.startswith(NATIVE_PREFIX):
                continue
            if target not in rank:
                bad.append(f"{mod}:{line} imports {target}, which is not a module of the package")
            elif rank[target] >= rank[mod]:
                bad.append(f"{mod}:{line} imports {target}, which stands at or above it")
    return bad


def cycles(pkg_root: Path) -> list:
    """The import circles (strongly connected components of more than one module, or a
    module importing itself), each as a sorted list."""
    edges = {m: sorted({t for t, _ in e}) for m, e in imports_of(pkg_root).items()}
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, []):
            if w not in edges:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in edges.get(v, []):
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_every_import_goes_down():
    """Layers: no import of a package module reaches a module at or above it."""
    bad = violations(PKG)
    assert not bad, "imports that do not go down:\n" + "\n".join(bad)


def test_no_import_circle():
    """Layers: the package's import graph has no circle."""
    assert cycles(PKG) == []


def test_every_module_has_a_layer_and_every_layer_a_module():
    """Layers: the order names exactly the modules there are (no stale entries)."""
    mods = {_modname(PKG, p) for p in PKG.rglob("*.py")}
    assert sorted(set(ORDER) - mods) == []
    assert sorted(mods - set(ORDER)) == []


def test_folders_stay_small_and_say_what_they_are():
    """Layers: every folder holds at most about ten Python files, and every layer
    package's __init__ says what the layer is and what it may import."""
    for folder in [PKG] + sorted(p for p in PKG.rglob("*") if p.is_dir() and p.name != "__pycache__"):
        files = list(folder.glob("*.py"))
        assert len(files) <= MAX_FILES, f"{folder.relative_to(PKG)}: {len(files)} Python files"
        init = folder / "__init__.py"
        if folder.name.startswith("_") and init.exists():
            doc = " ".join((ast.get_docstring(ast.parse(init.read_text())) or "").split())
            assert "may import" in doc.lower(), f"{init}: no layer docstring"


@pytest.mark.parametrize("where, line, what", [
    # an upward import at module level
    ("_core/isa.py", "from ..models import CausalLM\n", "upward"),
    # an upward import hidden in a function
    ("_data/buf.py", "def _late():\n    from .._ops import gemm\n    return gemm\n", "upward"),
    # a circle through two modules of one layer (validate above buffers)
    ("_data/buffers.py", "def _late():\n    from . import validate\n    return validate\n", "circle"),
    # an import by name through importlib
    ("_table/table.py", "import importlib\n_m = importlib.import_module('mojolearn.linalg')\n",
     "upward"),
])
def test_checker_catches_a_planted_import(tmp_path, where, line, what):
    """Layers (sabotage): the checker is shown failing on a copy of the package with one
    bad import planted: an upward one, one inside a function, one through importlib, and
    a circle."""
    root = tmp_path / "mojolearn"
    shutil.copytree(PKG, root, ignore=shutil.ignore_patterns("*.so", "__pycache__", "_results"))
    assert violations(root) == [] and cycles(root) == []  # the copy is clean
    target = root / where
    target.write_text(target.read_text() + "\n" + line)
    bad = violations(root)
    assert bad and all(where.replace("/", ".").removesuffix(".py") in b for b in bad), bad
    if what == "circle":
        assert cycles(root), "the planted circle was not found"

"""The package's layer rule, read from the imports (ast): specs/presets -> models -> sweeps -> plots -> widgets -> cli.

A module may import from its own layer and the layers below it, never above; models and sweeps never import
plotting or widget libraries. Imports inside functions count too (they are how the CLI stays fast to start).

Inside ``models/`` (the second house, issue 18): ``step`` and ``queueing`` are the ground floor, ``layouts``,
``moe``, ``serving`` and ``offload`` the wings. ``queueing`` imports nothing else from ``models/``; ``step``
imports only ``step``; a wing imports the ground and itself, never another wing. Nothing in ``models/`` reads a
file, and only ``models/step/engine.py`` (the one door) resolves preset names.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "llmexplore"

#: layer of each top-level part of the package (a sub-package or a module), lowest first
LAYERS = {
    "errors": 0, "units": 0, "labels": 0, "_spec_base": 0, "deployment": 0, "_check": 0, "specs": 0, "presets": 0, "catalog": 0,
    "models": 1, "measured": 0, "lsq": 0,
    "transfer": 1,
    "launch": 1,
    "storage": 1,
    "calibrate": 2, "kernelfit": 2, "traces": 2, "validate": 2, "benchfiles": 0, "sweeps": 2, "findings": 2,
    "plots": 3,
    "widgets": 4, "nbtools": 4, "nbparams": 4,
    "report": 5,
    "cli": 6, "__main__": 6, "__init__": 6,
}
#: third-party packages a layer may not import (numbers only below plotting)
FORBIDDEN = {1: ("plotly", "ipywidgets", "anywidget", "IPython", "pandas"), 2: ("plotly", "ipywidgets", "anywidget")}
# pandas is allowed from the sweeps up: models are numpy in, numpy out.


def _modules() -> list[Path]:
    return sorted(p for p in PKG.rglob("*.py") if "templates" not in p.parts)


def _part(rel: Path) -> str:
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imports(source: str, rel: Path) -> list[tuple[int, str]]:
    """(line, absolute dotted name) of every import in the module at ``rel`` (relative to the package),
    relative imports resolved."""
    tree = ast.parse(source)
    package = ["llmexplore", *rel.with_suffix("").parts][:-1]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if node.module is None or node.level:  # `from . import x`: each name may be a submodule
                out += [(node.lineno, f"{mod}.{a.name}") for a in node.names]
            else:
                out.append((node.lineno, mod))
    return out


def _target_part(name: str) -> str | None:
    parts = name.split(".")
    if parts[0] != "llmexplore" or len(parts) < 2:
        return None
    return parts[1]


def _violations(source: str, rel: Path) -> list[str]:
    own = LAYERS[_part(rel)]
    bad = []
    for line, name in _imports(source, rel):
        target = _target_part(name)
        if target is not None and target in LAYERS and LAYERS[target] > own:
            bad.append(f"line {line}: {name} (layer {LAYERS[target]} > {own})")
        top = name.split(".")[0]
        if top in FORBIDDEN.get(own, ()):
            bad.append(f"line {line}: {name} (not allowed in layer {own})")
    return bad


def test_every_part_has_a_layer():
    missing = sorted({_part(p.relative_to(PKG)) for p in _modules()} - set(LAYERS))
    assert not missing, f"add these to LAYERS in {__file__}: {missing}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PKG)))
def test_imports_flow_one_way(path):
    bad = _violations(path.read_text(encoding="utf-8"), path.relative_to(PKG))
    assert not bad, f"{path.relative_to(PKG)} imports upwards: {bad}"


def test_the_rule_catches_an_upward_import():
    """The checker itself: a model importing a sweep (relative or absolute), or plotly, is reported."""
    source = ("from ..sweeps import layouts\nimport plotly.graph_objects as go\n"
              "def f():\n    from llmexplore.widgets import moe\n")
    bad = _violations(source, Path("models") / "probe.py")
    assert [b.split(" (")[0] for b in bad] == ["line 1: llmexplore.sweeps.layouts", "line 2: plotly.graph_objects",
                                               "line 4: llmexplore.widgets"]
    assert _violations("from . import engine\nfrom .. import _check\n", Path("models") / "probe.py") == []


#: what each part of models/ may import from models/ (itself included)
GROUND = {"step": {"step"}, "queueing": {"queueing"}}
WINGS = ("layouts", "moe", "serving", "offload")
MODELS_MAY_IMPORT = {**GROUND, **{w: {"step", "queueing", w} for w in WINGS}}
#: modules that read files or resolve presets: not in models/ (engine.py, the door, may use presets)
FILE_READERS = ("csv", "io", "pathlib", "os", "glob", "shutil", "yaml", "json", "llmexplore.presets")
DOOR = Path("models") / "step" / "engine.py"


def _models_violations(source: str, rel: Path) -> list[str]:
    """Imports of a module under models/ that break the ground/wing rule or read files."""
    if rel.parts[0] != "models" or len(rel.parts) < 3:
        return []
    own = rel.parts[1]
    bad = []
    for line, name in _imports(source, rel):
        parts = name.split(".")
        if parts[:2] == ["llmexplore", "models"] and len(parts) > 2 and parts[2] not in MODELS_MAY_IMPORT[own]:
            bad.append(f"line {line}: {name} ({own} may import only {sorted(MODELS_MAY_IMPORT[own])})")
        reads = name in FILE_READERS or parts[0] in FILE_READERS or name.startswith("llmexplore.presets")
        if reads and not (rel == DOOR and name.startswith("llmexplore.presets")):
            bad.append(f"line {line}: {name} (models/ reads no files and resolves no presets outside {DOOR})")
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open":
            bad.append(f"line {node.lineno}: open() (models/ reads no files)")
    return bad


def test_models_parts_are_ground_or_wing():
    parts = sorted(p.name for p in (PKG / "models").iterdir() if p.is_dir() and p.name != "__pycache__")
    assert parts == sorted(MODELS_MAY_IMPORT), parts
    loose = sorted(p.name for p in (PKG / "models").glob("*.py") if p.name != "__init__.py")
    assert not loose, f"every model module lives in the ground or a wing: {loose}"


@pytest.mark.parametrize("path", sorted((PKG / "models").rglob("*.py")), ids=lambda p: str(p.relative_to(PKG)))
def test_models_ground_and_wings(path):
    bad = _models_violations(path.read_text(encoding="utf-8"), path.relative_to(PKG))
    assert not bad, f"{path.relative_to(PKG)}: {bad}"


def test_the_models_rule_catches_a_wing_importing_a_wing():
    rel = Path("models") / "serving" / "probe.py"
    src = ("from ..moe import routing\nfrom ..step import engine\nfrom ...presets import resolve\n"
           "import csv\nfrom . import disagg\ndef f():\n    return open('x')\n")
    bad = [b.split(" (")[0] for b in _models_violations(src, rel)]
    assert bad == ["line 1: llmexplore.models.moe.routing", "line 3: llmexplore.presets.resolve", "line 4: csv",
                   "line 7: open()"]
    ground = Path("models") / "step" / "probe.py"
    assert [b.split(" (")[0] for b in _models_violations("from ..queueing import core\n", ground)] == [
        "line 1: llmexplore.models.queueing.core"]
    assert _models_violations("from ...presets import resolve\n", DOOR) == []


@pytest.mark.parametrize("path", sorted((PKG / "plots").rglob("*.py")), ids=lambda p: p.name)
def test_plots_import_no_sweeps(path):
    """Plots draw tidy frames a sweep built; they never compute one (issue 18 §4)."""
    rel = path.relative_to(PKG)
    bad = [f"line {line}: {name}" for line, name in _imports(path.read_text(encoding="utf-8"), rel)
           if _target_part(name) in ("sweeps", "findings")]
    assert not bad, f"{rel} imports a sweep: {bad}"


def _module_file(name: str) -> Path | None:
    """The file of a dotted llmexplore name (a module, or the module a ``from m import name`` names)."""
    parts = name.split(".")[1:]
    while parts:
        f = PKG.joinpath(*parts)
        if f.with_suffix(".py").is_file():
            return f.with_suffix(".py")
        if (f / "__init__.py").is_file():
            return f / "__init__.py"
        parts = parts[:-1]
    return None


def _import_graph() -> dict[Path, set[Path]]:
    """Module -> the modules it imports (anywhere in it, functions included); a package's ``__init__`` is left
    out on both ends: it gathers its submodules' public API, the one place a package may import its own parts."""
    graph = {}
    for path in _modules():
        if path.name == "__init__.py":
            continue
        rel = path.relative_to(PKG)
        targets = {_module_file(n) for _, n in _imports(path.read_text(encoding="utf-8"), rel)
                   if n.startswith("llmexplore.")}
        graph[path] = {t for t in targets if t is not None and t.name != "__init__.py" and t != path}
    return graph


def _cycles(graph: dict) -> list[list]:
    """Every strongly connected set of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
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
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle():
    """No module imports, directly or through others, a module that imports it back (issue 18: "no import
    cycle"); imports inside functions count, as in the layer rule."""
    cycles = [[str(p.relative_to(PKG)) for p in c] for c in _cycles(_import_graph())]
    assert not cycles, f"import cycles: {cycles}"


def test_the_cycle_check_finds_a_cycle():
    a, b, c = Path("a"), Path("b"), Path("c")
    assert _cycles({a: {b}, b: {a, c}, c: set()}) == [[a, b]]
    assert _cycles({a: {b}, b: {c}, c: set()}) == []

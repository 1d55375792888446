"""Project hygiene: environment.yml matches pyproject, notebooks are clean and thin, build output is ignored."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import nbformat
import pytest
import yaml
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
FIXTURE_NOTEBOOKS = sorted((ROOT / "tests" / "fixtures").glob("*.ipynb"))
# PyPI name -> conda-forge name, where they differ (after lower-casing and "_" -> "-").
CONDA_NAMES: dict[str, str] = {}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _conda_specs() -> tuple[dict[str, str], list[str]]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert env["channels"] == ["conda-forge"]
    specs, pip = {}, []
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            pip.extend(dep.get("pip", []))
            continue
        req = Requirement(dep.split("#")[0].strip())
        assert _norm(req.name) not in specs, f"{req.name} listed twice in environment.yml"
        specs[_norm(req.name)] = str(req.specifier)
    return specs, pip


def test_environment_yml_lists_every_pyproject_dependency_with_same_bounds():
    project = _pyproject()["project"]
    wanted = list(project["dependencies"]) + list(project["optional-dependencies"]["dev"])
    conda, pip = _conda_specs()
    problems = []
    for line in wanted:
        req = Requirement(line)
        name = CONDA_NAMES.get(_norm(req.name), _norm(req.name))
        if name not in conda:
            problems.append(f"{req.name}: missing from environment.yml")
        elif set(str(req.specifier).split(",")) != set(conda[name].split(",")):
            problems.append(f"{req.name}: pyproject says {req.specifier or '(any)'!s}, "
                            f"environment.yml says {conda[name] or '(any)'}")
    extra = set(conda) - {CONDA_NAMES.get(_norm(Requirement(x).name), _norm(Requirement(x).name)) for x in wanted}
    problems += [f"{name}: in environment.yml but not in pyproject" for name in sorted(extra - {"python", "pip"})]
    assert not problems, "environment.yml out of sync with pyproject.toml:\n" + "\n".join(problems)
    assert conda["python"] == project["requires-python"]
    assert pip == ["-e ."]


def test_sync_check_notices_a_drift():
    req = Requirement("numpy>=2.0,<3")
    assert set(str(req.specifier).split(",")) != set(str(Requirement("numpy>=2.0").specifier).split(","))


# ---- notebooks ------------------------------------------------------------------------------------------


def test_workbook_has_notebooks():
    assert NOTEBOOKS, "notebooks/ holds no .ipynb"


@pytest.mark.parametrize("path", NOTEBOOKS + FIXTURE_NOTEBOOKS, ids=lambda p: p.name)
def test_committed_notebook_has_no_outputs_or_execution_counts(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    dirty = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and (c.outputs or c.execution_count)]
    assert not dirty, (f"{path.name}: cells {dirty} carry outputs or execution counts (JupyterLab saves them); run "
                       "`make strip` before committing, or `make git-filter` once so git strips them (README)")
    assert "widgets" not in nb.metadata, (f"{path.name}: saved widget state in metadata (JupyterLab saves it); run "
                                          "`make strip` before committing")


@pytest.mark.parametrize("path", NOTEBOOKS + FIXTURE_NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_has_one_parameters_cell_with_upper_case_names(path):
    import papermill as pm

    nb = nbformat.read(path, as_version=4)
    tagged = [i for i, c in enumerate(nb.cells) if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1, f"{path.name}: {len(tagged)} cells tagged 'parameters' (want exactly one)"
    assert nb.cells[tagged[0]].cell_type == "code"
    names = list(pm.inspect_notebook(str(path)))
    assert names, f"{path.name}: the parameters cell defines nothing"
    lower = [n for n in names if not re.fullmatch(r"[A-Z][A-Z0-9_]*", n)]
    assert not lower, f"{path.name}: parameters must be UPPER_CASE: {lower}"


def _python_source(cell_source: str) -> str:
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager().transform_cell(cell_source)  # turns %magics and !shell into Python


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_code_is_thin(path):
    """No def, no for/while loops, no sys.path hacks: logic belongs in the package (STYLE.md 3.7)."""
    nb = nbformat.read(path, as_version=4)
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if "sys.path" in cell.source:
            found.append(f"cell {i}: sys.path")
        tree = ast.parse(_python_source(cell.source))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append(f"cell {i} line {node.lineno}: def {node.name}")
            elif isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
                found.append(f"cell {i} line {node.lineno}: {type(node).__name__.lower().replace('async', '')} loop")
    assert not found, f"{path.name}: move this logic into llmexplore/: {found}"


def test_thin_check_catches_loops_and_defs():
    src = "%matplotlib inline\nfor i in range(3):\n    pass\ndef f():\n    pass\nxs = [i for i in range(3)]"
    kinds = {type(n).__name__ for n in ast.walk(ast.parse(_python_source(src)))}
    assert {"For", "FunctionDef"} <= kinds


# ---- build output stays out of git ------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["reports/index.html", "reports/10_attention_layouts.html",
                                  "reports/executed/10_attention_layouts.ipynb",
                                  "notebooks/10_attention_layouts.executed.ipynb",
                                  "notebooks/.ipynb_checkpoints/10_attention_layouts-checkpoint.ipynb"])
def test_build_output_is_git_ignored(path):
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail("CI=true but this is not a git checkout with git available")
        pytest.skip("not a git checkout")
    result = subprocess.run([git, "check-ignore", "--no-index", "-q", path], cwd=ROOT)
    assert result.returncode == 0, f"{path} is not git-ignored; add it to .gitignore"


def test_python_is_new_enough():
    assert sys.version_info >= (3, 11)


# ---- notebook parameters and findings ---------------------------------------------------------------------


def _parameters_cell(nb):
    return next(c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", []))


@pytest.mark.parametrize("path", NOTEBOOKS + FIXTURE_NOTEBOOKS, ids=lambda p: p.name)
def test_papermill_sees_every_parameter_as_a_literal(path):
    """papermill reads the parameters cell line by line: a second '=' (even in a comment) hides the name, and
    then ``-p NAME`` is refused as unknown. Defaults are literals, so the report can check them up front."""
    import papermill as pm

    nb = nbformat.read(path, as_version=4)
    assigned = [t.id for node in ast.parse(_parameters_cell(nb).source).body if isinstance(node, ast.Assign)
                for t in node.targets if isinstance(t, ast.Name)]
    seen = pm.inspect_notebook(str(path))
    assert list(seen) == assigned, f"{path.name}: papermill sees {list(seen)}, the cell assigns {assigned}"
    for name, info in seen.items():
        try:
            ast.literal_eval(info["default"])
        except (ValueError, SyntaxError):
            pytest.fail(f"{path.name}: {name} = {info['default']} is not a literal (numbers, strings, lists)")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_checks_its_parameters_right_after_the_imports(path):
    from llmexplore.nbtools import parameter_checker

    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    imports = code[1]  # the cell after the parameters
    assert "parameters" in code[0].metadata.get("tags", [])
    call = f'check_parameters("{path.stem}", globals())'
    assert call in imports.source, f"{path.name}: the imports cell must call {call}"
    assert parameter_checker(path) is not None, f"register a parameter check for {path.stem} in nbtools"
    import papermill as pm

    defaults = {k: ast.literal_eval(v["default"]) for k, v in pm.inspect_notebook(str(path)).items()}
    assert parameter_checker(path)(defaults) == {}, f"{path.name}: its own defaults must pass its check"


def _sections(nb):
    """[(heading, [cells])] for every '## ' section."""
    out = []
    for cell in nb.cells:
        head = re.match(r"##\s+(.*)", cell.source) if cell.cell_type == "markdown" else None
        if head:
            out.append((head.group(1).strip(), []))
        elif out:
            out[-1][1].append(cell)
    return out


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_each_section_ends_with_a_generated_finding(path):
    """Reports state their findings: every section (except the explorer and the summary) ends with
    ``say(...)`` of a sentence built by the package."""
    nb = nbformat.read(path, as_version=4)
    missing = []
    for heading, cells in _sections(nb):
        if re.search(r"(?i)live explorer|summary", heading):
            continue
        last_code = [c for c in cells if c.cell_type == "code"][-1:]
        if not last_code or not re.search(r"^say\(", last_code[0].source, re.M):
            missing.append(heading)
    assert not missing, f"{path.name}: sections without a closing say(...) finding: {missing}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_overview_lists_every_numbered_section(path):
    """A notebook's Overview (its first cell) numbers the same sections its ``## N title`` headings do: a
    section added later is listed too (notebooks 05 and 60 had outgrown theirs)."""
    nb = nbformat.read(path, as_version=4)
    first = nb.cells[0].source
    if "**Overview**" not in first:
        return
    listed = [int(n) for n in re.findall(r"^(\d+)\. ", first[first.index("**Overview**"):], re.M)]
    heads = [int(n) for c in nb.cells if c.cell_type == "markdown" for n in re.findall(r"^## (\d+) ", c.source, re.M)]
    assert listed == heads, f"{path.name}: the Overview lists sections {listed}, the headings are {heads}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_links_between_notebooks_point_at_notebooks_that_exist(path):
    nb = nbformat.read(path, as_version=4)
    targets = [m for c in nb.cells if c.cell_type == "markdown"
               for m in re.findall(r"\]\(([^)\s:]+\.ipynb)(?:#[^)]*)?\)", c.source)]
    missing = [t for t in targets if not (path.parent / t).is_file()]
    assert not missing, f"{path.name}: links to missing notebooks {missing}"
    if not path.name.startswith("00_"):
        assert targets, f"{path.name}: link the next notebook (or the index) in its last cell"


@pytest.mark.slow  # a subprocess / Dask run: the fast tier (-m 'not slow') leaves it out
def test_committed_notebooks_are_what_nbstripout_writes():
    """`make strip` and the git filter of `make git-filter` (nbstripout) leave the committed notebooks as they
    are: no spurious diff after installing the filter (cell ids 0, 1, ..., no outputs, no widget state)."""
    exe = Path(sys.executable).with_name("nbstripout")
    if not exe.exists():
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail("nbstripout (dev extra) is not installed next to the test interpreter")
        pytest.skip("nbstripout not installed (pip install -e '.[dev]')")
    result = subprocess.run([str(exe), "--verify", *map(str, NOTEBOOKS)], capture_output=True, text=True)
    assert result.returncode == 0, f"nbstripout would change: {result.stdout.strip()}; run `make strip`"


def test_makefile_offers_strip_and_git_filter():
    text = (ROOT / "Makefile").read_text()
    assert re.search(r"^strip:.*\n\t\$\(VENV\)/bin/nbstripout notebooks/\*\.ipynb", text, re.M)
    assert re.search(r"^git-filter:.*\n\t\$\(VENV\)/bin/nbstripout --install", text, re.M)


def test_make_serve_uses_what_the_voila_browser_test_checks():
    """`make serve` and tests/browser/test_voila.py must serve the same way (template, tree page, renderer)."""
    text = (ROOT / "Makefile").read_text()
    recipe = text[text.index("\nserve:"):].split("\n\n")[0]
    env_line = next(line for line in text.splitlines() if line.startswith("SERVE_ENV :="))
    source = (ROOT / "tests" / "browser" / "test_voila.py").read_text()
    tree = ast.parse(source)
    values = {t.id: ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
              for t in n.targets if isinstance(t, ast.Name) and t.id == "SERVE_ARGS"}
    assert values["SERVE_ARGS"]
    for arg in values["SERVE_ARGS"]:
        assert arg in recipe, f"make serve lacks {arg} (tests/browser/test_voila.py serves with it)"
    assert "$(SERVE_ENV)" in recipe
    assert "PLOTLY_RENDERER=plotly_mimetype+notebook" in env_line and "share/jupyter" in env_line

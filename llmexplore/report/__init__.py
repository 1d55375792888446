"""Build the HTML reports: execute every notebook headless, export each as an offline reader's report.

``build_reports()`` is what ``make report`` / ``llmexplore report`` run. For each ``notebooks/*.ipynb``
(sorted by name) it

0. checks every parameter up front, before anything runs: each notebook receives only the parameters its
   ``parameters`` cell defines, its registered check (:func:`llmexplore.nbtools.parameter_checker`) rejects a
   bad value with one line naming the notebook and the parameter, and a value that does not apply to a
   notebook (a dense ``MODEL`` for the MoE notebook) is dropped there with a note;
1. executes the notebook with papermill (engine ``"llmexplore"``, see :mod:`llmexplore.nbtools`) into
   ``<out_dir>/executed/`` -- never into ``notebooks/``;
2. exports it to ``<out_dir>/<name>.html`` without input cells or prompts, through the
   ``llmexplore_report`` template (the lab template minus require.js, MathJax, mermaid and the widget
   html-manager, all of which nbconvert loads from a CDN). Before export, widget views become a short note,
   saved widget state is dropped, stray ``<script src="https://...">`` tags in outputs (plotly adds one for
   MathJax to every figure) are removed and stderr streams are left out; plotly.js itself is inlined by the
   ``notebook`` renderer that :func:`~llmexplore.nbtools.setup_notebook` selects. The pages open offline.
   Recorded values (for the tests) are left out: each section states its finding in words. Links between
   notebooks (``[..](20_pd_disaggregation.ipynb)``) point at the other reports, and a banner states the
   parameters the report was built with and any that were skipped.
3. writes ``<out_dir>/index.html`` linking every report in ``out_dir`` with its title and a one-sentence
   description: reports built earlier into the same directory stay listed (``<out_dir>/reports.json``).

Failure policy: a notebook that fails does not stop the others. Every notebook is tried, reports and the
index are written for those that ran, and then :class:`ReportError` is raised naming each failed notebook,
the failing cell and its error; ``make report`` therefore exits non-zero but leaves the good reports."""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..errors import ReportError, SpecError
from .pages import (MANIFEST, TEMPLATE_DIR, TEMPLATE_NAME, WIDGET_NOTE, clean_for_report, export_html,
                    notebook_description, notebook_title, remote_resources, share_plotly, write_index)
from .params import parameters_banner, parse_param_value, plan_parameters
from .run import _describe_failure, describe_failure, execute_notebook  # noqa: F401 (old name)

__all__ = ["ReportError", "build_reports", "execute_notebook", "clean_for_report", "export_html", "write_index",
           "remote_resources", "parse_param_value", "notebook_title", "notebook_description", "plan_parameters",
           "notebook_names", "describe_failure", "parameters_banner", "MANIFEST", "TEMPLATE_DIR", "TEMPLATE_NAME",
           "WIDGET_NOTE"]


REPO_ROOT = Path(__file__).resolve().parents[2]


NOTEBOOK_DIR = REPO_ROOT / "notebooks"

REPORT_RENDERER = "plotly_mimetype+notebook"  # nbtools.OFFLINE_RENDERER: figures survive nbconvert


DEFAULT_TIMEOUT_S = 300  # per cell; a healthy cell takes well under a second or two



@dataclass
class _Outcome:
    notebook: Path
    seconds: float = 0.0
    html: Path | None = None
    executed: Path | None = None
    title: str = ""
    description: str = ""
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    parameters: dict[str, Any] = field(default_factory=dict)
    built: str = ""


def _progress(enabled: bool, text: str, end: str = "\n") -> None:
    if enabled:
        sys.stderr.write(text + end)
        sys.stderr.flush()



@contextlib.contextmanager
def _env(**values: str):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v



def notebook_names() -> list[str]:
    """The names (file stems) of the workbook's notebooks, sorted."""
    return [p.stem for p in sorted(NOTEBOOK_DIR.glob("*.ipynb"))]



def _check_notebook_file(path: Path, given) -> None:
    """SpecError unless ``path`` is a Jupyter notebook papermill can run (nbformat 4 JSON with cells)."""
    import json

    try:
        with open(path, "rb") as fh:
            head = fh.read(50_000_001)
    except OSError as exc:
        raise SpecError(f"--notebook must be a readable notebook, got {str(given)!r} ({exc.strerror})") from None
    try:
        if len(head) > 50_000_000:
            raise ValueError("over 50 MB")
        data = json.loads(head.decode("utf-8"))
        if not isinstance(data, dict) or not isinstance(data.get("cells"), list) or data.get("nbformat") != 4:
            raise ValueError("no nbformat 4 cells")
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        why = str(exc).split(":")[0] if isinstance(exc, ValueError) else "not UTF-8 JSON"
        raise SpecError(f"--notebook must be a Jupyter notebook (nbformat 4 JSON), got {str(given)!r} "
                        f"({why[:80]})") from None


def _resolve_notebooks(notebooks: Iterable[str | os.PathLike] | None) -> list[Path]:
    if notebooks is None:
        paths = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
        if not paths:
            raise ReportError(f"no notebooks found in {NOTEBOOK_DIR}")
        return paths
    paths = []
    for nb in notebooks:
        if not str(nb).strip():
            raise SpecError(f"--notebook must name a notebook ({', '.join(notebook_names())}) or a path to an "
                            f".ipynb, got {str(nb)!r}")
        p = Path(nb)
        candidates = [p] if p.is_absolute() else [p, NOTEBOOK_DIR / p]
        if p.suffix != ".ipynb":
            candidates += [c.with_name(c.name + ".ipynb") for c in candidates]
        found = next((c for c in candidates if c.is_file()), None)
        if found is None:
            raise SpecError(f"notebook not found: {nb}; the workbook's notebooks are "
                            f"{', '.join(notebook_names())} (or give a path to an .ipynb)")
        _check_notebook_file(found, nb)
        paths.append(found.resolve())
    names = [p.name for p in paths]
    if len(set(names)) != len(names):
        raise SpecError(f"two notebooks share a file name, their reports would collide: {names}")
    return sorted(paths, key=lambda p: p.name)



def build_reports(out_dir: str | os.PathLike = "reports", parameters: Mapping[str, Any] | None = None,
                  notebooks: Iterable[str | os.PathLike] | None = None, progress: bool = True,
                  timeout_s: float = DEFAULT_TIMEOUT_S, shared_plotly: bool = False) -> list[Path]:
    """Execute notebooks headless and export each to an offline HTML report; return the HTML paths.

    Parameters
    ----------
    out_dir : reports go to ``out_dir/<name>.html``, executed notebooks to ``out_dir/executed/``,
        the index to ``out_dir/index.html``.
    parameters : ``{NAME: value}`` injected into each notebook whose ``parameters`` cell defines NAME, checked
        first (:func:`plan_parameters`): a bad value or a name that no selected notebook defines raises
        :class:`~llmexplore.errors.SpecError` before anything runs; a value that does not apply to a notebook
        is skipped there with a note (progress output, the report's banner and the index).
    notebooks : notebook paths or names in ``notebooks/`` (with or without ``.ipynb``); default every
        ``notebooks/*.ipynb``. Run sorted by file name. Reports already in ``out_dir`` stay in its index.
    progress : print one line per notebook on stderr.
    timeout_s : per-cell execution timeout [s].
    shared_plotly : load plotly.js from one ``out_dir/plotly-<version>.min.js`` instead of inlining it in every
        report (:func:`~llmexplore.report.pages.share_plotly`): the folder is about 5 MB per report smaller,
        but a report copied without that file shows no figure. Default: single-file reports.

    Returns the report paths (index last). Raises :class:`ReportError` after trying every notebook if any
    failed; the reports of the others and the index are written first.
    """
    import nbformat

    t_start = time.perf_counter()
    parameters = dict(parameters or {})
    paths = _resolve_notebooks(notebooks)
    out = Path(out_dir).resolve()
    if out.exists() and not out.is_dir():
        raise SpecError(f"--out {out_dir} is a file; give a directory for the reports")
    executed_dir = out / "executed"
    if any(out == p.parent or executed_dir == p.parent for p in paths):
        raise SpecError(f"out_dir {out} would overwrite the source notebooks; choose another directory")
    per_nb_params, per_nb_notes = plan_parameters(paths, parameters)
    executed_dir.mkdir(parents=True, exist_ok=True)

    outcomes: list[_Outcome] = []
    n = len(paths)
    with _env(PLOTLY_RENDERER=REPORT_RENDERER):
        for i, src in enumerate(paths, 1):
            o = _Outcome(src, executed=executed_dir / src.name, parameters=per_nb_params[src],
                         notes=list(per_nb_notes[src]), built=_dt.datetime.now().strftime("%Y-%m-%d %H:%M"))
            outcomes.append(o)
            source_nb = nbformat.read(str(src), as_version=4)
            o.title, o.description = notebook_title(source_nb), notebook_description(source_nb)
            for note in o.notes:
                _progress(progress, f"[{i}/{n}] {src.name}: note: {note}")
            _progress(progress, f"[{i}/{n}] executing {src.name} … ", end="")
            t0 = time.perf_counter()
            try:
                execute_notebook(src, o.executed, per_nb_params[src], timeout_s)
            except Exception as exc:  # noqa: BLE001 - any failure is reported per notebook
                o.seconds = time.perf_counter() - t0
                o.error = describe_failure(exc, o.executed, timeout_s)
                _progress(progress, f"FAILED after {o.seconds:.1f} s\n      {src.name}: {o.error}")
                stale = out / f"{src.stem}.html"
                stale.unlink(missing_ok=True)
                continue
            o.seconds = time.perf_counter() - t0
            try:
                executed = nbformat.read(str(o.executed), as_version=4)
                cleaned, export_notes = clean_for_report(
                    executed, banner=parameters_banner(per_nb_params[src], per_nb_notes[src]))
                if o.title:
                    cleaned.metadata["title"] = o.title
                o.html = export_html(cleaned, out / f"{src.stem}.html", resources_path=src.parent)
                remote = remote_resources(o.html.read_text(encoding="utf-8"))
                if remote:
                    o.html.unlink()
                    o.html = None
                    raise ReportError(f"the report would load {len(remote)} resource(s) from the network, "
                                      f"e.g. {remote[0]}; reports must open offline")
            except Exception as exc:  # noqa: BLE001
                o.error = f"HTML export failed: {type(exc).__name__}: {exc}"
                _progress(progress, f"{o.seconds:.1f} s, EXPORT FAILED\n      {o.error}")
                continue
            if shared_plotly:
                share_plotly(o.html)
            size_mb = o.html.stat().st_size / 1e6
            _progress(progress, f"{o.seconds:.1f} s -> {o.html.name} ({size_mb:.1f} MB)")
            for note in export_notes:
                _progress(progress, f"      note: {note}")

    index = write_index(outcomes, out, parameters)
    ok = [o.html for o in outcomes if o.html is not None]
    failed = [o for o in outcomes if o.error]
    _progress(progress, f"wrote {len(ok)} report(s) and {index} in {time.perf_counter() - t_start:.1f} s")
    if failed:
        lines = "\n".join(f"  {o.notebook.name}: {o.error}" for o in failed)
        raise ReportError(f"{len(failed)} of {n} notebook(s) failed (executed copies in {executed_dir}):\n{lines}")
    return [*ok, index]


"""Build the HTML reports: execute every notebook headless, export each as an offline reader's report.

``build_reports()`` is what ``make report`` / ``llmexplore report`` run. For each ``notebooks/*.ipynb``
(sorted by name) it

1. executes the notebook with papermill (engine ``"llmexplore"``, see :mod:`llmexplore.nbtools`) into
   ``<out_dir>/executed/`` -- never into ``notebooks/`` -- injecting only the parameters that the notebook's
   ``parameters`` cell defines;
2. exports it to ``<out_dir>/<name>.html`` without input cells or prompts, through the
   ``llmexplore_report`` template (the lab template minus require.js, MathJax, mermaid and the widget
   html-manager, all of which nbconvert loads from a CDN). Before export, widget views become a short note,
   saved widget state is dropped, stray ``<script src="https://...">`` tags in outputs (plotly adds one for
   MathJax to every figure) are removed and stderr streams are left out; plotly.js itself is inlined by the
   ``notebook`` renderer that :func:`~llmexplore.nbtools.setup_notebook` selects. The pages open offline.
3. writes ``<out_dir>/index.html`` linking every report with its title and a one-line description.

Failure policy: a notebook that fails does not stop the others. Every notebook is tried, reports and the
index are written for those that ran, and then :class:`ReportError` is raised naming each failed notebook,
the failing cell and its error; ``make report`` therefore exits non-zero but leaves the good reports.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as _dt
import html
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from .errors import ReportError, SpecError

__all__ = ["ReportError", "build_reports", "execute_notebook", "clean_for_report", "export_html", "write_index",
           "remote_resources", "parse_param_value", "notebook_title", "notebook_description"]

REPO_ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = REPO_ROOT / "notebooks"
TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"
TEMPLATE_NAME = "llmexplore_report"
REPORT_RENDERER = "plotly_mimetype+notebook"
DEFAULT_TIMEOUT_S = 300  # per cell; a healthy cell takes well under a second or two

WIDGET_VIEW_MIME = "application/vnd.jupyter.widget-view+json"
WIDGET_NOTE = ("Live explorer: interactive controls appear here when the notebook runs with a kernel. "
               "Open it with `make lab` or `make serve`; the figure above shows the default parameters.")

# Tags in output HTML that would fetch something from the network when the page opens.
_REMOTE_SCRIPT = re.compile(r"<script\b[^>]*\bsrc\s*=\s*[\"']?(?:https?:)?//[^>]*>\s*</script\s*>", re.I)
_REMOTE_LINK = re.compile(r"<link\b[^>]*\bhref\s*=\s*[\"']?(?:https?:)?//[^>]*>", re.I)


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


# --------------------------------------------------------------------------------------------------
# small helpers


def parse_param_value(text: str) -> Any:
    """Turn a ``-p NAME VALUE`` string into a Python value.

    ``"8"`` -> 8, ``"0.5"``/``"1e3"`` -> float, ``"true"``/``"false"`` (any case) -> bool,
    ``"none"``/``"null"`` -> None, anything else -> the string unchanged (preset names, ...).
    """
    stripped = text.strip()
    low = stripped.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    try:
        return int(stripped)
    except ValueError:
        pass
    if re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]?inf", low):
        return float(stripped)
    return text


def notebook_title(nb) -> str:
    """The first markdown heading of a notebook, without the ``#`` marks ('' if none)."""
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        for line in cell.source.splitlines():
            m = re.match(r"\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
            if m:
                return _plain(m.group(1))
    return ""


def notebook_description(nb, max_chars: int = 200) -> str:
    """One line describing a notebook: the first sentence of the first prose paragraph of its markdown."""
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        for para in re.split(r"\n\s*\n", cell.source):
            para = para.strip()
            if not para or para.startswith(("#", "|", "```", "<", "-", "*", ">")) or re.match(r"\d+\.", para):
                continue
            text = _plain(" ".join(para.split()))
            m = re.match(r"(.+?[.!?])(\s|$)", text)
            sentence = m.group(1) if m else text
            if len(sentence) > max_chars:
                sentence = sentence[: max_chars - 1].rsplit(" ", 1)[0] + "…"
            return sentence
    return ""


def _plain(markdown: str) -> str:
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", markdown)  # links and images -> their text
    text = re.sub(r"(\*\*|__|\*|_|`)(.+?)\1", r"\2", text)
    return text.strip()


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


def _resolve_notebooks(notebooks: Iterable[str | os.PathLike] | None) -> list[Path]:
    if notebooks is None:
        paths = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
        if not paths:
            raise ReportError(f"no notebooks found in {NOTEBOOK_DIR}")
        return paths
    paths = []
    for nb in notebooks:
        p = Path(nb)
        if not p.is_absolute() and not p.exists():
            p = NOTEBOOK_DIR / p
        if not p.is_file():
            raise SpecError(f"notebook not found: {nb} (looked in {NOTEBOOK_DIR} too)")
        paths.append(p.resolve())
    names = [p.name for p in paths]
    if len(set(names)) != len(names):
        raise SpecError(f"two notebooks share a file name, their reports would collide: {names}")
    return sorted(paths, key=lambda p: p.name)


def _parameters_for(path: Path, parameters: Mapping[str, Any]) -> dict[str, Any]:
    import papermill as pm

    known = pm.inspect_notebook(str(path))
    return {k: v for k, v in parameters.items() if k in known}


def remote_resources(page: str) -> list[str]:
    """URLs that an HTML page would fetch from the network on opening (empty for an offline page).

    Looks at resource-loading attributes (``script src``, ``link href``, ``img src``/``srcset``, ``iframe``,
    ``source``, ``embed``, ``object data``, ...), ``url(...)``/``@import`` in ``<style>``, and ES-module
    ``import "https://..."`` in inline scripts (what plotly's ``notebook_connected`` renderer emits). Plain
    ``<a href>`` links are not loads and are ignored, as are URLs inside JavaScript strings.
    """
    from html.parser import HTMLParser

    remote = re.compile(r"^\s*(?:https?:)?//", re.I)
    css_url = re.compile(r"(?:url\(\s*[\"']?|@import\s+[\"'])((?:https?:)?//[^\"')\s]+)", re.I)
    js_import = re.compile(r"\bimport\s*\(?\s*[\"']((?:https?:)?//[^\"']+)", re.I)
    loading = {"script": ("src",), "link": ("href",), "img": ("src", "srcset"), "iframe": ("src",),
               "frame": ("src",), "source": ("src", "srcset"), "video": ("src", "poster"), "audio": ("src",),
               "track": ("src",), "embed": ("src",), "object": ("data",), "input": ("src",)}
    found: list[str] = []

    class _Parser(HTMLParser):
        in_tag: str | None = None

        def handle_starttag(self, tag, attrs):
            for name, value in attrs:
                if value and name in loading.get(tag, ()):
                    urls = [u.strip().split(" ")[0] for u in value.split(",")] if name == "srcset" else [value]
                    found.extend(u for u in urls if remote.match(u))
                if name == "style" and value:
                    found.extend(css_url.findall(value))
            self.in_tag = tag

        def handle_data(self, data):
            if self.in_tag == "style":
                found.extend(css_url.findall(data))
            elif self.in_tag == "script":
                found.extend(js_import.findall(data))

        def handle_endtag(self, tag):
            self.in_tag = None

    parser = _Parser(convert_charrefs=True)
    parser.feed(page)
    parser.close()
    return found


# --------------------------------------------------------------------------------------------------
# execution and export


def execute_notebook(src: Path, dst: Path, params: dict[str, Any], timeout_s: float) -> None:
    """Execute ``src`` into ``dst`` headless (engine ``llmexplore``, kernel python3, cwd = its folder).

    The one place the workbook runs a notebook: the reports and the notebook tests share it.
    """
    import papermill as pm

    pm.execute_notebook(
        str(src), str(dst),
        parameters=params,
        engine_name="llmexplore",
        kernel_name="python3",
        execution_timeout=timeout_s,
        start_timeout=60,
        cwd=str(src.parent),
        progress_bar=False,
        log_output=False,
        extra_arguments=["--IPKernelApp.log_level=ERROR"],
    )


def _describe_failure(exc: BaseException) -> str:
    from papermill.exceptions import PapermillExecutionError

    if isinstance(exc, PapermillExecutionError):
        first_line = (exc.source or "").strip().splitlines()[:1]
        where = f"cell {exc.cell_index} (execution count {exc.exec_count})"
        if first_line:
            where += f", starting `{first_line[0][:80]}`"
        return f"{where}: {exc.ename}: {exc.evalue}"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def clean_for_report(nb, note: str = WIDGET_NOTE) -> tuple[Any, list[str]]:
    """Return a copy of an executed notebook ready for an offline static report, plus notes on what changed.

    - saved widget state is dropped (nbconvert would load its renderer from a CDN, and offline the widgets
      are blank anyway); each widget view becomes the ``text/html`` note that ``nbtools.show`` stored, or a
      generic note when the widget was displayed bare (instead of a raw ``VBox(children=...)`` repr);
    - ``<script src=...>``/``<link href=...>`` tags pointing at remote URLs are removed from HTML outputs;
    - stderr streams (warnings) are left out of the reader's report.
    """
    nb = copy.deepcopy(nb)
    notes: list[str] = []
    nb.metadata.pop("widgets", None)
    stderr = bare_widgets = 0
    from llmexplore.nbtools import note_html

    stand_in = note_html(note)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        kept = []
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream" and out.get("name") == "stderr":
                stderr += 1
                continue
            data = out.get("data")
            if data is not None:
                if WIDGET_VIEW_MIME in data:
                    del data[WIDGET_VIEW_MIME]
                    if "text/html" not in data:
                        bare_widgets += 1
                        data.clear()
                        data["text/html"] = stand_in
                        data["text/plain"] = note
                if "text/html" in data:
                    source = data["text/html"]
                    source = "".join(source) if isinstance(source, list) else source
                    # plotly's "notebook" renderer adds a MathJax <script src> from cdnjs to every figure
                    data["text/html"] = _REMOTE_LINK.sub("", _REMOTE_SCRIPT.sub("", source))
            kept.append(out)
        cell.outputs = kept
    if bare_widgets:
        notes.append(f"{bare_widgets} widget(s) displayed without nbtools.show(): a generic note stands in")
    if stderr:
        notes.append(f"{stderr} stderr output(s) (warnings) left out of the report; see the executed notebook")
    return nb, notes


def export_html(nb, dest: Path, resources_path: Path | None = None) -> Path:
    """Write ``nb`` (already cleaned) as a self-contained HTML report without input cells."""
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(
        template_name=TEMPLATE_NAME,
        extra_template_basedirs=[str(TEMPLATE_DIR)],
        exclude_input=True,
        exclude_input_prompt=True,
        exclude_output_prompt=True,
        embed_images=True,
        # Belt and braces: even if a template block slipped through, point nothing at a CDN.
        require_js_url="",
        mathjax_url="",
        jupyter_widgets_base_url="",
    )
    resources = {"metadata": {"name": dest.stem, "path": str(resources_path or dest.parent)}}
    body, _ = exporter.from_notebook_node(nb, resources=resources)
    dest.write_text(body, encoding="utf-8")
    return dest


def write_index(outcomes: list[_Outcome], out_dir: Path, parameters: Mapping[str, Any]) -> Path:
    """Write ``out_dir/index.html``: one link per report, with title and one-line description (offline)."""
    items = []
    for o in outcomes:
        title = html.escape(o.title or o.notebook.stem)
        desc = html.escape(o.description)
        if o.html is not None:
            head = f'<a href="{html.escape(o.html.name)}">{title}</a>'
        else:
            head = f'{title} <span class="failed">(failed: {html.escape(o.error or "")})</span>'
        items.append(f'<li><div class="title">{head}</div><div class="desc">{desc}</div>'
                     f'<div class="file">{html.escape(o.notebook.name)}</div></li>')
    params = ", ".join(f"{html.escape(k)}={html.escape(repr(v))}" for k, v in parameters.items())
    built = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    page = f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<title>llmexplore reports</title>
<style>
  body {{ font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; max-width: 50em;
         margin: 2em auto; padding: 0 1em; color: #222; line-height: 1.45; }}
  h1 {{ font-weight: 500; }}
  ul {{ list-style: none; padding: 0; }}
  li {{ margin: 0 0 1.2em 0; }}
  .title {{ font-size: 1.15em; }}
  .desc {{ color: #444; }}
  .file, .meta {{ color: #888; font-size: 0.85em; }}
  .failed {{ color: #b00020; font-size: 0.85em; }}
</style>
</head>
<body>
<h1>llmexplore reports</h1>
<p class="meta">Built {built}{'; parameters: ' + params if params else ''}.
These pages work offline; the live explorers need a kernel (<code>make lab</code> or <code>make serve</code>).</p>
<ul>
{chr(10).join(items)}
</ul>
</body>
</html>
"""
    dest = out_dir / "index.html"
    dest.write_text(page, encoding="utf-8")
    return dest


def build_reports(out_dir: str | os.PathLike = "reports", parameters: Mapping[str, Any] | None = None,
                  notebooks: Iterable[str | os.PathLike] | None = None, progress: bool = True,
                  timeout_s: float = DEFAULT_TIMEOUT_S) -> list[Path]:
    """Execute notebooks headless and export each to an offline HTML report; return the HTML paths.

    Parameters
    ----------
    out_dir : reports go to ``out_dir/<name>.html``, executed notebooks to ``out_dir/executed/``,
        the index to ``out_dir/index.html``.
    parameters : ``{NAME: value}`` injected into each notebook whose ``parameters`` cell defines NAME;
        a name that no selected notebook defines raises :class:`~llmexplore.errors.SpecError` (it is a typo).
    notebooks : notebook paths or names in ``notebooks/``; default every ``notebooks/*.ipynb``. Run sorted by
        file name.
    progress : print one line per notebook on stderr.
    timeout_s : per-cell execution timeout [s].

    Returns the report paths (index last). Raises :class:`ReportError` after trying every notebook if any
    failed; the reports of the others and the index are written first.
    """
    import nbformat

    t_start = time.perf_counter()
    parameters = dict(parameters or {})
    paths = _resolve_notebooks(notebooks)
    out = Path(out_dir).resolve()
    executed_dir = out / "executed"
    if any(out == p.parent or executed_dir == p.parent for p in paths):
        raise SpecError(f"out_dir {out} would overwrite the source notebooks; choose another directory")
    executed_dir.mkdir(parents=True, exist_ok=True)

    per_nb_params = {p: _parameters_for(p, parameters) for p in paths}
    unused = set(parameters) - {k for v in per_nb_params.values() for k in v}
    if unused:
        raise SpecError(f"parameter(s) {sorted(unused)} are not defined in the parameters cell of any of "
                         f"{[p.name for p in paths]}")

    outcomes: list[_Outcome] = []
    n = len(paths)
    with _env(PLOTLY_RENDERER=REPORT_RENDERER):
        for i, src in enumerate(paths, 1):
            o = _Outcome(src, executed=executed_dir / src.name)
            outcomes.append(o)
            source_nb = nbformat.read(str(src), as_version=4)
            o.title, o.description = notebook_title(source_nb), notebook_description(source_nb)
            _progress(progress, f"[{i}/{n}] executing {src.name} … ", end="")
            t0 = time.perf_counter()
            try:
                execute_notebook(src, o.executed, per_nb_params[src], timeout_s)
            except Exception as exc:  # noqa: BLE001 - any failure is reported per notebook
                o.seconds = time.perf_counter() - t0
                o.error = _describe_failure(exc)
                _progress(progress, f"FAILED after {o.seconds:.1f} s\n      {o.error}")
                stale = out / f"{src.stem}.html"
                stale.unlink(missing_ok=True)
                continue
            o.seconds = time.perf_counter() - t0
            try:
                executed = nbformat.read(str(o.executed), as_version=4)
                cleaned, o.notes = clean_for_report(executed)
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
            size_mb = o.html.stat().st_size / 1e6
            _progress(progress, f"{o.seconds:.1f} s -> {o.html.name} ({size_mb:.1f} MB)")
            for note in o.notes:
                _progress(progress, f"      note: {note}")

    index = write_index(outcomes, out, parameters)
    ok = [o.html for o in outcomes if o.html is not None]
    failed = [o for o in outcomes if o.error]
    _progress(progress, f"wrote {len(ok)} report(s) and {index} in {time.perf_counter() - t_start:.1f} s")
    if failed:
        lines = "\n".join(f"  {o.notebook.name}: {o.error}" for o in failed)
        raise ReportError(f"{len(failed)} of {n} notebook(s) failed (executed copies in {executed_dir}):\n{lines}")
    return [*ok, index]

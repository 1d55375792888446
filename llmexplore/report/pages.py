"""What a report and the index look like: titles and descriptions, the offline clean-up before export, the
export itself, and the index of every report in the output directory."""

from __future__ import annotations

import copy
import datetime as _dt
import html
import json
import re
from pathlib import Path
from typing import Any, Mapping

from .params import _shown, notebook_values, with_values

__all__ = ["TEMPLATE_DIR", "TEMPLATE_NAME", "MANIFEST", "WIDGET_NOTE", "notebook_title", "notebook_description",
           "remote_resources", "clean_for_report", "export_html", "write_index", "share_plotly", "voila_tree",
           "VOILA_TREE"]

TEMPLATE_DIR = Path(__file__).resolve().parents[1] / "templates"


TEMPLATE_NAME = "llmexplore_report"


WIDGET_VIEW_MIME = "application/vnd.jupyter.widget-view+json"


RECORD_MIME = "application/vnd.llmexplore.record+json"  # nbtools.RECORD_MIME (nbtools is imported lazily)


MANIFEST = "reports.json"  # in out_dir: what each report was built from, for the index


WIDGET_NOTE = ("Live explorer: interactive controls appear here when the notebook runs with a kernel. "
               "Open it with `make lab` or `make serve`; the figure above shows the default parameters.")


# Tags in output HTML that would fetch something from the network when the page opens.
_REMOTE_SCRIPT = re.compile(r"<script\b[^>]*\bsrc\s*=\s*[\"']?(?:https?:)?//[^>]*>\s*</script\s*>", re.I)


_REMOTE_LINK = re.compile(r"<link\b[^>]*\bhref\s*=\s*[\"']?(?:https?:)?//[^>]*>", re.I)



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



def notebook_description(nb, max_chars: int = 240) -> str:
    """The index's description of a notebook: the first whole sentence(s) of its first prose paragraph.

    A leading bold label (``**Question.**``) is dropped; sentences are added while they fit in ``max_chars``,
    but the first one is always whole (never cut with "…"). Text without a closing full stop gets one.
    """
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        for para in re.split(r"\n\s*\n", cell.source):
            para = para.strip()
            if (not para or para.startswith(("#", "|", "```", "<", ">")) or re.match(r"([-*+]|\d+\.)\s", para)):
                continue
            para = re.sub(r"^(\*\*|__)[^*_]{1,40}?[.:](\*\*|__)\s*", "", para)
            text = _plain(" ".join(para.split()))
            sentences = _sentences(text)
            if sentences and sentences[-1].endswith(":"):  # the lead-in to a list is not a description
                sentences = sentences[:-1]
            if not sentences:
                continue
            out = sentences[0]
            for more in sentences[1:]:
                if len(out) + 1 + len(more) > max_chars:
                    break
                out += " " + more
            out = out.strip()
            return out if out.endswith((".", "!", "?")) else out + "."
    return ""



#: abbreviations whose full stop does not end a sentence
_ABBREVIATIONS = ("i.e.", "e.g.", "vs.", "cf.", "etc.", "approx.", "incl.")


def _sentences(text: str) -> list[str]:
    """``text`` split after each ``.``, ``!`` or ``?`` that a space or the end follows, except after an
    abbreviation (``i.e.``, ``e.g.``, ...); a tail without such an end (a lead-in to a list: "...:") is the
    last item."""
    out, start = [], 0
    for m in re.finditer(r"[.!?](?=\s|$)", text):
        piece = text[start:m.end()]
        if piece.lower().endswith(_ABBREVIATIONS):
            continue
        out.append(piece.strip())
        start = m.end()
    if text[start:].strip():
        out.append(text[start:].strip())
    return [p for p in out if p]


def _plain(markdown: str) -> str:
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", markdown)  # links and images -> their text
    text = re.sub(r"`([^`]+)`", r"\1", text)  # code spans first: their text may hold * or _
    text = re.sub(r"(\*\*|__|\*|_)(.+?)\1", r"\2", text)
    return text.strip()



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



_NB_LINK = re.compile(r"\]\(\s*(?!\w+://)([^)\s]*?)\.ipynb(#[^)\s]*)?\s*\)")


def _report_links(markdown: str) -> str:
    """Markdown links to sibling notebooks (``[..](20_pd.ipynb)``) rewritten to their reports (``.html``)."""
    return _NB_LINK.sub(lambda m: f"]({Path(m.group(1)).name}.html{m.group(2) or ''})", markdown)



def clean_for_report(nb, note: str = WIDGET_NOTE, *, banner: str = "") -> tuple[Any, list[str]]:
    """Return a copy of an executed notebook ready for an offline static report, plus notes on what changed.

    - recorded values (:func:`llmexplore.nbtools.record`, for the tests) are left out: the findings are stated
      in words by each section;
    - markdown links to sibling notebooks point at their HTML reports;
    - a parameter named in the prose as a placeholder (`` `RATE` ``) reads as the value the notebook ran with,
      the name in parentheses (:func:`~llmexplore.report.params.with_values`);
    - ``banner`` (markdown, e.g. :func:`parameters_banner`) goes right after the title cell;

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
    values = notebook_values(nb)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = with_values(_report_links(cell.source), values)
        if cell.cell_type != "code":
            continue
        kept = []
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream" and out.get("name") == "stderr":
                stderr += 1
                continue
            data = out.get("data")
            if data is not None and RECORD_MIME in data:
                continue
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
    if banner:
        import nbformat

        at = next((i + 1 for i, c in enumerate(nb.cells) if c.cell_type == "markdown"), 0)
        nb.cells.insert(at, nbformat.v4.new_markdown_cell(banner, metadata={"tags": ["llmexplore-banner"]}))
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



def _load_manifest(out_dir: Path) -> dict[str, dict]:
    """The reports built earlier into ``out_dir`` ({stem: entry}); empty if there is none or it is unreadable."""
    try:
        data = json.loads((out_dir / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, dict) and isinstance(v.get("title", ""), str)}



def _entry(o: Any) -> dict:
    return {"notebook": o.notebook.name, "title": o.title or o.notebook.stem, "description": o.description,
            "html": o.html.name if o.html is not None else None, "error": o.error,
            "parameters": {k: _shown(v) for k, v in o.parameters.items()},
            "notes": [n for n in o.notes if n.startswith("-p ")], "built": o.built}



def write_index(outcomes: list[Any], out_dir: Path, parameters: Mapping[str, Any] | None = None) -> Path:
    """Write ``out_dir/index.html``: one link per report in ``out_dir`` with its title, a one-sentence
    description, when and with which parameters it was built, and any skipped parameter (offline).

    Reports from earlier builds into ``out_dir`` stay listed (read from ``out_dir/reports.json``, which this
    rewrites), so building one notebook keeps the others; an entry whose HTML is gone is dropped.
    """
    entries = {k: v for k, v in _load_manifest(out_dir).items()  # earlier builds, while their page exists
               if v.get("html") and not v.get("error") and (out_dir / str(v["html"])).is_file()}
    for o in outcomes:
        entries[o.notebook.stem] = _entry(o)
    entries = dict(sorted(entries.items()))
    (out_dir / MANIFEST).write_text(json.dumps(entries, indent=1, ensure_ascii=False), encoding="utf-8")
    items = []
    for e in entries.values():
        title = html.escape(str(e.get("title") or e.get("notebook", "")))
        if e.get("html") and not e.get("error"):
            head = f'<a href="{html.escape(str(e["html"]))}">{title}</a>'
        else:
            head = f'{title} <span class="failed">(failed: {html.escape(str(e.get("error") or ""))})</span>'
        params = ", ".join(f"{k} = {v}" for k, v in (e.get("parameters") or {}).items())
        meta = " · ".join(x for x in (html.escape(str(e.get("notebook", ""))),
                                      f"built {html.escape(str(e['built']))}" if e.get("built") else "",
                                      f"parameters: {html.escape(params)}" if params else "default parameters") if x)
        notes = "".join(f'<div class="note">Note: {html.escape(str(n))}</div>' for n in e.get("notes") or [])
        items.append(f'<li><div class="title">{head}</div><div class="desc">{html.escape(str(e.get("description", "")))}'
                     f'</div><div class="file">{meta}</div>{notes}</li>')
    shown = ", ".join(f"{k} = {_shown(v)}" for k, v in (parameters or {}).items())
    page = (TEMPLATE_DIR / "index_page.html").read_text(encoding="utf-8")
    page = (page.replace("{{BUILT}}", _dt.datetime.now().strftime("%Y-%m-%d %H:%M"))
            .replace("{{PARAMETERS}}", f"; parameters of this build: {html.escape(shown)}" if shown else "")
            .replace("{{ITEMS}}", "\n".join(items)))
    dest = out_dir / "index.html"
    dest.write_text(page, encoding="utf-8")
    return dest



#: the inlined plotly.js of a report: a <script> whose body starts with the library's banner
_PLOTLY_SCRIPT = re.compile(r"<script\b[^>]*>(\s*/\*\*\s*\*\s*plotly\.js v([\w.+-]+).*?)</script\s*>", re.S)


def share_plotly(page: Path) -> Path | None:
    """Move the plotly.js a report inlines (about 4.8 MB, the same in every report) into one local file next to
    it, ``plotly-<version>.min.js``, and load it from there; return that file (None: the page inlines none).

    The pages still open offline (the script is a relative ``file://`` load), but only as a folder: a report
    copied alone loses its figures, which is why single-file reports stay the default."""
    text = page.read_text(encoding="utf-8")
    m = _PLOTLY_SCRIPT.search(text)
    if m is None:
        return None
    name = f"plotly-{m.group(2)}.min.js"
    shared = page.parent / name
    body = m.group(1)
    if not shared.is_file() or shared.stat().st_size != len(body.encode("utf-8")):
        shared.write_text(body, encoding="utf-8")
    page.write_text(text[:m.start()] + f'<script src="{name}"></script>' + text[m.end():], encoding="utf-8")
    return shared


#: the Voila landing page's data (``make serve``): each notebook's title and one-line description, which the
#: hand-written ``tree.html`` of the template imports; written by :func:`voila_tree`, checked by the tests
VOILA_TREE = (Path(__file__).resolve().parents[2] / "share" / "jupyter" / "voila" / "templates" / "llmexplore"
              / "tree_descriptions.j2")


def voila_tree_text(notebook_dir: Path | None = None) -> str:
    """The Jinja file of titles and descriptions for the notebooks in ``notebook_dir`` (default ``notebooks/``)."""
    import nbformat

    folder = Path(notebook_dir) if notebook_dir else Path(__file__).resolve().parents[2] / "notebooks"
    titles, descriptions = {}, {}
    for nb_path in sorted(folder.glob("*.ipynb")):
        nb = nbformat.read(str(nb_path), as_version=4)
        titles[nb_path.name] = notebook_title(nb) or nb_path.stem
        descriptions[nb_path.name] = notebook_description(nb)
    return ("{#- Generated by llmexplore.report.pages.voila_tree() from the notebooks' titles and first sentences;\n"
            "    tree.html imports it. tests/unit/report/test_readable.py fails when it falls behind the notebooks. -#}\n"
            f"{{% set titles = {json.dumps(titles, ensure_ascii=False)} %}}\n"
            f"{{% set descriptions = {json.dumps(descriptions, ensure_ascii=False)} %}}\n")


def voila_tree(dest: Path = VOILA_TREE) -> Path:
    """Write :func:`voila_tree_text` next to the project's Voila ``tree.html`` (``make serve``'s landing page)."""
    dest.write_text(voila_tree_text(), encoding="utf-8")
    return dest

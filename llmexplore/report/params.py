"""Notebook parameters for the reports: ``-p NAME VALUE`` text to values, and the plan of which notebook
receives which, checked before anything runs."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..errors import SpecError

__all__ = ["MAX_PARAM_CHARS", "parse_param_value", "plan_parameters", "parameters_banner", "notebook_values",
           "value_text", "with_values"]

MAX_PARAM_CHARS = 10_000  # a -p VALUE longer than this is not a notebook parameter


def parse_param_value(text: str, name: str = "VALUE") -> Any:
    """Turn a ``-p NAME VALUE`` string into a Python value.

    ``"8"`` -> 8, ``"0.5"``/``"1e3"`` -> float, ``"true"``/``"false"`` (any case) -> bool,
    ``"none"``/``"null"`` -> None; a Python or JSON literal list, tuple or dict (``"[512, 1024]"``,
    ``'{"a": 1}'``) or a quoted string is read as that literal, safely (``ast.literal_eval``, then JSON); anything
    else is the string unchanged (preset names, ...). A value that starts like a list but is not a valid
    literal, or is longer than :data:`MAX_PARAM_CHARS`, raises SpecError naming ``name``.
    """
    if len(text) > MAX_PARAM_CHARS:
        raise SpecError(f"-p {name}: the value is {len(text):,} characters long; at most {MAX_PARAM_CHARS:,}")
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
    if stripped[:1] in "[({\"'" and stripped:
        try:
            return ast.literal_eval(stripped)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            pass
        try:
            return json.loads(stripped)
        except (ValueError, RecursionError):
            raise SpecError(f"-p {name} {text!r}: not a valid Python or JSON literal; write a list as "
                            f"'[512, 1024]' and a string in quotes") from None
    return text



def _defaults(path: Path) -> tuple[dict[str, Any], bool]:
    """The notebook's parameters with their default values, and whether every default is a plain literal."""
    import papermill as pm

    out, literal = {}, True
    for name, info in pm.inspect_notebook(str(path)).items():
        try:
            out[name] = ast.literal_eval(info["default"])
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            out[name], literal = info["default"], False
    return out, literal



def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:48] + "…" + text[-10:]



def plan_parameters(paths: Iterable[Path], parameters: Mapping[str, Any]
                    ) -> tuple[dict[Path, dict[str, Any]], dict[Path, list[str]]]:
    """Which parameters each notebook receives, checked before anything runs.

    Each notebook gets the names its ``parameters`` cell defines. Its registered check
    (:func:`llmexplore.nbtools.parameter_checker`) sees the defaults with those values; a value it rejects
    raises SpecError (one line: the parameter, the value, each notebook's rule); a value that does not apply
    to it is dropped there, with a note. A name that no notebook defines, or that applies to none, raises
    SpecError too. Returns ``({path: {NAME: value}}, {path: [notes]})``.
    """
    from ..errors import LlmexploreError
    from ..nbtools import parameter_checker

    given: dict[Path, dict[str, Any]] = {}
    notes: dict[Path, list[str]] = {}
    errors: dict[str, list[str]] = {}
    skipped: dict[str, list[str]] = {}
    defined: set[str] = set()
    for path in paths:
        defaults, literal = _defaults(path)
        mine = {k: v for k, v in parameters.items() if k in defaults}
        defined |= set(mine)
        notes[path] = []
        checker = parameter_checker(path)
        while checker is not None and literal:
            try:
                not_applicable = checker({**defaults, **mine})
            except (LlmexploreError, KeyError, TypeError) as exc:
                text = str(exc) if isinstance(exc, LlmexploreError) else f"{type(exc).__name__}: {exc}"
                errors.setdefault(text, []).append(path.stem)
                break
            dropped = [k for k in not_applicable if k in mine]
            if not dropped:
                if not_applicable:  # a default that does not apply: the notebook itself is wrong
                    errors.setdefault(f"its defaults do not apply: {not_applicable}", []).append(path.stem)
                break
            for k in dropped:
                notes[path].append(f"-p {k} {_shown(mine.pop(k))} skipped here: {not_applicable[k]}; "
                                   f"the notebook's default {_shown(defaults[k])} is used")
                skipped.setdefault(k, []).append(f"{path.stem}: {not_applicable[k]}")
        given[path] = mine
    unused = sorted(set(parameters) - defined)
    if unused:
        raise SpecError(f"parameter(s) {unused} are not defined in the parameters cell of any of "
                        f"{[p.name for p in given]}")
    if errors:
        raise SpecError("; ".join(f"{', '.join(nbs)}: {text}" for text, nbs in errors.items()))
    nowhere = sorted(k for k in parameters if not any(k in g for g in given.values()))
    if nowhere:
        raise SpecError("; ".join(f"-p {k} {_shown(parameters[k])} applies to no selected notebook ("
                                  + "; ".join(skipped.get(k, [])) + ")" for k in nowhere))
    return given, notes



def parameters_banner(parameters: Mapping[str, Any], notes: Iterable[str]) -> str:
    """The top of a report (HTML in a markdown cell): the parameters it was built with and the ones skipped;
    '' when it was built with the defaults and nothing was skipped."""
    import html

    lines = []
    if parameters:
        lines.append("Built with " + ", ".join(f"<code>{html.escape(f'{k} = {_shown(v)}')}</code>"
                                               for k, v in parameters.items())
                     + "; the other parameters have the notebook's defaults.")
    lines += [f"<strong>Note:</strong> {html.escape(n if n.endswith('.') else n + '.')}" for n in notes]
    return f'<div class="llmexplore-banner">{"<br>".join(lines)}</div>' if lines else ""




def notebook_values(nb) -> dict[str, Any]:
    """``{NAME: value}`` an executed notebook ran with: its ``parameters`` cell, then papermill's
    ``injected-parameters`` cell (plain literal assignments only; anything else is left out)."""
    values: dict[str, Any] = {}
    for tag in ("parameters", "injected-parameters"):
        for cell in nb.cells:
            if cell.cell_type != "code" or tag not in cell.get("metadata", {}).get("tags", []):
                continue
            try:
                body = ast.parse(cell.source).body
            except SyntaxError:
                continue
            for node in body:
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    try:
                        values[node.targets[0].id] = ast.literal_eval(node.value)
                    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                        values.pop(node.targets[0].id, None)
    return values


def value_text(value: Any) -> str:
    """A parameter's value as a report reader reads it: ``32768`` -> ``32,768``, ``1.0`` -> ``1``,
    ``0.563`` -> ``0.563``, ``[0.25, 200]`` -> ``0.25–200``, a preset name as itself, None -> "the default"."""
    import math

    if value is None:  # a parameter left unset: the notebook's own default applies
        return "the default"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value == round(value) and abs(value) < 1e15:
            return f"{value:,.0f}"
        return f"{value:,.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    if isinstance(value, (list, tuple)):
        parts = [value_text(v) for v in value]
        if len(parts) == 2 and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            return "–".join(parts)
        return ", ".join(parts)
    if isinstance(value, str):
        return value
    return _shown(value)


#: a code span that is exactly a parameter's name, not already after its value ("32,768 (`PREFIX`)")
_NAME_SPAN = re.compile(r"(?<!\()`([A-Z][A-Z0-9_]*)`")


def with_values(markdown: str, values: Mapping[str, Any]) -> str:
    """Markdown prose with each parameter placeholder (a code span that is exactly ``NAME``) replaced by the
    value the notebook ran with, the name kept in parentheses for whoever runs it: "prompts of `PROMPT_TOKENS`
    tokens" -> "prompts of 32,768 (`PROMPT_TOKENS`) tokens". Fenced code blocks are left alone."""
    def sub(m: re.Match) -> str:
        name = m.group(1)
        return f"{value_text(values[name])} (`{name}`)" if name in values else m.group(0)

    parts = re.split(r"(^```.*?^```)", markdown, flags=re.M | re.S)
    return "".join(p if p.startswith("```") else _NAME_SPAN.sub(sub, p) for p in parts)

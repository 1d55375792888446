"""Workload files: a recorded request trace and a column of observed lengths, read from CSV.

The readers of :mod:`llmexplore.models.serving.workload`'s inputs, kept out of ``models/`` (which reads no
files): :func:`load_trace` turns a trace file into a replaying :class:`~llmexplore.models.serving.workload.Traffic`,
:func:`length_dist_from_csv` a column into an empirical
:class:`~llmexplore.models.serving.workload.LengthDist`. Every bad cell is a SpecError naming the file, the line,
the column and the rule.
"""

from __future__ import annotations

import csv
import io
import math

import numpy as np

from . import _check
from .errors import SpecError
from .models.serving.workload import MAX_TOKENS, MAX_TRACE_BYTES, LengthDist, Trace, Traffic

__all__ = ["load_trace", "length_dist_from_csv"]


def _read_csv(path) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """(header, [(line number, cells)]) of a CSV file; blank lines skipped."""
    text = _check.read_text(path, str(path), MAX_TRACE_BYTES)
    try:
        rows = list(csv.reader(io.StringIO(text)))
    except csv.Error as exc:  # a cell over csv's field size limit (131,072 characters), an unclosed quote
        raise SpecError(f"{path}: not a CSV table this can read ({exc}): a trace's cells are numbers") from None
    numbered = [(i + 1, r) for i, r in enumerate(rows) if any(c.strip() for c in r)]
    if not numbered:
        raise SpecError(f"{path}: the file is empty (a header row is needed)")
    header = [c.strip() for c in numbered[0][1]]
    body = numbered[1:]
    for line, r in body:
        if len(r) != len(header):
            raise SpecError(f"{path} line {line}: {len(r)} cells, the header has {len(header)} ({header})")
    return header, body


def _cell_int(path, line: int, column: str, cell: str, *, lo: int = 1) -> int:
    s = cell.strip()
    try:
        v = float(s)
    except ValueError:
        v = math.nan
    if not math.isfinite(v) or v != math.floor(v) or v < lo or v > MAX_TOKENS:
        raise SpecError(f"{path} line {line}: {column} must be an integer in [{lo}, {MAX_TOKENS:,}], got {s!r}")
    return int(v)


def load_trace(path, *, prefix_ratio: float = 0.0) -> Traffic:
    """Traffic replaying the CSV trace at ``path``: header ``arrival_s,prompt_tokens,output_tokens`` and
    optionally ``prefix_id`` (any text; empty = no shared prefix; requests with the same id share their first
    ``prefix_ratio`` of the prompt). Arrival times [s] must be finite, >= 0 and non-decreasing. SpecError
    naming the file, line, column and rule otherwise."""
    header, rows = _read_csv(path)
    need = ["arrival_s", "prompt_tokens", "output_tokens"]
    missing = [c for c in need if c not in header]
    if missing:
        raise SpecError(f"{path}: missing column(s) {missing}; a trace needs {need} (and optionally prefix_id), "
                        f"the header has {header}")
    if not rows:
        raise SpecError(f"{path}: the trace has no requests (only a header)")
    ja, jp, jo = (header.index(c) for c in need)
    jid = header.index("prefix_id") if "prefix_id" in header else None
    arr, pr, out, pid, ids = [], [], [], [], {}
    prev = 0.0
    for line, r in rows:
        s = r[ja].strip()
        try:
            a = float(s)
        except ValueError:
            a = math.nan
        if not math.isfinite(a) or a < 0:
            raise SpecError(f"{path} line {line}: arrival_s must be a finite number >= 0 [s], got {s!r}")
        if a < prev:
            raise SpecError(f"{path} line {line}: arrival_s must be non-decreasing, got {a:g} after {prev:g}")
        prev = a
        arr.append(a)
        pr.append(_cell_int(path, line, "prompt_tokens", r[jp]))
        out.append(_cell_int(path, line, "output_tokens", r[jo]))
        if jid is not None:
            key = r[jid].strip()
            pid.append(ids.setdefault(key, len(ids)) if key else -1)
    trace = Trace(np.array(arr), np.array(pr), np.array(out), np.array(pid) if jid is not None else None)
    return Traffic(trace=trace, prefix_ratio=prefix_ratio)


def length_dist_from_csv(path, column: str) -> LengthDist:
    """Empirical distribution of the integer column ``column`` of the CSV file at ``path`` (header row
    first); SpecError naming the file, row and rule for a missing column or a bad value."""
    header, rows = _read_csv(path)
    if column not in header:
        raise SpecError(f"{path}: column {column!r} not found; the header has {header}")
    j = header.index(column)
    vals = [_cell_int(path, i, column, r[j]) for i, r in rows]
    if not vals:
        raise SpecError(f"{path}: column {column!r} has no rows")
    return LengthDist.empirical(tuple(vals))

"""Tables for people: rounded numbers, units in the headers, no index column, nothing truncated.

The sweeps return tidy frames whose column names carry their unit as a suffix (``step_ms``, ``kv_GB``,
``rate_per_s``). :func:`people_table` turns such a frame into an HTML table a reader can use: each header is
a short label with its unit (``step time [ms]``), numbers are rounded per column to a few significant digits
with thousands separators, booleans read yes/no, missing values a dash, and no row or cell is elided.
Wide tables scroll sideways inside their own box instead of hiding columns off-screen.
"""

from __future__ import annotations

import html
import math
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from ..errors import SpecError

__all__ = ["people_table", "PeopleTable", "header_for", "format_number", "HEADERS", "SourcesView", "sources_view",
           "ASSUMED_TINT"]

#: readable header of every column name the sweeps produce that the suffix rule alone would not get right
HEADERS: dict[str, str] = {
    "layout": "layout", "feasible": "fits in memory", "reason": "note",
    "weights_GB": "weights [GB]", "kv_GB": "KV cache [GB]", "activations_GB": "activations [GB]",
    "reserve_GB": "runtime reserve [GB]", "total_GB": "total [GB]", "usable_GB": "usable HBM [GB]",
    "memory_GB": "memory per GPU [GB]",
    "step_ms": "step time [ms]", "attention_ms": "attention [ms]", "core_ms": "attention core [ms]",
    "ffn_ms": "FFN/MoE [ms]", "head_ms": "LM head [ms]", "comm_ms": "communication [ms]",
    "overhead_ms": "overheads [ms]", "tokens_per_s": "throughput [tokens/s]",
    "draft_weights_GB": "draft weights [GB]", "draft_kv_GB": "draft KV [GB]", "tokens_per_step": "tokens per step",
    "draft_ms": "draft [ms]", "host_ms": "draft lookup on the CPU [ms]", "hops_ms": "sends between stages [ms]",
    "stall_ms": "wait for the slowest stage [ms]",
    "src": "from", "dst": "to", "kv_primitive": "KV move", "weights_primitive": "weights move",
    "kv_recv_GB": "KV received [GB/rank]", "kv_send_GB": "KV sent [GB/rank]", "kv_freed_GB": "KV freed [GB/rank]",
    "weights_recv_GB": "weights received [GB/rank]", "serial_ms": "serial [ms]", "exposed_ms": "exposed [ms]",
    "policy": "policy", "total_s": "total [s]", "compute_s": "decode steps [s]", "handoff_s": "handoffs [s]",
    "switches": "switches", "capped_segments": "capped segments", "infeasible_segments": "segments that do not fit",
    "batch": "batch [sequences]", "context": "context [tokens]", "before": "best below", "after": "best above",
    "kind": "kind",
    "mode": "serving mode", "link": "link", "gpus": "GPUs", "goodput_per_gpu": "goodput [req/s per GPU]",
    "n_prefill": "prefill instances", "n_decode": "decode instances", "pd_gpu_ratio": "P:D GPU ratio",
    "ttft_ms": "TTFT p99 [ms]", "tpot_ms": "TPOT p99 [ms]", "transfer_ms": "KV transfer, serial [ms]",
    "prompt_sigma": "prompt log-sd σ", "mean_prompt_tokens": "mean prompt [tokens]",
    "prefill_mean_ms": "mean prefill [ms]", "service_cs2": "prefill time SCV",
    "instances": "instances", "load": "load ρ", "rate_per_s": "arrival rate [req/s]", "model": "queue model",
    "ttft_p99_formula_ms": "TTFT p99, formula [ms]", "ttft_p99_sim_ms": "TTFT p99, simulated [ms]",
    "error_pct": "error [%]", "requests": "simulated requests",
    "moe_layer_us": "MoE layer [µs]", "routed_layer_us": "routed GEMMs [µs]", "dispatch_layer_us": "dispatch [µs]",
    "combine_layer_us": "combine [µs]", "load_straggler": "busiest rank load / mean",
    "load_max_over_mean_before": "busiest rank / mean, static", "load_max_over_mean_after": "busiest rank / mean, placed",
    "tokens": "tokens", "pairs_per_rank_mean": "mean (token, expert) pairs per rank",
    "max_pairs_analytic": "busiest rank pairs, analytic", "max_pairs_monte_carlo": "busiest rank pairs, Monte Carlo",
    "monte_carlo_se": "Monte Carlo std. error",
    "quantity": "quantity", "value": "value",
    "name": "name", "attention": "attention", "layers": "layers", "hidden": "hidden size", "heads": "heads",
    "kv_heads": "KV heads", "moe": "MoE", "params_total": "parameters, total", "params_active": "parameters, active",
    "kv_bytes_per_token_bf16": "KV per token, BF16 [bytes]", "kv_bytes_per_token_fp8": "KV per token, FP8 [bytes]",
    "params_total_billion": "parameters, total [billion]", "params_active_billion": "parameters, active [billion]",
    "kv_KiB_per_token_bf16": "KV per token, BF16 [KiB]", "kv_KiB_per_token_fp8": "KV per token, FP8 [KiB]",
    "hbm_GiB": "HBM [GiB]", "hbm_GB": "HBM [GB]", "hbm_bw_TBps": "HBM bandwidth [TB/s]", "bf16_TFLOPS": "BF16 peak [TFLOP/s]",
    "fp8_TFLOPS": "FP8 peak [TFLOP/s]", "fp4_TFLOPS": "FP4 peak [TFLOP/s]",
    "ridge_flops_per_byte_bf16": "BF16 ridge [FLOP/B]",
    "scale_up_link": "scale-up link", "scale_up_size": "scale-up domain [GPUs]", "scale_out_link": "scale-out link",
    "line_rate_GBps": "line rate [GB/s]", "achievable_GBps": "achievable [GB/s]", "efficiency": "efficiency",
    "latency_us": "latency [µs]", "latency_per_rank_us": "latency per rank [µs]",
    "eta_mem": "η memory", "eta_compute": "η compute", "eta_attn_compute": "η attention compute",
    "eta_attn_mem": "η attention memory", "kernel_overhead_us": "kernel overhead [µs]",
    "step_overhead_ms": "step overhead [ms]", "usable_hbm_fraction": "usable HBM share", "reserve_GiB": "reserve [GiB]",
    "page_tokens": "KV page [tokens]", "preset": "preset", "field": "field", "source": "source",
    "memory_fraction_of": "share of (total / free / static HBM)", "engine": "serving engine",
    "usd_per_hour": "$ per hour", "usd_per_mtok": "$ per million tokens (input + output)",
    "usd_per_gpu_hour": "$ per GPU-hour", "gpu": "GPU", "all_in_kW": "all-in power per GPU [kW]",
}

#: unit suffixes a column name may end in, longest first, with the unit shown in the header
_SUFFIXES = [("_per_gpu", "per GPU"), ("_per_s", "/s"), ("_TFLOPS", "TFLOP/s"), ("_GBps", "GB/s"),
             ("_TBps", "TB/s"), ("_tokens", "tokens"), ("_GiB", "GiB"), ("_GB", "GB"), ("_MB", "MB"),
             ("_pct", "%"), ("_ms", "ms"), ("_us", "µs"), ("_s", "s"), ("_B", "B")]


def header_for(column: str) -> str:
    """The readable header of a tidy column name: :data:`HEADERS` if listed, else the name with its unit
    suffix moved into brackets (``"prefill_ms"`` -> ``"prefill [ms]"``) and underscores as spaces."""
    if column in HEADERS:
        return HEADERS[column]
    name = str(column)
    for suffix, unit in _SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return f"{name[: -len(suffix)].replace('_', ' ')} [{unit}]"
    return name.replace("_", " ").replace(".", ", ")


def format_number(value: Any, decimals: int | None = None, digits: int = 3) -> str:
    """One number as a reader sees it: ``1,186``, ``26.4``, ``0.0363``, ``∞``; ``decimals`` fixes the places."""
    if value is None:
        return "—"
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value)
    if math.isnan(v):
        return "—"
    if math.isinf(v):
        return "∞" if v > 0 else "−∞"
    auto = decimals is None
    if auto:
        decimals = _decimals([v], digits) or 0
    text = f"{v:,.{decimals}f}"
    if re.fullmatch(r"-?0\.?0*", text):  # rounds to zero: a lone tiny number keeps its magnitude
        return f"{v:.{max(digits - 1, 0)}e}" if auto and v != 0 else "0"
    return text


def _decimals(values: Iterable[float], digits: int) -> int | None:
    """Decimal places a column shares: enough for ``digits`` significant digits of its smallest non-zero
    magnitude (0 to 4); None when the magnitudes span more than 1,000x (each cell is then rounded alone)."""
    finite = [abs(v) for v in values if math.isfinite(v) and v != 0]
    if not finite or all(float(v).is_integer() for v in finite):
        return 0
    lo, hi = min(finite), max(finite)
    if hi / lo > 1e2:
        return None
    return int(min(4, max(0, digits - 1 - math.floor(math.log10(lo)))))


def _cell_places(v: Any, digits: int) -> int:
    """Decimal places of one cell rounded on its own: none for whole numbers, else ``digits`` significant (0-4)."""
    if isinstance(v, (int, np.integer)) or not math.isfinite(float(v)) or float(v).is_integer():
        return 0
    return int(min(4, max(0, digits - 1 - math.floor(math.log10(abs(float(v)))))))


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


@dataclass
class PeopleTable:
    """A formatted table: ``frame`` holds the display strings under readable headers; it renders as HTML in
    notebooks and reports (all rows, no index) and as aligned text elsewhere."""

    frame: pd.DataFrame
    numeric: list[bool]
    caption: str = ""

    def to_html(self) -> str:
        head = "".join(f'<th class="{"num" if n else "text"}">{html.escape(str(c))}</th>'
                       for c, n in zip(self.frame.columns, self.numeric))
        rows = []
        for rec in self.frame.itertuples(index=False, name=None):
            cells = "".join(f'<td class="{"num" if n else "text long" if len(str(v)) > 40 else "text"}">'
                            f'{html.escape(str(v))}</td>' for v, n in zip(rec, self.numeric))
            rows.append(f"<tr>{cells}</tr>")
        cap = f"<caption>{html.escape(self.caption)}</caption>" if self.caption else ""
        return ('<div class="llmexplore-table" style="overflow-x:auto;max-width:100%">'
                f'<table>{cap}<thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>')

    def _repr_html_(self) -> str:
        return self.to_html()

    def __repr__(self) -> str:
        text = self.frame.to_string(index=False, max_rows=None, max_cols=None, max_colwidth=None)
        return f"{self.caption}\n{text}" if self.caption else text

    def __len__(self) -> int:
        return len(self.frame)


def people_table(df: pd.DataFrame, columns: Iterable[str] | Mapping[str, str | None] | None = None, *,
                 digits: int | Mapping[str, int] = 3, headers: Mapping[str, str] | None = None,
                 missing: str | Mapping[str, str] = "—", caption: str = "") -> PeopleTable:
    """``df`` as a table for people.

    Parameters
    ----------
    df : a tidy frame (the index is dropped; a named index becomes a column).
    columns : which columns, in order: a list (headers from :func:`header_for`) or a mapping column ->
        header (None: the default header). Default: every column.
    digits : significant digits of each numeric column's smallest non-zero value (the column shares its
        decimal places; a column spanning more than 100x rounds each cell alone), or a mapping column ->
        fixed decimal places for the columns listed (others use 3 digits).
    headers : column -> header, overriding :func:`header_for` for the columns listed.
    missing : what a missing value (None, NaN) reads as: one text, or a mapping column -> text.
    caption : optional caption above the table.

    Integers and integral floats get thousands separators, booleans read yes/no, infinities "∞". Strings are
    never cut. A text column that is empty in every row (a ``reason`` with nothing to say) is left out.
    """
    if not isinstance(df, pd.DataFrame):
        raise SpecError(f"people_table needs a pandas DataFrame, got {type(df).__qualname__}")
    if df.index.name is not None or isinstance(df.index, pd.MultiIndex):
        df = df.reset_index()
    if columns is None:
        mapping = {c: None for c in df.columns}
    elif isinstance(columns, Mapping):
        mapping = dict(columns)
    else:
        mapping = {c: None for c in columns}
    unknown = [c for c in mapping if c not in df.columns]
    if unknown:
        raise SpecError(f"people_table: column(s) {unknown} not in the table; it has {list(df.columns)}")
    fixed = dict(digits) if isinstance(digits, Mapping) else {}
    headers = dict(headers or {})
    sig = digits if isinstance(digits, int) else 3
    out, numeric = {}, []
    for col, header in mapping.items():
        values = df[col].tolist()
        is_num = any(_is_number(v) for v in values) and all(
            _is_number(v) or v is None or isinstance(v, (bool, np.bool_)) for v in values)
        if is_num:
            places = fixed.get(col)
            if places is None:
                places = _decimals([float(v) for v in values if _is_number(v)], sig)
            shown = [format_number(v, places if places is not None else _cell_places(v, sig), sig)
                     if _is_number(v) else format_number(v) for v in values]
        else:
            shown = [format_number(v) if (v is None or isinstance(v, (bool, np.bool_)) or
                                          (isinstance(v, float) and math.isnan(v))) else str(v) for v in values]
            if values and all(v == "" for v in values):
                continue
        gap = missing.get(col, "—") if isinstance(missing, Mapping) else missing
        shown = [gap if (v is None or (isinstance(v, float) and math.isnan(v))) else t for v, t in zip(values, shown)]
        title = header or headers.get(col) or header_for(col)
        if title in out:
            raise SpecError(f"people_table: two columns would share the header {title!r}; name one in columns")
        out[title] = shown
        numeric.append(is_num)
    return PeopleTable(pd.DataFrame(out), numeric, caption)


# ---- the preset catalogue (notebooks/00_index) -------------------------------------------------------------

#: what each preset table shows, as its caption
PRESET_CAPTIONS = {
    "models": "Models, with the quantities derived from their configs (parameters, KV bytes per token)",
    "hardware": "Accelerators (dense peaks)",
    "links": "Links (per GPU, per direction)",
    "runtime": "Runtime efficiencies: the knobs a calibration fits (uncalibrated defaults are marked assumptions)",
    "storage": "Storage tiers for an offloaded KV cache (read bandwidth and latency; effective = Little's law at the "
               "queue depth)",
    "targets": "Latency targets: TTFT and TPOT bounds on a statistic over requests (MLPerf Inference server scenarios)",
    "speculative": "Speculative decoding: draft method and length, and the acceptance measured under the stated "
                   "conditions (tokens per step = accepted drafts + the target's own token)",
    "prices": "Prices: US dollars per GPU-hour in each tier, each with the date it was read (prices change fast)",
    "power": "GPU power: board power limit, idle and HBM-streaming power (the energy roofline's anchors) and the "
             "all-in power per GPU (with host, network and facility overhead)",
}


@dataclass
class TableGroup:
    """Several :class:`PeopleTable` s shown one after the other (HTML with captions, or text)."""

    tables: list[PeopleTable]

    def _repr_html_(self) -> str:
        return "".join(t.to_html() for t in self.tables)

    def __repr__(self) -> str:
        return "\n\n".join(repr(t) for t in self.tables)


def preset_tables(first: str = "models") -> TableGroup:
    """Every preset table of :mod:`llmexplore.catalog` for people, the kind ``first`` first."""
    from .. import presets

    kinds = list(presets.KINDS)
    if first not in kinds:
        raise SpecError(f"first must be one of {kinds}, got {first!r}")
    order = [first] + [k for k in kinds if k != first]
    return TableGroup([people_table(_preset_frame(k), caption=PRESET_CAPTIONS.get(k, k)) for k in order])


#: headers of the latency-target table: its ttft_ms/tpot_ms bound the entry's own stat, not the p99 that
#: HEADERS gives the same names in serving results
_TARGET_HEADERS = {"ttft_ms": "TTFT target [ms]", "tpot_ms": "TPOT target [ms]", "stat": "statistic bounded",
                   "e2e_ms": "end-to-end target [ms] (0: none)"}


def _preset_frame(kind: str) -> pd.DataFrame:
    from .. import catalog

    frame = catalog.preset_frame(kind)
    if kind == "models":  # counts in billions, bytes in KiB: "B" would mean both
        frame = frame.assign(**{c + "_billion": frame.pop(c) / 1e9 for c in ("params_total", "params_active")})
        frame = frame.assign(**{f"kv_KiB_per_token_{d}": frame.pop(f"kv_bytes_per_token_{d}") / 1024
                                for d in ("bf16", "fp8")})
    # memory in GB (10^9 B) as every figure and table of the workbook gives it; the presets keep the GiB drivers
    # report (hbm_GiB, reserve_GiB)
    for col in ("hbm_GiB", "reserve_GiB"):
        if col in frame:  # renamed in place: the column keeps its position
            frame = frame.rename(columns={col: col[:-4] + "_GB"})
            frame[col[:-4] + "_GB"] = frame[col[:-4] + "_GB"] * (1 << 30) / 1e9
    return frame.rename(columns=_TARGET_HEADERS) if kind == "targets" else frame


#: background of a preset number marked as an assumption (a value to calibrate, not a measurement)
ASSUMED_TINT = "#fff3d6"


def _is_assumption(source: str) -> bool:
    return str(source).strip().lower().startswith("assumption")


def _value_text(value: Any, unit: str) -> str:
    """A preset number with its unit as a reader reads it: bytes in KiB/MiB/GiB, big counts in billions or
    millions, no trailing zeros (0.9, not 0.9000)."""
    unit = "µs" if unit == "us" else unit
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return f"{value} {unit}".strip()
    v = float(value)
    if unit == "B" and abs(v) >= 1024:
        step, name = next((st, nm) for st, nm in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"))
                          if abs(v) >= st)
        return f"{v / step:,.4g} {name}"
    if not unit and abs(v) >= 1e9:
        return f"{v / 1e9:,.4g} billion"
    text = f"{v:,.0f}" if v == round(v) and abs(v) < 1e15 else f"{v:,.4g}"
    return f"{text} {unit}".strip()


@dataclass
class SourcesView:
    """Every preset number and its source, one collapsible block per preset (HTML ``<details>``): the source
    that most of a preset's numbers share is said once, assumptions are tinted and counted in the block's
    line. ``frame``: :func:`llmexplore.catalog.source_frame`."""

    frame: pd.DataFrame

    def _blocks(self):
        for (kind, preset), g in self.frame.groupby(["kind", "preset"], sort=False):
            shared = g["source"].mode().iloc[0] if len(g) > 1 else ""
            shared = shared if (g["source"] == shared).sum() > 1 else ""
            yield kind, preset, g, shared

    def _repr_html_(self) -> str:
        parts = []
        for kind, preset, g, shared in self._blocks():
            assumed = int(g["source"].map(_is_assumption).sum())
            line = (f"<b>{html.escape(kind)}</b> · {html.escape(preset)}: {len(g)} number{'s' if len(g) != 1 else ''}"
                    + (f", <span style=\"background:{ASSUMED_TINT}\">{assumed} assumed</span>" if assumed else ""))
            rows = []
            for r in g.itertuples():
                tint = f' style="background:{ASSUMED_TINT}"' if _is_assumption(r.source) else ""
                src = "" if r.source == shared else html.escape(str(r.source))
                rows.append(f"<tr{tint}><td class=\"text\">{html.escape(r.field)}</td><td class=\"num\">"
                            f"{html.escape(_value_text(r.value, r.unit))}</td><td class=\"text long\">{src}</td></tr>")
            common = (f"<p style=\"margin:4px 0\">Source of the others: {html.escape(shared)}</p>" if shared else "")
            parts.append(f"<details><summary>{line}</summary>{common}<div class=\"llmexplore-table\"><table><thead>"
                         "<tr><th class=\"text\">field</th><th class=\"num\">value</th><th class=\"text\">source"
                         f"</th></tr></thead><tbody>{''.join(rows)}</tbody></table></div></details>")
        key = (f"<p><span style=\"background:{ASSUMED_TINT}\">Tinted</span>: a number marked as an assumption "
               "(to calibrate). Open a preset for its numbers.</p>")
        return key + "".join(parts)

    def __repr__(self) -> str:
        lines = []
        for kind, preset, g, shared in self._blocks():
            lines.append(f"{kind} · {preset}" + (f" (source: {shared})" if shared else ""))
            for r in g.itertuples():
                mark = " [assumption]" if _is_assumption(r.source) else ""
                src = "" if r.source == shared else f"  — {r.source}"
                lines.append(f"  {r.field} = {_value_text(r.value, r.unit)}{mark}{src}")
        return "\n".join(lines)

    def __len__(self) -> int:
        return len(self.frame)


def sources_view() -> SourcesView:
    """:class:`SourcesView` of every preset number (the index's sources section)."""
    from .. import catalog

    return SourcesView(catalog.source_frame())


def catalog_sentence() -> str:
    """The index's finding on presets: how many of each kind the workbook holds."""
    from .. import catalog

    names = {"models": "models", "hardware": "accelerators", "links": "links", "runtime": "runtime presets",
             "storage": "storage tiers", "targets": "latency targets"}
    parts = [f"{n} {names.get(k, k)}" for k, n in catalog.preset_counts().items()]
    return f"The workbook's presets hold {', '.join(parts[:-1])} and {parts[-1]}."


def sources_sentence() -> str:
    """The index's finding on sources: how many numbers the presets hold and how many are assumptions."""
    from .. import catalog

    sources = catalog.source_frame()
    assumed = int(sources["source"].map(_is_assumption).sum())
    return (f"Each of the {len(sources):,} numbers in the presets has a source; {assumed} of them are marked as "
            f"assumptions to calibrate.")

"""Command line: ``llmexplore <command> ...`` (also ``python -m llmexplore``).

Commands:

* ``report``  execute the notebooks headless and write offline HTML reports (:mod:`llmexplore.report`).
* ``presets`` list model, hardware, link or runtime presets with their derived quantities.
* ``layouts`` memory per rank and decode step time of the attention layouts TP, CP, DPA and DOP at one
  (batch, context) point, and the fastest layout that fits.
* ``pd``      prefill/decode disaggregation vs colocated serving: one prefill, one decode step, the KV
  transfer, and the smallest pools meeting TTFT/TPOT targets at an arrival rate.
* ``moe``     MoE decode on N GPUs split into TP x EP, under skewed routing, with optional redundant experts
  (EPLB), against pure TP.
* ``calibrate`` fit the runtime efficiencies to measured decode/prefill times in a CSV, print the error per
  point and overall, optionally save the fit as a preset overlay.

Conventions shared by every command (add new commands the same way: one ``_add_<name>`` function that
declares the options and one ``cmd_<name>`` function that runs it and returns the exit status):

* ``--json`` writes one JSON document to stdout, strictly valid (no NaN/Infinity: such numbers become
  ``null`` and the record's ``reason`` says why); without it, aligned plain-text tables.
* Bad input (unknown preset, a size that is not a positive integer, ranks that do not divide the model, an
  unknown option, a missing one) prints exactly one line ``llmexplore: error: <field> ... got <value>`` on
  stderr and exits with status 2. No traceback: argparse's own errors are one line too.
* A question with no answer (:class:`~llmexplore.errors.InfeasibleError`) exits with status 1 unless the
  command reports it as a result (``layouts`` prints the table with ``best: none fits``, status 0).
* Any other exception is a bug and propagates with its traceback.

Only the standard library is imported at start-up; each command imports what it needs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from .errors import InfeasibleError, LLMExploreError

__all__ = ["main", "build_parser", "PROG"]

PROG = "llmexplore"
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


# ---- errors ------------------------------------------------------------------------------------------------
class UsageError(Exception):
    """Bad command-line input detected by the parser (one-line message, exit status 2)."""


class _Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors are exceptions with a one-line message (no usage dump, no exit)."""

    def error(self, message: str):  # noqa: D401 - argparse API
        raise UsageError(message)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _fail(message: str, code: int = EXIT_USAGE) -> int:
    print(f"{PROG}: error: {_one_line(message)}", file=sys.stderr)
    return code


def _shown(text: str) -> str:
    """A user-typed value as it appears in a message: bare if it is one plain word, else quoted."""
    return text if text and text.isprintable() and not any(c.isspace() for c in text) else repr(text)


# ---- typed options -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Rule:
    """How to read one option value: ``convert(text)`` returns the value or raises ValueError; ``rule``
    completes the sentence "<option> must be ..."."""

    rule: str
    convert: Callable[[str], Any]


def int_at_least(lo: int) -> Rule:
    def convert(text: str) -> int:
        value = int(text.strip())
        if value < lo:
            raise ValueError(text)
        return value

    return Rule(f"an integer >= {lo}", convert)


def float_at_least(lo: float, *, strict: bool = False) -> Rule:
    """A finite number >= lo (> lo if ``strict``)."""
    def convert(text: str) -> float:
        value = float(text)
        if not math.isfinite(value) or value < lo or (strict and value == lo):
            raise ValueError(text)
        return value

    return Rule(f"a finite number {'>' if strict else '>='} {lo:g}", convert)


def one_of(choices: Iterable[str]) -> Rule:
    choices = list(choices)

    def convert(text: str) -> str:
        if text not in choices:
            raise ValueError(text)
        return text

    return Rule(f"one of {', '.join(choices)}", convert)


class _Checked(argparse.Action):
    """Store an option converted by a :class:`Rule`; else a usage error naming option, rule and value."""

    def __init__(self, option_strings, dest, check: Rule, **kwargs):
        self.check = check
        kwargs.setdefault("help", "")
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        try:
            value = self.check.convert(values)
        except (ValueError, TypeError, OverflowError):
            field = option_string or self.dest
            raise UsageError(f"{field} must be {self.check.rule}, got {_shown(values)}") from None
        setattr(namespace, self.dest, value)


class _ParamPairs(argparse.Action):
    """``-p NAME VALUE`` (repeatable): collect ``{NAME: VALUE-text}``; NAME an identifier, given once."""

    def __call__(self, parser, namespace, values, option_string=None):
        name, text = values
        if not name.isidentifier():
            raise UsageError(f"{option_string} NAME must be a Python identifier, got {_shown(name)}")
        pairs = dict(getattr(namespace, self.dest, None) or {})
        if name in pairs:
            raise UsageError(f"{option_string} {name} given twice ({_shown(pairs[name])} and "
                             f"{_shown(text)}); give each parameter once")
        pairs[name] = text
        setattr(namespace, self.dest, pairs)


# ---- output helpers ----------------------------------------------------------------------------------------
def jsonable(value: Any) -> Any:
    """Plain JSON types: mappings, sequences, numpy scalars/arrays; non-finite floats become None."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):  # numpy scalar or array
        return jsonable(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    return str(value)  # paths and the like


def print_json(value: Any) -> None:
    json.dump(jsonable(value), sys.stdout, indent=2, allow_nan=False)
    sys.stdout.write("\n")


@dataclass(frozen=True)
class Col:
    """One column of a text table: record key, header, and a format spec or function for the cell."""

    key: str
    header: str
    fmt: str | Callable[[Any], str] = ""

    def cell(self, record: Mapping[str, Any]) -> str:
        value = record.get(self.key)
        if value is None:
            return "-"
        if callable(self.fmt):
            return self.fmt(value)
        if isinstance(value, bool):
            return "yes" if value else "no"
        return format(value, self.fmt)


def format_table(records: Sequence[Mapping[str, Any]], cols: Sequence[Col]) -> str:
    """Aligned plain-text table: text columns left-aligned, numeric columns right-aligned."""
    cells = [[c.cell(r) for c in cols] for r in records]
    numeric = [all(isinstance(r.get(c.key), (int, float)) and not isinstance(r.get(c.key), bool)
                   for r in records if r.get(c.key) is not None) for c in cols]
    widths = [max([len(c.header)] + [len(row[i]) for row in cells]) for i, c in enumerate(cols)]

    def line(values):
        out = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)]
        return "  ".join(out).rstrip()

    return "\n".join([line([c.header for c in cols]), *(line(row) for row in cells)])


def billions(n: float) -> str:
    return f"{n / 1e9:.2f}B"


# ---- report ------------------------------------------------------------------------------------------------
def _add_report(sub) -> None:
    p = sub.add_parser("report", help="execute the notebooks and write offline HTML reports",
                       description="Execute every notebook headless (papermill) and export each to an "
                                   "offline HTML report plus an index.html.")
    p.add_argument("--out", default="reports", metavar="DIR", help="output directory (default: reports)")
    p.add_argument("-p", "--parameter", dest="parameters", nargs=2, metavar=("NAME", "VALUE"),
                   action=_ParamPairs, default={},
                   help="inject a notebook parameter (repeatable); VALUE is read as int, float, "
                        "true/false, none, or else a string")
    p.add_argument("--notebook", dest="notebooks", action="append", metavar="NAME",
                   help="only this notebook (path or name in notebooks/; repeatable; default: all)")
    p.add_argument("--timeout", dest="timeout_s", action=_Checked, check=float_at_least(0, strict=True),
                   metavar="S", default=None, help="per-cell timeout [s]")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=cmd_report)


def cmd_report(args) -> int:
    from . import report

    parameters = {name: report.parse_param_value(text) for name, text in args.parameters.items()}
    kwargs: dict[str, Any] = {"out_dir": args.out, "parameters": parameters, "notebooks": args.notebooks,
                              "progress": not args.quiet}
    if args.timeout_s is not None:
        kwargs["timeout_s"] = args.timeout_s
    try:
        paths = report.build_reports(**kwargs)
    except report.ReportError as exc:  # some notebooks failed; the others' reports were written
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except ValueError as exc:  # e.g. a -p NAME that no notebook's parameters cell defines
        return _fail(str(exc))
    for path in paths:
        print(path)
    return EXIT_OK


# ---- presets -----------------------------------------------------------------------------------------------
def _links_of(r: Mapping[str, Any]) -> str:
    up = f"{r['scale_up_link']} x{r['scale_up_size']}"
    return f"{up} + {r['scale_out_link']}" if r.get("scale_out_link") else up


#: kind -> (record builder, human table columns)
#: table columns of `presets KIND` (the records come from llmexplore.catalog.preset_records)
PRESET_VIEWS: dict[str, list[Col]] = {
    "models": [
        Col("name", "name"), Col("attention", "attention"), Col("layers", "layers"), Col("hidden", "hidden"),
        Col("moe", "moe"), Col("params_total", "params_total", billions),
        Col("params_active", "params_active", billions),
        Col("kv_bytes_per_token_bf16", "KV B/token bf16", ",.0f"),
        Col("kv_bytes_per_token_fp8", "KV B/token fp8", ",.0f"),
    ],
    "hardware": [
        Col("name", "name"), Col("hbm_GiB", "hbm_GiB", "g"), Col("hbm_bw_TBps", "hbm_bw_TBps", "g"),
        Col("bf16_TFLOPS", "bf16_TFLOPS", "g"), Col("fp8_TFLOPS", "fp8_TFLOPS", "g"),
        Col("ridge_flops_per_byte_bf16", "ridge bf16 FLOP/B", ".0f"), Col("links", "links"),
    ],
    "links": [
        Col("name", "name"), Col("kind", "kind"), Col("line_rate_GBps", "line_rate_GBps", "g"),
        Col("achievable_GBps", "achievable_GBps", "g"), Col("efficiency", "efficiency", ".0%"),
        Col("latency_us", "latency_us", "g"), Col("latency_per_rank_us", "+us/rank", "g"),
    ],
    "runtime": [
        Col("name", "name"), Col("eta_mem", "eta_mem", "g"), Col("eta_compute", "eta_compute", "g"),
        Col("eta_attn_compute", "eta_attn_compute", "g"), Col("eta_attn_mem", "eta_attn_mem", "g"),
        Col("kernel_overhead_us", "kernel_overhead_us", "g"),
        Col("step_overhead_ms", "step_overhead_ms", "g"),
        Col("usable_hbm_fraction", "usable_hbm_fraction", "g"), Col("reserve_GiB", "reserve_GiB", "g"),
        Col("page_tokens", "page_tokens", "d"),
    ],
}


def _add_presets(sub) -> None:
    p = sub.add_parser("presets", help="list presets with their derived quantities",
                       description="List the presets of one kind (built-in data/*.yaml plus any files named "
                                   "in LLMEXPLORE_PRESETS) with their derived quantities.")
    p.add_argument("kind", choices=list(PRESET_VIEWS), help="which presets")
    p.add_argument("--json", action="store_true",
                   help="a JSON list of objects (every field, sources included)")
    p.set_defaults(func=cmd_presets)


def cmd_presets(args) -> int:
    from . import catalog

    cols = PRESET_VIEWS[args.kind]
    records = catalog.preset_records(args.kind)
    if args.json:
        print_json(records)
        return EXIT_OK
    if args.kind == "hardware":
        for r in records:
            r["links"] = _links_of(r)
    print(format_table(records, cols))
    return EXIT_OK


# ---- shared option groups -----------------------------------------------------------------------------------
def _model_gpu(req, model_help: str = "model preset (see: presets models)") -> None:
    req.add_argument("--model", required=True, metavar="M", help=model_help)
    req.add_argument("--gpu", required=True, metavar="G", help="hardware preset (see: presets hardware)")


def _dtypes_runtime(p, *, weight_default: str = "bf16", kv: bool = True) -> None:
    from .units import DTYPE_BYTES

    dtypes = one_of(sorted(DTYPE_BYTES))
    p.add_argument("--weight-dtype", default=weight_default, action=_Checked, check=dtypes, metavar="DTYPE",
                   help=f"weight dtype, {dtypes.rule} (default: {weight_default})")
    if kv:
        p.add_argument("--kv-dtype", default="bf16", action=_Checked, check=dtypes, metavar="DTYPE",
                       help=f"KV-cache dtype, {dtypes.rule} (default: bf16)")
    p.add_argument("--runtime", default="default", metavar="NAME", help="runtime preset (default: default)")


# ---- layouts -----------------------------------------------------------------------------------------------
def _add_layouts(sub) -> None:
    p = sub.add_parser("layouts", help="memory and decode step time of TP, CP, DPA and DOP at one point",
                       description="Memory per rank [GB] by part, feasibility, and decode step time [ms] of "
                                   "the attention layouts TP, CP, DPA and DOP on T ranks at one (batch, "
                                   "context) point, and the fastest layout that fits.")
    req = p.add_argument_group("required")
    _model_gpu(req)
    req.add_argument("--ranks", required=True, action=_Checked, check=int_at_least(1), metavar="T",
                     help="ranks T in the attention group")
    req.add_argument("--batch", required=True, action=_Checked, check=int_at_least(1), metavar="B",
                     help="concurrent sequences B")
    req.add_argument("--context", required=True, action=_Checked, check=int_at_least(1), metavar="S",
                     help="context length S [tokens]")
    _dtypes_runtime(p)
    p.add_argument("--q-tokens", default=1, action=_Checked, check=int_at_least(1), metavar="Q",
                   help="query tokens per sequence per step (speculative decoding; default: 1)")
    p.add_argument("--context-cv", default=0.0, action=_Checked, check=float_at_least(0.0), metavar="CV",
                   help="coefficient of variation of context lengths (default: 0, all equal)")
    p.add_argument("--scale-up-link", metavar="LINK", help="link preset (default: the GPU's own)")
    p.add_argument("--scale-out-link", metavar="LINK", help="link preset (default: the GPU's own)")
    p.add_argument("--json", action="store_true",
                   help='JSON: {"layouts": [...], "best": ..., "inputs": {...}}')
    p.set_defaults(func=cmd_layouts)


LAYOUT_COLS = [
    Col("layout", "layout"), Col("feasible", "fits"),
    Col("weights_GB", "weights GB", ".2f"), Col("kv_GB", "KV GB", ".2f"),
    Col("activations_GB", "act GB", ".2f"), Col("reserve_GB", "reserve GB", ".2f"),
    Col("total_GB", "total GB", ".2f"), Col("usable_GB", "usable GB", ".2f"),
    Col("step_ms", "step ms", ".2f"), Col("attention_ms", "attn ms", ".2f"), Col("ffn_ms", "FFN ms", ".2f"),
    Col("comm_ms", "comm ms", ".2f"), Col("tokens_per_s", "tok/s", ".0f"), Col("reason", "reason"),
]


def _layout_record(row: Mapping[str, Any]) -> dict[str, Any]:
    """A layout_table row with plain Python values; non-finite numbers become None, explained in reason."""
    rec = jsonable(dict(row))
    notes = [f"{k} is {row[k]} (not representable in JSON)" for k, v in rec.items()
             if v is None and isinstance(row[k], float)]
    if notes:
        rec["reason"] = "; ".join([*([rec["reason"]] if rec.get("reason") else []), *notes])
    return rec


def _best_line(records: Sequence[Mapping[str, Any]], best: str | None) -> str:
    if best is not None:
        r = next(r for r in records if r["layout"] == best)
        if r["step_ms"] is None or r["tokens_per_s"] is None:
            return f"best: {best}"
        return f"best: {best} ({r['step_ms']:.1f} ms/step, {r['tokens_per_s']:.0f} tok/s)"
    sized = [r for r in records if r.get("total_GB") is not None]
    if not sized:
        return "best: none fits"
    r = min(sized, key=lambda r: r["total_GB"])
    return f"best: none fits (closest: {r['layout']} {r['reason'] or 'is infeasible'})"


def cmd_layouts(args) -> int:
    from . import sweeps
    from .models.attention import Deployment

    dep = Deployment.build(args.model, args.gpu, args.ranks, runtime=args.runtime,
                           weight_dtype=args.weight_dtype, kv_dtype=args.kv_dtype, q_tokens=args.q_tokens,
                           context_cv=args.context_cv, scale_up_link=args.scale_up_link,
                           scale_out_link=args.scale_out_link)
    table = sweeps.layout_table(dep, args.batch, args.context)
    best = sweeps.best_layout(table)
    records = [_layout_record(row) for row in table.to_dict("records")]
    inputs = {
        "model": dep.model.name, "gpu": dep.hardware.name, "ranks": dep.ranks, "batch": args.batch,
        "context": args.context, "weight_dtype": dep.weight_dtype, "kv_dtype": dep.kv_dtype,
        "act_dtype": dep.act_dtype, "q_tokens": dep.q_tokens, "context_cv": dep.context_cv,
        "runtime": dep.runtime.name, "scale_up_link": dep.fabric.scale_up.name,
        "scale_out_link": dep.fabric.scale_out.name if dep.fabric.scale_out else None,
    }
    if args.json:
        print_json({"layouts": records, "best": best, "inputs": inputs})
        return EXIT_OK
    print(f"{dep.label()}; batch {args.batch}, context {args.context} tokens"
          + (f", {dep.q_tokens} query tokens/step" if dep.q_tokens != 1 else "")
          + (f", context cv {dep.context_cv:g}" if dep.context_cv else ""))
    print("memory per rank [GB], decode step [ms]")
    print(format_table(records, LAYOUT_COLS))
    print(_best_line(records, best))
    return EXIT_OK


# ---- pd ----------------------------------------------------------------------------------------------------
def _add_pd(sub) -> None:
    p = sub.add_parser("pd", help="prefill/decode disaggregation vs colocated serving",
                       description="Time of one prefill and one decode step, the KV transfer per request, and "
                                   "the smallest prefill/decode pools (and colocated pool) meeting p99 TTFT and "
                                   "TPOT targets at a Poisson arrival rate.")
    req = p.add_argument_group("required")
    _model_gpu(req)
    req.add_argument("--prompt", required=True, action=_Checked, check=int_at_least(1), metavar="P",
                     help="prompt tokens")
    req.add_argument("--output", required=True, action=_Checked, check=int_at_least(1), metavar="O",
                     help="output tokens")
    p.add_argument("--rate", default=10.0, action=_Checked, check=float_at_least(0.0, strict=True), metavar="R",
                   help="arrivals per second (default: 10)")
    p.add_argument("--ttft-ms", default=1000.0, action=_Checked, check=float_at_least(0.0, strict=True),
                   metavar="X", help="p99 TTFT target [ms] (default: 1000)")
    p.add_argument("--tpot-ms", default=50.0, action=_Checked, check=float_at_least(0.0, strict=True),
                   metavar="Y", help="p99 TPOT target [ms] (default: 50)")
    p.add_argument("--link", default="roce-400g", metavar="L", help="KV-transfer link preset (default: roce-400g)")
    p.add_argument("--nics", default=None, action=_Checked, check=int_at_least(1), metavar="N",
                   help="NICs per instance (default: one per GPU)")
    p.add_argument("--prefill-tp", default=8, action=_Checked, check=int_at_least(1), metavar="A",
                   help="GPUs per prefill instance (default: 8)")
    p.add_argument("--decode-tp", default=8, action=_Checked, check=int_at_least(1), metavar="B",
                   help="GPUs per decode (and colocated) instance (default: 8)")
    p.add_argument("--batch", default=64, action=_Checked, check=int_at_least(1), metavar="N",
                   help="decode batch at which decode_step_ms is reported (default: 64)")
    p.add_argument("--prompt-sigma", default=0.0, action=_Checked, check=float_at_least(0.0), metavar="SIG",
                   help="log-sd of lognormal prompt lengths around the median --prompt (default: 0, all equal)")
    p.add_argument("--serial", action="store_true", help="send the KV after the prefill (default: layer-wise)")
    _dtypes_runtime(p)
    p.add_argument("--json", action="store_true", help="JSON output")
    p.set_defaults(func=cmd_pd)


def cmd_pd(args) -> int:
    from . import pd_sweeps, presets

    presets.link(args.link)  # unknown link: one-line error before any work
    s = pd_sweeps.setup(args.model, args.gpu, prefill_tp=args.prefill_tp, decode_tp=args.decode_tp,
                        prompt_tokens=args.prompt, output_tokens=args.output, rate_per_s=args.rate,
                        ttft_slo_ms=args.ttft_ms, tpot_slo_ms=args.tpot_ms, weight_dtype=args.weight_dtype,
                        kv_dtype=args.kv_dtype, runtime=args.runtime, nics=args.nics,
                        prompt_sigma=args.prompt_sigma)
    pt = pd_sweeps.point_summary(s, link=args.link, decode_batch=args.batch, pipelined=not args.serial)
    d, c = pt["disagg"], pt["colocated"]
    doc = {
        "prefill_ms": pt["prefill_ms"], "decode_step_ms": pt["decode_step_ms"], "decode_batch": args.batch,
        "decode_batch_cap": pt["decode_batch_cap"], "kv_transfer_GB": pt["kv_transfer_GB"],
        "transfer_serial_ms": pt["transfer_serial_ms"], "transfer_exposed_ms": pt["transfer_exposed_ms"],
        "disaggregated": {"feasible": d["feasible"], "prefill_instances": d["n_p"], "decode_instances": d["n_d"],
                          "gpus": d["gpus"], "goodput_per_gpu": d["goodput_per_gpu"], "pd_gpu_ratio": d["pd_ratio"],
                          "ttft_p99_ms": d["ttft_s"] * 1e3, "tpot_p99_ms": d["tpot_s"] * 1e3,
                          "reason": d["reason"]},
        "colocated": {"feasible": c["feasible"], "instances": c["n_c"], "gpus": c["gpus"],
                      "goodput_per_gpu": c["goodput_per_gpu"], "chunk_tokens": c["chunk_tokens"],
                      "ttft_p99_ms": c["ttft_s"] * 1e3, "tpot_p99_ms": c["tpot_s"] * 1e3, "reason": c["reason"]},
        "inputs": {"model": s.prefill.model.name, "gpu": s.prefill.hardware.name, "prompt": args.prompt,
                   "output": args.output, "rate": args.rate, "ttft_ms": args.ttft_ms, "tpot_ms": args.tpot_ms,
                   "prompt_sigma": args.prompt_sigma, "link": args.link, "nics": args.nics,
                   "prefill_tp": args.prefill_tp,
                   "decode_tp": args.decode_tp, "pipelined": not args.serial, "weight_dtype": args.weight_dtype,
                   "kv_dtype": args.kv_dtype, "runtime": s.prefill.runtime.name},
    }
    if args.json:
        print_json(doc)
        return EXIT_OK
    print(f"{s.prefill.model.label} on {s.prefill.hardware.label}: prompt {args.prompt}, output {args.output}, "
          f"{args.rate:g} req/s, p99 TTFT <= {args.ttft_ms:g} ms, TPOT <= {args.tpot_ms:g} ms")
    print(f"prefill of one prompt (TP{args.prefill_tp}): {doc['prefill_ms']:.2f} ms; decode step at batch "
          f"{args.batch} (TP{args.decode_tp}): {doc['decode_step_ms']:.2f} ms; decode batch fits up to "
          f"{pt['decode_batch_cap']}")
    print(f"KV per request {doc['kv_transfer_GB']:.3f} GB over {args.link}: {doc['transfer_serial_ms']:.2f} ms "
          f"serial, {doc['transfer_exposed_ms']:.2f} ms exposed ({'serial' if args.serial else 'pipelined'})")
    dd, cc = doc["disaggregated"], doc["colocated"]
    if dd["feasible"]:
        print(f"disaggregated: {dd['prefill_instances']} prefill + {dd['decode_instances']} decode instances = "
              f"{dd['gpus']} GPUs, {dd['goodput_per_gpu']:.3f} req/s/GPU, TTFT p99 {dd['ttft_p99_ms']:.0f} ms, "
              f"TPOT p99 {dd['tpot_p99_ms']:.1f} ms")
    else:
        print(f"disaggregated: infeasible ({dd['reason']})")
    if cc["feasible"]:
        print(f"colocated: {cc['instances']} instances = {cc['gpus']} GPUs, {cc['goodput_per_gpu']:.3f} req/s/GPU, "
              f"chunk {cc['chunk_tokens']} tokens, TTFT p99 {cc['ttft_p99_ms']:.0f} ms, TPOT p99 "
              f"{cc['tpot_p99_ms']:.1f} ms")
    else:
        print(f"colocated: infeasible ({cc['reason']})")
    return EXIT_OK


# ---- moe ---------------------------------------------------------------------------------------------------
def _add_moe(sub) -> None:
    p = sub.add_parser("moe", help="MoE decode: pure TP vs TP x EP under routing skew, with redundant experts",
                       description="Decode step of an MoE model on N GPUs split into tp = N / ep x ep: routed-expert "
                                   "GEMMs on the busiest rank, dispatch/combine all-to-all, load imbalance from a "
                                   "hot-expert skew, EPLB placement with redundant experts; compared with pure TP.")
    req = p.add_argument_group("required")
    _model_gpu(req, "MoE model preset (e.g. deepseek-v3)")
    req.add_argument("--gpus", required=True, action=_Checked, check=int_at_least(1), metavar="N", help="GPUs")
    req.add_argument("--batch-tokens", required=True, action=_Checked, check=int_at_least(1), metavar="T",
                     help="decode tokens per step (sequences, one token each)")
    p.add_argument("--ep", default=None, action=_Checked, check=int_at_least(1), metavar="E",
                   help="expert-parallel degree (default: N, data-parallel attention + EP)")
    p.add_argument("--skew", default=1.0, action=_Checked, check=float_at_least(1.0), metavar="Z",
                   help="hot-expert skew, max / mean expert load (default: 1, uniform)")
    p.add_argument("--redundant-experts", default=0, action=_Checked, check=int_at_least(0), metavar="R",
                   help="redundant expert slots placed by EPLB (default: 0)")
    p.add_argument("--no-eplb", action="store_true", help="static contiguous placement (needs R = 0)")
    p.add_argument("--context", default=2048, action=_Checked, check=int_at_least(1), metavar="S",
                   help="context length [tokens] (default: 2048)")
    _dtypes_runtime(p, weight_default="fp8", kv=False)
    p.add_argument("--json", action="store_true", help="JSON output")
    p.set_defaults(func=cmd_moe)


def _moe_record(md, batch, context, skew) -> dict[str, Any]:
    import numpy as np

    from .models import moe

    r = moe.step_time(md, batch, context, skew=skew)
    mem = moe.memory_per_gpu(md, batch, context)
    v = {k: float(np.asarray(x)) for k, x in r.items() if np.ndim(x) == 0 or np.size(x) == 1}
    return {"layout": md.label(), "tp": md.tp, "ep": md.ep, "redundant_experts": md.redundant,
            "balance": md.balance, "feasible": bool(mem["feasible"]), "step_ms": v["step_s"] * 1e3,
            "moe_layer_us": v["moe_layer_s"] * 1e6, "routed_layer_us": v["routed_layer_s"] * 1e6,
            "dispatch_layer_us": v["dispatch_layer_s"] * 1e6, "combine_layer_us": v["combine_layer_s"] * 1e6,
            "attention_ms": v["attention_s"] * 1e3, "comm_ms": v["comm_s"] * 1e3,
            "time_straggler": v["time_straggler"], "load_straggler": v["load_straggler"],
            "expected_imbalance": v["expected_imbalance"], "distinct_ranks": v["distinct_ranks"],
            "tokens_per_s": v["tokens_per_s"], "memory_GB": float(mem["total_B"]) / 1e9,
            "usable_GB": float(mem["usable_B"]) / 1e9}


def cmd_moe(args) -> int:
    from .models import moe

    ep = args.ep or args.gpus
    if args.gpus % ep:
        raise UsageError(f"--ep must divide --gpus ({args.gpus}), got {ep}")
    if args.no_eplb and args.redundant_experts:
        raise UsageError(f"--redundant-experts must be 0 with --no-eplb, got {args.redundant_experts}")
    balance = "none" if (args.no_eplb or ep == 1) else "eplb"
    kw = dict(weight_dtype=args.weight_dtype, runtime=args.runtime, layers=8)
    md = moe.MoEDeployment.build(args.model, args.gpu, args.gpus, tp=args.gpus // ep, ep=ep,
                                 redundant=args.redundant_experts, balance=balance, **kw)
    rec = _moe_record(md, args.batch_tokens, args.context, args.skew)
    ref = None
    if ep != 1 and md.model.moe_intermediate % args.gpus == 0:
        ref = _moe_record(moe.MoEDeployment.build(args.model, args.gpu, args.gpus, tp=args.gpus, ep=1, **kw),
                          args.batch_tokens, args.context, args.skew)
    doc = {**rec, "pure_tp": ref,
           "inputs": {"model": md.model.name, "gpu": md.hardware.name, "gpus": args.gpus, "ep": ep,
                      "batch_tokens": args.batch_tokens, "context": args.context, "skew": args.skew,
                      "redundant_experts": args.redundant_experts, "weight_dtype": args.weight_dtype,
                      "runtime": md.runtime.name, "layers_sampled": 8}}
    if args.json:
        print_json(doc)
        return EXIT_OK
    print(f"{md.model.label} on {args.gpus}x {md.hardware.label}: {args.batch_tokens} decode tokens per step, "
          f"context {args.context}, skew {args.skew:g}")
    cols = [Col("layout", "layout"), Col("feasible", "fits"), Col("step_ms", "step ms", ".2f"),
            Col("moe_layer_us", "MoE layer us", ".0f"), Col("routed_layer_us", "routed us", ".0f"),
            Col("dispatch_layer_us", "dispatch us", ".0f"), Col("combine_layer_us", "combine us", ".0f"),
            Col("load_straggler", "load max/mean", ".3f"), Col("expected_imbalance", "imbalance", ".3f"),
            Col("memory_GB", "GB/GPU", ".1f"), Col("tokens_per_s", "tok/s", ".0f")]
    print(format_table([r for r in (rec, ref) if r], cols))
    return EXIT_OK


# ---- calibrate ---------------------------------------------------------------------------------------------
def _add_calibrate(sub) -> None:
    p = sub.add_parser("calibrate", help="fit runtime efficiencies to measured step times",
                       description="Fit eta_mem, eta_compute, eta_attn_mem, kernel_overhead_us and "
                                   "step_overhead_ms to the decode/prefill rows of a CSV (format: "
                                   "data/calibration/README.md); print the error per point and overall.")
    p.add_argument("--data", required=True, metavar="FILE", help="calibration CSV")
    p.add_argument("--start", default="uncalibrated", metavar="NAME",
                   help="runtime preset to start from and use as the prior (default: uncalibrated)")
    p.add_argument("--name", default="calibrated", metavar="NAME",
                   help="name of the fitted runtime preset (default: calibrated)")
    p.add_argument("--save", metavar="FILE",
                   help="write the fit as a preset overlay YAML; use it with LLMEXPLORE_PRESETS=FILE and "
                        "--runtime NAME (or presets.add_file)")
    p.add_argument("--json", action="store_true", help='JSON: {"runtime": {...}, "points": [...], ...}')
    p.set_defaults(func=cmd_calibrate)


CALIBRATE_COLS = [
    Col("point", "point"), Col("model", "model"), Col("gpu", "gpu"), Col("ranks", "T"), Col("unit", "unit"),
    Col("measured", "measured", ".4g"), Col("predicted_before", "before fit", ".4g"),
    Col("predicted", "fitted", ".4g"), Col("error_pct", "error %", "+.2f"),
    Col("fitted", "in fit"),
]


def cmd_calibrate(args) -> int:
    import dataclasses as dc
    from pathlib import Path

    from .models import calibrate

    points = calibrate.load_points(args.data)
    result = calibrate.fit(points, start=args.start, name=args.name)
    rt = result["runtime"]
    params = {f: getattr(rt, f) for f in calibrate.FIT_FIELDS}
    if args.save:
        Path(args.save).write_text(calibrate.overlay_yaml(rt, args.data), encoding="utf-8")
    if args.json:
        print_json({"runtime": {"name": rt.name, **{f.name: getattr(rt, f.name) for f in dc.fields(rt)
                                                     if f.name not in ("name", "sources", "display_name")}},
                    "fitted": params, "points": result["table"], "rms_error_pct": result["rms_error_pct"],
                    "max_abs_error_pct": result["max_abs_error_pct"], "iterations": result["iterations"],
                    "start": result["start"], "saved": args.save})
        return EXIT_OK
    print(f"calibration of {len(points)} points from {args.data} (start: {result['start']})")
    print(format_table(result["table"], CALIBRATE_COLS))
    print(f"fit error over {sum(p.fitted for p in points)} time points: rms {result['rms_error_pct']:.2f}%, "
          f"max |error| {result['max_abs_error_pct']:.2f}% ({result['iterations']} iterations)")
    print("fitted: " + ", ".join(f"{k} = {v:.4g}" for k, v in params.items()))
    if args.save:
        print(f"saved runtime preset {rt.name!r} to {args.save}: use LLMEXPLORE_PRESETS={args.save} and "
              f"--runtime {rt.name}")
    return EXIT_OK


# ---- entry point -------------------------------------------------------------------------------------------
def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llmexplore")
    except PackageNotFoundError:
        return "unknown"


#: subcommand registration, in help order
COMMANDS = [_add_report, _add_presets, _add_layouts, _add_pd, _add_moe, _add_calibrate]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Analytical models of LLM serving deployments.")
    parser.add_argument("--version", action="version", version=f"{PROG} {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add in COMMANDS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return the exit status (0 ok, 1 failed or infeasible, 2 bad input)."""
    parser = build_parser()
    try:
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # --help / --version
            return exc.code if isinstance(exc.code, int) else EXIT_OK
        return args.func(args)
    except UsageError as exc:
        return _fail(str(exc))
    except InfeasibleError as exc:  # not bad input: a question without an answer
        return _fail(str(exc), EXIT_FAILED)
    except LLMExploreError as exc:  # SpecError, UnknownPresetError: bad input
        return _fail(str(exc))
    except BrokenPipeError:  # e.g. `llmexplore presets models | head -1`
        # Python docs recipe: point stdout at devnull so the flush at exit does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())

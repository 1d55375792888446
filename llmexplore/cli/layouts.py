"""``llmexplore layouts``: memory and decode step time of TP, CP, DPA and DOP at one point.

Memory per rank [GB] by part, feasibility, and decode step time [ms] of the attention layouts TP, CP, DPA and
DOP on T ranks at one (batch, context) point, and the fastest layout that fits (or, if none does, what would
fit). With --pp (pipeline stages of T ranks each) or --speculative the layouts are compared by their time per
output token.
"""

from __future__ import annotations

import numpy as np

from typing import Any, Mapping, Sequence

from ..errors import UnknownPresetError
from ._framework import (COMMON_FLAGS, EXIT_OK, Checked, Col, band_option, dtype_runtime_options,
                         format_table, int_in, jsonable, model_command, number_in, preset_name, print_json,
                         sampler_option, speculative_options)

__all__ = ["add", "run", "FLAGS"]

#: API field names -> the flags of this command (errors from the model name the flag the user typed)
FLAGS = {**COMMON_FLAGS, "ranks": "--ranks", "batch": "--batch", "context": "--context", "q_tokens": "--q-tokens",
         "context_cv": "--context-cv", "sampler": "--sampler", "pp": "--pp", "speculative": "--speculative",
         "accepted_length": "--accepted-length"}


def add(sub) -> None:
    from ..deployment import MAX_RANKS
    from ..models.step.engine import MAX_BATCH, MAX_CONTEXT

    p, req = model_command(sub, "layouts", __doc__,
                           help="memory and decode step time of TP, CP, DPA and DOP at one point")
    req.add_argument("--ranks", required=True, action=Checked, check=int_in(1, MAX_RANKS), metavar="T",
                     help="ranks T in the attention group")
    req.add_argument("--batch", required=True, action=Checked, check=int_in(1, MAX_BATCH), metavar="B",
                     help="concurrent sequences B")
    req.add_argument("--context", required=True, action=Checked, check=int_in(1, MAX_CONTEXT), metavar="S",
                     help="context length S [tokens]")
    dtype_runtime_options(p)
    band_option(p, default=True)
    p.add_argument("--q-tokens", default=1, action=Checked, check=int_in(1, 1 << 20), metavar="Q",
                   help="query tokens per sequence per step (a verify pass's width without its draft; default: 1)")
    p.add_argument("--pp", default=1, action=Checked, check=int_in(1, 128), metavar="P",
                   help="pipeline stages, each of --ranks GPUs running the layout (default: 1, no pipeline)")
    speculative_options(p)
    p.add_argument("--context-cv", default=0.0, action=Checked, check=number_in(0.0, 100.0), metavar="CV",
                   help="coefficient of variation of context lengths (default: 0, all equal)")
    sampler_option(p)
    p.add_argument("--scale-up-link", action=Checked, check=preset_name("links"), metavar="LINK",
                   help="link preset (default: the GPU's own)")
    p.add_argument("--scale-out-link", action=Checked, check=preset_name("links"), metavar="LINK",
                   help="link preset (default: the GPU's own)")
    p.add_argument("--json", action="store_true",
                   help='JSON: {"layouts": [...], "best": ..., "would_fit": [...], "inputs": {...}}')
    p.set_defaults(func=run, flags=FLAGS)


#: context axis [tokens] over which the CLI reports where the best layout changes at the chosen batch
BOUNDARY_AXIS = (16, 1 << 20)

LAYOUT_COLS = [
    Col("layout", "layout"), Col("feasible", "fits"),
    Col("weights_GB", "weights GB", ".2f"), Col("kv_GB", "KV GB", ".2f"),
    Col("activations_GB", "act GB", ".2f"), Col("reserve_GB", "reserve GB", ".2f"),
    Col("total_GB", "total GB", ".2f"), Col("usable_GB", "usable GB", ".2f"),
    Col("step_ms", "step ms", ".2f"), Col("tpot_ms", "ms/token", ".2f"), Col("attention_ms", "attn ms", ".2f"),
    Col("ffn_ms", "FFN ms", ".2f"),
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


def _best_line(records: Sequence[Mapping[str, Any]], best: str | None, would_fit: Sequence[Mapping]) -> str:
    if best is not None:
        r = next(r for r in records if r["layout"] == best)
        if r["tpot_ms"] is None or r["tokens_per_s"] is None:
            return f"best: {best}"
        per = "ms/token" if r.get("decoding") else "ms/step"
        return f"best: {best} ({r['tpot_ms']:.1f} {per}, {r['tokens_per_s']:.0f} tok/s)"
    sized = [r for r in records if r.get("total_GB") is not None]
    line = "best: none fits"
    if sized:
        r = min(sized, key=lambda r: r["total_GB"])
        line += f" (closest: {r['layout']} {r['reason'] or 'is infeasible'})"
    if would_fit:
        line += "; would fit: " + ", or ".join(f"{w['text']} ({', '.join(w['layouts'])})" for w in would_fit)
    else:
        line += "; no single change fits (tried FP8 weights and KV, more ranks, a smaller batch, a shorter context)"
    return line


def run(args) -> int:
    from .. import presets
    from ..models.layouts import crossover
    from ..models.step.engine import Deployment, not_resolved_reason
    from ..sweeps import layouts as layout_sweeps
    from ..models.step.uncertainty import DRAWS
    from ..sweeps.bands import boundary_bands, layout_bands

    for flag, name in (("--scale-up-link", args.scale_up_link), ("--scale-out-link", args.scale_out_link)):
        if name is not None:  # an unknown link is blamed on the flag that named it
            try:
                presets.link(name)
            except UnknownPresetError as exc:
                raise UnknownPresetError(flag + str(exc)[len("link"):]) from None
    dep = Deployment.build(args.model, args.gpu, args.ranks, runtime=args.runtime,
                           weight_dtype=args.weight_dtype, kv_dtype=args.kv_dtype, q_tokens=args.q_tokens,
                           context_cv=args.context_cv, scale_up_link=args.scale_up_link,
                           scale_out_link=args.scale_out_link, sampler=args.sampler)
    dec = layout_sweeps.decoding(dep, args.pp, args.speculative, args.accepted_length)
    table = layout_sweeps.layout_table(dep, args.batch, args.context, **dec)
    best = layout_sweeps.best_layout(table)
    records = [_layout_record(row) for row in table.to_dict("records")]
    bands = layout_bands(dep, args.batch, args.context, n=DRAWS if args.band else 0, **dec)
    for rec in records:  # the step time's parameter band (null without kernel curves, or where it does not fit)
        for side in ("lo", "hi"):
            v = bands[f"step_ms_{side}"].get(rec["layout"])
            rec[f"step_ms_{side}"] = v if v is not None and np.isfinite(v) else None
    would_fit = [] if best is not None else [
        {"change": w.change, "value": w.value, "layouts": list(w.layouts), "text": w.text}
        for w in crossover.would_fit(dep, args.batch, args.context)] if not (args.pp > 1 or args.speculative) else []
    inputs = {
        "model": dep.model.name, "gpu": dep.hardware.name, "ranks": dep.ranks, "batch": args.batch,
        "context": args.context, "weight_dtype": dep.weight_dtype, "kv_dtype": dep.kv_dtype,
        "act_dtype": dep.act_dtype, "q_tokens": dep.q_tokens, "context_cv": dep.context_cv,
        "sampler": dep.sampler, "runtime": dep.runtime.name, "scale_up_link": dep.fabric.scale_up.name,
        "scale_out_link": dep.fabric.scale_out.name if dep.fabric.scale_out else None,
        "pp": dec["pp"], "speculative": args.speculative,
        "accepted_length": dec["speculative"].tokens_per_step if dec["speculative"] else None,
    }
    bounds = boundary_bands(dep, args.batch, BOUNDARY_AXIS[0], BOUNDARY_AXIS[1], n=DRAWS if args.band else 0,
                            **dec)
    crossings = [{"before": r.before, "after": r.after, "kind": r.kind,
                  "context": float(r.context) if r.resolved else None,
                  "context_lo": float(r.context_lo) if args.band else None,
                  "context_hi": float(r.context_hi) if args.band else None,
                  "resolved": bool(r.resolved),
                  "text": (f"{r.before} -> {r.after or 'nothing fits'} at {r.context:,.0f} tokens"
                           + (f" [{r.context_lo:,.0f}-{r.context_hi:,.0f}]" if args.band and r.kind == "crossover"
                              else "")
                           if r.resolved else f"{r.before} -> {r.after}: not resolved by the model (the crossover's "
                                              f"band spans [{r.context_lo:,.0f}, {r.context_hi:,.0f}] tokens)")}
                 for r in bounds.itertuples()]
    if args.json:
        print_json({"layouts": records, "best": best, "best_agreement": bands["best_agreement"],
                    "band": bands["band"], "boundaries": crossings, "would_fit": would_fit,
                    "not_resolved": not_resolved_reason(dep) or None, "inputs": inputs})
        return EXIT_OK
    how = layout_sweeps.decoding_of(dep, **dec)
    print(f"{dep.label()}; batch {args.batch}, context {args.context} tokens"
          + (f", {dep.q_tokens} query tokens/step" if dep.q_tokens != 1 else "")
          + (f", context cv {dep.context_cv:g}" if dep.context_cv else "")
          + (f"; decoding {how}" if how else ""))
    print("memory per rank [GB], decode step [ms]" + (", time per output token [ms/token]" if how else ""))
    print(format_table(records, LAYOUT_COLS))
    print(_best_line(records, best, would_fit))
    if crossings:
        print(f"at batch {args.batch}, context {BOUNDARY_AXIS[0]:,}-{BOUNDARY_AXIS[1]:,} tokens: "
              + "; ".join(c["text"] for c in crossings))
    if best is not None and bands["best_agreement"] is not None:
        b = next(r for r in records if r["layout"] == best)
        print(f"{best} {'time per output token' if how else 'step'} {b['tpot_ms']:.2f} ms "
              f"[{b['step_ms_lo']:.2f}-{b['step_ms_hi']:.2f}]; {best} is fastest "
              f"in {bands['best_agreement']:.0%} of the kernel-parameter draws ({bands['band']['what']})")
    if not_resolved_reason(dep):
        print(not_resolved_reason(dep))
    return EXIT_OK

"""Live explorer of MoE expert parallelism: step time vs skew and routed load per GPU.

The figures are the notebook's (:func:`llmexplore.plots.moe.skew_figure`,
:func:`~llmexplore.plots.moe.rank_load_figure`) for the chosen TP x EP split, batch, skew and redundant
experts, decoded plainly, in a pipeline of stages (each stage the chosen split of the GPUs) or speculatively: then
the step-time figure and the status line are per output token. The status line prices each placement in $ per
million output tokens at the chosen price tier (``data/prices.yaml``, with the price's date).
Under pure TP the load chart shows one bar per GPU, all at the mean load.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

import numpy as np

from ..deployment import MAX_STAGES
from .. import _check, presets
from ..errors import SpecError
from ..models.moe import decode as moe_model
from ..plots import fmt
from ..plots import moe as moe_plots
from ..sweeps import moe as moe_sweeps
from ..sweeps import pricing
from . import Draw, Explorer, choice_slider, dropdown, log_options, preset_name

__all__ = ["MoEExplorer", "moe_explorer", "split_label", "NO_SPEC"]

#: the speculative dropdown's entry for plain decoding
NO_SPEC = "none (plain decoding)"

#: skew slider: 1.0 (uniform routing) to 5.0 in steps of 0.1
SKEWS = [round(1.0 + 0.1 * i, 1) for i in range(41)]
#: points on the skew axis of the step-time figure (plus the chosen skew)
N_SKEW = 21


def split_label(tp: int, ep: int) -> str:
    """``TP16``, ``TP2xEP8`` or ``DPA+EP16``: how the GPUs are split, as the sweeps name it."""
    return f"TP{tp}" if ep == 1 else (f"DPA+EP{ep}" if tp == 1 else f"TP{tp}xEP{ep}")


@dataclass
class MoEExplorer(Explorer):
    """MoE explorer (see :func:`moe_explorer`)."""

    FIGURES = ("skew", "loads")

    def evaluate(self):
        p, f = self.params(), self.fixed
        tp, ep = p["layout"]
        skew, batch = float(p["skew"]), int(p["batch"])
        redundant = int(p["redundant"]) if ep > 1 else 0
        if not f["splits"]:
            raise SpecError(
                f"gpus: no TP x EP split of {f['gpus']} GPUs suits {f['model']} (TP must divide the expert "
                "width and fit in a node, EP the routed experts); try 8, 16 or 32 GPUs")
        top = min(max(value for _, value in self.controls["skew"].options), f["max_skew"])
        skews = np.unique(np.r_[np.linspace(1.0, max(top, 1.0), N_SKEW), skew])
        md = moe_sweeps.config(f["model"], f["gpu"], f["gpus"], tp=tp, ep=ep, redundant=redundant,
                               balance="eplb" if ep > 1 else None, runtime=p["runtime"])
        spec = None if p["speculative"] == NO_SPEC else p["speculative"]
        # the fixed accepted length belongs to the preset it was given with; another preset runs at its own
        tau = f.get("accepted_length") if spec is not None and spec == f.get("speculative") else None
        dec = moe_sweeps.decoding(md, int(p["pp"]), spec, tau)
        df = moe_sweeps.step_vs_skew(f["model"], f["gpu"], f["gpus"], tp=tp, ep=ep, redundant=redundant,
                                     batch=batch, context=f["context"], skews=skews, runtime=p["runtime"], **dec)
        loads = moe_sweeps.gpu_loads(md, skew=skew)
        split = split_label(tp, ep)
        how = df["decoding"].iloc[0]
        if ep == 1:
            load_title = (f"{split}: every GPU holds 1/{tp} of every expert, so each carries the mean routed "
                          "load (no rank imbalance)")
            rank_title = "GPU (tensor-parallel rank)"
        else:
            load_title = (f"Routed tokens per EP rank at skew {fmt(skew, trim=True)}×, busiest first — "
                          f"static vs {md.label()}")
            rank_title = "EP rank (sorted by load)"
        draws = {
            "skew": Draw(moe_plots.skew_figure, df, {
                "skew_marker": skew, "title": (f"{split} at batch {batch:,}: decode step vs hot-expert skew" if not how
                                               else f"{split}, {how.split(' (')[0]}, batch {batch:,}: time per output "
                                                    "token vs skew")}),
            "loads": Draw(moe_plots.rank_load_figure, loads, {"title": load_title, "rank_title": rank_title}),
        }
        at = df[np.isclose(df["skew"], skew)].drop_duplicates("placement")
        # every placement rents the same GPUs (each pipeline stage is the split of all of them)
        at = moe_sweeps.priced(at.assign(gpus=f["gpus"] * int(p["pp"]), tokens_per_s=batch * 1e3 / at["tpot_ms"]),
                               f["gpu"], p["prices"])
        peak = moe_sweeps.max_relative_load(loads)
        price = pricing.tier_price(p["prices"], f["gpu"])
        cost = (f" Prices: {html.escape(pricing.price_label(p['prices'], price))}, {f['gpus'] * int(p['pp'])} GPUs "
                f"for ${float(at['usd_per_hour'].iloc[0]):,.2f}/hour." if price is not None
                else f" {html.escape(pricing.not_priced(p['prices'], f['gpu']).capitalize())}.")
        return draws, _status(at, peak, skew, how) + cost, {"at_skew": at, "loads": loads, "max_load": peak}


def _usd(r) -> str:
    """', $X per million output tokens' of a priced, feasible row ('' otherwise)."""
    v = getattr(r, "usd_per_mtok_output", float("nan"))
    return f", ${v:,.3g} per million output tokens" if v == v else ""


def _status(at, peak: dict[str, float], skew: float, how: str = "") -> str:
    if how:
        parts = [f"<b>{html.escape(r.placement)}</b> {fmt(r.tpot_ms, 'ms')} per output token "
                 f"(MoE layer {fmt(r.moe_layer_us, 'µs')}{_usd(r)})" + ("" if r.feasible else " — does not fit")
                 for r in at.itertuples()]
    else:
        parts = [f"<b>{html.escape(r.placement)}</b> {fmt(r.step_ms, 'ms')} per step "
                 f"(MoE layer {fmt(r.moe_layer_us, 'µs')}{_usd(r)})" + ("" if r.feasible else " — does not fit")
                 for r in at.itertuples()]
    text = (f"At skew {fmt(skew, trim=True)}×" + (f", {html.escape(how)}" if how else "") + ": "
            + "; ".join(parts) + ".")
    if len(peak) > 1:
        busiest = ", ".join(f"{html.escape(k)} {fmt(v)}× the mean" for k, v in peak.items())
        text += f" Busiest EP rank: {busiest}."
    if not bool(at["feasible"].all()):
        text = "<b>Does not fit in memory at this batch.</b> " + text
    return text


def moe_explorer(model: str = "deepseek-v3", gpu: str = "h200", gpus: int = 16, *, tp: int = 2, ep: int = 8,
                 batch: int = 256, context: int = 2048, skew: float = 2.6, redundant: int = 32,
                 runtime: str = "default", pp: int = 1, speculative: str | None = None,
                 accepted_length: float | None = None, price_tier: str = pricing.DEFAULT_PRICE_TIER) -> MoEExplorer:
    """Sliders for skew, batch, redundant experts and pipeline stages (each stage the TP x EP split of ``gpus``
    GPUs); dropdowns for the split, the runtime preset (``data/runtime.yaml``: how kernels are priced) and
    speculative decoding (``data/speculative.yaml``; ``accepted_length`` applies to ``speculative``'s preset), and
    the price tier (``data/prices.yaml``) the status line prices each placement at.

    Unknown names (or a model without MoE layers) raise :class:`~llmexplore.errors.SpecError`; values outside
    the sliders' usual range, and a split that is not among the model's options, are added to the controls
    (the status line then says why a split cannot be evaluated).
    """
    model = preset_name("models", "model", model)
    gpu = preset_name("hardware", "gpu", gpu)
    gpus = _check.integer("gpus", gpus, lo=1, hi=moe_model.MAX_GPUS)
    tp = _check.integer("tp", tp, lo=1, hi=moe_model.MAX_GPUS)
    ep = _check.integer("ep", ep, lo=1, hi=moe_model.MAX_GPUS)
    batch = _check.integer("batch", batch, lo=1)
    context = _check.integer("context", context, lo=1)
    skew = _check.number("skew", skew, lo=1.0)
    redundant = _check.integer("redundant", redundant, lo=0, hi=moe_model.MAX_REDUNDANT)
    runtime = preset_name("runtime", "runtime", runtime)
    price_tier = preset_name("prices", "price_tier", price_tier)
    pp = _check.integer("pp", pp, lo=1, hi=MAX_STAGES)
    if speculative is not None:
        speculative = preset_name("speculative", "speculative", speculative)
    splits = moe_sweeps.layout_options(gpus, model, gpu)  # SpecError for a model without MoE layers
    options = [(label, (t, e)) for label, t, e in splits]
    if (tp, ep) not in [o[1] for o in options]:
        options.append((split_label(tp, ep), (tp, ep)))
    controls = {
        "skew": choice_slider(SKEWS, round(skew, 3), "hot-expert skew",
                              label=lambda v: f"{fmt(v, trim=True)}×"),
        "batch": choice_slider(log_options(16, 8192), batch, "batch", "sequences"),
        "redundant": choice_slider([0, 16, 32, 64], redundant, "redundant experts", label=lambda v: f"{v:,}"),
        "layout": dropdown(options, (tp, ep), "TP x EP"),
        "runtime": dropdown(presets.names("runtime"), runtime, "runtime"),
        "pp": choice_slider([1, 2, 4, 8], pp, "pipeline", label=lambda v: "no pipeline" if v == 1 else f"{v} stages"),
        "speculative": dropdown([NO_SPEC, *presets.names("speculative")], speculative or NO_SPEC, "speculative"),
        "prices": dropdown(presets.names("prices"), price_tier, "prices"),
    }
    rows = [["skew", "batch"], ["redundant", "layout", "runtime"], ["pp", "speculative", "prices"]]
    m = presets.model(model)
    fixed = {"model": m.name, "gpu": gpu, "gpus": gpus, "context": context, "splits": splits,
             "max_skew": m.routed_experts / m.experts_per_token,  # the largest skew top-k routing allows
             "speculative": speculative, "accepted_length": accepted_length}
    return MoEExplorer.build(controls, rows, fixed=fixed)

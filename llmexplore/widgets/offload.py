"""Live explorer of KV offload: recompute vs load per tier with the break-evens, who wins over prefix x bandwidth,
the break-even over bandwidth x latency and preloading against the queue wait.

The figures are the notebook's (:func:`llmexplore.plots.offload.cost_curves_figure`,
:func:`~llmexplore.plots.offload.regime_figure`, :func:`~llmexplore.plots.offload.break_even_map_figure`,
:func:`~llmexplore.plots.offload.preload_figure`) for the chosen model, GPU, TP, KV dtype and storage tier, whose
read bandwidth and latency the sliders override (:func:`llmexplore.sweeps.offload.custom_tier`); choosing another
tier sets those two sliders to its preset values. The status line is the notebook's finding for the chosen prefix
and the share of a prompt a hit ratio caches. A deployment the models reject (a TP that does not divide the
heads, a model that does not fit, an MTP draft on a model without an MTP module, a pipeline with a draft) is
reported in the status line. The pipeline slider and the speculative dropdown set the setup's ``pp`` and
``speculative`` (:func:`llmexplore.sweeps.offload.setup`): the figures and the status line are then the
pipeline's or the draft's, as in the notebook.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

import numpy as np

from ..deployment import MAX_STAGES
from .. import _check, presets
from ..findings import offload as offload_findings
from ..findings import num
from ..deployment import MAX_RANKS
from ..models.offload.cost import MAX_PREFIX
from ..plots import offload as offload_plots
from ..sweeps import log_grid
from ..sweeps import offload as offload_sweeps
from ..units import DTYPE_BYTES
from . import Draw, Explorer, choice_slider, dropdown, dtype_name, log_options, nice_options, preset_name

__all__ = ["OffloadExplorer", "offload_explorer", "PREFIXES", "HIT_RATIOS", "WAITS_MS", "BANDWIDTHS", "LATENCIES",
           "TPS", "PPS", "NO_SPEC"]

#: choices of the sliders (other values are added when asked for)
PREFIXES = log_options(256, 1 << 20)
HIT_RATIOS = [round(0.05 * i, 2) for i in range(21)]
WAITS_MS = [0.0] + nice_options(1, 10_000)
BANDWIDTHS = nice_options(0.5, 100)
LATENCIES = nice_options(1, 100_000)
TPS = [1, 2, 4, 8, 16]
PPS = [1, 2, 4, 8]
#: the speculative dropdown's entry for no speculative decoding
NO_SPEC = "none (no draft)"
#: the grids the figures are drawn on (coarse enough for a redraw well under 0.1 s)
CURVE_PREFIXES = log_grid(256, 1 << 20, 90, integer=True)
MAP_PREFIXES = log_grid(256, 1 << 20, 160, integer=True)
MAP_BANDWIDTHS = np.geomspace(0.25, 200, 160)
MAP_LATENCIES = np.geomspace(1, 1e5, 120)
WAIT_GRID = np.linspace(0, 1000, 41)


@dataclass
class OffloadExplorer(Explorer):
    """KV offload explorer (see :func:`offload_explorer`)."""

    FIGURES = ("costs", "regime", "map", "preload")
    _syncing: bool = False

    def setup(self) -> offload_sweeps.OffloadSetup:
        p, f = self.params(), self.fixed
        base = presets.storage(p["storage"])
        bw = None if float(p["read_GBps"]) == base.read_GBps else float(p["read_GBps"])
        lat = None if float(p["latency_us"]) == base.latency_us else float(p["latency_us"])
        return offload_sweeps.setup(p["model"], p["gpu"], storage=p["storage"], tp=int(p["tp"]),
                                    kv_dtype=p["kv_dtype"], block_tokens=f["block_tokens"], read_GBps=bw,
                                    latency_us=lat, runtime=p["runtime"], pp=int(p["pp"]),
                                    speculative=None if p["speculative"] == NO_SPEC else p["speculative"])

    def _tables(self, s: offload_sweeps.OffloadSetup) -> dict:
        """The tables that do not depend on the prefix, the wait or the hit ratio (remembered per deployment and
        tier, so moving those sliders only recomputes the point and the preload curve)."""
        key = (s.dep.model.name, s.dep.hardware.name, s.dep.ranks, s.dep.kv_dtype, s.dep.runtime.name,
               s.tier.name, s.tier.read_GBps, s.tier.latency_us, s.pp,
               s.speculative.name if s.speculative else None)
        hit = self.fixed.setdefault("_cache", {}).get(key)
        if hit is None:
            tiers = [s.tier if n == self.params()["storage"] else presets.storage(n) for n in presets.names("storage")]
            hit = {"curves": offload_sweeps.cost_curves(s, CURVE_PREFIXES, tiers),
                   "table": offload_sweeps.break_even_shift(s, offload_sweeps.break_even_table(s, tiers), tiers),
                   "grid": offload_sweeps.regime_grid(s, MAP_PREFIXES, MAP_BANDWIDTHS),
                   "map": offload_sweeps.break_even_map(s, MAP_BANDWIDTHS, MAP_LATENCIES)}
            cache = self.fixed["_cache"]
            cache[key] = hit
            while len(cache) > 16:
                cache.pop(next(iter(cache)))
        return hit

    def evaluate(self):
        p, f = self.params(), self.fixed
        s = self.setup()
        t = self._tables(s)
        P, W = int(p["prefix"]), float(p["queue_wait_ms"])
        point = offload_sweeps.point_summary(s, P, queue_wait_ms=W)
        curve = offload_sweeps.preload_curve(s, P, np.unique(np.r_[WAIT_GRID, W]))
        h = float(p["hit_ratio"])
        saved = offload_sweeps.saved_by_tier(s, [h], prompt_tokens=f["prompt_tokens"], tiers=[s.tier]).iloc[0]
        head = offload_findings.deployment_phrase(s)
        draws = {
            "costs": Draw(offload_plots.cost_curves_figure, t["curves"], {
                "table": t["table"], "prefix_marker": P, "chosen": s.tier.name,
                "title": offload_findings.break_even_sentence(t["table"], s, short=True)}),
            "regime": Draw(offload_plots.regime_figure, t["grid"], {
                "table": t["table"], "prefix_marker": P,
                "title": f"{s.tier.label}: " + offload_findings.regime_sentence(t["grid"], s, prefix_tokens=P,
                                                                                 short=True)}),
            "map": Draw(offload_plots.break_even_map_figure, t["map"], {
                "table": t["table"], "chosen": s.tier.name,
                "title": f"{head}, {s.tier.kind} tier: " + offload_findings.map_sentence(t["map"], s, short=True)}),
            "preload": Draw(offload_plots.preload_figure, curve, {
                "waits": {"chosen queue wait": W}, "prefix_tokens": P,
                "title": f"{s.tier.label}: " + offload_findings.preload_sentence(
                    curve, {"mean_wait_ms": W, "p90_wait_ms": np.nan, "instance_rate_per_s": np.nan}, point, s,
                    short=True)}),
        }
        be = offload_findings.tokens(point["break_even_tokens"], one_block=s.block_tokens)
        status = (f"<b>{html.escape(head)}, {html.escape(s.tier.label)}</b>: a {P:,}-token prefix "
                  f"({point['blocks']:,} blocks, {num(point['bytes_MB'])} MB) recomputes in {num(point['recompute_ms'])} ms "
                  f"and loads in {num(point['load_ms'])} ms → <b>{point['decision']}</b> (break-even {be}, set by the "
                  f"{point['set_by']}); after a {num(W)} ms queue wait {num(point['exposed_load_ms'])} ms of the load "
                  f"stays exposed → {point['decision_with_preload']}. A hit ratio of {100 * h:.3g}% of a "
                  f"{f['prompt_tokens']:,}-token prompt caches {saved['cached_tokens']:,.0f} tokens: "
                  + (f"loaded, {offload_findings.saved_phrase(saved['saved_gpu_ms'], short=True)}." if saved["loaded"] else
                     "recomputed (below the break-even), nothing saved."))
        shift = offload_findings.shift_clause(t["table"], s)
        if shift:
            status += " " + html.escape(shift) + "."
        return draws, status, {"point": point, **t, "preload": curve, "saved": saved.to_dict()}

    def update(self, change=None) -> None:
        """Redraw; a change of the storage tier first sets the bandwidth and latency sliders to its preset values
        (one redraw for the three changes)."""
        if self._syncing:
            return
        if change is not None and change.get("owner") is self.controls["storage"]:
            tier = presets.storage(change["new"])
            self._syncing = True
            try:
                for name, value in (("read_GBps", tier.read_GBps), ("latency_us", tier.latency_us)):
                    w = self.controls[name]
                    if value not in [v for _, v in w.options]:
                        unit = "GB/s" if name == "read_GBps" else "µs"
                        w.options = [(offload_plots.fmt(v, unit, trim=True), v)
                                     for v in sorted({v for _, v in w.options} | {value})]
                    w.value = value
            finally:
                self._syncing = False
        super().update()


def _percent(v: float) -> str:
    return f"{100 * v:.3g}%"


def offload_explorer(model: str = "llama-3-70b", gpu: str = "h100-sxm", *, storage: str = "nvme-gen4", tp: int = 8,
                     kv_dtype: str = "bf16", prefix: int = 32768, hit_ratio: float = 0.563,
                     queue_wait_ms: float = 20.0, read_GBps: float | None = None, latency_us: float | None = None,
                     block_tokens: int = 256, prompt_tokens: int = 32768, runtime: str = "default", pp: int = 1,
                     speculative: str | None = None) -> OffloadExplorer:
    """Sliders for the prefix length, hit ratio, queue wait, TP, pipeline stages and the tier's read bandwidth and
    latency (defaults: the tier's presets); dropdowns for the model, GPU, storage tier, KV dtype, the runtime preset
    (``data/runtime.yaml``: how the recompute is priced) and speculative decoding (``data/speculative.yaml``: a
    draft model's KV layer is loaded and recomputed with the target's); four live figures.
    ``block_tokens`` and ``prompt_tokens`` (the prompt a hit ratio is a share of) are fixed.

    Unknown names raise :class:`~llmexplore.errors.SpecError`; values outside the sliders' usual range are
    added to them, and a deployment the models reject is reported in the status line.
    """
    model = preset_name("models", "model", model)
    gpu = preset_name("hardware", "gpu", gpu)
    storage = preset_name("storage", "storage", storage)
    kv_dtype = dtype_name("kv_dtype", kv_dtype)
    runtime = preset_name("runtime", "runtime", runtime)
    tier = presets.storage(storage)
    tp = _check.integer("tp", tp, lo=1, hi=MAX_RANKS)
    prefix = _check.integer("prefix", prefix, lo=0, hi=MAX_PREFIX, unit="tokens")
    hit_ratio = _check.probability("hit_ratio", hit_ratio)
    queue_wait_ms = _check.number("queue_wait_ms", queue_wait_ms, lo=0, hi=1e9, unit="ms")
    read_GBps = tier.read_GBps if read_GBps is None else _check.number("read_GBps", read_GBps, lo=0, lo_open=True,
                                                                        hi=1e5, unit="GB/s")
    latency_us = tier.latency_us if latency_us is None else _check.number("latency_us", latency_us, lo=0, hi=1e7,
                                                                           unit="µs")
    block_tokens = _check.integer("block_tokens", block_tokens, lo=1, hi=1 << 16, unit="tokens")
    prompt_tokens = _check.integer("prompt_tokens", prompt_tokens, lo=1, hi=MAX_PREFIX, unit="tokens")
    pp = _check.integer("pp", pp, lo=1, hi=MAX_STAGES)
    if speculative is not None:
        speculative = preset_name("speculative", "speculative", speculative)
    controls = {
        "prefix": choice_slider(PREFIXES, prefix, "cached prefix", "tokens"),
        "hit_ratio": choice_slider(HIT_RATIOS, hit_ratio, "hit ratio", label=_percent),
        "queue_wait_ms": choice_slider(WAITS_MS, queue_wait_ms, "queue wait", "ms"),
        "read_GBps": choice_slider(BANDWIDTHS + [presets.storage(n).read_GBps for n in presets.names("storage")],
                                   read_GBps, "tier read bandwidth", "GB/s"),
        "latency_us": choice_slider(LATENCIES + [presets.storage(n).latency_us for n in presets.names("storage")],
                                    latency_us, "tier latency", "µs"),
        "tp": choice_slider(TPS, tp, "TP", label=lambda v: f"{v:,} GPU" + ("" if v == 1 else "s")),
        "model": dropdown(presets.names("models"), model, "model"),
        "gpu": dropdown(presets.names("hardware"), gpu, "GPU"),
        "storage": dropdown(presets.names("storage"), storage, "storage tier"),
        "kv_dtype": dropdown(list(DTYPE_BYTES), kv_dtype, "KV cache"),
        "runtime": dropdown(presets.names("runtime"), runtime, "runtime"),
        "pp": choice_slider(PPS, pp, "pipeline", label=lambda v: "no pipeline" if v == 1 else f"{v} stages"),
        "speculative": dropdown([NO_SPEC, *presets.names("speculative")], speculative or NO_SPEC, "speculative"),
    }
    rows = [["prefix", "hit_ratio", "queue_wait_ms"], ["storage", "read_GBps", "latency_us"],
            ["model", "gpu", "tp", "kv_dtype", "runtime"], ["pp", "speculative"]]
    return OffloadExplorer.build(controls, rows, fixed={"block_tokens": block_tokens, "prompt_tokens": prompt_tokens})

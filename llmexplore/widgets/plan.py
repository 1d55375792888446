"""Live explorer of the deployment planner: the Pareto frontiers and the best configuration for a workload,
latency targets and a GPU budget, with the serving simulator one button away.

Every slider move re-plans (:func:`llmexplore.sweeps.plan.plan`, about a second: the instance tables are
cached, so moving the rate or a target reuses them) and redraws the frontier figure the notebook draws
(:func:`llmexplore.plots.plan.frontier_figure`); the status line is the notebook's best-configuration and
ratio sentences. The simulator is too slow for every slider move: the "Simulate" button runs it
(:func:`llmexplore.sweeps.plan.simulate_best`) on the current best configuration and redraws the latency
distributions; after the next slider move they are greyed out until it is pressed again.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

import ipywidgets as W
import plotly.graph_objects as go

from .. import _check, presets
from ..errors import LlmexploreError
from ..findings import plan as plan_findings
from ..plots import fmt, update_from
from ..plots import plan as plan_plots
from ..deployment import MAX_GPUS
from ..sweeps import plan as plan_sweeps
from . import (
    Draw,
    Explorer,
    choice_slider,
    dropdown,
    dtype_name,
    log_options,
    mark_stale,
    nice_options,
    preset_name,
)

__all__ = ["PlanExplorer", "plan_explorer", "RATES", "GPU_BUDGETS", "HIGHEST", "SIM_STALE"]

#: choices of the sliders (other values are added when asked for); a rate of 0 stands for "the highest rate
#: the budget sustains"
HIGHEST = 0.0
RATES = [HIGHEST] + nice_options(0.1, 1000)
GPU_BUDGETS = [1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 1024]
#: why the latency distributions are greyed out after a slider move
SIM_STALE = "press Simulate to re-run the simulator for the current best configuration"
SIM_FIRST = "Press Simulate to run the serving simulator on the best configuration"


def _rate_label(v: float) -> str:
    return "highest the budget sustains" if v == HIGHEST else fmt(v, "req/s", trim=True)


@dataclass
class PlanExplorer(Explorer):
    """Deployment-planner explorer (see :func:`plan_explorer`)."""

    FIGURES = ("frontier",)
    MEMO_SIZE = 16
    button: W.Button | None = None
    sim_status: W.HTML | None = None
    simulated: dict | None = None
    cdf_stale: bool = False  # the latency panel shows an earlier simulation, greyed out
    launch: W.HTML | None = None

    def launch_html(self) -> str:
        """The launch commands of the configuration the explorer shows, in a collapsed block ('' when none)."""
        res = self.last.get("res") if "error" not in self.last else None
        if res is None or res["best"] is None:
            return ""
        block = plan_plots.launch_block(plan_findings.launch_texts(res))._repr_html_()
        return (f"<details><summary><b>Launch commands</b> for {html.escape(str(res['best']['label']))}</summary>"
                f"{block}</details>")

    def question(self) -> plan_sweeps.Question:
        p, f = self.params(), self.fixed
        return plan_sweeps.Question(model=p["model"], gpu=p["gpu"], gpus=int(p["gpus"]), isl=int(p["isl"]),
                                    osl=int(p["osl"]), ttft_ms=float(p["ttft_ms"]), tpot_ms=float(p["tpot_ms"]),
                                    stat=f["stat"], rate_per_s=None if p["rate"] == HIGHEST else float(p["rate"]),
                                    runtime=p["runtime"], weight_dtypes=f["weight_dtypes"],
                                    kv_dtypes=f["kv_dtypes"], link=f["link"], pipeline_sizes=p["pipeline"],
                                    speculative=f["speculative"],
                                    speculative_accepted_length=f["speculative_accepted_length"],
                                    other_gpus=tuple(g for g in (p["other_gpu"],) if g and g != p["gpu"]),
                                    objective=p["objective"],
                                    # the default tier leaves a GPU it does not price unpriced (said so); a
                                    # tier chosen must price every GPU searched (the status line says which not)
                                    price_tier=None if p["price_tier"] == plan_sweeps.question.DEFAULT_PRICE_TIER
                                    else p["price_tier"])

    def evaluate(self):
        q = self.question()
        res = plan_sweeps.plan(q)
        draws = {"frontier": Draw(plan_plots.frontier_figure, res["frontiers"], {
            "configs": res["table"], "best": res["best"], "tpot_ms": q.tpot_ms, "stat": q.stat,
            "title": plan_findings.frontier_title(res)})}
        status = f"<b>{html.escape(plan_findings.best_sentence(res))}</b>"
        if res["best"] is not None:
            status += " " + html.escape(plan_findings.cost_sentence(res))
            status += " " + html.escape(plan_findings.ratio_sentence(res))
        return draws, status, {"res": res, "best": res["best"], "ratio": res["disagg_over_agg_ratio"]}

    def update(self, *_) -> None:
        """Re-plan and redraw the frontier; the latency distributions go stale until Simulate is pressed."""
        super().update()
        if self.launch is not None:
            self.launch.value = self.launch_html()
        cdf = self.figures.get("cdf")
        if cdf is not None and self.simulated is not None:
            mark_stale(cdf, SIM_STALE)
            self.simulated = None
            self.cdf_stale = True
        if cdf is not None and self.simulated is None and not self.cdf_stale and "error" not in self.last:
            # nothing simulated yet: the empty panel's target lines follow the sliders (a stale panel keeps the
            # targets of the simulation it still shows, greyed out under its "not updated" title)
            p = self.params()
            update_from(cdf, plan_plots.latency_cdf_figure.spec(
                {"status": "not simulated yet", "row": None, "cdf": None, "requests": self.fixed["sim_requests"]},
                ttft_ms=float(p["ttft_ms"]), tpot_ms=float(p["tpot_ms"]), stat=self.fixed["stat"], title=SIM_FIRST))
        if self.sim_status is not None and "error" not in self.last:
            self.sim_status.value = f"<i>{html.escape(SIM_FIRST)} ({self.fixed['sim_requests']:,} requests).</i>"

    def simulate(self, *_) -> dict | None:
        """Run the serving simulator on the current best configuration at its planned rate and redraw the
        latency distributions (the button's action); returns the simulation (None when nothing was planned)."""
        res = self.last.get("res")
        if res is None:
            self.sim_status.value = ('<span style="color:#b00">Nothing to simulate: the current parameters '
                                     "cannot be evaluated.</span>")
            return None
        q = res["question"]
        try:
            sim = plan_sweeps.simulate_best(res, n_requests=self.fixed["sim_requests"])
        except LlmexploreError as exc:
            self.sim_status.value = f'<span style="color:#b00"><b>Cannot simulate:</b> {html.escape(str(exc))}</span>'
            return None
        update_from(self.figures["cdf"], plan_plots.latency_cdf_figure.spec(
            sim, ttft_ms=q.ttft_ms, tpot_ms=q.tpot_ms, stat=q.stat,
            title=plan_findings.simulated_sentence(sim, q, short=True)))
        self.sim_status.value = html.escape(plan_findings.simulated_sentence(sim, q))
        self.simulated = sim
        self.cdf_stale = False
        return sim


#: how the objective dropdown names each objective
OBJECTIVE_LABELS = {"tokens_per_s_per_gpu": "tokens/s per GPU", "usd_per_mtok": "$ per million tokens",
                    "j_per_token": "J per output token"}
#: the pipeline sizes the explorer's dropdown offers (each a set of sizes searched)
PIPELINE_OPTIONS = [(1,), (1, 2), (1, 2, 4), (1, 2, 4, 8)]
PIPELINE_SIZES = (1, 2, 4)


def _pipes_label(sizes: tuple) -> str:
    return "no pipelines" if sizes == (1,) else "up to " + str(max(sizes)) + " stages"


def plan_explorer(model: str = "qwen3-32b", gpu: str = "h200", *, gpus: int = 32, isl: int = 4000, osl: int = 500,
                  ttft_ms: float = 300.0, tpot_ms: float = 10.0, stat: str = "p90", rate: float | None = None,
                  weight_dtypes=None, kv_dtypes=None, link: str | None = None, runtime: str = "default",
                  sim_requests: int = plan_sweeps.SIM_REQUESTS, pipeline_sizes=PIPELINE_SIZES,
                  speculative: str | None = None, speculative_accepted_length: float | None = None,
                  objective: str = "tokens_per_s_per_gpu", price_tier: str | None = None,
                  other_gpus=()) -> PlanExplorer:
    """Sliders for the request rate (or the highest the budget sustains), prompt and output lengths, the TTFT
    and TPOT targets (at ``stat``) and the GPU budget; dropdowns for the model, the GPU and the runtime preset
    (``data/runtime.yaml``: how kernels are priced); a Simulate button that runs the serving simulator with
    ``sim_requests`` requests on the best configuration; a dropdown for the pipeline sizes searched (starting at
    ``pipeline_sizes``). ``weight_dtypes``, ``kv_dtypes``, ``link``, ``speculative`` and
    ``speculative_accepted_length`` limit or widen the search as in :class:`llmexplore.sweeps.plan.Question` and stay
    fixed. Dropdowns for what "best" means (``objective``: tokens/s per GPU, $ per million tokens or J per output
    token), the price tier (``price_tier``, default the planner's) and a second GPU type to mix with ``gpu``
    (the first of ``other_gpus``; "none": one type); the status line says what the best configuration costs.

    Unknown names raise :class:`~llmexplore.errors.SpecError`; values outside the sliders' usual range are
    added to them; a question the planner rejects (a dtype the GPU lacks) is reported in the status line.
    """
    from ..models.queueing.at_stat import check_stat

    model = preset_name("models", "model", model)
    gpu = preset_name("hardware", "gpu", gpu)
    runtime = preset_name("runtime", "runtime", runtime)
    link = None if link is None else preset_name("links", "link", link)
    gpus = _check.integer("gpus", gpus, lo=1, hi=MAX_GPUS)
    isl = _check.integer("isl", isl, lo=1, unit="tokens")
    osl = _check.integer("osl", osl, lo=1, unit="tokens")
    ttft_ms = _check.number("ttft_ms", ttft_ms, lo=0.0, lo_open=True, unit="ms")
    tpot_ms = _check.number("tpot_ms", tpot_ms, lo=0.0, lo_open=True, unit="ms")
    rate = HIGHEST if rate is None else _check.number("rate", rate, lo=0.0, lo_open=True, unit="req/s")
    stat = check_stat(stat)
    dtypes = {}
    for name, value in (("weight_dtypes", weight_dtypes), ("kv_dtypes", kv_dtypes)):
        if value is not None:
            value = (value,) if isinstance(value, str) else tuple(value)
            value = tuple(dtype_name(name[:-1], v) for v in value)
        dtypes[name] = value
    sim_requests = _check.integer("sim_requests", sim_requests, lo=1, hi=1_000_000)
    pipes = tuple(plan_sweeps.Question(model=model, gpu=gpu, pipeline_sizes=pipeline_sizes).pipeline_sizes)
    if speculative is not None:
        plan_sweeps.Question(model=model, gpu=gpu, speculative=speculative,
                             speculative_accepted_length=speculative_accepted_length)
    objective = _check.choice("objective", objective, plan_sweeps.question.OBJECTIVES)
    tier = preset_name("prices", "price_tier", price_tier or plan_sweeps.question.DEFAULT_PRICE_TIER)
    others = (other_gpus,) if isinstance(other_gpus, str) else tuple(other_gpus)
    other = preset_name("hardware", "other_gpus", others[0]) if others else ""
    options = [(_pipes_label(o), o) for o in PIPELINE_OPTIONS]
    if pipes not in PIPELINE_OPTIONS:
        options.append((_pipes_label(pipes), pipes))
    controls = {
        "rate": choice_slider(RATES, rate, "request rate", label=_rate_label),
        "isl": choice_slider(log_options(256, 131072), isl, "prompt (ISL)", "tokens"),
        "osl": choice_slider(log_options(16, 16384), osl, "output (OSL)", "tokens"),
        "ttft_ms": choice_slider(nice_options(20, 30000), ttft_ms, f"TTFT target ({stat})", "ms"),
        "tpot_ms": choice_slider(nice_options(1, 500), tpot_ms, f"TPOT target ({stat})", "ms"),
        "gpus": choice_slider(GPU_BUDGETS, gpus, "GPU budget", label=lambda v: f"{v:,} GPU" + ("" if v == 1 else "s")),
        "model": dropdown(presets.names("models"), model, "model"),
        "gpu": dropdown(presets.names("hardware"), gpu, "GPU"),
        "runtime": dropdown(presets.names("runtime"), runtime, "runtime"),
        "pipeline": dropdown(options, pipes, "pipelines"),
        "objective": dropdown([(OBJECTIVE_LABELS[o], o) for o in plan_sweeps.question.OBJECTIVES], objective, "best by"),
        "price_tier": dropdown(presets.names("prices"), tier, "prices"),
        "other_gpu": dropdown([("none", "")] + [(g, g) for g in presets.names("hardware")], other, "mix with"),
    }
    rows = [["rate", "isl", "osl"], ["ttft_ms", "tpot_ms", "gpus"], ["model", "gpu", "runtime", "pipeline"],
            ["objective", "price_tier", "other_gpu"]]
    fixed = {"stat": stat, "link": link, "sim_requests": sim_requests, "speculative": speculative,
             "speculative_accepted_length": speculative_accepted_length, **dtypes}
    app = PlanExplorer.build(controls, rows, fixed=fixed)
    empty = {"status": "not simulated yet", "row": None, "cdf": None, "requests": sim_requests}
    app.figures["cdf"] = go.FigureWidget(plan_plots.latency_cdf_figure(
        empty, ttft_ms=ttft_ms, tpot_ms=tpot_ms, stat=stat, title=SIM_FIRST))
    app.button = W.Button(description="Simulate", icon="play", button_style="primary",
                          tooltip="Run the serving simulator on the best configuration at its planned rate",
                          layout=W.Layout(width="160px"))
    app.sim_status = W.HTML(f"<i>{html.escape(SIM_FIRST)} ({sim_requests:,} requests).</i>",
                            layout=W.Layout(margin="4px 0 4px 12px"))
    app.button.on_click(app.simulate)
    app.launch = W.HTML(app.launch_html(), layout=W.Layout(margin="4px 0"))
    kids = list(app.view.children)
    app.view.children = (*kids[:-1], app.launch, W.HBox([app.button, app.sim_status]), app.figures["cdf"], kids[-1])
    return app

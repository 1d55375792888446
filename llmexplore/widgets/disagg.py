"""Live explorer of prefill/decode disaggregation: GPUs per serving mode and the exposed KV transfer."""

from __future__ import annotations

import html
from dataclasses import dataclass

import ipywidgets as W
import numpy as np
import plotly.graph_objects as go

from .. import presets
from ..errors import LlmexploreError
from ..models import disagg as dg
from ..plots import TEMPLATE
from ..plots import disagg as disagg_plots
from ..sweeps import disagg as disagg_sweeps
from . import Explorer, log_options

__all__ = ["PDExplorer", "pd_explorer"]


@dataclass
class PDExplorer(Explorer):
    """Prefill/decode explorer (see :func:`pd_explorer`)."""

    def update(self, *_) -> None:
        p = self.params()
        try:
            s = disagg_sweeps.setup(self.fixed["model"], self.fixed["gpu"], prefill_tp=self.fixed["prefill_tp"],
                                decode_tp=self.fixed["decode_tp"], prompt_tokens=int(p["prompt"]),
                                output_tokens=int(p["output"]), rate_per_s=float(p["rate"]),
                                ttft_slo_ms=float(p["ttft_slo"]), tpot_slo_ms=float(p["tpot_slo"]),
                                weight_dtype=self.fixed["weight_dtype"], kv_dtype=self.fixed["kv_dtype"],
                                nics=None if p["nics"] == "one per GPU" else 1)
            pre, dec = s.sides()
            link = presets.link(p["link"])
            rows = []
            for piped in (False, True):
                x = dg.transfer_side(pre, dec, link, s.workload, pipelined=piped, nics=s.nics)
                z = dg.size_pools(pre, dec, x, s.workload)
                rows.append(("disaggregated, " + ("pipelined" if piped else "serial"), z, x))
            co = dg.size_colocated(s.prefill, s.workload, chunk_tokens=(256, 512, 1024, 2048))
            ex = disagg_sweeps.exposed_vs_bandwidth(s, self.fixed["bandwidths"])
        except LlmexploreError as exc:
            self.fail(exc)
            return
        modes = ["colocated"] + [r[0] for r in rows]
        gpus = [co["gpus"]] + [r[1]["gpus"] for r in rows]
        fig = self.figures["gpus"]
        with fig.batch_update():
            fig.data[0].x = modes
            fig.data[0].y = [g if np.isfinite(g) else None for g in gpus]
            fig.data[0].text = [f"{g:.0f}" if np.isfinite(g) else "no pool meets the SLOs" for g in gpus]
            fig.layout.title.text = (f"GPUs for {p['rate']:g} req/s, {int(p['prompt']):,} + {int(p['output'])} tokens, "
                                     f"over {link.label}")
        efig = self.figures["exposed"]
        with efig.batch_update():
            for i, (mode, g) in enumerate(ex.groupby("mode", sort=False)):
                efig.data[i].x = g["bandwidth_GBps"].to_numpy()
                efig.data[i].y = g["exposed_ms"].to_numpy()
            efig.data[2].x = [float(ex["bandwidth_GBps"].min()), float(ex["bandwidth_GBps"].max())]
            efig.data[2].y = [pre.prefill_s * 1e3] * 2
            efig.data[3].x = [link.achievable_GBps] * 2
            efig.data[3].y = [float(ex["exposed_ms"].min()), float(ex["exposed_ms"].max())]
        self.last = {"colocated": co, "disaggregated": {r[0]: r[1] for r in rows}}
        prefer = {"colocated": 0, "disaggregated, pipelined": 1, "disaggregated, serial": 2}  # ties
        best = min(zip(gpus, modes), key=lambda t: (t[0], prefer[t[1]]))
        if not np.isfinite(best[0]):
            self.status.value = "<b>No pool of up to 64 instances meets both SLOs.</b> Relax the SLOs or the rate."
            return
        z = rows[1][1]
        split = (f"{z['n_p']} prefill + {z['n_d']} decode instances, TTFT p99 {z['ttft_s'] * 1e3:.0f} ms, "
                 f"TPOT p99 {z['tpot_s'] * 1e3:.1f} ms" if z["feasible"] else z["reason"])
        self.status.value = (f"<b>Fewest GPUs: {best[1]} ({best[0]:.0f})</b>. Disaggregated, pipelined: "
                             f"{html.escape(split)}. Prefill of one prompt {pre.prefill_s * 1e3:.0f} ms; "
                             f"KV {rows[1][2]['physical_B'] / 1e9:.2f} GB per request.")


def pd_explorer(model: str = "llama-3-70b", gpu: str = "h100-sxm", *, prefill_tp: int = 8, decode_tp: int = 8,
                link: str = "roce-400g", prompt: int = 4096, output: int = 256, rate: float = 36.0,
                ttft_slo_ms: float = 1000.0, tpot_slo_ms: float = 40.0, weight_dtype: str = "bf16",
                kv_dtype: str = "bf16") -> PDExplorer:
    """Sliders for prompt and output length, arrival rate and SLOs; dropdowns for the link and NICs."""
    style = {"description_width": "110px"}
    prompts = sorted(set(log_options(256, 65536)) | {int(prompt)})
    outputs = sorted(set(log_options(16, 8192)) | {int(output)})
    controls = {
        "prompt": W.SelectionSlider(options=prompts, value=int(prompt), description="prompt (tok)",
                                    continuous_update=False, style=style),
        "output": W.SelectionSlider(options=outputs, value=int(output), description="output (tok)",
                                    continuous_update=False, style=style),
        "rate": W.FloatLogSlider(value=rate, base=10, min=-1, max=3, step=0.05, description="rate (req/s)",
                                 continuous_update=False, style=style),
        "ttft_slo": W.FloatLogSlider(value=ttft_slo_ms, base=10, min=2, max=4.5, step=0.05,
                                     description="TTFT SLO (ms)", continuous_update=False, style=style),
        "tpot_slo": W.FloatLogSlider(value=tpot_slo_ms, base=10, min=0.7, max=3, step=0.05,
                                     description="TPOT SLO (ms)", continuous_update=False, style=style),
        "link": W.Dropdown(options=presets.names("links"), value=link, description="link", style=style),
        "nics": W.Dropdown(options=["one per GPU", "one per instance"], value="one per GPU",
                           description="NICs", style=style),
    }
    gfig = go.FigureWidget()
    gfig.add_bar(name="GPUs", marker_color=[disagg_plots.MODE_COLORS["colocated"],
                                            disagg_plots.MODE_COLORS["disaggregated, serial"],
                                            disagg_plots.MODE_COLORS["disaggregated, pipelined"]],
                 textposition="outside", showlegend=False)
    gfig.update_layout(template=TEMPLATE, height=380, margin=dict(l=70, r=30, t=60, b=50),
                       xaxis=dict(title="serving mode"), yaxis=dict(title="GPUs at the rate and SLOs",
                                                                    rangemode="tozero"))
    efig = go.FigureWidget()
    efig.add_scatter(name="serial", line=dict(color=disagg_plots.MODE_COLORS["serial"]))
    efig.add_scatter(name="layer-wise pipelined", line=dict(color=disagg_plots.MODE_COLORS["layer-wise pipelined"]))
    efig.add_scatter(name="prefill of one prompt", line=dict(color="#555", dash="dot"))
    efig.add_scatter(name="chosen link", line=dict(color="#c00", dash="dash"))
    efig.update_layout(template=TEMPLATE, height=380, margin=dict(l=70, r=30, t=60, b=50),
                       title="Exposed KV transfer vs link bandwidth",
                       xaxis=dict(type="log", title="achievable bandwidth per NIC (GB/s)"),
                       yaxis=dict(type="log", title="exposed transfer (ms)"))
    status = W.HTML()
    box = W.VBox([W.HBox([W.VBox([controls["prompt"], controls["output"], controls["rate"]]),
                          W.VBox([controls["ttft_slo"], controls["tpot_slo"]]),
                          W.VBox([controls["link"], controls["nics"]])]), status, gfig, efig])
    box.add_class("llmexplore-explorer")
    fixed = {"model": model, "gpu": gpu, "prefill_tp": prefill_tp, "decode_tp": decode_tp,
             "weight_dtype": weight_dtype, "kv_dtype": kv_dtype, "bandwidths": np.geomspace(0.5, 900, 40)}
    return PDExplorer(controls=controls, figures={"gpus": gfig, "exposed": efig}, status=status, view=box,
                      fixed=fixed).connect()

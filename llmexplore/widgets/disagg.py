"""Live explorer of prefill/decode disaggregation: GPUs per serving mode and the exposed KV transfer.

The pools are the notebook's and the command line's: :func:`llmexplore.sweeps.disagg.mode_rows` sizes
every mode and :func:`~llmexplore.sweeps.disagg.fewest_gpus` picks the winner (ties to the simpler mode);
the exposed transfer is :func:`~llmexplore.sweeps.disagg.exposed_vs_bandwidth`.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

import numpy as np

from .. import _check, presets
from ..plots import disagg as disagg_plots
from ..plots import fmt
from ..sweeps import disagg as disagg_sweeps
from . import (Draw, Explorer, choice_slider, dropdown, log_options, model_dtypes_runtime, nice_options,
               preset_name)

__all__ = ["PDExplorer", "pd_explorer", "NICS"]

#: choices of the NICs control: one NIC per GPU, or one per instance (shared by its GPUs)
NICS = ("one per GPU", "one per instance")
#: bandwidth axis of the exposed-transfer figure [GB/s per GPU]
BANDWIDTHS = np.geomspace(0.5, 900, 40)


@dataclass
class PDExplorer(Explorer):
    """Prefill/decode explorer (see :func:`pd_explorer`)."""

    FIGURES = ("gpus", "exposed")

    def setup(self) -> disagg_sweeps.PDSetup:
        p, f = self.params(), self.fixed
        return disagg_sweeps.setup(f["model"], f["gpu"], prefill_tp=f["prefill_tp"], decode_tp=f["decode_tp"],
                                   prompt_tokens=int(p["prompt"]), output_tokens=int(p["output"]),
                                   rate_per_s=float(p["rate"]), ttft_slo_ms=float(p["ttft_slo"]),
                                   tpot_slo_ms=float(p["tpot_slo"]), weight_dtype=f["weight_dtype"],
                                   kv_dtype=f["kv_dtype"], nics=None if p["nics"] == NICS[0] else 1,
                                   runtime=p["runtime"], speculative=f["speculative"],
                                   accepted_length=f["accepted_length"], prefill_pp=f["prefill_pp"],
                                   decode_pp=f["decode_pp"])

    def evaluate(self):
        p = self.params()
        s = self.setup()
        link = presets.resolve("links", p["link"])
        rows = disagg_sweeps.mode_rows(s, link)
        best = disagg_sweeps.fewest_gpus(rows)
        exposed = disagg_sweeps.exposed_vs_bandwidth(s, BANDWIDTHS)
        prompt, output, rate = int(p["prompt"]), int(p["output"]), float(p["rate"])
        workload = f"{fmt(rate, 'req/s', trim=True)} of {prompt:,} + {output:,} tokens"
        draws = {
            "gpus": Draw(disagg_plots.mode_gpus_figure, rows, {
                "best": best["mode"] if best else None, "title": f"GPUs for {workload} — over {link.label}"}),
            "exposed": Draw(disagg_plots.exposed_transfer_figure, exposed, {
                "link_GBps": link.achievable_GBps, "link_name": link.label,
                "title": f"Exposed KV transfer of one {prompt:,}-token prompt vs link bandwidth"}),
        }
        prefill_ms = float(exposed["prefill_ms"].iloc[0])
        last = {"rows": rows, "best": best, "exposed": exposed,
                "colocated": rows[0], "disaggregated": {r["mode"]: r for r in rows[1:]}}
        return draws, _status(rows, best, s.workload.percentile, rate, prefill_ms), last


def _status(rows: list[dict], best: dict | None, percentile: float, rate: float, prefill_ms: float) -> str:
    pct = f"p{100 * percentile:g}"
    by = {r["mode"]: r for r in rows}
    if best is None:
        why = "; ".join(f"{r['mode']}: {r['reason']}" for r in rows)
        return (f"<b>No pool of up to 64 instances meets both SLOs at {fmt(rate, 'req/s')}.</b> "
                f"{html.escape(why)}. Relax the SLOs or lower the rate.")

    def latency(r):
        return f"TTFT {pct} {fmt(r['ttft_ms'], 'ms')}, TPOT {pct} {fmt(r['tpot_ms'], 'ms')}"

    d, c = by["disaggregated, pipelined"], by["colocated"]
    pipelined = (f"{fmt(d['n_prefill'])} prefill + {fmt(d['n_decode'])} decode instances, {latency(d)}"
                 if np.isfinite(d["gpus"]) else d["reason"])
    colocated = (f"{fmt(c['n_decode'])} instances ({c['reason']}), {latency(c)}" if np.isfinite(c["gpus"])
                 else c["reason"])
    return (f"<b>Fewest GPUs: {html.escape(best['mode'])} ({fmt(best['gpus'])})</b>, "
            f"{fmt(best['goodput_per_gpu'], 'req/s')} per GPU. "
            f"Disaggregated, pipelined: {html.escape(pipelined)}. "
            f"Colocated: {html.escape(colocated)}. Prefill of one prompt {fmt(prefill_ms, 'ms')}; "
            f"KV {fmt(d['kv_GB'], 'GB')} per request.")


def pd_explorer(model: str = "llama-3-70b", gpu: str = "h100-sxm", *, prefill_tp: int = 8, decode_tp: int = 8,
                link: str = "roce-400g", prompt: int = 4096, output: int = 256, rate: float = 36.0,
                ttft_slo_ms: float = 1000.0, tpot_slo_ms: float = 40.0, weight_dtype: str | None = None,
                kv_dtype: str = "bf16", runtime: str = "default", speculative: str | None = None,
                accepted_length: float | None = None, prefill_pp: int = 1, decode_pp: int = 1) -> PDExplorer:
    """Sliders for prompt and output length, arrival rate and SLOs; dropdowns for the link, NICs and the
    runtime preset (``data/runtime.yaml``: how kernels are priced). ``speculative`` and ``accepted_length``
    decode every decoding instance speculatively, ``prefill_pp`` / ``decode_pp`` make each prefill / decode
    instance a pipeline of that many stages (as :func:`llmexplore.sweeps.disagg.setup` takes them); they stay
    fixed.

    ``weight_dtype`` defaults to the dtype the model's weights are released in. Unknown names raise
    :class:`~llmexplore.errors.SpecError`; values outside the sliders' usual range are added to them.
    """
    model = preset_name("models", "model", model)
    gpu = preset_name("hardware", "gpu", gpu)
    link = preset_name("links", "link", link)
    prefill_tp = _check.integer("prefill_tp", prefill_tp, lo=1)
    decode_tp = _check.integer("decode_tp", decode_tp, lo=1)
    prompt = _check.integer("prompt", prompt, lo=1)
    output = _check.integer("output", output, lo=1)
    rate = _check.number("rate", rate, lo=0.0, lo_open=True, unit="req/s")
    ttft_slo_ms = _check.number("ttft_slo_ms", ttft_slo_ms, lo=0.0, lo_open=True, unit="ms")
    tpot_slo_ms = _check.number("tpot_slo_ms", tpot_slo_ms, lo=0.0, lo_open=True, unit="ms")
    weight_dtype, kv_dtype, runtime = model_dtypes_runtime(model, weight_dtype, kv_dtype, runtime)
    disagg_sweeps.setup(model, gpu, prefill_tp=prefill_tp, decode_tp=decode_tp, speculative=speculative,
                        accepted_length=accepted_length, prefill_pp=prefill_pp,
                        decode_pp=decode_pp)  # the draft fits the model, the acceptance its rule, the stages theirs
    controls = {
        "prompt": choice_slider(log_options(256, 65536), prompt, "prompt", "tokens"),
        "output": choice_slider(log_options(16, 8192), output, "output", "tokens"),
        "rate": choice_slider(nice_options(0.1, 1000), rate, "arrival rate", "req/s"),
        "ttft_slo": choice_slider(nice_options(100, 30000), ttft_slo_ms, "TTFT SLO (p99)", "ms"),
        "tpot_slo": choice_slider(nice_options(5, 1000), tpot_slo_ms, "TPOT SLO (p99)", "ms"),
        "link": dropdown(presets.names("links"), link, "link"),
        "nics": dropdown(NICS, NICS[0], "NICs"),
        "runtime": dropdown(presets.names("runtime"), runtime, "runtime"),
    }
    rows = [["prompt", "output", "rate"], ["ttft_slo", "tpot_slo"], ["link", "nics", "runtime"]]
    fixed = {"model": model, "gpu": gpu, "prefill_tp": prefill_tp, "decode_tp": decode_tp,
             "weight_dtype": weight_dtype, "kv_dtype": kv_dtype, "speculative": speculative,
             "accepted_length": accepted_length, "prefill_pp": prefill_pp, "decode_pp": decode_pp}
    return PDExplorer.build(controls, rows, fixed=fixed)

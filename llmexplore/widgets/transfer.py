"""Live explorer of KV transfer planning: the byte matrix, fan-out per prefill rank and the layout pairs.

The figures are the notebook's (:func:`llmexplore.plots.transfer.byte_matrix_figure`,
:func:`~llmexplore.plots.transfer.fanout_figure`, :func:`~llmexplore.plots.transfer.pairs_figure`) for the chosen
model, prefill and decode TP x DP x PP (pipeline stages), speculative-decoding preset, page size, KV dtype, link,
DP pairing and runtime; the status line is the
notebook's finding (:func:`llmexplore.findings.transfer.plan_sentence`) and the prefill time the pipelined transfer
overlaps (what the runtime preset prices). A layout pair the planner cannot serve (a decode
DP group without a prefill group under version-1 pairing, a TP that does not fit the KV heads) is reported in
the status line with the planner's own message.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

import numpy as np

from .. import _check, presets
from ..findings import num
from ..findings import transfer as transfer_findings
from ..plots import transfer as transfer_plots
from ..sweeps import transfer as transfer_sweeps
from ..transfer.buffers import MAX_PAGE_TOKENS
from ..transfer.planner import DP_PAIRINGS
from ..units import DTYPE_BYTES
from . import Draw, Explorer, choice_slider, dropdown, dtype_name, log_options, preset_name

__all__ = ["TransferExplorer", "transfer_explorer", "pairs_around", "TPS", "DPS", "PPS", "PAGE_SIZES", "PAIRINGS",
           "NO_SPEC"]

#: choices of the TP and DP sliders (other values are added when asked for)
TPS = [1, 2, 4, 8, 16, 32]
DPS = [1, 2, 4, 8]
PAGE_SIZES = log_options(1, 256)
#: choices of the pipeline-stage sliders (each side)
PPS = [1, 2, 3, 4, 8]
#: the speculative dropdown's entry for plain decoding
NO_SPEC = "none (plain decoding)"
#: the DP pairing dropdown: version 1 pairs DP groups by index; "any" routes a request from any prefill group
PAIRINGS = [("by index (version 1)", "index"), ("any prefill group", "any")]


pairs_around = transfer_sweeps.pairs_around  # the pairs the explorer compares (kept here for callers)


def _count(unit: str):
    return lambda v: f"{v:,} {unit}" + ("" if v == 1 else "s")


@dataclass
class TransferExplorer(Explorer):
    """KV transfer explorer (see :func:`transfer_explorer`)."""

    FIGURES = ("matrix", "fanout", "pairs")

    def setup(self) -> transfer_sweeps.TransferSetup:
        p, f = self.params(), self.fixed
        return transfer_sweeps.setup(p["model"], prefill_tp=int(p["prefill_tp"]), decode_tp=int(p["decode_tp"]),
                                     prefill_dp=int(p["prefill_dp"]), decode_dp=int(p["decode_dp"]),
                                     page_size=int(p["page_size"]), kv_dtype=p["kv_dtype"],
                                     prompt_tokens=f["prompt_tokens"], link=p["link"], gpu=f["gpu"],
                                     dp_pairing=p["dp_pairing"], runtime=p["runtime"],
                                     prefill_pp=int(p["prefill_pp"]), decode_pp=int(p["decode_pp"]),
                                     speculative=self.speculative())

    def speculative(self) -> str | None:
        """The speculative preset of the dropdown (None: plain decoding)."""
        spec = self.params()["speculative"]
        return None if spec == NO_SPEC else spec

    def evaluate(self):
        p, f = self.params(), self.fixed
        s = self.setup()  # UnsupportedPDLayoutError (a SpecError) for a pair the planner cannot serve
        summary = transfer_sweeps.plan_summary(s)
        matrix = transfer_sweeps.byte_matrix(s)
        ranks = transfer_sweeps.prefill_rank_table(s)
        chosen = (int(p["prefill_tp"]), int(p["decode_tp"]))
        pairs = transfer_sweeps.layout_pairs(p["model"], pairs_around(s.model, *chosen), page_size=int(p["page_size"]),
                                             kv_dtype=p["kv_dtype"], prompt_tokens=f["prompt_tokens"],
                                             link=p["link"], gpu=f["gpu"], runtime=p["runtime"],
                                             prefill_pp=int(p["prefill_pp"]), decode_pp=int(p["decode_pp"]),
                                             speculative=self.speculative())
        tr = s.traffic
        where = (f" — prefill DP group {tr.prefill_dp_group} → decode DP group {tr.decode_dp_group}"
                 if s.mt.prefill_layout.dp_size > 1 or s.mt.decode_layout.dp_size > 1 else "")
        draws = {
            "matrix": Draw(transfer_plots.byte_matrix_figure, matrix, {
                "title": f"{s.label}: {transfer_findings.matrix_sentence(matrix, short=True)}{where}"}),
            "fanout": Draw(transfer_plots.fanout_figure, ranks, {
                "title": f"{s.label}: {transfer_findings.fanout_sentence(ranks, short=True)}"}),
            "pairs": Draw(transfer_plots.pairs_figure, pairs, {
                "chosen": chosen, "title": f"{s.model.label}, DP 1"
                                           + (f", PP {s.mt.prefill_pp} → {s.mt.decode_pp}" if s.mt.pipelined else "")
                                           + f", over {s.link.label}: "
                                           f"{transfer_findings.pairs_sentence(pairs, short=True)}"}),
        }
        status = html.escape(transfer_findings.plan_sentence(summary, s))
        if np.isfinite(summary.get("prefill_ms", np.nan)):  # what the runtime prices: the prefill it hides behind
            status += (f" The prefill it overlaps takes {num(summary['prefill_ms'])} ms on prefill "
                       f"TP{s.mt.prefill_layout.tp_size_per_dp}"
                       + (f" x PP{s.mt.prefill_pp} (pipelined)" if s.mt.prefill_pp > 1 else "") + ".")
        head, sep, rest = status.partition(": ")
        return draws, f"<b>{head}</b>{sep}{rest}", {"summary": summary, "matrix": matrix, "ranks": ranks,
                                                      "pairs": pairs}


def transfer_explorer(model: str = "llama-3-70b", gpu: str = "h100-sxm", *, prefill_tp: int = 8, prefill_dp: int = 1,
                      decode_tp: int = 4, decode_dp: int = 1, page_size: int = 16, kv_dtype: str = "bf16",
                      link: str = "roce-400g", prompt_tokens: int = 4096, dp_pairing: str = "index",
                      runtime: str = "default", prefill_pp: int = 1, decode_pp: int = 1,
                      speculative: str | None = None) -> TransferExplorer:
    """Sliders for prefill and decode TP, DP and pipeline stages and the page size; dropdowns for the model, KV
    dtype, link, DP pairing, speculative-decoding preset (``data/speculative.yaml``: its draft's KV and hidden
    state move too) and the runtime preset (``data/runtime.yaml``: it prices the prefill a pipelined transfer
    hides behind); three live figures. ``gpu`` and ``prompt_tokens`` are fixed (the prefill time the pipelined
    transfer overlaps, and the request that is timed).

    Unknown names raise :class:`~llmexplore.errors.SpecError`; sizes outside the sliders' usual range are
    added to them, and a layout pair the planner cannot serve is reported in the status line.
    """
    model = preset_name("models", "model", model)
    gpu = preset_name("hardware", "gpu", gpu)
    link = preset_name("links", "link", link)
    kv_dtype = dtype_name("kv_dtype", kv_dtype)
    sizes = {}
    for name, value, hi in (("prefill_tp", prefill_tp, transfer_sweeps.MAX_TP),
                            ("prefill_dp", prefill_dp, transfer_sweeps.MAX_DP),
                            ("decode_tp", decode_tp, transfer_sweeps.MAX_TP),
                            ("decode_dp", decode_dp, transfer_sweeps.MAX_DP)):
        sizes[name] = _check.integer(name, value, lo=1, hi=hi)
    page_size = _check.integer("page_size", page_size, lo=1, hi=MAX_PAGE_TOKENS, unit="tokens")
    prompt_tokens = _check.integer("prompt_tokens", prompt_tokens, lo=1, hi=1 << 24, unit="tokens")
    dp_pairing = _check.choice("dp_pairing", dp_pairing, DP_PAIRINGS)
    runtime = preset_name("runtime", "runtime", runtime)
    for name, value in (("prefill_pp", prefill_pp), ("decode_pp", decode_pp)):
        sizes[name] = _check.integer(name, value, lo=1, hi=transfer_sweeps.MAX_PP)
    if speculative is not None:
        speculative = preset_name("speculative", "speculative", speculative)
    gpus, groups = _count("GPU"), _count("group")
    stages = (lambda v: "no pipeline" if v == 1 else f"{v} stages")
    controls = {
        "prefill_tp": choice_slider(TPS, sizes["prefill_tp"], "prefill TP", label=gpus),
        "prefill_dp": choice_slider(DPS, sizes["prefill_dp"], "prefill DP", label=groups),
        "decode_tp": choice_slider(TPS, sizes["decode_tp"], "decode TP", label=gpus),
        "decode_dp": choice_slider(DPS, sizes["decode_dp"], "decode DP", label=groups),
        "page_size": choice_slider(PAGE_SIZES, page_size, "KV page", "tokens"),
        "model": dropdown(presets.names("models"), model, "model"),
        "kv_dtype": dropdown(list(DTYPE_BYTES), kv_dtype, "KV cache"),
        "link": dropdown(presets.names("links"), link, "link"),
        "dp_pairing": dropdown(PAIRINGS, dp_pairing, "DP pairing"),
        "runtime": dropdown(presets.names("runtime"), runtime, "runtime"),
        "prefill_pp": choice_slider(PPS, sizes["prefill_pp"], "prefill PP", label=stages),
        "decode_pp": choice_slider(PPS, sizes["decode_pp"], "decode PP", label=stages),
        "speculative": dropdown([NO_SPEC, *presets.names("speculative")], speculative or NO_SPEC, "speculative"),
    }
    rows = [["prefill_tp", "prefill_dp", "decode_tp", "decode_dp"], ["prefill_pp", "decode_pp", "speculative"],
            ["page_size", "model", "kv_dtype"], ["link", "dp_pairing", "runtime"]]
    return TransferExplorer.build(controls, rows, fixed={"gpu": gpu, "prompt_tokens": prompt_tokens})

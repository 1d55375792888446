"""The KV offload explorer's pipeline slider and speculative dropdown (issue 21, area 50): the figures are the
notebook's builders for the same setup, the status line says how far the break-even moved, and a combination the
models refuse is said in the status line, not raised."""

from __future__ import annotations

import numpy as np
import pytest

from llmexplore import plots, sweeps, widgets
from llmexplore.errors import LlmexploreError, SpecError
from llmexplore.plots import trace


def _same(a, b):
    return np.allclose(np.nan_to_num(np.asarray(a, float), nan=-1), np.nan_to_num(np.asarray(b, float), nan=-1))


def test_the_pipeline_slider_redraws_the_pipelines_figures_and_says_the_shift():
    app = widgets.offload.offload_explorer()
    assert set(app.controls) >= {"pp", "speculative"} and app.controls["pp"].value == 1
    assert app.controls["speculative"].value == widgets.offload.NO_SPEC
    app.controls["pp"].value = 2
    s = sweeps.offload.setup(pp=2)
    static = plots.offload.cost_curves_figure(sweeps.offload.cost_curves(s, widgets.offload.CURVE_PREFIXES),
                                              sweeps.offload.break_even_table(s))
    name = plots.offload.load_name("NVMe SSD, PCIe Gen4 x4")
    assert _same(trace(app.figures["costs"], name).y, trace(static, name).y)
    assert _same(trace(app.figures["costs"], plots.offload.RECOMPUTE).y, trace(static, plots.offload.RECOMPUTE).y)
    assert app.figures["costs"].layout.title.text.startswith("PP2: ")
    assert "PP2 (2 stages on 2 nodes" in app.status_text and "→ load (break-even 256 tokens" in app.status_text
    assert "moves from 40,192 tokens to 256 tokens (one block)" in app.status_text
    app.controls["pp"].value = 1
    assert "PP2" not in app.status_text and "break-even 40,192 tokens" in app.status_text


def test_the_speculative_dropdown_adds_the_draft_layer_and_refusals_are_said():
    app = widgets.offload.offload_explorer(speculative="eagle3-llama-3.1-8b")
    assert "eagle3-llama-3.1-8b (its draft head's KV loaded and recomputed)" in app.status_text
    point = sweeps.offload.point_summary(sweeps.offload.setup(speculative="eagle3-llama-3.1-8b"), 32768,
                                         queue_wait_ms=20.0)
    assert app.last["point"]["bytes_MB"] == pytest.approx(point["bytes_MB"])
    app.controls["pp"].value = 2  # a draft inside a pipeline: refused, as everywhere (vllm-project/vllm#57755)
    assert "Cannot evaluate" in app.status_text and "must be 1 when decoding speculatively" in app.status_text
    app.controls["pp"].value = 1
    app.controls["speculative"].value = "deepseek-mtp-1"  # Llama-3-70B has no MTP module
    assert "Cannot evaluate" in app.status_text and "has none (mtp_layers 0)" in app.status_text
    app.controls["model"].value = "deepseek-v3"
    assert "deepseek-mtp-1 (its MTP layer's KV loaded and recomputed)" in app.status_text


def test_bad_explorer_arguments_raise_one_line():
    with pytest.raises(LlmexploreError, match="speculative"):
        widgets.offload.offload_explorer(speculative="medusa")
    with pytest.raises(SpecError, match="pp"):
        widgets.offload.offload_explorer(pp=0)

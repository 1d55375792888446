"""Explorers driven without a browser: set a control's value, the FigureWidgets and the status change."""

import numpy as np
import pytest

from llmexplore import widgets


@pytest.fixture(scope="module")
def app():
    return widgets.layouts.layout_explorer("deepseek-v3", "h200", 8, 64, 8192, "fp8", "bf16")


def _y(fig, i):
    return np.array(fig.data[i].y, dtype=float)


def test_batch_slider_redraws_step_curves_in_place(app):
    fig = app.figures["step"]
    before = [_y(fig, i) for i in range(len(fig.data) - 1)]
    app.controls["batch"].value = 256
    after = [_y(fig, i) for i in range(len(fig.data) - 1)]
    assert app.figures["step"] is fig  # redrawn in place, not rebuilt
    changed = [not np.allclose(np.nan_to_num(a, nan=-1), np.nan_to_num(b, nan=-1)) for a, b in zip(before, after)]
    assert any(changed)
    # a bigger batch never makes a step faster (same layout, same context)
    tp_before, tp_after = np.nan_to_num(before[0], nan=np.inf), np.nan_to_num(after[0], nan=np.inf)
    both = np.isfinite(tp_before) & np.isfinite(tp_after)
    assert np.all(tp_after[both] >= tp_before[both])
    assert "batch 256" in fig.layout.title.text
    app.controls["batch"].value = 64


def test_context_slider_moves_the_marker_and_memory_bars(app):
    mem = app.figures["memory"]
    kv_before = np.array(mem.data[3].y, dtype=float)  # "KV cache" bars
    app.controls["context"].value = 32768
    assert list(app.figures["step"].data[-1].x) == [32768, 32768]
    kv_after = np.array(mem.data[3].y, dtype=float)
    assert mem.data[3].name == "KV cache"
    assert np.all(kv_after > kv_before)
    app.controls["context"].value = 8192


def test_status_names_the_best_layout(app):
    assert "Best: DOP" in app.status.value
    assert app.last["best"] == "DOP"


def test_bad_combination_shows_a_message_not_a_traceback(app):
    app.controls["model"].value = "llama-3.2-3b"  # 24 query heads
    app.controls["ranks"].value = 16  # does not divide 24
    assert "Cannot evaluate" in app.status.value
    assert "ranks (16) must divide the query heads" in app.status.value
    app.controls["ranks"].value = 8
    assert "Best:" in app.status.value
    app.controls["model"].value = "deepseek-v3"


def test_nothing_fits_is_reported(app):
    app.controls["model"].value = "deepseek-v3"
    app.controls["weight_dtype"].value = "bf16"
    app.controls["ranks"].value = 1
    assert "Nothing fits" in app.status.value or "Cannot evaluate" in app.status.value
    app.controls["ranks"].value = 8
    app.controls["weight_dtype"].value = "fp8"

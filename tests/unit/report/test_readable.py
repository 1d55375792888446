"""Issue 20 §1: what a report reader sees. Parameter placeholders in the prose read as values, the Summary lists
every figure's headline, log axes label only what fits, flat figures say why, and the dotted "does not fit"
segments join the solid ones."""

from __future__ import annotations

import nbformat
import numpy as np
import plotly.graph_objects as go
import pytest

from llmexplore import nbtools, plots, sweeps
from llmexplore.findings import offload as fo
from llmexplore.report.params import notebook_values, value_text, with_values


def test_placeholders_read_as_values_with_the_name_kept():
    values = {"RATE": 1.0, "PROMPT_TOKENS": 32768, "HIT_RATIO": 0.563, "RANGE": [0.25, 200], "MODEL": "llama-3-70b"}
    text = ("receives `RATE` requests per second of prompts of `PROMPT_TOKENS` tokens, a share `HIT_RATIO` cached, "
            "over `RANGE` GB/s for `MODEL`; pass `-p RATE 2`, see `data/x.yaml` and `OTHER`")
    assert with_values(text, values) == (
        "receives 1 (`RATE`) requests per second of prompts of 32,768 (`PROMPT_TOKENS`) tokens, a share 0.563 "
        "(`HIT_RATIO`) cached, over 0.25–200 (`RANGE`) GB/s for llama-3-70b (`MODEL`); pass `-p RATE 2`, see "
        "`data/x.yaml` and `OTHER`")
    assert with_values(with_values(text, values), values) == with_values(text, values)  # once only
    assert with_values("```\n`RATE`\n```", values) == "```\n`RATE`\n```"  # code blocks are code


@pytest.mark.parametrize("value, text", [(8, "8"), (4096, "4,096"), (3000.0, "3,000"), (0.563, "0.563"),
                                         (12345.6, "12,346"), (True, "True"), (None, "the default"), ("h200", "h200"),
                                         ([1, 2, 3], "1, 2, 3"), (float("inf"), "inf")])
def test_value_text(value, text):
    assert value_text(value) == text


def test_notebook_values_take_the_injected_parameters_over_the_defaults():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("RATE = 1.0  # req/s\nMODEL = 'a'\nX = f(2)", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("RATE = 4.0", metadata={"tags": ["injected-parameters"]})])
    assert notebook_values(nb) == {"RATE": 4.0, "MODEL": "a"}  # X is not a literal: left out


def test_summarize_lists_each_figure_title_once_in_order(monkeypatch):
    from IPython.core.interactiveshell import ExecutionInfo, ExecutionResult

    shown = []
    monkeypatch.setattr("IPython.display.display", lambda data, raw=False: shown.append(data))
    nbtools._HEADLINES.clear()
    for cell, title in (("a", "First: 33.2 ms<br>per step"), ("b", "Second <sup>x</sup> 4 GPUs"), ("a", "First: 34 ms")):
        result = ExecutionResult(ExecutionInfo(raw_cell=cell, store_history=False, silent=False, shell_futures=True,
                                               cell_id=cell))
        result.result = go.Figure(layout=dict(title=dict(text=title)))
        nbtools._on_cell(result)
    none = ExecutionResult(ExecutionInfo(raw_cell="c", store_history=False, silent=False, shell_futures=True,
                                         cell_id="c"))
    none.result = 3
    nbtools._on_cell(none)
    assert nbtools.headlines() == ["First: 34 ms", "Second x 4 GPUs"]  # a cell run again replaces its own
    nbtools.summarize()
    assert shown[-1]["text/markdown"].endswith("* First: 34 ms\n* Second x 4 GPUs")
    nbtools._HEADLINES.clear()
    with pytest.raises(Exception, match="no figure has been shown yet"):
        nbtools.summarize()


def test_fit_split_joins_the_dotted_part_to_the_solid_one():
    solid, dotted = plots.fit_split([1, 2, 3, 4, 5], [True, True, False, True, False])
    assert np.isnan(solid).tolist() == [False, False, True, False, True]
    # the lone fitting point (index 3) lies on the dotted line, and the dotted line starts at the last fitting one
    assert np.isnan(dotted).tolist() == [True, False, False, False, False]


def test_log_axes_label_powers_of_ten_over_two_decades_and_125_steps_below():
    spec = {"data": [dict(type="scatter", x=[1, 10, 1000], y=[20, 30, 50]),
                     dict(type="scatter", x=[1, 2], y=[1, 2], xaxis="x2", yaxis="y2")],
            "layout": dict(xaxis=dict(type="log"), yaxis=dict(type="log"), xaxis2=dict(type="log", dtick=0.5),
                           yaxis2=dict(type="linear"))}
    fig = plots.figure(spec)
    assert fig.layout.xaxis.dtick == 1 and fig.layout.yaxis.dtick is None  # 3 decades; 20-50 is under 0.7
    assert fig.layout.xaxis2.dtick == 0.5  # set by the figure: kept
    spec["data"][0]["y"] = [10, 30, 80]
    y = plots.figure(spec).layout.yaxis
    # 1-2-5 ticks with whole labels ("20", not plotly's "2"), decades to spare for a live figure's moves
    assert y.tickmode == "array" and {10.0, 20.0, 50.0, 100.0} <= set(y.tickvals)
    assert y.ticktext[list(y.tickvals).index(20.0)] == "20" and min(y.tickvals) <= 0.01


def test_moe_layer_panels_share_one_log_axis_and_mark_the_batch():
    df = sweeps.moe.step_vs_batch("deepseek-v3", "h100-sxm", 16, batches=[16, 256, 4096], context=2048, skew=2.0)
    fig = plots.moe.comm_figure(df, batch_marker=256)
    axes = [k for k in fig.layout.to_plotly_json() if k.startswith("yaxis")]
    assert len(axes) == 5 and all(fig.layout[a].type == "log" for a in axes)  # matches: y needs the same type
    assert "µs" in fig.layout.yaxis.title.text
    names = [t.name for t in fig.data if t.showlegend is not False]
    assert "chosen batch" in names and plots.NOT_FIT in names


def test_a_uniform_fanout_says_why_it_is_flat():
    kv = sweeps.transfer.setup("llama-3-70b", prefill_tp=8, decode_tp=4)
    ranks = sweeps.transfer.prefill_rank_table(kv)
    fig = plots.transfer.fanout_figure(ranks)
    assert "split the KV evenly" in fig.layout.meta["uniform"]
    assert any("split the KV evenly" in a.text.replace("<br>", " ") for a in fig.layout.annotations)
    uneven = plots.transfer.fanout_figure(sweeps.transfer.prefill_rank_table(
        sweeps.transfer.setup("llama-3-70b", prefill_tp=16, decode_tp=4)))
    assert not (uneven.layout.meta or {}).get("uniform")  # idle replica ranks: not all alike


def test_hit_ratio_compares_the_chosen_tier_with_the_one_that_saves_most():
    s = sweeps.offload.setup("llama-3-70b", "h100-sxm", storage="nvme-gen4", tp=8)
    hs = sweeps.offload.grid_with(0, 1, 11, 0.563)
    saved = sweeps.offload.saved_by_tier(s, hs, prompt_tokens=32768)
    best = sweeps.offload.best_saving_tier(saved, 0.563)
    assert best.startswith("dram")
    gpus = sweeps.offload.gpus_vs_hit_ratio(s, hs, rate_per_s=1.0, prompt_tokens=32768, ttft_slo_ms=3000,
                                            tiers=[best, "nvme-gen4"])
    assert list(dict.fromkeys(gpus["tier"])) == ["nvme-gen4", best]  # the setup's own first, no duplicate
    own, other = (gpus[gpus["tier"] == t].set_index("hit_ratio")["gpus"] for t in ("nvme-gen4", best))
    assert own[0.563] == own[0.0] == 32 and other[0.563] < own[0.563]  # Gen4 recomputes; DRAM loads and saves GPUs
    title = fo.hit_ratio_sentence(gpus, saved, s, hit_ratio=0.563, rate_per_s=1.0, prompt_tokens=32768, short=True)
    assert title.startswith("56.3% hit ratio on NVMe Gen4: 32 GPUs vs 32") and f"{int(other[0.563])} GPUs" in title
    fig = plots.offload.hit_ratio_figure(gpus, saved, hit_marker=0.563)
    assert sum(t.name.startswith("GPUs needed") for t in fig.data) == 2
    with pytest.raises(Exception, match="hit_ratio 0.77 is not among"):
        sweeps.offload.best_saving_tier(saved, 0.77)


def test_share_plotly_moves_the_library_into_one_file(tmp_path):
    from llmexplore.report.pages import remote_resources, share_plotly

    lib = "/**\n* plotly.js v9.9.9\n* Copyright\n*/\n(function(){window.Plotly = {};})();"
    pages = []
    for name in ("a.html", "b.html"):
        page = tmp_path / name
        page.write_text(f"<html><script>window.x = 1;</script><script>{lib}</script><div>fig</div></html>")
        pages.append(page)
        shared = share_plotly(page)
        assert shared == tmp_path / "plotly-9.9.9.min.js" and shared.read_text() == lib
    for page in pages:
        text = page.read_text()
        assert '<script src="plotly-9.9.9.min.js"></script>' in text and "plotly.js v9.9.9" not in text
        assert "<script>window.x = 1;</script>" in text and remote_resources(text) == []  # a local load
    assert share_plotly(pages[0]) is None  # nothing inlined any more


def test_launch_commands_break_between_flags_never_inside_a_token():
    import shlex

    from llmexplore.plots.plan import shell_lines

    cmd = ("  vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size 1 --max-num-seqs 632 --quantization "
           "fp8_per_tensor --kv-cache-dtype fp8 --kv-transfer-config '{\"kv_connector\":\"NixlConnector\"}'")
    text = shell_lines(cmd + "\n  note: short --line")
    lines = text.splitlines()
    assert lines[-1] == "  note: short --line" and all(len(line) <= 100 for line in lines)
    # a shell reads the continued lines as the same command: the same tokens
    assert shlex.split(" ".join(line.rstrip("\\") for line in lines[:-1])) == shlex.split(cmd)


def test_the_voila_landing_page_says_what_each_notebook_answers():
    """Issue 20 §1.7: `make serve`'s landing page was a bare list of file names; its template carries each
    notebook's title and first sentence, and must follow the notebooks (regenerate with voila_tree())."""
    from llmexplore.report.pages import VOILA_TREE, voila_tree_text

    assert VOILA_TREE.read_text(encoding="utf-8") == voila_tree_text(), \
        "share/jupyter/voila/templates/llmexplore/tree_descriptions.j2 is stale: run llmexplore.report.pages.voila_tree()"
    text = voila_tree_text()
    assert '"60_deployment_planner.ipynb": "Deployment planner: the best way to serve a model within a GPU budget"' in text
    tree = (VOILA_TREE.parent / "tree.html").read_text(encoding="utf-8")
    assert "import titles, descriptions" in tree and "descriptions[content.name]" in tree


def test_a_log_axis_states_the_values_at_the_chosen_point():
    """Issue 20 §1.8: 10 §3 and 30 §1 squash the 33-39 ms their titles talk about on a log axis; the figures now
    state each curve's value at the chosen point, smallest first."""
    text = plots.values_at({"TP": ([1024, 16384], [30.0, 48.0]), "DPA": ([1024, 16384], [31.0, 34.0]),
                            "CP": ([1024, 2048], [40.0, 41.0])}, 4096, "ms", what="4,096 tokens")
    # log-log interpolation: TP at 4,096 = 30 * (48/30)^(2/4) = 37.9
    assert text == "at 4,096 tokens: DPA 32.5 ms · TP 37.9 ms · CP does not fit"
    layout = plots.values_note({}, text)
    assert layout["annotations"][0]["xref"] == "x domain" and layout["annotations"][0]["text"] == text

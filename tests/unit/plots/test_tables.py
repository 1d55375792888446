"""plots/tables.py: tables for people (headers with units, rounding, nothing elided) and the preset catalogue."""

import math

import numpy as np
import pandas as pd
import pytest

from llmexplore import catalog
from llmexplore.errors import SpecError
from llmexplore.plots.tables import format_number, header_for, people_table, preset_tables


@pytest.mark.parametrize("column, header", [
    ("step_ms", "step time [ms]"), ("prefill_ms", "prefill [ms]"), ("bandwidth_GBps", "bandwidth [GB/s]"),
    ("rate_per_s", "arrival rate [req/s]"), ("goodput_per_gpu", "goodput [req/s per GPU]"),
    ("moe_layer_us", "MoE layer [µs]"), ("error_pct", "error [%]"), ("prompt_tokens", "prompt [tokens]"),
    ("disaggregated.gpus", "disaggregated, gpus"), ("weird", "weird"),
])
def test_headers_carry_units_and_no_internal_names(column, header):
    assert header_for(column) == header


@pytest.mark.parametrize("value, decimals, text", [
    (1186.3072, None, "1,186"), (26.4292, None, "26.4"), (0.0362, None, "0.0362"), (8030261248, None,
                                                                                   "8,030,261,248"),
    (float("inf"), None, "∞"), (-math.inf, None, "−∞"), (math.nan, None, "—"), (None, None, "—"),
    (True, None, "yes"), (np.bool_(False), None, "no"), (3.14159, 2, "3.14"), (1e-7, None, "1.00e-07"),
    (1e-7, 2, "0"), ("DOP", None, "DOP"),
])
def test_format_number(value, decimals, text):
    assert format_number(value, decimals) == text


def test_people_table_rounds_per_column_and_drops_the_index():
    df = pd.DataFrame({"layout": ["TP", "DOP"], "feasible": [True, False], "step_ms": [36.6128, 26.4292],
                       "kv_GB": [36.843, 4.605], "gpus": [72.0, np.inf], "reason": ["", ""]},
                      index=pd.Index([10, 11]))
    t = people_table(df)
    assert list(t.frame.columns) == ["layout", "fits in memory", "step time [ms]", "KV cache [GB]", "GPUs"]
    assert t.frame.values.tolist() == [["TP", "yes", "36.6", "36.84", "72"], ["DOP", "no", "26.4", "4.61", "∞"]]
    html = t._repr_html_()
    assert "<th" in html and ">10<" not in html and "overflow-x:auto" in html and 'class="num"' in html
    assert repr(t).splitlines()[0].split() == ["layout", "fits", "in", "memory", "step", "time", "[ms]", "KV",
                                               "cache", "[GB]", "GPUs"]


def test_people_table_columns_headers_digits_missing():
    df = pd.DataFrame({"after": ["DOP", None], "x_ms": [1.23456, 2.5], "exposed_ms": [0.1, 0.2]})
    t = people_table(df, {"after": None, "x_ms": "custom [ms]", "exposed_ms": None}, digits={"x_ms": 1},
                     headers={"exposed_ms": "KV transfer, exposed [ms]"}, missing={"after": "nothing fits"})
    assert list(t.frame.columns) == ["best above", "custom [ms]", "KV transfer, exposed [ms]"]
    assert t.frame.values.tolist() == [["DOP", "1.2", "0.100"], ["nothing fits", "2.5", "0.200"]]
    with pytest.raises(SpecError, match=r"column\(s\) \['nope'\] not in the table"):
        people_table(df, ["nope"])
    with pytest.raises(SpecError, match="share the header"):
        people_table(df, {"x_ms": "same", "exposed_ms": "same"})
    with pytest.raises(SpecError, match="needs a pandas DataFrame"):
        people_table([1, 2])


def test_people_table_rounds_cells_alone_when_a_column_spans_decades():
    t = people_table(pd.DataFrame({"value": [32.0, 0.9, 8030261248.0, 3.35, 7.1e-13]}))
    assert t.frame["value"].tolist() == ["32", "0.900", "8,030,261,248", "3.35", "0"]


def test_long_text_is_never_cut():
    long = "meta-llama/Meta-Llama-3-8B config.json (HF); also oumi configs/recipes/llama3_1/README.md " * 3
    t = people_table(pd.DataFrame({"source": [long]}))
    assert long in t.to_html().replace("&#x27;", "'") and 'class="text long"' in t.to_html()


def test_every_preset_and_source_row_is_shown():
    sources = catalog.source_frame()
    t = people_table(sources)
    assert len(t) == len(sources) and "…" not in repr(t)
    group = preset_tables(first="links")
    assert [tab.caption.split()[0] for tab in group.tables] == ["Links", "Models,", "Accelerators", "Runtime", "Storage",
                                                               "Latency", "Speculative", "Prices:", "GPU"]
    assert all(len(tab) == len(catalog.preset_frame(k)) for tab, k in zip(
        group.tables, ["links", "models", "hardware", "runtime", "storage", "targets", "speculative"]))
    targets = preset_tables(first="targets").tables[0]
    assert "TTFT target [ms]" in repr(targets) and "TTFT p99" not in repr(targets)  # each entry names its stat
    with pytest.raises(SpecError, match="first must be one of"):
        preset_tables(first="gpus")

"""notebooks/40_kv_transfer.ipynb with its defaults (the run test_all_notebooks makes, shared): recorded values
against numbers computed here from Llama-3-70B's published config and the link preset, not from the planner."""

import nbformat
import pytest

from llmexplore import presets

# Llama-3-70B (meta-llama/Meta-Llama-3-70B config.json): 80 layers, 8 KV heads of dimension 128; BF16 KV
LAYERS, KV_HEADS, HEAD_DIM, BYTES = 80, 8, 128, 2
PROMPT, PAGE, PREFILL_TP, DECODE_TP = 4096, 16, 8, 4  # the notebook's defaults
REQUEST_B = LAYERS * 2 * KV_HEADS * HEAD_DIM * BYTES * PROMPT  # K and V of every layer, every token


@pytest.fixture(scope="module")
def run(default_run):
    return default_run("40_kv_transfer.ipynb")


@pytest.fixture(scope="module")
def rec(run):
    return run[1]


def test_the_request_moves_its_whole_kv_cache_once(rec):
    plan = rec["plan"]
    assert rec["layouts"] == "TP8 → TP4" and plan["model"] == "llama-3-70b"
    assert plan["request_MB"] == pytest.approx(REQUEST_B / 1e6, rel=1e-12)  # 1,342 MB
    # decode TP4 holds 2 heads per rank: each decode NIC receives a quarter, each prefill NIC sends an eighth
    assert plan["busiest_MB"] == pytest.approx(REQUEST_B / DECODE_TP / 1e6, rel=1e-12)
    assert list(rec["received_MB_per_decode_rank"].values()) == pytest.approx([REQUEST_B / DECODE_TP / 1e6] * 4)
    assert list(rec["sent_MB_per_prefill_rank"].values()) == pytest.approx([REQUEST_B / PREFILL_TP / 1e6] * 8)
    assert plan["local_copy_MB"] == 0 and plan["idle_prefill_ranks"] == 0


def test_each_decode_rank_gathers_its_heads_from_two_prefill_ranks(rec):
    heads_per_decode, heads_per_prefill = KV_HEADS // DECODE_TP, KV_HEADS // PREFILL_TP
    assert rec["sources_per_decode_rank"] == {str(r): heads_per_decode // heads_per_prefill for r in range(DECODE_TP)}
    assert rec["fanout_per_prefill_rank"] == {str(p): 1 for p in range(PREFILL_TP)}
    plan = rec["plan"]
    assert plan["plan_kind"] == "fragmented" and plan["max_sources"] == 2 and plan["max_fanout"] == 1
    # one fragment per (decode rank, source, K or V), one head of one page each
    assert plan["fragments_per_layer"] == DECODE_TP * 2 * 2
    assert rec["fragment_bytes_per_page"] == [PAGE * HEAD_DIM * BYTES]
    assert plan["writes"] == plan["fragments_per_layer"] * LAYERS
    assert rec["roundtrip_ok"] is True


def test_transfer_time_is_the_busiest_nic_over_the_link(rec):
    link = presets.link("roce-400g")
    writes_busiest = 2 * 2 * LAYERS  # decode rank 0: two sources x K and V x every layer, 1 us each
    latency_ms = link.latency_us / 1e3
    serial_ms = latency_ms + writes_busiest * 1e-3 + REQUEST_B / DECODE_TP / (link.achievable_GBps * 1e9) * 1e3
    plan = rec["plan"]
    assert plan["serial_ms"] == pytest.approx(serial_ms, rel=1e-9)  # 7.80 ms
    # pipelined: each layer's share leaves while the next layer computes; only the last one is exposed
    assert plan["prefill_ms"] > serial_ms
    assert plan["pipelined_ms"] == pytest.approx(latency_ms + (serial_ms - latency_ms) / LAYERS, rel=1e-9)
    # the prompt axis: the bandwidth part grows with the pages, the latency and the writes do not
    t = rec["serial_ms_by_prompt"]
    fixed = latency_ms + writes_busiest * 1e-3
    assert (t["8192"] - fixed) == pytest.approx(2 * (t["4096"] - fixed), rel=1e-9)
    assert t["4096"] == pytest.approx(serial_ms, rel=1e-9)


def test_layout_pairs_scale_with_the_busiest_nic(rec):
    serial, pipe, copy = rec["pair_serial_ms"], rec["pair_pipelined_ms"], rec["pair_local_copy_MB"]
    assert serial["TP8 → TP4"] == pytest.approx(rec["plan"]["serial_ms"], rel=1e-12)
    # a rank that gathers from (or feeds) k ranks carries k times the bytes: decode TP1 gathers all 8 heads
    assert serial["TP8 → TP1"] > serial["TP8 → TP2"] > serial["TP8 → TP4"] > serial["TP8 → TP8"]
    # the pairs compared are around the chosen TP8 -> TP4: TP8 to every decode TP, every prefill TP to TP4
    assert {"TP8 → TP1", "TP8 → TP32", "TP1 → TP4", "TP32 → TP4"} <= set(serial) and "TP1 → TP8" not in serial
    link = presets.link("roce-400g")
    extra_bytes = REQUEST_B - REQUEST_B / PREFILL_TP  # TP8 -> TP1 against TP8 -> TP8, on the busiest NIC
    extra_writes = (2 * PREFILL_TP - 2) * LAYERS
    assert serial["TP8 → TP1"] - serial["TP8 → TP8"] == pytest.approx(
        extra_bytes / (link.achievable_GBps * 1e9) * 1e3 + extra_writes * 1e-3, rel=1e-9)
    # TP1 -> TP4: prefill rank 0 sends the whole request, one write per decode rank, K and V, every layer
    assert serial["TP1 → TP4"] == pytest.approx(
        link.latency_us / 1e3 + DECODE_TP * 2 * LAYERS * 1e-3 + REQUEST_B / (link.achievable_GBps * 1e9) * 1e3,
        rel=1e-9)
    assert all(pipe[k] < serial[k] for k in serial)
    # version 1 sends each head to one decode replica: TP16 has 2 copies of each head, TP32 has 4
    assert copy["TP8 → TP16"] == pytest.approx(REQUEST_B * (2 - 1) / 1e6)
    assert copy["TP8 → TP32"] == pytest.approx(REQUEST_B * (4 - 1) / 1e6)
    assert copy["TP8 → TP8"] == 0


def test_the_notebook_states_its_findings(run):
    nb = nbformat.read(run[0], as_version=4)
    said = [o["data"]["text/markdown"] for c in nb.cells for o in c.get("outputs", [])
            if "text/markdown" in o.get("data", {}) and c.source.strip() != "summarize()"]
    assert said[0] == ("Prefill TP8 → decode TP4 of Llama-3-70B: each decode rank gathers from 2 prefill ranks; a "
                       "4,096-token request moves 1,342 MB, the busiest NIC (decode 0) carries 336 MB, 7.80 ms serial "
                       "over RoCE 400G, 0.122 ms exposed when pipelined layer by layer.")
    # without pipeline stages, one stage pair carries every layer (issue 21: the stage table of section 1)
    assert said[1] == ("No pipeline stages: all 80 layers go from the one prefill stage to the one decode stage, "
                       "1,342 MB per request.")
    assert len(said) == 7 and "rebuilds every decode page byte for byte" in said[4]
    notes = [o["data"]["text/plain"] for c in nb.cells for o in c.get("outputs", [])
             if "application/vnd.llmexplore.widget-note+json" in o.get("data", {})]
    assert len(notes) == 1 and notes[0].startswith("Prefill TP8 → decode TP4 of Llama-3-70B")

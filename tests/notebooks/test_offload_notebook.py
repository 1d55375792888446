"""notebooks/50_ssd_offload.ipynb with its defaults (the run test_all_notebooks makes, shared): recorded values
against numbers computed here from the model's published config and the storage presets' fields, not from
llmexplore.models.offload.cost. (Llama-3.2-3B's 28 MiB block and its break-even are checked without a notebook run in
tests/unit/models/offload/test_offload.py and tests/reference/test_published.py.)"""

import math
import re

import nbformat
import pytest

from llmexplore import presets

# Llama-3-70B (meta-llama/Meta-Llama-3-70B config.json): 80 layers, 8 KV heads of dimension 128; BF16 KV
LAYERS, KV_HEADS, HEAD_DIM, BYTES = 80, 8, 128, 2
BLOCK, TP, PREFIX, HIT, RATE, PROMPT = 256, 8, 32768, 0.563, 1.0, 32768  # the notebook's defaults
BLOCK_B = LAYERS * 2 * KV_HEADS * HEAD_DIM * BYTES * BLOCK  # K and V of every layer, 256 tokens: 80 MiB


def _records(nb_path):
    from llmexplore.nbtools import read_records

    return read_records(nb_path)


def _said(path) -> list[str]:
    nb = nbformat.read(path, as_version=4)
    return [o["data"]["text/markdown"] for c in nb.cells for o in c.get("outputs", [])
            if "text/markdown" in o.get("data", {}) and c.source.strip() != "summarize()"]  # the sections' own


@pytest.fixture(scope="module")
def run(default_run):
    return default_run("50_ssd_offload.ipynb")


@pytest.fixture(scope="module")
def rec(run):
    return run[1]


def _load_ms(tier, block_B, blocks, ranks_share):
    """Pipelined load of ``blocks`` blocks from an ssd/network tier, from the preset's fields (docs/models.md
    §6.1): Little's law at the tier's queue depth, one device per node, then each rank's shard host -> GPU."""
    io = tier.io_KiB * 1024
    eff = min(tier.read_GBps, tier.link_GBps or math.inf,
              tier.queue_depth * io / (tier.latency_us * 1e-6 + io / (tier.read_GBps * 1e9)) / 1e9)
    t1 = tier.block_overhead_us * 1e-6 + block_B / (eff * 1e9)
    t2 = block_B * ranks_share / (tier.h2d_GBps * 1e9)
    return (tier.latency_us * 1e-6 + blocks * max(t1, t2) + min(t1, t2)) * 1e3, t1


def test_a_block_and_the_load_of_the_prefix_from_the_presets(rec):
    assert rec["block_B"] == BLOCK_B == 80 * 2**20
    point = rec["point"]
    assert point["blocks"] == PREFIX // BLOCK and point["bytes_MB"] == pytest.approx(PREFIX // BLOCK * BLOCK_B / 1e6)
    load_ms, t1 = _load_ms(presets.storage("nvme-gen4"), BLOCK_B, PREFIX // BLOCK, 1 / TP)  # 8 heads over TP8
    assert point["load_ms"] == pytest.approx(load_ms, rel=1e-9)  # 1,537 ms
    assert rec["per_token_us"]["load"] == pytest.approx(t1 / BLOCK * 1e6, rel=1e-9)  # 46.9 us: the drive's bandwidth
    assert rec["per_token_us"]["load"] > rec["per_token_us"]["recompute"]  # so the bandwidth sets the break-even
    assert rec["set_by"]["nvme-gen4"] == "bandwidth" and rec["set_by"]["dram-pcie4"] == "latency"


def test_the_break_even_is_the_first_block_where_recompute_catches_up(rec):
    be = rec["break_even_tokens"]["nvme-gen4"]
    assert be == 40192 and be % BLOCK == 0
    c = rec["curve_near"]
    rows = list(zip(c["prefix_tokens"], c["recompute_ms"], c["load_ms"]))
    first = next(p for p, f, g in rows if f >= g)
    assert first == be
    assert all((f >= g) == (p >= be) for p, f, g in rows)  # loading wins exactly at and above it
    # the default 32,768-token prefix is below the break-even: the gate recomputes it (with the scalar efficiencies
    # the break-even was 28,416 tokens and it loaded)
    point = rec["point"]
    assert point["decision"] == ("load" if PREFIX >= be else "recompute") == "recompute"
    assert point["recompute_ms"] < point["load_ms"]
    assert rec["break_even_tokens"]["dram-pcie4"] == BLOCK and rec["break_even_tokens"]["nvme-gen5"] == BLOCK
    assert rec["break_even_tokens"]["nfs"] > be


def test_fp8_kv_halves_the_bytes_and_fp8_weights_make_recompute_win_longer(rec):
    prec = rec["precision_break_even"]
    assert prec["as set"] == rec["break_even_tokens"]["nvme-gen4"]
    assert prec["FP8 KV"] == BLOCK  # half the bytes: 23.5 us per token to load, below the 35.6 us to recompute
    assert prec["FP8 weights"] > prec["as set"]


def test_preloading_during_the_pool_queue_wait(rec):
    q = rec["queue"]
    assert q["gpus"] == q["instances"] * TP and q["instance_rate_per_s"] == pytest.approx(RATE / q["instances"])
    lam, D = q["instance_rate_per_s"], q["service_ms"] / 1e3
    rho = lam * D
    assert q["utilisation"] == pytest.approx(rho) and rho < 1
    assert q["mean_wait_ms"] == pytest.approx(rho * D / (2 * (1 - rho)) * 1e3, rel=1e-9)  # M/D/1 (Pollaczek-Khinchine)
    assert q["cached_tokens"] == math.floor(HIT * PROMPT / BLOCK) * BLOCK == 18432
    assert q["loaded"] is False  # below the 40,192-token break-even: the gate recomputes
    be = {float(k): v for k, v in rec["preload_break_even_tokens"].items()}
    assert be[0.0] == rec["break_even_tokens"]["nvme-gen4"]
    waits = sorted(be)
    assert all(be[a] >= be[b] for a, b in zip(waits, waits[1:]))  # never rises with the wait
    assert be[min(waits, key=lambda w: abs(w - q["mean_wait_ms"]))] == BLOCK


def test_staging_and_hit_ratio(rec):
    st = rec["staging"]
    assert 0 < st["peak_GB"] <= st["budget_GB"] == 16.0
    assert st["mean_ttft_ms"] <= st["mean_ttft_no_preload_ms"]
    gpus = rec["gpus_by_hit_ratio"]
    assert gpus["0.563"] == gpus["0.0"]  # Gen4 recomputes 18,432 cached tokens: nothing saved
    saved = rec["saved_gpu_s_at_hit_ratio"]
    assert saved["nvme-gen4"] == 0 and saved["dram-pcie5"] > saved["dram-pcie4"] > saved["nvme-gen5"] > 0


def test_the_saved_gpu_time_in_dollars(run, rec):
    # neocloud on-demand prices an H100 SXM at $6.155 per GPU-hour (2026-10-24): a GPU-second is 6.155 / 3600 USD,
    # so 5.78 GPU-s saved per request from host DRAM (PCIe 4) are worth 5.78 x 10^6 x 6.155 / 3600 = $9,882 per
    # million requests; Gen4 recomputes the cached 18,432 tokens and saves nothing
    u, saved = rec["saved_usd"], rec["saved_gpu_s_at_hit_ratio"]
    assert (u["price_tier"], u["gpu"], u["usd_per_gpu_hour"], u["date"]) == ("neocloud-on-demand", "h100-sxm", 6.155,
                                                                              "2026-10-24")
    for tier, gpu_s in saved.items():
        assert u["usd_per_million_requests"][tier] == pytest.approx(gpu_s * 1e6 * 6.155 / 3600, rel=1e-12)
    assert u["usd_per_million_requests"]["dram-pcie4"] == pytest.approx(9882, abs=1)
    assert u["usd_per_million_requests"]["nvme-gen4"] == 0
    said = next(t for t in _said(run[0]) if t.startswith("At $6.155 per GPU-hour (neocloud-on-demand, 2026-10-24)"))
    assert "$9,882 per million requests from Host DRAM over PCIe Gen4 x16 (5.78 GPU-s each)" in said
    assert said.endswith("the chosen tier, nothing: the gate recomputes the 18,432 cached tokens.")


def test_the_notebook_states_its_findings(run):
    said = _said(run[0])
    assert said[0].startswith("Llama-3-70B on 8x H100 SXM 80GB: loading a cached prefix from NVMe SSD, PCIe Gen4 x4 "
                              "pays only from 40,192 tokens — per token the drive (46.9 µs) is slower than recomputing "
                              "(35.6 µs), so the quadratic attention term sets the break-even; from Host DRAM")
    # the last finding compares loads read from this machine's disk with the model (or says how to get one)
    assert len(said) == 9 and re.match(r"(Over \d+ loads read from this machine's disk, the measured time is "
                                       r"[\d.,]+ × the time modelled for the preset tier NVMe SSD, PCIe Gen4 x4|"
                                       r"No measurement on this machine yet)", said[-1]), said[-1]
    nb = nbformat.read(run[0], as_version=4)
    notes = [o["data"]["text/plain"] for c in nb.cells for o in c.get("outputs", [])
             if "application/vnd.llmexplore.widget-note+json" in o.get("data", {})]
    assert len(notes) == 1 and notes[0].startswith("Llama-3-70B on 8x H100 SXM 80GB, NVMe SSD, PCIe Gen4 x4: a "
                                                   "32,768-token prefix")


def test_a_pipeline_of_two_nodes_halves_what_each_drive_reads(run_notebook):
    """PP = 2 (issue 21): two stages of 8 H100s are two nodes; each stage loads its 40 layers through its own node's
    drive and its own GPUs' PCIe links, so the load of the prefix is that of half-size blocks (computed here from the
    config and the preset's fields), the Gen4 break-even falls to one block and the notebook says it moved."""
    path, rec = run_notebook("50_ssd_offload.ipynb", PP=2)
    gen4 = presets.storage("nvme-gen4")
    want, _ = _load_ms(gen4, BLOCK_B / 2, PREFIX // BLOCK, 1 / TP)
    p = rec["point"]
    assert p["load_ms"] == pytest.approx(want, rel=1e-9)
    assert p["stage_bytes_MB"] == pytest.approx(PREFIX // BLOCK * BLOCK_B / 2 / 1e6, rel=1e-12)
    assert p["storage_nodes"] == 2 and p["decision"] == "load"
    assert rec["break_even_tokens"]["nvme-gen4"] == BLOCK
    assert rec["break_even_tokens"]["nfs"] < 338_432  # its plain break-even: each node's NIC reads half the bytes
    assert all(g % (2 * TP) == 0 for g in rec["gpus_by_hit_ratio"].values())  # pools of 2 x 8-GPU pipelines
    said = _said(path)
    assert "PP2 (2 stages on 2 nodes, each reading its own layers)" in said[0]
    assert "the break-even of NVMe SSD, PCIe Gen4 x4 moves from 40,192 tokens to 256 tokens (one block)" in said[0]

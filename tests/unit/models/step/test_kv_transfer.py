"""KV bytes per request and transfer time (docs/models.md §4.1-4.2)."""

import numpy as np
import pytest

from llmexplore import presets
from llmexplore.errors import SpecError
from llmexplore.models.step import kv_transfer as kt
def test_bytes_gqa_llama70():
    m = presets.model("llama-3-70b")
    # 4096 tokens x 327,680 B/token (80 layers x 8 KV heads x 128 x 2 x 2 B; PEERS.md §3.1) = 1.342 GB
    r = kt.kv_request_bytes(m, 4096, prefill_tp=8, decode_tp=8)
    assert float(r["logical_B"]) == 4096 * 327_680 == float(r["physical_B"])
    assert float(r["in_per_rank_B"]) == 4096 * 327_680 / 8
    # page rounding: 4097 tokens occupy 257 pages of 16
    assert float(kt.kv_request_bytes(m, 4097)["logical_B"]) == 257 * 16 * 327_680
    # FP8 KV halves it
    assert float(kt.kv_request_bytes(m, 4096, kv_dtype="fp8")["logical_B"]) == 4096 * 163_840


def test_decode_side_replication():
    m = presets.model("qwen3-32b")  # 8 KV heads
    r = kt.kv_request_bytes(m, 1024, decode_tp=16)
    assert r["replication"] == 2.0  # every head on 16/8 ranks
    ds = presets.model("deepseek-v3")
    r = kt.kv_request_bytes(ds, 1024, prefill_tp=8, decode_tp=8)
    assert r["replication"] == 8.0  # MLA latent on every decode TP rank
    assert float(r["logical_B"]) == 1024 * 70_272
    f = kt.kv_request_bytes(ds, 1024, prefill_tp=8, decode_tp=8, forward_replicas=True)
    assert f["replication"] == 1.0 and f["receivers"] == 1


def test_parallel_nics_vs_one_link():
    m = presets.model("llama-3-70b")
    roce = presets.link("roce-400g")
    eight = kt.transfer_time(m, roce, 4096, prefill_tp=8, decode_tp=8)
    one = kt.transfer_time(m, roce, 4096, prefill_tp=8, decode_tp=8, nics=1)
    # one NIC per GPU ships 8 shards in parallel: the seed's "bytes / one link" overstates by up to 8x (§4.2)
    assert float(one["bandwidth_s"]) == pytest.approx(8 * float(eight["bandwidth_s"]))
    assert float(eight["bandwidth_s"]) == pytest.approx(4096 * 327_680 / 8 / 45e9)


def test_unbatched_page_writes_cost_more():
    m = presets.model("llama-3-70b")
    link = presets.link("ib-ndr400")
    b = kt.transfer_time(m, link, 4096, prefill_tp=8, decode_tp=8, batched_ops=True)
    u = kt.transfer_time(m, link, 4096, prefill_tp=8, decode_tp=8, batched_ops=False)
    assert float(u["n_ops"]) == 80 * 256 * 2  # layers x pages x (K, V)
    assert float(b["n_ops"]) == 80 * 2
    assert float(u["transfer_s"]) > float(b["transfer_s"])


def test_pipelining_closed_form_matches_recurrence():
    rng = np.random.default_rng(0)
    for _ in range(50):
        L = int(rng.integers(1, 100))
        tx, tc = rng.uniform(0.01, 2.0, 2)
        X = C = 0.0
        for _ in range(L):
            C += tc
            X = max(X, C) + tx
        assert float(kt.pipelined_exposed_s(tx * L, tc * L, L)) == pytest.approx(X - C, rel=1e-9)


def test_faster_link_never_slower():
    m = presets.model("llama-3-8b")
    times = [float(kt.transfer_time(m, presets.link(n), 8192)["transfer_s"])
             for n in ("tcp-100g", "roce-400g", "nvlink4", "nvlink5")]
    assert times[0] > times[1] > times[2] > times[3]


def test_bad_input():
    m = presets.model("llama-3-70b")
    with pytest.raises(SpecError, match="decode_tp \\(3\\) must divide"):
        kt.kv_request_bytes(m, 10, decode_tp=3)
    with pytest.raises(SpecError, match="prompt_tokens must be >= 1"):
        kt.kv_request_bytes(m, 0)
    with pytest.raises(SpecError, match="nics must be an integer >= 1"):
        kt.transfer_time(m, presets.link("roce-400g"), 10, nics=0)

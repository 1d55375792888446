"""KV offload with pipeline parallelism and speculative decoding (issue 21, area 50): models/offload/cost.py,
models/offload/preload.py, sweeps/offload.py, findings/offload.py and ``llmexplore offload --pp/--speculative``.

Plain decoding leaves every number as it was; a stage loads exactly its layers' share of a block; recompute is
the pipelined prefill's latency; the break-even moves the way the closed form says; the draft layer of
DeepSeek-V3's MTP module holds the bytes of its config; bad combinations are one line naming the argument."""

from __future__ import annotations

import json

import numpy as np
import pytest

from llmexplore import cli, presets
from llmexplore.errors import SpecError
from llmexplore.findings import offload as fo
from llmexplore.models.offload import cost as of
from llmexplore.models.offload import preload as pr
from llmexplore.models.queueing import at_stat
from llmexplore.models.step.engine import Deployment
from llmexplore.models.step.pipeline import hop_link, pp_prefill, stage_layers
from llmexplore.models.step.prefill import prefill_time
from llmexplore.models.step.speculative import draft_deployment
from llmexplore.sweeps import offload as so

B = 256


@pytest.fixture(scope="module")
def dep70():
    return Deployment.build("llama-3-70b", "h100-sxm", 8)


@pytest.fixture(scope="module")
def dsv3():
    return Deployment.build("deepseek-v3", "h200", 8)


# ---- plain decoding: every number exactly as before ----------------------------------------------------------
def test_pp1_without_speculation_is_the_plain_model_exactly(dep70):
    P = np.array([0, 256, 4096, 40192, 262144], dtype=float)
    # recompute: the plain prefill's marginal, bit for bit
    full = prefill_time(dep70, P + 256, 0)["prefill_s"]
    rest = prefill_time(dep70, P + 256, P)["prefill_s"]
    assert np.array_equal(of.recompute_s(dep70, P), np.where(P > 0, full - rest, 0.0))
    # load: the whole block through one drive, each rank's shard over its own PCIe link
    for name in presets.names("storage"):
        t = presets.storage(name)
        h = of.hop_times(dep70, t)
        blk = of.block_bytes(dep70.model, "bf16", B)
        rank = blk * of.rank_share(dep70)
        assert h["block_B"] == h["node_B"] == h["stage_B"] == blk and h["rank_B"] == rank and h["draft_B"] == 0
        want = (t.block_overhead_us * 1e-6 + (rank if t.kind == "dram" else blk) / (t.effective_GBps() * 1e9))
        assert h["read_s"] == want
    # the published default answer (README: one NVMe Gen4 drive pays from 40,192 tokens), and n-gram lookup
    # (no draft model) changes nothing at all
    gen4 = presets.storage("nvme-gen4")
    plain = of.break_even(dep70, gen4)
    assert plain["tokens"] == 40192.0
    assert of.break_even(dep70, gen4, pp=1, speculative=None) == plain
    ngram = of.break_even(dep70, gen4, speculative="ngram-5")
    assert ngram == plain
    s, n = so.setup(), so.setup(speculative="ngram-5")
    assert so.point_summary(s, 32768)["break_even_tokens"] == so.point_summary(n, 32768)["break_even_tokens"]
    assert s.label == "Llama-3-70B on 8x H100 SXM 80GB (KV bf16), NVMe SSD, PCIe Gen4 x4, 256-token blocks"
    assert "pp" not in so.point_summary(s, 32768) and so.break_even_shift(s).columns.tolist() == \
        so.break_even_table(s).columns.tolist()


# ---- pipelines -----------------------------------------------------------------------------------------------
def test_a_stage_loads_exactly_its_layers_share(dep70):
    m = dep70.model
    per_layer = m.kv_bytes_per_token_per_layer("bf16") * B  # 2 x 8 heads x 128 x 2 B x 256 tokens
    assert per_layer == 2 * 8 * 128 * 2 * 256
    for pp in (1, 2, 3, 7, 80):
        parts = of.stage_bytes(m, pp, "bf16", B)
        assert list(parts) == [n * per_layer for n in stage_layers(m, pp)]
        assert parts.sum() == of.block_bytes(m, "bf16", B)
    assert stage_layers(m, 3) == [27, 27, 26]
    gen4, dram = presets.storage("nvme-gen4"), presets.storage("dram-pcie4")
    blk = of.block_bytes(m, "bf16", B)
    # PP2 x TP8 = 16 GPUs: two nodes of 8, each drive reads its own stage's 40 layers
    h = of.hop_times(dep70, gen4, pp=2)
    assert h["nodes"] == 2 and h["stage_B"] == h["node_B"] == blk * 40 / 80 == of.stage_bytes(m, 2)[0]
    assert h["rank_B"] == blk * of.rank_share(dep70) * 0.5 and h["block_B"] == blk  # one copy of every layer staged
    # PP3: the first stages take the remainder, the worst stage is 27 of 80 layers
    h3 = of.hop_times(dep70, gen4, pp=3)
    assert h3["stage_B"] == of.stage_bytes(m, 3).max() == blk * 27 / 80
    # PP2 x TP4 = 8 GPUs in one node: the stages share its drive (all 80 layers through it), each GPU copies half
    d4 = Deployment.build("llama-3-70b", "h100-sxm", 4)
    h4 = of.hop_times(d4, gen4, pp=2)
    assert h4["nodes"] == 1 and h4["node_B"] == blk and h4["stage_B"] == blk / 2
    assert h4["h2d_s"] == pytest.approx(blk / 2 * of.rank_share(d4) / (gen4.h2d_GBps * 1e9), rel=1e-15)
    assert hop_link(d4, 2) is d4.fabric.scale_up and hop_link(dep70, 2) is dep70.fabric.scale_out
    # a host-memory tier: every GPU copies its stage's share of its shard over its own link
    hd = of.hop_times(dep70, dram, pp=4)
    assert hd["read_s"] == pytest.approx(blk * of.rank_share(dep70) / 4 / (dram.effective_GBps() * 1e9), rel=1e-12)


@pytest.mark.parametrize("tp, pp", [(8, 2), (4, 2), (8, 4), (2, 8)])
def test_recompute_with_a_pipeline_is_pp_prefill_latency(tp, pp):
    dep = Deployment.build("llama-3-70b", "h100-sxm", tp)
    P = np.array([256, 4096, 65536], dtype=float)
    lat = pp_prefill(dep, pp, P + 256, 0)["latency_s"] - pp_prefill(dep, pp, P + 256, P)["latency_s"]
    assert np.array_equal(of.recompute_s(dep, P, pp=pp), lat)
    srv = pp_prefill(dep, pp, P + 256, 0)["service_s"] - pp_prefill(dep, pp, P + 256, P)["service_s"]
    assert np.array_equal(of.recompute_parts(dep, P, pp=pp)["service_s"], srv)
    # the sends of the cached tokens' hidden states (H BF16 per token over T ranks, pp - 1 hops) are all it adds
    link = hop_link(dep, pp)
    per_token = (pp - 1) * dep.model.hidden * dep.b_a / tp / (link.achievable_GBps * 1e9)
    assert of.recompute_s(dep, P, pp=pp) - of.recompute_s(dep, P) == pytest.approx(P * per_token, rel=1e-9)


def test_the_break_even_moves_the_way_the_closed_form_says(dep70):
    """Stages on two nodes halve the bytes each drive reads (c) and add the stage-to-stage sends to a: the closed
    form with plain decoding's fit and those two changes predicts the pipeline's exact gate."""
    nfs = presets.storage("nfs")
    plain = of.break_even(dep70, nfs)
    pipe = of.break_even(dep70, nfs, pp=2)
    blk = of.block_bytes(dep70.model, "bf16", B)
    h = of.hop_times(dep70, nfs, pp=2)
    c2, t_g2 = of.linear_load(h, B)
    assert c2 == pipe["c_s_per_token"]
    assert c2 == pytest.approx((nfs.block_overhead_us * 1e-6 + blk / 2 / (nfs.effective_GBps() * 1e9)) / B, rel=1e-12)
    hop = dep70.model.hidden * dep70.b_a / dep70.ranks / (hop_link(dep70, 2).achievable_GBps * 1e9)
    predicted = float(of.closed_form_tokens(plain["a_s_per_token"] + hop, plain["b_s_per_token2"], c2,
                                            t_g2 - plain["t_f0_s"]))
    assert pipe["set_by"] == plain["set_by"] == "bandwidth"
    assert predicted == pytest.approx(pipe["tokens"], rel=0.02)      # 107,937 vs the exact 108,032
    assert pipe["tokens"] < plain["tokens"] / 2                       # 108,032 vs 338,432: c halved, P* ~ (c - a) / b
    # one NVMe Gen4 drive per node: c falls from 46.9 to 23.5 us/token, below a: the latency sets it, one block
    gen4 = of.break_even(dep70, presets.storage("nvme-gen4"), pp=2)
    assert (gen4["tokens"], gen4["set_by"]) == (256.0, "latency")
    # every tier: more nodes never raise the break-even
    for name in presets.names("storage"):
        t = presets.storage(name)
        seq = [of.break_even(dep70, t, pp=p)["tokens"] for p in (1, 2, 4)]
        assert seq == sorted(seq, reverse=True), name


# ---- speculative decoding: the draft layer ---------------------------------------------------------------------
def test_the_mtp_draft_layer_of_deepseek_v3_against_its_config(dsv3):
    # deepseek-ai/DeepSeek-V3 config.json: num_hidden_layers 61, num_nextn_predict_layers 1 (one MTP module, an MLA
    # layer), kv_lora_rank 512, qk_rope_head_dim 64: 576 values per token per layer, BF16 or FP8
    m = dsv3.model
    assert m.mtp_layers == 1
    assert of.draft_block_bytes(m, "deepseek-mtp-1", "bf16", B) == (512 + 64) * 2 * 256 == 294_912
    assert of.draft_block_bytes(m, "deepseek-mtp-3", "fp8", B) == (512 + 64) * 256
    h = of.hop_times(dsv3, presets.storage("nvme-gen4"), speculative="deepseek-mtp-1")
    assert h["block_B"] == (61 + 1) * 576 * 2 * 256 and h["draft_B"] == 294_912
    assert h["rank_B"] == h["block_B"]  # an MLA latent (the draft's too) goes whole to every rank
    # an EAGLE head on Llama-3-70B: one layer of the target's GQA attention, each of 8 ranks receives one KV head
    d70 = Deployment.build("llama-3-70b", "h100-sxm", 8)
    he = of.hop_times(d70, presets.storage("nvme-gen4"), speculative="eagle3-llama-3.1-8b")
    assert he["draft_B"] == 2 * 8 * 128 * 2 * 256
    assert he["rank_B"] == pytest.approx((81 * 2 * 8 * 128 * 2 * 256) / 8, rel=1e-15)
    # n-gram lookup has no draft: no bytes
    assert of.draft_block_bytes(m, "ngram-5", "bf16", B) == 0


def test_recompute_with_a_draft_adds_the_drafts_prefill(dsv3):
    P = np.array([256, 8192, 65536], dtype=float)
    spec = presets.resolve("speculative", "deepseek-mtp-1")
    extra = of.recompute_s(dsv3, P, speculative=spec) - of.recompute_s(dsv3, P)
    draft = of.draft_prefill_s(dsv3, spec, P + 256, 0) - of.draft_prefill_s(dsv3, spec, P + 256, P)
    assert np.allclose(extra, draft, rtol=1e-12, atol=0) and np.all(extra > 0)
    # the draft is one layer: its marginal prefill is far below the 61-layer target's
    assert np.all(extra < of.recompute_s(dsv3, P) / 20)
    own = prefill_time(draft_deployment(dsv3, spec), P + 256, 0)["prefill_s"] - \
        prefill_time(draft_deployment(dsv3, spec), P + 256, P)["prefill_s"]
    assert np.all(extra > own)  # plus its fuse projection (eh_proj, 2H -> H) of every recomputed token
    # the accepted length changes no number here: the draft's prefill and bytes do not depend on it
    from llmexplore.models.step.speculative import with_accepted_length
    slow = with_accepted_length(spec, 1.2)
    assert np.array_equal(of.recompute_s(dsv3, P, speculative=slow), of.recompute_s(dsv3, P, speculative=spec))
    assert of.draft_block_bytes(dsv3.model, slow) == of.draft_block_bytes(dsv3.model, spec)


# ---- pools, preload and replay -------------------------------------------------------------------------------
def test_a_pipeline_pool_is_sized_with_its_service_time_and_its_latency():
    s = so.setup(pp=2)
    rate, slo = 3.0, 3000.0
    g = so.gpus_vs_hit_ratio(s, [0.0, 0.5], rate_per_s=rate, prompt_tokens=32768, ttft_slo_ms=slo)
    full = of.prefill_parts(s.dep, 32768, 0, pp=2)
    assert g["prefill_ms"].iloc[0] == pytest.approx(float(full["latency_s"]) * 1e3, rel=1e-12)
    assert g["service_ms"].iloc[0] == pytest.approx(float(full["service_s"]) * 1e3, rel=1e-12)
    assert g["service_ms"].iloc[0] < g["prefill_ms"].iloc[0]  # the pipeline takes a new prompt every stage's share
    for r in g.itertuples():
        D, T, c = r.service_ms / 1e3, r.prefill_ms / 1e3, int(r.instances)
        assert float(at_stat.queue_wait("p90", rate / c, D)) + T <= slo / 1e3
        assert c == 1 or rate / (c - 1) * D >= 1 or float(at_stat.queue_wait("p90", rate / (c - 1), D)) + T > slo / 1e3
        assert r.gpus == c * 2 * 8
    q = so.pool_queue(s, rate, prompt_tokens=32768, hit_ratio=0.5, ttft_slo_ms=slo)
    assert q["service_ms"] == pytest.approx(g["service_ms"].iloc[1]) and q["latency_ms"] == pytest.approx(
        g["prefill_ms"].iloc[1])


def test_staging_replay_of_a_pipeline_answers_after_its_latency(dep70):
    gen4 = presets.storage("nvme-gen4")
    # one request, no budget: TTFT = its latency + its exposed load (the server is held for the service only)
    P = np.array([32768.0])
    left = of.prefill_parts(dep70, P + 256, P, pp=2)
    out = pr.simulate_staging(dep70, gen4, [0.0], P, left["service_s"], 0.0, latency_s=left["latency_s"], pp=2)
    load = of.load_s(dep70, gen4, P, pp=2)["load_s"]
    assert not out["recomputed"][0]
    assert out["ttft_s"][0] == pytest.approx(float(left["latency_s"][0] + load[0]), rel=1e-12)
    r = so.staging_replay(so.setup(pp=2), requests=40, rate_per_s=0.5, prefixes=(8192, 32768), budget_GB=16.0)
    assert (r["occupancy"]["staged_GB"] <= 16.0 + 1e-9).all()
    assert (r["requests"]["ttft_ms"] <= r["requests"]["ttft_no_preload_ms"] + 1e-6).all()


def test_preload_break_even_with_a_pipeline_starts_at_its_gate(dep70):
    nfs = presets.storage("nfs")
    be = pr.break_even_preload(dep70, nfs, [0.0, 0.1, 10.0], pp=2, max_tokens=1 << 19)
    assert be[0] == of.break_even(dep70, nfs, pp=2, max_tokens=1 << 19)["tokens"]
    assert be[0] >= be[1] >= be[2]


# ---- findings ------------------------------------------------------------------------------------------------
def test_findings_say_what_the_pipeline_and_the_draft_changed():
    s = so.setup(pp=2)
    shift = so.break_even_shift(s)
    gen4 = shift.set_index("tier").loc["nvme-gen4"]
    assert (gen4["break_even_tokens"], gen4["plain_break_even_tokens"]) == (256.0, 40192.0)
    text = fo.break_even_sentence(shift, s)
    assert "PP2 (2 stages on 2 nodes, each reading its own layers)" in text
    assert "moves from 40,192 tokens to 256 tokens (one block)" in text and "46.9 µs" in text
    assert fo.break_even_sentence(shift, s, short=True).startswith("PP2: ")
    m = so.setup("deepseek-v3", "h200", storage="nfs", speculative="deepseek-mtp-1")
    tm = so.break_even_shift(m)
    row = tm.set_index("tier").loc["nfs"]
    assert row["c_us_per_token"] > row["plain_c_us_per_token"]          # one more layer to load
    assert row["recompute_us_per_token_at_ref"] > row["plain_recompute_us_per_token_at_ref"]  # and to recompute
    assert "deepseek-mtp-1's draft layer loaded and recomputed" in fo.break_even_sentence(tm, m)
    point = so.point_summary(m, 32768)
    assert point["draft_bytes_MB"] == pytest.approx(128 * 294_912 / 1e6)
    assert "37.7 MB loaded with the target's" in fo.summary_table(point, m).to_string()


# ---- bad combinations: one line naming the argument --------------------------------------------------------------
@pytest.mark.parametrize("kw, message", [
    (dict(pp=81), r"pp \(81\) must be at most the layers of llama-3-70b \(80\)"),
    (dict(pp=128, tp=16), r"pp \(128\) must be at most the layers"),
    (dict(pp=64, tp=32), r"pp x tp \(64 x 32 = 2048\) must be at most 1024 GPUs per instance"),
    (dict(pp=2, speculative="eagle3-llama-3.1-8b"),
     r"pp \(2\) must be 1 when decoding speculatively with 'eagle3-llama-3.1-8b'"),
    (dict(speculative="deepseek-mtp-1"), r"speculative 'deepseek-mtp-1' drafts with an MTP module, and llama-3-70b "
                                         r"has none"),
])
def test_bad_combinations_are_one_line(kw, message):
    import re

    with pytest.raises(SpecError) as e:
        so.setup(**{"tp": 8, **kw})
    assert "\n" not in str(e.value) and re.search(message, str(e.value)), str(e.value)


# ---- the command line ------------------------------------------------------------------------------------------
BASE = ["offload", "--model", "llama-3-70b", "--gpu", "h100-sxm", "--tp", "8", "--storage", "nvme-gen4",
        "--prefix", "32768"]


def _json(capsys, *extra):
    capsys.readouterr()
    assert cli.main([*BASE, *extra, "--json"]) == 0
    out, err = capsys.readouterr()
    return json.loads(out)


def test_cli_pp_and_speculative(capsys):
    plain = _json(capsys)
    pipe = _json(capsys, "--pp", "2")
    assert (plain["break_even_tokens"], pipe["break_even_tokens"]) == (40192.0, 256.0)
    assert pipe["pp"] == 2 and pipe["storage_nodes"] == 2 and pipe["decision"] == "load"
    assert pipe["stage_bytes_MB"] == pytest.approx(plain["bytes_MB"] / 2)
    eagle = _json(capsys, "--speculative", "eagle3-llama-3.1-8b")
    assert eagle["speculative"] == "eagle3-llama-3.1-8b"
    assert eagle["bytes_MB"] == pytest.approx(plain["bytes_MB"] * 81 / 80)
    assert eagle["recompute_ms"] > plain["recompute_ms"]
    assert cli.main([*BASE, "--pp", "2"]) == 0
    out = capsys.readouterr().out
    assert "PP2 (2 stages on 2 nodes" in out and "the worst stage loads 5,368.7 MB" in out


@pytest.mark.parametrize("extra, needle", [
    (["--pp", "81"], "--pp (81) must be at most the layers of llama-3-70b (80)"),
    (["--pp", "2", "--speculative", "ngram-5"], "--pp (2) must be 1 when decoding speculatively with 'ngram-5'"),
    (["--speculative", "deepseek-mtp-1"], "--speculative 'deepseek-mtp-1' drafts with an MTP module"),
    (["--speculative", "medusa"], "medusa"),
])
def test_cli_bad_pp_or_speculative_is_one_line(capsys, extra, needle):
    capsys.readouterr()
    assert cli.main([*BASE, *extra]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and needle in err, err

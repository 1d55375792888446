"""The sentences that end each notebook section and the figure titles built from them (sweeps.*_sentence)."""

import numpy as np
import pandas as pd
import pytest

from llmexplore import findings
from llmexplore.findings import disagg as fd
from llmexplore.findings import layouts as fl
from llmexplore.findings import moe as fm
from llmexplore.models.step.engine import Deployment
from llmexplore.sweeps import disagg as sd
from llmexplore.sweeps import layouts as sl
from llmexplore.sweeps import moe as sm

TITLE_CHARS = 80  # plots.TITLE_CHARS: longer titles wrap onto a second line


@pytest.fixture(scope="module")
def dsv3():
    dep = Deployment.build("deepseek-v3", "h200", 8, weight_dtype="fp8", kv_dtype="bf16")
    return dep, sl.layout_table(dep, 64, 8192), sl.boundaries_at(dep, 64, 256, 262144)


def test_best_layout_sentence_states_the_headline(dsv3):
    dep, table, bounds = dsv3
    assert fl.best_layout_sentence(table, bounds, batch=64, context=8192, short=True) == (
        "DPA is fastest at 33.2 ms per step; TP overtakes it below 1,771 tokens")
    assert fl.best_layout_sentence(table, bounds, batch=64, context=8192) == (
        "DPA is fastest at batch 64 and 8,192 tokens, at 33.2 ms per step (next: DOP, 33.3 ms); TP overtakes "
        "it below 1,771 tokens and above 66,896 tokens it stops fitting and DOP takes over.")
    nothing = table.assign(feasible=False)
    assert fl.best_layout_sentence(nothing, batch=64, context=8192) == "Nothing fits at batch 64 and 8,192 tokens."


def test_memory_boundaries_and_closed_form_sentences(dsv3):
    dep, table, bounds = dsv3
    assert fl.memory_sentence(table, 64, 8192) == (
        "At batch 64 × 8,192 tokens every layout fits: TP needs the most memory, 125.8 GB per rank of 135.7 GB "
        "usable, and DOP the least, 93.5 GB.")
    some = table.assign(feasible=table["layout"] != "TP")
    assert "TP does not fit" in fl.memory_sentence(some, 64, 8192)
    assert fl.boundaries_sentence(bounds, 64, 256, 262144) == (
        "At batch 64, TP is best up to 1,771 tokens, then DPA up to 66,896 tokens, then DOP up to 83,184 tokens, and "
        "beyond that nothing fits.")
    assert "does not change" in fl.boundaries_sentence(bounds.iloc[:0], 64, 256, 512)
    # with the kernel-parameter band: the crossover gets its P10-P90; one the draws cannot place is not a number
    banded = bounds.assign(context_lo=bounds["context"], context_hi=bounds["context"], present=1.0, resolved=True)
    cx = banded["kind"] == "crossover"
    banded.loc[cx, ["context_lo", "context_hi"]] = [1185.0, 2570.0]
    assert fl.boundaries_sentence(banded, 64, 256, 262144).startswith(
        "At batch 64, TP is best up to 1,771 tokens [1,185-2,570], then DPA up to 66,896 tokens")
    banded.loc[cx, "resolved"] = False
    text = fl.boundaries_sentence(banded, 64, 256, 262144)
    assert "TP is best up to a crossover not resolved by the model" in text and "1,771" not in text
    assert "not resolved by the model" in fl.best_layout_sentence(table.assign(feasible=True), banded, batch=64,
                                                                  context=8192)
    assert "B·s* = 149,276 context tokens per step (2,332 tokens per sequence at batch 64)" in (
        fl.closed_form_sentence(dep, 171_966_464 / 1152, bounds, 64))
    gqa = Deployment.build("llama-3-70b", "h100-sxm", 8)
    assert fl.closed_form_sentence(gqa, None, bounds, 64) == (
        "The closed form applies to MLA models only; Llama-3-70B uses GQA.")
    assert "DeepSeek-V3 (MLA, 671B parameters) on 8 × H200" in fl.deployment_sentence(dep)
    assert "85.1 GB of weights per rank under TP and DOP" in fl.deployment_sentence(dep)


def test_phase_and_transition_sentences(dsv3):
    dep, _, _ = dsv3
    phase = {"batch": np.array([1, 2]), "context": np.array([256, 512]),
             "best": np.array([["TP", "TP"], ["DOP", "none"]], dtype=object)}
    assert fl.phase_sentence(phase) == (
        "Over batches 1–2 and contexts 256–512 tokens, TP is the best layout on 50% of the grid (DOP 25%); "
        "nothing fits on 25%.")
    assert fl.phase_sentence(phase, short=True, subject="X") == "X: TP is the best layout on 50% of the batch × context grid"
    tr = sl.transition_table(dep, 64, 8192)
    assert fl.transition_sentence(tr, short=True) == "Switching into TP costs up to 52.7 ms of exposed handoff"
    assert fl.transition_sentence(tr).startswith("Switching into TP is the expensive direction: 52.7 ms of exposed "
                                                 "handoff from CP, DPA and DOP (KV all-gather)")


@pytest.mark.parametrize("aware, text", [(90.0, "10.0% faster than the best static layout (DOP, 100 s)"),
                                         (100.02, "level with the best static layout"),
                                         (103.0, "3.0% slower than the best static layout")])
def test_policy_sentence(aware, text):
    policies = pd.DataFrame({"policy": ["aware", "myopic", "DOP", "TP"], "total_s": [aware, 95.0, 100.0, 200.0],
                             "switches": [2, 9, 0, 0], "capped_segments": [0, 0, 0, 3]})
    sentence = fl.policy_sentence(policies)
    assert text in sentence and "with 2 switches" in sentence and "(95.0 s, 9 switches)" in sentence
    assert len(fl.policy_sentence(policies, short=True)) <= TITLE_CHARS
    assert fl.schedule_title({"switches": 3, "capped_segments": 1}, "myopic") == (
        "The myopic schedule switched layout 3 times, capped the batch in 1 segment")


@pytest.fixture(scope="module")
def pd_default():
    s = sd.setup("llama-3-70b", "h100-sxm", rate_per_s=36, ttft_slo_ms=1000, tpot_slo_ms=40)
    return s, sd.point_summary(s, link="roce-400g"), sd.link_comparison(s)


def test_pd_sentences(pd_default):
    s, point, comparison = pd_default
    assert fd.request_sentence(point, s).startswith("One 4,096-token prompt takes 162 ms to prefill on TP8")
    assert "1.34 GB" in fd.request_sentence(point, s)
    assert fd.comparison_sentence(comparison, s, link="roce-400g") == (
        "At 36 req/s with TTFT p99 ≤ 1,000 ms and TPOT p99 ≤ 40 ms, the fewest GPUs are 72 (disaggregated, "
        "pipelined over roce-400g), against 160 GPUs colocated; disaggregated, serial over tcp-100g "
        "(1 NIC/instance) needs 160 GPUs.")
    none = comparison.assign(gpus=np.inf)
    assert fd.comparison_sentence(none, s).startswith("Nothing meets TTFT p99 ≤ 1000 ms")
    table = fd.point_table(point)
    assert list(table.columns) == ["quantity", "value"] and not table["quantity"].str.contains(r"\.|_").any()
    assert "7 prefill + 2 decode (72 GPUs)" in table["value"].tolist()
    for short in (fd.transfer_sentence(point, "roce-400g", short=True),
                  fd.comparison_sentence(comparison, s, link="roce-400g", short=True)):
        assert len(short) <= TITLE_CHARS


def test_pd_threshold_sentences():
    one = {"disaggregated, serial": 11.68, "disaggregated, pipelined": 10.02}
    assert fd.breakeven_sentence(one, {"disaggregated, serial": 1.37}) == (
        "With one NIC per instance, disaggregation stops paying below 11.7 GB/s (10.0 GB/s pipelined), and "
        "100 GbE TCP (9 GB/s achievable) is below it; with a NIC per GPU it pays from 1.37 GB/s.")
    assert "never" in fd.breakeven_sentence({"disaggregated, serial": np.nan, "disaggregated, pipelined": np.nan})
    lat = pd.DataFrame({"rate_per_s": [10, 20, 30] * 2, "mode": ["disaggregated 7P+2D"] * 3 + ["colocated 9"] * 3,
                        "ttft_ms": [200, 300, 2000, 900, 1200, 5000], "tpot_ms": [20] * 6})
    s = sd.setup()
    assert fd.latency_sentence(lat, s) == ("With equal GPU budgets, disaggregated 7P+2D meets both p99 targets up "
                                           "to 20.0 req/s; colocated 9 up to 10.0 req/s.")
    spread = pd.DataFrame({"prompt_sigma": [0.0, 1.0], "gpus": [72.0, np.inf]})
    assert fd.spread_sentence(spread).endswith("72 GPUs at σ = 0, no pool that meets the SLOs at σ = 1.")
    check = pd.DataFrame({"model": ["M/D/1 exact", "M/D/c Allen-Cunneen"], "error_pct": [-0.8, 5.2],
                          "requests": [4_000_000] * 2})
    assert fd.queue_sentence(check) == ("Over 4,000,000 simulated requests per point, the exact M/D/1 formulas stay "
                                        "within 0.8% of the simulation, and the Allen-Cunneen pool approximation "
                                        "within 5.2%.")
    grid = {"n": np.array([1, 2]), "rate": np.array([[1.0, 2.0], [3.0, 8.0]]),
            "gpus": np.array([[16, 24], [24, 32]]), "rate_per_gpu": np.array([[1 / 16, 2 / 24], [3 / 24, 0.25]])}
    # the best cell is on the grid's edge: the sentence says so, with the gain over the inner half (issue 20 §1.5)
    assert fd.goodput_sentence(grid, s, short=True) == ("Most efficient: 2 prefill + 2 decode instances, 0.250 req/s "
                                                        "per GPU (grid edge: +300% over pools of at most 1)")
    assert "on the edge of the grid (up to 2 instances of each)" in fd.goodput_sentence(grid, s)
    modes = [{"mode": "colocated", "gpus": 160.0}, {"mode": "disaggregated, serial", "gpus": 72.0},
             {"mode": "disaggregated, pipelined", "gpus": 72.0}]
    assert fd.modes_title(modes, "roce-400g", "disaggregated, pipelined") == (
        "Fewest GPUs over roce-400g: 72 GPUs, disaggregated, pipelined — colocated: 160 GPUs; disaggregated, serial: "
        "72 GPUs")
    assert fd.modes_title([{"mode": "colocated", "gpus": np.inf}], "tcp-100g") == (
        "No serving mode meets the SLOs at the target rate over tcp-100g")
    inner = {"n": np.array([1, 2, 3]), "rate": np.ones((3, 3)), "gpus": np.full((3, 3), 8),
             "rate_per_gpu": np.array([[0.1, 0.1, 0.1], [0.1, 0.3, 0.1], [0.1, 0.1, 0.1]])}
    assert fd.goodput_sentence(inner, s, short=True) == ("Most efficient: 2 prefill + 2 decode instances, 0.300 req/s "
                                                         "per GPU")
    by = pd.DataFrame({"prompt_tokens": [512, 4096, 512], "mode": ["disaggregated over roce-400g"] * 2 + ["colocated"],
                       "pd_gpu_ratio": [1.0, 3.5, np.nan]})
    assert fd.ratio_title(by, "prompt_tokens") == "P:D GPU ratio over roce-400g: 1.00 at 512 tokens, 3.50 at 4,096 tokens"


@pytest.fixture(scope="module")
def moe_default():
    scenario = sm.scenario_table("deepseek-v3", "h200", 16, batch=(256,), redundant=(32,))
    return scenario


def test_moe_sentences(moe_default):
    text = fm.scenario_sentence(moe_default, 256)
    # the kernel curves price DPA's replicated attention projections at 16 sequences per rank higher than the scalar
    # efficiencies did (7.25 vs 4.82 ms per step), so TP2xEP8 with EPLB (29.03 ms) edges out DPA+EP16 (29.65 ms);
    # issue 18 §2 moved both (the routed GEMMs priced by the engine's grouped-GEMM curve: 28.14 and 28.42 before)
    assert text.startswith("At batch 256 the fastest configuration is TP2xEP8 with EPLB, at 29.0 ms per step, "
                           "against 39.1 ms for pure TP16")
    assert len(fm.scenario_sentence(moe_default, 256, short=True)) <= TITLE_CHARS
    assert fm.scenario_sentence(moe_default.assign(feasible=False), 256) == "Nothing fits at batch 256."
    assert fm.pretty_label("TP2xEP8 +32 EPLB") == "TP2xEP8 with EPLB and 32 redundant experts"
    assert fm.pretty_label("TP2xEP8 static") == "TP2xEP8 (static placement)"
    assert sm.batch_axis([16, 64, 256], 100) == [16, 64, 100, 256] and sm.batch_axis([64], 64) == [64]


def test_moe_skew_load_comm_sentences():
    def by_skew(layout, red_ms):
        return pd.DataFrame({"skew": [2.6, 2.6], "placement": ["static placement", "EPLB + 32 redundant"],
                             "layout": [f"{layout} static", f"{layout} +32 EPLB"], "step_ms": [10.0, red_ms]})

    small, large = by_skew("TP2xEP8", 10.5), by_skew("DPA+EP16", 9.9)
    assert fm.redundancy_sentence(small, large, 2.6, 256, 4096) == (
        "At skew 2.6, 32 redundant experts make the step 5.0% slower on TP2xEP8 at batch 256 and 1.0% faster on "
        "DPA+EP16 at batch 4,096: they pay only at the large batch.")
    assert fm.skew_title(small, 2.6, 256) == "TP2xEP8 at batch 256: redundant experts make the step 5.0% slower at skew 2.6"
    loads = pd.DataFrame({"placement": ["static", "static", "TP2xEP8 +32 EPLB", "TP2xEP8 +32 EPLB"],
                          "relative_load": [1.06, 0.94, 1.002, 0.998]})
    assert fm.load_sentence(loads) == ("The busiest EP rank carries 1.060× the mean load with the static placement "
                                       "and 1.002× with TP2xEP8, EPLB and 32 redundant experts.")
    by_batch = pd.DataFrame({"batch": [256] * 3, "layout": ["TP16", "TP2xEP8", "DPA+EP16"],
                             "dispatch_layer_us": [0.0, 50.0, 40.0], "combine_layer_us": [0.0, 52.4, 51.9]})
    assert fm.comm_sentence(by_batch, 256) == ("At batch 256, dispatch and combine cost 91.9 µs per MoE layer on "
                                               "DPA+EP16 and 102 µs on TP2xEP8; TP16 has no all-to-all.")
    mc = pd.DataFrame({"tokens": [64, 1024], "error_pct": [-0.01, 0.19]})
    assert fm.max_load_sentence(mc, 200) == ("The analytic expected busiest-rank load is within 0.19% of 200 Monte "
                                             "Carlo routings for 64–1,024 tokens.")


def test_sentence_numbers_read_well():
    assert [findings.num(x) for x in (171.6, 23.03, 8.071, 0.07361, 1186.3, 0)] == ["172", "23.0", "8.07", "0.0736",
                                                                              "1,186", "0"]
    assert findings.num(float("inf")) == "∞"


@pytest.fixture(scope="module")
def kv_default():
    from llmexplore.sweeps import transfer as st

    s = st.setup("llama-3-70b", prefill_tp=8, decode_tp=4)
    return s, st.plan_summary(s)


def test_transfer_plan_sentence(kv_default):
    from llmexplore.findings import transfer as ft

    s, summary = kv_default
    assert ft.plan_sentence(summary, s) == (
        "Prefill TP8 → decode TP4 of Llama-3-70B: each decode rank gathers from 2 prefill ranks; a 4,096-token "
        "request moves 1,342 MB, the busiest NIC (decode 0) carries 336 MB, 7.80 ms serial over RoCE 400G, 0.122 ms "
        "exposed when pipelined layer by layer.")
    assert ft.plan_sentence(summary, s, short=True) == "TP8 → TP4: 2 sources per decode rank, 1,342 MB per 4,096-token request"
    table = ft.summary_table(summary)
    assert list(table.columns) == ["quantity", "value"] and not table["quantity"].str.contains("_").any()
    assert "every decode byte matches (65,536 B checked)" in table["value"].tolist()
    nan = {**summary, "pipelined_ms": float("nan"), "prefill_ms": float("nan"), "roundtrip_ok": False}
    assert "exposed" not in ft.plan_sentence(nan, s) and "round-trip check FAILED" in ft.plan_sentence(nan, s)
    assert "n/a (no prefill model at this TP)" in ft.summary_table(nan)["value"].tolist()


def test_transfer_sentences_name_idle_ranks_replicas_and_refusals():
    from llmexplore.findings import transfer as ft
    from llmexplore.sweeps import transfer as st

    wide = st.setup(prefill_tp=16, decode_tp=8)
    ranks = st.prefill_rank_table(wide)
    assert ft.fanout_sentence(ranks) == (
        "8 of the 16 prefill ranks of the source group send nothing (another rank holds the same KV and sends it); "
        "each of the others serves 1 decode rank and sends 168 MB per request, in 160 RDMA writes.")
    assert ft.fanout_sentence(ranks, short=True) == "8 of 16 prefill ranks idle; the others serve 1 decode rank, sending 168 MB"
    replicas = st.setup(prefill_tp=8, decode_tp=16)
    assert ft.plan_sentence(st.plan_summary(replicas, check=False), replicas).endswith(
        "Decode ranks holding a second copy of a KV head receive nothing, leaving 1,342 MB to copy on the decode side.")
    matrix = st.byte_matrix(replicas)
    assert ft.matrix_sentence(matrix).endswith(
        "; 8 decode ranks receive nothing (other DP groups, or replicas the plan does not feed).")
    pairs = st.layout_pairs("llama-3-70b", [(8, 1), (8, 8), (6, 4)])
    text = ft.pairs_sentence(pairs)
    assert text.startswith("Over RoCE 400G, a 4,096-token request takes from 3.91 ms serial (TP8 → TP8) to 31.1 ms "
                           "(TP8 → TP1)")
    assert text.endswith("The planner refuses TP6 → TP4: prefill_tp (6) must divide or be a multiple of the KV "
                         "heads of llama-3-70b (8).")
    assert ft.pairs_sentence(pairs.iloc[2:]).startswith("The planner refuses every pair: prefill_tp (6)")
    default = st.layout_pairs("llama-3-70b")
    assert "TP8 → TP16 and TP8 → TP32 leave 1,342–4,027 MB to copy on the decode side" in ft.pairs_sentence(default)
    frags = st.fragment_table(st.setup())
    assert ft.fragment_sentence(frags, st.plan_summary(st.setup())) == (
        "One layer of a request moves as 16 fragments (4 per decode rank) of 4,096 B per page; every layer repeats "
        "them, 1,280 RDMA writes per request in all. Applied to synthetic pages, the plan rebuilds every decode page "
        "byte for byte (65,536 B checked).")
    prompts = st.time_vs_prompt(st.setup(), [1024, 4096])
    assert ft.prompt_sentence(prompts).startswith("From 1,024 to 4,096 tokens the serial transfer grows from 2.21 ms "
                                                  "to 7.80 ms")
    for short in (ft.matrix_sentence(matrix, short=True), ft.pairs_sentence(default, short=True),
                  ft.prompt_sentence(prompts, short=True), ft.fanout_sentence(ranks, short=True)):
        assert len(short) <= TITLE_CHARS, short
    assert ft.matrix_sentence(st.byte_matrix(st.setup()), short=True) == (
        "8 of 32 rank pairs carry KV: each decode rank gets 336 MB from 2 prefill ranks")


# --------------------------------------------------------------------------------------------------
# KV offload


@pytest.fixture(scope="module")
def off_default():
    from llmexplore.sweeps import offload as so

    s = so.setup("llama-3-70b", "h100-sxm", storage="nvme-gen4", tp=8)
    return s, so.break_even_table(s)


def test_offload_break_even_sentence_names_the_term_that_sets_it(off_default):
    from llmexplore.findings import offload as fo
    from llmexplore.sweeps import offload as so

    s, table = off_default
    assert fo.break_even_sentence(table, s) == (
        "Llama-3-70B on 8x H100 SXM 80GB: loading a cached prefix from NVMe SSD, PCIe Gen4 x4 pays only from 40,192 "
        "tokens — per token the drive (46.9 µs) is slower than recomputing (35.6 µs), so the quadratic attention term "
        "sets the break-even; from Host DRAM over PCIe Gen4 x16, Host DRAM over PCIe Gen5 x16 and NVMe SSD, PCIe Gen5 "
        "x4 it pays from one block; from NFS over 25 GbE it pays from 338,432 tokens.")
    assert fo.break_even_sentence(table, s, short=True) == (
        "Llama-3-70B: loading pays from (tokens) DRAM Gen4 256, DRAM Gen5 256, NVMe Gen4 40,192, NVMe Gen5 256, "
        "NFS 338,432")
    fast = so.setup(storage="nvme-gen5")
    text = fo.break_even_sentence(so.break_even_table(fast), fast)
    assert "from NVMe SSD, PCIe Gen5 x4 pays from 256 tokens (one block) — per token the drive (23.5 µs) is faster" in text
    assert "fixed latency (0.270 ms)" in text
    point = so.point_summary(s, 32768, queue_wait_ms=20)
    table2 = fo.summary_table(point, s)
    # a 32,768-token prefix is now below the 40,192-token break-even: the gate recomputes it (it loaded it below
    # the scalar model's 28,416)
    assert list(table2.columns) == ["quantity", "value"] and "recompute" in table2["value"].tolist()
    assert "40,192 tokens, set by the bandwidth" in table2["value"].tolist()
    assert fo.tokens(float("inf")) == "never (up to 2,097,152 tokens)" and fo.tokens(256, one_block=256) == \
        "256 tokens (one block)"


def test_offload_regime_precision_and_map_sentences(off_default):
    import numpy as np

    from llmexplore.findings import offload as fo
    from llmexplore.sweeps import offload as so

    s, _ = off_default
    grid = so.regime_grid(s, so.grid_with(256, 1 << 20, 120, 32768, log=True).round(),
                          so.grid_with(0.25, 200, 120, 7.0, log=True))
    text = fo.regime_sentence(grid, s, prefix_tokens=32768)
    assert text.startswith("With the latency and per-block costs of NVMe SSD, PCIe Gen4 x4, loading a 256-token prefix "
                           "needs a read bandwidth of at least ")
    assert "a 32,768-token prefix" in text and "At its own 7.00 GB/s, NVMe SSD, PCIe Gen4 x4 loses" in text
    # where it loses on the map: below its break-even (grid prefixes are not block multiples: within a block)
    lost = float(text.split("loses for every prefix of the map up to ")[1].split(" tokens")[0].replace(",", ""))
    after = grid["prefix_tokens"][grid["prefix_tokens"] > lost].min()  # the map's next prefix: loading wins there
    be = float(off_default[1].set_index("tier").loc["nvme-gen4", "break_even_tokens"])  # 40,192
    assert lost < be <= np.floor(after / 256) * 256
    prec = so.precision_table(s)
    assert fo.precision_sentence(prec, s).startswith(
        "FP8 KV halves the bytes per token: loading from NVMe SSD, PCIe Gen4 x4 drops from 46.9 µs to 23.5 µs per "
        "token and pays from 256 tokens (one block); FP8 weights instead make recompute cheaper (35.6 µs → 26.4 µs "
        "per token) and move the break-even from 40,192 tokens to 72,192 tokens")
    assert fo.precision_sentence(prec, s, short=True) == (
        "NVMe Gen4 break-even (tokens): as set 40,192, FP8 KV 256, FP8 weights 72,192, FP8 weights and KV 256")
    pivot = fo.precision_pivot(prec)
    assert pivot["precision"].tolist()[0] == "as set: weights bf16, KV bf16" and pivot.shape == (4, 6)
    bmap = so.break_even_map(s, np.geomspace(0.5, 100, 60), np.geomspace(1, 1e4, 40))
    text = fo.map_sentence(bmap, s)
    assert text.startswith("Above ") and "so its latency sets the break-even: one block of 256 tokens" in text
    assert text.endswith("NVMe SSD, PCIe Gen4 x4 reads at 7.00 GB/s (below the boundary).")


def test_offload_preload_staging_hit_ratio_and_measured_sentences(off_default):
    import numpy as np
    import pandas as pd

    from llmexplore.findings import offload as fo
    from llmexplore.sweeps import offload as so

    s, _ = off_default
    point = so.point_summary(s, 32768, queue_wait_ms=20)
    queue = so.pool_queue(s, 1.0, prompt_tokens=32768, hit_ratio=0.563, ttft_slo_ms=3000)
    curve = so.preload_curve(s, 32768, so.grid_with(0, 1000, 101, 20, queue["mean_wait_ms"]))
    text = fo.preload_sentence(curve, queue, point, s)
    assert text.startswith("A request whose 32,768-token prefix waits 437 ms on average (M/D/1 at 0.250 req/s per "
                           "instance of the pool sized for the TTFT SLO; 1,431 ms at p90)")
    assert text.endswith("the break-even falls from 40,192 tokens to 256 tokens (one block) once the wait reaches "
                         "120 ms.")
    dram = so.setup(storage="dram-pcie4")
    assert "nothing to stage" in fo.preload_sentence(so.preload_curve(dram, 32768, [0, 100]), queue,
                                                     so.point_summary(dram, 32768), dram)
    replay = so.staging_replay(s, requests=40, rate_per_s=0.5, budget_GB=12.0)
    text = fo.staging_sentence(replay)
    assert text.startswith("Replaying 40 requests") and "12.0 GB staging budget" in text
    assert "never above the budget" in text
    hs = so.grid_with(0, 1, 11, 0.563)
    gpus = so.gpus_vs_hit_ratio(s, hs, rate_per_s=1.0, prompt_tokens=32768, ttft_slo_ms=3000)
    saved = so.saved_by_tier(s, hs, prompt_tokens=32768)
    text = fo.hit_ratio_sentence(gpus, saved, s, hit_ratio=0.563, rate_per_s=1.0, prompt_tokens=32768)
    assert text.startswith("At a hit ratio of 56.3% of 32,768-token prompts, 18,432 tokens of each prompt are cached, "
                           "below the break-even of NVMe SSD, PCIe Gen4 x4: the gate recomputes them")
    assert "5.78 GPU-s per request from Host DRAM over PCIe Gen4 x16" in text and "6.04 GB of storage" in text
    assert fo.hit_ratio_sentence(gpus, saved, s, hit_ratio=0.563, rate_per_s=1.0, prompt_tokens=32768,
                                 short=True) == "56.3% hit ratio on NVMe Gen4: 32 GPUs vs 32, 0 GPU-s saved per request"
    assert fo.measured_sentence(None) == fo.NO_MEASUREMENT
    m = pd.DataFrame({"modelled_ms": [1.0, 2.0, 4.0], "measured_ms": [1.1, 2.2, 4.4]})
    assert fo.measured_sentence(m, tier_label="NVMe Gen4").startswith(
        "Over 3 loads read from this machine's disk, the measured time is 1.10 × the time modelled for the preset tier "
        "NVMe Gen4")
    assert np.isclose(fo.DEEPSEEK_DISK_HIT_RATIO, 0.563)

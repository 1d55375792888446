"""MoE routing skew, per-rank load, dispatch/combine and decode step time (models.moe.decode, docs/models.md §4.8).

Formulas are recomputed by hand here; the analytic expected maximum is checked against Monte Carlo with the
tolerances measured while building the model (see each test); monotonicity is tested where it holds and the
regimes where it does not are pinned with the mechanism that breaks it.
"""

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special, stats

from llmexplore import presets, sweeps
from llmexplore.errors import SpecError
from llmexplore.models.step import decode as att
from llmexplore.models.step import engine
from llmexplore.models.moe import eplb
from llmexplore.models.moe import alltoall
from llmexplore.models.moe import decode as moe
from llmexplore.models.moe import routing
from llmexplore.models.step import stats as lstats
from llmexplore.models.step.collectives import allreduce_s, alltoall_s
from llmexplore.models.step.stats import expected_max_std_normal

E, K = 256, 8  # DeepSeek-V3 routed experts and top-k
DSV3 = presets.model("deepseek-v3")
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True)


def build(tp, ep, redundant=0, balance=None, gpu="h200", runtime="scalar", **kw):
    """The hand calculations below are of the scalar roofline (one efficiency per kernel class): runtime
    ``scalar``; the kernel curves are tested in test_kernels.py."""
    return moe.MoEDeployment.build("deepseek-v3", gpu, tp * ep, tp=tp, ep=ep, redundant=redundant,
                                   balance=balance, runtime=runtime, **kw)


# ---- routing load ------------------------------------------------------------------------------------------

def test_zipf_probs_by_hand():
    p = routing.zipf_probs(0.0, 8, 2)
    assert p.tolist() == pytest.approx([1 / 8] * 8)
    p = routing.zipf_probs(1.0, 4, 1)  # uncapped: 1, 1/2, 1/3, 1/4 normalised by H_4 = 25/12
    assert p.tolist() == pytest.approx([12 / 25, 6 / 25, 4 / 25, 3 / 25])
    # capped: E = 4, k = 2, gamma = 3 -> weights 1, 1/8, 1/27, 1/64; share 0.80 > 1/k = 0.5 is capped and
    # the other 0.5 is split in proportion 1/8 : 1/27 : 1/64
    p = routing.zipf_probs(3.0, 4, 2)
    rest = np.array([1 / 8, 1 / 27, 1 / 64])
    assert p.tolist() == pytest.approx([0.5, *(0.5 * rest / rest.sum())], rel=1e-12)
    assert p.sum() == pytest.approx(1.0)


def test_zipf_cap_cascades():
    # the cap can push a second expert over 1/k: raw Zipf(2) shares of 16 experts are 0.631, 0.158, ...; after
    # capping the first at 1/4 the second gets 0.158 * 0.75 / 0.369 = 0.32 > 1/4 and is capped in turn
    p = routing.zipf_probs(2.0, 16, 4)
    assert p.max() <= 0.25 + 1e-15 and p.sum() == pytest.approx(1.0)
    capped = np.isclose(p, 0.25)
    assert capped.sum() >= 2
    free = p[~capped]
    ranks = np.flatnonzero(~capped) + 1.0
    assert (free / free[0]).tolist() == pytest.approx(((ranks / ranks[0]) ** -2.0).tolist())  # still Zipf


def test_skew_round_trip_dsv3():
    skews = np.array([1.0, 1.5, 2.6, 5.0, 10.0, 31.0, 32.0])
    g = routing.zipf_gamma_for_skew(skews, E, K)
    assert g[0] == 0.0
    assert routing.zipf_skew(g, E, K).tolist() == pytest.approx(skews.tolist(), rel=1e-10)
    assert routing.expert_skew(routing.zipf_probs(g, E, K)).tolist() == pytest.approx(skews.tolist(), rel=1e-10)
    # skew 2.6 <=> E / sum_i i^-gamma = 2.6
    g26 = float(g[2])
    assert E / (np.arange(1, E + 1.0) ** -g26).sum() == pytest.approx(2.6, rel=1e-12)
    assert g26 == pytest.approx(0.2148, abs=1e-4)
    # skew E/k = 32: the hottest expert is in every token's top-k (p = 1/k), reached at a finite gamma
    p = routing.skew_probs(32.0, E, K)
    assert p[0] == pytest.approx(1 / K) and 0.89 < g[-1] < 0.91


@pytest.mark.parametrize("skew, match", [
    (0.5, r"skew \(max/mean expert load\) must be >= 1, got 0.5"),
    (np.nan, r"must be >= 1, got nan"),
    (33.0, r"must be <= E/k = 256/8 = 32 because a token picks an expert at most once"),
])
def test_bad_skew(skew, match):
    with pytest.raises(SpecError, match=match):
        routing.skew_probs(skew, E, K)


def test_histogram_probs():
    c = np.array([[10, 10, 20, 0, 0, 0, 0, 0] * 4])
    p = routing.histogram_probs(c, 8)
    assert p.sum() == pytest.approx(1.0) and p.shape == (1, 32)
    with pytest.raises(SpecError, match=r"exceeds 1/k = 0.125; top-k routing picks an expert at most once"):
        routing.histogram_probs([100, 1, 1, 1, 1, 1, 1, 1, 1], 8)
    with pytest.raises(SpecError, match="at least k = 8 experts"):
        routing.histogram_probs([1, 1, 1, 0, 0, 0, 0, 0, 0], 8)
    with pytest.raises(SpecError, match="finite and >= 0"):
        routing.histogram_probs([1, -1, 1], 1)


def test_layer_probs_permute_per_layer_with_a_fixed_seed():
    p = routing.skew_probs([1.0, 2.6], E, K)
    lp = routing.layer_probs(p, 5, seed=3)
    assert lp.shape == (2, 5, E)
    for s in range(2):
        for layer in range(5):
            assert np.sort(lp[s, layer]).tolist() == np.sort(p[s]).tolist()
    assert not np.array_equal(lp[1, 0], lp[1, 1])  # each layer its own hot experts
    assert np.array_equal(lp, routing.layer_probs(p, 5, seed=3))
    # same seed, same positions for every skew: the hottest expert id is the same along the skew axis
    assert np.argmax(lp[1, 0]) == np.argmax(routing.layer_probs(routing.skew_probs(5.0, E, K), 5, seed=3)[0])


# ---- dispatch bytes and E[d] -------------------------------------------------------------------------------

def test_bytes_per_token_dsv3():
    assert alltoall.dispatch_bytes_per_token(DSV3.hidden) == 7_392  # 7168 FP8 + 56 FP32 scales (1x128 blocks)
    assert alltoall.combine_bytes_per_token(DSV3.hidden) == 14_336  # 7168 BF16
    assert alltoall.dispatch_bytes_per_token(100) == 100 + 4  # one partial block still carries a scale


@pytest.mark.parametrize("R", [1, 2, 8, 16, 32, 256])
def test_distinct_ranks_uniform_formula(R):
    expected = R * (1 - special.comb(E - E // R, K, exact=True) / special.comb(E, K, exact=True))
    assert lstats.distinct_ranks_uniform(E, K, R) == pytest.approx(expected, rel=1e-12)
    # the CPS machinery gives exactly the hypergeometric result for uniform routing
    r = routing.rank_load(np.full(E, 1 / E), K, 100, ranks=R)
    assert float(r["distinct_ranks"]) == pytest.approx(expected, rel=1e-10)
    assert r["hit_prob"] == pytest.approx(np.full(R, expected / R), rel=1e-10)


def test_distinct_ranks_limits():
    assert lstats.distinct_ranks_uniform(E, K, 1) == pytest.approx(1.0)
    assert lstats.distinct_ranks_uniform(E, K, E) == pytest.approx(K)
    assert lstats.distinct_ranks_uniform(E, K, 8) == pytest.approx(5.2947, abs=1e-4)


# ---- per-rank load: hand formulas --------------------------------------------------------------------------

def test_rank_load_uniform_by_hand():
    N, R = 1024, 8
    r = routing.rank_load(np.full(E, 1 / E), K, N, ranks=R)
    mean = N * K / R
    sd = math.sqrt(N * (K / R) * (1 - K / E))  # independent sampling: sum over 32 experts of pi (1 - pi)
    assert r["mean_pairs"] == pytest.approx(np.full(R, mean))
    assert r["sd_pairs"] == pytest.approx(np.full(R, sd))
    assert float(r["max_pairs"]) == pytest.approx(mean + sd * expected_max_std_normal(R), rel=1e-7)
    assert float(r["straggler"]) == pytest.approx(1 + sd * expected_max_std_normal(R) / mean, rel=1e-7)
    assert r["active_slots"] == pytest.approx(np.full(R, E / R * (1 - (1 - K / E) ** N)))  # docs/models.md §4.4


def test_two_ranks_exact_and_why_the_independent_variance():
    """R = 2: max = Nk/2 + |X_1 - Nk/2|, computed exactly by convolving per-token hypergeometric counts.

    The analytic model uses the variance of independent sampling (sd_ind^2 = N (k/2)(1 - k/E)) with z_2; the
    marginal sd of docs/models.md §4.8 (sqrt(N k (1/R)(1 - 1/R))) with z_R would understate the excess over the mean
    by a factor sqrt(1/(2 (1 - k/E))) = 0.72.
    """
    N, R = 256, 2
    y = stats.hypergeom(E, E // 2, K).pmf(np.arange(K + 1))  # picks of one token on rank 0
    pmf = np.array([1.0])
    for _ in range(N):
        pmf = np.convolve(pmf, y)
    x = np.arange(pmf.size)
    exact = (pmf * np.maximum(x, N * K - x)).sum()
    r = routing.rank_load(np.full(E, 1 / E), K, N, ranks=R)
    mean = N * K / 2
    assert float(r["max_pairs"]) == pytest.approx(exact, rel=2e-4)
    marginal = mean + math.sqrt(N * K * 0.5 * 0.5) * expected_max_std_normal(2)
    assert (marginal - mean) / (exact - mean) < 0.75  # 28 % short of the exact excess


def test_replicas_and_duplicates_by_hand():
    """E = 4, k = 2, uniform (pi = 1/2), two ranks of three slots: rank 0 = [0, 0, 1], rank 1 = [2, 3, 1].

    Expert 0 has both replicas on rank 0 (a = 1), expert 1 one on each rank (a = 1/2).
    Rank 0: share 1/2 + 1/4 = 3/4 picks/token; variance 1/2 * 1/2 + 1/4 * 3/4 = 7/16 (e0 merged, not 2x(1/4)).
    P(miss rank 0) = P({1,2}) / 2 + P({1,3}) / 2 + P({2,3}) = 1/12 + 1/12 + 1/6 = 1/3; P(miss rank 1) =
    P({0,1}) / 2 = 1/12.  E[d] = 2/3 + 11/12 = 19/12.
    """
    p = np.full(4, 0.25)
    phy = np.array([0, 0, 1, 2, 3, 1])
    N = 10
    r = routing.rank_load(p, 2, N, ranks=2, phy2log=phy)
    assert r["mean_pairs"].tolist() == pytest.approx([N * 0.75, N * 1.25])
    sd = [math.sqrt(N * 7 / 16), math.sqrt(N * (0.25 + 0.25 + 3 / 16))]  # rank 1: e2, e3, e1
    assert r["sd_pairs"].tolist() == pytest.approx(sd)
    assert r["hit_prob"].tolist() == pytest.approx([2 / 3, 11 / 12], rel=1e-12)
    assert float(r["distinct_ranks"]) == pytest.approx(19 / 12, rel=1e-12)
    assert r["active_slots"].tolist() == pytest.approx([3 * (1 - 0.75**N), 2 * (1 - 0.5**N) + (1 - 0.75**N)])
    mc = routing.rank_load_mc(p, 2, N, ranks=2, phy2log=phy, trials=4000, seed=2)
    assert mc["hit_prob"][0].tolist() == pytest.approx([2 / 3, 11 / 12], abs=0.01)
    assert mc["mean_pairs"][0].tolist() == pytest.approx([N * 0.75, N * 1.25], rel=0.02)


def test_expected_max_normal():
    for n in (2, 8, 16, 144):
        assert float(lstats.expected_max_normal(np.full(n, 3.0), np.full(n, 2.0))) == pytest.approx(
            3.0 + 2.0 * expected_max_std_normal(n), abs=1e-5)
    assert float(lstats.expected_max_normal([1.0, 5.0, 2.0], [0.0, 0.0, 0.0])) == 5.0
    # one rank far above the others: its own mean
    far = lstats.expected_max_normal([100.0, 10.0, 10.0], [1.0, 1.0, 1.0])
    assert float(far) == pytest.approx(100.0, abs=1e-6)
    # heterogeneous: against a fine Monte Carlo
    rng = np.random.default_rng(0)
    mu, sd = np.array([10.0, 11.0, 9.5, 10.5]), np.array([1.0, 0.5, 2.0, 1.5])
    sample = rng.normal(mu, sd, size=(400_000, 4)).max(-1).mean()
    assert float(lstats.expected_max_normal(mu, sd)) == pytest.approx(sample, abs=0.01)
    with pytest.raises(SpecError, match="sd must be finite and >= 0"):
        lstats.expected_max_normal([1.0], [-1.0])


# ---- Monte Carlo -------------------------------------------------------------------------------------------

def test_cps_sampler_has_exact_marginals():
    p = routing.skew_probs(5.0, 64, 4)
    mc = routing.rank_load_mc(p, 4, 500, ranks=64, trials=200, seed=11)  # one slot per rank: rank = expert
    freq = mc["mean_pairs"][0] / 500  # selection frequency of each expert
    se = np.sqrt(4 * p * (1 - 4 * p) / 100_000)
    assert np.all(np.abs(freq - 4 * p) < 5 * se + 1e-12)
    assert mc["pairs"].sum(-1).tolist() == [[500 * 4] * 200]  # exactly k distinct picks per token


@pytest.mark.parametrize("skew, R, redundant", [(1.0, 8, 0), (2.6, 8, 0), (2.6, 16, 0), (2.6, 8, 32),
                                                (5.0, 16, 32)])
def test_analytic_matches_monte_carlo(skew, R, redundant):
    """N = 128 tokens (128 k / R >= 64 pairs per rank), 2 layers, 400 trials.

    Measured while building (skews 1-5, R 8-32, N 128-1024, with and without EPLB replicas): E[max pairs]
    within 1.3 % (MC standard error 0.2-0.4 %), E[d] within 0.25 %, active experts within 0.15 %.
    """
    N = 128
    lp = routing.layer_probs(routing.skew_probs(skew, E, K), 2, seed=3)
    phy = None if not redundant else eplb.eplb_placement(lp, ranks=R, redundant=redundant, groups=8, nodes=2)
    an = routing.rank_load(lp, K, N, ranks=R, phy2log=phy)
    mc = routing.rank_load_mc(lp, K, N, ranks=R, phy2log=phy, trials=400, seed=7)
    assert an["max_pairs"] == pytest.approx(mc["max_pairs"], rel=0.015)
    assert np.all(np.abs(an["max_pairs"] - mc["max_pairs"]) < 0.01 * an["max_pairs"] + 4 * mc["max_pairs_se"])
    assert an["distinct_ranks"] == pytest.approx(mc["distinct_ranks"], rel=0.005)
    assert an["active_slots"].sum(-1) == pytest.approx(mc["active_slots"].sum(-1), rel=0.005)
    assert an["mean_pairs"] == pytest.approx(mc["mean_pairs"], rel=0.03)


def test_analytic_underestimates_with_few_pairs_per_rank():
    """Known limit of the normal approximation: with ~4 pairs per rank (N = 16, R = 32) the count is skewed
    to the right and the analytic E[max] is 3-8 % below Monte Carlo (measured 5-6 %)."""
    lp = routing.layer_probs(routing.skew_probs(1.0, E, K), 1, seed=0)
    an = routing.rank_load(lp, K, 16, ranks=32)
    mc = routing.rank_load_mc(lp, K, 16, ranks=32, trials=2000, seed=1)
    ratio = float(an["max_pairs"][0] / mc["max_pairs"][0])
    assert 0.92 < ratio < 0.97


def test_monte_carlo_is_reproducible():
    lp = routing.layer_probs(routing.skew_probs(2.6, E, K), 1, seed=0)
    a = routing.rank_load_mc(lp, K, 128, ranks=8, trials=200, seed=5)
    b = routing.rank_load_mc(lp, K, 128, ranks=8, trials=200, seed=5)
    assert np.array_equal(a["pairs"], b["pairs"])


# ---- placements --------------------------------------------------------------------------------------------

def test_eplb_placement_reduces_expected_imbalance():
    lp = routing.layer_probs(routing.skew_probs(2.6, E, K), 8, seed=0)
    static = routing.rank_load(lp, K, 512, ranks=8)["expected_imbalance"]
    phy = eplb.eplb_placement(lp, ranks=8, redundant=32, groups=8, nodes=2)
    assert phy.shape == (8, 288)
    after = routing.rank_load(lp, K, 512, ranks=8, phy2log=phy)["expected_imbalance"]
    assert np.all(after < static) and np.all(after < 1.01) and np.all(static > 1.02)
    with pytest.raises(SpecError, match=r"ep ranks \(7\) must divide routed experts \+ redundant"):
        eplb.eplb_placement(lp, ranks=7, redundant=32)


@SETTINGS
@given(st.floats(1.05, 20.0), st.sampled_from([(4, 1), (8, 2), (16, 2), (32, 4)]), st.integers(0, 3),
       st.integers(0, 1000))
def test_eplb_never_more_imbalanced_than_static(skew, ep_nodes, red_mult, seed):
    ep, nodes = ep_nodes
    redundant = red_mult * ep
    lp = routing.layer_probs(routing.skew_probs(skew, E, K), 3, seed=seed)
    static = routing.rank_load(lp, K, 100, ranks=ep)["expected_imbalance"]
    phy = eplb.eplb_placement(lp, ranks=ep, redundant=redundant, groups=8, nodes=nodes)
    after = routing.rank_load(lp, K, 100, ranks=ep, phy2log=phy)["expected_imbalance"]
    assert np.all(after <= static + 1e-12)


# ---- step time: hand formulas ------------------------------------------------------------------------------

def test_tp16_moe_part_by_hand():
    md = build(16, 1)
    B, s, skew = 64, 2048, 2.6
    r = moe.step_time(md, B, s, skew=skew)
    hw, rt = md.hardware, md.runtime
    ovh = rt.kernel_overhead_us * 1e-6
    H, Ie = DSV3.hidden, DSV3.moe_intermediate / 16
    peak, bw = hw.fp8_TFLOPS * 1e12 * rt.eta_compute, hw.hbm_bw_TBps * 1e12 * rt.eta_mem
    pi = K * routing.layer_probs(routing.skew_probs(skew, E, K), DSV3.moe_layers, seed=0)
    active = (1 - (1 - pi) ** B).sum(-1)  # distinct experts hit by B tokens, per layer
    pairs = B * K
    routed = np.maximum(2 * pairs * 3 * H * Ie / peak,
                        (active * 3 * H * Ie * 1 + pairs * (2 * H + 3 * Ie) * 2) / bw) + 2 * ovh
    assert float(r["routed_layer_s"]) == pytest.approx(routed.mean(), rel=1e-12)
    dep = md.attn_dep
    fixed = (engine.elementwise_s(dep, 2 * B * H * 2) + engine.gemm_s(dep, B, H, E, b_w=2)
             + engine.gemm_s(dep, B, H, 2 * Ie) + engine.gemm_s(dep, B, Ie, H))
    assert float(r["ffn_moe_s"]) == pytest.approx(58 * (fixed + routed.mean()), rel=1e-12)
    ar = allreduce_s(B * H * 2, 16, md.fabric)  # hierarchical across the two nodes
    assert float(r["comm_moe_s"]) == pytest.approx(58 * ar, rel=1e-12)
    base = att.step_time(dep, B, s, "TP")
    assert float(r["comm_moe_s"]) == pytest.approx(float(base["comm_ffn_moe_s"]), rel=1e-12)
    for part in ("attention_s", "ffn_dense_s", "head_s", "overhead_s", "comm_attn_s", "comm_head_s"):
        assert float(r[part]) == pytest.approx(float(base[part]), rel=1e-12)
    total = sum(float(r[k]) for k in ("attention_s", "ffn_dense_s", "ffn_moe_s", "head_s", "comm_s",
                                      "overhead_s"))
    assert float(r["step_s"]) == pytest.approx(total, rel=1e-12)
    assert float(r["time_straggler"]) == 1.0 and float(r["dispatch_s"]) == 0.0


def test_dpa_ep16_uniform_dispatch_is_the_hierarchical_alltoall():
    md = build(1, 16)
    B = 16 * 128  # 128 tokens per GPU
    r = moe.step_time(md, B, 2048, skew=1.0)
    u = lstats.distinct_ranks_uniform(E, K, 16) / 16  # P(token hits a given rank)
    send = 128 * 16 * u  # per-rank send buffer in tokens, all chunks incl. self (uniform)
    a2a = lambda n: float(alltoall_s(n, 16, md.fabric))  # noqa: E731
    assert float(r["dispatch_layer_s"]) == pytest.approx(a2a(send * 7392), rel=1e-12)
    assert float(r["combine_layer_s"]) == pytest.approx(a2a(send * 14336), rel=1e-12)
    assert float(r["distinct_ranks"]) == pytest.approx(16 * u, rel=1e-10)
    assert float(r["allreduce_moe_s"]) == 0.0  # tp = 1
    assert float(r["mean_pairs"]) == B * K / 16


def test_tp2_ep8_uniform_dispatch_by_hand():
    """Each EP rank is a TP pair: 4 pairs per node, GPU i talks to GPU i of the other pairs (3 intra-node,
    4 inter-node peers); every GPU sends the group's N_loc tokens."""
    md = build(2, 8)
    B = 8 * 64
    r = moe.step_time(md, B, 2048, skew=1.0)
    u = lstats.distinct_ranks_uniform(E, K, 8) / 8
    nvl, ib = presets.link("nvlink4"), presets.link("ib-ndr400")
    alpha = (nvl.latency_us + 3 * nvl.latency_per_rank_us + ib.latency_us + ib.latency_per_rank_us) * 1e-6
    bw = max(3 * u / (nvl.achievable_GBps * 1e9), 4 * u / (ib.achievable_GBps * 1e9))
    assert float(r["dispatch_layer_s"]) == pytest.approx(alpha + 64 * 7392 * bw, rel=1e-12)
    assert float(r["combine_layer_s"]) == pytest.approx(alpha + 64 * 14336 * bw, rel=1e-12)
    assert float(r["allreduce_moe_s"]) == pytest.approx(58 * float(allreduce_s(64 * 7168 * 2, 2, md.fabric)))
    # the non-MoE part is a TP2 deployment serving its 64 sequences
    base = att.step_time(md.attn_dep, 64, 2048, "TP")
    assert float(r["attention_s"]) == pytest.approx(float(base["attention_s"]), rel=1e-12)


def test_per_expert_dispatch_sends_every_pick():
    """dispatch="expert" (DeepEP low-latency): one copy per pick. With measured low-latency kernel curves (DPA + EP
    on H100/H200/B200/GB200, tests/unit/models/step/test_deepep_ll.py) a + N_loc k bytes / B; without them (MI300X) an
    all-to-all of k/R messages per token per rank at the links' latency and bandwidth. Either sends more than the
    per-rank dispatch of the normal kernels."""
    from llmexplore.models.step.collectives import deepep_ll_params

    md = build(1, 16, dispatch="expert")
    r = moe.step_time(md, 16 * 128, 2048, skew=1.0)
    a, B = deepep_ll_params(md.hardware.name, "dispatch", 16, md.fabric)
    assert float(r["dispatch_layer_s"]) == pytest.approx(a + 128 * K * 7408 / B, rel=1e-12)
    dedup = moe.step_time(build(1, 16), 16 * 128, 2048, skew=1.0)
    assert float(r["dispatch_layer_s"]) > float(dedup["dispatch_layer_s"])
    amd = moe.MoEDeployment.build("deepseek-v3", "mi300x", 8, tp=1, ep=8, dispatch="expert")
    r = moe.step_time(amd, 8 * 128, 2048, skew=1.0)
    send = 128 * 8 * (K / 8)
    assert float(r["dispatch_layer_s"]) == pytest.approx(float(alltoall_s(send * 7392, 8, amd.fabric)), rel=1e-12)


def test_ep_routed_time_uniform_small_batch_by_hand():
    """Memory-bound EP rank: weights of its active experts. With equal expected loads the E[max] over ranks
    adds only the sampling spread of the activation bytes and compute (both tiny here)."""
    md = build(1, 16)
    B = 16
    r = moe.step_time(md, B, 2048, skew=1.0)
    hw, rt = md.hardware, md.runtime
    H, Ie = DSV3.hidden, DSV3.moe_intermediate
    bw = hw.hbm_bw_TBps * 1e12 * rt.eta_mem
    active = 16 * (1 - (1 - K / E) ** B)
    mean_t = (active * 3 * H * Ie + B * K / 16 * (2 * H + 3 * Ie) * 2) / bw + 2 * rt.kernel_overhead_us * 1e-6
    assert float(r["routed_mean_layer_s"]) == pytest.approx(mean_t, rel=1e-12)
    assert 1.0 <= float(r["time_straggler"]) < 1.01
    assert float(r["active_slots_max"]) == pytest.approx(active, rel=1e-12)


def test_redundant_slots_cost_weight_reads_when_memory_bound():
    """All slots active (B = 2048): a rank with 36 slots streams 36/32 of the weights of one with 32."""
    r0 = moe.step_time(build(2, 8), 2048, 2048, skew=1.0)
    r32 = moe.step_time(build(2, 8, 32), 2048, 2048, skew=1.0)
    assert float(r0["active_slots_max"]) == pytest.approx(32, rel=1e-6)
    assert float(r32["active_slots_max"]) == pytest.approx(36, rel=1e-3)
    w = float(r32["routed_mean_layer_s"]) / float(r0["routed_mean_layer_s"])
    assert 1.10 < w < 36 / 32


def test_histogram_input_matches_skew_input():
    md = build(2, 8, layers=4)
    lp = routing.layer_probs(routing.skew_probs(2.6, E, K), 4, seed=0)
    a = moe.step_time(md, 256, 2048, skew=2.6)
    b = moe.step_time(md, 256, 2048, probs=lp * 1000)  # counts: any positive scale
    for key in ("step_s", "routed_layer_s", "dispatch_layer_s", "max_pairs"):
        assert float(b[key]) == pytest.approx(float(a[key]), rel=1e-12)
    c = moe.step_time(md, 256, 2048, probs=np.ones(E))  # 1-D histogram: every layer
    assert float(c["step_s"]) == pytest.approx(float(moe.step_time(md, 256, 2048, skew=1.0)["step_s"]))


def test_scalar_equals_broadcast():
    md = build(2, 8, 32, layers=4)
    batch = np.array([8, 256, 1024])[:, None, None]
    ctx = np.array([1024, 8192])[None, :, None]
    skew = np.array([1.0, 2.6, 6.0])[None, None, :]
    grid = moe.step_time(md, batch, ctx, skew=skew)
    assert grid["step_s"].shape == (3, 2, 3)
    for i, j, k in [(0, 0, 0), (1, 1, 1), (2, 0, 2), (2, 1, 1)]:
        one = moe.step_time(md, int(batch[i, 0, 0]), int(ctx[0, j, 0]), skew=float(skew[0, 0, k]))
        for key in ("step_s", "moe_layer_s", "dispatch_s", "time_straggler", "load_straggler"):
            assert grid[key][i, j, k] == pytest.approx(float(one[key]), rel=1e-12)


def test_memory_counts_redundant_slots():
    m0 = moe.memory_per_gpu(build(2, 8), 64, 2048)
    m32 = moe.memory_per_gpu(build(2, 8, 32), 64, 2048)
    extra = 58 * 32 / 8 / 2 * DSV3.expert_params * 1  # 4 more slots per EP rank, half of each per GPU, FP8
    assert float(m32["weights_B"] - m0["weights_B"]) == pytest.approx(extra, rel=1e-12)
    tp16 = moe.memory_per_gpu(build(16, 1), 64, 2048)
    base = att.memory_per_rank(build(16, 1).attn_dep, 64, 2048, "TP")
    assert float(tp16["total_B"]) == pytest.approx(float(base["total_B"]), rel=1e-12)


# ---- monotonicity ------------------------------------------------------------------------------------------

LAYOUTS = [(16, 1, 0, None), (2, 8, 0, "none"), (2, 8, 0, "eplb"), (2, 8, 32, "eplb"), (1, 16, 0, "none"),
           (1, 16, 32, "eplb"), (4, 4, 0, "none")]


@SETTINGS
@given(st.sampled_from(LAYOUTS), st.sampled_from([1, 16, 256, 2048]), st.floats(1.0, 10.0),
       st.sampled_from(["scale_up", "scale_out"]), st.floats(1.1, 4.0))
def test_faster_link_never_slower(layout, batch, skew, which, factor):
    tp, ep, red, bal = layout
    md = build(tp, ep, red, bal, layers=4)
    link = getattr(md.fabric, which)
    fast = dataclasses.replace(link, achievable_GBps=link.achievable_GBps * factor,
                               line_rate_GBps=link.line_rate_GBps * factor)
    md_fast = dataclasses.replace(md, fabric=dataclasses.replace(md.fabric, **{which: fast}))
    a = moe.step_time(md, batch, 4096, skew=skew)
    b = moe.step_time(md_fast, batch, 4096, skew=skew)
    assert np.all(b["step_s"] <= a["step_s"] * (1 + 1e-12))
    assert np.all(b["comm_moe_s"] <= a["comm_moe_s"] * (1 + 1e-12))


@pytest.mark.parametrize("layout", [(16, 1, 0, None), (2, 8, 0, "none"), (1, 16, 0, "none"),
                                    (4, 4, 0, "none")])
def test_more_skew_never_faster_when_every_expert_is_active(layout):
    """Fixed (static or TP) placement and B >= 2048: every slot is active at any skew, so skew only adds load
    on the busiest rank (pairs, activation bytes, received tokens): step time non-decreasing in skew."""
    tp, ep, red, bal = layout
    md = build(tp, ep, red, bal)
    skew = np.linspace(1.0, 10.0, 37)
    r = moe.step_time(md, np.array([2048, 8192])[:, None], 2048, skew=skew)
    assert np.all(r["active_slots_max"] >= (E / ep if ep > 1 else E) * (1 - 1e-9))
    assert np.all(np.diff(r["step_s"], axis=-1) >= -1e-12 * r["step_s"][:, 1:])
    if ep > 1:
        assert np.all(np.diff(r["max_pairs"], axis=-1) > 0)


def test_skew_speeds_up_small_batches_by_reading_fewer_experts():
    """The exception: with few tokens, a skewed router concentrates picks on fewer distinct experts, so fewer
    weights are streamed. TP16, B = 8: E[active] = sum_e 1 - (1 - k p_e)^B falls from 57.4 to 53.4 between
    skew 1 and 10, and the step gets faster; so "more skew is never faster" does not hold at small batch."""
    md = build(16, 1)
    r = moe.step_time(md, 8, 2048, skew=np.array([1.0, 10.0]))
    p = routing.skew_probs(np.array([1.0, 10.0]), E, K)
    active = (1 - (1 - K * p) ** 8).sum(-1)
    assert active.tolist() == pytest.approx([57.42, 53.41], abs=0.01)
    assert r["step_s"][1] < r["step_s"][0]


@pytest.mark.parametrize("tp, ep", [(2, 8), (1, 16)])
def test_redundancy_not_slower_when_compute_bound(tp, ep):
    """B = 16384: the routed GEMMs are compute-bound (more than 300 pairs per expert), so the busiest rank's
    pairs, not its weights, set the time; EPLB with 32 redundant slots is then never slower than static."""
    skew = np.array([1.5, 2.6, 5.0, 10.0])
    static = moe.step_time(build(tp, ep, 0, "none"), 16384, 2048, skew=skew)
    red = moe.step_time(build(tp, ep, 32), 16384, 2048, skew=skew)
    assert np.all(red["routed_layer_s"] <= static["routed_layer_s"])
    assert np.all(red["step_s"] <= static["step_s"])
    assert np.all(red["load_straggler"] < static["load_straggler"])


def test_memo_follows_every_input():
    """Placements are memoised across calls and deployments: the key must hold everything they depend on."""
    md = build(2, 8, layers=4)
    a = moe.step_time(md, 256, 2048, skew=2.6)
    md8 = dataclasses.replace(md, layers=8)
    got8 = float(moe.step_time(md8, 256, 2048, skew=2.6)["step_s"])
    moe.clear_memo()
    assert got8 == pytest.approx(float(moe.step_time(md8, 256, 2048, skew=2.6)["step_s"]), rel=1e-12)
    for changed in (dict(redundant=16, balance="eplb"), dict(seed=1), dict(balance="eplb")):
        other = dataclasses.replace(md, **changed)
        warm = moe.step_time(other, 256, 2048, skew=2.6)
        moe.clear_memo()
        cold = moe.step_time(other, 256, 2048, skew=2.6)
        assert float(warm["step_s"]) == float(cold["step_s"])
        assert float(warm["expected_imbalance"]) != float(a["expected_imbalance"])
    slow_nvl = dataclasses.replace(md.fabric.scale_up, achievable_GBps=20.0)  # slower than the NIC leg
    md_slow = dataclasses.replace(md, fabric=dataclasses.replace(md.fabric, scale_up=slow_nvl))
    slow = moe.step_time(md_slow, 256, 2048, skew=2.6)
    assert float(slow["comm_attn_s"]) > float(a["comm_attn_s"])  # the TP2 attention AllReduce sees it too
    assert float(slow["dispatch_s"]) > float(a["dispatch_s"])
    direct = moe.MoEDeployment(model=DSV3, hardware=md.hardware, runtime=md.runtime, fabric=md.fabric,
                               gpus=16, tp=2, ep=8)
    assert direct.layers == DSV3.moe_layers
    shares, _ = moe._layer_probs_for(md, 2.6, None)  # memoised arrays cannot be corrupted by callers
    with pytest.raises(ValueError, match="read-only"):
        shares[...] = 0


def test_expected_rank_shares_before_after():
    md = build(2, 8, 32, layers=4)
    sh = moe.expected_rank_shares(md, skew=np.array([1.0, 2.6]))
    assert sh["before"].shape == sh["after"].shape == (2, 4, 8)
    assert sh["before"].sum(-1) == pytest.approx(np.ones((2, 4)))
    assert sh["after"].sum(-1) == pytest.approx(np.ones((2, 4)))
    assert sh["imbalance_before"][0] == pytest.approx(np.ones(4))  # uniform routing: balanced either way
    assert np.all(sh["imbalance_after"][1] < sh["imbalance_before"][1])
    r = moe.step_time(md, 256, 2048, skew=2.6)
    assert float(r["expected_imbalance"]) == pytest.approx(sh["imbalance_after"][1].mean(), rel=1e-12)
    with pytest.raises(SpecError, match="needs expert parallelism"):
        moe.expected_rank_shares(build(16, 1))


def test_monte_carlo_broadcasts_one_histogram_over_layer_placements():
    p = routing.skew_probs(2.6, E, K)
    lp = routing.layer_probs(p, 3, seed=1)
    phy = eplb.eplb_placement(lp, ranks=8, redundant=16, groups=8, nodes=2)
    mc = routing.rank_load_mc(lp[0], K, 64, ranks=8, phy2log=phy, trials=50, seed=0)
    assert mc["pairs"].shape == (3, 50, 8) and mc["active"].max() <= (256 + 16) // 8


# ---- validation --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kw, match", [
    (dict(gpus=16, tp=2, ep=4), r"tp \* ep must equal gpus: tp=2, ep=4, gpus=16"),
    (dict(gpus=24, tp=1, ep=24), r"ep \(24\) must divide routed experts \+ redundant \(256 \+ 0 = 256\)"),
    (dict(gpus=16, tp=16, ep=1, redundant=16), r"redundant must be 0 without expert parallelism \(ep = 1: every "
                                               r"GPU already holds a slice of every expert\), got 16"),
    (dict(gpus=16, tp=2, ep=8, redundant=8, balance="none"), r"balance must be 'eplb' with redundant > 0 \(the "
                                                             r"replicas are placed by EPLB\), got 'none'"),
    (dict(gpus=16, tp=2, ep=8, redundant=-1), r"redundant \(extra expert slots\) must be an integer in \[0, 4096\], got -1"),
    (dict(gpus=16, tp=2, ep=8, redundant=10**7), r"redundant \(extra expert slots\) must be an integer in \[0, 4096\]"),
    (dict(gpus=16, tp=2, ep=8, redundant=1e12), r"redundant \(extra expert slots\) must be an integer in \[0, 4096\]"),
    (dict(gpus=32, tp=16, ep=2), r"tp \(16\) must divide the GPUs per node \(8\) when ep > 1"),
    (dict(gpus=16, tp=2, ep=8, balance="greedy"), r"balance must be one of \['none', 'eplb'\]"),
    (dict(gpus=16, tp=2, ep=8, dispatch="bytes"), r"dispatch must be one of \['rank', 'expert'\]"),
    (dict(gpus=16, tp=2, ep=8, layers=0), r"layers must be an integer in \[1, 58\], got 0"),
    (dict(gpus=12, tp=3, ep=4), r"tp \(3\) must divide the expert intermediate size"),
])
def test_bad_deployment_raises(kw, match):
    with pytest.raises(SpecError, match=match):
        moe.MoEDeployment.build("deepseek-v3", "h200", **kw)


def test_dense_model_and_bad_sweep_inputs():
    with pytest.raises(SpecError, match="has no MoE layers"):
        moe.MoEDeployment.build("llama-3-70b", "h200", 8, tp=8, ep=1)
    md = build(2, 8, layers=2)
    with pytest.raises(SpecError, match=r"skew \(max/mean expert load\) must be a finite number >= 1, got 0.9"):
        moe.step_time(md, 64, 1024, skew=[1.0, 0.9])
    with pytest.raises(SpecError, match=r"batch must be an integer in \[1, 16,777,216\], got 0"):
        moe.step_time(md, 0, 1024)
    with pytest.raises(SpecError, match=r"probs must have shape \[E\] or \[layers, E\] with E = 256"):
        moe.step_time(md, 64, 1024, probs=np.ones(128))
    with pytest.raises(SpecError, match=r"ranks \(3\) must divide the expert slots \(256\)"):
        routing.rank_load(np.full(E, 1 / E), K, 10, ranks=3)
    with pytest.raises(SpecError, match=r"n_experts must be an integer >= 1"):
        routing.zipf_probs(0.5, 0, 1)
    with pytest.raises(SpecError, match="every logical expert at least once"):
        routing.rank_load(np.full(4, 0.25), 1, 10, ranks=2, phy2log=[0, 0, 1, 2])


# ---- scenario and speed ------------------------------------------------------------------------------------

def test_scenario_records():
    rec = sweeps.moe.scenario_table("deepseek-v3", "h200", 16, batch=[64, 512], context=2048, skew=2.6,
                                    layers=8).to_dict("records")
    layouts = [r["layout"] for r in rec if r["batch"] == 64]
    assert layouts == ["TP16", "TP2xEP8 static", "TP2xEP8 +0 EPLB", "TP2xEP8 +16 EPLB", "TP2xEP8 +32 EPLB",
                       "DPA+EP16 static", "DPA+EP16 +0 EPLB", "DPA+EP16 +16 EPLB", "DPA+EP16 +32 EPLB"]
    by = {(r["layout"], r["batch"]): r for r in rec}
    tp16, static, red = by[("TP16", 512)], by[("TP2xEP8 static", 512)], by[("TP2xEP8 +32 EPLB", 512)]
    assert tp16["dispatch_layer_us"] == 0 and static["dispatch_layer_us"] > 0
    assert red["load_max_over_mean_after"] < red["load_max_over_mean_before"]
    assert static["load_max_over_mean_after"] == static["load_max_over_mean_before"] > 1
    assert red["weights_GB"] > static["weights_GB"]
    for r in rec:
        assert r["step_ms"] > r["attention_ms"] > 0 and r["feasible"] in (True, False)


def test_few_placements_change_step_time_by_under_one_percent():
    skew = np.linspace(1.0, 10.0, 10)
    for tp, ep, red in ((2, 8, 0), (1, 16, 32)):
        full = moe.step_time(build(tp, ep, red, "none" if not red else None), 512, 2048, skew=skew)
        few = moe.step_time(build(tp, ep, red, "none" if not red else None, layers=8), 512, 2048, skew=skew)
        assert few["step_s"] == pytest.approx(full["step_s"], rel=0.01)


# ---- hostile API input -----------------------------------------------------------------------------------------
HOSTILE = ["8", {"a": 1}, 1 + 2j, 10**400, True, None, [1, "a"], np.array(["x"]), float("nan"), 0.5, 1e300, b"8",
           [], [[1], [1, 2]]]


@pytest.mark.parametrize("where", ["batch", "context", "skew", "probs"])
@pytest.mark.parametrize("value", HOSTILE, ids=repr)
def test_moe_step_time_hostile_inputs_raise_spec_error(where, value):
    if value is None and where == "probs":
        return  # None: use the skew
    md = build(2, 8, layers=2)
    kw = {"batch": 64, "context": 1024, where: value}
    with pytest.raises(SpecError) as exc:
        moe.step_time(md, kw.pop("batch"), kw.pop("context"), **kw)
    assert type(exc.value) is SpecError
    assert where in str(exc.value) or (where == "probs" and "histogram" in str(exc.value))


def test_moe_grid_is_bounded_before_allocating():
    md = build(2, 8, layers=8)
    with pytest.raises(SpecError, match=r"batch, context and skew must span at most 16,777,216 points per call, "
                                        r"got shape \(512, 1, 64\) x 2,048 per point"):
        moe.step_time(md, np.arange(1, 513)[:, None, None], 1024, skew=np.linspace(1, 4, 64))
    with pytest.raises(SpecError, match=r"skew \(max/mean expert load\) must be a finite number >= 1, got '8'"):
        moe.expected_rank_shares(md, skew="8")

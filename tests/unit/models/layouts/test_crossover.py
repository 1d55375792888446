"""Exact crossovers (models/layouts/crossover.py) against a dense numeric sweep and against the MLA closed form of
docs/models.md §3.5."""

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmexplore import presets, sweeps
from llmexplore.errors import SpecError
from llmexplore.models.step import decode as att
from llmexplore.models.layouts import crossover as cx
from llmexplore.models.step.engine import LAYOUTS, Deployment
from llmexplore.models.step.collectives import Fabric
from llmexplore.specs import Link

BATCHES = [1, 8, 32, 64, 128, 256]

DEPLOYMENTS = {
    "dsv3-h200-fp8": dict(model="deepseek-v3", gpu="h200", ranks=8, weight_dtype="fp8"),
    "dsv3-b200-fp8": dict(model="deepseek-v3", gpu="b200", ranks=8, weight_dtype="fp8"),
    "dsv3-h200-fp8-mtp": dict(model="deepseek-v3", gpu="h200", ranks=8, weight_dtype="fp8", q_tokens=2),
    "dsv3-h200-fp8-cv": dict(model="deepseek-v3", gpu="h200", ranks=8, weight_dtype="fp8", context_cv=0.4),
    "llama70-h100-tp8": dict(model="llama-3-70b", gpu="h100-sxm", ranks=8),
    "llama8-h100-tp2": dict(model="llama-3-8b", gpu="h100-sxm", ranks=2),
}


@pytest.fixture(scope="module", params=list(DEPLOYMENTS))
def dep(request):
    return Deployment.build(**DEPLOYMENTS[request.param])


def _best_label(dep, b, s):
    g = sweeps.layouts.best_layout_grid(dep, b, s)
    idx = np.asarray(g["best"])
    labels = np.array([*LAYOUTS, None], dtype=object)
    return labels[np.where(idx < 0, len(LAYOUTS), idx)]


def test_time_coefficients_reproduce_step_time(dep):
    # t(s) = c + max(af s, am0 + am1 s) must be the step time at every s (only the core depends on s)
    s = np.array([1.0, 17.0, 1000.0, 65536.0, 1e6])
    for lay in LAYOUTS:
        co = cx.layout_time_coefficients(dep, np.array(BATCHES), lay)
        t = co["c"][:, None] + np.maximum(co["af"][:, None] * s, co["am0"][:, None] + co["am1"][:, None] * s)
        ref = att.step_time(dep, np.array(BATCHES)[:, None], s[None, :], lay)["step_s"]
        np.testing.assert_allclose(t, ref, rtol=1e-12)


def test_intervals_cover_range_and_agree_with_dense_sweep(dep):
    s_lo, s_hi = 1.0, float(1 << 20)
    bounds, intervals = cx.context_boundaries(dep, BATCHES, s_lo=s_lo, s_hi=s_hi)
    grid = np.geomspace(s_lo, s_hi, 4001)
    for B in BATCHES:
        iv = intervals[B]
        assert iv[0][0] == s_lo and iv[-1][1] == s_hi
        for (a0, a1, lab_a), (b0, _, lab_b) in zip(iv[:-1], iv[1:]):
            assert a1 == b0 and a0 < a1 and lab_a != lab_b  # contiguous, merged
        edges = np.array([x[1] for x in iv[:-1]])
        # the swept best label equals the interval's label at every grid point not on an edge
        swept = _best_label(dep, B, grid)
        for s, lab in zip(grid, swept):
            if edges.size and np.min(np.abs(edges - s)) <= 1e-7 * s + 1:
                continue
            (expected,) = [x[2] for x in iv if x[0] <= s <= x[1]][:1]
            assert lab == expected, (B, s, lab, expected)
        # every flip on the grid is bracketed by a boundary
        for s0, s1, l0, l1 in zip(grid[:-1], grid[1:], swept[:-1], swept[1:]):
            if l0 != l1:
                assert np.any((edges >= s0 - 1) & (edges <= s1 + 1)), (B, s0, s1, l0, l1)


def test_boundaries_bracket_and_are_exact(dep):
    bounds, _ = cx.context_boundaries(dep, BATCHES)
    for bd in bounds:
        B, s = bd.batch, bd.context
        if bd.kind == "crossover":
            # equal step times at the exact boundary; the label flips between s(1 -+ 1e-6)
            t_before = float(att.step_time(dep, B, s, bd.before)["step_s"])
            t_after = float(att.step_time(dep, B, s, bd.after)["step_s"])
            assert t_after == pytest.approx(t_before, rel=1e-9)
            lo, hi = _best_label(dep, B, np.array([s * (1 - 1e-6), s * (1 + 1e-6)]))
            assert (lo, hi) == (bd.before, bd.after), bd
        else:
            assert bd.kind == "memory"
            # page-exact: the left layout fits at s and not one token later
            assert s == float(att.max_context(dep, B, bd.before, limit=1 << 20))
            assert bool(att.memory_per_rank(dep, B, s, bd.before)["feasible"])
            assert not bool(att.memory_per_rank(dep, B, s + 1, bd.before)["feasible"])
            assert _best_label(dep, B, np.array([s + 1]))[0] == bd.after
            assert _best_label(dep, B, np.array([s]))[0] == bd.before


def test_some_crossovers_exist():
    # guard against a vacuous sweep: DeepSeek-V3 on 8x H200 switches TP -> DOP/DPA within the grid
    d = Deployment.build(**DEPLOYMENTS["dsv3-h200-fp8"])
    bounds, _ = cx.context_boundaries(d, BATCHES)
    kinds = {b.kind for b in bounds}
    assert kinds == {"crossover", "memory"}
    assert all(b.before == "TP" for b in bounds if b.kind == "crossover")


# ---- MLA closed form (docs/models.md §3.5) ----------------------------------------------------------------------

# deepseek-ai/DeepSeek-V3 config.json
H, HQ, RQ, RKV, DN, DR, DV, L = 7168, 128, 1536, 512, 128, 64, 128, 61
W_SHARD = RQ * HQ * (DN + DR) + RKV * HQ * (DN + DV) + HQ * DV * H  # 171,966,464 (docs/models.md §2)
KV_L = (RKV + DR) * 2  # BF16 latent, 1152 B per token per layer


def test_closed_form_numbers():
    # docs/models.md §3.5: B s* = W_shard b_w / kv_l = 171,966,464 / 1152 = 149,276 (FP8 weights)
    assert W_SHARD == 171_966_464
    assert round(W_SHARD * 1 / KV_L) == 149_276  # 149,276.44
    # BF16 weights: 298,553 context tokens per step (298,552.89)
    assert round(W_SHARD * 2 / KV_L) == 298_553


def _ideal_deployment(T, weight_dtype):
    """DeepSeek-V3 where the closed form's conditions hold: no per-kernel overhead, attention memory-bound
    (eta_attn_compute = 1 puts the H100 ridge at 989.4 / (0.85 * 3.35) = 347 FLOP/B, above the DPA core's
    2 * 128 * 1088 / 1152 = 242), communication free (huge bandwidth, zero latency), memory unlimited."""
    rt = dataclasses.replace(presets.runtime("uncalibrated"), kernel_overhead_us=0.0, eta_attn_compute=1.0)
    assert rt.eta_attn_mem == rt.eta_mem  # the closed form streams weights and KV at the same efficiency
    hw = dataclasses.replace(presets.hardware("h100-sxm"), hbm_GiB=1e6)
    link = Link(name="ideal", kind="scale-up", line_rate_GBps=1e12, achievable_GBps=1e12, latency_us=0.0,
                sources={"*": "test: communication made free"})
    return Deployment(model=presets.model("deepseek-v3"), hardware=hw, ranks=T, runtime=rt,
                      fabric=Fabric(scale_up=link, gpus_per_node=1024), weight_dtype=weight_dtype)


@pytest.mark.parametrize("weight_dtype, b_w", [("fp8", 1.0), ("bf16", 2.0)])
@pytest.mark.parametrize("T", [2, 4, 8, 16])
def test_mla_tp_vs_dpa_closed_form_independent_of_T(T, weight_dtype, b_w):
    B = 64  # a multiple of T: DPA balanced, FFN sees the same B tokens in both layouts
    dep = _ideal_deployment(T, weight_dtype)
    bounds, _ = cx.context_boundaries(dep, [B], layouts=("TP", "DPA"), s_hi=float(1 << 22))
    (bd,) = bounds
    assert (bd.before, bd.after, bd.kind) == ("TP", "DPA", "crossover")
    # Derivation. With every differing kernel memory-bound and comm free,
    #   t_TP - t_DPA = L (1 - 1/T) [B s kv_l - W_shard b_w + B b_a R] / (eta_m BW)
    # where B b_a R are the activation bytes TP moves in excess of DPA per layer, (1 - 1/T) B tokens through:
    # the fused q_a/kv_a GEMM (in H, out r_q + r_kv + d_r), q_b's input (r_q), o_proj's output (H) and the
    # input RMSNorm (read + write H). The absorbed W_UK/W_UV GEMMs and the core's q/o bytes are equal in
    # both layouts (h_q/T heads x B tokens vs h_q heads x B/T tokens). Hence R = 4H + 2 r_q + r_kv + d_r and
    #   B s* = (W_shard b_w - B b_a R) / kv_l.
    # A quantised (FP8) GEMM reads its input activations in its own dtype: the GEMM inputs (H into q_a/kv_a,
    # r_q into q_b) move b_in = b_w bytes each, the outputs and the norm BF16 ones (b_a = 2).
    b_in = b_w if b_w < 2 else 2.0
    R_bytes = b_in * (H + RQ) + 2 * (3 * H + RQ + RKV + DR)
    bs_model = (W_SHARD * b_w - B * R_bytes) / KV_L
    assert B * bd.context == pytest.approx(bs_model, rel=1e-9)
    # the closed form of docs/models.md §3.5 is this without the activation residual (2.4 % / 1.2 % here)
    assert B * bd.context + B * R_bytes / KV_L == pytest.approx(W_SHARD * b_w / KV_L, rel=1e-9)
    # the conditions really hold: both layouts' attention cores are on the memory side of the roofline
    for lay in ("TP", "DPA"):
        co = cx.layout_time_coefficients(dep, B, lay)
        assert float(co["af"] * bd.context) < float(co["am0"] + co["am1"] * bd.context)


def test_closed_form_crossover_agrees_with_sweep():
    dep = _ideal_deployment(8, "fp8")
    B = 64
    (bd,), _ = cx.context_boundaries(dep, [B], layouts=("TP", "DPA"), s_hi=float(1 << 22))
    s = np.array([bd.context * 0.999, bd.context * 1.001])
    g = sweeps.layouts.best_layout_grid(dep, B, s, layouts=("TP", "DPA"))
    assert g["best"].tolist() == [0, 1]  # TP below s*, DPA above


# ---- the last partial KV page, and the range checks ----------------------------------------------------------
def test_last_partial_page_is_not_reported_as_nothing_fits():
    # regression: DeepSeek-V3 FP8 on 8x H200 at batch 64 reported [(1, 96, TP), (96, 100, None)] for s_hi = 100
    # (16-token pages): contexts 97..100 sit in the 7th page, which fits
    d = Deployment.build(**DEPLOYMENTS["dsv3-h200-fp8"])
    assert d.runtime.page_tokens == 16
    bounds, intervals = cx.context_boundaries(d, [64], s_hi=100)
    assert bounds == [] and intervals[64] == [(1.0, 100.0, "TP")]
    assert sweeps.layouts.boundaries_at(d, 64, 1, 100).empty
    for s_hi in (100.5, 1000.0, 4095.0, 4097.0):
        _, iv = cx.context_boundaries(d, [64], s_hi=s_hi)
        assert iv[64][-1][1] == s_hi and iv[64][-1][2] is not None, (s_hi, iv[64])
    assert float(att.max_context(d, 64, "TP", limit=100)) == 100.0  # capped at the limit, not rounded down


def _deps_for_property():
    return [Deployment.build(**DEPLOYMENTS[k]) for k in ("dsv3-h200-fp8", "dsv3-h200-fp8-cv", "llama70-h100-tp8",
                                                          "llama8-h100-tp2")]


_PROPERTY_DEPS = _deps_for_property()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(i=st.integers(0, len(_PROPERTY_DEPS) - 1), batch=st.integers(1, 2048), pages=st.integers(1, 1 << 14),
       extra=st.floats(0.0, 15.99), s_lo=st.floats(1.0, 64.0))
def test_property_no_none_segment_where_a_layout_fits(i, batch, pages, extra, s_lo):
    """Every segment's label is right at its midpoint: None only where no layout fits in memory there, and
    a named layout fits there. s_hi is a page count plus a partial page."""
    d = _PROPERTY_DEPS[i]
    s_hi = pages * d.runtime.page_tokens + extra
    if s_hi <= s_lo:
        s_hi = s_lo + 1.0
    _, intervals = cx.context_boundaries(d, [batch], s_lo=s_lo, s_hi=s_hi)
    iv = intervals[batch]
    assert iv[0][0] == s_lo and iv[-1][1] == s_hi
    for s0, s1, best in iv:
        mid = 0.5 * (s0 + s1)
        fits = {lay: bool(att.memory_per_rank(d, batch, mid, lay)["feasible"]) for lay in LAYOUTS}
        if best is None:
            assert not any(fits.values()), (batch, s0, s1, fits)
        else:
            assert fits[best], (batch, s0, s1, best)


@pytest.mark.parametrize("kw, message", [
    (dict(s_lo=0.0), r"s_lo must be a finite number in \[1, 1,073,741,824\] \[tokens\], got 0.0"),
    (dict(s_lo=-5), r"s_lo must be a finite number in \[1, 1,073,741,824\] \[tokens\], got -5"),
    (dict(s_lo=float("nan")), r"s_lo must be .*, got nan"),
    (dict(s_hi=float("inf")), r"s_hi must be .*, got inf"),
    (dict(s_hi=10**400), r"s_hi must be .*, got 1000"),
    (dict(s_lo="8"), r"s_lo must be .*, got '8'"),
    (dict(s_lo=1000.0, s_hi=100.0), r"s_hi must be > s_lo \(1000\) \[tokens\], got 100"),
    (dict(s_lo=100.0, s_hi=100.0), r"s_hi must be > s_lo \(100\) \[tokens\], got 100"),
    (dict(layouts=()), r"layouts must be a non-empty list"),
    (dict(layouts="TP"), r"layouts must be a non-empty list"),
    (dict(layouts=("TP", "XP")), r"layout must be one of \['TP', 'CP', 'DPA', 'DOP'\], got 'XP'"),
    (dict(layouts=("TP", "TP")), r"layouts must not repeat a layout"),
])
def test_context_boundaries_rejects_bad_ranges(kw, message):
    d = Deployment.build(**DEPLOYMENTS["llama8-h100-tp2"])
    with pytest.raises(SpecError, match=message):
        cx.context_boundaries(d, [8], **kw)


@pytest.mark.parametrize("args, message", [
    ((8, 0, 100), r"s_lo must be"), ((8, 100, 10), r"s_hi must be > s_lo"),
    (([8, 16], 1, 100), r"batch must be an integer in \[1, 16,777,216\], got \[8, 16\]"),
    (("8", 1, 100), r"batch must be an integer .*, got '8'"), ((True, 1, 100), r"batch must be .*, got True"),
])
def test_boundaries_at_rejects_bad_input(args, message):
    d = Deployment.build(**DEPLOYMENTS["llama8-h100-tp2"])
    with pytest.raises(SpecError, match=message):
        sweeps.layouts.boundaries_at(d, *args)

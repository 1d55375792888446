"""Error bands from the kernel curves' parameter uncertainty (models/step/uncertainty.py, sweeps/bands.py; issue 9 §3)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from llmexplore import cli, presets
from llmexplore.models.step import engine
from llmexplore.models.step import uncertainty
from llmexplore.models.step.decode import step_time
from llmexplore.models.step.engine import Deployment
from llmexplore.sweeps import bands


def test_draws_exist_only_for_curve_runtimes():
    assert uncertainty.runtime_draws("scalar") == [] and not uncertainty.has_band("scalar")
    rts = uncertainty.runtime_draws("default")
    assert [r.kernel_draw for r in rts] == list(range(1, uncertainty.DRAWS + 1))
    assert all(r.kernel_set == "any" for r in rts)


def test_draws_are_deterministic_independent_and_keep_pinned_parameters():
    dep = Deployment.build("llama-3-70b", "h100-sxm", 8)
    c0 = dep.kernels.curves["gemm.plain.bf16"]
    one = engine.perturbed(c0, 1, "gemm.plain.bf16")
    assert one == engine.perturbed(c0, 1, "gemm.plain.bf16")  # same draw, same curve
    assert one != engine.perturbed(c0, 2, "gemm.plain.bf16")
    assert one.eta_mem2 == 0.0 and not one.two_path  # a single-path curve stays single-path
    gqa = dep.kernels.curves["attention_decode.gqa.bf16"]
    g1 = engine.perturbed(gqa, 3, "attention_decode.gqa.bf16")
    assert g1.knee == pytest.approx(gqa.knee) and g1.eta_compute == pytest.approx(gqa.eta_compute)  # pinned


def test_draws_scatter_around_the_fit():
    """The mean of many draws' parameters (fit coordinates) is the fit; their covariance is cov_u."""
    dep = Deployment.build("llama-3-70b", "h100-sxm", 8)
    key = "gemm.plain.bf16"
    c0 = dep.kernels.curves[key]
    u = np.array([engine.perturbed(c0, i, key).u() for i in range(1, 401)])
    cov = np.asarray(c0.cov_u)
    sd = np.sqrt(np.diag(cov))
    free = sd > 1e-6  # pinned parameters have a zero (numerically ~1e-15) spread
    assert np.all(np.abs(u.mean(0) - c0.u())[free] < 4 * sd[free] / np.sqrt(400))
    assert np.allclose(u.std(0)[free], sd[free], rtol=0.2)


def test_band_of_brackets_a_step_time():
    def step_ms(rt):
        return float(step_time(Deployment.build("llama-3-70b", "h100-sxm", 8, runtime=rt), 64, 4096, "TP")
                     ["step_s"]) * 1e3

    b = uncertainty.band_of(step_ms, "default")
    assert b["draws"] == uncertainty.DRAWS and b["lo"] < b["value"] < b["hi"]
    assert (b["hi"] - b["lo"]) / b["value"] < 0.25  # parameter uncertainty: a few per cent
    s = uncertainty.band_of(step_ms, "scalar")
    assert s["lo"] is None and s["hi"] is None and s["draws"] == 0


def test_memory_boundaries_are_exact_and_crossovers_get_a_band():
    dep = Deployment.build("deepseek-v3", "h200", 8)
    b = bands.boundary_bands(dep, 8, 256, 1 << 20)
    mem = b[b.kind == "memory"]
    assert len(mem) and (mem.context_lo == mem.context).all() and (mem.context_hi == mem.context).all()
    cx = b[b.kind == "crossover"].iloc[0]
    assert cx.context_lo <= cx.context <= cx.context_hi and cx.resolved and cx.present == 1.0


def test_a_crossover_the_draws_cannot_place_is_not_resolved(monkeypatch):
    """When the draws disagree about which side of the axis two layouts swap on, the band spans the axis and the
    boundary is "not resolved by the model". Forced here by draws that alternate between two runtimes that place
    the TP/DPA crossover of DeepSeek-V3 at batch 64 far apart."""
    dep = Deployment.build("deepseek-v3", "h200", 8)
    scalar = presets.runtime("scalar")
    # attention very slow: DPA (1/T of the KV per rank) wins from the start of the axis; weight streaming very
    # slow: TP (1/T of the weights per rank) wins to its end
    dpa_early = dataclasses.replace(scalar, name="dpa-early", eta_attn_mem=0.02)
    tp_late = dataclasses.replace(scalar, name="tp-late", eta_mem=0.02, eta_attn_mem=1.0)
    monkeypatch.setattr(bands, "runtime_draws", lambda rt, n: [dpa_early, tp_late] * 8)
    b = bands.boundary_bands(dep, 64, 1024, 1 << 16)
    cx = b[b.kind == "crossover"]
    assert len(cx) and not cx.resolved.iloc[0]
    assert cx.context_lo.iloc[0] == 1024 and cx.context_hi.iloc[0] == 1 << 16
    assert bands.resolved(None, 5.0, 1, 10) is False and bands.resolved(1.0, 10.0, 1, 10) is False
    assert bands.resolved(2.0, 5.0, 1, 10) is True


@pytest.fixture
def few_draws(monkeypatch):
    """CLI band tests with 4 draws instead of 16: the band's plumbing, not its statistics, is under test here
    (16 draws of a pd point cost ~10 s)."""
    monkeypatch.setattr(uncertainty, "DRAWS", 4)
    return 4


def _run(capsys, argv):
    code = cli.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_layouts_reports_bands_and_boundaries(capsys, few_draws):
    base = ["layouts", "--model", "deepseek-v3", "--gpu", "h200", "--ranks", "8", "--batch", "64", "--context",
            "8192", "--json"]
    code, out, err = _run(capsys, base)
    assert code == 0, err
    doc = json.loads(out)
    for r in doc["layouts"]:
        assert r["step_ms_lo"] <= r["step_ms"] * 1.05 and r["step_ms_hi"] >= r["step_ms"] * 0.95
    assert 0 < doc["best_agreement"] <= 1 and doc["band"]["draws"] == few_draws
    assert {"before", "after", "kind", "context", "context_lo", "context_hi", "resolved", "text"} <= set(
        doc["boundaries"][0])
    code, out, _ = _run(capsys, [*base, "--no-band"])
    doc = json.loads(out)
    assert all(r["step_ms_lo"] is None for r in doc["layouts"]) and doc["best_agreement"] is None
    assert doc["band"]["what"] == "not computed (--band)"


def test_cli_pd_band_is_opt_in(capsys, few_draws):
    base = ["pd", "--model", "llama-3-70b", "--gpu", "h100-sxm", "--prompt", "4096", "--output", "256", "--json"]
    code, out, _ = _run(capsys, base)
    doc = json.loads(out)
    assert doc["disaggregated"]["gpus_lo"] is None and doc["band"]["draws"] == 0
    code, out, _ = _run(capsys, [*base, "--band"])
    doc = json.loads(out)
    d = doc["disaggregated"]
    assert d["gpus_lo"] <= d["gpus"] <= d["gpus_hi"] and doc["prefill_ms_lo"] < doc["prefill_ms_hi"]


def test_cli_offload_break_even_band(capsys, few_draws):
    """Llama-3-70B TP8 H100 on NVMe Gen4: the bandwidth-set break-even moves with the prefill curves' draws."""
    base = ["offload", "--model", "llama-3-70b", "--gpu", "h100-sxm", "--storage", "nvme-gen4", "--tp", "8",
            "--prefix", "32768", "--json"]
    code, out, _ = _run(capsys, [*base, "--band"])
    doc = json.loads(out)
    assert doc["set_by"] == "bandwidth"
    assert doc["break_even_tokens_lo"] <= doc["break_even_tokens"] <= doc["break_even_tokens_hi"]
    assert doc["break_even_tokens_hi"] > doc["break_even_tokens_lo"]  # the recompute side has curves
    assert doc["load_ms_lo"] == pytest.approx(doc["load_ms_hi"])  # the load side has no kernel curves
    code, out, _ = _run(capsys, base)
    assert json.loads(out)["break_even_tokens_lo"] is None


def test_step_time_curves_carry_a_band_that_the_figure_draws():
    from llmexplore import plots

    dep = Deployment.build("deepseek-v3", "h200", 8)
    c = bands.curves_with_band(dep, 64, np.geomspace(256, 1 << 18, 12))
    ok = c["feasible"]
    assert (c.loc[ok, "tpot_ms_lo"] <= c.loc[ok, "tpot_ms"] * 1.02).all()
    assert (c.loc[ok, "tpot_ms_hi"] >= c.loc[ok, "tpot_ms"] * 0.98).all()
    assert (c.loc[ok, "tpot_ms_hi"] > c.loc[ok, "tpot_ms_lo"]).any()
    fig = plots.layouts.step_time_figure(c)
    fills = [t for t in fig.data if t.fill == "toself"]
    assert fills and sum(bool(t.showlegend) for t in fills) == 1
    scalar = bands.curves_with_band(Deployment.build("deepseek-v3", "h200", 8, runtime="scalar"), 64, [1024.0])
    assert (scalar["tpot_ms_lo"] == scalar["tpot_ms"]).all()
    assert not [t for t in plots.layouts.step_time_figure(scalar).data if t.fill == "toself"]

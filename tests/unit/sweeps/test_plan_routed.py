"""Two colocated pools with prompts routed by length (issue 22 §3): the length mix keeps the question's mean
lengths, each pool is priced for its own requests, the budgets hold, the configuration and its launch notes say
which prompts go where, and unrouted pools are held to the long prompts' TTFT."""
from __future__ import annotations

import json

import numpy as np
import pytest

from llmexplore import cli, launch
from llmexplore.deployment import DeploymentConfig
from llmexplore.errors import SpecError
from llmexplore.sweeps import plan as sp
from llmexplore.sweeps.plan import routed

Q = dict(model="qwen3-32b", gpu="h100-sxm", other_gpus=("b200",), gpus=64, isl=8000, osl=300, ttft_ms=1500,
         tpot_ms=30, weight_dtypes=("fp8",), kv_dtypes=("fp8",), price_tier="reserved-3yr", long_share=0.2,
         long_isl=32000, modes=("colocated",), pipeline_sizes=(1,))


@pytest.fixture(scope="module")
def res():
    return sp.plan(**Q)


def test_the_classes_keep_the_mean():
    q = sp.Question(**Q)
    (si, so), (li, lo) = q.classes()
    assert (si, so, li, lo) == (2000.0, 300.0, 32000.0, 300.0)  # 0.8 x 2,000 + 0.2 x 32,000 = 8,000
    assert 0.8 * si + 0.2 * li == pytest.approx(8000)
    (si, so), (li, lo) = sp.Question(**{**Q, "long_osl": 700}).classes()
    assert (so, lo) == (200.0, 700.0)  # 0.8 x 200 + 0.2 x 700 = 300


def test_routed_rows_meet_the_targets_and_the_budget(res):
    t = res["table"]
    r = t[t["feasible"] & t["route_prompt_tokens"].notna()]
    assert len(r) > 10
    assert (r["route_prompt_tokens"] == 2000).all()
    assert (r["ttft_ms"] <= 1500 * (1 + 1e-9)).all() and (r["tpot_ms"] <= 30 * (1 + 1e-9)).all()
    gpus = r["n_decode"] * r["decode_ranks"] + r["n_long"] * r["long_ranks"]
    assert (gpus == r["gpus"]).all() and (r["gpus"] <= 64).all()
    price = {"h100-sxm": 1.30, "b200": 2.90}
    usd = (r["n_decode"] * r["decode_ranks"] * r["decode_gpu"].map(price)
           + r["n_long"] * r["long_ranks"] * r["long_gpu"].map(price))
    assert r["usd_per_hour"].to_numpy() == pytest.approx(usd.to_numpy())
    for c in ("usd_per_mtok_total", "j_per_token", "tokens_per_s_per_MW"):
        assert np.isfinite(r[c]).all() and (r[c] > 0).all()
    # dollars over the mean request's tokens
    row = r.iloc[0]
    assert row["usd_per_mtok_total"] == pytest.approx(row["usd_per_hour"] / (row["rate_per_s"] * 3600 * 8300) * 1e6)


def test_a_budget_in_dollars_binds_the_pools():
    t = sp.plan(**{**Q, "budget_usd_per_hour": 60.0})["table"]
    r = t[t["feasible"] & t["route_prompt_tokens"].notna()]
    assert len(r) and (r["usd_per_hour"] <= 60.0 + 1e-9).all()


def test_unrouted_pools_answer_for_the_long_prompts(res):
    """An unrouted instance priced at the mean 8,000-token prompt is refused when a 32,000-token prompt would wait
    and prefill past the target (the long requests are 20% > the 10% the p90 statistic lets through)."""
    t = res["table"]
    bad = t[~t["feasible"] & t["reason"].str.contains("32,000-token prompt waits and prefills", na=False)]
    assert len(bad) > 5
    # a p50 target is decided by the short requests: the long ones are not checked
    row = t[t["feasible"] & t["route_prompt_tokens"].isna()].iloc[0].to_dict()
    assert routed.long_prompt_reason(sp.Question(**{**Q, "stat": "p50"}), row) == ""


def test_configuration_launch_and_simulator(res):
    t = res["table"]
    row = t[t["feasible"] & t["route_prompt_tokens"].notna()].iloc[0].to_dict()
    cfg = sp.config_of(row, res["question"])
    doc = cfg.to_json()
    assert [s.get("max_prompt_tokens") for s in doc["sides"]] == [2000, None]
    assert DeploymentConfig.from_json(json.dumps(doc)).to_json() == doc
    notes = [e["note"] for e in launch.launch_commands(cfg, "vllm")]
    assert "route prompts of up to 2,000 tokens to this pool" in notes[0]
    assert "route prompts longer than 2,000 tokens to this pool" in notes[1]
    assert sp.simulate_row(row, res["question"])["status"].startswith("not simulated: two colocated pools routed")
    bad = {**doc, "sides": [doc["sides"][1], doc["sides"][0]]}
    with pytest.raises(SpecError, match="the first needs max_prompt_tokens"):
        DeploymentConfig.from_json(bad)


@pytest.mark.parametrize("kw, message", [
    (dict(long_share=0.2), "long_share and long_isl come together"),
    (dict(long_share=1.0, long_isl=32000), "long_share must be"),
    (dict(long_share=0.2, long_isl=4000), "must exceed the mean isl"),
    (dict(long_share=0.5, long_isl=20000), "at least one prompt and one output token"),
])
def test_bad_length_mixes_are_one_line(kw, message):
    with pytest.raises(SpecError) as exc:
        sp.Question(model="qwen3-32b", gpu="h200", isl=8000, osl=300, **kw)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_cli_length_mix(capsys):
    argv = ["plan", "--model", "qwen3-32b", "--gpu", "h100-sxm,b200", "--gpus", "64", "--isl", "8000", "--osl", "300",
            "--ttft-ms", "1500", "--tpot-ms", "30", "--weight-dtype", "fp8", "--kv-dtype", "fp8", "--pipeline-sizes",
            "1", "--mode", "colocated", "--long-share", "0.2", "--long-isl", "32000", "--json"]
    assert cli.main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["inputs"]["long_share"] == 0.2 and "80% of 2,000 and 300, 20% of 32,000" in doc["question_text"]
    assert cli.main(argv[:-5] + ["--long-share", "0.2", "--json"]) == 2
    assert "--long-share and --long-isl come together" in capsys.readouterr().err

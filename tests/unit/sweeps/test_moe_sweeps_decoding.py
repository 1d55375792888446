"""Area 30's sweeps and findings with pipelines and speculative decoding (issue 21; llmexplore.sweeps.moe,
llmexplore.findings.moe).

* Plain decoding: every table is what it was (the step, its memory), and the sentences read as before.
* With ``pp`` / ``speculative`` the rows compare by the time per output token, the ``decoding`` column says how, and
  the sentences and figure titles say "per output token".
* The finding of notebook 30 with MTP, checked here on the default scenario (DeepSeek-V3 FP8, 16 H200, skew 2.6):
  the verify pass's second token per sequence doubles the routed pairs, so the busiest EP rank's excess over the
  mean shrinks (routing noise averages out) while the placement's own imbalance stays; speculation pays about as
  much under pure TP as under TP x EP at batch 256 (all memory-bound), and least at large batches under EP, where
  nearly every part of the step grows with the verify tokens (tests/unit/models/moe/test_moe_decoding.py says
  why).
"""

import numpy as np
import pandas as pd
import pytest

from llmexplore import findings, plots
from llmexplore.errors import SpecError
from llmexplore.models.moe import decode as moe_model
from llmexplore.sweeps import moe

BATCHES = [16, 64, 256, 1024, 4096]


@pytest.fixture(scope="module")
def md():
    return moe.config("deepseek-v3", "h200", 16, tp=2, ep=8)


@pytest.fixture(scope="module")
def mtp(md):
    dec = moe.decoding(md, 1, "deepseek-mtp-1")
    return moe.scenario_table(batch=BATCHES, redundant=(32,), **dec)


def test_decoding_checks_and_resolves(md):
    assert moe.decoding(md) == {"pp": 1, "speculative": None}
    dec = moe.decoding(md, 1, "deepseek-mtp-1", 1.7)
    assert dec["speculative"].tokens_per_step == 1.7
    assert moe.decoding_of(**dec) == "deepseek-mtp-1 (1.70 tokens per step)"
    assert moe.decoding_of(**moe.decoding(md, 2)) == "PP2"
    for args, message in [((2, "deepseek-mtp-1"), "pp (2) must be 1 when decoding speculatively"),
                          ((1, None, 1.5), "accepted_length must come with speculative"),
                          ((1, "deepseek-mtp-1", 3.0), "accepted_length must be a finite number in [1, 2]"),
                          ((64,), "pp (64) must be at most the layers of deepseek-v3 (61)")]:
        with pytest.raises(SpecError) as e:
            moe.decoding(md, *args)
        assert str(e.value).startswith(message), str(e.value)
    mix = moe.config("mixtral-8x7b", "h200", 8, tp=1, ep=8)
    with pytest.raises(SpecError, match="speculative 'deepseek-mtp-1' drafts with an MTP module, and mixtral-8x7b"):
        moe.decoding(mix, 1, "deepseek-mtp-1")


def test_plain_tables_are_the_step_and_memory_exactly(md):
    recs = pd.DataFrame(moe.moe_records(md, BATCHES, 2048, 2.6))
    st = moe_model.step_time(md, np.array(BATCHES), 2048, skew=2.6)
    mem = moe_model.memory_per_gpu(md, np.array(BATCHES), 2048)
    np.testing.assert_array_equal(recs["step_ms"], st["step_s"] * 1e3)
    np.testing.assert_array_equal(recs["tpot_ms"], recs["step_ms"])
    np.testing.assert_array_equal(recs["moe_layer_us"], st["moe_layer_s"] * 1e6)
    np.testing.assert_array_equal(recs["memory_GB"], mem["total_B"] / 1e9)
    assert set(recs["decoding"]) == {""} and "speedup" not in recs and (recs["gpus"] == 16).all()
    by_skew = moe.step_vs_skew(tp=2, ep=8, batch=256, skews=[1.0, 2.6])
    st = moe_model.step_time(moe.config(tp=2, ep=8, redundant=32, balance="eplb"), 256, 2048, skew=np.array([1.0, 2.6]))
    np.testing.assert_array_equal(by_skew[by_skew["placement"] == "EPLB + 32 redundant"]["step_ms"], st["step_s"] * 1e3)
    shown = moe.shown_columns(recs, ["layout", "gpus", "step_ms", "tpot_ms", "speedup", "draft_ms", "hops_ms",
                                     "feasible"])
    assert shown == ["layout", "step_ms", "feasible"]


def test_speculative_rows_compare_the_time_per_output_token(mtp):
    assert set(mtp["decoding"]) == {"deepseek-mtp-1 (1.88 tokens per step)"}
    np.testing.assert_allclose(mtp["step_ms"], 1.875 * mtp["tpot_ms"], rtol=1e-12)
    np.testing.assert_allclose(mtp["speedup"], mtp["plain_ms"] / mtp["tpot_ms"], rtol=1e-12)
    assert (mtp["draft_ms"] > 0).all() and (mtp["draft_weights_GB"] > 0).all()
    assert (mtp["memory_GB"] > mtp["weights_GB"]).all()
    shown = moe.shown_columns(mtp, ["layout", "gpus", "step_ms", "tokens_per_step", "tpot_ms", "speedup", "draft_ms",
                                    "hops_ms"])
    assert shown == ["layout", "step_ms", "tokens_per_step", "tpot_ms", "speedup", "draft_ms"]


def test_the_verify_pass_averages_out_routing_noise_but_keeps_the_placements_imbalance(mtp):
    ep = mtp[mtp["ep"] > 1]
    assert (ep["load_straggler"] < ep["plain_load_straggler"]).all()
    assert (ep["load_straggler"] >= ep["expected_imbalance"]).all()  # the noise goes, the placement's skew stays
    strag = moe.straggler_table(moe.config(tp=2, ep=8, redundant=32), 256, 2048, skew=2.6,
                                speculative=moe.decoding(moe.config(tp=2, ep=8), 1, "deepseek-mtp-1")["speculative"])
    assert list(strag["routed_tokens"]) == [256, 512]
    assert strag["load_straggler"].iloc[1] < strag["load_straggler"].iloc[0]
    assert strag["expected_imbalance"].iloc[1] == strag["expected_imbalance"].iloc[0]
    text = findings.moe.straggler_sentence(strag)
    assert "routes 512" in text and "more tokens average out the noise" in text
    assert f"{strag['load_straggler'].iloc[1]:.3f}×" in text
    # the Monte Carlo check covers the verify pass's 512 tokens
    assert moe.check_tokens([64, 256, 1024], strag) == [64, 256, 1024, 512]
    assert moe.check_tokens([64, 256, 1024], strag.iloc[:1]) == [64, 256, 1024]


def test_mtp_pays_alike_at_batch_256_and_least_under_ep_at_large_batches(mtp):
    """Notebook 30's MTP finding: at batch 256 (every split memory-bound) the speed-ups of TP16, TP2xEP8 and
    DPA+EP16 lie within 5 % of each other, 1.5-1.65x of the 1.875 tokens per step; at 4,096 sequences speculation
    pays least on the EP splits (about 1.05x), below pure TP's at the same batch."""
    at = moe.speedup_at_batch(mtp, 256)
    static = {k: v for k, v in at.items() if "EPLB" not in k}
    assert set(static) == {"TP16", "TP2xEP8 static", "DPA+EP16 static"}
    assert max(static.values()) / min(static.values()) < 1.05 and all(1.5 < v < 1.65 for v in static.values())
    large = moe.speedup_at_batch(mtp, 4096)
    assert all(v < 1.1 for k, v in large.items() if k != "TP16") and large["TP16"] > 1.2
    text = findings.moe.decoding_sentence(mtp, 256)
    assert text.startswith("Speculative decoding with deepseek-mtp-1 (1.88 tokens per step) at batch 256: speed-up "
                           f"{findings.num(static['TP16'])}× on TP16")
    worst = mtp[mtp["feasible"]].loc[mtp[mtp["feasible"]]["speedup"].idxmin()]
    assert int(worst["batch"]) == 4096 and f"{findings.num(worst['speedup'])}×." in text
    assert findings.moe.scenario_sentence(mtp, 256).endswith(text)
    assert "per output token" in findings.moe.scenario_sentence(mtp, 256, short=True)


def test_a_pipeline_deals_the_batch_over_micro_batches_of_stages(md):
    pp = moe.scenario_table(batch=[256], redundant=(32,), **moe.decoding(md, 2))
    assert set(pp["decoding"]) == {"PP2"} and (pp["gpus"] == 32).all()
    assert (pp["hops_ms"] > 0).all() and (pp["tpot_ms"] == pp["step_ms"]).all()
    plain = moe.scenario_table(batch=[256], redundant=(32,))
    assert (pp["memory_GB"].to_numpy() < plain["memory_GB"].to_numpy()).all()  # half the layers per GPU
    text = findings.moe.decoding_sentence(pp, 256)
    assert text.startswith("A pipeline of 2 stages (32 GPUs, micro-batches of 128 sequences) at batch 256")
    # per MoE layer: one micro-batch's step (128 sequences), as the plain step at 128 has it
    by_batch = moe.step_vs_batch(batches=[256], pp=2)
    ref = moe.step_vs_batch(batches=[128])
    np.testing.assert_allclose(by_batch["moe_layer_us"], ref["moe_layer_us"], rtol=1e-12)
    assert "of one micro-batch's step" in findings.moe.comm_sentence(by_batch, 256)


def test_figures_and_titles_say_per_output_token(md):
    dec = moe.decoding(md, 1, "deepseek-mtp-1")
    by_skew = moe.step_vs_skew(tp=2, ep=8, batch=256, skews=[1.0, 2.6], **dec)
    fig = plots.moe.skew_figure(by_skew, title=findings.moe.skew_title(by_skew, 2.6, 256))
    assert fig.layout.yaxis.title.text == "time per output token (ms)"
    assert "time per output token" in fig.layout.title.text.replace("<br>", " ")
    assert [a.text for a in fig.layout.annotations][:2] == ["per output token", "one MoE layer (verify pass)"]
    assert list(fig.data[0].y) == list(by_skew[by_skew["placement"] == "static placement"]["tpot_ms"])
    assert "time per output token" in findings.moe.redundancy_sentence(by_skew, by_skew, 2.6, 256, 256)
    scen = moe.scenario_table(batch=[64, 256], redundant=(32,), **dec)
    sf = plots.moe.scenario_figure(scen, batch_marker=256)
    assert sf.layout.yaxis.title.text == "time per output token (ms)"
    cf = plots.moe.comm_figure(moe.step_vs_batch(batches=[64, 256], **dec))
    assert cf.layout.yaxis.title.text == "time per MoE layer of the verify pass (µs)"
    plain = moe.step_vs_skew(tp=2, ep=8, batch=256, skews=[1.0, 2.6])
    pf = plots.moe.skew_figure(plain)
    assert pf.layout.yaxis.title.text == "step time (ms)"
    assert [a.text for a in pf.layout.annotations][:2] == ["whole decode step", "one MoE layer"]
    assert plots.moe.scenario_figure(moe.scenario_table(batch=[64], redundant=(32,))).layout.xaxis.title.text == \
        "batch (sequences per step, all 16 GPUs)"

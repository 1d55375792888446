"""Area 10 (attention layouts) with pipelines and speculative decoding: the sweeps, the layout switches and the
scheduler read the time per output token and the worst stage's (or the draft's) memory."""
from __future__ import annotations

import numpy as np
import pytest

from llmexplore.errors import SpecError
from llmexplore.models.layouts import policy, transitions as tr
from llmexplore.models.step import per_token as pt
from llmexplore.models.step.engine import LAYOUTS, Deployment
from llmexplore.models.step.pipeline import stage_layers
from llmexplore.sweeps import layouts as L

DSV3 = Deployment.build("deepseek-v3", "h200", 8, weight_dtype="fp8")


def test_plain_tables_are_unchanged_by_the_new_columns():
    t = L.layout_table(DSV3, 64, 8192)
    assert (t["decoding"] == "").all()
    np.testing.assert_array_equal(t["tpot_ms"], t["step_ms"])
    assert (t[["draft_ms", "hops_ms", "stall_ms", "draft_weights_GB"]] == 0).all().all()
    assert L.shown_columns(t, ["layout", "tpot_ms", "draft_ms", "step_ms"]) == ["layout", "step_ms"]


@pytest.mark.parametrize("how", [dict(pp=2), dict(speculative="deepseek-mtp-1", accepted_length=1.6)])
def test_tables_with_a_pipeline_or_speculation_are_per_output_token(how):
    dec = L.decoding(DSV3, **how)
    t = L.layout_table(DSV3, 64, 8192, **dec)
    parts = t[["attention_ms", "ffn_ms", "head_ms", "comm_ms", "overhead_ms", "draft_ms", "host_ms", "hops_ms",
               "stall_ms"]].sum(axis=1)
    np.testing.assert_allclose(parts, t["tpot_ms"], rtol=1e-12)
    np.testing.assert_allclose(t["tokens_per_s"], 64e3 / t["tpot_ms"], rtol=1e-12)
    assert L.best_layout(t) == t.loc[t["feasible"]].sort_values("tpot_ms")["layout"].iloc[0]
    mem = L.memory_table(DSV3, 64, 8192, **dec)
    np.testing.assert_allclose(mem.groupby("layout", sort=False)["GB"].sum().to_numpy(), t["total_GB"], rtol=1e-12)
    if "pp" in how:
        assert (t["decoding"] == "PP2").all() and (t["hops_ms"] > 0).all()
        assert "tpot_ms" not in L.shown_columns(t, ["tpot_ms"]) and "hops_ms" in L.shown_columns(t, ["hops_ms"])
    else:
        assert (t["decoding"] == "deepseek-mtp-1 (1.60 tokens per step)").all()
        np.testing.assert_allclose(t["step_ms"] / t["tpot_ms"], 1.6)
        assert set(mem["part"]) >= {"draft weights", "draft KV"}


def test_a_pipeline_halves_the_weights_and_kv_per_rank():
    """DeepSeek-V3 on 2 stages of 8 H200: the worst stage holds 31 of 61 layers (its MoE layers and one vocabulary
    table), so about half the weights and half the KV per rank of the 8-GPU group."""
    one, two = L.layout_table(DSV3, 64, 8192), L.layout_table(DSV3, 64, 8192, pp=2)
    assert stage_layers(DSV3.model, 2) == [31, 30]
    np.testing.assert_allclose(two["kv_GB"] / one["kv_GB"], 31 / 61, rtol=0.01)
    assert ((two["weights_GB"] / one["weights_GB"]).between(0.5, 0.56)).all()


def test_switches_in_a_pipeline_move_the_worst_stage_and_a_draft_moves_its_layer():
    one = tr.transition(DSV3, "DPA", "TP", 64, 8192)
    two = tr.transition(DSV3, "DPA", "TP", 64, 8192, pp=2)
    assert two["kv"].recv_B == pytest.approx(one["kv"].recv_B * 31 / 61, rel=1e-9)
    assert two["weights"].recv_B == pytest.approx(one["weights"].recv_B * 31 / 61, rel=1e-9)
    mtp = tr.transition(DSV3, "DPA", "TP", 64, 8192, speculative="deepseek-mtp-1")
    assert mtp["kv"].recv_B == pytest.approx(one["kv"].recv_B * 62 / 61, rel=1e-9)  # the MTP layer's own KV
    assert mtp["time_s"] > one["time_s"] > two["time_s"]
    t = L.transition_table(DSV3, 64, 8192, pp=2)
    assert len(t) == 16 and (t.loc[t["src"] == t["dst"], "exposed_ms"] == 0).all()


def test_the_scheduler_prices_segments_per_output_token():
    trace = policy.fluctuating_trace(mean_batch=8, batch_sd=3, context=16384, segments=8, segment_steps=16)
    spec = pt.check_decoding(DSV3, 1, "deepseek-mtp-1")[1]
    c = policy.segment_costs(DSV3, trace, speculative=spec)
    b, s = trace["batch"], trace["context"]
    for k, lay in enumerate(LAYOUTS):
        ref = pt.token_time(DSV3, b, s, lay, speculative=spec)["tpot_s"]
        np.testing.assert_allclose(c["step_s"][:, k], ref * c["passes"][:, k], rtol=1e-12)
    res = policy.compare_policies(DSV3, trace, speculative=spec)
    plain = policy.compare_policies(DSV3, trace)
    assert res["aware"]["total_s"] < plain["aware"]["total_s"]  # MTP at batch ~8 pays


def test_decoding_rules_name_the_argument():
    with pytest.raises(SpecError, match=r"pp \(2\) must be 1 when decoding speculatively"):
        L.decoding(DSV3, 2, "deepseek-mtp-1")
    with pytest.raises(SpecError, match="accepted_length must come with speculative"):
        L.decoding(DSV3, 1, None, 1.5)
    with pytest.raises(SpecError, match=r"accepted_length must be a finite number in \[1, 2\]"):
        L.decoding(DSV3, 1, "deepseek-mtp-1", 2.5)


def test_the_contrast_keeps_the_pipeline_and_drops_a_draft_it_cannot_run():
    gqa = Deployment.build("qwen3-32b", "gb200", 16)
    main = L.decoding(DSV3, 1, "deepseek-mtp-1")
    assert L.contrast_decoding(gqa, main) == {"pp": 1, "speculative": None}
    assert L.contrast_decoding(gqa, L.decoding(DSV3, 4)) == {"pp": 4, "speculative": None}
    ngram = L.decoding(DSV3, 1, "ngram-5")
    assert L.contrast_decoding(gqa, ngram)["speculative"].name == "ngram-5"
    from llmexplore.findings.layouts import contrast_sentence

    phase = L.phase_diagram(gqa, [8, 64], [1024.0, 8192.0])
    text = contrast_sentence(gqa, phase, 64, 8192, asked=main["speculative"])
    assert "decodes without speculation: deepseek-mtp-1's MTP draft needs an MTP module" in text

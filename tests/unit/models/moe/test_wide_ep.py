"""SGLang's wide expert parallelism as run in the LMSYS deployments: DPA with DeepEP all-to-all, EPLB's redundant
expert slots (``moe_redundant``), data-parallel dense FFN (``dp_dense``) and LM head (``dp_lm_head``), and a whole
shared expert on every rank (docs/models.md §3.3). Hand calculations against the step engine's own kernels."""
from __future__ import annotations

import numpy as np
import pytest

from llmexplore import validate
from llmexplore.errors import SpecError
from llmexplore.models.step.decode import memory_per_rank, step_time
from llmexplore.models.step.engine import Deployment, gemm_s


def wide(ranks=72, gpu="h100-sxm", **kw):
    return Deployment.build("deepseek-v3", gpu, ranks, runtime="sglang", weight_dtype="fp8",
                            moe_dispatch="alltoall", **kw)


def test_redundant_slots_let_72_ranks_hold_256_experts():
    """256 experts do not divide over 72 ranks; 256 + 32 redundant = 288 = 4 per rank do (the LMSYS EP72 decode
    deployment). The query heads need not divide: an all-to-all deployment is DPA-only (whole heads per rank)."""
    with pytest.raises(SpecError, match=r"ranks \(72\) must divide the routed experts of deepseek-v3 \(256\)"):
        wide()
    dep = wide(moe_redundant=32)
    with pytest.raises(SpecError, match=r"ranks \(72\) must divide the routed experts \+ moe_redundant of "
                                        r"deepseek-v3 \(287\)"):
        wide(moe_redundant=31)
    assert np.isfinite(float(step_time(dep, 72 * 256, 2000.0, "DPA")["step_s"]))
    for layout in ("TP", "CP", "DOP"):  # layouts that shard heads are refused, naming the rule
        with pytest.raises(SpecError, match=rf"layout {layout} needs ranks \(72\) to divide the query heads"):
            step_time(dep, 72, 2000.0, layout)
    # dp_dense lifts the dense-FFN rule for DPA steps only (18,432 / 48 divides, 18,432 / 40 does not)
    dense_dp = Deployment.build("deepseek-v3", "h100-sxm", 40, runtime="sglang", moe_dispatch="alltoall",
                                moe_redundant=64, dp_dense=True)
    assert np.isfinite(float(step_time(dense_dp, 40, 2000.0, "DPA")["step_s"]))
    with pytest.raises(SpecError, match=r"layout DOP needs ranks \(40\) to divide the query heads"):
        step_time(dense_dp, 40, 2000.0, "DOP")
    # without all-to-all the heads rule stands, and redundant slots need all-to-all
    with pytest.raises(SpecError, match=r"ranks \(72\) must divide the query heads"):
        Deployment.build("deepseek-v3", "h100-sxm", 72, runtime="sglang")
    with pytest.raises(SpecError, match="moe_redundant .* needs an MoE model with moe_dispatch 'alltoall'"):
        Deployment.build("deepseek-v3", "h100-sxm", 32, moe_redundant=32)
    for bad in (-1, 1.5, "32", True):
        with pytest.raises(SpecError, match="moe_redundant"):
            wide(ranks=32, moe_redundant=bad)
    with pytest.raises(SpecError, match="dp_dense"):
        wide(ranks=32, dp_dense="yes")


def test_weights_per_rank_of_the_ep72_deployment():
    """Per rank: 4 routed slots of 3 x 7168 x 2048 FP8 weights in each of the 58 MoE layers, one whole shared expert,
    whole dense FFNs with dp_dense (3 x 3 x 7168 x 18432) and a whole BF16 embedding + LM head with dp_lm_head."""
    base = wide(moe_redundant=32)
    full = wide(moe_redundant=32, dp_dense=True, dp_lm_head=True)
    m = base.model
    wb, wf = base.weight_bytes("DPA"), full.weight_bytes("DPA")
    expert = 3 * 7168 * 2048
    assert wb["ffn"] - 58 * m.router_params * 2 == pytest.approx(
        3 * m.ffn_params_dense_layer / 72 + 58 * (4 + 1) * expert)
    assert wf["ffn"] - wb["ffn"] == pytest.approx(3 * m.ffn_params_dense_layer * (1 - 1 / 72))
    assert wf["embedding"] == pytest.approx(72 * wb["embedding"]) and wf["embedding"] == m.embedding_params * 2


def test_data_parallel_dense_and_lm_head_drop_their_collectives():
    """dp_dense: the 3 dense layers run on the rank's own tokens with whole weights, no gather; dp_lm_head: the LM
    head on its own tokens over the whole vocabulary, no embedding all-reduce, hidden-state or logits gather."""
    b, s = 72 * 256, 2000.0
    base = step_time(wide(moe_redundant=32), b, s, "DPA")
    dense = step_time(wide(moe_redundant=32, dp_dense=True), b, s, "DPA")
    head = step_time(wide(moe_redundant=32, dp_lm_head=True), b, s, "DPA")
    assert float(base["comm_ffn_dense_s"]) > 1e-3 and float(dense["comm_ffn_dense_s"]) == 0.0
    assert float(base["comm_head_s"]) > 1e-2 and float(head["comm_head_s"]) == 0.0
    dep = wide(moe_redundant=32, dp_lm_head=True)
    lm = float(gemm_s(dep, 256.0, 7168, 129280, b_w=2.0))  # 256 own tokens x whole vocabulary
    assert float(head["head_s"]) > lm and float(head["head_s"]) < lm * 1.2
    # the rest of the step is unchanged
    for key in ("attention_s", "ffn_moe_s", "comm_ffn_moe_s"):
        assert float(dense[key]) == pytest.approx(float(base[key])) == pytest.approx(float(head[key]))
    # and the logits a rank holds are its own only: less activation memory
    assert float(memory_per_rank(dep, b, s, "DPA")["activations_B"]) < float(
        memory_per_rank(wide(moe_redundant=32), b, s, "DPA")["activations_B"])


def test_shared_expert_is_whole_on_every_rank_with_deepep():
    """SGLang's DeepEP path builds the shared expert with tp_size 1: at 2 tokens per rank on 16 H200 its GEMMs read
    the whole 3 x 7168 x 2048 FP8 expert per layer instead of 1/16 of it, so the MoE layers cost more than with the
    all-gather dispatch, which slices it over the 16 ranks."""
    a2a = Deployment.build("deepseek-v3", "h200", 16, runtime="sglang", weight_dtype="fp8", moe_dispatch="alltoall")
    gat = Deployment.build("deepseek-v3", "h200", 16, runtime="sglang", weight_dtype="fp8")
    dep_one = Deployment.build("deepseek-v3", "h200", 1, runtime="sglang", weight_dtype="fp8")
    whole = float(gemm_s(dep_one, 2.0, 7168, 2 * 2048) + gemm_s(dep_one, 2.0, 2048, 7168))
    sliced = float(gemm_s(gat, 32.0, 7168, 2 * 2048 / 16) + gemm_s(gat, 32.0, 2048 / 16, 7168))
    da = float(step_time(a2a, 32, 4096.0, "DPA")["ffn_moe_s"])
    dg = float(step_time(gat, 32, 4096.0, "DPA")["ffn_moe_s"])
    assert da - dg == pytest.approx(58 * (whole - sliced), rel=1e-9)


def test_validation_rows_carry_the_options_their_sources_ran(tmp_path):
    rows = validate.load()
    lmsys = rows[rows.id.str.startswith("lmsys-dsv3-h") & ~rows.id.str.contains("gb200")]
    assert len(lmsys) == 5 and (lmsys.moe_redundant == 32).all()
    assert (lmsys.dp_dense.astype(str).str.lower() == "true").all()
    assert (lmsys.dp_lm_head.astype(str).str.lower() == "true").all()
    good = (validate.VALIDATION_CSV.read_text().splitlines())
    header, first = good[0], good[1]
    cols = header.split(",")
    for col, value, rule in (("moe_redundant", "-3", "moe_redundant must be an integer >= 0 and <= 4,096 or empty"),
                             ("moe_redundant", "1e300", "moe_redundant must be an integer >= 0 and <= 4,096 or empty"),
                             ("moe_redundant", "abc", "moe_redundant must be an integer >= 0 and <= 4,096 or empty"),
                             ("dp_dense", "maybe", "dp_dense must be true, false or empty")):
        import csv
        import io
        r = next(csv.reader(io.StringIO(first)))
        r[cols.index(col)] = value
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerow(r)
        f = tmp_path / f"{col}.csv"
        f.write_text(header + "\n" + out.getvalue())
        with pytest.raises(SpecError, match=rf"line 2: {rule}"):
            validate.load(f)


def test_two_batch_overlap_charges_deepeps_normal_kernels_their_sms():
    """Prefill (DeepEP normal kernels) with two-batch overlap: the compute overlapped with the all-to-all runs on
    132 - 20 of H100's SMs (DeepEP Buffer.num_sms = 20), so the step is longer than with ideal overlap by
    58 x 20/132 x the all-to-all per layer when compute is the longer stream. Decode steps' low-latency kernels
    (receive hook) hold no SMs, and a GPU whose SM count is not known is not charged."""
    import dataclasses

    from llmexplore.models.step.collectives import DEEPEP_NORMAL_SMS

    dep = wide(ranks=32, moe_redundant=32, dp_dense=True, dp_lm_head=True, two_batch_overlap=True)
    assert dep.hardware.sms == 132 and DEEPEP_NORMAL_SMS == 20
    ideal = dataclasses.replace(dep, hardware=dataclasses.replace(dep.hardware, sms=0))
    kw = dict(q_tokens=4096, logits_tokens=1)
    got = step_time(dep, 128, 2048.0, "DPA", **kw)
    ref = step_time(ideal, 128, 2048.0, "DPA", **kw)
    m_total = float(ref["comm_ffn_moe_s"] + ref["comm_hidden_s"])  # the MoE all-to-all of the whole step
    assert float(got["step_s"] - ref["step_s"]) == pytest.approx(m_total * 20 / 132, rel=1e-9)
    dec = step_time(dep, 32 * 64, 2048.0, "DPA")
    assert float(dec["step_s"]) == pytest.approx(float(step_time(ideal, 32 * 64, 2048.0, "DPA")["step_s"]))

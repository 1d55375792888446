"""The MoE wing (llmexplore.models.moe.decode) is a view over the step engine (llmexplore.models.step): where the
two describe the same deployment with uniform routing they give the same step time (issue 18 §2, "one MoE
vocabulary"; docs/models.md §4.8).

* Pure TP (wing ep = 1, engine ``moe_ep=1``: every expert sliced over all T GPUs): equal to rounding, part by
  part, on three MoE models, two weight dtypes and three runtimes (kernel curves, scalar efficiencies, an
  engine preset). Before issue 18 they differed by up to 19 % in the routed experts (the wing priced them on
  the hard roofline without the grouped GEMM's M tile) and up to 2x in the MoE AllReduce (the wing's fabric
  lacked the runtime's fitted all-reduce curve).
* DPA + EP (wing tp = 1, ep = T, per-expert DeepEP dispatch; engine DPA with ``moe_dispatch="alltoall"`` and
  data-parallel dense FFN and LM head): every non-routed part and the all-to-all equal; the wing's mean rank
  is the engine's rank but for the engine's norm and router over the gathered batch (exactly that difference,
  up to 4 % of the step), and the
  busiest rank is slower by the straggler (E[max over ranks] / mean: > 1 even for uniform routing, sampling
  noise; 1.05 at 128 sequences per rank on 32 ranks).
* With skew the wing's busiest rank is slower than the engine's uniform mean rank, never faster.
"""

import numpy as np
import pytest

from llmexplore.models.moe.decode import MoEDeployment, step_time as moe_step_time
from llmexplore.models.step import decode
from llmexplore.models.step.engine import EMB_BYTES, Deployment, elementwise_s, gemm_s

BATCH = np.array([1, 8, 64, 256, 1024])
CONTEXT = np.array([[1024], [8192]])
SHARED_KEYS = ("step_s", "attention_s", "ffn_dense_s", "ffn_moe_s", "head_s", "comm_s", "overhead_s",
               "comm_attn_s", "comm_ffn_dense_s", "comm_head_s")


@pytest.mark.parametrize("runtime", ["default", "scalar", "vllm"])
@pytest.mark.parametrize("weight_dtype", ["fp8", "bf16"])
@pytest.mark.parametrize("model, gpus", [("deepseek-v3", 8), ("deepseek-v3", 16), ("mixtral-8x7b", 8),
                                         ("qwen3-30b-a3b", 16)])
def test_pure_tp_is_the_step_engine(model, gpus, weight_dtype, runtime):
    md = MoEDeployment.build(model, "h200", gpus, tp=gpus, ep=1, weight_dtype=weight_dtype, runtime=runtime)
    dep = Deployment.build(model, "h200", gpus, weight_dtype=weight_dtype, runtime=runtime, moe_ep=1)
    wing = moe_step_time(md, BATCH, CONTEXT)
    engine = decode.step_time(dep, BATCH, CONTEXT, "TP")
    for key in SHARED_KEYS:
        np.testing.assert_allclose(wing[key], engine[key], rtol=1e-12, atol=0, err_msg=key)
    np.testing.assert_allclose(wing["comm_moe_s"], engine["comm_ffn_moe_s"], rtol=1e-12, err_msg="comm_moe_s")


@pytest.mark.parametrize("gpus", [8, 16, 32])
def test_dpa_ep_agrees_with_the_step_engine_within_the_straggler(gpus):
    md = MoEDeployment.build("deepseek-v3", "h200", gpus, tp=1, ep=gpus, weight_dtype="fp8", dispatch="expert")
    dep = Deployment.build("deepseek-v3", "h200", gpus, weight_dtype="fp8", moe_dispatch="alltoall",
                           dp_dense=True, dp_lm_head=True)
    batch = gpus * np.array([1, 8, 32, 128])  # every rank holds as many sequences (no idle ranks)
    wing = moe_step_time(md, batch, 4096)
    engine = decode.step_time(dep, batch, 4096, "DPA")
    for key in ("attention_s", "ffn_dense_s", "head_s", "overhead_s"):
        np.testing.assert_allclose(wing[key], engine[key], rtol=1e-12, err_msg=key)
    np.testing.assert_allclose(wing["comm_moe_s"], engine["comm_ffn_moe_s"] + engine["comm_hidden_s"],
                               rtol=1e-12, err_msg="the DeepEP all-to-all")
    # the busiest of T ranks under uniform routing: Poisson-like noise on ~N k / T pairs per rank
    straggler = wing["time_straggler"]
    assert np.all((straggler >= 1.0) & (straggler < 1.06)), straggler
    # the mean rank is the engine's rank, but for the engine's MoE norm and router, which it runs over the
    # gathered batch of all T ranks, the wing over the rank's own tokens (DeepEP gathers nothing)
    m = md.model
    mean_rank_step = wing["step_s"] - m.moe_layers * (wing["routed_layer_s"] - wing["routed_mean_layer_s"])

    def norm_router_s(tokens):
        return elementwise_s(dep, 2 * tokens * m.hidden * dep.b_a) + gemm_s(dep, tokens, m.hidden,
                                                                           m.routed_experts, b_w=EMB_BYTES)

    gathered_extra = m.moe_layers * (norm_router_s(batch.astype(float)) - norm_router_s(batch / gpus))
    np.testing.assert_allclose(mean_rank_step + gathered_extra, engine["step_s"], rtol=1e-12)
    assert np.all(gathered_extra / engine["step_s"] < 0.05)  # 4 % at 128 sequences x 32 ranks


def test_skew_slows_the_busiest_rank_past_the_engines_uniform_rank():
    md = MoEDeployment.build("deepseek-v3", "h200", 16, tp=1, ep=16, weight_dtype="fp8", dispatch="expert")
    uniform = moe_step_time(md, 1024, 4096)
    skewed = moe_step_time(md, 1024, 4096, skew=np.array([2.0, 4.0, 8.0]))
    assert np.all(np.diff(skewed["routed_layer_s"]) > 0)
    assert np.all(skewed["routed_layer_s"] > uniform["routed_layer_s"])

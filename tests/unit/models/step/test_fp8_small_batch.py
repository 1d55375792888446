"""FP8 weights at small batch (issue 19 §3.1): a decode step at batch 1 is a read of the weights, so FP8 weights
(one byte each) must make it materially faster than BF16 (two bytes) wherever the weight read dominates.

The regression this guards: the per-tensor FP8 GEMM rows of aiconfigurator's database time TensorRT-LLM's
*dynamic* quantisation (its collector gives the FP8 Linear no input scale, so the timed module computes the
activation scale, 7-8.5 us per GEMM on H100/H200/B200; collector/trtllm/collect_gemm.py at
ai-dynamo/aiconfigurator 095f58a5). The curves fitted to them carried that as a 13.7-15.7 us fixed cost per GEMM,
and Llama-3-70B on 8 H200 decoded at batch 1 in 9.38 ms with FP8 weights against 8.42 ms with BF16. A served
FP8 checkpoint has static scales, so llmexplore.kernelfit now fits the static GEMM (the rows less the database's
own compute_scale table).

The invariant, over every dense preset, H100 and H200, TP 1-8 and every runtime: where the weights per GPU
are at least 10 GB in BF16 (the memory-bound regime), FP8 <= 0.95 x BF16. Below it the per-GPU GEMMs are tens
of MB or less and the FP8 kernels' larger fixed cost, measured in the same database, can cancel the saved
bytes: Qwen3-32B at TP8 (8.2 GB per GPU) under vLLM on H200 has measured FP8/BF16 kernel ratios of 1.2-1.4 for
its QKV and O shapes and 0.7-0.9 for its FFN shapes (data/kernels/aic_gemm_h200_vllm.csv, m <= 4), and the
model gives 1.02 for the step. There FP8 may be slower, but never by more than 1.25 x.
"""

from __future__ import annotations

import pytest

from llmexplore import presets
from llmexplore.models.step import decode
from llmexplore.models.step.engine import Deployment

DENSE = [m for m in presets.names("models") if not presets.model(m).is_moe]
RUNTIMES = ("default", "trtllm", "vllm", "sglang", "scalar")
MEMORY_BOUND_GB = 10.0
SMALL = ("qwen3-4b", "llama-3.2-3b")  # under 10 GB of BF16 weights even on one GPU


def _step_ms(model, gpu, tp, runtime, dtype, context):
    dep = Deployment.build(model, gpu, tp, runtime=runtime, weight_dtype=dtype, kv_dtype="bf16")
    return float(decode.step_time(dep, 1, context, "TP")["step_s"]) * 1e3, dep


@pytest.mark.parametrize("gpu", ["h100-sxm", "h200"])
@pytest.mark.parametrize("model", DENSE)
def test_fp8_weights_faster_than_bf16_at_batch_1(model, gpu):
    checked = 0
    for tp in (1, 2, 4, 8):
        for runtime in RUNTIMES:
            for context in (512, 4096):
                bf16, dep = _step_ms(model, gpu, tp, runtime, "bf16", context)
                fp8, _ = _step_ms(model, gpu, tp, runtime, "fp8", context)
                weights_gb = sum(dep.weight_bytes("TP").values()) / 1e9  # per GPU, BF16
                where = f"{model} on {tp} {gpu}, {runtime}, context {context}: FP8 {fp8:.2f} ms, BF16 {bf16:.2f} ms"
                if weights_gb >= MEMORY_BOUND_GB:
                    assert fp8 <= 0.95 * bf16, where
                    checked += 1
                else:
                    assert fp8 <= 1.25 * bf16, where
    if model not in SMALL:  # models of 8B and more reach the memory-bound regime at some TP: it was checked
        assert checked, model


def test_llama3_70b_tp8_h200_the_reported_case():
    # issue 19: 9.74 ms (FP8) against 8.44 ms (BF16) before the fix; FP8 reads half the bytes
    for runtime in ("default", "trtllm"):
        bf16, _ = _step_ms("llama-3-70b", "h200", 8, runtime, "bf16", 1024)
        fp8, _ = _step_ms("llama-3-70b", "h200", 8, runtime, "fp8", 1024)
        assert fp8 < 0.85 * bf16, (runtime, fp8, bf16)

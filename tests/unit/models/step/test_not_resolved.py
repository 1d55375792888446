"""Deployments whose kernels have no fitted curve on their GPU are said to be "not resolved", with the reason,
wherever their numbers are shown (issue 19 §3.2: DeepSeek MLA + MoE decode on MI300X under SGLang reads 2-5x
optimistic against held-out measurements; MI300X has kernel data for its FP8 GEMMs only)."""

from __future__ import annotations

import json

import pytest

from llmexplore import cli
from llmexplore.models.step.engine import Deployment, not_resolved_reason, unfitted_kernels


@pytest.mark.parametrize("model, gpu, runtime, wd, want", [
    ("deepseek-v3", "mi300x", "vllm", "fp8", ("attention_decode", "attention_prefill", "grouped_gemm")),
    ("deepseek-v3", "mi300x", "sglang", "fp8", ("gemm", "attention_decode", "attention_prefill", "grouped_gemm")),
    ("llama-3-70b", "mi300x", "vllm", "fp8", ("attention_decode", "attention_prefill")),
    ("llama-3-70b", "mi300x", "vllm", "bf16", ("gemm", "attention_decode", "attention_prefill")),
    ("deepseek-v3", "h200", "sglang", "fp8", ()),
    ("llama-3-70b", "h100-sxm", "default", "fp8", ()),
    ("llama-3-70b", "gb200", "trtllm", "fp4", ()),  # GB200 borrows B200's curves (a stated note, not unfitted)
    ("llama-3-70b", "mi300x", "scalar", "fp8", ()),  # scalar efficiencies by choice
])
def test_unfitted_kernels(model, gpu, runtime, wd, want):
    dep = Deployment.build(model, gpu, 8, runtime=runtime, weight_dtype=wd)
    assert unfitted_kernels(dep) == want
    why = not_resolved_reason(dep)
    assert (why == "") == (want == ())
    if want:
        assert why.startswith("not resolved: ") and gpu in why and model in why


def test_deepseek_on_mi300x_names_the_measured_error():
    why = not_resolved_reason(Deployment.build("deepseek-v3", "mi300x", 8, runtime="sglang", weight_dtype="fp8"))
    assert "MoE grouped GEMMs" in why and "decode attention" in why and "2-5x optimistic" in why


def test_the_cli_says_it_where_the_numbers_are(capsys):
    assert cli.main(["layouts", "--model", "deepseek-v3", "--gpu", "mi300x", "--ranks", "8", "--batch", "64",
                     "--context", "2000", "--runtime", "vllm", "--weight-dtype", "fp8", "--no-band"]) == 0
    assert "not resolved: mi300x has no vllm kernel data" in capsys.readouterr().out
    assert cli.main(["layouts", "--model", "llama-3-70b", "--gpu", "h100-sxm", "--ranks", "8", "--batch", "64",
                     "--context", "2000", "--no-band", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["not_resolved"] is None
    assert cli.main(["plan", "--model", "deepseek-v3", "--gpu", "mi300x", "--gpus", "16", "--isl", "1000", "--osl",
                     "1000", "--runtime", "sglang", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["not_resolved"]) >= 1 and all(w.startswith("not resolved: mi300x") for w in doc["not_resolved"])

"""``llmexplore prefill`` and the batched prefill model behind it: batch 1 is ``prefill_time``, a batch costs at
least one prompt and at most B prompts, FLOPs scale with B, JSON schema, fp4 on a GPU with and without FP4
tensor cores, bad input as one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from llmexplore import cli, sweeps
from llmexplore.errors import SpecError
from llmexplore.models.step import decode as att
from llmexplore.models.step import prefill as pf
from llmexplore.models.step.engine import Deployment

BASE = ["prefill", "--model", "llama-3-70b", "--gpu", "h100-sxm", "--ranks", "8", "--prompt", "4096"]


def _run(capsys, argv):
    capsys.readouterr()
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _json(capsys, *extra) -> dict:
    code, out, err = _run(capsys, [*BASE, *extra, "--json"])
    assert code == 0 and err == "", err
    return json.loads(out, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))


@pytest.fixture(scope="module")
def llama70():
    return Deployment.build("llama-3-70b", "h100-sxm", 8)


# ---- the model: prefill_time(batch=...) -----------------------------------------------------------------------
def test_batch_one_is_todays_prefill_time(llama70):
    import dataclasses

    S, P = np.array([512, 4096, 32768]), np.array([0, 1024, 0])
    got = pf.prefill_time(llama70, S, P, batch=1)
    same = pf.prefill_time(llama70, S, P)
    # the definition before the batch argument: one sequence, q = S - P, context P + q/2, one logit
    d1 = dataclasses.replace(llama70, q_tokens=1, logits_tokens=None, context_cv=0.0)
    q = S - P
    ref = att.step_time(d1, 1, np.maximum(P + q / 2.0, 1.0), "TP", q_tokens=q, logits_tokens=1)
    for k in ref:
        assert np.array_equal(got[k], ref[k]), k
        assert np.array_equal(same[k], ref[k]), k
    assert np.array_equal(got["flops"], pf.prefill_flops(llama70.model, S, P))


@pytest.mark.parametrize("S, P", [(128, 0), (4096, 0), (4096, 3072), (32768, 0)])
def test_a_batch_costs_at_least_one_prompt_and_at_most_b_prompts(llama70, S, P):
    B = np.array([1, 2, 4, 8, 16, 64])
    r = pf.prefill_time(llama70, S, P, batch=B)
    one = float(pf.prefill_time(llama70, S, P)["prefill_s"])
    assert np.all(r["prefill_s"] >= one * (1 - 1e-12))
    assert np.all(r["prefill_s"] <= B * one * (1 + 1e-12))
    assert np.all(np.diff(r["prefill_s"]) > 0)  # more prompts take longer
    # FLOPs are B times one prompt's; tokens/s counts the new tokens of all B prompts
    assert np.array_equal(r["flops"], B * pf.prefill_flops(llama70.model, S, P))
    assert np.allclose(r["tokens_per_s"], B * (S - P) / r["prefill_s"], rtol=1e-12)


def test_tokens_per_s_grows_with_batch_when_compute_bound(llama70):
    B = np.array([1, 2, 4, 8, 32])
    r = pf.prefill_time(llama70, 4096, batch=B)  # 4,096 tokens per prompt: far past the ridge of the GEMMs
    assert np.all(np.diff(r["tokens_per_s"]) > 0)
    assert r["tokens_per_s"][-1] < 1.25 * r["tokens_per_s"][0]  # compute-bound: batching buys little
    short = pf.prefill_time(llama70, 16, batch=B)  # 16 tokens: memory-bound, batching pays
    assert np.all(np.diff(short["tokens_per_s"]) > 0)
    assert short["tokens_per_s"][-1] > 10 * short["tokens_per_s"][0]


def test_batch_broadcasts_and_is_validated(llama70):
    r = pf.prefill_time(llama70, [1024, 4096], batch=[[1], [4]])
    assert r["prefill_s"].shape == r["flops"].shape == r["mfu"].shape == (2, 2)
    for bad in (0, -1, 2.5, "4", True, [1, 0], 2**25):
        with pytest.raises(SpecError, match="batch must be an integer in"):
            pf.prefill_time(llama70, 1024, batch=bad)
    with pytest.raises(SpecError, match="must broadcast"):
        pf.prefill_time(llama70, [1, 2, 3], batch=[1, 2])


# ---- the command ------------------------------------------------------------------------------------------
def test_cli_batch_one_equals_prefill_time(capsys, llama70):
    doc = _json(capsys)
    r = pf.prefill_time(llama70, 4096)
    assert doc["batch"] == 1 and doc["new_tokens"] == 4096
    assert doc["prefill_ms"] == pytest.approx(float(r["prefill_s"]) * 1e3, rel=1e-12)
    assert doc["per_prompt_ms"] == doc["prefill_ms"]
    assert doc["mfu"] == pytest.approx(float(r["mfu"]), rel=1e-12)
    assert doc["flops"] == float(pf.prefill_flops(llama70.model, 4096))
    assert doc["tokens_per_s"] == pytest.approx(4096 / (doc["prefill_ms"] / 1e3), rel=1e-12)


def test_cli_json_schema_and_values(capsys, llama70):
    doc = _json(capsys, "--batch", "8", "--prefix", "1024")
    for key in ("batch", "prompt_tokens", "prefix_tokens", "new_tokens", "prefill_ms", "per_prompt_ms",
                "tokens_per_s", "prompts_per_s", "flops", "mfu", "achieved_TFLOPS_per_gpu", "attention_ms",
                "core_ms", "ffn_ms", "head_ms", "comm_ms", "overhead_ms", "weights_GB", "kv_GB", "activations_GB",
                "reserve_GB", "total_GB", "usable_GB", "feasible", "reason", "inputs"):
        assert key in doc, key
    assert doc["inputs"] == {"model": "llama-3-70b", "gpu": "h100-sxm", "ranks": 8, "batch": 8, "prompt": 4096,
                             "prefix": 1024, "weight_dtype": "bf16", "kv_dtype": "bf16", "sampler": "fused",
                             "runtime": "default"}
    assert (doc["batch"], doc["prompt_tokens"], doc["prefix_tokens"], doc["new_tokens"]) == (8, 4096, 1024, 3072)
    parts = sum(doc[k] for k in ("attention_ms", "ffn_ms", "head_ms", "comm_ms", "overhead_ms"))
    assert parts == pytest.approx(doc["prefill_ms"], rel=1e-12)
    assert 0 < doc["core_ms"] < doc["attention_ms"]
    assert doc["per_prompt_ms"] == pytest.approx(doc["prefill_ms"] / 8, rel=1e-12)
    assert doc["prompts_per_s"] == pytest.approx(8 / (doc["prefill_ms"] / 1e3), rel=1e-12)
    assert doc["flops"] == pytest.approx(8 * float(pf.prefill_flops(llama70.model, 4096, 1024)), rel=1e-15)
    peak = 8 * 989.4e12  # 8 H100 at the dense BF16 peak
    assert doc["mfu"] == pytest.approx(doc["flops"] / (peak * doc["prefill_ms"] / 1e3), rel=1e-12)
    assert doc["achieved_TFLOPS_per_gpu"] == pytest.approx(doc["mfu"] * 989.4, rel=1e-12)
    # memory: the KV of 8 sequences of 4,096 tokens, TP layout, as memory_per_rank says
    mem = att.memory_per_rank(llama70, 8, 4096, "TP")
    assert doc["kv_GB"] == pytest.approx(float(mem["kv_B"]) / 1e9) and doc["feasible"] and doc["reason"] == ""
    assert doc["total_GB"] == pytest.approx(float(mem["total_B"]) / 1e9)


def test_cli_reports_a_batch_that_does_not_fit(capsys):
    code, out, err = _run(capsys, [*_with("--prompt", "32768"), "--batch", "512", "--json"])
    assert code == 0 and err == ""  # a question without an answer is a result: the numbers, and why
    doc = json.loads(out)
    assert doc["feasible"] is False and doc["total_GB"] > doc["usable_GB"]
    assert doc["reason"] == f"needs {doc['total_GB']:.1f} GB per rank > {doc['usable_GB']:.1f} GB usable"
    assert doc["prefill_ms"] > 0
    code, out, err = _run(capsys, [*_with("--prompt", "32768"), "--batch", "512"])
    assert out.splitlines()[-1].endswith(f"usable: does not fit: {doc['reason']}")


def test_cli_text_output(capsys):
    code, out, err = _run(capsys, [*BASE, "--batch", "8"])
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == ("Llama-3-70B on 8x H100 SXM 80GB, weights bf16, KV bf16; 8 prompts of 4,096 tokens, one "
                        "forward pass")
    assert lines[1].startswith("prefill ") and "tokens/s, MFU 0." in lines[1] and "per prompt" in lines[1]
    assert lines[2].startswith("parts [ms]: attention ")
    assert lines[3].startswith("[lo-hi]: P10-P90 over 16 draws of the kernel-curve parameters")
    assert lines[4].startswith("memory per rank [GB]: weights ") and lines[4].endswith("usable: fits")


def test_json_band_brackets_the_value_and_is_null_without_curves(capsys):
    code, out, _ = _run(capsys, [*BASE, "--json"])
    doc = json.loads(out)
    for key in ("prefill_ms", "per_prompt_ms", "tokens_per_s", "mfu"):
        assert doc[key + "_lo"] <= doc[key + "_hi"]
        assert doc[key + "_lo"] < doc[key] * 1.2 and doc[key + "_hi"] > doc[key] / 1.2
    assert doc["band"]["draws"] == 16 and doc["band"]["percentiles"] == [10.0, 90.0]
    code, out, _ = _run(capsys, [*BASE, "--runtime", "scalar", "--json"])
    doc = json.loads(out)
    assert doc["prefill_ms_lo"] is None and doc["prefill_ms_hi"] is None and doc["band"]["draws"] == 0
    assert "no fitted kernel curves" in doc["band"]["what"]


def test_fp4_weights_run_on_b200_and_use_its_fp4_peak(capsys):
    b200 = ["prefill", "--model", "llama-3-70b", "--gpu", "b200", "--ranks", "8", "--prompt", "4096", "--batch", "8"]
    code, out, err = _run(capsys, [*b200, "--weight-dtype", "fp4", "--kv-dtype", "fp4", "--json"])
    assert code == 0 and err == "", err
    fp4 = json.loads(out)
    code, out, err = _run(capsys, [*b200, "--weight-dtype", "fp8", "--json"])
    fp8 = json.loads(out)
    assert fp4["inputs"]["weight_dtype"] == "fp4" and fp4["inputs"]["kv_dtype"] == "fp4"
    assert fp4["prefill_ms"] < fp8["prefill_ms"]  # twice the peak, fewer weight bytes
    assert fp4["weights_GB"] < fp8["weights_GB"] and fp4["kv_GB"] < fp8["kv_GB"]
    assert fp4["mfu"] == pytest.approx(fp4["flops"] / (8 * 9000e12 * fp4["prefill_ms"] / 1e3), rel=1e-12)


def test_fp4_weights_on_a_gpu_without_fp4_are_one_line(capsys):
    code, out, err = _run(capsys, [*BASE, "--weight-dtype", "fp4"])
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err == ("llmexplore: error: --weight-dtype must be a dtype h100-sxm supports, got 'fp4': h100-sxm has "
                   "no FP4 tensor cores; use bf16 or fp8\n")
    # an FP4 KV cache is a storage format: accepted on any GPU
    code, out, err = _run(capsys, [*BASE, "--kv-dtype", "fp4"])
    assert code == 0 and err == ""


def _with(flag, value):
    argv = list(BASE)
    if flag in argv:
        argv[argv.index(flag) + 1] = value
    else:
        argv += [flag, value]
    return argv


BAD = {
    "prefix not below prompt": (_with("--prefix", "4096"),
                                ["--prefix must be less than --prompt (4,096", "got 4096"]),
    "prefix beyond prompt": (_with("--prefix", "5000"), ["--prefix", "--prompt", "got 5000"]),
    "batch zero": (_with("--batch", "0"), ["--batch must be an integer in [1, 16,777,216], got 0"]),
    "batch non-integer": (_with("--batch", "2.5"), ["--batch", "2.5", "integer"]),
    "prompt zero": (_with("--prompt", "0"), ["--prompt must be an integer in [1, 1,073,741,824], got 0"]),
    "prefix negative": (_with("--prefix", "-1"), ["--prefix must be an integer in [0, 1,073,741,824], got -1"]),
    "ranks do not divide heads": (_with("--ranks", "6"), ["--ranks (6) must divide the query heads"]),
    "ranks missing": (BASE[:5] + BASE[7:], ["required", "--ranks"]),
    "unknown gpu": (_with("--gpu", "h900"), ["--gpu", "h900", "known:", "h100-sxm"]),
    "bad weight dtype": (_with("--weight-dtype", "int4"), ["--weight-dtype", "int4", "fp4", "fp8"]),
    "bad kv dtype": (_with("--kv-dtype", "fp6"), ["--kv-dtype", "fp6", "fp4", "bf16"]),
    "fp4 weights on mi300x": (_with("--gpu", "mi300x") + ["--weight-dtype", "fp4"],
                              ["--weight-dtype", "'fp4'", "mi300x has no FP4 tensor cores"]),
    "flag given twice": (BASE + ["--batch", "2", "--batch", "4"], ["--batch given twice (2 and 4)"]),
}


@pytest.mark.parametrize("argv, needles", list(BAD.values()), ids=list(BAD))
def test_bad_input_is_one_line(capsys, argv, needles):
    code, out, err = _run(capsys, argv)
    assert code == 2 and out == "" and err.startswith("llmexplore: error: ") and err.count("\n") == 1, err
    for needle in needles:
        assert needle in err, (needle, err)


def test_record_errors_name_the_argument(llama70):
    with pytest.raises(SpecError, match="prefix_tokens must be less than prompt_tokens"):
        sweeps.prefill.point_summary(llama70, 100, prefix_tokens=100)
    with pytest.raises(SpecError, match=r"batch must be an integer in \[1, 16,777,216\], got 0"):
        sweeps.prefill.point_summary(llama70, 100, batch=0)
    with pytest.raises(SpecError, match="weight_dtype must be a dtype h200 supports, got 'fp4'"):
        sweeps.prefill.setup("llama-3-70b", "h200", ranks=8, weight_dtype="fp4")

"""Prefill time: FLOPs against the closed form of docs/models.md §2, structure shared with decode."""

import numpy as np
import pytest

from llmexplore.errors import SpecError
from llmexplore.models.step import prefill as pf
from llmexplore.models.step.decode import step_time
from llmexplore.models.step.engine import Deployment


@pytest.fixture(scope="module")
def llama70():
    return Deployment.build("llama-3-70b", "h100-sxm", 8)


def test_flops_closed_form_llama70(llama70):
    # docs/models.md §2: F = 2 N_body (S-P) + L h_q (d_qk + d_v)(S^2 - P^2) + 2 V H. Llama-3-70B config:
    # N_body = 80 layers x (2*8192*8192 + 2*8192*1024 + 3*8192*28672) = 68,451,041,280
    n_body = 80 * (2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 28672)
    assert pf.body_params_active(llama70.model) == n_body
    S = 4096
    expected = 2 * n_body * S + 80 * 64 * 256 * S * S + 2 * 128256 * 8192
    assert float(pf.prefill_flops(llama70.model, S)) == expected
    # attention share 3.8% at 4096 tokens and ~24% at 32k (docs/models.md §4.3)
    for s, share in ((4096, 0.038), (32768, 0.24)):
        attn = 80 * 64 * 256 * s * s
        assert attn / float(pf.prefill_flops(llama70.model, s)) == pytest.approx(share, abs=0.002)


def test_prefix_hits_remove_their_flops(llama70):
    full = float(pf.prefill_flops(llama70.model, 8192))
    hit = float(pf.prefill_flops(llama70.model, 8192, 4096))
    n_body = pf.body_params_active(llama70.model)
    assert full - hit == pytest.approx(2 * n_body * 4096 + 80 * 64 * 256 * 4096**2, rel=1e-12)


def test_moe_counts_only_activated_experts():
    m = Deployment.build("deepseek-v3", "h200", 8, weight_dtype="fp8").model
    # DeepSeek-V3 activated matmul params: attention 61 x 187,105,280 + 3 dense FFN x 396,361,728
    # + 58 x (9 experts x 44,040,192 + router 256 x 7168)
    expected = 61 * 187_105_280 + 3 * 396_361_728 + 58 * (9 * 44_040_192 + 256 * 7168)
    assert pf.body_params_active(m) == expected


def test_prefill_time_matches_the_decode_machinery(llama70):
    r = pf.prefill_time(llama70, [1024, 4096], [0, 1024])
    assert r["prefill_s"].shape == (2,)
    # same as a single-sequence step with q = S - P new tokens at mean context P + q/2, logits for 1 token
    import dataclasses
    d = dataclasses.replace(llama70, q_tokens=3072, logits_tokens=1)
    assert float(r["prefill_s"][1]) == pytest.approx(float(step_time(d, 1, 1024 + 1536, "TP")["step_s"]))


def test_prefill_monotone_and_mfu_sane(llama70):
    S = np.array([256, 1024, 4096, 16384, 65536])
    r = pf.prefill_time(llama70, S)
    assert np.all(np.diff(r["prefill_s"]) > 0)
    assert np.all((r["mfu"] > 0.05) & (r["mfu"] < 0.9))
    assert np.all(np.diff(r["mfu"][:3]) > 0)  # short prompts are overhead/communication bound


def test_mixed_step_is_cheaper_than_two_separate_steps(llama70):
    mixed = pf.mixed_step_time(llama70, 64, 4096, 512, 0)
    dec = float(step_time(llama70, 64, 4096, "TP")["step_s"])
    chunk = float(pf.prefill_time(llama70, 512)["prefill_s"])
    assert dec < mixed["step_s"] < dec + chunk  # weights streamed once for both


def test_bad_prompts():
    dep = Deployment.build("llama-3-8b", "h100-sxm", 1)
    with pytest.raises(SpecError, match=r"prompt_tokens must be an integer in \[1, 1,073,741,824\], got 0"):
        pf.prefill_time(dep, 0)
    for bad in ("8", 4.5, 1j, {"a": 1}, 10**400, [float("nan")]):
        with pytest.raises(SpecError, match="prompt_tokens must be an integer"):
            pf.prefill_time(dep, bad)
    with pytest.raises(SpecError, match="prefix_tokens must be an integer"):
        pf.prefill_time(dep, 100, "8")
    with pytest.raises(SpecError, match="must broadcast"):
        pf.prefill_time(dep, [100, 200], [1, 2, 3])
    with pytest.raises(SpecError, match="prefix_tokens must be < prompt_tokens"):
        pf.prefill_time(dep, 100, 100)

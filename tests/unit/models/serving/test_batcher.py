"""The serving loop as a batcher with an engine seam (llmexplore.models.serving.batcher, issue 18 §3).

The loop's results are pinned by tests/unit/models/serving/test_serving.py and by the behaviour goldens
(tests/behaviour): the
Batcher answers exactly as the loop it replaced. Here: its states, and each hook of the EnginePolicy seam
checked against a closed form (host time per step adds exactly to every iteration, host time per request
shifts a run's clock, a KV budget from the policy is the same as one from the scheduler).
"""

import functools

import numpy as np
import pytest

from llmexplore.errors import SpecError
from llmexplore.models.serving import simulator as sv
from llmexplore.models.serving.batcher import Batcher
from llmexplore.models.serving.engines import DEFAULT_POLICY, EnginePolicy, RequestState, Scheduler, kv_capacity_blocks
from llmexplore.models.serving.step_tables import step_tables
from llmexplore.models.serving.workload import LengthDist, Traffic, requests
from llmexplore.models.step.engine import Deployment

SCHED = Scheduler(max_num_seqs=16, max_num_batched_tokens=512)


@functools.cache
def dep():
    return Deployment.build("llama-3-8b", "h100-sxm", 1, weight_dtype="fp8", kv_dtype="fp8")


@functools.cache
def tables():
    return step_tables(dep(), max_tokens=512, max_batch=16, max_context=4096)


def traffic(**kw):
    return Traffic(isl=LengthDist.lognormal(600, 0.6, 2048), osl=LengthDist.lognormal(80, 0.6, 512), **kw)


def test_every_request_ends_done_and_states_are_an_enum():
    req = requests(traffic(rate_per_s=20.0), 300, 3)
    b = Batcher(tables(), SCHED, 600, req["arrival_s"], req["prompt_tokens"], req["output_tokens"],
                req["prefix_tokens"])
    first, finish, npre, arr, extra, series = b.run()
    assert [RequestState(s) for s in set(b.state)] == [RequestState.DONE]
    assert np.all(finish >= first) and np.all(first >= arr)
    assert npre.sum() > 0  # 600 blocks of 16 tokens at 20 req/s: the run preempts (the victim hook is used)
    assert [s.name for s in RequestState] == ["WAITING", "PREFILLING", "DECODING", "DONE"]


def test_host_time_per_step_adds_to_every_iteration_exactly():
    """Closed loop: the same sequence of iterations, each longer by the policy's step host time."""
    t = traffic(concurrency=12)
    a = sv.simulate_colocated(dep(), t, 200, scheduler=SCHED, tables=tables(), seed=2)
    host = 1.5e-3
    b = sv.simulate_colocated(dep(), t, 200, scheduler=SCHED, tables=tables(), seed=2,
                              policy=EnginePolicy(step_host_s=host))
    np.testing.assert_array_equal(a.series["batch"], b.series["batch"])
    np.testing.assert_allclose(b.series["step_s"], a.series["step_s"] + host, rtol=1e-12)
    assert b.summary["tpot_mean_s"] == pytest.approx(a.summary["tpot_mean_s"] + host, rel=1e-9)


def test_host_time_per_request_shifts_the_run_and_adds_to_ttft():
    """Open loop: every arrival at the scheduler later by h shifts the whole run by h, so each TTFT grows by h
    and nothing else changes."""
    t = traffic(rate_per_s=8.0)
    h = 0.025
    a = sv.simulate_colocated(dep(), t, 300, scheduler=SCHED, tables=tables(), seed=5)
    b = sv.simulate_colocated(dep(), t, 300, scheduler=SCHED, tables=tables(), seed=5,
                              policy=EnginePolicy(request_host_s=h))
    np.testing.assert_allclose(b.requests["ttft_s"], a.requests["ttft_s"] + h, rtol=0, atol=1e-9)
    np.testing.assert_allclose(b.requests["tpot_s"], a.requests["tpot_s"], rtol=1e-9)
    np.testing.assert_array_equal(b.requests["arrival_s"], a.requests["arrival_s"])


def test_host_time_per_prompt_token_adds_tokenisation_to_each_ttft():
    """Open loop: the serving stack's time per prompt token (tokenisation) delays each request by its own prompt's
    time, a + b x prompt tokens (EnginePolicy.request_host); a run whose arrivals are far apart shifts each TTFT
    by exactly that, so the shift follows the prompt length."""
    t = traffic(rate_per_s=0.05)  # 20 s apart: no request waits for another
    a0, b0 = 0.004, 2e-6
    pol = EnginePolicy(request_host_s=a0, request_host_s_per_token=b0)
    a = sv.simulate_colocated(dep(), t, 40, scheduler=SCHED, tables=tables(), seed=3)
    b = sv.simulate_colocated(dep(), t, 40, scheduler=SCHED, tables=tables(), seed=3, policy=pol)
    P = a.requests["prompt_tokens"]
    assert np.ptp(P) > 0  # lengths differ, so the shift must too
    np.testing.assert_allclose(b.requests["ttft_s"] - a.requests["ttft_s"], a0 + b0 * P, rtol=0, atol=1e-9)
    assert pol.request_host(1000) == pytest.approx(a0 + b0 * 1000)


def test_simulate_config_takes_the_presets_stack_time_or_the_callers():
    from llmexplore.sweeps import plan as sp

    cfg = {"model": "llama-3-8b", "gpu": "h100-sxm", "mode": "colocated", "weight_dtype": "bf16", "kv_dtype": "bf16",
           "sides": [{"role": "colocated", "instances": 1, "ranks": 1, "max_num_seqs": 8}]}
    run = dict(isl=512, osl=32, rate_per_s=0.05, n_requests=20, runtime="vllm")
    preset = sp.simulate_config(cfg, **run)["summary"]["ttft_mean_s"]  # vLLM's measured 5.64 ms + 1.25 us/token
    engine = sp.simulate_config(cfg, **run, request_host_ms=0)["summary"]["ttft_mean_s"]  # the pure engine
    assert preset == pytest.approx(engine + 5.64e-3 + 1.25e-6 * 512, abs=1e-9)
    plus = sp.simulate_config(cfg, **run, request_host_ms=30)["summary"]["ttft_mean_s"]
    assert plus == pytest.approx(engine + 0.030, abs=1e-9)
    with pytest.raises(SpecError, match="request_host_ms"):
        sp.simulate_config(cfg, **run, request_host_ms=-1)


def test_host_time_per_request_in_a_closed_loop_delays_each_release():
    t = traffic(concurrency=4)
    h = 0.05
    a = sv.simulate_colocated(dep(), t, 120, scheduler=SCHED, tables=tables(), seed=1)
    b = sv.simulate_colocated(dep(), t, 120, scheduler=SCHED, tables=tables(), seed=1,
                              policy=EnginePolicy(request_host_s=h))
    assert np.nanmin(b.requests["ttft_s"] - h) >= 0
    assert b.summary["ttft_mean_s"] == pytest.approx(a.summary["ttft_mean_s"] + h, rel=0.05)
    assert b.summary["requests_per_s"] < a.summary["requests_per_s"]


def test_a_policy_kv_budget_is_the_scheduler_budget():
    class Small(EnginePolicy):
        name = "small"

        def kv_blocks(self, dep, scheduler):
            return 700

    t = traffic(rate_per_s=15.0)
    a = sv.simulate_colocated(dep(), t, 200, scheduler=Scheduler(max_num_seqs=16, max_num_batched_tokens=512,
                                                                 kv_blocks=700), tables=tables(), seed=4)
    b = sv.simulate_colocated(dep(), t, 200, scheduler=SCHED, tables=tables(), seed=4, policy=Small())
    assert a.kv_blocks == b.kv_blocks == (700,)
    np.testing.assert_array_equal(a.requests["finish_s"], b.requests["finish_s"])
    assert DEFAULT_POLICY.kv_blocks(dep(), SCHED) == kv_capacity_blocks(dep(), SCHED)


def test_an_admission_rule_is_one_override():
    """A stricter admission (keep a quarter of the blocks free) admits later: fewer preemptions, later TTFT."""
    class Cautious(EnginePolicy):
        def admits(self, need_blocks, free_blocks):
            return need_blocks <= free_blocks - 150

    t = traffic(rate_per_s=25.0)
    sched = Scheduler(max_num_seqs=16, max_num_batched_tokens=512, kv_blocks=600)
    a = sv.simulate_colocated(dep(), t, 300, scheduler=sched, tables=tables(), seed=6)
    b = sv.simulate_colocated(dep(), t, 300, scheduler=sched, tables=tables(), seed=6, policy=Cautious())
    assert b.summary["preemptions"] < a.summary["preemptions"]
    assert b.series["kv_blocks"].max() <= a.series["kv_blocks"].max()


@pytest.mark.parametrize("kw, match", [({"step_host_s": -1e-3}, "step_host_s"),
                                       ({"request_host_s": 11}, "request_host_s"),
                                       ({"step_host_s": float("nan")}, "step_host_s")])
def test_bad_host_times_name_their_field(kw, match):
    with pytest.raises(SpecError, match=match):
        EnginePolicy(**kw)


def test_the_simulators_refuse_a_policy_that_is_not_one():
    with pytest.raises(SpecError, match="policy must be an EnginePolicy"):
        sv.simulate_colocated(dep(), traffic(rate_per_s=1.0), 5, policy="vllm")

"""The engine semantics the serving simulator models (llmexplore.models.serving.engines) match what
data/engines.yaml records from each engine's source, and every recorded value carries its source."""

import pytest
import yaml

from llmexplore import presets
from llmexplore.errors import SpecError
from llmexplore.models.serving.engines import ENGINE_POLICIES, TrtllmPolicy, policy_for
from llmexplore.specs import RUNTIME_ENGINES

SCHEDULING = yaml.safe_load((presets.DATA_DIR / "engines.yaml").read_text(encoding="utf-8"))["scheduling"]


def test_every_engine_a_runtime_may_name_has_recorded_semantics():
    assert sorted(SCHEDULING) == sorted(e for e in RUNTIME_ENGINES if e)
    assert sorted(ENGINE_POLICIES) == sorted(RUNTIME_ENGINES)


@pytest.mark.parametrize("engine", sorted(SCHEDULING))
def test_every_recorded_value_has_a_source(engine):
    entry = SCHEDULING[engine]
    values = {**entry["modelled"], **entry["recorded"]}
    missing = [k for k in values if not str(entry["sources"].get(k, "")).strip()]
    assert not missing, f"{engine}: no source for {missing}"


def test_trtllm_policy_follows_the_recorded_defaults():
    rec = SCHEDULING["trtllm"]["modelled"]
    assert list(TrtllmPolicy.CAPACITY_POLICIES) == rec["capacity_scheduler_policies"]
    default = policy_for("trtllm")
    assert default.capacity_scheduler_policy == rec["capacity_scheduler_policy"] == "GUARANTEED_NO_EVICT"
    assert default.reserve_to_completion
    assert default.chunked_prefill is rec["enable_chunked_prefill"] is False


def test_runtime_presets_name_their_engine():
    assert {n: presets.runtime(n).engine for n in ("trtllm", "vllm", "sglang", "default", "scalar")} == {
        "trtllm": "trtllm", "vllm": "vllm", "sglang": "sglang", "default": "", "scalar": ""}


@pytest.mark.parametrize("hbm_GiB, tp, mla, want", [
    (79.65, 1, False, 0.830), (79.65, 8, False, 0.812), (140.4, 1, False, 0.903), (140.4, 8, False, 0.893),
    (179.06, 1, False, 0.854), (179.06, 8, False, 0.849), (179.06, 4, True, 0.846)])
def test_sglang_default_mem_fraction_static(hbm_GiB, tp, mla, want):
    """SGLang's default mem_fraction_static (ServerArgs._handle_gpu_memory_settings, server_args.py at
    sgl-project/sglang 001067ff), worked by hand from its formula for H100 (81,559 MiB), H200 and B200:
    e.g. H100 TP1: reserve 512 + 1.5 x 8192 + 1024 / 8 + 2 x 256 + 58 x 8 = 13,904 MiB, (81,562 - 13,904) /
    81,562 = 0.830."""
    from llmexplore.models.step.engine import sglang_mem_fraction_static

    assert sglang_mem_fraction_static(hbm_GiB, tp, mla=mla) == pytest.approx(want, abs=1e-9)


def test_sglang_kv_pool_is_the_static_share_less_the_weights():
    """KV = mem_fraction_static x (memory free before loading) - weights (SGLang's kv_cache_configurator): Qwen3-32B
    BF16 on 2 H200 keeps ~96 GiB per GPU for KV, DeepSeek-R1 FP8 on 4 B200 none (SGLang's default fraction leaves
    nothing beside 157.5 GiB of weights: the engine refuses to start unless --mem-fraction-static is raised)."""
    from llmexplore.models.step.decode import memory_per_rank
    from llmexplore.models.step.engine import Deployment

    q = Deployment.build("qwen3-32b", "h200", 2, runtime="sglang", weight_dtype="bf16")
    m = memory_per_rank(q, 1, 1, "TP")
    w = float(m["weights_B"])
    assert q.mem_fraction_static == pytest.approx(0.902)
    assert float(m["kv_budget_B"]) == pytest.approx(0.902 * (140.4 - 1.0) * 2**30 - w, rel=1e-9)
    assert 90 < float(m["kv_budget_B"]) / 2**30 < 100
    d = Deployment.build("deepseek-r1", "b200", 4, runtime="sglang", weight_dtype="fp8")
    assert float(memory_per_rank(d, 1, 1, "TP")["kv_budget_B"]) < 0


def test_trtllm_runs_whole_prompts_by_default():
    """TensorRT-LLM's enable_chunked_prefill defaults to False (llm_args.py, serve.py; data/engines.yaml): a prompt
    runs whole in one iteration. With one 3,000-token prompt and a 1,024-token budget the chunked base policy
    takes 3 iterations to its first token, TensorRT-LLM one."""
    import numpy as np

    from llmexplore.models.serving import simulator as sv
    from llmexplore.models.serving.engines import EnginePolicy, Scheduler
    from llmexplore.models.serving.workload import LengthDist, Traffic
    from llmexplore.models.step.engine import Deployment

    assert TrtllmPolicy().chunked_prefill is False and TrtllmPolicy(enable_chunked_prefill=True).chunked_prefill
    assert EnginePolicy().chunked_prefill
    d = Deployment.build("llama-3-8b", "h100-sxm", 1, runtime="trtllm")
    tr = Traffic(rate_per_s=0.01, isl=LengthDist.fixed(3000), osl=LengthDist.fixed(4))
    sch = Scheduler(max_num_seqs=4, max_num_batched_tokens=1024)
    whole = sv.simulate_colocated(d, tr, 1, scheduler=sch, policy=TrtllmPolicy())
    chunked = sv.simulate_colocated(d, tr, 1, scheduler=sch, policy=EnginePolicy())
    assert list(whole.series["prefill_tokens"][:1]) == [3000]
    assert list(chunked.series["prefill_tokens"][:3]) == [1024, 1024, 952]
    assert np.all(whole.series["prefill_tokens"][1:] == 0)
    with pytest.raises(SpecError, match="enable_chunked_prefill"):
        TrtllmPolicy(enable_chunked_prefill="yes")

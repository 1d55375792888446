"""The engine semantics the serving simulator models (llmexplore.models.serving.engines) match what
data/engines.yaml records from each engine's source, and every recorded value carries its source."""

import pytest
import yaml

from llmexplore import presets
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


def test_runtime_presets_name_their_engine():
    assert {n: presets.runtime(n).engine for n in ("trtllm", "vllm", "sglang", "default", "scalar")} == {
        "trtllm": "trtllm", "vllm": "vllm", "sglang": "sglang", "default": "", "scalar": ""}

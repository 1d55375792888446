"""The typed deployment configuration (llmexplore.deployment, issue 18 §2): what plan --json prints loads back
as the same value, the README's hand-written configuration loads with its defaults, and every bad field is one
error naming it."""

import dataclasses
import json

import pytest

from llmexplore.deployment import LAYOUTS, MODES, DeploymentConfig, SideConfig
from llmexplore.errors import SpecError
from llmexplore.sweeps import plan as sp

README = {"model": "qwen3-32b", "gpu": "h200", "mode": "colocated", "weight_dtype": "fp8", "kv_dtype": "fp8",
          "sides": [{"role": "colocated", "instances": 4, "ranks": 8, "layout": "TP", "max_num_seqs": 64,
                     "chunk_tokens": 2048}]}


def pd_doc(**side):
    return {"model": "deepseek-v3", "gpu": "h200", "mode": "disaggregated", "weight_dtype": "fp8",
            "kv_dtype": "fp8", "link": "ib-ndr400",
            "sides": [{"role": "prefill", "instances": 2, "ranks": 8, "layout": "TP", "ep": 8, "max_num_seqs": 1,
                       "chunk_tokens": None, "moe_dispatch": "gather"},
                      {"role": "decode", "instances": 1, "ranks": 16, "layout": "DPA", "ep": 16,
                       "max_num_seqs": 256, "chunk_tokens": None, "moe_dispatch": "alltoall", **side}]}


def test_the_planners_config_round_trips_through_json():
    res = sp.plan(sp.Question(model="qwen3-32b", gpu="h200", gpus=16, isl=2000, osl=300, ttft_ms=1000,
                              tpot_ms=30, weight_dtypes=("fp8",), kv_dtypes=("fp8",)))
    cfg = sp.config_of(res["best"], res["question"])
    doc = json.loads(json.dumps(cfg.to_json()))
    again = DeploymentConfig.from_json(doc)
    assert again == cfg and again.to_json() == doc
    assert DeploymentConfig.from_json(json.dumps(doc)) == cfg  # JSON text too
    assert cfg.gpus == sum(s["instances"] * s["ranks"] for s in doc["sides"]) <= 16
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.mode = "colocated"


def test_a_hand_written_config_gets_its_defaults():
    cfg = DeploymentConfig.from_json(README)
    side = cfg.side("colocated")
    assert (side.ep, side.moe_dispatch, cfg.link, cfg.moe_dispatch) == (1, "gather", None, None)
    moe = DeploymentConfig.from_json(pd_doc(ep=None))
    assert moe.side("decode").ep == 16  # an MoE side without an EP size: all of its ranks
    with pytest.raises(SpecError, match=r"config\['sides'\]\[0\] has no 'ep'"):
        DeploymentConfig.from_json(README, complete=True)  # the launch lines guess nothing


def test_direct_construction_is_validated_too():
    side = SideConfig(role="colocated", instances=1, ranks=3, layout="TP", ep=1, max_num_seqs=8)
    assert DeploymentConfig(model="llama-3-8b", gpu="h100-sxm", mode="colocated", weight_dtype="bf16",
                            kv_dtype="bf16", sides=(side,)).sides == (side,)
    with pytest.raises(SpecError, match=r"config\['mode'\]"):
        DeploymentConfig(model="llama-3-8b", gpu="h100-sxm", mode="both", weight_dtype="bf16", kv_dtype="bf16",
                         sides=(side,))


@pytest.mark.parametrize("edit, match", [
    (lambda d: d.pop("gpu"), r"config has no 'gpu'"),
    (lambda d: d.update(model="llama-9"), r"config\['model'\]"),
    (lambda d: d.update(model=7), r"config\['model'\]"),
    (lambda d: d.update(gpu="h900"), r"config\['gpu'\]"),
    (lambda d: d.update(link="carrier-pigeon"), r"config\['link'\]"),
    (lambda d: d.update(mode="both"), r"config\['mode'\] must be one of"),
    (lambda d: d.update(sides=[]), r"config\['sides'\] must be a non-empty list"),
    (lambda d: d["sides"][1].update(ranks=0), r"config\['sides'\]\[1\]\['ranks'\]"),
    (lambda d: d["sides"][1].update(layout="CP"), r"config\['sides'\]\[1\]\['layout'\]"),
    (lambda d: d["sides"][1].update(ep=3), r"config\['sides'\]\[1\]\['ep'\] \(3\) must divide"),
    (lambda d: d["sides"][1].update(max_num_seqs=1.5), r"config\['sides'\]\[1\]\['max_num_seqs'\]"),
    (lambda d: d["sides"][1].update(moe_dispatch="nccl"), r"config\['sides'\]\[1\]\['moe_dispatch'\]"),
    (lambda d: d["sides"][1].update(role="prefill"), r"config\['sides'\] roles must be"),
    (lambda d: d["sides"].__setitem__(0, "TP8"), r"config\['sides'\]\[0\] must be a mapping"),
])
def test_every_bad_field_is_named(edit, match):
    doc = pd_doc()
    edit(doc)
    with pytest.raises(SpecError, match=match):
        DeploymentConfig.from_json(doc)


def test_not_a_mapping():
    for bad in ([1, 2], "[1, 2]", 3):
        with pytest.raises(SpecError, match="config must be a JSON object"):
            DeploymentConfig.from_json(bad)
    with pytest.raises(SpecError, match="config is not valid JSON"):
        DeploymentConfig.from_json("{nope")


def test_vocabularies_are_the_planners():
    assert MODES == ("colocated", "disaggregated") and LAYOUTS == ("TP", "DPA", "DOP")
    assert set(sp.Question(model="llama-3-8b", gpu="h100-sxm", gpus=8, isl=100, osl=10, ttft_ms=100,
                           tpot_ms=10).modes) == set(MODES)

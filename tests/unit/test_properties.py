"""Property tests (hypothesis): monotonicity and limiting relations every layout model must satisfy.

* step time and memory are non-decreasing in batch and in context, for every layout and model;
* a faster HBM or link is never slower; more HBM is never less feasible;
* scalar and broadcast-array inputs give the same numbers;
* ``sweeps.layouts.best_layout_grid`` picks the argmin of the feasible step times.
"""

import dataclasses
import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from llmexplore import presets, sweeps
from llmexplore.errors import SpecError
from llmexplore.models.step import decode as att
from llmexplore.models.step.engine import LAYOUTS, Deployment
from llmexplore.models.step.collectives import Fabric

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
REL = 1e-12  # floating-point slack for "non-decreasing"

MODELS = presets.names("models")
GPUS = ["h100-sxm", "h200", "b200", "mi300x"]


@functools.lru_cache(maxsize=None)
def _dep(model, gpu, ranks, weight_dtype, kv_dtype, q_tokens, cv):
    try:
        return Deployment.build(model, gpu, ranks, weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                                q_tokens=q_tokens, context_cv=cv)
    except SpecError:
        return None


@st.composite
def deployments(draw):
    dep = _dep(draw(st.sampled_from(MODELS)), draw(st.sampled_from(GPUS)),
               draw(st.sampled_from([1, 2, 4, 8, 16])), draw(st.sampled_from(["bf16", "fp8"])),
               draw(st.sampled_from(["bf16", "fp8"])), draw(st.sampled_from([1, 2])),
               draw(st.sampled_from([0.0, 0.5])))
    assume(dep is not None)  # ranks must divide heads, FFN, experts (validated by Deployment)
    return dep


batches = st.integers(min_value=1, max_value=1024)
contexts = st.integers(min_value=1, max_value=1 << 20)
layouts = st.sampled_from(LAYOUTS)


def _step(dep, b, s, lay):
    return float(att.step_time(dep, b, s, lay)["step_s"])


def _total(dep, b, s, lay):
    return float(att.memory_per_rank(dep, b, s, lay)["total_B"])


@SETTINGS
@given(dep=deployments(), lay=layouts, b=batches, db=st.integers(1, 300), s=contexts)
def test_non_decreasing_in_batch(dep, lay, b, db, s):
    assert _step(dep, b + db, s, lay) >= _step(dep, b, s, lay) * (1 - REL)
    assert _total(dep, b + db, s, lay) >= _total(dep, b, s, lay) * (1 - REL)


@SETTINGS
@given(dep=deployments(), lay=layouts, b=batches, s=contexts, ds=st.integers(1, 100_000))
def test_non_decreasing_in_context(dep, lay, b, s, ds):
    assert _step(dep, b, s + ds, lay) >= _step(dep, b, s, lay) * (1 - REL)
    assert _total(dep, b, s + ds, lay) >= _total(dep, b, s, lay) * (1 - REL)


def _faster(link, k):
    return dataclasses.replace(link, line_rate_GBps=link.line_rate_GBps * k,
                               achievable_GBps=link.achievable_GBps * k)


@SETTINGS
@given(dep=deployments(), lay=layouts, b=batches, s=contexts, k=st.floats(1.0, 20.0))
def test_faster_hbm_never_slower(dep, lay, b, s, k):
    fast = dataclasses.replace(dep, hardware=dataclasses.replace(dep.hardware,
                                                                 hbm_bw_TBps=dep.hardware.hbm_bw_TBps * k))
    assert _step(fast, b, s, lay) <= _step(dep, b, s, lay) * (1 + REL)


@SETTINGS
@given(dep=deployments(), lay=layouts, b=batches, s=contexts, k_up=st.floats(1.0, 20.0),
       k_out=st.floats(1.0, 20.0))
def test_faster_link_never_slower(dep, lay, b, s, k_up, k_out):
    fab = dep.fabric
    faster = Fabric(scale_up=_faster(fab.scale_up, k_up),
                    scale_out=_faster(fab.scale_out, k_out) if fab.scale_out else None,
                    gpus_per_node=fab.gpus_per_node)
    fast = dataclasses.replace(dep, fabric=faster)
    assert _step(fast, b, s, lay) <= _step(dep, b, s, lay) * (1 + REL)
    comm_fast = float(att.step_time(fast, b, s, lay)["comm_s"])
    assert comm_fast <= float(att.step_time(dep, b, s, lay)["comm_s"]) * (1 + REL)


@SETTINGS
@given(dep=deployments(), lay=layouts, b=batches, s=contexts, k=st.floats(1.0, 4.0))
def test_more_hbm_never_less_feasible(dep, lay, b, s, k):
    big = dataclasses.replace(dep, hardware=dataclasses.replace(dep.hardware, hbm_GiB=dep.hardware.hbm_GiB * k))
    small_ok = bool(att.memory_per_rank(dep, b, s, lay)["feasible"])
    big_ok = bool(att.memory_per_rank(big, b, s, lay)["feasible"])
    assert big_ok or not small_ok
    assert att.max_batch(big, s, lay, limit=4096) >= att.max_batch(dep, s, lay, limit=4096)


@SETTINGS
@given(dep=deployments(), lay=layouts, bs=st.lists(batches, min_size=1, max_size=4),
       ss=st.lists(contexts, min_size=1, max_size=4))
def test_scalar_equals_broadcast(dep, lay, bs, ss):
    grid_t = att.step_time(dep, np.array(bs)[:, None], np.array(ss)[None, :], lay)
    grid_m = att.memory_per_rank(dep, np.array(bs)[:, None], np.array(ss)[None, :], lay)
    assert grid_t["step_s"].shape == grid_m["total_B"].shape == (len(bs), len(ss))
    for i, b in enumerate(bs):
        for j, s in enumerate(ss):
            one_t = att.step_time(dep, b, s, lay)
            one_m = att.memory_per_rank(dep, b, s, lay)
            for key in ("step_s", "comm_s", "core_s", "tokens_per_s"):
                # equal to the last bit or two: numpy's vectorised pow (the soft roofline's knee) may round
                # an array element one ulp away from the same scalar
                assert float(one_t[key]) == pytest.approx(float(grid_t[key][i, j]), rel=1e-13, abs=0)
            for key in ("total_B", "kv_B", "feasible"):
                assert float(one_m[key]) == float(grid_m[key][i, j])


@SETTINGS
@given(dep=deployments(), bs=st.lists(batches, min_size=1, max_size=3),
       ss=st.lists(contexts, min_size=1, max_size=3))
def test_best_layout_grid_is_argmin_of_feasible(dep, bs, ss):
    b, s = np.array(bs)[:, None], np.array(ss)[None, :]
    g = sweeps.layouts.best_layout_grid(dep, b, s)
    for i, bb in enumerate(bs):
        for j, cc in enumerate(ss):
            times = {lay: _step(dep, bb, cc, lay) for lay in LAYOUTS
                     if bool(att.memory_per_rank(dep, bb, cc, lay)["feasible"])}
            if not times:
                assert g["best"][i, j] == -1 and np.isinf(g["best_step_s"][i, j])
                continue
            best = min(times.values())
            chosen = LAYOUTS[g["best"][i, j]]
            # grid and scalar evaluations agree to an ulp or two (vectorised pow in the soft roofline), so the
            # chosen layout is a best one within that rounding
            assert chosen in times and times[chosen] == pytest.approx(best, rel=1e-13, abs=0)
            assert g["best_step_s"][i, j] == pytest.approx(best, rel=1e-13, abs=0)

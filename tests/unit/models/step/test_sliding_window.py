"""Sliding-window attention layers (gpt-oss, issue 21 §3): their KV, attention time, prefill FLOPs and transfer
bytes are bounded by the window; every other model is unchanged."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from llmexplore import presets
from llmexplore.errors import SpecError
from llmexplore.models.step.decode import layers_core_s, memory_per_rank, step_time
from llmexplore.models.step.engine import Deployment
from llmexplore.models.step.kv_transfer import kv_request_bytes
from llmexplore.models.step.prefill import prefill_flops


def pair():
    d = Deployment.build("gpt-oss-120b", "h200", 1)
    full = dataclasses.replace(d, model=d.model.replace(sliding_layers=0, sliding_window=0))
    return d, full


def test_within_the_window_nothing_changes():
    d, full = pair()
    for f in ("kv_B", "total_B"):
        assert float(memory_per_rank(d, 8, 128, "TP")[f]) == float(memory_per_rank(full, 8, 128, "TP")[f])
    assert float(step_time(d, 8, 100, "TP")["step_s"]) == pytest.approx(float(step_time(full, 8, 100, "TP")["step_s"]))


def test_beyond_the_window_kv_and_attention_grow_at_half_the_rate():
    d, full = pair()
    s = np.array([4096.0, 65536.0])
    kv, kv_full = memory_per_rank(d, 16, s, "TP")["kv_B"], memory_per_rank(full, 16, s, "TP")["kv_B"]
    np.testing.assert_allclose(kv / kv_full, (s + 128) / (2 * s), rtol=0.01)  # pages of 16: 128 = 8 pages
    core, core_full = layers_core_s(d, 16, s, "TP", 1), layers_core_s(full, 16, s, "TP", 1)
    # the sliding layers keep their fixed kernel cost: the ratio tends to 1/2 as the context grows
    assert core[0] / core_full[0] < 0.7 and core[1] / core_full[1] == pytest.approx(0.51, abs=0.02)


def test_prefill_flops_and_kv_transfer_are_bounded_by_the_window():
    m = presets.model("gpt-oss-120b")
    full = m.replace(sliding_layers=0, sliding_window=0)
    assert float(prefill_flops(m, 100)) == pytest.approx(float(prefill_flops(full, 100)))
    S = 32768
    assert float(prefill_flops(m, S)) < float(prefill_flops(full, S))
    b, bf = kv_request_bytes(m, S)["logical_B"], kv_request_bytes(full, S)["logical_B"]
    assert float(b) == pytest.approx(float(bf) * (S + 128) / (2 * S))


def test_other_models_are_unchanged():
    m = presets.model("llama-3-70b")
    assert m.kv_layer_tokens(5000) == 80 * 5000 and m.sliding_layers == 0


@pytest.mark.parametrize("kw, words", [(dict(sliding_window=128, sliding_layers=0), "go together"),
                                       (dict(sliding_window=0, sliding_layers=4), "go together"),
                                       (dict(sliding_window=128, sliding_layers=37), "1 to layers = 36")])
def test_bad_sliding_windows_are_named(kw, words):
    with pytest.raises(SpecError, match=words):
        presets.model("gpt-oss-120b").replace(**kw)

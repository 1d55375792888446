"""The decode step per output token (llmexplore.models.step.per_token, docs/models.md §1.6): one door for plain
decoding, pipelines and speculative decoding, whose parts add up to the time per output token."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from llmexplore.errors import SpecError
from llmexplore.models.step import per_token as pt
from llmexplore.models.step import pipeline as pl
from llmexplore.models.step import speculative as sp
from llmexplore.models.step.decode import max_batch, max_context, memory_per_rank, step_time
from llmexplore.models.step.engine import LAYOUTS, Deployment

DSV3 = Deployment.build("deepseek-v3", "h200", 8, weight_dtype="fp8")
LLAMA = Deployment.build("llama-3-70b", "h100-sxm", 4)
B = np.array([1, 8, 64, 256])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_plain_decoding_is_the_decode_step_exactly(layout):
    r = pt.token_time(DSV3, B[:, None], np.array([512.0, 8192.0]), layout)
    st_ = step_time(DSV3, B[:, None], np.array([512.0, 8192.0]), layout)
    for k in ("attention_s", "core_s", "ffn_s", "head_s", "comm_s", "overhead_s"):
        np.testing.assert_array_equal(r[k], st_[k])
    np.testing.assert_array_equal(r["tpot_s"], st_["step_s"])
    np.testing.assert_array_equal(r["iteration_s"], st_["step_s"])
    m = pt.token_memory(DSV3, 64, 8192, layout)
    assert float(m["total_B"]) == float(memory_per_rank(DSV3, 64, 8192, layout)["total_B"])
    assert float(pt.token_max_batch(DSV3, 8192, layout)) == float(max_batch(DSV3, 8192, layout))
    assert float(pt.token_max_context(DSV3, 64, layout)) == float(max_context(DSV3, 64, layout))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_pipeline_is_its_time_between_tokens(layout):
    r = pt.token_time(DSV3, B, 4096, layout, pp=2)
    ref = pl.pp_decode(DSV3, 2, B, 4096, layout)
    np.testing.assert_allclose(r["tpot_s"], ref["itl_s"], rtol=1e-15)
    np.testing.assert_allclose(r["hops_s"], ref["hops_s"], rtol=1e-15)
    np.testing.assert_allclose(r["stall_s"], ref["itl_s"] - ref["cycle_s"], rtol=1e-12, atol=1e-18)
    np.testing.assert_allclose(r["tokens_per_s"], B / ref["itl_s"], rtol=1e-15)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_speculative_decoding_is_draft_plus_verify_over_the_accepted_length(layout):
    r = pt.token_time(DSV3, B, 4096, layout, speculative="deepseek-mtp-1")
    ref = sp.spec_step(DSV3, "deepseek-mtp-1", B, 4096, layout)
    np.testing.assert_allclose(r["tpot_s"], ref["tpot_s"], rtol=1e-15)
    np.testing.assert_allclose(r["iteration_s"], ref["cycle_s"], rtol=1e-15)
    np.testing.assert_allclose(r["tokens_per_step"], 1.875)  # the preset's 1 + 0.875
    mem = pt.token_memory(DSV3, 64, 4096, layout, speculative="deepseek-mtp-1")
    ref_m = sp.spec_memory(DSV3, "deepseek-mtp-1", 64, 4096, layout)
    assert float(mem["total_B"]) == float(ref_m["total_B"]) and float(mem["draft_weights_B"]) > 0


@settings(max_examples=40, deadline=None)
@given(layout=st.sampled_from(LAYOUTS), batch=st.integers(1, 2048), context=st.floats(1, 1 << 18),
       how=st.sampled_from([{}, {"pp": 2}, {"pp": 5}, {"speculative": "deepseek-mtp-3"}, {"speculative": "ngram-5"}]))
def test_property_the_parts_add_up_to_the_time_per_output_token(layout, batch, context, how):
    r = pt.token_time(DSV3, batch, context, layout, **how)
    total = sum(r[k] for k in pt.PARTS)
    np.testing.assert_allclose(total, r["tpot_s"], rtol=1e-12)
    assert np.all(r["tpot_s"] > 0) and np.all(r["stall_s"] >= 0)
    np.testing.assert_allclose(r["tpot_s"] * r["tokens_per_step"], r["iteration_s"], rtol=1e-12)


def test_memory_limits_are_token_exact_for_pipelines_and_speculation():
    """The longest context that fits: a page's end for a pipeline, k tokens before one with speculative decoding
    (its verify pass pages the k draft tokens too)."""
    P = DSV3.runtime.page_tokens
    for how, k in (({"pp": 2}, 0), ({"speculative": "deepseek-mtp-1"}, 1), ({"speculative": "deepseek-mtp-3"}, 3)):
        s = float(pt.token_max_context(DSV3, 64, "TP", **how, limit=1 << 22))
        assert (s + k) % P == 0 and s > 0
        assert bool(pt.token_memory(DSV3, 64, s, "TP", **how)["feasible"])
        assert not bool(pt.token_memory(DSV3, 64, s + 1, "TP", **how)["feasible"])
        b = int(pt.token_max_batch(DSV3, 8192, "DPA", **how))
        ok = pt.token_memory(DSV3, [b, b + 1], 8192, "DPA", **how)["feasible"]
        assert ok.tolist() == [True, False]
    # a pipeline's worst stage holds about half the weights: more context fits than without one
    assert float(pt.token_max_context(DSV3, 64, "TP", pp=2)) > 2 * float(max_context(DSV3, 64, "TP"))


@pytest.mark.parametrize("kw, words", [
    (dict(pp=2, speculative="ngram-5"), "pp (2) must be 1 when decoding speculatively with 'ngram-5'"),
    (dict(pp=81), "pp (81) must be at most the layers of llama-3-70b (80)"),
    (dict(speculative="deepseek-mtp-1"), "speculative 'deepseek-mtp-1' drafts with an MTP module, and llama-3-70b "
                                         "has none"),
    (dict(pp=0), "pp must be an integer in [1, 128]"),
])
def test_bad_decodings_get_one_line_naming_the_argument(kw, words):
    with pytest.raises(SpecError) as exc:
        pt.token_time(LLAMA, 8, 1000, **kw)
    assert words in str(exc.value) and "\n" not in str(exc.value)


def test_the_decoding_label_says_how_it_decodes():
    assert pt.decoding_label() == "" and pt.decoding_label(4) == "PP4"
    spec = sp.user_spec(DSV3.model, "deepseek-mtp-1", 1.6)
    assert pt.decoding_label(1, spec) == "deepseek-mtp-1 (1.60 tokens per step)"
    with pytest.raises(SpecError, match="accepted_length must come with speculative"):
        sp.user_spec(DSV3.model, None, 1.6)

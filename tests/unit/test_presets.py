"""Presets: every built-in entry loads with a source for each number; user files add and override entries;
unknown names and keys are reported with the known/allowed ones. Global preset state is restored after
every test (``isolated_presets``)."""

import math
import os
import textwrap

import pytest

from llmexplore import presets
from llmexplore.errors import SpecError, UnknownPresetError
from llmexplore.specs import (TARGET_STATS, GpuPower, Hardware, Link, ModelSpec, PriceTier, Runtime, SpecDecode,
                             StorageTier, Targets)

KIND_CLASSES = {"models": ModelSpec, "hardware": Hardware, "links": Link, "runtime": Runtime, "storage": StorageTier,
                "targets": Targets, "speculative": SpecDecode, "prices": PriceTier, "power": GpuPower}
ALL_PRESETS = [(kind, name) for kind in presets.KINDS for name in presets.names(kind)]


@pytest.fixture
def isolated_presets(monkeypatch):
    """No user files, no LLMEXPLORE_PRESETS; caches cleared before and after."""
    monkeypatch.setattr(presets, "_user_files", [])
    monkeypatch.delenv("LLMEXPLORE_PRESETS", raising=False)
    presets.clear_cache()
    yield
    presets.clear_cache()


def _write(tmp_path, text, name="user.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text), encoding="utf-8")
    return p


USER_FILE = """
models:
  tiny-gqa:
    attention: gqa
    layers: 2
    hidden: 256
    heads: 4
    kv_heads: 2
    head_dim: 64
    intermediate: 512
    vocab: 1000
    sources: {"*": "made up for a test"}
  llama-3-8b:          # overrides the built-in entry
    attention: gqa
    layers: 7
    hidden: 4096
    heads: 32
    kv_heads: 8
    head_dim: 128
    intermediate: 14336
    vocab: 128256
    sources: {"*": "user override"}
links:
  slow-link:
    kind: scale-out
    line_rate_GBps: 1
    achievable_GBps: 0.5
    latency_us: 100
    sources: {"*": "test"}
"""


def test_builtin_tables_are_not_empty():
    # the presets the design reference relies on (docs/models.md §2 and §7.1-7.2)
    assert {"llama-3-8b", "llama-3-70b", "llama-3.2-3b", "qwen3-4b", "qwen3-32b", "deepseek-v3"} <= set(
        presets.names("models"))
    # the MLPerf Inference models (issue 10, deployment planning) and their server-scenario targets
    assert {"llama-2-70b", "llama-3.1-405b", "mixtral-8x7b", "deepseek-r1"} <= set(presets.names("models"))
    assert {"mlperf-llama-2-70b-server", "mlperf-llama-2-70b-interactive", "mlperf-llama-3.1-405b-server",
            "mlperf-mixtral-8x7b-server", "mlperf-deepseek-r1-server"} <= set(presets.names("targets"))
    assert {"h100-sxm", "h200", "b200", "mi300x"} <= set(presets.names("hardware"))
    assert {"nvlink4", "ib-ndr400"} <= set(presets.names("links"))
    assert "default" in presets.names("runtime")


@pytest.mark.parametrize("kind, name", ALL_PRESETS)
def test_every_preset_loads_and_every_number_is_sourced(kind, name):
    spec = presets.table(kind)[name]
    assert isinstance(spec, KIND_CLASSES[kind])
    assert spec.name == name
    assert spec.unsourced_fields() == []


@pytest.mark.parametrize("name", presets.names("hardware"))
def test_hardware_links_resolve(name):
    hw = presets.hardware(name)
    assert presets.link(hw.scale_up_link).kind == "scale-up"
    if hw.scale_out_link:
        assert presets.link(hw.scale_out_link).kind == "scale-out"


def test_unsourced_field_is_reported():
    row = presets.model("llama-3-8b")
    bare = row.replace(sources={"layers": "config.json"})
    missing = bare.unsourced_fields()
    assert "layers" not in missing
    assert {"hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab"} <= set(missing)
    # optional fields left at their default need no source
    assert "moe_layers" not in missing and "q_lora_rank" not in missing


@pytest.mark.parametrize("getter, kind", [(presets.model, "models"), (presets.hardware, "hardware"),
                                          (presets.link, "links"), (presets.runtime, "runtime"),
                                          (presets.storage, "storage"), (presets.target, "targets")])
def test_unknown_preset_lists_known_names(getter, kind):
    with pytest.raises(UnknownPresetError) as exc:
        getter("no-such-preset")
    msg = str(exc.value)
    assert "'no-such-preset'" in msg
    for known in presets.names(kind):
        assert known in msg
    assert isinstance(exc.value, KeyError)
    assert not msg.startswith('"')  # plain message, not KeyError's quoted repr


def test_unknown_kind():
    with pytest.raises(UnknownPresetError, match="no preset kind 'gpus'"):
        presets.table("gpus")


def test_resolve_accepts_spec_or_name():
    m = presets.model("llama-3-8b")
    assert presets.resolve("models", m) is m
    assert presets.resolve("models", "llama-3-8b") == m


def test_add_file_adds_and_overrides(isolated_presets, tmp_path):
    builtin_layers = presets.model("llama-3-8b").layers
    assert builtin_layers == 32  # meta-llama/Meta-Llama-3-8B config.json num_hidden_layers
    presets.add_file(_write(tmp_path, USER_FILE))
    assert presets.model("tiny-gqa").kv_heads == 2
    assert presets.model("llama-3-8b").layers == 7
    assert presets.model("llama-3-8b").source_of("layers") == "user override"
    assert presets.link("slow-link").achievable_GBps == 0.5
    # built-ins not overridden are still there
    assert presets.model("llama-3-70b").layers == 80
    assert presets.link("nvlink4").achievable_GBps == 370


def test_state_is_restored_after_user_file(isolated_presets):
    # runs after test_add_file_adds_and_overrides in file order: the override must be gone
    assert "tiny-gqa" not in presets.names("models")
    assert presets.model("llama-3-8b").layers == 32


def test_env_variable_adds_and_overrides(isolated_presets, tmp_path, monkeypatch):
    other = _write(tmp_path, """
        hardware:
          h100-sxm:
            hbm_GiB: 96
            hbm_bw_TBps: 3.35
            bf16_TFLOPS: 989.4
            fp8_TFLOPS: 1978.9
            scale_up_link: nvlink4
            sources: {"*": "user"}
        """, name="hw.yaml")
    user = _write(tmp_path, USER_FILE)
    monkeypatch.setenv("LLMEXPLORE_PRESETS", os.pathsep.join([str(user), str(other)]))
    presets.clear_cache()
    assert presets.model("tiny-gqa").layers == 2
    assert presets.model("llama-3-8b").layers == 7
    assert presets.hardware("h100-sxm").hbm_GiB == 96
    monkeypatch.delenv("LLMEXPLORE_PRESETS")
    presets.clear_cache()
    assert presets.hardware("h100-sxm").hbm_GiB == 79.65  # the built-in value is back
    assert "tiny-gqa" not in presets.names("models")


def test_env_variable_missing_file(isolated_presets, tmp_path, monkeypatch):
    missing = tmp_path / "nope.yaml"
    monkeypatch.setenv("LLMEXPLORE_PRESETS", str(missing))
    presets.clear_cache()
    with pytest.raises(SpecError, match="LLMEXPLORE_PRESETS names .*nope.yaml.*does not exist"):
        presets.model("llama-3-8b")


def test_add_file_missing(isolated_presets, tmp_path):
    with pytest.raises(SpecError, match="does not exist"):
        presets.add_file(tmp_path / "missing.yaml")


def test_user_file_unknown_key_rejected(isolated_presets, tmp_path):
    presets.add_file(_write(tmp_path, """
        models:
          typo-model:
            attention: gqa
            layers: 2
            hidden: 256
            heads: 4
            kv_heads: 2
            head_dim: 64
            intermediate: 512
            vocab: 1000
            num_layers: 2
        """))
    with pytest.raises(SpecError) as exc:
        presets.model("typo-model")
    msg = str(exc.value)
    assert "user.yaml" in msg  # the origin file is named
    assert "unknown keys ['num_layers']" in msg
    assert "allowed keys are" in msg and "'layers'" in msg


def test_user_file_unknown_section_rejected(isolated_presets, tmp_path):
    presets.add_file(_write(tmp_path, "gpus:\n  x: {}\n"))
    with pytest.raises(SpecError, match=r"unknown sections \['gpus'\]"):
        presets.model("llama-3-8b")


def test_user_file_invalid_value_names_field_and_value(isolated_presets, tmp_path):
    presets.add_file(_write(tmp_path, """
        hardware:
          broken-gpu:
            hbm_GiB: 0
            hbm_bw_TBps: 1
            bf16_TFLOPS: 1
            fp8_TFLOPS: 1
            scale_up_link: nvlink4
        """))
    with pytest.raises(SpecError, match=r"user.yaml: Hardware 'broken-gpu': hbm_GiB must be a finite number in "
                                        r"\[1e-6, 1e9\] \[GiB\], got 0"):
        presets.hardware("broken-gpu")


def test_user_file_not_yaml(isolated_presets, tmp_path):
    presets.add_file(_write(tmp_path, "models: [unclosed\n"))
    with pytest.raises(SpecError, match="is not valid YAML"):
        presets.model("llama-3-8b")


# ---- hostile preset files: one SpecError naming the file, the entry, the field, the value and the rule ------
_GPU = """
    hardware:
      lab-gpu:
        hbm_GiB: {hbm}
        hbm_bw_TBps: 1
        bf16_TFLOPS: 1
        fp8_TFLOPS: 1
        scale_up_link: nvlink4
    """


def test_user_file_with_a_byte_order_mark_loads(isolated_presets, tmp_path):
    path = tmp_path / "bom.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + textwrap.dedent(_GPU.format(hbm=40)).encode())
    presets.add_file(path)
    assert presets.hardware("lab-gpu").hbm_GiB == 40


def test_user_file_not_utf8_is_one_clear_error(isolated_presets, tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(textwrap.dedent(_GPU.format(hbm=40)).replace("lab-gpu", "caf\xe9").encode("latin-1"))
    presets.add_file(path)
    with pytest.raises(SpecError, match=r"latin1.yaml' must be UTF-8 text, got byte 0xe9 on line 3") as exc:
        presets.hardware("h100-sxm")
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("text, needles", [
    ("hardware:\n  a: {hbm_GiB: 1}\n  a: {hbm_GiB: 2}\n", ["duplicate key 'a'", "first given on line 2", "line 3"]),
    (_GPU.format(hbm=40).replace("hbm_bw_TBps", "hbm_GiB: 80\n        hbm_bw_TBps"),
     ["duplicate key 'hbm_GiB'", "first given on line 4", "line 5"]),
])
def test_duplicate_keys_are_rejected_not_merged(isolated_presets, tmp_path, text, needles):
    presets.add_file(_write(tmp_path, text))
    with pytest.raises(SpecError) as exc:
        presets.hardware("h100-sxm")
    for needle in ["user.yaml", *needles]:
        assert needle in str(exc.value)


def test_a_section_that_is_not_a_mapping(isolated_presets, tmp_path):
    presets.add_file(_write(tmp_path, "hardware: h100\n"))
    with pytest.raises(SpecError, match=r"user.yaml: section 'hardware' must be a mapping of preset name -> "
                                        r"fields, got 'h100'"):
        presets.hardware("h100-sxm")
    presets.clear_cache()
    assert presets.model("llama-3-8b").layers == 32  # other sections of the file are still readable


@pytest.mark.parametrize("hbm, rule", [
    ("9" * 400, r"hbm_GiB must be a finite number in \[1e-6, 1e9\] \[GiB\], got 9999"),
    ("1.0e+400", r"hbm_GiB must be a finite number in \[1e-6, 1e9\] \[GiB\], got inf"),
    ('"80"', r"hbm_GiB must be a finite number in \[1e-6, 1e9\] \[GiB\], got '80'"),
    ("true", r"hbm_GiB must be a finite number in \[1e-6, 1e9\] \[GiB\], got True"),
    ("[1, 2]", r"hbm_GiB must be a finite number in \[1e-6, 1e9\] \[GiB\], got \[1, 2\]"),
])
def test_hostile_numbers_name_entry_field_value_and_rule(isolated_presets, tmp_path, hbm, rule):
    presets.add_file(_write(tmp_path, _GPU.format(hbm=hbm)))
    with pytest.raises(SpecError, match=r"user.yaml: Hardware 'lab-gpu': " + rule) as exc:
        presets.hardware("lab-gpu")
    assert len(str(exc.value)) < 400


def test_spec_booleans_must_be_real_booleans(isolated_presets, tmp_path):
    presets.add_file(_write(tmp_path, """
        models:
          tiny:
            attention: gqa
            layers: 2
            hidden: 256
            heads: 4
            kv_heads: 2
            head_dim: 64
            intermediate: 512
            vocab: 1000
            tie_embeddings: "yes"
        """))
    with pytest.raises(SpecError, match=r"ModelSpec 'tiny': tie_embeddings must be true or false, got 'yes'"):
        presets.model("tiny")


def test_files_over_the_size_limit_are_rejected_before_parsing(isolated_presets, tmp_path, monkeypatch):
    path = tmp_path / "big.yaml"
    path.write_text("# padding\n" * (presets.MAX_PRESET_BYTES // 10 + 1))
    presets.add_file(path)

    real_load = presets.yaml.load

    def load(text, **kw):
        assert len(text) <= presets.MAX_PRESET_BYTES, "a file over the limit must not be parsed"
        return real_load(text, **kw)

    monkeypatch.setattr(presets.yaml, "load", load)
    with pytest.raises(SpecError, match=r"big.yaml' must be at most 1,048,576 bytes \(1 MiB\), got 1,048,58"):
        presets.model("llama-3-8b")


def test_c_loader_is_used_where_available():
    import yaml

    if hasattr(yaml, "CSafeLoader"):
        assert issubclass(presets._PresetLoader, yaml.CSafeLoader)


@pytest.mark.parametrize("value", [8, None, ["h100-sxm"], {"name": "h100-sxm"}])
def test_a_preset_name_that_is_not_text_is_a_spec_error(value):
    with pytest.raises(SpecError, match=r"gpu must be a hardware preset name \(text\) or a Hardware, got"):
        presets.resolve("hardware", value)


def test_hardware_links_must_exist_and_are_blamed_on_the_entry(isolated_presets, tmp_path):
    presets.add_file(_write(tmp_path, _GPU.format(hbm=40).replace("scale_up_link: nvlink4",
                                                                  "scale_up_link: nvlink9")))
    with pytest.raises(SpecError, match=r"user.yaml: Hardware 'lab-gpu': scale_up_link must name a links preset, "
                                        r"got 'nvlink9'; known: nvlink4"):
        presets.hardware("h100-sxm")



def test_a_special_file_is_read_no_further_than_the_limit(monkeypatch):
    """/dev/zero reports size 0 and never ends: the reader stops at the limit instead of hanging."""
    from llmexplore import _check

    with pytest.raises(SpecError, match="must be at most 1,024 bytes, got more"):
        _check.read_text("/dev/zero", "preset file '/dev/zero'", 1024)


# ---- latency targets (data/targets.yaml, Targets) -----------------------------------------------------------
_TARGET = """
    targets:
      lab-chat:
        display_name: Lab chat SLO
        ttft_ms: {ttft}
        tpot_ms: {tpot}
        stat: {stat}
        {extra}
        sources: {{"*": "our product requirement"}}
    """


def _target_file(tmp_path, ttft="500", tpot="50", stat="p90", extra=""):
    return _write(tmp_path, _TARGET.format(ttft=ttft, tpot=tpot, stat=stat, extra=extra))


def test_builtin_targets_are_mlperf_p99_server_constraints():
    # mlcommons/inference loadgen/mlperf.conf @b66003e: llama2-70b.Server.ttft_latency = 2000, tpot_latency = 200,
    # llama2-70b-interactive 450 / 40; *.Server.target_latency_percentile = 99 (both token constraints are
    # checked at it: loadgen/results.h). tests/reference/test_planning_presets.py checks every entry.
    t = presets.target("mlperf-llama-2-70b-server")
    assert isinstance(t, Targets) and (t.ttft_ms, t.tpot_ms, t.stat, t.e2e_ms) == (2000, 200, "p99", 0)
    assert t.percentile == 99.0 and t.label == "MLPerf Llama-2-70B server"
    i = presets.target("mlperf-llama-2-70b-interactive")
    assert (i.ttft_ms, i.tpot_ms, i.stat) == (450, 40, "p99")
    assert presets.resolve("targets", t) is t and presets.resolve("targets", t.name) == t


def test_user_targets_load_from_add_file_and_env(isolated_presets, tmp_path, monkeypatch):
    path = _target_file(tmp_path, extra="e2e_ms: 20000")
    presets.add_file(path)
    t = presets.target("lab-chat")
    assert (t.ttft_ms, t.tpot_ms, t.stat, t.e2e_ms) == (500, 50, "p90", 20000)
    assert t.source_of("ttft_ms") == "our product requirement" and t.unsourced_fields() == []
    assert "mlperf-llama-2-70b-server" in presets.names("targets")  # built-ins stay
    monkeypatch.setattr(presets, "_user_files", [])
    monkeypatch.setenv("LLMEXPLORE_PRESETS", str(path))
    presets.clear_cache()
    assert presets.target("lab-chat").e2e_ms == 20000


def test_a_user_target_overrides_a_builtin_one_as_a_whole(isolated_presets, tmp_path):
    presets.add_file(_write(tmp_path, _TARGET.replace("lab-chat", "mlperf-llama-2-70b-server").format(
        ttft="1000", tpot="100", stat="mean", extra="")))
    t = presets.target("mlperf-llama-2-70b-server")
    assert (t.ttft_ms, t.tpot_ms, t.stat, t.display_name) == (1000, 100, "mean", "Lab chat SLO")
    assert math.isnan(t.percentile)


@pytest.mark.parametrize("kw, rule", [
    ({"ttft": "0"}, r"ttft_ms must be a finite number in \[1e-6, 1e12\] \[ms\], got 0"),
    ({"ttft": "-5"}, r"ttft_ms must be a finite number in \[1e-6, 1e12\] \[ms\], got -5"),
    ({"tpot": ".nan"}, r"tpot_ms must be a finite number in \[1e-6, 1e12\] \[ms\], got nan"),
    ({"tpot": ".inf"}, r"tpot_ms must be a finite number in \[1e-6, 1e12\] \[ms\], got inf"),
    ({"tpot": '"40"'}, r"tpot_ms must be a finite number in \[1e-6, 1e12\] \[ms\], got '40'"),
    ({"stat": "p95"}, r"stat must be one of \['mean', 'p50', 'p90', 'p99'\], got 'p95'"),
    ({"stat": "99"}, r"stat must be one of \['mean', 'p50', 'p90', 'p99'\], got 99"),
    ({"extra": "e2e_ms: -1"}, r"e2e_ms must be a finite number in \[0, 1e12\] \[ms\], got -1"),
    ({"extra": "e2e_ms: 1.0e-300"}, (r"e2e_ms must be 0 \(no end-to-end target\) or in \[1e-06, 1e\+12\] "
                                     r"\[ms\], got 1e-300")),
    ({"extra": "e2e_ms: 100"}, (r"e2e_ms must be 0 \(no end-to-end target\) or >= ttft_ms \(500\): a "
                                r"request ends after its first token, got 100")),
    ({"extra": "p99_ms: 3"}, r"unknown keys \['p99_ms'\]"),
])
def test_bad_targets_name_file_entry_field_value_and_rule(isolated_presets, tmp_path, kw, rule):
    presets.add_file(_target_file(tmp_path, **kw))
    with pytest.raises(SpecError, match=r"user.yaml: Targets 'lab-chat': " + rule) as exc:
        presets.target("lab-chat")
    assert "\n" not in str(exc.value)


def test_targets_missing_a_required_field(isolated_presets, tmp_path):
    presets.add_file(_write(tmp_path, "targets:\n  half:\n    ttft_ms: 100\n    stat: p99\n"))
    with pytest.raises(SpecError, match=r"user.yaml: Targets 'half': missing required keys \['tpot_ms'\]"):
        presets.target("half")


def test_target_stats_are_the_documented_ones():
    assert TARGET_STATS == ("mean", "p50", "p90", "p99")
    assert [Targets(name="t", ttft_ms=1, tpot_ms=1, stat=s).percentile for s in TARGET_STATS[1:]] == [50, 90, 99]

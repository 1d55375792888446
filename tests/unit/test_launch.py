"""Engine launch commands (llmexplore.launch): flags only from data/engines.yaml, DOP and other inexpressible
configurations as None plus a note, dtype mapping, disaggregated roles, errors naming the field."""

from __future__ import annotations

import copy
import importlib.util
import shlex
from pathlib import Path

import pytest

from llmexplore import launch, presets
from llmexplore.errors import SpecError

ROOT = Path(__file__).resolve().parents[2]


def _side(role="colocated", **kw):
    side = {"role": role, "instances": 2, "ranks": 8, "layout": "TP", "ep": 1, "max_num_seqs": 256,
            "chunk_tokens": 8192}
    side.update(kw)
    return side


def _config(model="llama-3-70b", mode="colocated", sides=None, **kw):
    cfg = {"model": model, "gpu": "h200", "mode": mode, "weight_dtype": "bf16", "kv_dtype": "bf16",
           "sides": sides if sides is not None else [_side()]}
    cfg.update(kw)
    return cfg


def _disagg(model="deepseek-v3", layout="DPA", ep=8, **kw):
    return _config(model, "disaggregated", [_side("prefill", layout=layout, ep=ep, chunk_tokens=None),
                                            _side("decode", instances=1, layout=layout, ep=ep)],
                   weight_dtype="fp8", **kw)


def _all_configs():
    """A spread of configurations over models, layouts, dtypes and modes."""
    out = []
    for model in launch.engine_table()["models"]:
        moe = presets.model(model).is_moe
        for layout in ("TP", "DPA"):
            for weight in ("bf16", "fp8"):
                for kv in ("bf16", "fp8"):
                    ep = 8 if moe else 1
                    out.append(_config(model, weight_dtype=weight, kv_dtype=kv,
                                       sides=[_side(layout=layout, ep=ep)], moe_dispatch="alltoall"))
        out.append(_disagg(model, "TP", 8 if moe else 1, gpu="b200"))
        out.append(dict(_disagg(model, "TP", 8 if moe else 1, gpu="b200"), weight_dtype="fp4"))
    return out + _spec_configs()


def _chain_head():
    """An EAGLE-style draft head drafting a chain of 3 (every engine can express it)."""
    return dict(presets.speculative("eagle3-llama-3.1-8b").to_json(), name="chain-head", draft_tokens=3,
                draft_width=1, verify_tokens=0, accepted_length=2.5)


def _spec_configs():
    """Speculative decoding on a colocated side and on a decode pool: MTP, a chain draft head, n-gram."""
    return [_config("deepseek-v3", weight_dtype="fp8", sides=[_side(ep=8, speculative="deepseek-mtp-3")]),
            _config("llama-3-70b", sides=[_side(ranks=2, pp=4)]),
            _config("llama-3-70b", sides=[_side(speculative=_chain_head())]),
            _config("llama-3-70b", sides=[_side(speculative="ngram-5")]),
            _config("llama-3-8b", "disaggregated", [_side("prefill", chunk_tokens=None),
                                                    _side("decode", instances=1, speculative=_chain_head())])]


@pytest.mark.parametrize("engine", launch.ENGINES)
def test_speculative_decoding_is_written_in_each_engines_own_terms(engine):
    mtp, _, head, ngram, pd = (launch.launch_commands(c, engine) for c in _spec_configs())
    cmd = {e: " ".join(x["command"] for x in entries if x["command"]) for e, entries in
           (("mtp", mtp), ("head", head), ("ngram", ngram), ("pd", pd))}
    files = {e: "".join(t for x in entries for t in x["files"].values()) for e, entries in
             (("mtp", mtp), ("head", head), ("ngram", ngram))}
    if engine == "vllm":
        assert """--speculative-config '{"method":"mtp","num_speculative_tokens":3}'""" in cmd["mtp"]
        assert '"method":"eagle3","num_speculative_tokens":3,"model":"DRAFT_MODEL_PATH"' in cmd["head"]
        assert '"method":"ngram","num_speculative_tokens":5' in cmd["ngram"]
    elif engine == "sglang":
        assert ("--speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 1 "
                "--speculative-num-draft-tokens 4") in cmd["mtp"]
        assert "--speculative-algorithm EAGLE3 --speculative-draft-model-path DRAFT_MODEL_PATH" in cmd["head"]
        assert "--speculative-algorithm NGRAM --speculative-num-draft-tokens 6" in cmd["ngram"]
    else:
        assert "decoding_type: MTP\n  max_draft_len: 3" in files["mtp"]
        assert "decoding_type: Eagle3" in files["head"] and "speculative_model: DRAFT_MODEL_PATH" in files["head"]
        assert "decoding_type: NGram" in files["ngram"] and "max_matching_ngram_size: 3" in files["ngram"]
    # only the decode pool of a disaggregated deployment speculates; every command says what the acceptance was
    assert "speculative" not in (pd[0]["command"] or "") and "speculative" in (pd[1]["note"] or "")
    assert "acceptance was measured on" in mtp[0]["note"]


@pytest.mark.parametrize("engine, flags", [("vllm", "--tensor-parallel-size 2 --pipeline-parallel-size 4"),
                                           ("sglang", "--tp-size 2 --pp-size 4"), ("trtllm", "--tp_size 2 --pp_size 4")])
def test_pipeline_parallelism_is_written_with_each_engines_flag(engine, flags):
    (e,) = launch.launch_commands(_config("llama-3-70b", sides=[_side(ranks=2, pp=4)]), engine)
    assert flags in e["command"] and e["gpus_per_instance"] == 8


@pytest.mark.parametrize("side, words", [
    (_side(pp=0), "config['sides'][0]['pp'] must be an integer in [1, 128]"),
    (_side(pp=81), "config['sides'][0]['pp'] (81) must be at most the layers of llama-3-70b (80)"),
    (_side(ranks=512, pp=4), "config['sides'][0]['pp'] x config['sides'][0]['ranks'] (4 x 512 = 2048) must be at most"),
    (_side(layout="DPA", pp=2), "config['sides'][0]['pp'] (2) needs layout 'TP'"),
])
def test_bad_pipeline_sides_are_named(side, words):
    with pytest.raises(SpecError) as exc:
        launch.launch_commands(_config("llama-3-70b", sides=[side]), "vllm")
    assert words in str(exc.value)


@pytest.mark.parametrize("engine", ["vllm", "trtllm"])
def test_a_draft_tree_is_not_expressible_where_engines_draft_chains(engine):
    cfg = _config("llama-3-8b", sides=[_side(ranks=1, speculative="eagle3-llama-3.1-8b")])
    (e,) = launch.launch_commands(cfg, engine)
    assert e["command"] is None and "verifies a tree (4 tokens per draft step, 8 verified)" in e["note"]
    (s,) = launch.launch_commands(cfg, "sglang")
    assert "--speculative-eagle-topk 4 --speculative-num-draft-tokens 8" in s["command"]


@pytest.mark.parametrize("side, words", [
    (_side("prefill", speculative="deepseek-mtp-1"), "must be null for a prefill side"),
    (_side(speculative="deepseek-mtp-1"), "'deepseek-mtp-1' drafts with an MTP module, and llama-3-70b has none"),
    (_side(speculative="nope"), "no speculative preset 'nope'"),
    (_side(speculative=3), "must be null, a speculative preset name or its fields"),
])
def test_bad_speculative_sides_are_named(side, words):
    cfg = _config("llama-3-70b", "disaggregated" if side["role"] == "prefill" else "colocated",
                  [side, _side("decode")] if side["role"] == "prefill" else [side])
    with pytest.raises(SpecError) as exc:
        launch.launch_commands(cfg, "vllm")
    assert words in str(exc.value) and "config['sides'][0]['speculative']" in str(exc.value)


@pytest.mark.parametrize("engine", launch.ENGINES)
def test_every_emitted_flag_is_recorded_from_the_engine_parser(engine):
    """Emitted flags are a subset of the flags data/engines.yaml recorded from the engine's parser source."""
    recorded = set(launch.engine_table()["engines"][engine]["recorded_flags"])
    emitted = set()
    for cfg in _all_configs():
        for entry in launch.launch_commands(cfg, engine):
            if entry["command"] is not None:
                argv = shlex.split(entry["command"])
                assert [a for a in argv if a.startswith("--")] == entry["flags"]
                emitted |= set(entry["flags"])
    assert emitted <= recorded, sorted(emitted - recorded)
    assert len(emitted) >= min(8, len(recorded))  # the spread reaches most of the recorded flags


def test_trtllm_files_hold_only_recorded_llm_api_fields():
    """TensorRT-LLM's extra-options YAML (and the router's disagg_config.yaml) parse, name the file the command
    reads, and set only the LLM API fields data/engines.yaml records with their sources."""
    import yaml

    allowed = set(launch.engine_table()["engines"]["trtllm"]["llm_api_fields"])
    seen = set()
    for cfg in _all_configs():
        for e in launch.launch_commands(cfg, "trtllm"):
            if e["command"] is None:
                assert e["files"] == {}
                continue
            for name, text in e["files"].items():
                assert f"--extra_llm_api_options {name}" in e["command"]
                doc = yaml.safe_load(text)
                keys = {f"{k}.{kk}" if isinstance(v, dict) else k for k, v in doc.items()
                        for kk in (v if isinstance(v, dict) else [None])}
                assert keys <= allowed, keys - allowed
                seen |= keys
            if cfg["kv_dtype"] == "fp8":
                assert any(yaml.safe_load(t)["kv_cache_config"]["dtype"] == "fp8" for t in e["files"].values())
    assert seen == allowed  # the spread writes every recorded field
    router = launch.router_command(_disagg(), "trtllm")
    doc = yaml.safe_load(router["files"]["disagg_config.yaml"])
    assert doc["context_servers"]["num_instances"] == 2 and len(doc["generation_servers"]["urls"]) == 1


@pytest.mark.parametrize("engine", launch.ENGINES)
def test_recorded_flags_come_from_the_cited_files(engine):
    """Each recorded flag names the parser file it was read from, at the release and commit recorded."""
    entry = launch.engine_table()["engines"][engine]
    by_flag = {v["flag"]: v for v in entry["flags"].values()}
    assert set(entry["recorded_flags"]) == set(by_flag)
    prefix = {"vllm": "vllm/", "sglang": "sglang/srt/arg_groups/fields/", "trtllm": "tensorrt_llm/commands/"}[engine]
    for flag, spec in by_flag.items():
        assert flag.startswith("--") and spec["file"].startswith(prefix), flag
    assert entry["release"] and "commit" in entry and entry["sources"]["flags"]
    assert (ROOT / "scripts" / "extract_engine_flags.py").is_file()


def test_the_extraction_rules_read_flags_from_source(tmp_path):
    """The extraction script's two readers: literal add_argument strings (vLLM) and annotated dataclass fields
    with their cli_name/aliases and no_cli (SGLang)."""
    spec = importlib.util.spec_from_file_location("extract", ROOT / "scripts" / "extract_engine_flags.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    src = ('def f(g, kw):\n    g.add_argument("--tensor-parallel-size", "-tp", **kw)\n'
           '    g.add_argument(\n        "--max-num-seqs", type=int)\n')
    fields = ('class Parallel:\n    tp_size: A[int, Arg(help="x", aliases=["--tensor-parallel-size"])] = 1\n'
              '    nnodes: A[int, "The number of nodes."] = 1\n'
              '    enable_dp_attention: A[bool, Arg(no_cli=True)] = False\n'
              '    plain: int = 0\n')
    a, b = tmp_path / "args.py", tmp_path / "fields.py"
    a.write_text(src)
    b.write_text(fields)
    assert set(mod._add_argument_flags(a)) == {"--tensor-parallel-size", "--max-num-seqs"}
    assert set(mod._dataclass_flags(b)) == {"--tp-size", "--tensor-parallel-size", "--nnodes"}
    c = tmp_path / "serve.py"  # TensorRT-LLM's trtllm-serve: click decorators
    c.write_text('@click.command("serve")\n@click.argument("model", type=str)\n'
                 '@click.option("--tensor_parallel_size",\n              "--tp_size", type=int, default=1)\n'
                 '@click.option("--enable_chunked_prefill", is_flag=True)\ndef serve(model): pass\n')
    assert set(mod._click_option_flags(c)) == {"--tensor_parallel_size", "--tp_size", "--enable_chunked_prefill"}


@pytest.mark.parametrize("engine", launch.ENGINES)
def test_dop_has_no_flag(engine):
    cfg = _config(sides=[_side(layout="DOP")])
    [entry] = launch.launch_commands(cfg, engine)
    assert entry["command"] is None and entry["flags"] == []
    assert "DOP" in entry["note"] and "no flag" in entry["note"]
    assert "not expressible" in launch.launch_text(cfg, engine)


def test_dtype_mapping():
    """KV: vLLM fp8, SGLang fp8_e4m3, BF16 the engine default; weights: official FP8 checkpoint without a
    flag, else online quantization (vLLM fp8_per_tensor since `fp8` no longer quantizes online)."""
    fp8kv = _config("qwen3-32b", kv_dtype="fp8")
    assert "--kv-cache-dtype fp8 " in launch.launch_commands(fp8kv, "vllm")[0]["command"] + " "
    assert "--kv-cache-dtype fp8_e4m3" in launch.launch_commands(fp8kv, "sglang")[0]["command"]
    assert "--kv-cache-dtype" not in launch.launch_commands(_config("qwen3-32b"), "vllm")[0]["command"]
    ckpt = _config("qwen3-32b", weight_dtype="fp8")
    for engine in ("vllm", "sglang"):  # TensorRT-LLM: test_trtllm_reads_quantization_from_the_checkpoint
        [e] = launch.launch_commands(ckpt, engine)
        assert "Qwen/Qwen3-32B-FP8" in e["command"] and "--quantization" not in e["flags"]
    online = _config("llama-3-70b", weight_dtype="fp8")
    assert "--quantization fp8_per_tensor" in launch.launch_commands(online, "vllm")[0]["command"]
    sg = launch.launch_commands(online, "sglang")[0]["command"]
    assert "--quantization fp8 " in sg + " " and "meta-llama/Llama-3.1-70B-Instruct" in sg
    fp4 = dict(_config("deepseek-r1", weight_dtype="fp4", sides=[_side(ep=8)]), gpu="b200")
    for engine in launch.ENGINES:
        assert "nvidia/DeepSeek-R1-FP4 --" in launch.launch_commands(fp4, engine)[0]["command"] + " --"
        assert ("modelopt_fp4" in launch.launch_commands(fp4, engine)[0]["command"]) == (engine != "trtllm")
    dense_fp4 = dict(_config("qwen3-32b", weight_dtype="fp4"), gpu="b200")
    [e] = launch.launch_commands(dense_fp4, "vllm")
    assert e["command"] is None and "FP4" in e["note"]
    native = _config("deepseek-v3", weight_dtype="fp8", sides=[_side(ep=8)])
    assert "deepseek-ai/DeepSeek-V3 " in launch.launch_commands(native, "vllm")[0]["command"]


def test_trtllm_reads_quantization_from_the_checkpoint():
    """trtllm-serve: no quantization flag; an FP8 Llama runs NVIDIA's ModelOpt checkpoint (TensorRT-LLM's
    perf-benchmarking guide), a model with no listed TensorRT-LLM FP8 checkpoint is not expressible, with the
    ModelOpt route in its note; FP4 DeepSeek runs nvidia/DeepSeek-R1-FP4; the KV dtype goes to the YAML file."""
    [e] = launch.launch_commands(_config("llama-3-70b", weight_dtype="fp8", kv_dtype="fp8"), "trtllm")
    assert e["command"].startswith("trtllm-serve nvidia/Llama-3.1-70B-Instruct-FP8 --backend pytorch --tp_size 8")
    assert "--quantization" not in e["command"] and "dtype: fp8" in e["files"]["extra-llm-api-config.yaml"]
    assert "--max_batch_size 256 --enable_chunked_prefill --max_num_tokens 8192" in e["command"]
    [q] = launch.launch_commands(_config("qwen3-32b", weight_dtype="fp8"), "trtllm")
    assert q["command"] is None and "ModelOpt" in q["note"] and q["files"] == {}
    [b] = launch.launch_commands(_config("qwen3-32b"), "trtllm")  # BF16, BF16 KV: no file at all
    assert b["command"].startswith("trtllm-serve Qwen/Qwen3-32B ") and b["files"] == {}
    fp4 = dict(_config("deepseek-r1", weight_dtype="fp4", sides=[_side(ep=8, layout="DPA", chunk_tokens=None)]),
               gpu="b200")
    [d] = launch.launch_commands(fp4, "trtllm")
    assert d["command"].startswith("trtllm-serve nvidia/DeepSeek-R1-FP4 --backend pytorch --tp_size 8 --ep_size 8 "
                                   "--max_batch_size 32")  # per attention-DP rank: 256 / 8
    assert "--enable_chunked_prefill" not in d["command"] and "whole prompts" in d["note"]
    assert "enable_attention_dp: true" in d["files"]["extra-llm-api-config.yaml"]


@pytest.mark.parametrize("engine", launch.ENGINES)
def test_disaggregated_gives_two_roles_and_a_router(engine):
    cfg = _disagg()
    entries = launch.launch_commands(cfg, engine)
    assert [e["role"] for e in entries] == ["prefill", "decode"]
    assert [e["instances"] for e in entries] == [2, 1]
    assert all(e["command"] for e in entries)
    if engine == "trtllm":  # the KV transceiver and the context side's overlap scheduler live in the YAML files
        pre, dec = (list(e["files"].values())[0] for e in entries)
        assert "cache_transceiver_config:\n  backend: DEFAULT" in pre and "disable_overlap_scheduler: true" in pre
        assert "cache_transceiver_config" in dec and "disable_overlap_scheduler" not in dec
        assert "disagg_config.yaml" in launch.launch_text(cfg, engine)
    elif engine == "sglang":
        assert "--disaggregation-mode prefill" in entries[0]["command"]
        assert "--disaggregation-mode decode" in entries[1]["command"]
        assert "--attn-dp-size 8" in entries[0]["command"] and "--tp-size 8" in entries[0]["command"]
    else:
        assert all("NixlConnector" in e["command"] for e in entries)
        assert "--data-parallel-size 8 --tensor-parallel-size 1 --enable-expert-parallel" in entries[1]["command"]
    router = launch.router_command(cfg, engine)
    assert router["command"] and router["note"]
    assert router["command"] in launch.launch_text(cfg, engine)
    assert launch.router_command(_config(), engine) is None


def test_deepep_and_expert_parallel():
    cfg = _disagg(moe_dispatch="alltoall")
    sg = launch.launch_commands(cfg, "sglang")
    assert all("--moe-a2a-backend deepep" in e["command"] and "--ep-size 8" in e["command"] for e in sg)
    vl = launch.launch_commands(cfg, "vllm")
    assert "--all2all-backend deepep_high_throughput" in vl[0]["command"]
    assert "--all2all-backend deepep_low_latency" in vl[1]["command"]
    partial = _config("deepseek-v3", weight_dtype="fp8", sides=[_side(ranks=16, ep=8)])
    [v] = launch.launch_commands(partial, "vllm")
    assert v["command"] is None and "ep=8" in v["note"]
    [s] = launch.launch_commands(partial, "sglang")
    assert "--tp-size 16" in s["command"] and "--ep-size 8" in s["command"]


def test_vllm_dpa_needs_moe():
    [e] = launch.launch_commands(_config("llama-3-70b", sides=[_side(layout="DPA")]), "vllm")
    assert e["command"] is None and "dense" in e["note"]
    [s] = launch.launch_commands(_config("llama-3-70b", sides=[_side(layout="DPA")]), "sglang")
    assert "--attn-dp-size 8" in s["command"]


@pytest.mark.parametrize("change, field", [
    (lambda c: c.update(model="gpt-5"), "config['model']"),
    (lambda c: c.update(mode="split"), "config['mode']"),
    (lambda c: c.update(weight_dtype="int4"), "config['weight_dtype']"),
    (lambda c: c.update(kv_dtype="fp4"), "config['kv_dtype']"),
    (lambda c: c.pop("gpu"), "'gpu'"),
    (lambda c: c["sides"][0].update(ranks=0), "config['sides'][0]['ranks']"),
    (lambda c: c["sides"][0].update(layout="CP"), "config['sides'][0]['layout']"),
    (lambda c: c["sides"][0].update(ep=2), "config['sides'][0]['ep']"),
    (lambda c: c["sides"][0].update(max_num_seqs=1.5), "config['sides'][0]['max_num_seqs']"),
    (lambda c: c["sides"][0].pop("chunk_tokens"), "'chunk_tokens'"),
    (lambda c: c["sides"][0].update(role="prefill"), "config['sides'] roles"),
    (lambda c: c.update(sides=[]), "config['sides']"),
])
def test_bad_config_names_the_field(change, field):
    cfg = copy.deepcopy(_config())
    change(cfg)
    with pytest.raises(SpecError, match=rf"{field}".replace("[", r"\[").replace("]", r"\]")):
        launch.launch_commands(cfg, "vllm")


def test_bad_engine():
    with pytest.raises(SpecError, match="engine must be one of"):
        launch.launch_commands(_config(), "tensorrt")


def test_every_model_preset_has_a_checkpoint():
    models = launch.engine_table()["models"]
    for name, entry in models.items():
        presets.model(name)  # a preset of that name exists
        assert "/" in entry["hf_repo"] and entry["sources"]["hf_repo"], name

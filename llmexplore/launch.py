"""Engine command lines for a planned deployment: what a user types to run it with vLLM, SGLang or TensorRT-LLM.

The deployment planner (``llmexplore.sweeps.plan``) picks a configuration; :func:`launch_commands` turns it
into one launch command per role (colocated, or prefill and decode) for one engine, and :func:`launch_text`
prints them with the router step a disaggregated deployment needs. Every flag comes from ``data/engines.yaml``,
which records it from the engine's own argument parser at a named release; a configuration an engine cannot
express gets ``command: None`` and a note saying why, never an invented flag. TensorRT-LLM (``trtllm-serve``)
takes what its flags do not reach (the KV dtype, attention data parallelism, the KV transceiver of a
disaggregated pool) from a YAML file of LLM API fields, ``--extra_llm_api_options``: an entry's ``files`` holds
each file's name and text, and :func:`launch_text` writes them out before the command.

The configuration (a :class:`llmexplore.deployment.DeploymentConfig` or its JSON, as the planner produces it)::

    {"model": "deepseek-v3", "gpu": "h200", "mode": "colocated" | "disaggregated",
     "weight_dtype": "bf16" | "fp16" | "fp8" | "fp4", "kv_dtype": "bf16" | "fp8",
     "moe_dispatch": "gather" | "alltoall",          # optional (default "gather"); "alltoall" = DeepEP
     "sides": [{"role": "colocated" | "prefill" | "decode", "instances": n, "ranks": t,
                "layout": "TP" | "DPA" | "DOP", "ep": e, "max_num_seqs": s, "chunk_tokens": c | None,
                "speculative": None | {SpecDecode fields}}]}

``ranks`` is the GPUs of one instance (of one pipeline stage when ``pp`` > 1: ``ranks x pp`` GPUs in all),
``ep`` the expert-parallel size (1 for dense models),
``max_num_seqs`` the running requests of one instance, ``chunk_tokens`` the chunked-prefill budget (None:
prefill whole prompts). Layouts (docs/models.md §3): TP shards everything over the ranks; DPA keeps the
attention data parallel (one batch share per rank) with the FFN/experts sharded; DOP has no engine flag.

Glossary: tp, dp, ep (tensor, data, expert parallel sizes); DPA (data-parallel attention); PD (prefill/decode
disaggregation). Assumption: an instance of more than 8 GPUs spans hosts, and its multi-node flags are not
generated (a note says so).
"""

from __future__ import annotations

import functools
import json
import math
import shlex
from typing import Any

from . import _check, presets
from .deployment import DeploymentConfig
from .errors import SpecError

__all__ = ["ENGINES", "emitted_flags", "engine_table", "launch_commands", "launch_text", "router_command"]

ENGINES = ("vllm", "sglang", "trtllm")
WEIGHT_DTYPES = ("bf16", "fp16", "fp8", "fp4", "mxfp4")  # the dtypes the launch lines know checkpoints and flags for
KV_DTYPES = ("bf16", "fp8")
GPUS_PER_HOST = 8  # assumption: the common 8-GPU host; a larger instance needs the engine's multi-node flags


@functools.cache
def engine_table() -> dict:
    """``data/engines.yaml`` as read (engines and the model -> checkpoint map); cached."""
    path = presets.DATA_DIR / "engines.yaml"
    table = presets._read_yaml(path)
    for key in ("engines", "models"):
        if not isinstance(table.get(key), dict):
            raise SpecError(f"{path}: top-level {key!r} must be a mapping")
    return table


def _engine(engine: Any) -> dict:
    if engine not in ENGINES:
        raise SpecError(f"engine must be one of {list(ENGINES)}, got {_check.shown(engine)}")
    return engine_table()["engines"][engine]


def _field(cfg: dict, name: str, where: str = "config") -> Any:
    if name not in cfg:
        raise SpecError(f"{where} has no {name!r}; give it (see llmexplore.launch)")
    return cfg[name]


def _validate(config: Any) -> dict:
    """The configuration checked field by field (:class:`llmexplore.deployment.DeploymentConfig` with every side
    field required, then what launching needs: a checkpoint in data/engines.yaml, a weight dtype the GPU runs);
    SpecError names the field, the value and the rule. Returns the plain form the command builders read."""
    if not isinstance(config, (dict, DeploymentConfig)):
        raise SpecError(f"config must be a dict, got {type(config).__name__}")
    doc = config.to_json() if isinstance(config, DeploymentConfig) else config
    models = engine_table()["models"]
    model = _field(doc, "model")
    if model not in models:
        raise SpecError(f"config['model'] must be a model preset with a checkpoint in data/engines.yaml "
                        f"{sorted(models)}, got {_check.shown(model)}")
    cfg = DeploymentConfig.from_json(doc, complete=True)
    weight = _check.choice("config['weight_dtype']", cfg.weight_dtype, WEIGHT_DTYPES)
    for g in dict.fromkeys([cfg.gpu, *(s.gpu for s in cfg.sides if s.gpu)]):
        presets.hardware(g).check_dtype(weight, "config['weight_dtype']")
    kv = _check.choice("config['kv_dtype']", cfg.kv_dtype, KV_DTYPES)
    # the configuration-wide dispatch: what the launch lines have always read (a side's own is not used yet)
    return {"model": model, "gpu": cfg.gpu, "link": cfg.link, "moe": presets.model(model).is_moe, "mode": cfg.mode,
            "weight_dtype": weight, "kv_dtype": kv, "moe_dispatch": cfg.moe_dispatch or "gather",
            "sides": [{k: v for k, v in s.to_json().items() if k != "moe_dispatch"} for s in cfg.sides]}


def _checkpoint(cfg: dict, engine: str, eng: dict) -> tuple[str | None, list[str], list[str]]:
    """(Hugging Face repo or None, weight flags, notes) for the config's weight dtype on ``engine``."""
    entry = engine_table()["models"][cfg["model"]]
    repo = entry["hf_repo"]
    native = entry.get("native_dtype", "bf16")
    want = cfg["weight_dtype"]
    choices = eng["choices"]
    notes = []
    if want == native or {want, native} == {"bf16", "fp16"}:
        if want != native:
            notes.append(f"{repo} is released in {native}; the engine serves it in {native} (same bytes as {want})")
        return repo, [], notes
    if want in ("bf16", "fp16"):
        return None, [], [(f"{repo} is released in {native} and data/engines.yaml lists no {want} checkpoint of "
                          f"{cfg['model']}; engines do not up-cast a quantized checkpoint for serving")]
    if want == "fp8":
        listed = entry.get("fp8") or []
        listed = [listed] if isinstance(listed, dict) else list(listed)
        ckpt = next((c for c in listed if engine in c.get("engines", ())), listed[0] if listed else None)
        if ckpt and engine in ckpt.get("engines", ()):
            who = "official" if ckpt.get("official") else "third-party"
            notes.append(f"{ckpt['repo']} is the {who} FP8 checkpoint; the engine reads its quantization from "
                         "config.json")
            if ckpt.get("note"):
                notes.append(ckpt["note"])
            return ckpt["repo"], list(ckpt.get("extra_flags", {}).get(engine, [])), notes
        if ckpt and ckpt.get("note"):
            notes.append(ckpt["note"])
        if native != "bf16" and native != "fp16":
            return None, [], [(f"{repo} is released in {native}; FP8 weights need an FP8 checkpoint, which "
                              "data/engines.yaml does not list")]
        if choices.get("quantization_online_fp8") is None:
            return None, [], notes + [(f"no FP8 checkpoint of {cfg['model']} that {eng['display_name']} loads is "
                                       f"listed in data/engines.yaml, and its PyTorch backend reads the quantization "
                                       f"from the checkpoint only (no load-time FP8): quantize {repo} offline with "
                                       f"NVIDIA ModelOpt (examples/llm_ptq, --quant fp8) and serve the export")]
        notes.append(f"no FP8 checkpoint of {cfg['model']} that {eng['display_name']} loads is listed in "
                     f"data/engines.yaml: the engine quantizes {repo} to FP8 at load time")
        return repo, [eng["flags"]["quantization"]["flag"], choices["quantization_online_fp8"]], notes
    # fp4
    ckpt = entry.get("fp4")
    if ckpt and engine in ckpt.get("engines", ()):
        who = "official" if ckpt.get("official") else "third-party (NVIDIA ModelOpt)"
        notes.append(f"{ckpt['repo']} is a {who} NVFP4 checkpoint")
        fp4 = choices.get("quantization_fp4_checkpoint")  # None: the engine reads it from the checkpoint
        return ckpt["repo"], [eng["flags"]["quantization"]["flag"], fp4] if fp4 else [], notes
    return None, [], [(f"no NVFP4 checkpoint of {cfg['model']} in data/engines.yaml, and {eng['display_name']} "
                      f"{eng['release']} cannot quantize a whole {native} checkpoint to FP4 at load time (its "
                      "online FP4 methods convert only MoE expert weights: vLLM nvfp4_per_token, SGLang "
                      "nvfp4_online)")]


def _pp_args(side: dict, eng: dict) -> list[str]:
    """The pipeline-parallel size flag of a side with pp > 1 (none otherwise)."""
    pp = int(side.get("pp") or 1)
    return [eng["flags"]["pipeline_parallel"]["flag"], str(pp)] if pp > 1 else []


def _vllm_parallel(cfg: dict, side: dict, eng: dict) -> tuple[list[str] | None, list[str]]:
    f = eng["flags"]
    ranks, ep, layout, moe = side["ranks"], side["ep"], side["layout"], cfg["moe"]
    notes = []
    if moe and ep not in (1, ranks):
        return None, [(f"vLLM sets the expert-parallel size to TP x DP of the instance ({ranks}) when "
                      f"{f['expert_parallel']['flag']} is given and has no EP-size flag, so ep={ep} cannot be "
                      "expressed")]
    if layout == "TP":
        args = [f["tensor_parallel"]["flag"], str(ranks)] + _pp_args(side, eng)
        seqs = side["max_num_seqs"]
    else:  # DPA
        if not moe:
            return None, [(f"vLLM has no data-parallel attention for dense models: {f['data_parallel']['flag']} "
                          f"{ranks} would run {ranks} full replicas (FFN not sharded), a different deployment; "
                          f"use {side['instances'] * ranks} TP1 instances if that is what you want")]
        args = [f["data_parallel"]["flag"], str(ranks), f["tensor_parallel"]["flag"], "1"]
        seqs = math.ceil(side["max_num_seqs"] / ranks)
        notes.append(f"vLLM schedules each data-parallel rank separately, so {f['max_running_requests']['flag']} "
                     f"is per rank: ceil({side['max_num_seqs']} / {ranks}) = {seqs}")
        if ep == 1:
            notes.append("without expert parallelism vLLM shards each expert over all DP ranks (MoE TP)")
    if moe and ep == ranks and ranks > 1:
        args.append(f["expert_parallel"]["flag"])
        if cfg["moe_dispatch"] == "alltoall":
            backend = eng["choices"]["all2all_backend"][side["role"]]
            args += [f["all2all_backend"]["flag"], backend]
            notes.append("vLLM picks one DeepEP kernel per instance (deepep_high_throughput for prefill, "
                         "deepep_low_latency for decode); it has no per-batch switch like SGLang's deepep_mode auto")
    elif cfg["moe_dispatch"] == "alltoall" and moe:
        notes.append("DeepEP all-to-all needs expert parallelism over all ranks (ep = ranks); dispatch stays "
                     "all-gather")
    args += [f["max_running_requests"]["flag"], str(seqs)]
    return args, notes


def _sglang_parallel(cfg: dict, side: dict, eng: dict) -> tuple[list[str] | None, list[str]]:
    f = eng["flags"]
    ranks, ep, moe = side["ranks"], side["ep"], cfg["moe"]
    notes = []
    args = [f["tensor_parallel"]["flag"], str(ranks)] + _pp_args(side, eng)
    if side["layout"] == "DPA":
        args += [f["attention_dp"]["flag"], str(ranks)]
        notes.append(f"{f['attention_dp']['flag']} appeared in SGLang 0.5.22; for 0.5.21 or older write "
                     f"--tp {ranks} --dp {ranks} --enable-dp-attention instead (still accepted, deprecated)")
    if moe and ep > 1:
        args += [f["expert_parallel"]["flag"], str(ep)]
        if ep < ranks:
            notes.append(f"SGLang shards each expert over ranks/ep = {ranks // ep} ranks (moe_tp_size)")
    if moe and cfg["moe_dispatch"] == "alltoall":
        if ep == ranks and ranks > 1:
            args += [f["moe_a2a_backend"]["flag"], eng["choices"]["moe_a2a_backend"]]
            notes.append("DeepEP: --moe-a2a-backend deepep (it replaced --enable-deepep-moe, removed by 0.5.10)")
        else:
            notes.append("DeepEP all-to-all needs expert parallelism over all ranks (ep = ranks); SGLang would "
                         "raise ep to the TP size, so dispatch stays all-gather")
    args += [f["max_running_requests"]["flag"], str(side["max_num_seqs"])]
    return args, notes


def _trtllm_parallel(cfg: dict, side: dict, eng: dict) -> tuple[list[str] | None, list[str], dict]:
    """(flags, notes, LLM API fields for the extra-options file) of one side under trtllm-serve."""
    f = eng["flags"]
    ranks, ep, moe = side["ranks"], side["ep"], cfg["moe"]
    notes, extra = [], {}
    args = [f["backend"]["flag"], eng["choices"]["backend"], f["tensor_parallel"]["flag"], str(ranks)] + \
        _pp_args(side, eng)
    if moe and ep > 1:
        args += [f["expert_parallel"]["flag"], str(ep)]
        if ep < ranks:
            notes.append(f"TensorRT-LLM shards each expert over ranks/ep = {ranks // ep} ranks (moe_tp_size)")
    seqs = side["max_num_seqs"]
    if side["layout"] == "DPA":
        extra["enable_attention_dp"] = True
        seqs = math.ceil(seqs / ranks)
        notes.append(f"attention data parallel over the {ranks} ranks (enable_attention_dp); "
                     f"{f['max_running_requests']['flag']} is taken per rank, ceil({side['max_num_seqs']} / {ranks}) "
                     f"= {seqs} [assumption: each attention-DP rank schedules its own requests, as in vLLM and "
                     f"SGLang; not read in TensorRT-LLM's source]")
    if moe and cfg["moe_dispatch"] == "alltoall":
        notes.append("no trtllm-serve flag or LLM API field read here selects DeepEP-style all-to-all dispatch, so "
                     "none is written: TensorRT-LLM chooses its MoE communication itself")
    args += [f["max_running_requests"]["flag"], str(seqs)]
    if side["chunk_tokens"] is None and side["role"] != "decode":  # a decode pool never prefills
        notes.append(f"whole prompts (TensorRT-LLM's default): {f['chunk_budget']['flag']} (default "
                     f"{eng['chunked_prefill_default_tokens']:,}) must hold the longest prompt")
    return args, notes, extra


def _trtllm_files(cfg: dict, side: dict, eng: dict, extra: dict) -> tuple[list[str], dict]:
    """(flags, {file name: YAML text}) of the extra-options file one side needs (none when it would be empty)."""
    fields = dict(extra)
    kv = eng["choices"]["kv_cache_dtype"][cfg["kv_dtype"]]
    if kv != "auto":
        fields["kv_cache_config"] = {"dtype": kv}
    if side["role"] != "colocated":
        fields["cache_transceiver_config"] = {"backend": eng["choices"]["cache_transceiver_backend"]}
        if side["role"] == "prefill":  # examples/disaggregated/README.md: context servers run without it
            fields["disable_overlap_scheduler"] = True
    if not fields:
        return [], {}
    name = eng["extra_options_file"] if side["role"] == "colocated" else f"{side['role']}-{eng['extra_options_file']}"
    return [eng["flags"]["extra_options"]["flag"], name], {name: _yaml(fields)}


def _yaml(fields: dict) -> str:
    """The YAML text of an LLM API options file (keys in the order written)."""
    import yaml

    return yaml.safe_dump(fields, sort_keys=False, default_flow_style=False)


def _chunk_args(engine: str, side: dict, eng: dict) -> list[str]:
    f = eng["flags"]
    chunk = side["chunk_tokens"]
    if engine == "vllm":
        if chunk is None:
            return [f["chunked_prefill_off"]["flag"]]
        return [f["chunked_prefill_on"]["flag"], f["chunk_budget"]["flag"], str(chunk)]
    if engine == "trtllm":  # whole prompts by default (enable_chunked_prefill False)
        return [] if chunk is None else [f["chunked_prefill_on"]["flag"], f["chunk_budget"]["flag"], str(chunk)]
    return [f["chunk_budget"]["flag"], str(chunk) if chunk is not None else eng["chunked_prefill_off"]]


def _kv_args(cfg: dict, engine: str, eng: dict) -> list[str]:
    if engine == "trtllm":  # in the extra-options file (_trtllm_files)
        return []
    value = eng["choices"]["kv_cache_dtype"][cfg["kv_dtype"]]
    return [] if value == "auto" else [eng["flags"]["kv_cache_dtype"]["flag"], value]


def _pd_args(engine: str, role: str, eng: dict) -> list[str]:
    f = eng["flags"]
    if role == "colocated" or engine == "trtllm":  # trtllm: the transceiver is in the extra-options file
        return []
    if engine == "vllm":
        spec = {"kv_connector": eng["pd_connector"], "kv_role": eng["choices"]["kv_role"][role]}
        return [f["kv_transfer_config"]["flag"], json.dumps(spec, separators=(",", ":"))]
    args = [f["disaggregation_mode"]["flag"], role, f["disaggregation_transfer_backend"]["flag"],
            eng["choices"]["disaggregation_transfer_backend"]]
    if role == "prefill":
        args += [f["disaggregation_bootstrap_port"]["flag"], "8998"]
    return args


#: placeholder for a draft head's checkpoint, which no preset names (like PREFILL_HOST_1 for hosts)
DRAFT_PLACEHOLDER = "DRAFT_MODEL_PATH"


def _spec_args(side: dict, engine: str, eng: dict) -> tuple[list[str] | None, list[str], dict]:
    """(flags, notes, LLM API fields) of a side's speculative decoding (none: ``[], [], {}``); flags None when
    the engine cannot express it (a draft tree on vLLM or TensorRT-LLM, which draft chains here)."""
    spec = side.get("speculative")
    if not spec:
        return [], [], {}
    method, k = spec["method"], int(spec["draft_tokens"])
    width = int(spec.get("draft_width") or 1)
    verify = int(spec.get("verify_tokens") or 0) or k + 1
    f, choices = eng["flags"], eng["choices"]
    notes = [f"speculative decoding {spec['name']} ({method}, {k} draft token{'s' if k != 1 else ''}); its "
             f"acceptance was measured on: {spec['conditions']}"]
    head = method == "draft_head"
    if head:
        notes.append(f"{DRAFT_PLACEHOLDER}: the draft head's checkpoint, trained for this model (no preset names one)")
    if engine == "sglang":
        args = [f["speculative_algorithm"]["flag"], choices["speculative_algorithm"][method]]
        if head:
            args += [f["speculative_draft_model_path"]["flag"], DRAFT_PLACEHOLDER]
        if method != "ngram":
            args += [f["speculative_num_steps"]["flag"], str(k), f["speculative_eagle_topk"]["flag"], str(width)]
        args += [f["speculative_num_draft_tokens"]["flag"], str(verify)]
        return args, notes, {}
    if width > 1 or verify != k + 1:
        return None, [f"{eng['display_name']} drafts a chain here; {spec['name']} verifies a tree ({width} tokens "
                      f"per draft step, {verify} verified): not expressible"], {}
    if engine == "vllm":
        body = {"method": choices["speculative_method"][method], "num_speculative_tokens": k}
        if head:
            body["model"] = DRAFT_PLACEHOLDER
        if method == "ngram":
            notes.append("n-gram match lengths: vLLM's defaults (prompt_lookup_min = max = 5)")
        return [f["speculative_config"]["flag"], json.dumps(body, separators=(",", ":"))], notes, {}
    body = {"decoding_type": choices["speculative_decoding_type"][method], "max_draft_len": k}
    if head:
        body["speculative_model"] = DRAFT_PLACEHOLDER
    if method == "ngram":
        body["max_matching_ngram_size"] = 3  # the match length of the n-gram preset's measurement (blog 7: k = 3)
    return [], notes, {"speculative_config": body}


def _join(argv: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)


def launch_commands(config: dict, engine: str) -> list[dict]:
    """One entry per role of ``config`` for ``engine`` ("vllm", "sglang" or "trtllm"):
    ``{"role", "instances", "gpus_per_instance", "gpu", "command", "note", "flags", "files"}`` (``gpu``: the GPU
    type the side runs on).

    ``command`` is the shell line to run once per instance (None when the engine cannot express the side;
    ``note`` then says why), ``flags`` the option names it uses, ``files`` the files the command reads ({name:
    text}; TensorRT-LLM's extra-options YAML, else empty). Raises SpecError naming the field for a bad config.
    Flags and checkpoints: data/engines.yaml.
    """
    eng = _engine(engine)
    cfg = _validate(config)
    repo, weight_args, weight_notes = _checkpoint(cfg, engine, eng)
    out = []
    for side in cfg["sides"]:
        gpus = side["ranks"] * int(side.get("pp") or 1)
        gpu = side.get("gpu") or cfg["gpu"]
        entry = {"role": side["role"], "instances": side["instances"], "gpus_per_instance": gpus, "gpu": gpu,
                 "command": None, "note": None, "flags": [], "files": {}}
        extra: dict = {}
        notes = list(weight_notes)
        if side.get("max_prompt_tokens") is not None:
            notes.append(f"route prompts of up to {side['max_prompt_tokens']:,} tokens to this pool (a router "
                         "in front of both pools; longer prompts go to the other)")
        elif len(cfg["sides"]) == 2 and cfg["mode"] == "colocated":
            notes.append(f"route prompts longer than {cfg['sides'][0]['max_prompt_tokens']:,} tokens to this pool")
        types = {s.get("gpu") or cfg["gpu"] for s in cfg["sides"]}
        if len(types) > 1:  # a mix of GPU types: say where each pool runs and how its KV crosses
            other = next(s for s in cfg["sides"] if s is not side)
            if cfg["mode"] == "colocated":
                notes.append(f"run this pool on {gpu} hosts and the other on {other.get('gpu') or cfg['gpu']} hosts")
            else:
                notes.append(f"run the {side['role']} pool on {gpu} hosts; the KV cache crosses "
                             f"{cfg.get('link') or 'the link'} {'to' if side['role'] == 'prefill' else 'from'} the "
                             f"{other['role']} pool on {other.get('gpu') or cfg['gpu']} hosts")
        if side["layout"] == "DOP":
            notes = [(f"{eng['display_name']} {eng['release']} has no DOP layout (attention weights sharded like TP, "
                     "each request's KV on one rank): no flag expresses it; the nearest expressible layouts "
                     "are TP and DPA")]
            parallel = None
        elif repo is None:
            parallel = None
        elif engine == "trtllm":
            parallel, more, extra = _trtllm_parallel(cfg, side, eng)
            notes += more
        else:
            parallel, more = (_vllm_parallel if engine == "vllm" else _sglang_parallel)(cfg, side, eng)
            notes += more
        spec_args, spec_notes, spec_extra = _spec_args(side, engine, eng)
        notes += spec_notes
        if spec_args is None:
            parallel = None
        extra.update(spec_extra)
        if parallel is not None and repo is not None:
            head = shlex.split(eng["launch"].format(model=repo))
            files_args, files = _trtllm_files(cfg, side, eng, extra) if engine == "trtllm" else ([], {})
            argv = head + parallel + weight_args + _kv_args(cfg, engine, eng) + _chunk_args(engine, side, eng) + \
                _pd_args(engine, side["role"], eng) + spec_args + files_args
            entry["files"] = files
            entry["command"] = _join(argv)
            entry["flags"] = [a for a in argv if a.startswith("--")]
            if gpus > GPUS_PER_HOST:
                notes.append(f"an instance of {gpus} GPUs spans hosts: run it on each host with the "
                             "engine's multi-node flags (not generated here)")
        entry["note"] = "; ".join(notes) if notes else None
        out.append(entry)
    return out


def router_command(config: dict, engine: str) -> dict | None:
    """The router/proxy step a disaggregated config needs in front of its prefill and decode instances
    (``{"command", "note"}``, plus ``files`` for TensorRT-LLM's disagg_config.yaml), or None for a colocated one.
    Hosts are placeholders (PREFILL_HOST_1, ...)."""
    eng = _engine(engine)
    cfg = _validate(config)
    if cfg["mode"] == "colocated":
        return None
    n = {s["role"]: s["instances"] for s in cfg["sides"]}
    port = eng["default_port"]
    prefill = [f"PREFILL_HOST_{i + 1}" for i in range(n["prefill"])]
    decode = [f"DECODE_HOST_{i + 1}" for i in range(n["decode"])]
    if engine == "trtllm":
        def servers(hosts):
            return {"num_instances": len(hosts), "urls": [f"{h}:{port}" for h in hosts]}

        text = _yaml({"hostname": "0.0.0.0", "port": port, "backend": eng["choices"]["backend"],
                      "context_servers": servers(prefill), "generation_servers": servers(decode)})
        return {"command": eng["router"]["command"], "note": eng["router"]["note"],
                "files": {eng["router"]["config_file"]: text}}
    if engine == "vllm":
        cmd = eng["router"]["command"].format(
            prefill_hosts=" ".join(prefill), prefill_ports=" ".join([str(port)] * len(prefill)),
            decode_hosts=" ".join(decode), decode_ports=" ".join([str(port)] * len(decode)))
    else:
        cmd = eng["router"]["command"].format(
            prefill_args=" ".join(f"--prefill http://{h}:{port} 8998" for h in prefill),
            decode_args=" ".join(f"--decode http://{h}:{port}" for h in decode))
    return {"command": cmd, "note": eng["router"]["note"]}


def emitted_flags(config: dict, engine: str) -> set[str]:
    """Every option name the engine commands of ``config`` use (not the router's)."""
    return {f for e in launch_commands(config, engine) for f in e["flags"]}


def launch_text(config: dict, engine: str) -> str:
    """The launch steps as text: each role's command (one line per flag), instance count and notes, then the
    router step for a disaggregated config."""
    eng = _engine(engine)
    lines = [f"# {eng['display_name']} {eng['release']}: {config.get('model')} on {config.get('gpu')}"
             if isinstance(config, dict) else ""]
    for e in launch_commands(config, engine):
        lines.append(f"# {e['role']}: {e['instances']} instance(s) x {e['gpus_per_instance']} GPU(s)")
        if e["command"] is None:
            lines.append("#   not expressible: " + (e["note"] or ""))
        else:
            lines += _heredocs(e.get("files") or {})
            argv = shlex.split(e["command"])
            lines.append(_format_argv(argv))
            if e["note"]:
                lines.append("#   note: " + e["note"])
    router = router_command(config, engine)
    if router is not None:
        lines.append("# router (start after the prefill and decode instances):")
        lines += _heredocs(router.get("files") or {})
        lines.append(router["command"])
        lines.append("#   note: " + router["note"])
    return "\n".join(lines) + "\n"


def _heredocs(files: dict) -> list[str]:
    """Shell lines that write each file: ``cat > NAME <<'EOF'`` ... ``EOF``."""
    out = []
    for name, text in files.items():
        out += [f"cat > {shlex.quote(name)} <<'EOF'", text.rstrip("\n"), "EOF"]
    return out


def _format_argv(argv: list[str]) -> str:
    """``cmd --flag value`` split before each flag with shell line continuations."""
    parts, cur = [], []
    for a in argv:
        if a.startswith("--") and cur:
            parts.append(cur)
            cur = []
        cur.append(a)
    parts.append(cur)
    return " \\\n    ".join(_join(p) for p in parts)

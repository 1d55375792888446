"""``llmexplore plan``: from a model, a GPU budget, a workload and latency targets to the best deployment.

Search colocated and disaggregated serving, ranks and attention layout per side, weight and KV dtypes, chunk
budget, batch cap and pool sizes within a GPU budget; print the best configuration (with its engine launch
commands), the runner-up, both Pareto frontiers and the disaggregated/colocated ratio.
"""

from __future__ import annotations

from ._framework import (EXIT_OK, Checked, Col, format_table, int_in, model_command, number_in, one_of,
                         preset_name, print_json)

__all__ = ["add", "run", "FLAGS"]

#: API field names -> the flags of this command
FLAGS = {"model": "--model", "gpu": "--gpu", "gpus": "--gpus", "isl": "--isl", "osl": "--osl",
         "ttft_ms": "--ttft-ms", "tpot_ms": "--tpot-ms", "stat": "--stat", "rate_per_s": "--rate",
         "runtime": "--runtime", "weight_dtype": "--weight-dtype", "kv_dtype": "--kv-dtype", "link": "--link",
         "workers": "--workers", "scheduler": "--scheduler", "target": "--targets", "modes": "--mode",
         "weight_dtypes": "--weight-dtype", "kv_dtypes": "--kv-dtype", "speculative": "--speculative",
         "speculative_accepted_length": "--speculative-accepted-length", "pipeline_sizes": "--pipeline-sizes",
         "objective": "--objective", "budget_usd_per_hour": "--budget-usd-per-hour", "price_tier": "--price-tier",
         "usd_per_gpu_hour": "--usd-per-gpu-hour", "other_gpus": "--gpu", "long_share": "--long-share",
         "long_isl": "--long-isl", "long_osl": "--long-osl"}

TABLE_COLS = [
    Col("label", "configuration"), Col("gpus", "GPUs", ".0f"), Col("n_prefill", "P inst", ".0f"),
    Col("n_decode", "D/C inst", ".0f"), Col("rate_per_s", "req/s", ".3g"),
    Col("tokens_per_s_per_gpu", "tok/s/GPU", ".0f"), Col("tokens_per_s_per_user", "tok/s/user", ".1f"),
    Col("ttft_ms", "TTFT ms", ".0f"), Col("tpot_ms", "TPOT ms", ".2f"), Col("max_num_seqs", "max seqs", ".0f"),
    Col("usd_per_hour", "$/hour", ".2f"), Col("usd_per_mtok_total", "$/Mtok", ".3f"),
    Col("j_per_token", "J/out tok", ".3f"),
]


def _address():
    import re

    from ._framework import Rule

    def convert(text: str) -> str:
        m = re.fullmatch(r"(tcp|tls|ucx|ws|wss)://[A-Za-z0-9._\-\[\]:]+:([0-9]{1,5})", text.strip())
        if not m or not 1 <= int(m.group(2)) <= 65535:  # a TCP port is 1-65,535
            raise ValueError(text)
        return text.strip()

    return Rule("a Dask scheduler address such as tcp://host:8786 (port 1-65,535)", convert)


def _dtype_list(text: str) -> tuple:
    from ..units import DTYPE_BYTES

    vals = tuple(v.strip() for v in text.split(","))
    if not vals or any(v not in DTYPE_BYTES for v in vals) or len(set(vals)) != len(vals):
        raise ValueError(text)
    return vals


def _int_list(text: str) -> tuple:
    """'1,2,4' -> (1, 2, 4): whole numbers >= 1, comma-separated (the rule says which part is wrong)."""
    parts = [t.strip() for t in str(text).split(",")]
    if not parts or any(not t.isdigit() or not 1 <= int(t) <= 128 for t in parts):
        raise ValueError(text)
    return tuple(int(t) for t in parts)


def _gpu_list(text: str) -> tuple:
    """'h200,b200' -> ('h200', 'b200'): one to four hardware preset names (checked when the presets are read)."""
    from ..sweeps.plan.question import MAX_GPU_TYPES

    vals = tuple(v.strip() for v in str(text).split(","))
    if not vals or any(not v for v in vals) or len(set(vals)) != len(vals) or len(vals) > MAX_GPU_TYPES:
        raise ValueError(text)
    return vals


def _prices(text: str):
    """'2.5' (every GPU type) or 'h200=2.5,b200=4.1' -> a float or ((gpu, price), ...); prices > 0."""
    import math

    def price(v):
        x = float(v)
        if not (math.isfinite(x) and 0 < x <= 1e4):
            raise ValueError(v)
        return x

    t = str(text).strip()
    if "=" not in t:
        return price(t)
    pairs = []
    for part in t.split(","):
        g, _, v = part.partition("=")
        if not g.strip():
            raise ValueError(text)
        pairs.append((g.strip(), price(v)))
    return tuple(pairs)


def add(sub) -> None:
    from ..models.serving.disagg import MAX_RATE_OR_MS, MAX_WORKLOAD_TOKENS
    from ..models.queueing.at_stat import STATS
    from ..deployment import MAX_GPUS
    from ..units import DTYPE_BYTES
    from ._framework import Rule

    p, req = model_command(sub, "plan", __doc__,
                           help="the best deployment for a workload and latency targets")
    for a in req._group_actions:  # plan searches several GPU types: --gpu takes a comma-separated list
        if a.dest == "gpu":
            a.help = ("hardware preset, or up to four separated by commas (h200,b200): every type alone and every "
                      "pair of types for disaggregated prefill and decode")
            a.metavar = "G[,G]"
    req.add_argument("--gpus", required=True, action=Checked, check=int_in(1, MAX_GPUS), metavar="N",
                     help="GPU budget")
    tokens = int_in(1, MAX_WORKLOAD_TOKENS)
    req.add_argument("--isl", required=True, action=Checked, check=tokens, metavar="I", help="prompt tokens")
    req.add_argument("--osl", required=True, action=Checked, check=tokens, metavar="O", help="output tokens")
    positive = number_in(0.0, MAX_RATE_OR_MS, lo_open=True)
    p.add_argument("--ttft-ms", default=None, action=Checked, check=positive, metavar="X",
                   help="TTFT target [ms] (default: from --targets, else 2000)")
    p.add_argument("--tpot-ms", default=None, action=Checked, check=positive, metavar="Y",
                   help="TPOT target [ms] (default: from --targets, else 50)")
    p.add_argument("--stat", default=None, action=Checked, check=one_of(STATS), metavar="S",
                   help=f"statistic the targets apply to, one of {', '.join(STATS)} (default: from --targets, "
                        "else p90)")
    p.add_argument("--targets", default=None, action=Checked, check=preset_name("targets"), metavar="NAME",
                   help="latency-target preset (see: presets targets); --ttft-ms/--tpot-ms/--stat override it")
    p.add_argument("--rate", default=None, action=Checked, check=positive, metavar="R",
                   help="arrivals per second to serve with the fewest GPUs (default: none, find the highest "
                        "rate the budget sustains)")
    dtypes = Rule(f"one dtype or a comma-separated list of {', '.join(sorted(DTYPE_BYTES))}", _dtype_list)
    p.add_argument("--weight-dtype", default=None, action=Checked, check=dtypes, metavar="D[,D]",
                   help="weight dtypes to search (default: the model's released dtype and fp8, plus fp4 on "
                        "GPUs with FP4 tensor cores)")
    p.add_argument("--kv-dtype", default=None, action=Checked, check=dtypes, metavar="D[,D]",
                   help="KV-cache dtypes to search (default: bf16,fp8)")
    p.add_argument("--mode", default="both", action=Checked,
                   check=one_of(["both", "colocated", "disaggregated"]), metavar="M",
                   help="serving modes to search: both, colocated, disaggregated (default: both)")
    p.add_argument("--link", default=None, action=Checked, check=preset_name("links"), metavar="L",
                   help="KV-transfer link of disaggregated serving (default: the GPU's scale-out link)")
    p.add_argument("--runtime", default="default", action=Checked, check=preset_name("runtime"), metavar="NAME",
                   help="runtime preset (default: default)")
    sizes = Rule("one pipeline size or a comma-separated list of them, whole numbers from 1 to 128 (e.g. 1,2,4)",
                 _int_list)
    p.add_argument("--pipeline-sizes", default=None, action=Checked, check=sizes, metavar="P[,P]",
                   help="pipeline-parallel sizes searched, comma-separated (1: no pipeline; default: 1,2,4)")
    p.add_argument("--speculative", default=None, action=Checked, check=preset_name("speculative"), metavar="NAME",
                   help="also search speculative decoding on every decoding side with this preset "
                        "(data/speculative.yaml: deepseek-mtp-1, deepseek-mtp-3, eagle3-llama-3.1-8b, ngram-5)")
    p.add_argument("--speculative-accepted-length", default=None, action=Checked, check=positive, metavar="TAU",
                   help="your mean tokens per verify step (accepted drafts + 1) in place of the preset's, which "
                        "was measured on other traffic (needs --speculative)")
    p.add_argument("--engine", default="vllm", action=Checked, check=one_of(["vllm", "sglang", "trtllm"]),
                   metavar="E", help="engine whose launch commands are printed: vllm, sglang or trtllm "
                                     "(trtllm-serve, with its extra-options YAML); all three are in --json "
                                     "(default: vllm)")
    p.add_argument("--top", default=8, action=Checked, check=int_in(1, 1000), metavar="K",
                   help="configurations listed (default: 8)")
    p.add_argument("--simulate", default=0, action=Checked, check=int_in(0, 10), metavar="K",
                   help="re-check the K best configurations with the serving simulator and report where it "
                        "and the analytic estimate disagree by more than 10%% (default: 0)")
    p.add_argument("--scheduler", default=None, action=Checked, check=_address(),
                   metavar="ADDRESS", help="run the search on this Dask cluster (tcp://host:8786; needs "
                                           "llmexplore[dask]); the answer is the same as without it")
    p.add_argument("--workers", default=None, action=Checked, check=int_in(1, 256), metavar="W",
                   help="local worker processes for the search (default: 1, in this process)")
    from ..sweeps.plan.question import DEFAULT_PRICE_TIER, OBJECTIVES

    p.add_argument("--objective", default="tokens_per_s_per_gpu", action=Checked, check=one_of(OBJECTIVES),
                   metavar="O", help="what the best configuration is best at: tokens_per_s_per_gpu (output tokens/s "
                                     "per GPU; with --rate the fewest GPUs), usd_per_mtok ($ per million input and "
                                     "output tokens; with --rate the lowest $/hour) or j_per_token (GPU board "
                                     "energy per output token) (default: tokens_per_s_per_gpu)")
    p.add_argument("--budget-usd-per-hour", default=None, action=Checked,
                   check=number_in(0.0, 1e9, lo_open=True), metavar="USD",
                   help="spend at most this many US dollars per hour on GPUs (prices: --price-tier), as well as "
                        "at most --gpus GPUs")
    p.add_argument("--price-tier", default=None, action=Checked, check=preset_name("prices"), metavar="TIER",
                   help=f"price tier of data/prices.yaml (see: presets prices; default: {DEFAULT_PRICE_TIER}); "
                        "every price shows its date")
    p.add_argument("--usd-per-gpu-hour", default=None, action=Checked,
                   check=Rule("a price > 0 in USD per GPU-hour (at most 10,000), or GPU=PRICE pairs separated by "
                              "commas (h200=2.5,b200=4.1)", _prices),
                   metavar="P", help="your own price per GPU-hour in place of the tier's (one number for a "
                                     "single GPU type, else GPU=PRICE pairs)")
    p.add_argument("--long-share", default=None, action=Checked, check=number_in(0.0, 1.0, lo_open=True,
                                                                                  hi_open=True),
                   metavar="F", help="a length mix: this share of the requests has --long-isl prompt tokens (the "
                                     "rest shorter, --isl/--osl staying the mean); also searches two colocated "
                                     "pools with prompts routed by length (needs --long-isl)")
    p.add_argument("--long-isl", default=None, action=Checked, check=tokens, metavar="L",
                   help="prompt tokens of the long requests of --long-share")
    p.add_argument("--long-osl", default=None, action=Checked, check=tokens, metavar="L",
                   help="output tokens of the long requests (default: --osl)")
    p.add_argument("--json", action="store_true",
                   help='JSON: {"best_mode", "best": {..., "config", "launch"}, "runner_up", "margin_pct", '
                        '"disagg_over_agg_ratio", "best_by_mode", "frontiers": {"colocated": [...], '
                        '"disaggregated": [...]}, "top": [...], "infeasible": [...], "simulation": [...], '
                        '"best_simulated": the best configuration that also meets the targets in the simulation '
                        '(with --simulate), "inputs"}')
    p.set_defaults(func=run, flags=FLAGS)


def _row(r):
    from ._framework import jsonable

    return None if r is None else jsonable({k: v for k, v in r.items()})


def run(args) -> int:
    from .. import presets
    from ..findings import plan as fp
    from ..deployment import MODES
    from ..sweeps import plan as sp

    ttft, tpot, stat = args.ttft_ms, args.tpot_ms, args.stat
    from ..errors import SpecError

    try:
        gpus = _gpu_list(args.gpu)
    except ValueError:
        raise SpecError(f"--gpu must be one hardware preset or up to four distinct ones separated by commas "
                        f"(h200,b200), got {args.gpu!r}") from None
    prices = args.usd_per_gpu_hour
    if isinstance(prices, float):
        if len(gpus) > 1:
            raise SpecError(f"--usd-per-gpu-hour must give GPU=PRICE pairs when --gpu names several types "
                            f"({', '.join(gpus)}), got {prices:g}")
        prices = ((gpus[0], prices),)
    if args.targets is not None:
        t = presets.target(args.targets)
        ttft = t.ttft_ms if ttft is None else ttft
        tpot = t.tpot_ms if tpot is None else tpot
        stat = t.stat if stat is None else stat
    q = sp.Question(model=args.model, gpu=gpus[0], other_gpus=gpus[1:], gpus=args.gpus, isl=args.isl, osl=args.osl,
                    ttft_ms=2000.0 if ttft is None else ttft, tpot_ms=50.0 if tpot is None else tpot,
                    stat=stat or "p90", rate_per_s=args.rate, runtime=args.runtime, weight_dtypes=args.weight_dtype,
                    kv_dtypes=args.kv_dtype, link=args.link,
                    modes=MODES if args.mode == "both" else (args.mode,), speculative=args.speculative,
                    speculative_accepted_length=args.speculative_accepted_length, objective=args.objective,
                    budget_usd_per_hour=args.budget_usd_per_hour, price_tier=args.price_tier,
                    usd_per_gpu_hour=prices or (), long_share=args.long_share, long_isl=args.long_isl,
                    long_osl=args.long_osl,
                    **({} if args.pipeline_sizes is None else {"pipeline_sizes": args.pipeline_sizes}))
    res = sp.plan(q, scheduler=args.scheduler, workers=args.workers)
    doc = fp.summary(res, top=args.top, simulate=args.simulate)
    doc["not_resolved"] = q.not_resolved()
    if args.json:
        print_json(doc)
        return EXIT_OK
    print(doc["question_text"])
    for line in doc["not_resolved"]:
        print(line)
    for line in doc["sentences"]:
        print(line)
    ok = doc["top"]
    if ok:
        print()
        print(format_table(ok, TABLE_COLS))
    b = doc["best"]
    if b is not None:
        print()
        print(f"launch ({args.engine}):")
        for e in b["launch"][args.engine]:
            head = f"  {e['role']}: {e['instances']} x {e['gpus_per_instance']} {e['gpu']} GPUs"
            print(head + _files_text(e) + (f"\n    {e['command']}" if e.get("command") else "") +
                  (f"\n    note: {e['note']}" if e.get("note") else ""))
    for s in doc["simulation"]:
        print(s["sentence"])
    if doc["simulated_sentence"]:
        print(doc["simulated_sentence"])
    v = doc["best_simulated_deployment"]
    if v is not None and b is not None and v["label"] != b["label"]:
        print(f"launch ({args.engine}) of {v['label']}, the best that meets both targets in the simulation:")
        for e in v["launch"][args.engine]:
            print(f"  {e['role']}: {e['instances']} x {e['gpus_per_instance']} {e['gpu']} GPUs" + _files_text(e)
                  + (f"\n    {e['command']}" if e.get("command") else ""))
    return EXIT_OK


def _files_text(entry: dict) -> str:
    """The files a launch command reads (TensorRT-LLM's extra-options YAML), each under a 'file NAME:' line."""
    out = ""
    for name, text in (entry.get("files") or {}).items():
        out += f"\n    file {name}:" + "".join(f"\n      {line}" for line in text.rstrip("\n").splitlines())
    return out

"""``llmexplore simulate``: the latency distributions of one configuration in the iteration-level simulator.

Run the iteration-level serving simulator (continuous batching, chunked prefill, KV-limited admission with
preemption; prefill pool, KV transfer and decode pool when disaggregated) on one configuration, e.g. the
'best' of `llmexplore plan --json`, and print TTFT, TPOT, ITL and end-to-end latency (mean, p50, p90, p99) and
the throughput.
"""

from __future__ import annotations

from .. import _check
from ._framework import (EXIT_OK, Checked, Col, command, format_table, one_of, int_in, number_in, preset_name, print_json,
                         sampler_option, text_value)

__all__ = ["add", "run", "FLAGS"]

FLAGS = {"rate_per_s": "--rate", "concurrency": "--concurrency", "requests": "--requests", "isl": "--isl",
         "osl": "--osl", "isl_sigma": "--isl-sigma", "osl_sigma": "--osl-sigma", "seed": "--seed",
         "runtime": "--runtime", "config": "--config", "trace": "--trace", "prefix_ratio": "--prefix-ratio",
         "sampler": "--sampler", "capacity_scheduler_policy": "--capacity-policy",
         "request_host_ms": "--request-host-ms", "enable_mixed_chunk": "--mixed-chunk"}

STAT_COLS = [Col("metric", "metric"), Col("mean", "mean ms", ".4g"), Col("p50", "p50 ms", ".4g"),
             Col("p90", "p90 ms", ".4g"), Col("p99", "p99 ms", ".4g")]


def add(sub) -> None:
    from ..models.serving.disagg import MAX_RATE_OR_MS, MAX_WORKLOAD_TOKENS
    from ..sweeps.plan.check import MAX_SIM_REQUESTS

    p = command(sub, "simulate", __doc__,
                help="latency distributions of one configuration (serving simulator)")
    req = p.add_argument_group("required")
    req.add_argument("--config", required=True, action=Checked, check=text_value("a JSON file or JSON text", 100_000),
                     metavar="FILE|JSON", help="configuration: a JSON file or text with model, gpu, mode, "
                                               "weight_dtype, kv_dtype, sides (the 'best' -> 'config' of "
                                               "`llmexplore plan --json`; a whole plan JSON is read too)")
    tokens = int_in(1, MAX_WORKLOAD_TOKENS)
    req.add_argument("--isl", required=True, action=Checked, check=tokens, metavar="I",
                     help="prompt tokens (the median with --isl-sigma)")
    req.add_argument("--osl", required=True, action=Checked, check=tokens, metavar="O",
                     help="output tokens (the median with --osl-sigma)")
    from ..models.serving.workload import MIN_RATE_PER_S

    p.add_argument("--rate", default=None, action=Checked, check=number_in(MIN_RATE_PER_S, MAX_RATE_OR_MS),
                   metavar="R", help="Poisson arrivals per second (give --rate or --concurrency)")
    p.add_argument("--concurrency", default=None, action=Checked, check=int_in(1, 1 << 20), metavar="C",
                   help="closed loop: C requests in flight, each replaced when it finishes")
    p.add_argument("--trace", default=None, action=Checked, check=text_value("a CSV file path", 4096), metavar="CSV",
                   help="replay a recorded trace: columns arrival_s, prompt_tokens, output_tokens[, prefix_id] "
                        "(instead of --rate or --concurrency; at most --requests of its requests)")
    p.add_argument("--prefix-ratio", default=0.0, action=Checked, check=number_in(0.0, 1.0, hi_open=True),
                   metavar="F", help="share of each prompt that is a cached shared prefix (default: 0)")
    p.add_argument("--requests", default=2000, action=Checked, check=int_in(1, MAX_SIM_REQUESTS), metavar="N",
                   help="requests simulated (default: 2000)")
    p.add_argument("--isl-sigma", default=0.0, action=Checked, check=number_in(0.0, 3.0), metavar="S",
                   help="log-sd of lognormal prompt lengths (default: 0, all equal)")
    p.add_argument("--osl-sigma", default=0.0, action=Checked, check=number_in(0.0, 3.0), metavar="S",
                   help="log-sd of lognormal output lengths (default: 0, all equal)")
    p.add_argument("--seed", default=0, action=Checked, check=int_in(0, 2**32 - 1), metavar="K",
                   help="random seed (default: 0)")
    p.add_argument("--runtime", default="default", action=Checked, check=preset_name("runtime"), metavar="NAME",
                   help="runtime preset (default: default)")
    sampler_option(p)
    from ..models.serving.engines import TrtllmPolicy

    p.add_argument("--capacity-policy", default=None, action=Checked,
                   check=one_of(TrtllmPolicy.CAPACITY_POLICIES), metavar="P",
                   help="TensorRT-LLM's capacity_scheduler_policy, with a runtime of that engine (--runtime trtllm): "
                        "GUARANTEED_NO_EVICT admits a request only when the KV blocks to complete it fit (its "
                        "default), MAX_UTILIZATION packs what fits and pauses requests when blocks run out "
                        "(default: the engine's)")
    p.add_argument("--mixed-chunk", action="store_true", default=None,
                   help="SGLang's --enable-mixed-chunk, with a runtime of that engine (--runtime sglang): prefill "
                        "chunks share the decodes' iterations (default: off, as in SGLang, whose scheduler runs a "
                        "prefill batch apart, before the decodes, whenever a prompt can run)")
    p.add_argument("--request-host-ms", default=None, action=Checked, check=number_in(0.0, 1e4), metavar="MS",
                   help="serving-stack time per request before the scheduler (HTTP, tokenisation) [ms], replacing "
                        "the runtime preset's (its request_host_ms + request_host_us_per_token x prompt tokens); 0: "
                        "the pure engine (default: the preset's)")
    p.add_argument("--json", action="store_true",
                   help='JSON: {"summary": {ttft/tpot/itl/e2e _mean/_p50/_p90/_p99 _ms, throughput, ...}, '
                        '"cdf": {"ttft_ms": [...], ...}, "quantiles": [...], "config", "inputs"}')
    p.set_defaults(func=run, flags=FLAGS)


def _read_config(text: str) -> dict:
    from pathlib import Path

    from ..errors import SpecError

    src = text.strip()
    if not src.startswith(("{", "[")):
        path = Path(src)
        if not path.is_file():
            raise SpecError(f"config must be a JSON file or JSON text, got {text!r} (no such file)")
        try:
            src = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise SpecError(f"config file {text!r} cannot be read: {exc}") from None

    doc = _check.json_text("config", src)
    if isinstance(doc, dict) and isinstance(doc.get("best"), dict) and "config" in doc["best"]:
        doc = doc["best"]["config"]  # a whole `plan --json` answer
    return doc


def run(args) -> int:

    from ..errors import SpecError
    from ..sweeps import plan as sp

    given = [f for f, v in (("--rate", args.rate), ("--concurrency", args.concurrency), ("--trace", args.trace))
             if v is not None]
    if not given:
        raise SpecError("--rate, --concurrency or --trace is required (give exactly one)")
    if len(given) > 1:
        shown_ = ", ".join(f"{f} {getattr(args, f[2:])}" for f in given)
        raise SpecError(f"{' and '.join(given)} must not both be given, got {shown_}")
    if args.trace is not None:
        from .._check import path_kind
        from ._framework import shown

        if path_kind(_check.user_path("--trace", args.trace)) != "file":
            raise SpecError(f"--trace must be an existing CSV file, got {shown(args.trace)}")
        try:
            with open(_check.user_path("--trace", args.trace), "rb"):
                pass
        except OSError as exc:
            raise SpecError(f"--trace must be a readable CSV file, got {shown(args.trace)} ({exc.strerror})") from None
    cfg = _read_config(args.config)
    out = sp.simulate_config(cfg, isl=args.isl, osl=args.osl, rate_per_s=args.rate, concurrency=args.concurrency,
                             n_requests=args.requests, runtime=args.runtime, isl_sigma=args.isl_sigma,
                             osl_sigma=args.osl_sigma, seed=args.seed, trace=args.trace,
                             prefix_ratio=args.prefix_ratio, sampler=args.sampler,
                             capacity_scheduler_policy=args.capacity_policy,
                             request_host_ms=args.request_host_ms, enable_mixed_chunk=args.mixed_chunk)
    s = out["summary"]
    summ = {(k[:-2] + "_ms" if _is_duration_s(k) else k): (v * 1e3 if _is_duration_s(k) else v) for k, v in s.items()}
    if args.json:
        print_json({"summary": summ, "cdf": out["cdf"], "quantiles": out["quantiles"], "config": out["config"],
                    "not_resolved": out["not_resolved"],
                    "inputs": {"isl": args.isl, "osl": args.osl, "rate": args.rate, "concurrency": args.concurrency,
                               "requests": args.requests, "isl_sigma": args.isl_sigma, "osl_sigma": args.osl_sigma,
                               "trace": args.trace, "prefix_ratio": args.prefix_ratio,
                               "seed": args.seed, "runtime": args.runtime, "sampler": args.sampler,
                               "capacity_policy": args.capacity_policy,
                               "request_host_ms": args.request_host_ms, "mixed_chunk": args.mixed_chunk}})
        return EXIT_OK
    load = (f"{args.rate:g} req/s (Poisson)" if args.rate is not None else f"concurrency {args.concurrency}"
            if args.concurrency is not None else f"the arrivals of {args.trace}")
    lengths = "from the trace" if args.trace is not None else f"of {args.isl:,} + {args.osl:,} tokens"
    print(f"{cfg['mode']} {cfg['model']} on {cfg['gpu']}: {s['requests']:,} requests {lengths} at {load}")
    import math

    # a metric no request defines (TPOT and ITL when every output is one token) shows "-", with the reason below
    rows = [{"metric": m.upper(), **{k: (None if not math.isfinite(summ[f"{m}_{k}_ms"]) else summ[f"{m}_{k}_ms"])
                                     for k in ("mean", "p50", "p90", "p99")}}
            for m in ("ttft", "tpot", "itl", "e2e")]
    print(format_table(rows, STAT_COLS))
    if not math.isfinite(summ["tpot_mean_ms"]):
        print("TPOT and ITL: not defined, every output is a single token (--osl 1): there is no gap between tokens")
    for why in out["not_resolved"]:
        print(why)
    print(f"throughput {s['output_tokens_per_s']:,.0f} output tokens/s, {s['requests_per_s']:.3g} req/s; mean decode "
          f"batch {s['mean_decode_batch']:.1f}; {s['preemptions']} preemptions; {s['iterations']:,} iterations")
    return EXIT_OK


def _is_duration_s(key: str) -> bool:
    """A summary key holding a duration in seconds, shown in ms (``ttft_p99_s``); not a rate per second
    (``output_tokens_per_s``: its unit suffix is a contract, issue 18 §6) and not the run's makespan."""
    return key.endswith("_s") and not key.endswith("_per_s") and key != "makespan_s"

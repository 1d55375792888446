"""``llmexplore offload``: load a cached KV prefix from a storage tier, or recompute it? Both costs, the decision,
the break-even and what a queue wait buys by preloading.

Marginal recompute time of a prefix's cached blocks on the GPUs vs the time to load them from a storage tier
(block-granular, device -> host -> GPU, pipelined), the decision (load exactly when the prefix is at or above
the break-even), which term sets the break-even, and the exposed load when loading starts while the request
waits in the queue. --pp recomputes on a pipeline of stages of --tp GPUs (each stage loads its own layers' KV;
stages on different nodes through their own drives); --speculative adds the draft model's own KV layer (loaded
and recomputed with the target's; n-gram lookup has none).
"""

from __future__ import annotations

from ._framework import (COMMON_FLAGS, EXIT_OK, Checked, band_option, dtype_runtime_options, int_in,
                         model_command, number_in, preset_name, print_json)

__all__ = ["add", "run", "FLAGS"]

#: API field names -> the flags of this command
FLAGS = {**COMMON_FLAGS, "storage": "--storage", "prefix_tokens": "--prefix", "queue_wait_ms": "--queue-wait-ms",
         "tp": "--tp", "block_tokens": "--block-tokens", "read_GBps": "--read-GBps", "latency_us": "--latency-us",
         "suffix_tokens": "--new-tokens", "pp": "--pp", "speculative": "--speculative"}


def add(sub) -> None:
    from ..deployment import MAX_RANKS
    from ..models.offload.cost import MAX_PREFIX, MIN_SEARCH_BLOCK_TOKENS

    p, req = model_command(sub, "offload", __doc__,
                           help="load a cached KV prefix from host memory / SSD / NFS, or recompute it: "
                                "costs, decision, break-even, preload")
    req.add_argument("--storage", required=True, action=Checked, check=preset_name("storage"), metavar="S",
                     help="storage tier preset (see: presets storage)")
    req.add_argument("--prefix", required=True, action=Checked, check=int_in(0, MAX_PREFIX), metavar="N",
                     help="cached prefix length [tokens]")
    p.add_argument("--queue-wait-ms", default=0.0, action=Checked, check=number_in(0.0, 1e9), metavar="W",
                   help="time the request waits before it runs, during which its blocks can be preloaded [ms] "
                        "(default: 0)")
    p.add_argument("--tp", default=1, action=Checked, check=int_in(1, MAX_RANKS), metavar="T",
                   help="tensor-parallel GPUs that recompute (and each receive their KV shard) (default: 1)")
    p.add_argument("--block-tokens", default=256, action=Checked, check=int_in(MIN_SEARCH_BLOCK_TOKENS, 1 << 16),
                   metavar="B", help=f"tokens per cached block; only full blocks are cached (default: 256; at least "
                                     f"{MIN_SEARCH_BLOCK_TOKENS}: the break-even search up to {MAX_PREFIX:,} tokens "
                                     f"spans at most 65,536 blocks)")
    p.add_argument("--new-tokens", default=256, action=Checked, check=int_in(1, 1 << 20), metavar="S",
                   help="new prompt tokens after the prefix, prefilled either way (default: 256)")
    p.add_argument("--read-GBps", default=None, action=Checked, check=number_in(0.0, 1e5, lo_open=True),
                   metavar="BW", help="override the tier's device read bandwidth [GB/s]")
    p.add_argument("--latency-us", default=None, action=Checked, check=number_in(0.0, 1e7), metavar="US",
                   help="override the tier's per-read latency [us]")
    p.add_argument("--serial", action="store_true", help="the two hops one after the other (default: pipelined "
                                                          "per block)")
    p.add_argument("--pp", default=1, action=Checked, check=int_in(1, 128), metavar="P",
                   help="pipeline stages that recompute, each of --tp GPUs and each loading its own layers' KV "
                        "(default: 1, no pipeline)")
    p.add_argument("--speculative", default=None, action=Checked, check=preset_name("speculative"), metavar="NAME",
                   help="decode with this speculative-decoding preset (data/speculative.yaml): its draft model's "
                        "KV layer is loaded and recomputed with the target's (the accepted length changes nothing "
                        "here)")
    dtype_runtime_options(p)
    band_option(p, default=False)
    p.add_argument("--json", action="store_true", help="JSON output (with --band: break_even_tokens_lo/_hi, "
                                                       "recompute_ms_lo/_hi)")
    p.set_defaults(func=run, flags=FLAGS)


#: headline numbers that get a parameter band with --band (the load side has no kernel curves: its band is 0)
BAND_KEYS = ("recompute_ms", "load_ms", "break_even_tokens", "closed_form_tokens", "a_us_per_token")


def run(args) -> int:
    from ..sweeps import offload as so

    from ..models.step.uncertainty import DRAWS
    from ..sweeps.bands import with_band

    def setup(rt):
        return so.setup(args.model, args.gpu, storage=args.storage, tp=args.tp, kv_dtype=args.kv_dtype,
                        weight_dtype=args.weight_dtype, runtime=rt, block_tokens=args.block_tokens,
                        pipelined=not args.serial, suffix_tokens=args.new_tokens, read_GBps=args.read_GBps,
                        latency_us=args.latency_us, pp=args.pp, speculative=args.speculative)

    s = setup(args.runtime)
    rec = with_band(lambda rt: so.point_summary(s if rt is s.dep.runtime else setup(rt), args.prefix,
                                                queue_wait_ms=args.queue_wait_ms),
                    s.dep.runtime, BAND_KEYS, n=DRAWS if args.band else 0)
    if args.json:
        print_json(rec, reasons={"break_even_tokens": "never: loading does not pay for any prefix up to 2,097,152 "
                                                      "tokens",
                                 "preload_break_even_tokens": "never: even with preloading, loading does not pay "
                                                              "for any prefix up to 2,097,152 tokens"})
        return EXIT_OK
    be = rec["break_even_tokens"]
    be_text = "never (up to 2M tokens)" if be == float("inf") else f"{be:,.0f} tokens"
    if rec.get("break_even_tokens_lo") is not None:
        be_text += f" [{rec['break_even_tokens_lo']:,.0f}-{rec['break_even_tokens_hi']:,.0f}]"
    why = ("the fixed latency of a load (per token, loading is cheaper than recomputing)" if rec["set_by"] == "latency"
           else "the per-token bandwidth (per token, loading is dearer than recomputing; the quadratic attention "
                "term of recompute catches up)")
    print(f"{s.label}")
    if "stage_bytes_MB" in rec and s.pp > 1:
        print(f"pipeline: {s.pp} stages on {rec['storage_nodes']} node{'s' if rec['storage_nodes'] > 1 else ''}; "
              f"the worst stage loads {rec['stage_bytes_MB']:,.1f} MB, the worst node's storage path reads "
              f"{rec['node_bytes_MB']:,.1f} MB")
    if "draft_bytes_MB" in rec and s.speculative is not None:
        print(f"draft: {rec['draft_bytes_MB']:,.1f} MB of {s.speculative.name}'s own KV loaded with the target's"
              if rec["draft_bytes_MB"] else f"draft: {s.speculative.name} has no draft model, no KV of its own")
    print(f"prefix {rec['prefix_tokens']:,} tokens: {rec['blocks']} full blocks ({rec['cached_tokens']:,} tokens, "
          f"{rec['bytes_MB']:,.1f} MB) cached")
    print(f"recompute {rec['recompute_ms']:.3f} ms vs load {rec['load_ms']:.3f} ms "
          f"(effective read {rec['effective_read_GBps']:.2f} GB/s) -> {rec['decision']}")
    print(f"break-even: {be_text}, set by {why}; closed form {rec['closed_form_tokens']:,.0f} tokens "
          f"(a = {rec['a_us_per_token']:.2f} µs/token to recompute, c = {rec['c_us_per_token']:.2f} µs/token to load)")
    if rec["band"]["draws"]:
        print(f"[lo-hi]: {rec['band']['what']}")
    if rec["also_pays_below"]:
        print("note: loading also pays for some shorter prefixes (an MoE prefill that wakes every expert)")
    if rec["queue_wait_ms"]:
        pbe = rec["preload_break_even_tokens"]
        print(f"preloaded during a {rec['queue_wait_ms']:g} ms queue wait: {rec['exposed_load_ms']:.3f} ms exposed "
              f"(saves {rec['preload_benefit_ms']:.3f} ms); break-even "
              f"{'never' if pbe == float('inf') else f'{pbe:,.0f} tokens'} -> {rec['decision_with_preload']}")
    return EXIT_OK

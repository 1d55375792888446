"""``llmexplore pd``: prefill/decode disaggregation vs colocated serving at a rate and SLOs.

Time of one prefill and one decode step, the KV transfer per request, and the smallest prefill/decode pools
(and colocated pool) meeting p99 TTFT and TPOT targets at a Poisson arrival rate.
"""

from __future__ import annotations

from ._framework import (COMMON_FLAGS, EXIT_OK, Checked, band_option, dtype_runtime_options, int_in,
                         model_command, number_in, preset_name, print_json, sampler_option, speculative_options)

__all__ = ["add", "run", "FLAGS"]

#: API field names -> the flags of this command (errors from the model name the flag the user typed)
FLAGS = {**COMMON_FLAGS, "prompt_tokens": "--prompt", "output_tokens": "--output", "rate_per_s": "--rate",
         "ttft_slo_ms": "--ttft-ms", "tpot_slo_ms": "--tpot-ms", "prompt_sigma": "--prompt-sigma",
         "prefill_tp": "--prefill-tp", "decode_tp": "--decode-tp", "nics": "--nics", "link": "--link",
         "batch": "--batch", "decode_batch": "--batch", "sampler": "--sampler", "speculative": "--speculative",
         "accepted_length": "--accepted-length", "decode_pp": "--decode-pp", "prefill_pp": "--prefill-pp"}


def add(sub) -> None:
    from ..models.serving.disagg import MAX_RATE_OR_MS, MAX_WORKLOAD_TOKENS
    from ..deployment import MAX_RANKS
    from ..models.step.engine import MAX_BATCH

    p, req = model_command(sub, "pd", __doc__, help="prefill/decode disaggregation vs colocated serving")
    tokens = int_in(1, MAX_WORKLOAD_TOKENS)
    req.add_argument("--prompt", required=True, action=Checked, check=tokens, metavar="P",
                     help="prompt tokens")
    req.add_argument("--output", required=True, action=Checked, check=tokens, metavar="O",
                     help="output tokens")
    positive = number_in(0.0, MAX_RATE_OR_MS, lo_open=True)
    p.add_argument("--rate", default=10.0, action=Checked, check=positive, metavar="R",
                   help="arrivals per second (default: 10)")
    p.add_argument("--ttft-ms", default=1000.0, action=Checked, check=positive, metavar="X",
                   help="p99 TTFT target [ms] (default: 1000)")
    p.add_argument("--tpot-ms", default=50.0, action=Checked, check=positive, metavar="Y",
                   help="p99 TPOT target [ms] (default: 50)")
    p.add_argument("--link", default="roce-400g", action=Checked, check=preset_name("links"), metavar="L",
                   help="KV-transfer link preset (default: roce-400g)")
    p.add_argument("--nics", default=None, action=Checked, check=int_in(1, 1024), metavar="N",
                   help="NICs per instance (default: one per GPU)")
    p.add_argument("--prefill-tp", default=8, action=Checked, check=int_in(1, MAX_RANKS), metavar="A",
                   help="GPUs per prefill instance (default: 8)")
    p.add_argument("--decode-tp", default=8, action=Checked, check=int_in(1, MAX_RANKS), metavar="B",
                   help="GPUs per decode (and colocated) instance (default: 8)")
    p.add_argument("--batch", default=64, action=Checked, check=int_in(1, MAX_BATCH), metavar="N",
                   help="decode batch at which decode_step_ms is reported (default: 64)")
    p.add_argument("--prompt-sigma", default=0.0, action=Checked, check=number_in(0.0, 3.0), metavar="SIG",
                   help="log-sd of lognormal prompt lengths around the median --prompt (default: 0, all equal)")
    p.add_argument("--serial", action="store_true", help="send the KV after the prefill (default: layer-wise)")
    p.add_argument("--decode-pp", default=1, action=Checked, check=int_in(1, 128), metavar="P",
                   help="pipeline stages per decode instance, each of --decode-tp GPUs (default: 1)")
    p.add_argument("--prefill-pp", default=1, action=Checked, check=int_in(1, 128), metavar="P",
                   help="pipeline stages per prefill instance, each of --prefill-tp GPUs (default: 1)")
    speculative_options(p, what="decode every decoding instance")
    dtype_runtime_options(p)
    sampler_option(p)
    band_option(p, default=False)
    p.add_argument("--json", action="store_true", help="JSON output")
    p.set_defaults(func=run, flags=FLAGS)


#: headline numbers that get a parameter band (``<key>_lo`` / ``<key>_hi`` in --json; dotted = nested)
BAND_KEYS = ("prefill_ms", "decode_step_ms", "transfer_exposed_ms", "disaggregated.gpus",
             "disaggregated.prefill_instances", "disaggregated.decode_instances", "disaggregated.pd_gpu_ratio",
             "disaggregated.goodput_per_gpu", "colocated.gpus", "colocated.instances", "colocated.goodput_per_gpu")


def run(args) -> int:
    from .. import presets
    from ..sweeps import disagg as disagg_sweeps
    from ..models.step.uncertainty import DRAWS
    from ..sweeps.bands import with_band

    presets.link(args.link)  # unknown link: one-line error before any work
    s = disagg_sweeps.setup(args.model, args.gpu, prefill_tp=args.prefill_tp, decode_tp=args.decode_tp,
                            prompt_tokens=args.prompt, output_tokens=args.output, rate_per_s=args.rate,
                            ttft_slo_ms=args.ttft_ms, tpot_slo_ms=args.tpot_ms, weight_dtype=args.weight_dtype,
                            kv_dtype=args.kv_dtype, runtime=args.runtime, nics=args.nics,
                            prompt_sigma=args.prompt_sigma, sampler=args.sampler, speculative=args.speculative,
                            accepted_length=args.accepted_length, decode_pp=args.decode_pp,
                            prefill_pp=args.prefill_pp)

    def build(rt):
        si = s if rt is s.prefill.runtime else disagg_sweeps.setup(
            args.model, args.gpu, prefill_tp=args.prefill_tp, decode_tp=args.decode_tp, prompt_tokens=args.prompt,
            output_tokens=args.output, rate_per_s=args.rate, ttft_slo_ms=args.ttft_ms, tpot_slo_ms=args.tpot_ms,
            weight_dtype=args.weight_dtype, kv_dtype=args.kv_dtype, runtime=rt, nics=args.nics,
            prompt_sigma=args.prompt_sigma, sampler=args.sampler, speculative=args.speculative,
            accepted_length=args.accepted_length, decode_pp=args.decode_pp, prefill_pp=args.prefill_pp)
        return disagg_sweeps.point_summary(si, link=args.link, decode_batch=args.batch, pipelined=not args.serial)

    pt = with_band(build, s.prefill.runtime, BAND_KEYS, n=DRAWS if args.band else 0)
    doc = {**pt,
           "inputs": {"model": s.prefill.model.name, "gpu": s.prefill.hardware.name, "prompt": args.prompt,
                      "output": args.output, "rate": args.rate, "ttft_ms": args.ttft_ms, "tpot_ms": args.tpot_ms,
                      "prompt_sigma": args.prompt_sigma, "link": args.link, "nics": args.nics,
                      "prefill_tp": args.prefill_tp, "decode_tp": args.decode_tp, "pipelined": not args.serial,
                      "weight_dtype": s.prefill.weight_dtype, "kv_dtype": args.kv_dtype, "sampler": args.sampler,
                      "runtime": s.prefill.runtime.name, "speculative": args.speculative, "decode_pp": args.decode_pp,
                      "prefill_pp": args.prefill_pp,
                      "accepted_length": s.speculative.tokens_per_step if s.speculative else None}}
    if args.json:
        print_json(doc)
        return EXIT_OK
    print(f"{s.prefill.model.label} on {s.prefill.hardware.label}: prompt {args.prompt}, output {args.output}, "
          f"{args.rate:g} req/s, p99 TTFT <= {args.ttft_ms:g} ms, TPOT <= {args.tpot_ms:g} ms")
    step_words = ("decode step" if s.speculative is None and args.decode_pp == 1 else
                  "time between a sequence's tokens" if s.speculative is None else
                  f"decode time per output token with {s.speculative.name} ({s.speculative.tokens_per_step:g} tokens "
                  "per step)")
    pre = f"TP{args.prefill_tp}" + (f" x PP{args.prefill_pp}, a new prompt every {doc['prefill_service_ms']:.2f} ms"
                                    if args.prefill_pp > 1 else "")
    print(f"prefill of one prompt ({pre}): {doc['prefill_ms']:.2f} ms; {step_words} at batch "
          f"{args.batch} (TP{args.decode_tp}{f' x PP{args.decode_pp}' if args.decode_pp > 1 else ''}): "
          f"{doc['decode_step_ms']:.2f} ms; decode batch fits up to "
          f"{pt['decode_batch_cap']}")
    print(f"KV per request {doc['kv_transfer_GB']:.3f} GB over {args.link}: {doc['transfer_serial_ms']:.2f} ms "
          f"serial, {doc['transfer_exposed_ms']:.2f} ms exposed ({'serial' if args.serial else 'pipelined'})")
    dd, cc = doc["disaggregated"], doc["colocated"]
    def rng(d, key, fmt):  # " [lo-hi]" of a banded number, when it has a band
        lo, hi = d.get(key + "_lo"), d.get(key + "_hi")
        return f" [{lo:{fmt}}-{hi:{fmt}}]" if lo is not None and hi is not None else ""

    if dd["feasible"]:
        print(f"disaggregated: {dd['prefill_instances']} prefill + {dd['decode_instances']} decode instances = "
              f"{dd['gpus']}{rng(dd, 'gpus', '.0f')} GPUs, {dd['goodput_per_gpu']:.3f} req/s/GPU, TTFT p99 "
              f"{dd['ttft_p99_ms']:.0f} ms, TPOT p99 {dd['tpot_p99_ms']:.1f} ms")
    else:
        print(f"disaggregated: infeasible ({dd['reason']})")
    if cc["feasible"]:
        print(f"colocated: {cc['instances']} instances = {cc['gpus']}{rng(cc, 'gpus', '.0f')} GPUs, "
              f"{cc['goodput_per_gpu']:.3f} req/s/GPU, "
              f"chunk {cc['chunk_tokens']} tokens, TTFT p99 {cc['ttft_p99_ms']:.0f} ms, TPOT p99 "
              f"{cc['tpot_p99_ms']:.1f} ms per request (ITL p99 {cc['itl_p99_ms']:.1f} ms)")
    else:
        print(f"colocated: infeasible ({cc['reason']})")
    if doc["band"]["draws"]:
        print(f"[lo-hi]: {doc['band']['what']}")
    return EXIT_OK

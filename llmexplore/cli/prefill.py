"""``llmexplore prefill``: B prompts prefilled together in one tensor-parallel forward pass: time by part,
tokens per second, FLOPs, MFU, and whether the batch's KV cache fits.

B prompts of P tokens each (X of them a cached prefix) prefilled together in one forward pass on T
tensor-parallel ranks, priced with the same per-kernel rooflines as a decode step: the pass's time [ms] by
part, new prompt tokens per second, FLOPs and MFU (an output, not an assumption), and the memory per rank [GB]
of the weights and the batch's KV cache against the usable HBM (a decode step's activations; the prefill's
transient activations are not counted, engines chunk long prompts).
"""

from __future__ import annotations

from ._framework import (COMMON_FLAGS, EXIT_OK, Checked, band_option, dtype_runtime_options, int_in,
                         model_command, print_json, sampler_option)

__all__ = ["add", "run", "FLAGS"]

#: headline numbers that get a parameter band (``<key>_lo`` / ``<key>_hi`` in --json)
BAND_KEYS = ("prefill_ms", "per_prompt_ms", "tokens_per_s", "mfu")

#: API field names -> the flags of this command
FLAGS = {**COMMON_FLAGS, "ranks": "--ranks", "prompt_tokens": "--prompt", "prefix_tokens": "--prefix",
         "batch": "--batch", "sampler": "--sampler"}


def add(sub) -> None:
    from ..deployment import MAX_RANKS
    from ..models.step.engine import MAX_BATCH, MAX_CONTEXT

    p, req = model_command(sub, "prefill", __doc__,
                           help="batched prefill: time by part, tokens/s, FLOPs, MFU, memory fit")
    req.add_argument("--ranks", required=True, action=Checked, check=int_in(1, MAX_RANKS), metavar="T",
                     help="tensor-parallel ranks T")
    req.add_argument("--prompt", required=True, action=Checked, check=int_in(1, MAX_CONTEXT), metavar="P",
                     help="prompt length P [tokens], the cached prefix included")
    p.add_argument("--batch", default=1, action=Checked, check=int_in(1, MAX_BATCH), metavar="B",
                   help="prompts prefilled together in one forward pass (default: 1)")
    p.add_argument("--prefix", default=0, action=Checked, check=int_in(0, MAX_CONTEXT), metavar="X",
                   help="tokens of each prompt already cached (prefix hit), < P (default: 0)")
    dtype_runtime_options(p)
    sampler_option(p)
    band_option(p, default=True)
    p.add_argument("--json", action="store_true",
                   help='JSON: {"prefill_ms", "per_prompt_ms", "tokens_per_s", "mfu" (each with _lo/_hi: the '
                        'band over the kernel-curve parameter draws, null without curves), "flops", parts in ms, '
                        'memory in GB, "feasible", "reason", "band": {...}, "inputs": {...}}')
    p.set_defaults(func=run, flags=FLAGS)


def run(args) -> int:
    from ..sweeps import prefill as sp

    from ..models.step.uncertainty import DRAWS
    from ..sweeps.bands import with_band

    dep = sp.setup(args.model, args.gpu, ranks=args.ranks, weight_dtype=args.weight_dtype, kv_dtype=args.kv_dtype,
                   runtime=args.runtime, sampler=args.sampler)

    def build(rt):
        d = dep if rt is dep.runtime else sp.setup(args.model, args.gpu, ranks=args.ranks,
                                                   weight_dtype=args.weight_dtype, kv_dtype=args.kv_dtype,
                                                   runtime=rt, sampler=args.sampler)
        return sp.point_summary(d, args.prompt, batch=args.batch, prefix_tokens=args.prefix)

    rec = with_band(build, dep.runtime, BAND_KEYS, n=DRAWS if args.band else 0)
    doc = {**rec, "inputs": {"model": dep.model.name, "gpu": dep.hardware.name, "ranks": dep.ranks,
                             "batch": args.batch, "prompt": args.prompt, "prefix": args.prefix,
                             "weight_dtype": dep.weight_dtype, "kv_dtype": dep.kv_dtype, "sampler": dep.sampler,
                             "runtime": dep.runtime.name}}
    if args.json:
        print_json(doc)
        return EXIT_OK
    B, X = rec["batch"], rec["prefix_tokens"]
    prompts = f"{B:,} prompt{'s' if B != 1 else ''} of {rec['prompt_tokens']:,} tokens"
    cached = f", {X:,} cached ({rec['new_tokens']:,} new each)" if X else ""
    print(f"{dep.label()}; {prompts}{cached}, one forward pass")
    band = (f" [{rec['prefill_ms_lo']:,.2f}-{rec['prefill_ms_hi']:,.2f}]" if rec["prefill_ms_lo"] is not None
            else "")
    print(f"prefill {rec['prefill_ms']:,.2f} ms{band}"
          + (f" ({rec['per_prompt_ms']:,.2f} ms of GPU time per prompt)" if B != 1 else "")
          + f", {rec['tokens_per_s']:,.0f} tokens/s, MFU {rec['mfu']:.3f} "
            f"({rec['flops']:.3e} FLOPs, {rec['achieved_TFLOPS_per_gpu']:,.0f} TFLOP/s per GPU)")
    print(f"parts [ms]: attention {rec['attention_ms']:,.2f} (core {rec['core_ms']:,.2f}), FFN {rec['ffn_ms']:,.2f}, "
          f"head {rec['head_ms']:,.2f}, comm {rec['comm_ms']:,.2f}, overhead {rec['overhead_ms']:,.2f}")
    if rec["band"]["draws"]:
        print(f"[lo-hi]: {rec['band']['what']}")
    fits = "fits" if rec["feasible"] else f"does not fit: {rec['reason']}"
    print(f"memory per rank [GB]: weights {rec['weights_GB']:,.2f} + KV {rec['kv_GB']:,.2f} + activations "
          f"{rec['activations_GB']:,.2f} + reserve {rec['reserve_GB']:,.2f} = {rec['total_GB']:,.2f} of "
          f"{rec['usable_GB']:,.2f} usable: {fits}")
    return EXIT_OK

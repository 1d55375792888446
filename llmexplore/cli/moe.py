"""``llmexplore moe``: MoE decode under routing skew, TP x EP vs pure TP, with redundant experts.

Decode step of an MoE model on N GPUs split into tp = N / ep x ep: routed-expert GEMMs on the busiest rank,
dispatch/combine all-to-all, load imbalance from a hot-expert skew, EPLB placement with redundant experts;
compared with pure TP. With --pp (pipeline stages, each of the N GPUs split as asked: P x N GPUs in all) or
--speculative (the verify pass carries k + 1 tokens per sequence through the MoE layers) both rows are compared by
their time per output token.
"""

from __future__ import annotations

from ._framework import (COMMON_FLAGS, EXIT_OK, Checked, Col, UsageError, dtype_runtime_options, format_table,
                         int_in, model_command, number_in, print_json, speculative_options)

__all__ = ["add", "run", "FLAGS"]

#: API field names -> the flags of this command (tp is not a flag: it is --gpus / --ep)
FLAGS = {**COMMON_FLAGS, "gpus": "--gpus", "ep": "--ep", "tp": "tp (= --gpus / --ep)",
         "ranks": "tp (= --gpus / --ep)", "redundant": "--redundant-experts", "batch": "--batch-tokens",
         "context": "--context", "skew": "--skew", "pp": "--pp", "speculative": "--speculative",
         "accepted_length": "--accepted-length"}


def add(sub) -> None:
    from ..models.step.engine import MAX_BATCH, MAX_CONTEXT
    from ..deployment import MAX_GPUS
    from ..models.moe.decode import MAX_REDUNDANT

    p, req = model_command(sub, "moe", __doc__,
                           help='MoE decode: pure TP vs TP x EP under routing skew, with redundant experts',
                           model_help="MoE model preset (e.g. deepseek-v3)")
    req.add_argument("--gpus", required=True, action=Checked, check=int_in(1, MAX_GPUS), metavar="N", help="GPUs")
    req.add_argument("--batch-tokens", required=True, action=Checked, check=int_in(1, MAX_BATCH), metavar="T",
                     help="decode tokens per step (sequences, one token each)")
    p.add_argument("--ep", default=None, action=Checked, check=int_in(1, MAX_GPUS), metavar="E",
                   help="expert-parallel degree (default: N, data-parallel attention + EP)")
    p.add_argument("--skew", default=1.0, action=Checked, check=number_in(1.0), metavar="Z",
                   help="hot-expert skew, max / mean expert load, at most E / k (default: 1, uniform)")
    p.add_argument("--redundant-experts", default=0, action=Checked, check=int_in(0, MAX_REDUNDANT), metavar="R",
                   help="redundant expert slots placed by EPLB (default: 0)")
    p.add_argument("--no-eplb", action="store_true", help="static contiguous placement (needs R = 0)")
    p.add_argument("--context", default=2048, action=Checked, check=int_in(1, MAX_CONTEXT), metavar="S",
                   help="context length [tokens] (default: 2048)")
    p.add_argument("--pp", default=1, action=Checked, check=int_in(1, 128), metavar="P",
                   help="pipeline stages, each of the N GPUs split into tp x ep (default: 1, no pipeline)")
    speculative_options(p)
    dtype_runtime_options(p)
    p.add_argument("--json", action="store_true", help="JSON output")
    p.set_defaults(func=run, flags=FLAGS)


def run(args) -> int:
    from ..errors import SpecError
    from ..sweeps import moe as moe_sweeps

    ep = args.ep or args.gpus
    if args.ep is None:  # errors about ep are about --gpus, whose value it took
        args.flags = {**FLAGS, "ep": "ep (= --gpus)", "tp": "tp", "ranks": "ranks"}
    if args.gpus % ep:
        raise UsageError(f"--ep must divide --gpus ({args.gpus}), got {ep}")
    if args.no_eplb and args.redundant_experts:
        raise UsageError(f"--redundant-experts must be 0 with --no-eplb, got {args.redundant_experts}")
    balance = "none" if (args.no_eplb or ep == 1) else "eplb"
    kw = dict(weight_dtype=args.weight_dtype, kv_dtype=args.kv_dtype, runtime=args.runtime,
              layers=moe_sweeps.LAYERS)
    md = moe_sweeps.config(args.model, args.gpu, args.gpus, tp=args.gpus // ep, ep=ep,
                           redundant=args.redundant_experts, balance=balance, **kw)
    E = md.model.routed_experts
    if ep > 1 and E % ep:  # the record compares with the static placement, one expert per slot
        flag = "--ep" if args.ep is not None else "--gpus (and so ep)"
        raise UsageError(f"{flag} must divide the routed experts of {md.model.name} ({E}) so that the static "
                         f"placement can be compared, got {ep}")
    dec = moe_sweeps.decoding(md, args.pp, args.speculative, args.accepted_length)
    [rec] = moe_sweeps.moe_records(md, args.batch_tokens, args.context, args.skew, **dec)
    ref = skipped = None
    if ep != 1:
        # pure TP on all N GPUs is only the comparison: a model it cannot split (TP-N must divide the query heads,
        # the experts' width, ...) has none, which is said, not an error of the layout asked for
        try:
            pure = moe_sweeps.config(args.model, args.gpu, args.gpus, tp=args.gpus, ep=1, **kw)
            moe_sweeps.decoding(pure, **dec)
        except SpecError as exc:
            skipped = str(exc)
        else:
            [ref] = moe_sweeps.moe_records(pure, args.batch_tokens, args.context, args.skew, **dec)
    doc = {**rec, "pure_tp": ref, "pure_tp_skipped": skipped,
           "inputs": {"model": md.model.name, "gpu": md.hardware.name, "gpus": args.gpus, "ep": ep,
                      "batch_tokens": args.batch_tokens, "context": args.context, "skew": args.skew,
                      "redundant_experts": args.redundant_experts, "weight_dtype": md.weight_dtype,
                      "kv_dtype": md.kv_dtype, "runtime": md.runtime.name, "layers_sampled": md.layers,
                      "pp": dec["pp"], "speculative": args.speculative,
                      "accepted_length": dec["speculative"].tokens_per_step if dec["speculative"] else None}}
    if args.json:
        print_json(doc)
        return EXIT_OK
    how = rec["decoding"]
    print(f"{md.model.label} on {args.gpus}x {md.hardware.label}: {args.batch_tokens} decode tokens per step, "
          f"context {args.context}, skew {args.skew:g}"
          + (f"; decoding {how} on {rec['gpus']:,} GPUs" if how.startswith("PP") else f"; decoding {how}" if how
             else ""))
    per_token = [Col("tpot_ms", "ms/token", ".2f"), Col("speedup", "vs plain", ".2f")] if how else []
    cols = [Col("layout", "layout"), Col("feasible", "fits"), Col("step_ms", "step ms", ".2f"), *per_token,
            Col("moe_layer_us", "MoE layer us", ".0f"), Col("routed_layer_us", "routed us", ".0f"),
            Col("dispatch_layer_us", "dispatch us", ".0f"), Col("combine_layer_us", "combine us", ".0f"),
            Col("load_straggler", "load max/mean", ".3f"), Col("expected_imbalance", "imbalance", ".3f"),
            Col("memory_GB", "GB/GPU", ".1f"), Col("tokens_per_s", "tok/s", ".0f")]
    print(format_table([r for r in (rec, ref) if r], cols))
    if skipped:
        print(f"no pure TP{args.gpus} comparison: {skipped}")
    return EXIT_OK

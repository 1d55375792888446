"""``llmexplore transfer``: the KV transfer plans between a prefill and a decode layout, their fan-out and cost.

Which prefill rank sends which byte ranges of which KV buffer to each decode rank (version-1 plans, as serving
runtimes such as TokenSpeed exchange them), the fan-out of each prefill rank, and the cost of one request:
bytes per rank, the busiest NIC, serial and layer-pipelined transfer time over a link. With --prefill-pp /
--decode-pp each side's layers are split over pipeline stages and each prefill stage sends its own layers to the
decode stage(s) that hold them; with --speculative the draft layer's KV and the draft's hidden state move too.
"""

from __future__ import annotations

from ._framework import (COMMON_FLAGS, EXIT_OK, Checked, Col, command, format_table, int_in, number_in,
                         one_of, preset_name, print_json)

__all__ = ["add", "run", "FLAGS"]

#: API field names -> the flags of this command
FLAGS = {**COMMON_FLAGS, "prefill_tp": "--prefill-tp", "decode_tp": "--decode-tp", "prefill_dp": "--prefill-dp",
         "decode_dp": "--decode-dp", "page_size": "--page-size", "prompt_tokens": "--prompt-tokens",
         "link": "--link", "dp_pairing": "--dp-pairing", "draft_layers": "--draft-layers",
         "prefill_dp_group": "--prefill-dp-group", "decode_layout.dp_size": "--decode-dp",
         "prefill_layout.dp_size": "--prefill-dp", "op_overhead_us": "--op-overhead-us",
         "prefill_pp": "--prefill-pp", "decode_pp": "--decode-pp", "speculative": "--speculative"}


def add(sub) -> None:
    from ..transfer.buffers import MAX_PAGE_TOKENS
    from ..transfer.planner import DP_PAIRINGS
    from ..units import DTYPE_BYTES

    p = command(sub, "transfer", __doc__,
                help="KV transfer plans between prefill and decode TP/DP layouts: fragments, fan-out, bytes and time")
    req = p.add_argument_group("required")
    req.add_argument("--model", required=True, action=Checked, check=preset_name("models"), metavar="M",
                     help="model preset (see: presets models)")
    for side in ("prefill", "decode"):
        req.add_argument(f"--{side}-tp", required=True, action=Checked, check=int_in(1, 1024), metavar="T",
                         help=f"{side} tensor-parallel size per DP group")
    for side in ("prefill", "decode"):
        p.add_argument(f"--{side}-dp", default=1, action=Checked, check=int_in(1, 1024), metavar="D",
                       help=f"{side} data-parallel groups (default: 1)")
    for side in ("prefill", "decode"):
        p.add_argument(f"--{side}-pp", default=1, action=Checked, check=int_in(1, 128), metavar="P",
                       help=f"{side} pipeline stages, each of --{side}-tp x --{side}-dp ranks holding a contiguous "
                            "share of the layers (default: 1)")
    p.add_argument("--speculative", default=None, action=Checked, check=preset_name("speculative"), metavar="NAME",
                   help="speculative-decoding preset (data/speculative.yaml) whose draft runs on both sides: its "
                        "draft layer's KV and hidden state move too (default: none)")
    p.add_argument("--page-size", default=16, action=Checked, check=int_in(1, MAX_PAGE_TOKENS), metavar="P",
                   help="tokens per KV page (default: 16)")
    p.add_argument("--kv-dtype", default="bf16", action=Checked, check=one_of(sorted(DTYPE_BYTES)), metavar="DTYPE",
                   help="KV-cache dtype (default: bf16)")
    p.add_argument("--prompt-tokens", default=4096, action=Checked, check=int_in(1, 1 << 24), metavar="S",
                   help="prompt length of the request whose transfer is timed [tokens] (default: 4096)")
    p.add_argument("--link", default="roce-400g", action=Checked, check=preset_name("links"), metavar="L",
                   help="interconnect preset between the instances (default: roce-400g; see: presets links)")
    p.add_argument("--gpu", default="h100-sxm", action=Checked, check=preset_name("hardware"), metavar="G",
                   help="hardware preset, for the prefill time the pipelined transfer overlaps (default: h100-sxm)")
    p.add_argument("--runtime", default="default", action=Checked, check=preset_name("runtime"), metavar="NAME",
                   help="runtime preset (default: default)")
    p.add_argument("--dp-pairing", default="index", action=Checked, check=one_of(DP_PAIRINGS), metavar="MODE",
                   help="index: decode DP group k receives from prefill DP group k (version 1); any: from any "
                        "prefill DP group (default: index)")
    p.add_argument("--prefill-dp-group", default=None, action=Checked, check=int_in(0, 1023), metavar="G",
                   help="with --dp-pairing any: the prefill DP group the request comes from (default: the same "
                        "index as --decode-dp-group, else 0)")
    p.add_argument("--decode-dp-group", default=0, action=Checked, check=int_in(0, 1023), metavar="H",
                   help="the decode DP group the request goes to (default: 0)")
    p.add_argument("--draft-layers", default=0, action=Checked, check=int_in(0, 64), metavar="N",
                   help="draft-model (MTP/EAGLE) layers whose KV also moves (default: 0)")
    p.add_argument("--op-overhead-us", default=1.0, action=Checked, check=number_in(0.0, 1e6), metavar="US",
                   help="fixed cost of one RDMA write [us] (default: 1)")
    p.add_argument("--fragments", action="store_true", help="also print every fragment of the decode group's plans")
    p.add_argument("--json", action="store_true", help="JSON output: plans (fragments as version-1 wire objects), "
                                                      "fan-out and cost")
    p.set_defaults(func=run, flags=FLAGS)


def run(args) -> int:
    from ..sweeps import transfer as st
    from ..transfer.cost import plan_traffic

    s = st.setup(args.model, prefill_tp=args.prefill_tp, decode_tp=args.decode_tp, prefill_dp=args.prefill_dp,
                 decode_dp=args.decode_dp, page_size=args.page_size, kv_dtype=args.kv_dtype,
                 prompt_tokens=args.prompt_tokens, link=args.link, gpu=args.gpu, runtime=args.runtime,
                 dp_pairing=args.dp_pairing, draft_layers=args.draft_layers, op_overhead_us=args.op_overhead_us,
                 prefill_pp=args.prefill_pp, decode_pp=args.decode_pp, speculative=args.speculative)
    pl = s.mt.planner
    if args.decode_dp_group >= args.decode_dp:
        from ._framework import UsageError

        raise UsageError(f"--decode-dp-group must be an integer in [0, {args.decode_dp - 1}] (the decode DP "
                         f"groups), got {args.decode_dp_group}")
    if args.prefill_dp_group is not None and args.dp_pairing != "any":
        from ._framework import UsageError

        raise UsageError(f"--prefill-dp-group must be left out unless --dp-pairing is any (with index pairing the "
                         f"source is decode group {args.decode_dp_group}), got {args.prefill_dp_group}")
    if args.decode_dp_group or args.prefill_dp_group is not None:
        from dataclasses import replace

        s = replace(s, traffic=plan_traffic(s.mt, decode_dp_group=args.decode_dp_group,
                                            prefill_dp_group=args.prefill_dp_group))
    summary = st.plan_summary(s)
    decode = st.decode_rank_table(s)
    prefill = st.prefill_rank_table(s)
    group = s.traffic.prefill_dp_group if pl.dp_pairing == "any" else None
    if args.json:
        from ..transfer.layout import FRAGMENT_FIELDS

        def wire(fragments):
            return [{k: (getattr(f, k).value if k == "buffer_kind" else getattr(f, k)) for k in FRAGMENT_FIELDS}
                    for f in fragments]

        plans = []
        for r in decode["decode_rank"]:
            if not s.mt.pipelined:
                plan = pl.plan_for_decode_rank(int(r), group)
                plans.append({"decode_rank": int(r), "plan_kind": plan.plan_kind,
                              "target_dp_group": plan.target_dp_group,
                              "target_prefill_ranks": list(plan.target_prefill_ranks),
                              "required_prefill_response_num": plan.required_prefill_response_num,
                              "required_dst_info_num_by_prefill_rank": plan.required_dst_info_num_by_prefill_rank,
                              "fragments": wire(plan.fragments)})
                continue
            plan = s.mt.pipeline.plan_for_decode_rank(int(r), group)
            plans.append({"decode_rank": int(r), "decode_stage": plan.decode_stage, "plan_kind": plan.plan_kind,
                          "target_dp_group": plan.target_dp_group,
                          "target_prefill_ranks": list(plan.target_prefill_ranks),
                          "required_prefill_response_num": plan.required_prefill_response_num,
                          "required_dst_info_num_by_prefill_rank": plan.required_dst_info_num_by_prefill_rank,
                          # per prefill stage: the version-1 wire objects between the stages' local ranks and the
                          # layers [start, end) they repeat for
                          "stages": [{"prefill_stage": sp.prefill_stage, "layers": [sp.layer_start, sp.layer_end],
                                      "fragments": wire(sp.fragments)} for sp in plan.stage_plans]})
        why = st.prefill_unpriced(s)
        no_prefill = f"no prefill time to overlap: {why}" if why else None
        fanout = s.mt.pipeline.fanout(group) if s.mt.pipelined else pl.fanout(group)
        plain = {} if summary["speculative"] else {
            "null_reasons": {"speculative": "plain decoding: no --speculative preset given"}}
        print_json({**summary, **plain, "plans": plans, "fanout": fanout,
                    "stages": st.stage_pair_table(s).to_dict("records"),
                    "prefill_ranks": prefill.to_dict("records"), "decode_ranks": decode.to_dict("records"),
                    "buffers": [{"buffer_index": b.buffer_index, "buffer_kind": b.buffer_kind.value,
                                 "logical_axis": b.logical_axis, "logical_size": b.logical_size,
                                 "bytes_per_logical_unit": b.bytes_per_logical_unit,
                                 "prefill_item_stride_bytes": b.item_stride_bytes,
                                 "decode_item_stride_bytes": d.item_stride_bytes,
                                 "prefill_replica_group": b.tp_replica_group_size,
                                 "decode_replica_group": d.tp_replica_group_size,
                                 "layers": s.mt.layer_repeat[i],
                                 "layer_range": list(s.mt.pipeline.buffer_layers[i])}
                                for i, (b, d) in enumerate(zip(pl.prefill_buffers, pl.decode_buffers))]},
                   reasons={"pipelined_ms": no_prefill, "prefill_ms": no_prefill})
        return EXIT_OK
    print(f"{s.model.label}: {s.mt.prefill_label} -> {s.mt.decode_label}, page {s.mt.page_size} tokens, KV "
          f"{s.mt.kv_dtype}, DP pairing {pl.dp_pairing}; one request of {s.prompt_tokens:,} tokens from prefill DP "
          f"group {s.traffic.prefill_dp_group} to decode DP group {s.traffic.decode_dp_group}")
    print(f"plans: {summary['plan_kind']}, at most {summary['max_sources']} sources per decode rank, fan-out up to "
          f"{summary['max_fanout']}, {summary['fragments_per_layer']} fragments per layer "
          f"({summary['writes']:,.0f} writes per request)")
    print(f"bytes: {summary['request_MB']:,.1f} MB per request, busiest NIC {summary['busiest']} "
          f"{summary['busiest_MB']:,.1f} MB" + (f"; decode replicas copy {summary['local_copy_MB']:,.1f} MB locally "
                                               f"(version 1 sends them nothing)" if summary['local_copy_MB'] else ""))
    pipe = summary["pipelined_ms"]
    print(f"time over {s.link.name}: {summary['serial_ms']:.3f} ms serial (bandwidth {summary['bandwidth_ms']:.3f}, "
          f"writes {summary['ops_ms']:.3f}, latency {summary['latency_ms']:.3f})"
          + (f", {pipe:.3f} ms exposed when pipelined layer by layer behind a {summary['prefill_ms']:.1f} ms prefill"
             + (f" of {s.mt.prefill_pp} stages" if s.mt.prefill_pp > 1 else "")
             if pipe == pipe else ", pipelined: n/a (no prefill model at this TP)"))
    print(f"  one write per page instead of per fragment and layer: {summary['unbatched_ms']:.3f} ms; through a "
          f"staging buffer (one bulk write per rank pair): {summary['staged_ms']:.3f} ms, of which "
          f"{summary['staging_copy_ms']:.3f} ms gather/scatter in HBM")
    if summary["speculative"]:
        from ..findings.transfer import spec_sentence

        print(f"speculative: {spec_sentence(summary)}")
    print(f"round-trip check: {'ok' if summary['roundtrip_ok'] else 'FAILED'} "
          f"({summary['roundtrip_checked_B']:,} bytes of one page compared"
          + (", every layer of every stage)" if s.mt.pipelined else ")"))
    if s.mt.pipelined:
        print()
        print(format_table(st.stage_pair_table(s).to_dict("records"), [
            Col("prefill_stage", "prefill stage"), Col("decode_stage", "decode stage"),
            Col("first_layer", "first layer"), Col("last_layer", "last layer"), Col("layers", "layers"),
            Col("MB", "MB", ",.1f")]))
    print()
    print(format_table(decode.to_dict("records"), [
        Col("decode_rank", "decode rank"), Col("sources", "sources"), Col("received_MB", "received MB", ",.1f"),
        Col("writes", "writes", ",.0f"), Col("local_copy_MB", "local copy MB", ",.1f")]
        + ([Col("stage", "stage"), Col("layers", "layers")] if s.mt.pipelined else [])))
    print()
    print(format_table(prefill.to_dict("records"), [
        Col("prefill_rank", "prefill rank"), Col("fanout", "fan-out"), Col("sent_MB", "sent MB", ",.1f"),
        Col("writes", "writes", ",.0f"), Col("idle", "idle")]
        + ([Col("stage", "stage"), Col("layers", "layers")] if s.mt.pipelined else [])))
    if args.fragments:
        print()
        rows = st.fragment_table(s).to_dict("records")
        print(format_table(rows, [Col(k, k) for k in ("decode_rank", "plan", "prefill_rank", "buffer", "kind",
                                                     "src_offset_B", "dst_offset_B", "bytes_per_page",
                                                     "src_stride_B", "dst_stride_B")
                                  + (("layer_start", "layer_end") if s.mt.pipelined else ())]))
    return EXIT_OK

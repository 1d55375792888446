"""Benchmark the KV transfer planner and its wire codec at scale.

Run: ``.venv/bin/python benchmarks/bench_transfer.py`` (or ``make bench``). Medians of repeats, each printed
relative to a fixed numpy reference workload timed in the same process (the machines here are noisy).

* planning every decode rank of a 256-rank decode world from a 256-rank prefill world with five buffers
  (target and draft K/V on 8 KV heads, a Mamba state on 128 channels), plus the fan-out: cold (nothing
  cached) and for a new planner of the same layout pair (the per-pair work is cached), target < 10 ms;
  for two pairs: prefill TP4 x DP64 -> decode TP8 x DP32 (index pairing) and TP8 x DP32 -> TP4 x DP64
  (any pairing, every request from group 0);
* the same plans by the straightforward version-1 algorithm (every prefill TP rank tested against every
  decode rank and buffer), as the baseline of the speed-up;
* encoding and then decoding every plan's wire frames.

The last line is machine-readable: ``plan_all_ms=… wire_MBps=…`` (cold planning of the first pair; wire
throughput = payload bytes / (encode + decode time)).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import median_s, print_table, reference_s  # noqa: E402

from llmexplore.transfer import (  # noqa: E402
    BufferLayout,
    ParallelLayout,
    PDTransferPlanner,
    decode_transfer_fragments,
    encode_transfer_fragments,
)
from llmexplore.transfer import planner as planner_module  # noqa: E402

HEADS, CHANNELS = 8, 128
HEAD_PAGE_B = 16 * 128 * 2  # one head's page: 16 tokens x 128 dims x BF16
CHANNEL_B = 64


def buffers(tp: int) -> tuple[BufferLayout, ...]:
    """Five buffers of one layer on a side of TP size ``tp`` (heads replicated when tp > 8)."""
    group = max(1, tp // HEADS)
    local = max(1, HEADS // tp)
    out = [BufferLayout(i, kind, "kv_head", HEADS, 16, HEAD_PAGE_B, HEAD_PAGE_B * local, group)
           for i, kind in enumerate(("target_k", "target_v", "draft_k", "draft_v"))]
    out.append(BufferLayout(4, "mamba_state", "state_channel", CHANNELS, 16, CHANNEL_B, CHANNEL_B * CHANNELS // tp))
    return tuple(out)


PAIRS = [((4, 64), (8, 32), "index"), ((8, 32), (4, 64), "any")]


def planner(pair) -> PDTransferPlanner:
    (tp_p, dp_p), (tp_d, dp_d), pairing = pair
    return PDTransferPlanner(prefill_layout=ParallelLayout("prefill", tp_p * dp_p, dp_p),
                             decode_layout=ParallelLayout("decode", tp_d * dp_d, dp_d),
                             prefill_buffers=buffers(tp_p), decode_buffers=buffers(tp_d), dp_pairing=pairing)


def plan_all(pair, *, cold: bool):
    if cold:
        planner_module._template.cache_clear()
    pl = planner(pair)
    group = 0 if pair[2] == "any" else None
    return pl.plans(group), pl.fanout(group)


def naive_plan_all(pair) -> int:
    """Version 1's algorithm (every prefill TP rank tested against each decode rank and buffer), fragments
    as tuples; returns the fragment count. The speed-up baseline."""
    (tp_p, dp_p), (tp_d, dp_d), pairing = pair
    pb, db = buffers(tp_p), buffers(tp_d)

    def interval(b, tp, rank):
        g = b.tp_replica_group_size
        if rank % g:
            return None
        n = b.logical_size // (tp // g)
        return (rank // g) * n, (rank // g + 1) * n

    count = 0
    for r in range(tp_d * dp_d):
        group = 0 if pairing == "any" else r // tp_d
        d_rank = r % tp_d
        frags = {}
        for p, d in zip(pb, db):
            dst = interval(d, tp_d, d_rank)
            if dst is None:
                continue
            for t in range(tp_p):
                src = interval(p, tp_p, t)
                if src is None:
                    continue
                lo, hi = max(src[0], dst[0]), min(src[1], dst[1])
                if lo < hi:
                    frags.setdefault(group * tp_p + t, []).append(
                        (p.buffer_index, p.buffer_kind, group * tp_p + t, r, p.item_stride_bytes, d.item_stride_bytes,
                         (lo - src[0]) * p.bytes_per_logical_unit, (lo - dst[0]) * p.bytes_per_logical_unit,
                         (hi - lo) * p.bytes_per_logical_unit, None))
        count += sum(len(v) for v in frags.values())
    return count


def main() -> int:
    ref = reference_s()
    rows = [("reference numpy workload", ref, "baseline", "-")]
    results = {}
    for pair in PAIRS:
        plans, fanout = plan_all(pair, cold=True)
        n_frag = sum(len(p.fragments) for p in plans)
        assert n_frag == naive_plan_all(pair), "fast planner and version-1 loop disagree on the fragment count"
        # fan-out counts decode ranks per request: under "any" every decode group draws from group 0
        requests = pair[1][1] if pair[2] == "any" else 1
        assert sum(fanout.values()) * requests == sum(len(p.target_prefill_ranks) for p in plans)
        t_cold = median_s(lambda: plan_all(pair, cold=True), 7)
        t_warm = median_s(lambda: plan_all(pair, cold=False), 7)
        t_naive = median_s(lambda: naive_plan_all(pair), 3)
        frames = [encode_transfer_fragments(p.fragments) for p in plans]
        payload = sum(len(f[1]) for f in frames)

        def wire():
            for p in plans:
                decode_transfer_fragments(*encode_transfer_fragments(p.fragments))

        t_wire = median_s(wire, 5)
        (tp_p, dp_p), (tp_d, dp_d), pairing = pair
        name = f"TP{tp_p}xDP{dp_p} -> TP{tp_d}xDP{dp_d} ({pairing})"
        rows += [
            (f"plan 256 ranks, {name}, cold", t_cold, f"{t_cold / ref:.2f}x ref", "< 0.010 s"),
            ("  same layout pair, new planner (cached)", t_warm, f"{t_warm / ref:.2f}x ref", "< 0.010 s"),
            ("  version-1 loop, fragments as tuples (baseline)", t_naive, f"{t_naive / ref:.2f}x ref", "-"),
            ("  speed-up over the version-1 loop", t_naive / t_cold, "ratio", "-"),
            (f"  encode + decode {n_frag:,} fragments, {payload / 1e6:.2f} MB", t_wire, f"{t_wire / ref:.2f}x ref",
             "-"),
        ]
        results.setdefault("plan_all_ms", t_cold * 1e3)
        results.setdefault("wire_MBps", payload / 1e6 / t_wire)
    print_table(rows)
    print(f"plan_all_ms={results['plan_all_ms']:.2f} wire_MBps={results['wire_MBps']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

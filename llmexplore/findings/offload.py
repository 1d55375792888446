"""Findings of notebooks/50_ssd_offload.ipynb: recompute against load per tier and the break-even, where offload
loses (prefix x bandwidth, FP8), the break-even over bandwidth x latency, preloading during the queue wait, a
staging replay under a budget, what a hit ratio saves, and measured against modelled load times.

Every sentence reads the tables of :mod:`llmexplore.sweeps.offload` (the ones the figures draw); ``short=True``
gives the figure's title. With a pipeline or a draft model (the setup's ``pp``, ``speculative``) the deployment
phrase and every title say so, and section 1 says how far the break-even moved from plain decoding's.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..models.offload.cost import MAX_PREFIX
from ..sweeps.offload import SHIFT_COLUMNS, OffloadSetup, decoding_of
from ..sweeps import pricing
from . import join, num

__all__ = ["tokens", "deployment_phrase", "decoding_tag", "shift_clause", "saved_phrase", "break_even_sentence", "summary_table", "regime_sentence",
           "precision_pivot", "precision_sentence", "map_sentence", "preload_sentence", "staging_sentence", "hit_ratio_sentence",
           "measured_sentence", "NO_MEASUREMENT", "DEEPSEEK_DISK_HIT_RATIO", "saved_usd_sentence"]

#: share of input tokens DeepSeek reports serving from its on-disk KV cache (context caching on disk,
#: DeepSeek-V3 inference system overview, 2025-03-01: 56.3% of input tokens hit the cache)
DEEPSEEK_DISK_HIT_RATIO = 0.563

#: what the notebook says where a measured replay would go, until one exists
NO_MEASUREMENT = ("No measurement on this machine yet: the figure of measured against modelled load times appears "
                  "once a replay has read real KV blocks from a disk (`llmexplore calibrate-disk PATH` measures the "
                  "drive and saves it as a storage preset; the storage replay reads the blocks a trace asks for and "
                  "reports each request's measured load next to the modelled one). Every other figure here is the "
                  "model with the presets of data/storage.yaml.")


def tokens(x: float, *, one_block: int | None = None) -> str:
    """``"28,416 tokens"``; ``"256 tokens (one block)"`` when ``x`` is one block; ``"never (up to 2,097,152
    tokens)"`` for an infinite break-even."""
    x = float(x)
    if not np.isfinite(x):
        return f"never (up to {MAX_PREFIX:,} tokens)"
    text = f"{x:,.0f} tokens"
    return text + " (one block)" if one_block is not None and x == one_block else text


def _us(x: float) -> str:
    return f"{num(x)} µs"


def _device(kind: str) -> str:
    return {"dram": "host-memory copy", "ssd": "drive", "network": "network file system"}.get(kind, "tier")


def deployment_phrase(s: OffloadSetup) -> str:
    """``"Llama-3-70B on 8x H100 SXM 80GB"`` (with the KV dtype when it is not BF16, and the pipeline or the
    speculative preset: ``", PP2 (2 stages on 2 nodes, each reading its own layers)"``)."""
    d = s.dep
    kv = "" if d.kv_dtype == "bf16" else f" (KV {d.kv_dtype})"
    return f"{d.model.label} on {d.ranks}x {d.hardware.label}{kv}" + decoding_of(s, ", ")


def decoding_tag(s: OffloadSetup) -> str:
    """A title's lead: '' for plain decoding, ``"PP2: "``, ``"deepseek-mtp-1 draft KV: "`` or ``"ngram-5 (no
    draft KV): "``."""
    if s.pp > 1:
        return f"PP{s.pp}: "
    if s.speculative is None:
        return ""
    return f"{s.speculative.name} " + ("(no draft KV): " if s.speculative.method == "ngram" else "draft KV: ")


def _what_moves(s: OffloadSetup) -> str:
    if s.pp > 1:
        from ..models.offload.cost import placement

        where = placement(s.dep, s.pp)
        path = {"dram": "PCIe links", "ssd": "drive", "network": "NIC"}.get(s.tier.kind, "storage path")
        if s.tier.kind == "dram":
            return (f"with {s.pp} pipeline stages, each GPU copying only its stage's layers over its own PCIe link")
        return (f"with {s.pp} pipeline stages in one node (its one {path} reads every layer, each GPU copies its "
                "stage's share)" if where["shared"] else
                f"with {s.pp} pipeline stages on {where['nodes']} nodes, each reading its own layers through its own "
                f"node's {path}")
    return f"with {s.speculative.name}'s draft layer loaded and recomputed"


def shift_clause(table: pd.DataFrame, s: OffloadSetup, *, short: bool = False) -> str:
    """How the pipeline or the draft layer moved the chosen tier's break-even from plain decoding's, and why (the
    per-token costs a and c of the closed form); '' for a plain setup or a table without the plain columns.
    ``table``: :func:`~llmexplore.sweeps.offload.break_even_shift` of ``s``."""
    if s.is_plain or not set(SHIFT_COLUMNS) <= set(table.columns):
        return ""
    row = table[table["tier"] == s.tier.name]
    if row.empty:
        return ""
    r = row.iloc[0]
    be, be0 = float(r["break_even_tokens"]), float(r["plain_break_even_tokens"])
    if short:
        base = "PP1" if s.pp > 1 else "no draft"
        return (f" ({_tier_short(s.tier.label)} with {base}: "
                + (f"{be0:,.0f})" if np.isfinite(be0) else "never)"))
    moved = ("the break-even of {t} stays at {a}" if be == be0 else "the break-even of {t} moves from {a} to {b}")
    text = moved.format(t=s.tier.label, a=tokens(be0, one_block=s.block_tokens), b=tokens(be, one_block=s.block_tokens))
    text = (f"{_what_moves(s)[0].upper()}{_what_moves(s)[1:]}, {text}: loading costs {_us(r['c_us_per_token'])} per "
            f"token instead of {_us(r['plain_c_us_per_token'])}")
    if "recompute_us_per_token_at_ref" in r:
        d = float(r["recompute_us_per_token_at_ref"] - r["plain_recompute_us_per_token_at_ref"])
        why = "the stage-to-stage sends" if s.pp > 1 else "the draft's prefill"
        text += (f", and recomputing a {r['ref_tokens']:,.0f}-token prefix {_us(r['recompute_us_per_token_at_ref'])} "
                 f"per token ({why}: {'+' if d >= 0 else '−'}{_us(abs(d))})")
    return text + f"; the {r['set_by']} sets it (plain decoding: the {r['plain_set_by']})"


def _tier_short(label: str) -> str:
    """A tier's label for a title: "DRAM Gen4", "NVMe Gen5", "NFS" (a custom tier keeps its values)."""
    import re

    base, _, extra = label.partition(" (")
    kind = "DRAM" if "DRAM" in base else "NVMe" if "NVMe" in base else base.split()[0]
    gen = re.search(r"Gen\d+", base)
    return f"{kind} {gen.group(0)}" if gen else kind + (f" ({extra}" if extra else "")


def break_even_sentence(table: pd.DataFrame, s: OffloadSetup, *, short: bool = False) -> str:
    """Section 1: from which prefix loading beats recomputing, for the chosen tier (and why: which term sets
    the break-even) and the others. ``table``: :func:`~llmexplore.sweeps.offload.break_even_table` of ``s``
    (the chosen tier is ``s.tier``)."""
    B = s.block_tokens
    if short:
        parts = [f"{_tier_short(r.tier_label)} " + ("never" if not np.isfinite(r.break_even_tokens)
                                                    else f"{r.break_even_tokens:,.0f}") for r in table.itertuples()]
        return (f"{decoding_tag(s)}{s.dep.model.label}: loading pays from (tokens) " + ", ".join(parts)
                + shift_clause(table, s, short=True))
    mine = table[table["tier"] == s.tier.name]
    row = mine.iloc[0] if len(mine) else None
    head = deployment_phrase(s)
    if row is None:
        text = f"{head}:"
    else:
        be, a, c = row["break_even_tokens"], row["a_us_per_token"], row["c_us_per_token"]
        dev = _device(s.tier.kind)
        if not np.isfinite(be):
            text = (f"{head}: loading a cached prefix from {row['tier_label']} never pays up to {MAX_PREFIX:,} tokens — "
                    f"per token the {dev} ({_us(c)}) is slower than recomputing ({_us(a)})")
        elif row["set_by"] == "bandwidth":
            text = (f"{head}: loading a cached prefix from {row['tier_label']} pays only from {tokens(be)} — per token "
                    f"the {dev} ({_us(c)}) is slower than recomputing ({_us(a)}), so the quadratic attention term "
                    "sets the break-even")
        else:
            text = (f"{head}: loading a cached prefix from {row['tier_label']} pays from {tokens(be, one_block=B)} — "
                    f"per token the {dev} ({_us(c)}) is faster than recomputing ({_us(a)}), so only its fixed "
                    f"latency ({num(row['t_g0_ms'])} ms) has to be earned back")
    others = table[table["tier"] != s.tier.name]
    groups: dict[str, list[str]] = {}
    for r in others.itertuples():
        be = r.break_even_tokens
        key = ("one block" if be == B else "never (up to 2M tokens)" if not np.isfinite(be) else f"{be:,.0f} tokens")
        groups.setdefault(key, []).append(r.tier_label)
    if groups:
        said = [f"from {join(labels)} it pays {'from ' if not key.startswith('never') else ''}{key}"
                if not key.startswith("never") else f"from {join(labels)} it never pays (up to 2M tokens)"
                for key, labels in groups.items()]
        text += "; " + "; ".join(said)
    shift = shift_clause(table, s)
    return text + "." + (f" {shift}." if shift else "")


def summary_table(point: dict, s: OffloadSetup) -> pd.DataFrame:
    """A :func:`~llmexplore.sweeps.offload.point_summary` as a two-column table for people."""
    be = point["break_even_tokens"]
    rows = [
        ("deployment", deployment_phrase(s)),
        ("storage tier", f"{s.tier.label} ({num(point['effective_read_GBps'])} GB/s effective read)"),
        ("prefix", f"{point['prefix_tokens']:,} tokens: {point['blocks']:,} full blocks of {s.block_tokens:,} "
                   f"({point['cached_tokens']:,} tokens, {num(point['bytes_MB'])} MB)"),
        ("recompute the cached tokens", f"{num(point['recompute_ms'])} ms ({num(point['a_us_per_token'])} µs/token)"),
        ("load them" + (" (pipelined hops)" if s.pipelined else " (serial hops)"),
         f"{num(point['load_ms'])} ms ({num(point['c_us_per_token'])} µs/token)"),
        ("break-even (the gate)", tokens(be, one_block=s.block_tokens) + f", set by the {point['set_by']}"),
        ("decision", point["decision"]),
        (f"preloaded during a {num(point['queue_wait_ms'])} ms queue wait",
         f"{num(point['exposed_load_ms'])} ms exposed; break-even {tokens(point['preload_break_even_tokens'])}; "
         f"decision {point['decision_with_preload']}"),
    ]
    if "stage_bytes_MB" in point and s.pp > 1:
        rows.insert(3, ("what each stage loads", f"{num(point['stage_bytes_MB'])} MB (the worst stage's layers); the "
                                                 f"worst node's storage path reads {num(point['node_bytes_MB'])} MB "
                                                 f"({point['storage_nodes']} node"
                                                 f"{'s' if point['storage_nodes'] > 1 else ''})"))
    if "draft_bytes_MB" in point and s.speculative is not None:
        rows.insert(3, ("the draft's own KV", f"{num(point['draft_bytes_MB'])} MB loaded with the target's"
                        if point["draft_bytes_MB"] else "none (n-gram lookup has no draft model)"))
    return pd.DataFrame(rows, columns=["quantity", "value"])


def _needed_bandwidth(grid: dict) -> np.ndarray:
    """Per prefix of a :func:`~llmexplore.sweeps.offload.regime_grid`: the lowest bandwidth in the grid from
    which loading wins at every higher one (NaN if it never wins)."""
    wins = np.asarray(grid["load_wins"], bool)
    bw = np.asarray(grid["bandwidth_GBps"], float)
    out = np.full(wins.shape[0], np.nan)
    for i, row in enumerate(wins):
        if row[-1]:
            losing = np.flatnonzero(~row)
            out[i] = bw[0] if losing.size == 0 else bw[losing[-1] + 1]
    return out


def regime_sentence(grid: dict, s: OffloadSetup, *, prefix_tokens: int, short: bool = False) -> str:
    """Section 2: the read bandwidth loading needs against the prefix length, and where the chosen tier
    stands. ``grid``: :func:`~llmexplore.sweeps.offload.regime_grid` of ``s``."""
    P = np.asarray(grid["prefix_tokens"], float)
    need = _needed_bandwidth(grid)
    ok = np.isfinite(need) & (P >= s.block_tokens)
    tier_bw = s.tier.read_GBps
    if not ok.any():
        return (f"{decoding_tag(s)}Recompute wins everywhere on this map" if short else
                f"With {s.tier.label}'s latency, recompute wins at every prefix and bandwidth of the map.")
    i_short = int(np.flatnonzero(ok)[0])
    i_at = int(np.argmin(np.abs(P - prefix_tokens)))
    loses = P[(P >= s.block_tokens) & ~(np.asarray(grid["load_wins"], bool)[:, int(np.argmin(np.abs(
        np.asarray(grid["bandwidth_GBps"], float) - tier_bw)))])]
    if short:
        text = (f"{decoding_tag(s)}Loading needs ≥ {num(need[i_short])} GB/s at {P[i_short]:,.0f} tokens"
                + (f", ≥ {num(need[i_at])} GB/s at {P[i_at]:,.0f}" if np.isfinite(need[i_at]) and i_at != i_short
                   else ""))
        return text
    text = (f"With the latency and per-block costs of {s.tier.label}, loading a {P[i_short]:,.0f}-token prefix needs "
            f"a read bandwidth of at least {num(need[i_short])} GB/s")
    if i_at != i_short:
        text += (f", a {P[i_at]:,.0f}-token prefix {num(need[i_at])} GB/s" if np.isfinite(need[i_at]) else
                 f", and a {P[i_at]:,.0f}-token prefix never pays on this map")
    text += (": below that a tier delivers a token's KV more slowly than the GPUs recompute it, and only long "
             "prefixes, whose attention grows quadratically, win it back")
    if loses.size:
        text += (f". At its own {num(tier_bw)} GB/s, {s.tier.label} loses for every prefix of the map up to "
                 f"{loses.max():,.0f} tokens")
    else:
        text += f". At its own {num(tier_bw)} GB/s, {s.tier.label} wins at every prefix of the map"
    return text + "."


def precision_pivot(table: pd.DataFrame) -> pd.DataFrame:
    """A :func:`~llmexplore.sweeps.offload.precision_table` for people: one row per dtype variant, the break-even
    of each tier in tokens (``inf``: never up to 2M tokens)."""
    ok = table[table["feasible"]].copy()
    ok["dtypes"] = ok["variant"] + ": weights " + ok["weight_dtype"] + ", KV " + ok["kv_dtype"]
    piv = ok.pivot(index="dtypes", columns="tier_label", values="break_even_tokens")
    piv = piv.reindex(list(dict.fromkeys(ok["dtypes"])))[list(dict.fromkeys(ok["tier_label"]))]
    piv.columns.name = None
    return piv.reset_index().rename(columns={"dtypes": "precision"})


def precision_sentence(table: pd.DataFrame, s: OffloadSetup, *, short: bool = False) -> str:
    """Section 2: what FP8 KV and FP8 weights do to the chosen tier's break-even. ``table``:
    :func:`~llmexplore.sweeps.offload.precision_table` of ``s``."""
    t = table[(table["tier"] == s.tier.name) & table["feasible"]].set_index("variant")
    if "as set" not in t.index:
        return "No break-even for the chosen tier."
    base = t.loc["as set"]

    def be(v):
        return tokens(t.loc[v, "break_even_tokens"], one_block=s.block_tokens)

    if short:
        def count(v):
            x = float(t.loc[v, "break_even_tokens"])
            return "never" if not np.isfinite(x) else f"{x:,.0f}"
        return f"{decoding_tag(s)}{_tier_short(s.tier.label)} break-even (tokens): " + ", ".join(f"{v} {count(v)}" for v in t.index)
    parts = []
    if "FP8 KV" in t.index:
        r = t.loc["FP8 KV"]
        parts.append(f"FP8 KV halves the bytes per token: loading from {s.tier.label} drops from "
                     f"{_us(base['c_us_per_token'])} to {_us(r['c_us_per_token'])} per token and pays from {be('FP8 KV')}")
    if "FP8 weights" in t.index:
        r = t.loc["FP8 weights"]
        parts.append(f"FP8 weights instead make recompute cheaper ({_us(base['a_us_per_token'])} → "
                     f"{_us(r['a_us_per_token'])} per token) and move the break-even from {be('as set')} to "
                     f"{be('FP8 weights')}")
    if "FP8 weights and KV" in t.index:
        parts.append(f"with both it is {be('FP8 weights and KV')}")
    text = "; ".join(parts)
    text = text[0].upper() + text[1:] if text else "No FP8 variant applies"
    bad = table[~table["feasible"]]
    if len(bad):
        text += f" ({join(bad['variant'].tolist())} cannot run here: {bad['reason'].iloc[0]})"
    return (text + ". Recompute wins where the GPUs compute a token faster than the tier delivers its KV: fast "
            "(FP8) compute, slow tiers and short prefixes.")


def map_sentence(bmap: dict, s: OffloadSetup, *, short: bool = False) -> str:
    """Section 3: where the break-even is set by the latency and where by the bandwidth, over the tier's read
    bandwidth x latency. ``bmap``: :func:`~llmexplore.sweeps.offload.break_even_map` of ``s``."""
    bw = np.asarray(bmap["bandwidth_GBps"], float)
    lat = np.asarray(bmap["latency_us"], float)
    tok = np.asarray(bmap["tokens"], float)
    by_lat = np.asarray(bmap["set_by"]) == "latency"
    cols = np.flatnonzero(by_lat.all(axis=0))
    B = s.block_tokens
    boundary = float(bw[cols[0]]) if cols.size else np.nan
    # the closed form runs past the longest prefix the model evaluates: say so instead of quoting it
    span = (f"{tok.min():,.0f}–{tok.max():,.0f} tokens" if tok.max() <= MAX_PREFIX else
            f"{tok.min():,.0f} to over {MAX_PREFIX:,} tokens")
    if short:
        return decoding_tag(s) + (f"Break-even {span}; the latency sets it above {num(boundary)} GB/s"
                                  if np.isfinite(boundary) else f"Break-even {span}, set by the bandwidth everywhere")
    if not np.isfinite(boundary):
        return (f"Over {num(bw[0])}–{num(bw[-1])} GB/s and {num(lat[0])}–{num(lat[-1])} µs the bandwidth sets the "
                f"break-even everywhere: {span.replace('–', ' to ')}.")
    fast = tok[:, -1]
    one = lat[fast <= B]
    text = (f"Above {num(boundary)} GB/s the tier delivers a token's KV faster than the GPUs recompute it, "
            f"so its latency sets the break-even")
    text += (f": one block of {B:,} tokens for any latency up to {num(one.max())} µs at {num(bw[-1])} GB/s"
             if one.size else "")
    lo = tok[:, 0]
    top = (f"{lo.min():,.0f} tokens" if lo.min() <= MAX_PREFIX else
           f"beyond the {MAX_PREFIX:,} tokens the model evaluates")
    text += (f"; below it the bandwidth sets it, whatever the latency, and it climbs to {top} at "
             f"{num(bw[0])} GB/s. {s.tier.label} reads at {num(s.tier.read_GBps)} GB/s")
    text += (" (above the boundary)" if s.tier.read_GBps >= boundary else " (below the boundary)")
    return text + "."


def preload_sentence(curve: pd.DataFrame, queue: dict, point: dict, s: OffloadSetup, *, short: bool = False) -> str:
    """Section 4: what preloading during the queue wait buys. ``curve``:
    :func:`~llmexplore.sweeps.offload.preload_curve`; ``queue``: :func:`~llmexplore.sweeps.offload.pool_queue`;
    ``point``: :func:`~llmexplore.sweeps.offload.point_summary` (its prefix)."""
    d = curve.sort_values("queue_wait_ms")
    be0 = float(d["break_even_tokens"].iloc[0])
    floor = float(d["break_even_tokens"].min())
    reach = d[d["break_even_tokens"] <= floor]["queue_wait_ms"]
    W = float(queue["mean_wait_ms"])
    P = point["prefix_tokens"]
    if short:
        return decoding_tag(s) + (f"Preloading: break-even {tokens(be0)} → {tokens(floor)} from a "
                                  f"{num(reach.iloc[0])} ms wait" if floor < be0 else
                                  f"Preloading leaves the break-even at {tokens(be0)}")
    if s.tier.kind == "dram":
        return (f"{s.tier.label} holds its blocks in host memory already: preloading has nothing to stage, and the "
                f"break-even stays at {tokens(be0, one_block=s.block_tokens)}.")
    # the exposed load at the mean wait, from the curve's points around it
    waits, exposed = d["queue_wait_ms"].to_numpy(float), d["exposed_ms"].to_numpy(float)
    at = float(np.interp(W, waits, exposed)) if np.isfinite(W) else float(exposed[-1])
    mem = float(d["mem_ms"].iloc[0])
    wait = (f"waits {num(W)} ms on average (M/D/1 at {num(queue['instance_rate_per_s'])} req/s per instance of "
            f"the pool sized for the TTFT SLO; {num(queue['p90_wait_ms'])} ms at p90)" if np.isfinite(W) else
            "waits without bound (no pool meets the SLO)")
    text = (f"A request whose {P:,}-token prefix {wait} can have its blocks read into host memory before it runs: "
            f"the exposed load falls from {num(point['load_ms'])} ms to {num(at)} ms (the host → GPU copy alone is "
            f"{num(mem)} ms)")
    if floor < be0:
        text += (f", and the break-even falls from {tokens(be0)} to {tokens(floor, one_block=s.block_tokens)} once "
                 f"the wait reaches {num(reach.iloc[0])} ms")
    else:
        text += f"; the break-even stays at {tokens(be0, one_block=s.block_tokens)}"
    return text + "."


def staging_sentence(replay: dict, *, short: bool = False, setup: OffloadSetup | None = None) -> str:
    """Section 5: the staging replay: how many requests were preloaded, the peak staged bytes against the
    budget, and TTFT with and without preloading. ``replay``: :func:`~llmexplore.sweeps.offload.staging_replay`."""
    r, occ, budget = replay["requests"], replay["occupancy"], replay["budget_GB"]
    with_, without = r["ttft_ms"].to_numpy(float), r["ttft_no_preload_ms"].to_numpy(float)
    peak = float(occ["staged_GB"].max())
    tag = decoding_tag(setup) if setup is not None else ""
    if short:
        return (f"{tag}Staged ≤ {num(peak)} of {num(budget)} GB; mean TTFT {num(without.mean())} → "
                f"{num(with_.mean())} ms with preloading")
    n = len(r)
    where = ("one prefill instance" if setup is None or setup.pp == 1 else
             f"one prefill pipeline of {setup.pp} stages (a new prompt every stage's share, each answered after the "
             "whole pipeline's latency)")
    rate = n / float(r["arrival_s"].max()) if n > 1 and r["arrival_s"].max() > 0 else np.nan
    return (f"Replaying {n:,} requests (about {num(rate)} req/s) through {where} with a "
            f"{num(budget)} GB staging budget: the planner preloads {100 * r['preloaded'].mean():.0f}% of them, the "
            f"staged bytes peak at {num(peak)} GB (never above the budget), and the mean TTFT falls from "
            f"{num(without.mean())} ms to {num(with_.mean())} ms (p90 {num(np.percentile(without, 90))} → "
            f"{num(np.percentile(with_, 90))} ms); {100 * r['recomputed'].mean():.0f}% of the requests recompute "
            "their prefix because loading would not pay.")


def hit_ratio_sentence(gpus: pd.DataFrame, saved: pd.DataFrame, s: OffloadSetup, *, hit_ratio: float,
                       rate_per_s: float, prompt_tokens: int, short: bool = False) -> str:
    """Section 6: what a hit ratio saves on the chosen tier (GPUs needed at the rate, GPU time per request) and
    on the others, and the storage it takes. ``gpus``: :func:`~llmexplore.sweeps.offload.gpus_vs_hit_ratio`
    of ``s`` (with ``hit_ratio`` among its rows); ``saved``: :func:`~llmexplore.sweeps.offload.saved_by_tier`
    (same hit ratios)."""
    own = gpus[gpus["tier"] == s.tier.name] if "tier" in gpus else gpus
    g = own.set_index("hit_ratio")
    h = float(hit_ratio)
    row, none = g.loc[h], g.loc[0.0] if 0.0 in g.index else g.iloc[0]
    pct = f"{100 * h:.3g}%"
    other = gpus[(gpus["tier"] != s.tier.name) & np.isclose(gpus["hit_ratio"], h)] if "tier" in gpus else gpus.iloc[:0]
    if short:
        text = (f"{decoding_tag(s)}{pct} hit ratio on {_tier_short(s.tier.label)}: {_gpus(row['gpus'])} GPUs vs "
                f"{_gpus(none['gpus'])}, "
                f"{saved_phrase(row['saved_gpu_ms'], short=True)}")
        return text + "".join(f"; {_tier_short(r.tier_label)}: {_gpus(r.gpus)} GPUs" for r in other.itertuples())
    text = (f"At a hit ratio of {pct} of {int(prompt_tokens):,}-token prompts, {row['cached_tokens']:,.0f} tokens of "
            "each prompt are cached")
    if row["loaded"]:
        text += (f" and loaded from {s.tier.label}: each request {saved_phrase(row['saved_gpu_ms'])}"
                 + (" (the loads hold every stage of the pipeline, each of which recomputes only its share: faster "
                    "for the request, dearer in GPU time)" if row["saved_gpu_ms"] < 0 and s.pp > 1 else "")
                 + f", and at {num(rate_per_s)} req/s the pool needs {_gpus(row['gpus'])} GPUs instead of "
                 f"{_gpus(none['gpus'])}")
    else:
        text += (f", below the break-even of {s.tier.label}: the gate recomputes them, and at {num(rate_per_s)} "
                 f"req/s the pool still needs {_gpus(row['gpus'])} GPUs")
    others = saved[(np.isclose(saved["hit_ratio"], h)) & (saved["tier"] != s.tier.name) & saved["loaded"]]
    if len(others):
        text += "; the same hit saves " + join([(f"{num(r.saved_gpu_ms / 1e3)} GPU-s per request" if r.saved_gpu_ms >= 0
                                                 else f"−{num(-r.saved_gpu_ms / 1e3)} GPU-s (a loss) per request")
                                                + f" from {r.tier_label}" for r in others.itertuples()])
    if len(other):
        text += ("; at the same rate " + join([f"{r.tier_label} needs {_gpus(r.gpus)} GPUs" for r in other.itertuples()])
                 + " (dashed)")
    text += (f". Each distinct prompt's cached tokens take {num(row['storage_GB_per_prompt'])} GB of storage (KV bytes "
             "per token × cached tokens" + (", the draft layer's included" if s.speculative is not None
                                            and s.speculative.method != "ngram" else "") + ").")
    if s.pp > 1:
        text += (f" The pool's instances are pipelines of {s.pp} × {s.dep.ranks} GPUs, sized with their service time "
                 "(a new prompt every stage's share) and their latency (the TTFT after the queue).")
    return text


def saved_usd_sentence(usd: dict, saved: pd.DataFrame, s: OffloadSetup) -> str:
    """Section 6: the dollars the saved prefill GPU time is worth per million requests, per storage tier that
    loads, at the price tier's price of the GPU with its date; "not priced" where the tier has none.
    ``usd``: :func:`~llmexplore.sweeps.offload.saved_usd`; ``saved``: the
    :func:`~llmexplore.sweeps.offload.saved_by_tier` it came from (for the tiers' labels and the gate)."""
    tier, gpu = usd["price_tier"], usd["gpu"]
    if usd["usd_per_gpu_hour"] is None:
        return f"The saved GPU time is {pricing.not_priced(tier, gpu)}."
    price = pricing.tier_price(tier, gpu)
    h = usd["hit_ratio"]
    rows = saved[np.isclose(saved["hit_ratio"].to_numpy(float), h)].set_index("tier")
    per = usd["usd_per_million_requests"]

    def worth(t):
        v, g = per[t], usd["saved_gpu_s_per_request"][t]
        return (f"${num(v)} per million requests from {rows.loc[t, 'tier_label']} ({num(g)} GPU-s each)" if v >= 0
                else f"−${num(-v)} per million requests from {rows.loc[t, 'tier_label']} (a loss: {num(-g)} GPU-s "
                     "more each)")

    loads = [t for t in per if bool(rows.loc[t, "loaded"])]
    loads.sort(key=lambda t: (t != s.tier.name, -per[t]))
    head = (f"At {pricing.price_label(tier, price)} for the {s.dep.hardware.label}, the prefill GPU time a "
            f"{100 * h:.3g}% hit ratio saves is worth ")
    text = head + (join([worth(t) for t in loads]) if loads else "nothing: no tier loads the cached tokens")
    if s.tier.name in per and s.tier.name not in loads:
        text += (f"; from {s.tier.label}, the chosen tier, nothing: the gate recomputes the "
                 f"{rows.loc[s.tier.name, 'cached_tokens']:,.0f} cached tokens")
    return text + "."


def saved_phrase(ms: float, *, short: bool = False) -> str:
    """``"saves 5.78 GPU-seconds of prefill"`` or, when loading costs more GPU time than it saves (a pipeline's
    loads hold every stage), ``"costs 0.902 GPU-seconds more prefill"``; short: ``"5.78 GPU-s saved per
    request"``."""
    x = float(ms) / 1e3
    if short:
        return f"{num(x)} GPU-s saved per request" if x >= 0 else f"{num(-x)} GPU-s more per request"
    return f"saves {num(x)} GPU-seconds of prefill" if x >= 0 else f"costs {num(-x)} GPU-seconds more prefill"


def _gpus(x: float) -> str:
    return f"{float(x):,.0f}" if np.isfinite(float(x)) else "∞"


def measured_sentence(measured: pd.DataFrame | None, *, short: bool = False, tier_label: str = "") -> str:
    """Section 7: how the load times measured on this machine's disk compare with the ones modelled for the
    storage tier ``tier_label`` (median ratio and spread), or :data:`NO_MEASUREMENT`. The ratio measures the model
    only when that tier describes this disk (a preset saved by ``calibrate-disk``); otherwise it says how far the
    preset is from the disk. ``measured``: :func:`~llmexplore.sweeps.offload.measured_load`."""
    if measured is None or len(measured) == 0:
        return "No measurement yet" if short else NO_MEASUREMENT
    ratio = measured["measured_ms"].to_numpy(float) / measured["modelled_ms"].to_numpy(float)
    if short:
        return f"Measured / modelled load time: median {num(np.median(ratio))} over {len(ratio):,} requests"
    lo, hi = np.percentile(ratio, [10, 90])
    tier = f"the preset tier {tier_label}" if tier_label else "the chosen storage tier"
    return (f"Over {len(ratio):,} loads read from this machine's disk, the measured time is {num(np.median(ratio))} × "
            f"the time modelled for {tier} at the median ({num(lo)}–{num(hi)} × from p10 to p90). This compares "
            f"the disk with {tier}, not the model with itself: it measures the model only when the tier was saved "
            "for this disk by `llmexplore calibrate-disk`.")


# ---- headline records (notebook 50's record() values) -------------------------------------------------------
def per_token_us(point: dict) -> dict:
    """The marginal cost per token [us] of recomputing and of loading, at the decided point."""
    return {"recompute": point["a_us_per_token"], "load": point["c_us_per_token"]}


def curve_near(near: pd.DataFrame) -> dict:
    """The cost curves near the break-even as lists (prefix tokens, recompute and load time [ms])."""
    return near[["prefix_tokens", "recompute_ms", "load_ms"]].to_dict("list")


def precision_break_even(precision: pd.DataFrame, tier: str) -> dict:
    """``{dtype variant: break-even tokens}`` on one storage tier."""
    rows = precision[precision["tier"] == tier]
    return dict(zip(rows["variant"], rows["break_even_tokens"]))


def map_tokens_range(bmap: pd.DataFrame) -> list:
    """[smallest, largest] break-even prefix [tokens] over the bandwidth x latency map."""
    return [bmap["tokens"].min(), bmap["tokens"].max()]


def preload_break_even(curve: pd.DataFrame) -> dict:
    """``{queue wait [ms], 3 decimals: break-even tokens}`` of the preload curve."""
    return dict(zip(curve["queue_wait_ms"].round(3).astype(str), curve["break_even_tokens"]))


def staging_record(replay: dict) -> dict:
    """The bounded-staging replay: peak staged and budget [GB], the share of requests preloaded, and mean TTFT
    [ms] with and without preloading."""
    req = replay["requests"]
    return {"peak_GB": replay["occupancy"]["staged_GB"].max(), "budget_GB": replay["budget_GB"],
            "preloaded_share": req["preloaded"].mean(), "mean_ttft_ms": req["ttft_ms"].mean(),
            "mean_ttft_no_preload_ms": req["ttft_no_preload_ms"].mean()}


def gpus_by_hit_ratio(gpus: pd.DataFrame) -> dict:
    """``{hit ratio, 4 decimals: prefill GPUs}`` of the hit-ratio sweep (its first tier: the setup's own)."""
    own = gpus[gpus["tier"] == gpus["tier"].iloc[0]] if "tier" in gpus else gpus
    return dict(zip(own["hit_ratio"].round(4).astype(str), own["gpus"]))


def saved_gpu_s_at(saved: pd.DataFrame, hit_ratio: float) -> dict:
    """``{tier: GPU-seconds saved per second [s]}`` at one hit ratio."""
    rows = saved[saved["hit_ratio"] == hit_ratio]
    return dict(zip(rows["tier"], rows["saved_gpu_ms"] / 1e3))


__all__ += ['per_token_us', 'curve_near', 'precision_break_even', 'map_tokens_range', 'preload_break_even', 'staging_record', 'gpus_by_hit_ratio', 'saved_gpu_s_at']

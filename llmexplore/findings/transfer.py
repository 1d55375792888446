"""Findings of notebooks/40_kv_transfer.ipynb: one request's plan, the byte matrix, fan-out per prefill rank, the
fragments, layout pairs compared and transfer time against prompt length.

Every sentence reads the tables of :mod:`llmexplore.sweeps.transfer` (the ones the figures draw); ``short=True``
gives the figure's title.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import presets
from ..sweeps.transfer import TransferSetup
from . import join, num

__all__ = ["layouts_phrase", "plan_sentence", "summary_table", "matrix_sentence", "fanout_sentence",
           "fragment_sentence", "pairs_sentence", "prompt_sentence", "stage_sentence", "spec_sentence"]


def _mb(x: float) -> str:
    return f"{num(x)} MB"


def _span(values, unit: str = "MB", *, whole: bool = False) -> str:
    """``"168 MB"`` when every value reads the same, else ``"84.0–168 MB"`` (``whole``: counts, no decimals)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if not v.size:
        return "n/a"
    show = (lambda x: f"{x:,.0f}") if whole else num
    lo, hi = show(v.min()), show(v.max())
    return f"{lo} {unit}" if lo == hi else f"{lo}–{hi} {unit}"


def _ranks(n: int, what: str) -> str:
    return f"{n:,} {what} rank" + ("" if n == 1 else "s")


def layouts_phrase(s: TransferSetup) -> str:
    """``"prefill TP8 → decode TP4"`` (with ``x DP2`` where a side has several DP groups, ``x PP2`` where it has
    pipeline stages)."""
    return f"{s.mt.prefill_label} → {s.mt.decode_label}"


def _sources(summary: dict) -> str:
    if summary["plan_kind"] == "identity":
        if summary["max_sources"] > 1:  # pipelines: the same-position rank of each prefill stage it meets
            return (f"each decode rank receives whole pages from the prefill rank at its position in each prefill "
                    f"stage it meets, at most {summary['max_sources']} (identity plan per stage pair)")
        return "each decode rank receives whole pages from the one prefill rank at its position (identity plan)"
    k, f = summary["max_sources"], summary["max_fanout"]
    if k > 1:
        return f"each decode rank gathers from {k} prefill ranks"
    if f > 1:
        return f"each prefill rank feeds {f} decode ranks"
    return "each decode rank receives from one prefill rank"


def plan_sentence(summary: dict, s: TransferSetup, *, short: bool = False) -> str:
    """Section 1: who receives from whom, the bytes of one request, the busiest NIC and the transfer time.

    ``summary``: :func:`~llmexplore.sweeps.transfer.plan_summary` of ``s``."""
    tokens = f"{summary['prompt_tokens']:,}-token"
    if short:
        k = summary["max_sources"]
        who = ("identity plan" if summary["plan_kind"] == "identity" else
               f"{k} sources per decode rank" if k > 1 else f"fan-out {summary['max_fanout']}")
        return f"{s.label}: {who}, {_mb(summary['request_MB'])} per {tokens} request"
    head = layouts_phrase(s)
    text = (f"{head[0].upper()}{head[1:]} of {s.model.label}: {_sources(summary)}; a {tokens} request moves "
            f"{_mb(summary['request_MB'])}, the busiest NIC ({summary['busiest']}) carries "
            f"{_mb(summary['busiest_MB'])}, {num(summary['serial_ms'])} ms serial over {s.link.label}")
    if np.isfinite(summary.get("pipelined_ms", np.nan)):
        text += f", {num(summary['pipelined_ms'])} ms exposed when pipelined layer by layer"
    text += "."
    extra = []
    if summary["idle_prefill_ranks"]:
        n = summary["idle_prefill_ranks"]
        extra.append(f"{_ranks(n, 'prefill')} of the source group send{'s' if n == 1 else ''} nothing")
    if summary["local_copy_MB"] > 0:
        extra.append(f"decode ranks holding a second copy of a KV head receive nothing, leaving "
                     f"{_mb(summary['local_copy_MB'])} to copy on the decode side")
    if extra:
        text += f" {join(extra)[0].upper()}{join(extra)[1:]}."
    if summary.get("prefill_pp", 1) > 1 or summary.get("decode_pp", 1) > 1:
        n_p, n_d, k = summary["prefill_pp"], summary["decode_pp"], summary["stage_pairs"]
        text += (f" With {n_p} prefill and {n_d} decode pipeline stage{'s' if n_d != 1 else ''}, each prefill rank "
                 f"sends only its stage's layers: {k} stage pair{'s' if k != 1 else ''} talk{'s' if k == 1 else ''}.")
    if summary.get("speculative"):
        text += " " + spec_sentence(summary)
    if "roundtrip_ok" in summary and not summary["roundtrip_ok"]:
        text += " The round-trip check FAILED: the plan does not rebuild every decode page."
    return text


def summary_table(summary: dict) -> pd.DataFrame:
    """A :func:`~llmexplore.sweeps.transfer.plan_summary` as a two-column table for people (quantity, value
    with its unit)."""
    pipelined = summary.get("pipelined_ms", np.nan)
    rows = [
        ("layouts", f"{summary['prefill']} → {summary['decode']} (DP pairing: {summary['dp_pairing']})"),
        ("KV pages", f"{summary['page_size']:,} tokens, {summary['kv_dtype']}"),
        ("plan", summary["plan_kind"]),
        ("prefill ranks per decode rank (most)", f"{summary['max_sources']:,}"),
        ("decode ranks per prefill rank (most fan-out)", f"{summary['max_fanout']:,}"),
        ("idle prefill ranks of the source group", f"{summary['idle_prefill_ranks']:,}"),
        ("fragments per layer (decode group)", f"{summary['fragments_per_layer']:,}"),
        ("RDMA writes per request (fragments × layers)", f"{summary['writes']:,.0f}"),
        (f"bytes of one {summary['prompt_tokens']:,}-token request", _mb(summary["request_MB"])),
        (f"busiest NIC ({summary['busiest']})", _mb(summary["busiest_MB"])),
        ("copied locally by decode replicas", _mb(summary["local_copy_MB"])),
        (f"transfer over {presets.resolve('links', summary['link']).label}: serial / pipelined (exposed)",
         f"{num(summary['serial_ms'])} ms / " + (f"{num(pipelined)} ms" if np.isfinite(pipelined) else "n/a")),
        *([("serial with one RDMA write per page (unbatched)", f"{num(summary['unbatched_ms'])} ms")]
          if "unbatched_ms" in summary else []),
        *([("staged: one bulk write per rank pair, gather and scatter in HBM",
            f"{num(summary['staged_ms'])} ms, of which {num(summary['staging_copy_ms'])} ms copies")]
          if "staged_ms" in summary else []),
        ("prefill of the prompt", f"{num(summary['prefill_ms'])} ms" if np.isfinite(summary.get("prefill_ms", np.nan))
         else "n/a (no prefill model at this TP)"),
    ]
    if summary.get("prefill_pp", 1) > 1 or summary.get("decode_pp", 1) > 1:
        rows.append(("pipeline stages (prefill, decode)", f"PP{summary['prefill_pp']}, PP{summary['decode_pp']}: "
                     f"{summary['stage_pairs']:,} stage pair(s) talk"))
    if summary.get("speculative"):
        rows.append((f"speculative decoding ({summary['speculative']}): draft layer's KV / hidden state and top-k",
                     f"{_mb(summary['draft_MB'])} / {num(summary['spec_state_MB'] * 1e3)} kB"))
    if "roundtrip_ok" in summary:
        rows.append(("round-trip check", ("every decode byte matches" if summary["roundtrip_ok"] else "FAILED")
                     + f" ({summary['roundtrip_checked_B']:,} B checked)"))
    return pd.DataFrame(rows, columns=["quantity", "value"])


def matrix_sentence(matrix: pd.DataFrame, *, short: bool = False) -> str:
    """Section 2: how many prefill x decode rank pairs carry bytes, and how much each decode rank gathers.

    ``matrix``: :func:`~llmexplore.sweeps.transfer.byte_matrix` (MB per request)."""
    m = matrix.to_numpy(float)
    live = m > 0
    pairs = int(live.sum())
    senders, receivers = live.any(axis=1), live.any(axis=0)
    recv, sources = m.sum(axis=0)[receivers], live.sum(axis=0)[receivers]
    src = (f"{int(sources[0])} prefill rank" + ("" if sources[0] == 1 else "s") if sources.min() == sources.max()
           else f"{int(sources.min())}–{int(sources.max())} prefill ranks")
    quiet = int(m.shape[1] - receivers.sum())
    if short:
        who = f"; {int(receivers.sum()):,} decode ranks get" if quiet else ": each decode rank gets"
        return f"{pairs:,} of {m.size:,} rank pairs carry KV{who} {_span(recv)} from {src}"
    text = (f"{pairs:,} of the {m.shape[0]:,} × {m.shape[1]:,} prefill × decode rank pairs carry KV, "
            f"{_span(m[live])} each per request: every receiving decode rank gathers {_span(recv)} from {src}, "
            f"and every sending prefill rank sends {_span(m.sum(axis=1)[senders])}")
    if quiet:
        text += (f"; {quiet:,} decode rank{'s' if quiet != 1 else ''} receive{'' if quiet != 1 else 's'} nothing "
                 "(other DP groups, or replicas the plan does not feed)")
    return text + "."


def fanout_sentence(ranks: pd.DataFrame, *, short: bool = False) -> str:
    """Section 3: how many decode ranks each prefill rank serves, what it sends, and the idle ranks.

    ``ranks``: :func:`~llmexplore.sweeps.transfer.prefill_rank_table`."""
    busy = ranks[~ranks["idle"]]
    idle = int(ranks["idle"].sum())
    fan = busy["fanout"].to_numpy()
    serves = (f"{int(fan[0])} decode rank" + ("" if fan[0] == 1 else "s") if fan.min() == fan.max()
              else f"{int(fan.min())}–{int(fan.max())} decode ranks")
    if short:
        head = f"{idle:,} of {len(ranks):,} prefill ranks idle; the others serve " if idle else "Each prefill rank serves "
        return head + f"{serves}, sending {_span(busy['sent_MB'])}"
    if idle:
        text = (f"{idle:,} of the {len(ranks):,} prefill ranks of the source group send nothing (another rank holds "
                f"the same KV and sends it); each of the others serves {serves} and sends {_span(busy['sent_MB'])}")
    else:
        text = (f"Every one of the {len(ranks):,} prefill ranks of the source group serves {serves} and sends "
                f"{_span(busy['sent_MB'])}")
    return text + f" per request, in {_span(busy['writes'], 'RDMA writes', whole=True)}."


def fragment_sentence(frags: pd.DataFrame, summary: dict, *, layers: int | None = None) -> str:
    """Section 4: the fragments of the decode group's plans, their size, the writes they make, and the
    round-trip check. ``frags``: :func:`~llmexplore.sweeps.transfer.fragment_table`; ``summary``:
    :func:`~llmexplore.sweeps.transfer.plan_summary` (with the round-trip check)."""
    n = summary["fragments_per_layer"]
    per_rank = frags.groupby("decode_rank").size().to_numpy() if len(frags) else np.array([0])
    each = (f"{int(per_rank[0])} per decode rank" if per_rank.min() == per_rank.max()
            else f"{int(per_rank.min())}–{int(per_rank.max())} per decode rank")
    kind = "the explicit form of an identity plan: " if summary["plan_kind"] == "identity" else ""
    text = (f"One layer of a request moves as {n:,} fragments ({kind}{each}) of "
            f"{_span(frags['bytes_per_page'], 'B')} per page; every layer repeats them, "
            f"{summary['writes']:,.0f} RDMA writes per request in all")
    if "roundtrip_ok" in summary:
        text += (". Applied to synthetic pages, the plan rebuilds every decode page byte for byte "
                 f"({summary['roundtrip_checked_B']:,} B checked)" if summary["roundtrip_ok"] else
                 ". The round-trip check FAILED: some decode page differs from the one cut from the global tensor")
    return text + "."


def pairs_sentence(pairs: pd.DataFrame, *, short: bool = False) -> str:
    """Section 5: the cheapest and dearest layout pairs, the exposed time when pipelined, decode replicas that
    copy locally and the pairs the planner refuses. ``pairs``: :func:`~llmexplore.sweeps.transfer.layout_pairs`."""
    ok = pairs[pairs["feasible"]]
    bad = pairs[~pairs["feasible"]]
    if ok.empty:
        reason = bad["reason"].iloc[0] if len(bad) else "no pairs"
        return f"The planner refuses every pair: {reason}" + ("" if short else ".")
    lo, hi = ok["serial_ms"].min(), ok["serial_ms"].max()
    fastest = ok[np.isclose(ok["serial_ms"], lo)]["layouts"].tolist()
    slowest = ok[np.isclose(ok["serial_ms"], hi)]["layouts"].tolist()
    pipe = ok["pipelined_ms"].to_numpy(float)
    tokens = f"{int(ok['prompt_tokens'].iloc[0]):,}-token"
    if short:
        text = f"Serial {_span(ok['serial_ms'], 'ms')} per {tokens} request"
        return text + (f", at most {num(np.nanmax(pipe))} ms exposed pipelined" if np.isfinite(pipe).any() else "")

    def names(labels):
        return join(labels) if len(labels) <= 3 else ", ".join(labels[:3]) + f" and {len(labels) - 3} more"

    link = presets.resolve("links", ok["link"].iloc[0]).label
    if num(lo) == num(hi):
        text = f"Over {link}, a {tokens} request takes {num(lo)} ms serial ({names(fastest)})"
    else:
        text = (f"Over {link}, a {tokens} request takes from {num(lo)} ms serial "
                f"({names(fastest)}) to {num(hi)} ms ({names(slowest)}): the busiest NIC sets the time, and it "
                "carries all the bytes of the ranks it gathers from or feeds")
    if np.isfinite(pipe).any():
        text += f"; pipelined layer by layer, at most {num(np.nanmax(pipe))} ms stays exposed"
    copy = ok[ok["local_copy_MB"] > 0]
    if len(copy):
        text += (f". {names(copy['layouts'].tolist())} leave{'s' if len(copy) == 1 else ''} "
                 f"{_span(copy['local_copy_MB'])} to copy on the decode side: version 1 sends each KV head to one "
                 "replica only")
    if len(bad):
        text += (f". The planner refuses {names(bad['layouts'].tolist())}: {bad['reason'].iloc[0]}")
    return text + "."


def prompt_sentence(by_prompt: pd.DataFrame, *, short: bool = False, prefill_pp: int = 1) -> str:
    """Section 6: the transfer time against prompt length, serial and pipelined, against the prefill time (with
    ``prefill_pp`` stages, the pipelined prefill's latency, behind which every stage streams its own layers).
    ``by_prompt``: :func:`~llmexplore.sweeps.transfer.time_vs_prompt`."""
    d = by_prompt.sort_values("prompt_tokens")
    a, b = d.iloc[0], d.iloc[-1]
    span = f"{a['prompt_tokens']:,.0f} to {b['prompt_tokens']:,.0f} tokens"
    pipe = d["pipelined_ms"].to_numpy(float)
    if short:
        text = f"Serial {num(a['serial_ms'])}–{num(b['serial_ms'])} ms over {span}"
        return text + (f"; pipelined ≤ {num(np.nanmax(pipe))} ms exposed" if np.isfinite(pipe).any() else "")
    text = (f"From {span} the serial transfer grows from {num(a['serial_ms'])} ms to {num(b['serial_ms'])} ms, in "
            "step with the prompt's KV bytes")
    pre = d["prefill_ms"].to_numpy(float)
    if np.isfinite(pre).all() and np.isfinite(pipe).all():
        share = 100 * d["serial_ms"].to_numpy(float) / pre
        what = "the prefill time" if prefill_pp == 1 else f"the {prefill_pp}-stage pipelined prefill's latency"
        how = ("pipelined layer by layer" if prefill_pp == 1 else
               "each stage streaming its own layers as it computes them")
        text += (f" ({num(share.min())}–{num(share.max())}% of {what}); {how}, "
                 f"{num(pipe.min())}–{num(pipe.max())} ms stays exposed")
    if "unbatched_ms" in d:
        ratio = d["unbatched_ms"].to_numpy(float) / d["serial_ms"].to_numpy(float)
        text += (f". Posting one RDMA write per page instead of one per fragment and layer would cost "
                 f"{num(ratio.min())}–{num(ratio.max())}× the serial time")
        if "staged_ms" in d:
            rel = 100 * (d["staged_ms"].to_numpy(float) / d["serial_ms"].to_numpy(float) - 1)
            lo, hi = float(rel.min()), float(rel.max())
            text += "; a staging buffer (one bulk write per rank pair) " + (
                f"is {num(-hi)}–{num(-lo)}% faster than batched writes" if hi <= 0 else
                f"costs at most {num(hi)}% more than batched writes" if lo >= 0 else
                f"ranges from {num(-lo)}% faster to {num(hi)}% slower than batched writes")
    return text + "."


def _stage_list(stages) -> str:
    stages = sorted(int(x) for x in stages)
    return (f"decode stage {stages[0]}" if len(stages) == 1 else
            "decode stages " + join([str(x) for x in stages]))


def stage_sentence(stages: pd.DataFrame, *, short: bool = False) -> str:
    """Which prefill stage sends which layers to which decode stage, and the MB each pair moves.
    ``stages``: :func:`~llmexplore.sweeps.transfer.stage_pair_table`."""
    pp_p = int(stages["prefill_stage"].max()) + 1
    pp_d = int(stages["decode_stage"].max()) + 1
    layers = int(stages["last_layer"].max()) + 1
    if pp_p == 1 and pp_d == 1:
        draft = int(stages["draft_layers"].sum())
        what = f"all {layers - draft:,} layers" + (f" and the draft's {draft}" if draft else "")
        text = (f"No pipeline stages: {what} go from the one prefill stage to the one decode stage, "
                f"{_mb(stages['MB'].iloc[0])} per request")
        return text if short else text + "."
    if short:
        return (f"{len(stages):,} of {pp_p * pp_d:,} stage pairs talk, {_span(stages['MB'])} each"
                + ("; stage i only to stage i" if pp_p == pp_d and len(stages) == pp_p else ""))
    parts = []
    for a, rows in stages.groupby("prefill_stage", sort=True):
        lo, hi = int(rows["first_layer"].min()), int(rows["last_layer"].max())
        parts.append(f"prefill stage {a} (layers {lo}–{hi}) to {_stage_list(rows['decode_stage'])}")
    head = "; ".join(parts)
    text = f"{head[0].upper()}{head[1:]}: {len(stages):,} of the {pp_p:,} × {pp_d:,} stage pairs talk"
    if pp_p == pp_d and len(stages) == pp_p:
        text += ", each stage only to the stage of the same index"
    text += (f", moving {_span(stages['MB'])} each per request; a prefill rank never sends a layer its stage does "
             "not hold")
    return text + "."


def spec_sentence(summary: dict) -> str:
    """What speculative decoding adds to the transfer (the draft layer's KV and the draft's hidden state), from
    :func:`~llmexplore.sweeps.transfer.plan_summary`; '' without a speculative preset."""
    name = summary.get("speculative")
    if not name:
        return ""
    if summary["draft_layers"] == 0:
        return (f"{name} drafts by n-gram lookup on the CPU: no draft model, so no draft KV or hidden state "
                "moves.")
    share = 100 * summary["draft_MB"] / summary["request_MB"]
    return (f"With {name}, the draft layer's KV moves as one more layer on the last stage ({_mb(summary['draft_MB'])}, "
            f"{num(share)}% of the request), and every sender–receiver pair of the last stage adds the draft's "
            f"hidden state and top-k ({num(summary['spec_state_MB'] * 1e3)} kB in all) so the decode side can draft "
            "its first token.")


def fragment_sizes(frags: pd.DataFrame) -> list:
    """The distinct fragment sizes per page [B], ascending."""
    return sorted(set(frags["bytes_per_page"]))


def serial_ms_by_prompt(by_prompt: pd.DataFrame) -> dict:
    """``{prompt tokens: serial transfer time [ms]}`` of the prompt sweep."""
    return dict(zip(by_prompt["prompt_tokens"].astype(int).astype(str), by_prompt["serial_ms"]))


__all__ += ['fragment_sizes', 'serial_ms_by_prompt']

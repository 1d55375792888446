"""Findings of notebooks/20_pd_disaggregation.ipynb: one request, the KV transfer, the serving modes, latency vs rate, break-even bandwidth, P:D ratio, goodput, prompt spread and the queue check."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import presets
from ..sweeps import pricing
from ..sweeps.disagg import PDSetup, fewest_gpus, max_abs_error_by_model, resolve_link, tokens_per_s, with_cost
from . import num

__all__ = ["request_sentence", "transfer_sentence", "comparison_sentence", "cost_sentence", "comparison_columns", "latency_sentence", "breakeven_sentence", "ratio_title", "ratio_sentence", "point_table", "goodput_sentence", "spread_sentence", "queue_sentence"]


def request_sentence(point: dict, s: PDSetup) -> str:
    """Section 1: one prefill, one decode step and the KV bytes of one request."""
    wl = s.workload
    shape = f"TP{s.decode.ranks}" + (f" x PP{s.decode_pp}" if s.decode_pp > 1 else "")
    if s.speculative is not None:
        step = (f"decoding with {s.speculative.label} ({num(s.speculative.tokens_per_step)} tokens per step) takes "
                f"{num(point['decode_step_ms'])} ms per output token at batch {point['decode_batch']:,} on {shape}")
    elif s.decode_pp > 1:
        step = (f"a sequence's tokens come {num(point['decode_step_ms'])} ms apart at batch "
                f"{point['decode_batch']:,} on {shape} (the pipeline's micro-batches in flight)")
    else:
        step = f"a decode step at batch {point['decode_batch']:,} takes {num(point['decode_step_ms'])} ms on {shape}"
    pre = f"TP{s.prefill.ranks}" + (f" x PP{s.prefill_pp}" if s.prefill_pp > 1 else "")
    every = (f" (a new prompt enters the pipeline every {num(point['prefill_service_ms'])} ms)"
             if s.prefill_pp > 1 else "")
    return (f"One {wl.prompt_tokens:,}-token prompt takes {num(point['prefill_ms'])} ms to prefill on "
            f"{pre} {s.prefill.hardware.label}{every}; {step}, and each request's KV cache is "
            f"{point['kv_transfer_GB']:.2f} GB.")


def transfer_sentence(point: dict, link="roce-400g", *, short: bool = False) -> str:
    """Section 2: the KV transfer of one request over the chosen link, serial vs layer-wise pipelined."""
    lk = resolve_link(link)
    serial, exposed = point["transfer_serial_ms"], point["transfer_exposed_ms"]
    if short:
        return f"Pipelined KV transfer: {num(exposed)} ms exposed instead of {num(serial)} ms over {lk.name}"
    return (f"Over {lk.name} ({lk.achievable_GBps:g} GB/s per GPU), one request's KV transfer adds "
            f"{num(serial)} ms to TTFT when sent after the prefill, and only {num(exposed)} ms when streamed "
            f"layer by layer.")


def _gpus(v) -> str:
    return f"{v:,.0f} GPUs" if np.isfinite(v) else "no pool that meets the SLOs"


def _best(comparison: pd.DataFrame, link: str | None):
    """The row of :func:`fewest_gpus`, a tie going to ``link`` (None: no mode meets the SLOs)."""
    best = fewest_gpus(comparison)
    if best is not None and link is not None:
        tied = comparison[(comparison["gpus"] == best["gpus"]) & (comparison["link"] == link)]
        best = fewest_gpus(tied) or best
    return best


def comparison_sentence(comparison: pd.DataFrame, s: PDSetup, *, link: str | None = None,
                        short: bool = False) -> str:
    """Section 3: the fewest GPUs that meet both SLOs at the target rate, by serving mode and link (a tie goes
    to ``link``, the notebook's link)."""
    wl = s.workload
    best = _best(comparison, link)
    co = comparison[comparison["mode"] == "colocated"].iloc[0]
    disagg = comparison[comparison["mode"] != "colocated"]
    worst = disagg.loc[disagg["gpus"].idxmax()] if len(disagg) else None
    if best is None:
        return f"Nothing meets TTFT p99 ≤ {wl.ttft_slo_ms:g} ms and TPOT p99 ≤ {wl.tpot_slo_ms:g} ms at {wl.rate_per_s:g} req/s."
    where = "colocated" if best["mode"] == "colocated" else f"{best['mode']} over {best['link']}"
    if short:
        return f"{_gpus(best['gpus'])} for {wl.rate_per_s:g} req/s: {where} (colocated {co['gpus']:,.0f})"
    text = (f"At {wl.rate_per_s:g} req/s with TTFT p99 ≤ {wl.ttft_slo_ms:,g} ms and TPOT p99 ≤ {wl.tpot_slo_ms:,g} ms, "
            f"the fewest GPUs are {best['gpus']:,.0f} ({where})")
    if best["mode"] != "colocated":
        text += f", against {_gpus(co['gpus'])} colocated"
    if worst is not None and worst["gpus"] > best["gpus"]:
        text += f"; {worst['mode']} over {worst['link']} needs {_gpus(worst['gpus'])}"
    return text + "."


#: the columns of section 3's table; the cost columns only where the tier prices the GPU
COMPARISON_COLUMNS = ["mode", "link", "gpus", "n_prefill", "n_decode", "pd_gpu_ratio", "goodput_per_gpu", "ttft_ms",
                      "tpot_ms", "transfer_ms", "exposed_ms", "kv_GB", "usd_per_hour", "usd_per_mtok", "reason"]


def comparison_columns(comparison: pd.DataFrame) -> list[str]:
    """The columns of :data:`COMPARISON_COLUMNS` that ``comparison`` has (no cost columns where not priced)."""
    return [c for c in COMPARISON_COLUMNS if c in comparison.columns]


def cost_sentence(comparison: pd.DataFrame, s: PDSetup, tier: str = pricing.DEFAULT_PRICE_TIER, *,
                  link: str | None = None) -> str:
    """Section 3: dollars per hour and per million tokens (input + output) of the fewest-GPU choice and of
    colocation at ``tier``'s price of the setup's GPU, with the price's date; "not priced" where the tier has
    no price for it. ``comparison``: :func:`~llmexplore.sweeps.disagg.with_cost` of the link comparison."""
    wl, gpu = s.workload, s.prefill.hardware.name
    price = pricing.tier_price(tier, gpu)
    if price is None:
        return f"These pools are {pricing.not_priced(tier, gpu)}; the GPU counts above stand."
    rate, comparison = tokens_per_s(s), with_cost(comparison, s, tier)
    best = _best(comparison, link)
    co = comparison[comparison["mode"] == "colocated"].iloc[0].to_dict()

    def cost(r):
        if not np.isfinite(r["gpus"]):
            return "meets no SLO, so has no price"
        return (f"costs ${num(r['usd_per_hour'])} per hour on {r['gpus']:,.0f} GPUs, ${num(r['usd_per_mtok'])} "
                f"per million tokens")

    head = (f"At {pricing.price_label(tier, price)} for the {s.prefill.hardware.label}, serving {wl.rate_per_s:g} "
            f"req/s x ({wl.prompt_tokens:,} + {wl.output_tokens:,}) tokens = {num(rate)} tokens/s (input + output), ")
    if best is None:
        return head + f"colocated {cost(co)}, and no disaggregated pool meets the SLOs."
    if best["mode"] == "colocated":
        return head + f"colocated, the fewest GPUs, {cost(co)}."
    saved = 100 * (1 - best["usd_per_mtok"] / co["usd_per_mtok"]) if np.isfinite(co["gpus"]) else np.nan
    text = head + f"{best['mode']} over {best['link']} {cost(best)}, against colocated, which {cost(co)}"
    return text + (f" ({num(saved)}% less per token)." if np.isfinite(saved) and saved > 0 else ".")


def latency_sentence(latency: pd.DataFrame, s: PDSetup, *, short: bool = False) -> str:
    """Section 4: up to which arrival rate each pool meets both p99 targets."""
    wl = s.workload
    parts = []
    for mode, g in latency.groupby("mode", sort=False):
        g = g.sort_values("rate_per_s")
        ok = ((g["ttft_ms"] <= wl.ttft_slo_ms) & (g["tpot_ms"] <= wl.tpot_slo_ms)).to_numpy()
        rates = g["rate_per_s"].to_numpy()
        if not ok[0]:
            parts.append((mode, f"misses a target already at {num(rates[0])} req/s"))
        elif ok.all():
            parts.append((mode, f"up to {num(rates[-1])} req/s and beyond"))
        else:
            parts.append((mode, f"up to {num(rates[np.argmin(ok) - 1])} req/s"))
    if short:
        return "Both p99 targets met " + ", ".join(f"{t} {m.split()[0]}" for m, t in parts)
    text = "; ".join(f"{m} {t}" for m, t in parts[1:])
    return (f"With equal GPU budgets, {parts[0][0]} meets both p99 targets {parts[0][1]}"
            + (f"; {text}" if text else "") + ".")


def breakeven_sentence(one_nic: dict, per_gpu: dict | None = None, *, slow_link: str = "tcp-100g",
                       short: bool = False) -> str:
    """Section 5: the link bandwidth below which disaggregation needs more GPUs than colocation."""
    serial, piped = one_nic.get("disaggregated, serial", np.nan), one_nic.get("disaggregated, pipelined", np.nan)
    lk = presets.resolve("links", slow_link)
    if not np.isfinite(serial) and not np.isfinite(piped):
        return "On this bandwidth axis disaggregation never needs fewer GPUs than colocation."
    ref = np.nanmax([serial, piped])
    side = "below" if lk.achievable_GBps < ref else "above"
    if short:
        return f"One NIC per instance: disaggregation pays from {num(serial)} GB/s ({num(piped)} GB/s pipelined)"
    text = (f"With one NIC per instance, disaggregation stops paying below {num(serial)} GB/s "
            f"({num(piped)} GB/s pipelined), and {lk.label} ({lk.achievable_GBps:g} GB/s achievable) is {side} it")
    if per_gpu:
        lo = np.nanmin(list(per_gpu.values()))
        text += f"; with a NIC per GPU it pays from {num(lo)} GB/s"
    return text + "."


def _ratio_ends(df: pd.DataFrame, col: str):
    mode = next(m for m in df["mode"] if m != "colocated")
    g = df[(df["mode"] == mode) & np.isfinite(df["pd_gpu_ratio"].astype(float))].sort_values(col)
    return mode, (None if g.empty else (g.iloc[0][col], g.iloc[0]["pd_gpu_ratio"], g.iloc[-1][col],
                                        g.iloc[-1]["pd_gpu_ratio"]))


def ratio_title(df: pd.DataFrame, col: str) -> str:
    """Title of a :func:`pool_sizes_vs` figure: how the P:D GPU ratio moves along ``col`` (first link)."""
    what = {"prompt_tokens": "prompt", "output_tokens": "output", "rate_per_s": "rate"}[col]
    mode, e = _ratio_ends(df, col)
    if e is None:
        return f"No disaggregated pool meets the SLOs at these {what} lengths"
    unit = " req/s" if col == "rate_per_s" else " tokens"
    return (f"P:D GPU ratio {mode.replace('disaggregated ', '')}: {num(e[1])} at {e[0]:,.0f}{unit}, "
            f"{num(e[3])} at {e[2]:,.0f}{unit}")


def ratio_sentence(by_prompt: pd.DataFrame, by_output: pd.DataFrame) -> str:
    """Section 6: how the prefill:decode GPU ratio moves with prompt and output length (first link)."""
    mode, p = _ratio_ends(by_prompt, "prompt_tokens")
    _, o = _ratio_ends(by_output, "output_tokens")
    parts = []
    if p:
        parts.append(f"the P:D GPU ratio goes from {num(p[1])} at {p[0]:,.0f}-token prompts to {num(p[3])} at "
                     f"{p[2]:,.0f}")
    if o:
        parts.append(f"from {num(o[1])} at {o[0]:,.0f}-token outputs to {num(o[3])} at {o[2]:,.0f}")
    if not parts:
        return f"No pool {mode} meets the SLOs at these lengths."
    return f"{mode[0].upper() + mode[1:]}, " + "; ".join(parts) + "."


def point_table(point: dict) -> pd.DataFrame:
    """A :func:`point_summary` as a two-column table for people (quantity, value with its unit)."""
    d, c = point["disaggregated"], point["colocated"]
    ttft = next(k for k in d if k.startswith("ttft_"))
    tpot = next(k for k in d if k.startswith("tpot_"))
    pct = ttft.split("_")[1]

    def pools(r, what):
        return f"{what} ({r['gpus']:,.0f} GPUs)" if r["feasible"] else f"none meets the SLOs: {r['reason']}"

    rows = [
        ("prefill of one prompt", f"{num(point['prefill_ms'])} ms"),
        (f"decode step at batch {point['decode_batch']:,}", f"{num(point['decode_step_ms'])} ms"),
        ("largest decode batch that fits", f"{point['decode_batch_cap']:,.0f} sequences"),
        ("KV cache per request", f"{point['kv_transfer_GB']:.3g} GB"),
        ("KV transfer: serial / pipelined (exposed)",
         f"{num(point['transfer_serial_ms'])} ms / {num(point['transfer_exposed_ms'])} ms"),
        ("disaggregated pools", pools(d, f"{d['prefill_instances']:,.0f} prefill + {d['decode_instances']:,.0f} decode")),
        ("disaggregated goodput", f"{d['goodput_per_gpu']:.3g} req/s per GPU"),
        (f"disaggregated TTFT / TPOT {pct}", f"{num(d[ttft])} ms / {num(d[tpot])} ms"),
        ("colocated pool", pools(c, f"{c['instances']:,.0f} instances, {c['chunk_tokens']:,}-token chunks")),
        ("colocated goodput", f"{c['goodput_per_gpu']:.3g} req/s per GPU"),
        (f"colocated TTFT / TPOT {pct}", f"{num(c[ttft])} ms / {num(c[tpot])} ms"),
    ]
    return pd.DataFrame(rows, columns=["quantity", "value"])


def modes_title(rows, link: str, best: str | None = None) -> str:
    """Section 10's figure: the GPUs each serving mode needs (``rows``: :func:`~llmexplore.sweeps.disagg.mode_rows`;
    ``best``: :func:`~llmexplore.sweeps.disagg.fewest_gpus_mode`, else the first with the fewest)."""
    rows = pd.DataFrame(list(rows) if not isinstance(rows, pd.DataFrame) else rows)
    gpus = rows["gpus"].astype(float)
    if not np.isfinite(gpus).any():
        return f"No serving mode meets the SLOs at the target rate over {link}"
    top = rows.loc[gpus.idxmin()] if best is None else rows.set_index("mode").loc[best].to_dict() | {"mode": best}
    others = "; ".join(f"{r.mode}: {_gpus(r.gpus)}" for r in rows.itertuples() if r.mode != top["mode"])
    return f"Fewest GPUs over {link}: {_gpus(top['gpus'])}, {top['mode']} — {others}"


def goodput_sentence(grid: dict, s: PDSetup, *, short: bool = False) -> str:
    """Section 7: the most efficient (prefill, decode) pool sizes and their goodput per GPU."""
    rpg = np.asarray(grid["rate_per_gpu"])
    if not np.isfinite(rpg).any() or np.nanmax(rpg) <= 0:
        return "No pool size on this grid meets both SLOs."
    i, j = np.unravel_index(int(np.nanargmax(rpg)), rpg.shape)
    n = np.asarray(grid["n"])
    rate = float(np.asarray(grid["rate"])[i, j])
    best = float(rpg[i, j])
    # an optimum on the grid's edge is the range's, not the model's: pools keep gaining a little from their size
    edge = max(i, j) == len(n) - 1
    half = int(np.searchsorted(n, n[-1] / 2, side="right"))
    inner = np.nanmax(rpg[:half, :half]) if half >= 1 and np.isfinite(rpg[:half, :half]).any() else np.nan
    gain = 100 * (best / inner - 1) if edge and np.isfinite(inner) and inner > 0 else np.nan
    if short:
        text = f"Most efficient: {int(n[i])} prefill + {int(n[j])} decode instances, {num(best)} req/s per GPU"
        return text + (f" (grid edge: +{num(gain)}% over pools of at most {int(n[half - 1])})" if edge and
                       np.isfinite(gain) else " (grid edge)" if edge else "")
    text = (f"{int(n[i])} prefill + {int(n[j])} decode instances serve the most per GPU: {num(best)} req/s per GPU "
            f"({num(rate)} req/s on {int(np.asarray(grid['gpus'])[i, j]):,} GPUs), against "
            f"{s.workload.rate_per_s:g} req/s targeted.")
    if edge:
        text += (f" That is on the edge of the grid (up to {int(n[-1])} instances of each): larger pools queue more "
                 "efficiently and keep gaining a little per GPU"
                 + (f" ({num(gain)}% over the best with at most {int(n[half - 1])} of each), so the optimum is "
                    "the range's, not a sweet spot" if np.isfinite(gain) else "") + ".")
    return text


def spread_sentence(spread: pd.DataFrame) -> str:
    """Section 8: GPUs needed as prompt lengths spread around the same median."""
    parts = [f"{_gpus(r.gpus)} at σ = {r.prompt_sigma:g}" for r in spread.itertuples()]
    return "Spread-out prompts need more GPUs for the same TTFT target: " + ", ".join(parts) + "."


def queue_sentence(check: pd.DataFrame) -> str:
    """Section 9: how close each queue formula is to the simulation (largest |error| over loads)."""
    err = max_abs_error_by_model(check)
    exact = {k: v for k, v in err.items() if "exact" in k}
    approx = {k: v for k, v in err.items() if "exact" not in k}
    parts = []
    if exact:
        parts.append(f"the exact {' and '.join(k.split()[0] for k in exact)} formulas stay within "
                     f"{max(exact.values()):.1f}% of the simulation")
    if approx:
        parts.append(f"the Allen-Cunneen pool approximation within {max(approx.values()):.1f}%")
    return f"Over {check['requests'].iloc[0]:,.0f} simulated requests per point, " + ", and ".join(parts) + "."


def best_goodput_per_gpu(grid: dict) -> float:
    """The highest rate per GPU [req/s/GPU] over the goodput grid's pool sizes (section 7)."""
    return float(np.asarray(grid["rate_per_gpu"]).max())


__all__ += ['best_goodput_per_gpu']

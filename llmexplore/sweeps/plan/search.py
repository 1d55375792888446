"""The search: every configuration of a question priced (colocated and disaggregated rows), ordered, the
Pareto frontiers, the best, the Dask/process-pool split of one question, and a row's DeploymentConfig
(docs/models.md §8)."""

from __future__ import annotations

import functools
import math
import time
from dataclasses import fields, replace

import numpy as np
import pandas as pd

from ... import presets
from ...deployment import MODES, DeploymentConfig, SideConfig
from ...errors import SpecError
from ...models.serving import disagg as dg
from ...models.serving import capacity as pm
from ...models.queueing import at_stat
from .economics import COLUMNS as ECON_COLUMNS
from .economics import Economics
from .instances import (_ColocatedPoint, _Instance, _colocated_tables, _ep, _instances, _key, _label,
                        _seqs_cap, _spec_of)
from .question import RATE_POINTS, Question

__all__ = ["plan", "configurations", "frontiers", "best", "config_of", "question_tasks", "run_task",
           "order_table", "TABLE_COLUMNS"]


def _colocated_rows(q: Question, wl: dg.Workload, insts: list[_Instance], econ: Economics
                    ) -> tuple[list[dict], list[dict]]:
    rows, front = [], []
    for inst in insts:
        if inst.dep is None or inst.layout != "TP" or inst.reason:
            continue
        dep = inst.dep
        dec, t_mix = _colocated_tables(q.model, inst.gpu, q.runtime, dep.ranks, dep.weight_dtype, dep.kv_dtype,
                                       q.isl, q.osl, q.chunks, dep.moe_ep, _key(q, inst), inst.pp)
        lam_cap = float(np.max(dec.batches / (q.osl * np.asarray(dec.step_s))))  # pure-decode capacity
        lam = np.geomspace(lam_cap * 1e-4, lam_cap, RATE_POINTS)
        for i, chunk in enumerate(q.chunks):
            point = _ColocatedPoint(dec, t_mix[i], wl, chunk, q.stat == "mean", q.ttft_ms * 1e-3, q.tpot_ms * 1e-3)
            row, pts = _colocated_row(q, inst, point, lam, econ)
            rows.append(row)
            front += pts
    return rows, front


def _n_within(q: Question, gpus: int, usd_per_hour: float) -> int:
    """The most instances of ``gpus`` GPUs at ``usd_per_hour`` each within the question's GPU and $/hour budgets."""
    n = q.gpus // gpus
    if q.budget_usd_per_hour is not None and usd_per_hour > 0:
        n = min(n, int(math.floor(q.budget_usd_per_hour / usd_per_hour * (1 + 1e-12))))
    return n


def _colocated_row(q: Question, inst: _Instance, point: _ColocatedPoint, lam: np.ndarray, econ: Economics
                   ) -> tuple[dict, list]:
    """The planner's row of one colocated configuration (the most instances within the budget, or the fewest
    that serve the question's rate) and its frontier points over the rate grid ``lam``."""
    dep, chunk = inst.dep, point.chunk
    g = inst.gpus
    usd1 = econ.usd_per_hour(inst)
    n_max = _n_within(q, g, usd1)
    if n_max < 1 and g <= q.gpus:  # the price budget does not buy one instance
        base0 = dict(mode="colocated", decode_gpu=inst.gpu, weight_dtype=dep.weight_dtype, kv_dtype=dep.kv_dtype,
                     decode_ranks=dep.ranks, decode_layout="TP", decode_pp=inst.pp, speculative=inst.spec,
                     chunk_tokens=chunk, label=_label("colocated", dep.weight_dtype, dep.kv_dtype, None, inst, chunk,
                                                      len(q.gpu_types) > 1))
        return dict(base0, feasible=False, reason=f"one instance costs ${usd1:,.2f}/hour > the budget of "
                    f"${q.budget_usd_per_hour:,.2f}/hour"), []
    base = dict(mode="colocated", weight_dtype=dep.weight_dtype, kv_dtype=dep.kv_dtype,
                prefill_ranks=np.nan, prefill_layout="", prefill_ep=np.nan, prefill_pp=np.nan, decode_pp=inst.pp,
                decode_ranks=dep.ranks,
                decode_layout="TP", decode_ep=_ep(inst), speculative=inst.spec, decode_gpu=inst.gpu,
                chunk_tokens=chunk, label=_label("colocated", dep.weight_dtype, dep.kv_dtype, None, inst, chunk,
                                                 len(q.gpu_types) > 1))
    r, ttft, tpot = point.at(lam, n_max)
    ok = point.ok(ttft, tpot)
    good = np.isfinite(ttft) & (ttft <= point.T_ttft) & np.isfinite(tpot)
    front = [dict(base, tokens_per_s_per_user=1.0 / tpot[j], tokens_per_s_per_gpu=lam[j] * q.osl / g,
                  usd_per_mtok_total=usd1 / (3600.0 * lam[j] * (q.isl + q.osl)) * 1e6 if usd1 else np.nan)
             for j in np.nonzero(good)[0]]
    if not ok.any():
        why = _colocated_reason(point.dec, point.t_mix, r, ttft, tpot, point.T_ttft, point.T_tpot)
        return dict(base, feasible=False, reason=why), front
    lam_star = point.lam_star(lam, n_max, ok)
    if q.rate_per_s is None:
        n_c = n_max
        rate = n_c * lam_star
    else:  # fewer instances see burstier arrivals: settle n with its own round-robin smoothing
        n_c = math.ceil(q.rate_per_s / lam_star * (1 - 1e-12))
        for _ in range(4):
            if n_c < 1 or n_c > n_max:
                break
            if point.lam_star(lam, n_c, ok if n_c == n_max else None) * n_c >= q.rate_per_s * (1 - 1e-12):
                break
            n_c += 1
        rate = q.rate_per_s
    if n_c < 1 or n_c > n_max:
        over = (f"over the budget of {q.gpus} GPUs" if n_c * g > q.gpus
                else f"${n_c * usd1:,.2f}/hour, over the budget of ${q.budget_usd_per_hour:,.2f}/hour")
        return dict(base, feasible=False, instances=n_c, gpus=n_c * g,
                    reason=f"needs {n_c} instances of {g} GPUs, {over}"
                    if n_c > n_max else f"one instance needs {g} GPUs > {q.gpus}"), front
    r, ttft, tpot = point.at(np.array([rate / n_c]), n_c)
    mb = float(r["decode_batch"][0])
    share_in = rate / n_c * float(r["prefill_service_s"][0])  # the share of an instance's time in prefill
    cost = econ.columns(rate, [(inst, n_c)], inst, inst, mb, _spec_of(q.model, _key(q, inst)), share_in)
    return dict(base, feasible=True, reason="", n_prefill=0, n_decode=n_c, gpus=n_c * g,
                rate_per_s=rate, ttft_ms=float(ttft[0]) * 1e3, tpot_ms=float(tpot[0]) * 1e3,
                tpot_mean_ms=float(r["tpot_mean_s"][0]) * 1e3, decode_batch=mb,
                max_num_seqs=_seqs_cap(mb, point.dec.batches[-1]),
                capacity_per_s=lam_star * n_max, prefill_service_ms=float(r["prefill_service_s"][0]) * 1e3,
                **cost), front


def _colocated_reason(dec, t_mix, r, ttft, tpot, T_ttft, T_tpot) -> str:
    if float(dec.step_s[0]) > T_tpot:
        return f"a decode step at batch 1 takes {float(dec.step_s[0]) * 1e3:.3g} ms > the TPOT target"
    if float(np.nanmin(np.where(np.isfinite(ttft), ttft, np.inf))) > T_ttft:
        return (f"the prompt alone takes {float(r['prefill_service_s'][0]) * 1e3:.4g} ms in chunks > the TTFT "
                "target")
    return "no rate meets both targets (mixed iterations push TPOT over its target)"


def _disagg_rows(q: Question, wl: dg.Workload, insts: list[_Instance], econ: Economics
                 ) -> tuple[list[dict], list[dict]]:
    T_ttft, T_tpot = q.ttft_ms * 1e-3, q.tpot_ms * 1e-3
    mixed = len(q.gpu_types) > 1
    pre = [i for i in insts if i.dep is not None and i.layout == "TP" and not i.reason and not i.spec]
    dec = [i for i in insts if i.dep is not None and not i.reason]
    if not pre or not dec:
        return [], []
    pairs = [(p, d) for p in pre for d in dec
             if (p.dep.weight_dtype, p.dep.kv_dtype) == (d.dep.weight_dtype, d.dep.kv_dtype)
             and p.gpus + d.gpus <= q.gpus]
    if not pairs:
        return [], []
    k = len(pairs)
    busy_p, busy_d, exposed = np.zeros(k), np.zeros(k), np.zeros(k)
    links = {}
    for j, (p, d) in enumerate(pairs):
        link = links.setdefault((p.gpu, d.gpu), presets.link(q.link_name(p.gpu, d.gpu)))
        lat = p.prefill_s + p.prefill_delay_s  # the KV streams out while the whole prompt's prefill runs
        ps = dg.PrefillSide(p.dep, p.prefill_s, np.array([p.prefill_s]), np.array([1.0]), p.pp,
                            np.array([lat]) if p.pp > 1 else np.zeros(0))
        ds = dg.DecodeSide(d.dep, int(d.batches[-1]), d.batches, d.step_s, d.pp)
        x = dg.transfer_side(ps, ds, link, wl)
        # a pipeline's stages each send (receive) their own layers' KV on their own NICs (transfer_side)
        busy_p[j], exposed[j] = x["link_busy_s"], x["exposed_s"] + p.prefill_delay_s
        busy_d[j] = x["link_busy_decode_s"]
    S = np.array([p.prefill_s for p, _ in pairs])
    rp = np.array([p.gpus for p, _ in pairs], float)
    rd = np.array([d.gpus for _, d in pairs], float)
    n_max = max(1, q.gpus // int(min(rp.min(), rd.min())))
    # pairs sharing a prefill instance and link costs share the prefill pool's rates: solve each once
    key = np.stack([S, busy_p, exposed], axis=1)
    uniq, inv = np.unique(key, axis=0, return_inverse=True)
    rate_p = pm.prefill_pool_rates(q.stat, T_ttft, uniq[:, 0], uniq[:, 1], uniq[:, 2], n_max)[inv.ravel()]
    rate_p = np.where(np.arange(1, n_max + 1)[None, :] * rp[:, None] <= q.gpus, rate_p, 0.0)
    d_rate = {}
    for _, d in pairs:
        if id(d) not in d_rate:
            d_rate[id(d)] = pm.decode_instance_rate(q.stat, T_tpot, d.batches, d.step_s, q.osl)
    rate_d1 = np.array([d_rate[id(d)]["rate_per_s"] for _, d in pairs])
    rate_link = pm.inbound_link_rates(q.stat, T_ttft - S - exposed, busy_d, n_max)
    budget_usd = math.inf if q.budget_usd_per_hour is None or econ.prices is None else q.budget_usd_per_hour
    rows, front = [], []
    for j, (p, d) in enumerate(pairs):
        usd_p, usd_d = econ.usd_per_hour(p), econ.usd_per_hour(d)
        base = dict(mode="disaggregated", weight_dtype=d.dep.weight_dtype, kv_dtype=d.dep.kv_dtype,
                    prefill_gpu=p.gpu, decode_gpu=d.gpu,
                    prefill_ranks=p.dep.ranks, prefill_layout="TP", prefill_ep=_ep(p), prefill_pp=p.pp,
                    decode_pp=d.pp, decode_ranks=d.dep.ranks,
                    decode_ep=_ep(d), speculative=d.spec,
                    decode_layout=d.layout, chunk_tokens=np.nan, link=links[(p.gpu, d.gpu)].name,
                    label=_label("disaggregated", d.dep.weight_dtype, d.dep.kv_dtype, p, d, mixed=mixed))
        dr = d_rate[id(d)]
        # frontier: continuous P:D ratio at the best prefill rate per instance within the budget
        per_inst_p = float(np.max(rate_p[j] / np.arange(1, n_max + 1)))
        if per_inst_p > 0:
            m = d.batches
            bstat = m + at_stat.z_of(q.stat) * np.sqrt(m)
            fits = bstat <= d.batches[-1]
            t_m = np.interp(m, d.batches, np.maximum.accumulate(d.step_s))
            t_stat = np.interp(bstat, d.batches, np.maximum.accumulate(d.step_s))
            lam_d = m / (q.osl * t_m)
            y = q.osl / (p.gpus / per_inst_p + d.gpus / lam_d)
            usd_req = (usd_p / per_inst_p + usd_d / lam_d) / 3600.0  # $ per request, continuous pool ratio
            usd_m = usd_req / (q.isl + q.osl) * 1e6 if usd_p else np.full(lam_d.shape, np.nan)
            front += [dict(base, tokens_per_s_per_user=1.0 / t_stat[i], tokens_per_s_per_gpu=y[i],
                           usd_per_mtok_total=usd_m[i]) for i in np.nonzero(fits)[0]]
        # highest rate then fewest GPUs (no rate given), or fewest GPUs at the rate: pm.best_pool_pair
        pick = pm.best_pool_pair(rate_p[j], rate_d1[j], rate_link[j], rp[j], rd[j], q.gpus, q.rate_per_s,
                                 usd_p=usd_p, usd_d=usd_d, budget_usd=budget_usd,
                                 by_cost=q.objective == "usd_per_mtok")
        if pick["n_p"] == 0:
            within = f"{q.gpus} GPUs" + (f" and ${budget_usd:,.2f}/hour" if math.isfinite(budget_usd) else "")
            if usd_p + usd_d > budget_usd:
                why = (f"one prefill and one decode instance cost ${usd_p + usd_d:,.2f}/hour > the budget of "
                       f"${budget_usd:,.2f}/hour")
            elif pick["max_rate"] <= 0:
                why = _disagg_reason(p, d, dr, rate_p[j], rate_link[j], T_ttft, exposed[j])
            else:
                why = f"at most {pick['max_rate']:.3g} req/s within {within} < {q.rate_per_s:g} req/s"
            rows.append(dict(base, feasible=False, reason=why))
            continue
        n_p, n_d = pick["n_p"], pick["n_d"]
        lam = pick["rate"] if q.rate_per_s is None else q.rate_per_s
        joint = functools.partial(_joint_ttft, q.stat, S[j], busy_p[j], busy_d[j], exposed[j])
        ttft = joint(lam, n_p, n_d)
        if float(ttft) > T_ttft * (1 + 1e-9):
            # the pool pair was chosen with the prefill pool's wait and the decode NICs' wait each within the
            # target alone; together they can miss it: settle the rate (or, with a rate, the pools) jointly
            fixed = _settle_joint(q, joint, lam, n_p, n_d, T_ttft, rp[j], rd[j], usd_p, usd_d, budget_usd,
                                  rate_d1[j])
            if fixed is None:
                rows.append(dict(base, feasible=False, reason=(
                    f"the prefill queue and the decode NICs' queue together exceed the TTFT target at "
                    f"{q.rate_per_s:g} req/s within {q.gpus} GPUs")))
                continue
            lam, n_p, n_d = fixed
            pick = dict(pick, gpus=n_p * rp[j] + n_d * rd[j])
            ttft = joint(lam, n_p, n_d)
        mb = dg.first_fixed_point(d.batches, d.step_s, lam / n_d, q.osl)
        mb = float(mb) if np.isfinite(mb) else dr["mean_batch"]
        bstat = mb + at_stat.z_of(q.stat) * math.sqrt(mb)
        tpot = float(np.interp(max(bstat, 1.0), d.batches, np.maximum.accumulate(d.step_s)))
        cost = econ.columns(lam, [(p, n_p), (d, n_d)], p, d, mb, _spec_of(q.model, _key(q, d)))
        rows.append(dict(base, feasible=True, reason="", n_prefill=n_p, n_decode=n_d, gpus=int(pick["gpus"]),
                         rate_per_s=lam, ttft_ms=float(ttft) * 1e3, tpot_ms=tpot * 1e3,
                         tpot_mean_ms=float(np.interp(max(mb, 1.0), d.batches, d.step_s)) * 1e3,
                         decode_batch=mb, max_num_seqs=_seqs_cap(mb, float(d.batches[-1])),
                         capacity_per_s=pick["max_rate"], transfer_exposed_ms=exposed[j] * 1e3,
                         prefill_service_ms=S[j] * 1e3, **cost))
    return rows, front


def _joint_ttft(stat, S, busy_p, busy_d, exposed, lam, n_p, n_d):
    """TTFT at ``stat`` of a pool pair [s]: the prefill pool's wait, the prompt, the slower of the two NICs' waits
    (the prefill side's sends, the decode side's receives) and the exposed transfer. Broadcasts over ``lam``."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        return (at_stat.pool_wait(stat, lam, S, n_p) + S
                + np.maximum(at_stat.link_wait(stat, lam / n_p, busy_p), at_stat.link_wait(stat, lam / n_d, busy_d))
                + exposed)


def _settle_joint(q, joint, lam, n_p, n_d, T, g_p, g_d, usd_p, usd_d, budget_usd, rate_d1):
    """(rate, n_p, n_d) within the joint TTFT target: without a question rate, the highest rate <= ``lam`` the pair
    sustains (TTFT grows with the rate); with one, the cheapest pair of at least as many instances of each pool
    that serves it within the GPU and $/hour budgets. None when there is none."""
    if q.rate_per_s is None:
        grid = lam * np.linspace(1.0, 0.0, 257)[:-1]
        ok = np.asarray(joint(grid, n_p, n_d)) <= T
        return (float(grid[np.argmax(ok)]), n_p, n_d) if ok.any() else None
    best = None
    for a in range(n_p, int(q.gpus // g_p) + 1):
        for b in range(n_d, int((q.gpus - a * g_p) // g_d) + 1):
            cost = a * usd_p + b * usd_d
            if cost > budget_usd or b * rate_d1 < lam:
                continue
            if float(joint(lam, a, b)) <= T:
                key = (cost if q.objective == "usd_per_mtok" else a * g_p + b * g_d, a)
                if best is None or key < best[0]:
                    best = (key, (lam, a, b))
                break  # more decode instances only cost more
    return None if best is None else best[1]


def _disagg_reason(p, d, dr, rate_p, rate_link, T_ttft, exposed) -> str:
    if p.prefill_s + exposed > T_ttft:
        lat, xfer = p.prefill_s + p.prefill_delay_s, exposed - p.prefill_delay_s
        return (f"prefill ({lat * 1e3:.4g} ms) + exposed transfer ({xfer * 1e3:.3g} ms) exceed the TTFT target")
    if dr["rate_per_s"] <= 0:
        return f"a decode step at batch 1 takes {float(d.step_s[0]) * 1e3:.3g} ms > the TPOT target"
    if np.max(rate_link) <= 0:
        return "the decode instance's NICs cannot take the KV within the TTFT slack"
    return "no pool pair within the budget meets both targets"


#: a row of pools routed by length (:mod:`.routed`): the router's threshold and the long requests' pool
ROUTED_COLUMNS = ["route_prompt_tokens", "n_long", "long_ranks", "long_pp", "long_ep", "long_gpu", "long_chunk_tokens",
                  "long_max_num_seqs", "long_speculative"]
TABLE_COLUMNS = ["mode", "label", "weight_dtype", "kv_dtype", "prefill_ranks", "prefill_layout", "prefill_ep",
                 "decode_ranks", "decode_layout", "decode_ep", "prefill_pp", "decode_pp", "speculative", "chunk_tokens",
                 "link", "n_prefill", "n_decode", "gpus", "rate_per_s",
                 "tokens_per_s_per_gpu", "tokens_per_s_per_user", "ttft_ms", "tpot_ms", "tpot_mean_ms",
                 "decode_batch", "max_num_seqs", "capacity_per_s", "transfer_exposed_ms", "prefill_service_ms",
                 *ECON_COLUMNS,
                 *ROUTED_COLUMNS, "feasible", "reason"]


def configurations(q: Question) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(every configuration's row, frontier candidate points). Rows: mode, label, dtypes, each side's ranks
    and layout, chunk_tokens, n_prefill / n_decode instances, gpus, rate_per_s, tokens_per_s_per_gpu,
    tokens_per_s_per_user, ttft_ms and tpot_ms at the question's statistic, tpot_mean_ms, decode_batch,
    max_num_seqs, capacity_per_s (highest rate within the budget), feasible and reason."""
    wl = q.workload
    insts = _instances(q, wl)
    econ = Economics.of(q)
    rows, pts = [], []
    if "colocated" in q.modes:
        r, f = _colocated_rows(q, wl, insts, econ)
        rows += r
        pts += f
    if "disaggregated" in q.modes:
        r, f = _disagg_rows(q, wl, insts, econ)
        rows += r
        pts += f
    if q.long_share is not None:  # a length mix: unrouted pools must prefill a long prompt in time
        from .routed import long_prompt_reason, routed_rows

        for r in rows:
            why = long_prompt_reason(q, r) if r.get("feasible") else ""
            if why:
                r.update(feasible=False, reason=why)
        if "colocated" in q.modes:  # two colocated pools, requests routed by length
            rows += routed_rows(q)
    for i in insts:  # a speculative twin that failed as its plain instance did is not listed twice
        if i.reason and (not i.spec or i.spec in i.reason):
            rows.append(dict(mode="any", label=i.reason.split(":")[0], feasible=False, reason=i.reason,
                             decode_layout=i.layout, speculative=i.spec))
    df = pd.DataFrame(rows).reindex(columns=TABLE_COLUMNS)
    df["feasible"] = df["feasible"].fillna(False).astype(bool)
    _text_columns(df)
    ok = df["feasible"]
    df.loc[ok, "tokens_per_s_per_gpu"] = df.loc[ok, "rate_per_s"] * q.osl / df.loc[ok, "gpus"]
    df.loc[ok, "tokens_per_s_per_user"] = 1e3 / df.loc[ok, "tpot_ms"]
    return order_table(df, q), pd.DataFrame(pts)


def _text_columns(df: pd.DataFrame) -> None:
    """Text columns as text: '' where a row has none (a colocated row's prefill GPU), never NaN."""
    for c in ("speculative", "long_speculative", "long_gpu", "prefill_gpu", "decode_gpu", "price_dates"):
        df[c] = df[c].astype(object).fillna("").astype(str)


def order_table(df: pd.DataFrame, q: Question) -> pd.DataFrame:
    """Feasible first, best objective first; ties by tokens/s per user, then label (a total order, so a
    sweep split into tasks and merged gives the same table)."""
    first = {"usd_per_mtok": ("usd_per_mtok_total", True), "j_per_token": ("j_per_token", True)}.get(q.objective)
    if first is not None:
        keys, asc = ["feasible", first[0], "tokens_per_s_per_user", "label"], [False, first[1], False, True]
    elif q.rate_per_s is None:
        keys, asc = ["feasible", "tokens_per_s_per_gpu", "tokens_per_s_per_user", "label"], [False, False, False, True]
    else:
        keys, asc = ["feasible", "gpus", "tokens_per_s_per_user", "label"], [False, True, False, True]
    return df.sort_values(keys, ascending=asc, kind="mergesort", na_position="last").reset_index(drop=True)


def frontiers(points: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Pareto frontier of tokens/s/GPU against tokens/s/user per mode (points not dominated in both)."""
    out = {}
    for mode in MODES:
        p = points[points["mode"] == mode] if len(points) else points
        if not len(p):
            out[mode] = pd.DataFrame(columns=["tokens_per_s_per_user", "tokens_per_s_per_gpu", "label"])
            continue
        idx = pm.pareto_front(p["tokens_per_s_per_user"].to_numpy(), p["tokens_per_s_per_gpu"].to_numpy())
        out[mode] = p.iloc[idx][["tokens_per_s_per_user", "tokens_per_s_per_gpu", "label"]].reset_index(drop=True)
    return out


def best(table: pd.DataFrame, q: Question) -> dict:
    """The best feasible configuration, the runner-up (the best configuration with a different label) and
    the margin between them in the objective [%]: tokens/s per GPU (no rate) or GPUs (with a rate)."""
    ok = table[table["feasible"]]
    if not len(ok):
        return {"best": None, "runner_up": None, "margin_pct": np.nan}
    b = ok.iloc[0].to_dict()
    rest = ok[ok["label"] != b["label"]]
    r = rest.iloc[0].to_dict() if len(rest) else None
    if r is None:
        margin = np.nan
    elif q.objective == "usd_per_mtok":
        margin = 100.0 * (r["usd_per_mtok_total"] / b["usd_per_mtok_total"] - 1.0)
    elif q.objective == "j_per_token":
        margin = 100.0 * (r["j_per_token"] / b["j_per_token"] - 1.0)
    elif q.rate_per_s is None:
        margin = 100.0 * (b["tokens_per_s_per_gpu"] / r["tokens_per_s_per_gpu"] - 1.0)
    else:
        margin = 100.0 * (r["gpus"] / b["gpus"] - 1.0)
    return {"best": b, "runner_up": r, "margin_pct": margin}


def question_tasks(q: Question) -> list[dict]:
    """The question split into independent tasks, one per (weight dtype, KV dtype): the two sides of a
    disaggregated configuration share their dtypes, so no configuration spans two tasks."""
    base = {f.name: getattr(q, f.name) for f in fields(q)}
    return [{**base, "weight_dtypes": [wd], "kv_dtypes": [kd], "modes": list(q.modes), "chunks": list(q.chunks)}
            for wd, kd in q.dtype_options()]


def run_task(task: dict) -> list[dict]:
    """One task of :func:`question_tasks` (a picklable top-level function for process pools and Dask): its
    configuration rows (``kind`` "config") and frontier points (``kind`` "point")."""
    t = {k: v for k, v in task.items() if k != "task_id"}
    q = Question(**{**t, "weight_dtypes": tuple(t["weight_dtypes"]), "kv_dtypes": tuple(t["kv_dtypes"]),
                    "modes": tuple(t["modes"]), "chunks": tuple(t["chunks"])})
    table, pts = configurations(q)
    return ([{"kind": "config", **r} for r in table.to_dict("records")]
            + [{"kind": "point", **r} for r in pts.to_dict("records")])


def _merged(q: Question, scheduler, workers) -> tuple[pd.DataFrame, pd.DataFrame]:
    from ..distributed import run_sweep

    try:
        rows = run_sweep(run_task, question_tasks(q), scheduler=scheduler, workers=workers)
    except (OSError, TimeoutError) as exc:  # an unreachable cluster: say which, not a traceback
        raise SpecError(f"scheduler {scheduler!r} cannot be reached: {str(exc).splitlines()[0]}") from None
    if "error" in rows and rows["error"].fillna("").astype(str).str.len().gt(0).any():
        bad = rows.loc[rows["error"].fillna("").astype(str).str.len() > 0, "error"].iloc[0]
        raise SpecError(f"a planning task failed: {bad}")
    conf = rows[rows["kind"] == "config"].drop(columns=[c for c in rows if c in ("kind", "task_id", "error")])
    pts = rows[rows["kind"] == "point"].reindex(columns=["mode", "label", "tokens_per_s_per_user",
                                                         "tokens_per_s_per_gpu", "usd_per_mtok_total"])
    conf = conf.reindex(columns=TABLE_COLUMNS)
    conf["feasible"] = conf["feasible"].astype(bool)
    _text_columns(conf)
    return order_table(conf, q), pts.reset_index(drop=True)


def _with_rows(pts: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """The frontier candidates and every feasible row's own operating point: the points sample each
    configuration on a rate grid, and a row's rate (the highest within the targets) falls between grid rates,
    so without it a frontier would sit below the table's best."""
    cols = ["mode", "label", "tokens_per_s_per_user", "tokens_per_s_per_gpu", "usd_per_mtok_total"]
    ok = table.loc[table["feasible"], cols]
    if not len(ok):
        return pts
    return pd.concat([pts.reindex(columns=cols), ok], ignore_index=True) if len(pts) else ok.reset_index(drop=True)


def config_of(row: dict, q: Question) -> DeploymentConfig:
    """The :class:`~llmexplore.deployment.DeploymentConfig` of one table row (what :mod:`llmexplore.launch` and
    :func:`simulate_config` read; its ``to_json`` is the ``config`` of ``plan --json``): model, gpu, mode,
    dtypes, the KV link and one side per role (instances, ranks, layout, EP size, max_num_seqs, chunk budget,
    MoE dispatch, and the speculative decoding of a decoding side)."""
    m = presets.model(q.model)
    spec = q.spec() if str(row.get("speculative") or "") else None
    route = row.get("route_prompt_tokens")
    if row["mode"] == "colocated" and route is not None and route == route:  # two pools routed by length
        types = {str(row.get("decode_gpu") or q.gpu), str(row.get("long_gpu") or q.gpu)}
        short = _side_of(row, m, "colocated", row["n_decode"], row["decode_ranks"], row["decode_layout"],
                         row["chunk_tokens"], row.get("decode_ep"), spec, row.get("decode_pp"))
        long_spec = q.spec() if str(row.get("long_speculative") or "") else None
        longer = _side_of({"max_num_seqs": row["long_max_num_seqs"]}, m, "colocated", row["n_long"],
                          row["long_ranks"], "TP", row["long_chunk_tokens"], row.get("long_ep"), long_spec,
                          row.get("long_pp"), str(row["long_gpu"]) if len(types) > 1 else None)
        sides = (replace(short, max_prompt_tokens=int(route)), longer)
    elif row["mode"] == "colocated":
        sides = (_side_of(row, m, "colocated", row["n_decode"], row["decode_ranks"], row["decode_layout"],
                          row["chunk_tokens"], row.get("decode_ep"), spec, row.get("decode_pp")),)
    else:
        pg = str(row.get("prefill_gpu") or "") or q.gpu
        dg_ = str(row.get("decode_gpu") or "") or q.gpu
        sides = (_side_of(row, m, "prefill", row["n_prefill"], row["prefill_ranks"], row["prefill_layout"], None,
                          row.get("prefill_ep"), None, row.get("prefill_pp"), pg if pg != dg_ else None),
                 _side_of(row, m, "decode", row["n_decode"], row["decode_ranks"], row["decode_layout"], None,
                          row.get("decode_ep"), spec, row.get("decode_pp")))
    gpu = str(row.get("decode_gpu") or "") or q.gpu
    return DeploymentConfig(model=q.model, gpu=gpu, mode=row["mode"], weight_dtype=row["weight_dtype"],
                            kv_dtype=row["kv_dtype"], sides=sides,
                            link=row.get("link") if row["mode"] != "colocated" else None)


def _side_of(row: dict, m, role: str, n, ranks, layout: str, chunk, ep, spec=None, pp=None, gpu=None) -> SideConfig:
    """One side of a table row: a row's EP size, or (MoE without one) all of its ranks; dispatch all-to-all
    for an MoE DPA instance spanning nodes (the search prices it so)."""
    ep = int(ep) if m.is_moe and ep == ep and ep is not None else (int(ranks) if m.is_moe else 1)
    return SideConfig(role=role, instances=int(n), ranks=int(ranks), layout=layout, ep=ep,
                      max_num_seqs=int(row["max_num_seqs"]) if role != "prefill" else 1,
                      chunk_tokens=None if chunk is None or chunk != chunk else int(chunk),
                      moe_dispatch="alltoall" if m.is_moe and layout == "DPA" and int(ranks) > 8 else "gather",
                      speculative=spec, pp=1 if pp is None or pp != pp else int(pp), gpu=gpu)


def plan(q: Question | None = None, *, scheduler=None, workers: int | None = None, **kw) -> dict:
    """Answer one planning question (a :class:`Question` or its fields as keywords).

    ``scheduler`` (a Dask scheduler address) or ``workers`` (> 1: a local process pool) split the search into
    :func:`question_tasks` and merge them; the answer is the same as in-process.

    Returns ``question``, ``table`` (every configuration), ``frontiers`` ({mode: frontier}), ``best``,
    ``runner_up``, ``margin_pct``, ``best_mode``, ``best_by_mode`` ({mode: row}), ``disagg_over_agg_ratio``
    (best disaggregated tokens/s/GPU over best colocated) and ``seconds`` (time taken)."""
    t0 = time.perf_counter()
    q = Question(**kw) if q is None else (replace(q, **kw) if kw else q)
    if scheduler is None and (workers is None or workers <= 1):
        table, pts = configurations(q)
    else:
        table, pts = _merged(q, scheduler, workers)
    pts = _with_rows(pts, table)
    fr = frontiers(pts)
    out = {"question": q, "table": table, "frontiers": fr, "points": pts}
    out.update(best(table, q))
    by_mode = {}
    for mode in MODES:
        ok = table[table["feasible"] & (table["mode"] == mode)]
        by_mode[mode] = ok.iloc[0].to_dict() if len(ok) else None
    out["best_by_mode"] = by_mode
    out["best_mode"] = out["best"]["mode"] if out["best"] else None
    c, d = by_mode["colocated"], by_mode["disaggregated"]
    out["disagg_over_agg_ratio"] = (d["tokens_per_s_per_gpu"] / c["tokens_per_s_per_gpu"]
                                    if c is not None and d is not None else np.nan)
    out["seconds"] = time.perf_counter() - t0
    return out

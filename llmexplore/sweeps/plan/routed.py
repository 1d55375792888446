"""Colocated pools routed by length (issue 22 §3; docs/models.md §8.7): a length mix (``Question.long_share`` of
the requests with ``long_isl`` prompt tokens, the rest shorter, the question's mean lengths kept) served by two
colocated pools, possibly of different GPU types, a router sending prompts up to the short requests' length to
one and longer prompts to the other.

Each pool is a colocated configuration of the planner's search, priced for its own class (its lengths, its share
of the rate). The search keeps, per class, the configurations that need the fewest GPUs or dollars per unit of
rate (:data:`KEEP` of each), and for every pair of them the pool sizes within the GPU and $/hour budgets: without
a rate the highest total rate, with one the fewest GPUs (or the lowest $/hour) that serve it. Each class's rate
per instance is settled at its own pool size (fewer instances see burstier arrivals), as the colocated rows do.
Not simulated: the serving simulator runs one pool per configuration.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from .economics import Economics
from .question import RATE_POINTS, Question

__all__ = ["routed_rows", "long_prompt_reason", "KEEP"]

#: configurations kept per class and criterion (GPUs per unit rate, dollars per unit rate) before pairing
KEEP = 6


def _class_question(q: Question, isl: float, osl: float) -> Question:
    return replace(q, isl=max(1, int(round(isl))), osl=max(1, int(round(osl))), long_share=None, long_isl=None,
                   long_osl=None, rate_per_s=None, modes=("colocated",))


def _candidates(q: Question, search) -> list[dict]:
    """Every feasible colocated configuration of a class question: its instance, point, rate grid and the
    highest rate per instance at the budget's pool size (the screening rate)."""
    wl = q.workload
    out = []
    insts = [search._instance(q.model, gpu, q.runtime, ranks, "TP", wd, kd, q.isl, q.osl, ep, key, pp)
             for gpu in q.gpu_types for wd, kd in q.dtype_options()
             for ranks, layout, ep, pp in search._rank_options(q, gpu) if layout == "TP"
             for key in (search._spec_keys(q) if pp == 1 else [None])]
    for inst in insts:
        if inst.dep is None or inst.reason:
            continue
        dep = inst.dep
        dec, t_mix = search._colocated_tables(q.model, inst.gpu, q.runtime, dep.ranks, dep.weight_dtype, dep.kv_dtype,
                                              q.isl, q.osl, q.chunks, dep.moe_ep, search._key(q, inst), inst.pp)
        lam_cap = float(np.max(dec.batches / (q.osl * np.asarray(dec.step_s))))
        lam = np.geomspace(lam_cap * 1e-4, lam_cap, RATE_POINTS)
        n_max = q.gpus // inst.gpus
        if n_max < 1:
            continue
        for i, chunk in enumerate(q.chunks):
            point = search._ColocatedPoint(dec, t_mix[i], wl, chunk, q.stat == "mean", q.ttft_ms * 1e-3,
                                           q.tpot_ms * 1e-3)
            r = point.lam_star(lam, n_max)
            if r > 0:
                out.append(dict(inst=inst, point=point, lam=lam, chunk=chunk, rate1=r, q=q))
    return out


def _kept(cands: list[dict], econ: Economics) -> list[dict]:
    by_gpu = sorted(cands, key=lambda c: c["inst"].gpus / c["rate1"])[:KEEP]
    if econ.prices is None:
        return by_gpu
    by_usd = sorted(cands, key=lambda c: econ.usd_per_hour(c["inst"]) / c["rate1"])[:KEEP]
    return list({id(c): c for c in by_gpu + by_usd}.values())


def _instances_for(c: dict, rate: float) -> int | None:
    """Fewest instances of a candidate that serve ``rate`` [req/s] within the targets (settled at their own pool
    size, as :func:`.search._colocated_row` does); None beyond the budget."""
    n_max = c["q"].gpus // c["inst"].gpus
    n = max(1, math.ceil(rate / c["rate1"] * (1 - 1e-12)))
    for _ in range(6):
        if n > n_max:
            return None
        if c["point"].lam_star(c["lam"], n) * n >= rate * (1 - 1e-12):
            return n
        n += 1
    return None


def _best_split(q: Question, s: dict, l: dict, f: float, econ: Economics) -> tuple | None:
    """(rate, n_short, n_long) of one pair of candidates: the highest total rate within the budgets (no question
    rate) or the question's rate with the fewest GPUs (lowest $/hour for the cost objective); None if none."""
    gs, gl = s["inst"].gpus, l["inst"].gpus
    us, ul = econ.usd_per_hour(s["inst"]), econ.usd_per_hour(l["inst"])
    budget = math.inf if q.budget_usd_per_hour is None or econ.prices is None else q.budget_usd_per_hour
    if q.rate_per_s is not None:
        ns, nl = _instances_for(s, (1 - f) * q.rate_per_s), _instances_for(l, f * q.rate_per_s)
        if ns is None or nl is None or ns * gs + nl * gl > q.gpus or ns * us + nl * ul > budget * (1 + 1e-12):
            return None
        return q.rate_per_s, ns, nl
    n_s = np.arange(1, q.gpus // gs + 1)
    room = np.floor((q.gpus - n_s * gs) / gl + 1e-9)
    if math.isfinite(budget) and ul > 0:
        room = np.minimum(room, np.floor((budget - n_s * us) / ul * (1 + 1e-12)))
    ok = room >= 1
    if not ok.any():
        return None
    lam = np.where(ok, np.minimum(n_s * s["rate1"] / (1 - f), room * l["rate1"] / f), 0.0)
    k = int(np.argmax(lam))
    ns = int(n_s[k])
    nl = min(int(room[k]), max(1, math.ceil(f * lam[k] / l["rate1"] * (1 - 1e-12))))  # no idle long instances
    # settle each pool's rate per instance at its own size (burstier arrivals to fewer instances)
    rate = min(ns * s["point"].lam_star(s["lam"], ns) / (1 - f), nl * l["point"].lam_star(l["lam"], nl) / f)
    return (rate, ns, nl) if rate > 0 else None


def _label(q: Question, s: dict, l: dict) -> str:
    """'colocated routed S:TP2 chunk 2048 L:TP4 chunk 4096 fp8/fp8' (with ' on GPU' when the question mixes types)."""
    from . import instances as search

    mixed = len(q.gpu_types) > 1
    dep = s["inst"].dep
    return (f"colocated routed S:{search._shape(s['inst'], mixed)} chunk {s['chunk']} "
            f"L:{search._shape(l['inst'], mixed)} chunk {l['chunk']} {dep.weight_dtype}/{dep.kv_dtype}")


def _row(q: Question, s: dict, l: dict, split: tuple, f: float, econs: tuple) -> dict:
    from . import instances as search

    rate, ns, nl = split
    out = {}
    ttft, tpot, batch = [], [], []
    for c, n, share, e in ((s, ns, 1 - f, econs[0]), (l, nl, f, econs[1])):
        r, t1, t2 = c["point"].at(np.array([share * rate / n]), n)
        ttft.append(float(t1[0]))
        tpot.append(float(t2[0]))
        batch.append(float(r["decode_batch"][0]))
        c["econ"] = e.columns(share * rate, [(c["inst"], n)], c["inst"], c["inst"], batch[-1],
                              search._spec_of(q.model, search._key(q, c["inst"])),
                              share * rate / n * float(r["prefill_service_s"][0]))
    out.update(_combined(q, s["econ"], l["econ"], rate, f))
    inst_s, inst_l = s["inst"], l["inst"]
    dep = inst_s.dep
    seqs = [search._seqs_cap(b, c["point"].dec.batches[-1]) for b, c in zip(batch, (s, l))]
    return dict(mode="colocated", weight_dtype=dep.weight_dtype, kv_dtype=dep.kv_dtype, prefill_ranks=np.nan,
                prefill_layout="", prefill_ep=np.nan, prefill_pp=np.nan, decode_pp=inst_s.pp, decode_ranks=dep.ranks,
                decode_layout="TP", decode_ep=search._ep(inst_s), speculative=inst_s.spec,
                chunk_tokens=s["chunk"], label=_label(q, s, l), feasible=True, reason="", n_prefill=0,
                n_decode=ns, gpus=ns * inst_s.gpus + nl * inst_l.gpus, rate_per_s=rate, ttft_ms=max(ttft) * 1e3,
                tpot_ms=max(tpot) * 1e3, tpot_mean_ms=np.nan, decode_batch=batch[0], max_num_seqs=seqs[0],
                capacity_per_s=rate if q.rate_per_s is None else np.nan,
                route_prompt_tokens=int(s["q"].isl), n_long=nl, long_ranks=inst_l.dep.ranks, long_pp=inst_l.pp,
                long_ep=search._ep(inst_l), long_gpu=inst_l.gpu, long_chunk_tokens=l["chunk"],
                long_max_num_seqs=seqs[1], long_speculative=inst_l.spec, **out)


def _combined(q: Question, es: dict, el: dict, rate: float, f: float) -> dict:
    """The deployment's economics from each pool's (each priced for its own class at its own rate): dollars and
    energy add up; per token they are over the mean lengths' tokens (the question's isl and osl)."""
    out = {"prefill_gpu": "", "decode_gpu": es["decode_gpu"], "price_dates": "; ".join(
        dict.fromkeys(x for x in (es["price_dates"], el["price_dates"]) if x))}
    (si, so), (li, lo) = q.classes()
    if es["usd_per_hour"] == es["usd_per_hour"]:
        usd = es["usd_per_hour"] + el["usd_per_hour"]
        usd_in = sum(e["usd_per_mtok_input"] * r * i for e, r, i in ((es, (1 - f) * rate, si), (el, f * rate, li)))
        usd_in = usd_in * 3600.0 / 1e6
        tok_h = rate * 3600.0
        out.update(usd_per_hour=usd, usd_per_mtok_total=usd / (tok_h * (q.isl + q.osl)) * 1e6,
                   usd_per_mtok_input=usd_in / (tok_h * q.isl) * 1e6,
                   usd_per_mtok_output=(usd - usd_in) / (tok_h * q.osl) * 1e6)
    else:
        out.update(usd_per_hour=np.nan, usd_per_mtok_total=np.nan, usd_per_mtok_input=np.nan,
                   usd_per_mtok_output=np.nan)
    if es["j_per_token"] == es["j_per_token"]:
        joules = es["j_per_token"] * (1 - f) * rate * so + el["j_per_token"] * f * rate * lo  # W
        out["j_per_token"] = joules / (rate * q.osl)
        mw = sum(rate * share * o / e["tokens_per_s_per_MW"] for e, share, o in ((es, 1 - f, so), (el, f, lo)))
        out["tokens_per_s_per_MW"] = rate * q.osl / mw
    else:
        out.update(j_per_token=np.nan, tokens_per_s_per_MW=np.nan)
    return out


def routed_rows(q: Question) -> list[dict]:
    """Every kept pair of colocated configurations (short pool, long pool) of a length-mix question, priced as
    one deployment: mode colocated, the short pool in the decode columns, the long pool in the ``long_*``
    columns, ``route_prompt_tokens`` the router's threshold."""
    from . import instances as search

    (si, so), (li, lo) = q.classes()
    f = q.long_share
    qs, ql = _class_question(q, si, so), _class_question(q, li, lo)
    es, el = Economics.of(qs), Economics.of(ql)
    short = _kept(_candidates(qs, search), es)
    long_ = _kept(_candidates(ql, search), el)
    rows = []
    for s in short:
        for l in long_:
            if (s["inst"].dep.weight_dtype, s["inst"].dep.kv_dtype) != (l["inst"].dep.weight_dtype,
                                                                        l["inst"].dep.kv_dtype):
                continue  # one checkpoint and KV dtype per deployment
            split = _best_split(q, s, l, f, es)
            if split is not None:
                rows.append(_row(q, s, l, split, f, (es, el)))
    return rows


def long_prompt_reason(q: Question, row: dict) -> str:
    """Why an unrouted row of a length-mix question misses the TTFT target ('' if it does not). The planner prices
    an unrouted pool at the mean request; with two lengths a prompt's prefill service S scales with its own
    prefill latency on the row's prefilling instance, S_c = S x lat(c) / lat(mean), and the queue grows with the
    service times' second moment (Pollaczek-Khinchine: the wait scales as E[S^2] / S^2 at the same rate)
    [first-order correction, assumption: the utilisation's change with E[S] is not counted]. The long requests'
    TTFT = wait x E[S^2] / S^2 + S_long + exposed transfer is checked where they decide the statistic (their share
    above 1 - the percentile); for the mean, the share-weighted mean of both classes."""
    from ...models.step.pipeline import pp_prefill
    from . import instances as search

    (si, _), (li, _) = q.classes()
    f = q.long_share
    side = "prefill" if row["mode"] == "disaggregated" else "decode"
    ranks, pp = int(row[f"{side}_ranks"]), row.get(f"{side}_pp")
    pp = 1 if pp is None or pp != pp else int(pp)
    ep = row.get(f"{side}_ep")
    gpu = str(row.get(f"{side}_gpu") or "") or q.gpu
    inst = search._instance(q.model, gpu, q.runtime, ranks, "TP", row["weight_dtype"], row["kv_dtype"], q.isl, q.osl,
                            None if ep is None or ep != ep or int(ep) == ranks else int(ep), None, pp)
    if inst.dep is None:
        return ""

    def lat(tokens):
        return float(pp_prefill(inst.dep, pp, max(1, int(round(tokens))))["latency_s"])

    service = row["prefill_service_ms"] / 1e3
    exposed = row.get("transfer_exposed_ms")
    exposed = 0.0 if exposed is None or exposed != exposed else exposed / 1e3
    base = lat(q.isl)
    s_short, s_long = service * lat(si) / base, service * lat(li) / base
    wait = max(row["ttft_ms"] / 1e3 - service - exposed, 0.0) * ((1 - f) * s_short ** 2 + f * s_long ** 2) / service ** 2
    ttft_long, ttft_short = wait + s_long + exposed, wait + s_short + exposed
    if q.stat == "mean":
        t = f * ttft_long + (1 - f) * ttft_short
        what = f"the mean TTFT over both lengths (about {t * 1e3:,.0f} ms)"
    elif f > 1 - float(q.stat[1:]) / 100:
        t = ttft_long
        what = (f"a {int(li):,}-token prompt waits and prefills for about {t * 1e3:,.0f} ms ({s_long * 1e3:,.0f} ms "
                "of its own prefill)")
    else:
        return ""
    return f"{what}, over the TTFT target: route long prompts to their own pool" if t > q.ttft_ms / 1e3 * (1 + 1e-9) \
        else ""

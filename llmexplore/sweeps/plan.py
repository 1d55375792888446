"""The deployment planner: from a model, a GPU type and budget, a workload and latency targets to every
configuration's throughput and latency, the Pareto frontiers and the best configuration (docs/models.md §8).

The space (each axis from an area model):

* mode: colocated (chunked prefill, :func:`..models.disagg.colocated_from_tables`) or disaggregated
  (prefill pool + KV transfer + decode pool, :mod:`..models.plan`);
* per side: ranks per instance (powers of two up to the scale-up domain; MoE models also 16-64 ranks of
  DP attention with experts over all ranks, the wide-EP layout), attention layout (TP; DPA and DOP on the
  decode side), weight and KV dtypes (shared by both sides: the KV cache crosses the link as it is);
* colocated chunk budget (max_num_batched_tokens), decode batch cap (the batch statistic at the operating
  point, rounded up: max_num_seqs), P:D pool sizes within the budget, the KV link.

Experts are always spread over every rank of an instance (EP = ranks: the step engine's MoE layout), so the
EP axis is the instance size. Prefill and colocated instances use TP attention (the step engine prices
chunked and full prefill with TP attention only).

Objective. Without a rate: the highest sustainable request rate within the budget and the targets, ranked by
output tokens/s per GPU. With a rate: the fewest GPUs that serve it within the targets (ties: more tokens/s
per user). Every configuration is a row, infeasible ones with a reason.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field, fields, replace

import numpy as np
import pandas as pd

from .. import _check, presets
from ..deployment import MAX_GPUS, MODES, DeploymentConfig, SideConfig
from ..errors import SpecError
from ..models.serving import disagg as dg
from ..models.serving import capacity as pm
from ..models.queueing import at_stat
from ..models.step.engine import Deployment
from ..models.step.prefill import prefill_time

__all__ = ["Question", "plan", "configurations", "frontiers", "best", "config_of", "question_tasks", "run_task",
           "order_table", "simulate_row", "simulate_top",
           "simulate_config", "capacity_task", "capacity_plan", "CDF_POINTS", "CHUNKS", "TABLE_COLUMNS"]

CHUNKS = (512, 1024, 2048, 4096, 8192)  # max_num_batched_tokens options [tokens]
WIDE_EP_RANKS = (16, 32, 64)  # DP-attention + EP instance sizes searched for MoE models
BATCH_POINTS = 40  # log-spaced decode batches per instance (step time is smooth in the batch)
RATE_POINTS = 160  # per-instance rates of the colocated grid
MAX_SEQS = 2048  # largest decode batch considered per instance [sequences]


@dataclass(frozen=True)
class Question:
    """One planning question. Lengths in tokens, targets in ms at ``stat`` (mean, p50, p90, p99), rate in
    requests/s (None: find the highest rate the budget sustains). ``weight_dtypes`` / ``kv_dtypes`` limit the
    dtypes searched (None: the model's released dtype and FP8, plus FP4 on GPUs with FP4 tensor cores);
    ``link`` is the KV-transfer link (None: the GPU's scale-out link)."""

    model: str = "qwen3-32b"
    gpu: str = "h200"
    gpus: int = 32
    isl: int = 4000
    osl: int = 500
    ttft_ms: float = 300.0
    tpot_ms: float = 10.0
    stat: str = "p90"
    rate_per_s: float | None = None
    runtime: str = "default"
    weight_dtypes: tuple | None = None
    kv_dtypes: tuple | None = None
    modes: tuple = MODES
    link: str | None = None
    chunks: tuple = CHUNKS

    def __post_init__(self) -> None:
        def put(k, v):
            object.__setattr__(self, k, v)

        presets.model(self.model)
        hw = presets.hardware(self.gpu)
        presets.runtime(self.runtime)
        put("gpus", _check.integer("gpus", self.gpus, lo=1, hi=MAX_GPUS))
        put("isl", _check.integer("isl", self.isl, lo=1, hi=dg.MAX_WORKLOAD_TOKENS, unit="tokens"))
        put("osl", _check.integer("osl", self.osl, lo=1, hi=dg.MAX_WORKLOAD_TOKENS, unit="tokens"))
        for f in ("ttft_ms", "tpot_ms"):
            put(f, _check.number(f, getattr(self, f), lo=0, lo_open=True, hi=dg.MAX_RATE_OR_MS, unit="ms"))
        at_stat.check_stat(self.stat)
        if self.rate_per_s is not None:
            put("rate_per_s", _check.number("rate_per_s", self.rate_per_s, lo=0, lo_open=True,
                                            hi=dg.MAX_RATE_OR_MS, unit="1/s"))
        for f, allowed in (("modes", MODES),):
            vals = tuple(getattr(self, f))
            bad = [v for v in vals if v not in allowed]
            if bad or not vals:
                raise SpecError(f"{f} must be a non-empty subset of {', '.join(allowed)}, got {vals!r}")
            put(f, vals)
        for f in ("weight_dtypes", "kv_dtypes"):
            vals = getattr(self, f)
            if vals is not None:
                vals = (vals,) if isinstance(vals, str) else tuple(vals)
                if not vals:
                    raise SpecError(f"{f} must name at least one dtype")
                for v in vals:
                    if f == "weight_dtypes":
                        hw.check_dtype(v, "weight_dtype")
                    else:
                        from ..specs import dtype_bytes
                        dtype_bytes(v, "kv_dtype")
                put(f, vals)
        put("chunks", tuple(_check.integer("chunk", c, lo=2, hi=1 << 20, unit="tokens") for c in self.chunks))
        if self.link is not None:
            presets.link(self.link)

    @property
    def workload(self) -> dg.Workload:
        return dg.Workload(prompt_tokens=self.isl, output_tokens=self.osl, rate_per_s=self.rate_per_s or 1.0,
                           ttft_slo_ms=self.ttft_ms, tpot_slo_ms=self.tpot_ms,
                           percentile=at_stat.percentile_of(self.stat))

    def dtype_options(self) -> list[tuple[str, str]]:
        m, hw = presets.model(self.model), presets.hardware(self.gpu)
        w = self.weight_dtypes
        if w is None:
            w = tuple(dict.fromkeys([m.weight_dtype, "fp8"] + (["fp4"] if hw.has_fp4 else [])))
        kv = self.kv_dtypes or ("bf16", "fp8")
        return [(a, b) for a in w for b in kv]

    def link_name(self) -> str:
        return self.link or presets.hardware(self.gpu).scale_out_link or "roce-400g"


@dataclass
class _Instance:
    """One instance type: deployment + layout, with its decode and prefill tables."""

    dep: Deployment
    layout: str
    batches: np.ndarray = field(default_factory=lambda: np.zeros(0))
    step_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    prefill_s: float = np.inf
    reason: str = ""


def _rank_options(q: Question) -> list[tuple[int, str, int | None]]:
    """(ranks, layout, expert-parallel size) of every instance type searched (EP None: all ranks)."""
    m, hw = presets.model(q.model), presets.hardware(q.gpu)
    node = hw.scale_up_size
    tps = [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= min(node, q.gpus)]
    out = [(t, "TP", None) for t in tps]
    if m.is_moe:  # MoE-TP: every expert sliced over the instance's ranks (vLLM's default for MoE models)
        out += [(t, "TP", 1) for t in tps if t > 1]
    out += [(t, lay, None) for t in tps if t > 1 for lay in ("DPA", "DOP")]
    if m.is_moe:
        out += [(t, "DPA", None) for t in WIDE_EP_RANKS if node < t <= q.gpus]
    return out


def _instances(q: Question, wl: dg.Workload) -> list[_Instance]:
    out = []
    for wd, kd in q.dtype_options():
        for ranks, layout, ep in _rank_options(q):
            inst = _instance(q.model, q.gpu, q.runtime, ranks, layout, wd, kd, wl.prompt_tokens,
                             wl.output_tokens, ep)
            out.append(_Instance(inst.dep, inst.layout, inst.batches, inst.step_s, inst.prefill_s, inst.reason))
    return out


@functools.lru_cache(maxsize=512)
def _instance(model, gpu, runtime, ranks, layout, wd, kd, isl, osl, ep=None) -> _Instance:
    """One instance's decode table (cached: sliders on rates and targets reuse it)."""
    try:
        dep = Deployment.build(model, gpu, ranks, runtime=runtime, weight_dtype=wd, kv_dtype=kd,
                               moe_dispatch="alltoall" if layout == "DPA" and ranks > 8 else "gather",
                               moe_ep=ep)
    except SpecError as exc:
        return _Instance(None, layout, reason=f"{ranks} ranks, {wd}/{kd}: {exc}")
    wl = dg.Workload(prompt_tokens=isl, output_tokens=osl)
    dec = dg.decode_side(dep, wl, layout=layout, max_batch_limit=MAX_SEQS, points=BATCH_POINTS)
    inst = _Instance(dep, layout, dec.batches, np.asarray(dec.step_s, float))
    if dec.batch_cap < 1:
        inst.reason = (f"{ranks} x {gpu} ({layout}, {wd} weights, {kd} KV) cannot hold the weights and "
                       f"one sequence of {wl.peak_context:.0f} tokens")
    elif layout == "TP":
        inst.prefill_s = float(prefill_time(dep, isl)["prefill_s"])
    return inst


@functools.lru_cache(maxsize=256)
def _colocated_tables(model, gpu, runtime, ranks, wd, kd, isl: int, osl: int, chunks: tuple, ep=None) -> tuple:
    dep = _instance(model, gpu, runtime, ranks, "TP", wd, kd, isl, osl, ep).dep
    wl = dg.Workload(prompt_tokens=isl, output_tokens=osl)
    return dg.colocated_tables(dep, wl, np.array(chunks, float), points=BATCH_POINTS)


def _ep(inst: _Instance) -> int:
    """Expert-parallel size of an instance (1 for a dense model)."""
    return (inst.dep.moe_ep or inst.dep.ranks) if inst.dep.model.is_moe else 1


def _shape(inst: _Instance) -> str:
    s = f"{inst.layout}{inst.dep.ranks}"
    return s + f" EP{_ep(inst)}" if inst.dep.model.is_moe and inst.dep.ranks > 1 else s


def _label(mode: str, wd: str, kd: str, p: _Instance | None, d: _Instance, chunk=None) -> str:
    if mode == "colocated":
        return f"colocated {_shape(d)} {wd}/{kd} chunk {chunk}"
    return f"disagg P:{_shape(p)} D:{_shape(d)} {wd}/{kd}"


def _colocated_rows(q: Question, wl: dg.Workload, insts: list[_Instance]) -> tuple[list[dict], list[dict]]:
    rows, front = [], []
    T_ttft, T_tpot = q.ttft_ms * 1e-3, q.tpot_ms * 1e-3
    mean = q.stat == "mean"
    for inst in insts:
        if inst.dep is None or inst.layout != "TP" or inst.reason:
            continue
        dep = inst.dep
        dec, t_mix = _colocated_tables(q.model, q.gpu, q.runtime, dep.ranks, dep.weight_dtype, dep.kv_dtype,
                                       q.isl, q.osl, q.chunks, dep.moe_ep)
        b_cap = dec.batches[-1]
        lam_cap = float(np.max(dec.batches / (q.osl * np.asarray(dec.step_s))))  # pure-decode capacity
        lam = np.geomspace(lam_cap * 1e-4, lam_cap, RATE_POINTS)
        n_max = q.gpus // dep.ranks
        for i, chunk in enumerate(q.chunks):
            base = dict(mode="colocated", weight_dtype=dep.weight_dtype, kv_dtype=dep.kv_dtype,
                        prefill_ranks=np.nan, prefill_layout="", prefill_ep=np.nan, decode_ranks=dep.ranks,
                        decode_layout="TP", decode_ep=_ep(inst),
                        chunk_tokens=chunk, label=_label("colocated", dep.weight_dtype, dep.kv_dtype, None, inst,
                                                         chunk))
            def at(l, n=n_max, dec=dec, t_mix=t_mix[i], chunk=chunk):
                # requests dealt round-robin over the n instances: Erlang-n gaps (arrival SCV 1/n)
                r = dg.colocated_from_tables(dec, t_mix, wl, l, chunk, arrival_scv=1.0 / max(n, 1))
                ttft = r["ttft_mean_s"] if mean else r["ttft_s"]
                tpot = r["tpot_mean_s"] if mean else r["tpot_s"]  # per-request TPOT, as engines report
                return r, ttft, tpot

            r, ttft, tpot = at(lam)
            ok = (ttft <= T_ttft) & (tpot <= T_tpot)
            good = np.isfinite(ttft) & (ttft <= T_ttft) & np.isfinite(tpot)
            if good.any():
                front += [dict(base, tokens_per_s_per_user=1.0 / tpot[j],
                               tokens_per_s_per_gpu=lam[j] * q.osl / dep.ranks) for j in np.nonzero(good)[0]]
            if not ok.any():
                why = _colocated_reason(dec, t_mix[i], r, ttft, tpot, T_ttft, T_tpot)
                rows.append(dict(base, feasible=False, reason=why))
                continue

            def lam_star_of(n, ok=ok, at=at):
                """Highest per-instance rate within the targets with n instances (grid, then refined)."""
                okn = ok if n == n_max else np.array([(a <= T_ttft) & (b <= T_tpot) for a, b in
                                                      zip(*at(lam, n)[1:])])
                if not okn.any():
                    return 0.0
                j = int(np.nonzero(okn)[0].max())
                lo, hi = lam[j], lam[j + 1] if j + 1 < lam.size else lam[j]
                if hi > lo:  # refine between the last feasible grid rate and the next
                    fine = np.linspace(lo, hi, 33)
                    _, t1, t2 = at(fine, n)
                    lo = float(fine[(t1 <= T_ttft) & (t2 <= T_tpot)].max())
                return lo

            lam_star = lam_star_of(n_max)
            if q.rate_per_s is None:
                n_c = n_max
                rate = n_c * lam_star
            else:  # fewer instances see burstier arrivals: settle n with its own round-robin smoothing
                n_c = math.ceil(q.rate_per_s / lam_star * (1 - 1e-12))
                for _ in range(4):
                    if n_c < 1 or n_c > n_max:
                        break
                    lam_n = lam_star_of(n_c)
                    if lam_n * n_c >= q.rate_per_s * (1 - 1e-12):
                        break
                    n_c += 1
                rate = q.rate_per_s
            if n_c < 1 or n_c > n_max:
                rows.append(dict(base, feasible=False, instances=n_c, gpus=n_c * dep.ranks,
                                 reason=f"needs {n_c} instances of {dep.ranks} GPUs, over the budget of {q.gpus}"
                                 if n_c > n_max else f"one instance needs {dep.ranks} GPUs > {q.gpus}"))
                continue
            r, ttft, tpot = at(np.array([rate / n_c]), n_c)
            rows.append(dict(base, feasible=True, reason="", n_prefill=0, n_decode=n_c, gpus=n_c * dep.ranks,
                             rate_per_s=rate, ttft_ms=float(ttft[0]) * 1e3, tpot_ms=float(tpot[0]) * 1e3,
                             tpot_mean_ms=float(r["tpot_mean_s"][0]) * 1e3,
                             decode_batch=float(r["decode_batch"][0]),
                             max_num_seqs=_seqs_cap(float(r["decode_batch"][0]), b_cap),
                             capacity_per_s=lam_star * n_max))
    return rows, front


def _colocated_reason(dec, t_mix, r, ttft, tpot, T_ttft, T_tpot) -> str:
    if float(dec.step_s[0]) > T_tpot:
        return f"a decode step at batch 1 takes {float(dec.step_s[0]) * 1e3:.3g} ms > the TPOT target"
    if float(np.nanmin(np.where(np.isfinite(ttft), ttft, np.inf))) > T_ttft:
        return (f"the prompt alone takes {float(r['prefill_service_s'][0]) * 1e3:.4g} ms in chunks > the TTFT "
                "target")
    return "no rate meets both targets (mixed iterations push TPOT over its target)"


def _seqs_cap(mean_batch: float, cap: float) -> int:
    """max_num_seqs for a mean decode batch: its p99 Poisson concurrency, rounded up to a multiple of 8,
    within the memory cap."""
    z = at_stat.Z_SCORES[0.99]
    b = mean_batch + z * math.sqrt(max(mean_batch, 0.0))
    return int(max(1, min(cap, 8 * math.ceil(b / 8))))


def _disagg_rows(q: Question, wl: dg.Workload, insts: list[_Instance]) -> tuple[list[dict], list[dict]]:
    link = presets.link(q.link_name())
    T_ttft, T_tpot = q.ttft_ms * 1e-3, q.tpot_ms * 1e-3
    pre = [i for i in insts if i.dep is not None and i.layout == "TP" and not i.reason]
    dec = [i for i in insts if i.dep is not None and not i.reason]
    if not pre or not dec:
        return [], []
    pairs = [(p, d) for p in pre for d in dec
             if (p.dep.weight_dtype, p.dep.kv_dtype) == (d.dep.weight_dtype, d.dep.kv_dtype)
             and p.dep.ranks + d.dep.ranks <= q.gpus]
    if not pairs:
        return [], []
    k = len(pairs)
    busy_p, busy_d, exposed = np.zeros(k), np.zeros(k), np.zeros(k)
    for j, (p, d) in enumerate(pairs):
        ps = dg.PrefillSide(p.dep, p.prefill_s, np.array([p.prefill_s]), np.array([1.0]))
        ds = dg.DecodeSide(d.dep, int(d.batches[-1]), d.batches, d.step_s)
        x = dg.transfer_side(ps, ds, link, wl)
        busy_p[j], exposed[j] = x["link_busy_s"], x["exposed_s"]
        busy_d[j] = x["link_busy_s"] * p.dep.ranks / d.dep.ranks
    S = np.array([p.prefill_s for p, _ in pairs])
    rp = np.array([p.dep.ranks for p, _ in pairs], float)
    rd = np.array([d.dep.ranks for _, d in pairs], float)
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
    grid = pm.pool_pairs(rate_p, rate_d1, rate_link, rp, rd, q.gpus)
    rate, gpus = grid["rate"], grid["gpus"]
    rows, front = [], []
    for j, (p, d) in enumerate(pairs):
        base = dict(mode="disaggregated", weight_dtype=d.dep.weight_dtype, kv_dtype=d.dep.kv_dtype,
                    prefill_ranks=p.dep.ranks, prefill_layout="TP", prefill_ep=_ep(p), decode_ranks=d.dep.ranks,
                    decode_ep=_ep(d),
                    decode_layout=d.layout, chunk_tokens=np.nan, link=link.name,
                    label=_label("disaggregated", d.dep.weight_dtype, d.dep.kv_dtype, p, d))
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
            y = q.osl / (p.dep.ranks / per_inst_p + d.dep.ranks / lam_d)
            front += [dict(base, tokens_per_s_per_user=1.0 / t_stat[i], tokens_per_s_per_gpu=y[i])
                      for i in np.nonzero(fits)[0]]
        r, g = rate[j], gpus[j]
        if q.rate_per_s is None:
            if r.max() <= 0:
                rows.append(dict(base, feasible=False, reason=_disagg_reason(p, d, dr, rate_p[j], rate_link[j],
                                                                               T_ttft, exposed[j])))
                continue
            key = np.where(r > 0, r * (1 + 1e-12) - g * 1e-15, -np.inf)  # highest rate, then fewer GPUs
            a, b = np.unravel_index(int(np.argmax(key)), r.shape)
        else:
            ok = r >= q.rate_per_s
            if not ok.any():
                why = (_disagg_reason(p, d, dr, rate_p[j], rate_link[j], T_ttft, exposed[j]) if r.max() <= 0 else
                       f"at most {r.max():.3g} req/s within {q.gpus} GPUs < {q.rate_per_s:g} req/s")
                rows.append(dict(base, feasible=False, reason=why))
                continue
            key = np.where(ok, g + grid["n_p"][:, None] * 1e-6, np.inf)  # fewest GPUs, then fewer prefill
            a, b = np.unravel_index(int(np.argmin(key)), r.shape)
        n_p, n_d = int(grid["n_p"][a]), int(grid["n_d"][b])
        lam = float(r[a, b]) if q.rate_per_s is None else q.rate_per_s
        ttft = (at_stat.pool_wait(q.stat, lam, S[j], n_p) + S[j]
                + np.maximum(at_stat.link_wait(q.stat, lam / n_p, busy_p[j]), at_stat.link_wait(q.stat, lam / n_d, busy_d[j]))
                + exposed[j])
        mb = dg.first_fixed_point(d.batches, d.step_s, lam / n_d, q.osl)
        mb = float(mb) if np.isfinite(mb) else dr["mean_batch"]
        bstat = mb + at_stat.z_of(q.stat) * math.sqrt(mb)
        tpot = float(np.interp(max(bstat, 1.0), d.batches, np.maximum.accumulate(d.step_s)))
        rows.append(dict(base, feasible=True, reason="", n_prefill=n_p, n_decode=n_d, gpus=int(g[a, b]),
                         rate_per_s=lam, ttft_ms=float(ttft) * 1e3, tpot_ms=tpot * 1e3,
                         tpot_mean_ms=float(np.interp(max(mb, 1.0), d.batches, d.step_s)) * 1e3,
                         decode_batch=mb, max_num_seqs=_seqs_cap(mb, float(d.batches[-1])),
                         capacity_per_s=float(r.max()), transfer_exposed_ms=exposed[j] * 1e3))
    return rows, front


def _disagg_reason(p, d, dr, rate_p, rate_link, T_ttft, exposed) -> str:
    if p.prefill_s + exposed > T_ttft:
        return (f"prefill ({p.prefill_s * 1e3:.4g} ms) + exposed transfer ({exposed * 1e3:.3g} ms) exceed the "
                "TTFT target")
    if dr["rate_per_s"] <= 0:
        return f"a decode step at batch 1 takes {float(d.step_s[0]) * 1e3:.3g} ms > the TPOT target"
    if np.max(rate_link) <= 0:
        return "the decode instance's NICs cannot take the KV within the TTFT slack"
    return "no pool pair within the budget meets both targets"


TABLE_COLUMNS = ["mode", "label", "weight_dtype", "kv_dtype", "prefill_ranks", "prefill_layout", "prefill_ep",
                 "decode_ranks", "decode_layout", "decode_ep", "chunk_tokens", "link", "n_prefill", "n_decode", "gpus", "rate_per_s",
                 "tokens_per_s_per_gpu", "tokens_per_s_per_user", "ttft_ms", "tpot_ms", "tpot_mean_ms",
                 "decode_batch", "max_num_seqs", "capacity_per_s", "transfer_exposed_ms", "feasible", "reason"]


def configurations(q: Question) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(every configuration's row, frontier candidate points). Rows: mode, label, dtypes, each side's ranks
    and layout, chunk_tokens, n_prefill / n_decode instances, gpus, rate_per_s, tokens_per_s_per_gpu,
    tokens_per_s_per_user, ttft_ms and tpot_ms at the question's statistic, tpot_mean_ms, decode_batch,
    max_num_seqs, capacity_per_s (highest rate within the budget), feasible and reason."""
    wl = q.workload
    insts = _instances(q, wl)
    rows, pts = [], []
    if "colocated" in q.modes:
        r, f = _colocated_rows(q, wl, insts)
        rows += r
        pts += f
    if "disaggregated" in q.modes:
        r, f = _disagg_rows(q, wl, insts)
        rows += r
        pts += f
    for i in insts:
        if i.reason:
            rows.append(dict(mode="any", label=i.reason.split(":")[0], feasible=False, reason=i.reason,
                             decode_layout=i.layout))
    df = pd.DataFrame(rows).reindex(columns=TABLE_COLUMNS)
    df["feasible"] = df["feasible"].fillna(False).astype(bool)
    ok = df["feasible"]
    df.loc[ok, "tokens_per_s_per_gpu"] = df.loc[ok, "rate_per_s"] * q.osl / df.loc[ok, "gpus"]
    df.loc[ok, "tokens_per_s_per_user"] = 1e3 / df.loc[ok, "tpot_ms"]
    return order_table(df, q), pd.DataFrame(pts)


def order_table(df: pd.DataFrame, q: Question) -> pd.DataFrame:
    """Feasible first, best objective first; ties by tokens/s per user, then label (a total order, so a
    sweep split into tasks and merged gives the same table)."""
    if q.rate_per_s is None:
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
    from .distributed import run_sweep

    try:
        rows = run_sweep(run_task, question_tasks(q), scheduler=scheduler, workers=workers)
    except (OSError, TimeoutError) as exc:  # an unreachable cluster: say which, not a traceback
        raise SpecError(f"scheduler {scheduler!r} cannot be reached: {str(exc).splitlines()[0]}") from None
    if "error" in rows and rows["error"].fillna("").astype(str).str.len().gt(0).any():
        bad = rows.loc[rows["error"].fillna("").astype(str).str.len() > 0, "error"].iloc[0]
        raise SpecError(f"a planning task failed: {bad}")
    conf = rows[rows["kind"] == "config"].drop(columns=[c for c in rows if c in ("kind", "task_id", "error")])
    pts = rows[rows["kind"] == "point"][["mode", "label", "tokens_per_s_per_user", "tokens_per_s_per_gpu"]]
    conf = conf.reindex(columns=TABLE_COLUMNS)
    conf["feasible"] = conf["feasible"].astype(bool)
    return order_table(conf, q), pts.reset_index(drop=True)


def config_of(row: dict, q: Question) -> DeploymentConfig:
    """The :class:`~llmexplore.deployment.DeploymentConfig` of one table row (what :mod:`llmexplore.launch` and
    :func:`simulate_config` read; its ``to_json`` is the ``config`` of ``plan --json``): model, gpu, mode,
    dtypes, the KV link and one side per role (instances, ranks, layout, EP size, max_num_seqs, chunk budget,
    MoE dispatch)."""
    m = presets.model(q.model)
    if row["mode"] == "colocated":
        sides = (_side_of(row, m, "colocated", row["n_decode"], row["decode_ranks"], row["decode_layout"],
                          row["chunk_tokens"], row.get("decode_ep")),)
    else:
        sides = (_side_of(row, m, "prefill", row["n_prefill"], row["prefill_ranks"], row["prefill_layout"], None,
                          row.get("prefill_ep")),
                 _side_of(row, m, "decode", row["n_decode"], row["decode_ranks"], row["decode_layout"], None,
                          row.get("decode_ep")))
    return DeploymentConfig(model=q.model, gpu=q.gpu, mode=row["mode"], weight_dtype=row["weight_dtype"],
                            kv_dtype=row["kv_dtype"], sides=sides,
                            link=row.get("link") if row["mode"] != "colocated" else None)


def _side_of(row: dict, m, role: str, n, ranks, layout: str, chunk, ep) -> SideConfig:
    """One side of a table row: a row's EP size, or (MoE without one) all of its ranks; dispatch all-to-all
    for an MoE DPA instance spanning nodes (the search prices it so)."""
    ep = int(ep) if m.is_moe and ep == ep and ep is not None else (int(ranks) if m.is_moe else 1)
    return SideConfig(role=role, instances=int(n), ranks=int(ranks), layout=layout, ep=ep,
                      max_num_seqs=int(row["max_num_seqs"]) if role != "prefill" else 1,
                      chunk_tokens=None if chunk is None or chunk != chunk else int(chunk),
                      moe_dispatch="alltoall" if m.is_moe and layout == "DPA" and int(ranks) > 8 else "gather")


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


SIM_REQUESTS = 2000  # requests per simulated check (the summary covers all of them, from an empty start)
SIM_TOLERANCE = 0.10  # relative gap between the analytic estimate and the simulation that is reported


def simulate_row(row: dict, q: Question, *, n_requests: int = SIM_REQUESTS, seed: int = 0) -> dict:
    """Re-check one configuration with the iteration-level serving simulator (:func:`simulate_config`) at its
    operating rate: TTFT and TPOT at the question's statistic, simulated vs analytic, and whether they differ
    by more than :data:`SIM_TOLERANCE`. Only TP attention is simulated (``status`` says so otherwise)."""
    out = {"label": row["label"], "ttft_model_ms": row.get("ttft_ms"), "tpot_model_ms": row.get("tpot_ms")}
    if not row.get("feasible"):
        return {**out, "status": "infeasible: not simulated"}
    if row["decode_layout"] != "TP":
        return {**out, "status": f"not simulated: the simulator runs TP attention, not {row['decode_layout']}"}
    try:
        s = simulate_config(config_of(row, q), isl=q.isl, osl=q.osl, rate_per_s=float(row["rate_per_s"]),
                            n_requests=n_requests, runtime=q.runtime, seed=seed)["summary"]
    except SpecError as exc:
        return {**out, "status": f"not simulated: {exc}"}
    ttft, tpot = s[f"ttft_{q.stat}_s"] * 1e3, s[f"tpot_{q.stat}_s"] * 1e3
    d_ttft = ttft / row["ttft_ms"] - 1.0
    d_tpot = tpot / row["tpot_ms"] - 1.0
    flag = abs(d_ttft) > SIM_TOLERANCE or abs(d_tpot) > SIM_TOLERANCE
    return {**out, "status": "simulated", "ttft_sim_ms": ttft, "tpot_sim_ms": tpot, "ttft_gap_pct": 100 * d_ttft,
            "tpot_gap_pct": 100 * d_tpot, "disagrees": bool(flag),
            "meets_targets_sim": bool(ttft <= q.ttft_ms and tpot <= q.tpot_ms), "requests": n_requests,
            "preemptions": int(s.get("preemptions", 0))}


def simulate_top(result: dict, k: int = 3, **kw) -> list[dict]:
    """:func:`simulate_row` for the ``k`` best feasible configurations of a :func:`plan` result."""
    q = result["question"]
    ok = result["table"][result["table"]["feasible"]].head(int(k))
    return [simulate_row(r, q, **kw) for r in ok.to_dict("records")]


CDF_POINTS = np.linspace(0.01, 0.99, 99)  # quantiles of the distributions returned for plotting


def simulate_config(cfg, *, isl: int, osl: int, rate_per_s: float | None = None,
                    concurrency: int | None = None, n_requests: int = SIM_REQUESTS, runtime: str = "default",
                    isl_sigma: float = 0.0, osl_sigma: float = 0.0, seed: int = 0, trace=None,
                    prefix_ratio: float = 0.0, sampler: str = "fused") -> dict:
    """Simulate one configuration (a :class:`~llmexplore.deployment.DeploymentConfig` or its JSON) under Poisson arrivals at ``rate_per_s``, a
    closed loop of ``concurrency`` requests, or a recorded ``trace`` (a CSV path for
    :func:`llmexplore.traces.load_trace`: its arrivals and lengths replace ``isl``/``osl``, which then only
    size the step tables' context); lengths fixed or lognormal (median ``isl``/``osl`` and log-sd); a share
    ``prefix_ratio`` of each prompt is a cached shared prefix; ``sampler`` is ``Deployment.sampler`` of every
    side (docs/models.md §1.1b).

    Returns ``summary`` (the simulator's: mean/p50/p90/p99 of TTFT, TPOT, ITL and E2E [s], throughput,
    preemptions, mean decode batch), ``cdf`` ({metric: values [ms] at :data:`CDF_POINTS`}), ``series`` (batch
    and KV occupancy over time, at most 2,000 points per instance) and ``config``."""
    from ..models.serving import simulator as sv
    from ..models.serving.batcher import Scheduler
    from ..models.serving.workload import LengthDist, Traffic

    cfg = DeploymentConfig.from_json(cfg)
    isl = _check.integer("isl", isl, lo=1, hi=dg.MAX_WORKLOAD_TOKENS, unit="tokens")
    osl = _check.integer("osl", osl, lo=1, hi=dg.MAX_WORKLOAD_TOKENS, unit="tokens")
    n_requests = _check.integer("requests", n_requests, lo=1, hi=1_000_000)

    def dist(med, sig):
        return LengthDist.fixed(med) if not sig else LengthDist.lognormal(med, sig)

    if trace is not None:
        from ..traces import load_trace

        if rate_per_s is not None or concurrency is not None:
            raise SpecError("trace replays its own arrivals: give no rate_per_s or concurrency with it")
        traffic = load_trace(trace, prefix_ratio=prefix_ratio)
        n_requests = min(n_requests, len(traffic.trace))
    else:
        traffic = Traffic(rate_per_s=rate_per_s, concurrency=concurrency, isl=dist(isl, isl_sigma),
                          osl=dist(osl, osl_sigma), prefix_ratio=prefix_ratio)
    for s in cfg.sides:
        if s.layout != "TP":
            raise SpecError(f"the simulator runs TP attention only; config side {s.role!r} has layout "
                            f"{s.layout!r}")

    moe = presets.model(cfg.model).is_moe

    def dep(s):
        return Deployment.build(cfg.model, cfg.gpu, s.ranks, runtime=runtime, weight_dtype=cfg.weight_dtype,
                                kv_dtype=cfg.kv_dtype, moe_ep=s.ep if moe and s.ep != s.ranks else None,
                                sampler=sampler)

    if cfg.mode == "colocated":
        s = cfg.side("colocated")
        seqs = s.max_num_seqs
        chunk = max(s.chunk_tokens or 2048, seqs)
        res = sv.simulate_colocated(dep(s), traffic, n_requests, instances=s.instances,
                                    scheduler=Scheduler(max_num_seqs=seqs, max_num_batched_tokens=chunk),
                                    seed=seed)
    else:
        p, d = cfg.side("prefill"), cfg.side("decode")
        link = presets.link(cfg.link or presets.hardware(cfg.gpu).scale_out_link or "roce-400g")
        seqs = d.max_num_seqs
        res = sv.simulate_disaggregated(dep(p), dep(d), link, traffic, n_requests,
                                        prefill_instances=p.instances, decode_instances=d.instances,
                                        prefill_tokens=max(isl, 1),
                                        decode_scheduler=Scheduler(max_num_seqs=seqs,
                                                                      max_num_batched_tokens=max(seqs, 2048)),
                                        seed=seed)
    req = res.requests
    cdf = {}
    for name in ("ttft_s", "tpot_s", "e2e_s"):
        v = req[name][np.isfinite(req[name])]
        cdf[name[:-2] + "_ms"] = (np.quantile(v, CDF_POINTS) * 1e3 if v.size else np.full(CDF_POINTS.size, np.nan))
    cdf["itl_ms"] = sv.weighted_quantile(res.itl_s, res.itl_weight, CDF_POINTS) * 1e3
    ser = res.series
    step = max(1, ser["step_s"].size // 2000)
    series = {k: np.asarray(ser[k])[::step] for k in ("instance", "start_s", "decode_batch", "kv_occupancy")
              if k in ser}
    return {"summary": res.summary, "cdf": cdf, "quantiles": CDF_POINTS, "series": series, "config": cfg.to_json()}


def capacity_task(task: dict) -> list[dict]:
    """One planning question of a capacity plan (picklable, for :func:`.distributed.run_sweep`): the best
    configuration of each mode as rows tagged with the question's fields."""
    fields_ = {k: v for k, v in task.items() if k != "task_id"}
    q = Question(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in fields_.items()})
    res = plan(q)
    tag = {f"q_{k}": (",".join(map(str, v)) if isinstance(v, (list, tuple)) else v) for k, v in fields_.items()}
    out = []
    for mode in MODES:
        r = res["best_by_mode"][mode]
        base = {**tag, "mode": mode, "best_overall": bool(r is not None and res["best_mode"] == mode)}
        if r is None:
            out.append({**base, "feasible": False, "label": "", "gpus": np.nan, "rate_per_s": np.nan,
                        "tokens_per_s_per_gpu": np.nan, "tokens_per_s_per_user": np.nan, "ttft_ms": np.nan,
                        "tpot_ms": np.nan})
        else:
            out.append({**base, "feasible": True, **{k: r[k] for k in ("label", "gpus", "rate_per_s",
                        "tokens_per_s_per_gpu", "tokens_per_s_per_user", "ttft_ms", "tpot_ms")}})
    return out


def capacity_plan(questions, *, out=None, scheduler=None, workers: int | None = None, resume: bool = True
                  ) -> pd.DataFrame:
    """Answer many planning questions (dicts of :class:`Question` fields, e.g. a grid over models, GPUs,
    budgets and traffic mixes) on a local process pool or an existing Dask cluster (``scheduler``), the rows
    streaming to a Parquet dataset at ``out`` so an interrupted plan resumes where it stopped
    (:func:`.distributed.run_sweep`). Returns one row per question and mode (its best configuration)."""
    from .distributed import run_sweep

    tasks = []
    for q in questions:
        q = dict(q)
        Question(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in q.items() if k != "task_id"})
        tasks.append({k: (list(v) if isinstance(v, tuple) else v) for k, v in q.items()})
    return run_sweep(capacity_task, tasks, out=out, scheduler=scheduler, workers=workers, resume=resume)


# ---- tables of notebooks/60_deployment_planner.ipynb ----------------------------------------------------------

__all__ += ["highest_rate", "planned_rate", "rate_grid", "rate_sweep", "launch_arguments", "shared_flags", "top_table",
            "simulate_best", "check_table", "SWEEP_COLUMNS", "CHECK_COLUMNS"]

RATE_SHARE_MIN = 1 / 16  # the rate sweep starts at this share of the highest rate any configuration sustains
N_RATES = 8  # rates in the default sweep (each is one plan(): about 0.3 s warm)
TOP = 8  # configurations in the notebook's table
CHECK_TOP = 3  # configurations re-checked with the simulator
SWEEP_COLUMNS = ["rate_per_s", "mode", "label", "gpus", "tokens_per_s_per_gpu", "tokens_per_s_per_user", "ttft_ms",
                 "tpot_ms", "feasible"]


def highest_rate(res: dict) -> float:
    """The highest request rate any feasible configuration of a :func:`plan` result sustains within the budget
    and the targets [req/s] (NaN when none is feasible)."""
    ok = res["table"][res["table"]["feasible"]]
    cap = ok["capacity_per_s"].to_numpy(float)
    cap = cap[np.isfinite(cap)]
    return float(cap.max()) if cap.size else float("nan")


def planned_rate(res: dict) -> float:
    """The request rate the best configuration of a :func:`plan` result serves [req/s] (NaN without one)."""
    return float(res["best"]["rate_per_s"]) if res["best"] is not None else float("nan")


def rate_grid(res: dict, n: int = N_RATES) -> np.ndarray:
    """``n`` log-spaced request rates from :data:`RATE_SHARE_MIN` of :func:`highest_rate` to just below it
    [req/s], plus the question's own rate if it has one (empty when nothing is feasible)."""
    n = _check.integer("n", n, lo=2, hi=256)
    top = highest_rate(res)
    if not np.isfinite(top) or top <= 0:
        return np.zeros(0)
    grid = np.geomspace(top * RATE_SHARE_MIN, top * (1 - 1e-6), n)
    q = res["question"]
    if q.rate_per_s is not None and q.rate_per_s < top:
        grid = np.unique(np.r_[grid, q.rate_per_s])
    return grid


def rate_sweep(q: Question, rates) -> pd.DataFrame:
    """The best configuration as the request rate grows: for each rate, :func:`plan` of ``q`` at that rate (the
    fewest GPUs that serve it within the targets) and the best of each mode.

    Rows: one per (rate, mode) with mode "best", "colocated" or "disaggregated": label, gpus,
    tokens_per_s_per_gpu (the rate's output tokens over the GPUs), tokens_per_s_per_user, ttft_ms, tpot_ms and
    feasible (False, with NaN numbers, when no configuration of that mode serves the rate within the budget)."""
    rates = np.asarray(rates, float).ravel()
    bad = rates[~(np.isfinite(rates) & (rates > 0))]
    if bad.size:
        raise SpecError(f"rates must be finite and > 0 [req/s], got {bad[0]!r}")
    rows = []
    for r in rates:
        res = plan(replace(q, rate_per_s=float(r)))
        for mode, row in [("best", res["best"]), *res["best_by_mode"].items()]:
            if row is None:
                rows.append(dict(rate_per_s=float(r), mode=mode, label="", feasible=False))
            else:
                rows.append({**{c: row.get(c) for c in SWEEP_COLUMNS}, "rate_per_s": float(r), "mode": mode,
                             "feasible": True})
    df = pd.DataFrame(rows, columns=SWEEP_COLUMNS)
    for c in SWEEP_COLUMNS:
        if c not in ("mode", "label", "feasible"):
            df[c] = pd.to_numeric(df[c], errors="coerce").astype(float)
    df["feasible"] = df["feasible"].astype(bool)
    return df


def _flag_groups(command: str | None) -> list[str]:
    """The flags of an engine command with their values ("--tp-size 4"), after the executable, the subcommand
    and the checkpoint (``--model-path X`` included)."""
    import shlex

    if command is None:
        return []
    groups: list[list[str]] = []
    for a in shlex.split(command):
        if a.startswith("--"):
            groups.append([a])
        elif groups:
            groups[-1].append(a)
    return [" ".join(shlex.quote(a) for a in g) for g in groups if g[0] != "--model-path"]


def launch_arguments(row: dict, q: Question, engine: str, *, leave_out=()) -> str:
    """A configuration's launch flags for ``engine``, role by role ("prefill x9: --tensor-parallel-size 1 ...;
    decode x5: ..."), without the flags in ``leave_out``; the engine's reason when it cannot express a role."""
    from .. import launch

    parts = []
    for e in launch.launch_commands(config_of(row, q), engine):
        head = f"{e['role']} x{e['instances']}"
        flags = [f for f in _flag_groups(e["command"]) if f not in set(leave_out)]
        parts.append(f"{head}: {' '.join(flags) or '(only the shared flags)'}" if e["command"] else
                     f"{head}: not expressible ({e['note']})")
    return "; ".join(parts)


def shared_flags(res: dict, k: int = TOP, engine: str = "vllm") -> list[str]:
    """The flags (with values) that every role of every one of the ``k`` best configurations takes in
    ``engine``: :func:`top_table` lists them once instead of in every row (none with fewer than two rows)."""
    from .. import launch

    q = res["question"]
    rows = res["table"][res["table"]["feasible"]].head(int(k)).to_dict("records")
    if len(rows) < 2:
        return []
    sets = [set(_flag_groups(e["command"])) for r in rows for e in launch.launch_commands(config_of(r, q), engine)]
    if not sets or any(not s for s in sets):
        return []
    common = set.intersection(*sets)
    return [f for f in _flag_groups(next(e["command"] for e in launch.launch_commands(config_of(rows[0], q), engine)))
            if f in common]


def top_table(res: dict, k: int = TOP) -> pd.DataFrame:
    """The ``k`` best feasible configurations of a :func:`plan` result with their launch flags for vLLM and
    SGLang (columns of :data:`TABLE_COLUMNS` plus ``vllm`` and ``sglang``). Flags every row takes
    (:func:`shared_flags`) are left out of the rows and listed in ``attrs["shared_flags"]`` ({engine: text})."""
    k = _check.integer("k", k, lo=1, hi=10_000)
    q = res["question"]
    ok = res["table"][res["table"]["feasible"]].head(k).reset_index(drop=True)
    shared = {eng: shared_flags(res, k, eng) for eng in ("vllm", "sglang")}
    for eng in ("vllm", "sglang"):
        ok[eng] = [launch_arguments(r, q, eng, leave_out=shared[eng]) for r in ok.to_dict("records")]
    ok.attrs["shared_flags"] = {eng: " ".join(v) for eng, v in shared.items()}
    return ok


def simulate_best(res: dict, *, n_requests: int = SIM_REQUESTS, seed: int = 0) -> dict:
    """:func:`simulate_config` of the best configuration of a :func:`plan` result at its planned rate, plus
    ``row`` (the configuration's table row), ``rate_per_s``, ``requests`` and ``status`` ("simulated", or why
    not: nothing is feasible, or a layout the simulator does not run; ``cdf`` is then None)."""
    q, b = res["question"], res["best"]
    out = {"row": b, "requests": int(n_requests), "rate_per_s": np.nan, "cdf": None, "summary": None}
    if b is None:
        return {**out, "status": "not simulated: no configuration meets the targets"}
    out["rate_per_s"] = float(b["rate_per_s"])
    try:
        sim = simulate_config(config_of(b, q), isl=q.isl, osl=q.osl, rate_per_s=float(b["rate_per_s"]),
                              n_requests=n_requests, runtime=q.runtime, seed=seed)
    except SpecError as exc:
        return {**out, "status": f"not simulated: {exc}"}
    return {**out, **sim, "status": "simulated"}


CHECK_COLUMNS = ["label", "status", "ttft_model_ms", "ttft_sim_ms", "ttft_gap_pct", "tpot_model_ms", "tpot_sim_ms",
                 "tpot_gap_pct", "disagrees", "meets_targets_sim"]


def check_table(checks: list[dict]) -> pd.DataFrame:
    """:func:`simulate_top`'s checks as a table (:data:`CHECK_COLUMNS`; NaN where a row was not simulated)."""
    return pd.DataFrame(list(checks)).reindex(columns=CHECK_COLUMNS)

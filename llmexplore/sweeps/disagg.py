"""Prefill/decode disaggregation sweeps: tidy tables built from :mod:`llmexplore.models.serving.disagg`.

Every function takes a :class:`PDSetup` and returns a DataFrame (one row per point) or a record, with units in
the column names. Infeasible points keep ``gpus = inf`` / ``goodput_per_gpu = 0`` and a ``reason``. The rows
comparing serving modes are built once (:func:`mode_rows`) and read by the notebook, the explorer and the
command line alike, as is the one-point summary (:func:`point_summary`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .. import _check, presets
from ..errors import SpecError
from ..models.serving import disagg as dg
from ..models.queueing import fcfs_sim as simulate
from ..deployment import MAX_RANKS, check_pp
from ..models.step import cost as co
from ..models.step.engine import Deployment, resolve_deployment
from ..models.step.kv_transfer import transfer_time
from ..models.step.per_token import token_time
from ..models.step.pipeline import hop_link
from ..models.step.speculative import user_spec
from ..specs import Link, SpecDecode
from ..units import dtype_bytes, from_si
from . import pricing, tidy
from .pricing import DEFAULT_PRICE_TIER

__all__ = ["PDSetup", "setup", "custom_link", "MODES", "resolve_link", "mode_rows", "fewest_gpus", "fewest_gpus_mode", "link_comparison",
           "latency_vs_rate", "exposed_vs_bandwidth", "gpus_vs_bandwidth", "breakeven_bandwidth", "pool_sizes_vs",
           "queue_check", "prompt_spread_table", "max_abs_error_by_model", "goodput_grid", "point_summary",
           "tokens_per_s", "with_cost", "cost_record"]

#: serving modes, in the order a tie on GPUs is broken (simplest first)
MODES = ("colocated", "disaggregated, pipelined", "disaggregated, serial")


@dataclass(frozen=True)
class PDSetup:
    """Everything fixed for one PD comparison: the two deployments (same model and GPU), the workload."""

    prefill: Deployment
    decode: Deployment
    workload: dg.Workload
    nics: int | None = None  # NICs per instance (None: one per GPU)
    batched_ops: bool = True
    #: speculative decoding of every decoding instance (the decode pool and colocated ones; None: plain)
    speculative: SpecDecode | None = None
    decode_pp: int = 1  #: pipeline stages of each decode instance (each of decode.ranks GPUs)
    prefill_pp: int = 1  #: pipeline stages of each prefill instance (each of prefill.ranks GPUs)

    def sides(self):
        return (dg.prefill_side(self.prefill, self.workload, pp=self.prefill_pp),
                dg.decode_side(self.decode, self.workload, speculative=self.speculative, pp=self.decode_pp))


def setup(model="llama-3-70b", gpu="h100-sxm", *, prefill_tp: int = 8, decode_tp: int = 8, prompt_tokens=4096,
          output_tokens=256, rate_per_s=36.0, ttft_slo_ms=1000.0, tpot_slo_ms=40.0, percentile=0.99,
          prefix_tokens=0, weight_dtype=None, kv_dtype="bf16", runtime="default", nics=None,
          batched_ops=True, prompt_sigma=0.0, sampler: str = "fused", speculative=None,
          accepted_length=None, decode_pp: int = 1, prefill_pp: int = 1) -> PDSetup:
    """Build a :class:`PDSetup` from preset names (validated). ``prompt_sigma`` > 0 makes prompt lengths
    lognormal with median ``prompt_tokens``; ``weight_dtype`` defaults to the model's released dtype.

    Every error is a SpecError naming the argument: presets and dtypes first, then the workload, then each
    side's ranks (``prefill_tp (3) must divide the query heads of ...``). ``speculative`` (a preset name or
    SpecDecode) decodes every decoding instance speculatively, at ``accepted_length`` (mean tokens per verify step)
    when given in place of the preset's acceptance. ``decode_pp`` > 1: each decode instance is a pipeline of that
    many stages of ``decode_tp`` GPUs (:mod:`llmexplore.models.step.pipeline`), and ``prefill_pp`` > 1 each prefill
    instance one of ``prefill_tp`` GPUs per stage (the queue sees its service time, TTFT its latency). The
    colocated instances compared with them run neither."""
    m, hw, rt, _ = resolve_deployment(model, gpu, runtime)
    weight_dtype = m.weight_dtype if weight_dtype is None else weight_dtype
    hw.check_dtype(weight_dtype, "weight_dtype")  # fp4 needs FP4 tensor cores
    dtype_bytes(kv_dtype, "kv_dtype")
    wl = dg.Workload(prompt_tokens=prompt_tokens, output_tokens=output_tokens, rate_per_s=rate_per_s,
                     ttft_slo_ms=ttft_slo_ms, tpot_slo_ms=tpot_slo_ms, percentile=percentile,
                     prefix_tokens=prefix_tokens, prompt_sigma=prompt_sigma)
    if nics is not None:
        nics = _check.integer("nics", nics, lo=1, hi=1024)
    batched_ops = _check.boolean("batched_ops", batched_ops)

    def side(name: str, ranks) -> Deployment:
        ranks = _check.integer(name, ranks, lo=1, hi=MAX_RANKS)
        try:
            return Deployment.build(m, hw, ranks, runtime=rt, weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                                    sampler=sampler)
        except SpecError as exc:  # the rank rules of Deployment, said of this side
            text = str(exc)
            raise SpecError(name + text[len("ranks"):] if text.startswith("ranks ") else f"{name}: {text}") from None

    spec = user_spec(m, speculative, accepted_length)
    dec = side("decode_tp", decode_tp)
    pp = check_pp(m, decode_pp, dec.ranks, field="decode_pp", ranks_field="decode_tp")
    if pp > 1 and spec is not None:
        raise SpecError(f"decode_pp ({pp}) must be 1 when decoding speculatively with {spec.name!r}: engines do not "
                        "run a draft inside a pipeline (vllm-project/vllm#57755)")
    pre = side("prefill_tp", prefill_tp)
    ppp = check_pp(m, prefill_pp, pre.ranks, field="prefill_pp", ranks_field="prefill_tp")
    for field, p_, d in (("prefill_pp", ppp, pre), ("decode_pp", pp, dec)):
        if p_ > 1:
            try:
                hop_link(d, p_)
            except SpecError as exc:
                raise SpecError(f"{field}: {exc}") from None
    return PDSetup(pre, dec, wl, nics, batched_ops, spec, pp, ppp)


def custom_link(achievable_GBps: float, *, like="roce-400g") -> Link:
    """A link like ``like`` (latency, kind) but with the given achievable bandwidth per direction [GB/s]."""
    achievable_GBps = _check.number("achievable_GBps", achievable_GBps, lo=0.0, lo_open=True, hi=1e6)
    base = presets.resolve("links", like)
    return dataclasses.replace(base, name=f"{achievable_GBps:g} GB/s", display_name=f"{achievable_GBps:g} GB/s",
                               line_rate_GBps=max(base.line_rate_GBps, achievable_GBps),
                               achievable_GBps=achievable_GBps)


def resolve_link(link) -> Link:
    """A link spec from a spec or a preset name (SpecError/UnknownPresetError otherwise)."""
    return link if isinstance(link, Link) else presets.resolve("links", link)


def _bandwidths(bandwidths_GBps) -> np.ndarray:
    return _check.real_array("bandwidths_GBps", np.atleast_1d(bandwidths_GBps), lo=0.0, lo_open=True, hi=1e6,
                             unit="GB/s")


def _disagg_row(s: PDSetup, pre, dec, link: Link, pipelined: bool, nics) -> dict:
    x = dg.transfer_side(pre, dec, link, s.workload, pipelined=pipelined, nics=nics, batched_ops=s.batched_ops)
    z = dg.size_pools(pre, dec, x, s.workload)
    return {"mode": "disaggregated, " + ("pipelined" if pipelined else "serial"), "link": link.name,
            "gpus": z["gpus"], "goodput_per_gpu": z["goodput_per_gpu"], "n_prefill": z["n_p"],
            "n_decode": z["n_d"], "pd_gpu_ratio": z["pd_ratio"],
            **tidy({"ttft_s": z["ttft_s"], "tpot_s": z["tpot_s"], "transfer_s": x["serial_s"],
                    "exposed_s": x["exposed_s"], "kv_B": x["physical_B"]}), "reason": z["reason"]}


def _colocated_row(s: PDSetup) -> dict:
    co = dg.size_colocated(s.prefill, s.workload, speculative=s.speculative)
    return {"mode": "colocated", "link": "-", "gpus": co["gpus"], "goodput_per_gpu": co["goodput_per_gpu"],
            "n_prefill": np.nan, "n_decode": co["n_c"], "pd_gpu_ratio": np.nan,
            **tidy({"ttft_s": co["ttft_s"], "tpot_s": co["tpot_s"]}), "transfer_ms": 0.0, "exposed_ms": 0.0,
            "kv_GB": 0.0, "reason": co["reason"] or f"chunk budget {co['chunk_tokens']} tokens"}


def mode_rows(s: PDSetup, link="roce-400g", *, nics=None, colocated: bool = True) -> list[dict]:
    """Colocated and disaggregated (serial and pipelined transfer) pools sized for the workload's rate and
    SLOs over one link: one record per mode (``mode``, ``link``, ``gpus``, ``goodput_per_gpu``, ``n_prefill``,
    ``n_decode``, ``pd_gpu_ratio``, ``ttft_ms``, ``tpot_ms``, ``transfer_ms``, ``exposed_ms``, ``kv_GB``,
    ``reason``). ``nics``: NICs per instance for this link (default: the setup's)."""
    pre, dec = s.sides()
    lk = resolve_link(link)
    rows = [_colocated_row(s)] if colocated else []
    for pipelined in (False, True):
        rows.append(_disagg_row(s, pre, dec, lk, pipelined, s.nics if nics is None else nics))
    return rows


def fewest_gpus(rows) -> dict | None:
    """The record of :func:`mode_rows` (or a table's rows) needing the fewest GPUs; ties go to the simpler mode
    (colocated, then pipelined, then serial). None when no mode meets the SLOs."""
    rows = rows.to_dict("records") if isinstance(rows, pd.DataFrame) else list(rows)
    ok = [r for r in rows if np.isfinite(r["gpus"])]
    if not ok:
        return None
    return min(ok, key=lambda r: (r["gpus"], MODES.index(r["mode"])))


def fewest_gpus_mode(rows) -> str | None:
    """The ``mode`` of :func:`fewest_gpus` (None when no mode meets the SLOs)."""
    best = fewest_gpus(rows)
    return None if best is None else best["mode"]


def link_comparison(s: PDSetup, links=(("nvlink4", None), ("roce-400g", None), ("tcp-100g", 1))) -> pd.DataFrame:
    """Colocated vs disaggregated (serial and pipelined transfer) over several links: pool sizes, GPUs and
    goodput per GPU at the workload's rate and SLOs. ``links`` are (preset, NICs per instance or None)."""
    rows = [_colocated_row(s)]
    for name, nics in links:
        link = presets.resolve("links", name)
        for row in mode_rows(s, link, nics=nics, colocated=False):
            row["link"] = link.name + (f" ({nics} NIC/instance)" if nics else "")
            rows.append(row)
    return pd.DataFrame(rows)


def tokens_per_s(s: PDSetup) -> float:
    """Tokens the workload serves per second, input plus output: rate x (prompt + output tokens)."""
    wl = s.workload
    return float(wl.rate_per_s * (wl.prompt_tokens + wl.output_tokens))


def with_cost(comparison: pd.DataFrame, s: PDSetup, tier: str = DEFAULT_PRICE_TIER) -> pd.DataFrame:
    """``comparison`` (:func:`link_comparison`, or rows with ``gpus``) with what each row costs at ``tier``'s
    price of the setup's GPU (``data/prices.yaml``): ``usd_per_hour``, its GPUs x the price per GPU-hour, and
    ``usd_per_mtok``, USD per million tokens served, input plus output (:func:`tokens_per_s`; ∞ for a row that
    meets no SLO). Returned unchanged, without cost columns, where the tier has no price for the GPU (the
    findings then say "not priced"); UnknownPresetError for an unknown tier."""
    price = pricing.tier_price(tier, s.prefill.hardware.name)
    if price is None:
        return comparison
    out = comparison.copy()
    out["usd_per_hour"] = out["gpus"].astype(float) * price.usd_per_gpu_hour
    out["usd_per_mtok"] = co.usd_per_mtok(out["usd_per_hour"].to_numpy(float), tokens_per_s(s))
    return out


def cost_record(comparison: pd.DataFrame, s: PDSetup, tier: str = DEFAULT_PRICE_TIER) -> dict:
    """What a notebook records of :func:`with_cost`: the tier, the GPU, its price and date (None where the
    tier has none), the tokens served per second and ``{"mode | link": value}`` of ``usd_per_hour`` and
    ``usd_per_mtok`` (empty where not priced)."""
    gpu = s.prefill.hardware.name
    price = pricing.tier_price(tier, gpu)
    priced = with_cost(comparison, s, tier)
    keys = [f"{m} | {lk}" for m, lk in zip(priced["mode"].astype(str), priced["link"].astype(str))]
    col = (lambda c: dict(zip(keys, priced[c].astype(float)))) if price is not None else (lambda c: {})
    return {"tier": tier, "gpu": gpu, "usd_per_gpu_hour": None if price is None else price.usd_per_gpu_hour,
            "date": None if price is None else price.date, "tokens_per_s": tokens_per_s(s),
            "usd_per_hour": col("usd_per_hour"), "usd_per_mtok": col("usd_per_mtok")}


def latency_vs_rate(s: PDSetup, rates, *, link="roce-400g", n_prefill=None, n_decode=None,
                    n_colocated=None) -> pd.DataFrame:
    """TTFT and TPOT percentiles vs arrival rate at fixed pools (default: the pools sized for the workload's
    rate), colocated and disaggregated (pipelined). Equal GPU budgets make the comparison fair: unless given,
    the colocated pool gets as many GPUs as the disaggregated one."""
    pre, dec = s.sides()
    lk = resolve_link(link)
    x = dg.transfer_side(pre, dec, lk, s.workload, pipelined=True, nics=s.nics, batched_ops=s.batched_ops)
    z = dg.size_pools(pre, dec, x, s.workload)
    n_p = n_prefill or (z["n_p"] if z["feasible"] else 1)
    n_d = n_decode or (z["n_d"] if z["feasible"] else 1)
    gpus = n_p * s.prefill.ranks * s.prefill_pp + n_d * s.decode.ranks * s.decode_pp
    n_c = n_colocated or max(1, gpus // s.prefill.ranks)
    rates = _check.real_array("rates", np.atleast_1d(rates), lo=0.0, lo_open=True, hi=1e7, unit="req/s")
    rows = []
    for lam in rates:
        wl = dataclasses.replace(s.workload, rate_per_s=float(lam))
        d = dg.disagg_latency(pre, dec, x, wl, n_p, n_d)
        c = dg.colocated_latency(s.prefill, wl, n_c, chunk_tokens=512, speculative=s.speculative)
        rows.append({"rate_per_s": lam, "mode": f"disaggregated {n_p}P+{n_d}D", "gpus": gpus,
                     **tidy(d, keep=["ttft_s", "tpot_s"], scalar=True)})
        rows.append({"rate_per_s": lam, "mode": f"colocated {n_c} instances", "gpus": n_c * s.prefill.ranks,
                     **tidy(c, keep=["ttft_s", "tpot_s"], scalar=True)})
    return pd.DataFrame(rows)


def exposed_vs_bandwidth(s: PDSetup, bandwidths_GBps) -> pd.DataFrame:
    """Exposed KV-transfer time of one request vs achievable link bandwidth per GPU, serial vs pipelined.

    Only the bandwidth term of :func:`~llmexplore.models.step.kv_transfer.transfer_time` depends on the link's
    bandwidth (it scales as 1/bandwidth), so one evaluation at 1 GB/s serves every bandwidth."""
    pre, _ = s.sides()
    m = s.prefill.model
    bw = _bandwidths(bandwidths_GBps).ravel()
    tr = transfer_time(m, custom_link(1.0), s.workload.prompt_tokens, kv_dtype=s.decode.kv_dtype,
                       page_tokens=s.decode.runtime.page_tokens, prefill_tp=s.prefill.ranks,
                       decode_tp=s.decode.ranks, batched_ops=s.batched_ops, nics=s.nics)
    lat = float(tr["latency_s"])
    serial, piped = dg.stage_exposed_s(pre, lat + float(tr["ops_s"]) + float(tr["bandwidth_s"]) / bw, lat)
    n = bw.size
    return pd.DataFrame({"bandwidth_GBps": np.concatenate([bw, bw]),
                         "mode": ["serial"] * n + ["layer-wise pipelined"] * n,
                         **tidy({"exposed_s": np.concatenate([serial, piped]),
                                 "prefill_s": pre.prefill_latency_s})})


def gpus_vs_bandwidth(s: PDSetup, bandwidths_GBps) -> pd.DataFrame:
    """GPUs needed at the workload's rate and SLOs vs link bandwidth: disaggregated (serial / pipelined)
    against the colocated pool (independent of the link)."""
    pre, dec = s.sides()
    co = _colocated_row(s)
    rows = []
    for bw in _bandwidths(bandwidths_GBps).ravel():
        for pipelined in (False, True):
            r = _disagg_row(s, pre, dec, custom_link(bw), pipelined, s.nics)
            rows.append({"bandwidth_GBps": bw, "mode": r["mode"], "gpus": r["gpus"],
                         "goodput_per_gpu": r["goodput_per_gpu"]})
        rows.append({"bandwidth_GBps": bw, "mode": "colocated", "gpus": co["gpus"],
                     "goodput_per_gpu": co["goodput_per_gpu"]})
    return pd.DataFrame(rows)


def breakeven_bandwidth(table: pd.DataFrame, setup: PDSetup | None = None, *, rel_tol: float = 1e-3
                        ) -> dict[str, float]:
    """Lowest bandwidth from which each disaggregated mode needs no more GPUs than colocated (NaN if never)
    [GB/s], read from a :func:`gpus_vs_bandwidth` table: the lowest grid bandwidth from which it pays at every
    higher one. With the table's ``setup`` the value is refined between that grid point and the one below by
    bisection (GPUs never grow with bandwidth) to ``rel_tol``, so it no longer depends on where the grid points
    fall: a link exactly at the break-even pays."""
    co = table[table["mode"] == "colocated"].set_index("bandwidth_GBps")["gpus"]
    out = {}
    for mode in ("disaggregated, serial", "disaggregated, pipelined"):
        d = table[table["mode"] == mode].set_index("bandwidth_GBps")["gpus"]
        pays = (d <= co.loc[d.index]).to_numpy()
        bws = d.index.to_numpy()
        # the lowest bandwidth from which it pays at every higher bandwidth too
        ok = np.flatnonzero(np.logical_and.accumulate(pays[::-1])[::-1])
        out[mode] = float(bws[ok[0]]) if len(ok) else float("nan")
        if setup is not None and len(ok) and ok[0] > 0:
            out[mode] = _bisect_breakeven(setup, float(bws[ok[0] - 1]), out[mode], mode.endswith("pipelined"),
                                          float(co.iloc[0]), rel_tol)
    return out


def _bisect_breakeven(s: PDSetup, lo: float, hi: float, pipelined: bool, colocated_gpus: float,
                      rel_tol: float) -> float:
    """Smallest bandwidth in (lo, hi] [GB/s] at which the disaggregated pools need no more GPUs than
    ``colocated_gpus`` (it does not pay at ``lo``, it pays at ``hi``)."""
    pre, dec = s.sides()
    while hi - lo > rel_tol * hi:
        mid = 0.5 * (lo + hi)
        if _disagg_row(s, pre, dec, custom_link(mid), pipelined, s.nics)["gpus"] <= colocated_gpus:
            hi = mid
        else:
            lo = mid
    return hi


def pool_sizes_vs(s: PDSetup, field: str, values, *, links=(("roce-400g", None), ("tcp-100g", 1))
                  ) -> pd.DataFrame:
    """Sized pools (P:D GPU ratio, GPUs, goodput per GPU) vs one workload field (``prompt_tokens``,
    ``output_tokens`` or ``rate_per_s``), per link (pipelined transfer) and colocated."""
    _check.choice("field", field, ("prompt_tokens", "output_tokens", "rate_per_s"))
    rows = []
    for v in np.asarray(values).tolist():
        wl = dataclasses.replace(s.workload, **{field: v})
        s2 = dataclasses.replace(s, workload=wl)
        pre, dec = s2.sides()
        for name, nics in links:
            link = presets.resolve("links", name)
            r = _disagg_row(s2, pre, dec, link, True, nics if nics is not None else s.nics)
            label = link.name + (f", {nics} NIC/instance" if nics else "")
            rows.append({field: v, "mode": f"disaggregated over {label}", **{
                k: r[k] for k in ("gpus", "goodput_per_gpu", "n_prefill", "n_decode", "pd_gpu_ratio")}})
        co = dg.size_colocated(s2.prefill, wl, speculative=s2.speculative)
        rows.append({field: v, "mode": "colocated", "gpus": co["gpus"], "goodput_per_gpu": co["goodput_per_gpu"],
                     "n_prefill": np.nan, "n_decode": co["n_c"], "pd_gpu_ratio": np.nan})
    return pd.DataFrame(rows)


def goodput_grid(s: PDSetup, *, link="roce-400g", n_max: int = 64) -> dict:
    """Highest rate per GPU for every (n_prefill, n_decode) up to ``n_max`` (see disagg.max_rate_grid)."""
    pre, dec = s.sides()
    lk = resolve_link(link)
    x = dg.transfer_side(pre, dec, lk, s.workload, pipelined=True, nics=s.nics, batched_ops=s.batched_ops)
    return dg.max_rate_grid(pre, dec, x, s.workload, n_max=n_max)


def point_summary(s: PDSetup, *, link="roce-400g", decode_batch: int = 64, pipelined: bool = True) -> dict:
    """One point, as the command line prints it and the notebook records it: one prefill, one decode step at a
    batch, the KV transfer, and the sized pools (disaggregated and colocated) with their latencies.

    Returns ``prefill_ms`` (a prompt's latency), ``prefill_service_ms`` (how often an instance takes a new prompt:
    the same without a pipeline), ``decode_step_ms``, ``decode_batch``, ``decode_batch_cap``, ``kv_transfer_GB``,
    ``transfer_serial_ms``, ``transfer_exposed_ms``, and ``disaggregated`` / ``colocated`` records (feasible,
    instances, GPUs, goodput per GPU, TTFT and TPOT at the percentile, reason).
    """
    decode_batch = _check.integer("decode_batch", decode_batch, lo=1, hi=1 << 20)
    pre, dec = s.sides()
    lk = resolve_link(link)
    x = dg.transfer_side(pre, dec, lk, s.workload, pipelined=pipelined, nics=s.nics, batched_ops=s.batched_ops)
    z = dg.size_pools(pre, dec, x, s.workload)
    co = dg.size_colocated(s.prefill, s.workload, speculative=s.speculative)
    # the time per output token: a decode step, the time between a sequence's tokens in a pipeline, or draft +
    # verify over the tokens per step
    step = float(token_time(s.decode, decode_batch, s.workload.decode_context, pp=s.decode_pp,
                            speculative=s.speculative)["tpot_s"])
    pct = f"p{100 * s.workload.percentile:g}".replace(".", "_")
    return {
        **tidy({"prefill_s": pre.prefill_latency_s, "prefill_service_s": pre.prefill_s, "decode_step_s": step}),
        "decode_batch": decode_batch,
        "decode_batch_cap": dec.batch_cap, **tidy({"kv_transfer_B": x["physical_B"]}),
        **tidy({"transfer_serial_s": x["serial_s"], "transfer_exposed_s": x["exposed_s"]}),
        "disaggregated": {"feasible": z["feasible"], "prefill_instances": z["n_p"], "decode_instances": z["n_d"],
                          "gpus": z["gpus"], "goodput_per_gpu": z["goodput_per_gpu"], "pd_gpu_ratio": z["pd_ratio"],
                          f"ttft_{pct}_ms": from_si(z["ttft_s"], "ms"), f"tpot_{pct}_ms": from_si(z["tpot_s"], "ms"),
                          "reason": z["reason"]},
        "colocated": {"feasible": co["feasible"], "instances": co["n_c"], "gpus": co["gpus"],
                      "goodput_per_gpu": co["goodput_per_gpu"], "chunk_tokens": co["chunk_tokens"],
                      f"ttft_{pct}_ms": from_si(co["ttft_s"], "ms"), f"tpot_{pct}_ms": from_si(co["tpot_s"], "ms"),
                      f"itl_{pct}_ms": from_si(co["itl_s"], "ms"), "reason": co["reason"]},
    }


def queue_check(s: PDSetup, *, n_requests: int = 1_000_000, seed: int = 0, loads=(0.5, 0.7, 0.85),
                sigmas=(0.0,)) -> pd.DataFrame:
    """The prefill queue's p99 TTFT (wait + prefill) from the formulas vs a discrete-event simulation of the
    same queue, for one instance and the sized pool, at several loads rho = rate E[D] / c and prompt spreads.

    Equal prompts: exact M/D/1 and Allen-Cunneen M/D/c. Lognormal prompts (``sigmas`` > 0): exact M/G/1
    (FFT) and the Allen-Cunneen M/G/c tail convolved with the service law. The simulation draws
    ``n_requests`` Poisson arrivals and each request's prompt from the same distribution (vectorised).
    """
    rows = []
    rng = np.random.default_rng(seed)
    for sigma in sigmas:
        s2 = dataclasses.replace(s, workload=dataclasses.replace(s.workload, prompt_sigma=float(sigma)))
        pre, dec = s2.sides()
        x = dg.transfer_side(pre, dec, presets.link("roce-400g"), s2.workload, pipelined=True, nics=s.nics)
        z = dg.size_pools(pre, dec, x, s2.workload)
        pools = sorted({1, int(z["n_p"]) if z["feasible"] else 4})
        # the queue on its own: a pipeline's latency beyond its service time is added after it, not simulated
        pre = dataclasses.replace(pre, pp=1, latency_s=np.zeros(0))
        for c in pools:
            for rho in loads:
                lam = rho * c / pre.prefill_s
                arr = simulate.poisson_arrivals(lam, n_requests, seed)
                svc = rng.choice(pre.service_s, size=n_requests, p=pre.service_p) if sigma else pre.prefill_s
                sim = simulate.sim_percentiles(arr, svc, servers=c, quantiles=(0.99,))
                formula = float(dg.prefill_ttft_quantile(pre, 0.99, lam, c))
                kind = ("M/D" if not sigma else "M/G") + ("/1 exact" if c == 1 else "/c Allen-Cunneen")
                rows.append({"prompt_sigma": float(sigma), "instances": c, "load": rho, "rate_per_s": lam,
                             "model": kind, **tidy({"ttft_p99_formula_s": formula,
                                                    "ttft_p99_sim_s": sim["sojourn_p99_s"]}),
                             "error_pct": 100 * (formula / sim["sojourn_p99_s"] - 1), "requests": n_requests})
    return pd.DataFrame(rows)


def prompt_spread_table(s: PDSetup, sigmas=(0.0, 0.5, 1.0), *, link="roce-400g") -> pd.DataFrame:
    """Sized pools when prompt lengths are lognormal around the same median: variability lengthens the
    prefill queue's tail (and the mean prompt), so TTFT needs more prefill instances."""
    rows = []
    lk = resolve_link(link)
    for sigma in sigmas:
        wl = dataclasses.replace(s.workload, prompt_sigma=float(sigma))
        s2 = dataclasses.replace(s, workload=wl)
        pre, dec = s2.sides()
        r = _disagg_row(s2, pre, dec, lk, True, s.nics)
        rows.append({"prompt_sigma": float(sigma), "mean_prompt_tokens": wl.mean_prompt_tokens,
                     **tidy({"prefill_mean_s": pre.prefill_s}), "service_cs2": pre.cs2, "gpus": r["gpus"],
                     "n_prefill": r["n_prefill"], "n_decode": r["n_decode"], "ttft_ms": r["ttft_ms"],
                     "tpot_ms": r["tpot_ms"], "reason": r["reason"]})
    return pd.DataFrame(rows)


def max_abs_error_by_model(check: pd.DataFrame) -> dict[str, float]:
    """Largest |formula / simulation - 1| [%] per queue model of a :func:`queue_check` table."""
    return check.groupby("model", sort=False)["error_pct"].agg(lambda e: float(e.abs().max())).to_dict()


# ---- notebook parameters ---------------------------------------------------------------------------------

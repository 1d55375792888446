"""KV offload sweeps: tidy tables built from :mod:`llmexplore.models.offload.cost` and :mod:`llmexplore.models.offload.preload`.

One :class:`OffloadSetup` fixes the deployment (model, GPU, TP, dtypes), the storage tier and the block size;
the functions return the tables the notebook, the explorer and the command line all read: the one-point
decision (:func:`point_summary`), cost curves per tier (:func:`cost_curves`) with their break-evens
(:func:`break_even_table`), the winner over prefix x bandwidth (:func:`regime_grid`), the break-even over
bandwidth x latency (:func:`break_even_map`), the preload benefit against the queue wait (:func:`preload_curve`),
a staging replay (:func:`staging_replay`) and the GPUs a hit ratio saves (:func:`gpus_vs_hit_ratio`).

The setup's ``pp`` (pipeline stages of ``tp`` GPUs) and ``speculative`` (a draft model's own KV layer) reach every
table (docs/models.md §6.6): recompute is the pipelined prefill's latency (with the draft's prefill), loads are the
worst stage's (stages on different nodes read through their own drives), and the prefill pools are sized with
the pipeline's service time (a new prompt every stage's share) and its latency (TTFT), in instances of pp x tp
GPUs. :func:`break_even_shift` sets the break-evens beside plain decoding's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .. import _check, presets
from ..errors import LlmexploreError, SpecError
from ..models.offload import cost as of
from ..models.offload import preload as pre
from ..models.queueing import at_stat
from ..deployment import MAX_RANKS
from ..deployment import check_pp
from ..models.step.engine import Deployment
from ..models.step.pipeline import hop_link
from ..specs import SpecDecode, StorageTier
from ..units import dtype_bytes
from ..models.step import cost as co
from . import pricing, tidy
from .pricing import DEFAULT_PRICE_TIER

__all__ = ["OffloadSetup", "setup", "best_saving_tier", "custom_tier", "point_summary", "cost_curves", "break_even_table",
           "regime_grid", "break_even_map", "preload_curve", "staging_replay", "gpus_vs_hit_ratio",
           "precision_table", "pool_queue", "saved_by_tier", "grid_with", "measured_load", "measured_replay",
           "plain", "break_even_shift", "decoding_of", "SHIFT_COLUMNS", "SHIFT_REF_COLUMNS", "saved_usd"]


@dataclass(frozen=True)
class OffloadSetup:
    """The deployment that would recompute, the tier that would load, and how blocks are cut and moved."""

    dep: Deployment
    tier: StorageTier
    block_tokens: int = of.DEFAULT_BLOCK_TOKENS
    pipelined: bool = True
    suffix_tokens: int = 256
    pp: int = 1
    speculative: SpecDecode | None = None

    @property
    def dec(self) -> dict:
        """``pp`` and ``speculative`` for the models of :mod:`llmexplore.models.offload`."""
        return {"pp": self.pp, "speculative": self.speculative}

    @property
    def kw(self) -> dict:
        return {"block_tokens": self.block_tokens, "pipelined": self.pipelined, **self.dec}

    @property
    def is_plain(self) -> bool:
        """No pipeline and no draft model (n-gram lookup changes nothing here: it has no draft KV)."""
        return self.pp == 1 and (self.speculative is None or self.speculative.method == "ngram")

    @property
    def instance_gpus(self) -> int:
        """GPUs of one instance: pp stages of tp GPUs."""
        return self.pp * self.dep.ranks

    @property
    def label(self) -> str:
        d = self.dep
        return (f"{d.model.label} on {d.ranks}x {d.hardware.label} (KV {d.kv_dtype}){decoding_of(self, ', ')}, "
                f"{self.tier.label}, {self.block_tokens}-token blocks")


def decoding_of(s: OffloadSetup, lead: str = "") -> str:
    """'' for plain decoding; else ``lead`` + 'PP2 (2 stages on 2 nodes, each reading its own layers)' or the
    speculative preset and what it changes here ('deepseek-mtp-1 (its MTP layer's KV loaded and recomputed)',
    'ngram-5 (no draft KV: nothing changes)')."""
    if s.pp > 1:
        where = of.placement(s.dep, s.pp)
        return lead + (f"PP{s.pp} ({s.pp} stages in one node, sharing its storage)" if where["shared"] else
                       f"PP{s.pp} ({s.pp} stages on {where['nodes']} nodes, each reading its own layers)")
    sp = s.speculative
    if sp is None:
        return ""
    what = {"mtp": "its MTP layer's KV loaded and recomputed", "draft_head": "its draft head's KV loaded and "
            "recomputed", "ngram": "no draft KV: nothing changes"}[sp.method]
    return lead + f"{sp.name} ({what})"


def plain(s: OffloadSetup) -> OffloadSetup:
    """The same setup without a pipeline or speculation (the baseline a shift is measured from)."""
    return dataclasses.replace(s, pp=1, speculative=None)


def custom_tier(base, *, read_GBps: float | None = None, latency_us: float | None = None) -> StorageTier:
    """A tier like ``base`` (a preset name or spec) with another read bandwidth [GB/s] and/or latency [us]."""
    t = presets.resolve("storage", base)
    changes = {}
    if read_GBps is not None:
        changes["read_GBps"] = _check.number("read_GBps", read_GBps, lo=0, lo_open=True, hi=1e5, unit="GB/s")
        changes["link_GBps"] = 0.0 if not t.link_GBps else max(t.link_GBps, changes["read_GBps"])
    if latency_us is not None:
        changes["latency_us"] = _check.number("latency_us", latency_us, lo=0, hi=1e7, unit="us")
    if not changes:
        return t
    label = ", ".join(([f"{changes['read_GBps']:g} GB/s"] if "read_GBps" in changes else [])
                      + ([f"{changes['latency_us']:g} us"] if "latency_us" in changes else []))
    return dataclasses.replace(t, name=f"{t.name} ({label})", display_name=f"{t.label} ({label})", **changes)


def setup(model="llama-3-70b", gpu="h100-sxm", *, storage="nvme-gen4", tp: int = 8, kv_dtype: str = "bf16",
          weight_dtype: str | None = None, runtime="default", block_tokens: int = of.DEFAULT_BLOCK_TOKENS,
          pipelined: bool = True, suffix_tokens: int = 256, read_GBps: float | None = None,
          latency_us: float | None = None, pp: int = 1, speculative=None) -> OffloadSetup:
    """Build an :class:`OffloadSetup` from preset names (validated: errors name the argument and the rule):
    ``pp`` pipeline stages of ``tp`` GPUs recompute (``pp x tp`` at most the largest instance the models price, pp
    at most the model's layers, a scale-out link when the stages span nodes); ``speculative`` (a preset of
    data/speculative.yaml or None) adds its draft model's KV layer (an MTP preset needs the model's MTP module;
    not with a pipeline: :func:`llmexplore.models.step.per_token.check_decoding`)."""
    tp = _check.integer("tp", tp, lo=1, hi=MAX_RANKS)
    dtype_bytes(kv_dtype, "kv_dtype")
    tier = custom_tier(storage, read_GBps=read_GBps, latency_us=latency_us)
    block_tokens = _check.integer("block_tokens", block_tokens, lo=1, hi=1 << 16, unit="tokens")
    suffix_tokens = _check.integer("suffix_tokens", suffix_tokens, lo=1, hi=1 << 20, unit="tokens")
    pipelined = _check.boolean("pipelined", pipelined)
    try:
        dep = Deployment.build(model, gpu, tp, runtime=runtime, weight_dtype=weight_dtype, kv_dtype=kv_dtype)
    except SpecError as exc:
        text = str(exc)
        raise SpecError("tp" + text[len("ranks"):] if text.startswith("ranks ") else text) from None
    pp = check_pp(dep.model, pp, tp, field="pp", ranks_field="tp")
    try:
        pp, spec = of.decoding(dep, pp, speculative)
        if pp > 1:
            hop_link(dep, pp)  # stages on several nodes need a scale-out link for their activations
    except SpecError as exc:
        text = str(exc)
        raise SpecError("pp x tp" + text[len("pp x ranks"):] if text.startswith("pp x ranks") else text) from None
    return OffloadSetup(dep, tier, block_tokens, pipelined, suffix_tokens, pp, spec)


def point_summary(s: OffloadSetup, prefix_tokens: int, *, queue_wait_ms: float = 0.0) -> dict:
    """The decision for one prefix (plain values): both costs [ms], the decision (``load`` exactly when the
    prefix is at or above ``break_even_tokens``), which term sets the break-even, and with ``queue_wait_ms``
    the exposed load after preloading during that wait and the preload break-even."""
    P = _check.integer("prefix_tokens", prefix_tokens, lo=0, hi=of.MAX_PREFIX, unit="tokens")
    W = _check.number("queue_wait_ms", queue_wait_ms, lo=0, hi=1e9, unit="ms") / 1e3
    c = of.costs(s.dep, s.tier, P, suffix_tokens=s.suffix_tokens, **s.kw)
    be = c["break_even"]
    ex = pre.exposed_load_s(s.dep, s.tier, P, W, **s.kw)
    be_pre = float(pre.break_even_preload(s.dep, s.tier, W, suffix_tokens=s.suffix_tokens, **s.kw)[0])
    decision = "load" if P >= be["tokens"] else "recompute"
    with_wait = "load" if P >= be_pre else "recompute"
    rec = {"model": s.dep.model.name, "gpu": s.dep.hardware.name, "tp": s.dep.ranks, "storage": s.tier.name,
           "kv_dtype": s.dep.kv_dtype, "block_tokens": s.block_tokens, "pipelined": s.pipelined,
           "prefix_tokens": P, "cached_tokens": int(c["cached_tokens"]), "blocks": int(c["blocks"]),
           **tidy({"recompute_s": c["recompute_s"], "load_s": c["load_s"], "bytes_B": c["bytes_B"]},
                  units={"bytes_B": "MB"}, scalar=True),
           "decision": decision,
           "break_even_tokens": be["tokens"], "set_by": be["set_by"],
           "closed_form_tokens": be["closed_form_tokens"], "also_pays_below": be["also_pays_below"],
           "queue_wait_ms": W * 1e3,
           **tidy({"exposed_load_s": ex["exposed_s"], "preload_benefit_s": ex["benefit_s"]}, scalar=True),
           "preload_break_even_tokens": be_pre, "decision_with_preload": with_wait,
           "effective_read_GBps": s.tier.effective_GBps(),
           "a_us_per_token": be["a_s_per_token"] * 1e6, "c_us_per_token": be["c_s_per_token"] * 1e6}
    if not s.is_plain or s.speculative is not None:  # keys added only where they speak
        h = of.hop_times(s.dep, s.tier, **s.dec, block_tokens=s.block_tokens)
        n = int(c["blocks"])
        rec.update({"pp": s.pp, "speculative": s.speculative.name if s.speculative else None,
                    "decoding": decoding_of(s), "storage_nodes": int(h["nodes"]),
                    "stage_bytes_MB": n * h["stage_B"] / 1e6, "node_bytes_MB": n * h["node_B"] / 1e6,
                    "draft_bytes_MB": n * h["draft_B"] / 1e6})
    return rec



def _tiers(tiers) -> list[StorageTier]:
    if tiers is None:
        return [presets.storage(n) for n in presets.names("storage")]
    return [presets.resolve("storage", t) for t in tiers]


def cost_curves(s: OffloadSetup, prefixes, tiers=None) -> pd.DataFrame:
    """Recompute and load time against prefix length, per tier [ms]: one row per (tier, prefix) with
    ``prefix_tokens``, ``tier``, ``recompute_ms``, ``load_ms``, ``winner``. Recompute is the same for every
    tier (of the cached full blocks)."""
    P = _check.real_array("prefixes", np.atleast_1d(prefixes), lo=0, hi=of.MAX_PREFIX, integer=True,
                          unit="tokens")
    frames = []
    for t in _tiers(tiers):
        ld = of.load_s(s.dep, t, P, **s.kw)
        rc = of.recompute_s(s.dep, ld["cached_tokens"], suffix_tokens=s.suffix_tokens, **s.dec)
        frames.append(pd.DataFrame({"prefix_tokens": P, "tier": t.name, "tier_label": t.label,
                                    **tidy({"recompute_s": rc, "load_s": ld["load_s"]}),
                                    "winner": np.where(ld["load_s"] < rc, "load", "recompute")}))
    return pd.concat(frames, ignore_index=True)


def break_even_table(s: OffloadSetup, tiers=None) -> pd.DataFrame:
    """One row per tier: ``break_even_tokens`` (the gate, exact), ``closed_form_tokens``, ``set_by``, the
    per-token costs a (recompute) and c (load) [us/token], the fixed load latency [ms], the tier's effective
    read bandwidth [GB/s], and its ``kind``, device ``read_GBps`` and ``latency_us`` (where a figure marks it)."""
    rows = []
    for t in _tiers(tiers):
        be = of.break_even(s.dep, t, suffix_tokens=s.suffix_tokens, **s.kw)
        rows.append({"tier": t.name, "tier_label": t.label, "break_even_tokens": be["tokens"],
                     "closed_form_tokens": be["closed_form_tokens"], "set_by": be["set_by"],
                     "also_pays_below": be["also_pays_below"], "a_us_per_token": be["a_s_per_token"] * 1e6,
                     "c_us_per_token": be["c_s_per_token"] * 1e6, "t_g0_ms": be["t_g0_s"] * 1e3,
                     "effective_read_GBps": t.effective_GBps(), "kind": t.kind, "read_GBps": t.read_GBps,
                     "latency_us": t.latency_us})
    return pd.DataFrame(rows)


#: columns :func:`break_even_shift` adds: plain decoding's values beside the setup's
SHIFT_COLUMNS = ("plain_break_even_tokens", "plain_closed_form_tokens", "plain_set_by", "plain_a_us_per_token",
                 "plain_c_us_per_token")
#: and the recompute per token of both at one prefix (``ref_tokens``: plain decoding's break-even, at most 2^20)
SHIFT_REF_COLUMNS = ("ref_tokens", "recompute_us_per_token_at_ref", "plain_recompute_us_per_token_at_ref")


def break_even_shift(s: OffloadSetup, table: pd.DataFrame | None = None, tiers=None) -> pd.DataFrame:
    """:func:`break_even_table` of ``s`` (``table``, when the caller has it) with plain decoding's break-even and
    per-token costs beside each tier's (:data:`SHIFT_COLUMNS`, from :func:`plain` of ``s``): how a pipeline or a
    draft layer moves the break-even. The closed form says how: a pipeline whose stages sit on different nodes
    divides c by the nodes' share and adds its stage-to-stage sends to a; a draft layer adds its bytes to c and
    its prefill to a (:data:`SHIFT_REF_COLUMNS` compare the recompute per token at one prefix, since each
    fitted a covers its own break-even's range). For a plain setup the table comes back as it is (nothing to compare, nothing recomputed)."""
    table = break_even_table(s, tiers) if table is None else table
    if s.is_plain:
        return table
    base = break_even_table(plain(s), list(table["tier"]) if tiers is None else tiers).set_index("tier")
    out = table.copy()
    for col in SHIFT_COLUMNS:
        out[col] = out["tier"].map(base[col[len("plain_"):]])
    # the fitted a of each break-even covers its own range; recompute per token at one prefix compares like with
    # like: at plain decoding's break-even (at most 2^20 tokens), exact on the model's curves
    B = s.block_tokens
    ref = np.minimum(np.where(np.isfinite(out["plain_break_even_tokens"]), out["plain_break_even_tokens"], 1 << 20),
                     (1 << 20) // B * B)
    out["ref_tokens"] = ref
    out["recompute_us_per_token_at_ref"] = of.recompute_s(s.dep, ref, suffix_tokens=s.suffix_tokens, **s.dec) / ref * 1e6
    out["plain_recompute_us_per_token_at_ref"] = of.recompute_s(s.dep, ref, suffix_tokens=s.suffix_tokens) / ref * 1e6
    return out


def regime_grid(s: OffloadSetup, prefixes, bandwidths_GBps) -> dict[str, np.ndarray]:
    """Who wins over prefix length x the tier's read bandwidth (its latency and second hop kept): arrays
    ``prefix_tokens`` [n], ``bandwidth_GBps`` [m], ``saving_ms`` [n, m] (recompute - load, > 0: loading wins)
    and ``load_wins`` [n, m]. Vectorised: 1,000 x 1,000 points in a few tens of milliseconds."""
    P = _check.real_array("prefixes", np.atleast_1d(prefixes), lo=0, hi=of.MAX_PREFIX, integer=True,
                          unit="tokens")
    bw = _check.real_array("bandwidths_GBps", np.atleast_1d(bandwidths_GBps), lo=0, lo_open=True, hi=1e5,
                           unit="GB/s")
    _check.grid_size("prefixes x bandwidths_GBps", (P.size, 1), (1, bw.size))
    B = s.block_tokens
    n = np.floor(P / B)
    rc = of.recompute_s(s.dep, n * B, suffix_tokens=s.suffix_tokens, **s.dec)
    c, t_g0 = of.linear_load(of.hop_times(s.dep, s.tier, block_tokens=B, read_GBps=bw, **s.dec), B,
                             s.pipelined)  # [m]
    g = np.where(n[:, None] > 0, t_g0[None, :] + c[None, :] * (n * B)[:, None], 0.0)
    saving = rc[:, None] - g
    return {"prefix_tokens": P, "bandwidth_GBps": bw, "saving_ms": saving * 1e3,
            "load_wins": (saving > 0) & (n[:, None] > 0)}


def break_even_map(s: OffloadSetup, bandwidths_GBps, latencies_us) -> dict[str, np.ndarray]:
    """Closed-form break-even prefix over the tier's read bandwidth x latency [tokens, rounded up to a block]:
    arrays ``bandwidth_GBps`` [m], ``latency_us`` [k], ``tokens`` [k, m] and ``set_by`` [k, m] ("latency" or
    "bandwidth"). The recompute curve is fitted once (a, b, t_f0 of :func:`~llmexplore.models.offload.cost.break_even`)."""
    bw = _check.real_array("bandwidths_GBps", np.atleast_1d(bandwidths_GBps), lo=0, lo_open=True, hi=1e5,
                           unit="GB/s")
    lat = _check.real_array("latencies_us", np.atleast_1d(latencies_us), lo=0, hi=1e7, unit="us")
    _check.grid_size("bandwidths_GBps x latencies_us", (lat.size, 1), (1, bw.size))
    B = s.block_tokens
    be = of.break_even(s.dep, s.tier, suffix_tokens=s.suffix_tokens, **s.kw)
    a, b, t_f0 = be["a_s_per_token"], be["b_s_per_token2"], be["t_f0_s"]
    c, t_g0 = of.linear_load(of.hop_times(s.dep, s.tier, block_tokens=B, read_GBps=bw[None, :],
                                          latency_us=lat[:, None], **s.dec), B, s.pipelined)  # [k, m]
    c = np.broadcast_to(c, t_g0.shape)
    tokens = np.maximum(np.ceil(of.closed_form_tokens(a, b, c, t_g0 - t_f0) / B), 1.0) * B
    return {"bandwidth_GBps": bw, "latency_us": lat, "tokens": tokens,
            "set_by": np.where(c < a, "latency", "bandwidth")}


def preload_curve(s: OffloadSetup, prefix_tokens: int, waits_ms) -> pd.DataFrame:
    """Against the queue wait [ms]: the exposed load of ``prefix_tokens`` after preloading during the wait,
    the load without preload, the host -> GPU hop alone, recompute, and the break-even prefix with preload."""
    P = _check.integer("prefix_tokens", prefix_tokens, lo=0, hi=of.MAX_PREFIX, unit="tokens")
    W = _check.real_array("waits_ms", np.atleast_1d(waits_ms), lo=0, hi=1e9, unit="ms") / 1e3
    ex = pre.exposed_load_s(s.dep, s.tier, P, W, **s.kw)
    cached = np.floor(P / s.block_tokens) * s.block_tokens
    rc = of.recompute_s(s.dep, cached, suffix_tokens=s.suffix_tokens, **s.dec)
    be = pre.break_even_preload(s.dep, s.tier, W, suffix_tokens=s.suffix_tokens, **s.kw)
    return pd.DataFrame({"queue_wait_ms": W * 1e3, **tidy({"exposed_s": ex["exposed_s"], "load_s": ex["load_s"],
                                                          "mem_s": ex["mem_s"], "benefit_s": ex["benefit_s"],
                                                          "recompute_s": np.broadcast_to(rc, W.shape)}),
                         "break_even_tokens": be})


def staging_replay(s: OffloadSetup, *, requests: int = 200, rate_per_s: float = 1.0, prefixes=(8192, 32768),
                   new_tokens: int = 256, budget_GB: float = 8.0, lookahead: int = 16, seed: int = 0) -> dict:
    """Replay a Poisson queue of ``requests`` at ``rate_per_s`` whose prompts reuse a cached prefix (drawn from
    ``prefixes``) plus ``new_tokens``, through one prefill instance with lookahead preloading under a staging
    budget of ``budget_GB``; and the same queue with no staging budget. A pipeline instance accepts a prompt
    every service time and answers it after its latency (:func:`~llmexplore.models.offload.cost.prefill_parts`).
    Returns ``occupancy`` (DataFrame:
    ``time_s``, ``staged_GB``) and ``requests`` (DataFrame per request: ``prefix_tokens``, ``ttft_ms`` with and
    without preloading, ``preloaded``, ``recomputed``)."""
    requests = _check.integer("requests", requests, lo=1, hi=5000)
    rate = _check.number("rate_per_s", rate_per_s, lo=0, lo_open=True, hi=1e6, unit="1/s")
    budget = _check.number("budget_GB", budget_GB, lo=0, hi=1e6, unit="GB") * 1e9
    pref = _check.real_array("prefixes", np.atleast_1d(prefixes), lo=0, hi=of.MAX_PREFIX, integer=True)
    new_tokens = _check.integer("new_tokens", new_tokens, lo=1, hi=1 << 20, unit="tokens")
    rng = np.random.default_rng(_check.integer("seed", seed, lo=0, hi=2**32 - 1))
    arrivals = np.cumsum(rng.exponential(1.0 / rate, requests))
    P = rng.choice(pref, requests)
    cached = np.floor(P / s.block_tokens) * s.block_tokens
    left = of.prefill_parts(s.dep, P + new_tokens, cached, **s.dec)  # the prefill left once the blocks are in
    kw = dict(block_tokens=s.block_tokens, lookahead=lookahead, suffix_tokens=s.suffix_tokens,
              latency_s=left["latency_s"], **s.dec)
    with_pre = pre.simulate_staging(s.dep, s.tier, arrivals, P, left["service_s"], budget, **kw)
    without = pre.simulate_staging(s.dep, s.tier, arrivals, P, left["service_s"], 0.0, **kw)
    occupancy = pd.DataFrame({"time_s": with_pre["time_s"], "staged_GB": with_pre["staged_B"] / 1e9})
    per = pd.DataFrame({"arrival_s": arrivals, "prefix_tokens": P, "ttft_ms": with_pre["ttft_s"] * 1e3,
                        "ttft_no_preload_ms": without["ttft_s"] * 1e3, "preloaded": with_pre["preloaded"],
                        "recomputed": with_pre["recomputed"]})
    return {"occupancy": occupancy, "requests": per, "budget_GB": budget / 1e9}


def gpus_vs_hit_ratio(s: OffloadSetup, hit_ratios, *, rate_per_s: float = 10.0, prompt_tokens: int = 8192,
                      ttft_slo_ms: float = 2000.0, statistic: str = "p90", tiers=None) -> pd.DataFrame:
    """What a prefix-cache hit ratio buys at a request rate: per tier (the setup's own first, then the preset
    tiers named in ``tiers`` to compare it with) and hit ratio h (the share of each prompt's tokens served
    from the tier), the prefill time per request (the gate picks load or recompute for the cached h x prompt),
    the GPU-seconds it saves, the instances (of pp x ``tp`` GPUs) needed so that the M/D/1 waiting time at
    ``statistic`` plus the prefill stays within ``ttft_slo_ms``, and the storage the cached tokens take (bytes
    per token x tokens per prompt, per distinct prompt). Columns ``tier`` and ``tier_label`` name the tier.

    A pipeline's instance is a server of service time D = its prefill's service (the stage's share, plus the
    load that holds each stage [assumption, as one instance is held at pp = 1]) whose requests leave after its
    latency: M/D/1 at D, TTFT = wait + latency (``prefill_ms``; ``service_ms`` is D). A request's GPU time is D
    on each of the instance's pp x tp GPUs."""
    h = _check.real_array("hit_ratios", np.atleast_1d(hit_ratios), lo=0, hi=1)
    rate = _check.number("rate_per_s", rate_per_s, lo=0, lo_open=True, hi=1e6, unit="1/s")
    S = _check.integer("prompt_tokens", prompt_tokens, lo=1, hi=of.MAX_PREFIX, unit="tokens")
    slo = _check.number("ttft_slo_ms", ttft_slo_ms, lo=0, lo_open=True, hi=1e9, unit="ms") / 1e3
    B = s.block_tokens
    P = np.floor(h * S / B) * B
    full = of.prefill_parts(s.dep, S, 0, **s.dec)
    rest = of.prefill_parts(s.dep, S, np.minimum(P, S - 1), **s.dec)
    kv_tok = s.dep.model.kv_bytes_per_token(s.dep.kv_dtype) + of.draft_block_bytes(
        s.dep.model, s.speculative, s.dep.kv_dtype, B) / B
    gpus = s.instance_gpus
    chosen = [s.tier] + [t for t in (_tiers(tiers) if tiers is not None else []) if t.name != s.tier.name]
    found: dict[tuple, float] = {}  # hit ratios below the break-even share one service time: search once
    frames = []
    for tier in dict((t.name, t) for t in chosen).values():
        ld = of.load_s(s.dep, tier, P, **s.kw)
        be = of.break_even(s.dep, tier, suffix_tokens=s.suffix_tokens, **s.kw)["tokens"]
        load = P >= be
        service = np.where(load, rest["service_s"] + ld["load_s"], full["service_s"])
        latency = np.where(load, rest["latency_s"] + ld["load_s"], full["latency_s"])
        instances = np.zeros(h.shape)
        for i, (D, T) in enumerate(zip(service, latency)):
            key = (float(D), float(T))
            if key not in found:
                c = max(1, int(np.ceil(rate * D * 1.0001)))
                while c < 100_000:
                    w = at_stat.queue_wait(statistic, rate / c, D)
                    if float(w) + T <= slo:
                        break
                    c += 1
                found[key] = c if c < 100_000 else np.inf
            instances[i] = found[key]
        frames.append(pd.DataFrame({"tier": tier.name, "tier_label": tier.label, "hit_ratio": h, "cached_tokens": P,
                                    "loaded": load,
                                    **tidy({"prefill_s": latency, "service_s": service,
                                            "saved_gpu_s": (full["service_s"] - service) * gpus}),
                                    "instances": instances, "gpus": instances * gpus,
                                    "storage_GB_per_prompt": P * kv_tok / 1e9}))
    return pd.concat(frames, ignore_index=True)


def best_saving_tier(saved: pd.DataFrame, hit_ratio: float) -> str:
    """The tier that saves the most prefill GPU time at ``hit_ratio`` (``saved``: :func:`saved_by_tier`, with
    ``hit_ratio`` among its rows): the comparison a hit-ratio figure draws next to the chosen tier."""
    rows = saved[np.isclose(saved["hit_ratio"], float(hit_ratio))]
    if rows.empty:
        raise SpecError(f"hit_ratio {hit_ratio} is not among the hit ratios of the table")
    return str(rows.loc[rows["saved_gpu_ms"].idxmax(), "tier"])


def precision_table(s: OffloadSetup, tiers=None) -> pd.DataFrame:
    """The break-even per tier for the setup's own weight and KV dtypes and with FP8 KV, FP8 weights, or both
    (one row per variant and tier): ``variant``, ``weight_dtype``, ``kv_dtype``, ``tier``, ``tier_label``,
    ``break_even_tokens``, ``set_by``, the per-token costs a (recompute) and c (load) [us/token], and
    ``feasible`` / ``reason`` for a variant the GPU or model cannot run."""
    w0, k0 = s.dep.weight_dtype, s.dep.kv_dtype
    variants, seen = [], set()
    for label, w, k in (("as set", w0, k0), ("FP8 KV", w0, "fp8"), ("FP8 weights", "fp8", k0),
                        ("FP8 weights and KV", "fp8", "fp8")):
        if (w, k) not in seen:
            seen.add((w, k))
            variants.append((label, w, k))
    rows = []
    for label, w, k in variants:
        head = {"variant": label, "weight_dtype": w, "kv_dtype": k}
        try:
            v = dataclasses.replace(s, dep=dataclasses.replace(s.dep, weight_dtype=w, kv_dtype=k))
            table = break_even_table(v, tiers)
        except LlmexploreError as exc:
            rows.append({**head, "tier": None, "tier_label": None, "break_even_tokens": np.nan, "set_by": None,
                         "a_us_per_token": np.nan, "c_us_per_token": np.nan, "feasible": False,
                         "reason": str(exc)})
            continue
        for r in table.to_dict("records"):
            rows.append({**head, "tier": r["tier"], "tier_label": r["tier_label"],
                         "break_even_tokens": r["break_even_tokens"], "set_by": r["set_by"],
                         "a_us_per_token": r["a_us_per_token"], "c_us_per_token": r["c_us_per_token"],
                         "feasible": True, "reason": ""})
    return pd.DataFrame(rows)


def pool_queue(s: OffloadSetup, rate_per_s: float, *, prompt_tokens: int = 8192, hit_ratio: float = 0.0,
               ttft_slo_ms: float = 2000.0, statistic: str = "p90") -> dict:
    """The prefill pool of :func:`gpus_vs_hit_ratio` at one hit ratio and the queue wait in it: ``instances``
    (of pp x ``tp`` GPUs, sized so that the M/D/1 wait at ``statistic`` plus the prefill stays within the SLO),
    ``gpus``, ``instance_rate_per_s`` (each instance's share of ``rate_per_s``), ``service_ms`` (one prefill,
    load included: how often the instance accepts a prompt, a pipeline's stage share), ``latency_ms`` (the
    prefill's latency, equal at pp = 1), ``utilisation`` and the waits ``mean_wait_ms`` and ``p90_wait_ms`` (M/D/1, ``inf`` when
    no pool meets the SLO): the time a waiting request's blocks have to be preloaded."""
    h = _check.probability("hit_ratio", hit_ratio)
    row = gpus_vs_hit_ratio(s, [h], rate_per_s=rate_per_s, prompt_tokens=prompt_tokens, ttft_slo_ms=ttft_slo_ms,
                            statistic=statistic).iloc[0]
    n, D = float(row["instances"]), float(row["service_ms"]) / 1e3
    lam = float(rate_per_s) / n if np.isfinite(n) else np.inf
    waits = {}
    for stat in ("mean", "p90"):
        waits[f"{stat}_wait_ms"] = float(at_stat.queue_wait(stat, lam, D)) * 1e3 if np.isfinite(lam) else np.inf
    return {"hit_ratio": h, "prompt_tokens": int(prompt_tokens), "cached_tokens": float(row["cached_tokens"]),
            "loaded": bool(row["loaded"]), "instances": n, "gpus": float(row["gpus"]),
            "instance_rate_per_s": lam, "service_ms": D * 1e3, "latency_ms": float(row["prefill_ms"]),
            "utilisation": lam * D if np.isfinite(lam) else np.inf,
            **waits, "statistic": statistic, "ttft_slo_ms": float(ttft_slo_ms)}


def saved_by_tier(s: OffloadSetup, hit_ratios, *, prompt_tokens: int = 8192, tiers=None) -> pd.DataFrame:
    """The prefill GPU time a hit ratio saves per request, per tier (no queueing): for each tier and hit ratio
    h the gate loads the h x prompt cached tokens (full blocks) or recomputes them; ``prefill_ms`` (one
    request, load included), ``saved_gpu_ms`` (GPU-milliseconds over the ``tp`` GPUs against no cache),
    ``loaded``, ``cached_tokens`` and ``break_even_tokens``. With a pipeline ``prefill_ms`` is the latency and
    the GPU time the service time on each of its pp x tp GPUs (:func:`gpus_vs_hit_ratio`)."""
    h = _check.real_array("hit_ratios", np.atleast_1d(hit_ratios), lo=0, hi=1)
    S = _check.integer("prompt_tokens", prompt_tokens, lo=1, hi=of.MAX_PREFIX, unit="tokens")
    B = s.block_tokens
    P = np.floor(h * S / B) * B
    full = {k: float(v) for k, v in of.prefill_parts(s.dep, S, 0, **s.dec).items()}
    rest = of.prefill_parts(s.dep, S, np.minimum(P, S - 1), **s.dec)
    frames = []
    for t in _tiers(tiers):
        ld = of.load_s(s.dep, t, P, **s.kw)
        be = of.break_even(s.dep, t, suffix_tokens=s.suffix_tokens, **s.kw)["tokens"]
        load = (P >= be) & (P > 0)
        service = np.where(load, rest["service_s"] + ld["load_s"], full["service_s"])
        latency = np.where(load, rest["latency_s"] + ld["load_s"], full["latency_s"])
        frames.append(pd.DataFrame({"hit_ratio": h, "tier": t.name, "tier_label": t.label, "cached_tokens": P,
                                    "loaded": load, "break_even_tokens": be,
                                    **tidy({"prefill_s": latency, "saved_gpu_s": (full["service_s"] - service)
                                            * s.instance_gpus})}))
    return pd.concat(frames, ignore_index=True)


#: requests the savings of :func:`saved_usd` are counted over
SAVED_PER_REQUESTS = 1_000_000


def saved_usd(saved: pd.DataFrame, s: OffloadSetup, hit_ratio: float, price_tier: str = DEFAULT_PRICE_TIER) -> dict:
    """What the prefill GPU time a hit ratio saves (:func:`saved_by_tier`'s ``saved_gpu_ms``, per request) is
    worth at ``price_tier``'s price of the setup's GPU (``data/prices.yaml``): ``usd_per_million_requests``,
    ``{storage tier: USD}`` = saved GPU-seconds x 10^6 x USD per GPU-hour / 3600 (0 where the gate recomputes;
    negative where loading costs more GPU time, a pipeline's loads holding every stage). Also the price tier,
    the GPU, its price and date, and the saved GPU-seconds per request; the price and the dollars are None /
    empty where the tier has no price for the GPU. UnknownPresetError for an unknown tier."""
    h = _check.probability("hit_ratio", hit_ratio)
    rows = saved[np.isclose(saved["hit_ratio"].to_numpy(float), h)]
    gpu_s = dict(zip(rows["tier"], rows["saved_gpu_ms"].astype(float) / 1e3))
    price = pricing.tier_price(price_tier, s.dep.hardware.name)
    usd = ({t: float(co.usd_of_gpu_seconds(v * SAVED_PER_REQUESTS, price.usd_per_gpu_hour)) for t, v in gpu_s.items()}
           if price is not None else {})
    return {"price_tier": price_tier, "gpu": s.dep.hardware.name, "hit_ratio": h,
            "usd_per_gpu_hour": None if price is None else price.usd_per_gpu_hour,
            "date": None if price is None else price.date, "saved_gpu_s_per_request": gpu_s,
            "usd_per_million_requests": usd}


#: columns of a table of measured against modelled load times (one row per request)
MEASURED_COLUMNS = ("modelled_ms", "measured_ms")


def measured_load(result=None) -> pd.DataFrame | None:
    """Measured against modelled load times of a replay on a real disk as a table (``modelled_ms``,
    ``measured_ms`` and any other per-request columns), or None when there is none.

    ``result``: a DataFrame, a mapping of per-request arrays, or a list of per-request dicts, with the times
    under ``modelled_ms``/``measured_ms`` (or ``modelled_load_ms``/``measured_load_ms``, or the same in
    seconds, ``*_s``). Requests that did not load (recomputed, or a cache miss) may carry NaN and are dropped.
    With no ``result``, None: the notebook then explains how to produce one (``llmexplore calibrate-disk``
    and the storage replay)."""
    if result is None:
        return None
    try:
        df = result.copy() if isinstance(result, pd.DataFrame) else pd.DataFrame(result)
    except (TypeError, ValueError) as exc:
        raise SpecError(f"result must be a table of per-request load times, got {type(result).__name__}: "
                        f"{exc}") from None
    for want in MEASURED_COLUMNS:
        if want in df:
            continue
        stem = want[: -len("_ms")]
        for alt, scale in ((f"{stem}_load_ms", 1.0), (f"{stem}_s", 1e3), (f"{stem}_load_s", 1e3)):
            if alt in df:
                df[want] = df[alt].astype(float) * scale
                break
        else:
            raise SpecError(f"result must have a column {want!r} (or {stem}_load_ms, {stem}_s), got "
                            f"{sorted(map(str, df.columns))}")
    df = df[np.isfinite(df["modelled_ms"].astype(float)) & np.isfinite(df["measured_ms"].astype(float))]
    return df.reset_index(drop=True)


def block_grid(block_tokens: int, hi_tokens: int) -> np.ndarray:
    """Every whole-block prefix from one block to ``hi_tokens`` [tokens]: block_tokens, 2 block_tokens, ...
    (a curve drawn block by block, near the break-even)."""
    block = _check.integer("block_tokens", block_tokens, lo=1, hi=1 << 16)
    hi = _check.integer("hi_tokens", hi_tokens, lo=block, hi=100_000 * block)
    return np.arange(block, hi + 1, block)


def grid_with(lo: float, hi: float, n: int, *marks, log: bool = False) -> np.ndarray:
    """``n`` evenly (``log``: log-) spaced values from ``lo`` to ``hi`` together with the finite ``marks`` (sorted,
    unique): the axis of a curve or map that must pass exactly through the values a notebook marks on it.
    ``hi`` grows to 1.2 x the largest mark when a mark lies beyond it (marks below ``lo`` are kept as given)."""
    lo = _check.number("lo", lo, lo=0, lo_open=log)
    hi = _check.number("hi", hi, lo=lo, lo_open=True)
    n = _check.integer("n", n, lo=2, hi=100_000)
    m = np.array([float(x) for x in marks if x is not None and np.isfinite(float(x))], dtype=float)
    if log:
        m = m[m > 0]
    top = max(hi, 1.2 * float(m.max())) if m.size and m.max() > hi else hi
    base = np.geomspace(lo, top, n) if log else np.linspace(lo, top, n)
    return np.unique(np.r_[base, m])


#: where the storage package's replay is looked up (module, function): it replays a trace against real KV
#: blocks written under a scratch directory and returns per-request measured and modelled load times
REPLAY_ENTRY = ("llmexplore.storage.replay", "replay_for_notebook")


def measured_replay(s: OffloadSetup, **kwargs) -> pd.DataFrame | None:
    """Measured against modelled load times from a replay that reads real blocks on this machine's disk
    (:func:`measured_load` of its result), or None while ``llmexplore.storage`` provides no replay
    (:data:`REPLAY_ENTRY`; called as ``replay_for_notebook(setup, workdir=<scratch directory>, **kwargs)``, the
    scratch directory removed afterwards)."""
    import importlib
    import tempfile

    module, name = REPLAY_ENTRY
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None
    with tempfile.TemporaryDirectory(prefix="llmexplore-replay-") as work:
        return measured_load(fn(s, workdir=work, **kwargs))

"""MoE expert-parallelism sweeps: tidy tables built from :mod:`llmexplore.models.moe.decode`.

``layers`` is how many independent hot-expert placements each step averages over: 8 keep step times within
1% of all 58 DeepSeek-V3 MoE layers and make sweeps several times faster (see ``MoEDeployment``). One record
builder, :func:`moe_records`, makes the rows that the scenario table, the explorer and ``llmexplore moe``
all show.

Pipelines and speculative decoding (issue 21). Every function that prices time takes ``pp`` (pipeline stages,
each a tp x ep deployment of the same ``gpus``: pp x gpus GPUs in all) and ``speculative`` (a SpecDecode or a
preset name; :func:`decoding` builds both from the notebook's parameters, checked). ``batch`` is always the
instance's sequences: a pipeline deals them over pp micro-batches of ceil(batch/pp), a verify pass carries
k + 1 tokens of each. The rows then compare by ``tpot_ms``, the time per output token
(:func:`llmexplore.models.moe.decode.token_time`); ``step_ms`` is the iteration (the step, the ITL, the draft +
verify cycle), equal to ``tpot_ms`` for plain decoding, and the ``decoding`` column says which ('' plain,
'PP2', or the speculative preset with its accepted length). Per-MoE-layer times and load statistics are those of
one pass: the step, one micro-batch's step, or the verify pass. Plain decoding gives the numbers it always did.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .. import _check, presets
from ..errors import SpecError
from ..models.moe import decode as moe_model
from ..models.moe import eplb
from ..models.moe import routing
from ..models.moe.decode import MoEDeployment
from ..models.step import cost as co
from ..models.step.speculative import resolve_spec, user_spec
from . import pricing, shown_columns as _shown, tidy
from .pricing import DEFAULT_PRICE_TIER

__all__ = ["LAYERS", "layout_options", "scenario_splits", "config", "moe_records", "scenario_table",
           "step_vs_skew", "step_vs_batch", "rank_loads", "max_load_check", "redundancy_gain_pct", "comm_at_batch",
           "max_relative_load", "decoding", "decoding_of", "speedup_at_batch", "straggler_table", "check_tokens",
           "shown_columns", "priced", "usd_per_mtok_at_batch"]

LAYERS = 8
#: display unit of each time in the MoE records (per-layer times in us, whole-step times in ms)
_UNITS = {"moe_layer_s": "us", "routed_layer_s": "us", "dispatch_layer_s": "us", "combine_layer_s": "us"}


def layout_options(gpus: int, model: str = "deepseek-v3", gpu: str | None = None) -> list[tuple[str, int, int]]:
    """(label, tp, ep) for every split of ``gpus`` into tp x ep that the model (and, if given, the GPU's node
    size) allows: tp divides the expert width, ep the routed experts, and a TP group of an EP deployment fits
    in one node. Pure TP first."""
    gpus = _check.integer("gpus", gpus, lo=1, hi=moe_model.MAX_GPUS)
    m = presets.resolve("models", model)
    if not m.is_moe:
        raise SpecError(f"model {m.name!r} has no MoE layers (moe_layers = 0); MoE presets: "
                        f"{', '.join(n for n, x in presets.table('models').items() if x.is_moe)}")
    per_node = presets.resolve("hardware", gpu).scale_up_size if gpu is not None else None
    out = []
    for tp in sorted((d for d in range(1, gpus + 1) if gpus % d == 0), reverse=True):
        ep = gpus // tp
        if m.moe_intermediate % tp or m.routed_experts % ep:
            continue
        if per_node is not None and ep > 1 and per_node % tp:
            continue
        label = f"TP{tp}" if ep == 1 else (f"DPA+EP{ep}" if tp == 1 else f"TP{tp}xEP{ep}")
        out.append((label, tp, ep))
    return out


def scenario_splits(gpus: int, model="deepseek-v3", gpu: str | None = None) -> list[tuple[str, int, int]]:
    """The three splits the scenario compares, where the model and GPU allow them: pure TP over all GPUs,
    TP2 x EP (attention groups of two GPUs) and DPA + EP (one GPU per attention group)."""
    opts = layout_options(gpus, model, gpu)
    picked = [o for o in opts if o[1] in (gpus, 2, 1)]
    return picked or opts


def config(model="deepseek-v3", gpu="h200", gpus: int = 16, *, tp: int, ep: int, redundant: int = 0,
           balance: str | None = None, weight_dtype=None, layers: int | None = LAYERS, **kw) -> MoEDeployment:
    """A validated :class:`~llmexplore.models.moe.decode.MoEDeployment` (a thin wrapper with the sweep defaults:
    the model's released weight dtype, 8 sampled placements)."""
    return MoEDeployment.build(model, gpu, gpus, tp=tp, ep=ep, redundant=redundant, balance=balance,
                               weight_dtype=weight_dtype, layers=layers, **kw)


def decoding(md: MoEDeployment, pp=1, speculative=None, accepted_length=None) -> dict:
    """``{"pp": ..., "speculative": ...}`` for the functions of this module: ``speculative`` resolved and checked
    against the model with ``accepted_length`` in place of its acceptance when given
    (:func:`llmexplore.models.step.speculative.user_spec`), ``pp`` checked for ``md``'s GPUs
    (:func:`llmexplore.models.moe.decode.check_decoding`: the step engine's messages). SpecError naming the
    argument (``pp ...``, ``speculative ...``, ``accepted_length ...``)."""
    spec = user_spec(md.model, speculative, accepted_length)
    p, spec = moe_model.check_decoding(md, pp, spec)
    return {"pp": p, "speculative": spec}


def decoding_of(pp=1, speculative=None) -> str:
    """The ``decoding`` column: '' plain, 'PP2', or the speculative preset and its accepted length."""
    return moe_model.decoding_label(pp, resolve_spec(speculative))


def _plain(pp, speculative) -> bool:
    return pp == 1 and speculative is None


def moe_records(md: MoEDeployment, batch, context, skew, *, pp=1, speculative=None) -> list[dict]:
    """One record per batch (the instance's sequences): the time per output token and its parts, the MoE layer,
    dispatch and combine, stragglers, expected per-rank loads before (static) and after this placement, memory
    and feasibility.

    Keys: ``layout``, ``tp``, ``ep``, ``balance``, ``redundant_experts``, ``batch``, ``context``, ``skew``,
    ``feasible``, ``step_ms`` (the iteration), ``moe_layer_us``, ``routed_layer_us``, ``dispatch_layer_us``,
    ``combine_layer_us`` (one pass's), ``comm_moe_ms``, ``attention_ms``, ``comm_ms`` (per output token),
    ``time_straggler``, ``load_straggler``, ``expected_imbalance``, ``load_max_over_mean_before`` / ``_after``,
    ``distinct_ranks``, ``tokens_per_s``, ``weights_GB``, ``memory_GB``, ``usable_GB``; and ``decoding``,
    ``tpot_ms``, ``tokens_per_step``, ``draft_ms``, ``hops_ms``, ``stall_ms`` (per output token),
    ``draft_weights_GB``, ``draft_kv_GB``, ``gpus`` (the instance's: pp x tp x ep). With a pipeline or speculative
    decoding also ``plain_ms`` (the plain step of one stage at the same batch), ``speedup`` (``plain_ms`` /
    ``tpot_ms``) and ``plain_load_straggler``.
    """
    batches = _check.real_array("batch", np.atleast_1d(batch) if batch is not None else batch, lo=1, hi=1 << 24,
                                integer=True)
    context = _check.integer("context", context, lo=1, hi=1 << 30)
    skew = _check.number("skew", skew, lo=1.0)
    r = moe_model.token_time(md, batches, context, skew=skew, pp=pp, speculative=speculative)
    mem = moe_model.token_memory(md, batches, context, pp=pp, speculative=speculative)
    plain = None if _plain(pp, speculative) else moe_model.step_time(md, batches, context, skew=skew)
    label = decoding_of(pp, speculative)
    before = after = np.ones(batches.shape)
    if md.ep > 1:
        shares = moe_model.expected_rank_shares(md, skew=skew)
        before = np.broadcast_to(np.mean(shares["imbalance_before"]), batches.shape)
        after = r["expected_imbalance"]
    times = tidy(r, _UNITS, keep=["iteration_s", "moe_layer_s", "routed_layer_s", "dispatch_layer_s",
                                  "combine_layer_s", "comm_moe_s", "attention_s", "comm_s", "tpot_s", "draft_s",
                                  "hops_s", "stall_s"])
    times["step_ms"] = times.pop("iteration_ms")
    sizes = tidy(mem, keep=["weights_B", "total_B", "usable_B", "draft_weights_B", "draft_kv_B"])
    records = []
    for i, bb in enumerate(batches):
        def at(a):
            return float(np.broadcast_to(a, batches.shape)[i])
        rec = {
            "layout": md.label(), "tp": md.tp, "ep": md.ep, "balance": md.balance,
            "redundant_experts": md.redundant, "batch": int(bb), "context": context, "skew": skew,
            "feasible": bool(np.broadcast_to(mem["feasible"], batches.shape)[i]),
            **{k: at(times[k]) for k in ("step_ms", "moe_layer_us", "routed_layer_us", "dispatch_layer_us",
                                         "combine_layer_us", "comm_moe_ms", "attention_ms", "comm_ms")},
            "time_straggler": at(r["time_straggler"]), "load_straggler": at(r["load_straggler"]),
            "expected_imbalance": at(r["expected_imbalance"]), "load_max_over_mean_before": at(before),
            "load_max_over_mean_after": at(after), "distinct_ranks": at(r["distinct_ranks"]),
            "tokens_per_s": at(r["tokens_per_s"]), "weights_GB": at(sizes["weights_GB"]),
            "memory_GB": at(sizes["total_GB"]), "usable_GB": at(sizes["usable_GB"]),
            "decoding": label, "gpus": pp * md.gpus, "tpot_ms": at(times["tpot_ms"]),
            "tokens_per_step": at(r["tokens_per_step"]), "draft_ms": at(times["draft_ms"]),
            "hops_ms": at(times["hops_ms"]), "stall_ms": at(times["stall_ms"]),
            "draft_weights_GB": at(sizes["draft_weights_GB"]), "draft_kv_GB": at(sizes["draft_kv_GB"]),
        }
        if plain is not None:
            rec.update(plain_ms=at(plain["step_s"]) * 1e3, speedup=at(plain["step_s"]) / at(r["tpot_s"]),
                       plain_load_straggler=at(plain["load_straggler"]))
        records.append(rec)
    return records


def scenario_table(model="deepseek-v3", gpu: str = "h200", gpus: int = 16, *, batch=(64, 256, 1024, 4096),
                   context: int = 2048, skew: float = 2.6, redundant=(16, 32), layers: int | None = LAYERS,
                   weight_dtype=None, kv_dtype="bf16", runtime="default", pp=1, speculative=None) -> pd.DataFrame:
    """``model`` on ``gpus`` GPUs: pure TP vs TP2 x EP vs DPA + EP (:func:`scenario_splits`), each EP split with
    a static placement, EPLB without redundancy and EPLB with each count in ``redundant``; one row per
    configuration and batch (:func:`moe_records`, decoded as ``pp`` and ``speculative`` say: each split is one
    stage of a pipeline of ``pp``). Redundant counts that the EP degree does not divide (E + r) are skipped."""
    redundant = [_check.integer("redundant", r, lo=0, hi=moe_model.MAX_REDUNDANT) for r in redundant]
    m = presets.resolve("models", model)
    records = []
    for _, tp, ep in scenario_splits(gpus, model, gpu):
        configs = [("none", 0)] if ep == 1 else [("none", 0), ("eplb", 0)] + [
            ("eplb", r) for r in redundant if (m.routed_experts + r) % ep == 0]
        for bal, red in configs:
            md = config(model, gpu, gpus, tp=tp, ep=ep, redundant=red, balance=bal, layers=layers,
                        weight_dtype=weight_dtype, kv_dtype=kv_dtype, runtime=runtime)
            records += moe_records(md, list(batch), context, skew, pp=pp, speculative=speculative)
    return pd.DataFrame(records)


def _balances(ep: int, redundant: int) -> list[tuple[str, str | None, int]]:
    if ep == 1:
        return [("no expert parallelism", None, 0)]
    rows = [("static placement", "none", 0), ("EPLB, no redundancy", "eplb", 0)]
    if redundant:
        rows.append((f"EPLB + {redundant} redundant", "eplb", redundant))
    return rows


def step_vs_skew(model="deepseek-v3", gpu="h200", gpus: int = 16, *, tp: int, ep: int, redundant: int = 32,
                 batch: int = 256, context: int = 2048, skews=np.linspace(1.0, 4.0, 25),
                 layers: int | None = LAYERS, weight_dtype=None, runtime="default", pp=1, speculative=None
                 ) -> pd.DataFrame:
    """Decode step (``step_ms``: the iteration; ``tpot_ms``: per output token) and MoE-layer time (one pass's) vs
    hot-expert skew for static, EPLB and EPLB + redundant placements, decoded as ``pp`` and ``speculative`` say;
    ``decoding`` names how."""
    skews = _check.real_array("skews", np.atleast_1d(skews), lo=1.0, hi=1e4)
    frames = []
    label_of = decoding_of(pp, speculative)
    for label, bal, red in _balances(ep, redundant):
        md = config(model, gpu, gpus, tp=tp, ep=ep, redundant=red, balance=bal, layers=layers,
                    weight_dtype=weight_dtype, runtime=runtime)
        r = moe_model.token_time(md, batch, context, skew=skews, pp=pp, speculative=speculative)
        fits = bool(np.all(moe_model.token_memory(md, batch, context, pp=pp, speculative=speculative)["feasible"]))
        cols = tidy(r, _UNITS, keep=["iteration_s", "moe_layer_s", "routed_layer_s", "time_straggler",
                                     "load_straggler", "tpot_s"])
        cols = {("step_ms" if k == "iteration_ms" else k): v for k, v in cols.items()}
        frames.append(pd.DataFrame({"skew": skews, "placement": label, "layout": md.label(),
                                    **{k: np.broadcast_to(v, skews.shape) for k, v in cols.items()},
                                    "feasible": fits, "decoding": label_of}))
    return pd.concat(frames, ignore_index=True)


def step_vs_batch(model="deepseek-v3", gpu="h200", gpus: int = 16, *, batches=(16, 64, 256, 1024, 4096),
                  context: int = 2048, skew: float = 2.6, layers: int | None = LAYERS,
                  weight_dtype=None, runtime="default", pp=1, speculative=None) -> pd.DataFrame:
    """Per MoE layer: routed GEMMs, dispatch and combine time vs batch (the instance's sequences), for every
    tp x ep split (static), of one pass: the step, one micro-batch's step of a pipeline of ``pp``, or the verify
    pass of ``speculative`` (k + 1 tokens per sequence); ``step_ms`` the iteration, ``tpot_ms`` per output
    token."""
    b = _check.real_array("batches", np.atleast_1d(batches), lo=1, hi=1 << 24, integer=True)
    frames = []
    label_of = decoding_of(pp, speculative)
    for label, tp, ep in layout_options(gpus, model, gpu):
        md = config(model, gpu, gpus, tp=tp, ep=ep, layers=layers, weight_dtype=weight_dtype, runtime=runtime)
        r = moe_model.token_time(md, b, context, skew=skew, pp=pp, speculative=speculative)
        mem = moe_model.token_memory(md, b, context, pp=pp, speculative=speculative)
        cols = tidy(r, _UNITS, keep=["iteration_s", "routed_layer_s", "dispatch_layer_s", "combine_layer_s",
                                     "moe_layer_s", "tpot_s"])
        cols = {("step_ms" if k == "iteration_ms" else k): v for k, v in cols.items()}
        frames.append(pd.DataFrame({"batch": b, "layout": label, "tp": tp, "ep": ep,
                                    **{k: np.broadcast_to(v, b.shape) for k, v in cols.items()},
                                    "feasible": np.broadcast_to(mem["feasible"], b.shape), "decoding": label_of}))
    return pd.concat(frames, ignore_index=True)


def rank_loads(md: MoEDeployment, *, skew: float = 2.6) -> pd.DataFrame:
    """Expected share of routed tokens on each EP rank (mean over the placements' layers), before (static)
    and after this deployment's placement; 1/ep is perfect balance."""
    if md.ep == 1:
        raise SpecError("rank_loads needs expert parallelism (ep > 1)")
    sh = moe_model.expected_rank_shares(md, skew=skew)
    before = np.asarray(sh["before"]).reshape(-1, md.ep)
    after = np.asarray(sh["after"]).reshape(-1, md.ep)
    # the busiest rank differs by layer: report each layer's ranks sorted from busiest to idlest
    b = -np.sort(-before, axis=1).mean(axis=0)
    a = -np.sort(-after, axis=1).mean(axis=0)
    rank = np.arange(1, md.ep + 1)
    return pd.concat([
        pd.DataFrame({"rank_by_load": rank, "placement": "static", "share": b, "relative_load": b * md.ep}),
        pd.DataFrame({"rank_by_load": rank, "placement": md.label(), "share": a, "relative_load": a * md.ep}),
    ], ignore_index=True)


def max_load_check(md: MoEDeployment, *, skew: float = 2.6, tokens=(64, 256, 1024), trials: int = 200,
                   seed: int = 0) -> pd.DataFrame:
    """Expected maximum routed pairs per rank: the analytic approximation vs Monte Carlo of top-k routing."""
    lp = routing.layer_probs(routing.skew_probs(skew, md.model.routed_experts, md.model.experts_per_token), 1, seed)
    k = md.model.experts_per_token
    p2l = eplb.eplb_placement(lp, ranks=md.ep, redundant=md.redundant) if md.balance == "eplb" else None
    rows = []
    for n in tokens:
        a = routing.rank_load(lp, k, int(n), ranks=md.ep, phy2log=p2l)
        mc = routing.rank_load_mc(lp, k, int(n), ranks=md.ep, phy2log=p2l, trials=trials, seed=seed)
        am, mm = float(np.mean(a["max_pairs"])), float(np.mean(mc["max_pairs"]))
        rows.append({"tokens": int(n), "pairs_per_rank_mean": float(np.mean(a["mean_pairs"])),
                     "max_pairs_analytic": am, "max_pairs_monte_carlo": mm,
                     "monte_carlo_se": float(np.mean(mc["max_pairs_se"])), "error_pct": 100 * (am / mm - 1)})
    return pd.DataFrame(rows)


def redundancy_gain_pct(by_skew: pd.DataFrame, skew: float) -> float:
    """Saving [%] in the time per output token (the step, for plain decoding) of the redundant-expert placement
    over the static one at the skew point nearest ``skew`` in a :func:`step_vs_skew` table (negative: redundancy
    is slower)."""
    at = by_skew.loc[(by_skew["skew"] - skew).abs() == (by_skew["skew"] - skew).abs().min()]
    col = "tpot_ms" if "tpot_ms" in at else "step_ms"
    red = at[at["placement"].str.contains("redundant")][col]
    static = at[at["placement"] == "static placement"][col]
    if red.empty or static.empty:
        raise SpecError("redundancy_gain_pct needs a static and a redundant placement in the table")
    return float(100.0 * (1.0 - red.iloc[0] / static.iloc[0]))


def comm_at_batch(by_batch: pd.DataFrame, batch: int) -> dict[str, float]:
    """Dispatch + combine time per MoE layer [us] of each layout at one batch of a :func:`step_vs_batch`
    table."""
    at = by_batch[by_batch["batch"] == batch]
    return dict(zip(at["layout"], (at["dispatch_layer_us"] + at["combine_layer_us"]).astype(float)))


def priced(table: pd.DataFrame, gpu: str, tier: str = DEFAULT_PRICE_TIER) -> pd.DataFrame:
    """``table`` (rows of :func:`moe_records`, e.g. a :func:`scenario_table` at one batch) with what each row costs
    at ``tier``'s price of GPU preset ``gpu`` (``data/prices.yaml``; docs/models.md §8.7):

    - ``usd_per_hour`` [USD/h]: the row's GPUs (``gpus``: pp x tp x ep) x USD per GPU-hour;
    - ``usd_per_mtok_output`` [USD per 10^6 output tokens]: ``usd_per_hour`` / (3600 x ``tokens_per_s``) x 10^6
      (:func:`llmexplore.models.step.cost.usd_per_mtok`), ``tokens_per_s`` being the instance's output tokens per
      second at the row's batch, batch x tokens per step / iteration = batch / ``tpot_ms``
      (:func:`llmexplore.models.moe.decode.token_time`). NaN where the row does not fit in memory (its
      ``feasible`` column says why there is no price per token).

    Returned unchanged, without the cost columns, where the tier has no price for the GPU (the findings then say
    :func:`~llmexplore.sweeps.pricing.not_priced`); UnknownPresetError naming the known tiers for an unknown
    ``tier``."""
    price = pricing.tier_price(tier, presets.resolve("hardware", gpu).name)
    if price is None:
        return table
    out = table.copy()
    out["usd_per_hour"] = out["gpus"].astype(float) * price.usd_per_gpu_hour
    per_mtok = co.usd_per_mtok(out["usd_per_hour"].to_numpy(float), out["tokens_per_s"].to_numpy(float))
    out["usd_per_mtok_output"] = np.where(out["feasible"].to_numpy(bool), per_mtok, np.nan)
    return out


def usd_per_mtok_at_batch(table: pd.DataFrame) -> dict[str, float]:
    """``{layout: USD per million output tokens}`` of a :func:`priced` table ({} where it has no price: the tier
    does not price the GPU); NaN for a layout that does not fit."""
    if "usd_per_mtok_output" not in table:
        return {}
    return dict(zip(table["layout"], table["usd_per_mtok_output"].astype(float)))


#: columns that only speak for a pipeline or speculative decoding (left out of a plain table's display)
_DECODING_COLUMNS = {"gpus", "tokens_per_step", "tpot_ms", "speedup", "draft_ms", "hops_ms", "stall_ms",
                     "draft_weights_GB", "draft_kv_GB", "plain_ms", "plain_load_straggler"}


def shown_columns(table: pd.DataFrame, columns) -> list[str]:
    """``columns`` of a :func:`moe_records` table to display: those of a pipeline or speculative decoding
    (``tpot_ms``, ``speedup``, ``draft_ms``, ``gpus``, ...) only where they say something
    (:func:`llmexplore.sweeps.shown_columns`; the comparison with plain decoding whenever it is there)."""
    return _shown(table, columns, _DECODING_COLUMNS, always=("speedup", "plain_ms", "plain_load_straggler"))


def speedup_at_batch(scenario: pd.DataFrame, batch: int) -> dict[str, float]:
    """Plain step over time per output token of each configuration at one batch of a :func:`scenario_table`
    decoded with a pipeline or speculatively ({} for plain decoding: it has no ``speedup`` column)."""
    if "speedup" not in scenario:
        return {}
    at = scenario[scenario["batch"] == batch]
    return dict(zip(at["layout"], at["speedup"].astype(float)))


def straggler_table(md: MoEDeployment, batch: int, context: int, *, skew: float = 2.6, pp=1,
                    speculative=None) -> pd.DataFrame:
    """The busiest EP rank of one MoE layer at ``batch`` sequences, plain and as ``pp`` / ``speculative`` decode
    (one row each; one row for plain decoding): ``routed_tokens`` (tokens the pass routes: the batch, a
    micro-batch of ceil(batch/pp), or k + 1 per sequence in a verify pass), ``load_straggler`` (E[max pairs] /
    mean: routing noise on top of the placement), ``expected_imbalance`` (the placement's alone, noise-free),
    ``time_straggler`` (busiest rank's routed GEMMs / the mean rank's)."""
    batch = _check.integer("batch", batch, lo=1, hi=1 << 24)
    rows = []
    ways = [("plain", 1, None)] + ([] if _plain(pp, speculative) else [(decoding_of(pp, speculative), pp,
                                                                        speculative)])
    for name, p, spec in ways:
        r = moe_model.token_time(md, batch, context, skew=skew, pp=p, speculative=spec)
        sp = resolve_spec(spec)
        tokens = batch * sp.verify_width if sp is not None else math.ceil(batch / p)
        rows.append({"decoding": name, "layout": md.label(), "routed_tokens": tokens,
                     "load_straggler": float(r["load_straggler"]), "expected_imbalance": float(r["expected_imbalance"]),
                     "time_straggler": float(r["time_straggler"])})
    return pd.DataFrame(rows)


def check_tokens(tokens, straggler: pd.DataFrame, *, most: int = 1 << 16) -> list[int]:
    """The token counts of the Monte Carlo check (:func:`max_load_check`): ``tokens``, and the tokens one pass of
    a pipeline or a verify pass routes at the notebook's batch (the last row of a :func:`straggler_table`) when
    they differ from plain decoding's and are at most ``most``."""
    out = [int(t) for t in tokens]
    if len(straggler) > 1:
        n = int(straggler["routed_tokens"].iloc[-1])
        if n <= most and n not in out:
            out.append(n)
    return out


def max_relative_load(loads: pd.DataFrame) -> dict[str, float]:
    """Busiest rank's load / mean load per placement of a :func:`rank_loads` table."""
    return loads.groupby("placement", sort=False)["relative_load"].max().astype(float).to_dict()


# ---- notebook parameters ---------------------------------------------------------------------------------


def batch_axis(batches, batch: int) -> list[int]:
    """The batch axis of the notebook: ``batches`` plus the chosen ``batch``, sorted, without repeats."""
    values = [_check.integer("BATCHES", b, lo=1, hi=1 << 24) for b in list(batches)]
    return sorted({*values, _check.integer("BATCH", batch, lo=1, hi=1 << 24)})


def gpu_loads(md: MoEDeployment, *, skew: float = 2.6) -> pd.DataFrame:
    """Relative routed load per GPU of the expert layers, for any split: :func:`rank_loads` (busiest EP rank
    first, static and this placement) under expert parallelism; under pure TP every GPU holds a 1/tp slice of
    every expert and computes that slice for every routed token, so each of the ``tp`` GPUs carries exactly the
    mean load (one row per GPU, placement ``"no expert parallelism"``)."""
    if md.ep > 1:
        return rank_loads(md, skew=skew)
    _check.number("skew", skew, lo=1.0)
    n = int(md.tp)
    return pd.DataFrame({"rank_by_load": np.arange(1, n + 1), "placement": "no expert parallelism",
                         "share": np.full(n, 1.0 / n), "relative_load": np.ones(n)})

"""MoE decode on G GPUs: pure TP, TP x EP or DPA + EP, with skewed routing and EPLB (docs/models.md §4.8).

Question answered: how long does a decode step of an MoE model take on G GPUs under pure tensor parallelism,
TP x EP, or data-parallel attention + EP, when some experts are much hotter than others, and how much do
redundant experts placed by EPLB help? Routing laws, placements and per-rank loads come from
:mod:`.routing`; kernels are priced by the step engine (:mod:`..step.engine`).

Glossary: E routed experts, k experts per token, H hidden, I_e expert intermediate, R = ep EP ranks, N tokens
in the step (all attention groups), N_loc tokens of one attention group, P physical expert slots.

Dispatch / combine
    :mod:`.alltoall` (payloads, the busiest rank's time per byte, DeepEP's low-latency curves).
Layouts (G = tp x ep GPUs, ``MoEDeployment``)
    * ep = 1, tp = G: pure TP. Attention, dense FFN and every expert are split over all G GPUs (an expert's
      intermediate I_e/G per GPU); every GPU processes every token; per layer one AllReduce after attention
      and one after the MoE block (hierarchical across nodes).
    * tp > 1, ep > 1 ("TP2 x EP8" on 16 GPUs): the G GPUs form ep attention groups of tp GPUs (tp consecutive
      GPUs inside one node). Each group serves ceil(B/ep) sequences with attention, dense FFN, shared experts
      and LM head tensor-parallel over its tp GPUs (data-parallel across groups). For the MoE the group is one
      EP rank: it holds P/ep expert slots, each expert's intermediate split over the tp GPUs. GPU i of a
      group exchanges tokens with GPU i of the other groups; the partial expert outputs are summed by the
      group's AllReduce (shared with the shared expert).
    * tp = 1, ep = G: data-parallel attention + EP (DeepEP style): every GPU is an attention group and an
      EP rank; shared expert and dense layers replicated (DeepSeek: "MLA and shared experts DP").
    The non-MoE part of a step is exactly :func:`..step.decode.step_time` of a TP-``tp`` deployment serving one
    group's ceil(B/ep) sequences; its uniform-routing MoE parts are replaced by the ones here.
MoE layer time
    norm + router + shared expert + the routed grouped GEMMs of the busiest EP rank (two kernels, gate-up and
    down) + dispatch + combine (+ TP AllReduce); averaged over the MoE layers (each its own placement).
    Compute and communication do not overlap (no two-micro-batch overlap), as in :mod:`..step.decode`. The
    routed GEMMs are priced as the step engine prices them (:func:`..step.engine.moe_s`: the grouped GEMM's
    fitted curve, rows padded to its M tile) with this routing's expected hit experts: under pure TP that is
    the whole answer; under EP it prices the mean rank, and the busiest rank is that time x the straggler
    E[max over ranks] / mean of the hard-roofline affine form t = max(a_f X, w A + a_m X) (X pairs, A active
    slots of a rank), the form whose expected maximum has a closed form (:func:`..step.stats.expected_max_piecewise`).
One vocabulary with the step engine
    This wing is a view over :class:`..step.engine.Deployment` (``MoEDeployment.attn_dep``, the TP-``tp``
    group): every non-routed part and every collective is the step engine's, and with uniform routing the two
    agree: pure TP (ep = 1) equals :func:`..step.decode.step_time` of a ``moe_ep=1`` deployment to rounding,
    and under DPA + EP (tp = 1) the mean rank equals a rank of the engine's DPA step with DeepEP dispatch and
    data-parallel dense layers and LM head but for the engine's norm and router over the gathered batch
    (up to 4 %), the busiest rank being slower by the straggler (routing noise: 1.05 at 128 sequences x 32 ranks);
    ``tests/unit/models/moe/test_moe_engine_tie.py`` holds both. The planner prices MoE deployments with the step
    engine alone (uniform routing, every layout and prefill); this wing answers what the engine does not
    model: hot-expert skew, measured routing histograms, EPLB placements with redundant experts, and TP x EP
    attention groups.

Speed: everything broadcasts over batch, context and skew. Placements (EPLB) and their per-rank statistics
depend only on the routing shares and the placement, so they are memoised (:func:`clear_memo`); a skew sweep
is redrawn from the memo after a batch, context or hardware change (``benchmarks/bench_pd_moe.py`` measures
it). ``layers=8`` placements keep the step time within 1 % of all 58 and make a cold sweep several times
faster.

Pipelines and speculative decoding (issue 21; docs/models.md §4.8, "Per output token")
    :func:`token_time` and :func:`token_memory` price the time per output token and the worst GPU's memory of an
    instance that decodes plainly (:func:`step_time`, :func:`memory_per_gpu` exactly), in a pipeline of ``pp``
    stages, or speculatively, as :mod:`..step.per_token` does for the step engine. ``batch`` is always the
    instance's sequences. A pipeline's stage is this deployment's G = tp x ep GPUs, so the instance has pp x G
    GPUs; its B sequences are dealt over pp micro-batches of ceil(B/pp) (each dealt over the stage's ep attention
    groups), one micro-batch's step is :func:`step_time` at ceil(B/pp) with every routing and skew number of the
    wing, and ITL = max(cycle, pp x slowest stage) (:mod:`..step.pipeline`; the slowest stage is the one
    :func:`..step.pipeline.stage_model` builds: ceil(L/pp) layers, the MoE ones last, and the LM head). Speculative
    decoding's verify pass is :func:`step_time` with ``q_tokens`` = W = k + 1 (W B tokens routed, more distinct
    experts hit, the straggler of W B pairs); an MTP draft is one MoE layer priced by this wing with the target's
    skew, placement policy and split [assumption: its router is as skewed as the target's layers, with hot experts
    of its own]; a draft head is dense (the step engine on each attention group); TPOT = (draft + verify) / tau.
    Pipelines with speculative decoding are refused (:func:`..step.per_token.check_decoding`).

Infeasible points are not flagged here except by :func:`memory_per_gpu` (``feasible``); bad inputs raise
:class:`~llmexplore.errors.SpecError` naming the field, the value and the rule.

References: docs/models.md §1.1, §1.2, §4.4, §4.8; deepseek-ai/EPLB; deepseek-ai/DeepEP docs/legacy.md;
DeepSeek-V3 technical report arXiv 2412.19437.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from ... import _check
from ...deployment import MAX_GPUS, check_pp
from ...errors import SpecError
from ...specs import Hardware, ModelSpec, Runtime, SpecDecode
from ...units import dtype_bytes
from ..step import decode as att
from ..step import per_token, pipeline
from ..step import speculative as specdec
from . import alltoall, eplb, routing
from ..step import stats
from ..step.collectives import Fabric, allreduce_s, deepep_ll_bytes_per_selection, sendrecv_s
from ..step.engine import (EMB_BYTES, Deployment, check_batch_context, elementwise_s, gemm_s, kernel_rates, moe_s,
                           resolve_deployment)

__all__ = ["MoEDeployment", "step_time", "expected_rank_shares", "memory_per_gpu", "clear_memo", "BALANCE",
           "DISPATCH", "check_decoding", "decoding_label", "stage_deployment", "hop_link", "hop_s", "token_time",
           "token_memory", "TOKEN_PARTS"]

BALANCE = ("none", "eplb")
DISPATCH = ("rank", "expert")
_MEMO: dict = {}  # results of pure functions of (routing shares, placement), filled lazily; see _memo
_MEMO_SIZE = 32


def _memo(key, compute):
    """Memoise a pure result by a hashable key of all its inputs (FIFO, at most _MEMO_SIZE entries).

    Placements and their per-rank statistics depend only on the routing shares and the placement parameters,
    not on batch, context, hardware or links, so slider redraws that change those reuse them. Cached arrays
    are made read-only.
    """
    if key not in _MEMO:
        value = compute()
        for v in (value.values() if isinstance(value, dict) else (value,)):
            if isinstance(v, np.ndarray):
                v.flags.writeable = False
        while len(_MEMO) >= _MEMO_SIZE:
            _MEMO.pop(next(iter(_MEMO)))
        _MEMO[key] = value
    return _MEMO[key]


def clear_memo() -> None:
    """Forget memoised placements (for timing cold starts)."""
    _MEMO.clear()



# ---- deployments ---------------------------------------------------------------------------------------
MAX_REDUNDANT = 4096  # largest number of redundant expert slots accepted
MAX_MOE_POINTS = 1 << 24  # grid points x sampled layers x expert slots of one step_time call (its largest arrays)


@dataclass(frozen=True)
class MoEDeployment:
    """An MoE model on ``gpus`` = tp x ep GPUs (layouts in the module docstring).

    Build with :meth:`build`. ``ep = 1`` is pure TP over all GPUs; ``tp = 1`` is data-parallel attention + EP.
    ``balance="eplb"`` places ``redundant`` extra slots by EPLB on the expected loads; ``"none"`` is the
    contiguous static placement. ``layers`` (default: the model's MoE layers) is how many independent
    hot-expert placements are averaged; 8 change the step time by < 1 % and make a cold sweep ~7x faster.
    """

    model: ModelSpec
    hardware: Hardware
    runtime: Runtime
    fabric: Fabric
    gpus: int
    tp: int
    ep: int
    redundant: int = 0
    balance: str = "none"
    weight_dtype: str | None = None
    kv_dtype: str = "bf16"
    act_dtype: str = "bf16"
    q_tokens: int = 1
    dispatch: str = "rank"
    layers: int | None = None
    seed: int = 0
    #: query tokens per sequence that need logits (None: all ``q_tokens``, a verify pass; 1: a draft step)
    logits_tokens: int | None = None

    @classmethod
    def build(cls, model="deepseek-v3", gpu="h200", gpus: int = 16, *, tp: int, ep: int, redundant: int = 0,
              balance: str | None = None, runtime="default", weight_dtype: str | None = None,
              kv_dtype: str = "bf16", q_tokens: int = 1, dispatch: str = "rank", layers: int | None = None,
              seed: int = 0, scale_up_link=None, scale_out_link=None) -> "MoEDeployment":
        """Resolve presets (names or specs) and validate. ``balance`` defaults to "eplb" if ``redundant``;
        ``weight_dtype`` to the dtype the model's weights are released in."""
        m, hw, rt, fabric = resolve_deployment(model, gpu, runtime, scale_up_link, scale_out_link)
        if balance is None:
            balance = "eplb" if redundant else "none"
        return cls(model=m, hardware=hw, runtime=rt, fabric=fabric, gpus=gpus, tp=tp, ep=ep,
                   redundant=redundant, balance=balance, weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                   q_tokens=q_tokens, dispatch=dispatch, layers=m.moe_layers if layers is None else layers,
                   seed=seed)

    def __post_init__(self) -> None:
        m = self.model
        if not m.is_moe:
            raise SpecError(f"model {m.name!r} has no MoE layers (moe_layers = 0)")
        G = _check.integer("gpus", self.gpus, lo=1, hi=MAX_GPUS)
        tp = _check.integer("tp", self.tp, lo=1, hi=MAX_GPUS)
        ep = _check.integer("ep", self.ep, lo=1, hi=MAX_GPUS)
        if tp * ep != G:
            raise SpecError(f"tp * ep must equal gpus: tp={tp}, ep={ep}, gpus={G}")
        redundant = _check.integer("redundant (extra expert slots)", self.redundant, lo=0, hi=MAX_REDUNDANT)
        _check.choice("balance", self.balance, BALANCE)
        _check.choice("dispatch", self.dispatch, DISPATCH)
        layers = _check.integer("layers", m.moe_layers if self.layers is None else self.layers, lo=1,
                                hi=m.moe_layers)
        seed = _check.integer("seed", self.seed, lo=0, hi=2**63 - 1)
        for name, v in (("gpus", G), ("tp", tp), ("ep", ep), ("redundant", redundant), ("layers", layers),
                        ("seed", seed), ("weight_dtype", m.weight_dtype if self.weight_dtype is None
                                         else self.weight_dtype)):
            object.__setattr__(self, name, v)
        E = m.routed_experts
        if ep == 1 and self.redundant:
            raise SpecError(f"redundant must be 0 without expert parallelism (ep = 1: every GPU already holds a "
                            f"slice of every expert), got {self.redundant}")
        if self.redundant and self.balance != "eplb":
            raise SpecError(f"balance must be 'eplb' with redundant > 0 (the replicas are placed by EPLB), got "
                            f"{self.balance!r} with redundant = {self.redundant}")
        if (E + self.redundant) % ep:
            raise SpecError(f"ep ({ep}) must divide routed experts + redundant ({E} + {self.redundant} = "
                            f"{E + self.redundant})")
        if m.moe_intermediate % tp:
            raise SpecError(f"tp ({tp}) must divide the expert intermediate size of {m.name} "
                            f"({m.moe_intermediate})")
        Gn = self.fabric.gpus_per_node
        if ep > 1 and (tp > Gn or Gn % tp):
            raise SpecError(f"tp ({tp}) must divide the GPUs per node ({Gn}) when ep > 1: a TP group lives "
                            f"inside one node")
        if G > Gn and G % Gn:
            raise SpecError(f"gpus ({G}) spanning nodes must be a multiple of the GPUs per node ({Gn})")
        _ = self.attn_dep  # validates heads, dtypes, q_tokens against the attention model

    # ---- derived ----------------------------------------------------------------------------------------
    @property
    def attn_dep(self) -> Deployment:
        """The TP-``tp`` attention deployment of one attention group (non-MoE parts of the step)."""
        return Deployment(model=self.model, hardware=self.hardware, ranks=self.tp, runtime=self.runtime,
                          fabric=self.fabric, weight_dtype=self.weight_dtype, kv_dtype=self.kv_dtype,
                          act_dtype=self.act_dtype, q_tokens=self.q_tokens, logits_tokens=self.logits_tokens)

    @property
    def slots(self) -> int:
        """Physical expert slots P = E + redundant."""
        return self.model.routed_experts + self.redundant

    @property
    def slots_per_rank(self) -> int:
        return self.slots // self.ep

    @property
    def ranks_per_node(self) -> int:
        """EP ranks per node (GPUs per node / tp), at most ep; all of them without a scale-out link."""
        if self.fabric.scale_out is None:
            return self.ep
        return min(self.ep, max(1, self.fabric.gpus_per_node // self.tp))

    def label(self) -> str:
        if self.ep == 1:
            name = f"TP{self.tp}"
        elif self.tp == 1:
            name = f"DPA+EP{self.ep}"
        else:
            name = f"TP{self.tp}xEP{self.ep}"
        if self.ep > 1:
            name += f" +{self.redundant} EPLB" if self.balance == "eplb" else " static"
        return name

    def placement(self, layer_p: np.ndarray):
        """phy2log for the expected loads ``layer_p`` [..., L, E] (None = contiguous identity)."""
        if self.ep == 1 or self.balance == "none":
            return None
        groups = self.model.expert_groups
        nodes = math.ceil(self.ep / self.ranks_per_node)
        return eplb.eplb_placement(layer_p, ranks=self.ep, redundant=self.redundant, groups=groups,
                                      nodes=nodes)


def _check_routing(md: MoEDeployment, skew, probs, *shapes) -> tuple:
    """(skew, probs) validated: skew an array of real numbers >= 1 (unless a histogram ``probs`` is given),
    probs one of real numbers >= 0; the grid with ``shapes`` small enough (SpecError before allocating)."""
    if probs is None:
        skew = _check.real_array("skew (max/mean expert load)", skew, lo=1.0)
        shapes = (*shapes, skew.shape)
    else:
        probs = _check.real_array("probs", probs, lo=0.0)
        E = md.model.routed_experts
        if probs.ndim not in (1, 2) or probs.shape[-1] != E:
            raise SpecError(f"probs must have shape [E] or [layers, E] with E = {E} for {md.model.name}, got "
                            f"shape {probs.shape}")
    _check.grid_size("batch, context and skew" if probs is None else "batch and context", *shapes,
                     limit=MAX_MOE_POINTS, factor=md.layers * md.slots)
    return skew, probs


def _layer_probs_for(md: MoEDeployment, skew, probs) -> tuple[np.ndarray, np.ndarray]:
    """(layer shares [..., L, E], skew array) from a skew axis or a measured histogram."""
    m = md.model
    E, k = m.routed_experts, m.experts_per_token
    if probs is not None:
        p = routing.histogram_probs(probs, k)
        if p.shape[-1] != E:
            raise SpecError(f"probs must have E = {E} columns for {m.name}, got {p.shape[-1]}")
        if p.ndim == 1:
            p = np.broadcast_to(p, (md.layers, E))
        elif p.ndim != 2:
            raise SpecError(f"probs must have shape [E] or [layers, E], got {p.shape}")
        return p, np.asarray(routing.expert_skew(p).max())
    sk = routing.check_skew(skew, E, k)
    key = ("layer_probs", E, k, md.layers, md.seed, sk.shape, sk.tobytes())
    return _memo(key, lambda: routing.layer_probs(routing.skew_probs(sk, E, k), md.layers, md.seed)), sk


def _stats_for(md: MoEDeployment, lp: np.ndarray, skew, probs, *, balanced: bool = True) -> dict:
    """Per-rank statistics of the deployment's placement (or of the static one if not ``balanced``).

    Memoised when the shares come from a skew (the key holds every input); histograms are recomputed.
    """
    k = md.model.experts_per_token

    def compute():
        return routing.placement_stats(lp, k, md.placement(lp) if balanced else None, md.ep)

    if probs is not None:
        return compute()
    sk = routing.check_skew(skew, md.model.routed_experts, k)
    placement = (md.ep, md.redundant, md.balance if balanced else "none", md.model.expert_groups,
                 md.ranks_per_node)
    return _memo(("stats", md.model.routed_experts, k, md.layers, md.seed, sk.shape, sk.tobytes(), lp.shape,
                  placement), compute)


def _routed_coeffs(md: MoEDeployment):
    """Per-GPU roofline coefficients of the routed grouped GEMMs: t = max(a_f X, m0_per_slot A + a_m X).

    X is the pairs a rank computes and A its active slots; the rates are the engine's grouped-GEMM rates
    (:func:`..step.engine.kernel_rates`: the hard roofline, no knee and no M-tile padding), written in the
    affine form whose expected maximum over ranks has a closed form. Only the ratio busiest / mean rank is
    taken from it (:func:`_routed_ep`); the time itself is the engine's."""
    m, tp = md.model, md.tp
    r = kernel_rates(md.attn_dep, "grouped_gemm")
    H, Ie = m.hidden, m.moe_intermediate / tp
    b_w, b_a = dtype_bytes(md.weight_dtype), dtype_bytes(md.act_dtype)
    a_f = 2.0 * 3 * H * Ie / r.flops_per_s  # s per pair: gate-up (2 H Ie) + down (H Ie) MACs
    w_slot = 3 * H * Ie * b_w / r.bytes_per_s  # s per active slot: its weights streamed once
    a_m = (2 * H + 3 * Ie) * b_a / r.bytes_per_s  # s per pair: input H, gate-up out 2 Ie, down in Ie, output H
    return a_f, w_slot, a_m, 2 * r.overhead_s  # two kernels (gate-up, down)


def _routed_pure_tp(dep: Deployment, lp_e, n_tot, k: int, out_shape) -> dict:
    """Routed experts of one MoE layer under pure TP (:func:`step_time`'s ``ep == 1``): every GPU runs every
    (token, expert) pair on its I_e/tp slice of every hit expert, so there is no straggler and no all-to-all,
    and the layer is priced exactly as the step engine prices it (:func:`..step.engine.moe_s`, the grouped
    GEMM's fitted curve with its M tile) with the expected hit experts of this routing instead of uniform
    routing's. ``dep``: the TP attention deployment; ``lp_e``: routing probabilities [..., L, E]; ``n_tot``:
    tokens routed in the step."""
    m = dep.model
    pi = k * lp_e
    log_idle = np.log1p(-np.minimum(pi, 1 - 1e-15))  # log P(a token does not pick e)
    active = (-np.expm1(n_tot[..., None, None] * log_idle)).sum(-1)  # E[distinct experts], [..., L]
    routed_l = moe_s(dep, n_tot[..., None], experts=m.routed_experts, topk=k, hidden=m.hidden,
                     inter=m.moe_intermediate, moe_tp=dep.ranks, moe_ep=1, active=active)
    routed = routed_l.mean(-1)
    ones, zeros = np.ones(out_shape), np.zeros(out_shape)
    return {"routed": routed, "routed_mean": routed, "max_pairs": n_tot * k, "mean_pairs": n_tot * k,
            "load_strag": ones, "time_strag": ones, "imb": ones, "active_max": active.mean(-1), "dist": ones,
            "dispatch": zeros, "combine": zeros}


def _routed_ep(md: MoEDeployment, dep: Deployment, lp_e, skew, probs, n_tot, n_loc, coeffs, out_shape) -> dict:
    """Routed experts of one MoE layer over ``md.ep`` ranks (:func:`step_time`'s ``ep > 1``): the mean rank's
    routed GEMMs priced by the step engine, the expected busiest rank's as that time x the straggler of the
    affine form (a normal approximation of each rank's pairs, ``stats.expected_max_piecewise``), the load
    statistics, and the dispatch and combine all-to-all (DeepEP's measured low-latency curves for per-expert
    dispatch where they exist, else the alpha-beta model)."""
    a_f, w_slot, a_m, ovh = coeffs
    k, H, ep = md.model.experts_per_token, md.model.hidden, md.ep
    st = _stats_for(md, lp_e, skew, probs)  # [..., L, R]
    n3 = n_tot[..., None, None]
    mu = n3 * st["share"]
    sd = np.sqrt(n3 * st["var"])
    act = routing.active_slots(st["x"], n_tot[..., None])  # [..., L, R]
    m0 = w_slot * act
    emax_t = stats.expected_max_piecewise(mu, sd, a_f, m0, a_m)  # [..., L]
    # the busiest rank over the mean rank, both in the hard-roofline affine form the expected maximum needs
    straggler = (emax_t.mean(-1) + ovh) / (np.maximum(a_f * mu, m0 + a_m * mu).mean(-1).mean(-1) + ovh)
    # the mean rank priced as the step engine prices an EP rank (the grouped GEMM's fitted curve, rows padded to
    # its M tile) with this routing's mean active slots per rank; uniform routing gives the engine's time
    m = md.model
    routed_mean = moe_s(dep, n_tot[..., None], experts=md.slots, topk=k, hidden=H, inter=m.moe_intermediate,
                        moe_tp=md.tp, moe_ep=ep, active=act.mean(-1)).mean(-1)
    routed = straggler * routed_mean
    emax_x = stats.expected_max_normal(mu, sd)  # [..., L]
    avg = n_tot * k / ep
    max_pairs = emax_x.mean(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        load_strag = max_pairs / avg
        time_strag = routed / routed_mean
    share = st["share"]
    u = st["hit"] if md.dispatch == "rank" else st["share"]
    unit = alltoall.unit_s(md, u).mean(-1)  # [...], per token per byte
    ll = alltoall.low_latency_curves(md) if md.dispatch == "expert" else None
    if ll is not None:  # DeepEP's measured low-latency curves; routing skew scales the busiest rank's bytes
        ratio = unit / alltoall.unit_s(md, np.full(ep, k / ep))
        fp8 = dtype_bytes(md.weight_dtype) < 2.0
        (a_d, B_d), (a_c, B_c) = ll
        dispatch = a_d + n_loc * k * ratio * deepep_ll_bytes_per_selection(H, "dispatch", fp8=fp8) / B_d
        combine = a_c + n_loc * k * ratio * deepep_ll_bytes_per_selection(H, "combine") / B_c
    else:
        alpha = alltoall.alpha_s_of(md)
        dispatch = alpha + n_loc * alltoall.dispatch_bytes_per_token(H) * unit
        combine = alpha + n_loc * alltoall.combine_bytes_per_token(H) * unit
    return {"routed": routed, "routed_mean": routed_mean, "max_pairs": max_pairs,
            "mean_pairs": np.broadcast_to(avg, out_shape), "load_strag": load_strag, "time_strag": time_strag,
            "imb": (share.max(-1) / share.mean(-1)).mean(-1), "active_max": act.max(-1).mean(-1),
            "dist": st["hit"].sum(-1).mean(-1), "dispatch": dispatch, "combine": combine}


def step_time(md: MoEDeployment, batch, context, *, skew=1.0, probs=None) -> dict[str, np.ndarray]:
    """Decode step time of an MoE model on the worst GPU [s], by part, with skewed routing.

    Parameters
    ----------
    md : MoEDeployment
    batch : array_like
        Sequences B in the step (all attention groups together).
    context : array_like
        Context length s of every sequence [tokens].
    skew : array_like
        Hot-expert skew (max/mean expert load, >= 1) of Zipf routing; broadcasts with batch and context.
    probs : array_like, shape [E] or [layers, E], optional
        Measured routing histogram used instead of ``skew`` (expert ids kept; 1-D: same for every layer).

    Returns
    -------
    dict of ndarray (broadcast shape of batch, context, skew)
        ``step_s`` = ``attention_s`` + ``ffn_dense_s`` + ``ffn_moe_s`` + ``head_s`` + ``comm_s`` +
        ``overhead_s``; ``comm_s`` = ``comm_attn_s`` + ``comm_ffn_dense_s`` + ``comm_moe_s`` +
        ``comm_head_s``;
        ``comm_moe_s`` = ``dispatch_s`` + ``combine_s`` + ``allreduce_moe_s`` (all summed over MoE layers).
        Per MoE layer: ``moe_layer_s`` (compute + communication), ``routed_layer_s`` (E[max over ranks] of the
        routed GEMMs), ``routed_mean_layer_s`` (mean rank), ``dispatch_layer_s``, ``combine_layer_s``.
        Load: ``time_straggler`` = routed_layer / routed_mean_layer; ``load_straggler`` = E[max_r X_r] / mean
        (pairs); ``expected_imbalance`` = max/mean of expected pairs (no sampling noise); ``max_pairs``,
        ``mean_pairs`` per rank; ``active_slots_max`` (busiest rank); ``distinct_ranks`` E[d];
        ``tokens_per_s``; ``skew``. Layer-dependent quantities are averaged over the ``md.layers`` placements.
    """
    b, s = check_batch_context(batch, context)
    m = md.model
    E, k, H = m.routed_experts, m.experts_per_token, m.hidden
    q, tp, ep = md.q_tokens, md.tp, md.ep
    skew, probs = _check_routing(md, skew, probs, b.shape, s.shape)
    lp, sk = _layer_probs_for(md, skew, probs)
    out_shape = np.broadcast_shapes(b.shape, s.shape, sk.shape)
    nd = len(out_shape)
    def expand(a):  # left-pad with unit axes to the output rank
        return np.asarray(a, dtype=float).reshape((1,) * (nd - np.ndim(a)) + np.shape(a))
    b_e = expand(b)
    lp_e = lp.reshape((1,) * (nd - (lp.ndim - 2)) + lp.shape) if probs is None else \
        lp.reshape((1,) * nd + lp.shape)
    b_loc = np.ceil(b / ep)
    base = att.step_time(md.attn_dep, b_loc, s, "TP")
    n_tot = b_e * q  # tokens routed in the step (all groups)
    n_loc = expand(b_loc) * q  # tokens of the worst attention group
    dep = md.attn_dep
    ba = dtype_bytes(md.act_dtype)
    # ---- per-layer non-routed MoE kernels (per group, TP over tp): norm, router, shared expert
    norm = elementwise_s(dep, 2 * n_loc * H * ba)
    router = gemm_s(dep, n_loc, H, E, b_w=EMB_BYTES)
    shared = np.zeros_like(n_loc)
    if m.shared_experts:
        Is = m.shared_experts * m.moe_intermediate / tp
        shared = gemm_s(dep, n_loc, H, 2 * Is) + gemm_s(dep, n_loc, Is, H)
    fixed = norm + router + shared
    if ep == 1:  # pure TP: every GPU runs every pair on its I_e/tp slice of every active expert
        r = _routed_pure_tp(dep, lp_e, n_tot, k, out_shape)
    else:
        r = _routed_ep(md, dep, lp_e, skew, probs, n_tot, n_loc, _routed_coeffs(md), out_shape)
    routed, routed_mean, dispatch, combine = r["routed"], r["routed_mean"], r["dispatch"], r["combine"]
    allreduce = allreduce_s(n_loc * H * ba, tp, dep.fabric)  # with the runtime's fitted collectives
    L_moe = m.moe_layers
    bc = lambda a: np.broadcast_to(np.asarray(a, dtype=float), out_shape)  # noqa: E731
    ffn_moe = L_moe * (fixed + routed)
    comm_moe = L_moe * (dispatch + combine + allreduce)
    comm = base["comm_attn_s"] + base["comm_ffn_dense_s"] + base["comm_head_s"] + comm_moe
    total = (base["attention_s"] + base["ffn_dense_s"] + base["head_s"] + base["overhead_s"]) + ffn_moe + comm
    return {
        "step_s": bc(total), "attention_s": bc(base["attention_s"]), "ffn_dense_s": bc(base["ffn_dense_s"]),
        "ffn_moe_s": bc(ffn_moe), "head_s": bc(base["head_s"]), "comm_s": bc(comm),
        "overhead_s": bc(base["overhead_s"]), "comm_attn_s": bc(base["comm_attn_s"]),
        "comm_ffn_dense_s": bc(base["comm_ffn_dense_s"]), "comm_head_s": bc(base["comm_head_s"]),
        "comm_moe_s": bc(comm_moe), "dispatch_s": bc(L_moe * dispatch), "combine_s": bc(L_moe * combine),
        "allreduce_moe_s": bc(L_moe * allreduce),
        "moe_layer_s": bc(fixed + routed + dispatch + combine + allreduce), "routed_layer_s": bc(routed),
        "routed_mean_layer_s": bc(routed_mean), "dispatch_layer_s": bc(dispatch),
        "combine_layer_s": bc(combine),
        "time_straggler": bc(r["time_strag"]), "load_straggler": bc(r["load_strag"]),
        "expected_imbalance": bc(r["imb"]), "max_pairs": bc(r["max_pairs"]), "mean_pairs": bc(r["mean_pairs"]),
        "active_slots_max": bc(r["active_max"]), "distinct_ranks": bc(r["dist"]),
        "tokens_per_s": bc(b_e * q / total), "skew": bc(sk),
    }


def expected_rank_shares(md: MoEDeployment, *, skew=1.0, probs=None) -> dict[str, np.ndarray]:
    """Expected share of the routed pairs on each EP rank, before (static) and after (this placement).

    Returns ``before`` and ``after``, shape skew.shape + (L, ep) (each row sums to 1; 1/ep = balanced), and
    their max/mean ``imbalance_before`` / ``imbalance_after``, shape skew.shape + (L,). Noise-free: the
    sampling fluctuation of a finite batch is in :func:`rank_load` / :func:`step_time`.
    """
    if md.ep == 1:
        raise SpecError("expected_rank_shares needs expert parallelism (ep > 1)")
    skew, probs = _check_routing(md, skew, probs)
    lp, _ = _layer_probs_for(md, skew, probs)
    k = md.model.experts_per_token
    before = _stats_for(md, lp, skew, probs, balanced=False)["share"] / k
    after = _stats_for(md, lp, skew, probs)["share"] / k
    return {"before": before, "after": after, "imbalance_before": before.max(-1) * md.ep,
            "imbalance_after": after.max(-1) * md.ep}


def memory_per_gpu(md: MoEDeployment, batch, context) -> dict[str, np.ndarray]:
    """Memory of the worst GPU [B]: weights (with the redundant slots), KV of its group, activations.

    Attention, dense FFN, shared experts, embeddings and LM head as in :func:`..step.decode.memory_per_rank` of a
    TP-``tp`` deployment serving ceil(B/ep) sequences; routed experts: P/ep slots with I_e/tp each.
    Returns ``weights_B``, ``kv_B``, ``activations_B``, ``reserve_B``, ``total_B``, ``usable_B`` and
    ``feasible``.
    """
    b, s = check_batch_context(batch, context)
    dep = md.attn_dep
    base = att.memory_per_rank(dep, np.ceil(b / md.ep), s, "TP")
    m = md.model
    b_w = dtype_bytes(md.weight_dtype)
    wb = dep.weight_bytes("TP")
    routed_tp = m.moe_layers * m.routed_experts / md.tp * m.expert_params * b_w  # what weight_bytes counts
    routed_here = m.moe_layers * md.slots_per_rank / md.tp * m.expert_params * b_w
    weights = sum(wb.values()) - routed_tp + routed_here
    total = base["total_B"] - base["weights_B"] + weights
    shape = total.shape
    budget = np.broadcast_to(dep.kv_budget_B(np.float64(weights), base["activations_B"]), shape)
    ok = total <= base["usable_B"] if dep.runtime.memory_fraction_of == "total" else base["kv_B"] <= budget
    return {
        "weights_B": np.broadcast_to(np.float64(weights), shape), "kv_B": base["kv_B"],
        "activations_B": base["activations_B"], "reserve_B": base["reserve_B"], "total_B": total,
        "usable_B": base["usable_B"], "kv_budget_B": budget, "feasible": ok,
    }


# ---- per output token: pipelines and speculative decoding (issue 21) ------------------------------------------

#: the parts of ``tpot_s`` (per output token) [s]: they add up to it (:func:`token_time`)
TOKEN_PARTS = ("attention_s", "ffn_dense_s", "ffn_moe_s", "head_s", "comm_s", "overhead_s", "draft_s", "host_s",
               "hops_s", "stall_s")
#: a pass's parts that are scaled to one output token (the verify pass's over tau); comm_s's sub-parts included
_SCALED = ("attention_s", "ffn_dense_s", "ffn_moe_s", "head_s", "comm_s", "overhead_s", "comm_attn_s",
           "comm_ffn_dense_s", "comm_head_s", "comm_moe_s", "dispatch_s", "combine_s", "allreduce_moe_s")
#: a pass's per-layer times and load statistics, kept as the pass has them (the verify pass, a micro-batch's step)
_PASS = ("moe_layer_s", "routed_layer_s", "routed_mean_layer_s", "dispatch_layer_s", "combine_layer_s",
         "time_straggler", "load_straggler", "expected_imbalance", "max_pairs", "mean_pairs", "active_slots_max",
         "distinct_ranks", "skew")


def check_decoding(md: MoEDeployment, pp=1, speculative=None) -> tuple[int, SpecDecode | None]:
    """(pp, spec) for ``md``: the step engine's checks and messages (:func:`..step.per_token.check_decoding`: pp
    within the model's layers, an MTP draft needs the model's MTP module, no draft inside a pipeline), then pp x
    gpus within one instance and a link between stages that span nodes. SpecError starting with the argument."""
    p, spec = per_token.check_decoding(md.attn_dep, pp, speculative)
    if p > 1:
        check_pp(md.model, p, md.gpus, ranks_field="gpus")
        hop_link(md, p)
    return p, spec


def decoding_label(pp: int = 1, spec: SpecDecode | None = None) -> str:
    """'' for plain decoding, 'PP2' for a pipeline, the preset and its accepted length for speculative decoding
    (:func:`..step.per_token.decoding_label`)."""
    return per_token.decoding_label(pp, spec)


def stage_deployment(md: MoEDeployment, pp: int) -> MoEDeployment:
    """The worst stage of ``pp`` as a deployment of the same G GPUs: :func:`..step.pipeline.stage_model`'s ceil(L/pp)
    layers (the MoE layers last, as many as the last stage holds; one vocabulary table), at most as many sampled
    placements as it has MoE layers. Its memory is the worst GPU's; its time is not the stage's (:func:`token_time`)."""
    if pp == 1:
        return md
    sm = pipeline.stage_model(md.model, pp)
    return dataclasses.replace(md, model=sm, layers=min(md.layers, sm.moe_layers))


def hop_link(md: MoEDeployment, pp: int):
    """The link between stages (:func:`..step.pipeline.hop_link`'s rule for pp x G GPUs): the scale-up link while
    the instance fits in one scale-up domain, the scale-out link beyond (SpecError if there is none)."""
    return pipeline.stage_link(md.fabric, pp, md.gpus, md.hardware.name, what="gpus")


def hop_s(md: MoEDeployment, pp: int, batch) -> np.ndarray:
    """One stage-to-stage send of a micro-batch of ``batch`` sequences [s]: each attention group passes the hidden
    states of its ceil(batch/ep) sequences (q_tokens each, H in the activation dtype) to the same group of the next
    stage, each of its tp GPUs its 1/tp share, over :func:`hop_link` (with ep = 1 that is
    :func:`..step.pipeline.hop_s` of the G-rank stage)."""
    tokens = np.ceil(np.asarray(batch, dtype=float) / md.ep) * md.q_tokens
    n = tokens * md.model.hidden * dtype_bytes(md.act_dtype) / md.tp
    return sendrecv_s(n, hop_link(md, pp))


def _draft_probs(md: MoEDeployment, probs):
    """The MTP layer's routing histogram: ``probs`` [E] as given; of a [layers, E] histogram the most skewed layer's
    [assumption, conservative]; None stays None (the draft layer takes the target's skew)."""
    if probs is None:
        return None
    p = np.asarray(probs, dtype=float)
    if p.ndim < 2:
        return p
    return p[int(np.argmax(p.max(-1) / p.sum(-1)))]


def _fuse_s(md: MoEDeployment, spec: SpecDecode, tokens) -> np.ndarray:
    """The draft's fuse projection (FUSE_WIDTH hidden sizes -> H) over ``tokens`` rows of one attention group,
    replicated on its GPUs, as the step engine charges it [s]."""
    w = specdec.FUSE_WIDTH[spec.method]
    H = md.model.hidden
    return gemm_s(md.attn_dep, tokens, w * H, H, b_w=EMB_BYTES) if w else np.zeros_like(np.asarray(tokens, float))


def _draft_s(md: MoEDeployment, spec: SpecDecode, b, s, skew, probs) -> np.ndarray:
    """Draft time of one speculative iteration [s] (:func:`..step.speculative.spec_step`'s draft: a first step over
    the W verified tokens, k - 1 more of ``draft_width`` tokens, each without its step overhead, plus the fuse
    projection). An MTP layer of an MoE model is this wing's one-MoE-layer deployment of the same split, skew and
    placement policy; a draft head is the step engine's dense layer on each attention group; n-gram lookup is 0."""
    if spec.method == "ngram":
        return np.zeros(())
    W, k, w = spec.verify_width, spec.draft_tokens, spec.draft_width
    b_loc = np.ceil(b / md.ep)
    if spec.method == "mtp" and md.model.is_moe:
        dm = dataclasses.replace(md, model=specdec.draft_model(md.model, spec), layers=1)
        dprobs = _draft_probs(md, probs)

        def one(q, lt, ctx):
            r = step_time(dataclasses.replace(dm, q_tokens=q, logits_tokens=lt), b, ctx, skew=skew, probs=dprobs)
            return r["step_s"] - r["overhead_s"]
    else:
        ddep = specdec.draft_deployment(md.attn_dep, spec)

        def one(q, lt, ctx):
            r = att.step_time(ddep, b_loc, ctx, "TP", q_tokens=q, logits_tokens=lt)
            return r["step_s"] - r["overhead_s"]
    draft = one(W, 1, s) + _fuse_s(md, spec, b_loc * W)
    if k > 1:
        draft = draft + (k - 1) * (one(w, w, s + W) + _fuse_s(md, spec, b_loc * w))
    return draft


def token_time(md: MoEDeployment, batch, context, *, skew=1.0, probs=None, pp=1, speculative=None
               ) -> dict[str, np.ndarray]:
    """Time per output token of one sequence on an instance of ``md`` [s], with skewed routing (module docstring).

    ``batch``: the instance's sequences (with ``pp`` stages dealt over pp micro-batches of ceil(batch/pp));
    ``context`` [tokens], ``skew`` and ``probs`` as in :func:`step_time`; ``pp`` pipeline stages of ``md.gpus``
    GPUs each; ``speculative`` a preset name or SpecDecode (None: plain).

    Returns ``tpot_s`` and its parts :data:`TOKEN_PARTS` per output token (they add up to it; ``comm_s``'s
    sub-parts ``comm_attn_s``, ``comm_ffn_dense_s``, ``comm_head_s``, ``comm_moe_s``, ``dispatch_s``,
    ``combine_s``, ``allreduce_moe_s`` too), ``iteration_s`` (the time between a sequence's iterations: the step,
    the ITL, the draft + verify cycle), ``pass_s`` (the pass whose MoE statistics are reported: the step, one
    micro-batch's step, the verify pass), ``tokens_per_step`` (1, or tau), ``tokens_per_s`` (the instance's),
    ``cycle_s`` and ``stage_s`` (a pipeline's: one micro-batch through the stages, the slowest stage; the
    iteration otherwise), and the pass's per-layer times and load statistics as :func:`step_time` names them
    (``moe_layer_s``, ``routed_layer_s``, ``time_straggler``, ``load_straggler``, ``distinct_ranks``, ...).
    Plain decoding (pp = 1, no speculation) is :func:`step_time` exactly, less its ``step_s`` (= ``tpot_s``)."""
    p, spec = check_decoding(md, pp, speculative)
    b, s = check_batch_context(batch, context)
    if spec is None and p == 1:
        st = step_time(md, b, s, skew=skew, probs=probs)
        zero = np.zeros(st["step_s"].shape)
        out = {k: v for k, v in st.items() if k != "step_s"}
        out.update(tpot_s=st["step_s"], iteration_s=st["step_s"], pass_s=st["step_s"], cycle_s=st["step_s"],
                   stage_s=st["step_s"], tokens_per_step=np.ones(zero.shape), draft_s=zero, host_s=zero,
                   hops_s=zero, stall_s=zero)
        return out
    if spec is not None:
        W = spec.verify_width
        tau = spec.tokens_per_step
        verify = step_time(dataclasses.replace(md, q_tokens=W, logits_tokens=W), b, s, skew=skew, probs=probs)
        shape = verify["step_s"].shape
        draft = np.broadcast_to(_draft_s(md, spec, b, s, skew, probs), shape)
        host = np.full(shape, spec.host_ms * 1e-3)
        cycle = verify["step_s"] + draft + host
        out = {k: verify[k] / tau for k in _SCALED}
        out.update({k: verify[k] for k in _PASS})
        zero = np.zeros(shape)
        out.update(draft_s=draft / tau, host_s=host / tau, hops_s=zero, stall_s=zero, pass_s=verify["step_s"],
                   iteration_s=cycle, cycle_s=cycle, stage_s=cycle, tokens_per_step=np.full(shape, tau))
    else:
        mb = np.maximum(np.ceil(b / p), 1.0)
        st = step_time(md, mb, s, skew=skew, probs=probs)
        shape = st["step_s"].shape
        m = md.model
        L, Lm = m.layers, m.moe_layers
        ls = math.ceil(L / p)
        n_moe = min(Lm, ls)
        per_layer = (ls * (st["attention_s"] + st["comm_attn_s"]) / L
                     + n_moe * (st["ffn_moe_s"] + st["comm_moe_s"]) / Lm)
        if ls > n_moe:  # the worst stage reaches into the dense layers
            per_layer = per_layer + (ls - n_moe) * (st["ffn_dense_s"] + st["comm_ffn_dense_s"]) / m.dense_layers
        stage = per_layer + st["head_s"] + st["comm_head_s"] + st["overhead_s"]
        hops = np.broadcast_to((p - 1) * hop_s(md, p, mb), shape)
        cycle = st["step_s"] + hops
        itl = np.maximum(cycle, p * stage)
        out = {k: st[k] for k in _SCALED + _PASS}
        zero = np.zeros(shape)
        out.update(draft_s=zero, host_s=zero, hops_s=hops, stall_s=itl - cycle, pass_s=st["step_s"],
                   iteration_s=itl, cycle_s=cycle, stage_s=np.broadcast_to(stage, shape),
                   tokens_per_step=np.ones(shape), micro_batch=np.broadcast_to(mb, shape))
    tpot = out["iteration_s"] / out["tokens_per_step"]
    out.update(tpot_s=tpot, tokens_per_s=np.broadcast_to(b, tpot.shape) / tpot)
    return out


def token_memory(md: MoEDeployment, batch, context, *, pp=1, speculative=None) -> dict[str, np.ndarray]:
    """Memory of the worst GPU [B] (:func:`memory_per_gpu`'s parts and ``feasible``; plain decoding is it exactly),
    plus ``draft_weights_B`` and ``draft_kv_B`` (already inside ``weights_B`` and ``kv_B``; 0 without a draft).

    * ``pp`` > 1: the worst stage (:func:`stage_deployment`: ceil(L/pp) layers with their (E + redundant)/ep expert
      slots per MoE layer, one vocabulary table) and its layers' KV for the ceil(batch/ep) sequences of a group
      (every micro-batch's), activations of one micro-batch (:func:`..step.pipeline.pp_memory`'s rule).
    * speculative: :func:`..step.speculative.spec_memory`'s rule on the worst attention group: the target's KV at
      context + W - 1 (a slot per draft token) with activations over W tokens per sequence, and the draft layer's
      weights and KV; an MTP layer of an MoE model holds the same (E + redundant)/ep slots per GPU as the target's
      MoE layers (this wing's weight accounting) [assumption: the draft layer is placed like the target's]."""
    p, spec = check_decoding(md, pp, speculative)
    if spec is None and p == 1:
        out = dict(memory_per_gpu(md, batch, context))
        zero = np.zeros(np.shape(out["total_B"]))
        out.update(draft_weights_B=zero, draft_kv_B=zero)
        return out
    b, s = check_batch_context(batch, context)
    if p > 1:
        sd = stage_deployment(md, p)
        out = dict(memory_per_gpu(sd, b, s))
        act = memory_per_gpu(sd, np.maximum(np.ceil(b / p), 1.0), s)["activations_B"]
        weights, kv = out["weights_B"], out["kv_B"]
        dw = dkv = np.zeros(np.shape(out["total_B"]))
        dep = sd.attn_dep
    else:
        W = spec.verify_width
        out = dict(memory_per_gpu(dataclasses.replace(md, q_tokens=W, logits_tokens=None), b, s + (W - 1)))
        sm = specdec.spec_memory(md.attn_dep, spec, np.ceil(b / md.ep), s)
        dw, dkv = np.asarray(sm["draft_weights_B"], dtype=float), np.asarray(sm["draft_kv_B"], dtype=float)
        m = md.model
        if spec.method == "mtp" and m.is_moe:  # the step engine counts E/tp routed experts; the wing its slots
            dw = dw + (md.slots_per_rank - m.routed_experts) / md.tp * m.expert_params * dtype_bytes(md.weight_dtype)
        act = out["activations_B"]
        weights, kv = out["weights_B"] + dw, out["kv_B"] + dkv
        dep = md.attn_dep
    total = weights + kv + act + out["reserve_B"]
    budget = dep.kv_budget_B(weights, act)
    ok = total <= out["usable_B"] if dep.runtime.memory_fraction_of == "total" else kv <= budget
    shape = np.broadcast_shapes(np.shape(total), np.shape(out["total_B"]))
    out.update(weights_B=np.broadcast_to(weights, shape), kv_B=np.broadcast_to(kv, shape),
               activations_B=np.broadcast_to(act, shape), total_B=np.broadcast_to(total, shape),
               kv_budget_B=np.broadcast_to(budget, shape), feasible=np.broadcast_to(ok, shape),
               draft_weights_B=np.broadcast_to(dw, shape), draft_kv_B=np.broadcast_to(dkv, shape))
    return out

"""Prefill/decode disaggregation vs colocated serving: TTFT, TPOT, pool sizes and goodput (docs/models.md §4.5-4.7).

Disaggregated. ``n_p`` prefill instances (each ``tp_p`` GPUs) serve prompts one at a time from one FCFS queue
(Poisson arrivals at rate lam): the prefill wait is M/D/c (exact M/D/1 for one instance; Allen-Cunneen with
cs^2 = 0 beyond, see :mod:`..queueing.core`). The KV cache then crosses the link (:mod:`..step.kv_transfer`): serially
or layer-wise pipelined behind the prefill, and through each instance's NICs, which are themselves an M/D/1
server (a busy link queues transfers). ``n_d`` decode instances (each ``tp_d`` GPUs) run continuous batching:
the mean batch per instance follows Little's law B = lam_d * OSL * TPOT(B) (a fixed point), the p-th
percentile of concurrency (Poisson) must fit in memory, and TPOT is the decode step time at that batch.

    TTFT_p = W_prefill,p + D_prefill + W_link,p + exposed transfer          (quantiles added: conservative)

Colocated. ``n_c`` instances of ``tp_c`` GPUs each run decodes and chunked prefill (vLLM/Sarathi): every
iteration holds the B decodes and, while a prompt is pending, a chunk of C - B prompt tokens; such a mixed
iteration takes t_mix, a decode-only one t_dec. A prompt needs n_ch = ceil(S / (C - B)) chunk iterations, so
the fraction of mixed iterations is f = lam_c n_ch t_avg and the mean step t_avg = t_dec / (1 - lam_c n_ch
(t_mix - t_dec)). TTFT = W + n_ch t_mix with an M/D/1 wait on service n_ch t_mix; TPOT (mean) = t_avg, its
tail t_mix whenever f exceeds 1 - p.

Goodput. For a target rate, the smallest pools meeting both SLOs (at the percentile) give GPUs and
goodput per GPU = rate / GPUs; :func:`max_rate_grid` evaluates the highest sustainable rate of every
(n_p, n_d) pair up to 64 x 64 in one vectorised pass (rate matching with queueing and transfer, which
AIConfigurator's rate match leaves out).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ... import _check
from ...errors import SpecError
from ...specs import Link
from ..queueing import mg1
from ..queueing.at_stat import Z_SCORES as _Z, md1_quantile_fast, poisson_quantile_mean, pool_wait_quantile
from ..queueing import core as qz
from ..step.decode import step_time
from ..step.engine import Deployment
from ..step.kv_transfer import pipelined_exposed_s, transfer_time
from ..step.prefill import mixed_step_time
from ..step.per_token import check_decoding, token_max_batch, token_time
from ..step.pipeline import check_pp, pp_prefill, stage_layers
from ..step.speculative import resolve_spec

__all__ = ["Workload", "PrefillSide", "DecodeSide", "prefill_side", "decode_side", "transfer_side", "stage_exposed_s",
           "disagg_latency", "colocated_latency", "colocated_tables", "colocated_from_tables", "max_rate_grid",
           "size_pools", "size_colocated", "first_fixed_point", "CHUNK_OPTIONS"]

MAX_WORKLOAD_TOKENS = 1 << 20  # longest prompt or output of a workload [tokens] (1,048,576)
MAX_RATE_OR_MS = 1e9  # largest arrival rate [1/s] and SLO [ms] of a workload


@dataclass(frozen=True)
class Workload:
    """Requests: prompt and output lengths [tokens], arrival rate [1/s], SLOs [ms] at a percentile.

    The defaults are an illustrative workload (4096 + 256 tokens at 36 req/s, with SLOs chosen by
    us, not taken from a source); every notebook and CLI call sets its own."""

    prompt_tokens: int = 4096
    output_tokens: int = 256
    rate_per_s: float = 36.0
    ttft_slo_ms: float = 2000.0
    tpot_slo_ms: float = 50.0
    percentile: float = 0.99
    prefix_tokens: int = 0
    prompt_sigma: float = 0.0  # log-sd of lognormal prompt lengths (prompt_tokens is then the median)
    max_prompt_tokens: int | None = None  # truncation of the lognormal (default 32 x median, <= 131072)

    def __post_init__(self) -> None:
        def put(name, value):
            object.__setattr__(self, name, value)

        for f in ("prompt_tokens", "output_tokens"):
            put(f, _check.integer(f, getattr(self, f), lo=1, hi=MAX_WORKLOAD_TOKENS, unit="tokens"))
        prefix = _check.integer("prefix_tokens", self.prefix_tokens, lo=0, hi=MAX_WORKLOAD_TOKENS, unit="tokens")
        if prefix >= self.prompt_tokens:
            raise SpecError(f"prefix_tokens must be < prompt_tokens ({self.prompt_tokens}) [tokens]: at least one "
                            f"new token to prefill, got {prefix}")
        put("prefix_tokens", prefix)
        for f, unit in (("rate_per_s", "1/s"), ("ttft_slo_ms", "ms"), ("tpot_slo_ms", "ms")):
            put(f, _check.number(f, getattr(self, f), lo=0, lo_open=True, hi=MAX_RATE_OR_MS, unit=unit))
        put("percentile", float(_check.choice("percentile", self.percentile, sorted(_Z))))
        put("prompt_sigma", _check.number("prompt_sigma", self.prompt_sigma, lo=0, hi=3))
        if self.max_prompt_tokens is not None:
            cap = _check.integer("max_prompt_tokens", self.max_prompt_tokens, lo=1, hi=mg1.MAX_PMF_TOKENS,
                                 unit="tokens")
            if cap < self.prompt_tokens:
                raise SpecError(f"max_prompt_tokens must be >= prompt_tokens ({self.prompt_tokens}) [tokens], "
                                f"got {cap}")
            put("max_prompt_tokens", cap)

    @property
    def prompt_cap(self) -> int:
        return int(self.max_prompt_tokens or min(32 * self.prompt_tokens, max(131072, self.prompt_tokens)))

    def prompt_distribution(self, bins: int = 192) -> tuple[np.ndarray, np.ndarray]:
        """(prompt lengths, probabilities): one point if ``prompt_sigma`` is 0, else the truncated lognormal
        aggregated into ``bins`` log-spaced bins (probability-weighted mean length per bin)."""
        if self.prompt_sigma == 0:
            return np.array([float(self.prompt_tokens)]), np.array([1.0])
        k, p = mg1.lognormal_prompt_pmf(median_tokens=self.prompt_tokens, sigma=self.prompt_sigma,
                                       max_tokens=self.prompt_cap, min_tokens=max(1, self.prefix_tokens + 1))
        edges = np.unique(np.round(np.geomspace(k[0], k[-1] + 1, bins + 1)))
        idx = np.clip(np.searchsorted(edges, k, side="right") - 1, 0, len(edges) - 2)
        w = np.bincount(idx, weights=p, minlength=len(edges) - 1)
        m = np.bincount(idx, weights=p * k, minlength=len(edges) - 1)
        keep = w > 0
        return m[keep] / w[keep], w[keep] / w[keep].sum()

    @property
    def mean_prompt_tokens(self) -> float:
        k, p = self.prompt_distribution()
        return float(k @ p)

    @property
    def z(self) -> float:
        return _Z[self.percentile]

    @property
    def decode_context(self) -> float:
        """Mean context of a decode step: prompt + half the output [tokens]."""
        return self.prompt_tokens + self.output_tokens / 2.0

    @property
    def peak_context(self) -> float:
        """Context a sequence reaches at its last token (memory must hold it) [tokens]."""
        return float(self.prompt_tokens + self.output_tokens)


# ---- the two sides ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PrefillSide:
    """Prefill service: ``prefill_s`` is the mean time of one prompt on one instance [s]; with variable
    prompts ``service_s`` / ``service_p`` is its distribution (one point when prompts are all equal).

    A pipeline of ``pp`` stages (each of ``dep.ranks`` GPUs, :func:`..step.pipeline.pp_prefill`) accepts a prompt
    every ``service_s`` (the slowest stage's share) while each prompt takes ``latency_s`` (the whole model on one
    stage's ranks, plus the hops) to its first token: the queue sees the service, TTFT the latency. Without a
    pipeline the two are the same (``latency_s`` empty)."""

    dep: Deployment
    prefill_s: float
    service_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    service_p: np.ndarray = field(default_factory=lambda: np.zeros(0))
    pp: int = 1
    latency_s: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @property
    def gpus(self) -> int:
        """GPUs of one prefill instance: ranks x pipeline stages."""
        return self.dep.ranks * self.pp

    @property
    def latencies(self) -> np.ndarray:
        """Each service point's prompt latency [s] (the service time itself without a pipeline)."""
        return self.latency_s if self.latency_s.size else self.service_s

    @property
    def prefill_latency_s(self) -> float:
        """Mean prompt latency [s]: ``prefill_s`` without a pipeline."""
        if not self.latency_s.size:
            return self.prefill_s
        return float(self.service_p @ self.latency_s) if self.service_p.size else float(self.latency_s.mean())

    @property
    def deterministic(self) -> bool:
        return self.service_s.size <= 1

    @property
    def cs2(self) -> float:
        """Squared coefficient of variation of the service time (0 for equal prompts)."""
        if self.deterministic:
            return 0.0
        m1 = float(self.service_p @ self.service_s)
        return float(self.service_p @ (self.service_s - m1) ** 2) / (m1 * m1)


@dataclass(frozen=True)
class DecodeSide:
    dep: Deployment
    batch_cap: int  # largest batch that fits at the peak context
    batches: np.ndarray  # grid of batch sizes 1..batch_cap
    step_s: np.ndarray  # decode step time at each batch (mean context)
    pp: int = 1  # pipeline stages per instance (each of dep.ranks GPUs)

    @property
    def gpus(self) -> int:
        """GPUs of one decode instance: ranks x pipeline stages."""
        return self.dep.ranks * self.pp

    def tpot_s(self, batch) -> np.ndarray:
        """Decode step time at a (fractional) batch, interpolated on the exact integer grid [s]."""
        b = np.clip(np.asarray(batch, dtype=float), 1.0, max(1.0, float(self.batch_cap)))
        return np.interp(b, self.batches, self.step_s)


def prefill_side(dep: Deployment, wl: Workload, *, pp: int = 1) -> PrefillSide:
    """Prefill service time(s) of the workload's prompts on one instance (interpolated on a log grid in the
    prompt length when prompts vary: prefill time is smooth in S). ``pp`` > 1: an instance of ``pp`` pipeline
    stages of ``dep.ranks`` GPUs (:func:`..step.pipeline.pp_prefill`: service and latency apart)."""
    p_ = check_pp(dep.model, pp, dep.ranks)
    k, p = wl.prompt_distribution()
    if k.size == 1:
        r = pp_prefill(dep, p_, wl.prompt_tokens, wl.prefix_tokens)
        t, lat = float(r["service_s"]), float(r["latency_s"])
        return PrefillSide(dep, t, np.array([t]), np.array([1.0]), p_, np.array([lat]) if p_ > 1 else np.zeros(0))
    grid = np.unique(np.round(np.geomspace(k.min(), k.max(), 48)))
    r = pp_prefill(dep, p_, grid, wl.prefix_tokens)
    t = np.interp(k, grid, r["service_s"])
    lat = np.interp(k, grid, r["latency_s"]) if p_ > 1 else np.zeros(0)
    return PrefillSide(dep, float(p @ t), t, p, p_, lat)


def decode_side(dep: Deployment, wl: Workload, *, layout: str = "TP", max_batch_limit: int = 4096,
                points: int | None = None, speculative=None, pp: int = 1) -> DecodeSide:
    """Decode step time on a batch grid up to the memory cap at the workload's peak context: every integer
    (``points`` None) or ``points`` log-spaced integers (the planner's coarse grid: step time is smooth in
    the batch, and :meth:`DecodeSide.tpot_s` interpolates linearly between grid points).

    ``speculative`` (a speculative-decoding preset name or :class:`~llmexplore.specs.SpecDecode`): ``step_s`` is
    then the time per output token, (draft + verify) / tokens per step (:func:`..step.speculative.spec_step`),
    and the cap counts the draft's weights and KV and the verify slots: everything downstream (Little's law on
    the batch, TPOT, rates) reads the side per output token, which is what a request's decode time divides by.

    ``pp`` > 1: an instance of ``pp`` pipeline stages of ``dep.ranks`` ranks (TP layout): the batch is the
    instance's (dealt over pp micro-batches), ``step_s`` the time between a sequence's tokens and the cap the
    worst stage's memory (:mod:`..step.pipeline`)."""
    p, spec = check_decoding(dep, pp, speculative)
    if p > 1 and layout != "TP":
        raise SpecError(f"pp > 1 runs TP stages here (engines pipeline tensor-parallel stages), got pp={p} with the "
                        f"{layout} layout")
    cap = int(token_max_batch(dep, wl.peak_context, layout, pp=p, speculative=spec, limit=max_batch_limit))
    if points is None:
        b = np.arange(1, max(cap, 1) + 1, dtype=float)
    else:
        b = np.unique(np.round(np.geomspace(1.0, max(cap, 1), int(points))))
    t = token_time(dep, b, wl.decode_context, layout, pp=p, speculative=spec)["tpot_s"]
    return DecodeSide(dep, cap, b, np.asarray(t, dtype=float), p)


def stage_exposed_s(pre: PrefillSide, transfer_s, latency_s) -> tuple[np.ndarray, np.ndarray]:
    """(serial, layer-wise pipelined) exposed KV transfer of one request [s] from the whole request's serial
    ``transfer_s`` and the link's ``latency_s`` (broadcast): without a pipeline :func:`..step.kv_transfer
    .pipelined_exposed_s` behind the prefill; with ``pre.pp`` stages each sends its own layers on its own NICs, so
    what stays exposed is the largest stage's transfer behind its own layers' share of the prompt's latency."""
    m = pre.dep.model
    layers = max(stage_layers(m, pre.pp))
    share = layers / m.layers
    lat = np.asarray(latency_s, dtype=float)
    serial = lat + (np.asarray(transfer_s, dtype=float) - lat) * share
    return serial, pipelined_exposed_s(serial, share * pre.prefill_latency_s, layers, latency_s=lat)


def transfer_side(pre: PrefillSide, dec: DecodeSide, link: Link, wl: Workload, *, pipelined: bool = True,
                  nics: int | None = None, batched_ops: bool = True, op_overhead_us: float = 1.0) -> dict:
    """KV transfer of one request: ``link_busy_s`` (time the busiest prefill NIC is occupied),
    ``link_busy_decode_s`` (the busiest decode NIC), ``exposed_s`` (added to TTFT at an idle link: serial, or
    pipelined behind the prefill) and the bytes.

    Pipelines: each stage sends (receives) the KV of its own layers through its own NICs, so the busiest NIC is
    the largest stage's (ceil(L / pp) of L layers); a pipelined prefill's last stage computes its layers in the
    last ceil(L / pp) / L of the prompt's latency, and its transfer is what can stay exposed ``nics`` NICs per
    stage (None: one per GPU)."""
    m = pre.dep.model
    tr = transfer_time(m, link, wl.prompt_tokens, kv_dtype=dec.dep.kv_dtype,
                       page_tokens=dec.dep.runtime.page_tokens, prefill_tp=pre.dep.ranks, decode_tp=dec.dep.ranks,
                       op_overhead_us=op_overhead_us, batched_ops=batched_ops, nics=nics)
    lat = float(tr["latency_s"])
    busy_all = float(tr["bandwidth_s"] + tr["ops_s"])
    p_share = max(stage_layers(m, pre.pp)) / m.layers  # the largest prefill stage's share of the layers
    d_share = max(stage_layers(m, dec.pp)) / m.layers
    serial, piped = stage_exposed_s(pre, float(tr["transfer_s"]), lat)
    exposed = float(piped) if pipelined else float(serial)
    return {"serial_s": float(serial), "exposed_s": exposed, "link_busy_s": busy_all * p_share,
            "link_busy_decode_s": busy_all * pre.dep.ranks / dec.dep.ranks * d_share,
            "physical_B": float(tr["physical_B"]), "logical_B": float(tr["logical_B"])}


# ---- latency at a given configuration ----------------------------------------------------------------------
def prefill_ttft_quantile(pre: PrefillSide, p: float, lam, servers) -> np.ndarray:
    """p-quantile of prefill queueing + service (TTFT without the transfer) [s], vectorised over lam/servers.

    Equal prompts: the exact M/D/1 quantile (one instance) or Allen-Cunneen M/D/c, plus D. Variable prompts,
    one instance: the exact M/G/1 sojourn quantile (:func:`..queueing.mg1.mg1_sojourn_quantile_fft`). Several
    instances: T = W + S with W independent of the request's own S (FCFS), P(T > t) = sum_s p_s P(W > t - s)
    with the Allen-Cunneen exponential wait tail, solved by bisection (within a few % of a simulation, see
    tests/unit/models/serving/test_disagg.py). inf where the pool is unstable. A pipelined prefill (``pre.pp`` > 1)
    waits on its service time and adds its latency: T = W + latency(S) (its wait tail as above, the exact
    single-instance sojourn only without a pipeline).
    """
    lam = np.asarray(lam, dtype=float)
    c = np.asarray(servers, dtype=float)
    lam, c = np.broadcast_arrays(lam, c)
    if pre.deterministic:
        return pool_wait_quantile(p, lam, pre.prefill_s, c) + pre.prefill_latency_s
    s, w = pre.service_s, pre.service_p
    lat = pre.latencies
    rho = lam * pre.prefill_s / c
    stable = rho < 1
    lam_s = np.where(stable, lam, 0.0)
    # one instance: Lundberg; several: Allen-Cunneen (both give P(W > x) = A exp(-g x) for x >= 0)
    theta, C = mg1.mg1_lundberg(np.where((c == 1) & stable & (lam_s > 0), lam_s, 1e-12), s, w)
    pw = qz.erlang_c(np.maximum(c, 1), lam_s * pre.prefill_s)
    gap = c / pre.prefill_s - lam_s
    g = np.where(c == 1, theta, gap * 2.0 / (1.0 + pre.cs2))
    A = np.where(c == 1, np.minimum(np.nan_to_num(C, nan=0.0), rho), pw)
    A = np.where(lam_s > 0, A, 0.0)
    target = 1.0 - p
    lo = np.zeros(lam.shape)
    hi = np.full(lam.shape, float(lat.max()))
    # grow hi until P(T > hi) <= target (the tail is exponential: a few doublings at most)
    def sf(t):
        x = t[..., None] - lat
        wait_sf = np.where(x < 0, 1.0, A[..., None] * np.exp(-g[..., None] * np.maximum(x, 0.0)))
        return wait_sf @ w
    for _ in range(60):
        bad = stable & (sf(hi) > target)
        if not bad.any():
            break
        hi = np.where(bad, hi * 2.0, hi)
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        above = sf(mid) > target
        lo = np.where(above, mid, lo)
        hi = np.where(above, hi, mid)
    out = np.where(stable, hi, np.inf)
    single = (c == 1) & stable & (pre.pp == 1)
    if single.any():
        out = np.array(out, dtype=float)
        for lv in np.unique(lam[single]):
            out[single & (lam == lv)] = mg1.mg1_sojourn_quantile_fft(p, float(lv), s, w)
    return out


def first_fixed_point(batches: np.ndarray, step_s: np.ndarray, lam, output_tokens: int) -> np.ndarray:
    """Smallest mean batch B solving B = lam * OSL * t(B) on the batch grid, per rate (vectorised).

    ``step_s`` [..., nb] is t(B) at ``batches`` [nb] (it may be inf where the instance cannot run). The map
    can have two fixed points (t grows faster than linearly near memory or chunk limits): the smallest one is
    the stable operating point. Between grid points t is interpolated linearly, so the root is exact for the
    interpolant. Returns NaN where there is none (the instance saturates).
    """
    lam = np.asarray(lam, dtype=float)[..., None]
    b = np.concatenate([[0.0], batches])
    t = np.concatenate([step_s[..., :1], step_s], axis=-1)  # t(0) := t(1): a lone request still takes a step
    g = b - lam * output_tokens * t  # g(0) < 0 for lam > 0
    ok = g >= 0
    first = np.argmax(ok, axis=-1)
    has = ok.any(axis=-1)
    i = np.maximum(first, 1)
    g1 = np.take_along_axis(g, i[..., None], -1)[..., 0]
    g0 = np.take_along_axis(g, (i - 1)[..., None], -1)[..., 0]
    b1, b0 = b[i], b[i - 1]
    with np.errstate(invalid="ignore", divide="ignore"):
        root = np.where(np.isfinite(g0), b0 + (b1 - b0) * (-g0) / (g1 - g0), b1)
    return np.where(has, root, np.nan)


def _decode_fixed_point(dec: DecodeSide, lam_d, wl: Workload) -> dict:
    """Mean batch B = lam_d OSL TPOT(B) per decode instance (vectorised over lam_d), its percentile and TPOT."""
    lam_d = np.asarray(lam_d, dtype=float)
    mean_b = first_fixed_point(dec.batches, dec.step_s, lam_d, wl.output_tokens)
    ok = np.isfinite(mean_b)
    mean_b = np.where(ok, mean_b, float(max(dec.batch_cap, 1)))
    pct_b = mean_b + wl.z * np.sqrt(mean_b)
    fits = ok & (pct_b <= dec.batch_cap) & (dec.batch_cap >= 1)
    tpot = dec.tpot_s(np.maximum(pct_b, 1.0))
    return {"mean_batch": mean_b, "batch_pct": pct_b, "tpot_s": np.where(fits, tpot, np.inf), "fits": fits}


def _busy_decode(xfer: dict, pre: PrefillSide, dec: DecodeSide) -> float:
    """Time the busiest decode NIC takes one request's KV [s] (a transfer record without the key: every decode
    GPU's NIC an equal share)."""
    if "link_busy_decode_s" in xfer:
        return float(xfer["link_busy_decode_s"])
    return float(xfer["link_busy_s"]) * pre.gpus / dec.gpus


def disagg_latency(pre: PrefillSide, dec: DecodeSide, xfer: dict, wl: Workload, n_p, n_d) -> dict:
    """TTFT and TPOT at the workload's percentile for pools of ``n_p`` prefill and ``n_d`` decode instances
    (broadcast). inf marks an unstable prefill queue or link, or a decode batch that does not fit."""
    n_p = np.asarray(n_p, dtype=float)
    n_d = np.asarray(n_d, dtype=float)
    lam = wl.rate_per_s
    p = wl.percentile
    q_pre = prefill_ttft_quantile(pre, p, lam, n_p)  # prefill wait + service
    w_link = md1_quantile_fast(p, lam / n_p, xfer["link_busy_s"]) if xfer["link_busy_s"] > 0 else 0.0
    w_link_d = md1_quantile_fast(p, lam / n_d, _busy_decode(xfer, pre, dec)) \
        if xfer["link_busy_s"] > 0 else 0.0  # the decode instance's NICs receive every request's bytes
    ttft = q_pre + np.maximum(w_link, w_link_d) + xfer["exposed_s"]
    w_pre = q_pre - pre.prefill_latency_s
    d = _decode_fixed_point(dec, lam / n_d, wl)
    ttft, tpot = np.broadcast_arrays(ttft, d["tpot_s"])
    return {"ttft_s": ttft, "tpot_s": tpot, "prefill_wait_s": np.broadcast_to(w_pre, ttft.shape),
            "link_wait_s": np.broadcast_to(np.maximum(w_link, w_link_d), ttft.shape),
            "decode_batch": np.broadcast_to(d["mean_batch"], ttft.shape)}


def colocated_tables(dep: Deployment, wl: Workload, chunk_tokens, *, layout: str = "TP",
                     points: int | None = None, speculative=None, pp: int = 1) -> tuple[DecodeSide, np.ndarray]:
    """(decode side, mixed-iteration time [s] at each of its batches) of colocated chunked-prefill serving.

    ``chunk_tokens`` is the per-iteration token budget C (one value, or an array: the mixed times then have
    shape ``C.shape + (nb,)``). A mixed iteration at batch b carries one chunk of C - b prompt tokens halfway
    through the prompt. ``points`` as in :func:`decode_side`. With ``speculative`` the decode side is per output
    token (:func:`decode_side`) and a mixed iteration costs that plus the chunk's extra time over a plain decode
    step at the same batch (the chunk adds the same work to a speculative step as to a plain one
    [assumption: the decodes' k + 1 verify tokens do not change the chunk's marginal GEMM cost]). With ``pp`` > 1
    stages a chunk rides in one micro-batch of b / pp decodes (budget C - b / pp) and its extra time over that
    micro-batch's step is added to the time between tokens [assumption, conservative: in the engine the other
    micro-batches wait for it only at the stages it occupies]."""
    C = np.asarray(chunk_tokens, dtype=float)
    if np.any(C != np.round(C)) or np.any(C < 2):
        raise SpecError(f"chunk_tokens must be integers >= 2, got {chunk_tokens!r}")
    dec = decode_side(dep, wl, layout=layout, points=points, speculative=speculative, pp=pp)
    S, P = wl.prompt_tokens, wl.prefix_tokens
    b_grid = dec.batches
    if pp > 1:
        mb = np.maximum(np.ceil(b_grid / pp), 1.0)
        chunk = np.maximum(C[..., None] - mb, 1.0)
        t_mix = np.asarray(mixed_step_time(dep, mb, wl.decode_context, chunk, P + (S - P) / 2.0)["step_s"], float)
        plain = np.asarray(step_time(dep, mb, wl.decode_context, "TP")["step_s"], dtype=float)
        return dec, dec.step_s + np.maximum(t_mix - plain, 0.0)
    chunk = np.maximum(C[..., None] - b_grid, 1.0)
    t_mix = np.asarray(mixed_step_time(dep, b_grid, wl.decode_context, chunk, P + (S - P) / 2.0)["step_s"], float)
    if resolve_spec(speculative) is not None:
        plain = np.asarray(step_time(dep, b_grid, wl.decode_context, layout)["step_s"], dtype=float)
        t_mix = dec.step_s + np.maximum(t_mix - plain, 0.0)
    return dec, t_mix


def colocated_from_tables(dec: DecodeSide, t_mix: np.ndarray, wl: Workload, lam_c, chunk_tokens: int, *,
                          arrival_scv=1.0) -> dict:
    """Colocated latency at a per-instance Poisson rate ``lam_c`` [1/s] (vectorised) from the tables of
    :func:`colocated_tables` for one chunk budget (``t_mix`` of shape (nb,)). See :func:`colocated_latency`
    for the model. ``tpot_s`` is the percentile of per-request TPOT (a request's decode time over its output
    tokens, as engines and MLPerf report it and as the TPOT SLO is checked); ``itl_s`` is the percentile of the
    inter-token latency (single steps: a mixed iteration once more than 1 - percentile of the steps carry a
    prefill chunk). Also returns the means ``ttft_mean_s`` (M/D/1 mean wait + service) and ``tpot_mean_s``, and
    ``batch_pct`` (the batch percentile that must fit).

    ``arrival_scv`` is the squared coefficient of variation of an instance's inter-arrival times: 1 for a
    random (Poisson) split of the traffic, 1/n for round-robin over n instances (Erlang-n gaps). The prompt
    wait is the M/D/1 one scaled by Kingman's factor (c_a^2 + c_s^2) / (1 + c_s^2) = c_a^2 (deterministic
    service), an approximation checked against the serving simulator (tests/unit/sweeps/test_plan.py)."""
    lam_c = np.asarray(lam_c, dtype=float)
    S, P = wl.prompt_tokens, wl.prefix_tokens
    b_grid = dec.batches

    def mix(b):
        return np.interp(b, b_grid, t_mix)

    def n_chunks(b):
        return np.ceil((S - P) / np.maximum(chunk_tokens - b, 1.0))

    def t_avg(b, lam=lam_c):
        td, tm = dec.tpot_s(b), mix(b)
        with np.errstate(divide="ignore"):
            denom = 1.0 - lam * n_chunks(b) * (tm - td)
        return np.where(denom > 0, td / np.maximum(denom, 1e-12), np.inf)

    # mean step time on the batch grid for every rate, then the smallest fixed point
    grid_t = t_avg(b_grid[None, :], lam_c[..., None]) if lam_c.ndim else t_avg(b_grid, lam_c)
    root = first_fixed_point(b_grid, grid_t, lam_c, wl.output_tokens)
    hi = np.where(np.isfinite(root), root, float(max(dec.batch_cap, 1)))
    b = np.maximum(hi, 1.0)
    ta = np.where(np.isfinite(root), t_avg(b), np.inf)
    frac_mixed = lam_c * n_chunks(b) * ta
    pct_b = hi + wl.z * np.sqrt(hi)
    fits = np.isfinite(ta) & (frac_mixed < 1.0) & (pct_b <= dec.batch_cap)
    service = n_chunks(b) * mix(b)
    lam_ok = np.where(fits, lam_c, 0.0)
    scv = np.asarray(arrival_scv, dtype=float)
    with np.errstate(invalid="ignore"):
        w = md1_quantile_fast(wl.percentile, lam_ok, service) * scv
        w_mean = qz.md1_mean_wait(lam_ok, service) * scv
    ttft = np.where(fits, w + service, np.inf)
    # the inter-token tail: a mixed iteration once more than 1 - percentile of the steps carry a chunk
    tail = np.where(frac_mixed > 1.0 - wl.percentile, mix(pct_b), dec.tpot_s(pct_b))
    itl = np.where(fits, tail, np.inf)
    # per-request TPOT (a request's decode time / its tokens): the decode steps at the batch percentile plus
    # the mixed steps it sits through, a Poisson count with mean lam n_ch (OSL t_avg) (each arrival during
    # its decode lifetime brings n_ch chunk iterations), taken at its percentile (normal approximation)
    mu = np.where(np.isfinite(ta), lam_c * n_chunks(b) * wl.output_tokens * np.where(np.isfinite(ta), ta, 0.0), 0.0)
    extra = np.maximum(mix(b) - dec.tpot_s(b), 0.0) / wl.output_tokens
    tpot_req = dec.tpot_s(np.maximum(pct_b, 1.0)) + (mu + wl.z * np.sqrt(mu)) * extra
    return {"ttft_s": ttft, "tpot_s": np.where(fits, tpot_req, np.inf), "itl_s": itl,
            "tpot_mean_s": np.where(fits, ta, np.inf),
            "ttft_mean_s": np.where(fits, w_mean + service, np.inf), "decode_batch": hi,
            "batch_pct": pct_b, "mixed_fraction": frac_mixed, "prefill_service_s": service}


def colocated_latency(dep: Deployment, wl: Workload, n_c, *, chunk_tokens: int = 2048,
                      layout: str = "TP", speculative=None) -> dict:
    """Colocated chunked-prefill serving on ``n_c`` instances (vectorised over n_c): TTFT and TPOT at the
    workload's percentile, mean TPOT, mean decode batch. ``chunk_tokens`` is the per-iteration token budget C
    (vLLM max_num_batched_tokens; 2048 is its chunked-prefill default for online serving [assumption]);
    ``speculative``: the instances decode with speculative decoding (:func:`colocated_tables`)."""
    if int(chunk_tokens) != chunk_tokens or chunk_tokens < 2:
        raise SpecError(f"chunk_tokens must be an integer >= 2, got {chunk_tokens!r}")
    n_c = np.asarray(n_c, dtype=float)
    dec, t_mix = colocated_tables(dep, wl, int(chunk_tokens), layout=layout, speculative=speculative)
    return colocated_from_tables(dec, t_mix, wl, wl.rate_per_s / n_c, int(chunk_tokens))


# ---- sizing ------------------------------------------------------------------------------------------------
def max_rate_grid(pre: PrefillSide, dec: DecodeSide, xfer: dict, wl: Workload, *, n_max: int = 64) -> dict:
    """Highest Poisson rate each (n_p, n_d) pair sustains within both SLOs, for n_p, n_d in 1..n_max.

    Prefill: the largest rate whose TTFT percentile (prefill wait + prefill + the prefill NICs' wait + the
    exposed transfer) meets the SLO, by a vectorised bisection over n_p. Decode: the largest rate whose batch
    percentile fits memory and keeps TPOT within its SLO (closed form through the Poisson quantile), and
    whose inbound NICs' wait fits in the TTFT slack left at an idle prefill pool. Returns ``n``,
    ``rate_prefill`` [n], ``rate_decode`` [n], ``rate`` [n_p, n_d] (their minimum), ``gpus`` and
    ``rate_per_gpu`` [n_p, n_d].
    """
    n = np.arange(1, int(n_max) + 1, dtype=float)
    p, slo_ttft = wl.percentile, wl.ttft_slo_ms * 1e-3
    busy_p = xfer["link_busy_s"]
    busy_d = _busy_decode(xfer, pre, dec)  # a decode instance's NICs (every stage's) take every byte
    base = pre.prefill_latency_s + xfer["exposed_s"]

    def bisect(ok_fn, hi):
        lo = np.zeros_like(hi)
        for _ in range(48):
            mid = 0.5 * (lo + hi)
            ok = ok_fn(mid)
            lo = np.where(ok, mid, lo)
            hi = np.where(ok, hi, mid)
        return lo

    cap_p = np.minimum(n / pre.prefill_s, n / busy_p if busy_p > 0 else np.inf) * (1 - 1e-9)
    rate_p = bisect(lambda lam: prefill_ttft_quantile(pre, p, lam, n)
                    + (md1_quantile_fast(p, lam / n, busy_p) if busy_p > 0 else 0.0) + xfer["exposed_s"]
                    <= slo_ttft, cap_p)
    rate_p = np.where(base <= slo_ttft, rate_p, 0.0)
    # decode: the batch b* allowed by memory and the TPOT SLO; mean concurrency m with m + z sqrt(m) <= b*
    ok_b = dec.step_s <= wl.tpot_slo_ms * 1e-3
    b_star = float(dec.batches[ok_b].max()) if ok_b.any() and dec.batch_cap >= 1 else 0.0
    m_star = float(poisson_quantile_mean(wl.z, b_star))
    rate_1 = m_star / (wl.output_tokens * float(dec.tpot_s(max(b_star, 1.0)))) if b_star >= 1 else 0.0
    rate_d = n * rate_1
    if busy_d > 0:
        slack = slo_ttft - base
        cap_d = n / busy_d * (1 - 1e-9)
        rate_link = bisect(lambda lam: md1_quantile_fast(p, lam / n, busy_d) <= slack, cap_d) if slack > 0 \
            else np.zeros_like(n)
        rate_d = np.minimum(rate_d, rate_link)
    rate = np.minimum(rate_p[:, None], rate_d[None, :])
    gpus = n[:, None] * pre.gpus + n[None, :] * dec.gpus
    return {"n": n, "rate_prefill": rate_p, "rate_decode": rate_d, "rate": rate, "gpus": gpus,
            "rate_per_gpu": rate / gpus, "decode_batch_slo": b_star}


def size_pools(pre: PrefillSide, dec: DecodeSide, xfer: dict, wl: Workload, *, n_max: int = 64) -> dict:
    """Smallest prefill and decode pools (fewest GPUs) meeting both SLOs at the workload's rate.

    Candidates come from :func:`max_rate_grid`; each is then checked with the full latency model
    (:func:`disagg_latency`: prefill wait and link waits on both sides added at the percentile). Returns
    ``feasible``, ``reason``, ``n_p``, ``n_d``, ``gpus``, ``goodput_per_gpu`` (rate / GPUs), ``pd_ratio``
    (prefill GPUs / decode GPUs) and the TTFT and TPOT there [s].
    """
    g = max_rate_grid(pre, dec, xfer, wl, n_max=n_max)
    lam = wl.rate_per_s
    cand = np.argwhere(g["rate"] >= lam)
    if not len(cand):
        side = "prefill" if g["rate_prefill"].max() < lam else "decode"
        return {"feasible": False, "reason": f"the {side} pool cannot meet the SLOs at {lam:g} req/s within "
                f"{n_max} instances", "n_p": np.nan, "n_d": np.nan, "gpus": np.inf, "goodput_per_gpu": 0.0,
                "pd_ratio": np.nan, "ttft_s": np.inf, "tpot_s": np.inf}
    n_p = g["n"][cand[:, 0]]
    n_d = g["n"][cand[:, 1]]
    gpus = n_p * pre.gpus + n_d * dec.gpus
    lat = disagg_latency(pre, dec, xfer, wl, n_p, n_d)
    ok = (lat["ttft_s"] <= wl.ttft_slo_ms * 1e-3) & (lat["tpot_s"] <= wl.tpot_slo_ms * 1e-3)
    if not ok.any():
        return {"feasible": False, "reason": "no pool pair meets both SLOs once the link waits are added",
                "n_p": np.nan, "n_d": np.nan, "gpus": np.inf, "goodput_per_gpu": 0.0, "pd_ratio": np.nan,
                "ttft_s": np.inf, "tpot_s": np.inf}
    order = np.lexsort((n_p, np.where(ok, gpus, np.inf)))  # fewest GPUs, then fewer prefill instances
    i = order[0]
    return {"feasible": True, "reason": "", "n_p": int(n_p[i]), "n_d": int(n_d[i]), "gpus": int(gpus[i]),
            "goodput_per_gpu": lam / gpus[i], "pd_ratio": n_p[i] * pre.gpus / (n_d[i] * dec.gpus),
            "ttft_s": float(lat["ttft_s"][i]), "tpot_s": float(lat["tpot_s"][i])}


CHUNK_OPTIONS = (256, 512, 1024, 2048, 4096, 8192)


def size_colocated(dep: Deployment, wl: Workload, *, n_max: int = 64, chunk_tokens=CHUNK_OPTIONS,
                   speculative=None) -> dict:
    """Smallest number of colocated instances meeting both SLOs at the workload's rate, with the chunk budget
    (one value or several to choose from) that needs the fewest GPUs; its TTFT, per-request TPOT (the SLO's
    quantity) and inter-token latency ``itl_s`` at the workload's percentile [s]."""
    n = np.arange(1, int(n_max) + 1, dtype=float)
    best = None
    for c in np.atleast_1d(chunk_tokens):
        lat = colocated_latency(dep, wl, n, chunk_tokens=int(c), speculative=speculative)
        ok = (lat["ttft_s"] <= wl.ttft_slo_ms * 1e-3) & (lat["tpot_s"] <= wl.tpot_slo_ms * 1e-3)
        if ok.any():
            i = int(np.nonzero(ok)[0][0])
            key = (n[i], float(lat["ttft_s"][i]))
            if best is None or key < best[0]:
                best = (key, int(c), i, lat)
    if best is None:
        return {"feasible": False, "reason": f"no colocated pool of up to {n_max} instances meets the SLOs "
                f"with chunk budgets {[int(c) for c in np.atleast_1d(chunk_tokens)]}", "n_c": np.nan, "gpus": np.inf,
                "goodput_per_gpu": 0.0, "ttft_s": np.inf, "tpot_s": np.inf, "itl_s": np.inf, "chunk_tokens": np.nan}
    _, c, i, lat = best
    gpus = int(n[i]) * dep.ranks
    return {"feasible": True, "reason": "", "n_c": int(n[i]), "gpus": gpus,
            "goodput_per_gpu": wl.rate_per_s / gpus, "ttft_s": float(lat["ttft_s"][i]),
            "tpot_s": float(lat["tpot_s"][i]), "itl_s": float(lat["itl_s"][i]), "chunk_tokens": c}

"""MoE decode: routing skew, expert placement (EPLB), stragglers and all-to-all (MODELS.md §4.8).

Question answered: how long does a decode step of an MoE model take on G GPUs under pure tensor parallelism,
TP x EP, or data-parallel attention + EP, when some experts are much hotter than others, and how much do
redundant experts placed by EPLB help?

Glossary: E routed experts, k experts per token, H hidden, I_e expert intermediate, R = ep EP ranks, N tokens
in the step (all attention groups), N_loc tokens of one attention group, P physical expert slots (E +
redundant), ``phy2log`` logical expert of each slot (slots GPU-major, see :mod:`.eplb`), pi_e = k p_e the
probability that a token selects expert e, "pair" one (token, selected expert).

Routing model
    Tokens are independent. A token selects k distinct experts; expert e is selected with probability
    pi_e = k p_e (sum p_e = 1, so p_e <= 1/k). A pick of a replicated expert goes to one of its n_e replicas
    uniformly at random. The joint law of a token's k-set is the maximum-entropy one (conditional Poisson
    sampling, CPS); with uniform p it is sampling without replacement, so per-rank counts are
    hypergeometric (MODELS §4.8). Group- and node-limited routing (DeepSeek-V3 top-4 of 8 groups, <= 4
    nodes) are not modelled: with contiguous placement on EP8 they would cap the distinct destination ranks
    at 4, so dispatch bytes here are an upper bound for that case; with G <= 32 GPUs (<= 4 nodes) the node
    limit never binds.
Expert popularity
    Zipf: p_e proportional to rank^-gamma, capped at 1/k by water-filling, parametrised by the hot-expert
    skew max_e p_e / mean_e p_e = E max_e p_e (1 = uniform, at most E/k); or a measured histogram. Which
    expert ids are hot is a random permutation per MoE layer (fixed ``seed``): every layer has its own hot
    experts, as in real checkpoints, and the static (contiguous) placement sees them at random positions.
Per-rank load (one EP rank = one expert-parallel group of tp GPUs)
    X_r = pairs routed to rank r: E[X_r] = N s_r with s_r = sum over r's slots of pi_e / n_e. Var uses
    independent (Poisson) sampling, N sum_e y(1 - y) with y = pi_e a_er (a_er = share of e's replicas on r):
    the constraint "k picks per token" only adds a common component that does not move the expected
    maximum to first order. E[max_r X_r] is the expected maximum of independent normals N(mu_r, sd_r), by
    quadrature; with equal means it is mean + sd z_R (MODELS §4.8). Active slots (weights read):
    E[A_r] = sum over r's slots of 1 - (1 - pi_e/n_e)^N (uniform: (E/R)(1 - (1 - k/E)^N), MODELS §4.4).
    The analytic results are checked against :func:`rank_load_mc` (CPS sampling with exact marginals).
Dispatch / combine
    Each token is sent to every *distinct* remote EP rank among its picks (``dispatch="rank"``; DeepEP
    normal kernels, MODELS §4.8) or once per remote pick (``dispatch="expert"``; DeepEP low-latency kernels,
    whose published bandwidths equal tokens x k x bytes / latency). P(token hits rank r) =
    e_k(o * (1 - a_r)) / e_k(o) with CPS odds o = pi/(1 - pi) (exact for uniform routing: E[d] =
    R(1 - C(E - E/R, k)/C(E, k))). Dispatch sends FP8 with 1x128 scales (H + 4H/128 B per token), combine
    BF16 (2H). Per GPU the intra-node leg uses the scale-up link, the inter-node leg the GPU's own NIC, the
    two legs overlap (DeepEP forwarding) and the busiest rank (send or receive, expected bytes) sets the
    time; alpha as :func:`.collectives.alltoall_s`.
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
    The non-MoE part of a step is exactly :func:`.attention.step_time` of a TP-``tp`` deployment serving one
    group's ceil(B/ep) sequences; its uniform-routing MoE parts are replaced by the ones here.
MoE layer time
    norm + router + shared expert + E[max over EP ranks of the routed grouped GEMMs] (two kernels, gate-up
    and down, per-kernel roofline with the Runtime efficiencies) + dispatch + combine (+ TP AllReduce);
    averaged over the MoE layers (each its own placement). Compute and communication do not overlap
    (no two-micro-batch overlap), as in :mod:`.attention`.

Speed: everything broadcasts over batch, context and skew. Placements (EPLB) and their per-rank statistics
depend only on the routing shares and the placement, so they are memoised (:func:`clear_memo`): a 50-point
skew sweep of three layouts takes ~75 ms when redrawn after a batch/context/hardware change (58 placements),
~0.5 s cold, ~65 ms cold with ``layers=8`` (step time within 1 % of 58 placements).

Infeasible points are not flagged here except by :func:`memory_per_gpu` (``feasible``); bad inputs raise
:class:`~llmexplore.errors.SpecError` naming the field, the value and the rule.

References: MODELS.md §1.1, §1.2, §4.4, §4.8; deepseek-ai/EPLB; deepseek-ai/DeepEP docs/legacy.md;
DeepSeek-V3 technical report arXiv 2412.19437; Hajek (1964) Ann. Math. Statist. 35, 1491 (CPS).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ..errors import SpecError
from ..specs import Hardware, ModelSpec, Runtime
from ..units import dtype_bytes
from . import attention as att
from . import eplb
from .collectives import Fabric, allreduce_s, alpha_s
from .stats import expected_max_std_normal

__all__ = [
    "zipf_probs", "zipf_skew", "zipf_gamma_for_skew", "skew_probs", "histogram_probs", "expert_skew",
    "layer_probs", "distinct_ranks_uniform", "dispatch_bytes_per_token", "combine_bytes_per_token",
    "expected_max_normal", "eplb_placement", "rank_load", "rank_load_mc", "MoEDeployment", "step_time",
    "expected_rank_shares", "memory_per_gpu", "scenario_dsv3_16gpu", "clear_memo", "BALANCE", "DISPATCH",
]

BALANCE = ("none", "eplb")
DISPATCH = ("rank", "expert")
_PI_MAX = 1.0 - 1e-12  # inclusion probabilities are clipped here before forming odds pi/(1 - pi)
_N_GRID = 33  # quadrature points for expected maxima
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


# ============================================================================================ routing load
def _experts_k(n_experts, k) -> tuple[int, int]:
    for name, v in (("n_experts", n_experts), ("k", k)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise SpecError(f"{name} must be an integer >= 1, got {v!r}")
    if k > n_experts:
        raise SpecError(f"k (experts per token, {k}) must be <= n_experts ({n_experts})")
    return int(n_experts), int(k)


def _cap(p: np.ndarray, k: int) -> np.ndarray:
    """Water-filling: clip p_e at 1/k and give the excess to the uncapped experts in proportion to p."""
    cap = 1.0 / k
    p = p.copy()
    for _ in range(p.shape[-1]):
        capped = p >= cap * (1.0 - 1e-12)
        if not np.any(p > cap * (1.0 + 1e-12)):
            break
        free_mass = 1.0 - cap * capped.sum(-1, keepdims=True)
        free_sum = np.where(capped, 0.0, p).sum(-1, keepdims=True)
        p = np.where(capped, cap, p * free_mass / np.where(free_sum > 0, free_sum, 1.0))
    return np.minimum(p, cap)


def zipf_probs(gamma, n_experts: int, k: int) -> np.ndarray:
    """Expert selection shares p_e proportional to rank^-gamma, with the top-k cap p_e <= 1/k.

    Parameters
    ----------
    gamma : array_like
        Zipf exponent(s) >= 0 (0 = uniform).
    n_experts, k : int
        Routed experts E and experts per token.

    Returns
    -------
    ndarray, shape gamma.shape + (E,)
        p sorted from hottest (rank 1) to coldest; each row sums to 1 and p_e <= 1/k.

    Notes
    -----
    A token selects an expert at most once, so an expert's share of the N k picks is at most 1/k. Where the
    Zipf weights exceed it the expert is capped at 1/k and the excess is spread over the others in proportion
    to their Zipf weights (water-filling), so the shape below the cap stays Zipf.
    """
    E, k = _experts_k(n_experts, k)
    g = np.asarray(gamma, dtype=float)
    if not np.all(np.isfinite(g)) or np.any(g < 0):
        bad = float(g[~(np.isfinite(g) & (g >= 0))].ravel()[0])
        raise SpecError(f"gamma (Zipf exponent) must be finite and >= 0, got {bad!r}")
    w = np.exp(-g[..., None] * np.log(np.arange(1.0, E + 1)))
    return _cap(w / w.sum(-1, keepdims=True), k)


def zipf_skew(gamma, n_experts: int, k: int) -> np.ndarray:
    """Hot-expert skew max/mean of :func:`zipf_probs`: min(E/k, E / sum_i i^-gamma)."""
    E, k = _experts_k(n_experts, k)
    g = np.asarray(gamma, dtype=float)
    h = np.exp(-g[..., None] * np.log(np.arange(1.0, E + 1))).sum(-1)
    return np.minimum(E / k, E / h)


def zipf_gamma_for_skew(skew, n_experts: int, k: int) -> np.ndarray:
    """Zipf exponent whose hot-expert skew (max/mean expert load) equals ``skew`` (vectorised Newton).

    Parameters
    ----------
    skew : array_like
        Target max_e p_e / mean_e p_e, in [1, E/k] (E/k: the hottest expert is in every token's top-k).
    n_experts, k : int

    Returns
    -------
    ndarray, shape skew.shape
        The smallest gamma with ``zipf_skew(gamma) == skew`` (0 for skew 1).

    Notes
    -----
    Below the cap skew = E / H(gamma) with H(gamma) = sum_i i^-gamma, convex and decreasing, so Newton's
    method started at gamma = 0 converges monotonically. DeepSeek-V3 (E = 256, k = 8): skew 2.6 needs
    gamma = 0.215; skew 10 needs 0.547; the cap binds (skew 32) from gamma = 0.899.
    """
    E, k = _experts_k(n_experts, k)
    s = _check_skew(skew, E, k)
    target = E / s  # H(gamma) we need; in [k, E]
    logs = np.log(np.arange(1.0, E + 1))
    g = np.zeros(s.shape)
    for _ in range(200):
        w = np.exp(-g[..., None] * logs)
        h = w.sum(-1)
        dh = -(w * logs).sum(-1)
        step = np.where(h > target, (h - target) / np.where(dh < 0, -dh, 1.0), 0.0)
        g = g + step
        if np.all(step <= 1e-13 * (1.0 + g)):
            break
    return g


def _check_skew(skew, E: int, k: int) -> np.ndarray:
    s = np.asarray(skew, dtype=float)
    if s.size == 0:
        raise SpecError("skew must not be empty")
    bad = ~np.isfinite(s) | (s < 1.0)
    if np.any(bad):
        raise SpecError(f"skew (max/mean expert load) must be >= 1, got {float(s[bad].ravel()[0])!r}")
    if np.any(s > E / k * (1 + 1e-12)):
        bad = float(s[s > E / k * (1 + 1e-12)].ravel()[0])
        raise SpecError(f"skew (max/mean expert load) must be <= E/k = {E}/{k} = {E / k:g} because a token "
                        f"picks an expert at most once (p_e <= 1/k), got {bad!r}")
    return np.minimum(s, E / k)


def skew_probs(skew, n_experts: int, k: int) -> np.ndarray:
    """Zipf selection shares with a given hot-expert skew: ``zipf_probs(zipf_gamma_for_skew(skew))``.

    Returns shape skew.shape + (E,), hottest first. ``skew=1`` gives the uniform 1/E.
    """
    return zipf_probs(zipf_gamma_for_skew(skew, n_experts, k), n_experts, k)


def histogram_probs(counts, k: int) -> np.ndarray:
    """Selection shares from a measured routing histogram (tokens per expert, e.g. an EPLB load window).

    Parameters
    ----------
    counts : array_like, shape [..., E]
        Non-negative counts (or any loads) per expert; leading axes (layers) are kept.
    k : int
        Experts per token.

    Returns
    -------
    ndarray, shape [..., E]
        p = counts / sum(counts). Expert ids are kept (not sorted).

    Raises
    ------
    SpecError
        If a count is negative or non-finite, a row sums to 0, fewer than k experts are used, or an expert's
        share exceeds 1/k (impossible for top-k routing: a token picks an expert at most once).
    """
    c = np.asarray(counts, dtype=float)
    if c.ndim < 1 or c.shape[-1] < 1:
        raise SpecError(f"counts must have shape [..., E], got shape {c.shape}")
    E = c.shape[-1]
    _experts_k(E, k)
    if not np.all(np.isfinite(c)) or np.any(c < 0):
        raise SpecError("counts must be finite and >= 0 (tokens per expert)")
    total = c.sum(-1, keepdims=True)
    if np.any(total <= 0):
        raise SpecError("counts must not sum to 0 in any row")
    if np.any((c > 0).sum(-1) < k):
        raise SpecError(f"counts must be positive for at least k = {k} experts in every row (top-k routing)")
    p = c / total
    if np.any(p > (1.0 + 1e-9) / k):
        raise SpecError(f"counts: an expert's share {p.max():.4g} exceeds 1/k = {1 / k:.4g}; top-k routing "
                        f"picks an expert at most once per token, so counts[e] <= sum(counts)/k")
    return np.minimum(p, 1.0 / k)


def expert_skew(probs) -> np.ndarray:
    """Hot-expert skew of selection shares: E max_e p_e (max/mean expert load); shape probs.shape[:-1]."""
    p = np.asarray(probs, dtype=float)
    return p.shape[-1] * p.max(-1) / p.sum(-1)


def layer_probs(probs, layers: int, seed: int = 0) -> np.ndarray:
    """Give every MoE layer its own hot experts: a random permutation of the expert ids per layer.

    Parameters
    ----------
    probs : array_like, shape [..., E]
        Selection shares (e.g. sorted Zipf shares from :func:`skew_probs`).
    layers : int
        Number of layers (placements) L.
    seed : int
        Seed of the permutations; the same seed gives the same hot-expert positions for every ``probs``
        (so results vary smoothly along a skew axis).

    Returns
    -------
    ndarray, shape [..., L, E]
        ``out[..., l, e] = probs[..., inv_l[e]]`` with inv_l a random permutation.
    """
    p = np.asarray(probs, dtype=float)
    if isinstance(layers, bool) or not isinstance(layers, (int, np.integer)) or layers < 1:
        raise SpecError(f"layers must be an integer >= 1, got {layers!r}")
    E = p.shape[-1]
    rng = np.random.default_rng(seed)
    perm = np.argsort(rng.random((int(layers), E)), axis=-1)
    return p[..., perm]


# ================================================================================= dispatch / combine bytes
def distinct_ranks_uniform(n_experts: int, k: int, ranks) -> np.ndarray:
    """E[d], distinct EP ranks among a token's k experts, uniform routing (MODELS §4.8).

    E[d] = R (1 - C(E - E/R, k) / C(E, k)) for R ranks holding E/R experts each (broadcasts over ``ranks``).
    DeepSeek-V3 (E = 256, k = 8): 5.29 for R = 8, 6.52 for R = 16, and k = 8 for R = E = 256.
    """
    E, k = _experts_k(n_experts, k)
    R = np.asarray(ranks)
    if np.any(R < 1) or np.any(E % R):
        raise SpecError(f"ranks must divide n_experts ({E}), got {R}")
    m = E / R
    # C(E - m, k) / C(E, k) = prod_{i<k} (E - m - i) / (E - i)
    i = np.arange(k)
    ratio = np.prod(np.maximum(E - m[..., None] - i, 0.0) / (E - i), axis=-1)
    return R * (1.0 - ratio)


def dispatch_bytes_per_token(hidden: int, *, scale_block: int = 128) -> int:
    """FP8 dispatch payload per token and destination [B]: H bytes + one FP32 scale per 1x128 block.

    H + 4 ceil(H/128): DeepSeek-V3 (H = 7168): 7,392 B (DeepEP FP8 dispatch, MODELS §4.8).
    """
    return int(hidden) + 4 * math.ceil(int(hidden) / scale_block)


def combine_bytes_per_token(hidden: int) -> int:
    """BF16 combine payload per token and source [B]: 2H (DeepSeek-V3: 14,336 B)."""
    return 2 * int(hidden)


# ============================================================================================ expected maxima
@functools.cache
def _cdf_table() -> tuple[np.ndarray, float, float]:
    """Phi on [-9, 9] every 1/256 (math.erfc): linear interpolation error < 5e-7."""
    z = np.arange(-9 * 256, 9 * 256 + 1) / 256.0
    return np.array([0.5 * math.erfc(-v / math.sqrt(2.0)) for v in z]), -9.0, 256.0


def _norm_cdf(z: np.ndarray) -> np.ndarray:
    """Standard normal CDF by table interpolation (absolute error < 5e-7; 0 or 1 beyond |z| = 9)."""
    table, z0, per = _cdf_table()
    u = (np.clip(z, z0, -z0) - z0) * per
    i = np.minimum(u.astype(np.intp), table.size - 2)
    f = u - i
    return table[i] + f * (table[i + 1] - table[i])


def _expected_max_piecewise(mu, sd, a_f, m0, a_m, *, n_grid: int = _N_GRID, chunk: int = 1 << 21):
    """E[max_r h_r(X_r)] for independent X_r ~ N(mu_r, sd_r) and h_r(X) = max(a_f X, m0_r + a_m X).

    ``mu, sd, m0`` have shape [..., R] (broadcast); ``a_f, a_m`` > 0 are scalars or broadcast likewise.
    Quadrature of E = L + int_L^U (1 - prod_r P(h_r(X_r) <= x)) dx on ``n_grid`` points between
    L = max_r h_r(mu_r - 6 sd_r) and U = max_r h_r(mu_r + 6 sd_r).
    """
    mu, sd, a_f, m0, a_m = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (mu, sd, a_f, m0, a_m)))
    lead, R = mu.shape[:-1], mu.shape[-1]
    flat = [v.reshape(-1, R) for v in (mu, sd, a_f, m0, a_m)]
    n = flat[0].shape[0]
    out = np.empty(n)
    step = max(1, chunk // (n_grid * R))
    u = np.linspace(0.0, 1.0, n_grid)
    for s in range(0, n, step):
        m_, s_, af, b0, am = (v[s:s + step] for v in flat)
        h = lambda x: np.maximum(af * x, b0 + am * x)  # noqa: E731
        lo = h(m_ - 6.0 * s_).max(-1)
        hi = h(m_ + 6.0 * s_).max(-1)
        x = lo[:, None] + (hi - lo)[:, None] * u[None, :]  # [n, M]
        xinv = np.minimum(x[..., None] / af[:, None, :], (x[..., None] - b0[:, None, :]) / am[:, None, :])
        sdg = s_[:, None, :]
        with np.errstate(divide="ignore", invalid="ignore"):
            z = (xinv - m_[:, None, :]) / np.where(sdg > 0, sdg, 1.0)
        cdf = np.where(sdg > 0, _norm_cdf(z), (xinv >= m_[:, None, :]).astype(float))
        tail = 1.0 - cdf.prod(-1)  # P(max > x), [n, M]
        dx = (hi - lo) / (n_grid - 1)
        out[s:s + step] = lo + dx * (tail.sum(-1) - 0.5 * (tail[:, 0] + tail[:, -1]))
    return out.reshape(lead)


def expected_max_normal(mean, sd, axis: int = -1) -> np.ndarray:
    """Expected maximum of independent normals N(mean_i, sd_i^2) along ``axis``.

    Quadrature of E[max] = L + int_L^U (1 - prod_i Phi((x - mean_i)/sd_i)) dx (33 points over +-6 sd;
    error < 1e-5 sd). With equal means and sds it equals mean + sd z_n, z_n =
    :func:`.stats.expected_max_std_normal` (MODELS §4.8); with sd = 0 it is max(mean).
    """
    m = np.moveaxis(np.asarray(mean, dtype=float), axis, -1)
    s = np.moveaxis(np.asarray(sd, dtype=float), axis, -1)
    m, s = np.broadcast_arrays(m, s)
    if np.any(s < 0) or not np.all(np.isfinite(s)):
        raise SpecError("sd must be finite and >= 0")
    # exchangeable items (all means and sds equal): closed form mean + sd z_n; quadrature for the rest
    same = np.all(m == m[..., :1], axis=-1) & np.all(s == s[..., :1], axis=-1)
    out = m[..., 0] + s[..., 0] * expected_max_std_normal(m.shape[-1])
    if not np.all(same):
        out = np.array(out, dtype=float)
        out[~same] = _expected_max_piecewise(m[~same], s[~same], 1.0, 0.0, 1.0)
    return out


# ================================================================================================= placement
def eplb_placement(layer_p, *, ranks: int, redundant: int, groups: int = 1, nodes: int = 1) -> np.ndarray:
    """EPLB replication and placement for expected loads (:func:`.eplb.rebalance_experts`).

    Parameters
    ----------
    layer_p : array_like, shape [..., L, E]
        Selection shares per MoE layer (expected loads up to a constant).
    ranks : int
        EP ranks ("GPUs" for EPLB).
    redundant : int
        Redundant slots; E + redundant must be a multiple of ``ranks``.
    groups, nodes : int
        Expert groups and nodes spanned by the EP ranks (hierarchical policy if groups % nodes == 0).

    Returns
    -------
    ndarray of int, shape [..., L, E + redundant]
        ``phy2log``; slot j lives on rank ``j // ((E + redundant) / ranks)``.

    Notes
    -----
    Idealised: EPLB sees the exact expected loads (in production it sees a noisy moving window).
    """
    p = np.asarray(layer_p, dtype=float)
    E = p.shape[-1]
    if isinstance(redundant, bool) or not isinstance(redundant, (int, np.integer)) or redundant < 0:
        raise SpecError(f"redundant (extra expert slots) must be an integer >= 0, got {redundant!r}")
    if (E + redundant) % ranks:
        raise SpecError(f"ep ranks ({ranks}) must divide routed experts + redundant ({E} + {redundant})")
    phy2log, _, _ = eplb.rebalance_experts(p.reshape(-1, E), E + redundant, groups, nodes, ranks)
    return phy2log.reshape(p.shape[:-1] + (E + redundant,))


def _slot_arrays(layer_p: np.ndarray, phy2log, ranks: int):
    """Per-slot logical expert, replica count and selection probability share, shaped [..., R, spr]."""
    p = layer_p
    E = p.shape[-1]
    p2l = np.arange(E) if phy2log is None else np.asarray(phy2log)
    if p2l.ndim < 1 or np.any(p2l < 0) or np.any(p2l >= E):
        raise SpecError(f"phy2log entries must be expert ids in [0, {E})")
    P = p2l.shape[-1]
    if isinstance(ranks, bool) or not isinstance(ranks, (int, np.integer)) or ranks < 1:
        raise SpecError(f"ranks must be an integer >= 1, got {ranks!r}")
    if P % ranks:
        raise SpecError(f"ranks ({ranks}) must divide the expert slots ({P}); with no redundancy, the routed "
                        f"experts ({E})")
    lead = np.broadcast_shapes(p.shape[:-1], p2l.shape[:-1])
    p = np.broadcast_to(p, lead + (E,))
    p2l = np.broadcast_to(p2l, lead + (P,))
    rows = int(np.prod(lead, dtype=np.int64))
    flat = p2l.reshape(rows, P) + E * np.arange(rows)[:, None]
    cnt = np.bincount(flat.ravel(), minlength=rows * E).reshape(lead + (E,))
    if np.any(cnt == 0):
        raise SpecError("phy2log must place every logical expert at least once")
    p_slot = np.take_along_axis(p, p2l, axis=-1)
    n_slot = np.take_along_axis(cnt, p2l, axis=-1)
    spr = P // ranks
    shape = lead + (ranks, spr)
    return p2l.reshape(shape), n_slot.reshape(shape), p_slot.reshape(shape), cnt


def _poly_mul_linear(c: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Multiply truncated polynomials c (coefficients on the last axis) by (1 + a t)."""
    out = c.copy()
    out[..., 1:] += a[..., None] * c[..., :-1]
    return out


def _poly_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Product of truncated polynomials (same degree), coefficients on the last axis."""
    K = a.shape[-1]
    out = np.zeros(np.broadcast_shapes(a.shape, b.shape))
    for i in range(K):
        out[..., i:] += a[..., i:i + 1] * b[..., :K - i]
    return out


def _hit_probability(p2l, n_slot, p_slot, cnt, k: int) -> np.ndarray:
    """P(a token sends at least one pick to rank r) under CPS with odds pi/(1-pi); shape [..., R].

    P0_r = e_k(o (1 - a_r)) / e_k(o): the polynomial of rank r is prod over experts with no replica on r of
    (1 + o t) (built from the other ranks' non-replicated experts by prefix/suffix products, so only
    multiplications: stable for any odds) times prod over replicated experts of (1 + o (1 - a_er) t).
    """
    shape = p_slot.shape  # [..., R, spr]
    R = shape[-2]
    pi = np.minimum(k * p_slot, _PI_MAX)
    o = pi / (1.0 - pi)
    single = n_slot == 1
    # per-rank products of non-replicated experts
    T = np.zeros(shape[:-1] + (k + 1,))
    T[..., 0] = 1.0
    for j in range(shape[-1]):
        T = _poly_mul_linear(T, np.where(single[..., j], o[..., j], 0.0))
    # all-but-r products: prefix/suffix over ranks
    pre = np.empty_like(T)
    suf = np.empty_like(T)
    pre[..., 0, :] = 0.0
    pre[..., 0, 0] = 1.0
    suf[..., R - 1, :] = 0.0
    suf[..., R - 1, 0] = 1.0
    for r in range(1, R):
        pre[..., r, :] = _poly_mul(pre[..., r - 1, :], T[..., r - 1, :])
        suf[..., R - 1 - r, :] = _poly_mul(suf[..., R - r, :], T[..., R - r, :])
    others = _poly_mul(pre, suf)  # [..., R, k+1]
    total = _poly_mul(others[..., 0, :], T[..., 0, :])  # [..., k+1]
    # replicated experts: one factor per logical expert and rank
    if np.any(~single):
        lead = shape[:-2]
        E = cnt.shape[-1]
        rows = int(np.prod(lead, dtype=np.int64))
        p2l_f = p2l.reshape(rows, -1)
        rep = (cnt > 1).reshape(rows, E)
        n_rep = int(rep.sum(-1).max())
        # local index of each replicated expert (0..n_rep-1) per row, -1 otherwise
        rep_idx = np.where(rep, np.cumsum(rep, axis=-1) - 1, -1)
        slot_rep = np.take_along_axis(rep_idx, p2l_f, axis=-1)  # [rows, P]
        slot_rank = np.broadcast_to(np.repeat(np.arange(R), shape[-1]), slot_rep.shape)
        inv_n = 1.0 / n_slot.reshape(rows, -1)
        # a[row, i, r] = share of replicated expert i's replicas on rank r (non-replicated slots -> bin n_rep)
        col = np.where(slot_rep >= 0, slot_rep, n_rep)
        lin = (np.arange(rows)[:, None] * (n_rep + 1) + col) * R + slot_rank
        a = np.bincount(lin.ravel(), weights=inv_n.ravel(), minlength=rows * (n_rep + 1) * R)
        a = a.reshape(rows, n_rep + 1, R)[:, :n_rep, :]
        # odds of each replicated expert
        pi_e = np.minimum(k * (p_slot.reshape(rows, -1)), _PI_MAX)
        o_rep = np.zeros((rows, n_rep))
        mask = slot_rep >= 0
        o_rep[np.nonzero(mask)[0], slot_rep[mask]] = (pi_e / (1 - pi_e))[mask]
        a = a.reshape(lead + (n_rep, R))
        o_rep = o_rep.reshape(lead + (n_rep,))
        for i in range(n_rep):
            oi = o_rep[..., i]
            others = _poly_mul_linear(others, oi[..., None] * (1.0 - a[..., i, :]))
            total = _poly_mul_linear(total, oi)
    return 1.0 - others[..., k] / total[..., k, None]


def _placement_stats(layer_p: np.ndarray, k: int, phy2log, ranks: int) -> dict[str, np.ndarray]:
    """N-independent per-rank quantities of a placement. Shapes [..., R] (``x``: [..., R, spr])."""
    p2l, n_slot, p_slot, cnt = _slot_arrays(layer_p, phy2log, ranks)
    x = k * p_slot / n_slot  # picks per token that land on this replica
    share = x.sum(-1)  # s_r: expected picks per token on rank r
    # variance per token of the count on r (independent sampling): sum over distinct experts of y(1 - y),
    # y = pi_e a_er; duplicates of an expert on the same rank are merged by telescoping along sorted ids
    order = np.argsort(p2l, axis=-1, kind="stable")
    e_sorted = np.take_along_axis(p2l, order, axis=-1)
    x_sorted = np.take_along_axis(x, order, axis=-1)
    spr = p2l.shape[-1]
    idx = np.arange(spr)
    start = np.ones(e_sorted.shape, dtype=bool)
    start[..., 1:] = e_sorted[..., 1:] != e_sorted[..., :-1]
    pos = idx - np.maximum.accumulate(np.where(start, idx, 0), axis=-1) + 1
    f = lambda y: y * (1.0 - y)  # noqa: E731
    var = (f(pos * x_sorted) - f((pos - 1) * x_sorted)).sum(-1)
    hit = _hit_probability(p2l, n_slot, p_slot, cnt, k)
    return {"share": share, "var": var, "hit": hit, "x": x}


def _active(x: np.ndarray, n_tokens) -> np.ndarray:
    """Expected active replicas per rank: sum over slots of 1 - (1 - x)^N; x [..., R, spr]."""
    n = np.asarray(n_tokens, dtype=float)[..., None, None]
    return (-np.expm1(n * np.log1p(-np.minimum(x, 1.0 - 1e-15)))).sum(-1)


def rank_load(layer_p, k: int, n_tokens, *, ranks: int, phy2log=None) -> dict[str, np.ndarray]:
    """Analytic per-rank load of a placement: expected pairs, their sd, expected maximum, active experts.

    Parameters
    ----------
    layer_p : array_like, shape [..., E]
        Selection shares (each row sums to 1, p_e <= 1/k); leading axes are independent (layers, skews).
    k : int
        Experts per token.
    n_tokens : array_like
        Tokens N routed in the step (all source ranks together); broadcasts against ``layer_p.shape[:-1]``.
    ranks : int
        EP ranks R.
    phy2log : array_like of int, shape [..., P], optional
        Logical expert of each slot (slot j on rank j // (P/R)); default: contiguous, no redundancy.

    Returns
    -------
    dict of ndarray
        ``mean_pairs`` [..., R] = N s_r; ``sd_pairs`` [..., R]; ``max_pairs`` [...] = E[max_r X_r];
        ``mean_over_ranks`` [...] = N k / R; ``straggler`` [...] = max_pairs / mean_over_ranks;
        ``expected_imbalance`` [...] = max_r s_r / mean_r s_r (no sampling noise); ``active_slots`` [..., R];
        ``hit_prob`` [..., R] = P(token sends >= 1 pick to r); ``distinct_ranks`` [...] = E[d]
        = sum_r hit_prob.
    """
    p = np.asarray(layer_p, dtype=float)
    _experts_k(p.shape[-1], k)
    st = _placement_stats(p, k, phy2log, ranks)
    n = np.asarray(n_tokens, dtype=float)
    if np.any(n < 0) or not np.all(np.isfinite(n)):
        raise SpecError("n_tokens must be finite and >= 0")
    lead = np.broadcast_shapes(st["share"].shape[:-1], n.shape)
    nn = np.broadcast_to(n, lead)[..., None]
    mean = nn * st["share"]
    sd = np.sqrt(nn * st["var"])
    mx = expected_max_normal(mean, sd)
    avg = np.broadcast_to(nn[..., 0] * k / ranks, lead)
    with np.errstate(invalid="ignore", divide="ignore"):
        strag = np.where(avg > 0, mx / avg, np.nan)
    share = st["share"]
    return {
        "mean_pairs": mean, "sd_pairs": sd, "max_pairs": mx, "mean_over_ranks": avg, "straggler": strag,
        "expected_imbalance": np.broadcast_to(share.max(-1) / share.mean(-1), lead),
        "active_slots": _active(st["x"], np.broadcast_to(n, lead)),
        "hit_prob": np.broadcast_to(st["hit"], lead + (ranks,)),
        "distinct_ranks": np.broadcast_to(st["hit"].sum(-1), lead),
    }


# ================================================================================================ Monte Carlo
def _esp_suffix(o: np.ndarray, k: int) -> np.ndarray:
    """S[..., i, j] = e_j(o_i, ..., o_{E-1}) for i = 0..E, j = 0..k (elementary symmetric polynomials)."""
    E = o.shape[-1]
    S = np.zeros(o.shape[:-1] + (E + 1, k + 1))
    S[..., E, 0] = 1.0
    for i in range(E - 1, -1, -1):
        S[..., i, :] = S[..., i + 1, :]
        S[..., i, 1:] += o[..., i, None] * S[..., i + 1, :-1]
    return S


def _cps_inclusion(o: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Inclusion probabilities of CPS with odds o, and the suffix table: pi_e = o_e e_{k-1}(o_-e) / e_k(o)."""
    E = o.shape[-1]
    S = _esp_suffix(o, k)
    pre = np.zeros(o.shape[:-1] + (k + 1,))
    pre[..., 0] = 1.0
    loo = np.empty(o.shape)  # e_{k-1}(o without e)
    for e in range(E):
        loo[..., e] = (pre[..., :k] * S[..., e + 1, :k][..., ::-1]).sum(-1)  # sum_j pre_j S_{e+1, k-1-j}
        pre = _poly_mul_linear(pre, o[..., e])
    return o * loo / S[..., 0, k, None], S


def _cps_odds(pi: np.ndarray, k: int, *, tol: float = 1e-10,
              max_iter: int = 500) -> tuple[np.ndarray, np.ndarray]:
    """CPS odds whose inclusion probabilities equal ``pi`` (fixed point on logits); returns (odds, suffix)."""
    target = np.clip(pi, 1e-300, _PI_MAX)
    logit_t = np.log(target) - np.log1p(-target)
    lo = logit_t.copy()
    for _ in range(max_iter):
        o = np.exp(lo - lo.max(-1, keepdims=True))
        cur, S = _cps_inclusion(o, k)
        cur = np.clip(cur, 1e-300, _PI_MAX)
        err = logit_t - (np.log(cur) - np.log1p(-cur))
        lo = lo + err
        if np.max(np.abs(cur - target)) < tol:
            break
    o = np.exp(lo - lo.max(-1, keepdims=True))
    return o, _esp_suffix(o, k)


def _sample_topk(S: np.ndarray, o: np.ndarray, k: int, rows: int, rng) -> np.ndarray:
    """Draw ``rows`` k-sets from CPS(o) by the sequential method; returns sorted expert ids [rows, k]."""
    E = o.shape[-1]
    left = np.full(rows, k)
    chosen = np.empty((rows, k), dtype=np.int64)
    ar = np.arange(rows)
    for i in range(E):
        active = left > 0
        j = np.maximum(left, 1)
        prob = np.where(active, o[i] * S[i + 1, j - 1] / S[i, j], 0.0)
        take = rng.random(rows) < prob
        if np.any(take):
            chosen[ar[take], k - left[take]] = i
            left = left - take
    return chosen


def rank_load_mc(layer_p, k: int, n_tokens: int, *, ranks: int, phy2log=None, trials: int = 200,
                 seed: int = 0) -> dict[str, np.ndarray]:
    """Monte Carlo of :func:`rank_load`: sample top-k routing of N tokens ``trials`` times per layer.

    Each token's k-set is drawn from conditional Poisson sampling with odds calibrated so that expert e is
    selected with probability exactly k p_e (sequential method); a pick of a replicated expert goes to a
    uniformly random replica. Fixed ``seed``: reproducible.

    Parameters
    ----------
    layer_p : array_like, shape [E] or [L, E]
    k, n_tokens : int
    ranks : int
    phy2log : array_like of int, shape [P] or [L, P], optional
    trials : int
    seed : int

    Returns
    -------
    dict of ndarray (leading axis L; 1 if ``layer_p`` is 1-D)
        ``pairs`` [L, trials, R] sampled X_r; ``active`` [L, trials, R] replicas with >= 1 pair;
        ``mean_pairs`` [L, R]; ``max_pairs`` [L] mean over trials of max_r X_r and ``max_pairs_se`` [L];
        ``straggler`` [L]; ``active_slots`` [L, R]; ``distinct_ranks`` [L] mean distinct ranks per token;
        ``hit_prob`` [L, R].
    """
    p = np.atleast_2d(np.asarray(layer_p, dtype=float))
    E = p.shape[-1]
    _experts_k(E, k)
    for name, v in (("n_tokens", n_tokens), ("trials", trials)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise SpecError(f"{name} must be an integer >= 1, got {v!r}")
    p2l = np.atleast_2d(np.arange(E) if phy2log is None else np.asarray(phy2log))
    if p.ndim != 2 or p2l.ndim != 2:
        raise SpecError(f"layer_p and phy2log must be 1-D or 2-D [L, ...], got {p.shape} and {p2l.shape}")
    L = max(p.shape[0], p2l.shape[0])
    p = np.broadcast_to(p, (L, E))
    p2l = np.broadcast_to(p2l, (L, p2l.shape[-1]))
    P = p2l.shape[-1]
    if P % ranks:
        raise SpecError(f"ranks ({ranks}) must divide the expert slots ({P})")
    spr = P // ranks
    rng = np.random.default_rng(seed)
    rows = trials * n_tokens
    out = {key: [] for key in ("pairs", "active", "distinct", "hits")}
    # calibrate once per distinct multiset of shares (layers that are permutations of each other)
    cache: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}
    for l in range(L):
        key = np.sort(p[l]).tobytes()
        if key not in cache:
            srt = np.argsort(p[l], kind="stable")
            o_sorted, _ = _cps_odds(k * p[l][srt], k)
            cache[key] = (o_sorted, p[l][srt])
        o_sorted, _ = cache[key]
        # map sorted odds back to this layer's expert ids (ties share the same odds)
        o = np.empty(E)
        o[np.argsort(p[l], kind="stable")] = o_sorted
        S = _esp_suffix(o, k)
        picks = _sample_topk(S, o, k, rows, rng)  # [rows, k] logical experts
        # replica choice: slots of each expert listed contiguously
        order = np.argsort(p2l[l], kind="stable")
        cnt = np.bincount(p2l[l], minlength=E)
        start = np.cumsum(cnt) - cnt
        r_idx = (rng.random(picks.shape) * cnt[picks]).astype(np.int64)
        slot = order[start[picks] + r_idx]  # [rows, k]
        rank = slot // spr
        tr = np.repeat(np.arange(trials), n_tokens)[:, None]
        pairs = np.bincount((tr * ranks + rank).ravel(), minlength=trials * ranks).reshape(trials, ranks)
        used = np.bincount((tr * P + slot).ravel(), minlength=trials * P).reshape(trials, P) > 0
        active = used.reshape(trials, ranks, spr).sum(-1)
        rs = np.sort(rank, axis=-1)
        distinct = 1 + (np.diff(rs, axis=-1) != 0).sum(-1)
        hit = np.zeros((rows, ranks), dtype=bool)
        hit[np.arange(rows)[:, None], rank] = True
        out["pairs"].append(pairs)
        out["active"].append(active)
        out["distinct"].append(distinct.mean())
        out["hits"].append(hit.mean(0))
    pairs = np.stack(out["pairs"]).astype(float)
    mx = pairs.max(-1)
    avg = n_tokens * k / ranks
    return {
        "pairs": pairs, "active": np.stack(out["active"]), "mean_pairs": pairs.mean(1),
        "max_pairs": mx.mean(-1), "max_pairs_se": mx.std(-1, ddof=1) / math.sqrt(trials),
        "straggler": mx.mean(-1) / avg, "active_slots": np.stack(out["active"]).mean(1),
        "distinct_ranks": np.array(out["distinct"]), "hit_prob": np.stack(out["hits"]),
    }


# =============================================================================================== deployments
def _pos_int(name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise SpecError(f"{name} must be an integer >= 1, got {v!r}")
    return int(v)


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
    weight_dtype: str = "fp8"
    kv_dtype: str = "bf16"
    act_dtype: str = "bf16"
    q_tokens: int = 1
    dispatch: str = "rank"
    layers: int | None = None
    seed: int = 0

    @classmethod
    def build(cls, model="deepseek-v3", gpu="h200", gpus: int = 16, *, tp: int, ep: int, redundant: int = 0,
              balance: str | None = None, runtime="default", weight_dtype: str = "fp8",
              kv_dtype: str = "bf16", q_tokens: int = 1, dispatch: str = "rank", layers: int | None = None,
              seed: int = 0, scale_up_link=None, scale_out_link=None) -> "MoEDeployment":
        """Resolve presets (names or specs) and validate. ``balance`` defaults to "eplb" if ``redundant``."""
        m, hw, rt, fabric = att.resolve_deployment(model, gpu, runtime, scale_up_link, scale_out_link)
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
        G, tp, ep = _pos_int("gpus", self.gpus), _pos_int("tp", self.tp), _pos_int("ep", self.ep)
        if tp * ep != G:
            raise SpecError(f"tp * ep must equal gpus: tp={tp}, ep={ep}, gpus={G}")
        if isinstance(self.redundant, bool) or not isinstance(self.redundant, (int, np.integer)) \
                or self.redundant < 0:
            raise SpecError(f"redundant (extra expert slots) must be an integer >= 0, got {self.redundant!r}")
        if self.balance not in BALANCE:
            raise SpecError(f"balance must be one of {list(BALANCE)}, got {self.balance!r}")
        if self.dispatch not in DISPATCH:
            raise SpecError(f"dispatch must be one of {list(DISPATCH)}, got {self.dispatch!r}")
        if self.layers is None:
            object.__setattr__(self, "layers", m.moe_layers)
        _pos_int("layers", self.layers)
        E = m.routed_experts
        if ep == 1 and self.redundant:
            raise SpecError(f"redundant ({self.redundant}) needs expert parallelism (ep > 1); with ep = 1 "
                            f"every GPU already holds a slice of every expert")
        if self.redundant and self.balance != "eplb":
            raise SpecError(f"redundant ({self.redundant}) > 0 needs balance='eplb' (the replicas must be "
                            f"placed by EPLB)")
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
    def attn_dep(self) -> att.Deployment:
        """The TP-``tp`` attention deployment of one attention group (non-MoE parts of the step)."""
        return att.Deployment(model=self.model, hardware=self.hardware, ranks=self.tp, runtime=self.runtime,
                              fabric=self.fabric, weight_dtype=self.weight_dtype, kv_dtype=self.kv_dtype,
                              act_dtype=self.act_dtype, q_tokens=self.q_tokens)

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
        return eplb_placement(layer_p, ranks=self.ep, redundant=self.redundant, groups=groups, nodes=nodes)


def _layer_probs_for(md: MoEDeployment, skew, probs) -> tuple[np.ndarray, np.ndarray]:
    """(layer shares [..., L, E], skew array) from a skew axis or a measured histogram."""
    m = md.model
    E, k = m.routed_experts, m.experts_per_token
    if probs is not None:
        p = histogram_probs(probs, k)
        if p.shape[-1] != E:
            raise SpecError(f"probs must have E = {E} columns for {m.name}, got {p.shape[-1]}")
        if p.ndim == 1:
            p = np.broadcast_to(p, (md.layers, E))
        elif p.ndim != 2:
            raise SpecError(f"probs must have shape [E] or [layers, E], got {p.shape}")
        return p, np.asarray(expert_skew(p).max())
    sk = _check_skew(skew, E, k)
    key = ("layer_probs", E, k, md.layers, md.seed, sk.shape, sk.tobytes())
    return _memo(key, lambda: layer_probs(skew_probs(sk, E, k), md.layers, md.seed)), sk


def _stats_for(md: MoEDeployment, lp: np.ndarray, skew, probs, *, balanced: bool = True) -> dict:
    """Per-rank statistics of the deployment's placement (or of the static one if not ``balanced``).

    Memoised when the shares come from a skew (the key holds every input); histograms are recomputed.
    """
    k = md.model.experts_per_token

    def compute():
        return _placement_stats(lp, k, md.placement(lp) if balanced else None, md.ep)

    if probs is not None:
        return compute()
    sk = _check_skew(skew, md.model.routed_experts, k)
    placement = (md.ep, md.redundant, md.balance if balanced else "none", md.model.expert_groups,
                 md.ranks_per_node)
    return _memo(("stats", md.model.routed_experts, k, md.layers, md.seed, sk.shape, sk.tobytes(), lp.shape,
                  placement), compute)


def _routed_coeffs(md: MoEDeployment):
    """Per-GPU roofline coefficients of the routed grouped GEMMs: t = max(a_f X, m0_per_slot A + a_m X)."""
    m, hw, rt, tp = md.model, md.hardware, md.runtime, md.tp
    H, Ie = m.hidden, m.moe_intermediate / tp
    b_w, b_a = dtype_bytes(md.weight_dtype), dtype_bytes(md.act_dtype)
    peak = hw.peak_TFLOPS(md.weight_dtype) * 1e12 * rt.eta_compute
    bw = hw.hbm_bw_TBps * 1e12 * rt.eta_mem
    a_f = 2.0 * 3 * H * Ie / peak  # s per pair: gate-up (2 H Ie) + down (H Ie) MACs
    w_slot = 3 * H * Ie * b_w / bw  # s per active slot: its weights streamed once
    a_m = (2 * H + 3 * Ie) * b_a / bw  # s per pair: input H, gate-up out 2 Ie, down in Ie, output H
    return a_f, w_slot, a_m, 2 * rt.kernel_overhead_us * 1e-6  # two kernels (gate-up, down)


def _a2a_unit_s(md: MoEDeployment, u: np.ndarray) -> np.ndarray:
    """Bandwidth time of an all-to-all per token per byte, busiest rank; u [..., R] messages per token to r.

    Rank r (node r // ranks_per_node) sends N_loc u_s to every other rank s and receives N_loc u_r from every
    other rank; the intra-node leg uses the scale-up link, the inter-node leg the GPU's NIC; legs overlap.
    """
    R, Rn = md.ep, md.ranks_per_node
    nodes = R // Rn
    up = md.fabric.scale_up.achievable_GBps * 1e9
    node_sum = u.reshape(u.shape[:-1] + (nodes, Rn)).sum(-1)
    own = np.repeat(node_sum, Rn, axis=-1)
    intra = np.maximum(own - u, (Rn - 1) * u) / up
    if nodes > 1:
        out = md.fabric.scale_out.achievable_GBps * 1e9
        inter = np.maximum(u.sum(-1, keepdims=True) - own, (R - Rn) * u) / out
        intra = np.maximum(intra, inter)
    return intra.max(-1)


def _a2a_alpha_s(md: MoEDeployment) -> float:
    Rn = md.ranks_per_node
    nodes = md.ep // Rn
    a = alpha_s(Rn, md.fabric.scale_up)
    if nodes > 1:
        a += alpha_s(nodes, md.fabric.scale_out)
    return a


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
    b, s = att.check_batch_context(batch, context)
    m = md.model
    E, k, H = m.routed_experts, m.experts_per_token, m.hidden
    q, tp, ep = md.q_tokens, md.tp, md.ep
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
    a_f, w_slot, a_m, ovh = _routed_coeffs(md)
    # ---- per-layer non-routed MoE kernels (per group, TP over tp): norm, router, shared expert
    norm = att._elementwise_s(dep, 2 * n_loc * H * ba)
    router = att._gemm_s(dep, n_loc, H, E, b_w=att._EMB_BYTES)
    shared = np.zeros_like(n_loc)
    if m.shared_experts:
        Is = m.shared_experts * m.moe_intermediate / tp
        shared = att._gemm_s(dep, n_loc, H, 2 * Is) + att._gemm_s(dep, n_loc, Is, H)
    fixed = norm + router + shared
    if ep == 1:  # pure TP: every GPU runs every pair on its I_e/tp slice of every active expert
        pi = k * lp_e
        log_idle = np.log1p(-np.minimum(pi, 1 - 1e-15))  # log P(a token does not pick e)
        active = (-np.expm1(n_tot[..., None, None] * log_idle)).sum(-1)  # E[distinct experts], [..., L]
        pairs = n_tot[..., None] * k
        routed_l = np.maximum(a_f * pairs, w_slot * active + a_m * pairs) + ovh
        routed = routed_l.mean(-1)
        routed_mean = routed
        max_pairs = mean_pairs = n_tot * k
        load_strag = time_strag = np.ones(out_shape)
        imb = np.ones(out_shape)
        active_max = active.mean(-1)
        dist = np.ones(out_shape)
        dispatch = combine = np.zeros(out_shape)
        allreduce = allreduce_s(n_loc * H * ba, tp, md.fabric)
    else:
        st = _stats_for(md, lp_e, skew, probs)  # [..., L, R]
        n3 = n_tot[..., None, None]
        mu = n3 * st["share"]
        sd = np.sqrt(n3 * st["var"])
        act = _active(st["x"], n_tot[..., None])  # [..., L, R]
        m0 = w_slot * act
        emax_t = _expected_max_piecewise(mu, sd, a_f, m0, a_m)  # [..., L]
        routed = emax_t.mean(-1) + ovh
        routed_mean = np.maximum(a_f * mu, m0 + a_m * mu).mean(-1).mean(-1) + ovh
        emax_x = expected_max_normal(mu, sd)  # [..., L]
        avg = n_tot * k / ep
        max_pairs = emax_x.mean(-1)
        mean_pairs = np.broadcast_to(avg, out_shape)
        with np.errstate(invalid="ignore", divide="ignore"):
            load_strag = max_pairs / avg
            time_strag = routed / routed_mean
        share = st["share"]
        imb = (share.max(-1) / share.mean(-1)).mean(-1)
        active_max = act.max(-1).mean(-1)
        dist = st["hit"].sum(-1).mean(-1)
        u = st["hit"] if md.dispatch == "rank" else st["share"]
        unit = _a2a_unit_s(md, u).mean(-1)  # [...], per token per byte
        alpha = _a2a_alpha_s(md)
        dispatch = alpha + n_loc * dispatch_bytes_per_token(H) * unit
        combine = alpha + n_loc * combine_bytes_per_token(H) * unit
        allreduce = allreduce_s(n_loc * H * ba, tp, md.fabric)
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
        "time_straggler": bc(time_strag), "load_straggler": bc(load_strag), "expected_imbalance": bc(imb),
        "max_pairs": bc(max_pairs), "mean_pairs": bc(mean_pairs), "active_slots_max": bc(active_max),
        "distinct_ranks": bc(dist), "tokens_per_s": bc(b_e * q / total), "skew": bc(sk),
    }


def expected_rank_shares(md: MoEDeployment, *, skew=1.0, probs=None) -> dict[str, np.ndarray]:
    """Expected share of the routed pairs on each EP rank, before (static) and after (this placement).

    Returns ``before`` and ``after``, shape skew.shape + (L, ep) (each row sums to 1; 1/ep = balanced), and
    their max/mean ``imbalance_before`` / ``imbalance_after``, shape skew.shape + (L,). Noise-free: the
    sampling fluctuation of a finite batch is in :func:`rank_load` / :func:`step_time`.
    """
    if md.ep == 1:
        raise SpecError("expected_rank_shares needs expert parallelism (ep > 1)")
    lp, _ = _layer_probs_for(md, skew, probs)
    k = md.model.experts_per_token
    before = _stats_for(md, lp, skew, probs, balanced=False)["share"] / k
    after = _stats_for(md, lp, skew, probs)["share"] / k
    return {"before": before, "after": after, "imbalance_before": before.max(-1) * md.ep,
            "imbalance_after": after.max(-1) * md.ep}


def memory_per_gpu(md: MoEDeployment, batch, context) -> dict[str, np.ndarray]:
    """Memory of the worst GPU [B]: weights (with the redundant slots), KV of its group, activations.

    Attention, dense FFN, shared experts, embeddings and LM head as in :func:`.attention.memory_per_rank` of a
    TP-``tp`` deployment serving ceil(B/ep) sequences; routed experts: P/ep slots with I_e/tp each.
    Returns ``weights_B``, ``kv_B``, ``activations_B``, ``reserve_B``, ``total_B``, ``usable_B`` and
    ``feasible``.
    """
    b, s = att.check_batch_context(batch, context)
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
    return {
        "weights_B": np.broadcast_to(np.float64(weights), shape), "kv_B": base["kv_B"],
        "activations_B": base["activations_B"], "reserve_B": base["reserve_B"], "total_B": total,
        "usable_B": base["usable_B"], "feasible": total <= base["usable_B"],
    }


# ================================================================================================== scenario
def scenario_dsv3_16gpu(gpu: str = "h200", *, batch=512, context=2048, skew=2.6, redundant=(16, 32),
                        layers: int | None = None, dispatch: str = "rank", seed: int = 0,
                        kv_dtype: str = "bf16") -> list[dict]:
    """DeepSeek-V3 FP8 on 2 nodes x 8 GPUs (NVLink + one 400G NIC per GPU): TP16 vs TP2 x EP8 vs DPA + EP16.

    For each layout and balance (TP16; TP2xEP8 and DPA+EP16 static, EPLB without redundancy, and EPLB with
    each entry of ``redundant`` extra slots) and each batch size, one record with the step time and its parts,
    the MoE layer time, dispatch/combine time, stragglers, per-GPU expected loads before/after rebalancing and
    the memory check.

    Parameters
    ----------
    gpu : str
        Hardware preset ("h200" or "h100-sxm"); links are the preset's (NVLink 4, IB NDR 400G).
    batch, context : int or sequence of int
        Decode batch (sequences on all 16 GPUs) and context length [tokens].
    skew : float
        Hot-expert skew (max/mean expert load) of Zipf routing.
    redundant : sequence of int
        Redundant slot counts for the EPLB rows (each must keep (256 + r) divisible by the EP degree).

    Returns
    -------
    list of dict
        Tidy records: ``layout``, ``tp``, ``ep``, ``balance``, ``redundant``, ``batch``, ``context``,
        ``skew``,
        ``step_ms``, ``moe_layer_us``, ``routed_layer_us``, ``dispatch_layer_us``, ``combine_layer_us``,
        ``comm_moe_ms``, ``attention_ms``, ``time_straggler``, ``load_straggler``, ``expected_imbalance``,
        ``load_max_over_mean_before`` / ``_after`` (expected per-GPU pairs, static vs this placement),
        ``distinct_ranks``, ``tokens_per_s``, ``weights_GB``, ``feasible``.
    """
    configs = [(16, 1, "none", 0)]
    for tp, ep in ((2, 8), (1, 16)):
        configs += [(tp, ep, "none", 0), (tp, ep, "eplb", 0)]
        configs += [(tp, ep, "eplb", int(r)) for r in redundant]
    records = []
    batches = np.atleast_1d(np.asarray(batch))
    for tp, ep, bal, red in configs:
        md = MoEDeployment.build("deepseek-v3", gpu, 16, tp=tp, ep=ep, redundant=red, balance=bal,
                                 weight_dtype="fp8", kv_dtype=kv_dtype, dispatch=dispatch, layers=layers,
                                 seed=seed)
        r = step_time(md, batches, context, skew=skew)
        mem = memory_per_gpu(md, batches, context)
        before = after = np.ones(batches.shape)
        if ep > 1:
            lp, _ = _layer_probs_for(md, skew, None)
            stat = _stats_for(md, lp, skew, None, balanced=False)["share"]
            before = np.broadcast_to((stat.max(-1) / stat.mean(-1)).mean(), batches.shape)
            after = r["expected_imbalance"]
        for i, bb in enumerate(batches):
            pick = lambda key: float(np.broadcast_to(r[key], batches.shape)[i])  # noqa: E731
            records.append({
                "layout": md.label(), "tp": tp, "ep": ep, "balance": bal, "redundant": red, "batch": int(bb),
                "context": int(context), "skew": float(skew), "step_ms": pick("step_s") * 1e3,
                "moe_layer_us": pick("moe_layer_s") * 1e6, "routed_layer_us": pick("routed_layer_s") * 1e6,
                "dispatch_layer_us": pick("dispatch_layer_s") * 1e6,
                "combine_layer_us": pick("combine_layer_s") * 1e6, "comm_moe_ms": pick("comm_moe_s") * 1e3,
                "attention_ms": pick("attention_s") * 1e3, "time_straggler": pick("time_straggler"),
                "load_straggler": pick("load_straggler"), "expected_imbalance": pick("expected_imbalance"),
                "load_max_over_mean_before": float(np.broadcast_to(before, batches.shape)[i]),
                "load_max_over_mean_after": float(np.broadcast_to(after, batches.shape)[i]),
                "distinct_ranks": pick("distinct_ranks"), "tokens_per_s": pick("tokens_per_s"),
                "weights_GB": float(np.broadcast_to(mem["weights_B"], batches.shape)[i]) / 1e9,
                "feasible": bool(np.broadcast_to(mem["feasible"], batches.shape)[i]),
            })
    return records

"""MoE routing: expert popularity laws, expert placement, and the load each EP rank sees (docs/models.md §4.8).

Pure numerics on routing shares: no specs, no hardware. :mod:`.decode` builds the MoE step time on top.

Glossary: E routed experts, k experts per token, R EP ranks, N tokens routed in the step, P physical expert
slots (E + redundant), ``phy2log`` logical expert of each slot (slots rank-major, see :mod:`.eplb`),
pi_e = k p_e the probability that a token selects expert e, "pair" one (token, selected expert).

Routing model
    Tokens are independent. A token selects k distinct experts; expert e is selected with probability
    pi_e = k p_e (sum p_e = 1, so p_e <= 1/k). A pick of a replicated expert goes to one of its n_e replicas
    uniformly at random. The joint law of a token's k-set is the maximum-entropy one (conditional Poisson
    sampling, CPS); with uniform p it is sampling without replacement, so per-rank counts are
    hypergeometric (docs/models.md §4.8). Group- and node-limited routing (DeepSeek-V3 top-4 of 8 groups,
    <= 4 nodes) are not modelled: with contiguous placement on EP8 they would cap the distinct destination
    ranks at 4, so dispatch bytes computed from :func:`placement_stats` are an upper bound for that case.
Expert popularity
    Zipf: p_e proportional to rank^-gamma, capped at 1/k by water-filling, parametrised by the hot-expert
    skew max_e p_e / mean_e p_e = E max_e p_e (1 = uniform, at most E/k); or a measured histogram. Which
    expert ids are hot is a random permutation per MoE layer (fixed ``seed``, :func:`layer_probs`).
Per-rank load
    X_r = pairs routed to rank r: E[X_r] = N s_r with s_r = sum over r's slots of pi_e / n_e. Var uses
    independent (Poisson) sampling, N sum_e y(1 - y) with y = pi_e a_er (a_er = share of e's replicas on r):
    the constraint "k picks per token" only adds a common component that does not move the expected
    maximum to first order. E[max_r X_r] is the expected maximum of independent normals N(mu_r, sd_r)
    (:func:`..step.stats.expected_max_normal`); with equal means it is mean + sd z_R. Active slots (weights read):
    E[A_r] = sum over r's slots of 1 - (1 - pi_e/n_e)^N (uniform: (E/R)(1 - (1 - k/E)^N), docs/models.md
    §4.4). P(token hits rank r) = e_k(o * (1 - a_r)) / e_k(o) with CPS odds o = pi/(1 - pi) (exact for
    uniform routing: E[d] = R(1 - C(E - E/R, k)/C(E, k))). The analytic results are checked against
    :func:`rank_load_mc` (CPS sampling with exact marginals).

References: deepseek-ai/EPLB; Hajek (1964) Ann. Math. Statist. 35, 1491 (CPS); docs/models.md §4.8.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import SpecError
from ..step import stats
from ..step.stats import check_experts_k
__all__ = [
    "zipf_probs", "zipf_skew", "zipf_gamma_for_skew", "skew_probs", "histogram_probs", "expert_skew",
    "check_skew", "layer_probs", "placement_stats", "active_slots",
    "rank_load", "rank_load_mc",
]



# ============================================================================================ routing load
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
    E, k = check_experts_k(n_experts, k)
    g = np.asarray(gamma, dtype=float)
    if not np.all(np.isfinite(g)) or np.any(g < 0):
        bad = float(g[~(np.isfinite(g) & (g >= 0))].ravel()[0])
        raise SpecError(f"gamma (Zipf exponent) must be finite and >= 0, got {bad!r}")
    w = np.exp(-g[..., None] * np.log(np.arange(1.0, E + 1)))
    return _cap(w / w.sum(-1, keepdims=True), k)


def zipf_skew(gamma, n_experts: int, k: int) -> np.ndarray:
    """Hot-expert skew max/mean of :func:`zipf_probs`: min(E/k, E / sum_i i^-gamma)."""
    E, k = check_experts_k(n_experts, k)
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
    E, k = check_experts_k(n_experts, k)
    s = check_skew(skew, E, k)
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


def check_skew(skew, E: int, k: int) -> np.ndarray:
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
    check_experts_k(E, k)
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



# ================================================================================================= placement
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


def _hit_probability(p2l, n_slot, p_slot, cnt, k: int) -> np.ndarray:
    """P(a token sends at least one pick to rank r) under CPS with odds pi/(1-pi); shape [..., R].

    P0_r = e_k(o (1 - a_r)) / e_k(o): the polynomial of rank r is prod over experts with no replica on r of
    (1 + o t) (built from the other ranks' non-replicated experts by prefix/suffix products, so only
    multiplications: stable for any odds) times prod over replicated experts of (1 + o (1 - a_er) t).
    """
    shape = p_slot.shape  # [..., R, spr]
    R = shape[-2]
    pi = np.minimum(k * p_slot, stats.PI_MAX)
    o = pi / (1.0 - pi)
    single = n_slot == 1
    # per-rank products of non-replicated experts
    T = np.zeros(shape[:-1] + (k + 1,))
    T[..., 0] = 1.0
    for j in range(shape[-1]):
        T = stats.poly_mul_linear(T, np.where(single[..., j], o[..., j], 0.0))
    # all-but-r products: prefix/suffix over ranks
    pre = np.empty_like(T)
    suf = np.empty_like(T)
    pre[..., 0, :] = 0.0
    pre[..., 0, 0] = 1.0
    suf[..., R - 1, :] = 0.0
    suf[..., R - 1, 0] = 1.0
    for r in range(1, R):
        pre[..., r, :] = stats.poly_mul(pre[..., r - 1, :], T[..., r - 1, :])
        suf[..., R - 1 - r, :] = stats.poly_mul(suf[..., R - r, :], T[..., R - r, :])
    others = stats.poly_mul(pre, suf)  # [..., R, k+1]
    total = stats.poly_mul(others[..., 0, :], T[..., 0, :])  # [..., k+1]
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
        pi_e = np.minimum(k * (p_slot.reshape(rows, -1)), stats.PI_MAX)
        o_rep = np.zeros((rows, n_rep))
        mask = slot_rep >= 0
        o_rep[np.nonzero(mask)[0], slot_rep[mask]] = (pi_e / (1 - pi_e))[mask]
        a = a.reshape(lead + (n_rep, R))
        o_rep = o_rep.reshape(lead + (n_rep,))
        for i in range(n_rep):
            oi = o_rep[..., i]
            others = stats.poly_mul_linear(others, oi[..., None] * (1.0 - a[..., i, :]))
            total = stats.poly_mul_linear(total, oi)
    return 1.0 - others[..., k] / total[..., k, None]


def placement_stats(layer_p: np.ndarray, k: int, phy2log, ranks: int) -> dict[str, np.ndarray]:
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


def active_slots(x: np.ndarray, n_tokens) -> np.ndarray:
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
    check_experts_k(p.shape[-1], k)
    st = placement_stats(p, k, phy2log, ranks)
    n = np.asarray(n_tokens, dtype=float)
    if np.any(n < 0) or not np.all(np.isfinite(n)):
        raise SpecError("n_tokens must be finite and >= 0")
    lead = np.broadcast_shapes(st["share"].shape[:-1], n.shape)
    nn = np.broadcast_to(n, lead)[..., None]
    mean = nn * st["share"]
    sd = np.sqrt(nn * st["var"])
    mx = stats.expected_max_normal(mean, sd)
    avg = np.broadcast_to(nn[..., 0] * k / ranks, lead)
    with np.errstate(invalid="ignore", divide="ignore"):
        strag = np.where(avg > 0, mx / avg, np.nan)
    share = st["share"]
    return {
        "mean_pairs": mean, "sd_pairs": sd, "max_pairs": mx, "mean_over_ranks": avg, "straggler": strag,
        "expected_imbalance": np.broadcast_to(share.max(-1) / share.mean(-1), lead),
        "active_slots": active_slots(st["x"], np.broadcast_to(n, lead)),
        "hit_prob": np.broadcast_to(st["hit"], lead + (ranks,)),
        "distinct_ranks": np.broadcast_to(st["hit"].sum(-1), lead),
    }


# ================================================================================================ Monte Carlo
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
    check_experts_k(E, k)
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
            o_sorted, _ = stats.cps_odds(k * p[l][srt], k)
            cache[key] = (o_sorted, p[l][srt])
        o_sorted, _ = cache[key]
        # map sorted odds back to this layer's expert ids (ties share the same odds)
        o = np.empty(E)
        o[np.argsort(p[l], kind="stable")] = o_sorted
        S = stats.esp_suffix(o, k)
        picks = stats.cps_sample(S, o, k, rows, rng)  # [rows, k] logical experts
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

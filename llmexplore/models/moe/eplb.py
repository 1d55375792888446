"""Expert-parallel load balancer: a numpy port of DeepSeek's EPLB (docs/models.md §4.8, PEERS.md §3.4).

Source: deepseek-ai/EPLB ``eplb.py`` (MIT licence; README example at commit d52c72d5). The algorithm and its
tie-breaking are kept: the greedy loops run over the short sequential axis (redundant slots, items to pack)
and are vectorised over the independent axis X (MoE layers, or layers x scenarios).

Glossary (as upstream):

* *logical* expert: one of the model's E routed experts; *physical* expert (replica): a copy placed in a slot.
* ``phy2log[X, P]``: logical expert held by each physical slot, slots numbered GPU-major
  (GPU g holds slots ``g*P/num_gpus ... (g+1)*P/num_gpus - 1``).
* ``log2phy[X, E, max_replicas]``: the physical slots of each logical expert, padded with -1.
* ``logcnt[X, E]``: number of replicas of each logical expert (>= 1).
* ``mlog``: "node-major logical" numbering after groups are packed to nodes (hierarchical policy).

Policy (upstream ``rebalance_experts``): when ``num_groups % num_nodes == 0`` the hierarchical policy packs
expert groups to nodes, replicates within each node and packs the replicas onto that node's GPUs; otherwise
the global policy does the same with one group and one node. Loads are assumed to split evenly over replicas.

Differences from upstream: errors are :class:`~llmexplore.errors.SpecError` instead of ``assert``; arithmetic
is float64 (upstream casts to float32, so the two can break near-ties differently); ties in the descending
sort are broken by index (stable sort), argmax/argmin take the first extremum (as torch's CPU kernels and
Python's ``min`` do). With these conventions the README example is reproduced exactly
(tests/unit/models/moe/test_eplb.py).
"""

from __future__ import annotations

import numpy as np

from ...errors import SpecError

__all__ = ["balanced_packing", "replicate_experts", "rebalance_experts", "gpu_loads", "imbalance", "eplb_placement"]


def _as_weight(weight, what: str = "weight") -> np.ndarray:
    w = np.asarray(weight, dtype=float)
    if w.ndim != 2:
        raise SpecError(f"{what} must have shape [X, n], got shape {w.shape}")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise SpecError(f"{what} must be finite and >= 0 (expert loads)")
    return w


def _int_arg(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise SpecError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def balanced_packing(weight, num_packs: int) -> tuple[np.ndarray, np.ndarray]:
    """Pack n weighted items into m packs of exactly n/m items each, balancing pack weights (greedy).

    Items are taken heaviest first and each goes to the currently lightest pack that still has room
    (upstream ``balanced_packing``).

    Parameters
    ----------
    weight : array_like, shape [X, n]
        Weight of each item (e.g. expected tokens of an expert) per independent row X.
    num_packs : int
        Number of packs m; must divide n.

    Returns
    -------
    pack_index : ndarray of int, shape [X, n]
        Pack of each item.
    rank_in_pack : ndarray of int, shape [X, n]
        Position of the item inside its pack (0 .. n/m - 1).
    """
    w = _as_weight(weight)
    m = _int_arg("num_packs", num_packs)
    X, n = w.shape
    if n % m:
        raise SpecError(f"num_packs ({m}) must divide the number of items ({n})")
    per_pack = n // m
    if per_pack == 1:
        return np.broadcast_to(np.arange(n), (X, n)).copy(), np.zeros((X, n), dtype=np.int64)
    order = np.argsort(-w, axis=-1, kind="stable")  # heaviest first, ties by index
    w_sorted = np.take_along_axis(w, order, axis=-1)
    base = np.arange(X) * m
    open_w = np.zeros(X * m)  # weight of each pack while it has room, +inf once full
    pack_n = np.zeros(X * m, dtype=np.int64)
    pack_sorted = np.empty((X, n), dtype=np.int64)
    rank_sorted = np.empty((X, n), dtype=np.int64)
    for j in range(n):  # sequential greedy axis; rows (layers) in parallel
        flat = base + np.argmin(open_w.reshape(X, m), axis=1)  # first lightest pack with room
        pack_sorted[:, j] = flat - base
        rank_sorted[:, j] = pack_n[flat]
        pack_n[flat] += 1
        open_w[flat] += w_sorted[:, j]
        open_w[flat[pack_n[flat] == per_pack]] = np.inf
    pack_index = np.empty((X, n), dtype=np.int64)
    rank_in_pack = np.empty((X, n), dtype=np.int64)
    np.put_along_axis(pack_index, order, pack_sorted, axis=-1)
    np.put_along_axis(rank_in_pack, order, rank_sorted, axis=-1)
    return pack_index, rank_in_pack


def replicate_experts(weight, num_phy: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Replicate ``num_log`` experts into ``num_phy`` slots, minimising the maximum load per replica (greedy).

    Each extra slot goes to the expert with the largest ``load / replicas`` (upstream ``replicate_experts``).

    Parameters
    ----------
    weight : array_like, shape [X, num_log]
        Load of each logical expert.
    num_phy : int
        Total number of physical experts after replication (>= num_log).

    Returns
    -------
    phy2log : ndarray of int, shape [X, num_phy]
        Logical expert id of each physical expert (the first num_log are the experts themselves).
    rank : ndarray of int, shape [X, num_phy]
        Replica rank of each physical expert (0 for the original).
    logcnt : ndarray of int, shape [X, num_log]
        Number of replicas of each logical expert.
    """
    w = _as_weight(weight)
    X, num_log = w.shape
    num_phy = _int_arg("num_phy", num_phy)
    if num_phy < num_log:
        raise SpecError(f"num_phy ({num_phy}) must be >= the number of logical experts ({num_log})")
    rows = np.arange(X)
    phy2log = np.broadcast_to(np.arange(num_phy), (X, num_phy)).copy()
    rank = np.zeros((X, num_phy), dtype=np.int64)
    logcnt = np.ones((X, num_log), dtype=np.int64)
    per_replica = w.copy()  # weight / logcnt, updated in place for the chosen experts only
    for i in range(num_log, num_phy):
        idx = np.argmax(per_replica, axis=1)  # first maximum
        phy2log[:, i] = idx
        rank[:, i] = logcnt[rows, idx]
        logcnt[rows, idx] += 1
        per_replica[rows, idx] = w[rows, idx] / logcnt[rows, idx]
    return phy2log, rank, logcnt


def _inverse(perm: np.ndarray) -> np.ndarray:
    inv = np.empty_like(perm)
    np.put_along_axis(inv, perm, np.broadcast_to(np.arange(perm.shape[1]), perm.shape), axis=1)
    return inv


def _rebalance_hierarchical(w: np.ndarray, num_physical: int, num_groups: int, num_nodes: int,
                            num_gpus: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Upstream ``rebalance_experts_hierarchical``: returns (phy2log, phyrank, logcnt), all [X, ...]."""
    X, num_log = w.shape
    group_size = num_log // num_groups
    groups_per_node = num_groups // num_nodes
    phy_per_gpu = num_physical // num_gpus

    # Step 1: pack groups to nodes
    tokens_per_group = w.reshape(X, num_groups, group_size).sum(-1)
    group_pack, group_rank = balanced_packing(tokens_per_group, num_nodes)
    log2mlog = (((group_pack * groups_per_node + group_rank) * group_size)[..., None]
                + np.arange(group_size)).reshape(X, num_log)
    mlog2log = _inverse(log2mlog)

    # Step 2: construct redundant experts within nodes; rows are [X * num_nodes, num_log // num_nodes]
    tokens_per_mlog = np.take_along_axis(w, mlog2log, axis=-1).reshape(-1, num_log // num_nodes)
    phy2mlog, phyrank, mlogcnt = replicate_experts(tokens_per_mlog, num_physical // num_nodes)

    # Step 3: pack physical experts to GPUs; rows are [X * num_nodes, num_physical // num_nodes]
    tokens_per_phy = np.take_along_axis(tokens_per_mlog / mlogcnt, phy2mlog, axis=-1)
    pack_index, rank_in_pack = balanced_packing(tokens_per_phy, num_gpus // num_nodes)
    phy2pphy = pack_index * phy_per_gpu + rank_in_pack
    pphy2phy = _inverse(phy2pphy)

    pphy2mlog = np.take_along_axis(phy2mlog, pphy2phy, axis=-1)
    pphy2mlog = (pphy2mlog.reshape(X, num_nodes, -1)
                 + np.arange(0, num_log, num_log // num_nodes)[None, :, None]).reshape(X, -1)
    pphy2log = np.take_along_axis(mlog2log, pphy2mlog, axis=-1)
    pphyrank = np.take_along_axis(phyrank, pphy2phy, axis=-1).reshape(X, -1)
    logcnt = np.take_along_axis(mlogcnt.reshape(X, -1), log2mlog, axis=-1)
    return pphy2log, pphyrank, logcnt


def rebalance_experts(weight, num_replicas: int, num_groups: int, num_nodes: int,
                      num_gpus: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Replication and placement plan for expert parallelism (upstream entry point ``rebalance_experts``).

    Parameters
    ----------
    weight : array_like, shape [..., E]
        Load statistics (e.g. expected tokens) of the E logical experts per MoE layer; leading axes are
        independent rows (layers, scenarios) and are flattened internally.
    num_replicas : int
        Physical expert slots P (E + redundant); must be a multiple of ``num_gpus``.
    num_groups : int
        Expert groups (group-limited routing; DeepSeek-V3 ``n_group`` = 8); must divide E.
    num_nodes : int
        Server nodes; the intra-node network (NVLink) is the fast one.
    num_gpus : int
        GPUs (EP ranks); a multiple of ``num_nodes``.

    Returns
    -------
    phy2log : ndarray of int, shape [..., P]
        Logical expert of each physical slot; slot j lives on GPU ``j // (P / num_gpus)``.
    log2phy : ndarray of int, shape [..., E, max_replicas]
        Physical slots of each logical expert, padded with -1 (max_replicas over all rows).
    logcnt : ndarray of int, shape [..., E]
        Replicas per logical expert; sums to P in every row.

    Notes
    -----
    Hierarchical policy if ``num_groups % num_nodes == 0`` (groups stay inside one node, replicas of an
    expert stay on the node of its group), global policy (one group, one node) otherwise.

    References
    ----------
    deepseek-ai/EPLB ``eplb.py``; DeepSeek-V3 technical report arXiv 2412.19437 §3.4.
    """
    w_in = np.asarray(weight, dtype=float)
    if w_in.ndim < 1:
        raise SpecError("weight must have shape [..., E], got a scalar")
    lead, num_log = w_in.shape[:-1], w_in.shape[-1]
    w = _as_weight(w_in.reshape(-1, num_log))
    P = _int_arg("num_replicas", num_replicas)
    groups = _int_arg("num_groups", num_groups)
    nodes = _int_arg("num_nodes", num_nodes)
    gpus = _int_arg("num_gpus", num_gpus)
    if P < num_log:
        raise SpecError(f"num_replicas ({P}) must be >= the number of logical experts ({num_log})")
    if P % gpus:
        raise SpecError(f"num_replicas ({P}) must be a multiple of num_gpus ({gpus})")
    if gpus % nodes:
        raise SpecError(f"num_gpus ({gpus}) must be a multiple of num_nodes ({nodes})")
    if num_log % groups:
        raise SpecError(f"num_groups ({groups}) must divide the number of logical experts ({num_log})")
    if groups % nodes == 0:  # hierarchical load-balance policy
        if P % nodes:
            raise SpecError(f"num_replicas ({P}) must be a multiple of num_nodes ({nodes})")
        phy2log, phyrank, logcnt = _rebalance_hierarchical(w, P, groups, nodes, gpus)
    else:  # global load-balance policy
        phy2log, phyrank, logcnt = _rebalance_hierarchical(w, P, 1, 1, gpus)
    X = w.shape[0]
    maxcnt = int(logcnt.max())
    log2phy = np.full((X, num_log * maxcnt), -1, dtype=np.int64)
    np.put_along_axis(log2phy, phy2log * maxcnt + phyrank, np.broadcast_to(np.arange(P), (X, P)), axis=1)
    return (phy2log.reshape(lead + (P,)), log2phy.reshape(lead + (num_log, maxcnt)),
            logcnt.reshape(lead + (num_log,)))


def gpu_loads(weight, phy2log, logcnt, num_gpus: int) -> np.ndarray:
    """Load of each GPU for a placement, with every expert's load split evenly over its replicas.

    Parameters
    ----------
    weight : array_like, shape [..., E]
        Logical expert loads.
    phy2log : array_like of int, shape [..., P]
        Logical expert of each physical slot (GPU-major numbering).
    logcnt : array_like of int, shape [..., E]
        Replicas per logical expert.
    num_gpus : int
        GPUs; must divide P.

    Returns
    -------
    ndarray, shape [..., num_gpus]
        Sum over each GPU's slots of ``weight[e] / logcnt[e]``.
    """
    w = np.asarray(weight, dtype=float)
    p2l = np.asarray(phy2log)
    cnt = np.asarray(logcnt)
    P = p2l.shape[-1]
    if P % num_gpus:
        raise SpecError(f"num_gpus ({num_gpus}) must divide the number of slots ({P})")
    per_slot = np.take_along_axis(w / cnt, p2l, axis=-1)
    return per_slot.reshape(per_slot.shape[:-1] + (num_gpus, P // num_gpus)).sum(-1)


def imbalance(loads, axis: int = -1) -> np.ndarray:
    """Max / mean of loads along ``axis`` (1 = perfectly balanced); NaN where the mean is 0."""
    x = np.asarray(loads, dtype=float)
    mean = x.mean(axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(mean > 0, x.max(axis=axis) / mean, np.nan)


def eplb_placement(layer_p, *, ranks: int, redundant: int, groups: int = 1, nodes: int = 1) -> np.ndarray:
    """EPLB replication and placement for expected loads (:func:`rebalance_experts`), shaped [..., L, E].

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
    phy2log, _, _ = rebalance_experts(p.reshape(-1, E), E + redundant, groups, nodes, ranks)
    return phy2log.reshape(p.shape[:-1] + (E + redundant,))

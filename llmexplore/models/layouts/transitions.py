"""Layout transitions: what must move when the attention layout switches, and how long it takes (docs/models.md §3.4).

General rule, implemented directly: a layout maps each rank j to a set C(j) of *cells* it holds. For a switch
X -> Y rank j must receive Delta_in(j) = C_Y(j) minus C_X(j). The primitive is

* ``none``       if C_Y(j) = C_X(j) for every rank;
* ``discard``    if nothing has to be received but some rank holds more than it needs (memory is freed);
* ``all-gather`` if every rank ends up holding everything;
* ``all-to-all`` otherwise,

and the time is alpha(T) + max_j max(V_in(j), V_out(j)) / B_bus, with V_out spreading each cell's sends
evenly over the ranks that hold a replica of it. The 4x4 tables of docs/models.md §3.4 are a test oracle for this
rule, not a lookup table.

Cells. KV: (sequence i, page residue r = page index mod T, KV head h), with bytes proportional to the pages
of residue r; MLA has one latent "head" (replicated under TP). Sequences are dealt round-robin to ranks
under DPA/DOP. Weights: the attention weights that TP shards, as T equal head-group shards (GQA K/V heads
follow ``max(1, h_kv // T)``); MLA's q_a/kv_a are replicated in every layout and never move.

Handoff with layer overlap: the new layout's first step cannot run layer l before its cells arrived. With a
one-layer-deep staging buffer, layer l's transfer overlaps the compute of layer l - 1, and only the part of
that layer during which the links are idle (its time minus its own collectives) hides transfer time:
exposed = t_x(1) + sum_{l>=2} max(0, t_x(l) - slack(l - 1)).

A pipeline's stages switch at once, each its own layers over its own ranks: the worst stage's ceil(L / pp)
layers decide. With speculative decoding the draft layer's KV and attention weights move too (one more layer).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ... import _check
from ...errors import SpecError
from ..step.decode import step_time
from ..step.engine import LAYOUTS, MAX_BATCH, MAX_CONTEXT, Deployment
from ..step.collectives import alpha_s
from ..step.per_token import check_decoding
from ..step.pipeline import stage_deployment
from ..step.speculative import draft_deployment

__all__ = ["Transition", "ownership", "transfer_volumes", "kv_transition", "weight_transition",
           "transition", "transition_matrix", "handoff_time"]


@dataclass(frozen=True)
class Transition:
    """One switch X -> Y of either the KV cache or the weights, for the whole model."""

    src: str
    dst: str
    what: str  # "kv" or "weights"
    primitive: str  # none | discard | all-gather | all-to-all
    recv_B: float  # max over ranks of bytes received
    send_B: float  # max over ranks of bytes sent
    freed_B: float  # max over ranks of bytes no longer needed
    time_s: float  # whole model, serial (no overlap with compute)

    @property
    def moved_B(self) -> float:
        return max(self.recv_B, self.send_B)


def _kv_heads_axis(dep: Deployment) -> int:
    return 1 if dep.model.is_mla else dep.model.kv_heads


@functools.lru_cache(maxsize=512)
def ownership(layout: str, T: int, B: int, heads: int, mla_replicated: bool) -> np.ndarray:
    """Which rank holds which KV cell: boolean array [T, B, T, heads] (rank, sequence, page residue, head).

    ``heads`` is h_kv (GQA) or 1 (MLA); ``mla_replicated`` marks the MLA regime where TP replicates the
    single latent head on every rank.
    """
    if layout not in LAYOUTS:
        raise SpecError(f"layout must be one of {list(LAYOUTS)}, got {layout!r}")
    j = np.arange(T)[:, None, None, None]
    i = np.arange(B)[None, :, None, None]
    r = np.arange(T)[None, None, :, None]
    h = np.arange(heads)[None, None, None, :]
    shape = (T, B, T, heads)
    if layout == "TP":
        if mla_replicated:
            own = np.ones(shape, bool)
        elif T <= heads:  # rank j holds heads [j*heads/T, (j+1)*heads/T)
            own = np.broadcast_to(h // (heads // T) == j, shape)
        else:  # groups of T/heads ranks replicate one head
            own = np.broadcast_to(h == j // (T // heads), shape)
    elif layout == "CP":
        own = np.broadcast_to(r == j, shape)
    else:  # DPA, DOP: sequences dealt round-robin
        own = np.broadcast_to(i % T == j, shape)
    own = np.ascontiguousarray(own)
    own.setflags(write=False)
    return own


def transfer_volumes(own_x: np.ndarray, own_y: np.ndarray, cell_B: np.ndarray) -> dict[str, np.ndarray]:
    """Per-rank receive, send and freed bytes for a switch, plus the primitive.

    Parameters
    ----------
    own_x, own_y : bool arrays [T, C]
        Cell ownership before and after (flattened cells).
    cell_B : array [C]
        Bytes of each cell.
    """
    need = own_y & ~own_x  # [T, C] cells rank j must receive
    recv = need @ cell_B
    freed = (own_x & ~own_y) @ cell_B
    receivers = need.sum(axis=0)  # per cell
    holders = own_x.sum(axis=0)
    if np.any((receivers > 0) & (holders == 0)):
        raise SpecError("a cell needed after the switch is held by no rank before it")
    share = np.where(holders > 0, receivers / np.maximum(holders, 1), 0.0) * cell_B
    send = own_x @ share
    if not need.any():
        prim = "none" if not freed.any() else "discard"
    elif own_y.all():
        prim = "all-gather"
    else:
        prim = "all-to-all"
    return {"recv_B": recv, "send_B": send, "freed_B": freed, "primitive": prim}


def _kv_cell_bytes(dep: Deployment, batch: int, context: float) -> np.ndarray:
    """Bytes (whole model) of each KV cell [B, T, heads], page-exact."""
    T, P = dep.ranks, dep.runtime.page_tokens
    heads = _kv_heads_axis(dep)
    n_pg = int(np.ceil(context / P))
    pages_r = n_pg // T + (np.arange(T) < n_pg % T)  # pages with index = r mod T
    per_head_token = dep.model.kv_bytes_per_token(dep.kv_dtype) / heads
    cell = pages_r * P * per_head_token  # [T]
    return np.broadcast_to(cell[None, :, None], (batch, T, heads))


def _kv_volumes(dep: Deployment, src: str, dst: str, batch: int, context: float) -> dict:
    T = dep.ranks
    heads = _kv_heads_axis(dep)
    mla = dep.model.is_mla
    cell = _kv_cell_bytes(dep, batch, context).reshape(-1)
    ox = ownership(src, T, batch, heads, mla).reshape(T, -1)
    oy = ownership(dst, T, batch, heads, mla).reshape(T, -1)
    return transfer_volumes(ox, oy, cell)


def kv_transition(dep: Deployment, src: str, dst: str, batch: int, context: float) -> Transition:
    """KV-cache handoff X -> Y for a batch of ``batch`` sequences of ``context`` tokens (whole model).

    Every sequence has the same context, and which rank owns a sequence's cells depends only on the
    sequence's index modulo T, so the cells of B = q T + r sequences move like q copies of T sequences plus r
    sequences: exact, with memory independent of the batch.
    """
    batch = _check.integer("batch", batch, lo=1, hi=MAX_BATCH)
    context = _check.number("context", context, lo=1, hi=MAX_CONTEXT)
    full, rest = divmod(batch, dep.ranks)
    parts = [(n, _kv_volumes(dep, src, dst, b, context)) for n, b in ((full, dep.ranks), (1, rest)) if n and b]
    v = {k: sum(n * p[k] for n, p in parts) for k in ("recv_B", "send_B", "freed_B")}
    v["primitive"] = parts[0][1]["primitive"]  # the first part covers every residue that occurs
    return _finish(dep, src, dst, "kv", v)


def _weight_cells(dep: Deployment) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Attention weights that TP shards, as cells [B] with per-layout ownership [T, cells].

    GQA: T query-head shards of the q and o projections, plus h_kv K/V-head cells owned like KV heads (so
    T > h_kv replicates them in groups). MLA: T shards of q_b, kv_b and o (q_a and kv_a are replicated in
    every layout and never move).
    """
    m, T = dep.model, dep.ranks
    scale = m.layers * dep.b_w
    p = m.attn_params_per_layer
    if m.is_mla:
        shard = sum(p.values()) - m.mla_replicated_params_per_layer
        cells = np.full(T, shard / T * scale)
        tp = np.eye(T, dtype=bool)
    else:
        h = m.kv_heads
        cells = np.concatenate([np.full(T, (p["q"] + p["o"]) / T * scale),
                                np.full(h, (p["k"] + p["v"]) / h * scale)])
        kv_own = ownership("TP", T, 1, h, False)[:, 0, 0, :]  # [T, h]
        tp = np.concatenate([np.eye(T, dtype=bool), kv_own], axis=1)
    full = np.ones_like(tp)
    return cells, {"TP": tp, "DOP": tp, "CP": full, "DPA": full}


def weight_transition(dep: Deployment, src: str, dst: str) -> Transition:
    """Attention-weight handoff X -> Y (whole model)."""
    for lay in (src, dst):
        if lay not in LAYOUTS:
            raise SpecError(f"layout must be one of {list(LAYOUTS)}, got {lay!r}")
    cell, owns = _weight_cells(dep)
    return _finish(dep, src, dst, "weights", transfer_volumes(owns[src], owns[dst], cell))


def _finish(dep: Deployment, src: str, dst: str, what: str, v: dict) -> Transition:
    recv, send = float(v["recv_B"].max()), float(v["send_B"].max())
    moved = max(recv, send)
    T = dep.ranks
    link = dep.fabric.scale_up if dep.fabric.split(T)[1] == 1 else dep.fabric.scale_out
    time = 0.0 if moved == 0 else alpha_s(T, link) * dep.model.layers + moved / (link.achievable_GBps * 1e9)
    return Transition(src, dst, what, v["primitive"], recv, send, float(v["freed_B"].max()), time)


def _switched(dep: Deployment, pp, speculative) -> list[Deployment]:
    """What one rank switches, as deployments: the worst pipeline stage's layers (the whole model for pp = 1)
    and, with speculative decoding, the draft layer."""
    p, spec = check_decoding(dep, pp, speculative)
    out = [stage_deployment(dep, p)]
    draft = draft_deployment(dep, spec) if spec is not None else None
    return out + ([draft] if draft is not None else [])


def _plus(a: Transition, b: Transition) -> Transition:
    """Two parts moved by the same ranks over the same link, one after the other."""
    return Transition(a.src, a.dst, a.what, a.primitive, a.recv_B + b.recv_B, a.send_B + b.send_B,
                      a.freed_B + b.freed_B, a.time_s + b.time_s)


def transition(dep: Deployment, src: str, dst: str, batch: int, context: float, *,
               weights_resident: bool = False, pp=1, speculative=None) -> dict[str, Transition | float]:
    """KV and weight transitions X -> Y and their combined serial time [s].

    ``weights_resident``: keep the replicated attention weights in memory in every layout, so switching
    never moves weights (costs (T-1)/T of the shardable attention weights in TP/DOP memory). ``pp``: the worst
    stage's layers (stages switch in parallel); ``speculative``: plus the draft layer's KV and weights.
    """
    parts = _switched(dep, pp, speculative)
    kv = functools.reduce(_plus, (kv_transition(d, src, dst, batch, context) for d in parts))
    w = functools.reduce(_plus, (weight_transition(d, src, dst) for d in parts))
    w_time = 0.0 if weights_resident else w.time_s
    return {"kv": kv, "weights": w, "time_s": kv.time_s + w_time}


def transition_matrix(dep: Deployment, batch: int, context: float, *, what: str = "kv") -> list[dict]:
    """All 16 transitions as records: src, dst, primitive, recv/send/freed GB per rank, time ms."""
    rows = []
    for src in LAYOUTS:
        for dst in LAYOUTS:
            t = kv_transition(dep, src, dst, batch, context) if what == "kv" else weight_transition(dep, src, dst)
            rows.append({"src": src, "dst": dst, "what": what, "primitive": t.primitive,
                         "recv_GB": t.recv_B / 1e9, "send_GB": t.send_B / 1e9, "freed_GB": t.freed_B / 1e9,
                         "time_ms": t.time_s * 1e3})
    return rows


def handoff_time(dep: Deployment, src: str, dst: str, batch: int, context: float, *,
                 weights_resident: bool = False, pp=1, speculative=None) -> dict[str, float]:
    """Time a switch X -> Y adds to the first step in layout Y [s], serial and with layer overlap.

    Layers are uniform in what moves (KV and attention weights are per layer); the slack of a layer is its
    share of Y's step time minus its collectives (links busy). Returns ``serial_s`` (everything moved before
    the step), ``exposed_s`` (one-layer-ahead overlap), ``per_layer_s`` and ``slack_per_layer_s``. ``pp``: the
    worst stage's layers move while the stage runs a micro-batch (ceil(batch / pp) sequences); ``speculative``: the
    draft layer moves too, and the step is the verify pass over k + 1 tokens per sequence.
    """
    tr = transition(dep, src, dst, batch, context, weights_resident=weights_resident, pp=pp,
                    speculative=speculative)
    p, spec = check_decoding(dep, pp, speculative)
    L = sum(d.model.layers for d in _switched(dep, p, spec))
    serial = tr["time_s"]
    if serial == 0:
        return {"serial_s": 0.0, "exposed_s": 0.0, "per_layer_s": 0.0, "slack_per_layer_s": 0.0}
    per_layer = serial / L
    q = {} if spec is None else {"q_tokens": spec.verify_width, "logits_tokens": spec.verify_width}
    st = step_time(dep, max(1, -(-int(batch) // p)), context, dst, **q)
    slack = max(0.0, float((st["step_s"] - st["comm_s"] - st["overhead_s"] - st["head_s"]) / dep.model.layers))
    exposed = per_layer + (L - 1) * max(0.0, per_layer - slack)
    return {"serial_s": serial, "exposed_s": exposed, "per_layer_s": per_layer, "slack_per_layer_s": slack}

"""Load a cached KV prefix from host memory or an SSD, or recompute it: costs, break-even and the gate
(docs/models.md §6.1-6.2).

Only full blocks of ``block_tokens`` tokens are cached (vLLM/LMCache/SGLang HiCache all key whole blocks):
a prefix of P tokens has n = floor(P / B) cached blocks, and the remainder is recomputed either way.

Recompute. The marginal cost of the n*B cached tokens, given that the rest of the prompt (``suffix_tokens``
new tokens) is prefilled anyway, from the vectorised prefill model:

    f(n B) = prefill(n B + s, prefix 0) - prefill(n B + s, prefix n B)

It is linear plus quadratic in n B (the projections and FFN per token, the attention over the prefix), and
includes that a prefill over cached tokens still reads every weight once. ``suffix_tokens`` defaults to 256
[assumption: a new turn or question of a few hundred tokens]; with 1 the cached path is a decode-like step
that reads only the active experts of an MoE model, which makes short recomputes look dear.

Load of n blocks of ``block_B`` bytes (all layers; each TP rank receives its shard, replicated heads and MLA
latents included). Hop 1 reads from the tier at its effective bandwidth (:meth:`StorageTier.effective_GBps`,
Little's law at the tier's queue depth and request size; all ranks of a node share one device); for ``ssd``
and ``network`` tiers hop 2 copies each rank's shard host -> GPU at ``h2d_GBps`` (the ranks' PCIe links in
parallel). Per block: t1 = block_overhead + block_B / BW_eff, t2 = block_B_rank / h2d. Then

    serial:     g(n) = latency + n (t1 + t2)
    pipelined:  g(n) = latency + n max(t1, t2) + min(t1, t2)        (block k+1 read while block k is copied)

Break-even. f - g is convex in the prefix for a dense model, so loading pays exactly from one prefix on:
:func:`break_even` finds that block multiple on the exact curves (the gate: from there on, loading pays for
every longer prefix), and also states it in closed
form from f ~ t_f0 + a P + b P^2 (fitted to the model) and g ~ t_g0 + c P: with dt0 = t_g0 - t_f0,

    P* = [(c - a) + sqrt((c - a)^2 + 4 b dt0)] / (2 b)

set by the fixed latency when c < a (P* ~ dt0 / (a - c)) and by the per-token bandwidth when c >= a
(P* ~ (c - a) / b). All functions broadcast over the prefix length.
"""

from __future__ import annotations

import numpy as np

from ... import _check
from ...errors import SpecError
from ...specs import ModelSpec, StorageTier
from ...units import dtype_bytes
from ..step.engine import Deployment
from ..step.kv_transfer import kv_request_bytes
from ..step.prefill import prefill_time

__all__ = ["block_bytes", "rank_share", "recompute_s", "load_s", "hop_times", "break_even", "decide", "costs", "linear_load", "closed_form_tokens",
           "MAX_PREFIX", "DEFAULT_BLOCK_TOKENS"]

DEFAULT_BLOCK_TOKENS = 256
#: longest prefix evaluated [tokens] (the prefill model's context bound)
MAX_PREFIX = 1 << 21
#: most block counts :func:`break_even` evaluates (one vectorised recompute/load curve over them)
MAX_SEARCH_BLOCKS = 1 << 16
#: smallest block [tokens] for which the break-even search up to MAX_PREFIX stays within MAX_SEARCH_BLOCKS (32)
MIN_SEARCH_BLOCK_TOKENS = -(-MAX_PREFIX // MAX_SEARCH_BLOCKS)


def _block(block_tokens) -> int:
    return _check.integer("block_tokens", block_tokens, lo=1, hi=1 << 16, unit="tokens")


def block_bytes(model: ModelSpec, kv_dtype: str = "bf16", block_tokens: int = DEFAULT_BLOCK_TOKENS) -> int:
    """Bytes of one cached block over all layers (one copy) [B]. Llama-3.2-3B BF16, 256 tokens:
    28 layers x 2 x 8 heads x 128 x 2 B x 256 = 29,360,128 B = 28 MiB."""
    dtype_bytes(kv_dtype, "kv_dtype")
    return int(round(model.kv_bytes_per_token(kv_dtype) * _block(block_tokens)))


def rank_share(dep: Deployment) -> float:
    """Bytes each TP rank receives per logical byte: 1/T, times the replication of GQA heads when T > h_kv,
    and 1 for an MLA latent (every rank holds it)."""
    kv = kv_request_bytes(dep.model, 1, page_tokens=1, prefill_tp=dep.ranks, decode_tp=dep.ranks)
    return float(kv["in_per_rank_B"] / kv["logical_B"])


def _prefix(prefix_tokens, name: str = "prefix_tokens") -> np.ndarray:
    return _check.real_array(name, prefix_tokens, lo=0, hi=MAX_PREFIX, integer=True, unit="tokens")


def recompute_s(dep: Deployment, cached_tokens, *, suffix_tokens=256) -> np.ndarray:
    """Marginal time to recompute ``cached_tokens`` (array) when ``suffix_tokens`` more are prefilled anyway [s]:
    prefill(cached + suffix) - prefill(cached + suffix with the cached tokens as prefix). 0 for 0 tokens."""
    P = _prefix(cached_tokens, "cached_tokens")
    s = _prefix(suffix_tokens, "suffix_tokens")
    if np.any(s < 1):
        raise SpecError(f"suffix_tokens must be an integer >= 1 [tokens] (the prompt's own new tokens), got "
                        f"{float(np.min(s)):g}")
    P, s = np.broadcast_arrays(P, s)
    full = prefill_time(dep, P + s, 0)["prefill_s"]
    rest = prefill_time(dep, P + s, P)["prefill_s"]
    return np.where(P > 0, full - rest, 0.0)


def hop_times(dep: Deployment, tier: StorageTier, *, kv_dtype: str | None = None,
              block_tokens: int = DEFAULT_BLOCK_TOKENS, read_GBps=None, latency_us=None) -> dict:
    """Per-block times of the two hops [s] and the tier's fixed latency: ``read_s`` (tier -> host, or host ->
    GPU for a dram tier, overhead included), ``h2d_s`` (host -> GPU, 0 for dram), ``latency_s``,
    ``block_B`` (one copy) and ``rank_B`` (what each TP rank receives).

    ``read_GBps`` / ``latency_us`` (arrays) replace the tier's device bandwidth and latency, e.g. to sweep
    them: the effective bandwidth keeps the tier's Little's-law share of its device bandwidth, and the times
    broadcast over the two arrays."""
    kv_dtype = dep.kv_dtype if kv_dtype is None else kv_dtype
    blk = block_bytes(dep.model, kv_dtype, block_tokens)
    rank_B = blk * rank_share(dep)
    bw = tier.effective_GBps() * 1e9
    if read_GBps is not None:
        dev = _check.real_array("read_GBps", read_GBps, lo=0, lo_open=True, hi=1e5, unit="GB/s")
        bw = dev * (tier.effective_GBps() / tier.read_GBps) * 1e9
    latency = tier.latency_us * 1e-6
    if latency_us is not None:
        latency = _check.real_array("latency_us", latency_us, lo=0, hi=1e7, unit="us") * 1e-6
    if tier.kind == "dram":  # every rank copies its own shard over its own PCIe link
        read = tier.block_overhead_us * 1e-6 + rank_B / bw
        h2d = 0.0 * read
    else:  # one device per node serves every rank's shard, then each rank's PCIe link copies its share
        read = tier.block_overhead_us * 1e-6 + blk / bw
        h2d = rank_B / (tier.h2d_GBps * 1e9) + 0.0 * read
    return {"read_s": read, "h2d_s": h2d, "latency_s": latency, "block_B": float(blk), "rank_B": rank_B}


def linear_load(h: dict, block_tokens: int, pipelined: bool = True) -> tuple:
    """The load as ``t_g0 + c * cached_tokens`` for n >= 1 blocks: (c [s/token], t_g0 [s]) from
    :func:`hop_times` ``h``: pipelined, ``c = max(t1, t2) / B`` and ``t_g0 = latency + min(t1, t2)``;
    serial, ``c = (t1 + t2) / B`` and ``t_g0 = latency``. Broadcasts over array hop times."""
    t1, t2 = h["read_s"], h["h2d_s"]
    if pipelined:
        return np.maximum(t1, t2) / block_tokens, h["latency_s"] + np.minimum(t1, t2)
    return (t1 + t2) / block_tokens, h["latency_s"] + 0.0 * t1


def load_s(dep: Deployment, tier: StorageTier, prefix_tokens, *, kv_dtype: str | None = None,
           block_tokens: int = DEFAULT_BLOCK_TOKENS, pipelined: bool = True) -> dict[str, np.ndarray]:
    """Time to load the full blocks of ``prefix_tokens`` (array) from ``tier`` [s] (module docstring):
    ``load_s`` (0 when there is no full block), ``blocks``, ``cached_tokens``, ``bytes_B`` (one copy)."""
    B = _block(block_tokens)
    _check.boolean("pipelined", pipelined)
    P = _prefix(prefix_tokens)
    n = np.floor(P / B)
    h = hop_times(dep, tier, kv_dtype=kv_dtype, block_tokens=B)
    c, t_g0 = linear_load(h, B, pipelined)
    return {"load_s": np.where(n > 0, t_g0 + c * n * B, 0.0), "blocks": n, "cached_tokens": n * B,
            "bytes_B": n * h["block_B"]}


def _fit_recompute(dep: Deployment, B: int, suffix_tokens: int, hi_tokens: float) -> tuple[float, float, float]:
    """(t_f0, a, b) of f(P) ~ t_f0 + a P + b P^2 [s, s/token, s/token^2], least squares over block multiples up
    to ``hi_tokens`` (the range the break-even lies in)."""
    n_hi = max(4, int(np.ceil(hi_tokens / B)))
    P = np.unique(np.round(np.geomspace(1, n_hi, 48))) * B
    f = recompute_s(dep, P, suffix_tokens=suffix_tokens)
    A = np.stack([np.ones_like(P), P, P * P], axis=1)
    (t0, a, b), *_ = np.linalg.lstsq(A, f, rcond=None)
    return float(t0), float(a), max(float(b), 1e-30)


def break_even(dep: Deployment, tier: StorageTier, *, kv_dtype: str | None = None,
               block_tokens: int = DEFAULT_BLOCK_TOKENS, pipelined: bool = True, suffix_tokens: int = 256,
               max_tokens: int = MAX_PREFIX) -> dict:
    """The shortest prefix from which loading beats recomputing, and why.

    Returns ``tokens`` (a block multiple, exact on the model's curves: the gate; ``inf`` if loading never
    pays up to ``max_tokens``), ``closed_form_tokens`` (P* of the module docstring, before rounding up to a
    block), ``set_by`` ("latency" or "bandwidth"), and the terms ``a_s_per_token``, ``b_s_per_token2``,
    ``c_s_per_token``, ``t_f0_s``, ``t_g0_s``.
    """
    B = _block(block_tokens)
    max_tokens = _check.integer("max_tokens", max_tokens, lo=B, hi=MAX_PREFIX, unit="tokens")
    if B * MAX_SEARCH_BLOCKS < max_tokens:  # the search would evaluate more than MAX_SEARCH_BLOCKS block counts
        raise SpecError(f"block_tokens must be at least {-(-max_tokens // MAX_SEARCH_BLOCKS):,} [tokens] for a "
                        f"break-even search up to {max_tokens:,} tokens (at most {MAX_SEARCH_BLOCKS:,} blocks), "
                        f"got {B:,}")
    c, t_g0 = (float(x) for x in linear_load(hop_times(dep, tier, kv_dtype=kv_dtype, block_tokens=B), B,
                                              pipelined))

    # recompute - load on every block count up to the bound (one vectorised evaluation): the gate is the start
    # of the last run where it is >= 0, so that loading pays for this prefix and every longer one. (f - g is
    # convex for a dense model; an MoE prefill that wakes every expert can make loading pay for a few short
    # prefixes too: ``also_pays_below`` says so.)
    n = np.arange(1, max_tokens // B + 1, dtype=float)
    loss = (recompute_s(dep, n * B, suffix_tokens=suffix_tokens)
            - load_s(dep, tier, n * B, kv_dtype=kv_dtype, block_tokens=B, pipelined=pipelined)["load_s"])
    losing = np.flatnonzero(loss < 0)
    if losing.size == 0:
        tokens, below = float(B), False
    elif losing[-1] == n.size - 1:
        tokens, below = float("inf"), bool(np.any(loss >= 0))
    else:
        tokens, below = float((losing[-1] + 2) * B), bool(np.any(loss[: losing[-1]] >= 0))
    t_f0, a, b = _fit_recompute(dep, B, suffix_tokens, min(max_tokens, 4 * tokens if np.isfinite(tokens)
                                                            else max_tokens))
    closed = float(closed_form_tokens(a, b, c, t_g0 - t_f0))
    return {"tokens": tokens, "closed_form_tokens": float(closed), "set_by": "latency" if c < a else "bandwidth",
            "also_pays_below": below,
            "a_s_per_token": a, "b_s_per_token2": b, "c_s_per_token": c, "t_f0_s": t_f0, "t_g0_s": t_g0,
            "block_tokens": B, "pipelined": bool(pipelined)}


def closed_form_tokens(a, b, c, dt0):
    """P* = [(c - a) + sqrt((c - a)^2 + 4 b dt0)] / (2 b), at least 0 [tokens] (module docstring): the prefix
    where t_f0 + a P + b P^2 = t_g0 + c P, with dt0 = t_g0 - t_f0. Broadcasts."""
    return np.maximum(0.0, ((c - a) + np.sqrt(np.maximum((c - a) ** 2 + 4 * b * dt0, 0.0))) / (2 * b))


def decide(dep: Deployment, tier: StorageTier, prefix_tokens, **kwargs) -> np.ndarray:
    """The gate: "load" where the prefix is at or above the break-even, else "recompute" (array of str)."""
    P = _prefix(prefix_tokens)
    be = break_even(dep, tier, **kwargs)["tokens"]
    return np.where(P >= be, "load", "recompute")


def costs(dep: Deployment, tier: StorageTier, prefix_tokens, *, kv_dtype: str | None = None,
          block_tokens: int = DEFAULT_BLOCK_TOKENS, pipelined: bool = True, suffix_tokens: int = 256) -> dict:
    """Both costs of ``prefix_tokens`` (array) [s] with the decision: ``recompute_s`` (of the cached blocks'
    tokens), ``load_s``, ``saving_s`` (recompute - load, > 0 when loading pays), ``decision``, plus the blocks,
    cached tokens and bytes of :func:`load_s`."""
    ld = load_s(dep, tier, prefix_tokens, kv_dtype=kv_dtype, block_tokens=block_tokens, pipelined=pipelined)
    rc = recompute_s(dep, ld["cached_tokens"], suffix_tokens=suffix_tokens)
    be = break_even(dep, tier, kv_dtype=kv_dtype, block_tokens=block_tokens, pipelined=pipelined,
                    suffix_tokens=suffix_tokens)
    P = _prefix(prefix_tokens)
    return {**ld, "recompute_s": rc, "saving_s": rc - ld["load_s"],
            "decision": np.where(P >= be["tokens"], "load", "recompute"), "break_even": be}

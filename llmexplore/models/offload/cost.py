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

Pipelines (``pp`` stages of T ranks, docs/models.md §6.6). Recompute is the pipelined prefill
(:func:`~llmexplore.models.step.pipeline.pp_prefill`): its latency is the whole model on one stage's T ranks plus
the pp - 1 stage-to-stage sends of the prompt's hidden states, so the marginal f gains (pp - 1) sends of the
cached tokens' activations, and the pipeline accepts a new prompt every stage's share (the service time a pool is
sized with). Loading: every stage reads the KV of its own layers (ceil(L / pp) / L of the bytes for the worst
stage, :func:`stage_bytes`) into its own GPUs, as LMCache's vLLM adapter keys each pipeline rank's own layers
(``model_config.get_num_layers(parallel_config)``). A storage preset describes one node's path (one NVMe drive,
one host's PCIe links, one NIC to the file server: data/storage.yaml), so stages on one node share its drive and
read all L layers through it, while stages on different nodes (pp x T beyond a node's GPUs,
:func:`~llmexplore.models.step.pipeline.hop_link`'s rule) each read theirs through their own node's drive and the
worst node reads only its stages' share [assumption: each node has the preset's drive, the file server is not
the bottleneck]. The host -> GPU hop and the dram tier copy each rank's share of its stage's layers over its own
PCIe link. So with stages across nodes c falls by the worst node's share, and the break-even moves as the closed
form says (smaller c, slightly larger a).

Speculative decoding. An MTP module or an EAGLE-style draft head keeps KV of its own for every cached token, and
the engines store and load it with the target's: LMCache's vLLM adapter adds the draft's layers to the layers
it stores (``_calculate_mtp_layers``: DeepSeek's num_nextn_predict_layers, an EAGLE draft's layer count; LMCache
PR #1668), SGLang HiCache moves the draft KV in the same host (L2) and storage (L3: file, Mooncake, ...)
operation as the target's, packed as a tail layer for MTP/NextN or as a sidecar pool for EAGLE
(sgl-project/sglang#30393, merged 2026; before it a hit restored only the target's KV and the draft drafted from
stale KV: #17338, #31600), and vLLM's OffloadingConnector moves an MTP layer that shares the target's KV-cache
group with it (vllm-project/vllm#52771). So a block holds one more layer (:func:`draft_block_bytes`: DeepSeek-V3's
MTP adds one MLA layer of 576 values per token), and recomputing the prefix also runs the draft's prefill over
its tokens (its one layer and its fuse projection, :func:`draft_prefill_s`), as the engines do after the
target's prefill. N-gram lookup has no draft model: nothing changes. The accepted length does not enter: it sets
the decode, not the prefill or the bytes.
"""

from __future__ import annotations

import numpy as np

from ... import _check
from ...errors import SpecError
from ...specs import ModelSpec, SpecDecode, StorageTier
from ...units import dtype_bytes
from ..step.engine import EMB_BYTES, Deployment, gemm_s
from ..step.kv_transfer import kv_request_bytes
from ..step.per_token import check_decoding
from ..step.pipeline import pp_prefill, stage_layers
from ..step.prefill import prefill_time
from ..step.speculative import FUSE_WIDTH, draft_deployment, draft_model, resolve_spec

__all__ = ["block_bytes", "rank_share", "recompute_s", "load_s", "hop_times", "break_even", "decide", "costs", "linear_load", "closed_form_tokens",
           "MAX_PREFIX", "DEFAULT_BLOCK_TOKENS", "decoding", "stage_bytes", "draft_block_bytes", "placement",
           "prefill_parts", "draft_prefill_s", "recompute_parts"]

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


def decoding(dep: Deployment, pp=1, speculative=None) -> tuple[int, SpecDecode | None]:
    """(pp, spec) checked against the deployment: ``pp`` stages of ``dep.ranks`` GPUs (at most the model's layers,
    pp x ranks within the largest instance the models price) and ``speculative`` (a preset name, a SpecDecode or
    None; an MTP preset needs the model's MTP module), not both (:func:`~llmexplore.models.step.per_token.
    check_decoding`: SpecError naming ``pp`` or ``speculative``)."""
    return check_decoding(dep, pp, speculative)


def _has_draft(spec: SpecDecode | None) -> bool:
    """A speculative method with a draft model (MTP or a draft head; n-gram lookup has none)."""
    return spec is not None and spec.method != "ngram"


def stage_bytes(model: ModelSpec, pp: int = 1, kv_dtype: str = "bf16",
                block_tokens: int = DEFAULT_BLOCK_TOKENS) -> np.ndarray:
    """Bytes of one cached block that each pipeline stage loads (the KV of its own layers, one copy) [B], one entry
    per stage (:func:`~llmexplore.models.step.pipeline.stage_layers`: contiguous, the first stages one layer longer
    when pp does not divide L); they add up to :func:`block_bytes`. Llama-3-70B BF16 at PP 3: 27, 27 and 26 of its
    80 layers."""
    per_layer = model.kv_bytes_per_token_per_layer(kv_dtype) * _block(block_tokens)
    return np.asarray(stage_layers(model, pp), dtype=float) * per_layer


def draft_block_bytes(model: ModelSpec, speculative=None, kv_dtype: str = "bf16",
                      block_tokens: int = DEFAULT_BLOCK_TOKENS) -> int:
    """Bytes of one cached block of the draft model's own KV [B]: one layer of the draft
    (:func:`~llmexplore.models.step.speculative.draft_model`: DeepSeek-V3's MTP module is one MLA layer, 512 + 64 =
    576 values per token; an EAGLE head one layer of the target's attention); 0 without speculation and for
    n-gram lookup (no draft model). The engines store and load it with the target's (module docstring)."""
    spec = resolve_spec(speculative)
    if not _has_draft(spec):
        _block(block_tokens)
        return 0
    return block_bytes(draft_model(model, spec), kv_dtype, block_tokens)


def placement(dep: Deployment, pp: int = 1) -> dict:
    """Where the stages of a ``pp`` x ``dep.ranks`` instance read their KV from (module docstring): ``nodes``
    (storage paths: one per node the instance spans), ``stages_per_node``, ``shared`` (True: every stage is on one
    node and reads through its one drive), ``stage_share`` (the worst stage's layers / L) and ``node_share`` (the
    layers the worst node's drive reads / L: 1 on one node). A stage is not split over nodes [assumption: T divides
    the node's GPUs]; a stage wider than a node reads through one drive, as one instance does at pp = 1."""
    layers = stage_layers(dep.model, pp)
    L, p, T, G = dep.model.layers, len(layers), dep.ranks, dep.fabric.gpus_per_node
    shared = p * T <= G   # pipeline.hop_link: the stages' GPUs fit in one node
    per_node = p if shared else max(1, G // T)
    return {"nodes": 1 if shared else -(-p // per_node), "stages_per_node": per_node, "shared": shared,
            "stage_share": max(layers) / L, "node_share": sum(layers[:per_node]) / L}


def _prefix(prefix_tokens, name: str = "prefix_tokens") -> np.ndarray:
    return _check.real_array(name, prefix_tokens, lo=0, hi=MAX_PREFIX, integer=True, unit="tokens")


def draft_prefill_s(dep: Deployment, speculative, prompt_tokens, prefix_tokens=0) -> np.ndarray:
    """The draft model's prefill of a prompt whose ``prefix_tokens`` are cached [s]: its one layer over the new
    tokens (:func:`~llmexplore.models.step.prefill.prefill_time` of
    :func:`~llmexplore.models.step.speculative.draft_deployment`: attention over the whole prompt, its FFN or MoE
    layer, one LM-head row) plus its fuse projection of every new token (FUSE_WIDTH hidden sizes -> H, BF16:
    MTP's eh_proj, EAGLE-3's fc), which SGLang's draft extend and vLLM's drafter run after the target's prefill to
    fill the draft's KV. 0 without a draft model (no speculation, n-gram lookup). Broadcasts."""
    spec = None if speculative is None else check_decoding(dep, 1, speculative)[1]
    S = np.asarray(prompt_tokens, dtype=float)
    P = np.asarray(prefix_tokens, dtype=float)
    if not _has_draft(spec):
        return np.zeros(np.broadcast_shapes(S.shape, P.shape))
    ddep = draft_deployment(dep, spec)
    own = prefill_time(ddep, S, P)["prefill_s"]
    H = dep.model.hidden
    fuse = gemm_s(dep, np.maximum(S - P, 1.0), FUSE_WIDTH[spec.method] * H, H, b_w=EMB_BYTES)
    return np.asarray(own + fuse, dtype=float)


def prefill_parts(dep: Deployment, prompt_tokens, prefix_tokens=0, *, pp=1, speculative=None) -> dict:
    """One prompt's prefill with ``prefix_tokens`` cached (the load not included) [s]: ``latency_s`` (its TTFT
    less the queue wait) and ``service_s`` (how often the instance accepts a new prompt): the plain prefill
    (both equal) at pp = 1, :func:`~llmexplore.models.step.pipeline.pp_prefill` for a pipeline, plus the draft's
    prefill (:func:`draft_prefill_s`) when decoding speculatively with a draft model. Broadcasts."""
    p, spec = decoding(dep, pp, speculative)
    pf = pp_prefill(dep, p, prompt_tokens, prefix_tokens)
    lat, srv = np.asarray(pf["latency_s"], dtype=float), np.asarray(pf["service_s"], dtype=float)
    if _has_draft(spec):  # p == 1: a pipeline does not run a draft (decoding)
        d = draft_prefill_s(dep, spec, prompt_tokens, prefix_tokens)
        lat, srv = lat + d, srv + d
    return {"latency_s": lat, "service_s": srv}


def recompute_parts(dep: Deployment, cached_tokens, *, suffix_tokens=256, pp=1, speculative=None) -> dict:
    """Marginal time to recompute ``cached_tokens`` (array) when ``suffix_tokens`` more are prefilled anyway [s],
    of the latency (``latency_s``) and of the service time (``service_s``) of :func:`prefill_parts`:
    parts(cached + suffix) - parts(cached + suffix with the cached tokens as prefix). 0 for 0 tokens."""
    P = _prefix(cached_tokens, "cached_tokens")
    s = _prefix(suffix_tokens, "suffix_tokens")
    if np.any(s < 1):
        raise SpecError(f"suffix_tokens must be an integer >= 1 [tokens] (the prompt's own new tokens), got "
                        f"{float(np.min(s)):g}")
    P, s = np.broadcast_arrays(P, s)
    full = prefill_parts(dep, P + s, 0, pp=pp, speculative=speculative)
    rest = prefill_parts(dep, P + s, P, pp=pp, speculative=speculative)
    return {k: np.where(P > 0, full[k] - rest[k], 0.0) for k in ("latency_s", "service_s")}


def recompute_s(dep: Deployment, cached_tokens, *, suffix_tokens=256, pp=1, speculative=None) -> np.ndarray:
    """Marginal time to recompute ``cached_tokens`` (array) when ``suffix_tokens`` more are prefilled anyway [s]:
    prefill(cached + suffix) - prefill(cached + suffix with the cached tokens as prefix), of the pipelined prefill's
    latency with ``pp`` stages and with the draft's prefill when decoding ``speculative``ly (module docstring).
    0 for 0 tokens."""
    return recompute_parts(dep, cached_tokens, suffix_tokens=suffix_tokens, pp=pp,
                           speculative=speculative)["latency_s"]


def hop_times(dep: Deployment, tier: StorageTier, *, kv_dtype: str | None = None,
              block_tokens: int = DEFAULT_BLOCK_TOKENS, read_GBps=None, latency_us=None, pp=1,
              speculative=None) -> dict:
    """Per-block times of the two hops [s] and the tier's fixed latency: ``read_s`` (tier -> host, or host ->
    GPU for a dram tier, overhead included), ``h2d_s`` (host -> GPU, 0 for dram), ``latency_s``,
    ``block_B`` (one copy, the draft's layer included), ``stage_B`` (what the worst stage loads, one copy),
    ``node_B`` (what the worst node's drive reads) and ``rank_B`` (what each rank of the worst stage receives).

    ``pp`` stages and ``speculative`` decoding as in the module docstring: every stage reads its own layers, stages
    on different nodes through their own drives; a draft model's layer is one more layer of every block.
    ``read_GBps`` / ``latency_us`` (arrays) replace the tier's device bandwidth and latency, e.g. to sweep
    them: the effective bandwidth keeps the tier's Little's-law share of its device bandwidth, and the times
    broadcast over the two arrays."""
    kv_dtype = dep.kv_dtype if kv_dtype is None else kv_dtype
    p, spec = decoding(dep, pp, speculative)
    blk = block_bytes(dep.model, kv_dtype, block_tokens)
    where = placement(dep, p)
    draft_B = float(draft_block_bytes(dep.model, spec, kv_dtype, block_tokens))
    draft_rank_B = draft_B * rank_share(draft_deployment(dep, spec)) if draft_B else 0.0
    rank_B = blk * rank_share(dep) * where["stage_share"] + draft_rank_B
    node_B = blk * where["node_share"] + draft_B
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
    else:  # one device per node serves every rank's shard of its stages, then each rank's PCIe link copies its share
        read = tier.block_overhead_us * 1e-6 + node_B / bw
        h2d = rank_B / (tier.h2d_GBps * 1e9) + 0.0 * read
    return {"read_s": read, "h2d_s": h2d, "latency_s": latency, "block_B": float(blk) + draft_B,
            "stage_B": blk * where["stage_share"] + draft_B, "node_B": node_B, "rank_B": rank_B,
            "draft_B": draft_B, "nodes": where["nodes"]}


def linear_load(h: dict, block_tokens: int, pipelined: bool = True) -> tuple:
    """The load as ``t_g0 + c * cached_tokens`` for n >= 1 blocks: (c [s/token], t_g0 [s]) from
    :func:`hop_times` ``h``: pipelined, ``c = max(t1, t2) / B`` and ``t_g0 = latency + min(t1, t2)``;
    serial, ``c = (t1 + t2) / B`` and ``t_g0 = latency``. Broadcasts over array hop times."""
    t1, t2 = h["read_s"], h["h2d_s"]
    if pipelined:
        return np.maximum(t1, t2) / block_tokens, h["latency_s"] + np.minimum(t1, t2)
    return (t1 + t2) / block_tokens, h["latency_s"] + 0.0 * t1


def load_s(dep: Deployment, tier: StorageTier, prefix_tokens, *, kv_dtype: str | None = None,
           block_tokens: int = DEFAULT_BLOCK_TOKENS, pipelined: bool = True, pp=1,
           speculative=None) -> dict[str, np.ndarray]:
    """Time to load the full blocks of ``prefix_tokens`` (array) from ``tier`` [s] (module docstring), by the
    worst stage of a ``pp``-stage pipeline and with a ``speculative`` draft's layer: ``load_s`` (0 when there is
    no full block), ``blocks``, ``cached_tokens``, ``bytes_B`` (one copy of every layer, the draft's included)."""
    B = _block(block_tokens)
    _check.boolean("pipelined", pipelined)
    P = _prefix(prefix_tokens)
    n = np.floor(P / B)
    h = hop_times(dep, tier, kv_dtype=kv_dtype, block_tokens=B, pp=pp, speculative=speculative)
    c, t_g0 = linear_load(h, B, pipelined)
    return {"load_s": np.where(n > 0, t_g0 + c * n * B, 0.0), "blocks": n, "cached_tokens": n * B,
            "bytes_B": n * h["block_B"]}


def _fit_recompute(dep: Deployment, B: int, suffix_tokens: int, hi_tokens: float, pp=1,
                   speculative=None) -> tuple[float, float, float]:
    """(t_f0, a, b) of f(P) ~ t_f0 + a P + b P^2 [s, s/token, s/token^2], least squares over block multiples up
    to ``hi_tokens`` (the range the break-even lies in)."""
    n_hi = max(4, int(np.ceil(hi_tokens / B)))
    P = np.unique(np.round(np.geomspace(1, n_hi, 48))) * B
    f = recompute_s(dep, P, suffix_tokens=suffix_tokens, pp=pp, speculative=speculative)
    A = np.stack([np.ones_like(P), P, P * P], axis=1)
    (t0, a, b), *_ = np.linalg.lstsq(A, f, rcond=None)
    return float(t0), float(a), max(float(b), 1e-30)


def break_even(dep: Deployment, tier: StorageTier, *, kv_dtype: str | None = None,
               block_tokens: int = DEFAULT_BLOCK_TOKENS, pipelined: bool = True, suffix_tokens: int = 256,
               max_tokens: int = MAX_PREFIX, pp=1, speculative=None) -> dict:
    """The shortest prefix from which loading beats recomputing, and why (with ``pp`` pipeline stages or
    ``speculative`` decoding's draft layer: module docstring).

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
    c, t_g0 = (float(x) for x in linear_load(hop_times(dep, tier, kv_dtype=kv_dtype, block_tokens=B, pp=pp,
                                                        speculative=speculative), B, pipelined))

    # recompute - load on every block count up to the bound (one vectorised evaluation): the gate is the start
    # of the last run where it is >= 0, so that loading pays for this prefix and every longer one. (f - g is
    # convex for a dense model; an MoE prefill that wakes every expert can make loading pay for a few short
    # prefixes too: ``also_pays_below`` says so.)
    n = np.arange(1, max_tokens // B + 1, dtype=float)
    loss = (recompute_s(dep, n * B, suffix_tokens=suffix_tokens, pp=pp, speculative=speculative)
            - load_s(dep, tier, n * B, kv_dtype=kv_dtype, block_tokens=B, pipelined=pipelined, pp=pp,
                     speculative=speculative)["load_s"])
    losing = np.flatnonzero(loss < 0)
    if losing.size == 0:
        tokens, below = float(B), False
    elif losing[-1] == n.size - 1:
        tokens, below = float("inf"), bool(np.any(loss >= 0))
    else:
        tokens, below = float((losing[-1] + 2) * B), bool(np.any(loss[: losing[-1]] >= 0))
    t_f0, a, b = _fit_recompute(dep, B, suffix_tokens, min(max_tokens, 4 * tokens if np.isfinite(tokens)
                                                            else max_tokens), pp, speculative)
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
          block_tokens: int = DEFAULT_BLOCK_TOKENS, pipelined: bool = True, suffix_tokens: int = 256, pp=1,
          speculative=None) -> dict:
    """Both costs of ``prefix_tokens`` (array) [s] with the decision: ``recompute_s`` (of the cached blocks'
    tokens), ``load_s``, ``saving_s`` (recompute - load, > 0 when loading pays), ``decision``, plus the blocks,
    cached tokens and bytes of :func:`load_s`."""
    dec = {"pp": pp, "speculative": speculative}
    ld = load_s(dep, tier, prefix_tokens, kv_dtype=kv_dtype, block_tokens=block_tokens, pipelined=pipelined, **dec)
    rc = recompute_s(dep, ld["cached_tokens"], suffix_tokens=suffix_tokens, **dec)
    be = break_even(dep, tier, kv_dtype=kv_dtype, block_tokens=block_tokens, pipelined=pipelined,
                    suffix_tokens=suffix_tokens, **dec)
    P = _prefix(prefix_tokens)
    return {**ld, "recompute_s": rc, "saving_s": rc - ld["load_s"],
            "decision": np.where(P >= be["tokens"], "load", "recompute"), "break_even": be}

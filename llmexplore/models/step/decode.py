"""Attention layouts TP, CP, DPA and DOP on T ranks: memory per rank and decode step time (docs/models.md §3).

Layouts of the attention block (the FFN/MoE block is the same for all four: dense FFN tensor-parallel over
the T ranks, routed experts expert-parallel over the T ranks, shared experts tensor-parallel):

* **TP**  head-sharded: rank j owns h_q/T query heads and max(1, h_kv // T) KV heads (MLA: the single latent
  is replicated); every rank projects all N = B*q tokens; O-proj row-parallel + AllReduce.
* **CP**  context-parallel decode: attention weights replicated; each sequence's KV pages dealt round-robin
  over ranks; every rank runs all heads for all tokens against its KV shard, partial outputs (O, LSE) are
  merged with an AllReduce (per-head V-space, so MLA merges after W_UV); O-proj replicated.
* **DPA** data-parallel attention: sequences partitioned over ranks, full attention weights on each rank,
  no communication inside attention; the FFN boundary gathers the *padded* token count
  N_pad = T * q * ceil(B/T) (SGLang pads DP-attention batches) and scatters it back.
* **DOP** weights sharded like TP, KV owned per request like DPA: head-sharded projections, then an
  AllToAll heads->batch, batch-sharded attention core (all heads of the owned sequences), an AllToAll
  batch->heads, row-parallel O-proj + AllReduce. MLA is absorbed: Q travels as 576-wide latents per head,
  O as 512-wide latents.

Step time is a sum of per-kernel rooflines (priced by :mod:`.engine`) on the worst rank plus alpha-beta collectives
(:mod:`.collectives`) plus a fixed per-step overhead; communication is not overlapped with compute, except the
MoE all-to-all of a DPA step with ``Deployment.two_batch_overlap`` (:func:`two_batch_overlap_s`).

MoE dispatch of DPA steps with ``moe_dispatch == "alltoall"`` (DeepEP, :func:`deepep_layer_s`): a step with
fewer than PREFILL_QUERY_TOKENS query tokens per sequence runs DeepEP's low-latency kernels (one copy per routed
expert), a prefill step its normal kernels (one copy per distinct destination node over RDMA, forwarded over
NVLink), as SGLang's ``--deepep-mode auto`` does.

Assumptions: equal context lengths s in the batch unless ``context_cv`` > 0, in which case the worst DPA/DOP
rank carries s * (n + cv * z_T * sqrt(n)) context tokens for n = ceil(B/T) sequences per rank (random
assignment, docs/models.md §3.3); CP attention time uses s/T tokens per rank (token-granular), CP memory the
page-exact worst rank; MoE routing uniform (skew is modeled in the MoE area); embeddings, norms and the
router stay BF16 when weights are FP8. Shapes: ``batch`` and ``context`` broadcast against each other; every
output array has the broadcast shape.
"""

from __future__ import annotations

import math

import numpy as np

from ... import _check
from ...errors import SpecError
from ...measured import DEEPEP_LL_OPS
from .collectives import (DEEPEP_NORMAL_SMS, allgather_s, allreduce_s, alltoall_s, deepep_ll_s,
                          deepep_normal_s, fp8_dispatch_bytes, reducescatter_s)
from .sampler import sampler_s
from .engine import (EMB_BYTES, LAYOUTS, LOGIT_BYTES, MAX_BATCH, MAX_CONTEXT, PREFILL_QUERY_TOKENS, Deployment,
                     check_batch_context, elementwise_s, gemm_s, kernel_s, moe_s, step_overhead_s)
from .stats import distinct_ranks_uniform

__all__ = ["memory_per_rank", "step_time", "evaluate", "evaluate_all",
           "max_batch", "max_context", "core_coefficients", "core_s", "layers_core_s", "deepep_layer_s",
           "two_batch_overlap_s"]

# ---- per-layout token and KV accounting ----------------------------------------------------------------------
def _seqs_worst(dep: Deployment, b: np.ndarray) -> np.ndarray:
    """Sequences on the worst DPA/DOP rank: ceil(B/T)."""
    return np.ceil(b / dep.ranks)


def _ctx_share_worst(dep: Deployment, n: np.ndarray) -> np.ndarray:
    """Context of the worst DPA/DOP rank in units of the mean context s: n + cv z_T sqrt(n)."""
    if dep.context_cv == 0 or dep.ranks == 1:
        return n
    return n + dep.context_cv * dep.z_ranks * np.sqrt(n)


def _kv_layer_bytes_per_token(dep: Deployment, layout: str) -> float:
    """KV bytes per context token per layer that one rank holds for a sequence it stores."""
    m = dep.model
    if layout == "TP" and not m.is_mla:
        return 2 * m.head_dim * m.kv_heads_per_rank(dep.ranks) * dep.b_kv
    return m.kv_bytes_per_token_per_layer(dep.kv_dtype)


def memory_per_rank(dep: Deployment, batch, context, layout: str) -> dict[str, np.ndarray]:
    """Memory of the worst rank [B], by part, and feasibility against usable HBM.

    KV is paged (``runtime.page_tokens``); CP's worst rank holds ceil(n_pages / T) pages per sequence;
    DPA/DOP's worst rank holds its ceil(B/T) sequences (imbalance with ``context_cv``). Activations are the
    transient peak of one decode step (hidden states, projection outputs, FP32 logits).

    Returns a dict of arrays: ``weights_B``, ``kv_B``, ``activations_B``, ``reserve_B``, ``total_B``,
    ``usable_B``, ``kv_budget_B`` (what the KV cache may hold by the runtime's memory rule,
    :meth:`~.engine.Deployment.kv_budget_B`) and ``feasible`` (bool: the KV fits its budget).
    """
    dep.check_layout(layout)
    b, s = check_batch_context(batch, context)
    m, T, rt = dep.model, dep.ranks, dep.runtime
    P = rt.page_tokens
    kv_layer = _kv_layer_bytes_per_token(dep, layout)
    # pages x layers per sequence: every full-attention layer pages the whole context, a sliding-window layer at
    # most its window (gpt-oss: 128 tokens); CP deals each layer's pages over the ranks
    def layer_pages(tokens):
        pg = np.ceil(tokens / P)
        return np.ceil(pg / T) if layout == "CP" else pg
    Ls = m.sliding_layers
    lp = (m.layers - Ls) * layer_pages(s) + (Ls * layer_pages(np.minimum(s, m.sliding_window)) if Ls else 0.0)
    if layout in ("TP", "CP"):
        kv = b * lp * P * kv_layer
    else:
        kv = _ctx_share_worst(dep, _seqs_worst(dep, b)) * lp * P * kv_layer
    w = sum(dep.weight_bytes(layout).values())
    act = _activation_bytes(dep, b, layout)
    total = w + kv + act + dep.reserve_B
    shape = np.broadcast_shapes(b.shape, s.shape)
    budget = dep.kv_budget_B(np.float64(w), act)
    # "total" rule: the same test as total <= usable, written as before (bit for bit at the boundary)
    ok = total <= dep.usable_B if dep.runtime.memory_fraction_of == "total" else kv <= budget
    return {
        "weights_B": np.broadcast_to(np.float64(w), shape),
        "kv_B": np.broadcast_to(kv, shape),
        "activations_B": np.broadcast_to(act, shape),
        "reserve_B": np.broadcast_to(np.float64(dep.reserve_B), shape),
        "total_B": np.broadcast_to(total, shape),
        "usable_B": np.broadcast_to(np.float64(dep.usable_B), shape),
        "kv_budget_B": np.broadcast_to(budget, shape),
        "feasible": np.broadcast_to(ok, shape),
    }


def _tokens(dep: Deployment, b: np.ndarray, layout: str, q) -> tuple[np.ndarray, np.ndarray]:
    """(tokens through the attention projections, tokens through the FFN) on the worst rank; q query tokens
    per sequence (an int or an array broadcasting with b)."""
    n_all = b * q
    if layout == "DPA":
        n_local = q * _seqs_worst(dep, b)
        return n_local, dep.ranks * n_local  # FFN sees the padded gather
    return n_all, n_all


def _activation_bytes(dep: Deployment, b: np.ndarray, layout: str) -> np.ndarray:
    m, T, ba = dep.model, dep.ranks, dep.b_a
    n_attn, n_ffn = _tokens(dep, b, layout, dep.q_tokens)
    heads_local = m.heads if layout in ("CP", "DPA") else m.heads / T
    qkv_out = heads_local * (m.qk_head_dim + m.o_head_dim) + m.kv_elements_per_token_per_layer()
    ffn_local = 2 * max(m.intermediate / T if m.dense_layers else 0.0,
                        (m.experts_per_token + m.shared_experts) * m.moe_intermediate / T if m.is_moe else 0.0)
    hidden_states = n_ffn * ba * (2 * m.hidden + ffn_local) + n_attn * ba * qkv_out
    # FP32 logits: gathered on the sampling rank (TP and the others). Under DPA each rank samples its own tokens:
    # with a data-parallel LM head it computes their logits over the whole vocabulary; with a vocab-parallel
    # one it computes its vocabulary slice of the gathered batch (T n / T rows' worth) and then receives its own
    # tokens' whole rows, so two such blocks at the peak (one on a single rank, which gathers nothing)
    if layout == "DPA":
        logits = (1 if dep.dp_lm_head or T == 1 else 2) * n_attn * m.vocab * LOGIT_BYTES
    else:
        logits = n_ffn * m.vocab * LOGIT_BYTES
    return hidden_states + logits


# ---- step time ----------------------------------------------------------------------------------------------
def _projection_s(dep: Deployment, n_tok: np.ndarray, layout: str) -> np.ndarray:
    """Attention projection GEMMs of one layer on one rank [s]: everything but the attention core."""
    m = dep.model
    T = 1 if layout in ("CP", "DPA") else dep.ranks
    H, hq_loc = m.hidden, m.heads / T
    if not m.is_mla:
        d = m.head_dim
        kvh = m.kv_heads if T == 1 else m.kv_heads_per_rank(T)
        qkv = gemm_s(dep, n_tok, H, hq_loc * d + 2 * kvh * d)
        o = gemm_s(dep, n_tok, hq_loc * d, H)
        return qkv + o
    r_q, r_kv, dn, dr, dv = (m.q_lora_rank, m.kv_lora_rank, m.qk_nope_head_dim, m.qk_rope_head_dim,
                             m.v_head_dim)
    if r_q:
        t = gemm_s(dep, n_tok, H, r_q + r_kv + dr)  # fused q_a + kv_a (replicated)
        t = t + gemm_s(dep, n_tok, r_q, hq_loc * (dn + dr))  # q_b (column-parallel)
    else:
        t = gemm_s(dep, n_tok, H, r_kv + dr) + gemm_s(dep, n_tok, H, hq_loc * (dn + dr))
    t = t + gemm_s(dep, n_tok, dn, r_kv, groups=hq_loc)  # absorbed W_UK: q_nope -> latent, per head
    t = t + gemm_s(dep, n_tok, r_kv, dv, groups=hq_loc)  # absorbed W_UV: latent -> v, per head
    t = t + gemm_s(dep, n_tok, hq_loc * dv, H)  # o_proj (row-parallel)
    return t


def _core_per_context_token(dep: Deployment, layout: str, q) -> tuple[float, float]:
    """(FLOPs, HBM bytes) of the attention core per context token the worst rank attends to."""
    m = dep.model
    hq_loc = m.heads / dep.ranks if layout == "TP" else m.heads
    if m.is_mla:  # absorbed decode: keys 576-wide latent, values 512-wide latent
        flops = 2.0 * q * hq_loc * (2 * m.kv_lora_rank + m.qk_rope_head_dim)
    else:  # QK^T and PV, 2 FLOPs per MAC each
        flops = 4.0 * q * hq_loc * m.head_dim
    return flops, _kv_layer_bytes_per_token(dep, layout)


def _context_tokens_worst(dep: Deployment, b: np.ndarray, s: np.ndarray, layout: str) -> np.ndarray:
    """Context tokens the worst rank attends over in one layer."""
    if layout == "TP":
        return b * s
    if layout == "CP":
        return b * s / dep.ranks
    return _ctx_share_worst(dep, _seqs_worst(dep, b)) * s


def _core_qo_bytes(dep: Deployment, n_tok: np.ndarray, layout: str) -> np.ndarray:
    """Query read and output write of the attention core [B]."""
    m = dep.model
    hq_loc = m.heads / dep.ranks if layout == "TP" else m.heads
    if m.is_mla:
        width = (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
    else:
        width = 2 * m.head_dim
    return n_tok * hq_loc * width * dep.b_a


def core_coefficients(dep: Deployment, batch, layout: str, q=None) -> dict[str, np.ndarray]:
    """Affine coefficients of one layer's attention-core kernel in the context length s.

    FLOPs = f1 * s and bytes = m0 + m1 * s on the worst rank, so the kernel time is
    max(f1 s / (eta_a P), (m0 + m1 s) / (eta_m BW)) + t_k: the only part of a decode step that depends on s.
    ``q``: query tokens per sequence (one number; default ``dep.q_tokens``); ``kind`` names the kernel class that
    prices the core at that q (:func:`core_s`: the decode kernel below PREFILL_QUERY_TOKENS, the prefill one from
    there on, with MLA's un-absorbed per-head widths).
    """
    b, _ = check_batch_context(batch, 1)
    q = dep.q_tokens if q is None else _check.integer("q_tokens", q, lo=1, hi=1 << 30)
    fpt, bpt = _core_per_context_token(dep, layout, q)
    kind = "attention_decode"
    if q >= PREFILL_QUERY_TOKENS:
        kind = "attention_prefill"
        m = dep.model
        if m.is_mla:  # the same widths as core_s's prefill branch
            hq_loc = m.heads / dep.ranks if layout == "TP" else m.heads
            qk, dv = m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim
            fpt, bpt = 2.0 * q * hq_loc * (qk + dv), hq_loc * (qk + dv) * dep.b_a
    per_s = _context_tokens_worst(dep, b, np.ones_like(b), layout)
    return {"f1": per_s * fpt, "m0": _core_qo_bytes(dep, _core_query_tokens(dep, b, layout, q), layout),
            "m1": per_s * bpt, "kind": kind}


def _core_query_tokens(dep: Deployment, b: np.ndarray, layout: str, q) -> np.ndarray:
    """Query tokens the worst rank's attention core processes: all of them under TP and CP, those of its
    own ceil(B/T) sequences under DPA and DOP (DOP's core is batch-sharded after the first all-to-all)."""
    if layout in ("DPA", "DOP"):
        return q * _seqs_worst(dep, b)
    return b * q


def core_s(dep: Deployment, b, s, layout: str, q) -> np.ndarray:
    """One layer's attention-core kernel on the worst rank [s]: ``b`` sequences of ``q`` query tokens each over
    ``s`` context tokens on average. Fewer than PREFILL_QUERY_TOKENS queries per sequence run the decode kernel
    (MLA absorbed: the 576-wide latent is read once); more run the causal flash-prefill kernel (MLA un-absorbed:
    per-head K of 192 and V of 128, materialised in the activations' dtype), each priced by its own curve."""
    fpt, bpt = _core_per_context_token(dep, layout, q)
    ctx = _context_tokens_worst(dep, b, s, layout)
    qo = _core_qo_bytes(dep, _core_query_tokens(dep, b, layout, q), layout)
    dec = kernel_s(dep, "attention_decode", ctx * fpt, ctx * bpt + qo)
    qa = np.asarray(q, dtype=float)
    if not np.any(qa >= PREFILL_QUERY_TOKENS):
        return dec
    m = dep.model
    if m.is_mla:
        hq_loc = m.heads / dep.ranks if layout == "TP" else m.heads
        qk, dv = m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim
        fpt_p, bpt_p = 2.0 * qa * hq_loc * (qk + dv), hq_loc * (qk + dv) * dep.b_a
    else:
        fpt_p, bpt_p = fpt, bpt
    pre = kernel_s(dep, "attention_prefill", ctx * fpt_p, ctx * bpt_p + qo)
    return np.where(qa >= PREFILL_QUERY_TOKENS, pre, dec)


def layers_core_s(dep: Deployment, b, s, layout: str, q) -> np.ndarray:
    """The attention cores of all layers on the worst rank [s]: :func:`core_s` for every full-attention layer at
    context ``s``, and for every sliding-window layer at min(s, window) (gpt-oss: every other layer, 128 tokens)."""
    m = dep.model
    full = core_s(dep, b, s, layout, q)
    if not m.sliding_layers:
        return m.layers * full
    win = core_s(dep, b, np.minimum(np.asarray(s, dtype=float), m.sliding_window), layout, q)
    return (m.layers - m.sliding_layers) * full + m.sliding_layers * win


def _ffn_layer_s(dep: Deployment, n_ffn: np.ndarray, n_local=None) -> tuple[np.ndarray, np.ndarray]:
    """(dense FFN layer, MoE layer) kernel times on one rank [s] (norm and activation kernels included).

    ``n_ffn`` tokens go through the tensor-parallel FFN (a DPA step's gathered batch); ``n_local`` (DPA only) are
    the rank's own tokens, which a data-parallel dense FFN (``dp_dense``) and, with all-to-all dispatch, the
    replicated shared expert (SGLang's DeepEP path) run on with whole weights."""
    m, T, ba = dep.model, dep.ranks, dep.b_a
    H = m.hidden
    dpa = n_local is not None
    norm = elementwise_s(dep, 2 * n_ffn * H * ba)
    dense = np.zeros_like(n_ffn)
    if m.dense_layers:
        n_d, I_loc = (n_local, float(m.intermediate)) if dpa and dep.dp_dense else (n_ffn, m.intermediate / T)
        dense = (elementwise_s(dep, 2 * n_d * H * ba) + gemm_s(dep, n_d, H, 2 * I_loc)
                 + elementwise_s(dep, 3 * n_d * I_loc * ba) + gemm_s(dep, n_d, I_loc, H))
    moe = np.zeros_like(n_ffn)
    if m.is_moe:
        E, k, Ie = m.routed_experts, m.experts_per_token, m.moe_intermediate
        router = gemm_s(dep, n_ffn, H, E, b_w=EMB_BYTES)
        # experts dealt over EP groups of the T ranks (EP = T unless moe_ep says otherwise), each expert sliced
        # T / EP ways: uniform routing, distinct local experts hit, rows padded to the grouped GEMM's M tile
        # (docs/models.md §4.4); EPLB's redundant slots share their expert's tokens (uniform routing over slots)
        ep = dep.moe_ep or T
        routed = moe_s(dep, n_ffn, experts=E + dep.moe_redundant, topk=k, hidden=H, inter=Ie, moe_ep=ep,
                       moe_tp=T // ep)
        moe = norm + router + routed
        if m.shared_experts:
            a2a = dpa and dep.moe_dispatch == "alltoall"
            n_s, Is = (n_local, float(m.shared_experts * Ie)) if a2a else (n_ffn, m.shared_experts * Ie / T)
            moe = moe + gemm_s(dep, n_s, H, 2 * Is) + gemm_s(dep, n_s, Is, H)
    return dense, moe


def _comm_layer_s(dep: Deployment, b: np.ndarray, layout: str, q) -> tuple[np.ndarray, np.ndarray]:
    """(attention-side, FFN-side) collectives of one layer [s]."""
    m, T, ba, fab = dep.model, dep.ranks, dep.b_a, dep.fabric
    n_attn, n_ffn = _tokens(dep, b, layout, q)
    H = m.hidden
    if layout == "TP":
        attn = allreduce_s(n_attn * H * ba, T, fab)
    elif layout == "CP":  # merge partial (O, LSE): LSE-max AllReduce (latency only) + AllReduce of O and sums
        n_o = n_attn * m.heads * (m.o_head_dim * ba + 4.0)
        attn = allreduce_s(n_o, T, fab) + allreduce_s(np.zeros_like(n_o), T, fab)
    elif layout == "DPA":
        attn = np.zeros_like(n_attn)
    else:  # DOP: Q (+ new GQA K/V) heads->batch, O batch->heads, then the TP O-proj AllReduce
        hq_loc = m.heads / T
        if m.is_mla:
            send_q = n_attn * hq_loc * (m.kv_lora_rank + m.qk_rope_head_dim) * ba
            send_o = n_attn * hq_loc * m.kv_lora_rank * ba
        else:
            send_q = n_attn * (hq_loc * ba + 2 * m.kv_heads_per_rank(T) * dep.b_kv) * m.head_dim  # new K/V in KV dtype
            send_o = n_attn * hq_loc * m.head_dim * ba
        attn = alltoall_s(send_q, T, fab) + alltoall_s(send_o, T, fab) + allreduce_s(n_attn * H * ba, T, fab)
    if layout == "DPA":
        ffn = allgather_s(n_ffn * H * ba, T, fab) + reducescatter_s(n_ffn * H * ba, T, fab)
    else:
        ffn = allreduce_s(n_ffn * H * ba, T, fab)
    return attn, ffn


def deepep_layer_s(dep: Deployment, n_tok, q) -> np.ndarray:
    """DeepEP dispatch + combine of one MoE layer on one rank [s] (a DPA step, ``moe_dispatch == "alltoall"``).

    ``n_tok`` tokens leave the rank, each to its k experts on the T EP ranks (uniform routing). Decode steps
    (``q`` < PREFILL_QUERY_TOKENS query tokens per sequence) use the low-latency kernels, which send one copy per
    routed expert (FP8 dispatch when the weights are quantised, BF16 combine), priced by their measured kernel
    curves, a + n k bytes / B (:func:`~.collectives.deepep_ll_s`), or, on a GPU without them (MI300X), as
    all-to-alls of n k H bytes at the links' latency and bandwidth. Prefill
    steps use the normal kernels (:func:`~.collectives.deepep_normal_s`): across nodes a token is sent once per
    distinct destination node, its own included (E[d] of :func:`~.stats.distinct_ranks_uniform` over the N
    nodes, each holding E/N experts: 3.61 of DeepSeek-V3's 8 experts on 4 nodes), inside one node once per
    distinct destination rank; FP8 dispatch carries H + 4 H/128 B per copy (1x128 scales), BF16 combine 2H.
    Group-limited routing (DeepSeek-V3: 4 of 8 expert groups per token) would lower E[d] further; it is not
    modelled (uniform routing over all experts, an upper bound on the copies)."""
    m, T, ba, fab = dep.model, dep.ranks, dep.b_a, dep.fabric
    H, E, k = m.hidden, m.routed_experts, m.experts_per_token
    fp8 = dep.b_w < 2.0
    sel = np.asarray(n_tok, dtype=float) * k
    draw = dep.runtime.kernel_draw
    ll = [deepep_ll_s(op, sel, H, T, dep.hardware.name, fab, fp8=fp8, draw=draw)
          for op in DEEPEP_LL_OPS]
    if ll[0] is not None and ll[1] is not None:
        low_latency = ll[0] + ll[1]
    else:
        pairs_B = sel * H
        low_latency = (alltoall_s(pairs_B * (1.0 if fp8 else ba), T, fab) + alltoall_s(pairs_B * ba, T, fab))
    qa = np.asarray(q, dtype=float)
    if not np.any(qa >= PREFILL_QUERY_TOKENS):
        return low_latency
    G, N = fab.split(T)
    copies = float(distinct_ranks_uniform(E, k, N if N > 1 else G))
    dispatch_B = float(fp8_dispatch_bytes(H)) if dep.b_w < 2.0 else H * ba
    normal = (deepep_normal_s(n_tok, dispatch_B, copies, T, fab, "dispatch")
              + deepep_normal_s(n_tok, H * ba, copies, T, fab, "combine"))
    return np.where(qa >= PREFILL_QUERY_TOKENS, normal, low_latency)


def two_batch_overlap_s(compute_s, comm_s, layers, sm_share=0.0) -> np.ndarray:
    """Time of ``layers`` identical layers run as two micro-batches whose communication overlaps the other's
    compute [s]: layers x max(m, c + f m) + min(c, m) / 2.

    ``compute_s`` c and ``comm_s`` m are one layer's compute and communication for the whole step (each
    micro-batch does half). Two micro-batches A and B alternate on a compute stream and a communication stream,
    each running compute then communication per layer: if c >= m compute never waits (A's communication, m/2,
    hides under B's compute, c/2) and only B's last m/2 is exposed; if m > c the communication stream is the
    busy one and only A's first c/2 is exposed. ``sm_share`` f: the share of the GPU's SMs the communication
    kernels hold while they run (DeepEP's normal kernels: 20 of H100's 132), so the compute overlapped with
    them runs on the rest and takes f m longer per layer (0: ideal overlap). The micro-batches' split costs are
    not charged, so this stays a lower bound. Broadcasts."""
    c, mm = np.asarray(compute_s, dtype=float), np.asarray(comm_s, dtype=float)
    f = np.asarray(sm_share, dtype=float)
    return layers * np.maximum(mm, c + f * mm) + np.minimum(c, mm) / 2.0


def step_time(dep: Deployment, batch, context, layout: str, *, q_tokens=None, logits_tokens=None
              ) -> dict[str, np.ndarray]:
    """Decode step time of the whole model on the worst rank [s], by part.

    ``batch`` [sequences] and ``context`` [tokens] broadcast against each other and, when given, against
    ``q_tokens`` (query tokens per sequence, default ``dep.q_tokens``) and ``logits_tokens`` (tokens per
    sequence that need logits, default ``dep.logits_tokens``, i.e. all): a prefill of q new tokens is one
    step with q query tokens and one logit, so prefill is vectorised over prompt lengths through these.

    Returns arrays ``step_s`` = ``attention_s`` (projections, attention core, its norm) + ``ffn_s`` (dense FFN
    and MoE kernels) + ``head_s`` (embedding and LM head kernels, and with ``dep.sampler = "torch_sort"`` the
    sampler's sort) + ``comm_s`` (every collective) + ``overhead_s`` (fixed per-step), plus ``core_s``
    (attention-core kernels only) and ``tokens_per_s``;
    finer parts ``ffn_dense_s`` + ``ffn_moe_s`` = ``ffn_s`` and ``comm_attn_s`` + ``comm_ffn_dense_s`` +
    ``comm_ffn_moe_s`` + ``comm_head_s`` = ``comm_s``. With ``dep.two_batch_overlap`` (DPA, alltoall)
    ``comm_ffn_moe_s`` is the exposed part of the MoE all-to-all and ``comm_hidden_s`` the part hidden under
    compute (:func:`two_batch_overlap_s`); otherwise ``comm_hidden_s`` is 0.
    """
    dep.check_layout(layout)
    b, s = check_batch_context(batch, context)
    if q_tokens is None:
        q, lt = dep.q_tokens, dep.logits_tokens if logits_tokens is None else logits_tokens
    else:
        q = _check.real_array("q_tokens", q_tokens, lo=1, hi=1 << 30, integer=True, unit="tokens")
        lt = logits_tokens
    if lt is not None:
        lt = _check.real_array("logits_tokens", lt, lo=1, hi=1 << 30, integer=True, unit="tokens")
    _check.grid_size("batch, context, q_tokens and logits_tokens", b.shape, s.shape, np.shape(q),
                     np.shape(lt) if lt is not None else ())
    if lt is not None and np.any(lt > q):
        raise SpecError("logits_tokens must be <= q_tokens (logits are taken for some of the query tokens)")
    m, T, ba, fab = dep.model, dep.ranks, dep.b_a, dep.fabric
    L, H = m.layers, m.hidden
    n_attn, n_ffn = _tokens(dep, b, layout, q)
    norm = elementwise_s(dep, 2 * n_attn * H * ba)
    proj = _projection_s(dep, n_attn, layout)
    cores = layers_core_s(dep, b, s, layout, q)  # all layers' (sliding-window layers at their window)
    core = cores / L
    dpa = layout == "DPA"
    dense, moe = _ffn_layer_s(dep, n_ffn, n_attn if dpa else None)
    comm_attn, comm_ffn = _comm_layer_s(dep, b, layout, q)
    comm_moe = comm_ffn
    comm_dense = np.zeros_like(comm_ffn) if dpa and dep.dp_dense else comm_ffn  # a DP dense FFN gathers nothing
    deepep = dpa and m.is_moe and dep.moe_dispatch == "alltoall"
    if deepep:  # DeepEP: each of the rank's n_attn tokens goes to the ranks of its k experts; the dense layers
        # keep the gather unless they are data-parallel (dp_dense)
        comm_moe = deepep_layer_s(dep, n_attn, q)
    dp_head = dpa and dep.dp_lm_head  # replicated embedding and LM head: the rank's own tokens, whole vocabulary
    n_head = n_attn if dp_head else n_ffn
    n_lm = n_head if lt is None else n_head / q * lt
    head = (gemm_s(dep, n_lm, H, m.vocab if dp_head else m.vocab / T, b_w=EMB_BYTES)
            + elementwise_s(dep, 2 * n_head * H * ba))
    if dep.sampler != "fused":  # every rank samples the whole vocabulary of the rows it owns (DPA: its
        # sequences; otherwise the batch, after the logits all-gather)
        rows = b * (q if lt is None else lt) / (T if layout == "DPA" else 1)
        head = head + sampler_s(dep.sampler, rows, m.vocab, dep.runtime.kernel_draw)
    head_comm = (allreduce_s(n_ffn * H * ba, T, fab)  # vocab-parallel embedding
                 + allgather_s(n_lm * m.vocab * LOGIT_BYTES, T, fab))  # logits
    if dpa:  # final hidden states gathered for the vocab-parallel LM head
        head_comm = head_comm + allgather_s(n_lm * H * ba, T, fab)
    if dp_head:
        head_comm = np.zeros_like(head_comm)
    attention = L * (norm + proj + core)
    ffn_dense = m.dense_layers * dense
    ffn_moe = m.moe_layers * moe
    ffn = ffn_dense + ffn_moe
    comm_moe_total = m.moe_layers * comm_moe
    hidden = np.zeros_like(comm_moe_total)
    if deepep and dep.two_batch_overlap:  # the MoE layers' all-to-all overlaps the other micro-batch's compute
        layer_compute = norm + proj + core + moe
        # prefill steps' normal kernels hold DEEPEP_NORMAL_SMS SMs while the other micro-batch computes; decode
        # steps' low-latency kernels with a receive hook hold none (GPU SM count unknown: not charged)
        sms = dep.hardware.sms
        share = np.where(np.asarray(q) >= PREFILL_QUERY_TOKENS, DEEPEP_NORMAL_SMS / sms, 0.0) if sms else 0.0
        exposed = (two_batch_overlap_s(layer_compute, comm_moe, m.moe_layers, share)
                   - m.moe_layers * layer_compute)
        hidden = comm_moe_total - exposed
        comm_moe_total = exposed
    comm = L * comm_attn + m.dense_layers * comm_dense + comm_moe_total + head_comm
    overhead = step_overhead_s(dep)
    shape = np.broadcast_shapes(b.shape, s.shape, np.shape(q), np.shape(lt) if lt is not None else ())
    total = attention + ffn + comm + head + overhead
    return {
        "step_s": np.broadcast_to(total, shape),
        "attention_s": np.broadcast_to(attention, shape),
        "core_s": np.broadcast_to(L * core, shape),
        "ffn_s": np.broadcast_to(ffn, shape),
        "head_s": np.broadcast_to(head, shape),
        "comm_s": np.broadcast_to(comm, shape),
        "overhead_s": np.broadcast_to(np.float64(overhead), shape),
        "tokens_per_s": np.broadcast_to(b * q / total, shape),
        # finer parts, for models that replace one block (e.g. the MoE area): they add up to the above
        "ffn_dense_s": np.broadcast_to(ffn_dense, shape),
        "ffn_moe_s": np.broadcast_to(ffn_moe, shape),
        "comm_attn_s": np.broadcast_to(L * comm_attn, shape),
        "comm_ffn_dense_s": np.broadcast_to(m.dense_layers * comm_dense, shape),
        "comm_ffn_moe_s": np.broadcast_to(comm_moe_total, shape),
        # MoE all-to-all hidden under the other micro-batch's compute (two_batch_overlap; not in comm_s)
        "comm_hidden_s": np.broadcast_to(hidden, shape),
        "comm_head_s": np.broadcast_to(head_comm, shape),
    }


def evaluate(dep: Deployment, batch, context, layout: str) -> dict[str, np.ndarray]:
    """Memory (:func:`memory_per_rank`) and time (:func:`step_time`) of one layout, merged."""
    return {**memory_per_rank(dep, batch, context, layout), **step_time(dep, batch, context, layout)}


def evaluate_all(dep: Deployment, batch, context, layouts=LAYOUTS) -> dict[str, dict[str, np.ndarray]]:
    """:func:`evaluate` for several layouts."""
    return {lay: evaluate(dep, batch, context, lay) for lay in layouts}


# ---- capacity ------------------------------------------------------------------------------------------------
def max_batch(dep: Deployment, context, layout: str, *, limit: int = 1 << 20) -> np.ndarray:
    """Largest batch that fits in memory at each context length (0 if none) [sequences].

    Exact: memory is non-decreasing in the batch, so a vectorised integer bisection finds the boundary.
    """
    dep.check_layout(layout)
    limit = _check.integer("limit", limit, lo=1, hi=MAX_BATCH)
    _, s = check_batch_context(1, context)
    lo = np.zeros(s.shape)  # feasible (0 means none)
    hi = np.full(s.shape, float(limit) + 1)  # infeasible or beyond limit
    while np.any(hi - lo > 1):
        mid = np.floor((lo + hi) / 2)
        ok = memory_per_rank(dep, np.maximum(mid, 1), s, layout)["feasible"]
        lo = np.where(ok, mid, lo)
        hi = np.where(ok, hi, mid)
    return np.minimum(lo, limit)


def max_context(dep: Deployment, batch, layout: str, *, limit: float = 1 << 24) -> np.ndarray:
    """Largest context that fits at each batch, capped at ``limit`` (0 if none) [tokens].

    Memory is page-exact: a context of s tokens holds ceil(s / P) pages, so every context up to the end of the
    last page that fits costs the same memory. The answer is therefore a multiple of the page size P, or
    ``limit`` itself when the page holding ``limit`` fits (``limit`` need not be a multiple of P).
    """
    dep.check_layout(layout)
    limit = _check.number("limit", limit, lo=1, hi=MAX_CONTEXT, unit="tokens")
    b, _ = check_batch_context(batch, 1)
    P = dep.runtime.page_tokens
    lo = np.zeros(b.shape)  # pages that fit
    hi = np.full(b.shape, math.ceil(limit / P) + 1.0)  # pages beyond the one holding `limit`: never tested
    while np.any(hi - lo > 1):
        mid = np.floor((lo + hi) / 2)
        ok = memory_per_rank(dep, b, np.maximum(mid, 1) * P, layout)["feasible"]
        lo = np.where(ok, mid, lo)
        hi = np.where(ok, hi, mid)
    return np.minimum(lo * P, limit)

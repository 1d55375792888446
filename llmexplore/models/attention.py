"""Attention layouts TP, CP, DPA and DOP on T ranks: memory per rank and decode step time (MODELS.md §3).

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

Step time is a sum of per-kernel rooflines (:mod:`.roofline`) on the worst rank plus alpha-beta collectives
(:mod:`.collectives`) plus a fixed per-step overhead; communication is not overlapped with compute.

Assumptions: equal context lengths s in the batch unless ``context_cv`` > 0, in which case the worst DPA/DOP
rank carries s * (n + cv * z_T * sqrt(n)) context tokens for n = ceil(B/T) sequences per rank (random
assignment, MODELS.md §3.3); CP attention time uses s/T tokens per rank (token-granular), CP memory the
page-exact worst rank; MoE routing uniform (skew is modeled in the MoE area); embeddings, norms and the
router stay BF16 when weights are FP8. Shapes: ``batch`` and ``context`` broadcast against each other; every
output array has the broadcast shape.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .. import presets
from ..errors import SpecError
from ..specs import Hardware, ModelSpec, Runtime
from ..units import GiB, dtype_bytes
from .collectives import Fabric, allgather_s, allreduce_s, alltoall_s, reducescatter_s
from .roofline import gemm_flops_bytes
from .stats import expected_max_std_normal

__all__ = ["LAYOUTS", "LAYOUT_INFO", "Deployment", "resolve_deployment", "memory_per_rank", "step_time", "evaluate", "evaluate_all",
           "check_batch_context", "max_batch", "max_context", "core_coefficients"]

LAYOUTS = ("TP", "CP", "DPA", "DOP")
LAYOUT_INFO = {
    "TP": "tensor parallel: heads sharded, KV head-sharded (MLA latent replicated)",
    "CP": "context parallel: weights replicated, KV pages dealt over ranks",
    "DPA": "data-parallel attention: sequences partitioned, weights replicated",
    "DOP": "weights sharded like TP, KV owned per request like DPA",
}
_EMB_BYTES = 2.0  # embeddings, LM head, norms and router kept in BF16 (DeepSeek-V3 FP8 checkpoint does this)
_LOGIT_BYTES = 4.0  # FP32 logits


@dataclass(frozen=True)
class Deployment:
    """Everything fixed while batch size and context length are swept.

    Build one with :meth:`Deployment.build` from preset names. ``ranks`` is T, the attention group size.
    """

    model: ModelSpec
    hardware: Hardware
    ranks: int
    runtime: Runtime
    fabric: Fabric
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    act_dtype: str = "bf16"
    q_tokens: int = 1
    context_cv: float = 0.0
    logits_tokens: int | None = None
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def build(cls, model="llama-3-70b", gpu="h100-sxm", ranks: int = 8, *, runtime="default",
              weight_dtype: str = "bf16", kv_dtype: str = "bf16", q_tokens: int = 1, context_cv: float = 0.0,
              scale_up_link=None, scale_out_link=None) -> "Deployment":
        """Resolve presets (names or specs) and validate. Links default to the GPU's own."""
        m, hw, rt, fabric = resolve_deployment(model, gpu, runtime, scale_up_link, scale_out_link)
        return cls(model=m, hardware=hw, ranks=ranks, runtime=rt, fabric=fabric, weight_dtype=weight_dtype,
                   kv_dtype=kv_dtype, q_tokens=q_tokens, context_cv=context_cv)

    def __post_init__(self) -> None:
        m, T = self.model, self.ranks
        if isinstance(T, bool) or not isinstance(T, (int, np.integer)) or not 1 <= T <= 1024:
            raise SpecError(f"ranks must be an integer in [1, 1024], got {T!r}")
        object.__setattr__(self, "ranks", int(T))
        dtype_bytes(self.weight_dtype, "weight_dtype")
        dtype_bytes(self.kv_dtype, "kv_dtype")
        dtype_bytes(self.act_dtype, "act_dtype")
        if isinstance(self.q_tokens, bool) or not isinstance(self.q_tokens, (int, np.integer)) \
                or self.q_tokens < 1:
            raise SpecError(f"q_tokens must be an integer >= 1, got {self.q_tokens!r}")
        if self.logits_tokens is not None and not 1 <= self.logits_tokens <= self.q_tokens:
            raise SpecError(f"logits_tokens must be in [1, q_tokens={self.q_tokens}], got {self.logits_tokens!r}")
        if not (isinstance(self.context_cv, (int, float)) and math.isfinite(self.context_cv)
                and self.context_cv >= 0):
            raise SpecError(f"context_cv must be a finite number >= 0, got {self.context_cv!r}")
        rules = [("query heads", m.heads)]
        if m.dense_layers:
            rules.append(("FFN intermediate size", m.intermediate))
        if m.is_moe:
            rules.append(("routed experts", m.routed_experts))
            if m.shared_experts:
                rules.append(("expert intermediate size", m.moe_intermediate))
        for what, n in rules:
            if n % T:
                raise SpecError(f"ranks ({T}) must divide the {what} of {m.name} ({n})")
        if not m.is_mla and m.kv_heads % T and T % m.kv_heads:
            raise SpecError(f"ranks ({T}) must divide or be a multiple of the KV heads of {m.name} "
                            f"({m.kv_heads})")
        self.fabric.split(T)  # raises if T spans nodes unevenly

    # ---- constants used by every layout ------------------------------------------------------------------
    @property
    def b_w(self) -> float:
        return dtype_bytes(self.weight_dtype)

    @property
    def b_kv(self) -> float:
        return dtype_bytes(self.kv_dtype)

    @property
    def b_a(self) -> float:
        return dtype_bytes(self.act_dtype)

    @property
    def z_ranks(self) -> float:
        """Expected max of T standard normals (imbalance of random assignment)."""
        return expected_max_std_normal(self.ranks)

    @property
    def usable_B(self) -> float:
        """HBM the runtime may use per rank [B]."""
        return self.runtime.usable_hbm_fraction * self.hardware.hbm_GiB * GiB

    @property
    def reserve_B(self) -> float:
        return self.runtime.reserve_GiB * GiB

    def label(self) -> str:
        return (f"{self.model.label} on {self.ranks}x {self.hardware.label}, weights {self.weight_dtype}, "
                f"KV {self.kv_dtype}")

    # ---- weights (independent of batch and context) --------------------------------------------------------
    def attn_params_per_rank(self, layout: str) -> float:
        """Attention parameters held per rank per layer (projections only)."""
        _check_layout(layout)
        m, T = self.model, self.ranks
        p = m.attn_params_per_layer
        if layout in ("CP", "DPA"):
            return float(sum(p.values()))
        if m.is_mla:
            rep = m.mla_replicated_params_per_layer
            return rep + (sum(p.values()) - rep) / T
        kv_frac = m.kv_heads_per_rank(T) / m.kv_heads
        return (p["q"] + p["o"]) / T + (p["k"] + p["v"]) * kv_frac

    def weight_bytes(self, layout: str) -> dict[str, float]:
        """Weights per rank [B], by part: attention, FFN/MoE, embeddings + LM head, norms + router."""
        m, T = self.model, self.ranks
        attn = m.layers * self.attn_params_per_rank(layout) * self.b_w
        ffn = m.dense_layers * m.ffn_params_dense_layer / T * self.b_w
        if m.is_moe:
            experts = (m.routed_experts + m.shared_experts) / T * m.expert_params
            ffn += m.moe_layers * (experts * self.b_w + m.router_params * _EMB_BYTES)
        emb = m.embedding_params / T * _EMB_BYTES  # vocab-parallel embedding and LM head
        norms = (m.layers * m.norm_params_per_layer + m.hidden) * _EMB_BYTES
        return {"attention": attn, "ffn": ffn, "embedding": emb, "norms": norms}


def resolve_deployment(model, gpu, runtime="default", scale_up_link=None, scale_out_link=None):
    """(ModelSpec, Hardware, Runtime, Fabric) from preset names or specs; links default to the GPU's own."""
    m = presets.resolve("models", model)
    hw = presets.resolve("hardware", gpu)
    rt = presets.resolve("runtime", runtime)
    up = presets.resolve("links", scale_up_link or hw.scale_up_link)
    out_name = scale_out_link or hw.scale_out_link
    out = presets.resolve("links", out_name) if out_name else None
    return m, hw, rt, Fabric(scale_up=up, scale_out=out, gpus_per_node=hw.scale_up_size)


def _check_layout(layout: str) -> None:
    if layout not in LAYOUTS:
        raise SpecError(f"layout must be one of {list(LAYOUTS)}, got {layout!r}")


def check_batch_context(batch, context) -> tuple[np.ndarray, np.ndarray]:
    """Validate and convert: batch integers >= 1, context >= 1 token (SpecError otherwise)."""
    b = np.asarray(batch, dtype=float)
    s = np.asarray(context, dtype=float)
    if b.size == 0 or s.size == 0:
        raise SpecError("batch and context must not be empty")
    if not np.all(np.isfinite(b)) or np.any(b < 1) or np.any(b != np.floor(b)):
        bad = b[~(np.isfinite(b) & (b >= 1) & (b == np.floor(b)))].ravel()[0]
        raise SpecError(f"batch must be an integer >= 1, got {bad:g}")
    if not np.all(np.isfinite(s)) or np.any(s < 1):
        bad = s[~(np.isfinite(s) & (s >= 1))].ravel()[0]
        raise SpecError(f"context must be >= 1 token, got {bad:g}")
    return b, s


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
    ``usable_B``, ``feasible`` (bool).
    """
    _check_layout(layout)
    b, s = check_batch_context(batch, context)
    m, T, rt = dep.model, dep.ranks, dep.runtime
    P = rt.page_tokens
    pages = np.ceil(s / P)
    kv_tok = m.layers * _kv_layer_bytes_per_token(dep, layout)
    if layout == "TP":
        kv = b * pages * P * kv_tok
    elif layout == "CP":
        kv = b * np.ceil(pages / T) * P * kv_tok
    else:
        kv = _ctx_share_worst(dep, _seqs_worst(dep, b)) * pages * P * kv_tok
    w = sum(dep.weight_bytes(layout).values())
    act = _activation_bytes(dep, b, layout)
    total = w + kv + act + dep.reserve_B
    shape = np.broadcast_shapes(b.shape, s.shape)
    return {
        "weights_B": np.broadcast_to(np.float64(w), shape),
        "kv_B": np.broadcast_to(kv, shape),
        "activations_B": np.broadcast_to(act, shape),
        "reserve_B": np.broadcast_to(np.float64(dep.reserve_B), shape),
        "total_B": np.broadcast_to(total, shape),
        "usable_B": np.broadcast_to(np.float64(dep.usable_B), shape),
        "feasible": np.broadcast_to(total <= dep.usable_B, shape),
    }


def _tokens(dep: Deployment, b: np.ndarray, layout: str) -> tuple[np.ndarray, np.ndarray]:
    """(tokens through the attention projections, tokens through the FFN) on the worst rank."""
    q = dep.q_tokens
    n_all = b * q
    if layout == "DPA":
        n_local = q * _seqs_worst(dep, b)
        return n_local, dep.ranks * n_local  # FFN sees the padded gather
    return n_all, n_all


def _activation_bytes(dep: Deployment, b: np.ndarray, layout: str) -> np.ndarray:
    m, T, ba = dep.model, dep.ranks, dep.b_a
    n_attn, n_ffn = _tokens(dep, b, layout)
    heads_local = m.heads if layout in ("CP", "DPA") else m.heads / T
    qkv_out = heads_local * (m.qk_head_dim + m.o_head_dim) + m.kv_elements_per_token_per_layer()
    ffn_local = 2 * max(m.intermediate / T if m.dense_layers else 0.0,
                        (m.experts_per_token + m.shared_experts) * m.moe_intermediate / T if m.is_moe else 0.0)
    hidden_states = n_ffn * ba * (2 * m.hidden + ffn_local) + n_attn * ba * qkv_out
    logits = n_ffn * m.vocab * _LOGIT_BYTES  # gathered FP32 logits on the sampling rank
    return hidden_states + logits


# ---- step time ----------------------------------------------------------------------------------------------
def _gemm_s(dep: Deployment, m_tokens, k_in, n_out, *, groups: float = 1.0, b_w: float | None = None):
    """Roofline time of a (grouped) GEMM on one rank [s]."""
    f, by = gemm_flops_bytes(m_tokens, k_in, n_out, b_w=dep.b_w if b_w is None else b_w, b_a=dep.b_a)
    return _kernel_s(dep, groups * f, groups * by, peak=dep.hardware.peak_TFLOPS(dep.weight_dtype),
                     eta_c=dep.runtime.eta_compute)


def _kernel_s(dep: Deployment, flops, bytes_, *, peak: float, eta_c: float, eta_m: float | None = None):
    rt, hw = dep.runtime, dep.hardware
    eta_m = rt.eta_mem if eta_m is None else eta_m
    return (np.maximum(flops / (eta_c * peak * 1e12), bytes_ / (eta_m * hw.hbm_bw_TBps * 1e12))
            + rt.kernel_overhead_us * 1e-6)


def _elementwise_s(dep: Deployment, bytes_):
    rt, hw = dep.runtime, dep.hardware
    return bytes_ / (rt.eta_mem * hw.hbm_bw_TBps * 1e12) + rt.kernel_overhead_us * 1e-6


def _projection_s(dep: Deployment, n_tok: np.ndarray, layout: str) -> np.ndarray:
    """Attention projection GEMMs of one layer on one rank [s]: everything but the attention core."""
    m = dep.model
    T = 1 if layout in ("CP", "DPA") else dep.ranks
    H, hq_loc = m.hidden, m.heads / T
    if not m.is_mla:
        d = m.head_dim
        kvh = m.kv_heads if T == 1 else m.kv_heads_per_rank(T)
        qkv = _gemm_s(dep, n_tok, H, hq_loc * d + 2 * kvh * d)
        o = _gemm_s(dep, n_tok, hq_loc * d, H)
        return qkv + o
    r_q, r_kv, dn, dr, dv = (m.q_lora_rank, m.kv_lora_rank, m.qk_nope_head_dim, m.qk_rope_head_dim,
                             m.v_head_dim)
    if r_q:
        t = _gemm_s(dep, n_tok, H, r_q + r_kv + dr)  # fused q_a + kv_a (replicated)
        t = t + _gemm_s(dep, n_tok, r_q, hq_loc * (dn + dr))  # q_b (column-parallel)
    else:
        t = _gemm_s(dep, n_tok, H, r_kv + dr) + _gemm_s(dep, n_tok, H, hq_loc * (dn + dr))
    t = t + _gemm_s(dep, n_tok, dn, r_kv, groups=hq_loc)  # absorbed W_UK: q_nope -> latent, per head
    t = t + _gemm_s(dep, n_tok, r_kv, dv, groups=hq_loc)  # absorbed W_UV: latent -> v, per head
    t = t + _gemm_s(dep, n_tok, hq_loc * dv, H)  # o_proj (row-parallel)
    return t


def _core_per_context_token(dep: Deployment, layout: str) -> tuple[float, float]:
    """(FLOPs, HBM bytes) of the attention core per context token the worst rank attends to."""
    m, q = dep.model, dep.q_tokens
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


def core_coefficients(dep: Deployment, batch, layout: str) -> dict[str, np.ndarray]:
    """Affine coefficients of one layer's attention-core kernel in the context length s.

    FLOPs = f1 * s and bytes = m0 + m1 * s on the worst rank, so the kernel time is
    max(f1 s / (eta_a P), (m0 + m1 s) / (eta_m BW)) + t_k: the only part of a decode step that depends on s.
    """
    b, _ = check_batch_context(batch, 1)
    fpt, bpt = _core_per_context_token(dep, layout)
    per_s = _context_tokens_worst(dep, b, np.ones_like(b), layout)
    return {"f1": per_s * fpt, "m0": _core_qo_bytes(dep, _core_query_tokens(dep, b, layout), layout),
            "m1": per_s * bpt}


def _core_query_tokens(dep: Deployment, b: np.ndarray, layout: str) -> np.ndarray:
    """Query tokens the worst rank's attention core processes: all of them under TP and CP, those of its
    own ceil(B/T) sequences under DPA and DOP (DOP's core is batch-sharded after the first all-to-all)."""
    if layout in ("DPA", "DOP"):
        return dep.q_tokens * _seqs_worst(dep, b)
    return b * dep.q_tokens


def _core_s(dep: Deployment, b, s, layout: str) -> np.ndarray:
    fpt, bpt = _core_per_context_token(dep, layout)
    ctx = _context_tokens_worst(dep, b, s, layout)
    return _kernel_s(dep, ctx * fpt, ctx * bpt + _core_qo_bytes(dep, _core_query_tokens(dep, b, layout), layout),
                     peak=dep.hardware.bf16_TFLOPS, eta_c=dep.runtime.eta_attn_compute,
                     eta_m=dep.runtime.eta_attn_mem)


def _ffn_layer_s(dep: Deployment, n_ffn: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(dense FFN layer, MoE layer) kernel times on one rank [s] (norm and activation kernels included)."""
    m, T, ba = dep.model, dep.ranks, dep.b_a
    H = m.hidden
    norm = _elementwise_s(dep, 2 * n_ffn * H * ba)
    dense = np.zeros_like(n_ffn)
    if m.dense_layers:
        I_loc = m.intermediate / T
        dense = (norm + _gemm_s(dep, n_ffn, H, 2 * I_loc) + _elementwise_s(dep, 3 * n_ffn * I_loc * ba)
                 + _gemm_s(dep, n_ffn, I_loc, H))
    moe = np.zeros_like(n_ffn)
    if m.is_moe:
        E, k, Ie = m.routed_experts, m.experts_per_token, m.moe_intermediate
        router = _gemm_s(dep, n_ffn, H, E, b_w=_EMB_BYTES)
        tok_local = n_ffn * k / T  # uniform routing: expected tokens on one rank
        active_local = E / T * (1.0 - (1.0 - k / E) ** n_ffn)  # distinct local experts hit (MODELS §4.4)
        f = 2.0 * tok_local * 3 * H * Ie
        by = active_local * 3 * H * Ie * dep.b_w + tok_local * (2 * H + 3 * Ie) * ba
        routed = 2 * _kernel_s(dep, f / 2, by / 2, peak=dep.hardware.peak_TFLOPS(dep.weight_dtype),
                               eta_c=dep.runtime.eta_compute)  # gate_up and down grouped GEMMs
        moe = norm + router + routed
        if m.shared_experts:
            Is = m.shared_experts * Ie / T
            moe = moe + _gemm_s(dep, n_ffn, H, 2 * Is) + _gemm_s(dep, n_ffn, Is, H)
    return dense, moe


def _comm_layer_s(dep: Deployment, b: np.ndarray, layout: str) -> tuple[np.ndarray, np.ndarray]:
    """(attention-side, FFN-side) collectives of one layer [s]."""
    m, T, ba, fab = dep.model, dep.ranks, dep.b_a, dep.fabric
    n_attn, n_ffn = _tokens(dep, b, layout)
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


def step_time(dep: Deployment, batch, context, layout: str) -> dict[str, np.ndarray]:
    """Decode step time of the whole model on the worst rank [s], by part.

    Returns arrays ``step_s`` = ``attention_s`` (projections, attention core, its norm) + ``ffn_s`` (dense FFN
    and MoE kernels) + ``head_s`` (embedding and LM head kernels) + ``comm_s`` (every collective) +
    ``overhead_s`` (fixed per-step), plus ``core_s`` (attention-core kernels only) and ``tokens_per_s``;
    finer parts ``ffn_dense_s`` + ``ffn_moe_s`` = ``ffn_s`` and ``comm_attn_s`` + ``comm_ffn_dense_s`` +
    ``comm_ffn_moe_s`` + ``comm_head_s`` = ``comm_s``.
    """
    _check_layout(layout)
    b, s = check_batch_context(batch, context)
    m, T, ba, fab = dep.model, dep.ranks, dep.b_a, dep.fabric
    L, H = m.layers, m.hidden
    n_attn, n_ffn = _tokens(dep, b, layout)
    norm = _elementwise_s(dep, 2 * n_attn * H * ba)
    proj = _projection_s(dep, n_attn, layout)
    core = _core_s(dep, b, s, layout)
    dense, moe = _ffn_layer_s(dep, n_ffn)
    comm_attn, comm_ffn = _comm_layer_s(dep, b, layout)
    n_lm = n_ffn if dep.logits_tokens is None else n_ffn / dep.q_tokens * dep.logits_tokens
    head = _gemm_s(dep, n_lm, H, m.vocab / T, b_w=_EMB_BYTES) + _elementwise_s(dep, 2 * n_ffn * H * ba)
    head_comm = (allreduce_s(n_ffn * H * ba, T, fab)  # vocab-parallel embedding
                 + allgather_s(n_lm * m.vocab * _LOGIT_BYTES, T, fab))  # logits
    if layout == "DPA":  # final hidden states gathered for the vocab-parallel LM head
        head_comm = head_comm + allgather_s(n_lm * H * ba, T, fab)
    attention = L * (norm + proj + core)
    ffn_dense = m.dense_layers * dense
    ffn_moe = m.moe_layers * moe
    ffn = ffn_dense + ffn_moe
    comm = L * (comm_attn + comm_ffn) + head_comm
    overhead = dep.runtime.step_overhead_ms * 1e-3
    shape = np.broadcast_shapes(b.shape, s.shape)
    total = attention + ffn + comm + head + overhead
    return {
        "step_s": np.broadcast_to(total, shape),
        "attention_s": np.broadcast_to(attention, shape),
        "core_s": np.broadcast_to(L * core, shape),
        "ffn_s": np.broadcast_to(ffn, shape),
        "head_s": np.broadcast_to(head, shape),
        "comm_s": np.broadcast_to(comm, shape),
        "overhead_s": np.broadcast_to(np.float64(overhead), shape),
        "tokens_per_s": np.broadcast_to(b * dep.q_tokens / total, shape),
        # finer parts, for models that replace one block (e.g. the MoE area): they add up to the above
        "ffn_dense_s": np.broadcast_to(ffn_dense, shape),
        "ffn_moe_s": np.broadcast_to(ffn_moe, shape),
        "comm_attn_s": np.broadcast_to(L * comm_attn, shape),
        "comm_ffn_dense_s": np.broadcast_to(m.dense_layers * comm_ffn, shape),
        "comm_ffn_moe_s": np.broadcast_to(m.moe_layers * comm_ffn, shape),
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
    """Largest context (tokens, a multiple of the page size) that fits at each batch (0 if none)."""
    b, _ = check_batch_context(batch, 1)
    P = dep.runtime.page_tokens
    lo = np.zeros(b.shape)  # pages
    hi = np.full(b.shape, math.floor(limit / P) + 1.0)
    while np.any(hi - lo > 1):
        mid = np.floor((lo + hi) / 2)
        ok = memory_per_rank(dep, b, np.maximum(mid, 1) * P, layout)["feasible"]
        lo = np.where(ok, mid, lo)
        hi = np.where(ok, hi, mid)
    return np.minimum(lo * P, limit)

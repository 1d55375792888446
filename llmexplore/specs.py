"""Frozen, validated specs: a model, an accelerator, a link, the runtime efficiencies, a storage tier and a
latency target.

Specs are plain data loaded from ``data/*.yaml`` (see :mod:`llmexplore.presets`); every derived quantity
(parameter counts, KV bytes per token, ridge points) is computed here, never typed into a preset.

Glossary (docs/models.md conventions): L layers, H hidden size, h_q query heads, h_kv KV heads, d head dim,
I dense FFN intermediate size, V vocabulary; MLA: r_q q_lora_rank, r_kv kv_lora_rank, d_n qk_nope_head_dim,
d_r qk_rope_head_dim, d_v v_head_dim; MoE: E routed experts, k experts per token, I_e expert intermediate size.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from . import _check
from .errors import SpecError
from .units import dtype_bytes
from ._spec_base import (MAX_EXPERTS, MAX_FFN, MAX_GIB, MAX_LAYERS, MAX_RATE, MAX_VOCAB, MAX_WIDTH, MIN_POSITIVE, Spec,
                         check_numbers, freeze_sources, meta)

__all__ = ["ModelSpec", "Hardware", "Link", "Runtime", "StorageTier", "Targets", "SpecDecode", "PriceTier", "GpuPrice", "GpuPower",
           "ATTENTION_KINDS",
           "LINK_KINDS", "STORAGE_KINDS", "TARGET_STATS", "SPEC_METHODS", "MAX_DRAFT_TOKENS"]

ATTENTION_KINDS = ("gqa", "mla")
LINK_KINDS = ("scale-up", "scale-out", "host")
#: where a storage tier keeps KV blocks: host DRAM (one hop over PCIe to the GPU), a local SSD or a network file
#: system (two hops: device -> host memory -> GPU)
STORAGE_KINDS = ("dram", "ssd", "network")
#: what a runtime's usable_hbm_fraction is a fraction of (Runtime.memory_fraction_of)
MEMORY_FRACTIONS_OF = ("total", "free", "static")
#: the serving engines whose scheduler a runtime preset may name ("" = engine-neutral)
RUNTIME_ENGINES = ("", "trtllm", "vllm", "sglang")
#: the statistic over requests a latency target bounds: the mean, or the 50th, 90th or 99th percentile
TARGET_STATS = ("mean", "p50", "p90", "p99")
#: how speculative decoding drafts its tokens: the model's own multi-token-prediction module ("mtp", DeepSeek-V3),
#: a separately trained one-layer draft head fed the target's hidden states ("draft_head", EAGLE), or n-gram /
#: prompt lookup on the CPU ("ngram": no GPU work to draft)
SPEC_METHODS = ("mtp", "draft_head", "ngram")
MAX_DRAFT_TOKENS = 64  # draft tokens per verify step (engines cap it far lower: SGLang's default chain is 3-5)


# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelSpec(Spec):
    """Architecture of a decoder-only transformer (dense or MoE; GQA or MLA attention).

    Every field is read from the model's published ``config.json``; derived counts are properties.
    MoE layers are the last ``moe_layers`` layers (DeepSeek-V3: ``first_k_dense_replace = 3``).
    """

    name: str
    attention: str = field(metadata={"help": "'gqa' (grouped-query, incl. MHA/MQA) or 'mla' (DeepSeek latent)"})
    layers: int = field(metadata=meta("", "decoder layers L", min=1, max=MAX_LAYERS, integer=True))
    hidden: int = field(metadata=meta("", "hidden size H", min=1, max=MAX_WIDTH, integer=True))
    heads: int = field(metadata=meta("", "query heads h_q", min=1, max=MAX_WIDTH, integer=True))
    intermediate: int = field(metadata=meta("", "dense FFN intermediate size I (SwiGLU)", min=1, max=MAX_FFN,
                                             integer=True))
    vocab: int = field(metadata=meta("", "vocabulary size V", min=1, max=MAX_VOCAB, integer=True))
    tie_embeddings: bool = False
    kv_heads: int = field(default=0, metadata=meta("", "KV heads h_kv (GQA)", min=0, max=MAX_WIDTH, integer=True,
                                                    optional=True))
    head_dim: int = field(default=0, metadata=meta("", "head dim d (GQA)", min=0, max=MAX_WIDTH, integer=True,
                                                    optional=True))
    qk_norm: bool = False
    q_lora_rank: int = field(default=0, metadata=meta("", "MLA r_q (0: no query compression)", min=0, max=MAX_WIDTH,
                                                       integer=True, optional=True))
    kv_lora_rank: int = field(default=0, metadata=meta("", "MLA r_kv", min=0, max=MAX_WIDTH, integer=True,
                                                        optional=True))
    qk_nope_head_dim: int = field(default=0, metadata=meta("", "MLA d_n", min=0, max=MAX_WIDTH, integer=True,
                                                            optional=True))
    qk_rope_head_dim: int = field(default=0, metadata=meta("", "MLA d_r", min=0, max=MAX_WIDTH, integer=True,
                                                            optional=True))
    v_head_dim: int = field(default=0, metadata=meta("", "MLA d_v", min=0, max=MAX_WIDTH, integer=True, optional=True))
    moe_layers: int = field(default=0, metadata=meta("", "number of MoE layers (the last ones)", min=0, max=MAX_LAYERS,
                                                      integer=True, optional=True))
    routed_experts: int = field(default=0, metadata=meta("", "routed experts E", min=0, max=MAX_EXPERTS, integer=True,
                                                          optional=True))
    shared_experts: int = field(default=0, metadata=meta("", "shared experts", min=0, max=MAX_EXPERTS, integer=True,
                                                          optional=True))
    experts_per_token: int = field(default=0, metadata=meta("", "top-k routed experts per token", min=0,
                                                             max=MAX_EXPERTS, integer=True, optional=True))
    moe_intermediate: int = field(default=0, metadata=meta("", "expert intermediate size I_e", min=0, max=MAX_FFN,
                                                            integer=True, optional=True))
    expert_groups: int = field(default=1, metadata=meta("", "expert groups (group-limited routing)", min=1,
                                                         max=MAX_EXPERTS, integer=True, optional=True))
    router_bias: bool = False
    attention_bias: bool = False
    expert_bias: bool = False
    attention_sinks: bool = False
    sliding_window: int = field(default=0, metadata=meta("tokens", "window of the sliding-window attention layers; 0: "
                                                         "none", min=0, max=1 << 30, integer=True, optional=True))
    sliding_layers: int = field(default=0, metadata=meta("", "layers with sliding-window attention (gpt-oss: every "
                                                          "other one)", min=0, max=MAX_LAYERS, integer=True,
                                                          optional=True))
    mtp_layers: int = field(default=0, metadata=meta("", "multi-token-prediction modules released with the model "
                                                      "(DeepSeek-V3 num_nextn_predict_layers); 0: none",
                                                      min=0, max=MAX_LAYERS, integer=True, optional=True))
    weight_dtype: str = field(default="bf16", metadata={"help": "dtype the weights are released in (the "
                                                                "default weight dtype wherever none is chosen)"})
    display_name: str = ""
    sources: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        freeze_sources(self)
        where = f"ModelSpec {self.name!r}"
        if self.attention not in ATTENTION_KINDS:
            raise SpecError(f"{where}: attention must be one of {list(ATTENTION_KINDS)}, got {self.attention!r}")
        dtype_bytes(self.weight_dtype, f"{where}: weight_dtype")
        check_numbers(self)
        if self.attention == "gqa":
            if self.kv_heads < 1 or self.head_dim < 1:
                raise SpecError(f"{where}: kv_heads and head_dim must be >= 1 for GQA attention, "
                                f"got kv_heads={self.kv_heads}, head_dim={self.head_dim}")
            if self.heads % self.kv_heads:
                raise SpecError(f"{where}: heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        else:
            for f in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
                if getattr(self, f) < 1:
                    raise SpecError(f"{where}: {f} must be >= 1 for MLA attention, got {getattr(self, f)}")
        if bool(self.sliding_window) != bool(self.sliding_layers) or self.sliding_layers > self.layers:
            raise SpecError(f"{where}: sliding_window and sliding_layers go together (both 0, or a window with 1 to "
                            f"layers = {self.layers} sliding layers), got {self.sliding_window} and "
                            f"{self.sliding_layers}")
        if self.moe_layers:
            if self.moe_layers > self.layers:
                raise SpecError(f"{where}: moe_layers ({self.moe_layers}) must be <= layers ({self.layers})")
            for f in ("routed_experts", "experts_per_token", "moe_intermediate"):
                if getattr(self, f) < 1:
                    raise SpecError(f"{where}: {f} must be >= 1 for an MoE model (moe_layers > 0), got "
                                    f"{getattr(self, f)}")
            if self.experts_per_token > self.routed_experts:
                raise SpecError(f"{where}: experts_per_token ({self.experts_per_token}) must be <= "
                                f"routed_experts ({self.routed_experts})")
            if self.routed_experts % self.expert_groups:
                raise SpecError(f"{where}: routed_experts ({self.routed_experts}) must be a multiple of "
                                f"expert_groups ({self.expert_groups})")

    # ---- shape helpers -------------------------------------------------------------------------------------
    @property
    def label(self) -> str:
        return self.display_name or self.name

    @property
    def is_mla(self) -> bool:
        return self.attention == "mla"

    @property
    def is_moe(self) -> bool:
        return self.moe_layers > 0

    @property
    def dense_layers(self) -> int:
        return self.layers - self.moe_layers

    @property
    def qk_head_dim(self) -> int:
        """Per-head query/key width that enters the Q K^T product [elements] (not absorbed)."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim if self.is_mla else self.head_dim

    @property
    def o_head_dim(self) -> int:
        """Per-head width of the attention output fed to the O projection [elements]."""
        return self.v_head_dim if self.is_mla else self.head_dim

    # ---- parameters ----------------------------------------------------------------------------------------
    @property
    def attn_params_per_layer(self) -> dict[str, int]:
        """Attention weight matrices of one layer [parameters], by projection.

        GQA: q (H x h_q d), k and v (H x h_kv d each), o (h_q d x H).
        MLA (DeepSeek-V3 modeling code): q_a (H x r_q), q_b (r_q x h_q (d_n+d_r)), kv_a (H x (r_kv+d_r)),
        kv_b (r_kv x h_q (d_n+d_v)), o (h_q d_v x H). Without query compression (r_q = 0) q is H x h_q (d_n+d_r).
        """
        H, hq = self.hidden, self.heads
        if not self.is_mla:
            d = self.head_dim
            p = {"q": H * hq * d, "k": H * self.kv_heads * d, "v": H * self.kv_heads * d, "o": hq * d * H}
            if self.attention_bias:  # q/k/v/o biases (gpt-oss attention_bias: true)
                p.update(q=p["q"] + hq * d, k=p["k"] + self.kv_heads * d, v=p["v"] + self.kv_heads * d,
                         o=p["o"] + H)
            if self.attention_sinks:  # one learned sink logit per query head (gpt-oss)
                p["sinks"] = hq
            return p
        q_out = hq * (self.qk_nope_head_dim + self.qk_rope_head_dim)
        p = {}
        if self.q_lora_rank:
            p["q_a"] = H * self.q_lora_rank
            p["q_b"] = self.q_lora_rank * q_out
        else:
            p["q"] = H * q_out
        p["kv_a"] = H * (self.kv_lora_rank + self.qk_rope_head_dim)
        p["kv_b"] = self.kv_lora_rank * hq * (self.qk_nope_head_dim + self.v_head_dim)
        p["o"] = hq * self.v_head_dim * H
        return p

    @property
    def mla_replicated_params_per_layer(self) -> int:
        """MLA weights replicated on every TP rank: q_a and kv_a (vLLM/SGLang ReplicatedLinear) [params]."""
        if not self.is_mla:
            return 0
        p = self.attn_params_per_layer
        return p.get("q_a", 0) + p["kv_a"]

    @property
    def norm_params_per_layer(self) -> int:
        """RMSNorm weights of one layer: input + post-attention norms, q/k norms (Qwen3) or MLA latent norms."""
        n = 2 * self.hidden
        if self.qk_norm:
            n += 2 * self.head_dim
        if self.is_mla:
            n += self.q_lora_rank + self.kv_lora_rank
        return n

    @property
    def ffn_params_dense_layer(self) -> int:
        """SwiGLU FFN of a dense layer: gate, up (H x I) and down (I x H) [params]."""
        return 3 * self.hidden * self.intermediate

    @property
    def expert_params(self) -> int:
        """One routed or shared expert (SwiGLU with I_e) [params], with its gate/up and down biases when
        ``expert_bias`` (gpt-oss: 2 I_e + H)."""
        bias = 2 * self.moe_intermediate + self.hidden if self.expert_bias else 0
        return 3 * self.hidden * self.moe_intermediate + bias

    @property
    def router_params(self) -> int:
        """Router (gate) of one MoE layer: H x E, plus the per-expert score-correction bias if present."""
        return self.hidden * self.routed_experts + (self.routed_experts if self.router_bias else 0)

    @property
    def moe_params_per_layer(self) -> int:
        return (self.routed_experts + self.shared_experts) * self.expert_params + self.router_params

    @property
    def embedding_params(self) -> int:
        """Input embedding plus LM head (counted once when tied) [params]."""
        return self.vocab * self.hidden * (1 if self.tie_embeddings else 2)

    @property
    def params_non_embedding(self) -> int:
        """All parameters except the input embedding and LM head (norms included)."""
        attn = sum(self.attn_params_per_layer.values()) + self.norm_params_per_layer
        return (self.layers * attn + self.dense_layers * self.ffn_params_dense_layer
                + self.moe_layers * self.moe_params_per_layer + self.hidden)  # + final norm

    @property
    def params_total(self) -> int:
        """Total parameters, as in the published safetensors (norms included, MTP modules excluded)."""
        return self.params_non_embedding + self.embedding_params

    @property
    def params_active(self) -> int:
        """Parameters touched per token: everything except non-selected routed experts and the input embedding
        table (a lookup reads one row). The LM head counts (a tied table counts once, as the head).
        DeepSeek-V3: 36.6B + norms (published "37B activated")."""
        unused = self.moe_layers * (self.routed_experts - self.experts_per_token) * self.expert_params
        input_embedding = 0 if self.tie_embeddings else self.vocab * self.hidden
        return self.params_total - unused - input_embedding

    # ---- KV cache ------------------------------------------------------------------------------------------
    def kv_elements_per_token_per_layer(self) -> int:
        """Logical KV elements per token per layer: GQA 2 h_kv d (K and V); MLA r_kv + d_r (one latent)."""
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.kv_heads * self.head_dim

    def kv_bytes_per_token_per_layer(self, kv_dtype: str = "bf16") -> float:
        """KV bytes per token per layer [B] (FP8 scales neglected: per-tensor scales; FP4 is NVFP4 with its
        FP8 scale per 16 elements counted, 0.5625 B per element)."""
        return self.kv_elements_per_token_per_layer() * dtype_bytes(kv_dtype, "kv_dtype")

    def kv_bytes_per_token(self, kv_dtype: str = "bf16") -> float:
        """KV bytes per token over all layers [B]. Llama-3-70B BF16: 327,680; DeepSeek-V3 BF16: 70,272. With
        sliding-window layers this is the cost of a token within the window; a sequence's KV is
        :meth:`kv_bytes_per_sequence`."""
        return self.layers * self.kv_bytes_per_token_per_layer(kv_dtype)

    def kv_layer_tokens(self, context):
        """KV entries (layer x token) one sequence of ``context`` tokens holds [layer-tokens]: every full-attention
        layer all of them, a sliding-window layer at most ``sliding_window`` (gpt-oss: 128). Broadcasts."""
        import numpy as np

        s = np.asarray(context, dtype=float)
        if not self.sliding_layers:
            return self.layers * s
        return (self.layers - self.sliding_layers) * s + self.sliding_layers * np.minimum(s, self.sliding_window)

    def kv_bytes_per_sequence(self, context, kv_dtype: str = "bf16"):
        """KV bytes of one sequence of ``context`` tokens [B] (:meth:`kv_layer_tokens` x bytes per layer-token):
        ``kv_bytes_per_token`` x context without sliding-window layers, less with them."""
        return self.kv_layer_tokens(context) * self.kv_bytes_per_token_per_layer(kv_dtype)

    def kv_heads_per_rank(self, tp: int) -> int:
        """KV heads held per rank under TP (vLLM/SGLang get_num_kv_heads: max(1, h_kv // T)); MLA: 1 latent."""
        if self.is_mla:
            return 1
        return max(1, self.kv_heads // int(tp))

    def summary(self) -> dict[str, Any]:
        """Derived quantities for tables and the CLI."""
        return {
            "name": self.name, "attention": self.attention, "layers": self.layers, "hidden": self.hidden,
            "moe": self.is_moe, "params_total": self.params_total, "params_active": self.params_active,
            "kv_bytes_per_token_bf16": self.kv_bytes_per_token("bf16"),
            "kv_bytes_per_token_fp8": self.kv_bytes_per_token("fp8"),
        }


# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Hardware(Spec):
    """One accelerator SKU: memory, bandwidth, dense peak compute, and the links it uses."""

    name: str
    hbm_GiB: float = field(metadata=meta("GiB", "device memory as the driver reports it (nvidia-smi)",
                                          min=MIN_POSITIVE, max=MAX_GIB))
    hbm_bw_TBps: float = field(metadata=meta("TB/s", "HBM bandwidth (datasheet)", min=MIN_POSITIVE, max=MAX_RATE))
    bf16_TFLOPS: float = field(metadata=meta("TFLOP/s", "dense BF16 tensor peak", min=MIN_POSITIVE, max=MAX_RATE))
    fp8_TFLOPS: float = field(metadata=meta("TFLOP/s", "dense FP8 tensor peak; 0: no FP8 tensor cores (Ampere: FP8 "
                                                       "weights run as W8A16, dequantized to BF16)", min=0,
                                             max=MAX_RATE))
    fp4_TFLOPS: float = field(default=0.0, metadata=meta("TFLOP/s", "dense FP4 (NVFP4) tensor peak; 0: no FP4 "
                                                          "tensor cores", min=0, max=MAX_RATE, optional=True))
    scale_up_link: str = ""
    scale_up_size: int = field(default=8, metadata=meta("GPUs", "GPUs in one scale-up (NVLink/xGMI) domain",
                                                         min=1, max=65536, integer=True))
    sms: int = field(default=0, metadata=meta("SMs", "streaming multiprocessors (compute units); 0: not known, "
                                               "then communication kernels are not charged the SMs they take",
                                               min=0, max=65536, integer=True, optional=True))
    scale_out_link: str = ""
    display_name: str = ""
    sources: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        freeze_sources(self)
        check_numbers(self)
        for f, what in (("fp4_TFLOPS", "FP4"), ("fp8_TFLOPS", "FP8")):
            v = getattr(self, f)
            if 0 < v < MIN_POSITIVE:  # a subnormal peak would turn every such GEMM's time into an overflow
                raise SpecError(f"Hardware {self.name!r}: {f} must be 0 (no {what} tensor cores) or in "
                                f"[{MIN_POSITIVE:g}, {MAX_RATE:g}] [TFLOP/s], got {v!r}")
        if not self.scale_up_link:
            raise SpecError(f"Hardware {self.name!r}: scale_up_link must name a link preset")

    @property
    def label(self) -> str:
        return self.display_name or self.name

    @property
    def has_fp4(self) -> bool:
        """Whether the accelerator has FP4 tensor cores (``fp4_TFLOPS > 0``: Blackwell, not Hopper or MI300X)."""
        return self.fp4_TFLOPS > 0

    @property
    def has_fp8(self) -> bool:
        """Whether the accelerator has FP8 tensor cores (``fp8_TFLOPS > 0``: Hopper, Ada, Blackwell, CDNA 3; not
        Ampere). Without them FP8 weights still run, as weight-only W8A16 GEMMs (vLLM's Marlin FP8 kernels on
        Ampere): FP8 bytes read, BF16 arithmetic (:meth:`peak_TFLOPS`)."""
        return self.fp8_TFLOPS > 0

    def check_dtype(self, dtype: str, field: str = "dtype") -> str:
        """``dtype`` if it is a known dtype this accelerator can run GEMMs in; SpecError naming ``field``, the
        value and the GPU otherwise (fp4, NVFP4, needs FP4 tensor cores: ``fp4_TFLOPS > 0``; mxfp4 runs anywhere,
        as weight-only W4A16 kernels without them: vLLM's Marlin and Triton MXFP4 paths for gpt-oss on Hopper)."""
        dtype_bytes(dtype, field)
        if dtype == "fp4" and not self.has_fp4:
            raise SpecError(f"{field} must be a dtype {self.name} supports, got 'fp4': {self.name} has no FP4 "
                            f"tensor cores; use bf16 or fp8")
        return dtype

    def peak_TFLOPS(self, dtype: str, field: str = "weight_dtype") -> float:
        """Dense peak for a GEMM input dtype [TFLOP/s]: FP4 for fp4, FP8 for fp8 (BF16 on an accelerator without FP8
        tensor cores: weight-only W8A16), BF16 otherwise. SpecError (naming ``field``) for fp4 on an accelerator
        without FP4 tensor cores (:meth:`check_dtype`)."""
        self.check_dtype(dtype, field)
        if dtype == "fp4":
            return self.fp4_TFLOPS
        if dtype == "mxfp4":  # FP4 tensor cores where there are some, else W4A16 (dequantized to BF16)
            return self.fp4_TFLOPS if self.has_fp4 else self.bf16_TFLOPS
        if dtype == "fp8":  # no FP8 tensor cores: W8A16, the GEMM computes in BF16
            return self.fp8_TFLOPS if self.has_fp8 else self.bf16_TFLOPS
        return self.bf16_TFLOPS

    def ridge_flops_per_byte(self, dtype: str = "bf16") -> float:
        """Roofline ridge point (datasheet) [FLOP/B]. H100 BF16: 989.4e12 / 3.35e12 = 295."""
        return self.peak_TFLOPS(dtype, "dtype") * 1e12 / (self.hbm_bw_TBps * 1e12)


@dataclass(frozen=True)
class Link(Spec):
    """An interconnect, per GPU and per direction.

    Collective times use ``achievable_GBps`` as the NCCL *bus* bandwidth and an alpha(p) = latency_us +
    latency_per_rank_us * (p - 1) latency term (docs/models.md §1.2).
    """

    name: str
    kind: str = field(metadata={"help": "'scale-up', 'scale-out' or 'host'"})
    line_rate_GBps: float = field(metadata=meta("GB/s", "signalling rate per direction", min=MIN_POSITIVE,
                                                 max=MAX_RATE))
    achievable_GBps: float = field(metadata=meta("GB/s", "achievable bandwidth per direction (bus bandwidth "
                                                   "for collectives)", min=MIN_POSITIVE, max=MAX_RATE))
    latency_us: float = field(metadata=meta("us", "base latency alpha0 of one operation", min=0, max=MAX_RATE))
    latency_per_rank_us: float = field(default=0.0, metadata=meta("us", "extra latency per additional rank",
                                                                   min=0, max=MAX_RATE, optional=True))
    display_name: str = ""
    sources: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        freeze_sources(self)
        if self.kind not in LINK_KINDS:
            raise SpecError(f"Link {self.name!r}: kind must be one of {list(LINK_KINDS)}, got {self.kind!r}")
        check_numbers(self)
        if self.achievable_GBps > self.line_rate_GBps:
            raise SpecError(f"Link {self.name!r}: achievable_GBps ({self.achievable_GBps}) must be <= "
                            f"line_rate_GBps ({self.line_rate_GBps})")

    @property
    def label(self) -> str:
        return self.display_name or self.name

    @property
    def efficiency(self) -> float:
        """Achievable / line rate."""
        return self.achievable_GBps / self.line_rate_GBps


@dataclass(frozen=True)
class Runtime(Spec):
    """Serving-runtime efficiencies and memory policy: the knobs a calibration fits.

    Defaults are marked assumptions in ``data/runtime.yaml`` until calibrated against measurements.
    """

    name: str
    eta_mem: float = field(metadata=meta("", "achieved / datasheet HBM bandwidth", min=MIN_POSITIVE, max=1))
    eta_compute: float = field(metadata=meta("", "achieved / dense peak FLOP/s of GEMMs", min=MIN_POSITIVE, max=1))
    eta_attn_compute: float = field(metadata=meta("", "achieved / dense peak FLOP/s of the attention kernel",
                                                   min=MIN_POSITIVE, max=1))
    eta_attn_mem: float = field(metadata=meta("", "achieved / datasheet HBM bandwidth of the attention kernel "
                                               "(paged KV reads)", min=MIN_POSITIVE, max=1))
    kernel_overhead_us: float = field(metadata=meta("us", "fixed time per kernel (launch gap, tail)", min=0,
                                                     max=MAX_RATE))
    step_overhead_ms: float = field(metadata=meta("ms", "fixed time per decode step (scheduling, sampling)",
                                                   min=0, max=MAX_RATE))
    usable_hbm_fraction: float = field(metadata=meta("", "fraction of HBM the runtime may use (of the total, or "
                                                      "with memory_fraction_of 'free' of the memory free after "
                                                      "weights, activations and reserve: the KV cache's share; "
                                                      "with 'static' SGLang's mem_fraction_static, 0 = its "
                                                      "default)", min=0, max=1))
    reserve_GiB: float = field(metadata=meta("GiB", "CUDA context, NCCL buffers, graphs, fragmentation",
                                              min=0, max=MAX_GIB))
    page_tokens: int = field(metadata=meta("tokens", "KV page (block) size", min=1, max=65536, integer=True))
    #: engine whose fitted kernel curves price the kernels (data/kernel_efficiency.yaml: trtllm, vllm, sglang,
    #: or any = pooled); "" = the scalar efficiencies above price every kernel
    kernel_set: str = ""
    #: what usable_hbm_fraction is a fraction of: "total" HBM (vLLM gpu_memory_utilization: weights, activations
    #: and KV within that share), the memory "free" after the weights, activations and reserve (TensorRT-LLM
    #: free_gpu_memory_fraction: the KV cache's share of what is left), or "static": SGLang's mem_fraction_static,
    #: the share of the memory free before the weights load that holds the weights and the KV pool (activations
    #: and CUDA graphs live in the rest); with "static", usable_hbm_fraction 0 means SGLang's own default, which
    #: depends on the GPU's memory and TP (llmexplore.models.step.engine.sglang_mem_fraction_static)
    memory_fraction_of: str = "total"
    #: serving engine whose scheduler semantics the serving simulator follows (llmexplore.models.serving.engines:
    #: trtllm, vllm, sglang); "" = engine-neutral (the base policy)
    engine: str = ""
    #: the serving stack's time per request before it reaches the engine's scheduler (HTTP, request parsing,
    #: tokenisation), fixed part and per prompt token: it delays the request and so adds to its TTFT in the
    #: serving simulator; 0 = the pure engine
    request_host_ms: float = field(default=0.0, metadata=meta("ms", "serving-stack time per request before the "
                                                               "scheduler (HTTP, parsing)", min=0, max=1e4,
                                                               optional=True))
    request_host_us_per_token: float = field(default=0.0, metadata=meta("us", "serving-stack time per prompt token "
                                                                         "(tokenisation)", min=0, max=1e4,
                                                                         optional=True))
    #: 0 = the fitted curves; i >= 1 = the i-th deterministic draw of their parameters from the fit's bootstrap
    #: covariance (llmexplore.models.step.uncertainty: error bands are the spread over draws)
    kernel_draw: int = field(default=0, metadata=meta("", "draw of the kernel-curve parameters (0: the fit)",
                                                        min=0, max=1_000_000, integer=True, optional=True))
    display_name: str = ""
    sources: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        freeze_sources(self)
        check_numbers(self)  # efficiencies and the usable fraction in [1e-6, 1]
        if not isinstance(self.kernel_set, str):
            raise SpecError(f"Runtime {self.name!r}: kernel_set must be an engine name (text), got "
                            f"{self.kernel_set!r}")
        if self.memory_fraction_of not in MEMORY_FRACTIONS_OF:
            raise SpecError(f"Runtime {self.name!r}: memory_fraction_of must be one of "
                            f"{', '.join(map(repr, MEMORY_FRACTIONS_OF))}, got {self.memory_fraction_of!r}")
        if self.usable_hbm_fraction < MIN_POSITIVE and self.memory_fraction_of != "static":
            raise SpecError(f"Runtime {self.name!r}: usable_hbm_fraction must be in [{MIN_POSITIVE:g}, 1] (0, SGLang's "
                            f"default, only with memory_fraction_of 'static'), got {self.usable_hbm_fraction!r}")
        if self.engine not in RUNTIME_ENGINES:
            raise SpecError(f"Runtime {self.name!r}: engine must be one of {', '.join(map(repr, RUNTIME_ENGINES))}, "
                            f"got {self.engine!r}")


# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StorageTier(Spec):
    """Where cached KV blocks live, and how fast they come back (docs/models.md §6.1).

    A read of ``io`` bytes at queue depth QD sees the device at its effective bandwidth (Little's law)
    ``min(read_GBps, link_GBps, QD * io / (latency_us + io / read_GBps))``. ``dram``: pinned host memory, read
    straight into the GPU over PCIe (``read_GBps`` is that copy's bandwidth, ``h2d_GBps`` is 0). ``ssd`` and
    ``network``: read into host memory first, then copied to the GPU at ``h2d_GBps`` (the two hops pipelined
    or not). ``block_overhead_us``: fixed cost per block file (open, lookup, checksum bookkeeping).
    """

    name: str
    kind: str = field(metadata={"help": "'dram', 'ssd' or 'network'"})
    read_GBps: float = field(metadata=meta("GB/s", "sustained read bandwidth of the device (at high queue depth)",
                                            min=MIN_POSITIVE, max=MAX_RATE))
    latency_us: float = field(metadata=meta("us", "latency of one read request at queue depth 1", min=0,
                                             max=MAX_RATE))
    link_GBps: float = field(metadata=meta("GB/s", "cap of the path from the device to host memory (PCIe lanes, "
                                            "NIC); 0: none", min=0, max=MAX_RATE))
    h2d_GBps: float = field(metadata=meta("GB/s", "host-memory to GPU copy bandwidth of the second hop; 0 for "
                                           "a dram tier (one hop)", min=0, max=MAX_RATE))
    queue_depth: int = field(metadata=meta("", "reads kept in flight", min=1, max=4096, integer=True))
    io_KiB: int = field(metadata=meta("KiB", "size of one read request", min=4, max=1 << 20, integer=True))
    block_overhead_us: float = field(default=0.0, metadata=meta("us", "fixed cost per block (open, lookup)",
                                                                 min=0, max=MAX_RATE, optional=True))
    display_name: str = ""
    sources: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        freeze_sources(self)
        if self.kind not in STORAGE_KINDS:
            raise SpecError(f"StorageTier {self.name!r}: kind must be one of {list(STORAGE_KINDS)}, got {self.kind!r}")
        check_numbers(self)
        if self.kind == "dram" and self.h2d_GBps:
            raise SpecError(f"StorageTier {self.name!r}: h2d_GBps must be 0 for a dram tier (its read is the copy "
                            f"to the GPU), got {self.h2d_GBps}")
        if self.kind != "dram" and not self.h2d_GBps:
            raise SpecError(f"StorageTier {self.name!r}: h2d_GBps must be > 0 for a {self.kind} tier (blocks reach "
                            f"the GPU through host memory), got {self.h2d_GBps}")

    @property
    def label(self) -> str:
        return self.display_name or self.name

    def effective_GBps(self, queue_depth: int | None = None, io_KiB: float | None = None) -> float:
        """Read bandwidth seen at a queue depth and request size [GB/s] (Little's law, capped by the device
        and its link)."""
        qd = self.queue_depth if queue_depth is None else queue_depth
        io = (self.io_KiB if io_KiB is None else io_KiB) * 1024.0
        per_request_s = self.latency_us * 1e-6 + io / (self.read_GBps * 1e9)
        bw = qd * io / per_request_s / 1e9
        caps = [self.read_GBps] + ([self.link_GBps] if self.link_GBps else [])
        return min(bw, *caps)


# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Targets(Spec):
    """Latency targets (a service-level objective) a deployment must meet: time to first token and time per
    output token, optionally end-to-end, each bounding the statistic ``stat`` over requests (``p99``: 99 % of
    requests at or below the target). MLPerf Inference's server scenarios are the built-in ones
    (``data/targets.yaml``).
    """

    name: str
    ttft_ms: float = field(metadata=meta("ms", "time to first token (queueing + prefill)", min=MIN_POSITIVE,
                                          max=MAX_RATE))
    tpot_ms: float = field(metadata=meta("ms", "time per output token after the first (decode)", min=MIN_POSITIVE,
                                          max=MAX_RATE))
    stat: str = field(metadata={"help": "statistic over requests the targets bound: 'mean', 'p50', 'p90' or 'p99'"})
    e2e_ms: float = field(default=0.0, metadata=meta("ms", "end-to-end request latency; 0: no target", min=0,
                                                      max=MAX_RATE, optional=True))
    display_name: str = ""
    sources: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        freeze_sources(self)
        if not isinstance(self.stat, str) or self.stat not in TARGET_STATS:
            raise SpecError(f"Targets {_check.shown(self.name)}: stat must be one of {list(TARGET_STATS)}, got "
                            f"{_check.shown(self.stat)}")
        check_numbers(self)
        if 0 < self.e2e_ms < MIN_POSITIVE:  # a subnormal target would turn every ratio into an overflow
            raise SpecError(f"Targets {self.name!r}: e2e_ms must be 0 (no end-to-end target) or in "
                            f"[{MIN_POSITIVE:g}, {MAX_RATE:g}] [ms], got {self.e2e_ms!r}")
        if self.e2e_ms and self.e2e_ms < self.ttft_ms:
            raise SpecError(f"Targets {self.name!r}: e2e_ms must be 0 (no end-to-end target) or >= ttft_ms "
                            f"({self.ttft_ms:g}): a request ends after its first token, got {self.e2e_ms:g}")

    @property
    def label(self) -> str:
        return self.display_name or self.name

    @property
    def percentile(self) -> float:
        """The percentile ``stat`` names (p99: 99.0, p50: 50.0); NaN for the mean."""
        return float("nan") if self.stat == "mean" else float(self.stat[1:])


# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SpecDecode(Spec):
    """Speculative decoding: how tokens are drafted and how many of them the target model accepts.

    Each decode iteration drafts ``draft_tokens`` k tokens per sequence and verifies them in one forward pass
    of the target model over ``verify_tokens`` tokens per sequence (k + 1 for a chain; more for a tree of
    candidates, SGLang's --speculative-num-draft-tokens). The acceptance is given explicitly, never defaulted:
    either ``acceptance``, the k per-position conditional acceptance rates (the chance draft i is accepted
    given drafts 1..i-1 were), or ``accepted_length``, the mean tokens a verify step emits per sequence
    (accepted drafts plus the target's own token, in [1, k + 1]; what SGLang reports as "accept length" and
    the EAGLE papers as tau). ``conditions`` says what the acceptance was measured on (dataset,
    temperature): it does not carry over to other traffic. docs/models.md §1.4.
    """

    name: str
    method: str = field(metadata={"help": "'mtp' (the model's MTP module), 'draft_head' (EAGLE-style head) or "
                                          "'ngram' (prompt lookup, no GPU draft)"})
    draft_tokens: int = field(metadata=meta("tokens", "draft tokens k per sequence per verify step", min=1,
                                             max=MAX_DRAFT_TOKENS, integer=True))
    conditions: str = field(metadata={"help": "what the acceptance was measured on: dataset, temperature"})
    acceptance: tuple = ()
    accepted_length: float = field(default=0.0, metadata=meta("tokens", "mean tokens emitted per verify step "
                                                               "per sequence (tau); 0: from acceptance", min=0,
                                                               max=MAX_DRAFT_TOKENS + 1, optional=True))
    verify_tokens: int = field(default=0, metadata=meta("tokens", "tokens per sequence the target verifies per "
                                                         "step; 0: draft_tokens + 1 (a chain)", min=0,
                                                         max=4 * MAX_DRAFT_TOKENS, integer=True, optional=True))
    draft_width: int = field(default=1, metadata=meta("tokens", "tokens per sequence in each draft step after "
                                                       "the first (a tree's top-k); 1: a chain", min=1,
                                                       max=MAX_DRAFT_TOKENS, integer=True, optional=True))
    draft_vocab: int = field(default=0, metadata=meta("", "vocabulary of the draft's LM head; 0: the target's",
                                                       min=0, max=MAX_VOCAB, integer=True, optional=True))
    host_ms: float = field(default=0.0, metadata=meta("ms", "CPU time per verify step to draft (n-gram lookup)",
                                                       min=0, max=1e4, optional=True))
    display_name: str = ""
    sources: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        freeze_sources(self)
        where = f"SpecDecode {_check.shown(self.name)}"
        if self.method not in SPEC_METHODS:
            raise SpecError(f"{where}: method must be one of {list(SPEC_METHODS)}, got {_check.shown(self.method)}")
        check_numbers(self)
        _check.text(f"{where}: conditions", self.conditions)
        k = self.draft_tokens
        acc = self.acceptance
        if isinstance(acc, (str, bytes)) or not isinstance(acc, (list, tuple)):
            raise SpecError(f"{where}: acceptance must be a list of {k} rates in [0, 1] (one per draft position), "
                            f"got {_check.shown(acc)}")
        acc = tuple(_check.number(f"{where}: acceptance[{i}]", a, lo=0.0, hi=1.0) for i, a in enumerate(acc))
        object.__setattr__(self, "acceptance", acc)
        if bool(acc) == bool(self.accepted_length):
            raise SpecError(f"{where}: give the acceptance one way, either acceptance (a rate per draft position) "
                            f"or accepted_length (mean tokens per verify step), got "
                            f"{'both' if acc else 'neither'}")
        if acc and len(acc) != k:
            raise SpecError(f"{where}: acceptance must hold one rate per draft token ({k}), got {len(acc)}")
        if self.accepted_length and not 1.0 <= self.accepted_length <= k + 1:
            raise SpecError(f"{where}: accepted_length must be in [1, draft_tokens + 1 = {k + 1}] tokens (the "
                            f"target's own token plus the accepted drafts), got {self.accepted_length:g}")
        if self.verify_tokens and self.verify_tokens < k + 1:
            raise SpecError(f"{where}: verify_tokens must be 0 (a chain: draft_tokens + 1) or >= draft_tokens + 1 "
                            f"= {k + 1}, got {self.verify_tokens}")
        if self.method == "ngram" and (self.draft_width > 1 or self.draft_vocab):
            raise SpecError(f"{where}: draft_width and draft_vocab describe a GPU draft; method 'ngram' drafts on "
                            "the CPU (leave them out)")

    @property
    def label(self) -> str:
        return self.display_name or self.name

    @property
    def tokens_per_step(self) -> float:
        """Mean tokens a verify step emits per sequence (tau) [tokens]: ``accepted_length``, or from the
        per-position rates 1 + sum_i prod_{j <= i} a_j (a draft counts only if every earlier one was accepted)."""
        if self.accepted_length:
            return float(self.accepted_length)
        tau, run = 1.0, 1.0
        for a in self.acceptance:
            run *= a
            tau += run
        return tau

    def to_json(self) -> dict:
        """The spec as plain data (every field; a DeploymentConfig side's ``speculative``), read back by
        :meth:`from_dict`."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["acceptance"] = list(self.acceptance)
        out["sources"] = dict(self.sources)
        return out

    @property
    def verify_width(self) -> int:
        """Tokens per sequence in the verify pass: ``verify_tokens``, or k + 1 for a chain."""
        return self.verify_tokens or self.draft_tokens + 1


# ----------------------------------------------------------------------------------------------------------------
#: the largest price of one GPU-hour a tier may hold [USD]: far above any rental price, finite
MAX_USD_PER_GPU_HOUR = 1e4
_DATE = re.compile(r"(19|20)\d\d-(0[1-9]|1[0-2])(-(0[1-9]|[12]\d|3[01]))?")


def check_price(where: str, gpu: str, value: Any) -> float:
    """A price of one GPU-hour: a finite number in (0, MAX_USD_PER_GPU_HOUR] [USD]; SpecError naming it."""
    return _check.number(f"{where}: price of {gpu}", value, lo=0.0, lo_open=True, hi=MAX_USD_PER_GPU_HOUR,
                         unit="USD per GPU-hour")


@dataclass(frozen=True)
class GpuPrice:
    """One GPU's price in a tier: USD per GPU-hour (the instance price over its GPUs, host share included), the
    date it was published or read (ISO, YYYY-MM or YYYY-MM-DD) and where it comes from."""

    gpu: str
    usd_per_gpu_hour: float
    date: str
    source: str

    @property
    def label(self) -> str:
        return f"${self.usd_per_gpu_hour:.2f}/GPU-h ({self.date})"


@dataclass(frozen=True)
class PriceTier(Spec):
    """A price tier (hyperscaler on-demand, neocloud on-demand, 3-year reserved, ...): USD per GPU-hour for each
    GPU preset it prices, each with its date and source (``data/prices.yaml``; docs/models.md §8.7). Prices change
    fast: every answer that uses one shows its date. A GPU the tier does not list has no price in it."""

    name: str
    prices: Mapping[str, Any]
    display_name: str = ""
    sources: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        freeze_sources(self)
        where = f"PriceTier {_check.shown(self.name)}"
        _check.text("PriceTier name", self.name)
        _check.text(f"{where}: display_name", self.display_name, allow_empty=True)
        if not isinstance(self.prices, Mapping) or not self.prices:
            raise SpecError(f"{where}: prices must be a non-empty mapping of GPU preset -> {{usd_per_gpu_hour, "
                            f"date, source}}, got {_check.shown(self.prices)}")
        out = {}
        for gpu, row in self.prices.items():
            gpu = _check.text(f"{where}: GPU name", gpu)
            if isinstance(row, GpuPrice):
                out[gpu] = row
                continue
            if not isinstance(row, Mapping):
                raise SpecError(f"{where}: prices.{gpu} must be a mapping with usd_per_gpu_hour, date and source, "
                                f"got {_check.shown(row)}")
            unknown = sorted(map(str, set(row) - {"usd_per_gpu_hour", "date", "source"}))
            missing = [k for k in ("usd_per_gpu_hour", "date", "source") if k not in row]
            if unknown or missing:
                raise SpecError(f"{where}: prices.{gpu} must have exactly usd_per_gpu_hour, date and source"
                                + (f"; unknown keys {unknown}" if unknown else "")
                                + (f"; missing {missing}" if missing else ""))
            usd = check_price(where, gpu, row["usd_per_gpu_hour"])
            date = str(row["date"]) if not isinstance(row["date"], str) else row["date"]
            if not _DATE.fullmatch(date):
                raise SpecError(f"{where}: prices.{gpu}.date must be an ISO date YYYY-MM or YYYY-MM-DD (when the "
                                f"price was published or read), got {_check.shown(row['date'])}")
            src = _check.text(f"{where}: prices.{gpu}.source", row["source"], max_len=1000)
            out[gpu] = GpuPrice(gpu, usd, date, src)
        object.__setattr__(self, "prices", MappingProxyType(out))

    @property
    def label(self) -> str:
        return self.display_name or self.name

    def price(self, gpu: str) -> GpuPrice:
        """The price of ``gpu`` in this tier; SpecError naming the tier and the GPUs it prices otherwise."""
        try:
            return self.prices[gpu]
        except KeyError:
            raise SpecError(f"price tier {self.name!r} has no price for gpu {gpu!r} (it prices "
                            f"{', '.join(self.prices)}); give one with usd_per_gpu_hour (--usd-per-gpu-hour "
                            f"{gpu}=X) or add it to a prices file") from None


@dataclass(frozen=True)
class GpuPower(Spec):
    """Power of one GPU type (``data/power.yaml``, keyed by hardware preset; docs/models.md §8.7).

    Board power (what NVML reports and the ML.ENERGY leaderboard measures) follows an energy roofline (Choi et
    al., IPDPS 2013): ``idle_W`` while resident and idle, plus energy per FLOP and per HBM byte chosen so that a
    dense GEMM at the GPU's best achieved rate draws ``tdp_W`` and a kernel streaming HBM at its achieved
    bandwidth draws ``memory_bound_W``; never above ``tdp_W``. The all-in power of a provisioned GPU, which
    tokens/s per MW divides by, adds the host's and the network's share per GPU and the facility's PUE:
    (tdp_W + host_W + network_W) x pue."""

    name: str
    tdp_W: float = field(metadata=meta("W", "board power limit (datasheet TDP)", min=1.0, max=1e5))
    idle_W: float = field(metadata=meta("W", "board power idle with a model resident", min=0.0, max=1e5))
    memory_bound_W: float = field(metadata=meta("W", "board power streaming HBM at the achieved bandwidth",
                                                min=0.0, max=1e5))
    host_W: float = field(metadata=meta("W", "the server's non-GPU power per GPU (CPU, DRAM, NICs, fans)",
                                        min=0.0, max=1e5))
    network_W: float = field(metadata=meta("W", "scale-out network power per GPU (switches, optics)", min=0.0,
                                           max=1e5))
    pue: float = field(metadata=meta("", "facility power usage effectiveness (cooling, conversion)", min=1.0,
                                     max=5.0))
    display_name: str = ""
    sources: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        freeze_sources(self)
        check_numbers(self)
        where = f"GpuPower {_check.shown(self.name)}"
        if not self.idle_W < self.memory_bound_W <= self.tdp_W:
            raise SpecError(f"{where}: needs idle_W < memory_bound_W <= tdp_W (a kernel that moves bytes draws "
                            f"more than idle and at most the power limit), got {self.idle_W:g} W, "
                            f"{self.memory_bound_W:g} W, {self.tdp_W:g} W")

    @property
    def all_in_kW(self) -> float:
        """Provisioned power of one GPU with its host, network and facility overhead [kW]."""
        return (self.tdp_W + self.host_W + self.network_W) * self.pue / 1e3

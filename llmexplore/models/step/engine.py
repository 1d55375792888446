"""The step engine everyone builds on: a :class:`Deployment` and the one per-kernel roofline (docs/models.md §1.1).

A decode step, a prefill, a mixed chunked-prefill iteration and an MoE layer are all sequences of kernels.
Each kernel's time is priced here, and only here::

    t_k = max(F_k / R_flops(class), M_k / R_bytes(class)) + t_overhead

with F_k FLOPs, M_k HBM bytes, and the achieved throughputs R of the kernel's class (:func:`kernel_rates`):

===============  ==========================================  ===========================================
class            achieved compute R_flops [FLOP/s]            achieved memory R_bytes [B/s]
===============  ==========================================  ===========================================
``gemm``         eta_compute x dense peak of the weight dtype  eta_mem x HBM bandwidth
``grouped_gemm`` eta_compute x dense peak of the weight dtype  eta_mem x HBM bandwidth
``attention``    eta_attn_compute x dense BF16 peak            eta_attn_mem x HBM bandwidth
``elementwise``  (no FLOPs counted)                            eta_mem x HBM bandwidth
===============  ==========================================  ===========================================

That table is the scalar model (runtimes ``scalar``, ``uncalibrated``: one efficiency per class from the
:class:`~llmexplore.specs.Runtime` preset, docs/models.md §7). A runtime with a ``kernel_set`` (``default``,
``trtllm``, ``vllm``, ``sglang``) instead prices each kernel with the fitted curve of its class, variant, dtype,
GPU and engine (:func:`kernel_curve`, :mod:`.kernels`, docs/models.md §1.1a): a soft roofline
t0 + (t_c^p + t_m^p)^(1/p), prefill and decode attention as separate classes, and fitted intra-node collectives
on the deployment's fabric. Either way the choice is made in exactly one place: :func:`kernel_rates`.

The :class:`Deployment` fixes everything that does not change while batch and context are swept: the model,
the accelerator, the attention group of T ranks and its links, the dtypes and the runtime, and the weight
placement of each attention layout (TP, CP, DPA, DOP; docs/models.md §3.1).
"""

from __future__ import annotations

import functools
import math
import zlib
import dataclasses
from dataclasses import dataclass

import numpy as np

from ... import _check, presets
from ...deployment import MAX_RANKS
from ...errors import SpecError
from ...specs import Hardware, ModelSpec, Runtime
from ...units import GiB, MS, US, dtype_bytes
from .collectives import Fabric
from .kernels import PREFILL_QUERY_TOKENS, Curve, KernelSet, gemm_work, moe_block_work, soft_roofline_s
from .sampler import SAMPLERS
from .stats import expected_max_std_normal

__all__ = ["LAYOUTS", "LAYOUT_INFO", "KERNEL_CLASSES", "EMB_BYTES", "LOGIT_BYTES", "Deployment",
           "KernelRates", "MOE_DISPATCH", "resolve_runtime", "resolve_deployment", "resolve_speculative", "check_layout", "check_batch_context", "kernel_rates", "kernel_s",
           "gemm_s", "elementwise_s", "step_overhead_s", "gemm_variant", "kernel_curve", "moe_s", "PREFILL_QUERY_TOKENS"]

LAYOUTS = ("TP", "CP", "DPA", "DOP")
LAYOUT_INFO = {
    "TP": "tensor parallel: heads sharded, KV head-sharded (MLA latent replicated)",
    "CP": "context parallel: weights replicated, KV pages dealt over ranks",
    "DPA": "data-parallel attention: sequences partitioned, weights replicated",
    "DOP": "weights sharded like TP, KV owned per request like DPA",
}
KERNEL_CLASSES = ("gemm", "grouped_gemm", "attention", "attention_decode", "attention_prefill", "elementwise")
EMB_BYTES = 2.0  # embeddings, LM head, norms and router kept in BF16 (the DeepSeek-V3 FP8 checkpoint does this)
LOGIT_BYTES = 4.0  # FP32 logits
MOE_DISPATCH = ("gather", "alltoall")
MAX_REDUNDANT = 4096  # most extra expert slots (EPLB replicas) accepted
MAX_BATCH = 1 << 24  # sequences per step: far beyond any GPU's memory, small enough to allocate nothing silly
MAX_CONTEXT = 1 << 30  # tokens per sequence


#: memory per GPU not free when SGLang measures the memory before loading weights (CUDA context and NCCL
#: initialisation) [GiB] [assumption: ~1 GiB; SGLang measures it at run time (init_torch_distributed)]
SGLANG_PRELOAD_GiB = 1.0


def sglang_chunked_prefill_size(hbm_GiB: float) -> int:
    """SGLang's default ``chunked_prefill_size`` on a GPU of ``hbm_GiB`` [tokens]: 8,192 below 160 GiB (H100,
    H200), 16,384 from there (B200) (``ServerArgs._handle_gpu_memory_settings`` at sgl-project/sglang 001067ff)."""
    return 16384 if hbm_GiB * 1024.0 >= 160 * 1024 else 8192


def sglang_mem_fraction_static(hbm_GiB: float, tp: int, *, mla: bool = False, pp: int = 1) -> float:
    """SGLang's default ``mem_fraction_static`` on one GPU of ``hbm_GiB`` at tensor parallelism ``tp``
    (``ServerArgs._handle_gpu_memory_settings``, python/sglang/srt/server_args.py at sgl-project/sglang 001067ff;
    no speculative decoding, no DP attention, no DeepEP): the memory less a reserve for activations and CUDA
    graphs, ``round((M - R) / M, 3)`` with M in MiB and

        R = 512 + 1.5 max(chunked_prefill_size, 2048) + 1024 tp pp / 8 + 2 max_bs + prefill graphs, R >= 10 GiB,

    chunked_prefill_size 8,192 and max_bs 256 (TP < 4) or 512 below 160 GiB (H100, H200), 16,384 and 512 above
    (B200); prefill graphs 8 MiB per captured size (58 sizes up to 8,192, 74 up to 16,384) or 1.5 GiB for MLA
    models. H100: 0.830 (TP1) to 0.812 (TP8); H200: 0.903 to 0.893; B200: 0.854 to 0.849."""
    mem = hbm_GiB * 1024.0
    chunk = sglang_chunked_prefill_size(hbm_GiB)
    big = chunk > 8192
    max_bs = 512 if big or tp >= 4 else 256
    graphs = 1.5 * 1024 if mla else (74 if big else 58) * 8
    reserved = 512 + 1.5 * max(chunk, 2048) + tp * pp / 8 * 1024 + 2 * max_bs + graphs
    if mem > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((mem - reserved) / mem, 3)


@dataclass(frozen=True)
class Deployment:
    """Everything fixed while batch size and context length are swept.

    Build one with :meth:`Deployment.build` from preset names. ``ranks`` is T, the attention group size;
    ``q_tokens`` the query tokens per sequence per step (1 for plain decode, more for speculative decoding);
    ``logits_tokens`` how many of them need logits (None: all); ``context_cv`` the coefficient of variation
    of context lengths (DPA/DOP imbalance, docs/models.md §3.3).
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
    #: how a DPA step moves tokens to the experts: "gather" (every rank all-gathers the batch and
    #: reduce-scatters the result: SGLang DP attention, --attn-dp-size, formerly --enable-dp-attention) or
    #: "alltoall" (each token goes only to the ranks of its top-k experts, FP8 dispatch and BF16 combine: DeepEP,
    #: SGLang --moe-a2a-backend deepep, formerly --enable-deepep-moe; data/engines.yaml)
    moe_dispatch: str = "gather"
    #: two-batch overlap (TBO): the step runs as two micro-batches so that one's MoE all-to-all overlaps the
    #: other's compute (SGLang --enable-two-batch-overlap, modelled for DPA steps with ``moe_dispatch ==
    #: "alltoall"``: docs/models.md §3.3). Off by default, as in every engine preset: SGLang's
    #: ``enable_two_batch_overlap`` defaults to False (server_args.py), vLLM's dual-batch overlap
    #: ``--enable-dbo`` defaults to off, and TensorRT-LLM does not split steps into overlapped micro-batches by
    #: default
    two_batch_overlap: bool = False
    #: expert-parallel size of an MoE model's routed experts within the instance's ``ranks``: the experts are
    #: dealt over ``moe_ep`` groups and each expert is sliced ``ranks / moe_ep`` ways (MoE-TP). None means
    #: ``ranks`` (every rank holds whole experts: vLLM --enable-expert-parallel, SGLang --ep-size ranks); 1 is
    #: pure MoE-TP (vLLM's default for MoE models). All-to-all dispatch needs ``moe_ep == ranks``.
    moe_ep: int | None = None
    #: how the step samples its tokens (:mod:`.sampler`): "fused" (one fused top-k/top-p or greedy kernel,
    #: not priced) or "torch_sort" (vLLM's PyTorch sort-based top-k/top-p over the whole logits tensor: vLLM
    #: 0.11.1-0.20's default when requests set top_p < 1 or top_k, or VLLM_USE_FLASHINFER_SAMPLER=0)
    sampler: str = "fused"
    #: extra routed-expert slots placed by EPLB for DeepEP's all-to-all (SGLang --ep-num-redundant-experts):
    #: each of the ``ranks`` holds (experts + moe_redundant) / ranks slots. Needs ``moe_dispatch == "alltoall"``
    moe_redundant: int = 0
    #: DPA steps: the dense FFN layers run data-parallel, each rank on its own tokens with whole weights, instead
    #: of tensor-parallel over the gathered batch (SGLang --moe-dense-tp-size 1)
    dp_dense: bool = False
    #: DPA steps: the embedding and LM head are replicated, each rank computing its own tokens' logits over the
    #: whole vocabulary, instead of vocab-parallel with gathers (SGLang --enable-dp-lm-head)
    dp_lm_head: bool = False

    @classmethod
    def build(cls, model="llama-3-70b", gpu="h100-sxm", ranks: int = 8, *, runtime="default",
              weight_dtype: str | None = None, kv_dtype: str = "bf16", q_tokens: int = 1,
              context_cv: float = 0.0, scale_up_link=None, scale_out_link=None,
              moe_dispatch: str = "gather", two_batch_overlap: bool = False,
              moe_ep: int | None = None, sampler: str = "fused", moe_redundant: int = 0,
              dp_dense: bool = False, dp_lm_head: bool = False) -> "Deployment":
        """Resolve presets (names or specs) and validate. Links default to the GPU's own; ``weight_dtype``
        defaults to the dtype the model's weights are released in."""
        m, hw, rt, fabric = resolve_deployment(model, gpu, runtime, scale_up_link, scale_out_link)
        return cls(model=m, hardware=hw, ranks=ranks, runtime=rt, fabric=fabric,
                   weight_dtype=m.weight_dtype if weight_dtype is None else weight_dtype,
                   kv_dtype=kv_dtype, q_tokens=q_tokens, context_cv=context_cv, moe_dispatch=moe_dispatch,
                   two_batch_overlap=two_batch_overlap, moe_ep=moe_ep, sampler=sampler,
                   moe_redundant=moe_redundant, dp_dense=dp_dense, dp_lm_head=dp_lm_head)

    def __post_init__(self) -> None:
        m = self.model
        T = _check.integer("ranks", self.ranks, lo=1, hi=MAX_RANKS)
        object.__setattr__(self, "ranks", T)
        dtype_bytes(self.weight_dtype, "weight_dtype")
        dtype_bytes(self.kv_dtype, "kv_dtype")
        dtype_bytes(self.act_dtype, "act_dtype")
        self.hardware.check_dtype(self.weight_dtype, "weight_dtype")  # fp4 weights need FP4 tensor cores
        object.__setattr__(self, "q_tokens", _check.integer("q_tokens", self.q_tokens, lo=1, hi=1 << 20))
        if self.logits_tokens is not None:
            object.__setattr__(self, "logits_tokens", _check.integer("logits_tokens", self.logits_tokens, lo=1,
                                                                     hi=self.q_tokens))
        object.__setattr__(self, "context_cv", _check.number("context_cv", self.context_cv, lo=0.0, hi=100.0))
        _check.choice("moe_dispatch", self.moe_dispatch, MOE_DISPATCH)
        _check.choice("sampler", self.sampler, SAMPLERS)
        object.__setattr__(self, "two_batch_overlap", _check.boolean("two_batch_overlap", self.two_batch_overlap))
        object.__setattr__(self, "dp_dense", _check.boolean("dp_dense", self.dp_dense))
        object.__setattr__(self, "dp_lm_head", _check.boolean("dp_lm_head", self.dp_lm_head))
        red = _check.integer("moe_redundant", self.moe_redundant, lo=0, hi=MAX_REDUNDANT)
        object.__setattr__(self, "moe_redundant", red)
        a2a = self.moe_dispatch == "alltoall" and m.is_moe
        if red and not a2a:
            raise SpecError(f"moe_redundant (extra expert slots, EPLB) needs an MoE model with moe_dispatch "
                            f"'alltoall' (DeepEP), got {red} with {m.name} and {self.moe_dispatch!r}")
        # all-to-all dispatch is a DPA mode (whole heads and a whole shared expert on every rank), so only the
        # tensor-parallel parts need to divide: the routed slots always, the dense FFN unless it is DP too;
        # the other layouts check the rest (check_layout)
        skip = ({"query heads", "expert intermediate size"} if a2a else set()) | (
            {"FFN intermediate size"} if self.dp_dense else set())
        rules = [r for r in _sharded_sizes(m) if r[0] not in skip]
        if m.is_moe:
            rules.append(("routed experts" + (" + moe_redundant" if red else ""), m.routed_experts + red))
        for what, n in rules:
            if n % T:
                raise SpecError(f"ranks ({T}) must divide the {what} of {m.name} ({n})")
        if self.moe_ep is not None:
            ep = _check.integer("moe_ep", self.moe_ep, lo=1, hi=T)
            if not m.is_moe:
                raise SpecError(f"moe_ep applies to MoE models only; {m.name} is dense, got {ep}")
            if T % ep:
                raise SpecError(f"moe_ep ({ep}) must divide ranks ({T})")
            if m.routed_experts % ep:
                raise SpecError(f"moe_ep ({ep}) must divide the routed experts of {m.name} ({m.routed_experts})")
            if m.moe_intermediate % (T // ep):
                raise SpecError(f"ranks / moe_ep ({T // ep}) must divide the expert intermediate size of {m.name} "
                                f"({m.moe_intermediate})")
            if self.moe_dispatch == "alltoall" and ep != T:
                raise SpecError(f"moe_ep ({ep}) must equal ranks ({T}) with all-to-all dispatch")
            object.__setattr__(self, "moe_ep", ep)
        if not m.is_mla and m.kv_heads % T and T % m.kv_heads:
            raise SpecError(f"ranks ({T}) must divide or be a multiple of the KV heads of {m.name} "
                            f"({m.kv_heads})")
        self.fabric.split(T)  # raises if T spans nodes unevenly
        object.__setattr__(self, "fabric", dataclasses.replace(self.fabric, fitted=self._fitted_collectives()))

    def _fitted_collectives(self) -> tuple:
        """Intra-node collective curves of the kernel set ({(op, ranks): (alpha_s, bus_Bps)}, as a tuple).

        They were measured on the GPU's own scale-up link. On another link (a what-if, or an edited preset) the
        measured curve is scaled by the two links' ratios: alpha by their alpha(p), the bus bandwidth by their
        achievable bandwidths, so a faster link is never slower than the measured one."""
        ks = self.kernels
        if ks is None or not self.hardware.scale_up_link:
            return ()
        up, own = self.fabric.scale_up, presets.link(self.hardware.scale_up_link)
        out = []
        for key, c in ks.curves.items():
            cls, op, ranks = key.split(".")
            if cls != "comm":
                continue
            p = int(ranks[1:])
            # the measured curve's fixed cost scaled by the links' alphas; a link preset with no latency (alpha 0,
            # allowed) leaves it as measured rather than dividing by zero
            own_alpha = own.latency_us + own.latency_per_rank_us * (p - 1)
            lat = (up.latency_us + up.latency_per_rank_us * (p - 1)) / own_alpha if own_alpha > 0 else 1.0
            bw = up.achievable_GBps / own.achievable_GBps
            line = own.line_rate_GBps * 1e9 * bw
            out.append(((op, p), (c.overhead_us * US * lat, c.eta_mem * line, c.overhead2_us * US * lat,
                                  c.eta_mem2 * line)))
        return tuple(sorted(out))

    # ---- kernel curves ----------------------------------------------------------------------------------
    @property
    def kernels(self) -> KernelSet | None:
        """The runtime's fitted kernel curves on this GPU (docs/models.md §1.1a), or None: scalar efficiencies.
        With ``runtime.kernel_draw`` = i >= 1, the i-th draw of their parameters (models/step/uncertainty.py)."""
        return _kernel_set(self.runtime.kernel_set, self.hardware.name, self.runtime.kernel_draw)

    # ---- constants used by every layout ------------------------------------------------------------------
    @property
    def b_w(self) -> float:
        """Bytes per weight element [B]."""
        return dtype_bytes(self.weight_dtype)

    @property
    def b_kv(self) -> float:
        """Bytes per KV-cache element [B]."""
        return dtype_bytes(self.kv_dtype)

    @property
    def b_a(self) -> float:
        """Bytes per activation element [B]."""
        return dtype_bytes(self.act_dtype)

    @property
    def z_ranks(self) -> float:
        """Expected max of T standard normals (imbalance of random assignment)."""
        return expected_max_std_normal(self.ranks)

    @property
    def usable_B(self) -> float:
        """HBM the runtime may use per rank [B]: ``usable_hbm_fraction`` of the total (with
        ``memory_fraction_of`` "free" the rank's whole HBM: the fraction then applies to what is left for the
        KV cache, :meth:`kv_budget_B`; with "static" SGLang's static share, weights and KV pool:
        :attr:`mem_fraction_static` of the memory free before the weights load)."""
        rule = self.runtime.memory_fraction_of
        if rule == "free":
            return self.hardware.hbm_GiB * GiB
        if rule == "static":
            return self.mem_fraction_static * (self.hardware.hbm_GiB - SGLANG_PRELOAD_GiB) * GiB
        return self.runtime.usable_hbm_fraction * self.hardware.hbm_GiB * GiB

    @property
    def mem_fraction_static(self) -> float:
        """SGLang's ``mem_fraction_static`` of this deployment: the runtime's ``usable_hbm_fraction``, or when it is
        0 SGLang's own default for this GPU and TP (:func:`sglang_mem_fraction_static`)."""
        f = self.runtime.usable_hbm_fraction
        if f > 0:
            return f
        return sglang_mem_fraction_static(self.hardware.hbm_GiB, self.ranks, mla=self.model.attention == "mla")

    def kv_budget_B(self, weights_B, activations_B):
        """Bytes the KV cache may hold per rank [B] beside ``weights_B`` and ``activations_B`` (arrays
        broadcast), by the runtime's memory rule: with ``memory_fraction_of`` "total" what ``usable_hbm_fraction``
        of HBM leaves after weights, activations and reserve (vLLM ``gpu_memory_utilization``); with "free" that
        fraction of the HBM left after them (TensorRT-LLM ``free_gpu_memory_fraction``, of the memory free
        after the model loaded and a profiling run); with "static" SGLang's rule, the static share less the
        weights (``KV = mem_fraction_static x memory free before loading - weights``,
        mem_cache/kv_cache_configurator.py ``_profile_available_bytes`` at sgl-project/sglang 003fca80).
        Negative: nothing fits."""
        rule = self.runtime.memory_fraction_of
        if rule == "free":
            left = self.usable_B - weights_B - activations_B - self.reserve_B
            return np.where(left > 0, self.runtime.usable_hbm_fraction * left, left)
        if rule == "static":  # SGLang: the static share holds weights and KV; activations live in the rest
            return self.usable_B - np.asarray(weights_B, dtype=float) + np.zeros(np.shape(activations_B))
        return self.usable_B - weights_B - activations_B - self.reserve_B

    @property
    def reserve_B(self) -> float:
        """Runtime reserve per rank (CUDA context, NCCL buffers, graphs) [B]."""
        return self.runtime.reserve_GiB * GiB

    def label(self) -> str:
        return (f"{self.model.label} on {self.ranks}x {self.hardware.label}, weights {self.weight_dtype}, "
                f"KV {self.kv_dtype}" + (f", sampler {self.sampler}" if self.sampler != "fused" else ""))

    # ---- weights (independent of batch and context) --------------------------------------------------------
    def check_layout(self, layout: str) -> None:
        """SpecError unless ``layout`` is one of :data:`LAYOUTS` and this deployment can run it. Only an
        all-to-all deployment may have ranks that do not divide the heads (its shared expert and, with
        ``dp_dense``, its dense FFN are whole on every rank too), and it runs only as DPA: the other layouts shard
        heads or those weights over the ranks."""
        check_layout(layout)
        if layout == "DPA":
            return
        m, T = self.model, self.ranks
        for what, n in _sharded_sizes(m):
            if n % T:
                raise SpecError(f"layout {layout} needs ranks ({T}) to divide the {what} of {m.name} ({n}); this "
                                f"deployment (all-to-all dispatch or dp_dense) runs only as DPA")

    def attn_params_per_rank(self, layout: str) -> float:
        """Attention parameters held per rank per layer (projections only)."""
        self.check_layout(layout)
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
        """Weights per rank [B], by part: attention, FFN/MoE, embeddings + LM head, norms + router. DPA with
        all-to-all dispatch keeps a whole shared expert on every rank and (experts + moe_redundant) / ranks
        routed slots; ``dp_dense`` / ``dp_lm_head`` keep whole dense FFNs / embedding and LM head (DPA only)."""
        m, T = self.model, self.ranks
        dpa = layout == "DPA"
        attn = m.layers * self.attn_params_per_rank(layout) * self.b_w
        ffn = m.dense_layers * m.ffn_params_dense_layer / (1 if dpa and self.dp_dense else T) * self.b_w
        if m.is_moe:
            a2a = dpa and self.moe_dispatch == "alltoall"
            experts = ((m.routed_experts + self.moe_redundant) / T
                       + m.shared_experts / (1 if a2a else T)) * m.expert_params
            ffn += m.moe_layers * (experts * self.b_w + m.router_params * EMB_BYTES)
        # vocab-parallel embedding and LM head, or replicated (dp_lm_head)
        emb = m.embedding_params / (1 if dpa and self.dp_lm_head else T) * EMB_BYTES
        norms = (m.layers * m.norm_params_per_layer + m.hidden) * EMB_BYTES
        return {"attention": attn, "ffn": ffn, "embedding": emb, "norms": norms}


def _sharded_sizes(m) -> list[tuple[str, int]]:
    """(what, size) of the parts a tensor-parallel layout splits over the ranks, which the ranks must divide:
    the query heads, the dense FFN's intermediate size and the shared expert's."""
    rules = [("query heads", m.heads)]
    if m.dense_layers:
        rules.append(("FFN intermediate size", m.intermediate))
    if m.is_moe and m.shared_experts:
        rules.append(("expert intermediate size", m.moe_intermediate))
    return rules


def resolve_runtime(runtime) -> Runtime:
    """A :class:`~llmexplore.specs.Runtime` from a preset name or a spec (SpecError naming ``runtime`` otherwise)."""
    return presets.resolve("runtime", runtime)


def resolve_deployment(model, gpu, runtime="default", scale_up_link=None, scale_out_link=None):
    """(ModelSpec, Hardware, Runtime, Fabric) from preset names or specs; links default to the GPU's own."""
    m = presets.resolve("models", model)
    hw = presets.resolve("hardware", gpu)
    rt = resolve_runtime(runtime)

    def given(link) -> bool:  # None and "" mean the GPU's own link
        return not (link is None or (isinstance(link, str) and not link))

    up = presets.resolve("links", scale_up_link if given(scale_up_link) else hw.scale_up_link)
    out_name = scale_out_link if given(scale_out_link) else hw.scale_out_link
    out = presets.resolve("links", out_name) if out_name else None
    return m, hw, rt, Fabric(scale_up=up, scale_out=out, gpus_per_node=hw.scale_up_size)


def resolve_speculative(spec):
    """A :class:`~llmexplore.specs.SpecDecode` from a speculative-decoding preset name or a spec (None stays None:
    no speculation); SpecError naming ``speculative`` otherwise."""
    return None if spec is None else presets.resolve("speculative", spec)


def check_layout(layout: str) -> None:
    """SpecError unless ``layout`` is one of :data:`LAYOUTS`."""
    _check.choice("layout", layout, LAYOUTS)


def check_batch_context(batch, context) -> tuple[np.ndarray, np.ndarray]:
    """Validate and convert: batch integers in [1, 2**24], context in [1, 2**30] tokens, broadcasting to at most
    :data:`~llmexplore._check.MAX_GRID_POINTS` points (SpecError otherwise, before anything is allocated)."""
    b = _check.real_array("batch", batch, lo=1, hi=MAX_BATCH, integer=True)
    s = _check.real_array("context", context, lo=1, hi=MAX_CONTEXT)
    _check.grid_size("batch and context", b.shape, s.shape)
    return b, s


# ---- the one kernel pricing ----------------------------------------------------------------------------------
@functools.cache
def _kernel_set(engine: str, gpu: str, draw: int = 0) -> KernelSet | None:
    if not engine:
        return None
    if draw:
        central = _kernel_set(engine, gpu, 0)
        if central is None:
            return None
        curves = {k: perturbed(c, draw, k) for k, c in central.curves.items()}
        return dataclasses.replace(central, curves=curves)
    found = presets.kernel_curves(engine, gpu)
    if found is None:
        return None
    src, rows = found
    fields = {f.name for f in dataclasses.fields(Curve)} - {"source"}
    curves = {k: Curve(**{f: (tuple(tuple(r) for r in v) if f == "cov_u" else v) for f, v in row.items()
                          if f in fields},
                       source=f"data/kernel_efficiency.yaml {engine}/{src}/{k}"
                              + (f" ({row['from_engine']}'s curve)" if row.get("from_engine") else ""))
              for k, row in rows.items()}
    note = "" if src == gpu else f"{gpu} has no kernel measurements: priced with the {src} curves"
    return KernelSet(engine=engine, gpu=src, curves=curves, note=note)


def perturbed(c: Curve, draw: int, key: str) -> Curve:
    """Draw ``draw`` (>= 1) of a curve's parameters: u + L z with L L^T = cov_u (symmetric square root, so a
    singular covariance from pinned parameters is fine) and z ~ N(0, I) seeded by (draw, key): deterministic,
    and independent between curves."""
    if not c.cov_u:
        return c
    cov = np.asarray(c.cov_u, dtype=float)
    w, v = np.linalg.eigh((cov + cov.T) / 2.0)
    root = v * np.sqrt(np.clip(w, 0.0, None))
    seed = [int(draw), zlib.crc32(key.encode())]
    z = np.random.default_rng(seed).standard_normal(len(w))
    return c.with_u(c.u() + root @ z)


@dataclass(frozen=True)
class KernelRates:
    """Achieved throughputs of one kernel class on one deployment."""

    flops_per_s: float  # achieved compute [FLOP/s]
    bytes_per_s: float  # achieved HBM traffic [B/s]
    overhead_s: float  # fixed time per kernel (launch gap, tail) [s]
    knee: float = math.inf  # soft-roofline exponent (inf: the hard max)


def gemm_variant(dep: Deployment, dtype: str) -> str:
    """GEMM kernel variant of a weight dtype: ``block`` for FP8 weights released with block scales
    (DeepSeek-V3's 128x128: DeepGEMM-style kernels), ``plain`` otherwise (BF16, per-tensor FP8, NVFP4)."""
    return "block" if dtype == "fp8" and dep.model.weight_dtype == "fp8" else "plain"


def kernel_curve(dep: Deployment, kind: str, dtype: str | None = None) -> Curve | None:
    """The fitted curve that prices a kernel class on this deployment, or None (scalar efficiencies).

    ``kind``: ``gemm`` / ``grouped_gemm`` (weights of ``dtype``, default the deployment's weight dtype; a DeepEP
    deployment, ``moe_dispatch == "alltoall"``, with block-FP8 weights prices its grouped GEMMs with DeepGEMM's
    curve ``grouped_gemm.deepgemm.fp8`` where the GPU has one: SGLang's DeepEP path, --moe-a2a-backend deepep,
    runs DeepGEMM),
    ``attention`` / ``attention_decode`` / ``attention_prefill`` (KV of the deployment's KV dtype; GQA or MLA
    from the model), ``elementwise`` (the BF16 GEMM curve's bandwidth and overhead). A missing dtype curve
    (e.g. no FP4 data) falls back to the BF16 curve of the class.
    """
    ks = dep.kernels
    if ks is None:
        return None
    if kind in ("gemm", "grouped_gemm", "elementwise"):
        dt = "bf16" if kind == "elementwise" else (dtype or dep.weight_dtype)
        cls = "gemm" if kind == "elementwise" else kind
        if kind == "grouped_gemm" and dep.moe_dispatch == "alltoall" and gemm_variant(dep, dt) == "block":
            deepgemm = ks.get(cls, "deepgemm", dt)  # DeepEP deployments run DeepGEMM's grouped FP8 GEMMs
            if deepgemm is not None:
                return deepgemm
        return ks.get(cls, gemm_variant(dep, dt), dt) or ks.get(cls, "plain", dt) or ks.get(cls, "plain", "bf16")
    cls = "attention_decode" if kind == "attention" else kind
    variant = "mla" if dep.model.is_mla else "gqa"
    kv = dep.kv_dtype if dep.kv_dtype in ("bf16", "fp8") else "bf16"
    return ks.get(cls, variant, kv) or ks.get(cls, variant, "bf16")


#: what each kernel class prices, for the sentence that names the classes without a fitted curve
_CLASS_WORDS = {"gemm": "GEMMs", "grouped_gemm": "MoE grouped GEMMs", "attention_decode": "decode attention",
                "attention_prefill": "prefill attention"}


def unfitted_kernels(dep: Deployment) -> tuple[str, ...]:
    """The kernel classes this deployment runs whose fitted curve is missing on its GPU although its runtime prices
    with curves (``runtime.kernel_set``): they fall back to the runtime's scalar efficiencies, fitted on H100
    (docs/models.md §1.1a). Empty for a scalar runtime (every class scalar by choice) or full coverage. On MI300X
    only the FP8 GEMMs have kernel data (aiter's table), so DeepSeek's MLA decode attention and MoE grouped GEMMs
    are priced this way; the issue-19 held-out SGLang measurements read them 2-5x optimistic."""
    classes = ["gemm", "attention_decode", "attention_prefill"] + (["grouped_gemm"] if dep.model.is_moe else [])
    ks = dep.kernels
    if ks is None:  # a scalar runtime by choice, or a curve runtime with no curves at all on this GPU
        return tuple(classes) if dep.runtime.kernel_set else ()
    return tuple(kind for kind in classes if kernel_curve(dep, kind) is None)


def not_resolved_reason(dep: Deployment) -> str:
    """One sentence saying why this deployment's numbers are not resolved by kernel data ("" when they are): the
    kernel classes :func:`unfitted_kernels` names."""
    missing = unfitted_kernels(dep)
    if not missing:
        return ""
    words = ", ".join(_CLASS_WORDS[k] for k in missing)
    known = (", which real-engine measurements of DeepSeek (MLA + MoE) decode under SGLang on MI300X put 2-5x "
             "optimistic" if dep.model.is_mla and dep.hardware.name.startswith("mi") else
             ", with no kernel-level check there")
    engine = "" if dep.runtime.kernel_set == "any" else f"{dep.runtime.kernel_set} "
    return (f"not resolved: {dep.hardware.name} has no {engine}kernel data for the {words} of "
            f"{dep.model.name}; they are priced with the scalar efficiencies fitted on H100{known}")


def _peak_flops(dep: Deployment, kind: str, dtype: str | None) -> float:
    if kind.startswith("attention"):
        return dep.hardware.bf16_TFLOPS * 1e12  # attention computes in the activations' BF16
    return dep.hardware.peak_TFLOPS(dtype or dep.weight_dtype) * 1e12


def kernel_rates(dep: Deployment, kind: str, dtype: str | None = None) -> KernelRates:
    """Achieved compute and memory throughput of a kernel class (table in the module docstring).

    The single place where a kernel's efficiency is chosen; every step, prefill, mixed iteration and MoE layer
    prices its kernels through it (via :func:`kernel_s`) or reads its rates from it (closed forms that need
    the roofline's coefficients: crossovers, expected maxima over MoE ranks; they use the hard max, i.e. they
    ignore ``knee``). With a runtime ``kernel_set`` the rates are the fitted curve's (:func:`kernel_curve`)
    plus the runtime's ``kernel_overhead_us`` gap between kernels; without, the runtime's scalars.
    """
    _check.choice("kernel class", kind, KERNEL_CLASSES)
    rt, hw = dep.runtime, dep.hardware
    overhead = rt.kernel_overhead_us * US
    bw = hw.hbm_bw_TBps * 1e12
    c = kernel_curve(dep, kind, dtype)
    if c is not None:
        flops = math.inf if kind == "elementwise" else c.eta_compute * _peak_flops(dep, kind, dtype)
        return KernelRates(flops, c.eta_mem * bw, c.overhead_us * US + overhead,
                           math.inf if kind == "elementwise" else c.knee)
    if kind.startswith("attention"):
        return KernelRates(rt.eta_attn_compute * hw.bf16_TFLOPS * 1e12, rt.eta_attn_mem * bw, overhead)
    flops = math.inf if kind == "elementwise" else rt.eta_compute * _peak_flops(dep, kind, dtype)
    return KernelRates(flops, rt.eta_mem * bw, overhead)


def kernel_s(dep: Deployment, kind: str, flops, bytes_, *, dtype: str | None = None) -> np.ndarray:
    """Time of one kernel of class ``kind`` [s] (the soft roofline of its curve, or the hard roofline of the
    runtime's scalars); broadcasts over ``flops`` [FLOP] and ``bytes_`` [B]."""
    r = kernel_rates(dep, kind, dtype)
    return soft_roofline_s(flops, bytes_, r.flops_per_s, r.bytes_per_s, r.overhead_s, r.knee)


def gemm_s(dep: Deployment, m_tokens, k_in, n_out, *, groups: float = 1.0, b_w: float | None = None,
           kind: str = "gemm") -> np.ndarray:
    """Time of ``groups`` (m x k) @ (k x n) GEMMs on one rank [s]. Weights of the deployment's weight dtype,
    or BF16 when ``b_w`` = 2 is given (embeddings, LM head, router); a quantised (FP8/FP4) GEMM reads
    quantised activations and writes BF16 ones (gemm_work)."""
    dtype = "bf16" if b_w is not None and b_w >= 2.0 else dep.weight_dtype
    bw = dep.b_w if b_w is None else b_w
    f, by = gemm_work(m_tokens, n_out, k_in, b_w=bw, b_in=bw if bw < 2.0 else dep.b_a, b_out=dep.b_a)
    return kernel_s(dep, kind, groups * f, groups * by, dtype=dtype)


def moe_s(dep: Deployment, tokens, *, experts: float, topk: float, hidden: float, inter: float,
          moe_tp: float = 1.0, moe_ep: float = 1.0, active=None) -> np.ndarray:
    """Routed-expert time of one MoE layer on one rank [s]: the gate-up and down grouped GEMMs of
    :func:`~.kernels.moe_block_work` (tokens entering the layer on the rank, uniform routing, rows padded to
    the fitted curve's M tile), each half of the block's work. ``active``: expected hit experts on the rank
    for a routing that is not uniform (None: uniform)."""
    c = kernel_curve(dep, "grouped_gemm")
    bw = dep.b_w
    f, by = moe_block_work(tokens, experts, topk, hidden, inter, moe_tp=moe_tp, moe_ep=moe_ep, b_w=bw,
                           b_a=bw if (c is not None and bw < 2.0) else dep.b_a, tile_m=c.tile_m if c else 1,
                           active=active)
    return 2.0 * kernel_s(dep, "grouped_gemm", f / 2.0, by / 2.0)


def elementwise_s(dep: Deployment, bytes_) -> np.ndarray:
    """Time of a memory-bound elementwise kernel (norm, activation) moving ``bytes_`` [B] [s]."""
    return kernel_s(dep, "elementwise", 0.0, bytes_)


def step_overhead_s(dep: Deployment) -> float:
    """Fixed time per step (scheduling, sampling, launch of the step) [s]."""
    return dep.runtime.step_overhead_ms * MS

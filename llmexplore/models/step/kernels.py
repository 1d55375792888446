"""Shape-, dtype-, GPU- and engine-aware kernel times: the kernel-efficiency model (docs/models.md §1.2).

Every kernel class is priced by one *soft roofline*

    t = t0 + (t_c^p + t_m^p)^(1/p),   t_c = F / (eta_c P_dtype),   t_m = M / (eta_m BW_hbm)

with F the kernel's FLOPs and M its HBM bytes, P_dtype the datasheet dense peak of the kernel's input dtype and
BW_hbm the datasheet HBM bandwidth. Four parameters per curve (six for an all-reduce, below), each with a physical reading: ``eta_compute``
(the fraction of peak a large kernel reaches), ``eta_mem`` (the fraction of bandwidth a weight- or KV-streaming
kernel reaches), ``overhead_us`` (launch, prologue and tail: the latency of a tiny kernel) and ``knee`` p (how
sharply the kernel turns from memory- to compute-bound: p -> infinity is the textbook max(), p = 1 adds the two
times, measured kernels sit at p ~ 1-3 because tiles that load and tiles that compute do not overlap perfectly
near the ridge). Grouped (MoE) GEMMs also pad each expert's tokens to the kernel's M tile (``tile_m``), which is
what makes them reach only a few per cent of peak at 8-64 tokens per expert.

The curves are fitted per (engine, GPU, class, variant, dtype) to kernel-level measurements only
(``data/kernels/``, aiconfigurator 0.12.0's per-kernel database) by :mod:`llmexplore.kernelfit`, and stored
with their fit error and parameter covariance in ``data/kernel_efficiency.yaml``. The FLOP and byte counts
below are shared by the fit and the step engine, so a curve is used exactly as it was fitted.

Classes (``CLASSES``) and the work they count, per kernel call on one GPU:

=====================  =====================================================================================
``gemm``               C[m,n] = A[m,k] B[k,n]: F = 2mnk, M = nk b_w + mk b_in + mn b_out
``grouped_gemm``       one routed-MoE block (gate-up and down grouped GEMMs): :func:`moe_block_work`
``attention_decode``   one query token per sequence over a KV cache: :func:`attention_work`
``attention_prefill``  causal flash attention of a prompt chunk: :func:`attention_work`
=====================  =====================================================================================

All functions broadcast over numpy arrays; none import anything beyond numpy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

__all__ = ["CLASSES", "PARAMS", "Curve", "KernelSet", "soft_roofline_s", "gemm_work", "moe_block_work",
           "attention_work", "to_u", "from_u", "PARAM_BOUNDS", "curve_key", "PREFILL_QUERY_TOKENS", "HARD_KNEE"]

CLASSES = ("gemm", "grouped_gemm", "attention_decode", "attention_prefill")
PARAMS = ("eta_compute", "eta_mem", "overhead_us", "knee", "eta_mem2", "overhead2_us")
#: physical range of each parameter (the fit works in an unbounded transform of these)
PARAM_BOUNDS = {"eta_compute": (0.005, 1.0), "eta_mem": (0.005, 1.2), "overhead_us": (0.05, 300.0),
                "knee": (1.0, 16.0), "eta_mem2": (0.005, 1.2), "overhead2_us": (0.05, 300.0)}
#: a knee at or above this is the hard max(): the upper bound of the fit's range, so a curve whose data want a
#: sharp corner gets exactly the textbook roofline (decode attention is pinned there, see kernelfit.FIXED)
HARD_KNEE = 16.0
#: query tokens per sequence from which a step's attention runs the prefill (flash) kernel rather than the
#: decode kernel; speculative decoding (2-8 tokens) still runs decode kernels [modelling choice]
PREFILL_QUERY_TOKENS = 16
#: MLA widths (DeepSeek-V2/V3): latent 512, rope 64, nope 128, v 128 (absorbed decode reads the 576-wide latent)
_MLA_LATENT, _MLA_ROPE, _MLA_NOPE, _MLA_V = 512, 64, 128, 128


def curve_key(cls: str, variant: str, dtype: str) -> str:
    """Key of a curve inside a kernel set: ``"gemm.dense.fp8"``, ``"attention_decode.mla.bf16"``..."""
    return f"{cls}.{variant}.{dtype}"


def to_u(name: str, v) -> np.ndarray:
    """Unbounded fit coordinate of a parameter: logit of its position in ``PARAM_BOUNDS``, log-spaced for the
    overhead."""
    lo, hi = PARAM_BOUNDS[name]
    v = np.asarray(v, dtype=float)
    if name == "overhead_us":
        lo, hi, v = math.log(lo), math.log(hi), np.log(v)
    x = np.clip((v - lo) / (hi - lo), 1e-9, 1 - 1e-9)
    return np.log(x / (1 - x))


def from_u(name: str, u) -> np.ndarray:
    """Inverse of :func:`to_u` (a logistic that cannot overflow)."""
    lo, hi = PARAM_BOUNDS[name]
    u = np.asarray(u, dtype=float)
    z = np.exp(-np.abs(u))
    x = np.where(u >= 0, 1.0 / (1.0 + z), z / (1.0 + z))
    if name == "overhead_us":
        return np.exp(math.log(lo) + (math.log(hi) - math.log(lo)) * x)
    return lo + (hi - lo) * x


@dataclass(frozen=True)
class Curve:
    """One fitted soft roofline (module docstring) with its provenance and measured accuracy.

    ``cov_u`` is the 4x4 covariance of the parameters in the fit coordinates (:func:`to_u`), from a
    bootstrap over whole measured curves (shapes), so correlated residuals along a sweep are not
    counted as independent evidence. ``median_err_pct`` / ``p90_err_pct`` are |predicted / measured - 1| over
    the ``points`` kernel rows the curve was fitted to.
    """

    eta_compute: float
    eta_mem: float
    overhead_us: float
    knee: float
    tile_m: int = 1
    #: a collective's second algorithm (all-reduce: the latency-bound one-shot path is (overhead_us, eta_mem),
    #: the bandwidth-bound two-shot/ring path (overhead2_us, eta_mem2); the engine takes the faster, as the
    #: custom all-reduces of TensorRT-LLM, vLLM and SGLang do by message size); 0 = one path
    eta_mem2: float = 0.0
    overhead2_us: float = 0.0
    points: int = 0
    median_err_pct: float = float("nan")
    p90_err_pct: float = float("nan")
    cov_u: tuple = ()
    source: str = ""

    def u(self) -> np.ndarray:
        """Parameters in the fit coordinates (a single-path curve's unused second path sits at its bound)."""
        return np.array([float(to_u(n, max(getattr(self, n), PARAM_BOUNDS[n][0]))) for n in PARAMS])

    def with_u(self, u) -> "Curve":
        vals = {n: float(from_u(n, x)) for n, x in zip(PARAMS, u)}
        if not self.two_path:  # a single-path curve stays single-path under a draw
            vals.update(eta_mem2=0.0, overhead2_us=0.0)
        return Curve(tile_m=self.tile_m, points=self.points, median_err_pct=self.median_err_pct,
                     p90_err_pct=self.p90_err_pct, cov_u=self.cov_u, source=self.source, **vals)

    @property
    def two_path(self) -> bool:
        """True for a collective with a latency path and a bandwidth path (``eta_mem2`` > 0)."""
        return self.eta_mem2 > 0

    def time_s(self, flops, bytes_, peak_flops_per_s: float, hbm_Bps: float) -> np.ndarray:
        """Kernel time [s] of F = ``flops`` and M = ``bytes_`` on a GPU of the given datasheet peaks (for a
        collective: M its bus bytes and ``hbm_Bps`` the link's line rate)."""
        t = soft_roofline_s(flops, bytes_, self.eta_compute * peak_flops_per_s, self.eta_mem * hbm_Bps,
                            self.overhead_us * 1e-6, self.knee)
        if self.two_path:
            t = np.minimum(t, self.overhead2_us * 1e-6 + np.asarray(bytes_, dtype=float) / (self.eta_mem2 * hbm_Bps))
        return t


@dataclass(frozen=True)
class KernelSet:
    """The curves of one (engine, GPU): ``curves[curve_key(...)]``. ``gpu`` is the GPU the data were
    measured on (it differs from the deployment's GPU when a set is borrowed, e.g. GB200 -> B200 curves)."""

    engine: str
    gpu: str
    curves: dict = field(default_factory=dict)
    note: str = ""

    def get(self, cls: str, variant: str, dtype: str) -> Curve | None:
        """The curve, or None when the set has no data for it (the caller falls back and says so)."""
        return self.curves.get(curve_key(cls, variant, dtype))


def soft_roofline_s(flops, bytes_, flops_per_s: float, bytes_per_s: float, overhead_s: float,
                    knee: float = math.inf) -> np.ndarray:
    """t0 + (t_c^p + t_m^p)^(1/p) [s]; p >= HARD_KNEE (and inf) is the hard roofline max(t_c, t_m). Written as
    max * (1 + (min/max)^p)^(1/p) so that it cannot overflow for any p."""
    tc = np.asarray(flops, dtype=float) / flops_per_s
    tm = np.asarray(bytes_, dtype=float) / bytes_per_s
    hi = np.maximum(tc, tm)
    if knee >= HARD_KNEE * (1 - 1e-6):  # the fit's upper bound stands for the hard max (and keeps closed forms exact)
        return hi + overhead_s
    lo = np.minimum(tc, tm)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(hi > 0, lo / np.where(hi > 0, hi, 1.0), 0.0)
    return hi * (1.0 + ratio**knee) ** (1.0 / knee) + overhead_s


def gemm_work(m, n, k, *, b_w: float, b_in: float, b_out: float = 2.0):
    """(FLOPs, HBM bytes) of C[m,n] = A[m,k] B[k,n] with the weight B streamed once: F = 2mnk,
    M = nk b_w + mk b_in + mn b_out (quantised GEMMs read quantised activations, write BF16)."""
    m, n, k = (np.asarray(x, dtype=float) for x in (m, n, k))
    return 2.0 * m * n * k, n * k * b_w + m * k * b_in + m * n * b_out


def moe_block_work(tokens, experts, topk, hidden, inter, *, moe_tp=1, moe_ep=1, b_w: float, b_a: float = 2.0,
                   tile_m: int = 1, active=None):
    """(FLOPs, HBM bytes) of one routed-MoE block on one GPU, each of its two grouped GEMMs (gate-up, down).

    ``tokens`` enter the layer on the GPU; uniform routing sends tokens x topk / ep token-expert pairs to its
    E / ep experts, of which E/ep (1 - (1 - k/E)^tokens) are hit (docs/models.md §4.4). Each hit expert's rows
    are padded to the kernel's M tile: F = 2 A ceil(m_e / tile) tile 3 H I/tp (gated: gate, up, down), and the
    weights of the hit experts stream once: M = A 3 H (I/tp) b_w + pairs (2H + 3 I/tp) b_a. Returns the work of
    the *whole block*; the engine prices it as two equal kernels (:func:`llmexplore.models.step.engine.moe_s`).
    ``active``: the expected hit experts on the GPU when routing is not uniform (the MoE wing's skewed routing,
    :mod:`llmexplore.models.moe.decode`); None: the uniform-routing count above.
    """
    t = np.asarray(tokens, dtype=float)
    E = np.asarray(experts, dtype=float)
    k = np.asarray(topk, dtype=float)
    I_loc = np.asarray(inter, dtype=float) / moe_tp
    H = np.asarray(hidden, dtype=float)
    pairs = t * k / moe_ep
    if active is None:
        active = E / moe_ep * (1.0 - (1.0 - k / E) ** t)
    active = np.maximum(np.asarray(active, dtype=float), np.minimum(pairs, 1.0))
    with np.errstate(invalid="ignore", divide="ignore"):
        per_expert = np.where(active > 0, pairs / np.where(active > 0, active, 1.0), 0.0)
    padded = np.ceil(per_expert / tile_m) * tile_m if tile_m > 1 else per_expert
    flops = 2.0 * active * padded * 3.0 * H * I_loc
    bytes_ = active * 3.0 * H * I_loc * b_w + pairs * (2.0 * H + 3.0 * I_loc) * b_a
    return flops, bytes_


def attention_work(kind: str, variant: str, *, batch, tokens, heads, kv_heads=1, head_dim=128, b_kv: float = 2.0,
                   b_a: float = 2.0):
    """(FLOPs, HBM bytes) of one attention-core kernel on one GPU (``heads`` query heads on that GPU).

    decode (one query per sequence over ``tokens`` cached tokens):
      GQA  F = 4 b h L d;                 M = b L 2 h_kv d b_kv + 2 b h d b_a
      MLA  F = 2 b h L (2 * 512 + 64);    M = b L 576 b_kv + b h (576 + 512) b_a   (absorbed: latent K and V)
    prefill (causal over a ``tokens``-token prompt, L(L+1)/2 query-key pairs):
      GQA  F = 4 b h d L(L+1)/2;          M = b L (2h + 2 h_kv) d b_a
      MLA  F = 2 b h (192 + 128) L(L+1)/2; M = b L h (192 + 192 + 128 + 128) b_a  (un-absorbed, DeepSeek-V3)
      ``mla_absorbed`` (prefill run as MQA over the latent: one KV head, K 576 and V 512 wide)
           F = 2 b h (576 + 512) L(L+1)/2; M = b L (h (576 + 512) + 576) b_a
    The serving engines run MLA prefill un-absorbed (``mla``); ``mla_absorbed`` is the work of kernel rows that
    were measured in the absorbed form (aiconfigurator's SGLang collector on Hopper, see kernelfit).
    """
    b, L, h = (np.asarray(x, dtype=float) for x in (batch, tokens, heads))
    kvh, d = np.asarray(kv_heads, dtype=float), np.asarray(head_dim, dtype=float)
    lat = _MLA_LATENT + _MLA_ROPE
    if kind == "decode":
        if variant == "mla":
            return 2.0 * b * h * L * (2 * _MLA_LATENT + _MLA_ROPE), b * L * lat * b_kv + b * h * (lat + _MLA_LATENT) * b_a
        return 4.0 * b * h * L * d, b * L * 2.0 * kvh * d * b_kv + 2.0 * b * h * d * b_a
    pairs = L * (L + 1.0) / 2.0
    if variant == "mla_absorbed":  # one latent KV head of 576 (K) / 512 (V) shared by all h query heads
        return (2.0 * b * h * (lat + _MLA_LATENT) * pairs,
                b * L * (h * (lat + _MLA_LATENT) + lat) * b_a)
    if variant == "mla":
        qk = _MLA_NOPE + _MLA_ROPE
        return 2.0 * b * h * (qk + _MLA_V) * pairs, b * L * h * (2 * qk + 2 * _MLA_V) * b_a
    return 4.0 * b * h * d * pairs, b * L * (2.0 * h + 2.0 * kvh) * d * b_a

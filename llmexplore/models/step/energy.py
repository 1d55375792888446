"""Board energy of forward steps and of served requests: an energy roofline (docs/models.md §8.7).

A GPU's board power (what NVML reports and the ML.ENERGY leaderboard integrates) is modelled as a static part
while resident plus a dynamic part proportional to the work done, the energy roofline of Choi, Bedard, Fowler
and Vuduc ("A Roofline Model of Energy", IPDPS 2013)::

    E(step) = min(G * P_tdp * t,  G * P_idle * t + e_flop * F + e_byte * M)

over the G GPUs of an instance for a step of t seconds that does F FLOPs and moves M HBM bytes. The two energies
per unit of work come from kernel-level anchors of the power preset (:class:`~llmexplore.specs.GpuPower`), not
from any end-to-end measurement:

* ``e_flop = (P_tdp - P_idle) / R_gemm``: a dense GEMM at the GPU's best achieved rate R_gemm (the fitted GEMM
  curve's asymptote at the weight dtype, :func:`~.engine.kernel_rates`) runs at the power limit; an FP8 FLOP
  therefore costs half a BF16 one on Hopper;
* ``e_byte = (P_mem - P_idle) / R_hbm``: a kernel streaming HBM at its achieved bandwidth R_hbm (the same
  curve's memory asymptote) draws ``memory_bound_W``.

The cap at ``P_tdp`` is the power limit: a step whose work would need more runs throttled, and the kernel curves
it is timed by were measured throttled.

Served energy per request (:func:`request_energy_J`) adds the idle power of every GPU over the time each request
occupies its share of the pools (G_total / rate) to the dynamic energy of its prefill and its share of the decode
steps it is in (osl steps at the mean batch). Per output token is what ML.ENERGY reports (prefill included).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...specs import GpuPower
from .decode import _kv_layer_bytes_per_token
from .engine import Deployment, kernel_rates
from .prefill import body_params_active, prefill_flops

__all__ = ["EnergyRates", "energy_rates", "decode_work", "prefill_work", "step_energy_J", "dynamic_J",
           "request_energy_J"]


@dataclass(frozen=True)
class EnergyRates:
    """One GPU type's energy roofline at a deployment's dtypes: static power and energy per unit of work."""

    idle_W: float  # board power while resident [W]
    tdp_W: float  # board power limit [W]
    J_per_flop: float  # dynamic energy per FLOP at the weight dtype's GEMM rate [J/FLOP]
    J_per_byte: float  # dynamic energy per HBM byte [J/B]


def energy_rates(dep: Deployment, power: GpuPower) -> EnergyRates:
    """The energy roofline of ``dep``'s GPU at its weight dtype (module docstring)."""
    r = kernel_rates(dep, "gemm", dep.weight_dtype)
    dyn_c = power.tdp_W - power.idle_W
    dyn_m = power.memory_bound_W - power.idle_W
    return EnergyRates(power.idle_W, power.tdp_W, dyn_c / r.flops_per_s, dyn_m / r.bytes_per_s)


def _experts_touched(m, tokens) -> np.ndarray:
    """Expected share of an MoE layer's routed experts that ``tokens`` tokens touch under uniform routing:
    1 - (1 - k/E)^n (each token picks k of E)."""
    n = np.asarray(tokens, float)
    return 1.0 - (1.0 - m.experts_per_token / m.routed_experts) ** n


def _weights_read_B(dep: Deployment, layout: str, tokens) -> np.ndarray:
    """HBM bytes of weights all ranks of an instance read in one forward pass over ``tokens`` tokens [B]: every
    rank's copy (replicated parts are read on every rank), the routed experts only where a token goes."""
    m, T = dep.model, dep.ranks
    w = dep.weight_bytes(layout)
    dense = (w["attention"] + w["embedding"] + w["norms"]) * T
    ffn = np.full(np.shape(tokens), w["ffn"] * T, float)
    if m.is_moe:
        routed = m.moe_layers * m.routed_experts * m.expert_params * dep.b_w
        ffn = ffn - routed + routed * _experts_touched(m, tokens)
    return dense + ffn


def decode_work(dep: Deployment, layout: str, batch, context, q_tokens: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(FLOPs, HBM bytes) of one decode step of the whole instance: ``batch`` sequences of ``context`` tokens, each
    with ``q_tokens`` query tokens (k + 1 in a speculative verify pass). FLOPs: 2 x active matmul parameters +
    LM head per token, plus attention's 2 x (d_qk + d_v) x heads per cached layer-token; bytes: the weights read
    (:func:`_weights_read_B`) and the batch's KV cache on every rank that holds it."""
    m = dep.model
    b = np.asarray(batch, float)
    s = np.asarray(context, float)
    n = b * q_tokens
    per_pair = m.heads * (m.qk_head_dim + m.o_head_dim)
    flops = n * (2.0 * body_params_active(m) + 2.0 * m.vocab * m.hidden) + 2.0 * n * per_pair * m.kv_layer_tokens(s)
    # every rank reads the KV it holds: a TP rank its heads' share (or a replica: MLA, fewer KV heads than
    # ranks), a CP rank its pages, a DPA/DOP rank its own sequences
    per_layer_token = _kv_layer_bytes_per_token(dep, layout) * (dep.ranks if layout == "TP" else 1)
    return flops, _weights_read_B(dep, layout, n) + b * m.kv_layer_tokens(s) * per_layer_token


def prefill_work(dep: Deployment, prompt_tokens) -> tuple[np.ndarray, np.ndarray]:
    """(FLOPs, HBM bytes) of one prompt's prefill on a TP instance: :func:`~.prefill.prefill_flops`; the weights
    read once (every expert touched by a long prompt) and the prompt's KV written."""
    s = np.asarray(prompt_tokens, float)
    return prefill_flops(dep.model, s), _weights_read_B(dep, "TP", s) + dep.model.kv_bytes_per_sequence(
        s, dep.kv_dtype)


def step_energy_J(rates: EnergyRates, gpus: float, seconds, flops, bytes_) -> np.ndarray:
    """Board energy of ``gpus`` GPUs over a step of ``seconds`` doing ``flops`` and moving ``bytes_`` [J]:
    static plus dynamic, at most the power limit (module docstring). Broadcasts."""
    t = np.asarray(seconds, float)
    work = rates.J_per_flop * np.asarray(flops, float) + rates.J_per_byte * np.asarray(bytes_, float)
    return gpus * rates.idle_W * t + np.minimum(work, gpus * (rates.tdp_W - rates.idle_W) * t)


def dynamic_J(rates: EnergyRates, gpus: float, seconds, flops, bytes_) -> np.ndarray:
    """The dynamic part of :func:`step_energy_J` (above idle) [J]."""
    return step_energy_J(rates, gpus, seconds, flops, bytes_) - gpus * rates.idle_W * np.asarray(seconds, float)


def request_energy_J(idle_W_total: float, rate_per_s, prefill_dynamic_J, decode_step_dynamic_J, mean_batch,
                     output_tokens: float, tokens_per_step: float = 1.0) -> np.ndarray:
    """Board energy per request of a served deployment [J]: the idle power of all its GPUs (``idle_W_total``,
    summed over pools) over the time one request's share of them lasts (1 / ``rate_per_s``), plus its prefill's
    dynamic energy, plus its share of the decode steps it runs in (``output_tokens`` / ``tokens_per_step`` steps
    at ``mean_batch`` sequences; ``tokens_per_step`` is the accepted length tau of speculative decoding)."""
    lam = np.asarray(rate_per_s, float)
    steps = output_tokens / tokens_per_step
    return (idle_W_total / lam + np.asarray(prefill_dynamic_J, float)
            + steps * np.asarray(decode_step_dynamic_J, float) / np.maximum(np.asarray(mean_batch, float), 1.0))

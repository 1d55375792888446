"""The MoE all-to-all of :mod:`.decode` (docs/models.md §4.8): dispatch and combine payloads, the busiest EP
rank's time per byte over the scale-up and scale-out legs, its latency, and DeepEP's measured low-latency
kernel curves. ``md`` is a :class:`~.decode.MoEDeployment` throughout (read for its fabric, EP size, ranks per
node, hardware and runtime; not imported, so the step imports this module and not the other way round).

Each token is sent to every *distinct* remote EP rank among its picks (``dispatch="rank"``; DeepEP
normal kernels) or once per remote pick (``dispatch="expert"``; DeepEP low-latency kernels, whose
published bandwidths equal tokens x k x bytes / latency). Dispatch sends FP8 with 1x128 scales
(H + 4H/128 B per token), combine BF16 (2H). Per GPU the intra-node leg uses the scale-up link, the
inter-node leg the GPU's own NIC, the two legs overlap (DeepEP forwarding) and the busiest rank (send or
receive, expected bytes) sets the time; alpha as :func:`..step.collectives.alltoall_s`. Low-latency dispatch of a
DPA + EP deployment (tp = 1) on a GPU with measured kernel curves (:func:`..step.collectives.deepep_ll_params`:
H100, H200, B200, GB200) is instead a + N_loc k bytes x rho / B, rho the busiest rank's all-to-all time
per byte over that of uniform routing (1 without skew), a and B the kernels' fitted latency and bandwidth.
"""

from __future__ import annotations

import numpy as np

from ...measured import DEEPEP_LL_OPS
from ..step.collectives import alpha_s, deepep_ll_params, fp8_dispatch_bytes

__all__ = ["dispatch_bytes_per_token", "combine_bytes_per_token", "unit_s", "alpha_s_of", "low_latency_curves"]


# ---- payloads ---------------------------------------------------------------------------
def dispatch_bytes_per_token(hidden: int, *, scale_block: int = 128) -> int:
    """FP8 dispatch payload per token and destination [B]: H bytes + one FP32 scale per 1x128 block.

    H + 4 ceil(H/128): DeepSeek-V3 (H = 7168): 7,392 B (DeepEP FP8 dispatch, docs/models.md §4.8).
    """
    return fp8_dispatch_bytes(hidden, scale_block=scale_block)


def combine_bytes_per_token(hidden: int) -> int:
    """BF16 combine payload per token and source [B]: 2H (DeepSeek-V3: 14,336 B)."""
    return 2 * int(hidden)


# ---- the busiest rank ---------------------------------------------------------------------------------------
def unit_s(md, u: np.ndarray) -> np.ndarray:
    """Bandwidth time of an all-to-all per token per byte, busiest rank; u [..., R] messages per token to r.

    Rank r (node r // ranks_per_node) sends N_loc u_s to every other rank s and receives N_loc u_r from every
    other rank; the intra-node leg uses the scale-up link, the inter-node leg the GPU's NIC; legs overlap.
    """
    R, Rn = md.ep, md.ranks_per_node
    nodes = R // Rn
    up = md.fabric.scale_up.achievable_GBps * 1e9
    node_sum = u.reshape(u.shape[:-1] + (nodes, Rn)).sum(-1)
    own = np.repeat(node_sum, Rn, axis=-1)
    intra = np.maximum(own - u, (Rn - 1) * u) / up
    if nodes > 1:
        out = md.fabric.scale_out.achievable_GBps * 1e9
        inter = np.maximum(u.sum(-1, keepdims=True) - own, (R - Rn) * u) / out
        intra = np.maximum(intra, inter)
    return intra.max(-1)


def alpha_s_of(md) -> float:
    Rn = md.ranks_per_node
    nodes = md.ep // Rn
    a = alpha_s(Rn, md.fabric.scale_up)
    if nodes > 1:
        a += alpha_s(nodes, md.fabric.scale_out)
    return a


def low_latency_curves(md):
    """((a, B) dispatch, (a, B) combine) of DeepEP's low-latency kernels for a DPA + EP deployment (tp = 1, one
    GPU per EP rank, as the kernels were measured), or None: TP x EP groups, or a GPU without measured curves,
    keep the link-based all-to-all."""
    if md.tp != 1:
        return None
    draw = md.runtime.kernel_draw
    ab = [deepep_ll_params(md.hardware.name, op, md.ep, md.fabric, draw) for op in DEEPEP_LL_OPS]
    return None if any(x is None for x in ab) else tuple(ab)

"""KV transfer planning between prefill and decode ranks with different TP/DP layouts (a real component).

Which prefill rank sends which byte ranges of which KV (or state) buffer to each decode rank, as plans and wire
frames that interoperate with the version-1 protocol of serving runtimes such as TokenSpeed
(:mod:`.layout`, :mod:`.planner`, :mod:`.wire`), and what this area adds: plans built from a model preset
(:mod:`.buffers`), their cost over an interconnect (:mod:`.cost`) and a byte-exact round-trip check that applies
a plan to synthetic pages with numpy (:mod:`.roundtrip`). Pure Python and numpy; no plotting.
"""

from __future__ import annotations

from ..errors import UnsupportedPDLayoutError
from .layout import BufferKind, BufferLayout, ParallelLayout, RankTransferPlan, TransferFragment
from .planner import PDTransferPlanner
from .wire import TRANSFER_PLAN_PROTOCOL_VERSION, decode_transfer_fragments, encode_transfer_fragments

__all__ = ["ParallelLayout", "BufferKind", "BufferLayout", "TransferFragment", "RankTransferPlan",
           "PDTransferPlanner", "encode_transfer_fragments", "decode_transfer_fragments",
           "UnsupportedPDLayoutError", "TRANSFER_PLAN_PROTOCOL_VERSION"]

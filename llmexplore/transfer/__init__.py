"""KV transfer planning between prefill and decode ranks with different TP/DP layouts (a real component).

Which prefill rank sends which byte ranges of which KV (or state) buffer to each decode rank, as plans and wire
frames that interoperate with the version-1 protocol of serving runtimes such as TokenSpeed
(:mod:`.layout`, :mod:`.planner`, :mod:`.wire`), and what this area adds: pipeline stages on either side, each
prefill stage sending its own layers to the decode stage(s) that hold them (:mod:`.pipeline`), plans built from a
model preset with a speculative draft's KV and hidden state (:mod:`.buffers`), their cost over an interconnect
(:mod:`.cost`) and a byte-exact round-trip check that applies a plan to synthetic pages with numpy, layer by layer
with stages (:mod:`.roundtrip`). Pure Python and numpy; no plotting.
"""

from __future__ import annotations

from ..errors import UnsupportedPDLayoutError
from .layout import BufferKind, BufferLayout, ParallelLayout, RankTransferPlan, TransferFragment
from .pipeline import LayerFragment, PipelineTransferPlanner
from .planner import PDTransferPlanner
from .wire import TRANSFER_PLAN_PROTOCOL_VERSION, decode_transfer_fragments, encode_transfer_fragments

__all__ = ["ParallelLayout", "BufferKind", "BufferLayout", "TransferFragment", "RankTransferPlan",
           "PDTransferPlanner", "PipelineTransferPlanner", "LayerFragment", "encode_transfer_fragments",
           "decode_transfer_fragments", "UnsupportedPDLayoutError", "TRANSFER_PLAN_PROTOCOL_VERSION"]

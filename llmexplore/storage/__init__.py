"""KV-cache offload on real files (a real component, like :mod:`llmexplore.transfer`).

* :mod:`.blocks`: a block store, blocks named by their hash chain, written atomically, each with a checksum;
  a missing, short or corrupted block is a miss, never wrong data.
* :mod:`.reader`: a staging reader, O_DIRECT into aligned buffers through a bounded thread pool, at most
  ``max_inflight`` reads in flight and ``budget_bytes`` of buffers (backpressure), verified before use.
* :mod:`.calibrate`: measure a directory's read bandwidth and latency with the reader and save them as a
  storage preset (``llmexplore calibrate-disk``).
* :mod:`.replay`: a trace of requests with shared prefixes against a real store: the gate of
  :mod:`llmexplore.models.offload.cost` decides load or recompute, the reader really loads, measured next to modelled.

Layer 1: numpy and the standard library (no pandas); the sweeps layer tabulates.
"""

from __future__ import annotations

from .blocks import BlockStore, chain_keys
from .reader import StagingReader
from .reads import DirectIOFallbackWarning, RangeFile, Staged, direct_io_supported

__all__ = ["BlockStore", "chain_keys", "StagingReader", "Staged", "RangeFile", "DirectIOFallbackWarning",
           "direct_io_supported"]

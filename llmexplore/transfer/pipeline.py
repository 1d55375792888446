"""Pipeline stages on either side of a transfer plan: which prefill stage sends which layers to which decode stage.

A side of ``pp`` pipeline stages runs its layers in ``pp`` contiguous ranges, each stage on its own ``dp x tp``
ranks with the same TP/DP layout (:class:`~.layout.ParallelLayout` describes one stage). A prefill rank holds the
KV of its stage's layers only, so it sends them to the decode ranks of the stage(s) whose layer range meets its
own, and nowhere else. The rules, as TensorRT-LLM's cache transceiver applies them
(``cpp/tensorrt_llm/executor/cache_transmission/cacheSplitConcat.cu``, ``TargetRanksInfoForDP``, NVIDIA/TensorRT-LLM
a2b02652: a peer PP rank is a target iff ``selfStart < peerEnd && selfEnd > peerStart``, and it sends
``min(peerEnd, selfEnd) - max(peerStart, selfStart)`` layers; the per-target layer counts must add up to the stage's
layers):

* **Stages.** Stage s of a side holds layers ``[lo_s, hi_s)``, contiguous, balanced to within one layer with the
  first stages taking the remainder (:func:`llmexplore.models.step.pipeline.stage_layers`). Draft layers
  (speculative decoding: an MTP module or an EAGLE head, one decoder layer with KV of its own) come after the
  target's L layers, on the last stage of each side: SGLang appends the draft pool's buffers after the target's
  (``disaggregation/prefill.py`` ``_init_kv_manager``: "We should also transfer draft model kv cache"), and the
  draft runs where the last hidden state is.
* **Ranks.** Global rank = stage x (dp x tp) + dp_group x tp + tp_rank, stage-major, as TensorRT-LLM numbers them
  (``irank = ppRank * tpNum + tpRank``).
* **Pairs.** Decode rank R of stage b receives, from every prefill stage a whose layers meet b's, the version-1
  plan between the two stages' local ranks (:class:`~.planner.PDTransferPlanner`: the TP/DP rules are the same
  in every stage) for the layers ``[max(lo_a, lo_b), min(hi_a, hi_b))``. With equal PP on both sides stage i
  talks only to stage i; with 2 -> 3 stages over 80 layers (40 + 40 -> 27 + 27 + 26), prefill stage 0 (layers
  0-39) feeds decode stage 0 (0-26) and decode stage 1 (27-39 of its 27-53), and prefill stage 1 (40-79) decode
  stage 1 (40-53) and decode stage 2 (54-79).
* **Fragments gain a layer range.** A :class:`LayerFragment` is a version-1 fragment between global ranks and the
  layers ``[layer_start, layer_end)`` it is repeated for. On the wire each stage pair is a version-1 plan of
  local ranks (:attr:`StagePlan.fragments`); its layer range travels beside it, as SGLang slices its per-layer
  pointer lists by ``prefill_start_layer`` (``common/conn.py`` ``get_mha_kv_ptrs_with_pp``) and TensorRT-LLM
  sizes each target's buffer by its layer count.
* **Fan-out** of a prefill rank: the decode ranks, over every decode stage it feeds, whose plans draw from it.

What engines accept (2026): TensorRT-LLM any PP on either side (the rule above); SGLang a decode PP equal to the
prefill's or 1 (``common/conn.py``: "Decode pp size should be equal to prefill pp size or 1", the decode stage
then waits for every prefill stage); vLLM's NIXL push connector a pipelined prefill into a decode without PP
(vllm-project/vllm#45880: "each P pipeline stage writes only its own layers into the matching sub-range of D's
region list"). This module plans every combination, as TensorRT-LLM does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from .._check import shown
from ..errors import UnsupportedPDLayoutError
from .layout import MAX_WORLD, TransferFragment
from .planner import PDTransferPlanner

__all__ = ["LayerFragment", "StagePair", "StagePlan", "PipelineRankPlan", "PipelineTransferPlanner",
           "layer_ranges", "stage_overlaps", "MAX_PIPELINE_LAYERS"]

#: most layers (target and draft) a pipelined plan may span
MAX_PIPELINE_LAYERS = 1 << 16


def layer_ranges(counts: Iterable[int]) -> tuple[tuple[int, int], ...]:
    """``[lo, hi)`` of each stage from its layer count, contiguous from layer 0."""
    out, lo = [], 0
    for n in counts:
        out.append((lo, lo + int(n)))
        lo += int(n)
    return tuple(out)


@dataclass(frozen=True)
class StagePair:
    """A prefill stage and a decode stage that share the layers ``[layer_start, layer_end)``."""

    prefill_stage: int
    decode_stage: int
    layer_start: int
    layer_end: int

    @property
    def layers(self) -> int:
        return self.layer_end - self.layer_start


def stage_overlaps(prefill_counts: Iterable[int], decode_counts: Iterable[int]) -> tuple[StagePair, ...]:
    """Every (prefill stage, decode stage) pair whose layer ranges meet, with the layers they share, in prefill
    stage order then decode stage order (TensorRT-LLM's ``TargetRanksInfoForDP`` rule, module docstring)."""
    pr, dr = layer_ranges(prefill_counts), layer_ranges(decode_counts)
    out = []
    for a, (plo, phi) in enumerate(pr):
        for b, (dlo, dhi) in enumerate(dr):
            if plo < dhi and phi > dlo:
                out.append(StagePair(a, b, max(plo, dlo), min(phi, dhi)))
    return tuple(out)


@dataclass(frozen=True)
class LayerFragment:
    """A version-1 fragment (:class:`~.layout.TransferFragment`, global ranks of each side's pipeline) copied
    for every layer in ``[layer_start, layer_end)``: the same byte ranges of that layer's page items."""

    fragment: TransferFragment
    layer_start: int
    layer_end: int

    @property
    def layers(self) -> int:
        return self.layer_end - self.layer_start

    @property
    def src_rank(self) -> int:
        return self.fragment.src_rank

    @property
    def dst_rank(self) -> int:
        return self.fragment.dst_rank

    @property
    def buffer_index(self) -> int:
        return self.fragment.buffer_index

    @property
    def bytes_per_page(self) -> int:
        return self.fragment.bytes_per_page


@dataclass(frozen=True)
class StagePlan:
    """What one decode rank receives from one prefill stage: the layers ``[layer_start, layer_end)`` and the
    version-1 fragments between the two stages' local ranks (``fragments``, the explicit form; what travels
    in that stage pair's wire frames)."""

    prefill_stage: int
    layer_start: int
    layer_end: int
    fragments: tuple[TransferFragment, ...]


@dataclass(frozen=True)
class PipelineRankPlan:
    """What decode rank ``decode_rank`` (global, of stage ``decode_stage``) receives for one request.

    ``plan_kind`` is the version-1 kind of its stage-local plan (identity: whole items from the same-position rank
    of each prefill stage it meets); ``target_prefill_ranks`` the global prefill ranks that send (ascending,
    stage-major; ``required_prefill_response_num`` of them); ``fragments`` every layer fragment, ascending
    prefill rank and buffer order within a rank; ``required_dst_info_num_by_prefill_rank`` the fan-out of each
    source; ``stage_plans`` the per-stage-pair version-1 fragments."""

    decode_rank: int
    decode_stage: int
    plan_kind: str
    target_dp_group: int
    target_prefill_ranks: tuple[int, ...]
    required_prefill_response_num: int
    fragments: tuple[LayerFragment, ...]
    required_dst_info_num_by_prefill_rank: dict
    stage_plans: tuple[StagePlan, ...]

    @property
    def fragments_by_prefill_rank(self) -> dict[int, tuple[LayerFragment, ...]]:
        out: dict[int, list[LayerFragment]] = {}
        for f in self.fragments:
            out.setdefault(f.src_rank, []).append(f)
        return {p: tuple(fs) for p, fs in out.items()}


def _counts(name: str, value: Any) -> tuple[int, ...]:
    try:
        out = tuple(value)
    except TypeError:
        raise UnsupportedPDLayoutError(f"{name} must be a sequence of layer counts, got {shown(value)}") from None
    if not out:
        raise UnsupportedPDLayoutError(f"{name} must hold at least one stage, got none")
    for i, n in enumerate(out):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= MAX_PIPELINE_LAYERS:
            raise UnsupportedPDLayoutError(f"{name}[{i}] must be an integer in [1, {MAX_PIPELINE_LAYERS:,}] (every "
                                           f"stage holds at least one layer), got {shown(n)}")
    return tuple(int(n) for n in out)


class PipelineTransferPlanner:
    """Plans of a prefill pipeline into a decode pipeline (module docstring for the rules).

    Parameters
    ----------
    stage_planner : the version-1 planner of one stage pair (both sides' per-stage TP/DP layouts and buffers).
    prefill_stage_layers, decode_stage_layers : layers per stage of each side (target and draft layers
        together); both must add up to the same total.
    buffer_layers : per buffer position of ``stage_planner``, the ``(lo, hi)`` layers it stands for (the
        target's K/V: ``(0, L)``; a draft's: ``(L, L + D)``).
    """

    def __init__(self, stage_planner: PDTransferPlanner, *, prefill_stage_layers, decode_stage_layers,
                 buffer_layers):
        if not isinstance(stage_planner, PDTransferPlanner):
            raise UnsupportedPDLayoutError(f"stage_planner must be a PDTransferPlanner, got {shown(stage_planner)}")
        self.stage_planner = stage_planner
        self.prefill_stage_layers = _counts("prefill_stage_layers", prefill_stage_layers)
        self.decode_stage_layers = _counts("decode_stage_layers", decode_stage_layers)
        total_p, total_d = sum(self.prefill_stage_layers), sum(self.decode_stage_layers)
        if total_p != total_d:
            raise UnsupportedPDLayoutError(f"decode_stage_layers must add up to the prefill's {total_p} layers, got "
                                           f"{total_d}")
        self.layers = total_p
        n_buf = len(stage_planner.prefill_buffers)
        try:
            ranges = tuple((int(lo), int(hi)) for lo, hi in buffer_layers)
        except (TypeError, ValueError):
            raise UnsupportedPDLayoutError(f"buffer_layers must be a sequence of (lo, hi) layer ranges, got "
                                           f"{shown(buffer_layers)}") from None
        if len(ranges) != n_buf:
            raise UnsupportedPDLayoutError(f"buffer_layers must give one layer range per buffer ({n_buf}), got "
                                           f"{len(ranges)}")
        for i, (lo, hi) in enumerate(ranges):
            if not 0 <= lo < hi <= total_p:
                raise UnsupportedPDLayoutError(f"buffer_layers[{i}] must be a non-empty range inside [0, {total_p}), "
                                               f"got ({lo}, {hi})")
        self.buffer_layers = ranges
        for side, counts, layout in (("prefill", self.prefill_stage_layers, stage_planner.prefill_layout),
                                     ("decode", self.decode_stage_layers, stage_planner.decode_layout)):
            if len(counts) * layout.world_size > MAX_WORLD:
                raise UnsupportedPDLayoutError(
                    f"{side} stages x ranks per stage must be at most {MAX_WORLD:,} ranks, got {len(counts)} x "
                    f"{layout.world_size:,} = {len(counts) * layout.world_size:,}")
        self.prefill_ranges = layer_ranges(self.prefill_stage_layers)
        self.decode_ranges = layer_ranges(self.decode_stage_layers)
        self.pairs = stage_overlaps(self.prefill_stage_layers, self.decode_stage_layers)
        self._pos = {b.buffer_index: i for i, b in enumerate(stage_planner.prefill_buffers)}
        self._plans: dict[tuple[int, int | None], PipelineRankPlan] = {}
        self._fan = self._stage_fanout()

    # ---- sizes -----------------------------------------------------------------------------------------------
    @property
    def prefill_pp(self) -> int:
        return len(self.prefill_stage_layers)

    @property
    def decode_pp(self) -> int:
        return len(self.decode_stage_layers)

    @property
    def prefill_stage_world(self) -> int:
        """Ranks of one prefill stage (dp x tp)."""
        return self.stage_planner.prefill_layout.world_size

    @property
    def decode_stage_world(self) -> int:
        return self.stage_planner.decode_layout.world_size

    @property
    def prefill_world(self) -> int:
        return self.prefill_pp * self.prefill_stage_world

    @property
    def decode_world(self) -> int:
        return self.decode_pp * self.decode_stage_world

    def prefill_stage_of(self, rank: int) -> int:
        return int(rank) // self.prefill_stage_world

    def decode_stage_of(self, rank: int) -> int:
        return int(rank) // self.decode_stage_world

    def pair_buffers(self, pair: StagePair) -> tuple[tuple[int, int, int], ...]:
        """(buffer position, lo, hi) of every buffer the pair carries, with the layers it carries it for."""
        out = []
        for pos, (blo, bhi) in enumerate(self.buffer_layers):
            lo, hi = max(pair.layer_start, blo), min(pair.layer_end, bhi)
            if lo < hi:
                out.append((pos, lo, hi))
        return tuple(out)

    def _stage_fanout(self) -> dict[int, list[int]]:
        """Per prefill stage, per prefill TP rank: the decode ranks (over every decode stage it meets, one DP
        group each) whose plans draw from it."""
        sp = self.stage_planner
        tp_p = sp.prefill_tp
        local = [sp.explicit_plan(d, 0) for d in range(sp.decode_tp)]
        fan = {a: [0] * tp_p for a in range(self.prefill_pp)}
        for pair in self.pairs:
            present = {pos for pos, _, _ in self.pair_buffers(pair)}
            for plan in local:
                for t in {f.src_rank % tp_p for f in plan.fragments if self._pos[f.buffer_index] in present}:
                    fan[pair.prefill_stage][t] += 1
        return fan

    # ---- plans -----------------------------------------------------------------------------------------------
    def _decode_rank(self, decode_rank: Any) -> int:
        world = self.decode_world
        if isinstance(decode_rank, bool) or not isinstance(decode_rank, (int, np.integer)) \
                or not 0 <= decode_rank < world:
            raise UnsupportedPDLayoutError(f"decode_rank must be an integer in [0, {world - 1}] (the decode world of "
                                           f"{self.decode_pp} stage(s)), got {shown(decode_rank)}")
        return int(decode_rank)

    def plan_for_decode_rank(self, decode_rank: int, prefill_dp_group: int | None = None) -> PipelineRankPlan:
        """The plan of global decode rank ``decode_rank`` for a request prefilled by ``prefill_dp_group`` (as
        :meth:`~.planner.PDTransferPlanner.plan_for_decode_rank`; the same group in every prefill stage)."""
        R = self._decode_rank(decode_rank)
        key = (R, prefill_dp_group)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._build(R, prefill_dp_group)
        return plan

    def _build(self, R: int, g: int | None) -> PipelineRankPlan:
        sp = self.stage_planner
        b, r = divmod(R, self.decode_stage_world)
        v1 = sp.plan_for_decode_rank(r, g)
        local = sp.explicit_plan(r, g)
        wp, tp_p = self.prefill_stage_world, sp.prefill_tp
        frags: list[LayerFragment] = []
        stages: list[StagePlan] = []
        fan: dict[int, int] = {}
        for pair in self.pairs:
            if pair.decode_stage != b:
                continue
            carried = {pos: (lo, hi) for pos, lo, hi in self.pair_buffers(pair)}
            base = pair.prefill_stage * wp
            wire = []
            for f in local.fragments:
                span = carried.get(self._pos[f.buffer_index])
                if span is None:
                    continue
                wire.append(f)
                d = dict(f.__dict__)
                d["src_rank"], d["dst_rank"] = base + f.src_rank, R
                gf = object.__new__(TransferFragment)  # a valid fragment with its ranks offset: no re-validation
                gf.__dict__.update(d)
                frags.append(LayerFragment(gf, span[0], span[1]))
                fan[gf.src_rank] = self._fan[pair.prefill_stage][f.src_rank % tp_p]
            if wire:
                stages.append(StagePlan(pair.prefill_stage, pair.layer_start, pair.layer_end, tuple(wire)))
        ranks = tuple(sorted(fan))
        return PipelineRankPlan(R, b, v1.plan_kind, v1.target_dp_group, ranks, len(ranks), tuple(frags),
                                {p: fan[p] for p in ranks}, tuple(stages))

    def plans(self, prefill_dp_group: int | None = None) -> tuple[PipelineRankPlan, ...]:
        """The plan of every global decode rank, in rank order."""
        return tuple(self.plan_for_decode_rank(r, prefill_dp_group) for r in range(self.decode_world))

    def fanout(self, prefill_dp_group: int | None = None) -> dict[int, int]:
        """Fan-out of every global prefill rank (every stage), by the version-1 convention of
        :meth:`~.planner.PDTransferPlanner.fanout` (under "index" a group without a decode partner has 0)."""
        sp = self.stage_planner
        tp_p, dp_p = sp.prefill_tp, sp.prefill_layout.dp_size
        groups = range(dp_p) if prefill_dp_group is None else [sp._prefill_group(prefill_dp_group)]
        served = sp.decode_layout.dp_size if sp.dp_pairing == "index" else dp_p
        return {a * self.prefill_stage_world + g * tp_p + t: (self._fan[a][t] if g < served else 0)
                for a in range(self.prefill_pp) for g in groups for t in range(tp_p)}

    def idle_prefill_ranks(self, prefill_dp_group: int = 0) -> tuple[int, ...]:
        """Global prefill ranks of the serving group, every stage, that send nothing."""
        g = self.stage_planner._prefill_group(prefill_dp_group)
        tp_p = self.stage_planner.prefill_tp
        return tuple(a * self.prefill_stage_world + g * tp_p + t for a in range(self.prefill_pp)
                     for t in range(tp_p) if self._fan[a][t] == 0)

    def stage_bytes_per_page(self, decode_dp_group: int = 0, prefill_dp_group: int | None = None
                             ) -> dict[tuple[int, int], int]:
        """Bytes per page (over the pair's layers) each stage pair moves for one request into
        ``decode_dp_group``: ``{(prefill stage, decode stage): bytes}``."""
        out = {(p.prefill_stage, p.decode_stage): 0 for p in self.pairs}
        tp_d, wd = self.stage_planner.decode_tp, self.decode_stage_world
        for b in range(self.decode_pp):
            for d in range(tp_d):
                plan = self.plan_for_decode_rank(b * wd + decode_dp_group * tp_d + d, prefill_dp_group)
                for f in plan.fragments:
                    out[(self.prefill_stage_of(f.src_rank), b)] += f.bytes_per_page * f.layers
        return out

    def __repr__(self) -> str:
        return (f"PipelineTransferPlanner(PP{self.prefill_pp} x {self.stage_planner.prefill_layout} -> "
                f"PP{self.decode_pp} x {self.stage_planner.decode_layout}, {self.layers} layers)")


"""Exact crossovers between attention layouts in the context length (docs/models.md §3.5).

At a fixed batch B, only the attention-core kernels of a decode step depend on the context length s, and each is
a roofline of affine functions of s:

    t_l(s) = c_l + L * max(f1_l s / (eta_a P),  (m0_l + m1_l s) / (eta_m BW))

(c_l collects every other kernel, the collectives and the overhead). Each t_l is convex piecewise-linear with
at most one breakpoint, and layout l is feasible for s <= s_max,l (memory, page-exact). Breakpoints and
feasibility limits cut [s_lo, s_hi] into segments on which every t_l is linear; pairwise intersections inside
a segment are solved exactly. The best layout is then constant between consecutive cut points, and the
boundaries are exact (no tolerance, no grid).

The same holds for the time per output token of a pipeline or of speculative decoding
(:mod:`..step.per_token`), which are built from the same rooflines: a sliding-window layer's core stops growing at
its window (a breakpoint there); speculative decoding adds the draft layer's cores (its later steps at s + k + 1)
and divides by the accepted length; a pipeline's time between tokens is the larger of one micro-batch's cycle and
pp times the slowest stage, two branches whose crossing is one more breakpoint (:func:`layout_time_model`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from ... import _check
from ...errors import SpecError
from ...units import dtype_bytes
from ..step.decode import core_coefficients, max_batch, max_context, memory_per_rank, step_time
from ...deployment import MAX_RANKS
from ..step.engine import (LAYOUTS, MAX_BATCH, MAX_CONTEXT, Deployment, check_batch_context, check_layout,
                     kernel_rates)
from ..step.per_token import check_decoding, token_max_context
from ..step.pipeline import pp_decode
from ..step.speculative import draft_deployment, spec_step

__all__ = ["Boundary", "Alternative", "TimeModel", "context_boundaries", "layout_time_coefficients",
           "layout_time_model", "mla_tp_dpa_closed_form_tokens", "would_fit"]

MAX_BATCH_VALUES = 4096  # batch values per call (each is solved exactly, one after the other)


@dataclass(frozen=True)
class Boundary:
    """The best feasible layout changes at ``context`` tokens for a given ``batch``.

    ``kind`` is ``"crossover"`` (equal step times on both sides) or ``"memory"`` (the layout on the left
    stops fitting); ``after`` is ``None`` when nothing fits beyond the boundary.
    """

    batch: int
    context: float
    before: str
    after: str | None
    kind: str


def layout_time_coefficients(dep: Deployment, batch, layout: str) -> dict[str, np.ndarray]:
    """Step time of ``layout`` as c + L * max(a_f s, a_m0 + a_m1 s) [s], coefficients per batch value."""
    b, _ = check_batch_context(batch, 1)
    r = kernel_rates(dep, "attention")  # the engine's rates for the attention core
    co = core_coefficients(dep, b, layout)
    cf = 1.0 / r.flops_per_s
    cm = 1.0 / r.bytes_per_s
    L = dep.model.layers
    at1 = step_time(dep, b, 1.0, layout)["step_s"]
    core1 = L * (np.maximum(co["f1"] * cf, (co["m0"] + co["m1"]) * cm) + r.overhead_s)
    c = at1 - core1 + L * r.overhead_s
    return {"c": c, "L": np.full(b.shape, float(L)), "af": L * co["f1"] * cf, "am0": L * co["m0"] * cm,
            "am1": L * co["m1"] * cm}


@dataclass(frozen=True)
class _Roof:
    """``w`` attention cores, each max(af x, am0 + am1 x) with x = min(s + shift, cap) [s]; coefficients per batch
    value (the hard roofline of :func:`~..step.decode.core_coefficients` at the engine's rates)."""

    w: float
    af: np.ndarray
    am0: np.ndarray
    am1: np.ndarray
    shift: float = 0.0
    cap: float = math.inf

    def kinks(self, i: int) -> list[float]:
        """Contexts s where this term bends: the roofline's corner and the cap."""
        out = []
        denom = self.af[i] - self.am1[i]
        if denom > 0:
            out.append(float(self.am0[i] / denom) - self.shift)
        if math.isfinite(self.cap):
            out.append(self.cap - self.shift)
        return out

    def value(self, i: int, s) -> np.ndarray:
        x = np.minimum(np.asarray(s, dtype=float) + self.shift, self.cap)
        return self.w * np.maximum(self.af[i] * x, self.am0[i] + self.am1[i] * x)

    def line(self, i: int, mid: float) -> tuple[float, float]:
        """(intercept, slope) in s on the segment around ``mid`` where the term is linear."""
        x = mid + self.shift
        if x >= self.cap:
            return float(self.value(i, mid)), 0.0
        if self.af[i] * x >= self.am0[i] + self.am1[i] * x:
            return self.w * self.af[i] * self.shift, self.w * self.af[i]
        return self.w * (self.am0[i] + self.am1[i] * self.shift), self.w * self.am1[i]


@dataclass(frozen=True)
class _Branch:
    """c + the sum of the roofs [s]."""

    c: np.ndarray
    roofs: tuple[_Roof, ...]

    def line(self, i: int, mid: float) -> tuple[float, float]:
        c0, k = float(self.c[i]), 0.0
        for r in self.roofs:
            a, b = r.line(i, mid)
            c0, k = c0 + a, k + b
        return c0, k


@dataclass(frozen=True)
class TimeModel:
    """A layout's time per output token as a function of the context, per batch value: the largest of the
    branches, over ``tokens_per_step`` (:func:`layout_time_model`)."""

    branches: tuple[_Branch, ...]
    tokens_per_step: float = 1.0
    batch: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def kinks(self, i: int) -> set[float]:
        return {x for br in self.branches for r in br.roofs for x in r.kinks(i)}

    def branch_crossings(self, i: int, s0: float, s1: float) -> list[float]:
        """Where two branches swap inside (s0, s1), on which every roof is linear."""
        mid = 0.5 * (s0 + s1)
        lines = [br.line(i, mid) for br in self.branches]
        return [x for a, (ca, ka) in enumerate(lines) for cb, kb in lines[a + 1:]
                if ka != kb and s0 < (x := (cb - ca) / (ka - kb)) < s1]

    def line(self, i: int, mid: float) -> tuple[float, float]:
        """(intercept, slope) of the time per token on a segment around ``mid`` where it is linear."""
        c0, k = max((br.line(i, mid) for br in self.branches), key=lambda ck: ck[0] + ck[1] * mid)
        return c0 / self.tokens_per_step, k / self.tokens_per_step

    def at(self, s) -> np.ndarray:
        """The time per token at contexts ``s`` for every batch value [len(batch), len(s)] [s]."""
        s = np.atleast_1d(np.asarray(s, dtype=float))
        n = len(self.batch)
        vals = [br.c[:, None] + sum((np.stack([r.value(i, s) for i in range(n)]) for r in br.roofs),
                                    np.zeros((n, s.size))) for br in self.branches]
        return np.max(np.stack(vals), axis=0) / self.tokens_per_step


def _roofs(dep: Deployment, b: np.ndarray, layout: str, q: int, *, scale: float = 1.0, shift: float = 0.0
           ) -> list[_Roof]:
    """The attention cores of all of ``dep``'s layers at ``q`` query tokens per sequence, times ``scale``: the
    full-attention layers' and the sliding-window layers' (capped at the window, as
    :func:`~..step.decode.layers_core_s` prices them)."""
    m = dep.model
    co = core_coefficients(dep, b, layout, q)
    r = kernel_rates(dep, co["kind"])
    cf, cm = 1.0 / r.flops_per_s, 1.0 / r.bytes_per_s
    af, am0, am1 = co["f1"] * cf, co["m0"] * cm, co["m1"] * cm
    out = [_Roof(scale * (m.layers - m.sliding_layers), af, am0, am1, shift)]
    if m.sliding_layers:
        out.append(_Roof(scale * m.sliding_layers, af, am0, am1, shift, float(m.sliding_window)))
    return [x for x in out if x.w > 0]


def _branch(value_at_1: np.ndarray, roofs: list[_Roof]) -> _Branch:
    """A branch through the model's own value at s = 1: c absorbs every term that does not depend on s (and the
    soft roofline's difference from the hard one at s = 1)."""
    n = value_at_1.shape[0]
    at1 = sum((np.array([r.value(i, 1.0) for i in range(n)]) for r in roofs), np.zeros(n))
    return _Branch(np.asarray(value_at_1, dtype=float) - at1, tuple(roofs))


def layout_time_model(dep: Deployment, batch, layout: str, *, pp=1, speculative=None) -> TimeModel:
    """The time per output token of ``layout`` at each batch value as a :class:`TimeModel` (module docstring):

    * plain: one branch, c + the cores (:func:`layout_time_coefficients` where no layer slides);
    * speculative (:func:`~..step.speculative.spec_step`): the verify pass's cores at k + 1 query tokens, the
      draft layer's first step at k + 1 and its k - 1 later steps at the draft width and s + k + 1, over tau;
    * ``pp`` stages (:func:`~..step.pipeline.pp_decode`): the cycle (the whole model at the micro-batch, plus the
      hops) and pp x the slowest stage (ceil(L / pp) / L of the layers' time), the larger of the two.

    Each branch is anchored at the model's own value at s = 1, so the model equals :mod:`..step.per_token`'s
    ``tpot_s`` exactly where the kernels' hard roofline is the curve (no knee)."""
    p, spec = check_decoding(dep, pp, speculative)
    check_layout(layout)
    b, _ = check_batch_context(np.atleast_1d(batch), 1)
    b = b.ravel()
    if spec is not None:
        W = spec.verify_width
        roofs = _roofs(dep, b, layout, W)
        ddep = draft_deployment(dep, spec)
        if ddep is not None:
            roofs += _roofs(ddep, b, layout, W)
            if spec.draft_tokens > 1:
                roofs += _roofs(ddep, b, layout, spec.draft_width, scale=spec.draft_tokens - 1, shift=W)
        cycle = np.asarray(spec_step(dep, spec, b, 1.0, layout, plain=False)["cycle_s"], dtype=float)
        return TimeModel((_branch(cycle, roofs),), spec.tokens_per_step, b)
    if p > 1:
        r = pp_decode(dep, p, b, 1.0, layout)
        mb = np.asarray(r["micro_batch"], dtype=float)
        share = p * math.ceil(dep.model.layers / p) / dep.model.layers
        return TimeModel((_branch(np.asarray(r["cycle_s"], dtype=float), _roofs(dep, mb, layout, dep.q_tokens)),
                          _branch(p * np.asarray(r["stage_s"], dtype=float),
                                  _roofs(dep, mb, layout, dep.q_tokens, scale=share))), 1.0, b)
    at1 = np.asarray(step_time(dep, b, 1.0, layout)["step_s"], dtype=float)
    return TimeModel((_branch(at1, _roofs(dep, b, layout, dep.q_tokens)),), 1.0, b)


def context_boundaries(dep: Deployment, batch_values, *, s_lo: float = 1.0, s_hi: float = 1 << 20,
                       layouts=LAYOUTS, pp=1, speculative=None
                       ) -> tuple[list[Boundary], dict[int, list[tuple[float, float, str | None]]]]:
    """Exact context lengths where the best feasible layout changes, for each batch.

    Returns ``(boundaries, intervals)``: a flat list of :class:`Boundary` and, per batch, the list of
    ``(s_start, s_end, best)`` intervals covering [s_lo, s_hi] (``best`` None where nothing fits). Memory
    limits are page-exact (:func:`..step.per_token.token_max_context`): a layout fits up to the end of its last
    page. ``pp`` and ``speculative`` compare the layouts' time per output token in a pipeline or with speculative
    decoding (:func:`layout_time_model`). SpecError if 1 <= s_lo < s_hi <= 2**30 tokens does not hold, for an
    unknown or repeated layout, or for more than 4096 batch values.
    """
    s_lo = _check.number("s_lo", s_lo, lo=1, hi=MAX_CONTEXT, unit="tokens")
    s_hi = _check.number("s_hi", s_hi, lo=1, hi=MAX_CONTEXT, unit="tokens")
    if not s_lo < s_hi:
        raise SpecError(f"s_hi must be > s_lo ({s_lo:g}) [tokens], got {s_hi:g}")
    if isinstance(layouts, str) or not isinstance(layouts, (list, tuple)) or not layouts:
        raise SpecError(f"layouts must be a non-empty list of {list(LAYOUTS)}, got {_check.shown(layouts)}")
    for lay in layouts:
        check_layout(lay)
    if len(set(layouts)) != len(layouts):
        raise SpecError(f"layouts must not repeat a layout, got {list(layouts)}")
    layouts = tuple(layouts)
    b, _ = check_batch_context(np.atleast_1d(batch_values), 1)
    b = b.ravel()
    if b.size > MAX_BATCH_VALUES:
        raise SpecError(f"batch_values must hold at most {MAX_BATCH_VALUES:,} values, got {b.size:,}")
    models = {lay: layout_time_model(dep, b, lay, pp=pp, speculative=speculative) for lay in layouts}
    smax = {lay: token_max_context(dep, b, lay, pp=pp, speculative=speculative, limit=s_hi) for lay in layouts}
    boundaries: list[Boundary] = []
    intervals: dict[int, list] = {}
    for i, B in enumerate(b.astype(int)):
        cuts = {s_lo, s_hi}
        for lay in layouts:
            cuts |= {x for x in models[lay].kinks(i) if s_lo < x < s_hi}
            if s_lo <= smax[lay][i] < s_hi:
                cuts.add(float(smax[lay][i]))
        pts = sorted(cuts)
        # a layout with several branches (a pipeline) bends where they swap: one more cut
        for s0, s1 in zip(pts[:-1], pts[1:]):
            for lay in layouts:
                if len(models[lay].branches) > 1:
                    cuts |= set(models[lay].branch_crossings(i, s0, s1))
        pts = sorted(cuts)
        refined = set(pts)
        for s0, s1 in zip(pts[:-1], pts[1:]):
            mid = 0.5 * (s0 + s1)
            lines = {lay: models[lay].line(i, mid) for lay in layouts}
            for a_i, lay_a in enumerate(layouts):
                for lay_b in layouts[a_i + 1:]:
                    (ca, ka), (cb, kb) = lines[lay_a], lines[lay_b]
                    if ka != kb:
                        x = (cb - ca) / (ka - kb)
                        if s0 < x < s1:
                            refined.add(float(x))
        pts = sorted(refined)
        segs: list[list] = []
        for s0, s1 in zip(pts[:-1], pts[1:]):
            mid = 0.5 * (s0 + s1)
            best, best_t = None, np.inf
            for lay in layouts:
                if mid <= smax[lay][i]:
                    c0, k = models[lay].line(i, mid)
                    t = c0 + k * mid
                    if t < best_t:
                        best, best_t = lay, t
            if segs and segs[-1][2] == best:
                segs[-1][1] = s1
            else:
                segs.append([s0, s1, best])
        intervals[int(B)] = [tuple(x) for x in segs]
        for (s0, s1, before), (_, _, after) in zip(segs[:-1], segs[1:]):
            if before is None:
                continue
            kind = "memory" if s1 >= smax[before][i] else "crossover"
            boundaries.append(Boundary(int(B), float(s1), before, after, kind))
    return boundaries, intervals


def mla_tp_dpa_closed_form_tokens(dep: Deployment) -> float:
    """Closed-form TP vs DPA crossover for MLA, in context tokens per step B*s* (docs/models.md §3.5).

    Memory-bound, balanced DPA and equal communication on both sides:
    t_TP - t_DPA = (1 - 1/T) (B s kv_l - W_shard b_w) / (eta_m BW)  =>  B s* = W_shard b_w / kv_l,
    independent of T. DeepSeek-V3: 171,966,464 B (FP8 weights) / 1152 B (BF16 latent) = 149,276.
    """
    m = dep.model
    if not m.is_mla:
        raise SpecError(f"the TP/DPA closed form needs an MLA model, got {m.name} ({m.attention})")
    w_shard = sum(m.attn_params_per_layer.values()) - m.mla_replicated_params_per_layer
    return w_shard * dep.b_w / m.kv_bytes_per_token_per_layer(dep.kv_dtype)


# ---- when nothing fits: what would -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Alternative:
    """One change of the deployment or the point that makes some layouts fit in memory.

    ``change`` is the field changed (``"weight_dtype"``, ``"kv_dtype"``, ``"ranks"``, ``"batch"``,
    ``"context"``), ``value`` its new value (for batch and context: the largest that fits), ``layouts`` the
    layouts that fit after it, ``text`` a short phrase ("FP8 weights", "16 ranks", "batch <= 12").
    """

    change: str
    value: object
    layouts: tuple[str, ...]
    text: str


def _fitting(dep: Deployment, batch: int, context: float, layouts) -> tuple[str, ...]:
    return tuple(lay for lay in layouts if bool(memory_per_rank(dep, batch, context, lay)["feasible"]))


def would_fit(dep: Deployment, batch, context, layouts=LAYOUTS) -> list[Alternative]:
    """Single changes that make at least one layout fit at (``batch``, ``context``) when none fits as given
    (empty if one already fits), each computed with the memory model, in this order:

    * FP8 weights, then an FP8 KV cache (each where the deployment uses a wider dtype; both together only
      if neither alone suffices);
    * more ranks: the smallest of 2T, 4T, ... (up to 1024) that the model allows and where a layout fits;
    * the largest batch that fits at this context (:func:`..step.decode.max_batch`), and the longest context
      that fits at this batch (:func:`..step.decode.max_context`), each over the layouts.
    """
    batch = _check.integer("batch", batch, lo=1, hi=MAX_BATCH)
    context = _check.number("context", context, lo=1, hi=MAX_CONTEXT, unit="tokens")
    layouts = tuple(layouts)
    for lay in layouts:
        check_layout(lay)
    if _fitting(dep, batch, context, layouts):
        return []
    out: list[Alternative] = []
    dtype_changes = []
    fp8 = dtype_bytes("fp8")
    if dep.b_w > fp8:  # never suggest FP8 to a deployment already in a narrower dtype (fp4)
        dtype_changes.append(("weight_dtype", "FP8 weights", {"weight_dtype": "fp8"}))
    if dep.b_kv > fp8:
        dtype_changes.append(("kv_dtype", "FP8 KV cache", {"kv_dtype": "fp8"}))
    for change, text, kw in dtype_changes:
        fits = _fitting(dataclasses.replace(dep, **kw), batch, context, layouts)
        if fits:
            out.append(Alternative(change, "fp8", fits, text))
    if len(dtype_changes) == 2 and not out:
        fits = _fitting(dataclasses.replace(dep, weight_dtype="fp8", kv_dtype="fp8"), batch, context, layouts)
        if fits:
            out.append(Alternative("weight_dtype+kv_dtype", "fp8", fits, "FP8 weights and KV cache"))
    ranks = 2 * dep.ranks
    while ranks <= MAX_RANKS:
        try:
            bigger = dataclasses.replace(dep, ranks=ranks)
        except SpecError:  # the model does not split over this many ranks
            bigger = None
        fits = _fitting(bigger, batch, context, layouts) if bigger is not None else ()
        if fits:
            out.append(Alternative("ranks", ranks, fits, f"{ranks} ranks"))
            break
        ranks *= 2
    if batch > 1:
        best_b = {lay: int(max_batch(dep, context, lay, limit=batch - 1)) for lay in layouts}
        top = max(best_b.values())
        if top >= 1:
            fits = tuple(lay for lay in layouts if best_b[lay] == top)
            out.append(Alternative("batch", top, fits, f"batch <= {top:,}"))
    best_s = {lay: float(max_context(dep, batch, lay, limit=context)) for lay in layouts}
    top_s = max(best_s.values())
    if top_s >= 1:
        fits = tuple(lay for lay in layouts if best_s[lay] == top_s)
        out.append(Alternative("context", int(top_s) if top_s == int(top_s) else top_s, fits,
                               f"context <= {top_s:,.0f} tokens"))
    return out

"""The instance types a planning question searches and their step tables (cached: sliders on rates and targets
reuse them), their labels, and a colocated configuration's latency at per-instance rates (docs/models.md §8).
Shared by the search (:mod:`.search`) and the length-routed pools (:mod:`.routed`)."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace

import numpy as np

from ... import presets
from ...errors import SpecError
from ...models.serving import disagg as dg
from ...models.queueing import at_stat
from ...models.step.engine import Deployment
from ...models.step.pipeline import hop_link, pp_prefill
from .question import BATCH_POINTS, MAX_SEQS, WIDE_EP_RANKS, Question


@dataclass
class _Instance:
    """One instance type: deployment + layout, with its decode and prefill tables."""

    dep: Deployment
    layout: str
    batches: np.ndarray = field(default_factory=lambda: np.zeros(0))
    step_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    prefill_s: float = np.inf
    reason: str = ""
    spec: str = ""  # the speculative-decoding preset its decode steps run ("" none)
    pp: int = 1  # pipeline stages (each of dep.ranks GPUs)
    prefill_delay_s: float = 0.0  # a pipeline's prefill latency beyond its service time (the other stages)
    gpu: str = ""  # the GPU type (hardware preset)

    @property
    def gpus(self) -> int:
        """GPUs of one instance: ranks per stage x stages."""
        return self.dep.ranks * self.pp


def _rank_options(q: Question, gpu: str) -> list[tuple[int, str, int | None, int]]:
    """(ranks per stage, layout, expert-parallel size, pipeline stages) of every instance type searched (EP None:
    all ranks). Pipelines (pp > 1, the question's ``pipeline_sizes``) are TP stages of at most a node's GPUs, at
    most the budget in all, and at most one stage per layer."""
    m, hw = presets.model(q.model), presets.hardware(gpu)
    node = hw.scale_up_size
    tps = [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= min(node, q.gpus)]
    out = [(t, "TP", None, 1) for t in tps]
    if m.is_moe:  # MoE-TP: every expert sliced over the instance's ranks (vLLM's default for MoE models)
        out += [(t, "TP", 1, 1) for t in tps if t > 1]
    out += [(t, lay, None, 1) for t in tps if t > 1 for lay in ("DPA", "DOP")]
    if m.is_moe:
        out += [(t, "DPA", None, 1) for t in WIDE_EP_RANKS if node < t <= q.gpus]
    out += [(t, "TP", None, p) for p in q.pipeline_sizes if p > 1 and p <= m.layers for t in tps if t * p <= q.gpus]
    return out


def _spec_keys(q: Question) -> list:
    """The speculative-decoding settings searched: off, and the question's preset (with its user acceptance)."""
    return [None] + ([(q.speculative, q.speculative_accepted_length)] if q.speculative is not None else [])


def _spec_of(model: str, key):
    """The SpecDecode of a hashable key (preset name, user accepted length or None), via the Question's rule."""
    if key is None:
        return None
    return Question(model=model, speculative=key[0], speculative_accepted_length=key[1]).spec()


def _instances(q: Question, wl: dg.Workload) -> list[_Instance]:
    out = []
    for gpu in q.gpu_types:
        for wd, kd in q.dtype_options():
            for ranks, layout, ep, pp in _rank_options(q, gpu):
                for key in _spec_keys(q) if pp == 1 else [None]:  # pipelines decode plainly here
                    inst = _instance(q.model, gpu, q.runtime, ranks, layout, wd, kd, wl.prompt_tokens,
                                     wl.output_tokens, ep, key, pp)
                    out.append(replace(inst))
    return out


@functools.lru_cache(maxsize=512)
def _instance(model, gpu, runtime, ranks, layout, wd, kd, isl, osl, ep=None, spec_key=None, pp=1) -> _Instance:
    """One instance's decode table (cached: sliders on rates and targets reuse it); ``spec_key`` (preset name,
    user accepted length) prices its decode steps with speculative decoding (:func:`_spec_of`); ``pp`` > 1 is a
    pipeline of pp TP stages of ``ranks`` GPUs (:mod:`llmexplore.models.step.pipeline`)."""
    spec = _spec_of(model, spec_key)
    tag = spec_key[0] if spec_key else ""
    shape = f"{ranks} ranks" + (f" x {pp} stages" if pp > 1 else "") + f" of {gpu}"
    try:
        dep = Deployment.build(model, gpu, ranks, runtime=runtime, weight_dtype=wd, kv_dtype=kd,
                               moe_dispatch="alltoall" if layout == "DPA" and ranks > 8 else "gather",
                               moe_ep=ep)
        if pp > 1:
            hop_link(dep, pp)  # the stages' link exists
    except SpecError as exc:
        return _Instance(None, layout, reason=f"{shape}, {wd}/{kd}: {exc}", spec=tag, pp=pp, gpu=gpu)
    wl = dg.Workload(prompt_tokens=isl, output_tokens=osl)
    dec = dg.decode_side(dep, wl, layout=layout, max_batch_limit=MAX_SEQS, points=BATCH_POINTS, speculative=spec,
                         pp=pp)
    inst = _Instance(dep, layout, dec.batches, np.asarray(dec.step_s, float), spec=tag, pp=pp, gpu=gpu)
    if dec.batch_cap < 1:
        where = f"{ranks} x {gpu}" + (f" x PP{pp}" if pp > 1 else "")
        inst.reason = (f"{where} ({layout}, {wd} weights, {kd} KV{', ' + tag if tag else ''}) cannot "
                       f"hold the weights and one sequence of {wl.peak_context:.0f} tokens")
    elif layout == "TP":
        pf = pp_prefill(dep, pp, isl)
        inst.prefill_s = float(pf["service_s"])
        inst.prefill_delay_s = float(pf["latency_s"]) - inst.prefill_s
    return inst


@functools.lru_cache(maxsize=256)
def _colocated_tables(model, gpu, runtime, ranks, wd, kd, isl: int, osl: int, chunks: tuple, ep=None,
                      spec_key=None, pp=1) -> tuple:
    dep = _instance(model, gpu, runtime, ranks, "TP", wd, kd, isl, osl, ep, spec_key, pp).dep
    wl = dg.Workload(prompt_tokens=isl, output_tokens=osl)
    return dg.colocated_tables(dep, wl, np.array(chunks, float), points=BATCH_POINTS,
                               speculative=_spec_of(model, spec_key), pp=pp)


def _key(q: Question, inst: _Instance):
    """The speculative key an instance was priced with (None: plain decoding)."""
    return (inst.spec, q.speculative_accepted_length) if inst.spec else None


def _ep(inst: _Instance) -> int:
    """Expert-parallel size of an instance (1 for a dense model)."""
    return (inst.dep.moe_ep or inst.dep.ranks) if inst.dep.model.is_moe else 1


def _shape(inst: _Instance, mixed: bool = False) -> str:
    s = f"{inst.layout}{inst.dep.ranks}" + (f" PP{inst.pp}" if inst.pp > 1 else "")
    s = s + f" EP{_ep(inst)}" if inst.dep.model.is_moe and inst.dep.ranks > 1 else s
    s = s + f" +{inst.spec}" if inst.spec else s
    return f"{s} on {inst.gpu}" if mixed else s


def _label(mode: str, wd: str, kd: str, p: _Instance | None, d: _Instance, chunk=None, mixed: bool = False) -> str:
    """A row's label; a question with several GPU types names each side's ("TP8 on h200")."""
    if mode == "colocated":
        return f"colocated {_shape(d, mixed)} {wd}/{kd} chunk {chunk}"
    return f"disagg P:{_shape(p, mixed)} D:{_shape(d, mixed)} {wd}/{kd}"


@dataclass(frozen=True)
class _ColocatedPoint:
    """One colocated configuration (an instance's step tables at one chunk budget) priced at per-instance
    rates: the mixed-iteration latency model, its TTFT and TPOT at the question's statistic."""

    dec: object  # the instance's decode step table (batches, step_s)
    t_mix: object  # its mixed-iteration times at this chunk budget
    wl: dg.Workload
    chunk: int
    mean: bool  # the targets are on means (else on the question's percentile)
    T_ttft: float  # targets [s]
    T_tpot: float

    def at(self, lam, n: int) -> tuple:
        """(latency result, TTFT [s], TPOT [s]) at per-instance rates ``lam`` [req/s] with ``n`` instances:
        requests dealt round-robin over the n instances arrive with Erlang-n gaps (arrival SCV 1/n)."""
        r = dg.colocated_from_tables(self.dec, self.t_mix, self.wl, lam, self.chunk, arrival_scv=1.0 / max(n, 1))
        ttft = r["ttft_mean_s"] if self.mean else r["ttft_s"]
        tpot = r["tpot_mean_s"] if self.mean else r["tpot_s"]  # per-request TPOT, as engines report
        return r, ttft, tpot

    def ok(self, ttft, tpot):
        return (ttft <= self.T_ttft) & (tpot <= self.T_tpot)

    def lam_star(self, lam: np.ndarray, n: int, ok_n=None) -> float:
        """Highest per-instance rate [req/s] within the targets with ``n`` instances: the last feasible rate
        of the grid ``lam`` (``ok_n``: its feasibility, if already known), refined up to the next."""
        okn = self.ok(*self.at(lam, n)[1:]) if ok_n is None else ok_n
        if not okn.any():
            return 0.0
        j = int(np.nonzero(okn)[0].max())
        lo, hi = lam[j], lam[j + 1] if j + 1 < lam.size else lam[j]
        if hi > lo:  # refine between the last feasible grid rate and the next
            fine = np.linspace(lo, hi, 33)
            _, t1, t2 = self.at(fine, n)
            lo = float(fine[self.ok(t1, t2)].max())
        return lo


def _seqs_cap(mean_batch: float, cap: float) -> int:
    """max_num_seqs for a mean decode batch: its p99 Poisson concurrency, rounded up to a multiple of 8,
    within the memory cap."""
    z = at_stat.Z_SCORES[0.99]
    b = mean_batch + z * math.sqrt(max(mean_batch, 0.0))
    return int(max(1, min(cap, 8 * math.ceil(b / 8))))

"""Pipeline parallelism on the step engine: layers split over PP stages, micro-batches in flight (docs/models.md §1.5).

An instance of ``pp`` stages x T ranks runs the model's layers in ``pp`` contiguous groups, each on its own
T-rank tensor-parallel group (the first stage also embeds, the last holds the LM head and samples). Every engine
keeps ``pp`` micro-batches in flight so that no stage idles: vLLM's virtual engines (one scheduler per pipeline
stage), TensorRT-LLM's in-flight micro-batches, SGLang's PP micro-batches. A micro-batch of b sequences goes through
every stage in turn, its activations (b x H in the activation dtype) crossing the stage boundary each time over the
link between the stages (NVLink inside a node, the scale-out link across nodes).

    cycle(b)    = step_T(b, s) + (pp - 1) hop(b H bytes)                   one micro-batch through the pipeline
    stage(b)    = ceil(L / pp) / L x layers_T(b, s) + head_T(b) + overhead the slowest (last) stage
    ITL(b)      = max(cycle(b), pp x stage(b))                             pp micro-batches share every stage

with step_T the whole model's decode step on one T-rank group (the layers run one after the other, on other GPUs),
layers_T its per-layer part and head_T its LM head. So an instance of pp x T GPUs serves pp micro-batches of b
sequences with the latency of one T-rank group at batch b, plus the hops: the throughput of pp replicas, with
1/pp of the weights per GPU (more room for KV) and no collective beyond the stage's own TP. The same for a
prefill: a prompt takes prefill_T(S) + (pp - 1) hop(S H) (latency, its TTFT), and the pipeline accepts a new
prompt every stage(S) (its service time: pp prompts in flight).

Memory per rank is the worst stage's: ceil(L / pp) layers' weights (the MoE layers last, as the model preset places
them) and their KV for every sequence of the instance, plus one vocabulary table (the first stage's embedding or
the last stage's LM head), activations of one micro-batch.

Assumptions: stages balanced to within one layer (vLLM and SGLang split layers evenly; a remainder makes one stage
a layer longer); the hops are not overlapped with compute (NCCL send/recv on the compute stream) [assumption,
conservative]; micro-batches equal (the engine's schedulers each hold 1/pp of the running requests).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ...deployment import MAX_STAGES, check_pp
from ...errors import SpecError
from ...specs import ModelSpec
from .collectives import sendrecv_s
from .decode import max_batch, memory_per_rank, step_time
from .engine import Deployment, check_batch_context
from .prefill import prefill_time

__all__ = ["MAX_STAGES", "check_pp", "stage_layers", "stage_model", "stage_deployment", "stage_link", "hop_link", "hop_s",
           "pp_decode", "pp_memory", "pp_max_batch", "pp_prefill"]

def stage_layers(model: ModelSpec, pp: int) -> list[int]:
    """Layers of each stage: contiguous, balanced to within one (the first stages take the remainder)."""
    p = check_pp(model, pp)
    base, extra = divmod(model.layers, p)
    return [base + (1 if i < extra else 0) for i in range(p)]


def stage_model(model: ModelSpec, pp: int) -> ModelSpec:
    """The worst stage as a model: ceil(L / pp) layers, as many of them MoE as the last stage holds (the MoE layers
    are the last ones), one vocabulary table (tie_embeddings: the first stage's embedding or the last one's LM head).
    Its memory is the worst rank's; its time is not the stage's (see :func:`pp_decode`)."""
    p = check_pp(model, pp)
    if p == 1:
        return model
    ls = math.ceil(model.layers / p)
    # sliding-window layers spread evenly over the stages (gpt-oss alternates them): the stage's share, rounded up
    sl = min(ls, math.ceil(model.sliding_layers * ls / model.layers)) if model.sliding_layers else 0
    return dataclasses.replace(model, name=f"{model.name}/pp{p}", layers=ls, moe_layers=min(model.moe_layers, ls),
                               sliding_layers=sl, sliding_window=model.sliding_window if sl else 0,
                               tie_embeddings=True, mtp_layers=0, display_name=f"{model.label} (one of {p} stages)")


def stage_deployment(dep: Deployment, pp: int) -> Deployment:
    """The deployment of one stage's T ranks holding the worst stage (:func:`stage_model`)."""
    return dep if pp == 1 else dataclasses.replace(dep, model=stage_model(dep.model, pp))


def stage_link(fabric, pp: int, gpus: int, hardware: str, *, what: str = "ranks"):
    """The link between the stages of a pipeline of ``pp`` stages of ``gpus`` GPUs each on ``fabric``: the
    scale-up link while the pp x gpus GPUs fit in one scale-up domain, the scale-out link beyond (SpecError naming
    ``pp x what`` if ``hardware`` has none)."""
    if pp * gpus <= fabric.gpus_per_node:
        return fabric.scale_up
    if fabric.scale_out is None:
        raise SpecError(f"pp x {what} ({pp} x {gpus}) spans nodes of {fabric.gpus_per_node} GPUs, and "
                        f"{hardware} has no scale-out link preset to carry the activations between stages")
    return fabric.scale_out


def hop_link(dep: Deployment, pp: int):
    """The link between stages of ``dep.ranks`` GPUs each (:func:`stage_link`)."""
    return stage_link(dep.fabric, pp, dep.ranks, dep.hardware.name)


def hop_s(dep: Deployment, pp: int, tokens) -> np.ndarray:
    """One stage-to-stage send of ``tokens`` hidden states (H in the activation dtype, split over the stage's T
    ranks: each rank sends its 1/T share to its peer) [s]."""
    n = np.asarray(tokens, dtype=float) * dep.model.hidden * dep.b_a / dep.ranks
    return sendrecv_s(n, hop_link(dep, pp))


def _micro(batch, pp: int) -> np.ndarray:
    """Sequences per micro-batch: the instance's batch dealt over pp micro-batches (at least 1)."""
    return np.maximum(np.ceil(np.asarray(batch, dtype=float) / pp), 1.0)


def pp_decode(dep: Deployment, pp, batch, context, layout: str = "TP") -> dict[str, np.ndarray]:
    """Decode with ``pp`` stages of ``dep.ranks`` ranks at ``batch`` sequences per instance (dealt over pp
    micro-batches) [s]: ``cycle_s`` (one micro-batch through the pipeline), ``stage_s`` (the slowest stage),
    ``itl_s`` (the time between a sequence's tokens), ``hops_s``, ``micro_batch``, ``tokens_per_s`` (the
    instance's) and ``step`` (:func:`~.decode.step_time`'s parts of the whole model on one stage's ranks at the
    micro-batch). Each stage runs ``layout`` over its ranks. pp = 1 is the plain decode step."""
    p = check_pp(dep.model, pp, dep.ranks)
    b, s = check_batch_context(batch, context)
    mb = _micro(b, p)
    st = step_time(dep, mb, s, layout)
    head = st["head_s"] + st["comm_head_s"]
    layers = st["step_s"] - head - st["overhead_s"]
    hops = (p - 1) * hop_s(dep, p, mb) if p > 1 else np.zeros_like(st["step_s"])
    cycle = st["step_s"] + hops
    stage = math.ceil(dep.model.layers / p) / dep.model.layers * layers + head + st["overhead_s"]
    itl = np.maximum(cycle, p * stage) if p > 1 else cycle
    shape = np.broadcast_shapes(b.shape, s.shape)
    return {"cycle_s": np.broadcast_to(cycle, shape), "stage_s": np.broadcast_to(stage, shape),
            "itl_s": np.broadcast_to(itl, shape), "hops_s": np.broadcast_to(hops, shape),
            "micro_batch": np.broadcast_to(mb, shape), "tokens_per_s": np.broadcast_to(b / itl, shape),
            "step": st}


def pp_memory(dep: Deployment, pp, batch, context, layout: str = "TP", *, stage: Deployment | None = None
              ) -> dict[str, np.ndarray]:
    """Memory of the worst rank of a pipeline instance [B] (:func:`~.decode.memory_per_rank`'s parts): the worst
    stage's weights and the KV of its layers for all ``batch`` sequences (dealt over its ranks as ``layout``
    deals them), activations of one micro-batch. ``stage``: :func:`stage_deployment` of ``dep``, when the caller
    has it (a bisection builds it once)."""
    p = check_pp(dep.model, pp, dep.ranks)
    if p == 1:
        return memory_per_rank(dep, batch, context, layout)
    sd = stage_deployment(dep, p) if stage is None else stage
    b, s = check_batch_context(batch, context)
    whole = memory_per_rank(sd, b, s, layout)
    one = memory_per_rank(sd, _micro(b, p), s, layout)
    act = one["activations_B"]
    total = whole["weights_B"] + whole["kv_B"] + act + dep.reserve_B
    budget = sd.kv_budget_B(whole["weights_B"], act)
    ok = total <= sd.usable_B if dep.runtime.memory_fraction_of == "total" else whole["kv_B"] <= budget
    shape = np.broadcast_shapes(b.shape, s.shape)
    out = dict(whole)
    out.update(activations_B=np.broadcast_to(act, shape), total_B=np.broadcast_to(total, shape),
               kv_budget_B=np.broadcast_to(budget, shape), feasible=np.broadcast_to(ok, shape))
    return out


def pp_max_batch(dep: Deployment, pp, context, layout: str = "TP", *, limit: int = 1 << 20) -> np.ndarray:
    """Largest batch per pipeline instance that fits at each context (0 if none) [sequences]."""
    p = check_pp(dep.model, pp, dep.ranks)
    if p == 1:
        return max_batch(dep, context, layout, limit=limit)
    _, s = check_batch_context(1, context)
    sd = stage_deployment(dep, p)
    lo, hi = np.zeros(s.shape), np.full(s.shape, float(limit) + 1)
    while np.any(hi - lo > 1):
        mid = np.floor((lo + hi) / 2)
        ok = pp_memory(dep, p, np.maximum(mid, 1), s, layout, stage=sd)["feasible"]
        lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid)
    return np.minimum(lo, limit)


def pp_prefill(dep: Deployment, pp, prompt_tokens, prefix_tokens=0) -> dict[str, np.ndarray]:
    """A prompt's prefill through ``pp`` stages [s]: ``latency_s`` (the whole model on one stage's T ranks, then the
    hops of the S new tokens' hidden states) and ``service_s`` (how often the pipeline accepts a new prompt: the
    slowest stage's share)."""
    p = check_pp(dep.model, pp, dep.ranks)
    pf = prefill_time(dep, prompt_tokens, prefix_tokens)
    t = np.asarray(pf["prefill_s"], dtype=float)
    if p == 1:
        return {"latency_s": t, "service_s": t}
    S = np.asarray(prompt_tokens, dtype=float) - np.asarray(prefix_tokens, dtype=float)
    latency = t + (p - 1) * hop_s(dep, p, S)
    service = math.ceil(dep.model.layers / p) / dep.model.layers * t
    return {"latency_s": latency, "service_s": np.maximum(service, latency / p)}

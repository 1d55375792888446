"""The decode step per output token: one door for plain decoding, pipelines and speculative decoding
(docs/models.md §1.6).

A decode instance emits tokens in one of three ways, and every area prices them through this module:

* **plain**: one step per token, :func:`~.decode.step_time`;
* **a pipeline** of ``pp`` stages (each of the deployment's ranks, running ``layout``): pp micro-batches in
  flight, one token per sequence every ITL = max(cycle, pp x slowest stage) (:mod:`.pipeline`);
* **speculative decoding**: a draft and a verify over k + 1 tokens per iteration, tau tokens per sequence on
  average (:mod:`.speculative`).

So ``tpot_s``, the time per output token of one sequence, is the step, the ITL, or (draft + verify) / tau, and the
instance's throughput is batch / tpot. The parts are per output token too, and they add up to it::

    tpot = attention + ffn + head + comm + overhead + draft + host + hops + stall

(``draft``/``host``: the draft model's time and an n-gram drafter's CPU time, over tau; ``hops``: a pipeline's
stage-to-stage sends; ``stall``: the wait for the slowest stage, ITL - cycle). Memory is the worst rank's: the
worst stage's share of a pipeline, the draft's weights and KV and the verify slots of speculative decoding.

Pipelines and speculative decoding together are refused: vLLM's pipeline workers broadcast one sampled token per
request between stages and fail on k + 1 (vllm-project/vllm#57755, #49355, open in 2026), and no engine publishes a
working combination that could calibrate one.
"""

from __future__ import annotations

import math

import numpy as np

from ... import _check
from ...errors import SpecError
from ...specs import SpecDecode
from .decode import max_batch, max_context, step_time
from .engine import MAX_CONTEXT, Deployment, check_batch_context
from .pipeline import check_pp, pp_decode, pp_max_batch, pp_memory, stage_deployment
from .speculative import check_spec, resolve_spec, spec_max_batch, spec_memory, spec_step

__all__ = ["check_decoding", "decoding_label", "token_time", "token_memory", "token_max_batch",
           "token_max_context", "PARTS"]

#: the parts of ``tpot_s`` (per output token) [s]; ``core_s`` is inside ``attention_s``
PARTS = ("attention_s", "ffn_s", "head_s", "comm_s", "overhead_s", "draft_s", "host_s", "hops_s", "stall_s")

_STEP_PARTS = ("attention_s", "core_s", "ffn_s", "head_s", "comm_s", "overhead_s")


def check_decoding(dep: Deployment, pp=1, speculative=None) -> tuple[int, SpecDecode | None]:
    """(pp, spec): ``pp`` checked against the model and ranks (:func:`~.pipeline.check_pp`), ``speculative`` resolved
    (a preset name, a SpecDecode or None) and checked against the model (MTP needs an MTP module). SpecError whose
    message starts with the argument it is about (``pp ...``, ``speculative ...``), also for the two together
    (module docstring)."""
    p = check_pp(dep.model, pp, dep.ranks)
    spec = resolve_spec(speculative)
    if spec is not None:
        check_spec(dep.model, spec)
        if p > 1:
            raise SpecError(f"pp ({p}) must be 1 when decoding speculatively with {spec.name!r}: engines do not run "
                            "a draft inside a pipeline (vLLM's stages pass one sampled token per request, "
                            "vllm-project/vllm#57755)")
    return p, spec


def decoding_label(pp: int = 1, spec: SpecDecode | None = None) -> str:
    """'' for plain decoding, 'PP2' for a pipeline, the preset and accepted length for speculative decoding."""
    if spec is not None:
        return f"{spec.name} ({spec.tokens_per_step:.2f} tokens per step)"
    return f"PP{pp}" if pp > 1 else ""


def token_time(dep: Deployment, batch, context, layout: str = "TP", *, pp=1, speculative=None
               ) -> dict[str, np.ndarray]:
    """Time per output token of one sequence at ``batch`` sequences per instance and ``context`` tokens [s]
    (broadcast), with its parts (module docstring): ``tpot_s``, ``iteration_s`` (the time between a sequence's
    iterations: the step, the ITL, the draft + verify cycle), ``tokens_per_step`` (1, or tau), ``tokens_per_s``
    (the instance's: batch / tpot), :data:`PARTS` and ``core_s``. pp = 1 without speculation is
    :func:`~.decode.step_time` exactly (its ``tokens_per_s`` counts ``dep.q_tokens`` tokens per sequence)."""
    p, spec = check_decoding(dep, pp, speculative)
    b, s = check_batch_context(batch, context)
    shape = np.broadcast_shapes(b.shape, s.shape)
    zero = np.zeros(shape)
    if spec is not None:
        r = spec_step(dep, spec, b, s, layout, plain=False)
        verify = r["verify"]
        tau = spec.tokens_per_step
        out = {k: np.broadcast_to(verify[k], shape) / tau for k in _STEP_PARTS}
        out.update(draft_s=np.broadcast_to(r["draft_s"], shape) / tau, host_s=np.broadcast_to(r["host_s"], shape) / tau,
                   hops_s=zero, stall_s=zero, iteration_s=np.broadcast_to(r["cycle_s"], shape),
                   tokens_per_step=np.full(shape, tau))
    elif p > 1:
        r = pp_decode(dep, p, b, s, layout)
        out = {k: np.broadcast_to(r["step"][k], shape) for k in _STEP_PARTS}
        out.update(draft_s=zero, host_s=zero, hops_s=np.broadcast_to(r["hops_s"], shape),
                   stall_s=np.broadcast_to(r["itl_s"] - r["cycle_s"], shape),
                   iteration_s=np.broadcast_to(r["itl_s"], shape), tokens_per_step=np.ones(shape))
    else:
        st = step_time(dep, b, s, layout)
        out = {k: np.broadcast_to(st[k], shape) for k in _STEP_PARTS}
        out.update(draft_s=zero, host_s=zero, hops_s=zero, stall_s=zero,
                   iteration_s=np.broadcast_to(st["step_s"], shape), tokens_per_step=np.ones(shape),
                   tpot_s=np.broadcast_to(st["step_s"], shape),
                   # the step's own count: b x dep.q_tokens (a deployment of q > 1 query tokens is a bare verify
                   # pass, every query token counted, as step_time counts them)
                   tokens_per_s=np.broadcast_to(st["tokens_per_s"], shape))
        return out
    tpot = out["iteration_s"] / out["tokens_per_step"]
    out.update(tpot_s=tpot, tokens_per_s=np.broadcast_to(b / tpot, shape))
    return out


def token_memory(dep: Deployment, batch, context, layout: str = "TP", *, pp=1, speculative=None
                 ) -> dict[str, np.ndarray]:
    """Memory of the worst rank [B] (:func:`~.decode.memory_per_rank`'s parts and ``feasible``) with ``pp`` stages
    (the worst stage's layers) or speculative decoding (plus ``draft_weights_B`` and ``draft_kv_B``, 0 otherwise,
    already inside ``weights_B`` and ``kv_B``)."""
    p, spec = check_decoding(dep, pp, speculative)
    if spec is not None:
        return spec_memory(dep, spec, batch, context, layout)
    out = dict(pp_memory(dep, p, batch, context, layout))
    zero = np.zeros(np.shape(out["total_B"]))
    out.update(draft_weights_B=zero, draft_kv_B=zero)
    return out


def token_max_batch(dep: Deployment, context, layout: str = "TP", *, pp=1, speculative=None,
                    limit: int = 1 << 20) -> np.ndarray:
    """Largest batch per instance that fits at each context (0 if none) [sequences]."""
    p, spec = check_decoding(dep, pp, speculative)
    if spec is not None:
        return spec_max_batch(dep, spec, context, layout, limit=limit)
    return pp_max_batch(dep, p, context, layout, limit=limit) if p > 1 else max_batch(dep, context, layout,
                                                                                      limit=limit)


def token_max_context(dep: Deployment, batch, layout: str = "TP", *, pp=1, speculative=None,
                      limit: float = 1 << 24) -> np.ndarray:
    """Largest context that fits at each batch, capped at ``limit`` (0 if none) [tokens]: ``limit`` when it fits,
    else the largest whole number of tokens that does. Memory is paged, so for plain decoding and pipelines that is
    the end of the last page that fits (:func:`~.decode.max_context`); speculative decoding also pages the k
    draft tokens of every sequence, so its limit ends k tokens before a page boundary."""
    p, spec = check_decoding(dep, pp, speculative)
    if p == 1 and spec is None:
        return max_context(dep, batch, layout, limit=limit)
    dep.check_layout(layout)
    limit = _check.number("limit", limit, lo=1, hi=MAX_CONTEXT, unit="tokens")
    b, _ = check_batch_context(batch, 1)
    sd = stage_deployment(dep, p) if p > 1 else None

    def fits(s):
        return (spec_memory(dep, spec, b, s, layout) if spec is not None
                else pp_memory(dep, p, b, s, layout, stage=sd))["feasible"]

    whole = fits(np.full(b.shape, limit))
    lo = np.zeros(b.shape)  # tokens that fit (0: none)
    hi = np.full(b.shape, float(math.ceil(limit)))  # tokens that do not (or the limit, which does not)
    while np.any(hi - lo > 1):
        mid = np.floor((lo + hi) / 2)
        ok = fits(np.maximum(mid, 1))
        lo = np.where(ok, mid, lo)
        hi = np.where(ok, hi, mid)
    return np.where(whole, limit, lo)

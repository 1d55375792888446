"""Batched prefill at one point: the record behind ``llmexplore prefill``.

B prompts of S tokens each, P of them a cached prefix, prefilled together in one tensor-parallel forward pass
on T ranks (:func:`llmexplore.models.step.prefill.prefill_time` with ``batch = B``): the pass's time by part, its
throughput in new prompt tokens per second, FLOPs and MFU, and whether the deployment holds the batch's KV cache
in memory (:func:`llmexplore.models.step.decode.memory_per_rank` at B sequences of S tokens, TP layout: weights,
paged KV, a decode step's activations, reserve, against the usable HBM). The transient activations of the
prefill itself are not counted: serving engines bound them by chunking long prompts.
"""

from __future__ import annotations

from .. import _check
from ..errors import SpecError
from ..models.step import decode as att
from ..deployment import MAX_RANKS
from ..models.step.engine import MAX_BATCH, MAX_CONTEXT, Deployment
from ..models.step.prefill import prefill_time
from . import tidy
from .layouts import _reason

__all__ = ["setup", "point_summary", "PARTS"]

#: the parts of the pass [s], in the order they are reported; they add up to ``prefill_s``
PARTS = ("attention_s", "ffn_s", "head_s", "comm_s", "overhead_s")


def setup(model="llama-3-70b", gpu="h100-sxm", *, ranks: int = 8, weight_dtype: str | None = None,
          kv_dtype: str = "bf16", runtime="default", sampler: str = "fused") -> Deployment:
    """The TP-``ranks`` deployment that prefills (preset names or specs, validated; errors name the argument:
    ``ranks (6) must divide ...``, ``weight_dtype must be a dtype h100-sxm supports, got 'fp4' ...``)."""
    ranks = _check.integer("ranks", ranks, lo=1, hi=MAX_RANKS)
    dep = Deployment.build(model, gpu, ranks, runtime=runtime, weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                           sampler=sampler)
    dep.hardware.check_dtype(dep.weight_dtype, "weight_dtype")  # fp4 weights need FP4 tensor cores
    return dep


def point_summary(dep: Deployment, prompt_tokens: int, *, batch: int = 1, prefix_tokens: int = 0) -> dict:
    """One batched prefill (plain values): ``batch`` prompts of ``prompt_tokens`` tokens, ``prefix_tokens`` of
    each cached, in one forward pass.

    Keys: the point (``batch``, ``prompt_tokens``, ``prefix_tokens``, ``new_tokens`` per prompt), the pass
    (``prefill_ms``: every prompt's first token comes out after it; ``per_prompt_ms`` = ``prefill_ms`` /
    ``batch``, the GPU time each prompt costs), ``tokens_per_s`` (new prompt tokens per second),
    ``prompts_per_s``, ``flops`` (of the batch), ``mfu``, ``achieved_TFLOPS_per_gpu``, the parts
    ``attention_ms`` (``core_ms`` of it in the attention core), ``ffn_ms``, ``head_ms``, ``comm_ms``,
    ``overhead_ms``, and memory per rank (``weights_GB``, ``kv_GB``, ``activations_GB``, ``reserve_GB``,
    ``total_GB``, ``usable_GB``, ``feasible``, ``reason``: why it does not fit, or '').
    """
    S = _check.integer("prompt_tokens", prompt_tokens, lo=1, hi=MAX_CONTEXT, unit="tokens")
    B = _check.integer("batch", batch, lo=1, hi=MAX_BATCH)
    P = _check.integer("prefix_tokens", prefix_tokens, lo=0, hi=MAX_CONTEXT, unit="tokens")
    if P >= S:
        raise SpecError(f"prefix_tokens must be less than prompt_tokens ({S:,}: at least one new token to "
                        f"prefill), got {P}")
    r = prefill_time(dep, S, P, batch=B)
    mem = att.memory_per_rank(dep, B, S, "TP")
    t = float(r["prefill_s"])
    flops = float(r["flops"])
    feasible = bool(mem["feasible"])
    out = {"batch": B, "prompt_tokens": S, "prefix_tokens": P, "new_tokens": S - P,
           **tidy({"prefill_s": t, "per_prompt_s": t / B}, scalar=True),
           "tokens_per_s": float(r["tokens_per_s"]), "prompts_per_s": B / t,
           "flops": flops, "mfu": float(r["mfu"]), "achieved_TFLOPS_per_gpu": flops / t / dep.ranks / 1e12,
           **tidy({k: r[k] for k in (*PARTS[:1], "core_s", *PARTS[1:])}, scalar=True),
           **tidy(mem, keep=["weights_B", "kv_B", "activations_B", "reserve_B", "total_B", "usable_B"],
                  scalar=True),
           "feasible": feasible}
    out["reason"] = _reason(out["total_GB"], out["usable_GB"], feasible).item()
    return out

"""Prefill time from per-kernel rooflines, shared with decode (docs/models.md §2, §4.3, §4.6).

A prefill of a prompt of S tokens with a cached prefix of P tokens is one forward step of a single sequence
with q = S - P new tokens attending on average to P + q/2 context tokens (causal), so it reuses the decode
step model of :mod:`.decode` (TP layout) with ``q_tokens = S - P`` and logits for the last token only,
vectorised over prompt lengths. A batch of B such prompts is the same step with B sequences (one forward pass:
the weights are streamed once for the B (S - P) tokens, each prompt's attention core is paid, B logits).
Its FLOPs (per prompt) then equal the closed form of docs/models.md §2

    F = 2 N_body (S - P) + L h_q (d_qk + d_v) (S^2 - P^2) + 2 V H

(``prefill_flops``), and achieved utilisation (MFU) *emerges* from the per-kernel rooflines, the TP
AllReduces of (S - P) H b_a per layer and the fixed overheads instead of being a typed constant.

Colocated serving with chunked prefill (docs/models.md §4.6) mixes a decode batch and a prefill chunk in one step:
its GEMMs stream the weights once for B + C tokens, and each attention core is paid separately
(:func:`mixed_step_time`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ... import _check
from ...errors import SpecError
from ...specs import ModelSpec
from .decode import layers_core_s, step_time
from .engine import MAX_BATCH, MAX_CONTEXT, Deployment

__all__ = ["prefill_flops", "body_params_active", "prefill_time", "mixed_step_time", "prefill_mfu"]


def body_params_active(model: ModelSpec) -> float:
    """Matmul parameters each token passes through, without embeddings, LM head and norms [params].

    For MoE only the top-k routed and the shared experts count (plus the router).
    """
    attn = sum(model.attn_params_per_layer.values())
    moe = ((model.experts_per_token + model.shared_experts) * model.expert_params + model.hidden
           * model.routed_experts) if model.is_moe else 0
    return model.layers * attn + model.dense_layers * model.ffn_params_dense_layer + model.moe_layers * moe


def prefill_flops(model: ModelSpec, prompt_tokens, prefix_tokens=0) -> np.ndarray:
    """FLOPs of a causal prefill of ``prompt_tokens`` with ``prefix_tokens`` already cached [FLOP].

    Llama-3-70B at 4096 tokens: the attention term is 3.8% of the total (docs/models.md §4.3). MLA prefill runs
    un-absorbed: d_qk = d_n + d_r = 192, d_v = 128.
    """
    S, P = _check_prompt(prompt_tokens, prefix_tokens)
    per_pair = model.heads * (model.qk_head_dim + model.o_head_dim)
    attn = (model.layers - model.sliding_layers) * per_pair * (S * S - P * P)
    if model.sliding_layers:  # each new token attends to at most the window before it
        W = float(model.sliding_window)
        attn = attn + model.sliding_layers * per_pair * 2.0 * (_window_pairs(S, W) - _window_pairs(P, W))
    return 2.0 * body_params_active(model) * (S - P) + attn + 2.0 * model.vocab * model.hidden


def _window_pairs(n, W: float) -> np.ndarray:
    """Query-key pairs of a causal sliding-window prefix of n tokens with window W (each token attends to at most W
    keys): n^2 / 2 within the window, then W per token (the same convention as the full layers' S^2 / 2)."""
    n = np.asarray(n, dtype=float)
    return np.where(n <= W, n * n / 2.0, W * W / 2.0 + W * (n - W))


def _check_prompt(prompt_tokens, prefix_tokens) -> tuple[np.ndarray, np.ndarray]:
    """Validated (S, P) float arrays: integer prompts in [1, 2**30], prefixes in [0, S)."""
    S = _check.real_array("prompt_tokens", prompt_tokens, lo=1, hi=MAX_CONTEXT, integer=True)
    P = _check.real_array("prefix_tokens", prefix_tokens, lo=0, hi=MAX_CONTEXT, integer=True)
    try:
        shape = np.broadcast_shapes(S.shape, P.shape)
    except ValueError:
        raise SpecError(f"prompt_tokens (shape {S.shape}) and prefix_tokens (shape {P.shape}) must broadcast "
                        "against each other") from None
    if np.any(np.broadcast_to(P, shape) >= np.broadcast_to(S, shape)):
        raise SpecError("prefix_tokens must be < prompt_tokens (at least one new token to prefill)")
    return S, P


def prefill_time(dep: Deployment, prompt_tokens, prefix_tokens=0, *, batch=1) -> dict[str, np.ndarray]:
    """Time of one prefill forward pass on the deployment's T ranks (tensor parallel) [s], by part.

    ``batch`` prompts of ``prompt_tokens`` tokens each, ``prefix_tokens`` of which are cached, run together as
    one step of ``batch`` sequences (batch 1, the default: a single prompt). Returns the
    :func:`.decode.step_time` parts (``step_s`` is the whole pass; ``tokens_per_s`` the new prompt tokens
    prefilled per second) for each point, plus ``prefill_s`` (= ``step_s``), ``flops`` (of the whole batch:
    ``batch`` x :func:`prefill_flops`) and ``mfu`` (FLOPs / (T * dense peak * time)). Broadcasts
    ``prompt_tokens``, ``prefix_tokens`` and ``batch`` (integers in [1, 2**24]) in one vectorised step
    evaluation: q = S - P query tokens per prompt attending on average to P + q/2 context tokens, logits for
    each prompt's last token only.
    """
    S, P = np.broadcast_arrays(*_check_prompt(prompt_tokens, prefix_tokens))
    B = _check.real_array("batch", batch, lo=1, hi=MAX_BATCH, integer=True)
    _check.grid_size("prompt_tokens, prefix_tokens and batch", S.shape, B.shape)
    q = S - P
    d1 = dataclasses.replace(dep, q_tokens=1, logits_tokens=None, context_cv=0.0)
    ctx = np.maximum(P + q / 2.0, 1.0)  # a 1-token prompt attends to itself
    out = {k: np.array(v, dtype=float) for k, v in step_time(d1, B, ctx, "TP", q_tokens=q, logits_tokens=1).items()}
    out["prefill_s"] = out["step_s"]
    out["flops"] = np.broadcast_to(B * prefill_flops(dep.model, S, P), out["step_s"].shape).astype(float)
    out["mfu"] = prefill_mfu(dep, out["flops"], out["step_s"])
    return out


def prefill_mfu(dep: Deployment, flops, seconds) -> np.ndarray:
    """Model FLOPs utilisation: flops / (T * dense peak of the weight dtype * seconds)."""
    peak = dep.ranks * dep.hardware.peak_TFLOPS(dep.weight_dtype) * 1e12
    return np.asarray(flops, dtype=float) / (peak * np.asarray(seconds, dtype=float))


def mixed_step_time(dep: Deployment, decode_batch, decode_context, chunk_tokens, chunk_context) -> dict:
    """One colocated iteration: ``decode_batch`` decodes at ``decode_context`` plus a prefill chunk of
    ``chunk_tokens`` new tokens whose prompt already has ``chunk_context`` tokens before the chunk [s].

    GEMMs, FFN, collectives and overheads are paid once for the B + C tokens (a decode step of B + C
    one-token sequences without its attention core), the LM head for the B decodes and the chunk's last
    token, and the two attention cores separately: the decode core at (B, s) and the chunk's causal core
    (C queries over chunk_context + C/2 keys on average, KV read once). Broadcasts over all four inputs.
    Returns ``step_s``, ``decode_core_s``, ``chunk_core_s``.
    """
    B = _check.real_array("decode_batch", decode_batch, lo=0, hi=1 << 24, integer=True)
    C = _check.real_array("chunk_tokens", chunk_tokens, lo=0, hi=MAX_CONTEXT, integer=True)
    if np.any(B + C < 1):
        raise SpecError("decode_batch and chunk_tokens must be >= 0 with at least one token, got "
                        f"{float(np.min(B)):g}, {float(np.min(C)):g}")
    d1 = dataclasses.replace(dep, q_tokens=1, logits_tokens=None, context_cv=0.0)
    m = np.maximum(B + C, 1.0)
    shared = step_time(d1, m, 1.0, "TP")
    lm = step_time(d1, B + (C > 0), 1.0, "TP")
    base = (shared["step_s"] - shared["core_s"] - shared["head_s"] - shared["comm_head_s"]
            + lm["head_s"] + lm["comm_head_s"])
    dec = np.where(B > 0, step_time(d1, np.maximum(B, 1.0), decode_context, "TP")["core_s"], 0.0)
    ctx = _check.real_array("chunk_context", chunk_context, lo=0, hi=MAX_CONTEXT) + C / 2.0
    chunk = np.where(C > 0, layers_core_s(d1, 1, np.maximum(ctx, 1.0), "TP", np.maximum(C, 1.0)), 0.0)
    return {"step_s": base + dec + chunk, "decode_core_s": dec, "chunk_core_s": chunk}

"""Speculative decoding on the step engine: draft, verify, and the tokens a step emits (docs/models.md §1.4).

One speculative decode iteration of a batch of B sequences at context s (each sequence on its own):

1. **Draft.** ``draft_tokens`` k candidates per sequence. An MTP module (DeepSeek-V3's extra layer) or an
   EAGLE-style draft head is one decoder layer of its own: the first draft step runs it over the k + 1
   tokens the last verify step produced (SGLang's draft-extend after verify, which also writes the draft
   layer's KV), the remaining k - 1 steps one token each (``draft_width`` per sequence for a tree), each
   with an LM head (the target's, shared, or the draft's own ``draft_vocab``) and the fuse projection that
   feeds the target's hidden state in (MTP ``eh_proj`` 2H -> H; EAGLE-3's fc over three layers' features,
   3H -> H). N-gram lookup drafts on the CPU (``host_ms`` per step, no GPU work).
2. **Verify.** The target model's forward over W = ``verify_width`` tokens per sequence (k + 1 for a chain):
   the step engine's decode step with q_tokens = W and W logits per sequence, so its GEMMs see B W rows and its
   attention core reads the KV once for the W queries (measured flat to within 8 % for W <= 8 on H200:
   data/kernels/own_verify_attention_h200.csv). As B grows the GEMMs leave the memory-bound regime sooner
   with W rows per sequence, so the speed-up falls with batch size.
3. **Emit.** tau = ``tokens_per_step`` tokens per sequence on average (accepted drafts plus the target's own).

So TPOT = (t_draft + t_verify) / tau and the throughput B tau / (t_draft + t_verify); the speed-up is the
plain decode step's time per token over that. Memory per rank adds the draft layer's weights (less the
shared embedding and, for MTP, the shared LM head) and KV (one layer at the same context), the verify pass's
activations over B W tokens, and KV slots for the W - 1 draft tokens of every sequence.

Assumptions: acceptance does not depend on batch or context (it is a property of model, draft and traffic:
the preset's ``conditions``); the draft's step overhead (scheduling) is charged once per iteration, with the
verify step's; rejected drafts' KV slots are reused (no fragmentation).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ... import _check
from ...errors import SpecError
from ...specs import ModelSpec, SpecDecode
from .decode import memory_per_rank, step_time
from .engine import EMB_BYTES, Deployment, check_batch_context, gemm_s, resolve_speculative

__all__ = ["resolve_spec", "check_spec", "with_accepted_length", "user_spec", "draft_model", "draft_deployment", "spec_step", "spec_memory",
           "spec_max_batch", "FUSE_WIDTH", "SAME_LENGTH_TOKENS"]

#: input width of the fuse projection, in hidden sizes: MTP's eh_proj concatenates the token's embedding and
#: the target's last hidden state (2H -> H, DeepSeek-V3 modeling code); EAGLE-3's fc fuses three of the target's
#: layers (3H -> H, arXiv 2503.01840 §3); n-gram has none
FUSE_WIDTH = {"mtp": 2, "draft_head": 3, "ngram": 0}

#: accepted lengths [tokens per verify step] closer than this are one (sweep grids keep 0.01 from a spec's own)
SAME_LENGTH_TOKENS = 5e-3


def resolve_spec(spec) -> SpecDecode | None:
    """A :class:`~llmexplore.specs.SpecDecode` from a preset name or a spec; None stays None (no speculation)."""
    return resolve_speculative(spec)


def with_accepted_length(spec: SpecDecode, accepted_length) -> SpecDecode:
    """``spec`` with the user's mean tokens per verify step in place of its acceptance (None: ``spec`` as is):
    the draft stays the preset's, the conditions say the acceptance is the user's. SpecError naming
    ``accepted_length`` outside [1, draft_tokens + 1]."""
    if accepted_length is None:
        return spec
    tau = _check.number("accepted_length", accepted_length, lo=1.0, hi=spec.draft_tokens + 1.0, unit="tokens")
    return spec.replace(accepted_length=tau, acceptance=(),
                        conditions=f"given by the user for the draft of preset {spec.name}")


def user_spec(model: ModelSpec, speculative, accepted_length=None) -> SpecDecode | None:
    """What a user asked for: ``speculative`` (a preset name, a SpecDecode or None) checked against ``model``, with
    the mean accepted length ``accepted_length`` in place of its acceptance when given (:func:`with_accepted_length`).
    SpecError for an accepted length without a speculative preset: it describes a draft, and there is none."""
    spec = resolve_spec(speculative)
    if spec is None:
        if accepted_length is not None:
            raise SpecError(f"accepted_length must come with speculative (the preset whose draft it describes), got "
                            f"{accepted_length!r} without one")
        return None
    check_spec(model, spec)
    return with_accepted_length(spec, accepted_length)


def check_spec(model: ModelSpec, spec: SpecDecode) -> None:
    """SpecError unless ``spec`` can run on ``model``: MTP needs the model's own MTP module."""
    if spec.method == "mtp" and model.mtp_layers < 1:
        raise SpecError(f"speculative {spec.name!r} drafts with an MTP module, and {model.name} has none "
                        f"(mtp_layers 0); use a draft head (method 'draft_head') or n-gram lookup")


def draft_model(model: ModelSpec, spec: SpecDecode) -> ModelSpec:
    """The draft as a one-layer model: MTP is one layer of the target's own kind (an MoE layer for an MoE
    model, DeepSeek-V3's MTP module); a draft head is one dense decoder layer with the target's attention and
    dense FFN width (EAGLE heads are Llama decoder layers sized like the target's), with its own vocabulary
    ``draft_vocab`` if given. SpecError for n-gram (no draft model)."""
    check_spec(model, spec)
    if spec.method == "ngram":
        raise SpecError(f"speculative {spec.name!r} drafts by n-gram lookup: it has no draft model")
    moe = spec.method == "mtp" and model.is_moe
    return dataclasses.replace(model, name=f"{model.name}+{spec.method}", layers=1, moe_layers=1 if moe else 0,
                               vocab=spec.draft_vocab or model.vocab, mtp_layers=0, sliding_layers=0,
                               sliding_window=0,  # one draft layer, attending over the whole context
                               display_name=f"{model.label} {spec.method} draft")


def draft_deployment(dep: Deployment, spec: SpecDecode) -> Deployment | None:
    """The target deployment with the draft model in its place (same GPUs, ranks, dtypes and runtime: the
    draft runs on the target's ranks, as SGLang, vLLM and TensorRT-LLM place MTP and EAGLE drafts); None for
    n-gram. Draft heads are dense, so their deployment drops the MoE options."""
    if spec.method == "ngram":
        check_spec(dep.model, spec)
        return None
    dm = draft_model(dep.model, spec)
    kw = {} if dm.is_moe else dict(moe_ep=None, moe_dispatch="gather", moe_redundant=0, two_batch_overlap=False)
    return dataclasses.replace(dep, model=dm, q_tokens=1, logits_tokens=None, **kw)


def _fuse_s(dep: Deployment, spec: SpecDecode, tokens) -> np.ndarray:
    """The fuse projection of the draft's input (FUSE_WIDTH hidden sizes -> H) over ``tokens`` rows [s]."""
    w = FUSE_WIDTH[spec.method]
    H = dep.model.hidden
    return gemm_s(dep, tokens, w * H, H, b_w=EMB_BYTES) if w else np.zeros_like(np.asarray(tokens, float))


def spec_step(dep: Deployment, spec, batch, context, layout: str = "TP", *, plain: bool = True
              ) -> dict[str, np.ndarray]:
    """One speculative decode iteration on the worst rank [s], and what it yields (module docstring).

    ``batch`` [sequences] and ``context`` [tokens] broadcast. Returns arrays ``cycle_s`` = ``draft_s`` +
    ``verify_s`` (+ ``host_s``, the CPU draft time of n-gram lookup), ``plain_s`` (the plain decode step at
    the same batch and context), ``tokens_per_step`` (tau), ``tpot_s`` = cycle / tau, ``tokens_per_s`` = batch
    tau / cycle, and ``speedup`` = plain_s tau / cycle_s (above 1: speculation pays); ``verify`` is the verify
    pass's :func:`~.decode.step_time` (its parts). ``plain`` False leaves the plain step out (``plain_s`` and
    ``speedup`` NaN): what pricing the side alone needs."""
    spec = resolve_spec(spec)
    if spec is None:
        raise SpecError("speculative must name a speculative-decoding preset or be a SpecDecode")
    check_spec(dep.model, spec)
    b, s = check_batch_context(batch, context)
    W = spec.verify_width
    vparts = step_time(dep, b, s, layout, q_tokens=W, logits_tokens=W)
    verify = vparts["step_s"]
    plain = step_time(dep, b, s, layout)["step_s"] if plain else np.full(np.shape(verify), np.nan)
    ddep = draft_deployment(dep, spec)
    draft = np.zeros(np.broadcast_shapes(b.shape, s.shape))
    if ddep is not None:
        k = spec.draft_tokens
        first = step_time(ddep, b, s, layout, q_tokens=W, logits_tokens=1)
        draft = draft + first["step_s"] - first["overhead_s"] + _fuse_s(dep, spec, b * W)
        if k > 1:
            w = spec.draft_width
            nxt = step_time(ddep, b, s + W, layout, q_tokens=w, logits_tokens=w)
            draft = draft + (k - 1) * (nxt["step_s"] - nxt["overhead_s"] + _fuse_s(dep, spec, b * w))
    host = np.full_like(draft, spec.host_ms * 1e-3)
    cycle = verify + draft + host
    tau = spec.tokens_per_step
    shape = np.broadcast_shapes(b.shape, s.shape)
    return {"cycle_s": np.broadcast_to(cycle, shape), "verify_s": np.broadcast_to(verify, shape),
            "draft_s": np.broadcast_to(draft, shape), "host_s": np.broadcast_to(host, shape),
            "plain_s": np.broadcast_to(plain, shape), "tokens_per_step": np.full(shape, tau),
            "tpot_s": np.broadcast_to(cycle / tau, shape), "tokens_per_s": np.broadcast_to(b * tau / cycle, shape),
            "speedup": np.broadcast_to(plain * tau / cycle, shape), "verify": vparts}


def _draft_weight_bytes(dep: Deployment, ddep: Deployment, spec: SpecDecode, layout: str) -> float:
    """Draft weights per rank [B]: the draft layer (attention, FFN or MoE, norms) and the fuse projection;
    a draft head's own LM head (``draft_vocab``); the embedding (and MTP's LM head) are the target's."""
    w = ddep.weight_bytes(layout)
    own = w["attention"] + w["ffn"] + w["norms"]
    H = dep.model.hidden
    own += FUSE_WIDTH[spec.method] * H * H * EMB_BYTES  # replicated fuse projection [assumption: BF16, whole]
    if spec.method == "draft_head":  # its own LM head, vocab-parallel like the target's
        own += ddep.model.vocab * H * EMB_BYTES / (1 if layout == "DPA" and dep.dp_lm_head else dep.ranks)
    return float(own)


def spec_memory(dep: Deployment, spec, batch, context, layout: str = "TP") -> dict[str, np.ndarray]:
    """Memory of the worst rank with speculative decoding [B] (:func:`~.decode.memory_per_rank`'s parts and
    ``feasible``), plus ``draft_weights_B`` and ``draft_kv_B``: the target's KV at the context plus the
    verify pass's W - 1 draft slots per sequence and its activations over W tokens per sequence, and the
    draft layer's weights and KV (module docstring)."""
    spec = resolve_spec(spec)
    check_spec(dep.model, spec)
    b, s = check_batch_context(batch, context)
    W = spec.verify_width
    tgt = memory_per_rank(dataclasses.replace(dep, q_tokens=W, logits_tokens=None), b, s + (W - 1), layout)
    ddep = draft_deployment(dep, spec)
    shape = np.broadcast_shapes(b.shape, s.shape)
    if ddep is None:
        dw, dkv = 0.0, np.zeros(shape)
    else:
        dw = _draft_weight_bytes(dep, ddep, spec, layout)
        dkv = np.asarray(memory_per_rank(ddep, b, s + (W - 1), layout)["kv_B"], dtype=float)
    weights = tgt["weights_B"] + dw
    kv = tgt["kv_B"] + dkv
    act = tgt["activations_B"]
    total = weights + kv + act + dep.reserve_B
    budget = dep.kv_budget_B(weights, act)
    ok = total <= dep.usable_B if dep.runtime.memory_fraction_of == "total" else kv <= budget
    out = {k: np.broadcast_to(v, shape) for k, v in tgt.items()}
    out.update(weights_B=np.broadcast_to(weights, shape), kv_B=np.broadcast_to(kv, shape),
               total_B=np.broadcast_to(total, shape), kv_budget_B=np.broadcast_to(budget, shape),
               feasible=np.broadcast_to(ok, shape), draft_weights_B=np.full(shape, dw),
               draft_kv_B=np.broadcast_to(dkv, shape))
    return out


def spec_max_batch(dep: Deployment, spec, context, layout: str = "TP", *, limit: int = 1 << 20) -> np.ndarray:
    """Largest batch that fits with speculative decoding at each context (0 if none) [sequences]: an integer
    bisection on :func:`spec_memory` (memory is non-decreasing in the batch)."""
    spec = resolve_spec(spec)
    _, s = check_batch_context(1, context)
    lo = np.zeros(s.shape)
    hi = np.full(s.shape, float(limit) + 1)
    while np.any(hi - lo > 1):
        mid = np.floor((lo + hi) / 2)
        ok = spec_memory(dep, spec, np.maximum(mid, 1), s, layout)["feasible"]
        lo = np.where(ok, mid, lo)
        hi = np.where(ok, hi, mid)
    return np.minimum(lo, limit)

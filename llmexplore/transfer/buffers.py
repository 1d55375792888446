"""Transfer plans built from a model preset and the two layouts.

A paged KV cache holds, per layer, one page item per buffer and page on each rank:

* GQA/MHA: two buffers, K and V, sharded on the KV-head axis. A page item is ``local_heads x page_size x
  head_dim`` elements, heads outermost (FlashInfer's HND layout), so one head is one contiguous logical unit of
  ``page_size * head_dim * dtype_bytes`` bytes. With TP <= h_kv each rank holds h_kv / TP heads (TP must
  divide h_kv); with TP > h_kv each head sits on a replica group of TP / h_kv ranks (TP must be a multiple of
  h_kv), the vLLM/SGLang rule ``max(1, h_kv // TP)``.
* MLA: one buffer, the compressed latent plus the RoPE key (``kv_lora_rank + qk_rope_head_dim`` elements per
  token), replicated on every TP rank: a ``replicated`` buffer of one logical unit, the whole page item. It
  travels as ``target_k`` (the runtime has no separate V).
* Speculative decoding (``draft_layers``): the draft model's K/V (or latent) as ``draft_k``/``draft_v``
  buffers of the same geometry (an assumption that holds for MTP and EAGLE heads, which reuse the target's
  attention shape).

Every layer has the same buffers, so the plan of one layer is the plan of all: :func:`model_transfer` lists
the buffers of one target layer (and one draft layer) and records how many layers each stands for
(``layer_repeat``), which the cost multiplies in. A runtime that registers every layer's buffers
(``buffer_index`` = layer x 2 + K/V) gets the same fragments repeated per layer.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import _check
from ..errors import SpecError, UnsupportedPDLayoutError
from ..models.step import kv_transfer
from ..specs import ModelSpec
from ..units import dtype_bytes
from .layout import MAX_WORLD, BufferKind, BufferLayout, ParallelLayout
from .planner import PDTransferPlanner

__all__ = ["ModelTransfer", "model_buffers", "model_transfer", "MAX_PAGE_TOKENS"]

#: largest page size [tokens] accepted (vLLM pages are 16, SGLang 1-64, TensorRT-LLM up to 128)
MAX_PAGE_TOKENS = 4096


def _side_check(model: ModelSpec, name: str, tp: int) -> int:
    """``tp`` if it is an integer in [1, 1024] that divides or is a multiple of the KV heads (the rule of the
    link model, :func:`llmexplore.models.step.kv_transfer.kv_request_bytes`), said as a planner error."""
    tp = _check.integer(name, tp, lo=1, hi=1024)
    try:
        return kv_transfer._check_tp(name, tp, model)
    except SpecError as exc:
        raise UnsupportedPDLayoutError(str(exc)) from None


def model_buffers(model: ModelSpec, tp: int, *, page_size: int = 16, kv_dtype: str = "bf16", draft_layers: int = 0,
                  name: str = "tp") -> tuple[BufferLayout, ...]:
    """The buffers of one layer (and one draft layer if ``draft_layers``) on a side of tensor-parallel size
    ``tp`` [bytes per page]; ``name`` is the field named in errors (e.g. ``prefill_tp``)."""
    tp = _side_check(model, name, tp)
    page_size = _check.integer("page_size", page_size, lo=1, hi=MAX_PAGE_TOKENS, unit="tokens")
    draft_layers = _check.integer("draft_layers", draft_layers, lo=0, hi=64)
    el = dtype_bytes(kv_dtype, "kv_dtype")
    kinds = [(BufferKind.TARGET_K, BufferKind.TARGET_V)]
    if draft_layers:
        kinds.append((BufferKind.DRAFT_K, BufferKind.DRAFT_V))
    out: list[BufferLayout] = []
    for k_kind, v_kind in kinds:
        if model.is_mla:
            width = model.kv_lora_rank + model.qk_rope_head_dim
            item = page_size * width * el
            _whole("MLA latent page", item)
            out.append(BufferLayout(len(out), k_kind, "replicated", 1, page_size, int(item), int(item)))
            continue
        h = model.kv_heads
        unit = page_size * model.head_dim * el
        _whole("one head's page", unit)
        group = tp // h if tp > h else 1
        local = max(1, h // tp)
        for kind in (k_kind, v_kind):
            out.append(BufferLayout(len(out), kind, "kv_head", h, page_size, int(unit), int(unit) * local, group))
    return tuple(out)


def _whole(what: str, nbytes: float) -> None:
    if nbytes != int(nbytes):
        raise SpecError(f"page_size x element bytes must give whole bytes per {what}, got {nbytes:g} B; "
                        f"with fp4 (NVFP4: 16 elements and their scale in 9 B) use a page_size that makes "
                        f"the page a multiple of 16 elements")


@dataclass(frozen=True)
class ModelTransfer:
    """A model's transfer planner with what the cost needs: ``layer_repeat[i]`` is how many layers buffer i
    stands for (the model's layers for target buffers, ``draft_layers`` for draft ones)."""

    model: ModelSpec
    planner: PDTransferPlanner
    layer_repeat: tuple[int, ...]
    page_size: int
    kv_dtype: str

    @property
    def prefill_layout(self) -> ParallelLayout:
        return self.planner.prefill_layout

    @property
    def decode_layout(self) -> ParallelLayout:
        return self.planner.decode_layout

    @property
    def label(self) -> str:
        p, d = self.prefill_layout, self.decode_layout
        return (f"TP{p.tp_size_per_dp}" + (f"xDP{p.dp_size}" if p.dp_size > 1 else "") + " → "
                + f"TP{d.tp_size_per_dp}" + (f"xDP{d.dp_size}" if d.dp_size > 1 else ""))


def model_transfer(model: ModelSpec, *, prefill_tp: int, decode_tp: int, prefill_dp: int = 1, decode_dp: int = 1,
                   page_size: int = 16, kv_dtype: str = "bf16", draft_layers: int = 0,
                   dp_pairing: str = "index") -> ModelTransfer:
    """The transfer plan of ``model`` from prefill TP x DP to decode TP x DP (:class:`ModelTransfer`).
    Raises :class:`UnsupportedPDLayoutError` when a TP size does not fit the KV heads or the DP groups do not
    pair (see :class:`~.planner.PDTransferPlanner`)."""
    prefill_dp = _check.integer("prefill_dp", prefill_dp, lo=1, hi=1024)
    decode_dp = _check.integer("decode_dp", decode_dp, lo=1, hi=1024)
    for side, tp, dp in (("prefill", prefill_tp, prefill_dp), ("decode", decode_tp, decode_dp)):
        if isinstance(tp, int) and tp * dp > MAX_WORLD:
            raise UnsupportedPDLayoutError(f"{side}_tp x {side}_dp must be at most {MAX_WORLD:,} ranks, got "
                                           f"{tp} x {dp} = {tp * dp:,}")
    pb = model_buffers(model, prefill_tp, page_size=page_size, kv_dtype=kv_dtype, draft_layers=draft_layers,
                       name="prefill_tp")
    db = model_buffers(model, decode_tp, page_size=page_size, kv_dtype=kv_dtype, draft_layers=draft_layers,
                       name="decode_tp")
    planner = PDTransferPlanner(
        prefill_layout=ParallelLayout("prefill", int(prefill_tp) * prefill_dp, prefill_dp),
        decode_layout=ParallelLayout("decode", int(decode_tp) * decode_dp, decode_dp),
        prefill_buffers=pb, decode_buffers=db, dp_pairing=dp_pairing)
    repeat = tuple(model.layers if b.buffer_kind in (BufferKind.TARGET_K, BufferKind.TARGET_V) else draft_layers
                   for b in pb)
    return ModelTransfer(model, planner, repeat, int(page_size), kv_dtype)

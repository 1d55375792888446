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
* Speculative decoding (``draft_layers``, or ``speculative``: a preset of ``data/speculative.yaml``): the draft
  model's K/V (or latent) as ``draft_k``/``draft_v`` buffers of the same geometry. It holds for MTP and EAGLE
  heads, which reuse the target's attention shape (:func:`~llmexplore.models.step.speculative.draft_model`: one
  decoder layer with the target's attention; DeepSeek-V3's MTP module is one MLA layer, 576 elements per token).
  What moves follows SGLang's PD disaggregation with ``--speculative-algorithm EAGLE`` (MTP runs as EAGLE there):
  the prefill server runs the draft over the prompt (draft-extend) and registers the draft pool's buffers after
  the target's, "We should also transfer draft model kv cache. The indices are always shared with a target
  model" (``python/sglang/srt/disaggregation/prefill.py`` ``_init_kv_manager``); with the last chunk the last
  pipeline rank sends each decode rank it feeds the request's metadata buffers, which for speculative decoding
  carry the draft's hidden state of the last token (``hidden_size`` values in the model dtype) and its top-k
  (``output_topk_p``: 16 float32, ``output_topk_index``: 16 int64; ``disaggregation/utils.py``
  ``MetadataBuffers``, "For PD + spec decode"; ``mooncake/conn.py`` ``send_aux``), one write per buffer. N-gram
  lookup has no draft model: no draft KV and no hidden state (SGLang's NGRAM has no draft pool). The acceptance
  does not enter: it changes the decode steps after the transfer, not the bytes of the prompt.
* Pipelines (``prefill_pp``, ``decode_pp``): each side's layers split over its stages
  (:func:`llmexplore.models.step.pipeline.stage_layers`), the draft layer on the last stage
  (:mod:`.pipeline`).

Every layer has the same buffers, so the plan of one layer is the plan of all: :func:`model_transfer` lists
the buffers of one target layer (and one draft layer) and records how many layers each stands for
(``layer_repeat``), which the cost multiplies in. A runtime that registers every layer's buffers
(``buffer_index`` = layer x 2 + K/V) gets the same fragments repeated per layer; with pipelines each stage pair
repeats them for the layers it shares (:class:`~.pipeline.PipelineTransferPlanner`).
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import _check
from ..errors import SpecError, UnsupportedPDLayoutError
from ..models.step import kv_transfer
from ..models.step.per_token import check_decoding
from ..models.step.pipeline import stage_layers
from ..models.step.speculative import draft_model, resolve_spec
from ..specs import ModelSpec, SpecDecode
from ..units import dtype_bytes
from .layout import MAX_WORLD, BufferKind, BufferLayout, ParallelLayout
from .pipeline import PipelineTransferPlanner
from .planner import PDTransferPlanner

__all__ = ["ModelTransfer", "model_buffers", "model_transfer", "spec_state_bytes", "check_side", "MAX_PAGE_TOKENS",
           "HIDDEN_STATE_BYTES", "SPEC_TOPK_SLOTS", "SPEC_STATE_WRITES"]

#: largest page size [tokens] accepted (vLLM pages are 16, SGLang 1-64, TensorRT-LLM up to 128)
MAX_PAGE_TOKENS = 4096
#: bytes of one hidden-state value in SGLang's metadata buffer (``hidden_states_dtype``, the model dtype)
#: [assumption: BF16, the dtype every preset's activations use]
HIDDEN_STATE_BYTES = 2
#: top-k slots of the draft's first token SGLang's metadata buffer carries (``output_topk_p`` float32 and
#: ``output_topk_index`` int64, 16 each: ``disaggregation/utils.py`` ``MetadataBuffers``)
SPEC_TOPK_SLOTS = 16
#: writes of the speculative state per (sender, receiver) pair: one per metadata buffer (hidden state, top-k
#: probabilities, top-k indices; ``send_aux`` posts one block per buffer)
SPEC_STATE_WRITES = 3


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


def spec_state_bytes(model: ModelSpec, spec: SpecDecode | None) -> int:
    """Bytes of the speculative state one prefill rank sends one decode rank with the request's last chunk
    [B]: the draft's hidden state of the last token and its top-k (module docstring); 0 without a draft model
    (no speculation, or n-gram lookup)."""
    if spec is None or spec.method == "ngram":
        return 0
    return int(model.hidden * HIDDEN_STATE_BYTES + SPEC_TOPK_SLOTS * (4 + 8))


@dataclass(frozen=True)
class _Side:
    """The two fields of a Deployment that :func:`~llmexplore.models.step.per_token.check_decoding` reads (the
    model and the ranks of one stage): a side of a transfer plan has no GPU or runtime."""

    model: ModelSpec
    ranks: int


def check_side(model: ModelSpec, side: str, pp, tp: int, speculative=None) -> tuple[int, SpecDecode | None]:
    """(pp, spec) of one side, by the decode step's own rule (:func:`~llmexplore.models.step.per_token
    .check_decoding`: pp in [1, 128] and at most the layers, pp x tp <= 1,024 GPUs per instance, MTP only on a
    model with an MTP module, no draft inside a pipeline). Both sides run the draft under speculative decoding
    (the prefill server writes the draft's KV and hidden state, module docstring), so the rule applies to both.
    The message names ``{side}_pp`` and ``{side}_tp`` instead of ``pp`` and ``ranks``."""
    try:
        return check_decoding(_Side(model, int(tp)), pp, speculative)
    except SpecError as exc:
        text = str(exc)
        if text.startswith("pp x ranks "):
            text = f"{side}_pp x {side}_tp " + text[len("pp x ranks "):]
        elif text.startswith("pp "):
            text = f"{side}_pp " + text[len("pp "):]
        raise UnsupportedPDLayoutError(text) from None


@dataclass(frozen=True)
class ModelTransfer:
    """A model's transfer planner with what the cost needs: ``layer_repeat[i]`` is how many layers buffer i
    stands for (the model's layers for target buffers, ``draft_layers`` for draft ones); ``pipeline`` the plan of
    every stage pair (one pair without pipelines; built from ``layer_repeat`` when not given); ``spec`` the speculative-decoding preset whose draft moves
    (None: none) and ``state_B`` the speculative state each last-stage sender sends each receiver [B]."""

    model: ModelSpec
    planner: PDTransferPlanner
    layer_repeat: tuple[int, ...]
    page_size: int
    kv_dtype: str
    pipeline: PipelineTransferPlanner | None = None
    spec: SpecDecode | None = None
    draft_layers: int = 0
    state_B: int = 0

    def __post_init__(self) -> None:
        if self.pipeline is None:  # built by hand: one stage pair, every buffer for its layer_repeat layers
            top = max(self.layer_repeat, default=self.model.layers)
            object.__setattr__(self, "pipeline", PipelineTransferPlanner(
                self.planner, prefill_stage_layers=[top], decode_stage_layers=[top],
                buffer_layers=tuple((0, n) for n in self.layer_repeat)))

    @property
    def prefill_layout(self) -> ParallelLayout:
        return self.planner.prefill_layout

    @property
    def decode_layout(self) -> ParallelLayout:
        return self.planner.decode_layout

    @property
    def prefill_pp(self) -> int:
        return self.pipeline.prefill_pp

    @property
    def decode_pp(self) -> int:
        return self.pipeline.decode_pp

    @property
    def pipelined(self) -> bool:
        """Whether either side has more than one stage."""
        return self.prefill_pp > 1 or self.decode_pp > 1

    @property
    def prefill_label(self) -> str:
        """``"prefill TP8"``, with ``x DP2`` and ``x PP2`` where the side has them."""
        return str(self.prefill_layout) + (f" x PP{self.prefill_pp}" if self.prefill_pp > 1 else "")

    @property
    def decode_label(self) -> str:
        return str(self.decode_layout) + (f" x PP{self.decode_pp}" if self.decode_pp > 1 else "")

    @property
    def label(self) -> str:
        p, d = self.prefill_layout, self.decode_layout
        return (f"TP{p.tp_size_per_dp}" + (f"xDP{p.dp_size}" if p.dp_size > 1 else "")
                + (f"xPP{self.prefill_pp}" if self.prefill_pp > 1 else "") + " → "
                + f"TP{d.tp_size_per_dp}" + (f"xDP{d.dp_size}" if d.dp_size > 1 else "")
                + (f"xPP{self.decode_pp}" if self.decode_pp > 1 else ""))


def model_transfer(model: ModelSpec, *, prefill_tp: int, decode_tp: int, prefill_dp: int = 1, decode_dp: int = 1,
                   page_size: int = 16, kv_dtype: str = "bf16", draft_layers: int = 0,
                   dp_pairing: str = "index", prefill_pp: int = 1, decode_pp: int = 1,
                   speculative=None) -> ModelTransfer:
    """The transfer plan of ``model`` from prefill TP x DP (x PP) to decode TP x DP (x PP) (:class:`ModelTransfer`).
    ``speculative`` (a preset name or a SpecDecode) moves its draft's KV (one layer for MTP and draft heads, on
    the last stage) and its hidden state; ``draft_layers`` is the same by hand (no hidden state), left at 0 with
    ``speculative``. Raises :class:`UnsupportedPDLayoutError` when a TP size does not fit the KV heads, the DP
    groups do not pair, a PP size breaks :func:`check_side`'s rule (naming ``prefill_pp`` or ``decode_pp``), or
    an MTP preset meets a model without an MTP module (see :class:`~.planner.PDTransferPlanner`)."""
    prefill_dp = _check.integer("prefill_dp", prefill_dp, lo=1, hi=1024)
    decode_dp = _check.integer("decode_dp", decode_dp, lo=1, hi=1024)
    draft_layers = _check.integer("draft_layers", draft_layers, lo=0, hi=64)
    try:
        spec = resolve_spec(speculative)
    except SpecError as exc:
        raise UnsupportedPDLayoutError(str(exc)) from None
    p_pp, _ = check_side(model, "prefill", prefill_pp, _check.integer("prefill_tp", prefill_tp, lo=1, hi=1024), spec)
    d_pp, _ = check_side(model, "decode", decode_pp, _check.integer("decode_tp", decode_tp, lo=1, hi=1024), spec)
    if spec is not None:
        if draft_layers:
            raise UnsupportedPDLayoutError(
                f"draft_layers must be 0 when speculative is given (the preset {spec.name!r} sets the draft's "
                f"layers), got {draft_layers}")
        draft_layers = 0 if spec.method == "ngram" else draft_model(model, spec).layers
    for side, tp, dp, pp in (("prefill", prefill_tp, prefill_dp, p_pp), ("decode", decode_tp, decode_dp, d_pp)):
        if isinstance(tp, int) and tp * dp > MAX_WORLD:
            raise UnsupportedPDLayoutError(f"{side}_tp x {side}_dp must be at most {MAX_WORLD:,} ranks, got "
                                           f"{tp} x {dp} = {tp * dp:,}")
        if isinstance(tp, int) and pp * tp * dp > MAX_WORLD:
            raise UnsupportedPDLayoutError(f"{side}_pp x {side}_tp x {side}_dp must be at most {MAX_WORLD:,} ranks, "
                                           f"got {pp} x {tp} x {dp} = {pp * tp * dp:,}")
    pb = model_buffers(model, prefill_tp, page_size=page_size, kv_dtype=kv_dtype, draft_layers=draft_layers,
                       name="prefill_tp")
    db = model_buffers(model, decode_tp, page_size=page_size, kv_dtype=kv_dtype, draft_layers=draft_layers,
                       name="decode_tp")
    planner = PDTransferPlanner(
        prefill_layout=ParallelLayout("prefill", int(prefill_tp) * prefill_dp, prefill_dp),
        decode_layout=ParallelLayout("decode", int(decode_tp) * decode_dp, decode_dp),
        prefill_buffers=pb, decode_buffers=db, dp_pairing=dp_pairing)
    target = (BufferKind.TARGET_K, BufferKind.TARGET_V)
    repeat = tuple(model.layers if b.buffer_kind in target else draft_layers for b in pb)
    L = model.layers
    spans = tuple((0, L) if b.buffer_kind in target else (L, L + draft_layers) for b in pb)

    def counts(pp: int) -> list[int]:
        out = stage_layers(model, pp)
        out[-1] += draft_layers  # the draft layer(s) on the last stage
        return out

    pipeline = PipelineTransferPlanner(planner, prefill_stage_layers=counts(p_pp), decode_stage_layers=counts(d_pp),
                                       buffer_layers=spans)
    return ModelTransfer(model, planner, repeat, int(page_size), kv_dtype, pipeline, spec, draft_layers,
                         spec_state_bytes(model, spec))

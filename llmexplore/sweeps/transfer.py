"""KV transfer planning sweeps: tidy tables built from :mod:`llmexplore.transfer`.

One :class:`TransferSetup` fixes the model, the two layouts, the page size, the dtype, the link and the prompt;
the functions return the tables the notebook, the explorer and the command line all read (built once here):
the prefill-rank x decode-rank byte matrix (:func:`byte_matrix`), fan-out and traffic per prefill rank
(:func:`prefill_rank_table`), per decode rank (:func:`decode_rank_table`), the fragment table
(:func:`fragment_table`), which pipeline stages talk (:func:`stage_pair_table`), the one-layout-pair summary
(:func:`plan_summary`) and the comparison of layout pairs (:func:`layout_pairs`). A layout pair the planner
cannot serve is a row with ``feasible = False`` and the planner's reason, never an exception.

Pipelines (``prefill_pp``, ``decode_pp``) and speculative decoding (``speculative``) reach every table: ranks are
every stage's, the prefill a layer-wise transfer overlaps is the pipelined one
(:func:`llmexplore.models.step.pipeline.pp_prefill`, its stages streaming their own layers), and a speculative
prefill also runs its draft over the prompt (the draft layer's KV and hidden state then move too).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .. import _check, presets
from ..errors import LlmexploreError, SpecError
from ..models.step.engine import Deployment, kernel_rates, resolve_deployment
from ..models.step.pipeline import MAX_STAGES, hop_s, pp_prefill
from ..models.step.prefill import prefill_time
from ..models.step.speculative import draft_deployment
from ..specs import Link, ModelSpec
from ..transfer.buffers import ModelTransfer, model_transfer
from ..transfer.cost import PlanTraffic, plan_traffic, transfer_time
from ..transfer.planner import DP_PAIRINGS
from ..transfer.roundtrip import pipeline_roundtrip_check, roundtrip_check
from ..units import dtype_bytes
from . import tidy

__all__ = ["TransferSetup", "setup", "prefill_unpriced", "pairs_around", "byte_matrix", "prefill_rank_table",
           "decode_rank_table", "fragment_table", "stage_pair_table", "plan_summary", "layout_pairs", "candidate_tps",
           "time_vs_prompt", "decode_ranks", "layouts_label", "MAX_TP", "MAX_DP", "MAX_PP"]

MAX_TP = 1024
MAX_DP = 1024
MAX_PP = MAX_STAGES  # pipeline stages per side (the step engine's bound)


@dataclass(frozen=True)
class TransferSetup:
    """One layout pair of one model: the plan (``mt``), its traffic for one request, the link and the prompt."""

    mt: ModelTransfer
    traffic: PlanTraffic
    gpu: str
    runtime: str
    link: Link
    prompt_tokens: int
    op_overhead_us: float = 1.0
    batched_ops: bool = True

    @property
    def model(self) -> ModelSpec:
        return self.mt.model

    @property
    def label(self) -> str:
        return self.mt.label


def setup(model="llama-3-70b", *, prefill_tp: int = 8, decode_tp: int = 4, prefill_dp: int = 1, decode_dp: int = 1,
          page_size: int = 16, kv_dtype: str = "bf16", prompt_tokens: int = 4096, link="roce-400g",
          gpu="h100-sxm", runtime="default", dp_pairing: str = "index", draft_layers: int = 0,
          op_overhead_us: float = 1.0, batched_ops: bool = True, prefill_pp: int = 1, decode_pp: int = 1,
          speculative=None) -> TransferSetup:
    """Build a :class:`TransferSetup` from preset names (validated; errors name the argument and the rule,
    :class:`~llmexplore.errors.UnsupportedPDLayoutError` for a layout pair the planner cannot serve, including
    ``prefill_pp``/``decode_pp`` beyond the layers or with ``speculative``, and an MTP preset on a model without
    an MTP module)."""
    m, hw, rt, _ = resolve_deployment(model, gpu, runtime)
    lk = link if isinstance(link, Link) else presets.resolve("links", link)
    dtype_bytes(kv_dtype, "kv_dtype")
    prompt_tokens = _check.integer("prompt_tokens", prompt_tokens, lo=1, hi=1 << 24, unit="tokens")
    op_overhead_us = _check.number("op_overhead_us", op_overhead_us, lo=0.0, hi=1e6, unit="us")
    batched_ops = _check.boolean("batched_ops", batched_ops)
    for name, v, hi in (("prefill_tp", prefill_tp, MAX_TP), ("decode_tp", decode_tp, MAX_TP),
                        ("prefill_dp", prefill_dp, MAX_DP), ("decode_dp", decode_dp, MAX_DP)):
        _check.integer(name, v, lo=1, hi=hi)
    _check.choice("dp_pairing", dp_pairing, DP_PAIRINGS)
    mt = model_transfer(m, prefill_tp=prefill_tp, decode_tp=decode_tp, prefill_dp=prefill_dp, decode_dp=decode_dp,
                        page_size=page_size, kv_dtype=kv_dtype, draft_layers=draft_layers, dp_pairing=dp_pairing,
                        prefill_pp=prefill_pp, decode_pp=decode_pp, speculative=speculative)
    return TransferSetup(mt, plan_traffic(mt), hw.name, rt.name, lk, prompt_tokens, op_overhead_us, batched_ops)


def _prefill(s: TransferSetup, prompt_tokens) -> dict:
    """The prefill of the prompts on one prefill DP group [s]: ``compute_s`` (the whole model on one stage's TP
    ranks, plus the draft's pass over the prompt with a speculative preset that has one: SGLang's prefill runs
    draft-extend to write the draft's KV), ``hop_s`` (the prompt's hidden states from one stage to the next; 0
    without pipeline stages) and ``latency_s`` (:func:`~llmexplore.models.step.pipeline.pp_prefill`'s latency,
    plus the draft's pass). LlmexploreError when the model cannot run there (e.g. TP does not divide the query
    heads, or the stages span nodes without a scale-out link)."""
    dep = Deployment.build(s.model, s.gpu, s.mt.prefill_layout.tp_size_per_dp, runtime=s.runtime,
                           kv_dtype=s.mt.kv_dtype)
    pp = s.mt.prefill_pp
    compute = prefill_time(dep, prompt_tokens)["prefill_s"]
    latency = pp_prefill(dep, pp, prompt_tokens)["latency_s"]
    hop = hop_s(dep, pp, prompt_tokens) if pp > 1 else np.zeros(np.shape(compute))
    spec = s.mt.spec
    if spec is not None and spec.method != "ngram":
        draft = prefill_time(draft_deployment(dep, spec), prompt_tokens)["prefill_s"]
        compute, latency = compute + draft, latency + draft
    return {"compute_s": compute, "hop_s": hop, "latency_s": latency}


def prefill_unpriced(s: TransferSetup) -> str:
    """Why the prefill of ``s`` has no time (the model cannot run at its prefill TP and PP), or '' when it has
    one."""
    try:
        _prefill(s, s.prompt_tokens)
    except LlmexploreError as exc:
        return str(exc)
    return ""


def _prefill_s(s: TransferSetup, prompt_tokens) -> dict | None:
    """:func:`_prefill`, or None when the model cannot run there."""
    try:
        return _prefill(s, prompt_tokens)
    except LlmexploreError:
        return None


def _hbm_GBps(s: TransferSetup) -> float:
    """Achievable HBM bandwidth of one GPU for the staging copies [GB/s]: the step engine's elementwise rate
    (the BF16 GEMM curve's bandwidth with kernel curves, the runtime's eta_mem without), so a copy streams at
    the rate every other memory-bound kernel of the runtime does."""
    try:
        dep = Deployment.build(s.model, s.gpu, 1, runtime=s.runtime, kv_dtype=s.mt.kv_dtype)
    except LlmexploreError:  # a model that cannot run on one rank here still streams at the GPU's rate
        dep = None
    if dep is not None:
        return kernel_rates(dep, "elementwise").bytes_per_s / 1e9
    hw, rt = presets.resolve("hardware", s.gpu), presets.resolve("runtime", s.runtime)
    return hw.hbm_bw_TBps * 1e3 * rt.eta_mem


def _times(s: TransferSetup, prompt_tokens) -> dict:
    """Serial (batched writes), unbatched (one write per page), staged and pipelined times [s]."""
    pre = _prefill_s(s, prompt_tokens)
    out = transfer_time(s.traffic, s.link, prompt_tokens, prefill_s=None if pre is None else pre["compute_s"],
                        hop_s=None if pre is None else pre["hop_s"], op_overhead_us=s.op_overhead_us,
                        batched_ops=s.batched_ops, hbm_GBps=_hbm_GBps(s))
    out["unbatched_s"] = transfer_time(s.traffic, s.link, prompt_tokens, op_overhead_us=s.op_overhead_us,
                                       batched_ops=False)["serial_s"]
    return out | ({"prefill_s": pre["latency_s"]} if pre is not None else {})


def _pages(s: TransferSetup) -> int:
    return -(-s.prompt_tokens // s.mt.page_size)


def decode_ranks(s: TransferSetup) -> list[int]:
    """The global decode ranks of the request's decode DP group, every decode stage."""
    pl, h = s.mt.planner, s.traffic.decode_dp_group
    wd = pl.decode_layout.world_size
    return [b * wd + h * pl.decode_tp + d for b in range(s.mt.decode_pp) for d in range(pl.decode_tp)]


_request_decode_ranks = decode_ranks  # (fragment_table's argument of the same name shadows it)


def _group(s: TransferSetup) -> int | None:
    """The prefill DP group plans are asked for (None: the decode rank's own, version 1)."""
    return s.traffic.prefill_dp_group if s.mt.planner.dp_pairing == "any" else None


def _layers(lo: int, hi: int) -> str:
    return f"{lo}–{hi - 1}" if hi - lo > 1 else f"{lo}"


def _stage_columns(s: TransferSetup, ranks, side: str) -> dict:
    """``stage`` and ``layers`` ("0–39") columns of ``side``'s global ranks."""
    pipe = s.mt.pipeline
    world = pipe.prefill_stage_world if side == "prefill" else pipe.decode_stage_world
    rng = pipe.prefill_ranges if side == "prefill" else pipe.decode_ranges
    stages = [int(r) // world for r in ranks]
    return {"stage": stages, "layers": [_layers(*rng[b]) for b in stages]}


def byte_matrix(s: TransferSetup) -> pd.DataFrame:
    """Bytes of one request each prefill rank sends each decode rank, as a matrix (rows: prefill ranks,
    columns: decode ranks, every stage's) [MB], the speculative state included; ranks outside the request's
    group pair are zero."""
    mb = s.traffic.matrix_B * _pages(s) / 1e6
    if s.traffic.has_state:
        mb = mb + s.traffic.state_B / 1e6
    return pd.DataFrame(mb, index=pd.Index(range(mb.shape[0]), name="prefill_rank"),
                        columns=pd.Index(range(mb.shape[1]), name="decode_rank"))


def prefill_rank_table(s: TransferSetup) -> pd.DataFrame:
    """One row per prefill rank of the source group (every stage): fan-out, bytes sent for one request [MB],
    writes (fragments x layers), whether the rank is idle (a non-representative replica), its stage and the
    layers it holds."""
    tr = s.traffic
    ranks = sorted(tr.fanout)
    pages = _pages(s)
    idle = set(tr.idle_prefill_ranks)
    state = tr.state_B.sum(axis=1) if tr.has_state else np.zeros(len(tr.sent_B))
    wstate = tr.state_writes.sum(axis=1) if tr.has_state else np.zeros(len(tr.sent_B))
    return pd.DataFrame({"prefill_rank": ranks, "fanout": [tr.fanout[p] for p in ranks],
                         "sent_MB": [(tr.sent_B[p] * pages + state[p]) / 1e6 for p in ranks],
                         "writes": [tr.fragments[p].sum() + wstate[p] for p in ranks],
                         "idle": [p in idle for p in ranks], **_stage_columns(s, ranks, "prefill")})


def decode_rank_table(s: TransferSetup) -> pd.DataFrame:
    """One row per decode rank of the request's group (every stage): sources, bytes received [MB], writes,
    bytes that must be copied locally because the rank is a non-representative replica [MB], its stage and the
    layers it holds."""
    tr = s.traffic
    ranks = decode_ranks(s)
    pages = _pages(s)
    state = tr.state_B.sum(axis=0) if tr.has_state else np.zeros(len(tr.received_B))
    wstate = tr.state_writes.sum(axis=0) if tr.has_state else np.zeros(len(tr.received_B))
    return pd.DataFrame({"decode_rank": ranks,
                         "sources": [int((tr.matrix_B[:, r] > 0).sum()) for r in ranks],
                         "received_MB": [(tr.received_B[r] * pages + state[r]) / 1e6 for r in ranks],
                         "writes": [tr.fragments[:, r].sum() + wstate[r] for r in ranks],
                         "local_copy_MB": [tr.unsent_B[r] * pages / 1e6 for r in ranks],
                         **_stage_columns(s, ranks, "decode")})


FRAGMENT_COLUMNS = ["decode_rank", "plan", "prefill_rank", "buffer", "kind", "src_offset_B", "dst_offset_B",
                    "bytes_per_page", "src_stride_B", "dst_stride_B", "layer_start", "layer_end"]


def fragment_table(s: TransferSetup, decode_ranks=None, *, limit: int = 2000) -> pd.DataFrame:
    """The fragments of the plans of ``decode_ranks`` (global; default: the request's decode group, every
    stage), at most ``limit`` rows: one row per fragment with its byte offsets, length and strides [B] (one
    layer), the layers ``[layer_start, layer_end)`` it repeats for, and the plan kind (identity plans are listed
    in their explicit form)."""
    pipe = s.mt.pipeline
    if decode_ranks is None:
        decode_ranks = _request_decode_ranks(s)
    g = _group(s)
    rows = []
    for r in decode_ranks:
        plan = pipe.plan_for_decode_rank(r, g)
        for lf in plan.fragments:
            f = lf.fragment
            rows.append({"decode_rank": r, "plan": plan.plan_kind, "prefill_rank": f.src_rank,
                         "buffer": f.buffer_index, "kind": f.buffer_kind.value, "src_offset_B": f.src_byte_offset,
                         "dst_offset_B": f.dst_byte_offset, "bytes_per_page": f.bytes_per_page,
                         "src_stride_B": f.src_page_stride_bytes, "dst_stride_B": f.dst_page_stride_bytes,
                         "layer_start": lf.layer_start, "layer_end": lf.layer_end})
            if len(rows) >= limit:
                return pd.DataFrame(rows)
    return pd.DataFrame(rows, columns=FRAGMENT_COLUMNS)


def stage_pair_table(s: TransferSetup) -> pd.DataFrame:
    """One row per (prefill stage, decode stage) pair that talks: the layers they share (``first_layer``,
    ``last_layer``, ``layers``), whether the draft's layer is among them, and the MB of one request the pair
    moves (its share of the request's KV; the speculative state is in :func:`plan_summary`). Without pipelines,
    one row with every layer."""
    pipe = s.mt.pipeline
    by_pair = pipe.stage_bytes_per_page(s.traffic.decode_dp_group, _group(s))
    pages = _pages(s)
    L = s.model.layers
    return pd.DataFrame([{"prefill_stage": p.prefill_stage, "decode_stage": p.decode_stage,
                          "first_layer": p.layer_start, "last_layer": p.layer_end - 1, "layers": p.layers,
                          "draft_layers": max(0, p.layer_end - max(p.layer_start, L)),
                          "MB": by_pair[(p.prefill_stage, p.decode_stage)] * pages / 1e6} for p in pipe.pairs])


def plan_summary(s: TransferSetup, *, check: bool = True) -> dict:
    """The headline record of one layout pair (plain Python values): plan kind, sources per decode rank, most
    fan-out, fragments, bytes of one request over the network and the busiest NIC, bytes decode replicas copy
    locally, transfer time [ms]: serial with writes batched per fragment and layer (``serial_ms``, with its
    parts), with one write per page (``unbatched_ms``), through a staging buffer (``staged_ms``, of which
    ``staging_copy_ms`` gather/scatter), layer-pipelined behind the (pipelined) prefill (``pipelined_ms``); the
    pipelines (``prefill_pp``, ``decode_pp``, ``stage_pairs``: pairs of stages that talk), the speculative preset
    and what its draft adds (``draft_MB``: the draft layer's KV, ``spec_state_MB``: hidden state and top-k of
    every pair); and (``check``) the round-trip check (layer by layer with pipelines)."""
    pl, tr, mt = s.mt.planner, s.traffic, s.mt
    t = _times(s, s.prompt_tokens)
    ranks = decode_ranks(s)
    pages = _pages(s)
    g = _group(s)
    plans = [mt.pipeline.plan_for_decode_rank(r, g) for r in ranks]
    kinds = {p.plan_kind for p in plans}
    draft_B = sum(f.bytes_per_page * max(0, f.layer_end - max(f.layer_start, s.model.layers))
                  for p in plans for f in p.fragments) * pages
    state_writes = float(tr.state_writes.sum()) if tr.has_state else 0.0
    rec = {"model": s.model.name, "layouts": s.label, "prefill": mt.prefill_label,
           "decode": mt.decode_label, "dp_pairing": pl.dp_pairing, "page_size": mt.page_size,
           "kv_dtype": mt.kv_dtype, "prompt_tokens": s.prompt_tokens, "link": s.link.name,
           "plan_kind": kinds.pop() if len(kinds) == 1 else "mixed",
           "max_sources": int(max((tr.matrix_B[:, r] > 0).sum() for r in ranks)),
           "max_fanout": int(max(tr.fanout.values())), "idle_prefill_ranks": len(tr.idle_prefill_ranks),
           "fragments_per_layer": int(sum(len(p.fragments) for p in plans)),
           "writes": float(tr.fragments.sum()) + state_writes, "busiest": tr.busiest_rank,
           **tidy({"request_B": tr.total_B * pages + tr.state_total_B, "busiest_B": float(t["busiest_B"]),
                   "local_copy_B": float(tr.unsent_B.sum()) * pages}, units={"request_B": "MB", "busiest_B": "MB",
                                                                           "local_copy_B": "MB"}, scalar=True),
           **tidy({k: t[k] for k in ("serial_s", "bandwidth_s", "ops_s", "latency_s", "unbatched_s", "staged_s",
                                     "staging_copy_s")}, scalar=True)}
    rec["pipelined_ms"] = float(t["pipelined_s"]) * 1e3 if "pipelined_s" in t else float("nan")
    rec["prefill_ms"] = float(t["prefill_s"]) * 1e3 if "prefill_s" in t else float("nan")
    rec.update(prefill_pp=mt.prefill_pp, decode_pp=mt.decode_pp, stage_pairs=len(mt.pipeline.pairs),
               speculative=mt.spec.name if mt.spec is not None else None, draft_layers=mt.draft_layers,
               draft_MB=draft_B / 1e6, spec_state_MB=tr.state_total_B / 1e6)
    if check:
        if mt.pipelined:
            rt = pipeline_roundtrip_check(mt.pipeline, pages=1, prefill_dp_group=g, decode_ranks=ranks)
        else:
            rt = roundtrip_check(pl, pages=1, prefill_dp_group=g, decode_ranks=ranks)
        rec["roundtrip_ok"] = rt.ok
        rec["roundtrip_checked_B"] = rt.checked_B
    return rec


def candidate_tps(model: ModelSpec, most: int = 64) -> list[int]:
    """TP sizes a side of ``model`` can use: powers of two up to ``most`` that divide or are a multiple of the
    KV heads (GQA), all powers of two for MLA."""
    tps = [1 << i for i in range(int(np.log2(most)) + 1)]
    if model.is_mla:
        return tps
    h = model.kv_heads
    return [t for t in tps if h % t == 0 or t % h == 0]


def pairs_around(model, prefill_tp: int, decode_tp: int, most: int = 32) -> list[tuple[int, int]]:
    """The layout pairs compared around a chosen one: the chosen prefill TP to every decode TP the model's KV
    heads allow (:func:`candidate_tps` up to ``most``), and every such prefill TP to the chosen decode TP (each
    pair once, the chosen one included)."""
    m = presets.resolve("models", model)
    prefill_tp = _check.integer("prefill_tp", prefill_tp, lo=1, hi=MAX_TP)
    decode_tp = _check.integer("decode_tp", decode_tp, lo=1, hi=MAX_TP)
    tps = candidate_tps(m, most)
    pairs = [(prefill_tp, d) for d in sorted(set(tps) | {decode_tp})]
    return pairs + [(p, decode_tp) for p in sorted(set(tps) | {prefill_tp}) if p != prefill_tp]


def layouts_label(prefill_tp: int, decode_tp: int, prefill_pp: int = 1, decode_pp: int = 1) -> str:
    """``"TP8 → TP4"``, with ``xPP2`` on a side with pipeline stages (one DP group each)."""
    return (f"TP{prefill_tp}" + (f"xPP{prefill_pp}" if prefill_pp != 1 else "") + " → "
            + f"TP{decode_tp}" + (f"xPP{decode_pp}" if decode_pp != 1 else ""))


def layout_pairs(model="llama-3-70b", pairs=None, *, chosen=(8, 8), page_size: int = 16, kv_dtype: str = "bf16",
                 prompt_tokens: int = 4096, link="roce-400g", gpu="h100-sxm", runtime="default",
                 draft_layers: int = 0, prefill_pp: int = 1, decode_pp: int = 1, speculative=None) -> pd.DataFrame:
    """Compare layout pairs ``[(prefill_tp, decode_tp), ...]`` (default: :func:`pairs_around` the ``chosen``
    (prefill TP, decode TP)), each with ``prefill_pp`` and ``decode_pp`` stages and ``speculative``'s draft: one
    row each with the :func:`plan_summary` columns (no round-trip), ``feasible`` and ``reason``."""
    m = presets.resolve("models", model)
    if pairs is None:
        pairs = pairs_around(m, *chosen)
    rows = []
    for i, pair in enumerate(pairs):
        try:
            p_tp, d_tp = pair
        except (TypeError, ValueError):
            raise SpecError(f"pairs[{i}] must be a (prefill_tp, decode_tp) pair, got {pair!r}") from None
        try:
            s = setup(m, prefill_tp=p_tp, decode_tp=d_tp, page_size=page_size, kv_dtype=kv_dtype,
                      prompt_tokens=prompt_tokens, link=link, gpu=gpu, runtime=runtime, draft_layers=draft_layers,
                      prefill_pp=prefill_pp, decode_pp=decode_pp, speculative=speculative)
            rows.append({"prefill_tp": p_tp, "decode_tp": d_tp, **plan_summary(s, check=False), "feasible": True,
                         "reason": ""})
        except LlmexploreError as exc:
            label = layouts_label(p_tp, d_tp, prefill_pp, decode_pp) if isinstance(prefill_pp, int) and \
                isinstance(decode_pp, int) else f"TP{p_tp} → TP{d_tp}"
            rows.append({"prefill_tp": p_tp, "decode_tp": d_tp, "layouts": label,
                         "serial_ms": np.nan, "pipelined_ms": np.nan, "feasible": False, "reason": str(exc)})
    return pd.DataFrame(rows)


def time_vs_prompt(s: TransferSetup, prompts) -> pd.DataFrame:
    """Transfer time of this layout pair against prompt length [ms], one row per prompt: ``prompt_tokens``,
    ``serial_ms``, ``unbatched_ms``, ``staged_ms``, ``pipelined_ms`` (NaN without a prefill model),
    ``prefill_ms``."""
    S = _check.real_array("prompts", np.atleast_1d(prompts), lo=1, hi=1 << 24, integer=True, unit="tokens")
    t = _times(s, S)
    nan = np.full(S.shape, np.nan)
    return pd.DataFrame({"prompt_tokens": S, **tidy({"serial_s": t["serial_s"],
                                                      "unbatched_s": t["unbatched_s"], "staged_s": t["staged_s"],
                                                      "pipelined_s": t.get("pipelined_s", nan),
                                                      "prefill_s": t.get("prefill_s", nan)})})

"""Step-time tables of one deployment for the serving simulator (docs/models.md §4.9, "Speed").

The step engine prices ~50 us per call and a simulation has ~1e5 iterations, so the iteration times are
tabulated once per simulation with the vectorised engine (:func:`step_tables`): the part shared by all tokens
exactly for every token count, the LM head exactly for every logit count, the decode attention core on batch x
a geometric context grid (linear in the context between nodes), the chunk core on a token x context grid
(log-linear in tokens, linear in context). Measured against direct calls, the table is within 0.1 %
(tests/unit/models/serving/test_serving.py). Priced on the TP layout (:func:`..step.prefill.mixed_step_time`, which
:meth:`StepTables.step_s` reproduces exactly for one chunk), or on the DPA layout for one attention-DP rank.

**DPA** (``layout="DPA"``, docs/models.md §4.9): the tables price one rank's iteration of a data-parallel-attention
instance of T ranks, indexed by that rank's own tokens, decodes and logits. The iteration is the step engine's DPA
step of T times them (:func:`..step.decode.step_time` with batch T x n: each rank attends over its own n sequences
with whole heads, and the FFN/MoE runs over the gathered T x n tokens). That is the step engine's own gather,
padded to the busiest rank (``_tokens``: "FFN sees the padded gather"), with every rank carrying this rank's load
[assumption: balanced ranks. The ranks of an instance run each iteration in lockstep (the MoE collectives need
all of them), so the true step is set by the busiest rank and the sum of their tokens. The simulator runs one
scheduler per rank and prices each by its own load; with requests dealt round-robin, fixed lengths and a
synchronised start (a benchmark's closed loop) the ranks carry the same load and this is exact, and otherwise it
is optimistic by the imbalance between ranks].
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from ... import _check
from ...errors import SpecError
from ..step.decode import layers_core_s, step_time
from ..step.engine import MAX_CONTEXT, Deployment

__all__ = ["StepTables", "step_tables", "SIM_LAYOUTS", "TablesCache", "CTX_NODES", "CHUNK_NODES", "pipeline_tables",
           "PipelineTablesCache", "speculative_tables"]


@dataclass(frozen=True, eq=False)
class StepTables:
    """Step times of one deployment, tabulated for the simulator [s] (see :func:`step_tables`).

    ``shared_s[m]``: everything but the attention cores and the LM head for m tokens; ``head_s[n]``: LM head
    and embedding/logit collectives for n logits; ``dec_core`` [batch, context node] over ``ctx_grid``;
    ``chunk_core`` [token node, context node] over ``chunk_grid`` x ``ctx_grid``. ``layout``: "TP" (the
    instance's iteration) or "DPA" (one attention-DP rank's, module docstring).
    """

    dep: Deployment
    shared_s: list
    head_s: list
    ctx_grid: np.ndarray
    dec_core: np.ndarray
    chunk_grid: np.ndarray
    chunk_core: np.ndarray
    layout: str = "TP"
    _ctx: list = field(repr=False, default_factory=list)
    _dec_rows: list = field(repr=False, default_factory=list)
    _chunk_log: list = field(repr=False, default_factory=list)
    _chunk_rows: list = field(repr=False, default_factory=list)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_ctx", self.ctx_grid.tolist())
        object.__setattr__(self, "_dec_rows", [r.tolist() for r in self.dec_core])
        object.__setattr__(self, "_chunk_log", np.log(self.chunk_grid).tolist())
        object.__setattr__(self, "_chunk_rows", [r.tolist() for r in self.chunk_core])

    @property
    def max_tokens(self) -> int:
        return len(self.shared_s) - 1

    @property
    def max_batch(self) -> int:
        """Most logits (decodes, or prompts of a prefill batch) the tables price."""
        return len(self.head_s) - 2

    def _lerp_ctx(self, row: list, s: float) -> float:
        g = self._ctx
        i = bisect.bisect_right(g, s) - 1
        if i < 0:
            i = 0
        elif i >= len(g) - 1:
            i = len(g) - 2
        f = (s - g[i]) / (g[i + 1] - g[i])
        return row[i] + f * (row[i + 1] - row[i])

    def decode_core_s(self, batch: int, context: float) -> float:
        """Decode attention core of ``batch`` sequences at mean ``context`` [s]."""
        return self._lerp_ctx(self._dec_rows[batch], context)

    def chunk_core_s(self, tokens: int, context: float) -> float:
        """Causal core of a prefill chunk of ``tokens`` after ``context`` cached tokens [s]."""
        lg = self._chunk_log
        u = math.log(tokens)
        i = bisect.bisect_right(lg, u) - 1
        if i >= len(lg) - 1:
            i = len(lg) - 2
        a = self._lerp_ctx(self._chunk_rows[i], context)
        b = self._lerp_ctx(self._chunk_rows[i + 1], context)
        f = (u - lg[i]) / (lg[i + 1] - lg[i])
        return math.exp(math.log(a) + f * (math.log(b) - math.log(a)))

    def step_s(self, decode_batch: int, decode_context: float, chunk_tokens: int = 0, chunk_context: float = 0.0,
               chunks: int | None = None) -> float:
        """One iteration [s]: ``decode_batch`` decodes at mean ``decode_context`` and ``chunk_tokens`` prefill
        tokens after ``chunk_context`` cached ones, in ``chunks`` requests (default 1 if any)."""
        n_lm = decode_batch + (chunks if chunks is not None else int(chunk_tokens > 0))
        t = self.shared_s[decode_batch + chunk_tokens] + self.head_s[n_lm]
        if decode_batch:
            t += self.decode_core_s(decode_batch, decode_context)
        if chunk_tokens:
            t += self.chunk_core_s(chunk_tokens, chunk_context)
        return t


#: the attention layouts the simulator runs (TP: one scheduler per instance; DPA: one per attention-DP rank)
SIM_LAYOUTS = ("TP", "DPA")
#: context nodes [tokens] of the decode and chunk cores: 0, 1 and a geometric grid of ratio ~1.14 up to
#: MAX_CONTEXT. Fixed, so the tables of a longer context extend those of a shorter one exactly (TablesCache)
CTX_NODES = np.unique(np.concatenate([[0.0, 1.0], np.round(np.geomspace(1.0, MAX_CONTEXT + 2.0, 160))]))
#: token nodes of the chunk core: every count to 32 (the decode/prefill kernel switch is at 16 queries), then a
#: geometric grid of ratio ~1.13 to 4,194,304; fixed for the same reason
CHUNK_NODES = np.unique(np.concatenate([np.arange(1.0, 33.0), np.round(np.geomspace(32.0, float(1 << 22), 96))]))


def _upto(nodes: np.ndarray, top: float) -> np.ndarray:
    """The nodes up to and including the first at or above ``top`` (so ``top`` lies inside the grid)."""
    return nodes[: int(np.searchsorted(nodes, top, side="left")) + 1]


class TablesCache:
    """Step tables shared by the simulations of one batch of work (``validate --e2e``'s table): tables are
    exact for every count they cover and their grids are fixed (:data:`CTX_NODES`, :data:`CHUNK_NODES`), so
    the tables of a deployment built for the largest token budget, batch and context asked so far serve every
    smaller request bit for bit. Keyed by the deployment's repr, so scope a cache to work that does not change
    the presets underneath (a new cache per batch)."""

    def __init__(self) -> None:
        self._tables: dict = {}

    def get(self, dep: Deployment, *, max_tokens: int, max_batch: int, max_context: int, layout: str = "TP",
            decodes: bool = True) -> "StepTables":
        key = (repr(dep), layout, decodes)
        have = self._tables.get(key)
        if have is not None:
            tb, (M, B, S) = have
            if max_tokens <= M and min(max_batch, max_tokens) <= B and max_context <= S:
                return tb
            max_tokens, max_batch, max_context = max(M, max_tokens), max(B, max_batch), max(S, max_context)
        tb = step_tables(dep, max_tokens=max_tokens, max_batch=max_batch, max_context=max_context, layout=layout,
                         decodes=decodes)
        self._tables[key] = (tb, (max_tokens, min(max_batch, max_tokens), max_context))
        return tb


def step_tables(dep: Deployment, *, max_tokens: int, max_batch: int, max_context: int,
                layout: str = "TP", decodes: bool = True) -> StepTables:
    """Tabulate a deployment's iteration times for the serving simulator (:mod:`.simulator`; a few ms with the
    vectorised engine). ``max_tokens``: most tokens in one iteration; ``max_batch``: most decodes (and logits)
    in one; ``max_context``: longest context [tokens]. ``layout`` "DPA": the counts are one attention-DP
    rank's, and the tables price its iteration with every rank as loaded (module docstring). ``decodes`` False
    (a prefill pool's tables): no decode attention core is tabulated (its rows stay zero), only the parts that
    price batches of prompts."""
    if not isinstance(dep, Deployment):
        raise SpecError(f"dep must be a Deployment, got {type(dep).__name__}")
    layout = _check.choice("layout", layout, SIM_LAYOUTS)
    dep.check_layout(layout)
    M = _check.integer("max_tokens", max_tokens, lo=1, hi=1 << 22, unit="tokens")
    B = _check.integer("max_batch", max_batch, lo=1, hi=1 << 16)
    S = _check.integer("max_context", max_context, lo=1, hi=MAX_CONTEXT, unit="tokens")
    B = min(B, M)
    d1 = dataclasses.replace(dep, q_tokens=1, logits_tokens=None, context_cv=0.0)
    # the engine's batch for a count of the table's: the instance's own (TP), or every rank's (DPA)
    g = float(dep.ranks) if layout == "DPA" else 1.0
    m = np.arange(1, M + 1, dtype=float)
    st = step_time(d1, g * m, 1.0, layout)
    shared = np.asarray(st["step_s"] - st["core_s"] - st["head_s"] - st["comm_head_s"], dtype=float)
    n = np.arange(1, B + 1, dtype=float)
    hd = step_time(d1, g * np.arange(1, B + 2, dtype=float), 1.0, layout)  # decodes + one chunk's logit
    head = np.asarray(hd["head_s"] + hd["comm_head_s"], dtype=float)
    ctx = _upto(CTX_NODES, S + 2.0)
    dec = (np.asarray(step_time(d1, g * n[:, None], np.maximum(ctx, 1.0)[None, :], layout)["core_s"], dtype=float)
           if decodes else np.zeros((1, ctx.size)))
    cg = _upto(CHUNK_NODES, max(M, 2))
    # one sequence's chunk: under DPA it sits on one rank, which attends with whole heads
    chunk = np.asarray(layers_core_s(d1, 1, np.maximum(ctx[None, :] + cg[:, None] / 2.0, 1.0), layout, cg[:, None]),
                       dtype=float)
    return StepTables(dep=dep, shared_s=[0.0] + shared.tolist(), head_s=[0.0] + head.tolist(), ctx_grid=ctx,
                      dec_core=np.vstack([np.zeros(ctx.size), dec]), chunk_grid=cg, chunk_core=chunk, layout=layout)


def pipeline_tables(tables: StepTables, pp: int) -> StepTables:
    """The step tables of one virtual engine of a pipeline of ``pp`` stages (:mod:`..step.pipeline`), from the
    tables of ``tables.dep`` (one stage's T ranks holding the whole model): with pp micro-batches in flight, each
    stage shared by all of them, one engine's iteration takes pp times the slowest stage, ceil(L / pp) / L of the
    layers plus the LM head and the per-step overhead (the last stage's) [assumption: the engines are equally
    loaded, as requests dealt round-robin over them make them; the stage-to-stage sends overlap the other
    micro-batches' compute]. pp = 1: ``tables`` unchanged."""
    p = _check.integer("pp", pp, lo=1, hi=1 << 10)
    if p == 1:
        return tables
    dep = tables.dep
    L = dep.model.layers
    share = p * math.ceil(L / p) / L  # pp x the slowest stage's share of the layers
    ov = float(step_time(dataclasses.replace(dep, q_tokens=1, logits_tokens=None), 1.0, 1.0, "TP")["overhead_s"])
    shared = [0.0] + [share * (x - ov) + p * ov for x in tables.shared_s[1:]]
    head = [p * x for x in tables.head_s]
    return dataclasses.replace(tables, shared_s=shared, head_s=head, dec_core=share * tables.dec_core,
                               chunk_core=share * tables.chunk_core, _ctx=[], _dec_rows=[], _chunk_log=[],
                               _chunk_rows=[])


def speculative_tables(tables: StepTables, spec) -> StepTables:
    """The step tables of a decode side that decodes speculatively (:mod:`..step.speculative`), in output tokens:
    one of the simulator's decode iterations stands for 1 / tau of a draft + verify cycle, so that a decoding
    request still gains one token (and one token of KV) per iteration while its time per token is the cycle's over
    the tokens per step: the decode core at batch b and context s becomes cycle(b, s) / tau - shared(b) - head(b),
    and a decode-only iteration costs exactly :func:`..step.speculative.spec_step`'s ``tpot_s``. Prefill parts are
    unchanged (a recompute after a preemption prefills as ever) [assumption: every sequence accepts the mean tau
    tokens per step, so tokens come as an even stream at the mean rate; the bursts a real verify step delivers
    are restored in the ITL by :func:`llmexplore.models.serving.simulator.simulate_disaggregated`]. A chunk
    beside speculative decodes is not priced right by this (it would run once per 1 / tau cycle): colocated
    speculative serving is not simulated."""
    from ..step.speculative import resolve_spec, spec_step

    spec = resolve_spec(spec)
    if spec is None:
        return tables
    dep = tables.dep
    d1 = dataclasses.replace(dep, q_tokens=1, logits_tokens=None, context_cv=0.0)
    g = float(dep.ranks) if tables.layout == "DPA" else 1.0
    nb = tables.dec_core.shape[0] - 1
    n = np.arange(1, nb + 1, dtype=float)
    ctx = np.maximum(tables.ctx_grid, 1.0)
    cyc = np.asarray(spec_step(d1, spec, g * n[:, None], ctx[None, :], tables.layout, plain=False)["cycle_s"],
                     dtype=float)
    base = np.asarray(tables.shared_s[1:nb + 1], dtype=float) + np.asarray(tables.head_s[1:nb + 1], dtype=float)
    core = cyc / spec.tokens_per_step - base[:, None]
    return dataclasses.replace(tables, dec_core=np.vstack([np.zeros(ctx.size), core]), _ctx=[], _dec_rows=[],
                               _chunk_log=[], _chunk_rows=[])


class PipelineTablesCache(TablesCache):
    """A :class:`TablesCache` that serves the deployments named in ``stages`` ({(repr(dep), decodes): pp}: a
    pool's tables, decode tables or not) as one virtual
    engine of a pipeline (:func:`pipeline_tables`): how the simulator runs a pipeline-parallel side without a code
    path of its own (its instances become pp engines each, with 1/pp of the requests and of the KV blocks)."""

    def __init__(self, stages: dict, inner: TablesCache | None = None) -> None:
        super().__init__()
        self.stages, self.inner = dict(stages), inner or TablesCache()

    def get(self, dep: Deployment, **kw) -> StepTables:
        tb = self.inner.get(dep, **kw)
        pp = self.stages.get((repr(dep), kw.get("decodes", True)), 1)
        return pipeline_tables(tb, pp) if pp > 1 else tb

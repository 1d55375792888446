"""Speculative-decoding sweeps: tidy tables built from :mod:`llmexplore.models.step.speculative`.

Every function takes a :class:`SpecSetup` (a deployment, a speculative-decoding spec and the decode context) and
returns a DataFrame (one row per point) or a record, with units in the column names. A batch that does not fit in
memory with the draft keeps its numbers, ``feasible = False`` and a ``reason``. The published checks
(:func:`published_checks`) read ``data/validation/speculative.csv``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .. import _check, presets
from ..errors import SpecError
from ..models.step.decode import max_batch
from ..models.step.engine import Deployment
from ..models.step.speculative import (SAME_LENGTH_TOKENS, check_spec, resolve_spec, spec_max_batch, spec_memory, spec_step,
                                       with_accepted_length)
from ..specs import SpecDecode

__all__ = ["SpecSetup", "setup", "point", "point_frame", "speedup_vs_batch", "breakeven_batches", "breakeven_lengths", "memory_summary",
           "published_checks", "check_errors", "accepted_length_options", "own_length_rows", "SAME_LENGTH_TOKENS",
           "CHECKS_CSV"]

CHECKS_CSV = "validation/speculative.csv"  # under data/
MAX_BATCH_LIMIT = 1 << 16  # largest batch the memory caps search


@dataclass(frozen=True)
class SpecSetup:
    """Everything fixed for one speculative-decoding study: the target deployment, the spec (with its
    acceptance) and the mean decode context [tokens]."""

    dep: Deployment
    spec: SpecDecode
    context: int = 2000
    layout: str = "TP"

    def label(self) -> str:
        return f"{self.dep.label()}, {self.spec.label}"


def setup(model="deepseek-v3", gpu="h200", ranks: int = 8, *, speculative="deepseek-mtp-1", accepted_length=None,
          context: int = 2000, runtime="default", weight_dtype=None, kv_dtype="bf16", moe_ep=None) -> SpecSetup:
    """Build a :class:`SpecSetup` from preset names (validated): ``accepted_length`` (mean tokens per verify
    step) replaces the preset's acceptance when given. SpecError naming the argument otherwise (an MTP draft on a
    model without an MTP module, an accepted length outside [1, k + 1], ...)."""
    dep = Deployment.build(model, gpu, ranks, runtime=runtime, weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                           moe_ep=moe_ep)
    spec = resolve_spec(speculative)
    if spec is None:
        raise SpecError("speculative must name a speculative-decoding preset (data/speculative.yaml), got None")
    check_spec(dep.model, spec)
    spec = with_accepted_length(spec, accepted_length)
    context = _check.integer("context", context, lo=1, hi=1 << 24, unit="tokens")
    return SpecSetup(dep, spec, context)


def accepted_length_options(spec: SpecDecode, n: int = 9) -> list[float]:
    """``n`` accepted lengths from 1 (every draft rejected) to k + 1 (every draft accepted), rounded to 0.01, with
    the spec's own exactly (a grid point within 0.01 of it gives way, so the preset's curve is the preset's)."""
    own = float(spec.tokens_per_step)
    grid = {round(float(x), 2) for x in np.linspace(1.0, spec.draft_tokens + 1.0, int(n))}
    return sorted({x for x in grid if abs(x - own) >= 0.01} | {own})


def _with(s: SpecSetup, tau) -> SpecDecode:
    return s.spec if tau is None else with_accepted_length(s.spec, float(tau))


def point(s: SpecSetup, batch: int = 1) -> dict:
    """One batch: the plain decode step, the draft, the verify pass, the tokens per step, TPOT with and without
    speculation and the speed-up (a record of floats, times in ms)."""
    batch = _check.integer("batch", batch, lo=1, hi=1 << 24)
    r = spec_step(s.dep, s.spec, batch, s.context, s.layout)
    return {"batch": batch, "context": s.context, "plain_ms": float(r["plain_s"]) * 1e3,
            "draft_ms": float(r["draft_s"]) * 1e3, "verify_ms": float(r["verify_s"]) * 1e3,
            "cycle_ms": float(r["cycle_s"]) * 1e3, "tokens_per_step": float(r["tokens_per_step"]),
            "tpot_ms": float(r["tpot_s"]) * 1e3, "plain_tpot_ms": float(r["plain_s"]) * 1e3,
            "speedup": float(r["speedup"]), "draft_tokens": s.spec.draft_tokens, "verify_width": s.spec.verify_width}


def point_frame(pt: dict) -> pd.DataFrame:
    """:func:`point`'s record as a one-row table (for a people table)."""
    return pd.DataFrame([pt])


def speedup_vs_batch(s: SpecSetup, batches, accepted_lengths=None) -> pd.DataFrame:
    """Speed-up, TPOT and throughput with and without speculation over a batch grid, for each accepted length
    (None: the spec's own). Rows: accepted_length, batch, speedup, tpot_ms, plain_tpot_ms, tokens_per_s,
    plain_tokens_per_s, feasible (the batch fits with the draft's memory), reason."""
    b = _check.real_array("batches", batches, lo=1, hi=1 << 24)
    if b.ndim != 1 or not b.size:
        raise SpecError(f"batches must be a non-empty list of batch sizes, got {batches!r}")
    b = np.unique(np.round(b))  # batches are counts: a log grid's points rounded, each once
    taus = [None] if accepted_lengths is None else list(accepted_lengths)
    cap = int(spec_max_batch(s.dep, s.spec, s.context, s.layout, limit=MAX_BATCH_LIMIT))
    rows = []
    for tau in taus:
        sp = _with(s, tau)
        r = spec_step(s.dep, sp, b, s.context, s.layout)
        for i, bi in enumerate(b):
            fits = bi <= cap
            rows.append({"accepted_length": sp.tokens_per_step, "batch": int(bi), "speedup": float(r["speedup"][i]),
                         "tpot_ms": float(r["tpot_s"][i]) * 1e3, "plain_tpot_ms": float(r["plain_s"][i]) * 1e3,
                         "tokens_per_s": float(r["tokens_per_s"][i]),
                         "plain_tokens_per_s": float(bi / r["plain_s"][i]), "feasible": bool(fits),
                         "reason": "" if fits else f"does not fit with the draft: at most {cap:,} sequences of "
                                                   f"{s.context:,} tokens"})
    return pd.DataFrame(rows)


def own_length_rows(df: pd.DataFrame, s: SpecSetup) -> pd.DataFrame:
    """The rows of :func:`speedup_vs_batch`'s table at the setup's own accepted length, by batch."""
    return df[(df["accepted_length"] - s.spec.tokens_per_step).abs() < SAME_LENGTH_TOKENS].sort_values("batch")


def breakeven_batches(df: pd.DataFrame) -> dict[str, float]:
    """For each accepted length of :func:`speedup_vs_batch`'s table, the smallest batch at which speculation
    stops paying (speed-up below 1; linear interpolation between grid points), inf if it pays over the whole
    grid, 0 if it never pays. Keys: the accepted length as text ("1.88")."""
    out = {}
    for tau, g in df.groupby("accepted_length", sort=True):
        g = g.sort_values("batch")
        x, y = g["batch"].to_numpy(float), g["speedup"].to_numpy(float)
        below = np.nonzero(y < 1.0)[0]
        if not below.size:
            out[f"{tau:.2f}"] = float("inf")
        elif below[0] == 0:
            out[f"{tau:.2f}"] = 0.0
        else:
            j = below[0]
            x0, x1, y0, y1 = np.log(x[j - 1]), np.log(x[j]), y[j - 1], y[j]
            out[f"{tau:.2f}"] = float(np.exp(x0 + (1.0 - y0) * (x1 - x0) / (y1 - y0)))
    return out


def breakeven_lengths(df: pd.DataFrame) -> pd.Series:
    """For each batch of :func:`speedup_vs_batch`'s table, the accepted length at which speculation starts paying
    (speed-up 1), interpolated linearly between grid lengths (exact: at a fixed batch the draft and verify cost
    does not depend on acceptance, so the speed-up is linear in it); inf if no length shown pays, and the
    smallest length shown if every one does. Index: batch."""
    out = {}
    for b, g in df.groupby("batch", sort=True):
        g = g.sort_values("accepted_length")
        tau, y = g["accepted_length"].to_numpy(float), g["speedup"].to_numpy(float)
        if y[-1] <= 1.0:
            out[b] = float("inf")
        elif y[0] > 1.0 or tau.size == 1:
            out[b] = float(tau[0])
        else:
            j = int(np.nonzero(y > 1.0)[0][0])
            out[b] = float(tau[j - 1] + (1.0 - y[j - 1]) * (tau[j] - tau[j - 1]) / (y[j] - y[j - 1]))
    return pd.Series(out, name="breakeven_accepted_length", dtype=float).rename_axis("batch")


def memory_summary(s: SpecSetup) -> dict:
    """What the draft costs in memory at the setup's context: the largest batch with and without speculation,
    the draft's weights per rank [GB] and its KV per sequence [MB]."""
    plain = int(max_batch(s.dep, s.context, s.layout, limit=MAX_BATCH_LIMIT))
    spec = int(spec_max_batch(s.dep, s.spec, s.context, s.layout, limit=MAX_BATCH_LIMIT))
    m = spec_memory(s.dep, s.spec, 1, s.context, s.layout)
    return {"max_batch_plain": plain, "max_batch_spec": spec, "draft_weights_GB": float(m["draft_weights_B"]) / 1e9,
            "draft_kv_MB_per_seq": float(m["draft_kv_B"]) / 1e6,
            "batch_lost_pct": 100.0 * (1.0 - spec / plain) if plain else float("nan")}


def published_checks() -> pd.DataFrame:
    """The published speed-ups of ``data/validation/speculative.csv`` against the model: one row per published
    point with ``model_value`` (the speed-up, or for ``kind`` ratio the speed-up relative to the study's first
    batch), ``published`` and ``error_pct`` = 100 (model / published - 1)."""
    path, _ = presets.data_file(CHECKS_CSV)
    df = pd.read_csv(path, comment="#")
    out = []
    for study, g in df.groupby("study", sort=False):
        first = None
        for r in g.itertuples():
            dep = Deployment.build(r.model, r.gpu, int(r.ranks), runtime=r.runtime, weight_dtype=r.weight_dtype,
                                   moe_ep=None if pd.isna(r.moe_ep) else int(r.moe_ep))
            tau = 3.0 if pd.isna(r.accepted_length) else float(r.accepted_length)
            spec = SpecDecode(name=r.id, method=r.method, draft_tokens=int(r.draft_tokens), accepted_length=tau,
                              draft_vocab=int(r.draft_vocab), conditions=f"published check {r.id}")
            sp = float(spec_step(dep, spec, int(r.batch), int(r.context))["speedup"])
            first = sp if first is None else first
            value = sp / first if r.kind == "ratio" else sp
            out.append({"id": r.id, "study": study, "kind": r.kind, "model": r.model, "gpu": r.gpu,
                        "draft_tokens": int(r.draft_tokens), "accepted_length": r.accepted_length, "batch": int(r.batch),
                        "published": float(r.published), "model_value": value,
                        "error_pct": 100.0 * (value / float(r.published) - 1.0), "source": r.source})
    return pd.DataFrame(out)


def check_errors(checks: pd.DataFrame) -> dict[str, float]:
    """Largest absolute error [%] of each study of :func:`published_checks`."""
    return {study: float(g["error_pct"].abs().max()) for study, g in checks.groupby("study", sort=False)}

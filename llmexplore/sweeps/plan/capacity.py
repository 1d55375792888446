"""Capacity runs: many planning questions streamed to Parquet, resumable, on a process pool or a Dask cluster
(docs/sweeps.md)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...deployment import MODES
from .question import Question
from .search import plan

__all__ = ["capacity_task", "capacity_plan"]


def capacity_task(task: dict) -> list[dict]:
    """One planning question of a capacity plan (picklable, for :func:`.distributed.run_sweep`): the best
    configuration of each mode as rows tagged with the question's fields."""
    fields_ = {k: v for k, v in task.items() if k != "task_id"}
    q = Question(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in fields_.items()})
    res = plan(q)
    tag = {f"q_{k}": (",".join(map(str, v)) if isinstance(v, (list, tuple)) else v) for k, v in fields_.items()}
    out = []
    for mode in MODES:
        r = res["best_by_mode"][mode]
        base = {**tag, "mode": mode, "best_overall": bool(r is not None and res["best_mode"] == mode)}
        if r is None:
            out.append({**base, "feasible": False, "label": "", "gpus": np.nan, "rate_per_s": np.nan,
                        "tokens_per_s_per_gpu": np.nan, "tokens_per_s_per_user": np.nan, "ttft_ms": np.nan,
                        "tpot_ms": np.nan})
        else:
            out.append({**base, "feasible": True, **{k: r[k] for k in ("label", "gpus", "rate_per_s",
                        "tokens_per_s_per_gpu", "tokens_per_s_per_user", "ttft_ms", "tpot_ms")}})
    return out


def capacity_plan(questions, *, out=None, scheduler=None, workers: int | None = None, resume: bool = True
                  ) -> pd.DataFrame:
    """Answer many planning questions (dicts of :class:`Question` fields, e.g. a grid over models, GPUs,
    budgets and traffic mixes) on a local process pool or an existing Dask cluster (``scheduler``), the rows
    streaming to a Parquet dataset at ``out`` so an interrupted plan resumes where it stopped
    (:func:`.distributed.run_sweep`). Returns one row per question and mode (its best configuration)."""
    from ..distributed import run_sweep

    tasks = []
    for q in questions:
        q = dict(q)
        Question(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in q.items() if k != "task_id"})
        tasks.append({k: (list(v) if isinstance(v, tuple) else v) for k, v in q.items()})
    return run_sweep(capacity_task, tasks, out=out, scheduler=scheduler, workers=workers, resume=resume)

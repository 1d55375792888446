"""Check the model against published end-to-end measurements it was never fitted to (``data/validation/``).

Each row of ``data/validation/e2e.csv`` is a decode step (TPOT / ITL at ``batch`` sequences of mean KV
``context``), a loaded decode step (mean ITL of closed-loop serving at concurrency ``batch`` with ``isl`` /
``osl``: the other requests' prefills share the steps, :func:`llmexplore.models.step.prefill.mixed_step_time`) or a
prefill (TTFT of ``batch`` prompts of ``prompt_tokens``) of one deployment (model, GPU,
ranks, attention layout, dtypes, engine). :func:`evaluate` predicts every row with the step engine and returns
the error table; :func:`summary` gives the error per category (model family x GPU x dtype x parallelism x
phase) and :func:`ranking` checks that the model orders parallelism options as the measurements do.

Runtime per row: ``"engine"`` (default) prices each row with the preset of its engine (``trtllm``, ``vllm``,
``sglang``); any other value is a runtime preset used for every row (e.g. ``"default"`` or ``"scalar"``).
A row the model cannot represent (e.g. 72 ranks do not divide 128 heads, a GPU without kernel curves in a
curve-only comparison) is kept with ``status`` saying why and is left out of the statistics.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from . import presets
from .errors import LlmexploreError, SpecError
from .models.step.decode import step_time
from .models.step.engine import MAX_REDUNDANT, Deployment
from .models.step.prefill import mixed_step_time

__all__ = ["VALIDATION_CSV", "REQUIRED", "KINDS", "load", "evaluate", "summary", "ranking", "category"]

VALIDATION_CSV = presets.DATA_DIR / "validation" / "e2e.csv"
ENGINES = ("trtllm", "vllm", "sglang")


#: columns every validation row needs (data/validation/README.md); the rest are optional
REQUIRED = ("id", "kind", "model", "gpu", "ranks", "layout", "weight_dtype", "kv_dtype", "engine", "batch",
            "measured")
KINDS = {"decode": ("context",), "decode_loaded": ("context", "isl", "osl"), "prefill": ("prompt_tokens",)}
MAX_CSV_BYTES = 64 << 20
#: optional true/false columns (empty = false): the Deployment options of the same names
FLAGS = ("two_batch_overlap", "dp_dense", "dp_lm_head")


def load(path: str | Path = VALIDATION_CSV) -> pd.DataFrame:
    """The validation rows (columns in data/validation/README.md): the shipped set, or a CSV of your own
    measurements in the same columns. SpecError naming the file, the line, the column and the rule for a
    missing column, a duplicate id, an unknown kind or layout, a non-positive or non-numeric count or time, or a
    unit other than ms. Unknown model or GPU presets are not errors here: :func:`evaluate` marks those rows
    "not modelled"."""
    from io import StringIO

    from . import _check
    from .models.step.engine import LAYOUTS

    where = str(path)
    kind_of_path = _check.path_kind(path)
    if kind_of_path != "file":
        got = "no such file" if kind_of_path == "missing" else kind_of_path
        raise SpecError(f"{where} must be an existing CSV file, got {got}")
    text = _check.read_text(path, where, MAX_CSV_BYTES)
    try:
        df = pd.read_csv(StringIO(text), dtype={"id": str, "model": str, "gpu": str, "engine": str})
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as exc:
        raise SpecError(f"{where} is not a readable CSV: {str(exc).splitlines()[0]}") from None
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise SpecError(f"{where}: missing column(s) {missing}; a validation row needs {list(REQUIRED)} "
                        "(data/validation/README.md)")
    if not len(df):
        raise SpecError(f"{where}: no rows (only a header)")
    dup = df["id"][df["id"].duplicated()]
    if len(dup):
        raise SpecError(f"{where} line {int(dup.index[0]) + 2}: id must be unique, got {dup.iloc[0]!r} again")

    def number(i, col, *, integer=False, zero=False, optional=False, hi=float("inf"), lo=0.0):
        v = df.at[i, col] if col in df.columns else None
        if optional and (v is None or (isinstance(v, float) and np.isnan(v))):
            return
        try:
            x = float(v)
        except (TypeError, ValueError):
            x = float("nan")
        if (not np.isfinite(x) or x < lo or x > hi or (x == 0 and not zero) or (integer and x != int(x))):
            rule = (f"an integer >= {0 if zero else 1}" if integer else
                    f"a finite number >= {lo:g}" if lo > 0 else "a finite number > 0") + (
                f" and <= {hi:,.0f}" if np.isfinite(hi) else "") + (
                " or empty" if optional else f" for a {df.at[i, 'kind']} row")
            raise SpecError(f"{where} line {i + 2}: {col} must be {rule}, got "
                            f"{_check.shown(v.item() if isinstance(v, np.generic) else v)}")

    for i in df.index:
        kind = df.at[i, "kind"]
        if kind not in KINDS:
            raise SpecError(f"{where} line {i + 2}: kind must be one of {list(KINDS)}, got {kind!r}")
        if df.at[i, "layout"] not in LAYOUTS:
            raise SpecError(f"{where} line {i + 2}: layout must be one of {list(LAYOUTS)}, got {df.at[i, 'layout']!r}")
        if "unit" in df.columns and df.at[i, "unit"] != "ms":
            raise SpecError(f"{where} line {i + 2}: unit must be 'ms', got {df.at[i, 'unit']!r}")
        number(i, "measured", lo=MIN_MEASURED_MS, hi=MAX_MEASURED_MS)  # 1e-320 ms read as an error of +inf %
        for col in ("ranks", "batch"):
            number(i, col, integer=True)
        for col in KINDS[kind]:
            number(i, col, integer=col != "context")
        for col in FLAGS:
            v = df.at[i, col] if col in df.columns else None
            if not (v is None or v is True or v is False or (isinstance(v, float) and np.isnan(v))
                    or str(v).strip().lower() in ("", "true", "false")):
                raise SpecError(f"{where} line {i + 2}: {col} must be true, false or empty, got {_check.shown(v)}")
        number(i, "moe_redundant", integer=True, zero=True, optional=True, hi=MAX_REDUNDANT)
    return df


def category(row) -> str:
    """model family x GPU x weight dtype x parallelism x phase, e.g. ``dense|h100-sxm|fp8|TP2|decode``."""
    m = presets.model(row["model"])
    family = "mla-moe" if m.is_mla else ("moe" if m.is_moe else "dense")
    return f"{family}|{row['gpu']}|{row['weight_dtype']}|{row['layout']}{int(row['ranks'])}|{row['kind']}"


def _flag(row, col: str) -> bool:
    v = row.get(col)
    return v is True or str(v).strip().lower() == "true"


def _count(row, col: str) -> int:
    v = row.get(col)  # load() checked it: an integer >= 0, or empty
    return 0 if v is None or pd.isna(v) else int(v)


def _predict_ms(row, runtime: str) -> float:
    dispatch = row.get("moe_dispatch")
    sampler = row.get("sampler")
    dep = Deployment.build(row["model"], row["gpu"], int(row["ranks"]), runtime=runtime,
                           weight_dtype=row["weight_dtype"], kv_dtype=row["kv_dtype"],
                           moe_dispatch=dispatch if isinstance(dispatch, str) and dispatch else "gather",
                           two_batch_overlap=_flag(row, "two_batch_overlap"),
                           sampler=sampler if isinstance(sampler, str) and sampler else "fused",
                           moe_redundant=_count(row, "moe_redundant"), dp_dense=_flag(row, "dp_dense"),
                           dp_lm_head=_flag(row, "dp_lm_head"))
    b = int(row["batch"])
    if row["kind"] == "decode":
        return float(step_time(dep, b, float(row["context"]), row["layout"])["step_s"]) * 1e3
    if row["kind"] == "decode_loaded":
        # closed-loop serving at concurrency B: each of the other B - 1 requests brings an ISL-token prefill
        # every OSL steps, so the mean step mixes (B - 1) ISL / OSL prefill tokens into the decode batch
        isl, osl = float(row["isl"]), float(row["osl"])
        chunk = round((b - 1) * isl / osl)
        return float(mixed_step_time(dep, b, float(row["context"]), chunk, max(isl - chunk, 0.0) / 2.0)
                     ["step_s"]) * 1e3
    P = int(row["prompt_tokens"])
    return float(step_time(dep, b, P / 2.0, row["layout"], q_tokens=P, logits_tokens=1)["step_s"]) * 1e3


def evaluate(runtime: str = "engine", rows: pd.DataFrame | None = None) -> pd.DataFrame:
    """Predicted vs measured for every row: columns id, kind, model, gpu, ranks, layout, weight_dtype, engine,
    batch, context, prompt_tokens, category, runtime, measured_ms, predicted_ms, error_pct (predicted / measured
    - 1, in %), status. With ``runtime="engine"`` a row whose engine has no preset is priced with ``default``."""
    if runtime != "engine":
        presets.runtime(runtime)  # an unknown preset is the caller's error, not every row's "not modelled"
    rows = load() if rows is None else rows
    out = []
    for _, r in rows.iterrows():
        if runtime == "engine":
            rt = r["engine"] if r["engine"] in ENGINES else "default"
        else:
            rt = runtime
        rec = {k: r.get(k) for k in ("id", "kind", "model", "gpu", "ranks", "layout", "weight_dtype", "kv_dtype",
                                      "engine", "batch", "context", "prompt_tokens", "isl", "osl")}
        rec.update(runtime=rt, measured_ms=float(r["measured"]))
        try:
            rec["category"] = category(r)  # an unknown model preset is this row's "not modelled", not a crash
            pred = _predict_ms(r, rt)
            rec.update(predicted_ms=pred, error_pct=100.0 * (pred / rec["measured_ms"] - 1.0), status="ok")
        except LlmexploreError as exc:
            rec.setdefault("category",
                           f"?|{r['gpu']}|{r['weight_dtype']}|{r['layout']}{int(r['ranks'])}|{r['kind']}")
            rec.update(predicted_ms=np.nan, error_pct=np.nan, status=f"not modelled: {exc}")
        out.append(rec)
    return pd.DataFrame(out)


def summary(table: pd.DataFrame) -> dict:
    """Headline accuracy: rows modelled, median and p90 |error| [%], and the per-category medians."""
    ok = table[table.status == "ok"]
    err = ok.error_pct.abs()
    per = (ok.assign(abs_err=err).groupby("category")
           .agg(rows=("id", "size"), median_abs_error_pct=("abs_err", "median"),
                median_error_pct=("error_pct", "median"))
           .reset_index().sort_values("median_abs_error_pct", ascending=False))
    return {"rows": int(len(table)), "modelled": int(len(ok)),
            "median_abs_error_pct": float(err.median()) if len(ok) else float("nan"),
            "p90_abs_error_pct": float(np.percentile(err, 90)) if len(ok) else float("nan"),
            "worst_category": per.iloc[0].to_dict() if len(per) else {},
            "categories": per}


#: the range of a measured time [ms]: no kernel, step or prefill is faster than a microsecond or lasts a day
MIN_MEASURED_MS, MAX_MEASURED_MS = 1e-3, 86_400_000.0

#: most rows of one model, GPU, phase and workload the ranking compares pairwise (about 2 million pairs)
MAX_RANKING_GROUP = 2000


def ranking(table: pd.DataFrame, *, margin_pct: float = 5.0) -> pd.DataFrame:
    """Pairs of rows of one model, GPU, phase and workload (batch, context or prompt) that differ in their
    deployment (ranks, layout, dtype, engine), where the measured times differ by more than ``margin_pct``:
    does the model order them the same way? Columns a, b, measured_ratio, predicted_ratio, resolved (False:
    the model sees the same deployment, e.g. an EP size it does not represent), agrees."""
    ok = table[table.status == "ok"].reset_index(drop=True)
    cols = ["a", "b", "measured_ratio", "predicted_ratio", "resolved", "agrees"]
    keys = ["model", "gpu", "kind", "batch", "context", "prompt_tokens"]
    frames = []
    for key, g in ok.groupby(keys, dropna=False):
        n = len(g)
        if n > MAX_RANKING_GROUP:
            raise SpecError(f"the measurements must hold at most {MAX_RANKING_GROUP:,} rows of one model, GPU, phase and "
                            f"workload (the ranking compares every pair of them), got {n:,} rows of "
                            f"{key[0]} on {key[1]} ({key[2]}, batch {key[3]}, context {key[4]}, prompt {key[5]})")
        if n < 2:
            continue
        i, j = np.triu_indices(n, 1)  # every pair once, in the order of the rows (as two nested loops)
        m, p = g["measured_ms"].to_numpy(float), g["predicted_ms"].to_numpy(float)
        mr = m[i] / m[j]
        far = np.abs(mr - 1.0) * 100 > margin_pct
        i, j, mr = i[far], j[far], mr[far]
        pr = p[i] / p[j]
        resolved = np.abs(pr - 1.0) > 1e-9  # the model tells the two deployments apart
        ids = g["id"].to_numpy()
        frames.append(pd.DataFrame({"a": ids[i], "b": ids[j], "measured_ratio": mr, "predicted_ratio": pr,
                                    "resolved": resolved, "agrees": resolved & ((mr > 1) == (pr > 1))}))
    if not frames:
        return pd.DataFrame(columns=cols)
    out = pd.concat(frames, ignore_index=True)
    out["resolved"] = out["resolved"].astype(bool)
    out["agrees"] = out["agrees"].astype(bool)
    return out[cols]

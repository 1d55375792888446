"""The model against end-to-end measurements (notebooks/05_fidelity): :func:`accuracy_table` prices every
validation row (``data/validation/e2e.csv``, never fitted) and every in-sample calibration point
(``data/calibration/aic-llama31-70b-tp8-h100.csv``, which the runtime presets were fitted to) under each
runtime choice: ``engine`` (each row priced by its engine's preset, as :func:`llmexplore.validate.evaluate`
does), ``default`` (the engine-neutral kernel curves) and ``scalar`` (the pre-curve model with one efficiency
per kernel class). :func:`accuracy_summary`, :func:`category_errors`, :func:`not_modelled`,
:func:`ranking_pairs` and :func:`sampler_effect` read it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ... import _check, calibrate, presets, validate
from ...errors import SpecError
from ...labels import runtime_label

#: the runtime choices compared: each row's engine preset, the engine-neutral curves, the pre-curve model
RUNTIMES = ("engine", "default", "scalar")
#: the in-sample set: AIConfigurator 0.12.0's estimate from its measured-kernel database (TensorRT-LLM 1.3.0rc20)
CALIBRATION_CSV = presets.DATA_DIR / "calibration" / "aic-llama31-70b-tp8-h100.csv"
#: the engine whose preset prices the in-sample points under the ``engine`` choice (the database's engine)
CALIBRATION_ENGINE = "trtllm"


def runtime_choices(*first: str) -> tuple[str, ...]:
    """``first`` (e.g. the notebook's PRICING and BASELINE), then the rest of :data:`RUNTIMES`, each once."""
    return tuple(dict.fromkeys([*first, *RUNTIMES]))


def _preset_of(choice: str, engine: str) -> str:
    return engine if choice == "engine" else choice


def _in_sample(choice: str, path: Path = CALIBRATION_CSV) -> pd.DataFrame:
    points = [p for p in calibrate.load_points(path) if p.fitted]
    rt = _preset_of(choice, CALIBRATION_ENGINE)
    pred = calibrate.predict(points, presets.runtime(rt))
    rows = []
    for p, y in zip(points, pred):
        rec = {"id": f"in-sample {p.label()}", "kind": p.kind, "model": p.model, "gpu": p.gpu, "ranks": p.ranks,
               "layout": "TP", "weight_dtype": p.weight_dtype, "kv_dtype": p.kv_dtype, "engine": CALIBRATION_ENGINE,
               "batch": p.batch, "context": p.context if p.kind == "decode" else np.nan,
               "prompt_tokens": p.prompt_tokens if p.kind == "prefill" else np.nan}
        rec.update(category=validate.category(rec), runtime=rt, measured_ms=p.measured, predicted_ms=float(y),
                   error_pct=100.0 * (float(y) / p.measured - 1.0), status="ok")
        rows.append(rec)
    return pd.DataFrame(rows)


def accuracy_table(runtimes=RUNTIMES) -> pd.DataFrame:
    """Predicted against measured for every validation row and in-sample point under each runtime choice: the
    columns of :func:`llmexplore.validate.evaluate` plus ``choice`` (the runtime choice), ``set``
    (``validation``: published measurements never fitted; ``in-sample``: the calibration points the presets'
    overheads and efficiencies were fitted to) and ``abs_error_pct``. A row the model cannot represent keeps
    ``status`` saying why, with NaN predictions."""
    runtimes = [check_runtime_choice("runtimes", r) for r in runtimes]
    frames = []
    for choice in runtimes:
        frames.append(validate.evaluate(choice).assign(choice=choice, set="validation"))
        frames.append(_in_sample(choice).assign(choice=choice, set="in-sample"))
    out = pd.concat(frames, ignore_index=True)
    out["abs_error_pct"] = out["error_pct"].abs()
    return out


def _validation(acc: pd.DataFrame, choice: str) -> pd.DataFrame:
    return acc[(acc["set"] == "validation") & (acc["choice"] == choice)]


def accuracy_summary(acc: pd.DataFrame, *, band_pct: float = 15.0) -> pd.DataFrame:
    """One row per runtime choice (in the order of ``acc``): validation ``rows`` and rows ``modelled``, median and
    p90 |error| [%] over the modelled rows (:func:`llmexplore.validate.summary`), rows ``within_band`` (|error| <=
    ``band_pct``), the worst category and its median error [%], and the in-sample points with their median and
    largest |error|."""
    band = _check.number("band_pct", band_pct, lo=0, lo_open=True, hi=1000, unit="%")
    out = []
    for choice in pd.unique(acc["choice"]):
        val = _validation(acc, choice)
        s = validate.summary(val)
        ok = val[val["status"] == "ok"]
        ins = acc[(acc["set"] == "in-sample") & (acc["choice"] == choice)]
        worst = s["worst_category"]
        out.append({"choice": choice, "label": runtime_label(choice), "rows": s["rows"], "modelled": s["modelled"],
                    "median_abs_error_pct": s["median_abs_error_pct"], "p90_abs_error_pct": s["p90_abs_error_pct"],
                    "within_band": int((ok["abs_error_pct"] <= band).sum()), "band_pct": band,
                    "worst_category": worst.get("category", ""),
                    "worst_median_error_pct": worst.get("median_error_pct", np.nan),
                    "in_sample_points": int(len(ins)),
                    "in_sample_median_abs_error_pct": float(ins["abs_error_pct"].median()),
                    "in_sample_max_abs_error_pct": float(ins["abs_error_pct"].max())})
    return pd.DataFrame(out)


def sampler_effect(choice: str = "engine") -> pd.DataFrame:
    """The validation rows whose source sampled with vLLM's sort-based top-k/top-p (``sampler == "torch_sort"``,
    docs/models.md §1.1b), priced both ways under runtime ``choice``: columns id, model, gpu, batch,
    ``error_pct`` (with the sampler, as the accuracy table prices them) and ``error_fused_pct`` (the same rows
    with the sampler left out), modelled rows only, by batch."""
    choice = check_runtime_choice("choice", choice)
    rows = validate.load()
    if "sampler" not in rows.columns:
        return pd.DataFrame(columns=["id", "model", "gpu", "batch", "error_pct", "error_fused_pct"])
    rows = rows[rows["sampler"].fillna("") == "torch_sort"]
    with_ = validate.evaluate(choice, rows).set_index("id")
    without = validate.evaluate(choice, rows.assign(sampler="")).set_index("id")
    out = with_[["model", "gpu", "batch", "error_pct"]].assign(error_fused_pct=without["error_pct"])
    ok = (with_["status"] == "ok") & (without["status"] == "ok")
    return out[ok].reset_index().sort_values(["batch", "id"], kind="stable").reset_index(drop=True)


def category_errors(acc: pd.DataFrame, choices=None) -> pd.DataFrame:
    """Error per category (model family x GPU x weight dtype x parallelism x phase) of the modelled validation
    rows: the parts of the category, ``rows``, and per runtime choice ``<choice>_abs_error_pct`` (median |error|)
    and ``<choice>_error_pct`` (median signed error: + reads high, - low) [%]. Sorted by the first choice's
    median |error|, largest first."""
    choices = list(pd.unique(acc["choice"]) if choices is None else choices)
    val = acc[(acc["set"] == "validation") & (acc["status"] == "ok")]
    first = val[val["choice"] == choices[0]]
    out = first.groupby("category").agg(rows=("id", "size")).reset_index()
    for choice in choices:
        g = (val[val["choice"] == choice].groupby("category")
             .agg(**{f"{choice}_abs_error_pct": ("abs_error_pct", "median"),
                     f"{choice}_error_pct": ("error_pct", "median")}).reset_index())
        out = out.merge(g, on="category", how="left")
    parts = out["category"].str.split("|", expand=True)
    for i, col in enumerate(("family", "gpu", "weight_dtype", "parallelism", "phase")):
        out.insert(1 + i, col, parts[i])
    return out.sort_values(f"{choices[0]}_abs_error_pct", ascending=False, kind="stable").reset_index(drop=True)


def not_modelled(acc: pd.DataFrame) -> pd.DataFrame:
    """The validation rows the model cannot represent (under the first runtime choice) and why."""
    val = _validation(acc, acc["choice"].iloc[0])
    bad = val[val["status"] != "ok"]
    return pd.DataFrame({"id": bad["id"], "model": bad["model"], "gpu": bad["gpu"], "ranks": bad["ranks"],
                         "layout": bad["layout"], "measured_ms": bad["measured_ms"],
                         "reason": bad["status"].str.replace(r"^not modelled: ", "", regex=True)}).reset_index(drop=True)


#: the columns of e2e.csv that make two rows different deployments of one workload
_DEPLOYMENT_COLUMNS = ("ranks", "layout", "ep", "weight_dtype", "kv_dtype", "engine")


def ranking_pairs(acc: pd.DataFrame, choice: str, *, margin_pct: float = 5.0) -> pd.DataFrame:
    """:func:`llmexplore.validate.ranking` of one runtime choice's validation rows (pairs of one model, GPU, phase
    and workload whose measured times differ by more than ``margin_pct``), with both rows' measured and
    predicted times [ms] and ``differs_in``: the deployment columns of e2e.csv in which the two rows differ."""
    margin = _check.number("margin_pct", margin_pct, lo=0, hi=1000, unit="%")
    val = _validation(acc, choice)
    pairs = validate.ranking(val, margin_pct=margin)
    raw = validate.load().set_index("id")
    by_id = val.set_index("id")
    differs, cols = [], {c: [] for c in ("a_measured_ms", "b_measured_ms", "a_predicted_ms", "b_predicted_ms")}
    for r in pairs.itertuples():
        a, b = raw.loc[r.a], raw.loc[r.b]
        differs.append(", ".join(c for c in _DEPLOYMENT_COLUMNS if str(a[c]) != str(b[c])))
        for side, rid in (("a", r.a), ("b", r.b)):
            cols[f"{side}_measured_ms"].append(float(by_id.loc[rid, "measured_ms"]))
            cols[f"{side}_predicted_ms"].append(float(by_id.loc[rid, "predicted_ms"]))
    return pairs.assign(differs_in=differs, **cols, margin_pct=margin)


def check_runtime_choice(name: str, value) -> str:
    """``value`` if it is a runtime choice ('engine' or a runtime preset name); else SpecError naming ``name``."""
    if isinstance(value, str) and (value == "engine" or value in presets.names("runtime")):
        return value
    raise SpecError(f"{name} must be 'engine' (each row priced by its engine's preset) or name a preset in "
                    f"data/runtime.yaml ({', '.join(presets.names('runtime'))}), got {_check.shown(value)}")

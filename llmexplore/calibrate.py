"""Fit the runtime efficiencies to measured decode-step and prefill times.

Fitted parameters (``FIT_FIELDS``) and their physical ranges: ``eta_mem`` (streaming GEMM bandwidth
fraction), ``eta_compute`` (GEMM FLOP/s fraction), ``eta_attn_mem`` (paged-KV attention bandwidth fraction),
``kernel_overhead_us`` (fixed time per kernel) and ``step_overhead_ms`` (fixed time per step).

The fit is a maximum-a-posteriori least squares in log space:

    minimise  sum_points (ln(pred/meas) / sigma_meas)^2  +  sum_params ((u - u0) / sigma_prior)^2

where u maps each parameter's range to the real line (logit of its position in [lo, hi]) and u0 is the
uncalibrated preset. The weak prior keeps parameters that the data cannot separate (e.g. per-kernel vs
per-step overhead at batch 1) near physically sensible values instead of letting them run to a bound, so the
result transfers to other GPUs, dtypes and models. Solved by Levenberg-Marquardt with a forward-difference
Jacobian (numpy only). Memory rows (weights, KV per sequence) are predicted and reported, not fitted.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
from pathlib import Path

import numpy as np

from . import _check, presets
from .errors import SpecError, UnknownPresetError
from .models.step.decode import memory_per_rank, step_time
from .models.serving.disagg import MAX_WORKLOAD_TOKENS
from .lsq import levenberg_marquardt
from .deployment import MAX_RANKS
from .models.step.engine import MAX_BATCH, MAX_CONTEXT, Deployment
from .models.step.prefill import prefill_time
from .specs import Runtime
from .units import GiB

__all__ = ["FIT_FIELDS", "OVERHEAD_FIELDS", "fit_fields", "BOUNDS", "MEASURED_RANGE", "CalibrationPoint", "load_points", "predict", "fit",
           "overlay_yaml"]

FIT_FIELDS = ("eta_mem", "eta_compute", "eta_attn_mem", "kernel_overhead_us", "step_overhead_ms")
#: what a runtime with fitted kernel curves (``kernel_set``) leaves to an end-to-end calibration: only what
#: kernel measurements cannot show (issue 9 §2): the gap between kernels and the per-step overhead
OVERHEAD_FIELDS = ("kernel_overhead_us", "step_overhead_ms")


def fit_fields(runtime: Runtime) -> tuple[str, ...]:
    """The fields :func:`fit` adjusts from ``runtime``: every efficiency for a scalar runtime, only the
    overheads for one whose kernels are priced by fitted curves."""
    return OVERHEAD_FIELDS if runtime.kernel_set else FIT_FIELDS
#: physical range of each fitted parameter
BOUNDS = {"eta_mem": (0.3, 0.98), "eta_compute": (0.2, 0.95), "eta_attn_mem": (0.2, 0.98),
          "kernel_overhead_us": (0.0, 20.0), "step_overhead_ms": (0.0, 5.0)}
PRIOR_SD = 1.0  # in logit units: a weak pull towards the uncalibrated value [modelling choice]
MEAS_SD = 0.02  # relative: model + measurement noise of one time point [modelling choice]
KINDS = ("decode", "prefill", "weights", "kv_per_sequence")
COLUMNS = ("kind", "model", "gpu", "ranks", "weight_dtype", "kv_dtype", "batch", "context", "prompt_tokens",
           "prefix_tokens", "measured", "unit", "source")


@dataclasses.dataclass(frozen=True)
class CalibrationPoint:
    """One measured point (see data/calibration/README.md)."""

    kind: str
    model: str
    gpu: str
    ranks: int
    weight_dtype: str
    kv_dtype: str
    measured: float
    unit: str
    batch: int = 1
    context: float = 0.0
    prompt_tokens: int = 0
    prefix_tokens: int = 0
    source: str = ""
    line: int = 0

    @property
    def fitted(self) -> bool:
        return self.kind in ("decode", "prefill")

    def label(self) -> str:
        if self.kind == "decode":
            return f"decode B={self.batch} s={self.context:g}"
        if self.kind == "prefill":
            return f"prefill S={self.prompt_tokens} P={self.prefix_tokens}"
        if self.kind == "kv_per_sequence":
            return f"KV/seq s={self.context:g}"
        return "weights/GPU"


#: range of a measured value in each unit: 1 us to ~2.8 h per step, 1 KiB to 1 PiB of memory
MEASURED_RANGE = {"ms": (1e-3, 1e7), "GiB": (1e-6, 1e6)}
MAX_CSV_BYTES = 1 << 20  # a calibration set is a few dozen points
MAX_POINTS = 1000  # every point is priced several hundred times by the fit


def _num(row: dict, key: str, where: str, *, integer: bool = False, default=None, lo=0, hi=None, unit=""):
    """The number in column ``key`` of a CSV row, checked with the shared rules; SpecError naming the row."""
    raw = (row.get(key) or "").strip()
    if raw == "":
        if default is None:
            raise SpecError(f"{where}: column {key!r} is required for kind {row.get('kind')!r}")
        return default
    try:
        v = float(raw) if not integer or not raw.lstrip("+-").isdigit() else int(raw)
    except (ValueError, OverflowError):
        v = raw  # not a number: the rule below says so, with the text as written
    name = f"{where}: {key}"
    if integer:
        return _check.integer(name, v, lo=lo, hi=hi, unit=unit)
    return _check.number(name, v, lo=lo, hi=hi, unit=unit)


def _read_rows(p: Path) -> tuple[list[str], list[tuple[int, dict]]]:
    """(header, [(line, row)]) of a calibration CSV: UTF-8 (a BOM is accepted), at most MAX_CSV_BYTES, every
    quote closed on its own line and no row with more fields than the header (SpecError naming the line)."""
    where = f"calibration CSV {p.name!r}"
    text = _check.read_text(p, where, MAX_CSV_BYTES)
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    header: list[str] | None = None
    rows: list[tuple[int, dict]] = []
    start = 1
    try:
        for fields in reader:
            line, start = start, reader.line_num + 1
            if any("\n" in f or "\r" in f for f in fields):
                raise SpecError(f"{p.name}:{line}: a quoted field runs over several lines (lines {line}-"
                                f"{reader.line_num}); close each quote on its own line")
            if header is None:
                header = [h.strip() for h in fields]
                continue
            if not any(f.strip() for f in fields):
                continue  # a blank line
            if len(fields) > len(header):
                raise SpecError(f"{p.name}:{line}: a row must have at most as many fields as the header "
                                f"({len(header)}), got {len(fields)}; quote fields that contain commas")
            if len(rows) >= MAX_POINTS:
                raise SpecError(f"{where} must hold at most {MAX_POINTS:,} rows")
            rows.append((line, dict(zip(header, fields))))
    except csv.Error as exc:
        raise SpecError(f"{p.name}:{start}: not valid CSV ({exc}); is a quote left open?") from None
    return header or [], rows


def load_points(path: str | Path) -> list[CalibrationPoint]:
    """Read a calibration CSV; every row is validated, and errors name the line and column."""
    p = Path(path)
    kind = _check.path_kind(p)
    if kind != "file":
        raise SpecError(f"calibration CSV {str(p)!r} does not exist" if kind == "missing" else
                        f"calibration CSV must be a readable file, got {_check.shown(str(p))} ({kind})")
    header, rows = _read_rows(p)
    missing = [c for c in ("kind", "model", "gpu", "ranks", "measured", "unit") if c not in header]
    if missing:
        raise SpecError(f"{p.name}: missing columns {missing}; expected {list(COLUMNS)}")
    out = []
    for i, row in rows:
        where = f"{p.name}:{i}"
        kind = (row.get("kind") or "").strip()
        if kind not in KINDS:
            raise SpecError(f"{where}: kind must be one of {list(KINDS)}, got {kind!r}")
        unit = (row.get("unit") or "").strip()
        want = "ms" if kind in ("decode", "prefill") else "GiB"
        if unit != want:
            raise SpecError(f"{where}: unit for kind {kind!r} must be {want!r}, got {unit!r}")
        lo, hi = MEASURED_RANGE[unit]
        measured = _num(row, "measured", where, lo=lo, hi=hi, unit=unit)
        needs_context = kind in ("decode", "kv_per_sequence")
        prompt = _num(row, "prompt_tokens", where, integer=True, default=0 if kind != "prefill" else None,
                      lo=1 if kind == "prefill" else 0, hi=MAX_WORKLOAD_TOKENS, unit="tokens")
        pt = CalibrationPoint(
            kind=kind, model=(row.get("model") or "").strip(), gpu=(row.get("gpu") or "").strip(),
            ranks=_num(row, "ranks", where, integer=True, lo=1, hi=MAX_RANKS),
            weight_dtype=(row.get("weight_dtype") or "bf16").strip(),
            kv_dtype=(row.get("kv_dtype") or "bf16").strip(), measured=measured, unit=unit,
            batch=_num(row, "batch", where, integer=True, default=1, lo=1, hi=MAX_BATCH),
            context=_num(row, "context", where, default=None if needs_context else 0.0,
                         lo=1 if needs_context else 0, hi=MAX_CONTEXT, unit="tokens"),
            prompt_tokens=prompt,
            prefix_tokens=_num(row, "prefix_tokens", where, integer=True, default=0, lo=0,
                               hi=max(prompt - 1, 0), unit="tokens"),
            source=(row.get("source") or "").strip(), line=i)
        try:  # unknown presets, dtypes and ranks the model does not split over fail here, naming the line
            _deployment(pt, presets.runtime("default"))
        except (SpecError, UnknownPresetError) as exc:
            raise SpecError(f"{where}: {exc}") from None
        out.append(pt)
    if not any(pt.fitted for pt in out):
        raise SpecError(f"{p.name}: no decode or prefill rows to fit")
    return out


def _deployment(pt: CalibrationPoint, runtime: Runtime) -> Deployment:
    return Deployment.build(pt.model, pt.gpu, pt.ranks, runtime=runtime, weight_dtype=pt.weight_dtype,
                            kv_dtype=pt.kv_dtype)


def predict(points: list[CalibrationPoint], runtime: Runtime) -> np.ndarray:
    """Model value of each point in its unit (ms or GiB)."""
    out = np.empty(len(points))
    for i, pt in enumerate(points):
        dep = _deployment(pt, runtime)
        if pt.kind == "decode":
            out[i] = float(step_time(dep, pt.batch, pt.context, "TP")["step_s"]) * 1e3
        elif pt.kind == "prefill":
            out[i] = float(prefill_time(dep, pt.prompt_tokens, pt.prefix_tokens)["prefill_s"]) * 1e3
        elif pt.kind == "weights":
            out[i] = sum(dep.weight_bytes("TP").values()) / GiB
        else:
            one = memory_per_rank(dep, 1, pt.context, "TP")["kv_B"]
            out[i] = float(one) / GiB
    return out


def _to_u(field: str, v: float) -> float:
    lo, hi = BOUNDS[field]
    x = min(max((v - lo) / (hi - lo), 1e-6), 1 - 1e-6)
    return math.log(x / (1 - x))


def _from_u(field: str, u: float) -> float:
    lo, hi = BOUNDS[field]
    z = math.exp(-abs(u))  # a logistic that cannot overflow, however far a step goes
    return lo + (hi - lo) * (1.0 / (1.0 + z) if u >= 0 else z / (1.0 + z))


def _runtime_at(base: Runtime, u: np.ndarray, name: str) -> Runtime:
    vals = {f: _from_u(f, float(x)) for f, x in zip(fit_fields(base), u)}
    return dataclasses.replace(base, name=name, **vals)


def fit(points: list[CalibrationPoint], *, start: Runtime | str = "uncalibrated", name: str = "calibrated",
        max_iter: int = 60) -> dict:
    """Fit ``FIT_FIELDS`` to the decode/prefill points. Returns ``runtime`` (fitted Runtime), ``table`` (rows
    with label, measured, predicted before and after, error %), ``rms_error_pct``, ``max_abs_error_pct``,
    ``iterations`` and ``cost``."""
    base = presets.resolve("runtime", start)
    fitted_pts = [p for p in points if p.fitted]
    meas = np.array([p.measured for p in fitted_pts])
    # the prior's centre (and the starting point) is the uncalibrated preset, whatever the start: the fit of a
    # shipped preset then reproduces it (a prior centred on the start would drift with every re-fit)
    prior = presets.runtime("uncalibrated") if "uncalibrated" in presets.names("runtime") else base
    u0 = np.array([_to_u(f, getattr(prior, f)) for f in fit_fields(base)])

    def residuals(u: np.ndarray) -> np.ndarray:
        pred = predict(fitted_pts, _runtime_at(base, u, name))
        return np.concatenate([np.log(pred / meas) / MEAS_SD, (u - u0) / PRIOR_SD])

    sol = levenberg_marquardt(residuals, u0, max_iter=max_iter)
    u, cost, it = sol["u"], sol["cost"], sol["iterations"]
    rt = _runtime_at(base, u, name)
    before = predict(points, dataclasses.replace(base, name="start"))
    after = predict(points, rt)
    rows = []
    for p, b, a in zip(points, before, after):
        rows.append({"point": p.label(), "kind": p.kind, "model": p.model, "gpu": p.gpu, "ranks": p.ranks,
                     "unit": p.unit, "measured": p.measured, "predicted_before": float(b), "predicted": float(a),
                     "error_pct": 100.0 * (a / p.measured - 1.0), "fitted": p.fitted})
    errs = np.array([row["error_pct"] for row in rows if row["fitted"]])
    return {"runtime": rt, "table": rows, "rms_error_pct": float(np.sqrt(np.mean(errs**2))),
            "max_abs_error_pct": float(np.max(np.abs(errs))), "iterations": it, "cost": cost,
            "start": base.name}


def overlay_yaml(runtime: Runtime, source: str) -> str:
    """A preset overlay (``presets.add_file`` / ``LLMEXPLORE_PRESETS``) holding the fitted runtime."""
    import yaml

    row = {f.name: getattr(runtime, f.name) for f in dataclasses.fields(runtime)
           if f.name not in ("name", "sources", "kernel_draw") and not (f.name == "kernel_set" and not runtime.kernel_set)}
    for f in fit_fields(runtime):
        row[f] = round(float(row[f]), 6)
    srcs = {f: runtime.source_of(f) for f in row if runtime.source_of(f)}
    for f in fit_fields(runtime):
        srcs[f] = f"fitted by llmexplore calibrate to {source}"
    row["display_name"] = f"Calibrated to {Path(source).name}"
    row["sources"] = srcs
    return yaml.safe_dump({"runtime": {runtime.name: row}}, sort_keys=False, allow_unicode=True)

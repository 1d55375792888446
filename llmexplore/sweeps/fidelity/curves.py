"""Kernel curves against their kernel data (notebooks/05_fidelity): :func:`kernel_data` loads the kernel rows of
one GPU and engine (:func:`llmexplore.kernelfit.load_rows`) and prices each with the curve the step engine uses
(:func:`llmexplore.kernelfit.predict_rows`); :func:`gemm_curves`, :func:`moe_curves`,
:func:`decode_attention_curves`, :func:`allreduce_curves` and :func:`deepep_ll_curves` turn it into measured
points and fitted lines for plotting; :func:`curve_catalog` and :func:`rejected_curves` list every curve of
``data/kernel_efficiency.yaml`` with its kernel-level fit error, and the curves rejected with the reason.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ... import _check, kernelfit, presets
from ...errors import SpecError
from ...labels import ENGINE_LABELS
from ...models.step.kernels import Curve, gemm_work
#: the kernel sets: one engine's rows, or the three engines' pooled (``any``)
ENGINES = kernelfit.ENGINES + ("any",)
#: the three GEMM / MoE shapes drawn per panel: these quantiles of the weight size among the measured shapes
SIZE_CLASSES = {"small": 0.15, "medium": 0.5, "large": 0.85}
_VARIANT_ORDER = [("plain", "bf16"), ("plain", "fp8"), ("block", "fp8"), ("plain", "fp4")]
_LINE_POINTS = 80


@functools.lru_cache(maxsize=4)
def _yaml(path: str, stamp: float) -> dict:
    import yaml

    return yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}


def _kernel_doc() -> dict:
    p = presets.KERNEL_FILE
    return _yaml(str(p), p.stat().st_mtime)


def _curve(fields: dict) -> Curve:
    """The :class:`~llmexplore.models.step.kernels.Curve` of a YAML entry: every field the class defines (a second
    regime of a collective's curve included), the covariance left out."""
    known = {f.name for f in dataclasses.fields(Curve)} - {"cov_u", "source"}
    return Curve(**{k: (int(v) if k in ("tile_m", "points") else float(v)) for k, v in fields.items() if k in known})


@dataclass(frozen=True)
class KernelData:
    """The kernel rows of one GPU and engine set, each priced by the curve the step engine uses for it.

    ``rows``: :func:`llmexplore.kernelfit.load_rows` (the three engines' rows pooled for ``any``) plus ``key``
    (the curve key), ``predicted_s``, ``error_pct`` (predicted / measured - 1) and ``fitted`` (False for the
    tiny decode-attention kernels that set a curve's overhead). ``curves``: key -> the curve; ``curve_from``:
    key -> whose curve it is (the engine, or ``any`` where the engine's own curve was rejected: ``rejected``
    gives the reason)."""

    gpu: str
    engine: str
    rows: pd.DataFrame
    curves: dict
    curve_from: dict
    rejected: dict

    @property
    def label(self) -> str:
        """``"TensorRT-LLM kernels on H100 SXM 80GB"``."""
        hw = presets.hardware(self.gpu).label
        if self.engine == "any":
            return f"engine-neutral curves (all three engines' kernels) on {hw}"
        return f"{ENGINE_LABELS[self.engine]} kernels on {hw}"


def kernel_data(gpu: str = "h100-sxm", engine: str = "trtllm") -> KernelData:
    """The kernel rows of ``gpu`` measured with ``engine`` (``any``: all three pooled, as the engine-neutral curves
    were scored), priced with the curves of ``data/kernel_efficiency.yaml`` (an engine's own curve, or the
    engine-neutral one where the engine's was rejected or it has none)."""
    gpu = _check.choice("gpu", gpu, kernelfit.GPUS)
    engine = _check.choice("engine", engine, ENGINES)
    found = presets.kernel_curves(engine, gpu)
    if found is None:
        raise SpecError(f"data/kernel_efficiency.yaml holds no {engine} curves for {gpu}")
    _, fields = found
    doc = _kernel_doc()
    own = set((doc.get(engine) or {}).get(gpu) or {})
    rejected = dict(((doc.get("rejected") or {}).get(engine) or {}).get(gpu) or {})
    curves = {k: _curve(v) for k, v in fields.items()}
    curve_from = {k: (engine if k in own else "any") for k in curves}
    engines = kernelfit.ENGINES if engine == "any" else (engine,)
    rows = pd.concat([r for r in (kernelfit.load_rows(gpu, e) for e in engines) if len(r)], ignore_index=True)
    rows["key"] = rows["cls"] + "." + rows["variant"] + "." + rows["dtype"]
    rows["fitted"] = ~rows["floor"].fillna(False).astype(bool) if "floor" in rows else True
    pred = np.full(len(rows), np.nan)
    for key, idx in rows.groupby("key").groups.items():
        if key in curves:
            pred[rows.index.get_indexer(idx)] = kernelfit.predict_rows(rows.loc[idx], curves[key])
    rows["predicted_s"] = pred
    rows["error_pct"] = 100.0 * (pred / rows["measured_s"].to_numpy() - 1.0)
    return KernelData(gpu, engine, rows, curves, curve_from, rejected)


@dataclass(frozen=True)
class CurveTables:
    """Measured points and fitted lines of one kernel class, panel by panel.

    ``points``: panel, series, x, y (the plotted quantity, measured), y_predicted, measured_us, predicted_us,
    error_pct, fitted, shape (a readable shape), engine. ``lines``: panel, series, x, y (the curve). ``panels``:
    panel, title, ref_y (the datasheet peak the y axis is compared with, NaN if none), shapes. ``curves``: one row
    per fitted curve drawn: panel, series ("" when the curve covers the whole panel), key, rows (fitted kernel
    rows of that curve, all shapes), median_abs_error_pct, p90_abs_error_pct, curve_from, rejected (why the
    engine's own curve is not used, "" if it is)."""

    kind: str
    gpu: str
    engine: str
    points: pd.DataFrame
    lines: pd.DataFrame
    panels: pd.DataFrame
    curves: pd.DataFrame


def _panel_name(variant: str, dtype: str) -> str:
    return f"{dtype.upper()}" + (" block-scaled" if variant == "block" else "")


def _curve_row(kd: KernelData, part: pd.DataFrame, key: str, panel: str, series: str = "") -> dict:
    fit = part[part["fitted"] & part["key"].eq(key)]
    err = fit["error_pct"].abs()
    return {"panel": panel, "series": series, "key": key, "rows": int(len(fit)),
            "median_abs_error_pct": float(err.median()) if len(fit) else np.nan,
            "p90_abs_error_pct": float(np.percentile(err, 90)) if len(fit) else np.nan,
            "curve_from": kd.curve_from.get(key, ""), "rejected": kd.rejected.get(key, "")}


def _pick(sizes: pd.Series) -> dict[str, int]:
    """Size class -> index into ``sizes`` (sorted ascending) at the quantiles of :data:`SIZE_CLASSES`."""
    n = len(sizes)
    out = {}
    for name, q in SIZE_CLASSES.items():
        i = int(round(q * (n - 1)))
        if i not in out.values():
            out[name] = i
    return out


def _points(part: pd.DataFrame, panel: str, series, x, y, y_pred, shape) -> pd.DataFrame:
    return pd.DataFrame({"panel": panel, "series": series, "x": np.asarray(x, float), "y": np.asarray(y, float),
                         "y_predicted": np.asarray(y_pred, float), "measured_us": part["measured_s"].to_numpy() * 1e6,
                         "predicted_us": part["predicted_s"].to_numpy() * 1e6, "error_pct": part["error_pct"].to_numpy(),
                         "fitted": part["fitted"].to_numpy(bool), "shape": shape, "engine": part["engine"].to_numpy()})


def _synthetic(template: pd.Series, n: int, **cols) -> pd.DataFrame:
    """``n`` rows like one kernel row (class, dtype, peaks) with ``cols`` replaced: what a curve line is priced on."""
    base = {c: template[c] for c in ("cls", "variant", "dtype", "peak_flops", "hbm_Bps")}
    return pd.DataFrame({**{k: np.repeat(v, n) for k, v in base.items()}, **cols})


def _empty(kind: str, kd: KernelData) -> CurveTables:
    return CurveTables(kind, kd.gpu, kd.engine, pd.DataFrame(columns=["panel", "series", "x", "y"]),
                       pd.DataFrame(columns=["panel", "series", "x", "y"]),
                       pd.DataFrame(columns=["panel", "title", "ref_y", "shapes"]),
                       pd.DataFrame(columns=["panel", "series", "key", "rows", "median_abs_error_pct"]))


def gemm_curves(kd: KernelData) -> CurveTables:
    """Dense GEMMs: achieved TFLOP/s (2mnk / time) against M (rows of the activation, i.e. tokens) for three
    measured (n, k) weight shapes per dtype panel (the 15th, 50th and 85th percentile of n x k), the fitted curve
    as a line over M at each shape, and the datasheet dense peak as ``ref_y``."""
    rows = kd.rows[kd.rows["cls"] == "gemm"]
    if not len(rows):
        return _empty("gemm", kd)
    pts, lines, panels, curves = [], [], [], []
    for variant, dtype in [vd for vd in _VARIANT_ORDER if ((rows.variant == vd[0]) & (rows.dtype == vd[1])).any()]:
        part = rows[(rows.variant == variant) & (rows.dtype == dtype)]
        panel, key = _panel_name(variant, dtype), f"gemm.{variant}.{dtype}"
        shapes = (part[["x_n", "x_k"]].drop_duplicates().assign(size=lambda d: d.x_n * d.x_k)
                  .sort_values(["size", "x_n"]).reset_index(drop=True))
        chosen = []
        for cls_name, i in _pick(shapes["size"]).items():
            n, k = float(shapes.x_n[i]), float(shapes.x_k[i])
            sub = part[(part.x_n == n) & (part.x_k == k)].sort_values("x_m")
            label = f"{n:,.0f}×{k:,.0f}"
            chosen.append(label)
            pts.append(_points(sub, panel, cls_name, sub.x_m, sub.flops / sub.measured_s / 1e12,
                               sub.flops / sub.predicted_s / 1e12, f"n×k = {label}"))
            m = np.geomspace(sub.x_m.min(), sub.x_m.max(), _LINE_POINTS)
            b = kernelfit.ELEM_BYTES[dtype]
            f, by = gemm_work(m, n, k, b_w=b, b_in=b)
            syn = _synthetic(sub.iloc[0], len(m), flops=f, bytes=by)
            t = kernelfit.predict_rows(syn, kd.curves[key]) if key in kd.curves else np.full(len(m), np.nan)
            lines.append(pd.DataFrame({"panel": panel, "series": cls_name, "x": m, "y": f / t / 1e12}))
        panels.append({"panel": panel, "ref_y": float(part.peak_flops.iloc[0]) / 1e12, "shapes": chosen})
        curves.append(_curve_row(kd, part, key, panel))
    return _tables("gemm", kd, pts, lines, panels, curves)


def _tables(kind, kd, pts, lines, panels, curves) -> CurveTables:
    curves = pd.DataFrame(curves)
    panels = pd.DataFrame(panels)
    panels["title"] = panels["panel"]
    return CurveTables(kind, kd.gpu, kd.engine, pd.concat(pts, ignore_index=True),
                       pd.concat(lines, ignore_index=True), panels, curves)


def _useful_moe_flops(d: pd.DataFrame) -> np.ndarray:
    """FLOPs of the routed tokens alone (no tile padding): 2 (tokens k / ep) 3 H (I / tp)."""
    return 2.0 * d.x_tokens * d.x_topk / d.x_moe_ep * 3.0 * d.x_hidden * d.x_inter / d.x_moe_tp


def moe_curves(kd: KernelData) -> CurveTables:
    """Grouped MoE GEMMs (a whole routed block): efficiency (useful FLOPs / time, in % of the datasheet dense
    peak) against tokens per expert (tokens x top-k / experts) for three measured MoE shapes per dtype panel (the
    15th, 50th and 85th percentile of the expert weights per GPU), with the fitted curve (tile padding included)."""
    rows = kd.rows[kd.rows["cls"] == "grouped_gemm"]
    if not len(rows):
        return _empty("grouped_gemm", kd)
    cols = ["x_experts", "x_topk", "x_hidden", "x_inter", "x_moe_tp", "x_moe_ep"]
    pts, lines, panels, curves = [], [], [], []
    for variant, dtype in [vd for vd in _VARIANT_ORDER if ((rows.variant == vd[0]) & (rows.dtype == vd[1])).any()]:
        part = rows[(rows.variant == variant) & (rows.dtype == dtype)]
        panel, key = _panel_name(variant, dtype), f"grouped_gemm.{variant}.{dtype}"
        shapes = (part[cols].drop_duplicates()
                  .assign(size=lambda d: d.x_experts / d.x_moe_ep * 3 * d.x_hidden * d.x_inter / d.x_moe_tp)
                  .sort_values(["size"] + cols).reset_index(drop=True))
        chosen = []
        for cls_name, i in _pick(shapes["size"]).items():
            s = shapes.iloc[i]
            sub = part[(part[cols] == s[cols].to_numpy()).all(axis=1)].sort_values("x_tokens")
            label = (f"{s.x_experts:g} experts top-{s.x_topk:g} {s.x_hidden:,.0f}×{s.x_inter:,.0f}"
                     + (f" TP{s.x_moe_tp:g}" if s.x_moe_tp > 1 else "") + (f" EP{s.x_moe_ep:g}" if s.x_moe_ep > 1 else ""))
            chosen.append(label)
            peak = sub.peak_flops.to_numpy()
            useful = _useful_moe_flops(sub).to_numpy()
            pts.append(_points(sub, panel, cls_name, sub.x_tokens * sub.x_topk / sub.x_experts,
                               100 * useful / sub.measured_s.to_numpy() / peak,
                               100 * useful / sub.predicted_s.to_numpy() / peak, label))
            tok = np.geomspace(sub.x_tokens.min(), sub.x_tokens.max(), _LINE_POINTS)
            syn = _synthetic(sub.iloc[0], len(tok), x_tokens=tok,
                             **{c: np.repeat(float(s[c]), len(tok)) for c in cols})
            t = kernelfit.predict_rows(syn, kd.curves[key]) if key in kd.curves else np.full(len(tok), np.nan)
            lines.append(pd.DataFrame({"panel": panel, "series": cls_name, "x": tok * s.x_topk / s.x_experts,
                                       "y": 100 * _useful_moe_flops(syn).to_numpy() / t / syn.peak_flops.to_numpy()}))
        panels.append({"panel": panel, "ref_y": 100.0, "shapes": chosen})
        curves.append(_curve_row(kd, part, key, panel))
    return _tables("grouped_gemm", kd, pts, lines, panels, curves)


def decode_attention_curves(kd: KernelData) -> CurveTables:
    """Decode attention: achieved HBM bandwidth (the kernel's bytes / time, TB/s) against the bytes it reads
    (KV plus queries and outputs, MB), one panel per variant (GQA, MLA) and a series per KV dtype; the fitted
    curve as a line over the bytes at the rows' median FLOP per byte; the datasheet HBM bandwidth as ``ref_y``.
    The tiny kernels (under 2 MB, ``fitted`` False) set the curve's overhead and are not fitted."""
    rows = kd.rows[kd.rows["cls"] == "attention_decode"]
    if not len(rows):
        return _empty("attention_decode", kd)
    pts, lines, panels, curves = [], [], [], []
    for variant in [v for v in ("gqa", "mla") if (rows.variant == v).any()]:
        part = rows[rows.variant == variant]
        panel = variant.upper()
        for dtype in [d for d in ("bf16", "fp8") if (part.dtype == d).any()]:
            sub = part[part.dtype == dtype].sort_values("bytes")
            key, series = f"attention_decode.{variant}.{dtype}", f"KV {dtype.upper()}"
            shape = ("batch " + sub.x_batch.map("{:,.0f}".format) + ", " + sub.x_kv_len.map("{:,.0f}".format)
                     + " tokens, " + sub.x_heads.map("{:g}".format) + " heads")
            pts.append(_points(sub, panel, series, sub["bytes"] / 1e6, sub["bytes"] / sub.measured_s / 1e12,
                               sub["bytes"] / sub.predicted_s / 1e12, shape.to_numpy()))
            by = np.geomspace(sub["bytes"].min(), sub["bytes"].max(), _LINE_POINTS)
            fit = sub[sub.fitted]
            ratio = float(np.median(fit.flops / fit["bytes"])) if len(fit) else float(np.median(sub.flops / sub["bytes"]))
            syn = _synthetic(sub.iloc[0], len(by), flops=by * ratio, bytes=by)
            t = kernelfit.predict_rows(syn, kd.curves[key]) if key in kd.curves else np.full(len(by), np.nan)
            lines.append(pd.DataFrame({"panel": panel, "series": series, "x": by / 1e6, "y": by / t / 1e12}))
            curves.append(_curve_row(kd, sub, key, panel, series))
        panels.append({"panel": panel, "ref_y": float(part.hbm_Bps.iloc[0]) / 1e12, "shapes": []})
    return _tables("attention_decode", kd, pts, lines, panels, curves)


def allreduce_curves(kd: KernelData) -> CurveTables:
    """All-reduce inside one node: latency [us] against the message size [MB], a series per GPU count, the
    engine's own all-reduce (its CUDA-graph path) or NCCL's; the fitted alpha-beta curve as a line."""
    rows = kd.rows[(kd.rows["cls"] == "comm") & (kd.rows["variant"] == "all_reduce")]
    if not len(rows):
        return _empty("all_reduce", kd)
    pts, lines, curves = [], [], []
    panel = "all-reduce"
    for dtype in sorted(rows.dtype.unique(), key=lambda d: int(d[1:])):
        sub = rows[rows.dtype == dtype].sort_values("x_message_bytes")
        p = int(dtype[1:])
        key, series = f"comm.all_reduce.{dtype}", f"{p} GPUs"
        pts.append(_points(sub, panel, series, sub.x_message_bytes / 1e6, sub.measured_s * 1e6, sub.predicted_s * 1e6,
                           sub.x_message_bytes.map("{:,.0f} B message".format).to_numpy()))
        n = np.geomspace(sub.x_message_bytes.min(), sub.x_message_bytes.max(), _LINE_POINTS)
        syn = _synthetic(sub.iloc[0], len(n), flops=np.zeros(len(n)),
                         bytes=kernelfit.COMM_FACTOR["all_reduce"] * (p - 1) / p * n)
        t = kernelfit.predict_rows(syn, kd.curves[key]) if key in kd.curves else np.full(len(n), np.nan)
        lines.append(pd.DataFrame({"panel": panel, "series": series, "x": n / 1e6, "y": t * 1e6}))
        curves.append(_curve_row(kd, sub, key, panel, series))
    return _tables("all_reduce", kd, pts, lines, [{"panel": panel, "ref_y": np.nan, "shapes": []}], curves)


def deepep_ll_curves(gpu: str = "h100-sxm") -> CurveTables:
    """DeepEP's low-latency dispatch and combine (the decode all-to-all of DPA + EP): measured kernel time [us]
    against the bytes a rank sends [MB] (tokens per rank x top-k x bytes per copy, as DeepEP's benchmark counts
    them), a panel per op and a series per EP size, with the fitted t = a + bytes / B as lines
    (:func:`llmexplore.measured.deepep_ll_fit`; the fine-grained MoE rows it was fitted to). ``gpu``'s
    own single-node rows, and the H100 multi-node rows every GPU's cross-node curves come from; an empty table
    for a GPU without measurements (MI300X)."""
    from ...measured import DEEPEP_LL_MIN_EXPERTS, DEEPEP_LL_OPS, deepep_ll_fit, deepep_ll_table

    gpu = _check.choice("gpu", gpu, presets.names("hardware"))
    tb = pd.DataFrame(deepep_ll_table())
    tb = tb[tb["experts"] >= DEEPEP_LL_MIN_EXPERTS]
    own = tb[(tb["gpu"] == gpu) & (tb["nodes"] == 1)]
    kind, kd = "deepep_ll", KernelData(gpu, "sglang", pd.DataFrame(), {}, {}, {})  # SGLang's DeepEP; no yaml curves
    if not len(own):
        return _empty(kind, kd)
    multi = tb[(tb["gpu"] == "h100-sxm") & (tb["nodes"] > 1)]
    pts, lines, curves = [], [], []
    for op in DEEPEP_LL_OPS:
        panel = op
        for (g, ep), sub in pd.concat([own, multi]).groupby(["gpu", "ep"], sort=False):
            ep, nodes = int(ep), int(sub["nodes"].iloc[0])
            f = deepep_ll_fit(g, ep, op)
            series = f"EP{ep}" + (f" ({nodes} nodes{', H100' if g != gpu else ''})" if nodes > 1 else " (1 node)")
            sub = sub.sort_values(f"{op}_bytes")
            by, t = sub[f"{op}_bytes"].to_numpy(float), sub[f"{op}_us"].to_numpy(float)
            pred = (f["a_s"] + by / f["B_Bps"]) * 1e6
            err = 100.0 * (pred / t - 1.0)
            shape = [f"hidden {int(h):,}, {int(e)} experts, top-{int(k)}, {int(n)} tokens per rank"
                     for h, e, k, n in zip(sub["hidden"], sub["experts"], sub["topk"], sub["tokens"])]
            pts.append(pd.DataFrame({"panel": panel, "series": series, "x": by / 1e6, "y": t, "y_predicted": pred,
                                     "measured_us": t, "predicted_us": pred, "error_pct": err, "fitted": True,
                                     "shape": shape, "engine": "SGLang (DeepEP)"}))
            n = np.geomspace(by.min(), by.max(), _LINE_POINTS)
            lines.append(pd.DataFrame({"panel": panel, "series": series, "x": n / 1e6,
                                       "y": (f["a_s"] + n / f["B_Bps"]) * 1e6}))
            curves.append({"panel": panel, "series": series, "key": f"deepep_ll.{op}.ep{ep}", "rows": f["rows"],
                           "median_abs_error_pct": f["median_err_pct"], "p90_abs_error_pct": f["p90_err_pct"],
                           "curve_from": "", "rejected": ""})
    panels = [{"panel": op, "ref_y": np.nan, "shapes": []} for op in DEEPEP_LL_OPS]
    return _tables(kind, kd, pts, lines, panels, curves)


def curve_errors(*tables: CurveTables) -> dict[str, float]:
    """Curve key -> median |error| [%] over its kernel rows, for every curve drawn in ``tables``."""
    return {r.key: float(r.median_abs_error_pct) for ct in tables for r in ct.curves.itertuples()}


# ---- every curve's kernel-level fit ---------------------------------------------------------------------------


def curve_catalog() -> pd.DataFrame:
    """Every curve of ``data/kernel_efficiency.yaml``: engine, gpu, key, cls, variant, dtype, points (kernel rows
    fitted), median_err_pct and p90_err_pct (|predicted / measured - 1| over them), the four parameters, tile_m
    and, for ``any``, from_engine (whose curve it is)."""
    out = []
    for engine, gpus in _kernel_doc().items():
        if engine == "rejected":
            continue
        for gpu, curves in (gpus or {}).items():
            for key, f in (curves or {}).items():
                cls, variant, dtype = key.split(".")
                out.append({"engine": engine, "gpu": gpu, "key": key, "cls": cls, "variant": variant, "dtype": dtype,
                            "points": int(f.get("points", 0)), "median_err_pct": float(f["median_err_pct"]),
                            "p90_err_pct": float(f["p90_err_pct"]), "eta_compute": float(f["eta_compute"]),
                            "eta_mem": float(f["eta_mem"]), "overhead_us": float(f["overhead_us"]),
                            "knee": float(f["knee"]), "tile_m": int(f.get("tile_m", 1)),
                            "from_engine": f.get("from_engine", engine)})
    return pd.DataFrame(out)


def rejected_curves() -> pd.DataFrame:
    """The fitted curves rejected as not an engine's production kernel (kernelfit.implausible): engine, gpu,
    key and the reason; the engine-neutral curve prices those kernels instead."""
    rows = [{"engine": e, "gpu": g, "key": k, "reason": why}
            for e, gpus in (_kernel_doc().get("rejected") or {}).items()
            for g, keys in (gpus or {}).items() for k, why in (keys or {}).items()]
    return pd.DataFrame(rows, columns=["engine", "gpu", "key", "reason"])


def fit_error_pivot(catalog: pd.DataFrame, stat: str = "median_err_pct") -> pd.DataFrame:
    """``stat`` of every curve as curve key (rows) x ``<engine> <gpu>`` (columns); NaN where a set has no such
    curve."""
    cat = catalog.assign(set=catalog["engine"] + " " + catalog["gpu"])
    order = [f"{e} {g}" for e in ENGINES for g in kernelfit.GPUS if f"{e} {g}" in set(cat["set"])]
    wide = cat.pivot_table(index="key", columns="set", values=stat, aggfunc="first")
    return wide.reindex(columns=order).reset_index().rename_axis(columns=None)

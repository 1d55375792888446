"""Findings of notebooks/05_fidelity.ipynb: how far the model's step times are from published measurements it was
never fitted to (before and after the kernel curves), per category, how well each kernel curve fits its kernel
rows, and where the model is weakest, with the documented reason.

Every sentence reads the tables of :mod:`llmexplore.sweeps.fidelity` (the ones the figures and tables show);
``short=True`` gives a figure's title. The causes of the weakest categories are the ones documented in
``data/validation/README.md`` (and the notes of ``e2e.csv``) and ``docs/models.md`` §1.1a.
"""

from __future__ import annotations

import pandas as pd

from .. import presets
from ..labels import ENGINE_LABELS, runtime_label
from ..sweeps.fidelity import CurveTables
from . import join, num

__all__ = ["how", "with_", "pct", "accuracy_sentence", "in_sample_sentence", "category_sentence", "gemm_sentence",
           "moe_sentence", "attention_sentence", "allreduce_sentence", "deepep_ll_sentence", "fit_error_sentence",
           "cause",
           "weakest_sentence", "interference_sentence", "sampler_headline", "sampler_sentence",
           "not_modelled_sentence",
           "ranking_sentence", "recap_sentence",
           "CAUSES", "SHORT_CAUSES", "NO_CAUSE", "HIGH_BATCH"]

#: ML.ENERGY rows from this batch up are "high batch" (data/validation/README.md: the model is expected to read
#: low there, the saturated servers' steps also carry other requests' prefills)
HIGH_BATCH = 64

#: documented causes of a category's error, first match wins: (name, test on the category's rows, text)
CAUSES = [
    ("deepep", lambda d: (d["category"].str.startswith("mla-moe").all() and (d["layout"] == "DPA").all()
                          and (d["kind"] == "prefill").all()),
     "SGLang's wide expert parallelism (DeepEP all-to-all, DeepGEMM, two-batch overlap) is modelled with an "
     "overlap that charges the SMs DeepEP's kernels take but not the micro-batch split's own costs, and uniform "
     "routing, without the busiest rank's routing skew: both lower bounds (docs/models.md §1.2, §3.3)"),
    ("dpa-host", lambda d: (d["category"].str.startswith("mla-moe").all() and (d["layout"] == "DPA").all()
                            and (d["kind"] == "decode").all()),
     "SGLang's data-parallel-attention decode spends host time every step, which the step model does not price "
     "(the LMSYS MTP source measures 39.2 ms per step without its overlap scheduler and 33.1 ms with it), and "
     "with two-batch overlap the model's overlap is ideal and its routing uniform, both lower bounds "
     "(docs/models.md §3.3). DeepEP's low-latency dispatch and combine are priced from measured kernel times "
     "(docs/models.md §1.2), so the gap is not in those kernels"),
    ("no-kernel-data", lambda d: (d["gpu"] == "mi300x").all(),
     "MI300X has kernel data for its FP8 GEMMs only (aiter's tuned GEMM table), so its attention and elementwise "
     "kernels are priced with scalar efficiencies fitted on H100 and its all-reduce with the link preset's assumed "
     "latency (docs/models.md §1.1a)"),
    ("mle-layout", lambda d: d["id"].str.startswith("mle-").all() and (d["model"] == "deepseek-v3").all(),
     "ML.ENERGY's DeepSeek-V3.1 rows report expert parallelism 8 with neither tensor nor data parallelism on 8 "
     "GPUs, so the attention layout (TP8 assumed) is uncertain, and the saturated servers' steps also carry other "
     "requests' prefills (data/validation/README.md)"),
    ("interference", lambda d: d["id"].str.startswith("mle-").all() and (d["batch"] >= HIGH_BATCH).any(),
     "ML.ENERGY measures saturated vLLM 0.11.1 servers: at high batch other requests' prefill chunks share some "
     "steps and vLLM spends host time per sequence between steps, neither of which the step model prices, and "
     "the prompt lengths are not published (data/validation/README.md)"),
    ("mle", lambda d: d["id"].str.startswith("mle-").all(),
     "ML.ENERGY's prompt lengths are not published (context 1,000 tokens assumed) and its steps can carry other "
     "requests' prefill chunks (data/validation/README.md)"),
]
#: the cause of each entry of CAUSES in a few words (the recap)
SHORT_CAUSES = {"deepep": "two-batch overlap without its split costs, and uniform routing",
                "dpa-host": "host time of DPA decode steps and ideal two-batch overlap",
                "no-kernel-data": "kernel data for FP8 GEMMs only",
                "mle-layout": "an uncertain attention layout under live traffic",
                "interference": "prefill interference under live traffic", "mle": "unpublished prompt lengths"}
NO_CAUSE = "no documented cause: each row's note in data/validation/e2e.csv lists its assumptions"


def pct(x: float, *, sign: bool = False) -> str:
    """``"12.4%"``; with ``sign`` ``"+256%"`` / ``"−50.3%"``."""
    text = f"{num(abs(x))}%"
    return (("+" if x >= 0 else "−") + text) if sign else text


def how(choice: str) -> str:
    """How a runtime choice prices a row, for a sentence."""
    return {"engine": "by each row's engine preset (TensorRT-LLM, vLLM or SGLang kernel curves)",
            "default": "with the engine-neutral kernel curves (default)",
            "scalar": "with the scalar pre-curve efficiencies"}.get(choice, f"with the {choice} runtime preset")


def with_(choice: str) -> str:
    """``"with the engine presets"``: a runtime choice in a short phrase."""
    return {"engine": "with the engine presets", "default": "with the engine-neutral curves",
            "scalar": "with the scalar model"}.get(choice, f"with runtime {choice}")


def _g(x: float) -> str:
    """A value a reader typed (a band, a margin): ``15``, ``2.5``."""
    return f"{float(x):g}"


def _row(summary: pd.DataFrame, choice: str) -> pd.Series:
    return summary[summary["choice"] == choice].iloc[0]


def accuracy_sentence(summary: pd.DataFrame, runtime: str, baseline: str, *, short: bool = False) -> str:
    """Section 1: the median |error| over the validation rows the model can represent, after (``runtime``) and
    before (``baseline``), and the other choices; ``summary``: :func:`~llmexplore.sweeps.fidelity.accuracy_summary`."""
    a, b = _row(summary, runtime), _row(summary, baseline)
    band = _g(a["band_pct"])
    if short:
        return (f"Median |error| {pct(a['median_abs_error_pct'])} ({runtime_label(runtime)}) vs "
                f"{pct(b['median_abs_error_pct'])} ({runtime_label(baseline)}) on {a['modelled']} of {a['rows']} "
                "published measurements")
    text = (f"Priced {how(runtime)}, the model is off by a median {pct(a['median_abs_error_pct'])} (p90 "
            f"{pct(a['p90_abs_error_pct'])}) on the {a['modelled']} of {a['rows']} published measurements it can "
            f"represent, none of which it was fitted to, and {a['within_band']} of them fall within ±{band}%")
    if baseline != runtime:
        text += (f"; {how(baseline)} it is off by {pct(b['median_abs_error_pct'])} (p90 "
                 f"{pct(b['p90_abs_error_pct'])}, {b['within_band']} within ±{band}%)")
    others = [f"{how(r.choice)}, {pct(r.median_abs_error_pct)}" for r in summary.itertuples()
              if r.choice not in (runtime, baseline)]
    if others:
        text += "; " + "; ".join(others)
    return text + "."


def in_sample_sentence(summary: pd.DataFrame, runtime: str, baseline: str) -> str:
    """The in-sample calibration points: agreement there is fitted, not evidence."""
    a, b = _row(summary, runtime), _row(summary, baseline)
    text = (f"On the {a['in_sample_points']} in-sample points (AIConfigurator's estimate for Llama-3.1-70B TP8 on "
            f"H100, which the presets' overheads and efficiencies were fitted to) the largest |error| is "
            f"{pct(a['in_sample_max_abs_error_pct'])} {with_(runtime)}")
    if baseline != runtime:
        text += f" and {pct(b['in_sample_max_abs_error_pct'])} {with_(baseline)}"
    return text + ": agreement there is fitted, not evidence of accuracy elsewhere."


def category_sentence(cats: pd.DataFrame, runtime: str, baseline: str) -> str:
    """Section 2: in how many categories the runtime beats the baseline, and the largest gain and loss;
    ``cats``: :func:`~llmexplore.sweeps.fidelity.category_errors` with both choices."""
    after, before = cats[f"{runtime}_abs_error_pct"], cats[f"{baseline}_abs_error_pct"]
    worst = cats.loc[after.idxmax()]
    head = (f"{with_(runtime).capitalize()} the worst category is `{worst['category']}`, off by "
            f"{pct(worst[f'{runtime}_error_pct'], sign=True)} (median of {worst['rows']} rows)")
    if runtime == baseline:
        return head + "."
    delta = after - before
    better, worse = int((delta < 0).sum()), int((delta > 0).sum())
    gain = cats.loc[delta.idxmin()]
    text = (f"{head}. Against the {runtime_label(baseline)} model, the {runtime_label(runtime)} lower the median "
            f"|error| in {better} of {len(cats)} categories and raise it in {worse}; the largest gain is "
            f"`{gain['category']}` ({pct(gain[f'{baseline}_abs_error_pct'])} → {pct(gain[f'{runtime}_abs_error_pct'])})")
    if worse:
        loss = cats.loc[delta.idxmax()]
        text += (f", the largest loss `{loss['category']}` ({pct(loss[f'{baseline}_abs_error_pct'])} → "
                 f"{pct(loss[f'{runtime}_abs_error_pct'])})")
    return text + "."


# ---- kernel curves ---------------------------------------------------------------------------------------------


def _whose(ct: CurveTables) -> str:
    hw = presets.hardware(ct.gpu).label
    if ct.engine == "any":
        return f"On {hw}, the engine-neutral curves"
    return f"On {hw}, {ENGINE_LABELS[ct.engine]}'s curves"


def _medians(ct: CurveTables) -> str:
    one = ct.curves["panel"].nunique() == 1
    parts = [f"{pct(r.median_abs_error_pct)} ({r.panel if not r.series else r.series if one else f'{r.panel}, {r.series}'})"
             for r in ct.curves.itertuples()]
    return join(parts)


def gemm_sentence(ct: CurveTables, *, short: bool = False) -> str:
    """Dense GEMMs: each curve's median |error| over its kernel rows and the fastest measured GEMM of the first
    panel against the datasheet peak."""
    if not len(ct.curves):
        return f"No dense-GEMM kernel rows for {ct.engine} on {ct.gpu}."
    if short:
        return f"Dense GEMMs on {presets.hardware(ct.gpu).label}: median |error| {_medians(ct)}"
    first = ct.panels.iloc[0]
    pts = ct.points[ct.points["panel"] == first["panel"]]
    best = pts.loc[pts["y"].idxmax()]
    return (f"{_whose(ct)} for dense GEMMs are within {_medians(ct)} of their kernel rows (median |error|); the "
            f"fastest {first['panel']} GEMM drawn ({best['shape']}, M = {best['x']:,.0f}) reaches {num(best['y'])} "
            f"TFLOP/s, {pct(100 * best['y'] / first['ref_y'])} of the {num(first['ref_y'])} TFLOP/s datasheet peak, "
            "and small M is bound by streaming the weights.")


def moe_sentence(ct: CurveTables, *, short: bool = False, few: float = 8.0, many: float = 256.0) -> str:
    """Grouped MoE GEMMs: each curve's median |error| and the measured efficiency at few and many tokens per
    expert (medians over the shapes drawn in the first panel)."""
    if not len(ct.curves):
        return f"No grouped MoE kernel rows for {ct.engine} on {ct.gpu}."
    if short:
        return f"Grouped MoE GEMMs on {presets.hardware(ct.gpu).label}: median |error| {_medians(ct)}"
    first = ct.panels.iloc[0]["panel"]
    pts = ct.points[ct.points["panel"] == first]
    lo, hi = pts[pts["x"] <= few]["y"], pts[pts["x"] >= many]["y"]
    text = f"{_whose(ct)} for grouped MoE GEMMs are within {_medians(ct)} of their kernel rows (median |error|)"
    if len(lo) and len(hi):
        text += (f"; the {first} blocks drawn reach a median {pct(lo.median())} of the dense peak at up to "
                 f"{_g(few)} tokens per expert and {pct(hi.median())} from {_g(many)} on: with few tokens per "
                 "expert the block streams its weights and pads each expert's rows to the kernel's M tile")
    return text + "."


def attention_sentence(ct: CurveTables, *, short: bool = False) -> str:
    """Decode attention: each curve's median |error| and the highest measured bandwidth per variant against the
    datasheet HBM bandwidth."""
    if not len(ct.curves):
        return f"No decode-attention kernel rows for {ct.engine} on {ct.gpu}."
    if short:
        return f"Decode attention on {presets.hardware(ct.gpu).label}: median |error| {_medians(ct)}"
    fastest = []
    for p in ct.panels.itertuples():
        pts = ct.points[(ct.points["panel"] == p.panel) & ct.points["fitted"]]
        if len(pts):
            fastest.append(f"{p.panel} {num(pts['y'].max())} TB/s ({pct(100 * pts['y'].max() / p.ref_y)})")
    bw = ct.panels["ref_y"].iloc[0]
    return (f"{_whose(ct)} for decode attention are within {_medians(ct)} of their kernel rows (median |error|); "
            f"the fastest kernels larger than L2 stream {join(fastest)} of the {num(bw)} TB/s datasheet bandwidth.")


def allreduce_sentence(ct: CurveTables, *, short: bool = False) -> str:
    """All-reduce: each curve's median and p90 |error| and the measured latency of the smallest message."""
    if not len(ct.curves):
        return f"No all-reduce rows for {ct.engine} on {ct.gpu}."
    if short:
        return f"All-reduce on {presets.hardware(ct.gpu).label}: median |error| {_medians(ct)}"
    parts = [f"{pct(r.median_abs_error_pct)} (p90 {pct(r.p90_abs_error_pct)}) on {r.series}"
             for r in ct.curves.itertuples()]
    big = ct.curves.iloc[-1]["series"]
    pts = ct.points[ct.points["series"] == big].sort_values("x")
    small = pts.iloc[0]
    return (f"{_whose(ct)} for the intra-node all-reduce are within {join(parts)} (median |error|); on {big} the "
            f"smallest message ({num(small['x'] * 1e6)} B) takes {num(small['measured_us'])} µs, the fixed cost a "
            "tensor-parallel decode step pays twice per layer.")


def deepep_ll_sentence(ct: CurveTables, *, short: bool = False) -> str:
    """DeepEP low-latency curves: each one's median |error|, and the fixed latency a decode step pays per MoE
    layer at the fewest tokens measured."""
    hw = presets.hardware(ct.gpu).label
    if not len(ct.curves):
        return (f"No DeepEP low-latency kernel rows for {hw} (DeepEP runs on NVIDIA GPUs): its decode all-to-all "
                "is priced from the links' latency and bandwidth.")
    med = ct.curves.groupby("panel", sort=False)["median_abs_error_pct"]
    parts = [f"{pct(v.min())}-{pct(v.max())} ({p})" for p, v in med]
    if short:
        return (f"DeepEP low-latency kernels on {hw}: median |error| {join(parts)} over "
                f"{ct.curves['series'].nunique()} EP sizes")
    first = ct.points.sort_values("x").groupby(["panel", "series"], sort=False).head(1)
    fixed = first.groupby("panel", sort=False)["measured_us"]
    lo = {p: num(v.min()) for p, v in fixed}
    hi = {p: num(v.max()) for p, v in fixed}
    return (f"On {hw}, the fitted low-latency curves t = a + bytes / B are within {join(parts)} of their kernel rows "
            f"(median |error| per EP size: {join(list(ct.curves['series'].unique()))}). At the fewest bytes "
            f"measured a dispatch takes {lo['dispatch']}-{hi['dispatch']} µs "
            f"and a combine {lo['combine']}-{hi['combine']} µs across these EP sizes: a fixed cost a decode step pays "
            "twice per MoE layer however few tokens a rank holds.")


def fit_error_sentence(catalog: pd.DataFrame, rejected: pd.DataFrame) -> str:
    """Section 4: how many curves, how well they fit their kernel rows, the worst, and the rejected ones."""
    sets = catalog[["engine", "gpu"]].drop_duplicates()
    worst = catalog.loc[catalog["median_err_pct"].idxmax()]
    text = (f"data/kernel_efficiency.yaml holds {len(catalog)} curves in {len(sets)} engine × GPU sets; the median "
            f"curve is within {pct(catalog['median_err_pct'].median())} of its kernel rows (median |error|), "
            f"{int((catalog['median_err_pct'] <= 10).sum())} are within 10%, and the worst is {worst['key']} of "
            f"{worst['engine']} on {worst['gpu']} at {pct(worst['median_err_pct'])}")
    if len(rejected):
        groups = []
        for (engine, key), g in rejected.groupby(["engine", "key"], sort=False):
            groups.append(f"{engine}'s {key} on {join(list(g['gpu']))} ({g['reason'].iloc[0]})")
        text += (f"; {len(rejected)} fitted curves were rejected as not the engine's production kernel, and the "
                 f"engine-neutral curve prices those kernels: {'; '.join(groups)}")
    return text + "."


# ---- where the model is weakest ----------------------------------------------------------------------------------


def cause(rows: pd.DataFrame, *, short: bool = False) -> str:
    """The documented cause of a category's error (:data:`CAUSES`, first match), or :data:`NO_CAUSE`; ``short``:
    in a few words (:data:`SHORT_CAUSES`, "" when none is documented)."""
    for name, test, text in CAUSES:
        if len(rows) and bool(test(rows)):
            return SHORT_CAUSES[name] if short else text
    return "" if short else NO_CAUSE


def _ok(acc: pd.DataFrame, runtime: str) -> pd.DataFrame:
    return acc[(acc["set"] == "validation") & (acc["choice"] == runtime) & (acc["status"] == "ok")]


def weakest_sentence(acc: pd.DataFrame, cats: pd.DataFrame, runtime: str, *, n: int = 3) -> str:
    """Section 5: the ``n`` categories with the largest median |error| under ``runtime``, signed, with their
    documented cause."""
    ok = _ok(acc, runtime)
    top = cats.sort_values(f"{runtime}_abs_error_pct", ascending=False, kind="stable").head(n)
    parts = []
    for r in top.itertuples():
        rows = ok[ok["category"] == r.category]
        err = getattr(r, f"{runtime}_error_pct")
        parts.append(f"`{r.category}` reads {'high' if err >= 0 else 'low'} by {pct(err, sign=True)} "
                     f"({r.rows} {'row' if r.rows == 1 else 'rows'}): {cause(rows)}")
    return f"Weakest {with_(runtime)}: " + "; ".join(parts) + "."


def interference_sentence(acc: pd.DataFrame, runtime: str, *, high_batch: int = HIGH_BATCH) -> str:
    """ML.ENERGY rows (saturated vLLM servers) at high and low batch: the model's median error in each."""
    ok = _ok(acc, runtime)
    mle = ok[ok["id"].str.startswith("mle-")]
    hi, lo = mle[mle["batch"] >= high_batch], mle[mle["batch"] < high_batch]
    if not len(hi) or not len(lo):
        return "The validation set holds no ML.ENERGY rows at both low and high batch."
    return (f"The ML.ENERGY rows (vLLM 0.11.1 under live chat traffic, sampling with top-p 0.95, so every step "
            "sorts the whole logits tensor: the `torch_sort` sampler, docs/models.md §1.1b) read a median "
            f"{pct(hi['error_pct'].median(), sign=True)} at batch {high_batch} and above ({len(hi)} rows) and "
            f"{pct(lo['error_pct'].median(), sign=True)} below ({len(lo)} rows); what remains at high batch is "
            "other requests' prefills and vLLM's per-sequence host work, which the step model does not price.")


def sampler_headline(effect: pd.DataFrame, *, high_batch: int = HIGH_BATCH) -> dict:
    """The headline of :func:`~llmexplore.sweeps.fidelity.sampler_effect`: ``rows``, and for the rows at
    ``high_batch`` and above (``high_*``) and below (``low_*``) their count and median error [%] with the sampler
    left out (``*_left_out_pct``) and priced (``*_priced_pct``); NaN where a side has no row."""
    out = {"rows": int(len(effect))}
    for side, d in (("high", effect[effect["batch"] >= high_batch]), ("low", effect[effect["batch"] < high_batch])):
        out[f"{side}_rows"] = int(len(d))
        out[f"{side}_left_out_pct"] = float(d["error_fused_pct"].median()) if len(d) else float("nan")
        out[f"{side}_priced_pct"] = float(d["error_pct"].median()) if len(d) else float("nan")
    return out


def sampler_sentence(effect: pd.DataFrame, *, high_batch: int = HIGH_BATCH, short: bool = False) -> str:
    """What pricing vLLM's sort-based sampler changed on the rows that used it
    (:func:`~llmexplore.sweeps.fidelity.sampler_effect`): their median error at ``high_batch`` and above and
    below, left out and priced (:func:`sampler_headline`)."""
    if not len(effect):
        return "No validation row samples with vLLM's sort-based top-k/top-p."
    h = sampler_headline(effect, high_batch=high_batch)
    if short:
        return (f"Sort-based sampler: median error at batch ≥ {high_batch} {pct(h['high_left_out_pct'], sign=True)} "
                f"left out, {pct(h['high_priced_pct'], sign=True)} priced")
    parts = [f"{where} ({h[f'{side}_rows']} rows) from {pct(h[f'{side}_left_out_pct'], sign=True)} to "
             f"{pct(h[f'{side}_priced_pct'], sign=True)}"
             for side, where in (("high", f"at batch {high_batch} and above"), ("low", f"below batch {high_batch}"))
             if h[f"{side}_rows"]]
    return (f"Pricing the sort of the whole logits tensor that vLLM 0.11.1 runs for top-p requests moves the "
            f"median error of the {len(effect)} rows that sampled that way " + " and ".join(parts) + ": it grows "
            "with batch × vocabulary, so it was most of what the model missed at high batch.")


def not_modelled_sentence(nm: pd.DataFrame, rows: int) -> str:
    """The validation rows the model cannot represent, with the reason."""
    if not len(nm):
        return f"The model represents all {rows} validation rows."
    parts = [f"`{r.id}` ({r.reason})" for r in nm.itertuples()]
    ranks = join([f"{int(r):,}" for r in nm["ranks"]])
    return (f"{len(nm)} of the {rows} rows cannot be represented and are left out of every statistic: "
            f"{join(parts)}. The model needs the routed experts plus the redundant slots (moe_redundant) to divide "
            f"evenly over the {ranks} ranks, and the source does not say how many redundant slots it ran "
            "(data/validation/README.md).")


def ranking_sentence(pairs: pd.DataFrame, runtime: str, *, margin_pct: float = 5.0) -> str:
    """The ranking check: pairs over the margin, how many the model tells apart and orders correctly, and what the
    unresolved ones differ in; ``pairs``: :func:`~llmexplore.sweeps.fidelity.ranking_pairs`."""
    m = _g(margin_pct)
    if not len(pairs):
        return (f"No two rows of one model, GPU, phase and workload differ in their measured time by more than {m}%, "
                "so the validation set cannot check how the model ranks deployments.")
    resolved, agrees = int(pairs["resolved"].sum()), int(pairs["agrees"].sum())
    text = (f"Ranking check {with_(runtime)}: {len(pairs)} {'pair' if len(pairs) == 1 else 'pairs'} of rows of one model, "
            f"GPU, phase and workload differ in their measured time by more than {m}%; the model tells {resolved} of "
            f"them apart and orders {agrees} correctly")
    unresolved = pairs[~pairs["resolved"].astype(bool)]
    if len(unresolved):
        parts = [f"`{r.a}` vs `{r.b}` (measured {num(r.measured_ratio)}× apart) differ only in {r.differs_in}"
                 for r in unresolved.itertuples()]
        text += f"; {join(parts)}, which the validation rows do not pass to the model, so it prices them alike"
        if not resolved:
            text += " — the set is too small to test the ranking"
    return text + "."


def recap_sentence(acc: pd.DataFrame, summary: pd.DataFrame, cats: pd.DataFrame, runtime: str, baseline: str) -> str:
    """The notebook's summary in one sentence."""
    a, b = _row(summary, runtime), _row(summary, baseline)
    worst = cats.sort_values(f"{runtime}_abs_error_pct", ascending=False, kind="stable").iloc[0]
    ok = _ok(acc, runtime)
    why = cause(ok[ok["category"] == worst["category"]], short=True)
    return (f"In short: {pct(a['median_abs_error_pct'])} median |error| {with_(runtime)} against "
            f"{pct(b['median_abs_error_pct'])} {with_(baseline)}, over {a['modelled']} of {a['rows']} published "
            f"measurements never fitted; the weakest category is `{worst['category']}` "
            f"({pct(worst[f'{runtime}_error_pct'], sign=True)}{': ' + why if why else ''}).")


# ---- headline records (notebook 05's record() values) -------------------------------------------------------
def accuracy_records(summary: pd.DataFrame, runtime: str, baseline: str) -> dict:
    """Section 1's records: rows and modelled rows, and per runtime choice the median and P90 |error| [%], the
    rows within the band and the in-sample maximum |error| [%], and the two compared choices' medians."""
    by = summary.set_index("choice")
    return {"rows": int(by["rows"].iloc[0]), "modelled": int(by["modelled"].iloc[0]),
            "median_abs_error_pct": by["median_abs_error_pct"].to_dict(),
            "p90_abs_error_pct": by["p90_abs_error_pct"].to_dict(), "within_band": by["within_band"].to_dict(),
            "in_sample_max_abs_error_pct": by["in_sample_max_abs_error_pct"].to_dict(),
            "compared": {"runtime": runtime, "baseline": baseline,
                         "runtime_median_abs_error_pct": by.loc[runtime, "median_abs_error_pct"],
                         "baseline_median_abs_error_pct": by.loc[baseline, "median_abs_error_pct"]}}


def category_records(cats: pd.DataFrame, runtime: str) -> dict:
    """Section 2's records: the worst category under ``runtime`` (``cats`` sorted worst first, as
    :func:`~llmexplore.sweeps.fidelity.category_errors` returns it) and every category's median |error| [%]."""
    return {"worst_category": {"category": cats["category"].iloc[0], "rows": int(cats["rows"].iloc[0]),
                               "median_error_pct": cats[f"{runtime}_error_pct"].iloc[0]},
            "category_abs_error_pct": cats.set_index("category")[f"{runtime}_abs_error_pct"].to_dict()}


def validation_rows(summary: pd.DataFrame) -> int:
    """The validation rows of the accuracy summary (modelled or not)."""
    return int(summary["rows"].iloc[0])


def ranking_record(pairs: pd.DataFrame) -> dict:
    """The ranking check's counts: pairs over the margin, pairs the model resolves, pairs it orders right."""
    return {"pairs": len(pairs), "resolved": int(pairs["resolved"].sum()), "agrees": int(pairs["agrees"].sum())}


__all__ += ['accuracy_records', 'category_records', 'validation_rows', 'ranking_record']


# ---- serving end to end (issue 19 §2) ----------------------------------------------------------------------------
def serving_record(table: pd.DataFrame) -> dict:
    """Section 6's records: benchmarks and simulated ones, TTFT and TPOT MAPE and median signed error [%] over all
    and per engine, and the TTFT median error with the benchmark's synchronised first round left out."""
    from ..sweeps.fidelity import e2e

    s = e2e.summary(table)
    cats = e2e.category_table(table, by=("engine",)).set_index("category")
    keys = ("ttft_mape_pct", "ttft_median_error_pct", "tpot_mape_pct", "tpot_median_error_pct")
    return {"rows": s["rows"], "simulated": s["simulated"], **{k: s[k] for k in keys},
            "ttft_steady_median_error_pct": s["ttft_steady_median_error_pct"],
            "by_engine": {e: {k: float(cats.loc[e, k]) for k in keys} for e in cats.index}}


def serving_sentence(table: pd.DataFrame, *, short: bool = False) -> str:
    """What the end-to-end serving check says: the TPOT and TTFT errors, where they are worst, and what is left
    out and why."""
    from ..sweeps.fidelity import e2e

    s = e2e.summary(table)
    if short:
        return (f"The simulator against {s['simulated']:,} real closed-loop benchmarks: TPOT MAPE "
                f"{s['tpot_mape_pct']:.0f}%, TTFT not resolved (MAPE {s['ttft_mape_pct']:.0f}%)")
    fam = e2e.category_table(table, by=("family",)).dropna(subset=["tpot_mape_pct"])
    worst = fam.sort_values("tpot_mape_pct", ascending=False).iloc[0]
    best = fam.sort_values("tpot_mape_pct").iloc[0]
    left = s["rows"] - s["simulated"]
    top = max(s["not_simulated"].items(), key=lambda kv: kv[1]) if s["not_simulated"] else ("", 0)
    return (f"Of {s['rows']:,} measured closed-loop benchmarks (aiconfigurator's sample: TensorRT-LLM, vLLM and "
            f"SGLang on H100, H200, B200 and GB200), the simulator runs {s['simulated']:,} on exactly the measured "
            f"deployment. Mean TPOT: MAPE {s['tpot_mape_pct']:.1f}%, median error {s['tpot_median_error_pct']:+.1f}%, "
            f"from {best['tpot_mape_pct']:.0f}% for {best['category']} to {worst['tpot_mape_pct']:.0f}% for "
            f"{worst['category']}. Mean TTFT is not resolved: MAPE {s['ttft_mape_pct']:.0f}% (median |error| "
            f"{s['ttft_median_abs_pct']:.0f}%, median error {s['ttft_median_error_pct']:+.0f}% over the 20 rounds "
            f"AIPerf measures, {s['ttft_steady_median_error_pct']:+.0f}% without the first, when every client "
            f"starts at once): simulated clients that start together stay in step, while the measured TTFTs at a "
            f"few clients show real ones drifting apart, and the source does not say how. {left:,} benchmarks "
            f"are not simulated, {top[1]:,} of them "
            f"because {top[0].split(': ', 1)[-1]}.")


def serving_recap_sentence(table: pd.DataFrame) -> str:
    """Section 6 in the notebook's summary: the served end-to-end errors in one sentence."""
    from ..sweeps.fidelity import e2e

    s = e2e.summary(table)
    return (f"Served end to end, on {s['simulated']:,} of {s['rows']:,} real closed-loop benchmarks, the simulator's "
            f"mean TPOT is off by {s['tpot_mape_pct']:.1f}% on average (median {s['tpot_median_error_pct']:+.1f}%); "
            f"its mean TTFT is not resolved (MAPE {s['ttft_mape_pct']:.0f}%).")

"""``llmexplore validate``: the model against the published end-to-end measurements it was never fitted to
(data/validation/e2e.csv): the error per row, per category and overall, and the ranking check.

Price every row of data/validation/e2e.csv (published decode, loaded-decode and prefill times with their
deployments; data/validation/README.md) and print the error per row, per category and overall, and whether the
model orders deployments as the measurements do.
"""

from __future__ import annotations

from pathlib import Path

from ._framework import EXIT_OK, Checked, Col, command, format_table, preset_name, print_json, text_value

__all__ = ["add", "run", "FLAGS"]

#: API field names -> the flags of this command
FLAGS = {"runtime": "--runtime", "data": "--data"}

ROW_COLS = [
    Col("id", "row"), Col("kind", "kind"), Col("runtime", "runtime"), Col("measured_ms", "measured ms", ".4g"),
    Col("predicted_ms", "model ms", ".4g"), Col("error_pct", "error %", "+.1f"), Col("status", "status"),
]
CATEGORY_COLS = [
    Col("category", "category (family|gpu|dtype|parallelism|phase)"), Col("rows", "rows"),
    Col("median_abs_error_pct", "median |error| %", ".1f"), Col("median_error_pct", "median error %", "+.1f"),
]


def add(sub) -> None:
    p = command(sub, "validate", __doc__,
                help="the model against published end-to-end measurements (never fitted)")
    p.add_argument("--runtime", default="engine", action=Checked, check=preset_name("runtime"), metavar="NAME",
                   help="runtime preset for every row (see: presets runtime), or 'engine': each row priced with "
                        "its engine's preset (trtllm, vllm, sglang) (default: engine)")
    p.add_argument("--data", default=None, action=Checked, check=text_value("a CSV file path", 4096),
                   metavar="CSV", help="a CSV of your own measurements in the columns of data/validation/README.md "
                                      "(id, kind, model, gpu, ranks, layout, weight_dtype, kv_dtype, engine, batch, "
                                      "measured [ms], and context / prompt_tokens / isl, osl by kind) (default: "
                                      "the shipped data/validation/e2e.csv)")
    p.add_argument("--json", action="store_true",
                   help='JSON: {"summary": {"rows", "modelled", "median_abs_error_pct", "p90_abs_error_pct"}, '
                        '"categories": [...], "rows": [...], "ranking": [...], "inputs": {...}}')
    p.set_defaults(func=run, flags=FLAGS)


def run(args) -> int:
    from .. import presets
    from .. import validate as val
    from .._check import path_kind, shown
    from ..errors import SpecError
    from ._framework import jsonable

    if args.runtime != "engine":
        presets.runtime(args.runtime)  # an unknown preset: one line naming --runtime, before any work
    data = val.VALIDATION_CSV if args.data is None else Path(args.data).expanduser()
    if args.data is not None and path_kind(data) != "file":
        raise SpecError(f"--data must be an existing CSV file, got {shown(args.data)}")
    table = val.evaluate(args.runtime, val.load(data))
    s = val.summary(table)
    cats = s.pop("categories")
    rank = val.ranking(table)
    if args.json:
        print_json({"summary": jsonable({k: v for k, v in s.items() if k != "worst_category"}),
                    "worst_category": jsonable(s["worst_category"]),
                    "categories": [jsonable(r) for r in cats.to_dict("records")],
                    "rows": [jsonable(r) for r in table.to_dict("records")],
                    "ranking": [jsonable(r) for r in rank.to_dict("records")],
                    "inputs": {"runtime": args.runtime, "data": str(data)}})
        return EXIT_OK
    what = "published" if args.data is None else "given"
    print(f"{s['modelled']} of {s['rows']} {what} measurements modelled (runtime: {args.runtime}); median "
          f"|error| {s['median_abs_error_pct']:.1f}%, p90 {s['p90_abs_error_pct']:.1f}%")
    rows = [{k: (None if isinstance(v, float) and v != v else v) for k, v in r.items()}  # NaN: not modelled
            for r in table.to_dict("records")]
    print(format_table(rows, ROW_COLS))
    print(format_table(cats.to_dict("records"), CATEGORY_COLS))
    over = len(rank)
    resolved = int(rank.resolved.sum()) if over else 0
    agree = int(rank.agrees.sum()) if over else 0
    print(f"ranking: {over} pair(s) of deployments differ by more than 5% in the measurements; the model tells "
          f"{resolved} apart and orders {agree} of them as measured")
    return EXIT_OK

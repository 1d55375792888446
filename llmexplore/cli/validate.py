"""``llmexplore validate``: the model against the published end-to-end measurements it was never fitted to
(data/validation/e2e.csv): the error per row, per category and overall, and the ranking check.

Price every row of data/validation/e2e.csv (published decode, loaded-decode and prefill times with their
deployments; data/validation/README.md) and print the error per row, per category and overall, and whether the
model orders deployments as the measurements do.
"""

from __future__ import annotations


from .. import _check
from ._framework import EXIT_OK, Checked, Col, command, format_table, preset_name, print_json, text_value

__all__ = ["add", "run", "FLAGS"]

#: API field names -> the flags of this command
FLAGS = {"runtime": "--runtime", "data": "--data", "e2e": "--e2e", "config": "--config"}

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
                   metavar="FILE", help="a CSV of your own measurements in the columns of data/validation/README.md "
                                      "(id, kind, model, gpu, ranks, layout, weight_dtype, kv_dtype, engine, batch, "
                                      "measured [ms], and context / prompt_tokens / isl, osl by kind) (default: "
                                      "the shipped data/validation/e2e.csv); with --e2e, the JSON that vllm bench "
                                      "serve, SGLang bench_serving, AIPerf, GenAI-Perf or InferenceX wrote")
    p.add_argument("--e2e", action="store_true",
                   help="end to end: the serving simulator against real engines' measured mean TTFT and TPOT under "
                        "closed-loop benchmarks (data/validation/serving_e2e.csv, aiconfigurator's measured sample), "
                        "or against your own benchmark JSON with --data FILE --config CFG")
    p.add_argument("--config", default=None, action=Checked, check=text_value("a JSON file or JSON text", 100_000),
                   metavar="FILE|JSON", help="with --e2e --data: the deployment your benchmark ran (the configuration "
                                             "JSON of `llmexplore plan --json` / `simulate --config`)")
    p.add_argument("--json", action="store_true",
                   help='JSON: {"summary": {"rows", "modelled", "median_abs_error_pct", "p90_abs_error_pct"}, '
                        '"categories": [...], "rows": [...], "ranking": [...], "inputs": {...}}; with --e2e: '
                        '{"summary", "categories", "rows", "inputs"}')
    p.set_defaults(func=run, flags=FLAGS)


def run(args) -> int:
    from .. import presets
    from .. import validate as val
    from .._check import path_kind, shown
    from ..errors import SpecError
    from ._framework import jsonable

    if args.runtime != "engine":
        presets.runtime(args.runtime)  # an unknown preset: one line naming --runtime, before any work
    if args.e2e:
        return _run_e2e(args)
    if args.config is not None:
        raise SpecError(f"--config must come with --e2e --data (the deployment of your own benchmark runs), got "
                        f"--config {shown(args.config)} without --e2e")
    data = val.VALIDATION_CSV if args.data is None else _check.user_path("--data", args.data)
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
    if s["modelled"]:
        print(f"{s['modelled']} of {s['rows']} {what} measurements modelled (runtime: {args.runtime}); median "
              f"|error| {s['median_abs_error_pct']:.1f}%, p90 {s['p90_abs_error_pct']:.1f}%")
    else:  # no error to state: say so instead of "nan%"
        print(f"0 of {s['rows']} {what} measurements modelled (runtime: {args.runtime}): no error to report; each "
              f"row's status says why")
    print(format_table(_nan_none(table.to_dict("records")), ROW_COLS))  # NaN: not modelled
    print(format_table(_nan_none(cats.to_dict("records")), CATEGORY_COLS))
    over = len(rank)
    resolved = int(rank.resolved.sum()) if over else 0
    agree = int(rank.agrees.sum()) if over else 0
    print(f"ranking: {over} pair(s) of deployments differ by more than 5% in the measurements; the model tells "
          f"{resolved} apart and orders {agree} of them as measured")
    return EXIT_OK


E2E_COLS = [
    Col("dimension", "by"), Col("category", "category"), Col("rows", "rows"), Col("simulated", "simulated"),
    Col("ttft_mape_pct", "TTFT MAPE %", ".1f"), Col("ttft_median_error_pct", "TTFT median err %", "+.1f"),
    Col("tpot_mape_pct", "TPOT MAPE %", ".1f"), Col("tpot_median_error_pct", "TPOT median err %", "+.1f"),
]
RUN_COLS = [
    Col("run", "run"), Col("concurrency", "concurrency"), Col("rate_per_s", "rate/s", ".3g"),
    Col("ttft_measured_ms", "TTFT ms", ".4g"), Col("ttft_model_ms", "model ms", ".4g"),
    Col("ttft_error_pct", "error %", "+.1f"), Col("tpot_measured_ms", "TPOT ms", ".4g"),
    Col("tpot_model_ms", "model ms", ".4g"), Col("tpot_error_pct", "error %", "+.1f"),
    Col("throughput_error_pct", "tok/s error %", "+.1f"), Col("status", "status"),
]


def _nan_none(rows):
    return [{k: (None if isinstance(v, float) and v != v else v) for k, v in r.items()} for r in rows]


def _run_e2e(args) -> int:
    from .. import presets
    from ..errors import SpecError
    from ..sweeps.fidelity import e2e
    from ._framework import jsonable

    from .._check import path_kind, shown

    if args.data is None:
        if args.config is not None:
            raise SpecError(f"--config must come with --e2e --data (the deployment of your own benchmark runs), "
                            f"got --config {shown(args.config)} without --data")
        if args.runtime != "engine":
            raise SpecError(f"--e2e prices each measured row with its own engine's preset; give no --runtime "
                            f"(got {args.runtime!r})")
        table = e2e.evaluate()
        s = e2e.summary(table)
        cats = e2e.category_table(table)
        if args.json:
            print_json({"summary": jsonable(s), "categories": [jsonable(r) for r in cats.to_dict("records")],
                        "rows": [jsonable(r) for r in table.to_dict("records")],
                        "inputs": {"e2e": True, "data": str(e2e.E2E_CSV)}})
            return EXIT_OK
        print(f"{s['simulated']:,} of {s['rows']:,} measured closed-loop benchmarks simulated (aiconfigurator's "
              f"measured sample; each row with its engine's preset): TPOT MAPE {s['tpot_mape_pct']:.1f}% (median "
              f"|error| {s['tpot_median_abs_pct']:.1f}%, median {s['tpot_median_error_pct']:+.1f}%); TTFT not "
              f"resolved: MAPE {s['ttft_mape_pct']:.0f}% (median |error| {s['ttft_median_abs_pct']:.0f}%, median "
              f"{s['ttft_median_error_pct']:+.0f}% over AIPerf's 20 rounds, {s['ttft_steady_median_error_pct']:+.0f}% "
              f"without the first, when every client starts at once): simulated clients that start together stay "
              f"in step, measured ones drift apart, and the sources do not say how.")
        print(format_table(_nan_none(cats.to_dict("records")), E2E_COLS))
        for why, n in s["not_simulated"].items():
            print(f"not simulated ({n}): {why}")
        print("peer errors: no tool publishes its error on this set; aiconfigurator's own CI tracks it but publishes "
              "no figure")
        return EXIT_OK
    from ..benchfiles import read_benchmark

    path = _check.user_path("--data", args.data)
    if path_kind(path) != "file":
        raise SpecError(f"--data must be an existing benchmark JSON file, got {shown(args.data)}")
    if args.config is None:
        raise SpecError(f"--config must be given with --e2e --data {shown(args.data)}: the deployment the benchmark "
                        f"ran (model, GPU, parallelism), which benchmark files do not record")
    from .simulate import _read_config

    cfg = _read_config(args.config)
    runtime = "default" if args.runtime == "engine" else args.runtime
    presets.runtime(runtime)
    runs = read_benchmark(path)
    table = e2e.evaluate_runs(runs, cfg, runtime=runtime)
    if args.json:
        print_json({"rows": [jsonable(r) for r in table.to_dict("records")],
                    "inputs": {"e2e": True, "data": str(path), "config": cfg, "runtime": runtime}})
        return EXIT_OK
    ok = table[table["status"] == "ok"]
    print(f"{len(ok)} of {len(table)} runs of {path.name} simulated on {cfg.get('model')} / {cfg.get('gpu')} "
          f"(runtime {runtime}); means compared, TPOT as the file defines it: {runs[0]['tpot_definition']}")
    print(format_table(_nan_none(table.to_dict("records")), RUN_COLS))
    if len(ok):
        for m in ("ttft", "tpot", "throughput"):
            e = ok[f"{m}_error_pct"].abs()
            print(f"{m.upper() if m != 'throughput' else 'output throughput'}: MAPE {e.mean():.1f}%, median "
                  f"|error| {e.median():.1f}%")
    return EXIT_OK

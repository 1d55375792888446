"""Capture what the workbook answers, to check that a restructuring leaves behaviour unchanged.

Two kinds of answers are captured into one JSON document:

- ``cli``: every command's ``--json`` answer for a fixed list of questions (:data:`CASES`), run in this
  process through :func:`llmexplore.cli.main`; a question the CLI refuses is captured as its exit status and
  its one-line error.
- ``notebooks``: every notebook's recorded headline values (``record()``), executed with its default
  parameters (``--notebooks``; this takes the time of ``make report``).

Usage (the tree whose ``llmexplore`` is imported is the one captured; ``PYTHONPATH=/path/to/old/tree`` captures
an older commit with this venv)::

    python tests/behaviour/capture.py capture OUT.json [--notebooks]
    python tests/behaviour/capture.py compare BEFORE.json AFTER.json

``compare`` accepts keys added after, never a key removed, and numbers equal within a relative 1e-9 (absolute
1e-12); :data:`RENAMED` lists the one deliberate fix of issue 18 (``simulate --json``'s throughput key, which
carried tokens per second x 1,000 under a per-ms name). It exits 1 and lists every difference otherwise.
The answers of ``dc193f3`` (the commit issue 18 started from) are committed beside this script as goldens, but
for the MoE wing's numbers that issue 18 §2 moved on purpose (one MoE vocabulary with the step engine: the
``moe`` command's cases and notebook 30's step times; the commit lists every value):
``cli_answers.json`` (checked by ``tests/behaviour/test_cli_golden.py``) and ``notebook_records.json`` (checked
against the session's default notebook runs by ``tests/notebooks/test_golden_records.py``). A deliberate change
of a model number shows there as a golden diff: recapture and say in the commit which values moved and why.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import sys
from pathlib import Path
from typing import Any

REL_TOL = 1e-9
ABS_TOL = 1e-12

_SIM_CONFIG = json.dumps({
    "model": "qwen3-32b", "gpu": "h200", "mode": "colocated", "weight_dtype": "fp8", "kv_dtype": "fp8",
    "sides": [{"role": "colocated", "instances": 4, "ranks": 8, "layout": "TP", "max_num_seqs": 64,
               "chunk_tokens": 2048}]})
_SIM_PD = json.dumps({
    "model": "llama-3-70b", "gpu": "h100-sxm", "mode": "disaggregated", "weight_dtype": "bf16", "kv_dtype": "bf16",
    "link": "ib-ndr400",
    "sides": [{"role": "prefill", "instances": 2, "ranks": 8, "layout": "TP", "max_num_seqs": 8,
               "chunk_tokens": 8192},
              {"role": "decode", "instances": 2, "ranks": 8, "layout": "TP", "max_num_seqs": 128,
               "chunk_tokens": 0}]})

#: (name, argv without --json). Chosen to reach every command, layout, mode and option family.
CASES: list[tuple[str, list[str]]] = [
    ("presets-models", ["presets", "models"]),
    ("presets-hardware", ["presets", "hardware"]),
    ("presets-links", ["presets", "links"]),
    ("presets-runtime", ["presets", "runtime"]),
    ("presets-targets", ["presets", "targets"]),
    ("presets-storage", ["presets", "storage"]),
    ("presets-prices", ["presets", "prices"]),
    ("presets-power", ["presets", "power"]),
    ("layouts-dsv3", ["layouts", "--model", "deepseek-v3", "--gpu", "h200", "--ranks", "8", "--batch", "64",
                      "--context", "8192", "--weight-dtype", "fp8"]),
    ("layouts-70b-band", ["layouts", "--model", "llama-3-70b", "--gpu", "h100-sxm", "--ranks", "8", "--batch",
                          "32", "--context", "32768", "--band", "--sampler", "torch_sort"]),
    ("layouts-8b-vllm", ["layouts", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--ranks", "4", "--batch", "256",
                         "--context", "4096", "--runtime", "vllm", "--q-tokens", "2"]),
    ("layouts-none-fits", ["layouts", "--model", "llama-3-70b", "--gpu", "h100-sxm", "--ranks", "1", "--batch",
                           "512", "--context", "131072"]),
    ("pd-70b", ["pd", "--model", "llama-3-70b", "--gpu", "h100-sxm", "--prompt", "4096", "--output", "256",
                "--rate", "36", "--ttft-ms", "1000", "--tpot-ms", "40"]),
    ("pd-70b-serial", ["pd", "--model", "llama-3-70b", "--gpu", "h100-sxm", "--prompt", "1024", "--output", "64",
                       "--serial", "--link", "tcp-100g", "--band"]),
    ("pd-dsv3", ["pd", "--model", "deepseek-v3", "--gpu", "h200", "--prompt", "2048", "--output", "512",
                 "--weight-dtype", "fp8", "--rate", "4", "--prompt-sigma", "0.5"]),
    ("moe-dsv3", ["moe", "--model", "deepseek-v3", "--gpu", "h200", "--gpus", "16", "--batch-tokens", "256",
                  "--ep", "8", "--skew", "2.6", "--redundant-experts", "32"]),
    ("moe-dsv3-noeplb", ["moe", "--model", "deepseek-v3", "--gpu", "h200", "--gpus", "16", "--batch-tokens", "64",
                         "--no-eplb", "--skew", "1.5"]),
    ("moe-mixtral", ["moe", "--model", "mixtral-8x7b", "--gpu", "h100-sxm", "--gpus", "8", "--batch-tokens", "128"]),
    ("transfer-70b", ["transfer", "--model", "llama-3-70b", "--prefill-tp", "8", "--prefill-dp", "2",
                      "--decode-tp", "4", "--decode-dp", "2", "--fragments"]),
    ("transfer-dsv3", ["transfer", "--model", "deepseek-v3", "--prefill-tp", "8", "--decode-tp", "16",
                       "--prompt-tokens", "4096"]),
    ("prefill-70b", ["prefill", "--model", "llama-3-70b", "--gpu", "h100-sxm", "--ranks", "8", "--prompt", "4096",
                     "--batch", "8", "--prefix", "1024"]),
    ("prefill-70b-fp4", ["prefill", "--model", "llama-3-70b", "--gpu", "b200", "--ranks", "8", "--prompt", "4096",
                         "--batch", "8", "--weight-dtype", "fp4", "--kv-dtype", "fp4", "--band"]),
    ("offload-70b", ["offload", "--model", "llama-3-70b", "--gpu", "h100-sxm", "--tp", "8", "--storage",
                     "nvme-gen4", "--prefix", "32768", "--queue-wait-ms", "200"]),
    ("offload-70b-band", ["offload", "--model", "llama-3-70b", "--gpu", "h100-sxm", "--tp", "8", "--storage",
                          "nvme-gen4", "--prefix", "32768", "--runtime", "vllm", "--band", "--serial"]),
    ("plan-qwen", ["plan", "--model", "qwen3-32b", "--gpu", "h200", "--gpus", "32", "--isl", "4000", "--osl",
                   "500", "--ttft-ms", "300", "--tpot-ms", "10", "--weight-dtype", "fp8"]),
    ("plan-mlperf", ["plan", "--model", "llama-2-70b", "--gpu", "h100-sxm", "--gpus", "16", "--isl", "1024",
                     "--osl", "1024", "--targets", "mlperf-llama-2-70b-server", "--rate", "20", "--simulate", "2"]),
    ("plan-dsv3", ["plan", "--model", "deepseek-v3", "--gpu", "h200", "--gpus", "32", "--isl", "2000", "--osl",
                   "1000", "--ttft-ms", "2000", "--tpot-ms", "50", "--weight-dtype", "fp8", "--top", "5"]),
    ("plan-colocated-vllm", ["plan", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--gpus", "8", "--isl", "1000",
                             "--osl", "300", "--ttft-ms", "500", "--tpot-ms", "30", "--mode", "colocated",
                             "--runtime", "vllm", "--stat", "mean"]),
    # issue 22: two GPU types, priced, best by $ per million tokens within a $/hour budget (the benchmark's Q_MIX)
    ("plan-mix-cost", ["plan", "--model", "qwen3-32b", "--gpu", "h100-sxm,b200", "--gpus", "64", "--isl", "8000",
                       "--osl", "300", "--ttft-ms", "1500", "--tpot-ms", "30", "--weight-dtype", "fp8", "--kv-dtype",
                       "fp8", "--price-tier", "reserved-3yr", "--objective", "usd_per_mtok",
                       "--budget-usd-per-hour", "80", "--top", "5"]),
    ("plan-routed-energy", ["plan", "--model", "llama-3-8b", "--gpu", "h100-sxm,h200", "--gpus", "16", "--isl",
                            "4000", "--osl", "300", "--ttft-ms", "1000", "--tpot-ms", "40", "--mode", "colocated",
                            "--objective", "j_per_token", "--long-share", "0.2", "--long-isl", "16000", "--top", "5"]),
    ("simulate-qwen", ["simulate", "--config", _SIM_CONFIG, "--isl", "4000", "--osl", "500", "--rate", "10"]),
    ("simulate-qwen-conc", ["simulate", "--config", _SIM_CONFIG, "--isl", "1000", "--osl", "300", "--concurrency",
                            "64", "--requests", "300", "--sampler", "torch_sort", "--seed", "3"]),
    ("simulate-pd", ["simulate", "--config", _SIM_PD, "--isl", "2000", "--osl", "200", "--rate", "6",
                     "--requests", "400", "--isl-sigma", "0.4", "--prefix-ratio", "0.25"]),
    ("validate-default", ["validate", "--runtime", "default"]),
    ("validate-engine", ["validate"]),
    ("calibrate-aic", ["calibrate", "--data", "data/calibration/aic-llama31-70b-tp8-h100.csv"]),
    # refusals: the one-line error and the status are behaviour too
    ("err-layouts-ranks", ["layouts", "--model", "llama-3-70b", "--gpu", "h100-sxm", "--ranks", "3", "--batch", "8",
                           "--context", "1024"]),
    ("err-pd-tp", ["pd", "--model", "llama-3-70b", "--gpu", "h100-sxm", "--prompt", "1024", "--output", "64",
                   "--prefill-tp", "3"]),
    ("err-simulate-config", ["simulate", "--config", "[1, 2]", "--isl", "10", "--osl", "10", "--rate", "1"]),
    ("err-plan-tier", ["plan", "--model", "qwen3-32b", "--gpu", "h200", "--gpus", "8", "--isl", "1000", "--osl",
                       "100", "--price-tier", "spot"]),
    ("err-plan-price", ["plan", "--model", "qwen3-32b", "--gpu", "h200", "--gpus", "8", "--isl", "1000", "--osl",
                        "100", "--usd-per-gpu-hour", "-2"]),
    ("err-plan-unpriced", ["plan", "--model", "qwen3-32b", "--gpu", "h200,gb300", "--gpus", "8", "--isl", "1000",
                           "--osl", "100", "--objective", "usd_per_mtok", "--price-tier", "reserved-3yr"]),
    ("err-plan-gpus", ["plan", "--model", "qwen3-32b", "--gpu", "h200", "--gpus", "0", "--isl", "10", "--osl",
                       "10"]),
]

#: (case-name prefix, old key path suffix, new key, scale): the deliberate fix of issue 18 §6.
RENAMED = [("simulate-", "output_tokens_per_ms", "output_tokens_per_s", 1e-3),
           ("simulate-", "requests_per_ms", "requests_per_s", 1e-3)]
#: keys whose value is a wall-clock measurement, not a model answer (``plan --json``'s search time)
WALL_CLOCK = ("seconds",)


def run_cli(argv: list[str]) -> dict:
    """One command's answer: its JSON document (or text) and exit status, its stderr's last line."""
    from llmexplore.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main([*argv, "--json"])
        except SystemExit as e:  # argparse's own refusals
            status = e.code
    text = out.getvalue()
    try:
        answer = json.loads(text) if text.strip() else None
    except json.JSONDecodeError:
        answer = text
    lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
    return _portable({"status": status, "answer": answer, "stderr": lines[-1] if lines else ""})


def _portable(value: Any) -> Any:
    """``value`` with this checkout's path written ``<repo>``, so that two checkouts compare equal."""
    import llmexplore

    root = str(Path(llmexplore.__file__).resolve().parents[1])
    if isinstance(value, dict):
        return {k: _portable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_portable(v) for v in value]
    return value.replace(root, "<repo>") if isinstance(value, str) else value


def capture_cli(cases=CASES) -> dict:
    return {name: run_cli(argv) for name, argv in cases}


def capture_notebooks(workdir: Path) -> dict:
    """Each notebook's records, executed with its defaults (as ``make report`` runs it)."""
    import llmexplore
    from llmexplore.nbtools import read_records
    from llmexplore.report import execute_notebook

    nb_dir = Path(llmexplore.__file__).resolve().parents[1] / "notebooks"
    workdir.mkdir(parents=True, exist_ok=True)
    records = {}
    for src in sorted(nb_dir.glob("*.ipynb")):
        out = workdir / src.name
        print(f"executing {src.name}", file=sys.stderr, flush=True)
        execute_notebook(src, out, {}, 1800)
        records[src.stem] = read_records(out)
    return records


def _close(a: float, b: float, rel_tol: float = REL_TOL) -> bool:
    if math.isnan(a) and math.isnan(b):
        return True
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= max(ABS_TOL, rel_tol * max(abs(a), abs(b)))


def diff(before: Any, after: Any, path: str = "", rel_tol: float = REL_TOL) -> list[str]:
    """Every place where ``after`` differs from ``before``: keys may be added, none removed."""
    if isinstance(before, dict):
        if not isinstance(after, dict):
            return [f"{path}: was an object, now {type(after).__name__}"]
        out = []
        for k, v in before.items():
            if k in WALL_CLOCK:
                continue
            if k not in after:
                out.append(f"{path}/{k}: removed")
            else:
                out += diff(v, after[k], f"{path}/{k}", rel_tol)
        return out
    if isinstance(before, list):
        if not isinstance(after, list) or len(after) != len(before):
            return [f"{path}: list of {len(before)} became {type(after).__name__} "
                    f"of {len(after) if isinstance(after, list) else '-'}"]
        return [d for i, (a, b) in enumerate(zip(before, after)) for d in diff(a, b, f"{path}[{i}]", rel_tol)]
    if isinstance(before, bool) or isinstance(after, bool) or not (
            isinstance(before, (int, float)) and isinstance(after, (int, float))):
        return [] if before == after else [f"{path}: {before!r} -> {after!r}"]
    return [] if _close(float(before), float(after), rel_tol) else [f"{path}: {before!r} -> {after!r}"]


def apply_renames(name: str, answer: Any) -> Any:
    """``answer`` (captured before the fix) as it reads after it: the renamed keys, rescaled."""
    if isinstance(answer, dict):
        out = {}
        for k, v in answer.items():
            for prefix, old, new, scale in RENAMED:
                if name.startswith(prefix) and k == old and isinstance(v, (int, float)):
                    k, v = new, v * scale
            out[k] = apply_renames(name, v)
        return out
    if isinstance(answer, list):
        return [apply_renames(name, v) for v in answer]
    return answer


def compare(before: dict, after: dict, rel_tol: float = REL_TOL) -> list[str]:
    out = []
    for name, answer in before.get("cli", {}).items():
        if name not in after.get("cli", {}):
            out.append(f"cli/{name}: not captured after")
            continue
        out += diff(apply_renames(name, answer), after["cli"][name], f"cli/{name}", rel_tol)
    for nb, recs in before.get("notebooks", {}).items():
        if nb not in after.get("notebooks", {}):
            out.append(f"notebooks/{nb}: not captured after")
            continue
        out += diff(recs, after["notebooks"][nb], f"notebooks/{nb}", rel_tol)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("capture")
    c.add_argument("out", type=Path)
    c.add_argument("--notebooks", action="store_true", help="also execute every notebook with its defaults")
    c.add_argument("--no-cli", action="store_true")
    k = sub.add_parser("compare")
    k.add_argument("before", type=Path)
    k.add_argument("after", type=Path)
    args = p.parse_args(argv)
    if args.cmd == "capture":
        doc: dict = {}
        if not args.no_cli:
            doc["cli"] = capture_cli()
        if args.notebooks:
            doc["notebooks"] = capture_notebooks(args.out.with_suffix(".executed"))
        args.out.write_text(json.dumps(doc, indent=1, sort_keys=True, allow_nan=True) + "\n")
        return 0
    diffs = compare(json.loads(args.before.read_text()), json.loads(args.after.read_text()))
    for d in diffs:
        print(d)
    print(f"{len(diffs)} difference(s)")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())

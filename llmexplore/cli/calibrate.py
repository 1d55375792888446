"""``llmexplore calibrate``: fit the runtime efficiencies to measured step times in a CSV.

Fit eta_mem, eta_compute, eta_attn_mem, kernel_overhead_us and step_overhead_ms to the decode/prefill rows of
a CSV (format: data/calibration/README.md); print the error per point and overall.
"""

from __future__ import annotations

from .. import _check
from ._framework import (EXIT_OK, Checked, Col, command, format_table, preset_name, print_json, shown,
                         text_value)
__all__ = ["add", "run", "FLAGS"]

#: API field names -> the flags of this command
FLAGS = {"runtime": "--start", "Runtime name": "--name"}


def add(sub) -> None:
    p = command(sub, "calibrate", __doc__, help="fit runtime efficiencies to measured step times")
    p.add_argument("--data", required=True, action=Checked, check=text_value("a file path", 4096),
                   metavar="FILE", help="calibration CSV (UTF-8, at most 1 MiB)")
    p.add_argument("--start", default="uncalibrated", action=Checked, check=preset_name("runtime"),
                   metavar="NAME", help="runtime preset to start from and use as the prior (default: uncalibrated)")
    p.add_argument("--name", default="calibrated", action=Checked,
                   check=text_value("a runtime preset name (non-empty text of at most 100 characters)", 100),
                   metavar="NAME", help="name of the fitted runtime preset (default: calibrated)")
    p.add_argument("--save", action=Checked, check=text_value("a file path", 4096), metavar="FILE",
                   help="write the fit as a preset overlay YAML; use it with LLMEXPLORE_PRESETS=FILE and "
                        "--runtime NAME (or presets.add_file)")
    p.add_argument("--json", action="store_true", help='JSON: {"runtime": {...}, "points": [...], ...}')
    p.set_defaults(func=run, flags=FLAGS)


def _check_save_target(text: str):
    """The --save path, checked before the fit runs: a file (new or to replace) in an existing, writable
    directory."""
    import os

    from .._check import path_kind
    from ..errors import SpecError

    path = _check.user_path("path", text)
    kind, parent = path_kind(path), path_kind(path.parent)
    if kind == "dir":
        raise SpecError(f"--save must be a file to write, not a directory, got the directory {shown(text)}")
    if parent != "dir":
        raise SpecError(f"--save must be in an existing directory, got {shown(text)} ("
                        + (f"{str(path.parent)!r} does not exist" if parent == "missing" else parent) + ")")
    if kind not in ("file", "missing"):
        raise SpecError(f"--save must be a writable file, got {shown(text)} ({kind})")
    if not os.access(path.parent, os.W_OK) or (kind == "file" and not os.access(path, os.W_OK)):
        raise SpecError(f"--save must be a writable file, got {shown(text)} (permission denied)")
    return path


CALIBRATE_COLS = [
    Col("point", "point"), Col("model", "model"), Col("gpu", "gpu"), Col("ranks", "T"), Col("unit", "unit"),
    Col("measured", "measured", ".4g"), Col("predicted_before", "before fit", ".4g"),
    Col("predicted", "fitted", ".4g"), Col("error_pct", "error %", "+.2f"),
    Col("fitted", "in fit"),
]


def run(args) -> int:
    import dataclasses as dc

    from .. import calibrate as cal
    from .. import presets
    from .._check import path_kind
    from ..errors import SpecError

    data_kind = path_kind(_check.user_path("--data", args.data))
    if data_kind != "file":
        raise SpecError(f"--data must be an existing file, got {shown(args.data)}"
                        + ("" if data_kind == "missing" else f" ({data_kind})"))
    save = _check_save_target(args.save) if args.save else None
    start = presets.runtime(args.start)  # an unknown preset fails before the CSV is read
    try:
        points = cal.load_points(_check.user_path("--data", args.data))
    except SpecError as exc:  # the file's problems, said of --data
        raise SpecError(f"--data: {exc}") from None
    result = cal.fit(points, start=start, name=args.name)
    rt = result["runtime"]
    params = {f: getattr(rt, f) for f in cal.fit_fields(rt)}
    if save is not None:
        try:
            save.write_text(cal.overlay_yaml(rt, args.data), encoding="utf-8")
        except OSError as exc:
            raise SpecError(f"--save could not be written: {args.save!r}: {exc.strerror or exc}") from None
    if args.json:
        print_json({"runtime": {"name": rt.name, **{f.name: getattr(rt, f.name) for f in dc.fields(rt)
                                                     if f.name not in ("name", "sources", "display_name")}},
                    "fitted": params, "points": result["table"], "rms_error_pct": result["rms_error_pct"],
                    "max_abs_error_pct": result["max_abs_error_pct"], "iterations": result["iterations"],
                    "start": result["start"], "saved": args.save})
        return EXIT_OK
    print(f"calibration of {len(points)} points from {args.data} (start: {result['start']})")
    print(format_table(result["table"], CALIBRATE_COLS))
    print(f"fit error over {sum(p.fitted for p in points)} time points: rms {result['rms_error_pct']:.2f}%, "
          f"max |error| {result['max_abs_error_pct']:.2f}% ({result['iterations']} iterations)")
    print("fitted: " + ", ".join(f"{k} = {v:.4g}" for k, v in params.items()))
    if args.save:
        print(f"saved runtime preset {rt.name!r} to {args.save}: use LLMEXPLORE_PRESETS={args.save} and "
              f"--runtime {rt.name}")
    return EXIT_OK

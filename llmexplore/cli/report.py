"""``llmexplore report``: execute the notebooks headless and write offline HTML reports.

Execute every notebook headless (papermill) and export each to an offline HTML report plus an index.html.
"""

from __future__ import annotations

import sys
from typing import Any

from ._framework import (EXIT_FAILED, EXIT_OK, PROG, Checked, ParamPairs, command, int_in, output_dir,
                         shown)

__all__ = ["add", "run"]


def add(sub) -> None:
    p = command(sub, "report", __doc__, help="execute the notebooks and write offline HTML reports")
    p.add_argument("--out", default="reports", metavar="DIR", action=Checked, check=output_dir(),
                   help="output directory, existing or to create (default: reports)")
    p.add_argument("-p", "--parameter", dest="parameters", nargs=2, metavar=("NAME", "VALUE"),
                   action=ParamPairs, default={},
                   help="set a notebook parameter (repeatable) in every notebook that defines it; VALUE is "
                        "read as int, float, true/false, none, a list or dict literal such as '[512, 1024]', "
                        "or else a string. Checked before anything runs; a value that does not apply to a "
                        "notebook (a dense MODEL for the MoE notebook) is skipped there with a note")
    p.add_argument("--notebook", dest="notebooks", action="append", metavar="NAME",
                   help="only this notebook (name such as 10_attention_layouts, or a path; repeatable; "
                        "default: all). Other reports already in --out stay in its index.html")
    p.add_argument("--timeout", dest="timeout_s", action=Checked, check=int_in(1, 86_400, unit="s"),
                   metavar="S", default=None, help="per-cell timeout [s], whole seconds (papermill's unit)")
    p.add_argument("--shared-plotly", action="store_true",
                   help="load plotly.js from one plotly-<version>.min.js in --out instead of inlining it in every "
                        "report (about 5 MB less per report; the folder must then travel whole)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=run)


def run(args) -> int:
    from pathlib import Path

    from .. import report as reports
    from ..errors import SpecError

    parameters = {name: reports.parse_param_value(text, name) for name, text in args.parameters.items()}
    kwargs: dict[str, Any] = {"out_dir": args.out, "parameters": parameters, "notebooks": args.notebooks,
                              "progress": not args.quiet, "shared_plotly": args.shared_plotly}
    if args.timeout_s is not None:
        kwargs["timeout_s"] = args.timeout_s
    try:
        Path(args.out).mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a parent the OS refuses (/proc, a read-only file system, a name too long)
        raise SpecError(f"--out must be a directory that can be created and written, got {shown(args.out)} "
                        f"({exc.strerror})") from None
    try:
        paths = reports.build_reports(**kwargs)
    except reports.ReportError as exc:  # some notebooks failed; the others' reports were written
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    for path in paths:
        print(path)
    return EXIT_OK

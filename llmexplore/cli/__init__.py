"""Command line: ``llmexplore <command> ...`` (also ``python -m llmexplore``).

Commands:

* ``report``  execute the notebooks headless and write offline HTML reports (:mod:`llmexplore.report`).
* ``presets`` list model, hardware, link or runtime presets with their derived quantities.
* ``layouts`` memory per rank and decode step time of the attention layouts TP, CP, DPA and DOP at one
  (batch, context) point, and the fastest layout that fits.
* ``pd``      prefill/decode disaggregation vs colocated serving: one prefill, one decode step, the KV
  transfer, and the smallest pools meeting TTFT/TPOT targets at an arrival rate.
* ``moe``     MoE decode on N GPUs split into TP x EP, under skewed routing, with optional redundant experts
  (EPLB), against pure TP.
* ``transfer`` the KV transfer plans between a prefill and a decode TP/DP layout (which prefill rank sends
  which byte ranges of which buffer to each decode rank), fan-out, bytes per rank and transfer time.
* ``prefill`` B prompts prefilled together in one tensor-parallel forward pass: time by part, tokens per second,
  FLOPs, MFU, and whether the batch's KV cache fits.
* ``offload`` load a cached KV prefix from host memory, an SSD or NFS, or recompute it: both costs, the
  decision, the break-even (and which term sets it) and what preloading during a queue wait buys.
* ``plan``    the best deployment for a workload and latency targets: colocated vs disaggregated, ranks,
  layouts, dtypes, chunk and batch caps and pool sizes within a GPU budget; frontiers, launch commands and an
  optional check of the best configurations in the serving simulator.
* ``simulate`` the latency distributions (TTFT, TPOT, ITL, end-to-end) of one configuration in the
  iteration-level serving simulator.
* ``calibrate`` fit the runtime efficiencies to measured decode/prefill times in a CSV, print the error per
  point and overall, optionally save the fit as a preset overlay.
* ``calibrate-disk`` measure a directory's read bandwidth and latency over request sizes and queue depths with
  the staging reader (O_DIRECT), remove its files, and save the result as a storage preset.

Conventions shared by every command (add a command as one module here with ``add(sub)``, which declares the
options, and ``run(args)``, which runs it and returns the exit status; then list it in ``COMMANDS``):

* ``--json`` writes one JSON document to stdout, strictly valid (no NaN/Infinity: such numbers become
  ``null`` and the record's ``reason`` says why); without it, aligned plain-text tables.
* Bad input (unknown preset, a size that is not an integer within its stated bounds, ranks that do not divide
  the model, an unknown option, a missing one, one given twice, an unreadable file) prints exactly one line
  ``llmexplore: error: <flag> ... got <value>`` on stderr and exits with status 2. No traceback: argparse's own
  errors are one line too. Errors from the API name its fields; each command maps them to its flags
  (``FLAGS``, passed to :func:`~._framework.flag_message`), so ``--prefill-tp 3`` is blamed on
  ``--prefill-tp``. Values may start with ``-`` (``--rate -inf`` is a bad value, not a missing one).
* A question without an answer is a result, not an error: ``layouts`` prints the table with ``best: none
  fits`` and what would fit, ``pd`` reports an infeasible mode with its reason (status 0). Status 1 means
  some notebooks of ``report`` failed (the others' reports are written).
* Any other exception is a bug and propagates with its traceback.

Only the standard library and numpy (for the shared rules of :mod:`llmexplore._check`) are imported at
start-up; each command imports what it needs.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from ..errors import LlmexploreError
from . import (calibrate, calibrate_disk, disagg, layouts, moe, offload, plan, prefill, presets, report, simulate,
               transfer, validate)
from ._framework import EXIT_FAILED, EXIT_OK, EXIT_USAGE, PROG, Parser, UsageError, fail, flag_message

__all__ = ["main", "build_parser", "PROG", "COMMANDS"]

#: command modules, in help order; each has ``add(subparsers)`` and ``run(args) -> exit status``
COMMANDS = [report, presets, layouts, disagg, prefill, moe, transfer, offload, plan, simulate, calibrate,
            calibrate_disk, validate]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llmexplore")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog=PROG, description="Analytical models of LLM serving deployments.")
    parser.add_argument("--version", action="version", version=f"{PROG} {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return the exit status (0 ok, 1 some reports failed, 2 bad input)."""
    parser = build_parser()
    args = None
    try:
        try:
            args = parser.parse_args(sys.argv[1:] if argv is None else list(argv))
        except SystemExit as exc:  # --help / --version
            return exc.code if isinstance(exc.code, int) else EXIT_OK
        return args.func(args)
    except UsageError as exc:
        return fail(str(exc))
    except LlmexploreError as exc:  # SpecError, UnknownPresetError: bad input, said with the command's flags
        return fail(flag_message(str(exc), getattr(args, "flags", {})), EXIT_USAGE)
    except BrokenPipeError:  # e.g. `llmexplore presets models | head -1`
        # Python docs recipe: point stdout at devnull so the flush at exit does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())

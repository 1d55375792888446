"""Shared machinery of the command line: typed options, one-line usage errors, JSON and text tables.

Every command module declares its options with :class:`Rule` checks (``int_at_least``, ``float_at_least``,
``one_of``) so a bad value exits with status 2 and one line naming the flag, the value and the rule.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

__all__ = ["PROG", "EXIT_OK", "EXIT_FAILED", "EXIT_USAGE", "UsageError", "Parser", "fail", "shown", "Rule",
           "int_at_least", "float_at_least", "one_of", "Checked", "ParamPairs", "jsonable", "print_json", "Col",
           "format_table", "billions", "model_gpu_options", "dtype_runtime_options"]

PROG = "llmexplore"
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


# ---- errors ------------------------------------------------------------------------------------------------
class UsageError(Exception):
    """Bad command-line input detected by the parser (one-line message, exit status 2)."""


class Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors are exceptions with a one-line message (no usage dump, no exit)."""

    def error(self, message: str):  # noqa: D401 - argparse API
        raise UsageError(message)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def fail(message: str, code: int = EXIT_USAGE) -> int:
    print(f"{PROG}: error: {_one_line(message)}", file=sys.stderr)
    return code


def shown(text: str) -> str:
    """A user-typed value as it appears in a message: bare if it is one plain word, else quoted."""
    return text if text and text.isprintable() and not any(c.isspace() for c in text) else repr(text)


# ---- typed options -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Rule:
    """How to read one option value: ``convert(text)`` returns the value or raises ValueError; ``rule``
    completes the sentence "<option> must be ..."."""

    rule: str
    convert: Callable[[str], Any]


def int_at_least(lo: int) -> Rule:
    def convert(text: str) -> int:
        value = int(text.strip())
        if value < lo:
            raise ValueError(text)
        return value

    return Rule(f"an integer >= {lo}", convert)


def float_at_least(lo: float, *, strict: bool = False) -> Rule:
    """A finite number >= lo (> lo if ``strict``)."""
    def convert(text: str) -> float:
        value = float(text)
        if not math.isfinite(value) or value < lo or (strict and value == lo):
            raise ValueError(text)
        return value

    return Rule(f"a finite number {'>' if strict else '>='} {lo:g}", convert)


def one_of(choices: Iterable[str]) -> Rule:
    choices = list(choices)

    def convert(text: str) -> str:
        if text not in choices:
            raise ValueError(text)
        return text

    return Rule(f"one of {', '.join(choices)}", convert)


class Checked(argparse.Action):
    """Store an option converted by a :class:`Rule`; else a usage error naming option, rule and value."""

    def __init__(self, option_strings, dest, check: Rule, **kwargs):
        self.check = check
        kwargs.setdefault("help", "")
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        try:
            value = self.check.convert(values)
        except (ValueError, TypeError, OverflowError):
            field = option_string or self.dest
            raise UsageError(f"{field} must be {self.check.rule}, got {shown(values)}") from None
        setattr(namespace, self.dest, value)


class ParamPairs(argparse.Action):
    """``-p NAME VALUE`` (repeatable): collect ``{NAME: VALUE-text}``; NAME an identifier, given once."""

    def __call__(self, parser, namespace, values, option_string=None):
        name, text = values
        if not name.isidentifier():
            raise UsageError(f"{option_string} NAME must be a Python identifier, got {shown(name)}")
        pairs = dict(getattr(namespace, self.dest, None) or {})
        if name in pairs:
            raise UsageError(f"{option_string} {name} given twice ({shown(pairs[name])} and "
                             f"{shown(text)}); give each parameter once")
        pairs[name] = text
        setattr(namespace, self.dest, pairs)


# ---- output helpers ----------------------------------------------------------------------------------------
def jsonable(value: Any) -> Any:
    """Plain JSON types: mappings, sequences, numpy scalars/arrays; non-finite floats become None."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):  # numpy scalar or array
        return jsonable(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    return str(value)  # paths and the like


def print_json(value: Any) -> None:
    json.dump(jsonable(value), sys.stdout, indent=2, allow_nan=False)
    sys.stdout.write("\n")


@dataclass(frozen=True)
class Col:
    """One column of a text table: record key, header, and a format spec or function for the cell."""

    key: str
    header: str
    fmt: str | Callable[[Any], str] = ""

    def cell(self, record: Mapping[str, Any]) -> str:
        value = record.get(self.key)
        if value is None:
            return "-"
        if callable(self.fmt):
            return self.fmt(value)
        if isinstance(value, bool):
            return "yes" if value else "no"
        return format(value, self.fmt)


def format_table(records: Sequence[Mapping[str, Any]], cols: Sequence[Col]) -> str:
    """Aligned plain-text table: text columns left-aligned, numeric columns right-aligned."""
    cells = [[c.cell(r) for c in cols] for r in records]
    numeric = [all(isinstance(r.get(c.key), (int, float)) and not isinstance(r.get(c.key), bool)
                   for r in records if r.get(c.key) is not None) for c in cols]
    widths = [max([len(c.header)] + [len(row[i]) for row in cells]) for i, c in enumerate(cols)]

    def line(values):
        out = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)]
        return "  ".join(out).rstrip()

    return "\n".join([line([c.header for c in cols]), *(line(row) for row in cells)])


def billions(n: float) -> str:
    return f"{n / 1e9:.2f}B"


# ---- shared option groups -----------------------------------------------------------------------------------
def model_gpu_options(req, model_help: str = "model preset (see: presets models)") -> None:
    req.add_argument("--model", required=True, metavar="M", help=model_help)
    req.add_argument("--gpu", required=True, metavar="G", help="hardware preset (see: presets hardware)")


def dtype_runtime_options(p) -> None:
    """``--weight-dtype`` (default: the dtype the model's weights are released in), ``--kv-dtype`` and
    ``--runtime``: the same for every command."""
    from ..units import DTYPE_BYTES

    dtypes = one_of(sorted(DTYPE_BYTES))
    p.add_argument("--weight-dtype", default=None, action=Checked, check=dtypes, metavar="DTYPE",
                   help=f"weight dtype, {dtypes.rule} (default: the model's released dtype, see: presets models)")
    p.add_argument("--kv-dtype", default="bf16", action=Checked, check=dtypes, metavar="DTYPE",
                   help=f"KV-cache dtype, {dtypes.rule} (default: bf16)")
    p.add_argument("--runtime", default="default", metavar="NAME", help="runtime preset (default: default)")

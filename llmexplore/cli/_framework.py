"""Shared machinery of the command line: typed options, one-line usage errors, JSON and text tables.

Every command module declares its options with :class:`Rule` checks (``int_in``, ``number_in``, ``one_of``,
``preset_name``), which apply the same rules as the API (:mod:`llmexplore._check`), bounds included, so a bad
value exits with status 2 and one line naming the flag, the value and the rule. A flag given twice is an error,
not "the last one wins"; a value may start with ``-`` (``--rate -inf``, ``--model -x``). Errors the API raises
name its own fields (``prefill_tp``); each command maps them back to the flags the user typed
(:func:`flag_message`, the command's ``FLAGS``).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from .. import _check

__all__ = ["PROG", "EXIT_OK", "EXIT_FAILED", "EXIT_USAGE", "UsageError", "Parser", "fail", "shown", "Rule",
           "int_in", "number_in", "int_at_least", "float_at_least", "one_of", "preset_name", "text_value",
           "output_dir", "Checked", "ParamPairs", "flag_message", "jsonable", "print_json", "Col", "format_table",
           "billions", "COMMON_FLAGS", "model_gpu_options", "dtype_runtime_options", "sampler_option"]

PROG = "llmexplore"
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


# ---- errors ------------------------------------------------------------------------------------------------
class UsageError(Exception):
    """Bad command-line input detected by the parser (one-line message, exit status 2)."""


class Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors are exceptions with a one-line message (no usage dump, no exit), whose
    options take values that start with ``-`` (argparse would read ``--rate -inf`` as two options), and which
    does not expand abbreviations (``--tp 3`` must not silently mean ``--tpot-ms 3``)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # noqa: D401 - argparse API
        raise UsageError(message)

    def parse_known_args(self, args=None, namespace=None):
        if args is not None:
            args = self._glue_values(list(args))
        return super().parse_known_args(args, namespace)

    def _value_option(self, token: str):
        """The action of ``token`` if it is this parser's option taking one value."""
        action = self._option_string_actions.get(token)
        return action if action is not None and action.nargs is None else None

    def _is_option(self, token: str) -> bool:
        """Whether ``token`` reads as an option rather than a value: any ``--word`` (known or not: a missing
        value then gets argparse's "expected one argument"), or one of this parser's own short options."""
        if not token.startswith("-") or token == "-":
            return False
        return token.startswith("--") or token.split("=", 1)[0] in self._option_string_actions

    def _glue_values(self, args: list[str]) -> list[str]:
        """``["--rate", "-inf"]`` -> ``["--rate=-inf"]`` for this parser's one-value options, when the next
        token starts with a single ``-`` and is not one of the options (a negative number, ``-x``)."""
        out, i = [], 0
        while i < len(args):
            tok = args[i]
            if tok == "--":
                out.extend(args[i:])
                break
            if (isinstance(tok, str) and i + 1 < len(args) and isinstance(args[i + 1], str)
                    and args[i + 1].startswith("-") and self._value_option(tok) is not None
                    and not self._is_option(args[i + 1])):
                out.append(f"{tok}={args[i + 1]}")
                i += 2
                continue
            out.append(tok)
            i += 1
        return out


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def fail(message: str, code: int = EXIT_USAGE) -> int:
    print(f"{PROG}: error: {_one_line(message)}", file=sys.stderr)
    return code


def shown(text: str, limit: int = 80) -> str:
    """A user-typed value as it appears in a message: bare if it is one plain word, else quoted; a very long
    value (a 400-digit number) is shortened in the middle, keeping its end (a file name) readable."""
    out = text if text and text.isprintable() and not any(c.isspace() for c in text) else repr(text)
    return out if len(out) <= limit else out[: limit - 41] + "…" + out[-40:]


def flag_message(message: str, flags: Mapping[str, str]) -> str:
    """An API error message with its field names replaced by the command's flags (``prefill_tp (3) must
    divide ...`` -> ``--prefill-tp (3) must divide ...``); quoted values, longer names and preset kinds ("no
    runtime preset") are left alone. One pass: a flag text put in is never replaced again (``ranks`` ->
    ``tp (= --gpus / --ep)`` keeps its ``tp``)."""
    if not flags:
        return message
    names = "|".join(re.escape(n) for n in sorted(flags, key=len, reverse=True))
    return re.sub(rf"(?<![\w'\"./-])(?:{names})(?![\w'\"./=-]| preset)", lambda m: flags[m.group(0)], message)


# ---- typed options -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Rule:
    """How to read one option value: ``convert(text)`` returns the value or raises ValueError; ``rule``
    completes the sentence "<option> must be ..."; ``bounds`` is (lo, hi) for numeric rules (tests probe them)."""

    rule: str
    convert: Callable[[str], Any]
    bounds: tuple | None = None


_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_NUMBER_TEXT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:inf|infinity|nan)",
                          re.IGNORECASE)


def int_in(lo: int | None = None, hi: int | None = None, *, unit: str = "") -> Rule:
    """An integer in [lo, hi] written in decimal digits (``8``; not ``8.0``, ``1e3``, ``0x8`` or ``８``)."""
    def convert(text: str) -> int:
        text = text.strip()
        if not _INT_TEXT.fullmatch(text) or len(text) > 40:  # 40 digits are out of any range
            raise ValueError(text)
        return _check.integer("value", int(text), lo=lo, hi=hi)

    return Rule(_check.rule_text("integer", lo, hi, unit=unit), convert, (lo, hi))


def number_in(lo: float | None = None, hi: float | None = None, *, lo_open: bool = False, hi_open: bool = False,
              unit: str = "") -> Rule:
    """A finite real number within the bounds, in decimal or scientific notation (``0.5``, ``1e3``)."""
    def convert(text: str) -> float:
        text = text.strip()
        if not _NUMBER_TEXT.fullmatch(text):
            raise ValueError(text)
        # + 0.0: "-0" is zero, not a negative zero that prints as "-0 us"
        return _check.number("value", float(text), lo=lo, hi=hi, lo_open=lo_open, hi_open=hi_open) + 0.0

    return Rule(_check.rule_text("number", lo, hi, lo_open=lo_open, hi_open=hi_open, unit=unit), convert,
                (lo, hi))


def int_at_least(lo: int) -> Rule:
    return int_in(lo)


def float_at_least(lo: float, *, strict: bool = False) -> Rule:
    """A finite number >= lo (> lo if ``strict``)."""
    return number_in(lo, lo_open=strict)


def one_of(choices: Iterable[str]) -> Rule:
    choices = list(choices)

    def convert(text: str) -> str:
        if text not in choices:
            raise ValueError(text)
        return text

    return Rule(f"one of {', '.join(choices)}", convert)


def text_value(what: str, max_len: int = 200) -> Rule:
    """A non-empty printable text of at most ``max_len`` characters, e.g. a name or a file path."""
    def convert(text: str) -> str:
        return _check.text("value", text, max_len=max_len)

    return Rule(what, convert)


def output_dir() -> Rule:
    """A directory to write into: an existing directory, or a path that can be created (not an existing
    file, not a path the OS refuses). Checked when the option is read, before any work."""
    def convert(text: str) -> str:
        text = _check.text("value", text, max_len=4096)
        if any(len(part.encode("utf-8", "surrogateescape")) > 255 for part in text.split("/")):
            raise ValueError(text)  # a name the file system refuses (255 bytes at most on ext4, xfs, tmpfs)
        kind = _check.path_kind(text)
        if kind not in ("dir", "missing"):
            raise ValueError(text)
        return text

    return Rule("a directory (existing or to create) whose names are at most 255 bytes each, not a file", convert)


def preset_name(kind: str) -> Rule:
    """A preset name; whether it exists is checked when the presets are read (the error lists the known ones)."""
    return text_value(f"a {kind} preset name (see: presets {kind})")


class Checked(argparse.Action):
    """Store an option converted by a :class:`Rule`; else a usage error naming option, rule and value.
    An option given twice is an error (the two values may disagree)."""

    def __init__(self, option_strings, dest, check: Rule, **kwargs):
        self.check = check
        kwargs.setdefault("help", "")
        if check.bounds is not None and kwargs["help"]:  # the help states the bounds the value is checked against
            kwargs["help"] += f"; {check.rule}"
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        flag = max(self.option_strings, key=len) if self.option_strings else self.dest
        given = getattr(namespace, "_given", None)
        if given is None:
            given = {}
            setattr(namespace, "_given", given)
        if self.dest in given:
            raise UsageError(f"{flag} given twice ({shown(given[self.dest])} and {shown(values)}); give it once")
        given[self.dest] = values
        try:
            value = self.check.convert(values)
        except (ValueError, TypeError, OverflowError):
            raise UsageError(f"{flag} must be {self.check.rule}, got {shown(values)}") from None
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


#: why a top-level number of a JSON answer is null, when its command gives no reason of its own
NULL_REASONS = {"inf": "infinite: never, within the range the model evaluates",
                "-inf": "minus infinity: unbounded below",
                "nan": "not defined for this input"}


def print_json(value: Any, reasons: Mapping[str, str] | None = None) -> None:
    """``value`` as JSON (non-finite floats become null). A mapping whose top-level numbers are not finite gets
    ``null_reasons`` ``{key: why}``: ``reasons[key]`` where the command knows it, else what the value was
    (:data:`NULL_REASONS`), so that no null in an answer comes without a reason."""
    out = jsonable(value)
    if isinstance(value, Mapping) and isinstance(out, dict):
        why = {}
        for k, v in value.items():
            x = v.item() if hasattr(v, "item") and getattr(v, "ndim", 0) == 0 else v
            if isinstance(x, float) and not math.isfinite(x):
                why[str(k)] = (reasons or {}).get(str(k)) or NULL_REASONS[repr(x).lstrip("+")]
        if why:
            out["null_reasons"] = {**out.get("null_reasons", {}), **why} if isinstance(out.get("null_reasons"), dict) \
                else why
    json.dump(out, sys.stdout, indent=2, allow_nan=False)
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
#: API field names -> flags of :func:`model_gpu_options` and :func:`dtype_runtime_options` (every model command)
COMMON_FLAGS = {"model": "--model", "gpu": "--gpu", "weight_dtype": "--weight-dtype", "kv_dtype": "--kv-dtype",
                "runtime": "--runtime"}


def command(sub, name: str, doc: str, *, help: str) -> argparse.ArgumentParser:  # noqa: A002 (argparse's name)
    """The subcommand ``name``'s parser. Its ``--help`` description is ``doc``, the command module's docstring,
    after its first paragraph: the text that says what the command does lives in one place, the module."""
    _, _, body = doc.partition("\n\n")
    return sub.add_parser(name, help=help, description=" ".join(body.split()))


def model_command(sub, name: str, doc: str, *, help: str,  # noqa: A002
                  model_help: str = "model preset (see: presets models)"):
    """:func:`command` for a command that prices a model on a GPU: the parser and its 'required' argument
    group, which already holds ``--model`` and ``--gpu``."""
    p = command(sub, name, doc, help=help)
    req = p.add_argument_group("required")
    model_gpu_options(req, model_help)
    return p, req


def model_gpu_options(req, model_help: str = "model preset (see: presets models)") -> None:
    req.add_argument("--model", required=True, action=Checked, check=preset_name("models"), metavar="M",
                     help=model_help)
    req.add_argument("--gpu", required=True, action=Checked, check=preset_name("hardware"), metavar="G",
                     help="hardware preset (see: presets hardware)")


def band_option(p, *, default: bool) -> None:
    """``--band`` / ``--no-band``: whether headline numbers get their kernel-parameter band (``<key>_lo`` /
    ``<key>_hi``: P10-P90 over 16 draws of the kernel curves, 16 times the work)."""
    p.add_argument("--band", action=argparse.BooleanOptionalAction, default=default,
                   help="add the kernel-curve parameter band [lo-hi] to the headline numbers (P10-P90 over 16 "
                        "draws; 16x the work; none for a runtime without curves) "
                        f"(default: {'on' if default else 'off'})")


def speculative_options(p, *, what: str = "decode") -> None:
    """``--speculative`` (a preset of data/speculative.yaml) and ``--accepted-length`` (the user's mean tokens per
    verify step in place of the preset's): the same pair for every command that decodes."""
    p.add_argument("--speculative", default=None, action=Checked, check=preset_name("speculative"), metavar="NAME",
                   help=f"{what} with this speculative-decoding preset (data/speculative.yaml)")
    p.add_argument("--accepted-length", default=None, action=Checked, check=number_in(0.0, 1e6, lo_open=True),
                   metavar="TAU", help="your mean tokens per verify step for --speculative (default: the preset's)")


def sampler_option(p) -> None:
    """``--sampler``: how each step samples its tokens (``Deployment.sampler``, docs/models.md §1.1b)."""
    from ..models.step.sampler import SAMPLER_INFO, SAMPLERS

    rule = one_of(SAMPLERS)
    what = "; ".join(f"{k}: {SAMPLER_INFO[k]}" for k in SAMPLERS)
    p.add_argument("--sampler", default="fused", action=Checked, check=rule, metavar="S",
                   help=f"how each step samples its tokens, {rule.rule} ({what}) (default: fused)")


def dtype_runtime_options(p) -> None:
    """``--weight-dtype`` (default: the dtype the model's weights are released in), ``--kv-dtype`` and
    ``--runtime``: the same for every command."""
    from ..units import DTYPE_BYTES

    dtypes = one_of(sorted(DTYPE_BYTES))
    p.add_argument("--weight-dtype", default=None, action=Checked, check=dtypes, metavar="DTYPE",
                   help=f"weight dtype, {dtypes.rule} (default: the model's released dtype, see: presets models); "
                        "fp4 (NVFP4) needs a GPU with FP4 tensor cores (fp4_TFLOPS, see: presets hardware)")
    p.add_argument("--kv-dtype", default="bf16", action=Checked, check=dtypes, metavar="DTYPE",
                   help=f"KV-cache dtype, {dtypes.rule} (default: bf16); fp4 is NVFP4, 0.5625 B per element "
                        "with its block scales")
    p.add_argument("--runtime", default="default", action=Checked, check=preset_name("runtime"), metavar="NAME",
                   help="runtime preset (default: default)")

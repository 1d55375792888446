"""Shared validators: one rule each, the same accepted inputs everywhere.

Every public model function and spec checks its inputs through these, so that a rule such as "an integer >= 1"
accepts and rejects the same values wherever it appears:

* integers: ``int`` and numpy integers, and floats with an integral value (``4.0``, as produced by numpy
  grids); never ``bool``, strings (``'8'``), complex numbers, or non-integral floats (``4.5``);
* real numbers: ``int``, ``float`` and numpy reals; never ``bool``, strings or complex numbers; finite unless
  the caller allows infinity;
* arrays: numeric dtypes only (no strings, objects, booleans or complex numbers).

Bounds are checked before any conversion that could overflow or allocate, so a 400-digit integer gets the
same one-line message as any other out-of-range value. Every failure raises
:class:`~llmexplore.errors.SpecError` naming the field, the rule and the value.
"""

from __future__ import annotations

import errno
import math
import numbers
import os
import re
import stat
from typing import Any, Iterable

import numpy as np

from .errors import SpecError

__all__ = ["read_text", "integer", "number", "probability", "choice", "boolean", "text", "real_array", "grid_size", "path_kind", "shown",
           "rule_text", "MAX_GRID_POINTS"]

#: most points one vectorised model call may evaluate (broadcast of all its array arguments): every
#: intermediate array of the call has this many elements at most (32 MB per float array)
MAX_GRID_POINTS = 1 << 22


def _bounded_repr() -> Any:
    import reprlib

    r = reprlib.Repr()
    r.maxlevel, r.maxlist, r.maxtuple, r.maxdict, r.maxset = 3, 6, 6, 4, 6
    r.maxstring, r.maxother, r.maxlong = 200, 200, 1 << 30
    return r


_REPR = _bounded_repr()


def shown(value: Any, limit: int = 60) -> str:
    """A value as it appears in a message: repr, shortened (a 400-digit integer stays readable). Containers are
    shown a few levels and items deep (a YAML alias bomb expands to billions of items: ``repr`` would never end),
    and an integer too long to print names its size."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 14_000:  # > ~4,300 digits
        return f"an integer of about {int(value.bit_length() * 0.30103):,} digits"
    try:
        text = _REPR.repr(value) if isinstance(value, (list, tuple, dict, set, frozenset)) else repr(value)
    except ValueError:  # an integer nested in a container past the digit limit
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 12] + "…" + text[-10:]


def rule_text(kind: str, lo=None, hi=None, *, lo_open: bool = False, hi_open: bool = False, unit: str = "") -> str:
    """``"an integer >= 1"``, ``"a finite number in [0, 1]"``, ... (the sentence after "must be");
    ``kind`` is "integer" or "number"."""
    head = {"integer": "an integer", "number": "a finite number"}[kind]
    def fmt(v):
        if isinstance(v, float):  # 1e+12 -> 1e12, 1e-09 -> 1e-9
            return re.sub(r"e([+-])0*(\d)", lambda m: f"e{'-' if m[1] == '-' else ''}{m[2]}", f"{v:g}")
        return f"{v:,}" if isinstance(v, int) and abs(v) >= 10000 else str(v)
    if lo is not None and hi is not None:
        rng = f"{'(' if lo_open else '['}{fmt(lo)}, {fmt(hi)}{')' if hi_open else ']'}"
        text = f"{head} in {rng}"
    elif lo is not None:
        text = f"{head} {'>' if lo_open else '>='} {fmt(lo)}"
    elif hi is not None:
        text = f"{head} {'<' if hi_open else '<='} {fmt(hi)}"
    else:
        text = head
    return f"{text} [{unit}]" if unit and unit != "-" else text


def _is_real(value: Any) -> bool:
    return (isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))) or isinstance(
        value, (np.integer, np.floating))


def _outside(v, lo, hi, lo_open: bool, hi_open: bool) -> bool:
    if lo is not None and (v < lo or (lo_open and v == lo)):
        return True
    return hi is not None and (v > hi or (hi_open and v == hi))


def integer(name: str, value: Any, *, lo: int | None = None, hi: int | None = None, unit: str = "") -> int:
    """``value`` as a Python int if it is an integer in [lo, hi]; SpecError otherwise."""
    def fail() -> SpecError:
        return SpecError(f"{name} must be {rule_text('integer', lo, hi, unit=unit)}, got {shown(value)}")

    if not _is_real(value):
        raise fail()
    if isinstance(value, (int, np.integer)):
        v = int(value)
    else:
        f = float(value)
        if not math.isfinite(f) or f != math.floor(f):
            raise fail()
        v = int(f)
    if _outside(v, lo, hi, False, False):
        raise fail()
    return v


def number(name: str, value: Any, *, lo: float | None = None, hi: float | None = None, lo_open: bool = False,
           hi_open: bool = False, allow_inf: bool = False, unit: str = "") -> float:
    """``value`` as a float if it is a real number within the bounds (finite unless ``allow_inf``)."""
    def fail() -> SpecError:
        rule = rule_text("number", lo, hi, lo_open=lo_open, hi_open=hi_open, unit=unit)
        if allow_inf:
            rule = rule.replace("a finite number", "a number")
        return SpecError(f"{name} must be {rule}, got {shown(value)}")

    if not _is_real(value):
        raise fail()
    if isinstance(value, (int, np.integer)) and _outside(int(value), lo, hi, lo_open, hi_open):
        raise fail()  # before float(): no OverflowError
    try:
        v = float(value)
    except OverflowError:
        raise fail() from None
    if math.isnan(v) or (math.isinf(v) and not allow_inf):
        raise fail()
    if _outside(v, lo, hi, lo_open, hi_open):
        raise fail()
    return v


def probability(name: str, value: Any, *, open_ends: bool = False) -> float:
    """A probability in [0, 1] ((0, 1) if ``open_ends``) as a float."""
    try:
        return number(name, value, lo=0.0, hi=1.0, lo_open=open_ends, hi_open=open_ends)
    except SpecError:
        rng = "(0, 1)" if open_ends else "[0, 1]"
        raise SpecError(f"{name} must be a probability in {rng}, got {shown(value)}") from None


def choice(name: str, value: Any, options: Iterable[Any]) -> Any:
    """``value`` if it is one of ``options`` (compared by equality, strings exactly); SpecError listing them."""
    if isinstance(value, str) and isinstance(options, (tuple, list, frozenset, set)) and value in options:
        return value  # the common case, without building anything
    opts = list(options)
    try:
        ok = any(type(value) is type(o) and value == o for o in opts) or (
            not isinstance(value, str) and value in [o for o in opts if not isinstance(o, str)])
    except (TypeError, ValueError):  # unhashable, incomparable, or an array (ambiguous truth value)
        ok = False
    if not ok:
        raise SpecError(f"{name} must be one of {opts!r}, got {shown(value)}")
    return value


def boolean(name: str, value: Any) -> bool:
    """``value`` if it is ``True`` or ``False`` (numpy booleans too); never ``"yes"``, ``1`` or ``None``."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise SpecError(f"{name} must be true or false, got {shown(value)}")


def text(name: str, value: Any, *, max_len: int = 200, allow_empty: bool = False) -> str:
    """``value`` if it is a string of at most ``max_len`` printable characters (non-empty unless
    ``allow_empty``): preset names, labels, links."""
    if isinstance(value, str) and len(value) <= max_len and value.isprintable() and (allow_empty or value.strip()):
        return value
    rule = f"{'a' if allow_empty else 'a non-empty'} text of at most {max_len} printable characters"
    raise SpecError(f"{name} must be {rule}, got {shown(value)}")


def path_kind(path: Any) -> str:
    """``"file"``, ``"dir"``, ``"missing"``, ``"other"`` (a device, a pipe), or why the path cannot be looked
    at (``"File name too long"``, ``"Permission denied"``, ``"an invalid path"``); never raises."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return "missing"
        return exc.strerror or "an unreadable path"
    except (ValueError, TypeError):  # an embedded NUL byte, not a path at all
        return "an invalid path"
    return "dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other"


def grid_size(names: str, *shapes: tuple[int, ...], limit: int = MAX_GRID_POINTS, factor: int = 1
              ) -> tuple[int, ...]:
    """The broadcast shape of ``shapes``; SpecError if they do not broadcast or if the grid, times ``factor``
    (e.g. the layers x experts of each point), would exceed ``limit`` points. Checked before allocating."""
    try:
        shape = np.broadcast_shapes(*shapes)
    except ValueError:
        raise SpecError(f"{names} must broadcast against each other, got shapes "
                        f"{', '.join(str(tuple(s)) for s in shapes)}") from None
    points = math.prod(shape) * max(int(factor), 1)
    if points > limit:
        per = f" x {factor:,} per point" if factor > 1 else ""
        raise SpecError(f"{names} must span at most {limit:,} points per call, got shape {tuple(shape)}{per} = "
                        f"{points:,}; split the grid")
    return shape


def real_array(name: str, value: Any, *, lo: float | None = None, hi: float | None = None, lo_open: bool = False,
               integer: bool = False, unit: str = "", allow_empty: bool = False, allow_inf: bool = False,
               max_size: int = 1 << 26, rule: str | None = None) -> np.ndarray:
    """``value`` as a float ndarray whose every element is finite (an integer if ``integer``) within bounds.

    Each element must satisfy the scalar rule ("an integer >= 1", ...); ``allow_inf`` admits +-inf (never
    NaN) where the bounds allow it. Strings, objects, booleans and complex
    numbers are rejected, as are arrays of more than ``max_size`` elements; the message shows the first
    offending element. ``rule`` replaces the generated rule text in messages (e.g. "a probability in [0, 1]").
    """
    if type(value) is float or (type(value) is int and -(2**53) <= value <= 2**53):  # fast path: a plain scalar
        f = float(value)
        ok = (f == f) and (allow_inf or math.isfinite(f)) and (not integer or f.is_integer() or math.isinf(f))
        ok = ok and (lo is None or (f > lo if lo_open else f >= lo)) and (hi is None or f <= hi)
        if ok:
            return np.asarray(f)

    def fail(got) -> SpecError:  # the rule text is only built when a value breaks it
        text = rule
        if text is None:
            text = rule_text("integer" if integer else "number", lo, hi, lo_open=lo_open, unit=unit)
            if allow_inf:
                text = text.replace("a finite number", "a number")
        return SpecError(f"{name} must be {text}, got {shown(got)}")

    if isinstance(value, (str, bytes)) or (not isinstance(value, (np.ndarray, list, tuple)) and not _is_real(value)):
        raise fail(value)
    try:
        raw = np.asarray(value)
    except (ValueError, TypeError, OverflowError):
        raise fail(value) from None
    if raw.dtype.kind not in "iuf":
        if raw.dtype.kind == "O":  # e.g. a huge Python int, or mixed types
            bad = next((v for v in raw.ravel() if not _is_real(v)), None)
            if bad is None:
                bad = next((v for v in raw.ravel() if _outside(v, lo, hi, lo_open, False)), raw.ravel()[0])
            raise fail(bad)
        first = raw.ravel()[0] if raw.size else value
        raise fail(first)
    if raw.size > max_size:
        raise SpecError(f"{name} must have at most {max_size:,} elements, got {raw.size:,}")
    if raw.size == 0 and not allow_empty:
        raise SpecError(f"{name} must not be empty")
    a = raw.astype(float, copy=False)
    bad = np.isnan(a) if allow_inf else ~np.isfinite(a)
    if integer:
        bad |= np.isfinite(a) & (a != np.floor(a))
    if bad.any():
        raise fail(raw[bad].ravel()[0])
    out = np.zeros(a.shape, dtype=bool)
    if lo is not None:
        out |= (a < lo) | ((a == lo) if lo_open else False)
    if hi is not None:
        out |= a > hi
    if out.any():
        raise fail(raw[out].ravel()[0])
    return a


def read_text(path, where: str, max_bytes: int) -> str:
    """The text of a user file: UTF-8 (a byte-order mark is accepted), at most ``max_bytes`` (read no further,
    so a special file such as /dev/zero cannot hang or exhaust memory). SpecError naming ``where`` otherwise."""
    limit = f"{max_bytes:,} bytes" + (f" ({max_bytes / 2**20:g} MiB)" if max_bytes >= 2**20 else "")
    try:
        with open(path, "rb") as fh:
            raw = fh.read(max_bytes + 1)
    except OSError as exc:
        raise SpecError(f"{where} cannot be read: {exc.strerror or exc}") from None
    if len(raw) > max_bytes:
        try:
            size = f"{os.stat(path).st_size:,} bytes"
        except OSError:
            size = "more"
        raise SpecError(f"{where} must be at most {limit}, got {size if size != '0 bytes' else 'more'}")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise SpecError(f"{where} must be UTF-8 text, got byte 0x{raw[exc.start]:02x} on line {line} "
                        f"(offset {exc.start}); save it as UTF-8") from None


def json_text(name: str, text: str) -> Any:
    """``text`` parsed as JSON; SpecError naming ``name`` for text that is not JSON, that nests deeper than the
    parser's recursion allows, or that holds an integer too long to convert (Python's 4,300-digit limit),
    instead of the parser's own traceback."""
    import json

    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(f"{name} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise SpecError(f"{name} nests its JSON arrays or objects too deeply to read (a configuration needs three "
                        f"levels)") from None
    except ValueError as exc:  # int() of more than sys.get_int_max_str_digits() digits
        raise SpecError(f"{name} holds a number too long to read ({str(exc).split(':')[0]})") from None


def user_path(name: str, value) -> "os.PathLike":
    """``value`` as a ``pathlib.Path`` with ``~`` / ``~user`` expanded; SpecError naming ``name`` when the home
    directory cannot be found (``~nouser/x.csv``), instead of pathlib's RuntimeError."""
    from pathlib import Path

    try:
        return Path(value).expanduser()
    except RuntimeError:
        raise SpecError(f"{name} must be a path whose ~ can be expanded, got {shown(str(value))} (no such user or "
                        f"home directory)") from None

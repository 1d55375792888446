"""The machinery every spec of :mod:`llmexplore.specs` shares: field metadata (unit, help text, bounds), the
bounds themselves, validation of every field against its metadata, frozen sources, and construction from a
preset mapping that rejects unknown and missing keys (:class:`Spec`)."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Any, Mapping

from . import _check
from .errors import SpecError

def meta(unit: str = "", help: str = "", *, min: float | None = None, max: float | None = None,
          integer: bool = False, optional: bool = False, open_min: bool = False) -> dict:
    """Field metadata: unit, help, and the rule [min, max] (``open_min``: (min, max]), integral or not."""
    return {"unit": unit, "help": help, "min": min, "max": max, "integer": integer, "optional": optional,
            "open_min": open_min}


#: upper bounds of the size fields: far beyond any real model or accelerator, small enough that nothing derived
#: from them allocates or overflows (an MoE step holds arrays of layers x experts)
MAX_LAYERS = 1024
MAX_WIDTH = 1 << 20  # hidden size, heads, head dims, latent ranks
MAX_FFN = 1 << 22  # FFN and expert intermediate sizes
MAX_VOCAB = 1 << 24
MAX_EXPERTS = 16384
#: bounds of the device and link numbers: generous, so that what-if studies ("a free link", "unlimited memory")
#: can still be expressed, but finite
MAX_GIB = 1e9  # memory [GiB]
MIN_POSITIVE = 1e-6  # smallest memory, bandwidth, peak compute and efficiency: > 0, and far from underflow
MAX_RATE = 1e12  # bandwidths [TB/s, GB/s], peak compute [TFLOP/s], latencies and overheads [us, ms]


def numeric_fields(cls) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(cls) if "unit" in f.metadata]


def check_numbers(obj) -> None:
    """Validate every numeric field against its metadata (type, integrality, bounds) with :mod:`._check`,
    every boolean field (``true``/``false`` only) and every text field; store the checked values."""
    kind = type(obj).__name__
    where = f"{kind} {_check.shown(obj.name)}"
    _check.text(f"{kind} name", obj.name)
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if "unit" in f.metadata:
            m = f.metadata
            if m["integer"]:
                value = _check.integer(f"{where}: {f.name}", value, lo=m["min"], hi=m["max"], unit=m["unit"])
            else:
                checked = _check.number(f"{where}: {f.name}", value, lo=m["min"], hi=m["max"],
                                        lo_open=m["open_min"], unit=m["unit"])
                value = value if type(value) in (int, float) else checked  # numpy scalars become floats
            object.__setattr__(obj, f.name, value)
        elif f.type in ("bool", bool):
            object.__setattr__(obj, f.name, _check.boolean(f"{where}: {f.name}", value))
        elif f.type in ("str", str) and f.name != "name":
            _check.text(f"{where}: {f.name}", value, allow_empty=True)


def freeze_sources(obj) -> None:
    src = obj.sources
    where = f"{type(obj).__name__} {_check.shown(obj.name)}: sources"
    if not isinstance(src, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in src.items()):
        raise SpecError(f"{where} must be a mapping field -> text, got {_check.shown(src)}")
    object.__setattr__(obj, "sources", MappingProxyType(dict(src)))


class Spec:
    """Shared behaviour: construction from a dict with unknown keys rejected, and source lookup."""

    name: str
    sources: Mapping[str, str]

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]):
        """Build from a preset mapping. Unknown keys are rejected with the list of allowed ones."""
        if not isinstance(d, Mapping):
            raise SpecError(f"a {cls.__name__} preset must be a mapping, got {type(d).__name__}")
        allowed = set(cls.field_names())
        unknown = sorted(map(str, set(d) - allowed))
        if unknown:
            raise SpecError(f"{cls.__name__} {d.get('name', '?')!r}: unknown keys {unknown}; "
                            f"allowed keys are {sorted(allowed)}")
        missing = [f.name for f in dataclasses.fields(cls)
                   if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
                   and f.name not in d]
        if missing:
            raise SpecError(f"{cls.__name__} {d.get('name', '?')!r}: missing required keys {missing}")
        return cls(**dict(d))

    def source_of(self, field_name: str) -> str:
        """Where the value of ``field_name`` comes from ('' if no source is recorded)."""
        return self.sources.get(field_name) or self.sources.get("*", "")

    def unsourced_fields(self) -> list[str]:
        """Numeric fields that are set (non-default or required) but carry no source or assumption note."""
        out = []
        for f in numeric_fields(type(self)):
            if f.metadata.get("optional") and getattr(self, f.name) == f.default:
                continue
            if not self.source_of(f.name).strip():
                out.append(f.name)
        return out

    def replace(self, **changes):
        """A copy with some fields changed (re-validated)."""
        return dataclasses.replace(self, **changes)

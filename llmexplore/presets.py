"""Presets: YAML files under ``data/`` turned into validated, frozen specs.

Built-in files: ``data/models.yaml``, ``data/hardware.yaml``, ``data/links.yaml``, ``data/runtime.yaml``.
Users add or override entries with their own YAML file, whose top level has any of the sections
``models``, ``hardware``, ``links``, ``runtime``::

    models:
      my-model:
        attention: gqa
        ...
        sources: {"*": "my config.json"}

Register it with :func:`add_file` or list files in the environment variable ``LLMEXPLORE_PRESETS``
(separated by ``os.pathsep``). A user entry with a built-in name replaces the built-in one.
Nothing is read at import time; tables are cached until :func:`clear_cache`.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import yaml

from .errors import SpecError, UnknownPresetError
from .specs import Hardware, Link, ModelSpec, Runtime

__all__ = ["DATA_DIR", "KINDS", "model", "hardware", "link", "runtime", "names", "table", "add_file",
           "clear_cache", "resolve"]

DATA_DIR = Path(os.environ.get("LLMEXPLORE_DATA", Path(__file__).resolve().parents[1] / "data"))

#: section name -> (built-in file stem, spec class)
KINDS: dict[str, tuple[str, type]] = {
    "models": ("models", ModelSpec),
    "hardware": ("hardware", Hardware),
    "links": ("links", Link),
    "runtime": ("runtime", Runtime),
}

_user_files: list[Path] = []


def add_file(path: str | os.PathLike) -> None:
    """Register a user preset file (YAML with sections ``models``/``hardware``/``links``/``runtime``)."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise SpecError(f"preset file {str(p)!r} does not exist")
    if p not in _user_files:
        _user_files.append(p)
    clear_cache()


def clear_cache() -> None:
    """Forget loaded tables (after editing a YAML file or registering a new one)."""
    _load_kind.cache_clear()


def _env_files() -> list[Path]:
    raw = os.environ.get("LLMEXPLORE_PRESETS", "")
    files = [Path(p).expanduser() for p in raw.split(os.pathsep) if p.strip()]
    for p in files:
        if not p.is_file():
            raise SpecError(f"LLMEXPLORE_PRESETS names {str(p)!r}, which does not exist")
    return files


def _read_yaml(path: Path) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh) or {}
    except yaml.YAMLError as exc:
        raise SpecError(f"preset file {str(path)!r} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise SpecError(f"preset file {str(path)!r} must hold a mapping at top level")
    return data


@functools.cache
def _load_kind(kind: str, env: str) -> dict[str, Any]:
    stem, cls = KINDS[kind]
    entries: dict[str, tuple[dict, str]] = {}
    builtin = DATA_DIR / f"{stem}.yaml"
    for name, row in _read_yaml(builtin).items():
        entries[str(name)] = (row, str(builtin))
    for path in [*_env_files(), *_user_files]:
        data = _read_yaml(path)
        unknown = sorted(set(data) - set(KINDS))
        if unknown:
            raise SpecError(f"preset file {str(path)!r}: unknown sections {unknown}; allowed: {sorted(KINDS)}")
        for name, row in (data.get(kind) or {}).items():
            entries[str(name)] = (row, str(path))
    specs = {}
    for name, (row, origin) in entries.items():
        if not isinstance(row, dict):
            raise SpecError(f"{origin}: {kind} entry {name!r} must be a mapping")
        try:
            specs[name] = cls.from_dict({"name": name, **row})
        except SpecError as exc:
            raise SpecError(f"{origin}: {exc}") from None
        except TypeError as exc:  # wrong value types that dataclasses reject
            raise SpecError(f"{origin}: {kind} entry {name!r}: {exc}") from None
    return specs


def table(kind: str) -> dict[str, Any]:
    """All specs of one kind, by name: ``table("models")["llama-3-70b"]``."""
    if kind not in KINDS:
        raise UnknownPresetError(f"no preset kind {kind!r}; known: {', '.join(KINDS)}")
    return _load_kind(kind, os.environ.get("LLMEXPLORE_PRESETS", ""))


def names(kind: str) -> list[str]:
    """Preset names of one kind, in file order."""
    return list(table(kind))


def _get(kind: str, name: str, field: str):
    tab = table(kind)
    try:
        return tab[name]
    except (KeyError, TypeError):
        raise UnknownPresetError(f"{field}: no {kind} preset {name!r}; known: {', '.join(tab)}") from None


def model(name: str) -> ModelSpec:
    """The model preset ``name`` (e.g. ``"llama-3-70b"``)."""
    return _get("models", name, "model")


def hardware(name: str) -> Hardware:
    """The accelerator preset ``name`` (e.g. ``"h100-sxm"``)."""
    return _get("hardware", name, "gpu")


def link(name: str) -> Link:
    """The interconnect preset ``name`` (e.g. ``"nvlink4"``)."""
    return _get("links", name, "link")


def runtime(name: str = "default") -> Runtime:
    """The runtime-efficiency preset ``name`` (``"default"`` unless calibrated)."""
    return _get("runtime", name, "runtime")


def resolve(kind: str, value):
    """Accept either a spec instance or a preset name."""
    _, cls = KINDS[kind]
    if isinstance(value, cls):
        return value
    return _get(kind, value, {"models": "model", "hardware": "gpu", "links": "link", "runtime": "runtime"}[kind])

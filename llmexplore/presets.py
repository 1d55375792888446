"""Presets: YAML files under ``data/`` turned into validated, frozen specs.

Built-in files: ``data/models.yaml``, ``data/hardware.yaml``, ``data/links.yaml``, ``data/runtime.yaml``,
``data/storage.yaml``, ``data/targets.yaml``, ``data/speculative.yaml``, ``data/prices.yaml``,
``data/power.yaml``.
Users add or override entries with their own YAML file, whose top level has any of the sections
``models``, ``hardware``, ``links``, ``runtime``, ``storage``, ``targets``, ``speculative``, ``prices``,
``power``::

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

from . import _check
from ._check import path_kind, read_text, shown
from .errors import SpecError, UnknownPresetError
from .specs import GpuPower, Hardware, Link, ModelSpec, PriceTier, Runtime, SpecDecode, StorageTier, Targets

__all__ = ["DATA_DIR", "KINDS", "model", "hardware", "link", "runtime", "storage", "target", "speculative",
           "price_tier", "power", "names",
           "table",
           "add_file", "clear_cache", "resolve"]

DATA_DIR = Path(os.environ.get("LLMEXPLORE_DATA", Path(__file__).resolve().parents[1] / "data"))

#: section name -> (built-in file stem, spec class)
KINDS: dict[str, tuple[str, type]] = {
    "models": ("models", ModelSpec),
    "hardware": ("hardware", Hardware),
    "links": ("links", Link),
    "runtime": ("runtime", Runtime),
    "storage": ("storage", StorageTier),
    "targets": ("targets", Targets),
    "speculative": ("speculative", SpecDecode),
    "prices": ("prices", PriceTier),
    "power": ("power", GpuPower),
}
#: kind -> the word that names a preset of it in messages ("gpu: no hardware preset ...")
_FIELDS = {"models": "model", "hardware": "gpu", "links": "link", "runtime": "runtime", "storage": "storage",
           "targets": "target", "speculative": "speculative",
           "prices": "price_tier", "power": "gpu"}

_user_files: list[Path] = []


def add_file(path: str | os.PathLike) -> None:
    """Register a user preset file (YAML with sections ``models``/``hardware``/``links``/``runtime``/``storage``/
    ``targets``/``speculative``/``prices``/``power``)."""
    p = _check.user_path("preset file", path)
    kind = path_kind(p)
    if kind != "file":
        raise SpecError(f"preset file {str(p)!r} does not exist" if kind == "missing" else
                        f"preset file {str(p)!r} must be a readable file, got {kind}")
    if p not in _user_files:
        _user_files.append(p)
    clear_cache()


def clear_cache() -> None:
    """Forget loaded tables (after editing a YAML file or registering a new one)."""
    _load_kind.cache_clear()
    _parsed.cache_clear()


def _env_files() -> list[Path]:
    raw = os.environ.get("LLMEXPLORE_PRESETS", "")
    files = [_check.user_path("LLMEXPLORE_PRESETS", p) for p in raw.split(os.pathsep) if p.strip()]
    for p in files:
        kind = path_kind(p)
        if kind != "file":
            raise SpecError(f"LLMEXPLORE_PRESETS names {str(p)!r}, which does not exist" if kind == "missing" else
                            f"LLMEXPLORE_PRESETS must name readable files, got {str(p)!r} ({kind})")
    return files


#: largest preset file read [B]: a preset file holds a few dozen entries (the built-in ones are < 40 kB)
MAX_PRESET_BYTES = 1 << 20

_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C loader (libyaml) where available


class _PresetLoader(_BaseLoader):
    """Safe YAML loader that rejects a key given twice in one mapping (PyYAML would keep the last silently)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:
                    continue  # an unhashable key: the base constructor reports it
                if first is not None:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r} (first given on line {first}); give each key once",
                        key_node.start_mark)
                seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """One line: what is wrong and where (line, column) in a YAML error."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        return f"{exc.problem or exc.context}{where}"
    return " ".join(str(exc).split())


def _read_yaml(path: Path) -> dict:
    """The mapping at the top of a preset file: UTF-8 (a BOM is accepted), at most MAX_PRESET_BYTES, no key
    given twice; SpecError naming the file otherwise."""
    where = f"preset file {str(path)!r}"
    text = read_text(path, where, MAX_PRESET_BYTES)
    try:
        data = yaml.load(text, Loader=_PresetLoader)
    except yaml.YAMLError as exc:
        raise SpecError(f"{where} is not valid YAML: {_yaml_problem(exc)}") from None
    except RecursionError:  # the pure-Python loader on deeply nested input (libyaml stops at depth 1000)
        raise SpecError(f"{where} is not valid YAML: nested too deeply") from None
    except ValueError as exc:  # an integer of more than sys.get_int_max_str_digits() digits (4,300)
        raise SpecError(f"{where} holds a number too long to read ({str(exc).split(';')[0]}); write it with "
                        "at most 4,300 digits") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SpecError(f"{where} must hold a mapping at top level, got {type(data).__name__}")
    return data


@functools.lru_cache(maxsize=16)
def _parsed(path: Path, stamp: tuple[int, int]) -> dict:
    """:func:`_read_yaml`, once per file version (``stamp``: modification time and size) for all kinds."""
    return _read_yaml(path)


def data_file(rel: str) -> tuple[str, float]:
    """(path, modification time) of a file under DATA_DIR: the pair a table reader caches on, so that an edited
    table is read again. The time is 0 if the file cannot be read (the reader then names the error)."""
    path = Path(DATA_DIR) / rel
    try:
        return str(path), path.stat().st_mtime
    except OSError:
        return str(path), 0.0


def _read_cached(path: Path) -> dict:
    try:
        st = path.stat()
    except OSError as exc:
        raise SpecError(f"preset file {str(path)!r} cannot be read: {exc.strerror or exc}") from None
    return _parsed(path, (st.st_mtime_ns, st.st_size))


def _section(data: dict, key: str, where: str) -> dict:
    """``data[key]`` (an empty mapping if absent or empty); SpecError unless it is a mapping name -> entry."""
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SpecError(f"{where}: section {key!r} must be a mapping of preset name -> fields, got {shown(value)}")
    return value


@functools.cache
def _load_kind(kind: str, env: str) -> dict[str, Any]:
    stem, cls = KINDS[kind]
    entries: dict[str, tuple[dict, str]] = {}
    builtin = DATA_DIR / f"{stem}.yaml"
    for name, row in _read_cached(builtin).items():
        entries[str(name)] = (row, str(builtin))
    for path in [*_env_files(), *_user_files]:
        data = _read_cached(path)
        unknown = sorted(map(str, set(data) - set(KINDS)))
        if unknown:
            raise SpecError(f"preset file {str(path)!r}: unknown sections {unknown}; allowed: {sorted(KINDS)}")
        for name, row in _section(data, kind, str(path)).items():
            entries[str(name)] = (row, str(path))
    specs = {}
    for name, (row, origin) in entries.items():
        if not isinstance(row, dict):
            raise SpecError(f"{origin}: {kind} entry {name!r} must be a mapping of field -> value")
        try:
            specs[name] = cls.from_dict({**row, "name": name})
        except SpecError as exc:
            raise SpecError(f"{origin}: {exc}") from None
    if kind == "hardware":  # its links must exist: said of the entry and file that name them
        links = _load_kind("links", env)
        for name, hw in specs.items():
            for f in ("scale_up_link", "scale_out_link"):
                value = getattr(hw, f)
                if value and value not in links:
                    raise SpecError(f"{entries[name][1]}: Hardware {name!r}: {f} must name a links preset, got "
                                    f"{value!r}; known: {', '.join(links)}")
    if kind in ("prices", "power"):  # the GPUs they price or power must exist: said of the entry and file
        gpus = _load_kind("hardware", env)
        for name, spec in specs.items():
            named = list(spec.prices) if kind == "prices" else [name]
            bad = [g for g in named if g not in gpus]
            if bad:
                what = f"PriceTier {name!r}: prices" if kind == "prices" else f"GpuPower {name!r}"
                raise SpecError(f"{entries[name][1]}: {what} must name hardware presets, got {bad[0]!r}; known: "
                                f"{', '.join(gpus)}")
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
    if not isinstance(name, str):
        raise SpecError(f"{field} must be a {kind} preset name (text) or a {KINDS[kind][1].__name__}, "
                        f"got {shown(name)}")
    tab = table(kind)
    try:
        return tab[name]
    except KeyError:
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


def storage(name: str) -> StorageTier:
    """A storage tier preset (``data/storage.yaml`` or a user file's ``storage`` section)."""
    return _get("storage", name, "storage")


def target(name: str) -> Targets:
    """A latency-target preset (``data/targets.yaml`` or a user file's ``targets`` section), e.g.
    ``"mlperf-llama-2-70b-server"``: TTFT and TPOT targets [ms] and the statistic they bound."""
    return _get("targets", name, "target")


def speculative(name: str) -> SpecDecode:
    """A speculative-decoding preset (``data/speculative.yaml`` or a user file's ``speculative`` section): the
    draft method, its length and the acceptance measured under stated conditions, e.g. ``"deepseek-mtp-1"``."""
    return _get("speculative", name, "speculative")


def price_tier(name: str) -> PriceTier:
    """A price tier (``data/prices.yaml`` or a user file's ``prices`` section): USD per GPU-hour per GPU, each
    with its date and source, e.g. ``"neocloud-on-demand"``."""
    return _get("prices", name, "price_tier")


def power(gpu: str) -> GpuPower:
    """The power preset of a GPU (``data/power.yaml`` or a user file's ``power`` section, keyed by hardware
    preset): board power limit, idle and memory-bound power, host and network share, PUE."""
    return _get("power", gpu, "gpu")


KERNEL_FILE = DATA_DIR / "kernel_efficiency.yaml"
#: GPUs without kernel measurements that borrow another GPU's curves (same tensor cores and memory type)
KERNEL_GPU_FALLBACK = {"gb200": "b200"}
_CURVE_FIELDS = ("eta_compute", "eta_mem", "overhead_us", "knee", "tile_m", "points", "median_err_pct",
                 "p90_err_pct", "cov_u", "from_engine", "eta_mem2", "overhead2_us")


@functools.cache
def _kernel_sets(path: str) -> dict:
    data = _read_cached(Path(path))
    if not isinstance(data, dict):
        raise SpecError(f"kernel-efficiency file {path!r} must map engine -> GPU -> curve")
    return data


def kernel_engines() -> list[str]:
    """Engines with fitted kernel curves in ``data/kernel_efficiency.yaml`` (``any`` pools them)."""
    return [str(e) for e in _kernel_sets(str(KERNEL_FILE)) if e != "rejected"]


def kernel_curves(engine: str, gpu: str) -> tuple[str, dict[str, dict]] | None:
    """(GPU the curves were measured on, {curve key: fields}) of an engine's fitted kernel curves on a GPU
    preset, borrowing per :data:`KERNEL_GPU_FALLBACK`; None when there are none (the runtime's scalar
    efficiencies apply). Every curve's fields are checked here (SpecError naming engine, GPU and key)."""
    sets = {k: v for k, v in _kernel_sets(str(KERNEL_FILE)).items() if k != "rejected"}
    if engine not in sets:
        raise SpecError(f"runtime kernel_set must be one of {sorted(map(str, sets))} (data/kernel_efficiency.yaml), "
                        f"got {engine!r}")
    per_gpu = sets[engine] or {}
    src = gpu if gpu in per_gpu else KERNEL_GPU_FALLBACK.get(gpu)
    if src is None or src not in per_gpu:
        return None
    # an engine's curves over the engine-neutral ones: a curve the engine lacks (no rows, or rejected as not
    # its production kernel) is the neutral one
    merged = {**((sets.get("any") or {}).get(src) or {}), **(per_gpu[src] or {})}
    out = {}
    for key, row in merged.items():
        where = f"data/kernel_efficiency.yaml {engine}/{src}/{key}"
        if not isinstance(row, dict) or set(row) - set(_CURVE_FIELDS) or not {"eta_compute", "eta_mem",
                                                                              "overhead_us", "knee"} <= set(row):
            raise SpecError(f"{where}: a curve needs eta_compute, eta_mem, overhead_us, knee (optional "
                            f"{', '.join(_CURVE_FIELDS[4:])}), got {shown(row)}")
        out[str(key)] = dict(row)
    return src, out


def resolve(kind: str, value):
    """Accept either a spec instance or a preset name."""
    _, cls = KINDS[kind]
    if isinstance(value, cls):
        return value
    return _get(kind, value, _FIELDS[kind])

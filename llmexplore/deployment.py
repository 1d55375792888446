"""The deployment configuration: one typed, validated value from the planner to the simulator and the launch lines.

A :class:`DeploymentConfig` is what ``llmexplore plan`` recommends and what ``llmexplore simulate --config``,
:func:`llmexplore.launch.launch_commands` and :func:`llmexplore.sweeps.plan.simulate_config` take: the model, the
GPU, the serving mode, the dtypes, the KV link of a disaggregated deployment, and one :class:`SideConfig` per
role (colocated, or prefill and decode). Its JSON (:meth:`DeploymentConfig.to_json`) is the ``config`` object of
``plan --json``, so a saved plan loads again (:meth:`DeploymentConfig.from_json`)::

    {"model": "qwen3-32b", "gpu": "h200", "mode": "colocated", "weight_dtype": "fp8", "kv_dtype": "fp8",
     "link": null,
     "sides": [{"role": "colocated", "instances": 4, "ranks": 8, "pp": 1, "layout": "TP", "ep": 1,
                "max_num_seqs": 64, "chunk_tokens": 2048, "moe_dispatch": "gather", "speculative": null}]}

A side may leave out ``layout`` (TP), ``pp`` (1: no pipeline), ``speculative`` (null), ``ep`` (all of its ranks for an MoE model, 1 for a dense one),
``chunk_tokens`` (None, or 0 as older configurations wrote it: whole prompts, or the simulator's default
budget, 2,048) and ``moe_dispatch`` (the configuration's, else "gather"); with
``complete=True`` (the launch lines, which must not guess) every side field is required. Bad input is one
SpecError naming the field as ``config['sides'][i]['ranks']``, the value and the rule.

The vocabularies and limits every part of the package shares are defined here once: :data:`MODES`, :data:`ROLES`,
:data:`LAYOUTS` (the attention layouts a deployment is planned and launched with; the models price CP too) and
the bounds of a side.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from . import _check, presets
from .errors import SpecError, UnknownPresetError
from .units import DTYPE_BYTES

__all__ = ["MODES", "ROLES", "LAYOUTS", "MOE_DISPATCH", "MAX_INSTANCES", "MAX_RANKS", "MAX_GPUS", "MAX_SEQS",
           "MAX_TOKENS", "MAX_STAGES", "SideConfig", "DeploymentConfig", "check_pp"]

MODES = ("colocated", "disaggregated")
ROLES = ("colocated", "prefill", "decode")
LAYOUTS = ("TP", "DPA", "DOP")  # planned and launched layouts (context parallelism is priced, not planned)
MOE_DISPATCH = ("gather", "alltoall")
MAX_INSTANCES = 1 << 16  # instances of one role
MAX_RANKS = 1024         # GPUs of one instance (the largest attention group the models price)
MAX_GPUS = 4096          # GPUs of one deployment (a plan's budget, an MoE model's expert-parallel group)
MAX_SEQS = 1 << 24       # running requests of one instance
MAX_TOKENS = 1 << 30     # chunked-prefill token budget
MAX_STAGES = 128         # pipeline stages of one instance (engines run 2-16)
_SIDE_FIELDS = ("role", "instances", "ranks", "pp", "layout", "ep", "max_num_seqs", "chunk_tokens", "moe_dispatch",
                "speculative", "gpu", "max_prompt_tokens")
_REQUIRED = ("model", "gpu", "mode", "weight_dtype", "kv_dtype", "sides")


@dataclass(frozen=True)
class SideConfig:
    """One role of a deployment: ``instances`` copies of an instance of ``ranks`` GPUs with attention
    ``layout``, expert-parallel size ``ep``, at most ``max_num_seqs`` running requests and a chunked-prefill
    budget of ``chunk_tokens`` (None: whole prompts); ``moe_dispatch`` "gather" or "alltoall" (DeepEP);
    ``speculative`` the speculative decoding its decode steps run (a :class:`~llmexplore.specs.SpecDecode`,
    written in JSON as its fields; None: plain decoding; a prefill side never has one). ``pp`` > 1: each instance
    is a pipeline of ``pp`` stages of ``ranks`` GPUs (TP layout), ``ranks x pp`` GPUs in all. ``gpu``: the side's
    GPU type where it differs from the configuration's (a disaggregated mix of types; None: the configuration's).
    ``max_prompt_tokens``: in a colocated configuration of two pools routed by length, the first pool takes the
    prompts of up to this many tokens and the second the longer ones (None: no routing)."""

    role: str
    instances: int
    ranks: int
    layout: str = "TP"
    pp: int = 1
    ep: int = 1
    max_num_seqs: int = 1
    chunk_tokens: int | None = None
    moe_dispatch: str = "gather"
    speculative: Any = None
    gpu: str | None = None
    max_prompt_tokens: int | None = None

    def to_json(self) -> dict:
        out = {f: getattr(self, f) for f in _SIDE_FIELDS
               if f not in ("gpu", "max_prompt_tokens") or getattr(self, f) is not None}
        out["speculative"] = None if self.speculative is None else self.speculative.to_json()
        return out


@dataclass(frozen=True)
class DeploymentConfig:
    """A deployment as the planner recommends it (module docstring). Build it with :meth:`from_json` (or
    directly: the fields are validated either way); ``to_json`` gives the plain-data form."""

    model: str
    gpu: str
    mode: str
    weight_dtype: str
    kv_dtype: str
    sides: tuple
    link: str | None = None
    #: a configuration-wide dispatch, as older configurations and the launch lines name it (None: not given)
    moe_dispatch: str | None = None

    def __post_init__(self) -> None:
        checked = _checked(self.to_json(), complete=False)
        for f in fields(self):
            object.__setattr__(self, f.name, getattr(checked, f.name))

    # ---- conversions ----------------------------------------------------------------------------------------
    @classmethod
    def from_json(cls, doc: Any, *, complete: bool = False) -> "DeploymentConfig":
        """A configuration from its JSON object (a mapping, JSON text, or a :class:`DeploymentConfig`);
        ``complete``: every side field must be given (no defaults)."""
        if isinstance(doc, DeploymentConfig):
            return doc
        if isinstance(doc, str):
            doc = _check.json_text("config", doc)
        return _checked(doc, complete=complete)

    def to_json(self) -> dict:
        """The configuration as plain data: the ``config`` object of ``plan --json``."""
        out = {"model": self.model, "gpu": self.gpu, "mode": self.mode, "weight_dtype": self.weight_dtype,
               "kv_dtype": self.kv_dtype, "link": self.link,
               "sides": [s.to_json() if isinstance(s, SideConfig) else s for s in self.sides]}
        if self.moe_dispatch is not None:
            out["moe_dispatch"] = self.moe_dispatch
        return out

    def side(self, role: str) -> SideConfig:
        """The side of ``role``; SpecError naming the roles there are."""
        for s in self.sides:
            if s.role == role:
                return s
        raise SpecError(f"config has no side with role {role!r} (its sides: {[s.role for s in self.sides]})")

    @property
    def gpus(self) -> int:
        """GPUs of the whole deployment."""
        return sum(s.instances * s.ranks * s.pp for s in self.sides)


def check_pp(model, pp, ranks: int = 1, *, field: str = "pp", ranks_field: str = "ranks") -> int:
    """``pp`` (pipeline stages) as an int, or SpecError naming ``field``: an integer in [1, MAX_STAGES], at most the
    layers of ``model`` (a ModelSpec: every stage holds at least one layer), and ``pp x ranks`` within the largest
    instance the models price (MAX_RANKS GPUs)."""
    p = _check.integer(field, pp, lo=1, hi=MAX_STAGES)
    if p > model.layers:
        raise SpecError(f"{field} ({p}) must be at most the layers of {model.name} ({model.layers}): every pipeline "
                        "stage holds at least one layer")
    if p * ranks > MAX_RANKS:
        raise SpecError(f"{field} x {ranks_field} ({p} x {ranks} = {p * ranks}) must be at most {MAX_RANKS} GPUs per "
                        "instance")
    return p


def _field(doc: dict, name: str, where: str):
    if name not in doc:
        raise SpecError(f"{where} has no {name!r}; give it (a configuration from `llmexplore plan --json` has it)")
    return doc[name]


def _side(doc: Any, i: int, *, model, dispatch: str, complete: bool) -> SideConfig:
    where = f"config['sides'][{i}]"
    if isinstance(doc, SideConfig):
        doc = doc.to_json()
    if not isinstance(doc, dict):
        raise SpecError(f"{where} must be a mapping, got {type(doc).__name__}")

    def get(name, default):
        return _field(doc, name, where) if complete else doc.get(name, default)

    moe = model.is_moe
    role = _check.choice(f"{where}['role']", _field(doc, "role", where), ROLES)
    instances = _check.integer(f"{where}['instances']", _field(doc, "instances", where), lo=1, hi=MAX_INSTANCES)
    ranks = _check.integer(f"{where}['ranks']", _field(doc, "ranks", where), lo=1, hi=MAX_RANKS)
    layout = _check.choice(f"{where}['layout']", get("layout", "TP"), LAYOUTS)
    # older configurations have no pipeline: 1
    pp = check_pp(model, doc.get("pp", 1), ranks, field=f"{where}['pp']", ranks_field=f"{where}['ranks']")
    if pp > 1 and layout != "TP":
        raise SpecError(f"{where}['pp'] ({pp}) needs layout 'TP' (pipeline stages are tensor parallel), got {layout!r}")
    ep = get("ep", None)
    ep = (ranks if moe else 1) if ep is None else _check.integer(f"{where}['ep']", ep, lo=1, hi=MAX_RANKS)
    if not moe and ep != 1:
        raise SpecError(f"{where}['ep'] must be 1 for a dense model, got {ep}")
    if ranks % ep:
        raise SpecError(f"{where}['ep'] ({ep}) must divide {where}['ranks'] ({ranks})")
    seqs = _check.integer(f"{where}['max_num_seqs']", _field(doc, "max_num_seqs", where), lo=1, hi=MAX_SEQS)
    chunk = get("chunk_tokens", None)
    # a 0 is what older configurations wrote for "not given", and `simulate --config` reads it so; the launch
    # lines (complete) need a budget or None
    chunk = None if chunk is None else _check.integer(f"{where}['chunk_tokens']", chunk, lo=0 if not complete else 1,
                                                      hi=MAX_TOKENS)
    side_dispatch = _check.choice(f"{where}['moe_dispatch']", doc.get("moe_dispatch", dispatch), MOE_DISPATCH)
    spec = _speculative(doc.get("speculative"), f"{where}['speculative']", role, model)
    if spec is not None and pp > 1:
        raise SpecError(f"{where}['speculative'] must be null with {where}['pp'] > 1 (speculative decoding in a "
                        f"pipeline is not modelled), got {spec.name!r} with pp {pp}")
    gpu = doc.get("gpu")
    if gpu is not None:
        try:
            presets.hardware(gpu)
        except SpecError as exc:
            raise SpecError(f"{where}['gpu']: {exc}") from None
    route = doc.get("max_prompt_tokens")
    if route is not None:
        route = _check.integer(f"{where}['max_prompt_tokens']", route, lo=1, hi=MAX_TOKENS, unit="tokens")
    return SideConfig(role=role, instances=instances, ranks=ranks, layout=layout, pp=pp, ep=ep, max_num_seqs=seqs,
                      chunk_tokens=chunk, moe_dispatch=side_dispatch, speculative=spec, gpu=gpu,
                      max_prompt_tokens=route)


def _speculative(value: Any, where: str, role: str, model):
    """A side's speculative decoding: None, a SpecDecode, a preset name or its fields (a mapping); SpecError
    naming ``where`` for anything else, for a prefill side (it does not decode) or an MTP draft on a model
    without an MTP module."""
    if value is None:
        return None
    if role == "prefill":
        raise SpecError(f"{where} must be null for a prefill side (it does not decode), got {_check.shown(value)}")
    from .specs import SpecDecode

    try:
        if isinstance(value, str):
            spec = presets.speculative(value)
        elif isinstance(value, SpecDecode):
            spec = value
        elif isinstance(value, dict):
            spec = SpecDecode.from_dict(value)
        else:
            raise SpecError(f"must be null, a speculative preset name or its fields, got {_check.shown(value)}")
        if spec.method == "mtp" and model.mtp_layers < 1:
            raise SpecError(f"{spec.name!r} drafts with an MTP module, and {model.name} has none (mtp_layers 0)")
    except (SpecError, UnknownPresetError) as exc:
        raise SpecError(f"{where}: {exc}") from None
    return spec


def _checked(doc: Any, *, complete: bool) -> DeploymentConfig:
    """The configuration validated field by field (object.__new__: __post_init__ would check it again)."""
    if not isinstance(doc, dict):
        raise SpecError(f"config must be a JSON object (a mapping), got {type(doc).__name__}")
    for f in _REQUIRED:
        _field(doc, f, "config")
    try:
        spec = presets.model(doc["model"])
    except (UnknownPresetError, SpecError) as exc:
        raise SpecError(f"config['model']: {exc}") from None
    try:
        presets.hardware(doc["gpu"])
    except (UnknownPresetError, SpecError) as exc:
        raise SpecError(f"config['gpu']: {exc}") from None
    mode = _check.choice("config['mode']", doc["mode"], MODES)
    for f in ("weight_dtype", "kv_dtype"):
        if not isinstance(doc[f], str):
            raise SpecError(f"config['{f}'] must be a dtype name, got {_check.shown(doc[f])}")
        if doc[f] not in DTYPE_BYTES:  # named here, not later as a bare "weight_dtype" by the step engine
            raise SpecError(f"config['{f}'] must be one of {sorted(DTYPE_BYTES)}, got {_check.shown(doc[f])}")
    link = doc.get("link")
    if link is not None:
        try:
            presets.link(link)
        except (UnknownPresetError, SpecError) as exc:
            raise SpecError(f"config['link']: {exc}") from None
    dispatch = doc.get("moe_dispatch")
    if dispatch is not None:
        _check.choice("config['moe_dispatch']", dispatch, MOE_DISPATCH)
    sides = doc["sides"]
    if not isinstance(sides, (list, tuple)) or not sides:
        raise SpecError(f"config['sides'] must be a non-empty list of sides, got {_check.shown(sides)}")
    want = ["colocated"] if mode == "colocated" else ["prefill", "decode"]
    if mode == "colocated" and isinstance(sides, (list, tuple)) and len(sides) == 2:
        want = ["colocated", "colocated"]  # two pools routed by length
    if len(sides) != len(want):  # before each side is read: a million of them took over 30 s to refuse
        raise SpecError(f"config['sides'] must hold {len(want)} side{'s' if len(want) > 1 else ''} ({', '.join(want)}) "
                        f"for mode {mode!r}, got {len(sides):,}")
    out = tuple(_side(s, i, model=spec, dispatch=dispatch or "gather", complete=complete)
                for i, s in enumerate(sides))
    roles = [s.role for s in out]
    if sorted(roles) != sorted(want):
        raise SpecError(f"config['sides'] roles must be {want} for mode {mode!r}, got {roles}")
    routes = [s.max_prompt_tokens for s in out]
    if len(out) == 2 and mode == "colocated" and (routes[0] is None or routes[1] is not None):
        raise SpecError("config['sides'] of two colocated pools are routed by length: the first needs "
                        "max_prompt_tokens (the longest prompt it takes) and the second none (it takes the rest), "
                        f"got {routes}")
    if any(r is not None for r in routes) and len(out) != 2:
        raise SpecError("config['sides'][i]['max_prompt_tokens'] routes prompts between two colocated pools; this "
                        f"configuration has {len(out)} side(s) in mode {mode!r}")
    cfg = object.__new__(DeploymentConfig)
    for name, value in (("model", doc["model"]), ("gpu", doc["gpu"]), ("mode", mode),
                        ("weight_dtype", doc["weight_dtype"]), ("kv_dtype", doc["kv_dtype"]), ("sides", out),
                        ("link", link), ("moe_dispatch", dispatch)):
        object.__setattr__(cfg, name, value)
    return cfg

"""The planning question: a model, a GPU type and budget, a workload, targets and the search space's axes
(docs/models.md §8)."""

from __future__ import annotations

from dataclasses import dataclass


from ... import _check, presets
from ...deployment import MAX_GPUS, MODES
from ...errors import LlmexploreError, SpecError
from ...models.serving import disagg as dg
from ...models.queueing import at_stat

__all__ = ["Question", "CHUNKS", "WIDE_EP_RANKS", "BATCH_POINTS", "RATE_POINTS", "MAX_SEQS", "PIPELINE_SIZES",
           "OBJECTIVES", "DEFAULT_PRICE_TIER", "MAX_GPU_TYPES"]


CHUNKS = (512, 1024, 2048, 4096, 8192)  # max_num_batched_tokens options [tokens]
WIDE_EP_RANKS = (16, 32, 64)  # DP-attention + EP instance sizes searched for MoE models
BATCH_POINTS = 40  # log-spaced decode batches per instance (step time is smooth in the batch)
RATE_POINTS = 160  # per-instance rates of the colocated grid
MAX_SEQS = 2048  # largest decode batch considered per instance [sequences]
#: pipeline-parallel sizes searched (stages of TP instances; 1 = no pipeline). Bounded so that the search stays
#: < 1 s: each size adds one instance per TP size whose pp x TP fits the budget
PIPELINE_SIZES = (1, 2, 4)
#: what the planner ranks by: output tokens/s per GPU (highest), $ per million tokens (lowest, input and output
#: together) or GPU board energy per output token (lowest); with a rate: the fewest GPUs, the lowest $/hour, the
#: lowest J/token that serve it
OBJECTIVES = ("tokens_per_s_per_gpu", "usd_per_mtok", "j_per_token")
#: the price tier used when the question names none (data/prices.yaml)
DEFAULT_PRICE_TIER = "neocloud-on-demand"
#: GPU types one question may mix (each pair of types is searched for disaggregated serving)
MAX_GPU_TYPES = 4


@dataclass(frozen=True)
class Question:
    """One planning question. Lengths in tokens, targets in ms at ``stat`` (mean, p50, p90, p99), rate in
    requests/s (None: find the highest rate the budget sustains). ``weight_dtypes`` / ``kv_dtypes`` limit the
    dtypes searched (None: the model's released dtype and FP8, plus FP4 on GPUs with FP4 tensor cores);
    ``link`` is the KV-transfer link (None: the GPU's scale-out link). ``speculative`` names a speculative-decoding
    preset (data/speculative.yaml) that the search turns on and off for every decoding side (colocated
    instances and the decode pool; prefill does not decode), with ``speculative_accepted_length`` the user's
    mean tokens per verify step in place of the preset's (its acceptance was measured on other traffic)."""

    model: str = "qwen3-32b"
    gpu: str = "h200"
    gpus: int = 32
    isl: int = 4000
    osl: int = 500
    ttft_ms: float = 300.0
    tpot_ms: float = 10.0
    stat: str = "p90"
    rate_per_s: float | None = None
    runtime: str = "default"
    weight_dtypes: tuple | None = None
    kv_dtypes: tuple | None = None
    modes: tuple = MODES
    link: str | None = None
    chunks: tuple = CHUNKS
    speculative: str | None = None
    speculative_accepted_length: float | None = None
    pipeline_sizes: tuple = PIPELINE_SIZES
    other_gpus: tuple = ()
    objective: str = "tokens_per_s_per_gpu"
    price_tier: str | None = None
    usd_per_gpu_hour: tuple = ()
    budget_usd_per_hour: float | None = None
    long_share: float | None = None
    long_isl: int | None = None
    long_osl: int | None = None

    def __post_init__(self) -> None:
        def put(k, v):
            object.__setattr__(self, k, v)

        presets.model(self.model)
        hw = presets.hardware(self.gpu)
        presets.runtime(self.runtime)
        self._check_types_and_prices(put)
        self._check_length_mix(put)
        put("gpus", _check.integer("gpus", self.gpus, lo=1, hi=MAX_GPUS))
        put("isl", _check.integer("isl", self.isl, lo=1, hi=dg.MAX_WORKLOAD_TOKENS, unit="tokens"))
        put("osl", _check.integer("osl", self.osl, lo=1, hi=dg.MAX_WORKLOAD_TOKENS, unit="tokens"))
        for f in ("ttft_ms", "tpot_ms"):
            put(f, _check.number(f, getattr(self, f), lo=0, lo_open=True, hi=dg.MAX_RATE_OR_MS, unit="ms"))
        at_stat.check_stat(self.stat)
        if self.rate_per_s is not None:
            put("rate_per_s", _check.number("rate_per_s", self.rate_per_s, lo=0, lo_open=True,
                                            hi=dg.MAX_RATE_OR_MS, unit="1/s"))
        for f, allowed in (("modes", MODES),):
            vals = tuple(getattr(self, f))
            bad = [v for v in vals if v not in allowed]
            if bad or not vals:
                raise SpecError(f"{f} must be a non-empty subset of {', '.join(allowed)}, got {vals!r}")
            put(f, vals)
        for f in ("weight_dtypes", "kv_dtypes"):
            vals = getattr(self, f)
            if vals is not None:
                vals = (vals,) if isinstance(vals, str) else tuple(vals)
                if not vals:
                    raise SpecError(f"{f} must name at least one dtype")
                for v in vals:
                    if f == "weight_dtypes":
                        hw.check_dtype(v, "weight_dtype")
                    else:
                        from ...specs import dtype_bytes
                        dtype_bytes(v, "kv_dtype")
                put(f, vals)
        put("chunks", tuple(_check.integer("chunk", c, lo=2, hi=1 << 20, unit="tokens") for c in self.chunks))
        from ...deployment import MAX_STAGES

        sizes = (self.pipeline_sizes,) if isinstance(self.pipeline_sizes, int) else tuple(self.pipeline_sizes)
        if not sizes:
            raise SpecError("pipeline_sizes must name at least one pipeline size (1: no pipeline), got none")
        put("pipeline_sizes", tuple(sorted({_check.integer("pipeline_sizes", p, lo=1, hi=MAX_STAGES) for p in sizes})))
        layers = presets.model(self.model).layers
        if min(self.pipeline_sizes) > layers:
            raise SpecError(f"pipeline_sizes must hold a size of at most the layers of {self.model} ({layers}): every "
                            f"stage holds at least one layer, got {list(self.pipeline_sizes)}")
        if self.link is not None:
            presets.link(self.link)
        if self.speculative is not None:
            self.spec()  # the preset exists, fits the model, and the acceptance override is in range
        elif self.speculative_accepted_length is not None:
            raise SpecError("speculative_accepted_length must come with speculative (the preset whose draft it "
                            f"describes), got {self.speculative_accepted_length!r} without one")

    def _check_types_and_prices(self, put) -> None:
        """The GPU types (``gpu`` and ``other_gpus``), the objective, the price tier, the user's prices and the
        $/hour budget; every GPU priced where the question asks for cost (objective, tier, prices or budget)."""
        others = (self.other_gpus,) if isinstance(self.other_gpus, str) else tuple(self.other_gpus)
        for g in others:
            presets.hardware(g)
        types = tuple(dict.fromkeys((self.gpu, *others)))
        if len(types) > MAX_GPU_TYPES:
            raise SpecError(f"gpu types must be at most {MAX_GPU_TYPES}, got {len(types)}: {', '.join(types)}")
        put("other_gpus", types[1:])
        if self.objective not in OBJECTIVES:
            raise SpecError(f"objective must be one of {', '.join(OBJECTIVES)}, got {self.objective!r}")
        if self.price_tier is not None:
            presets.price_tier(self.price_tier)
        pairs = self.usd_per_gpu_hour
        pairs = tuple(pairs.items()) if isinstance(pairs, dict) else tuple(tuple(p) for p in pairs)
        from ...specs import check_price

        seen = {}
        for p in pairs:
            if len(p) != 2:
                raise SpecError(f"usd_per_gpu_hour must be pairs (gpu, USD per GPU-hour), got {p!r}")
            g, usd = p
            if g not in types:
                raise SpecError(f"usd_per_gpu_hour prices gpu {g!r}, which the question does not search (its gpu "
                                f"types: {', '.join(types)})")
            seen[g] = check_price("usd_per_gpu_hour", g, usd)
        put("usd_per_gpu_hour", tuple(sorted(seen.items())))
        if self.budget_usd_per_hour is not None:
            put("budget_usd_per_hour", _check.number("budget_usd_per_hour", self.budget_usd_per_hour, lo=0,
                                                     lo_open=True, hi=1e9, unit="USD per hour"))
        if self.wants_cost:
            self.prices()  # every type priced, or one line naming the missing one
        if self.objective == "j_per_token":
            for g in types:
                presets.power(g)

    def _check_length_mix(self, put) -> None:
        """A length mix for routed colocated pools: ``long_share`` of the requests have ``long_isl`` prompt tokens
        (and ``long_osl`` output tokens, default ``osl``); ``isl`` / ``osl`` stay the mean of all requests, so the
        short requests are what remains: (isl - share x long_isl) / (1 - share) tokens, at least one."""
        given = [f for f in ("long_share", "long_isl", "long_osl") if getattr(self, f) is not None]
        if not given:
            return
        if self.long_share is None or self.long_isl is None:
            raise SpecError("long_share and long_isl come together (the share of long requests and their prompt "
                            f"tokens), got only {', '.join(given)}")
        put("long_share", _check.number("long_share", self.long_share, lo=0, hi=1, lo_open=True, hi_open=True))
        put("long_isl", _check.integer("long_isl", self.long_isl, lo=1, hi=dg.MAX_WORKLOAD_TOKENS, unit="tokens"))
        if self.long_osl is not None:
            put("long_osl", _check.integer("long_osl", self.long_osl, lo=1, hi=dg.MAX_WORKLOAD_TOKENS,
                                           unit="tokens"))
        (si, so), (li, lo) = self.classes()
        if not (li > si + 1e-9 and si >= 1 and so >= 1):
            raise SpecError(f"long_isl ({self.long_isl:,}) at long_share {self.long_share:g} must exceed the mean "
                            f"isl ({self.isl:,}) and leave the other requests at least one prompt and one output "
                            f"token on average: they would have {si:,.1f} and {so:,.1f}")

    def classes(self) -> tuple:
        """((short isl, short osl), (long isl, long osl)) of a length mix [tokens, the short ones fractional],
        keeping the question's mean lengths; None without one."""
        if self.long_share is None:
            return None
        f = self.long_share
        lo = self.osl if self.long_osl is None else self.long_osl
        return (((self.isl - f * self.long_isl) / (1 - f), (self.osl - f * lo) / (1 - f)),
                (float(self.long_isl), float(lo)))

    @property
    def gpu_types(self) -> tuple:
        """Every GPU type searched: ``gpu`` first, then ``other_gpus``."""
        return (self.gpu, *self.other_gpus)

    @property
    def wants_cost(self) -> bool:
        """Whether the question asks for cost (its objective, a tier, prices or a budget): then every GPU type
        must have a price; otherwise a type without one leaves the cost columns out."""
        return (self.objective == "usd_per_mtok" or self.price_tier is not None or bool(self.usd_per_gpu_hour)
                or self.budget_usd_per_hour is not None)

    @property
    def tier(self) -> str:
        return self.price_tier or DEFAULT_PRICE_TIER

    def prices(self) -> dict:
        """GPU type -> :class:`~llmexplore.specs.GpuPrice`: the user's ``usd_per_gpu_hour`` (dated today, source
        "user"), else the tier's; SpecError naming a type without a price."""
        import datetime

        from ...specs import GpuPrice

        own = dict(self.usd_per_gpu_hour)
        tier = presets.price_tier(self.tier)
        today = datetime.date.today().isoformat()
        return {g: GpuPrice(g, own[g], today, "given by the user") if g in own else tier.price(g)
                for g in self.gpu_types}

    def priced(self) -> dict | None:
        """:meth:`prices`, or None when a type has none and the question did not ask for cost."""
        try:
            return self.prices()
        except SpecError:
            if self.wants_cost:
                raise
            return None

    def powered(self) -> dict | None:
        """GPU type -> :class:`~llmexplore.specs.GpuPower`, or None when a type has no power preset."""
        try:
            return {g: presets.power(g) for g in self.gpu_types}
        except LlmexploreError:
            return None

    def spec(self):
        """The speculative-decoding spec the search turns on (:class:`~llmexplore.specs.SpecDecode`), with the
        user's accepted length in place of the preset's acceptance; None without ``speculative``."""
        if self.speculative is None:
            return None
        from ...models.step.speculative import check_spec, with_accepted_length

        s = presets.speculative(self.speculative)
        check_spec(presets.model(self.model), s)
        try:
            return with_accepted_length(s, self.speculative_accepted_length)
        except SpecError as exc:  # named as the question's field
            raise SpecError(str(exc).replace("accepted_length", "speculative_accepted_length", 1)) from None

    @property
    def workload(self) -> dg.Workload:
        return dg.Workload(prompt_tokens=self.isl, output_tokens=self.osl, rate_per_s=self.rate_per_s or 1.0,
                           ttft_slo_ms=self.ttft_ms, tpot_slo_ms=self.tpot_ms,
                           percentile=at_stat.percentile_of(self.stat))

    def dtype_options(self) -> list[tuple[str, str]]:
        """(weight, KV) dtype pairs searched: the question's, else the model's released dtype and FP8, plus FP4
        when every GPU type has FP4 tensor cores (a mix shares its dtypes: the KV crosses the link as it is)."""
        m = presets.model(self.model)
        w = self.weight_dtypes
        if w is None:
            fp4 = all(presets.hardware(g).has_fp4 for g in self.gpu_types)
            w = tuple(dict.fromkeys([m.weight_dtype, "fp8"] + (["fp4"] if fp4 else [])))
        kv = self.kv_dtypes or ("bf16", "fp8")
        return [(a, b) for a in w for b in kv]

    def not_resolved(self) -> list[str]:
        """Why the planner's numbers for this question are not resolved by kernel data, one sentence per searched
        dtype pair whose kernels lack fitted curves on the GPU (:func:`..models.step.engine.not_resolved_reason`;
        empty: every kernel is priced from kernel measurements)."""
        from ...models.step.engine import Deployment, not_resolved_reason

        out = []
        for w, kv in self.dtype_options():
            why = not_resolved_reason(Deployment.build(self.model, self.gpu, 1, runtime=self.runtime, weight_dtype=w,
                                                       kv_dtype=kv))
            if why and why not in out:
                out.append(why)
        return out

    def link_name(self, prefill_gpu: str | None = None, decode_gpu: str | None = None) -> str:
        """The KV-transfer link: the question's, else the GPU's scale-out link; between two GPU types the slower
        of their scale-out links (the KV leaves one NIC and enters the other)."""
        if self.link:
            return self.link
        names = [presets.hardware(g).scale_out_link or "roce-400g" for g in (prefill_gpu or self.gpu,
                                                                           decode_gpu or self.gpu)]
        return min(names, key=lambda n: presets.link(n).achievable_GBps)

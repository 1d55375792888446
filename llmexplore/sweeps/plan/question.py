"""The planning question: a model, a GPU type and budget, a workload, targets and the search space's axes
(docs/models.md §8)."""

from __future__ import annotations

from dataclasses import dataclass


from ... import _check, presets
from ...deployment import MAX_GPUS, MODES
from ...errors import SpecError
from ...models.serving import disagg as dg
from ...models.queueing import at_stat

__all__ = ["Question", "CHUNKS", "WIDE_EP_RANKS", "BATCH_POINTS", "RATE_POINTS", "MAX_SEQS", "PIPELINE_SIZES"]


CHUNKS = (512, 1024, 2048, 4096, 8192)  # max_num_batched_tokens options [tokens]
WIDE_EP_RANKS = (16, 32, 64)  # DP-attention + EP instance sizes searched for MoE models
BATCH_POINTS = 40  # log-spaced decode batches per instance (step time is smooth in the batch)
RATE_POINTS = 160  # per-instance rates of the colocated grid
MAX_SEQS = 2048  # largest decode batch considered per instance [sequences]
#: pipeline-parallel sizes searched (stages of TP instances; 1 = no pipeline). Bounded so that the search stays
#: < 1 s: each size adds one instance per TP size whose pp x TP fits the budget
PIPELINE_SIZES = (1, 2, 4)


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

    def __post_init__(self) -> None:
        def put(k, v):
            object.__setattr__(self, k, v)

        presets.model(self.model)
        hw = presets.hardware(self.gpu)
        presets.runtime(self.runtime)
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
        m, hw = presets.model(self.model), presets.hardware(self.gpu)
        w = self.weight_dtypes
        if w is None:
            w = tuple(dict.fromkeys([m.weight_dtype, "fp8"] + (["fp4"] if hw.has_fp4 else [])))
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

    def link_name(self) -> str:
        return self.link or presets.hardware(self.gpu).scale_out_link or "roce-400g"

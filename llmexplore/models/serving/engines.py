"""The engine seam of the serving simulator (docs/models.md §4.9): one instance's scheduler knobs
(:class:`Scheduler`, vLLM's names), its KV capacity in blocks, the states a request goes through
(:class:`RequestState`), and :class:`EnginePolicy`, the one object behind which what differs between serving
engines sits (the KV memory budget, admission, the preemption victim, host time per step and per request).
:class:`~.batcher.Batcher` runs the loop and asks its policy at each of those points.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ... import _check
from ...errors import SpecError
from ..step.decode import memory_per_rank
from ..step.engine import Deployment

__all__ = ["Scheduler", "RequestState", "EnginePolicy", "TrtllmPolicy", "DEFAULT_POLICY", "ENGINE_POLICIES",
           "runtime_policy", "policy_for", "kv_capacity_blocks", "MAX_HOST_S"]

MAX_HOST_S = 10.0  # largest host time per step or per request [s]


@dataclass(frozen=True)
class Scheduler:
    """Scheduler knobs of one instance (vLLM names).

    ``max_num_seqs``: most requests running at once; ``max_num_batched_tokens``: token budget of one
    iteration (decodes count one each; prefill chunks fill the rest); ``block_tokens``: KV block size;
    ``kv_blocks``: KV capacity in blocks (None: from the deployment's memory, :func:`kv_capacity_blocks`).
    """

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    block_tokens: int = 16
    kv_blocks: int | None = None

    def __post_init__(self) -> None:
        seqs = _check.integer("max_num_seqs", self.max_num_seqs, lo=1, hi=1 << 16)
        tok = _check.integer("max_num_batched_tokens", self.max_num_batched_tokens, lo=1, hi=1 << 20,
                             unit="tokens")
        if tok < seqs:
            raise SpecError(f"max_num_batched_tokens must be >= max_num_seqs ({seqs}) so every running request "
                            f"can decode in one iteration (vLLM's rule), got {tok}")
        object.__setattr__(self, "max_num_seqs", seqs)
        object.__setattr__(self, "max_num_batched_tokens", tok)
        object.__setattr__(self, "block_tokens", _check.integer("block_tokens", self.block_tokens, lo=1,
                                                                hi=65536, unit="tokens"))
        if self.kv_blocks is not None:
            object.__setattr__(self, "kv_blocks", _check.integer("kv_blocks", self.kv_blocks, lo=1, hi=1 << 40))


def kv_capacity_blocks(dep: Deployment, scheduler: Scheduler = Scheduler(), layout: str = "TP",
                       speculative=None) -> int:
    """KV blocks one scheduler holds: the KV budget per rank beside the weights and the activations of a full
    token budget (the runtime's memory rule, :meth:`..step.engine.Deployment.kv_budget_B`: vLLM's share of the
    total, TensorRT-LLM's share of what is free) / (KV bytes per token per rank x ``block_tokens``)
    (:func:`..step.decode.memory_per_rank`). ``layout`` "TP": the instance's scheduler, KV sharded by heads;
    "DPA": one attention-DP rank's, whose ``scheduler`` counts that rank's tokens and which holds its own
    requests' whole KV beside replicated attention weights (the activations of every rank's budget gathered for
    the FFN). 0 if the weights do not fit.

    ``speculative`` (a preset or SpecDecode): the draft's weights come off the budget, the draft layer's KV is
    paged with every token (a block holds ``block_tokens`` tokens of both), and the verify pass's k draft slots of
    every one of ``max_num_seqs`` sequences are set aside (:func:`..step.speculative.spec_memory`'s accounting)."""
    page = dep.runtime.page_tokens
    g = dep.ranks if layout == "DPA" else 1
    if speculative is None:
        mem = memory_per_rank(dep, g * scheduler.max_num_batched_tokens, 1, layout)
        free = float(mem["kv_budget_B"])  # the runtime's memory rule (Deployment.kv_budget_B)
        per_token = float(memory_per_rank(dep, 1, page, layout)["kv_B"]) / page
        return max(0, int(free // (per_token * scheduler.block_tokens)))
    from ..step.speculative import draft_deployment, resolve_spec, spec_memory

    spec = resolve_spec(speculative)
    W = spec.verify_width
    seqs = max(1, -(-scheduler.max_num_batched_tokens // W))  # the verify passes a full token budget holds
    mem = spec_memory(dep, spec, g * seqs, 1, layout)
    free = float(mem["kv_budget_B"])
    ddep = draft_deployment(dep, spec)
    per_token = float(memory_per_rank(dep, 1, page, layout)["kv_B"]) / page
    if ddep is not None:
        per_token += float(memory_per_rank(ddep, 1, page, layout)["kv_B"]) / page
    blocks = int(free // (per_token * scheduler.block_tokens))
    slots = -(-scheduler.max_num_seqs * (W - 1) // scheduler.block_tokens)  # the verify slots of a full batch
    return max(0, blocks - slots)


class RequestState(enum.IntEnum):
    """Where a request is in one instance."""

    WAITING = 0     # not arrived yet, queued, or preempted back to the queue
    PREFILLING = 1  # admitted, its prompt (or its recompute) partly computed
    DECODING = 2    # emitting a token every iteration
    DONE = 3        # emitted its last token; its blocks are free


# the states as plain ints for the loop (an IntEnum member compares equal to its int, but is slower to look up)
_WAITING, _PREFILLING, _DECODING, _DONE = (int(s) for s in RequestState)


class EnginePolicy:
    """What differs between serving engines, behind one object (issue 18 §3): the KV memory budget, the
    admission rule, the preemption victim and host time. The base class is today's behaviour
    (:data:`DEFAULT_POLICY`); an engine's semantics is a subclass that overrides what it does differently.

    ``step_host_s``: host time added to every iteration [s] (scheduling, sampling bookkeeping, detokenising);
    ``request_host_s``: time a request spends in the serving stack before it reaches the scheduler [s]
    (HTTP, parsing), plus ``request_host_s_per_token`` [s] per prompt token (tokenisation), which delays its
    arrival at the instance and so its TTFT (:meth:`request_host`).
    """

    name = "default"
    #: whether admission reserves the KV blocks of a request's whole sequence (prompt + every output token)
    #: beside those of the requests already admitted, so that nothing admitted is ever preempted
    reserve_to_completion = False
    #: with ``reserve_to_completion``: the most output tokens a request's reservation counts (None: all of
    #: them). A request whose output runs past it holds more blocks than were reserved, and the base
    #: preemption frees blocks if they run out
    reserve_output_tokens: int | None = None
    #: whether a prompt may be split over iterations (chunked prefill: vLLM V1 always); False: a prompt runs
    #: whole in one iteration, admitted only when it fits the iteration's token budget beside the decodes and
    #: the other prompts (a prompt longer than the budget runs as the iteration's only prompt)
    chunked_prefill = True
    #: whether prefill chunks share an iteration with the running decodes (vLLM V1's chunked prefill,
    #: TensorRT-LLM's in-flight batching); False: an iteration that can prefill runs prompts only, and the
    #: decodes wait for it (SGLang without ``--enable-mixed-chunk``)
    mixed_prefill = True
    #: whether an attention-DP instance splits its token budget over its ranks (:meth:`dp_rank_scheduler`)
    dp_divides_token_budget = False

    def __init__(self, *, step_host_s: float = 0.0, request_host_s: float = 0.0,
                 request_host_s_per_token: float = 0.0) -> None:
        self.step_host_s = _check.number("step_host_s", step_host_s, lo=0, hi=MAX_HOST_S, unit="s")
        self.request_host_s = _check.number("request_host_s", request_host_s, lo=0, hi=MAX_HOST_S, unit="s")
        self.request_host_s_per_token = _check.number("request_host_s_per_token", request_host_s_per_token, lo=0,
                                                      hi=MAX_HOST_S / 1e5, unit="s")

    def request_host(self, prompt_tokens: int) -> float:
        """The serving stack's time for one request of ``prompt_tokens`` [s]."""
        return self.request_host_s + self.request_host_s_per_token * prompt_tokens

    def _host_repr(self) -> str:
        return (f"step_host_s={self.step_host_s!r}, request_host_s={self.request_host_s!r}, "
                f"request_host_s_per_token={self.request_host_s_per_token!r}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._host_repr()})"

    def kv_blocks(self, dep: Deployment, scheduler: Scheduler, layout: str = "TP", speculative=None) -> int:
        """KV blocks of one scheduler (an instance; under DPA an attention-DP rank): the scheduler's
        ``kv_blocks`` if set, else what the memory left after weights, activations and reserve holds
        (:func:`kv_capacity_blocks`, with a speculative draft's weights, KV and verify slots)."""
        return (scheduler.kv_blocks if scheduler.kv_blocks is not None
                else kv_capacity_blocks(dep, scheduler, layout, speculative))

    def dp_rank_scheduler(self, scheduler: Scheduler, ranks: int) -> Scheduler:
        """The scheduler of one attention-DP rank of an instance of ``ranks`` ranks whose ``scheduler`` is given
        for the whole instance (a configuration's ``max_num_seqs`` counts the instance's requests): at most
        ceil(max_num_seqs / ranks) running requests per rank (vLLM's ``--max-num-seqs`` is per data-parallel
        engine, and the launch lines write the per-rank value), the token budget per rank unchanged
        (``dp_divides_token_budget`` False: vLLM's ``--max-num-batched-tokens`` and TensorRT-LLM's
        ``max_num_tokens`` are each rank's own [assumption for TensorRT-LLM: not read in its source])."""
        seqs = -(-scheduler.max_num_seqs // ranks)
        tokens = scheduler.max_num_batched_tokens
        if self.dp_divides_token_budget:
            tokens = max(tokens // ranks, 1)
        return Scheduler(max_num_seqs=seqs, max_num_batched_tokens=max(tokens, seqs),
                         block_tokens=scheduler.block_tokens, kv_blocks=scheduler.kv_blocks)

    def admits(self, need_blocks: int, free_blocks: int) -> bool:
        """Whether a waiting request whose first chunk needs ``need_blocks`` is admitted when ``free_blocks``
        are left after this iteration's demand: when they fit (vLLM V1)."""
        return need_blocks <= free_blocks

    def victim(self, running: list, state: list) -> int:
        """The running request to preempt (by recompute) when an iteration's blocks do not fit: the most
        recently admitted one (vLLM V1). ``running`` is in admission order and may hold finished or preempted
        entries, which are dropped as they are met."""
        while state[running[-1]] not in (_PREFILLING, _DECODING):
            running.pop()
        return running.pop()


#: vLLM V1's scheduler, no host time: the behaviour every result so far was computed with
DEFAULT_POLICY = EnginePolicy()


class TrtllmPolicy(EnginePolicy):
    """TensorRT-LLM's default capacity scheduler, ``GUARANTEED_NO_EVICT`` (``SchedulerConfig.capacity_scheduler_policy``
    in ``tensorrt_llm/llmapi/llm_args.py``; the policies in ``cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp``;
    data/engines.yaml cites both). A waiting request is scheduled only when the KV blocks it needs to complete
    (its prompt and every output token it may generate) fit beside the blocks the running requests still need to
    complete theirs; a scheduled request is therefore never paused or evicted, and no iteration ever runs out of
    blocks. The engine pays for that with a smaller batch than vLLM's optimistic admission at long outputs, and
    gains what vLLM loses to recompute preemptions when memory is tight (issue 19: 20,000-token prompts).
    Prompts run whole unless ``enable_chunked_prefill`` (TensorRT-LLM's default is False; data/engines.yaml).
    The other knobs (KV budget, host time) are the base class's."""

    name = "trtllm"
    #: TensorRT-LLM's capacity scheduler policies modelled here: GUARANTEED_NO_EVICT (the default) reserves to
    #: completion; MAX_UTILIZATION packs what fits now and pauses requests when blocks run out (the base
    #: policy's preemption by recompute)
    CAPACITY_POLICIES = ("GUARANTEED_NO_EVICT", "MAX_UTILIZATION")

    def __init__(self, *, capacity_scheduler_policy: str = "GUARANTEED_NO_EVICT", enable_chunked_prefill: bool = False,
                 **host) -> None:
        super().__init__(**host)
        self.capacity_scheduler_policy = _check.choice("capacity_scheduler_policy", capacity_scheduler_policy,
                                                       self.CAPACITY_POLICIES)
        self.reserve_to_completion = self.capacity_scheduler_policy == "GUARANTEED_NO_EVICT"
        # TensorRT-LLM runs whole prompts unless enable_chunked_prefill (default False: llm_args.py, serve.py)
        self.chunked_prefill = _check.boolean("enable_chunked_prefill", enable_chunked_prefill)

    def __repr__(self) -> str:
        return (f"TrtllmPolicy(capacity_scheduler_policy={self.capacity_scheduler_policy!r}, "
                f"enable_chunked_prefill={self.chunked_prefill!r}, {self._host_repr()})")


class SglangPolicy(EnginePolicy):
    """SGLang's admission (``PrefillAdder`` in ``python/sglang/srt/managers/schedule_policy.py``, sglang 0.5.23;
    data/engines.yaml cites it). A waiting request is admitted when its prompt plus
    ``min(max_new_tokens, CLIP_MAX_NEW_TOKENS)`` output tokens fit in the KV pool beside what the running
    requests hold. Each running request also counts ``min(remaining output, CLIP_MAX_NEW_TOKENS)`` times the
    new-token ratio. For a request that ignores EOS, as a benchmark's does, that ratio is 1.0
    (``_get_running_request_total_token_offset``: "Fixed-length requests cannot benefit from the early-EOS
    estimate"). The simulator's requests end at a known output length, so they are modelled as such requests:
    admission reserves each request's prompt + min(output, 4,096) tokens. When an output longer than 4,096 runs
    past its reservation and the pool runs out, SGLang retracts decodes; the base policy's preemption by
    recompute stands in for that.

    Not modelled:

    * the ratio for requests that may stop early (0.7, decaying to 0.098 over 600 steps), which needs each
      client's max_tokens;
    * the growth of a long request's reservation as it decodes (its reservation is fixed at admission here);
    * under DP attention, ``schedule_conservativeness`` x 0.3 (``_handle_data_parallelism``), which scales only
      the ratio above, 1.0 for these requests.

    Under DP attention SGLang divides the instance's ``chunked_prefill_size`` and ``max_running_requests`` by
    the attention-DP size for each rank (sglang 0.5.23: ``srt/arg_groups/parallel_hook.py``
    ``_handle_data_parallelism``, ``chunked_prefill_size // attn_dp_size``; ``srt/mem_cache/kv_cache_configurator.py``
    and ``srt/arg_groups/moe_hook.py``, ``max_running_requests // attn_dp_size`` per rank), so
    ``dp_divides_token_budget``. A rank's requests are rounded up here (the step engine's worst rank holds
    ceil(B / T)); SGLang rounds down."""

    name = "sglang"
    reserve_to_completion = True
    dp_divides_token_budget = True
    mixed_prefill = False

    def __init__(self, *, enable_mixed_chunk: bool = False, **host) -> None:
        """``enable_mixed_chunk``: SGLang's ``--enable-mixed-chunk`` (default False, sglang 0.5.23
        ``srt/arg_groups/fields/schedule.py``). Off, an iteration that can prefill runs prompts only: the
        scheduler builds a prefill batch whenever a waiting or partly prefilled request can run, and runs it
        before the decodes ("Run prefill first if possible", ``Scheduler.get_next_batch_to_run`` in
        ``srt/managers/scheduler.py``), with the whole ``chunked_prefill_size`` for prompts (the running decodes
        are counted against it only when mixing, ``running_bs if self.is_mixed_chunk else 0``). On, prefill
        chunks share the decodes' iteration, as in vLLM."""
        super().__init__(**host)
        self.mixed_prefill = _check.boolean("enable_mixed_chunk", enable_mixed_chunk)

    def __repr__(self) -> str:
        return f"SglangPolicy(enable_mixed_chunk={self.mixed_prefill!r}, {self._host_repr()})"
    #: CLIP_MAX_NEW_TOKENS: SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION, default 4096 (schedule_policy.py)
    reserve_output_tokens = 4096


#: the serving engines' semantics by engine name (a runtime preset's ``engine``; "" = engine-neutral, the
#: base policy). vLLM V1 is the base policy
ENGINE_POLICIES = {"": EnginePolicy, "vllm": EnginePolicy, "sglang": SglangPolicy, "trtllm": TrtllmPolicy}


def runtime_policy(runtime, **knobs) -> EnginePolicy:
    """The :class:`EnginePolicy` a runtime preset (a :class:`~llmexplore.specs.Runtime`) names: its engine's
    semantics with its serving-stack time per request (``request_host_ms`` + ``request_host_us_per_token`` x
    prompt tokens); ``knobs`` as :func:`policy_for` takes them, given ones replacing the preset's."""
    host = {"request_host_s": runtime.request_host_ms / 1e3,
            "request_host_s_per_token": runtime.request_host_us_per_token / 1e6}
    return policy_for(runtime.engine, **{**host, **knobs})


def policy_for(engine: str, **knobs) -> EnginePolicy:
    """The :class:`EnginePolicy` of a serving engine (``""``: engine-neutral) with its ``knobs`` (the host times
    ``step_host_s``, ``request_host_s`` and ``request_host_s_per_token``; for ``trtllm`` also
    ``capacity_scheduler_policy`` and ``enable_chunked_prefill``; for ``sglang`` ``enable_mixed_chunk``);
    SpecError naming the engines for an unknown one."""
    if engine not in ENGINE_POLICIES:
        raise SpecError(f"engine must be one of {', '.join(repr(e) for e in ENGINE_POLICIES)} (a runtime preset's "
                        f"engine), got {engine!r}")
    return ENGINE_POLICIES[engine](**knobs)

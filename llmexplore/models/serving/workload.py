"""The workload of a serving question: request lengths, arrivals and shared prefixes (docs/models.md §4.9).

* :class:`LengthDist` is a distribution of token counts (prompt lengths ISL, output lengths OSL): ``fixed``
  (one value), ``lognormal`` (median and log-space sigma, rounded and clipped to [1, ``max_tokens``]: the
  sampler of :func:`..queueing.fcfs_sim.lognormal_prompt_tokens`, whose exact pmf is :func:`..queueing.mg1.lognormal_prompt_pmf`)
  or ``empirical`` (a tuple of observed values, sampled with replacement; :func:`llmexplore.traces.length_dist_from_csv` reads
  them from a CSV column).
* :class:`Traffic` is how requests arrive: open-loop Poisson at ``rate_per_s``, closed-loop at a fixed
  ``concurrency`` (a finished request is replaced at once, as a benchmark client with N workers does), or a
  recorded :class:`Trace` (:func:`load_trace`). ``prefix_ratio`` is the share of each prompt that is a shared
  prefix already in the prefix cache (not recomputed, still held in KV memory).
* :func:`requests` draws ``n`` requests as numpy arrays (seeded, deterministic).

Glossary: ISL input (prompt) sequence length, OSL output sequence length [tokens].
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from ... import _check
from ...errors import SpecError
from ..queueing import mg1
from ..queueing.fcfs_sim import MAX_REQUESTS, lognormal_prompt_tokens, poisson_arrivals

__all__ = ["LengthDist", "Trace", "Traffic", "requests", "LENGTH_KINDS", "MAX_TOKENS", "MIN_RATE_PER_S",
           "MAX_TRACE_BYTES"]

LENGTH_KINDS = ("fixed", "lognormal", "empirical")
MAX_TOKENS = mg1.MAX_PMF_TOKENS  # longest prompt or output a distribution may produce [tokens] (4,194,304)
#: slowest Poisson rate [1/s] (one request per ~11.6 days): every request is served alone well above it, and
#: below it the arrival times of a run overflow to infinity in float arithmetic (1e-320 req/s did)
MIN_RATE_PER_S = 1e-6
MAX_TRACE_BYTES = 256 << 20  # largest CSV file read as a trace or a length column
MAX_EMPIRICAL = 10_000_000  # values of one empirical distribution


def _tokens_array(name: str, values, *, lo: int = 1) -> np.ndarray:
    a = _check.real_array(name, values, lo=lo, hi=MAX_TOKENS, integer=True, unit="tokens", max_size=MAX_REQUESTS)
    return a.astype(np.int64).ravel()


@dataclass(frozen=True)
class LengthDist:
    """A distribution of token counts [tokens] (prompt or output lengths).

    ``kind`` ``"fixed"``: always ``value``. ``"lognormal"``: round(``median`` * exp(``sigma`` Z)), Z standard
    normal, clipped to [1, ``max_tokens``]. ``"empirical"``: one of ``values`` chosen uniformly with
    replacement. Build with :meth:`fixed`, :meth:`lognormal` or :meth:`empirical` (from a CSV column:
    :func:`llmexplore.traces.length_dist_from_csv`).
    """

    kind: str = "fixed"
    value: int | None = None
    median: float | None = None
    sigma: float = 0.0
    max_tokens: int = 131072
    values: tuple = field(default=(), repr=False)

    def __post_init__(self) -> None:
        def put(name, v):
            object.__setattr__(self, name, v)

        _check.choice("kind", self.kind, LENGTH_KINDS)
        if self.kind == "fixed":
            if self.value is None:
                raise SpecError("value must be given for a fixed length distribution (an integer >= 1 [tokens])")
            put("value", _check.integer("value", self.value, lo=1, hi=MAX_TOKENS, unit="tokens"))
        elif self.kind == "lognormal":
            if self.median is None:
                raise SpecError("median must be given for a lognormal length distribution (a number >= 1 "
                                "[tokens])")
            cap = _check.integer("max_tokens", self.max_tokens, lo=1, hi=MAX_TOKENS, unit="tokens")
            put("max_tokens", cap)
            put("median", _check.number("median", self.median, lo=1, hi=cap, unit="tokens"))
            put("sigma", _check.number("sigma", self.sigma, lo=0, hi=5))
        else:
            vals = _tokens_array("values", list(self.values) if isinstance(self.values, tuple) else self.values)
            if vals.size > MAX_EMPIRICAL:
                raise SpecError(f"values must hold at most {MAX_EMPIRICAL:,} lengths, got {vals.size:,}")
            put("values", tuple(int(v) for v in vals))

    # ---- constructors ------------------------------------------------------------------------------------
    @classmethod
    def fixed(cls, value: int) -> "LengthDist":
        """Always ``value`` tokens."""
        return cls(kind="fixed", value=value)

    @classmethod
    def lognormal(cls, median: float, sigma: float, max_tokens: int = 131072) -> "LengthDist":
        """Lognormal with ``median`` [tokens] and log-space ``sigma``, rounded, clipped to [1, ``max_tokens``]."""
        return cls(kind="lognormal", median=median, sigma=sigma, max_tokens=max_tokens)

    @classmethod
    def empirical(cls, values) -> "LengthDist":
        """Observed lengths, sampled with replacement."""
        return cls(kind="empirical", values=tuple(np.asarray(values).ravel().tolist())
                   if not isinstance(values, tuple) else values)

    # ---- use -----------------------------------------------------------------------------------------------
    def sample(self, n: int, rng=None) -> np.ndarray:
        """``n`` lengths [tokens], int64, shape (n,). ``rng``: anything :func:`numpy.random.default_rng`
        accepts (a Generator is used as is)."""
        n = _check.integer("n", n, lo=0, hi=MAX_REQUESTS)
        rng = np.random.default_rng(rng)
        if self.kind == "fixed":
            return np.full(n, self.value, dtype=np.int64)
        if self.kind == "lognormal":
            return lognormal_prompt_tokens(n, median_tokens=self.median, sigma=self.sigma,
                                           max_tokens=self.max_tokens, seed=rng).astype(np.int64)
        return np.asarray(self.values, dtype=np.int64)[rng.integers(0, len(self.values), n)]

    def mean(self) -> float:
        """Mean length [tokens]: exact for every kind (lognormal: the mean of the rounded, clipped law, from
        its exact pmf :func:`..queueing.mg1.lognormal_prompt_pmf`)."""
        if self.kind == "fixed":
            return float(self.value)
        if self.kind == "empirical":
            return float(np.mean(self.values))
        return _lognormal_mean(self.median, self.sigma, self.max_tokens)

    @property
    def max(self) -> int:
        """Largest length the distribution can produce [tokens]."""
        if self.kind == "fixed":
            return int(self.value)
        if self.kind == "empirical":
            return int(max(self.values))
        return int(self.max_tokens) if self.sigma > 0 else int(min(max(round(self.median), 1), self.max_tokens))


@functools.lru_cache(maxsize=64)
def _lognormal_mean(median: float, sigma: float, max_tokens: int) -> float:
    k, p = mg1.lognormal_prompt_pmf(median_tokens=median, sigma=sigma, max_tokens=max_tokens)
    return float(k @ p)


@dataclass(frozen=True, eq=False)
class Trace:
    """Recorded requests: ``arrival_s`` [s] (non-decreasing), ``prompt_tokens`` and ``output_tokens`` [tokens]
    (integers >= 1), and optionally ``prefix_id`` (integers; -1 = no shared prefix). Arrays of equal length,
    stored read-only."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    prefix_id: np.ndarray | None = None

    def __post_init__(self) -> None:
        arr = _check.real_array("arrival_s", self.arrival_s, lo=0, unit="s", max_size=MAX_REQUESTS).ravel()
        pr = _tokens_array("prompt_tokens", self.prompt_tokens)
        out = _tokens_array("output_tokens", self.output_tokens)
        if not (arr.size == pr.size == out.size) or arr.size == 0:
            raise SpecError(f"arrival_s, prompt_tokens and output_tokens must have one equal, non-zero length, got "
                            f"{arr.size}, {pr.size}, {out.size}")
        if arr.size > 1 and np.any(np.diff(arr) < 0):
            i = int(np.argmax(np.diff(arr) < 0)) + 1
            raise SpecError(f"arrival_s must be non-decreasing, got {arr[i - 1]:g} then {arr[i]:g} at request {i}")
        pid = None
        if self.prefix_id is not None:
            pid = _check.real_array("prefix_id", self.prefix_id, lo=-1, integer=True, max_size=MAX_REQUESTS)
            pid = pid.astype(np.int64).ravel()
            if pid.size != arr.size:
                raise SpecError(f"prefix_id must have one entry per request ({arr.size}), got {pid.size}")
        for name, a in (("arrival_s", arr), ("prompt_tokens", pr), ("output_tokens", out), ("prefix_id", pid)):
            if a is not None:
                a.setflags(write=False)
            object.__setattr__(self, name, a)

    def __len__(self) -> int:
        return int(self.arrival_s.size)


@dataclass(frozen=True)
class Traffic:
    """How requests arrive, and their lengths.

    Exactly one of ``rate_per_s`` (open-loop Poisson arrivals [1/s]), ``concurrency`` (closed loop: that many
    requests in flight, each replaced by a new one the moment it finishes) and ``trace`` (recorded arrivals
    and lengths; ``isl`` and ``osl`` are then ignored). ``isl``/``osl``: prompt and output length
    distributions. ``prefix_ratio`` in [0, 1): the share floor(ratio * prompt) of each prompt that is a
    cached shared prefix (capped at prompt - 1: at least one token is computed); with a trace's
    ``prefix_id``, only requests whose id was seen before hit the cache.
    """

    rate_per_s: float | None = None
    isl: LengthDist = field(default_factory=lambda: LengthDist.fixed(1024))
    osl: LengthDist = field(default_factory=lambda: LengthDist.fixed(128))
    prefix_ratio: float = 0.0
    concurrency: int | None = None
    trace: Trace | None = None

    def __post_init__(self) -> None:
        given = [n for n in ("rate_per_s", "concurrency", "trace") if getattr(self, n) is not None]
        if len(given) != 1:
            raise SpecError("exactly one of rate_per_s, concurrency and trace must be given, got "
                            f"{given or 'none'}")
        if self.rate_per_s is not None:
            object.__setattr__(self, "rate_per_s", _check.number("rate_per_s", self.rate_per_s, lo=MIN_RATE_PER_S,
                                                                 hi=1e9, unit="1/s"))
        if self.concurrency is not None:
            object.__setattr__(self, "concurrency", _check.integer("concurrency", self.concurrency, lo=1,
                                                                   hi=1 << 20))
        if self.trace is not None and not isinstance(self.trace, Trace):
            raise SpecError(f"trace must be a Trace (see load_trace), got {type(self.trace).__name__}")
        for name in ("isl", "osl"):
            if not isinstance(getattr(self, name), LengthDist):
                raise SpecError(f"{name} must be a LengthDist, got {type(getattr(self, name)).__name__}")
        r = _check.number("prefix_ratio", self.prefix_ratio, lo=0, hi=1)
        if r >= 1:
            raise SpecError(f"prefix_ratio must be a finite number in [0, 1) (at least one prompt token is "
                            f"computed), got {self.prefix_ratio!r}")
        object.__setattr__(self, "prefix_ratio", r)

    @property
    def closed_loop(self) -> bool:
        return self.concurrency is not None


def requests(traffic: Traffic, n: int | None = None, seed=0) -> dict[str, np.ndarray]:
    """``n`` requests of ``traffic`` as arrays of shape (n,): ``arrival_s`` [s] (0 for every request under
    closed-loop ``concurrency``: the simulator releases them), ``prompt_tokens``, ``output_tokens`` and
    ``prefix_tokens`` (cached prefix, < prompt) [tokens, int64].

    Deterministic for a ``seed``: arrivals, prompt and output lengths come from independent streams spawned
    from it. With a trace, the first ``n`` recorded requests (all of them if ``n`` is None).
    """
    if not isinstance(traffic, Traffic):
        raise SpecError(f"traffic must be a Traffic, got {type(traffic).__name__}")
    if traffic.trace is not None:
        tr = traffic.trace
        n = len(tr) if n is None else _check.integer("n", n, lo=1, hi=len(tr))
        arr, pr, out = (np.array(tr.arrival_s[:n]), np.array(tr.prompt_tokens[:n]),
                        np.array(tr.output_tokens[:n]))
        hit = np.ones(n, dtype=bool)
        if tr.prefix_id is not None:
            pid = tr.prefix_id[:n]
            _, first = np.unique(pid, return_index=True)
            hit = pid >= 0
            hit[first] = False  # the first request of each prefix computes it
    else:
        if n is None:
            raise SpecError("n must be given (an integer >= 1) unless the traffic is a trace")
        n = _check.integer("n", n, lo=1, hi=MAX_REQUESTS)
        ss = np.random.SeedSequence(_seed_entropy(seed)).spawn(3)
        if traffic.rate_per_s is not None:
            arr = poisson_arrivals(traffic.rate_per_s, n, np.random.default_rng(ss[0]))
        else:
            arr = np.zeros(n)
        pr = traffic.isl.sample(n, np.random.default_rng(ss[1]))
        out = traffic.osl.sample(n, np.random.default_rng(ss[2]))
        hit = np.ones(n, dtype=bool)
    prefix = np.where(hit, np.minimum(np.floor(traffic.prefix_ratio * pr), pr - 1), 0).astype(np.int64)
    return {"arrival_s": np.asarray(arr, dtype=float), "prompt_tokens": pr.astype(np.int64),
            "output_tokens": out.astype(np.int64), "prefix_tokens": prefix}


def _seed_entropy(seed):
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) and seed >= 0:
        return int(seed)
    if isinstance(seed, (list, tuple)) and all(isinstance(s, (int, np.integer)) and s >= 0 for s in seed):
        return [int(s) for s in seed]
    raise SpecError(f"seed must be an integer >= 0 (or a list of them), got {_check.shown(seed)}")

"""Replay a trace of requests with shared prefixes against a real block store: load or recompute, measured.

Which question it answers: when the gate of :mod:`llmexplore.models.offload.cost` says "load", how long does the
load really take from this machine's disk, next to what the model says, and what does that do to the time to
first token (TTFT) with and without offload, and with preloading during the queue wait?

How. A trace (:func:`synthetic_trace`: N requests, each one of a few shared prefixes of given lengths plus
its own suffix, Poisson arrivals) is replayed request by request, back to back (the arrival times drive the
queueing arithmetic below, not sleeps):

1. the store (:class:`~.blocks.BlockStore`, keys namespaced by model, KV dtype and block size) says how many
   leading full blocks of the prompt are cached (at most the prompt minus one token: the last token is always
   computed);
2. the gate (``offload.break_even(...)["tokens"]``, exact on the model's curves) decides: "load" exactly when
   the cached tokens are at or above the break-even;
3. a load REALLY reads those block files with the staging reader (O_DIRECT, verified); the loaded prefix ends
   at the first block that misses (a corrupted or vanished block: the rest is recomputed); with
   ``gate=False`` every cached prefix is read, to measure load times over prefix lengths;
4. after its prefill the request's full blocks that are missing are written (random bytes, the model's real
   block size or ``block_bytes``), so later requests with the same prefix find them.

Per request, next to each other: ``measured_read_s`` (the reader's wall time for the blocks, hop 1: disk to
host memory) and ``modelled_read_s`` (the tier's hop 1 for the same bytes, the formula of
:func:`llmexplore.models.offload.cost.hop_times`: ``latency + n (block_overhead + bytes / effective bandwidth)``);
``modelled_load_s`` (the model's whole load, host to GPU included) and ``measured_load_s`` (the measured hop 1
with the modelled host-to-GPU hop added the way the model adds it: pipelined ``max(R + t2, R/n + n t2)``, else
``R + n t2``). With ``block_bytes`` smaller than the real block (to keep a replay small), the measured read is
scaled up by the byte ratio for ``measured_load_s`` (reads of MiB blocks are bandwidth-bound), and
``modelled_read_s`` is of the bytes really read.

With ``pp`` (pipeline stages) or ``speculative`` (a draft model's KV layer) the models' side follows
:mod:`llmexplore.models.offload.cost`: the gate, the modelled load and the recompute are the pipeline's or the
draft's, and the block written and read is what one node's drive reads per block (its stages' layers, the draft's
included: ``hop_times``' ``node_B``); what is measured, the reader's real reads of those files, is unchanged.

TTFT on one prefill instance serving the trace first come, first served (``ttft = wait + service``, plus a
pipeline's latency beyond its service time):
``ttft_recompute_s`` (no offload: every prompt prefilled whole, the model's prefill time),
``ttft_offload_s`` (a loaded request waits for its load, then prefills the rest) and ``ttft_preload_s`` (the
load starts at arrival, during the queue wait; only the part that outlasts the wait is exposed). Decode and
the GPU side of the copy are not simulated.

Layer 1: returns dicts of numpy arrays (the sweeps tabulate, :func:`llmexplore.sweeps.offload.measured_load`).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .. import _check
from ..errors import SpecError
from ..models.offload import cost as of
from .blocks import BlockStore, file_bytes
from .reader import StagingReader

__all__ = ["Trace", "synthetic_trace", "replay", "replay_for_notebook"]


@dataclass(frozen=True)
class Trace:
    """Requests in arrival order: ``arrival_s`` [s], ``prefix_id`` (which shared prefix), ``prefix_tokens``
    (its length), ``tokens`` (each prompt's token ids: the prefix, then the request's own suffix)."""

    arrival_s: np.ndarray
    prefix_id: np.ndarray
    prefix_tokens: np.ndarray
    tokens: tuple[np.ndarray, ...]

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def prompt_tokens(self) -> np.ndarray:
        return np.array([len(t) for t in self.tokens], dtype=float)


def synthetic_trace(n_requests: int = 24, prefix_tokens: Sequence[int] = (1024, 4096, 16384), *,
                    suffix_tokens: int = 256, rate_per_s: float = 2.0, weights: Sequence[float] | None = None,
                    vocab: int = 32000, seed: int = 0) -> Trace:
    """``n_requests`` prompts, each one of the shared prefixes of ``prefix_tokens`` (chosen with ``weights``,
    uniform by default) followed by ``suffix_tokens`` tokens of its own; random token ids below ``vocab``;
    Poisson arrivals at ``rate_per_s`` [1/s]."""
    n = _check.integer("n_requests", n_requests, lo=1, hi=100_000)
    lengths = _check.real_array("prefix_tokens", list(prefix_tokens), lo=0, hi=of.MAX_PREFIX, integer=True,
                                unit="tokens").astype(int).reshape(-1)
    suffix = _check.integer("suffix_tokens", suffix_tokens, lo=1, hi=1 << 20, unit="tokens")
    rate = _check.number("rate_per_s", rate_per_s, lo=0, lo_open=True, hi=1e9, unit="1/s")
    vocab = _check.integer("vocab", vocab, lo=2, hi=2**31 - 1)
    if weights is None:
        p = np.full(lengths.size, 1.0 / lengths.size)
    else:
        w = _check.real_array("weights", list(weights), lo=0)
        if w.shape != lengths.shape or w.sum() <= 0:
            raise SpecError(f"weights must give one non-negative weight per prefix ({lengths.size}) with a positive "
                            f"sum, got {list(weights)}")
        p = w / w.sum()
    rng = np.random.default_rng(_check.integer("seed", seed, lo=0))
    prefixes = [rng.integers(0, vocab, size=int(L)) for L in lengths]
    which = rng.choice(lengths.size, size=n, p=p)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, size=n))
    tokens = tuple(np.concatenate([prefixes[k], rng.integers(0, vocab, size=suffix)]) for k in which)
    return Trace(arrivals, which, lengths[which].astype(float), tokens)


def _fifo(arrival: np.ndarray, service: np.ndarray, load: np.ndarray | None = None) -> np.ndarray:
    """TTFT of one first-come-first-served server [s]; ``load``: a load that starts at arrival and overlaps the
    wait (only what outlasts the wait is added to the service)."""
    ttft = np.empty_like(service)
    free = -math.inf
    for i, (a, s) in enumerate(zip(arrival, service)):
        start = max(a, free)
        if load is not None:
            s = s + max(0.0, load[i] - (start - a))
        free = start + s
        ttft[i] = free - a
    return ttft


def replay(dep, tier, trace: Trace, workdir: str | os.PathLike, *, block_tokens: int = of.DEFAULT_BLOCK_TOKENS,
           pipelined: bool = True, suffix_tokens: int = 256, block_bytes: int | None = None,
           max_inflight: int | None = None, budget_bytes: int | None = None, warm: bool = False,
           gate: bool = True, seed: int = 0, pp=1, speculative=None) -> dict[str, Any]:
    """Replay ``trace`` against a block store under ``workdir`` (module docstring); returns ``{"requests": {name:
    array}, "summary": {...}}``.

    ``dep``: a :class:`~llmexplore.models.step.engine.Deployment` (recompute); ``tier``: a
    :class:`~llmexplore.specs.StorageTier` (the gate and the modelled load); ``suffix_tokens``: the new tokens
    the gate assumes are prefilled anyway (:func:`~llmexplore.models.offload.cost.recompute_s`); ``block_bytes``:
    payload of each written block [B] (default: the model's real block, ``offload.block_bytes``);
    ``max_inflight`` / ``budget_bytes``: the reader's (default: the tier's queue depth, at most 16; four block
    files or 64 MiB, whichever is more); ``warm``: write every shared prefix before the first request;
    ``gate=False``: read every cached prefix, whatever the gate says (to measure load times over prefix
    lengths; the TTFT columns still follow the gate's ``decision``). Files are left in ``workdir`` (the caller
    owns it). ``pp`` / ``speculative``: the models' pipeline and draft layer (module docstring).
    """
    B = _check.integer("block_tokens", block_tokens, lo=1, hi=1 << 16, unit="tokens")
    pipelined = _check.boolean("pipelined", pipelined)
    suffix_tokens = _check.integer("suffix_tokens", suffix_tokens, lo=1, hi=1 << 20, unit="tokens")
    warm = _check.boolean("warm", warm)
    gate = _check.boolean("gate", gate)
    if not isinstance(trace, Trace):
        raise SpecError(f"trace must be a Trace (synthetic_trace), got {type(trace).__name__}")
    kv_dtype = dep.kv_dtype
    pp, spec = of.decoding(dep, pp, speculative)
    dec = {"pp": pp, "speculative": spec}
    hop = of.hop_times(dep, tier, kv_dtype=kv_dtype, block_tokens=B, **dec)
    real_B = int(round(hop["node_B"]))  # what one node's drive reads per block (the whole block at pp = 1)
    blk_B = real_B if block_bytes is None else _check.integer("block_bytes", block_bytes, lo=1, hi=1 << 36, unit="B")
    qd = min(tier.queue_depth, 16) if max_inflight is None else max_inflight
    budget = max(4 * file_bytes(blk_B), 64 << 20) if budget_bytes is None else budget_bytes
    space = f"{dep.model.name}/{kv_dtype}/{B}" + (f"/pp{pp}" if pp > 1 else "") + (
        f"/{spec.name}" if hop["draft_B"] else "")
    store = BlockStore(workdir, block_tokens=B, namespace=space)
    rng = np.random.default_rng(_check.integer("seed", seed, lo=0))

    def payload(_i, _key):
        return rng.bytes(blk_B)

    be = of.break_even(dep, tier, kv_dtype=kv_dtype, block_tokens=B, pipelined=pipelined, suffix_tokens=suffix_tokens,
                       **dec)
    t2 = hop["h2d_s"]
    read_per_block = tier.block_overhead_us * 1e-6 + blk_B / (tier.effective_GBps() * 1e9)
    n_req = len(trace)
    cols = {k: np.full(n_req, np.nan) for k in (
        "cached_tokens", "loaded_tokens", "blocks_read", "block_misses", "measured_read_s", "modelled_read_s",
        "measured_load_s", "modelled_load_s", "recompute_s")}
    decision = np.empty(n_req, dtype=object)
    if warm:
        done_prefixes = set()
        for pid, toks, L in zip(trace.prefix_id, trace.tokens, trace.prefix_tokens):
            if pid not in done_prefixes:
                done_prefixes.add(pid)
                store.put_prefix(toks[: int(L)], payload)
    direct = None
    with StagingReader(qd, budget) as reader:
        for i, toks in enumerate(trace.tokens):
            keys = store.keys(toks)
            n = min(store.lookup(toks), (len(toks) - 1) // B)
            cached = n * B
            load = n > 0 and cached >= be["tokens"]
            decision[i] = "load" if load else "recompute"
            cols["cached_tokens"][i] = cached
            loaded = 0
            if n > 0 and (load or not gate):
                t0 = time.perf_counter()
                ok = np.zeros(n, dtype=bool)
                for st in reader.stream({"path": store.path(k), "key": k, "tag": j} for j, k in enumerate(keys[:n])):
                    ok[st.tag] = st.ok
                    if st.ok:
                        direct = st.direct if direct is None else direct and st.direct
                    else:
                        store.count(st.reason)
                R = time.perf_counter() - t0
                good = int(np.argmin(ok)) if not ok.all() else n  # blocks up to the first miss
                loaded = good * B
                cols["blocks_read"][i] = n
                cols["block_misses"][i] = n - int(ok.sum())
                cols["measured_read_s"][i] = R
                cols["modelled_read_s"][i] = hop["latency_s"] + n * read_per_block
                R_real = R * real_B / blk_B
                cols["measured_load_s"][i] = (max(R_real + t2, R_real / n + n * t2) if pipelined
                                              else R_real + n * t2)
                cols["modelled_load_s"][i] = float(of.load_s(dep, tier, cached, kv_dtype=kv_dtype, block_tokens=B,
                                                             pipelined=pipelined, **dec)["load_s"])
            cols["loaded_tokens"][i] = loaded if load else 0
            store.put_prefix(toks, payload)  # the prefill's blocks, for the requests after this one
        reader_stats = reader.stats()
    written = store.size_bytes()
    prompt = trace.prompt_tokens
    loaded_tokens = cols["loaded_tokens"]
    cols["recompute_s"] = of.recompute_s(dep, cols["cached_tokens"], suffix_tokens=suffix_tokens, **dec)
    whole = of.prefill_parts(dep, prompt, 0, **dec)
    left = of.prefill_parts(dep, prompt, loaded_tokens, **dec)
    full, rest = whole["service_s"], left["service_s"]
    is_load = decision == "load"
    load_time = np.where(is_load, np.nan_to_num(cols["measured_load_s"]), 0.0)
    # a pipeline answers a prompt its latency after it starts, and holds the server for its service time
    beyond = np.where(is_load, left["latency_s"] - rest, whole["latency_s"] - full)
    requests = {
        "request": np.arange(n_req), "arrival_s": trace.arrival_s, "prefix_id": trace.prefix_id,
        "prefix_tokens": trace.prefix_tokens, "prompt_tokens": prompt, **cols, "decision": decision.astype(str),
        "prefill_full_s": full, "prefill_rest_s": np.where(is_load, rest, full),
        "ttft_recompute_s": _fifo(trace.arrival_s, full) + (whole["latency_s"] - full),
        "ttft_offload_s": _fifo(trace.arrival_s, np.where(is_load, rest + load_time, full)) + beyond,
        "ttft_preload_s": _fifo(trace.arrival_s, np.where(is_load, rest, full), load_time) + beyond,
    }
    summary = {
        "break_even_tokens": be["tokens"], "set_by": be["set_by"], "tier": tier.name, "model": dep.model.name,
        "kv_dtype": kv_dtype, "block_tokens": B, "real_block_B": real_B, "replay_block_B": blk_B,
        "scale": blk_B / real_B, "pipelined": pipelined, "requests": n_req, "loads": int(is_load.sum()),
        "direct": direct, "bytes_written": written, "bytes_read": reader_stats["bytes_read"],
        "store": store.stats(), "reader": reader_stats, "workdir": str(Path(workdir)),
        **{f"mean_{k}": float(np.mean(requests[k])) for k in ("ttft_recompute_s", "ttft_offload_s", "ttft_preload_s")},
    }
    return {"requests": requests, "summary": summary}


#: largest block written by :func:`replay_for_notebook` [B] (a real Llama-3-70B block is 80 MiB)
NOTEBOOK_BLOCK_BYTES = 1 << 20


def replay_for_notebook(setup, workdir: str | os.PathLike, *, n_requests: int = 16,
                        prefix_tokens: Sequence[int] | None = None, rate_per_s: float = 2.0,
                        max_block_bytes: int = NOTEBOOK_BLOCK_BYTES, seed: int = 0) -> dict[str, np.ndarray]:
    """The per-request table of a small :func:`replay` for the notebook (``setup``: an
    :class:`~llmexplore.sweeps.offload.OffloadSetup` or anything with ``dep``, ``tier``, ``block_tokens``,
    ``pipelined`` and ``suffix_tokens``), with ``modelled_ms`` / ``measured_ms`` = the read from the disk (hop 1)
    as modelled and as measured (NaN where the request recomputed). Blocks are capped at ``max_block_bytes``;
    the prefixes default to 4, 16 and 48 blocks, and every cached prefix is read (``gate=False``), so the
    comparison spans prefix lengths whatever the gate decides."""
    B = setup.block_tokens
    if prefix_tokens is None:
        prefix_tokens = (4 * B, 16 * B, 48 * B)
    trace = synthetic_trace(n_requests, prefix_tokens, suffix_tokens=setup.suffix_tokens, rate_per_s=rate_per_s,
                            seed=seed)
    dec = {"pp": getattr(setup, "pp", 1), "speculative": getattr(setup, "speculative", None)}
    real = int(round(of.hop_times(setup.dep, setup.tier, block_tokens=B, **dec)["node_B"]))
    cap = _check.integer("max_block_bytes", max_block_bytes, lo=4096, hi=1 << 36, unit="B")
    out = replay(setup.dep, setup.tier, trace, workdir, block_tokens=B, pipelined=setup.pipelined,
                 suffix_tokens=setup.suffix_tokens, block_bytes=min(real, cap), warm=True, gate=False, seed=seed,
                 **dec)
    req = dict(out["requests"])
    req["modelled_ms"] = req["modelled_read_s"] * 1e3
    req["measured_ms"] = req["measured_read_s"] * 1e3
    return req

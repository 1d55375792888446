"""Measure multi-query decode attention (speculative-decoding verify) on the local GPU.

Speculative decoding's verify step runs the target model over k + 1 tokens per sequence: each
sequence's k + 1 queries attend to its whole KV cache, causally within the new block
(lower-right causal mask). Decode attention is bound by reading the KV cache, so the question
this script answers is how the kernel time grows with the query length q_len = k + 1 at fixed
batch, KV length and head layout, relative to q_len = 1 (plain decode).

It times torch's scaled_dot_product_attention (flash backend) with the query heads of each KV
group folded into the query length, as decode kernels that pack GQA do (FlashInfer, FA3's
pack_gqa): q (batch, kv_heads, group * q_len, head_dim) against k, v (batch, kv_heads, kv_len,
head_dim), so the KV is read once per KV head. The causal mask inside the new block is left out:
it removes at most q_len * (q_len - 1) / 2 of q_len * kv_len scores (under 0.1% at kv_len 1024,
q_len 8). torch's own lower-right causal path (CausalBias with enable_gqa) expands KV per query
head and reads it group times, which no serving kernel does, so it is not what is measured; the
native enable_gqa q_len = 1 call is timed as well (method 'gqa_native') as the folded layout's
check. CUDA events: 5 warm-ups, then the median of 25 timed calls, each one launch over the batch. Writes a CSV with
provenance comment lines to the path given (default verify_attention.csv).

Run: python3 benchmarks/gpu/verify_attention.py OUT.csv   (needs a CUDA GPU and torch >= 2.5)
"""
from __future__ import annotations

import datetime
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# (q heads, kv heads, head dim) per rank: Llama-3-70B at TP8 (8/1), TP2 (32/4), TP1 (64/8)
HEAD_LAYOUTS = [(8, 1, 128), (32, 4, 128), (64, 8, 128)]
BATCHES = [1, 8, 32, 128]
KV_LENS = [1024, 4096, 16384]
Q_LENS = [1, 2, 3, 4, 5, 6, 8]
WARMUP, REPS = 5, 25
MAX_KV_BYTES = 12e9  # skip shapes whose KV alone exceeds this (keeps the run short)


def time_call(fn) -> float:
    """Median latency of fn() in microseconds, by CUDA events."""
    for _ in range(WARMUP):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(REPS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def folded_call(q, k, v):
    """Verify attention with each KV group's query heads folded into the query length."""
    def call():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v)
    return call


def native_call(q, k, v):
    """Plain decode attention through SDPA's own GQA path (q_len 1, no mask)."""
    def call():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    return call


def main(path: str) -> None:
    dev = torch.device("cuda")
    rows = []
    for heads, kv_heads, head_dim in HEAD_LAYOUTS:
        for batch in BATCHES:
            for kv_len in KV_LENS:
                kv_bytes = 2 * batch * kv_heads * kv_len * head_dim * 2
                if kv_bytes > MAX_KV_BYTES:
                    continue
                k = torch.randn(batch, kv_heads, kv_len, head_dim, device=dev, dtype=torch.bfloat16)
                v = torch.randn_like(k)
                group = heads // kv_heads
                q1 = torch.randn(batch, heads, 1, head_dim, device=dev, dtype=torch.bfloat16)
                us = time_call(native_call(q1, k, v))
                rows.append(("gqa_native", batch, 1, kv_len, heads, kv_heads, head_dim, kv_bytes, round(us, 3)))
                for q_len in Q_LENS:
                    q = torch.randn(batch, kv_heads, group * q_len, head_dim, device=dev, dtype=torch.bfloat16)
                    us = time_call(folded_call(q, k, v))
                    rows.append(("gqa_folded", batch, q_len, kv_len, heads, kv_heads, head_dim, kv_bytes, round(us, 3)))
                    print(rows[-1], flush=True)
                del k, v
                torch.cuda.empty_cache()
    props = torch.cuda.get_device_properties(0)
    with open(path, "w") as out:
        out.write(f"# source: own measurement, benchmarks/gpu/verify_attention.py, {datetime.date.today().isoformat()}\n")
        out.write(f"# device: {props.name}, {props.multi_processor_count} SMs; torch {torch.__version__}, CUDA {torch.version.cuda}\n")
        out.write(f"# method: torch SDPA flash backend, bf16 Q/K/V, no mask; method gqa_folded = query heads of a KV group folded into the query length, gqa_native = enable_gqa at q_len 1; "
                  f"latency_us = median of {REPS} CUDA-event timings after {WARMUP} warm-ups\n")
        out.write("method,batch,q_len,kv_len,heads,kv_heads,head_dim,kv_bytes,latency_us\n")
        for row in rows:
            out.write(",".join(str(x) for x in row) + "\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "verify_attention.csv")

"""GPU energy per output token against the ML.ENERGY leaderboard's measurements (docs/models.md §8.7): a check,
never a fit. ``data/validation/energy.csv`` holds ML.ENERGY v3.0's saturated vLLM 0.11.1 servers (LM Arena chat
task, H100 and B200): measured board energy per output token at each ``max_num_seqs``, prefill included.

Each row is priced as the planner prices a served deployment (:func:`llmexplore.models.step.energy.request_energy_J`):
one TP instance of the row's GPUs, the vLLM runtime preset, the measured mean batch, the model's own decode step
time at it and its own prefill. Requests take turns: an instance finishes one request per prefill plus osl decode
steps shared by the batch, so rate = 1 / (t_prefill + osl t_step / batch). Assumptions, as for the ML.ENERGY
decode rows of ``e2e.csv``: prompts of 1,000 tokens (not published), BF16 KV (vLLM's ``auto``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ... import presets
from ...models.step import energy as en
from ...models.step.decode import step_time
from ...models.step.engine import Deployment
from ...models.step.prefill import prefill_time

__all__ = ["ENERGY_CSV", "PROMPT_TOKENS", "energy_table", "energy_summary"]

ENERGY_CSV = presets.DATA_DIR / "validation" / "energy.csv"
#: assumption: ML.ENERGY does not publish its prompt lengths (LM Arena conversations); the e2e.csv decode rows of the
#: same runs assume the same 1,000 tokens
PROMPT_TOKENS = 1000


def _row_energy(r) -> dict:
    g = int(r["num_gpus"])
    dep = Deployment.build(r["model"], r["gpu"], g, runtime="vllm", weight_dtype=r["weight_dtype"], kv_dtype="bf16")
    rates = en.energy_rates(dep, presets.power(r["gpu"]))
    b = max(1, int(round(float(r["avg_batch"]))))
    osl = float(r["avg_output_len"])
    ctx = PROMPT_TOKENS + osl / 2.0
    t = float(step_time(dep, b, ctx, "TP")["step_s"])
    t_pf = float(prefill_time(dep, PROMPT_TOKENS)["step_s"])
    step_dyn = float(en.dynamic_J(rates, g, t, *en.decode_work(dep, "TP", b, ctx)))
    pf_dyn = float(en.dynamic_J(rates, g, t_pf, *en.prefill_work(dep, PROMPT_TOKENS)))
    rate = 1.0 / (t_pf + osl * t / b)
    e_req = float(en.request_energy_J(g * rates.idle_W, rate, pf_dyn, step_dyn, b, osl))
    # the power model alone, at the measured operating point: measured ITL and throughput, the model's work
    t_m = float(r["median_itl_ms"]) / 1e3
    rate_m = float(r["output_tokens_per_s"]) / osl
    dyn_m = float(en.dynamic_J(rates, g, t_m, *en.decode_work(dep, "TP", b, ctx)))
    e_m = float(en.request_energy_J(g * rates.idle_W, rate_m, pf_dyn, dyn_m, b, osl))
    return {"predicted_J": e_req / osl, "predicted_W": e_req * rate, "predicted_itl_ms": t * 1e3,
            "power_model_W": min(e_m * rate_m, g * rates.tdp_W)}


def energy_table(path=None) -> pd.DataFrame:
    """Every ML.ENERGY row whose GPU has a power preset, priced: measured and predicted J per output token, the
    error [%] (predicted / measured - 1), measured and predicted average board power [W] over the row's GPUs, and
    ``power_model_W`` / ``power_error_pct``: the power model alone, fed the measured ITL and throughput (what is
    left when the step-time model's error and the unknown prompt length are taken out)."""
    df = pd.read_csv(path or ENERGY_CSV)
    powered = set(presets.names("power"))
    df = df[df["gpu"].isin(powered) & df["model"].isin(presets.names("models"))].reset_index(drop=True)
    got = pd.DataFrame([_row_energy(r) for _, r in df.iterrows()])
    out = pd.concat([df, got], axis=1)
    out["error_pct"] = 100.0 * (out["predicted_J"] / out["energy_per_output_token_J"] - 1.0)
    out["power_error_pct"] = 100.0 * (out["power_model_W"] / out["avg_power_W"] - 1.0)
    return out


def energy_summary(table: pd.DataFrame, column: str = "error_pct") -> dict:
    """Rows, median |error| [%], MAPE [%], median signed error [%] and the share within 25 %, overall and by GPU,
    of J per output token (``error_pct``; ``column="power_error_pct"``: the power model alone)."""
    def stats(t):
        e = t[column].to_numpy(float)
        return {"rows": int(e.size), "median_abs_pct": float(np.median(np.abs(e))), "mape_pct": float(np.mean(
            np.abs(e))), "median_pct": float(np.median(e)), "within_25_pct": float(np.mean(np.abs(e) <= 25.0) * 100)}

    return {"all": stats(table), **{g: stats(t) for g, t in table.groupby("gpu")}}

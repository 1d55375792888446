"""What a planned configuration costs and the energy it uses: $/hour, $ per million input / output / all tokens,
GPU board energy per output token and output tokens/s per MW of all-in power (docs/models.md §8.7).

* **Dollars.** A pool of n instances of G GPUs at p USD per GPU-hour costs n G p per hour (the price tier's,
  dated, or the user's). Per million tokens: the deployment's $/hour over the tokens it serves per hour. Input
  tokens pay for the GPU time of their prefill, output tokens for the rest: in disaggregated serving each pool's
  cost goes to its own tokens; a colocated instance's cost is split by the share of its time spent in prefill
  (rate per instance x the prompt's prefill time), the remainder (decode and idle) going to output tokens.
* **Energy.** :func:`llmexplore.models.step.energy.request_energy_J`: idle power of every GPU over a request's
  share of the time, plus its prefill's and decode steps' dynamic energy (the energy roofline), per output token
  as ML.ENERGY reports it.
* **Power.** Output tokens/s over the provisioned all-in power of every GPU (GPU, host and network share, PUE:
  :attr:`~llmexplore.specs.GpuPower.all_in_kW`), per MW.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...models.step import cost as co
from ...models.step import energy as en

__all__ = ["Economics", "COLUMNS"]

#: the columns :meth:`Economics.columns` adds to a planner row
COLUMNS = ["prefill_gpu", "decode_gpu", "usd_per_hour", "usd_per_mtok_input", "usd_per_mtok_output",
           "usd_per_mtok_total", "j_per_token", "tokens_per_s_per_MW", "price_dates"]


@dataclass
class Economics:
    """Prices and power presets of a question's GPU types (either may be None: not priced / not powered)."""

    prices: dict | None
    powers: dict | None
    isl: int
    osl: int
    _rates: dict = field(default_factory=dict)

    @classmethod
    def of(cls, q) -> "Economics":
        return cls(q.priced(), q.powered(), q.isl, q.osl)

    def usd_per_hour(self, inst) -> float:
        """Price of one instance [USD/hour] (0 when the question is not priced)."""
        return inst.gpus * self.prices[inst.gpu].usd_per_gpu_hour if self.prices else 0.0

    def rates(self, inst) -> en.EnergyRates | None:
        if self.powers is None:
            return None
        key = ("rates", id(inst.dep))  # deployments are shared by every row of an instance within one search
        if key not in self._rates:
            self._rates[key] = en.energy_rates(inst.dep, self.powers[inst.gpu])
        return self._rates[key]

    def prefill_dynamic_J(self, inst) -> float:
        """Dynamic board energy of one prompt's prefill on ``inst`` [J] (its GPUs at most at TDP over the
        prefill's service time)."""
        key = ("prefill", id(inst.dep), inst.pp, inst.prefill_s)
        if key not in self._rates:
            r = self.rates(inst)
            flops, bytes_ = en.prefill_work(inst.dep, self.isl)
            self._rates[key] = float(en.dynamic_J(r, inst.gpus, inst.prefill_s, flops, bytes_))
        return self._rates[key]

    def decode_dynamic_J(self, inst, mean_batch: float, spec) -> tuple[float, float]:
        """(dynamic board energy of one decode step of ``inst`` at ``mean_batch`` sequences [J], tokens per
        sequence the step emits): a speculative step verifies k + 1 tokens and emits tau."""
        r = self.rates(inst)
        b = max(float(mean_batch), 1.0)
        tau = spec.tokens_per_step if spec is not None else 1.0
        q_tok = spec.verify_width if spec is not None else 1
        t = float(np.interp(b, inst.batches, inst.step_s)) * tau  # step_s is per output token
        ctx = self.isl + self.osl / 2.0
        flops, bytes_ = en.decode_work(inst.dep, inst.layout, b, ctx, q_tok)
        return float(en.dynamic_J(r, inst.gpus, t, flops, bytes_)), tau

    def columns(self, rate: float, pools: list, prefill, decode, mean_batch: float, spec,
                input_share: float | None = None) -> dict:
        """The economics of one feasible row: ``pools`` [(instance, count)], ``prefill`` / ``decode`` the
        instances that prefill and decode (the same one colocated), served at ``rate`` [req/s] with
        ``mean_batch`` sequences per decode step. ``input_share``: the share of a colocated deployment's cost that
        its prefill takes (None: disaggregated, each pool pays its own tokens)."""
        out = {"prefill_gpu": prefill.gpu if input_share is None else "", "decode_gpu": decode.gpu}
        out.update({c: np.nan for c in COLUMNS[2:]})
        out["price_dates"] = ""
        if self.prices is not None:
            usd = sum(n * self.usd_per_hour(i) for i, n in pools)
            usd_in = (pools[0][1] * self.usd_per_hour(pools[0][0]) if input_share is None
                      else usd * min(max(input_share, 0.0), 1.0))
            out.update(usd_per_hour=usd, usd_per_mtok_total=float(co.usd_per_mtok(usd, rate * (self.isl + self.osl))),
                       usd_per_mtok_input=float(co.usd_per_mtok(usd_in, rate * self.isl)),
                       usd_per_mtok_output=float(co.usd_per_mtok(usd - usd_in, rate * self.osl)),
                       price_dates="; ".join(dict.fromkeys(f"{i.gpu} {self.prices[i.gpu].date}" for i, _ in pools)))
        if self.powers is not None:
            idle = sum(n * i.gpus * self.powers[i.gpu].idle_W for i, n in pools)
            dyn, tau = self.decode_dynamic_J(decode, mean_batch, spec)
            e_req = en.request_energy_J(idle, rate, self.prefill_dynamic_J(prefill), dyn, mean_batch, self.osl, tau)
            kw = sum(n * i.gpus * self.powers[i.gpu].all_in_kW for i, n in pools)
            out.update(j_per_token=float(e_req) / self.osl,
                       tokens_per_s_per_MW=float(co.tokens_per_s_per_MW(rate * self.osl, kw)))
        return out

"""The price of an area notebook's GPU in a price tier (``data/prices.yaml``; docs/models.md §8.7).

The arithmetic is :mod:`llmexplore.models.step.cost`'s; this module only looks the price up, so the models never
resolve a preset. A GPU the tier does not list has no price there: :func:`tier_price` returns None and the
notebooks say :func:`not_priced` instead of showing a number.
"""

from __future__ import annotations

from .. import presets
from ..specs import GpuPrice
from .plan.question import DEFAULT_PRICE_TIER

__all__ = ["DEFAULT_PRICE_TIER", "tier_price", "not_priced", "price_label", "price_record"]


def tier_price(tier: str, gpu: str) -> GpuPrice | None:
    """The price of GPU preset ``gpu`` in price tier ``tier`` (None where the tier has none); UnknownPresetError
    naming the known tiers for an unknown ``tier``."""
    return presets.price_tier(tier).prices.get(gpu)


def not_priced(tier: str, gpu: str) -> str:
    """What a notebook says where ``tier`` has no price for ``gpu``: the tiers that do price it, if any."""
    others = [n for n in presets.names("prices") if gpu in presets.price_tier(n).prices]
    return (f"not priced: tier {tier} has no price for {gpu}"
            + (f" (tiers that price it: {', '.join(others)})" if others else " (no tier prices it)"))


def price_label(tier: str, price: GpuPrice) -> str:
    """``"$6.155 per GPU-hour (neocloud-on-demand, 2026-10-24)"``: the price with its tier and date (at least two
    decimals, at most four)."""
    usd = f"{price.usd_per_gpu_hour:,.4f}".rstrip("0")
    usd += "0" * max(0, 2 - len(usd.split(".")[1]))
    return f"${usd} per GPU-hour ({tier}, {price.date})"


def price_record(tier: str, gpu: str) -> dict:
    """What a notebook records of the price it used: ``{"tier", "gpu", "usd_per_gpu_hour", "date"}`` (USD per
    GPU-hour and the date it was read; both None where ``tier`` has no price for ``gpu``); UnknownPresetError
    naming the known tiers for an unknown ``tier``."""
    price = tier_price(tier, gpu)
    return {"tier": tier, "gpu": gpu, "usd_per_gpu_hour": None if price is None else price.usd_per_gpu_hour,
            "date": None if price is None else price.date}

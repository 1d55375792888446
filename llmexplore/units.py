"""Unit constants and element sizes.

Conventions (see data/README.md): GB = 1e9 B, GiB = 2**30 B, TB/s = 1e12 B/s, link bandwidths per direction.
One multiply-accumulate = 2 FLOPs; peak TFLOPS are dense (datasheets often quote 2:4-sparse = 2x dense).
"""

from __future__ import annotations

from .errors import SpecError

KB = 1e3
MB = 1e6
GB = 1e9
TB = 1e12
KiB = 2.0**10
MiB = 2.0**20
GiB = 2.0**30
US = 1e-6
MS = 1e-3

#: bytes per element of each supported dtype. ``fp4`` is NVFP4: a 4-bit E2M1 value plus one FP8 (E4M3) scale
#: shared by each block of 16 elements, 0.5 + 1/16 = 0.5625 B per element (the per-tensor FP32 scale is
#: negligible). The block scale is counted: it is stored and read with the values (NVIDIA, "Introducing NVFP4
#: for Efficient and Accurate Low-Precision Inference", NVIDIA Technical Blog, 24 June 2025; 16 values take
#: 8 B of packed FP4 plus a 1 B scale = 9 B, as in the cuTile NVFP4 tutorial and ModelOpt's NVFP4 checkpoint
#: format, group_size 16). FP8's per-tensor scales are neglected (1 B per element).
#: bytes per element, block scales counted: fp4 is NVFP4 (an FP8 scale per 16 elements), mxfp4 the OCP MX format
#: (an 8-bit power-of-two scale per 32: gpt-oss's experts)
DTYPE_BYTES: dict[str, float] = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5 + 1.0 / 16,
                                 "mxfp4": 0.5 + 1.0 / 32}


def dtype_bytes(dtype: str, field: str = "dtype") -> float:
    """Bytes per element of ``dtype``; SpecError naming ``field`` if the dtype is unknown."""
    try:
        return DTYPE_BYTES[dtype]
    except (KeyError, TypeError):
        raise SpecError(f"{field} must be one of {sorted(DTYPE_BYTES)}, got {dtype!r}") from None


# ---- unit conversion for tables ---------------------------------------------------------------------------
#: how to get from the SI base unit (s, B) to each display unit: multiply (smaller units) or divide (larger)
_FROM_SI: dict[str, tuple[str, float]] = {
    "s": ("*", 1.0), "ms": ("*", 1e3), "us": ("*", 1e6),
    "B": ("*", 1.0), "KB": ("/", KB), "MB": ("/", MB), "GB": ("/", GB), "TB": ("/", TB), "GiB": ("/", GiB),
}
_BASE_OF = {"s": "s", "ms": "s", "us": "s", "B": "B", "KB": "B", "MB": "B", "GB": "B", "TB": "B", "GiB": "B"}


def from_si(value, unit: str):
    """``value`` in seconds or bytes expressed in ``unit`` (``"ms"``, ``"us"``, ``"GB"``, ``"GiB"``, ...)."""
    try:
        op, k = _FROM_SI[unit]
    except KeyError:
        raise SpecError(f"unit must be one of {', '.join(_FROM_SI)}, got {unit!r}") from None
    return value * k if op == "*" else value / k


def si_unit_of(name: str) -> str | None:
    """The SI unit suffix of a result name (``"step_s"`` -> ``"s"``, ``"kv_B"`` -> ``"B"``), else None.

    Rates (``"tokens_per_s"``) are not times: they are left alone."""
    if "_per_" in name:
        return None
    for suffix in ("_s", "_B"):
        if name.endswith(suffix):
            return suffix[1:]
    return None


def display_name(name: str, unit: str) -> str:
    """``"step_s"`` shown in ms is ``"step_ms"``; the base of ``unit`` must match the name's suffix."""
    base = si_unit_of(name)
    if base is None or _BASE_OF.get(unit) != base:
        raise SpecError(f"cannot show {name!r} in {unit!r}: names end in _s (time) or _B (bytes)")
    return name[: -len(base)] + unit

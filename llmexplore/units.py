"""Unit constants and element sizes.

Conventions (see data/README.md): GB = 1e9 B, GiB = 2**30 B, TB/s = 1e12 B/s, link bandwidths per direction.
One multiply-accumulate = 2 FLOPs; peak TFLOPS are dense (datasheets often quote 2:4-sparse = 2x dense).
"""

from __future__ import annotations

KB = 1e3
MB = 1e6
GB = 1e9
TB = 1e12
KiB = 2.0**10
MiB = 2.0**20
GiB = 2.0**30
US = 1e-6
MS = 1e-3

#: bytes per element of each supported dtype
DTYPE_BYTES: dict[str, float] = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0}


def dtype_bytes(dtype: str, field: str = "dtype") -> float:
    """Bytes per element of ``dtype``; SpecError naming ``field`` if the dtype is unknown."""
    from .errors import SpecError

    try:
        return DTYPE_BYTES[dtype]
    except (KeyError, TypeError):
        raise SpecError(f"{field} must be one of {sorted(DTYPE_BYTES)}, got {dtype!r}") from None

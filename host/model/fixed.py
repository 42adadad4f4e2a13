"""Fixed-point conversions and the pooling arithmetic, bit-exact with the RTL.

See docs/design.md, "Arithmetic". Elements are int32 holding ``q / 2**frac_bits``.
"""

import numpy as np

__all__ = ["to_fixed", "from_fixed", "wrap32", "fits32"]

_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1


def to_fixed(x, frac_bits):
    """Round ``x * 2**frac_bits`` to the nearest integer (halves away from zero), saturating to int32."""
    scaled = np.asarray(x, dtype=np.float64) * (1 << frac_bits)
    q = np.sign(scaled) * np.floor(np.abs(scaled) + 0.5)
    return np.clip(q, _I32_MIN, _I32_MAX).astype(np.int32)


def from_fixed(q, frac_bits):
    return np.asarray(q, dtype=np.float64) / (1 << frac_bits)


def wrap32(x):
    """Low 32 bits of an exact integer, as int32 (two's complement wrap)."""
    return np.asarray(x, dtype=np.int64).astype(np.uint32).astype(np.int32)


def fits32(x):
    x = np.asarray(x, dtype=np.int64)
    return (x >= _I32_MIN) & (x <= _I32_MAX)

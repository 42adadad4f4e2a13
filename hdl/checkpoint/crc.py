"""CRC-32C of a 512-bit line in one cycle, as an XOR network (host/records.py defines it)."""

from functools import lru_cache

from amaranth import *

from trainingcxl.host.config import LINE_BITS
from trainingcxl.host.records import CRC_INIT, CRC_XOR, crc_update

__all__ = ["CRC_INIT", "CRC_XOR", "crc_line"]


@lru_cache(maxsize=None)
def _taps():
    """For each output bit, the state bits and the line bits whose XOR it is."""
    state_resp = [crc_update(1 << j, 0) for j in range(32)]
    line_resp = [crc_update(0, 1 << i) for i in range(LINE_BITS)]
    taps = []
    for out in range(32):
        s = tuple(j for j in range(32) if state_resp[j] >> out & 1)
        d = tuple(i for i in range(LINE_BITS) if line_resp[i] >> out & 1)
        taps.append((s, d))
    return tuple(taps)


def crc_line(state, line):
    """The CRC register after ``line`` (512 bits; a narrower value is zero-extended),
    from ``state`` (32 bits); combinational."""
    line = Value.cast(line)
    bits = []
    for s, d in _taps():
        bits.append(Cat(*(state[j] for j in s), *(line[i] for i in d if i < len(line))).xor())
    return Cat(*bits)

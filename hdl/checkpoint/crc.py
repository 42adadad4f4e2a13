"""CRC-32C of 512-bit lines as XOR networks (spec/records.py defines the CRC).

``crc_line`` takes a whole line in one cycle. ``crc_part`` takes one of
``folds`` equal parts, most significant first, so that ``folds`` cycles give the
same CRC with a network about ``folds`` times smaller: ``Config.crc_folds``
trades those cycles for the logic and wiring of a board.
"""

from functools import lru_cache

from amaranth import *

from trainingcxl.spec.config import LINE_BITS
from trainingcxl.spec.records import CRC_INIT, CRC_XOR, crc_update

__all__ = ["CRC_INIT", "CRC_XOR", "crc_line", "crc_part"]


@lru_cache(maxsize=None)
def _taps(width):
    """For each output bit, the state bits and the input bits (of ``width``) whose XOR it is."""
    nbytes = width // 8
    state_resp = [crc_update(1 << j, 0, nbytes) for j in range(32)]
    data_resp = [crc_update(0, 1 << i, nbytes) for i in range(width)]
    taps = []
    for out in range(32):
        s = tuple(j for j in range(32) if state_resp[j] >> out & 1)
        d = tuple(i for i in range(width) if data_resp[i] >> out & 1)
        taps.append((s, d))
    return tuple(taps)


def _network(state, value, width):
    value = Value.cast(value)
    bits = []
    for s, d in _taps(width):
        bits.append(Cat(*(state[j] for j in s), *(value[i] for i in d if i < len(value))).xor())
    return Cat(*bits)


def crc_line(state, line):
    """The CRC register after ``line`` (512 bits; a narrower value is zero-extended),
    from ``state`` (32 bits); combinational."""
    return _network(state, line, LINE_BITS)


def crc_part(state, line, index, folds):
    """The CRC register after part ``index`` (a signal, 0 first) of ``line`` cut into
    ``folds`` parts, most significant first, from ``state``; combinational. Feeding
    parts ``0 .. folds - 1`` in turn gives :func:`crc_line`."""
    if folds == 1:
        return crc_line(state, line)
    width = LINE_BITS // folds
    line = Value.cast(line)
    if len(line) < LINE_BITS:
        line = Cat(line, C(0, LINE_BITS - len(line)))
    parts = Array(line[(folds - 1 - k) * width:(folds - k) * width] for k in range(folds))
    return _network(state, parts[index], width)

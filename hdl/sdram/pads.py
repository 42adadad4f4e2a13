"""The pins of an SDR SDRAM chip, as a signature: what the controller drives and reads."""

from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["SdramPadsSignature", "Command", "address_bits"]


def address_bits(timing):
    """Width of the address bus: a row, a column, or A10 (the precharge-all bit)."""
    return max(11, (timing.rows - 1).bit_length(), (timing.cols - 1).bit_length())


class Command:
    """(``ras_n``, ``cas_n``, ``we_n``) of each command, chip selected (JEDEC SDR)."""
    NOP = (1, 1, 1)
    ACTIVE = (0, 1, 1)
    READ = (1, 0, 1)
    WRITE = (1, 0, 0)
    PRECHARGE = (0, 1, 0)
    REFRESH = (0, 0, 1)
    MODE = (0, 0, 0)
    BURST_STOP = (1, 1, 0)


class SdramPadsSignature(wiring.Signature):
    """The chip's pins seen from the controller, before any I/O register.

    Members
    -------
    cke, cs_n, ras_n, cas_n, we_n : Out(1)
    ba : Out(log2 banks), a : Out(:func:`address_bits`)
    dqm : Out(dq_bits / 8)
        Byte masks: a write leaves masked bytes alone.
    dq_o : Out(dq_bits), dq_oe : Out(1)
        Write data, driven when ``dq_oe``.
    dq_i : In(dq_bits)
        What the chip drives.
    """

    def __init__(self, timing):
        self._timing = timing
        super().__init__({
            "cke": Out(1), "cs_n": Out(1), "ras_n": Out(1), "cas_n": Out(1), "we_n": Out(1),
            "ba": Out((timing.banks - 1).bit_length()),
            "a": Out(address_bits(timing)),
            "dqm": Out(timing.dq_bits // 8),
            "dq_o": Out(timing.dq_bits), "dq_oe": Out(1),
            "dq_i": In(timing.dq_bits),
        })

    def __eq__(self, other):
        return isinstance(other, SdramPadsSignature) and other._timing == self._timing

    def __repr__(self):
        return f"SdramPadsSignature({self._timing!r})"

"""CRC-32C of 512-bit lines as XOR networks (spec/records.py defines the CRC).

``crc_line`` takes a whole line in one cycle. ``crc_part`` takes one of
``folds`` equal parts, most significant first, so that ``folds`` cycles give the
same CRC with a network about ``folds`` times smaller: ``Config.crc_folds``
trades those cycles for the logic and wiring of a board.

Each network is a :class:`CrcNetwork`. In the simulators' netlist it becomes
an instance of the behavioural module in ``crc.v``: Verilator computes it with
a table per byte in C (``sim/dpi/crc32c.cpp``), where the XOR network of a line
costs about a thousand word operations every cycle, a third of the device's
simulation time; Icarus evaluates the same network from masks.
"""

from functools import lru_cache
from pathlib import Path

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from trainingcxl.spec.config import LINE_BITS
from trainingcxl.spec.records import CRC_INIT, CRC_XOR, crc_update
from ..common.netlist import behavioural

__all__ = ["CRC_INIT", "CRC_XOR", "CrcNetwork", "crc_line", "crc_part", "VERILOG", "CRC_MODULE"]

#: The behavioural Verilog of :class:`CrcNetwork` (module :data:`CRC_MODULE`).
VERILOG = Path(__file__).with_name("crc.v")
CRC_MODULE = "tcxl_crc"


@lru_cache(maxsize=None)
def _masks(width):
    """For each output bit, the mask of state bits (low 32) and input bits (above)
    whose XOR it is."""
    nbytes = width // 8
    state_resp = [crc_update(1 << j, 0, nbytes) for j in range(32)]
    data_resp = [crc_update(0, 1 << i, nbytes) for i in range(width)]
    return tuple(sum(1 << j for j in range(32) if state_resp[j] >> out & 1)
                 | sum(1 << (32 + i) for i in range(width) if data_resp[i] >> out & 1)
                 for out in range(32))


class CrcNetwork(wiring.Component):
    """The CRC register after ``width`` bits of data (a multiple of 8, most
    significant byte first) from ``state``; combinational.

    Members
    -------
    state : In(32)
    data : In(width)
    crc : Out(32)
    """

    def __init__(self, width):
        if width % 8 or not 8 <= width <= LINE_BITS:
            raise ValueError(f"a CRC network takes whole bytes of at most a line, not {width} bits")
        self._width = width
        super().__init__({"state": In(32), "data": In(width), "crc": Out(32)})

    def elaborate(self, platform):
        m = Module()
        masks = _masks(self._width)
        if behavioural(platform):
            bits = 32 + self._width
            m.submodules.crc = Instance(
                CRC_MODULE, p_WIDTH=self._width,
                p_MASKS=Const(sum(mask << (k * bits) for k, mask in enumerate(masks)), 32 * bits),
                i_state=self.state, i_data=self.data, o_crc=self.crc)
        else:
            # Each output bit as the XOR of its taps: the network the boards build.
            word = Cat(self.state, self.data)
            m.d.comb += self.crc.eq(Cat(*(
                Cat(*(word[i] for i in range(len(word)) if mask >> i & 1)).xor()
                for mask in masks)))
        return m


def crc_line(m, state, line):
    """The CRC register after ``line`` (512 bits; a narrower value is zero-extended),
    from ``state`` (32 bits): a network added to ``m``."""
    net = CrcNetwork(LINE_BITS)
    m.submodules += net
    m.d.comb += [net.state.eq(state), net.data.eq(line)]
    return net.crc


def crc_part(m, state, line, index, folds, advance):
    """The CRC register after part ``index`` (a signal, 0 first) of ``line`` cut into
    ``folds`` parts, most significant first, from ``state``: a network added to
    ``m``. Feeding parts ``0 .. folds - 1`` in turn gives :func:`crc_line`.

    ``advance`` (a signal) says that ``index`` moves on after this cycle; the
    line must hold still until the last part. Part 0 comes straight from the
    line, and the later parts from a shift register loaded with the rest of the
    line as part 0 is taken, so that no multiplexer of the parts stands in
    front of the network."""
    if folds == 1:
        return crc_line(m, state, line)
    width = LINE_BITS // folds
    line = Value.cast(line)
    if len(line) < LINE_BITS:
        line = Cat(line, C(0, LINE_BITS - len(line)))
    rest = Signal(LINE_BITS - width, name="crc_rest")     # the parts after, the next at the top
    first = index == 0
    with m.If(advance):
        m.d.sync += rest.eq(Mux(first, line[:-width], Cat(C(0, width), rest[:-width])))
    net = CrcNetwork(width)
    m.submodules += net
    m.d.comb += [net.state.eq(state), net.data.eq(Mux(first, line[-width:], rest[-width:]))]
    return net.crc

"""The clock of the simulation top, generated inside the simulator."""

from pathlib import Path

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import Out

from trainingcxl.spec.config import NOMINAL_CLOCK_MHZ

__all__ = ["ClockSource", "CLOCK_MODULE", "VERILOG", "PERIOD_NS"]

#: The device clock's period in the simulations (time unit 1 ns): 4 ns.
PERIOD_NS = 1000 // NOMINAL_CLOCK_MHZ

#: The behavioural Verilog of the clock (module :data:`CLOCK_MODULE`).
VERILOG = Path(__file__).with_name("clock.v")
CLOCK_MODULE = "tcxl_clock"


class ClockSource(wiring.Component):
    """A free-running clock of period ``2 * half_period`` simulator time units.

    It elaborates to an instance of ``clock.v`` (the export appends it to the
    netlist, see :func:`trainingcxl.hdl.export.convert`), so it exists only in
    the simulators' netlist: a test bench waits on its edges instead of
    driving them, which keeps every edge out of Python and out of the
    simulator's VPI.
    """

    clk: Out(1)

    def __init__(self, half_period):
        if half_period < 1 or half_period != int(half_period):
            raise ValueError(f"half_period must be a whole number of time units, not {half_period}")
        self._half_period = int(half_period)
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        m.submodules.clock = Instance(CLOCK_MODULE, p_HALF_PERIOD=self._half_period,
                                      o_clk=self.clk)
        return m

"""The board system as the simulator runs it: with the SDRAM chip model when the media
is SDRAM, so that a training over the UART pins drives the whole board."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from trainingcxl.hdl.bridge.system import BoardSystem
from .sdram_model import SdramModel, Violation

__all__ = ["SimBoardTop"]


class SimBoardTop(wiring.Component):
    """:class:`BoardSystem` and, with ``config.media = "sdram"``, an :class:`SdramModel` on
    its SDRAM pins (no I/O registers: ``sdram_read_delay`` 0), both at ``clock_mhz``.

    Members
    -------
    rx : In(1), tx : Out(1), button : In(1), leds : Out(8)
        The board system's pins.
    sdram_violation : Out(Violation)
        The first SDRAM rule the controller broke (``NONE`` without SDRAM).
    """

    def __init__(self, config, *, clock_mhz, **kwargs):
        self.clock_mhz = clock_mhz
        self.system = BoardSystem(config, clock_mhz=clock_mhz, **kwargs)
        self.chip = (SdramModel(config.sdram, clock_mhz=clock_mhz, backdoor="sdram")
                     if config.media == "sdram" else None)
        super().__init__({"rx": In(1, init=1), "tx": Out(1, init=1), "button": In(1),
                          "leds": Out(8), "sdram_violation": Out(Violation)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.system = system = self.system
        m.d.comb += [system.rx.eq(self.rx), self.tx.eq(system.tx),
                     system.button.eq(self.button), self.leds.eq(system.leds)]
        if self.chip is not None:
            m.submodules.sdram = self.chip
            wiring.connect(m, system.sdram, self.chip.pads)
            m.d.comb += self.sdram_violation.eq(self.chip.violation)
        return m

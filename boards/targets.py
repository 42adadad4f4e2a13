"""The boards the device is built for, each with the configuration that fits it."""

from dataclasses import dataclass

from amaranth_boards.ulx3s import ULX3S_12F_Platform, ULX3S_85F_Platform

from trainingcxl.spec.presets import PRESETS
from .ulx3s import Ulx3sTop

__all__ = ["Board", "BOARDS", "board"]


@dataclass(frozen=True)
class Board:
    """One supported board.

    ``preset`` names the device configuration (``spec/presets.py``), which the
    host driver reads too; ``baud`` is the UART rate of the host bridge;
    ``seed`` the nextpnr placement seed the figures of docs/boards.md were built with;
    ``placer`` nextpnr's placer: ``"static"`` (electrostatic) spreads a large
    design so that it routes where the default ``"heap"`` leaves it congested;
    ``nextpnr_opts`` further nextpnr options (placer and router tuning);
    ``nextpnr_settings`` nextpnr settings without an option, ``(name, value)``
    pairs written into the netlist (router2's margins and weights:
    ``boards/netlist.py``);
    ``clock_mhz`` the system clock, made by a PLL from the board's oscillator
    (``None``: the oscillator itself).
    """
    name: str
    platform: type
    top: type
    preset: str
    baud: int
    description: str
    seed: int = 1
    placer: str = "heap"
    nextpnr_opts: tuple = ()
    nextpnr_settings: tuple = ()
    clock_mhz: float | None = None

    @property
    def config(self):
        return PRESETS[self.preset]

    def make_top(self, baud=None):
        return self.top(self.config, baud=baud or self.baud, clock_mhz=self.clock_mhz)


BOARDS = {
    "ulx3s": Board("ulx3s", ULX3S_85F_Platform, Ulx3sTop, "ulx3s", 1_000_000,
                   "Radiona ULX3S, ECP5 LFE5U-85F: the full device, its PMEM media in the "
                   "board's SDRAM (tables of 50,000 + 50,000 rows, batches of 16)",
                   # 50 MHz from the PLL, placed and routed for timing, router2's
                   # bounding boxes 8 tiles wider than its nets' (nextpnr's default 3,
                   # where it turns on this chip), and the nets of connections that
                   # miss the clock rerouted until none does (``--tmg-ripup``): the
                   # gateware now meets it at seed 3, where routing converges (seed 4
                   # did for the gateware before; docs/boards.md, "The clock of the 85F").
                   placer="static", clock_mhz=50, seed=3, nextpnr_opts=("--tmg-ripup",),
                   nextpnr_settings=(("router2/bbMargin/x", 8), ("router2/bbMargin/y", 8))),
    "ulx3s-12f": Board("ulx3s-12f", ULX3S_12F_Platform, Ulx3sTop, "ulx3s-12f", 1_000_000,
                       "Radiona ULX3S, ECP5 LFE5U-12F: the pooling device (lookup engine, "
                       "no update or checkpoint engine; tables of 16 and 24 rows)",
                       # Seed 1 stalls router2 at about 20 overused wires on this
                       # netlist; seed 2 routes (docs/boards.md).
                       seed=2),
}


def board(name):
    try:
        return BOARDS[name]
    except KeyError:
        raise ValueError(f"unknown board {name!r}; the boards are {', '.join(BOARDS)}") from None

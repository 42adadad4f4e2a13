"""The ULX3S top level: clock, UART to the FTDI chip, the FIRE 2 button, eight LEDs, and
the SDRAM when the configuration keeps its PMEM media there."""

from amaranth import *
from amaranth.lib import io
from amaranth.lib.cdc import ResetSynchronizer

from trainingcxl.hdl.bridge.system import BoardSystem

__all__ = ["Ulx3sTop", "SDRAM_READ_DELAY"]

#: Cycles the board's SDRAM pins add to a read beyond the chip's CAS latency. Every
#: pin goes through a flip-flop of its I/O cell, and the chip's clock is the
#: system clock inverted (an ODDR cell), so the chip takes a command half a
#: cycle after the output register launches it, and answers about half a cycle
#: plus its access time (at most 6 ns, ``tAC``) after that: the input register
#: catches the beat one cycle later than in simulation, where the chip model
#: sits on the controller's own registers. Worked out from the data sheet, not
#: measured on a board (docs/boards.md says how to check it).
SDRAM_READ_DELAY = 1


def _global_buffer(m, signal):
    """``signal`` through an ECP5 clock buffer (DCCA) onto a global network: the power
    failure reaches about 10,000 flip-flop resets, which general routing would carry."""
    out = Signal()
    m.submodules.power_fail_dcca = Instance("DCCA", i_CLKI=signal, i_CE=Const(1), o_CLKO=out)
    return out


def pll_dividers(f_in_mhz, f_out_mhz):
    """``(CLKI_DIV, CLKFB_DIV, CLKOP_DIV)`` of an ECP5 ``EHXPLLL`` making exactly
    ``f_out_mhz`` from ``f_in_mhz`` (feedback from CLKOP), with the phase detector at
    3.125 MHz or more and the VCO in 400-800 MHz (the ECP5 data sheet's ranges);
    the VCO nearest 600 MHz is taken."""
    best = None
    for clki in range(1, 129):
        if f_in_mhz / clki < 3.125:
            break
        for clkfb in range(1, 81):
            if abs(f_in_mhz * clkfb / clki - f_out_mhz) > 1e-9:
                continue
            for clkop in range(1, 129):
                vco = f_out_mhz * clkop
                if 400 <= vco <= 800 and (best is None or abs(vco - 600) < best[0]):
                    best = (abs(vco - 600), (clki, clkfb, clkop))
    if best is None:
        raise ValueError(f"no ECP5 PLL makes {f_out_mhz:g} MHz from {f_in_mhz:g} MHz")
    return best[1]


class Ulx3sTop(Elaboratable):
    """:class:`BoardSystem` on a ULX3S (any ECP5 size), clocked by the 25 MHz oscillator,
    or by a PLL from it at ``clock_mhz``.

    Only pins are handled here; the synchronizers sit in :class:`BoardSystem`
    (UART receive, button), so the simulated board top has them too.
    """

    def __init__(self, config, *, baud, clock_mhz=None):
        self.config = config
        self.baud = baud
        self.clock_mhz = clock_mhz

    def _clock(self, m, platform):
        """The ``sync`` domain, from the oscillator or through a PLL from it, held in reset
        for its first cycles (and until the PLL locks); returns its frequency in Hz.

        The reset is a synchronous one of every register, not only the FPGA's
        start-up values: synthesis re-encodes the state machines one-hot
        (``boards/build.py``), which keeps their reset but not their initial
        values."""
        f_in = platform.default_clk_frequency
        osc = platform.request(platform.default_clk, dir="-")
        m.submodules.osc = osc_buf = io.Buffer("i", osc)
        m.domains.sync = ClockDomain("sync")
        if self.clock_mhz is None or self.clock_mhz * 1e6 == f_in:
            m.d.comb += ClockSignal("sync").eq(osc_buf.i)
            # The synchronizer's stages start asserted and let go of the reset
            # a few cycles after configuration.
            m.submodules.reset_sync = ResetSynchronizer(Const(0), domain="sync")
            return f_in
        clki, clkfb, clkop = pll_dividers(f_in / 1e6, self.clock_mhz)
        locked = Signal()
        m.submodules.pll = Instance(
            "EHXPLLL",
            p_PLLRST_ENA="DISABLED", p_INTFB_WAKE="DISABLED", p_STDBY_ENABLE="DISABLED",
            p_DPHASE_SOURCE="DISABLED", p_OUTDIVIDER_MUXA="DIVA", p_CLKOP_ENABLE="ENABLED",
            p_CLKI_DIV=clki, p_CLKFB_DIV=clkfb, p_CLKOP_DIV=clkop,
            p_CLKOP_CPHASE=clkop // 2 - 1, p_CLKOP_FPHASE=0, p_FEEDBK_PATH="CLKOP",
            i_CLKI=osc_buf.i, i_CLKFB=ClockSignal("sync"), i_RST=0, i_STDBY=0,
            i_PHASESEL0=0, i_PHASESEL1=0, i_PHASEDIR=1, i_PHASESTEP=1, i_PHASELOADREG=1,
            i_PLLWAKESYNC=0, i_ENCLKOP=0,
            o_CLKOP=ClockSignal("sync"), o_LOCK=locked,
            a_FREQUENCY_PIN_CLKI=f"{f_in / 1e6:g}", a_FREQUENCY_PIN_CLKOP=f"{self.clock_mhz:g}")
        m.submodules.reset_sync = ResetSynchronizer(~locked, domain="sync")
        return self.clock_mhz * 1e6

    def system(self, clock_hz):
        divisor = round(clock_hz / self.baud)
        if abs(clock_hz / divisor - self.baud) > 0.02 * self.baud:
            raise ValueError(f"{self.baud} baud is more than 2% off any divisor of "
                             f"{clock_hz / 1e6:g} MHz")
        return BoardSystem(self.config, divisor=divisor,
                           debounce_cycles=int(clock_hz // 100),      # 10 ms
                           reset_buffer=_global_buffer, clock_mhz=clock_hz / 1e6,
                           sdram_read_delay=SDRAM_READ_DELAY)

    def elaborate(self, platform):
        m = Module()
        m.submodules.system = system = self.system(self._clock(m, platform))

        uart = platform.request("uart", 0, dir={"rx": "-", "tx": "-", "rts": "-", "dtr": "-"})
        m.submodules.rx = rx = io.Buffer("i", uart.rx)
        m.submodules.tx = tx = io.Buffer("o", uart.tx)
        m.d.comb += [system.rx.eq(rx.i), tx.o.eq(system.tx)]

        button = platform.request("button_fire", 1, dir="-")
        m.submodules.button = button_buf = io.Buffer("i", button)
        m.d.comb += system.button.eq(button_buf.i)

        for k in range(8):
            led = platform.request("led", k, dir="-")
            m.submodules[f"led{k}"] = buf = io.Buffer("o", led)
            m.d.comb += buf.o.eq(system.leds[k])
        if self.config.media == "sdram":
            self._sdram(m, platform.request("sdram", 0, dir="-"), system.sdram)
        return m

    @staticmethod
    def _sdram(m, pins, pads):
        """The controller's pads onto the chip, every pin through its I/O cell's register."""
        m.submodules.sdram_clk = clk = io.DDRBuffer("o", pins.clk)
        m.d.comb += clk.o.eq(0b10)          # low, then high: the clock inverted
        # ``cs``, ``ras``, ``cas`` and ``we`` are active-low pins the board file
        # names active high (it inverts them): drive them with the negated outputs.
        outputs = {"clk_en": pads.cke, "cs": ~pads.cs_n, "ras": ~pads.ras_n,
                   "cas": ~pads.cas_n, "we": ~pads.we_n, "ba": pads.ba, "a": pads.a,
                   "dqm": pads.dqm}
        for name, value in outputs.items():
            m.submodules[f"sdram_{name}"] = buf = io.FFBuffer("o", getattr(pins, name))
            m.d.comb += buf.o.eq(value)
        m.submodules.sdram_dq = dq = io.FFBuffer("io", pins.dq)
        m.d.comb += [dq.o.eq(pads.dq_o), dq.oe.eq(pads.dq_oe), pads.dq_i.eq(dq.i)]

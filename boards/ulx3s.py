"""The ULX3S top level: clock, UART to the FTDI chip, the FIRE 2 button, eight LEDs."""

from amaranth import *
from amaranth.lib import io

from trainingcxl.hdl.bridge.system import BoardSystem

__all__ = ["Ulx3sTop"]


def _global_buffer(m, signal):
    """``signal`` through an ECP5 clock buffer (DCCA) onto a global network: the power
    failure reaches about 10,000 flip-flop resets, which general routing would carry."""
    out = Signal()
    m.submodules.power_fail_dcca = Instance("DCCA", i_CLKI=signal, i_CE=Const(1), o_CLKO=out)
    return out


class Ulx3sTop(Elaboratable):
    """:class:`BoardSystem` on a ULX3S (any ECP5 size), clocked by the 25 MHz oscillator.

    Only pins are handled here; the synchronizers sit in :class:`BoardSystem`
    (UART receive, button), so the simulated board top has them too.
    """

    def __init__(self, config, *, baud):
        self.config = config
        self.baud = baud

    def system(self, clock_hz):
        divisor = round(clock_hz / self.baud)
        if abs(clock_hz / divisor - self.baud) > 0.02 * self.baud:
            raise ValueError(f"{self.baud} baud is more than 2% off any divisor of "
                             f"{clock_hz / 1e6:g} MHz")
        return BoardSystem(self.config, divisor=divisor,
                           debounce_cycles=int(clock_hz // 100),      # 10 ms
                           reset_buffer=_global_buffer)

    def elaborate(self, platform):
        m = Module()
        m.submodules.system = system = self.system(platform.default_clk_frequency)

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
        return m

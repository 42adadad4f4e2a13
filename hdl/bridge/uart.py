"""An 8N1 UART: a receiver and a transmitter with byte streams."""

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.cdc import FFSynchronizer
from amaranth.lib.wiring import In, Out

__all__ = ["UartRx", "UartTx", "check_divisor"]


def check_divisor(divisor):
    if not (isinstance(divisor, int) and divisor >= 4):
        raise ValueError(f"a UART needs at least 4 clock cycles per bit, not {divisor!r}")
    return divisor


class UartRx(wiring.Component):
    """Receives 8N1 bytes on ``rx`` at ``divisor`` clock cycles per bit.

    ``rx`` is asynchronous: it passes a two-flop synchronizer first. Each bit
    is sampled once, in its middle. A byte whose stop bit is low is dropped
    and counted in ``framing_errors``; a byte that arrives while the previous
    one still waits for ``ready`` replaces nothing and is counted in
    ``overruns`` (the bridge takes a byte in one cycle, so this only happens
    when its consumer is stuck).

    Members
    -------
    rx : In(1)
    data : Out(stream.Signature(8))
    framing_errors, overruns : Out(16)
    """

    rx: In(1, init=1)
    data: Out(stream.Signature(8))
    framing_errors: Out(16)
    overruns: Out(16)

    def __init__(self, divisor):
        self._divisor = check_divisor(divisor)
        super().__init__()

    @property
    def divisor(self):
        return self._divisor

    def elaborate(self, platform):
        m = Module()
        div = self._divisor
        rx = Signal(init=1)
        m.submodules.sync = FFSynchronizer(self.rx, rx, init=1)

        timer = Signal(range(div + div // 2 + 1))
        bits = Signal(range(9))
        shift = Signal(8)

        with m.If(self.data.ready):
            m.d.sync += self.data.valid.eq(0)

        with m.FSM():
            with m.State("IDLE"):
                with m.If(~rx):
                    # First sample in the middle of data bit 0.
                    m.d.sync += [timer.eq(div + div // 2 - 2), bits.eq(0)]
                    m.next = "BITS"
            with m.State("BITS"):
                m.d.sync += timer.eq(timer - 1)
                with m.If(timer == 0):
                    m.d.sync += [shift.eq(Cat(shift[1:], rx)), bits.eq(bits + 1), timer.eq(div - 1)]
                    with m.If(bits == 7):
                        m.next = "STOP"
            with m.State("STOP"):
                m.d.sync += timer.eq(timer - 1)
                with m.If(timer == 0):
                    with m.If(~rx):
                        m.d.sync += self.framing_errors.eq(self.framing_errors + 1)
                        m.next = "BREAK"
                    with m.Elif(self.data.valid & ~self.data.ready):
                        m.d.sync += self.overruns.eq(self.overruns + 1)
                        m.next = "IDLE"
                    with m.Else():
                        m.d.sync += [self.data.payload.eq(shift), self.data.valid.eq(1)]
                        m.next = "IDLE"
            with m.State("BREAK"):
                # A low line where the stop bit should be: wait for the line to idle.
                with m.If(rx):
                    m.next = "IDLE"
        return m


class UartTx(wiring.Component):
    """Sends the bytes of ``data`` as 8N1 on ``tx`` at ``divisor`` clock cycles per bit.

    Members
    -------
    data : In(stream.Signature(8))
    tx : Out(1)
    """

    data: In(stream.Signature(8))
    tx: Out(1, init=1)

    def __init__(self, divisor):
        self._divisor = check_divisor(divisor)
        super().__init__()

    @property
    def divisor(self):
        return self._divisor

    def elaborate(self, platform):
        m = Module()
        div = self._divisor
        shift = Signal(10, init=0x3FF)          # stop bit, 8 data bits (LSB first), start bit
        bits = Signal(range(11))
        timer = Signal(range(div))

        m.d.comb += [self.tx.eq(shift[0]), self.data.ready.eq(bits == 0)]
        with m.If(bits == 0):
            with m.If(self.data.valid):
                m.d.sync += [shift.eq(Cat(Const(0, 1), self.data.payload, Const(1, 1))),
                             bits.eq(10), timer.eq(div - 1)]
        with m.Else():
            m.d.sync += timer.eq(timer - 1)
            with m.If(timer == 0):
                m.d.sync += [shift.eq(Cat(shift[1:], Const(1, 1))), bits.eq(bits - 1),
                             timer.eq(div - 1)]
        return m

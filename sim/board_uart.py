"""The simulated board's UART pins as a byte transport for the host driver (:mod:`trainingcxl.host.driver.bridge`)."""

from collections import deque

import cocotb
from cocotb.triggers import Event, FallingEdge, Timer

from trainingcxl.spec.bridge_protocol import IDLE_TIMEOUT_BITS
from .streams import wait_or_fail

__all__ = ["UartPins"]


class UartPins:
    """Drives ``rx`` and listens on ``tx`` of the board top, 8N1, ``divisor`` cycles per bit.

    One Python event per bit (a timer), none per clock cycle. ``recv``
    fails after ``timeout_bits`` bit times without a byte, so a bridge that
    stops answering fails the bench instead of hanging it.
    """

    def __init__(self, dut, *, divisor, period_ns, timeout_bits=1 << 18):
        self.dut = dut
        self.bit_ns = divisor * period_ns
        self.timeout_ns = timeout_bits * self.bit_ns
        self.framing_errors = 0
        self._bytes = deque()
        self._arrived = Event()
        dut.rx.value = 1
        self._listener = cocotb.start_soon(self._listen())

    async def send(self, data):
        for byte in data:
            for bit in [0] + [byte >> i & 1 for i in range(8)] + [1]:
                self.dut.rx.value = bit
                await Timer(self.bit_ns, "ns")

    async def _listen(self):
        tx = self.dut.tx
        while True:
            await FallingEdge(tx)
            await Timer(self.bit_ns // 2, "ns")         # the middle of the start bit
            if tx.value:
                continue                                # a glitch, not a start bit
            byte = 0
            for i in range(8):
                await Timer(self.bit_ns, "ns")
                byte |= int(tx.value) << i
            await Timer(self.bit_ns, "ns")
            if not tx.value:
                self.framing_errors += 1
            self._bytes.append(byte)
            self._arrived.set()

    async def recv(self, n):
        out = bytearray()
        while len(out) < n:
            if not self._bytes:
                self._arrived.clear()
                await wait_or_fail(self._arrived.wait(), self.timeout_ns,
                                   f"the board sent {len(out)} of {n} bytes within "
                                   f"{self.timeout_ns / 1e3:.0f} us")
            out.append(self._bytes.popleft())
        return bytes(out)

    async def resync(self):
        await Timer(4 * IDLE_TIMEOUT_BITS * self.bit_ns, "ns")
        self._bytes.clear()

    async def pause(self):
        await Timer(32 * self.bit_ns, "ns")

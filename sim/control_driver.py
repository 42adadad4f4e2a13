"""Reads and writes the device's control window."""

from asyncio import CancelledError

from cocotb.triggers import Lock, ReadOnly, RisingEdge

from trainingcxl.hdl.control import ControlBusSignature
from .layouts import pack, unpack
from .rtl.clock import PERIOD_NS
from .streams import sample_bit, stream_signals

__all__ = ["ControlDriver", "ControlError"]

_SIG = ControlBusSignature()
_REQ = _SIG.members["req"].signature.members["payload"].shape
_RSP = _SIG.members["rsp"].signature.members["payload"].shape


class ControlError(AssertionError):
    """The control window refused an access (unknown register)."""


class ControlDriver:
    """One access at a time on the control window's request and response streams.

    The window takes one request and answers it a cycle later, and the host
    makes an access every few hundred cycles, so an access is a short
    coroutine of its own rather than a source and a sink task with queues and
    timeouts: five waits on the simulator (edge, sample, edge, sample, edge)
    and no task started, the same cycles as those streams took. The response
    stream is always ready.
    """

    REQ, RSP = _REQ, _RSP

    def __init__(self, dut, clock, *, prefix="control", timeout_ns=200_000, period_ns=PERIOD_NS):
        self.req_valid, self.req_ready, self.req_payload = stream_signals(dut, f"{prefix}__req")
        self.rsp_valid, self.rsp_ready, self.rsp_payload = stream_signals(dut, f"{prefix}__rsp")
        self.timeout_cycles = max(1, timeout_ns // period_ns)
        self.timeout_ns = timeout_ns
        self._edge = RisingEdge(clock)
        self._lock = Lock()
        self.req_valid.value = 0
        # A defined payload from time 0 (Icarus would carry X into the decoder).
        self.req_payload.value = 0
        self.rsp_ready.value = 1

    async def _until(self, signal, kind, reg):
        """Wait (sampling before each edge) until ``signal`` is high."""
        for _ in range(self.timeout_cycles):
            await ReadOnly()
            if sample_bit(signal, "the control window's handshake"):
                return
            await self._edge
        # (Messages are formatted only here: a register's repr costs more than an edge.)
        raise TimeoutError(f"control window: {signal._name} stayed low for "
                           f"{self.timeout_ns} ns in the {kind} of register {reg!r}")

    async def _access(self, write, reg, value=0):
        kind = "write" if write else "read"
        async with self._lock:
            try:
                # Offer the request just after an edge, as the RTL would.
                await self._edge
                self.req_payload.value = pack(_REQ, {"write": int(write), "addr": int(reg),
                                                      "data": value})
                self.req_valid.value = 1
                await self._until(self.req_ready, kind, reg)
                await self._edge
                self.req_valid.value = 0
                await self._until(self.rsp_valid, kind, reg)
                raw = int(self.rsp_payload.value)
                await self._edge
            except (CancelledError, TimeoutError):
                # Cancelled by a power failure, or timed out (both after an edge, never
                # in the read-only phase, where no signal may be written).
                self.forget()
                raise
        rsp = unpack(_RSP, raw)
        if rsp.err:
            raise ControlError(f"control window refused {kind} of {reg!r}")
        return rsp.data

    async def read(self, reg):
        return await self._access(False, reg)

    async def write(self, reg, value):
        await self._access(True, reg, value)

    def forget(self):
        """Withdraw a request on the wires (the power failed); nothing else is queued."""
        self.req_valid.value = 0

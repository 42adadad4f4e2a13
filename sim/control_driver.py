"""Reads and writes the device's control window."""

from cocotb.triggers import Lock

from trainingcxl.hdl.control import ControlBusSignature
from .streams import StreamSink, StreamSource

__all__ = ["ControlDriver", "ControlError"]

_SIG = ControlBusSignature()
_REQ = _SIG.members["req"].signature.members["payload"].shape
_RSP = _SIG.members["rsp"].signature.members["payload"].shape


class ControlError(AssertionError):
    """The control window refused an access (unknown register)."""


class ControlDriver:
    def __init__(self, dut, clock, *, prefix="control", timeout_ns=200_000):
        self.req = StreamSource(dut, f"{prefix}__req", _REQ, clock)
        self.rsp = StreamSink(dut, f"{prefix}__rsp", _RSP, clock)
        self.timeout_ns = timeout_ns
        self._lock = Lock()

    async def _access(self, write, reg, value=0):
        async with self._lock:
            self.req.send_nowait({"write": int(write), "addr": int(reg), "data": value})
            try:
                rsp = await self.rsp.recv(timeout_ns=self.timeout_ns)
            except TimeoutError:
                raise TimeoutError(f"control window: no response to "
                                   f"{'write' if write else 'read'} of register {reg!r} "
                                   f"within {self.timeout_ns} ns") from None
        if rsp.err:
            raise ControlError(f"control window refused {'write' if write else 'read'} of {reg!r}")
        return rsp.data

    async def read(self, reg):
        return await self._access(False, reg)

    async def write(self, reg, value):
        await self._access(True, reg, value)

    def forget(self):
        self.req.queue.clear()
        self.rsp.queue.clear()

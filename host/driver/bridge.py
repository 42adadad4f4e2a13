"""The driver of a board: the bridge protocol over a byte link, as a device transport.

Three layers, each usable alone:

* a *byte link* moves bytes: :class:`SerialTransport` (``pyserial``, a real
  board) or the simulated board's UART pins (``trainingcxl.sim.board_uart``);
* :class:`BridgeClient` speaks :mod:`~trainingcxl.spec.bridge_protocol` over it;
* :class:`BridgeTransport` carries the one driver's accesses
  (:class:`~trainingcxl.host.driver.device.Device`) over the bridge, with the
  host arrays in the board's host window; :class:`BoardDevice` is that driver.

Every method is a coroutine that awaits only its transport, so the same code
runs under asyncio (a serial port) and under cocotb (the simulated board).
"""

import asyncio

import numpy as np

from trainingcxl.spec.bridge_protocol import (BOARD_MAGIC, IDLE_TIMEOUT_BITS, RSP_LEN, RSP_SYNC,
                                              Command, FrameError, Status, decode_response,
                                              encode_request)
from trainingcxl.spec.config import LINE_BYTES
from trainingcxl.spec.host_layout import HostLayout
from .device import Device, DeviceError

__all__ = ["BridgeError", "SerialTransport", "BridgeClient", "BridgeTransport", "BoardDevice"]


class BridgeError(IOError):
    """The bridge answered a request with an error status."""

    def __init__(self, command, status):
        super().__init__(f"{Command(command).name} answered {Status(status).name}")
        self.command, self.status = Command(command), Status(status)


class SerialTransport:
    """Bytes over a serial port (``pyserial``); reads block in a worker thread."""

    def __init__(self, port, baud, *, timeout=1.0):
        import serial                   # only a real board needs pyserial
        self.baud = baud
        self.timeout = timeout
        self.port = serial.Serial(port, baud, timeout=timeout)

    async def send(self, data):
        await asyncio.to_thread(self.port.write, data)

    async def recv(self, n):
        data = await asyncio.to_thread(self.port.read, n)
        if len(data) < n:
            raise TimeoutError(f"the board sent {len(data)} of {n} bytes within {self.timeout} s")
        return data

    async def resync(self):
        """Let the bridge's parser time out, then drop whatever arrived."""
        await asyncio.sleep(max(0.01, 4 * IDLE_TIMEOUT_BITS / self.baud))
        self.port.reset_input_buffer()

    async def pause(self):
        await asyncio.sleep(0.001)

    def close(self):
        self.port.close()


class BridgeClient:
    """Requests and responses of the bridge protocol; retries a frame lost to line noise."""

    def __init__(self, transport, *, retries=2):
        self.transport = transport
        self.retries = retries
        self.frames = 0

    async def request(self, command, payload=b""):
        frame = encode_request(command, payload)
        for attempt in range(self.retries + 1):
            await self.transport.send(frame)
            try:
                head = await self.transport.recv(1)
                if head[0] != RSP_SYNC:
                    raise FrameError(f"{Command(command).name}: response starts with {head[0]:#04x}")
                rest = await self.transport.recv(RSP_LEN[Command(command)] + 2)
                status, data = decode_response(command, head + rest)
            except (FrameError, TimeoutError):
                if attempt == self.retries:
                    raise
                await self.transport.resync()
                continue
            self.frames += 1
            # A request garbled on the way in is safe to send again: it did nothing.
            if status == Status.BAD_CRC and attempt < self.retries:
                continue
            if status != Status.OK:
                raise BridgeError(command, status)
            return data
        raise AssertionError("unreachable")

    async def ping(self):
        data = await self.request(Command.PING)
        magic = int.from_bytes(data[:4], "little")
        if magic != BOARD_MAGIC:
            raise FrameError(f"PING answered {magic:#010x}, not a trainingcxl board")
        return {"window_lines": int.from_bytes(data[4:6], "little"),
                "version": int.from_bytes(data[6:8], "little")}

    async def read_reg(self, reg):
        return int.from_bytes(await self.request(Command.REG_READ, bytes([int(reg)])), "little")

    async def write_reg(self, reg, value):
        await self.request(Command.REG_WRITE, bytes([int(reg)]) + int(value).to_bytes(8, "little"))

    async def mem_read(self, line):
        return int.from_bytes(await self.request(Command.MEM_READ, line.to_bytes(6, "little")),
                              "little")

    async def mem_write(self, line, value):
        await self.request(Command.MEM_WRITE, line.to_bytes(6, "little")
                           + value.to_bytes(LINE_BYTES, "little"))

    async def host_read(self, index):
        return await self.request(Command.HOST_READ, index.to_bytes(2, "little"))

    async def host_write(self, index, raw):
        await self.request(Command.HOST_WRITE, index.to_bytes(2, "little") + bytes(raw))

    async def power_fail(self):
        await self.request(Command.POWER_FAIL)

    async def state(self):
        data = await self.request(Command.STATE)
        word = int.from_bytes(data, "little")
        return {"leds": word & 0xFF, "irq": word >> 8 & 1, "command_power_fails": word >> 16 & 0xFFFF,
                "button_power_fails": word >> 32 & 0xFFFF, "bad_frames": word >> 48 & 0xFFFF}


class _PollDeadline:
    """A wait over the bridge is bounded by polls, not cycles: the board's clock is unseen."""

    def __init__(self, polls):
        self.left = polls

    def expired(self):
        self.left -= 1
        return self.left < 0


class BridgeTransport:
    """The device behind a board's UART bridge (see :mod:`trainingcxl.host.driver.device`
    for what a transport provides). Host arrays go into the board's host window
    (block RAM that answers the device's CXL.cache requests); waits poll the
    control window, at most ``polls`` times each."""

    interrupts = False
    media = None                        # the media is reached over the bridge only

    def __init__(self, client, *, base, polls=200_000):
        self.client, self.polls = client, polls
        self.base = base                # host line of the window's first line

    async def read_reg(self, reg):
        return await self.client.read_reg(reg)

    async def write_reg(self, reg, value):
        await self.client.write_reg(reg, value)

    async def read_lines(self, addrs):
        return [await self.client.mem_read(a) for a in addrs]

    async def write_lines(self, lines):
        for addr, line in lines.items():
            await self.client.mem_write(addr, line)

    async def write_host(self, line, array):
        raw = np.ascontiguousarray(array).view(np.uint8).tobytes()
        raw += bytes(-len(raw) % LINE_BYTES)
        for k in range(0, len(raw), LINE_BYTES):
            await self.client.host_write(line - self.base + k // LINE_BYTES, raw[k:k + LINE_BYTES])

    async def read_host(self, line, count, dtype):
        dtype = np.dtype(dtype)
        nbytes = count * dtype.itemsize
        raw = b"".join([await self.client.host_read(line - self.base + k)
                        for k in range(-(-nbytes // LINE_BYTES))])
        return np.frombuffer(raw[:nbytes], dtype=dtype).copy()

    async def idle(self):
        await self.client.transport.pause()

    async def sleep(self, cycles):
        await self.client.transport.pause()

    def deadline(self, cycles):
        return _PollDeadline(self.polls)

    async def power_fail(self):
        await self.client.power_fail()

    async def check_link(self, layout):
        info = await self.client.ping()
        if info["window_lines"] != layout.lines:
            raise DeviceError(f"the board's host window has {info['window_lines']} lines; the "
                              f"configuration needs {layout.lines}: was it built for it?")

    def use_local_host_memory(self):
        raise DeviceError("a board's host window is its only host memory")

    def forget_host_memory(self):
        pass                            # the host window keeps its lines; the host rewrites them


class BoardDevice(Device):
    """The device on a board (or the simulated board top), through its UART bridge."""

    def __init__(self, client, config, *, polls=200_000):
        layout = HostLayout(config)
        super().__init__(BridgeTransport(client, base=layout.base, polls=polls), config,
                         layout=layout)
        self.bridge = client

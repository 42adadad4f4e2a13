"""The host driver of a board: the bridge protocol over a byte transport, and the device API.

Three layers, each usable alone:

* a *transport* moves bytes: :class:`SerialTransport` (``pyserial``, a real
  board) or the simulated board's UART pins (``trainingcxl.sim.board_uart``);
* :class:`BridgeClient` speaks :mod:`~trainingcxl.spec.bridge_protocol` over it;
* :class:`BoardDevice` offers the device operations the training driver uses
  (tables, LOOKUP, UPDATE, COMMIT, SNAPSHOT_MLP, RECOVER, checkpoint state),
  through the bridge, with the host arrays in the board's host window.

Every method is a coroutine that awaits only its transport, so the same code
runs under asyncio (a serial port) and under cocotb (the simulated board).
"""

import asyncio

import numpy as np

from trainingcxl.spec.descriptors import ErrorCode, Op
from trainingcxl.spec.registers import DEVICE_ID, Reg
from trainingcxl.spec.bridge_protocol import (BOARD_MAGIC, IDLE_TIMEOUT_BITS, RSP_LEN, RSP_SYNC, Command,
                              FrameError, Status, decode_response, encode_request)
from trainingcxl.spec.config import LINE_BYTES
from trainingcxl.spec.host_layout import HostLayout
from .device_regs import (decode_checkpoint_state, desc_op_word, geometry_word, gpu_window_writes,
                          read_snapshot)

__all__ = ["BridgeError", "SerialTransport", "BridgeClient", "BoardDevice"]


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


class BoardDevice:
    """The device on a board, with the operations of the simulated device's bench.

    Host arrays are written into the board's host window (block RAM that
    answers the device's CXL.cache requests) at the addresses of
    :class:`HostLayout`, the same as on the simulated host. Waiting polls
    the control window; ``polls`` bounds every wait, so a device that stops
    answering fails the run with a message instead of hanging it.
    """

    def __init__(self, client, config, *, polls=200_000):
        self.bridge, self.config = client, config
        self.layout = HostLayout(config)
        self.polls = polls
        self.submitted = 0

    # -- primitives ------------------------------------------------------------------

    async def check_identity(self):
        info = await self.bridge.ping()
        if info["window_lines"] != self.layout.lines:
            raise ValueError(f"the board's host window has {info['window_lines']} lines; the "
                             f"configuration needs {self.layout.lines}: was it built for it?")
        ident = await self.bridge.read_reg(Reg.ID)
        if ident != DEVICE_ID:
            raise ValueError(f"ID register reads {ident:#x}, expected {DEVICE_ID:#x}")
        geo = await self.bridge.read_reg(Reg.GEOMETRY)
        want = geometry_word(self.config)
        if geo != want:
            raise ValueError(f"device geometry {geo:#x} does not match the configuration {want:#x}")

    async def write_host(self, line, array):
        """Write ``array``'s bytes into host memory from host line ``line`` (whole lines)."""
        raw = np.ascontiguousarray(array).view(np.uint8).tobytes()
        raw += bytes(-len(raw) % LINE_BYTES)
        for k in range(0, len(raw), LINE_BYTES):
            await self.bridge.host_write(line - self.layout.base + k // LINE_BYTES,
                                         raw[k:k + LINE_BYTES])

    async def read_host(self, line, count, dtype):
        dtype = np.dtype(dtype)
        nbytes = count * dtype.itemsize
        raw = b"".join([await self.bridge.host_read(line - self.layout.base + k)
                        for k in range(-(-nbytes // LINE_BYTES))])
        return np.frombuffer(raw[:nbytes], dtype=dtype).copy()

    async def power_fail(self):
        await self.bridge.power_fail()
        self.submitted = 0

    # -- tables over CXL.mem -----------------------------------------------------------------

    def row_addr(self, table, row):
        return self.config.hdm_base + self.config.table_base[table] + row * self.config.lines_per_row

    async def load_tables(self, tables):
        for t, table in enumerate(tables):
            raw = np.ascontiguousarray(table, dtype=np.int32).tobytes()
            for k in range(0, len(raw), LINE_BYTES):
                await self.bridge.mem_write(self.row_addr(t, 0) + k // LINE_BYTES,
                                            int.from_bytes(raw[k:k + LINE_BYTES], "little"))

    async def read_tables(self):
        cfg = self.config
        out = []
        for t, rows in enumerate(cfg.tables):
            lines = [await self.bridge.mem_read(self.row_addr(t, 0) + k)
                     for k in range(rows * cfg.lines_per_row)]
            raw = b"".join(x.to_bytes(LINE_BYTES, "little") for x in lines)
            out.append(np.frombuffer(raw, dtype=np.int32).reshape(rows, cfg.dim).copy())
        return out

    async def read_media(self, first, count):
        base = self.config.hdm_base
        return [await self.bridge.mem_read(base + first + k) for k in range(count)]

    # -- descriptors ----------------------------------------------------------------------

    async def _submit(self, op, batch_id, n_bags, n_indices, vec_line, *, coalesced=False):
        ctl = self.bridge
        k = batch_id % 2
        lay = self.layout
        await ctl.write_reg(Reg.DESC_OP, desc_op_word(op, batch_id, coalesced=coalesced))
        await ctl.write_reg(Reg.DESC_SIZE, n_bags | n_indices << 32)
        await ctl.write_reg(Reg.DESC_IDX, lay.idx_lines[k] * LINE_BYTES)
        await ctl.write_reg(Reg.DESC_OFF, lay.off_lines[k] * LINE_BYTES)
        await ctl.write_reg(Reg.DESC_VEC, vec_line * LINE_BYTES)
        await ctl.write_reg(Reg.DOORBELL, 1)
        seq = await ctl.read_reg(Reg.SUBMITTED)
        if seq == self.submitted:
            error = ErrorCode(await ctl.read_reg(Reg.ERROR) & 0xFF)
            raise RuntimeError(f"{op.name} of batch {batch_id} was not queued ({error.name})")
        self.submitted = seq
        return seq

    async def wait_completed(self, count):
        for _ in range(self.polls):
            done = await self.bridge.read_reg(Reg.COMPLETED)
            if done >= count:
                await self.bridge.write_reg(Reg.IRQ_ACK, done)
                return done
            await self.bridge.transport.pause()
        raise TimeoutError(f"{count} descriptors not completed after {self.polls} polls "
                           f"(completed: {done})")

    async def _run(self, op, batch_id, n_bags, n_indices, vec_line, *, after_submit=None,
                   **flags):
        """Submit one descriptor and wait for it; returns its error code. ``after_submit``
        (a coroutine function) runs between the doorbell and the wait."""
        seq = await self._submit(op, batch_id, n_bags, n_indices, vec_line, **flags)
        if after_submit is not None:
            await after_submit()
        await self.wait_completed(seq)
        last = await self.bridge.read_reg(Reg.LAST_DONE)
        if last & 0xFFFFFFFF != batch_id & 0xFFFFFFFF:
            raise RuntimeError(f"completion for batch {last & 0xFFFFFFFF}, expected {batch_id}")
        return ErrorCode(last >> 40 & 0xFF)

    async def _stage_batch(self, batch_id, indices, offsets):
        k = batch_id % 2
        await self.write_host(self.layout.idx_lines[k], np.asarray(indices, np.uint32))
        await self.write_host(self.layout.off_lines[k], np.asarray(offsets, np.uint32))

    async def lookup(self, batch_id, indices, offsets, *, after_submit=None):
        """LOOKUP; returns ``(error, pooled)`` with the pooled vectors read from the window."""
        n_bags = len(offsets) - 1
        await self._stage_batch(batch_id, indices, offsets)
        out = self.layout.out_lines[batch_id % 2]
        error = await self._run(Op.LOOKUP, batch_id, n_bags, len(indices), out,
                                after_submit=after_submit)
        pooled = await self.read_host(out, n_bags * self.config.dim, np.int32)
        return error, pooled.reshape(n_bags, self.config.dim)

    async def update(self, batch_id, indices, offsets, deltas, *, coalesced=False,
                     after_submit=None):
        await self._stage_batch(batch_id, indices, offsets)
        await self.write_host(self.layout.delta_line, np.asarray(deltas, np.int32))
        return await self._run(Op.UPDATE, batch_id, len(offsets) - 1, len(indices),
                               self.layout.delta_line, coalesced=coalesced,
                               after_submit=after_submit)

    # -- checkpointing ---------------------------------------------------------------------

    async def set_gpu_window(self):
        """Confine the descriptors' arrays to the host window's layout (``GPU_BASE``,
        ``GPU_LIMIT``), on a device that checks them (``Config.gpu_window``)."""
        for reg, value in gpu_window_writes(self.config, self.layout):
            await self.bridge.write_reg(reg, value)

    async def configure_checkpoints(self, staleness):
        """Confine the descriptors' arrays to the host window's layout (a power failure
        clears it), turn logging on with staleness bound ``staleness`` and point at the
        MLP staging copy."""
        await self.set_gpu_window()
        await self.bridge.write_reg(Reg.MLP_ADDR, self.layout.mlp_line * LINE_BYTES)
        await self.bridge.write_reg(Reg.MLP_LINES, self.config.mlp_lines)
        await self.bridge.write_reg(Reg.CKPT_CTRL, 1 | staleness << 8)

    async def commit(self, batch_id, *, after_submit=None):
        return await self._run(Op.COMMIT, batch_id, 0, 0, 0, after_submit=after_submit)

    async def stage_mlp(self, params):
        await self.write_host(self.layout.mlp_line, np.asarray(params, dtype=np.float32))

    async def snapshot(self, batch_id, *, after_submit=None):
        return await self._run(Op.SNAPSHOT_MLP, batch_id, 0, 0, 0, after_submit=after_submit)

    async def checkpoint_state(self):
        rd = self.bridge.read_reg
        return decode_checkpoint_state(await rd(Reg.CKPT_STATE), await rd(Reg.COMMITTED),
                                       await rd(Reg.SNAPSHOT), await rd(Reg.DURABLE))

    async def wait_snapshot(self, batch_id):
        for _ in range(self.polls):
            st = await self.checkpoint_state()
            if st["snapshot"] is not None and st["snapshot"] >= batch_id:
                return st
            if st["snapshot_failed"]:
                raise RuntimeError(f"the snapshot pull of batch {batch_id} failed")
            await self.bridge.transport.pause()
        raise TimeoutError(f"no valid snapshot of batch {batch_id} after {self.polls} polls")

    async def recover(self):
        """RECOVER; returns ``(error, D, m, rolled_back, cycles)``."""
        rd = self.bridge.read_reg
        before = await rd(Reg.RECOVER_CYCLES)
        error = await self._run(Op.RECOVER, 0, 0, 0, 0)
        rec, info = await rd(Reg.RECOVERED), await rd(Reg.RECOVERED_INFO)
        cycles = await rd(Reg.RECOVER_CYCLES) - before
        if error != ErrorCode.NONE:
            return error, None, None, 0, cycles
        return error, rec & 0xFFFFFFFF, rec >> 32, info >> 32, cycles

    async def read_snapshot(self, slot_batch):
        """The MLP parameters of the valid snapshot of ``slot_batch``, checksum-checked."""
        return await read_snapshot(self.config, self.read_media, slot_batch)

    async def counters(self, regs=(Reg.CYCLES, Reg.PMEM_READS, Reg.PMEM_WRITES, Reg.CACHE_READS,
                                   Reg.CACHE_WRITES, Reg.LOG_RECORDS, Reg.RECOVER_CYCLES)):
        return {r.name.lower(): await self.bridge.read_reg(r) for r in regs}

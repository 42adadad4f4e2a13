"""The device driver: every operation of the device, written once over a transport.

A :class:`Device` stages descriptors in the control window, rings the
doorbell, waits for completions and reads results back. It never touches a
wire itself: a *transport* moves register accesses, CXL.mem lines and host
memory. The transports are

* the cocotb ports of a simulated device (:class:`~trainingcxl.host.driver.ports.DeviceTB`),
* the UART host bridge of a board, real or simulated
  (:class:`~trainingcxl.host.driver.bridge.BridgeTransport`).

Both give the same results, so a training run, a test or a tool does not ask
which one it has. Register addresses and field encodings come from the
specification (:mod:`trainingcxl.spec.registers`); host arrays sit where
:class:`~trainingcxl.spec.host_layout.HostLayout` puts them.

A transport provides (every method a coroutine unless marked):

``read_reg(reg)``, ``write_reg(reg, value)``
    one control window access;
``read_lines(addrs)``, ``write_lines({addr: line})``
    CXL.mem reads and writes of whole lines at host line addresses; a refused
    write raises :class:`DeviceError`;
``read_host(line, count, dtype)``, ``write_host(line, array)``
    the GPU's memory, at host line addresses of the layout;
``idle()``
    wait while a descriptor runs (``interrupts``, a plain attribute, says
    whether this sleeps on the ``irq`` line, so that the driver acknowledges
    completions at every poll);
``sleep(cycles)``
    let the device work for about ``cycles``;
``deadline(cycles)`` (plain)
    an object whose ``expired()`` says when a wait of about ``cycles`` is over;
``power_fail()``
    cut the device's power;
``forget_host_memory()`` (plain)
    the GPU's memory loses its contents (a power failure of the whole system);
``use_local_host_memory()`` (plain)
    the engines' host memory becomes the device's own buffer (``near-data``);
``check_link(layout)``
    make sure the far end is a device built for ``layout``;
``media`` (plain attribute)
    the media's lines as a writable ``(media_lines, 64)`` byte array when the
    transport reaches them directly (a simulator's backdoor), else ``None``:
    the driver then loads and reads whole tables without a transaction, at
    moments when no write to the tables is in flight.
"""

from typing import NamedTuple

import numpy as np

from trainingcxl.spec.config import LINE_BYTES
from trainingcxl.spec.descriptors import NO_TARGET, ErrorCode, Op
from trainingcxl.spec.host_layout import HostLayout
from trainingcxl.spec.records import SNAPSHOT, valid_header
from trainingcxl.host.model.recovery import checkpoint_lines, newest_checkpoint, snapshot_params
from trainingcxl.spec.registers import COUNTERS, REG, Reg, constants

__all__ = ["Device", "DeviceError", "LookupResult", "Recovery", "rows_to_lines",
           "lines_to_rows"]


class DeviceError(RuntimeError):
    """The device refused a descriptor at the doorbell, or answered out of turn."""


class LookupResult:
    """What a ``LOOKUP`` gave: the pooled vectors read back from host memory, the
    completion's error code and the cycles from submission to completion."""

    def __init__(self, pooled, error, cycles):
        self.pooled, self.error, self.cycles = pooled, error, cycles


class Recovery(NamedTuple):
    """What ``RECOVER`` gave; ``d`` and ``m`` are ``None`` without a checkpoint."""
    error: ErrorCode
    d: int | None
    m: int | None
    rolled_back: int
    cycles: int
    lines_read: int | None = None   # media lines RECOVER read (None: not reported)


def rows_to_lines(table):
    """``(rows, dim)`` int32 -> list of line integers, row-major."""
    raw = np.ascontiguousarray(table, dtype=np.int32).tobytes()
    return [int.from_bytes(raw[i:i + LINE_BYTES], "little") for i in range(0, len(raw), LINE_BYTES)]


def lines_to_rows(lines, dim):
    """The inverse of :func:`rows_to_lines`."""
    raw = b"".join(x.to_bytes(LINE_BYTES, "little") for x in lines)
    return np.frombuffer(raw, dtype=np.int32).reshape(-1, dim).copy()


def _batch(value, reg):
    fields = reg.decode(value)
    return fields["batch"] if fields["valid"] else None


class Device:
    """The device's operations over ``transport`` for a device built from ``config``.

    ``layout`` is where the host arrays go (default: :class:`HostLayout` at its
    usual base); ``timeout_cycles`` bounds every wait, so a device that stops
    answering fails with a message instead of hanging.
    """

    def __init__(self, transport, config, *, layout=None, timeout_cycles=5_000_000):
        self.transport, self.config = transport, config
        self.layout = layout or HostLayout(config)
        self.timeout_cycles = timeout_cycles
        self.submitted = 0              # descriptors the device has queued since power-up
        lay = self.layout
        self.idx_lines, self.off_lines, self.out_lines = lay.idx_lines, lay.off_lines, lay.out_lines
        self.delta_line, self.mlp_line = lay.delta_line, lay.mlp_line

    # -- registers -------------------------------------------------------------------------

    async def read(self, reg):
        return await self.transport.read_reg(reg)

    async def write(self, reg, value):
        await self.transport.write_reg(reg, value)

    async def cycles(self):
        return await self.read(Reg.CYCLES)

    async def check_identity(self):
        """Raise :class:`DeviceError` unless the device was built from this configuration."""
        await self.transport.check_link(self.layout)
        for name in ("ID", "GEOMETRY"):
            got, want = await self.read(Reg[name]), constants(self.config)[name]
            if got != want:
                raise DeviceError(f"{name} register reads {got:#x}; a device built from this "
                                  f"configuration reads {want:#x}")

    async def counters(self, regs=COUNTERS):
        """The performance counters (:data:`~trainingcxl.spec.registers.COUNTERS`), by name."""
        return {r.name.lower(): await self.read(Reg[r.name]) for r in regs}

    async def power_fail(self):
        await self.transport.power_fail()
        self.submitted = 0

    # -- media over CXL.mem ------------------------------------------------------------------

    def row_addr(self, table, row):
        """Host line address of a row's first line."""
        cfg = self.config
        return cfg.hdm_base + cfg.table_base[table] + row * cfg.lines_per_row

    async def read_media(self, first, count):
        """Media lines ``first .. first+count-1`` (protected regions read fine)."""
        base = self.config.hdm_base
        return await self.transport.read_lines([base + first + k for k in range(count)])

    async def read_media_lines(self, media_addrs):
        """``{media line: data}`` of the media lines ``media_addrs``, read in one go."""
        base = self.config.hdm_base
        got = await self.transport.read_lines([base + a for a in media_addrs])
        return dict(zip(media_addrs, got))

    async def read_rows(self, rows):
        """The rows ``rows[t]`` (row numbers of table ``t``) as the media hold them, read over
        CXL.mem in one go: a (rows, dim) array per table."""
        cfg = self.config
        lpr = cfg.lines_per_row
        addrs = np.concatenate([
            (cfg.hdm_base + cfg.table_base[t] + np.asarray(r, dtype=np.int64)[:, None] * lpr
             + np.arange(lpr)).ravel() for t, r in enumerate(rows)] or [np.zeros(0, np.int64)])
        got = await self.transport.read_lines(addrs.tolist()) if len(addrs) else []
        out, at = [], 0
        for r in rows:
            n = len(r) * lpr
            out.append(lines_to_rows(got[at:at + n], cfg.dim) if n
                       else np.zeros((0, cfg.dim), dtype=np.int32))
            at += n
        return out

    async def write_media(self, lines):
        """Write ``{media line: data}``; returns once every write is acknowledged (persistent)."""
        base = self.config.hdm_base
        await self.transport.write_lines({base + a: v for a, v in lines.items()})

    async def load_tables(self, tables, *, backdoor=True):
        """Write the tables into the media: directly where the transport can
        (``backdoor``), else as CXL.mem writes, which return once persistent."""
        cfg, media = self.config, self.transport.media
        if backdoor and media is not None:
            for t, table in enumerate(tables):
                raw = np.ascontiguousarray(table, dtype="<i4").view(np.uint8).reshape(-1, LINE_BYTES)
                media[cfg.table_base[t]:cfg.table_base[t] + len(raw)] = raw
            return
        lines = {}
        for t, table in enumerate(tables):
            for k, line in enumerate(rows_to_lines(table)):
                lines[self.row_addr(t, 0) + k] = line
        await self.transport.write_lines(lines)

    async def read_tables(self, *, backdoor=True):
        """The tables as the media holds them (see :meth:`load_tables`)."""
        cfg, media = self.config, self.transport.media
        out = []
        for t, rows in enumerate(cfg.tables):
            count = rows * cfg.lines_per_row
            if backdoor and media is not None:
                first = cfg.table_base[t]
                out.append(np.array(media[first:first + count]).view("<i4").reshape(rows, cfg.dim)
                           .astype(np.int32))
                continue
            first = self.row_addr(t, 0)
            lines = await self.transport.read_lines(range(first, first + count))
            out.append(lines_to_rows(lines, cfg.dim))
        return out

    # -- descriptors ------------------------------------------------------------------------

    async def submit(self, op, batch, *, n_bags, n_indices, idx_addr, off_addr, vec_addr,
                     relaxed=False, nolog=False, coalesced=False):
        """Stage one descriptor at explicit byte addresses and ring the doorbell."""
        await self.write(Reg.DESC_OP, REG.DESC_OP.encode(
            op=Op(op).value, batch=batch, relaxed=relaxed, nolog=nolog, coalesced=coalesced))
        await self.write(Reg.DESC_SIZE, REG.DESC_SIZE.encode(n_bags=n_bags, n_indices=n_indices))
        await self.write(Reg.DESC_IDX, idx_addr)
        await self.write(Reg.DESC_OFF, off_addr)
        await self.write(Reg.DESC_VEC, vec_addr)
        await self.write(Reg.DOORBELL, 1)

    async def _submit(self, op, batch_id, n_bags, n_indices, vec_line, **flags):
        """Stage and ring one descriptor of the layout without waiting for it; returns its
        sequence number (the device's ``SUBMITTED`` count once it is queued)."""
        k = batch_id % 2
        await self.submit(op, batch_id, n_bags=n_bags, n_indices=n_indices,
                          idx_addr=self.idx_lines[k] * LINE_BYTES,
                          off_addr=self.off_lines[k] * LINE_BYTES,
                          vec_addr=vec_line * LINE_BYTES, **flags)
        seq = await self.read(Reg.SUBMITTED)
        if seq == self.submitted:
            error = ErrorCode(REG.ERROR.get(await self.read(Reg.ERROR), "code"))
            raise DeviceError(f"{op.name} of batch {batch_id} was not queued ({error.name})")
        self.submitted = seq
        return seq

    async def _submit_only(self, op, batch_id, after_submit):
        seq = await self._submit(op, batch_id, 0, 0, 0)
        if after_submit is not None:
            await after_submit()
        return seq

    async def wait_completed(self, count):
        """Wait until ``count`` descriptors have completed; returns the count completed."""
        deadline = self.transport.deadline(self.timeout_cycles)
        while True:
            done = await self.read(Reg.COMPLETED)
            if done >= count or self.transport.interrupts:
                await self.write(Reg.IRQ_ACK, done)
            if done >= count:
                return done
            if deadline.expired():
                raise TimeoutError(f"{count} descriptors not completed after "
                                   f"{self.timeout_cycles} cycles (completed: {done})")
            await self.transport.idle()

    async def _run(self, op, batch_id, n_bags, n_indices, vec_line, *, after_submit=None,
                   **flags):
        """Submit one descriptor and wait for it; returns ``(error, cycles)``.
        ``after_submit`` (a coroutine function) runs between the doorbell and the wait."""
        t0 = await self.cycles()
        seq = await self._submit(op, batch_id, n_bags, n_indices, vec_line, **flags)
        if after_submit is not None:
            await after_submit()
        error = await self.settle(seq, batch_id)
        return error, await self.cycles() - t0

    async def settle(self, seq, batch_id):
        """Wait for descriptor number ``seq`` (of ``batch_id``), the last submitted, to
        complete; returns its error."""
        done = await self.wait_completed(seq)
        # Descriptors complete in order; nothing was submitted after this one.
        if done != seq:
            raise DeviceError(f"{done} descriptors completed while waiting for number {seq}")
        last = REG.LAST_DONE.decode(await self.read(Reg.LAST_DONE))
        if last["batch"] != batch_id & 0xFFFFFFFF:
            raise DeviceError(f"completion for batch {last['batch']}, expected {batch_id}")
        return ErrorCode(last["error"])

    async def _stage_batch(self, batch_id, indices, offsets):
        k = batch_id % 2
        await self.transport.write_host(self.idx_lines[k], np.asarray(indices, np.uint32))
        await self.transport.write_host(self.off_lines[k], np.asarray(offsets, np.uint32))

    async def pooled(self, batch_id, n_bags):
        """The pooled vectors of ``batch_id`` as they are in host memory now."""
        raw = await self.transport.read_host(self.out_lines[batch_id % 2], n_bags * self.config.dim,
                                             np.int32)
        return raw.reshape(n_bags, self.config.dim)

    async def lookup(self, batch_id, indices, offsets, *, relaxed=False, nolog=False,
                     after_submit=None):
        """``LOOKUP``; returns a :class:`LookupResult`.

        With ``relaxed`` the rows the previous batch touched are left out until
        :meth:`finish` (after that batch's update); with ``nolog`` the rows read
        are not logged."""
        n_bags = len(offsets) - 1
        await self._stage_batch(batch_id, indices, offsets)
        error, cycles = await self._run(Op.LOOKUP, batch_id, n_bags, len(indices),
                                        self.out_lines[batch_id % 2], relaxed=relaxed,
                                        nolog=nolog, after_submit=after_submit)
        return LookupResult(await self.pooled(batch_id, n_bags), error, cycles)

    async def finish(self, batch_id, n_bags):
        """``FINISH`` a relaxed lookup of ``batch_id``; returns ``(error, cycles)``."""
        return await self._run(Op.FINISH, batch_id, n_bags, 0, self.out_lines[batch_id % 2])

    async def update(self, batch_id, indices, offsets, deltas, *, coalesced=False,
                     after_submit=None, wait=True):
        """``UPDATE`` with ``deltas`` (n_bags, dim) int32; returns ``(error, cycles)``, or
        without ``wait`` its sequence number at once (:meth:`settle` collects it; the
        arrays must stay in place until then, so nothing else is staged before).

        ``coalesced``: the arrays come from
        :func:`~trainingcxl.host.model.golden.coalesce_update` (each row once)."""
        await self._stage_batch(batch_id, indices, offsets)
        await self.transport.write_host(self.delta_line, np.asarray(deltas, np.int32))
        if not wait:
            seq = await self._submit(Op.UPDATE, batch_id, len(offsets) - 1, len(indices),
                                     self.delta_line, coalesced=coalesced)
            if after_submit is not None:
                await after_submit()
            return seq
        return await self._run(Op.UPDATE, batch_id, len(offsets) - 1, len(indices),
                               self.delta_line, coalesced=coalesced, after_submit=after_submit)

    # -- checkpointing ------------------------------------------------------------------------

    async def set_gpu_window(self):
        """Confine the descriptors' arrays to the host layout (``GPU_BASE``, ``GPU_LIMIT``),
        on a device that checks them (``Config.gpu_window``; the registers are absent
        otherwise)."""
        if self.config.gpu_window:
            lay = self.layout
            await self.write(Reg.GPU_BASE, lay.base * LINE_BYTES)
            await self.write(Reg.GPU_LIMIT, (lay.base + lay.lines) * LINE_BYTES)

    async def configure_checkpoints(self, staleness, *, enable=True):
        """Confine descriptors to the GPU window (a power failure clears it), turn logging
        on with staleness bound ``staleness`` and point at the MLP staging copy."""
        await self.set_gpu_window()
        await self.write(Reg.MLP_ADDR, self.mlp_line * LINE_BYTES)
        await self.write(Reg.MLP_LINES, self.config.mlp_lines)
        await self.write(Reg.CKPT_CTRL, REG.CKPT_CTRL.encode(enable=enable, staleness=staleness))

    async def host_owns_checkpoints(self):
        """The checkpoint engine stays off and the host may write the checkpoint regions
        (software checkpointing)."""
        await self.write(Reg.CKPT_CTRL, REG.CKPT_CTRL.encode(host_owns=1))

    async def commit(self, batch_id, *, wait=True, after_submit=None):
        """``COMMIT``; returns its error, or without ``wait`` its sequence number at once
        (the device commits in order; ``COMMITTED`` and ``ERROR`` show the outcome)."""
        if not wait:
            return await self._submit_only(Op.COMMIT, batch_id, after_submit)
        return (await self._run(Op.COMMIT, batch_id, 0, 0, 0, after_submit=after_submit))[0]

    async def stage_mlp(self, params):
        """The GPU stages a copy of its MLP parameters (float32) for the snapshot pull."""
        await self.transport.write_host(self.mlp_line, np.asarray(params, dtype=np.float32))

    async def snapshot(self, batch_id, *, wait=True, after_submit=None):
        """Start the pull of the staged copy as the snapshot of ``batch_id``; the descriptor
        completes when the pull has started. Without ``wait``, returns its sequence
        number at once."""
        if not wait:
            return await self._submit_only(Op.SNAPSHOT_MLP, batch_id, after_submit)
        return (await self._run(Op.SNAPSHOT_MLP, batch_id, 0, 0, 0,
                                after_submit=after_submit))[0]

    async def checkpoint_state(self):
        """``CKPT_STATE``, ``COMMITTED``, ``SNAPSHOT`` and ``DURABLE``, decoded."""
        state = REG.CKPT_STATE.decode(await self.read(Reg.CKPT_STATE))
        committed, snapshot, durable = [await self.read(Reg[n])
                                        for n in ("COMMITTED", "SNAPSHOT", "DURABLE")]
        return {**{k: bool(v) if REG.CKPT_STATE.field(k).width == 1 else v
                   for k, v in state.items()},
                "committed": _batch(committed, REG.COMMITTED),
                "snapshot": _batch(snapshot, REG.SNAPSHOT),
                "durable": _batch(durable, REG.DURABLE)}

    async def wait_snapshot(self, batch_id):
        """Wait until the newest valid snapshot is of ``batch_id`` or later; returns
        :meth:`checkpoint_state`."""
        deadline = self.transport.deadline(self.timeout_cycles)
        while True:
            snap = _batch(await self.read(Reg.SNAPSHOT), REG.SNAPSHOT)
            if snap is not None and snap >= batch_id:
                return await self.checkpoint_state()
            if REG.CKPT_STATE.get(await self.read(Reg.CKPT_STATE), "snapshot_failed"):
                raise DeviceError(f"the snapshot pull of batch {batch_id} failed")
            if deadline.expired():
                raise TimeoutError(f"no valid snapshot of batch {batch_id} after "
                                   f"{self.timeout_cycles} cycles")
            await self.transport.sleep(128)

    async def recover(self, target=None):
        """``RECOVER``; returns a :class:`Recovery`. ``target`` (a device of a pool): the
        pool's durable batch, to roll back to (``m`` is then ``None`` if no snapshot of
        this device is that old)."""
        before = await self.read(Reg.RECOVER_CYCLES)
        error = (await self._run(Op.RECOVER, NO_TARGET if target is None else target,
                                 0, 0, 0))[0]
        found = REG.RECOVERED.decode(await self.read(Reg.RECOVERED))
        info = REG.RECOVERED_INFO.decode(await self.read(Reg.RECOVERED_INFO))
        cycles = await self.read(Reg.RECOVER_CYCLES) - before
        if error != ErrorCode.NONE:
            return Recovery(error, None, None, 0, cycles, info["lines_read"])
        if not (info["d_valid"] and (info["m_valid"] or target is not None)):
            raise DeviceError(f"RECOVER completed without a result ({info})")
        return Recovery(error, found["d"], found["m"] if info["m_valid"] else None,
                        info["rolled_back"], cycles, info["lines_read"])

    async def checkpoint_records(self):
        """What the checkpoint records on the media say before a ``RECOVER``: a
        :class:`~trainingcxl.host.model.recovery.Checkpoint` (a pool's host reads every
        device's to choose the pool's durable batch)."""
        lines = await self.read_media_lines(checkpoint_lines(self.config))
        return newest_checkpoint(self.config, lines.__getitem__)

    async def quiesce(self, poll_cycles=64):
        """Let the device finish what it was given (a device of a pool whose power stayed
        on, before it rolls back with the others): every descriptor queued, the snapshot
        pull, the undo logger's writes (until its busy count stops growing)."""
        self.submitted = await self.read(Reg.SUBMITTED)
        await self.wait_completed(self.submitted)
        deadline = self.transport.deadline(self.timeout_cycles)
        busy = None
        while True:
            state = REG.CKPT_STATE.decode(await self.read(Reg.CKPT_STATE))
            now = await self.read(Reg.LOG_BUSY)
            if not state["snapshot_busy"] and now == busy:
                return
            if deadline.expired():
                raise TimeoutError(f"the device did not come to rest after "
                                   f"{self.timeout_cycles} cycles: {state}, undo logger busy "
                                   f"for {now} cycles")
            busy = now
            await self.transport.sleep(poll_cycles)

    async def set_pool_durable(self, batch):
        """``POOL_DURABLE``: the newest batch durable on every device of the pool."""
        await self.write(Reg.POOL_DURABLE, batch)

    async def read_snapshot(self, slot_batch):
        """The MLP parameters (float32) in the valid snapshot slot of batch ``slot_batch``,
        checked against the slot header's checksums; ``None`` if no slot holds one."""
        cfg = self.config
        for base in cfg.snapshot_base:
            header = valid_header((await self.read_media(base, 1))[0], SNAPSHOT)
            if header is None or header.batch != slot_batch:
                continue
            params = snapshot_params(cfg, header, await self.read_media(base + 1, header.a))
            if params is None:
                raise DeviceError(f"snapshot of batch {slot_batch}: valid header, torn data")
            return params
        return None

    def forget_host_memory(self):
        """The GPU's memory lost its contents (a power failure of the whole system)."""
        self.transport.forget_host_memory()

    async def local_host_memory(self):
        """What the engines read and write over CXL.cache is in the device's own buffer
        (``near-data``: explicit copies put it there): no link latency on CXL.cache, and
        a buffer access time instead of the host's memory."""
        await self.write(Reg.LINK_LATENCY, REG.LINK_LATENCY.encode(mem=self.config.link.latency))
        self.transport.use_local_host_memory()

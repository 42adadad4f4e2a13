"""Test bench for the whole device: clock, reset, host models and high-level operations."""

import json
import os

import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, First, RisingEdge, Timer
from cocotb.utils import get_sim_time

from trainingcxl.spec.descriptors import ErrorCode, Op
from trainingcxl.spec.registers import DEVICE_ID, Reg
from trainingcxl.hdl.cxl.messages import D2HData, D2HReq, S2MDrs, S2MNdr
from trainingcxl.spec.config import LINE_BYTES, NOMINAL_CLOCK_MHZ, Config
from trainingcxl.host.device_regs import (decode_checkpoint_state, desc_op_word, geometry_word,
                                          gpu_window_writes, read_snapshot)
from trainingcxl.spec.host_layout import HostLayout
from .control_driver import ControlDriver
from .cxl_mem_master import CxlMemMaster
from .host_memory import HostMemory
from .runner import ARGS_ENV, CONFIG_ENV
from .streams import StreamMonitor

__all__ = ["bench_config", "bench_args", "LookupResult", "DeviceTB"]

PERIOD_NS = 1000 // NOMINAL_CLOCK_MHZ          # 4 ns


def bench_config():
    """The configuration the runner built the device with."""
    return Config.from_json(os.environ[CONFIG_ENV])


def bench_args():
    return json.loads(os.environ.get(ARGS_ENV, "{}"))


def rows_to_lines(table):
    """``(rows, dim)`` int32 -> list of line integers, row-major."""
    raw = np.ascontiguousarray(table, dtype=np.int32).tobytes()
    return [int.from_bytes(raw[i:i + LINE_BYTES], "little") for i in range(0, len(raw), LINE_BYTES)]


class LookupResult:
    def __init__(self, pooled, error, cycles):
        self.pooled, self.error, self.cycles = pooled, error, cycles


class DeviceTB:
    """Owns the clock and the host-side models of one simulated device.

    Host memory for descriptors is laid out by :class:`HostLayout` from host
    line ``HOST_BASE``.
    """

    HOST_BASE = HostLayout.BASE
    #: Cycles host memory takes to answer a CXL.cache request, beyond the link:
    #: a DRAM access of about 80 ns, with jitter so that answers overtake each other.
    HOST_DELAY = (16, 32)
    #: The same for the device's own staging buffer (``near-data``).
    LOCAL_DELAY = (2, 6)

    def __init__(self, dut, config, *, seed=0, backpressure=None, gaps=None, host_delay=None,
                 protocol_checks=True):
        self.dut, self.config = dut, config
        self.clock = dut.clk
        Clock(dut.clk, PERIOD_NS, unit="ns").start()
        dut.rst.value = 1
        dut.power_fail.value = 0
        cfg = config
        layout = HostLayout(cfg, base=self.HOST_BASE)
        self.idx_lines, self.off_lines, self.out_lines = (
            layout.idx_lines, layout.off_lines, layout.out_lines)
        self.delta_line, self.mlp_line = layout.delta_line, layout.mlp_line
        self.layout = layout
        self.idx_line, self.off_line, self.out_line = (
            self.idx_lines[0], self.off_lines[0], self.out_lines[0])
        self.mem = CxlMemMaster(dut, dut.clk, pause=backpressure, gaps=gaps)
        # The link's latency is in the RTL; host memory adds its own access time.
        if host_delay is None:
            host_delay = self.HOST_DELAY
        self.host = HostMemory(dut, dut.clk, base=self.HOST_BASE, lines=layout.lines,
                               period_ns=PERIOD_NS, delay=host_delay, seed=seed,
                               pause=backpressure)
        self.ctl = ControlDriver(dut, dut.clk)
        self.submitted = 0              # descriptors the device has queued since power-up
        # Every stream the device drives must hold valid and payload until taken.
        self.monitors = []
        if protocol_checks:
            for prefix, shape in (("cxl_mem__s2m_ndr", S2MNdr), ("cxl_mem__s2m_drs", S2MDrs),
                                  ("cxl_cache__d2h_req", D2HReq), ("cxl_cache__d2h_data", D2HData)):
                self.monitors.append(StreamMonitor(dut, prefix, shape, dut.clk))

    async def reset(self, cycles=4):
        self.submitted = 0
        self.dut.rst.value = 1
        await ClockCycles(self.clock, cycles)
        self.dut.rst.value = 0
        await RisingEdge(self.clock)

    async def power_fail(self, cycles=2):
        """Cut the power: every volatile state of the device is lost; host requests in flight too."""
        self.dut.power_fail.value = 1
        await ClockCycles(self.clock, cycles)
        self.dut.power_fail.value = 0
        self.mem.forget_outstanding()
        self.ctl.forget()
        self.host.forget()
        self.submitted = 0
        await RisingEdge(self.clock)

    async def cycles(self):
        return await self.ctl.read(Reg.CYCLES)

    async def check_identity(self):
        ident = await self.ctl.read(Reg.ID)
        assert ident == DEVICE_ID, f"ID register reads {ident:#x}, expected {DEVICE_ID:#x}"
        geo = await self.ctl.read(Reg.GEOMETRY)
        want = geometry_word(self.config)
        assert geo == want, f"device geometry {geo:#x} does not match the configuration {want:#x}"

    # -- embedding tables through CXL.mem -------------------------------------------

    def row_addr(self, table, row):
        return self.config.hdm_base + self.config.table_base[table] + row * self.config.lines_per_row

    async def load_tables(self, tables):
        lines = {}
        for t, table in enumerate(tables):
            for k, line in enumerate(rows_to_lines(table)):
                lines[self.row_addr(t, 0) + k] = line
        result = await self.mem.write_lines(lines)
        bad = [a for a, op in result.items() if op.name != "Cmp"]
        assert not bad, f"{len(bad)} table writes refused, first at {bad[0]:#x}"

    async def read_tables(self):
        cfg = self.config
        out = []
        for t, rows in enumerate(cfg.tables):
            addrs = [self.row_addr(t, 0) + k for k in range(rows * cfg.lines_per_row)]
            got = await self.mem.read_lines(addrs)
            raw = b"".join(got[a][0].to_bytes(LINE_BYTES, "little") for a in addrs)
            out.append(np.frombuffer(raw, dtype=np.int32).reshape(rows, cfg.dim).copy())
        return out

    # -- descriptors -------------------------------------------------------------------

    async def submit(self, op, batch, *, n_bags, n_indices, idx_addr, off_addr, vec_addr):
        await self.ctl.write(Reg.DESC_OP, desc_op_word(op, batch))
        await self.ctl.write(Reg.DESC_SIZE, n_bags | n_indices << 32)
        await self.ctl.write(Reg.DESC_IDX, idx_addr)
        await self.ctl.write(Reg.DESC_OFF, off_addr)
        await self.ctl.write(Reg.DESC_VEC, vec_addr)
        await self.ctl.write(Reg.DOORBELL, 1)

    async def wait_completed(self, count, *, timeout_cycles=5_000_000):
        """Wait until ``count`` descriptors have completed, sleeping on the ``irq`` line."""
        waited_from = get_sim_time("ns")
        while True:
            done = await self.ctl.read(Reg.COMPLETED)
            await self.ctl.write(Reg.IRQ_ACK, done)
            if done >= count:
                return done
            if (get_sim_time("ns") - waited_from) / PERIOD_NS > timeout_cycles:
                raise TimeoutError(f"{count} descriptors not completed after {timeout_cycles} "
                                   f"cycles (completed: {done})")
            if not self.dut.irq.value:
                await First(RisingEdge(self.dut.irq), Timer(65536 * PERIOD_NS, "ns"))

    async def _submit(self, op, batch_id, n_bags, n_indices, vec_line, *, relaxed=False,
                      nolog=False, coalesced=False):
        """Stage and ring one descriptor without waiting for it; returns its sequence number
        (the device's ``SUBMITTED`` count once it is queued)."""
        k = batch_id % 2
        await self.ctl.write(Reg.DESC_OP, desc_op_word(op, batch_id, relaxed=relaxed, nolog=nolog,
                                                       coalesced=coalesced))
        await self.ctl.write(Reg.DESC_SIZE, n_bags | n_indices << 32)
        await self.ctl.write(Reg.DESC_IDX, self.idx_lines[k] * LINE_BYTES)
        await self.ctl.write(Reg.DESC_OFF, self.off_lines[k] * LINE_BYTES)
        await self.ctl.write(Reg.DESC_VEC, vec_line * LINE_BYTES)
        await self.ctl.write(Reg.DOORBELL, 1)
        seq = await self.ctl.read(Reg.SUBMITTED)
        if seq == self.submitted:
            error = ErrorCode(await self.ctl.read(Reg.ERROR) & 0xFF)
            raise AssertionError(f"{op.name} of batch {batch_id} was not queued ({error.name})")
        self.submitted = seq
        return seq

    async def _run(self, op, batch_id, n_bags, n_indices, vec_line, **flags):
        """Submit one descriptor and wait for it; returns ``(error, cycles)``."""
        t0 = await self.cycles()
        seq = await self._submit(op, batch_id, n_bags, n_indices, vec_line, **flags)
        done = await self.wait_completed(seq)
        cycles = await self.cycles() - t0
        # Descriptors complete in order; nothing was submitted after this one.
        assert done == seq, f"{done} descriptors completed while waiting for number {seq}"
        last = await self.ctl.read(Reg.LAST_DONE)
        assert last & 0xFFFFFFFF == batch_id & 0xFFFFFFFF, f"completion for batch {last & 0xFFFFFFFF}"
        return ErrorCode(last >> 40 & 0xFF), cycles

    def _stage_batch(self, batch_id, indices, offsets):
        k = batch_id % 2
        self.host.write_array(self.idx_lines[k] * LINE_BYTES, np.asarray(indices, np.uint32))
        self.host.write_array(self.off_lines[k] * LINE_BYTES, np.asarray(offsets, np.uint32))

    def pooled(self, batch_id, n_bags):
        """The pooled vectors of ``batch_id`` as they are in host memory now."""
        line = self.out_lines[batch_id % 2]
        raw = self.host.read_array(line * LINE_BYTES, n_bags * self.config.dim, np.int32)
        return raw.reshape(n_bags, self.config.dim)

    async def lookup(self, batch_id, indices, offsets, *, relaxed=False, nolog=False):
        """Run one LOOKUP; returns the pooled vectors read back from host memory.

        With ``relaxed`` the rows the previous batch touched are left out
        until :meth:`finish` (after that batch's update); with ``nolog`` the
        rows read are not logged."""
        n_bags = len(offsets) - 1
        self._stage_batch(batch_id, indices, offsets)
        error, cycles = await self._run(Op.LOOKUP, batch_id, n_bags, len(indices),
                                        self.out_lines[batch_id % 2], relaxed=relaxed, nolog=nolog)
        return LookupResult(self.pooled(batch_id, n_bags), error, cycles)

    async def finish(self, batch_id, n_bags):
        """FINISH a relaxed lookup of ``batch_id``; returns ``(error, cycles)``."""
        return await self._run(Op.FINISH, batch_id, n_bags, 0, self.out_lines[batch_id % 2])

    async def update(self, batch_id, indices, offsets, deltas, *, coalesced=False):
        """Run one UPDATE with ``deltas`` (n_bags, dim) int32; returns ``(error, cycles)``.

        ``coalesced``: the arrays come from :func:`~trainingcxl.host.golden.coalesce_update`
        (each row once), not from the batch's lookup."""
        self._stage_batch(batch_id, indices, offsets)
        self.host.write_array(self.delta_line * LINE_BYTES, np.asarray(deltas, np.int32))
        return await self._run(Op.UPDATE, batch_id, len(offsets) - 1, len(indices),
                               self.delta_line, coalesced=coalesced)

    # -- checkpointing -------------------------------------------------------------------

    async def set_gpu_window(self):
        """Confine the descriptors' arrays to the host layout (``GPU_BASE``, ``GPU_LIMIT``),
        on a device that checks them (``Config.gpu_window``)."""
        for reg, value in gpu_window_writes(self.config, self.layout):
            await self.ctl.write(reg, value)

    async def configure_checkpoints(self, staleness, *, enable=True):
        """Confine descriptors to the GPU window, turn logging on with staleness bound
        ``staleness`` and point at the MLP staging copy."""
        await self.set_gpu_window()
        await self.ctl.write(Reg.MLP_ADDR, self.mlp_line * LINE_BYTES)
        await self.ctl.write(Reg.MLP_LINES, self.config.mlp_lines)
        await self.ctl.write(Reg.CKPT_CTRL, int(enable) | staleness << 8)

    async def commit(self, batch_id, *, wait=True):
        """COMMIT ``batch_id``; returns its error, or without ``wait`` its sequence number at
        once (the device commits in order; ``COMMITTED`` and ``ERROR`` show the outcome)."""
        if not wait:
            return await self._submit(Op.COMMIT, batch_id, 0, 0, 0)
        return (await self._run(Op.COMMIT, batch_id, 0, 0, 0))[0]

    def stage_mlp(self, params):
        """The GPU stages a copy of its MLP parameters (float32) for the snapshot pull."""
        params = np.asarray(params, dtype=np.float32)
        self.host.write_array(self.mlp_line * LINE_BYTES, params)

    async def snapshot(self, batch_id, *, wait=True):
        """Start the pull of the staged copy as the snapshot of ``batch_id``; the descriptor
        completes when the pull has started. Without ``wait``, returns its sequence number
        at once."""
        if not wait:
            return await self._submit(Op.SNAPSHOT_MLP, batch_id, 0, 0, 0)
        return (await self._run(Op.SNAPSHOT_MLP, batch_id, 0, 0, 0))[0]

    async def checkpoint_state(self):
        """The checkpoint registers, decoded."""
        rd = self.ctl.read
        return decode_checkpoint_state(await rd(Reg.CKPT_STATE), await rd(Reg.COMMITTED),
                                       await rd(Reg.SNAPSHOT), await rd(Reg.DURABLE))

    async def wait_snapshot(self, batch_id, *, timeout_cycles=5_000_000):
        """Wait until the newest valid snapshot is of ``batch_id`` or later."""
        t0 = get_sim_time("ns")
        while True:
            snap = await self.ctl.read(Reg.SNAPSHOT)
            if snap >> 32 & 1 and snap & 0xFFFFFFFF >= batch_id:
                return await self.checkpoint_state()
            if await self.ctl.read(Reg.CKPT_STATE) >> 3 & 1:
                raise AssertionError(f"the snapshot pull of batch {batch_id} failed")
            if (get_sim_time("ns") - t0) / PERIOD_NS > timeout_cycles:
                raise TimeoutError(f"no valid snapshot of batch {batch_id} after {timeout_cycles} cycles")
            await ClockCycles(self.clock, 128)

    async def recover(self):
        """Run RECOVER; returns ``(error, D, m, rolled_back, cycles)`` (D, m None without a checkpoint)."""
        before = await self.ctl.read(Reg.RECOVER_CYCLES)
        error = (await self._run(Op.RECOVER, 0, 0, 0, 0))[0]
        rec = await self.ctl.read(Reg.RECOVERED)
        info = await self.ctl.read(Reg.RECOVERED_INFO)
        cycles = await self.ctl.read(Reg.RECOVER_CYCLES) - before
        if error != ErrorCode.NONE:
            return error, None, None, 0, cycles
        assert info & 0b11 == 0b11, f"RECOVER completed without a result ({info:#x})"
        return error, rec & 0xFFFFFFFF, rec >> 32, info >> 32, cycles

    async def read_media(self, first, count):
        """Media lines ``first .. first+count-1`` through CXL.mem (protected regions read fine)."""
        base = self.config.hdm_base
        got = await self.mem.read_lines([base + first + k for k in range(count)])
        return [got[base + first + k][0] for k in range(count)]

    async def read_snapshot(self, slot_batch):
        """The MLP parameters in the valid snapshot slot of batch ``slot_batch``, checked
        against the slot header's checksums; ``None`` if no slot holds a valid one."""
        return await read_snapshot(self.config, self.read_media, slot_batch)

    async def counters(self):
        regs = [Reg.CYCLES, Reg.LOOKUP_BUSY, Reg.LOOKUP_LINES, Reg.LOOKUP_BAGS,
                Reg.LOOKUP_OVERFLOWS, Reg.PMEM_READS, Reg.PMEM_WRITES, Reg.CACHE_READS,
                Reg.CACHE_WRITES, Reg.MEM_ERRORS, Reg.UPDATE_BUSY, Reg.UPDATE_LINES,
                Reg.UPDATE_FORWARDED, Reg.LOOKUP_LOG_HOLDS, Reg.LOG_RECORDS, Reg.LOG_FULL,
                Reg.CKPT_STALLS, Reg.LOG_BARRIER, Reg.RECOVER_CYCLES, Reg.SNAPSHOT_LINES,
                Reg.LOOKUP_STALLS, Reg.UPDATE_STALLS, Reg.PMEM_READS_DATA, Reg.PMEM_READS_LOG,
                Reg.PMEM_READS_SNAPSHOT, Reg.PMEM_WRITES_DATA, Reg.PMEM_WRITES_LOG,
                Reg.PMEM_WRITES_SNAPSHOT, Reg.LINK_TO_DEVICE, Reg.LINK_TO_DEVICE_DATA,
                Reg.LINK_TO_HOST, Reg.LINK_TO_HOST_DATA, Reg.LOG_BUSY, Reg.SNAPSHOT_BUSY]
        return {r.name.lower(): await self.ctl.read(r) for r in regs}

    async def local_host_memory(self):
        """What the engines read and write over CXL.cache is in the device's own buffer
        (``near-data``: explicit copies put it there): no link latency on CXL.cache, and
        a buffer access time instead of the host's memory."""
        await self.ctl.write(Reg.LINK_LATENCY, self.config.link.latency)
        self.host.delay = self.LOCAL_DELAY

    def check_models(self):
        errors = self.mem.errors + self.host.errors
        for mon in self.monitors:
            errors += mon.violations
        assert not errors, "host models saw protocol errors:\n" + "\n".join(errors[:10])

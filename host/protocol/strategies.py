"""How each system of the ladder pools, updates, logs and checkpoints a batch.

A strategy is what :class:`~trainingcxl.host.protocol.training.TrainingRun`
asks for every step of a batch; the loop itself never asks which system it
runs. Three kinds cover every system (:mod:`.systems`):

* :class:`Engines`: the device's engines pool and update (``near-data``,
  ``cxl-d``, ``cxl-b``, ``cxl``); its flags say whether they reach GPU memory
  over CXL.cache or through modelled copies, and whether rows are logged in a
  pass of their own;
* :class:`Software`: the host pools and updates over CXL.mem (``pmem``,
  :mod:`.software_path`) or on its own memory bus (``host-pmem``,
  :mod:`.host_pmem`) and checkpoints in software;
* :class:`LookupOnly`: a device with the lookup engine alone (the small
  board): it pools, the host applies each batch's update over CXL.mem, and
  nothing is checkpointed.
"""

import numpy as np

from trainingcxl.spec.descriptors import ErrorCode
from trainingcxl.host.driver.device import LookupResult, lines_to_rows, rows_to_lines
from trainingcxl.host.model.fixed import wrap32
from trainingcxl.host.model.golden import coalesce_update
from .host_pmem import HostPmemEmbeddings
from .software_path import SoftwareEmbeddings

__all__ = ["Engines", "Software", "LookupOnly", "strategy"]

#: A snapshot pull the GPU waits for must end within this many cycles (a hang otherwise).
SNAPSHOT_WAIT_CYCLES = 5_000_000


def _coalesced(cfg, batch, deltas):
    """The GPU sums each row's contributions (sparse-gradient deduplication), so the
    device reads and writes every row once; the bags' layout holds that batch unless
    the tables have more distinct rows than ``max_bags`` allows."""
    indices, offsets, rows_deltas = coalesce_update(cfg, batch.indices, batch.offsets, deltas)
    if len(offsets) - 1 <= cfg.max_bags:
        return indices, offsets, rows_deltas, True
    return batch.indices, batch.offsets, deltas, False


class Engines:
    """The device's engines do the embedding work and its checkpoint engine checkpoints."""

    def __init__(self, system):
        self.system = system

    def bind(self, run):
        """Called once by the run that uses this strategy."""

    def stats(self):
        """What the host did beside the device, to add to the run's ``host`` figures."""
        return {}

    async def configure(self, run):
        await run.device.configure_checkpoints(run.k, enable=run.checkpointing)
        if not self.system.coherent:
            # Explicit copies put the engines' inputs and outputs in the device's own
            # buffer: no CXL link between the engines and that memory.
            await run.device.local_host_memory()

    async def format(self, run):
        """Power-up on empty media: RECOVER finds nothing and formats the checkpoint state."""
        if run.checkpointing:
            error = (await run.device.recover()).error
            if error != ErrorCode.NO_CHECKPOINT:
                raise RuntimeError(f"RECOVER on blank media gave {error.name}: the media holds an "
                                   f"earlier run (power-cycle or reprogram a board)")

    async def checkpoint_zero(self, run, params):
        dev = run.device
        if await dev.commit(0) != ErrorCode.NONE:
            raise RuntimeError("COMMIT of batch 0 refused")
        await dev.stage_mlp(params)
        if await dev.snapshot(0) != ErrorCode.NONE:
            raise RuntimeError("SNAPSHOT_MLP of batch 0 refused")
        await dev.wait_snapshot(0)

    async def lookup(self, run, b, batch, *, relaxed=False):
        dev = run.device
        if not self.system.coherent:
            await run.copy(4 * (len(batch.indices) + len(batch.offsets)))      # host -> device
        looked = await dev.lookup(b, batch.indices, batch.offsets, relaxed=relaxed,
                                  nolog=self.system.log_pass,
                                  after_submit=run.hook("lookup", b))
        if not self.system.coherent:
            await run.copy(batch.n_bags * run.cfg.dim * 4, hops=2)             # device -> host -> GPU
        return looked

    async def finish(self, run, b, looked, n_bags):
        """Add the rows a relaxed lookup of ``b`` deferred, now that ``b - 1`` is updated."""
        fin, _ = await run.device.finish(b, n_bags)
        looked.pooled = await run.device.pooled(b, n_bags)
        if fin != ErrorCode.NONE:
            looked.error = fin

    async def update(self, run, b, batch, deltas, looked):
        """Log (if the system logs in a pass of its own) and apply batch ``b``'s deltas;
        returns the error code."""
        dev = run.device
        if self.system.log_pass and run.checkpointing:
            # Logging on the critical path: the batch's rows read again, this time logged;
            # the UPDATE then waits until every record is persistent.
            run.enter("log", b)
            logged = await dev.lookup(b, batch.indices, batch.offsets)
            if logged.error != ErrorCode.NONE:
                return logged.error
        run.enter("update", b)
        indices, offsets, rows_deltas, coalesced = _coalesced(run.cfg, batch, deltas)
        if not self.system.coherent:
            await run.copy((len(offsets) - 1) * run.cfg.dim * 4, hops=2)     # GPU -> host -> device
        error, _ = await dev.update(b, indices, offsets, rows_deltas, coalesced=coalesced,
                                    after_submit=run.hook("update", b))
        return error

    async def commit(self, run, b):
        """COMMIT ``b`` without waiting for the record to persist: the device commits in
        order, and :meth:`snapshot` checks that the commit before took effect.
        Checkpointing stays off the host's critical path."""
        await run.device.commit(b, wait=False, after_submit=run.hook("commit", b))
        return ErrorCode.NONE

    async def snapshot(self, run, b):
        """Snapshot the MLP after batch ``b``. The device's pull is staged if the engine is
        free; with a pull in flight that would leave the snapshots more than K behind,
        the host waits for it."""
        dev = run.device
        if run.queued_snapshot:
            # The staged copy may change only once the pull queued before has started.
            await dev.wait_completed(run.queued_snapshot)
            run.queued_snapshot = 0
        st = await dev.checkpoint_state()
        if st["committed"] is None or st["committed"] < b - 1:
            run.record["errors"].append({"batch": b - 1, "commit": "NOT_COMMITTED",
                                         "committed": st["committed"]})
        if st["snapshot_busy"] and run.pulling is not None and b - run.pulling > run.k:
            waited = 0
            while st["snapshot_busy"]:
                if waited > SNAPSHOT_WAIT_CYCLES:
                    raise TimeoutError(f"batch {b}: the MLP snapshot pull of batch "
                                       f"{run.pulling} still runs after {waited} cycles")
                await run.runtime.wait(64)
                waited += 64
                st = await dev.checkpoint_state()
        if st["durable"] is not None:
            run.durable = max(run.durable, st["durable"])
        if not st["snapshot_busy"]:
            if not self.system.coherent:
                await run.copy(run.cfg.mlp_params * 4, hops=2)             # GPU -> host -> device
            await dev.stage_mlp(run.gpu.model.parameters())
            if run.k == 0:
                error = await dev.snapshot(b, after_submit=run.hook("snapshot", b))
                if error != ErrorCode.NONE:
                    raise RuntimeError(f"SNAPSHOT_MLP({b}) refused: {error.name}")
            else:
                # Relaxed snapshots: the pull is queued behind the commit and the host goes
                # on; the SNAPSHOT register shows when it is done.
                run.queued_snapshot = await dev.snapshot(b, wait=False,
                                                         after_submit=run.hook("snapshot", b))
            run.pulling = b
        if run.k == 0:
            st = await dev.wait_snapshot(b)
            run.durable = max(run.durable, st["durable"])

    async def recover(self, run):
        return await run.device.recover()

    async def durable_after_recovery(self, run, d):
        st = await run.device.checkpoint_state()
        return st["durable"] if st["durable"] is not None else d

    async def check_committed(self, run, last):
        if run.checkpointing:
            st = await run.device.checkpoint_state()
            if st["committed"] != last:
                run.record["errors"].append({"batch": last, "commit": "NOT_COMMITTED",
                                             "committed": st["committed"]})


class Software(Engines):
    """``pmem``: the host reads every row over CXL.mem, the GPU pools and updates, the host
    writes the rows back, and checkpoints are software's (:mod:`.software_path`);
    ``host-pmem``: the CPU does it all on its own memory bus (:mod:`.host_pmem`)."""

    def __init__(self, system):
        super().__init__(system)
        self.soft = None

    def bind(self, run):
        kind = HostPmemEmbeddings if self.system.host_bus else SoftwareEmbeddings
        self.soft = kind(run.device, checkpointing=run.checkpointing, wait=run.runtime.wait,
                         now=run.runtime.now)

    def stats(self):
        return dict(self.soft.stats)

    async def configure(self, run):
        if run.checkpointing:
            await self.soft.configure()

    async def format(self, run):
        pass

    async def checkpoint_zero(self, run, params):
        await self.soft.commit(0)
        await self.soft.snapshot(0, params)

    async def lookup(self, run, b, batch, *, relaxed=False):
        pooled, old = await self.soft.lookup(batch)
        looked = LookupResult(pooled, ErrorCode.NONE, 0)
        looked.old = old
        return looked

    async def update(self, run, b, batch, deltas, looked):
        run.enter("update", b)
        await self.soft.update(b, batch, deltas, looked.old)
        return ErrorCode.NONE

    async def commit(self, run, b):
        await self.soft.commit(b)
        return ErrorCode.NONE

    async def snapshot(self, run, b):
        """Stop-and-copy: training waits while the host copies the MLP."""
        await self.soft.snapshot(b, run.gpu.model.parameters())
        run.durable = b

    async def recover(self, run):
        return await self.soft.recover()

    async def durable_after_recovery(self, run, d):
        return d

    async def check_committed(self, run, last):
        pass


class LookupOnly(Engines):
    """A device with the lookup engine alone: it pools, and the host applies each batch's
    coalesced update itself, reading and writing the rows over CXL.mem. Nothing is
    checkpointed, so such a device cannot survive a power failure."""

    async def update(self, run, b, batch, deltas, looked):
        run.enter("update", b)
        cfg, dev = run.cfg, run.device
        # Each row once, with its summed delta (the host has no bag limit).
        indices, offsets, rows_deltas = coalesce_update(cfg, batch.indices, batch.offsets, deltas)
        for k in range(len(offsets) - 1):
            if offsets[k + 1] == offsets[k]:
                continue
            t, row = k % cfg.n_tables, int(indices[offsets[k]])
            first = cfg.table_base[t] + row * cfg.lines_per_row
            old = lines_to_rows(await dev.read_media(first, cfg.lines_per_row), cfg.dim)[0]
            new = wrap32(old.astype(np.int64) - np.asarray(rows_deltas[k], dtype=np.int64))
            await dev.write_media(dict(enumerate(rows_to_lines(new.astype(np.int32)), first)))
        return ErrorCode.NONE


def strategy(system):
    """The strategy that trains the way ``system`` (:class:`~.systems.System`) says."""
    if not system.engines:
        return Software(system)
    if not system.device_updates:
        return LookupOnly(system)
    return Engines(system)

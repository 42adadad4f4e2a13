"""How a system checkpoints: commits, MLP snapshots and recovery, and the state they keep.

See docs/design.md, "Checkpoint protocol", and docs/checkpointing.md.

A strategy (:mod:`.strategies`) holds one of these; the training loop
(:mod:`.training`) asks it to format the media, checkpoint batch 0 and every
batch after it, recover after a power failure and say what is durable. The
host's view of the snapshots (the newest batch it has seen durable, the pull in
flight, a ``SNAPSHOT_MLP`` not yet waited for) lives here, not in the run:

* :class:`WaitedSnapshots` (K = 0): the device's engine commits and pulls each
  batch's snapshot, and the host waits for the pull;
* :class:`QueuedSnapshots` (K >= 1): the pull is queued behind the commit and
  runs beside the next batches; the host waits only when the snapshots would
  fall more than K behind;
* :class:`SoftwareCheckpoints`: the host writes the commit records and
  stop-and-copy snapshots itself (:mod:`.software_path`);
* :class:`OverlappedSoftwareCheckpoints`: the host writes them itself, a
  snapshot every K + 1 batches, persisted while the GPU computes;
* :class:`Unchecked`: nothing is checkpointed.
"""

from abc import ABC, abstractmethod

from trainingcxl.spec.config import GROUP_RECORDS
from trainingcxl.spec.descriptors import ErrorCode
from trainingcxl.host.driver.device import Recovery
from .run_record import NULL, RunError

__all__ = ["Checkpoints", "Unchecked", "WaitedSnapshots", "QueuedSnapshots",
           "SoftwareCheckpoints", "OverlappedSoftwareCheckpoints", "device_checkpoints"]

#: A snapshot pull the GPU waits for must end within this many cycles (a hang otherwise).
SNAPSHOT_WAIT_CYCLES = 5_000_000


class Checkpoints:
    """What the loop asks of a checkpoint scheme; this base class checkpoints nothing.

    Attributes
    ----------
    durable : int
        The newest batch the host has seen durable.
    """

    def __init__(self):
        self.durable = 0

    @property
    def pull_in_flight(self):
        """A snapshot pull was running, as far as the host knows."""
        return False

    async def configure(self, run):
        """At every power-up, before anything else: set the device up for this scheme."""

    async def format(self, run):
        """Power-up on empty media."""

    async def zero(self, run, params):
        """Checkpoint batch 0 (the initial tables and ``params``, the initial MLP)."""

    async def checkpoint(self, run, b):
        """Commit batch ``b`` (its update done) and snapshot its MLP; returns the commit's
        error code."""
        return ErrorCode.NONE

    async def check_committed(self, run, last):
        """At the end of the run (its last batch, or a stop after the batch in progress):
        the last batch's commit took effect, and its MLP has a snapshot of its own, so that
        a run resumed from here goes on with the tables and MLPs of ``last`` (at K >= 1
        the snapshot would otherwise be up to K batches older and the MLPs roll back)."""

    def power_lost(self):
        """The host's state of the pulls went with the power."""

    async def recover(self, run):
        """``RECOVER`` after a power failure; returns a :class:`Recovery`."""
        return Recovery(ErrorCode.NO_CHECKPOINT, None, None, 0, 0)

    async def recovered(self, run, d):
        """After a recovery to ``d``: what the host now knows to be durable."""
        self.durable = d


class Unchecked(Checkpoints):
    """Nothing is checkpointed; ``configure`` and ``recover`` are the strategy's (a
    device's checkpoint engine is turned off, not left as it was)."""

    def __init__(self, *, configure, recover):
        super().__init__()
        self._configure, self._recover = configure, recover

    async def configure(self, run):
        await self._configure(run)

    async def recover(self, run):
        return await self._recover(run)


class _DeviceCheckpoints(Checkpoints, ABC):
    """The device's checkpoint engine commits and pulls snapshots, the snapshots at most
    ``k`` batches behind the commits; ``path`` is how the MLP reaches the device
    (:mod:`.strategies`)."""

    def __init__(self, k, path):
        super().__init__()
        self.k, self.path = k, path
        self.pulling = None             # batch whose snapshot pull is in flight

    @property
    def pull_in_flight(self):
        return self.pulling is not None

    def power_lost(self):
        self.pulling = None

    async def configure(self, run):
        await run.device.configure_checkpoints(self.k, enable=True)

    async def format(self, run):
        """RECOVER finds nothing on blank media and formats the checkpoint state."""
        error = (await run.device.recover()).error
        if error != ErrorCode.NO_CHECKPOINT:
            raise RuntimeError(f"RECOVER on blank media gave {error.name}: the media holds an "
                               f"earlier run (power-cycle or reprogram a board)")

    async def zero(self, run, params):
        dev = run.device
        if await dev.commit(0) != ErrorCode.NONE:
            raise RuntimeError("COMMIT of batch 0 refused")
        await dev.stage_mlp(params)
        if await dev.snapshot(0) != ErrorCode.NONE:
            raise RuntimeError("SNAPSHOT_MLP of batch 0 refused")
        await dev.wait_snapshot(0)

    async def checkpoint(self, run, b):
        """COMMIT ``b`` without waiting for the record to persist: the device commits in
        order, and the snapshot step checks that the commit before took effect.
        Checkpointing stays off the host's critical path."""
        await run.device.commit(b, wait=False, after_submit=run.hook("commit", b))
        run.enter("snapshot", b)
        await self._snapshot(run, b)
        return ErrorCode.NONE

    async def _before_snapshot(self, run):
        """What must be done before the staged copy may change."""

    @abstractmethod
    async def _pull(self, run, b):
        """Start the pull of batch ``b``'s staged MLP: waited for (K = 0,
        :class:`WaitedSnapshots`) or queued behind the commit (:class:`QueuedSnapshots`)."""

    async def _after_pull(self, run, b):
        """What the host waits for once the pull of ``b`` is started."""

    async def _snapshot(self, run, b):
        """Snapshot the MLP after batch ``b`` if the last pull started is more than K
        batches old. The device's pull is staged if the engine is free; with a pull in
        flight that would leave the snapshots more than K behind, the host waits for it."""
        dev = run.device
        await self._before_snapshot(run)
        st = await dev.checkpoint_state()
        if st["committed"] is None or st["committed"] < b - 1:
            run.record.errors.append(RunError(batch=b - 1, commit="NOT_COMMITTED",
                                              committed=_or_null(st["committed"])))
        if st["snapshot_busy"] and self.pulling is not None and b - self.pulling > self.k:
            waited = 0
            while st["snapshot_busy"]:
                if waited > SNAPSHOT_WAIT_CYCLES:
                    raise TimeoutError(f"batch {b}: the MLP snapshot pull of batch "
                                       f"{self.pulling} still runs after {waited} cycles")
                await run.runtime.wait(64)
                waited += 64
                st = await dev.checkpoint_state()
        if st["durable"] is not None:
            self.durable = max(self.durable, st["durable"])
        # One snapshot every K + 1 batches is all the bound needs; more would only add
        # media writes (at small batches a pull takes about a batch). Behind an
        # energy-backed buffer it starts a batch earlier (Config.snapshot_period), and
        # the next lookup never waits for it (without the buffer that would add a pull's
        # media writes for nothing).
        due = self.pulling is None or b - self.pulling >= run.cfg.snapshot_period(self.k)
        if due and not st["snapshot_busy"]:
            await self._stage_and_pull(run, b)
        await self._after_pull(run, b)

    async def _stage_and_pull(self, run, b):
        """Stage the GPU's MLP after batch ``b`` and start its pull (the engine is free)."""
        await self.path.copy(run, run.cfg.mlp_params * 4, hops=2)    # GPU -> host -> device
        await run.device.stage_mlp(run.gpu.model.parameters())
        await self._pull(run, b)
        self.pulling = b

    async def recover(self, run):
        return await run.device.recover()

    async def recovered(self, run, d):
        st = await run.device.checkpoint_state()
        self.durable = st["durable"] if st["durable"] is not None else d

    async def check_committed(self, run, last):
        dev = run.device
        if last > 0 and self.pulling != last and run.gpu is not None:
            # A last snapshot of the last batch's MLP: the pull in flight ends first (the
            # staged copy may not change under it).
            if self.pulling is not None:
                await dev.wait_snapshot(self.pulling)
            await self._before_snapshot(run)
            await self._stage_and_pull(run, last)
        st = await (dev.wait_snapshot(self.pulling) if self.pulling is not None
                    else dev.checkpoint_state())
        if st["durable"] is not None:
            self.durable = max(self.durable, st["durable"])
        if st["committed"] != last:
            run.record.errors.append(RunError(batch=last, commit="NOT_COMMITTED",
                                              committed=_or_null(st["committed"])))


class WaitedSnapshots(_DeviceCheckpoints):
    """K = 0: every batch's snapshot is pulled before the next batch starts."""

    async def _pull(self, run, b):
        error = await run.device.snapshot(b, after_submit=run.hook("snapshot", b))
        if error != ErrorCode.NONE:
            raise RuntimeError(f"SNAPSHOT_MLP({b}) refused: {error.name}")

    async def _after_pull(self, run, b):
        st = await run.device.wait_snapshot(b)
        self.durable = max(self.durable, st["durable"])


class QueuedSnapshots(_DeviceCheckpoints):
    """K >= 1 (relaxed snapshots): the pull is queued behind the commit and the host goes
    on; the ``SNAPSHOT`` register shows when it is done."""

    def __init__(self, k, path):
        super().__init__(k, path)
        self.queued = 0                 # sequence number of a SNAPSHOT_MLP not waited for

    def power_lost(self):
        super().power_lost()
        self.queued = 0

    async def _before_snapshot(self, run):
        if self.queued:
            # The staged copy may change only once the pull queued before has started.
            await run.device.wait_completed(self.queued)
            self.queued = 0

    async def _pull(self, run, b):
        self.queued = await run.device.snapshot(b, wait=False,
                                                after_submit=run.hook("snapshot", b))


def device_checkpoints(staleness, path):
    """The device's checkpoint engine with staleness bound ``staleness``."""
    return (WaitedSnapshots if staleness == 0 else QueuedSnapshots)(staleness, path)


class SoftwareCheckpoints(Checkpoints):
    """The host's software checkpoints (``pmem``, ``host-pmem``): commit records and
    stop-and-copy snapshots written by ``soft`` (:mod:`.software_path`)."""

    def __init__(self, soft):
        super().__init__()
        self.soft = soft

    async def configure(self, run):
        await self.soft.configure()

    async def zero(self, run, params):
        await self.soft.commit(0)
        await self.soft.snapshot(0, params)

    async def checkpoint(self, run, b):
        await self.soft.commit(b)
        run.enter("snapshot", b)
        # Stop-and-copy: training waits while the host copies the MLP.
        await self.soft.snapshot(b, run.gpu.model.parameters())
        self.durable = b
        return ErrorCode.NONE

    async def recover(self, run):
        return await self.soft.recover()


class OverlappedSoftwareCheckpoints(SoftwareCheckpoints):
    """Software checkpoints with the staleness bound ``k`` of the device's relaxed
    snapshots, written where the CPU would otherwise wait for the GPU (``host-pmem-k``).

    Each commit record carries K, so a recovery finds ``D = min(committed, m + K)``
    with ``m`` the newest whole snapshot, as the device's does. Every ``k + 1``
    batches the MLP is copied to host memory at the commit (the GPU must not change
    it first) and the CPU persists it in the GPU steps after (:meth:`during_gpu`),
    as many lines as each leaves time for. The host finishes a snapshot on the
    critical path only when the next one is due (it would fall more than K behind,
    like the device's held pull), or when the undo log ring needs the room
    (:meth:`room`): a committed batch stays in the ring until a snapshot covers it.
    """

    def __init__(self, soft, k):
        super().__init__(soft)
        self.k = k
        soft.staleness = k
        self.committed = 0
        self.snapped = 0                # the newest batch whose snapshot is persistent
        self.started = 0                # the newest batch whose snapshot was taken
        self.pending = None             # (batch, slot, fenced groups still to write)

    def power_lost(self):
        self.pending = None

    def _update_durable(self):
        self.durable = min(self.committed, self.snapped + self.k)

    async def zero(self, run, params):
        await super().zero(run, params)
        self.committed = self.snapped = self.started = self.durable = 0

    async def checkpoint(self, run, b):
        await self.soft.commit(b)
        self.committed = b
        run.enter("snapshot", b)
        if b - self.started > self.k:
            if self.pending is not None:
                await self._write(None)         # held: the last one must be whole first
            self.pending = (b, *await self.soft.stage_snapshot(b, run.gpu.model.parameters()))
            self.started = b
        self._update_durable()
        return ErrorCode.NONE

    async def during_gpu(self, run):
        """Persist what the rest of the GPU step leaves time for of a pending snapshot."""
        await self._write(run.gpu_left)

    async def room(self, run, b, rows):
        """Before batch ``b`` logs ``rows`` records: if they would overwrite a record a
        recovery may still need (of a batch after the durable one), finish the pending
        snapshot, which makes every committed batch durable."""
        soft, cfg = self.soft, run.cfg
        need = -(-rows // GROUP_RECORDS)
        oldest = soft.first_group.get(self.durable + 1, soft.groups)
        if self.pending is not None and soft.groups + need - cfg.log_groups > oldest:
            await self._write(None)

    async def _write(self, left):
        """Write the pending snapshot's groups in order: all of them (``left`` None), or
        as many lines as ``left()`` cycles allow before the GPU step ends."""
        pmem = self.soft.cfg.pmem
        num, den = pmem.write_rate
        while self.pending is not None:
            b, slot, groups = self.pending
            lines = list(groups[0].items())
            n = len(lines)
            if left is not None:
                # A fenced group of n lines takes ceil(n * den / num) + write latency.
                n = min(n, (left() - pmem.write_latency) * num // den)
                if n < 1:
                    return
            await self.soft.persist(dict(lines[:n]))
            if n < len(lines):
                groups[0] = dict(lines[n:])
                continue
            groups.pop(0)
            if not groups:
                self.soft.newest_slot = slot
                self.snapped, self.pending = b, None
                self._update_durable()

    async def check_committed(self, run, last):
        # The run ends durable to its last batch, with a snapshot of its own MLP.
        await self._write(None)
        if last > 0 and self.snapped != last and run.gpu is not None:
            self.pending = (last, *await self.soft.stage_snapshot(last, run.gpu.model.parameters()))
            self.started = last
            await self._write(None)

    async def recover(self, run):
        got = await self.soft.recover()
        if got.m is not None:
            self.snapped = self.started = got.m
            self.committed = got.d
        return got


def _or_null(value):
    """A device's figure for a record's optional field: ``null`` when it has none."""
    return NULL if value is None else value

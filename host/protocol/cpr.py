"""CPR's partial recovery, run by the devices of a pool (``train --devices N --recovery cpr``).

The devices train without their checkpoint engine: no undo log, commit records or MLP
snapshots. On CPR's schedule (:class:`~trainingcxl.host.model.partial.PartialCheckpoints`
chooses when and which rows) the host reads the rows a checkpoint saves from each device
over CXL.mem and keeps them, where CPR writes them to remote storage. A failure strikes
one device between two batches (:func:`~trainingcxl.host.model.partial.failure_schedule`):
its power fails, and in CPR's failure model its tables go with it (a node's memory), so
after power-up the host writes the checkpoint's rows back over CXL.mem. The other
devices keep their tables and the GPU its MLPs; every device goes on with the next batch
at the same cycle. The golden model and the float32 reference do the same with their
own checkpoints, and the device's tables are checked against the golden model's right
after the reload and at every check after it.
"""

import numpy as np

from trainingcxl.host.model.partial import PartialCheckpoints, cpr_interval, failure_schedule
from .hooks import RunHooks
from .run_record import CprFailure, CprStats

__all__ = ["CprRecovery"]


class CprRecovery(RunHooks):
    """CPR on one device of a pool, as hooks of the training loop (:mod:`.hooks`): its
    checkpoints and its part in the pool's failures.

    ``link``: the device's :class:`~.pool.PoolLink` (its ``device``, the pool's
    ``devices``, ``align``); ``variant``, ``failure_every``, ``pls`` and ``fraction`` as
    :func:`~trainingcxl.host.model.partial.cpr_interval` and
    :class:`~trainingcxl.host.model.partial.PartialCheckpoints` take them. The
    checkpoints are made once the run's golden models exist (:meth:`started`);
    ``stats`` counts the rows and lines read for checkpoints and written back, and the
    cycles the host spent on them."""

    def __init__(self, link, variant, *, failure_every, pls, fraction):
        self.link, self.variant = link, variant
        self.failure_every, self.pls, self.fraction = failure_every, pls, fraction
        self.models = self.saved = self.schedule = self.stats = None

    def attach(self, run):
        run.record.recovery, run.record.cpr_failures = self.variant, []

    async def started(self, run):
        cfg, failure_every = run.cfg, self.failure_every
        interval = cpr_interval(self.pls, failure_every) if failure_every else run.limit
        self.models = [PartialCheckpoints(cfg, trainer.tables, self.variant, interval,
                                          fraction=self.fraction, seed=run.seed)
                       for trainer in (run.golden, run.reference)]
        # The device's checkpoint as the host read it; the initial tables are the host's.
        self.saved = [t.copy() for t in run.golden.tables]
        self.schedule = dict(failure_schedule(self.link.devices, run.n,
                                              failure_every, run.seed))
        self.stats = CprStats(interval=interval, every=self.models[0].every)

    def finished(self, run, record):
        record.cpr = self.stats.replace()

    async def after_commit(self, run, b, batch):
        """Batch ``b`` is trained: on CPR's schedule, read the rows its checkpoint saves."""
        rows = None
        for model in self.models:
            rows = model.after_batch(b, batch)
        if rows is None:
            return
        t0 = run.now()
        for saved, table_rows, values in zip(self.saved, rows, await run.device.read_rows(rows)):
            saved[table_rows] = values
        st = self.stats
        st.checkpoints += 1
        st.rows_read += sum(len(r) for r in rows)
        st.lines_read += sum(len(r) for r in rows) * run.cfg.lines_per_row
        st.read_cycles += run.now() - t0

    async def before_batch(self, run, b):
        """Before batch ``b``: if a device's failure is planned after batch ``b - 1``, this
        device takes its part (its power fails and its tables are reloaded, or it waits),
        and every device goes on at the same cycle."""
        failed = self.schedule.get(b - 1)
        if failed is None:
            return
        t0 = run.now()
        failure = CprFailure(batch=b - 1, device=failed, cycle=t0,
                             batches_since_checkpoint=(b - 1) % self.models[0].every)
        if failed == self.link.device:
            await self._reload(run, b - 1, failure)
        t = self.link.align(run.now())
        await run.wait(t - run.now())
        failure.pool_recovery_cycles = run.now() - t0
        run.record.cpr_failures.append(failure)
        if failed == self.link.device:
            run.log(f"  power failure of this device after batch {b - 1}: its tables reloaded "
                    f"from the checkpoint ({failure.batches_since_checkpoint} batches old) in "
                    f"{failure.reload_cycles} cycles, "
                    f"{'consistent' if failure.consistent else 'INCONSISTENT'}")
            if not failure.consistent:
                raise AssertionError(f"CPR's reload broke the tables: {failure}")

    async def _reload(self, run, d, failure):
        """This device's power fails after batch ``d``: power-up, the checkpoint's tables
        written back, the golden models' reloaded alike; what it took goes into
        ``failure``."""
        dev = run.device
        run.add_epoch_counters(await dev.counters(run.counter_regs))
        await dev.power_fail()
        await run.strategy.configure(run)
        t0 = run.now()
        await dev.load_tables(self.saved, backdoor=False)
        cycles = run.now() - t0
        for model in self.models:
            model.restore(range(len(self.saved)))
        run.history.restart_at(d)
        tables = await dev.read_tables()
        consistent = all(np.array_equal(x, g) for x, g in zip(tables, run.golden.tables))
        run.restart_epoch_counters(await dev.counters(run.counter_regs))
        lines = sum(len(t) for t in self.saved) * run.cfg.lines_per_row
        self.stats.lines_written += lines
        self.stats.reload_cycles += cycles
        failure.reload_cycles, failure.lines_written = cycles, lines
        failure.consistent = consistent

"""A device of a pool, as hooks of the training loop (:mod:`.hooks`): its tables of the
model, the exchange with the other devices once a batch, the pool's durable batch, and
the pool's exact recovery (docs/pool.md; the link itself is :class:`~.pool.PoolLink`)."""

import dataclasses

import numpy as np

from trainingcxl.spec.descriptors import ErrorCode
from trainingcxl.host.model.data import initial_tables
from trainingcxl.host.model.fixed import from_fixed
from .hooks import RunHooks
from .pool import PoolFailed
from .run_record import Failure

__all__ = ["PoolMember"]


class PoolMember(RunHooks):
    """The run of one device of a pool, over ``link`` (a :class:`~.pool.PoolLink`, or
    anything with its methods and ``device``, ``devices``, ``tables``, ``ranges``,
    ``model_rows``). ``durable``: the newest batch the host has seen durable on every
    device."""

    def __init__(self, link):
        self.link = link
        self.durable = 0

    def initial_tables(self, run):
        """This device's pieces of the model's tables; the models train those only."""
        link, cfg = self.link, run.cfg
        model = cfg.replace(tables=link.model_rows,
                            model=dataclasses.replace(cfg.model, tables=0))
        return (initial_tables(model, seed=run.seed, only=link.tables, ranges=link.ranges),
                link.tables)

    async def started(self, run):
        """No record the pool may roll back is reclaimed; every device of the pool begins
        batch 1 at the same cycle."""
        if run.cfg.pool.member:
            await run.device.set_pool_durable(0)
        await run.wait(self.link.align(run.now()) - run.now())

    async def after_lookup(self, run, b, batch, looked):
        """Once a batch: this device's pooled vectors (the golden model's, the
        reference's and the device's) for every table's, and when the GPU can begin (this
        device's lookup done, or :meth:`~.training.TrainingRun.gpu_begins`) for when it
        begins, the last device's. Returns the models' own inputs and every table's, as
        the MLPs take them. Fixed-point vectors cross in fixed point: the pieces of a split
        table add up there (:func:`~trainingcxl.host.model.shard.model_inputs`)."""
        g_in, r_in = run.golden.inputs(batch), run.reference.inputs(batch)
        t = run.now() if run.gpu_from is None else run.gpu_from
        shape = (batch.batch_size, run.cfg.n_tables, run.cfg.dim)
        try:
            (g_fixed, r_all, d_fixed), (run.gpu_from, run.gpu_owed), pool_durable = \
                self.link.exchange([g_in[0].reshape(shape), r_in[1],
                                    np.asarray(looked.pooled).reshape(shape)],
                                   t, run.gpu_owed, run.durable, b)
        except PoolFailed:
            # Another device failed before this batch's GPU step: the failure reaches this
            # device at its cycle (a planned halt), which ends this task.
            await run.wait(1 << 40)
            raise
        run.failures.on_pool_step(run.batch, run.gpu_from)
        if pool_durable > self.durable and run.cfg.pool.member:
            await run.device.set_pool_durable(pool_durable)
        self.durable = pool_durable
        bits = run.cfg.fixed.frac_bits
        g_all, d_all = (from_fixed(x, bits).astype(np.float32) for x in (g_fixed, d_fixed))
        return (g_in, r_in), (g_all, r_all), d_all

    def durable_floor(self, run):
        return self.durable

    def resumed(self, run, d, m):
        self.durable = d

    def finished(self, run, record):
        self.link.close()

    async def power_failure(self, run):
        """This device's power failed, or another's and this one stops (``halt``); every
        device rolls back to the pool's durable batch D with the MLP of snapshot m
        (:func:`~.pool.recovery_point`), the invariants are checked against this device's
        golden model, and training resumes at D + 1, on every device at the same cycle."""
        halted = run.failures.halted
        failure = Failure(cycle=run.failures.target, phase=run.phase, batch=run.batch,
                          durable_before=run.durable, power_failed=not halted,
                          snapshot_in_flight=run.checkpoints.pull_in_flight)
        await run.cut_power()           # (halted: the host's tasks end, the device runs on)
        # (halted: the counters live on; read them up to here)
        run.add_epoch_counters(await run.device.counters(run.counter_regs) if halted else None)
        durable = run.durable
        run.checkpoints.power_lost()
        nested = []
        while True:
            run.enter("recovery", run.batch)
            finished, result = await run.failures.race(run, self._recover(run, durable))
            if finished:
                break
            # The power failed again during the recovery, here or on another device.
            nested.append((run.failures.target, not run.failures.halted))
            await run.cut_power()
        point, rec, params = result
        d, m = point["d"], point["m"]
        params, invariants = await run.recovered_state(d, m, params)
        failure = failure.replace(
            recovered_batch=d, recovered_mlp_batch=m, recovery_cycles=rec.cycles,
            recovery_lines=rec.lines_read, rolled_back=rec.rolled_back,
            pool_recovery_cycles=run.now() - failure.cycle,
            pool_durable_before=point["durable_before"], snapshot_from=point["holder"],
            failures_during_recovery=sum(failed for _, failed in nested),
            recovery_failure_cycles=[cycle for cycle, failed in nested if failed],
            halts_during_recovery=sum(not failed for _, failed in nested),
            invariants={**invariants, "no_durable_batch_lost": d >= point["durable_before"]})
        what = "power failure" if failure.power_failed else "halt (another device failed)"
        return await run.resume_at(failure, params, f"{what} at cycle {failure.cycle} in "
                                                    f"{failure.phase} of batch {failure.batch}: "
                                                    f"the pool recovered D={d} m={m}, this device "
                                                    f"in {rec.cycles} cycles")

    async def _recover(self, run, durable):
        """The pool's recovery as this device takes part in it (idempotent: a failure in
        the middle starts it again). Returns the recovery point, this device's
        ``RECOVER`` and the snapshot's MLP parameters."""
        dev, link = run.device, self.link
        await run.strategy.configure(run)
        await dev.quiesce()             # a device whose power stayed on finishes its work
        point = link.probe(await dev.checkpoint_records(), durable, run.now())
        await run.wait(point["t"] - run.now())
        await dev.set_pool_durable(point["d"])
        rec = await dev.recover(target=point["d"])
        if rec.error != ErrorCode.NONE or rec.d != point["d"]:
            raise RuntimeError(f"RECOVER to the pool's batch {point['d']} gave "
                               f"{rec.error.name}, D = {rec.d}")
        own = await dev.read_snapshot(point["m"]) if point["holder"] == link.device else None
        params, t = link.recovered(own, run.now())
        await run.wait(t - run.now())
        if rec.m is None or rec.m + run.k < point["d"]:
            # No snapshot of its own within K of D: the device would hold every lookup
            # for one. Its snapshot of D is the MLP the pool resumes with (the state
            # after D from now on).
            await dev.stage_mlp(params)
            if await dev.snapshot(point["d"]) != ErrorCode.NONE:
                raise RuntimeError(f"SNAPSHOT_MLP({point['d']}) after the pool's recovery refused")
            await dev.wait_snapshot(point["d"])
        t = link.resumed(run.now())
        await run.wait(t - run.now())
        return point, rec, params

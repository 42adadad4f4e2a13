"""The host of a failure-tolerant DLRM training run: one protocol for every system and target.

See docs/design.md, "Checkpoint protocol" and "Host model".

:class:`TrainingRun` drives a :class:`~trainingcxl.host.driver.device.Device`
batch by batch (``LOOKUP``, GPU step, ``UPDATE``, ``COMMIT``, ``SNAPSHOT_MLP``)
beside a golden model. After each power failure the host loses what is
volatile (the GPU's MLP parameters and memory, its own progress), runs
``RECOVER``, checks the invariants (docs/design.md, "Invariants") against the
golden model's history, reloads the MLP from the snapshot the device chose,
and resumes at batch ``D + 1``.

Batch ``b`` (device batch id) trains on data batch ``b - 1``; batch 0 is the
initial state, committed and snapshotted before training starts.

Three things vary, each an object the loop is given:

* the *system* of the configuration ladder, a strategy (:mod:`.strategies`):
  who pools and updates, how data moves, how rows are logged, how batches are
  checkpointed (:mod:`.checkpoints`, which also keeps what the host knows of the
  snapshots) and in which order lookups run (:mod:`.order`);
* the *runtime*: the host's clock and concurrency. In simulation
  (:class:`~.timed.SimRuntime`) the GPU's and the copies' modelled time passes
  on the simulator's clock and the next batch's lookup can overlap this one;
  on a board (:class:`~.board.UntimedRuntime`) nothing is modelled;
* the *failures*: planned cycles in simulation (:class:`~.timed.FailurePlan`),
  ``POWER_FAIL`` commands and the button on a board
  (:class:`~.board.BoardFailures`). A failure source has ``pending`` and
  ``armed()`` (failures still to come), ``target`` and ``cause`` (of the one
  that struck), the hooks ``start``, ``on_phase``, ``before_batch`` and
  ``after_submit``, ``race(run, coro)`` (run ``coro`` until it ends or the
  power fails), ``cut(run)`` (what a failure takes away) and ``cancel()``.

With ``measure_from`` the run also reports a measured window: counters and
modelled host time from where that batch begins to where the last batch begins
(``record.window``), so that both ends fall at the same point of a batch's
overlap with its neighbours and the window holds whole periods of the steady
state; the last batch, whose update no next batch overlaps, only closes it (a
run that stops early closes it where it stops). With a
``test_set`` it evaluates the model on held-out samples every ``eval_every``
batches and after the last (``record.eval``): the device-trained model (the
tables read back from the device, the GPU's MLPs) and the float32 reference
(:mod:`trainingcxl.host.model.evaluate`).

What the run returns is a :class:`~.run_record.TrainRecord`. A run that is more than one
device's protocol (a device of a pool, :mod:`.pool_member`; CPR's partial checkpoints,
:mod:`.cpr`) is given hooks (:mod:`.hooks`), called at named points of a batch.
"""

import sys
import time

import numpy as np

from trainingcxl.spec.descriptors import ErrorCode
from trainingcxl.spec.registers import COUNTERS
from trainingcxl.host.model.data import initial_tables
from trainingcxl.host.model.dlrm import DenseModel, FixedPointTrainer, FloatTrainer, Gpu
from trainingcxl.host.model.evaluate import evaluate
from trainingcxl.host.model.gpu import step_cost
from trainingcxl.host.model.history import GoldenHistory
from .phases import PHASES
from .run_record import Check, Evaluation, Failure, Resumed, RunError, TestSetInfo, TrainRecord, Window
from .resume import recovered_state_matches, resume_models
from .strategies import strategy

__all__ = ["PHASES", "TrainingRun", "progress"]


def progress(text):
    print(text, file=sys.stderr, flush=True)


#: Rows from which making and loading the tables takes seconds: the run says so first.
LARGE_TABLES = 100_000


class TrainingRun:
    """One training run: the protocol, the golden model beside it, and the failures.

    Parameters
    ----------
    device : Device
        The device, on any transport.
    data :
        The workload (``batch(i)``, ``batch_size``).
    system : System
        The rung of the ladder (:mod:`.systems`).
    runtime, failures :
        The host's clock and the failure source (see the module docstring).
    counters : tuple of Register
        The counters read around the run and at every power-up.
    hooks : sequence of RunHooks
        What a kind of run adds at named points of a batch (:mod:`.hooks`): a device
        of a pool, CPR's checkpoints.

    ``record`` (a :class:`~.run_record.TrainRecord`) collects what the job writes:
    per-batch losses and cycles of the attempts that survived, the table checks, and
    one entry per power failure (see :meth:`_power_failure`).
    """

    def __init__(self, device, data, *, system, runtime, failures, batches, seed, staleness,
                 relaxed=False, check_every=10, until_plan_done=False, extend=False,
                 log=progress, checkpointing=True, measure_from=None, counters=COUNTERS,
                 test_set=None, eval_every=0, resume=False, replay=(), on_recovered=None,
                 hooks=()):
        self.device, self.cfg, self.data = device, device.config, data
        self.hooks = tuple(hooks)
        self.n, self.seed, self.k = batches, seed, staleness
        self.system = system
        self.strategy = strategy(system, device=device, runtime=runtime,
                                 checkpointing=checkpointing, staleness=staleness)
        self.checkpoints = self.strategy.checkpoints
        self.order = self.strategy.order(relaxed, runtime)
        self.runtime, self.failures = runtime, failures
        self.checkpointing = checkpointing
        self.relaxed = self.order.relaxed
        self.check_every = check_every
        self.test_set, self.eval_every = test_set, eval_every
        self.evals = {}                 # batch -> held-out metrics (the last attempt's)
        self.counter_regs = counters
        self._batches = {}              # b -> data batch b (the newest few, :meth:`batch_data`)
        # Set (by a SIGINT handler) to end the run after the batch in progress, committed
        # and checked: the record is then marked ``interrupted``.
        self.stop_requested = False
        # A run resumed from media an earlier process left (``resume``): the recoveries
        # that run made, ``(D, m)`` in order, for the golden model's replay; and what is
        # told of every recovery (``on_recovered(d, m)``: a media file's journal).
        self.resume, self.replay = resume, list(replay)
        self.on_recovered = on_recovered or (lambda d, m: None)
        # Batches from ``measure_from`` on form the measured window (counters at both ends).
        self.measure_from = measure_from
        self.window = self._window_start = None
        self.until_plan_done = until_plan_done     # stop once every planned failure is behind
        # Train past ``batches`` (up to 4x) until every planned failure has happened.
        self.limit = 4 * batches if extend else batches
        self.log = log
        self.gpu_cycles = step_cost(self.cfg, data.batch_size).cycles
        # The next GPU step: kernels to run before its MLPs, and when it began if it did
        # before the host let it (:meth:`gpu_begins`, :meth:`gpu_step`).
        self.gpu_owed, self.gpu_from = 0, None
        self.phase, self.batch = "format", 0
        self.phase_start = {}
        self._accounted = 0
        self.phase_len = {}
        self.batch_cycles = None
        self.record = TrainRecord(batches=batches, relaxed=self.relaxed, staleness=staleness,
                                  system=system.name, checkpointing=checkpointing,
                                  gpu_cycles_per_batch=self.gpu_cycles)
        # What the host model did beside the device (modelled time, not simulated).
        self.host_stats = {"gpu_busy_cycles": 0, "copy_cycles": 0, "copy_bytes_device_link": 0,
                           "gpu_copy_bytes": 0}
        self.counters = {}
        self._epoch_counters = {}
        for hook in self.hooks:
            hook.attach(self)

    # -- bookkeeping ---------------------------------------------------------------------

    @property
    def durable(self):
        """The newest batch the host has seen durable."""
        return self.checkpoints.durable

    def now(self):
        return self.runtime.now()

    def enter(self, phase, batch):
        t = self.now()
        self._account()
        if self.phase in self.phase_start:
            self.phase_len[self.phase] = t - self.phase_start[self.phase]
        self.phase, self.batch = phase, batch
        self.phase_start[phase] = t
        self.failures.on_phase(phase, batch, phase_len=self.phase_len,
                               batch_cycles=self.batch_cycles, batches_left=self.n - batch + 1)

    def hook(self, phase, batch):
        """What runs just after a descriptor of ``phase`` of ``batch`` is submitted (a board's
        planned ``POWER_FAIL``)."""
        return lambda: self.failures.after_submit(self, phase, batch)

    def _account(self):
        """Add the time since the last call to the phase the host is in: where the host's
        time goes (its critical path), phase by phase."""
        t = self.now()
        key = f"phase_{self.phase}"
        self.host_stats[key] = self.host_stats.get(key, 0) + t - self._accounted
        self._accounted = t

    def batch_data(self, b):
        """Batch ``b``'s data; the last few are kept, as a batch is asked for by the loop,
        by the lookup before it and by the next (generating one costs a tenth of a
        second at 2048 samples)."""
        cache = self._batches
        if b not in cache:
            if len(cache) >= 4:
                del cache[next(iter(cache))]
            cache[b] = self.data.batch(b - 1)
        return cache[b]

    def _remember(self, b):
        """Keep the golden state after batch ``b`` for the checks after a failure: its MLPs
        (the tables' undo record was taken when the golden models stepped). A recovery
        reaches back no further than ``durable - K``."""
        self.history.remember(b)
        if not self.checkpointing:          # nothing rolls back
            durable = b
        else:
            durable = min([self.durable, *(f for f in (h.durable_floor(self) for h in self.hooks)
                                          if f is not None)])
        self.history.prune(durable - self.k - 2)

    def _failures_ahead(self):
        return self.failures.pending or self.failures.armed()

    async def _read_counters(self):
        """While failures may come, keep the device's counters of this power-up: a
        failure erases them, and the run's totals add up what each power-up counted."""
        if self._failures_ahead():
            self._epoch_counters = await self.device.counters(self.counter_regs)

    def add_epoch_counters(self, values=None):
        """Add what the device counted since this power-up (or the run's start) to the
        run's totals: the power is about to go, and the counters with it. ``values``: the
        counters just read (else those read after the last batch)."""
        if values is not None:
            self._epoch_counters = values
        for k, v in self._epoch_counters.items():
            self.counters[k] += v - self._start_counters.get(k, 0)

    def restart_epoch_counters(self, values):
        """A new power-up: the device's counters are ``values`` now."""
        self._epoch_counters = values
        self._start_counters = dict(values)

    def _host_totals(self):
        host = dict(self.host_stats)
        for k, v in self.strategy.stats().items():
            host[k] = host.get(k, 0) + v
        return host

    # -- modelled host time --------------------------------------------------------------

    async def wait(self, cycles):
        """Let ``cycles`` of modelled host-side time pass (the device runs on)."""
        await self.runtime.wait(cycles)

    def gpu_begins(self, kernels=0):
        """The GPU has what its next step needs and begins it now, with ``kernels`` cycles
        of work before the MLPs (the pooling of rows it holds), while the host still
        drives the device."""
        self.gpu_owed += kernels
        self.gpu_from = self.now()

    def gpu_left(self):
        """Cycles of the GPU step begun at :meth:`gpu_begins` still to run (negative once
        it is over)."""
        return self.gpu_cycles + self.gpu_owed - (self.now() - self.gpu_from)

    async def gpu_step(self):
        """Let a batch's GPU step pass: its MLPs and the kernels before them, less what
        has passed since it began (:meth:`gpu_begins`)."""
        cycles = self.gpu_cycles + self.gpu_owed
        if self.gpu_from is not None:
            cycles -= self.now() - self.gpu_from
        self.gpu_owed, self.gpu_from = 0, None
        await self.wait(cycles)

    async def copy(self, nbytes, hops=1):
        """An explicit DMA copy of ``nbytes`` (``near-data``): ``hops`` copies through host
        memory, the first over the device's link; the host waits for each."""
        for hop in range(hops):
            cycles = self.cfg.copy.cycles(nbytes)
            self.host_stats["copy_cycles"] += cycles
            if hop == 0:
                self.host_stats["copy_bytes_device_link"] += nbytes
            else:
                self.host_stats["gpu_copy_bytes"] += nbytes
            await self.wait(cycles)

    # -- the run -------------------------------------------------------------------------

    def _models(self):
        """The golden model and the float32 reference at batch 0, and their history."""
        t0 = time.monotonic()
        tables, own = self._first(h.initial_tables(self) for h in self.hooks) or \
            (initial_tables(self.cfg, seed=self.seed), None)
        self.own = own
        self.golden = FixedPointTrainer(self.cfg, tables, seed=self.seed, own=own)
        self.reference = FloatTrainer(self.cfg, tables, seed=self.seed, own=own)
        self.history = GoldenHistory(self.golden, self.reference)     # remembers batch 0
        return tables, t0

    async def _count_from_here(self):
        self._epoch_counters = await self.device.counters(self.counter_regs)
        self.counters = {k: 0 for k in self._epoch_counters}
        self._start_counters = dict(self._epoch_counters)
        self.t0 = self.now()

    async def start(self):
        """Power-up, empty media: format the checkpoint state and remember batch 0."""
        dev, cfg = self.device, self.cfg
        await self.failures.start(self)
        await self.strategy.configure(self)
        await self.checkpoints.format(self)
        if sum(cfg.tables) >= LARGE_TABLES:
            self.log(f"[data] making {sum(cfg.tables):,} rows and loading them into the media "
                     f"and the golden models ...")
        tables, t0 = self._models()
        await dev.load_tables(tables)
        self.gpu = Gpu(cfg, DenseModel(cfg, self.seed), own=self.own)
        if time.monotonic() - t0 > 2:           # large tables: say where the time went
            self.log(f"[data] {sum(cfg.tables):,} rows made, loaded into the media and into "
                     f"the golden models in {time.monotonic() - t0:.1f} s")
        await self.checkpoints.zero(self, self.gpu.model.parameters())
        for hook in self.hooks:
            await hook.started(self)
        await self._count_from_here()

    async def resume_media(self):
        """Power-up on media an earlier process left: ``RECOVER``, the golden model
        replayed from the seed to the durable batch D along the earlier recoveries,
        the invariants checked; returns the batch to train next (1 on media that
        holds no checkpoint yet, which is formatted as new)."""
        await self.failures.start(self)
        await self.strategy.configure(self)
        self.enter("recovery", 0)
        error, d, m, rolled, cycles, lines = await self.checkpoints.recover(self)
        if error == ErrorCode.NO_CHECKPOINT:
            self.log("  the media holds no checkpoint yet: starting anew")
            await self.start()
            return 1
        if error != ErrorCode.NONE:
            raise RuntimeError(f"RECOVER of the media failed with {error.name}")
        self._models()
        self._replay_to(d)
        await self._count_from_here()
        params, invariants = await self.recovered_state(d, m)
        self.record.resumed = Resumed(
            recovered_batch=d, recovered_mlp_batch=m, recovery_cycles=cycles,
            recovery_lines=lines, rolled_back=rolled, earlier_recoveries=len(self.replay),
            invariants=invariants, consistent=all(invariants.values()))
        self.log(f"  resumed: RECOVER found D={d} m={m} in {cycles} cycles, {rolled} records "
                 f"rolled back, the golden model replayed to batch {d}: "
                 f"{'consistent' if all(invariants.values()) else 'INCONSISTENT'}")
        for hook in self.hooks:
            hook.resume_checked(self, self.record.resumed)
        if not all(invariants.values()):
            raise AssertionError(f"the resumed media broke an invariant: {invariants}")
        self.golden, self.reference, self.gpu = resume_models(
            self.cfg, self.seed, self.history, d, m, params)
        self.on_recovered(d, m)
        return d + 1

    async def recovered_state(self, d, m, params=None):
        """After ``RECOVER`` found ``d`` and ``m``: what the host now knows durable, the
        snapshot's MLP parameters (read from the device unless given: a pool's), and the
        invariants against the golden model's history (docs/design.md, "Invariants")."""
        await self.checkpoints.recovered(self, d)
        if params is None:
            params = await self.device.read_snapshot(m)
        tables_ok, mlp_ok = recovered_state_matches(self.history, d, m,
                                                    await self.device.read_tables(), params)
        return params, {"tables_equal_golden_at_D": tables_ok, "mlp_equal_golden_at_m": mlp_ok,
                        "m_within_staleness": d - self.k <= m <= d}

    def _replay_to(self, d):
        """Train the golden model and the reference from batch 0 to ``d`` as the earlier
        run did: at each of its recoveries ``(D, m)`` (:attr:`replay`), back to D with
        the MLPs of m."""
        history = self.history
        for target, m in [*self.replay, (d, None)]:
            while history.head < target:
                b = history.head + 1
                history.step(b, self.batch_data(b))
                history.remember(b)
                history.prune(b - self.k - 2)
            if m is not None:
                history.resume(target, m)

    async def run(self):
        if self.resume:
            next_batch = await self.resume_media()
        else:
            await self.start()
            next_batch = 1
        while next_batch <= self.limit:
            finished, _ = await self.failures.race(self, self.train_from(next_batch))
            if finished:
                break
            next_batch = await self._power_failure()
        rec = self.record
        # Failures still planned, or armed for a cycle past the end, did not happen.
        rec.failures_planned_left = self.failures.pending + int(self.failures.armed())
        self.failures.cancel()
        dev = self.device
        if dev.submitted:
            await dev.wait_completed(dev.submitted)     # commits not waited for
        resumed_at = 0 if rec.resumed is None else rec.resumed.recovered_batch
        await self.checkpoints.check_committed(self, max(rec.loss, default=resumed_at))
        end = await dev.counters(self.counter_regs)
        for k, v in end.items():
            self.counters[k] += v - self._start_counters.get(k, 0)
        rec.cycles = self.now() - self.t0
        if self.test_set is not None:
            rec.test_set = TestSetInfo(name=self.test_set.name, samples=self.test_set.samples,
                                       positives=self.test_set.positives)
            rec.eval = [self.evals[b] for b in sorted(self.evals)]
        rec.host = self._host_totals()
        for hook in self.hooks:
            hook.finished(self, rec)
        rec.window = self.window
        rec.consistent = (rec.pooled_mismatches == 0 and all(c.tables_match for c in rec.checks)
                          and all(f.consistent for f in rec.failures))
        return rec

    async def _mark_window(self, edge, last=None):
        """Counters and modelled host figures at an edge of the measured window (``last``:
        the window's last batch, at its end)."""
        self._account()
        counters = await self.device.counters(self.counter_regs)
        mark = {"cycle": self.now(), "counters": counters, "host": self._host_totals()}
        if edge == "start":
            self._window_start = mark
            return
        a = self._window_start
        self.window = Window(
            first_batch=self.measure_from, last_batch=last,
            batches=last - self.measure_from + 1,
            cycles=mark["cycle"] - a["cycle"],
            counters={k: v - a["counters"].get(k, 0) for k, v in counters.items()},
            host={k: v - a["host"].get(k, 0) for k, v in mark["host"].items()})

    def _window_open(self):
        return self.measure_from is not None and self.window is None and \
            self._window_start is not None

    async def train_from(self, b):
        rec, sysm = self.record, self.strategy
        early = None
        while b <= self.limit:
            for hook in self.hooks:
                await hook.before_batch(self, b)
            if b == self.measure_from:
                await self._mark_window("start")
            elif self._window_open() and b == self.n:
                await self._mark_window("end", last=b - 1)
            c0 = self.now()
            batch = self.batch_data(b)
            self.enter("lookup", b)
            await self.failures.before_batch(self, b)
            looked = early if early is not None else await sysm.lookup(self, b, batch)
            gathered = self._first([await hook.after_lookup(self, b, batch, looked)
                                    for hook in self.hooks])
            want, ref = (self.history.step(b, batch) if gathered is None
                         else self.history.step(b, batch, *gathered[:2]))
            loss_ref = ref.loss
            same = looked.error == ErrorCode.NONE and np.array_equal(looked.pooled, want.pooled)
            rec.pooled_mismatches += int(not same)
            self.enter("gpu", b)
            loss, deltas = self.gpu.step(batch, looked.pooled,
                                         None if gathered is None else gathered[2])
            self.host_stats["gpu_busy_cycles"] += self.gpu_cycles
            nxt = self.batch_data(b + 1) if b < self.limit else None
            early = await self.order.during_gpu(self, b, nxt)
            error = await sysm.update(self, b, batch, deltas, looked)
            early = await self.order.after_update(self, b, early, nxt)
            error = await sysm.update_error(self, b, error)
            self.enter("commit", b)
            self._remember(b)               # the golden state a recovery to b must find
            rec.loss[b], rec.loss_ref[b] = loss, loss_ref
            rec.cycles_per_batch[b] = self.now() - c0
            committed = await self.checkpoints.checkpoint(self, b)
            for hook in self.hooks:
                await hook.after_commit(self, b, batch)
            if ErrorCode.NONE not in (looked.error, error, committed) or \
                    len({looked.error, error, committed}) > 1:
                rec.errors.append(RunError(batch=b, lookup=looked.error.name,
                                           update=error.name, commit=committed.name))
            rec.cycles_per_batch[b] = self.now() - c0
            self.batch_cycles = self.batch_cycles or self.now() - c0
            note = ""
            plan_done = not self._failures_ahead()
            stopping = (b >= self.limit or (plan_done and (self.until_plan_done or b >= self.n))
                        or self.stop_requested)
            if stopping and self._window_open():
                await self._mark_window("end", last=b)
            check = b == 1 or b == self.n or b % self.check_every == 0 or stopping
            held_out = self.test_set is not None and (
                stopping or (self.eval_every and b % self.eval_every == 0))
            if check or held_out:
                self.enter("check", b)
                tables = await self.device.read_tables()
            if check:
                ok = all(np.array_equal(d, g) for d, g in zip(tables, self.golden.tables))
                rec.checks.append(Check(batch=b - 1, tables_match=ok))
                note = f", tables {'match' if ok else 'DIFFER'}"
            if held_out:
                note += self._evaluate(b, tables)
            await self._read_counters()
            cycles = f"{rec.cycles_per_batch[b]} cycles, " if self.runtime.clocked else ""
            self.log(f"  batch {b}/{self.n}: loss {loss:.4f} (float32 {loss_ref:.4f}), "
                     f"{cycles}pooled {'ok' if same else 'DIFFER'}{note}")
            if stopping:
                rec.stopped_after = b
                if self.stop_requested and b < self.n:
                    rec.interrupted = True
                return
            b += 1

    def _evaluate(self, b, tables):
        """Held-out metrics after batch ``b``: the device's tables with the GPU's MLPs, and
        the float32 reference; returns a note for the progress line."""
        cfg, test = self.cfg, self.test_set
        device = evaluate(cfg, tables, self.gpu.model, test)
        reference = evaluate(cfg, self.reference.tables, self.reference.dense, test)
        self.evals[b] = Evaluation(batch=b, device=device.to_dict(), reference=reference.to_dict())
        if device.auc is None:
            return f", test log loss {device.log_loss:.4f} ({device.note})"
        return f", test AUC {device.auc:.4f} (float32 {reference.auc:.4f})"

    # -- power failure and recovery ------------------------------------------------------

    async def cut_power(self):
        """The power goes: what the failure source takes away, and the GPU's state."""
        await self.failures.cut(self)
        self.gpu, self.gpu_owed, self.gpu_from = None, 0, None     # the GPU's state is gone

    async def _power_failure(self):
        """Cut the power, recover, check the invariants; returns the batch to resume at.
        A hook may recover in its own way (a pool's devices together)."""
        for hook in self.hooks:
            resume_at = await hook.power_failure(self)
            if resume_at is not None:
                return resume_at
        failure = Failure(cycle=self.failures.target, phase=self.phase, batch=self.batch,
                          durable_before=self.durable,
                          snapshot_in_flight=self.checkpoints.pull_in_flight,
                          cause=self.failures.cause)
        self.add_epoch_counters()
        await self.cut_power()
        self.checkpoints.power_lost()
        nested = []
        while True:
            await self.strategy.configure(self)
            self.enter("recovery", self.batch)
            finished, result = await self.failures.race(self, self.checkpoints.recover(self))
            if finished:
                error, d, m, rolled, cycles, lines = result
                break
            nested.append(self.failures.target)      # the power failed again, during recovery
            await self.cut_power()
        if error != ErrorCode.NONE:
            raise RuntimeError(f"RECOVER failed with {error.name} after {failure.to_dict()}")
        params, invariants = await self.recovered_state(d, m)
        failure = failure.replace(
            recovered_batch=d, recovered_mlp_batch=m, recovery_cycles=cycles,
            recovery_lines=lines, rolled_back=rolled, failures_during_recovery=len(nested),
            recovery_failure_cycles=nested,
            invariants={**invariants, "no_durable_batch_lost": d >= failure.durable_before})
        where = (f"at cycle {failure.cycle} in {failure.phase}" if failure.cause is None
                 else f"({failure.cause}) in {failure.phase}")
        return await self.resume_at(failure, params, f"power failure {where} of batch "
                                                     f"{failure.batch}: recovered D={d} m={m} "
                                                     f"in {cycles} cycles")

    async def resume_at(self, failure, params, what):
        """After a recovery to ``failure``'s D and m: record it (``what`` the log line's
        start), stop on a broken invariant, resume the models from D with the MLP of m
        (``params``: the golden model does the same); returns the batch to train next."""
        d, m = failure.recovered_batch, failure.recovered_mlp_batch
        failure.consistent = all(failure.invariants.values())
        self.record.failures.append(failure)
        self.log(f"  {what}, {failure.rolled_back} records rolled back, "
                 f"{'consistent' if failure.consistent else 'INCONSISTENT'}")
        if not failure.consistent:
            raise AssertionError(f"recovery broke an invariant: {failure.to_dict()}")
        self.golden, self.reference, self.gpu = resume_models(
            self.cfg, self.seed, self.history, d, m, params)
        for hook in self.hooks:
            hook.resumed(self, d, m)
        self.on_recovered(d, m)
        self.restart_epoch_counters(await self.device.counters(self.counter_regs))
        return d + 1

    @staticmethod
    def _first(values):
        """The first of ``values`` (hooks' answers) that is not ``None``."""
        return next((v for v in values if v is not None), None)

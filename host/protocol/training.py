"""The host of a failure-tolerant DLRM training run on the simulated device.

See docs/design.md, "Checkpoint protocol" and "Host model".

:class:`TrainingRun` drives the device batch by batch (``LOOKUP``, GPU step,
``UPDATE``, ``COMMIT``, ``SNAPSHOT_MLP``) beside a golden model, and
:class:`FailurePlan` cuts the power at chosen moments. After each power
failure the host loses what is volatile (the GPU's MLP parameters and
memory, its own progress), resets the device, runs ``RECOVER``, checks
the invariants (docs/design.md, "Invariants") against the golden model's history, reloads
the MLP from the snapshot the device chose, and resumes at batch ``D + 1``.

Batch ``b`` (device batch id) trains on data batch ``b - 1``; batch 0 is the
initial state, committed and snapshotted before training starts.

``system`` picks the rung of the configuration ladder
(:mod:`trainingcxl.host.protocol.systems`): who pools and updates (the engines, or the
host and GPU over CXL.mem with :mod:`.software_path`), how data moves
(CXL.cache or modelled DMA copies) and how rows are logged. With
``measure_from`` the run also reports a measured window: counters and
modelled host time from that batch to the last (``record["window"]``).
"""

import copy
import random
import sys

import cocotb
import numpy as np
from cocotb.triggers import Event, First, Timer
from cocotb.utils import get_sim_time

from trainingcxl.spec.descriptors import ErrorCode
from trainingcxl.host.model.data import initial_tables
from trainingcxl.host.model.dlrm import DenseModel, FixedPointTrainer, FloatTrainer, Gpu
from trainingcxl.host.protocol.phases import PHASES
from trainingcxl.host.model.golden import coalesce_update
from trainingcxl.host.protocol.resume import recovered_state_matches, resume_models
from trainingcxl.host.model.gpu import step_cost
from trainingcxl.host.protocol.systems import SYSTEMS
from trainingcxl.host.driver.device import LookupResult
from trainingcxl.sim.bench_env import PERIOD_NS
from trainingcxl.host.protocol.software_path import SoftwareEmbeddings

__all__ = ["PHASES", "FailurePlan", "TrainingRun"]

#: A snapshot pull the GPU waits for must end within this many cycles (a hang otherwise).
SNAPSHOT_WAIT_CYCLES = 5_000_000


def progress(text):
    print(text, file=sys.stderr, flush=True)


def now():
    """Simulation time in device cycles since the start."""
    return int(get_sim_time("ns")) // PERIOD_NS


class PowerFailure(Exception):
    pass


class FailurePlan:
    """Power failures to inject, one after the other.

    Entries (dicts), each armed once the one before has fired:

    * ``{"at": C}``: at simulation cycle ``C`` (or at once, if that is past);
    * ``{"batch": b, "offset": k}``: ``k`` cycles after the host starts batch ``b``
      (the next time it does, so a batch re-run after a recovery can be hit again);
    * ``{"next_batch": True, "offset": k}``: ``k`` cycles after the host starts
      its next batch, whichever it is (sweeps over the cycles of a batch);
    * ``{"phase": P, "offset": k, "batch": b}``: ``k`` cycles after the host
      enters phase ``P`` (of batch ``b``, if given); ``offset`` left out draws
      it from the phase's last length;
    * ``{"random": True}``: a cycle drawn so that the remaining random
      failures spread over the rest of the run.
    """

    def __init__(self, entries, seed=0):
        self.entries = list(entries)
        self.rng = random.Random(seed)
        self.fired = Event()
        self.target = None
        self._timer = None

    @property
    def pending(self):
        return len(self.entries)

    def _schedule(self, cycle):
        self.target = max(cycle, now() + 1)
        self.entries.pop(0)

        async def wait():
            await Timer((self.target - now()) * PERIOD_NS, "ns")
            self.fired.set()
        self._timer = cocotb.start_soon(wait())

    def armed(self):
        return self._timer is not None

    def on_phase(self, phase, batch, *, phase_len, batch_cycles, batches_left):
        """The host entered ``phase`` of ``batch``: arm the next entry if it waits for this."""
        if not self.entries or self.armed():
            return
        e = self.entries[0]
        if "at" in e:
            self._schedule(e["at"])
        elif "random" in e:
            if batch_cycles is None:
                return                          # the first batch's length sets the pace
            random_left = sum(1 for x in self.entries if "random" in x)
            span = max(2, 2 * batch_cycles * max(1, batches_left) // (random_left + 1))
            self._schedule(now() + self.rng.randint(1, span))
        elif "next_batch" in e:
            if phase == "lookup":
                self._schedule(now() + e["offset"])
        elif "batch" in e and "phase" not in e:
            if phase == "lookup" and batch == e["batch"]:
                self._schedule(now() + e["offset"])
        elif e.get("phase") == phase and e.get("batch", batch) == batch:
            offset = e.get("offset")
            if offset is None:
                offset = self.rng.randint(0, max(1, phase_len.get(phase, 100)))
            self._schedule(now() + offset)

    def acknowledge(self):
        """The failure that fired has been dealt with: the next entry may arm."""
        if self.fired.is_set():
            self._timer = None
            self.fired.clear()

    def cancel(self):
        """The run is over: a failure still waiting will not come."""
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None


class TrainingRun:
    """One training run: the protocol, the golden model beside it, and the failures.

    ``record`` collects what the job writes: per-batch losses and cycles of
    the attempts that survived, the table checks, and one entry per power
    failure (see :meth:`_recover`).
    """

    def __init__(self, tb, data, *, batches, seed, staleness, relaxed, check_every,
                 plan=None, until_plan_done=False, extend=False, log=progress,
                 system="cxl-b", checkpointing=True, measure_from=None):
        self.tb, self.cfg, self.data = tb, tb.config, data
        self.n, self.seed, self.k = batches, seed, staleness
        self.system = SYSTEMS[system]
        self.checkpointing = checkpointing
        # Relaxed lookup order needs the engines; the host of ``pmem`` has nothing to overlap.
        self.relaxed = relaxed and self.system.engines
        self.check_every = check_every
        self.soft = (SoftwareEmbeddings(tb, checkpointing=checkpointing, wait=self.wait)
                     if not self.system.engines else None)
        # Batches from ``measure_from`` on form the measured window (counters at both ends).
        self.measure_from = measure_from
        self.window = None
        self._queued_snapshot = 0       # sequence number of a SNAPSHOT_MLP not waited for
        self.plan = plan or FailurePlan([])
        self.until_plan_done = until_plan_done     # stop once every planned failure is behind
        # Train past ``batches`` (up to 4x) until every planned failure has happened.
        self.limit = 4 * batches if extend else batches
        self.log = log
        self.gpu_cycles = step_cost(self.cfg, data.batch_size).cycles
        self.phase, self.batch = "format", 0
        self.phase_start = {}
        self._accounted = 0
        self.phase_len = {}
        self.batch_cycles = None
        self.tasks = set()
        self.pulling = None             # batch whose snapshot pull is in flight
        self.durable = 0                # newest batch the host has seen durable
        self.record = {"batches": batches, "loss": {}, "loss_ref": {}, "cycles_per_batch": {},
                       "checks": [], "errors": [], "pooled_mismatches": 0, "failures": [],
                       "relaxed": self.relaxed, "fallbacks": 0, "staleness": staleness,
                       "system": system, "checkpointing": checkpointing,
                       "gpu_cycles_per_batch": self.gpu_cycles}
        # What the host model did beside the device (modelled time, not simulated).
        self.host_stats = {"gpu_busy_cycles": 0, "copy_cycles": 0, "copy_bytes_device_link": 0,
                           "gpu_copy_bytes": 0}
        self.counters = {}
        self._epoch_counters = {}

    # -- bookkeeping ---------------------------------------------------------------------

    def enter(self, phase, batch):
        t = now()
        self._account()
        if self.phase in self.phase_start:
            self.phase_len[self.phase] = t - self.phase_start[self.phase]
        self.phase, self.batch = phase, batch
        self.phase_start[phase] = t
        self.plan.on_phase(phase, batch, phase_len=self.phase_len,
                           batch_cycles=self.batch_cycles, batches_left=self.n - batch + 1)

    def _account(self):
        """Add the time since the last call to the phase the host is in: where the host's
        time goes (its critical path), phase by phase."""
        t = now()
        key = f"phase_{self.phase}"
        self.host_stats[key] = self.host_stats.get(key, 0) + t - self._accounted
        self._accounted = t

    def spawn(self, coro):
        task = cocotb.start_soon(coro)
        self.tasks.add(task)
        return task

    def batch_data(self, b):
        return self.data.batch(b - 1)

    def _remember(self, b):
        """Keep the golden state after batch ``b`` for the checks after a failure."""
        self.history[b] = (copy.deepcopy(self.golden), copy.deepcopy(self.reference))
        self.mlp_history[b] = self.golden.dense.parameters().copy()
        floor = self.durable - self.k - 2
        for old in [x for x in self.history if x < floor]:
            del self.history[old]
            self.mlp_history.pop(old, None)

    async def _read_counters(self):
        """While failures may come, keep the device's counters of this power-up: a
        failure erases them, and the run's totals add up what each power-up counted."""
        if self.plan.pending or self.plan.armed():
            self._epoch_counters = await self.tb.counters()

    # -- the run -------------------------------------------------------------------------

    async def wait(self, cycles):
        """Let ``cycles`` of modelled host-side time pass (the device runs on)."""
        if cycles > 0:
            await Timer(cycles * PERIOD_NS, "ns")

    async def _copy(self, nbytes, hops=1):
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

    async def _configure(self):
        """The checkpoint and link registers, after a power-up."""
        tb = self.tb
        if self.soft is not None:
            if self.checkpointing:
                await self.soft.configure()
            return
        await tb.configure_checkpoints(self.k, enable=self.checkpointing)
        if not self.system.coherent:
            # Explicit copies put the engines' inputs and outputs in the device's own
            # buffer: no CXL link between the engines and that memory.
            await tb.local_host_memory()

    async def start(self):
        """Power-up, empty media: format the checkpoint state and remember batch 0."""
        tb, cfg = self.tb, self.cfg
        await self._configure()
        if self.checkpointing and self.soft is None:
            error, *_ = await tb.recover()
            assert error == ErrorCode.NO_CHECKPOINT, f"RECOVER on blank media gave {error!r}"
        tables = initial_tables(cfg, seed=self.seed)
        await tb.load_tables(tables)
        self.golden = FixedPointTrainer(cfg, tables, seed=self.seed)
        self.reference = FloatTrainer(cfg, tables, seed=self.seed)
        self.gpu = Gpu(cfg, DenseModel(cfg, self.seed))
        if self.checkpointing:
            assert await self._commit(0) == ErrorCode.NONE
            if self.soft is not None:
                await self.soft.snapshot(0, self.gpu.model.parameters())
            else:
                await tb.stage_mlp(self.gpu.model.parameters())
                assert await tb.snapshot(0) == ErrorCode.NONE
                await tb.wait_snapshot(0)
        self.history, self.mlp_history = {}, {}
        self._remember(0)
        self._epoch_counters = await tb.counters()
        self.counters = {k: 0 for k in self._epoch_counters}
        self._start_counters = dict(self._epoch_counters)
        self.t0 = now()

    async def run(self):
        await self.start()
        next_batch = 1
        while next_batch <= self.limit:
            task = self.spawn(self.train_from(next_batch))
            await First(task.complete, self.plan.fired.wait())
            if task.done():
                task.result()                   # re-raises what went wrong
                break
            next_batch = await self._power_failure()
        self.plan.cancel()
        if self.tb.submitted:
            await self.tb.wait_completed(self.tb.submitted)     # commits not waited for
        if self.checkpointing and self.soft is None:
            last = max(self.record["loss"], default=0)
            st = await self.tb.checkpoint_state()
            if st["committed"] != last:
                self.record["errors"].append({"batch": last, "commit": "NOT_COMMITTED",
                                              "committed": st["committed"]})
        end = await self.tb.counters()
        for k, v in end.items():
            self.counters[k] += v - self._start_counters.get(k, 0)
        self.record["cycles"] = now() - self.t0
        self.record["failures_planned_left"] = self.plan.pending + int(self.plan.armed())
        if self.soft is not None:
            for k, v in self.soft.stats.items():
                self.host_stats[k] = self.host_stats.get(k, 0) + v
        self.record["host"] = self.host_stats
        if self.window is not None:
            self.record["window"] = self.window
        return self.record

    async def _mark_window(self, edge):
        """Counters and modelled host figures at an edge of the measured window."""
        self._account()
        counters = await self.tb.counters()
        host = dict(self.host_stats)
        if self.soft is not None:
            for k, v in self.soft.stats.items():
                host[k] = host.get(k, 0) + v
        mark = {"cycle": now(), "counters": counters, "host": host}
        if edge == "start":
            self._window_start = mark
            return
        a = self._window_start
        self.window = {
            "first_batch": self.measure_from, "last_batch": self.batch,
            "batches": self.batch - self.measure_from + 1,
            "cycles": mark["cycle"] - a["cycle"],
            "counters": {k: v - a["counters"].get(k, 0) for k, v in counters.items()},
            "host": {k: v - a["host"].get(k, 0) for k, v in host.items()},
        }

    # -- one batch, system by system -----------------------------------------------------------

    async def _lookup(self, b, batch, *, relaxed=False):
        """Pool batch ``b`` the system's way; returns a :class:`LookupResult`."""
        tb, sysm = self.tb, self.system
        if self.soft is not None:
            pooled, old = await self.soft.lookup(batch)
            looked = LookupResult(pooled, ErrorCode.NONE, 0)
            looked.old = old
            return looked
        if not sysm.coherent:
            await self._copy(4 * (len(batch.indices) + len(batch.offsets)))     # host -> device
        looked = await tb.lookup(b, batch.indices, batch.offsets, relaxed=relaxed,
                                 nolog=sysm.log_pass)
        if not sysm.coherent:
            await self._copy(batch.n_bags * self.cfg.dim * 4, hops=2)           # device -> host -> GPU
        return looked

    async def _update(self, b, batch, deltas, looked):
        """Log (if the system logs in a pass of its own) and apply batch ``b``'s deltas;
        returns the error code."""
        tb, sysm = self.tb, self.system
        if self.soft is not None:
            self.enter("update", b)
            await self.soft.update(b, batch, deltas, looked.old)
            return ErrorCode.NONE
        if sysm.log_pass and self.checkpointing:
            # Logging on the critical path: the batch's rows read again, this time logged;
            # the UPDATE then waits until every record is persistent.
            self.enter("log", b)
            logged = await tb.lookup(b, batch.indices, batch.offsets)
            if logged.error != ErrorCode.NONE:
                return logged.error
        self.enter("update", b)
        # The GPU sums each row's contributions (sparse-gradient deduplication), so the
        # device reads and writes every row once; the bags' layout can hold that batch
        # unless the tables have more distinct rows than max_bags allows.
        indices, offsets, rows_deltas = coalesce_update(self.cfg, batch.indices, batch.offsets, deltas)
        coalesced = len(offsets) - 1 <= self.cfg.max_bags
        if not coalesced:
            indices, offsets, rows_deltas = batch.indices, batch.offsets, deltas
        if not sysm.coherent:
            await self._copy((len(offsets) - 1) * self.cfg.dim * 4, hops=2)   # GPU -> host -> device
        error, _ = await tb.update(b, indices, offsets, rows_deltas, coalesced=coalesced)
        return error

    async def _commit(self, b, *, wait=True):
        """COMMIT ``b``. During training the host does not wait for the commit record to
        persist (``wait=False``): the device commits in order, and :meth:`_snapshot`
        checks that the commit before took effect. Checkpointing stays off the host's
        critical path."""
        if self.soft is not None:
            await self.soft.commit(b)
            return ErrorCode.NONE
        if not wait:
            await self.tb.commit(b, wait=False)
            return ErrorCode.NONE
        return await self.tb.commit(b)

    async def train_from(self, b):
        tb, rec = self.tb, self.record
        early = None
        while b <= self.limit:
            if b == self.measure_from:
                await self._mark_window("start")
            c0 = now()
            batch = self.batch_data(b)
            self.enter("lookup", b)
            looked = early if early is not None else await self._lookup(b, batch)
            want = self.golden.step(batch)
            loss_ref = self.reference.step(batch).loss
            same = looked.error == ErrorCode.NONE and np.array_equal(looked.pooled, want.pooled)
            rec["pooled_mismatches"] += int(not same)
            self.enter("gpu", b)
            loss, deltas = self.gpu.step(batch, looked.pooled)
            self.host_stats["gpu_busy_cycles"] += self.gpu_cycles
            nxt = self.batch_data(b + 1) if b < self.limit else None
            if self.relaxed and nxt is not None:
                # The next batch's lookup runs while the GPU computes this one.
                task = self.spawn(self._lookup(b + 1, nxt, relaxed=True))
                await self.wait(self.gpu_cycles)
                early = await task
            else:
                await self.wait(self.gpu_cycles)
                early = None
            error = await self._update(b, batch, deltas, looked)
            if early is not None:
                if early.error == ErrorCode.DEFER_OVERFLOW:
                    rec["fallbacks"] += 1               # too many shared rows: strict order
                    early = None
                else:
                    fin, _ = await tb.finish(b + 1, nxt.n_bags)
                    early.pooled = await tb.pooled(b + 1, nxt.n_bags)
                    if fin != ErrorCode.NONE:
                        early.error = fin
            self.enter("commit", b)
            self._remember(b)               # the golden state a recovery to b must find
            rec["loss"][b], rec["loss_ref"][b] = loss, loss_ref
            rec["cycles_per_batch"][b] = now() - c0
            committed = ErrorCode.NONE
            if self.checkpointing:
                committed = await self._commit(b, wait=False)
                self.enter("snapshot", b)
                await self._snapshot(b)
            if looked.error != ErrorCode.NONE or error != ErrorCode.NONE or committed != ErrorCode.NONE:
                rec["errors"].append({"batch": b, "lookup": looked.error.name,
                                      "update": error.name, "commit": committed.name})
            rec["cycles_per_batch"][b] = now() - c0
            self.batch_cycles = self.batch_cycles or now() - c0
            note = ""
            plan_done = not self.plan.pending and not self.plan.armed()
            stopping = b >= self.limit or (plan_done and (self.until_plan_done or b >= self.n))
            if self.measure_from is not None and stopping and b >= self.measure_from:
                await self._mark_window("end")
            if b == 1 or b == self.n or b % self.check_every == 0 or stopping:
                self.enter("check", b)
                ok = await self._tables_match(self.golden.tables)
                rec["checks"].append({"batch": b - 1, "tables_match": ok})
                note = f", tables {'match' if ok else 'DIFFER'}"
            await self._read_counters()
            self.log(f"  batch {b}/{self.n}: loss {loss:.4f} (float32 {loss_ref:.4f}), "
                     f"{rec['cycles_per_batch'][b]} cycles, pooled {'ok' if same else 'DIFFER'}{note}")
            if stopping:
                self.record["stopped_after"] = b
                return
            b += 1

    async def _snapshot(self, b):
        """Snapshot the MLP after batch ``b``. The device's pull is staged if the engine is
        free; with a pull in flight that would leave the snapshots more than K behind, the
        host waits for it. ``pmem`` copies it in software, stopping training meanwhile."""
        tb = self.tb
        if self.soft is not None:
            await self.soft.snapshot(b, self.gpu.model.parameters())
            self.durable = b
            return
        if self._queued_snapshot:
            # The staged copy may change only once the pull queued before has started.
            await tb.wait_completed(self._queued_snapshot)
            self._queued_snapshot = 0
        st = await tb.checkpoint_state()
        if st["committed"] is None or st["committed"] < b - 1:
            self.record["errors"].append({"batch": b - 1, "commit": "NOT_COMMITTED",
                                          "committed": st["committed"]})
        if st["snapshot_busy"] and self.pulling is not None and b - self.pulling > self.k:
            waited = 0
            while st["snapshot_busy"]:
                if waited > SNAPSHOT_WAIT_CYCLES:
                    raise TimeoutError(f"batch {b}: the MLP snapshot pull of batch "
                                       f"{self.pulling} still runs after {waited} cycles")
                await Timer(64 * PERIOD_NS, "ns")
                waited += 64
                st = await tb.checkpoint_state()
        if st["durable"] is not None:
            self.durable = max(self.durable, st["durable"])
        if not st["snapshot_busy"]:
            if not self.system.coherent:
                await self._copy(self.cfg.mlp_params * 4, hops=2)       # GPU -> host -> device
            await tb.stage_mlp(self.gpu.model.parameters())
            if self.k == 0:
                error = await tb.snapshot(b)
                assert error == ErrorCode.NONE, f"SNAPSHOT_MLP({b}) refused: {error!r}"
            else:
                # Relaxed snapshots: the pull is queued behind the commit and the host goes on;
                # the SNAPSHOT register shows when it is done.
                self._queued_snapshot = await tb.snapshot(b, wait=False)
            self.pulling = b
        if self.k == 0:
            st = await tb.wait_snapshot(b)
            self.durable = max(self.durable, st["durable"])

    async def _tables_match(self, want):
        got = await self.tb.read_tables()
        return all(np.array_equal(d, g) for d, g in zip(got, want))

    # -- power failure and recovery ------------------------------------------------------

    async def _cut_power(self):
        self.plan.acknowledge()
        for task in list(self.tasks):
            task.cancel()
        self.tasks.clear()
        await self.tb.power_fail()
        self.tb.host.clear()            # the GPU's memory, staged copy included, is gone
        self.gpu = None                 # and so are its parameters

    async def _power_failure(self):
        """Cut the power, recover, check the invariants; returns the batch to resume at."""
        tb, cfg = self.tb, self.cfg
        failure = {"cycle": self.plan.target, "phase": self.phase, "batch": self.batch,
                   "durable_before": self.durable, "snapshot_in_flight": self.pulling is not None}
        for k, v in self._epoch_counters.items():
            self.counters[k] += v - self._start_counters.get(k, 0)
        await self._cut_power()
        self.pulling = None
        self._queued_snapshot = 0
        nested = []
        while True:
            await self._configure()
            self.enter("recovery", self.batch)
            task = self.spawn(self.soft.recover() if self.soft is not None else tb.recover())
            await First(task.complete, self.plan.fired.wait())
            if task.done():
                error, d, m, rolled, cycles = task.result()
                break
            nested.append(self.plan.target)      # the power failed again, during recovery
            await self._cut_power()
        assert error == ErrorCode.NONE, f"RECOVER failed with {error!r} after {failure}"
        st = await tb.checkpoint_state() if self.soft is None else {"durable": d}
        params = await tb.read_snapshot(m)
        tables_ok, mlp_ok = recovered_state_matches(self.history, self.mlp_history, d, m,
                                                    await self.tb.read_tables(), params)
        failure.update({
            "recovered_batch": d, "recovered_mlp_batch": m, "recovery_cycles": cycles,
            "rolled_back": rolled, "failures_during_recovery": len(nested),
            "recovery_failure_cycles": nested,
            "invariants": {
                "tables_equal_golden_at_D": tables_ok,
                "mlp_equal_golden_at_m": mlp_ok,
                "m_within_staleness": d - self.k <= m <= d,
                "no_durable_batch_lost": d >= failure["durable_before"],
            },
        })
        failure["consistent"] = all(failure["invariants"].values())
        self.record["failures"].append(failure)
        self.log(f"  power failure at cycle {failure['cycle']} in {failure['phase']} of batch "
                 f"{failure['batch']}: recovered D={d} m={m} in {cycles} cycles, "
                 f"{rolled} records rolled back, "
                 f"{'consistent' if failure['consistent'] else 'INCONSISTENT'}")
        if not failure["consistent"]:
            raise AssertionError(f"recovery broke an invariant: {failure}")
        # Resume from D with the MLP of m: the golden model does the same.
        self.golden, self.reference, self.gpu = resume_models(
            cfg, self.seed, self.history, self.mlp_history, d, m, params)
        self.durable = st["durable"] if st["durable"] is not None else d
        self._epoch_counters = await tb.counters()
        self._start_counters = dict(self._epoch_counters)
        return d + 1

"""A device in plain Python for the training protocol's fast tests.

:class:`FakeDevice` answers every call the protocol (:mod:`trainingcxl.host.protocol`)
makes on a :class:`~trainingcxl.host.driver.device.Device`, with the rules of
docs/design.md and docs/checkpointing.md kept at the level of descriptors, not
of lines:

* descriptors run in order, on the device's own timeline: one the host waits
  for runs at once; one submitted without waiting (``COMMIT``, a relaxed
  ``SNAPSHOT_MLP``) runs when the host next lets time pass, and a power
  failure before then drops it;
* a ``LOOKUP`` with logging on records the old value of each row it reads,
  once per batch; ``UPDATE`` is refused (``NOT_LOGGED``) unless a clean, logged
  lookup (and its ``FINISH``) of the same batch came before and every row it
  changes has a record of this batch; ``COMMIT`` and ``RECOVER`` follow the
  protocol's batch ids and generations;
* a relaxed ``LOOKUP`` leaves out the rows the previous batch looked up and
  ``FINISH`` adds them (docs/relaxed-lookup.md), overflowing a deferred list of
  ``defer_depth`` entries with ``DEFER_OVERFLOW``;
* the MLP snapshot pull takes ``pull_cycles`` in the background and reads the
  GPU's staged copy when it ends; a ``LOOKUP`` waits while the snapshots are
  more than K batches behind the commits;
* a power failure (:meth:`strike_at`) keeps the media (the tables, the undo
  records, the commit records and the snapshot slots) and loses the rest: the
  queue, the pull, the logger's stamps, the deferred list and host memory.

Every descriptor, completion and power event goes to :attr:`trace` as an
:class:`Event`; what the device could not have done safely (the staged copy
changed during a pull) goes to :attr:`violations`.
"""

from dataclasses import dataclass, field

import numpy as np

from trainingcxl.spec.descriptors import ErrorCode, Op
from trainingcxl.spec.registers import COUNTERS
from trainingcxl.host.driver.device import Device, DeviceError, LookupResult, Recovery
from trainingcxl.host.model.fixed import wrap32
from trainingcxl.host.model.golden import embedding_update

__all__ = ["Event", "FakeDevice", "PowerLost"]

#: Cycles each descriptor takes on the fake's timeline (only their order matters).
COST = {Op.LOOKUP: 40, Op.FINISH: 10, Op.UPDATE: 40, Op.COMMIT: 8, Op.SNAPSHOT_MLP: 2,
        Op.RECOVER: 10}
#: Cycles RECOVER spends on each record it rolls back.
ROLLBACK_CYCLES = 4


class PowerLost(Exception):
    """The power failed; nothing more happens on the device until :meth:`FakeDevice.power_fail`."""


@dataclass
class Event:
    """One line of the trace: ``what`` (an operation's name, ``"done"`` or a power
    event), the batch, the cycle, and details (flags, error code)."""
    what: str
    batch: int | None
    cycle: int
    info: dict = field(default_factory=dict)


@dataclass
class _Media:
    """What survives a power failure."""
    commits: list = field(default_factory=list)     # (gen, batch, K)
    slots: list = field(default_factory=lambda: [None, None])   # (batch, params) or None
    undo: list = field(default_factory=list)        # (gen, batch, (table, row), old row)


class _Transport:
    """The part of a transport :class:`Device` uses for tables and CXL.mem: the media lines."""

    interrupts = False

    def __init__(self, device, media_lines):
        self.device = device
        self.media = np.zeros((media_lines, 64), dtype=np.uint8)

    async def read_lines(self, addrs):
        base = self.device.config.hdm_base
        return [int.from_bytes(bytes(self.media[a - base]), "little") for a in addrs]

    async def write_lines(self, lines):
        """Fenced writes, line by line: a failure in the middle keeps the lines before it."""
        dev, cfg = self.device, self.device.config
        for addr, value in lines.items():
            line = addr - cfg.hdm_base
            if line >= cfg.log_base and not dev.host_owns:
                raise DeviceError(f"CXL.mem write to protected line {line} refused")
            dev.advance(1)
            self.media[line] = np.frombuffer(value.to_bytes(64, "little"), np.uint8)


class FakeDevice(Device):
    """The device's operations kept in Python, with a trace (see the module docstring).

    ``pull_cycles`` is how long a snapshot pull runs beside the host; ``defer_depth``
    overrides the configuration's deferred list (a small one forces the fallback).
    """

    def __init__(self, config, *, pull_cycles=300, defer_depth=None):
        super().__init__(_Transport(self, config.media_lines), config)
        self.pull_cycles = pull_cycles
        self.defer_depth = config.defer_depth if defer_depth is None else defer_depth
        self.durable_media = _Media()
        self.trace, self.violations = [], []
        self.clock = 0
        self.fail_at = None
        self._power_on()

    # -- time and power ------------------------------------------------------------------

    def _power_on(self):
        self.dead = False
        self.enabled = self.ready = self.host_owns = False
        self.k_register = 0
        self.k = 0                      # K in force (from the format or the newest commit)
        self.gen = 0
        self.queue = []                 # (op, batch, args) submitted, not yet run
        self.busy_until = self.clock
        self.pull = None                # (batch, slot, end cycle)
        self.stamps = {}                # (table, row) -> (gen, batch) logged
        self.marks = [(None, set()), (None, set())]     # per parity: (batch, rows looked up)
        # Per parity: the last clean lookup's (batch, arrays, relaxed, nolog).
        self.clean = [None, None]
        self.finished = set()           # batches whose relaxed lookup was finished
        self.deferred = None            # (batch, [(bag, (table, row))])
        self.host = {}                  # the GPU's memory: "out0", "out1", "mlp"
        self.submitted = 0

    def strike_at(self, cycle):
        """Cut the power when the device's clock reaches ``cycle``."""
        self.fail_at = cycle

    def _alive(self):
        if self.dead:
            raise PowerLost("the device has no power")

    def advance(self, cycles):
        """Let ``cycles`` pass: queued descriptors and the pull go on; the power may fail."""
        self._alive()
        self._run_until(self.clock + cycles)

    def _run_until(self, t):
        if self.fail_at is not None and self.fail_at <= t:
            t, strike = max(self.fail_at, self.clock), True
        else:
            strike = False
        while self.queue and max(self.busy_until, self.clock) + COST[self.queue[0][0]] <= t:
            op, batch, args = self.queue.pop(0)
            self.clock = max(self.busy_until, self.clock) + COST[op]
            self._settle_pull()
            self._execute(op, batch, args)
            self.busy_until = self.clock
        self.clock = max(self.clock, t)
        self._settle_pull()
        if strike:
            self.fail_at, self.dead = None, True
            self.trace.append(Event("power_lost", None, self.clock))
            raise PowerLost(f"power failure at cycle {self.clock}")

    async def power_fail(self):
        """The power is cut (if it has not failed already) and comes back: what is volatile
        is lost."""
        self.trace.append(Event("power_fail", None, self.clock, {"dropped": [
            (op.name, b) for op, b, _ in self.queue]}))
        self._power_on()

    def forget_host_memory(self):
        self.host.clear()

    async def cycles(self):
        self._alive()
        return self.clock

    async def counters(self, regs=COUNTERS):
        return {r.name.lower(): self.clock if r.name == "CYCLES" else 0 for r in regs}

    # -- descriptors ----------------------------------------------------------------------

    def _submit(self, op, batch, **args):
        self._alive()
        self.trace.append(Event(op.name, batch, self.clock, {
            k: v for k, v in args.items() if isinstance(v, bool)}))
        self.queue.append((op, batch, args))
        self.submitted += 1
        return self.submitted

    def _drain(self):
        """Run everything queued, the host waiting for it."""
        while self.queue:
            op = self.queue[0][0]
            self._run_until(max(self.busy_until, self.clock) + COST[op])

    async def _run(self, op, batch, after_submit=None, **args):
        self._submit(op, batch, **args)
        if after_submit is not None:
            await after_submit()
        self._drain()
        return self._last               # the queue ran in order: ours was the last

    async def wait_completed(self, count):
        self._alive()
        self._drain()
        return self.submitted

    def _done(self, op, batch, error, **info):
        self.trace.append(Event("done", batch, self.clock, {"op": op.name, "error": error.name,
                                                             **info}))
        self._last = error

    def _execute(self, op, batch, args):
        getattr(self, f"_do_{op.name.lower()}")(batch, **args)

    # -- the tables on the media ------------------------------------------------------------

    def _tables(self):
        cfg, media = self.config, self.transport.media
        return [media[cfg.table_base[t]:cfg.table_base[t] + rows * cfg.lines_per_row]
                .view("<i4").reshape(rows, cfg.dim) for t, rows in enumerate(cfg.tables)]

    def _positions(self, indices, offsets):
        """``(bag, (table, row))`` of every index of a CSR batch, in order."""
        lengths = np.diff(np.asarray(offsets, dtype=np.int64))
        bags = np.repeat(np.arange(len(lengths)), lengths)
        return [(int(k), (int(k) % self.config.n_tables, int(r)))
                for k, r in zip(bags, np.asarray(indices).tolist())]

    def _log(self, batch, rows):
        """The logger's first read of each row in ``batch``: a persistent undo record."""
        if not (self.enabled and self.ready):
            return
        tables = self._tables()
        for t, r in rows:
            if self.stamps.get((t, r)) != (self.gen, batch):
                self.stamps[t, r] = (self.gen, batch)
                self.durable_media.undo.append((self.gen, batch, (t, r), tables[t][r].copy()))

    # -- LOOKUP, FINISH, UPDATE -----------------------------------------------------------

    async def lookup(self, batch_id, indices, offsets, *, relaxed=False, nolog=False,
                     after_submit=None):
        n_bags = len(offsets) - 1
        arrays = (np.array(indices), np.array(offsets))
        error = await self._run(Op.LOOKUP, batch_id, after_submit, arrays=arrays, relaxed=relaxed,
                                nolog=nolog)
        return LookupResult(await self.pooled(batch_id, n_bags), error, COST[Op.LOOKUP])

    def _do_lookup(self, b, *, arrays, relaxed, nolog):
        if self._stale():
            # The staleness stall: the lookup waits for the pull in flight.
            if self.pull is None:
                raise DeviceError(f"LOOKUP({b}) would wait for ever: the snapshots are more "
                                  f"than K = {self.k} behind and no pull runs")
            self.trace.append(Event("stall", b, self.clock))
            self._run_until_inside(max(0, self.pull[2] - self.clock))
            self._settle_pull()
        if self.enabled and self.ready and self._committed() is not None \
                and b <= self._committed():
            return self._done(Op.LOOKUP, b, ErrorCode.BAD_BATCH)
        indices, offsets = arrays
        positions = self._positions(indices, offsets)
        prev_batch, prev_rows = self.marks[(b - 1) % 2]
        skip = set()
        if relaxed and prev_batch == b - 1:
            skip = {i for i, (_, row) in enumerate(positions) if row in prev_rows}
        tables, cfg = self._tables(), self.config
        pooled = np.zeros((len(offsets) - 1, cfg.dim), dtype=np.int64)
        for i, (k, (t, r)) in enumerate(positions):
            if i not in skip:
                pooled[k] += tables[t][r]
        self.host[f"out{b % 2}"] = wrap32(pooled)
        self.marks[b % 2] = (b, {row for _, row in positions})
        deferred = [positions[i] for i in sorted(skip)]
        if len(deferred) > self.defer_depth:
            self.deferred = None
            return self._done(Op.LOOKUP, b, ErrorCode.DEFER_OVERFLOW, deferred=len(deferred))
        if not nolog:
            self._log(b, [row for i, (_, row) in enumerate(positions) if i not in skip])
        self.deferred = (b, deferred) if relaxed else None
        self.clean[b % 2] = (b, arrays, relaxed, nolog)
        self.finished.discard(b)
        self._done(Op.LOOKUP, b, ErrorCode.NONE, deferred=len(deferred),
                   committed=self._committed(), snapshot=self._snapshot(),
                   rows=[row for _, row in positions])

    async def finish(self, batch_id, n_bags):
        return await self._run(Op.FINISH, batch_id), COST[Op.FINISH]

    def _do_finish(self, b):
        if self.deferred is None or self.deferred[0] != b:
            return self._done(Op.FINISH, b, ErrorCode.NOT_DEFERRED)
        tables = self._tables()
        out = self.host[f"out{b % 2}"].astype(np.int64)
        for k, (t, r) in self.deferred[1]:
            out[k] += tables[t][r]
        self.host[f"out{b % 2}"] = wrap32(out)
        # The deferred rows are logged now, as the previous batch's update left them.
        self._log(b, [row for _, row in self.deferred[1]])
        self.deferred = None
        self.finished.add(b)
        self._done(Op.FINISH, b, ErrorCode.NONE)

    async def pooled(self, batch_id, n_bags):
        self._alive()
        out = self.host.get(f"out{batch_id % 2}")
        return np.zeros((n_bags, self.config.dim), np.int32) if out is None else out.copy()

    async def update(self, batch_id, indices, offsets, deltas, *, coalesced=False,
                     after_submit=None, wait=True):
        arrays = (np.array(indices), np.array(offsets), np.array(deltas, dtype=np.int32))
        if not wait:
            seq = self._submit(Op.UPDATE, batch_id, arrays=arrays, coalesced=coalesced)
            if after_submit is not None:
                await after_submit()
            return seq
        return await self._run(Op.UPDATE, batch_id, after_submit, arrays=arrays,
                               coalesced=coalesced), COST[Op.UPDATE]

    async def settle(self, seq, batch_id):
        self._alive()
        assert seq == self.submitted, "a descriptor was submitted after the one settled"
        self._drain()
        return self._last

    def _do_update(self, b, *, arrays, coalesced):
        indices, offsets, deltas = arrays
        clean = self.clean[b % 2]
        rows = {row for _, row in self._positions(indices, offsets)}
        logging = self.enabled and self.ready
        ok = clean is not None and clean[0] == b and (not clean[2] or b in self.finished)
        if ok and not coalesced:
            ok = all(np.array_equal(x, y) for x, y in zip(clean[1], (indices, offsets)))
        if ok and logging:
            ok = not clean[3] and all(self.stamps.get(row) == (self.gen, b) for row in rows)
        if not ok:
            return self._done(Op.UPDATE, b, ErrorCode.NOT_LOGGED)
        embedding_update(self.config, self._tables(), indices, offsets, deltas, inplace=True)
        if not coalesced:
            self.clean[b % 2] = None      # a plain UPDATE uses its LOOKUP up
        self._done(Op.UPDATE, b, ErrorCode.NONE)

    # -- checkpoints ------------------------------------------------------------------------

    async def configure_checkpoints(self, staleness, *, enable=True):
        self._alive()
        self.k_register, self.enabled, self.host_owns = staleness, enable, False

    async def host_owns_checkpoints(self):
        self._alive()
        self.enabled, self.host_owns = False, True

    async def local_host_memory(self):
        self.trace.append(Event("local_host_memory", None, self.clock))

    def _committed(self):
        mine = [c for c in self.durable_media.commits if c[0] == self.gen]
        return max(c[1] for c in mine) if mine else None

    def _snapshot(self):
        """The newest valid snapshot's batch (not after the newest commit)."""
        valid = [s[0] for s in self.durable_media.slots if s is not None]
        return max(valid) if valid else None

    def _durable(self):
        c, s = self._committed(), self._snapshot()
        return None if c is None or s is None else min(c, s + self.k)

    def _stale(self):
        c, s = self._committed(), self._snapshot()
        return self.enabled and c is not None and s is not None and c - s > self.k

    async def _maybe_wait(self, op, batch, wait, after_submit):
        """Run ``op`` and return its error, or without ``wait`` its sequence number at once."""
        if wait:
            return await self._run(op, batch, after_submit)
        seq = self._submit(op, batch)
        if after_submit is not None:
            await after_submit()
        return seq

    async def commit(self, batch_id, *, wait=True, after_submit=None):
        return await self._maybe_wait(Op.COMMIT, batch_id, wait, after_submit)

    def _do_commit(self, b):
        c = self._committed()
        if not (self.enabled and self.ready) or (c is not None and b != c + 1) \
                or (c is None and b != 0):
            return self._done(Op.COMMIT, b, ErrorCode.BAD_BATCH)
        self.durable_media.commits.append((self.gen, b, self.k))
        # Records of durable batches are reclaimed.
        durable = self._durable()
        if durable is not None:
            self.durable_media.undo = [u for u in self.durable_media.undo
                                       if u[0] != self.gen or u[1] > durable]
        self._done(Op.COMMIT, b, ErrorCode.NONE)

    async def stage_mlp(self, params):
        self._alive()
        if self.pull is not None:
            self.violations.append(f"the MLP was staged again during the pull of batch "
                                   f"{self.pull[0]}")
        self.host["mlp"] = np.array(params, dtype=np.float32)
        self.trace.append(Event("stage_mlp", None, self.clock))

    async def snapshot(self, batch_id, *, wait=True, after_submit=None):
        return await self._maybe_wait(Op.SNAPSHOT_MLP, batch_id, wait, after_submit)

    def _do_snapshot_mlp(self, b):
        c = self._committed()
        if self.pull is not None or c is None or b > c or "mlp" not in self.host:
            return self._done(Op.SNAPSHOT_MLP, b, ErrorCode.BAD_BATCH)
        slots = self.durable_media.slots
        older = min(range(2), key=lambda s: -1 if slots[s] is None else slots[s][0])
        slots[older] = None             # the older header is invalidated before the data changes
        self.pull = (b, older, self.clock + self.pull_cycles)
        self._done(Op.SNAPSHOT_MLP, b, ErrorCode.NONE)

    def _settle_pull(self):
        if self.pull is not None and self.clock >= self.pull[2]:
            b, slot, _ = self.pull
            self.durable_media.slots[slot] = (b, self.host["mlp"].copy())
            self.pull = None
            self.trace.append(Event("snapshot_valid", b, self.clock))

    async def checkpoint_state(self):
        self._alive()
        return {"ready": self.ready, "logging": self.enabled and self.ready,
                "snapshot_busy": self.pull is not None, "snapshot_failed": False,
                "staleness": self.k, "gen": self.gen,
                "committed": self._committed(), "snapshot": self._snapshot(),
                "durable": self._durable()}

    async def wait_snapshot(self, batch_id):
        self._alive()
        self._drain()
        while self._snapshot() is None or self._snapshot() < batch_id:
            if self.pull is None:
                raise DeviceError(f"no pull runs and no valid snapshot of batch {batch_id}")
            self._run_until(self.pull[2])
        return await self.checkpoint_state()

    async def read_snapshot(self, slot_batch):
        if self.host_owns:
            # Software checkpointing wrote the slots onto the media, in the records' format.
            return await super().read_snapshot(slot_batch)
        for slot in self.durable_media.slots:
            if slot is not None and slot[0] == slot_batch:
                return slot[1].copy()
        return None

    # -- RECOVER --------------------------------------------------------------------------

    async def recover(self):
        self._submit(Op.RECOVER, 0)
        self._drain()
        return self._recovery

    def _do_recover(self, _):
        media = self.durable_media
        self.stamps.clear()
        self.clean = [None, None]
        newest = max(media.commits, default=None)
        usable = [s[0] for s in media.slots if s is not None and newest and s[0] <= newest[1]]
        if not usable:
            self.gen = 1 + max((c[0] for c in media.commits), default=-1)
            self.k, self.ready = self.k_register, True
            self._recovery = Recovery(ErrorCode.NO_CHECKPOINT, None, None, 0, COST[Op.RECOVER])
            return self._done(Op.RECOVER, None, ErrorCode.NO_CHECKPOINT)
        g, c, k = newest
        m = max(usable)
        d = min(c, m + k)
        rolled = 0
        tables = self._tables()
        # Newest first, so a row undone by several batches ends with its oldest value.
        for gen, batch, (t, r), old in reversed(media.undo):
            if gen == g and batch > d:
                self._run_until_inside(ROLLBACK_CYCLES)
                tables[t][r] = old
                rolled += 1
        media.commits.append((g + 1, d, k))
        media.undo = [u for u in media.undo if u[0] != g or u[1] <= d]
        self.gen, self.k, self.ready = g + 1, k, True
        self._recovery = Recovery(ErrorCode.NONE, d, m, rolled, COST[Op.RECOVER])
        self._done(Op.RECOVER, d, ErrorCode.NONE, m=m, rolled_back=rolled)

    def _run_until_inside(self, cycles):
        """Time passing inside a descriptor: the power may fail here, mid-way."""
        if self.fail_at is not None and self.fail_at <= self.clock + cycles:
            self.clock = max(self.clock, self.fail_at)
            self.fail_at, self.dead = None, True
            self.queue.clear()
            self.trace.append(Event("power_lost", None, self.clock))
            raise PowerLost(f"power failure at cycle {self.clock}, inside a descriptor")
        self.clock += cycles

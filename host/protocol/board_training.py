"""DLRM training on a board (or the simulated board top) through the UART host bridge.

The protocol is the simulated host's (``sim/training.py``) in strict order:
per batch LOOKUP, the GPU step on the host, a coalesced UPDATE, COMMIT and an
MLP snapshot with staleness bound K. The golden model runs beside it and every
pooled vector and the tables are compared bit for bit.

A board whose device has no update or checkpoint engine (``Config.blocks``,
the small board) trains too: the lookup engine pools, and the host applies
each batch's coalesced update itself, reading and writing the rows over
CXL.mem. Nothing is checkpointed there, so power failures are refused.

Power failures come from the host (``POWER_FAIL`` command, at a planned batch
and phase: just after that phase's descriptor is submitted) or from the
board's button at any moment. The host notices a button failure from the
bridge (``POWER_LOST``) or from the bridge's failure counters, which it reads
at every batch and after any error. After a failure it re-arms the
checkpoint registers, runs RECOVER, checks the invariants (docs/design.md, "Invariants")
against the golden model's history, reloads the MLP from the snapshot and
resumes at D + 1.
"""

import copy

import numpy as np

from trainingcxl.spec.descriptors import ErrorCode
from trainingcxl.spec.bridge_protocol import Status
from trainingcxl.host.driver.bridge import BridgeError
from trainingcxl.host.model.data import initial_tables
from trainingcxl.host.model.dlrm import DenseModel, FixedPointTrainer, FloatTrainer, Gpu
from trainingcxl.host.driver.device import lines_to_rows, rows_to_lines
from trainingcxl.host.protocol.phases import BOARD_PHASES
from trainingcxl.host.model.fixed import wrap32
from trainingcxl.host.model.golden import coalesce_update
from trainingcxl.host.protocol.resume import recovered_state_matches, resume_models

__all__ = ["BOARD_PHASES", "BoardTraining"]



class _PowerLost(Exception):
    """The device lost power (command or button); the batch in progress is gone."""


class BoardTraining:
    """One training run on ``device`` (a :class:`~trainingcxl.host.driver.bridge.BoardDevice`).

    ``failures`` is a list of ``(batch, phase)``: the host cuts the power just
    after submitting that phase's descriptor of that batch (once each).
    """

    def __init__(self, device, data, *, batches, seed=0, staleness=0, failures=(), log=print):
        self.dev, self.cfg, self.data = device, device.config, data
        self.n, self.seed, self.k = batches, seed, staleness
        for batch, phase in failures:
            if phase not in BOARD_PHASES:
                raise ValueError(f"a board failure phase is one of {', '.join(BOARD_PHASES)}, "
                                 f"not {phase!r}")
            if not 1 <= batch <= batches:
                raise ValueError(f"failure batch {batch} is outside 1..{batches}")
        self.engines = "update" in self.cfg.blocks
        self.checkpointing = "checkpoint" in self.cfg.blocks
        if failures and not self.checkpointing:
            raise ValueError("this device has no checkpoint engine: it cannot survive power "
                             "failures (train without them, or on a board with the full device)")
        self.planned = sorted(failures)
        self.log = log
        self.record = {"batches": batches, "staleness": staleness, "loss": {}, "loss_ref": {},
                       "pooled_mismatches": 0, "errors": [], "checks": [], "failures": []}
        self._fails_seen = None

    # -- power failures ------------------------------------------------------------------

    async def _power_fail_count(self):
        st = await self.dev.bridge.state()
        return st["command_power_fails"] + st["button_power_fails"]

    async def _maybe_fail(self, b, phase):
        if (b, phase) in self.planned:
            self.planned.remove((b, phase))
            await self.dev.power_fail()
            raise _PowerLost(f"POWER_FAIL command in {phase} of batch {b}")

    async def _check_power(self):
        count = await self._power_fail_count()
        if self._fails_seen is not None and count != self._fails_seen:
            raise _PowerLost("the board's button")
        self._fails_seen = count

    async def _guarded(self, coro):
        """Run one step; a power failure from anywhere surfaces as :class:`_PowerLost`."""
        try:
            return await coro
        except BridgeError as e:
            if e.status == Status.POWER_LOST:
                raise _PowerLost("the board's button") from None
            raise
        except (RuntimeError, TimeoutError):
            # A descriptor refused or never completed: a button press explains it.
            if await self._power_fail_count() != self._fails_seen:
                raise _PowerLost("the board's button") from None
            raise

    # -- the run ---------------------------------------------------------------------------

    async def start(self):
        dev, cfg = self.dev, self.cfg
        await dev.check_identity()
        self._fails_seen = await self._power_fail_count()
        await dev.set_gpu_window()
        if self.checkpointing:
            await dev.configure_checkpoints(self.k)
            error, *_ = await dev.recover()
            if error != ErrorCode.NO_CHECKPOINT:
                raise RuntimeError(f"RECOVER on the board found a checkpoint ({error.name}): its "
                                   f"media holds an earlier run; power-cycle or reprogram the board")
        tables = initial_tables(cfg, seed=self.seed)
        await dev.load_tables(tables)
        self.golden = FixedPointTrainer(cfg, tables, seed=self.seed)
        self.reference = FloatTrainer(cfg, tables, seed=self.seed)
        self.gpu = Gpu(cfg, DenseModel(cfg, self.seed))
        if self.checkpointing:
            if await dev.commit(0) != ErrorCode.NONE:
                raise RuntimeError("COMMIT of batch 0 refused")
            await self._snapshot(0)
        self.history = {0: (copy.deepcopy(self.golden), copy.deepcopy(self.reference))}
        self.mlp_history = {0: self.golden.dense.parameters().copy()}

    async def _snapshot(self, b):
        """Stage the MLP and pull it as the snapshot of ``b``; with K = 0 wait until it is
        valid, otherwise only until the previous pull is done (the staged copy is reused)."""
        dev = self.dev
        st = await dev.checkpoint_state()
        if st["snapshot_busy"]:
            await dev.wait_snapshot(b - 1)
        await dev.stage_mlp(self.gpu.model.parameters())
        error = await dev.snapshot(b, after_submit=lambda: self._maybe_fail(b, "snapshot"))
        if error != ErrorCode.NONE:
            raise RuntimeError(f"SNAPSHOT_MLP({b}) refused: {error.name}")
        if self.k == 0:
            await dev.wait_snapshot(b)

    async def _batch(self, b):
        rec = self.record
        batch = self.data.batch(b - 1)
        await self._check_power()
        looked = await self._guarded(self._lookup(b, batch))
        error, pooled = looked.error, looked.pooled
        want = self.golden.step(batch)
        loss_ref = self.reference.step(batch).loss
        same = error == ErrorCode.NONE and np.array_equal(pooled, want.pooled)
        rec["pooled_mismatches"] += int(not same)
        loss, deltas = self.gpu.step(batch, pooled)
        indices, offsets, rows = coalesce_update(self.cfg, batch.indices, batch.offsets, deltas)
        coalesced = len(offsets) - 1 <= self.cfg.max_bags
        if not self.engines:
            await self._host_update(indices, offsets, rows)
            up = committed = ErrorCode.NONE
        else:
            if not coalesced:
                indices, offsets, rows = batch.indices, batch.offsets, deltas
            up, _ = await self._guarded(self._update(b, indices, offsets, rows, coalesced))
        if self.checkpointing:
            committed = await self._guarded(self._commit(b))
            self.history[b] = (copy.deepcopy(self.golden), copy.deepcopy(self.reference))
            self.mlp_history[b] = self.golden.dense.parameters().copy()
            await self._guarded(self._snapshot(b))
        if ErrorCode.NONE not in (error, up, committed) or len({error, up, committed}) > 1:
            rec["errors"].append({"batch": b, "lookup": error.name, "update": up.name,
                                  "commit": committed.name})
        rec["loss"][b], rec["loss_ref"][b] = loss, loss_ref
        self.log(f"  batch {b}/{self.n}: loss {loss:.4f} (float32 {loss_ref:.4f}), "
                 f"pooled {'ok' if same else 'DIFFER'}")

    async def _host_update(self, indices, offsets, deltas):
        """A coalesced update applied by the host: each row read, changed, written back."""
        cfg, dev = self.cfg, self.dev
        for k in range(len(offsets) - 1):
            if offsets[k + 1] == offsets[k]:
                continue
            t, row = k % cfg.n_tables, int(indices[offsets[k]])
            first = cfg.table_base[t] + row * cfg.lines_per_row
            old = lines_to_rows(await dev.read_media(first, cfg.lines_per_row), cfg.dim)[0]
            new = wrap32(old.astype(np.int64) - np.asarray(deltas[k], dtype=np.int64))
            await dev.write_media(dict(enumerate(rows_to_lines(new.astype(np.int32)), first)))

    async def _lookup(self, b, batch):
        return await self.dev.lookup(b, batch.indices, batch.offsets,
                                     after_submit=lambda: self._maybe_fail(b, "lookup"))

    async def _update(self, b, indices, offsets, rows, coalesced):
        return await self.dev.update(b, indices, offsets, rows, coalesced=coalesced,
                                     after_submit=lambda: self._maybe_fail(b, "update"))

    async def _commit(self, b):
        return await self.dev.commit(b, after_submit=lambda: self._maybe_fail(b, "commit"))

    async def run(self):
        await self.start()
        b = 1
        while b <= self.n:
            try:
                await self._batch(b)
                b += 1
            except _PowerLost as cause:
                b = await self._recover(b, str(cause))
        final = await self.dev.read_tables()
        ok = all(np.array_equal(g, w) for g, w in zip(final, self.golden.tables))
        self.record["checks"].append({"batch": self.n, "tables_match": ok})
        self.record["consistent"] = (ok and not self.record["pooled_mismatches"]
                                     and all(f["consistent"] for f in self.record["failures"]))
        return self.record

    async def _recover(self, b, cause):
        dev, cfg = self.dev, self.cfg
        durable_before = max((x for x in self.history if x < b), default=0) if self.k == 0 else None
        self._fails_seen = await self._power_fail_count()
        dev.submitted = 0
        await dev.configure_checkpoints(self.k)
        error, d, m, rolled, cycles = await dev.recover()
        if error != ErrorCode.NONE:
            raise RuntimeError(f"RECOVER after a power failure ({cause}) failed: {error.name}")
        tables = await dev.read_tables()
        params = await dev.read_snapshot(m)
        tables_ok, mlp_ok = recovered_state_matches(self.history, self.mlp_history, d, m,
                                                    tables, params)
        failure = {"batch": b, "cause": cause, "recovered_batch": d, "recovered_mlp_batch": m,
                   "recovery_cycles": cycles, "rolled_back": rolled,
                   "invariants": {"tables_equal_golden_at_D": tables_ok,
                                  "mlp_equal_golden_at_m": mlp_ok,
                                  "m_within_staleness": d - self.k <= m <= d}}
        if durable_before is not None:
            failure["invariants"]["no_durable_batch_lost"] = d >= durable_before
        failure["consistent"] = all(failure["invariants"].values())
        self.record["failures"].append(failure)
        self.log(f"  power failure ({cause}) in batch {b}: recovered D={d} m={m} in {cycles} "
                 f"cycles, {rolled} records rolled back, "
                 f"{'consistent' if failure['consistent'] else 'INCONSISTENT'}")
        if not failure["consistent"]:
            raise AssertionError(f"recovery broke an invariant: {failure}")
        self.golden, self.reference, self.gpu = resume_models(
            cfg, self.seed, self.history, self.mlp_history, d, m, params)
        return d + 1

"""The training loop's hooks (:mod:`trainingcxl.host.protocol.hooks`): called at their
points of a batch, and the pool's and CPR's protocols as hooks, on the fake device."""

import numpy as np

from trainingcxl.host.protocol.cpr import CprRecovery
from trainingcxl.host.protocol.hooks import RunHooks
from trainingcxl.host.protocol.pool_member import PoolMember

BATCHES = 4


class Recorder(RunHooks):
    """Notes each point it is called at, with the device's trace length then."""

    def __init__(self, floor=None):
        self.calls, self.floor, self.run = [], floor, None

    def _note(self, run, point, b=None):
        self.calls.append((point, b, len(run.device.trace)))

    def attach(self, run):
        self.run = run
        self.calls.append(("attach", None, 0))

    async def started(self, run):
        self._note(run, "started")

    async def before_batch(self, run, b):
        self._note(run, "before_batch", b)

    async def after_lookup(self, run, b, batch, looked):
        self._note(run, "after_lookup", b)

    async def after_commit(self, run, b, batch):
        self._note(run, "after_commit", b)

    def durable_floor(self, run):
        return self.floor

    def finished(self, run, record):
        self._note(run, "finished")


def _op_at(t, op, b):
    """Where in the trace ``op`` of batch ``b`` was submitted."""
    return next(i for i, e in enumerate(t.trace) if e.what == op and e.batch == b)


def test_hooks_are_called_at_their_points_of_each_batch(fake_training):
    hook = Recorder()
    t = fake_training("cxl-b", batches=BATCHES, hooks=[hook])
    points = [p for p, _, _ in hook.calls]
    assert points == ["attach", "started",
                      *["before_batch", "after_lookup", "after_commit"] * BATCHES, "finished"]
    for point, b, at in hook.calls:
        if point == "before_batch":
            assert at <= _op_at(t, "LOOKUP", b)
        elif point == "after_lookup":         # the lookup is done, the update not yet sent
            assert t.done("LOOKUP", b)[0] < at <= _op_at(t, "UPDATE", b)
        elif point == "after_commit":         # the batch's commit is submitted
            assert _op_at(t, "COMMIT", b) < at
            assert b == BATCHES or at <= _op_at(t, "LOOKUP", b + 1)
    assert t.record.consistent


def test_a_hooks_durable_floor_keeps_the_golden_history_from_there(fake_training):
    kept = fake_training("cxl-b", batches=6, hooks=[Recorder(floor=0)]).run.history
    pruned = fake_training("cxl-b", batches=6).run.history
    assert kept.mlp(1) is not None          # a recovery may still reach back to batch 1
    assert pruned.mlp(1) is None


class _Takeover(RunHooks):
    """Recovers in its own way: resumes at the batch after the one it struck in."""

    def __init__(self):
        self.struck = []

    async def power_failure(self, run):
        self.struck.append(run.batch)
        await run.cut_power()
        raise _Stop()


class _Stop(Exception):
    pass


def test_a_power_failure_goes_to_the_hook_that_recovers_in_its_own_way(fake_training):
    import pytest
    hook = _Takeover()
    with pytest.raises(_Stop):
        fake_training("cxl-b", batches=5, hooks=[hook],
                      failures=[{"phase": "update", "batch": 3, "offset": 5}])
    assert hook.struck == [3]               # the device's own recovery never ran


class FakeLink:
    """A pool of one device: every table is this device's; the exchange hands its
    vectors back and notes what it was given."""

    def __init__(self, cfg):
        self.device, self.devices = 0, 1
        self.tables = tuple(range(cfg.n_tables))
        self.ranges = tuple((0, rows) for rows in cfg.tables)
        self.model_rows = tuple(cfg.tables)
        self.exchanges, self.aligned, self.closed = [], 0, False

    def exchange(self, parts, t, owed=0, durable=0, batch=0):
        self.exchanges.append((parts, t, owed, durable))
        return parts, (t, owed), durable

    def align(self, t):
        self.aligned += 1
        return t

    def close(self, summary=None):
        self.closed = True


def test_a_pool_member_of_a_pool_of_one_trains_as_the_device(fake_training):
    from trainingcxl.spec.presets import PRESETS
    cfg = PRESETS["tiny"]
    link = FakeLink(cfg)
    alone = fake_training("cxl-b", batches=BATCHES)
    pooled = fake_training("cxl-b", batches=BATCHES, hooks=[PoolMember(link)])
    assert len(link.exchanges) == BATCHES and link.aligned == 1 and link.closed
    # Each exchange carries this device's pooled vectors (golden, reference, device).
    for (golden, reference, device), *_ in link.exchanges:
        assert golden.shape == device.shape == (cfg.model.batch_size, cfg.n_tables, cfg.dim)
    assert pooled.record.loss == alone.record.loss
    assert pooled.record.cycles_per_batch == alone.record.cycles_per_batch
    assert all(c.tables_match for c in pooled.record.checks) and pooled.record.consistent


def test_cpr_checkpoints_and_reloads_a_failed_device_as_hooks(fake_training):
    from trainingcxl.spec.presets import PRESETS
    link = FakeLink(PRESETS["tiny"])
    cpr = CprRecovery(link, "cpr", failure_every=2, pls=0.1, fraction=0.5)
    t = fake_training("cxl-b", batches=8, relaxed=False, checkpointing=False, hooks=[cpr])
    rec = t.record
    assert rec.recovery == "cpr" and rec.cpr_failures, rec.cpr_failures
    for f in rec.cpr_failures:              # this device failed: its tables reloaded
        assert f.device == 0 and f.consistent and f.reload_cycles > 0
        assert f.lines_written == sum(t.run.cfg.tables) * t.run.cfg.lines_per_row
    assert rec.cpr.checkpoints > 0 and rec.cpr.rows_read > 0
    assert rec.cpr.lines_written == sum(f.lines_written for f in rec.cpr_failures)
    assert all(c.tables_match for c in rec.checks)
    assert link.aligned == len(rec.cpr_failures)     # the pool goes on together after each
    np.testing.assert_array_equal(cpr.saved[0].shape, t.run.golden.tables[0].shape)

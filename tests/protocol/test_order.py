"""The order of a batch's operations, over the fake device (seconds, no simulator).

docs/design.md, "Checkpoint protocol"; docs/relaxed-lookup.md, "Rules the host keeps".
"""

import numpy as np
import pytest

from trainingcxl.host.protocol.systems import SYSTEMS
from trainingcxl.spec.presets import PRESETS

BATCHES = 6
#: The systems whose device engines pool, update, log and commit.
ENGINES = [name for name, s in SYSTEMS.items() if s.engines]


@pytest.mark.parametrize("name", ENGINES)
def test_each_update_is_logged_before_and_committed_after(fake_training, name):
    """Write-ahead and commit order: batch b's update runs after a logged lookup of b and
    after the commit record of b - 1 is persistent; COMMIT(b) comes after the update."""
    t = fake_training(name, batches=BATCHES)
    for b in range(1, BATCHES + 1):
        update, error = t.done("UPDATE", b)
        assert error == "NONE", f"UPDATE({b}) refused: {error}"
        logged = t.at("LOOKUP", b, nolog=False)
        assert logged is not None and logged < t.at("UPDATE", b), f"UPDATE({b}) before its log"
        commit_before, commit_error = t.done("COMMIT", b - 1)
        assert commit_error == "NONE" and commit_before < t.at("UPDATE", b), \
            f"UPDATE({b}) ran before the commit record of batch {b - 1} was persistent"
        assert update < t.at("COMMIT", b), f"COMMIT({b}) submitted before UPDATE({b}) completed"
    assert t.record.consistent and not t.record.errors


@pytest.mark.parametrize("name", ["cxl-d", "near-data"])
def test_a_logging_pass_logs_what_the_lookup_did_not(fake_training, name):
    t = fake_training(name, batches=3)
    for b in range(1, 4):
        first = t.at("LOOKUP", b, nolog=True)
        assert first is not None and first < t.at("LOOKUP", b, nolog=False) < t.at("UPDATE", b)
    assert (t.at("local_host_memory", None) is not None) == (not SYSTEMS[name].coherent)


def test_strict_order_looks_up_after_the_update_before(fake_training):
    t = fake_training("cxl-b", batches=BATCHES)
    for b in range(1, BATCHES):
        assert t.done("UPDATE", b)[0] < t.at("LOOKUP", b + 1)
    assert t.at("FINISH", 2) is None and t.record.relaxed is False


def test_relaxed_order_looks_up_early_and_finishes_after_the_update(fake_training):
    """LOOKUP*(b+1) before UPDATE(b), FINISH(b+1) after it and before UPDATE(b+1); the
    pooled vectors still equal the golden model's bit for bit."""
    t = fake_training("cxl", batches=BATCHES)
    deferred = 0
    for b in range(1, BATCHES):
        early = t.at("LOOKUP", b + 1, relaxed=True)
        assert early is not None and early < t.at("UPDATE", b)
        assert t.done("UPDATE", b)[0] < t.at("FINISH", b + 1) < t.at("UPDATE", b + 1)
        assert t.done("FINISH", b + 1)[1] == "NONE"
        deferred += t.trace[t.done("LOOKUP", b + 1)[0]].info["deferred"]
    assert deferred > 0, "no row was deferred: the relaxed order was not exercised"
    assert t.record.pooled_mismatches == 0 and t.record.consistent


def test_a_deferred_list_overflow_falls_back_to_strict_order(fake_training):
    t = fake_training("cxl", batches=BATCHES, defer_depth=2)
    assert t.record.fallbacks > 0
    for b in range(2, BATCHES + 1):
        i, error = t.done("LOOKUP", b)
        if error == "DEFER_OVERFLOW":
            # The lookup is run again, strictly, after the update; nothing is finished.
            strict = t.at("LOOKUP", b, relaxed=False)
            assert strict is not None and t.done("UPDATE", b - 1)[0] < strict
            assert t.at("FINISH", b) is None
    assert t.record.pooled_mismatches == 0 and t.record.consistent


def test_relaxed_and_strict_orders_train_the_same_tables(fake_training):
    strict = fake_training("cxl", batches=BATCHES, relaxed=False)
    relaxed = fake_training("cxl", batches=BATCHES)
    assert all(np.array_equal(a, b) for a, b in zip(strict.tables(), relaxed.tables()))


@pytest.mark.parametrize("name, staleness", [("cxl-b", None), ("cxl", None), ("cxl", 1)])
def test_snapshots_follow_their_commit_and_stay_within_k(fake_training, name, staleness):
    """SNAPSHOT_MLP(b) after COMMIT(b), one every K + 1 batches (with K = 0 for every
    batch, valid before the next batch's lookup); with a pull slower than a batch, every
    lookup still sees the snapshots at most K behind the commits, the staged copy never
    changes during a pull, and the run ends with a snapshot of its last batch."""
    k = SYSTEMS[name].staleness if staleness is None else staleness
    t = fake_training(name, batches=BATCHES, pull_cycles=30_000, staleness=staleness)
    pulled = [b for b in range(1, BATCHES + 1) if t.at("SNAPSHOT_MLP", b) is not None]
    # Behind the energy-backed buffer a pull starts a batch early (every K batches),
    # so that no lookup waits for it.
    every = t.run.cfg.snapshot_period(k)
    lead = every == k
    # The last batch's own snapshot ends the run, whatever the cadence.
    assert pulled[-1] == BATCHES, f"snapshots of {pulled}: none of the last batch"
    assert all(b - a >= every for a, b in zip(pulled, pulled[1:-1])), \
        f"snapshots of {pulled}: more than one every {every} batches"
    for b in range(1, BATCHES + 1):
        snapshot = t.at("SNAPSHOT_MLP", b)
        assert snapshot is not None or k > 0
        assert snapshot is None or t.at("COMMIT", b) < snapshot
        looked = t.trace[t.done("LOOKUP", b)[0]].info
        assert looked["committed"] - looked["snapshot"] <= k
        if k == 0 and b < BATCHES:
            assert t.at("snapshot_valid", b) < t.at("LOOKUP", b + 1)
    assert not t.device.violations
    assert t.run.durable == BATCHES
    if k and not lead:
        assert any(e.what == "stall" for e in t.trace), "the slow pull never held a lookup"


@pytest.mark.parametrize("relaxed", [False, True])
def test_a_batch_of_repeated_rows_is_gathered_row_by_row_and_pooled_on_the_gpu(fake_training,
                                                                               relaxed):
    """When the reads it saves outweigh sending rows to the GPU (here, a GPU kernel costs
    nothing to launch), a batch's lookups name each of its distinct rows once; in relaxed
    order the rows the previous batch updates wait for its update, and no FINISH runs.
    The pooled vectors and the tables stay bit-exact."""
    import dataclasses
    from trainingcxl.host.model.golden import batch_keys
    cfg = PRESETS["tiny"].replace(gpu=dataclasses.replace(PRESETS["tiny"].gpu, launch_cycles=0))
    t = fake_training("cxl", relaxed=relaxed, config=cfg, min_pooling=6, batches=BATCHES)
    assert t.record.pooled_mismatches == 0 and t.record.consistent
    assert all(c.tables_match for c in t.record.checks)
    for b in range(2, BATCHES + 1):
        batch = t.run.batch_data(b)
        keys, _ = batch_keys(cfg, batch.indices, batch.offsets)
        looked = [row for e in t.trace if e.what == "done" and e.batch == b
                  and e.info["op"] == "LOOKUP" for row in e.info["rows"]]
        assert sorted(looked) == sorted({(int(k >> 32), int(k & 0xFFFF_FFFF)) for k in keys})
        assert len(looked) < len(batch.indices)           # fewer reads than indices
        assert t.at("FINISH", b) is None
        if relaxed:
            early = [e for e in t.trace if e.what == "LOOKUP" and e.batch == b]
            assert t.trace.index(early[0]) < t.at("UPDATE", b - 1)


def _rows_config():
    import dataclasses
    return PRESETS["tiny"].replace(gpu=dataclasses.replace(PRESETS["tiny"].gpu, launch_cycles=0))


def test_relaxed_order_pools_the_rows_the_batch_before_updated_from_the_gpus_copy(fake_training):
    """Gathering rows in relaxed order, the GPU pools batch b and begins its step at once
    after UPDATE(b - 1), from its own copy of the rows b - 1 updated; the device reads
    those rows (and logs them as b - 1 left them) meanwhile, before COMMIT(b - 1)."""
    t = fake_training("cxl", relaxed=True, config=_rows_config(), min_pooling=6,
                      batches=BATCHES)
    assert t.record.pooled_mismatches == 0 and t.record.consistent
    for b in range(3, BATCHES + 1):
        updated = t.done("UPDATE", b - 1)[0]
        late = [i for i, e in enumerate(t.trace) if e.what == "LOOKUP" and e.batch == b
                and i > updated]
        assert late, f"no row of batch {b} was read after UPDATE({b - 1})"
        assert late[-1] < t.at("COMMIT", b - 1)
        assert t.run.gpu_from is None           # every step's early start was taken


def test_the_device_checks_the_gpus_copy_of_the_rows(fake_training, monkeypatch):
    """A copy that differs from the rows on the media is caught when the device reads them."""
    from trainingcxl.host.protocol.strategies import Engines
    update = Engines.update

    async def corrupting(self, run, b, *args):
        error = await update(self, run, b, *args)
        if self._carry is not None:
            self._carry[2][0, 0] += 1
        return error

    monkeypatch.setattr(Engines, "update", corrupting)
    t = fake_training("cxl", relaxed=True, config=_rows_config(), min_pooling=6,
                      batches=BATCHES)
    assert t.record.pooled_mismatches > 0 and not t.record.consistent


def test_the_measured_window_holds_whole_periods(fake_training):
    """The window runs from where its first batch begins to where the last batch of the
    run begins: both ends at the same point of the overlap of a batch with the next
    (relaxed order), and the last batch, whose update nothing overlaps, left out."""
    from trainingcxl.host.protocol.hooks import RunHooks

    class Begins(RunHooks):
        def __init__(self):
            self.at = {}

        async def before_batch(self, run, b):
            self.at[b] = run.now()

    begins = Begins()
    t = fake_training("cxl", batches=BATCHES, measure_from=3, hooks=[begins])
    w = t.record.window
    assert (w.first_batch, w.last_batch, w.batches) == (3, BATCHES - 1, BATCHES - 3)
    assert w.cycles == begins.at[BATCHES] - begins.at[3] > 0


def test_large_tables_are_announced_before_they_are_made(fake_training):
    """Making and loading 10^5 rows takes seconds: the run says so before it starts."""
    lines = []
    cfg = PRESETS["tiny"].replace(tables=(100_000, 8))
    fake_training("cxl-b", batches=1, config=cfg, log=lines.append)
    assert lines[0].startswith("[data] making 100,008 rows and loading them into the media")

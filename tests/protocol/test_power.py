"""What a power failure takes away, recovery to D and m, and resuming, over the fake device.

docs/design.md, "Failure model" and "Invariants". The run itself checks the four
invariants after every recovery and raises if one breaks; these tests also check
what the failure left and how the run went on.
"""

import numpy as np
import pytest

from trainingcxl.host.protocol.phases import BATCH_PHASES


def _one_failure(t):
    assert len(t.record.failures) == 1, t.record.failures
    failure = t.record.failures[0]
    assert failure.consistent, failure
    return failure


@pytest.mark.parametrize("phase", [*BATCH_PHASES, "check"])
@pytest.mark.parametrize("name", ["cxl-b", "cxl", "cxl-d", "pmem"])
def test_a_failure_in_any_phase_recovers_consistently(fake_training, name, phase):
    t = fake_training(name, batches=5, failures=[{"phase": phase, "batch": 3, "offset": 5}])
    failure = _one_failure(t)
    assert failure.batch in (3, 4)       # the power fails when the device's clock gets there
    assert 2 - t.run.k <= failure.recovered_batch <= 3
    assert t.record.consistent and all(c.tables_match for c in t.record.checks)
    assert sorted(t.record.loss) == [1, 2, 3, 4, 5]


def test_a_commit_not_yet_run_is_lost_and_its_batch_rolled_back(fake_training):
    """The queue is volatile: COMMIT(3) submitted but not run dies with the power, so
    recovery returns to batch 2 and undoes batch 3's rows from the undo records."""
    t = fake_training("cxl-b", batches=5, failures=[{"submit": "commit", "batch": 3}])
    failure = _one_failure(t)
    cut = next(e for e in t.trace if e.what == "power_fail")
    assert ("COMMIT", 3) in cut.info["dropped"]
    assert failure.recovered_batch == 2 and failure.rolled_back > 0
    assert failure.durable_before == 2


def test_what_was_durable_stays(fake_training):
    """A failure after batch 3 is committed and snapshotted (K = 0) loses nothing."""
    t = fake_training("cxl-b", batches=5, failures=[{"phase": "check", "batch": 3, "offset": 1}])
    failure = _one_failure(t)
    assert failure.durable_before == 3
    assert (failure.recovered_batch, failure.recovered_mlp_batch) == (3, 3)
    assert failure.rolled_back == 0


def test_training_resumes_after_d_and_ends_where_a_run_without_failures_ends(fake_training):
    """K = 0: the final tables and MLP equal those of a run without failures."""
    clean = fake_training("cxl-b", batches=5)
    t = fake_training("cxl-b", batches=5, failures=[{"phase": "update", "batch": 3, "offset": 5},
                                                    {"phase": "gpu", "batch": 4, "offset": 3}])
    assert len(t.record.failures) == 2 and t.record.consistent
    for failure in t.record.failures:
        d = failure.recovered_batch
        recovered = next(i for i, e in enumerate(t.trace) if e.what == "done"
                         and e.info["op"] == "RECOVER" and e.batch == d)
        resumed = next(i for i, e in enumerate(t.trace) if e.what == "LOOKUP" and i > recovered)
        assert t.trace[resumed].batch == d + 1
    assert all(np.array_equal(a, b) for a, b in zip(clean.tables(), t.tables()))
    assert np.array_equal(clean.run.gpu.model.parameters(), t.run.gpu.model.parameters())


def test_a_failure_during_recovery_recovers_the_same(fake_training):
    """RECOVER is idempotent: cut in the middle of its rollback, run again, same D and m."""
    t = fake_training("cxl-b", batches=4, failures=[{"phase": "update", "batch": 3, "offset": 45},
                                                    {"phase": "recovery", "offset": 14}])
    failure = _one_failure(t)
    assert failure.failures_during_recovery == 1
    assert failure.recovered_batch == 2


def test_relaxed_snapshots_recover_within_k(fake_training):
    """K = 1 with a pull slower than a batch: m may trail D by one, never more."""
    t = fake_training("cxl", batches=6, pull_cycles=30_000, staleness=1,
                      failures=[{"phase": "gpu", "batch": 4, "offset": 3}])
    failure = _one_failure(t)
    assert failure.recovered_batch - failure.recovered_mlp_batch <= 1
    assert failure.invariants["m_within_staleness"]

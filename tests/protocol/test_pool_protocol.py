"""The pool's protocol without a simulator: each device's share of a failure plan, and
the recovery point the pool chooses from every device's checkpoint records."""

import pytest

from trainingcxl.host.model.recovery import Checkpoint
from trainingcxl.host.protocol.pool import device_failures, recovery_point


def test_a_failure_of_one_device_halts_the_others_at_its_cycle():
    plan = [{"pool_batch": 3, "offset": 50, "devices": [1]}]
    assert device_failures(plan, 1) == [{"pool_batch": 3, "offset": 50}]
    for other in (0, 2):
        assert device_failures(plan, other) == [{"pool_batch": 3, "offset": 50, "halt": True}]


def test_a_failure_of_the_whole_pool_strikes_every_device():
    plan = [{"pool_batch": 2, "offset": 10}, {"after": 40, "devices": "all"}]
    for d in range(3):
        assert device_failures(plan, d) == [{"pool_batch": 2, "offset": 10}, {"after": 40}]


def test_a_failure_planned_by_phase_is_refused_on_a_pool():
    with pytest.raises(ValueError, match="pool_batch"):
        device_failures([{"phase": "update"}], 0)


def probes(*records, durable=(5, 5, 5), t=(100, 120, 110)):
    return {d: (r, durable[d], t[d]) for d, r in enumerate(records)}


def test_the_pool_recovers_to_the_newest_batch_committed_on_every_device():
    # Device 1 committed batch 7 only; device 2 holds the newest snapshot not after it.
    point = recovery_point(probes(Checkpoint(8, k=1, slots=(7, 6)),
                                  Checkpoint(7, k=1, slots=(5, 4)),
                                  Checkpoint(8, k=1, slots=(7, 8))))
    assert point["d"] == 7 and point["m"] == 7 and point["holder"] == 0


def test_the_pools_batch_is_at_most_k_after_its_snapshot():
    # Every device committed 9, the newest snapshot is 6: with K = 2, D is 8.
    point = recovery_point(probes(Checkpoint(9, k=2, slots=(6, 5)),
                                  Checkpoint(9, k=2, slots=(4, 6)),
                                  Checkpoint(9, k=2, slots=(5, None))))
    assert (point["d"], point["m"], point["holder"]) == (8, 6, 0)


def test_the_recovery_point_keeps_the_oldest_durable_batch_and_the_latest_cycle():
    point = recovery_point(probes(*[Checkpoint(4, slots=(4, 3))] * 3, durable=(4, 3, 4),
                                  t=(10, 30, 20)))
    assert point["durable_before"] == 3 and point["t"] == 30


@pytest.mark.parametrize("records, why", [
    ((Checkpoint(5, k=1, slots=(5, 4)), Checkpoint(None)), "no commit record"),
    ((Checkpoint(5, k=1, slots=(5, 4)), Checkpoint(5, k=2, slots=(5, 4))), "disagree on K"),
    ((Checkpoint(5, slots=(None, None)), Checkpoint(5, slots=(6, None))), "no device holds"),
])
def test_a_pool_that_cannot_recover_says_why(records, why):
    with pytest.raises(RuntimeError, match=why):
        recovery_point({d: (r, 0, 0) for d, r in enumerate(records)})

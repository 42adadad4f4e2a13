"""Typed records (:mod:`trainingcxl.host.protocol.run_record`): the JSON they write is the
shape the applications always wrote, they read it back, a pool merges its devices'
records, and a kill campaign reads a resume's record rather than a printed line."""

import json
import pickle

from trainingcxl.host.protocol.hooks import ResumeReport
from trainingcxl.host.protocol.run_record import (NULL, Check, CprFailure, CprStats, Evaluation,
                                                Failure, Resumed, RunError, TrainRecord, Window)
from trainingcxl.host.runs.pool_coordinator import merge_records

INVARIANTS = {"tables_equal_golden_at_D": True, "mlp_equal_golden_at_m": True,
              "m_within_staleness": True, "no_durable_batch_lost": True}


def _json(data):
    return json.loads(json.dumps(data))


#: A finished run's JSON as ``train_app`` wrote it when records were dicts (abridged
#: figures, every kind of key): per-batch lists, a failure with its cause, a resume.
FINISHED = {
    "batches": 3, "loss": [0.7, 0.69], "loss_ref": [0.71, 0.7], "cycles_per_batch": [900, 880],
    "checks": [{"batch": 1, "tables_match": True}, {"batch": 2, "tables_match": True}],
    "errors": [{"batch": 2, "commit": "NOT_COMMITTED", "committed": None}],
    "pooled_mismatches": 0, "failures": [{
        "cycle": 1234, "phase": "update", "batch": 3, "durable_before": 2,
        "snapshot_in_flight": False, "cause": "button", "recovered_batch": 2,
        "recovered_mlp_batch": 2, "recovery_cycles": 77, "recovery_lines": None,
        "rolled_back": 5, "failures_during_recovery": 1, "recovery_failure_cycles": [1300],
        "invariants": INVARIANTS, "consistent": True}],
    "relaxed": False, "fallbacks": 0, "staleness": 0, "system": "cxl-b", "checkpointing": True,
    "gpu_cycles_per_batch": 500, "stopped_after": 3, "failures_planned_left": 0,
    "cycles": 2000, "host": {"gpu_busy_cycles": 1000, "phase_gpu": 3},
    "window": {"first_batch": 2, "last_batch": 3, "batches": 2, "cycles": 1800,
               "counters": {"lookup_lines": 9}, "host": {"copy_cycles": 0}},
    "test_set": {"name": "held out", "samples": 64, "positives": 30},
    "eval": [{"batch": 3, "device": {"auc": 0.6}, "reference": {"auc": 0.61}}],
    "consistent": True,
    "resumed": {"recovered_batch": 1, "recovered_mlp_batch": 1, "recovery_cycles": 50,
                "recovery_lines": 4, "rolled_back": 0, "earlier_recoveries": 2,
                "invariants": INVARIANTS, "consistent": True},
    "final_loss": 0.695, "final_loss_ref": 0.705, "counters": {"lookup_lines": 10},
    "golden_match": True, "wall_s": 1.5}


def test_a_finished_runs_json_reads_back_typed_and_writes_the_same_json():
    rec = TrainRecord.from_dict(_json(FINISHED))
    # Lists in the JSON, keyed by batch in the record: from the batch after the resume's D.
    assert rec.loss == {2: 0.7, 3: 0.69} and rec.cycles_per_batch == {2: 900, 3: 880}
    assert rec.failures[0].cause == "button" and rec.failures[0].recovery_lines is None
    assert rec.errors[0].committed is NULL and rec.resumed.earlier_recoveries == 2
    assert isinstance(rec.window, Window) and isinstance(rec.eval[0], Evaluation)
    assert rec.to_dict() == FINISHED
    assert TrainRecord.from_dict(_json(rec.to_dict())) == rec


def test_a_stopped_run_keeps_its_batches_keyed_and_a_run_of_no_batch_writes_null():
    stopped = TrainRecord(batches=5, system="cxl", staleness=1, relaxed=True,
                          checkpointing=True, gpu_cycles_per_batch=10,
                          loss={1: 0.5, 2: 0.4}, loss_ref={1: 0.5, 2: 0.4},
                          cycles_per_batch={1: 3, 2: 4}, aborted="AssertionError: x",
                          golden_match=False, counters={}, wall_s=0.1)
    data = _json(stopped.to_dict())
    assert data["loss"] == {"1": 0.5, "2": 0.4} and "final_loss" not in data
    assert "cycles" not in data and "consistent" not in data      # never reached
    assert TrainRecord.from_dict(data) == stopped
    empty = stopped.replace(aborted=None, loss={}, loss_ref={}, cycles_per_batch={},
                            final_loss=NULL, final_loss_ref=NULL)
    data = _json(empty.to_dict())
    assert data["final_loss"] is None and data["loss"] == []
    assert TrainRecord.from_dict(data) == empty
    assert pickle.loads(pickle.dumps(NULL)) is NULL     # records cross processes


def _device(d, *, cycles, failed, rolled, checks=(True, True), cpr=None):
    rec = TrainRecord(batches=2, system="cxl", staleness=1, relaxed=False, checkpointing=True,
                      gpu_cycles_per_batch=10, loss={1: 0.5, 2: 0.4}, loss_ref={1: 0.5, 2: 0.4},
                      cycles_per_batch={1: cycles, 2: cycles + 1}, pooled_mismatches=d,
                      checks=[Check(b, ok) for b, ok in enumerate(checks)],
                      errors=[RunError(batch=2, lookup="NONE", update="NONE", commit="BAD")] * d,
                      failures=[Failure(cycle=100, phase="gpu", batch=2, durable_before=1,
                                        recovered_batch=1, recovered_mlp_batch=1,
                                        recovery_cycles=10 * (d + 1), recovery_lines=None,
                                        rolled_back=rolled, invariants=dict(INVARIANTS),
                                        consistent=True, snapshot_in_flight=False,
                                        power_failed=failed, pool_recovery_cycles=40 + d,
                                        pool_durable_before=1, snapshot_from=0,
                                        halts_during_recovery=0)],
                      cycles=cycles * 2, counters={"lookup_lines": 5 + d}, consistent=True,
                      golden_match=True, final_loss=0.45, final_loss_ref=0.45, wall_s=1.0)
    if cpr:
        rec.recovery, rec.cpr_failures, rec.cpr = "cpr", cpr, CprStats(
            interval=4, every=2, checkpoints=3, rows_read=10 + d, lines_read=20,
            read_cycles=100 * (d + 1), lines_written=8, reload_cycles=7 * (d + 1))
    return rec


class _Shard:
    def __init__(self, device, tables):
        self.device, self.tables, self.ranges = device, tables, [(0, 8)] * len(tables)


PLAN = [_Shard(0, (0, 1)), _Shard(1, (2,))]


def test_a_pools_record_merges_its_devices():
    a = _device(0, cycles=100, failed=True, rolled=3)
    b = _device(1, cycles=120, failed=False, rolled=0, checks=(True, False))
    rec = merge_records([a, b], PLAN)
    assert rec.cycles_per_batch == {1: 120, 2: 121} and rec.cycles == 240
    assert rec.counters == {"lookup_lines": 11} and rec.pooled_mismatches == 1
    assert [c.tables_match for c in rec.checks] == [True, False]
    assert [e.device for e in rec.errors] == [1]
    (f,) = rec.failures
    assert f.devices_failed == [0] and f.recovery_cycles_per_device == [10, 20]
    assert f.rolled_back == 3 and f.rolled_back_per_device == [3, 0]
    assert f.pool_recovery_cycles == 41 and f.recovery_lines == 0
    assert f.invariants["same_point_on_every_device"] and f.consistent
    assert [d.device for d in rec.devices] == [0, 1] and rec.devices[1].tables == [2]
    data = _json(rec.to_dict())
    assert set(data["failures"][0]) == {
        "cycle", "phase", "batch", "recovered_batch", "recovered_mlp_batch",
        "pool_durable_before", "snapshot_from", "devices_failed", "durable_before",
        "recovery_cycles", "recovery_cycles_per_device", "recovery_lines",
        "pool_recovery_cycles", "rolled_back", "rolled_back_per_device",
        "failures_during_recovery", "recovery_failure_cycles", "invariants", "consistent"}
    assert data["devices"][0]["cycles_per_batch"] == [100, 101]
    assert TrainRecord.from_dict(data) == rec
    # Devices whose GPUs disagree: the pool's record says so.
    c = b.replace(loss={1: 0.5, 2: 0.3})
    assert not merge_records([a, c], PLAN).golden_match


def test_a_pools_record_under_cpr_takes_the_failed_devices_reload():
    def failure(d, failed):
        return CprFailure(batch=3, device=failed, batches_since_checkpoint=1, cycle=500,
                          pool_recovery_cycles=60 + d,
                          **({"reload_cycles": 50, "lines_written": 8, "consistent": True}
                             if d == failed else {}))
    a = _device(0, cycles=100, failed=True, rolled=0, cpr=[failure(0, 1)])
    b = _device(1, cycles=100, failed=True, rolled=0, cpr=[failure(1, 1)])
    rec = merge_records([a, b], PLAN)
    (f,) = rec.cpr_failures
    assert (f.device, f.reload_cycles, f.consistent, f.pool_recovery_cycles) == (1, 50, True, 61)
    assert f.cycle is None and "cycle" not in f.to_dict()
    assert rec.cpr.read_cycles == 200 and rec.cpr.reload_cycles == 14     # the slowest
    assert rec.cpr.rows_read == 21 and rec.cpr.lines_written == 16        # summed
    assert rec.cpr.checkpoints == 3 and rec.cpr.interval == 4             # the pool's


def test_a_kill_round_reads_what_the_resumed_process_wrote(tmp_path):
    from trainingcxl.host.runs.kills import _resumed
    path = tmp_path / "resumed.json"
    assert _resumed(path) is None               # killed before its resume was checked
    found = Resumed(recovered_batch=7, recovered_mlp_batch=6, recovery_cycles=90,
                    recovery_lines=12, rolled_back=4, earlier_recoveries=3,
                    invariants=dict(INVARIANTS, tables_equal_golden_at_D=False),
                    consistent=False)
    ResumeReport(path).resume_checked(None, found)
    assert _resumed(path) == found

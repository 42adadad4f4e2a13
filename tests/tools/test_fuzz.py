"""A seeded subset of ``trainingcxl fuzz`` under both simulators, and how shards add up."""

import pytest

from trainingcxl.host.cli import main


@pytest.mark.cocotb
@pytest.mark.parametrize("sim,cases,shards", [("verilator", 400, 2), ("icarus", 60, 1)])
def test_fuzz_refuses_everything_and_corrupts_nothing(sim, cases, shards, tmp_path):
    import json
    out = tmp_path / "fuzz.json"
    assert main(["fuzz", "--sim", sim, "--cases", str(cases), "--shard-cases", "200",
                 "--seed", "3", "--jobs", "1", "--json", str(out)]) == 0
    rec = json.loads(out.read_text())
    assert rec["shards"] == shards and not rec["errors"]
    assert rec["invalid"] == rec["refused"] == cases
    assert rec["corruptions"] == rec["hangs"] == rec["lost_commits"] == 0
    assert rec["batches"] == cases // 10
    assert all(n > 0 for n in rec["by_kind"].values())


def test_shards_add_up_and_a_failed_shard_is_named():
    from trainingcxl.host.commands.fuzz import merge_shards
    from trainingcxl.host.apps.job_records import FuzzRecord
    from trainingcxl.host.jobs import FuzzJob
    from trainingcxl.host.runs.task import Task
    from trainingcxl.spec.presets import PRESETS

    def task(i):
        return Task(i, PRESETS["tiny"], FuzzJob())

    def shard(i, cases, kind, not_refused=()):
        return (task(i), FuzzRecord.from_dict({
            "cases": cases, "invalid": cases, "refused": cases - len(not_refused),
            "corruptions": 0, "hangs": 0, "lost_commits": 0, "batches": cases // 10,
            "by_kind": {kind: cases}, "not_refused": list(not_refused),
            "counters": {"mem_errors": 1, "descriptor_errors": 2}}), None)
    merged = merge_shards([shard(0, 20, "bad_op"), shard(1, 30, "bad_op", [{"case": 4, "kind": "bad_op"}]),
                           (task(2), None, "simulator died")])
    merged = merged.to_dict()
    assert merged["cases"] == merged["invalid"] == 50 and merged["refused"] == 49
    assert merged["by_kind"] == {"bad_op": 50} and merged["batches"] == 5
    assert merged["not_refused"] == [{"case": 4, "kind": "bad_op", "shard": 1}]
    assert merged["counters"] == {"mem_errors": 2, "descriptor_errors": 4}
    assert merged["errors"] == [{"shard": 2, "error": "simulator died"}]

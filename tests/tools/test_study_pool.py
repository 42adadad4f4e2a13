"""``study --devices``: exact recovery of a pool against CPR's partial recovery (golden model)."""

import json

import numpy as np
import pytest

from trainingcxl.spec.config import PoolShape
from trainingcxl.spec.presets import PRESETS
from trainingcxl.host.cli import main
from trainingcxl.host.commands.study_runs import workload as _workload
from trainingcxl.host.commands.study_pool import pool_golden_run

CFG = PRESETS["small"].replace(pool=PoolShape(devices=4))


def _model(history):
    g = history.golden
    return [t.copy() for t in g.tables], g.dense.parameters()


def test_exact_recovery_of_the_pool_ends_as_without_failures_and_partial_recovery_does_not():
    wl = _workload(CFG, 0, 32)
    clean, *_ = pool_golden_run(CFG, wl, 60, seed=0, mode="exact", failure_every=0)
    exact, failures, *_ = pool_golden_run(CFG, wl, 60, seed=0, mode="exact", failure_every=10)
    partial, lost, cps, _ = pool_golden_run(CFG, wl, 60, seed=0, mode="cpr", failure_every=10)
    assert len(failures) >= 3 and [f[:2] for f in failures] == [f[:2] for f in lost]
    (t0, m0), (t1, m1), (t2, m2) = _model(clean), _model(exact), _model(partial)
    assert all(np.array_equal(a, b) for a, b in zip(t0, t1)) and np.array_equal(m0, m1)
    assert not all(np.array_equal(a, b) for a, b in zip(t0, t2))
    assert cps[0].every == 2                # 2 x PLS 0.1 x 10 batches


def test_the_pool_study_reports_every_mode_at_every_rate(tmp_path, capsys):
    out = tmp_path / "study.json"
    code = main(["study", "--config", "tiny", "--devices", "2", "--batches", "40",
                 "--batch-size", "16", "--failure-every", "10,5", "--seeds", "2",
                 "--test-samples", "512", "--jobs", "1", "--json", str(out)])
    assert code == 0
    rec = json.loads(out.read_text())
    rows = {(r["mode"], r["failure_every"]): r for r in rec["summary"]}
    assert set(rows) == {(m, r) for m in ("exact", "cpr", "cpr-mfu", "cpr-ssu") for r in (10, 5)}
    assert rows[("exact", 5)]["bit_identical"] and rows[("exact", 5)]["d_auc_pct"] == 0
    assert all(r["overhead_pct"] > 0 for r in rec["summary"])
    assert "CPR's figures" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.cocotb
def test_the_pool_study_measures_both_recoveries_on_the_devices(tmp_path):
    out = tmp_path / "study.json"
    assert main(["study", "--devices", "2", "--config", "tiny", "--set", "tables=[32,32,32,32]",
                 "--batch-size", "4", "--batches", "20", "--failure-every", "5", "--seeds", "1",
                 "--modes", "exact,cpr-mfu", "--device-batches", "10", "--test-samples", "256",
                 "--json", str(out)]) == 0
    rows = {r["mode"]: r for r in json.loads(out.read_text())["on_devices"]}
    assert list(rows) == ["none", "exact", "cpr-mfu"]
    assert all(r["golden_match"] for r in rows.values())
    assert rows["exact"]["failures"] == rows["cpr-mfu"]["failures"] > 0
    # Exact recovery pays its undo log and snapshots and trains a batch again per failure;
    # CPR pays its reads and reloads: both cost cycles, measured.
    assert rows["exact"]["overhead_pct"] > 0 and rows["cpr-mfu"]["overhead_pct"] > 0
    assert rows["cpr-mfu"]["cpr"]["checkpoints"] > 0

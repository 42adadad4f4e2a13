"""The staleness study: golden runs with failures, the two recovery modes, the RTL replay."""

import json

import numpy as np
import pytest

from trainingcxl.host.cli import main
from trainingcxl.host.model.data import SyntheticWorkload
from trainingcxl.host.commands.study import _rtl_point, golden_run, replay, rtl_tasks
from trainingcxl.spec.config import Config, ModelShape

CFG = Config(tables=(40, 30, 20), max_pooling=4, max_bags=512,
             model=ModelShape(dense_features=5, bottom_hidden=(8,), top_hidden=(6,), lr=0.1))


def state(history):
    g = history.golden
    return [t.copy() for t in g.tables], g.dense.parameters()


def same(a, b):
    return (all(np.array_equal(x, y) for x, y in zip(a[0], b[0]))
            and np.array_equal(a[1].view(np.uint32), b[1].view(np.uint32)))


@pytest.fixture(scope="module")
def clean():
    wl = SyntheticWorkload(CFG, seed=1, batch_size=8, min_pooling=1)
    history, recoveries = golden_run(CFG, wl, 60, seed=1)
    assert recoveries == []
    return wl, state(history)


@pytest.mark.parametrize("mode", ["trainingcxl", "cpr"])
def test_k0_failures_change_nothing(clean, mode):
    wl, want = clean
    history, recoveries = golden_run(CFG, wl, 60, seed=1, mode=mode, k=0, failure_every=5)
    assert len(recoveries) >= 5
    assert all(t == m == b - 1 for b, t, m in recoveries)
    assert same(state(history), want)


def test_trainingcxl_recovers_exact_tables_and_an_mlp_k_batches_old(clean):
    wl, want = clean
    history, recoveries = golden_run(CFG, wl, 60, seed=1, mode="trainingcxl", k=8,
                                     failure_every=10)
    assert recoveries and all(t == b - 1 and m == max(0, t - 8) for b, t, m in recoveries)
    assert not same(state(history), want)       # the older MLPs took the run elsewhere


def test_cpr_recovers_current_mlps_and_tables_k_batches_old(clean):
    wl, want = clean
    history, recoveries = golden_run(CFG, wl, 60, seed=1, mode="cpr", k=8, failure_every=10)
    assert recoveries and all(m == b - 1 and t == max(0, m - 8) for b, t, m in recoveries)
    assert not same(state(history), want)


def test_replay_of_a_runs_recoveries_reaches_its_state():
    """What the RTL sample relies on: replaying the recoveries a run reported, in order,
    reaches the run's final state, bit for bit."""
    wl = SyntheticWorkload(CFG, seed=2, batch_size=8, min_pooling=1)
    history, recoveries = golden_run(CFG, wl, 50, seed=2, mode="trainingcxl", k=3,
                                     failure_every=7)
    assert len(recoveries) >= 3
    again = replay(CFG, wl, 50, seed=2, recoveries=[(t, m) for _, t, m in recoveries])
    assert same(state(again), state(history))
    shifted = replay(CFG, wl, 50, seed=2, recoveries=[(t, max(0, m - 1)) for _, t, m in recoveries])
    assert not same(state(shifted), state(history))


def test_study_command_reports_every_point(tmp_path, capsys):
    out, plot = tmp_path / "study.json", tmp_path / "study.png"
    assert main(["study", "--config", "tiny", "--batch-size", "8", "--batches", "80",
                 "--k", "0,4", "--seeds", "2", "--failure-every", "10", "--test-samples", "256",
                 "--rtl-sample", "0", "--json", str(out), "--plot", str(plot)]) == 0
    rec = json.loads(out.read_text())
    assert len(rec["points"]) == 2 * (1 + 2 * 2) and plot.stat().st_size > 0
    rows = {(r["mode"], r["k"]): r for r in rec["summary"]}
    assert rows[("trainingcxl", 0)]["exact"] and rows[("cpr", 0)]["exact"]
    assert rows[("trainingcxl", 0)]["d_auc"] == 0 and rows[("trainingcxl", 4)]["seeds"] == 2
    assert "within 0.01% AUC" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="unknown mode"):
        main(["study", "--modes", "cpr,exact"])
    with pytest.raises(SystemExit, match="comma-separated integers"):
        main(["study", "--k", "0,eight"])


@pytest.mark.cocotb
@pytest.mark.parametrize("index", [1, 5])       # K = 1 strict, K = 8 relaxed
def test_rtl_runs_replay_bit_for_bit_on_the_golden_model(index):
    """The study's premise: a run on the RTL with power failures ends with the tables and MLP
    the golden model reaches when it recovers where the device reported."""
    task = rtl_tasks(index + 1, seed=3)[index]
    _, got = _rtl_point(task)
    assert "error" not in got, got
    assert got["recoveries"] and got["consistent"]
    assert got["tables_equal"] and got["mlp_equal"], got

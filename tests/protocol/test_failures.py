"""Training with injected power failures: recovery, the invariants (docs/design.md, "Invariants"),
bit-identical results for K = 0, and small versions of the campaign and the sweep.

Icarus runs one short training run with failures (it is about 50x slower);
Verilator runs the rest.
"""

import json
from dataclasses import replace

import numpy as np
import pytest

from trainingcxl.host.cli import main
from trainingcxl.spec.presets import PRESETS
from trainingcxl.host.apps.launch import launch
from trainingcxl.host.jobs import CAMPAIGN_SYSTEM, TrainJob

pytestmark = pytest.mark.cocotb
CONFIG = PRESETS["tiny"]


def train(sim, tmp_path, name, config=CONFIG, **args):
    job = TrainJob(seed=3, batches=5, batch_size=8, check_every=2, system=CAMPAIGN_SYSTEM,
                   test_samples=0).replace(**args)
    return launch(job, config, sim=sim, name=f"failures-{name}").to_dict()


def assert_recovered(rec, at_least):
    fails = rec["failures"]
    assert len(fails) >= at_least, f"only {len(fails)} failures happened"
    for f in fails:
        assert f["consistent"], f
        assert all(f["invariants"].values()), f
        assert f["recovered_batch"] >= f["durable_before"]
    assert rec["golden_match"] and not rec.get("aborted")
    return fails


@pytest.mark.parametrize("sim", ["verilator", "icarus"])
def test_failures_in_an_update_and_in_its_recovery(sim, tmp_path):
    """The power fails in batch 2's update, then again during the recovery: the device
    comes back to batch 1 (rolling back batch 2's rows) and training finishes in step
    with the golden model."""
    rec = train(sim, tmp_path, "update", batches=3, batch_size=4,
                failures=[{"phase": "update", "batch": 2, "offset": 40},
                          {"phase": "recovery", "offset": 300}])
    (f,) = assert_recovered(rec, 1)
    assert (f["phase"], f["batch"], f["recovered_batch"], f["recovered_mlp_batch"]) == ("update", 2, 1, 1)
    assert f["failures_during_recovery"] == 1 and f["rolled_back"] > 0


@pytest.mark.parametrize("config", [CONFIG, pytest.param(PRESETS["large"], marks=pytest.mark.slow)],
                         ids=["tiny", "large"])
def test_k0_failures_leave_the_model_of_a_run_without_failures(tmp_path, config):
    """K = 0: any number of failures, in every phase, and the final tables and MLP are
    bit for bit those of the same run without failures (``--dump``), and so are the
    held-out metrics; also with tables of a million rows (``large``)."""
    clean = train("verilator", tmp_path, "clean", config, dump=str(tmp_path / "clean"),
                  test_samples=256)
    plan = ([{"phase": p, "offset": 30} for p in ("lookup", "update", "commit", "snapshot")]
            + [{"random": True}] * 3 + [{"phase": "recovery"}])
    failed = train("verilator", tmp_path, "failed", config, dump=str(tmp_path / "failed"),
                   failures=plan, failure_seed=4, test_samples=256)
    fails = assert_recovered(failed, 6)
    assert {"lookup", "update", "snapshot"} <= {f["phase"] for f in fails}
    assert failed["loss"] == clean["loss"]
    # The same model: the same held-out metrics, to the last bit.
    assert failed["eval"] == clean["eval"] and clean["eval"][0]["device"]["auc"] is not None
    for name in ("tables.npz", "mlp.npz"):
        a, b = np.load(tmp_path / "clean" / name), np.load(tmp_path / "failed" / name)
        assert a.files == b.files
        for k in a.files:
            np.testing.assert_array_equal(a[k], b[k], err_msg=f"{name}:{k}")


@pytest.mark.parametrize("staleness, relaxed, registered",
                         [(1, False, False), (8, True, False), (0, True, False), (1, False, True)])
def test_stale_snapshots_and_relaxed_order_recover_consistently(tmp_path, staleness, relaxed,
                                                                registered):
    """With K >= 1 the snapshot may lag (m < D is allowed, D - K <= m); in relaxed
    order batch n+1's records exist before batch n commits. Both recover consistently.
    ``registered``: the boards' register slices (``Config.register_slices`` says what
    they register)."""
    plan = [{"random": True}] * 4 + [{"phase": "recovery"}, {"phase": "snapshot", "offset": 10}]
    config = replace(CONFIG, register_slices=True) if registered else CONFIG
    rec = train("verilator", tmp_path, f"k{staleness}" + "-registered" * registered, config,
                batches=6, staleness=staleness, relaxed=relaxed, failures=plan,
                failure_seed=staleness + 10 * relaxed)
    fails = assert_recovered(rec, 4)
    for f in fails:
        assert f["recovered_batch"] - staleness <= f["recovered_mlp_batch"] <= f["recovered_batch"]


def test_campaign_of_100_failures(tmp_path):
    """The CI-sized campaign: 100 planned failures over K = 0, 1, 8 and both orders."""
    out = tmp_path / "campaign.json"
    code = main(["campaign", "--failures", "100", "--per-run", "10", "--jobs", "2",
                 "--batches", "5", "--seed", "1", "--reproducers", str(tmp_path / "repro"),
                 "--json", str(out)])
    rec = json.loads(out.read_text())
    assert code == 0, rec["run_details"]
    assert rec["runs"] == 10 and rec["failures"] >= 100
    assert rec["inconsistent"] == 0 and rec["lost_commits"] == 0
    assert rec["consistent"] == rec["failures_in_training"]
    assert len(rec["by_config"]) == 6
    assert {"gpu", "update", "lookup"} <= set(rec["by_phase"])


def test_sweep_over_a_batch_and_a_recovery(tmp_path):
    """Every 250th cycle of a batch, and every 150th of a recovery (the full sweep is
    ``trainingcxl sweep``; docs/checkpointing.md, "Power failures in training")."""
    out = tmp_path / "sweep.json"
    code = main(["sweep", "--every", "250", "--recovery-every", "150", "--jobs", "2",
                 "--reproducers", str(tmp_path / "repro"), "--json", str(out)])
    rec = json.loads(out.read_text())
    assert code == 0, rec
    assert rec["inconsistent"] == 0 and rec["bad_runs"] == 0
    assert rec["batch_points"] >= rec["batch_cycles"] // 250
    # The sweep runs 200 cycles past the recovery: the last points land after it.
    assert rec["recovery_points"] - 2 <= rec["failures_during_recovery"] <= rec["recovery_points"]
    assert rec["recovery_sweep_same_result"] is True

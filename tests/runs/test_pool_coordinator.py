"""A training run on a pool of devices, one simulator each (Verilator)."""

import json

import pytest

from trainingcxl.spec.config import Config, PoolShape
from trainingcxl.spec.presets import PRESETS
from trainingcxl.host.apps.launch import launch
from trainingcxl.host.cli import main
from trainingcxl.host.jobs import JobError, TrainJob
from trainingcxl.host.runs.pool_coordinator import run_pool

SAME = ("loss", "loss_ref", "cycles_per_batch", "cycles", "counters", "checks")


def job(cfg, **kw):
    return TrainJob(**{"batches": 3, **kw}, quiet=True, test_samples=0).validated(cfg)


@pytest.mark.slow
@pytest.mark.cocotb
def test_a_pool_of_one_device_is_the_device():
    cfg = PRESETS["tiny"]
    alone = launch(job(cfg), cfg).to_dict()
    pooled = run_pool(job(cfg), cfg.replace(pool=PoolShape(devices=1)), workers=1).to_dict()
    for key in SAME:
        assert pooled[key] == alone[key], key
    assert pooled["golden_match"] and pooled["pool"]["switch_latency"] == 0


@pytest.mark.slow
@pytest.mark.cocotb
def test_a_pool_trains_the_model_of_one_device_whatever_runs_its_simulators():
    cfg = PRESETS["tiny"]
    two = cfg.replace(pool=PoolShape(devices=2))
    alone = launch(job(cfg), cfg).to_dict()
    parallel = run_pool(job(two), two, workers=2).to_dict()
    serial = run_pool(job(two), two, workers=1).to_dict()
    assert parallel["golden_match"] and parallel["pooled_mismatches"] == 0
    assert all(c["tables_match"] for c in parallel["checks"])
    # One GPU trains on both devices' tables: the model of one device, bit for bit.
    assert parallel["loss"] == alone["loss"] and parallel["loss_ref"] == alone["loss_ref"]
    for key in SAME:
        assert serial[key] == parallel[key], key
    assert [d["tables"] for d in parallel["devices"]] == [[1], [0]]
    # The switch is on every device's link.
    assert parallel["pool"]["switch_latency"] == two.pool.switch_latency > 0


@pytest.mark.slow
@pytest.mark.cocotb
@pytest.mark.xdist_group("ray")
def test_a_pool_on_ray_gives_what_it_gives_on_this_machine():
    ray = pytest.importorskip("ray")
    from trainingcxl.host.runs.cluster import RayCluster
    two = PRESETS["tiny"].replace(pool=PoolShape(devices=2))
    here = run_pool(job(two), two).to_dict()
    # One CPU for two devices: each task asks for half of it, so both run at once.
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    try:
        with RayCluster() as cluster:
            there = run_pool(job(two), two, cluster=cluster).to_dict()
    finally:
        ray.shutdown()
    for key in SAME:
        assert there[key] == here[key], key
    assert there["pool"]["where"] == "ray" and there["pool"]["workers"] == 1


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.cocotb
@pytest.mark.xdist_group("ray")
def test_a_pool_reaches_a_ray_head_through_ray_client(tmp_path):
    """``--cluster ray://HOST:PORT`` as installed: a Ray head started on this machine with
    ``ray start`` (its token authentication on, as Ray now starts it where a token
    exists), and the pool's run through Ray Client gives the records of a run here."""
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import tempfile
    import time
    pytest.importorskip("ray.util.client")
    gcs, client = _free_port(), _free_port()
    ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
    # A short folder of its own: Ray's sockets live there, and a socket's path is short.
    temp = tempfile.mkdtemp(prefix="tcxl-ray-", dir="/tmp")
    log = open(tmp_path / "head.log", "w")
    head = subprocess.Popen([ray_bin, "start", "--head", f"--port={gcs}",
                             f"--ray-client-server-port={client}", "--num-cpus=2",
                             f"--temp-dir={temp}", "--include-dashboard=false", "--block"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        args = ["train", "--config", "tiny", "--devices", "2", "--batches", "3", "--quiet"]
        assert main([*args, "--json", str(tmp_path / "here.json")]) == 0
        deadline = time.monotonic() + 120
        while True:                     # the head takes seconds to listen
            try:
                code = main([*args, "--cluster", f"ray://127.0.0.1:{client}",
                             "--json", str(tmp_path / "there.json")])
                break
            except SystemExit as e:
                if "cannot reach" not in str(e) or time.monotonic() > deadline:
                    raise
        assert code == 0
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        head.wait(60)
        log.close()
        shutil.rmtree(temp, ignore_errors=True)
    here, there = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("here", "there"))
    for key in SAME:
        assert there[key] == here[key], key
    assert there["pool"]["where"] == f"ray://127.0.0.1:{client}"


@pytest.mark.slow
@pytest.mark.cocotb
def test_a_pool_with_split_tables_trains_the_model_of_one_device_and_recovers():
    """More devices than tables: each table's rows in ranges over several devices, whose
    pooled parts add up to one device's pooling, bit for bit; a failure of one device is
    recovered exactly."""
    cfg = PRESETS["tiny"]
    four = cfg.replace(pool=PoolShape(devices=4, split=True))
    alone = launch(job(cfg, batches=5, staleness=0), cfg).to_dict()
    rec = run_pool(job(four, batches=5, staleness=0,
                       failures=({"pool_batch": 3, "offset": 200, "devices": [2]},)), four).to_dict()
    assert rec["golden_match"] and rec["consistent"] and len(rec["failures"]) == 1
    assert rec["loss"] == alone["loss"]
    assert sum(len(d["tables"]) for d in rec["devices"]) > cfg.n_tables      # split
    rows = {}
    for d in rec["devices"]:
        for t, (lo, hi) in zip(d["tables"], d["ranges"]):
            rows.setdefault(t, []).append((lo, hi))
    assert {t: sum(hi - lo for lo, hi in r) for t, r in rows.items()} == dict(enumerate(cfg.tables))


#: A whole pool's power failure, one device's, and one device's during the recovery from
#: another's (:func:`trainingcxl.host.protocol.pool.device_failures`).
POOL_FAILURES = ({"pool_batch": 2, "offset": 300}, {"pool_batch": 4, "offset": 100, "devices": [1]},
                 {"pool_batch": 5, "offset": 50, "devices": [0]}, {"after": 150, "devices": [1]})


@pytest.mark.slow
@pytest.mark.cocotb
def test_a_pool_recovers_exactly_from_every_kind_of_failure():
    """K = 0: every device rolls back to the pool's durable batch, bit-exact with its golden
    model, and the run ends where one without failures ends."""
    two = PRESETS["tiny"].replace(pool=PoolShape(devices=2))
    clean = run_pool(job(two, batches=7, staleness=0), two).to_dict()
    rec = run_pool(job(two, batches=7, staleness=0, failures=POOL_FAILURES), two).to_dict()
    assert rec["golden_match"] and rec["consistent"]
    failures = rec["failures"]
    assert [f["devices_failed"] for f in failures] == [[0, 1], [1], [0]]
    assert [f["failures_during_recovery"] for f in failures] == [0, 0, 1]
    for f in failures:
        assert f["recovered_batch"] >= f["durable_before"] and f["consistent"]
        assert len(f["recovery_cycles_per_device"]) == 2
    # A device whose power stayed on rolled back too: to the batch the other one reached.
    assert all(n > 0 for n in failures[1]["rolled_back_per_device"])
    assert [r["d"] for r in rec["pool"]["recoveries"]] == [f["recovered_batch"] for f in failures]
    assert rec["loss"] == clean["loss"] and rec["checks"][-1]["tables_match"]
    for mine, theirs in zip(rec["devices"], clean["devices"]):
        assert mine["final_loss"] == theirs["final_loss"]


@pytest.mark.slow
@pytest.mark.cocotb
def test_train_injects_random_failures_into_a_pool(tmp_path, capsys):
    out = tmp_path / "run.json"
    args = ["train", "--config", "tiny", "--set", "tables=[32,32,32,32]", "--devices", "4",
            "--batches", "5", "--batch-size", "4"]
    assert main([*args, "--inject-failures", "4", "--json", str(out)]) == 0
    rec = json.loads(out.read_text())
    assert rec["golden_match"] and rec["failures"] and rec["failures_planned_left"] == 0
    assert all(f["consistent"] for f in rec["failures"])
    text = capsys.readouterr().out
    assert "devices failed" in text
    # A line of progress per batch the pool trains, as one device's run prints them (the
    # batches after a recovery again).
    assert all(f"batch {b}/5: looked up on every device" in text for b in range(1, 6))
    with pytest.raises(SystemExit, match="use --inject-failures"):
        main([*args, "--fail-at", "100"])


@pytest.mark.slow
@pytest.mark.cocotb
@pytest.mark.parametrize("variant, split", [("cpr", False), ("cpr-mfu", False),
                                            ("cpr-ssu", True)])
def test_a_pool_runs_cprs_partial_recovery_as_the_study_models_it(tmp_path, variant, split):
    """The devices run CPR (checkpoints read from them, a failed device's tables written
    back) and train exactly as the study's golden model of CPR: the same failures, the
    same loss every batch, and not the losses without failures; with split tables too
    (a device checkpoints and reloads its pieces)."""
    from trainingcxl.host.commands.study_pool import pool_golden_run
    from trainingcxl.host.commands.study_runs import workload
    out = tmp_path / "run.json"
    pool = (["--set", "pool.split=true", "--devices", "3"] if split
            else ["--set", "tables=[32,32,32,32]", "--devices", "2"])
    assert main(["train", "--config", "tiny", *pool, "--batches", "12", "--batch-size", "4",
                 "--recovery", variant, "--failure-every", "3", "--pls", "0.5", "--fraction", "0.25", "--quiet",
                 "--json", str(out)]) == 0
    rec = json.loads(out.read_text())
    assert rec["golden_match"] and len(rec["cpr_failures"]) >= 3
    assert all(f["consistent"] for f in rec["cpr_failures"])
    cfg = Config.from_dict(rec["config"])
    wl = workload(cfg, 0, 4)
    _, failures, cps, losses = pool_golden_run(cfg, wl, 12, seed=0, mode=variant,
                                               failure_every=3, pls=0.5, fraction=0.25)
    assert [(b - 1, d) for b, d, _ in failures] == \
        [(f["batch"], f["device"]) for f in rec["cpr_failures"]]
    assert rec["loss"] == losses
    assert rec["cpr"]["rows_read"] == sum(c.rows_saved for c in cps) > 0
    assert rec["loss"] != pool_golden_run(cfg, wl, 12, seed=0, mode=variant, failure_every=0)[3]


def test_a_pool_refuses_failures_it_cannot_plan_and_what_it_does_not_run_yet():
    two = PRESETS["tiny"].replace(pool=PoolShape(devices=2))
    with pytest.raises(JobError, match="a pool's failure is planned at a batch's GPU step"):
        TrainJob(failures=({"at": 100},)).validated(two)
    for args, why in ((["--kill", "3"], "a pool's failures are planned"),
                      (["--pmem-dir", "x"], "keep their media in memory"),
                      (["--devices", "3"], "at most 2 devices")):
        with pytest.raises(SystemExit, match=why):
            main(["campaign", "--devices", "2", "--failures", "2", *args])
    with pytest.raises(JobError, match="system host-pmem"):
        TrainJob(system="host-pmem").validated(two)
    for job, why in ((TrainJob(recovery="cpr"), "is a pool's"),
                     (TrainJob(recovery="cpr-ssu", relaxed=True), "strict order"),
                     (TrainJob(failure_every=5), "planned with --inject-failures"),
                     (TrainJob(recovery="cpr", failures=({"pool_batch": 2},)), "between batches"),
                     (TrainJob(recovery="cpr-mfu", pls=0.9), "portion of lost samples")):
        with pytest.raises(JobError, match=why):
            job.validated(PRESETS["tiny"] if why == "is a pool's" else two)

"""Fan-out engines and journals: a lost worker's task runs again, an interrupted
campaign resumes without running or counting a task twice, and the JSON does not
depend on where or on how many workers the tasks ran."""

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from trainingcxl.host.cli import main
from trainingcxl.host.commands import campaign
from trainingcxl.host.jobs import TrainJob
from trainingcxl.host.protocol.run_record import TrainRecord
from trainingcxl.host.runs.runners import DeviceRunner
from trainingcxl.host.runs.task import Result, Task
from trainingcxl.spec.presets import PRESETS
from trainingcxl.host.runs.cluster import LocalPool, TaskLost, parse_cluster
from trainingcxl.host.runs.journal import Journal, task_digest


# -- journals -------------------------------------------------------------------------------

def test_a_journal_resumes_what_it_holds_and_drops_a_torn_line(tmp_path):
    path = tmp_path / "j.jsonl"
    with Journal(path, "campaign", "abc", resume=False) as j:
        j.add(0, {"ok": 1}, None)
        j.add(2, None, "boom")
        j.add(2, {"ok": 2}, None)               # counted once: the first result stands
    with open(path, "a") as f:
        f.write('{"index": 1, "record": {"ok"')  # the interruption cut this line short
    with Journal(path, "campaign", "abc", resume=True) as j:
        assert j.results() == {0: ({"ok": 1}, None), 2: (None, "boom")}
        j.add(1, {"ok": 3}, None)
    with Journal(path, "campaign", "abc", resume=True) as j:
        assert sorted(j.results()) == [0, 1, 2]
    # Without --resume the journal starts anew.
    with Journal(path, "campaign", "abc", resume=False) as j:
        assert j.results() == {}


def test_a_journal_of_other_tasks_is_refused(tmp_path):
    path = tmp_path / "j.jsonl"
    Journal(path, "campaign", task_digest("campaign", [{"index": 0}]), resume=False).close()
    with pytest.raises(ValueError, match="not the journal of this sweep"):
        Journal(path, "sweep", task_digest("sweep", [{"index": 0}]), resume=True)
    with pytest.raises(ValueError, match="other arguments"):
        Journal(path, "campaign", task_digest("campaign", [{"index": 1}]), resume=True)
    assert task_digest("campaign", [{"index": 0}]) == task_digest("campaign", [{"index": 0}])


class FakeCluster:
    """Yields made-up results, then is interrupted (Ctrl-C) after ``stop_after``."""
    name, workers = "fake", 2

    def __init__(self, stop_after=None):
        self.stop_after, self.ran = stop_after, []

    def run(self, runner, tasks):
        for i, task in enumerate(tasks):
            if i == self.stop_after:
                raise KeyboardInterrupt
            self.ran.append(task.index)
            yield i, Result(task, TrainRecord(batches=task.index, system="cxl", staleness=1,
                                              relaxed=False, checkpointing=True,
                                              gpu_cycles_per_batch=0, golden_match=True))


def test_an_interrupted_fan_out_resumes_without_repeating_a_task(tmp_path, capsys):
    tasks = [Task(i, PRESETS["tiny"], TrainJob(seed=i)) for i in range(5)]
    args = type("Args", (), {"journal": str(tmp_path / "j.jsonl"), "resume": False})()
    with pytest.raises(SystemExit) as stop:
        campaign.run_tasks("campaign", args, FakeCluster(stop_after=3), DeviceRunner(), tasks,
                           lambda r: "")
    assert stop.value.code == 130 and "--resume goes on" in capsys.readouterr().err
    args.resume = True
    again = FakeCluster()
    results, execution = campaign.run_tasks("campaign", args, again, DeviceRunner(), tasks,
                                            lambda r: "")
    assert again.ran == [3, 4] and execution["resumed_tasks"] == 3
    # The journal's records come back typed, as the runs return them.
    assert all(isinstance(r.record, TrainRecord) for r in results)
    assert [r.record.batches for r in results] == [0, 1, 2, 3, 4]
    assert [r.task for r in results] == tasks


def test_a_task_crosses_as_json_and_back():
    task = Task("t1", PRESETS["tiny"], TrainJob(seed=3, failures=({"random": True},)),
                media_dir="/tmp/m", workers=2)
    assert Task.from_dict(json.loads(json.dumps(task.to_dict()))) == task


# -- the local pool ---------------------------------------------------------------------------

def _die_once(item):
    """Kills its own worker the first time it sees ``item``'s marker missing."""
    marker, value = item
    if not os.path.exists(marker):
        Path(marker).touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return value * 2


def _always_die(item):
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_task_whose_worker_dies_runs_again(tmp_path):
    items = [(str(tmp_path / f"m{i}"), i) for i in range(4)]
    got = dict(LocalPool(2).run(_die_once, items))
    assert got == {0: 0, 1: 2, 2: 4, 3: 6}
    lost = dict(LocalPool(1).run(_always_die, [None]))
    assert isinstance(lost[0], TaskLost)


def test_cluster_values():
    assert parse_cluster("ray://head:10001") == "ray://head:10001"
    with pytest.raises(Exception, match="expected local, ray, auto or ray://HOST:PORT"):
        parse_cluster("slurm")


# -- campaigns on the simulator ---------------------------------------------------------------

# The Ray tests share one pytest worker (run.sh distributes by group): two Ray instances
# starting at once on one machine could contend for ports, and they share the reference.

#: A small campaign whose runs last long enough (a second or two) to be killed mid-task.
CAMPAIGN = ["campaign", "--failures", "16", "--per-run", "2", "--batches", "12", "--seed", "5"]


def _campaign(tmp_path, name, *extra):
    out = tmp_path / f"{name}.json"
    code = main([*CAMPAIGN, "--json", str(out), "--journal", str(tmp_path / f"{name}.jsonl"),
                 "--reproducers", str(tmp_path / f"{name}-repro"), *extra])
    rec = json.loads(out.read_text())
    assert code == 0, rec["run_details"]
    # Where and when it ran (the command line, the times) differs by design.
    assert rec.pop("provenance")["command_line"].startswith("trainingcxl campaign")
    return rec, rec.pop("execution")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The campaign on one local worker."""
    return _campaign(tmp_path_factory.mktemp("reference"), "local", "--jobs", "1")


def _task_processes():
    """Ray workers running a task (their process title names it)."""
    found = []
    for pid in os.listdir("/proc"):
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if pid.isdigit() and title.startswith(b"ray::trainingcxl_task"):
            found.append(int(pid))
    return found


@pytest.mark.cocotb
@pytest.mark.slow
@pytest.mark.xdist_group("ray")
def test_a_worker_killed_mid_campaign_on_ray_changes_nothing(reference, tmp_path):
    ray = pytest.importorskip("ray")
    # A Ray instance of the test's own, whatever else runs on the machine.
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    killed = []
    done = threading.Event()

    def kill_one():
        # Once a task has finished, kill a worker that is running another.
        journal = tmp_path / "ray.jsonl"
        while not done.is_set():
            if journal.exists() and len(journal.read_text().splitlines()) >= 2:
                for pid in _task_processes():
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    return
            time.sleep(0.01)
    killer = threading.Thread(target=kill_one)
    killer.start()
    try:
        rec, execution = _campaign(tmp_path, "ray", "--cluster", "ray")
    finally:
        done.set()
        killer.join()
        ray.shutdown()
    assert killed, "no worker was running a task to kill"
    assert execution["cluster"] == "ray" and execution["workers"] == 2
    assert rec == reference[0]


@pytest.mark.cocotb
@pytest.mark.slow
@pytest.mark.xdist_group("ray")
def test_a_resumed_campaign_gives_the_json_of_an_uninterrupted_one(reference, tmp_path, monkeypatch):
    from trainingcxl.host.runs import journal
    added = []
    real_add = journal.Journal.add

    def add_then_stop(self, index, record, error):
        real_add(self, index, record, error)
        added.append(index)
        if len(added) == 3:
            raise KeyboardInterrupt             # Ctrl-C with three runs in the journal
    monkeypatch.setattr(journal.Journal, "add", add_then_stop)
    with pytest.raises(SystemExit) as stop:
        _campaign(tmp_path, "cut", "--jobs", "2")
    assert stop.value.code == 130
    monkeypatch.setattr(journal.Journal, "add", real_add)
    rec, execution = _campaign(tmp_path, "cut", "--jobs", "2", "--resume")
    assert execution["resumed_tasks"] == 3 and execution["tasks"] == rec["runs"] == 8
    assert rec == reference[0]


@pytest.mark.cocotb
@pytest.mark.slow
@pytest.mark.xdist_group("ray")
def test_ray_builds_each_device_once_on_every_node(monkeypatch):
    """A cluster of two nodes (two raylets on this machine), joined as `--cluster auto`
    joins one: each distinct device is built on each node, pinned there, and no more
    often."""
    pytest.importorskip("ray")
    from ray.cluster_utils import Cluster
    from trainingcxl.host.runs.cluster import open_cluster
    from trainingcxl.spec.presets import PRESETS
    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    nodes.add_node(num_cpus=1)
    monkeypatch.setenv("RAY_ADDRESS", nodes.address)
    try:
        tiny = PRESETS["tiny"]
        with open_cluster("auto") as cluster:
            assert cluster.workers == 2
            # A host-side change is the same device: one build a node.
            built = cluster.prebuild([tiny, tiny.with_overrides(["host_pmem.cores=6"])])
    finally:
        nodes.shutdown()
    assert len(built) == 2 and len({node for node, _ in built}) == 2
    assert {digest for _, digest in built} == {tiny.hardware_digest()}

"""Crash campaigns of real processes (``campaign --kill``): ``train --pmem`` started,
killed with SIGKILL at a random wall-clock moment, resumed, again and again.

A task (:func:`run_kills`) owns one media file. Each round starts the training
process (a new run, then ``--resume``), lets it run for a random time and kills
its whole process group. Whatever moment that was (starting up, training,
recovering, replaying the golden model), the next round's process runs
``RECOVER`` on the file and checks the invariants against the golden model
replayed to the durable batch, and as soon as they are checked writes what it
found to a file the round names (the job's ``resume_report``,
:class:`~trainingcxl.host.protocol.hooks.ResumeReport`), which the round reads back
once the process is gone: no result is read from printed text. After
each kill the file is also recovered in software (:func:`trainingcxl.host.pmem.open`):
the durable batch must never fall, and the device's ``RECOVER`` must find the
same one. A last round trains two more batches to the end, unkilled, bit-exact.
"""

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from trainingcxl.host.protocol.run_record import Record, Resumed, TrainRecord
from trainingcxl.host.runs.runners import Runner

__all__ = ["run_kills", "kill_tasks", "KILL_WINDOW_S", "KillsRecord", "KillRound", "KillResume",
           "KillRunner"]

#: A process is killed this many seconds after it starts, drawn uniformly: from the
#: middle of its start-up to well into its training.
KILL_WINDOW_S = (0.5, 6.0)
#: Batches a killed run is asked for: more than it reaches before a kill (a job's batches
#: are all checked against the undo log's size before it starts, so not many more).
_MANY = 1000


@dataclass
class KillResume(Record):
    """What a round's resumed process found on the media: ``RECOVER``'s D and m, whether
    the invariants held, and whether D is the durable batch a software recovery of the
    file found after the kill before (``as_before``)."""
    d: int
    m: int
    consistent: bool
    as_before: bool


@dataclass
class KillRound(Record):
    """One round: the process started (a new run or ``--resume``), killed after
    ``after_s`` (or ended by itself), and the durable batch a software recovery of the
    file found after it (``lost``: lower than before)."""
    round: int
    after_s: float
    killed: bool
    durable_after: int
    lost: bool
    resumed: KillResume = None


@dataclass
class KillsRecord(Record):
    """A media file's rounds, and the last, unkilled run's verdict and resume."""
    rounds: list[KillRound]
    final_golden_match: bool
    final_resumed: Resumed
    durable: int


def _resumed(path):
    """What the round's process wrote as soon as its resume was checked
    (:class:`~trainingcxl.host.protocol.hooks.ResumeReport`), or ``None`` if it was killed
    before."""
    try:
        return Resumed.from_dict(json.loads(Path(path).read_text()))
    except FileNotFoundError:
        return None


def kill_tasks(base, *, kills, per_run, staleness, orders, seed):
    """The tasks of a ``campaign --kill``: ``ceil(kills / per_run)`` media files, each
    killed ``per_run`` times, cycling over the staleness bounds and lookup orders."""
    from trainingcxl.host.jobs import CAMPAIGN_SYSTEM, DEFAULT_SYSTEM, TrainJob
    from trainingcxl.host.runs.task import Task
    cfg = base.replace(relaxed_lookup=False)
    tasks = []
    for i in range(max(1, -(-kills // per_run))):
        relaxed = orders[(i // len(staleness)) % len(orders)] == "relaxed"
        job = TrainJob(seed=seed * 1000 + i, batches=_MANY, staleness=staleness[i % len(staleness)],
                       relaxed=relaxed, system=DEFAULT_SYSTEM if relaxed else CAMPAIGN_SYSTEM,
                       check_every=1000, test_samples=0, quiet=True)
        tasks.append(Task(i, cfg, job, kills=min(per_run, kills - i * per_run)))
    return tasks


def _train(task, folder, **changes):
    """The ``train`` process of a round: the task's job on its media file, with
    ``changes``, through ``--from-json`` (the job itself, not a command line rebuilt
    from it)."""
    run = folder / "run.json"
    job = task.job.replace(pmem=str(folder / "media.pmem"), **changes)
    run.write_text(json.dumps({"config": task.config.to_dict(), "job": job.to_dict()}))
    return [sys.executable, "-m", "trainingcxl.host.cli", "train", "--from-json", str(run),
            "--quiet"]


def _run_for(cmd, seconds):
    """Run ``cmd`` in a process group of its own for ``seconds`` (or until it ends), then
    kill the group with SIGKILL; returns ``(output, killed)``."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        proc.wait(timeout=seconds)
        killed = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        killed = True
    reader.join(timeout=5)
    return "".join(lines), killed


def run_kills(task):
    """One task of a kill campaign (see the module docstring); returns its
    :class:`~trainingcxl.host.runs.task.Result`."""
    from trainingcxl.host import pmem
    from trainingcxl.host.runs.task import Result
    rng = random.Random(task.job.seed)
    rounds, error = [], None
    with tempfile.TemporaryDirectory(prefix="trainingcxl-kill-") as tmp:
        folder = Path(tmp)
        media = folder / "media.pmem"
        report = folder / "resumed.json"
        durable = 0
        for k in range(task.kills):
            report.unlink(missing_ok=True)
            cmd = _train(task, folder, resume=media.exists(), resume_report=str(report))
            delay = rng.uniform(*KILL_WINDOW_S)
            out, killed = _run_for(cmd, delay)
            found = _resumed(report)
            state = pmem.open(media) if media.exists() else None
            after = state.durable if state is not None and state.found else 0
            entry = KillRound(round=k, after_s=round(delay, 3), killed=killed,
                              durable_after=after, lost=after < durable)
            if found is not None:
                entry.resumed = KillResume(
                    d=found.recovered_batch, m=found.recovered_mlp_batch,
                    consistent=found.consistent,
                    # RECOVER on the device found what a software recovery of the file
                    # found after the kill before.
                    as_before=found.recovered_batch == durable)
            elif not killed and error is None:
                error = out[-2000:]     # it ended by itself, before a kill: it failed
            rounds.append(entry)
            durable = max(durable, after)
        # The last round is not killed: two more batches, bit-exact to the end.
        final = folder / "final.json"
        done = subprocess.run([*_train(task, folder, batches=durable + 2, resume=media.exists()),
                               "--json", str(final)],
                              capture_output=True, text=True)
        record = TrainRecord.from_dict(json.loads(final.read_text())) if final.exists() else None
        if done.returncode != 0 and error is None:
            error = (done.stdout + done.stderr)[-2000:]
    return Result(task, KillsRecord(
        rounds=rounds, final_golden_match=bool(record is not None and record.golden_match),
        final_resumed=None if record is None else record.resumed, durable=durable), error)


class KillRunner(Runner):
    """A job's ``train --pmem`` process killed ``task.kills`` times and resumed
    (:func:`run_kills`)."""

    record_class = KillsRecord

    def __call__(self, task):
        return run_kills(task)

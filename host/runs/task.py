"""A task of a fan-out: one job on one configuration, and how it is to run.

Commands read as ``jobs -> tasks -> runner -> records -> report``: a command makes
its jobs (:mod:`trainingcxl.host.jobs`), wraps each in a :class:`Task` with what
the fan-out needs to know (its index, the simulator, where its media and waveform
go), hands the tasks to a runner (:mod:`.runner`) on a cluster, and reports the
:class:`Result`\\ s that come back.
"""

import dataclasses
from dataclasses import dataclass
from typing import Any, NamedTuple

from trainingcxl.spec.config import Config
from trainingcxl.host.jobs import BoardJob, FuzzJob, Job, LookupJob, TrainJob, UpdateJob

__all__ = ["Task", "Result"]

#: The job records a task may carry, by class name (how a task's JSON names its job).
JOB_KINDS = {cls.__name__: cls for cls in (TrainJob, LookupJob, UpdateJob, FuzzJob, BoardJob)}


@dataclass(frozen=True)
class Task:
    """One run of a fan-out: ``job`` on the device built from ``config``.

    ``index`` orders the results and names the run (its journal entry, its media
    file, its reproducer); ``label`` is what the command groups runs by (a
    workload's name); ``top``: what the simulator builds around the device (the
    device's own ports, or a board's top, :func:`~trainingcxl.sim.runner.board_top`).
    ``media_dir``: the run keeps its PMEM media in
    ``media_dir/<index>.pmem``, made anew; ``waves_to``: a path for a waveform;
    ``workers``: a pool's simulators at once; ``kills``: for a killed-and-resumed
    run, how many times its process is killed."""
    index: Any
    config: Config
    job: Job
    sim: str = "verilator"
    top: str = "device"
    label: str = ""
    media_dir: str = None
    waves_to: str = None
    workers: int = None
    kills: int = 0

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    def with_job(self, **changes):
        """This task with its job's fields ``changes`` changed."""
        return self.replace(job=self.job.replace(**changes))

    def to_dict(self):
        """The task as JSON data: what identifies it in a journal."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d.update(config=self.config.to_dict(),
                 job={"kind": type(self.job).__name__, **self.job.to_dict()})
        return d

    @classmethod
    def from_dict(cls, d):
        job = dict(d["job"])
        kind = JOB_KINDS[job.pop("kind")]
        return cls(**{**d, "config": Config.from_dict(d["config"]), "job": kind.from_dict(job)})


class Result(NamedTuple):
    """What a runner returns for a task: its record (``None`` if the run left none)
    and the error that ended it (``None`` if it ended well); a run that failed after
    writing its record returns both."""
    task: Task
    record: Any
    error: str = None

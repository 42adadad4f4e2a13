"""Runners: how a task runs.

A runner is called with a :class:`~.task.Task` in the process that runs it (this
one, a worker of a local process pool or a Ray task: runners are plain objects and
cross to workers by pickling) and returns a :class:`~.task.Result`:

* :class:`DeviceRunner` (here): one device's simulator
  (:func:`~trainingcxl.host.apps.launch.launch`);
* :class:`~.pool_coordinator.PoolRunner`: a pool of devices, a simulator each
  (each a :class:`DeviceRunner`), coupled by a coordinator in this process;
* :class:`~.kills.KillRunner`: ``train --pmem`` processes killed with SIGKILL at
  random moments and resumed from their media file.

:func:`~.choice.runner_for` chooses one; :func:`~.fanout.fan_out` runs many tasks
on a cluster.
"""

from abc import ABC, abstractmethod
from pathlib import Path

from .task import Result

__all__ = ["Runner", "DeviceRunner"]


class Runner(ABC):
    """Runs one task where it is called; :meth:`revive` turns a record kept as JSON (a
    journal's) back into the record the runner returns."""
    #: What the runner's records are: a class with ``from_dict``; ``None``: the task's
    #: job says (its ``record_class``), else they are JSON data.
    record_class = None

    @abstractmethod
    def __call__(self, task):
        """Run ``task`` here; returns its :class:`~.task.Result`."""

    def revive(self, task, data):
        cls = self.record_class or getattr(task.job, "record_class", None)
        return data if data is None or cls is None else cls.from_dict(data)


class DeviceRunner(Runner):
    """A job on one device's simulator. In a worker (the default) its output is captured
    (a worker runs many side by side) and the job is quiet; ``live``: the command's own
    run, its lines on the terminal as they come. With ``task.media_dir``, the run keeps
    its media in a new file there."""

    def __init__(self, record_class=None, live=False):
        self.record_class, self.live = record_class, live

    def __call__(self, task):
        from trainingcxl.host.apps.launch import launch
        from trainingcxl.sim.runner import BenchFailure
        job = task.job
        if hasattr(job, "quiet") and not self.live:
            job = job.replace(quiet=True)
        if task.media_dir:
            job = _with_media_file(job, task)
        try:
            record = launch(job, task.config, sim=task.sim, top=task.top, capture=not self.live,
                            waves=task.waves_to,
                            name=f"{task.index}" if self.live else f"run{task.index}")
            return Result(task, record)
        except BenchFailure as e:
            return Result(task, e.record, str(e))


def _with_media_file(job, task):
    """``job`` keeping its media in a new file of ``task.media_dir``, named by the run."""
    from trainingcxl.host.pmem.media_file import RUN_FIELDS, create
    path = (Path(task.media_dir) / f"{task.index}.pmem").resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    create(path, task.config, {k: getattr(job, k) for k in RUN_FIELDS}, overwrite=True)
    return job.replace(pmem=str(path), overwrite=True)

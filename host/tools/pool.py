"""Training jobs fanned out on a :mod:`~.cluster`, with a progress bar and an optional
:mod:`~.journal`: what campaigns, sweeps and the benchmark run."""

import sys
import time

__all__ = ["run_train", "Progress", "parallel_runs"]


def run_train(spec):
    """One training run of a fan-out in this worker's process: ``spec`` carries the
    configuration and the :class:`~trainingcxl.host.jobs.TrainJob` as dicts (``config``,
    ``job``), and ``waves_to``, a path for a waveform. Returns ``(spec, record or None,
    error text or None)``; a run that failed after writing its record returns both.
    With ``pmem_dir``, the run keeps its PMEM media in ``pmem_dir/<index>.pmem``
    (docs/pmem.md), made anew."""
    from trainingcxl.spec.config import Config
    from trainingcxl.host.apps.launch import launch
    from trainingcxl.host.jobs import TrainJob
    from trainingcxl.sim.runner import BenchFailure
    job = TrainJob.from_dict(spec["job"]).replace(quiet=True)
    config = Config.from_dict(spec["config"])
    if spec.get("pmem_dir"):
        job = _with_media_file(job, config, spec)
    try:
        record = launch(job, config, sim=spec.get("sim", "verilator"),
                        capture=True, waves=spec.get("waves_to"), name=f"run{spec['index']}")
        return spec, record, None
    except BenchFailure as e:
        return spec, e.record, str(e)


def _with_media_file(job, config, spec):
    """``job`` keeping its media in a new file of ``spec["pmem_dir"]``, named by the run."""
    from pathlib import Path
    from trainingcxl.host.pmem.media_file import RUN_FIELDS, create
    path = (Path(spec["pmem_dir"]) / f"{spec['index']}.pmem").resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    create(path, config, {k: getattr(job, k) for k in RUN_FIELDS}, overwrite=True)
    return job.replace(pmem=str(path), overwrite=True)


class Progress:
    """A progress bar on stderr (a line per tenth when stderr is not a terminal)."""

    def __init__(self, total, what):
        self.total, self.what, self.done, self.t0 = total, what, 0, time.monotonic()
        self.base = 0               # steps that took no time (taken from a journal)

    def restart_clock(self):
        """The steps so far took no time: the rate and ETA count from here."""
        self.base, self.t0 = self.done, time.monotonic()

    def step(self, note=""):
        self.done += 1
        width = 30
        filled = width * self.done // max(1, self.total)
        rate = (self.done - self.base) / max(1e-9, time.monotonic() - self.t0)
        eta = (self.total - self.done) / rate if rate else 0
        text = (f"  [{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} {self.what}"
                f"{note}, ETA {eta:4.0f} s ")
        if sys.stderr.isatty():
            print("\r" + text, end="", file=sys.stderr, flush=True)
            if self.done == self.total:
                print(file=sys.stderr)
        elif self.done == self.total or self.done % max(1, self.total // 10) == 0:
            print(text, file=sys.stderr, flush=True)     # a log file gets a line per tenth


def parallel_runs(specs, cluster, progress_note, *, journal=None, fn=None):
    """Run ``specs`` (``run_train`` specs, or ``fn``'s) on ``cluster``; yields ``(spec,
    record, error)`` as they finish. With a :class:`~.journal.Journal`, the tasks it
    holds are yielded from it first and not run again, and each new result is added
    to it before it is yielded."""
    fn = fn or run_train
    done = journal.results() if journal else {}
    todo = [s for s in specs if s["index"] not in done]
    bar = Progress(len(specs), "runs")
    for spec in specs:
        if spec["index"] in done:
            result = (spec, *done[spec["index"]])
            bar.step(progress_note(result))
            yield result
    bar.restart_clock()
    for i, result in cluster.run(fn, todo):
        if isinstance(result, Exception):
            result = (todo[i], None, f"task lost: {result}")
        if journal:
            journal.add(result[0]["index"], result[1], result[2])
        bar.step(progress_note(result))
        yield result

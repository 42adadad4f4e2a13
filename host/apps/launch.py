"""Running a job's application in a simulator and collecting its JSON record: the one
way a command, a campaign's worker or a benchmark starts a simulation."""

import json
import os
import shutil
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

__all__ = ["launch", "app_module", "read_job", "ARGS_JOB", "ARGS_OUT"]

#: Keys of the bench arguments an application receives (:func:`read_job`).
ARGS_JOB, ARGS_OUT = "job", "out"


def app_module(job):
    """The importable module of ``job``'s application."""
    return f"trainingcxl.host.apps.{job.app}"


def read_job(job_class):
    """Inside a simulator: the job the application was started with, and where its
    record goes."""
    from trainingcxl.sim.bench_env import bench_args
    args = bench_args()
    return job_class.from_dict(args[ARGS_JOB]), args[ARGS_OUT]


def launch(job, config, *, sim="verilator", top="device", waves=None, capture=False,
           work_dir=None, name=None):
    """Run ``job`` on the device (or ``top``) built from ``config`` for ``sim`` and
    return its record, typed (:func:`~.job_records.record_class`: a
    :class:`~trainingcxl.host.protocol.run_record.TrainRecord` for training).

    A run that failed raises :class:`~trainingcxl.sim.runner.BenchFailure`; its
    ``record`` is what the run wrote before it failed (a golden mismatch, an
    inconsistent recovery), or ``None``. ``waves``: a path to copy a waveform of
    the run to. ``capture``: the simulator's own output goes to a log whose tail
    ends the error message (for workers running many jobs side by side); else the
    build's and the application's lines go to stderr. ``work_dir``: where the
    simulator's temporary folder goes.
    """
    from trainingcxl.sim.runner import BenchFailure, run_bench, waves_file
    from trainingcxl.host.pmem.media_file import MEDIA_AT
    from .job_records import record_class
    read = record_class(job).from_dict
    # A job's media file (``TrainJob.pmem``) is the simulator's media RAM itself.
    media = getattr(job, "pmem", None)
    kept = {"media": (media, MEDIA_AT)} if media else None
    with tempfile.TemporaryDirectory(prefix="trainingcxl-job-", dir=work_dir) as tmp:
        out = Path(tmp) / "record.json"
        log_path = Path(tmp) / "simulator.log"
        try:
            with _captured(log_path if capture else None):
                run_bench(sim, config, app_module(job), top=top, quiet=True, work_dir=tmp,
                          args={ARGS_JOB: job.to_dict(), ARGS_OUT: str(out)},
                          results_name=name or f"{job.app}-{sim}", waves=waves is not None,
                          kept_rams=kept,
                          log=(lambda text: None) if capture else _to_stderr)
        except BenchFailure as e:
            if capture:
                e.args = (str(e)[-500:] + "\n" + log_path.read_text(errors="replace")[-3000:],)
            e.record = read(json.loads(out.read_text())) if out.exists() else None
            raise
        record = read(json.loads(out.read_text()))
        if waves is not None:
            src = waves_file(sim, config, work_dir=tmp)
            if src.exists():
                Path(waves).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, waves)
                record.waves = str(waves)
    return record


def _to_stderr(text):
    print(text, file=sys.stderr, flush=True)


@contextmanager
def _captured(path):
    """Standard output and error of this process (and the simulator's) into ``path``."""
    if path is None:
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(path, "w") as log_file:
        os.dup2(log_file.fileno(), 1)
        os.dup2(log_file.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])

"""Training jobs fanned out on a :mod:`~.cluster`, with a progress bar and an optional
:mod:`~.journal`: what campaigns, sweeps and the benchmark run."""

import json
import os
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["run_train", "Progress", "parallel_runs"]


def run_train(spec):
    """One training job in its own process; returns ``(spec, record or None, error text)``."""
    from trainingcxl.spec.config import Config
    from trainingcxl.sim.runner import BenchFailure, run_bench
    cfg = Config.from_dict(spec["config"])
    with tempfile.TemporaryDirectory(prefix="trainingcxl-run-") as tmp:
        out = Path(tmp) / "run.json"
        args = {**spec["args"], "out": str(out), "quiet": True}
        error = None
        # The simulator's own output goes to a log, kept for the error message.
        log_path = Path(tmp) / "run.log"
        saved = os.dup(1), os.dup(2)
        with open(log_path, "w") as log_file:
            os.dup2(log_file.fileno(), 1)
            os.dup2(log_file.fileno(), 2)
            try:
                run_bench(spec.get("sim", "verilator"), cfg, "trainingcxl.sim.jobs.job_train",
                          args=args, quiet=True, results_name=f"run{spec['index']}",
                          work_dir=tmp, waves=spec.get("waves", False), log=lambda text: None)
            except BenchFailure as e:
                error = str(e)[-500:]
            finally:
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
                os.close(saved[0])
                os.close(saved[1])
        if error:
            error += "\n" + log_path.read_text(errors="replace")[-3000:]
        record = json.loads(out.read_text()) if out.exists() else None
        if spec.get("waves") and spec.get("waves_to"):
            from trainingcxl.sim.runner import waves_file
            src = waves_file(spec.get("sim", "verilator"), cfg, work_dir=tmp)
            if src.exists():
                Path(spec["waves_to"]).parent.mkdir(parents=True, exist_ok=True)
                Path(spec["waves_to"]).write_bytes(src.read_bytes())
    return spec, record, error


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

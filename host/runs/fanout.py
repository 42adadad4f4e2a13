"""Many tasks on a :mod:`~.cluster`, with a progress bar and an optional
:mod:`~.journal`: what campaigns, sweeps, the benchmark and the study run."""

import sys
import time

from .task import Result

__all__ = ["fan_out", "Progress"]


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


def _as_json(record):
    return record.to_dict() if hasattr(record, "to_dict") else record


def fan_out(runner, tasks, cluster, progress_note=lambda result: "", *, journal=None):
    """Run ``tasks`` with ``runner`` on ``cluster``; yields a :class:`~.task.Result` for
    each as it finishes. With a :class:`~.journal.Journal`, the tasks it holds are
    yielded from it first and not run again, and each new result is added to it
    before it is yielded."""
    done = journal.results() if journal else {}
    todo = [t for t in tasks if t.index not in done]
    bar = Progress(len(tasks), "runs")
    for task in tasks:
        if task.index in done:
            record, error = done[task.index]
            result = Result(task, runner.revive(task, record), error)
            bar.step(progress_note(result))
            yield result
    bar.restart_clock()
    for i, result in cluster.run(runner, todo):
        if isinstance(result, Exception):
            result = Result(todo[i], None, f"task lost: {result}")
        if journal:
            journal.add(result.task.index, _as_json(result.record), result.error)
        bar.step(progress_note(result))
        yield result

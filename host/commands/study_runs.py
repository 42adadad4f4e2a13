"""What ``trainingcxl study`` and ``study --devices`` share: the golden model's runs."""

import dataclasses
from dataclasses import dataclass

from trainingcxl.spec.config import Config
from trainingcxl.host.model.data import SyntheticWorkload, initial_tables
from trainingcxl.host.model.dlrm import FixedPointTrainer, FloatTrainer
from trainingcxl.host.model.history import GoldenHistory
from trainingcxl.host.model.partial import CPR_FRACTION, CPR_PLS

__all__ = ["StudyPoint", "history_at_start", "step", "workload", "result", "run_points"]


@dataclass(frozen=True)
class StudyPoint:
    """One golden-model run of a study: ``mode`` of recovery at staleness ``k`` (the
    pool's study: CPR's ``pls`` and ``fraction``), a failure every ``failure_every``
    batches on average (0: none), ``batches`` of ``batch_size`` from ``seed``, tested on
    ``test_samples`` held-out samples."""
    config: Config
    seed: int
    mode: str
    failure_every: int
    batches: int
    batch_size: int
    test_samples: int
    k: int = 0
    pls: float = CPR_PLS
    fraction: float = CPR_FRACTION

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)


def history_at_start(cfg, seed):
    """The golden model and the float32 reference at batch 0, with their history."""
    tables = initial_tables(cfg, seed=seed)
    return GoldenHistory(FixedPointTrainer(cfg, tables, seed=seed),
                         FloatTrainer(cfg, tables, seed=seed))


def step(history, workload, keep=None):
    """Train the next batch; keep the states of the last ``keep`` batches (None: all).
    Returns the golden model's :class:`~trainingcxl.host.model.dlrm.StepResult`."""
    b = history.head + 1
    want, _ = history.step(b, workload.batch(b - 1))
    history.remember(b)
    if keep is not None:
        history.prune(b - keep)
    return want


def workload(cfg, seed, batch_size):
    """The study's synthetic workload of ``seed``."""
    return SyntheticWorkload(cfg, seed=seed, batch_size=batch_size)


def result(outcome):
    """A run's outcome from a pool of processes, or the error that stops the study."""
    if isinstance(outcome, Exception):
        raise SystemExit(f"error: a study run could not be run: {outcome}")
    return outcome


def run_points(fn, points, jobs):
    """``fn`` on every :class:`StudyPoint`, on ``jobs`` processes of this machine, with a
    progress bar; returns the outcomes (any order)."""
    from trainingcxl.host.runs.cluster import LocalPool
    from trainingcxl.host.runs.fanout import Progress
    outcomes = []
    bar = Progress(len(points), "runs")
    for _, point in LocalPool(jobs).run(fn, points):
        outcomes.append(result(point))
        bar.step()
    return outcomes

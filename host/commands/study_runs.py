"""What ``trainingcxl study`` and ``study --devices`` share: the golden model's runs."""

from trainingcxl.host.model.data import SyntheticWorkload, initial_tables
from trainingcxl.host.model.dlrm import FixedPointTrainer, FloatTrainer
from trainingcxl.host.model.history import GoldenHistory

__all__ = ["history_at_start", "step", "workload", "result", "run_points"]


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


def run_points(fn, specs, jobs):
    """``fn`` on every spec, on ``jobs`` processes of this machine, with a progress bar;
    returns the outcomes (any order)."""
    from trainingcxl.host.tools.cluster import LocalPool
    from trainingcxl.host.tools.pool import Progress
    points = []
    bar = Progress(len(specs), "runs")
    for _, point in LocalPool(jobs).run(fn, specs):
        points.append(result(point))
        bar.step()
    return points

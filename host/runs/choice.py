"""Which runner runs a job: chosen once, from the configuration and the job."""

from .kills import KillRunner
from .pool_coordinator import PoolRunner
from .runners import DeviceRunner

__all__ = ["runner_for"]


def runner_for(config, job, *, kills=False, live=False, where="local"):
    """The runner of ``job`` on ``config``: a killed-and-resumed process's with
    ``kills``, a pool's when the configuration has several devices (its simulators
    ``where`` ``--cluster`` says), one device's else. ``live``: the command's own run,
    in its process, its lines on the terminal (else a worker's, quiet)."""
    if kills:
        return KillRunner()
    record_class = getattr(job, "record_class", None)
    if config.pool.devices > 1:
        return PoolRunner(record_class, live=live, where=where)
    return DeviceRunner(record_class, live=live)

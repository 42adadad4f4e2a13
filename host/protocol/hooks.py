"""What a kind of run adds to the training loop, at named points of a batch.

:class:`~.training.TrainingRun` knows one device's protocol. A run that is more than
that (a device of a pool, :mod:`.pool_member`; CPR's partial checkpoints, :mod:`.cpr`)
is given as :class:`RunHooks` objects, which the loop calls at these points in the
order given:

* ``attach(run)``: once, when the run is made (what the record holds from the start);
* ``initial_tables(run)``: at power-up on empty media, the tables this run trains and
  the tables of the model they are (``own``), or ``None`` for the configuration's own;
* ``started(run)``: the device is formatted and batch 0 committed, before the run's
  counters start;
* ``resume_checked(run, resumed)``: a run resumed on media an earlier process left has
  checked what ``RECOVER`` found there (a :class:`~.run_record.Resumed`), consistent or
  not, before it goes on (or stops);
* ``before_batch(run, b)``: before batch ``b``'s lookup;
* ``after_lookup(run, b, batch, looked)``: the device's pooled vectors are in, before
  any model steps; may return the gathered inputs ``((golden, reference) own inputs,
  (golden, reference) all inputs, device all inputs)`` the models step on;
* ``after_commit(run, b, batch)``: batch ``b`` is trained and its checkpoint submitted;
* ``durable_floor(run)``: the oldest durable batch a recovery may fall back to, if this
  hook knows an older one than the device's (the golden history is kept from there);
* ``power_failure(run)``: the power failed; a hook that recovers in its own way does it
  and returns the batch to resume at (else ``None``: the device's own recovery);
* ``resumed(run, d, m)``: the run resumes from batch ``d`` with the MLP of ``m``;
* ``finished(run, record)``: the run has ended; what the record adds.

A hook that returns a value (``initial_tables``, ``after_lookup``, ``power_failure``):
the first that returns one is taken.
"""

__all__ = ["RunHooks", "ResumeReport"]


class RunHooks:
    """Base of the hooks: every point does nothing."""

    def attach(self, run):
        pass

    def initial_tables(self, run):
        return None

    async def started(self, run):
        pass

    def resume_checked(self, run, resumed):
        pass

    async def before_batch(self, run, b):
        pass

    async def after_lookup(self, run, b, batch, looked):
        return None

    async def after_commit(self, run, b, batch):
        pass

    def durable_floor(self, run):
        return None

    async def power_failure(self, run):
        return None

    def resumed(self, run, d, m):
        pass

    def finished(self, run, record):
        pass


class ResumeReport(RunHooks):
    """Writes what a resumed run found on its media (:class:`~.run_record.Resumed`) as JSON to
    ``path`` as soon as it is checked: how a process that may be killed any moment
    later tells what its resume found (a kill campaign, :mod:`trainingcxl.host.runs.kills`)."""

    def __init__(self, path):
        self.path = path

    def resume_checked(self, run, resumed):
        import json
        import os
        tmp = f"{self.path}.tmp"
        with open(tmp, "w") as f:
            json.dump(resumed.to_dict(), f)
        os.replace(tmp, self.path)       # whole or absent, whenever the process is killed

"""The host's clock and power failures for a :class:`~fake_device.FakeDevice`, under asyncio.

:class:`FakeRuntime` and :class:`FakeFailures` are what
:class:`~trainingcxl.host.protocol.training.TrainingRun` is given in place of the
simulator's (:mod:`trainingcxl.host.protocol.timed`): modelled time is the fake
device's clock, and a failure is a cycle on that clock, armed when the host
enters a phase or just after it submits a descriptor.
"""

import asyncio

from fake_device import PowerLost

__all__ = ["FakeRuntime", "FakeFailures"]


class FakeRuntime:
    """Modelled host time passes on the device's clock; work spawned beside the loop (the
    next batch's relaxed lookup) runs as an asyncio task."""

    overlaps = True
    clocked = True

    def __init__(self, device):
        self.device = device
        self.tasks = set()

    def now(self):
        return self.device.clock

    async def wait(self, cycles):
        await asyncio.sleep(0)          # what was spawned runs first, beside this wait
        self.device.advance(cycles)

    def spawn(self, coro):
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        return task

    def cancel_all(self):
        for task in self.tasks:
            task.cancel()
        self.tasks.clear()


class FakeFailures:
    """Power failures, one after the other; each entry is armed once the one before struck.

    * ``{"phase": P, "batch": b, "offset": k}``: ``k`` cycles after the host enters
      phase ``P`` (of batch ``b``, if given; ``recovery`` too);
    * ``{"submit": P, "batch": b}``: just after the host submits the descriptor of
      phase ``P`` of batch ``b``, before the device runs it.
    """

    cause = None

    def __init__(self, device, entries=()):
        self.device = device
        self.entries = list(entries)
        self.target = None

    @property
    def pending(self):
        return len(self.entries)

    def armed(self):
        return self.device.fail_at is not None

    def _arm(self, offset):
        self.entries.pop(0)
        self.target = self.device.clock + offset
        self.device.strike_at(self.target)

    def on_phase(self, phase, batch, **_):
        if self.entries and not self.armed():
            e = self.entries[0]
            if e.get("phase") == phase and e.get("batch", batch) == batch:
                self._arm(e.get("offset", 0))

    def on_pool_step(self, batch, t):
        """A pool's GPU step begins (failures of a pool are not planned here)."""

    async def after_submit(self, run, phase, batch):
        if self.entries and not self.armed():
            e = self.entries[0]
            if e.get("submit") == phase and e.get("batch", batch) == batch:
                self._arm(0)

    async def race(self, run, coro):
        try:
            return True, await coro
        except PowerLost:
            return False, None

    async def cut(self, run):
        run.runtime.cancel_all()
        await run.device.power_fail()
        run.device.forget_host_memory()

    def cancel(self):
        self.device.strike_at(None)

    async def start(self, run):
        """Nothing to read before the run."""

    async def before_batch(self, run, batch):
        """The clock, not the host, decides when the power fails."""

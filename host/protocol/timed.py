"""A training run in simulated time: the host's clock is the simulator's, and power
failures strike at planned cycles (cocotb).

:class:`SimRuntime` lets the protocol (:mod:`.training`) charge modelled host time
(GPU steps, copies) and overlap work; :class:`FailurePlan` cuts the power at
chosen moments while the training runs as a task beside it.
"""

import os
import random
import signal

import cocotb
from cocotb.triggers import Event, First, Timer
from cocotb.utils import get_sim_time

from trainingcxl.sim.bench_env import PERIOD_NS

__all__ = ["SimRuntime", "FailurePlan", "now"]


def now():
    """Simulation time in device cycles since the start."""
    return int(get_sim_time("ns")) // PERIOD_NS


class SimRuntime:
    """The host's time is modelled: a wait of ``cycles`` lets the simulated device run on,
    and work (the next batch's relaxed lookup) can run beside the training loop."""

    overlaps = True
    #: ``now`` reads the device's clock: cycle counts mean something.
    clocked = True

    def __init__(self):
        self.tasks = set()

    now = staticmethod(now)

    async def wait(self, cycles):
        if cycles > 0:
            await Timer(cycles * PERIOD_NS, "ns")

    def spawn(self, coro):
        task = cocotb.start_soon(coro)
        self.tasks.add(task)
        return task

    def cancel_all(self):
        for task in list(self.tasks):
            task.cancel()
        self.tasks.clear()


class FailurePlan:
    """Power failures to inject, one after the other.

    Entries (dicts), each armed once the one before has fired:

    * ``{"at": C}``: at simulation cycle ``C`` (or at once, if that is past);
    * ``{"batch": b, "offset": k}``: ``k`` cycles after the host starts batch ``b``
      (the next time it does, so a batch re-run after a recovery can be hit again);
    * ``{"next_batch": True, "offset": k}``: ``k`` cycles after the host starts
      its next batch, whichever it is (sweeps over the cycles of a batch);
    * ``{"phase": P, "offset": k, "batch": b}``: ``k`` cycles after the host
      enters phase ``P`` (of batch ``b``, if given); ``offset`` left out draws
      it from the phase's last length;
    * ``{"random": True}``: a cycle drawn so that the remaining random
      failures spread over the rest of the run;
    * ``{"pool_batch": b, "offset": k}`` (a device of a pool): ``k`` cycles after the
      pool's GPU step of batch ``b`` (``"next"``: of the next batch, or with ``"skip":
      n`` of the one n batches later) begins, the same cycle on every device (the
      next time it does);
    * ``{"after": k}``: ``k`` cycles after the failure before it struck (a failure
      during the recovery from it).

    An entry with ``"kill": True`` kills the simulator's process (``SIGKILL``) at
    its cycle instead of cutting the power; one with ``"halt": True`` (a device of a
    pool whose power stays on while another device's fails) stops the host's work
    with the device at its cycle, and the pool's recovery follows.
    """

    def __init__(self, entries, seed=0):
        self.entries = [dict(e) for e in entries]      # (a pool's "skip" counts down)
        self.rng = random.Random(seed)
        self.fired = Event()
        self.target = None
        self.halted = False             # the failure that struck only stopped the host
        self._timer = None

    @property
    def pending(self):
        return len(self.entries)

    def _schedule(self, cycle):
        self.target = max(cycle, now() + 1)
        entry = self.entries.pop(0)
        kill, self.halted = entry.get("kill", False), entry.get("halt", False)

        async def wait():
            await Timer((self.target - now()) * PERIOD_NS, "ns")
            if kill:        # the host dies; a media file keeps what reached the media
                os.kill(os.getpid(), signal.SIGKILL)
            self.fired.set()
        self._timer = cocotb.start_soon(wait())

    def armed(self):
        return self._timer is not None

    def on_phase(self, phase, batch, *, phase_len, batch_cycles, batches_left):
        """The host entered ``phase`` of ``batch``: arm the next entry if it waits for this."""
        if not self.entries or self.armed():
            return
        e = self.entries[0]
        if "pool_batch" in e:
            return                              # armed by :meth:`on_pool_step`
        if "after" in e:
            self._schedule(self.target + e["after"])
        elif "at" in e:
            self._schedule(e["at"])
        elif "random" in e:
            if batch_cycles is None:
                return                          # the first batch's length sets the pace
            random_left = sum(1 for x in self.entries if "random" in x)
            span = max(2, 2 * batch_cycles * max(1, batches_left) // (random_left + 1))
            self._schedule(now() + self.rng.randint(1, span))
        elif "next_batch" in e:
            if phase == "lookup":
                self._schedule(now() + e["offset"])
        elif "batch" in e and "phase" not in e:
            if phase == "lookup" and batch == e["batch"]:
                self._schedule(now() + e["offset"])
        elif e.get("phase") == phase and e.get("batch", batch) == batch:
            offset = e.get("offset")
            if offset is None:
                offset = self.rng.randint(0, max(1, phase_len.get(phase, 100)))
            self._schedule(now() + offset)

    def on_pool_step(self, batch, cycle):
        """A device of a pool: the pool's GPU step of ``batch`` begins at ``cycle``."""
        e = self.entries[0] if self.entries and not self.armed() else {}
        if e.get("pool_batch") in (batch, "next"):
            if e.get("skip", 0):
                e["skip"] -= 1
            else:
                self._schedule(cycle + e["offset"])

    def acknowledge(self):
        """The failure that fired has been dealt with: the next entry may arm."""
        if self.fired.is_set():
            self._timer = None
            self.fired.clear()

    def cancel(self):
        """The run is over: a failure still waiting will not come."""
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None

    # -- the failure source of a training run (see :mod:`.training`) -----------------------

    @property
    def cause(self):
        return None

    async def race(self, run, coro):
        """Run ``coro`` until it ends or a failure fires; ``(True, result)`` or ``(False, None)``."""
        task = run.runtime.spawn(coro)
        await First(task.complete, self.fired.wait())
        if task.done():
            return True, task.result()          # re-raises what went wrong
        return False, None

    async def cut(self, run):
        """The failure fired: cut the power (the running tasks die with it), or on a
        device of a pool that keeps its power, stop the host's work with it."""
        self.acknowledge()
        run.runtime.cancel_all()
        if self.halted:
            return
        await run.device.power_fail()
        run.device.forget_host_memory()

    async def start(self, run):
        """Planned cycles need nothing from the device before the run."""

    async def before_batch(self, run, batch):
        """The timer, not the host, decides when the power fails."""

    async def after_submit(self, run, phase, batch):
        """The timer, not the host, decides when the power fails."""

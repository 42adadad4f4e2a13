"""Training on a board: the one protocol (:mod:`.training`) with a board's failures.

A board (or the simulated board top) is driven through its UART bridge; the
protocol is the simulated device's, in strict order, with the golden model
beside it. A board whose device has no update engine (``Config.blocks``, the
small board) trains too: the lookup engine pools and the host applies each
batch's update over CXL.mem (:data:`~.systems.LOOKUP_ONLY`); nothing is
checkpointed there, so power failures are refused.

Power failures come from planned ``POWER_FAIL`` commands and from the button.

The host of a board does not see the device's clock, so a planned failure is a
``(batch, phase)``: the host sends ``POWER_FAIL`` just after submitting that
phase's descriptor of that batch (once). The button may cut the power at any
moment; the host notices from the bridge (``POWER_LOST``), from a descriptor
that fails or never completes, or from the bridge's failure counters, which it
reads at the start of every batch.
"""

from trainingcxl.spec.bridge_protocol import Status
from trainingcxl.spec.registers import REG
from trainingcxl.host.driver.bridge import BridgeError
from .phases import BOARD_PHASES
from .systems import CAMPAIGN_SYSTEM, LOOKUP_ONLY, SYSTEMS
from .training import TrainingRun, progress

__all__ = ["PowerLost", "BoardFailures", "UntimedRuntime", "board_training", "BOARD_COUNTERS"]

#: The counters a board run reads (each read is a frame over the UART).
BOARD_COUNTERS = (REG.CYCLES, REG.PMEM_READS, REG.PMEM_WRITES, REG.CACHE_READS, REG.CACHE_WRITES,
                  REG.LOG_RECORDS, REG.RECOVER_CYCLES, REG.MEDIA_LATE)


class PowerLost(Exception):
    """The device lost power (command or button); the batch in progress is gone."""


class UntimedRuntime:
    """The host's time is real time: nothing is modelled and nothing overlaps, so a board
    trains in strict order (:class:`~.training.TrainingRun` refuses relaxed order here)."""

    #: Work cannot run beside the training loop: there is no ``spawn``.
    overlaps = False
    #: There is no device clock to read: cycle counts are not reported.
    clocked = False

    @staticmethod
    def now():
        """No simulated clock to read: phase times and cycle counts stay 0."""
        return 0

    async def wait(self, cycles):
        """Modelled GPU and copy time is not charged: the board's real time passes instead."""

    def cancel_all(self):
        """Nothing runs beside the training loop, so nothing is left to cancel."""


class BoardFailures:
    """The failure source of a training run on a board (see :mod:`.training`)."""

    target = None

    def __init__(self, failures=(), *, batches):
        """``failures``: ``(batch, phase)`` pairs, checked against :data:`BOARD_PHASES`."""
        for batch, phase in failures:
            if phase not in BOARD_PHASES:
                raise ValueError(f"a board failure phase is one of {', '.join(BOARD_PHASES)}, "
                                 f"not {phase!r}")
            if not 1 <= batch <= batches:
                raise ValueError(f"failure batch {batch} is outside 1..{batches}")
        self.planned = sorted(failures)
        self.cause = None
        self._seen = None

    @property
    def pending(self):
        return len(self.planned)

    def armed(self):
        return False

    def on_phase(self, *args, **kwargs):
        """Failures here are tied to descriptors (:meth:`after_submit`), not to phase times."""

    def cancel(self):
        """Nothing is armed: a planned failure left over simply never happens."""

    async def _count(self, run):
        st = await run.device.bridge.state()
        return st["command_power_fails"] + st["button_power_fails"]

    async def start(self, run):
        self._seen = await self._count(run)

    async def before_batch(self, run, batch):
        count = await self._count(run)
        if count != self._seen:
            raise PowerLost("the board's button")

    async def after_submit(self, run, phase, batch):
        if (batch, phase) in self.planned:
            self.planned.remove((batch, phase))
            await run.device.power_fail()
            raise PowerLost(f"POWER_FAIL command in {phase} of batch {batch}")

    async def race(self, run, coro):
        """Run ``coro``; a power failure from anywhere ends it: ``(False, None)``."""
        try:
            return True, await coro
        except PowerLost as e:
            self.cause = str(e)
        except BridgeError as e:
            if e.status != Status.POWER_LOST:
                raise
            self.cause = "the board's button"
        except (RuntimeError, TimeoutError):
            # A descriptor refused or never completed: a button press explains it.
            if await self._count(run) == self._seen:
                raise
            self.cause = "the board's button"
        return False, None

    async def cut(self, run):
        """The power is already gone; count this failure as seen."""
        self._seen = await self._count(run)
        run.device.submitted = 0


def board_training(device, data, *, batches, seed=0, staleness=0, failures=(), log=progress,
                   failure_source=None):
    """A :class:`~.training.TrainingRun` on a board's ``device``
    (:class:`~trainingcxl.host.driver.bridge.BoardDevice`). ``failures``: ``(batch, phase)``
    pairs, each a ``POWER_FAIL`` just after that phase's descriptor of that batch."""
    cfg = device.config
    checkpointing = "checkpoint" in cfg.blocks
    if failures and not checkpointing:
        raise ValueError("this device has no checkpoint engine: it cannot survive power "
                         "failures (train without them, or on a board with the full device)")
    source = failure_source or BoardFailures(failures, batches=batches)
    return TrainingRun(device, data, system=SYSTEMS[CAMPAIGN_SYSTEM] if "update" in cfg.blocks else LOOKUP_ONLY,
                       runtime=UntimedRuntime(), failures=source, batches=batches, seed=seed,
                       staleness=staleness, check_every=batches, log=log,
                       checkpointing=checkpointing, counters=BOARD_COUNTERS)

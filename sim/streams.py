"""Generic cocotb stream source, sink and monitor for Amaranth ``stream`` ports.

A port ``foo`` of the top-level appears as ``foo__valid``, ``foo__ready`` and
``foo__payload``. Every model samples handshakes in the read-only phase just
before the clock edge, and sleeps (no per-cycle callbacks) while it has nothing
to do, so the RTL runs alone between transactions.

Backpressure and gaps come from ``pause``: an iterator of booleans, one per
cycle, ``True`` meaning "hold off this cycle" (see :func:`random_pauses`).
"""

import collections
import random

import cocotb
import cocotb.utils
from cocotb.triggers import Event, ReadOnly, RisingEdge, SimTimeoutError, ValueChange, with_timeout

from .layouts import pack, unpack

__all__ = ["random_pauses", "wait_or_fail", "sample_bit", "stream_signals", "StreamSource", "StreamSink", "StreamMonitor"]


async def wait_or_fail(trigger, timeout_ns, message):
    """Await ``trigger``; if ``timeout_ns`` pass first, raise :class:`TimeoutError`
    with ``message`` (a string, or a function called then for the current state)."""
    try:
        return await with_timeout(trigger, timeout_ns, "ns")
    except SimTimeoutError:
        raise TimeoutError(message() if callable(message) else message) from None


def random_pauses(probability, seed=0):
    """An endless pause pattern: hold off with the given probability each cycle."""
    rng = random.Random(seed)
    while True:
        yield rng.random() < probability


def sample_bit(handle, what):
    """The one-bit ``handle`` as a bool; fails if it is X or Z (``what`` says when)."""
    value = handle.value
    if not value.is_resolvable:
        raise AssertionError(f"{handle._name} is {value} while sampling {what}")
    return bool(value)


def stream_signals(dut, prefix):
    """``(valid, ready, payload)`` of the top-level stream port ``prefix``."""
    try:
        return (getattr(dut, f"{prefix}__valid"), getattr(dut, f"{prefix}__ready"),
                getattr(dut, f"{prefix}__payload"))
    except AttributeError:
        raise AttributeError(f"the top-level has no stream port {prefix!r}") from None


class StreamSource:
    """Drives a stream into the DUT from a queue of payloads (dicts, ints or enum members)."""

    def __init__(self, dut, prefix, shape, clock, *, pause=None):
        self.valid, self.ready, self.payload = stream_signals(dut, prefix)
        self.shape, self.clock, self.pause = shape, clock, pause
        self.queue = collections.deque()
        self.sent = 0
        self._wake = Event()
        self._idle = Event()
        self._idle.set()
        self.valid.value = 0
        # A defined payload from time 0: Icarus would otherwise carry X into
        # logic that decodes the payload before valid is ever raised.
        self.payload.value = 0
        self._task = cocotb.start_soon(self._run())

    def send_nowait(self, payload, on_sent=None):
        """Queue ``payload``; ``on_sent()`` is called once the DUT has taken it."""
        self.queue.append((pack(self.shape, payload), on_sent))
        self._idle.clear()
        self._wake.set()

    async def wait_idle(self, timeout_ns=10_000_000):
        """Wait until the DUT took everything queued; fail after ``timeout_ns``."""
        await wait_or_fail(self._idle.wait(), timeout_ns,
                           lambda: f"stream source: {len(self.queue)} payloads not taken "
                                   f"within {timeout_ns} ns")

    def kill(self):
        self._task.cancel()

    async def _run(self):
        edge = RisingEdge(self.clock)
        offering = False
        while True:
            if not self.queue:
                offering = False
                self.valid.value = 0
                self._idle.set()
                self._wake.clear()
                await self._wake.wait()
                # Present right after a clock edge, like the RTL would.
                await edge
            # A pause may only delay an offer: once valid is up it stays up
            # with the same payload until the DUT takes it (the stream rule).
            if not self.queue:              # cleared while we waited (power failure)
                offering = False
                continue
            hold = not offering and self.pause is not None and next(self.pause)
            item = self.queue[0]
            if hold:
                self.valid.value = 0
            else:
                self.payload.value = item[0]
                self.valid.value = 1
            await ReadOnly()
            taken = not hold and sample_bit(self.ready, 'a handshake')
            offering = not hold and not taken
            await edge
            # The queue may have been cleared meanwhile (power failure).
            if taken and self.queue and self.queue[0] is item:
                self.queue.popleft()
                self.sent += 1
                if item[1] is not None:
                    item[1]()
            elif self.queue and self.queue[0] is not item:
                offering = False


class StreamSink:
    """Takes payloads from a DUT stream, optionally with backpressure.

    ``callback`` (if given) is called with each decoded payload; otherwise
    payloads queue up for :meth:`recv`.
    """

    def __init__(self, dut, prefix, shape, clock, *, pause=None, callback=None):
        self.valid, self.ready, self.payload = stream_signals(dut, prefix)
        self.shape, self.clock, self.pause = shape, clock, pause
        self.callback = callback
        self.queue = collections.deque()
        self.received = 0
        self._got = Event()
        self.ready.value = 0 if pause is not None else 1
        self._task = cocotb.start_soon(self._run())

    async def recv(self, timeout_ns=10_000_000):
        """The next payload; fail after ``timeout_ns`` without one."""
        while not self.queue:
            self._got.clear()
            await wait_or_fail(self._got.wait(), timeout_ns,
                               f"stream sink: nothing received within {timeout_ns} ns")
        return self.queue.popleft()

    def kill(self):
        self._task.cancel()

    async def _run(self):
        edge = RisingEdge(self.clock)
        while True:
            hold = self.pause is not None and next(self.pause)
            self.ready.value = 0 if hold else 1
            await ReadOnly()
            if not hold and not sample_bit(self.valid, 'a handshake'):
                # Nothing offered: sleep until something is.
                if self.pause is None:
                    await ValueChange(self.valid)
                    await ReadOnly()
                    if not sample_bit(self.valid, 'a handshake'):
                        await edge
                        continue
                else:
                    await edge
                    continue
            fire = not hold and sample_bit(self.valid, 'a handshake')
            raw = int(self.payload.value) if fire else None
            await edge
            if fire:
                self.received += 1
                item = unpack(self.shape, raw)
                if self.callback is not None:
                    self.callback(item)
                else:
                    self.queue.append(item)
                    self._got.set()


class StreamMonitor:
    """Watches a stream without driving it.

    Records every transfer (to ``callback`` or the ``transfers`` count) and
    checks the stream rule the RTL promises: once ``valid`` is raised, it stays
    high and the payload stays the same until ``ready`` takes it. Breaches are
    collected in ``violations`` for the bench to assert on.
    """

    def __init__(self, dut, prefix, shape, clock, *, callback=None):
        self.prefix = prefix
        self.valid, self.ready, self.payload = stream_signals(dut, prefix)
        self.shape, self.clock, self.callback = shape, clock, callback
        self.transfers = 0
        self.violations = []
        self._task = cocotb.start_soon(self._run())

    def kill(self):
        self._task.cancel()

    async def _run(self):
        edge = RisingEdge(self.clock)
        held = None
        while True:
            await ReadOnly()
            valid = sample_bit(self.valid, "a monitored stream")
            if held is not None and (not valid or int(self.payload.value) != held):
                self.violations.append(
                    f"{self.prefix}: {'valid dropped' if not valid else 'payload changed'} "
                    f"before ready at {cocotb.utils.get_sim_time('ns')} ns")
            if not valid:
                held = None
                await ValueChange(self.valid)
                continue
            raw = int(self.payload.value)
            ready = sample_bit(self.ready, "a monitored stream")
            await edge
            if ready:
                held = None
                self.transfers += 1
                if self.callback is not None:
                    self.callback(unpack(self.shape, raw))
            else:
                held = raw

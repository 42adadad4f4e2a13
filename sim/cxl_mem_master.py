"""CXL.mem host master: issues reads and writes to device memory, matches responses by tag."""

import collections
from asyncio import CancelledError

import cocotb
from cocotb.triggers import Event

from trainingcxl.spec.cxl_messages import (M2SReq, M2SReqOpcode, M2SRwD, M2SRwDOpcode, S2MDrs,
                                           S2MNdr, TAG_BITS)
from .streams import StreamSink, StreamSource, wait_or_fail

__all__ = ["CxlMemMaster", "ProtocolError"]

FULL_BE = (1 << 64) - 1


class ProtocolError(AssertionError):
    """The device answered something the host never asked for."""


class CxlMemMaster:
    """Host side of CXL.mem. Any number of requests may be outstanding (up to ``max_tags``).

    Responses are matched by tag and may come in any order. Every wait is
    bounded by ``timeout_ns`` and fails with a clear message.
    """

    def __init__(self, dut, clock, *, prefix="cxl_mem", max_tags=64, pause=None, gaps=None,
                 timeout_ns=2_000_000):
        """``pause``: backpressure on the responses; ``gaps``: a pause pattern between requests."""
        self.req = StreamSource(dut, f"{prefix}__m2s_req", M2SReq, clock, pause=gaps)
        self.rwd = StreamSource(dut, f"{prefix}__m2s_rwd", M2SRwD, clock, pause=gaps)
        self.ndr = StreamSink(dut, f"{prefix}__s2m_ndr", S2MNdr, clock, pause=pause,
                              callback=self._on_rsp)
        self.drs = StreamSink(dut, f"{prefix}__s2m_drs", S2MDrs, clock, pause=pause,
                              callback=self._on_rsp)
        self.max_tags = min(max_tags, 1 << TAG_BITS)
        self.timeout_ns = timeout_ns
        self._free = collections.deque(range(self.max_tags))
        self._waiters = collections.deque()
        self._issued = 0
        self._newest_answered = -1
        self.overtaken = 0
        self._pending = {}
        self._raw = None                # (tags, responses, count wanted, event) of exchange()
        self._workers = set()
        self.errors = []

    def _on_rsp(self, rsp):
        if self._raw is not None and rsp.tag in self._raw[0]:
            self._raw[1].append(rsp)
            if len(self._raw[1]) >= self._raw[2]:
                self._raw[3].set()
            return
        entry = self._pending.pop(rsp.tag, None)
        if entry is None:
            self.errors.append(f"response for tag {rsp.tag} that is not outstanding: {rsp!r}")
            return
        if entry[0] is None:            # the host stopped waiting: the tag is free again
            self._release(rsp.tag)
            return
        entry[1].append(rsp)
        entry[0].set()

    async def _transact(self, source, payload, what):
        if not self._free:
            # Wait in line: a freed tag wakes exactly one waiter.
            turn = Event()
            self._waiters.append(turn)
            try:
                await wait_or_fail(turn.wait(), self.timeout_ns,
                                   f"CXL.mem {what}: no tag came free within "
                                   f"{self.timeout_ns} ns (responses stopped)")
            except CancelledError:      # the tag freed for this waiter goes to the next
                if turn.is_set() and self._waiters:
                    self._waiters.popleft().set()
                elif turn in self._waiters:
                    self._waiters.remove(turn)
                raise
        tag = self._free.popleft()
        done, box = Event(), []
        self._pending[tag] = (done, box)
        seq = self._issued
        self._issued += 1
        source.send_nowait({**payload, "tag": tag})
        try:
            await wait_or_fail(done.wait(), self.timeout_ns,
                               f"CXL.mem {what} (tag {tag}) got no response within "
                               f"{self.timeout_ns} ns")
        except CancelledError:
            # The host stopped (a device of a pool halted while another's power failed):
            # the device still answers, and its answer frees the tag.
            if done.is_set():
                self._release(tag)
            else:
                self._pending[tag] = (None, None)
            raise
        self._release(tag)
        # Count answers that overtook a request issued before them.
        if seq < self._newest_answered:
            self.overtaken += 1
        self._newest_answered = max(self._newest_answered, seq)
        return box[0]

    def _release(self, tag):
        self._free.append(tag)
        if self._waiters:
            self._waiters.popleft().set()

    def forget_outstanding(self):
        """Drop every outstanding request (after a power failure nothing will answer them)."""
        for w in list(self._workers):
            w.cancel()
        self._workers.clear()
        self._pending.clear()
        self._waiters.clear()
        self._free = collections.deque(range(self.max_tags))
        self.req.queue.clear()
        self.rwd.queue.clear()

    def free_tag(self, rng):
        """A tag no request holds, drawn with ``rng`` (for :meth:`exchange`)."""
        if not self._free:
            raise ValueError("every tag is in use")
        return rng.choice(list(self._free))

    async def exchange(self, messages, answers):
        """Send raw ``messages`` back to back and return the first ``answers`` responses
        that carry their tags, in arrival order (NDR and DRS alike).

        ``messages`` are ``(channel, payload)`` pairs, channel ``"req"`` or ``"rwd"``,
        each payload with its ``tag`` and any opcode value (also ones no enum
        names), so that a test can reuse a tag or send what the device does not
        implement. The tags must be free; they are held until the answers came."""
        tags = {payload["tag"] for _, payload in messages}
        if not tags <= set(self._free) or self._raw is not None:
            raise ValueError(f"tags {sorted(tags - set(self._free))} are in use")
        for tag in tags:
            self._free.remove(tag)
        done = Event()
        self._raw = (tags, [], answers, done)
        for channel, payload in messages:
            {"req": self.req, "rwd": self.rwd}[channel].send_nowait(payload)
        try:
            await wait_or_fail(done.wait(), self.timeout_ns,
                               lambda: f"CXL.mem exchange on tags {sorted(tags)}: "
                                       f"{len(self._raw[1])} of {answers} responses within "
                                       f"{self.timeout_ns} ns")
        finally:
            got = self._raw[1]
            self._raw = None
            for tag in tags:
                self._release(tag)
        return got

    @property
    def idle(self):
        """Nothing is outstanding: no answer is due to this master."""
        return not self._pending and self._raw is None and len(self._free) == self.max_tags

    async def read(self, addr):
        """Read line ``addr``; returns ``(data, poison)``."""
        rsp = await self._transact(self.req, {"opcode": M2SReqOpcode.MemRd, "addr": addr},
                                   f"MemRd {addr:#x}")
        return rsp.data, bool(rsp.poison)

    async def write(self, addr, data, be=None, poison=False):
        """Write line ``addr`` (partial when ``be`` is given); returns the NDR opcode."""
        opcode = M2SRwDOpcode.MemWr if be is None else M2SRwDOpcode.MemWrPtl
        rsp = await self._transact(self.rwd, {
            "opcode": opcode, "addr": addr, "data": data,
            "be": FULL_BE if be is None else be, "poison": int(poison),
        }, f"{opcode.name} {addr:#x}")
        return rsp.opcode

    async def invalidate(self, addr):
        rsp = await self._transact(self.req, {"opcode": M2SReqOpcode.MemInv, "addr": addr},
                                   f"MemInv {addr:#x}")
        return rsp.opcode

    async def _pool(self, items, op):
        """Run ``op`` on every item with one worker per tag, so all tags stay busy."""
        items = list(items)
        results = {}
        feed = iter(items)

        async def worker():
            for key, *rest in feed:
                results[key] = await op(key, *rest)

        workers = [cocotb.start_soon(worker()) for _ in range(min(self.max_tags, len(items)))]
        self._workers.update(workers)
        try:
            for w in workers:
                await w
        finally:
            for w in workers:
                w.cancel()
                self._workers.discard(w)
        return results

    def speculative_read(self, addr):
        """Send ``MemSpecRd``: a hint that has no completion (its tag is reserved)."""
        self.req.send_nowait({"opcode": M2SReqOpcode.MemSpecRd, "addr": addr, "tag": 0})

    async def write_lines(self, lines):
        """Write ``{addr: data}`` with as many writes in flight as tags allow; returns opcodes."""
        return await self._pool(lines.items(), self.write)

    async def read_lines(self, addrs):
        """Read ``addrs``; returns ``{addr: (data, poison)}``."""
        return await self._pool(((a,) for a in addrs), self.read)

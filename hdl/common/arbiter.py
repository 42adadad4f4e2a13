"""Round-robin arbiter."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["RoundRobin"]


class RoundRobin(wiring.Component):
    """Grants one of ``count`` requesters, starting after the last one served.

    Members
    -------
    requests : In(count)
        One bit per requester that could be served this cycle.
    grant : Out(range(count))
        The chosen requester; meaningful when ``valid``.
    valid : Out(1)
        Some request is asserted.
    advance : In(1)
        The grant was used this cycle: the next search starts after it.
    """

    def __init__(self, count):
        if not (isinstance(count, int) and count >= 1):
            raise ValueError(f"count must be a positive integer, not {count!r}")
        self._count = count
        super().__init__({
            "requests": In(count),
            "grant": Out(range(count)),
            "valid": Out(1),
            "advance": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        n = self._count
        last = Signal(range(n), init=n - 1)
        m.d.comb += self.valid.eq(self.requests.any())
        with m.Switch(last):
            for l in range(n):
                with m.Case(l):
                    # Later assignments win: walk from the lowest priority
                    # (last itself) to the highest (the one right after it).
                    for off in reversed(range(1, n + 1)):
                        idx = (l + off) % n
                        with m.If(self.requests[idx]):
                            m.d.comb += self.grant.eq(idx)
        with m.If(self.advance & self.valid):
            m.d.sync += last.eq(self.grant)
        return m

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
    onehot : Out(count)
        The same, one bit per requester (all zero when none requests): a few
        logic levels shorter than decoding ``grant``.
    valid : Out(1)
        Some request is asserted.
    advance : In(1)
        The grant was used this cycle: the next search starts after it.

    With ``late_mask``, the search starts after a grant from the second cycle
    after it (in the cycle right after, where it started before): the mask is
    computed from a register of the grant, so the grant's carry chains do
    not run on into the mask's. For users that seldom grant in consecutive
    cycles; still no requester waits for more than one grant to each other.
    """

    def __init__(self, count, *, late_mask=False):
        if not (isinstance(count, int) and count >= 1):
            raise ValueError(f"count must be a positive integer, not {count!r}")
        self._count = count
        self._late_mask = late_mask
        super().__init__({
            "requests": In(count),
            "grant": Out(range(count)),
            "onehot": Out(count),
            "valid": Out(1),
            "advance": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        n = self._count
        # The requesters after the last one served (none at first: the search
        # starts at 0), kept as a mask so that it costs one gate a request.
        after = Signal(n)
        req = self.requests
        m.d.comb += self.valid.eq(req.any())

        # The first requester after the last served, cyclically: the lowest
        # request above it if there is one, else the lowest of all. ``x & -x``
        # isolates the lowest set bit through a carry chain, so the grant is a
        # few logic levels deep, not a chain of ``n`` priority multiplexers (an
        # FPGA's clock).
        def lowest(x):
            return x & (~x + 1)[:n]

        above = req & after
        onehot = self.onehot
        m.d.comb += onehot.eq(Mux(above.any(), lowest(above), lowest(req)))
        for b in range(len(self.grant)):        # one-hot to binary: bit b is an OR
            m.d.comb += self.grant[b].eq(Cat(onehot[i] for i in range(n) if i >> b & 1).any())
        # Above the grant: neither the grant nor the bits below it.
        def above_of(g):
            return ~(g | (g - 1)[:n])

        if self._late_mask:
            served = Signal(n)
            moved = Signal()
            m.d.sync += moved.eq(self.advance & self.valid)
            with m.If(self.advance & self.valid):
                m.d.sync += served.eq(onehot)
            with m.If(moved):
                m.d.sync += after.eq(above_of(served))
        else:
            with m.If(self.advance & self.valid):
                m.d.sync += after.eq(above_of(onehot))
        return m

"""Token-bucket rate limiter for the timing models."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["RateLimiter"]


class RateLimiter(wiring.Component):
    """Allows at most ``num`` events every ``den`` cycles on average.

    A credit accumulator gains ``num`` each cycle and pays ``den`` per event.
    It saturates at ``den + num - 1`` so that an idle limiter grants a short
    burst of at most two events and a busy one loses no credit.

    ``late``: ``take`` comes a cycle after the event it pays for (a client
    that registers the event it allowed, and allows none in that cycle).
    The accumulator saturates ``num`` higher, so that the cycle between the
    event and its payment loses no credit either.

    Members
    -------
    ok : Out(1)
        An event may happen this cycle.
    take : In(1)
        An event happens this cycle (only meaningful when ``ok``).
    """

    ok: Out(1)
    take: In(1)

    def __init__(self, num, den, *, late=False):
        if not (isinstance(num, int) and isinstance(den, int) and 1 <= num <= den):
            raise ValueError(f"rate must be num/den with 1 <= num <= den, not {num}/{den}")
        self._num, self._den, self._late = num, den, bool(late)
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        num, den = self._num, self._den
        if num == den:
            m.d.comb += self.ok.eq(1)
            return m
        cap = den + num - 1 + num * self._late
        acc = Signal(range(cap + 1), init=den)
        nxt = Signal(range(cap + num + 1))
        after = Signal.like(acc)
        # ``ok`` is ``acc >= den``, kept in a register of its own (compared
        # with the next credit): a client's arbitration starts at a flip-flop.
        ok = Signal(init=1)
        m.d.comb += [
            self.ok.eq(ok),
            nxt.eq(acc + num - Mux(self.take & self.ok, den, 0)),
            after.eq(Mux(nxt > cap, cap, nxt)),
        ]
        m.d.sync += [acc.eq(after), ok.eq(after >= den)]
        return m

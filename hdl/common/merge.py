"""Merge several streams of one payload layout into one."""

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .arbiter import RoundRobin
from .onehot import one_hot_select

__all__ = ["StreamMerge"]


class StreamMerge(wiring.Component):
    """Round-robin merge of ``count`` streams into ``o``.

    Once a payload is offered on ``o`` it stays there until taken, even if
    another input becomes valid meanwhile (the stream rule the consumers rely on).
    ``o`` is selected by the arbiter's one-hot grant. With ``late_mask`` (boards)
    the arbiter's turn moves a cycle after a take (:class:`RoundRobin`), so that
    the take does not run on into the turn's register.

    Members
    -------
    i0 ... : In(stream.Signature(shape))
    o : Out(stream.Signature(shape))
    index : Out(range(count))
        Which input ``o`` currently carries.
    """

    def __init__(self, shape, count, *, late_mask=False):
        self._count = count
        self._late_mask = late_mask
        members = {f"i{k}": In(stream.Signature(shape)) for k in range(count)}
        members["o"] = Out(stream.Signature(shape))
        members["index"] = Out(range(count))
        super().__init__(members)

    @property
    def inputs(self):
        return [getattr(self, f"i{k}") for k in range(self._count)]

    def elaborate(self, platform):
        m = Module()
        ins = self.inputs
        m.submodules.arb = arb = RoundRobin(self._count, late_mask=self._late_mask)
        holding = Signal()
        held = Signal(range(self._count))
        # While a payload is held, the arbiter sees only its requester, so the
        # turn it records is the one actually served (and ``o.valid``, the
        # arbiter's, is that requester's: it stays valid until taken).
        m.d.comb += arb.requests.eq(Mux(holding, 1 << held, Cat(i.valid for i in ins)))
        m.d.comb += [
            self.index.eq(arb.grant),
            self.o.valid.eq(arb.valid),
            self.o.payload.eq(one_hot_select(arb.onehot, [i.payload for i in ins])),
        ]
        for k, i in enumerate(ins):
            m.d.comb += i.ready.eq(arb.onehot[k] & self.o.ready)
        taken = self.o.valid & self.o.ready
        m.d.comb += arb.advance.eq(taken)
        m.d.sync += [
            holding.eq(self.o.valid & ~self.o.ready),
            held.eq(self.index),
        ]
        return m

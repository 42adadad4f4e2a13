"""Register slices: cut the combinational path of a stream, keeping full throughput."""

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .line_port import LinePortSignature

__all__ = ["RegisterSlice", "LinePortSlice"]


class RegisterSlice(wiring.Component):
    """A forward register slice: ``o``'s ``valid`` and payload come from registers.

    A payload entering on ``i`` leaves on ``o`` one cycle later. ``i.ready`` is
    ``~o.valid | o.ready``: the slice takes a new payload whenever its register is
    empty or being emptied, so a stream through it still moves one payload per
    cycle. What it cuts is the path from the producer's ``valid`` and payload to
    the consumer's logic (for an FPGA's timing); ``ready`` still passes through
    one gate.

    Members
    -------
    i : In(stream.Signature(shape))
    o : Out(stream.Signature(shape))
    """

    def __init__(self, shape):
        super().__init__({
            "i": In(stream.Signature(shape)),
            "o": Out(stream.Signature(shape)),
        })

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.i.ready.eq(~self.o.valid | self.o.ready)
        with m.If(self.i.ready):
            m.d.sync += [self.o.valid.eq(self.i.valid), self.o.payload.eq(self.i.payload)]
        return m


class LinePortSlice(wiring.Component):
    """A :class:`RegisterSlice` on the request stream of a line port; responses pass
    through unchanged.

    Members
    -------
    up : In(LinePortSignature)
        Towards the engine.
    down : Out(LinePortSignature)
        Towards the memory controller.
    """

    def __init__(self, signature):
        if not isinstance(signature, LinePortSignature):
            raise TypeError(f"expected a LinePortSignature, not {signature!r}")
        super().__init__({"up": In(signature), "down": Out(signature)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.req = req = RegisterSlice(self.up.req.payload.shape())
        wiring.connect(m, wiring.flipped(self.up.req), req.i)
        wiring.connect(m, req.o, wiring.flipped(self.down.req))
        wiring.connect(m, wiring.flipped(self.down.rdata), wiring.flipped(self.up.rdata))
        wiring.connect(m, wiring.flipped(self.down.wack), wiring.flipped(self.up.wack))
        return m

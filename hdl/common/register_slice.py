"""Register slices: cut the combinational path of a stream (at full rate, or at half rate
when ``ready`` is cut too)."""

from amaranth import *
from amaranth.hdl import ResetInserter
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .line_port import LinePortSignature

__all__ = ["RegisterSlice", "LinePortSlice", "through_slice", "on_entry", "a_cycle_later"]


class RegisterSlice(wiring.Component):
    """A forward register slice: ``o``'s ``valid`` and payload come from registers.

    A payload entering on ``i`` leaves on ``o`` one cycle later. By default
    ``i.ready`` is ``~o.valid | o.ready``: the slice takes a new payload whenever
    its register is empty or being emptied, so a stream through it still moves
    one payload per cycle. What it cuts is the path from the producer's
    ``valid`` and payload to the consumer's logic (for an FPGA's timing);
    ``ready`` still passes through one gate.

    With ``cut_ready`` the slice cuts ``ready`` too: ``i.ready`` is
    ``~o.valid``, a register, so the consumer's arbitration does not reach back
    into the producer. The price is half the rate: the slice takes a payload
    only when it is empty, one every other cycle at most. (A skid buffer would
    keep the rate at the cost of a second payload register.)

    A payload taken from ``o`` therefore stays in the register for the cycle
    after (with ``o.valid`` low), which the PMEM controller's write into its
    queue relies on.

    Members
    -------
    i : In(stream.Signature(shape))
    o : Out(stream.Signature(shape))
    """

    def __init__(self, shape, *, cut_ready=False):
        self._cut_ready = bool(cut_ready)
        super().__init__({
            "i": In(stream.Signature(shape)),
            "o": Out(stream.Signature(shape)),
        })

    def elaborate(self, platform):
        m = Module()
        if self._cut_ready:
            m.d.comb += self.i.ready.eq(~self.o.valid)
            with m.If(self.o.ready):
                m.d.sync += self.o.valid.eq(0)
        else:
            m.d.comb += self.i.ready.eq(~self.o.valid | self.o.ready)
        with m.If(self.i.ready):
            m.d.sync += [self.o.valid.eq(self.i.valid), self.o.payload.eq(self.i.payload)]
        return m


def through_slice(m, name, source, *, cut_ready=False, reset=None):
    """Pass the stream ``source`` (its ``valid`` driven by what ``m`` sees as
    the producer) through a :class:`RegisterSlice` added to ``m`` as ``name``;
    returns the slice's output stream. ``reset``, when given, empties the
    slice."""
    cut = RegisterSlice(source.payload.shape(), cut_ready=cut_ready)
    m.submodules[name] = cut if reset is None else ResetInserter(reset)(cut)
    wiring.connect(m, source, cut.i)
    return cut.o


def a_cycle_later(m, value, name):
    """``value`` a cycle later, from a register ``name`` added to ``m``."""
    held = Signal.like(value, name=name)
    m.d.sync += held.eq(value)
    return held


def on_entry(m, out, value):
    """``value``, a function of the payload entering the cut-ready slice whose
    output is ``out``, taken into a register as the payload enters and held
    with it. A decision made so starts the consumer's logic at a flip-flop;
    it stays exact for as long as what it reads moves only when the payload
    leaves (the slice is empty then, and takes the next payload)."""
    held = Signal.like(value)
    with m.If(~out.valid):
        m.d.sync += held.eq(value)
    return held


class LinePortSlice(wiring.Component):
    """A :class:`RegisterSlice` on the request stream of a line port; responses pass
    through unchanged. ``cut_ready`` is the slice's (see :class:`RegisterSlice`).

    Members
    -------
    up : In(LinePortSignature)
        Towards the engine.
    down : Out(LinePortSignature)
        Towards the memory controller.
    """

    def __init__(self, signature, *, cut_ready=False):
        if not isinstance(signature, LinePortSignature):
            raise TypeError(f"expected a LinePortSignature, not {signature!r}")
        self._cut_ready = bool(cut_ready)
        super().__init__({"up": In(signature), "down": Out(signature)})

    def elaborate(self, platform):
        m = Module()
        req = through_slice(m, "req", wiring.flipped(self.up.req), cut_ready=self._cut_ready)
        wiring.connect(m, req, wiring.flipped(self.down.req))
        wiring.connect(m, wiring.flipped(self.down.rdata), wiring.flipped(self.up.rdata))
        wiring.connect(m, wiring.flipped(self.down.wack), wiring.flipped(self.up.wack))
        return m

"""A recovery's rollback writes: an undo record's lines back into its row."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from trainingcxl.spec.config import LINE_BITS
from .layouts import fill_layout

__all__ = ["RollbackWriter"]


class RollbackWriter(wiring.Component):
    """Holds the lines of the undo record being received (``fill``) and, told to ``apply``
    it, writes them into the row, line 0 first. Line 0 shifts on at each write, so the
    port's data comes from a register, without a multiplexer; with register slices the
    commit records pass through that register too (``load``).

    Members
    -------
    fill : In(stream, always ready)
        A received data line of the record, at ``index``.
    load : In(stream of lines, always ready)
        A line into line 0 (a commit record or seal, registered).
    apply : In(stream of media line addresses, always ready)
        Write the record's lines into the row at that line.
    read_offer : In(1), held : In(1)
        A read is offered on the port (and is held from an earlier cycle): writes decided
        meanwhile wait until it is taken (an offer stays until taken, the stream rule).
    req : Out(stream)
        The writes, and line 0 as ``data`` whenever no write is offered.
    writing : Out(1), rollback_due : Out(1)
        Writing; to write once no read is held.
    busy : Out(1)
        Either: the line buffer is not to be refilled yet.
    """

    def __init__(self, config):
        self._config = config
        abits = config.media_addr_bits
        super().__init__({
            "fill": In(stream.Signature(fill_layout(config.lines_per_row), always_ready=True)),
            "load": In(stream.Signature(LINE_BITS, always_ready=True)),
            "apply": In(stream.Signature(abits, always_ready=True)),
            "read_offer": In(1),
            "held": In(1),
            "req": Out(stream.Signature(data.StructLayout({"addr": abits, "data": LINE_BITS}))),
            "writing": Out(1),
            "rollback_due": Out(1),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        lpr = self._config.lines_per_row
        linebuf = [Signal(LINE_BITS, name=f"undo_line{k}") for k in range(lpr)]
        wr_j = Signal(range(max(2, lpr)))
        hdr_b = Signal(self._config.media_addr_bits)    # the row the record restores
        writing, rollback_due = self.writing, self.rollback_due

        with m.If(self.fill.valid):
            m.d.sync += Array(linebuf)[self.fill.payload.index].eq(self.fill.payload.data)
        with m.If(self.load.valid):
            m.d.sync += linebuf[0].eq(self.load.payload)
        with m.If(self.apply.valid):
            m.d.sync += [hdr_b.eq(self.apply.payload), wr_j.eq(0)]
            with m.If(self.read_offer):
                m.d.sync += rollback_due.eq(1)
            with m.Else():
                m.d.sync += writing.eq(1)
        with m.If(rollback_due & ~self.held):
            m.d.sync += [writing.eq(1), rollback_due.eq(0)]

        m.d.comb += [self.req.valid.eq(writing), self.req.payload.addr.eq(hdr_b + wr_j),
                     self.req.payload.data.eq(linebuf[0]), self.busy.eq(writing | rollback_due)]
        with m.If(writing & self.req.ready):
            m.d.sync += wr_j.eq(wr_j + 1)
            m.d.sync += [a.eq(b) for a, b in zip(linebuf, linebuf[1:])]
            with m.If(wr_j == lpr - 1):
                m.d.sync += writing.eq(0)
        return m

"""Writes pooled vectors to host memory, one bag after another."""

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from trainingcxl.spec.config import ADDR_BITS, LINE_BITS
from ..common.line_port import LineOp, LinePortSignature
from .pool import pooled_layout

__all__ = ["VectorWriter"]


class VectorWriter(wiring.Component):
    """Writes each vector of ``vectors`` as ``lines_per_row`` lines at ``addr + k * lines_per_row``.

    Members
    -------
    start : In(1)
        Pulse: latch ``addr`` and ``count``, reset the counters.
    addr : In(ADDR_BITS)
    count : In(24)
        Vectors to write.
    discard : In(1)
        Take vectors without writing them (abort).
    vectors : In(stream.Signature(pooled_layout))
    mem : Out(LinePortSignature)
    done : Out(1)
        ``count`` vectors written and every write acknowledged.
    outstanding : Out(16)
        Writes issued and not acknowledged.
    error : Out(1)
        A write was refused (sticky until ``start``).
    """

    def __init__(self, config):
        self._config = config
        super().__init__({
            "start": In(1),
            "addr": In(ADDR_BITS),
            "count": In(24),
            "discard": In(1),
            "vectors": In(stream.Signature(pooled_layout(config))),
            "mem": Out(LinePortSignature(addr_bits=ADDR_BITS, tag_bits=8)),
            "done": Out(1),
            "outstanding": Out(16),
            "error": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        lpr = self._config.lines_per_row
        base = Signal(ADDR_BITS)
        total = Signal(24)
        written = Signal(24)        # vectors fully issued
        line = Signal(range(lpr))
        issued = Signal(32)
        acked = Signal(32)
        last_line = line == lpr - 1

        v = self.vectors.payload
        offered = Signal()      # a write offered and not yet taken survives ``discard``
        m.d.sync += offered.eq(self.mem.req.valid & ~self.mem.req.ready)
        m.d.comb += [
            self.mem.req.valid.eq(self.vectors.valid & (~self.discard | offered)),
            self.mem.req.payload.op.eq(LineOp.WRITE),
            self.mem.req.payload.addr.eq(base + written * lpr + line),
            self.mem.req.payload.data.eq(v.data if lpr == 1 else v.data.word_select(line, LINE_BITS)),
            self.mem.req.payload.be.eq(-1),
            self.mem.rdata.ready.eq(1),
            self.mem.wack.ready.eq(1),
        ]
        req_fire = self.mem.req.valid & self.mem.req.ready
        m.d.comb += self.vectors.ready.eq((self.discard & ~offered)
                                          | (self.mem.req.valid & self.mem.req.ready & last_line))
        with m.If(req_fire):
            m.d.sync += [line.eq(Mux(last_line, 0, line + 1)), issued.eq(issued + 1)]
            with m.If(last_line):
                m.d.sync += written.eq(written + 1)
        ack = self.mem.wack.valid
        with m.If(ack):
            m.d.sync += acked.eq(acked + 1)
            with m.If(self.mem.wack.payload.err):
                m.d.sync += self.error.eq(1)
        m.d.comb += [
            self.outstanding.eq(issued - acked),
            self.done.eq((written == total) & (issued == acked)),
        ]
        with m.If(self.start):
            m.d.sync += [base.eq(self.addr), total.eq(self.count), written.eq(0), line.eq(0),
                         issued.eq(0), acked.eq(0), self.error.eq(0)]
        return m

"""Sum-pools the rows of each bag in exact fixed point."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .gather import mark_layout

__all__ = ["pooled_layout", "SumPool"]


def pooled_layout(config):
    return data.StructLayout({
        "data": config.dim * 32,        # dim wrapped 32-bit sums, element 0 in the low bits
        "overflow": 1,                  # some exact sum did not fit in 32 bits
    })


class SumPool(wiring.Component):
    """Adds the lines of each bag (docs/design.md, "Arithmetic").

    Elements are added exactly in ``fixed.acc_bits`` bits (enough for
    ``max_pooling`` rows); the pooled element is the low 32 bits of the exact
    sum, and ``overflow`` says that some element's exact sum was outside the
    32-bit range. Addition is associative and commutative in this format, so
    any order of rows gives the same pooled vector.

    ``marks`` and ``rdata`` arrive in the same order: one marker per line
    read, and ``nodata`` markers that add nothing (an empty bag, or a row a
    relaxed lookup deferred); a bag ends at a marker with ``last``.

    Members
    -------
    marks : In(stream.Signature(mark_layout))
    rdata : In(stream)
        PMEM read data in request order (the ``rdata`` of the gather's port).
    pooled : Out(stream.Signature(pooled_layout))
    bags : Out(32)
        Bags pooled.
    overflows : Out(32)
        Bags whose ``overflow`` was set.
    """

    def __init__(self, config, *, rdata_shape):
        self._config = config
        super().__init__({
            "marks": In(stream.Signature(mark_layout(config))),
            "rdata": In(stream.Signature(rdata_shape)),
            "pooled": Out(stream.Signature(pooled_layout(config))),
            "bags": Out(32),
            "overflows": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._config
        lpr = cfg.lines_per_row
        epl = cfg.elems_per_line
        acc_bits = cfg.fixed.acc_bits
        line_layout = data.ArrayLayout(signed(acc_bits), epl)

        acc = Array(Signal(line_layout, name=f"acc{l}") for l in range(lpr))
        mark = self.marks.payload
        j = mark.line

        # Exact sums of the incoming line into its accumulator line.
        incoming = data.ArrayLayout(signed(32), epl)(self.rdata.payload.data)
        summed = Signal(line_layout)
        for e in range(epl):
            m.d.comb += summed[e].eq(acc[j][e] + incoming[e])

        # The complete bag, as it will be after this line.
        final = [Signal(line_layout, name=f"final{l}") for l in range(lpr)]
        for l in range(lpr):
            m.d.comb += final[l].eq(Mux(~mark.nodata & (j == l), summed, acc[l]))

        out_full = Signal()
        out_free = ~out_full | self.pooled.ready
        is_data = self.marks.valid & ~mark.nodata
        finish = (self.marks.valid & mark.last & (mark.nodata | self.rdata.valid) & out_free)
        accumulate = is_data & ~mark.last & self.rdata.valid
        skip = self.marks.valid & mark.nodata & ~mark.last
        m.d.comb += [
            self.rdata.ready.eq(accumulate | (finish & ~mark.nodata)),
            self.marks.ready.eq(accumulate | finish | skip),
        ]
        with m.If(accumulate):
            m.d.sync += acc[j].eq(summed)

        pooled = Signal(pooled_layout(cfg))
        m.d.comb += [self.pooled.valid.eq(out_full), self.pooled.payload.eq(pooled)]
        with m.If(self.pooled.valid & self.pooled.ready):
            m.d.sync += out_full.eq(0)
        with m.If(finish):
            fits = []
            for l in range(lpr):
                for e in range(epl):
                    v = final[l][e]
                    m.d.sync += pooled.data.word_select(l * epl + e, 32).eq(v[:32])
                    # Fits in 32 bits when the guard bits repeat the sign bit.
                    fits.append((v[31:] == 0) | (v[31:] == (1 << (acc_bits - 31)) - 1))
                m.d.sync += acc[l].eq(0)
            overflow = ~Cat(*fits).all()
            m.d.sync += [
                out_full.eq(1),
                pooled.overflow.eq(overflow),
                self.bags.eq(self.bags + 1),
                self.overflows.eq(self.overflows + overflow),
            ]
        return m

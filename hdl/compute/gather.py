"""Turns bags and row indices into PMEM row reads, with markers for the pooler."""

from amaranth import *
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ..common.line_port import LineOp, LinePortSignature
from .bags import bag_layout

__all__ = ["mark_layout", "RowGather"]


def mark_layout(config):
    """One marker per PMEM line read, or one per empty bag (``empty``, no read)."""
    return data.StructLayout({
        "empty": 1,
        "last": 1,                                   # last line of the bag
        "line": range(config.lines_per_row),
    })


class RowGather(wiring.Component):
    """Issues the PMEM reads of every row of every bag, as fast as PMEM takes them.

    ``bags`` gives each bag's table and length in bag order; ``indices`` gives
    the row numbers. Each row becomes ``lines_per_row`` reads of consecutive
    media lines starting at ``table_base[t] + row * lines_per_row``. For every
    read (and for every empty bag) a marker enters ``marks`` in the same order,
    so the pooler can find bag boundaries in PMEM's in-order read data.

    A row number outside its table sets ``range_error`` and stops the gather.

    Members
    -------
    bags : In(stream)
        ``table``, ``length``.
    indices : In(stream.Signature(32))
    pmem : Out(LinePortSignature)
        Reads only; ``rdata`` is consumed by the pooler, not here.
    marks : Out(stream.Signature(mark_layout))
    stop : In(1)
        Offer no new reads and take no more bags or indices.
    range_error : Out(1)
    rows : Out(32)
        Rows gathered.
    """

    def __init__(self, config, *, tag_bits=16):
        self._config = config
        super().__init__({
            "bags": In(stream.Signature(bag_layout(config))),
            "indices": In(stream.Signature(32)),
            "pmem": Out(LinePortSignature(addr_bits=config.media_addr_bits, tag_bits=tag_bits)),
            "marks": Out(stream.Signature(mark_layout(config))),
            "stop": In(1),
            "range_error": Out(1),
            "rows": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._config
        lpr = cfg.lines_per_row
        abits = cfg.media_addr_bits

        # -- stage A: bags and indices -> row starts
        row_layout = data.StructLayout({"addr": abits, "last": 1, "empty": 1})
        m.submodules.row_q = row_q = fifo.SyncFIFOBuffered(width=row_layout.size, depth=4)
        row_in = Signal(row_layout)
        m.d.comb += row_q.w_data.eq(row_in)

        have_bag = Signal()
        table = Signal(range(cfg.n_tables))
        left = Signal(range(cfg.max_pooling + 1))
        base = Array(Const(b, abits) for b in cfg.table_base)
        rows = Array(Const(r, 25) for r in cfg.tables)

        idx = self.indices.payload
        in_range = idx < rows[table]
        m.d.comb += self.indices.ready.eq(have_bag & row_q.w_rdy & ~self.range_error & ~self.stop)
        idx_fire = self.indices.valid & self.indices.ready
        last_fire = idx_fire & (left == 1)
        with m.If(idx_fire & ~in_range):
            m.d.sync += self.range_error.eq(1)

        bag = self.bags.payload
        take_bag = self.bags.valid & ~self.stop & (
            (~have_bag & ((bag.length != 0) | row_q.w_rdy)) |
            (last_fire & (bag.length != 0)))
        m.d.comb += self.bags.ready.eq(take_bag)

        with m.If(idx_fire):
            m.d.comb += [
                row_in.addr.eq(base[table] + idx[:abits] * lpr),
                row_in.last.eq(left == 1),
                row_q.w_en.eq(in_range),
            ]
            m.d.sync += left.eq(left - 1)
            with m.If(left == 1):
                m.d.sync += have_bag.eq(0)
        with m.Elif(take_bag & (bag.length == 0)):
            m.d.comb += [row_in.empty.eq(1), row_q.w_en.eq(1)]
        with m.If(take_bag & (bag.length != 0)):
            m.d.sync += [have_bag.eq(1), table.eq(bag.table), left.eq(bag.length)]

        # -- stage B: row starts -> line reads and markers
        ml = mark_layout(cfg)
        depth = max(8, 2 * cfg.pmem.read_depth)
        m.submodules.mark_q = mark_q = fifo.SyncFIFOBuffered(width=ml.size, depth=depth)
        mark_in = Signal(ml)
        m.d.comb += mark_q.w_data.eq(mark_in)
        head = row_layout(row_q.r_data)
        line = Signal(range(lpr))
        last_line = line == lpr - 1

        offered = Signal()      # a read offered and not yet taken survives ``stop``
        m.d.sync += offered.eq(self.pmem.req.valid & ~self.pmem.req.ready)
        m.d.comb += [
            self.pmem.req.valid.eq(row_q.r_rdy & ~head.empty & mark_q.w_rdy
                                   & (~self.stop | offered)),
            self.pmem.req.payload.op.eq(LineOp.READ),
            self.pmem.req.payload.addr.eq(head.addr + line),
        ]
        read_fire = self.pmem.req.valid & self.pmem.req.ready
        with m.If(row_q.r_rdy & head.empty):
            m.d.comb += [
                mark_in.empty.eq(1),
                mark_q.w_en.eq(mark_q.w_rdy),
                row_q.r_en.eq(mark_q.w_rdy),
            ]
        with m.Elif(read_fire):
            m.d.comb += [
                mark_in.last.eq(head.last & last_line),
                mark_in.line.eq(line),
                mark_q.w_en.eq(1),
                row_q.r_en.eq(last_line),
            ]
            m.d.sync += line.eq(Mux(last_line, 0, line + 1))
            with m.If(last_line):
                m.d.sync += self.rows.eq(self.rows + 1)

        m.d.comb += [
            self.marks.valid.eq(mark_q.r_rdy),
            self.marks.payload.eq(mark_q.r_data),
            mark_q.r_en.eq(self.marks.ready),
        ]
        return m

"""Turns bags and row indices into PMEM row reads, with markers for the pooler."""

from amaranth import *
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ..common.line_port import LineOp, LinePortSignature
from ..common.ram import Ram
from .bags import bag_layout

__all__ = ["mark_layout", "defer_layout", "RowGather"]


def mark_layout(config):
    """One marker per PMEM line read; ``nodata`` markers (no read) stand for an
    empty bag or a deferred row, so that the pooler still sees where bags end."""
    return data.StructLayout({
        "nodata": 1,
        "last": 1,                                   # last line of the bag
        "line": range(config.lines_per_row),
    })


def defer_layout(config):
    """A row a relaxed lookup left out: its bag and its first media line."""
    return data.StructLayout({"bag": 24, "addr": config.media_addr_bits})


class RowGather(wiring.Component):
    """Issues the PMEM reads of every row of every bag, as fast as PMEM takes them.

    ``bags`` gives each bag's table and length in bag order; ``indices`` gives
    the row numbers. Each row becomes ``lines_per_row`` reads of consecutive
    media lines starting at ``table_base[t] + row * lines_per_row``. For every
    read (and for every empty bag) a marker enters ``marks`` in the same order,
    so the pooler can find bag boundaries in PMEM's in-order read data.

    A row number outside its table sets ``range_error`` and stops the gather.

    Relaxed lookup (docs/relaxed-lookup.md): every lookup of batch ``m``
    stamps each row it reads with ``epoch(m)`` in bank ``m % 2`` of the row
    marks; with ``relaxed`` set, a row stamped by batch ``m - 1`` is not read
    but pushed out as ``defer_data`` with ``defer_push`` (its bag gets a
    ``nodata`` marker instead); with no ``defer_room`` it is dropped and
    ``defer_overflow`` set, which fails the lookup. Without the ``relaxed``
    block (``Config.blocks``) there are no row marks and ``relaxed`` is
    ignored: nothing is deferred.

    Members
    -------
    bags : In(stream)
        ``table``, ``length``.
    indices : In(stream.Signature(32))
    pmem : Out(LinePortSignature)
        Reads only, tagged with the line's index in its row; ``rdata`` is
        consumed by the pooler, not here.
    marks : Out(stream.Signature(mark_layout))
    stop : In(1)
        Offer no new reads and take no more bags or indices.
    batch : In(32), relaxed : In(1)
        Of the current lookup; stable while it runs.
    defer_push : Out(1), defer_data : Out(defer_layout), defer_room : In(1)
    range_error, defer_overflow : Out(1)
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
            "batch": In(32),
            "relaxed": In(1),
            "defer_push": Out(1),
            "defer_data": Out(defer_layout(config)),
            "defer_room": In(1),
            "range_error": Out(1),
            "defer_overflow": Out(1),
            "rows": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._config
        lpr = cfg.lines_per_row
        abits = cfg.media_addr_bits

        # -- stage A: bags and indices -> row starts
        row_layout = data.StructLayout({"addr": abits, "last": 1, "empty": 1, "defer": 1,
                                        "bag": 24})
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

        touched = Signal()
        if "relaxed" in cfg.blocks:
            # Row marks for relaxed lookup: an epoch per row, two banks by batch
            # parity. The global row number addresses them: check last batch's
            # bank, stamp this one.
            total_rows = sum(cfg.tables)
            row_base = Array(Const(b, 25) for b in
                             [sum(cfg.tables[:t]) for t in range(cfg.n_tables)])
            epoch_now = Cat(self.batch[:7], Const(1, 1))
            epoch_prev = Cat((self.batch - 1)[:7], Const(1, 1))
            banks = [Ram(shape=8, depth=total_rows) for _ in range(2)]
            m.submodules.marks0, m.submodules.marks1 = banks
            mark_w = [b.write_port() for b in banks]
            mark_r = [b.read_port(domain="comb") for b in banks]
            parity = self.batch[0]
            grow = Signal(range(total_rows))
            m.d.comb += grow.eq(row_base[table] + idx[:25])
            for k in range(2):
                m.d.comb += [mark_r[k].addr.eq(grow), mark_w[k].addr.eq(grow),
                             mark_w[k].data.eq(epoch_now),
                             mark_w[k].en.eq(idx_fire & in_range & (parity == k))]
                with m.If(parity != k):
                    m.d.comb += touched.eq(mark_r[k].data == epoch_prev)

        bag_no = Signal(24)                 # bag number of the current bag
        taken = Signal(24)                  # bags taken so far
        with m.If(idx_fire):
            m.d.comb += [
                row_in.addr.eq(base[table] + idx[:abits] * lpr),
                row_in.last.eq(left == 1),
                row_in.defer.eq(self.relaxed & touched),
                row_in.bag.eq(bag_no),
                row_q.w_en.eq(in_range),
            ]
            m.d.sync += left.eq(left - 1)
            with m.If(left == 1):
                m.d.sync += have_bag.eq(0)
        with m.Elif(take_bag & (bag.length == 0)):
            m.d.comb += [row_in.empty.eq(1), row_q.w_en.eq(1)]
        with m.If(take_bag):
            m.d.sync += taken.eq(taken + 1)
        with m.If(take_bag & (bag.length != 0)):
            m.d.sync += [have_bag.eq(1), table.eq(bag.table), left.eq(bag.length),
                         bag_no.eq(taken)]

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
        m.d.comb += [self.defer_data.bag.eq(head.bag), self.defer_data.addr.eq(head.addr)]
        nodata = head.empty | head.defer
        m.d.comb += [
            # A row once begun is read whole, even past ``stop``: the undo
            # logger pairs every logged row with all of its lines.
            self.pmem.req.valid.eq(row_q.r_rdy & ~nodata & mark_q.w_rdy
                                   & (~self.stop | offered | (line != 0))),
            self.pmem.req.payload.op.eq(LineOp.READ),
            self.pmem.req.payload.addr.eq(head.addr + line),
            self.pmem.req.payload.tag.eq(line),
        ]
        read_fire = self.pmem.req.valid & self.pmem.req.ready
        with m.If(row_q.r_rdy & nodata & ~self.stop):
            # One marker for the whole row or empty bag; a deferred row also
            # goes to the deferred list (or, with no room, flags the overflow).
            m.d.comb += [
                mark_in.nodata.eq(1),
                mark_in.last.eq(head.last | head.empty),
                mark_q.w_en.eq(mark_q.w_rdy),
                row_q.r_en.eq(mark_q.w_rdy),
                self.defer_push.eq(mark_q.w_rdy & head.defer & self.defer_room),
            ]
            with m.If(mark_q.w_rdy & head.defer & ~self.defer_room):
                m.d.sync += self.defer_overflow.eq(1)
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

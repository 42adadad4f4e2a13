"""FINISH: add the rows a relaxed lookup deferred to the pooled vectors in host memory."""

from amaranth import *
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from trainingcxl.host.config import LINE_BITS
from ..common.line_port import LineOp, LinePortSignature
from ..cxl.messages import ADDR_BITS
from .gather import defer_layout, mark_layout
from .pool import SumPool

__all__ = ["Finisher"]


class Finisher(wiring.Component):
    """Gathers the deferred rows (now updated), pools them per bag, and adds each
    bag's sum to its pooled vector at ``vec_addr + bag * lines_per_row``.

    The deferred list is in bag order, so a bag's rows are consecutive; a bag
    ends where the next entry's bag differs or the list ends (``pending`` low).
    Pooling is exact modulo 2**32, so pooling a bag in two parts gives the
    same vector as pooling it at once (docs/relaxed-lookup.md).

    Members
    -------
    start : In(1)
    vec_addr : In(ADDR_BITS)
    deferred : In(stream.Signature(defer_layout))
    pending : In(1)
        The deferred list still holds entries (its head may lag a cycle behind).
    pmem : Out(LinePortSignature)
    host : Out(LinePortSignature)
    done : Out(1)
        Every deferred row added and every write acknowledged.
    error : Out(1)
        Host memory refused a read or a write (sticky until ``start``).
    """

    def __init__(self, config, *, pmem_tag_bits=16):
        self._config = config
        super().__init__({
            "start": In(1),
            "vec_addr": In(ADDR_BITS),
            "deferred": In(stream.Signature(defer_layout(config))),
            "pending": In(1),
            "pmem": Out(LinePortSignature(addr_bits=config.media_addr_bits, tag_bits=pmem_tag_bits)),
            "host": Out(LinePortSignature(addr_bits=ADDR_BITS, tag_bits=8)),
            "done": Out(1),
            "error": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._config
        lpr = cfg.lines_per_row
        lanes = LINE_BITS // 32

        # -- issue the reads of the current deferred row, marking where bags end
        cur = Signal(defer_layout(cfg))
        cur_valid = Signal()
        j = Signal(range(lpr))
        last_line = j == lpr - 1
        ml = mark_layout(cfg)
        m.submodules.mark_q = mark_q = fifo.SyncFIFOBuffered(
            width=ml.size, depth=max(8, 2 * cfg.pmem.read_depth))
        m.submodules.bag_q = bag_q = fifo.SyncFIFOBuffered(width=24, depth=max(8, 2 * cfg.pmem.read_depth))
        mark_in = Signal(ml)
        m.d.comb += mark_q.w_data.eq(mark_in)

        nxt = self.deferred.payload
        known = self.deferred.valid | ~self.pending        # the next entry, or that there is none
        bag_ends = ~self.deferred.valid | (nxt.bag != cur.bag)
        can_issue = cur_valid & mark_q.w_rdy & bag_q.w_rdy & (~last_line | known)
        m.d.comb += [
            self.pmem.req.valid.eq(can_issue),
            self.pmem.req.payload.op.eq(LineOp.READ),
            self.pmem.req.payload.addr.eq(cur.addr + j),
            self.pmem.wack.ready.eq(1),
        ]
        issued = self.pmem.req.valid & self.pmem.req.ready
        ends = issued & last_line & bag_ends
        m.d.comb += [
            mark_in.line.eq(j),
            mark_in.last.eq(last_line & bag_ends),
            mark_q.w_en.eq(issued),
            bag_q.w_data.eq(cur.bag),
            bag_q.w_en.eq(ends),
        ]
        with m.If(issued):
            m.d.sync += j.eq(Mux(last_line, 0, j + 1))
            with m.If(last_line):
                m.d.sync += cur_valid.eq(0)
        load = ~cur_valid & self.deferred.valid
        m.d.comb += self.deferred.ready.eq(load)
        with m.If(load):
            m.d.sync += [cur.eq(nxt), cur_valid.eq(1), j.eq(0)]

        # -- pool per bag
        m.submodules.pool = pool = SumPool(cfg, rdata_shape=self.pmem.rdata.payload.shape())
        m.d.comb += [
            pool.marks.valid.eq(mark_q.r_rdy), pool.marks.payload.eq(mark_q.r_data),
            mark_q.r_en.eq(pool.marks.ready),
        ]
        wiring.connect(m, wiring.flipped(self.pmem.rdata), pool.rdata)

        # -- read-add-write each pooled line in host memory
        bags_ended = Signal(32)
        bags_added = Signal(32)
        m.d.sync += bags_ended.eq(bags_ended + ends)
        wline = Signal(range(lpr))
        host_line = Signal(LINE_BITS)
        sums = pool.pooled.payload.data
        part = sums if lpr == 1 else sums.word_select(wline, LINE_BITS)
        added = Signal(LINE_BITS)
        for lane in range(lanes):
            m.d.comb += added.word_select(lane, 32).eq(
                host_line.word_select(lane, 32) + part.word_select(lane, 32))
        addr = self.vec_addr + bag_q.r_data * lpr + wline
        writes = Signal(32)
        acks = Signal(32)
        m.d.comb += [
            self.host.req.payload.addr.eq(addr),
            self.host.req.payload.data.eq(added),
            self.host.req.payload.be.eq(-1),
            self.host.rdata.ready.eq(1),
            self.host.wack.ready.eq(1),
        ]
        with m.FSM():
            with m.State("IDLE"):
                with m.If(pool.pooled.valid & bag_q.r_rdy):
                    m.next = "READ"
            with m.State("READ"):
                m.d.comb += [self.host.req.valid.eq(1), self.host.req.payload.op.eq(LineOp.READ)]
                with m.If(self.host.req.ready):
                    m.next = "WAIT"
            with m.State("WAIT"):
                with m.If(self.host.rdata.valid):
                    m.d.sync += host_line.eq(self.host.rdata.payload.data)
                    m.next = "WRITE"
            with m.State("WRITE"):
                m.d.comb += [self.host.req.valid.eq(1), self.host.req.payload.op.eq(LineOp.WRITE)]
                with m.If(self.host.req.ready):
                    m.d.sync += [writes.eq(writes + 1), wline.eq(Mux(wline == lpr - 1, 0, wline + 1))]
                    with m.If(wline == lpr - 1):
                        m.d.comb += [pool.pooled.ready.eq(1), bag_q.r_en.eq(1)]
                        m.d.sync += bags_added.eq(bags_added + 1)
                        m.next = "IDLE"
                    with m.Else():
                        m.next = "READ"
        m.d.sync += acks.eq(acks + self.host.wack.valid)
        with m.If((self.host.rdata.valid & self.host.rdata.payload.err)
                  | (self.host.wack.valid & self.host.wack.payload.err)):
            m.d.sync += self.error.eq(1)

        m.d.comb += self.done.eq(~cur_valid & ~self.pending & ~self.deferred.valid
                                 & (bags_added == bags_ended) & (writes == acks)
                                 & ~mark_q.r_rdy)
        with m.If(self.start):
            m.d.sync += [self.error.eq(0), bags_ended.eq(0), bags_added.eq(0),
                         writes.eq(0), acks.eq(0)]
        return m

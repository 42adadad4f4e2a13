"""FINISH: add the rows a relaxed lookup deferred to the pooled vectors in host memory."""

from amaranth import *
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from trainingcxl.spec.config import ADDR_BITS, LINE_BITS
from ..common.line_port import LineOp, LinePortSignature
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
    run : In(1)
        High while a ``FINISH`` runs; the list fills during the relaxed lookup
        before, and nothing may be taken from it until then.
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
            "run": In(1),
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
            self.pmem.req.payload.tag.eq(j),            # the line's index in its row
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
        load = ~cur_valid & self.deferred.valid & self.run
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

        # -- read-add-write each pooled line in host memory, several lines in
        # flight: a ring of slots holds each line's partial sum until the host's
        # copy arrives (in any order, by tag), and writes retire in ring order.
        w = 8
        sbits = 3
        bags_ended = Signal(32)
        bags_added = Signal(32)
        m.d.sync += bags_ended.eq(bags_ended + ends)
        m.submodules.parts = parts = Memory(shape=LINE_BITS, depth=w, init=[])
        m.submodules.hosts = hosts = Memory(shape=LINE_BITS, depth=w, init=[])
        part_w, part_r = parts.write_port(), parts.read_port(domain="comb")
        host_w, host_r = hosts.write_port(), hosts.read_port(domain="comb")
        slot_addr = Array(Signal(ADDR_BITS, name=f"slot_addr{k}") for k in range(w))
        filled = Signal(w)
        head = Signal(sbits)
        tail = Signal(sbits)
        used = Signal(range(w + 1))
        wline = Signal(range(lpr))
        sums = pool.pooled.payload.data
        part = sums if lpr == 1 else sums.word_select(wline, LINE_BITS)
        added = Signal(LINE_BITS)
        m.d.comb += [part_r.addr.eq(head), host_r.addr.eq(head)]
        for lane in range(lanes):
            m.d.comb += added.word_select(lane, 32).eq(
                host_r.data.word_select(lane, 32) + part_r.data.word_select(lane, 32))

        want_write = (used != 0) & filled.bit_select(head, 1)
        want_read = pool.pooled.valid & bag_q.r_rdy & (used != w)
        offering = Signal()
        was_write = Signal()
        is_write = Mux(offering, was_write, want_write)
        req = self.host.req
        m.d.comb += [
            req.valid.eq(Mux(is_write, want_write, want_read)),
            req.payload.op.eq(Mux(is_write, LineOp.WRITE, LineOp.READ)),
            req.payload.addr.eq(Mux(is_write, slot_addr[head],
                                    self.vec_addr + bag_q.r_data * lpr + wline)),
            req.payload.tag.eq(tail),
            req.payload.data.eq(Mux(is_write, added, 0)),
            req.payload.be.eq(-1),
            self.host.rdata.ready.eq(1),
            self.host.wack.ready.eq(1),
        ]
        fire = req.valid & req.ready
        m.d.sync += [offering.eq(req.valid & ~req.ready), was_write.eq(is_write)]
        read_fire = fire & ~is_write
        write_fire = fire & is_write
        m.d.comb += [part_w.addr.eq(tail), part_w.data.eq(part), part_w.en.eq(read_fire)]
        with m.If(read_fire):
            m.d.sync += [slot_addr[tail].eq(req.payload.addr), tail.eq(tail + 1),
                         wline.eq(Mux(wline == lpr - 1, 0, wline + 1))]
            with m.If(wline == lpr - 1):
                m.d.comb += [pool.pooled.ready.eq(1), bag_q.r_en.eq(1)]
                m.d.sync += bags_added.eq(bags_added + 1)
        got = self.host.rdata.valid
        m.d.comb += [host_w.addr.eq(self.host.rdata.payload.tag[:sbits]),
                     host_w.data.eq(self.host.rdata.payload.data), host_w.en.eq(got)]
        with m.If(write_fire):
            m.d.sync += head.eq(head + 1)
        set_mask = Mux(got, 1 << self.host.rdata.payload.tag[:sbits], 0)
        clr_mask = Mux(write_fire, 1 << head, 0)
        m.d.sync += [filled.eq((filled & ~clr_mask) | set_mask),
                     used.eq(used + read_fire - write_fire)]
        writes = Signal(32)
        acks = Signal(32)
        m.d.sync += [writes.eq(writes + write_fire), acks.eq(acks + self.host.wack.valid)]
        with m.If((self.host.rdata.valid & self.host.rdata.payload.err)
                  | (self.host.wack.valid & self.host.wack.payload.err)):
            m.d.sync += self.error.eq(1)

        m.d.comb += self.done.eq(~cur_valid & ~self.pending & ~self.deferred.valid
                                 & (bags_added == bags_ended) & (used == 0) & (writes == acks)
                                 & ~mark_q.r_rdy)
        with m.If(self.start):
            m.d.sync += [self.error.eq(0), bags_ended.eq(0), bags_added.eq(0),
                         writes.eq(0), acks.eq(0)]
        return m

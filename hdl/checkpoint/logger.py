"""The undo logger: old rows, read by the lookup anyway, written to the log ring in PMEM."""

from amaranth import *
from amaranth.hdl import ResetInserter
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from trainingcxl.spec.config import LINE_BITS, LINE_BYTES, RING_HEADERS
from trainingcxl.spec.records import RING, UNDO
from ..common.line_port import LineOp, LinePortSignature
from ..common.ram import Ram
from .crc import CRC_INIT, crc_part
from .layouts import sealed_header

__all__ = ["UndoTapSignature", "UndoLogger"]

_BOUNDARIES = 4


class UndoTapSignature(wiring.Signature):
    """How the lookup engine hands its row reads to the undo logger (seen from the lookup).

    Members
    -------
    addr, batch : Out
        The media line of a row whose first line is offered to PMEM, and the
        batch of the descriptor reading it.
    need : In(1)
        That row has no undo record for that batch yet: log it.
    room : In(1)
        The logger can take a row now; without room a needed row must wait.
    full : In(1)
        The ring cannot hold another record until a batch after the newest commit is
        durable, which no descriptor running now can bring about: take no more rows
        (waiting would never end); the descriptor fails with ``LOG_TOO_SMALL``.
    take : Out(1)
        The row's first read was issued and is logged: its lines follow on ``lines``.
    lines : Out(stream.Signature(LINE_BITS))
        The lines of taken rows, as PMEM returns them.
    """

    def __init__(self, addr_bits):
        self._addr_bits = addr_bits
        super().__init__({
            "addr": Out(addr_bits),
            "batch": Out(32),
            "need": In(1),
            "room": In(1),
            "full": In(1),
            "take": Out(1),
            "lines": Out(stream.Signature(LINE_BITS)),
        })

    def __eq__(self, other):
        return isinstance(other, UndoTapSignature) and other._addr_bits == self._addr_bits

    def __repr__(self):
        return f"UndoTapSignature({self._addr_bits})"


class UndoLogger(wiring.Component):
    """Writes an undo record for the first read of every row in every batch.

    See docs/design.md, "Checkpoint protocol".

    A stamp memory holds, per row, the generation and batch that last logged
    it, so a row read many times in a batch is logged once. The rows' old lines come from
    the lookup's own PMEM reads (``tap``): logging costs no extra read, and
    the records are written while the GPU computes, before the update comes.
    Each record goes to the next slot of the ring (``log_slots`` slots of
    ``rec_lines`` lines, the header last; spec/records.py).

    Space is reclaimed a batch at a time: the ring keeps the first log
    sequence number (LSN) of each batch with live records, and frees a
    batch's records once ``durable`` reaches it. A full ring stalls the
    writer (``full_cycles``), and through the buffers the lookup; it never
    overwrites a live record. Records that no descriptor running now can free
    (every record in the ring or on its way, once nothing is left to reclaim)
    are counted: when they fill the ring the tap says ``full`` instead of
    stalling the lookup for good. The count is of records, i.e. of distinct
    rows per batch.

    Stamps are never cleared: an entry matches only the current generation
    ``gen`` as well as the batch. Batch ids repeat after a recovery, but the
    generation does not: it comes from the commit records and only grows, and
    the checkpoint engine logs only once a commit record of ``gen`` is
    persistent, so no stamp of an earlier power-on period (nor the memory's
    initial zeros, batch 0 being never logged) can match. Reset and recovery
    thus cost no time proportional to the tables.

    Once every record taken is persistent, and before ``drained`` rises, the
    logger writes a ring header (the next LSN, its slot and the newest
    record's batch; spec/records.py) into the next of ``RING_HEADERS`` lines:
    recovery walks back from it instead of reading the whole ring.

    Members
    -------
    tap : In(UndoTapSignature)
    pmem : Out(LinePortSignature)
        Writes only; a write acknowledgement means the line is persistent.
    enable : In(1)
        Log (the checkpoint engine is recovered and checkpointing is on).
    gen : In(16)
    durable : In(32), durable_valid : In(1)
    restart : In(1)
        Drop the rows and lines held and empty the ring (around a recovery; the
        generation changes with it). Writes already issued still complete.
    drained : Out(1)
        Every record taken is persistent, and so is a ring header that covers
        them: the write-ahead barrier for ``UPDATE``.
    live : Out(32)
        Records in the ring not yet reclaimed.
    records, full_cycles : Out(32)
    query_addr : In(media_addr_bits), query_batch : In(32), query_logged : Out(1)
        Whether batch ``query_batch`` took the row at ``query_addr`` (its record is
        in the ring or on its way there): how a coalesced ``UPDATE`` checks, row by
        row, that it changes only rows its lookup logged.
    """

    def __init__(self, config, *, tag_bits=16):
        self._config = config
        abits = config.media_addr_bits
        super().__init__({
            "tap": In(UndoTapSignature(abits)),
            "pmem": Out(LinePortSignature(addr_bits=abits, tag_bits=tag_bits)),
            "enable": In(1),
            "gen": In(16),
            "durable": In(32),
            "durable_valid": In(1),
            "restart": In(1),
            "drained": Out(1),
            "live": Out(32),
            "records": Out(32),
            "full_cycles": Out(32),
            "query_addr": In(abits),
            "query_batch": In(32),
            "query_logged": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._config
        abits = cfg.media_addr_bits
        lpr = cfg.lines_per_row
        slots = cfg.log_slots
        rec = cfg.rec_lines

        # -- stamps: the (generation, batch) that last logged each row (indexed by media line)
        stamp = Cat(self.tap.batch, self.gen)
        m.submodules.stamps = stamps = Ram(shape=len(stamp), depth=cfg.table_lines)
        st_r = stamps.read_port(domain="comb")
        st_q = stamps.read_port(domain="comb")
        st_w = stamps.write_port()
        m.d.comb += [
            st_q.addr.eq(self.query_addr),
            self.query_logged.eq(st_q.data == Cat(self.query_batch, self.gen)),
        ]

        row_layout = data.StructLayout({"addr": abits, "batch": 32})
        row_q = fifo.SyncFIFOBuffered(width=row_layout.size, depth=cfg.log_buffer)
        buf = fifo.SyncFIFOBuffered(width=LINE_BITS, depth=cfg.log_buffer)
        m.submodules.row_q = ResetInserter(self.restart)(row_q)
        m.submodules.buf = ResetInserter(self.restart)(buf)

        tap = self.tap
        # Room for a record, counted against the ring: ``pinned`` records are in it or on
        # their way (queued, being written); at ``slots`` another one must wait for
        # reclaim, which only a pending pop can still give while a lookup runs.
        pinned = Signal(range(slots + cfg.log_buffer + 2))
        at_cap = pinned >= slots
        pop_due = Signal()
        m.d.comb += [
            st_r.addr.eq(tap.addr),
            tap.need.eq(self.enable & (st_r.data != stamp)),
            tap.room.eq(row_q.w_rdy & ~at_cap),
            tap.full.eq(at_cap & ~pop_due),
            row_q.w_data.eq(Cat(tap.addr, tap.batch)),
            row_q.w_en.eq(tap.take),
            buf.w_data.eq(tap.lines.payload),
            buf.w_en.eq(tap.lines.valid),
            tap.lines.ready.eq(buf.w_rdy),
            st_w.addr.eq(tap.addr), st_w.data.eq(stamp), st_w.en.eq(tap.take),
        ]

        # -- the ring
        head = Signal(32)               # LSN of the next record
        tail = Signal(32)               # LSN of the oldest live record
        slot_addr = Signal(abits, init=cfg.log_base)
        last_slot = cfg.log_base + (slots - 1) * rec
        m.d.comb += self.live.eq(head - tail)
        free = (head - tail) < slots

        bnd_batch = Array(Signal(32, name=f"bnd_batch{k}") for k in range(_BOUNDARIES))
        bnd_lsn = Array(Signal(32, name=f"bnd_lsn{k}") for k in range(_BOUNDARIES))
        bnd_n = Signal(range(_BOUNDARIES + 1))

        outstanding = Signal(range(cfg.pmem.wpq_depth * 4 + 1))
        wfire = self.pmem.req.valid & self.pmem.req.ready
        m.d.comb += [self.pmem.wack.ready.eq(1), self.pmem.rdata.ready.eq(1)]
        m.d.sync += outstanding.eq(outstanding + wfire - self.pmem.wack.valid)

        row = row_layout(row_q.r_data)
        cur = Signal(row_layout)
        j = Signal(range(max(2, lpr)))
        crc = Signal(32)
        fold = Signal(range(cfg.crc_folds))
        last_fold = fold == cfg.crc_folds - 1
        idle = Signal()

        push = Signal()
        m.d.comb += self.pmem.req.payload.be.eq((1 << LINE_BYTES) - 1)
        m.d.comb += self.pmem.req.payload.op.eq(LineOp.WRITE)

        sealed = sealed_header(m, magic=UNDO, gen=self.gen, batch=cur.batch, a=head, b=cur.addr,
                               crc=crc)
        # The ring header: how far the ring is persistent (see the class docstring).
        hdr_end = Signal(32)            # the LSN the last ring header written says comes next
        hdr_sel = Signal(range(RING_HEADERS))
        ring_line = sealed_header(m, magic=RING, gen=self.gen, batch=cur.batch, a=head,
                                  b=slot_addr)
        settled = Signal()              # nothing taken is waiting or in flight

        with m.FSM() as fsm:
            with m.State("IDLE"):
                m.d.comb += idle.eq(1)
                new_batch = (bnd_n == 0) | (row.batch != bnd_batch[bnd_n - 1])
                can = row_q.r_rdy & free & ~(new_batch & (bnd_n == _BOUNDARIES))
                with m.If(row_q.r_rdy & ~can):
                    m.d.sync += self.full_cycles.eq(self.full_cycles + 1)
                with m.If(settled & (hdr_end != head) & ~self.restart):
                    m.next = "RING"
                with m.Elif(can & ~self.restart):
                    m.d.comb += [row_q.r_en.eq(1), push.eq(new_batch)]
                    m.d.sync += [cur.eq(row), j.eq(0), crc.eq(CRC_INIT), fold.eq(0)]
                    m.next = "DATA"
            with m.State("DATA"):
                # The line is written once its checksum has taken all its parts.
                m.d.comb += [
                    self.pmem.req.valid.eq(buf.r_rdy & last_fold),
                    self.pmem.req.payload.addr.eq(slot_addr + j),
                    self.pmem.req.payload.data.eq(buf.r_data),
                    buf.r_en.eq(self.pmem.req.ready & last_fold),
                ]
                crc_next = crc_part(m, crc, buf.r_data, fold, cfg.crc_folds)
                with m.If(buf.r_rdy & ~last_fold):
                    m.d.sync += [crc.eq(crc_next), fold.eq(fold + 1)]
                with m.If(wfire):
                    m.d.sync += [crc.eq(crc_next), fold.eq(0), j.eq(j + 1)]
                    with m.If(j == lpr - 1):
                        m.next = "HEADER"
                with m.If(self.restart):
                    m.next = "IDLE"     # a record cut short is torn: its checksum fails
            with m.State("HEADER"):
                m.d.comb += [
                    self.pmem.req.valid.eq(1),
                    self.pmem.req.payload.addr.eq(slot_addr + lpr),
                    self.pmem.req.payload.data.eq(sealed),
                ]
                with m.If(wfire):
                    m.d.sync += [head.eq(head + 1), self.records.eq(self.records + 1),
                                 slot_addr.eq(Mux(slot_addr == last_slot, cfg.log_base,
                                                  slot_addr + rec))]
                    m.next = "IDLE"
                with m.If(self.restart):
                    m.next = "IDLE"
            with m.State("RING"):
                # Every record so far is persistent (``settled``): say so, before any
                # UPDATE may overwrite a row they cover.
                m.d.comb += [
                    self.pmem.req.valid.eq(1),
                    self.pmem.req.payload.addr.eq(cfg.ring_base + hdr_sel),
                    self.pmem.req.payload.data.eq(ring_line),
                ]
                with m.If(wfire):
                    m.d.sync += [hdr_end.eq(head),
                                 hdr_sel.eq(Mux(hdr_sel == RING_HEADERS - 1, 0, hdr_sel + 1))]
                    m.next = "IDLE"
                with m.If(self.restart):
                    m.next = "IDLE"
        m.d.comb += pinned.eq((head - tail) + row_q.level
                              + (fsm.ongoing("DATA") | fsm.ongoing("HEADER")))

        # -- reclaim: the oldest batch's records are free once it is durable.
        pop = Signal()
        m.d.comb += [
            pop_due.eq((bnd_n != 0) & self.durable_valid & (bnd_batch[0] <= self.durable)),
            pop.eq(pop_due & ((bnd_n > 1) | idle)),
        ]
        with m.If(pop):
            m.d.sync += tail.eq(Mux(bnd_n > 1, bnd_lsn[1], head))
        n_after_pop = Signal.like(bnd_n)
        m.d.comb += n_after_pop.eq(bnd_n - pop)
        for k in range(_BOUNDARIES):
            src_b = bnd_batch[k + 1] if k + 1 < _BOUNDARIES else bnd_batch[k]
            src_l = bnd_lsn[k + 1] if k + 1 < _BOUNDARIES else bnd_lsn[k]
            with m.If(push & (n_after_pop == k)):
                m.d.sync += [bnd_batch[k].eq(row.batch), bnd_lsn[k].eq(head)]
            with m.Elif(pop):
                m.d.sync += [bnd_batch[k].eq(src_b), bnd_lsn[k].eq(src_l)]
        m.d.sync += bnd_n.eq(n_after_pop + push)

        m.d.comb += [
            settled.eq(idle & (row_q.level == 0) & (buf.level == 0) & (outstanding == 0)
                       & ~tap.take & ~tap.lines.valid),
            self.drained.eq(settled & (hdr_end == head)),
        ]

        with m.If(self.restart):
            m.d.sync += [head.eq(0), tail.eq(0), bnd_n.eq(0), slot_addr.eq(cfg.log_base),
                         hdr_end.eq(0), hdr_sel.eq(0)]
        return m

"""The undo logger: old rows, read by the lookup anyway, written to the log ring in PMEM."""

from amaranth import *
from amaranth.hdl import ResetInserter
from amaranth.lib import data, fifo, wiring
from amaranth.lib.wiring import In, Out

from trainingcxl.spec.config import GROUP_RECORDS, LINE_BITS, LINE_BYTES, RING_HEADERS
from trainingcxl.spec.records import RING, UNDO, UNDO_GROUP
from trainingcxl.spec.registers import Reg
from ..common.line_port import LineOp, LinePortSignature
from ..common.register_slice import through_slice
from ..common.undo_tap import UndoTapSignature
from .crc import CRC_INIT, crc_part
from .layouts import CSUM, group_layout, sealed_header
from .stamps import RowStamps

__all__ = ["UndoLogger"]

_BOUNDARIES = 4


class UndoLogger(wiring.Component):
    """Writes an undo record for the first read of every row in every batch.

    See docs/checkpointing.md.

    A stamp memory (:class:`~.stamps.RowStamps`) holds, per row, the generation and
    batch that last logged it, so a row read many times in a batch is logged once. The rows' old lines come from
    the lookup's own PMEM reads (``tap``): logging costs no extra read, and
    the records are written while the GPU computes, before the update comes.

    Records go into undo groups (spec/records.py): each slot of the ring
    (``log_groups`` slots of ``group_lines`` lines) holds up to
    ``GROUP_RECORDS`` records of one batch, whose data lines are written as
    they come and whose headers share the slot's group line, written when the
    group closes: when it is full, when the next row is of another batch, or
    when no lookup runs (``flush``) and no row waits. Which group a row goes to
    is decided as it is taken, so room in the ring is counted in slots before
    the lookup hands a row over.

    Space is reclaimed a batch at a time: the ring keeps the first group of
    each batch with live records, and frees a batch's groups once
    ``durable`` reaches it. A full ring holds the lookup (``full_cycles``); it
    never overwrites a live group. When the ring is full and nothing can be
    reclaimed (every group in it is of a batch no descriptor running now can
    make durable), the tap says ``full`` instead of holding the lookup for
    good.

    Full stamps (``stamp_bits`` None) are never cleared: an entry matches only
    the current generation ``gen`` as well as the batch. Batch ids repeat after a recovery, but the
    generation does not: it comes from the commit records and only grows, and
    the checkpoint engine logs only once a commit record of ``gen`` is
    persistent, so no stamp of an earlier power-on period (nor the memory's
    initial zeros, batch 0 being never logged) can match. Reset and recovery
    thus cost no time proportional to the tables. Epoch stamps
    (``stamp_bits``, for tables too large for full stamps on chip) are cleared
    after reset and scrubbed in the background instead (see ``RowStamps``).

    Once every group is closed and persistent, and before ``drained`` rises,
    the logger writes a ring header (the next LSN, the next group's slot and
    the newest record's batch) into the next of ``RING_HEADERS`` lines:
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
    flush : In(1)
        No lookup is running: no row will join the open group soon, close it.
    restart : In(1)
        Drop the rows and lines held and empty the ring (around a recovery; the
        generation changes with it). Writes already issued still complete.
    drained : Out(1)
        Every record taken until the cycle before is persistent in a closed group,
        and so is a ring header that covers them: the write-ahead barrier for
        ``UPDATE``.
    busy : Out(1)
        Rows or lines wait to be written, or writes to be acknowledged (an open
        group waiting for more rows is not work).
    live : Out(32)
        Records in the ring not yet reclaimed.
    records : Out(32)
        Records written in closed groups.
    full_cycles : Out(32)
        Cycles a row waited for a slot of a full ring.
    busy_cycles : Out(32)
        Cycles ``busy`` was high (counted a cycle late).
    query : In(1), query_addr : In(media_addr_bits), query_batch : In(32)
    query_logged : Out(1)
        Whether batch ``query_batch`` took the row queried
        ``config.log_query_latency`` cycles before (its record
        is in the ring or on its way there): how a coalesced ``UPDATE`` checks,
        row by row, that it changes only rows its lookup logged.
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
            "flush": In(1),
            "restart": In(1),
            "drained": Out(1),
            "busy": Out(1),
            "live": Out(32),
            "records": Out(32),
            "full_cycles": Out(32),
            "busy_cycles": Out(32),
            "query": In(1),
            "query_addr": In(abits),
            "query_batch": In(32),
            "query_logged": Out(1),
        })

    @property
    def counters(self):
        """The control window's registers this logger drives: ``{Reg: value}``, or
        ``{Reg: {field: value}}`` for some fields of one (the device connects them)."""
        return {Reg.CKPT_STATE: {"live_records": self.live}, Reg.LOG_RECORDS: self.records,
                Reg.LOG_FULL: self.full_cycles, Reg.LOG_BUSY: self.busy_cycles}

    def elaborate(self, platform):
        m = Module()
        cfg = self._config
        abits = cfg.media_addr_bits
        lpr = cfg.lines_per_row
        groups = cfg.log_groups
        last_slot = cfg.log_base + (groups - 1) * cfg.group_lines

        stamps = self._stamps(m)

        # ``first``: the row starts a new group.
        row_layout = data.StructLayout({"addr": abits, "batch": 32, "first": 1})
        row_q = fifo.SyncFIFOBuffered(width=row_layout.size, depth=cfg.log_buffer)
        buf = fifo.SyncFIFOBuffered(width=LINE_BITS, depth=cfg.log_buffer)
        m.submodules.row_q = ResetInserter(self.restart)(row_q)
        m.submodules.buf = ResetInserter(self.restart)(buf)

        c_head, c_open, tail, closing, pop_due, lines = self._claims(m, stamps, row_q, buf)
        tap = self.tap

        # -- the ring
        head = Signal(32)               # LSN of the next record
        tail_lsn = Signal(32)           # LSN of the oldest live record
        g_head = Signal(32)             # groups started
        g_slot = Signal(abits, init=cfg.log_base)      # slot of the open group, or of the next
        m.d.comb += self.live.eq(head - tail_lsn)

        bnd_batch = Array(Signal(32, name=f"bnd_batch{k}") for k in range(_BOUNDARIES))
        bnd_group = Array(Signal(32, name=f"bnd_group{k}") for k in range(_BOUNDARIES))
        bnd_lsn = Array(Signal(32, name=f"bnd_lsn{k}") for k in range(_BOUNDARIES))
        bnd_n = Signal(range(_BOUNDARIES + 1))
        bnd_last = Signal(32)           # the newest boundary's batch, when there is one

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

        # The open group: its first record's LSN and batch, its records' entries.
        w_open = Signal()
        w_group = Signal(group_layout)
        w_addr = Signal(abits)          # media line of the next data line
        push = Signal()
        m.d.comb += self.pmem.req.payload.be.eq((1 << LINE_BYTES) - 1)
        m.d.comb += self.pmem.req.payload.op.eq(LineOp.WRITE)

        # One header network gives a record's checksum (its data lines, then the
        # header it would have alone; state ENTRY) and seals the ring header
        # (state RING, while ``ringing``).
        ringing = Signal()
        header = sealed_header(m, magic=Mux(ringing, RING, UNDO), gen=self.gen,
                               batch=Mux(ringing, w_group.batch, cur.batch), a=head,
                               b=Mux(ringing, g_slot, cur.addr), crc=Mux(ringing, CRC_INIT, crc))
        rec_csum = header[CSUM]
        group_line = Signal(group_layout)
        m.d.comb += [group_line.eq(w_group), group_line.magic.eq(UNDO_GROUP),
                     group_line.gen.eq(self.gen)]
        # The ring header: how far the ring is persistent (see the class docstring).
        hdr_end = Signal(32)            # the LSN the last ring header written says comes next
        hdr_sel = Signal(range(RING_HEADERS))
        quiet = Signal()                # nothing taken is waiting or in flight
        m.d.comb += quiet.eq(idle & (row_q.level == 0) & (buf.level == 0) & (outstanding == 0)
                             & ~tap.take & ~lines.valid)

        # Whether the row at the head starts a batch the boundaries do not know.
        # With register slices the compare is registered and a row waits a
        # cycle at the head for it: the row stays put until it is taken, and
        # ``bnd_last`` moves only when a row is taken.
        differs = Signal()
        looked = Signal(init=1)
        if cfg.register_slices:
            m.d.sync += [differs.eq(row.batch != bnd_last),
                         looked.eq(row_q.r_rdy & ~row_q.r_en)]
        else:
            m.d.comb += differs.eq(row.batch != bnd_last)

        with m.FSM() as fsm:
            with m.State("IDLE"):
                m.d.comb += idle.eq(1)
                new_batch = (bnd_n == 0) | differs
                can = row_q.r_rdy & looked & ~(row.first & new_batch & (bnd_n == _BOUNDARIES))
                with m.If(self.restart):
                    pass
                with m.Elif(row_q.r_rdy & row.first & w_open):
                    m.next = "CLOSE"
                with m.Elif(can):
                    m.d.comb += row_q.r_en.eq(1)
                    m.d.sync += [cur.eq(row), j.eq(0), crc.eq(CRC_INIT), fold.eq(0)]
                    with m.If(row.first):
                        m.d.comb += push.eq(new_batch)
                        m.d.sync += [w_open.eq(1), w_group.eq(0), w_group.batch.eq(row.batch),
                                     w_group.lsn.eq(head), w_addr.eq(g_slot + 1),
                                     g_head.eq(g_head + 1)]
                    m.next = "DATA"
                with m.Elif(closing):
                    m.next = "CLOSE"
                with m.Elif(quiet & ~w_open & (hdr_end != head)):
                    m.d.sync += ringing.eq(1)
                    m.next = "RING"
            with m.State("DATA"):
                # The line is written once its checksum has taken all its parts.
                m.d.comb += [
                    self.pmem.req.valid.eq(buf.r_rdy & last_fold),
                    self.pmem.req.payload.addr.eq(w_addr),
                    self.pmem.req.payload.data.eq(buf.r_data),
                    buf.r_en.eq(self.pmem.req.ready & last_fold),
                ]
                advance = buf.r_rdy & ~last_fold
                crc_next = crc_part(m, crc, buf.r_data, fold, cfg.crc_folds, advance)
                with m.If(advance):
                    m.d.sync += [crc.eq(crc_next), fold.eq(fold + 1)]
                with m.If(wfire):
                    m.d.sync += [crc.eq(crc_next), fold.eq(0), j.eq(j + 1), w_addr.eq(w_addr + 1)]
                    with m.If(j == lpr - 1):
                        m.next = "ENTRY"
                with m.If(self.restart):
                    m.next = "IDLE"     # a group cut short has no group line: never read
            with m.State("ENTRY"):
                entry = w_group.entries[w_group.count]
                m.d.sync += [entry.addr.eq(cur.addr), entry.csum.eq(rec_csum),
                             w_group.count.eq(w_group.count + 1), head.eq(head + 1)]
                with m.If(self.restart):
                    m.next = "IDLE"
                with m.Elif(w_group.count == GROUP_RECORDS - 1):
                    m.next = "CLOSE"
                with m.Else():
                    m.next = "IDLE"
            with m.State("CLOSE"):
                # Every data line of the group was issued before its group line, and the
                # ring header that covers it waits for all of them to be acknowledged.
                m.d.comb += [
                    self.pmem.req.valid.eq(1),
                    self.pmem.req.payload.addr.eq(g_slot),
                    self.pmem.req.payload.data.eq(group_line),
                ]
                with m.If(wfire):
                    m.d.sync += [w_open.eq(0), self.records.eq(self.records + w_group.count),
                                 g_slot.eq(Mux(g_slot == last_slot, cfg.log_base,
                                               g_slot + cfg.group_lines))]
                    m.next = "IDLE"
                with m.If(self.restart):
                    m.next = "IDLE"
            with m.State("RING"):
                # Every record so far is persistent in a closed group: say so, before any
                # UPDATE may overwrite a row they cover.
                m.d.comb += [
                    self.pmem.req.valid.eq(1),
                    self.pmem.req.payload.addr.eq(cfg.ring_base + hdr_sel),
                    self.pmem.req.payload.data.eq(header),
                ]
                with m.If(wfire):
                    m.d.sync += [hdr_end.eq(head),
                                 hdr_sel.eq(Mux(hdr_sel == RING_HEADERS - 1, 0, hdr_sel + 1))]
                    m.next = "IDLE"
                with m.If(self.restart):
                    m.next = "IDLE"
                with m.If(wfire | self.restart):
                    m.d.sync += ringing.eq(0)

        # No lookup runs and no row waits: close the open group. Rows taken from now on
        # start a new group (see ``joins``), so this must not depend on ``tap.take``.
        m.d.comb += closing.eq(fsm.ongoing("IDLE") & ~self.restart & w_open & self.flush
                               & (row_q.level == 0))

        self._reclaim(m, bnd_batch, bnd_group, bnd_lsn, bnd_n, bnd_last, pop_due, idle, tail,
                      tail_lsn, g_head, w_open, w_group, head, push, row)
        # ``drained`` is registered: it says what held a cycle ago, so it does not
        # hang on the stamp read behind ``take`` (the 85F's longest path). A row
        # taken in the cycle it is high belongs to a later lookup than any UPDATE
        # the dispatcher may start then (it starts only after its clean LOOKUP).
        m.d.sync += self.drained.eq(quiet & ~w_open & (hdr_end == head))
        m.d.comb += self.busy.eq(~quiet | (~w_open & (hdr_end != head)))
        # Busy cycles, counted a cycle late from a register: ``busy`` hangs on the
        # lookup's take, and an adder at its end is a path of its own.
        busy_late = Signal()
        m.d.sync += [busy_late.eq(self.busy), self.busy_cycles.eq(self.busy_cycles + busy_late)]

        with m.If(self.restart):
            m.d.sync += [head.eq(0), tail.eq(0), tail_lsn.eq(0), g_head.eq(0), c_head.eq(0),
                         c_open.eq(0), w_open.eq(0), bnd_n.eq(0), g_slot.eq(cfg.log_base),
                         hdr_end.eq(0), hdr_sel.eq(0)]
        return m

    def _stamps(self, m):
        """The stamps: the (generation, batch) that last logged each row (indexed by media line)."""
        cfg = self._config
        m.submodules.stamps = stamps = RowStamps(depth=cfg.table_lines,
                                                 stamp_bits=cfg.stamp_bits,
                                                 registered=cfg.register_slices,
                                                 query_latency=cfg.log_query_latency)
        sbits = len(stamps.peek_addr)
        m.d.comb += [
            stamps.gen.eq(self.gen), stamps.batch.eq(self.tap.batch),
            stamps.peek.eq(self.tap.peek), stamps.peek_addr.eq(self.tap.peek_addr[:sbits]),
            stamps.write.eq(self.tap.take), stamps.write_addr.eq(self.tap.addr[:sbits]),
            stamps.query.eq(self.query), stamps.query_addr.eq(self.query_addr[:sbits]),
            stamps.query_batch.eq(self.query_batch), self.query_logged.eq(stamps.query_hit),
        ]
        return stamps

    def _claims(self, m, stamps, row_q, buf):
        """Claims: the group of each row, decided as the lookup hands it over; the lines
        into the buffer. Returns the groups claimed and whether one is open, the oldest
        live group, whether the open group closes now, whether the oldest batch is
        found durable, and the lines' stream."""
        cfg = self._config
        groups = cfg.log_groups
        tap = self.tap
        c_open = Signal()               # the newest claimed group may take more rows
        c_batch = Signal(32)
        c_fill = Signal(range(GROUP_RECORDS + 1))
        c_head = Signal(32)             # groups claimed: in the ring, open, or due for queued rows
        tail = Signal(32)               # the oldest live group
        closing = Signal()              # the writer closes the open group now
        at_cap = (c_head - tail) >= groups
        pop_due = Signal()
        if cfg.register_slices:
            # The answers to the lookup start at registers. ``c_batch ==
            # tap.batch`` is compared a cycle ahead (the claim of a new group
            # makes it true); ``room`` and ``full`` say what held a cycle
            # before, so neither is given in the cycle after a take (the
            # lookup's stage takes a row every other cycle at most) nor in the
            # first cycle of a lookup (its batch has just changed). A group
            # closes only while no lookup runs, when no row is taken.
            c_same = Signal()
            m.d.sync += c_same.eq(Mux(tap.take, 1, c_batch == tap.batch))
            joins = c_open & c_same & (c_fill != GROUP_RECORDS)
            ran = Signal()              # a lookup ran in the cycle before
            room, full = Signal(), Signal()
            steady = ran & ~self.flush & ~tap.take & ~self.restart
            m.d.sync += [ran.eq(~self.flush),
                         room.eq(steady & row_q.w_rdy & (joins | ~at_cap) & ~stamps.hold),
                         full.eq(steady & ~joins & at_cap & ~pop_due)]
        else:
            joins = c_open & (c_batch == tap.batch) & (c_fill != GROUP_RECORDS) & ~closing
            room = row_q.w_rdy & (joins | ~at_cap) & ~stamps.hold
            full = ~joins & at_cap & ~pop_due
        # Registered (boards), the lines pass a register, whose ``ready`` is one
        # too: the lookup's read path and the buffer's count do not meet in one
        # path. Half rate, far above PMEM's.
        if cfg.register_slices:
            lines = through_slice(m, "lines_slice", wiring.flipped(tap.lines), cut_ready=True,
                                  reset=self.restart)
        else:
            lines = wiring.flipped(tap.lines)
        m.d.comb += [
            tap.need.eq(self.enable & stamps.need), tap.known.eq(stamps.known),
            tap.room.eq(room), tap.full.eq(full),
            row_q.w_data.eq(Cat(tap.addr, tap.batch, ~joins)),
            row_q.w_en.eq(tap.take),
            buf.w_data.eq(lines.payload),
            buf.w_en.eq(lines.valid),
            lines.ready.eq(buf.w_rdy),
        ]
        with m.If(tap.take):
            with m.If(joins):
                m.d.sync += c_fill.eq(c_fill + 1)
            with m.Else():
                m.d.sync += [c_open.eq(1), c_batch.eq(tap.batch), c_fill.eq(1),
                             c_head.eq(c_head + 1)]
        with m.Elif(closing):
            m.d.sync += c_open.eq(0)
        with m.If(tap.offer & tap.need & ~joins & at_cap):
            m.d.sync += self.full_cycles.eq(self.full_cycles + 1)
        return c_head, c_open, tail, closing, pop_due, lines

    def _reclaim(self, m, bnd_batch, bnd_group, bnd_lsn, bnd_n, bnd_last, pop_due, idle, tail,
                 tail_lsn, g_head, w_open, w_group, head, push, row):
        """Reclaim: the oldest batch's groups are free once it is durable; the batches'
        boundaries in the ring, pushed as rows open them, popped as they are reclaimed."""
        cfg = self._config
        # The open group stays pinned: its slot is written again when it closes.
        pop = Signal()
        m.d.comb += pop_due.eq((bnd_n != 0) & self.durable_valid & (bnd_batch[0] <= self.durable))
        if cfg.register_slices:
            # The oldest boundary is popped a cycle after it was found durable
            # (a reclaim a cycle later), not again before it is checked again.
            popping = Signal()
            m.d.sync += popping.eq(pop_due & ~pop & ~self.restart)
        else:
            popping = pop_due
        m.d.comb += pop.eq(popping & ((bnd_n > 1) | idle))
        with m.If(pop):
            m.d.sync += [tail.eq(Mux(bnd_n > 1, bnd_group[1], g_head - w_open)),
                         tail_lsn.eq(Mux(bnd_n > 1, bnd_lsn[1], Mux(w_open, w_group.lsn, head)))]
        # The boundary a row opens: with register slices it enters a cycle after
        # the take, from registers, so that the take's decision does not run
        # on into the boundaries' enables. The row's lines take longer than
        # that before the next row is looked at; the writer is busy with them,
        # so a reclaim meanwhile sees the same boundaries as before.
        if cfg.register_slices:
            pushed = Signal()
            p_batch, p_group, p_lsn = Signal(32), Signal(32), Signal(32)
            m.d.sync += pushed.eq(push)
            with m.If(push):
                m.d.sync += [p_batch.eq(row.batch), p_group.eq(g_head), p_lsn.eq(head)]
        else:
            pushed, p_batch, p_group, p_lsn = push, row.batch, g_head, head
        n_after_pop = Signal.like(bnd_n)
        m.d.comb += n_after_pop.eq(bnd_n - pop)
        for k in range(_BOUNDARIES):
            nxt = min(k + 1, _BOUNDARIES - 1)
            with m.If(pushed & (n_after_pop == k)):
                m.d.sync += [bnd_batch[k].eq(p_batch), bnd_group[k].eq(p_group),
                             bnd_lsn[k].eq(p_lsn)]
            with m.Elif(pop):
                m.d.sync += [bnd_batch[k].eq(bnd_batch[nxt]), bnd_group[k].eq(bnd_group[nxt]),
                             bnd_lsn[k].eq(bnd_lsn[nxt])]
        m.d.sync += bnd_n.eq(n_after_pop + pushed)
        with m.If(pushed):
            m.d.sync += bnd_last.eq(p_batch)

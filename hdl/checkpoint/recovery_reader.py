"""A recovery's reads: the lines it asks PMEM for, and their checksums as they come back."""

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from trainingcxl.spec.config import GROUP_RECORDS, LINE_BITS
from .crc import CRC_INIT, crc_part
from .layouts import (CSUM, fill_layout, group_layout, header_layout, line_layout,
                      read_plan_layout, walk_layout)

__all__ = ["RecoveryReader"]


class RecoveryReader(wiring.Component):
    """Issues a recovery's reads and receives their lines, decoupled: the one-line
    records of a phase (``plan``) in address order, or the walk back through the undo-log
    ring (``walk``). The walk reads whole slots, newest first: a group line, then its
    records' data lines, newest record first (all ``GROUP_RECORDS``: lines of records a
    group does not hold are read and dropped, so that reads go out ahead without waiting
    for the count), then the slot before.

    Members
    -------
    plan : In(stream of read_plan_layout, always ready)
        Read ``lines`` lines from ``addr`` as phase ``phase``.
    walk : In(stream of walk_layout, always ready)
        Start the walk (phase 3) at group line ``slot``, for at most ``groups`` groups.
    finish : In(1)
        Reading ends (the phase's lines are received).
    clear : In(1)
        A recovery begins.
    reads : Out(stream of media line addresses)
        The reads, while ``reading`` and no write is on the port (``writing``).
    rdata : In(stream of lines)
        The lines read, in order.
    writing, rollback_due : In(1)
        A rollback writes, or is to write once no read is held: the line buffer it
        writes from is not to be refilled.
    stopped : In(1)
        The walk met a group or record it does not roll back: no more reads.
    hold : In(1)
        The next line waits for the verdict on the one before.
    line : Out(stream of line_layout, always ready)
        Each line as it is taken, with the CRC of its record so far.
    fill : Out(stream, always ready)
        A walk's data line into the rollback buffer, at ``index``.
    group : Out(group_layout), g_new : Out(1)
        The walk's group line received, and in the cycle after it arrives, to be judged.
    reading, phase, held : Out
        Reading phase ``phase``; a read is offered and not yet taken.
    idle : Out(1)
        Every read issued has been received (and no group line waits to be judged).
    lines_read : Out(32)
    """

    def __init__(self, config):
        self._config = config
        abits = config.media_addr_bits
        super().__init__({
            "plan": In(stream.Signature(read_plan_layout(abits), always_ready=True)),
            "walk": In(stream.Signature(walk_layout(abits), always_ready=True)),
            "finish": In(1),
            "clear": In(1),
            "reads": Out(stream.Signature(abits)),
            "rdata": In(stream.Signature(LINE_BITS)),
            "writing": In(1),
            "rollback_due": In(1),
            "stopped": In(1),
            "hold": In(1),
            "line": Out(stream.Signature(line_layout, always_ready=True)),
            "fill": Out(stream.Signature(fill_layout(config.lines_per_row), always_ready=True)),
            "group": Out(group_layout),
            "g_new": Out(1),
            "reading": Out(1),
            "phase": Out(range(4)),
            "held": Out(1),
            "idle": Out(1),
            "lines_read": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._config
        abits = cfg.media_addr_bits
        lpr = cfg.lines_per_row
        last_slot = cfg.log_base + (cfg.log_groups - 1) * cfg.group_lines

        iss_addr = Signal(abits)
        iss_left = Signal(32)           # reads still to issue in this phase (the walk: of a group)
        iss_more = Signal()             # ``iss_left != 0``, kept with it: the issue starts at a flip-flop
        rcv_left = Signal(32)           # lines still to receive in this phase (phases 0 to 2)
        phase = self.phase              # 0 commits, 1 snapshot headers, 2 ring headers, 3 the walk
        reading = self.reading
        # Reads issued and not yet received: at most ``window``, so a walk that stops reads
        # at most that many lines past the record that stopped it.
        window = max(lpr, cfg.pmem.read_depth)
        inflight = Signal(range(window + 1))
        w_slot = Signal(abits)          # the group being walked
        w_left = Signal(32)             # groups the walk may still read
        iss_group = Signal()            # the group line is the next read
        iss_j = Signal(range(max(2, lpr)))
        slot_reads = GROUP_RECORDS * lpr
        group = self.group              # the group line received
        g_new = self.g_new              # ... and not yet judged
        r_group = Signal()              # the next line received is a group line
        r_i = Signal(range(GROUP_RECORDS))      # record of the next data line received
        r_j = Signal(range(max(2, lpr)))        # its line
        # The group before and whether the walk may read it, from registers that
        # follow ``w_slot`` and ``w_left`` a cycle late: a whole slot of reads
        # lies between a move of the walk and the next.
        prev_slot = Signal(abits)
        w_more = Signal()
        m.d.sync += [prev_slot.eq(Mux(w_slot == cfg.log_base, last_slot, w_slot - cfg.group_lines)),
                     w_more.eq(w_left > 1)]

        # Issue: sequential, except for the walk. A read offered and not taken
        # is offered again, unchanged (the stream rule): while the walk is to
        # stop or a rollback waits (``turning``), only such a read (``held``, a
        # register) is offered, and the issue changes course once none is held.
        held = self.held
        stopped = self.stopped
        turning = stopped | self.rollback_due
        read_offer = Signal()
        m.d.comb += read_offer.eq(reading & ~self.writing & (iss_more | iss_group)
                                  & (inflight != window) & (~turning | held))
        m.d.comb += [self.reads.valid.eq(read_offer),
                     self.reads.payload.eq(Mux(iss_group, w_slot, iss_addr))]
        rfire = read_offer & self.reads.ready
        m.d.sync += held.eq(read_offer & ~self.reads.ready)
        busy = self.writing | self.rollback_due     # the line buffer is not to be refilled yet
        with m.If(rfire):
            with m.If(iss_group):
                m.d.sync += [iss_group.eq(0), iss_left.eq(slot_reads), iss_more.eq(1), iss_j.eq(0),
                             iss_addr.eq(w_slot + 1 + (GROUP_RECORDS - 1) * lpr)]
            with m.Else():
                m.d.sync += [iss_left.eq(iss_left - 1), iss_more.eq(iss_left != 1)]
                with m.If(phase == 1):
                    m.d.sync += iss_addr.eq(cfg.snapshot_base[1])
                with m.Elif(phase == 3):
                    with m.If(iss_j == lpr - 1):
                        # Line 0 of the record before; after record 0, the group before.
                        m.d.sync += [iss_j.eq(0), iss_addr.eq(iss_addr - (2 * lpr - 1))]
                        with m.If((iss_left == 1) & w_more & ~stopped):
                            m.d.sync += [w_slot.eq(prev_slot), w_left.eq(w_left - 1),
                                         iss_group.eq(1)]
                    with m.Else():
                        m.d.sync += [iss_j.eq(iss_j + 1), iss_addr.eq(iss_addr + 1)]
                with m.Else():
                    m.d.sync += iss_addr.eq(iss_addr + 1)

        # Receive: a line is taken once its checksum has taken all its parts.
        rd = self.rdata.payload
        hdr = Signal(header_layout)
        m.d.comb += hdr.eq(rd[:header_layout.size])
        single = phase < 3                          # one-line records
        zeroed = Signal(LINE_BITS)
        m.d.comb += zeroed.eq(rd)
        with m.If(single):
            m.d.comb += zeroed[CSUM].eq(0)
        crc = Signal(32)
        fold = Signal(range(cfg.crc_folds))
        last_fold = fold == cfg.crc_folds - 1
        crc_in = Mux((single | (r_j == 0)) & (fold == 0), CRC_INIT, crc)
        crc_next = Signal(32)
        advance = self.rdata.valid & reading & ~busy & ~last_fold
        m.d.comb += crc_next.eq(crc_part(m, crc_in, zeroed, fold, cfg.crc_folds, advance))

        m.d.comb += self.rdata.ready.eq(reading & ~busy & last_fold & ~self.hold)
        with m.If(advance):
            m.d.sync += [crc.eq(crc_next), fold.eq(fold + 1)]
        rcv = self.rdata.valid & self.rdata.ready
        m.d.sync += inflight.eq(inflight + rfire - rcv)
        with m.If(rfire):               # reads are issued only while recovering
            m.d.sync += self.lines_read.eq(self.lines_read + 1)
        # A record's last line, of a record the group holds (the lines of the others
        # are dropped).
        ends_record = (phase == 3) & ~r_group & (r_j == lpr - 1) & (r_i < group.count)
        with m.If(rcv):
            m.d.sync += [rcv_left.eq(rcv_left - 1), crc.eq(crc_next), fold.eq(0)]
            with m.If(phase == 3):
                with m.If(r_group):
                    m.d.sync += [group.eq(rd), g_new.eq(1), r_group.eq(0),
                                 r_i.eq(GROUP_RECORDS - 1), r_j.eq(0)]
                with m.Else():
                    m.d.comb += [self.fill.valid.eq(1), self.fill.payload.index.eq(r_j),
                                 self.fill.payload.data.eq(rd)]
                    with m.If(r_j == lpr - 1):
                        m.d.sync += [r_j.eq(0), r_i.eq(r_i - 1), r_group.eq(r_i == 0)]
                    with m.Else():
                        m.d.sync += r_j.eq(r_j + 1)
        out = self.line.payload
        m.d.comb += [self.line.valid.eq(rcv), out.hdr.eq(hdr), out.crc.eq(crc_next),
                     out.left.eq(rcv_left), out.end.eq(ends_record),
                     out.entry.eq(group.entries[r_i]), out.lsn.eq(group.lsn + r_i)]

        # A group line is judged in the cycle after it arrives.
        with m.If(g_new):
            m.d.sync += g_new.eq(0)
        with m.If(stopped & ~held):
            m.d.sync += [iss_left.eq(0), iss_more.eq(0), iss_group.eq(0)]
        m.d.comb += self.idle.eq(~iss_more & ~iss_group & ~g_new & (inflight == 0))

        with m.If(self.plan.valid):
            p = self.plan.payload
            m.d.sync += [phase.eq(p.phase), iss_addr.eq(p.addr), iss_left.eq(p.lines),
                         iss_more.eq(p.lines != 0), rcv_left.eq(p.lines), reading.eq(1)]
        with m.If(self.walk.valid):
            m.d.sync += [phase.eq(3), iss_addr.eq(0), iss_left.eq(0), iss_more.eq(0),
                         rcv_left.eq(0), reading.eq(1),
                         iss_group.eq(1), r_group.eq(1), w_slot.eq(self.walk.payload.slot),
                         w_left.eq(self.walk.payload.groups)]
        with m.If(self.finish):
            m.d.sync += reading.eq(0)
        with m.If(self.clear):
            m.d.sync += [g_new.eq(0), iss_group.eq(0), self.lines_read.eq(0)]
        return m

"""The recovery scanner: RECOVER's reads of the checkpoint records, its rollback and its seal."""

from types import SimpleNamespace

from amaranth import *
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from trainingcxl.spec.config import GROUP_RECORDS, LINE_BITS, LINE_BYTES, RING_HEADERS
from trainingcxl.spec.records import COMMIT, RING, SNAPSHOT, UNDO, UNDO_GROUP
from ..common.line_port import LineOp, LinePortSignature
from .crc import CRC_INIT, CRC_XOR, crc_part
from .layouts import CSUM, group_layout, header_layout, sealed_header

__all__ = ["RecoveryScanner"]


class RecoveryScanner(wiring.Component):
    """The steps of ``RECOVER`` (listed by :class:`~.engine.CheckpointEngine`), and the
    commit records' writes.

    It owns the checkpoint engine's PMEM port: a recovery's reads, rollback
    writes and seal, and the engine's commit records, which go through the
    recovery's header network (a commit and a recovery never run together).
    The engine keeps the checkpoint state; the scanner says what it found,
    each in the cycle the engine is to take it, so the engine's state changes
    in the cycles it did when both were one state machine.

    Members
    -------
    pmem : Out(LinePortSignature)
    start : In(1)
        A ``RECOVER`` is taken: from the next cycle the scanner waits for the
        snapshot pull (``pull_busy``), its own writes and the undo logger's restart.
    pull_busy : In(1)
    slots_valid : In(2)
        The engine's snapshot slots, as ``snapshots`` set them.
    recovering : Out(1)
        From the cycle after ``start`` to the one of ``none`` or ``done``.
    restart : Out(1)
        To the undo logger: drop what it holds and start an empty ring.
    begun : Out(1)
        The scan starts: the checkpoint state is unknown until it ends.
    snapshots : Out(1), snapshots_valid : Out(2), snapshot_batches : Out(ArrayLayout(32, 2))
        The intact snapshot slots not after the newest commit, and their batches.
    none : Out(1)
        No checkpoint; ``found``, ``best_gen`` and ``best_slot`` name the newest
        intact commit record, if any.
    done : Out(1)
        Rolled back and sealed: generation ``best_gen + 1`` starts at D
        (``d_batch``) with bound ``best_k``, from snapshot ``m_batch``; the
        seal is in ``seal_slot``; ``rolled`` records were rolled back.
    target : In(32), targeted : In(1)
        A device of a pool (``Config.pool.member``; absent otherwise): with
        ``targeted``, D is ``target`` if that is older than the newest commit,
        whatever the snapshots; ``m_batch`` is then the newest snapshot not after
        D, if any (``m_found``), and the snapshots after D are erased before the
        seal (they belong to the timeline the recovery ends).
    m_found : Out(1)
        With ``done``: ``m_batch`` names a snapshot.
    found : Out(1), best_gen : Out(16), best_slot : Out(range(commit_lines)), best_k : Out(8)
    d_batch, m_batch : Out(32), seal_slot : Out(range(commit_lines)), rolled : Out(32)
    lines_read : Out(32)
        Media lines the last (or running) ``RECOVER`` read.
    seal_load : In(1), seal_gen : In(16), seal_batch : In(32), seal_k : In(8)
        A commit record's fields, taken with every descriptor (its checks do
        not run on into them).
    seal_arm : In(1)
        With ``seal_load``: the descriptor is a ``COMMIT`` to write.
    commit_write : In(1), commit_slot : In(range(commit_lines))
        Write the commit record into that slot; ``commit_taken`` as it leaves.
    commit_taken : Out(1)
    drained : Out(1)
        Every write of the port is persistent.
    """

    def __init__(self, config, *, tag_bits=16):
        self._config = config
        slots = range(config.commit_lines)
        super().__init__({
            "pmem": Out(LinePortSignature(addr_bits=config.media_addr_bits, tag_bits=tag_bits)),
            "start": In(1),
            "pull_busy": In(1),
            "slots_valid": In(2),
            "recovering": Out(1),
            "restart": Out(1),
            "begun": Out(1),
            "snapshots": Out(1),
            "snapshots_valid": Out(2),
            "snapshot_batches": Out(data.ArrayLayout(32, 2)),
            "none": Out(1),
            "done": Out(1),
            "found": Out(1),
            "best_gen": Out(16),
            "best_slot": Out(slots),
            "best_k": Out(8),
            "d_batch": Out(32),
            "m_batch": Out(32),
            "seal_slot": Out(slots),
            "rolled": Out(32),
            "lines_read": Out(32),
            **({"target": In(32), "targeted": In(1)} if config.pool.member else {}),
            "m_found": Out(1),
            "seal_load": In(1),
            "seal_gen": In(16),
            "seal_batch": In(32),
            "seal_k": In(8),
            "seal_arm": In(1),
            "commit_write": In(1),
            "commit_slot": In(slots),
            "commit_taken": Out(1),
            "drained": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._config
        abits = cfg.media_addr_bits
        lpr = cfg.lines_per_row
        groups = cfg.log_groups
        last_slot = cfg.log_base + (groups - 1) * cfg.group_lines

        # The undo logger's restart. With register slices it leaves a register,
        # a cycle after the state that asks for it: the logger's reset then
        # starts at a flip-flop. A recovery waits in R_WAIT until the logger
        # restarts; the pulses that end a recovery reach it while the
        # completion is offered, before any descriptor can log again.
        restart = Signal()
        if cfg.register_slices:
            restarted = Signal()
            m.d.sync += restarted.eq(restart)
        else:
            restarted = restart
        m.d.comb += self.restart.eq(restarted)

        # -- PMEM port: reads (recovery scans) and writes (commit, rollback, seal)
        port = self.pmem
        outstanding = Signal(range(cfg.pmem.wpq_depth * 4 + 1))
        wfire = port.req.valid & port.req.ready & (port.req.payload.op == LineOp.WRITE)
        m.d.sync += outstanding.eq(outstanding + wfire - port.wack.valid)
        m.d.comb += [port.wack.ready.eq(1), port.req.payload.be.eq((1 << LINE_BYTES) - 1)]
        m.d.comb += self.drained.eq(outstanding == 0)

        def write_line(addr, line):
            m.d.comb += [port.req.valid.eq(1), port.req.payload.op.eq(LineOp.WRITE),
                         port.req.payload.addr.eq(addr), port.req.payload.data.eq(line)]

        # -- recovery: issue side (addresses) and receive side (checks), decoupled
        iss_addr = Signal(abits)
        iss_left = Signal(32)           # reads still to issue in this phase (the walk: of a group)
        iss_more = Signal()             # ``iss_left != 0``, kept with it: the issue starts at a flip-flop
        rcv_left = Signal(32)           # lines still to receive in this phase (phases 0 to 2)
        phase = Signal(range(4))        # 0 commits, 1 snapshot headers, 2 ring headers, 3 the walk
        reading = Signal()
        # Reads issued and not yet received: at most ``window``, so a walk that stops reads
        # at most that many lines past the record that stopped it.
        window = max(lpr, cfg.pmem.read_depth)
        inflight = Signal(range(window + 1))
        writing = Signal()
        # A rollback decided while a read is offered: its writes wait until that
        # read is taken (an offer stays until taken, the stream rule).
        rollback_due = Signal()

        best_gen = self.best_gen
        best_batch = Signal(32)
        best_slot = self.best_slot
        best_k = self.best_k
        found = self.found
        rsv = Signal(2)
        mk = Signal(33)                 # the snapshot's batch plus the staleness bound
        walk = SimpleNamespace(         # the walk the newest ring header asks for
            any=Signal(), end=Signal(32), newest=Signal(32), slot=Signal(abits),
            groups=Signal(32))
        rsb = Array(Signal(32, name=f"rslot{k}_batch") for k in range(2))
        # A device of a pool may be told the batch to roll back to (``target``).
        member = cfg.pool.member
        targeted = self.targeted if member else C(0)
        limit = Signal(32)              # the newest batch D may be: C, or an older target
        if member:
            m.d.comb += limit.eq(Mux(targeted & (self.target < best_batch), self.target,
                                     best_batch))
            drops = Cat(targeted & rsv[k] & (rsb[k] > self.d_batch) for k in range(2))
        else:
            m.d.comb += limit.eq(best_batch)
        m.d.comb += self.m_found.eq(self.slots_valid != 0)
        d_batch = self.d_batch
        m_batch = self.m_batch
        rhv = Signal(RING_HEADERS)                                  # ring header of gen g
        rh_next = Array(Signal(32, name=f"ring{k}_next") for k in range(RING_HEADERS))
        rh_slot = Array(Signal(32, name=f"ring{k}_slot") for k in range(RING_HEADERS))
        rh_batch = Array(Signal(32, name=f"ring{k}_batch") for k in range(RING_HEADERS))
        exp_lsn = Signal(32)            # the LSN the next record of the walk must have
        stopped = Signal()              # the walk met a group or record it does not roll back
        rolled = self.rolled
        # The record's lines as received. Its rollback writes leave from line 0,
        # which shifts on at each write, and (boards) the commit records do
        # too: the port's data then comes from registers, without a multiplexer.
        linebuf = [Signal(LINE_BITS, name=f"undo_line{k}") for k in range(lpr)]
        wr_j = Signal(range(max(2, lpr)))
        seal_slot = self.seal_slot
        hdr_b = Signal(abits)           # the row a record being rolled back restores
        pending = Signal()              # a received line still waits for its verdict
        hold = Signal()                 # the next line waits for that verdict

        # The walk reads whole slots, back from the newest: a group line, then its
        # records' data lines, newest record first (all ``GROUP_RECORDS``: lines of
        # records a group does not hold are read and dropped, so that reads go out
        # ahead without waiting for the count), then the slot before.
        w_slot = Signal(abits)          # the group being walked
        w_left = Signal(32)             # groups the walk may still read
        iss_group = Signal()            # the group line is the next read
        iss_j = Signal(range(max(2, lpr)))
        slot_reads = GROUP_RECORDS * lpr
        group = Signal(group_layout)    # the group line received
        g_new = Signal()                # ... and not yet judged
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
        held = Signal()
        turning = stopped | rollback_due
        read_offer = Signal()
        m.d.comb += read_offer.eq(reading & ~writing & (iss_more | iss_group)
                                  & (inflight != window) & (~turning | held))
        m.d.comb += [port.req.payload.tag.eq(0), port.req.payload.data.eq(linebuf[0])]
        with m.If(writing):
            m.d.comb += [
                port.req.valid.eq(1), port.req.payload.op.eq(LineOp.WRITE),
                port.req.payload.addr.eq(hdr_b + wr_j),
            ]
        with m.Elif(reading):
            m.d.comb += [port.req.valid.eq(read_offer),
                         port.req.payload.op.eq(LineOp.READ),
                         port.req.payload.addr.eq(Mux(iss_group, w_slot, iss_addr))]
        rfire = read_offer & port.req.ready
        m.d.sync += held.eq(read_offer & ~port.req.ready)
        busy = writing | rollback_due       # the line buffer is not to be refilled yet
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

        # Receive: checksums and decisions, in read order.
        rd = port.rdata.payload.data
        hdr = Signal(header_layout)
        m.d.comb += hdr.eq(rd[:header_layout.size])
        single = phase < 3                          # one-line records
        zeroed = Signal(LINE_BITS)
        m.d.comb += zeroed.eq(rd)
        with m.If(single):
            m.d.comb += zeroed[CSUM].eq(0)
        crc = Signal(32)
        # A line is taken once its checksum has taken all its parts; decisions are
        # made on the last one.
        fold = Signal(range(cfg.crc_folds))
        last_fold = fold == cfg.crc_folds - 1
        crc_in = Mux((single | (r_j == 0)) & (fold == 0), CRC_INIT, crc)
        crc_next = Signal(32)
        advance = port.rdata.valid & reading & ~busy & ~last_fold
        m.d.comb += crc_next.eq(crc_part(m, crc_in, zeroed, fold, cfg.crc_folds, advance))

        m.d.comb += port.rdata.ready.eq(reading & ~busy & last_fold & ~hold)
        with m.If(advance):
            m.d.sync += [crc.eq(crc_next), fold.eq(fold + 1)]
        rcv = port.rdata.valid & port.rdata.ready
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
                    m.d.sync += Array(linebuf)[r_j].eq(rd)
                    with m.If(r_j == lpr - 1):
                        m.d.sync += [r_j.eq(0), r_i.eq(r_i - 1), r_group.eq(r_i == 0)]
                    with m.Else():
                        m.d.sync += r_j.eq(r_j + 1)

        # The verdict on a received line: at once, or (with register slices) a
        # cycle later from registered copies, and its compares a cycle later
        # still, which takes the CRC network, the checksum compares and the
        # decisions below out of one path.
        if cfg.register_slices:
            v_fire = Signal()
            v_crc = Signal(32)
            v_hdr = Signal(header_layout)
            v_left = Signal.like(rcv_left)
            v_end = Signal()
            v_entry = Signal.like(group.entries[0])
            v_lsn = Signal(32)
            m.d.sync += v_fire.eq(rcv)
            with m.If(rcv):
                # The record's entry and LSN are picked here, so that the verdict
                # starts from registers (the group line stays while it is judged).
                m.d.sync += [v_crc.eq(crc_next), v_hdr.eq(hdr), v_left.eq(rcv_left),
                             v_end.eq(ends_record), v_entry.eq(group.entries[r_i]),
                             v_lsn.eq(group.lsn + r_i)]
        else:
            v_fire, v_crc, v_hdr, v_left, v_end = rcv, crc_next, hdr, rcv_left, ends_record
            v_entry, v_lsn = group.entries[r_i], group.lsn + r_i
            # The next line waits while its group line is judged.
            m.d.comb += hold.eq(g_new & (phase == 3))
        # A checksum is right when its difference from the one stored is zero. A
        # record is intact if its checksum, over its data lines and the header it
        # would have alone (spec/records.py), is the one its group line holds.
        entry = v_entry
        off = (v_crc ^ CRC_XOR) ^ v_hdr.csum
        # One header network checks the walk's records and seals the commit
        # records: a commit (COMMIT) and a recovery's seal (R_SEAL) never run
        # during a walk. While ``sealing`` it takes the commit record's fields,
        # set as each starts. (Three networks of 160
        # inputs were the largest XOR logic of a board's device, and its most
        # congested wiring.)
        sealing = Signal()
        c_gen = Signal(16)
        c_batch = Signal(32)
        c_k = Signal(8)
        header = sealed_header(m, magic=Mux(sealing, COMMIT, UNDO),
                               gen=Mux(sealing, c_gen, group.gen),
                               batch=Mux(sealing, c_batch, group.batch),
                               a=Mux(sealing, c_k, v_lsn), b=Mux(sealing, 0, entry.addr),
                               crc=Mux(sealing, CRC_INIT, v_crc))
        record_off = header[CSUM] ^ entry.csum
        # Registered (boards), a commit line passes a register: the network
        # does not run on into the beats of the PMEM port. The sealing states
        # offer the line from their second cycle, when the register holds it.
        settled = Signal()
        m.d.sync += settled.eq(0)
        if cfg.register_slices:
            with m.If(sealing):
                m.d.sync += linebuf[0].eq(header)

        def sealed():
            if not cfg.register_slices:
                return header, C(1)
            m.d.sync += settled.eq(1)
            return linebuf[0], settled
        if cfg.register_slices:
            # The checksums' differences pass a register too, and their zero tests
            # and the decisions below start from it. A rollback decision starts
            # its writes two cycles late: hold the next line back meanwhile, so
            # that it cannot overwrite the line buffer.
            judged = v_fire
            v_fire = Signal(name="compared")
            late = [Signal.like(v, name=f"{name}_compared") for name, v in
                    (("off", off), ("record_off", record_off), ("hdr", v_hdr),
                     ("left", v_left), ("end", v_end), ("entry", entry))]
            m.d.sync += v_fire.eq(judged)
            with m.If(judged):
                m.d.sync += [r.eq(v) for r, v in
                             zip(late, (off, record_off, v_hdr, v_left, v_end, entry))]
            off, record_off, v_hdr, v_left, v_end, entry = late
            m.d.comb += [pending.eq(judged | v_fire),
                         hold.eq((judged | v_fire | g_new) & (phase == 3))]
        intact = off == 0
        record_intact = record_off == 0
        with m.If(v_fire):
            with m.Switch(phase):
                with m.Case(0):
                    newer = Cat(v_hdr.batch, v_hdr.gen) > Cat(best_batch, best_gen)
                    with m.If(intact & (v_hdr.magic == COMMIT) & (~found | newer)):
                        m.d.sync += [found.eq(1), best_gen.eq(v_hdr.gen),
                                     best_batch.eq(v_hdr.batch), best_k.eq(v_hdr.a[:8]),
                                     best_slot.eq(cfg.commit_lines - v_left)]
                with m.Case(1):
                    k = (v_left == 1)
                    with m.If(intact & (v_hdr.magic == SNAPSHOT)):
                        m.d.sync += [rsv.bit_select(k, 1).eq(1), rsb[k].eq(v_hdr.batch)]
                with m.Case(2):
                    k = Signal(range(RING_HEADERS))
                    m.d.comb += k.eq(RING_HEADERS - v_left)
                    with m.If(intact & (v_hdr.magic == RING) & (v_hdr.gen == best_gen)):
                        m.d.sync += [rhv.bit_select(k, 1).eq(1), rh_next[k].eq(v_hdr.a),
                                     rh_slot[k].eq(v_hdr.b), rh_batch[k].eq(v_hdr.batch)]
                with m.Case(3):
                    with m.If(v_end & ~stopped):
                        with m.If(record_intact):
                            m.d.sync += [hdr_b.eq(entry.addr), wr_j.eq(0),
                                         rolled.eq(rolled + 1), exp_lsn.eq(exp_lsn - 1)]
                            with m.If(read_offer):
                                m.d.sync += rollback_due.eq(1)
                            with m.Else():
                                m.d.sync += writing.eq(1)
                        with m.Else():
                            m.d.sync += stopped.eq(1)
        # A group is walked if it is of generation g, of a batch after D, and its newest
        # record is the one expected; else the walk ends there (older groups are durable,
        # reclaimed or of another timeline).
        walked = ((group.magic == UNDO_GROUP) & (group.count != 0) & (group.count <= GROUP_RECORDS)
                  & (group.gen == best_gen) & (group.batch > d_batch)
                  & ((group.lsn + group.count - 1)[:32] == exp_lsn))
        with m.If(g_new):
            m.d.sync += g_new.eq(0)
            with m.If(~walked):
                m.d.sync += stopped.eq(1)
        with m.If(rollback_due & ~held):
            m.d.sync += [writing.eq(1), rollback_due.eq(0)]
        with m.If(stopped & ~held):
            m.d.sync += [iss_left.eq(0), iss_more.eq(0), iss_group.eq(0)]
        # Every line issued is received and has had its verdict.
        received = ~iss_more & ~iss_group & ~g_new & (inflight == 0) & ~pending
        with m.If(writing & port.req.ready):
            m.d.sync += wr_j.eq(wr_j + 1)
            m.d.sync += [a.eq(b) for a, b in zip(linebuf, linebuf[1:])]
            with m.If(wr_j == lpr - 1):
                m.d.sync += writing.eq(0)

        # -- commit records (the engine's COMMIT): the header network and the port's writes
        # A commit's fields, taken with every descriptor; a COMMIT arms the seal.
        with m.If(self.seal_load):
            m.d.sync += [c_gen.eq(self.seal_gen), c_batch.eq(self.seal_batch), c_k.eq(self.seal_k)]
            with m.If(self.seal_arm):
                m.d.sync += sealing.eq(1)
        with m.If(self.commit_write):
            line, ready_line = sealed()
            with m.If(ready_line):
                write_line(cfg.commit_base + self.commit_slot, line)
                with m.If(port.req.ready):
                    m.d.sync += sealing.eq(0)
                    m.d.comb += self.commit_taken.eq(1)

        def begin(phase_no, addr, lines):
            m.d.sync += [phase.eq(phase_no), iss_addr.eq(addr), iss_left.eq(lines),
                         iss_more.eq(lines != 0),
                         rcv_left.eq(lines), reading.eq(1)]

        with m.FSM() as fsm:
            m.d.comb += self.recovering.eq(~fsm.ongoing("IDLE"))
            with m.State("IDLE"):
                with m.If(self.start):
                    m.next = "R_WAIT"
            with m.State("R_WAIT"):
                # The undo logger drops what it holds: records of the generation
                # this recovery ends must not be written after it.
                m.d.comb += restart.eq(1)
                with m.If(~self.pull_busy & (outstanding == 0) & restarted):
                    m.d.comb += self.begun.eq(1)
                    m.d.sync += [found.eq(0), rsv.eq(0), rhv.eq(0), stopped.eq(0),
                                 g_new.eq(0), iss_group.eq(0),
                                 rolled.eq(0), self.lines_read.eq(0)]
                    begin(0, cfg.commit_base, cfg.commit_lines)
                    m.next = "R_COMMITS"
            with m.State("R_COMMITS"):
                with m.If(received):
                    begin(1, cfg.snapshot_base[0], 2)
                    m.next = "R_SNAPS"
            with m.State("R_SNAPS"):
                with m.If(received):
                    begin(2, cfg.ring_base, RING_HEADERS)
                    m.next = "R_RING"
            with m.State("R_RING"):
                with m.If(received):
                    m.d.sync += reading.eq(0)
                    m.next = "R_DECIDE"
            # The newest intact snapshot not after the newest commit, and the
            # newest batch it may restart from, into registers: the choice in
            # R_CHOOSE starts from them. Registered, the compares are taken into
            # registers first (R_DECIDE) and the picks made from them (R_WEIGH).
            def weigh(usable, first, k1):
                # Both sums are made beside the compares, not after the choice.
                m.d.comb += [self.snapshots.eq(1), self.snapshots_valid.eq(usable),
                             self.snapshot_batches[0].eq(rsb[0]),
                             self.snapshot_batches[1].eq(rsb[1])]
                m.d.sync += [m_batch.eq(Mux(first, rsb[0], rsb[1])),
                             mk.eq(Mux(first, rsb[0] + best_k, rsb[1] + best_k))]
                # The ring header of generation g that says the most records: where
                # the walk would start.
                e = Mux(k1, rh_next[1], rh_next[0])
                nxt = Mux(k1, rh_slot[1], rh_slot[0])
                m.d.sync += [walk.any.eq(rhv.any() & (e != 0)), walk.end.eq(e),
                             walk.newest.eq(Mux(k1, rh_batch[1], rh_batch[0])),
                             walk.slot.eq(Mux(nxt == cfg.log_base, last_slot,
                                              nxt - cfg.group_lines)),
                             walk.groups.eq(Mux(e >= groups, groups, e))]
                m.next = "R_CHOOSE"

            with m.State("R_DECIDE"):
                usable = Signal(2)
                m.d.comb += usable.eq(Cat(rsv[0] & (rsb[0] <= limit),
                                          rsv[1] & (rsb[1] <= limit)))
                first = usable[0] & (~usable[1] | (rsb[0] >= rsb[1]))
                k1 = rhv[1] & (~rhv[0] | (rh_next[1] > rh_next[0]))
                if cfg.register_slices:
                    picks = Signal(4)
                    m.d.sync += picks.eq(Cat(usable, first, k1))
                    m.next = "R_WEIGH"
                else:
                    weigh(usable, first, k1)
            if cfg.register_slices:
                with m.State("R_WEIGH"):
                        weigh(picks[:2], picks[2], picks[3])
            with m.State("R_CHOOSE"):
                with m.If(~found | (~targeted & (self.slots_valid == 0))):
                    m.d.comb += [self.none.eq(1), restart.eq(1)]
                    m.next = "IDLE"
                with m.Else():
                    m.d.sync += d_batch.eq(Mux(targeted, limit,
                                               Mux(mk < best_batch, mk, best_batch)))
                    m.next = "R_PLAN"
            def start_walk(rollback):
                with m.If(rollback):
                    begin(3, 0, 0)
                    m.d.sync += [exp_lsn.eq(walk.end - 1), iss_group.eq(1), r_group.eq(1),
                                 w_slot.eq(walk.slot), w_left.eq(walk.groups)]
                    m.next = "R_ROLLBACK"
                with m.Else():
                    m.next = "R_DRAIN"

            # Roll back only if the ring holds records of batches after D.
            # Registered, that compare of 32 bits is taken into a register of
            # its own, and the walk starts a cycle later.
            rollback = walk.any & (walk.newest > d_batch)
            with m.State("R_PLAN"):
                if cfg.register_slices:
                    rollback_late = Signal()
                    m.d.sync += rollback_late.eq(rollback)
                    m.next = "R_START"
                else:
                    start_walk(rollback)
            if cfg.register_slices:
                with m.State("R_START"):
                        start_walk(rollback_late)
            with m.State("R_ROLLBACK"):
                with m.If(received & ~busy):
                    m.d.sync += reading.eq(0)
                    m.next = "R_DRAIN"
            def seal():
                m.d.sync += seal_slot.eq(Mux(best_slot == cfg.commit_lines - 1, 0,
                                             best_slot + 1))
                m.d.sync += [sealing.eq(1), c_gen.eq(best_gen + 1), c_batch.eq(d_batch),
                             c_k.eq(best_k)]
                m.next = "R_SEAL"

            with m.State("R_DRAIN"):
                with m.If(outstanding == 0):
                    if member:
                        with m.If(drops.any()):
                            m.next = "R_DROP"
                        with m.Else():
                            seal()
                    else:
                        seal()
            if member:
                with m.State("R_DROP"):
                    # A snapshot after D, of the timeline this recovery ends: its header
                    # is erased before the seal, so no later commit makes it usable.
                    k = ~drops[0]
                    write_line(Mux(k, cfg.snapshot_base[1], cfg.snapshot_base[0]), 0)
                    with m.If(port.req.ready):
                        m.d.sync += rsv.bit_select(k, 1).eq(0)
                        m.next = "R_DRAIN"
            with m.State("R_SEAL"):
                # Everything rolled back is persistent: start generation g + 1 at D.
                line, ready_line = sealed()
                with m.If(ready_line):
                    write_line(cfg.commit_base + seal_slot, line)
                    with m.If(port.req.ready):
                        m.d.sync += sealing.eq(0)
                        m.next = "R_SEALED"
            with m.State("R_SEALED"):
                with m.If(outstanding == 0):
                    m.d.comb += [self.done.eq(1), restart.eq(1)]
                    m.next = "IDLE"

        return m

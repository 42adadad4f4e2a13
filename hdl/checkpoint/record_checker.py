"""A recovery's verdicts: each line's checksum, and in the walk, what is rolled back."""

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from trainingcxl.spec.config import GROUP_RECORDS
from trainingcxl.spec.records import UNDO_GROUP
from .crc import CRC_XOR
from .layouts import (group_layout, header_layout, line_layout, record_layout, verdict_layout,
                      walk_layout)

__all__ = ["RecordChecker"]


class RecordChecker(wiring.Component):
    """Judges the lines a recovery reads (:class:`~.recovery_reader.RecoveryReader`), in
    read order. A one-line record (commit, snapshot or ring header) is intact when its
    checksum matches; the verdict goes to the :class:`~.finder.CheckpointFinder`. In the
    walk back through the ring, a group is walked if it is of generation ``best_gen``, of
    a batch after D and its newest record is the one expected; each record it holds is
    rolled back if intact (``apply``), and the walk stops at the first that is not.

    With register slices the verdict is made a cycle later from registered copies, and
    its compares a cycle later still, which takes the CRC network, the checksum compares
    and the decisions out of one path; meanwhile the next line waits (``hold``).

    Members
    -------
    line : In(stream of line_layout, always ready)
    group : In(group_layout), g_new : In(1), phase : In(range(4))
        From the reader: the walk's group line, just received; the phase read.
    best_gen : In(16), d_batch : In(32)
        The generation walked and the batch it rolls back to.
    record : Out(record_layout), record_csum : In(32)
        The record being checked, to the header network, and the checksum its header
        would have alone (``spec/records.py``).
    verdict : Out(stream of verdict_layout, always ready)
    apply : Out(stream of media line addresses, always ready)
        Roll back the record received, to the row at that line.
    walk : In(stream of walk_layout, always ready)
        A walk starts: its first record is the one before LSN ``end``.
    clear : In(1)
        A recovery begins.
    stopped : Out(1), rolled : Out(32)
    pending : Out(1)
        A received line still waits for its verdict.
    hold : Out(1)
    """

    def __init__(self, config):
        self._config = config
        abits = config.media_addr_bits
        super().__init__({
            "line": In(stream.Signature(line_layout, always_ready=True)),
            "group": In(group_layout),
            "g_new": In(1),
            "phase": In(range(4)),
            "best_gen": In(16),
            "d_batch": In(32),
            "record": Out(record_layout),
            "record_csum": In(32),
            "verdict": Out(stream.Signature(verdict_layout, always_ready=True)),
            "apply": Out(stream.Signature(abits, always_ready=True)),
            "walk": In(stream.Signature(walk_layout(abits), always_ready=True)),
            "clear": In(1),
            "stopped": Out(1),
            "rolled": Out(32),
            "pending": Out(1),
            "hold": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._config
        group, g_new, phase = self.group, self.g_new, self.phase
        stopped, rolled = self.stopped, self.rolled
        exp_lsn = Signal(32)            # the LSN the next record of the walk must have
        rcv, line = self.line.valid, self.line.payload

        # The verdict on a received line: at once, or (registered) a cycle later.
        if cfg.register_slices:
            v_fire = Signal()
            v_crc = Signal(32)
            v_hdr = Signal(header_layout)
            v_left = Signal(32)
            v_end = Signal()
            v_entry = Signal.like(group.entries[0])
            v_lsn = Signal(32)
            m.d.sync += v_fire.eq(rcv)
            with m.If(rcv):
                # The record's entry and LSN are picked here, so that the verdict
                # starts from registers (the group line stays while it is judged).
                m.d.sync += [v_crc.eq(line.crc), v_hdr.eq(line.hdr), v_left.eq(line.left),
                             v_end.eq(line.end), v_entry.eq(line.entry), v_lsn.eq(line.lsn)]
        else:
            v_fire, v_crc, v_hdr, v_left, v_end = rcv, line.crc, line.hdr, line.left, line.end
            v_entry, v_lsn = line.entry, line.lsn
            # The next line waits while its group line is judged.
            m.d.comb += self.hold.eq(g_new & (phase == 3))
        # A checksum is right when its difference from the one stored is zero. A
        # record is intact if its checksum, over its data lines and the header it
        # would have alone, is the one its group line holds.
        entry = v_entry
        off = (v_crc ^ CRC_XOR) ^ v_hdr.csum
        m.d.comb += [self.record.gen.eq(group.gen), self.record.batch.eq(group.batch),
                     self.record.lsn.eq(v_lsn), self.record.addr.eq(entry.addr),
                     self.record.crc.eq(v_crc)]
        record_off = self.record_csum ^ entry.csum
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
            m.d.comb += [self.pending.eq(judged | v_fire),
                         self.hold.eq((judged | v_fire | g_new) & (phase == 3))]
        m.d.comb += [self.verdict.valid.eq(v_fire), self.verdict.payload.phase.eq(phase),
                     self.verdict.payload.intact.eq(off == 0),
                     self.verdict.payload.hdr.eq(v_hdr), self.verdict.payload.left.eq(v_left)]
        with m.If(v_fire & (phase == 3) & v_end & ~stopped):
            with m.If(record_off == 0):
                m.d.comb += [self.apply.valid.eq(1), self.apply.payload.eq(entry.addr)]
                m.d.sync += [rolled.eq(rolled + 1), exp_lsn.eq(exp_lsn - 1)]
            with m.Else():
                m.d.sync += stopped.eq(1)
        # A group is walked if it is of generation g, of a batch after D, and its newest
        # record is the one expected; else the walk ends there (older groups are durable,
        # reclaimed or of another timeline).
        walked = ((group.magic == UNDO_GROUP) & (group.count != 0) & (group.count <= GROUP_RECORDS)
                  & (group.gen == self.best_gen) & (group.batch > self.d_batch)
                  & ((group.lsn + group.count - 1)[:32] == exp_lsn))
        with m.If(g_new & ~walked):
            m.d.sync += stopped.eq(1)

        with m.If(self.walk.valid):
            m.d.sync += exp_lsn.eq(self.walk.payload.end - 1)
        with m.If(self.clear):
            m.d.sync += [stopped.eq(0), rolled.eq(0)]
        return m

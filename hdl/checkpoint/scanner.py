"""The recovery scanner: RECOVER's sequence over the blocks that read the checkpoint
records, judge them, roll back and seal."""

from amaranth import *
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from trainingcxl.spec.config import LINE_BYTES, RING_HEADERS
from ..common.line_port import LineOp, LinePortSignature
from .finder import CheckpointFinder
from .record_checker import RecordChecker
from .recovery_reader import RecoveryReader
from .rollback import RollbackWriter
from .sealer import CommitSealer

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

    The scanner sequences a recovery (its states below) and shares the port
    among its blocks:

    - :class:`~.recovery_reader.RecoveryReader` issues the reads (commit slots,
      snapshot headers, ring headers, then the walk back through the ring) and
      takes the lines with their checksums;
    - :class:`~.record_checker.RecordChecker` judges each line: intact or not,
      and in the walk which records are rolled back and where the walk stops;
    - :class:`~.finder.CheckpointFinder` keeps the newest commit, the snapshots
      and the ring headers, and decides D (or the pool's target) and the walk;
    - :class:`~.rollback.RollbackWriter` writes each record's lines back into
      its row;
    - :class:`~.sealer.CommitSealer` writes the engine's commit records and the
      recovery's seal, through the header network the checker shares.

    States: ``R_WAIT`` (for the snapshot pull, the port's writes and the undo
    logger's restart), ``R_COMMITS``, ``R_SNAPS``, ``R_RING`` (the headers
    read), ``R_DECIDE`` (the finder's decision), ``R_ROLLBACK`` (the walk),
    ``R_DRAIN`` (rollback writes persistent), ``R_DROP`` (a pool's device:
    snapshots after D erased), ``R_SEAL``, ``R_SEALED``.

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
        member = cfg.pool.member
        m.submodules.reader = reader = RecoveryReader(cfg)
        m.submodules.checker = checker = RecordChecker(cfg)
        m.submodules.finder = finder = CheckpointFinder(cfg)
        m.submodules.rollback = writer = RollbackWriter(cfg)
        m.submodules.sealer = sealer = CommitSealer(cfg)

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

        m.d.comb += [port.req.payload.tag.eq(0), port.req.payload.data.eq(writer.req.payload.data)]
        with m.If(writer.req.valid):
            m.d.comb += [port.req.valid.eq(1), port.req.payload.op.eq(LineOp.WRITE),
                         port.req.payload.addr.eq(writer.req.payload.addr)]
        with m.Elif(reader.reading):
            m.d.comb += [port.req.valid.eq(reader.reads.valid),
                         port.req.payload.op.eq(LineOp.READ),
                         port.req.payload.addr.eq(reader.reads.payload)]
        with m.If(sealer.req.valid):
            write_line(sealer.req.payload.addr, sealer.req.payload.data)
        m.d.comb += [reader.reads.ready.eq(port.req.ready), writer.req.ready.eq(port.req.ready),
                     sealer.req.ready.eq(port.req.ready),
                     reader.rdata.valid.eq(port.rdata.valid),
                     reader.rdata.payload.eq(port.rdata.payload.data),
                     port.rdata.ready.eq(reader.rdata.ready)]

        self._connect(m, reader, checker, finder, writer, sealer)

        def begin(phase, addr, lines):
            m.d.comb += [reader.plan.valid.eq(1), reader.plan.payload.phase.eq(phase),
                         reader.plan.payload.addr.eq(addr), reader.plan.payload.lines.eq(lines)]

        # Every line issued is received and has had its verdict.
        received = reader.idle & ~checker.pending
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
                    m.d.comb += [self.begun.eq(1), reader.clear.eq(1), checker.clear.eq(1),
                                 finder.clear.eq(1)]
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
                    m.d.comb += [reader.finish.eq(1), finder.decide.eq(1)]
                    m.next = "R_DECIDE"
            with m.State("R_DECIDE"):
                # The finder weighs the headers: no checkpoint, a walk back through
                # the ring (the reader and checker start it), or none needed.
                with m.If(finder.none):
                    m.d.comb += [self.none.eq(1), restart.eq(1)]
                    m.next = "IDLE"
                with m.Elif(finder.walk.valid):
                    m.next = "R_ROLLBACK"
                with m.Elif(finder.skip):
                    m.next = "R_DRAIN"
            with m.State("R_ROLLBACK"):
                with m.If(received & ~writer.busy):
                    m.d.comb += reader.finish.eq(1)
                    m.next = "R_DRAIN"
            def seal():
                # The commit record of generation g + 1 at D, in the slot after C's.
                last = cfg.commit_lines - 1
                seal = sealer.seal.payload
                m.d.comb += [sealer.seal.valid.eq(1),
                             seal.slot.eq(Mux(finder.best_slot == last, 0, finder.best_slot + 1)),
                             seal.fields.gen.eq(finder.best_gen + 1),
                             seal.fields.batch.eq(finder.d_batch),
                             seal.fields.k.eq(finder.best_k)]
                m.next = "R_SEAL"

            with m.State("R_DRAIN"):
                with m.If(outstanding == 0):
                    if member:
                        with m.If(finder.drop.valid):
                            m.next = "R_DROP"
                        with m.Else():
                            seal()
                    else:
                        seal()
            if member:
                with m.State("R_DROP"):
                    # A snapshot after D, of the timeline this recovery ends: its header
                    # is erased before the seal, so no later commit makes it usable.
                    k = finder.drop.payload
                    write_line(Mux(k, cfg.snapshot_base[1], cfg.snapshot_base[0]), 0)
                    m.d.comb += finder.drop.ready.eq(port.req.ready)
                    with m.If(port.req.ready):
                        m.next = "R_DRAIN"
            with m.State("R_SEAL"):
                # Everything rolled back is persistent: start generation g + 1 at D.
                m.d.comb += sealer.seal_write.eq(1)
                with m.If(sealer.req.valid & port.req.ready):
                    m.next = "R_SEALED"
            with m.State("R_SEALED"):
                with m.If(outstanding == 0):
                    m.d.comb += [self.done.eq(1), restart.eq(1)]
                    m.next = "IDLE"

        return m

    def _connect(self, m, reader, checker, finder, writer, sealer):
        """The blocks' connections: reads -> verdicts -> (the finder's state, rollback
        writes); the engine's commit records to the sealer; what they found to the engine."""
        cfg = self._config
        wiring.connect(m, reader.line, checker.line)
        wiring.connect(m, reader.fill, writer.fill)
        wiring.connect(m, checker.verdict, finder.verdict)
        wiring.connect(m, checker.apply, writer.apply)
        for walk in (reader.walk, checker.walk):
            m.d.comb += [walk.valid.eq(finder.walk.valid), walk.payload.eq(finder.walk.payload)]
        m.d.comb += [
            reader.writing.eq(writer.writing), reader.rollback_due.eq(writer.rollback_due),
            reader.stopped.eq(checker.stopped), reader.hold.eq(checker.hold),
            checker.group.eq(reader.group), checker.g_new.eq(reader.g_new),
            checker.phase.eq(reader.phase),
            checker.best_gen.eq(finder.best_gen), checker.d_batch.eq(finder.d_batch),
            sealer.record.eq(checker.record), checker.record_csum.eq(sealer.header.csum),
            writer.read_offer.eq(reader.reads.valid), writer.held.eq(reader.held),
            sealer.buffered.eq(writer.req.payload.data),
            finder.slots_valid.eq(self.slots_valid),
        ]
        if cfg.register_slices:
            m.d.comb += [writer.load.valid.eq(sealer.sealing), writer.load.payload.eq(sealer.header)]
        if cfg.pool.member:
            m.d.comb += [finder.target.eq(self.target), finder.targeted.eq(self.targeted)]
        m.d.comb += [
            self.found.eq(finder.found), self.best_gen.eq(finder.best_gen),
            self.best_slot.eq(finder.best_slot), self.best_k.eq(finder.best_k),
            self.d_batch.eq(finder.d_batch), self.m_batch.eq(finder.m_batch),
            self.m_found.eq(self.slots_valid != 0),
            self.snapshots.eq(finder.snapshots), self.snapshots_valid.eq(finder.snapshots_valid),
            self.snapshot_batches.eq(finder.snapshot_batches),
            self.seal_slot.eq(sealer.seal_slot), self.rolled.eq(checker.rolled),
            self.lines_read.eq(reader.lines_read),
        ]

        # -- commit records (the engine's COMMIT)
        m.d.comb += [sealer.load.valid.eq(self.seal_load), sealer.arm.eq(self.seal_arm),
                     sealer.load.payload.gen.eq(self.seal_gen),
                     sealer.load.payload.batch.eq(self.seal_batch),
                     sealer.load.payload.k.eq(self.seal_k),
                     sealer.commit_write.eq(self.commit_write),
                     sealer.commit_slot.eq(self.commit_slot),
                     self.commit_taken.eq(sealer.commit_taken)]

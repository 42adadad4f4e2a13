"""The checkpoint engine: COMMIT, SNAPSHOT_MLP and RECOVER, and the checkpoint state."""

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from trainingcxl.spec.config import ADDR_BITS
from trainingcxl.spec.descriptors import (NO_TARGET, ErrorCode, Op, completion_layout,
                                          descriptor_layout)
from trainingcxl.spec.registers import Reg
from ..common.line_port import LinePortSignature
from .scanner import RecoveryScanner
from .snapshot import SnapshotPuller

__all__ = ["CheckpointEngine"]


class CheckpointEngine(wiring.Component):
    """Commits, MLP snapshots, recovery, and the state they share (docs/design.md, "Checkpoint protocol").

    State. ``gen`` is the recovery generation: every record carries it, and
    each recovery starts a new one, so records of a timeline that a recovery
    undid are never applied again. ``committed`` is the newest commit; each
    snapshot slot has a batch and a valid flag; ``durable`` is the newest
    durable batch, ``min(committed, newest valid snapshot + K)``.
    Until a ``RECOVER`` has run after power-up the state is unknown:
    ``COMMIT`` and ``SNAPSHOT_MLP`` are refused and nothing is logged. Logging
    also waits for a commit record of the generation in force to be persistent
    (the recovery's own, or after ``NO_CHECKPOINT`` the host's ``COMMIT``): the
    logger's stamps carry the generation, and one that no commit record holds
    would be computed again by the next ``RECOVER``.

    ``COMMIT(n)``: ``n`` must be newer than the last commit. The update of
    ``n`` completed with every write persistent, so the record is written at
    once, into the next of ``commit_lines`` slots, and the descriptor
    completes when it is persistent.

    ``SNAPSHOT_MLP(m)``: ``m`` must be committed. The pull (``mlp_lines``
    lines from ``mlp_addr`` in host memory) starts in the older slot and the
    descriptor completes at once; the pull runs beside later batches. A
    second snapshot waits for the first pull.

    Training stalls: ``hold_lookup`` keeps the next ``LOOKUP`` back while the
    newest valid snapshot lags the newest commit by more than ``staleness``.

    ``RECOVER`` (the :class:`~.scanner.RecoveryScanner`, a state machine of its
    own; every step only reads, or writes what it would write again, so it is
    idempotent under power failure):

    1. read every commit slot; the newest intact record, by ``(gen,
       batch)``, gives ``C`` and ``g``;
    2. read both snapshot headers; ``M`` is the newest intact one not after
       ``C``; ``D = min(C, M + K)`` with the K that commit record stores; ``m = M``;
    3. read both ring headers: the intact one of generation ``g`` with the
       highest next LSN ``E`` says where the newest record covered by a ring
       header is (no ``UPDATE`` ever overwrote a row whose record it does not
       cover);
    4. walk the ring backwards from the group before the ring header's next
       slot, group by group, and in each group record by record, newest
       first, writing every record's old lines back to its row, so a row
       gets its oldest value; stop at the first group that is of another
       generation, of a batch ``<= D`` or whose newest record is not the LSN
       expected (``E - 1``, then one less for each record rolled back), and
       at the first record that is torn. Slots are read whole and ahead
       (a group line, then all its record lines, newest first), so only the
       slots rolled back and the group line that ends the walk are read
       (plus a window of reads issued ahead), never the whole ring;
    5. once every rollback write is persistent, write the commit record
       ``(D, g + 1)`` into a slot other than the newest. From then on the
       records of generation ``g`` are history.

    With no intact commit record or no snapshot the result is
    ``NO_CHECKPOINT``: the host starts from scratch.

    On a device of a pool (``Config.pool.member``) the descriptor's batch names the
    pool's durable batch (``NO_TARGET``: none): D is that batch when it is older than
    ``C``, whatever the snapshots (the host chose D and the snapshot from every
    device's records), and snapshots after D are erased before the seal.

    Members
    -------
    desc : In(stream.Signature(descriptor_layout)), done : Out(stream.Signature(completion_layout))
    pmem : Out(LinePortSignature)
        Commit records and recovery (reads and writes).
    snap_pmem, snap_host : Out(LinePortSignature)
        The snapshot pull's PMEM writes and host reads.
    enable : In(1), staleness : In(8), mlp_addr : In(64), mlp_lines : In(32)
        From the control window (``mlp_addr`` a 64-byte aligned byte address).
        ``staleness`` takes effect when a ``RECOVER`` finds no checkpoint (the
        host then formats); otherwise the bound stored in the newest commit
        record stays in force, so a power failure cannot change it.
    ready, logging, gen, committed, committed_valid, snapshot, snapshot_valid, durable,
    durable_valid, snap_busy, snap_failed, hold_lookup, staleness_in_force : Out
    restart : Out(1)
        To the undo logger: drop what it holds and start an empty ring (while a
        ``RECOVER`` starts, and when it ends).
    recovering : Out(1)
        A ``RECOVER`` is running.
    recovered_d, recovered_m : Out(32), recovered_flags : Out(2)
        Result of the last ``RECOVER``: D, m, and (D valid, m valid).
    rolled_back, recover_cycles, snapshot_lines, stall_cycles : Out(32)
    snapshot_busy_cycles : Out(32)
        Cycles a snapshot pull was in progress.
    recover_lines : Out(32)
        Media lines the last (or running) ``RECOVER`` read.
    """

    def __init__(self, config, *, tag_bits=16):
        self._config = config
        self._tag_bits = tag_bits
        abits = config.media_addr_bits
        super().__init__({
            "desc": In(stream.Signature(descriptor_layout(config))),
            "done": Out(stream.Signature(completion_layout)),
            "pmem": Out(LinePortSignature(addr_bits=abits, tag_bits=tag_bits)),
            "snap_pmem": Out(LinePortSignature(addr_bits=abits, tag_bits=tag_bits)),
            "snap_host": Out(LinePortSignature(addr_bits=ADDR_BITS, tag_bits=8)),
            "enable": In(1),
            "staleness": In(8),
            "mlp_addr": In(64),
            "mlp_lines": In(32),
            "ready": Out(1),
            "logging": Out(1),
            "gen": Out(16),
            "committed": Out(32),
            "committed_valid": Out(1),
            "snapshot": Out(32),
            "snapshot_valid": Out(1),
            "durable": Out(32),
            "durable_valid": Out(1),
            "snap_busy": Out(1),
            "snap_failed": Out(1),
            "hold_lookup": Out(1),
            "staleness_in_force": Out(8),
            "restart": Out(1),
            "recovering": Out(1),
            "recovered_d": Out(32),
            "recovered_m": Out(32),
            "recovered_flags": Out(2),
            "rolled_back": Out(32),
            "recover_cycles": Out(32),
            "recover_lines": Out(32),
            "snapshot_lines": Out(32),
            "snapshot_busy_cycles": Out(32),
            "stall_cycles": Out(32),
        })

    @property
    def counters(self):
        """The control window's registers this engine drives: ``{Reg: value}``, or
        ``{Reg: {field: value}}`` for some fields of one (the device connects them)."""
        return {
            Reg.CKPT_STATE: {"ready": self.ready, "logging": self.logging,
                             "snapshot_busy": self.snap_busy, "snapshot_failed": self.snap_failed,
                             "staleness": self.staleness_in_force, "gen": self.gen},
            Reg.COMMITTED: {"batch": self.committed, "valid": self.committed_valid},
            Reg.SNAPSHOT: {"batch": self.snapshot, "valid": self.snapshot_valid},
            Reg.DURABLE: {"batch": self.durable, "valid": self.durable_valid},
            Reg.RECOVERED: {"d": self.recovered_d, "m": self.recovered_m},
            Reg.RECOVERED_INFO: {"d_valid": self.recovered_flags[0],
                                 "m_valid": self.recovered_flags[1],
                                 "rolled_back": self.rolled_back, "lines_read": self.recover_lines},
            Reg.RECOVER_CYCLES: self.recover_cycles,
            Reg.SNAPSHOT_LINES: self.snapshot_lines,
            Reg.SNAPSHOT_BUSY: self.snapshot_busy_cycles,
        }

    def elaborate(self, platform):
        m = Module()
        cfg = self._config

        # -- state
        ready = Signal()
        gen = Signal(16)
        committed = Signal(32)
        committed_valid = Signal()
        sv = Signal(2)                                      # slot valid
        sb = Array(Signal(32, name=f"slot{k}_batch") for k in range(2))
        commit_next = Signal(range(cfg.commit_lines))
        # The staleness bound in force: the register's value when a RECOVER finds no
        # checkpoint (the host formats then), else the one the newest commit record
        # carries. Every commit record stores it, so a power failure cannot change it.
        k_eff = Signal(8)

        newest = Signal(32)
        newest_valid = Signal()
        with m.If(sv[0] & (~sv[1] | (sb[0] >= sb[1]))):
            m.d.comb += [newest.eq(sb[0]), newest_valid.eq(1)]
        with m.Elif(sv[1]):
            m.d.comb += [newest.eq(sb[1]), newest_valid.eq(1)]
        reach = Signal(33)
        m.d.comb += [reach.eq(newest + k_eff), self.staleness_in_force.eq(k_eff)]
        # Registered (boards), ``logging`` rises a cycle late: it rises only as
        # a descriptor ends or the host writes ``CKPT_CTRL``, and the next
        # descriptor or register access comes later than that. It falls with
        # ``ready`` as a ``RECOVER``'s scan begins (below).
        late = m.d.sync if cfg.register_slices else m.d.comb
        late += self.logging.eq(ready & self.enable & committed_valid)
        m.d.comb += [
            self.ready.eq(ready), self.gen.eq(gen),
            self.committed.eq(committed), self.committed_valid.eq(committed_valid),
            self.snapshot.eq(newest), self.snapshot_valid.eq(newest_valid),
            self.hold_lookup.eq(self.logging & committed_valid
                                & (~newest_valid | (reach < committed))),
        ]

        # What the undo logger may reclaim. With register slices it reaches the
        # logger a cycle late, from registers (the snapshot choice, the sum and
        # the compare stay off the logger's paths): the same as a durable
        # point reached a cycle later, since it only grows within a generation.
        durable = Mux(reach < committed, reach, committed)
        durable_valid = committed_valid & newest_valid
        late += [self.durable.eq(durable), self.durable_valid.eq(durable_valid)]

        # -- snapshot pull
        m.submodules.puller = puller = SnapshotPuller(cfg)
        wiring.connect(m, puller.pmem, wiring.flipped(self.snap_pmem))
        wiring.connect(m, puller.host, wiring.flipped(self.snap_host))
        older = Signal()
        m.d.comb += older.eq(Mux(~sv[0], 0, Mux(~sv[1], 1, sb[0] > sb[1])))
        desc = Signal(descriptor_layout(cfg))
        m.d.comb += [
            puller.batch.eq(desc.batch), puller.slot.eq(older), puller.src.eq(self.mlp_addr[6:6 + ADDR_BITS]),
            puller.count.eq(self.mlp_lines), puller.gen.eq(gen),
            self.snap_busy.eq(puller.busy), self.snapshot_lines.eq(puller.lines),
        ]
        m.d.sync += self.snapshot_busy_cycles.eq(self.snapshot_busy_cycles + puller.busy)
        pull_slot = Signal()
        pull_batch = Signal(32)
        with m.If(puller.done):
            m.d.sync += [sv.bit_select(pull_slot, 1).eq(1), sb[pull_slot].eq(pull_batch)]
        with m.If(puller.failed):
            m.d.sync += self.snap_failed.eq(1)

        # -- RECOVER, and the PMEM port (commit records, recovery)
        m.submodules.scan = scan = RecoveryScanner(cfg, tag_bits=self._tag_bits)
        wiring.connect(m, scan.pmem, wiring.flipped(self.pmem))
        m.d.comb += [
            scan.pull_busy.eq(puller.busy), scan.slots_valid.eq(sv),
            scan.seal_gen.eq(gen), scan.seal_batch.eq(self.desc.payload.batch),
            scan.seal_k.eq(k_eff), scan.commit_slot.eq(commit_next),
            self.restart.eq(scan.restart), self.recovering.eq(scan.recovering),
            self.recover_lines.eq(scan.lines_read),
        ]
        if cfg.pool.member:         # RECOVER's batch: the pool's durable batch, to roll back to
            m.d.comb += [scan.target.eq(desc.batch), scan.targeted.eq(desc.batch != NO_TARGET)]

        error = Signal(ErrorCode)
        m.d.comb += [self.done.payload.batch.eq(desc.batch), self.done.payload.op.eq(desc.op),
                     self.done.payload.error.eq(error)]

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.desc.ready.eq(1)
                with m.If(self.desc.valid):
                    d = self.desc.payload
                    # A commit's fields, taken with every descriptor: its checks
                    # below do not run on into them.
                    m.d.comb += scan.seal_load.eq(1)
                    m.d.sync += [desc.eq(d), error.eq(ErrorCode.NONE)]
                    with m.Switch(d.op):
                        with m.Case(Op.COMMIT):
                            with m.If(~ready):
                                m.d.sync += error.eq(ErrorCode.NOT_RECOVERED)
                                m.next = "COMPLETE"
                            with m.Elif(committed_valid & (d.batch <= committed)):
                                m.d.sync += error.eq(ErrorCode.BAD_BATCH)
                                m.next = "COMPLETE"
                            with m.Else():
                                m.d.comb += scan.seal_arm.eq(1)
                                m.next = "COMMIT"
                        with m.Case(Op.SNAPSHOT_MLP):
                            with m.If(~ready):
                                m.d.sync += error.eq(ErrorCode.NOT_RECOVERED)
                                m.next = "COMPLETE"
                            with m.Elif(~committed_valid | (d.batch > committed)):
                                m.d.sync += error.eq(ErrorCode.BAD_BATCH)
                                m.next = "COMPLETE"
                            with m.Elif(self.mlp_addr[:6] != 0):
                                m.d.sync += error.eq(ErrorCode.BAD_POINTER)
                                m.next = "COMPLETE"
                            with m.Elif((self.mlp_lines == 0)
                                        | (self.mlp_lines > cfg.snapshot_size - 1)):
                                m.d.sync += error.eq(ErrorCode.BAD_SIZE)
                                m.next = "COMPLETE"
                            with m.Else():
                                m.next = "SNAPSHOT"
                        with m.Case(Op.RECOVER):
                            m.d.comb += scan.start.eq(1)
                            m.next = "RECOVER"
                        with m.Default():
                            m.d.sync += error.eq(ErrorCode.BAD_OP)
                            m.next = "COMPLETE"
            with m.State("COMMIT"):
                m.d.comb += scan.commit_write.eq(1)
                with m.If(scan.commit_taken):
                    m.next = "COMMIT_WAIT"
            with m.State("COMMIT_WAIT"):
                with m.If(scan.drained):
                    m.d.sync += [committed.eq(desc.batch), committed_valid.eq(1),
                                 commit_next.eq(Mux(commit_next == cfg.commit_lines - 1, 0,
                                                    commit_next + 1))]
                    m.next = "COMPLETE"
            with m.State("SNAPSHOT"):
                # The staged copy must not change under a running pull: wait for it.
                with m.If(~puller.busy):
                    m.d.comb += puller.start.eq(1)
                    m.d.sync += [pull_slot.eq(older), pull_batch.eq(desc.batch),
                                 sv.bit_select(older, 1).eq(0)]
                    m.next = "COMPLETE"
                with m.Else():
                    m.d.sync += self.stall_cycles.eq(self.stall_cycles + 1)
            with m.State("RECOVER"):
                # The state is taken from the scanner in the cycles it finds it.
                with m.If(scan.begun):
                    m.d.sync += [ready.eq(0), self.recovered_flags.eq(0)]
                    if cfg.register_slices:
                        m.d.sync += self.logging.eq(0)
                with m.If(scan.snapshots):
                    m.d.sync += [sv.eq(scan.snapshots_valid), sb[0].eq(scan.snapshot_batches[0]),
                                 sb[1].eq(scan.snapshot_batches[1])]
                last = cfg.commit_lines - 1
                with m.If(scan.none):
                    m.d.sync += [error.eq(ErrorCode.NO_CHECKPOINT), ready.eq(1),
                                 k_eff.eq(self.staleness),
                                 gen.eq(Mux(scan.found, scan.best_gen + 1, 0)),
                                 committed_valid.eq(0),
                                 commit_next.eq(Mux(scan.found & (scan.best_slot != last),
                                                    scan.best_slot + 1, 0)),
                                 sv.eq(0)]
                    m.next = "COMPLETE"
                with m.If(scan.done):
                    m.d.sync += [
                        ready.eq(1), gen.eq(scan.best_gen + 1), k_eff.eq(scan.best_k),
                        committed.eq(scan.d_batch), committed_valid.eq(1),
                        commit_next.eq(Mux(scan.seal_slot == last, 0, scan.seal_slot + 1)),
                        self.recovered_d.eq(scan.d_batch), self.recovered_m.eq(scan.m_batch),
                        self.recovered_flags.eq(Cat(C(1, 1), scan.m_found) if cfg.pool.member
                                                else 0b11),
                        self.rolled_back.eq(scan.rolled),
                    ]
                    m.next = "COMPLETE"
            with m.State("COMPLETE"):
                m.d.comb += self.done.valid.eq(1)
                with m.If(self.done.ready):
                    m.next = "IDLE"

        m.d.sync += self.recover_cycles.eq(self.recover_cycles + scan.recovering)
        return m

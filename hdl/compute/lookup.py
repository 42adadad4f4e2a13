"""The lookup engine: EmbeddingBag-sum of a batch, from PMEM to host memory."""

from amaranth import *
from amaranth.hdl import ResetInserter
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from trainingcxl.spec.descriptors import ErrorCode, Op, completion_layout, descriptor_layout
from trainingcxl.spec.config import ADDR_BITS
from trainingcxl.spec.registers import Reg
from ..common.host_reader import HostWordReader
from ..common.line_port import LinePortSignature
from ..common.undo_tap import UndoTapSignature
from .bags import BagSequencer
from .finish import Finisher
from .gather import RowGather, defer_layout
from .pool import SumPool
from .vector_writer import VectorWriter

__all__ = ["LookupEngine"]


class _Datapath(Elaboratable):
    """Readers, gather, pooler and writer, wired; reset as one between descriptors."""

    def __init__(self, config, pmem_tag_bits):
        self.off_reader = HostWordReader(window=config.host_window, count_bits=25,
                                         registered=config.register_slices)
        self.idx_reader = HostWordReader(window=config.host_window, count_bits=32,
                                         registered=config.register_slices)
        self.gather = RowGather(config, tag_bits=pmem_tag_bits)
        self.pool = SumPool(config, rdata_shape=self.gather.pmem.rdata.payload.shape())
        self.writer = VectorWriter(config)

    def elaborate(self, platform):
        m = Module()
        m.submodules.off_reader = self.off_reader
        m.submodules.idx_reader = self.idx_reader
        m.submodules.gather = self.gather
        m.submodules.pool = self.pool
        m.submodules.writer = self.writer
        wiring.connect(m, self.idx_reader.words, self.gather.indices)
        wiring.connect(m, self.gather.marks, self.pool.marks)
        wiring.connect(m, self.pool.pooled, self.writer.vectors)
        return m


class LookupEngine(wiring.Component):
    """Runs ``LOOKUP`` descriptors (docs/design.md, "Operations").

    For a batch in CSR form it reads the offsets and the indices from host
    memory (CXL.cache), gathers every row from PMEM with many reads in flight,
    sum-pools each bag and writes the pooled vectors back to host memory.

    Bag ``k`` belongs to table ``k % tables``. Checks made while the batch
    streams in: offsets start at 0, never decrease and end at ``n_indices``;
    no bag exceeds ``max_pooling``; every index is a row of its table. A failed
    check stops the descriptor: the engine issues nothing more, waits for what
    is in flight, and completes with the error code. Lookup never writes PMEM.

    Members
    -------
    desc : In(stream.Signature(descriptor_layout))
        ``LOOKUP`` and ``FINISH`` descriptors (other operations complete with
        ``BAD_OP``). A relaxed ``LOOKUP`` leaves out the rows the previous
        batch touched; ``FINISH``, after that batch's update, adds them
        (:class:`~.finish.Finisher`, docs/relaxed-lookup.md). Without the
        ``relaxed`` block (``Config.blocks``) both complete with ``BAD_OP``.
    done : Out(stream.Signature(completion_layout))
    pmem : Out(LinePortSignature)
        PMEM client port (reads).
    off_mem, idx_mem, out_mem : Out(LinePortSignature)
        CXL.cache agent client ports.
    busy : Out(1)
        A descriptor has been taken and has not completed yet.
    busy_cycles, lines, bags, overflows : Out(32)
        Cycles with a descriptor running, PMEM lines read, bags pooled, bags
        whose pooled vector overflowed.
    stall_cycles : Out(32)
        Busy cycles in which no PMEM read went out.
    log : Out(UndoTapSignature)
        Rows read, to the undo logger (``LOOKUP`` and ``FINISH`` both log). When
        the logger says ``full`` a row is read without its record and the
        descriptor completes with ``LOG_TOO_SMALL`` (its pooled results are
        still right; its ``UPDATE`` is then refused).
    log_holds : Out(32)
        Cycles a row read waited for room in the undo logger.
    """

    def __init__(self, config, *, pmem_tag_bits=16):
        self._config = config
        self._pmem_tag_bits = pmem_tag_bits
        host_sig = LinePortSignature(addr_bits=ADDR_BITS, tag_bits=8)
        super().__init__({
            "desc": In(stream.Signature(descriptor_layout(config))),
            "done": Out(stream.Signature(completion_layout)),
            "pmem": Out(LinePortSignature(addr_bits=config.media_addr_bits, tag_bits=pmem_tag_bits)),
            "off_mem": Out(host_sig),
            "idx_mem": Out(host_sig),
            "out_mem": Out(host_sig),
            "busy": Out(1),
            "busy_cycles": Out(32),
            "stall_cycles": Out(32),
            "lines": Out(32),
            "bags": Out(32),
            "overflows": Out(32),
            "log": Out(UndoTapSignature(config.media_addr_bits)),
            "log_holds": Out(32),
        })

    @property
    def counters(self):
        """The control window's registers this engine drives: ``{Reg: value}``, or
        ``{Reg: {field: value}}`` for some fields of one (the device connects them)."""
        return {Reg.LOOKUP_BUSY: self.busy_cycles, Reg.LOOKUP_LINES: self.lines,
                Reg.LOOKUP_BAGS: self.bags, Reg.LOOKUP_OVERFLOWS: self.overflows,
                Reg.LOOKUP_STALLS: self.stall_cycles, Reg.LOOKUP_LOG_HOLDS: self.log_holds}

    def elaborate(self, platform):
        m = Module()
        cfg = self._config

        clear = Signal()
        dp = _Datapath(cfg, self._pmem_tag_bits)
        m.submodules.datapath = ResetInserter(clear)(dp)

        wiring.connect(m, dp.off_reader.mem, wiring.flipped(self.off_mem))
        wiring.connect(m, dp.idx_reader.mem, wiring.flipped(self.idx_mem))

        has_relaxed = "relaxed" in cfg.blocks
        # Rows a relaxed lookup deferred wait here, across the update, for FINISH.
        defer_reset = Signal()
        finishing = Signal()
        if has_relaxed:
            dl = defer_layout(cfg)
            defer_q = fifo.SyncFIFOBuffered(width=dl.size, depth=cfg.defer_depth)
            m.submodules.defer_q = ResetInserter(defer_reset)(defer_q)
            m.d.comb += [
                defer_q.w_data.eq(dp.gather.defer_data),
                defer_q.w_en.eq(dp.gather.defer_push),
                dp.gather.defer_room.eq(defer_q.w_rdy),
            ]
            m.submodules.finisher = fin = Finisher(cfg, pmem_tag_bits=self._pmem_tag_bits)
            m.d.comb += [
                fin.deferred.valid.eq(defer_q.r_rdy),
                fin.deferred.payload.eq(defer_q.r_data),
                defer_q.r_en.eq(fin.deferred.ready),
                fin.pending.eq(defer_q.level != 0),
            ]
            clients = ((dp.gather.pmem, dp.writer.mem, ~finishing),
                       (fin.pmem, fin.host, finishing))
        else:
            fin = None
            clients = ((dp.gather.pmem, dp.writer.mem, Const(1)),)

        desc = Signal(descriptor_layout(cfg))

        # PMEM and the output port serve the lookup datapath, or FINISH.
        pre_valid = Signal()
        pre_ready = Signal()
        pre = Signal.like(self.pmem.req.payload)
        for src_pmem, src_host, sel in clients:
            with m.If(sel):
                m.d.comb += [
                    pre_valid.eq(src_pmem.req.valid),
                    pre.eq(src_pmem.req.payload),
                    src_pmem.req.ready.eq(pre_ready),
                    self.out_mem.req.valid.eq(src_host.req.valid),
                    self.out_mem.req.payload.eq(src_host.req.payload),
                    src_host.req.ready.eq(self.out_mem.req.ready),
                    src_host.rdata.valid.eq(self.out_mem.rdata.valid),
                    src_host.rdata.payload.eq(self.out_mem.rdata.payload),
                    self.out_mem.rdata.ready.eq(src_host.rdata.ready),
                    src_host.wack.valid.eq(self.out_mem.wack.valid),
                    src_host.wack.payload.eq(self.out_mem.wack.payload),
                    self.out_mem.wack.ready.eq(src_host.wack.ready),
                ]
        stage_valid, log_short = self._log_stage(m, pre, pre_valid, pre_ready, desc)

        pmem_in_flight = self._read_data(m, dp, fin, finishing)

        error = Signal(ErrorCode)
        # The batch whose clean relaxed lookup filled the deferred list.
        owner = Signal(32)
        owner_valid = Signal()
        with m.If(defer_reset):
            m.d.sync += owner_valid.eq(0)

        # -- offsets -> bags, checked as they stream in
        bags = BagSequencer(cfg)
        # Cleared with the datapath: between an aborted batch and the next
        # start, an offset left in its register slice must not meet the next
        # descriptor's n_indices.
        m.submodules.bags = ResetInserter(clear)(bags)
        m.d.comb += [bags.n_bags.eq(desc.n_bags), bags.n_indices.eq(desc.n_indices),
                     dp.gather.batch.eq(desc.batch), dp.gather.relaxed.eq(desc.relaxed)]
        if has_relaxed:
            m.d.comb += fin.vec_addr.eq(desc.vec_addr)
        wiring.connect(m, dp.off_reader.words, bags.offsets)
        wiring.connect(m, bags.bags, dp.gather.bags)

        # -- sequencing
        abort = Signal()
        # Nothing in flight and nothing still offered: only then may the datapath be cleared.
        offering = (dp.off_reader.mem.req.valid | dp.idx_reader.mem.req.valid
                    | dp.writer.mem.req.valid | dp.gather.pmem.req.valid | stage_valid)
        quiet = ((dp.off_reader.outstanding == 0) & (dp.idx_reader.outstanding == 0)
                 & (dp.writer.outstanding == 0) & (pmem_in_flight == 0) & ~offering)
        # ``n_bags + 1`` offsets, from a register: the descriptor is loaded two
        # cycles before the readers start, and the adder stays off their path.
        off_count = Signal(25)
        m.d.sync += off_count.eq(desc.n_bags + 1)
        m.d.comb += [
            dp.off_reader.stop.eq(abort), dp.idx_reader.stop.eq(abort),
            dp.gather.stop.eq(abort), dp.writer.discard.eq(abort),
            dp.off_reader.addr.eq(desc.off_addr), dp.off_reader.count.eq(off_count),
            dp.idx_reader.addr.eq(desc.idx_addr), dp.idx_reader.count.eq(desc.n_indices),
            dp.writer.addr.eq(desc.vec_addr), dp.writer.count.eq(desc.n_bags),
            self.done.payload.batch.eq(desc.batch),
            self.done.payload.op.eq(desc.op),
            self.done.payload.error.eq(error),
        ]
        # While aborting, the pooler keeps draining the reads in flight (the
        # writer discards what it pools), so PMEM's shared read queue never blocks.

        found = self._first_error(m, dp, bags)

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.desc.ready.eq(1)
                with m.If(self.desc.valid):
                    p = self.desc.payload
                    m.d.sync += [desc.eq(p), error.eq(ErrorCode.NONE), log_short.eq(0)]
                    refused = p.op != Op.LOOKUP
                    if not has_relaxed:
                        refused = refused | p.relaxed   # relaxed order needs the relaxed block
                    with m.If(p.op == Op.FINISH):
                        if has_relaxed:
                            # Only the batch whose relaxed lookup filled the list.
                            with m.If(owner_valid & (p.batch == owner)):
                                m.next = "FINISH_START"
                            with m.Else():
                                m.d.sync += error.eq(ErrorCode.NOT_DEFERRED)
                                m.next = "COMPLETE"
                        else:
                            m.d.sync += error.eq(ErrorCode.BAD_OP)
                            m.next = "COMPLETE"
                    with m.Elif(refused):
                        m.d.sync += error.eq(ErrorCode.BAD_OP)
                        m.next = "COMPLETE"
                    with m.Elif((p.n_bags == 0) | (p.n_bags > cfg.max_bags)):
                        m.d.sync += error.eq(ErrorCode.BAD_SIZE)
                        m.next = "COMPLETE"
                    with m.Else():
                        m.next = "CLEAR"
            with m.State("CLEAR"):
                # A new lookup also forgets rows an earlier one deferred.
                m.d.comb += [clear.eq(1), defer_reset.eq(1), self.busy.eq(1)]
                m.next = "START"
            if has_relaxed:
                with m.State("FINISH_START"):
                    m.d.comb += [fin.start.eq(1), finishing.eq(1), self.busy.eq(1)]
                    m.next = "FINISH"
                with m.State("FINISH"):
                    m.d.comb += [finishing.eq(1), fin.run.eq(1), self.busy.eq(1)]
                    with m.If(fin.done):
                        m.d.sync += owner_valid.eq(0)
                        m.d.sync += error.eq(Mux(fin.error, ErrorCode.HOST_WRITE,
                                                 Mux(log_short, ErrorCode.LOG_TOO_SMALL,
                                                     ErrorCode.NONE)))
                        m.next = "COMPLETE"
            with m.State("START"):
                m.d.comb += [dp.off_reader.start.eq(1), dp.idx_reader.start.eq(1),
                             dp.writer.start.eq(1), bags.start.eq(1), self.busy.eq(1)]
                m.next = "RUN"
            with m.State("RUN"):
                m.d.comb += self.busy.eq(1)
                with m.If(found != ErrorCode.NONE):
                    m.d.sync += error.eq(found)
                    m.next = "ABORT"
                with m.Elif(dp.writer.done):
                    with m.If(log_short):
                        m.d.sync += error.eq(ErrorCode.LOG_TOO_SMALL)
                    m.next = "COMPLETE"
            with m.State("ABORT"):
                m.d.comb += [self.busy.eq(1), abort.eq(1)]
                with m.If(quiet):
                    m.next = "FLUSH"
            with m.State("FLUSH"):
                # Drop whatever the aborted batch left in the datapath, still
                # holding every issuer back during this last cycle.
                m.d.comb += [clear.eq(1), abort.eq(1), defer_reset.eq(1), self.busy.eq(1)]
                m.next = "COMPLETE"
            with m.State("COMPLETE"):
                m.d.comb += [self.done.valid.eq(1), self.busy.eq(1)]
                with m.If(self.done.ready):
                    with m.If((desc.op == Op.LOOKUP) & desc.relaxed & (error == ErrorCode.NONE)):
                        m.d.sync += [owner.eq(desc.batch), owner_valid.eq(1)]
                    m.next = "IDLE"

        self._count(m, dp, abort)
        return m

    def _log_stage(self, m, pre, pre_valid, pre_ready, desc):
        """The stage every PMEM request passes, where the undo logger is asked about its row.
        Returns whether the stage holds a request, and whether a row was read unlogged
        for want of room in the log."""
        cfg = self._config
        # Undo logging: the first line of each row offered to PMEM asks the
        # logger whether the row needs a record in this batch; if it does and
        # the logger has no room, the read waits. Reads of logged rows carry
        # tag bit 15, and their data goes to the logger as well as the pooler.
        # Requests pass a stage register, so that the logger reads the row's
        # stamp (block RAM) while the request waits there.
        log = self.log
        stage_valid = Signal()
        stage = Signal.like(pre)
        stage_fire = self.pmem.req.valid & self.pmem.req.ready
        # With register slices the stage takes a request only once empty (a
        # request every other cycle, more than the boards' PMEM reads): the
        # logger's answer and PMEM's ready then stop at the stage, instead of
        # running on into the gather.
        m.d.comb += [pre_ready.eq(~stage_valid if cfg.register_slices
                                  else ~stage_valid | stage_fire),
                     log.peek.eq(pre_valid & pre_ready), log.peek_addr.eq(pre.addr)]
        with m.If(pre_valid & pre_ready):
            m.d.sync += [stage_valid.eq(1), stage.eq(pre)]
        with m.Elif(stage_fire):
            m.d.sync += stage_valid.eq(0)
        first = stage.tag[:3] == 0
        cur_log = Signal()
        # With the ring full of records nothing running can free, a row is read
        # unlogged rather than waited for in vain, and the descriptor fails.
        want = log.need & ~desc.nolog
        need = want & ~log.full
        hold = first & ((need & ~log.room) | (~desc.nolog & ~log.known))
        log_short = Signal()
        log_bit = Mux(first, need, cur_log)
        m.d.comb += [
            log.offer.eq(stage_valid & first & ~desc.nolog),
            log.addr.eq(stage.addr), log.batch.eq(desc.batch),
            self.pmem.req.valid.eq(stage_valid & ~hold),
            self.pmem.req.payload.eq(stage),
            self.pmem.req.payload.tag[15].eq(log_bit),
        ]
        req_fire = stage_fire
        m.d.comb += log.take.eq(req_fire & first & need)
        with m.If(req_fire & first):
            m.d.sync += cur_log.eq(need)
        with m.If(req_fire & first & want & log.full):
            m.d.sync += log_short.eq(1)
        with m.If(stage_valid & hold):
            m.d.sync += self.log_holds.eq(self.log_holds + 1)
        return stage_valid, log_short

    def _read_data(self, m, dp, fin, finishing):
        """PMEM read data to the pooler of whichever is running (the datapath or FINISH, ``fin``)
        and to the logger; returns the count of PMEM reads in flight."""
        log = self.log
        has_relaxed = fin is not None
        # PMEM read data goes to the pooler of whichever is running (and to the logger).
        logged = self.pmem.rdata.payload.tag[15]
        gate = ~logged | log.lines.ready
        if has_relaxed:
            rd_sink = Mux(finishing, fin.pmem.rdata.ready, dp.pool.rdata.ready)
            m.d.comb += [
                fin.pmem.rdata.valid.eq(self.pmem.rdata.valid & finishing & gate),
                fin.pmem.rdata.payload.eq(self.pmem.rdata.payload),
            ]
        else:
            rd_sink = dp.pool.rdata.ready
        m.d.comb += [
            dp.pool.rdata.valid.eq(self.pmem.rdata.valid & ~finishing & gate),
            dp.pool.rdata.payload.eq(self.pmem.rdata.payload),
            self.pmem.rdata.ready.eq(rd_sink & gate),
            log.lines.valid.eq(self.pmem.rdata.valid & logged & rd_sink),
            log.lines.payload.eq(self.pmem.rdata.payload.data),
            self.pmem.wack.ready.eq(1),
        ]
        pmem_in_flight = Signal(16)
        m.d.sync += pmem_in_flight.eq(pmem_in_flight
                                      + (self.pmem.req.valid & self.pmem.req.ready)
                                      - (self.pmem.rdata.valid & self.pmem.rdata.ready))
        return pmem_in_flight

    def _first_error(self, m, dp, bags):
        """The first error the datapath reports, by priority (``NONE`` while there is none)."""
        found = Signal(ErrorCode)
        with m.If(bags.error != ErrorCode.NONE):
            m.d.comb += found.eq(bags.error)
        with m.Elif(dp.gather.range_error):
            m.d.comb += found.eq(ErrorCode.ROW_RANGE)
        with m.Elif(dp.off_reader.error | dp.idx_reader.error):
            m.d.comb += found.eq(ErrorCode.HOST_POISON)
        with m.Elif(dp.writer.error):
            m.d.comb += found.eq(ErrorCode.HOST_WRITE)
        with m.Elif(dp.gather.defer_overflow):
            m.d.comb += found.eq(ErrorCode.DEFER_OVERFLOW)
        return found

    def _count(self, m, dp, abort):
        """Counters over the engine's life (the datapath's own restart per descriptor)."""
        pooled = dp.pool.pooled
        pooled_fire = pooled.valid & pooled.ready & ~abort
        m.d.sync += [
            self.busy_cycles.eq(self.busy_cycles + self.busy),
            # Busy without a PMEM read going out: waiting for the host, the log or PMEM.
            self.stall_cycles.eq(self.stall_cycles
                                 + (self.busy & ~(self.pmem.req.valid & self.pmem.req.ready))),
            self.lines.eq(self.lines + (self.pmem.req.valid & self.pmem.req.ready)),
            self.bags.eq(self.bags + pooled_fire),
            self.overflows.eq(self.overflows + (pooled_fire & pooled.payload.overflow)),
        ]

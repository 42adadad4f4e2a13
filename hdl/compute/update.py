"""The update engine: scatter the per-bag gradient deltas into the embedding rows in PMEM."""

from amaranth import *
from amaranth.hdl import ResetInserter
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from trainingcxl.spec.config import ADDR_BITS, LINE_BITS
from trainingcxl.spec.descriptors import ErrorCode, Op, completion_layout, descriptor_layout
from trainingcxl.spec.registers import Reg
from ..common.host_reader import HostLineReader, HostWordReader
from ..common.line_port import LinePortSignature
from .bags import BagSequencer, bag_layout
from .rmw import RmwUnit, rmw_layout

__all__ = ["RowScatter", "UpdateEngine"]


class RowScatter(wiring.Component):
    """Pairs every row of every bag with its bag's delta: one RMW request per row line.

    For each bag it takes ``lines_per_row`` delta lines (also for an empty
    bag, whose deltas are skipped), then for each index ``lines_per_row``
    requests ``(table_base[t] + row * lines_per_row + j, delta line j)``. An
    index outside its table sets ``range_error`` and stops the scatter.
    With ``validate`` high it only checks: no deltas are taken and no
    requests made, so a whole batch can be checked before any row changes.

    Members
    -------
    bags : In(stream.Signature(bag_layout))
    indices : In(stream.Signature(32))
    deltas : In(stream.Signature(LINE_BITS))
    requests : Out(stream.Signature(rmw_layout))
    stop : In(1)
    validate : In(1)
    range_error : Out(1)
    checking : Out(1), check_addr : Out(media_addr_bits)
        With ``validate``: a row in range is taken now, and its first line.
    bags_done : Out(24)
        Bags whose every request has been issued.
    """

    def __init__(self, config):
        self._config = config
        super().__init__({
            "bags": In(stream.Signature(bag_layout(config))),
            "indices": In(stream.Signature(32)),
            "deltas": In(stream.Signature(LINE_BITS)),
            "requests": Out(stream.Signature(rmw_layout(config))),
            "stop": In(1),
            "validate": In(1),
            "range_error": Out(1),
            "checking": Out(1),
            "check_addr": Out(config.media_addr_bits),
            "bags_done": Out(24),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._config
        lpr = cfg.lines_per_row
        abits = cfg.media_addr_bits
        base = Array(Const(b, abits) for b in cfg.table_base)
        rows = Array(Const(r, 25) for r in cfg.tables)

        have_bag = Signal()
        table = Signal(range(cfg.n_tables))
        left = Signal(range(cfg.max_pooling + 1))
        loaded = Signal(range(lpr + 1))
        dbuf = Array(Signal(LINE_BITS, name=f"delta{j}") for j in range(lpr))
        row_valid = Signal()
        row_addr = Signal(abits)
        j = Signal(range(lpr))
        offered = Signal()

        # Bags, then their delta lines. Without register slices the next bag and its
        # first delta line are taken in the cycle the bag before ends (its last line
        # is being sent from ``dbuf[lpr - 1]``): two cycles a row of one-row bags (a
        # coalesced update's), not four. The boards keep the plain handshake, whose
        # paths do not run from the RMW unit's ``ready`` into the readers.
        overlap = not cfg.register_slices
        bag_end = Signal()
        free = (~have_bag | bag_end) if overlap else ~have_bag
        m.d.comb += self.bags.ready.eq(free & ~self.stop)
        taking = self.bags.valid & self.bags.ready
        with m.If(taking):
            m.d.sync += [*([] if overlap else [have_bag.eq(1)]), table.eq(self.bags.payload.table),
                         left.eq(self.bags.payload.length), loaded.eq(0)]
        load_at = Mux(taking, 0, loaded) if overlap else loaded
        loading = have_bag & (loaded != lpr)
        m.d.comb += self.deltas.ready.eq(((loading | taking) if overlap else loading)
                                         & ~self.validate)
        with m.If(self.deltas.valid & self.deltas.ready):
            m.d.sync += loaded.eq(load_at + 1)
            for k in range(lpr):
                with m.If(load_at == k):
                    m.d.sync += dbuf[k].eq(self.deltas.payload)
        ready_rows = have_bag & ((loaded == lpr) | self.validate)

        # Requests of the current row, one line per cycle.
        last_line = j == lpr - 1
        m.d.comb += [
            self.requests.valid.eq(row_valid & (~self.stop | offered)),
            self.requests.payload.addr.eq(row_addr + j),
            self.requests.payload.delta.eq(dbuf[j] if lpr > 1 else dbuf[0]),
        ]
        m.d.sync += offered.eq(self.requests.valid & ~self.requests.ready)
        sent = self.requests.valid & self.requests.ready
        row_done = sent & last_line

        # The next index may come in the cycle the current row finishes.
        idx = self.indices.payload
        m.d.comb += self.indices.ready.eq(ready_rows & (left != 0) & (~row_valid | row_done)
                                          & ~self.range_error & ~self.stop)
        took = self.indices.valid & self.indices.ready
        in_range = idx < rows[table]
        with m.If(sent):
            m.d.sync += j.eq(Mux(last_line, 0, j + 1))
        with m.If(row_done):
            m.d.sync += row_valid.eq(0)
        m.d.comb += [self.checking.eq(took & in_range & self.validate),
                     self.check_addr.eq(base[table] + idx[:abits] * lpr)]
        with m.If(took):
            with m.If(in_range):
                m.d.sync += [row_valid.eq(~self.validate), row_addr.eq(self.check_addr),
                             left.eq(left - 1)]
            with m.Else():
                m.d.sync += self.range_error.eq(1)
        # A bag ends when its last row has been sent (or at once when empty).
        ended = ready_rows & (left == 0) & (~row_valid | row_done)
        if overlap:
            m.d.comb += bag_end.eq(ended)
        with m.If(ended):
            m.d.sync += [have_bag.eq(0), self.bags_done.eq(self.bags_done + 1)]
        if overlap:
            with m.If(taking):          # after the end above: the next bag wins
                m.d.sync += have_bag.eq(1)
        return m


class _Datapath(Elaboratable):
    def __init__(self, config):
        self._config = config
        self.off_reader = HostWordReader(window=config.host_window, count_bits=25,
                                         registered=config.register_slices)
        self.idx_reader = HostWordReader(window=config.host_window, count_bits=32,
                                         registered=config.register_slices)
        self.delta_reader = HostLineReader(window=config.host_window, count_bits=28)
        self.bags = BagSequencer(config)
        self.scatter = RowScatter(config)
        self.rmw = RmwUnit(config)

    def elaborate(self, platform):
        m = Module()
        for name in ("off_reader", "idx_reader", "delta_reader", "bags", "scatter", "rmw"):
            m.submodules[name] = getattr(self, name)
        wiring.connect(m, self.off_reader.words, self.bags.offsets)
        wiring.connect(m, self.bags.bags, self.scatter.bags)
        wiring.connect(m, self.idx_reader.words, self.scatter.indices)
        wiring.connect(m, self.delta_reader.lines, self.scatter.deltas)
        wiring.connect(m, self.scatter.requests, self.rmw.requests)
        return m


class UpdateEngine(wiring.Component):
    """Runs ``UPDATE`` descriptors (docs/design.md, "Operations").

    The batch is the same CSR form as for ``LOOKUP``; ``vec_addr`` points at
    the per-bag deltas (``n_bags * lines_per_row`` lines, bag ``k`` at
    ``vec_addr + k * lines_per_row``), already scaled by the learning rate and
    in the embedding fixed point (see :mod:`trainingcxl.host.model.dlrm`). Every row
    of bag ``k`` becomes ``row - delta_k``, lane by lane, wrapping; a row in
    several bags, or several times in one, gets every contribution (the RMW
    unit orders or forwards them). The descriptor completes when every write
    is persistent.

    The batch is checked before any row changes: unless the descriptor
    comes ``checked`` (a clean ``LOOKUP`` of the same batch already checked
    it), a first pass streams the offsets and indices through the same checks
    (offsets, pooling, row range) without touching PMEM, and only a clean
    batch is applied in a second pass, which reads them again with the deltas. The extra
    pass reads 4 bytes of host memory per row against the 128 bytes of PMEM
    traffic a row line costs. Poisoned host data met during the second pass
    stops the descriptor with rows already rewritten (rolling those back is
    the undo log's job).

    Members
    -------
    desc : In(stream.Signature(descriptor_layout))
    done : Out(stream.Signature(completion_layout))
    pmem_rd, pmem_wr : Out(LinePortSignature)
    off_mem, idx_mem, delta_mem : Out(LinePortSignature)
    busy : Out(1)
    logging : In(1)
        Undo logging is on: a ``coalesced`` batch may only change rows its
        lookup logged, checked against the logger before any row changes, else
        ``NOT_LOGGED``: ``log_query`` asks for the row at ``log_addr`` and
        ``log_ok`` answers ``log_query_latency`` cycles after (:class:`Config`).
    log_query : Out(1), log_addr : Out(media_addr_bits), log_batch : Out(32), log_ok : In(1)
    busy_cycles, lines, forwarded : Out(32)
    stall_cycles : Out(32)
        Busy cycles in which neither a PMEM read nor a PMEM write went out.
    """

    def __init__(self, config):
        self._config = config
        host_sig = LinePortSignature(addr_bits=ADDR_BITS, tag_bits=8)
        pmem_sig = LinePortSignature(addr_bits=config.media_addr_bits, tag_bits=16)
        super().__init__({
            "desc": In(stream.Signature(descriptor_layout(config))),
            "done": Out(stream.Signature(completion_layout)),
            "pmem_rd": Out(pmem_sig),
            "pmem_wr": Out(pmem_sig),
            "off_mem": Out(host_sig),
            "idx_mem": Out(host_sig),
            "delta_mem": Out(host_sig),
            "busy": Out(1),
            "logging": In(1),
            "log_query": Out(1),
            "log_addr": Out(config.media_addr_bits),
            "log_batch": Out(32),
            "log_ok": In(1),
            "busy_cycles": Out(32),
            "stall_cycles": Out(32),
            "lines": Out(32),
            "forwarded": Out(32),
        })

    @property
    def counters(self):
        """The control window's registers this engine drives: ``{Reg: value}``, or
        ``{Reg: {field: value}}`` for some fields of one (the device connects them)."""
        return {Reg.UPDATE_BUSY: self.busy_cycles, Reg.UPDATE_LINES: self.lines,
                Reg.UPDATE_FORWARDED: self.forwarded, Reg.UPDATE_STALLS: self.stall_cycles}

    def elaborate(self, platform):
        m = Module()
        cfg = self._config

        clear = Signal()
        dp = _Datapath(cfg)
        m.submodules.datapath = ResetInserter(clear)(dp)
        wiring.connect(m, dp.off_reader.mem, wiring.flipped(self.off_mem))
        wiring.connect(m, dp.idx_reader.mem, wiring.flipped(self.idx_mem))
        wiring.connect(m, dp.delta_reader.mem, wiring.flipped(self.delta_mem))
        wiring.connect(m, dp.rmw.pmem_rd, wiring.flipped(self.pmem_rd))
        wiring.connect(m, dp.rmw.pmem_wr, wiring.flipped(self.pmem_wr))

        desc = Signal(descriptor_layout(cfg))
        error = Signal(ErrorCode)
        abort = Signal()
        validate = Signal()
        m.d.comb += dp.scatter.validate.eq(validate)
        # As in the lookup engine, the offsets' count comes from a register.
        off_count = Signal(25)
        m.d.sync += off_count.eq(desc.n_bags + 1)
        m.d.comb += [
            dp.bags.n_bags.eq(desc.n_bags), dp.bags.n_indices.eq(desc.n_indices),
            dp.off_reader.addr.eq(desc.off_addr), dp.off_reader.count.eq(off_count),
            dp.idx_reader.addr.eq(desc.idx_addr), dp.idx_reader.count.eq(desc.n_indices),
            dp.delta_reader.addr.eq(desc.vec_addr),
            dp.delta_reader.count.eq(desc.n_bags * cfg.lines_per_row),
            dp.off_reader.stop.eq(abort), dp.idx_reader.stop.eq(abort),
            dp.delta_reader.stop.eq(abort), dp.scatter.stop.eq(abort),
            self.done.payload.batch.eq(desc.batch),
            self.done.payload.op.eq(desc.op),
            self.done.payload.error.eq(error),
        ]

        found = Signal(ErrorCode)
        m.d.comb += [self.log_query.eq(dp.scatter.checking),
                     self.log_addr.eq(dp.scatter.check_addr), self.log_batch.eq(desc.batch)]
        # The logger answers ``log_query_latency`` cycles after the question; the
        # check pass ends only once every answer is in.
        asked = Signal(cfg.log_query_latency)
        m.d.sync += asked.eq(Cat(dp.scatter.checking, asked[:-1]))
        unlogged = asked[-1] & desc.coalesced & self.logging & ~self.log_ok
        with m.If(dp.bags.error != ErrorCode.NONE):
            m.d.comb += found.eq(dp.bags.error)
        with m.Elif(dp.scatter.range_error):
            m.d.comb += found.eq(ErrorCode.ROW_RANGE)
        with m.Elif(unlogged):
            m.d.comb += found.eq(ErrorCode.NOT_LOGGED)
        with m.Elif(dp.off_reader.error | dp.idx_reader.error | dp.delta_reader.error):
            m.d.comb += found.eq(ErrorCode.HOST_POISON)

        readers_quiet = ((dp.off_reader.outstanding == 0) & (dp.idx_reader.outstanding == 0)
                         & (dp.delta_reader.outstanding == 0) & ~dp.off_reader.mem.req.valid
                         & ~dp.idx_reader.mem.req.valid & ~dp.delta_reader.mem.req.valid)
        rmw_quiet = dp.rmw.idle & ~dp.scatter.requests.valid

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.desc.ready.eq(1)
                with m.If(self.desc.valid):
                    m.d.sync += [desc.eq(self.desc.payload), error.eq(ErrorCode.NONE)]
                    with m.If(self.desc.payload.op != Op.UPDATE):
                        m.d.sync += error.eq(ErrorCode.BAD_OP)
                        m.next = "COMPLETE"
                    with m.Elif((self.desc.payload.n_bags == 0)
                                | (self.desc.payload.n_bags > cfg.max_bags)):
                        m.d.sync += error.eq(ErrorCode.BAD_SIZE)
                        m.next = "COMPLETE"
                    with m.Else():
                        m.next = "CLEAR"
            with m.State("CLEAR"):
                m.d.comb += [clear.eq(1), self.busy.eq(1)]
                with m.If(desc.checked):
                    m.next = "START"
                with m.Else():
                    m.next = "CHECK_START"
            with m.State("CHECK_START"):
                m.d.comb += [dp.off_reader.start.eq(1), dp.idx_reader.start.eq(1),
                             dp.bags.start.eq(1), self.busy.eq(1), validate.eq(1)]
                m.next = "CHECK"
            with m.State("CHECK"):
                m.d.comb += [self.busy.eq(1), validate.eq(1)]
                with m.If(found != ErrorCode.NONE):
                    m.d.sync += error.eq(found)
                    m.next = "ABORT"
                with m.Elif((dp.scatter.bags_done == desc.n_bags) & ~asked.any()):
                    m.next = "CLEAR_AGAIN"
            with m.State("CLEAR_AGAIN"):
                m.d.comb += [clear.eq(1), self.busy.eq(1)]
                m.next = "START"
            with m.State("START"):
                m.d.comb += [dp.off_reader.start.eq(1), dp.idx_reader.start.eq(1),
                             dp.delta_reader.start.eq(1), dp.bags.start.eq(1), self.busy.eq(1)]
                m.next = "RUN"
            with m.State("RUN"):
                m.d.comb += self.busy.eq(1)
                with m.If(found != ErrorCode.NONE):
                    m.d.sync += error.eq(found)
                    m.next = "ABORT"
                with m.Elif((dp.scatter.bags_done == desc.n_bags) & rmw_quiet):
                    m.next = "COMPLETE"
            with m.State("ABORT"):
                # Requests already accepted by the RMW unit finish; nothing new starts.
                m.d.comb += [self.busy.eq(1), abort.eq(1)]
                with m.If(readers_quiet & rmw_quiet):
                    m.next = "FLUSH"
            with m.State("FLUSH"):
                m.d.comb += [clear.eq(1), abort.eq(1), self.busy.eq(1)]
                m.next = "COMPLETE"
            with m.State("COMPLETE"):
                m.d.comb += [self.done.valid.eq(1), self.busy.eq(1)]
                with m.If(self.done.ready):
                    m.next = "IDLE"

        m.d.sync += [
            self.busy_cycles.eq(self.busy_cycles + self.busy),
            self.stall_cycles.eq(self.stall_cycles + (self.busy & ~(
                (self.pmem_rd.req.valid & self.pmem_rd.req.ready)
                | (self.pmem_wr.req.valid & self.pmem_wr.req.ready)))),
            self.lines.eq(self.lines + (dp.rmw.pmem_wr.req.valid & dp.rmw.pmem_wr.req.ready)),
            self.forwarded.eq(self.forwarded + dp.rmw.forward_event),
        ]
        return m

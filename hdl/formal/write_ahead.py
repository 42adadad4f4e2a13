"""The write-ahead rule as a formal property of the dispatcher.

No row changes before its undo record is persistent (docs/design.md,
"Checkpoint protocol"). The rule has two halves. The dispatcher's, proved here with the engines and the
logger as a free environment: while logging, it hands an ``UPDATE`` to the
update engine only when the undo logger says ``log_drained``, and only for a
batch whose ``LOOKUP`` completed cleanly with logging on (so the logger took
every row the update may write). The logger's (:class:`LoggerHarness`):
``drained`` only once every row taken is written to the log and acknowledged
by PMEM, that is, persistent.
"""

from amaranth import *
from amaranth.hdl import Assert, Assume
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..checkpoint.layouts import group_layout, header_layout
from ..checkpoint.logger import UndoLogger
from trainingcxl.spec.config import RING_HEADERS
from trainingcxl.spec.descriptors import ErrorCode, Op
from .streams import stream_rule

__all__ = ["dispatcher_write_ahead", "LoggerHarness"]


def _fire(s):
    return s.valid & s.ready


def dispatcher_write_ahead(m, dut):
    """Properties of :class:`~trainingcxl.hdl.dispatch.Dispatcher` (strict order:
    no relaxed or coalesced descriptors, which the proof leaves out)."""
    d = dut.desc.payload
    m.d.comb += Assume(~dut.desc.valid | (~d.relaxed & ~d.coalesced & ~d.checked))
    # The batch of the last LOOKUP handed out per parity, whether it logged, and
    # whether it completed cleanly; a RECOVER forgets them.
    batch = Array(Signal(32, name=f"lookup_batch{k}") for k in range(2))
    logged = Signal(2)
    clean = Signal(2)
    running = Signal()
    with m.If(_fire(dut.lookup) & (dut.lookup.payload.op == Op.LOOKUP)):
        k = dut.lookup.payload.batch[0]
        m.d.sync += [batch[k].eq(dut.lookup.payload.batch), running.eq(k),
                     logged.bit_select(k, 1).eq(dut.logging & ~dut.lookup.payload.nolog),
                     clean.bit_select(k, 1).eq(0)]
    done = dut.lookup_done
    with m.If(_fire(done) & (done.payload.op == Op.LOOKUP)
              & (done.payload.error == ErrorCode.NONE)):
        m.d.sync += clean.bit_select(running, 1).eq(1)
    with m.If(_fire(dut.ckpt) & (dut.ckpt.payload.op == Op.RECOVER)):
        m.d.sync += clean.eq(0)
    # The engines complete only what they were given, echoing its op and batch.
    busy = Signal()
    given_op = Signal.like(d.op)
    given_batch = Signal(32)
    for out in (dut.lookup, dut.update, dut.ckpt):
        with m.If(_fire(out)):
            m.d.sync += [busy.eq(1), given_op.eq(out.payload.op), given_batch.eq(out.payload.batch)]
    for done_ in (dut.lookup_done, dut.update_done, dut.ckpt_done):
        with m.If(_fire(done_)):
            m.d.sync += busy.eq(0)
        with m.If(done_.valid):
            m.d.comb += Assume(busy & (done_.payload.op == given_op)
                               & (done_.payload.batch == given_batch))

    # The undo logger takes rows only from a running LOOKUP: while the
    # dispatcher is idle, ``log_drained`` does not fall.
    was_drained = Signal()
    m.d.sync += was_drained.eq(dut.log_drained & ~dut.busy)
    m.d.comb += Assume(~was_drained | dut.log_drained | dut.busy)
    # The rule holds for the mode at the moment the UPDATE is offered: an offer
    # stands until taken even if the host turns logging on meanwhile.
    offered = Signal()
    logging_at_offer = Signal()
    m.d.sync += offered.eq(dut.update.valid & ~dut.update.ready)
    with m.If(~offered):
        m.d.sync += logging_at_offer.eq(dut.logging)
    logging = Mux(offered, logging_at_offer, dut.logging)

    u = dut.update.payload
    k = u.batch[0]
    with m.If(dut.update.valid & logging):
        m.d.comb += [
            Assert(dut.log_drained, "UPDATE started before the undo log was persistent"),
            Assert(clean.bit_select(k, 1) & logged.bit_select(k, 1) & (batch[k] == u.batch),
                   "UPDATE started without a clean logged LOOKUP of its batch"),
        ]


class LoggerHarness(wiring.Component):
    """The logger's half of the write-ahead rule, for :class:`UndoLogger`.

    The solver drives the tap (rows taken only when the logger asks for
    them and has room, their lines after them, in the stream rule), the PMEM
    port's ``ready`` and acknowledgements (one per write taken, in any
    cycle), ``durable``, ``enable`` and ``flush``. Then, whenever the logger
    says ``drained``, every row it took has all its lines written, and is
    counted in a group line written (the counts of the group lines add up to
    the rows taken); every write is acknowledged; and a ring header was
    written after the last group, saying that all those records are in
    (recovery walks back from it).

    The rows' data does not decide when the logger is drained, so the tap's
    lines carry zeros and only two fields of the PMEM write data are read
    (a group line's count, a ring header's LSN): constant propagation then
    removes most of the 512-bit datapath, whose words the solver could not
    get through in CI time. ``restart`` (around a recovery) is held
    low; what it drops is checked in simulation (``tests/hdl/test_logger.py``).

    ``logger`` is the class under proof (a test substitutes a broken one).

    Members
    -------
    take, lines_valid, pmem_ready, wack_valid, enable, durable_valid, flush : In(1)
    durable : In(32)
    drained : Out(1)
    """

    def __init__(self, config, *, logger=UndoLogger):
        self._config = config
        self._logger = logger
        super().__init__({
            "addr": In(config.media_addr_bits), "batch": In(32), "take": In(1),
            "peek": In(1), "peek_addr": In(config.media_addr_bits),
            "lines_valid": In(1), "pmem_ready": In(1), "wack_valid": In(1),
            "enable": In(1), "durable": In(32), "durable_valid": In(1), "flush": In(1),
            "drained": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._config
        m.submodules.dut = dut = self._logger(cfg)
        tap, port = dut.tap, dut.pmem
        lpr = cfg.lines_per_row
        m.d.comb += [
            tap.addr.eq(self.addr), tap.batch.eq(self.batch), tap.take.eq(self.take),
            tap.peek.eq(self.peek), tap.peek_addr.eq(self.peek_addr),
            tap.lines.valid.eq(self.lines_valid), tap.lines.payload.eq(0),
            port.req.ready.eq(self.pmem_ready), port.wack.valid.eq(self.wack_valid),
            port.rdata.valid.eq(0), dut.enable.eq(self.enable), dut.gen.eq(0),
            dut.durable.eq(self.durable), dut.durable_valid.eq(self.durable_valid),
            dut.flush.eq(self.flush), dut.restart.eq(0), self.drained.eq(dut.drained),
        ]
        taken = Signal(8)
        lines = Signal(8)
        writes = Signal(8)
        data_writes = Signal(8)
        counted = Signal(8)             # records the group lines written hold
        acked = Signal(8)
        covered = Signal()              # a ring header went out after the last group line
        ring_says = Signal(8)           # the records the last ring header says are in
        wfire = port.req.valid & port.req.ready
        addr, line = port.req.payload.addr, port.req.payload.data
        ring = (addr >= cfg.ring_base) & (addr < cfg.ring_base + RING_HEADERS)
        group = Cat(addr == cfg.log_base + k * cfg.group_lines for k in range(cfg.log_groups)).any()
        count = group_layout["count"]
        lsn = header_layout["a"]
        m.d.sync += [
            taken.eq(taken + self.take),
            lines.eq(lines + (tap.lines.valid & tap.lines.ready)),
            writes.eq(writes + wfire),
            data_writes.eq(data_writes + (wfire & ~ring & ~group)),
            acked.eq(acked + port.wack.valid),
        ]
        with m.If(wfire & group):
            m.d.sync += [counted.eq(counted + line[count.offset:count.offset + count.width]),
                         covered.eq(0)]
        with m.If(wfire & ring):
            m.d.sync += [covered.eq(1), ring_says.eq(line[lsn.offset:lsn.offset + 8])]
        # The lookup takes a row only when the logger needs it and has room,
        # then offers its lines (in the stream rule); PMEM acknowledges only
        # writes it took.
        m.d.comb += [
            Assume(~self.take | (tap.need & tap.room)),
            Assume(~self.lines_valid | (lines < taken * lpr)),
            Assume(~self.wack_valid | (acked < writes)),
            Assume(taken < 32),
            # Batch ids matter only through comparisons; four of them reach
            # every order between the rows' batches and ``durable``.
            Assume(self.batch < 4), Assume(self.durable < 4),
        ]
        stream_rule(m, tap.lines, name="lines", assume=True)
        stream_rule(m, port.req, name="pmem_req")
        with m.If(dut.drained):
            m.d.comb += [
                Assert(acked == writes, "drained with a log write not yet acknowledged"),
                Assert(data_writes == taken * lpr,
                       "drained with a taken row not yet written to the log"),
                Assert(counted == taken, "drained with a taken row in no group line"),
                Assert((covered & (ring_says == taken)) | (taken == 0),
                       "drained without a ring header after the records"),
            ]
        return m

"""The write-ahead rule as a formal property of the dispatcher.

No row changes before its undo record is persistent (DESIGN section 7). The
rule has two halves. The dispatcher's, proved here with the engines and the
logger as a free environment: while logging, it hands an ``UPDATE`` to the
update engine only when the undo logger says ``log_drained``, and only for a
batch whose ``LOOKUP`` completed cleanly with logging on (so the logger took
every row the update may write). The logger's (``drained`` only once every
taken record is acknowledged by PMEM) is checked in simulation
(``tests/unit/test_logger.py``): its bounded proof did not finish in CI time.
"""

from amaranth import *
from amaranth.hdl import Assert, Assume

from ..common.descriptor import ErrorCode, Op

__all__ = ["dispatcher_write_ahead"]


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

"""A CXL.mem master in gateware for bulk traffic: a list of line reads or writes
issued from backdoor RAMs, with no Python step per line.

The ``pmem`` system's host reads every row a batch needs and writes every row
and undo record back over CXL.mem; from Python that is a transaction per line
(about 6,000 simulated cycles a second). :class:`MemBulk` sits between the
simulation top's CXL.mem ports and the device: idle, it passes the bench's
master through; started, it issues ``count`` requests itself, the line
addresses from RAM ``bulk_addr`` and, for writes, the data from RAM
``bulk_data``, keeps up to :data:`IN_FLIGHT` outstanding (tag ``i mod
IN_FLIGHT``, like the bench's master), and puts each read's data into
``bulk_data`` at its index. The bench fills and reads the RAMs as numpy arrays
(:mod:`trainingcxl.sim.backdoor`).
"""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from trainingcxl.hdl.common.ram import Ram
from trainingcxl.spec.cxl_messages import M2SReqOpcode, M2SRwDOpcode, S2MNdrOpcode
from trainingcxl.hdl.cxl.channels import CxlMemSignature
from trainingcxl.spec.config import ADDR_BITS, LINE_BITS, LINE_BYTES

__all__ = ["MemBulk", "IN_FLIGHT", "BULK_LINES"]

#: Requests outstanding at once (the bench's CXL.mem master keeps as many).
IN_FLIGHT = 64
#: Lines one bulk operation moves at most (the RAMs' depth).
BULK_LINES = 1 << 16


class MemBulk(wiring.Component):
    """Bulk CXL.mem reads or writes between ``host`` (the bench's ports) and ``dev``.

    Members
    -------
    host : Out(CxlMemSignature)
        The bench's master; passed through while no bulk operation runs.
    dev : In(CxlMemSignature)
        The device.
    start : In(1)
        A cycle high starts an operation of ``count`` lines (``write``: writes of
        ``bulk_data``, else reads into it). The bench must have nothing in flight.
    write : In(1), count : In(32)
    busy : Out(1)
        The operation runs (from the cycle after ``start`` until every response came).
    done : Out(32)
        Operations ended since reset: the bench waits for it to change.
    errors : Out(32)
        Responses of the last operation that failed (``CmpErr``, or poisoned data).
    """

    def __init__(self, *, lines=BULK_LINES):
        self._lines = lines
        self.addrs = Ram(shape=64, depth=lines, backdoor="bulk_addr")
        self.data = Ram(shape=LINE_BITS, depth=lines, backdoor="bulk_data")
        super().__init__({
            "host": Out(CxlMemSignature()),       # a device to the bench's master
            "dev": In(CxlMemSignature()),         # a master to the device
            "start": In(1),
            "write": In(1),
            "count": In(32),
            "busy": Out(1),
            "done": Out(32),
            "errors": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.addrs, m.submodules.data = self.addrs, self.data
        busy, writing = Signal(), Signal()
        count = Signal(32)
        idx = Signal(32)                # the request presented (its words read last cycle)
        primed = Signal()               # the RAM words of ``idx`` are on the read ports
        answered = Signal(32)
        pending = Signal(IN_FLIGHT)     # a request of that tag is outstanding
        owner = Array(Signal(range(self._lines), name=f"owner{t}") for t in range(IN_FLIGHT))
        m.d.comb += self.busy.eq(busy)

        # -- requests: words read a cycle ahead, the next as soon as one is taken
        tbits = (IN_FLIGHT - 1).bit_length()
        tag = idx[:tbits]
        req, rwd = self.dev.m2s_req, self.dev.m2s_rwd
        can = busy & primed & (idx < count) & ~pending.bit_select(tag, 1)
        fire = busy & Mux(writing, rwd.valid & rwd.ready, req.valid & req.ready)
        ar, dr = self.addrs.read_port(), self.data.read_port()
        m.d.comb += [ar.addr.eq(idx + fire), dr.addr.eq(idx + fire)]
        with m.If(busy):
            m.d.sync += [idx.eq(idx + fire), primed.eq(1)]
            with m.If(fire):
                m.d.sync += owner[tag].eq(idx)

        # -- responses: data into the RAM at the request's index
        ndr, drs = self.dev.s2m_ndr, self.dev.s2m_drs
        dw = self.data.write_port()
        got_ndr, got_drs = ndr.valid & busy, drs.valid & busy
        m.d.comb += [
            dw.addr.eq(owner[drs.payload.tag[:tbits]]),
            dw.data.eq(drs.payload.data),
            dw.en.eq(Mux(got_drs & ~writing, -1, 0)),
        ]
        done_tag = Mux(got_drs, drs.payload.tag[:tbits], ndr.payload.tag[:tbits])
        issued = Signal(IN_FLIGHT)
        freed = Signal(IN_FLIGHT)
        m.d.comb += [issued.eq(Mux(fire, 1 << tag, 0)),
                     freed.eq(Mux(got_ndr | got_drs, 1 << done_tag, 0))]
        m.d.sync += pending.eq((pending | issued) & ~freed)
        bad = (got_ndr & (ndr.payload.opcode == S2MNdrOpcode.CmpErr)) | (got_drs & drs.payload.poison)
        with m.If(busy & (got_ndr | got_drs)):
            m.d.sync += answered.eq(answered + 1)
            with m.If(bad):
                m.d.sync += self.errors.eq(self.errors + 1)
        with m.If(busy & (answered + (got_ndr | got_drs) == count) & (idx == count)):
            m.d.sync += [busy.eq(0), self.done.eq(self.done + 1)]
        with m.If(~busy & self.start):
            m.d.sync += [busy.eq(1), writing.eq(self.write), count.eq(self.count), idx.eq(0),
                         primed.eq(0), answered.eq(0), pending.eq(0), self.errors.eq(0)]
            with m.If(self.count == 0):
                m.d.sync += [busy.eq(0), self.done.eq(self.done + 1)]

        # -- the ports: the bench's master unless an operation runs
        hreq, hrwd, hndr, hdrs = (self.host.m2s_req, self.host.m2s_rwd, self.host.s2m_ndr,
                                  self.host.s2m_drs)
        with m.If(busy):
            m.d.comb += [
                req.valid.eq(can & ~writing),
                req.payload.opcode.eq(M2SReqOpcode.MemRd),
                req.payload.tag.eq(tag),
                req.payload.addr.eq(ar.data[:ADDR_BITS]),
                rwd.valid.eq(can & writing),
                rwd.payload.opcode.eq(M2SRwDOpcode.MemWr),
                rwd.payload.tag.eq(tag),
                rwd.payload.addr.eq(ar.data[:ADDR_BITS]),
                rwd.payload.be.eq((1 << LINE_BYTES) - 1),
                rwd.payload.data.eq(dr.data),
                ndr.ready.eq(1), drs.ready.eq(1),
            ]
        with m.Else():
            m.d.comb += [
                req.valid.eq(hreq.valid), req.payload.eq(hreq.payload), hreq.ready.eq(req.ready),
                rwd.valid.eq(hrwd.valid), rwd.payload.eq(hrwd.payload), hrwd.ready.eq(rwd.ready),
                hndr.valid.eq(ndr.valid), hndr.payload.eq(ndr.payload), ndr.ready.eq(hndr.ready),
                hdrs.valid.eq(drs.valid), hdrs.payload.eq(drs.payload), drs.ready.eq(hdrs.ready),
            ]
        return m

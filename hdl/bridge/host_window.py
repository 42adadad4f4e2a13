"""The GPU's memory on a board: block RAM that answers the device's CXL.cache requests."""

from amaranth import *
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from trainingcxl.spec.cxl_messages import CQID_BITS, D2HReqOpcode, H2DRspOpcode, UQID_BITS
from ..cxl.channels import CxlCacheSignature
from trainingcxl.spec.config import LINE_BITS

__all__ = ["HostPortSignature", "HostWindow"]


class HostPortSignature(wiring.Signature):
    """A line port into the window, seen from the window: one request per cycle at most,
    read data ``rdata`` valid the cycle after a read request was taken."""

    def __init__(self, addr_bits):
        self._addr_bits = addr_bits
        super().__init__({
            "req": In(stream.Signature(data.StructLayout({
                "write": 1, "addr": addr_bits, "data": LINE_BITS}))),
            "rdata": Out(LINE_BITS),
            "rvalid": Out(1),
        })

    def __eq__(self, other):
        return isinstance(other, HostPortSignature) and self._addr_bits == other._addr_bits

    def __repr__(self):
        return f"HostPortSignature({self._addr_bits})"


class HostWindow(wiring.Component):
    """``lines`` lines of memory at host line address ``base``, on CXL.cache.

    Reads (``RdCurr``, ``RdShared``, ``RdOwn``) are answered with ``H2D Data``;
    writes (``ItoMWr``, ``WrCur``) with ``GO_WritePull`` and a UQID, and the
    device's ``D2H Data`` for that UQID is written. Outside the window reads
    return poisoned data and writes get ``GO_ERR_WritePull`` (their data is
    dropped), as the simulated host memory does. One request is served at a
    time; a board's link is the UART, not this.

    ``host`` is the host program's own port (through the bridge); it has
    priority over CXL.cache reads and writes.

    Members
    -------
    cache : In(CxlCacheSignature)
    host : Out(HostPortSignature)
    """

    def __init__(self, *, base, lines, pulls=32):
        if not (isinstance(lines, int) and lines >= 1):
            raise ValueError(f"a host window needs at least one line, not {lines!r}")
        self._base, self._lines, self._pulls = base, lines, pulls
        self._addr_bits = max(1, (lines - 1).bit_length())
        super().__init__({
            "cache": In(CxlCacheSignature()),
            "host": Out(HostPortSignature(self._addr_bits)),
        })

    @property
    def base(self):
        return self._base

    @property
    def lines(self):
        return self._lines

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = memory.Memory(shape=LINE_BITS, depth=self._lines, init=[])
        rd = mem.read_port()
        wr = mem.write_port()
        # Write pulls waiting for their data: window line and "inside" flag, by UQID.
        m.submodules.pulls = pulls = memory.Memory(
            shape=data.StructLayout({"addr": self._addr_bits, "inside": 1}), depth=self._pulls,
            init=[])
        pull_rd = pulls.read_port(domain="comb")
        pull_wr = pulls.write_port()

        req, rsp = self.cache.d2h_req, self.cache.h2d_rsp
        rdata, wdata = self.cache.h2d_data, self.cache.d2h_data
        host = self.host

        offset = Signal(len(req.payload.addr) + 1)
        inside = Signal()
        m.d.comb += [offset.eq(req.payload.addr - self._base),
                     inside.eq((req.payload.addr >= self._base) & (offset < self._lines))]

        uqid = Signal(range(self._pulls))
        cqid = Signal(CQID_BITS)
        poison = Signal()
        host_read = Signal()

        m.d.comb += [pull_rd.addr.eq(wdata.payload.uqid[:len(uqid)]),
                     rdata.payload.data.eq(rd.data)]
        m.d.sync += host_read.eq(0)
        m.d.comb += [host.rvalid.eq(host_read), host.rdata.eq(rd.data), rd.en.eq(0)]

        is_read = Signal()
        m.d.comb += is_read.eq((req.payload.opcode == D2HReqOpcode.RdCurr)
                               | (req.payload.opcode == D2HReqOpcode.RdShared)
                               | (req.payload.opcode == D2HReqOpcode.RdOwn))

        with m.FSM():
            with m.State("IDLE"):
                with m.If(host.req.valid):
                    m.d.comb += host.req.ready.eq(1)
                    with m.If(host.req.payload.write):
                        m.d.comb += [wr.addr.eq(host.req.payload.addr),
                                     wr.data.eq(host.req.payload.data), wr.en.eq(1)]
                    with m.Else():
                        m.d.comb += [rd.addr.eq(host.req.payload.addr), rd.en.eq(1)]
                        m.d.sync += host_read.eq(1)
                with m.Elif(wdata.valid):
                    # Data of an earlier write pull: written where its request pointed.
                    m.d.comb += wdata.ready.eq(1)
                    with m.If(pull_rd.data.inside):
                        m.d.comb += [wr.addr.eq(pull_rd.data.addr), wr.data.eq(wdata.payload.data),
                                     wr.en.eq(1)]
                with m.Elif(req.valid):
                    m.d.comb += req.ready.eq(1)
                    m.d.sync += cqid.eq(req.payload.cqid)
                    with m.If(is_read):
                        m.d.comb += [rd.addr.eq(offset), rd.en.eq(1)]
                        m.d.sync += poison.eq(~inside)
                        m.next = "READ"
                    with m.Else():
                        m.d.comb += [pull_wr.addr.eq(uqid), pull_wr.en.eq(1),
                                     pull_wr.data.addr.eq(offset), pull_wr.data.inside.eq(inside)]
                        m.d.sync += poison.eq(~inside)
                        m.next = "PULL"
            with m.State("READ"):
                # rd.data holds the line from here on: nothing else reads until it is taken.
                m.d.comb += [rdata.valid.eq(1), rdata.payload.cqid.eq(cqid),
                             rdata.payload.poison.eq(poison)]
                with m.If(rdata.ready):
                    m.next = "IDLE"
            with m.State("PULL"):
                m.d.comb += [rsp.valid.eq(1), rsp.payload.cqid.eq(cqid),
                             rsp.payload.uqid.eq(uqid),
                             rsp.payload.opcode.eq(Mux(poison, H2DRspOpcode.GO_ERR_WritePull,
                                                       H2DRspOpcode.GO_WritePull))]
                with m.If(rsp.ready):
                    m.d.sync += uqid.eq(uqid + 1)
                    m.next = "IDLE"
        return m

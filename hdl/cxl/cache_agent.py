"""CXL.cache device agent: lets the engines read and write host/GPU memory lines."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from trainingcxl.spec.config import ADDR_BITS, LINE_BITS
from ..common.line_port import LineOp, LinePortSignature
from ..common.merge import StreamMerge
from ..common.register_slice import on_entry, through_slice
from trainingcxl.spec.cxl_messages import D2HReqOpcode, H2DRspOpcode
from trainingcxl.spec.registers import Reg
from .channels import CxlCacheSignature

__all__ = ["CacheAgent"]


class CacheAgent(wiring.Component):
    """Turns line-port requests from the engines into CXL.cache transactions.

    * A read becomes ``RdCurr`` (the device keeps no cache state); the host's
      ``H2D Data`` with the same command queue id (CQID) answers it, in any
      order, and goes back to the requesting port with its tag.
    * A write becomes ``ItoMWr``. The agent keeps the data until the host's
      ``GO_WritePull`` names the CQID, sends it as ``D2H Data`` with the
      host's UQID, and then acknowledges the write on the port.
      ``GO_ERR_WritePull`` also pulls the data but acknowledges with ``err``.

    At most ``config.cache_ids`` requests are outstanding; a CQID is reused
    only after its transaction finished.

    Parameters
    ----------
    config : Config
    n_ports : int
    tag_bits : int
        Width of the clients' tags.

    Members
    -------
    cache : Out(CxlCacheSignature)
    port0 ... : In(LinePortSignature)
        Clients, addressed in host line addresses.
    outstanding : Out
        CQIDs in use.
    lines_read, lines_written : Out(32)
    timeouts : Out(32)
        Transactions the host left unanswered for ``config.cache_timeout``
        cycles (within its last sixteenth): completed to the client with ``err``.
    strays : Out(32)
        Host messages dropped because they named no outstanding transaction of
        their kind: read data for an idle or write CQID, a write pull for an
        idle or read CQID.
    """

    def __init__(self, config, *, n_ports, tag_bits=8):
        self._config = config
        self._n_ports = n_ports
        self._tag_bits = tag_bits
        members = {f"port{i}": In(LinePortSignature(addr_bits=ADDR_BITS, tag_bits=tag_bits))
                   for i in range(n_ports)}
        members.update({
            "cache": Out(CxlCacheSignature()),
            "outstanding": Out(range(config.cache_ids + 1)),
            "lines_read": Out(32),
            "lines_written": Out(32),
            "strays": Out(32),
            "timeouts": Out(32),
        })
        super().__init__(members)

    @property
    def ports(self):
        return [getattr(self, f"port{i}") for i in range(self._n_ports)]

    @property
    def counters(self):
        """The control window's registers this agent drives: ``{Reg: value}``, or
        ``{Reg: {field: value}}`` for some fields of one (the device connects them)."""
        return {Reg.CACHE_READS: self.lines_read, Reg.CACHE_WRITES: self.lines_written,
                Reg.CACHE_STRAYS: self.strays, Reg.CACHE_TIMEOUTS: self.timeouts}

    def elaborate(self, platform):
        m = Module()
        q = self._config.cache_ids
        n = self._n_ports
        ports = self.ports
        cache = self.cache
        client_bits = max(1, (n - 1).bit_length())
        id_bits = max(1, (q - 1).bit_length())

        m.submodules.merge = merge = StreamMerge(ports[0].req.payload.shape(), n,
                                                 late_mask=self._config.register_slices)
        for i, p in enumerate(ports):
            wiring.connect(m, wiring.flipped(p.req), getattr(merge, f"i{i}"))
        # On a board the merged requests pass a register slice (cutting
        # ``ready``: a request every other cycle, more than the host window
        # answers), so the round robin and the CQID allocation are two paths.
        requests, client = merge.o, merge.index
        if self._config.register_slices:
            requests = through_slice(m, "request_slice", merge.o, cut_ready=True)
            client = on_entry(m, requests, merge.index)

        busy = Signal(q)
        free_id = Signal(range(q))
        have_free = Signal()
        for k in reversed(range(q)):
            with m.If(~busy[k]):
                m.d.comb += [free_id.eq(k), have_free.eq(1)]

        info_layout = data.StructLayout({"client": client_bits, "tag": self._tag_bits, "write": 1})
        info = Array(Signal(info_layout, name=f"info{k}") for k in range(q))
        m.submodules.wbuf = wbuf = Memory(shape=LINE_BITS, depth=q, init=[])
        wbuf_w = wbuf.write_port()
        wbuf_r = wbuf.read_port()

        # -- request: allocate a CQID, latch the D2H request in an output register
        out_valid = Signal()
        out = Signal.like(cache.d2h_req.payload)
        can_load = ~out_valid | cache.d2h_req.ready
        take = requests.valid & have_free & can_load
        m.d.comb += [
            requests.ready.eq(have_free & can_load),
            cache.d2h_req.valid.eq(out_valid),
            cache.d2h_req.payload.eq(out),
            wbuf_w.addr.eq(free_id),
            wbuf_w.data.eq(requests.payload.data),
            wbuf_w.en.eq(take & (requests.payload.op == LineOp.WRITE)),
        ]
        with m.If(cache.d2h_req.ready):
            m.d.sync += out_valid.eq(0)
        with m.If(take):
            m.d.sync += [
                out_valid.eq(1),
                out.opcode.eq(Mux(requests.payload.op == LineOp.WRITE,
                                  D2HReqOpcode.ItoMWr, D2HReqOpcode.RdCurr)),
                out.cqid.eq(free_id),
                out.addr.eq(requests.payload.addr),
                info[free_id].client.eq(client),
                info[free_id].tag.eq(requests.payload.tag),
                info[free_id].write.eq(requests.payload.op == LineOp.WRITE),
            ]

        # -- timeouts: a CQID the host leaves unanswered for ``cache_timeout``
        # cycles completes to its client with ``err``. It then stays reserved
        # ("dead") for another timeout, so that a late answer is dropped (a
        # stray) instead of reaching the next transaction on that CQID.
        dead = Signal(q)
        tick_period = max(1, self._config.cache_timeout // 16)
        prescale = Signal(range(tick_period))
        tick = Signal()
        m.d.comb += tick.eq(prescale == tick_period - 1)
        m.d.sync += prescale.eq(Mux(tick, 0, prescale + 1))
        age = Array(Signal(5, name=f"age{k}") for k in range(q))
        expired = Signal(q)
        m.d.comb += expired.eq(Cat(busy[k] & age[k][4] for k in range(q)))
        to_read = Signal()              # a timed-out read is being answered with err
        to_cqid = Signal(range(q))
        to_info = info[to_cqid]
        exp_read = Signal()
        exp_read_id = Signal(range(q))
        exp_write = Signal()
        exp_write_id = Signal(range(q))
        for k in reversed(range(q)):
            with m.If(expired[k] & ~dead[k] & ~info[k].write):
                m.d.comb += [exp_read.eq(1), exp_read_id.eq(k)]
            with m.If(expired[k] & ~dead[k] & info[k].write):
                m.d.comb += [exp_write.eq(1), exp_write_id.eq(k)]

        def known(cqid, write):
            # The host names a CQID this agent has outstanding, for the right kind
            # of transaction; anything else is dropped and counted (``strays``).
            idx = cqid[:id_bits]
            return ((cqid < q) & busy.bit_select(idx, 1) & ~dead.bit_select(idx, 1)
                    & (info[idx].write == write))

        # -- read data: route by CQID to the client. The answer (the host's data,
        # or ``err`` for a timed-out read) is one stream; on a board it is
        # registered, so the CQID lookup and the client's logic are two paths,
        # and the slice cuts ``ready`` (a line every other cycle, far more than
        # the host window brings), so the client's ``ready`` does not run on
        # into the CQID bookkeeping.
        rd_cqid = cache.h2d_data.payload.cqid
        rd_info = info[rd_cqid[:id_bits]]
        rd_known = known(rd_cqid, 0)
        answer = stream.Signature(data.StructLayout({
            "client": client_bits, "tag": self._tag_bits, "data": LINE_BITS, "err": 1,
        })).create()
        m.d.comb += [
            answer.valid.eq(to_read | (cache.h2d_data.valid & rd_known)),
            answer.payload.client.eq(Mux(to_read, to_info.client, rd_info.client)),
            answer.payload.tag.eq(Mux(to_read, to_info.tag, rd_info.tag)),
            answer.payload.data.eq(cache.h2d_data.payload.data),
            answer.payload.err.eq(to_read | cache.h2d_data.payload.poison),
        ]
        to_client = answer
        if self._config.register_slices:
            to_client = through_slice(m, "answer", answer, cut_ready=True)
        for i, p in enumerate(ports):
            m.d.comb += [
                p.rdata.valid.eq(to_client.valid & (to_client.payload.client == i)),
                p.rdata.payload.tag.eq(to_client.payload.tag),
                p.rdata.payload.data.eq(to_client.payload.data),
                p.rdata.payload.err.eq(to_client.payload.err),
            ]
            with m.If(to_client.payload.client == i):
                m.d.comb += to_client.ready.eq(p.rdata.ready)
        # While a timed-out read is answered, host data waits.
        m.d.comb += cache.h2d_data.ready.eq(~to_read & (answer.ready | ~rd_known))
        rd_done = cache.h2d_data.valid & ~to_read & rd_known & answer.ready
        rd_stray = cache.h2d_data.valid & ~to_read & ~rd_known
        to_rd_done = to_read & answer.ready
        with m.If(to_rd_done):
            m.d.sync += to_read.eq(0)
        with m.Elif(~to_read & exp_read & ~cache.h2d_data.valid):
            m.d.sync += [to_read.eq(1), to_cqid.eq(exp_read_id)]

        wr_done, wp_timeout, wp_cqid, rsp, rsp_stray = self._write_pull(m, info, wbuf_r, known,
                                                                        exp_write, exp_write_id)

        # -- CQID bookkeeping
        set_mask = Mux(take, 1 << free_id, 0)
        clr_rd = Mux(rd_done, 1 << rd_cqid[:id_bits], 0)
        clr_wr = Mux(wr_done & ~wp_timeout, 1 << wp_cqid, 0)
        # Timed out: dead until a late answer (a stray) or a second timeout frees it.
        kill = Mux(to_rd_done, 1 << to_cqid, 0) | Mux(wr_done & wp_timeout, 1 << wp_cqid, 0)
        stray_id = Signal(range(q))
        stray_dead = Signal()
        with m.If(rd_stray):
            m.d.comb += [stray_id.eq(rd_cqid[:id_bits]),
                         stray_dead.eq((rd_cqid < q) & dead.bit_select(rd_cqid[:id_bits], 1))]
        with m.Elif(rsp_stray):
            m.d.comb += [stray_id.eq(rsp.cqid[:id_bits]),
                         stray_dead.eq((rsp.cqid < q) & dead.bit_select(rsp.cqid[:id_bits], 1))]
        revive = Mux(stray_dead, 1 << stray_id, 0) | (expired & dead)
        m.d.sync += [
            busy.eq((busy & ~clr_rd & ~clr_wr & ~revive) | set_mask),
            dead.eq((dead | kill) & ~revive),
        ]
        for k in range(q):
            with m.If(set_mask[k] | kill[k]):
                m.d.sync += age[k].eq(0)
            with m.Elif(tick & busy[k] & ~age[k][4]):
                m.d.sync += age[k].eq(age[k] + 1)
        m.d.sync += self.timeouts.eq(self.timeouts + to_rd_done + (wr_done & wp_timeout))
        m.d.comb += self.outstanding.eq(sum(busy[k] for k in range(q)))
        events = Cat(rd_done, wr_done, rd_stray, rsp_stray)
        if self._config.register_slices:
            # On a board the counters count a cycle late, from registers.
            counted = Signal.like(events)
            m.d.sync += counted.eq(events)
            events = counted
        m.d.sync += [
            self.lines_read.eq(self.lines_read + events[0]),
            self.lines_written.eq(self.lines_written + events[1]),
            self.strays.eq(self.strays + events[2] + events[3]),
        ]
        return m

    def _write_pull(self, m, info, wbuf_r, known, exp_write, exp_write_id):
        """Write pulls: on the host's pull, the line from the buffer as D2H data, then the
        client's acknowledgement (or ``err`` for a timed-out write). Returns the
        acknowledgement, whether it is a timeout's, its CQID, the host's response and
        whether that response is a stray."""
        cache, ports, q = self.cache, self.ports, self._config.cache_ids
        # -- write pull: read the buffer, send D2H data, then acknowledge the client
        # On a board the host's responses pass a register slice first, so the
        # window's state does not run into the CQID lookup.
        h2d_rsp = cache.h2d_rsp
        if self._config.register_slices:
            h2d_rsp = through_slice(m, "rsp_slice", wiring.flipped(cache.h2d_rsp))
        rsp = h2d_rsp.payload
        pull = rsp.opcode.as_value().matches(H2DRspOpcode.GO_WritePull, H2DRspOpcode.WritePull,
                                  H2DRspOpcode.GO_ERR_WritePull)
        wp_busy = Signal()          # a pull is in progress
        wp_data_pending = Signal()
        wp_ack_pending = Signal()
        wp_cqid = Signal(range(q))
        wp_uqid = Signal.like(rsp.uqid)
        wp_err = Signal()
        wp_info = info[wp_cqid]
        m.d.comb += [
            h2d_rsp.ready.eq(~wp_busy),
            wbuf_r.addr.eq(rsp.cqid),
            wbuf_r.en.eq(~wp_busy),
        ]
        rsp_known = known(rsp.cqid, 1)
        start_pull = h2d_rsp.valid & ~wp_busy & pull & rsp_known
        rsp_stray = h2d_rsp.valid & ~wp_busy & pull & ~rsp_known
        wp_timeout = Signal()       # the ack in progress is a timeout's
        start_timeout = ~wp_busy & ~h2d_rsp.valid & exp_write
        with m.If(start_pull):
            m.d.sync += [
                wp_busy.eq(1), wp_data_pending.eq(1), wp_ack_pending.eq(1),
                wp_cqid.eq(rsp.cqid), wp_uqid.eq(rsp.uqid),
                wp_err.eq(rsp.opcode == H2DRspOpcode.GO_ERR_WritePull),
                wp_timeout.eq(0),
            ]
        with m.Elif(start_timeout):
            m.d.sync += [
                wp_busy.eq(1), wp_data_pending.eq(0), wp_ack_pending.eq(1),
                wp_cqid.eq(exp_write_id), wp_err.eq(1), wp_timeout.eq(1),
            ]
        # The buffer's read data stays valid while wp_busy: its enable is off.
        m.d.comb += [
            cache.d2h_data.valid.eq(wp_data_pending),
            cache.d2h_data.payload.uqid.eq(wp_uqid),
            cache.d2h_data.payload.data.eq(wbuf_r.data),
        ]
        with m.If(cache.d2h_data.valid & cache.d2h_data.ready):
            m.d.sync += wp_data_pending.eq(0)
        ack_ready = Signal()
        for i, p in enumerate(ports):
            m.d.comb += [
                p.wack.valid.eq(wp_busy & ~wp_data_pending & wp_ack_pending & (wp_info.client == i)),
                p.wack.payload.tag.eq(wp_info.tag),
                p.wack.payload.err.eq(wp_err),
            ]
            with m.If(wp_info.client == i):
                m.d.comb += ack_ready.eq(p.wack.ready)
        wr_done = wp_busy & ~wp_data_pending & wp_ack_pending & ack_ready
        with m.If(wr_done):
            m.d.sync += [wp_busy.eq(0), wp_ack_pending.eq(0)]
        return wr_done, wp_timeout, wp_cqid, rsp, rsp_stray

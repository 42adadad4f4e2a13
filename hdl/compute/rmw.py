"""Read-modify-write of PMEM lines, with forwarding between requests to the same line."""

from amaranth import *
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from trainingcxl.spec.config import LINE_BITS
from ..common.line_port import LineOp, LinePortSignature
from ..common.register_slice import on_entry, through_slice

__all__ = ["rmw_layout", "RmwUnit"]


def rmw_layout(config):
    """One request: subtract ``delta`` (16 lanes of 32 bits) from media line ``addr``."""
    return data.StructLayout({"addr": config.media_addr_bits, "delta": LINE_BITS})


class RmwUnit(wiring.Component):
    """Applies ``line -= delta`` (lane-wise, wrapping) for every request, in request order.

    Many requests are in flight: reads go to PMEM as fast as it takes them,
    results are written back in request order. Two requests for the same line
    are a read-modify-write hazard: a later request must see the earlier one's
    result. The unit remembers the addresses of the last ``window`` requests; a
    request whose line is among them does not read PMEM but takes the earlier
    request's result (forwarding), so hot rows cost no PMEM round trip. A line
    older than the window has had its write accepted by PMEM, whose own
    read-after-write check then orders the read after it.

    With ``config.register_slices`` requests enter through a register slice
    that cuts ``ready`` too, and are compared with the history as they enter
    it: neither the compare nor the arbitration after it runs back through
    the scatter into the index reader. It takes a request every other cycle,
    as often as the boards' PMEM controller takes a read.

    Members
    -------
    requests : In(stream.Signature(rmw_layout))
    pmem_rd : Out(LinePortSignature)
        Reads (and their data, in order).
    pmem_wr : Out(LinePortSignature)
        Writes; ``wack`` means persistent.
    idle : Out(1)
        Nothing pending and every write acknowledged.
    lines, forwarded : Out(32)
        Lines written, and how many of them took a forwarded value.
    forward_event : Out(1)
        A line with a forwarded value is written this cycle.
    """

    def __init__(self, config, *, window=None):
        window = window or config.pmem.read_depth
        if window < 2 or window & (window - 1):
            raise ValueError(f"window must be a power of two of at least 2, not {window}")
        self._config = config
        self._window = window
        port = LinePortSignature(addr_bits=config.media_addr_bits, tag_bits=16)
        super().__init__({
            "requests": In(stream.Signature(rmw_layout(config))),
            "pmem_rd": Out(port),
            "pmem_wr": Out(port),
            "idle": Out(1),
            "lines": Out(32),
            "forwarded": Out(32),
            "forward_event": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._config
        w = self._window
        pbits = max(1, (w - 1).bit_length())
        abits = cfg.media_addr_bits
        lanes = LINE_BITS // 32

        # -- history of the last ``window`` request addresses, by position
        hist_addr = Array(Signal(abits, name=f"hist_addr{k}") for k in range(w))
        hist_valid = Signal(w)
        wpos = Signal(pbits)
        requests = self.requests
        held = C(0)                         # a request taken, not yet accepted
        if cfg.register_slices:
            requests = through_slice(m, "request_slice", wiring.flipped(self.requests),
                                     cut_ready=True)
            held = requests.valid
        req = requests.payload
        def history_hits(addr):
            return Cat(hist_valid[k] & (hist_addr[k] == addr) for k in range(w))

        # Registered, compared as the request enters the slice: the history
        # moves only when a request leaves it.
        hits = (on_entry(m, requests, history_hits(self.requests.payload.addr))
                if cfg.register_slices else history_hits(req.addr))
        # At most one hit (older copies are invalidated): its position is the
        # OR of the hit positions, two LUT levels instead of a priority chain.
        src = Signal(pbits)
        for bit in range(pbits):
            m.d.comb += src[bit].eq(Cat(hits[k] for k in range(w) if k >> bit & 1).any())
        fwd = hits.any()

        pend_layout = data.StructLayout({"addr": abits, "delta": LINE_BITS, "fwd": 1,
                                         "src": pbits, "pos": pbits})
        m.submodules.pending = pending = fifo.SyncFIFOBuffered(width=pend_layout.size, depth=w)
        pend_in = Signal(pend_layout)
        m.d.comb += [
            pend_in.addr.eq(req.addr), pend_in.delta.eq(req.delta), pend_in.fwd.eq(fwd),
            pend_in.src.eq(src), pend_in.pos.eq(wpos),
            pending.w_data.eq(pend_in),
        ]

        # -- stage B: accept a request; read PMEM unless forwarding
        m.d.comb += [
            self.pmem_rd.req.valid.eq(requests.valid & ~fwd & pending.w_rdy),
            self.pmem_rd.req.payload.op.eq(LineOp.READ),
            self.pmem_rd.req.payload.addr.eq(req.addr),
            self.pmem_rd.wack.ready.eq(1),
            requests.ready.eq(pending.w_rdy & (fwd | self.pmem_rd.req.ready)),
        ]
        accept = requests.valid & requests.ready
        m.d.comb += pending.w_en.eq(accept)
        with m.If(accept):
            m.d.sync += [hist_addr[wpos].eq(req.addr), wpos.eq(wpos + 1)]
        hist_set = Mux(accept, 1 << wpos, 0)
        hist_clr = Mux(accept & fwd, 1 << src, 0)
        m.d.sync += hist_valid.eq((hist_valid & ~hist_clr) | hist_set)

        # -- stage C: modify the head and write it back
        head = pend_layout(pending.r_data)
        m.submodules.results = results = Memory(shape=LINE_BITS, depth=w, init=[])
        res_w = results.write_port()
        res_r = results.read_port(domain="comb")
        m.d.comb += res_r.addr.eq(head.src)
        operand = Mux(head.fwd, res_r.data, self.pmem_rd.rdata.payload.data)
        new = Signal(LINE_BITS)
        for lane in range(lanes):
            m.d.comb += new.word_select(lane, 32).eq(
                operand.word_select(lane, 32) - head.delta.word_select(lane, 32))
        have = pending.r_rdy & (head.fwd | self.pmem_rd.rdata.valid)
        m.d.comb += [
            self.pmem_wr.req.valid.eq(have),
            self.pmem_wr.req.payload.op.eq(LineOp.WRITE),
            self.pmem_wr.req.payload.addr.eq(head.addr),
            self.pmem_wr.req.payload.data.eq(new),
            self.pmem_wr.req.payload.be.eq(-1),
            self.pmem_wr.rdata.ready.eq(1),
            self.pmem_wr.wack.ready.eq(1),
        ]
        written = have & self.pmem_wr.req.ready
        m.d.comb += [
            pending.r_en.eq(written),
            self.pmem_rd.rdata.ready.eq(written & ~head.fwd),
            res_w.addr.eq(head.pos),
            res_w.data.eq(new),
            res_w.en.eq(written),
        ]

        # Written and not yet persistent: at most what the write-pending queue holds.
        unacked = Signal(range(cfg.pmem.wpq_depth + w + 1))
        m.d.sync += unacked.eq(unacked + written - self.pmem_wr.wack.valid)
        m.d.comb += self.idle.eq(~held & ~pending.r_rdy & (pending.level == 0) & (unacked == 0))
        m.d.comb += self.forward_event.eq(written & head.fwd)
        m.d.sync += [
            self.lines.eq(self.lines + written),
            self.forwarded.eq(self.forwarded + self.forward_event),
        ]
        return m

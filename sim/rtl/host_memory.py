"""Host memory behind CXL.cache as simulation-only gateware: the device's requests
are answered inside the simulator, with no Python per transaction."""

from amaranth import *
from amaranth.hdl import ResetInserter
from amaranth.lib import data, fifo, wiring
from amaranth.lib.wiring import In, Out

from trainingcxl.hdl.common.ram import Ram
from trainingcxl.spec.cxl_messages import D2HReqOpcode, H2DData, H2DRsp, H2DRspOpcode, UQID_BITS
from trainingcxl.hdl.cxl.channels import CxlCacheSignature
from trainingcxl.spec.config import LINE_BITS

__all__ = ["HostMemoryModel", "PIPELINE"]

#: Cycles the model adds to every answer's delay (its RAM read and answer queue).
PIPELINE = 2

#: Fewest write pulls the model tracks at once (by UQID modulo their number, at least
#: twice the device's ``cache_ids``, so an entry is free again long before reuse).
_PULLS = 64
#: Width of the model's clock and due times (compared modulo this width).
_TIME_BITS = 16


class HostMemoryModel(wiring.Component):
    """Answers the device's CXL.cache requests from ``lines`` lines at host line ``base``.

    The gateware twin of :class:`trainingcxl.sim.cxl_cache_memory.HostMemory` (which
    a bench uses when it injects faults, or on a simulator without backdoor
    RAMs): reads (``RdCurr``, ``RdShared``, ``RdOwn``) get ``H2D Data`` and
    writes (``ItoMWr``, ``WrCur``) ``GO_WritePull``, each ``delay_lo`` to
    ``delay_lo + delay_span - 1`` cycles (pseudo-random; plus :data:`PIPELINE`)
    after the request, so answers overtake each other; outside the window, poisoned data or
    ``GO_ERR_WritePull``. The lines are a backdoor RAM named ``host``
    (:mod:`trainingcxl.sim.backdoor`): the bench stages and reads arrays there.

    Members
    -------
    cache : In(CxlCacheSignature)
        The device's CXL.cache port.
    enable : In(1)
        The model answers; when low its clocks stand still too (nothing toggles,
        so an event-driven simulator spends nothing on it).
    delay_lo, delay_span : In(8)
        The answer delay (``delay_span`` values from ``delay_lo``; at least 1).
    power_fail : In(1)
        Requests in flight die with the link; the lines stay.
    reads, writes : Out(32)
        Lines read and written inside the window.
    errors : Out(32)
        Protocol errors the device made: a CQID reused while outstanding or out
        of range, an unknown opcode, data for a UQID never pulled. (The model is
        always ready, so the device's streams cannot break the stream rule.)

    ``time_bits`` is the width of the model's clock, which wraps (tests shrink it).
    """

    def __init__(self, config, *, base, lines, time_bits=_TIME_BITS):
        self._config = config
        self._base, self._lines = base, lines
        self._time_bits = time_bits
        super().__init__({
            "cache": In(CxlCacheSignature()),
            "enable": In(1),
            "delay_lo": In(8),
            "delay_span": In(8),
            "power_fail": In(1),
            "reads": Out(32),
            "writes": Out(32),
            "errors": Out(32),
        })
        self.ram = Ram(shape=LINE_BITS, depth=lines, backdoor="host")

    def elaborate(self, platform):
        m = Module()
        n = self._config.cache_ids
        lbits = max(1, (self._lines - 1).bit_length())
        c = self.cache
        m.submodules.ram = ram = self.ram
        rd = ram.read_port()
        wr = ram.write_port()

        # Times wrap: an answer is due at most 2*255 + PIPELINE cycles after its
        # request and produced at most ``cache_ids`` cycles after that, far
        # inside half the range, so the sign of the wrapped difference says
        # whether it is due.
        now = Signal(self._time_bits)
        lfsr = Signal(16, init=0xB5AD)
        with m.If(self.enable):
            m.d.sync += [now.eq(now + 1),
                         lfsr.eq(Cat(lfsr[1:], lfsr[0] ^ lfsr[2] ^ lfsr[3] ^ lfsr[5]))]
        delay = self.delay_lo + ((lfsr[:8] * self.delay_span) >> 8)

        error = []                      # one strobe per kind of error this cycle

        # -- requests: per CQID a due time (compared in parallel) and, in a small
        # RAM read at the answer's pick, where the answer goes
        waiting = Signal(n)             # answer not yet produced
        busy = Signal(n)                # CQID outstanding until the device took its answer
        writing = Signal(n)             # the request is a write
        dues = [Signal(self._time_bits, name=f"due{k}") for k in range(n)]
        m.submodules.slots = slots = Ram(shape=_Slot(lbits), depth=n)
        slot_w = slots.write_port()
        req = c.d2h_req.payload
        m.d.comb += c.d2h_req.ready.eq(1)
        take = c.d2h_req.valid
        is_read = req.opcode.as_value().matches(D2HReqOpcode.RdCurr, D2HReqOpcode.RdShared,
                                                D2HReqOpcode.RdOwn)
        is_write = req.opcode.as_value().matches(D2HReqOpcode.ItoMWr, D2HReqOpcode.WrCur)
        in_range = req.cqid < n
        cq = req.cqid[:max(1, (n - 1).bit_length())]
        accept = take & in_range & (is_read | is_write) & ~busy.bit_select(cq, 1)
        error.append(take & ~accept)
        offset = req.addr - self._base
        set_mask = Mux(accept, 1 << cq, 0)
        slot_in = Signal(_Slot(lbits))
        m.d.comb += [
            slot_in.inside.eq((req.addr >= self._base) & (offset < self._lines)),
            slot_in.line.eq(offset[:lbits]),
            slot_w.addr.eq(cq), slot_w.data.eq(slot_in), slot_w.en.eq(accept),
        ]
        for k in range(n):
            with m.If(set_mask[k]):
                m.d.sync += dues[k].eq(now + delay)
        m.d.sync += writing.eq((writing & ~set_mask) | Mux(is_write, set_mask, 0))

        # (Signals, not expressions: an expression is emitted again at every use.)
        due, due_r, due_w = Signal(n), Signal(n), Signal(n)
        reached = [(now - dues[k])[:self._time_bits][-1] ^ 1 for k in range(n)]
        m.d.comb += [due.eq(Cat(waiting[k] & reached[k] for k in range(n))),
                     due_r.eq(due & ~writing), due_w.eq(due & writing)]
        answer_r, pick_r = _lowest(m, due_r, "pick_r")
        answer_w, pick_w = _lowest(m, due_w, "pick_w")
        slot_r = Signal(_Slot(lbits))
        slot_wr = Signal(_Slot(lbits))
        for view, pick in ((slot_r, pick_r), (slot_wr, pick_w)):
            port = slots.read_port(domain="comb")
            m.d.comb += [port.addr.eq(pick), view.eq(port.data)]

        # -- read answers: the RAM reads the line, the FIFO holds the answer for the
        # device (room for every CQID, so it never refuses one)
        m.submodules.data_q = data_q = fifo.SyncFIFOBuffered(width=Shape.cast(H2DData).width,
                                                             depth=n + 2)
        m.d.comb += [rd.addr.eq(slot_r.line), rd.en.eq(answer_r)]
        staged = Signal()
        staged_cqid = Signal(range(n))
        staged_poison = Signal()
        m.d.sync += [staged.eq(answer_r), staged_cqid.eq(pick_r),
                     staged_poison.eq(~slot_r.inside)]
        out_data = Signal(H2DData)
        m.d.comb += [
            out_data.cqid.eq(staged_cqid), out_data.poison.eq(staged_poison),
            out_data.data.eq(Mux(staged_poison, 0, rd.data)),
            data_q.w_data.eq(out_data), data_q.w_en.eq(staged),
            c.h2d_data.valid.eq(data_q.r_rdy), c.h2d_data.payload.eq(data_q.r_data),
            data_q.r_en.eq(c.h2d_data.ready),
        ]
        with m.If(answer_r & slot_r.inside):
            m.d.sync += self.reads.eq(self.reads + 1)

        # -- write answers: a pull (or its refusal), remembered by UQID for the data
        m.submodules.rsp_q = rsp_q = fifo.SyncFIFOBuffered(width=Shape.cast(H2DRsp).width,
                                                           depth=n + 1)
        uqid = Signal(UQID_BITS)
        n_pulls = max(_PULLS, 2 * n)
        slot_bits = (n_pulls - 1).bit_length()
        pending = Signal(n_pulls)
        m.submodules.pulls = pulls = Ram(shape=_Pull(lbits), depth=n_pulls)
        pull_w = pulls.write_port()
        pull_r = pulls.read_port(domain="comb")
        out_rsp = Signal(H2DRsp)
        m.d.comb += [
            out_rsp.opcode.eq(Mux(slot_wr.inside, H2DRspOpcode.GO_WritePull,
                                  H2DRspOpcode.GO_ERR_WritePull)),
            out_rsp.cqid.eq(pick_w), out_rsp.uqid.eq(uqid),
            rsp_q.w_data.eq(out_rsp), rsp_q.w_en.eq(answer_w),
            c.h2d_rsp.valid.eq(rsp_q.r_rdy), c.h2d_rsp.payload.eq(rsp_q.r_data),
            rsp_q.r_en.eq(c.h2d_rsp.ready),
        ]
        pulled = answer_w & slot_wr.inside
        m.d.comb += [pull_w.addr.eq(uqid[:slot_bits]), pull_w.en.eq(pulled),
                     pull_w.data.eq(Cat(uqid, slot_wr.line))]
        with m.If(answer_w):
            m.d.sync += uqid.eq(uqid + 1)
        error.append(pulled & pending.bit_select(uqid[:slot_bits], 1))

        clr_mask = (Mux(answer_r, 1 << pick_r, 0) | Mux(answer_w, 1 << pick_w, 0))
        m.d.sync += waiting.eq((waiting & ~clr_mask) | set_mask)
        taken_r = Signal(H2DData)
        taken_w = Signal(H2DRsp)
        m.d.comb += [taken_r.eq(data_q.r_data), taken_w.eq(rsp_q.r_data)]
        done_r = c.h2d_data.valid & c.h2d_data.ready
        done_w = c.h2d_rsp.valid & c.h2d_rsp.ready
        done_mask = Cat((done_r & (taken_r.cqid == k)) | (done_w & (taken_w.cqid == k))
                        for k in range(n))
        m.d.sync += busy.eq((busy & ~done_mask) | set_mask)

        # -- write data: by UQID into the RAM
        d = c.d2h_data.payload
        m.d.comb += c.d2h_data.ready.eq(1)
        got = c.d2h_data.valid
        entry = Signal(_Pull(lbits))
        m.d.comb += [pull_r.addr.eq(d.uqid[:slot_bits]), entry.eq(pull_r.data)]
        known = pending.bit_select(d.uqid[:slot_bits], 1) & (entry.uqid == d.uqid)
        error.append(got & ~known)
        m.d.comb += [wr.addr.eq(entry.line), wr.data.eq(d.data), wr.en.eq(got & known)]
        with m.If(got & known):
            m.d.sync += self.writes.eq(self.writes + 1)
        m.d.sync += pending.eq((pending & ~Mux(got & known, 1 << d.uqid[:slot_bits], 0))
                               | Mux(pulled, 1 << uqid[:slot_bits], 0))

        # The error count survives power failures; the rest starts over.
        top = Module()
        top.submodules.core = ResetInserter(self.power_fail)(m)
        top.d.sync += self.errors.eq(self.errors + sum(error))
        return top


def _Slot(lbits):
    """Where a request's answer goes: the host line, and whether it is inside the window."""
    return data.StructLayout({"inside": 1, "line": lbits})


def _Pull(lbits):
    """A write pull awaiting its data: the UQID it was sent with, and the line."""
    return data.StructLayout({"uqid": UQID_BITS, "line": lbits})


def _lowest(m, bits, name):
    """(any bit set, index of the lowest set bit) of ``bits``, as a priority chain."""
    index = Signal(range(max(2, len(bits))), name=name)
    for k in reversed(range(len(bits))):
        with m.If(bits[k]):
            m.d.comb += index.eq(k)
    return bits.any(), index

"""CXL.mem target: host-managed device memory decoded onto the PMEM controller."""

from amaranth import *
from amaranth.lib import data, enum, fifo, wiring
from amaranth.lib.wiring import In, Out

from trainingcxl.spec.config import ADDR_BITS, LINE_BITS, LINE_BYTES
from ..common.line_port import LineOp, LinePortSignature
from ..common.merge import StreamMerge
from ..common.register_slice import on_entry, through_slice
from trainingcxl.spec.cxl_messages import (M2SReqOpcode, M2SRwDOpcode, S2MDrsOpcode, S2MNdrOpcode,
                                           TAG_BITS)
from trainingcxl.spec.registers import Reg
from .channels import CxlMemSignature

__all__ = ["MemError", "CxlMemTarget", "ERROR_LOG_DEPTH"]

#: Refusals the error log keeps, newest first.
ERROR_LOG_DEPTH = 4


class MemError(enum.Enum, shape=3):
    """Why the target refused a CXL.mem request."""
    NONE = 0
    UNMAPPED = 1        # address outside every decoded range
    PROTECTED = 2       # write to the log, commit or snapshot regions
    POISONED = 3        # write data carried poison
    OPCODE = 4          # opcode this device does not implement
    TAG_REUSE = 5       # tag of a read or write still outstanding


_Unified = data.StructLayout({
    "write": 1, "opcode": 4, "tag": TAG_BITS, "addr": ADDR_BITS,
    "poison": 1, "be": LINE_BYTES, "data": LINE_BITS,
})


#: One record of the error log.
error_record = data.StructLayout({
    "kind": MemError, "tag": TAG_BITS, "addr": ADDR_BITS, "seq": 32,
})


class CxlMemTarget(wiring.Component):
    """Serves CXL.mem requests from the device's PMEM (docs/design.md, "Interfaces", "Memory map").

    Device memory occupies host line addresses ``[hdm_base, hdm_base +
    media_lines)``; host line ``hdm_base + k`` is media line ``k``. Requests
    are served one per cycle, alternating between the Req and RwD channels.

    * ``MemRd`` (and ``MemRdData``): ``MemData`` on DRS when the PMEM read
      returns; unmapped: ``MemData`` with ``poison`` at once.
    * ``MemSpecRd``: taken without a response (a speculative-read hint that
      has no completion in CXL); the model does nothing with it.
    * ``MemWr``/``MemWrPtl``: ``Cmp`` on NDR once the line is persistent;
      refused (unmapped, protected region, poisoned data): ``CmpErr`` at once,
      nothing written.
    * ``MemInv``: ``Cmp`` at once (the device keeps no copies of host lines).

    Responses leave in the order they are ready, not in request order: the
    host matches them by tag. A read or write whose tag is still outstanding
    (its response has not left) is refused (``TAG_REUSE``) with an immediate
    poisoned ``MemData`` or ``CmpErr`` carrying that tag, ahead of the
    original's response: the host's tag is then ambiguous, and the refusal
    says so. At most ``tracked`` requests are outstanding; more wait.

    Every refusal changes nothing in PMEM, counts in ``errors`` and enters the
    error log (``log``, :data:`ERROR_LOG_DEPTH` records, newest first).

    Members
    -------
    cxl : Out(CxlMemSignature)
    pmem : Out(LinePortSignature)
        Client port of the PMEM controller.
    host_owns_checkpoints : In(1)
        The host checkpoints in software: writes to the log, commit and
        snapshot regions are allowed.
    errors : Out(32)
        Requests refused so far.
    last_error : Out(MemError), last_error_addr : Out(ADDR_BITS), last_error_tag : Out(TAG_BITS)
        The most recent refusal.
    log : Out(ArrayLayout(error_record, ERROR_LOG_DEPTH))
        The newest refusals, newest first; ``seq`` is the refusal's number
        (1, 2, ...), 0 in an empty record.
    """

    def __init__(self, config):
        self._config = config
        super().__init__({
            "cxl": Out(CxlMemSignature()),
            "pmem": Out(LinePortSignature(addr_bits=config.media_addr_bits, tag_bits=TAG_BITS)),
            "host_owns_checkpoints": In(1),
            "errors": Out(32),
            "last_error": Out(MemError),
            "last_error_addr": Out(ADDR_BITS),
            "last_error_tag": Out(TAG_BITS),
            "log": Out(data.ArrayLayout(error_record, ERROR_LOG_DEPTH)),
        })

    @property
    def tracked(self):
        """Reads and writes that may be outstanding at once: what PMEM holds in
        flight, and one more waiting for each response channel."""
        return self._config.pmem.read_depth + self._config.pmem.wpq_depth + 2

    def _to_host(self, m, name, responses):
        """``responses`` on their way to the host: on a board through a register
        slice, so that PMEM's read path and the host's do not meet."""
        if not self._config.register_slices:
            return responses
        return through_slice(m, f"{name}_slice", responses)

    @property
    def counters(self):
        """The control window's registers this target drives: ``{Reg: value}``, or
        ``{Reg: {field: value}}`` for some fields of one (the device connects them)."""
        return {
            Reg.MEM_ERRORS: self.errors,
            Reg.MEM_LAST_ERROR: {"kind": self.last_error, "tag": self.last_error_tag,
                                 "addr": self.last_error_addr},
            **{reg: value for k, record in enumerate(self.log) for reg, value in (
                (Reg[f"MEM_ERROR_LOG{k}"], {"kind": record.kind, "tag": record.tag,
                                            "seq": record.seq}),
                (Reg[f"MEM_ERROR_LOG{k}_ADDR"], record.addr))},
        }

    def elaborate(self, platform):
        m = Module()
        cfg = self._config
        cxl = self.cxl

        # One stream of requests, Req and RwD alike.
        m.submodules.merge = merge = StreamMerge(_Unified, 2)
        req, rwd = cxl.m2s_req, cxl.m2s_rwd
        m.d.comb += [
            merge.i0.valid.eq(req.valid), req.ready.eq(merge.i0.ready),
            merge.i0.payload.write.eq(0), merge.i0.payload.opcode.eq(req.payload.opcode),
            merge.i0.payload.tag.eq(req.payload.tag), merge.i0.payload.addr.eq(req.payload.addr),
            merge.i1.valid.eq(rwd.valid), rwd.ready.eq(merge.i1.ready),
            merge.i1.payload.write.eq(1), merge.i1.payload.opcode.eq(rwd.payload.opcode),
            merge.i1.payload.tag.eq(rwd.payload.tag), merge.i1.payload.addr.eq(rwd.payload.addr),
            merge.i1.payload.poison.eq(rwd.payload.poison),
            merge.i1.payload.be.eq(Mux(rwd.payload.opcode == M2SRwDOpcode.MemWrPtl,
                                       rwd.payload.be, (1 << LINE_BYTES) - 1)),
            merge.i1.payload.data.eq(rwd.payload.data),
        ]
        head = merge.o
        if cfg.register_slices:
            # Decode from registers: the host's valid does not reach the PMEM arbiter,
            # and the decode does not reach back into the merge and the host (a
            # request every other cycle at most, far more than a board's link).
            head = through_slice(m, "cut", merge.o, cut_ready=True)
        r = head.payload

        # Tags of reads and writes sent to PMEM whose response has not left.
        n_track = self.tracked
        track_valid = Signal(n_track)
        track_tag = Array(Signal(TAG_BITS, name=f"track_tag{k}") for k in range(n_track))
        track_free = Signal(range(n_track))
        track_room = Signal()
        for k in reversed(range(n_track)):
            with m.If(~track_valid[k]):
                m.d.comb += [track_free.eq(k), track_room.eq(1)]
        if cfg.register_slices:
            # The free slot from registers, a cycle late: the cut below offers a
            # request every other cycle at most, so a slot taken is marked before
            # the next request looks (a slot freed is seen a cycle later).
            free_r, room_r = Signal.like(track_free), Signal()
            m.d.sync += [free_r.eq(track_free), room_r.eq(track_room)]
            track_free, track_room = free_r, room_r

        # Software checkpointing (the ``pmem`` system) hands the regions to the host.
        # The mode is sampled only while no request waits, so a request offered
        # to PMEM stays offered (the stream rule) whatever the host switches.
        owns = Signal()
        with m.If(~head.valid | head.ready):
            m.d.sync += owns.eq(self.host_owns_checkpoints)

        def decode(u, owns):
            """What the request says: its PMEM line, its refusal but for a reused tag,
            and which tracked tags it names."""
            offset = Signal(ADDR_BITS + 1)
            error = Signal(MemError)
            m.d.comb += offset.eq(u.addr - cfg.hdm_base)
            is_read = ~u.write & u.opcode.matches(M2SReqOpcode.MemRd, M2SReqOpcode.MemRdData)
            is_inv = ~u.write & (u.opcode == M2SReqOpcode.MemInv)
            # MemSpecRd is a hint with no completion (its tag is reserved): taken, ignored.
            is_spec = ~u.write & (u.opcode == M2SReqOpcode.MemSpecRd)
            is_write = u.write & u.opcode.matches(M2SRwDOpcode.MemWr, M2SRwDOpcode.MemWrPtl)
            mapped = (u.addr >= cfg.hdm_base) & (offset < cfg.media_lines)
            protected = (offset >= cfg.table_lines) & ~owns
            with m.If(~(is_read | is_inv | is_write | is_spec)):
                m.d.comb += error.eq(MemError.OPCODE)
            with m.Elif(is_inv | is_spec):
                m.d.comb += error.eq(MemError.NONE)
            with m.Elif(~mapped):
                m.d.comb += error.eq(MemError.UNMAPPED)
            with m.Elif(is_write & protected):
                m.d.comb += error.eq(MemError.PROTECTED)
            with m.Elif(is_write & u.poison):
                m.d.comb += error.eq(MemError.POISONED)
            return Cat(offset, error, (error == MemError.NONE) & ~is_inv & ~is_spec, is_inv,
                       is_spec, Cat(track_valid[k] & (track_tag[k] == u.tag) for k in range(n_track)))

        d = Signal(data.StructLayout({
            "offset": ADDR_BITS + 1, "error": MemError, "tagged": 1, "is_inv": 1, "is_spec": 1,
            "names": n_track,
        }))
        # Registered, decoded as the request enters the slice, with the mode
        # ``owns`` takes then. A tracked tag it names stays tracked until its
        # response leaves (hence ``& track_valid``); none is added while the
        # request waits, as only this request can add one.
        m.d.comb += d.eq(on_entry(m, head, decode(merge.o.payload, self.host_owns_checkpoints))
                         if cfg.register_slices else decode(r, owns))
        offset, is_inv, is_spec = d.offset, d.is_inv, d.is_spec
        # A request that would go to PMEM is refused if its tag is still in use.
        reused = d.tagged & (d.names & track_valid).any()
        error = Mux(reused, MemError.TAG_REUSE, d.error)

        # Immediate responses: refusals and MemInv completions.
        m.submodules.now_ndr = now_ndr = fifo.SyncFIFOBuffered(
            width=Shape.cast(S2MNdrOpcode).width + TAG_BITS, depth=4)
        m.submodules.now_drs = now_drs = fifo.SyncFIFOBuffered(width=TAG_BITS, depth=4)
        to_pmem = d.tagged & ~reused
        # Unknown Req opcodes are answered on DRS, unknown RwD opcodes on NDR.
        to_now_drs = (error != MemError.NONE) & ~r.write
        to_now_ndr = ~to_pmem & ~to_now_drs & ~is_spec
        m.d.comb += [
            self.pmem.req.valid.eq(head.valid & to_pmem & track_room),
            self.pmem.req.payload.op.eq(Mux(r.write, LineOp.WRITE, LineOp.READ)),
            self.pmem.req.payload.addr.eq(offset),
            self.pmem.req.payload.tag.eq(r.tag),
            self.pmem.req.payload.data.eq(r.data),
            self.pmem.req.payload.be.eq(r.be),
            now_drs.w_data.eq(r.tag),
            now_drs.w_en.eq(head.valid & to_now_drs),
            now_ndr.w_data.eq(Cat(Mux(error == MemError.NONE, S2MNdrOpcode.Cmp,
                                      S2MNdrOpcode.CmpErr), r.tag)),
            now_ndr.w_en.eq(head.valid & to_now_ndr),
            head.ready.eq(Mux(to_pmem, self.pmem.req.ready & track_room,
                                 Mux(to_now_drs, now_drs.w_rdy,
                                     Mux(to_now_ndr, now_ndr.w_rdy, 1)))),
        ]
        # A refusal enters the log a cycle later, from registers (the decode does not
        # run on into the log's enables), into a ring read newest first. The
        # record is taken from every request offered, so that only the one-bit
        # ``logged`` waits for the take: in the cycle after a refusal it holds
        # the refused request. (As a shift register, Yosys 0.69 (abc9) at times
        # wired two of the log's flip-flops to one net, which nextpnr refuses.)
        refused = head.valid & head.ready & (error != MemError.NONE)
        logged = Signal()
        record = Signal(error_record)
        m.d.sync += logged.eq(refused)
        with m.If(head.valid):
            m.d.sync += [record.kind.eq(error), record.tag.eq(r.tag), record.addr.eq(r.addr)]
        ring = Array(Signal(error_record, name=f"error_ring{k}") for k in range(ERROR_LOG_DEPTH))
        newest = Signal(range(ERROR_LOG_DEPTH))
        with m.If(logged):
            slot = Mux(newest == ERROR_LOG_DEPTH - 1, 0, newest + 1)
            m.d.sync += [self.errors.eq(self.errors + 1), newest.eq(slot), ring[slot].eq(record),
                         ring[slot].seq.eq(self.errors + 1)]
        m.d.comb += self.log[0].eq(ring[newest])
        for k in range(1, ERROR_LOG_DEPTH):
            older = Signal.like(newest, name=f"error_slot{k}")
            m.d.comb += [older.eq(Mux(newest >= k, newest - k, newest + ERROR_LOG_DEPTH - k)),
                         self.log[k].eq(ring[older])]
        # The last refusal is the log's newest record.
        m.d.comb += [self.last_error.eq(self.log[0].kind), self.last_error_addr.eq(self.log[0].addr),
                     self.last_error_tag.eq(self.log[0].tag)]

        # DRS: PMEM read data or poisoned refusals.
        m.submodules.drs = drs = StreamMerge(cxl.s2m_drs.payload.shape(), 2)
        m.d.comb += [
            drs.i0.valid.eq(self.pmem.rdata.valid), self.pmem.rdata.ready.eq(drs.i0.ready),
            drs.i0.payload.opcode.eq(S2MDrsOpcode.MemData),
            drs.i0.payload.tag.eq(self.pmem.rdata.payload.tag),
            drs.i0.payload.data.eq(self.pmem.rdata.payload.data),
            drs.i0.payload.poison.eq(self.pmem.rdata.payload.err),
            drs.i1.valid.eq(now_drs.r_rdy), now_drs.r_en.eq(drs.i1.ready),
            drs.i1.payload.opcode.eq(S2MDrsOpcode.MemData),
            drs.i1.payload.tag.eq(now_drs.r_data),
            drs.i1.payload.poison.eq(1),
        ]
        wiring.connect(m, self._to_host(m, "drs", drs.o), wiring.flipped(cxl.s2m_drs))

        # NDR: persistence completions or immediate ones.
        wack = self.pmem.wack
        if cfg.register_slices:
            # The PMEM controller drains a write only as its ack is taken: the
            # ack enters a slice whose ready is a register, so the drain does
            # not wait on the merge towards the host.
            wack = through_slice(m, "wack_slice", wiring.flipped(wack), cut_ready=True)
        m.submodules.ndr = ndr = StreamMerge(cxl.s2m_ndr.payload.shape(), 2)
        m.d.comb += [
            ndr.i0.valid.eq(wack.valid), wack.ready.eq(ndr.i0.ready),
            ndr.i0.payload.opcode.eq(Mux(wack.payload.err, S2MNdrOpcode.CmpErr, S2MNdrOpcode.Cmp)),
            ndr.i0.payload.tag.eq(wack.payload.tag),
            ndr.i1.valid.eq(now_ndr.r_rdy), now_ndr.r_en.eq(ndr.i1.ready),
            ndr.i1.payload.eq(now_ndr.r_data),
        ]
        wiring.connect(m, self._to_host(m, "ndr", ndr.o), wiring.flipped(cxl.s2m_ndr))

        # A tag is free again once its PMEM response leaves (DRS or NDR; on a
        # board, into the slice towards the host).
        drs_done = drs.o.valid & drs.o.ready & (drs.index == 0)
        ndr_done = ndr.o.valid & ndr.o.ready & (ndr.index == 0)
        sent = head.valid & head.ready & to_pmem
        for k in range(n_track):
            freed = track_valid[k] & (
                (drs_done & (track_tag[k] == drs.o.payload.tag))
                | (ndr_done & (track_tag[k] == ndr.o.payload.tag)))
            with m.If(sent & (track_free == k)):
                m.d.sync += [track_valid[k].eq(1), track_tag[k].eq(r.tag)]
            with m.Elif(freed):
                m.d.sync += track_valid[k].eq(0)
        return m

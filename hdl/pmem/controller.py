"""PMEM controller model: media, timing, a volatile write-pending queue or an energy-backed
write buffer, power failure."""

from types import SimpleNamespace

from amaranth import *
from amaranth.hdl import ResetInserter
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from trainingcxl.spec.config import LINE_BITS, LINE_BYTES
from trainingcxl.spec.registers import Reg
from ..common.arbiter import RoundRobin
from ..common.beats import BeatReceiver, BeatSender
from ..common.line_port import LineOp, LinePortSignature
from ..common.onehot import one_hot_select
from ..common.ram import Ram
from ..common.rate import RateLimiter
from ..common.register_slice import a_cycle_later, through_slice

__all__ = ["PmemController", "REGIONS"]

#: Regions the line counters tell apart, in the order of ``reads_by_region``.
REGIONS = ("data", "log", "snapshot")



def _aged(m, name, issue, release, latency, depth):
    """Whether the oldest of the entries still held was issued ``latency`` cycles ago or more.

    Entries are issued at most one per cycle (``issue``) and released in issue
    order (``release``). A shift register ages the issue strobes and a counter
    holds how many held entries are old enough, so the answer is a register
    compare: no timestamp subtraction in front of the release handshake."""
    age = Signal(latency - 1, name=f"{name}_age")     # bit k: issued k + 1 cycles ago
    m.d.sync += age.eq(Cat(issue, age[:-1]))
    old = Signal(range(depth + 1), name=f"{name}_old")
    m.d.sync += old.eq(old + age[latency - 2] - release)
    return old != 0


class PmemController(wiring.Component):
    """Persistent memory behind a controller with PMEM-like timing (docs/design.md, "Failure model").

    Clients reach the media through line ports served round-robin, one
    request per cycle.

    * A read is accepted at most at ``pmem.read_rate``, with at most
      ``pmem.read_depth`` reads in flight; its data returns ``read_latency``
      cycles after acceptance, in acceptance order. A read of a line that has
      a write pending waits until that write reached the media, so reads
      always see the newest accepted write. (With ``register_slices`` every
      port's requests enter through a slice that cuts ``ready``; the check is
      registered, and a read is served from its second cycle offered; a read
      taken is issued from a register in the next cycle, a write enters the
      WPQ in the next cycle, and no request is taken in the two cycles after
      a write was, nor a read in the cycle after a read. The latencies still
      count from the take at the port.) With ``line_beats`` above 1 lines
      move in beats (``hdl/common/beats.py``): a port's requests reach its
      slice in beats (a read in one), and a line read leaves the read queue in
      beats on one bus to all ports, each of which puts it together again; a
      write's line stays in its port's receiver until the write is taken,
      then moves into the WPQ a beat a cycle, and no write is taken before
      the line of the one before is in. The latencies still hold; a port
      takes a read every third cycle at most, and a write every ``2 *
      line_beats + 1`` cycles.
    * A write is accepted into the write-pending queue (WPQ) when there is
      room. It leaves the queue for the media no earlier than
      ``write_latency`` cycles later, at most at ``pmem.write_rate``, and only
      then is it acknowledged on ``wack``: an acknowledged write is persistent.
    * ``power_fail`` drops everything volatile (the WPQ, reads in flight, the
      timing state); the media keeps what reached it. The media is atomic per
      8 bytes only: a line leaving the queue in the very cycle the power fails
      is torn (a pseudo-random subset of its 8-byte words lands).
    * With the buffer (``Config.buffer_size`` above 0) the persistence domain is an
      energy-backed write buffer instead of the media (``Config.pmem``): a write
      taken is in the media (and every read sees it) at once, and persistent,
      acknowledged ``buffer_latency`` cycles after its take; the buffer then drains
      it to the media at ``write_rate``, and takes a write for the media only while
      fewer than ``buffer_size`` wait to drain. A write to the checkpoint region
      (every region after the tables: the undo log ring, the commit slots, the ring
      headers, the MLP snapshot slots) stays in the buffer and never drains: it is
      counted in ``lines_buffered``, not as a media write. A power failure loses
      nothing taken: the buffer's energy writes it to the media.

    The media is a backdoor RAM inside (``media``), or, with ``media_port``,
    whatever memory a board puts behind the ``media_port`` line port (an SDRAM
    controller): reads and writes go to it in one queue, in order, and a line
    in that queue has reached the media (power failures do not reset it; the
    answers to reads issued before one are dropped). The timing above still
    holds as long as the memory is faster than it; ``media_late`` counts the
    cycles it was not (a read due whose data was not back, a write due that
    the queue could not take).

    Parameters
    ----------
    config : Config
    n_ports : int
        Number of client ports, ``port0`` ... ``port{n_ports-1}``.
    tag_bits : int
        Width of the tags the clients use.
    background : sequence of int
        Ports served only in cycles when no other port has a request that
        could be served, the first before the second and so on: checkpoint
        traffic (the undo log, then snapshot pulls) takes what the engines
        leave and never slows them down.
    media_port : bool
        The media is outside, behind ``media_port``.

    Members
    -------
    port0 ... : In(LinePortSignature)
        Client ports, addressed in media lines.
    power_fail : In(1)
    wpq_level : Out
        Writes accepted and not yet persistent (with the buffer: not yet acknowledged).
    lines_read, lines_written : Out(32)
        Media lines read and written since the last power failure.
    reads_by_region, writes_by_region : Out(ArrayLayout(32, 3))
        The same, by the region of the line: the tables, the undo log and
        commit records, the MLP snapshot slots (:data:`REGIONS`).
    lines_buffered : Out(32)
        With the buffer: checkpoint-region lines written, kept in the buffer.
    backlog : Out(32)
        With the buffer: lines it holds for the media, not yet drained.
    media_port : Out(LinePortSignature), media_late : Out(32)
        With ``media_port`` only.
    """

    def __init__(self, config, *, n_ports, tag_bits=16, background=(), media_port=False):
        if n_ports < 1:
            raise ValueError(f"n_ports must be at least 1, not {n_ports}")
        if media_port and config.buffer_size:
            raise ValueError("the energy-backed buffer writes the media inside the controller; "
                             "with a media port the configuration needs pmem.buffer_lines=0")
        if not set(background) <= set(range(n_ports)):
            raise ValueError(f"background ports {sorted(background)} are not all in 0..{n_ports - 1}")
        self._config = config
        self._n_ports = n_ports
        self._background = tuple(background)
        self._tag_bits = tag_bits
        self._media_port = media_port
        self._port_sig = LinePortSignature(addr_bits=config.media_addr_bits, tag_bits=tag_bits)
        members = {f"port{i}": In(self._port_sig) for i in range(n_ports)}
        members.update({
            "power_fail": In(1),
            "wpq_level": Out(range(config.pmem.wpq_depth + 1)),
            "lines_read": Out(32),
            "lines_written": Out(32),
            "reads_by_region": Out(data.ArrayLayout(32, len(REGIONS))),
            "writes_by_region": Out(data.ArrayLayout(32, len(REGIONS))),
            "lines_buffered": Out(32),
            "backlog": Out(32),
        })
        if media_port:
            members.update({
                "media_port": Out(LinePortSignature(addr_bits=config.media_addr_bits, tag_bits=1)),
                "media_late": Out(32),
            })
        super().__init__(members)
        self.media = None if media_port else Ram(shape=LINE_BITS, depth=config.media_lines,
                                                 backdoor="media")

    @property
    def ports(self):
        return [getattr(self, f"port{i}") for i in range(self._n_ports)]

    @property
    def port_signature(self):
        return self._port_sig

    @property
    def counters(self):
        """The control window's registers this controller drives: ``{Reg: value}``, or
        ``{Reg: {field: value}}`` for some fields of one (the device connects them)."""
        return {
            Reg.PMEM_READS: self.lines_read, Reg.PMEM_WRITES: self.lines_written,
            **{Reg[f"PMEM_READS_{r.upper()}"]: self.reads_by_region[k]
               for k, r in enumerate(REGIONS)},
            **{Reg[f"PMEM_WRITES_{r.upper()}"]: self.writes_by_region[k]
               for k, r in enumerate(REGIONS)},
            # With the media in block RAM the model's timing always holds.
            Reg.MEDIA_LATE: self.media_late if self._media_port else C(0),
            Reg.PMEM_WRITES_BUFFERED: self.lines_buffered,
            Reg.PMEM_BACKLOG: self.backlog,
        }

    def elaborate(self, platform):
        m = Module()
        cfg = self._config.pmem
        n = self._n_ports
        abits = self._config.media_addr_bits
        registered = self._config.register_slices
        # Lines in beats: a write's line reaches the WPQ a beat a cycle after its take.
        in_beats = self._config.line_beats > 1
        ports = self.ports
        if registered:
            # Requests enter through a slice each that cuts ``ready`` too (or,
            # in beats, through a receiver that does the same): the
            # arbitration starts and ends at registers, and a request taken
            # stays in its slice for the cycle after (the slice takes the next
            # one only once empty), which the write into the WPQ relies on.
            inner = []
            for i, p in enumerate(ports):
                if in_beats:
                    req, recv = self._request_in_beats(m, i, p.req)
                else:
                    req, recv = through_slice(m, f"slice{i}", wiring.flipped(p.req),
                                              cut_ready=True), None
                inner.append(SimpleNamespace(req=req, rdata=p.rdata, wack=p.wack, recv=recv))
            ports = inner
        client_bits = max(1, (n - 1).bit_length())

        if self._media_port:
            outside = Module()
            rd, wr, late = self._media_queue(outside, m, client_bits)
        else:
            m.submodules.media = media = self.media
            late = None                 # said only of an outside media's queue
            rd = media.read_port()
            wr = media.write_port(granularity=8)

        # Registered, a read pays the rate a cycle after its take, as it is issued.
        m.submodules.read_rate = read_rate = RateLimiter(*cfg.read_rate, late=registered)
        m.submodules.write_rate = write_rate = RateLimiter(*cfg.write_rate)

        # -- write-pending queue: payload in a FIFO, addresses mirrored for hazard checks
        wpq_fields = {"addr": abits, "tag": self._tag_bits, "client": client_bits}
        if not in_beats:
            wpq_fields.update({"data": LINE_BITS, "be": LINE_BYTES})
        wpq_layout = data.StructLayout(wpq_fields)
        # Registered, the room for a write is counted in hazard slots, not by the
        # FIFO: one entry more is a margin for the buffered FIFO's output register.
        m.submodules.wpq = wpq = fifo.SyncFIFOBuffered(width=wpq_layout.size,
                                                       depth=cfg.wpq_depth + registered)
        wpq_head = wpq_layout(wpq.r_data)
        wpq_in = Signal(wpq_layout)
        m.d.comb += wpq.w_data.eq(wpq_in)
        pend_addr = Array(Signal(abits, name=f"pend_addr{i}") for i in range(cfg.wpq_depth))
        pend_valid = Signal(cfg.wpq_depth)
        wp = Signal(range(cfg.wpq_depth))
        rp = Signal(range(cfg.wpq_depth))
        m.d.comb += self.wpq_level.eq(wpq.level)

        # -- reads in flight: data captured at acceptance, released after the latency
        rsp_layout = data.StructLayout({
            "data": LINE_BITS, "tag": self._tag_bits, "client": client_bits,
        })
        # One entry more than reads in flight: a buffered FIFO briefly counts an
        # entry twice while it moves to the output register.
        m.submodules.rq = rq = fifo.SyncFIFOBuffered(width=rsp_layout.size, depth=cfg.read_depth + 1)
        rq_head = rsp_layout(rq.r_data)
        inflight = Signal(range(cfg.read_depth + 1))

        # -- arbitration among requests that can be served now
        def hazard(addr):
            return Cat(pend_valid[i] & (pend_addr[i] == addr) for i in range(cfg.wpq_depth)).any()

        # The read taken this cycle, as it is issued: to the media, the rate
        # limiter, the counters. Registered, it is issued in the next cycle (and
        # a write enters the WPQ then), so that the arbitration ends at a
        # register instead of running on into the rate limiter and the queues.
        issue_layout = data.StructLayout({"valid": 1, "addr": abits, "tag": self._tag_bits,
                                          "client": client_bits})
        iss = Signal(issue_layout)
        issue_read = iss.valid
        issue_write = Signal()              # a write taken this cycle

        # ``inflight < read_depth``, kept in a register of its own (compared
        # with the next count) so that the arbitration starts at flip-flops.
        read_room = Signal(init=1)
        can_read = read_rate.ok & read_room
        if self._media_port:
            can_read &= rd.ready
        if registered:
            # What the registers do not know yet is the request being issued:
            # a read waits for the cycle after it (the rate, the reads in
            # flight and the media queue then count it). A write enters the
            # WPQ and its hazard entry in the cycle after its take, and the
            # registers see it a cycle later still: nothing is taken in the
            # two cycles after a write. (The boards' PMEM takes a write every
            # 160 cycles at most.)
            can_read &= ~issue_read
            wrote = Signal()                # a write was taken one or two cycles before
            write_free = Signal()
            m.d.sync += write_free.eq(~pend_valid.bit_select(wp, 1))
            can_write = write_free & ~wrote
            if in_beats:
                # One line at a time moves into the WPQ's lines: the next write is
                # taken in the cycle the last beat of this one's is written. (``wrote``
                # covers the first two cycles after a take, so the register needs
                # only the beats, not the arbitration's end.)
                lane = Signal(self._config.line_beats)
                quiet = Signal(init=1)
                m.d.sync += quiet.eq(~lane[1:-2].any())
                can_write &= quiet
        else:
            wrote = None
            can_write = wpq.w_rdy
        size = self._config.buffer_size
        buffered = size > 0
        if buffered:
            # The buffer takes a write for the checkpoint region whenever an ack slot is
            # free, one for the media only while it has room for it to wait to drain.
            backlog = Signal(range(size + 1))
            room = Signal()
            m.d.comb += room.eq(backlog < size)
            acks_free = can_write
            can_write = lambda addr: acks_free & (self._kept(addr) | room)      # noqa: E731
        m.submodules.arb = arb = RoundRobin(n, late_mask=registered)
        self._request_arbiter(m, ports, arb, hazard, can_read, can_write, wrote)

        # The granted request, an OR of the requests masked by the one-hot grant:
        # a level or two shorter than decoding the binary grant into a multiplexer.
        payloads = [p.req.payload for p in ports]
        m.d.comb += arb.advance.eq(arb.valid)
        for i, p in enumerate(ports):
            m.d.comb += p.req.ready.eq(arb.onehot[i])
        reads = [p.req.ready & (p.req.payload.op == LineOp.READ) for p in ports]
        writes = [p.req.ready & (p.req.payload.op == LineOp.WRITE) for p in ports]
        m.d.comb += issue_write.eq(Cat(writes).any())
        taken = Signal.like(ports[0].req.payload)
        if registered:
            # The request taken is selected in the next cycle, from its slice (which
            # still holds it), by a register of the one-hot grant: the arbitration
            # ends at that register, and neither runs on into the read's issue nor
            # the WPQ, nor decodes a binary grant into a wide multiplexer (next to
            # the SDRAM pins, where router2 found the fewest free wires:
            # docs/boards.md, "When routing does not converge").
            client = Signal.like(arb.grant)
            enqueue = Signal()              # the write taken in the cycle before
            m.d.comb += taken.eq(one_hot_select(a_cycle_later(m, arb.onehot, "w_onehot"),
                                                payloads))
            m.d.sync += [iss.valid.eq(Cat(reads).any()), client.eq(arb.grant),
                         enqueue.eq(issue_write), wrote.eq(issue_write | enqueue)]
        else:
            client = arb.grant
            enqueue = issue_write
            m.d.comb += [taken.eq(one_hot_select(arb.onehot, payloads)),
                         iss.valid.eq(Cat(reads).any())]
        m.d.comb += [iss.addr.eq(taken.addr[:abits]), iss.tag.eq(taken.tag), iss.client.eq(client)]
        m.d.comb += [
            read_rate.take.eq(issue_read),
            rd.addr.eq(iss.addr),
            rd.en.eq(issue_read),
        ]

        read_aged = self._return_reads(m, ports, rd, rq, rq_head, rsp_layout, iss, issue_read,
                                       inflight, read_room, client_bits)

        # Enqueue writes: registered, in the cycle after the take, from the
        # request selected for the read's issue.
        m.d.comb += [
            wpq_in.addr.eq(taken.addr[:abits]), wpq_in.tag.eq(taken.tag),
            wpq_in.client.eq(client), wpq.w_en.eq(enqueue),
        ]
        if in_beats:
            head_data, head_be = self._lines_in_beats(m, ports, writes, lane, rp)
        else:
            m.d.comb += [wpq_in.data.eq(taken.data), wpq_in.be.eq(taken.be)]
            head_data, head_be = wpq_head.data, wpq_head.be
        if buffered:
            self._buffer_writes(m, ports, wpq, wpq_head, taken, enqueue, backlog, write_rate, wr)
            self._count(m, iss, issue_read, taken.addr[:abits], enqueue)
        else:
            with m.If(enqueue):
                m.d.sync += [pend_addr[wp].eq(taken.addr[:abits]), wp.eq(wp + 1)]
            drain = self._drain_writes(m, ports, wpq, wpq_head, head_data, head_be, enqueue, wp,
                                       rp, pend_valid, write_rate, wr, late, read_aged, rq)
            self._count(m, iss, issue_read, wpq_head.addr, drain)

        # Power failure clears every register and FIFO pointer of the
        # controller; the media is a memory and keeps its contents.
        if not self._media_port:
            return ResetInserter(self.power_fail)(m)
        outside.submodules.core = ResetInserter(self.power_fail)(m)
        return outside

    def _request_arbiter(self, m, ports, arb, hazard, can_read, can_write, wrote):
        """The arbiter's requests: the ports whose request can be served now, the
        background ports only while no other is."""
        abits = self._config.media_addr_bits
        registered = self._config.register_slices
        eligible = []
        for i, p in enumerate(ports):
            is_rd = p.req.payload.op == LineOp.READ
            addr = p.req.payload.addr[:abits]
            if registered:
                # The hazard check leaves the arbitration path: each read's check
                # is registered, made a cycle ahead against the writes pending now
                # (one drained this cycle still counts: the read waits a cycle
                # more). A read is not taken in the cycle after a write was, whose
                # address the check did not see yet. A port holds its payload
                # while it is offered and not taken (stream rule), so the
                # registered check is for the read offered now: a read is
                # eligible from its second cycle offered.
                offered = Signal(name=f"offered{i}")
                blocked = Signal(name=f"blocked{i}")
                m.d.sync += [offered.eq(p.req.valid & ~p.req.ready), blocked.eq(hazard(addr))]
                clear = offered & ~blocked & ~wrote
            else:
                clear = ~hazard(addr)
            ok = Signal(name=f"eligible{i}")
            writable = can_write(addr) if callable(can_write) else can_write
            m.d.comb += ok.eq(p.req.valid & Mux(is_rd, can_read & clear, writable))
            eligible.append(ok)
        busier = Cat(ok for i, ok in enumerate(eligible) if i not in self._background).any()
        if registered:
            # Background ports give way to the engines as they were a cycle before:
            # the engines' eligibility does not run on into the background's
            # requests (an engine request that just became eligible may wait one
            # grant).
            busier_r = Signal()
            m.d.sync += busier_r.eq(busier)
            busier = busier_r
        for i, ok in enumerate(eligible):
            if i not in self._background:
                m.d.comb += arb.requests[i].eq(ok)
        for i in self._background:
            m.d.comb += arb.requests[i].eq(eligible[i] & ~busier)
            busier = busier | eligible[i]

    def _return_reads(self, m, ports, rd, rq, rq_head, rsp_layout, iss, issue_read, inflight,
                      read_room, client_bits):
        """Reads from the media into the read queue, released to their ports in order once
        their latency has passed; returns whether the head's has."""
        cfg = self._config.pmem
        registered = self._config.register_slices
        rq_in = Signal(rsp_layout)
        m.d.comb += rq.w_data.eq(rq_in)
        if self._media_port:
            # Answers come back in order, with the tag and client kept here.
            meta_layout = data.StructLayout({"tag": self._tag_bits, "client": client_bits})
            m.submodules.meta = meta = fifo.SyncFIFOBuffered(width=meta_layout.size,
                                                             depth=cfg.read_depth + 1)
            head = meta_layout(meta.r_data)
            m.d.comb += [
                meta.w_data.eq(Cat(iss.tag, iss.client)), meta.w_en.eq(issue_read),
                rq_in.data.eq(rd.data), rq_in.tag.eq(head.tag), rq_in.client.eq(head.client),
                rq.w_en.eq(rd.valid), meta.r_en.eq(rd.valid),
            ]
        else:
            # Media data appears one cycle after acceptance.
            rd_pending = Signal()
            rd_tag = Signal(self._tag_bits)
            rd_client = Signal(client_bits)
            m.d.sync += [
                rd_pending.eq(issue_read),
                rd_tag.eq(iss.tag),
                rd_client.eq(iss.client),
            ]
            m.d.comb += [
                rq_in.data.eq(rd.data), rq_in.tag.eq(rd_tag),
                rq_in.client.eq(rd_client),
                rq.w_en.eq(rd_pending),
            ]

        # Release reads in order once their latency has passed, counted from
        # the take at the port: registered, the slice, the hazard check and the
        # issue register are three cycles of it, and a line in beats its beats
        # and the cycle its port puts it together (``Config.min_read_latency``).
        beats = self._config.line_beats
        rq_pop = Signal()
        read_aged = _aged(m, "read", issue_read, rq_pop,
                          cfg.read_latency - 3 * registered - self._config.read_beat_cycles,
                          cfg.read_depth)
        rq_due = rq.r_rdy & read_aged
        if beats == 1:
            for i, p in enumerate(ports):
                m.d.comb += [
                    p.rdata.payload.tag.eq(rq_head.tag),
                    p.rdata.payload.data.eq(rq_head.data),
                    p.rdata.valid.eq(rq_due & (rq_head.client == i)),
                ]
            with m.Switch(rq_head.client):
                for i, p in enumerate(ports):
                    with m.Case(i):
                        m.d.comb += rq_pop.eq(rq_due & p.rdata.ready)
        else:
            self._read_in_beats(m, ports, rq_head, rq_due, rq_pop)
        m.d.comb += rq.r_en.eq(rq_pop)
        inflight_next = inflight + issue_read - rq_pop
        m.d.sync += [inflight.eq(inflight_next), read_room.eq(inflight_next < cfg.read_depth)]
        return read_aged

    def _drain_writes(self, m, ports, wpq, wpq_head, head_data, head_be, enqueue, wp, rp,
                      pend_valid, write_rate, wr, late, read_aged, rq):
        """The WPQ's oldest write to the media once due and its client can take the ack
        (torn by a power failure in that cycle); returns the drain."""
        cfg = self._config.pmem
        registered = self._config.register_slices
        # Drain the oldest write to the media when due and its client can take the ack.
        wack_ready = self._wack_ready(m, ports, wpq_head.client)
        # The ack's valid must not depend on its ready: offer it whenever the
        # head is due and a write slot is free, drain when it is taken.
        drain = Signal()
        # A write's latency too counts from the port (registered, its slice
        # and its take are two cycles of it, and in beats its last beat one).
        due = (wpq.r_rdy
               & _aged(m, "write", enqueue, drain,
                       cfg.write_latency - 2 * registered - self._config.request_beat_cycles,
                       cfg.wpq_depth)
               & write_rate.ok)
        if self._media_port:
            # One request a cycle into the media's queue: a write leaving takes the
            # cycle, and a read waits (``can_read``). The ack is offered only when the
            # queue can take the write, so that an ack taken is a write drained.
            m.d.comb += [wr.wants.eq(due & wack_ready), wr.push.eq(drain),
                         late.eq((read_aged & ~rq.r_rdy) | (due & wack_ready & ~wr.room))]
            due = due & wr.ready
        m.d.comb += drain.eq(due & wack_ready)
        # The media is atomic per 8 bytes only: a line leaving the queue in the
        # cycle the power fails reaches the media for a pseudo-random subset of
        # its 8-byte words (a torn line), and is not acknowledged.
        lfsr = Signal(16, init=0xACE1)
        m.d.sync += lfsr.eq(Cat(lfsr[1:], lfsr[0] ^ lfsr[2] ^ lfsr[3] ^ lfsr[5]))
        survive = Cat(lfsr[k].replicate(8) for k in range(LINE_BYTES // 8))
        m.d.comb += [
            write_rate.take.eq(drain),
            wpq.r_en.eq(drain),
            wr.addr.eq(wpq_head.addr),
            wr.data.eq(head_data),
            wr.en.eq(Mux(drain, head_be & Mux(self.power_fail, survive, -1), 0)),
        ]
        for i, p in enumerate(ports):
            m.d.comb += [
                p.wack.payload.tag.eq(wpq_head.tag),
                p.wack.valid.eq(due & (wpq_head.client == i)),
            ]
        with m.If(drain):
            m.d.sync += rp.eq(rp + 1)

        set_mask = Mux(enqueue, 1 << wp, 0)
        clr_mask = Mux(drain, 1 << rp, 0)
        m.d.sync += pend_valid.eq((pend_valid & ~clr_mask) | set_mask)
        return drain

    @staticmethod
    def _wack_ready(m, ports, client):
        """Whether the port of ``client`` can take an acknowledgement now."""
        ready = Signal()
        with m.Switch(client):
            for i, p in enumerate(ports):
                with m.Case(i):
                    m.d.comb += ready.eq(p.wack.ready)
        return ready

    def _kept(self, addr):
        """Whether a line is in the checkpoint region, which the energy-backed buffer
        keeps: every region after the tables (the undo log ring, the commit slots, the
        ring headers, the two MLP snapshot slots), a size fixed by the configuration."""
        return addr >= self._config.table_lines

    def _buffer_writes(self, m, ports, wpq, wpq_head, taken, enqueue, backlog, write_rate, wr):
        """The energy-backed buffer: a write taken goes into the media at once (so every
        read sees it) and is acknowledged ``buffer_latency`` cycles later, in order (the
        WPQ holds the acks); the lines for the media wait in ``backlog`` and drain at the
        write rate, those of the checkpoint region stay in the buffer."""
        cfg = self._config.pmem
        abits = self._config.media_addr_bits
        m.d.comb += [wr.addr.eq(taken.addr[:abits]), wr.data.eq(taken.data),
                     wr.en.eq(Mux(enqueue, taken.be, 0))]
        wack_ready = self._wack_ready(m, ports, wpq_head.client)
        acked = Signal()
        due = wpq.r_rdy & _aged(m, "ack", enqueue, acked, cfg.buffer_latency, cfg.wpq_depth)
        m.d.comb += [acked.eq(due & wack_ready), wpq.r_en.eq(acked)]
        for i, p in enumerate(ports):
            m.d.comb += [p.wack.payload.tag.eq(wpq_head.tag),
                         p.wack.valid.eq(due & (wpq_head.client == i))]
        # The media's write bandwidth: the buffer drains a line whenever the rate allows.
        drained = Signal()
        m.d.comb += [drained.eq((backlog != 0) & write_rate.ok), write_rate.take.eq(drained)]
        bound = enqueue & ~self._kept(taken.addr[:abits])
        m.d.sync += backlog.eq(backlog + bound - drained)
        m.d.comb += self.backlog.eq(backlog)

    def _count(self, m, iss, issue_read, write_addr, written):
        """Lines read and written, in all and by region; ``written``: a write of
        ``write_addr`` reached the media, or with the buffer, the buffer (whose
        checkpoint-region lines are counted apart, in ``lines_buffered``)."""
        def region(addr):
            # data < log (with the commit records) < snapshot slots
            return Mux(addr < self._config.table_lines, 0,
                       Mux(addr < self._config.snapshot_base[0], 1, 2))

        # The counters count a cycle late, from registers: their adders are not
        # at the end of the arbitration path.
        read_by = Signal(len(REGIONS))
        write_by = Signal(len(REGIONS))
        read_region = region(iss.addr)
        write_region = region(write_addr)
        if self._config.buffer_size:
            kept = Signal()
            m.d.sync += [kept.eq(written & self._kept(write_addr)),
                         self.lines_buffered.eq(self.lines_buffered + kept)]
            written = written & ~self._kept(write_addr)
        m.d.sync += [
            read_by.eq(Cat(issue_read & (read_region == k) for k in range(len(REGIONS)))),
            write_by.eq(Cat(written & (write_region == k) for k in range(len(REGIONS)))),
            self.lines_read.eq(self.lines_read + read_by.any()),
            self.lines_written.eq(self.lines_written + write_by.any()),
        ]
        for k in range(len(REGIONS)):
            m.d.sync += [
                self.reads_by_region[k].eq(self.reads_by_region[k] + read_by[k]),
                self.writes_by_region[k].eq(self.writes_by_region[k] + write_by[k]),
            ]

    def _request_in_beats(self, m, i, req):
        """Port ``i``'s requests, taken in beats next to the engine: a read in one
        beat, a write with its data and byte enables in ``Config.line_beats``.
        Returns the stream of requests (their op, address and tag; a write's line
        stays in the receiver, which unloads it when it is taken) and the receiver."""
        layout = req.payload.shape()
        meta = data.StructLayout({"op": LineOp, "addr": len(req.payload.addr),
                                  "tag": self._tag_bits})
        width = LINE_BITS + LINE_BYTES
        beats = self._config.line_beats
        m.submodules[f"request_beats{i}"] = send = BeatSender(width=width, beats=beats, meta=meta,
                                                               short=True)
        m.submodules[f"slice{i}"] = recv = BeatReceiver(width=width, beats=beats, meta=meta,
                                                         unload=True)
        whole = stream.Signature(layout).create(path=(f"request{i}",))
        m.d.comb += [
            send.i.valid.eq(req.valid), req.ready.eq(send.i.ready),
            send.i.payload.data.eq(Cat(req.payload.data, req.payload.be)),
            send.i.payload.meta.op.eq(req.payload.op), send.i.payload.meta.addr.eq(req.payload.addr),
            send.i.payload.meta.tag.eq(req.payload.tag),
            send.i.payload.short.eq(req.payload.op == LineOp.READ),
            whole.valid.eq(recv.o.valid), recv.o.ready.eq(whole.ready),
            whole.payload.op.eq(recv.o.payload.meta.op),
            whole.payload.addr.eq(recv.o.payload.meta.addr),
            whole.payload.tag.eq(recv.o.payload.meta.tag),
        ]
        wiring.connect(m, send.o, recv.i)
        return whole, recv

    def _lines_in_beats(self, m, ports, writes, lane, rp):
        """The WPQ's lines, written a beat a cycle from the receiver of the port
        whose write was taken (``writes``: one per port, the take), one line at a
        time; ``lane`` is driven here, one-hot, the beat written. Returns the data
        and byte enables of the line in WPQ slot ``rp``.

        The ports' whole lines then never meet: one 72-bit bus per port does, in
        front of a LUT RAM whose write enable picks the beat."""
        beats = self._config.line_beats
        width = LINE_BITS + LINE_BYTES
        m.submodules.wpq_lines = lines = Ram(shape=width, depth=self._config.pmem.wpq_depth)
        write = lines.write_port(granularity=width // beats)
        head = lines.read_port(domain="comb")
        source = Signal(len(ports))         # one-hot: the port whose line is moving
        slot = Signal.like(rp)              # the WPQ slot it moves into
        took = Cat(writes)
        m.d.sync += lane.eq(Mux(took.any(), 1, lane << 1))
        with m.If(took.any()):
            m.d.sync += source.eq(took)
        with m.If(lane[-1]):
            m.d.sync += slot.eq(slot + 1)
        for p, w in zip(ports, writes):
            m.d.comb += p.recv.unload.eq(w)
        beat = one_hot_select(source, [p.recv.tail for p in ports])
        m.d.comb += [write.addr.eq(slot), write.data.eq(beat.replicate(beats)),
                     write.en.eq(lane), head.addr.eq(rp)]
        return head.data[:LINE_BITS], head.data[LINE_BITS:]

    def _read_in_beats(self, m, ports, head, due, pop):
        """The read queue's head leaves in beats on one narrow bus to all ports,
        each of which puts its lines together again (``Config.line_beats``)."""
        beats = self._config.line_beats
        n = self._n_ports
        meta = data.StructLayout({"tag": self._tag_bits, "to": n})
        m.submodules.read_beats = sender = BeatSender(width=LINE_BITS, beats=beats, meta=meta)
        m.d.comb += [
            sender.i.valid.eq(due), sender.i.payload.data.eq(head.data),
            sender.i.payload.meta.tag.eq(head.tag),
            sender.i.payload.meta.to.eq(1 << head.client),
            pop.eq(due & sender.i.ready),
        ]
        beat = sender.o.payload
        taken = []
        for i, p in enumerate(ports):
            recv = BeatReceiver(width=LINE_BITS, beats=beats, meta=self._tag_bits)
            m.submodules[f"read_beats{i}"] = recv
            m.d.comb += [
                recv.i.valid.eq(sender.o.valid & beat.meta.to[i]),
                recv.i.payload.data.eq(beat.data), recv.i.payload.meta.eq(beat.meta.tag),
                recv.i.payload.last.eq(beat.last),
                p.rdata.valid.eq(recv.o.valid), p.rdata.payload.data.eq(recv.o.payload.data),
                p.rdata.payload.tag.eq(recv.o.payload.meta), recv.o.ready.eq(p.rdata.ready),
            ]
            taken.append(beat.meta.to[i] & recv.i.ready)
        m.d.comb += sender.o.ready.eq(Cat(taken).any())

    def _media_queue(self, outside, m, client_bits):
        """The queue to an outside media, in ``outside`` (which no power failure resets);
        returns the read and write sides ``m`` uses, and the signal it says late on."""
        cfg = self._config.pmem
        abits = self._config.media_addr_bits
        port = self.media_port
        layout = data.StructLayout({"op": LineOp, "addr": abits, "data": LINE_BITS,
                                    "be": LINE_BYTES})
        registered = self._config.register_slices
        # Registered, a read is let through on a registered count of the room,
        # two cycles before it is pushed: three entries more keep it exact.
        depth = cfg.read_depth + cfg.wpq_depth + 3 * registered
        outside.submodules.media_queue = queue = fifo.SyncFIFOBuffered(width=layout.size,
                                                                       depth=depth)
        rd = SimpleNamespace(addr=Signal(abits, name="media_rd_addr"),
                             en=Signal(name="media_rd_en"),
                             data=Signal(LINE_BITS, name="media_rd_data"),
                             valid=Signal(name="media_rd_valid"),
                             ready=Signal(name="media_rd_ready"))
        wr = SimpleNamespace(addr=Signal(abits, name="media_wr_addr"),
                             data=Signal(LINE_BITS, name="media_wr_data"),
                             en=Signal(LINE_BYTES, name="media_wr_en"),
                             wants=Signal(name="media_wr_wants"),
                             push=Signal(name="media_wr_push"),
                             ready=Signal(name="media_wr_ready"),
                             room=Signal(name="media_wr_room"))
        late = Signal(name="media_late_now")
        # A write leaving the WPQ is queued, with its byte enables (all off
        # for a line the power failure tore away whole: a write of nothing).
        push_write = wr.push
        entry = Signal(layout)
        head = layout(queue.r_data)
        outside.d.comb += [
            entry.op.eq(Mux(push_write, LineOp.WRITE, LineOp.READ)),
            entry.addr.eq(Mux(push_write, wr.addr, rd.addr)),
            entry.data.eq(wr.data), entry.be.eq(wr.en),
            queue.w_data.eq(entry), queue.w_en.eq(push_write | rd.en),
            wr.room.eq(queue.w_rdy),
        ]
        if registered:
            # A read issued has the cycle (it cannot wait: it was taken the
            # cycle before, when the room was counted); a write waits.
            room = Signal()
            outside.d.sync += room.eq(queue.level <= depth - 4)
            outside.d.comb += [rd.ready.eq(room), wr.ready.eq(queue.w_rdy & ~rd.en)]
        else:
            # A write leaving the WPQ has the cycle; a read waits for the next.
            outside.d.comb += [rd.ready.eq(queue.w_rdy & ~wr.wants), wr.ready.eq(queue.w_rdy)]
        outside.d.comb += [
            port.req.valid.eq(queue.r_rdy), queue.r_en.eq(port.req.ready),
            port.req.payload.op.eq(head.op), port.req.payload.addr.eq(head.addr),
            port.req.payload.data.eq(head.data), port.req.payload.be.eq(head.be),
            port.req.payload.tag.eq(0),
            port.rdata.ready.eq(1), port.wack.ready.eq(1),
        ]
        # The answers to reads issued before a power failure are dropped.
        outstanding = Signal(range(2 * depth + 2))
        stale = Signal.like(outstanding)
        answer = port.rdata.valid
        after = outstanding + rd.en - answer
        outside.d.sync += outstanding.eq(after)
        with outside.If(self.power_fail):
            outside.d.sync += stale.eq(after)
        with outside.Elif(answer & (stale != 0)):
            outside.d.sync += stale.eq(stale - 1)
        outside.d.comb += [rd.valid.eq(answer & (stale == 0)),
                           rd.data.eq(port.rdata.payload.data)]
        # A counter like the device's others: it starts again at each power-up.
        outside.d.sync += self.media_late.eq(Mux(self.power_fail, 0, self.media_late + late))
        return rd, wr, late


"""A controller for SDR SDRAM that reads and writes 64-byte lines."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from trainingcxl.spec.config import LINE_BITS, SdramTiming
from ..common.line_port import LineOp, LinePortSignature
from .pads import Command, SdramPadsSignature

__all__ = ["SdramController", "BURST"]

#: Beats of each READ or WRITE command (the mode register's burst length).
BURST = 8


class SdramController(wiring.Component):
    """Lines of an SDR SDRAM chip behind a line port, one line at a time, in order.

    A line is ``timing.words_per_line`` beats (32 on a 16-bit bus) of one row:
    ``ACTIVE``, then a ``READ`` or ``WRITE`` every ``BURST`` cycles, the last
    with auto-precharge, so every access closes its row and the chip is idle
    between lines (close-page: no row hits, but no state to keep either, and
    refresh never waits for a precharge). Line ``n`` is at column
    ``(n % lines_per_row) * words_per_line`` of bank ``(n / lines_per_row) %
    banks``, row ``n / (lines_per_row * banks)``.

    The chip starts as its data sheet asks (``timing.init_us`` of NOPs,
    PRECHARGE ALL, ``timing.init_refreshes`` AUTO REFRESH commands, LOAD MODE
    REGISTER); ``ready`` rises after it and the bus takes no request before.
    An AUTO REFRESH goes out every ``refresh_cycles``, between lines, early
    enough that the line in progress cannot push it past ``trefi_ns``.

    Every pad output is a register; the chip's data reaches ``pads.dq_i``
    ``cas_latency + read_delay`` cycles after the ``READ`` is on the pads
    (``read_delay``: the I/O registers of a board's PHY, 0 in simulation).

    Members
    -------
    bus : In(LinePortSignature)
        Reads answer on ``rdata``; a write is acknowledged on ``wack`` once its
        last beat is on the pads (the chip holds it).
    pads : Out(SdramPadsSignature)
    ready : Out(1)
        The chip is initialised.
    refreshes : Out(32)
        AUTO REFRESH commands since initialisation.
    """

    def __init__(self, timing, *, clock_mhz, addr_bits, tag_bits=1, read_delay=0):
        if (1 << addr_bits) > timing.lines:
            raise ValueError(f"{1 << addr_bits} lines do not fit an SDRAM of {timing.lines}")
        if timing.cols % timing.words_per_line:
            raise ValueError(f"a row of {timing.cols} columns holds no whole line")
        self._timing = timing
        self._clock_mhz = clock_mhz
        self._read_delay = read_delay
        super().__init__({
            "bus": In(LinePortSignature(addr_bits=addr_bits, tag_bits=tag_bits)),
            "pads": Out(SdramPadsSignature(timing)),
            "ready": Out(1),
            "refreshes": Out(32),
        })

    def cycles(self, ns):
        return SdramTiming.cycles(ns, self._clock_mhz)

    @property
    def line_cycles(self):
        """Cycles a line keeps the chip, from its ACTIVE to the next command."""
        t = self._timing
        busy = self.cycles(t.trcd_ns) + t.words_per_line
        recover = max(self.cycles(t.twr_ns) + self.cycles(t.trp_ns) + 1,
                      t.cas_latency + self.cycles(t.trp_ns) + 1,
                      self.cycles(t.trc_ns) - busy)
        return busy + recover

    @property
    def refresh_cycles(self):
        """Cycles between AUTO REFRESH commands."""
        every = self.cycles(self._timing.trefi_ns) - self.line_cycles - self.cycles(
            self._timing.trfc_ns) - 4
        if every < 16:
            raise ValueError(f"at {self._clock_mhz} MHz a line leaves no time to refresh")
        return every

    def elaborate(self, platform):
        m = Module()
        t = self._timing
        pads, bus = self.pads, self.bus
        words = t.words_per_line
        lines_per_row = t.cols // words
        bank_bits = (t.banks - 1).bit_length()
        col_bits = (lines_per_row - 1).bit_length()
        trcd, trp, trfc = self.cycles(t.trcd_ns), self.cycles(t.trp_ns), self.cycles(t.trfc_ns)
        twr = self.cycles(t.twr_ns)
        if (trcd + words) * 1000 / self._clock_mhz < t.tras_ns:
            raise ValueError("a line's burst is shorter than tRAS")
        recover_write = max(twr + trp + 1, self.line_cycles - trcd - words)
        recover_read = max(t.cas_latency + trp + 1, self.line_cycles - trcd - words)
        mode = (t.cas_latency << 4) | (BURST.bit_length() - 1)     # sequential bursts of 8

        # -- the pads, from registers; a NOP unless a state says otherwise
        cmd = Signal(3, init=0b111)
        ba = Signal.like(pads.ba)
        a = Signal.like(pads.a)
        dqm = Signal.like(pads.dqm)
        dq_o = Signal.like(pads.dq_o)
        dq_oe = Signal()
        m.d.comb += [
            pads.cke.eq(1), pads.cs_n.eq(0),
            Cat(pads.we_n, pads.cas_n, pads.ras_n).eq(cmd),
            pads.ba.eq(ba), pads.a.eq(a), pads.dqm.eq(dqm),
            pads.dq_o.eq(dq_o), pads.dq_oe.eq(dq_oe),
        ]
        m.d.sync += [cmd.eq(Cat(*reversed(Command.NOP))), dq_oe.eq(0), dqm.eq(0)]

        def issue(command, *, bank=0, addr=0):
            m.d.sync += [cmd.eq(Cat(*reversed(command))), ba.eq(bank), a.eq(addr)]

        wait = Signal(range(max(t.init_refreshes, recover_write, recover_read, trfc, trcd,
                                trp, t.tmrd_cycles, 2) + 1))
        with m.If(wait != 0):
            m.d.sync += wait.eq(wait - 1)

        # -- refresh timer
        ref_count = Signal(range(self.refresh_cycles + 1), init=self.refresh_cycles)
        ref_due = Signal()
        with m.If(self.ready):
            m.d.sync += ref_count.eq(Mux(ref_count == 0, self.refresh_cycles, ref_count - 1))
            with m.If(ref_count == 0):
                m.d.sync += ref_due.eq(1)

        # -- the line in progress
        cur = Signal.like(bus.req.payload)
        # A write's data and byte enables leave in shift registers, a word a beat
        # from the bottom: no multiplexer of the line by the beat next to the pads.
        wdata = Signal.like(cur.data)
        wbe = Signal.like(cur.be)
        addr = cur.addr
        col_line = addr[:col_bits] if col_bits else C(0, 1)
        bank = addr[col_bits:col_bits + bank_bits]
        row = addr[col_bits + bank_bits:]
        beat = Signal(range(words))
        word_bits = t.dq_bits
        word_bytes = word_bits // 8

        # Read data: the beats of a line arrive on consecutive cycles, from
        # ``cas_latency + read_delay`` cycles after the first READ is on the pads.
        cap_wait = Signal(range(t.cas_latency + self._read_delay + 2))
        capturing = Signal()
        cap_beat = Signal(range(words + 1))
        rbuf = Signal(LINE_BITS)
        rvalid = Signal()
        rtag = Signal.like(cur.tag)
        with m.If(cap_wait != 0):
            m.d.sync += cap_wait.eq(cap_wait - 1)
        with m.Elif(capturing):
            # Shifted in from the top: each flip-flop takes its neighbour's bit,
            # with no decoder of the beat next to the pads.
            m.d.sync += [rbuf.eq(Cat(rbuf[word_bits:], pads.dq_i)), cap_beat.eq(cap_beat + 1)]
            with m.If(cap_beat == words - 1):
                m.d.sync += [capturing.eq(0), rvalid.eq(1)]
        m.d.comb += [bus.rdata.valid.eq(rvalid), bus.rdata.payload.data.eq(rbuf),
                     bus.rdata.payload.tag.eq(rtag)]
        with m.If(bus.rdata.valid & bus.rdata.ready):
            m.d.sync += rvalid.eq(0)

        wvalid = Signal()
        wtag = Signal.like(cur.tag)
        m.d.comb += [bus.wack.valid.eq(wvalid), bus.wack.payload.tag.eq(wtag)]
        with m.If(bus.wack.valid & bus.wack.ready):
            m.d.sync += wvalid.eq(0)

        init_left = Signal(range(self.cycles(t.init_us * 1000) + 1),
                           init=self.cycles(t.init_us * 1000))
        # The wait's end from a register (a cycle later): the wide count's zero test
        # does not run on into the command and wait registers.
        init_over = Signal()
        m.d.sync += init_over.eq(init_left == 0)
        refs_left = Signal(range(t.init_refreshes + 1), init=t.init_refreshes)
        precharge_all = 1 << 10
        # One line at a time: a new one once the last one's answer is taken.
        idle_bus = ~rvalid & ~capturing & ~wvalid

        with m.FSM():
            with m.State("INIT"):
                with m.If(init_left != 0):
                    m.d.sync += init_left.eq(init_left - 1)
                with m.If(init_over):
                    issue(Command.PRECHARGE, addr=precharge_all)
                    m.d.sync += wait.eq(trp - 1)
                    m.next = "INIT_REFRESH"
            with m.State("INIT_REFRESH"):
                with m.If(wait == 0):
                    issue(Command.REFRESH)
                    m.d.sync += [wait.eq(trfc - 1), refs_left.eq(refs_left - 1)]
                    with m.If(refs_left == 1):
                        m.next = "INIT_MODE"
            with m.State("INIT_MODE"):
                with m.If(wait == 0):
                    issue(Command.MODE, addr=mode)
                    m.d.sync += wait.eq(t.tmrd_cycles - 1)
                    m.next = "IDLE"
            with m.State("IDLE"):
                with m.If(wait == 0):
                    m.d.sync += self.ready.eq(1)
                    with m.If(ref_due):
                        issue(Command.REFRESH)
                        m.d.sync += [wait.eq(trfc - 1), ref_due.eq(0),
                                     self.refreshes.eq(self.refreshes + 1)]
                    with m.Elif(self.ready & idle_bus):
                        m.d.comb += bus.req.ready.eq(1)
                        with m.If(bus.req.valid):
                            p = bus.req.payload
                            m.d.sync += [cur.eq(p), wdata.eq(p.data), wbe.eq(p.be), beat.eq(0)]
                            p_row = p.addr[col_bits + bank_bits:]
                            issue(Command.ACTIVE, bank=p.addr[col_bits:col_bits + bank_bits],
                                  addr=p_row)
                            m.d.sync += wait.eq(trcd - 1)
                            m.next = "BURSTS"
            with m.State("BURSTS"):
                # A command every BURST beats, the last with auto-precharge; write data
                # on every beat.
                with m.If(wait == 0):
                    write = cur.op == LineOp.WRITE
                    with m.If(beat % BURST == 0):
                        col = Cat(beat, col_line) if col_bits else beat
                        ap = Mux(beat == words - BURST, precharge_all, 0)
                        with m.If(write):
                            issue(Command.WRITE, bank=bank, addr=col | ap)
                        with m.Else():
                            issue(Command.READ, bank=bank, addr=col | ap)
                            with m.If(beat == 0):
                                m.d.sync += [cap_wait.eq(t.cas_latency + self._read_delay),
                                             capturing.eq(1), cap_beat.eq(0), rtag.eq(cur.tag)]
                    with m.If(write):
                        m.d.sync += [
                            dq_o.eq(wdata[:word_bits]), dq_oe.eq(1), dqm.eq(~wbe[:word_bytes]),
                            wdata.eq(wdata >> word_bits), wbe.eq(wbe >> word_bytes),
                        ]
                    m.d.sync += beat.eq(beat + 1)
                    with m.If(beat == words - 1):
                        with m.If(write):
                            m.d.sync += [wait.eq(recover_write), wvalid.eq(1), wtag.eq(cur.tag)]
                        with m.Else():
                            m.d.sync += wait.eq(recover_read)
                        m.next = "IDLE"
        return m

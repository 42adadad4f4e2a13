"""An SDR SDRAM chip as simulation-only gateware that checks every rule it is driven by.

A violation does not stop the simulation: the first one is latched
(``violation``, ``violation_cycle``) for the test or bench to fail on, and the
chip goes on as well as it can.
"""

from amaranth import *
from amaranth.lib import enum, wiring
from amaranth.lib.wiring import In, Out

from trainingcxl.hdl.common.ram import Ram
from trainingcxl.hdl.sdram.controller import BURST
from trainingcxl.hdl.sdram.pads import Command, SdramPadsSignature
from trainingcxl.spec.config import SdramTiming

__all__ = ["SdramModel", "Violation"]

#: The model's clock starts here, so that "long ago" is the initial zero of every time.
_START = 1 << 24


class Violation(enum.Enum, shape=5):
    """The first rule a controller broke."""
    NONE = 0
    EARLY_COMMAND = 1       # a command before the start-up pause ended
    NOT_INITIALISED = 2     # out of the start-up order (PRECHARGE ALL, refreshes, mode)
    ACTIVE_OPEN = 3         # ACTIVE on a bank whose row is open
    TRP = 4                 # ACTIVE or REFRESH too soon after a bank's precharge began
    TRC = 5                 # ACTIVE too soon after the bank's last ACTIVE
    TRCD = 6                # READ or WRITE too soon after its ACTIVE
    TRAS = 7                # precharge too soon after the ACTIVE
    TWR = 8                 # explicit PRECHARGE too soon after the last write beat
    TRFC = 9                # a command too soon after AUTO REFRESH
    TMRD = 10               # a command too soon after LOAD MODE REGISTER
    CLOSED_BANK = 11        # READ or WRITE to a bank with no open row
    REFRESH_OPEN = 12       # AUTO REFRESH or LOAD MODE REGISTER with a row open
    TREFI = 13              # no AUTO REFRESH for longer than the refresh interval
    BUS_CONFLICT = 14       # both drive DQ, or a write beat with DQ not driven
    BURST_CUT = 15          # READ or WRITE before the burst before it ended
    MODE = 16               # a mode other than sequential bursts of 8, CAS latency 2 or 3


class SdramModel(wiring.Component):
    """``timing``'s chip at ``clock_mhz``: a memory of ``dq_bits`` words that obeys JEDEC
    SDR commands and checks their timing (:class:`Violation`).

    Read data is on ``pads.dq_i`` from ``cas_latency`` cycles after the READ
    command was on the pads, a beat a cycle; write data is taken with the
    WRITE command and on the cycles after it. Auto-precharge begins at the end
    of a read burst, and ``twr_ns`` after the last beat of a write burst.

    Members
    -------
    pads : In(SdramPadsSignature)
    violation : Out(Violation), violation_cycle : Out(32)
    activates, reads, writes, refreshes : Out(32)
        Commands seen.
    """

    def __init__(self, timing, *, clock_mhz, backdoor=None):
        self._timing = timing
        self._clock_mhz = clock_mhz
        super().__init__({
            "pads": In(SdramPadsSignature(timing)),
            "violation": Out(Violation),
            "violation_cycle": Out(32),
            "activates": Out(32), "reads": Out(32), "writes": Out(32), "refreshes": Out(32),
        })
        self.memory = Ram(shape=timing.dq_bits, depth=timing.banks * timing.rows * timing.cols,
                          backdoor=backdoor)

    def elaborate(self, platform):
        m = Module()
        t = self._timing
        cyc = lambda ns: SdramTiming.cycles(ns, self._clock_mhz)
        trcd, trp, tras, trc, trfc, twr = (cyc(t.trcd_ns), cyc(t.trp_ns), cyc(t.tras_ns),
                                           cyc(t.trc_ns), cyc(t.trfc_ns), cyc(t.twr_ns))
        trefi = cyc(t.trefi_ns)
        init = cyc(t.init_us * 1000)
        pads = self.pads
        m.submodules.memory = mem = self.memory
        rd = mem.read_port()            # synchronous: asked for a cycle ahead
        wr = mem.write_port(granularity=8)

        now = Signal(32, init=_START)
        m.d.sync += now.eq(now + 1)
        since = lambda when: (now - when)[:32]

        # -- the command on the pads this cycle
        sel = pads.cke & ~pads.cs_n
        code = Cat(pads.we_n, pads.cas_n, pads.ras_n)

        def is_(command):
            return sel & (code == Cat(*reversed(command)))

        active, read, write = is_(Command.ACTIVE), is_(Command.READ), is_(Command.WRITE)
        precharge, refresh, mode = is_(Command.PRECHARGE), is_(Command.REFRESH), is_(Command.MODE)
        any_cmd = sel & (code != Cat(*reversed(Command.NOP)))
        bank = pads.ba
        auto = pads.a[10]

        # -- state
        nb = t.banks
        is_open = Signal(nb)
        row = Array(Signal(len(pads.a), name=f"row{b}") for b in range(nb))
        t_act = Array(Signal(32, name=f"t_act{b}") for b in range(nb))
        t_pre = Array(Signal(32, name=f"t_pre{b}") for b in range(nb))    # precharge begins
        t_lastw = Array(Signal(32, name=f"t_lastw{b}") for b in range(nb))
        t_ref = Signal(32)
        t_mode = Signal(32)
        t_burst = Signal(32)            # the last READ or WRITE command
        t_wburst = Signal(32)           # the last WRITE command
        phase = Signal(range(4))        # 0 pause, 1 PRECHARGE ALL due, 2 refreshes, 3 running
        refs = Signal(range(t.init_refreshes + 1))
        cas = Signal(2, init=2)

        # Checks, the first match in the order written wins (``first`` takes the last
        # assignment, so they are assigned in reverse below).
        first = Signal(Violation)
        checks = []
        def check(cond, kind):
            checks.append((cond, kind))

        check(any_cmd & (since(_START) < init), Violation.EARLY_COMMAND)
        check(any_cmd & (phase == 1) & ~(precharge & auto), Violation.NOT_INITIALISED)
        check(any_cmd & (phase == 2) & ~refresh & ~(mode & (refs >= t.init_refreshes)),
              Violation.NOT_INITIALISED)
        check(any_cmd & (since(t_ref) < trfc), Violation.TRFC)
        check(any_cmd & (since(t_mode) < t.tmrd_cycles), Violation.TMRD)
        check(active & is_open.bit_select(bank, 1), Violation.ACTIVE_OPEN)
        check(active & (since(t_pre[bank]) < trp), Violation.TRP)
        check(active & (since(t_act[bank]) < trc), Violation.TRC)
        check((read | write) & ~is_open.bit_select(bank, 1), Violation.CLOSED_BANK)
        check((read | write) & (since(t_act[bank]) < trcd), Violation.TRCD)
        check((read | write) & (since(t_burst) < BURST), Violation.BURST_CUT)
        any_open = is_open.any()
        recharging = Cat(since(t_pre[b]) < trp for b in range(nb)).any()
        check((refresh | mode) & any_open, Violation.REFRESH_OPEN)
        check((refresh | mode) & recharging, Violation.TRP)
        pre_banks = Mux(auto, (1 << nb) - 1, 1 << bank)
        for b in range(nb):
            pre_b = precharge & pre_banks[b] & is_open[b]
            check(pre_b & (since(t_act[b]) < tras), Violation.TRAS)
            check(pre_b & (since(t_lastw[b]) < twr + 1), Violation.TWR)
        mode_ok = (pads.a[:3] == BURST.bit_length() - 1) & ~pads.a[3] & (
            (pads.a[4:7] == 2) | (pads.a[4:7] == 3)) & ~pads.a[9]
        check(mode & ~mode_ok, Violation.MODE)
        check((phase == 3) & (since(t_ref) > trefi), Violation.TREFI)

        # Data bus: who drives this cycle.
        rd_start = Signal(32)           # the cycle the read burst's first beat is out
        rd_bank = Signal.like(bank)
        rd_row = Signal.like(pads.a)
        rd_col = Signal.like(pads.a)
        rd_live = Signal()
        rd_beat = since(rd_start)
        chip_drives = rd_live & (rd_beat < BURST)
        wr_beat = since(t_wburst)
        wr_live = Signal()
        writing = write | (wr_live & (wr_beat < BURST))
        check(chip_drives & pads.dq_oe, Violation.BUS_CONFLICT)
        check(writing & ~pads.dq_oe, Violation.BUS_CONFLICT)

        for cond, kind in reversed(checks):
            with m.If(cond):
                m.d.comb += first.eq(kind)
        with m.If((self.violation == Violation.NONE) & (first != Violation.NONE)):
            m.d.sync += [self.violation.eq(first), self.violation_cycle.eq(now - _START)]

        # -- state changes
        with m.If(phase == 0):
            with m.If(since(_START) >= init - 1):
                m.d.sync += phase.eq(1)
        with m.If((phase == 1) & precharge & auto):
            m.d.sync += phase.eq(2)
        with m.If((phase == 2) & refresh):
            m.d.sync += refs.eq(refs + 1)
        with m.If(mode):
            m.d.sync += [t_mode.eq(now), cas.eq(pads.a[4:6])]
            with m.If(phase == 2):
                m.d.sync += phase.eq(3)
        with m.If(refresh):
            m.d.sync += [t_ref.eq(now), self.refreshes.eq(self.refreshes + 1)]
        with m.If(active):
            m.d.sync += [is_open.bit_select(bank, 1).eq(1), row[bank].eq(pads.a),
                         t_act[bank].eq(now), self.activates.eq(self.activates + 1)]
        with m.If(precharge):
            # tRP runs from any PRECHARGE, of an open bank or not.
            for b in range(nb):
                with m.If(pre_banks[b]):
                    m.d.sync += [is_open[b].eq(0), t_pre[b].eq(now)]
        col = pads.a[:(t.cols - 1).bit_length()]
        # A READ's burst starts ``cas`` cycles on, maybe while the one before it still
        # drives its last beats: it waits in ``next_*`` until the cycle before.
        next_start = Signal(32)
        next_bank = Signal.like(bank)
        next_row = Signal.like(pads.a)
        next_col = Signal.like(pads.a)
        next_valid = Signal()
        starting = next_valid & (since(next_start) == (1 << 32) - 1)
        with m.If(starting):
            m.d.sync += [rd_start.eq(next_start), rd_bank.eq(next_bank), rd_row.eq(next_row),
                         rd_col.eq(next_col), rd_live.eq(1), next_valid.eq(0)]
        with m.If(read):
            m.d.sync += [t_burst.eq(now), next_start.eq(now + cas), next_valid.eq(1),
                         next_bank.eq(bank), next_row.eq(row[bank]), next_col.eq(col),
                         self.reads.eq(self.reads + 1)]
            with m.If(auto):
                m.d.sync += [is_open.bit_select(bank, 1).eq(0), t_pre[bank].eq(now + BURST)]
        with m.If(write):
            m.d.sync += [t_burst.eq(now), t_wburst.eq(now), wr_live.eq(1),
                         self.writes.eq(self.writes + 1),
                         t_lastw[bank].eq(now + BURST - 1)]
            with m.If(auto):
                m.d.sync += [is_open.bit_select(bank, 1).eq(0),
                             t_pre[bank].eq(now + BURST - 1 + twr)]

        # -- memory: reads drive dq_i, write beats land under their byte masks
        row_bits = (t.rows - 1).bit_length()
        col_bits = (t.cols - 1).bit_length()

        def word(b, r, c, beat=0):
            # A burst of 8 wraps within its 8-aligned columns (sequential order).
            c = Cat((c[:3] + beat)[:3], c[3:col_bits])
            return Cat(c, r[:row_bits], b)

        # The word of next cycle's beat: the burst's next one, or the first of the next burst.
        m.d.comb += [rd.addr.eq(Mux(starting, word(next_bank, next_row, next_col),
                                    word(rd_bank, rd_row, rd_col, (rd_beat + 1)[:3]))),
                     pads.dq_i.eq(Mux(chip_drives, rd.data, 0))]
        wr_bank = Signal.like(bank)
        wr_row = Signal.like(pads.a)
        wr_col = Signal.like(pads.a)
        with m.If(write):
            m.d.sync += [wr_bank.eq(bank), wr_row.eq(row[bank]), wr_col.eq(col)]
        m.d.comb += [
            wr.addr.eq(Mux(write, word(bank, row[bank], col), word(wr_bank, wr_row, wr_col,
                                                                  wr_beat[:3]))),
            wr.data.eq(pads.dq_o),
            wr.en.eq(Mux(writing & pads.dq_oe, ~pads.dqm, 0)),
        ]
        return m

"""Read arrays from host memory, in order, through a line port."""

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from trainingcxl.spec.config import ADDR_BITS, LINE_BITS
from .line_port import LineOp, LinePortSignature

__all__ = ["HostLineReader", "HostWordReader"]

WORDS_PER_LINE = LINE_BITS // 32
_LINE_SHIFT = WORDS_PER_LINE.bit_length() - 1


def _reader_members(window, count_bits, output, width):
    """Members shared by the readers; only the output stream differs."""
    return {
        "start": In(1),
        "addr": In(ADDR_BITS),
        "count": In(count_bits),
        "stop": In(1),
        output: Out(stream.Signature(width)),
        "mem": Out(LinePortSignature(addr_bits=ADDR_BITS, tag_bits=8)),
        "outstanding": Out(range(window + 1)),
        "error": Out(1),
    }


class HostLineReader(wiring.Component):
    """Streams ``count`` consecutive lines starting at line ``addr``.

    Up to ``window`` line reads are in flight; the host may answer them in any
    order, and a reorder buffer indexed by tag puts them back in order.

    Members
    -------
    start : In(1)
        Pulse: latch ``addr`` and ``count`` and begin. Only while idle.
    addr : In(ADDR_BITS)
    count : In(count_bits)
    stop : In(1)
        Offer no new reads (abort); ``outstanding`` drains to zero.
    lines : Out(stream.Signature(LINE_BITS))
    mem : Out(LinePortSignature)
    outstanding : Out
        Reads issued and not yet answered.
    error : Out(1)
        A read came back poisoned (sticky until ``start``).
    """

    def __init__(self, *, window, count_bits):
        self._window = window
        self._count_bits = count_bits
        super().__init__(_reader_members(window, count_bits, "lines", LINE_BITS))

    def elaborate(self, platform):
        m = Module()
        w = self._window
        sbits = max(1, (w - 1).bit_length())

        base = Signal(ADDR_BITS)
        total = Signal(self._count_bits)
        issued = Signal(self._count_bits)          # lines requested so far
        in_rob = Signal(range(w + 1))              # slots requested and not yet delivered
        head = Signal(sbits)                       # slot of the next line in order
        tail = Signal(sbits)                       # slot of the next request
        filled = Signal(w)                         # slots holding returned data

        m.submodules.rob = rob = Memory(shape=LINE_BITS, depth=w, init=[])
        rob_w = rob.write_port()
        rob_r = rob.read_port(domain="comb")

        # Issue reads in order, one slot per line. ``stop`` holds back new
        # requests only: one already offered stays until it is taken.
        offered = Signal()
        m.d.sync += offered.eq(self.mem.req.valid & ~self.mem.req.ready)
        m.d.comb += [
            self.mem.req.valid.eq((issued < total) & (in_rob < w) & (~self.stop | offered)),
            self.mem.req.payload.op.eq(LineOp.READ),
            self.mem.req.payload.addr.eq(base + issued),
            self.mem.req.payload.tag.eq(tail),
        ]
        req_fire = self.mem.req.valid & self.mem.req.ready

        # Accept answers in any order.
        m.d.comb += [
            self.mem.rdata.ready.eq(1),
            self.mem.wack.ready.eq(1),
            rob_w.addr.eq(self.mem.rdata.payload.tag[:sbits]),
            rob_w.data.eq(self.mem.rdata.payload.data),
            rob_w.en.eq(self.mem.rdata.valid),
        ]
        rsp_fire = self.mem.rdata.valid

        # Deliver in order.
        m.d.comb += [
            rob_r.addr.eq(head),
            self.lines.valid.eq(filled.bit_select(head, 1)),
            self.lines.payload.eq(rob_r.data),
        ]
        deliver = self.lines.valid & self.lines.ready
        with m.If(deliver):
            m.d.sync += head.eq(head + 1)

        set_mask = Mux(rsp_fire, 1 << self.mem.rdata.payload.tag[:sbits], 0)
        clr_mask = Mux(deliver, 1 << head, 0)
        m.d.sync += filled.eq((filled & ~clr_mask) | set_mask)
        with m.If(req_fire):
            m.d.sync += [issued.eq(issued + 1), tail.eq(tail + 1)]
        m.d.sync += in_rob.eq(in_rob + req_fire - deliver)

        outstanding = Signal(range(w + 1))
        m.d.sync += outstanding.eq(outstanding + req_fire - rsp_fire)
        m.d.comb += self.outstanding.eq(outstanding)
        with m.If(rsp_fire & self.mem.rdata.payload.err):
            m.d.sync += self.error.eq(1)

        with m.If(self.start):
            m.d.sync += [
                base.eq(self.addr), total.eq(self.count),
                issued.eq(0), in_rob.eq(0), head.eq(0), tail.eq(0), filled.eq(0),
                self.error.eq(0),
            ]
        return m


class HostWordReader(wiring.Component):
    """Streams ``count`` consecutive 32-bit words starting at line ``addr``.

    A :class:`HostLineReader` and an unpacker: word 0 of a line is its low 32 bits.
    Members are those of :class:`HostLineReader`, with ``words`` instead of
    ``lines`` and ``count`` in words.

    With ``registered`` the next line is loaded only once the current one is
    empty, not in the cycle its last word leaves, and the line register shifts
    a word out at a time (the word is its low 32 bits, no multiplexer): the
    load of the 512-bit register no longer waits on the consumer's ``ready``,
    at the price of a cycle between lines. The register then follows the
    reader's next line for as long as it is empty, so its load is steered by
    one flip-flop, not by whether a line is there and wanted.
    """

    def __init__(self, *, window, count_bits, registered=False):
        self._window = window
        self._count_bits = count_bits
        self._registered = registered
        super().__init__(_reader_members(window, count_bits, "words", 32))

    def elaborate(self, platform):
        m = Module()
        m.submodules.lines = lines = HostLineReader(window=self._window, count_bits=self._count_bits)
        wiring.connect(m, lines.mem, wiring.flipped(self.mem))
        m.d.comb += [
            lines.start.eq(self.start), lines.addr.eq(self.addr), lines.stop.eq(self.stop),
            lines.count.eq((self.count + WORDS_PER_LINE - 1) >> _LINE_SHIFT),
            self.outstanding.eq(lines.outstanding), self.error.eq(lines.error),
        ]

        words_left = Signal(self._count_bits)      # words not yet delivered
        cur = Signal(LINE_BITS)
        cur_left = Signal(range(WORDS_PER_LINE + 1))
        cur_index = Signal(range(WORDS_PER_LINE))
        if self._registered:
            # ``empty`` and ``more`` are ``cur_left == 0`` and ``words_left != 0``
            # as flip-flops: ``cur`` follows the next line while empty, and
            # takes a line only once both hold (then a word never leaves).
            empty = Signal(init=1)
            more = Signal()
            m.d.comb += [self.words.valid.eq(~empty), self.words.payload.eq(cur[:32])]
        else:
            m.d.comb += [self.words.valid.eq(cur_left != 0),
                         self.words.payload.eq(cur.word_select(cur_index, 32))]
        word_fire = self.words.valid & self.words.ready
        if self._registered:
            with m.If(empty):
                m.d.sync += cur.eq(lines.lines.payload)
            with m.Elif(word_fire):
                m.d.sync += cur.eq(cur >> 32)
            m.d.comb += lines.lines.ready.eq(empty & more)
            with m.If(word_fire):
                m.d.sync += [empty.eq(cur_left == 1), more.eq(words_left != 1)]
        else:
            # Load the next line when cur is empty or its last word leaves now.
            empty = (cur_left == 0) | (word_fire & (cur_left == 1))
            m.d.comb += lines.lines.ready.eq(empty & (words_left != 0))
        load = lines.lines.valid & lines.lines.ready
        with m.If(word_fire):
            m.d.sync += [cur_left.eq(cur_left - 1), cur_index.eq(cur_index + 1),
                         words_left.eq(words_left - 1)]
        with m.If(load):
            remaining = words_left - word_fire
            m.d.sync += [
                cur_index.eq(0),
                cur_left.eq(Mux(remaining >= WORDS_PER_LINE, WORDS_PER_LINE, remaining)),
            ]
            if self._registered:
                m.d.sync += empty.eq(0)
            else:
                m.d.sync += cur.eq(lines.lines.payload)
        with m.If(self.start):
            m.d.sync += [words_left.eq(self.count), cur_left.eq(0)]
            if self._registered:
                m.d.sync += [empty.eq(1), more.eq(self.count != 0)]
        return m

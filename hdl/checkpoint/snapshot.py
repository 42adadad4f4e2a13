"""MLP snapshots: the GPU's staged parameters, pulled through CXL.cache into a PMEM slot."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from trainingcxl.spec.config import ADDR_BITS, LINE_BITS, LINE_BYTES
from trainingcxl.spec.records import SNAPSHOT
from ..common.line_port import LineOp, LinePortSignature
from ..common.host_reader import HostLineReader
from .crc import CRC_INIT, CRC_XOR, CrcNetwork
from .layouts import sealed_header

__all__ = ["SnapshotPuller"]


class SnapshotPuller(wiring.Component):
    """Copies ``count`` lines of MLP parameters from host memory into snapshot slot ``slot``.

    It runs in the background, beside lookups and updates (docs/design.md,
    "Checkpoint protocol": the pull is spread over later batches). Order of writes, each waited for
    until persistent: a zero header (the slot is invalid from here on), the
    data lines, then the header with the batch, the length, the data
    checksum and its own checksum. A slot is thus valid only once its data is
    persistent; a power failure before that leaves it invalid and the other
    slot untouched.

    Members
    -------
    start : In(1)
        Pulse, while idle: latch ``batch``, ``slot``, ``src``, ``count``, ``gen``.
    batch : In(32), slot : In(1), src : In(ADDR_BITS), count : In(32), gen : In(16)
    host : Out(LinePortSignature)
        CXL.cache reads of the staged copy.
    pmem : Out(LinePortSignature)
        Writes into the slot.
    busy : Out(1)
    done : Out(1)
        Pulse: the slot now holds a valid snapshot of ``batch``.
    failed : Out(1)
        Pulse: host memory refused a read; the slot stays invalid.
    lines : Out(32)
        Lines copied.
    """

    def __init__(self, config, *, tag_bits=16):
        self._config = config
        super().__init__({
            "start": In(1),
            "batch": In(32),
            "slot": In(1),
            "src": In(ADDR_BITS),
            "count": In(32),
            "gen": In(16),
            "host": Out(LinePortSignature(addr_bits=ADDR_BITS, tag_bits=8)),
            "pmem": Out(LinePortSignature(addr_bits=config.media_addr_bits, tag_bits=tag_bits)),
            "busy": Out(1),
            "done": Out(1),
            "failed": Out(1),
            "lines": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._config
        abits = cfg.media_addr_bits

        m.submodules.reader = reader = HostLineReader(window=cfg.host_window, count_bits=32)
        wiring.connect(m, reader.mem, wiring.flipped(self.host))

        batch = Signal(32)
        slot_base = Signal(abits)
        count = Signal(32)
        gen = Signal(16)
        at = Signal(32)
        crc = Signal(32)
        fold = Signal(range(cfg.crc_folds))
        last_fold = fold == cfg.crc_folds - 1
        outstanding = Signal(range(cfg.pmem.wpq_depth * 4 + 1))
        wfire = self.pmem.req.valid & self.pmem.req.ready
        m.d.sync += outstanding.eq(outstanding + wfire - self.pmem.wack.valid)
        # Every line written leaves this register (the zero header, each line
        # copied, the sealed header): the port's data has no multiplexer, and
        # the reader's buffer feeds only this register. The checksum takes a
        # line's parts from its top, most significant first, and the register
        # turns a part further after each (``turned``): no other copy of the
        # line and no multiplexer of parts. A line is written after
        # ``crc_folds - 1`` turns, and the port sees it turned once more, which
        # is the line as it came (wires only; the headers are stored turned back).
        part = LINE_BITS // cfg.crc_folds
        line = Signal(LINE_BITS)
        full = Signal()                 # ``line`` holds a copied line not yet written

        def turned(v):
            """``v`` (a line) with its top part moved to the bottom."""
            return Cat(v[-part:], v[:-part])

        def turned_back(v):
            """``v``, zero-extended to a line, with its bottom part moved to the top."""
            v = Cat(v, C(0, LINE_BITS - len(v)))
            return Cat(v[part:], v[:part])

        m.d.comb += [
            self.pmem.wack.ready.eq(1), self.pmem.rdata.ready.eq(1),
            self.pmem.req.payload.op.eq(LineOp.WRITE),
            self.pmem.req.payload.be.eq((1 << LINE_BYTES) - 1),
            self.pmem.req.payload.data.eq(turned(line)),
            reader.addr.eq(self.src), reader.count.eq(self.count),
        ]

        sealed = sealed_header(m, magic=SNAPSHOT, gen=gen, batch=batch, a=count, b=crc ^ CRC_XOR)

        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.sync += [
                        batch.eq(self.batch), count.eq(self.count), gen.eq(self.gen),
                        slot_base.eq(Mux(self.slot, cfg.snapshot_base[1], cfg.snapshot_base[0])),
                        at.eq(0), crc.eq(CRC_INIT), fold.eq(0), line.eq(0), full.eq(0),
                    ]
                    m.d.comb += reader.start.eq(1)
                    m.next = "INVALIDATE"
            with m.State("INVALIDATE"):
                m.d.comb += [self.busy.eq(1), self.pmem.req.valid.eq(1),
                             self.pmem.req.payload.addr.eq(slot_base)]
                with m.If(wfire):
                    m.next = "INVALID"
            with m.State("INVALID"):
                # The old header must be gone before any of its data changes.
                m.d.comb += self.busy.eq(1)
                with m.If(outstanding == 0):
                    m.next = "COPY"
            with m.State("COPY"):
                m.d.comb += [self.busy.eq(1), reader.stop.eq(reader.error)]
                # A line is written once its checksum has taken all its parts; the
                # next is taken as it leaves.
                offered = full & last_fold
                m.d.comb += [
                    self.pmem.req.valid.eq(offered),
                    self.pmem.req.payload.addr.eq(slot_base + 1 + at),
                    reader.lines.ready.eq((~full | wfire) & ~reader.error),
                ]
                with m.If(reader.lines.valid & reader.lines.ready):
                    m.d.sync += [line.eq(reader.lines.payload), full.eq(1)]
                with m.Elif(wfire):
                    m.d.sync += full.eq(0)
                advance = full & ~last_fold
                m.submodules.data_crc = net = CrcNetwork(part)
                m.d.comb += [net.state.eq(crc), net.data.eq(line[-part:])]
                crc_next = net.crc
                with m.If(advance):
                    m.d.sync += [crc.eq(crc_next), fold.eq(fold + 1), line.eq(turned(line))]
                with m.If(wfire):
                    m.d.sync += [at.eq(at + 1), crc.eq(crc_next), fold.eq(0),
                                 self.lines.eq(self.lines + 1)]
                    with m.If(at + 1 == count):
                        m.next = "DATA"
                # A write on offer stays until taken (the stream rule).
                with m.If(reader.error & (~offered | wfire)):
                    m.next = "ABORT"
            with m.State("ABORT"):
                m.d.comb += [self.busy.eq(1), reader.stop.eq(1)]
                with m.If((reader.outstanding == 0) & (outstanding == 0)):
                    m.d.comb += self.failed.eq(1)
                    m.next = "IDLE"
            with m.State("DATA"):
                m.d.comb += self.busy.eq(1)
                with m.If(outstanding == 0):
                    m.d.sync += line.eq(turned_back(sealed))
                    m.next = "HEADER"
            with m.State("HEADER"):
                m.d.comb += [self.busy.eq(1), self.pmem.req.valid.eq(1),
                             self.pmem.req.payload.addr.eq(slot_base)]
                with m.If(wfire):
                    m.next = "SEAL"
            with m.State("SEAL"):
                m.d.comb += self.busy.eq(1)
                with m.If(outstanding == 0):
                    m.d.comb += self.done.eq(1)
                    m.next = "IDLE"
        return m

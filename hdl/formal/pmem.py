"""Formal harness of the PMEM controller's write-pending queue."""

from amaranth import *
from amaranth.hdl import Assert, Assume
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..common.line_port import LineOp
from ..pmem.controller import PmemController
from .streams import stream_rule

__all__ = ["WpqHarness"]


class WpqHarness(wiring.Component):
    """Proves, with no power failure, that the write-pending queue neither loses
    nor duplicates an entry and keeps each port's writes in order.

    The controller has two ports driven by the solver (free inputs, reads and
    writes mixed). The environment is assumed to obey the stream rule, to
    number each port's writes 0, 1, 2, ... in its tags and to address only
    lines of the media. Then:

    * every write accepted is queued or acknowledged, never both, never
      neither: ``accepted - acknowledged == wpq_level``;
    * each port's acknowledgements carry tags 0, 1, 2, ... (none lost,
      duplicated or reordered);
    * every response stream of the controller is stable until ready.

    That the media then holds what was acknowledged is checked in simulation
    (``tests/hdl/test_pmem.py``): a read-back over 512-bit lines is beyond
    what the solver finishes in CI time.

    Members
    -------
    port0, port1 : In(LinePortSignature)
    """

    def __init__(self, config):
        self._config = config
        self._dut = PmemController(config, n_ports=2, tag_bits=8)
        sig = self._dut.port_signature
        super().__init__({"port0": In(sig), "port1": In(sig)})

    def elaborate(self, platform):
        m = Module()
        cfg = self._config
        m.submodules.dut = dut = self._dut
        ports = [self.port0, self.port1]
        for ours, theirs in zip(ports, dut.ports):
            wiring.connect(m, wiring.flipped(ours), theirs)
        m.d.comb += dut.power_fail.eq(0)

        def fire(s):
            return s.valid & s.ready

        accepted = Signal(8)
        acked = Signal(8)
        is_write = [fire(p.req) & (p.req.payload.op == LineOp.WRITE) for p in ports]
        m.d.sync += [
            accepted.eq(accepted + sum(is_write)),
            acked.eq(acked + sum(fire(p.wack) for p in ports)),
        ]
        m.d.comb += Assert(accepted - acked == dut.wpq_level,
                           "a write was lost or duplicated in the write-pending queue")

        for k, p in enumerate(ports):
            stream_rule(m, p.req, name=f"port{k}_req", assume=True)
            for name in ("rdata", "wack"):
                stream_rule(m, getattr(p, name), name=f"port{k}_{name}")
            m.d.comb += Assume(p.req.payload.addr < cfg.media_lines)
            writes = Signal(8, name=f"writes{k}")
            acks = Signal(8, name=f"acks{k}")
            with m.If(p.req.valid & (p.req.payload.op == LineOp.WRITE)):
                m.d.comb += Assume(p.req.payload.tag == writes)
            m.d.sync += [writes.eq(writes + is_write[k]), acks.eq(acks + fire(p.wack))]
            with m.If(p.wack.valid):
                m.d.comb += Assert(p.wack.payload.tag == acks,
                                   f"port {k} acknowledged a write out of order")
        return m

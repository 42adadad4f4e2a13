"""Fixtures of the gateware tests: a small device, and an engine on the PMEM model simulated
beside a behavioural host memory (amaranth.sim)."""

import pytest
from amaranth import Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from trainingcxl.hdl.common.line_port import LineOp
from trainingcxl.hdl.pmem.controller import PmemController
from trainingcxl.spec.config import Config
from trainingcxl.sim.amaranth_host import host_port_model, row_lines
from trainingcxl.sim.amaranth_streams import stream_put


def _small_config(timing, *, tables, dim=16, max_pooling=6, registered=False):
    cfg = Config(tables=tables, dim=dim, max_pooling=max_pooling, max_bags=64, pmem=timing,
                 commit_lines=2, snapshot_lines=2, host_window=4, register_slices=registered)
    return cfg.replace(log_lines=2 * cfg.group_lines)


class EngineOnPmem(wiring.Component):
    """An engine on the PMEM controller.

    ``ports`` names the engine's PMEM ports, wired in turn to the controller's
    ports 1, 2, ...; port 0 is the test's own, for loading and reading back the
    tables. With ``logger`` (an :class:`~trainingcxl.hdl.checkpoint.logger.UndoLogger`)
    the engine's log tap feeds it, it writes through the next port and it flushes
    whenever the engine is idle.
    """

    def __init__(self, cfg, engine, ports, *, logger=None):
        self.cfg, self.engine, self.logger, self.ports = cfg, engine, logger, tuple(ports)
        self.pmem = PmemController(cfg, n_ports=1 + len(self.ports) + (logger is not None))
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        m.submodules.engine = self.engine
        m.submodules.pmem = self.pmem
        for k, name in enumerate(self.ports, start=1):
            wiring.connect(m, getattr(self.engine, name), getattr(self.pmem, f"port{k}"))
        if self.logger is not None:
            m.submodules.logger = self.logger
            wiring.connect(m, self.engine.log, self.logger.tap)
            wiring.connect(m, self.logger.pmem, getattr(self.pmem, f"port{len(self.ports) + 1}"))
            m.d.comb += self.logger.flush.eq(~self.engine.busy)
        return m

    async def load(self, ctx, tables):
        """Write ``tables`` through port 0 and wait until every line is persistent."""
        cfg, port = self.cfg, self.pmem.port0
        for t, table in enumerate(tables):
            for k, line in enumerate(row_lines(table)):
                await stream_put(ctx, port.req, {"op": LineOp.WRITE, "addr": cfg.table_base[t] + k,
                                                 "data": line, "be": (1 << 64) - 1})
        while ctx.get(self.pmem.wpq_level):
            await ctx.tick()

    def simulate(self, main, host_ports, host, rng, writes):
        """Run the testbench ``main`` to its end, with each of ``host_ports`` served from the
        line dictionary ``host`` (writes recorded in ``writes``) after random delays."""
        sim = Simulator(self)
        sim.add_clock(1e-8)
        sim.add_testbench(main)
        for port in host_ports:
            sim.add_testbench(host_port_model(port, host, rng, writes), background=True)
        sim.run()


@pytest.fixture
def small_config():
    """``small_config(timing, tables=..., dim=16, max_pooling=6, registered=False)``: a
    small device on PMEM ``timing`` whose undo log ring is two groups; ``registered``
    adds the boards' register slices."""
    return _small_config


@pytest.fixture
def engine_on_pmem():
    """The :class:`EngineOnPmem` class: ``engine_on_pmem(cfg, engine, ports, logger=None)``."""
    return EngineOnPmem

"""The design the simulation benches run: the device, and host memory in gateware beside it."""

from amaranth import *
from amaranth.hdl import ResetInserter
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from trainingcxl.hdl.top import Device
from trainingcxl.spec.host_layout import HostLayout
from .clock import PERIOD_NS, ClockSource
from .host_memory import HostMemoryModel
from .mem_bulk import MemBulk

__all__ = ["SimTop"]


class SimTop(wiring.Component):
    """:class:`~trainingcxl.hdl.top.Device` with its ports, plus a
    :class:`~.host_memory.HostMemoryModel` over the host layout's lines.

    ``host_rtl`` picks who answers the device's CXL.cache: the model (1), or a
    bench on the ``cxl_cache`` ports (0: a Python model that can inject faults
    or hold answers back). The ``host_*`` members are the model's.

    The bench's CXL.mem master reaches the device through a :class:`~.mem_bulk.MemBulk`,
    which can instead issue a list of line reads or writes itself (the ``bulk_*``
    members).

    The clock comes from a :class:`~.clock.ClockSource` inside the simulator
    (period ``PERIOD_NS``), shown on the ``clk`` output; ``rst`` is the
    synchronous reset of its domain. It is meant for the simulators' netlist
    only (:func:`trainingcxl.hdl.export.convert`).
    """

    @staticmethod
    def check(config):
        """A :exc:`ValueError` if this top cannot simulate ``config``."""
        if config.media == "sdram":
            # The device's media port would float: no read would ever be answered.
            raise ValueError("this configuration keeps the PMEM media in a board's SDRAM "
                             "(media = sdram), which only the simulated board top carries "
                             "(train --target sim-board); on the device top, --set media=bram")

    def __init__(self, config):
        self.check(config)
        self._config = config
        self.device = Device(config)
        layout = HostLayout(config)
        self.host = HostMemoryModel(config, base=layout.base, lines=layout.lines)
        self.clock = ClockSource(half_period=PERIOD_NS / 2)
        self.bulk = MemBulk()
        members = dict(self.device.signature.members)
        members.update({
            "clk": Out(1),
            "rst": In(1),
            "host_rtl": In(1),
            "host_delay_lo": In(8),
            "host_delay_span": In(8),
            "host_reads": Out(32),
            "host_writes": Out(32),
            "host_errors": Out(32),
            "bulk_start": In(1),
            "bulk_write": In(1),
            "bulk_count": In(32),
            "bulk_busy": Out(1),
            "bulk_done": Out(32),
            "bulk_errors": Out(32),
        })
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.domains.sync = sync = ClockDomain("sync")
        m.submodules.clock = self.clock
        m.d.comb += [sync.clk.eq(self.clock.clk), sync.rst.eq(self.rst), self.clk.eq(sync.clk)]
        m.submodules.device = dev = self.device
        m.submodules.host = host = self.host
        for path, member, port in self.signature.flatten(self):
            if path[0] in ("cxl_cache", "cxl_mem", "clk", "rst") or path[0].startswith(("host_", "bulk_")):
                continue
            inner = dev
            for part in path:
                inner = inner[part] if isinstance(part, int) else getattr(inner, part)
            m.d.comb += port.eq(inner) if member.flow == Out else inner.eq(port)

        # Requests in flight die with the power, as the device's do.
        m.submodules.bulk = ResetInserter(self.power_fail)(self.bulk)
        wiring.connect(m, wiring.flipped(self.cxl_mem), self.bulk.host)
        wiring.connect(m, self.bulk.dev, dev.cxl_mem)
        m.d.comb += [
            self.bulk.start.eq(self.bulk_start), self.bulk.write.eq(self.bulk_write),
            self.bulk.count.eq(self.bulk_count), self.bulk_busy.eq(self.bulk.busy),
            self.bulk_done.eq(self.bulk.done), self.bulk_errors.eq(self.bulk.errors),
        ]

        rtl = self.host_rtl
        for name in ("d2h_req", "d2h_data"):            # device -> host
            d, t, h = (getattr(x, name) for x in (dev.cxl_cache, self.cxl_cache, host.cache))
            m.d.comb += [t.payload.eq(d.payload), h.payload.eq(d.payload),
                         t.valid.eq(d.valid & ~rtl), h.valid.eq(d.valid & rtl),
                         d.ready.eq(Mux(rtl, h.ready, t.ready))]
        for name in ("h2d_rsp", "h2d_data"):            # host -> device
            d, t, h = (getattr(x, name) for x in (dev.cxl_cache, self.cxl_cache, host.cache))
            m.d.comb += [d.valid.eq(Mux(rtl, h.valid, t.valid)),
                         d.payload.eq(Mux(rtl, h.payload, t.payload)),
                         h.ready.eq(d.ready & rtl), t.ready.eq(d.ready & ~rtl)]
        m.d.comb += [
            host.enable.eq(rtl),
            host.power_fail.eq(self.power_fail),
            host.delay_lo.eq(self.host_delay_lo),
            host.delay_span.eq(self.host_delay_span),
            self.host_reads.eq(host.reads),
            self.host_writes.eq(host.writes),
            self.host_errors.eq(host.errors),
        ]
        return m

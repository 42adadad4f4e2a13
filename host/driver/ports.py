"""The driver on a simulated device's own ports: a cocotb transport and the bench that owns it."""

from cocotb.triggers import ClockCycles, First, Lock, RisingEdge, Timer
from cocotb.utils import get_sim_time

from trainingcxl.spec.cxl_messages import D2HData, D2HReq, S2MDrs, S2MNdr
from trainingcxl.sim.backdoor import ram_array
from trainingcxl.sim.bench_env import PERIOD_NS
from trainingcxl.sim.control_driver import ControlDriver
from trainingcxl.sim.cxl_mem_master import CxlMemMaster
from trainingcxl.sim.cxl_cache_memory import GatewareHostMemory, HostMemory
from trainingcxl.sim.bulk_master import MemBulkDriver
from trainingcxl.sim.streams import StreamMonitor
from trainingcxl.spec.config import LINE_BITS, LINE_BYTES
from trainingcxl.spec.host_layout import HostLayout
from .device import Device, DeviceError

__all__ = ["PortsTransport", "DeviceTB"]


class _SimDeadline:
    def __init__(self, cycles):
        self.start, self.cycles = get_sim_time("ns"), cycles

    def expired(self):
        return (get_sim_time("ns") - self.start) / PERIOD_NS > self.cycles


class PortsTransport:
    """The device's ports under cocotb: the control window's streams, a CXL.mem master
    and the host memory that answers CXL.cache (see :mod:`trainingcxl.host.driver.device`
    for what a transport provides)."""

    interrupts = True
    #: Cycles host memory takes to answer a CXL.cache request, beyond the link:
    #: a DRAM access of about 80 ns, with jitter so that answers overtake each other.
    HOST_DELAY = (16, 32)
    #: The same for the device's own staging buffer (``near-data``).
    LOCAL_DELAY = (2, 6)

    def __init__(self, dut, *, ctl, mem, host, media=None, bulk=None):
        self.dut, self.ctl, self.mem, self.host = dut, ctl, mem, host
        self.media = media
        # Many lines at once go through the bulk master in gateware (:mod:`~trainingcxl.sim.bulk_master`).
        self.bulk = bulk
        self._bulk_free = Lock()

    def _bulk_for(self, count):
        return (self.bulk is not None and count >= self.bulk.MIN_LINES and self.mem.idle
                and not self._bulk_free.locked())

    async def read_reg(self, reg):
        return await self.ctl.read(reg)

    async def write_reg(self, reg, value):
        await self.ctl.write(reg, value)

    async def read_lines(self, addrs):
        addrs = list(addrs)
        if self._bulk_for(len(addrs)):
            async with self._bulk_free:
                words, errors = await self.bulk.read(addrs)
            if errors:
                raise DeviceError(f"{errors} of {len(addrs)} CXL.mem reads returned poisoned data")
            return words
        got = await self.mem.read_lines(addrs)
        return [got[a][0] for a in addrs]

    async def write_lines(self, lines):
        if self._bulk_for(len(lines)):
            async with self._bulk_free:
                errors = await self.bulk.write(lines)
            if errors:
                raise DeviceError(f"{errors} of {len(lines)} CXL.mem writes refused")
            return
        result = await self.mem.write_lines(lines)
        bad = [a for a, op in result.items() if op.name != "Cmp"]
        if bad:
            raise DeviceError(f"{len(bad)} CXL.mem writes refused, first at {bad[0]:#x}")

    async def write_host(self, line, array):
        self.host.write_array(line * LINE_BYTES, array)

    async def read_host(self, line, count, dtype):
        return self.host.read_array(line * LINE_BYTES, count, dtype)

    async def idle(self):
        if not self.dut.irq.value:
            await First(RisingEdge(self.dut.irq), Timer(65536 * PERIOD_NS, "ns"))

    async def sleep(self, cycles):
        await Timer(cycles * PERIOD_NS, "ns")

    def deadline(self, cycles):
        return _SimDeadline(cycles)

    async def power_fail(self, cycles=2):
        """Cut the power: every volatile state of the device is lost; host requests in flight too."""
        self.dut.power_fail.value = 1
        # The host's requests die with the link while the device is held in
        # reset: none may still be on a wire when it wakes up (the control
        # driver withdraws its request, the stream sources drop what was queued
        # at the next edge). The CXL.mem workers go after one edge, once the
        # tasks cancelled with the power are gone.
        self.ctl.forget()
        self.host.forget()
        await RisingEdge(self.dut.clk)
        self.mem.forget_outstanding()
        await ClockCycles(self.dut.clk, max(1, cycles - 1))
        # A response a sink sampled in the cycle of the cut lands after it: drop it
        # too, or the next access would take it for its own. (The control driver
        # keeps none: an access cut short leaves nothing behind.)
        self.host.forget()
        self.mem.forget_outstanding()
        self.dut.power_fail.value = 0
        await RisingEdge(self.dut.clk)

    async def check_link(self, layout):
        """The simulated device's ports need no handshake; ``ID`` and ``GEOMETRY`` are
        checked by the driver."""

    def use_local_host_memory(self):
        self.host.delay = self.LOCAL_DELAY

    def forget_host_memory(self):
        self.host.clear()


class DeviceTB(Device):
    """A simulated device with its reset and host-side models, driven by the
    one driver (:class:`~trainingcxl.host.driver.device.Device`) over its ports.

    Host memory for descriptors is laid out by :class:`HostLayout` from host
    line ``HOST_BASE``. ``protocol_checks`` watches every stream the device drives
    (valid and payload held until taken); :meth:`check_models` reports what the
    host models saw wrong.
    """

    HOST_BASE = HostLayout.BASE
    HOST_DELAY = PortsTransport.HOST_DELAY

    def __init__(self, dut, config, *, seed=0, backpressure=None, gaps=None, host_delay=None,
                 protocol_checks=True, host_model="auto"):
        self.dut = dut
        self.clock = dut.clk            # free-running inside the simulator (SimTop)
        dut.rst.value = 1
        dut.power_fail.value = 0
        if hasattr(dut, "bulk_start"):
            dut.bulk_start.value = 0            # an input left undriven is X under Icarus
        layout = HostLayout(config, base=self.HOST_BASE)
        self.mem = CxlMemMaster(dut, dut.clk, pause=backpressure, gaps=gaps)
        # The link's latency is in the RTL; host memory adds its own access time.
        delay = self.HOST_DELAY if host_delay is None else tuple(host_delay)
        self.host = self._host_memory(host_model, layout, delay, seed, backpressure)
        self.ctl = ControlDriver(dut, dut.clk)
        media = ram_array("media", config.media_lines, LINE_BITS)
        # Bulk CXL.mem only where nothing watches the bench's own master at work.
        bulk = MemBulkDriver.open(dut) if backpressure is None and gaps is None else None
        super().__init__(PortsTransport(dut, ctl=self.ctl, mem=self.mem, host=self.host,
                                        media=media, bulk=bulk),
                         config, layout=layout)
        self.idx_line, self.off_line, self.out_line = (
            self.idx_lines[0], self.off_lines[0], self.out_lines[0])
        self.monitors = []
        if protocol_checks:
            streams = [("cxl_mem__s2m_ndr", S2MNdr), ("cxl_mem__s2m_drs", S2MDrs)]
            if isinstance(self.host, HostMemory):
                # (The gateware model is always ready: nothing for a monitor to see.)
                streams += [("cxl_cache__d2h_req", D2HReq), ("cxl_cache__d2h_data", D2HData)]
            self.monitors = [StreamMonitor(dut, prefix, shape, dut.clk) for prefix, shape in streams]

    def _host_memory(self, kind, layout, delay, seed, backpressure):
        """``kind``: ``"python"`` (faults and backpressure possible), ``"gateware"``
        (no Python per request; needs the simulation top's backdoor RAMs), or
        ``"auto"``: the gateware where it can serve, else Python."""
        if kind not in ("auto", "python", "gateware"):
            raise ValueError(f"host_model must be auto, python or gateware, not {kind!r}")
        lines = ram_array("host", layout.lines, LINE_BITS) if hasattr(self.dut, "host_rtl") else None
        if kind == "gateware" and lines is None:
            raise ValueError("this simulation has no gateware host memory with a backdoor "
                             "(Verilator builds of the simulation top have one)")
        if kind == "gateware" or (kind == "auto" and lines is not None and backpressure is None):
            return GatewareHostMemory(self.dut, base=layout.base, lines=lines, delay=delay)
        if hasattr(self.dut, "host_rtl"):
            self.dut.host_rtl.value = 0
        return HostMemory(self.dut, self.dut.clk, base=layout.base, lines=layout.lines,
                          period_ns=PERIOD_NS, delay=delay, seed=seed, pause=backpressure)

    async def reset(self, cycles=4):
        self.submitted = 0
        self.dut.rst.value = 1
        await ClockCycles(self.clock, cycles)
        self.dut.rst.value = 0
        await RisingEdge(self.clock)

    def check_models(self):
        errors = self.mem.errors + self.host.errors
        for mon in self.monitors:
            errors += mon.violations
        assert not errors, "host models saw protocol errors:\n" + "\n".join(errors[:10])

"""The device as a board carries it: GPU memory on chip, a UART host bridge, a button, LEDs."""

from amaranth import *
from amaranth.hdl import ResetInserter
from amaranth.lib import wiring
from amaranth.lib.cdc import FFSynchronizer
from amaranth.lib.wiring import In, Out

from trainingcxl.spec.bridge_protocol import POWER_FAIL_CYCLES
from trainingcxl.spec.host_layout import HostLayout
from ..sdram.controller import SdramController
from ..sdram.pads import SdramPadsSignature
from ..top import Device
from .bridge import HostBridge
from .host_window import HostWindow
from .uart import UartRx, UartTx

__all__ = ["BoardSystem", "LED_NAMES"]

#: What each LED shows, from bit 0.
LED_NAMES = ("busy", "logging", "recovering", "unrecovered", "error", "power-failed",
             "uart", "heartbeat")


class BoardSystem(wiring.Component):
    """:class:`~trainingcxl.hdl.top.Device` with everything a board adds around it.

    ::

        rx/tx pins -- UartRx/UartTx -- HostBridge --control------------> Device
                                          |  --CXL.mem-----------------> Device
                                          |  --host port--> HostWindow <--CXL.cache-- Device
        button -- sync, debounce ---------+--> power_fail ------------> Device, HostWindow

    The host window is block RAM laid out by :class:`HostLayout` at its
    usual host line address, so the host program's descriptors are those of
    the simulated host. A press of the (active high) button is a power
    failure, as is the bridge's ``POWER_FAIL`` command; either resets the
    device and the window's CXL.cache state, never the bridge.

    ``power_fail`` resets nearly every flip-flop of the device: it leaves a
    register and, on an FPGA, can be put on a global network by
    ``reset_buffer(m, signal)`` (a board top passes one; see
    :mod:`trainingcxl.boards.ulx3s`), so that it takes no general routing.

    LEDs (bit 0 first): engine busy, logging, RECOVER running, not yet
    recovered since power-up, error, toggles on every power failure, UART
    activity, heartbeat. Short events are stretched to ``2**stretch_bits``
    cycles so they can be seen.

    With ``config.media = "sdram"`` the PMEM media is the board's SDRAM: an
    :class:`~trainingcxl.hdl.sdram.controller.SdramController` at
    ``clock_mhz`` (which its timing in cycles follows) drives the ``sdram``
    pins; no power failure resets it (it is the media).

    Members
    -------
    rx : In(1), tx : Out(1)
        UART pins (idle high).
    button : In(1)
    leds : Out(8)
    sdram : Out(SdramPadsSignature)
        With ``config.media = "sdram"`` only.
    """

    def __init__(self, config, *, divisor, debounce_cycles=1 << 16, stretch_bits=20,
                 reset_buffer=None, clock_mhz=25, sdram_read_delay=0):
        self._clock_mhz = clock_mhz
        self._sdram_read_delay = sdram_read_delay
        self._config = config
        self._reset_buffer = reset_buffer
        self._divisor = divisor
        self._debounce = debounce_cycles
        self._stretch_bits = stretch_bits
        self._layout = HostLayout(config)
        if self._layout.lines > 1 << 16:
            raise ValueError(f"the host window of {self._layout.lines} lines does not fit the "
                             f"bridge's 16-bit line numbers; lower max_bags")
        members = {"rx": In(1, init=1), "tx": Out(1, init=1), "button": In(1), "leds": Out(8)}
        if config.media == "sdram":
            members["sdram"] = Out(SdramPadsSignature(config.sdram))
        super().__init__(members)

    @property
    def config(self):
        return self._config

    @property
    def layout(self):
        return self._layout

    def elaborate(self, platform):
        m = Module()
        cfg = self._config
        # The power failure, registered; high through the board's reset too, so
        # that it is the only reset of what it resets.
        fail_q = Signal(init=1)
        power_fail = self._reset_buffer(m, fail_q) if self._reset_buffer else fail_q
        # The device and the window run on the board's clock in a domain without
        # a reset of its own: their flip-flops are reset by ``power_fail`` alone.
        # (With both, synthesis ORs the two once, in one LUT whose output then
        # crosses the chip to every flip-flop instead of the global network.)
        m.domains.powered = ClockDomain("powered", reset_less=True, local=True)
        m.d.comb += ClockSignal("powered").eq(ClockSignal("sync"))
        powered = DomainRenamer("powered")
        m.submodules.device = device = powered(Device(cfg))
        m.submodules.window = window = powered(ResetInserter(power_fail)(
            HostWindow(base=self._layout.base, lines=self._layout.lines, pulls=cfg.cache_ids)))
        m.submodules.uart_rx = rx = UartRx(self._divisor)
        m.submodules.uart_tx = tx = UartTx(self._divisor)
        m.submodules.bridge = bridge = HostBridge(divisor=self._divisor,
                                                  window_lines=self._layout.lines)

        wiring.connect(m, rx.data, bridge.rx)
        wiring.connect(m, bridge.tx, tx.data)
        wiring.connect(m, bridge.control, device.control)
        wiring.connect(m, bridge.cxl_mem, device.cxl_mem)
        wiring.connect(m, bridge.host, window.host)
        wiring.connect(m, device.cxl_cache, window.cache)
        m.d.comb += [rx.rx.eq(self.rx), self.tx.eq(tx.tx)]
        if cfg.media == "sdram":
            m.submodules.sdram = sdram = SdramController(
                cfg.sdram, clock_mhz=self._clock_mhz, addr_bits=cfg.media_addr_bits,
                read_delay=self._sdram_read_delay)
            wiring.connect(m, device.media, sdram.bus)
            wiring.connect(m, sdram.pads, wiring.flipped(self.sdram))

        # The button: synchronized, debounced, one power failure per press.
        button = Signal()
        m.submodules.button_sync = FFSynchronizer(self.button, button)
        stable = Signal(range(self._debounce + 1))
        pressed = Signal()
        last = Signal()
        m.d.sync += last.eq(button)
        with m.If(button != last):
            m.d.sync += stable.eq(0)
        with m.Elif(stable != self._debounce):
            m.d.sync += stable.eq(stable + 1)
        press = Signal()
        with m.If((stable == self._debounce) & (button != pressed)):
            m.d.sync += pressed.eq(button)
            m.d.comb += press.eq(button)
        button_timer = Signal(range(POWER_FAIL_CYCLES + 1))
        button_fails = Signal(16)
        with m.If(press):
            m.d.sync += [button_timer.eq(POWER_FAIL_CYCLES), button_fails.eq(button_fails + 1)]
        with m.Elif(button_timer != 0):
            m.d.sync += button_timer.eq(button_timer - 1)

        m.d.sync += fail_q.eq(bridge.power_fail | (button_timer != 0))
        m.d.comb += [
            device.power_fail.eq(power_fail),
            bridge.lost.eq(button_timer != 0),
            bridge.irq.eq(device.irq),
            bridge.button_fails.eq(button_fails),
            bridge.leds.eq(self.leds),
        ]

        # LEDs.
        def stretched(event):
            timer = Signal(self._stretch_bits)
            with m.If(event):
                m.d.sync += timer.eq(-1)
            with m.Elif(timer != 0):
                m.d.sync += timer.eq(timer - 1)
            return event | (timer != 0)

        failed = Signal()
        fail_qq = Signal(init=1)
        m.d.sync += fail_qq.eq(fail_q)
        with m.If(fail_q & ~fail_qq):
            m.d.sync += failed.eq(~failed)
        heartbeat = Signal(self._stretch_bits + 4)
        m.d.sync += heartbeat.eq(heartbeat + 1)
        state = device.state
        m.d.comb += self.leds.eq(Cat(
            stretched(state.busy), state.logging, stretched(state.recovering), state.unrecovered,
            state.error, failed, stretched(rx.data.valid | tx.data.valid), heartbeat[-1]))
        return m

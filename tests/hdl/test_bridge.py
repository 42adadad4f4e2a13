"""UART host bridge: the frame protocol, the UART, the bridge FSM and the host window."""

import pytest
from amaranth import *
from amaranth.lib import wiring

from trainingcxl.hdl.bridge.bridge import HostBridge
from trainingcxl.hdl.bridge.host_window import HostWindow
from trainingcxl.hdl.bridge.uart import UartRx, UartTx
from trainingcxl.spec.cxl_messages import D2HReqOpcode, H2DRspOpcode
from trainingcxl.spec.bridge_protocol import (POWER_FAIL_CYCLES, REQ_SYNC, RSP_LEN, Command,
                                              FrameError, Status, crc8, decode_response,
                                              encode_request)
from trainingcxl.sim.amaranth_streams import simulate, stream_get, stream_put

WINDOW = 16
BASE = 0x40000


# -- the protocol, host side -------------------------------------------------------------

def test_crc8_is_crc8_smbus():
    assert crc8(b"123456789") == 0xF4           # the catalogued check value
    assert crc8(b"") == 0


def test_frames_round_trip_and_refuse_damage():
    frame = encode_request(Command.REG_READ, bytes([0x12]))
    assert frame[0] == REQ_SYNC and frame[1] == Command.REG_READ and frame[-1] == crc8(frame[1:-1])
    with pytest.raises(ValueError, match="takes 1 payload bytes"):
        encode_request(Command.REG_READ, b"")
    body = bytes([Status.OK]) + (7).to_bytes(8, "little")
    rsp = bytes([0xA5]) + body + bytes([crc8(body)])
    assert decode_response(Command.REG_READ, rsp) == (Status.OK, (7).to_bytes(8, "little"))
    for bad, why in ((rsp[:-1], "expected 11"), (b"\x00" + rsp[1:], "starts with"),
                     (rsp[:-1] + bytes([rsp[-1] ^ 1]), "CRC")):
        with pytest.raises(FrameError, match=why):
            decode_response(Command.REG_READ, bad)


# -- the UART ------------------------------------------------------------------------------

class _Loop(Elaboratable):
    def __init__(self, divisor):
        self.tx, self.rx = UartTx(divisor), UartRx(divisor)

    def elaborate(self, platform):
        m = Module()
        m.submodules.tx, m.submodules.rx = self.tx, self.rx
        m.d.comb += self.rx.rx.eq(self.tx.tx)
        return m


@pytest.mark.parametrize("divisor", [4, 7, 25])
def test_uart_loopback_carries_every_byte_value(divisor):
    dut = _Loop(divisor)
    sent = [0x00, 0xFF, 0x55, 0xAA, 0x01, 0x80, 0x5A, 0xA5]
    got = []

    async def send(ctx):
        for byte in sent:
            await stream_put(ctx, dut.tx.data, byte, timeout=20 * divisor)

    async def receive(ctx):
        for _ in sent:
            got.append(await stream_get(ctx, dut.rx.data, timeout=40 * divisor))
        assert ctx.get(dut.rx.framing_errors) == 0

    simulate(dut, send, receive)
    assert got == sent


def test_uart_rx_drops_a_byte_with_a_low_stop_bit():
    rx = UartRx(4)
    got = []

    async def drive(ctx):
        def bits(byte, stop):
            return [0] + [byte >> i & 1 for i in range(8)] + [stop]
        ctx.set(rx.rx, 1)
        await ctx.tick().repeat(8)
        for bit in bits(0x3C, 0) + [1] * 12 + bits(0xC3, 1) + [1] * 4:
            ctx.set(rx.rx, bit)
            await ctx.tick().repeat(4)
        assert ctx.get(rx.framing_errors) == 1

    async def receive(ctx):
        got.append(await stream_get(ctx, rx.data, timeout=400))

    simulate(rx, drive, receive)
    assert got == [0xC3]


# -- the bridge and the host window ----------------------------------------------------------

class _Bridge(Elaboratable):
    """HostBridge with its host window; control and CXL.mem are left to the testbench."""

    def __init__(self):
        self.bridge = HostBridge(divisor=4, window_lines=WINDOW)
        self.window = HostWindow(base=BASE, lines=WINDOW, pulls=4)

    def elaborate(self, platform):
        m = Module()
        m.submodules.bridge, m.submodules.window = self.bridge, self.window
        wiring.connect(m, self.bridge.host, self.window.host)
        return m


async def _exchange(ctx, dut, command, payload=b"", frame=None):
    """Send one request byte by byte, collect its response; returns ``(status, payload)``."""
    frame = frame if frame is not None else encode_request(command, payload)
    for byte in frame:
        await stream_put(ctx, dut.bridge.rx, byte)
    rsp = bytes([await stream_get(ctx, dut.bridge.tx) for _ in range(RSP_LEN[command] + 3)])
    return decode_response(command, rsp)


def test_bridge_serves_its_commands_and_refuses_bad_frames():
    dut = _Bridge()

    async def control_model(ctx):
        """Answers every read of register r with r * 0x1111, refuses register 0xEE."""
        ctl = dut.bridge.control
        while True:
            req = await stream_get(ctx, ctl.req, timeout=10 ** 6)
            await stream_put(ctx, ctl.rsp, {"data": 0 if req.write else req.addr * 0x1111,
                                            "err": int(req.addr == 0xEE)})

    async def host(ctx):
        status, data = await _exchange(ctx, dut, Command.PING)
        assert status == Status.OK and int.from_bytes(data[4:6], "little") == WINDOW
        assert await _exchange(ctx, dut, Command.REG_READ, bytes([0x21])) == \
            (Status.OK, (0x21 * 0x1111).to_bytes(8, "little"))
        assert (await _exchange(ctx, dut, Command.REG_READ, bytes([0xEE])))[0] == Status.REG_ERROR
        line = bytes(range(64))
        assert (await _exchange(ctx, dut, Command.HOST_WRITE, (3).to_bytes(2, "little") + line))[0] \
            == Status.OK
        assert await _exchange(ctx, dut, Command.HOST_READ, (3).to_bytes(2, "little")) == (Status.OK, line)
        assert (await _exchange(ctx, dut, Command.HOST_READ, (WINDOW).to_bytes(2, "little")))[0] \
            == Status.OUT_OF_WINDOW
        # A corrupted CRC is refused; the request is not executed.
        bad = bytearray(encode_request(Command.HOST_WRITE, (3).to_bytes(2, "little") + bytes(64)))
        bad[-1] ^= 0xFF
        assert (await _exchange(ctx, dut, Command.HOST_WRITE, frame=bytes(bad)))[0] == Status.BAD_CRC
        assert await _exchange(ctx, dut, Command.HOST_READ, (3).to_bytes(2, "little")) == (Status.OK, line)
        # An unknown command is answered at once with an empty payload.
        for byte in (REQ_SYNC, 0x0F):
            await stream_put(ctx, dut.bridge.rx, byte)
        rsp = bytes([await stream_get(ctx, dut.bridge.tx) for _ in range(3)])
        assert rsp[1] == Status.BAD_COMMAND and rsp[2] == crc8(rsp[1:2])
        # POWER_FAIL holds power_fail for its cycles.
        assert (await _exchange(ctx, dut, Command.POWER_FAIL))[0] == Status.OK
        high = 0
        for _ in range(4 * POWER_FAIL_CYCLES):
            high += ctx.get(dut.bridge.power_fail)
            await ctx.tick()
        # Raised for POWER_FAIL_CYCLES from EXECUTE on, partly while the response went out.
        assert 1 <= high <= POWER_FAIL_CYCLES and not ctx.get(dut.bridge.power_fail)
        _, data = await _exchange(ctx, dut, Command.STATE)
        word = int.from_bytes(data, "little")
        assert word >> 16 & 0xFFFF == 1                 # one power failure by command
        assert word >> 48 & 0xFFFF == 2                 # the bad CRC and the unknown command

    simulate(dut, host, background=[control_model])


def test_bridge_answers_power_lost_when_the_device_loses_power_mid_request():
    dut = _Bridge()

    async def host(ctx):
        frame = encode_request(Command.MEM_READ, (0x1234).to_bytes(6, "little"))
        for byte in frame:
            await stream_put(ctx, dut.bridge.rx, byte)
        # The MemRd goes out and no answer comes: the button cuts the power.
        req = await stream_get(ctx, dut.bridge.cxl_mem.m2s_req)
        assert req.addr == 0x1234
        await ctx.tick().repeat(20)
        ctx.set(dut.bridge.lost, 1)
        await ctx.tick()
        ctx.set(dut.bridge.lost, 0)
        rsp = bytes([await stream_get(ctx, dut.bridge.tx) for _ in range(RSP_LEN[Command.MEM_READ] + 3)])
        assert decode_response(Command.MEM_READ, rsp)[0] == Status.POWER_LOST

    simulate(dut, host)


def test_host_window_serves_cxl_cache_reads_and_write_pulls():
    win = HostWindow(base=BASE, lines=WINDOW, pulls=4)
    cache = win.cache

    async def device(ctx):
        # Write line 5 through a write pull, then read it back; outside the window: poison.
        await stream_put(ctx, cache.d2h_req, {"opcode": D2HReqOpcode.ItoMWr, "cqid": 7, "addr": BASE + 5})
        rsp = await stream_get(ctx, cache.h2d_rsp)
        assert rsp.opcode == H2DRspOpcode.GO_WritePull and rsp.cqid == 7
        await stream_put(ctx, cache.d2h_data, {"uqid": rsp.uqid, "data": 0xABCDEF << 100})
        await stream_put(ctx, cache.d2h_req, {"opcode": D2HReqOpcode.RdCurr, "cqid": 9, "addr": BASE + 5})
        got = await stream_get(ctx, cache.h2d_data)
        assert (got.cqid, got.poison, got.data) == (9, 0, 0xABCDEF << 100)
        await stream_put(ctx, cache.d2h_req, {"opcode": D2HReqOpcode.RdCurr, "cqid": 1, "addr": BASE + WINDOW})
        assert (await stream_get(ctx, cache.h2d_data)).poison == 1
        await stream_put(ctx, cache.d2h_req, {"opcode": D2HReqOpcode.WrCur, "cqid": 2, "addr": BASE - 1})
        assert (await stream_get(ctx, cache.h2d_rsp)).opcode == H2DRspOpcode.GO_ERR_WritePull

    simulate(win, device)

"""The PMEM controller with its media outside, in an SDRAM behind the SDRAM controller
and a chip model that checks every timing rule: the PMEM timing still holds on top of
the SDRAM's (the emulated PMEM is slower), writes acknowledged before a power failure
are in the SDRAM after it, and reads issued before it are not answered after it."""

import random
from dataclasses import replace

import pytest
from amaranth import Module
from amaranth.lib import wiring

from trainingcxl.hdl.common.line_port import LineOp
from trainingcxl.hdl.pmem.controller import PmemController
from trainingcxl.hdl.sdram.controller import SdramController
from trainingcxl.sim.amaranth_streams import simulate, stream_get, stream_put
from trainingcxl.sim.rtl.sdram_model import SdramModel, Violation
from trainingcxl.spec.config import Config, PmemTiming, SdramTiming
from trainingcxl.spec.presets import PRESETS

MHZ = 50
CHIP = SdramTiming(rows=16, cols=64, init_us=2.0, trefi_ns=4000.0)
#: Slower than the SDRAM's ~37 cycles a line, reads and writes together.
#: The volatile queue, as on the boards (the energy-backed buffer writes media inside).
SLOW = PmemTiming(read_latency=96, write_latency=96, read_rate=(1, 80), write_rate=(1, 80),
                  read_depth=4, wpq_depth=4, buffer_lines=0)
FULL = (1 << 64) - 1


def config(pmem=SLOW, registered=False):
    """``registered``: the 85F's register slices, which issue a request a cycle after
    it was taken, and its read data in beats."""
    beats = PRESETS["ulx3s"].line_beats if registered else 1
    cfg = Config(tables=(16, 16), pmem=pmem, log_lines=14, commit_lines=2, snapshot_lines=2,
                 register_slices=registered, line_beats=beats)
    assert (1 << cfg.media_addr_bits) <= CHIP.lines
    return cfg


class Board(wiring.Component):
    """PMEM on SDRAM: the controller's media port on the SDRAM controller, on the chip."""

    def __init__(self, cfg):
        self.pmem = PmemController(cfg, n_ports=2, media_port=True)
        self.sdram = SdramController(CHIP, clock_mhz=MHZ, addr_bits=cfg.media_addr_bits)
        self.chip = SdramModel(CHIP, clock_mhz=MHZ)
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        m.submodules.pmem, m.submodules.sdram, m.submodules.chip = self.pmem, self.sdram, self.chip
        wiring.connect(m, self.pmem.media_port, self.sdram.bus)
        wiring.connect(m, self.sdram.pads, self.chip.pads)
        return m


def req(op, addr, tag=0, data=0, be=FULL):
    return {"op": op, "addr": addr, "tag": tag, "data": data, "be": be}


async def until_ready(ctx, dut):
    while not ctx.get(dut.sdram.ready):
        await ctx.tick()


@pytest.mark.parametrize("registered", [False, True])
def test_pmem_timing_holds_on_sdram_and_data_is_exact(registered):
    cfg = config(registered=registered)
    dut = Board(cfg)
    shadow = {}
    latencies = []
    out = {}

    async def port(ctx, p, seed, n):
        rng = random.Random(seed)
        await until_ready(ctx, dut)
        for k in range(n):
            addr = rng.randrange(cfg.media_lines)
            if rng.random() < 0.5 or addr not in shadow:
                value = rng.getrandbits(512)
                await stream_put(ctx, p.req, req(LineOp.WRITE, addr, k, value), timeout=20_000)
                shadow[addr] = value
                assert (await stream_get(ctx, p.wack, timeout=20_000)).tag == k
            else:
                want = shadow[addr]
                await stream_put(ctx, p.req, req(LineOp.READ, addr, k), timeout=20_000)
                t = 0
                ctx.set(p.rdata.ready, 1)
                while not ctx.get(p.rdata.valid):
                    await ctx.tick()
                    t += 1
                latencies.append(t)
                assert ctx.get(p.rdata.payload.data) == want
                await ctx.tick()
                ctx.set(p.rdata.ready, 0)

    async def one(ctx):
        # Port 0 alone first: every read takes the PMEM latency exactly.
        await port(ctx, dut.pmem.port0, 1, 80)
        out["late"] = ctx.get(dut.pmem.media_late)
        out["violation"] = Violation(ctx.get(dut.chip.violation))
        out["refreshes"] = ctx.get(dut.chip.refreshes)

    simulate(dut, one)
    assert out["violation"] == Violation.NONE
    assert out["late"] == 0 and out["refreshes"] > CHIP.init_refreshes
    # Counted from the cycle after the read was taken: the configured latency, as with
    # the media inside (tests/hdl/test_pmem.py).
    assert len(latencies) > 5 and set(latencies) == {SLOW.read_latency - 1}, latencies


@pytest.mark.parametrize("registered", [False, True])
def test_a_power_failure_keeps_acknowledged_writes_and_drops_reads_in_flight(registered):
    cfg = config(registered=registered)
    dut = Board(cfg)
    got = []

    async def tb(ctx):
        p = dut.pmem.port0
        await until_ready(ctx, dut)
        for addr in range(4):
            await stream_put(ctx, p.req, req(LineOp.WRITE, addr, data=0x1000 + addr))
            await stream_get(ctx, p.wack, timeout=20_000)
        # Reads in flight, then the power fails before any is answered.
        for addr in range(4):
            await stream_put(ctx, p.req, req(LineOp.READ, addr, tag=addr))
        for _ in range(10):
            await ctx.tick()
        ctx.set(dut.pmem.power_fail, 1)
        await ctx.tick()
        ctx.set(dut.pmem.power_fail, 0)
        for _ in range(400):                    # the stale answers come back meanwhile
            assert not ctx.get(p.rdata.valid)
            await ctx.tick()
        for addr in (3, 1):
            await stream_put(ctx, p.req, req(LineOp.READ, addr, tag=addr))
            rsp = await stream_get(ctx, p.rdata, timeout=20_000)
            got.append((rsp.tag, rsp.data))
        got.append(Violation(ctx.get(dut.chip.violation)))

    simulate(dut, tb)
    assert got == [(3, 0x1003), (1, 0x1001), Violation.NONE]


@pytest.mark.parametrize("registered", [False, True])
def test_a_pmem_faster_than_the_sdram_is_counted_late_and_acks_each_write_once(registered):
    """Writes wait for room in the media's queue; meanwhile their acks are not offered
    (a client that counts acks would otherwise count a write twice)."""
    cfg = config(replace(SLOW, read_latency=16, write_latency=12, read_rate=(1, 1),
                         write_rate=(1, 1)), registered)
    dut = Board(cfg)
    out = {"acks": 0}

    async def acks(ctx):
        ctx.set(dut.pmem.port0.wack.ready, 1)
        while True:
            await ctx.tick()
            out["acks"] += ctx.get(dut.pmem.port0.wack.valid)

    async def tb(ctx):
        p = dut.pmem.port0
        await until_ready(ctx, dut)
        ctx.set(p.rdata.ready, 1)
        for addr in range(30):
            await stream_put(ctx, p.req, req(LineOp.WRITE, addr % 16, data=addr))
        await stream_put(ctx, p.req, req(LineOp.READ, 40))
        for _ in range(2000):
            await ctx.tick()
        out["late"] = ctx.get(dut.pmem.media_late)

    simulate(dut, tb, background=[acks])
    assert out["late"] > 0
    assert out["acks"] == 30

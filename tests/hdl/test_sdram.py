"""The SDRAM controller on a model of the chip that checks every timing rule and the
start-up sequence: lines written and read back bit-exact with their byte enables,
refreshes in time, and a controller built for faster timing than the chip's fails."""

import random
from dataclasses import replace

import pytest
from amaranth import Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from trainingcxl.hdl.common.line_port import LineOp
from trainingcxl.hdl.sdram.controller import SdramController
from trainingcxl.sim.amaranth_streams import stream_get, stream_put
from trainingcxl.sim.rtl.sdram_model import SdramModel, Violation
from trainingcxl.spec.config import SdramTiming

MHZ = 50
#: A small chip with a short start-up and refresh interval, so that a test sees both.
CHIP = SdramTiming(rows=16, cols=64, init_us=2.0, trefi_ns=4000.0)
ADDR_BITS = 6                                       # 64 lines: 2 per row, every bank and row


class Harness(wiring.Component):
    def __init__(self, chip, controller_timing=None, mhz=MHZ, **kwargs):
        self.mhz = mhz
        self.ctrl = SdramController(controller_timing or chip, clock_mhz=mhz,
                                    addr_bits=ADDR_BITS, tag_bits=4, **kwargs)
        self.chip = SdramModel(chip, clock_mhz=mhz)
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        m.submodules.ctrl, m.submodules.chip = self.ctrl, self.chip
        wiring.connect(m, self.ctrl.pads, self.chip.pads)
        return m


def run(dut, ops, *, after=0):
    """Run ``ops`` (``(op, addr, data, be)``) through the controller; returns the read data
    in order, the model's violation and the refreshes seen."""
    out = {"reads": []}

    async def tb(ctx):
        bus = dut.ctrl.bus
        ctx.set(bus.rdata.ready, 1)
        ctx.set(bus.wack.ready, 1)
        for k, (op, addr, data, be) in enumerate(ops):
            await stream_put(ctx, bus.req, {"op": op, "addr": addr, "tag": k % 16, "data": data,
                                            "be": be}, timeout=20_000)
            if op == LineOp.READ:
                got = await stream_get(ctx, bus.rdata, timeout=2000)
                assert got.tag == k % 16
                out["reads"].append(got.data)
            else:
                got = await stream_get(ctx, bus.wack, timeout=2000)
                assert got.tag == k % 16
        for _ in range(after):
            await ctx.tick()
        out["violation"] = Violation(ctx.get(dut.chip.violation))
        out["cycle"] = ctx.get(dut.chip.violation_cycle)
        out["refreshes"] = ctx.get(dut.chip.refreshes)
        out["ready"] = ctx.get(dut.ctrl.ready)

    sim = Simulator(dut)
    sim.add_clock(1e-6 / dut.mhz)
    sim.add_testbench(tb)
    sim.run()
    return out


def random_ops(rng, n):
    """Writes with random byte enables at 8-byte granularity and reads, over every line."""
    shadow, ops, want = {}, [], []
    for _ in range(n):
        addr = rng.randrange(1 << ADDR_BITS)
        if rng.random() < 0.5 or addr not in shadow:
            data = rng.getrandbits(512)
            words = rng.getrandbits(8) if addr in shadow else 0xFF
            be = sum(0xFF << (8 * w) for w in range(8) if words >> w & 1)
            old = shadow.get(addr, 0)
            mask = sum(0xFF << (8 * b) for b in range(64) if be >> b & 1)
            shadow[addr] = (data & mask) | (old & ~mask)
            ops.append((LineOp.WRITE, addr, data, be))
        else:
            ops.append((LineOp.READ, addr, 0, 0))
            want.append(shadow[addr])
    return ops, want


@pytest.mark.parametrize("cas,mhz", [(2, 50), (3, 50), (2, 25)])
def test_lines_read_back_with_byte_enables_and_refreshes_in_time(cas, mhz):
    # At 25 MHz (the 85F's clock today) the same nanoseconds are fewer cycles.
    rng = random.Random(cas)
    ops, want = random_ops(rng, 120)
    out = run(Harness(replace(CHIP, cas_latency=cas), mhz=mhz), ops, after=400)
    assert out["violation"] == Violation.NONE, (out["violation"], out["cycle"])
    assert out["ready"]
    assert out["reads"] == want and len(want) > 20
    assert out["refreshes"] >= CHIP.init_refreshes + 3      # the start-up's and periodic ones


@pytest.mark.parametrize("field,chip,believed,kind", [
    ("trcd_ns", 60.0, 20.0, Violation.TRCD),
    ("trp_ns", 80.0, 20.0, Violation.TRP),
    ("trfc_ns", 70.0, 10.0, Violation.TRFC),
    ("trefi_ns", 4000.0, 40_000.0, Violation.TREFI),
    ("init_us", 2.0, 0.5, Violation.EARLY_COMMAND),
])
def test_a_controller_built_for_a_faster_chip_is_caught(field, chip, believed, kind):
    """The controller believes ``field`` is ``believed``; the chip needs ``chip``."""
    ops, _ = random_ops(random.Random(2), 40)
    out = run(Harness(replace(CHIP, **{field: chip}), replace(CHIP, **{field: believed})), ops,
              after=3000)
    assert out["violation"] == kind, out


def test_a_read_of_a_closed_bank_and_a_bad_mode_are_caught():
    """The model on its own, driven pin by pin after a correct start-up."""
    chip = SdramModel(CHIP, clock_mhz=MHZ)
    init = SdramTiming.cycles(CHIP.init_us * 1000, MHZ)
    trp = SdramTiming.cycles(CHIP.trp_ns, MHZ)
    trfc = SdramTiming.cycles(CHIP.trfc_ns, MHZ)
    got = []

    async def command(ctx, ras, cas, we, a=0, ba=0):
        ctx.set(chip.pads.ras_n, ras)
        ctx.set(chip.pads.cas_n, cas)
        ctx.set(chip.pads.we_n, we)
        ctx.set(chip.pads.a, a)
        ctx.set(chip.pads.ba, ba)
        await ctx.tick()
        ctx.set(chip.pads.ras_n, 1)
        ctx.set(chip.pads.cas_n, 1)
        ctx.set(chip.pads.we_n, 1)

    async def pause(ctx, n):
        for _ in range(n):
            await ctx.tick()

    async def tb(ctx):
        ctx.set(chip.pads.cke, 1)
        ctx.set(chip.pads.cs_n, 0)
        for signal in (chip.pads.ras_n, chip.pads.cas_n, chip.pads.we_n):
            ctx.set(signal, 1)
        await pause(ctx, init)
        await command(ctx, 0, 1, 0, a=1 << 10)          # PRECHARGE ALL
        await pause(ctx, trp)
        for _ in range(CHIP.init_refreshes):
            await command(ctx, 0, 0, 1)                 # AUTO REFRESH
            await pause(ctx, trfc)
        await command(ctx, 0, 0, 0, a=0x23)             # mode: CAS 2, bursts of 8
        await pause(ctx, 4)
        got.append(Violation(ctx.get(chip.violation)))
        await command(ctx, 1, 0, 1, a=8, ba=2)          # READ of bank 2, never activated
        await pause(ctx, 2)
        got.append(Violation(ctx.get(chip.violation)))

    sim = Simulator(chip)
    sim.add_clock(1e-6 / MHZ)
    sim.add_testbench(tb)
    sim.run()
    assert got == [Violation.NONE, Violation.CLOSED_BANK]

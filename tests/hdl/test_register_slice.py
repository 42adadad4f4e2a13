"""Register slices: order, rate, the stream rule under back-pressure."""

import random

from trainingcxl.hdl.common.line_port import LinePortSignature
from trainingcxl.hdl.common.register_slice import LinePortSlice, RegisterSlice
from trainingcxl.sim.amaranth_streams import simulate, stream_get, stream_put


def _run(ready_pattern, count=200, cut_ready=False):
    dut = RegisterSlice(16, cut_ready=cut_ready)
    sent, got, cycles = list(range(1, count + 1)), [], [0]
    violations = []

    async def producer(ctx):
        for v in sent:
            ctx.set(dut.i.valid, 1)
            ctx.set(dut.i.payload, v)
            await ctx.tick().until(dut.i.ready)
        ctx.set(dut.i.valid, 0)

    async def consumer(ctx):
        held = None
        rng = random.Random(3)
        while len(got) < count:
            ready = ready_pattern(rng)
            ctx.set(dut.o.ready, ready)
            valid, payload = ctx.get(dut.o.valid), ctx.get(dut.o.payload)
            if held is not None and (not valid or payload != held):
                violations.append((held, valid, payload))
            if cut_ready and ctx.get(dut.i.ready) != (not valid):
                violations.append(("i.ready follows o.ready", valid, ready))
            await ctx.tick()
            cycles[0] += 1
            if valid and ready:
                got.append(payload)
                held = None
            elif valid:
                held = payload
            assert cycles[0] < 20 * count, "the slice stopped moving"

    simulate(dut, consumer, background=[producer])
    return sent, got, cycles[0], violations


def test_register_slice_moves_one_payload_per_cycle_in_order():
    sent, got, cycles, violations = _run(lambda rng: 1)
    assert got == sent and not violations
    assert cycles <= len(sent) + 2          # one cycle of latency, then one per cycle


def test_register_slice_holds_its_payload_until_taken():
    sent, got, cycles, violations = _run(lambda rng: rng.random() < 0.4)
    assert got == sent
    assert violations == []


def test_a_slice_that_cuts_ready_takes_a_payload_every_other_cycle_in_order():
    sent, got, cycles, violations = _run(lambda rng: 1, cut_ready=True)
    assert got == sent and not violations
    assert 2 * len(sent) - 2 <= cycles <= 2 * len(sent) + 2


def test_a_slice_that_cuts_ready_holds_its_payload_and_its_ready_is_a_register():
    sent, got, cycles, violations = _run(lambda rng: rng.random() < 0.4, cut_ready=True)
    assert got == sent
    assert violations == []


def test_line_port_slice_delays_requests_and_passes_responses():
    dut = LinePortSlice(LinePortSignature(addr_bits=10, tag_bits=4))
    seen = {}

    async def engine(ctx):
        await stream_put(ctx, dut.up.req, {"op": 1, "addr": 0x155, "tag": 9, "data": 1 << 500, "be": 3})
        seen["rdata"] = await stream_get(ctx, dut.up.rdata)
        seen["wack"] = await stream_get(ctx, dut.up.wack)

    async def memory(ctx):
        seen["req"] = await stream_get(ctx, dut.down.req)
        await stream_put(ctx, dut.down.rdata, {"tag": 5, "data": 77, "err": 1})
        await stream_put(ctx, dut.down.wack, {"tag": 6, "err": 0})

    simulate(dut, engine, memory)
    req = seen["req"]
    assert (req.op.value if hasattr(req.op, "value") else req.op) == 1
    assert (req.addr, req.tag, req.data, req.be) == (0x155, 9, 1 << 500, 3)
    assert (seen["rdata"].tag, seen["rdata"].data, seen["rdata"].err) == (5, 77, 1)
    assert (seen["wack"].tag, seen["wack"].err) == (6, 0)

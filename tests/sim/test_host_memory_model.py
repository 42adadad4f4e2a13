"""The gateware host memory (sim/rtl/host_memory.py) in amaranth.sim: answers, delays,
the window, write pulls, and the protocol errors it counts."""

import random

from trainingcxl.spec.cxl_messages import D2HReqOpcode, H2DRspOpcode
from trainingcxl.sim.amaranth_streams import simulate, stream_put
from trainingcxl.sim.rtl.host_memory import PIPELINE, HostMemoryModel
from trainingcxl.spec.presets import PRESETS

CFG = PRESETS["tiny"].replace(cache_ids=16)
BASE, LINES = 0x100, 16


def _model(**kw):
    dut = HostMemoryModel(CFG, base=BASE, lines=LINES, **kw)
    return dut, dut.cache


async def _collect(ctx, cache, cycles, got):
    """Take every answer for ``cycles`` cycles into ``got`` as (cycle, kind, payload)."""
    ctx.set(cache.h2d_data.ready, 1)
    ctx.set(cache.h2d_rsp.ready, 1)
    for cycle in range(cycles):
        for kind in ("h2d_data", "h2d_rsp"):
            s = getattr(cache, kind)
            if ctx.get(s.valid):
                got.append((cycle, kind, ctx.get(s.payload)))
        await ctx.tick()


def test_reads_and_writes_are_answered_within_the_delay_and_land_in_the_window():
    dut, cache = _model()
    rng = random.Random(3)
    words = {k: rng.getrandbits(512) for k in range(LINES)}
    dut.ram.data.init = [words[k] for k in range(LINES)]

    async def tb(ctx):
        ctx.set(dut.enable, 1)
        ctx.set(dut.delay_lo, 5)
        ctx.set(dut.delay_span, 4)          # answers 5..8 cycles after the request
        got = []
        # Reads of three lines in the window and one outside it, then a write pull.
        for cqid, line in enumerate([BASE + 3, BASE + 15, BASE + 0, BASE + LINES]):
            await stream_put(ctx, cache.d2h_req, {"opcode": D2HReqOpcode.RdCurr, "cqid": cqid,
                                                  "addr": line})
        await stream_put(ctx, cache.d2h_req, {"opcode": D2HReqOpcode.ItoMWr, "cqid": 7,
                                              "addr": BASE + 9})
        await stream_put(ctx, cache.d2h_req, {"opcode": D2HReqOpcode.WrCur, "cqid": 8,
                                              "addr": BASE - 1})
        await _collect(ctx, cache, 20, got)
        data = {p.cqid: p for _, kind, p in got if kind == "h2d_data"}
        assert {c: (p.poison, p.data) for c, p in data.items()} == {
            0: (0, words[3]), 1: (0, words[15]), 2: (0, words[0]), 3: (1, 0)}
        rsp = {p.cqid: p for _, kind, p in got if kind == "h2d_rsp"}
        assert rsp[7].opcode == H2DRspOpcode.GO_WritePull
        assert rsp[8].opcode == H2DRspOpcode.GO_ERR_WritePull
        # The pull's data lands in the RAM.
        await stream_put(ctx, cache.d2h_data, {"uqid": rsp[7].uqid, "poison": 0, "data": 0xFEED})
        await ctx.tick()
        assert ctx.get(dut.ram.data[9]) == 0xFEED
        assert ctx.get(dut.reads) == 3 and ctx.get(dut.writes) == 1
        assert ctx.get(dut.errors) == 0

    simulate(dut, tb)


def test_an_answer_comes_after_its_delay():
    dut, cache = _model()

    async def tb(ctx):
        ctx.set(dut.enable, 1)
        ctx.set(dut.delay_lo, 12)
        ctx.set(dut.delay_span, 1)
        await stream_put(ctx, cache.d2h_req, {"opcode": D2HReqOpcode.RdShared, "cqid": 2,
                                              "addr": BASE})
        got = []
        await _collect(ctx, cache, 30, got)
        # (The cycle after the request was taken is cycle 0.)
        assert [c for c, _, _ in got] == [12 + PIPELINE]

    simulate(dut, tb)


def test_answers_keep_their_delay_when_the_clock_wraps():
    # A 6-bit clock wraps every 64 cycles: requests at every phase of it.
    dut, cache = _model(time_bits=6)

    async def tb(ctx):
        ctx.set(dut.enable, 1)
        ctx.set(dut.delay_lo, 12)
        ctx.set(dut.delay_span, 1)
        for start in range(0, 140, 7):
            await stream_put(ctx, cache.d2h_req, {"opcode": D2HReqOpcode.RdCurr, "cqid": 3,
                                                  "addr": BASE})
            got = []
            await _collect(ctx, cache, 20, got)
            assert [c for c, _, _ in got] == [12 + PIPELINE], start
            for _ in range(start % 5):
                await ctx.tick()

    simulate(dut, tb)


def test_protocol_errors_are_counted():
    dut, cache = _model()

    async def tb(ctx):
        ctx.set(dut.enable, 1)
        ctx.set(dut.delay_lo, 40)
        ctx.set(dut.delay_span, 1)
        # A CQID reused while outstanding, one out of range, data never pulled.
        for cqid in (1, 1, CFG.cache_ids):
            await stream_put(ctx, cache.d2h_req, {"opcode": D2HReqOpcode.RdCurr, "cqid": cqid,
                                                  "addr": BASE})
        await stream_put(ctx, cache.d2h_data, {"uqid": 5, "poison": 0, "data": 1})
        await ctx.tick()
        assert ctx.get(dut.errors) == 3
        # A power failure drops the request in flight, and keeps the count.
        ctx.set(dut.power_fail, 1)
        await ctx.tick()
        ctx.set(dut.power_fail, 0)
        got = []
        await _collect(ctx, cache, 60, got)
        assert got == [] and ctx.get(dut.errors) == 3

    simulate(dut, tb)


def test_every_write_of_a_full_set_of_cqids_is_pulled_and_lands():
    """As many writes outstanding as the device has CQIDs (128: more than the model's
    fewest pull entries), all answered before any data comes: each pull names its own
    UQID and every line lands where its request said."""
    cfg = PRESETS["tiny"].replace(cache_ids=128)
    n = cfg.cache_ids
    dut = HostMemoryModel(cfg, base=BASE, lines=n)
    cache = dut.cache

    async def tb(ctx):
        ctx.set(dut.enable, 1)
        ctx.set(dut.delay_lo, 2)
        ctx.set(dut.delay_span, 1)
        for cqid in range(n):
            await stream_put(ctx, cache.d2h_req, {"opcode": D2HReqOpcode.ItoMWr, "cqid": cqid,
                                                  "addr": BASE + n - 1 - cqid})
        got = []
        await _collect(ctx, cache, 2 * n + 20, got)
        pulls = {p.cqid: p.uqid for _, kind, p in got if kind == "h2d_rsp"}
        assert len(pulls) == n and len(set(pulls.values())) == n
        for cqid, uqid in pulls.items():
            await stream_put(ctx, cache.d2h_data, {"uqid": uqid, "poison": 0, "data": cqid + 1})
        await ctx.tick()
        assert [ctx.get(dut.ram.data[n - 1 - cqid]) for cqid in range(n)] == \
            [cqid + 1 for cqid in range(n)]
        assert ctx.get(dut.writes) == n and ctx.get(dut.errors) == 0

    simulate(dut, tb)

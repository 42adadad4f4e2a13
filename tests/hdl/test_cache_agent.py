"""CXL.cache agent in amaranth.sim: host messages that name no outstanding transaction."""

import pytest

from trainingcxl.hdl.common.line_port import LineOp
from trainingcxl.hdl.cxl.cache_agent import CacheAgent
from trainingcxl.spec.cxl_messages import D2HReqOpcode, H2DRspOpcode
from trainingcxl.spec.presets import PRESETS
from trainingcxl.sim.amaranth_streams import simulate, stream_get, stream_put


@pytest.mark.parametrize("registered", [False, True])
def test_stray_host_messages_are_dropped_and_counted(registered):
    dut = CacheAgent(PRESETS["tiny"].replace(register_slices=registered), n_ports=2, tag_bits=4)
    cache, port = dut.cache, dut.port1

    async def tb(ctx):
        # Read data and a write pull for CQIDs nothing is outstanding on.
        await stream_put(ctx, cache.h2d_data, {"cqid": 0, "poison": 0, "data": 0xBAD})
        await stream_put(ctx, cache.h2d_rsp, {"opcode": H2DRspOpcode.GO_WritePull, "cqid": 1,
                                              "uqid": 3})
        await stream_put(ctx, cache.h2d_data, {"cqid": 4000, "poison": 0, "data": 0xBAD})
        await ctx.tick().repeat(2)
        assert ctx.get(dut.strays) == 3
        assert not ctx.get(port.rdata.valid) and not ctx.get(cache.d2h_data.valid)
        assert ctx.get(dut.outstanding) == 0

        # A real read on port 1; a write pull naming its (read) CQID is a stray too.
        await stream_put(ctx, port.req, {"op": LineOp.READ, "addr": 0x40, "tag": 5})
        req = await stream_get(ctx, cache.d2h_req)
        assert req.opcode == D2HReqOpcode.RdCurr
        await stream_put(ctx, cache.h2d_rsp, {"opcode": H2DRspOpcode.GO_WritePull,
                                              "cqid": req.cqid, "uqid": 1})
        await ctx.tick().repeat(2)
        assert ctx.get(dut.strays) == 4 and ctx.get(dut.outstanding) == 1
        ctx.set(port.rdata.ready, 1)
        await stream_put(ctx, cache.h2d_data, {"cqid": req.cqid, "poison": 0, "data": 0x1234})
        # The answer was taken as it was offered; registered, it reaches port 1
        # (with its tag and data) in the next cycle, and is counted then.
        assert ctx.get(dut.outstanding) == 0
        if registered:
            answer = ctx.get(port.rdata.payload)
            assert ctx.get(port.rdata.valid) and not ctx.get(dut.port0.rdata.valid)
            assert (answer.tag, answer.data, answer.err) == (5, 0x1234, 0)
            await ctx.tick()
        assert ctx.get(dut.lines_read) == 1
        # The same data again is now a stray: the CQID is idle.
        await stream_put(ctx, cache.h2d_data, {"cqid": req.cqid, "poison": 0, "data": 0x1234})
        await ctx.tick()
        assert ctx.get(dut.strays) == 5 and ctx.get(dut.lines_read) == 1

    simulate(dut, tb)


@pytest.mark.parametrize("registered", [False, True])
def test_unanswered_requests_time_out_and_late_answers_are_dropped(registered):
    cfg = PRESETS["tiny"].replace(cache_timeout=64, register_slices=registered)
    dut = CacheAgent(cfg, n_ports=2, tag_bits=4)
    cache, port = dut.cache, dut.port0

    async def tb(ctx):
        ctx.set(cache.d2h_req.ready, 1)
        await stream_put(ctx, port.req, {"op": LineOp.READ, "addr": 0x40, "tag": 3})
        await stream_put(ctx, port.req, {"op": LineOp.WRITE, "addr": 0x80, "tag": 4, "data": 7})
        ctx.set(port.rdata.ready, 1)
        ctx.set(port.wack.ready, 1)
        got = {}
        for cycle in range(100):
            for name in ("rdata", "wack"):
                s = getattr(port, name)
                if ctx.get(s.valid) and name not in got:
                    got[name] = (cycle, ctx.get(s.payload))
            await ctx.tick()
            if len(got) == 2:
                break
        # Both failed with err between 60 and 64 cycles after they went out.
        assert got["rdata"][1].tag == 3 and got["rdata"][1].err == 1
        assert got["wack"][1].tag == 4 and got["wack"][1].err == 1
        assert 56 <= got["rdata"][0] <= 70 and 56 <= got["wack"][0] <= 70
        assert ctx.get(dut.timeouts) == 2 and ctx.get(dut.lines_read) == 0
        # The timed-out CQIDs stay reserved: late answers are strays, then free them.
        assert ctx.get(dut.outstanding) == 2
        await stream_put(ctx, cache.h2d_data, {"cqid": 0, "poison": 0, "data": 1})
        await stream_put(ctx, cache.h2d_rsp, {"opcode": H2DRspOpcode.GO_WritePull, "cqid": 1,
                                              "uqid": 0})
        await ctx.tick().repeat(2)
        assert ctx.get(dut.strays) == 2 and ctx.get(dut.outstanding) == 0
        assert not ctx.get(cache.d2h_data.valid)
        # A reserved CQID nobody answers is freed by a second timeout.
        await stream_put(ctx, port.req, {"op": LineOp.READ, "addr": 0x40, "tag": 5})
        await ctx.tick().repeat(100)
        assert ctx.get(dut.timeouts) == 3 and ctx.get(dut.outstanding) == 1
        await ctx.tick().repeat(70)
        assert ctx.get(dut.outstanding) == 0 and ctx.get(dut.strays) == 2

    simulate(dut, tb)


@pytest.mark.parametrize("registered", [False, True])
def test_requests_in_flight_hold_distinct_cqids(registered):
    # Requests from both ports at once, the host answering none: every D2H
    # request names a CQID of its own until they run out.
    cfg = PRESETS["tiny"].replace(register_slices=registered)
    dut = CacheAgent(cfg, n_ports=2, tag_bits=4)

    def client(port, base):
        async def send(ctx):
            for k in range(cfg.cache_ids):
                await stream_put(ctx, port.req, {"op": LineOp.READ, "addr": base + k, "tag": k})
        return send

    async def tb(ctx):
        ctx.set(dut.cache.d2h_req.ready, 1)
        cqids = []
        for _ in range(40 * cfg.cache_ids):
            if ctx.get(dut.cache.d2h_req.valid):
                cqids.append(ctx.get(dut.cache.d2h_req.payload.cqid))
            await ctx.tick()
        assert sorted(cqids) == list(range(cfg.cache_ids))
        assert ctx.get(dut.outstanding) == cfg.cache_ids

    simulate(dut, tb, background=[client(dut.port0, 0x100), client(dut.port1, 0x200)])

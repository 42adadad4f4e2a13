"""CXL.cache agent in amaranth.sim: host messages that name no outstanding transaction."""

from trainingcxl.hdl.common.line_port import LineOp
from trainingcxl.hdl.cxl.cache_agent import CacheAgent
from trainingcxl.hdl.cxl.messages import D2HReqOpcode, H2DRspOpcode
from trainingcxl.host.config import PRESETS
from trainingcxl.sim.amaranth_streams import simulate, stream_get, stream_put


def test_stray_host_messages_are_dropped_and_counted():
    dut = CacheAgent(PRESETS["tiny"], n_ports=2, tag_bits=4)
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
        # The answer reached port 1 with its tag (it was taken as it was offered).
        assert ctx.get(dut.outstanding) == 0 and ctx.get(dut.lines_read) == 1
        # The same data again is now a stray: the CQID is idle.
        await stream_put(ctx, cache.h2d_data, {"cqid": req.cqid, "poison": 0, "data": 0x1234})
        await ctx.tick()
        assert ctx.get(dut.strays) == 5 and ctx.get(dut.lines_read) == 1

    simulate(dut, tb)

"""Dispatcher in amaranth.sim: routing, order, and which updates go out checked."""

from amaranth.sim import Simulator

from trainingcxl.hdl.common.descriptor import ErrorCode, Op
from trainingcxl.hdl.dispatch import Dispatcher
from trainingcxl.host.config import PRESETS

LOOKUP = {"op": Op.LOOKUP, "batch": 5, "n_bags": 4, "n_indices": 9,
          "idx_addr": 0x100, "off_addr": 0x200, "vec_addr": 0x300}


def test_updates_after_a_clean_lookup_of_the_same_batch_go_out_checked():
    dut = Dispatcher(PRESETS["tiny"])
    seen = []

    async def through(ctx, inp, out, payload):
        """Offer ``payload`` on ``inp`` with ``out`` ready; return what ``out`` carried."""
        ctx.set(out.ready, 1)
        ctx.set(inp.payload, payload)
        ctx.set(inp.valid, 1)
        for _ in range(100):
            if ctx.get(inp.ready):
                assert ctx.get(out.valid)
                got = ctx.get(out.payload)
                await ctx.tick()
                break
            await ctx.tick()
        else:
            raise AssertionError("not passed on")
        ctx.set(inp.valid, 0)
        ctx.set(out.ready, 0)
        return got

    async def run(ctx, desc, error=ErrorCode.NONE):
        target, done = ((dut.lookup, dut.lookup_done) if desc["op"] == Op.LOOKUP
                        else (dut.update, dut.update_done))
        got = await through(ctx, dut.desc, target, desc)
        assert got.batch == desc["batch"] and got.idx_addr == desc["idx_addr"]
        if desc["op"] == Op.UPDATE:
            seen.append(bool(got.checked))
        got = await through(ctx, done, dut.done, {"batch": desc["batch"], "op": desc["op"],
                                                  "error": error})
        assert (got.batch, got.error) == (desc["batch"], error)

    async def tb(ctx):
        update = {**LOOKUP, "op": Op.UPDATE, "vec_addr": 0x400}
        await run(ctx, LOOKUP)
        await run(ctx, update)                          # same batch: checked
        await run(ctx, update)                          # a second update: not checked
        await run(ctx, LOOKUP)
        await run(ctx, {**update, "idx_addr": 0x140})   # other indices: not checked
        await run(ctx, LOOKUP, ErrorCode.ROW_RANGE)
        await run(ctx, update)                          # the lookup failed: not checked
        # Relaxed order: batch 7's lookup between batch 6's lookup and update.
        six = {**LOOKUP, "batch": 6}
        await run(ctx, six)
        await run(ctx, {**LOOKUP, "batch": 7, "relaxed": 1})
        await run(ctx, {**six, "op": Op.UPDATE})        # still checked
        got = await through(ctx, dut.desc, dut.done, {**LOOKUP, "op": Op.COMMIT})
        assert got.error == ErrorCode.BAD_OP

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    assert seen == [True, False, False, False, True]

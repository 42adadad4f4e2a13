"""Dispatcher in amaranth.sim: routing, order, and which updates go out checked."""

import pytest
from amaranth.sim import Simulator

from trainingcxl.spec.descriptors import ErrorCode, Op
from trainingcxl.hdl.dispatch import Dispatcher
from trainingcxl.spec.presets import PRESETS

LOOKUP = {"op": Op.LOOKUP, "batch": 5, "n_bags": 4, "n_indices": 9,
          "idx_addr": 0x100, "off_addr": 0x200, "vec_addr": 0x300}

#: Both ways: with ``register_slices`` (the boards) the dispatcher's compares are
#: registered and a descriptor waits a cycle at the head.
REGISTERED = pytest.mark.parametrize("registered", [False, True])


def tiny(registered):
    return PRESETS["tiny"].replace(register_slices=registered)


@REGISTERED
def test_updates_after_a_clean_lookup_of_the_same_batch_go_out_checked(registered):
    dut = Dispatcher(tiny(registered))
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
        got = await through(ctx, dut.desc, dut.done, {**LOOKUP, "op": Op.NOP})
        assert got.error == ErrorCode.BAD_OP
        for op in (Op.COMMIT, Op.SNAPSHOT_MLP, Op.RECOVER):
            got = await through(ctx, dut.desc, dut.ckpt, {**LOOKUP, "op": op})
            assert got.op == op
            await through(ctx, dut.ckpt_done, dut.done, {"batch": 5, "op": op, "error": 0})

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    assert seen == [True, False, False, False, True]


@REGISTERED
def test_while_logging_updates_need_logged_rows_and_wait_for_the_log(registered):
    dut = Dispatcher(tiny(registered))
    update = {**LOOKUP, "op": Op.UPDATE, "vec_addr": 0x400}

    async def offer(ctx, desc, out, cycles=20):
        """Offer ``desc``; the number of cycles until it was taken, or None."""
        ctx.set(out.ready, 1)
        ctx.set(dut.done.ready, 1)
        ctx.set(dut.desc.payload, desc)
        ctx.set(dut.desc.valid, 1)
        for k in range(cycles):
            if ctx.get(dut.desc.ready):
                result = (k, ctx.get(out.valid), ctx.get(dut.done.valid),
                          ctx.get(dut.done.payload.error))
                await ctx.tick()
                ctx.set(dut.desc.valid, 0)
                return result
            await ctx.tick()
        ctx.set(dut.desc.valid, 0)
        return None

    async def complete(ctx, source, desc):
        ctx.set(source.payload, {"batch": desc["batch"], "op": desc["op"], "error": 0})
        ctx.set(source.valid, 1)
        await ctx.tick()
        ctx.set(source.valid, 0)
        await ctx.tick()

    async def tb(ctx):
        ctx.set(dut.logging, 1)
        ctx.set(dut.log_drained, 1)
        # No lookup of this batch: refused, nothing reaches the update engine.
        _, to_engine, done, error = await offer(ctx, update, dut.update)
        assert not to_engine and done and error == ErrorCode.NOT_LOGGED
        # The lookup is held while the snapshot lags too far.
        ctx.set(dut.hold_lookup, 1)
        assert await offer(ctx, LOOKUP, dut.lookup) is None
        assert ctx.get(dut.stall_cycles) >= 19
        ctx.set(dut.hold_lookup, 0)
        assert (await offer(ctx, LOOKUP, dut.lookup))[1]
        await complete(ctx, dut.lookup_done, LOOKUP)
        # Logged, but the records are not yet persistent: the update waits.
        ctx.set(dut.log_drained, 0)
        assert await offer(ctx, update, dut.update) is None
        ctx.set(dut.log_drained, 1)
        assert (await offer(ctx, update, dut.update))[1]
        await complete(ctx, dut.update_done, update)
        # A relaxed lookup logs its deferred rows in FINISH: no update before it.
        relaxed = {**LOOKUP, "batch": 7, "relaxed": 1}
        assert (await offer(ctx, relaxed, dut.lookup))[1]
        await complete(ctx, dut.lookup_done, relaxed)
        _, to_engine, done, error = await offer(ctx, {**update, "batch": 7}, dut.update)
        assert not to_engine and error == ErrorCode.NOT_LOGGED
        assert (await offer(ctx, {**relaxed, "op": Op.FINISH}, dut.lookup))[1]
        await complete(ctx, dut.lookup_done, {**relaxed, "op": Op.FINISH})
        assert (await offer(ctx, {**update, "batch": 7}, dut.update))[1]

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()


@REGISTERED
def test_coalesced_and_nolog_updates(registered):
    """A coalesced UPDATE needs a clean logged LOOKUP of its batch but not its arrays,
    and goes out unchecked; a ``nolog`` LOOKUP logs nothing, so it covers no update."""
    dut = Dispatcher(tiny(registered))
    update = {**LOOKUP, "op": Op.UPDATE, "vec_addr": 0x400}
    coalesced = {**update, "coalesced": 1, "n_bags": 3, "n_indices": 2, "idx_addr": 0x900}

    async def offer(ctx, desc, out):
        ctx.set(out.ready, 1)
        ctx.set(dut.done.ready, 1)
        ctx.set(dut.desc.payload, desc)
        ctx.set(dut.desc.valid, 1)
        for _ in range(10):
            if ctx.get(dut.desc.ready):
                result = (ctx.get(out.valid), ctx.get(dut.done.payload.error),
                          ctx.get(dut.update.payload.checked))
                await ctx.tick()
                ctx.set(dut.desc.valid, 0)
                return result
            await ctx.tick()
        raise AssertionError("descriptor not taken")

    async def complete(ctx, desc):
        ctx.set(dut.lookup_done.payload, {"batch": desc["batch"], "op": desc["op"], "error": 0})
        ctx.set(dut.lookup_done.valid, 1)
        await ctx.tick()
        ctx.set(dut.lookup_done.valid, 0)
        await ctx.tick()

    async def tb(ctx):
        ctx.set(dut.logging, 1)
        ctx.set(dut.log_drained, 1)
        await offer(ctx, {**LOOKUP, "nolog": 1}, dut.lookup)
        await complete(ctx, LOOKUP)
        to_engine, error, _ = await offer(ctx, coalesced, dut.update)
        assert not to_engine and error == ErrorCode.NOT_LOGGED
        await offer(ctx, LOOKUP, dut.lookup)
        await complete(ctx, LOOKUP)
        wrong_batch = await offer(ctx, {**coalesced, "batch": LOOKUP["batch"] + 2}, dut.update)
        assert not wrong_batch[0] and wrong_batch[1] == ErrorCode.NOT_LOGGED
        to_engine, _, checked = await offer(ctx, coalesced, dut.update)
        assert to_engine and not checked
        await complete_update(ctx, coalesced)
        # A batch's coalesced update may come in several descriptors ...
        assert (await offer(ctx, coalesced, dut.update))[0]
        await complete_update(ctx, coalesced)
        # ... but a plain UPDATE uses its LOOKUP up.
        assert (await offer(ctx, update, dut.update))[0]
        await complete_update(ctx, update)
        to_engine, error, _ = await offer(ctx, update, dut.update)
        assert not to_engine and error == ErrorCode.NOT_LOGGED

    async def complete_update(ctx, desc):
        ctx.set(dut.update_done.payload, {"batch": desc["batch"], "op": desc["op"], "error": 0})
        ctx.set(dut.update_done.valid, 1)
        await ctx.tick()
        ctx.set(dut.update_done.valid, 0)
        await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()


def handed_out_or_refused(dut, steps):
    """Offer each ``(inputs, descriptor)`` of ``steps`` with ``inputs`` set; a LOOKUP
    handed out completes cleanly at once. Returns per step ``(to the lookup engine,
    the refusal's error or False)``."""
    outcomes = []

    async def tb(ctx):
        ctx.set(dut.lookup.ready, 1)
        ctx.set(dut.done.ready, 1)
        for inputs, desc in steps:
            for name, value in inputs.items():
                ctx.set(getattr(dut, name), value)
            ctx.set(dut.desc.payload, desc)
            ctx.set(dut.desc.valid, 1)
            while not ctx.get(dut.desc.ready):
                await ctx.tick()
            outcomes.append((ctx.get(dut.lookup.valid), ctx.get(dut.done.valid) and
                             ErrorCode(ctx.get(dut.done.payload.error))))
            await ctx.tick()
            ctx.set(dut.desc.valid, 0)
            if outcomes[-1][0]:
                ctx.set(dut.lookup_done.payload, {"batch": desc["batch"], "op": desc["op"],
                                                  "error": 0})
                ctx.set(dut.lookup_done.valid, 1)
                await ctx.tick()
                ctx.set(dut.lookup_done.valid, 0)
                await ctx.tick()
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    return outcomes


def test_a_logged_lookup_with_more_indices_than_ring_slots_goes_out():
    """The dispatcher does not count indices: with a ring of two groups (12 records), a
    logged LOOKUP of 13 indices may name fewer distinct rows. Whether they fit is the
    undo logger's to find (``LOG_TOO_SMALL`` from the lookup engine, tests/hdl/test_lookup.py)."""
    from trainingcxl.spec.config import Config
    cfg = Config(tables=(40, 40), log_lines=2 * PRESETS["tiny"].group_lines)
    assert cfg.log_groups == 2
    logging = {"logging": 1, "log_drained": 1}
    outcomes = handed_out_or_refused(Dispatcher(cfg), [
        (logging, {**LOOKUP, "n_indices": 13}),         # logged
        ({}, {**LOOKUP, "n_indices": 8}),
    ])
    assert outcomes == [(1, False), (1, False)]


@REGISTERED
def test_while_logging_a_batch_at_or_before_the_newest_commit_is_refused(registered):
    """Its undo records would be reclaimed at once: its update could not be rolled back."""
    update = {**LOOKUP, "op": Op.UPDATE}
    committed = {"logging": 1, "log_drained": 1, "committed": 5, "committed_valid": 1}
    outcomes = handed_out_or_refused(Dispatcher(tiny(registered)), [
        (committed, LOOKUP),                            # batch 5, committed
        ({}, {**LOOKUP, "batch": 2}),
        ({}, update),
        ({}, {**LOOKUP, "op": Op.FINISH}),
        ({}, {**LOOKUP, "batch": 6}),                   # the next batch
        ({"committed_valid": 0}, LOOKUP),               # nothing committed yet
        ({"committed_valid": 1, "logging": 0}, LOOKUP),  # not logging
    ])
    assert outcomes == [(0, ErrorCode.BAD_BATCH)] * 4 + [(1, False)] * 3

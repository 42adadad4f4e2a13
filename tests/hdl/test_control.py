"""Control window in amaranth.sim: registers, doorbell, errors, interrupt."""

import dataclasses

import pytest
from amaranth.sim import Simulator

from trainingcxl.spec.descriptors import ErrorCode, Op
from trainingcxl.hdl.control import ControlWindow
from trainingcxl.spec.registers import DEVICE_ID, REG, Reg
from trainingcxl.spec.config import Config, LinkTiming
from trainingcxl.spec.presets import PRESETS
from trainingcxl.sim.amaranth_streams import stream_get, stream_put

CFG = Config(tables=(8, 8), desc_depth=2)


async def access(ctx, dut, reg, value=None):
    await stream_put(ctx, dut.bus.req, {"write": value is not None, "addr": reg, "data": value or 0})
    rsp = await stream_get(ctx, dut.bus.rsp)
    return rsp.data, rsp.err


def run(tb, config=CFG, **kwargs):
    dut = ControlWindow(config, **kwargs)
    sim = Simulator(dut)
    sim.add_clock(1e-8)

    async def bench(ctx):
        await tb(ctx, dut)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("registered", [False, True])
def test_identity_staging_and_unknown_registers(registered):
    """Registered (boards), a read's response leaves a cycle later, with the same value."""
    async def tb(ctx, dut):
        assert await access(ctx, dut, Reg.ID) == (DEVICE_ID, 0)
        await access(ctx, dut, Reg.DESC_IDX, 0x4000)
        assert await access(ctx, dut, Reg.DESC_IDX) == (0x4000, 0)
        assert (await access(ctx, dut, 0xEE))[1] == 1
        assert (await access(ctx, dut, 0xEE, 5))[1] == 1
        await access(ctx, dut, Reg.ID, 5)                      # read-only: ignored
        assert await access(ctx, dut, Reg.ID) == (DEVICE_ID, 0)
    run(tb, CFG.replace(register_slices=registered))


def device_read_groups(config):
    """The read groups a device built from ``config`` gives its window, from its blocks."""
    from trainingcxl.hdl.checkpoint.engine import CheckpointEngine
    from trainingcxl.hdl.checkpoint.logger import UndoLogger
    from trainingcxl.hdl.compute.lookup import LookupEngine
    from trainingcxl.hdl.compute.update import UpdateEngine
    from trainingcxl.hdl.cxl.cache_agent import CacheAgent
    from trainingcxl.hdl.cxl.link import CxlLink
    from trainingcxl.hdl.cxl.mem_target import CxlMemTarget
    from trainingcxl.hdl.dispatch import Dispatcher
    from trainingcxl.hdl.pmem.controller import PmemController
    from trainingcxl.hdl.top import read_groups
    blocks = {"lookup": LookupEngine(config),
              # With a media port (and so no energy-backed buffer): every counter there is.
              "pmem": PmemController(config.replace(pmem=dataclasses.replace(
                  config.pmem, buffer_lines=0)), n_ports=1, media_port=True),
              "cache_agent": CacheAgent(config, n_ports=1), "mem_target": CxlMemTarget(config),
              "update": UpdateEngine(config), "ckpt": CheckpointEngine(config),
              "logger": UndoLogger(config), "dispatch": Dispatcher(config), "link": CxlLink(config)}
    for block in blocks.values():
        block._MustUse__silence = True      # built for their declarations only
    return read_groups(blocks)


def test_every_register_the_window_shows_has_one_source():
    """With every block, the blocks' declared counters are exactly the window's inputs."""
    regs = [reg for group in device_read_groups(CFG) for reg in group]
    assert sorted(regs) == sorted(ControlWindow.COUNTERS)


def test_counters_read_through_their_groups_registers():
    """The board's read groups: every counter reads back its own value, two cycles
    after the take; a group naming a register the window computes itself is refused."""
    groups = device_read_groups(CFG.replace(register_slices=True))
    regs = [reg for group in groups for reg in group]
    value = {reg: (0x1000 + 37 * k) for k, reg in enumerate(regs)}

    async def tb(ctx, dut):
        for reg in regs:
            ctx.set(dut.counter(reg).as_value(), value[reg])
        for reg in regs:
            assert await access(ctx, dut, reg) == (value[reg], 0), reg
        assert await access(ctx, dut, Reg.ID) == (DEVICE_ID, 0)
        assert (await access(ctx, dut, 0xEE))[1] == 1
    run(tb, CFG.replace(register_slices=True), read_groups=groups)
    with pytest.raises(ValueError, match="not counters: STATUS"):
        ControlWindow.read_groups([("LOOKUP_BUSY", "STATUS")])


@pytest.mark.parametrize("registered", [False, True])
def test_doorbell_queues_checks_and_refuses(registered):
    async def tb(ctx, dut):
        await access(ctx, dut, Reg.DESC_OP, Op.LOOKUP.value | 7 << 32)
        await access(ctx, dut, Reg.DESC_SIZE, 3 | 5 << 32)
        for reg, addr in ((Reg.DESC_IDX, 0x1000), (Reg.DESC_OFF, 0x2000), (Reg.DESC_VEC, 0x3000)):
            await access(ctx, dut, reg, addr)
        await access(ctx, dut, Reg.DOORBELL, 1)
        assert ctx.get(dut.desc.valid)
        d = ctx.get(dut.desc.payload)
        assert (d.op, d.batch, d.n_bags, d.n_indices) == (Op.LOOKUP, 7, 3, 5)
        assert (d.idx_addr, d.off_addr, d.vec_addr) == (0x40, 0x80, 0xC0)
        await access(ctx, dut, Reg.DOORBELL, 1)                # queue of 2 is now full
        await access(ctx, dut, Reg.DOORBELL, 1)
        assert await access(ctx, dut, Reg.SUBMITTED) == (2, 0)
        await access(ctx, dut, Reg.DESC_OFF, 0x2004)           # misaligned
        await access(ctx, dut, Reg.DOORBELL, 1)
        err, _ = await access(ctx, dut, Reg.ERROR)
        assert err & 0xFF == ErrorCode.QUEUE_FULL.value and err >> 32 == 2
        assert (await access(ctx, dut, Reg.STATUS))[0] & 0b11 == 0b11   # busy, queue full
    run(tb, CFG.replace(register_slices=registered))


@pytest.mark.parametrize("registered", [False, True])
def test_completion_error_is_kept_when_cleared_in_the_same_cycle(registered):
    async def tb(ctx, dut):
        # The clear request and an erroneous completion land on the same edge.
        ctx.set(dut.bus.req.payload, {"write": 1, "addr": Reg.ERROR, "data": 0})
        ctx.set(dut.bus.req.valid, 1)
        ctx.set(dut.done.payload, {"batch": 4, "op": Op.LOOKUP, "error": ErrorCode.ROW_RANGE})
        ctx.set(dut.done.valid, 1)
        await ctx.tick()
        ctx.set(dut.bus.req.valid, 0)
        ctx.set(dut.done.valid, 0)
        await stream_get(ctx, dut.bus.rsp)
        err, _ = await access(ctx, dut, Reg.ERROR)
        assert err & 0xFF == ErrorCode.ROW_RANGE.value and err >> 32 == 1
    run(tb, CFG.replace(register_slices=registered))


@pytest.mark.parametrize("registered", [False, True])
def test_irq_is_a_level_until_acknowledged(registered):
    async def tb(ctx, dut):
        assert not ctx.get(dut.irq)
        ctx.set(dut.done.payload, {"batch": 1, "op": Op.LOOKUP, "error": ErrorCode.NONE})
        ctx.set(dut.done.valid, 1)
        await ctx.tick()
        ctx.set(dut.done.valid, 0)
        for _ in range(3):
            await ctx.tick()
            assert ctx.get(dut.irq)
        assert await access(ctx, dut, Reg.COMPLETED) == (1, 0)
        await access(ctx, dut, Reg.IRQ_ACK, 1)
        assert not ctx.get(dut.irq)
        last, _ = await access(ctx, dut, Reg.LAST_DONE)
        assert last == 1 | Op.LOOKUP.value << 32
    run(tb, CFG.replace(register_slices=registered))


@pytest.mark.parametrize("registered", [False, True])
def test_the_gpu_window_refuses_arrays_outside_it(registered):
    async def stage(ctx, dut, op, n_bags, n_indices, idx, off, vec):
        await access(ctx, dut, Reg.DESC_OP, op.value | 1 << 32)
        await access(ctx, dut, Reg.DESC_SIZE, n_bags | n_indices << 32)
        for reg, addr in ((Reg.DESC_IDX, idx), (Reg.DESC_OFF, off), (Reg.DESC_VEC, vec)):
            await access(ctx, dut, reg, addr)

    async def ring(ctx, dut):
        await access(ctx, dut, Reg.ERROR, 0)
        before = (await access(ctx, dut, Reg.SUBMITTED))[0]
        await access(ctx, dut, Reg.DOORBELL, 1)
        queued = (await access(ctx, dut, Reg.SUBMITTED))[0] - before
        error = ErrorCode((await access(ctx, dut, Reg.ERROR))[0] & 0xFF)
        while ctx.get(dut.desc.valid):                          # empty the queue again
            await stream_get(ctx, dut.desc)
        return queued, error

    async def tb(ctx, dut):
        # After a reset the window is all host memory below device memory.
        assert await access(ctx, dut, Reg.GPU_BASE) == (0, 0)
        assert await access(ctx, dut, Reg.GPU_LIMIT) == (CFG.hdm_base * 64, 0)
        base, limit = 0x10000, 0x20000                         # 1024 lines
        await access(ctx, dut, Reg.GPU_BASE, base)
        await access(ctx, dut, Reg.GPU_LIMIT, limit)
        lpr = CFG.lines_per_row
        # 32 indices (2 lines), 4 bags (1 line of 5 offsets), 4 * lpr vector lines,
        # each array ending exactly at the limit: accepted.
        end_vec = limit - 4 * lpr * 64
        await stage(ctx, dut, Op.LOOKUP, 4, 32, limit - 128, limit - 64, end_vec)
        assert await ring(ctx, dut) == (1, ErrorCode.NONE)
        for idx, off, vec in ((limit - 64, base, base),         # indices run one line past
                              (base, limit, base),              # offsets start at the limit
                              (base, base, end_vec + 64),       # vectors run past
                              (base - 64, base, base)):         # indices start below
            await stage(ctx, dut, Op.LOOKUP, 4, 32, idx, off, vec)
            assert await ring(ctx, dut) == (0, ErrorCode.OUT_OF_WINDOW), (idx, off, vec)
            await stage(ctx, dut, Op.UPDATE, 4, 32, idx, off, vec)
            assert await ring(ctx, dut) == (0, ErrorCode.OUT_OF_WINDOW), (idx, off, vec)
        # FINISH names only the vectors; COMMIT names nothing.
        await stage(ctx, dut, Op.FINISH, 4, 0, 0, 0, base)
        assert await ring(ctx, dut) == (1, ErrorCode.NONE)
        await stage(ctx, dut, Op.FINISH, 4, 0, base, base, end_vec + 64)
        assert await ring(ctx, dut) == (0, ErrorCode.OUT_OF_WINDOW)
        await stage(ctx, dut, Op.COMMIT, 0, 0, 0, 0, 0)
        assert await ring(ctx, dut) == (1, ErrorCode.NONE)
        # SNAPSHOT_MLP names the MLP copy.
        await access(ctx, dut, Reg.MLP_ADDR, limit - 640)
        await access(ctx, dut, Reg.MLP_LINES, 10)
        await stage(ctx, dut, Op.SNAPSHOT_MLP, 0, 0, 0, 0, 0)
        assert await ring(ctx, dut) == (1, ErrorCode.NONE)
        await access(ctx, dut, Reg.MLP_LINES, 11)
        await stage(ctx, dut, Op.SNAPSHOT_MLP, 0, 0, 0, 0, 0)
        assert await ring(ctx, dut) == (0, ErrorCode.OUT_OF_WINDOW)
    run(tb, CFG.replace(register_slices=registered))


@pytest.mark.parametrize("registered", [False, True])
def test_a_doorbell_right_after_the_last_write_sees_it(registered):
    """The window check of a staged descriptor is registered (in three steps on boards):
    a doorbell on the heels of the write that moves an array out of the window, or
    back in, must still be judged on the array as written."""
    async def tb(ctx, dut):
        base, limit = 0x10000, 0x20000
        await access(ctx, dut, Reg.GPU_BASE, base)
        await access(ctx, dut, Reg.GPU_LIMIT, limit)
        await access(ctx, dut, Reg.DESC_OP, Op.FINISH.value | 1 << 32)
        await access(ctx, dut, Reg.DESC_SIZE, 4)
        # Pauses before the write: it meets the checker at each of its turns.
        for pause in range(8):
            for vec, want in ((limit, ErrorCode.OUT_OF_WINDOW), (base, ErrorCode.NONE)):
                for _ in range(pause):
                    await ctx.tick()
                await access(ctx, dut, Reg.DESC_VEC, vec)
                await access(ctx, dut, Reg.DOORBELL, 1)
                error = ErrorCode((await access(ctx, dut, Reg.ERROR))[0] & 0xFF)
                assert error == want, (hex(vec), pause)
                await access(ctx, dut, Reg.ERROR, 0)
                while ctx.get(dut.desc.valid):                  # empty the queue again
                    await stream_get(ctx, dut.desc)
    run(tb, CFG.replace(register_slices=registered))


def test_without_the_window_check_its_registers_are_absent():
    async def tb(ctx, dut):
        assert (await access(ctx, dut, Reg.GPU_LIMIT, 0x40))[1] == 1
        assert (await access(ctx, dut, Reg.GPU_BASE))[1] == 1
        await access(ctx, dut, Reg.DESC_OP, Op.LOOKUP.value)
        await access(ctx, dut, Reg.DESC_SIZE, 4 | 32 << 32)
        await access(ctx, dut, Reg.DESC_VEC, CFG.hdm_base * 64)    # device memory
        await access(ctx, dut, Reg.DOORBELL, 1)
        assert ctx.get(dut.desc.valid)
    run(tb, CFG.replace(gpu_window=False))


def test_link_latency_resets_to_the_configured_latency():
    cfg = PRESETS["tiny"].replace(link=LinkTiming(latency=37))
    dut = ControlWindow(cfg)

    async def bench(ctx):
        await ctx.tick()
        assert ctx.get(dut.link_latency.as_value()) == REG.LINK_LATENCY.encode(mem=37, cache=37)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()

"""CXL link model in amaranth.sim: latency, order, shared rate, no head-of-line blocking."""

import random

import pytest
from amaranth import *
from amaranth.back import verilog
from amaranth.hdl import ResetInserter
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from trainingcxl.hdl.cxl.link import LATENCY_BITS, MIN_LATENCY, CxlLink, LinkDirection, link_depth
from trainingcxl.spec.cxl_messages import (D2HReqOpcode, H2DRspOpcode, M2SReqOpcode, M2SRwDOpcode,
                                           S2MDrsOpcode)
from trainingcxl.hdl.cxl.channels import CxlCacheSignature, CxlMemSignature
from trainingcxl.spec.config import Config, LinkTiming
from trainingcxl.spec.descriptors import ErrorCode, Op
from trainingcxl.spec.presets import PRESETS
from trainingcxl.spec.registers import REG, Reg
from trainingcxl.hdl.top import Device
from trainingcxl.sim.amaranth_host import words_to_lines
from trainingcxl.sim.amaranth_streams import simulate as run, stream_get, stream_put


class Msg(data.Struct):
    chan: 2
    seq: 16
    val: 24




def direction(n=1, *, depth=8, rate=(1, 1), data_channels=()):
    return LinkDirection([Msg] * n, depth=depth, rate=rate, data_channels=data_channels)


def msg(chan, seq, val=0):
    return {"chan": chan, "seq": seq, "val": val}


async def put(ctx, stream, payload, *, timeout=10_000):
    """Like ``stream_put``, but reads ``ready`` at the clock edge: the link's
    input ``ready`` depends on the other channels' ``valid``, which other
    testbenches may still change in the same cycle."""
    ctx.set(stream.valid, 1)
    ctx.set(stream.payload, payload)
    for _ in range(timeout):
        _, _, ready = await ctx.tick().sample(stream.ready)
        if ready:
            ctx.set(stream.valid, 0)
            return
    raise AssertionError(f"put: not taken in {timeout} cycles")


class Clock:
    """Counts cycles for a testbench that ticks only through it."""

    def __init__(self, ctx):
        self.ctx, self.now = ctx, 0

    async def tick(self):
        await self.ctx.tick()
        self.now += 1


@pytest.mark.parametrize("latency", [0, 1, 2, 3, 7, 20])
def test_a_message_is_offered_exactly_max_latency_2_cycles_after_it_entered(latency):
    dut = direction(depth=32)
    seen = {}

    async def tb(ctx):
        clk = Clock(ctx)
        ctx.set(dut.latency, [latency])
        ctx.set(dut.o0.ready, 1)
        ctx.set(dut.i0.payload, msg(0, 1))
        ctx.set(dut.i0.valid, 1)
        assert ctx.get(dut.i0.ready)
        t_in = clk.now
        await clk.tick()
        ctx.set(dut.i0.valid, 0)
        while not ctx.get(dut.o0.valid):
            assert clk.now < 100
            await clk.tick()
        seen["out"] = clk.now - t_in
        assert ctx.get(dut.o0.payload.seq) == 1

    run(dut, tb)
    assert seen["out"] == max(latency, MIN_LATENCY)


def test_back_to_back_messages_each_take_exactly_the_latency_and_wait_for_ready():
    latency, n = 6, 24
    dut = direction(depth=32)
    ins, outs = [], []

    async def sender(ctx):
        clk = Clock(ctx)
        ctx.set(dut.latency, [latency])
        for s in range(n):
            ctx.set(dut.i0.payload, msg(0, s))
            ctx.set(dut.i0.valid, 1)
            while not ctx.get(dut.i0.ready):
                await clk.tick()
            ins.append(clk.now)
            await clk.tick()
        ctx.set(dut.i0.valid, 0)

    async def receiver(ctx):
        clk = Clock(ctx)
        while len(outs) < n:
            # The receiver is away for a while in the middle: messages wait.
            ready = not (10 <= clk.now < 20)
            ctx.set(dut.o0.ready, ready)
            if ctx.get(dut.o0.valid) and ready:
                outs.append((clk.now, ctx.get(dut.o0.payload.seq)))
            await clk.tick()

    run(dut, sender, receiver)
    assert [s for _, s in outs] == list(range(n))
    assert ins == list(range(n))                    # one per cycle at rate 1/1
    # Each leaves at its due cycle, or as soon after as the receiver is back.
    expect, prev = [], -1
    for t_in in ins:
        t = max(t_in + latency, prev + 1)
        while 10 <= t < 20:
            t += 1
        expect.append(t)
        prev = t
    assert [t for t, _ in outs] == expect


async def _watch_output(ctx, dut, k, got, rng, *, n, p_ready):
    """Random ``ready`` on ``o{k}``; checks the stream rules at every clock
    edge and collects the messages."""
    o = dut.outputs[k]
    held = None                                    # payload offered and not taken at the last edge
    for _ in range(100_000):
        if len(got) >= n:
            return
        # valid must not depend on ready within the cycle.
        ctx.set(o.ready, 0)
        idle = ctx.get(o.valid)
        ctx.set(o.ready, rng.random() < p_ready)
        assert ctx.get(o.valid) == idle, f"o{k}: valid follows ready"
        _, _, valid, ready, payload = await ctx.tick().sample(o.valid, o.ready, o.payload)
        if held is not None:
            assert valid, f"o{k}: valid dropped before the transfer"
            assert payload == held, f"o{k}: payload changed while waiting"
        if valid and ready:
            got.append((payload.chan, payload.seq, payload.val))
        held = payload if valid and not ready else None
    raise AssertionError(f"o{k}: only {len(got)} of {n} messages arrived")


def test_random_traffic_keeps_order_payload_and_the_stream_rules():
    n_ch, n = 3, 60
    dut = direction(n_ch, depth=8, rate=(2, 3))
    rng = random.Random(5)
    sent = [[msg(k, s, rng.getrandbits(24)) for s in range(n)] for k in range(n_ch)]
    got = [[] for _ in range(n_ch)]

    def sender(k):
        async def tb(ctx):
            r = random.Random(100 + k)
            for m in sent[k]:
                for _ in range(r.choice([0, 0, 0, 1, 3])):
                    await ctx.tick()
                await put(ctx, dut.inputs[k], m)
        return tb

    def receiver(k):
        async def tb(ctx):
            await _watch_output(ctx, dut, k, got[k], random.Random(200 + k), n=n, p_ready=0.4)
        return tb

    async def latency_changer(ctx):
        # Changing latencies at run time must not break the rules or the order.
        r = random.Random(9)
        while True:
            ctx.set(dut.latency, [r.randrange(0, 9) for _ in range(n_ch)])
            for _ in range(r.randrange(5, 30)):
                await ctx.tick()

    run(dut, *[sender(k) for k in range(n_ch)], *[receiver(k) for k in range(n_ch)],
        background=[latency_changer])
    for k in range(n_ch):
        assert got[k] == [(m["chan"], m["seq"], m["val"]) for m in sent[k]]


def test_rate_is_shared_by_the_channels_and_counters_count():
    n = 40                                          # in total, half on each channel
    dut = direction(2, depth=32, rate=(1, 2), data_channels={1})
    entered = []

    async def tb(ctx):
        clk = Clock(ctx)
        ctx.set(dut.latency, [2, 2])
        ctx.set(dut.o0.ready, 1)
        ctx.set(dut.o1.ready, 1)
        left = [n // 2, n // 2]
        while left != [0, 0]:
            for k in range(2):
                ctx.set(dut.inputs[k].valid, left[k] > 0)
                ctx.set(dut.inputs[k].payload, msg(k, n // 2 - left[k]))
            took = [k for k in range(2) if ctx.get(dut.inputs[k].valid) and ctx.get(dut.inputs[k].ready)]
            assert len(took) <= 1                   # one message per cycle in total
            for k in took:
                entered.append((clk.now, k))
                left[k] -= 1
            await clk.tick()
            assert clk.now < 10 * n
        for k in range(2):
            ctx.set(dut.inputs[k].valid, 0)
        await clk.tick()
        assert ctx.get(dut.messages) == n
        assert ctx.get(dut.data_messages) == n // 2

    run(dut, tb)
    times = [t for t, _ in entered]
    assert times[-1] - times[0] >= 2 * (n - 1)
    assert all(b - a >= 2 for a, b in zip(times, times[1:]))
    # Round-robin: the two channels alternate while both offer.
    assert [k for _, k in entered] == [0, 1] * (n // 2)


def test_a_stalled_channel_does_not_block_the_others():
    depth, n = 4, 30
    dut = direction(2, depth=depth)
    got1 = []
    state = {}

    async def fill_stalled(ctx):
        for s in range(n):
            await put(ctx, dut.i0, msg(0, s))
            state["taken0"] = s + 1

    async def flow(ctx):
        ctx.set(dut.latency, [3, 3])
        ctx.set(dut.o0.ready, 0)                    # channel 0's receiver never takes
        for s in range(n):
            await put(ctx, dut.i1, msg(1, s))
        while len(got1) < n:
            await ctx.tick()
        # Channel 0 took exactly its FIFO's worth and then waited.
        assert state["taken0"] == depth
        assert ctx.get(dut.o0.valid) and ctx.get(dut.o0.payload.seq) == 0
        for s in range(n):
            assert (await stream_get(ctx, dut.o0)).seq == s

    async def drain1(ctx):
        ctx.set(dut.o1.ready, 1)
        while len(got1) < n:
            if ctx.get(dut.o1.valid):
                got1.append(ctx.get(dut.o1.payload.seq))
            await ctx.tick()

    run(dut, flow, drain1, background=[fill_stalled])
    assert got1 == list(range(n))


def test_reset_drops_messages_in_flight():
    link = direction(1, depth=8)
    fail = Signal()
    m = Module()
    m.submodules.link = ResetInserter(fail)(link)

    async def tb(ctx):
        ctx.set(link.latency, [30])
        ctx.set(link.o0.ready, 1)
        for s in range(3):
            await stream_put(ctx, link.i0, msg(0, s))
        assert ctx.get(link.messages) == 3
        ctx.set(fail, 1)
        await ctx.tick()
        ctx.set(fail, 0)
        assert ctx.get(link.messages) == 0
        for _ in range(60):
            assert not ctx.get(link.o0.valid)
            await ctx.tick()
        await stream_put(ctx, link.i0, msg(0, 7))   # the link works again
        assert (await stream_get(ctx, link.o0)).seq == 7

    run(m, tb)


# -- CxlLink -------------------------------------------------------------------------

class _Endpoint(wiring.Component):
    """Stand-in for the device's CXL.mem target and CXL.cache agent: the
    testbench drives and watches its ports."""
    cxl: Out(CxlMemSignature())
    cache: Out(CxlCacheSignature())

    def elaborate(self, platform):
        return Module()


class _Top(wiring.Component):
    """A device top with the link between its ports and the endpoint."""
    cxl_mem: Out(CxlMemSignature())
    cxl_cache: Out(CxlCacheSignature())
    mem_latency: In(LATENCY_BITS)
    cache_latency: In(LATENCY_BITS)

    def __init__(self, config):
        super().__init__()
        self.link = CxlLink(config)
        self.endpoint = _Endpoint()

    def elaborate(self, platform):
        m = Module()
        m.submodules.link = link = self.link
        m.submodules.endpoint = ep = self.endpoint
        wiring.connect(m, wiring.flipped(self.cxl_mem), link.host_mem)
        wiring.connect(m, wiring.flipped(self.cxl_cache), link.host_cache)
        wiring.connect(m, link.dev_mem, ep.cxl)
        wiring.connect(m, link.dev_cache, ep.cache)
        m.d.comb += [link.mem_latency.eq(self.mem_latency), link.cache_latency.eq(self.cache_latency)]
        return m


async def _arrival(ctx, src, dst, payload):
    """Cycles from ``payload``'s handshake on ``src`` to its ``valid`` on ``dst``."""
    ctx.set(dst.ready, 1)
    ctx.set(src.payload, payload)
    ctx.set(src.valid, 1)
    while not ctx.get(src.ready):
        await ctx.tick()
    await ctx.tick()
    ctx.set(src.valid, 0)
    t = 1
    while not ctx.get(dst.valid):
        await ctx.tick()
        t += 1
        assert t < 200
    got = ctx.get(dst.payload)
    await ctx.tick()
    ctx.set(dst.ready, 0)
    return t, got


def test_cxl_link_end_to_end_with_separate_mem_and_cache_latencies():
    cfg = Config(link=LinkTiming(latency=10, rate=(1, 1)))
    top = _Top(cfg)
    link, ep = top.link, top.endpoint
    assert link.depth == link_depth(10, (1, 1)) == 16

    async def tb(ctx):
        ctx.set(top.mem_latency, 5)
        ctx.set(top.cache_latency, 9)
        t, got = await _arrival(ctx, top.cxl_mem.m2s_req, ep.cxl.m2s_req,
                                {"opcode": M2SReqOpcode.MemRd, "tag": 0x1234, "addr": 0xABCDEF})
        assert t == 5 and got.tag == 0x1234 and got.addr == 0xABCDEF and got.opcode == M2SReqOpcode.MemRd
        t, got = await _arrival(ctx, top.cxl_mem.m2s_rwd, ep.cxl.m2s_rwd,
                                {"opcode": M2SRwDOpcode.MemWr, "tag": 3, "addr": 9, "be": -1 & (2**64 - 1),
                                 "data": 2**511 + 5})
        assert t == 5 and got.data == 2**511 + 5
        t, got = await _arrival(ctx, ep.cxl.s2m_drs, top.cxl_mem.s2m_drs,
                                {"opcode": S2MDrsOpcode.MemData, "tag": 0x1234, "data": 77})
        assert t == 5 and got.tag == 0x1234 and got.data == 77
        t, got = await _arrival(ctx, ep.cache.d2h_req, top.cxl_cache.d2h_req,
                                {"opcode": D2HReqOpcode.RdCurr, "cqid": 17, "addr": 0x55})
        assert t == 9 and got.cqid == 17 and got.addr == 0x55 and got.opcode == D2HReqOpcode.RdCurr
        t, got = await _arrival(ctx, top.cxl_cache.h2d_rsp, ep.cache.h2d_rsp,
                                {"opcode": H2DRspOpcode.GO_WritePull, "cqid": 4, "uqid": 8})
        assert t == 9 and got.uqid == 8
        t, got = await _arrival(ctx, ep.cache.d2h_data, top.cxl_cache.d2h_data, {"uqid": 8, "data": 99})
        assert t == 9 and got.data == 99
        assert ctx.get(link.to_device) == 3 and ctx.get(link.to_device_data) == 1
        assert ctx.get(link.to_host) == 3 and ctx.get(link.to_host_data) == 2

    run(top, tb)


def test_link_depth():
    assert link_depth(0, (1, 1)) == 8               # MIN_LATENCY + 4 = 6 -> 8
    assert link_depth(10, (1, 1)) == 16
    assert link_depth(10, (1, 10)) == 8
    assert link_depth(4095, (1, 1)) == 8192


def test_cxl_link_latencies_reset_to_the_configured_one_and_it_converts_to_verilog():
    link = CxlLink(Config(link=LinkTiming(latency=37, rate=(1, 3))))
    assert link.mem_latency.init == link.cache_latency.init == 37
    assert link.depth == 32                         # ceil(37 / 3) + 4 = 17 -> 32
    text = verilog.convert(link, name="cxl_link")
    assert "module cxl_link" in text


def test_the_link_counts_the_data_lines_that_left_it_towards_the_host():
    """``to_host_data_left`` follows ``to_host_data`` by the link's latency: a D2H Data
    message counts as entered at once and as left when the host takes it."""
    top = _Top(Config(link=LinkTiming(latency=20, rate=(1, 1))))
    link, ep = top.link, top.endpoint

    async def tb(ctx):
        ctx.set(top.mem_latency, 20)
        ctx.set(top.cache_latency, 20)
        await ctx.tick()
        ctx.set(ep.cache.d2h_data.payload, {"uqid": 8, "data": 99})
        ctx.set(ep.cache.d2h_data.valid, 1)
        await ctx.tick()
        ctx.set(ep.cache.d2h_data.valid, 0)
        waited = 0
        while not ctx.get(top.cxl_cache.d2h_data.valid):
            assert (ctx.get(link.to_host_data), ctx.get(link.to_host_data_left)) == (1, 0)
            waited += 1
            await ctx.tick()
        assert waited == 19
        ctx.set(top.cxl_cache.d2h_data.ready, 1)
        await ctx.tick()
        assert (ctx.get(link.to_host_data), ctx.get(link.to_host_data_left)) == (1, 1)

    run(top, tb)


@pytest.mark.parametrize("latency", [16, 40])
def test_a_completion_waits_for_the_pooled_vectors_crossing_the_link(latency):
    """A device whose CXL.cache link takes ``latency`` cycles: when a LOOKUP's completion
    shows in the control window (``irq``), every pooled vector it wrote is in host memory.

    The agent acknowledges a write once its D2H Data enters the link, which carries it
    ``latency`` cycles more, while the control window is not behind the link model:
    the completion used to reach the host first, and a host reading the results at
    once (the driver does, about 16 cycles after) missed the last vectors."""
    cfg = PRESETS["tiny"].replace(link=LinkTiming(latency=latency))
    dut = Device(cfg)
    cache = dut.cxl_cache
    OFF, IDX, VEC = 0x100, 0x140, 0x180        # host lines
    offsets = [0, 2, 3, 5, 8, 9, 11, 12, 14]   # 8 bags, tables 0 and 1 in turn
    indices = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]
    host = {OFF + k: v for k, v in enumerate(words_to_lines(offsets))}
    host.update({IDX + k: v for k, v in enumerate(words_to_lines(indices))})
    out_lines = {VEC + k for k in range((len(offsets) - 1) * cfg.lines_per_row)}
    landed = {}                                 # host line -> cycle its data arrived
    clock = [0]

    async def host_model(ctx):
        """Answers each CXL.cache request two cycles after it arrives, in order."""
        reads, pulls, due, uqid = [], {}, [], 0
        ctx.set(cache.d2h_req.ready, 1)
        ctx.set(cache.d2h_data.ready, 1)
        while True:
            for kind in ("h2d_data", "h2d_rsp"):
                queue = [a for a in due if a[1] == kind and a[0] <= clock[0]]
                s = getattr(cache, kind)
                ctx.set(s.valid, bool(queue))
                if queue:
                    ctx.set(s.payload, queue[0][2])
                    if ctx.get(s.ready):
                        due.remove(queue[0])
            if ctx.get(cache.d2h_req.valid):
                r = ctx.get(cache.d2h_req.payload)
                if r.opcode == D2HReqOpcode.RdCurr:
                    due.append((clock[0] + 2, "h2d_data",
                                {"cqid": r.cqid, "poison": 0, "data": host.get(r.addr, 0)}))
                else:
                    assert r.opcode == D2HReqOpcode.ItoMWr
                    pulls[uqid] = r.addr
                    due.append((clock[0] + 2, "h2d_rsp", {"opcode": H2DRspOpcode.GO_WritePull,
                                                          "cqid": r.cqid, "uqid": uqid}))
                    uqid += 1
            if ctx.get(cache.d2h_data.valid):
                d = ctx.get(cache.d2h_data.payload)
                addr = pulls.pop(d.uqid)
                host[addr] = d.data
                landed[addr] = clock[0]
            await ctx.tick()
            clock[0] += 1

    async def access(ctx, reg, value=None):
        await stream_put(ctx, dut.control.req, {"write": value is not None, "addr": reg,
                                                "data": value or 0})
        return (await stream_get(ctx, dut.control.rsp)).data

    async def main(ctx):
        await access(ctx, Reg.DESC_OP, REG.DESC_OP.encode(op=Op.LOOKUP.value, batch=3))
        await access(ctx, Reg.DESC_SIZE, REG.DESC_SIZE.encode(n_bags=len(offsets) - 1,
                                                              n_indices=len(indices)))
        await access(ctx, Reg.DESC_IDX, IDX * 64)
        await access(ctx, Reg.DESC_OFF, OFF * 64)
        await access(ctx, Reg.DESC_VEC, VEC * 64)
        await access(ctx, Reg.DOORBELL, 1)
        for _ in range(5000):
            if ctx.get(dut.irq):
                break
            await ctx.tick()
        seen = clock[0]
        missing = sorted(out_lines - {a for a, t in landed.items() if t < seen})
        assert await access(ctx, Reg.COMPLETED) == 1
        last = REG.LAST_DONE.decode(await access(ctx, Reg.LAST_DONE))
        assert (last["batch"], ErrorCode(last["error"])) == (3, ErrorCode.NONE)
        assert not missing, (f"completion at cycle {seen}, pooled vectors of lines "
                             f"{[hex(a) for a in missing]} still on the link")
        assert set(landed) == out_lines

    run(dut, main, background=[host_model])

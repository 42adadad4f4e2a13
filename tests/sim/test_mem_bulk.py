"""The bulk CXL.mem master (sim/rtl/mem_bulk.py) in amaranth.sim, against a device
model that answers out of order with backpressure: every line of a list read into
or written from the RAMs, never more than IN_FLIGHT requests outstanding, failed
answers counted, the bench's master passed through while it is idle."""

import random

from trainingcxl.spec.cxl_messages import M2SReqOpcode, M2SRwDOpcode, S2MNdrOpcode
from trainingcxl.sim.amaranth_streams import simulate
from trainingcxl.sim.rtl.mem_bulk import IN_FLIGHT, MemBulk

LINES = 256


def _word(addr):
    return (addr * 0x9E3779B97F4A7C15) & ((1 << 512) - 1) | 1


def _device(dut, rng, *, bad=(), seen):
    """A device on ``dut.dev``: takes requests when it likes, answers each after a
    random delay, in any order; ``bad`` addresses fail (CmpErr, poisoned data)."""
    async def run(ctx):
        waiting = []                    # [due cycle, kind, tag, addr, data]
        cycle = 0
        while True:
            req, rwd, ndr, drs = dut.dev.m2s_req, dut.dev.m2s_rwd, dut.dev.s2m_ndr, dut.dev.s2m_drs
            take = rng.random() < 0.7
            ctx.set(req.ready, take)
            ctx.set(rwd.ready, take)
            # Answer one due request, chosen at random among those due.
            due = [w for w in waiting if w[0] <= cycle]
            pick = rng.choice(due) if due else None
            ctx.set(ndr.valid, 0)
            ctx.set(drs.valid, 0)
            if pick and pick[1] == "w":
                ctx.set(ndr.valid, 1)
                ctx.set(ndr.payload, {"opcode": S2MNdrOpcode.CmpErr if pick[3] in bad
                                      else S2MNdrOpcode.Cmp, "tag": pick[2]})
            elif pick:
                ctx.set(drs.valid, 1)
                ctx.set(drs.payload, {"tag": pick[2], "poison": int(pick[3] in bad),
                                      "data": _word(pick[3])})
            for s, kind in ((req, "r"), (rwd, "w")):
                if ctx.get(s.valid) and take:
                    p = ctx.get(s.payload)
                    seen.append((kind, p.opcode, p.tag, p.addr,
                                 p.data if kind == "w" else None, len(waiting)))
                    # Long enough that the master runs out of tags.
                    waiting.append([cycle + rng.randint(2, 300), kind, p.tag, p.addr, None])
            answered = pick and ctx.get(ndr.ready if pick[1] == "w" else drs.ready)
            await ctx.tick()
            if answered:
                waiting.remove(pick)
            cycle += 1
    return run


def _check_flight(seen):
    # Every request was issued with fewer than IN_FLIGHT outstanding, and its tag free.
    assert max(n for *_, n in seen) < IN_FLIGHT


def test_a_list_of_reads_lands_at_its_indices():
    dut = MemBulk(lines=LINES)
    rng = random.Random(1)
    addrs = [rng.randrange(1 << 30) for _ in range(200)]
    dut.addrs.data.init = addrs + [0] * (LINES - len(addrs))
    seen = []

    async def tb(ctx):
        ctx.set(dut.count, len(addrs))
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        assert ctx.get(dut.busy)
        for _ in range(20_000):
            if not ctx.get(dut.busy):
                break
            await ctx.tick()
        assert not ctx.get(dut.busy) and ctx.get(dut.errors) == 0
        assert [ctx.get(dut.data.data[i]) for i in range(len(addrs))] == [_word(a) for a in addrs]
    simulate(dut, tb, background=[_device(dut, rng, seen=seen)])
    assert [s[3] for s in seen] == addrs and {s[1] for s in seen} == {M2SReqOpcode.MemRd}
    _check_flight(seen)


def test_a_list_of_writes_and_its_failures():
    dut = MemBulk(lines=LINES)
    rng = random.Random(2)
    addrs = list(range(1000, 1150))
    words = [rng.getrandbits(512) for _ in addrs]
    dut.addrs.data.init = addrs + [0] * (LINES - len(addrs))
    dut.data.data.init = words + [0] * (LINES - len(words))
    seen = []

    async def tb(ctx):
        ctx.set(dut.write, 1)
        ctx.set(dut.count, len(addrs))
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        for _ in range(20_000):
            if not ctx.get(dut.busy):
                break
            await ctx.tick()
        assert not ctx.get(dut.busy) and ctx.get(dut.errors) == 3
    simulate(dut, tb, background=[_device(dut, rng, bad={1003, 1077, 1149}, seen=seen)])
    assert [(s[3], s[4]) for s in seen] == list(zip(addrs, words))
    assert {s[1] for s in seen} == {M2SRwDOpcode.MemWr}
    _check_flight(seen)


def test_the_bench_master_passes_through_while_idle():
    dut = MemBulk(lines=LINES)

    async def tb(ctx):
        ctx.set(dut.host.m2s_req.valid, 1)
        ctx.set(dut.host.m2s_req.payload, {"opcode": M2SReqOpcode.MemRd, "tag": 9, "addr": 0x1234})
        ctx.set(dut.dev.m2s_req.ready, 1)
        assert ctx.get(dut.dev.m2s_req.valid) and ctx.get(dut.dev.m2s_req.payload.addr) == 0x1234
        assert ctx.get(dut.host.m2s_req.ready)
        ctx.set(dut.dev.s2m_drs.valid, 1)
        ctx.set(dut.dev.s2m_drs.payload, {"tag": 9, "poison": 0, "data": 77})
        ctx.set(dut.host.s2m_drs.ready, 1)
        assert ctx.get(dut.host.s2m_drs.valid) and ctx.get(dut.host.s2m_drs.payload.data) == 77
        assert ctx.get(dut.dev.s2m_drs.ready)
        await ctx.tick()
        ctx.set(dut.host.m2s_req.valid, 0)
        ctx.set(dut.dev.s2m_drs.valid, 0)
        # An empty operation ends at once.
        ctx.set(dut.count, 0)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        assert not ctx.get(dut.busy)
    simulate(dut, tb)

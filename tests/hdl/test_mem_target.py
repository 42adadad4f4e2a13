"""CXL.mem target over the PMEM model, in amaranth.sim."""

import random

import pytest

from amaranth import Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from trainingcxl.hdl.cxl.mem_target import CxlMemTarget, MemError
from trainingcxl.spec.cxl_messages import M2SReqOpcode, M2SRwDOpcode, S2MNdrOpcode
from trainingcxl.hdl.pmem.controller import PmemController
from trainingcxl.spec.config import Config, PmemTiming
from trainingcxl.sim.amaranth_streams import stream_get, stream_put

CFG = Config(tables=(24, 8), log_lines=14, commit_lines=2, snapshot_lines=2,
             # The volatile queue: a write is persistent (and completed) write_latency after.
             pmem=PmemTiming(read_latency=12, write_latency=30, wpq_depth=8, read_depth=16,
                             buffer_lines=0))
FULL = (1 << 64) - 1
#: Without and with the boards' register slices (the decode then registered as a
#: request enters the target).
REGISTERED = pytest.mark.parametrize("registered", [False, True])


class Harness(wiring.Component):
    def __init__(self, cfg):
        self.target = CxlMemTarget(cfg)
        self.pmem = PmemController(cfg, n_ports=1)
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        m.submodules.target = self.target
        m.submodules.pmem = self.pmem
        wiring.connect(m, self.target.pmem, self.pmem.port0)
        return m


def stream_raw(stream):
    """``stream`` with its payload as plain bits (to send opcodes the enums do not name)."""
    class Raw:
        valid, ready, payload = stream.valid, stream.ready, stream.payload.as_value()
    return Raw


def bytemask(be):
    return sum(0xFF << (8 * b) for b in range(64) if (be >> b) & 1)


def run_traffic(ops, *, backpressure=0.0, seed=0, expect_drs=None, registered=False,
                host_owns=False):
    """Send ``ops`` (dicts with ``chan`` 'req' or 'rwd'), return responses by tag, in arrival
    order. ``host_owns``: the host owns the checkpoint regions (the ``pmem`` system)."""
    h = Harness(CFG.replace(register_slices=registered))
    cxl = h.target.cxl
    got = {"ndr": [], "drs": []}
    n_ndr = sum(1 for o in ops if o["chan"] == "rwd" or o.get("opcode") == M2SReqOpcode.MemInv)
    n_drs = len(ops) - n_ndr if expect_drs is None else expect_drs

    async def send(ctx):
        ctx.set(h.target.host_owns_checkpoints, host_owns)
        await ctx.tick().repeat(2)          # the target takes the mode while idle
        for o in ops:
            stream = cxl.m2s_req if o["chan"] == "req" else cxl.m2s_rwd
            if "raw" in o:
                await stream_put(ctx, stream_raw(stream), o["raw"])
            else:
                await stream_put(ctx, stream, {k: v for k, v in o.items() if k != "chan"})

    def collector(name, stream, count):
        async def tb(ctx):
            rng = random.Random(seed + len(name))
            for _ in range(50_000):
                if len(got[name]) == count:
                    return
                ready = rng.random() >= backpressure
                ctx.set(stream.ready, ready)
                if ready and ctx.get(stream.valid):
                    got[name].append(ctx.get(stream.payload))
                await ctx.tick()
            raise AssertionError(f"{name}: {len(got[name])} of {count} responses (hang)")
        return tb

    sim = Simulator(h)
    sim.add_clock(1e-8)
    sim.add_testbench(send)
    sim.add_testbench(collector("ndr", cxl.s2m_ndr, n_ndr))
    sim.add_testbench(collector("drs", cxl.s2m_drs, n_drs))
    sim.run()
    return got, h


def hpa(line):
    return CFG.hdm_base + line


@REGISTERED
def test_random_full_and_partial_writes_then_reads_match_reference(registered):
    rng = random.Random(7)
    ref = [0] * CFG.table_lines
    ops = []
    for tag in range(60):
        line = rng.randrange(CFG.table_lines)
        if rng.random() < 0.3:
            ops.append(dict(chan="req", opcode=M2SReqOpcode.MemRd, tag=tag, addr=hpa(line),
                            expect=ref[line]))
            continue
        data = rng.getrandbits(512)
        partial = rng.random() < 0.5
        be = rng.getrandbits(64) if partial else FULL
        ops.append(dict(chan="rwd", opcode=M2SRwDOpcode.MemWrPtl if partial else M2SRwDOpcode.MemWr,
                        tag=tag, addr=hpa(line), data=data, be=be, poison=0))
        mask = bytemask(be)
        ref[line] = (ref[line] & ~mask) | (data & mask)
    # Read every line at the end.
    for line in range(CFG.table_lines):
        ops.append(dict(chan="req", opcode=M2SReqOpcode.MemRd, tag=1000 + line, addr=hpa(line),
                        expect=ref[line]))
    expect = {o["tag"]: o.pop("expect") for o in ops if "expect" in o}
    got, _ = run_traffic(ops, backpressure=0.3, registered=registered)
    assert all(r.opcode == S2MNdrOpcode.Cmp for r in got["ndr"])
    assert sorted(r.tag for r in got["ndr"]) == sorted(o["tag"] for o in ops if o["chan"] == "rwd")
    assert {r.tag: (r.poison, r.data) for r in got["drs"]} == {t: (0, v) for t, v in expect.items()}


def test_out_of_order_completion_by_tag():
    # A slow write followed by a fast refused read: the refusal overtakes.
    ops = [dict(chan="rwd", opcode=M2SRwDOpcode.MemWr, tag=1, addr=hpa(2), data=5, be=FULL, poison=0),
           dict(chan="req", opcode=M2SReqOpcode.MemRd, tag=2, addr=hpa(CFG.media_lines + 5)),
           dict(chan="req", opcode=M2SReqOpcode.MemRd, tag=3, addr=hpa(2))]
    h = Harness(CFG)
    cxl = h.target.cxl
    events = []

    async def send(ctx):
        for o in ops:
            await stream_put(ctx, cxl.m2s_req if o["chan"] == "req" else cxl.m2s_rwd,
                             {k: v for k, v in o.items() if k != "chan"})

    async def watch(ctx):
        ctx.set(cxl.s2m_ndr.ready, 1)
        ctx.set(cxl.s2m_drs.ready, 1)
        for t in range(500):
            if ctx.get(cxl.s2m_ndr.valid):
                events.append(("ndr", ctx.get(cxl.s2m_ndr.payload.tag)))
            if ctx.get(cxl.s2m_drs.valid):
                p = ctx.get(cxl.s2m_drs.payload)
                events.append(("drs", p.tag, p.poison, p.data))
            await ctx.tick()

    sim = Simulator(h)
    sim.add_clock(1e-8)
    sim.add_testbench(send)
    sim.add_testbench(watch)
    sim.run()
    assert events[0] == ("drs", 2, 1, 0)             # error first, out of request order
    assert events[1] == ("ndr", 1)                  # write persisted
    assert events[2] == ("drs", 3, 0, 5)            # the read waited for the pending write


@REGISTERED
def test_refused_requests_change_nothing_and_are_logged(registered):
    outside = CFG.hdm_base + CFG.media_lines
    protected = CFG.hdm_base + CFG.log_base
    ops = [
        dict(chan="rwd", opcode=M2SRwDOpcode.MemWr, tag=1, addr=protected, data=7, be=FULL, poison=0),
        dict(chan="rwd", opcode=M2SRwDOpcode.MemWr, tag=2, addr=outside, data=7, be=FULL, poison=0),
        dict(chan="rwd", opcode=M2SRwDOpcode.MemWr, tag=3, addr=hpa(4), data=7, be=FULL, poison=1),
        dict(chan="rwd", opcode=M2SRwDOpcode.MemWr, tag=4, addr=CFG.hdm_base - 1, data=7, be=FULL, poison=0),
        dict(chan="req", opcode=M2SReqOpcode.MemRd, tag=5, addr=outside),
        dict(chan="req", opcode=M2SReqOpcode.MemRd, tag=6, addr=protected),    # reads are allowed
        dict(chan="req", opcode=M2SReqOpcode.MemRd, tag=7, addr=hpa(4)),
    ]
    got, h = run_traffic(ops, registered=registered)
    ndr = {r.tag: r.opcode for r in got["ndr"]}
    assert ndr == {1: S2MNdrOpcode.CmpErr, 2: S2MNdrOpcode.CmpErr,
                   3: S2MNdrOpcode.CmpErr, 4: S2MNdrOpcode.CmpErr}
    drs = {r.tag: (r.poison, r.data) for r in got["drs"]}
    assert drs[5][0] == 1
    assert drs[6] == (0, 0) and drs[7] == (0, 0)     # nothing was written


@REGISTERED
def test_a_host_that_owns_the_checkpoint_regions_writes_them(registered):
    protected = CFG.hdm_base + CFG.log_base
    ops = [dict(chan="rwd", opcode=M2SRwDOpcode.MemWr, tag=1, addr=protected, data=7, be=FULL, poison=0),
           dict(chan="req", opcode=M2SReqOpcode.MemRd, tag=2, addr=protected)]
    got, h = run_traffic(ops, registered=registered, host_owns=True)
    assert [(r.tag, r.opcode) for r in got["ndr"]] == [(1, S2MNdrOpcode.Cmp)]
    assert [(r.tag, r.poison, r.data) for r in got["drs"]] == [(2, 0, 7)]


@REGISTERED
def test_speculative_read_is_taken_without_a_response(registered):
    ops = [dict(chan="req", opcode=M2SReqOpcode.MemSpecRd, tag=0, addr=hpa(1)),
           dict(chan="req", opcode=M2SReqOpcode.MemRd, tag=9, addr=hpa(1))]
    got, _ = run_traffic(ops, expect_drs=1, registered=registered)
    assert [r.tag for r in got["drs"]] == [9] and got["ndr"] == []


def test_error_registers():
    outside = CFG.hdm_base + CFG.media_lines + 3
    h = Harness(CFG)
    cxl = h.target.cxl

    async def tb(ctx):
        ctx.set(cxl.s2m_drs.ready, 1)
        await stream_put(ctx, cxl.m2s_req, {"opcode": M2SReqOpcode.MemRd, "tag": 42, "addr": outside})
        await ctx.tick()
        assert ctx.get(h.target.errors) == 1
        assert ctx.get(h.target.last_error) == MemError.UNMAPPED
        assert ctx.get(h.target.last_error_addr) == outside
        assert ctx.get(h.target.last_error_tag) == 42

    sim = Simulator(h)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()


@REGISTERED
def test_a_reused_tag_is_refused_and_the_original_completes(registered):
    ops = [
        dict(chan="rwd", opcode=M2SRwDOpcode.MemWr, tag=8, addr=hpa(2), data=11, be=FULL, poison=0),
        # Tag 8 is outstanding (the write waits 30 cycles in the WPQ): both are refused.
        dict(chan="rwd", opcode=M2SRwDOpcode.MemWr, tag=8, addr=hpa(3), data=22, be=FULL, poison=0),
        dict(chan="req", opcode=M2SReqOpcode.MemRd, tag=8, addr=hpa(2)),
        # Unknown opcodes are refused too, on the channel they came on (raw payloads:
        # the enum has no name for them).
        dict(chan="req", raw=0b0111 | 9 << 4 | hpa(2) << 20),
        dict(chan="rwd", raw=0b0111 | 10 << 4 | hpa(3) << 20 | FULL << 67 | 33 << 131),
        dict(chan="req", opcode=M2SReqOpcode.MemRd, tag=11, addr=hpa(3)),
    ]
    got, h = run_traffic(ops, registered=registered)
    ndr = [(r.tag, r.opcode) for r in got["ndr"]]
    assert ndr[:2] == [(8, S2MNdrOpcode.CmpErr), (10, S2MNdrOpcode.CmpErr)]   # at once
    assert ndr[2:] == [(8, S2MNdrOpcode.Cmp)]                                # the original
    drs = {r.tag: (r.poison, r.data) for r in got["drs"]}
    assert drs[8][0] == 1 and drs[9][0] == 1
    assert drs[11] == (0, 0)                    # the refused write to line 3 changed nothing


def test_a_tag_freed_as_a_request_reusing_it_enters_is_not_refused():
    """Registered, a request is decoded as it enters the target, with the tags then
    tracked; one freed before the request is served no longer counts. The host sends
    the second read with tag 7 in the cycle it takes the first one's data."""
    h = Harness(CFG.replace(register_slices=True))
    cxl = h.target.cxl

    async def tb(ctx):
        await stream_put(ctx, cxl.m2s_req, {"opcode": M2SReqOpcode.MemRd, "tag": 7, "addr": hpa(2)})
        for _ in range(200):
            if ctx.get(cxl.s2m_drs.valid):
                break
            await ctx.tick()
        ctx.set(cxl.s2m_drs.ready, 1)
        await stream_put(ctx, cxl.m2s_req, {"opcode": M2SReqOpcode.MemRd, "tag": 7, "addr": hpa(3)})
        got = await stream_get(ctx, cxl.s2m_drs)
        assert (got.tag, got.poison) == (7, 0)
        assert ctx.get(h.target.errors) == 0

    sim = Simulator(h)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()


def test_the_error_log_keeps_the_newest_refusals_first():
    outside = CFG.hdm_base + CFG.media_lines
    h = Harness(CFG)
    cxl = h.target.cxl

    async def tb(ctx):
        ctx.set(cxl.s2m_drs.ready, 1)
        for k in range(6):
            await stream_put(ctx, cxl.m2s_req,
                             {"opcode": M2SReqOpcode.MemRd, "tag": 100 + k, "addr": outside + k})
        await ctx.tick().repeat(3)
        assert ctx.get(h.target.errors) == 6
        log = [ctx.get(r) for r in h.target.log]
        assert [r.seq for r in log] == [6, 5, 4, 3]
        assert [r.tag for r in log] == [105, 104, 103, 102]
        assert [r.addr for r in log] == [outside + 5, outside + 4, outside + 3, outside + 2]
        assert all(r.kind == MemError.UNMAPPED for r in log)

    sim = Simulator(h)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()

"""PMEM controller model in amaranth.sim: data, timing, bandwidth, hazards, power failure."""

import random

import pytest

from trainingcxl.hdl.common.line_port import LineOp
from trainingcxl.hdl.pmem.controller import PmemController
from trainingcxl.spec.config import Config, PmemTiming
from trainingcxl.sim.amaranth_streams import simulate as run, stream_get, stream_put

FULL = (1 << 64) - 1


def small_config(registered=False, beats=1, **timing):
    """``registered``: the boards' register slices, which register the read hazard check;
    ``beats``: the read data moves in that many beats (``Config.line_beats``)."""
    # The volatile write-pending queue unless a test asks for the energy-backed buffer.
    t = dict(read_latency=8 + 2 * (beats - 1), write_latency=12, read_rate=(3, 5), write_rate=(1, 4),
             wpq_depth=4, read_depth=8, buffer_lines=0)
    t.update(timing)
    return Config(tables=(16, 16), pmem=PmemTiming(**t), log_lines=14, commit_lines=2,
                  snapshot_lines=2, register_slices=registered, line_beats=beats)


#: The boards' variants: register slices, and with them read data in beats.
VARIANTS = pytest.mark.parametrize("registered, beats", [(False, 1), (True, 1), (True, 4)],
                                   ids=["plain", "registered", "beats"])


def line(seed):
    return random.Random(seed).getrandbits(512)




def req(op, addr, tag=0, data=0, be=FULL):
    return {"op": op, "addr": addr, "tag": tag, "data": data, "be": be}


async def write(ctx, port, addr, data, be=FULL, tag=0):
    await stream_put(ctx, port.req, req(LineOp.WRITE, addr, tag, data, be))
    ack = await stream_get(ctx, port.wack)
    assert ack.tag == tag


async def read(ctx, port, addr, tag=0):
    await stream_put(ctx, port.req, req(LineOp.READ, addr, tag))
    rsp = await stream_get(ctx, port.rdata)
    assert rsp.tag == tag
    return rsp.data


@VARIANTS
def test_write_then_read_across_ports_with_byte_enables(registered, beats):
    cfg = small_config(registered, beats)
    dut = PmemController(cfg, n_ports=2)
    ref = {}

    async def tb(ctx):
        rng = random.Random(1)
        for i in range(12):
            addr = rng.randrange(cfg.media_lines)
            d = line(i)
            be = FULL if i % 2 else rng.getrandbits(64)
            await write(ctx, dut.port0, addr, d, be, tag=i)
            old = ref.get(addr, 0)
            mask = sum(0xFF << (8 * b) for b in range(64) if (be >> b) & 1)
            ref[addr] = (old & ~mask) | (d & mask)
        for addr, want in ref.items():
            assert await read(ctx, dut.port1, addr, tag=addr) == want

    run(dut, tb)


@VARIANTS
def test_writes_from_every_port_at_once_land_whole(registered, beats):
    """Three ports write at once: in beats, each line moves into the WPQ after its take
    while the other ports' lines wait in their receivers, and every line lands whole."""
    cfg = small_config(registered, beats)
    dut = PmemController(cfg, n_ports=3)
    want = {3 * k + i: line(100 + 3 * k + i) for i in range(3) for k in range(5)}
    done = []

    def writer(i):
        async def tb(ctx):
            for k in range(5):
                addr = 3 * k + i
                await write(ctx, dut.ports[i], addr, want[addr], tag=addr)
            done.append(i)
        return tb

    async def check(ctx):
        while len(done) < 3:
            await ctx.tick()
        for addr, value in want.items():
            assert await read(ctx, dut.port0, addr, tag=addr) == value, addr

    run(dut, check, writer(0), writer(1), writer(2))


@VARIANTS
def test_latencies_match_configuration(registered, beats):
    cfg = small_config(registered, beats, read_latency=14, write_latency=13, read_rate=(1, 1),
                       write_rate=(1, 1))
    dut = PmemController(cfg, n_ports=1)
    seen = {}

    async def tb(ctx):
        p = dut.port0
        ctx.set(p.wack.ready, 1)
        ctx.set(p.rdata.ready, 1)
        await stream_put(ctx, p.req, req(LineOp.WRITE, 3, data=5))
        for t in range(100):
            if ctx.get(p.wack.valid):
                seen["write"] = t
                break
            await ctx.tick()
        await stream_put(ctx, p.req, req(LineOp.READ, 3))
        for t in range(100):
            if ctx.get(p.rdata.valid):
                seen["read"] = t
                assert ctx.get(p.rdata.payload.data) == 5
                break
            await ctx.tick()

    run(dut, tb)
    # Counted from the cycle after the request was taken.
    assert seen == {"write": 13 - 1, "read": 14 - 1}


@pytest.mark.parametrize("rate, registered, beats", [
    ((3, 5), False, 1), ((1, 2), False, 1), ((1, 1), False, 1),
    ((1, 6), True, 1), ((2, 7), True, 1), ((1, 6), True, 4), ((1, 80), True, 8)])
def test_read_bandwidth_is_the_configured_rate(rate, registered, beats):
    """Registered, a port offers a read every third cycle, and in beats it takes a line
    every ``beats + 1`` cycles: a rate slower than both still holds exactly (the rate is
    paid a cycle after the take, and that cycle loses no credit)."""
    cfg = small_config(registered, beats, read_rate=rate, read_depth=16)
    dut = PmemController(cfg, n_ports=1)
    n = 60
    times = []

    async def issue(ctx):
        for i in range(n):
            await stream_put(ctx, dut.port0.req, req(LineOp.READ, i % cfg.media_lines, tag=i))

    async def collect(ctx):
        ctx.set(dut.port0.rdata.ready, 1)
        t = 0
        while len(times) < n:
            if ctx.get(dut.port0.rdata.valid):
                assert ctx.get(dut.port0.rdata.payload.tag) == len(times)
                times.append(t)
            await ctx.tick()
            t += 1

    run(dut, issue, collect)
    achieved = (n - 1) / (times[-1] - times[0])
    # One event a period is exact; a rate of several averages over bursts.
    assert achieved == pytest.approx(rate[0] / rate[1], rel=0.06 if rate[0] > 1 else 1e-3)


@VARIANTS
@pytest.mark.parametrize("gap", [0, 1, 2])
def test_read_after_write_sees_the_pending_write(registered, beats, gap):
    """The read is offered ``gap`` cycles after the write was taken."""
    cfg = small_config(registered, beats, write_latency=30)
    dut = PmemController(cfg, n_ports=2)

    async def tb(ctx):
        ctx.set(dut.port0.wack.ready, 1)
        await stream_put(ctx, dut.port0.req, req(LineOp.WRITE, 5, data=0xABC))
        for _ in range(gap):
            await ctx.tick()
        # The write is still pending: the read must wait for it, not see 0.
        assert await read(ctx, dut.port1, 5) == 0xABC

    run(dut, tb)


def test_registered_check_sees_a_write_taken_in_the_reads_first_cycle():
    """Registered hazard check: a read and a write of one line offered together. The read
    is not yet eligible, so the write is taken; the read's check, made before the write
    was pending, must not let it through in the next cycle."""
    cfg = small_config(True, write_latency=30)
    dut = PmemController(cfg, n_ports=2)

    async def tb(ctx):
        ctx.set(dut.port0.wack.ready, 1)
        ctx.set(dut.port0.req.valid, 1)
        ctx.set(dut.port0.req.payload, req(LineOp.WRITE, 5, data=0xABC))
        assert await read(ctx, dut.port1, 5) == 0xABC

    async def drop_write(ctx):
        await ctx.tick().until(dut.port0.req.ready)
        ctx.set(dut.port0.req.valid, 0)

    run(dut, tb, drop_write)


def test_power_fail_drops_queued_writes_and_keeps_persisted_ones():
    cfg = small_config(write_latency=40, wpq_depth=4)
    dut = PmemController(cfg, n_ports=1)

    async def tb(ctx):
        p = dut.port0
        await write(ctx, p, 1, 0x1111)            # acknowledged: persistent
        await write(ctx, p, 2, 0x2222)
        await stream_put(ctx, p.req, req(LineOp.WRITE, 2, data=0xDEAD))   # still queued
        await stream_put(ctx, p.req, req(LineOp.WRITE, 3, data=0xBEEF))   # still queued
        assert ctx.get(dut.wpq_level) == 2
        ctx.set(dut.power_fail, 1)
        await ctx.tick()
        ctx.set(dut.power_fail, 0)
        assert ctx.get(dut.wpq_level) == 0
        for _ in range(100):                      # no late acknowledgement after the failure
            assert not ctx.get(p.wack.valid)
            await ctx.tick()
        assert await read(ctx, p, 1) == 0x1111
        assert await read(ctx, p, 2) == 0x2222
        assert await read(ctx, p, 3) == 0

    run(dut, tb)


def test_write_bandwidth_and_queue_backpressure():
    cfg = small_config(write_latency=4, write_rate=(1, 4), wpq_depth=4)
    dut = PmemController(cfg, n_ports=1)
    acks = []

    async def issue(ctx):
        for i in range(24):
            await stream_put(ctx, dut.port0.req, req(LineOp.WRITE, i, tag=i, data=i))

    async def collect(ctx):
        ctx.set(dut.port0.wack.ready, 1)
        t = 0
        while len(acks) < 24:
            assert ctx.get(dut.wpq_level) <= 4
            if ctx.get(dut.port0.wack.valid):
                acks.append((t, ctx.get(dut.port0.wack.payload.tag)))
            await ctx.tick()
            t += 1

    run(dut, issue, collect)
    assert [tag for _, tag in acks] == list(range(24))
    assert (acks[-1][0] - acks[0][0]) / 23 == pytest.approx(4, rel=0.05)


def test_a_line_written_as_the_power_fails_is_torn_at_8_byte_granularity():
    cfg = small_config(write_latency=6, write_rate=(1, 1))
    old = sum(0x1111111111111111 << (64 * k) for k in range(8))
    new = sum(0x2222222222222222 << (64 * k) for k in range(8))
    outcomes = []

    for delay in range(6):
        dut = PmemController(cfg, n_ports=1)

        async def tb(ctx):
            p = dut.port0
            await write(ctx, p, 7, old)
            for _ in range(delay):                 # vary the pseudo-random tear
                await ctx.tick()
            await stream_put(ctx, p.req, req(LineOp.WRITE, 7, data=new))
            ctx.set(p.wack.ready, 1)
            for _ in range(50):                   # fail exactly as the line leaves the queue
                if ctx.get(p.wack.valid):
                    ctx.set(dut.power_fail, 1)
                    break
                await ctx.tick()
            await ctx.tick()
            ctx.set(dut.power_fail, 0)
            ctx.set(p.wack.ready, 0)
            outcomes.append(await read(ctx, p, 7))

        run(dut, tb)
    words = [[(v >> (64 * k)) & (2**64 - 1) for k in range(8)] for v in outcomes]
    # Every 8-byte word is wholly old or wholly new, and some line mixes both.
    assert all(w in (0x1111111111111111, 0x2222222222222222) for line in words for w in line)
    assert any(len(set(line)) == 2 for line in words)


def test_background_port_takes_only_what_the_foreground_leaves():
    """Port 1 is background: while port 0 keeps the write queue busy, port 1's writes wait;
    they go through once port 0 stops. Region counters tell tables from the log."""
    cfg = small_config(write_latency=4, write_rate=(1, 2), wpq_depth=4)
    dut = PmemController(cfg, n_ports=2, background=(1,))
    order = []

    async def fg(ctx):
        p = dut.port0
        ctx.set(p.wack.ready, 1)
        for i in range(12):
            await stream_put(ctx, p.req, req(LineOp.WRITE, i % 4, tag=i, data=i))
            order.append(("fg", i))

    async def bg(ctx):
        p = dut.port1
        ctx.set(p.wack.ready, 1)
        await ctx.tick().repeat(2)
        for i in range(3):
            await stream_put(ctx, p.req, req(LineOp.WRITE, cfg.log_base + i, tag=i, data=i))
            order.append(("bg", i))

    async def counts(ctx):
        while len(order) < 15:
            await ctx.tick()
        await ctx.tick().repeat(30)             # the last writes reach the media
        assert ctx.get(dut.writes_by_region[0]) == 12
        assert ctx.get(dut.writes_by_region[1]) == 3
        assert ctx.get(dut.lines_written) == 15

    run(dut, fg, bg, counts)
    first_bg = order.index(("bg", 0))
    assert all(kind == "fg" for kind, _ in order[:first_bg]) and first_bg >= 10, order


# -- the energy-backed write buffer (pmem.buffer_lines) -------------------------------------

def buffered_config(**timing):
    return small_config(**{"write_latency": 40, "write_rate": (1, 8), "buffer_lines": 4,
                           "buffer_latency": 6, **timing})


def test_a_buffered_write_is_persistent_and_seen_at_once_and_survives_a_power_failure():
    """With the buffer the persistence domain is the buffer: a write is acknowledged
    ``buffer_latency`` cycles after its take (not after the media's write latency),
    a read right after it sees it, and a power failure loses nothing taken."""
    cfg = buffered_config()
    dut = PmemController(cfg, n_ports=1)

    async def tb(ctx):
        p = dut.port0
        ctx.set(p.wack.ready, 1)
        await stream_put(ctx, p.req, req(LineOp.WRITE, 3, tag=7, data=0x3333))
        t = 0
        while not ctx.get(p.wack.valid):
            await ctx.tick()
            t += 1
        assert t < cfg.pmem.write_latency // 2       # the buffer's latency, not the media's
        assert await read(ctx, p, 3) == 0x3333
        # Taken but not yet acknowledged: still persistent once the buffer has it.
        await stream_put(ctx, p.req, req(LineOp.WRITE, 4, data=0x4444))
        ctx.set(dut.power_fail, 1)
        await ctx.tick()
        ctx.set(dut.power_fail, 0)
        assert await read(ctx, p, 3) == 0x3333
        assert await read(ctx, p, 4) == 0x4444

    run(dut, tb)


def test_the_buffer_holds_at_most_buffer_lines_for_the_media_and_keeps_the_checkpoint_region():
    """Lines for the media wait in the buffer until the write rate drains them: no more
    than ``buffer_lines`` are taken ahead of the media, while the checkpoint region's
    lines (the log ring's, the MLP snapshot slots') are taken at once, even with the
    buffer full, counted as buffered and never as media writes."""
    cfg = buffered_config(write_rate=(1, 50))
    dut = PmemController(cfg, n_ports=2)
    kept = [cfg.log_base, cfg.log_base + 1, cfg.snapshot_base[0], cfg.media_lines - 1]
    kept_at = []

    async def tables(ctx):
        for i in range(8):                       # table lines, faster than the media drains
            await stream_put(ctx, dut.port0.req, req(LineOp.WRITE, i, tag=i, data=i))

    async def checkpoint(ctx):
        await ctx.tick().repeat(20)              # the buffer is full of table lines by now
        for i, addr in enumerate(kept):
            await stream_put(ctx, dut.port1.req, req(LineOp.WRITE, addr, tag=i, data=i))
            kept_at.append(ctx.get(dut.lines_written))

    async def acks(ctx):
        ctx.set(dut.port0.wack.ready, 1)
        ctx.set(dut.port1.wack.ready, 1)
        first = None
        n = t = 0
        while n < 8:
            if ctx.get(dut.port0.wack.valid):
                n += 1
                first = t if first is None else first
            await ctx.tick()
            t += 1
        # Four writes beyond the buffer's four: the last was taken once the fourth line
        # had drained (the first drains at once, then one every 50 cycles).
        assert 3 * 50 - 10 <= t - first <= 3 * 50 + 20
        await ctx.tick().repeat(4)
        assert ctx.get(dut.lines_buffered) == 4
        assert ctx.get(dut.lines_written) == 8
        assert ctx.get(dut.writes_by_region[1]) == ctx.get(dut.writes_by_region[2]) == 0

    run(dut, tables, checkpoint, acks)
    # The checkpoint lines went in while table lines still waited for room (5 of 8 taken).
    assert kept_at and max(kept_at) <= 5


def test_buffer_mode_is_refused_for_the_boards_media():
    from trainingcxl.spec.config import ConfigError
    with pytest.raises(ConfigError, match="buffer_lines"):
        small_config(registered=True, buffer_lines=4)

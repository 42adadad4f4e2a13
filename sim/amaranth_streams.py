"""Stream helpers for unit tests in ``amaranth.sim`` (async testbenches)."""

__all__ = ["stream_put", "stream_get", "Timeout", "wait_until", "simulate"]


class Timeout(AssertionError):
    """A testbench waited longer than its bound."""


async def stream_put(ctx, stream, payload, *, timeout=10_000):
    """Offer ``payload`` on ``stream`` and wait until it is taken."""
    ctx.set(stream.valid, 1)
    ctx.set(stream.payload, payload)
    for _ in range(timeout):
        ready = ctx.get(stream.ready)
        await ctx.tick()
        if ready:
            ctx.set(stream.valid, 0)
            return
    raise Timeout(f"stream_put: not taken in {timeout} cycles")


async def stream_get(ctx, stream, *, timeout=10_000):
    """Take one payload from ``stream``."""
    ctx.set(stream.ready, 1)
    for _ in range(timeout):
        valid, payload = ctx.get(stream.valid), ctx.get(stream.payload)
        await ctx.tick()
        if valid:
            ctx.set(stream.ready, 0)
            return payload
    raise Timeout(f"stream_get: nothing in {timeout} cycles")


async def wait_until(ctx, signal, *, timeout=10_000):
    for _ in range(timeout):
        if ctx.get(signal):
            return
        await ctx.tick()
    raise Timeout(f"wait_until: {signal!r} stayed low for {timeout} cycles")


def simulate(dut, *testbenches, background=(), period=1e-8):
    """Run ``testbenches`` (and ``background`` ones) on ``dut`` with a clock until they end."""
    from amaranth.sim import Simulator
    sim = Simulator(dut)
    sim.add_clock(period)
    for tb in testbenches:
        sim.add_testbench(tb)
    for tb in background:
        sim.add_testbench(tb, background=True)
    sim.run()

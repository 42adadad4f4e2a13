"""The round-robin arbiter against a reference: every request pattern, every last grant."""

import itertools

import pytest

from trainingcxl.hdl.common.arbiter import RoundRobin
from trainingcxl.sim.amaranth_streams import simulate


def _reference(requests, last, n):
    for off in range(1, n + 1):
        i = (last + off) % n
        if requests >> i & 1:
            return i
    return None


@pytest.mark.parametrize("late_mask", [False, True])
@pytest.mark.parametrize("n", [1, 2, 3, 5, 7])
def test_round_robin_grants_the_first_requester_after_the_last_one_served(n, late_mask):
    """With ``late_mask`` the search starts after the last grant from its second cycle on."""
    dut = RoundRobin(n, late_mask=late_mask)
    checked = []

    async def bench(ctx):
        for last in range(n):
            # Make ``last`` the last grant: request it alone and advance.
            ctx.set(dut.requests, 1 << last)
            ctx.set(dut.advance, 1)
            await ctx.tick()
            ctx.set(dut.advance, 0)
            if late_mask:
                await ctx.tick()
            for requests in range(1 << n):
                ctx.set(dut.requests, requests)
                want = _reference(requests, last, n)
                assert ctx.get(dut.valid) == (want is not None)
                assert ctx.get(dut.onehot) == (0 if want is None else 1 << want)
                if want is not None:
                    assert ctx.get(dut.grant) == want, (n, last, bin(requests))
                checked.append(requests)
                await ctx.tick()        # no advance: ``last`` stays

    simulate(dut, bench)
    assert len(checked) == n << n


def test_round_robin_serves_every_steady_requester_in_turn():
    dut = RoundRobin(5)
    order = []

    async def bench(ctx):
        ctx.set(dut.requests, 0b10110)
        ctx.set(dut.advance, 1)
        for _ in range(6):
            order.append(ctx.get(dut.grant))
            await ctx.tick()

    simulate(dut, bench)
    assert order == [1, 2, 4, 1, 2, 4]

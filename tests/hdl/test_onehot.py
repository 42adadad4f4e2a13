"""Selection by a one-hot vector: the value whose bit is set, zero for none."""

import pytest
from amaranth import *
from amaranth.sim import Simulator

from trainingcxl.hdl.common.onehot import one_hot_select


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_one_hot_select_gives_the_value_of_the_bit_set(n):
    onehot = Signal(n)
    values = [Signal(8, name=f"v{k}") for k in range(n)]
    out = Signal(8)
    m = Module()
    m.d.comb += out.eq(one_hot_select(onehot, values))
    seen = []

    async def bench(ctx):
        for k, v in enumerate(values):
            ctx.set(v, 0x11 * (k + 1) + 3)
        ctx.set(onehot, 0)
        assert ctx.get(out) == 0
        for k in range(n):
            ctx.set(onehot, 1 << k)
            assert ctx.get(out) == 0x11 * (k + 1) + 3, k
            seen.append(k)

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert seen == list(range(n))
